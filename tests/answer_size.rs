//! Answer sizes against Knot DNS: the same zone (our `dump-zone` of one
//! manifest) served by clusterset-dns and by `knotd`, the same questions
//! asked of both, and every one of our responses must carry the same
//! records in at most as many bytes as Knot's. Knot compresses every name
//! it can; before our answers were fully compressed, a 1,000-record A
//! answer took 42,478 bytes here against Knot's 16,048.
//!
//! `knotd` comes with the Debian package `knot` (scripts/test.sh installs
//! it); a missing `knotd` fails the test with that hint.
//!
//! `cargo test --test answer_size -- --nocapture` prints the table of sizes
//! that docs/benchmarks.md ("Answer size") quotes.

mod dns_server;
mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use dns_server::{
    Options, QUERY_TIMEOUT, TestServer, Transport, big_headless, decode, encode, exchange_sized,
    query, query_edns, sorted, tcp_raw,
};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use tokio::process::{Child, Command};

/// How long Knot may take to load the zone and answer.
const KNOT_START: Duration = Duration::from_secs(60);

/// The clusterset: a headless service with 1,000 dual-stack endpoints (the
/// default `max_records`), one with 400 (whose SRV answers and all their
/// glue fit one message on both servers: Knot sends as much glue as fits,
/// we send all or none, so a larger one would differ in glue), and small
/// ones whose answers fit a UDP datagram.
fn manifest() -> String {
    [
        big_headless("shop", "huge", 30, 1000, true),
        big_headless("shop", "big", 31, 400, true),
        big_headless("shop", "mid", 32, 70, false),
        big_headless("shop", "small", 33, 10, true),
    ]
    .concat()
}

/// The questions, with the transport and EDNS payload (`None`: no EDNS).
fn questions() -> Vec<(&'static str, RecordType, Transport, Option<u16>)> {
    use RecordType::{A, AAAA, NS, SOA, SRV, TXT};
    use Transport::{Tcp, Udp};
    vec![
        ("huge.shop.svc.clusterset.local.", A, Tcp, None),
        ("huge.shop.svc.clusterset.local.", AAAA, Tcp, None),
        ("big.shop.svc.clusterset.local.", A, Tcp, None),
        ("big.shop.svc.clusterset.local.", SRV, Tcp, None),
        ("_http._tcp.big.shop.svc.clusterset.local.", SRV, Tcp, None),
        (
            "_http._tcp.big.shop.svc.clusterset.local.",
            SRV,
            Tcp,
            Some(1232),
        ),
        (
            "_http._tcp.small.shop.svc.clusterset.local.",
            SRV,
            Tcp,
            None,
        ),
        (
            "_http._tcp.small.shop.svc.clusterset.local.",
            SRV,
            Udp,
            Some(1232),
        ),
        ("mid.shop.svc.clusterset.local.", A, Tcp, None),
        ("mid.shop.svc.clusterset.local.", A, Udp, Some(1232)),
        (
            "h-007.cluster-a.small.shop.svc.clusterset.local.",
            AAAA,
            Tcp,
            None,
        ),
        (
            "h-007.cluster-a.small.shop.svc.clusterset.local.",
            AAAA,
            Udp,
            None,
        ),
        ("clusterset.local.", SOA, Tcp, None),
        ("clusterset.local.", NS, Tcp, None),
        ("dns-version.clusterset.local.", TXT, Tcp, None),
        ("nope.shop.svc.clusterset.local.", A, Tcp, None),
        ("huge.shop.svc.clusterset.local.", TXT, Tcp, None),
    ]
}

/// `knotd` on PATH or where the Debian package puts it.
fn knotd() -> PathBuf {
    let candidates = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("knotd"));
    for candidate in candidates {
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "`knotd` is required by this test but was not found on PATH or in /usr/sbin; \
         install it with `apt-get install knot` (scripts/test.sh installs it)"
    );
}

