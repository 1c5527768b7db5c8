//! [`super::plan`] over synthetic cluster state. A tiny in-memory
//! "apiserver" ([`World::apply`]) applies each plan's writes the way the
//! real one would for the fields the plan reads back (uids, cluster IPs),
//! so the tests can check the property that matters most: planning again
//! after the writes converges to an empty plan (no idle writes).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::ResourceExt;

use super::*;
use crate::api::ServiceExport;
use crate::api::well_known::{
    LABEL_KUBERNETES_SERVICE_NAME, LABEL_MANAGED_BY, LABEL_SERVICE_NAME, LABEL_SOURCE_CLUSTER,
};
use crate::controller::lean::Lean;
use crate::controller::naming::{MANAGED_BY, mirrored_slice_name};
use crate::controller::ownership::NOT_OURS;
use crate::watch::IndexResource;

const NS: &str = "demo";
/// The controller's namespace, where this cluster publishes.
const PUBLISH_NS: &str = "clusterset-dns";

fn time(secs: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + secs).unwrap())
}

fn meta(name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(NS.into()),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        creation_timestamp: Some(time(0)),
        ..ObjectMeta::default()
    }
}

fn export(name: &str, created: i64) -> ServiceExport {
    let mut export = ServiceExport::new(name, Default::default());
    export.metadata.namespace = Some(NS.into());
    export.metadata.creation_timestamp = Some(time(created));
    export
}

fn service(name: &str, port: i32) -> Service {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": "10.0.0.10",
            "clusterIPs": ["10.0.0.10"],
            "ipFamilies": ["IPv4"],
            "ports": [{"name": "http", "protocol": "TCP", "port": port}],
        },
    }))
    .unwrap()
}

fn endpoint(ip: &str) -> Endpoint {
    Endpoint {
        addresses: vec![ip.into()],
        conditions: Some(EndpointConditions {
            ready: Some(true),
            serving: Some(true),
            terminating: Some(false),
        }),
        node_name: Some("node-1".into()),
        ..Endpoint::default()
    }
}

/// The in-tree controller's slice of a local Service.
fn kubernetes_slice(service: &str, ips: &[&str]) -> EndpointSlice {
    EndpointSlice {
        metadata: meta(
            &format!("{service}-abcde"),
            &[
                (LABEL_KUBERNETES_SERVICE_NAME, service),
                (LABEL_MANAGED_BY, "endpointslice-controller.k8s.io"),
            ],
        ),
        address_type: "IPv4".into(),
        endpoints: ips.iter().map(|ip| endpoint(ip)).collect(),
        ports: Some(vec![EndpointPort {
            name: Some("http".into()),
            protocol: Some("TCP".into()),
            port: Some(8080),
            app_protocol: None,
        }]),
    }
}

