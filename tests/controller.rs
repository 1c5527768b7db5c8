//! The MCS controller on three member clusters that behave like real ones
//! (kube-apiserver, kube-controller-manager, kube-scheduler, kwok; cluster1
//! dual-stack), one controller per cluster running with exactly the shipped
//! roles: the local role of deploy/controller.yaml, and peers read with
//! tokens of the peer-reader role of deploy/peer-reader.yaml.
//!
//! Workloads are real: Deployments whose pods kwok runs, Services whose
//! EndpointSlices the in-tree controller writes. The three clusters start
//! once (they take seconds); each behaviour is a named trial
//! (`harness = false`, libtest-mimic) that fails on its own and names the
//! test IDs it covers (docs/controller.md, "How it is tested").
//!
//! Every trial passes alone (`cargo test --features testenv --test
//! controller -- --exact <trial>`): it works in a namespace of its own, or
//! observes a scenario that several trials share (a ClusterSetIP export,
//! a port conflict, merged exports), which the first of them to run sets
//! up ([`Clusterset::web`], [`Clusterset::conflict`],
//! [`Clusterset::merge`]). A trial that changes what it observes (scales,
//! unexports) sets the scenario up again in a namespace of its own.

mod controlplane;
mod dns_server;
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use controlplane::{Cluster, ControlPlane, ControllerProcess, create_namespace};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::trials::{self, behaviours};
use support::{create_if_absent, http_get, import, object};
use tokio::sync::OnceCell;

use clusterset_dns::api::{ServiceExport, ServiceImport};
use clusterset_dns::app::Running;
use hickory_proto::rr::RecordType;

/// Conformance's deadline for imports and their removal.
const WAIT: Duration = Duration::from_secs(20);
/// A peer's grace period in this test (production default: 5 m).
const GRACE: &str = "8s";

/// The A or AAAA addresses `name` resolves to through `dns`.
async fn resolve(dns: &Running, name: &str, rtype: RecordType) -> Vec<String> {
    let mut addresses: Vec<String> = dns_server::answers(dns.dns_addr(), name, rtype)
        .await
        .iter()
        .filter_map(|line| line.rsplit(' ').next().map(str::to_owned))
        .collect();
    addresses.sort();
    addresses
}

struct Member<'a> {
    cluster: &'a Cluster,
    client: Client,
    controller: &'a ControllerProcess,
}

impl Member<'_> {
    fn id(&self) -> &str {
        &self.cluster.name
    }

    /// The sum of the samples whose line starts with `name` (a metric
    /// name, or one with the start of its labels).
    async fn metric(&self, name: &str) -> f64 {
        let (_, body) = http_get(self.controller.admin_addr(), "/metrics").await;
        body.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

/// The last 60 lines of a log.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// Deployment `name` of `replicas` pods and its Service (`headless` or a
/// ClusterIP one) with `ports`; what exists already is kept.
async fn deploy(
    client: &Client,
    ns: &str,
    name: &str,
    replicas: i32,
    headless: bool,
    ports: serde_json::Value,
) {
    create_if_absent(
        &Api::<Deployment>::namespaced(client.clone(), ns),
        &object(json!({
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "app", "image": "example/app"}]},
                },
            },
        })),
    )
    .await;
    let mut spec = json!({"selector": {"app": name}, "ports": ports});
    if headless {
        spec["clusterIP"] = "None".into();
    }
    create_if_absent(
        &Api::<Service>::namespaced(client.clone(), ns),
        &object(json!({"metadata": {"name": name}, "spec": spec})),
    )
    .await;
}

async fn export(client: &Client, ns: &str, name: &str) {
    create_if_absent(
        &Api::<ServiceExport>::namespaced(client.clone(), ns),
        &object(json!({"metadata": {"name": name}})),
    )
    .await;
}

async fn unexport(client: &Client, ns: &str, name: &str) {
    let api: Api<ServiceExport> = Api::namespaced(client.clone(), ns);
    api.delete(name, &DeleteParams::default()).await.unwrap();
}

async fn mcs_slices(client: &Client, ns: &str, name: &str) -> Vec<EndpointSlice> {
    Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .list(
            &ListParams::default()
                .labels(&format!("multicluster.kubernetes.io/service-name={name}")),
        )
        .await
        .unwrap()
        .items
}

/// Ready endpoint addresses of the MCS slices from `source`.
fn ready_addresses(slices: &[EndpointSlice], source: &str) -> Vec<String> {
    let mut addresses: Vec<String> = slices
        .iter()
        .filter(|s| {
            s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("multicluster.kubernetes.io/source-cluster"))
                .map(String::as_str)
                == Some(source)
        })
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
        .flat_map(|e| e.addresses.iter().cloned())
        .collect();
    addresses.sort();
    addresses
}

fn condition<'a>(
    conditions: &'a [k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

async fn export_conditions(
    client: &Client,
    ns: &str,
    name: &str,
) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    Api::<ServiceExport>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
        .and_then(|e| e.status)
        .map(|s| s.conditions)
        .unwrap_or_default()
}

async fn pod_ips(client: &Client, ns: &str, app: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut ips: Vec<String> = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| controlplane::pod_running_ready(p))
        .flat_map(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.pod_ips.clone())
                .unwrap_or_default()
        })
        .map(|ip| ip.ip)
        .collect();
    ips.sort();
    ips
}

fn v4(ips: &[String]) -> Vec<String> {
    ips.iter().filter(|ip| !ip.contains(':')).cloned().collect()
}

/// The three started members, their controllers and cluster1's
/// clusterset-dns: started once, shared by every behaviour. Fields drop in
/// order: the DNS server and controllers before the clusters.
struct Clusterset {
    /// The scenarios several trials observe, each set up once by the first
    /// of them to run (a setup that panics is tried again by the next).
    web: OnceCell<Vec<ServiceImport>>,
    conflict: OnceCell<()>,
    merge: OnceCell<()>,
    dns: Running,
    controllers: Vec<ControllerProcess>,
    clients: Vec<Client>,
    plane: ControlPlane,
}

impl Clusterset {
    async fn start() -> Self {
        let plane = ControlPlane::start_members(3, |i| i == 1).await;
        let mut kubeconfigs = Vec::new();
        for cluster in &plane.clusters {
            let client = cluster.admin_client().await;
            controlplane::set_cluster_properties(&client, &cluster.name, "test-clusterset").await;
            kubeconfigs.push(controlplane::install_controller(cluster).await);
        }
        let mut clients = Vec::new();
        let mut controllers = Vec::new();
        for (cluster, kubeconfig) in plane.clusters.iter().zip(&kubeconfigs) {
            let client = cluster.admin_client().await;
            // Peers: a reader token of every other cluster, as a Secret here.
            for other in plane.clusters.iter().filter(|o| o.name != cluster.name) {
                let reader = controlplane::service_account_kubeconfig(
                    other,
                    "clusterset-dns",
                    "clusterset-dns-peer-reader",
                    3600,
                )
                .await;
                controlplane::add_peer_secret(&client, &other.name, &reader).await;
            }
            controllers.push(controlplane::spawn_controller(
                cluster,
                kubeconfig,
                &[
                    "--peer-grace-period",
                    GRACE,
                    "--startup-sync-timeout",
                    "10s",
                ],
            ));
            clients.push(client);
        }
        for (cluster, controller) in plane.clusters.iter().zip(&controllers) {
            cluster
                .wait_for("controller ready", Duration::from_secs(60), || async {
                    match http_get(controller.admin_addr(), "/ready").await {
                        (200, _) => Ok(()),
                        (status, body) => {
                            Err(format!("{status} {body:?}; log:\n{}", controller.log()))
                        }
                    }
                })
                .await;
        }
        let dns = dns_server::start_dns(&plane.clusters[1].admin_kubeconfig, |_| {}).await;
        Self {
            web: OnceCell::new(),
            conflict: OnceCell::new(),
            merge: OnceCell::new(),
            dns,
            controllers,
            clients,
            plane,
        }
    }

    fn members(&self) -> Vec<Member<'_>> {
        self.plane
            .clusters
            .iter()
            .zip(&self.clients)
            .zip(&self.controllers)
            .map(|((cluster, client), controller)| Member {
                cluster,
                client: client.clone(),
                controller,
            })
            .collect()
    }

    /// The ClusterSetIP scenario in namespace [`WEB`]
    /// ([`clusterset_ip_exported`]): every member's import.
    async fn web(&self) -> &[ServiceImport] {
        self.web
            .get_or_init(|| async { clusterset_ip_exported(&self.members(), WEB).await })
            .await
    }

    /// The port-conflict scenario in namespace [`CONFLICT`]
    /// ([`port_conflict_exported`]).
    async fn conflict(&self) {
        self.conflict
            .get_or_init(|| async { port_conflict_exported(&self.members(), CONFLICT).await })
            .await;
    }

    /// The merge scenario in namespace [`MERGE`] ([`merge_exported`]),
    /// all three services.
    async fn merge(&self) {
        self.merge
            .get_or_init(|| async {
                merge_exported(&self.members(), MERGE, &["union", "kind", "labels"]).await
            })
            .await;
    }
}

