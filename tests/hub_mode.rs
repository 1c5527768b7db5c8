//! Hub mode, end to end: a hub (etcd, kube-apiserver and
//! kube-controller-manager, set up with `clusterset-dns hub init`) and
//! three member clusters (apiservers with the shipped controller role),
//! each joined with `clusterset-dns hub join` and running its controller
//! with no peer Secret at all: every member reads the others only through
//! the hub.
//!
//! Each behaviour is a named trial on one hub and its members; each
//! passes alone, taking the steps it starts from.

mod controlplane;
mod support;

use std::path::PathBuf;
use std::time::Duration;

use clusterset_dns::api::PublishedService;
use clusterset_dns::controller::naming::MANAGED_BY;
use clusterset_dns::hub;
use controlplane::{
    CONTROLLER_NAMESPACE, ClusterSpec, ControlPlane, ControllerProcess, export_selectorless,
    install_controller, set_cluster_properties, spawn_controller,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use support::trials::{self, behaviours};
use support::{counter, create_namespace, import, wait_for};

/// The members' cluster ids, in the order of the control plane's clusters
/// after the hub.
const MEMBERS: [&str; 3] = ["cluster-a", "cluster-b", "cluster-c"];
/// How long a member stays imported once it is lost.
const GRACE: &str = "10s";
/// How long an import or a refusal may take to show.
const WAIT: Duration = Duration::from_secs(60);
/// The namespace the trials export from.
const NS: &str = "shop";
/// The pod range `hub join` records for every member: the trials' endpoints
/// are in it.
const POD_RANGE: &str = "10.1.0.0/24";

/// A hub, its members and their controllers.
struct Env {
    plane: ControlPlane,
    hub: Client,
    /// Admin clients of the members, in [`MEMBERS`] order.
    members: Vec<Client>,
    /// The controllers' kubeconfigs (the shipped role), in order.
    kubeconfigs: Vec<PathBuf>,
    /// The running controllers, in order (`None` while stopped).
    controllers: Vec<Option<ControllerProcess>>,
}

/// Runs `clusterset-dns <args>` without `KUBECONFIG`; panics unless it
/// succeeds.
async fn cli(args: &[&str]) -> String {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_clusterset-dns"))
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{args:?} failed:\n{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

impl Env {
    /// The hub and its members, every member joined to the hub.
    async fn start() -> Self {
        let env = Self::plane().await;
        env.init_hub().await;
        for i in 0..MEMBERS.len() {
            env.join_hub(i).await;
        }
        env.spawn_all()
    }

    /// The hub and its members, the members a mesh (each holds a peer
    /// Secret for each other), none joined to the hub yet.
    async fn mesh() -> Self {
        let env = Self::plane().await.spawn_all();
        // Each publishes first, then the others read it: peer Secrets as
        // `peer add` writes them, with peer-reader tokens (the
        // apiserver-only members publish no CA for `peer add` to find).
        for member in &env.members {
            controlplane::wait_publication_marker(member, WAIT).await;
        }
        for (i, member) in env.members.iter().enumerate() {
            for (j, id) in MEMBERS.iter().enumerate() {
                if i != j {
                    let kubeconfig = controlplane::service_account_kubeconfig(
                        &env.plane.clusters[j + 1],
                        CONTROLLER_NAMESPACE,
                        controlplane::PEER_READER_SA,
                        3600,
                    )
                    .await;
                    controlplane::add_peer_secret(member, id, &kubeconfig).await;
                }
            }
        }
        env
    }

    /// A hub and three members with the controller's prerequisites.
    async fn plane() -> Self {
        let hub_spec = ClusterSpec {
            crds: false,
            nodes: 0,
            ..ClusterSpec::member(0)
        };
        let plane = ControlPlane::start_with(&[
            hub_spec,
            ClusterSpec::api_only(),
            ClusterSpec::api_only(),
            ClusterSpec::api_only(),
        ])
        .await;
        let hub = plane.clusters[0].admin_client().await;
        let mut members = Vec::new();
        let mut kubeconfigs = Vec::new();
        for (i, id) in MEMBERS.iter().enumerate() {
            let cluster = &plane.clusters[i + 1];
            let client = cluster.admin_client().await;
            kubeconfigs.push(install_controller(cluster).await);
            set_cluster_properties(&client, id, "hub-set").await;
            create_namespace(&client, NS).await;
            members.push(client);
        }
        Self {
            plane,
            hub,
            members,
            kubeconfigs,
            controllers: Vec::new(),
        }
    }

    fn hub_kubeconfig(&self) -> String {
        self.plane.clusters[0]
            .admin_kubeconfig
            .display()
            .to_string()
    }

    /// `hub init`.
    async fn init_hub(&self) {
        cli(&["hub", "init", "--kubeconfig", &self.hub_kubeconfig()]).await;
    }

    /// `hub join` of member `i`, its pod range [`POD_RANGE`] (the
    /// apiserver-only members have no Nodes to read one from).
    async fn join_hub(&self, i: usize) {
        self.join_hub_with(i, &["--endpoint-cidr", POD_RANGE]).await;
    }

    /// `hub join` of member `i` with `extra` arguments; what it printed.
    async fn join_hub_with(&self, i: usize, extra: &[&str]) -> String {
        let member = self.plane.clusters[i + 1]
            .admin_kubeconfig
            .display()
            .to_string();
        let hub = self.hub_kubeconfig();
        let args = [
            &[
                "hub",
                "join",
                "--kubeconfig",
                &hub,
                "--member-kubeconfig",
                &member,
            ][..],
            extra,
        ]
        .concat();
        cli(&args).await
    }

    /// Starts every member's controller.
    fn spawn_all(mut self) -> Self {
        for i in 0..MEMBERS.len() {
            let controller = self.spawn(i);
            self.controllers.push(Some(controller));
        }
        self
    }

    /// Starts member `i`'s controller and waits until it is ready.
    fn spawn(&self, i: usize) -> ControllerProcess {
        let controller = spawn_controller(
            &self.plane.clusters[i + 1],
            &self.kubeconfigs[i],
            &["--peer-grace-period", GRACE, "--startup-sync-timeout", "5s"],
        );
        controller.wait_ready(WAIT);
        controller
    }

    /// Member `i`'s controller, started if it is not running.
    fn controller(&mut self, i: usize) -> &ControllerProcess {
        if self.controllers[i].is_none() {
            self.controllers[i] = Some(self.spawn(i));
        }
        self.controllers[i].as_ref().unwrap()
    }

    /// Member `i` exports `NS/name` with one endpoint at `address`.
    async fn export(&self, i: usize, name: &str, address: &str) {
        export_selectorless(
            &self.members[i],
            NS,
            name,
            json!([{"name": "http", "port": 80, "protocol": "TCP"}]),
            &[address],
        )
        .await;
    }

    /// Waits until member `i` imports `NS/name` with exactly `addresses`
    /// as its endpoints, from any cluster.
    async fn wait_imported(&self, i: usize, name: &str, addresses: &[&str]) {
        let client = self.members[i].clone();
        let mut want: Vec<String> = addresses.iter().map(|a| a.to_string()).collect();
        want.sort();
        wait_for(&format!("{} imports {NS}/{name}", MEMBERS[i]), WAIT, || {
            let client = client.clone();
            let want = want.clone();
            async move {
                import(&client, NS, name)
                    .await
                    .ok_or("no ServiceImport yet")?;
                let got = imported_addresses(&client, name).await;
                if got == want {
                    Ok(())
                } else {
                    Err(format!("endpoints {got:?}, want {want:?}"))
                }
            }
        })
        .await;
    }
}

/// The addresses of the imported slices of `NS/name` in a member.
async fn imported_addresses(client: &Client, name: &str) -> Vec<String> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    let selector = format!("multicluster.kubernetes.io/service-name={name}");
    let mut addresses: Vec<String> = slices
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
        .iter()
        .flat_map(|slice| slice.endpoints.iter())
        .flat_map(|endpoint| endpoint.addresses.iter().cloned())
        .collect();
    addresses.sort();
    addresses
}

fn main() {
    let args = trials::serial_arguments();
    let runtime = trials::runtime();
    let behaviours = behaviours![
        exports_import_everywhere_through_the_hub_with_no_peer_secret,
        an_object_labelled_with_another_members_id_is_refused_and_the_rest_kept,
        a_stopped_hub_freezes_imports_and_they_resume_when_it_is_back,
        a_member_whose_lease_expires_is_dropped_after_grace_and_back_when_it_renews,
        endpoints_outside_the_ranges_the_hub_admin_recorded_are_refused,
    ];
    let start: trials::Start<Env> = || Box::pin(Env::start());
    let mut all = trials::group(&args, &runtime, start, behaviours);
    let mesh: trials::Start<Env> = || Box::pin(Env::mesh());
    all.extend(trials::group(
        &args,
        &runtime,
        mesh,
        behaviours![a_mesh_moved_to_the_hub_a_member_at_a_time_keeps_every_import],
    ));
    let conclusion = libtest_mimic::run(&args, all);
    drop(runtime);
    conclusion.exit();
}

async fn exports_import_everywhere_through_the_hub_with_no_peer_secret(env: &mut Env) {
    env.export(0, "web", "10.1.0.10").await;
    env.export(1, "web", "10.1.0.11").await;
    for i in 0..MEMBERS.len() {
        env.controller(i);
    }
    // Every member imports both exporters' endpoints: its own through its
    // local slices, the other's through the hub; the third imports both.
    for i in 0..MEMBERS.len() {
        env.wait_imported(i, "web", &["10.1.0.10", "10.1.0.11"])
            .await;
    }
    // No member holds a peer Secret: nothing reads a member but its own
    // controller.
    for member in &env.members {
        let secrets: Api<Secret> = Api::namespaced(member.clone(), CONTROLLER_NAMESPACE);
        let peers = secrets
            .list(&ListParams::default().labels(clusterset_dns::peering::PEER_SELECTOR))
            .await
            .unwrap();
        assert!(peers.items.is_empty(), "a peer Secret: {:?}", peers.items);
    }
    // Each member's publication is on the hub, in its own namespace, with
    // its export's creation time carried along; and its Lease is renewed.
    for id in MEMBERS {
        let namespace = hub::member_namespace(id).unwrap();
        let published: Api<PublishedService> = Api::namespaced(env.hub.clone(), &namespace);
        let leases: Api<Lease> = Api::namespaced(env.hub.clone(), &namespace);
        wait_for(&format!("{id}'s Lease on the hub"), WAIT, || {
            let leases = leases.clone();
            async move {
                leases
                    .get_opt(hub::MEMBER_LEASE)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| "no Lease".to_owned())
                    .map(|_| ())
            }
        })
        .await;
        if id == MEMBERS[2] {
            continue;
        }
        let object = wait_for(&format!("{id}'s publication on the hub"), WAIT, || {
            let published = published.clone();
            async move {
                published
                    .get_opt(&format!("{NS}.web"))
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| "not published".to_owned())
            }
        })
        .await;
        assert_eq!(
            object
                .labels()
                .get("multicluster.kubernetes.io/source-cluster"),
            Some(&id.to_owned())
        );
        let export = object.spec.export.expect("the export travels");
        assert!(export.created.is_some(), "{export:?}");
    }
    // Every watch and request is a stream on one HTTP/2 connection per
    // client (`kube_http`): to its own apiserver the controller's client
    // and its Lease's, to the hub one, however many watches run; none to
    // another member.
    let hub_port = controlplane::port_of(&env.plane.apiservers[0].url);
    for (i, controller) in env.controllers.iter().enumerate() {
        let own_port = controlplane::port_of(&env.plane.apiservers[i + 1].url);
        let connections = controlplane::established_connections(controller.as_ref().unwrap().pid());
        let own = connections.get(&own_port).copied().unwrap_or(0);
        let to_hub = connections.get(&hub_port).copied().unwrap_or(0);
        assert!(
            own <= 2 && to_hub == 1 && own + to_hub == connections.values().sum::<usize>(),
            "{}: connections by remote port {connections:?} (its apiserver {own_port}, the hub {hub_port})",
            MEMBERS[i]
        );
    }
    // One withdrawn export is withdrawn everywhere.
    Api::<clusterset_dns::api::ServiceExport>::namespaced(env.members[1].clone(), NS)
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    for i in 0..MEMBERS.len() {
        env.wait_imported(i, "web", &["10.1.0.10"]).await;
    }
}

