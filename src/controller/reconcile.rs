//! What this cluster should hold for one service, and the writes that get
//! it there: a pure function of what the watches have indexed.
//!
//! For a service `<ns>/<name>`, [`plan`] reads every usable cluster's
//! ServiceExport and Service, merges them ([`super::merge`]), and derives
//! this cluster's ServiceImport, derived Service, MCS EndpointSlices and the
//! status of its own ServiceExport. It then compares each with the live
//! object, normalised to the fields we own, and returns only the writes that
//! change something: with no input change the plan is empty, so an idle
//! controller writes nothing.
//!
//! Rules that keep the mesh loop-free and safe (controller.md §6):
//! - a peer's slice is copied only from the cluster its `source-cluster`
//!   label names, and only if it carries our managed-by label;
//! - peer objects are untrusted: endpoints with loopback, link-local,
//!   unspecified or multicast addresses, slices over the API's endpoint
//!   limit and services in denied namespaces are dropped and counted;
//! - nothing is deleted while [`Inputs::deletions_allowed`] is false (some
//!   peer has not been read since start-up), and a service whose current
//!   import names a cluster we cannot read is left as it is.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Service, ServicePort as CoreServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, OwnerReference, Time};
use kube::{Resource, ResourceExt};

use super::cluster::{ClusterData, LocalData, is_ours};
use super::conditions::{ImportReadiness, export_conditions, import_ready};
use super::merge::{ExportedService, Merged, merge, project};
use super::naming::{
    ANNOTATION_SOURCE_SLICE, LABEL_APP_MANAGED_BY, MANAGED_BY, derived_service_name,
    mirrored_slice_name,
};
use crate::api::well_known::{
    ANNOTATION_DERIVED_SERVICE, LABEL_KUBERNETES_SERVICE_NAME, LABEL_MANAGED_BY,
    LABEL_SERVICE_NAME, LABEL_SOURCE_CLUSTER,
};
use crate::api::{
    ClusterStatus, EndpointSliceObjects, ServiceExport, ServiceImport, ServiceImportSpec,
    ServiceImportStatus, ServiceImportType,
};
use crate::model::ServiceRef;

/// The most endpoints the API allows in one EndpointSlice.
pub const MAX_SLICE_ENDPOINTS: usize = 1000;

/// Namespaces that are never imported into or exported from.
#[derive(Debug, Clone)]
pub struct NamespaceFilter {
    patterns: Vec<String>,
}

impl NamespaceFilter {
    /// Patterns are names, or prefixes ending in `*` (`kube-*`).
    pub fn new(patterns: impl IntoIterator<Item = String>) -> Self {
        Self {
            patterns: patterns.into_iter().filter(|p| !p.is_empty()).collect(),
        }
    }

    /// Whether `namespace` is denied.
    pub fn denies(&self, namespace: &str) -> bool {
        self.patterns
            .iter()
            .any(|pattern| match pattern.strip_suffix('*') {
                Some(prefix) => namespace.starts_with(prefix),
                None => namespace == pattern,
            })
    }
}

/// One peer as the reconciler sees it.
#[derive(Debug)]
pub struct PeerView<'a> {
    /// Its cluster id.
    pub id: &'a str,
    /// What its watches indexed.
    pub data: &'a ClusterData,
    /// Whether its data counts: synced and up, or down but within grace.
    /// A peer past its grace period contributes nothing.
    pub usable: bool,
}

/// Everything [`plan`] reads.
#[derive(Debug)]
pub struct Inputs<'a> {
    /// This cluster's id.
    pub local_id: &'a str,
    /// This cluster's exports, Services and our MCS slices.
    pub local: &'a ClusterData,
    /// This cluster's Kubernetes slices, imports, namespaces, families.
    pub local_only: &'a LocalData,
    /// Every accepted peer, usable or not.
    pub peers: &'a [PeerView<'a>],
    /// Ids of peers whose data is unknown (configured but never read since
    /// start-up): services that name them are left alone.
    pub unknown_peers: &'a BTreeSet<String>,
    /// Namespaces never imported or exported.
    pub deny: &'a NamespaceFilter,
    /// Whether objects may be deleted (every peer read once, or in grace).
    pub deletions_allowed: bool,
    /// The time written into changed conditions.
    pub now: &'a Time,
}

