//! The immutable zone the DNS server answers from.
//!
//! A [`Zone`] is a snapshot: the apex records plus one [`ServiceZone`] per
//! imported service, held in persistent (structurally shared) maps so that a
//! new snapshot that changes one service shares everything else with the
//! previous one. Lookup works on lower-case wire labels and never allocates.

pub mod compress;
mod packed_names;
pub mod query_name;
mod service;
pub mod tier;
pub mod wire;

use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::rr::rdata::{A, AAAA, NS, SOA, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use packed_names::{BuiltNode, BuiltRrSet, Names};
pub use packed_names::{Node, Records, RrSet};
pub use query_name::{Below, LabelKey, Labels, QueryName};
pub use service::ServiceZone;
pub use tier::Tier;
pub use wire::SoaWire;

use crate::api::ServiceRef;

/// Hasher for the zone's maps: fast, and randomly seeded per process.
pub type FastHash = foldhash::fast::RandomState;

/// The schema version of the MCS DNS specification we implement.
pub const DNS_SCHEMA_VERSION: &str = "1.0.0";
/// TTL of the `dns-version` TXT record, as in the specification's example.
pub const DNS_VERSION_TTL_SECS: u32 = 28800;
/// Longest name we look at, in labels (a 255-byte name has at most 127).
pub const MAX_LABELS: usize = 127;
/// Longest zone origin, in wire bytes: room for `<svc>.<ns>.svc.` in front of
/// it with 63-byte labels (255 − 2 × 64 − 4), so every service has a name.
pub const MAX_ORIGIN_LEN: usize = 123;

/// Length of `name` on the wire: each label with its length byte, and the root.
pub fn wire_len(name: &Name) -> usize {
    name.iter().map(|label| label.len() + 1).sum::<usize>() + 1
}

/// Zone-wide settings that shape every record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneSettings {
    /// The zone apex, e.g. `clusterset.local.`, lower-case.
    pub origin: Name,
    /// TTL of positive answers, seconds.
    pub ttl: u32,
    /// TTL of negative answers (SOA TTL and MINIMUM), seconds.
    pub negative_ttl: u32,
    /// Most endpoints a headless answer at the service name carries (the
    /// same subset for A, AAAA and SRV); SRV answers are capped at as many
    /// records.
    pub max_records: usize,
    /// Addresses of `ns.dns.<zone>`, the name server named by NS and SOA.
    pub nameserver_addresses: Vec<IpAddr>,
    /// The serving fallback (`serve_terminating`): a headless import with
    /// no ready endpoint anywhere answers with its terminating but still
    /// serving endpoints ([`tier`]).
    pub serve_terminating: bool,
}

impl ZoneSettings {
    /// Settings for `origin` with the defaults of the configuration.
    ///
    /// # Panics
    ///
    /// If `origin` is longer than [`MAX_ORIGIN_LEN`] bytes on the wire (the
    /// configuration rejects such a zone with an error first).
    pub fn new(origin: Name) -> Self {
        assert!(
            wire_len(&origin) <= MAX_ORIGIN_LEN,
            "zone origin {origin} is longer than {MAX_ORIGIN_LEN} bytes"
        );
        Self {
            origin: origin.to_lowercase(),
            ttl: 5,
            negative_ttl: 5,
            max_records: 1000,
            nameserver_addresses: Vec::new(),
            serve_terminating: false,
        }
    }

    /// `<name>.<namespace>.svc.<zone>.`. The model validates both as DNS
    /// labels (at most 63 bytes each), and [`MAX_ORIGIN_LEN`] leaves room
    /// for them, so every imported service has a name; `None` only for a
    /// reference that is not two labels.
    pub fn service_name(&self, service: &ServiceRef) -> Option<Name> {
        let labels = [
            service.name.as_bytes(),
            service.namespace.as_bytes(),
            b"svc",
        ];
        owner_name(labels, &self.origin)
    }
}

/// The outcome of a lookup.
#[derive(Debug, Clone, Copy)]
pub enum Lookup<'z> {
    /// The name has records of the asked type.
    Found(RrSet<'z>),
    /// The name exists, without records of the asked type.
    NoData,
    /// The name does not exist in the zone.
    NxDomain,
    /// The name is outside the zone.
    NotInZone,
}

