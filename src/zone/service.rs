//! The records of one imported service, built from its projection and its
//! slices. A change to a service rebuilds only its `ServiceZone`, so the cost
//! of an update is proportional to that service, never to the clusterset.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;

use hickory_proto::rr::rdata::{A, AAAA, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use super::packed_names::{BuiltNode, BuiltRrSet, Names, Node};
use super::query_name::{LabelKey, Labels};
use super::tier::{Census, choose};
use super::{FastHash, ZoneSettings, owner_name};
use crate::api::ServiceImportType;
use crate::api::ServiceRef;
use crate::model::{Endpoints, ImportedService, Port, SliceEndpoints, dashed_address};

/// All names of one service, keyed by the labels in front of
/// `<svc>.<ns>.svc.<zone>` (none for the service name itself, `_http._tcp`,
/// `web-0.cluster-a`, `cluster-a`).
///
/// The names sit packed ([`Names`], in its lookup order) and are found by
/// binary search: a service has a handful of names (a headless one, one per
/// endpoint more), and a hash table per service cost twice its entries in
/// mostly empty buckets (`cargo bench --bench heap`).
#[derive(Debug, Clone)]
pub struct ServiceZone {
    service: ServiceRef,
    names: Names,
    record_count: usize,
}

/// The names of a service while they are built.
#[derive(Default)]
struct Builder {
    nodes: HashMap<LabelKey, BuiltNode, FastHash>,
}

impl ServiceZone {
    /// The service these names belong to.
    pub fn service(&self) -> &ServiceRef {
        &self.service
    }

    /// The node for the labels in front of the service name, in wire form
    /// (see [`LabelKey`]).
    #[inline]
    pub fn node(&self, relative: &[u8]) -> Option<Node<'_>> {
        self.names.find(relative)
    }

    /// True when the service has no names at all: a headless service without
    /// ready endpoints, which must answer NXDOMAIN.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Number of answer records across all names (for metrics).
    pub fn record_count(&self) -> usize {
        self.record_count
    }

    /// Iterates over `(relative labels, node)` pairs, shorter keys first.
    pub fn nodes(&self) -> impl Iterator<Item = (Labels<'_>, Node<'_>)> {
        self.names.iter()
    }

    /// Builds the names of `service` from its slices. `own_cluster` is this
    /// cluster's id when known: a local-first headless import's service
    /// name then answers with this cluster's endpoints first.
    pub fn build(
        service: &ImportedService,
        slices: &[&SliceEndpoints],
        settings: &ZoneSettings,
        own_cluster: Option<&str>,
    ) -> Self {
        let mut builder = Builder::default();
        match settings.service_name(&service.service) {
            Some(base) => match service.import_type {
                ServiceImportType::ClusterSetIp => {
                    builder.build_cluster_set_ip(&base, &service.ips, &service.ports, settings)
                }
                ServiceImportType::Headless => {
                    builder.build_headless(&base, service, slices, settings, own_cluster)
                }
            },
            // Not reachable through the model, which validates both labels.
            None => {
                tracing::error!(service = %service.service, "service has no DNS name; left out")
            }
        }
        let nodes: Vec<(LabelKey, BuiltNode)> = builder.nodes.into_iter().collect();
        let record_count = nodes
            .iter()
            .flat_map(|(_, n)| n.rrsets.iter())
            .map(|r| usize::from(r.wire.answer_count))
            .sum();
        Self {
            service: service.service.clone(),
            names: Names::pack(nodes),
            record_count,
        }
    }
}

impl Builder {
    fn build_cluster_set_ip(
        &mut self,
        base: &Name,
        ips: &[IpAddr],
        ports: &[Port],
        settings: &ZoneSettings,
    ) {
        let ttl = settings.ttl;
        let (a, aaaa) = address_records(base, ips.iter(), ttl);
        let glue: Vec<Record> = a.iter().chain(aaaa.iter()).cloned().collect();

        let mut apex = BuiltNode::default();
        apex.push(base, RecordType::A, a, vec![]);
        apex.push(base, RecordType::AAAA, aaaa, vec![]);
        if ips.is_empty() {
            // No clusterset IP yet: an SRV target without addresses would
            // send clients to a dead end, so the service has no SRV either.
            self.insert_with_parents(Vec::new(), apex);
            return;
        }
        // Bare-name SRV: one record per distinct port number (a TCP and a UDP
        // port with the same number give one record).
        let mut numbers: Vec<u16> = ports.iter().map(|p| p.port).collect();
        numbers.sort_unstable();
        numbers.dedup();
        let targets: Vec<(u16, Name)> = numbers.into_iter().map(|n| (n, base.clone())).collect();
        apex.push(
            base,
            RecordType::SRV,
            srv_records(base, &targets, ttl),
            glue.clone(),
        );
        self.insert_with_parents(Vec::new(), apex);

        for port in ports {
            let Some(name) = &port.name else { continue };
            let relative = vec![format!("_{name}"), port.protocol.srv_label().to_owned()];
            let Some(owner) = relative_owner(&relative, base) else {
                warn_name_too_long(&relative, base);
                continue;
            };
            let srv = srv_records(&owner, &[(port.port, base.clone())], ttl);
            let mut node = BuiltNode::default();
            node.push(&owner, RecordType::SRV, srv, glue.clone());
            self.insert_with_parents(relative, node);
        }
    }

