//! What this cluster should hold for one service, and the writes that get
//! it there: a pure function of what the watches have indexed.
//!
//! For a service `<ns>/<name>`, [`plan`] reads every usable cluster's
//! ServiceExport and Service, merges them ([`super::merge`]), and derives
//! this cluster's ServiceImport, derived Service, MCS EndpointSlices and the
//! status of its own ServiceExport, and what this cluster publishes of its
//! own export for its peers (`published`). It then compares each with the live
//! object, normalised to the fields we own, and returns only the writes that
//! change something: with no input change the plan is empty, so an idle
//! controller writes nothing.
//!
//! Rules that keep the mesh loop-free and safe (docs/controller.md,
//! "What a peer cannot make this cluster do"):
//! - a peer's slice is copied only from the cluster its `source-cluster`
//!   label names, and only if it carries our managed-by label;
//! - peer objects are untrusted: endpoints whose address is not routable
//!   unicast or points back into this cluster (a Service CIDR, a Node;
//!   [`super::addresses`]), slices over the API's endpoint limit and
//!   services in denied namespaces are dropped and counted;
//! - nothing is deleted while [`Inputs::deletions_allowed`] is false (some
//!   peer has not been read since start-up), and a service whose current
//!   import names a cluster we cannot read is left as it is.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};

use super::cluster::{ClusterData, LocalData};
use super::conditions::{ImportReadiness, export_conditions, import_ready};
use super::ip_share::{IpShare, SHARE_EXCEEDED};
use super::merge::{ExportedService, Invalid, Merged, merge, project};
pub(super) use super::namespaces::NamespaceFilter;
use super::namespaces::reason as namespace_reason;
use super::naming::derived_service_name;
pub(super) use super::ownership::Kind;
use super::ownership::{NOT_OURS, claim, owns};
use crate::api::ServiceRef;
use crate::api::locality::Locality;
use crate::api::{
    ClusterStatus, EndpointSliceObjects, PublishedService, ServiceImport, ServiceImportStatus,
    ServiceImportType,
};
use crate::cidr::Cidr;
use crate::label_selector::LabelSelector;

pub(super) use self::explain::explain;
use self::hints::Hints;
pub(super) use self::hints::LocalFirst;
pub(super) use self::objects::export_status_object;
use self::objects::{
    delete, derived_differs, derived_service, import_differs, import_object, owner_reference,
    slice_differs,
};
use self::slices::SliceContext;

/// A peer's export refused for a field the apiserver would refuse in a
/// Service (`crate::api::service_rules`).
pub(super) const INVALID_EXPORT: &str = crate::api::well_known::export_reason::INVALID_EXPORT;

/// A merged spec that breaks a Service rule: never written (a bug guard).
pub(super) const INVALID_MERGE: &str = "InvalidMerge";

/// One peer as the reconciler sees it.
#[derive(Debug)]
pub(super) struct PeerView<'a> {
    /// Its cluster id.
    pub id: &'a str,
    /// The pod ranges its Secret records (`peer add --endpoint-cidr`): when
    /// set, its endpoints outside them are refused.
    pub endpoint_ranges: Option<&'a [Cidr]>,
    /// What its watches indexed.
    pub data: &'a ClusterData,
    /// Whether its data counts: synced and up, or down but within grace.
    /// A peer past its grace period contributes nothing.
    pub usable: bool,
}

/// Everything [`plan`] reads.
#[derive(Debug)]
pub(super) struct Inputs<'a> {
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
    /// In the opt-in mode, the labels a namespace needs to be imported into.
    pub import_selector: Option<&'a LabelSelector>,
    /// How many clusterset IPs one peer alone may make this cluster
    /// allocate, and how many each holds.
    pub ip_share: &'a IpShare,
    /// Whether objects may be deleted (every peer read once, or in grace).
    pub deletions_allowed: bool,
    /// The controller's namespace, where this cluster's publication lives.
    pub publish_namespace: &'a str,
    /// The time written into changed conditions.
    pub now: &'a Time,
    /// Whether this cluster's apiserver accepts node hints
    /// (`PreferSameNode`; [`crate::controller::compat::node_hints`]).
    pub node_hints: bool,
}

