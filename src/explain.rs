//! `/explain`: why a name answers the way it does.
//!
//! For one question it reports the response the server sends, how the name
//! reads (service, named port, per-endpoint name, cluster), and what the
//! index holds for that service: the import, every joined slice with its
//! cluster and endpoints, whether the namespace exists, objects the source
//! rejected as invalid, and whether the source is failing. From that it
//! writes short notes saying why the answer is what it is.
//!
//! The index belongs to the source task, so the admin endpoint asks it over
//! a channel and the task answers between events; DNS answers never wait
//! for this.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::api::ServiceImportType;
use crate::dns::plan::{CLASS_IN, Plan, Query, Question};
use crate::index::Index;
use crate::model::{Port, ServiceRef, dashed_address};
use crate::zone::{Below, MAX_LABELS, QueryName, Zone};

/// A question for the source task: what it holds for one service.
#[derive(Debug)]
pub struct Inquiry {
    service: ServiceRef,
    reply: oneshot::Sender<SourceReport>,
}

impl Inquiry {
    /// The service asked about.
    pub fn service(&self) -> &ServiceRef {
        &self.service
    }

    /// Sends the report back. The asker may have given up waiting; then
    /// the report is dropped.
    pub fn answer(self, report: SourceReport) {
        let _ = self.reply.send(report);
    }
}

/// The source task's end of the channel: the inquiries it answers between
/// events, and whether the source is failing, which the source sets from
/// its own state and `/explain` reads.
#[derive(Debug)]
pub struct Inquiries {
    receiver: mpsc::Receiver<Inquiry>,
    failing: Arc<AtomicBool>,
}

impl Inquiries {
    /// The next inquiry; `None` once every [`Explainer`] is gone.
    pub async fn recv(&mut self) -> Option<Inquiry> {
        self.receiver.recv().await
    }

    /// Tells `/explain` whether the source is failing (answers come from
    /// the last good index).
    pub fn set_source_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::Relaxed);
    }
}

/// The admin endpoint's end of the channel to the source task.
#[derive(Debug, Clone)]
pub struct Explainer {
    inquiries: mpsc::Sender<Inquiry>,
    failing: Arc<AtomicBool>,
}

/// A connected pair: the admin endpoint asks through the [`Explainer`], the
/// source task answers what arrives on [`Inquiries`].
pub fn channel() -> (Explainer, Inquiries) {
    let (inquiries, receiver) = mpsc::channel(16);
    let failing = Arc::new(AtomicBool::new(false));
    (
        Explainer {
            inquiries,
            failing: failing.clone(),
        },
        Inquiries { receiver, failing },
    )
}

impl Explainer {
    /// Asks the source what it holds for `service`; `None` when it does not
    /// answer within `wait` (busy with a large relist, or not started yet).
    pub async fn ask(&self, service: ServiceRef, wait: Duration) -> Option<SourceReport> {
        let (reply, answer) = oneshot::channel();
        let inquiry = Inquiry { service, reply };
        tokio::time::timeout(wait, async {
            self.inquiries.send(inquiry).await.ok()?;
            answer.await.ok()
        })
        .await
        .ok()
        .flatten()
    }

    /// Whether the source says it is failing.
    pub fn source_failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }
}

/// What a source holds for one service.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SourceReport {
    /// The indexed ServiceImport, if any.
    pub import: Option<ImportReport>,
    /// Whether the namespace exists locally; `null` when the source does not
    /// track namespaces (a manifest file), so every namespace counts.
    pub namespace_exists: Option<bool>,
    /// The EndpointSlices joined to the service, by cluster and name.
    pub slices: Vec<SliceReport>,
    /// Objects of this service whose latest version was rejected; their
    /// last valid version (if any) is what the index holds.
    pub rejected: Vec<Rejection>,
    /// Why the source is failing, while it is.
    pub source_problem: Option<String>,
}

/// What the index keeps of a ServiceImport.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    /// `ClusterSetIP` or `Headless`.
    #[serde(rename = "type")]
    pub kind: ServiceImportType,
    /// `spec.ips`.
    pub ips: Vec<IpAddr>,
    /// `spec.ports`, as `name/port/PROTOCOL` (`port/PROTOCOL` when unnamed).
    pub ports: Vec<String>,
}

