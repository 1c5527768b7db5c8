//! The UDP fast path answers exactly as the hickory path: the same raw
//! query goes to a fast-path server and to a hickory-path server serving the
//! same manifest, and the parsed responses must match in every header flag,
//! the rcode, the question and every record with its TTL.
//!
//! Both paths write the same precompiled records, whose owner names point
//! into the question and so echo its letter case; names still compare
//! case-insensitively (as hickory's `Name` equality does, RFC 4343). The
//! question itself must be echoed exactly. The SOA serial is the publish
//! time of each server and is masked.

mod dns_server;
mod support;

use std::collections::BTreeSet;

use clusterset_dns::index::Index;
use clusterset_dns::source::manifest;
use clusterset_dns::zone::ZoneSettings;
use dns_server::{
    EXAMPLE, Options, TestServer, UdpClient, big_headless, decode, describe, encode, read_metric,
    repo_path,
};
use hickory_proto::op::{Edns, Message};
use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
use hickory_proto::rr::{Name, RData, RecordType};

const HITS: &str = "clusterset_dns_udp_fast_path_hits_total";

/// Every owner name of the zone built from `yaml`, plus the apex names and
/// empty non-terminals the server answers for.
fn zone_names(yaml: &str) -> BTreeSet<String> {
    let parsed = manifest::parse(yaml).expect("fixture parses");
    let mut index = Index::new(ZoneSettings::new(
        Name::from_ascii("clusterset.local.").unwrap(),
    ));
    index.reset_imports(parsed.imports);
    index.reset_slices(parsed.slices);
    let (zone, _) = index.publish();
    let mut names: BTreeSet<String> = [
        "clusterset.local.",
        "dns-version.clusterset.local.",
        "dns.clusterset.local.",
        "ns.dns.clusterset.local.",
        "svc.clusterset.local.",
    ]
    .map(String::from)
    .into();
    for service_zone in zone.services() {
        let service = service_zone.service();
        let namespace = &service.namespace;
        names.insert(format!("{namespace}.svc.clusterset.local."));
        for (relative, _) in service_zone.nodes() {
            let relative = relative.dotted();
            let dot = if relative.is_empty() { "" } else { "." };
            names.insert(format!(
                "{relative}{dot}{}.{namespace}.svc.clusterset.local.",
                service.name
            ));
        }
    }
    names
}

/// Names that do not exist or lie outside the zone.
const MISSING: &[&str] = &[
    "nope.shop.svc.clusterset.local.",
    "nope.svc.clusterset.local.",
    "jobs.svc.clusterset.local.",
    "batch.jobs.svc.clusterset.local.",
    "db-1.cluster-west.db.shop.svc.clusterset.local.",
    "cluster-east.web.shop.svc.clusterset.local.",
    "_http._udp.web.shop.svc.clusterset.local.",
    "a.b.c.db-0.cluster-east.db.shop.svc.clusterset.local.",
    "x.dns-version.clusterset.local.",
    "foo.clusterset.local.",
    "example.com.",
    "local.",
    ".",
    "clusterset.local.example.com.",
    "10.10.96.10.in-addr.arpa.",
];

const TYPES: &[RecordType] = &[
    RecordType::A,
    RecordType::AAAA,
    RecordType::SRV,
    RecordType::TXT,
    RecordType::NS,
    RecordType::SOA,
    RecordType::ANY,
    RecordType::MX,
];

