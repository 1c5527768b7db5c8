//! clusterset-dns beside a real CoreDNS (`kubernetes … { multicluster }`)
//! on the same apiserver state: the same queries must get the same answers,
//! except for the deviations listed in docs/coredns.md (each with its
//! reason). And CoreDNS forwarding the `clusterset.local` stub domain to
//! clusterset-dns — how users deploy it — returns our answers.
//!
//! Tier 2: needs the Go-built kube-apiserver, etcd and coredns, so this
//! target requires the `testenv` feature (Cargo.toml; `scripts/test.sh` or
//! `cargo test --features testenv`). A missing binary fails the tests with
//! the command that builds it (`tests/controlplane`).

mod controlplane;
mod dns_server;
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use clusterset_dns::app::Running;

use controlplane::{ControlPlane, CoreDns};
use dns_server::{Transport, exchange, query, sorted};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(30);

/// Waits until `server` answers `name` A with NOERROR and an answer.
async fn wait_answering(
    server: std::net::SocketAddr,
    name: &str,
    what: &str,
    log: impl Fn() -> String,
) {
    let start = Instant::now();
    loop {
        if let Some(bytes) = probe(server, &dns_server::encode(&query(name, RecordType::A))).await {
            let response = dns_server::decode(&bytes, what);
            if response.metadata.response_code == ResponseCode::NoError
                && !response.answers.is_empty()
            {
                return;
            }
        }
        assert!(
            start.elapsed() < WAIT,
            "{what} not answering {name} within {WAIT:?}; log:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One UDP exchange that tolerates a server that is not listening yet.
async fn probe(server: std::net::SocketAddr, bytes: &[u8]) -> Option<Vec<u8>> {
    let socket = dns_server::client_udp_socket(server).await;
    socket.send(bytes).await.ok()?;
    let mut buf = vec![0u8; 65535];
    let n = tokio::time::timeout(Duration::from_millis(500), socket.recv(&mut buf))
        .await
        .ok()?
        .ok()?;
    buf.truncate(n);
    Some(buf)
}

/// What is compared: rcode, AA, the answer section, and the types of the
/// authority and additional sections (SOA serials and glue order differ
/// legitimately).
fn summary(message: &Message) -> String {
    // SRV weights differ by design (docs/coredns.md, "SRV weights"): masked.
    let answers: Vec<String> = sorted(&message.answers)
        .into_iter()
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            if fields.len() == 8 && fields[3] == "SRV" {
                format!(
                    "{} {} {} SRV {} W {} {}",
                    fields[0], fields[1], fields[2], fields[4], fields[6], fields[7]
                )
            } else {
                line
            }
        })
        .collect();
    let types = |records: &[hickory_proto::rr::Record]| {
        let mut t: Vec<String> = records
            .iter()
            .map(|r| format!("{} {}", r.name.to_lowercase(), r.record_type()))
            .collect();
        t.sort();
        t.dedup();
        t.join(", ")
    };
    format!(
        "{} aa={} answer=[{}] authority=[{}] additional=[{}]",
        message.metadata.response_code,
        message.metadata.authoritative,
        answers.join(" | "),
        types(&message.authorities),
        types(&message.additionals),
    )
}

/// The queries compared: every name of the example clusterset, with the
/// types that matter, plus names that must not exist.
fn queries() -> Vec<(String, RecordType)> {
    let names = [
        "clusterset.local.",
        "dns-version.clusterset.local.",
        "svc.clusterset.local.",
        "shop.svc.clusterset.local.",
        "nowhere.svc.clusterset.local.",
        "web.shop.svc.clusterset.local.",
        "_http._tcp.web.shop.svc.clusterset.local.",
        "_https._tcp.web.shop.svc.clusterset.local.",
        "_tcp.web.shop.svc.clusterset.local.",
        "10-1-0-11.cluster-east.web.shop.svc.clusterset.local.",
        "cluster-east.web.shop.svc.clusterset.local.",
        "db.shop.svc.clusterset.local.",
        "_postgres._tcp.db.shop.svc.clusterset.local.",
        "db-0.cluster-east.db.shop.svc.clusterset.local.",
        "db-1.cluster-east.db.shop.svc.clusterset.local.",
        "db-0.cluster-west.db.shop.svc.clusterset.local.",
        "db-1.cluster-west.db.shop.svc.clusterset.local.",
        "cluster-east.db.shop.svc.clusterset.local.",
        "cache.shop.svc.clusterset.local.",
        "_memcache._tcp.cache.shop.svc.clusterset.local.",
        "_memcache-udp._udp.cache.shop.svc.clusterset.local.",
        "search.shop.svc.clusterset.local.",
        "batch.jobs.svc.clusterset.local.",
        "missing.shop.svc.clusterset.local.",
        "web.shop.svc.cluster.local.",
        "example.com.",
    ];
    let types = [
        RecordType::A,
        RecordType::AAAA,
        RecordType::SRV,
        RecordType::TXT,
    ];
    let mut out = Vec::new();
    for name in names {
        for rtype in types {
            out.push((name.to_string(), rtype));
        }
    }
    out.push(("clusterset.local.".into(), RecordType::SOA));
    out.push(("clusterset.local.".into(), RecordType::NS));
    out
}

/// A control plane holding the example clusterset, and clusterset-dns
/// watching it.
async fn example_cluster() -> (ControlPlane, Running) {
    let plane = ControlPlane::start(1).await;
    let api = &plane.apiservers[0];
    let client = api.admin_client().await;
    let example = std::fs::read_to_string(dns_server::repo_path(dns_server::EXAMPLE)).unwrap();
    controlplane::apply_manifest(&client, &example).await;
    let ours = dns_server::start_dns(&api.admin_kubeconfig, |_| {}).await;
    (plane, ours)
}

/// Same apiserver, same queries: identical answers but for the documented deviations.
#[tokio::test(flavor = "multi_thread")]
async fn answers_match_coredns_multicluster_except_documented_deviations() {
    let (plane, ours) = example_cluster().await;
    let api = &plane.apiservers[0];
    let coredns = CoreDns::start(&format!(
        ".:{{port}} {{\n  bind 127.0.0.1\n  kubernetes cluster.local clusterset.local {{\n    kubeconfig {} cluster0\n    multicluster clusterset.local\n    ttl 5\n  }}\n}}\n",
        api.admin_kubeconfig.display()
    ));
    wait_answering(
        ours.dns_addr(),
        "db.shop.svc.clusterset.local.",
        "clusterset-dns",
        String::new,
    )
    .await;
    wait_answering(
        coredns.addr,
        "db.shop.svc.clusterset.local.",
        "coredns",
        || coredns.log(),
    )
    .await;

    let mut differences = BTreeMap::new();
    for (name, rtype) in queries() {
        let q = dns_server::query_edns(&name, rtype, 1232, 0);
        let a = summary(&exchange(ours.dns_addr(), Transport::Udp, &q).await);
        let b = summary(&exchange(coredns.addr, Transport::Udp, &q).await);
        if a != b {
            differences.insert(format!("{name} {rtype}"), (a, b));
        }
    }
    let documented = documented_deviations();
    let mut report = String::new();
    for (query, (ours, theirs)) in &differences {
        if !documented.contains_key(query.as_str()) {
            report.push_str(&format!(
                "UNDOCUMENTED {query}\n  clusterset-dns: {ours}\n  coredns:        {theirs}\n"
            ));
        }
    }
    for query in documented.keys() {
        if !differences.contains_key(*query) {
            report.push_str(&format!("DOCUMENTED BUT NOT OBSERVED {query}\n"));
        }
    }
    assert!(
        report.is_empty(),
        "differences from CoreDNS (see docs/coredns.md):\n{report}"
    );
    ours.stop().await;
}

/// The deviations table of docs/coredns.md: `| query | ... |` rows whose
/// first cell is `<name> <TYPE>` in backticks.
fn documented_deviations() -> BTreeMap<&'static str, ()> {
    let text: &'static str = Box::leak(
        std::fs::read_to_string(dns_server::repo_path("docs/coredns.md"))
            .unwrap()
            .into_boxed_str(),
    );
    text.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(q, _)| q))
        .filter(|q| q.split_whitespace().count() == 2)
        .map(|q| (q, ()))
        .collect()
}

