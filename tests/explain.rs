//! `/explain` on the admin endpoint, against a real server fed from a
//! manifest file: it reports exactly the response DNS sends, what the index
//! holds behind it, and notes that say why. (The Kubernetes-only parts,
//! rejected objects and missing namespaces, are in `tests/kubernetes.rs`.)

mod dns_server;
mod support;

use std::time::Duration;

use dns_server::{
    Options, TestServer, Transport, exchange, explain, explain_notes, query, read_metric,
};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use serde_json::Value;
use support::{http_get, wait_for};

const EXAMPLE: &str = "config/example-clusterset.yaml";

fn strings(value: &Value) -> Vec<String> {
    let mut lines: Vec<String> = value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
        .iter()
        .map(|v| v.as_str().expect("a string").to_owned())
        .collect();
    lines.sort();
    lines
}

/// For every name and type, `/explain` reports the rcode and the answer
/// and additional records a real TCP query gets.
#[tokio::test(flavor = "multi_thread")]
async fn explain_reports_the_response_dns_sends() {
    let server = TestServer::from_file(EXAMPLE, Options::fast_path(true)).await;
    let names = [
        "clusterset.local.",
        "dns-version.clusterset.local.",
        "shop.svc.clusterset.local.",
        "web.shop.svc.clusterset.local.",
        "_http._tcp.web.shop.svc.clusterset.local.",
        "db.shop.svc.clusterset.local.",
        "_postgres._tcp.db.shop.svc.clusterset.local.",
        "db-0.cluster-east.db.shop.svc.clusterset.local.",
        "cluster-east.db.shop.svc.clusterset.local.",
        "batch.jobs.svc.clusterset.local.",
        "nope.shop.svc.clusterset.local.",
        "example.com.",
    ];
    let types = [
        RecordType::A,
        RecordType::AAAA,
        RecordType::SRV,
        RecordType::TXT,
        RecordType::SOA,
    ];
    for name in names {
        for rtype in types {
            let what = format!("{name} {rtype}");
            let dns = exchange(server.dns(), Transport::Tcp, &query(name, rtype)).await;
            let explained = explain(server.admin(), name, &rtype.to_string()).await;
            assert_eq!(explained["question"], what.as_str());
            let rcode = match dns.metadata.response_code {
                ResponseCode::NoError => "NOERROR",
                ResponseCode::NXDomain => "NXDOMAIN",
                ResponseCode::Refused => "REFUSED",
                other => panic!("{what}: unexpected {other:?}"),
            };
            assert_eq!(explained["rcode"], rcode, "{what}");
            let render = |records: &[hickory_proto::rr::Record]| {
                let mut lines: Vec<String> = records.iter().map(dns_server::render).collect();
                lines.sort();
                lines
            };
            // The test renderer writes SOA serials as SERIAL; check the
            // serial against the zone's instead.
            let answer: Vec<String> = strings(&explained["answer"])
                .into_iter()
                .map(|line| {
                    let mut fields: Vec<&str> = line.split(' ').collect();
                    if fields.get(3) == Some(&"SOA") {
                        assert_eq!(
                            fields[6].parse::<u64>().ok(),
                            explained["zone_serial"].as_u64(),
                            "{what}"
                        );
                        fields[6] = "SERIAL";
                    }
                    fields.join(" ")
                })
                .collect();
            assert_eq!(answer, render(&dns.answers), "{what}");
            assert_eq!(
                strings(&explained["additional"]),
                render(&dns.additionals),
                "{what}"
            );
            assert_eq!(
                explained["authority"].as_array().unwrap().len(),
                dns.authorities.len(),
                "{what}"
            );
        }
    }
    server.stop().await;
}