/// One write to this cluster's apiserver.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Server-side apply of a ServiceImport's metadata and spec.
    Import(Box<ServiceImport>),
    /// Server-side apply of a ServiceImport's status.
    ImportStatus(Box<ServiceImport>),
    /// Server-side apply of a derived Service.
    DerivedService(Box<Service>),
    /// Server-side apply of an MCS EndpointSlice.
    Slice(Box<EndpointSlice>),
    /// Server-side apply of this cluster's ServiceExport conditions.
    ExportStatus {
        /// The export.
        service: ServiceRef,
        /// The conditions to own.
        conditions: Vec<Condition>,
    },
    /// Delete an object we own, if it still has this uid.
    Delete {
        /// Its kind.
        kind: Kind,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Its uid (a precondition: never delete a newer object).
        uid: Option<String>,
    },
}

/// The kinds the controller writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `multicluster.x-k8s.io` ServiceImport.
    ServiceImport,
    /// ServiceImport status.
    ServiceImportStatus,
    /// A derived Service.
    Service,
    /// An MCS EndpointSlice.
    EndpointSlice,
    /// ServiceExport status.
    ServiceExportStatus,
}

impl Kind {
    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ServiceImport => "serviceimport",
            Self::ServiceImportStatus => "serviceimport_status",
            Self::Service => "service",
            Self::EndpointSlice => "endpointslice",
            Self::ServiceExportStatus => "serviceexport_status",
        }
    }
}

impl Write {
    /// The kind written.
    pub fn kind(&self) -> Kind {
        match self {
            Self::Import(_) => Kind::ServiceImport,
            Self::ImportStatus(_) => Kind::ServiceImportStatus,
            Self::DerivedService(_) => Kind::Service,
            Self::Slice(_) => Kind::EndpointSlice,
            Self::ExportStatus { .. } => Kind::ServiceExportStatus,
            Self::Delete { kind, .. } => *kind,
        }
    }
}

/// The outcome of planning one service.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Plan {
    /// The writes, in the order to issue them (an import before what it
    /// owns).
    pub writes: Vec<Write>,
    /// The merge, when some cluster exports the service.
    pub merged: Option<Merged>,
    /// Untrusted peer input dropped, as (peer, why) pairs.
    pub rejected: Vec<(String, &'static str)>,
    /// The service was left alone because it names a peer we cannot read.
    pub deferred: bool,
    /// The `Valid` reason of this cluster's own export, if it has one.
    pub export_reason: Option<&'static str>,
    /// Every usable cluster's valid export (what was merged).
    pub exports: Vec<ExportedService>,
}