fn knot_files(dir: &Path, manifest: &Path, port: u16) -> PathBuf {
    let dump = std::process::Command::new(env!("CARGO_BIN_EXE_clusterset-dns"))
        .args(["dump-zone", "--file"])
        .arg(manifest)
        .output()
        .expect("run clusterset-dns dump-zone");
    assert!(
        dump.status.success(),
        "dump-zone failed: {}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let zone = dir.join("clusterset.local.zone");
    std::fs::write(&zone, &dump.stdout).expect("write the zone file");
    for sub in ["db", "run"] {
        std::fs::create_dir_all(dir.join(sub)).expect("create Knot directories");
    }
    let d = dir.display();
    let conf = format!(
        "server:
    rundir: \"{d}/run\"
    listen: 127.0.0.1@{port}
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
database:
    storage: \"{d}/db\"
log:
  - target: stderr
    any: error
template:
  - id: default
    storage: \"{d}\"
    zonefile-sync: -1
    zonefile-load: whole
    journal-content: none
zone:
  - domain: clusterset.local
    file: \"{zone}\"
",
        zone = zone.display()
    );
    let path = dir.join("knot.conf");
    std::fs::write(&path, conf).expect("write knot.conf");
    path
}

/// Starts `knotd` and waits until it answers the zone's SOA over TCP.
async fn start_knot(conf: &Path, addr: SocketAddr) -> Child {
    let mut child = Command::new(knotd())
        .arg("-c")
        .arg(conf)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start knotd");
    let probe = encode(&query("clusterset.local.", RecordType::SOA));
    let deadline = tokio::time::Instant::now() + KNOT_START;
    loop {
        if let Some(reply) = tcp_raw(addr, &probe, QUERY_TIMEOUT).await
            && decode(&reply, "Knot SOA").metadata.response_code == ResponseCode::NoError
        {
            return child;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("knotd exited during startup: {status} (its log is above)");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "knotd did not answer within {KNOT_START:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The records of a response as comparable sets per section.
fn sections(message: &Message) -> [Vec<String>; 3] {
    [
        sorted(&message.answers),
        sorted(&message.authorities),
        sorted(&message.additionals),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn answers_are_no_larger_than_knots_for_the_same_records() {
    let yaml = manifest();
    let ours = TestServer::from_yaml(&yaml, Options::fast_path(true)).await;
    let dir = tempfile::tempdir().expect("create tempdir");
    let port = dns_server::free_udp_and_tcp_port();
    let knot_addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let conf = knot_files(dir.path(), ours.manifest(), port);
    let mut knot = start_knot(&conf, knot_addr).await;

    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for (name, rtype, transport, edns) in questions() {
        let message = match edns {
            Some(payload) => query_edns(name, rtype, payload, 0),
            None => query(name, rtype),
        };
        let (mine, mine_len) = exchange_sized(ours.dns(), transport, &message).await;
        let (theirs, theirs_len) = exchange_sized(knot_addr, transport, &message).await;
        let what = format!(
            "{name} {rtype} over {transport:?}{}",
            edns.map_or(String::new(), |p| format!(" (EDNS {p})"))
        );
        rows.push(format!(
            "| {name} {rtype} | {transport:?}{} | {} | {} | {mine_len} | {theirs_len} |",
            edns.map_or(String::new(), |p| format!(", EDNS {p}")),
            mine.answers.len(),
            mine.additionals.len(),
        ));
        if mine.metadata.response_code != theirs.metadata.response_code
            || mine.metadata.truncation != theirs.metadata.truncation
            || sections(&mine) != sections(&theirs)
        {
            failures.push(format!(
                "{what}: different answers\n--- ours\n{mine}\n--- Knot\n{theirs}"
            ));
        } else if mine_len > theirs_len {
            failures.push(format!("{what}: {mine_len} bytes, Knot {theirs_len}"));
        }
    }
    println!("| question | transport | answers | additional | clusterset-dns bytes | Knot bytes |");
    println!("|---|---|---:|---:|---:|---:|");
    for row in &rows {
        println!("{row}");
    }
    knot.kill().await.expect("stop knotd");
    ours.stop().await;
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // The large answers are what this is about: they must be in the table
    // whole (a truncated pair would compare equal in size and prove nothing).
    assert!(rows[0].contains("| 1000 | 0 |"), "{}", rows[0]);
    assert!(rows[3].contains("| 400 | 800 |"), "{}", rows[3]);
}

/// A local-first zone as this cluster's server builds it (a ClusterProperty
/// in the manifest) is the zone `dump-zone` writes: Knot serving the dump
/// answers every name as we do, the service name with this cluster's
/// endpoints only and SRV with every cluster's.
#[tokio::test(flavor = "multi_thread")]
async fn a_local_first_zone_dumps_to_the_answers_it_serves() {
    use dns_server::{NOT_READY, READY, local_first_clusterset};
    for yaml in [
        local_first_clusterset(Some("cluster-a"), [READY, READY], READY),
        local_first_clusterset(Some("cluster-a"), [NOT_READY, NOT_READY], READY),
        local_first_clusterset(None, [READY, READY], READY),
    ] {
        let ours = TestServer::from_yaml(&yaml, Options::fast_path(true)).await;
        let dir = tempfile::tempdir().expect("create tempdir");
        let port = dns_server::free_udp_and_tcp_port();
        let knot_addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let conf = knot_files(dir.path(), ours.manifest(), port);
        let mut knot = start_knot(&conf, knot_addr).await;
        let db = "db.shop.svc.clusterset.local.";
        let mut failures = Vec::new();
        for (name, rtype) in [
            (db.to_owned(), RecordType::A),
            (db.to_owned(), RecordType::AAAA),
            (db.to_owned(), RecordType::SRV),
            (format!("_pg._tcp.{db}"), RecordType::SRV),
            (format!("db-0.cluster-b.{db}"), RecordType::A),
            (format!("db-1.cluster-a.{db}"), RecordType::A),
            ("web.shop.svc.clusterset.local.".to_owned(), RecordType::A),
        ] {
            for transport in [Transport::Udp, Transport::Tcp] {
                let message = query(&name, rtype);
                let (mine, _) = exchange_sized(ours.dns(), transport, &message).await;
                let (theirs, _) = exchange_sized(knot_addr, transport, &message).await;
                if mine.metadata.response_code != theirs.metadata.response_code
                    || sections(&mine) != sections(&theirs)
                {
                    failures.push(format!(
                        "{name} {rtype} over {transport:?}\n--- ours\n{mine}\n--- Knot\n{theirs}"
                    ));
                }
            }
        }
        knot.kill().await.expect("stop knotd");
        ours.stop().await;
        assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    }
}