/// A slice as peer `cluster` mirrored it (what its controller writes).
fn peer_slice(cluster: &str, service: &str, ips: &[&str]) -> EndpointSlice {
    let mut slice = kubernetes_slice(service, ips);
    slice.metadata.name = Some(mirrored_slice_name(NS, service, cluster, "x"));
    slice.metadata.labels = Some(
        [
            (LABEL_SERVICE_NAME, service),
            (LABEL_SOURCE_CLUSTER, cluster),
            (LABEL_MANAGED_BY, MANAGED_BY),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    );
    for endpoint in &mut slice.endpoints {
        endpoint.node_name = None;
    }
    slice
}

/// This cluster and its peers, as their watches would have indexed them.
struct World {
    local: ClusterData,
    local_only: LocalData,
    peers: Vec<(String, ClusterData, bool)>,
    unknown: BTreeSet<String>,
    deletions_allowed: bool,
    next_ip: u8,
    endpoint_ranges: std::collections::BTreeMap<String, Vec<Cidr>>,
    import_selector: Option<crate::label_selector::LabelSelector>,
    ip_share: u8,
    node_hints: bool,
}

impl World {
    fn new() -> Self {
        let mut local_only = LocalData::default();
        local_only.apply(
            serde_json::from_value::<Namespace>(serde_json::json!({"metadata": {"name": NS}}))
                .unwrap(),
        );
        local_only.ip_families = vec!["IPv4".into()];
        Self {
            local: ClusterData::default(),
            local_only,
            peers: Vec::new(),
            unknown: BTreeSet::new(),
            deletions_allowed: true,
            next_ip: 1,
            endpoint_ranges: Default::default(),
            import_selector: None,
            ip_share: 100,
            node_hints: true,
        }
    }

    fn peer(&mut self, id: &str) -> &mut ClusterData {
        if !self.peers.iter().any(|(p, _, _)| p == id) {
            self.peers.push((id.into(), ClusterData::default(), true));
        }
        &mut self.peers.iter_mut().find(|(p, _, _)| p == id).unwrap().1
    }

    fn plan(&self, name: &str) -> Plan {
        self.plan_in(NS, name)
    }

    fn plan_in(&self, namespace: &str, name: &str) -> Plan {
        let views: Vec<PeerView<'_>> = self
            .peers
            .iter()
            .map(|(id, data, usable)| PeerView {
                id,
                endpoint_ranges: self.endpoint_ranges.get(id.as_str()).map(Vec::as_slice),
                data,
                usable: *usable,
            })
            .collect();
        let now = time(1000);
        let deny = NamespaceFilter::new(["kube-*".to_owned()]);
        let inputs = Inputs {
            local_id: "a",
            local: &self.local,
            local_only: &self.local_only,
            peers: &views,
            unknown_peers: &self.unknown,
            deny: &deny,
            import_selector: self.import_selector.as_ref(),
            ip_share: &crate::controller::ip_share::IpShare::new(self.ip_share),
            deletions_allowed: self.deletions_allowed,
            publish_namespace: PUBLISH_NS,
            now: &now,
            node_hints: self.node_hints,
        };
        plan(&inputs, &ServiceRef::new(namespace, name))
    }

    /// Applies writes as the apiserver would, for what plans read back.
    fn apply(&mut self, writes: &[Write]) {
        for write in writes {
            match write.clone() {
                Write::Import(import) => {
                    let mut import = *import;
                    let existing = self.local_only.imports.get(NS, &import.name_any());
                    import.metadata.uid = Some(format!("uid-{}", import.name_any()));
                    import.status = existing.and_then(|e| e.status.clone());
                    self.local_only.imports.apply(import);
                }
                Write::ImportStatus(import) => {
                    let mut existing = self.local_only.imports.get(NS, &import.name_any()).unwrap();
                    existing.status = import.status;
                    self.local_only.imports.apply(existing);
                }
                Write::DerivedService(service) => {
                    let mut service = *service;
                    let existing = self.local.services.get(NS, &service.name_any());
                    let ips = existing
                        .and_then(|e| e.spec.clone()?.cluster_ips)
                        .unwrap_or_else(|| {
                            self.next_ip += 1;
                            vec![format!("10.1.0.{}", self.next_ip)]
                        });
                    service.metadata.uid = Some(format!("uid-{}", service.name_any()));
                    let spec = service.spec.as_mut().unwrap();
                    spec.cluster_ip = Some(ips[0].clone());
                    spec.cluster_ips = Some(ips);
                    self.local.services.apply(service);
                }
                Write::Slice(slice) => {
                    let mut slice = *slice;
                    slice.metadata.uid = Some(format!("uid-{}", slice.name_any()));
                    self.local.mcs_slices.apply(slice);
                }
                Write::Published(published) => {
                    let mut published = *published;
                    published.metadata.uid = Some(format!("uid-{}", published.name_any()));
                    self.local_only.published.apply(Lean::new(published));
                }
                Write::PublishedSlice(slice) => {
                    let mut slice = *slice;
                    slice.metadata.uid = Some(format!("uid-{}", slice.name_any()));
                    self.local_only.published.apply(Lean::new(slice));
                }
                Write::ExportStatus {
                    service,
                    conditions,
                    ..
                } => {
                    let mut export = self.local.exports.get(NS, &service.name).unwrap();
                    export.status = Some(crate::api::ServiceExportStatus { conditions });
                    self.local.exports.apply(export);
                }
                // Where the controller's own writes land (`Written::land`).
                Write::Delete {
                    kind,
                    namespace,
                    name,
                    ..
                } => kind.forget(&mut self.local, &mut self.local_only, &namespace, &name),
            }
        }
    }

    /// Plans and applies until a plan is empty; returns every write, and
    /// fails if that takes more than `passes`.
    fn converge(&mut self, name: &str, passes: usize) -> Vec<Write> {
        let mut all = Vec::new();
        for _ in 0..passes {
            let plan = self.plan(name);
            if plan.writes.is_empty() {
                return all;
            }
            self.apply(&plan.writes);
            all.extend(plan.writes);
        }
        panic!(
            "{name}: no fixpoint in {passes} passes; last plan: {:#?}",
            self.plan(name).writes
        );
    }

    fn import(&self, name: &str) -> Option<ServiceImport> {
        self.local_only.imports.get(NS, name)
    }

    fn slices(&self) -> Vec<EndpointSlice> {
        self.local
            .mcs_slices
            .of(&ServiceRef::new(NS, "web"))
            .collect()
    }
}

fn kinds(writes: &[Write]) -> Vec<Kind> {
    writes.iter().map(Write::kind).collect()
}

fn local_export(world: &mut World) {
    world.local.exports.apply(export("web", 0));
    world.local.services.apply(service("web", 80));
    world
        .local_only
        .kubernetes_slices
        .apply(kubernetes_slice("web", &["10.2.0.1", "10.2.0.2"]));
}

#[test]
fn a_local_export_is_published_for_peers_and_withdrawn_with_it() {
    use crate::controller::publication::{PUBLISHED_BY, service_view, slice_view};
    let mut world = World::new();
    local_export(&mut world);
    let writes = world.converge("web", 5);
    // Written into the controller's namespace (held by the store under
    // the service's, as published slices are).
    let written = writes
        .iter()
        .find_map(|write| match write {
            Write::Published(published) => Some(published),
            _ => None,
        })
        .unwrap();
    assert_eq!(written.metadata.namespace.as_deref(), Some(PUBLISH_NS));
    assert_eq!(written.metadata.name.as_deref(), Some("demo.web"));
    let web = ServiceRef::new(NS, "web");
    let published = world.local_only.published.service(&web).unwrap();
    assert_eq!(published.metadata.name.as_deref(), Some("demo.web"));
    // What a peer reads back is this cluster's Service as the merge reads
    // it: the same projection as the Service itself.
    let view = service_view(&published).unwrap();
    let local = world.local.services.get(NS, "web").unwrap();
    let export = world.local.exports.get(NS, "web").unwrap();
    assert_eq!(
        crate::controller::merge::project("a", &export, Some(&view)),
        crate::controller::merge::project("a", &export, Some(&local)),
    );
    let slices: Vec<EndpointSlice> = world.local_only.published.slices(&web).collect();
    assert_eq!(slices.len(), 1);
    assert_eq!(slices[0].labels()[LABEL_MANAGED_BY], PUBLISHED_BY);
    let view = slice_view(slices[0].clone()).unwrap();
    let addresses: Vec<&str> = view
        .endpoints
        .iter()
        .map(|e| e.addresses[0].as_str())
        .collect();
    assert_eq!(addresses, ["10.2.0.1", "10.2.0.2"]);
    assert!(
        view.endpoints
            .iter()
            .all(|e| e.node_name.is_none() && e.hints.is_none())
    );

    // The export goes: so does the publication, slices and all.
    world.local.exports.delete(export);
    let writes = world.converge("web", 5);
    assert!(
        kinds(&writes).contains(&Kind::PublishedService),
        "{writes:?}"
    );
    assert!(kinds(&writes).contains(&Kind::PublishedSlice), "{writes:?}");
    assert!(world.local_only.published.service(&web).is_none());
    assert_eq!(world.local_only.published.slices(&web).count(), 0);
}

#[test]
fn nothing_is_published_for_an_invalid_export_or_a_denied_namespace() {
    let mut world = World::new();
    world.local.exports.apply(export("web", 0));
    // No Service: the export is invalid, and peers read nothing of it.
    world.converge("web", 5);
    let web = ServiceRef::new(NS, "web");
    assert!(world.local_only.published.service(&web).is_none());

    // A denied namespace is never published, whatever it exports.
    let mut world = World::new();
    let mut denied = export("web", 0);
    denied.metadata.namespace = Some("kube-system".into());
    world.local.exports.apply(denied);
    let mut svc = service("web", 80);
    svc.metadata.namespace = Some("kube-system".into());
    world.local.services.apply(svc);
    let plan = world.plan_in("kube-system", "web");
    assert!(
        !plan
            .writes
            .iter()
            .any(|w| matches!(w.kind(), Kind::PublishedService | Kind::PublishedSlice)),
        "{:?}",
        plan.writes
    );
}

#[test]
fn a_local_export_converges_then_plans_nothing() {
    let mut world = World::new();
    local_export(&mut world);

    // Every object is written once, except the import, which needs a
    // second apply for the derived Service's VIP (the Service's owner
    // reference needs the import's uid first). No status is written only to
    // be rewritten: the import's waits for the VIP, the export's for the
    // import's uid (the mirror needs it).
    let writes = world.converge("web", 5);
    assert_eq!(
        kinds(&writes),
        [
            // Round 1: the import; what it owns waits for its uid. The
            // publication for peers waits for nothing.
            Kind::ServiceImport,
            Kind::PublishedSlice,
            Kind::PublishedService,
            // Round 2: the derived Service, the mirror, then the export's
            // status (after the mirror it reports).
            Kind::Service,
            Kind::EndpointSlice,
            Kind::ServiceExportStatus,
            // Round 3: the VIP into the import, and its status, once.
            Kind::ServiceImport,
            Kind::ServiceImportStatus,
        ]
    );

    // The fixpoint: the import has the derived Service's IP and is Ready,
    // the mirrored slice has the endpoints without node names, the export
    // is Valid, Ready and without conflicts.
    let import = world.import("web").unwrap();
    assert_eq!(import.spec.ips, ["10.1.0.2"]);
    let status = import.status.as_ref().unwrap();
    assert_eq!(
        status.clusters,
        [ClusterStatus {
            cluster: "a".into()
        }]
    );
    assert_eq!(
        status.conditions[0].status, "True",
        "{:?}",
        status.conditions
    );
    let slices = world.slices();
    assert_eq!(slices.len(), 1);
    assert_eq!(slices[0].endpoints.len(), 2);
    assert!(slices[0].endpoints.iter().all(|e| e.node_name.is_none()));
    assert_eq!(
        slices[0]
            .labels()
            .get(LABEL_KUBERNETES_SERVICE_NAME)
            .map(String::as_str),
        Some(derived_service_name(NS, "web").as_str())
    );
    let export = world.local.exports.get(NS, "web").unwrap();
    let conditions: Vec<(&str, &str)> = export
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str()))
        .collect();
    assert_eq!(
        conditions,
        [("Valid", "True"), ("Ready", "True"), ("Conflict", "False")]
    );

    // Idle: nothing to write.
    assert_eq!(world.plan("web").writes, []);
}