/// Plans the writes for `service`.
pub fn plan(inputs: &Inputs<'_>, service: &ServiceRef) -> Plan {
    let mut plan = Plan::default();
    if inputs.deny.denies(&service.namespace) {
        return plan;
    }
    let observed_import = inputs
        .local_only
        .imports
        .get(&service.namespace, &service.name);
    if let Some(import) = observed_import
        && names_unknown_peer(import, inputs.unknown_peers)
    {
        plan.deferred = true;
        return plan;
    }

    // Every usable cluster's valid export, this one's first.
    let local_export = inputs.local.exports.get(&service.namespace, &service.name);
    let local_service = inputs.local.services.get(&service.namespace, &service.name);
    let local_projection =
        local_export.map(|export| project(inputs.local_id, export, local_service.map(|s| &**s)));
    let mut exports: Vec<ExportedService> = Vec::new();
    if let Some(Ok(exported)) = &local_projection {
        exports.push(exported.clone());
    }
    for peer in inputs.peers.iter().filter(|peer| peer.usable) {
        let Some(export) = peer.data.exports.get(&service.namespace, &service.name) else {
            continue;
        };
        let peer_service = peer.data.services.get(&service.namespace, &service.name);
        if let Ok(exported) = project(peer.id, export, peer_service.map(|s| &**s)) {
            exports.push(exported);
        }
    }
    let merged = merge(&exports);

    let namespace_exists = inputs.local_only.namespaces.contains(&service.namespace);
    let derived_name = derived_service_name(&service.namespace, &service.name);
    let observed_derived = inputs.local.services.get(&service.namespace, &derived_name);
    let observed_slices: BTreeMap<&str, &Arc<EndpointSlice>> = inputs
        .local
        .mcs_slices
        .of(service)
        .filter(|slice| is_ours(&***slice))
        .map(|slice| (slice.metadata.name.as_deref().unwrap_or_default(), slice))
        .collect();

    let mut desired_slices: BTreeMap<String, EndpointSlice> = BTreeMap::new();
    let mut mirrored = true;
    let mut creating_import = false;
    let mut keep_import = false;
    let mut keep_derived = false;

    if let Some(merged) = merged.as_ref().filter(|_| namespace_exists) {
        keep_import = true;
        let families: Vec<String> = merged
            .spec
            .ip_families
            .iter()
            .filter(|family| inputs.local_only.ip_families.contains(family))
            .cloned()
            .collect();
        let families_supported = !families.is_empty() || merged.spec.ip_families.is_empty();
        let clusterset_ip = merged.spec.type_ == ServiceImportType::ClusterSetIp;

        // The derived Service: ours, absent, or a user's that we never touch.
        let derived_ours = observed_derived.filter(|svc| is_ours(&***svc));
        let name_taken = observed_derived.is_some() && derived_ours.is_none();
        let want_derived = clusterset_ip && families_supported && !name_taken;
        let ips: Vec<String> = match derived_ours {
            Some(derived) if want_derived => derived
                .spec
                .as_ref()
                .and_then(|spec| spec.cluster_ips.clone())
                .unwrap_or_default()
                .into_iter()
                .filter(|ip| ip != "None")
                .collect(),
            _ => Vec::new(),
        };

        let readiness = if !families_supported {
            ImportReadiness::IpFamilyNotSupported
        } else if name_taken {
            ImportReadiness::NameTaken(format!(
                "Service {}/{derived_name} exists and is not managed by clusterset-dns; it is left untouched, so this import has no clusterset IP",
                service.namespace
            ))
        } else if clusterset_ip && ips.is_empty() {
            ImportReadiness::Pending("Waiting for the derived Service to be created".into())
        } else {
            ImportReadiness::Ready
        };

        let mut spec = merged.spec.clone();
        spec.ip_families = if families_supported {
            families.clone()
        } else {
            merged.spec.ip_families.clone()
        };
        spec.ips = ips;
        let desired_import = import_object(service, merged, spec, clusterset_ip, &derived_name);
        if import_differs(&desired_import, observed_import.map(|i| &**i)) {
            plan.writes
                .push(Write::Import(Box::new(desired_import.clone())));
        }
        creating_import = observed_import.is_none();
        // While our own derived Service is on its way, the status would say
        // "pending" only to be rewritten a round later with the VIP: wait
        // and write it once.
        let awaiting_derived = clusterset_ip && want_derived && desired_import.spec.ips.is_empty();
        let existing_conditions = observed_import
            .and_then(|i| i.status.as_ref())
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let status = ServiceImportStatus {
            clusters: merged
                .clusters
                .iter()
                .map(|cluster| ClusterStatus {
                    cluster: cluster.clone(),
                })
                .collect(),
            conditions: import_ready(existing_conditions, readiness, inputs.now),
            endpoint_slice_objects: Some(EndpointSliceObjects::Present),
        };
        if !awaiting_derived && observed_import.and_then(|i| i.status.as_ref()) != Some(&status) {
            let mut with_status = desired_import.clone();
            with_status.status = Some(status);
            plan.writes.push(Write::ImportStatus(Box::new(with_status)));
        }

        // Owned objects need the import's uid; until the import exists they
        // wait for the next pass (its creation is a watch event).
        let import_uid = observed_import.and_then(|i| i.metadata.uid.clone());
        if let Some(uid) = &import_uid {
            let owner = owner_reference(service, uid);
            if want_derived {
                keep_derived = true;
                let desired = derived_service(service, merged, &families, &derived_name, &owner);
                if derived_differs(&desired, derived_ours.map(|s| &**s)) {
                    plan.writes.push(Write::DerivedService(Box::new(desired)));
                }
            }
            if families_supported {
                let context = SliceContext {
                    service,
                    merged,
                    families: &families,
                    derived_name: &derived_name,
                    owner: &owner,
                };
                for cluster in &merged.clusters {
                    if cluster == inputs.local_id {
                        for source in inputs.local_only.kubernetes_slices.of(service) {
                            if let Some(slice) = context.mirror(inputs.local_id, source) {
                                desired_slices.insert(slice.name_any(), slice);
                            }
                        }
                    } else if let Some(peer) = inputs
                        .peers
                        .iter()
                        .find(|peer| peer.usable && peer.id == cluster)
                    {
                        for source in peer.data.mcs_slices.of(service) {
                            match context.copy(peer.id, source) {
                                Ok(Some(slice)) => {
                                    desired_slices.insert(slice.name_any(), slice);
                                }
                                Ok(None) => {}
                                Err(why) => plan.rejected.push((peer.id.to_owned(), why)),
                            }
                        }
                    }
                }
            }
        } else {
            mirrored = false;
        }
    }

    // Slice writes come before the export's status: the writes of a plan
    // run in order and stop at the first failure, so a status saying
    // "mirrored" is only written once the mirror is.
    for (name, desired) in &desired_slices {
        let observed = observed_slices.get(name.as_str()).map(|s| &***s);
        if slice_differs(desired, observed) {
            plan.writes.push(Write::Slice(Box::new(desired.clone())));
        }
    }

    // This cluster's own export: its status.
    plan.export_reason = local_projection
        .as_ref()
        .map(|projection| match projection {
            Ok(_) => crate::api::well_known::export_reason::VALID,
            Err(invalid) => invalid.reason(),
        });
    // A valid export whose import is being created waits one round for its
    // status: until the import's uid is known no slice can be mirrored, and
    // "pending" would be rewritten at once.
    let export_status_waits = creating_import && matches!(local_projection, Some(Ok(_)));
    if let (Some(export), Some(projection), false) =
        (local_export, &local_projection, export_status_waits)
    {
        let validity = projection.as_ref().map(|_| ());
        let existing = export
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let conditions = export_conditions(
            existing,
            validity,
            merged.as_ref(),
            inputs.local_id,
            mirrored,
            inputs.now,
        );
        if conditions.as_slice() != existing {
            plan.writes.push(Write::ExportStatus {
                service: service.clone(),
                conditions,
            });
        }
    }

    // What we own and no longer want.
    if inputs.deletions_allowed {
        for (name, observed) in &observed_slices {
            if !desired_slices.contains_key(*name) {
                plan.writes.push(delete(Kind::EndpointSlice, &***observed));
            }
        }
        if !keep_derived && let Some(derived) = observed_derived.filter(|s| is_ours(&***s)) {
            plan.writes.push(delete(Kind::Service, &**derived));
        }
        if !keep_import && let Some(import) = observed_import.filter(|i| is_ours(&***i)) {
            plan.writes.push(delete(Kind::ServiceImport, &**import));
        }
    }
    plan.merged = merged;
    plan.exports = exports;
    plan
}

