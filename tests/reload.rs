//! The manifest file is watched: edits are served within seconds, broken
//! edits keep the last good zone (and raise `source_stale`), and answering
//! never stalls or fails while the file churns. A broken file at startup is
//! refused with an error naming the document and the field.

mod dns_server;
mod support;

use std::time::Duration;

use dns_server::{
    Options, SOA, TestServer, Transport, answers, exchange, query, read_metric, sorted, try_start,
};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use support::wait_for;
use tokio::time::Instant;

/// How long an edit may take to be served.
const RELOAD_LIMIT: Duration = Duration::from_secs(3);
/// How long a broken file must leave the answers alone.
const STALE_HOLD: Duration = Duration::from_secs(1);
const STALE: &str = "clusterset_dns_source_stale";
const RELOADS_OK: &str = "clusterset_dns_source_reloads_total{result=\"ok\"}";
const RELOADS_ERROR: &str = "clusterset_dns_source_reloads_total{result=\"error\"}";

const WEB: &str = "web.prod.svc.clusterset.local.";

fn import(name: &str, ips: &str) -> String {
    format!(
        "apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {{name: {name}, namespace: prod}}
spec:
  type: ClusterSetIP
  ips: [{ips}]
  ports: [{{name: http, protocol: TCP, port: 80}}]
---
"
    )
}

fn a(name: &str, ip: &str) -> String {
    format!("{name}.prod.svc.clusterset.local. 5 IN A {ip}")
}

/// Polls until `name`/`rtype` answers exactly `want` (sorted zone lines).
async fn until_answers(server: &TestServer, name: &str, rtype: RecordType, want: &[String]) {
    let mut want = want.to_vec();
    want.sort();
    wait_for(
        &format!("{name} {rtype} to answer {want:?}"),
        RELOAD_LIMIT,
        || {
            let want = want.clone();
            async move {
                let got = answers(server.dns(), name, rtype).await;
                if got == want {
                    Ok(())
                } else {
                    Err(format!("{got:?}"))
                }
            }
        },
    )
    .await;
}

async fn until_metric(server: &TestServer, name: &str, value: f64) {
    wait_for(&format!("{name} to be {value}"), RELOAD_LIMIT, || async {
        match read_metric(server.admin(), name).await {
            read if read == value => Ok(()),
            read => Err(format!("{read}")),
        }
    })
    .await;
}

/// Adding an address, adding a service and deleting one are each served within 3 s.
#[tokio::test(flavor = "multi_thread")]
async fn manifest_edits_are_served_within_three_seconds() {
    let base = [import("web", "10.96.0.1"), import("old", "10.96.0.9")].concat();
    let server = TestServer::from_yaml(&base, Options::fast_path(true)).await;
    assert_eq!(
        answers(server.dns(), WEB, RecordType::A).await,
        [a("web", "10.96.0.1")]
    );

    // An IPv6 address joins the import.
    let dual = [
        import("web", "10.96.0.1, \"fd00::1\""),
        import("old", "10.96.0.9"),
    ]
    .concat();
    server.write_manifest(&dual);
    until_answers(
        &server,
        WEB,
        RecordType::AAAA,
        &["web.prod.svc.clusterset.local. 5 IN AAAA fd00::1".into()],
    )
    .await;
    assert_eq!(
        answers(server.dns(), WEB, RecordType::A).await,
        [a("web", "10.96.0.1")]
    );

    // A new service appears.
    let added = [dual.clone(), import("new", "10.96.0.5")].concat();
    server.write_manifest(&added);
    let new = "new.prod.svc.clusterset.local.";
    until_answers(&server, new, RecordType::A, &[a("new", "10.96.0.5")]).await;

    // A service is deleted: NXDOMAIN with the SOA.
    let deleted = [
        import("web", "10.96.0.1, \"fd00::1\""),
        import("new", "10.96.0.5"),
    ]
    .concat();
    server.write_manifest(&deleted);
    let old = "old.prod.svc.clusterset.local.";
    wait_for("old.prod to be NXDOMAIN", RELOAD_LIMIT, || async {
        let r = exchange(server.dns(), Transport::Udp, &query(old, RecordType::A)).await;
        match r.metadata.response_code {
            ResponseCode::NXDomain => Ok(r),
            other => Err(format!("{other}")),
        }
    })
    .await;
    let r = exchange(server.dns(), Transport::Tcp, &query(old, RecordType::A)).await;
    assert_eq!(r.metadata.response_code, ResponseCode::NXDomain, "over TCP");
    assert_eq!(sorted(&r.authorities), [SOA.to_string()]);
    // One publish per edit, each timed; the start-up load is not.
    assert_eq!(
        read_metric(
            server.admin(),
            "clusterset_dns_zone_publish_latency_seconds_count"
        )
        .await,
        3.0
    );
    server.stop().await;
}

