//! The DNS specification as a table: every case against the shipped
//! three-cluster fixture (`config/example-clusterset.yaml`), over UDP and
//! TCP, with and without EDNS, on a fast-path server and a hickory-path
//! server. Records are zone-file lines; sections are compared sorted, names
//! case-insensitively, the SOA serial masked.

mod dns_server;
mod support;

use dns_server::{
    EXAMPLE, Options, SOA, TestServer, Transport, exchange, exchange_sized, expected, sorted,
};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;

struct Case {
    qname: &'static str,
    qtype: RecordType,
    rcode: ResponseCode,
    aa: bool,
    answer: &'static [&'static str],
    authority: &'static [&'static str],
    additional: &'static [&'static str],
}

use RecordType::{A, AAAA, ANY, MX, NS, PTR, SOA as SOA_TYPE, SRV, TXT};
use ResponseCode::{NXDomain, NoError, Refused};

const fn answer(
    qname: &'static str,
    qtype: RecordType,
    answer: &'static [&'static str],
    additional: &'static [&'static str],
) -> Case {
    Case {
        qname,
        qtype,
        rcode: NoError,
        aa: true,
        answer,
        authority: &[],
        additional,
    }
}

/// NOERROR, no answer, SOA in authority.
const fn nodata(qname: &'static str, qtype: RecordType) -> Case {
    Case {
        qname,
        qtype,
        rcode: NoError,
        aa: true,
        answer: &[],
        authority: &[SOA],
        additional: &[],
    }
}

const fn nxdomain(qname: &'static str, qtype: RecordType) -> Case {
    Case {
        qname,
        qtype,
        rcode: NXDomain,
        aa: true,
        answer: &[],
        authority: &[SOA],
        additional: &[],
    }
}

/// REFUSED without AA and without records.
const fn refused(qname: &'static str, qtype: RecordType) -> Case {
    Case {
        qname,
        qtype,
        rcode: Refused,
        aa: false,
        answer: &[],
        authority: &[],
        additional: &[],
    }
}

const WEB_A: &str = "web.shop.svc.clusterset.local. 5 IN A 10.96.10.10";
const WEB_AAAA: &str = "web.shop.svc.clusterset.local. 5 IN AAAA fd00:10:96::a";
const CACHE_A: &str = "cache.shop.svc.clusterset.local. 5 IN A 10.96.10.20";
const EAST0_A: &str = "db-0.cluster-east.db.shop.svc.clusterset.local. 5 IN A 10.1.1.10";
const EAST0_AAAA: &str = "db-0.cluster-east.db.shop.svc.clusterset.local. 5 IN AAAA fd00:1:1::10";
const EAST1_A: &str = "db-1.cluster-east.db.shop.svc.clusterset.local. 5 IN A 10.1.1.11";
const EAST1_AAAA: &str = "db-1.cluster-east.db.shop.svc.clusterset.local. 5 IN AAAA fd00:1:1::11";
const WEST0_A: &str = "db-0.cluster-west.db.shop.svc.clusterset.local. 5 IN A 10.2.1.10";
/// Addresses of every ready db endpoint: the SRV additional section.
const DB_GLUE: &[&str] = &[EAST0_A, EAST0_AAAA, EAST1_A, EAST1_AAAA, WEST0_A];