/// What the index keeps of an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SliceReport {
    /// Object name.
    pub name: String,
    /// `multicluster.kubernetes.io/source-cluster`.
    pub cluster: String,
    /// Its ready endpoints (`conditions.ready` true or unset).
    pub ready: Vec<EndpointReport>,
    /// How many of its endpoints are not ready (in no answer, not kept).
    pub not_ready: u32,
}

/// One ready endpoint of a slice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EndpointReport {
    /// The host label of its per-endpoint name: `hostname`, else the first
    /// address dashed.
    pub host: String,
    /// Its addresses.
    pub addresses: Vec<IpAddr>,
}

/// An object whose latest version the source rejected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejection {
    /// `ServiceImport` or `EndpointSlice`.
    pub kind: &'static str,
    /// Object name.
    pub name: String,
    /// Why.
    pub error: String,
}

impl SourceReport {
    /// What `index` holds for `service`.
    pub fn from_index(index: &Index, service: &ServiceRef) -> Self {
        let import = index.import(service).map(|import| ImportReport {
            kind: import.import_type,
            ips: import.ips.clone(),
            ports: import.ports.iter().map(port_text).collect(),
        });
        let mut slices: Vec<SliceReport> = index
            .slices_of(service)
            .map(|(key, slice)| SliceReport {
                name: key.name.clone(),
                cluster: slice.cluster.clone(),
                not_ready: slice.not_ready,
                ready: slice
                    .endpoints
                    .iter()
                    .filter_map(|endpoint| {
                        let first = endpoint.addresses.first()?;
                        Some(EndpointReport {
                            host: endpoint
                                .hostname
                                .as_deref()
                                .map_or_else(|| dashed_address(first), String::from),
                            addresses: endpoint.addresses.to_vec(),
                        })
                    })
                    .collect(),
            })
            .collect();
        slices.sort_by(|a, b| (&a.cluster, &a.name).cmp(&(&b.cluster, &b.name)));
        Self {
            import,
            namespace_exists: index.namespace_known(&service.namespace),
            slices,
            rejected: Vec::new(),
            source_problem: None,
        }
    }

    /// Ready endpoints as `(cluster, host)`: a dual-stack endpoint is in
    /// two slices but is one name.
    fn ready_hosts(&self) -> BTreeSet<(&str, &str)> {
        self.slices
            .iter()
            .flat_map(|s| {
                s.ready
                    .iter()
                    .map(move |e| (s.cluster.as_str(), e.host.as_str()))
            })
            .collect()
    }

    fn not_ready(&self) -> u32 {
        self.slices.iter().map(|s| s.not_ready).sum()
    }
}

fn port_text(port: &Port) -> String {
    let protocol = &port.protocol.srv_label()[1..];
    match &port.name {
        Some(name) => format!("{name}/{}/{}", port.port, protocol.to_ascii_uppercase()),
        None => format!("{}/{}", port.port, protocol.to_ascii_uppercase()),
    }
}

/// How a name reads against the zone's naming scheme.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "form", rename_all = "kebab-case")]
pub enum NameReading {
    /// Not in the zone.
    OutsideZone,
    /// The zone apex.
    Apex,
    /// `dns-version.<zone>`.
    SchemaVersion,
    /// `dns.<zone>` or `ns.dns.<zone>`.
    Nameserver,
    /// `<ns>.svc.<zone>`.
    Namespace {
        /// Namespace.
        namespace: String,
    },
    /// `<svc>.<ns>.svc.<zone>`.
    Service {
        /// Namespace.
        namespace: String,
        /// Service.
        service: String,
    },
    /// `_<port>._<proto>.<svc>.<ns>.svc.<zone>`.
    NamedPort {
        /// Namespace.
        namespace: String,
        /// Service.
        service: String,
        /// Port name.
        port: String,
        /// Protocol label without the underscore.
        protocol: String,
    },
    /// `<clusterid>.<svc>.<ns>.svc.<zone>`: never has records.
    Cluster {
        /// Namespace.
        namespace: String,
        /// Service.
        service: String,
        /// Cluster id.
        cluster: String,
    },
    /// `<hostname>.<clusterid>.<svc>.<ns>.svc.<zone>`.
    Endpoint {
        /// Namespace.
        namespace: String,
        /// Service.
        service: String,
        /// Host label.
        host: String,
        /// Cluster id (may be dotted).
        cluster: String,
    },
    /// Anything else in the zone: no such name can exist.
    Other,
}

