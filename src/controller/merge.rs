//! The exports of one service, from every cluster, merged into the
//! ServiceImport spec and the conflicts between them (KEP-1645
//! "Constraints and Conflict Resolution"; docs/controller.md, "Behaviour").
//!
//! Owns the projection of a ServiceExport + Service into an
//! [`ExportedService`] and the [`merge`] itself. Every cluster runs this on
//! the same records without a shared store, so the result — spec, cluster
//! lists and conflict messages alike — is a deterministic function of the
//! *set* of records: they are put in priority order (oldest export first,
//! then cluster id) before anything else looks at them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::{ClientIPConfig, Service, SessionAffinityConfig};
use k8s_openapi::jiff::Timestamp;

use crate::api::limits::Violation;
use crate::api::service_rules::{self, MAX_PORTS};
use crate::api::well_known::export_reason;
use crate::api::{ServiceExport, ServiceImportSpec, ServiceImportType, ServicePort};

/// Default `sessionAffinityConfig.clientIP.timeoutSeconds` (3 hours), filled
/// in so an unset and an explicit default compare equal.
const DEFAULT_CLIENT_IP_TIMEOUT_SECS: i32 = 10800;

/// Longest rendering of one value in a conflict message; label and
/// annotation maps can be large, and the message only has to point the
/// reader at the field.
const MAX_VALUE_CHARS: usize = 200;

/// What one cluster's valid export contributes to the merge: the fields of
/// the ServiceExport and its Service that the ServiceImport carries,
/// normalised so that equivalent spellings compare equal.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ExportedService {
    /// Id of the exporting cluster.
    pub cluster: String,
    /// The ServiceExport's `creationTimestamp`: the conflict precedence.
    pub created: Timestamp,
    /// Whether the Service is headless (`clusterIP: None`).
    pub headless: bool,
    /// The Service's ports; protocol defaulted to TCP, an empty name as none.
    pub ports: Vec<ServicePort>,
    /// `"None"` (the default) or `"ClientIP"`.
    pub session_affinity: String,
    /// Set only with `ClientIP` affinity, with the timeout defaulted.
    pub session_affinity_config: Option<SessionAffinityConfig>,
    /// `"Cluster"` (also when unset) or `"Local"`.
    pub internal_traffic_policy: String,
    /// `PreferSameZone` is normalised to its older alias `PreferClose`.
    pub traffic_distribution: Option<String>,
    /// `"IPv4"`/`"IPv6"` in the Service's order.
    pub ip_families: Vec<String>,
    /// The ServiceExport's `spec.exportedLabels`.
    pub labels: BTreeMap<String, String>,
    /// The ServiceExport's `spec.exportedAnnotations`.
    pub annotations: BTreeMap<String, String>,
}

/// Why a ServiceExport is not valid (its `Valid=False` condition).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Invalid {
    /// No Service of the export's name exists.
    NoService,
    /// The Service is of type ExternalName, which cannot be exported.
    ExternalName,
    /// A field breaks a rule the apiserver holds a Service to
    /// ([`service_rules`]): merged, it would make the import's writes fail
    /// in every member.
    Field(Violation),
}

impl Invalid {
    /// The `Valid=False` condition reason.
    pub(super) fn reason(&self) -> &'static str {
        match self {
            Self::NoService => export_reason::NO_SERVICE,
            Self::ExternalName => export_reason::INVALID_SERVICE_TYPE,
            Self::Field(_) => export_reason::INVALID_EXPORT,
        }
    }

    /// The `Valid=False` condition message (Cilium's wording for the first
    /// two).
    pub(super) fn message(&self) -> String {
        match self {
            Self::NoService => "Service doesn't exist".into(),
            Self::ExternalName => "Service type ExternalName is not supported".into(),
            Self::Field(violation) => format!("Service {violation}"),
        }
    }
}