const CASES: &[Case] = &[
    // Schema version and apex.
    answer(
        "dns-version.clusterset.local.",
        TXT,
        &["dns-version.clusterset.local. 28800 IN TXT \"1.0.0\""],
        &[],
    ),
    nodata("dns-version.clusterset.local.", A),
    answer("clusterset.local.", SOA_TYPE, &[SOA], &[]),
    answer(
        "clusterset.local.",
        NS,
        &["clusterset.local. 5 IN NS ns.dns.clusterset.local."],
        &[],
    ),
    nodata("clusterset.local.", A),
    nodata("svc.clusterset.local.", A),
    // Without nameserver_addresses the NS target has no records: no name.
    nxdomain("ns.dns.clusterset.local.", A),
    nxdomain("dns.clusterset.local.", A),
    // Namespaces: NODATA with services, NXDOMAIN otherwise (jobs only has a
    // headless service without ready endpoints).
    nodata("shop.svc.clusterset.local.", A),
    nxdomain("jobs.svc.clusterset.local.", A),
    nxdomain("nope.svc.clusterset.local.", A),
    // ClusterSetIP, dual-stack: the ClusterSetIPs, never endpoint IPs.
    answer("web.shop.svc.clusterset.local.", A, &[WEB_A], &[]),
    answer("web.shop.svc.clusterset.local.", AAAA, &[WEB_AAAA], &[]),
    nodata("web.shop.svc.clusterset.local.", TXT),
    nodata("web.shop.svc.clusterset.local.", MX),
    // RFC 8482: ANY gets one RRset.
    answer("web.shop.svc.clusterset.local.", ANY, &[WEB_A], &[]),
    answer(
        "_http._tcp.web.shop.svc.clusterset.local.",
        SRV,
        &[
            "_http._tcp.web.shop.svc.clusterset.local. 5 IN SRV 0 100 80 web.shop.svc.clusterset.local.",
        ],
        &[WEB_A, WEB_AAAA],
    ),
    answer(
        "_https._tcp.web.shop.svc.clusterset.local.",
        SRV,
        &[
            "_https._tcp.web.shop.svc.clusterset.local. 5 IN SRV 0 100 443 web.shop.svc.clusterset.local.",
        ],
        &[WEB_A, WEB_AAAA],
    ),
    answer(
        "web.shop.svc.clusterset.local.",
        SRV,
        &[
            "web.shop.svc.clusterset.local. 5 IN SRV 0 50 80 web.shop.svc.clusterset.local.",
            "web.shop.svc.clusterset.local. 5 IN SRV 0 50 443 web.shop.svc.clusterset.local.",
        ],
        &[WEB_A, WEB_AAAA],
    ),
    nodata("_http._tcp.web.shop.svc.clusterset.local.", A),
    nodata("_tcp.web.shop.svc.clusterset.local.", SRV),
    nxdomain("_http._udp.web.shop.svc.clusterset.local.", SRV),
    nxdomain("_grpc._tcp.web.shop.svc.clusterset.local.", SRV),
    // No per-cluster name for ClusterSetIP services (spec §2.3.4).
    nxdomain("cluster-east.web.shop.svc.clusterset.local.", A),
    // IPv4-only ClusterSetIP; TCP and UDP on one port give one bare SRV.
    answer("cache.shop.svc.clusterset.local.", A, &[CACHE_A], &[]),
    nodata("cache.shop.svc.clusterset.local.", AAAA),
    answer(
        "cache.shop.svc.clusterset.local.",
        SRV,
        &["cache.shop.svc.clusterset.local. 5 IN SRV 0 100 11211 cache.shop.svc.clusterset.local."],
        &[CACHE_A],
    ),
    answer(
        "_memcache._tcp.cache.shop.svc.clusterset.local.",
        SRV,
        &[
            "_memcache._tcp.cache.shop.svc.clusterset.local. 5 IN SRV 0 100 11211 cache.shop.svc.clusterset.local.",
        ],
        &[CACHE_A],
    ),
    answer(
        "_memcache-udp._udp.cache.shop.svc.clusterset.local.",
        SRV,
        &[
            "_memcache-udp._udp.cache.shop.svc.clusterset.local. 5 IN SRV 0 100 11211 cache.shop.svc.clusterset.local.",
        ],
        &[CACHE_A],
    ),
    // ClusterSetIP import without an assigned IP.
    nodata("search.shop.svc.clusterset.local.", A),
    nodata("search.shop.svc.clusterset.local.", AAAA),
    // Headless: exactly the ready endpoints of all clusters (db-1 in west is
    // not ready).
    answer(
        "db.shop.svc.clusterset.local.",
        A,
        &[
            "db.shop.svc.clusterset.local. 5 IN A 10.1.1.10",
            "db.shop.svc.clusterset.local. 5 IN A 10.1.1.11",
            "db.shop.svc.clusterset.local. 5 IN A 10.2.1.10",
        ],
        &[],
    ),
    answer(
        "db.shop.svc.clusterset.local.",
        AAAA,
        &[
            "db.shop.svc.clusterset.local. 5 IN AAAA fd00:1:1::10",
            "db.shop.svc.clusterset.local. 5 IN AAAA fd00:1:1::11",
        ],
        &[],
    ),
    nodata("db.shop.svc.clusterset.local.", TXT),
    answer(
        "db-0.cluster-east.db.shop.svc.clusterset.local.",
        A,
        &[EAST0_A],
        &[],
    ),
    answer(
        "db-0.cluster-east.db.shop.svc.clusterset.local.",
        AAAA,
        &[EAST0_AAAA],
        &[],
    ),
    answer(
        "db-0.cluster-west.db.shop.svc.clusterset.local.",
        A,
        &[WEST0_A],
        &[],
    ),
    nodata("db-0.cluster-west.db.shop.svc.clusterset.local.", AAAA),
    nxdomain("db-1.cluster-west.db.shop.svc.clusterset.local.", A),
    nxdomain("db-2.cluster-east.db.shop.svc.clusterset.local.", A),
    nxdomain("db-0.cluster-eu.db.shop.svc.clusterset.local.", A),
    // `<cluster>.<svc>` is an empty non-terminal: NODATA, never records.
    nodata("cluster-east.db.shop.svc.clusterset.local.", A),
    nodata("cluster-west.db.shop.svc.clusterset.local.", SRV),
    nxdomain("cluster-eu.db.shop.svc.clusterset.local.", A),
    nxdomain("x.db-0.cluster-east.db.shop.svc.clusterset.local.", A),
    // One label `db-0.cluster-east` (an escaped dot) is not two labels.
    nxdomain("db-0\\.cluster-east.db.shop.svc.clusterset.local.", A),
    nxdomain("_postgres\\._tcp.db.shop.svc.clusterset.local.", SRV),
    answer(
        "_postgres._tcp.db.shop.svc.clusterset.local.",
        SRV,
        &[
            "_postgres._tcp.db.shop.svc.clusterset.local. 5 IN SRV 0 33 5432 db-0.cluster-east.db.shop.svc.clusterset.local.",
            "_postgres._tcp.db.shop.svc.clusterset.local. 5 IN SRV 0 33 5432 db-1.cluster-east.db.shop.svc.clusterset.local.",
            "_postgres._tcp.db.shop.svc.clusterset.local. 5 IN SRV 0 33 5432 db-0.cluster-west.db.shop.svc.clusterset.local.",
        ],
        DB_GLUE,
    ),
    answer(
        "_metrics._tcp.db.shop.svc.clusterset.local.",
        SRV,
        &[
            "_metrics._tcp.db.shop.svc.clusterset.local. 5 IN SRV 0 33 9187 db-0.cluster-east.db.shop.svc.clusterset.local.",
            "_metrics._tcp.db.shop.svc.clusterset.local. 5 IN SRV 0 33 9187 db-1.cluster-east.db.shop.svc.clusterset.local.",
            "_metrics._tcp.db.shop.svc.clusterset.local. 5 IN SRV 0 33 9187 db-0.cluster-west.db.shop.svc.clusterset.local.",
        ],
        DB_GLUE,
    ),
    answer(
        "db.shop.svc.clusterset.local.",
        SRV,
        &[
            "db.shop.svc.clusterset.local. 5 IN SRV 0 16 5432 db-0.cluster-east.db.shop.svc.clusterset.local.",
            "db.shop.svc.clusterset.local. 5 IN SRV 0 16 9187 db-0.cluster-east.db.shop.svc.clusterset.local.",
            "db.shop.svc.clusterset.local. 5 IN SRV 0 16 5432 db-1.cluster-east.db.shop.svc.clusterset.local.",
            "db.shop.svc.clusterset.local. 5 IN SRV 0 16 9187 db-1.cluster-east.db.shop.svc.clusterset.local.",
            "db.shop.svc.clusterset.local. 5 IN SRV 0 16 5432 db-0.cluster-west.db.shop.svc.clusterset.local.",
            "db.shop.svc.clusterset.local. 5 IN SRV 0 16 9187 db-0.cluster-west.db.shop.svc.clusterset.local.",
        ],
        DB_GLUE,
    ),
    nodata("_tcp.db.shop.svc.clusterset.local.", SRV),
    // Headless without ready endpoints, unknown services.
    nxdomain("batch.jobs.svc.clusterset.local.", A),
    nxdomain("_grpc._tcp.batch.jobs.svc.clusterset.local.", SRV),
    nxdomain("unknown.shop.svc.clusterset.local.", A),
    nxdomain("web.other.svc.clusterset.local.", A),
    nxdomain("web.shop.pod.clusterset.local.", A),
    // Outside the zone, including reverse zones: REFUSED, not authoritative.
    refused("example.com.", A),
    refused("local.", SOA_TYPE),
    refused(".", NS),
    refused("clusterset.local.example.com.", A),
    refused("web.shop.svc.cluster.local.", A),
    refused("10.10.96.10.in-addr.arpa.", PTR),
    refused(
        "a.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.6.9.0.0.0.1.0.0.0.0.0.0.0.0.d.f.ip6.arpa.",
        PTR,
    ),
    // Case-insensitive matching; the question is echoed as asked.
    answer("WeB.ShOp.SvC.ClusterSet.LOCAL.", A, &[WEB_A], &[]),
    answer(
        "_HTTP._Tcp.Web.SHOP.svc.clusterset.local.",
        SRV,
        &[
            "_http._tcp.web.shop.svc.clusterset.local. 5 IN SRV 0 100 80 web.shop.svc.clusterset.local.",
        ],
        &[WEB_A, WEB_AAAA],
    ),
    answer(
        "DB-0.Cluster-East.DB.shop.svc.clusterset.local.",
        AAAA,
        &[EAST0_AAAA],
        &[],
    ),
    answer(
        "Dns-Version.ClusterSet.Local.",
        TXT,
        &["dns-version.clusterset.local. 28800 IN TXT \"1.0.0\""],
        &[],
    ),
    nxdomain("NOPE.Shop.Svc.clusterset.local.", A),
    nodata("Cluster-West.DB.shop.svc.clusterset.local.", A),
];

