//! Protocol edge cases on the wire: EDNS, truncation and TCP fallback, the
//! additional section, BADVERS, opcodes, malformed packets and the
//! `max_records` cap. Each runs against a fast-path and a hickory-path
//! server unless it is about one of them.

mod dns_server;
mod support;

use std::collections::BTreeSet;
use std::net::IpAddr;

use dns_server::{
    EXAMPLE, NO_REPLY_WAIT, Options, QUERY_TIMEOUT, TestServer, Transport, big_headless, decode,
    encode, exchange, exchange_sized, query, query_edns, tcp_raw, udp_raw, v4, v6,
};
use hickory_proto::op::{OpCode, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};

/// 200 ready IPv4 endpoints (too many for any UDP answer), 60 (fit 1232
/// bytes but not 512), and 6 (whose SRV answer fits 512 bytes only without glue).
fn large_fixture() -> String {
    [
        big_headless("shop", "big", 20, 200, false),
        big_headless("shop", "mid", 21, 60, false),
        big_headless("shop", "six", 22, 6, false),
    ]
    .concat()
}

/// Only the 60-endpoint service: enough for tests about one normal answer.
fn mid_fixture() -> String {
    big_headless("shop", "mid", 21, 60, false)
}

async fn both_paths(yaml: &str, options: Options) -> [(&'static str, TestServer); 2] {
    [
        (
            "fast path",
            TestServer::from_yaml(
                yaml,
                Options {
                    fast_path: true,
                    ..options
                },
            )
            .await,
        ),
        (
            "hickory path",
            TestServer::from_yaml(
                yaml,
                Options {
                    fast_path: false,
                    ..options
                },
            )
            .await,
        ),
    ]
}

/// The example clusterset served by a fast-path and a hickory-path server.
async fn example_on_both_paths() -> [(&'static str, TestServer); 2] {
    [
        (
            "fast path",
            TestServer::from_file(EXAMPLE, Options::fast_path(true)).await,
        ),
        (
            "hickory path",
            TestServer::from_file(EXAMPLE, Options::fast_path(false)).await,
        ),
    ]
}

async fn stop_all(servers: [(&'static str, TestServer); 2]) {
    for (_, server) in servers {
        server.stop().await;
    }
}

fn addresses(records: &[Record]) -> BTreeSet<IpAddr> {
    records
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            RData::AAAA(a) => Some(IpAddr::V6(a.0)),
            _ => None,
        })
        .collect()
}

/// EDNS queries get an OPT record of version 0 advertising our own 1232
/// bytes, whatever size the query offered (RFC 6891 §6.2.3).
#[tokio::test(flavor = "multi_thread")]
async fn responses_to_edns_queries_carry_opt_advertising_1232() {
    let servers = example_on_both_paths().await;
    for (path, server) in &servers {
        for payload in [0, 512, 1232, 1400, 4096, 65535] {
            for name in [
                "web.shop.svc.clusterset.local.",
                "nope.shop.svc.clusterset.local.",
                "example.com.",
            ] {
                for transport in [Transport::Udp, Transport::Tcp] {
                    let q = query_edns(name, RecordType::A, payload, 0);
                    let response = exchange(server.dns(), transport, &q).await;
                    let edns = response.edns.as_ref().unwrap_or_else(|| {
                        panic!("{path} {transport:?} {name} payload {payload}: no OPT")
                    });
                    assert_eq!(
                        edns.max_payload(),
                        1232,
                        "{path} {transport:?} {name}: OPT payload for offered {payload}"
                    );
                    assert_eq!(edns.version(), 0, "{path} {transport:?} {name}");
                }
            }
        }
    }
    stop_all(servers).await;
}

/// Answers over 512 bytes go out empty with TC over plain UDP; TCP returns every record with TC clear.
#[tokio::test(flavor = "multi_thread")]
async fn oversized_udp_answers_set_tc_and_tcp_returns_every_record() {
    let servers = both_paths(&large_fixture(), Options::fast_path(true)).await;
    let all: BTreeSet<IpAddr> = (0..200).map(|i| v4(20, i).parse().unwrap()).collect();
    for (path, server) in &servers {
        for (name, rtype) in [
            ("big.shop.svc.clusterset.local.", RecordType::A),
            ("big.shop.svc.clusterset.local.", RecordType::SRV),
            ("_http._tcp.big.shop.svc.clusterset.local.", RecordType::SRV),
        ] {
            let q = query(name, rtype);
            let (udp, udp_len) = exchange_sized(server.dns(), Transport::Udp, &q).await;
            assert!(
                udp.metadata.truncation,
                "{path} {name} {rtype}: TC over UDP"
            );
            assert!(udp_len <= 512, "{path} {name} {rtype}: {udp_len} bytes");
            assert_eq!(udp.metadata.response_code, ResponseCode::NoError);
            // No partial RRset: the client retries over TCP anyway.
            assert!(
                udp.answers.is_empty() && udp.additionals.is_empty(),
                "{path} {name} {rtype}: truncated answer has records"
            );

            let tcp = exchange(server.dns(), Transport::Tcp, &q).await;
            assert!(
                !tcp.metadata.truncation,
                "{path} {name} {rtype}: TC over TCP"
            );
            assert_eq!(tcp.answers.len(), 200, "{path} {name} {rtype} over TCP");
            if rtype == RecordType::A {
                assert_eq!(addresses(&tcp.answers), all, "{path} {name}");
            } else {
                assert_eq!(addresses(&tcp.additionals), all, "{path} {name} glue");
            }
        }
    }
    stop_all(servers).await;
}

/// EDNS raises the UDP limit to the offered size, capped at 1232 bytes.
#[tokio::test(flavor = "multi_thread")]
async fn edns_raises_the_udp_limit_up_to_1232_bytes() {
    let servers = both_paths(&large_fixture(), Options::fast_path(true)).await;
    let mid = "mid.shop.svc.clusterset.local.";
    for (path, server) in &servers {
        let plain = exchange(server.dns(), Transport::Udp, &query(mid, RecordType::A)).await;
        assert!(plain.metadata.truncation, "{path}: 60 records in 512 bytes");
        // Offers below 512 count as 512; we advertise 1232 but send no more
        // than the client offered.
        for payload in [0, 300, 512] {
            let q = query_edns(mid, RecordType::A, payload, 0);
            let (r, len) = exchange_sized(server.dns(), Transport::Udp, &q).await;
            assert!(r.metadata.truncation, "{path} EDNS {payload}: TC");
            assert!(len <= 512, "{path} EDNS {payload}: {len} bytes");
        }

        for payload in [1232, 4096] {
            let q = query_edns(mid, RecordType::A, payload, 0);
            let (r, len) = exchange_sized(server.dns(), Transport::Udp, &q).await;
            assert!(!r.metadata.truncation, "{path} EDNS {payload}: TC");
            assert_eq!(r.answers.len(), 60, "{path} EDNS {payload}");
            assert!(
                len > 512 && len <= 1232,
                "{path} EDNS {payload}: {len} bytes"
            );
        }

        let big = query_edns("big.shop.svc.clusterset.local.", RecordType::A, 4096, 0);
        let (r, len) = exchange_sized(server.dns(), Transport::Udp, &big).await;
        assert!(r.metadata.truncation, "{path}: 200 records with EDNS 4096");
        assert!(len <= 1232, "{path}: {len} bytes with EDNS 4096");
        let edns = r
            .edns
            .as_ref()
            .unwrap_or_else(|| panic!("{path}: truncated EDNS response without OPT"));
        assert_eq!(edns.max_payload(), 1232, "{path}");
    }
    stop_all(servers).await;
}

/// Glue that does not fit is dropped and TC stays clear while the answers fit.
#[tokio::test(flavor = "multi_thread")]
async fn additional_records_are_dropped_before_answers_are_truncated() {
    let servers = both_paths(&large_fixture(), Options::fast_path(true)).await;
    let name = "_http._tcp.six.shop.svc.clusterset.local.";
    for (path, server) in &servers {
        let q = query(name, RecordType::SRV);
        let (full, full_len) = exchange_sized(server.dns(), Transport::Tcp, &q).await;
        assert_eq!(full.answers.len(), 6, "{path}");
        assert_eq!(full.additionals.len(), 6, "{path}: glue over TCP");
        let mut answers_only = full.clone();
        answers_only.additionals.clear();
        let answers_len = encode(&answers_only).len();
        assert!(
            answers_len <= 512 && full_len > 512,
            "fixture must need dropping: answers {answers_len} bytes, full {full_len}"
        );

        let udp = exchange(server.dns(), Transport::Udp, &q).await;
        assert!(!udp.metadata.truncation, "{path}: TC set");
        assert_eq!(udp.answers, full.answers, "{path}: answers");
        assert!(udp.additionals.is_empty(), "{path}: glue kept");

        let edns = exchange(
            server.dns(),
            Transport::Udp,
            &query_edns(name, RecordType::SRV, 1232, 0),
        )
        .await;
        assert_eq!(edns.additionals.len(), 6, "{path}: glue with EDNS 1232");
    }
    stop_all(servers).await;
}

/// EDNS version 1 gets BADVERS (extended rcode 16) with a version 0 OPT record.
#[tokio::test(flavor = "multi_thread")]
async fn edns_version_1_gets_badvers() {
    let servers = both_paths(&mid_fixture(), Options::fast_path(true)).await;
    for (path, server) in &servers {
        for transport in [Transport::Udp, Transport::Tcp] {
            let q = query_edns("mid.shop.svc.clusterset.local.", RecordType::A, 1232, 1);
            let r = exchange(server.dns(), transport, &q).await;
            // hickory decodes 16 as BADSIG (TSIG) or BADVERS (EDNS): same number.
            assert_eq!(
                u16::from(r.metadata.response_code),
                16,
                "{path} {transport:?}: {}",
                r.metadata.response_code
            );
            assert!(r.answers.is_empty(), "{path} {transport:?}");
            let edns = r.edns.as_ref().expect("BADVERS needs an OPT record");
            assert_eq!(edns.version(), 0, "{path} {transport:?}");
        }
    }
    stop_all(servers).await;
}

/// NOTIFY, STATUS and UPDATE are not implemented: NOTIMP.
#[tokio::test(flavor = "multi_thread")]
async fn opcodes_other_than_query_get_notimp() {
    let servers = both_paths(&mid_fixture(), Options::fast_path(true)).await;
    for (path, server) in &servers {
        for op_code in [OpCode::Notify, OpCode::Status, OpCode::Update] {
            for transport in [Transport::Udp, Transport::Tcp] {
                let mut q = query("clusterset.local.", RecordType::SOA);
                q.metadata.op_code = op_code;
                q.metadata.recursion_desired = false;
                let r = exchange(server.dns(), transport, &q).await;
                assert_eq!(
                    r.metadata.response_code,
                    ResponseCode::NotImp,
                    "{path} {op_code:?} {transport:?}"
                );
                assert!(r.answers.is_empty(), "{path} {op_code:?}");
                assert!(!r.metadata.recursion_available);
            }
        }
    }
    stop_all(servers).await;
}

/// A query with two questions is malformed for us: FORMERR.
#[tokio::test(flavor = "multi_thread")]
async fn two_questions_get_formerr() {
    let servers = both_paths(&mid_fixture(), Options::fast_path(true)).await;
    for (path, server) in &servers {
        for transport in [Transport::Udp, Transport::Tcp] {
            let mut q = query("mid.shop.svc.clusterset.local.", RecordType::A);
            q.add_query(Query::query(
                Name::from_ascii("big.shop.svc.clusterset.local.").unwrap(),
                RecordType::A,
            ));
            let r = exchange(server.dns(), transport, &q).await;
            assert_eq!(
                r.metadata.response_code,
                ResponseCode::FormErr,
                "{path} {transport:?}"
            );
            assert!(r.answers.is_empty(), "{path} {transport:?}");
        }
    }
    stop_all(servers).await;
}

/// Hand-made malformed packets: `(what, bytes)`.
fn malformed_packets() -> Vec<(&'static str, Vec<u8>)> {
    let header = |qd: u16, an: u16| {
        let mut h = vec![0x4a, 0x11, 0x01, 0x00];
        for count in [qd, an, 0, 0] {
            h.extend_from_slice(&count.to_be_bytes());
        }
        h
    };
    let good = encode(&query("web.shop.svc.clusterset.local.", RecordType::A));
    let with = |mut h: Vec<u8>, tail: &[u8]| {
        h.extend_from_slice(tail);
        h
    };
    // A fixed pseudo-random byte string (xorshift), so the test is repeatable.
    let mut x: u32 = 0x9e37_79b9;
    let noise: Vec<u8> = (0..64)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect();
    vec![
        ("header only, one question announced", header(1, 0)),
        ("question cut inside a label", with(header(1, 0), b"\x03we")),
        (
            "question without type and class",
            with(header(1, 0), b"\x03web\x00"),
        ),
        (
            "type without class",
            with(header(1, 0), b"\x03web\x00\x00\x01"),
        ),
        (
            "label longer than 63 bytes",
            with(
                header(1, 0),
                &[&[64u8][..], &[b'a'; 64], b"\x00\x00\x01\x00\x01"].concat(),
            ),
        ),
        (
            "compression pointer loop",
            with(header(1, 0), b"\xc0\x0c\x00\x01\x00\x01"),
        ),
        (
            "pointer past the end",
            with(header(1, 0), b"\xc0\xff\x00\x01\x00\x01"),
        ),
        (
            "answer count with no answer",
            with(header(1, 1), &good[12..]),
        ),
        ("the last byte cut off", good[..good.len() - 1].to_vec()),
        ("noise after a header", with(header(3, 7), &noise)),
        ("noise", noise.clone()),
    ]
}

/// Sends one malformed packet over UDP and TCP, checks that any reply is a
/// FORMERR for its ID, then that a normal query still gets its answer.
/// Returns what happened, for the failure message.
async fn probe_malformed(server: &TestServer, path: &str, what: &str, bytes: &[u8]) -> String {
    let udp = udp_raw(server.dns(), bytes, NO_REPLY_WAIT).await;
    let tcp = tcp_raw(server.dns(), bytes, NO_REPLY_WAIT).await;
    let mut seen = Vec::new();
    for (transport, reply) in [("UDP", udp), ("TCP", tcp)] {
        let Some(reply) = reply else {
            seen.push(format!("{transport}: no reply"));
            continue;
        };
        let r = decode(&reply, &format!("{path} {transport} {what}"));
        assert_eq!(
            r.metadata.response_code,
            ResponseCode::FormErr,
            "{path} {transport} {what}"
        );
        assert_eq!(&reply[..2], &bytes[..2], "{path} {transport} {what}: ID");
        assert!(r.answers.is_empty(), "{path} {transport} {what}");
        seen.push(format!("{transport}: FORMERR"));
    }
    let normal = query_edns("mid.shop.svc.clusterset.local.", RecordType::A, 1232, 0);
    for transport in [Transport::Udp, Transport::Tcp] {
        let r = exchange(server.dns(), transport, &normal).await;
        assert_eq!(r.answers.len(), 60, "{path} {transport:?} after {what}");
    }
    format!("{what}: {}", seen.join(", "))
}

/// Malformed packets get FORMERR or no reply, alike on both paths, and serving continues.
#[tokio::test(flavor = "multi_thread")]
async fn malformed_packets_get_formerr_or_no_reply_and_serving_continues() {
    let servers = both_paths(&mid_fixture(), Options::fast_path(true)).await;
    let packets = malformed_packets();
    // Probes run concurrently: each waits up to NO_REPLY_WAIT for silence.
    let probes = servers.iter().flat_map(|(path, server)| {
        packets
            .iter()
            .map(move |(what, bytes)| probe_malformed(server, path, what, bytes))
    });
    let outcomes = futures::future::join_all(probes).await;
    let (fast, hickory) = outcomes.split_at(packets.len());
    // Both paths treat every malformed packet alike.
    assert_eq!(fast, hickory, "fast path vs hickory path");
    stop_all(servers).await;
}

/// Endpoint names carry every address; a hostname-less endpoint is named by its dashed IP.
#[tokio::test(flavor = "multi_thread")]
async fn endpoint_names_carry_every_address_and_default_to_the_dashed_ip() {
    let yaml = format!(
        "{}apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: multi-a
  namespace: shop
  labels:
    multicluster.kubernetes.io/service-name: multi
    multicluster.kubernetes.io/source-cluster: cluster-a
addressType: IPv4
endpoints:
- addresses: [10.9.0.1, 10.9.0.2]
  hostname: two
- addresses: [10.9.0.3]
",
        dns_server::headless_import("shop", "multi", "http", 80)
    );
    let servers = both_paths(&yaml, Options::fast_path(true)).await;
    let base = "multi.shop.svc.clusterset.local.";
    let two = format!("two.cluster-a.{base}");
    let dashed = format!("10-9-0-3.cluster-a.{base}");
    let cases: [(&str, RecordType, Vec<String>); 4] = [
        (
            &two,
            RecordType::A,
            vec![
                format!("{two} 5 IN A 10.9.0.1"),
                format!("{two} 5 IN A 10.9.0.2"),
            ],
        ),
        (
            &dashed,
            RecordType::A,
            vec![format!("{dashed} 5 IN A 10.9.0.3")],
        ),
        (
            base,
            RecordType::A,
            ["10.9.0.1", "10.9.0.2", "10.9.0.3"]
                .map(|ip| format!("{base} 5 IN A {ip}"))
                .to_vec(),
        ),
        (
            &format!("_http._tcp.{base}"),
            RecordType::SRV,
            vec![
                format!("_http._tcp.{base} 5 IN SRV 0 50 80 {dashed}"),
                format!("_http._tcp.{base} 5 IN SRV 0 50 80 {two}"),
            ],
        ),
    ];
    for (path, server) in &servers {
        for (name, rtype, want) in &cases {
            for transport in [Transport::Udp, Transport::Tcp] {
                let r = exchange(server.dns(), transport, &query(name, *rtype)).await;
                assert_eq!(
                    dns_server::sorted(&r.answers),
                    dns_server::expected(&want.iter().map(String::as_str).collect::<Vec<_>>()),
                    "{path} {transport:?} {name} {rtype}"
                );
            }
        }
    }
    stop_all(servers).await;
}

/// A datagram shorter than a DNS header gets no reply at all.
#[tokio::test(flavor = "multi_thread")]
async fn an_eleven_byte_packet_gets_no_reply() {
    let servers = both_paths(&mid_fixture(), Options::fast_path(true)).await;
    let normal = encode(&query_edns(
        "mid.shop.svc.clusterset.local.",
        RecordType::A,
        1232,
        0,
    ));
    for (path, server) in &servers {
        let reply = udp_raw(server.dns(), &normal[..11], NO_REPLY_WAIT).await;
        assert!(reply.is_none(), "{path}: replied to 11 bytes: {reply:?}");
        let r = exchange(server.dns(), Transport::Udp, &decode(&normal, "query")).await;
        assert_eq!(r.answers.len(), 60, "{path}");
    }
    stop_all(servers).await;
}

/// A message with QR set is not a query and gets no reply (no reflection),
/// whether it reads or not, over UDP and TCP, on both paths.
#[tokio::test(flavor = "multi_thread")]
async fn a_response_sent_to_the_server_gets_no_reply() {
    let servers = both_paths(&mid_fixture(), Options::fast_path(true)).await;
    let mut response = encode(&query("mid.shop.svc.clusterset.local.", RecordType::A));
    response[2] |= 0x80;
    let mut malformed = response.clone();
    malformed.truncate(15);
    let mut with_broken_opt = encode(&query_edns(
        "mid.shop.svc.clusterset.local.",
        RecordType::A,
        1232,
        0,
    ));
    with_broken_opt[2] |= 0x80;
    with_broken_opt.push(0);
    for (path, server) in &servers {
        for (what, bytes) in [
            ("response", &response),
            ("malformed response", &malformed),
            ("response with trailing byte", &with_broken_opt),
        ] {
            let udp = udp_raw(server.dns(), bytes, NO_REPLY_WAIT).await;
            assert!(udp.is_none(), "{path} UDP: replied to a {what}");
            let tcp = tcp_raw(server.dns(), bytes, NO_REPLY_WAIT).await;
            assert!(tcp.is_none(), "{path} TCP: replied to a {what}");
        }
    }
    stop_all(servers).await;
}

/// Queries with a broken OPT record or bytes after their last record,
/// each with an opcode, ID and RD to keep: `(what, bytes)`.
fn broken_opt_and_trailing_data() -> Vec<(&'static str, Vec<u8>)> {
    let name = "mid.shop.svc.clusterset.local.";
    let plain = encode(&query(name, RecordType::A));
    let with_opt = |options: &[u8]| {
        let mut bytes = encode(&query_edns(name, RecordType::A, 1232, 0));
        let len = bytes.len();
        bytes[len - 2..].copy_from_slice(&(options.len() as u16).to_be_bytes());
        bytes.extend_from_slice(options);
        bytes
    };
    let cookie = b"\x00\x0a\x00\x08abcdefgh";
    vec![
        (
            "option longer than the RDATA",
            with_opt(b"\x00\x0a\x00\x09abcdefgh"),
        ),
        (
            "option shorter than the RDATA",
            with_opt(b"\x00\x0a\x00\x07abcdefgh"),
        ),
        ("option header cut", with_opt(b"\x00\x0a\x00")),
        (
            "client subnet of family 3",
            with_opt(b"\x00\x08\x00\x05\x00\x03\x08\x00\x0a"),
        ),
        (
            "client subnet longer than its prefix",
            with_opt(b"\x00\x08\x00\x06\x00\x01\x08\x00\x0a\x01"),
        ),
        (
            "trailing byte after a good OPT",
            [with_opt(cookie), vec![0]].concat(),
        ),
        (
            "trailing bytes without OPT",
            [plain.clone(), vec![1, 2, 3]].concat(),
        ),
    ]
}

/// A broken OPT record or trailing bytes get FORMERR, the header alone
/// with the query's ID, opcode and RD, over UDP and TCP: the same bytes on
/// both paths (differential: the fast path decodes the OPT record itself,
/// the hickory path through hickory). A well-formed client subnet option
/// is answered.
#[tokio::test(flavor = "multi_thread")]
async fn broken_opt_records_and_trailing_bytes_get_the_same_formerr_on_both_paths() {
    let servers = both_paths(&mid_fixture(), Options::fast_path(true)).await;
    for (what, mut bytes) in broken_opt_and_trailing_data() {
        for opcode in [0u8, 2] {
            bytes[2] = (bytes[2] & !0x78) | (opcode << 3);
            let mut replies = Vec::new();
            for (path, server) in &servers {
                for (transport, reply) in [
                    ("UDP", udp_raw(server.dns(), &bytes, NO_REPLY_WAIT).await),
                    ("TCP", tcp_raw(server.dns(), &bytes, NO_REPLY_WAIT).await),
                ] {
                    let context = format!("{path} {transport} {what} opcode {opcode}");
                    let reply = reply.unwrap_or_else(|| panic!("{context}: no reply"));
                    let r = decode(&reply, &context);
                    assert_eq!(r.metadata.response_code, ResponseCode::FormErr, "{context}");
                    assert_eq!(&reply[..2], &bytes[..2], "{context}: ID");
                    assert_eq!(u8::from(r.metadata.op_code), opcode, "{context}: opcode");
                    assert!(r.metadata.recursion_desired, "{context}: RD");
                    assert_eq!(reply.len(), 12, "{context}: the header alone");
                    replies.push(reply);
                }
            }
            assert!(
                replies.windows(2).all(|w| w[0] == w[1]),
                "{what}: paths and transports differ: {replies:?}"
            );
        }
    }
    let mut subnet = encode(&query_edns(
        "mid.shop.svc.clusterset.local.",
        RecordType::A,
        1232,
        0,
    ));
    let len = subnet.len();
    subnet[len - 2..].copy_from_slice(&11u16.to_be_bytes());
    subnet.extend_from_slice(b"\x00\x08\x00\x07\x00\x01\x18\x00\x0a\x01\x02");
    for (path, server) in &servers {
        let reply = udp_raw(server.dns(), &subnet, QUERY_TIMEOUT).await;
        let r = decode(&reply.expect("a reply"), path);
        assert_eq!(r.metadata.response_code, ResponseCode::NoError, "{path}");
        assert_eq!(r.answers.len(), 60, "{path}");
    }
    stop_all(servers).await;
}

/// Several questions that do not fit back into a 512-byte response: the
/// header alone, FORMERR with the query's ID, opcode and RD, on both paths.
#[tokio::test(flavor = "multi_thread")]
async fn several_long_questions_get_a_header_only_formerr() {
    let servers = both_paths(&mid_fixture(), Options::fast_path(true)).await;
    let mut bytes = vec![0x5e, 0x11, 0x01, 0x00, 0, 3, 0, 0, 0, 0, 0, 0];
    for q in 0..3u8 {
        for _ in 0..4 {
            bytes.push(61);
            bytes.extend_from_slice(&[b'a' + q; 61]);
        }
        bytes.extend_from_slice(&[0, 0, 1, 0, 1]);
    }
    for (path, server) in &servers {
        let reply = udp_raw(server.dns(), &bytes, QUERY_TIMEOUT)
            .await
            .unwrap_or_else(|| panic!("{path}: no reply"));
        let r = decode(&reply, path);
        assert_eq!(r.metadata.response_code, ResponseCode::FormErr, "{path}");
        assert_eq!(r.metadata.op_code, OpCode::Query, "{path}");
        assert!(r.metadata.recursion_desired, "{path}: RD");
        assert_eq!(&reply[..2], &bytes[..2], "{path}: ID");
        assert_eq!(reply.len(), 12, "{path}");
    }
    stop_all(servers).await;
}

/// Classes other than IN and zone transfers are refused.
#[tokio::test(flavor = "multi_thread")]
async fn other_classes_and_zone_transfers_are_refused() {
    let servers = both_paths(&mid_fixture(), Options::fast_path(true)).await;
    for (path, server) in &servers {
        for transport in [Transport::Udp, Transport::Tcp] {
            let ch = dns_server::query_class(
                "web.shop.svc.clusterset.local.",
                RecordType::A,
                DNSClass::CH,
            );
            let r = exchange(server.dns(), transport, &ch).await;
            assert_eq!(r.metadata.response_code, ResponseCode::Refused, "{path} CH");
            assert!(!r.metadata.authoritative);
        }
        let axfr = query("clusterset.local.", RecordType::AXFR);
        let r = exchange(server.dns(), Transport::Tcp, &axfr).await;
        assert_eq!(
            r.metadata.response_code,
            ResponseCode::Refused,
            "{path} AXFR"
        );
        assert!(r.answers.is_empty());
    }
    stop_all(servers).await;
}

/// `max_records` caps A, AAAA and SRV at the service name to one subset of endpoints.
#[tokio::test(flavor = "multi_thread")]
async fn max_records_caps_headless_answers_to_one_subset_of_endpoints() {
    let yaml = big_headless("shop", "pets", 30, 200, true);
    let options = Options {
        max_records: Some(50),
        ..Options::fast_path(true)
    };
    let servers = both_paths(&yaml, options).await;
    let index_of = |ip: &IpAddr| -> usize {
        (0..200)
            .find(|&i| ip.to_string() == v4(30, i) || ip.to_string() == v6(30, i))
            .unwrap_or_else(|| panic!("{ip} is not an endpoint address"))
    };
    let name = "pets.shop.svc.clusterset.local.";
    for (path, server) in &servers {
        let a = exchange(server.dns(), Transport::Tcp, &query(name, RecordType::A)).await;
        let aaaa = exchange(server.dns(), Transport::Tcp, &query(name, RecordType::AAAA)).await;
        let srv = exchange(server.dns(), Transport::Tcp, &query(name, RecordType::SRV)).await;
        assert_eq!(a.answers.len(), 50, "{path}: A");
        assert_eq!(aaaa.answers.len(), 50, "{path}: AAAA");
        assert_eq!(srv.answers.len(), 50, "{path}: SRV");
        let a_set: BTreeSet<usize> = addresses(&a.answers).iter().map(index_of).collect();
        let aaaa_set: BTreeSet<usize> = addresses(&aaaa.answers).iter().map(index_of).collect();
        let srv_set: BTreeSet<usize> = srv
            .answers
            .iter()
            .map(|r| match &r.data {
                RData::SRV(s) => {
                    let host = s.target.iter().next().expect("target has labels");
                    let host = std::str::from_utf8(host).expect("ASCII label");
                    host.trim_start_matches("h-").parse().expect("h-<i> label")
                }
                other => panic!("{path}: {other:?} in SRV answer"),
            })
            .collect();
        assert_eq!(a_set.len(), 50, "{path}");
        assert_eq!(a_set, aaaa_set, "{path}: A and AAAA subsets differ");
        assert_eq!(a_set, srv_set, "{path}: A and SRV subsets differ");

        for i in [0, 199] {
            let host = format!("h-{i:03}.cluster-a.{name}");
            let r = exchange(
                server.dns(),
                Transport::Udp,
                &query(&host, RecordType::AAAA),
            )
            .await;
            assert_eq!(
                r.metadata.response_code,
                ResponseCode::NoError,
                "{path} {host}"
            );
            assert_eq!(
                addresses(&r.answers),
                BTreeSet::from([v6(30, i).parse().unwrap()]),
                "{path} {host}"
            );
        }
    }
    stop_all(servers).await;
}

/// The fixture helper produces what the other tests assume.
#[test]
fn the_generated_fixture_parses() {
    let manifest = clusterset_dns::source::manifest::parse(&large_fixture()).unwrap();
    assert_eq!(manifest.imports.len(), 3);
    assert_eq!(manifest.slices.len(), 3);
}

/// A headless service at the default cap (1000 dual-stack endpoints) is
/// served over TCP whole for A and AAAA. Its SRV records (whose targets are
/// never compressed, RFC 2782) and their glue exceed one DNS message
/// (64 KiB): the answer is cut to the records that fit, a subset the spec
/// allows, and the optional glue is left out; the same on both paths, with
/// and without EDNS. Before, building this zone panicked.
#[tokio::test(flavor = "multi_thread")]
async fn answers_at_the_default_cap_fit_one_tcp_message() {
    const N: usize = 1000;
    let yaml = big_headless("shop", "huge", 30, N, true);
    let servers = both_paths(&yaml, Options::fast_path(true)).await;
    let name = "huge.shop.svc.clusterset.local.";
    let mut srv_counts = BTreeSet::new();
    for (path, server) in &servers {
        for edns in [false, true] {
            let ask = |rtype| {
                if edns {
                    query_edns(name, rtype, 1232, 0)
                } else {
                    query(name, rtype)
                }
            };
            for rtype in [RecordType::A, RecordType::AAAA, RecordType::SRV] {
                let (tcp, len) = exchange_sized(server.dns(), Transport::Tcp, &ask(rtype)).await;
                let what = format!("{path} {rtype} edns={edns}");
                assert_eq!(tcp.metadata.response_code, ResponseCode::NoError, "{what}");
                assert!(!tcp.metadata.truncation, "{what}");
                assert!(len <= usize::from(u16::MAX), "{what}: {len} bytes");
                assert!(tcp.additionals.is_empty(), "{what}: glue all or nothing");
                if rtype == RecordType::SRV {
                    let targets: BTreeSet<String> = tcp
                        .answers
                        .iter()
                        .map(|r| match &r.data {
                            RData::SRV(srv) => srv.target.to_string(),
                            other => panic!("{what}: {other:?}"),
                        })
                        .collect();
                    assert_eq!(targets.len(), tcp.answers.len(), "{what}: distinct targets");
                    assert!(
                        (N / 2..N).contains(&tcp.answers.len()),
                        "{what}: {} records",
                        tcp.answers.len()
                    );
                    srv_counts.insert(tcp.answers.len());
                } else {
                    assert_eq!(tcp.answers.len(), N, "{what}");
                }
            }
        }
    }
    assert_eq!(srv_counts.len(), 1, "both paths cut at the same record");
    stop_all(servers).await;
}

/// The DO bit of a query is copied into the response (RFC 3225 §3), on
/// both paths, for positive, negative and refused answers.
#[tokio::test(flavor = "multi_thread")]
async fn the_do_bit_is_copied_into_the_response() {
    let servers = example_on_both_paths().await;
    for (path, server) in &servers {
        for name in [
            "web.shop.svc.clusterset.local.",
            "nope.shop.svc.clusterset.local.",
            "example.com.",
        ] {
            for dnssec_ok in [false, true] {
                for transport in [Transport::Udp, Transport::Tcp] {
                    let mut q = query_edns(name, RecordType::A, 1232, 0);
                    q.edns.as_mut().unwrap().set_dnssec_ok(dnssec_ok);
                    let response = exchange(server.dns(), transport, &q).await;
                    let edns = response.edns.as_ref().expect("OPT in the response");
                    assert_eq!(
                        edns.flags().dnssec_ok,
                        dnssec_ok,
                        "{path} {transport:?} {name}"
                    );
                }
            }
        }
    }
    stop_all(servers).await;
}