/// Asserts for [`STALE_HOLD`] that the answers stay those of the last good
/// version, over UDP and TCP.
async fn answers_stay(server: &TestServer, want: &[String]) {
    let until = Instant::now() + STALE_HOLD;
    let mut rounds = 0;
    while Instant::now() < until || rounds < 3 {
        for transport in [Transport::Udp, Transport::Tcp] {
            let r = exchange(server.dns(), transport, &query(WEB, RecordType::A)).await;
            assert_eq!(
                r.metadata.response_code,
                ResponseCode::NoError,
                "{transport:?}"
            );
            assert_eq!(sorted(&r.answers), want, "{transport:?}");
        }
        rounds += 1;
        tokio::time::sleep(dns_server::POLL_INTERVAL).await;
    }
}

/// Broken YAML or an invalid IP keeps the last good answers with source_stale 1 until fixed.
#[tokio::test(flavor = "multi_thread")]
async fn broken_manifests_keep_the_last_good_zone_until_fixed() {
    let good = import("web", "10.96.0.1");
    let server = TestServer::from_yaml(&good, Options::fast_path(true)).await;
    let v1 = vec![a("web", "10.96.0.1")];
    assert_eq!(read_metric(server.admin(), STALE).await, 0.0);

    // Broken YAML.
    server.write_manifest("apiVersion: multicluster.x-k8s.io/v1beta1\nkind: [unclosed\n");
    until_metric(&server, STALE, 1.0).await;
    answers_stay(&server, &v1).await;

    // Fixed, with a change so that the reload is visible.
    server.write_manifest(&import("web", "10.96.0.2"));
    let v2 = vec![a("web", "10.96.0.2")];
    until_answers(&server, WEB, RecordType::A, &v2).await;
    assert_eq!(read_metric(server.admin(), STALE).await, 0.0);

    // Valid YAML, invalid object: the whole file is rejected.
    let bad_ip = [import("web", "10.96.0.3"), import("bad", "not-an-ip")].concat();
    server.write_manifest(&bad_ip);
    until_metric(&server, STALE, 1.0).await;
    answers_stay(&server, &v2).await;
    let r = exchange(
        server.dns(),
        Transport::Udp,
        &query("bad.prod.svc.clusterset.local.", RecordType::A),
    )
    .await;
    assert_eq!(r.metadata.response_code, ResponseCode::NXDomain);

    // Fixed again.
    server.write_manifest(&import("web", "10.96.0.3"));
    until_answers(&server, WEB, RecordType::A, &[a("web", "10.96.0.3")]).await;
    until_metric(&server, STALE, 0.0).await;
    server.stop().await;
}

/// The served version moved away and back, a broken version renamed over it
/// and the old one renamed back, an emptied file, a directory where the
/// file was: each
/// failure keeps the answers and sets source_stale, is counted when a load
/// fails, and clears as soon as the served version is back in place.
#[tokio::test(flavor = "multi_thread")]
async fn source_stale_clears_when_the_served_version_is_put_back() {
    let good = import("web", "10.96.0.1");
    let server = TestServer::from_yaml(&good, Options::fast_path(true)).await;
    let v1 = vec![a("web", "10.96.0.1")];
    let path = server.manifest().to_path_buf();
    let aside = path.with_extension("aside");

    // Moved away (missing), then back.
    std::fs::rename(&path, &aside).unwrap();
    until_metric(&server, STALE, 1.0).await;
    answers_stay(&server, &v1).await;
    std::fs::rename(&aside, &path).unwrap();
    until_metric(&server, STALE, 0.0).await;

    // A broken version renamed over it, then the old one renamed back.
    std::fs::rename(&path, &aside).unwrap();
    std::fs::write(&path, "kind: [unclosed\n").unwrap();
    until_metric(&server, STALE, 1.0).await;
    std::fs::rename(&aside, &path).unwrap();
    until_metric(&server, STALE, 0.0).await;
    answers_stay(&server, &v1).await;

    // Truncated to nothing, as a writer does before it writes: not "no
    // services", but a file not written yet.
    std::fs::write(&path, "").unwrap();
    until_metric(&server, STALE, 1.0).await;
    answers_stay(&server, &v1).await;
    // A comment only is a deliberate empty clusterset.
    server.write_manifest("# nothing exported\n");
    until_answers(&server, WEB, RecordType::A, &[]).await;
    until_metric(&server, STALE, 0.0).await;
    let r = exchange(server.dns(), Transport::Udp, &query(WEB, RecordType::A)).await;
    assert_eq!(r.metadata.response_code, ResponseCode::NXDomain);
    server.write_manifest(&good);
    until_answers(&server, WEB, RecordType::A, &v1).await;

    // Unreadable (a directory in its place): a failed load, and counted.
    let errors = read_metric(server.admin(), RELOADS_ERROR).await;
    std::fs::rename(&path, &aside).unwrap();
    std::fs::create_dir(&path).unwrap();
    until_metric(&server, STALE, 1.0).await;
    until_metric(&server, RELOADS_ERROR, errors + 1.0).await;
    std::fs::remove_dir(&path).unwrap();
    std::fs::rename(&aside, &path).unwrap();
    until_metric(&server, STALE, 0.0).await;
    answers_stay(&server, &v1).await;
    server.stop().await;
}