/// Compares one response with a case; returns the differences. Additional
/// records are optional (RFC 2181 §9): `additional_fits` says whether the
/// complete response fits the transport's limit, and when it does not the
/// additional section must be dropped rather than the answer truncated.
fn check(case: &Case, response: &Message, with_edns: bool, additional_fits: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let m = &response.metadata;
    let mut expect = |what: &str, got: String, want: String| {
        if got != want {
            problems.push(format!("{what}: got {got}, want {want}"));
        }
    };
    expect(
        "rcode",
        format!("{:?}", m.response_code),
        format!("{:?}", case.rcode),
    );
    expect("aa", m.authoritative.to_string(), case.aa.to_string());
    expect("ra", m.recursion_available.to_string(), "false".into());
    expect("tc", m.truncation.to_string(), "false".into());
    let question: Vec<String> = response
        .queries
        .iter()
        .map(|q| format!("{} {}", q.name(), q.query_type()))
        .collect();
    expect(
        "question (exact case)",
        format!("{question:?}"),
        format!("{:?}", [format!("{} {}", case.qname, case.qtype)]),
    );
    expect(
        "answer",
        format!("{:#?}", sorted(&response.answers)),
        format!("{:#?}", expected(case.answer)),
    );
    expect(
        "authority",
        format!("{:#?}", sorted(&response.authorities)),
        format!("{:#?}", expected(case.authority)),
    );
    expect(
        "additional",
        format!("{:#?}", sorted(&response.additionals)),
        format!(
            "{:#?}",
            expected(if additional_fits {
                case.additional
            } else {
                &[]
            })
        ),
    );
    match (&response.edns, with_edns) {
        (Some(edns), true) => {
            if edns.max_payload() != 1232 || edns.version() != 0 {
                problems.push(format!(
                    "OPT: payload {} version {}",
                    edns.max_payload(),
                    edns.version()
                ));
            }
        }
        (None, true) => problems.push("no OPT record in the response to an EDNS query".into()),
        (Some(_), false) => problems.push("OPT record in the response to a plain query".into()),
        (None, false) => {}
    }
    problems
}