/// Each behaviour is a named trial on the one shared clusterset, in a
/// namespace of its own: a failing one is reported under its name and the
/// others still run (one at a time, in this order).
fn main() {
    let args = trials::serial_arguments();
    let runtime = trials::runtime();
    let behaviours = behaviours![
        a_clusterset_ip_export_is_imported_ready_with_its_endpoints_everywhere,
        its_derived_service_is_selectorless_owned_and_holds_each_clusters_vip,
        its_imported_slices_carry_the_derived_name_and_our_manager_only,
        its_name_resolves_to_the_clusters_vip_and_the_export_is_valid_and_ready,
        scaling_its_source_moves_the_endpoints_everywhere,
        unexporting_it_removes_the_import_its_slices_and_the_name_everywhere,
        headless_per_pod_names_resolve_for_every_exporter,
        an_externalname_or_missing_service_is_not_imported_until_a_service_appears,
        a_port_conflict_is_written_alike_on_both_exporters_naming_the_oldest,
        the_oldests_port_is_imported_alike_everywhere_and_the_losers_slices_lack_it,
        explain_names_the_exporters_the_winner_and_who_lost_the_port,
        when_the_oldest_unexports_the_conflict_clears_and_the_last_unexport_removes_the_import,
        service_properties_are_copied_and_a_new_port_reaches_every_cluster,
        exports_that_differ_in_ports_type_or_labels_conflict_alike_on_both_exporters,
        differing_ports_import_their_union_everywhere,
        a_type_conflict_imports_the_oldests_type_without_the_losers_slices,
        differing_labels_import_the_oldests_everywhere,
        when_the_clusterset_ip_exporter_leaves_the_headless_one_wins_and_the_ip_is_released,
        an_import_has_the_ip_families_its_cluster_has,
        a_large_slice_is_copied_one_to_one_and_removed_exactly,
        a_local_first_import_hints_every_slice_for_this_clusters_zones,
        a_converged_clusterset_makes_no_writes,
        a_removed_peer_secret_drops_its_imports_at_once,
        rotating_peer_credentials_drops_nothing_and_writes_nothing,
        a_peer_forbidden_within_grace_is_kept_and_back_without_writes,
    ];
    let t0 = Instant::now();
    let start: trials::Start<Clusterset> = || {
        Box::pin(async {
            let t0 = Instant::now();
            let cs = Clusterset::start().await;
            eprintln!(
                "3 clusters and controllers ready in {:.1} s",
                t0.elapsed().as_secs_f64()
            );
            cs
        })
    };
    let trials = trials::group(&args, &runtime, start, behaviours);
    let conclusion = libtest_mimic::run(&args, trials);
    eprintln!("whole test in {:.1} s", t0.elapsed().as_secs_f64());
    drop(runtime);
    conclusion.exit();
}

async fn export_with(
    client: &Client,
    ns: &str,
    name: &str,
    spec: serde_json::Value,
    labels: serde_json::Value,
) {
    create_if_absent(
        &Api::<ServiceExport>::namespaced(client.clone(), ns),
        &object(json!({"metadata": {"name": name, "labels": labels}, "spec": spec})),
    )
    .await;
}

async fn create_service(
    client: &Client,
    ns: &str,
    name: &str,
    metadata_labels: serde_json::Value,
    spec: serde_json::Value,
) {
    create_if_absent(
        &Api::<Service>::namespaced(client.clone(), ns),
        &object(json!({"metadata": {"name": name, "labels": metadata_labels}, "spec": spec})),
    )
    .await;
}

