//! The Kubernetes source against a real kube-apiserver and etcd: answers
//! follow API writes, readiness means "indexed", the server survives an
//! apiserver restart, mirror API groups work, and RBAC is exactly enough.
//!
//! Each behaviour is a named trial (libtest-mimic). The behaviours of
//! answers following API writes share one apiserver and DNS server, each
//! in a namespace of its own; every other test starts what it needs.
//!
//! Tier 2: needs the Go-built kube-apiserver and etcd, so this target
//! requires the `testenv` feature (Cargo.toml; `scripts/test.sh` or
//! `cargo test --features testenv`). A missing binary fails the tests with
//! the command that builds it (`tests/controlplane`).

mod controlplane;
mod dns_server;
mod support;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use clusterset_dns::api::{ServiceImport, ServiceImportSpec, ServiceImportType, ServicePort};
use clusterset_dns::app::Running;
use controlplane::ControlPlane;
use dns_server::{Transport, exchange, query, sorted, start_dns};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use support::trials::{self, behaviours, standalone};
use support::{create_namespace, http_get, wait_for};
use tokio::time::Instant;

/// Generous: the tests of this file run in parallel, each with its own
/// etcd and kube-apiservers, on two cores.
const WAIT: Duration = Duration::from_secs(30);

/// True when `/ready` answers 200.
async fn is_ready(running: &Running) -> bool {
    http_get(running.admin_addr(), "/ready").await.0 == 200
}

/// (rcode, sorted answer lines) of one UDP query.
async fn ask(running: &Running, name: &str, rtype: RecordType) -> (ResponseCode, Vec<String>) {
    let response = exchange(running.dns_addr(), Transport::Udp, &query(name, rtype)).await;
    (response.metadata.response_code, sorted(&response.answers))
}