impl NameReading {
    /// Reads `name` against the zone `origin` with the parser the zone's
    /// lookup uses. `is_cluster` tells whether dotted labels are one of the
    /// service's cluster ids (`<clusterid>` may have dots, so
    /// `a.b.<svc>...` is either cluster `a.b` or host `a` in cluster `b`).
    pub fn of(name: &Name, origin: &Name, is_cluster: impl Fn(&str) -> bool) -> Self {
        let name = name.to_lowercase();
        let origin = origin.to_lowercase();
        let labels: Vec<&[u8]> = name.iter().take(MAX_LABELS).collect();
        let origin: Vec<&[u8]> = origin.iter().collect();
        let text = |label: &[u8]| String::from_utf8_lossy(label).into_owned();
        let dotted = |labels: &[&[u8]]| {
            labels
                .iter()
                .map(|label| text(label))
                .collect::<Vec<_>>()
                .join(".")
        };
        match QueryName::parse(&labels, &origin) {
            QueryName::OutsideZone => Self::OutsideZone,
            QueryName::Apex => Self::Apex,
            QueryName::SchemaVersion => Self::SchemaVersion,
            QueryName::NameserverParent | QueryName::Nameserver => Self::Nameserver,
            QueryName::Namespace { namespace } => Self::Namespace {
                namespace: text(namespace),
            },
            QueryName::Service {
                service,
                namespace,
                below,
            } => {
                let (namespace, service) = (text(namespace), text(service));
                match below {
                    Below::Nothing => Self::Service { namespace, service },
                    Below::NamedPort { port, protocol } => Self::NamedPort {
                        namespace,
                        service,
                        port: text(port),
                        protocol: text(protocol),
                    },
                    Below::Hosts { labels } => {
                        match Below::split_endpoint(labels, |l| is_cluster(&dotted(l))) {
                            Some((host, cluster)) => Self::Endpoint {
                                namespace,
                                service,
                                host: text(host),
                                cluster: dotted(cluster),
                            },
                            None => Self::Cluster {
                                namespace,
                                service,
                                cluster: dotted(labels),
                            },
                        }
                    }
                    Below::Protocol { .. } | Below::Other => Self::Other,
                }
            }
            QueryName::Svc | QueryName::Other => Self::Other,
        }
    }

    /// The service this name belongs to, if any.
    pub fn service(&self) -> Option<ServiceRef> {
        match self {
            Self::Service { namespace, service }
            | Self::NamedPort {
                namespace, service, ..
            }
            | Self::Cluster {
                namespace, service, ..
            }
            | Self::Endpoint {
                namespace, service, ..
            } => Some(ServiceRef::new(namespace, service)),
            _ => None,
        }
    }
}

/// The response to one question, as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResponseReport {
    /// Response code; `NOERROR` with an empty answer is NODATA.
    pub rcode: String,
    /// Answer records, one per line as in a zone file.
    pub answer: Vec<String>,
    /// Authority records.
    pub authority: Vec<String>,
    /// Additional records (before any UDP size limit).
    pub additional: Vec<String>,
}

impl ResponseReport {
    /// What the server answers for `name`/`rtype` (class IN, over TCP, so
    /// with no size limit) from `zone`: the [`Plan`] a TCP query gets.
    pub fn of(zone: Option<&Zone>, name: &Name, rtype: RecordType) -> Self {
        let lower = name.to_lowercase();
        let labels: Vec<&[u8]> = lower.iter().take(MAX_LABELS).collect();
        let query = Query {
            opcode: 0,
            question_count: 1,
            question: Some(Question {
                labels: &labels,
                qtype: rtype,
                qclass: CLASS_IN,
            }),
            edns: None,
        };
        let plan = Plan::new(zone, &query);
        let records = plan.answer.and_then(|rrset| rrset.records(&lower));
        let lines = |records: &[Record]| records.iter().map(render).collect();
        Self {
            rcode: mnemonic(plan.rcode).to_owned(),
            answer: records.map_or_else(Vec::new, |r| lines(&r.answers)),
            authority: plan
                .soa
                .map_or_else(Vec::new, |zone| vec![render(zone.soa())]),
            additional: records.map_or_else(Vec::new, |r| lines(&r.additionals)),
        }
    }
}