/// Waits until every member has an import of `name` for which `check`
/// holds, and returns them.
async fn imports_everywhere<F>(
    members: &[Member<'_>],
    ns: &str,
    name: &str,
    what: &str,
    check: F,
) -> Vec<ServiceImport>
where
    F: Fn(&ServiceImport) -> Result<(), String>,
{
    let mut imports = Vec::new();
    for m in members {
        let found = m
            .cluster
            .wait_for(&format!("{ns}/{name}: {what}"), WAIT, || async {
                let import = import(&m.client, ns, name)
                    .await
                    .ok_or("no ServiceImport")?;
                check(&import).map(|()| import)
            })
            .await;
        imports.push(found);
    }
    imports
}

async fn wait_export_condition(
    m: &Member<'_>,
    ns: &str,
    name: &str,
    type_: &str,
    status: &str,
    reason_contains: &str,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    m.cluster
        .wait_for(
            &format!("{ns}/{name} {type_}={status}/{reason_contains}"),
            WAIT,
            || async {
                let conditions = export_conditions(&m.client, ns, name).await;
                match condition(&conditions, type_) {
                    Some(c) if c.status == status && c.reason.contains(reason_contains) => {
                        Ok(c.clone())
                    }
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await
}

/// A4, B6: a dual-stack export from cluster1 is imported with both
/// families there (two ips, in family order) and with IPv4 only in the
/// single-stack clusters; an IPv6-only export cannot be imported into them
/// (`Ready=False/IPFamilyNotSupported`, no derived Service).
async fn an_import_has_the_ip_families_its_cluster_has(cs: &Clusterset) {
    let members = &cs.members();
    let ns = "families";
    for m in members {
        create_namespace(&m.client, ns).await;
    }
    let b = &members[1];
    create_service(&b.client, ns, "dual", json!({}), json!({"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv4", "IPv6"], "ports": [{"name": "http", "port": 80}]})).await;
    export(&b.client, ns, "dual").await;
    create_service(&b.client, ns, "six", json!({}), json!({"ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv6"], "ports": [{"name": "http", "port": 80}]})).await;
    export(&b.client, ns, "six").await;
    let imports = imports_everywhere(
        members,
        ns,
        "dual",
        "one ip per family the cluster has",
        |import| {
            let spec = &import.spec;
            if !spec.ips.is_empty() && spec.ips.len() == spec.ip_families.len() {
                Ok(())
            } else {
                Err(format!("{:?} {:?}", spec.ips, spec.ip_families))
            }
        },
    )
    .await;
    for (m, import) in members.iter().zip(&imports) {
        let dual = m.cluster.spec.service_cidrs.len() == 2;
        let want: &[&str] = if dual { &["IPv4", "IPv6"] } else { &["IPv4"] };
        assert_eq!(import.spec.ip_families, want, "{}", m.id());
        for (ip, family) in import.spec.ips.iter().zip(&import.spec.ip_families) {
            assert_eq!(
                ip.contains(':'),
                family == "IPv6",
                "{}: {ip} in family order",
                m.id()
            );
        }
    }
    let derived = clusterset_dns::controller::naming::derived_service_name(ns, "six");
    for m in members {
        let dual = m.cluster.spec.service_cidrs.len() == 2;
        let want = if dual {
            ("True", "Ready")
        } else {
            ("False", "IPFamilyNotSupported")
        };
        m.cluster
            .wait_for(&format!("six: Ready {want:?}"), WAIT, || async {
                let import = import(&m.client, ns, "six").await.ok_or("no import")?;
                let ready = import
                    .status
                    .as_ref()
                    .and_then(|s| condition(&s.conditions, "Ready"))
                    .map(|c| (c.status.clone(), c.reason.clone()));
                match ready {
                    Some((status, reason)) if (status.as_str(), reason.as_str()) == want => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            })
            .await;
        let has_derived = Api::<Service>::namespaced(m.client.clone(), ns)
            .get_opt(&derived)
            .await
            .unwrap()
            .is_some();
        assert_eq!(
            has_derived,
            dual,
            "{}: a derived Service only where IPv6 exists",
            m.id()
        );
    }
}

/// C21: a 1,000-endpoint source slice is copied 1:1 under its
/// deterministic name; deleting a source slice removes exactly its copy.
async fn a_large_slice_is_copied_one_to_one_and_removed_exactly(cs: &Clusterset) {
    let members = &cs.members();
    let ns = "large";
    for m in members {
        create_namespace(&m.client, ns).await;
    }
    let (a, c) = (&members[0], &members[2]);
    create_service(
        &a.client,
        ns,
        "big",
        json!({}),
        json!({"ports": [{"name": "http", "port": 80}]}),
    )
    .await;
    let slices: Api<EndpointSlice> = Api::namespaced(a.client.clone(), ns);
    for (name, count) in [("big-large", 1000), ("big-small", 5)] {
        let endpoints: Vec<serde_json::Value> = (0..count)
            .map(|i| json!({"addresses": [format!("10.200.{}.{}", i / 250, i % 250 + 1)], "conditions": {"ready": true}}))
            .collect();
        slices
            .create(
                &PostParams::default(),
                &object(json!({
                    "metadata": {"name": name, "labels": {
                        "kubernetes.io/service-name": "big",
                        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                    }},
                    "addressType": "IPv4",
                    "endpoints": endpoints,
                    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                })),
            )
            .await
            .unwrap();
    }
    export(&a.client, ns, "big").await;
    // cluster0 mirrors each slice under a computed name; cluster2 copies
    // that mirror under a name it computes from it (never the peer's).
    let name_of = |source: &str| {
        use clusterset_dns::controller::naming::mirrored_slice_name;
        let mirror = mirrored_slice_name(ns, "big", "cluster0", source);
        mirrored_slice_name(ns, "big", "cluster0", &mirror)
    };
    let want: BTreeMap<String, usize> = [(name_of("big-large"), 1000), (name_of("big-small"), 5)]
        .into_iter()
        .collect();
    let copies = c
        .cluster
        .wait_for("both slices copied", WAIT, || async {
            let copies: BTreeMap<String, (usize, Option<String>)> =
                mcs_slices(&c.client, ns, "big")
                    .await
                    .into_iter()
                    .map(|s| {
                        (
                            s.metadata.name.clone().unwrap(),
                            (s.endpoints.len(), s.metadata.uid.clone()),
                        )
                    })
                    .collect();
            let got: BTreeMap<String, usize> =
                copies.iter().map(|(k, (n, _))| (k.clone(), *n)).collect();
            if got == want {
                Ok(copies)
            } else {
                Err(format!("{got:?}"))
            }
        })
        .await;
    slices
        .delete("big-small", &DeleteParams::default())
        .await
        .unwrap();
    let large = name_of("big-large");
    let kept: BTreeMap<String, Option<String>> = [(large.clone(), copies[&large].1.clone())]
        .into_iter()
        .collect();
    c.cluster
        .wait_for("only the small slice's copy removed", WAIT, || async {
            let left: BTreeMap<String, Option<String>> = mcs_slices(&c.client, ns, "big")
                .await
                .into_iter()
                .map(|s| (s.metadata.name.clone().unwrap(), s.metadata.uid.clone()))
                .collect();
            if left == kept {
                Ok(())
            } else {
                Err(format!("{left:?}"))
            }
        })
        .await;
    // The other importing member converges too before the next step,
    // whose idle check counts every write from its start.
    let b = &members[1];
    b.cluster
        .wait_for(
            "the small slice's copy removed in cluster1",
            WAIT,
            || async {
                let left: Vec<String> = mcs_slices(&b.client, ns, "big")
                    .await
                    .into_iter()
                    .filter_map(|s| s.metadata.name)
                    .collect();
                if left == [large.clone()] {
                    Ok(())
                } else {
                    Err(format!("{left:?}"))
                }
            },
        )
        .await;
}

/// A3, A11, A15, B2, D1: what is copied into the import and what is not;
/// NodePort and LoadBalancer export as ClusterSetIP; a port added at the
/// source reaches the import and the derived Service everywhere; a
/// condition's lastTransitionTime moves only when its status flips.
async fn service_properties_are_copied_and_a_new_port_reaches_every_cluster(cs: &Clusterset) {
    let members = &cs.members();
    let ns = "props";
    for m in members {
        create_namespace(&m.client, ns).await;
    }
    let a = &members[0];
    create_service(
        &a.client,
        ns,
        "np",
        json!({"service-label": "not-exported"}),
        json!({
            "type": "NodePort",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
            "sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10}},
            "internalTrafficPolicy": "Cluster",
            "trafficDistribution": "PreferClose",
        }),
    )
    .await;
    export_with(
        &a.client,
        ns,
        "np",
        json!({"exportedLabels": {"team": "blue"}, "exportedAnnotations": {"note": "exported"}}),
        json!({"export-label": "not-exported"}),
    )
    .await;
    create_service(
        &a.client,
        ns,
        "lb",
        json!({}),
        json!({"type": "LoadBalancer", "ports": [{"name": "http", "port": 80}]}),
    )
    .await;
    export(&a.client, ns, "lb").await;

    let imports = imports_everywhere(members, ns, "np", "copied fields", |import| {
        let spec = &import.spec;
        let timeout = spec
            .session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds);
        let got = (
            spec.type_.as_str(),
            spec.session_affinity.as_deref(),
            timeout,
            spec.internal_traffic_policy.as_deref(),
            spec.traffic_distribution.as_deref(),
        );
        let want = (
            "ClusterSetIP",
            Some("ClientIP"),
            Some(10),
            Some("Cluster"),
            Some("PreferClose"),
        );
        if got == want {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
    for import in &imports {
        let labels = import.metadata.labels.clone().unwrap_or_default();
        let annotations = import.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            labels.get("team").map(String::as_str),
            Some("blue"),
            "{labels:?}"
        );
        assert_eq!(
            annotations.get("note").map(String::as_str),
            Some("exported")
        );
        assert!(
            !labels.contains_key("service-label") && !labels.contains_key("export-label"),
            "G2: {labels:?}"
        );
    }
    imports_everywhere(
        members,
        ns,
        "lb",
        "LoadBalancer exports as ClusterSetIP",
        |import| {
            if import.spec.type_ == clusterset_dns::api::ServiceImportType::ClusterSetIp {
                Ok(())
            } else {
                Err(format!("{:?}", import.spec.type_))
            }
        },
    )
    .await;

    // B2 and D1.
    let valid_before = wait_export_condition(a, ns, "np", "Valid", "True", "Valid").await;
    Api::<Service>::namespaced(a.client.clone(), ns)
        .patch(
            "np",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ports": [
                {"name": "http", "port": 80, "protocol": "TCP"},
                {"name": "https", "port": 443, "protocol": "TCP"},
            ]}})),
        )
        .await
        .unwrap();
    let derived_name = clusterset_dns::controller::naming::derived_service_name(ns, "np");
    for m in members {
        m.cluster
            .wait_for(
                "the new port on the import and the derived Service",
                WAIT,
                || async {
                    let import = import(&m.client, ns, "np").await.ok_or("no import")?;
                    let derived = Api::<Service>::namespaced(m.client.clone(), ns)
                        .get(&derived_name)
                        .await
                        .map_err(|e| e.to_string())?;
                    let derived_ports: Vec<i32> = derived
                        .spec
                        .and_then(|s| s.ports)
                        .unwrap_or_default()
                        .iter()
                        .map(|p| p.port)
                        .collect();
                    let import_ports: Vec<i32> = import.spec.ports.iter().map(|p| p.port).collect();
                    if import_ports == [80, 443] && derived_ports == [80, 443] {
                        Ok(())
                    } else {
                        Err(format!(
                            "import {import_ports:?}, derived {derived_ports:?}"
                        ))
                    }
                },
            )
            .await;
    }
    let valid_after = wait_export_condition(a, ns, "np", "Valid", "True", "Valid").await;
    assert_eq!(
        valid_before.last_transition_time, valid_after.last_transition_time,
        "D1"
    );
}

/// The namespace of the merge scenario ([`Clusterset::merge`]).
const MERGE: &str = "merge";

