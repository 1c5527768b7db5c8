//! The two writers of a [`plan::Plan`] compared byte for byte, in process:
//! random queries over the example clusterset plus large headless services
//! go through the fast path's writer and through the hickory handler (the
//! path TCP, `--fast-path false` and unusual UDP queries take). Either the
//! two responses are the same bytes, or they differ for one of the reasons
//! listed in [`Difference`], and nothing else.

use std::net::SocketAddr;
use std::sync::Arc;

use hickory_proto::op::{Edns, Message, MessageType, Query};
use hickory_proto::rr::{Name, RecordType};

use super::Handler;
use super::wire_answer::{self, Fast, MAX_RESPONSE};
use crate::index::Index;
use crate::metrics::Metrics;
use crate::publish::ZoneHandle;
use crate::source::manifest;
use crate::zone::{Zone, ZoneSettings};

/// Why the two writers may give different bytes for one query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Difference {
    /// hickory's `MessageResponse` copies the question in without
    /// registering its name for compression, so the first owner name of the
    /// answer or authority section is written in full where the
    /// precompiled bytes point into the question (and hickory compresses
    /// at most 120 names per message): the same records in the same order,
    /// in more bytes. Responses without records are always identical.
    Compression,
    /// That longer encoding no longer fits the UDP limit the precompiled
    /// one fits: hickory drops the additional records, or sends TC, where
    /// the fast path does not. Only within the difference in size.
    NearTheLimit,
}

/// A deterministic xorshift generator: the same queries on every run.
struct Random(u64);

impl Random {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

fn zone() -> Zone {
    let mut text = include_str!("../../config/example-clusterset.yaml").to_owned();
    for (name, count) in [("wide", 40), ("huge", 400)] {
        text.push_str(&big_headless(name, count));
    }
    let parsed = manifest::parse(&text).expect("the example and fixtures parse");
    let mut index = Index::new(ZoneSettings::new(
        Name::from_ascii("clusterset.local.").unwrap(),
    ));
    index.reset_imports(parsed.imports);
    index.reset_slices(parsed.slices);
    index.publish().0
}

/// A dual-stack headless service in `shop` with `count` named endpoints.
fn big_headless(name: &str, count: usize) -> String {
    let mut out = format!(
        "---\napiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceImport\nmetadata: {{name: {name}, namespace: shop}}\nspec: {{type: Headless, ports: [{{name: http, port: 80, protocol: TCP}}]}}\n"
    );
    for (family, address) in [("IPv4", "10.77.{hi}.{lo}"), ("IPv6", "fd77::{hi}:{lo}")] {
        out.push_str(&format!(
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}-{family}\n  namespace: shop\n  labels: {{multicluster.kubernetes.io/service-name: {name}, multicluster.kubernetes.io/source-cluster: cluster-a}}\naddressType: {family}\nports: [{{name: http, port: 80, protocol: TCP}}]\nendpoints:\n"
        ));
        for i in 0..count {
            let ip = address
                .replace("{hi}", &(i / 200).to_string())
                .replace("{lo}", &(i % 200 + 1).to_string());
            out.push_str(&format!("- addresses: [\"{ip}\"]\n  hostname: h-{i}\n"));
        }
    }
    out
}

/// Names to ask for: every owner name of the zone, some that do not exist
/// and some outside it.
fn names(zone: &Zone) -> Vec<String> {
    let mut names: Vec<String> = [
        "clusterset.local.",
        "dns-version.clusterset.local.",
        "dns.clusterset.local.",
        "svc.clusterset.local.",
        "shop.svc.clusterset.local.",
        "nope.shop.svc.clusterset.local.",
        "x.y.nope.svc.clusterset.local.",
        "_x._tcp.web.shop.svc.clusterset.local.",
        "example.com.",
        "local.",
    ]
    .map(String::from)
    .into();
    for service in zone.services() {
        let base = format!(
            "{}.{}.svc.clusterset.local.",
            service.service().name,
            service.service().namespace
        );
        for (relative, _) in service.nodes() {
            let relative = relative.dotted();
            names.push(if relative.is_empty() {
                base.clone()
            } else {
                format!("{relative}.{base}")
            });
        }
    }
    names.sort();
    names
}