#[test]
fn a_peer_export_is_imported_with_the_peers_slices() {
    let mut world = World::new();
    let peer = world.peer("b");
    peer.exports.apply(export("web", 0));
    peer.services.apply(service("web", 80));
    peer.mcs_slices.apply(peer_slice("b", "web", &["10.3.0.1"]));
    world.converge("web", 5);
    let slices = world.slices();
    assert_eq!(slices.len(), 1);
    assert_eq!(
        slices[0]
            .labels()
            .get(LABEL_SOURCE_CLUSTER)
            .map(String::as_str),
        Some("b")
    );
    assert_eq!(slices[0].endpoints[0].addresses, ["10.3.0.1"]);
    assert!(
        world.local.exports.is_empty(),
        "no local export: no status written"
    );
    assert_eq!(world.plan("web").writes, []);

    // The peer unexports: everything goes.
    let peer = world.peer("b");
    peer.exports.delete(export("web", 0));
    let writes = world.converge("web", 3);
    assert!(
        writes.iter().all(|w| matches!(w, Write::Delete { .. })),
        "{writes:?}"
    );
    assert!(world.import("web").is_none());
    assert!(world.slices().is_empty());
    assert!(
        world
            .local
            .services
            .get(NS, &derived_service_name(NS, "web"))
            .is_none()
    );
}