/// One write to this cluster's apiserver.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Write {
    /// Server-side apply of a ServiceImport's metadata and spec.
    Import(Box<ServiceImport>),
    /// Server-side apply of a ServiceImport's status.
    ImportStatus(Box<ServiceImport>),
    /// Server-side apply of a derived Service.
    DerivedService(Box<Service>),
    /// Server-side apply of an MCS EndpointSlice.
    Slice(Box<EndpointSlice>),
    /// Server-side apply of what this cluster publishes of one export.
    Published(Box<PublishedService>),
    /// Server-side apply of a published slice.
    PublishedSlice(Box<EndpointSlice>),
    /// Server-side apply of this cluster's ServiceExport conditions.
    ExportStatus {
        /// The export.
        service: ServiceRef,
        /// The conditions to own.
        conditions: Vec<Condition>,
        /// The uid of the export read (the write's precondition).
        uid: Option<String>,
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

impl Write {
    /// The kind written.
    pub(super) fn kind(&self) -> Kind {
        match self {
            Self::Import(_) => Kind::ServiceImport,
            Self::ImportStatus(_) => Kind::ServiceImportStatus,
            Self::DerivedService(_) => Kind::Service,
            Self::Slice(_) => Kind::EndpointSlice,
            Self::ExportStatus { .. } => Kind::ServiceExportStatus,
            Self::Published(_) => Kind::PublishedService,
            Self::PublishedSlice(_) => Kind::PublishedSlice,
            Self::Delete { kind, .. } => *kind,
        }
    }

    /// Whether this write, later in a plan, must wait for `failed`, an
    /// earlier write of the same plan that failed: what the import owns
    /// needs the import, and the export status says "mirrored" only once
    /// the slices are. Nothing else waits: a derived Service the apiserver
    /// refuses must not stop the slices that follow the exporters'
    /// endpoints, nor the status and deletions of the service.
    pub(super) fn waits_for(&self, failed: &Self) -> bool {
        match failed {
            Self::Import(_) => true,
            Self::Slice(_) => matches!(self, Self::ExportStatus { .. }),
            _ => false,
        }
    }
}

/// Peer input dropped as untrusted: a whole slice, or one endpoint of it
/// (the rest of the slice kept). Counted in
/// `clusterset_dns_controller_peer_objects_rejected_total{peer,reason}`,
/// published as a Warning Event on the ServiceImport (its reason the
/// rejection's) and shown by `/explain`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Rejection {
    /// The peer it came from.
    pub peer: String,
    /// A CamelCase reason ([`super::addresses`] for an address).
    pub reason: &'static str,
    /// What was dropped, for a person: `EndpointSlice web-abc` or
    /// `endpoint 10.96.0.1 of EndpointSlice web-abc`.
    pub what: String,
}

/// A write the plan will not make, and why: the object of that name in
/// this cluster is not ours ([`NOT_OURS`]). Counted in
/// `clusterset_dns_controller_refused_total`, published as a Warning Event
/// on the ServiceImport and shown by `/explain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refusal {
    /// The kind not written.
    pub kind: Kind,
    /// The name not written.
    pub name: String,
    /// A CamelCase reason.
    pub reason: &'static str,
}

impl Refusal {
    /// What an operator reads in the Event and `/explain`.
    pub(super) fn message(&self, service: &ServiceRef) -> String {
        format!(
            "{} {}/{} exists and is not managed by clusterset-dns: it is left untouched, and nothing is written over it for {service}",
            self.kind.object_kind(),
            service.namespace,
            self.name,
        )
    }
}

/// The outcome of planning one service.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Plan {
    /// The writes, in the order to issue them (an import before what it
    /// owns).
    pub writes: Vec<Write>,
    /// The merge, when some cluster exports the service.
    pub merged: Option<Merged>,
    /// Untrusted peer input dropped.
    pub rejected: Vec<Rejection>,
    /// Writes not made because an object not ours holds the name.
    pub refused: Vec<Refusal>,
    /// The service was left alone because it names a peer we cannot read.
    pub deferred: bool,
    /// The `Valid` reason of this cluster's own export, if it has one.
    pub export_reason: Option<&'static str>,
    /// Every usable cluster's valid export (what was merged).
    pub exports: Vec<ExportedService>,
    /// For a local-first clusterset IP, what its hints make kube-proxy do.
    pub local_first: Option<LocalFirst>,
}

/// Plans the writes for `service`: its import, derived Service, slices and
/// export status, each by a function of its own, then what we own and no
/// longer want; last, what this cluster publishes of it for its peers.
pub(super) fn plan(inputs: &Inputs<'_>, service: &ServiceRef) -> Plan {
    let mut plan = plan_import(inputs, service);
    plan.writes.extend(plan_publication(inputs, service));
    plan
}