async fn answers_become(
    running: &Running,
    name: &str,
    rtype: RecordType,
    rcode: ResponseCode,
    want: &[&str],
) {
    let want: Vec<String> = dns_server::expected(want);
    let start = Instant::now();
    loop {
        let last = ask(running, name, rtype).await;
        if last.0 == rcode && last.1 == want {
            return;
        }
        assert!(
            start.elapsed() < WAIT,
            "{name} {rtype}: want {rcode} {want:#?}, still {last:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Namespace `shop` and in it the ClusterSetIP import `web` (10.96.0.10,
/// http/TCP 80); returns the namespace's ServiceImport API.
async fn create_web_import(client: &Client) -> Api<ServiceImport> {
    create_namespace(client, "shop").await;
    let imports: Api<ServiceImport> = Api::namespaced(client.clone(), "shop");
    imports
        .create(
            &PostParams::default(),
            &import(
                "shop",
                "web",
                ServiceImportType::ClusterSetIp,
                &["10.96.0.10"],
                &[("http", "TCP", 80)],
            ),
        )
        .await
        .unwrap();
    imports
}

fn import(
    ns: &str,
    name: &str,
    kind: ServiceImportType,
    ips: &[&str],
    ports: &[(&str, &str, i32)],
) -> ServiceImport {
    let mut si = ServiceImport::new(
        name,
        ServiceImportSpec {
            ports: ports
                .iter()
                .map(|(n, p, port)| ServicePort {
                    name: Some(n.to_string()),
                    protocol: Some(p.to_string()),
                    app_protocol: None,
                    port: *port,
                })
                .collect(),
            ips: ips.iter().map(|s| s.to_string()).collect(),
            type_: kind,
            session_affinity: None,
            session_affinity_config: None,
            ip_families: vec![],
            internal_traffic_policy: None,
            traffic_distribution: None,
        },
    );
    si.metadata.namespace = Some(ns.into());
    si
}

/// An endpoint of a test slice: address, hostname, ready condition.
type Endpointish = (&'static str, Option<&'static str>, Option<bool>);

fn slice(
    ns: &str,
    name: &str,
    service: &str,
    cluster: &str,
    family: &str,
    endpoints: &[Endpointish],
) -> EndpointSlice {
    let labels = BTreeMap::from([
        (
            "multicluster.kubernetes.io/service-name".to_string(),
            service.to_string(),
        ),
        (
            "multicluster.kubernetes.io/source-cluster".to_string(),
            cluster.to_string(),
        ),
        (
            "endpointslice.kubernetes.io/managed-by".to_string(),
            "clusterset-dns-test".to_string(),
        ),
    ]);
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(labels),
            ..Default::default()
        },
        address_type: family.into(),
        endpoints: endpoints
            .iter()
            .map(|(ip, host, ready)| Endpoint {
                addresses: vec![ip.to_string()],
                hostname: host.map(String::from),
                conditions: Some(EndpointConditions {
                    ready: *ready,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect(),
        ports: Some(vec![EndpointPort {
            name: Some("db".into()),
            port: Some(5432),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
    }
}

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let runtime = trials::runtime();
    // Tests that start their own apiservers first, the shared one's
    // behaviours after them: at most one trial waits for the group's turn.
    let mut all = trials::alone(standalone![
        readiness_means_indexed_and_the_index_survives_an_apiserver_restart,
        initial_lists_fall_back_to_pages_where_the_apiserver_does_not_stream_them,
        an_import_resolves_only_while_its_namespace_exists,
        a_mirror_api_group_serving_only_v1alpha1_is_found_and_served,
        the_deploy_cluster_role_is_enough_and_a_narrower_one_fails_clearly,
        a_relist_after_missed_changes_converges_without_wrong_answers,
        the_deploy_manifests_are_accepted_by_the_apiserver,
        the_cluster_id_comes_from_the_cluster_property_and_steers_local_first_answers,
    ]);
    let answering = behaviours![
        a_clusterset_ip_import_answers_a_aaaa_and_srv,
        a_changed_import_ip_is_answered_and_a_dropped_family_answers_nothing,
        a_headless_import_answers_its_ready_endpoints_by_name,
        an_endpoint_that_turns_ready_is_answered,
        deleted_slices_and_imports_leave_the_answers,
        an_answer_change_is_a_timed_publish,
    ];
    all.extend(trials::group(&args, &runtime, Answering::start, answering));
    let conclusion = libtest_mimic::run(&args, all);
    drop(runtime);
    conclusion.exit();
}

/// One apiserver and a DNS server watching it: the environment of the
/// behaviours "answers follow API writes", each in a namespace of its own
/// so that none depends on another's leftovers or order.
struct Answering {
    /// Kept for its processes: dropped last.
    _plane: ControlPlane,
    client: Client,
    running: Running,
}

impl Answering {
    fn start() -> std::pin::Pin<Box<dyn Future<Output = Self>>> {
        Box::pin(async {
            let plane = ControlPlane::start(1).await;
            let api = &plane.apiservers[0];
            let client = api.admin_client().await;
            let running = start_dns(&api.admin_kubeconfig, |_| {}).await;
            wait_for("ready", WAIT, || async {
                let (status, body) = http_get(running.admin_addr(), "/ready").await;
                if status == 200 {
                    Ok(())
                } else {
                    Err(format!("{status} {body}"))
                }
            })
            .await;
            Self {
                _plane: plane,
                client,
                running,
            }
        })
    }

    /// Namespace `ns`, created, and its import and slice APIs.
    async fn namespace(&self, ns: &str) -> (Api<ServiceImport>, Api<EndpointSlice>) {
        create_namespace(&self.client, ns).await;
        (
            Api::namespaced(self.client.clone(), ns),
            Api::namespaced(self.client.clone(), ns),
        )
    }

    /// Namespace `ns`, created, with the ClusterSetIP import `web` at
    /// `ips` (http/TCP 80) in it; its import and slice APIs.
    async fn with_web(&self, ns: &str, ips: &[&str]) -> (Api<ServiceImport>, Api<EndpointSlice>) {
        let (imports, slices) = self.namespace(ns).await;
        let web = import(
            ns,
            "web",
            ServiceImportType::ClusterSetIp,
            ips,
            &[("http", "TCP", 80)],
        );
        create(&imports, &web).await;
        (imports, slices)
    }

    /// Namespace `ns`, created, with the headless import `db` (db/TCP
    /// 5432) and its slices `(name, cluster, family, endpoints)` in it; its
    /// import and slice APIs.
    async fn with_db(
        &self,
        ns: &str,
        db_slices: &[(&str, &str, &str, &[Endpointish])],
    ) -> (Api<ServiceImport>, Api<EndpointSlice>) {
        let (imports, slices) = self.namespace(ns).await;
        create(&imports, &db_import(ns)).await;
        for (name, cluster, family, endpoints) in db_slices {
            create(&slices, &slice(ns, name, "db", cluster, family, endpoints)).await;
        }
        (imports, slices)
    }

    /// `name`'s `rtype` records become those with `rdata` (NOERROR, no
    /// record when `rdata` is empty).
    async fn records_become(&self, name: &str, rtype: RecordType, rdata: &[&str]) {
        let records: Vec<String> = rdata
            .iter()
            .map(|rdata| format!("{name} 5 IN {rtype} {rdata}"))
            .collect();
        let records: Vec<&str> = records.iter().map(String::as_str).collect();
        self.answers_become(name, rtype, ResponseCode::NoError, &records)
            .await;
    }

    /// `name` stops existing (NXDOMAIN).
    async fn is_gone(&self, name: &str) {
        self.answers_become(name, RecordType::A, ResponseCode::NXDomain, &[])
            .await;
    }

    async fn answers_become(
        &self,
        name: &str,
        rtype: RecordType,
        rcode: ResponseCode,
        want: &[&str],
    ) {
        answers_become(&self.running, name, rtype, rcode, want).await;
    }
}

/// The headless import `db` (db/TCP 5432) of namespace `ns`.
fn db_import(ns: &str) -> ServiceImport {
    import(
        ns,
        "db",
        ServiceImportType::Headless,
        &[],
        &[("db", "TCP", 5432)],
    )
}

async fn create<K>(api: &Api<K>, object: &K)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(&PostParams::default(), object).await.unwrap();
}

/// A dual-stack ClusterSetIP import answers A, AAAA and SRV.
async fn a_clusterset_ip_import_answers_a_aaaa_and_srv(env: &mut Answering) {
    env.with_web("csip", &["10.96.0.10", "fd00::10"]).await;
    let name = "web.csip.svc.clusterset.local.";
    env.records_become(name, RecordType::A, &["10.96.0.10"])
        .await;
    env.records_become(name, RecordType::AAAA, &["fd00::10"])
        .await;
    env.records_become(
        &format!("_http._tcp.{name}"),
        RecordType::SRV,
        &[&format!("0 100 80 {name}")],
    )
    .await;
}

/// An import's IPs patched to one IPv4 address: A answers the new one,
/// AAAA answers nothing.
async fn a_changed_import_ip_is_answered_and_a_dropped_family_answers_nothing(env: &mut Answering) {
    let (imports, _) = env.with_web("changed", &["10.96.0.10", "fd00::10"]).await;
    let name = "web.changed.svc.clusterset.local.";
    env.records_become(name, RecordType::AAAA, &["fd00::10"])
        .await;
    let patch = serde_json::json!({"spec": {"ips": ["10.96.0.11"]}});
    imports
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    env.records_become(name, RecordType::A, &["10.96.0.11"])
        .await;
    env.records_become(name, RecordType::AAAA, &[]).await;
}

/// A headless import answers its ready endpoints at its name, each by its
/// hostname or address under its cluster, and SRV per ready endpoint; a
/// not-ready endpoint has no name.
async fn a_headless_import_answers_its_ready_endpoints_by_name(env: &mut Answering) {
    env.with_db(
        "headless",
        &[
            (
                "db-east-v4",
                "east",
                "IPv4",
                &[
                    ("10.1.0.1", Some("db-0"), Some(true)),
                    ("10.1.0.2", Some("db-1"), Some(false)),
                ],
            ),
            (
                "db-east-v6",
                "east",
                "IPv6",
                &[("fd00:1::1", Some("db-0"), None)],
            ),
            (
                "db-west-v4",
                "west",
                "IPv4",
                &[("10.2.0.1", None, Some(true))],
            ),
        ],
    )
    .await;
    let name = "db.headless.svc.clusterset.local.";
    env.records_become(name, RecordType::A, &["10.1.0.1", "10.2.0.1"])
        .await;
    env.records_become(
        &format!("db-0.east.{name}"),
        RecordType::AAAA,
        &["fd00:1::1"],
    )
    .await;
    env.records_become(
        &format!("10-2-0-1.west.{name}"),
        RecordType::A,
        &["10.2.0.1"],
    )
    .await;
    env.is_gone(&format!("db-1.east.{name}")).await;
    env.records_become(
        &format!("_db._tcp.{name}"),
        RecordType::SRV,
        &[
            &format!("0 50 5432 10-2-0-1.west.{name}"),
            &format!("0 50 5432 db-0.east.{name}"),
        ],
    )
    .await;
}

/// A not-ready endpoint that turns ready gets its name.
async fn an_endpoint_that_turns_ready_is_answered(env: &mut Answering) {
    let endpoints = |ready| {
        [
            ("10.1.0.1", Some("db-0"), Some(true)),
            ("10.1.0.2", Some("db-1"), Some(ready)),
        ]
    };
    let (_, slices) = env
        .with_db(
            "turns-ready",
            &[("db-east", "east", "IPv4", &endpoints(false))],
        )
        .await;
    let name = "db-1.east.db.turns-ready.svc.clusterset.local.";
    let listed = "db-0.east.db.turns-ready.svc.clusterset.local.";
    env.records_become(listed, RecordType::A, &["10.1.0.1"])
        .await;
    env.is_gone(name).await;
    let ready = slice(
        "turns-ready",
        "db-east",
        "db",
        "east",
        "IPv4",
        &endpoints(true),
    );
    let patch = serde_json::json!({"endpoints": ready.endpoints});
    slices
        .patch("db-east", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    env.records_become(name, RecordType::A, &["10.1.0.2"]).await;
}

/// A deleted slice leaves the answers, a deleted import its name, and the
/// namespace's name goes with its last import.
async fn deleted_slices_and_imports_leave_the_answers(env: &mut Answering) {
    let (imports, slices) = env
        .with_db(
            "deleted",
            &[
                ("db-east", "east", "IPv4", &[("10.1.0.1", None, Some(true))]),
                ("db-west", "west", "IPv4", &[("10.2.0.1", None, Some(true))]),
            ],
        )
        .await;
    let web = import(
        "deleted",
        "web",
        ServiceImportType::ClusterSetIp,
        &["10.96.0.10"],
        &[("http", "TCP", 80)],
    );
    create(&imports, &web).await;
    let db = "db.deleted.svc.clusterset.local.";
    let web = "web.deleted.svc.clusterset.local.";
    env.records_become(db, RecordType::A, &["10.1.0.1", "10.2.0.1"])
        .await;
    env.records_become(web, RecordType::A, &["10.96.0.10"])
        .await;

    slices
        .delete("db-west", &DeleteParams::default())
        .await
        .unwrap();
    env.records_become(db, RecordType::A, &["10.1.0.1"]).await;
    imports
        .delete("db", &DeleteParams::default())
        .await
        .unwrap();
    env.is_gone(db).await;
    imports
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    env.is_gone(web).await;
    env.is_gone("deleted.svc.clusterset.local.").await;
}

/// An answer that changes was published as a timed zone: the publish
/// latency histogram counts it.
async fn an_answer_change_is_a_timed_publish(env: &mut Answering) {
    let publishes = || async {
        let metrics = support::http_ok(env.running.admin_addr(), "/metrics").await;
        dns_server::metric(
            &metrics,
            "clusterset_dns_zone_publish_latency_seconds_count",
        )
        .unwrap()
    };
    let before = publishes().await;
    env.with_web("timed", &["10.96.0.12"]).await;
    let name = "web.timed.svc.clusterset.local.";
    env.records_become(name, RecordType::A, &["10.96.0.12"])
        .await;
    let after = publishes().await;
    assert!(
        after > before,
        "timed publishes {before} before the import, {after} once answered"
    );
}

/// Before the first list the server answers SERVFAIL and is not ready; it
/// keeps its last index while the apiserver is down and catches up after.
async fn readiness_means_indexed_and_the_index_survives_an_apiserver_restart() {
    let mut plane = ControlPlane::start(1).await;
    let client = plane.apiservers[0].admin_client().await;
    create_web_import(&client).await;

    // Start while the apiserver is down: SERVFAIL, never a false NXDOMAIN.
    plane.apiservers[0].stop();
    let kubeconfig = plane.apiservers[0].admin_kubeconfig.clone();
    let running = start_dns(&kubeconfig, |_| {}).await;
    for _ in 0..5 {
        let (rcode, _) = ask(&running, "web.shop.svc.clusterset.local.", RecordType::A).await;
        assert_eq!(rcode, ResponseCode::ServFail);
        let (rcode, _) = ask(
            &running,
            "nothing.shop.svc.clusterset.local.",
            RecordType::A,
        )
        .await;
        assert_eq!(rcode, ResponseCode::ServFail);
    }
    assert!(!is_ready(&running).await);

    plane.apiservers[0].start();
    answers_become(
        &running,
        "web.shop.svc.clusterset.local.",
        RecordType::A,
        ResponseCode::NoError,
        &["web.shop.svc.clusterset.local. 5 IN A 10.96.0.10"],
    )
    .await;
    assert!(is_ready(&running).await);

    // The apiserver goes away: answers continue from the last index, and
    // the metric says the source is stale.
    plane.apiservers[0].stop();
    wait_for("source_stale = 1", WAIT, || async {
        let (_, metrics) = http_get(running.admin_addr(), "/metrics").await;
        match dns_server::metric(&metrics, "clusterset_dns_source_stale") {
            Some(1.0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    for _ in 0..10 {
        assert_eq!(
            ask(&running, "web.shop.svc.clusterset.local.", RecordType::A)
                .await
                .0,
            ResponseCode::NoError
        );
    }

    // It comes back; a change made after the restart is picked up.
    plane.apiservers[0].start();
    let client = plane.apiservers[0].admin_client().await;
    let imports: Api<ServiceImport> = Api::namespaced(client, "shop");
    let patch = serde_json::json!({"spec": {"ips": ["10.96.0.99"]}});
    imports
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    answers_become(
        &running,
        "web.shop.svc.clusterset.local.",
        RecordType::A,
        ResponseCode::NoError,
        &["web.shop.svc.clusterset.local. 5 IN A 10.96.0.99"],
    )
    .await;
    wait_for("source_stale = 0", WAIT, || async {
        let (_, metrics) = http_get(running.admin_addr(), "/metrics").await;
        match dns_server::metric(&metrics, "clusterset_dns_source_stale") {
            Some(0.0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    running.stop().await;
}

/// Kubernetes 1.33 ships the WatchList feature gate off, and any
/// apiserver may have it turned off: such an apiserver refuses a watch
/// that streams the initial objects. The source then lists in pages and
/// serves as before, changes included.
async fn initial_lists_fall_back_to_pages_where_the_apiserver_does_not_stream_them() {
    let mut plane = ControlPlane::start(1).await;
    plane.apiservers[0].stop();
    plane.apiservers[0].start_with(&["--feature-gates=WatchList=false"]);
    let client = plane.apiservers[0].admin_client().await;
    // The premise: this apiserver refuses a streaming watch.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let refused = namespaces
        .watch(&kube::api::WatchParams::streaming_lists(), "0")
        .await
        .err()
        .expect("a streaming watch is refused");
    assert!(
        matches!(&refused, kube::Error::Api(status) if status.code == 422),
        "{refused}"
    );

    let imports = create_web_import(&client).await;
    let running = start_dns(&plane.apiservers[0].admin_kubeconfig, |_| {}).await;
    answers_become(
        &running,
        "web.shop.svc.clusterset.local.",
        RecordType::A,
        ResponseCode::NoError,
        &["web.shop.svc.clusterset.local. 5 IN A 10.96.0.10"],
    )
    .await;
    assert!(is_ready(&running).await);
    // The watch that follows the paged list delivers changes.
    let patch = serde_json::json!({"spec": {"ips": ["10.96.0.11"]}});
    imports
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    answers_become(
        &running,
        "web.shop.svc.clusterset.local.",
        RecordType::A,
        ResponseCode::NoError,
        &["web.shop.svc.clusterset.local. 5 IN A 10.96.0.11"],
    )
    .await;
    running.stop().await;
}

/// An import in a namespace that does not exist locally does not resolve.
async fn an_import_resolves_only_while_its_namespace_exists() {
    let plane = ControlPlane::start(1).await;
    let client = plane.apiservers[0].admin_client().await;
    create_namespace(&client, "shop").await;
    let running = start_dns(&plane.apiservers[0].admin_kubeconfig, |_| {}).await;
    let imports: Api<ServiceImport> = Api::namespaced(client.clone(), "shop");
    imports
        .create(
            &PostParams::default(),
            &import(
                "shop",
                "web",
                ServiceImportType::ClusterSetIp,
                &["10.96.0.10"],
                &[],
            ),
        )
        .await
        .unwrap();
    answers_become(
        &running,
        "web.shop.svc.clusterset.local.",
        RecordType::A,
        ResponseCode::NoError,
        &["web.shop.svc.clusterset.local. 5 IN A 10.96.0.10"],
    )
    .await;
    // Without a controller-manager a deleted namespace stays Terminating
    // with its objects: exactly the state in which names must go.
    Api::<Namespace>::all(client)
        .delete("shop", &DeleteParams::default())
        .await
        .unwrap();
    answers_become(
        &running,
        "web.shop.svc.clusterset.local.",
        RecordType::A,
        ResponseCode::NXDomain,
        &[],
    )
    .await;
    // /explain says why: the import is there, its namespace is not.
    let web = dns_server::explain(running.admin_addr(), "web.shop.svc.clusterset.local", "A").await;
    assert_eq!(web["service"]["import"]["type"], "ClusterSetIP", "{web:#}");
    assert_eq!(web["service"]["namespace_exists"], false, "{web:#}");
    assert!(
        dns_server::explain_notes(&web).contains("namespace shop does not exist in this cluster"),
        "{web:#}"
    );
    running.stop().await;
}

/// A vendor's mirror API group with the same schema is served unchanged;
/// this one serves only v1alpha1, which discovery falls back to.
async fn a_mirror_api_group_serving_only_v1alpha1_is_found_and_served() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let plane = ControlPlane::start(1).await;
    let client = plane.apiservers[0].admin_client().await;
    create_namespace(&client, "shop").await;

    // The same CRD under another group, as GKE serves net.gke.io.
    let mut crd = clusterset_dns::api::crds::all()
        .into_iter()
        .find(|c| c.spec.names.kind == "ServiceImport")
        .unwrap();
    crd.spec.group = "net.example.com".into();
    crd.spec.versions.retain(|v| v.name == "v1alpha1");
    crd.spec.versions[0].storage = true;
    crd.metadata = ObjectMeta {
        name: Some(format!("{}.net.example.com", crd.spec.names.plural)),
        ..Default::default()
    };
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let name = crd.metadata.name.clone().unwrap();
    tokio::time::timeout(
        WAIT,
        kube::runtime::wait::await_condition(
            crds,
            &name,
            kube::runtime::wait::conditions::is_crd_established(),
        ),
    )
    .await
    .unwrap()
    .unwrap();

    let running = start_dns(&plane.apiservers[0].admin_kubeconfig, |a| {
        a.import_group = Some("net.example.com".into())
    })
    .await;
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "net.example.com",
        "v1alpha1",
        "ServiceImport",
    ));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "shop", &resource);
    let object: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "net.example.com/v1alpha1",
        "kind": "ServiceImport",
        "metadata": {"name": "mirrored", "namespace": "shop"},
        "spec": {"type": "ClusterSetIP", "ips": ["10.96.7.7"], "ports": [{"port": 80, "protocol": "TCP"}]}
    }))
    .unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
    answers_become(
        &running,
        "mirrored.shop.svc.clusterset.local.",
        RecordType::A,
        ResponseCode::NoError,
        &["mirrored.shop.svc.clusterset.local. 5 IN A 10.96.7.7"],
    )
    .await;
    // An object in the standard group is not what this server watches.
    let imports: Api<ServiceImport> = Api::namespaced(client, "shop");
    imports
        .create(
            &PostParams::default(),
            &import(
                "shop",
                "standard",
                ServiceImportType::ClusterSetIp,
                &["10.96.8.8"],
                &[],
            ),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        ask(
            &running,
            "standard.shop.svc.clusterset.local.",
            RecordType::A
        )
        .await
        .0,
        ResponseCode::NXDomain
    );
    running.stop().await;
}

/// Binds `role` (a ClusterRole object) to the test's unprivileged user.
async fn bind_role(client: &Client, role: &k8s_openapi::api::rbac::v1::ClusterRole) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleRef, Subject};
    let roles: Api<ClusterRole> = Api::all(client.clone());
    roles.create(&PostParams::default(), role).await.unwrap();
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: role.metadata.name.clone(),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: role.metadata.name.clone().unwrap(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: controlplane::DNS_USER.into(),
            ..Default::default()
        }]),
    };
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

fn deploy_cluster_role() -> k8s_openapi::api::rbac::v1::ClusterRole {
    let text = std::fs::read_to_string(dns_server::repo_path("deploy/rbac.yaml")).unwrap();
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
    let role = docs
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("deploy/rbac.yaml has a ClusterRole");
    serde_json::from_value(role).unwrap()
}

/// The ClusterRole in deploy/ is enough; one rule less fails loudly.
async fn the_deploy_cluster_role_is_enough_and_a_narrower_one_fails_clearly() {
    let plane = ControlPlane::start(2).await;

    // Cluster 0: exactly the shipped role.
    let admin = plane.apiservers[0].admin_client().await;
    create_namespace(&admin, "shop").await;
    bind_role(&admin, &deploy_cluster_role()).await;
    let imports: Api<ServiceImport> = Api::namespaced(admin.clone(), "shop");
    imports
        .create(
            &PostParams::default(),
            &import(
                "shop",
                "web",
                ServiceImportType::ClusterSetIp,
                &["10.96.0.10"],
                &[],
            ),
        )
        .await
        .unwrap();
    let running = start_dns(&plane.apiservers[0].dns_kubeconfig, |_| {}).await;
    answers_become(
        &running,
        "web.shop.svc.clusterset.local.",
        RecordType::A,
        ResponseCode::NoError,
        &["web.shop.svc.clusterset.local. 5 IN A 10.96.0.10"],
    )
    .await;
    running.stop().await;

    // Cluster 1: the same role without EndpointSlices.
    let admin = plane.apiservers[1].admin_client().await;
    let mut narrow = deploy_cluster_role();
    narrow.rules.as_mut().unwrap().retain(|r| {
        !r.resources
            .as_ref()
            .unwrap()
            .contains(&"endpointslices".to_string())
    });
    bind_role(&admin, &narrow).await;
    let mut running = start_dns(&plane.apiservers[1].dns_kubeconfig, |_| {}).await;
    let error = tokio::time::timeout(WAIT, running.fatal_error())
        .await
        .expect("a forbidden watch must stop the server");
    let message = error.to_string();
    assert!(message.contains("endpointslices"), "{message}");
    assert!(message.contains("forbidden"), "{message}");
    // It never claimed readiness or answered from an empty index.
    assert!(!is_ready(&running).await);
    assert_eq!(
        ask(&running, "web.shop.svc.clusterset.local.", RecordType::A)
            .await
            .0,
        ResponseCode::ServFail
    );
    running.stop().await;
}

/// Changes made while our apiserver is down (written through another
/// apiserver of the same cluster) are picked up by the relist, and a name
/// that did not change never answers wrongly meanwhile.
async fn a_relist_after_missed_changes_converges_without_wrong_answers() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let mut plane = ControlPlane::start(1).await;
    let replica = plane.start_replica(0);
    let client = plane.apiservers[0].admin_client().await;
    create_namespace(&client, "shop").await;
    let imports: Api<ServiceImport> = Api::namespaced(client.clone(), "shop");
    let pp = PostParams::default();
    for (name, ip) in [
        ("stable", "10.96.0.1"),
        ("gone", "10.96.0.2"),
        ("moved", "10.96.0.3"),
        ("broken", "10.96.0.5"),
    ] {
        imports
            .create(
                &pp,
                &import("shop", name, ServiceImportType::ClusterSetIp, &[ip], &[]),
            )
            .await
            .unwrap();
    }
    let running = Arc::new(start_dns(&plane.apiservers[0].admin_kubeconfig, |_| {}).await);
    answers_become(
        &running,
        "moved.shop.svc.clusterset.local.",
        RecordType::A,
        ResponseCode::NoError,
        &["moved.shop.svc.clusterset.local. 5 IN A 10.96.0.3"],
    )
    .await;

    // An object that turns invalid keeps its last valid version, through
    // the update and through the relist below.
    imports
        .patch(
            "broken",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": {"ips": ["not-an-ip"]}})),
        )
        .await
        .unwrap();
    wait_for("the invalid update to be seen", WAIT, || async {
        let (_, metrics) = http_get(running.admin_addr(), "/metrics").await;
        match dns_server::metric(
            &metrics,
            "clusterset_dns_invalid_objects_total{kind=\"ServiceImport\"}",
        ) {
            Some(1.0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let broken = (
        ResponseCode::NoError,
        vec!["broken.shop.svc.clusterset.local. 5 IN A 10.96.0.5".to_string()],
    );
    assert_eq!(
        ask(&running, "broken.shop.svc.clusterset.local.", RecordType::A).await,
        broken
    );
    // /explain names the rejected update and what is served instead.
    let explained = dns_server::explain(
        running.admin_addr(),
        "broken.shop.svc.clusterset.local",
        "A",
    )
    .await;
    assert_eq!(explained["service"]["import"]["ips"][0], "10.96.0.5");
    assert_eq!(
        explained["service"]["rejected"][0]["kind"], "ServiceImport",
        "{explained:#}"
    );
    assert_eq!(explained["service"]["rejected"][0]["name"], "broken");
    assert!(
        dns_server::explain_notes(&explained).contains("not-an-ip"),
        "{explained:#}"
    );

    // Query the unchanged name continuously through everything that follows.
    let stop = Arc::new(AtomicBool::new(false));
    let wrong = Arc::new(AtomicUsize::new(0));
    let asked = Arc::new(AtomicUsize::new(0));
    let checker = {
        let (running, stop, wrong, asked) =
            (running.clone(), stop.clone(), wrong.clone(), asked.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let answer =
                    ask(&running, "stable.shop.svc.clusterset.local.", RecordType::A).await;
                asked.fetch_add(1, Ordering::Relaxed);
                if answer
                    != (
                        ResponseCode::NoError,
                        vec!["stable.shop.svc.clusterset.local. 5 IN A 10.96.0.1".to_string()],
                    )
                {
                    wrong.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };

    plane.apiservers[0].stop();
    let other: Api<ServiceImport> =
        Api::namespaced(plane.apiservers[replica].admin_client().await, "shop");
    other
        .delete("gone", &DeleteParams::default())
        .await
        .unwrap();
    other
        .patch(
            "moved",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": {"ips": ["10.96.0.33"]}})),
        )
        .await
        .unwrap();
    other
        .create(
            &pp,
            &import(
                "shop",
                "new",
                ServiceImportType::ClusterSetIp,
                &["10.96.0.4"],
                &[],
            ),
        )
        .await
        .unwrap();
    // While disconnected, the last index keeps answering, and says so.
    assert_eq!(
        ask(&running, "gone.shop.svc.clusterset.local.", RecordType::A)
            .await
            .0,
        ResponseCode::NoError
    );
    let stale = || async {
        let metrics = support::http_ok(running.admin_addr(), "/metrics").await;
        dns_server::metric(&metrics, "clusterset_dns_source_stale")
    };
    wait_for("source_stale to be 1", WAIT, || async {
        match stale().await {
            Some(1.0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let explained =
        dns_server::explain(running.admin_addr(), "gone.shop.svc.clusterset.local", "A").await;
    let notes = dns_server::explain_notes(&explained);
    assert!(
        notes.contains("the source is failing (watch of "),
        "{notes}"
    );
    assert_eq!(explained["rcode"], "NOERROR", "{explained:#}");
    // Long enough for the watches' backoff to grow past the probe interval.
    tokio::time::sleep(Duration::from_secs(3)).await;

    plane.apiservers[0].start();
    // Not stale means caught up: the moment source_stale reads 0, every
    // change made during the outage is served.
    wait_for("source_stale to be 0", WAIT, || async {
        match stale().await {
            Some(0.0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    for (name, want) in [
        ("gone", (ResponseCode::NXDomain, vec![])),
        (
            "moved",
            (
                ResponseCode::NoError,
                vec!["moved.shop.svc.clusterset.local. 5 IN A 10.96.0.33".to_string()],
            ),
        ),
        (
            "new",
            (
                ResponseCode::NoError,
                vec!["new.shop.svc.clusterset.local. 5 IN A 10.96.0.4".to_string()],
            ),
        ),
        ("broken", broken.clone()),
    ] {
        let qname = format!("{name}.shop.svc.clusterset.local.");
        assert_eq!(ask(&running, &qname, RecordType::A).await, want, "{name}");
    }
    stop.store(true, Ordering::Relaxed);
    checker.await.unwrap();
    // The relist came from restarting the watches once the apiserver
    // answered (or from a 410 Gone, had a watch resumed first): either way
    // not from a mere reconnect.
    let metrics = support::http_ok(running.admin_addr(), "/metrics").await;
    let relists: f64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("clusterset_dns_watch_expired_total{")
                || l.starts_with("clusterset_dns_watch_restarts_total ")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(relists >= 1.0, "no relist seen:\n{metrics}");
    assert!(asked.load(Ordering::Relaxed) > 20, "the checker ran");
    assert_eq!(
        wrong.load(Ordering::Relaxed),
        0,
        "an unchanged name answered wrongly during the outage or relist"
    );
    Arc::try_unwrap(running).unwrap().stop().await;
}

/// The shipped manifests are accepted by a real apiserver (server-side
/// validation of every field).
async fn the_deploy_manifests_are_accepted_by_the_apiserver() {
    let plane = ControlPlane::start(1).await;
    let client = plane.apiservers[0].admin_client().await;
    let mut deployment =
        std::fs::read_to_string(dns_server::repo_path("deploy/clusterset-dns.yaml")).unwrap();
    if controlplane::kubernetes_version() < (1, 34) {
        // What docs/deploy.md's block for 1.33 changes, which refuses it.
        let node = "\n  trafficDistribution: PreferSameNode\n";
        assert!(
            deployment.contains(node),
            "the manifest asks for PreferSameNode"
        );
        deployment = deployment.replace(node, "\n  trafficDistribution: PreferClose\n");
    }
    let rbac = std::fs::read_to_string(dns_server::repo_path("deploy/rbac.yaml")).unwrap();
    controlplane::apply_manifest(&client, &format!("{deployment}\n---\n{rbac}")).await;
    let daemonsets: Api<k8s_openapi::api::apps::v1::DaemonSet> =
        Api::namespaced(client, "clusterset-dns");
    let ds = daemonsets.get("clusterset-dns").await.unwrap();
    let args = ds.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert!(
        args.iter().any(|a| a == "--dns-listen=0.0.0.0:5353"),
        "{args:?}"
    );
}

/// The server reads this cluster's id from the ClusterProperty
/// `cluster.clusterset.k8s.io` with the shipped role (which grants it),
/// answers a local-first headless import with this cluster's ready
/// endpoints once the property appears, fails over as they go not ready
/// and back, follows a changed id and answers from every cluster when the
/// property goes; a role without ClusterProperties still serves, without
/// local-first, and says why.
async fn the_cluster_id_comes_from_the_cluster_property_and_steers_local_first_answers() {
    use clusterset_dns::api::ClusterProperty;
    use clusterset_dns::api::well_known::CLUSTER_ID_PROPERTY;
    let plane = ControlPlane::start(1).await;
    let api = &plane.apiservers[0];
    let admin = api.admin_client().await;
    create_namespace(&admin, "shop").await;
    let mut db = import(
        "shop",
        "db",
        ServiceImportType::Headless,
        &[],
        &[("db", "TCP", 5432)],
    );
    db.spec.traffic_distribution = Some("PreferClose".into());
    let imports: Api<ServiceImport> = Api::namespaced(admin.clone(), "shop");
    imports.create(&PostParams::default(), &db).await.unwrap();
    let slices: Api<EndpointSlice> = Api::namespaced(admin.clone(), "shop");
    let a_slice = |ready: bool| {
        slice(
            "shop",
            "db-a",
            "db",
            "cluster-a",
            "IPv4",
            &[
                ("10.1.0.10", Some("db-0"), Some(ready)),
                ("10.1.0.11", Some("db-1"), Some(ready)),
            ],
        )
    };
    slices
        .create(&PostParams::default(), &a_slice(true))
        .await
        .unwrap();
    slices
        .create(
            &PostParams::default(),
            &slice(
                "shop",
                "db-b",
                "db",
                "cluster-b",
                "IPv4",
                &[("10.2.0.10", Some("db-0"), Some(true))],
            ),
        )
        .await
        .unwrap();
    let db_name = "db.shop.svc.clusterset.local.";
    let a = |ip: &str| format!("{db_name} 5 IN A {ip}");
    let (local, every) = (
        [a("10.1.0.10"), a("10.1.0.11")],
        [a("10.1.0.10"), a("10.1.0.11"), a("10.2.0.10")],
    );
    let local_lines: Vec<&str> = local.iter().map(String::as_str).collect();
    let every_lines: Vec<&str> = every.iter().map(String::as_str).collect();

    // A role without ClusterProperties: served, from every cluster, and
    // /explain says why.
    let mut narrow = deploy_cluster_role();
    narrow.metadata.name = Some("clusterset-dns-narrow".into());
    narrow.rules.as_mut().unwrap().retain(|r| {
        !r.resources
            .as_ref()
            .unwrap()
            .contains(&"clusterproperties".to_string())
    });
    bind_role(&admin, &narrow).await;
    controlplane::set_cluster_properties(&admin, "cluster-a", "set-1").await;
    let running = start_dns(&api.dns_kubeconfig, |_| {}).await;
    wait_for("ready without ClusterProperties", WAIT, || async {
        let (status, body) = http_get(running.admin_addr(), "/ready").await;
        if status == 200 {
            Ok(())
        } else {
            Err(format!("{status} {body}"))
        }
    })
    .await;
    answers_become(
        &running,
        db_name,
        RecordType::A,
        ResponseCode::NoError,
        &every_lines,
    )
    .await;
    let notes =
        dns_server::explain_notes(&dns_server::explain(running.admin_addr(), db_name, "A").await);
    assert!(
        notes.contains("this cluster's id is unknown (the ClusterProperty cluster.clusterset.k8s.io cannot be read")
            && notes.contains("forbidden"),
        "{notes}"
    );
    running.stop().await;

    // The shipped role: the id is read at start ...
    bind_role(&admin, &deploy_cluster_role()).await;
    let running = start_dns(&api.dns_kubeconfig, |_| {}).await;
    answers_become(
        &running,
        db_name,
        RecordType::A,
        ResponseCode::NoError,
        &local_lines,
    )
    .await;
    let explained = dns_server::explain(running.admin_addr(), db_name, "A").await;
    assert_eq!(
        explained["service"]["cluster_id"], "cluster-a",
        "{explained:#}"
    );
    assert_eq!(explained["tier"], "local");

    // ... this cluster's endpoints go not ready and come back ...
    let params = PatchParams::apply("clusterset-dns-test").force();
    slices
        .patch("db-a", &params, &Patch::Apply(&a_slice(false)))
        .await
        .unwrap();
    answers_become(
        &running,
        db_name,
        RecordType::A,
        ResponseCode::NoError,
        &[&a("10.2.0.10")],
    )
    .await;
    slices
        .patch("db-a", &params, &Patch::Apply(&a_slice(true)))
        .await
        .unwrap();
    answers_become(
        &running,
        db_name,
        RecordType::A,
        ResponseCode::NoError,
        &local_lines,
    )
    .await;

    // ... the id changes, goes, and appears again.
    controlplane::set_cluster_properties(&admin, "cluster-b", "set-1").await;
    answers_become(
        &running,
        db_name,
        RecordType::A,
        ResponseCode::NoError,
        &[&a("10.2.0.10")],
    )
    .await;
    let properties: Api<ClusterProperty> = Api::all(admin.clone());
    properties
        .delete(CLUSTER_ID_PROPERTY, &DeleteParams::default())
        .await
        .unwrap();
    answers_become(
        &running,
        db_name,
        RecordType::A,
        ResponseCode::NoError,
        &every_lines,
    )
    .await;
    let notes =
        dns_server::explain_notes(&dns_server::explain(running.admin_addr(), db_name, "A").await);
    assert!(
        notes.contains(
            "the ClusterProperty cluster.clusterset.k8s.io does not exist in this cluster"
        ),
        "{notes}"
    );
    controlplane::set_cluster_properties(&admin, "cluster-a", "set-1").await;
    answers_become(
        &running,
        db_name,
        RecordType::A,
        ResponseCode::NoError,
        &local_lines,
    )
    .await;
    // Answers of every tier were counted; the ClusterProperty watch never
    // made the source stale.
    let metrics = support::http_ok(running.admin_addr(), "/metrics").await;
    for tier in ["local", "all"] {
        let name = format!("clusterset_dns_local_first_answers_total{{tier=\"{tier}\"}}");
        assert!(
            dns_server::metric(&metrics, &name).is_some_and(|n| n >= 1.0),
            "{name}:\n{metrics}"
        );
    }
    assert_eq!(
        dns_server::metric(&metrics, "clusterset_dns_source_stale"),
        Some(0.0)
    );
    running.stop().await;
}