fn mnemonic(rcode: ResponseCode) -> &'static str {
    match rcode {
        ResponseCode::NoError => "NOERROR",
        ResponseCode::NXDomain => "NXDOMAIN",
        ResponseCode::Refused => "REFUSED",
        _ => "SERVFAIL",
    }
}

/// A record as one zone-file line (`name ttl IN type rdata`).
fn render(record: &Record) -> String {
    let rdata = match &record.data {
        RData::TXT(txt) => txt
            .txt_data
            .iter()
            .map(|s| format!("\"{}\"", String::from_utf8_lossy(s)))
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    };
    format!(
        "{} {} {} {} {}",
        record.name,
        record.ttl,
        DNSClass::IN,
        record.record_type(),
        rdata
    )
}

/// Everything `/explain` says about one question.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// `<name> <type>` as asked.
    pub question: String,
    /// The response.
    #[serde(flatten)]
    pub response: ResponseReport,
    /// How the name reads.
    pub name: NameReading,
    /// SOA serial of the zone answered from; `null` before the first zone.
    pub zone_serial: Option<u32>,
    /// What the source holds for the service the name belongs to.
    pub service: Option<SourceReport>,
    /// Why the answer is what it is.
    pub notes: Vec<String>,
}

/// What the admin endpoint knows besides the zone.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The configured zone apex (known before any zone is published).
    pub origin: &'a Name,
    /// Whether the source is failing, as the source says
    /// ([`Explainer::source_failing`]).
    pub stale: bool,
    /// Whether the source was asked about the service and did not answer.
    pub source_silent: bool,
}

impl Explanation {
    /// Puts the parts together and writes the notes.
    pub fn new(
        zone: Option<&Zone>,
        name: &Name,
        rtype: RecordType,
        service: Option<SourceReport>,
        context: Context<'_>,
    ) -> Self {
        let response = ResponseReport::of(zone, name, rtype);
        let reading = NameReading::of(name, context.origin, |cluster| {
            service
                .as_ref()
                .is_some_and(|report| report.slices.iter().any(|s| s.cluster == cluster))
        });
        let notes = notes(
            zone.is_some(),
            &response,
            &reading,
            rtype,
            service.as_ref(),
            context,
        );
        Self {
            question: format!("{name} {rtype}"),
            response,
            name: reading,
            zone_serial: zone.map(Zone::serial),
            service,
            notes,
        }
    }
}

fn notes(
    have_zone: bool,
    response: &ResponseReport,
    reading: &NameReading,
    rtype: RecordType,
    report: Option<&SourceReport>,
    context: Context<'_>,
) -> Vec<String> {
    let mut notes = Vec::new();
    if !have_zone {
        notes.push(
            "no zone published yet: every query gets SERVFAIL until the source's first load or \
             list is indexed"
                .to_owned(),
        );
    }
    if context.stale {
        let why = report
            .and_then(|r| r.source_problem.as_deref())
            .map_or_else(String::new, |p| format!(" ({p})"));
        notes.push(format!(
            "the source is failing{why}: answers come from the last good index"
        ));
    }
    if context.source_silent {
        notes.push(
            "the source did not answer in time (a large relist in progress?): no index details"
                .to_owned(),
        );
    }
    let nxdomain = response.rcode == mnemonic(ResponseCode::NXDomain);
    let nodata = response.rcode == mnemonic(ResponseCode::NoError) && response.answer.is_empty();
    match reading {
        NameReading::OutsideZone => notes.push(format!(
            "outside the zone {}: REFUSED (authoritative only, never recursive)",
            context.origin
        )),
        NameReading::Other if nxdomain => notes.push(
            "no name of this shape exists in the zone (see docs/dns.md for the names served)"
                .to_owned(),
        ),
        NameReading::Cluster { .. } => notes.push(
            "<clusterid>.<svc>.<ns>.svc names never have records (MCS DNS specification \
             §2.3.4/§2.4.4); one exists as an empty non-terminal while an endpoint name \
             below it does"
                .to_owned(),
        ),
        _ => {}
    }
    if let (Some(service), Some(report)) = (reading.service(), report) {
        service_notes(
            &mut notes, &service, reading, rtype, report, nxdomain, nodata,
        );
    }
    notes
}