/// The writes of what this cluster publishes of `service` for its peers
/// alone: all a plan writes before the start-up gate opens, since the
/// publication reads no peer (peers of this release wait for it,
/// `run/writer.rs`).
pub(super) fn plan_publication(inputs: &Inputs<'_>, service: &ServiceRef) -> Vec<Write> {
    published::writes(inputs, service)
}

/// The plan of what this cluster imports of `service` (and its export's
/// status).
fn plan_import(inputs: &Inputs<'_>, service: &ServiceRef) -> Plan {
    let mut plan = Plan::default();
    if inputs.deny.denies(&service.namespace) {
        plan.rejected = refused_exports(inputs, service, namespace_reason::NAMESPACE_DENIED);
        return plan;
    }
    let observed = Observed::read(inputs, service);
    if let Some(import) = &observed.import
        && names_unknown_peer(import, inputs.unknown_peers)
    {
        plan.deferred = true;
        return plan;
    }
    // A ServiceImport of this name that is not ours is someone else's to
    // keep: nothing of the service is written (what it would own needs our
    // import as its owner).
    if observed.import.is_some() && observed.import_ours().is_none() {
        plan.refused.push(Refusal {
            kind: Kind::ServiceImport,
            name: service.name.to_string(),
            reason: NOT_OURS,
        });
        return plan;
    }
    let (local_projection, exports) = valid_exports(inputs, service, &mut plan.rejected);
    let mut merged = merge(&exports);
    // Defence in depth: a merge of valid exports is valid (merge/tests.rs),
    // so this refuses only what a bug in the merge would have written.
    if let Some(Err(violation)) = merged.as_ref().map(Merged::check) {
        tracing::error!(%service, %violation, "the merge produced an invalid spec; not written");
        plan.rejected.push(Rejection {
            peer: merged
                .as_ref()
                .map(|m| m.winner().to_owned())
                .unwrap_or_default(),
            reason: INVALID_MERGE,
            what: format!("the merged ServiceImport {service} ({violation})"),
        });
        merged = None;
    }

    let mut kept = Kept::default();
    let mut desired_slices = BTreeMap::new();
    let mut mirrored = true;
    let mut creating_import = false;
    if merged.is_some() && observed.namespace_exists && !observed.namespace_selected {
        plan.rejected = refused_exports(inputs, service, namespace_reason::NAMESPACE_NOT_SELECTED);
    }
    if let Some(merged) = merged
        .as_ref()
        .filter(|_| observed.namespace_exists && observed.namespace_selected)
    {
        let target = Target::new(inputs, merged, &observed);
        // A new clusterset IP that only one peer asks for counts against
        // that peer's share of this cluster's Service CIDR: whenever a
        // derived Service would be created, whatever the import's age (a
        // Headless import flipped to ClusterSetIP asks for one too).
        if observed.derived_ours().is_none()
            && target.want_derived
            && let [only] = merged.clusters.as_slice()
            && only != inputs.local_id
            && !inputs
                .ip_share
                .admit(only, inputs.local_only, || single_peer_vips(inputs))
        {
            plan.rejected.push(Rejection {
                peer: only.clone(),
                reason: SHARE_EXCEEDED,
                what: format!("ServiceExport {service}"),
            });
            return plan;
        }
        if target.name_taken {
            plan.refused.push(Refusal {
                kind: Kind::Service,
                name: observed.derived_name.clone(),
                reason: NOT_OURS,
            });
        }
        let hints = target
            .want_derived
            .then(|| local_first_hints(inputs, service, merged, &target))
            .flatten();
        plan.local_first = hints.as_ref().map(|hints| LocalFirst {
            fallback: target.traffic_fallback.clone(),
            ..hints.summary()
        });
        kept.import = true;
        creating_import = observed.import.is_none();
        plan.writes
            .extend(import_writes(inputs, service, merged, &target, &observed));
        // Owned objects need the import's uid; until the import exists they
        // wait for the next pass (its creation is a watch event).
        match observed
            .import
            .as_ref()
            .and_then(|i| i.metadata.uid.as_deref())
        {
            Some(uid) => {
                let owner = owner_reference(service, uid);
                if target.want_derived {
                    kept.derived = true;
                    plan.writes
                        .extend(derived_write(service, merged, &target, &observed, &owner));
                }
                // A derived name that is not ours names someone else's
                // Service: kube-proxy would put these endpoints behind it.
                if target.families_supported && !target.name_taken {
                    let context = SliceContext {
                        service,
                        merged,
                        families: &target.families,
                        derived_name: &observed.derived_name,
                        owner: &owner,
                        hints: hints.as_ref(),
                    };
                    desired_slices = context.desired(inputs, &mut plan.rejected);
                }
            }
            None => mirrored = false,
        }
    }

    // Slice writes come before the export's status: the writes of a plan
    // run in order and stop at the first failure, so a status saying
    // "mirrored" is only written once the mirror is.
    plan.writes.extend(slice_writes(&desired_slices, &observed));
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
    if !export_status_waits && let Some(projection) = &local_projection {
        let validity = projection.as_ref().map(|_| ());
        plan.writes.extend(export_status_write(
            inputs,
            service,
            validity,
            merged.as_ref(),
            mirrored,
        ));
    }
    if inputs.deletions_allowed {
        plan.writes
            .extend(deletions(&observed, &desired_slices, kept));
    }
    plan.merged = merged;
    plan.exports = exports;
    plan
}