/// Projects `cluster`'s export and its Service (if any) into the record the
/// merge compares. NodePort and LoadBalancer Services export as
/// ClusterSetIP, like ClusterIP; ExternalName is invalid.
///
/// An export without a `creationTimestamp` (never the case for objects read
/// from an apiserver) counts as the newest possible, so it cannot displace
/// a real oldest export.
///
/// Every field is then held to the apiserver's Service rules
/// ([`ExportedService::check`]): a peer's export is input from outside,
/// and one bad field merged into a shared service would freeze its writes
/// in every member.
pub(super) fn project(
    cluster: &str,
    export: &ServiceExport,
    service: Option<&Service>,
) -> Result<ExportedService, Invalid> {
    let service = service.ok_or(Invalid::NoService)?;
    let spec = service.spec.clone().unwrap_or_default();
    if spec.type_.as_deref() == Some("ExternalName") {
        return Err(Invalid::ExternalName);
    }
    service_rules::service_type(spec.type_.as_deref()).map_err(Invalid::Field)?;

    let ports = spec
        .ports
        .unwrap_or_default()
        .into_iter()
        .map(|p| ServicePort {
            name: p.name.filter(|n| !n.is_empty()),
            protocol: Some(p.protocol.unwrap_or_else(|| "TCP".into())),
            app_protocol: p.app_protocol,
            port: p.port,
        })
        .collect();

    let session_affinity = spec.session_affinity.unwrap_or_else(|| "None".into());
    let session_affinity_config = (session_affinity == "ClientIP").then(|| {
        let timeout = spec
            .session_affinity_config
            .and_then(|c| c.client_ip)
            .and_then(|c| c.timeout_seconds)
            .unwrap_or(DEFAULT_CLIENT_IP_TIMEOUT_SECS);
        SessionAffinityConfig {
            client_ip: Some(ClientIPConfig {
                timeout_seconds: Some(timeout),
            }),
        }
    });

    let traffic_distribution = spec.traffic_distribution.map(|td| {
        if td == "PreferSameZone" {
            "PreferClose".into()
        } else {
            td
        }
    });

    let exported = ExportedService {
        cluster: cluster.to_owned(),
        created: export
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(Timestamp::MAX, |t| t.0),
        headless: spec.cluster_ip.as_deref() == Some("None"),
        ports,
        session_affinity,
        session_affinity_config,
        internal_traffic_policy: spec
            .internal_traffic_policy
            .unwrap_or_else(|| "Cluster".into()),
        traffic_distribution,
        ip_families: spec.ip_families.unwrap_or_default(),
        labels: export.spec.exported_labels.clone(),
        annotations: export.spec.exported_annotations.clone(),
    };
    exported.check().map_err(Invalid::Field)?;
    Ok(exported)
}

impl ExportedService {
    /// Whether every field keeps to the apiserver's Service rules and ours
    /// ([`service_rules`]): the first field that does not, if any.
    pub(super) fn check(&self) -> Result<(), Violation> {
        service_rules::fields(&service_rules::Fields {
            ports: &self.ports,
            session_affinity: &self.session_affinity,
            affinity_timeout: timeout_of(self.session_affinity_config.as_ref()),
            internal_traffic_policy: &self.internal_traffic_policy,
            traffic_distribution: self.traffic_distribution.as_deref(),
            ip_families: &self.ip_families,
            labels: &self.labels,
            annotations: &self.annotations,
        })
    }
}

/// A raised conflict: the `Conflict=True` reason (comma-joined) and message
/// (one line per reason), identical on every cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Conflict {
    /// Comma-joined conflict reasons in the mcs-api constant order.
    pub reason: String,
    /// One line per reason, `\n`-joined.
    pub message: String,
}

/// The merge of every exporter of one service.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Merged {
    /// The ServiceImport spec; `ips` is left empty for the derived-Service
    /// reconciler to fill.
    pub spec: ServiceImportSpec,
    /// The oldest export's `exportedLabels`, for the ServiceImport metadata.
    pub labels: BTreeMap<String, String>,
    /// The oldest export's `exportedAnnotations`.
    pub annotations: BTreeMap<String, String>,
    /// Exporters whose endpoints are imported, in priority order
    /// (`status.clusters`).
    pub clusters: Vec<String>,
    /// Type-conflict losers in priority order: they contribute no endpoints.
    pub excluded: Vec<String>,
    /// `None` when every exporter agrees.
    pub conflict: Option<Conflict>,
    /// The oldest exporter, whose values win every conflict.
    winner: String,
    /// Each included exporter's own ports, for [`Merged::keeps_port`].
    cluster_ports: BTreeMap<String, Vec<ServicePort>>,
}

