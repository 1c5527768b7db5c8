//! Local-first answers over real sockets, fed from a manifest with a
//! ClusterProperty: a local-first headless import exported from two
//! clusters answers its service name with this cluster's ready endpoints,
//! fails over to the other cluster's when they go not ready and back when
//! they return (reloads of the manifest, no restart), on the fast path,
//! the hickory path and TCP, and as `dig` sees it; per-endpoint names and
//! SRV answer for every cluster; the serving fallback answers only when
//! turned on; `/explain` and `clusterset_dns_local_first_answers_total`
//! say which tier answered.

mod dns_server;
mod support;

use std::process::Stdio;
use std::time::Duration;

use dns_server::{
    NOT_READY, Options, READY, TERMINATING, TestServer, Transport, exchange, explain,
    explain_notes, metric, query, sorted, within,
};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use serde_json::Value;
use support::wait_for;
use tokio::process::Command;

const DB: &str = "db.shop.svc.clusterset.local.";
const WEB: &str = "web.shop.svc.clusterset.local.";
/// How long a manifest edit may take to be served.
const RELOAD_LIMIT: Duration = Duration::from_secs(5);

fn a(ip: &str) -> String {
    format!("{DB} 5 IN A {ip}")
}

/// The service name's A answer over `transport`: rcode and sorted records.
async fn db_a(server: &TestServer, transport: Transport) -> (ResponseCode, Vec<String>) {
    let reply = exchange(server.dns(), transport, &query(DB, RecordType::A)).await;
    (reply.metadata.response_code, sorted(&reply.answers))
}