/// The clusterset IPs each peer alone holds here: our derived Services
/// whose service that peer exports and no other cluster does (the
/// [`IpShare`] count). Counted from the Services themselves, so an import
/// whose VIP is not yet in its status counts as soon as the VIP exists.
fn single_peer_vips(inputs: &Inputs<'_>) -> BTreeMap<String, usize> {
    let mut held = BTreeMap::new();
    for service in inputs.local.services.services_with_ours() {
        let here = inputs
            .local
            .exports
            .get(&service.namespace, &service.name)
            .is_some();
        let mut exporters = inputs.peers.iter().filter(|peer| {
            peer.usable
                && peer
                    .data
                    .exports
                    .get(&service.namespace, &service.name)
                    .is_some()
        });
        if let (false, Some(only), None) = (here, exporters.next(), exporters.next()) {
            *held.entry(only.id.to_owned()).or_default() += 1;
        }
    }
    held
}

/// The hints of a clusterset IP in this cluster, from this cluster's
/// endpoints if it exports the service; `None` when the import spreads.
fn local_first_hints(
    inputs: &Inputs<'_>,
    service: &ServiceRef,
    merged: &Merged,
    target: &Target,
) -> Option<Hints> {
    let exported_here = merged.clusters.iter().any(|c| c == inputs.local_id);
    let local: Vec<EndpointSlice> = inputs
        .local_only
        .kubernetes_slices
        .of(service)
        .filter(|_| exported_here)
        .collect();
    Hints::new(
        Locality::of(target.traffic_distribution.as_deref()),
        &inputs.local_only.node_zones,
        local.iter().flat_map(|slice| slice.endpoints.iter()),
    )
}

/// One rejection per usable peer exporting `service`, which is not
/// imported here for `reason`.
fn refused_exports(
    inputs: &Inputs<'_>,
    service: &ServiceRef,
    reason: &'static str,
) -> Vec<Rejection> {
    inputs
        .peers
        .iter()
        .filter(|peer| peer.usable && peer.data.exports.of(service).next().is_some())
        .map(|peer| Rejection {
            peer: peer.id.to_owned(),
            reason,
            what: format!("ServiceExport {service}"),
        })
        .collect()
}

/// What this cluster holds now for one service, as far as we own it.
struct Observed {
    service: ServiceRef,
    import: Option<ServiceImport>,
    derived_name: String,
    derived: Option<Service>,
    slices: BTreeMap<String, EndpointSlice>,
    namespace_exists: bool,
    /// Imports are wanted in the namespace (no selector, or it matches).
    namespace_selected: bool,
}

impl Observed {
    fn read(inputs: &Inputs<'_>, service: &ServiceRef) -> Self {
        let derived_name = derived_service_name(&service.namespace, &service.name);
        Self {
            service: service.clone(),
            import: inputs
                .local_only
                .imports
                .get(&service.namespace, &service.name),
            derived: inputs.local.services.get(&service.namespace, &derived_name),
            derived_name,
            slices: inputs
                .local
                .mcs_slices
                .of(service)
                .filter(|slice| owns(Kind::EndpointSlice, slice, service))
                .map(|slice| (slice.metadata.name.clone().unwrap_or_default(), slice))
                .collect(),
            namespace_exists: inputs.local_only.namespaces.contains(&*service.namespace),
            namespace_selected: inputs.import_selector.is_none_or(|selector| {
                inputs
                    .local_only
                    .namespace_labels
                    .get(&*service.namespace)
                    .is_some_and(|labels| selector.matches(labels))
            }),
        }
    }