#[test]
fn a_name_a_peer_chose_never_names_a_slice_here() {
    let mut world = World::new();
    let peer = world.peer("b");
    peer.exports.apply(export("web", 0));
    peer.services.apply(service("web", 80));
    // A hostile peer names its slice after this cluster's apiserver slice.
    let mut hostile = peer_slice("b", "web", &["10.3.0.1"]);
    hostile.metadata.name = Some("kubernetes".into());
    peer.mcs_slices.apply(hostile);
    let writes = world.converge("web", 5);
    let names: Vec<String> = writes
        .iter()
        .filter_map(|w| match w {
            Write::Slice(slice) => Some(slice.name_any()),
            _ => None,
        })
        .collect();
    assert_eq!(names, [mirrored_slice_name(NS, "web", "b", "kubernetes")]);
    // A new slice is a create (no uid); once seen, writes name its uid.
    assert!(writes.iter().all(|w| match w {
        Write::Slice(slice) => slice.metadata.uid.is_none(),
        _ => true,
    }));
    let peer = world.peer("b");
    peer.mcs_slices.apply({
        let mut moved = peer_slice("b", "web", &["10.3.0.2"]);
        moved.metadata.name = Some("kubernetes".into());
        moved
    });
    let plan = world.plan("web");
    let Some(Write::Slice(update)) = plan.writes.first() else {
        panic!("{:?}", plan.writes);
    };
    assert_eq!(update.metadata.uid, Some(format!("uid-{}", names[0])));
}

#[test]
fn objects_not_ours_are_refused_never_written_over() {
    let mut world = World::new();
    let peer = world.peer("b");
    peer.exports.apply(export("web", 0));
    peer.services.apply(service("web", 80));
    peer.mcs_slices.apply(peer_slice("b", "web", &["10.3.0.1"]));

    // A user's ServiceImport of that name: nothing of the service is written.
    let users: ServiceImport = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": NS, "uid": "user-import"},
        "spec": {"type": "ClusterSetIP", "ports": []},
    }))
    .unwrap();
    world.local_only.imports.apply(users.clone());
    let plan = world.plan("web");
    assert_eq!(plan.writes, []);
    assert_eq!(
        plan.refused,
        [Refusal {
            kind: Kind::ServiceImport,
            name: "web".into(),
            reason: NOT_OURS,
        }]
    );
    world.local_only.imports.delete(users);

    // A Service under the derived name, with our label but not our import as
    // its owner: refused too, and the import says so.
    world.converge("web", 5);
    let derived = derived_service_name(NS, "web");
    let mut squatter = world.local.services.get(NS, &derived).unwrap();
    squatter.metadata.owner_references = None;
    squatter.metadata.uid = Some("squatter".into());
    world.local.services.apply(squatter);
    let plan = world.plan("web");
    assert!(
        plan.refused.contains(&Refusal {
            kind: Kind::Service,
            name: derived.clone(),
            reason: NOT_OURS,
        }),
        "{:?}",
        plan.refused
    );
    assert!(
        plan.writes
            .iter()
            .all(|w| !matches!(w, Write::DerivedService(_))
                && !matches!(
                    w,
                    Write::Delete {
                        kind: Kind::Service,
                        ..
                    }
                )),
        "{:?}",
        plan.writes
    );
}

#[test]
fn untrusted_peer_slices_are_rejected_and_loops_are_impossible() {
    let mut world = World::new();
    let peer = world.peer("b");
    peer.exports.apply(export("web", 0));
    peer.services.apply(service("web", 80));
    // A loopback address, and a slice b copied from c (not b's own).
    peer.mcs_slices
        .apply(peer_slice("b", "web", &["127.0.0.1"]));
    let mut relayed = peer_slice("c", "web", &["10.4.0.1"]);
    relayed.metadata.name = Some("relayed".into());
    peer.mcs_slices.apply(relayed);
    world.converge("web", 5);
    // b's slice arrives without its refused endpoint; the relay not at all.
    let slices = world.slices();
    assert_eq!(slices.len(), 1, "{slices:?}");
    assert!(slices[0].endpoints.is_empty(), "{slices:?}");
    let mut rejected = world.plan("web").rejected;
    rejected.sort();
    let reasons: Vec<(&str, &str)> = rejected
        .iter()
        .map(|r| (r.reason, r.what.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            (
                slices::slice_reason::NOT_MIRRORED_BY_PEER,
                "EndpointSlice relayed"
            ),
            (
                crate::controller::addresses::NOT_ROUTABLE,
                &*format!(
                    "endpoint 127.0.0.1 of EndpointSlice {}",
                    mirrored_slice_name(NS, "web", "b", "x")
                )
            ),
        ],
    );
}