/// While the file is rewritten 20 times, no query times out, fails or lacks its answer.
#[tokio::test(flavor = "multi_thread")]
async fn continuous_reloads_never_fail_a_query() {
    let version = |i: usize| {
        [
            import("web", &format!("10.96.0.{}", i % 2 + 1)),
            import(&format!("extra{i}"), "10.96.1.1"),
        ]
        .concat()
    };
    let server = TestServer::from_yaml(&version(0), Options::fast_path(true)).await;
    let reloads_before = read_metric(server.admin(), RELOADS_OK).await;
    let valid = [a("web", "10.96.0.1"), a("web", "10.96.0.2")];

    let manifest = server.manifest().to_path_buf();
    let writer = tokio::spawn(async move {
        for i in 1..=20 {
            let tmp = manifest.with_extension("tmp");
            tokio::fs::write(&tmp, version(i)).await.expect("write");
            tokio::fs::rename(&tmp, &manifest).await.expect("rename");
            // Pace the writes so that the 250 ms poller sees many of them.
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
    });

    let mut queries = 0;
    while !writer.is_finished() || queries < 50 {
        let transport = if queries % 2 == 0 {
            Transport::Udp
        } else {
            Transport::Tcp
        };
        // `exchange` fails the test on a timeout.
        let r = exchange(server.dns(), transport, &query(WEB, RecordType::A)).await;
        assert_eq!(
            r.metadata.response_code,
            ResponseCode::NoError,
            "query {queries} over {transport:?}"
        );
        let got = sorted(&r.answers);
        assert!(
            got.len() == 1 && valid.contains(&got[0]),
            "query {queries} over {transport:?}: {got:?}"
        );
        queries += 1;
    }
    writer.await.expect("writer task");

    // The last version (20: 10.96.0.1, extra20) is served in the end.
    until_answers(
        &server,
        "extra20.prod.svc.clusterset.local.",
        RecordType::A,
        &[a("extra20", "10.96.1.1")],
    )
    .await;
    let reloads = read_metric(server.admin(), RELOADS_OK).await - reloads_before;
    assert!(reloads >= 1.0, "no reload counted during the churn");
    assert_eq!(read_metric(server.admin(), STALE).await, 0.0);
    server.stop().await;
}

/// A broken manifest at startup is refused with an error naming document and field.
#[tokio::test(flavor = "multi_thread")]
async fn the_server_refuses_to_start_with_a_broken_manifest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("clusterset.yaml");
    std::fs::write(
        &path,
        [import("web", "10.96.0.1"), import("bad", "not-an-ip")].concat(),
    )
    .expect("write");
    match try_start(&path, Options::fast_path(true)).await {
        Ok(running) => {
            running.stop().await;
            panic!("started with an invalid IP");
        }
        Err(error) => {
            let message = clusterset_dns::error::Chain(&error).to_string();
            assert!(message.contains("document 2"), "{message}");
            assert!(message.contains("ServiceImport prod/bad"), "{message}");
            assert!(message.contains("spec.ips[0]"), "{message}");
        }
    }

    std::fs::write(&path, "kind: [unclosed\n").expect("write");
    match try_start(&path, Options::fast_path(false)).await {
        Ok(running) => {
            running.stop().await;
            panic!("started with broken YAML");
        }
        Err(error) => {
            let message = clusterset_dns::error::Chain(&error).to_string();
            assert!(message.contains("YAML"), "{message}");
        }
    }
}
