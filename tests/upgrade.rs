//! A rolling upgrade (docs/upgrade.md, issue 32): one clusterset whose two
//! members run different builds of the controller, each importing the
//! other's exports, in the order the page gives:
//!
//! 1. the legacy reader grants (`deploy/upgrade/peer-reader-legacy.yaml`)
//!    in both members, beside this release's narrow role;
//! 2. cluster0 on the previous build ([`PREVIOUS`], built from this
//!    repository's history), cluster1 on this one: each imports the other's
//!    export with its endpoint;
//! 3. cluster0 upgraded: both imports stay, and cluster1 now reads
//!    cluster0's publication;
//! 4. the legacy grants deleted: both imports stay, and a reader token gets
//!    403 for Services and EndpointSlices outside the publication.
//!
//! The previous build is compiled once into `target/previous` and cached in
//! `~/.cache/clusterset-dns/previous/<commit>/` (a few minutes the first
//! time on two cores).

mod controlplane;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use controlplane::{
    CONTROLLER_NAMESPACE, ClusterSpec, ControlPlane, ControllerProcess, PEER_READER_SA,
    add_peer_secret, apply_file, client_from_yaml, install_controller, service_account_kubeconfig,
    set_cluster_properties, spawn_controller, spawn_controller_binary,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use clusterset_dns::api::{ServiceExport, ServiceImport};
use support::object;

/// The previous build: the last commit before the publication (issue 32),
/// which read its peers' Services and EndpointSlices in every namespace.
const PREVIOUS: &str = "3a3409ee7c93c82ece62042ab66242838084b707";

const WAIT: Duration = Duration::from_secs(60);
const NS: &str = "shop";
/// The legacy grants' objects (both named so).
const LEGACY: &str = "clusterset-dns-peer-reader-legacy";

/// The previous build's binary, built on first use.
fn previous_binary() -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME");
    let cached = Path::new(&home)
        .join(".cache/clusterset-dns/previous")
        .join(PREVIOUS)
        .join("clusterset-dns");
    if cached.is_file() {
        return cached;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = Command::new("git")
        .args(["cat-file", "-e", &format!("{PREVIOUS}^{{commit}}")])
        .current_dir(repo)
        .status()
        .expect("running git");
    assert!(
        found.success(),
        "commit {PREVIOUS} (the previous build this test upgrades from) is not in this checkout's history; fetch it (`git fetch --unshallow`)"
    );
    let work = repo.join("target/previous");
    let source = work.join(format!("src-{PREVIOUS}"));
    let _ = std::fs::remove_dir_all(&source);
    std::fs::create_dir_all(&source).unwrap();
    let t0 = Instant::now();
    let unpacked = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "git archive {PREVIOUS} | tar -x -C '{}'",
            source.display()
        ))
        .current_dir(repo)
        .status()
        .unwrap();
    assert!(unpacked.success(), "git archive {PREVIOUS} failed");
    // Its own target directory: the running `cargo test` may hold ours.
    let built = Command::new(env!("CARGO"))
        .args(["build", "--locked", "--bin", "clusterset-dns"])
        .arg("--manifest-path")
        .arg(source.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(work.join("target"))
        // No debug info: faster to build, and nothing here debugs it.
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .status()
        .unwrap();
    assert!(built.success(), "building {PREVIOUS} failed");
    eprintln!(
        "previous build {PREVIOUS} compiled in {:.0} s",
        t0.elapsed().as_secs_f64()
    );
    std::fs::create_dir_all(cached.parent().unwrap()).unwrap();
    let partial = cached.with_extension("partial");
    std::fs::copy(work.join("target/debug/clusterset-dns"), &partial).unwrap();
    std::fs::rename(&partial, &cached).unwrap();
    let _ = std::fs::remove_dir_all(&source);
    cached
}

/// A selector-less Service `name` with one hand-made Kubernetes slice at
/// `address` (what the EndpointSlice controller would write), exported.
async fn export(client: &Client, name: &str, address: &str) {
    Api::<Service>::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &object(json!({
                "metadata": {"name": name},
                "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
            })),
        )
        .await
        .unwrap();
    Api::<EndpointSlice>::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &object(json!({
                "metadata": {"name": format!("{name}-abcde"), "labels": {"kubernetes.io/service-name": name}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [address], "conditions": {"ready": true}}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            })),
        )
        .await
        .unwrap();
    Api::<ServiceExport>::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": name}})),
        )
        .await
        .unwrap();
}

/// The addresses `client`'s cluster imports for `service` from `source`.
async fn imported(client: &Client, service: &str, source: &str) -> Vec<String> {
    let import = Api::<ServiceImport>::namespaced(client.clone(), NS)
        .get_opt(service)
        .await
        .unwrap();
    if import.is_none() {
        return Vec::new();
    }
    let params = ListParams::default().labels(&format!(
        "multicluster.kubernetes.io/service-name={service},multicluster.kubernetes.io/source-cluster={source}"
    ));
    let mut addresses: Vec<String> = Api::<EndpointSlice>::namespaced(client.clone(), NS)
        .list(&params)
        .await
        .unwrap()
        .items
        .iter()
        .flat_map(|slice| slice.endpoints.iter().flat_map(|e| e.addresses.clone()))
        .collect();
    addresses.sort();
    addresses
}