/// Issue 31: an endpoint a peer publishes inside this cluster's Service
/// CIDR, at one of its Node addresses, or outside the ranges recorded for
/// the peer is refused by name; the slice's other endpoints are imported.
#[test]
fn endpoints_pointing_back_into_this_cluster_are_refused_and_the_rest_kept() {
    let mut world = World::new();
    world.local_only.service_ranges = vec!["10.96.0.0/12".parse().unwrap()];
    world.local_only.node_addresses = ["172.18.0.2".parse().unwrap()].into();
    let peer = world.peer("b");
    peer.exports.apply(export("web", 0));
    peer.services.apply(service("web", 80));
    peer.mcs_slices.apply(peer_slice(
        "b",
        "web",
        &["10.96.0.1", "172.18.0.2", "10.3.0.1", "10.9.0.1"],
    ));
    world.converge("web", 5);
    let kept = |world: &World| -> Vec<String> {
        world
            .slices()
            .iter()
            .flat_map(|s| s.endpoints.iter().flat_map(|e| e.addresses.clone()))
            .collect()
    };
    assert_eq!(kept(&world), ["10.3.0.1", "10.9.0.1"]);
    let reasons: Vec<&str> = world
        .plan("web")
        .rejected
        .iter()
        .map(|r| r.reason)
        .collect();
    assert_eq!(reasons, ["InServiceCIDR", "NodeAddress"]);

    // Ranges recorded for b: 10.9.0.1 is outside them.
    world
        .endpoint_ranges
        .insert("b".into(), vec!["10.3.0.0/16".parse().unwrap()]);
    world.converge("web", 5);
    assert_eq!(kept(&world), ["10.3.0.1"]);
    let reasons: Vec<&str> = world
        .plan("web")
        .rejected
        .iter()
        .map(|r| r.reason)
        .collect();
    assert_eq!(
        reasons,
        ["InServiceCIDR", "NodeAddress", "OutsidePeerRanges"]
    );
}

#[test]
fn a_peer_past_grace_drops_out_and_an_unknown_peer_defers() {
    let mut world = World::new();
    local_export(&mut world);
    let peer = world.peer("b");
    peer.exports.apply(export("web", 5));
    peer.services.apply(service("web", 80));
    peer.mcs_slices.apply(peer_slice("b", "web", &["10.3.0.1"]));
    world.converge("web", 5);
    assert_eq!(world.slices().len(), 2);

    // Not usable (past grace): its slice and its place in clusters go.
    world.peers[0].2 = false;
    world.converge("web", 3);
    assert_eq!(world.slices().len(), 1);
    let clusters = world.import("web").unwrap().status.unwrap().clusters;
    assert_eq!(
        clusters,
        [ClusterStatus {
            cluster: "a".into()
        }]
    );

    // A restarted controller that has not read "a"-listed peer "x" yet
    // leaves a service naming it alone.
    let mut import = world.import("web").unwrap().clone();
    import
        .status
        .as_mut()
        .unwrap()
        .clusters
        .push(ClusterStatus {
            cluster: "x".into(),
        });
    world.local_only.imports.apply(import);
    world.unknown.insert("x".into());
    let plan = world.plan("web");
    assert!(plan.deferred);
    assert_eq!(plan.writes, []);
}

#[test]
fn nothing_is_deleted_before_deletions_are_allowed() {
    let mut world = World::new();
    local_export(&mut world);
    world.converge("web", 5);
    world.local.exports.delete(export("web", 0));
    world.deletions_allowed = false;
    assert!(
        world
            .plan("web")
            .writes
            .iter()
            .all(|w| !matches!(w, Write::Delete { .. }))
    );
    world.deletions_allowed = true;
    world.converge("web", 3);
    assert!(world.import("web").is_none());
}

#[test]
fn a_user_service_with_the_derived_name_is_never_touched() {
    let mut world = World::new();
    local_export(&mut world);
    let mut user = service(&derived_service_name(NS, "web"), 9999);
    user.metadata.labels = None;
    world.local.services.apply(user.clone());
    world.converge("web", 5);
    let kept = world
        .local
        .services
        .get(NS, &derived_service_name(NS, "web"))
        .unwrap();
    assert_eq!(kept, user, "untouched");
    // Issue 44 (M5): slices labelled with that name would put the
    // exporters' endpoints behind the user's Service.
    assert!(world.slices().is_empty(), "{:?}", world.slices());
    let import = world.import("web").unwrap();
    assert!(import.spec.ips.is_empty());
    let ready = &import.status.as_ref().unwrap().conditions[0];
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "DerivedServiceNameTaken")
    );
}

/// A local-first clusterset IP: exported from here (a) and from b, both
/// with `trafficDistribution: PreferClose`, on nodes of zones x and y.
fn local_first_world(local_ips: &[(&str, &str, bool)]) -> World {
    let local_first = |mut svc: Service| {
        svc.spec.as_mut().unwrap().traffic_distribution = Some("PreferClose".into());
        svc
    };
    let mut world = World::new();
    world.local_only.node_zones = ["x".to_owned(), "y".to_owned()].into();
    world.local.exports.apply(export("web", 0));
    world.local.services.apply(local_first(service("web", 80)));
    let mut slice = kubernetes_slice("web", &[]);
    slice.endpoints = local_ips
        .iter()
        .map(|(ip, zone, ready)| Endpoint {
            zone: Some((*zone).into()),
            conditions: Some(EndpointConditions {
                ready: Some(*ready),
                ..EndpointConditions::default()
            }),
            ..endpoint(ip)
        })
        .collect();
    world.local_only.kubernetes_slices.apply(slice);
    let peer = world.peer("b");
    peer.exports.apply(export("web", 1));
    peer.services.apply(local_first(service("web", 80)));
    peer.mcs_slices
        .apply(peer_slice("b", "web", &["10.3.0.1", "10.3.0.2"]));
    world
}