/// Namespace `ns` everywhere, and in it each of `names` exported from
/// cluster0, then a second later (creation times have a resolution of one
/// second) from cluster2 with another port set (`union`), type (`kind`:
/// ClusterSetIP in cluster0, headless in cluster2) or exported labels
/// (`labels`). What exists already is kept.
async fn merge_exported(members: &[Member<'_>], ns: &str, names: &[&str]) {
    for m in members {
        create_namespace(&m.client, ns).await;
    }
    let tcp_42 = || json!([{"name": "tcp", "port": 42}]);
    for (i, exporter) in [&members[0], &members[2]].into_iter().enumerate() {
        if i == 1 {
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
        let client = &exporter.client;
        for name in names {
            match *name {
                // A6: port union.
                "union" => {
                    let ports = if i == 0 {
                        tcp_42()
                    } else {
                        json!([{"name": "tcp", "port": 42}, {"name": "stcp", "port": 142, "protocol": "SCTP"}])
                    };
                    create_service(client, ns, name, json!({}), json!({"ports": ports})).await;
                    export(client, ns, name).await;
                }
                // A8: type.
                "kind" => {
                    deploy(client, ns, name, 1, i == 1, tcp_42()).await;
                    export(client, ns, name).await;
                }
                // A12: labels.
                "labels" => {
                    let tier = if i == 0 { "gold" } else { "silver" };
                    create_service(client, ns, name, json!({}), json!({"ports": tcp_42()})).await;
                    export_with(
                        client,
                        ns,
                        name,
                        json!({"exportedLabels": {"tier": tier}}),
                        json!({}),
                    )
                    .await;
                }
                other => panic!("no merge scenario {other}"),
            }
        }
    }
}

/// A6, A8, A12: exports of one service that differ in their ports, type
/// or labels; both exporters get the same Conflict condition.
async fn exports_that_differ_in_ports_type_or_labels_conflict_alike_on_both_exporters(
    cs: &Clusterset,
) {
    let members = &cs.members();
    let ns = MERGE;
    cs.merge().await;
    let (a, c) = (&members[0], &members[2]);
    for (name, reason) in [
        ("union", "PortConflict"),
        ("kind", "TypeConflict"),
        ("labels", "LabelsConflict"),
    ] {
        let on_a = wait_export_condition(a, ns, name, "Conflict", "True", reason).await;
        let on_c = wait_export_condition(c, ns, name, "Conflict", "True", reason).await;
        assert_eq!(
            (on_a.reason, on_a.message),
            (on_c.reason, on_c.message),
            "{name}: the same condition on both exporters"
        );
    }
}

/// A6: the import has the union of the exporters' ports.
async fn differing_ports_import_their_union_everywhere(cs: &Clusterset) {
    let members = &cs.members();
    let ns = MERGE;
    cs.merge().await;
    imports_everywhere(members, ns, "union", "the union of the ports", |import| {
        let mut ports: Vec<(String, i32)> = import
            .spec
            .ports
            .iter()
            .map(|p| (p.protocol.clone().unwrap_or_default(), p.port))
            .collect();
        ports.sort();
        if ports == [("SCTP".to_owned(), 142), ("TCP".to_owned(), 42)] {
            Ok(())
        } else {
            Err(format!("{ports:?}"))
        }
    })
    .await;
}

/// Waits until every member imports `kind` of `ns` as the oldest export
/// has it: ClusterSetIP (with its ips) from cluster0 alone, the headless
/// exporter left out.
async fn kind_imported_as_the_oldests(members: &[Member<'_>], ns: &str) {
    imports_everywhere(
        members,
        ns,
        "kind",
        "the oldest's type, the headless exporter left out",
        |import| {
            let clusters: Vec<&str> = import
                .status
                .iter()
                .flat_map(|s| s.clusters.iter().map(|c| c.cluster.as_str()))
                .collect();
            if import.spec.type_ == clusterset_dns::api::ServiceImportType::ClusterSetIp
                && !import.spec.ips.is_empty()
                && clusters == ["cluster0"]
            {
                Ok(())
            } else {
                Err(format!(
                    "{:?} {:?} {clusters:?}",
                    import.spec.type_, import.spec.ips
                ))
            }
        },
    )
    .await;
}

/// A8: the import has the oldest export's type; the headless loser is not
/// ready and none of its slices are imported.
async fn a_type_conflict_imports_the_oldests_type_without_the_losers_slices(cs: &Clusterset) {
    let members = &cs.members();
    let ns = MERGE;
    cs.merge().await;
    let c = &members[2];
    kind_imported_as_the_oldests(members, ns).await;
    wait_export_condition(c, ns, "kind", "Ready", "False", "Failed").await;
    for m in members {
        let from_c = mcs_slices(&m.client, ns, "kind")
            .await
            .into_iter()
            .filter(|s| {
                s.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("multicluster.kubernetes.io/source-cluster"))
                    .map(String::as_str)
                    == Some("cluster2")
            })
            .count();
        assert_eq!(
            from_c,
            0,
            "{}: no slices from the type-conflict loser",
            m.id()
        );
    }
}

/// A12: the import has the oldest export's labels.
async fn differing_labels_import_the_oldests_everywhere(cs: &Clusterset) {
    let members = &cs.members();
    let ns = MERGE;
    cs.merge().await;
    imports_everywhere(
        members,
        ns,
        "labels",
        "the oldest's exported labels",
        |import| {
            let tier = import
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("tier"))
                .cloned();
            if tier.as_deref() == Some("gold") {
                Ok(())
            } else {
                Err(format!("{tier:?}"))
            }
        },
    )
    .await;
}

/// B4: the ClusterSetIP exporter leaves; the headless one wins: every
/// cluster's import turns Headless, loses its ips and derived Service
/// (with an Event), and imports cluster2's endpoints (in a namespace of
/// its own, where the ClusterSetIP import was seen first).
async fn when_the_clusterset_ip_exporter_leaves_the_headless_one_wins_and_the_ip_is_released(
    cs: &Clusterset,
) {
    let members = &cs.members();
    let ns = "merge-flip";
    merge_exported(members, ns, &["kind"]).await;
    kind_imported_as_the_oldests(members, ns).await;
    let (a, c) = (&members[0], &members[2]);
    unexport(&a.client, ns, "kind").await;
    imports_everywhere(
        members,
        ns,
        "kind",
        "Headless once cluster0 left",
        |import| {
            if import.spec.type_ == clusterset_dns::api::ServiceImportType::Headless
                && import.spec.ips.is_empty()
            {
                Ok(())
            } else {
                Err(format!("{:?} {:?}", import.spec.type_, import.spec.ips))
            }
        },
    )
    .await;
    let derived = clusterset_dns::controller::naming::derived_service_name(ns, "kind");
    for m in members {
        m.cluster
            .wait_for(
                "the derived Service deleted, with an Event, and cluster2's endpoints imported",
                WAIT,
                || async {
                    if Api::<Service>::namespaced(m.client.clone(), ns)
                        .get_opt(&derived)
                        .await
                        .unwrap()
                        .is_some()
                    {
                        return Err("derived Service still there".into());
                    }
                    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(
                        m.client.clone(),
                        ns,
                    )
                    .list(&ListParams::default())
                    .await
                    .unwrap();
                    if !events
                        .items
                        .iter()
                        .any(|e| e.reason.as_deref() == Some("ClusterSetIPReleased"))
                    {
                        return Err("no ClusterSetIPReleased Event".into());
                    }
                    let from_c =
                        ready_addresses(&mcs_slices(&m.client, ns, "kind").await, "cluster2");
                    if from_c.is_empty() {
                        Err("no endpoints from cluster2".into())
                    } else {
                        Ok(())
                    }
                },
            )
            .await;
    }
    wait_export_condition(c, ns, "kind", "Ready", "True", "Ready").await;
}

/// The namespace of the ClusterSetIP scenario ([`Clusterset::web`]): `web`
/// exported from cluster0 and imported everywhere, which the first four
/// trials below observe.
const WEB: &str = "web";

/// Namespace `ns` everywhere, and in it a Deployment and Service `web` (2
/// pods, `http` 80 → 8080) exported from cluster0; waits until every
/// member has a ready ServiceImport with a clusterset IP and the pods'
/// endpoints, and returns those imports (in member order). What exists
/// already is kept: set up again, it only waits.
async fn clusterset_ip_exported(members: &[Member<'_>], ns: &str) -> Vec<ServiceImport> {
    for m in members {
        create_namespace(&m.client, ns).await;
    }
    let a = &members[0];
    deploy(
        &a.client,
        ns,
        "web",
        2,
        false,
        json!([{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]),
    )
    .await;
    a.cluster
        .wait_deployment_ready(&a.client, ns, "web", 2)
        .await;
    export(&a.client, ns, "web").await;
    let pods = v4(&pod_ips(&a.client, ns, "web").await);
    assert_eq!(pods.len(), 2, "{ns}/web's pods: {pods:?}");
    let mut imports = Vec::new();
    for m in members {
        let import = m
            .cluster
            .wait_for(
                &format!("ServiceImport {ns}/web with a clusterset IP and 2 endpoints"),
                WAIT,
                || async {
                    let import = import(&m.client, ns, "web")
                        .await
                        .ok_or("no ServiceImport")?;
                    if import.spec.ips.is_empty() {
                        return Err(format!("no ips yet: {import:?}"));
                    }
                    let ready = import
                        .status
                        .as_ref()
                        .and_then(|s| condition(&s.conditions, "Ready"))
                        .map(|c| c.status.clone());
                    if ready.as_deref() != Some("True") {
                        return Err(format!("Ready {ready:?}"));
                    }
                    let addresses =
                        ready_addresses(&mcs_slices(&m.client, ns, "web").await, "cluster0");
                    if addresses != pods {
                        return Err(format!("endpoints {addresses:?}, want {pods:?}"));
                    }
                    Ok(import)
                },
            )
            .await;
        imports.push(import);
    }
    imports
}

/// A1, A4, A5, A14: a Deployment and Service exported from cluster0 become
/// a ready ServiceImport with a clusterset IP per family, the Service's
/// port, cluster0 as the exporter and the pods' endpoints in every cluster.
async fn a_clusterset_ip_export_is_imported_ready_with_its_endpoints_everywhere(cs: &Clusterset) {
    let members = &cs.members();
    for (m, import) in members.iter().zip(cs.web().await) {
        let spec = &import.spec;
        assert_eq!(
            spec.type_,
            clusterset_dns::api::ServiceImportType::ClusterSetIp,
            "{}",
            m.id()
        );
        assert_eq!(spec.ports.len(), 1);
        assert_eq!(
            (
                spec.ports[0].name.as_deref(),
                spec.ports[0].port,
                spec.ports[0].protocol.as_deref()
            ),
            (Some("http"), 80, Some("TCP"))
        );
        assert_eq!(
            spec.ips.len(),
            spec.ip_families.len(),
            "{}: one ip per family",
            m.id()
        );
        let status = import.status.as_ref().unwrap();
        assert_eq!(
            status
                .clusters
                .iter()
                .map(|c| c.cluster.as_str())
                .collect::<Vec<_>>(),
            ["cluster0"]
        );
        assert_eq!(
            status.endpoint_slice_objects,
            Some(clusterset_dns::api::EndpointSliceObjects::Present)
        );
    }
}

/// B1: in every cluster, the derived Service of the import is selector-less,
/// owned by the ServiceImport, and its cluster IPs are the import's, from
/// that cluster's Service CIDR.
async fn its_derived_service_is_selectorless_owned_and_holds_each_clusters_vip(cs: &Clusterset) {
    let ns = WEB;
    let derived_name = clusterset_dns::controller::naming::derived_service_name(ns, "web");
    for (m, import) in cs.members().iter().zip(cs.web().await) {
        let spec = &import.spec;
        let derived = Api::<Service>::namespaced(m.client.clone(), ns)
            .get(&derived_name)
            .await
            .unwrap();
        let derived_spec = derived.spec.unwrap();
        assert_eq!(derived_spec.selector, None, "selector-less");
        assert_eq!(
            derived_spec.cluster_ips.unwrap_or_default(),
            spec.ips,
            "{}: spec.ips are the derived Service's clusterIPs",
            m.id()
        );
        let owner = &derived.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("ServiceImport", "web")
        );
        assert!(
            controlplane::cidr_contains(&m.cluster.spec.service_cidrs[0], &spec.ips[0]),
            "{}: the VIP is this cluster's",
            m.id()
        );
    }
}

/// A13, B3: the imported slices carry the derived Service's name and our
/// managed-by label from creation, and none of the source's references to
/// its pods and nodes.
async fn its_imported_slices_carry_the_derived_name_and_our_manager_only(cs: &Clusterset) {
    let ns = WEB;
    cs.web().await;
    let derived_name = clusterset_dns::controller::naming::derived_service_name(ns, "web");
    for m in &cs.members() {
        let slices = mcs_slices(&m.client, ns, "web").await;
        assert!(!slices.is_empty(), "{}: no imported slice", m.id());
        for slice in slices {
            let labels = slice.metadata.labels.unwrap();
            assert_eq!(
                labels.get("kubernetes.io/service-name"),
                Some(&derived_name)
            );
            assert_eq!(
                labels
                    .get("endpointslice.kubernetes.io/managed-by")
                    .map(String::as_str),
                Some("controller.clusterset-dns.io")
            );
            assert!(
                slice
                    .endpoints
                    .iter()
                    .all(|e| e.target_ref.is_none() && e.node_name.is_none()),
                "foreign references dropped"
            );
        }
    }
}

/// `name`'s A records through `dns` become `want`, within [`WAIT`].
async fn resolves_to(cluster: &Cluster, dns: &Running, name: &str, want: &[String]) {
    cluster
        .wait_for(&format!("{name} answers {want:?}"), WAIT, || async {
            let got = resolve(dns, name, RecordType::A).await;
            if got == want {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        })
        .await;
}

/// End to end: cluster1's clusterset-dns answers the name with cluster1's
/// VIP, and the exporting cluster's ServiceExport is Valid, Ready and
/// without conflict.
async fn its_name_resolves_to_the_clusters_vip_and_the_export_is_valid_and_ready(cs: &Clusterset) {
    let (members, dns) = (&cs.members(), &cs.dns);
    let ns = WEB;
    let (a, b) = (&members[0], &members[1]);
    let vip4 = v4(&cs.web().await[1].spec.ips);
    resolves_to(b.cluster, dns, "web.web.svc.clusterset.local.", &vip4).await;

    let conditions = export_conditions(&a.client, ns, "web").await;
    for (type_, status, reason) in [
        ("Valid", "True", "Valid"),
        ("Ready", "True", "Ready"),
        ("Conflict", "False", "NoConflicts"),
    ] {
        let c =
            condition(&conditions, type_).unwrap_or_else(|| panic!("no {type_} in {conditions:?}"));
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            (status, reason),
            "{type_}"
        );
    }
}

/// A5: scaling the source 2 → 3 moves the imported endpoints in cluster2
/// (in a namespace of its own: the scenario's import keeps 2 endpoints).
async fn scaling_its_source_moves_the_endpoints_everywhere(cs: &Clusterset) {
    let members = &cs.members();
    let ns = "web-scaled";
    clusterset_ip_exported(members, ns).await;
    let a = &members[0];
    Api::<Deployment>::namespaced(a.client.clone(), ns)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    a.cluster
        .wait_deployment_ready(&a.client, ns, "web", 3)
        .await;
    let pods = v4(&pod_ips(&a.client, ns, "web").await);
    assert_eq!(pods.len(), 3, "{pods:?}");
    let c = &members[2];
    c.cluster
        .wait_for("3 endpoints imported", WAIT, || async {
            let addresses = ready_addresses(&mcs_slices(&c.client, ns, "web").await, "cluster0");
            if addresses == pods {
                Ok(())
            } else {
                Err(format!("{addresses:?}, want {pods:?}"))
            }
        })
        .await;
}

/// A1, A13: unexported, the import, its slices and the name are gone
/// everywhere within conformance's 20 s (in a namespace of its own, where
/// the name resolved first).
async fn unexporting_it_removes_the_import_its_slices_and_the_name_everywhere(cs: &Clusterset) {
    let (members, dns) = (&cs.members(), &cs.dns);
    let ns = "web-unexported";
    let name = format!("web.{ns}.svc.clusterset.local.");
    let imports = clusterset_ip_exported(members, ns).await;
    resolves_to(members[1].cluster, dns, &name, &v4(&imports[1].spec.ips)).await;
    unexport(&members[0].client, ns, "web").await;
    for m in members {
        m.cluster
            .wait_for("ServiceImport and slices removed", WAIT, || async {
                let import = import(&m.client, ns, "web").await;
                let slices = mcs_slices(&m.client, ns, "web").await;
                if import.is_none() && slices.is_empty() {
                    Ok(())
                } else {
                    Err(format!(
                        "import {:?}, {} slices",
                        import.is_some(),
                        slices.len()
                    ))
                }
            })
            .await;
    }
    resolves_to(members[1].cluster, dns, &name, &[]).await;
}

/// A StatefulSet behind a headless Service, exported from cluster0 and
/// cluster2: cluster1's clusterset-dns answers the per-pod names of both.
async fn headless_per_pod_names_resolve_for_every_exporter(cs: &Clusterset) {
    let (members, dns) = (&cs.members(), &cs.dns);
    let ns = "db";
    for m in members {
        create_namespace(&m.client, ns).await;
    }
    let (a, b, c) = (&members[0], &members[1], &members[2]);
    for exporter in [a, c] {
        let services: Api<Service> = Api::namespaced(exporter.client.clone(), ns);
        services
            .create(&PostParams::default(), &object(json!({"metadata": {"name": "db"}, "spec": {"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"name": "pg", "port": 5432}]}})))
            .await
            .unwrap();
        let sets: Api<k8s_openapi::api::apps::v1::StatefulSet> =
            Api::namespaced(exporter.client.clone(), ns);
        sets.create(
            &PostParams::default(),
            &object(json!({
                "metadata": {"name": "db"},
                "spec": {
                    "serviceName": "db",
                    "replicas": 2,
                    "podManagementPolicy": "Parallel",
                    "selector": {"matchLabels": {"app": "db"}},
                    "template": {
                        "metadata": {"labels": {"app": "db"}},
                        "spec": {"containers": [{"name": "db", "image": "example/db"}]},
                    },
                },
            })),
        )
        .await
        .unwrap();
        export(&exporter.client, ns, "db").await;
    }
    for (exporter, id) in [(a, "cluster0"), (c, "cluster2")] {
        let pods = exporter
            .cluster
            .wait_for("2 db pods ready", Duration::from_secs(60), || async {
                let ips = v4(&pod_ips(&exporter.client, ns, "db").await);
                if ips.len() == 2 {
                    Ok(ips)
                } else {
                    Err(format!("{ips:?}"))
                }
            })
            .await;
        for (ordinal, _) in pods.iter().enumerate() {
            let name = format!("db-{ordinal}.{id}.db.db.svc.clusterset.local.");
            b.cluster
                .wait_for(&format!("{name} resolves in cluster1"), WAIT, || async {
                    let got = resolve(dns, &name, RecordType::A).await;
                    if got.len() == 1 && pods.contains(&got[0]) {
                        Ok(())
                    } else {
                        Err(format!("{got:?}, want one of {pods:?}"))
                    }
                })
                .await;
        }
    }
    let all = b
        .cluster
        .wait_for(
            "db.db.svc.clusterset.local answers all 4 pods",
            WAIT,
            || async {
                let got = resolve(dns, "db.db.svc.clusterset.local.", RecordType::A).await;
                if got.len() == 4 {
                    Ok(got)
                } else {
                    Err(format!("{got:?}"))
                }
            },
        )
        .await;
    assert_eq!(all.len(), 4);
}

/// A9, A10: ExternalName and a missing Service.
async fn an_externalname_or_missing_service_is_not_imported_until_a_service_appears(
    cs: &Clusterset,
) {
    let members = &cs.members();
    let ns = "invalid";
    for m in members {
        create_namespace(&m.client, ns).await;
    }
    let a = &members[0];
    let services: Api<Service> = Api::namespaced(a.client.clone(), ns);
    services
        .create(&PostParams::default(), &object(json!({"metadata": {"name": "ext"}, "spec": {"type": "ExternalName", "externalName": "example.com"}})))
        .await
        .unwrap();
    export(&a.client, ns, "ext").await;
    export(&a.client, ns, "later").await;
    for (name, reason) in [("ext", "InvalidServiceType"), ("later", "NoService")] {
        a.cluster
            .wait_for(&format!("{name}: Valid=False/{reason}"), WAIT, || async {
                let conditions = export_conditions(&a.client, ns, name).await;
                match condition(&conditions, "Valid") {
                    Some(c) if c.status == "False" && c.reason == reason => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            })
            .await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for m in members {
        assert!(
            import(&m.client, ns, "ext").await.is_none(),
            "{}: no import of an ExternalName",
            m.id()
        );
        assert!(
            import(&m.client, ns, "later").await.is_none(),
            "{}: no import without a Service",
            m.id()
        );
    }
    // The Service appears: the export becomes valid and is imported.
    deploy(
        &a.client,
        ns,
        "later",
        1,
        false,
        json!([{"name": "http", "port": 80}]),
    )
    .await;
    for m in members {
        m.cluster
            .wait_for("later imported", WAIT, || async {
                import(&m.client, ns, "later")
                    .await
                    .map(|_| ())
                    .ok_or_else(|| "no import".to_owned())
            })
            .await;
    }
}

/// The namespace of the port-conflict scenario ([`Clusterset::conflict`]).
const CONFLICT: &str = "conflict";

/// Namespace `ns` everywhere, and `hello` exported from cluster0 with
/// port `tcp` 42, then (a second later: creation times have a resolution
/// of one second) from cluster2 with 43; waits until every member imports
/// it from both. What exists already is kept.
async fn port_conflict_exported(members: &[Member<'_>], ns: &str) {
    for m in members {
        create_namespace(&m.client, ns).await;
    }
    let (a, c) = (&members[0], &members[2]);
    deploy(
        &a.client,
        ns,
        "hello",
        1,
        false,
        json!([{"name": "tcp", "port": 42}]),
    )
    .await;
    export(&a.client, ns, "hello").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    deploy(
        &c.client,
        ns,
        "hello",
        1,
        false,
        json!([{"name": "tcp", "port": 43}]),
    )
    .await;
    export(&c.client, ns, "hello").await;
    imports_everywhere(members, ns, "hello", "imported from both", |import| {
        let clusters: Vec<&str> = import
            .status
            .iter()
            .flat_map(|s| s.clusters.iter().map(|c| c.cluster.as_str()))
            .collect();
        if clusters == ["cluster0", "cluster2"] {
            Ok(())
        } else {
            Err(format!("clusters {clusters:?}"))
        }
    })
    .await;
}

/// A7, C2: both exporters write the same Conflict condition, naming the
/// oldest export's cluster.
async fn a_port_conflict_is_written_alike_on_both_exporters_naming_the_oldest(cs: &Clusterset) {
    let members = &cs.members();
    let ns = CONFLICT;
    cs.conflict().await;
    let (a, c) = (&members[0], &members[2]);
    let mut messages = Vec::new();
    for exporter in [a, c] {
        let conflict =
            wait_export_condition(exporter, ns, "hello", "Conflict", "True", "PortConflict").await;
        messages.push((conflict.reason, conflict.message));
    }
    assert_eq!(
        messages[0], messages[1],
        "both exporters write the same condition"
    );
    assert!(
        messages[0].1.contains("cluster0"),
        "the message names the winner: {}",
        messages[0].1
    );
}

/// A7: every cluster imports the oldest's port in a byte-identical spec,
/// and the loser's slices without the conflicting port.
async fn the_oldests_port_is_imported_alike_everywhere_and_the_losers_slices_lack_it(
    cs: &Clusterset,
) {
    let members = &cs.members();
    let ns = CONFLICT;
    cs.conflict().await;
    let mut specs = BTreeMap::new();
    for m in members {
        let import = import(&m.client, ns, "hello")
            .await
            .unwrap_or_else(|| panic!("{}: the scenario's import is gone", m.id()));
        assert_eq!(
            import.spec.ports.iter().map(|p| p.port).collect::<Vec<_>>(),
            [42],
            "{}: the oldest's port",
            m.id()
        );
        let mut spec = import.spec.clone();
        spec.ips.clear();
        spec.ip_families.clear();
        specs.insert(m.id().to_owned(), serde_json::to_string(&spec).unwrap());
        m.cluster
            .wait_for(
                "cluster2's slices without the conflicting port",
                WAIT,
                || async {
                    let slices = mcs_slices(&m.client, ns, "hello").await;
                    let from_c: Vec<&EndpointSlice> = slices
                        .iter()
                        .filter(|s| {
                            s.metadata
                                .labels
                                .as_ref()
                                .unwrap()
                                .get("multicluster.kubernetes.io/source-cluster")
                                .map(String::as_str)
                                == Some("cluster2")
                        })
                        .collect();
                    if from_c.is_empty() {
                        return Err("no slice from cluster2".into());
                    }
                    let ports: Vec<_> = from_c
                        .iter()
                        .flat_map(|s| s.ports.iter().flatten())
                        .collect();
                    if ports.is_empty() {
                        Ok(())
                    } else {
                        Err(format!("ports {ports:?}"))
                    }
                },
            )
            .await;
    }
    let distinct: std::collections::BTreeSet<&String> = specs.values().collect();
    assert_eq!(
        distinct.len(),
        1,
        "byte-identical specs in every cluster: {specs:#?}"
    );
}

/// `/explain` on a cluster that only imports names the exporters, the
/// winner, the conflict and who lost the port, once it has converged (no
/// write pending).
async fn explain_names_the_exporters_the_winner_and_who_lost_the_port(cs: &Clusterset) {
    let members = &cs.members();
    let ns = CONFLICT;
    cs.conflict().await;
    let b = &members[1];
    let explained = b
        .cluster
        .wait_for(
            "/explain on cluster1: both exporters, no write pending",
            WAIT,
            || async {
                let (status, body) = http_get(
                    b.controller.admin_addr(),
                    &format!("/explain?service={ns}/hello"),
                )
                .await;
                let explained: serde_json::Value =
                    serde_json::from_str(&body).map_err(|e| format!("{status} {body:?}: {e}"))?;
                if explained["exporters"] == json!(["cluster0", "cluster2"])
                    && explained["pending_writes"] == json!([])
                {
                    Ok(explained)
                } else {
                    Err(format!("{explained:#}"))
                }
            },
        )
        .await;
    assert_eq!(explained["winner"], json!("cluster0"));
    assert!(
        explained["conflict"]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("PortConflict"),
        "{explained:#}"
    );
    // Who gave and who lost each field: the port clash is cluster0's.
    let port_decisions: Vec<&serde_json::Value> = explained["fields"]
        .as_array()
        .expect("/explain lists the field decisions")
        .iter()
        .filter(|d| d["field"] == "ports")
        .collect();
    assert_eq!(port_decisions.len(), 1, "{explained:#}");
    assert_eq!(
        port_decisions[0]["from"],
        json!(["cluster0"]),
        "{explained:#}"
    );
    assert_eq!(
        port_decisions[0]["overruled"],
        json!(["cluster2"]),
        "{explained:#}"
    );
}

/// A2, D3, D4: the oldest unexports; the import takes the other's port
/// and the conflict clears; the last unexport removes the import (in a
/// namespace of its own, where the conflict was seen first).
async fn when_the_oldest_unexports_the_conflict_clears_and_the_last_unexport_removes_the_import(
    cs: &Clusterset,
) {
    let members = &cs.members();
    let ns = "conflict-cleared";
    port_conflict_exported(members, ns).await;
    let (a, c) = (&members[0], &members[2]);
    wait_export_condition(c, ns, "hello", "Conflict", "True", "PortConflict").await;
    // A2, D4: the oldest unexports; the import stays (cluster2 still
    // exports), takes cluster2's port, and the conflict clears.
    unexport(&a.client, ns, "hello").await;
    wait_export_condition(c, ns, "hello", "Conflict", "False", "NoConflicts").await;
    imports_everywhere(
        members,
        ns,
        "hello",
        "cluster2's port once cluster0 unexported",
        |import| {
            let ports: Vec<i32> = import.spec.ports.iter().map(|p| p.port).collect();
            let clusters: Vec<&str> = import
                .status
                .iter()
                .flat_map(|s| s.clusters.iter().map(|c| c.cluster.as_str()))
                .collect();
            if ports == [43] && clusters == ["cluster2"] {
                Ok(())
            } else {
                Err(format!("{ports:?} {clusters:?}"))
            }
        },
    )
    .await;
    unexport(&c.client, ns, "hello").await;
    for m in members {
        m.cluster
            .wait_for("hello gone after the last unexport", WAIT, || async {
                if import(&m.client, ns, "hello").await.is_none() {
                    Ok(())
                } else {
                    Err("still imported".to_owned())
                }
            })
            .await;
    }
}

/// Each endpoint's (source cluster, zone, zone hints) in `slices`, sorted;
/// `None` hints for an endpoint without any.
fn zone_hints(slices: &[EndpointSlice]) -> Vec<(String, Option<String>, Option<Vec<String>>)> {
    let mut rows: Vec<_> = slices
        .iter()
        .flat_map(|s| {
            let source = s
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("multicluster.kubernetes.io/source-cluster").cloned())
                .unwrap_or_default();
            s.endpoints.iter().map(move |e| {
                (
                    source.clone(),
                    e.zone.clone(),
                    e.hints
                        .as_ref()
                        .and_then(|h| h.for_zones.as_ref())
                        .map(|z| z.iter().map(|z| z.name.clone()).collect()),
                )
            })
        })
        .collect();
    rows.sort();
    rows
}

/// A clusterset IP exported from cluster0 and cluster1 with
/// `trafficDistribution: PreferClose`: every endpoint of every MCS slice
/// of the derived Service is hinted, and the apiserver accepts the hints
/// (the zone no cluster has for other clusters' endpoints, the empty zone
/// of a Node without the zone label); cluster0's endpoints carry the zones
/// of cluster0's Nodes, nobody else's; cluster2, which does not export,
/// sends everywhere (`/explain`). A Node leaving takes its zone out of the
/// hints. The import spreads again when the field is removed.
async fn a_local_first_import_hints_every_slice_for_this_clusters_zones(cs: &Clusterset) {
    use k8s_openapi::api::core::v1::Node;
    let (members, ns) = (&cs.members(), "nearby");
    for m in members {
        create_namespace(&m.client, ns).await;
    }
    // A Node without the zone label in cluster0, tainted so that nothing
    // of any test runs on it.
    let nodes: Api<Node> = Api::all(members[0].client.clone());
    nodes
        .create(
            &PostParams::default(),
            &object(json!({
                "metadata": {"name": "unzoned", "labels": {"type": "kwok"},
                    "annotations": {"kwok.x-k8s.io/node": "fake"}},
                "spec": {"taints": [{"key": "test", "value": "unzoned", "effect": "NoSchedule"}]},
                "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"}},
            })),
        )
        .await
        .unwrap();
    for m in &members[..2] {
        deploy(
            &m.client,
            ns,
            "api",
            2,
            false,
            json!([{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]),
        )
        .await;
        Api::<Service>::namespaced(m.client.clone(), ns)
            .patch(
                "api",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"trafficDistribution": "PreferClose"}})),
            )
            .await
            .unwrap();
        m.cluster
            .wait_deployment_ready(&m.client, ns, "api", 2)
            .await;
        export(&m.client, ns, "api").await;
    }
    let elsewhere = Some(vec!["elsewhere.clusterset.invalid".to_owned()]);
    let hinted = |m: &Member<'_>, own_zones: Vec<String>| {
        let (client, id, elsewhere) = (m.client.clone(), m.id().to_owned(), elsewhere.clone());
        async move {
            let rows = zone_hints(&mcs_slices(&client, ns, "api").await);
            let sources: std::collections::BTreeSet<&str> =
                rows.iter().map(|(source, _, _)| source.as_str()).collect();
            if sources.len() < 2 || rows.len() < 4 {
                return Err(format!("not both exporters' endpoints yet: {rows:?}"));
            }
            for (source, zone, hints) in &rows {
                if *source != id {
                    if *hints != elsewhere {
                        return Err(format!("{source}'s endpoint hinted {hints:?}: {rows:?}"));
                    }
                    continue;
                }
                let hints = hints.clone().unwrap_or_default();
                let zone = zone.clone().unwrap_or_default();
                if !hints.contains(&zone) || hints.iter().any(|z| !own_zones.contains(z)) {
                    return Err(format!(
                        "own endpoint in zone {zone:?} hinted {hints:?}, node zones {own_zones:?}"
                    ));
                }
            }
            // Every zone of this cluster's nodes is someone's hint.
            let named: std::collections::BTreeSet<&String> = rows
                .iter()
                .filter(|(source, _, _)| *source == id)
                .flat_map(|(_, _, hints)| hints.iter().flatten())
                .collect();
            if own_zones.iter().any(|z| !named.contains(z)) {
                return Err(format!("zones {own_zones:?}, hinted {named:?}"));
            }
            Ok(rows)
        }
    };
    let with_unzoned: Vec<String> = vec![String::new(), "zone-a".into(), "zone-b".into()];
    let rows = members[0]
        .cluster
        .wait_for("hints on cluster0's slices", WAIT, || {
            hinted(&members[0], with_unzoned.clone())
        })
        .await;
    eprintln!("cluster0's hints: {rows:?}");
    members[1]
        .cluster
        .wait_for("hints on cluster1's slices", WAIT, || {
            hinted(&members[1], vec!["zone-a".into(), "zone-b".into()])
        })
        .await;
    let explained = |m: &Member<'_>| {
        let admin = m.controller.admin_addr();
        async move {
            let (_, body) = http_get(admin, "/explain?service=nearby/api").await;
            serde_json::from_str::<serde_json::Value>(&body).unwrap_or_default()
        }
    };
    let here = explained(&members[0]).await;
    assert_eq!(here["local_first"]["locality"], "PreferSameZone", "{here}");
    assert_eq!(here["local_first"]["local_ready"], 2, "{here}");
    let c = &members[2];
    let rows = c
        .cluster
        .wait_for("cluster2's slices, all hinted elsewhere", WAIT, || async {
            let rows = zone_hints(&mcs_slices(&c.client, ns, "api").await);
            if rows.len() == 4 && rows.iter().all(|(_, _, h)| *h == elsewhere) {
                Ok(rows)
            } else {
                Err(format!("{rows:?}"))
            }
        })
        .await;
    assert_eq!(rows.len(), 4);
    let there = explained(c).await;
    assert!(
        there["local_first"]["kube_proxy"]
            .as_str()
            .is_some_and(|s| s.contains("this cluster has none ready")),
        "{there}"
    );

    // The unzoned Node goes: its zone leaves the hints.
    nodes
        .delete("unzoned", &DeleteParams::default())
        .await
        .unwrap();
    members[0]
        .cluster
        .wait_for("hints without the empty zone", WAIT, || {
            hinted(&members[0], vec!["zone-a".into(), "zone-b".into()])
        })
        .await;

    // Without the field the import spreads: no hints anywhere.
    for m in &members[..2] {
        Api::<Service>::namespaced(m.client.clone(), ns)
            .patch(
                "api",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"trafficDistribution": null}})),
            )
            .await
            .unwrap();
    }
    for m in members {
        m.cluster
            .wait_for("no hints once the import spreads", WAIT, || async {
                let rows = zone_hints(&mcs_slices(&m.client, ns, "api").await);
                if rows.len() == 4 && rows.iter().all(|(_, _, h)| h.is_none()) {
                    Ok(())
                } else {
                    Err(format!("{rows:?}"))
                }
            })
            .await;
    }
}