/// `name` with every other letter upper-cased.
fn mixed_case(name: &str) -> String {
    name.chars()
        .enumerate()
        .map(|(i, c)| {
            if i % 2 == 0 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

fn edns(payload: u16) -> Edns {
    let mut edns = Edns::new();
    edns.set_max_payload(payload);
    edns
}

fn with_edns(name: &str, rtype: RecordType, edns: Option<Edns>) -> Message {
    let mut message = dns_server::query(name, rtype);
    if let Some(edns) = edns {
        message.set_edns(edns);
    }
    message
}

/// Every query of the comparison: `(description, message)`. Each name in
/// lower case gets every type without EDNS and with EDNS 512, 1232 and
/// 4096; in mixed case every type without EDNS and with 1232.
fn queries(names: &BTreeSet<String>, types: &[RecordType]) -> Vec<(String, Message)> {
    let mut out = Vec::new();
    let all_names = names
        .iter()
        .cloned()
        .chain(MISSING.iter().map(|s| s.to_string()));
    for name in all_names {
        for &rtype in types {
            out.push((format!("{name} {rtype}"), with_edns(&name, rtype, None)));
            for payload in [512, 1232, 4096] {
                out.push((
                    format!("{name} {rtype} EDNS {payload}"),
                    with_edns(&name, rtype, Some(edns(payload))),
                ));
            }
            if name != "." {
                let mixed = mixed_case(&name);
                out.push((format!("{mixed} {rtype}"), with_edns(&mixed, rtype, None)));
                out.push((
                    format!("{mixed} {rtype} EDNS 1232"),
                    with_edns(&mixed, rtype, Some(edns(1232))),
                ));
            }
        }
    }
    out
}

/// Rarer query shapes on a few names: other types, EDNS options (a
/// client cookie, a client subnet, NSID) and the DO bit, which the server
/// must ignore, and header flags RD clear, CD set, AD set.
fn unusual_queries() -> Vec<(String, Message)> {
    let mut out = Vec::new();
    let names = [
        "web.shop.svc.clusterset.local.",
        "_postgres._tcp.db.shop.svc.clusterset.local.",
        "nope.shop.svc.clusterset.local.",
        "example.com.",
    ];
    for name in names {
        for rtype in [RecordType::PTR, RecordType::CNAME, RecordType::CAA] {
            out.push((format!("{name} {rtype}"), with_edns(name, rtype, None)));
        }
        let mut cookie = edns(1232);
        cookie
            .options_mut()
            .insert(EdnsOption::Unknown(EdnsCode::Cookie.into(), vec![7; 8]));
        let mut dnssec_ok = edns(1232);
        dnssec_ok.set_dnssec_ok(true);
        // Options hickory's decoder reads rather than carries: a client
        // subnet (10.1.2.0/24) and an NSID request. The fast path checks
        // their form itself (broken ones: tests/protocol.rs).
        let mut subnet = edns(1232);
        subnet.options_mut().insert(EdnsOption::Unknown(
            EdnsCode::Subnet.into(),
            vec![0, 1, 24, 0, 10, 1, 2],
        ));
        let mut nsid = edns(1232);
        nsid.options_mut()
            .insert(EdnsOption::Unknown(EdnsCode::NSID.into(), vec![]));
        for (what, edns) in [
            ("cookie", cookie),
            ("DO", dnssec_ok),
            ("client subnet", subnet),
            ("NSID", nsid),
        ] {
            for rtype in [RecordType::A, RecordType::SRV] {
                out.push((
                    format!("{name} {rtype} EDNS {what}"),
                    with_edns(name, rtype, Some(edns.clone())),
                ));
            }
        }
        for flags in ["rd=0", "cd=1", "ad=1"] {
            let mut message = dns_server::query(name, RecordType::A);
            match flags {
                "rd=0" => message.metadata.recursion_desired = false,
                "cd=1" => message.metadata.checking_disabled = true,
                _ => message.metadata.authentic_data = true,
            }
            out.push((format!("{name} A {flags}"), message));
        }
    }
    out
}

/// Masks what legitimately differs between two servers: the ID (we send
/// the same one anyway) and the SOA serial (each server's publish time).
fn normalise(mut message: Message) -> Message {
    message.metadata.id = 0;
    for record in message
        .answers
        .iter_mut()
        .chain(message.authorities.iter_mut())
        .chain(message.additionals.iter_mut())
    {
        if let RData::SOA(soa) = &mut record.data {
            soa.serial = 0;
        }
    }
    message
}

/// Sends every query to both servers; returns the mismatches. Eight
/// client pairs work through the list concurrently to keep the test fast.
async fn compare(
    fast: &TestServer,
    hickory: &TestServer,
    queries: &[(String, Message)],
) -> Vec<String> {
    const CLIENTS: usize = 8;
    let servers = [fast.dns(), hickory.dns()];
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..CLIENTS {
        let mine: Vec<(usize, String, Message)> = queries
            .iter()
            .enumerate()
            .filter(|(i, _)| i % CLIENTS == worker)
            .map(|(i, (what, message))| (i, what.clone(), message.clone()))
            .collect();
        tasks.spawn(async move {
            let clients = [
                UdpClient::connect(servers[0]).await,
                UdpClient::connect(servers[1]).await,
            ];
            let mut mismatches = Vec::new();
            for (i, what, message) in mine {
                if let Some(mismatch) = compare_one(&clients, i, &what, &message).await {
                    mismatches.push((i, mismatch));
                }
            }
            mismatches
        });
    }
    let mut mismatches = Vec::new();
    while let Some(result) = tasks.join_next().await {
        mismatches.extend(result.expect("comparison task panicked"));
    }
    mismatches.sort();
    mismatches.into_iter().map(|(_, m)| m).collect()
}

async fn compare_one(
    clients: &[UdpClient; 2],
    i: usize,
    what: &str,
    message: &Message,
) -> Option<String> {
    let bytes = encode(message);
    let mut replies = Vec::new();
    for client in clients {
        let reply = client
            .exchange_raw(&bytes)
            .await
            .unwrap_or_else(|| panic!("query #{i} {what}: no reply"));
        assert_eq!(reply[..2], bytes[..2], "query #{i} {what}: ID");
        replies.push(normalise(decode(&reply, what)));
    }
    let (f, h) = (&replies[0], &replies[1]);
    // `==` is hickory's DNS equality; `describe` adds TTLs, record order
    // and the exact question.
    (f != h || describe(f) != describe(h)).then(|| {
        format!(
            "query #{i} {what}:\n--- fast path\n{}--- hickory path\n{}",
            describe(f),
            describe(h)
        )
    })
}

/// The fast path answers every example-zone query exactly as hickory, and counts its hits.
#[tokio::test(flavor = "multi_thread")]
async fn fast_path_answers_match_the_hickory_path_for_the_example_zone() {
    let yaml = std::fs::read_to_string(repo_path(EXAMPLE)).expect("read example");
    let names = zone_names(&yaml);
    assert!(names.len() >= 25, "example zone names: {names:?}");
    let mut queries = queries(&names, TYPES);
    queries.extend(unusual_queries());

    let fast = TestServer::from_file(EXAMPLE, Options::fast_path(true)).await;
    let hickory = TestServer::from_file(EXAMPLE, Options::fast_path(false)).await;
    let hits_before = read_metric(fast.admin(), HITS).await;
    let mismatches = compare(&fast, &hickory, &queries).await;
    let hits = read_metric(fast.admin(), HITS).await - hits_before;
    let hickory_hits = read_metric(hickory.admin(), HITS).await;
    fast.stop().await;
    hickory.stop().await;

    assert!(
        mismatches.is_empty(),
        "{} of {} queries differ:\n{}",
        mismatches.len(),
        queries.len(),
        mismatches.join("\n")
    );
    // Only fast-path-eligible queries count; most of the table is.
    assert!(
        hits >= queries.len() as f64 / 2.0,
        "fast path served {hits} of {} queries",
        queries.len()
    );
    assert_eq!(
        hickory_hits, 0.0,
        "the hickory-path server has no fast path"
    );
}

/// Truncated and glue-dropping answers leave the fast path and still match hickory.
#[tokio::test(flavor = "multi_thread")]
async fn fast_path_matches_hickory_for_truncated_and_glue_dropping_answers() {
    let yaml = [
        big_headless("shop", "big", 20, 200, true),
        big_headless("shop", "mid", 21, 60, false),
        big_headless("shop", "six", 22, 6, false),
    ]
    .concat();
    // The per-endpoint names are covered by the example zone; keep one.
    let names: BTreeSet<String> = zone_names(&yaml)
        .into_iter()
        .filter(|n| !n.starts_with("h-") || n.starts_with("h-000."))
        .collect();
    let sized = [
        RecordType::A,
        RecordType::AAAA,
        RecordType::SRV,
        RecordType::ANY,
    ];
    let queries = queries(&names, &sized);
    let fast = TestServer::from_yaml(&yaml, Options::fast_path(true)).await;
    let hickory = TestServer::from_yaml(&yaml, Options::fast_path(false)).await;
    let mismatches = compare(&fast, &hickory, &queries).await;
    fast.stop().await;
    hickory.stop().await;
    assert!(
        mismatches.is_empty(),
        "{} of {} queries differ:\n{}",
        mismatches.len(),
        queries.len(),
        mismatches.join("\n")
    );
}

/// Answers near the 512-byte limit: one headless service per hostname
/// length, so that its SRV answer crosses 512 bytes somewhere in the sweep,
/// first with its glue, then without. On both paths an answer is either
/// whole or empty with TC (never a partial RRset), the glue is all there or
/// all gone, and TC is never set for dropped glue alone (RFC 2181 §9). Both
/// paths keep exactly what fits: the hickory path (`--fast-path false`)
/// writes the same precompiled bytes as the fast path.
#[tokio::test(flavor = "multi_thread")]
async fn answers_near_the_udp_limit_are_whole_or_empty_with_tc() {
    const SERVICES: usize = 56;
    const ENDPOINTS: usize = 4;
    // A long cluster name makes each SRV target long; the hostname length
    // (8 to 63 bytes) moves the answer across the limit.
    let cluster = format!("cluster-{}", "a".repeat(22));
    let mut yaml = String::new();
    for n in 0..SERVICES {
        let service = format!("s{n:02}");
        yaml.push_str(&dns_server::headless_import("shop", &service, "http", 80));
        let host = |i: usize| Some(format!("{}{i}", "h".repeat(7 + n)));
        let endpoints: Vec<_> = (0..ENDPOINTS)
            .map(|i| (host(i), dns_server::v4(n as u8, i), true))
            .collect();
        yaml.push_str(&dns_server::slice(
            "shop", &service, &cluster, "IPv4", &endpoints,
        ));
    }
    let fast = TestServer::from_yaml(&yaml, Options::fast_path(true)).await;
    let hickory = TestServer::from_yaml(&yaml, Options::fast_path(false)).await;
    // Per path: answers sent with glue, without glue, and truncated.
    let mut counts = [[0usize; 3]; 2];
    let mut compact = Vec::new();
    for n in 0..SERVICES {
        let name = format!("_http._tcp.s{n:02}.shop.svc.clusterset.local.");
        let query = dns_server::query(&name, RecordType::SRV);
        let over_tcp =
            dns_server::exchange(hickory.dns(), dns_server::Transport::Tcp, &query).await;
        assert_eq!(over_tcp.answers.len(), ENDPOINTS, "{name}: TCP answers");
        assert_eq!(over_tcp.additionals.len(), ENDPOINTS, "{name}: TCP glue");
        // The compact size: every name compressed wherever it can be.
        let mut answers_only = over_tcp.clone();
        answers_only.additionals.clear();
        let sizes = [encode(&over_tcp).len(), encode(&answers_only).len()];
        compact.push(sizes[0]);
        let mut replies = Vec::new();
        for (path, server) in [("fast", fast.dns()), ("hickory", hickory.dns())] {
            let client = UdpClient::connect(server).await;
            let reply = client.exchange_raw(&encode(&query)).await.expect("a reply");
            assert!(
                reply.len() <= 512,
                "{path} path, {name}: {} bytes",
                reply.len()
            );
            let reply = decode(&reply, &name);
            let what = format!(
                "{path} path, {name} ({sizes:?} bytes compact):\n{}",
                describe(&reply)
            );
            let kept = match (
                reply.metadata.truncation,
                reply.answers.len(),
                reply.additionals.len(),
            ) {
                (false, ENDPOINTS, ENDPOINTS) => 0,
                (false, ENDPOINTS, 0) => 1,
                (true, 0, 0) => 2,
                _ => panic!("{what}partial answer or glue"),
            };
            if kept < 2 {
                assert_eq!(
                    dns_server::sorted(&reply.answers),
                    dns_server::sorted(&over_tcp.answers),
                    "{what}"
                );
            }
            replies.push(kept);
        }
        let fast_kept = replies[0];
        let expected = if sizes[0] <= 512 {
            0
        } else if sizes[1] <= 512 {
            1
        } else {
            2
        };
        assert_eq!(
            fast_kept, expected,
            "fast path, {name}: {sizes:?} bytes compact"
        );
        assert_eq!(
            replies[1], fast_kept,
            "{name}: the paths kept different parts [glue, no glue, TC]"
        );
        counts[0][fast_kept] += 1;
        counts[1][replies[1]] += 1;
    }
    fast.stop().await;
    hickory.stop().await;
    // The sweep must cross both limits for the test to mean anything.
    assert!(
        counts[0].iter().all(|&c| c > 0),
        "fast path [glue, no glue, TC]: {:?}",
        counts[0]
    );
    println!(
        "{SERVICES} answers of {}..={} bytes compact; [with glue, without glue, TC]: \
         fast path {:?}, hickory path {:?}",
        compact.iter().min().unwrap(),
        compact.iter().max().unwrap(),
        counts[0],
        counts[1]
    );
}
