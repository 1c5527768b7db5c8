//! A hung apiserver, and a network path that silently drops traffic, are
//! noticed within `apiserver_timeout` (docs/robustness.md, "Kubernetes
//! API"): `source_stale` turns 1 while DNS keeps answering from the last
//! index and `/ready` stays 200; once the apiserver answers again, a change
//! made meanwhile is served and `source_stale` is 0.
//!
//! Each scenario runs two servers side by side: one with a short
//! `apiserver_timeout` (the server under test) and one whose probe never
//! runs within the test (3600 s: what the server did before the probe
//! existed), to show that only the probe notices.
//!
//! Tier 2: a real kube-apiserver and etcd (`tests/controlplane`), and
//! toxiproxy-server (`tests/toxiproxy`), from `scripts/testenv-build.sh`.

mod controlplane;
mod dns_server;
mod support;
mod toxiproxy;

use std::path::{Path, PathBuf};
use std::time::Duration;

use clusterset_dns::api::ServiceImport;
use clusterset_dns::app::Running;
use controlplane::ControlPlane;
use dns_server::{Transport, exchange, query, sorted};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::http_get;
use tokio::time::Instant;
use toxiproxy::Toxiproxy;

/// `apiserver_timeout` of the server under test: a probe every 3 s, each
/// waiting at most 3 s.
const APISERVER_TIMEOUT: u64 = 6;
/// Beyond the bound: the metric is read every 100 ms, and the two shared
/// cores run other builds.
const SLACK: Duration = Duration::from_secs(3);
/// From the apiserver answering again to the change being served.
const CONVERGE: Duration = Duration::from_secs(10);
/// The probe of the control server never runs after its first.
const NO_PROBE: u64 = 3600;
const NAME: &str = "web.shop.svc.clusterset.local.";
const OLD: &str = "10.96.0.10";
const NEW: &str = "10.96.0.99";

/// [`dns_server::start_dns`] with `--apiserver-timeout` `apiserver_timeout` s.
async fn start_dns_with_timeout(kubeconfig: &Path, apiserver_timeout: u64) -> Running {
    dns_server::start_dns(kubeconfig, |args| {
        args.apiserver_timeout = Some(Duration::from_secs(apiserver_timeout).into());
    })
    .await
}

/// The namespace `shop` and the import `web` at [`OLD`].
async fn create_web(client: &Client) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "shop"}})).unwrap(),
        )
        .await
        .unwrap();
    let import: ServiceImport = serde_json::from_value(json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1",
        "kind": "ServiceImport",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"type": "ClusterSetIP", "ips": [OLD], "ports": [{"port": 80, "protocol": "TCP"}]},
    }))
    .unwrap();
    Api::<ServiceImport>::namespaced(client.clone(), "shop")
        .create(&PostParams::default(), &import)
        .await
        .unwrap();
}

/// Moves `web` to [`NEW`].
async fn move_web(client: &Client) {
    Api::<ServiceImport>::namespaced(client.clone(), "shop")
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"ips": [NEW]}})),
        )
        .await
        .unwrap();
}

/// `web`'s A answer: its address, or the rcode when it is not NOERROR
/// with one record.
async fn web(running: &Running) -> String {
    let response = exchange(
        running.dns_addr(),
        Transport::Udp,
        &query(NAME, RecordType::A),
    )
    .await;
    let answers = sorted(&response.answers);
    match (response.metadata.response_code, &answers[..]) {
        (ResponseCode::NoError, [one]) => one.rsplit(' ').next().unwrap().to_owned(),
        (rcode, _) => format!("{rcode} {answers:?}"),
    }
}

async fn stale(running: &Running) -> f64 {
    dns_server::read_metric(running.admin_addr(), "clusterset_dns_source_stale").await
}

async fn ready(running: &Running) -> u16 {
    http_get(running.admin_addr(), "/ready").await.0
}