    fn build_headless(
        &mut self,
        base: &Name,
        service: &ImportedService,
        slices: &[&SliceEndpoints],
        settings: &ZoneSettings,
        own_cluster: Option<&str>,
    ) {
        let ttl = settings.ttl;
        let ready = group_hosts(service, slices, |slice| &slice.endpoints);
        // Serving endpoints matter only when none is ready (the index
        // keeps them only with the fallback on).
        let serving = match ready.is_empty() && settings.serve_terminating {
            true => group_hosts(service, slices, |slice| &slice.serving),
            false => BTreeMap::new(),
        };
        let is_local = |cluster: &str| own_cluster == Some(cluster);
        let local = |hosts: &BTreeMap<(String, String), Host>| {
            hosts
                .keys()
                .filter(|(cluster, _)| is_local(cluster))
                .count()
        };
        let census = Census {
            ready: ready.len(),
            local_ready: local(&ready),
            serving: serving.len(),
            local_serving: local(&serving),
        };
        let local_first = service.locality.local_first() && own_cluster.is_some();
        let Some(choice) = choose(local_first, settings.serve_terminating, census) else {
            return; // no endpoint to answer with: the service name is NXDOMAIN
        };
        let hosts = if choice.serving { serving } else { ready };

        // Per-endpoint names carry all of that endpoint's addresses. An
        // endpoint whose name would exceed 255 bytes (a long dotted cluster
        // id) has no name and so no SRV record, but its addresses still
        // answer for the service name.
        let mut host_records = Vec::with_capacity(hosts.len());
        for ((cluster, label), host) in &hosts {
            let relative: Vec<String> = std::iter::once(label.clone())
                .chain(cluster.split('.').map(String::from))
                .collect();
            let owner = relative_owner(&relative, base);
            let (a, aaaa) = match &owner {
                Some(owner) => {
                    let (a, aaaa) = address_records(owner, host.addresses.iter(), ttl);
                    let mut node = BuiltNode::default();
                    node.push(owner, RecordType::A, a.clone(), vec![]);
                    node.push(owner, RecordType::AAAA, aaaa.clone(), vec![]);
                    self.insert_with_parents(relative, node);
                    (a, aaaa)
                }
                None => {
                    warn_name_too_long(&relative, base);
                    (Vec::new(), Vec::new())
                }
            };
            host_records.push(HostRecords {
                owner,
                host,
                local: is_local(cluster),
                a,
                aaaa,
            });
        }

        // The service name answers for a bounded subset of endpoints (this
        // cluster's only, when the choice says so), the same subset for A
        // and AAAA.
        let candidates: Vec<&HostRecords<'_>> = host_records
            .iter()
            .filter(|record| record.local || !choice.local)
            .collect();
        let mut take = candidates.len().min(settings.max_records);
        let mut apex = BuiltNode::default();
        loop {
            let hosts = candidates[..take].iter().map(|r| r.host);
            let (a, aaaa) = address_records(base, hosts.flat_map(|h| h.addresses.iter()), ttl);
            let a = (!a.is_empty()).then(|| BuiltRrSet::new(base, RecordType::A, a, vec![]));
            let aaaa =
                (!aaaa.is_empty()).then(|| BuiltRrSet::new(base, RecordType::AAAA, aaaa, vec![]));
            // Endpoints whose addresses all made it into both answers: the
            // subset shrinks to them if either answer was cut to fit one
            // DNS message, so that A and AAAA still hold the same subset.
            let hosts = candidates[..take].iter().map(|r| r.host);
            let fitting = whole_hosts(hosts, a.as_ref(), aaaa.as_ref())
                .take_while(|whole| *whole)
                .count();
            if fitting == take {
                apex.rrsets.extend(a.map(|r| r.with_tier(choice.apex)));
                apex.rrsets.extend(aaaa.map(|r| r.with_tier(choice.apex)));
                break;
            }
            tracing::warn!(
                name = %base,
                endpoints = take,
                kept = fitting,
                "headless answer cut to the endpoints that fit one DNS message (64 KiB) in both A and AAAA"
            );
            take = fitting;
        }
        // SRV answers for every cluster: the same subset as A and AAAA
        // unless those hold this cluster's endpoints only.
        let subset: Vec<&HostRecords<'_>> = match choice.local {
            true => host_records.iter().take(settings.max_records).collect(),
            false => candidates[..take].to_vec(),
        };