fn delete<K: Resource>(kind: Kind, object: &K) -> Write {
    Write::Delete {
        kind,
        namespace: object.meta().namespace.clone().unwrap_or_default(),
        name: object.meta().name.clone().unwrap_or_default(),
        uid: object.meta().uid.clone(),
    }
}

fn names_unknown_peer(import: &ServiceImport, unknown: &BTreeSet<String>) -> bool {
    !unknown.is_empty()
        && import
            .status
            .as_ref()
            .is_some_and(|status| status.clusters.iter().any(|c| unknown.contains(&c.cluster)))
}

fn our_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(LABEL_APP_MANAGED_BY.to_owned(), MANAGED_BY.to_owned())])
}

fn import_object(
    service: &ServiceRef,
    merged: &Merged,
    spec: ServiceImportSpec,
    clusterset_ip: bool,
    derived_name: &str,
) -> ServiceImport {
    let mut labels = merged.labels.clone();
    labels.extend(our_labels());
    let mut annotations = merged.annotations.clone();
    if clusterset_ip {
        annotations.insert(
            ANNOTATION_DERIVED_SERVICE.to_owned(),
            derived_name.to_owned(),
        );
    }
    ServiceImport {
        metadata: ObjectMeta {
            name: Some(service.name.clone()),
            namespace: Some(service.namespace.clone()),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    }
}

/// Whether the live import's metadata we own or its spec differ. We own the
/// whole object, so labels and annotations compare exactly (an exported
/// label removed at the source must go).
fn import_differs(desired: &ServiceImport, observed: Option<&ServiceImport>) -> bool {
    let Some(observed) = observed else {
        return true;
    };
    observed.spec != desired.spec
        || observed.metadata.labels.clone().unwrap_or_default()
            != desired.metadata.labels.clone().unwrap_or_default()
        || observed.metadata.annotations.clone().unwrap_or_default()
            != desired.metadata.annotations.clone().unwrap_or_default()
}

fn owner_reference(service: &ServiceRef, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: ServiceImport::api_version(&()).into_owned(),
        kind: ServiceImport::kind(&()).into_owned(),
        name: service.name.clone(),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

fn derived_service(
    service: &ServiceRef,
    merged: &Merged,
    families: &[String],
    derived_name: &str,
    owner: &OwnerReference,
) -> Service {
    let mut labels = our_labels();
    labels.insert(LABEL_SERVICE_NAME.to_owned(), service.name.clone());
    let spec = &merged.spec;
    Service {
        metadata: ObjectMeta {
            name: Some(derived_name.to_owned()),
            namespace: Some(service.namespace.clone()),
            labels: Some(labels),
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            ports: Some(
                spec.ports
                    .iter()
                    .map(|port| CoreServicePort {
                        name: port.name.clone(),
                        protocol: port.protocol.clone(),
                        app_protocol: port.app_protocol.clone(),
                        port: port.port,
                        ..CoreServicePort::default()
                    })
                    .collect(),
            ),
            ip_families: Some(families.to_vec()),
            ip_family_policy: Some(
                if families.len() > 1 {
                    "RequireDualStack"
                } else {
                    "SingleStack"
                }
                .into(),
            ),
            session_affinity: spec.session_affinity.clone(),
            session_affinity_config: spec.session_affinity_config.clone(),
            internal_traffic_policy: spec.internal_traffic_policy.clone(),
            traffic_distribution: spec.traffic_distribution.clone(),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// Whether the fields we set on a derived Service differ from the live
/// one's, ignoring what the apiserver fills in (target ports, cluster IPs,
/// defaults of fields we leave unset).
fn derived_differs(desired: &Service, observed: Option<&Service>) -> bool {
    let Some(observed) = observed else {
        return true;
    };
    let (Some(want), Some(have)) = (desired.spec.as_ref(), observed.spec.as_ref()) else {
        return true;
    };
    // (name, protocol, appProtocol, port): what we set of each port.
    type PortKey = (Option<String>, Option<String>, Option<String>, i32);
    let ports = |spec: &ServiceSpec| -> Vec<PortKey> {
        spec.ports
            .iter()
            .flatten()
            .map(|p| {
                (
                    p.name.clone(),
                    Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                    p.app_protocol.clone(),
                    p.port,
                )
            })
            .collect()
    };
    let defaulted =
        |value: &Option<String>, default: &str| value.clone().unwrap_or_else(|| default.to_owned());
    ports(want) != ports(have)
        || want.ip_families != have.ip_families
        || want.ip_family_policy != have.ip_family_policy
        || defaulted(&want.session_affinity, "None") != defaulted(&have.session_affinity, "None")
        || (want.session_affinity_config.is_some()
            && want.session_affinity_config != have.session_affinity_config)
        || defaulted(&want.internal_traffic_policy, "Cluster")
            != defaulted(&have.internal_traffic_policy, "Cluster")
        || want.traffic_distribution != have.traffic_distribution
        || !subset(&desired.metadata.labels, &observed.metadata.labels)
        || !owned_by(observed, desired)
}

fn subset(
    want: &Option<BTreeMap<String, String>>,
    have: &Option<BTreeMap<String, String>>,
) -> bool {
    let have = have.as_ref();
    want.iter()
        .flatten()
        .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
}

fn owned_by<K: Resource>(observed: &K, desired: &K) -> bool {
    let have = observed
        .meta()
        .owner_references
        .as_deref()
        .unwrap_or_default();
    desired
        .meta()
        .owner_references
        .iter()
        .flatten()
        .all(|want| {
            have.iter()
                .any(|h| h.uid == want.uid && h.controller == want.controller)
        })
}

/// What every slice of one service shares.
struct SliceContext<'a> {
    service: &'a ServiceRef,
    merged: &'a Merged,
    families: &'a [String],
    derived_name: &'a str,
    owner: &'a OwnerReference,
}

impl SliceContext<'_> {
    fn family_of(address_type: &str) -> Option<&'static str> {
        match address_type {
            "IPv4" => Some("IPv4"),
            "IPv6" => Some("IPv6"),
            _ => None,
        }
    }

    fn labels(&self, cluster: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (LABEL_SERVICE_NAME.to_owned(), self.service.name.clone()),
            (LABEL_SOURCE_CLUSTER.to_owned(), cluster.to_owned()),
            (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
            (
                LABEL_KUBERNETES_SERVICE_NAME.to_owned(),
                self.derived_name.to_owned(),
            ),
        ])
    }

    fn ports(&self, cluster: &str, ports: &Option<Vec<EndpointPort>>) -> Option<Vec<EndpointPort>> {
        let mut kept: Vec<EndpointPort> = ports
            .iter()
            .flatten()
            .filter(|port| self.merged.keeps_port(cluster, port.name.as_deref()))
            .cloned()
            .collect();
        kept.sort_by(|a, b| a.name.cmp(&b.name).then(a.port.cmp(&b.port)));
        Some(kept)
    }

    fn build(
        &self,
        cluster: &str,
        name: String,
        source_name: String,
        address_type: &str,
        endpoints: Vec<Endpoint>,
        ports: &Option<Vec<EndpointPort>>,
    ) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(self.service.namespace.clone()),
                labels: Some(self.labels(cluster)),
                annotations: Some(BTreeMap::from([(
                    ANNOTATION_SOURCE_SLICE.to_owned(),
                    source_name,
                )])),
                owner_references: Some(vec![self.owner.clone()]),
                ..ObjectMeta::default()
            },
            address_type: address_type.to_owned(),
            endpoints,
            ports: self.ports(cluster, ports),
        }
    }

    /// This cluster's Kubernetes slice of an exported Service as an MCS
    /// slice: endpoints without the references to local objects (peers copy
    /// it verbatim, and there those would name foreign objects).
    fn mirror(&self, local_id: &str, source: &EndpointSlice) -> Option<EndpointSlice> {
        let family = Self::family_of(&source.address_type)?;
        if !self.families.iter().any(|f| f == family) {
            return None;
        }
        let source_name = source.metadata.name.clone()?;
        let endpoints = source
            .endpoints
            .iter()
            .map(|endpoint| Endpoint {
                addresses: endpoint.addresses.clone(),
                conditions: endpoint.conditions.clone(),
                hostname: endpoint.hostname.clone(),
                zone: endpoint.zone.clone(),
                ..Endpoint::default()
            })
            .collect();
        let name = mirrored_slice_name(
            &self.service.namespace,
            &self.service.name,
            local_id,
            &source_name,
        );
        Some(self.build(
            local_id,
            name,
            format!("{}/{source_name}", self.service.namespace),
            family,
            endpoints,
            &source.ports,
        ))
    }

    /// A peer's mirrored slice, checked as untrusted input.
    fn copy(
        &self,
        peer: &str,
        source: &EndpointSlice,
    ) -> Result<Option<EndpointSlice>, &'static str> {
        let labels = source.labels();
        if labels.get(LABEL_SOURCE_CLUSTER).map(String::as_str) != Some(peer)
            || labels.get(LABEL_MANAGED_BY).map(String::as_str) != Some(MANAGED_BY)
        {
            return Err("slice not mirrored by the peer itself");
        }
        let Some(family) = Self::family_of(&source.address_type) else {
            return Err("slice address type is not IPv4 or IPv6");
        };
        if !self.families.iter().any(|f| f == family) {
            return Ok(None);
        }
        if source.endpoints.len() > MAX_SLICE_ENDPOINTS {
            return Err("slice has more endpoints than the API allows");
        }
        let name = source.metadata.name.clone().ok_or("slice has no name")?;
        let mut endpoints = Vec::with_capacity(source.endpoints.len());
        for endpoint in &source.endpoints {
            let valid = !endpoint.addresses.is_empty()
                && endpoint
                    .addresses
                    .iter()
                    .all(|address| routable(address, family));
            if !valid {
                return Err("slice has an address that is not a routable unicast IP");
            }
            endpoints.push(Endpoint {
                addresses: endpoint.addresses.clone(),
                conditions: endpoint.conditions.clone(),
                hostname: endpoint.hostname.clone(),
                zone: endpoint.zone.clone(),
                ..Endpoint::default()
            });
        }
        let source_name = source
            .annotations()
            .get(ANNOTATION_SOURCE_SLICE)
            .cloned()
            .unwrap_or_else(|| format!("{}/{name}", self.service.namespace));
        Ok(Some(self.build(
            peer,
            name,
            source_name,
            family,
            endpoints,
            &source.ports,
        )))
    }
}