    /// The derived Service if it is ours (a user's of that name is never
    /// touched).
    fn derived_ours(&self) -> Option<&Service> {
        self.derived
            .as_ref()
            .filter(|svc| owns(Kind::Service, *svc, &self.service))
    }

    /// The ServiceImport if it is ours.
    fn import_ours(&self) -> Option<&ServiceImport> {
        self.import
            .as_ref()
            .filter(|import| owns(Kind::ServiceImport, *import, &self.service))
    }
}

/// Which of what we own the plan keeps.
#[derive(Debug, Default, Clone, Copy)]
struct Kept {
    import: bool,
    derived: bool,
}

/// What the merge asks of this cluster: the families it can serve, and
/// whether it gets a derived Service.
struct Target {
    families: Vec<String>,
    /// The derived Service's `trafficDistribution`: the merged one, with
    /// `PreferClose` for `PreferSameNode` where the apiserver refuses it.
    traffic_distribution: Option<String>,
    /// Why the merged `trafficDistribution` is not what is written here.
    traffic_fallback: Option<String>,
    families_supported: bool,
    clusterset_ip: bool,
    name_taken: bool,
    want_derived: bool,
}

impl Target {
    fn new(inputs: &Inputs<'_>, merged: &Merged, observed: &Observed) -> Self {
        let families: Vec<String> = merged
            .spec
            .ip_families
            .iter()
            .filter(|family| inputs.local_only.ip_families.contains(family))
            .cloned()
            .collect();
        let families_supported = !families.is_empty() || merged.spec.ip_families.is_empty();
        let clusterset_ip = merged.spec.type_ == ServiceImportType::ClusterSetIp;
        let name_taken = observed.derived.is_some() && observed.derived_ours().is_none();
        let asked = merged.spec.traffic_distribution.clone();
        let refused =
            !inputs.node_hints && Locality::of(asked.as_deref()) == Locality::PreferSameNode;
        Self {
            want_derived: clusterset_ip && families_supported && !name_taken,
            traffic_distribution: if refused {
                Some("PreferClose".into())
            } else {
                asked
            },
            traffic_fallback: refused.then(|| {
                "PreferSameNode asked; this cluster's apiserver refuses it (Kubernetes \
                 before 1.34, or its PreferSameTrafficDistribution feature off): \
                 zone hints instead"
                    .to_owned()
            }),
            families,
            families_supported,
            clusterset_ip,
            name_taken,
        }
    }
}

/// This cluster's export (valid or why not) and every usable cluster's
/// valid export, this one's first: what is merged. A peer's export that
/// breaks a Service rule is refused into `rejected`, never merged; one
/// without its Service is merely not exported yet.
fn valid_exports(
    inputs: &Inputs<'_>,
    service: &ServiceRef,
    rejected: &mut Vec<Rejection>,
) -> (
    Option<Result<ExportedService, Invalid>>,
    Vec<ExportedService>,
) {
    let local_export = inputs.local.exports.get(&service.namespace, &service.name);
    let local_service = inputs.local.services.get(&service.namespace, &service.name);
    let local_projection =
        local_export.map(|export| project(inputs.local_id, &export, local_service.as_ref()));
    let mut exports: Vec<ExportedService> = Vec::new();
    if let Some(Ok(exported)) = &local_projection {
        exports.push(exported.clone());
    }
    for peer in inputs.peers.iter().filter(|peer| peer.usable) {
        let Some(export) = peer.data.exports.get(&service.namespace, &service.name) else {
            continue;
        };
        let peer_service = peer.data.services.get(&service.namespace, &service.name);
        match project(peer.id, &export, peer_service.as_ref()) {
            Ok(exported) => exports.push(exported),
            Err(Invalid::Field(violation)) => rejected.push(Rejection {
                peer: peer.id.to_owned(),
                reason: INVALID_EXPORT,
                what: format!("ServiceExport {service} ({violation})"),
            }),
            Err(Invalid::NoService | Invalid::ExternalName) => {}
        }
    }
    (local_projection, exports)
}