/// C13: after convergence, no input change means no write.
async fn a_converged_clusterset_makes_no_writes(cs: &Clusterset) {
    let members = &cs.members();
    writes_settled(members).await;
    let mut before = Vec::new();
    for m in members {
        before.push(m.metric("clusterset_dns_controller_writes_total").await);
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    for (m, before) in members.iter().zip(before) {
        let after = m.metric("clusterset_dns_controller_writes_total").await;
        assert_eq!(after, before, "{}: writes while idle", m.id());
    }
}

/// Waits until none of `members` has written for 3 s (at most 30 s): the
/// step before saw its outcome, but a write that completes it elsewhere
/// may still land, and a step that counts writes must not count it.
async fn writes_settled(members: &[Member<'_>]) {
    let settle = std::time::Instant::now();
    let mut last = Vec::new();
    let mut quiet_since = std::time::Instant::now();
    while settle.elapsed() < Duration::from_secs(30) {
        let mut now = Vec::new();
        for m in members {
            now.push(m.metric("clusterset_dns_controller_writes_total").await);
        }
        if now != last {
            last = now;
            quiet_since = std::time::Instant::now();
        } else if quiet_since.elapsed() >= Duration::from_secs(3) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A reader ServiceAccount `name` in cluster `cluster`, bound to the
/// shipped peer-reader roles (the ClusterRole by `test-<name>`, the Role
/// over the publication by `test-<name>` in `clusterset-dns`); returns a
/// kubeconfig with a token of it.
async fn reader_account(cluster: &Cluster, name: &str) -> String {
    let client = cluster.admin_client().await;
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), "clusterset-dns");
    accounts
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": name}})),
        )
        .await
        .unwrap();
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(client.clone());
    bindings
        .create(
            &PostParams::default(),
            &object(json!({
                "metadata": {"name": format!("test-{name}")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "clusterset-dns-peer-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "clusterset-dns"}],
            })),
        )
        .await
        .unwrap();
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), "clusterset-dns")
        .create(
            &PostParams::default(),
            &object(json!({
                "metadata": {"name": format!("test-{name}")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "clusterset-dns-peer-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "clusterset-dns"}],
            })),
        )
        .await
        .unwrap();
    controlplane::service_account_kubeconfig(cluster, "clusterset-dns", name, 3600).await
}

/// C9: rotating cluster0's credentials on cluster1 (a new token in the
/// Secret, then the old account deleted, which invalidates the old token)
/// never drops what cluster1 imports from cluster0, and causes no write.
async fn rotating_peer_credentials_drops_nothing_and_writes_nothing(cs: &Clusterset) {
    let members = &cs.members();
    let ns = "rotation";
    let (a, b) = (&members[0], &members[1]);
    export_api(members, ns).await;
    let first = reader_account(a.cluster, "rotating-1").await;
    controlplane::add_peer_secret(&b.client, "cluster0", &first).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The import's own writes (and the switch) complete before counting.
    writes_settled(&members[1..2]).await;
    let imported = || async {
        import(&b.client, ns, "api").await.is_some()
            && !mcs_slices(&b.client, ns, "api").await.is_empty()
    };
    assert!(imported().await, "imported before the rotation");
    let writes = b.metric("clusterset_dns_controller_writes_total").await;
    let second = reader_account(a.cluster, "rotating-2").await;
    controlplane::add_peer_secret(&b.client, "cluster0", &second).await;
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(a.client.clone(), "clusterset-dns");
    tokio::time::sleep(Duration::from_secs(1)).await;
    accounts
        .delete("rotating-1", &DeleteParams::default())
        .await
        .unwrap();
    // The import never drops, and the new credentials serve the watches:
    // a change made now on cluster0 reaches cluster1.
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        assert!(
            imported().await,
            "cluster0's service dropped during the rotation"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        b.metric("clusterset_dns_controller_writes_total").await,
        writes,
        "no churn"
    );
    Api::<Service>::namespaced(a.client.clone(), ns)
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ports": [{"name": "http", "port": 80}, {"name": "admin", "port": 81}]}})),
        )
        .await
        .unwrap();
    b.cluster
        .wait_for(
            "a change on cluster0 seen with the new credentials",
            WAIT,
            || async {
                let ports = import(&b.client, ns, "api")
                    .await
                    .map(|i| i.spec.ports.len());
                if ports == Some(2) {
                    Ok(())
                } else {
                    Err(format!("{ports:?}; log:\n{}", tail(&b.controller.log())))
                }
            },
        )
        .await;
}