/// Every case answers as specified over UDP and TCP, with and without EDNS, on both paths.
#[tokio::test(flavor = "multi_thread")]
async fn every_case_answers_as_specified_on_every_transport_and_path() {
    let fast = TestServer::from_file(EXAMPLE, Options::fast_path(true)).await;
    let hickory = TestServer::from_file(EXAMPLE, Options::fast_path(false)).await;
    let servers = [("fast path", &fast), ("hickory path", &hickory)];
    let mut failures = Vec::new();
    let mut runs = 0;
    for (i, case) in CASES.iter().enumerate() {
        for (path, server) in servers {
            for with_edns in [false, true] {
                let query = if with_edns {
                    dns_server::query_edns(case.qname, case.qtype, 1232, 0)
                } else {
                    dns_server::query(case.qname, case.qtype)
                };
                // TCP has no size limit: its size is that of the complete answer.
                let (_, full_len) = exchange_sized(server.dns(), Transport::Tcp, &query).await;
                for transport in [Transport::Udp, Transport::Tcp] {
                    let response = exchange(server.dns(), transport, &query).await;
                    let limit = match (transport, with_edns) {
                        (Transport::Tcp, _) => usize::MAX,
                        (Transport::Udp, true) => 1232,
                        (Transport::Udp, false) => 512,
                    };
                    runs += 1;
                    for problem in check(case, &response, with_edns, full_len <= limit) {
                        failures.push(format!(
                            "case #{i} {} {} over {transport:?} ({path}, edns: {with_edns}): {problem}",
                            case.qname, case.qtype
                        ));
                    }
                }
            }
        }
    }
    fast.stop().await;
    hickory.stop().await;
    assert!(
        failures.is_empty(),
        "{} of {runs} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(runs, CASES.len() * 8);
}