/// Polls until the service name answers `want` (sorted zone lines) over UDP.
async fn until_db_answers(server: &TestServer, want: &[String]) {
    let mut want = want.to_vec();
    want.sort();
    wait_for(&format!("{DB} A to answer {want:?}"), RELOAD_LIMIT, || {
        let want = want.clone();
        async move {
            let got = db_a(server, Transport::Udp).await.1;
            if got == want {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        }
    })
    .await;
}

/// The four counters of `clusterset_dns_local_first_answers_total`, in
/// tier order (local, all, local_serving, all_serving).
async fn tiers(server: &TestServer) -> [f64; 4] {
    let text = support::http_ok(server.admin(), "/metrics").await;
    ["local", "all", "local_serving", "all_serving"].map(|tier| {
        let name = format!("clusterset_dns_local_first_answers_total{{tier=\"{tier}\"}}");
        metric(&text, &name).unwrap_or_else(|| panic!("{name} missing from:\n{text}"))
    })
}

/// How much each counter grew from `before` to now.
async fn counted_since(server: &TestServer, before: [f64; 4]) -> [f64; 4] {
    let now = tiers(server).await;
    [0, 1, 2, 3].map(|i| now[i] - before[i])
}

/// `dig +short` of `name`/`qtype` over UDP or TCP, sorted.
async fn dig_short(server: &TestServer, name: &str, qtype: &str, tcp: bool) -> Vec<String> {
    let addr = server.dns();
    let mut command = Command::new("dig");
    command
        .arg(format!("@{}", addr.ip()))
        .args([
            "-p",
            &addr.port().to_string(),
            "+norec",
            "+short",
            "+tries=1",
            "+time=3",
        ])
        .args([name, qtype])
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if tcp {
        command.arg("+tcp");
    }
    let output = within(Duration::from_secs(10), "dig", command.output())
        .await
        .unwrap_or_else(|e| {
            panic!(
                "`dig` is required by this test but could not be run ({e}); install it with \
                 `apt-get install bind9-dnsutils` (scripts/test.sh installs it)"
            )
        });
    assert!(output.status.success(), "dig {name} {qtype} failed");
    let mut lines: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

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

/// The whole failover on one server: local, every cluster's when this
/// cluster's endpoints go not ready, local again when they return; then
/// the ClusterProperty goes (spread, uncounted) and names another cluster.
async fn fails_over_and_back(fast_path: bool) {
    let path = if fast_path {
        "fast path"
    } else {
        "hickory path"
    };
    let healthy = dns_server::local_first_clusterset(Some("cluster-a"), [READY, READY], READY);
    let server = TestServer::from_yaml(&healthy, Options::fast_path(fast_path)).await;
    let local = vec![a("10.1.0.10"), a("10.1.0.11")];

    // This cluster's ready endpoints, over UDP and TCP, counted as local.
    let before = tiers(&server).await;
    for transport in [Transport::Udp, Transport::Tcp] {
        assert_eq!(
            db_a(&server, transport).await,
            (ResponseCode::NoError, local.clone()),
            "{path} {transport:?}"
        );
    }
    assert_eq!(
        counted_since(&server, before).await,
        [2.0, 0.0, 0.0, 0.0],
        "{path}"
    );
    // SRV and per-endpoint names answer for every cluster, uncounted.
    let before = tiers(&server).await;
    let srv = exchange(server.dns(), Transport::Udp, &query(DB, RecordType::SRV)).await;
    let targets: Vec<String> = sorted(&srv.answers)
        .iter()
        .map(|line| line.rsplit(' ').next().unwrap().to_owned())
        .collect();
    assert_eq!(
        targets,
        [
            format!("db-0.cluster-a.{DB}"),
            format!("db-0.cluster-b.{DB}"),
            format!("db-1.cluster-a.{DB}")
        ],
        "{path}"
    );
    let pod = format!("db-0.cluster-b.{DB}");
    let reply = exchange(server.dns(), Transport::Udp, &query(&pod, RecordType::A)).await;
    assert_eq!(
        sorted(&reply.answers),
        [format!("{pod} 5 IN A 10.2.0.10")],
        "{path}"
    );
    assert_eq!(counted_since(&server, before).await, [0.0; 4], "{path}");
    let explained = explain(server.admin(), DB, "A").await;
    assert_eq!(explained["tier"], "local", "{explained:#}");
    assert_eq!(explained["service"]["import"]["locality"], "PreferSameZone");
    assert_eq!(explained["service"]["cluster_id"], "cluster-a");
    let notes = explain_notes(&explained);
    assert!(
        notes.contains("tier local: cluster-a (this cluster) has 2 ready endpoints"),
        "{notes}"
    );

    // cluster-a's pods go not ready (one failing its probe, one
    // terminating): every cluster's ready endpoints, which are b's.
    let failed =
        dns_server::local_first_clusterset(Some("cluster-a"), [NOT_READY, TERMINATING], READY);
    server.write_manifest(&failed);
    until_db_answers(&server, &[a("10.2.0.10")]).await;
    let before = tiers(&server).await;
    assert_eq!(
        db_a(&server, Transport::Tcp).await,
        (ResponseCode::NoError, vec![a("10.2.0.10")]),
        "{path}"
    );
    assert_eq!(
        counted_since(&server, before).await,
        [0.0, 1.0, 0.0, 0.0],
        "{path}"
    );
    let explained = explain(server.admin(), DB, "A").await;
    assert_eq!(explained["tier"], "all", "{explained:#}");
    let notes = explain_notes(&explained);
    assert!(
        notes.contains(
            "tier all: this cluster (cluster-a) has no ready endpoint: every cluster's 1 ready \
             endpoint"
        ),
        "{notes}"
    );
    // The terminating endpoint lost its name; b's keeps its own.
    let gone = format!("db-1.cluster-a.{DB}");
    let reply = exchange(server.dns(), Transport::Udp, &query(&gone, RecordType::A)).await;
    assert_eq!(
        reply.metadata.response_code,
        ResponseCode::NXDomain,
        "{path}"
    );

    // Back: this cluster's again.
    server.write_manifest(&healthy);
    until_db_answers(&server, &local).await;

    // Without the ClusterProperty: every cluster's, not counted, and
    // /explain says why.
    let anonymous = dns_server::local_first_clusterset(None, [READY, READY], READY);
    server.write_manifest(&anonymous);
    let every = vec![a("10.1.0.10"), a("10.1.0.11"), a("10.2.0.10")];
    until_db_answers(&server, &every).await;
    let before = tiers(&server).await;
    assert_eq!(db_a(&server, Transport::Udp).await.1, every, "{path}");
    assert_eq!(counted_since(&server, before).await, [0.0; 4], "{path}");
    let explained = explain(server.admin(), DB, "A").await;
    assert_eq!(explained["tier"], Value::Null);
    assert_eq!(explained["service"]["cluster_id"], Value::Null);
    let notes = explain_notes(&explained);
    assert!(
        notes.contains("this cluster's id is unknown (the manifest has no ClusterProperty cluster.clusterset.k8s.io)"),
        "{notes}"
    );

    // The property names the other cluster: its endpoints.
    let as_b = dns_server::local_first_clusterset(Some("cluster-b"), [READY, READY], READY);
    server.write_manifest(&as_b);
    until_db_answers(&server, &[a("10.2.0.10")]).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_local_first_name_fails_over_and_back_on_the_fast_path() {
    fails_over_and_back(true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_local_first_name_fails_over_and_back_on_the_hickory_path() {
    fails_over_and_back(false).await;
}

/// What `dig` sees before and after cluster-a's pods become not ready, over
/// UDP and TCP: the worked example of docs/dns.md ("Local first").
#[tokio::test(flavor = "multi_thread")]
async fn dig_sees_this_clusters_endpoints_then_the_others() {
    let healthy = dns_server::local_first_clusterset(Some("cluster-a"), [READY, READY], READY);
    let server = TestServer::from_yaml(&healthy, Options::fast_path(true)).await;
    for tcp in [false, true] {
        assert_eq!(
            dig_short(&server, DB, "A", tcp).await,
            ["10.1.0.10", "10.1.0.11"],
            "tcp: {tcp}"
        );
        assert_eq!(
            dig_short(&server, &format!("_pg._tcp.{DB}"), "SRV", tcp).await,
            [
                format!("0 33 5432 db-0.cluster-a.{DB}"),
                format!("0 33 5432 db-0.cluster-b.{DB}"),
                format!("0 33 5432 db-1.cluster-a.{DB}"),
            ],
            "tcp: {tcp}"
        );
        // A ClusterSetIP import answers its clusterset IP as before.
        assert_eq!(dig_short(&server, WEB, "A", tcp).await, ["10.96.0.20"]);
    }
    let failed =
        dns_server::local_first_clusterset(Some("cluster-a"), [NOT_READY, NOT_READY], READY);
    server.write_manifest(&failed);
    until_db_answers(&server, &[a("10.2.0.10")]).await;
    for tcp in [false, true] {
        assert_eq!(
            dig_short(&server, DB, "A", tcp).await,
            ["10.2.0.10"],
            "tcp: {tcp}"
        );
    }
    server.stop().await;
}

/// No endpoint ready anywhere, some terminating but serving: NXDOMAIN with
/// the fallback off (and /explain says what it would answer), their
/// addresses with it on, this cluster's first at the service name.
#[tokio::test(flavor = "multi_thread")]
async fn the_serving_fallback_answers_only_when_turned_on() {
    let draining = dns_server::local_first_clusterset(
        Some("cluster-a"),
        [NOT_READY, TERMINATING],
        TERMINATING,
    );
    let off = TestServer::from_yaml(&draining, Options::fast_path(true)).await;
    assert_eq!(
        db_a(&off, Transport::Udp).await,
        (ResponseCode::NXDomain, vec![])
    );
    let explained = explain(off.admin(), DB, "A").await;
    assert_eq!(explained["service"]["serve_terminating"], false);
    assert_eq!(explained["service"]["slices"][0]["serving_count"], 1);
    let notes = explain_notes(&explained);
    assert!(notes.contains("its names are NXDOMAIN"), "{notes}");
    assert!(
        notes.contains("2 of the not-ready endpoints are terminating but still serving: with serve_terminating = true"),
        "{notes}"
    );
    off.stop().await;

    let on = TestServer::from_yaml(
        &draining,
        Options {
            serve_terminating: true,
            ..Options::fast_path(true)
        },
    )
    .await;
    let before = tiers(&on).await;
    for transport in [Transport::Udp, Transport::Tcp] {
        assert_eq!(
            db_a(&on, transport).await,
            (ResponseCode::NoError, vec![a("10.1.0.11")]),
            "{transport:?}"
        );
    }
    // Every other name answers from every cluster's serving endpoints.
    let srv = exchange(on.dns(), Transport::Udp, &query(DB, RecordType::SRV)).await;
    assert_eq!(srv.answers.len(), 2, "{srv}");
    let pod = format!("db-0.cluster-b.{DB}");
    let reply = exchange(on.dns(), Transport::Udp, &query(&pod, RecordType::A)).await;
    assert_eq!(sorted(&reply.answers), [format!("{pod} 5 IN A 10.2.0.10")]);
    assert_eq!(counted_since(&on, before).await, [0.0, 0.0, 2.0, 2.0]);
    let explained = explain(on.admin(), DB, "A").await;
    assert_eq!(explained["tier"], "local_serving");
    assert_eq!(
        strings(&explained["answer"]),
        [format!("{DB} 5 IN A 10.1.0.11")]
    );
    let notes = explain_notes(&explained);
    assert!(
        notes.contains(
            "tier local_serving: serving fallback: no endpoint is ready in any cluster; \
             cluster-a (this cluster) has 1 terminating but serving endpoint"
        ),
        "{notes}"
    );

    // A ready endpoint anywhere ends the fallback: the terminating ones
    // lose their names.
    let recovering =
        dns_server::local_first_clusterset(Some("cluster-a"), [NOT_READY, TERMINATING], READY);
    on.write_manifest(&recovering);
    until_db_answers(&on, &[a("10.2.0.10")]).await;
    let gone = format!("db-1.cluster-a.{DB}");
    let reply = exchange(on.dns(), Transport::Udp, &query(&gone, RecordType::A)).await;
    assert_eq!(reply.metadata.response_code, ResponseCode::NXDomain);
    on.stop().await;
}

/// A local-first ClusterSetIP import answers its clusterset IP (kube-proxy
/// picks the endpoints, not DNS), uncounted, and /explain says what
/// kube-proxy in this cluster does.
#[tokio::test(flavor = "multi_thread")]
async fn a_local_first_clusterset_ip_import_is_explained_by_what_kube_proxy_does() {
    let healthy = dns_server::local_first_clusterset(Some("cluster-a"), [READY, READY], READY);
    let server = TestServer::from_yaml(&healthy, Options::fast_path(true)).await;
    let before = tiers(&server).await;
    let reply = exchange(server.dns(), Transport::Udp, &query(WEB, RecordType::A)).await;
    assert_eq!(sorted(&reply.answers), [format!("{WEB} 5 IN A 10.96.0.20")]);
    assert_eq!(counted_since(&server, before).await, [0.0; 4]);
    let explained = explain(server.admin(), WEB, "A").await;
    assert_eq!(explained["tier"], Value::Null);
    let notes = explain_notes(&explained);
    assert!(
        notes.contains(
            "kube-proxy in this cluster sends its connections to cluster-a (this cluster)'s 1 \
             ready endpoint"
        ),
        "{notes}"
    );
    let failed =
        dns_server::local_first_clusterset(Some("cluster-a"), [NOT_READY, NOT_READY], READY);
    server.write_manifest(&failed);
    wait_for(
        "the explanation to follow the reload",
        RELOAD_LIMIT,
        || async {
            let notes = explain_notes(&explain(server.admin(), WEB, "A").await);
            if notes.contains(
                "cluster-a (this cluster) has no ready endpoint, so kube-proxy in this cluster \
                 sends its connections to every cluster's 1 ready endpoint",
            ) {
                Ok(())
            } else {
                Err(notes)
            }
        },
    )
    .await;
    server.stop().await;
}