/// Waits until each cluster imports the other's export with its endpoint.
async fn both_import(clients: &[Client], controllers: &[&ControllerProcess], what: &str) {
    support::wait_for(what, WAIT, || async {
        let on_0 = imported(&clients[0], "from-1", "cluster1").await;
        let on_1 = imported(&clients[1], "from-0", "cluster0").await;
        if on_0 == ["10.244.1.1"] && on_1 == ["10.244.0.1"] {
            Ok(())
        } else {
            Err(format!(
                "cluster0 imports {on_0:?}, cluster1 {on_1:?}; logs:\n{}\n---\n{}",
                controllers[0].log(),
                controllers[1].log()
            ))
        }
    })
    .await;
}

/// The status of listing `T` cluster-wide with `client`.
async fn list_code<T>(client: &Client) -> u16
where
    T: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match Api::<T>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(_) => 200,
        Err(kube::Error::Api(status)) => status.code,
        Err(other) => panic!("{other}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_previous_build_and_this_one_import_each_other_through_a_rolling_upgrade() {
    let previous = tokio::task::spawn_blocking(previous_binary).await.unwrap();
    let t0 = Instant::now();
    let plane = ControlPlane::start_with(&[ClusterSpec::api_only(), ClusterSpec::api_only()]).await;
    let mut clients = Vec::new();
    let mut kubeconfigs = Vec::new();
    for cluster in &plane.clusters {
        let client = cluster.admin_client().await;
        set_cluster_properties(&client, &cluster.name, "upgrade-test").await;
        kubeconfigs.push(install_controller(cluster).await);
        // Step 1: the previous build's grants beside the new role.
        apply_file(
            &client,
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/upgrade/peer-reader-legacy.yaml"),
        )
        .await;
        Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &object(json!({"metadata": {"name": NS}})),
            )
            .await
            .unwrap();
        clients.push(client);
    }
    let mut readers = Vec::new();
    for (i, client) in clients.iter().enumerate() {
        let other = &plane.clusters[1 - i];
        let reader =
            service_account_kubeconfig(other, CONTROLLER_NAMESPACE, PEER_READER_SA, 3600).await;
        add_peer_secret(client, &other.name, &reader).await;
        readers.push(reader);
    }
    let args = [
        "--peer-grace-period",
        "30s",
        "--startup-sync-timeout",
        "10s",
    ];
    // Step 2: cluster0 on the previous build, cluster1 on this one.
    let old = spawn_controller_binary(&plane.clusters[0], &previous, &kubeconfigs[0], &args);
    let new = spawn_controller(&plane.clusters[1], &kubeconfigs[1], &args);
    export(&clients[0], "from-0", "10.244.0.1").await;
    export(&clients[1], "from-1", "10.244.1.1").await;
    both_import(&clients, &[&old, &new], "mixed builds import each other").await;
    eprintln!(
        "mixed: imported both ways {:.1} s after start",
        t0.elapsed().as_secs_f64()
    );
    assert!(
        new.log()
            .contains("reading the peer peer=cluster0 form=Legacy"),
        "this build reads the previous one as it publishes:\n{}",
        new.log()
    );

    // Step 3: cluster0 upgraded.
    old.kill();
    let t_upgrade = Instant::now();
    let upgraded = spawn_controller(&plane.clusters[0], &kubeconfigs[0], &args);
    support::wait_for("cluster1 reads cluster0's publication", WAIT, || async {
        if new
            .log()
            .contains("reading the peer peer=cluster0 form=Published")
        {
            Ok(())
        } else {
            Err(new.log())
        }
    })
    .await;
    both_import(&clients, &[&upgraded, &new], "both upgraded").await;
    eprintln!(
        "upgraded: cluster1 reads the publication {:.1} s after the restart",
        t_upgrade.elapsed().as_secs_f64()
    );

    // Step 4: the legacy grants go; nothing else does.
    for client in &clients {
        Api::<ClusterRoleBinding>::all(client.clone())
            .delete(LEGACY, &DeleteParams::default())
            .await
            .unwrap();
        Api::<ClusterRole>::all(client.clone())
            .delete(LEGACY, &DeleteParams::default())
            .await
            .unwrap();
    }
    for reader in &readers {
        let reader = client_from_yaml(reader).await;
        support::wait_for("the legacy grants gone", WAIT, || async {
            let codes = [
                list_code::<Service>(&reader).await,
                list_code::<EndpointSlice>(&reader).await,
            ];
            if codes == [403, 403] {
                Ok(())
            } else {
                Err(format!("{codes:?}"))
            }
        })
        .await;
    }
    // Past a probe round or two, nothing was dropped.
    tokio::time::sleep(Duration::from_secs(5)).await;
    both_import(
        &clients,
        &[&upgraded, &new],
        "still imported on the narrow role",
    )
    .await;
    for controller in [&upgraded, &new] {
        assert!(
            !controller.log().contains("peer watch failing"),
            "{}",
            controller.log()
        );
    }
}