/// CoreDNS forwarding the clusterset.local stub domain to clusterset-dns
/// answers with our data over UDP and TCP.
#[tokio::test(flavor = "multi_thread")]
async fn coredns_forwarding_the_stub_domain_returns_our_answers() {
    let (_plane, ours) = example_cluster().await;
    let coredns = CoreDns::start(&format!(
        "clusterset.local:{{port}} {{\n  bind 127.0.0.1\n  forward . {}\n}}\n",
        ours.dns_addr()
    ));
    wait_answering(
        coredns.addr,
        "web.shop.svc.clusterset.local.",
        "coredns forwarder",
        || coredns.log(),
    )
    .await;
    for transport in [Transport::Udp, Transport::Tcp] {
        let version = exchange(
            coredns.addr,
            transport,
            &query("dns-version.clusterset.local.", RecordType::TXT),
        )
        .await;
        assert_eq!(
            sorted(&version.answers),
            vec!["dns-version.clusterset.local. 28800 IN TXT \"1.0.0\"".to_string()],
            "{transport:?}"
        );
        let db = exchange(
            coredns.addr,
            transport,
            &query("db.shop.svc.clusterset.local.", RecordType::A),
        )
        .await;
        let direct = exchange(
            ours.dns_addr(),
            transport,
            &query("db.shop.svc.clusterset.local.", RecordType::A),
        )
        .await;
        assert_eq!(
            sorted(&db.answers),
            sorted(&direct.answers),
            "{transport:?}"
        );
        let missing = exchange(
            coredns.addr,
            transport,
            &query("missing.shop.svc.clusterset.local.", RecordType::A),
        )
        .await;
        assert_eq!(
            missing.metadata.response_code,
            ResponseCode::NXDomain,
            "{transport:?}"
        );
    }
    // And through dig, as an operator would check it.
    let dig = std::process::Command::new("dig")
        .args([
            "+short",
            "-p",
            &coredns.addr.port().to_string(),
            "@127.0.0.1",
            "web.shop.svc.clusterset.local",
            "AAAA",
        ])
        .output()
        .expect("dig is installed (scripts/test.sh installs it)");
    assert_eq!(String::from_utf8_lossy(&dig.stdout).trim(), "fd00:10:96::a");
    ours.stop().await;
}