fn service_notes(
    notes: &mut Vec<String>,
    service: &ServiceRef,
    reading: &NameReading,
    rtype: RecordType,
    report: &SourceReport,
    nxdomain: bool,
    nodata: bool,
) {
    for rejection in &report.rejected {
        notes.push(format!(
            "{} {}/{}: the latest version was rejected ({}); the index keeps its last valid \
             version, if any",
            rejection.kind, service.namespace, rejection.name, rejection.error
        ));
    }
    let Some(import) = &report.import else {
        notes.push(format!("no ServiceImport {service} in the index"));
        if !report.slices.is_empty() {
            notes.push(format!(
                "{} EndpointSlice(s) name this service in multicluster.kubernetes.io/service-name; \
                 without a ServiceImport they are not served",
                report.slices.len()
            ));
        }
        return;
    };
    if report.namespace_exists == Some(false) {
        notes.push(format!(
            "namespace {} does not exist in this cluster: names of its imports do not resolve \
             (namespace sameness, docs/dns.md)",
            service.namespace
        ));
        return;
    }
    let ready = report.ready_hosts();
    let not_ready = report.not_ready();
    match import.kind {
        ServiceImportType::Headless if ready.is_empty() => notes.push(format!(
            "headless import without ready endpoints ({not_ready} not ready): its names are \
             NXDOMAIN (MCS DNS specification §2.4.1)"
        )),
        ServiceImportType::Headless => notes.push(format!(
            "headless import: {} ready endpoint(s) in {} cluster(s); {not_ready} not ready \
             (in no answer)",
            ready.len(),
            ready
                .iter()
                .map(|(cluster, _)| cluster)
                .collect::<BTreeSet<_>>()
                .len()
        )),
        _ if import.ips.is_empty() => notes.push(
            "ClusterSetIP import without spec.ips (none assigned yet): A and AAAA are NODATA"
                .to_owned(),
        ),
        _ => {}
    }
    match reading {
        NameReading::Service { .. }
            if nodata && matches!(rtype, RecordType::A | RecordType::AAAA) =>
        {
            notes.push(format!("no {rtype} address for this service: NODATA"));
        }
        NameReading::NamedPort { port, protocol, .. } if nxdomain => notes.push(format!(
            "no port named {port} with protocol {protocol} (unnamed ports have no SRV name)"
        )),
        NameReading::Endpoint { .. } | NameReading::Cluster { .. }
            if import.kind == ServiceImportType::ClusterSetIp =>
        {
            notes.push(
                "per-endpoint names exist for headless imports only (MCS DNS specification §2.4)"
                    .to_owned(),
            );
        }
        NameReading::Endpoint { host, cluster, .. }
            if nxdomain && !ready.contains(&(cluster.as_str(), host.as_str())) =>
        {
            notes.push(format!(
                "no ready endpoint {host} in cluster {cluster} (not-ready endpoints have no name)"
            ));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn read(name: &str) -> NameReading {
        NameReading::of(
            &Name::from_str(name).unwrap(),
            &Name::from_str("clusterset.local.").unwrap(),
            |cluster| cluster == "east.registry1",
        )
    }

    #[test]
    fn names_read_as_their_form() {
        assert_eq!(read("example.com."), NameReading::OutsideZone);
        assert_eq!(read("ClusterSet.Local."), NameReading::Apex);
        assert_eq!(
            read("dns-version.clusterset.local."),
            NameReading::SchemaVersion
        );
        assert_eq!(
            read("shop.svc.clusterset.local."),
            NameReading::Namespace {
                namespace: "shop".into()
            }
        );
        assert_eq!(
            read("Web.Shop.svc.clusterset.local.").service(),
            Some(ServiceRef::new("shop", "web"))
        );
        assert_eq!(
            read("_http._tcp.web.shop.svc.clusterset.local."),
            NameReading::NamedPort {
                namespace: "shop".into(),
                service: "web".into(),
                port: "http".into(),
                protocol: "tcp".into()
            }
        );
        assert_eq!(
            read("east.db.shop.svc.clusterset.local."),
            NameReading::Cluster {
                namespace: "shop".into(),
                service: "db".into(),
                cluster: "east".into()
            }
        );
        assert_eq!(
            read("db-0.east.eu.db.shop.svc.clusterset.local."),
            NameReading::Endpoint {
                namespace: "shop".into(),
                service: "db".into(),
                host: "db-0".into(),
                cluster: "east.eu".into()
            }
        );
        assert_eq!(
            read("_tcp.db.shop.svc.clusterset.local."),
            NameReading::Other
        );
        // A dotted cluster id the service has is a cluster, not a host.
        assert_eq!(
            read("east.registry1.db.shop.svc.clusterset.local."),
            NameReading::Cluster {
                namespace: "shop".into(),
                service: "db".into(),
                cluster: "east.registry1".into()
            }
        );
        assert_eq!(
            read("db-0.east.registry1.db.shop.svc.clusterset.local."),
            NameReading::Endpoint {
                namespace: "shop".into(),
                service: "db".into(),
                host: "db-0".into(),
                cluster: "east.registry1".into()
            }
        );
        assert_eq!(read("foo.clusterset.local."), NameReading::Other);
    }

    #[test]
    fn a_report_groups_what_the_index_holds_for_one_service() {
        use crate::index::{Index, SliceKey};
        use crate::model::{Endpoint, ImportedService, SliceEndpoints};
        use crate::zone::ZoneSettings;

        let mut index = Index::new(ZoneSettings::new(
            Name::from_str("clusterset.local.").unwrap(),
        ));
        let db = ServiceRef::new("shop", "db");
        index.apply_import(ImportedService {
            service: db.clone(),
            import_type: ServiceImportType::Headless,
            ips: vec![],
            ports: vec![Port::from_api(Some("pg"), None, 5432).unwrap()],
        });
        let slice = |cluster: &str, ip: &str, not_ready| SliceEndpoints {
            service: db.clone(),
            cluster: cluster.into(),
            ports: vec![],
            endpoints: vec![Endpoint {
                hostname: None,
                addresses: vec![ip.parse().unwrap()].into(),
            }],
            not_ready,
        };
        let key = |name: &str| SliceKey {
            namespace: "shop".into(),
            name: name.into(),
        };
        index.apply_slice(key("west-1"), slice("west", "10.2.0.1", 0));
        index.apply_slice(key("east-1"), slice("east", "fd00::1", 2));
        let report = SourceReport::from_index(&index, &db);
        let import = report.import.as_ref().unwrap();
        assert_eq!(import.kind, ServiceImportType::Headless);
        assert_eq!(import.ports, ["pg/5432/TCP"]);
        let slices: Vec<(&str, &str, u32)> = report
            .slices
            .iter()
            .map(|s| (s.name.as_str(), s.ready[0].host.as_str(), s.not_ready))
            .collect();
        assert_eq!(
            slices,
            [("east-1", "fd00--1", 2), ("west-1", "10-2-0-1", 0)]
        );
        assert_eq!(report.not_ready(), 2);
        assert_eq!(report.namespace_exists, None);
        assert_eq!(
            SourceReport::from_index(&index, &ServiceRef::new("shop", "web")),
            SourceReport::default()
        );
    }

    #[test]
    fn ports_read_as_name_number_protocol() {
        let named = Port::from_api(Some("http"), Some("TCP"), 80).unwrap();
        let unnamed = Port::from_api(None, Some("UDP"), 53).unwrap();
        assert_eq!(port_text(&named), "http/80/TCP");
        assert_eq!(port_text(&unnamed), "53/UDP");
    }
}