impl Merged {
    /// Whether `cluster`'s imported slices keep the port named `name`: the
    /// cluster is included and its Service's port of that name has the same
    /// (protocol, port) as the merged port of that name. Otherwise traffic
    /// for that port could reach a cluster that serves something else on it
    /// (KEP StrictPortConflict).
    pub(super) fn keeps_port(&self, cluster: &str, name: Option<&str>) -> bool {
        let name = name.filter(|n| !n.is_empty());
        let by_name = |ports: &[ServicePort]| {
            ports
                .iter()
                .find(|p| p.name.as_deref() == name)
                .map(|p| (p.protocol.clone(), p.port))
        };
        match (self.cluster_ports.get(cluster), by_name(&self.spec.ports)) {
            (Some(own), Some(merged)) => by_name(own) == Some(merged),
            _ => false,
        }
    }

    /// The oldest exporter (cluster id breaking ties), whose values win.
    pub(super) fn winner(&self) -> &str {
        &self.winner
    }

    /// Whether the merged spec keeps to the Service rules, checked before
    /// anything is written: a merge of valid exports always does (the
    /// property test in `merge/tests.rs`), so a failure here is a bug in
    /// the merge, refused rather than written.
    pub(super) fn check(&self) -> Result<(), Violation> {
        let spec = &self.spec;
        service_rules::fields(&service_rules::Fields {
            ports: &spec.ports,
            session_affinity: spec.session_affinity.as_deref().unwrap_or("None"),
            affinity_timeout: timeout_of(spec.session_affinity_config.as_ref()),
            internal_traffic_policy: spec.internal_traffic_policy.as_deref().unwrap_or("Cluster"),
            traffic_distribution: spec.traffic_distribution.as_deref(),
            ip_families: &spec.ip_families,
            labels: &self.labels,
            annotations: &self.annotations,
        })
    }
}

/// Who decided one field of a merged import, for `/explain`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub(super) struct FieldDecision {
    /// The field, as the ServiceImport (or Service) spells it.
    pub field: &'static str,
    /// The value imported, rendered as in conflict messages.
    pub value: String,
    /// The clusters whose value it is.
    pub from: Vec<String>,
    /// The exporters whose own value differs (and lost).
    pub overruled: Vec<String>,
}

/// Each field of `merged` with the exporters that gave and that lost it:
/// the type against every exporter; every other field against the
/// exporters of the winning type (the others take no part); each port
/// against the exporters that have a port of that name.
pub(super) fn field_decisions(exports: &[ExportedService], merged: &Merged) -> Vec<FieldDecision> {
    let Some(winner) = exports.iter().find(|e| e.cluster == merged.winner) else {
        return Vec::new();
    };
    // Priority order, as in `status.clusters`.
    let mut all: Vec<&ExportedService> = exports.iter().collect();
    all.sort_by(|a, b| (a.created, &a.cluster).cmp(&(b.created, &b.cluster)));
    let included: Vec<&ExportedService> = all
        .iter()
        .copied()
        .filter(|e| merged.clusters.contains(&e.cluster))
        .collect();
    let type_of = |e: &ExportedService| {
        if e.headless {
            "Headless"
        } else {
            "ClusterSetIP"
        }
    };
    let mut decisions = vec![decision("type", type_of(winner).to_owned(), &all, |e| {
        type_of(e) == type_of(winner)
    })];
    decisions.extend(AGREED_FIELDS.iter().map(|field| {
        decision(field.name, (field.render)(winner), &included, |e| {
            !(field.differ)(e, winner)
        })
    }));
    // IP families are an intersection, not a pick: every exporter that has
    // them all gave them.
    let families = &merged.spec.ip_families;
    decisions.push(decision("ipFamilies", families.join(","), &included, |e| {
        &e.ip_families == families
    }));
    for port in &merged.spec.ports {
        let name = port.name.as_deref();
        let (mut from, mut overruled) = (Vec::new(), Vec::new());
        for exporter in &included {
            if merged.keeps_port(&exporter.cluster, name) {
                from.push(exporter.cluster.clone());
            } else if exporter.ports.iter().any(|p| p.name.as_deref() == name) {
                overruled.push(exporter.cluster.clone());
            }
        }
        decisions.push(FieldDecision {
            field: "ports",
            value: render_ports(std::slice::from_ref(port)),
            from,
            overruled,
        });
    }
    decisions
}