/// Whether `address` is an IP of `family` that traffic can be sent to.
fn routable(address: &str, family: &str) -> bool {
    match address.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => {
            family == "IPv4"
                && !(ip.is_loopback()
                    || ip.is_link_local()
                    || ip.is_unspecified()
                    || ip.is_multicast()
                    || ip.is_broadcast())
        }
        Ok(IpAddr::V6(ip)) => {
            family == "IPv6"
                && !(ip.is_loopback()
                    || ip.is_unicast_link_local()
                    || ip.is_unspecified()
                    || ip.is_multicast())
        }
        Err(_) => false,
    }
}

/// Whether a slice's owned fields differ from the live one's.
fn slice_differs(desired: &EndpointSlice, observed: Option<&EndpointSlice>) -> bool {
    let Some(observed) = observed else {
        return true;
    };
    observed.address_type != desired.address_type
        || observed.endpoints != desired.endpoints
        || observed.ports.clone().unwrap_or_default() != desired.ports.clone().unwrap_or_default()
        || !subset(&desired.metadata.labels, &observed.metadata.labels)
        || !subset(
            &desired.metadata.annotations,
            &observed.metadata.annotations,
        )
        || !owned_by(observed, desired)
}

/// The ServiceExport object a status write applies.
pub fn export_status_object(service: &ServiceRef, conditions: Vec<Condition>) -> ServiceExport {
    let mut export = ServiceExport::new(&service.name, Default::default());
    export.metadata.namespace = Some(service.namespace.clone());
    export.status = Some(crate::api::ServiceExportStatus { conditions });
    export
}

#[cfg(test)]
mod tests;