async fn an_object_labelled_with_another_members_id_is_refused_and_the_rest_kept(env: &mut Env) {
    env.export(1, "api", "10.1.0.21").await;
    for i in 0..MEMBERS.len() {
        env.controller(i);
    }
    env.wait_imported(2, "api", &["10.1.0.21"]).await;
    // In cluster-b's namespace, a PublishedService claiming to be
    // cluster-a's: the hub's policy refuses it from a member, so it is
    // written here with the hub admin's rights, as a hole in the hub's
    // layers would let it in. The members still refuse it.
    let namespace = hub::member_namespace(MEMBERS[1]).unwrap();
    let forged: PublishedService = support::object(json!({
        "apiVersion": "clusterset-dns.io/v1alpha1",
        "kind": "PublishedService",
        "metadata": {
            "name": format!("{NS}.forged"),
            "labels": {
                "multicluster.kubernetes.io/source-cluster": MEMBERS[0],
                "app.kubernetes.io/managed-by": MANAGED_BY,
            },
        },
        "spec": {"namespace": NS, "name": "forged", "ipFamilies": ["IPv4"], "ports": [{"port": 80, "protocol": "TCP"}]},
    }));
    let api: Api<PublishedService> = Api::namespaced(env.hub.clone(), &namespace);
    api.create(&PostParams::default(), &forged).await.unwrap();
    let admin = env.controller(2).admin_addr();
    wait_for("the refusal counted", WAIT, || async move {
        let refused = counter(
            admin,
            "clusterset_dns_controller_peer_objects_rejected_total",
            &["ForeignSourceCluster"],
        )
        .await;
        if refused >= 1.0 {
            Ok(())
        } else {
            Err(format!("{refused} refused"))
        }
    })
    .await;
    // Never imported, and cluster-b's honest export stays.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(import(&env.members[2], NS, "forged").await.is_none());
    env.wait_imported(2, "api", &["10.1.0.21"]).await;
    // And cluster-b's controller, whose namespace it is, removes from the
    // hub what it did not publish.
    wait_for("the forged object removed", WAIT, || {
        let api = api.clone();
        async move {
            match api.get_opt(&format!("{NS}.forged")).await {
                Ok(None) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
}

async fn a_stopped_hub_freezes_imports_and_they_resume_when_it_is_back(env: &mut Env) {
    env.export(0, "db", "10.1.0.30").await;
    for i in 0..MEMBERS.len() {
        env.controller(i);
    }
    env.wait_imported(1, "db", &["10.1.0.30"]).await;
    env.plane.apiservers[0].stop();
    // Three grace periods and more: nothing is dropped while the hub is
    // away, however long.
    tokio::time::sleep(Duration::from_secs(40)).await;
    for (member, id) in env.members.iter().zip(MEMBERS) {
        assert_eq!(
            imported_addresses(member, "db").await,
            ["10.1.0.30"],
            "{id} dropped an import while the hub was away",
        );
    }
    env.plane.apiservers[0].start();
    // Back: a change made meanwhile arrives.
    env.export(2, "db", "10.1.0.32").await;
    for i in 0..MEMBERS.len() {
        env.wait_imported(i, "db", &["10.1.0.30", "10.1.0.32"])
            .await;
    }
}

async fn a_member_whose_lease_expires_is_dropped_after_grace_and_back_when_it_renews(
    env: &mut Env,
) {
    env.export(0, "cache", "10.1.0.40").await;
    for i in 0..MEMBERS.len() {
        env.controller(i);
    }
    env.wait_imported(1, "cache", &["10.1.0.40"]).await;
    // cluster-a's controller stops: its Lease on the hub is no longer
    // renewed, while the hub answers and its publication stays there.
    env.controllers[0] = None;
    // Its last renewal, by the clock that wrote it (this machine's).
    let leases: Api<Lease> =
        Api::namespaced(env.hub.clone(), &hub::member_namespace(MEMBERS[0]).unwrap());
    let renewed = leases
        .get(hub::MEMBER_LEASE)
        .await
        .unwrap()
        .spec
        .and_then(|spec| spec.renew_time)
        .expect("a renewed Lease")
        .0;
    let client = env.members[1].clone();
    wait_for(
        "cluster-a dropped at cluster-b",
        Duration::from_secs(120),
        || {
            let client = client.clone();
            async move {
                match import(&client, NS, "cache").await {
                    None => Ok(()),
                    Some(_) => Err("still imported".to_owned()),
                }
            }
        },
    )
    .await;
    // Not before its Lease ran out and the grace period (10 s) after it:
    // cluster-b saw the last renewal at or after it was written and last
    // found the Lease current at most one 2 s liveness tick before it
    // expired, 30 s later; the grace counts from then.
    let after = k8s_openapi::jiff::Timestamp::now().duration_since(renewed);
    assert!(
        after >= k8s_openapi::jiff::SignedDuration::from_secs(38),
        "dropped {after:?} after its last renewal; cluster-b's log:\n{}",
        env.controllers[1]
            .as_ref()
            .map(|c| c.log())
            .unwrap_or_default()
    );
    // Its controller back, its Lease renewed: imported again.
    env.controller(0);
    env.wait_imported(1, "cache", &["10.1.0.40"]).await;
}

/// Member `i`'s controller's count of refusals with `reason`.
async fn refusals(env: &mut Env, i: usize, reason: &str) -> f64 {
    let admin = env.controller(i).admin_addr();
    counter(
        admin,
        "clusterset_dns_controller_peer_objects_rejected_total",
        &[&format!("reason=\"{reason}\"")],
    )
    .await
}

/// Waits until member `i` imports `NS/name` with exactly `addresses`, and
/// its controller has counted more refusals with `reason` than `before`.
async fn wait_refused(
    env: &mut Env,
    i: usize,
    name: &str,
    addresses: &[&str],
    reason: &str,
    before: f64,
) {
    let admin = env.controller(i).admin_addr();
    let client = env.members[i].clone();
    let want: Vec<String> = addresses.iter().map(|a| a.to_string()).collect();
    let reason = format!("reason=\"{reason}\"");
    wait_for(
        &format!("{} imports {want:?} and counts {reason}", MEMBERS[i]),
        WAIT,
        || {
            let client = client.clone();
            let want = want.clone();
            let reason = reason.clone();
            async move {
                let got = imported_addresses(&client, name).await;
                let refused = counter(
                    admin,
                    "clusterset_dns_controller_peer_objects_rejected_total",
                    &[&reason],
                )
                .await;
                if got == want && refused > before {
                    Ok(())
                } else {
                    Err(format!("endpoints {got:?}, {refused} refused"))
                }
            }
        },
    )
    .await;
}

async fn endpoints_outside_the_ranges_the_hub_admin_recorded_are_refused(env: &mut Env) {
    // cluster-b's record says 10.1.0.0/24 (`hub join --endpoint-cidr`);
    // it publishes one endpoint inside and one outside, in another
    // member's range as far as anyone knows.
    let mut before = Vec::new();
    for i in 0..MEMBERS.len() {
        before.push(refusals(env, i, "OutsidePeerRanges").await);
    }
    export_selectorless(
        &env.members[1],
        NS,
        "ranged",
        json!([{"name": "http", "port": 80, "protocol": "TCP"}]),
        &["10.1.0.60", "10.2.0.60"],
    )
    .await;
    for i in [0, 2] {
        wait_refused(
            env,
            i,
            "ranged",
            &["10.1.0.60"],
            "OutsidePeerRanges",
            before[i],
        )
        .await;
    }
    // The hub admin records the second range: both count, everywhere.
    let said = env
        .join_hub_with(
            1,
            &[
                "--endpoint-cidr",
                POD_RANGE,
                "--endpoint-cidr",
                "10.2.0.0/24",
            ],
        )
        .await;
    assert!(
        said.contains("endpoints accepted only in 10.1.0.0/24, 10.2.0.0/24 (from --endpoint-cidr)"),
        "{said}"
    );
    for i in [0, 2] {
        env.wait_imported(i, "ranged", &["10.1.0.60", "10.2.0.60"])
            .await;
    }
    // Without a record (deleted on the hub), none of cluster-b's endpoints
    // counts: the importers fail closed, and say why.
    let mut before = Vec::new();
    for i in 0..MEMBERS.len() {
        before.push(refusals(env, i, "NoMemberRecord").await);
    }
    let namespace = hub::member_namespace(MEMBERS[1]).unwrap();
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(env.hub.clone(), &namespace)
        .delete(hub::MEMBER_RECORD, &DeleteParams::default())
        .await
        .unwrap();
    for i in [0, 2] {
        wait_refused(env, i, "ranged", &[], "NoMemberRecord", before[i]).await;
    }
    // And back as the other trials expect it.
    env.join_hub(1).await;
    for i in [0, 2] {
        env.wait_imported(i, "ranged", &["10.1.0.60"]).await;
    }
}

async fn a_mesh_moved_to_the_hub_a_member_at_a_time_keeps_every_import(env: &mut Env) {
    const WANT: [&str; 2] = ["10.1.0.50", "10.1.0.51"];
    env.export(0, "move", WANT[0]).await;
    env.export(1, "move", WANT[1]).await;
    for i in 0..MEMBERS.len() {
        env.controller(i);
        env.wait_imported(i, "move", &WANT).await;
    }
    // Every member's imported endpoints, sampled every 100 ms from now to
    // the end of the move: a sample missing one is a gap.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let members = env.members.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let (mut samples, mut gaps) = (0, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for (member, id) in members.iter().zip(MEMBERS) {
                    let got = imported_addresses(member, "move").await;
                    samples += 1;
                    if got != WANT {
                        gaps.push(format!("{id}: {got:?}"));
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (samples, gaps)
        })
    };
    // Each member joins the hub while its peer Secrets stay: read both
    // ways, it is read once.
    env.init_hub().await;
    for i in 0..MEMBERS.len() {
        env.join_hub(i).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    // Every member's Lease on the hub: each reads the others there too.
    for id in MEMBERS {
        let leases: Api<Lease> =
            Api::namespaced(env.hub.clone(), &hub::member_namespace(id).unwrap());
        wait_for(&format!("{id}'s Lease on the hub"), WAIT, || {
            let leases = leases.clone();
            async move {
                match leases.get_opt(hub::MEMBER_LEASE).await {
                    Ok(Some(_)) => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }
        })
        .await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    // The mesh goes, a member at a time.
    for (i, member) in env.members.iter().enumerate() {
        for (j, peer) in MEMBERS.iter().enumerate() {
            if i != j {
                controlplane::remove_peer_secret(member, peer).await;
            }
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (samples, gaps) = sampler.await.unwrap();
    assert!(samples > 100, "{samples} samples");
    assert!(
        gaps.is_empty(),
        "{} gaps in {samples} samples: {gaps:?}",
        gaps.len()
    );
    // What is left is the hub.
    for member in &env.members {
        let secrets: Api<Secret> = Api::namespaced(member.clone(), CONTROLLER_NAMESPACE);
        let peers = secrets
            .list(&ListParams::default().labels(clusterset_dns::peering::PEER_SELECTOR))
            .await
            .unwrap();
        assert!(peers.items.is_empty(), "{:?}", peers.items);
    }
    for i in 0..MEMBERS.len() {
        env.wait_imported(i, "move", &WANT).await;
    }
}
