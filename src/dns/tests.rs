//! The two paths of a [`plan::Plan`] compared byte for byte, in process:
//! random queries over the example clusterset plus large headless services
//! go through the fast path and through the hickory handler (the path TCP,
//! `--fast-path false` and unusual UDP queries take). Both write the
//! precompiled bytes, so the responses must be the same bytes.

use std::net::SocketAddr;
use std::sync::Arc;

use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::{Name, RecordType};

use super::Handler;
use super::fast_path::{self, Fast, MAX_RESPONSE};
use crate::index::Index;
use crate::metrics::Metrics;
use crate::publish::ZoneHandle;
use crate::source::manifest;
use crate::zone::{Zone, ZoneSettings};

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

#[test]
fn both_paths_give_the_same_bytes() {
    let zone = zone();
    let handle = ZoneHandle::new();
    handle.store(zone.clone());
    let handler = Handler::new(handle, Arc::new(Metrics::new()));
    let names = names(&zone);
    let source: SocketAddr = "127.0.0.1:5300".parse().unwrap();
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    let mut fast_out = [0u8; MAX_RESPONSE];
    let mut hickory_out = [0u8; MAX_RESPONSE];
    let mut with_records = 0;
    for _ in 0..5000 {
        let query = query(&mut random, &names);
        let Fast::Reply { len, .. } = fast_path::answer(&zone, &query, &mut fast_out) else {
            panic!("the fast path declined {:?}", Message::from_vec(&query));
        };
        let hickory_len = super::udp::slow_path(&handler, &query, source, &mut hickory_out)
            .expect("the hickory path answers");
        let (fast, hickory) = (&fast_out[..len], &hickory_out[..hickory_len]);
        assert_eq!(
            fast,
            hickory,
            "different bytes for {:?}:\nfast: {:?}\nhickory: {:?}",
            Message::from_vec(&query).map(|m| m.queries),
            Message::from_vec(fast),
            Message::from_vec(hickory)
        );
        let counts = |i: usize| u16::from_be_bytes([fast[i], fast[i + 1]]);
        with_records += usize::from(counts(6) + counts(8) > 0);
    }
    // Not only REFUSED and other errors: answers and negative answers too.
    assert!(
        with_records > 2500,
        "{with_records} responses carry records"
    );
}
