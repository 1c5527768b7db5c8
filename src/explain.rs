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
//! a channel ([`crate::inquiry`]) and the task answers between events; DNS
//! answers never wait for this.

use std::collections::BTreeSet;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use serde::Serialize;

use crate::api::ServiceImportType;
use crate::api::ServiceRef;
use crate::dns::plan::{Plan, Query, Question};
use crate::dns::wire::CLASS_IN;
use crate::inquiry::{ImportReport, SourceReport};
use crate::zone::tier::{Census, Choice, Tier, choose};
use crate::zone::{Below, MAX_LABELS, QueryName, Zone};

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
    /// The tier the answer's endpoints come from (`local`, `all`,
    /// `local_serving`, `all_serving`), for the answers of local-first
    /// imports and of the serving fallback; `null` for every other answer.
    pub tier: Option<&'static str>,
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
            answer: records
                .as_ref()
                .map_or_else(Vec::new, |r| lines(&r.answers)),
            authority: plan
                .soa
                .map_or_else(Vec::new, |zone| vec![render(zone.soa())]),
            additional: records.map_or_else(Vec::new, |r| lines(&r.additionals)),
            tier: plan.tier(false).map(Tier::label),
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
    /// ([`crate::inquiry::Explainer::source_failing`]).
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
    let serving_fallback = ready.is_empty() && !report.serving_hosts().is_empty();
    match import.kind {
        ServiceImportType::Headless if ready.is_empty() && !serving_fallback => {
            notes.push(format!(
                "headless import without ready endpoints ({not_ready} not ready): its names are \
                 NXDOMAIN (MCS DNS specification §2.4.1)"
            ));
            let serving = report.serving_count();
            if serving > 0 && !report.serve_terminating {
                notes.push(format!(
                    "{serving} of the not-ready endpoints are terminating but still serving: \
                     with serve_terminating = true the names would answer with them, as \
                     kube-proxy falls back to them for a ClusterIP"
                ));
            }
        }
        ServiceImportType::Headless if serving_fallback => notes.push(format!(
            "headless import without ready endpoints ({not_ready} not ready): the serving \
             fallback (serve_terminating) answers with the terminating but still serving ones"
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
    locality_notes(notes, import, report, reading, rtype);
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

/// `n` and a noun, singular or plural.
fn count(n: usize, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        _ => format!("{n} {noun}s"),
    }
}

/// What the local-first rule and the serving fallback make of this import
/// (`tier::choose`, the rule the zone was built by), and for a ClusterSetIP
/// import what kube-proxy in this cluster does by the same rule.
fn locality_notes(
    notes: &mut Vec<String>,
    import: &ImportReport,
    report: &SourceReport,
    reading: &NameReading,
    rtype: RecordType,
) {
    let locality = import.locality;
    let own = report.cluster_id.as_deref();
    let is_local = |cluster: &str| own == Some(cluster);
    let ready = report.ready_hosts();
    let serving = report.serving_hosts();
    let local = |hosts: &BTreeSet<(&str, &str)>| hosts.iter().filter(|(c, _)| is_local(c)).count();
    let census = Census {
        ready: ready.len(),
        local_ready: local(&ready),
        serving: serving.len(),
        local_serving: local(&serving),
    };
    let this = |id: &str| format!("{id} (this cluster)");
    let unknown = || {
        report
            .cluster_id_unknown
            .clone()
            .unwrap_or_else(|| "no reason given".to_owned())
    };
    if locality.local_first() {
        let spelled = format!(
            "local-first import (trafficDistribution {})",
            locality.as_str()
        );
        match (import.kind, own) {
            (ServiceImportType::ClusterSetIp, None) => notes.push(format!(
                "{spelled}: kube-proxy sends connections to the clusterset IP to this cluster's \
                 ready endpoints while it has one, else to every cluster's (the controller's \
                 EndpointSlice hints); this server does not know this cluster's id ({}), so it \
                 cannot say which endpoints those are",
                unknown()
            )),
            (ServiceImportType::ClusterSetIp, Some(id)) if census.local_ready > 0 => {
                notes.push(format!(
                    "{spelled}: DNS answers the clusterset IP; kube-proxy in this cluster sends \
                     its connections to {}'s {} (the controller's EndpointSlice hints{}), and to \
                     every cluster's once it has none",
                    this(id),
                    count(census.local_ready, "ready endpoint"),
                    match locality {
                        crate::api::locality::Locality::PreferSameNode => {
                            "; the client's node first, then its zone, where they have some"
                        }
                        _ => "; the client's zone first, where it has some",
                    }
                ))
            }
            (ServiceImportType::ClusterSetIp, Some(id)) => notes.push(format!(
                "{spelled}: DNS answers the clusterset IP; {} has no ready endpoint, so \
                 kube-proxy in this cluster sends its connections to every cluster's {}",
                this(id),
                count(census.ready, "ready endpoint")
            )),
            (ServiceImportType::Headless, None) => notes.push(format!(
                "{spelled}, but this cluster's id is unknown ({}): the service name answers \
                 from every cluster, as for a spread import",
                unknown()
            )),
            (ServiceImportType::Headless, Some(_)) => notes.push(format!(
                "{spelled}: the service name's A and AAAA answer with this cluster's ready \
                 endpoints while it has one, else with every cluster's; per-endpoint names and \
                 SRV answer for every cluster"
            )),
        }
    }
    if import.kind != ServiceImportType::Headless {
        return;
    }
    let local_first = locality.local_first() && own.is_some();
    let Some(choice) = choose(local_first, report.serve_terminating, census) else {
        return;
    };
    let Choice { apex, names, .. } = choice;
    let id = own.unwrap_or_default();
    let why = match apex {
        Some(Tier::Local) => format!(
            "{} has {}",
            this(id),
            count(census.local_ready, "ready endpoint")
        ),
        Some(Tier::All) => format!(
            "this cluster ({id}) has no ready endpoint: every cluster's {}",
            count(census.ready, "ready endpoint")
        ),
        Some(Tier::LocalServing) => format!(
            "serving fallback: no endpoint is ready in any cluster; {} has {}",
            this(id),
            count(census.local_serving, "terminating but serving endpoint")
        ),
        Some(Tier::AllServing) if local_first => format!(
            "serving fallback: no endpoint is ready in any cluster, and this cluster ({id}) \
             has no serving one: every cluster's {}",
            count(census.serving, "terminating but serving endpoint")
        ),
        Some(Tier::AllServing) => format!(
            "serving fallback: no endpoint is ready in any cluster: every cluster's {}",
            count(census.serving, "terminating but serving endpoint")
        ),
        None => return,
    };
    let tier = apex.map_or("", Tier::label);
    let addresses = matches!(reading, NameReading::Service { .. })
        && matches!(rtype, RecordType::A | RecordType::AAAA | RecordType::ANY);
    match (names, addresses) {
        (_, true) => notes.push(format!("tier {tier}: {why}")),
        // Every other name answers for every cluster.
        (None, false) => notes.push(format!(
            "the service name's A and AAAA answer from tier {tier} ({why}); this answers for \
             every cluster"
        )),
        (Some(names), false) => notes.push(format!(
            "tier {}: this answers from every cluster's terminating but serving endpoints (the \
             service name's A and AAAA from tier {tier}: {why})",
            names.label()
        )),
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
}
