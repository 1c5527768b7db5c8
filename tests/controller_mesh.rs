//! Pull-mesh robustness of the MCS controller (test IDs C3–C18 of
//! docs/controller.md, "How it is tested")
//! on apiserver-only member clusters: no pods are needed, so Services get
//! hand-made source EndpointSlices (nothing else writes slices there), and
//! one controller per cluster runs with exactly the shipped roles (the local
//! role of deploy/controller.yaml; peers read with peer-reader tokens).
//!
//! Every behaviour is a named trial (`harness = false`, libtest-mimic),
//! run one at a time (they are timing-sensitive and the machine may be
//! small); a failing one is reported under its name and the rest still run.
//! Trials that share a mesh start from a known state whatever the one
//! before left:
//! - the peer-loss mesh: a peer's apiserver stopped, hung, restarted within
//!   grace, and a controller restarted while the peer is down (C3–C6);
//! - the misconfiguration mesh: refused peer Secrets, missing and denied
//!   namespaces, deleted imports, the orphan sweep, the per-peer export
//!   limit, leader election (C11, C14–C18);
//! - on meshes of their own: a peer behind a TCP proxy (toxiproxy) that
//!   silently drops its traffic (the same grace as a hung apiserver, C4, and
//!   back once it heals), and a fenced leader cut off from its apiserver.

mod controlplane;
mod support;
mod toxiproxy;

use support::trials::{self, behaviours, standalone};
use support::{http_get, import, object};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use controlplane::{ClusterSpec, ControlPlane, ControllerProcess, create_namespace, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use clusterset_dns::api::well_known::{
    LABEL_KUBERNETES_SERVICE_NAME, LABEL_MANAGED_BY, LABEL_SERVICE_NAME, LABEL_SOURCE_CLUSTER,
};
use clusterset_dns::api::{ServiceExport, ServiceImport};
use clusterset_dns::controller::naming::MANAGED_BY;

/// The trials, in this order: each group of behaviours on its own mesh,
/// started by its first trial and stopped after its last.
fn main() {
    let args = trials::serial_arguments();
    let runtime = trials::runtime();
    let peer_loss = behaviours![
        a_peer_restarted_within_grace_causes_no_write,
        a_stopped_peer_is_kept_for_the_grace_period_then_dropped_and_back_once_started,
        a_hung_peer_is_noticed_by_the_probe_and_dropped_after_grace,
        a_controller_restarted_while_its_peer_is_down_keeps_it_until_the_lease_grace_ends,
    ];
    let misconfiguration = behaviours![
        refused_peer_secrets_get_an_event_and_a_metric_and_cause_no_write,
        a_peer_kubeconfig_with_a_plugin_or_a_token_file_is_refused_before_anything_runs_or_is_sent,
        exports_in_denied_namespaces_are_imported_nowhere,
        a_namespace_created_late_gets_its_import,
        deleted_imported_objects_are_recreated,
        orphaned_slices_are_swept_when_the_controller_starts,
        exports_beyond_the_peer_limit_are_counted_and_not_imported,
        one_of_two_controllers_leads_and_the_standby_takes_over_when_it_dies,
    ];
    let mut all = trials::group(&args, &runtime, || Box::pin(peer_loss_mesh()), peer_loss);
    all.extend(trials::group(
        &args,
        &runtime,
        || Box::pin(misconfiguration_mesh()),
        misconfiguration,
    ));
    // Each on a mesh of its own.
    all.extend(trials::alone(standalone![
        a_peer_behind_a_proxy_that_drops_traffic_is_dropped_after_grace_and_back_after,
        a_leader_cut_off_from_its_apiserver_stops_by_its_deadline_and_the_standby_takes_over,
    ]));
    let conclusion = libtest_mimic::run(&args, all);
    drop(runtime);
    conclusion.exit();
}

/// The peer grace period of the peer-loss scenario: long enough for an
/// apiserver restart (C5), short enough to wait for it to end (C3, C4).
const GRACE: Duration = Duration::from_secs(15);
/// Conformance's deadline for imports and their removal.
const WAIT: Duration = Duration::from_secs(20);
/// The namespace most steps use.
const NS: &str = "mesh";
const WRITES: &str = "clusterset_dns_controller_writes_total";

/// The sum of the samples whose line starts with `prefix` (a metric name,
/// optionally with the start of its labels: `name{peer="cluster0"`).
async fn metric(controller: &ControllerProcess, prefix: &str) -> f64 {
    let (_, body) = http_get(controller.admin_addr(), "/metrics").await;
    body.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn peer_up(peer: &str) -> String {
    format!("clusterset_dns_controller_peer_up{{peer=\"{peer}\"}}")
}

/// A ClusterIP Service `ns/name` without a selector (port `http` 80), its
/// source EndpointSlice (one ready endpoint at `ip`) and its ServiceExport
/// ([`controlplane::export_selectorless`]).
async fn export_service(client: &Client, ns: &str, name: &str, ip: &str) {
    let ports = json!([{"name": "http", "port": 80, "protocol": "TCP"}]);
    controlplane::export_selectorless(client, ns, name, ports, &[ip]).await;
}

fn import_clusters(import: &ServiceImport) -> Vec<String> {
    let mut clusters: Vec<String> = import
        .status
        .iter()
        .flat_map(|s| s.clusters.iter().map(|c| c.cluster.clone()))
        .collect();
    clusters.sort();
    clusters
}

/// The MCS slices of `name` from `source` in `ns`.
async fn slices_from(client: &Client, ns: &str, name: &str, source: &str) -> Vec<EndpointSlice> {
    Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!(
            "{LABEL_SERVICE_NAME}={name},{LABEL_SOURCE_CLUSTER}={source}"
        )))
        .await
        .unwrap()
        .items
}

/// kind/name → resourceVersion of every ServiceImport, EndpointSlice and
/// Service in `ns`.
async fn versions(client: &Client, ns: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let lp = ListParams::default();
    for i in Api::<ServiceImport>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .unwrap()
        .items
    {
        out.insert(
            format!("ServiceImport/{}", i.metadata.name.unwrap()),
            i.metadata.resource_version.unwrap(),
        );
    }
    for s in Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .unwrap()
        .items
    {
        out.insert(
            format!("EndpointSlice/{}", s.metadata.name.unwrap()),
            s.metadata.resource_version.unwrap(),
        );
    }
    for s in Api::<Service>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .unwrap()
        .items
    {
        out.insert(
            format!("Service/{}", s.metadata.name.unwrap()),
            s.metadata.resource_version.unwrap(),
        );
    }
    out
}

/// Member clusters with controllers; members are indices (cluster `i` is
/// `plane.clusters[i]`, its apiserver `plane.apiservers[i]`), so a step can
/// take `&mut plane` to stop or start an apiserver.
struct Mesh {
    // Dropped before the plane, whose directory holds their logs (printed
    // on drop when a test fails).
    controllers: Vec<Option<ControllerProcess>>,
    plane: ControlPlane,
    clients: Vec<Client>,
    kubeconfigs: Vec<PathBuf>,
    args: Vec<String>,
}