/// C8 (and C5 for a 403): cluster0 revokes the peers' read access; within
/// the grace period cluster1 keeps what cluster0 exports and reports the
/// peer down; access restored, the peer is up again without a single write.
async fn a_peer_forbidden_within_grace_is_kept_and_back_without_writes(cs: &Clusterset) {
    let members = &cs.members();
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    let ns = "forbidden";
    let (a, b) = (&members[0], &members[1]);
    export_api(members, ns).await;
    // cluster1 reads cluster0 as `forbidden` from here on.
    let reader = reader_account(a.cluster, "forbidden").await;
    controlplane::add_peer_secret(&b.client, "cluster0", &reader).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let bindings: Api<ClusterRoleBinding> = Api::all(a.client.clone());
    let mut binding = bindings.get("test-forbidden").await.unwrap();
    // The switch and the import's writes may still be completing on cluster1.
    writes_settled(&members[1..2]).await;
    let writes = b.metric("clusterset_dns_controller_writes_total").await;
    bindings
        .delete("test-forbidden", &DeleteParams::default())
        .await
        .unwrap();
    b.cluster
        .wait_for("cluster0 reported down on cluster1", WAIT, || async {
            let up = b
                .metric("clusterset_dns_controller_peer_up{peer=\"cluster0\"}")
                .await;
            if up == 0.0 {
                Ok(())
            } else {
                Err(format!("peer_up {up}"))
            }
        })
        .await;
    assert!(
        import(&b.client, ns, "api").await.is_some(),
        "kept within grace"
    );
    assert!(
        !mcs_slices(&b.client, ns, "api").await.is_empty(),
        "slices kept within grace"
    );
    binding.metadata.resource_version = None;
    binding.metadata.uid = None;
    binding.metadata.creation_timestamp = None;
    binding.metadata.managed_fields = None;
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    b.cluster
        .wait_for("cluster0 up again on cluster1", WAIT, || async {
            let up = b
                .metric("clusterset_dns_controller_peer_up{peer=\"cluster0\"}")
                .await;
            if up == 1.0 {
                Ok(())
            } else {
                Err(format!("peer_up {up}"))
            }
        })
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        b.metric("clusterset_dns_controller_writes_total").await,
        writes,
        "no write for a flap inside the grace period"
    );
}