/// One published snapshot of the zone.
#[derive(Debug, Clone)]
pub struct Zone {
    settings: Arc<ZoneSettings>,
    origin_labels: Arc<[Box<[u8]>]>,
    serial: u32,
    apex: Arc<Apex>,
    services: imbl::GenericHashMap<
        LabelKey,
        Arc<ServiceZone>,
        FastHash,
        imbl::shared_ptr::DefaultSharedPtr,
    >,
    namespaces: imbl::GenericHashMap<Arc<str>, u32, FastHash, imbl::shared_ptr::DefaultSharedPtr>,
}

#[derive(Debug)]
struct Apex {
    soa: Record,
    soa_wire: SoaWire,
    apex: Names,
    version: Names,
    nameserver: Names,
}

impl Zone {
    /// An empty zone: apex records only.
    pub fn new(settings: ZoneSettings) -> Self {
        let origin_labels = settings
            .origin
            .iter()
            .map(|l| l.to_ascii_lowercase().into_boxed_slice())
            .collect();
        let settings = Arc::new(settings);
        let apex = Arc::new(Apex::build(&settings, 1));
        Self {
            settings,
            origin_labels,
            serial: 1,
            apex,
            services: Default::default(),
            namespaces: Default::default(),
        }
    }

    /// The settings this zone was built with.
    pub fn settings(&self) -> &ZoneSettings {
        &self.settings
    }

    /// The SOA record, for the authority section of negative answers.
    pub fn soa(&self) -> &Record {
        &self.apex.soa
    }

    /// The same SOA record precompiled, for writers of wire responses.
    pub fn soa_wire(&self) -> &SoaWire {
        &self.apex.soa_wire
    }

    /// The zone origin's labels, lower-case, leftmost first.
    pub fn origin_labels(&self) -> &[Box<[u8]>] {
        &self.origin_labels
    }

    /// Length of the zone origin on the wire (labels, their length bytes
    /// and the root).
    pub fn origin_wire_len(&self) -> usize {
        self.origin_labels
            .iter()
            .map(|l| l.len() + 1)
            .sum::<usize>()
            + 1
    }

    /// The SOA serial.
    pub fn serial(&self) -> u32 {
        self.serial
    }

    /// Number of services that have names.
    pub fn service_count(&self) -> usize {
        self.services.len()
    }

    /// Iterates over all services with names, in no particular order.
    pub fn services(&self) -> impl Iterator<Item = &ServiceZone> {
        self.services.values().map(|v| &**v)
    }

    /// Sets a new SOA serial (the index bumps it on every published change).
    pub fn set_serial(&mut self, serial: u32) {
        if serial != self.serial {
            self.serial = serial;
            self.apex = Arc::new(Apex::build(&self.settings, serial));
        }
    }

    /// Replaces the names of `service`; `None` or an empty service zone
    /// removes them.
    pub fn set_service(&mut self, service: &ServiceRef, zone: Option<Arc<ServiceZone>>) {
        let Some(key) = LabelKey::service(service) else {
            tracing::error!(%service, "service reference is not two DNS labels; left out of the zone");
            return;
        };
        let zone = zone.filter(|z| !z.is_empty());
        let had = match zone {
            Some(z) => self.services.insert(key.clone(), z).is_some(),
            None => self.services.remove(&key).is_some(),
        };
        let has = self.services.contains_key(&key);
        if had != has {
            let ns: Arc<str> = service.namespace.clone();
            let count = self.namespaces.get(&ns).copied().unwrap_or(0);
            let count = if has {
                count + 1
            } else {
                count.saturating_sub(1)
            };
            if count == 0 {
                self.namespaces.remove(&ns);
            } else {
                self.namespaces.insert(ns, count);
            }
        }
    }

    /// The names of one service, if it has any.
    pub fn service(&self, service: &ServiceRef) -> Option<&ServiceZone> {
        self.services
            .get(&LabelKey::service(service)?)
            .map(|z| &**z)
    }

