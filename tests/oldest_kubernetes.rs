//! What only the oldest supported Kubernetes (`K8S_OLDEST`, 1.33) can show
//! (issue 47, docs/compatibility.md), on its real kube-apiservers:
//!
//! - below it: an apiserver run with `--emulated-version` of the release
//!   before serves that release's API (no `networking.k8s.io/v1`
//!   ServiceCIDRs). The controller says why it does not start, stays up
//!   and not ready (no crash loop), and starts without a restart once the
//!   control plane serves a supported release;
//! - node hints refused: 1.33 refuses `trafficDistribution:
//!   PreferSameNode` unless its `PreferSameTrafficDistribution` gate is on.
//!   A clusterset whose exporter has the gate and whose importer does not
//!   (a mixed clusterset, as during an upgrade): the importer's derived
//!   Service gets `PreferClose`, its slices zone hints only, `/explain`
//!   says why, and nothing is written again and again.
//!
//! Every run uses the oldest release's binaries for this file, whatever
//! `CLUSTERSET_DNS_KUBERNETES` says (`scripts/test.sh` builds both).
#![cfg(feature = "testenv")]

mod controlplane;
mod support;

use std::time::Duration;

use controlplane::{
    ControlPlane, export_selectorless, install_controller, join_peers, kubernetes_pin,
    set_cluster_properties, spawn_controller, use_oldest_kubernetes,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use support::{counter, create_namespace, http_get, wait_for};

/// Longer than the controller's re-read of `/version` (60 s) and a start.
const WAIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_refuses_an_older_kubernetes_without_crashing_and_starts_after_its_upgrade()
{
    use_oldest_kubernetes();
    let oldest = kubernetes_pin("K8S_OLDEST");
    let minor: u32 = oldest
        .trim_start_matches("v1.")
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .expect("K8S_OLDEST is v1.N.M");
    let older = format!("1.{}", minor - 1);

    let mut plane = ControlPlane::start(1).await;
    plane.apiservers[0].stop();
    plane.apiservers[0].start_with(&[&format!("--emulated-version=kube={older}")]);
    let cluster = &plane.clusters[0];
    let client = cluster.admin_client().await;
    // The premise: the apiserver serves the older API and says so.
    let version = client.apiserver_version().await.expect("/version");
    assert_eq!(
        (
            version.emulation_major.as_deref(),
            version.emulation_minor.as_deref()
        ),
        (Some("1"), Some(older.trim_start_matches("1."))),
        "{version:?}"
    );
    set_cluster_properties(&client, "cluster0", "set").await;
    let kubeconfig = install_controller(cluster).await;
    let controller = spawn_controller(cluster, &kubeconfig, &[]);

    // Not ready, and why, from /ready; alive throughout.
    wait_for("/ready to say why", WAIT, || async {
        let (status, body) = http_get(controller.admin_addr(), "/ready").await;
        if status == 503
            && body.contains(&format!("Kubernetes {older}"))
            && body.contains(&format!("1.{minor} or later"))
        {
            Ok(())
        } else {
            Err(format!("{status} {body}"))
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    controller.assert_running();
    let log = controller.log();
    assert_eq!(log.matches("not starting").count(), 1, "said once:\n{log}");
    assert!(
        !log.contains("cluster identity"),
        "nothing started (not even its identity read):\n{log}"
    );

    // The control plane upgraded under it: ready without a restart.
    let pid = controller.pid();
    plane.apiservers[0].stop();
    plane.apiservers[0].start_without("--emulated-version");
    controller.wait_ready(WAIT);
    assert_eq!(controller.pid(), pid, "the same process");
}

/// The gate 1.33 has node hints behind (alpha, off by default).
const NODE_HINTS_GATE: &str = "--feature-gates=PreferSameTrafficDistribution=true";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_hints_an_importer_refuses_become_zone_hints_written_once() {
    use_oldest_kubernetes();
    let ns = "shop";
    let mut plane = ControlPlane::start_members(2, |_| false).await;
    // cluster0 exports with PreferSameNode (its gate on); cluster1 refuses it.
    plane.apiservers[0].stop();
    plane.apiservers[0].start_with(&[NODE_HINTS_GATE]);
    let mut clients = Vec::new();
    for (i, cluster) in plane.clusters.iter().enumerate() {
        let client = cluster.admin_client().await;
        set_cluster_properties(&client, &format!("cluster{i}"), "set").await;
        create_namespace(&client, ns).await;
        clients.push(client);
    }
    let mut kubeconfigs = Vec::new();
    for cluster in &plane.clusters {
        kubeconfigs.push(install_controller(cluster).await);
    }
    join_peers(&plane.clusters).await;
    export_selectorless(
        &clients[0],
        ns,
        "web",
        json!([{"name": "http", "port": 80, "protocol": "TCP"}]),
        &["10.200.0.10"],
    )
    .await;
    Api::<Service>::namespaced(clients[0].clone(), ns)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"trafficDistribution": "PreferSameNode"}})),
        )
        .await
        .expect("cluster0 (gate on) accepts PreferSameNode");
    let mut controllers = Vec::new();
    for (cluster, kubeconfig) in plane.clusters.iter().zip(&kubeconfigs) {
        controllers.push(spawn_controller(cluster, kubeconfig, &[]));
    }
    for controller in &controllers {
        controller.wait_ready(WAIT);
    }
    assert!(
        controllers[1]
            .log()
            .contains("refuses trafficDistribution PreferSameNode"),
        "cluster1's controller says what it found:\n{}",
        controllers[1].log()
    );

    // Each derived Service and imported slice as its apiserver takes them.
    let written = |client: kube::Client| async move {
        let services = Api::<Service>::namespaced(client.clone(), ns)
            .list(&ListParams::default().labels("multicluster.kubernetes.io/service-name=web"))
            .await
            .map_err(|e| e.to_string())?;
        let derived = services
            .items
            .iter()
            .find_map(|s| s.spec.as_ref()?.traffic_distribution.clone())
            .ok_or("no derived Service with a trafficDistribution yet")?;
        let slices = Api::<EndpointSlice>::namespaced(client, ns)
            .list(&ListParams::default().labels("multicluster.kubernetes.io/service-name=web"))
            .await
            .map_err(|e| e.to_string())?;
        let hints: Vec<(bool, bool)> = slices
            .items
            .iter()
            .flat_map(|slice| &slice.endpoints)
            .map(|e| {
                let hints = e.hints.as_ref();
                (
                    hints.and_then(|h| h.for_zones.as_ref()).is_some(),
                    hints.and_then(|h| h.for_nodes.as_ref()).is_some(),
                )
            })
            .collect();
        if hints.is_empty() {
            return Err("no imported endpoint yet".to_owned());
        }
        Ok((derived, hints))
    };
    let (derived, hints) = wait_for("cluster0's derived Service and slices", WAIT, || {
        written(clients[0].clone())
    })
    .await;
    assert_eq!(derived, "PreferSameNode");
    assert!(
        hints.iter().all(|&(zones, nodes)| zones && nodes),
        "{hints:?}"
    );
    let (derived, hints) = wait_for("cluster1's derived Service and slices", WAIT, || {
        written(clients[1].clone())
    })
    .await;
    assert_eq!(derived, "PreferClose");
    assert!(
        hints.iter().all(|&(zones, nodes)| zones && !nodes),
        "{hints:?}"
    );

    // /explain says what was asked and what is written.
    let (status, body) = http_get(controllers[1].admin_addr(), "/explain?service=shop/web").await;
    assert_eq!(status, 200, "{body}");
    let explained: serde_json::Value = serde_json::from_str(&body).unwrap();
    let local_first = &explained["local_first"];
    assert_eq!(local_first["locality"], "PreferSameZone", "{body}");
    assert!(
        local_first["fallback"]
            .as_str()
            .unwrap_or_default()
            .contains("refuses it"),
        "{body}"
    );

    // Converged: no write comes back again (no refused write retried, no
    // slice rewritten for the hints the apiserver drops).
    let writes = || async {
        let mut all = Vec::new();
        for controller in &controllers {
            all.push(
                counter(
                    controller.admin_addr(),
                    "clusterset_dns_controller_writes_total",
                    &[],
                )
                .await,
            );
        }
        all
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = writes().await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(writes().await, before, "writes while idle");
    let errors = counter(
        controllers[1].admin_addr(),
        "clusterset_dns_controller_write_errors_total",
        &[],
    )
    .await;
    assert_eq!(errors, 0.0, "no write of cluster1 failed");
}