impl Mesh {
    /// `clustersets.len()` apiserver-only clusters, cluster `i` in
    /// clusterset `clustersets[i]`; the first `with_controllers` are peers
    /// of each other (a reader token of every other one as a Secret) and run
    /// a controller with `args`.
    async fn start(clustersets: &[&str], with_controllers: usize, args: &[&str]) -> Self {
        let plane =
            ControlPlane::start_with(&vec![ClusterSpec::api_only(); clustersets.len()]).await;
        let mut clients = Vec::new();
        let mut kubeconfigs = Vec::new();
        for (cluster, clusterset) in plane.clusters.iter().zip(clustersets) {
            let client = cluster.admin_client().await;
            controlplane::set_cluster_properties(&client, &cluster.name, clusterset).await;
            kubeconfigs.push(controlplane::install_controller(cluster).await);
            clients.push(client);
        }
        for (i, client) in clients.iter().enumerate().take(with_controllers) {
            for j in (0..with_controllers).filter(|&j| j != i) {
                let reader = reader_kubeconfig(&plane, j).await;
                controlplane::add_peer_secret(client, &plane.clusters[j].name, &reader).await;
            }
        }
        let mut mesh = Self {
            plane,
            clients,
            kubeconfigs,
            controllers: Vec::new(),
            args: args.iter().map(|a| a.to_string()).collect(),
        };
        for i in 0..with_controllers {
            let controller = mesh.spawn(i, &[]);
            mesh.controllers.push(Some(controller));
        }
        for i in 0..with_controllers {
            mesh.wait_ready(i).await;
        }
        mesh
    }

    fn id(&self, i: usize) -> &str {
        &self.plane.clusters[i].name
    }

    fn client(&self, i: usize) -> &Client {
        &self.clients[i]
    }

    /// A controller for cluster `i` with the scenario's arguments and `extra`.
    fn spawn(&self, i: usize, extra: &[&str]) -> ControllerProcess {
        let mut args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        args.extend(extra);
        controlplane::spawn_controller(&self.plane.clusters[i], &self.kubeconfigs[i], &args)
    }

    /// Kills cluster `i`'s controller and starts a new one.
    fn restart_controller(&mut self, i: usize) {
        if let Some(old) = self.controllers[i].take() {
            old.kill();
        }
        self.controllers[i] = Some(self.spawn(i, &[]));
    }

    fn controller(&self, i: usize) -> &ControllerProcess {
        self.controllers[i]
            .as_ref()
            .expect("cluster runs a controller")
    }

    async fn wait_ready(&self, i: usize) {
        let controller = self.controller(i);
        wait_for(
            &format!("{}: controller ready", self.id(i)),
            Duration::from_secs(60),
            || async {
                controller.assert_running();
                match http_get(controller.admin_addr(), "/ready").await {
                    (200, _) => Ok(()),
                    (code, body) => Err(format!("{code} {body:?}")),
                }
            },
        )
        .await;
    }

    async fn writes(&self, i: usize) -> f64 {
        metric(self.controller(i), WRITES).await
    }