/// `field`'s decision: `value`, given by the exporters `among` that `gave`
/// it, overruled for the others.
fn decision(
    field: &'static str,
    value: String,
    among: &[&ExportedService],
    gave: impl Fn(&ExportedService) -> bool,
) -> FieldDecision {
    let (from, overruled): (Vec<&&ExportedService>, Vec<&&ExportedService>) =
        among.iter().partition(|e| gave(e));
    FieldDecision {
        field,
        value,
        from: from.iter().map(|e| e.cluster.clone()).collect(),
        overruled: overruled.iter().map(|e| e.cluster.clone()).collect(),
    }
}

/// A field on which every included exporter should agree, the oldest
/// export's value winning: one row of the table that both the merge's
/// conflicts and `/explain`'s [`field_decisions`] read.
struct AgreedField {
    /// The field, as the ServiceImport (or Service) spells it.
    name: &'static str,
    /// The `Conflict` reason a disagreement raises.
    reason: &'static str,
    /// The value, as conflict messages and `/explain` render it.
    render: fn(&ExportedService) -> String,
    /// Whether two exporters disagree on it.
    differ: fn(&ExportedService, &ExportedService) -> bool,
}

/// The fields every exporter of the winning type should agree on, in the
/// order their conflict reasons are joined (the mcs-api constant order).
const AGREED_FIELDS: [AgreedField; 6] = [
    AgreedField {
        name: "sessionAffinity",
        reason: export_reason::SESSION_AFFINITY_CONFLICT,
        render: |e| e.session_affinity.clone(),
        differ: |a, b| a.session_affinity != b.session_affinity,
    },
    AgreedField {
        name: "sessionAffinityConfig",
        reason: export_reason::SESSION_AFFINITY_CONFIG_CONFLICT,
        render: |e| render_affinity_config(e.session_affinity_config.as_ref()),
        differ: |a, b| a.session_affinity_config != b.session_affinity_config,
    },
    AgreedField {
        name: "exportedLabels",
        reason: export_reason::LABELS_CONFLICT,
        render: |e| render_map(&e.labels),
        differ: |a, b| a.labels != b.labels,
    },
    AgreedField {
        name: "exportedAnnotations",
        reason: export_reason::ANNOTATIONS_CONFLICT,
        render: |e| render_map(&e.annotations),
        differ: |a, b| a.annotations != b.annotations,
    },
    AgreedField {
        name: "internalTrafficPolicy",
        reason: export_reason::INTERNAL_TRAFFIC_POLICY_CONFLICT,
        render: |e| e.internal_traffic_policy.clone(),
        differ: |a, b| a.internal_traffic_policy != b.internal_traffic_policy,
    },
    AgreedField {
        name: "trafficDistribution",
        reason: export_reason::TRAFFIC_DISTRIBUTION_CONFLICT,
        render: |e| e.traffic_distribution.clone().unwrap_or_else(none),
        differ: |a, b| a.traffic_distribution != b.traffic_distribution,
    },
];