/// Each slice's endpoints as (address, zone hints, node hints).
fn hints_of(world: &World) -> BTreeSet<(String, Vec<String>, Option<Vec<String>>)> {
    world
        .slices()
        .iter()
        .flat_map(|slice| slice.endpoints.iter())
        .map(|e| {
            let hints = e.hints.as_ref().expect("every endpoint is hinted");
            (
                e.addresses[0].clone(),
                hints
                    .for_zones
                    .iter()
                    .flatten()
                    .map(|z| z.name.clone())
                    .collect(),
                hints
                    .for_nodes
                    .as_ref()
                    .map(|n| n.iter().map(|n| n.name.clone()).collect()),
            )
        })
        .collect()
}

#[test]
fn a_local_first_clusterset_ip_hints_every_endpoint_and_converges() {
    let mut world = local_first_world(&[("10.2.0.1", "x", true), ("10.2.0.2", "x", true)]);
    world.converge("web", 6);
    let elsewhere = || vec![super::hints::ELSEWHERE.to_owned()];
    let zones = |z: &[&str]| z.iter().map(|z| (*z).to_owned()).collect::<Vec<_>>();
    // Zone y has no endpoint of a: its nodes use x's, not b's.
    assert_eq!(
        hints_of(&world),
        [
            ("10.2.0.1".to_owned(), zones(&["x", "y"]), None),
            ("10.2.0.2".to_owned(), zones(&["x", "y"]), None),
            ("10.3.0.1".to_owned(), elsewhere(), None),
            ("10.3.0.2".to_owned(), elsewhere(), None),
        ]
        .into()
    );
    // The import itself says what was asked.
    assert_eq!(
        world
            .import("web")
            .unwrap()
            .spec
            .traffic_distribution
            .as_deref(),
        Some("PreferClose")
    );

    // One of a's endpoints stops being ready: only its own hints change.
    world.local_only.kubernetes_slices.apply(
        local_first_world(&[("10.2.0.1", "x", true), ("10.2.0.2", "y", false)])
            .local_only
            .kubernetes_slices
            .get(NS, "web-abcde")
            .unwrap(),
    );
    let writes = world.converge("web", 3);
    assert_eq!(
        kinds(&writes),
        [Kind::EndpointSlice, Kind::PublishedSlice],
        "only a's slice changes, here and in its publication"
    );
    let hinted = hints_of(&world);
    assert!(hinted.contains(&("10.2.0.1".to_owned(), zones(&["x", "y"]), None)));
    assert!(hinted.contains(&("10.2.0.2".to_owned(), zones(&["y"]), None)));
}

#[test]
fn node_hints_an_apiserver_refuses_become_zone_hints_and_converge() {
    let same_node = |world: &mut World| {
        let to_same_node = |mut svc: Service| {
            svc.spec.as_mut().unwrap().traffic_distribution = Some("PreferSameNode".into());
            svc
        };
        let here = to_same_node(world.local.services.get(NS, "web").unwrap());
        world.local.services.apply(here);
        let peer = world.peer("b");
        let there = to_same_node(peer.services.get(NS, "web").unwrap());
        peer.services.apply(there);
    };
    // An apiserver that accepts them: node hints and PreferSameNode.
    let mut world = local_first_world(&[("10.2.0.1", "x", true)]);
    same_node(&mut world);
    world.converge("web", 6);
    assert!(hints_of(&world).iter().all(|(_, _, nodes)| nodes.is_some()));
    // One that refuses them (Kubernetes 1.33): PreferClose and zone hints
    // only, what it stores; once written, the plan is empty (no loop).
    let mut world = local_first_world(&[("10.2.0.1", "x", true)]);
    same_node(&mut world);
    world.node_hints = false;
    world.converge("web", 6);
    assert!(world.plan("web").writes.is_empty());
    assert!(
        hints_of(&world)
            .iter()
            .all(|(_, zones, nodes)| nodes.is_none() && !zones.is_empty())
    );
    let derived = world
        .local
        .services
        .get(NS, &derived_service_name(NS, "web"))
        .expect("a derived Service");
    assert_eq!(
        derived
            .spec
            .as_ref()
            .unwrap()
            .traffic_distribution
            .as_deref(),
        Some("PreferClose")
    );
    // The import says what the exports ask; /explain says what is written.
    let import = world.import("web").unwrap();
    assert_eq!(
        import.spec.traffic_distribution.as_deref(),
        Some("PreferSameNode")
    );
    let local_first = world.plan("web").local_first.expect("local first");
    assert_eq!(local_first.locality, "PreferSameZone");
    assert!(local_first.fallback.unwrap().contains("refuses"));
}

#[test]
fn a_spread_import_and_a_headless_one_have_no_hints() {
    let mut world = local_first_world(&[("10.2.0.1", "x", true)]);
    for (_, data, _) in &mut world.peers {
        let mut svc = data.services.get(NS, "web").unwrap();
        svc.spec.as_mut().unwrap().traffic_distribution = None;
        data.services.apply(svc);
    }
    let mut svc = world.local.services.get(NS, "web").unwrap();
    svc.spec.as_mut().unwrap().traffic_distribution = None;
    world.local.services.apply(svc);
    world.converge("web", 6);
    let slices = world.slices();
    assert_eq!(slices.len(), 2);
    assert!(
        slices
            .iter()
            .flat_map(|s| s.endpoints.iter())
            .all(|e| e.hints.is_none())
    );

    let mut headless = local_first_world(&[("10.2.0.1", "x", true)]);
    let make_headless = |data: &mut ClusterData| {
        let mut svc = data.services.get(NS, "web").unwrap();
        let spec = svc.spec.as_mut().unwrap();
        spec.cluster_ip = Some("None".into());
        spec.cluster_ips = Some(vec!["None".into()]);
        data.services.apply(svc);
    };
    make_headless(&mut headless.local);
    for (_, data, _) in &mut headless.peers {
        make_headless(data);
    }
    headless.converge("web", 6);
    assert!(
        headless
            .slices()
            .iter()
            .flat_map(|s| s.endpoints.iter())
            .all(|e| e.hints.is_none())
    );
}