/// Waits until `running` answers `ip` for `web` with `source_stale` 0;
/// the time it took, or `None` after `limit`.
async fn converged(running: &Running, ip: &str, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if web(running).await == ip && stale(running).await == 0.0 {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// From `since` (the hang began) until `probed` says stale: every 100 ms
/// DNS answers [`OLD`] from the last index, `/ready` is 200, and the
/// control server has noticed nothing. Returns how long it took; fails
/// beyond the bound.
async fn hang_noticed(probed: &Running, control: &Running, since: Instant) -> Duration {
    let bound = Duration::from_secs(APISERVER_TIMEOUT) + SLACK;
    loop {
        let stale_now = stale(probed).await == 1.0;
        let elapsed = since.elapsed();
        assert_eq!(web(probed).await, OLD, "answers from the last index");
        assert_eq!(ready(probed).await, 200, "/ready while the source is stale");
        assert_eq!(web(control).await, OLD);
        assert_eq!(stale(control).await, 0.0, "only the probe can notice");
        if stale_now {
            return elapsed;
        }
        assert!(
            elapsed < bound,
            "source_stale still 0 {elapsed:?} after the hang (apiserver_timeout {APISERVER_TIMEOUT} s)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// While the source is stale and the change unseen: answers stay [`OLD`],
/// `/ready` 200, and `/explain` answers at once, saying why.
async fn stays_stale(probed: &Running, hold: Duration) {
    let explanation = dns_server::explain(probed.admin_addr(), NAME, "A").await;
    let notes = dns_server::explain_notes(&explanation);
    assert!(
        notes.contains("the source is failing")
            && notes.contains("the apiserver did not answer a list within 3s"),
        "{notes}"
    );
    let until = Instant::now() + hold;
    while Instant::now() < until {
        assert_eq!(web(probed).await, OLD);
        assert_eq!(ready(probed).await, 200);
        assert_eq!(stale(probed).await, 1.0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let timeouts = dns_server::read_metric(
        probed.admin_addr(),
        "clusterset_dns_apiserver_probe_timeouts_total",
    )
    .await;
    assert!(timeouts >= 1.0, "probe timeouts counted: {timeouts}");
}

/// SIGSTOP: connections stay open, nothing errors, nothing answers.
#[tokio::test(flavor = "multi_thread")]
async fn a_hung_apiserver_is_noticed_within_the_bound_and_caught_up_after() {
    let mut plane = ControlPlane::start(1).await;
    let client = plane.apiservers[0].admin_client().await;
    create_web(&client).await;
    let kubeconfig = plane.apiservers[0].admin_kubeconfig.clone();
    let probed = start_dns_with_timeout(&kubeconfig, APISERVER_TIMEOUT).await;
    let control = start_dns_with_timeout(&kubeconfig, NO_PROBE).await;
    for running in [&probed, &control] {
        converged(running, OLD, Duration::from_secs(30))
            .await
            .expect("first sync");
    }
    // A second apiserver on the same etcd prefix takes the write the hung
    // one cannot.
    let replica = tokio::task::block_in_place(|| plane.start_replica(0));
    let replica_client = plane.apiservers[replica].admin_client().await;

    let stopped = Instant::now();
    plane.apiservers[0].signal("STOP");
    let detected = hang_noticed(&probed, &control, stopped).await;
    move_web(&replica_client).await;
    stays_stale(&probed, Duration::from_secs(2)).await;
    assert_eq!(stale(&control).await, 0.0);
    let hung_for = stopped.elapsed();

    plane.apiservers[0].signal("CONT");
    let resumed = Instant::now();
    let caught_up = converged(&probed, NEW, CONVERGE).await.unwrap_or_else(|| {
        panic!(
            "not serving {NEW} with source_stale 0 within {CONVERGE:?} of SIGCONT; metrics:\n{}",
            metrics_summary(&probed)
        )
    });
    // Nothing was lost on the stopped apiserver's connections: the control
    // server catches up too, having never said it was stale.
    converged(&control, NEW, Duration::from_secs(30))
        .await
        .expect("the control server catches up after SIGCONT");
    let control_caught_up = resumed.elapsed();
    eprintln!(
        "SIGSTOP: stale after {:.1} s (bound {APISERVER_TIMEOUT} s); hung {:.1} s; after SIGCONT \
         {NEW} served and not stale after {:.1} s; the control server (no probe) never stale, \
         caught up after {:.1} s",
        detected.as_secs_f64(),
        hung_for.as_secs_f64(),
        caught_up.as_secs_f64(),
        control_caught_up.as_secs_f64(),
    );
    probed.stop().await;
    control.stop().await;
}

/// A TCP proxy between the server and the apiserver drops every byte in
/// both directions and keeps the connections open (toxiproxy's `timeout`
/// toxic with timeout 0, on open and new connections alike); the change
/// made meanwhile goes to the apiserver directly.
#[tokio::test(flavor = "multi_thread")]
async fn a_proxy_that_drops_traffic_is_noticed_within_the_bound_and_caught_up_after_it_heals() {
    let plane = ControlPlane::start(1).await;
    let client = plane.apiservers[0].admin_client().await;
    create_web(&client).await;
    let toxiproxy = Toxiproxy::start(&plane.dir().join("toxiproxy.log")).await;
    let url = &plane.apiservers[0].url;
    let port = toxiproxy
        .proxy("apiserver", url.trim_start_matches("https://"))
        .await;
    let kubeconfig = proxied_kubeconfig(&plane.apiservers[0].admin_kubeconfig, url, port);
    let probed = start_dns_with_timeout(&kubeconfig, APISERVER_TIMEOUT).await;
    let control = start_dns_with_timeout(&kubeconfig, NO_PROBE).await;
    for running in [&probed, &control] {
        converged(running, OLD, Duration::from_secs(30))
            .await
            .expect("first sync through the proxy");
    }

    let dropped = Instant::now();
    toxiproxy.blackhole("apiserver").await;
    let detected = hang_noticed(&probed, &control, dropped).await;
    move_web(&client).await;
    stays_stale(&probed, Duration::from_secs(2)).await;
    assert_eq!(stale(&control).await, 0.0);
    let dropped_for = dropped.elapsed();

    toxiproxy.heal("apiserver").await;
    let healed = Instant::now();
    let caught_up = converged(&probed, NEW, CONVERGE).await.unwrap_or_else(|| {
        panic!(
            "not serving {NEW} with source_stale 0 within {CONVERGE:?} of the proxy healing; \
             metrics:\n{}",
            metrics_summary(&probed)
        )
    });
    // Removing the toxic closes the connections it held (toxiproxy's
    // `timeout` toxic closes its links on cleanup), so the control server
    // relists too: without the probe only the detection is missing.
    let control_caught_up = converged(&control, NEW, Duration::from_secs(75)).await;
    eprintln!(
        "proxy drops traffic: stale after {:.1} s (bound {APISERVER_TIMEOUT} s); dropping for \
         {:.1} s; after healing {NEW} served and not stale after {:.1} s; the control server \
         (no probe) never stale, {}",
        detected.as_secs_f64(),
        dropped_for.as_secs_f64(),
        caught_up.as_secs_f64(),
        match control_caught_up {
            Some(_) => format!(
                "caught up {:.1} s after healing",
                healed.elapsed().as_secs_f64()
            ),
            None => format!(
                "not caught up {:.1} s after healing",
                healed.elapsed().as_secs_f64()
            ),
        }
    );
    probed.stop().await;
    control.stop().await;
}

/// The admin kubeconfig of an apiserver at `url`, pointed at the proxy on
/// `port` instead (TLS is not verified by these kubeconfigs, so the
/// apiserver's certificate does not need to name the proxy).
fn proxied_kubeconfig(admin: &Path, url: &str, port: u16) -> PathBuf {
    let text = std::fs::read_to_string(admin).unwrap();
    assert!(text.contains(url), "{text}");
    let path = admin.with_file_name("proxied.kubeconfig");
    std::fs::write(
        &path,
        text.replace(url, &format!("https://127.0.0.1:{port}")),
    )
    .unwrap();
    path
}

/// The server's staleness metrics, for a failure message.
fn metrics_summary(running: &Running) -> String {
    format!(
        "source_stale {}, watch_restarts_total {}, apiserver_probe_timeouts_total {}",
        running.metrics().source_stale.get(),
        running.metrics().watch_restarts.get(),
        running.metrics().apiserver_probe_timeouts.get()
    )
}