    /// Looks up lower-case `labels` (leftmost first, no root label). Zone
    /// transfers (AXFR, IXFR) are not served: [`Lookup::NotInZone`].
    pub fn lookup(&self, labels: &[&[u8]], rtype: RecordType) -> Lookup<'_> {
        if matches!(rtype, RecordType::AXFR | RecordType::IXFR) {
            return Lookup::NotInZone;
        }
        let has_nameserver = !self.apex.nameserver.first().is_empty();
        let node = match QueryName::parse(labels, &self.origin_labels) {
            QueryName::OutsideZone => return Lookup::NotInZone,
            QueryName::Apex => self.apex.apex.first(),
            QueryName::SchemaVersion => self.apex.version.first(),
            // `ns.dns.<zone>` exists only with addresses (nameserver_addresses);
            // without them it and `dns.<zone>` have no records and do not exist.
            QueryName::NameserverParent if has_nameserver => return Lookup::NoData,
            QueryName::Nameserver if has_nameserver => self.apex.nameserver.first(),
            QueryName::Svc if !self.services.is_empty() => return Lookup::NoData,
            QueryName::Namespace { namespace } => {
                return match std::str::from_utf8(namespace) {
                    Ok(ns) if self.namespaces.contains_key(ns) => Lookup::NoData,
                    _ => Lookup::NxDomain,
                };
            }
            QueryName::Service {
                service, namespace, ..
            } => {
                let front = &labels[..labels.len() - 3 - self.origin_labels.len()];
                match self.service_node(front, service, namespace) {
                    Some(node) => node,
                    None => return Lookup::NxDomain,
                }
            }
            QueryName::NameserverParent
            | QueryName::Nameserver
            | QueryName::Svc
            | QueryName::Other => return Lookup::NxDomain,
        };
        match node.get(rtype) {
            Some(rrset) => Lookup::Found(rrset),
            // RFC 8482: answer ANY with one RRset of the name.
            None if rtype == RecordType::ANY => {
                node.rrsets().next().map_or(Lookup::NoData, Lookup::Found)
            }
            None => Lookup::NoData,
        }
    }

    /// The node `front` labels below the service `<service>.<namespace>`.
    /// Keys are built in stack buffers: a lookup never allocates.
    fn service_node(&self, front: &[&[u8]], service: &[u8], namespace: &[u8]) -> Option<Node<'_>> {
        let mut key = [0u8; 255];
        let len = query_name::encode_labels(&mut key, &[service, namespace])?;
        let service = self.services.get(&key[..len])?;
        let len = query_name::encode_labels(&mut key, front)?;
        service.node(&key[..len])
    }
}

/// `<relative>.<zone>` for the short fixed names at the apex, which fit in
/// front of any origin [`ZoneSettings::new`] accepts.
fn apex_name(settings: &ZoneSettings, relative: &str) -> Name {
    owner_name(relative.split('.').map(str::as_bytes), &settings.origin)
        .expect("fixed apex names fit in front of the origin")
}