        // Bare-name SRV: one record per (endpoint, distinct port number).
        let mut targets = Vec::new();
        let mut glue = Vec::new();
        for record in &subset {
            let Some(owner) = &record.owner else { continue };
            let mut numbers: Vec<u16> = record.host.ports.iter().map(|p| p.port).collect();
            numbers.sort_unstable();
            numbers.dedup();
            targets.extend(numbers.into_iter().map(|n| (n, owner.clone())));
            glue.extend(record.a.iter().chain(record.aaaa.iter()).cloned());
        }
        targets.truncate(settings.max_records);
        apex.push(
            base,
            RecordType::SRV,
            srv_records(base, &targets, ttl),
            glue,
        );
        self.insert_with_parents(Vec::new(), apex);

        // Named-port SRV: one record per endpoint exposing that port.
        let mut named: BTreeMap<Vec<String>, (Vec<SrvTarget>, Vec<Record>)> = BTreeMap::new();
        for record in &subset {
            let Some(owner) = &record.owner else { continue };
            for port in &record.host.ports {
                let Some(name) = &port.name else { continue };
                let entry = named
                    .entry(vec![
                        format!("_{name}"),
                        port.protocol.srv_label().to_owned(),
                    ])
                    .or_default();
                entry.0.push((port.port, owner.clone()));
                entry
                    .1
                    .extend(record.a.iter().chain(record.aaaa.iter()).cloned());
            }
        }
        for (relative, (mut targets, glue)) in named {
            targets.truncate(settings.max_records);
            let Some(owner) = relative_owner(&relative, base) else {
                warn_name_too_long(&relative, base);
                continue;
            };
            let mut node = BuiltNode::default();
            node.push(
                &owner,
                RecordType::SRV,
                srv_records(&owner, &targets, ttl),
                glue,
            );
            self.insert_with_parents(relative, node);
        }

        // Under the serving fallback every name answers from serving
        // endpoints, and counts so (the service name's A and AAAA keep
        // their own tier).
        if let Some(tier) = choice.names {
            for (relative, node) in &mut self.nodes {
                for rrset in &mut node.rrsets {
                    let apex_address = relative.labels().next().is_none()
                        && matches!(rrset.rtype, RecordType::A | RecordType::AAAA);
                    if !apex_address {
                        rrset.tier = Some(tier);
                    }
                }
            }
        }
    }

    /// Inserts `node` at `relative` (labels, leftmost first) and an empty
    /// non-terminal for every label between it and the service name (`_tcp`
    /// for `_http._tcp`, `cluster-a` for `web-0.cluster-a`), so that those
    /// names answer NODATA, not NXDOMAIN. Labels come from validated names
    /// and [`relative_owner`] checked that they make a name.
    fn insert_with_parents(&mut self, relative: Vec<String>, node: BuiltNode) {
        let Some(key) = LabelKey::new(&relative) else {
            return;
        };
        for parent in 1..relative.len() {
            if let Some(parent) = LabelKey::new(&relative[parent..]) {
                self.nodes.entry(parent).or_default();
            }
        }
        self.nodes
            .entry(key)
            .or_default()
            .rrsets
            .extend(node.rrsets);
    }
}

/// `<relative>.<base>`, or `None` when that cannot be a name.
fn relative_owner(relative: &[String], base: &Name) -> Option<Name> {
    owner_name(relative.iter().map(String::as_bytes), base)
}

/// Names are built from validated labels, but labels of up to 63 bytes and
/// cluster ids of up to 253 can still add up to more than a name's 255
/// bytes, and a 63-character port name makes a 64-byte `_<port>` label:
/// such a name cannot exist in DNS, so it is left out of the zone, and said so.
fn warn_name_too_long(relative: &[String], base: &Name) {
    tracing::warn!(
        name = %format_args!("{}.{base}", relative.join(".")),
        "name left out of the zone: longer than 255 bytes, or a label longer than 63"
    );
}