#[test]
fn denied_missing_and_unselected_namespaces_get_no_import_and_say_why() {
    let mut world = World::new();
    let peer = world.peer("b");
    peer.exports.apply(export("web", 0));
    peer.services.apply(service("web", 80));
    world.local_only.namespaces.clear();
    world.local_only.namespace_labels.clear();
    let missing = world.plan("web");
    assert_eq!(missing.writes, [], "namespace missing here");
    assert_eq!(
        missing.rejected,
        [],
        "a namespace created later gets it (C14)"
    );

    // Opt-in mode: the namespace exists, but its labels do not match.
    let namespace = |labels: serde_json::Value| {
        serde_json::from_value::<Namespace>(
            serde_json::json!({"metadata": {"name": NS, "labels": labels}}),
        )
        .unwrap()
    };
    world
        .local_only
        .apply(namespace(serde_json::json!({"team": "x"})));
    world.import_selector = Some("mcs.example/import=true".parse().unwrap());
    let unselected = world.plan("web");
    assert_eq!(unselected.writes, []);
    let reasons: Vec<(&str, &str)> = unselected
        .rejected
        .iter()
        .map(|r| (r.peer.as_str(), r.reason))
        .collect();
    assert_eq!(reasons, [("b", "NamespaceNotSelected")]);
    // Labelled: imported.
    world
        .local_only
        .apply(namespace(serde_json::json!({"mcs.example/import": "true"})));
    world.converge("web", 5);
    assert!(world.import("web").is_some());
    // Label removed: what was imported goes.
    world.local_only.apply(namespace(serde_json::json!({})));
    world.converge("web", 5);
    assert!(world.import("web").is_none());
}

/// A cluster of 4 clusterset addresses and a 50 % share (2 for one peer
/// alone) where peer b exports `one`, `two` and `three`, and the first
/// two are imported: b holds its whole share.
fn b_alone_at_its_share() -> World {
    let mut world = World::new();
    world.local_only.service_ranges = vec!["10.96.0.0/30".parse().unwrap()];
    world.ip_share = 50;
    for name in ["one", "two", "three"] {
        let peer = world.peer("b");
        peer.exports.apply(export(name, 0));
        peer.services.apply(service(name, 80));
    }
    world.converge("one", 5);
    world.converge("two", 5);
    world
}

/// Issue 31: one peer alone makes this cluster allocate at most its share
/// of clusterset IPs; past it, its next export is refused, while a service
/// another cluster exports too is not counted against it.
#[test]
fn a_peer_alone_gets_no_more_clusterset_ips_than_its_share() {
    let mut world = b_alone_at_its_share();
    let refused = world.plan("three");
    assert_eq!(refused.writes, [], "{:?}", refused.writes);
    let reasons: Vec<(&str, &str)> = refused
        .rejected
        .iter()
        .map(|r| (r.peer.as_str(), r.reason))
        .collect();
    assert_eq!(reasons, [("b", "ClusterSetIPShareExceeded")]);
    assert!(world.local_only.imports.get(NS, "three").is_none());
    // Exported here too: the peer cannot make it exist, so it is not counted.
    world.local.exports.apply(export("three", 0));
    world.local.services.apply(service("three", 80));
    world.converge("three", 6);
    assert!(world.local_only.imports.get(NS, "three").is_some());
}

/// Issue 44 (H3): exporting Headless and flipping to ClusterSetIP once
/// imported asks for a clusterset IP too, and counts against the share.
#[test]
fn a_headless_export_flipped_to_a_clusterset_ip_stays_within_the_share() {
    let mut world = World::new();
    world.local_only.service_ranges = vec!["10.96.0.0/30".parse().unwrap()];
    world.ip_share = 50;
    let names = ["one", "two", "three", "four"];
    for name in names {
        let mut headless = service(name, 80);
        headless.spec.as_mut().unwrap().cluster_ip = Some("None".into());
        let peer = world.peer("b");
        peer.exports.apply(export(name, 0));
        peer.services.apply(headless);
    }
    for name in names {
        world.converge(name, 5);
        assert!(world.import(name).is_some(), "headless: no IP asked");
    }
    for name in names {
        world.peer("b").services.apply(service(name, 80));
    }
    let mut refused = Vec::new();
    for name in names {
        world.converge(name, 6);
        let plan = world.plan(name);
        if plan
            .rejected
            .iter()
            .any(|r| r.reason == "ClusterSetIPShareExceeded")
        {
            refused.push(name);
        }
    }
    let derived = names
        .iter()
        .filter(|name| {
            world
                .local
                .services
                .get(NS, &derived_service_name(NS, name))
                .is_some()
        })
        .count();
    assert_eq!(derived, 2, "the share: 2 of 4 addresses");
    assert_eq!(refused, ["three", "four"]);
}