    /// Waits until cluster `i`'s controller has written nothing for 3 s.
    async fn settle(&self, i: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = self.writes(i).await;
        let mut since = Instant::now();
        while since.elapsed() < Duration::from_secs(3) {
            assert!(
                Instant::now() < deadline,
                "{}: still writing after 30 s ({last} writes)",
                self.id(i)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            let now = self.writes(i).await;
            if now != last {
                last = now;
                since = Instant::now();
            }
        }
    }

    async fn wait_peer_up(&self, i: usize, peer: usize, up: bool, timeout: Duration) {
        let controller = self.controller(i);
        let name = peer_up(self.id(peer));
        let want = if up { 1.0 } else { 0.0 };
        wait_for(
            &format!("{}: {name} = {want}", self.id(i)),
            timeout,
            || async {
                let (_, body) = http_get(controller.admin_addr(), "/metrics").await;
                let line = body.lines().find(|l| l.starts_with(&name));
                match line.and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok()) {
                    Some(v) if v == want => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }
}

/// A kubeconfig of cluster `i`'s peer-reader ServiceAccount.
async fn reader_kubeconfig(plane: &ControlPlane, i: usize) -> String {
    controlplane::service_account_kubeconfig(
        &plane.clusters[i],
        controlplane::CONTROLLER_NAMESPACE,
        controlplane::PEER_READER_SA,
        3600,
    )
    .await
}

// ---------------------------------------------------------------------------
// Losing a peer: C3, C4, C5, C6.
// ---------------------------------------------------------------------------

/// What cluster `i` imports while cluster0 counts: `only-a` (exported by
/// cluster0 alone) with cluster0's slice, and `shared` (cluster0 and
/// cluster2) with a slice of each.
async fn with_a(client: &Client) -> Result<(), String> {
    let only = import(client, NS, "only-a")
        .await
        .ok_or("no ServiceImport only-a")?;
    if import_clusters(&only) != ["cluster0"] {
        return Err(format!("only-a clusters {:?}", import_clusters(&only)));
    }
    if slices_from(client, NS, "only-a", "cluster0")
        .await
        .is_empty()
    {
        return Err("only-a: no slice from cluster0".into());
    }
    let shared = import(client, NS, "shared")
        .await
        .ok_or("no ServiceImport shared")?;
    if import_clusters(&shared) != ["cluster0", "cluster2"] {
        return Err(format!("shared clusters {:?}", import_clusters(&shared)));
    }
    for source in ["cluster0", "cluster2"] {
        if slices_from(client, NS, "shared", source).await.is_empty() {
            return Err(format!("shared: no slice from {source}"));
        }
    }
    Ok(())
}

/// What cluster `i` imports once cluster0 no longer counts: no `only-a` at
/// all, and `shared` from cluster2 alone.
async fn without_a(client: &Client) -> Result<(), String> {
    if import(client, NS, "only-a").await.is_some() {
        return Err("ServiceImport only-a still there".into());
    }
    let left = slices_from(client, NS, "only-a", "cluster0").await.len();
    if left > 0 {
        return Err(format!("{left} slices of only-a left"));
    }
    let shared = import(client, NS, "shared")
        .await
        .ok_or("no ServiceImport shared")?;
    if import_clusters(&shared) != ["cluster2"] {
        return Err(format!("shared clusters {:?}", import_clusters(&shared)));
    }
    let left = slices_from(client, NS, "shared", "cluster0").await.len();
    if left > 0 {
        return Err(format!("{left} slices of shared from cluster0 left"));
    }
    if slices_from(client, NS, "shared", "cluster2")
        .await
        .is_empty()
    {
        return Err("shared: no slice from cluster2".into());
    }
    Ok(())
}

/// Asserts `with_a` on clusters 1 and 2 once a second until `until`.
async fn keeps_a_until(mesh: &Mesh, until: Instant, what: &str) {
    while Instant::now() < until {
        for i in [1, 2] {
            if let Err(why) = with_a(mesh.client(i)).await {
                panic!(
                    "{what}: {} dropped cluster0's contributions within the grace period: {why}",
                    mesh.id(i)
                );
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn wait_with_a(mesh: &Mesh, what: &str, timeout: Duration) {
    for i in [1, 2] {
        let client = mesh.client(i);
        wait_for(
            &format!("{what}: {} imports cluster0's services", mesh.id(i)),
            timeout,
            || with_a(client),
        )
        .await;
    }
}

async fn wait_without_a(mesh: &Mesh, what: &str, timeout: Duration) {
    for i in [1, 2] {
        let client = mesh.client(i);
        wait_for(
            &format!("{what}: {} dropped cluster0's services", mesh.id(i)),
            timeout,
            || without_a(client),
        )
        .await;
    }
}

/// b's Lease of peer cluster0: its renewTime.
async fn peer_lease_renewed(client: &Client) -> SystemTime {
    let lease = Api::<Lease>::namespaced(client.clone(), controlplane::CONTROLLER_NAMESPACE)
        .get("clusterset-dns-peer-cluster0")
        .await
        .unwrap();
    SystemTime::from(lease.spec.unwrap().renew_time.unwrap().0)
}

/// The peer-loss mesh: three clusters of one clusterset, each a controller
/// with a [`GRACE`] grace period; cluster0 exports `only-a` and `shared`,
/// cluster2 `shared`, and clusters 1 and 2 import them.
async fn peer_loss_mesh() -> Mesh {
    let grace = format!("{}s", GRACE.as_secs());
    let mesh = Mesh::start(
        &["test"; 3],
        3,
        &[
            "--peer-grace-period",
            &grace,
            "--startup-sync-timeout",
            "5s",
        ],
    )
    .await;
    for i in 0..3 {
        create_namespace(mesh.client(i), NS).await;
    }
    export_service(mesh.client(0), NS, "only-a", "10.200.0.10").await;
    export_service(mesh.client(0), NS, "shared", "10.200.0.11").await;
    export_service(mesh.client(2), NS, "shared", "10.202.0.11").await;
    wait_with_a(&mesh, "start", WAIT).await;
    mesh
}

impl Mesh {
    /// What a peer-loss trial starts from, whatever the one before left
    /// (or right after the mesh started, run alone): cluster0's apiserver
    /// running (resumed or started), every controller running, clusters 1
    /// and 2 importing cluster0's services and seeing cluster0 up. A peer
    /// is within its grace period only once a controller has seen it up
    /// (`last_seen`): one lost before its first probe is dropped at once.
    async fn with_cluster0_back(&mut self) {
        if self.plane.apiservers[0].pid().is_some() {
            self.plane.apiservers[0].signal("CONT");
        } else {
            tokio::task::block_in_place(|| self.plane.apiservers[0].start());
        }
        self.controllers_running().await;
        wait_with_a(self, "the trial's start", Duration::from_secs(45)).await;
        for i in [1, 2] {
            self.wait_peer_up(i, 0, true, WAIT).await;
        }
    }

    /// Every cluster that runs a controller runs one again (a trial before
    /// may have stopped it, or failed before it restarted it).
    async fn controllers_running(&mut self) {
        for i in 0..self.controllers.len() {
            let running = self.controllers[i]
                .as_ref()
                .is_some_and(|c| c.exited().is_none());
            if !running {
                self.restart_controller(i);
                self.wait_ready(i).await;
            }
        }
    }
}

/// C5: cluster0's apiserver restarts within the grace period: clusters 1
/// and 2 notice (peer_up 0) but write nothing, not even a resourceVersion.
async fn a_peer_restarted_within_grace_causes_no_write(mesh: &mut Mesh) {
    mesh.with_cluster0_back().await;
    for i in [1, 2] {
        mesh.settle(i).await;
    }
    let mut before = Vec::new();
    for i in [1, 2] {
        before.push((mesh.writes(i).await, versions(mesh.client(i), NS).await));
    }
    let stopped = Instant::now();
    mesh.plane.apiservers[0].stop();
    mesh.wait_peer_up(1, 0, false, Duration::from_secs(8)).await;
    tokio::task::block_in_place(|| mesh.plane.apiservers[0].start());
    let down = stopped.elapsed();
    eprintln!(
        "C5: cluster0's apiserver was down {:.1} s",
        down.as_secs_f64()
    );
    assert!(
        down < GRACE - Duration::from_secs(2),
        "the apiserver restart took {down:?}: too slow to test a return within the {GRACE:?} grace period"
    );
    for i in [1, 2] {
        mesh.wait_peer_up(i, 0, true, WAIT).await;
    }
    // Whatever the return would cause has had time to happen.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (i, (writes, rvs)) in [1, 2].into_iter().zip(before) {
        assert_eq!(
            mesh.writes(i).await,
            writes,
            "{}: writes while a peer flapped within grace",
            mesh.id(i)
        );
        assert_eq!(
            versions(mesh.client(i), NS).await,
            rvs,
            "{}: objects changed while a peer flapped within grace",
            mesh.id(i)
        );
    }
}

/// C3: cluster0's apiserver is stopped: clusters 1 and 2 keep its slices and
/// its part of every import for the grace period, then drop them (a
/// ServiceImport only cluster0 exported is deleted); restarted, everything
/// comes back.
async fn a_stopped_peer_is_kept_for_the_grace_period_then_dropped_and_back_once_started(
    mesh: &mut Mesh,
) {
    mesh.with_cluster0_back().await;
    let stopped = Instant::now();
    let stopped_at = SystemTime::now();
    mesh.plane.apiservers[0].stop();
    for i in [1, 2] {
        mesh.wait_peer_up(i, 0, false, Duration::from_secs(8)).await;
    }
    keeps_a_until(mesh, stopped + GRACE - Duration::from_secs(3), "C3").await;
    // The Lease stopped renewing when cluster0 went away.
    let renewed = peer_lease_renewed(mesh.client(1)).await;
    assert!(
        renewed <= stopped_at + Duration::from_secs(1),
        "cluster1 renewed cluster0's Lease at {renewed:?} though it stopped at {stopped_at:?}"
    );
    wait_without_a(mesh, "C3", GRACE).await;
    eprintln!(
        "C3: cluster0 dropped {:.1} s after its apiserver stopped",
        stopped.elapsed().as_secs_f64()
    );
    tokio::task::block_in_place(|| mesh.plane.apiservers[0].start());
    wait_with_a(mesh, "C3 return", WAIT).await;
}

/// C4: cluster0's apiserver hangs (SIGSTOP): connections stay open and
/// nothing errors, so only the probe can notice; the rest is C3.
async fn a_hung_peer_is_noticed_by_the_probe_and_dropped_after_grace(mesh: &mut Mesh) {
    mesh.with_cluster0_back().await;
    let stopped = Instant::now();
    mesh.plane.apiservers[0].signal("STOP");
    // Probe every 2 s with a 3 s timeout, metrics refreshed every second.
    for i in [1, 2] {
        mesh.wait_peer_up(i, 0, false, Duration::from_secs(8)).await;
    }
    eprintln!(
        "C4: hang detected in {:.1} s",
        stopped.elapsed().as_secs_f64()
    );
    keeps_a_until(mesh, stopped + GRACE - Duration::from_secs(2), "C4").await;
    wait_without_a(mesh, "C4", GRACE).await;
    mesh.plane.apiservers[0].signal("CONT");
    wait_with_a(mesh, "C4 return", WAIT).await;
}

/// C6: cluster1's controller restarts while cluster0 is down and its Lease
/// is fresh: nothing of cluster0's is deleted in cluster1, and it is ready;
/// once the Lease's grace has passed, cluster0's services go.
async fn a_controller_restarted_while_its_peer_is_down_keeps_it_until_the_lease_grace_ends(
    mesh: &mut Mesh,
) {
    mesh.with_cluster0_back().await;
    mesh.settle(1).await;
    mesh.plane.apiservers[0].stop();
    mesh.wait_peer_up(1, 0, false, Duration::from_secs(8)).await;
    let before = versions(mesh.client(1), NS).await;
    mesh.restart_controller(1);
    let renewed = peer_lease_renewed(mesh.client(1)).await;
    let grace_ends = Instant::now()
        + (renewed + GRACE)
            .duration_since(SystemTime::now())
            .unwrap_or_else(|_| {
                panic!("cluster0's Lease in cluster1 is already past grace: renewed {renewed:?}")
            });
    assert!(
        grace_ends > Instant::now() + Duration::from_secs(5),
        "too little of the grace period left to test a restart within it"
    );
    // Ready within grace: cluster0 is unread but within its Lease's grace.
    mesh.wait_ready(1).await;
    while Instant::now() + Duration::from_secs(2) < grace_ends {
        if let Err(why) = with_a(mesh.client(1)).await {
            panic!("C6: the restarted controller dropped cluster0 within grace: {why}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(
        versions(mesh.client(1), NS).await,
        before,
        "C6: the restarted controller wrote while cluster0 was within grace"
    );
    let client = mesh.client(1);
    wait_for(
        "C6: cluster1 drops cluster0 once its Lease's grace has passed",
        WAIT,
        || without_a(client),
    )
    .await;
    tokio::task::block_in_place(|| mesh.plane.apiservers[0].start());
    let restarted = Instant::now();
    // The restarted controller never read cluster0: it retries reading its
    // identity with a backoff of up to 30 s.
    wait_with_a(mesh, "C6 return", Duration::from_secs(45)).await;
    eprintln!(
        "C6: cluster0 imported again {:.1} s after its apiserver was back",
        restarted.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------
// Misconfiguration and repair: C11, C14, C15, C16, C17, C18.
// ---------------------------------------------------------------------------

/// The misconfiguration mesh: clusters 0–2 of clusterset `test` with
/// controllers (a 30 s grace period, `--deny-namespaces kube-*,secret-*`)
/// and cluster3 of clusterset `other` without one; cluster0 exports `web`
/// and clusters 1 and 2 import it.
async fn misconfiguration_mesh() -> Mesh {
    // cluster3 belongs to another clusterset and runs no controller.
    let mesh = Mesh::start(
        &["test", "test", "test", "other"],
        3,
        &[
            "--peer-grace-period",
            "30s",
            "--startup-sync-timeout",
            "5s",
            "--deny-namespaces",
            "kube-*,secret-*",
        ],
    )
    .await;
    for i in 0..4 {
        create_namespace(mesh.client(i), NS).await;
    }
    export_service(mesh.client(0), NS, "web", "10.200.0.20").await;
    for i in 0..3 {
        let client = mesh.client(i);
        wait_for("web imported", WAIT, || async {
            let import = import(client, NS, "web").await.ok_or("no import")?;
            if i != 0 && slices_from(client, NS, "web", "cluster0").await.is_empty() {
                return Err("no slice from cluster0".into());
            }
            Ok(import)
        })
        .await;
    }

    mesh
}

/// C11: in cluster1, Secrets naming cluster1 itself, cluster0 a second time,
/// cluster3 (another clusterset) and an invalid kubeconfig are each refused:
/// a Warning Event on the Secret, the metric, and no write.
async fn refused_peer_secrets_get_an_event_and_a_metric_and_cause_no_write(mesh: &mut Mesh) {
    mesh.controllers_running().await;
    let b = mesh.client(1);
    export_service(mesh.client(3), NS, "elsewhere", "10.203.0.5").await;
    mesh.settle(1).await;
    let writes = mesh.writes(1).await;
    let rvs = versions(b, NS).await;
    let controller = mesh.controller(1);
    let cases = [
        (
            "self",
            reader_kubeconfig(&mesh.plane, 1).await,
            "SelfReference",
        ),
        (
            "cluster0-again",
            reader_kubeconfig(&mesh.plane, 0).await,
            "DuplicateClusterId",
        ),
        (
            "cluster3",
            reader_kubeconfig(&mesh.plane, 3).await,
            "OtherClusterSet",
        ),
        (
            "broken",
            "this is not a kubeconfig".to_owned(),
            "InvalidKubeconfig",
        ),
    ];
    let mut counts = Vec::new();
    for (_, _, reason) in &cases {
        let name = format!("clusterset_dns_controller_peers_refused_total{{reason=\"{reason}\"}}");
        counts.push(metric(controller, &name).await);
    }
    for (peer, kubeconfig, _) in &cases {
        controlplane::add_peer_secret(b, peer, kubeconfig).await;
    }
    for ((peer, _, reason), before) in cases.iter().zip(counts) {
        let secret = format!("peer-{peer}");
        let name = format!("clusterset_dns_controller_peers_refused_total{{reason=\"{reason}\"}}");
        wait_for(
            &format!("C11: Secret {secret} refused ({reason})"),
            WAIT,
            || async {
                let count = metric(controller, &name).await;
                if count < before + 1.0 {
                    return Err(format!("{name} = {count}"));
                }
                let events = controlplane::peer_refusal_notes(b, &secret).await;
                if !events.iter().any(|note| note.starts_with(reason)) {
                    return Err(format!("no PeerRefused Event with {reason}: {events:?}"));
                }
                Ok(())
            },
        )
        .await;
    }
    // Refused peers count for nothing: no write, no Lease, no import of
    // the other clusterset's export; the real cluster0 still counts.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        mesh.writes(1).await,
        writes,
        "C11: writes for refused peers"
    );
    assert_eq!(versions(b, NS).await, rvs, "C11: objects changed");
    assert!(import(b, NS, "elsewhere").await.is_none());
    let leases = Api::<Lease>::namespaced(b.clone(), controlplane::CONTROLLER_NAMESPACE);
    for id in ["cluster1", "cluster3"] {
        let name = format!("clusterset-dns-peer-{id}");
        assert!(
            leases.get_opt(&name).await.unwrap().is_none(),
            "C11: Lease {name} for a refused peer"
        );
    }
    assert_eq!(http_get(controller.admin_addr(), "/ready").await.0, 200);
    for (peer, _, _) in &cases {
        controlplane::remove_peer_secret(b, peer).await;
    }
}

/// In cluster1, a peer Secret whose kubeconfig runs a credential plugin
/// (`exec`, which would touch a marker file) and one that sends a local
/// file as its token (`tokenFile`, to a loopback listener of the test's)
/// are refused as InvalidKubeconfig, naming the field, in the Event, the
/// metric and `peer list`; the plugin never runs, the listener never sees
/// a connection (nor from `peer list`, which reads the Secrets too).
async fn a_peer_kubeconfig_with_a_plugin_or_a_token_file_is_refused_before_anything_runs_or_is_sent(
    mesh: &mut Mesh,
) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    mesh.controllers_running().await;
    let b = mesh.client(1);
    let controller = mesh.controller(1);
    let dir = mesh.plane.dir();
    let marker = dir.join("the-exec-plugin-ran");
    let token_file = dir.join("controller-token");
    std::fs::write(&token_file, "not-for-peers-7f3a").unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let accepting = tokio::spawn({
        let connections = connections.clone();
        async move {
            while listener.accept().await.is_ok() {
                connections.fetch_add(1, Ordering::SeqCst);
            }
        }
    });

    // Cluster0's reader kubeconfig (a real server and its CA) with the
    // user swapped: only the refused field differs from an accepted peer.
    let reader: serde_json::Value =
        serde_json::from_str(&reader_kubeconfig(&mesh.plane, 0).await).unwrap();
    let with = |server: Option<String>, user: serde_json::Value| {
        let mut kubeconfig = reader.clone();
        if let Some(server) = server {
            kubeconfig["clusters"][0]["cluster"]["server"] = server.into();
        }
        kubeconfig["users"][0]["user"] = user;
        kubeconfig.to_string()
    };
    let exec = with(
        None,
        json!({"exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "/bin/sh",
            "args": ["-c", format!("touch {}", marker.display())],
            "interactiveMode": "Never",
        }}),
    );
    let file = with(
        Some(format!("https://127.0.0.1:{port}")),
        json!({"tokenFile": token_file.display().to_string()}),
    );
    let cases = [
        (
            "exec-plugin",
            exec,
            "users[0].user.exec: credential plugins are not allowed in a peer kubeconfig",
        ),
        (
            "token-file",
            file,
            "users[0].user.tokenFile: token files are not allowed in a peer kubeconfig (put the token in token)",
        ),
    ];
    let name = "clusterset_dns_controller_peers_refused_total{reason=\"InvalidKubeconfig\"}";
    let before = metric(controller, name).await;
    for (peer, kubeconfig, _) in &cases {
        controlplane::add_peer_secret(b, peer, kubeconfig).await;
    }
    for (peer, _, field) in &cases {
        let secret = format!("peer-{peer}");
        let note = format!("InvalidKubeconfig: Secret {secret}: data.kubeconfig: {field}");
        wait_for(&format!("Secret {secret} refused"), WAIT, || async {
            let events = controlplane::peer_refusal_notes(b, &secret).await;
            if !events.contains(&note) {
                return Err(format!("no PeerRefused Event {note:?}: {events:?}"));
            }
            Ok(())
        })
        .await;
    }
    let count = metric(controller, name).await;
    assert!(count >= before + 2.0, "{name} = {count}, {before} before");
    assert!(
        controller
            .log()
            .contains("users[0].user.exec: credential plugins are not allowed"),
        "the refusal is not logged"
    );

    // `peer list` shows the refusal, and builds no client from them either.
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_clusterset-dns"))
        .args(["peer", "list", "-o", "json", "--kubeconfig"])
        .arg(&mesh.plane.clusters[1].admin_kubeconfig)
        .env_remove("KUBECONFIG")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "peer list: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let listed: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
    for (peer, _, field) in &cases {
        let secret = format!("peer-{peer}");
        let entry = listed
            .iter()
            .find(|p| p["name"] == secret.as_str())
            .unwrap_or_else(|| panic!("{secret} not listed: {stdout}"));
        let refused = entry["refused"].as_str().unwrap_or_default();
        assert!(refused.ends_with(field), "{secret}: {entry}");
        let error = entry["error"].as_str().unwrap_or_default();
        assert!(error.ends_with(field), "{secret}: {entry}");
        assert!(!entry["healthy"].as_bool().unwrap(), "{entry}");
    }

    // Five seconds more for a late plugin run or connection.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !marker.exists(),
        "the exec plugin ran: {}",
        marker.display()
    );
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "something connected to the tokenFile kubeconfig's server"
    );
    accepting.abort();
    for (peer, _, _) in &cases {
        controlplane::remove_peer_secret(b, peer).await;
    }
}

/// C15: exports in kube-system (denied by default) and in a namespace
/// matching `--deny-namespaces` are imported nowhere, and their status is
/// not written.
async fn exports_in_denied_namespaces_are_imported_nowhere(mesh: &mut Mesh) {
    mesh.controllers_running().await;
    // kube-* and secret-team by --deny-namespaces; the controller's own
    // namespace always (issue 31).
    const DENIED: [&str; 3] = [
        "kube-system",
        "secret-team",
        controlplane::CONTROLLER_NAMESPACE,
    ];
    for i in 0..3 {
        create_namespace(mesh.client(i), "secret-team").await;
    }
    for ns in DENIED {
        export_service(mesh.client(0), ns, "denied", "10.200.0.30").await;
    }
    // Exported after it: once this is imported everywhere, so would the
    // denied one have been.
    export_service(mesh.client(0), NS, "allowed", "10.200.0.31").await;
    for i in 0..3 {
        let client = mesh.client(i);
        wait_for("C15: allowed imported", WAIT, || async {
            import(client, NS, "allowed")
                .await
                .map(|_| ())
                .ok_or_else(|| "no import".to_owned())
        })
        .await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for ns in DENIED {
        for i in 0..3 {
            assert!(
                import(mesh.client(i), ns, "denied").await.is_none(),
                "C15: {} imports an export in {ns}",
                mesh.id(i)
            );
            let mcs = slices_from(mesh.client(i), ns, "denied", "cluster0").await;
            assert!(mcs.is_empty(), "C15: {}: MCS slices in {ns}", mesh.id(i));
        }
        let export = Api::<ServiceExport>::namespaced(mesh.client(0).clone(), ns)
            .get("denied")
            .await
            .unwrap();
        assert!(
            export.status.is_none_or(|s| s.conditions.is_empty()),
            "C15: status written on the export in {ns}"
        );
    }
}

/// C14: a namespace missing in cluster2 gets no ServiceImport there; once
/// created, the service is imported within 20 s.
async fn a_namespace_created_late_gets_its_import(mesh: &mut Mesh) {
    mesh.controllers_running().await;
    let ns = "late";
    for i in [0, 1] {
        create_namespace(mesh.client(i), ns).await;
    }
    export_service(mesh.client(0), ns, "svc", "10.200.0.40").await;
    let b = mesh.client(1);
    wait_for("C14: imported in cluster1", WAIT, || async {
        import(b, ns, "svc")
            .await
            .map(|_| ())
            .ok_or_else(|| "no import".to_owned())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let c = mesh.client(2);
    assert!(import(c, ns, "svc").await.is_none());
    create_namespace(c, ns).await;
    let created = Instant::now();
    wait_for("C14: imported once the namespace exists", WAIT, || async {
        if import(c, ns, "svc").await.is_none() {
            return Err("no import".to_owned());
        }
        if slices_from(c, ns, "svc", "cluster0").await.is_empty() {
            return Err("no slice from cluster0".to_owned());
        }
        Ok(())
    })
    .await;
    eprintln!(
        "C14: imported {:.1} s after the namespace was created",
        created.elapsed().as_secs_f64()
    );
}

/// C16: an imported slice deleted in cluster1 and the ServiceImport deleted
/// in cluster2 come back promptly, their owned objects re-owned.
async fn deleted_imported_objects_are_recreated(mesh: &mut Mesh) {
    mesh.controllers_running().await;
    let prompt = Duration::from_secs(10);
    let b = mesh.client(1);
    let slice = slices_from(b, NS, "web", "cluster0").await.remove(0);
    let name = slice.metadata.name.clone().unwrap();
    let uid = slice.metadata.uid.clone().unwrap();
    Api::<EndpointSlice>::namespaced(b.clone(), NS)
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    wait_for("C16: deleted slice recreated", prompt, || async {
        let slices = slices_from(b, NS, "web", "cluster0").await;
        match slices
            .iter()
            .find(|s| s.metadata.name.as_ref() == Some(&name))
        {
            Some(s) if s.metadata.uid.as_ref() != Some(&uid) => Ok(()),
            Some(_) => Err("not deleted yet".to_owned()),
            None => Err(format!("{name} missing")),
        }
    })
    .await;

    let c = mesh.client(2);
    let old = import(c, NS, "web").await.unwrap().metadata.uid.unwrap();
    Api::<ServiceImport>::namespaced(c.clone(), NS)
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("C16: deleted ServiceImport recreated", prompt, || async {
        let import = import(c, NS, "web").await.ok_or("no import")?;
        let uid = import.metadata.uid.clone().unwrap();
        if uid == old {
            return Err("not deleted yet".to_owned());
        }
        if import.spec.ips.is_empty() {
            return Err("no ips".to_owned());
        }
        let slices = slices_from(c, NS, "web", "cluster0").await;
        let owned = |s: &EndpointSlice| {
            s.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == uid)
        };
        if slices.is_empty() || !slices.iter().all(owned) {
            return Err("slices not owned by the new import".to_owned());
        }
        Ok(())
    })
    .await;
}

/// C17: MCS slices of ours (our label, owned by their ServiceImport, as a
/// previous controller wrote them) whose source does not exist, created
/// while cluster1's controller is stopped, are deleted when it starts. One
/// with our label but no owner is not ours and stays (issue 31).
async fn orphaned_slices_are_swept_when_the_controller_starts(mesh: &mut Mesh) {
    mesh.controllers_running().await;
    mesh.settle(1).await;
    mesh.controllers[1].take().unwrap().kill();
    let b = mesh.client(1).clone();
    let before = versions(&b, NS).await;
    let slices: Api<EndpointSlice> = Api::namespaced(b.clone(), NS);
    let orphans = [
        // A source cluster that does not exist, for a service nobody exports.
        ("phantom-orphan", "phantom", "ghost"),
        // A source cluster that does not exist, for a live service.
        ("web-ghost", "web", "ghost"),
        // A real source cluster, but a source slice it does not have.
        ("web-stale", "web", "cluster0"),
    ];
    let imports: Api<ServiceImport> = Api::namespaced(b.clone(), NS);
    let web_uid = imports.get("web").await.unwrap().metadata.uid.unwrap();
    let owner = |service: &str| {
        // phantom's import does not exist: a uid nothing has.
        let uid = if service == "web" {
            web_uid.as_str()
        } else {
            "5e1f0000-0000-4000-8000-000000000017"
        };
        json!([{
            "apiVersion": "multicluster.x-k8s.io/v1alpha1",
            "kind": "ServiceImport",
            "name": service,
            "uid": uid,
            "controller": true,
        }])
    };
    for (name, service, source) in orphans.into_iter().chain([("web-unowned", "web", "ghost")]) {
        let owners = if name == "web-unowned" {
            json!([])
        } else {
            owner(service)
        };
        slices
            .create(
                &PostParams::default(),
                &object(json!({
                    "metadata": {
                        "name": name,
                        "ownerReferences": owners,
                        "labels": {
                            LABEL_SERVICE_NAME: service,
                            LABEL_SOURCE_CLUSTER: source,
                            LABEL_MANAGED_BY: MANAGED_BY,
                            LABEL_KUBERNETES_SERVICE_NAME: clusterset_dns::controller::naming::derived_service_name(NS, service),
                        },
                    },
                    "addressType": "IPv4",
                    "endpoints": [{"addresses": ["10.99.0.1"], "conditions": {"ready": true}}],
                })),
            )
            .await
            .unwrap_or_else(|e| panic!("creating orphan {name}: {e}"));
    }
    mesh.controllers[1] = Some(mesh.spawn(1, &[]));
    let started = Instant::now();
    wait_for("C17: orphans swept at start-up", WAIT, || async {
        let mut left = Vec::new();
        for (name, _, _) in orphans {
            if slices.get_opt(name).await.unwrap().is_some() {
                left.push(name);
            }
        }
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("left: {left:?}"))
        }
    })
    .await;
    eprintln!(
        "C17: swept {:.1} s after the controller started",
        started.elapsed().as_secs_f64()
    );
    mesh.wait_ready(1).await;
    mesh.settle(1).await;
    // Not ours: kept as it was written.
    let unowned = slices.get("web-unowned").await.unwrap();
    slices
        .delete("web-unowned", &Default::default())
        .await
        .unwrap();
    assert_eq!(
        unowned
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|f| f.manager.as_deref())
            .collect::<Vec<_>>()
            .len(),
        1,
        "C17: the slice that is not ours was written to: {:?}",
        unowned.metadata.managed_fields
    );
    // Only the orphans went: a restart rewrites nothing that is current.
    assert_eq!(
        versions(&b, NS).await,
        before,
        "C17: the restarted controller changed more than the orphans"
    );
}

/// What is read from one peer is capped: cluster1's controller, restarted
/// with `--peer-max-exports` at cluster0's current number of exports,
/// imports none of cluster0's next exports (while cluster2 does), counts
/// them, and keeps importing what it had.
async fn exports_beyond_the_peer_limit_are_counted_and_not_imported(mesh: &mut Mesh) {
    mesh.controllers_running().await;
    let exports = Api::<ServiceExport>::all(mesh.client(0).clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    mesh.controllers[1].take().unwrap().kill();
    let limit = exports.to_string();
    mesh.controllers[1] = Some(mesh.spawn(1, &["--peer-max-exports", &limit]));
    mesh.wait_ready(1).await;
    // Names after every existing one: a list keeps the first by name.
    for name in ["zz-over-1", "zz-over-2"] {
        export_service(mesh.client(0), NS, name, "10.200.0.90").await;
    }
    let c = mesh.client(2);
    wait_for("over the limit: imported in cluster2", WAIT, || async {
        import(c, NS, "zz-over-2")
            .await
            .map(|_| ())
            .ok_or_else(|| "no import".to_owned())
    })
    .await;
    let controller = mesh.controllers[1].as_ref().unwrap();
    wait_for("over the limit: counted in cluster1", WAIT, || async {
        let refused = metric(
            controller,
            "clusterset_dns_controller_peer_objects_rejected_total{peer=\"cluster0\",reason=\"peer-limit\"}",
        )
        .await;
        if refused >= 2.0 {
            Ok(())
        } else {
            Err(format!("{refused} refused"))
        }
    })
    .await;
    mesh.settle(1).await;
    let b = mesh.client(1);
    for name in ["zz-over-1", "zz-over-2"] {
        assert!(
            import(b, NS, name).await.is_none(),
            "{name}: imported in cluster1 beyond --peer-max-exports {limit}"
        );
    }
    assert!(
        !slices_from(b, NS, "web", "cluster0").await.is_empty(),
        "within the limit, web is still imported from cluster0"
    );
    assert!(
        controller.log().contains("peer exceeds the limits"),
        "no warning logged"
    );
}

/// C18: two controllers for cluster1 with leader election: one leads and
/// writes, the other is a standby (not ready, no writes); killing the
/// leader hands over within ~20 s and the new leader keeps importing.
async fn one_of_two_controllers_leads_and_the_standby_takes_over_when_it_dies(mesh: &mut Mesh) {
    mesh.controllers_running().await;
    mesh.controllers[1].take().unwrap().kill();
    let replicas = [
        mesh.spawn(1, &["--leader-election=true", "--identity", "replica-one"]),
        mesh.spawn(1, &["--leader-election=true", "--identity", "replica-two"]),
    ];
    let leader = wait_for(
        "C18: one replica leads",
        Duration::from_secs(60),
        || async {
            let mut leading = Vec::new();
            for (n, r) in replicas.iter().enumerate() {
                r.assert_running();
                if metric(r, "clusterset_dns_controller_leader").await == 1.0 {
                    leading.push(n);
                }
            }
            match leading.as_slice() {
                [n] if http_get(replicas[*n].admin_addr(), "/ready").await.0 == 200 => Ok(*n),
                _ => Err(format!("leading: {leading:?}")),
            }
        },
    )
    .await;
    let standby = 1 - leader;
    let b = mesh.client(1).clone();
    export_service(mesh.client(0), NS, "elected", "10.200.0.50").await;
    wait_for("C18: imported under the leader", WAIT, || async {
        import(&b, NS, "elected")
            .await
            .map(|_| ())
            .ok_or_else(|| "no import".to_owned())
    })
    .await;
    assert!(metric(&replicas[leader], WRITES).await > 0.0);
    assert_eq!(
        metric(&replicas[standby], WRITES).await,
        0.0,
        "C18: the standby wrote"
    );
    assert_eq!(
        metric(&replicas[standby], "clusterset_dns_controller_leader").await,
        0.0
    );
    let (code, body) = http_get(replicas[standby].admin_addr(), "/ready").await;
    assert_eq!(code, 503, "C18: standby /ready: {body}");

    replicas[leader].kill();
    let killed = Instant::now();
    let new = &replicas[standby];
    wait_for(
        "C18: the standby takes over",
        Duration::from_secs(25),
        || async {
            new.assert_running();
            let leading = metric(new, "clusterset_dns_controller_leader").await;
            match http_get(new.admin_addr(), "/ready").await {
                (200, _) if leading == 1.0 => Ok(()),
                (code, body) => Err(format!("leader {leading}, /ready {code} {body:?}")),
            }
        },
    )
    .await;
    eprintln!(
        "C18: took over {:.1} s after the leader was killed",
        killed.elapsed().as_secs_f64()
    );
    export_service(mesh.client(0), NS, "after", "10.200.0.51").await;
    wait_for("C18: imported under the new leader", WAIT, || async {
        import(&b, NS, "after")
            .await
            .map(|_| ())
            .ok_or_else(|| "no import".to_owned())
    })
    .await;
    assert!(metric(new, WRITES).await > 0.0);
}

// ---------------------------------------------------------------------------
// A peer behind a proxy that drops its traffic.
// ---------------------------------------------------------------------------

/// cluster1 reads cluster0 through toxiproxy (its peer Secret names the
/// proxy); cluster2 reads cluster0 directly. The proxy drops every byte in
/// both directions and keeps the connections open: nothing errors, so only
/// the peer probe notices; cluster1 keeps cluster0's services for the grace
/// period and drops them after it, while cluster2 keeps them throughout;
/// once the proxy heals, cluster1 imports them again.
async fn a_peer_behind_a_proxy_that_drops_traffic_is_dropped_after_grace_and_back_after() {
    let t0 = Instant::now();
    // A mesh like the peer-loss one, of its own.
    let mesh = peer_loss_mesh().await;

    let toxiproxy = toxiproxy::Toxiproxy::start(&mesh.plane.dir().join("toxiproxy.log")).await;
    let url = mesh.plane.apiservers[0].url.clone();
    let port = toxiproxy
        .proxy("cluster0", url.trim_start_matches("https://"))
        .await;
    let reader = reader_kubeconfig(&mesh.plane, 0).await;
    assert!(reader.contains(&url), "{reader}");
    // The apiserver's certificate names 127.0.0.1, which the proxy's
    // address is too: the TLS check still passes.
    let proxied = reader.replace(&url, &format!("https://127.0.0.1:{port}"));
    controlplane::add_peer_secret(mesh.client(1), "cluster0", &proxied).await;
    let controller = mesh.controller(1);
    wait_for(
        "cluster1 reads cluster0 through the proxy",
        WAIT,
        || async {
            if controller.log().contains("peer connection replaced") {
                Ok(())
            } else {
                Err("no 'peer connection replaced' in the log yet".to_owned())
            }
        },
    )
    .await;
    mesh.wait_peer_up(1, 0, true, WAIT).await;
    wait_with_a(&mesh, "through the proxy", WAIT).await;
    eprintln!(
        "proxy: cluster1 reads cluster0 through it at {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    let dropped = Instant::now();
    toxiproxy.blackhole("cluster0").await;
    // Probe every 2 s with a 3 s timeout, metrics refreshed every second.
    mesh.wait_peer_up(1, 0, false, Duration::from_secs(8)).await;
    let detected = dropped.elapsed();
    mesh.wait_peer_up(2, 0, true, Duration::from_secs(1)).await;
    keeps_a_until(&mesh, dropped + GRACE - Duration::from_secs(2), "proxy").await;
    let client = mesh.client(1);
    wait_for("proxy: cluster1 drops cluster0 after grace", GRACE, || {
        without_a(client)
    })
    .await;
    let removed = dropped.elapsed();
    with_a(mesh.client(2))
        .await
        .unwrap_or_else(|why| panic!("proxy: cluster2 reads cluster0 directly: {why}"));

    toxiproxy.heal("cluster0").await;
    let healed = Instant::now();
    wait_for("proxy: cluster1 imports cluster0 again", WAIT, || {
        with_a(client)
    })
    .await;
    let back = healed.elapsed();
    // Healing closes the proxied connections: a watch that failed then
    // resumes without a relist, so the controller reconnects to relist.
    let reconnected = mesh.controller(1).log().contains("reconnecting to relist");
    eprintln!(
        "proxy drops cluster0's traffic: peer_up 0 after {:.1} s, cluster0's services removed \
         from cluster1 {:.1} s after the drop began (grace {} s), imported again {:.1} s after \
         the proxy healed (reconnected to relist: {reconnected})",
        detected.as_secs_f64(),
        removed.as_secs_f64(),
        GRACE.as_secs(),
        back.as_secs_f64()
    );
}

// ---------------------------------------------------------------------------
// A leader cut off from its own apiserver.
// ---------------------------------------------------------------------------

/// Two replicas of cluster1's controller with leader election: the leader
/// reaches its apiserver through toxiproxy, the standby directly. The proxy
/// then drops every byte and keeps the connections open, so the leader's
/// Lease renewal hangs (nothing errors). The leader must stop by its renewal
/// deadline (`RENEW_DEADLINE` after the last renewal, which came at most
/// `RENEW_EVERY` before the cut): it closes its fence, so no write leaves
/// it after that instant, and exits. The standby takes the Lease once it
/// expires, within `LEASE_DURATION` plus one standby retry of the cut, and
/// imports from then on.
async fn a_leader_cut_off_from_its_apiserver_stops_by_its_deadline_and_the_standby_takes_over() {
    use clusterset_dns::controller::leader::{LEASE_DURATION, RENEW_DEADLINE, RETRY_EVERY};

    let mut mesh = Mesh::start(&["test"; 2], 2, &["--startup-sync-timeout", "5s"]).await;
    for i in 0..2 {
        create_namespace(mesh.client(i), NS).await;
    }
    mesh.controllers[1].take().unwrap().kill();

    let toxiproxy = toxiproxy::Toxiproxy::start(&mesh.plane.dir().join("toxiproxy.log")).await;
    let url = mesh.plane.apiservers[1].url.clone();
    let port = toxiproxy
        .proxy("cluster1", url.trim_start_matches("https://"))
        .await;
    let direct = std::fs::read_to_string(&mesh.kubeconfigs[1]).unwrap();
    assert!(direct.contains(&url), "{direct}");
    let proxied = mesh.plane.dir().join("controller-1-proxied.kubeconfig");
    std::fs::write(
        &proxied,
        direct.replace(&url, &format!("https://127.0.0.1:{port}")),
    )
    .unwrap();
    let mut args: Vec<&str> = mesh.args.iter().map(String::as_str).collect();
    args.extend(["--leader-election=true", "--identity", "behind-proxy"]);
    let leader = controlplane::spawn_controller(&mesh.plane.clusters[1], &proxied, &args);
    wait_for(
        "the proxied replica leads",
        Duration::from_secs(60),
        || async {
            leader.assert_running();
            match http_get(leader.admin_addr(), "/ready").await {
                (200, _) => Ok(()),
                (code, body) => Err(format!("/ready {code} {body:?}")),
            }
        },
    )
    .await;
    let standby = mesh.spawn(1, &["--leader-election=true", "--identity", "direct"]);
    wait_for(
        "the direct replica stands by",
        Duration::from_secs(30),
        || async {
            standby.assert_running();
            match http_get(standby.admin_addr(), "/ready").await {
                (503, _) => Ok(()),
                (code, body) => Err(format!("/ready {code} {body:?}")),
            }
        },
    )
    .await;
    let b = mesh.client(1).clone();
    export_service(mesh.client(0), NS, "before-cut", "10.200.0.60").await;
    wait_for("imported under the proxied leader", WAIT, || async {
        import(&b, NS, "before-cut")
            .await
            .map(|_| ())
            .ok_or_else(|| "no import".to_owned())
    })
    .await;
    assert!(metric(&leader, WRITES).await > 0.0);
    assert_eq!(metric(&standby, WRITES).await, 0.0, "the standby wrote");

    toxiproxy.blackhole("cluster1").await;
    let cut = Instant::now();
    let status = wait_for(
        "the cut-off leader exits",
        RENEW_DEADLINE + Duration::from_secs(5),
        || async { leader.exited().ok_or_else(|| "still running".to_owned()) },
    )
    .await;
    let stopped = cut.elapsed();
    let log = leader.log();
    assert!(!status.success(), "exited with {status}");
    assert!(
        log.contains("leadership lost") && log.contains("did not finish within"),
        "the leader exited for another reason:\n{}",
        controlplane::tail(leader.log_path())
    );
    // Its last renewal was at most RENEW_EVERY before the cut, so its
    // deadline is at most RENEW_DEADLINE after it; 1 s for polling.
    assert!(
        stopped <= RENEW_DEADLINE + Duration::from_secs(1),
        "the cut-off leader stopped {stopped:?} after the cut, past its deadline"
    );

    wait_for(
        "the standby takes over",
        LEASE_DURATION + RETRY_EVERY + Duration::from_secs(3),
        || async {
            standby.assert_running();
            match http_get(standby.admin_addr(), "/ready").await {
                (200, _) => Ok(()),
                (code, body) => Err(format!("/ready {code} {body:?}")),
            }
        },
    )
    .await;
    let took_over = cut.elapsed();
    let lease = Api::<Lease>::namespaced(b.clone(), controlplane::CONTROLLER_NAMESPACE)
        .get("clusterset-dns-controller")
        .await
        .unwrap();
    let holder = lease.spec.and_then(|s| s.holder_identity);
    assert_eq!(holder.as_deref(), Some("direct"));
    export_service(mesh.client(0), NS, "after-cut", "10.200.0.61").await;
    wait_for("imported under the new leader", WAIT, || async {
        import(&b, NS, "after-cut")
            .await
            .map(|_| ())
            .ok_or_else(|| "no import".to_owned())
    })
    .await;
    assert!(metric(&standby, WRITES).await > 0.0);
    eprintln!(
        "fenced leader: stopped {:.1} s after its apiserver path was cut (deadline {} s after \
         its last renewal), the standby led {:.1} s after the cut (Lease {} s)",
        stopped.as_secs_f64(),
        RENEW_DEADLINE.as_secs(),
        took_over.as_secs_f64(),
        LEASE_DURATION.as_secs()
    );
    toxiproxy.heal("cluster1").await;
}