/// The ServiceImport and its status.
fn import_writes(
    inputs: &Inputs<'_>,
    service: &ServiceRef,
    merged: &Merged,
    target: &Target,
    observed: &Observed,
) -> Vec<Write> {
    let mut writes = Vec::new();
    let ips: Vec<String> = match observed.derived_ours() {
        Some(derived) if target.want_derived => derived
            .spec
            .as_ref()
            .and_then(|spec| spec.cluster_ips.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|ip| ip != "None")
            .collect(),
        _ => Vec::new(),
    };
    let readiness = if !target.families_supported {
        ImportReadiness::IpFamilyNotSupported
    } else if target.name_taken {
        ImportReadiness::NameTaken(format!(
            "Service {}/{} exists and is not managed by clusterset-dns; it is left untouched, so this import has no clusterset IP",
            service.namespace, observed.derived_name
        ))
    } else if target.clusterset_ip && ips.is_empty() {
        ImportReadiness::Pending("Waiting for the derived Service to be created".into())
    } else {
        ImportReadiness::Ready
    };

    let mut spec = merged.spec.clone();
    if target.families_supported {
        spec.ip_families = target.families.clone();
    }
    spec.ips = ips;
    let mut desired = import_object(
        service,
        merged,
        spec,
        target.clusterset_ip,
        &observed.derived_name,
    );
    let live = observed.import_ours();
    claim(&mut desired, live);
    if import_differs(&desired, live) {
        writes.push(Write::Import(Box::new(desired.clone())));
    }
    // While our own derived Service is on its way, the status would say
    // "pending" only to be rewritten a round later with the VIP: wait and
    // write it once.
    let awaiting_derived =
        target.clusterset_ip && target.want_derived && desired.spec.ips.is_empty();
    let live_status = live.and_then(|i| i.status.as_ref());
    let existing_conditions = live_status
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
    if !awaiting_derived && live_status != Some(&status) {
        let mut with_status = desired;
        with_status.status = Some(status);
        writes.push(Write::ImportStatus(Box::new(with_status)));
    }
    writes
}

/// The derived Service (the clusterset IP kube-proxy programs), when ours
/// differs from what the merge asks.
fn derived_write(
    service: &ServiceRef,
    merged: &Merged,
    target: &Target,
    observed: &Observed,
    owner: &OwnerReference,
) -> Option<Write> {
    let mut desired = derived_service(
        service,
        merged,
        target.traffic_distribution.as_deref(),
        &target.families,
        &observed.derived_name,
        owner,
    );
    claim(&mut desired, observed.derived_ours());
    derived_differs(&desired, observed.derived_ours())
        .then(|| Write::DerivedService(Box::new(desired)))
}

/// The slices that differ from the live ones.
fn slice_writes(desired: &BTreeMap<String, EndpointSlice>, observed: &Observed) -> Vec<Write> {
    desired
        .iter()
        .filter_map(|(name, slice)| {
            let live = observed.slices.get(name);
            slice_differs(slice, live).then(|| {
                let mut slice = slice.clone();
                claim(&mut slice, live);
                Write::Slice(Box::new(slice))
            })
        })
        .collect()
}

/// This cluster's own export: its status conditions, when they change.
fn export_status_write(
    inputs: &Inputs<'_>,
    service: &ServiceRef,
    validity: Result<(), &Invalid>,
    merged: Option<&Merged>,
    mirrored: bool,
) -> Option<Write> {
    let export = inputs
        .local
        .exports
        .get(&service.namespace, &service.name)?;
    let existing = export
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let conditions = export_conditions(
        existing,
        validity,
        merged,
        inputs.local_id,
        mirrored,
        inputs.now,
    );
    (conditions.as_slice() != existing).then(|| Write::ExportStatus {
        service: service.clone(),
        conditions,
        uid: export.metadata.uid.clone(),
    })
}

/// What we own and no longer want.
fn deletions(
    observed: &Observed,
    desired_slices: &BTreeMap<String, EndpointSlice>,
    kept: Kept,
) -> Vec<Write> {
    let mut writes: Vec<Write> = observed
        .slices
        .iter()
        .filter(|(name, _)| !desired_slices.contains_key(*name))
        .map(|(_, slice)| delete(Kind::EndpointSlice, slice))
        .collect();
    if !kept.derived
        && let Some(derived) = observed.derived_ours()
    {
        writes.push(delete(Kind::Service, derived));
    }
    if !kept.import
        && let Some(import) = observed.import_ours()
    {
        writes.push(delete(Kind::ServiceImport, import));
    }
    writes
}

fn names_unknown_peer(import: &ServiceImport, unknown: &BTreeSet<String>) -> bool {
    !unknown.is_empty()
        && import
            .status
            .as_ref()
            .is_some_and(|status| status.clusters.iter().any(|c| unknown.contains(&c.cluster)))
}

mod explain;
mod hints;
mod objects;
mod published;
mod slices;

#[cfg(test)]
mod tests;