/// Merges the exports of one service, one record per cluster; `None` when
/// there are none. The input order does not matter.
///
/// The oldest export decides the type; exporters of the other type are
/// excluded and take no part in the other comparisons. Ports are the union,
/// oldest first, dropping later ports whose name or (protocol, port) is
/// taken. Every other field is the oldest's. IP families are the
/// intersection in the oldest's order. Every disagreement raises its reason.
pub(super) fn merge(exports: &[ExportedService]) -> Option<Merged> {
    let mut all: Vec<&ExportedService> = exports.iter().collect();
    all.sort_by(|a, b| (a.created, &a.cluster).cmp(&(b.created, &b.cluster)));
    let winner = *all.first()?;

    let (included, excluded): (Vec<_>, Vec<_>) = all
        .iter()
        .copied()
        .partition(|e| e.headless == winner.headless);
    let type_ = if winner.headless {
        ServiceImportType::Headless
    } else {
        ServiceImportType::ClusterSetIp
    };

    let mut lines = Vec::new();

    let (ports, differ) = merge_ports(&included);
    if differ > 0 {
        lines.push((
            export_reason::PORT_CONFLICT,
            format!(
                "Conflicting ports. {differ}/{} clusters disagree. Using \"{}\", the union with the oldest service export in cluster \"{}\" winning clashes.",
                included.len(),
                clip(render_ports(&ports)),
                winner.cluster
            ),
        ));
    }

    if !excluded.is_empty() {
        lines.push((
            export_reason::TYPE_CONFLICT,
            kep_line("type", excluded.len(), all.len(), type_.as_str(), winner),
        ));
    }

    for field in AGREED_FIELDS {
        let n = included
            .iter()
            .filter(|e| (field.differ)(e, winner))
            .count();
        if n > 0 {
            let value = (field.render)(winner);
            lines.push((
                field.reason,
                kep_line(field.name, n, included.len(), &value, winner),
            ));
        }
    }

    let (ip_families, families_line) = merge_ip_families(&included);
    if let Some(line) = families_line {
        lines.push((export_reason::IP_FAMILY_CONFLICT, line));
    }

    let conflict = (!lines.is_empty()).then(|| Conflict {
        reason: lines.iter().map(|(r, _)| *r).collect::<Vec<_>>().join(","),
        message: lines
            .iter()
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    });

    Some(Merged {
        spec: ServiceImportSpec {
            ports,
            ips: Vec::new(),
            type_,
            session_affinity: Some(winner.session_affinity.clone()),
            session_affinity_config: winner.session_affinity_config.clone(),
            ip_families,
            internal_traffic_policy: Some(winner.internal_traffic_policy.clone()),
            traffic_distribution: winner.traffic_distribution.clone(),
        },
        labels: winner.labels.clone(),
        annotations: winner.annotations.clone(),
        clusters: included.iter().map(|e| e.cluster.clone()).collect(),
        excluded: excluded.iter().map(|e| e.cluster.clone()).collect(),
        conflict,
        winner: winner.cluster.clone(),
        cluster_ports: included
            .iter()
            .map(|e| (e.cluster.clone(), e.ports.clone()))
            .collect(),
    })
}

/// The union of the included exporters' ports in priority order, sorted by
/// (name, protocol, port) so every cluster writes the same list, and how
/// many exporters' own port sets differ from it.
///
/// A later port whose name, or whose (protocol, port), is already taken is
/// dropped: the KEP merges by name first, then by protocol and number, and
/// the oldest wins clashes. So is a later port that would leave an unnamed
/// port beside others (a Service with more than one port names them all:
/// one exporter's unnamed `TCP/80` and another's `metrics TCP/9090` are a
/// port conflict, not a union), and any port past [`MAX_PORTS`]. Sets are
/// compared on every field, appProtocol included (Cilium PR #43414).
fn merge_ports(included: &[&ExportedService]) -> (Vec<ServicePort>, usize) {
    let mut ports: Vec<ServicePort> = Vec::new();
    for port in included.iter().flat_map(|e| e.ports.iter()) {
        let clash = ports
            .iter()
            .any(|p| p.name == port.name || (p.protocol == port.protocol && p.port == port.port));
        let leaves_unnamed =
            !ports.is_empty() && (port.name.is_none() || ports.iter().any(|p| p.name.is_none()));
        if !clash && !leaves_unnamed && ports.len() < MAX_PORTS {
            ports.push(port.clone());
        }
    }
    ports.sort_by(|a, b| (&a.name, &a.protocol, a.port).cmp(&(&b.name, &b.protocol, b.port)));
    let merged = port_set(&ports);
    let differ = included
        .iter()
        .filter(|e| port_set(&e.ports) != merged)
        .count();
    (ports, differ)
}