/// Namespace `ns` everywhere, Deployment and Service `api` (port 80)
/// exported from cluster0, and waits until every member imports it.
async fn export_api(members: &[Member<'_>], ns: &str) {
    for m in members {
        create_namespace(&m.client, ns).await;
    }
    let a = &members[0];
    deploy(
        &a.client,
        ns,
        "api",
        1,
        false,
        json!([{"name": "http", "port": 80}]),
    )
    .await;
    export(&a.client, ns, "api").await;
    for m in members {
        m.cluster
            .wait_for("api imported", WAIT, || async {
                import(&m.client, ns, "api")
                    .await
                    .map(|_| ())
                    .ok_or_else(|| "no import".to_owned())
            })
            .await;
    }
}

/// C10: deleting cluster0's Secret in cluster1 drops what cluster0
/// exports from cluster1 at once (no grace period: the operator removed the
/// peer); recreating it imports it again. The other clusters are untouched.
async fn a_removed_peer_secret_drops_its_imports_at_once(cs: &Clusterset) {
    let members = &cs.members();
    let ns = "membership";
    let (a, b, c) = (&members[0], &members[1], &members[2]);
    export_api(members, ns).await;
    let reader = controlplane::service_account_kubeconfig(
        a.cluster,
        "clusterset-dns",
        "clusterset-dns-peer-reader",
        3600,
    )
    .await;
    controlplane::remove_peer_secret(&b.client, "cluster0").await;
    let removed = Instant::now();
    b.cluster
        .wait_for("api no longer imported in cluster1", WAIT, || async {
            let gone = import(&b.client, ns, "api").await.is_none()
                && mcs_slices(&b.client, ns, "api").await.is_empty();
            if gone {
                Ok(())
            } else {
                Err("still imported".to_owned())
            }
        })
        .await;
    let took = removed.elapsed();
    assert!(
        took < Duration::from_secs(8),
        "dropped in {took:?}: faster than the grace period"
    );
    assert!(
        import(&c.client, ns, "api").await.is_some(),
        "cluster2 still imports"
    );
    controlplane::add_peer_secret(&b.client, "cluster0", &reader).await;
    b.cluster
        .wait_for("api imported again", WAIT, || async {
            import(&b.client, ns, "api")
                .await
                .map(|_| ())
                .ok_or_else(|| format!("no import; controller log:\n{}", tail(&b.controller.log())))
        })
        .await;
}