/// The index behind a name, and the reason for negative answers.
#[tokio::test(flavor = "multi_thread")]
async fn explain_shows_the_index_and_says_why() {
    let server = TestServer::from_file(EXAMPLE, Options::fast_path(true)).await;
    let admin = server.admin();

    let db = explain(admin, "db.shop.svc.clusterset.local", "A").await;
    assert_eq!(db["name"]["form"], "service");
    assert_eq!(db["service"]["import"]["type"], "Headless");
    let clusters: Vec<&str> = db["service"]["slices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["cluster"].as_str().unwrap())
        .collect();
    assert_eq!(clusters, ["cluster-east", "cluster-east", "cluster-west"]);
    assert!(
        explain_notes(&db).contains("3 ready endpoint(s) in 2 cluster(s)"),
        "{db:#}"
    );

    let web = explain(admin, "web.shop.svc.clusterset.local", "AAAA").await;
    assert_eq!(web["service"]["import"]["type"], "ClusterSetIP");
    assert_eq!(web["service"]["import"]["ips"][1], "fd00:10:96::a");
    assert_eq!(web["service"]["namespace_exists"], Value::Null);

    let batch = explain(admin, "batch.jobs.svc.clusterset.local", "A").await;
    assert_eq!(batch["rcode"], "NXDOMAIN");
    assert_eq!(batch["service"]["slices"][0]["not_ready"], 1);
    assert!(
        explain_notes(&batch).contains("headless import without ready endpoints (1 not ready)"),
        "{batch:#}"
    );

    let missing = explain(admin, "nope.shop.svc.clusterset.local", "A").await;
    assert_eq!(missing["service"]["import"], Value::Null);
    assert!(explain_notes(&missing).contains("no ServiceImport shop/nope in the index"));

    let pod = explain(admin, "db-9.cluster-east.db.shop.svc.clusterset.local", "A").await;
    assert_eq!(pod["name"]["form"], "endpoint");
    assert_eq!(pod["name"]["host"], "db-9");
    assert!(explain_notes(&pod).contains("no ready endpoint db-9 in cluster cluster-east"));

    let cluster = explain(admin, "cluster-east.db.shop.svc.clusterset.local", "A").await;
    assert_eq!(cluster["name"]["form"], "cluster");
    assert_eq!(cluster["rcode"], "NOERROR");
    assert!(explain_notes(&cluster).contains("never have records"));

    let outside = explain(admin, "example.com", "A").await;
    assert_eq!(outside["rcode"], "REFUSED");
    assert_eq!(outside["service"], Value::Null);
    assert!(explain_notes(&outside).contains("outside the zone clusterset.local."));

    // Letter case and escapes in the query string.
    let mixed = explain(admin, "DB%2EShop.svc.clusterset.local", "a").await;
    assert_eq!(mixed["question"], "DB.Shop.svc.clusterset.local. A");
    assert_eq!(mixed["answer"].as_array().unwrap().len(), 3, "{mixed:#}");
    server.stop().await;
}

/// Bad requests get 400 and a usage line, never a panic or a guess.
#[tokio::test(flavor = "multi_thread")]
async fn explain_rejects_bad_requests_with_usage() {
    let server = TestServer::from_file(EXAMPLE, Options::fast_path(true)).await;
    for path in [
        "/explain",
        "/explain?type=A",
        "/explain?name=web.shop.svc.clusterset.local&type=BOGUS",
        "/explain?name=web.shop.svc.clusterset.local&colour=red",
        "/explain?name=bad%2",
        "/explain?name=a..b",
    ] {
        let (status, body) = http_get(server.admin(), path).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body.contains("usage: /explain?name="), "{path}: {body}");
    }
    // The endpoint still answers afterwards.
    let web = explain(server.admin(), "web.shop.svc.clusterset.local", "A").await;
    assert_eq!(web["rcode"], "NOERROR");
    server.stop().await;
}

/// While the file is broken, `/explain` says the answers are from the last
/// good index and names the error.
#[tokio::test(flavor = "multi_thread")]
async fn explain_names_the_error_while_the_source_is_stale() {
    let good = std::fs::read_to_string(dns_server::repo_path(EXAMPLE)).unwrap();
    let server = TestServer::from_yaml(&good, Options::fast_path(true)).await;
    server.write_manifest(&good.replacen("10.96.10.10", "not-an-ip", 1));
    wait_for("source_stale = 1", Duration::from_secs(5), || async {
        match read_metric(server.admin(), "clusterset_dns_source_stale").await {
            1.0 => Ok(()),
            other => Err(format!("source_stale {other}")),
        }
    })
    .await;
    let web = explain(server.admin(), "web.shop.svc.clusterset.local", "A").await;
    assert_eq!(
        web["answer"][0],
        "web.shop.svc.clusterset.local. 5 IN A 10.96.10.10"
    );
    let notes = explain_notes(&web);
    assert!(notes.contains("the source is failing"), "{notes}");
    assert!(
        notes.contains("\"not-an-ip\" is not an IP address"),
        "{notes}"
    );
    assert!(
        notes.contains("answers come from the last good index"),
        "{notes}"
    );
    server.stop().await;
}