/// Issue 44 (H1): a peer's export that breaks a Service rule is refused
/// with a reason and never merged; the honest exporter's import is
/// written as if the peer did not export.
#[test]
fn a_peer_export_breaking_a_service_rule_is_refused_and_the_rest_imported() {
    let variants: [(&str, serde_json::Value); 4] = [
        (
            "protocol",
            serde_json::json!([{"name": "zz", "protocol": "XTP", "port": 1}]),
        ),
        (
            "port 0",
            serde_json::json!([{"name": "zz", "protocol": "TCP", "port": 0}]),
        ),
        (
            "port 70000",
            serde_json::json!([{"name": "zz", "protocol": "TCP", "port": 70000}]),
        ),
        (
            "unnamed beside named",
            serde_json::json!([
                {"name": "http", "protocol": "TCP", "port": 80},
                {"protocol": "TCP", "port": 9999},
            ]),
        ),
    ];
    for (case, ports) in variants {
        let mut world = World::new();
        local_export(&mut world);
        world.converge("web", 5);
        let honest = world.import("web").unwrap().spec;
        let mut hostile = service("web", 80);
        hostile.spec.as_mut().unwrap().ports = Some(serde_json::from_value(ports).unwrap());
        let peer = world.peer("b");
        peer.exports.apply(export("web", -10));
        peer.services.apply(hostile);
        peer.mcs_slices.apply(peer_slice("b", "web", &["10.3.0.1"]));
        world.converge("web", 5);
        let plan = world.plan("web");
        let reasons: Vec<(&str, &str)> = plan
            .rejected
            .iter()
            .map(|r| (r.peer.as_str(), r.reason))
            .collect();
        assert_eq!(reasons, [("b", "InvalidExport")], "{case}");
        assert_eq!(world.import("web").unwrap().spec, honest, "{case}");
        assert!(
            world
                .slices()
                .iter()
                .all(|s| s.labels().get(LABEL_SOURCE_CLUSTER).map(String::as_str) != Some("b")),
            "{case}: nothing of b's imported"
        );
    }
}

/// Issue 44 (item 6): the share counts the derived Services that hold the
/// addresses, so an import whose status does not yet name its exporter
/// (its VIP on the way) still counts.
#[test]
fn the_share_counts_derived_services_whatever_the_imports_status_says() {
    let mut world = b_alone_at_its_share();
    for name in ["one", "two"] {
        let mut import = world.import(name).unwrap();
        import.status = None;
        world.local_only.imports.apply(import);
    }
    let refused = world.plan("three");
    let reasons: Vec<&str> = refused.rejected.iter().map(|r| r.reason).collect();
    assert_eq!(
        reasons,
        ["ClusterSetIPShareExceeded"],
        "{:?}",
        refused.writes
    );
}

/// `/explain` of a conflicting import with a rejected endpoint and a
/// refused write: every key, `null` where nothing applies.
#[test]
fn explain_shows_the_merge_the_plan_and_what_was_refused() {
    let mut world = World::new();
    local_export(&mut world);
    let peer = world.peer("b");
    peer.exports.apply(export("web", 5));
    peer.services.apply(service("web", 81));
    peer.mcs_slices
        .apply(peer_slice("b", "web", &["127.0.0.1"]));
    world.converge("web", 5);
    // A new local endpoint: the plan has writes again.
    world.local_only.kubernetes_slices.apply(kubernetes_slice(
        "web",
        &["10.2.0.1", "10.2.0.2", "10.2.0.3"],
    ));
    let plan = world.plan("web");
    let b = ClusterData::default();
    let views = [PeerView {
        id: "b",
        endpoint_ranges: None,
        data: &b,
        usable: false,
    }];
    let web = ServiceRef::new(NS, "web");
    let refused_at_write = Refusal {
        kind: Kind::EndpointSlice,
        name: "web-x".into(),
        reason: NOT_OURS,
    };
    let explained = explain(
        &web,
        "a",
        &views,
        &plan,
        std::slice::from_ref(&refused_at_write),
    );
    let mut json = serde_json::to_value(&explained).unwrap();
    // The merge's own parts, as they serialise.
    let merged = plan.merged.as_ref().unwrap();
    let object = json.as_object_mut().unwrap();
    assert_eq!(
        object.remove("spec"),
        Some(serde_json::to_value(&merged.spec).unwrap())
    );
    let fields = crate::controller::merge::field_decisions(&plan.exports, merged);
    assert_eq!(
        object.remove("fields"),
        Some(serde_json::to_value(fields).unwrap())
    );
    let rejected = format!(
        "endpoint 127.0.0.1 of EndpointSlice {}",
        mirrored_slice_name(NS, "web", "b", "x")
    );
    assert_eq!(
        json,
        serde_json::json!({
            "service": "demo/web",
            "cluster": "a",
            "peers": [{"id": "b", "usable": false}],
            "exporters": ["a", "b"],
            "excluded": [],
            "winner": "a",
            "conflict": {
                "reason": "PortConflict",
                "message": merged.conflict.as_ref().unwrap().message,
            },
            "local_first": null,
            "pending_writes": ["EndpointSlice", "PublishedSlice"],
            "deferred": false,
            "refused": [{
                "kind": "EndpointSlice",
                "name": "web-x",
                "reason": "NotOurs",
                "message": refused_at_write.message(&web),
            }],
            "rejected": [{"peer": "b", "reason": "NotRoutable", "what": rejected}],
        })
    );

    // Nobody exports it: the merge's keys are there, and null.
    let nothing = explain(&web, "a", &[], &Plan::default(), &[]);
    assert_eq!(
        serde_json::to_value(&nothing).unwrap(),
        serde_json::json!({
            "service": "demo/web",
            "cluster": "a",
            "peers": [],
            "exporters": null,
            "excluded": null,
            "winner": null,
            "conflict": null,
            "spec": null,
            "fields": null,
            "local_first": null,
            "pending_writes": [],
            "deferred": false,
            "refused": [],
            "rejected": [],
        })
    );
}