fn query(random: &mut Random, names: &[String]) -> Vec<u8> {
    const TYPES: [RecordType; 9] = [
        RecordType::A,
        RecordType::AAAA,
        RecordType::SRV,
        RecordType::TXT,
        RecordType::SOA,
        RecordType::NS,
        RecordType::ANY,
        RecordType::PTR,
        RecordType::CAA,
    ];
    let name: String = names[random.below(names.len())]
        .chars()
        .map(|c| {
            if random.below(3) == 0 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect();
    let mut message = Message::query();
    message.metadata.id = random.below(65536) as u16;
    message.metadata.recursion_desired = random.below(2) == 0;
    message.metadata.checking_disabled = random.below(4) == 0;
    message.add_query(Query::query(
        Name::from_ascii(&name).unwrap(),
        TYPES[random.below(TYPES.len())],
    ));
    if random.below(4) != 0 {
        let mut edns = Edns::new();
        edns.set_max_payload([512, 1000, 1232, 1400, 4096][random.below(5)]);
        edns.set_dnssec_ok(random.below(3) == 0);
        message.set_edns(edns);
    }
    message.to_vec().unwrap()
}

/// Parsed responses with names lower-cased, so that only the records count.
fn records(bytes: &[u8]) -> Message {
    let mut message = Message::from_vec(bytes).expect("a response parses");
    for record in message
        .answers
        .iter_mut()
        .chain(message.authorities.iter_mut())
        .chain(message.additionals.iter_mut())
    {
        record.name = record.name.to_lowercase();
    }
    message
}

fn classify(fast: &[u8], hickory: &[u8]) -> Result<Difference, String> {
    let (f, h) = (records(fast), records(hickory));
    let has_records = !f.answers.is_empty() || !f.authorities.is_empty();
    if f == h && has_records && hickory.len() > fast.len() {
        return Ok(Difference::Compression);
    }
    // hickory gave up more of the response, and only because of its size.
    let gave_up_more = h.metadata.message_type == MessageType::Response
        && h.metadata.response_code == f.metadata.response_code
        && ((h.additionals.is_empty() && h.answers == f.answers)
            || (h.metadata.truncation && h.answers.is_empty()));
    if gave_up_more && hickory.len() <= fast.len() + 600 {
        return Ok(Difference::NearTheLimit);
    }
    Err(format!("fast: {f:?}\nhickory: {h:?}"))
}

#[test]
fn both_writers_give_the_same_bytes_or_a_listed_reason() {
    let zone = zone();
    let handle = ZoneHandle::new();
    handle.store(zone.clone());
    let handler = Handler::new(handle, Arc::new(Metrics::new()));
    let names = names(&zone);
    let source: SocketAddr = "127.0.0.1:5300".parse().unwrap();
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    let (mut identical, mut differences) = (0, std::collections::BTreeMap::new());
    let mut fast_out = [0u8; MAX_RESPONSE];
    let mut hickory_out = [0u8; MAX_RESPONSE];
    for _ in 0..5000 {
        let query = query(&mut random, &names);
        let Fast::Reply { len, .. } = wire_answer::answer(&zone, &query, &mut fast_out) else {
            panic!("the fast path declined {:?}", records(&query).queries);
        };
        let hickory_len = super::udp::slow_path(&handler, &query, source, &mut hickory_out)
            .expect("the hickory path answers");
        let (fast, hickory) = (&fast_out[..len], &hickory_out[..hickory_len]);
        if fast == hickory {
            identical += 1;
            continue;
        }
        match classify(fast, hickory) {
            Ok(reason) => *differences.entry(reason).or_insert(0) += 1,
            Err(what) => panic!(
                "unexplained difference for {:?}:\n{what}",
                records(&query).queries
            ),
        }
    }
    eprintln!("identical: {identical}, differences: {differences:?}");
    // REFUSED for the names outside the zone, at least.
    assert!(identical > 0, "no response was byte-identical");
}