/// The intersection of the included exporters' IP families in the oldest's
/// order, and the `IPFamilyConflict` line if any two exporters' family sets
/// differ. With no family in common the oldest's families are used, so the
/// import still reaches the oldest's backends.
///
/// Exporters with no families at all (a Service read before the apiserver
/// defaulted it) carry no information and are left out, as Cilium does.
fn merge_ip_families(included: &[&ExportedService]) -> (Vec<String>, Option<String>) {
    let with: Vec<&ExportedService> = included
        .iter()
        .copied()
        .filter(|e| !e.ip_families.is_empty())
        .collect();
    let Some(reference) = with.first() else {
        return (Vec::new(), None);
    };
    fn set(e: &ExportedService) -> BTreeSet<&String> {
        e.ip_families.iter().collect()
    }
    let common: Vec<String> = reference
        .ip_families
        .iter()
        .filter(|f| with.iter().all(|e| e.ip_families.contains(f)))
        .cloned()
        .collect();
    let differ = with.iter().filter(|e| set(e) != set(reference)).count();
    if differ == 0 {
        return (common, None);
    }
    // `reference` is the winner unless the winner has no families.
    let (n, m, id) = (differ, with.len(), &reference.cluster);
    if common.is_empty() {
        let families = reference.ip_families.clone();
        let line = format!(
            "Conflicting ipFamilies. {n}/{m} clusters disagree. No family is common to all; using \"{}\" from oldest service export in cluster \"{id}\".",
            families.join(",")
        );
        return (families, Some(line));
    }
    let line = format!(
        "Conflicting ipFamilies. {n}/{m} clusters disagree. Using \"{}\", the families common to all, in the order of the oldest service export in cluster \"{id}\".",
        common.join(",")
    );
    (common, Some(line))
}

/// The KEP-style message line of a global-field conflict.
fn kep_line(field: &str, n: usize, m: usize, value: &str, winner: &ExportedService) -> String {
    format!(
        "Conflicting {field}. {n}/{m} clusters disagree. Using \"{}\" from oldest service export in cluster \"{}\".",
        clip(value.to_owned()),
        winner.cluster
    )
}

/// The rendering of an unset value in messages.
fn none() -> String {
    "<none>".into()
}

/// Every field of a port (name, protocol, port, appProtocol), borrowed.
type PortKey<'a> = (
    &'a Option<String>,
    &'a Option<String>,
    i32,
    &'a Option<String>,
);

/// Ports as an order-insensitive set of every field, for exact comparison.
fn port_set(ports: &[ServicePort]) -> BTreeSet<PortKey<'_>> {
    ports
        .iter()
        .map(|p| (&p.name, &p.protocol, p.port, &p.app_protocol))
        .collect()
}

/// `name/PROTOCOL/port[/appProtocol]`, comma-joined: compact and stable.
fn render_ports(ports: &[ServicePort]) -> String {
    let mut out = String::new();
    for (i, p) in ports.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            "{}/{}/{}",
            p.name.as_deref().unwrap_or(""),
            p.protocol.as_deref().unwrap_or("TCP"),
            p.port
        );
        if let Some(app) = &p.app_protocol {
            let _ = write!(out, "/{app}");
        }
    }
    out
}

/// `clientIP.timeoutSeconds=<n>`, or `<none>`.
fn render_affinity_config(config: Option<&SessionAffinityConfig>) -> String {
    timeout_of(config).map_or_else(none, |t| format!("clientIP.timeoutSeconds={t}"))
}

/// The `ClientIP` affinity timeout `config` sets, if any.
fn timeout_of(config: Option<&SessionAffinityConfig>) -> Option<i32> {
    config
        .and_then(|c| c.client_ip.as_ref())
        .and_then(|c| c.timeout_seconds)
}

/// `k=v,k=v` in key order, or `<none>` for an empty map.
fn render_map(map: &BTreeMap<String, String>) -> String {
    if map.is_empty() {
        return none();
    }
    map.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Cuts `value` to [`MAX_VALUE_CHARS`] characters, marking the cut.
fn clip(mut value: String) -> String {
    if let Some((at, _)) = value.char_indices().nth(MAX_VALUE_CHARS) {
        value.truncate(at);
        value.push_str("...");
    }
    value
}

#[cfg(test)]
mod tests;

#[cfg(test)]
impl ExportedService {
    /// A ClusterIP IPv4 export of one `tcp/TCP/42` port with every default,
    /// created `secs` seconds after a fixed instant: the tests' base export.
    pub(crate) fn example(cluster: &str, secs: i64) -> Self {
        Self {
            cluster: cluster.into(),
            created: Timestamp::from_second(1_700_000_000 + secs).unwrap(),
            headless: false,
            ports: vec![ServicePort {
                name: Some("tcp".into()),
                protocol: Some("TCP".into()),
                app_protocol: None,
                port: 42,
            }],
            session_affinity: "None".into(),
            session_affinity_config: None,
            internal_traffic_policy: "Cluster".into(),
            traffic_distribution: None,
            ip_families: vec!["IPv4".into()],
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        }
    }
}