/// For each host in order, whether all of its addresses are among the
/// records `a` and `aaaa` kept (they are written in host order, each
/// distinct address once, as [`address_records`] makes them).
fn whole_hosts<'h>(
    hosts: impl Iterator<Item = &'h Host> + 'h,
    a: Option<&BuiltRrSet>,
    aaaa: Option<&BuiltRrSet>,
) -> impl Iterator<Item = bool> + 'h {
    let kept = |rrset: Option<&BuiltRrSet>| rrset.map_or(0, |r| usize::from(r.wire.answer_count));
    let (kept_a, kept_aaaa) = (kept(a), kept(aaaa));
    let mut seen: HashSet<IpAddr, FastHash> = HashSet::default();
    let (mut count_a, mut count_aaaa) = (0, 0);
    hosts.map(move |host| {
        for ip in &host.addresses {
            if seen.insert(*ip) {
                match ip {
                    IpAddr::V4(_) => count_a += 1,
                    IpAddr::V6(_) => count_aaaa += 1,
                }
            }
        }
        count_a <= kept_a && count_aaaa <= kept_aaaa
    })
}

/// An SRV target: port number and target name.
type SrvTarget = (u16, Name);

#[derive(Default)]
struct Host {
    addresses: Vec<IpAddr>,
    ports: Vec<Port>,
}

/// One endpoint of a headless answer with its per-endpoint name and
/// records.
struct HostRecords<'h> {
    /// `<host>.<cluster>.<svc>…`; `None` when that is longer than a name.
    owner: Option<Name>,
    host: &'h Host,
    /// It is this cluster's.
    local: bool,
    a: Vec<Record>,
    aaaa: Vec<Record>,
}

/// The endpoints `pick` takes of each slice, grouped by (cluster, host
/// label): a dual-stack pod is one endpoint in the IPv4 slice and one in
/// the IPv6 slice, and both are the same per-endpoint name.
fn group_hosts(
    service: &ImportedService,
    slices: &[&SliceEndpoints],
    pick: impl Fn(&SliceEndpoints) -> &Endpoints,
) -> BTreeMap<(String, String), Host> {
    let mut hosts: BTreeMap<(String, String), Host> = BTreeMap::new();
    for slice in slices {
        let ports: &[Port] = if slice.ports.is_empty() {
            &service.ports
        } else {
            &slice.ports
        };
        for endpoint in pick(slice) {
            let Some(first) = endpoint.first() else {
                continue;
            };
            let label = endpoint
                .hostname()
                .map_or_else(|| dashed_address(&first), String::from);
            let host = hosts.entry((slice.cluster.to_string(), label)).or_default();
            for ip in endpoint.addresses() {
                if !host.addresses.contains(&ip) {
                    host.addresses.push(ip);
                }
            }
            for port in ports {
                if !host.ports.contains(port) {
                    host.ports.push(port.clone());
                }
            }
        }
    }
    hosts
}

/// A and AAAA records for `owner`, one per distinct address, in input order.
fn address_records<'a>(
    owner: &Name,
    ips: impl Iterator<Item = &'a IpAddr>,
    ttl: u32,
) -> (Vec<Record>, Vec<Record>) {
    let mut a = Vec::new();
    let mut aaaa = Vec::new();
    let mut seen: HashSet<IpAddr, FastHash> = HashSet::default();
    for ip in ips {
        if !seen.insert(*ip) {
            continue;
        }
        match ip {
            IpAddr::V4(v4) => a.push(Record::from_rdata(owner.clone(), ttl, RData::A(A(*v4)))),
            IpAddr::V6(v6) => aaaa.push(Record::from_rdata(
                owner.clone(),
                ttl,
                RData::AAAA(AAAA(*v6)),
            )),
        }
    }
    (a, aaaa)
}

/// SRV records in RFC 2782 field order. All share priority 0, and the weight
/// splits 100 evenly between them, as CoreDNS does.
fn srv_records(owner: &Name, targets: &[(u16, Name)], ttl: u32) -> Vec<Record> {
    let mut seen: HashSet<&(u16, Name), FastHash> = HashSet::default();
    let unique: Vec<&(u16, Name)> = targets.iter().filter(|t| seen.insert(*t)).collect();
    let weight = (100 / unique.len().max(1)) as u16;
    unique
        .into_iter()
        .map(|(port, target)| {
            Record::from_rdata(
                owner.clone(),
                ttl,
                RData::SRV(SRV::new(0, weight, *port, target.clone())),
            )
        })
        .collect()
}