impl Apex {
    fn build(settings: &ZoneSettings, serial: u32) -> Self {
        let origin = &settings.origin;
        let nameserver = apex_name(settings, "ns.dns");
        let hostmaster = apex_name(settings, "hostmaster");
        let soa = Record::from_rdata(
            origin.clone(),
            settings.negative_ttl,
            RData::SOA(SOA::new(
                nameserver.clone(),
                hostmaster,
                serial,
                7200,
                1800,
                86400,
                settings.negative_ttl,
            )),
        );
        let ns = Record::from_rdata(
            origin.clone(),
            settings.ttl,
            RData::NS(NS(nameserver.clone())),
        );
        let mut apex = BuiltNode::default();
        apex.push_rrset(BuiltRrSet::new(
            origin,
            RecordType::SOA,
            vec![soa.clone()],
            vec![],
        ));

        let version_name = apex_name(settings, "dns-version");
        let txt = Record::from_rdata(
            version_name.clone(),
            DNS_VERSION_TTL_SECS,
            RData::TXT(TXT::new(vec![DNS_SCHEMA_VERSION.to_string()])),
        );
        let mut version = BuiltNode::default();
        version.push_rrset(BuiltRrSet::new(
            &version_name,
            RecordType::TXT,
            vec![txt],
            vec![],
        ));

        let mut ns_node = BuiltNode::default();
        let (mut a, mut aaaa) = (Vec::new(), Vec::new());
        for ip in &settings.nameserver_addresses {
            match ip {
                IpAddr::V4(v4) => a.push(Record::from_rdata(
                    nameserver.clone(),
                    settings.ttl,
                    RData::A(A(*v4)),
                )),
                IpAddr::V6(v6) => aaaa.push(Record::from_rdata(
                    nameserver.clone(),
                    settings.ttl,
                    RData::AAAA(AAAA(*v6)),
                )),
            }
        }
        // The NS answer carries the nameserver's addresses as additional
        // data, as any authoritative server does for in-zone NS targets.
        let glue: Vec<Record> = a.iter().chain(&aaaa).cloned().collect();
        apex.push_rrset(BuiltRrSet::new(origin, RecordType::NS, vec![ns], glue));
        if !a.is_empty() {
            ns_node.push_rrset(BuiltRrSet::new(&nameserver, RecordType::A, a, vec![]));
        }
        if !aaaa.is_empty() {
            ns_node.push_rrset(BuiltRrSet::new(&nameserver, RecordType::AAAA, aaaa, vec![]));
        }
        Self {
            soa_wire: SoaWire::encode(&soa),
            soa,
            apex: Names::single(apex),
            version: Names::single(version),
            nameserver: Names::single(ns_node),
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
impl Zone {
    /// A dotted name's answer data as text, sorted, or why there is none
    /// (`NODATA`, `NXDOMAIN`, `REFUSED`): what the crate's tests compare.
    pub(crate) fn answer_texts(
        &self,
        qname: &str,
        rtype: RecordType,
    ) -> Result<Vec<String>, &'static str> {
        let name = Name::from_ascii(qname).unwrap().to_lowercase();
        let labels: Vec<&[u8]> = name.iter().collect();
        match self.lookup(&labels, rtype) {
            Lookup::Found(rrset) => {
                let mut out: Vec<String> = rrset
                    .records(&name)
                    .unwrap()
                    .answers
                    .iter()
                    .map(|r| r.data.to_string())
                    .collect();
                out.sort();
                Ok(out)
            }
            Lookup::NoData => Err("NODATA"),
            Lookup::NxDomain => Err("NXDOMAIN"),
            Lookup::NotInZone => Err("REFUSED"),
        }
    }
}

/// Renders the zone as an RFC 1035 master file (for `dump-zone`, and for
/// loading the same data into another server in benchmarks).
pub fn master_file(zone: &Zone) -> String {
    use std::fmt::Write;
    let mut out = format!("$ORIGIN {}\n", zone.settings.origin);
    let mut write = |owner: &Name, node: Node<'_>| {
        for rrset in node.rrsets() {
            let Some(records) = rrset.records(owner) else {
                continue;
            };
            for record in &records.answers {
                match &record.data {
                    // hickory prints TXT strings unquoted; quote them so any
                    // character survives a round trip through a zone parser.
                    RData::TXT(txt) => {
                        let strings: Vec<String> = txt
                            .txt_data
                            .iter()
                            .map(|s| format!("{:?}", String::from_utf8_lossy(s)))
                            .collect();
                        let _ = writeln!(
                            out,
                            "{} {} IN TXT {}",
                            record.name,
                            record.ttl,
                            strings.join(" ")
                        );
                    }
                    _ => {
                        let _ = writeln!(out, "{record}");
                    }
                }
            }
        }
    };
    let settings = &zone.settings;
    write(&settings.origin, zone.apex.apex.first());
    write(&apex_name(settings, "ns.dns"), zone.apex.nameserver.first());
    write(
        &apex_name(settings, "dns-version"),
        zone.apex.version.first(),
    );
    let mut services: Vec<&ServiceZone> = zone.services().collect();
    services.sort_by(|a, b| a.service().cmp(b.service()));
    for service in services {
        let Some(base) = settings.service_name(service.service()) else {
            continue;
        };
        let mut nodes: Vec<_> = service.nodes().collect();
        nodes.sort_by(|a, b| a.0.cmp(&b.0));
        for (relative, node) in nodes {
            // Only names that fit were built.
            if let Some(owner) = owner_name(relative.labels(), &base) {
                write(&owner, node);
            }
        }
    }
    out
}

/// `<labels>.<base>`, or `None` when that is not a name (longer than 255
/// bytes, or a label longer than 63).
pub fn owner_name<'l>(labels: impl IntoIterator<Item = &'l [u8]>, base: &Name) -> Option<Name> {
    let labels: Vec<&[u8]> = labels.into_iter().collect();
    if labels.is_empty() {
        return Some(base.clone());
    }
    Name::from_labels(labels)
        .and_then(|relative| relative.append_domain(base))
        .ok()
}
