//! SIGTERM starts the lame-duck interval: `/ready` turns 503 at once, DNS
//! keeps answering over UDP and TCP until the interval ends, then the
//! process exits 0.

mod dns_server;
mod server_process;
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dns_server::{QUERY_TIMEOUT, encode, query, tcp_raw, udp_raw};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use server_process::ServerProcess;
use support::http_get;
use tokio::time::Instant;

/// The lame-duck interval of the test server.
const LAME_DUCK: Duration = Duration::from_secs(2);
/// Queries sent this close to the end of the interval may meet the exit.
const MARGIN: Duration = Duration::from_millis(300);
/// How long the process may take to exit once the interval is over.
const STOP_LIMIT: Duration = Duration::from_secs(3);

/// One query's fate: when it was sent (since SIGTERM, negative before),
/// and whether a NOERROR answer came back.
type Outcome = (f64, bool);

/// Sends a query every 10 ms over `tcp` or UDP until `stop`.
async fn query_loop(
    server: std::net::SocketAddr,
    tcp: bool,
    signalled: Arc<std::sync::Mutex<Option<Instant>>>,
    stop: Arc<AtomicBool>,
) -> Vec<Outcome> {
    let probe = query("web.shop.svc.clusterset.local.", RecordType::A);
    let bytes = encode(&probe);
    let mut outcomes = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let sent = Instant::now();
        let reply = match tcp {
            true => tcp_raw(server, &bytes, QUERY_TIMEOUT).await,
            false => udp_raw(server, &bytes, QUERY_TIMEOUT).await,
        };
        let answered = reply
            .and_then(|r| Message::from_vec(&r).ok())
            .is_some_and(|m| {
                m.metadata.response_code == ResponseCode::NoError && m.answers.len() == 1
            });
        let since = signalled.lock().unwrap().map_or(-1.0, |t| {
            if sent >= t {
                (sent - t).as_secs_f64()
            } else {
                -(t - sent).as_secs_f64()
            }
        });
        outcomes.push((since, answered));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    outcomes
}

/// Queries over UDP and TCP through a SIGTERM: none sent during the
/// lame-duck interval is lost, `/ready` is 503 throughout it, and the
/// process exits 0 after it (not before).
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_keeps_answering_for_the_lame_duck_interval_then_exits() {
    let mut server = ServerProcess::start(&["--lame-duck=2"], None).await;
    let (status, _) = http_get(server.admin, "/ready").await;
    assert_eq!(status, 200);
    let signalled = Arc::new(std::sync::Mutex::new(None));
    let stop = Arc::new(AtomicBool::new(false));
    let loops: Vec<_> = [false, true]
        .into_iter()
        .map(|tcp| tokio::spawn(query_loop(server.dns, tcp, signalled.clone(), stop.clone())))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let start = Instant::now();
    server.terminate();
    *signalled.lock().unwrap() = Some(start);
    // The signal reaches the server's runtime asynchronously: give it a
    // bound, then /ready must stay 503 for the rest of the interval.
    wait_not_ready(server.admin).await;
    let mut ready_checks = 0;
    while start.elapsed() < LAME_DUCK - MARGIN {
        let (status, body) = http_get(server.admin, "/ready").await;
        assert_eq!(
            status,
            503,
            "/ready {:?} after SIGTERM: {body}",
            start.elapsed()
        );
        ready_checks += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = tokio::time::timeout(LAME_DUCK + STOP_LIMIT, server.child.wait())
        .await
        .expect("exit after the lame-duck interval")
        .expect("wait for the child");
    let exited = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    assert!(status.success(), "exit status: {status}");
    assert!(
        exited >= LAME_DUCK,
        "exited {exited:?} after SIGTERM, before the lame-duck interval"
    );

    for (transport, task) in ["UDP", "TCP"].into_iter().zip(loops) {
        let outcomes = task.await.unwrap();
        let during: Vec<&Outcome> = outcomes
            .iter()
            .filter(|(t, _)| *t >= 0.0 && *t < (LAME_DUCK - MARGIN).as_secs_f64())
            .collect();
        let lost = during.iter().filter(|(_, answered)| !answered).count();
        assert!(
            during.len() >= 10,
            "{transport}: only {} queries sent",
            during.len()
        );
        assert_eq!(
            lost,
            0,
            "{transport}: {lost} of {} lost: {during:?}",
            during.len()
        );
        assert!(
            outcomes.iter().filter(|(t, _)| *t < 0.0).all(|(_, a)| *a),
            "{transport}: lost before SIGTERM"
        );
        eprintln!(
            "{transport}: {} queries during the lame-duck interval, {lost} lost",
            during.len()
        );
    }
    eprintln!("exit {exited:?} after SIGTERM, /ready 503 in {ready_checks} checks");
}

/// How long the first SIGTERM may take to turn `/ready` 503.
const NOT_READY_WITHIN: Duration = Duration::from_millis(500);

/// Polls `/ready` until it answers 503; panics after [`NOT_READY_WITHIN`].
async fn wait_not_ready(admin: std::net::SocketAddr) {
    let start = Instant::now();
    loop {
        let (status, body) = http_get(admin, "/ready").await;
        if status == 503 {
            return;
        }
        assert!(
            start.elapsed() < NOT_READY_WITHIN,
            "/ready still {status} {:?} after SIGTERM: {body}",
            start.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A second SIGTERM ends the lame-duck interval at once (Ctrl-C twice).
#[tokio::test(flavor = "multi_thread")]
async fn a_second_signal_ends_the_lame_duck_interval() {
    let mut server = ServerProcess::start(&["--lame-duck=30"], None).await;
    server.terminate();
    wait_not_ready(server.admin).await;
    let start = Instant::now();
    server.terminate();
    let status = tokio::time::timeout(STOP_LIMIT, server.child.wait())
        .await
        .expect("exit soon after the second signal")
        .expect("wait for the child");
    assert!(status.success(), "exit status: {status}");
    eprintln!("exit {:?} after the second SIGTERM", start.elapsed());
}

/// The number after `prefix` on the first line of `text` that has it.
fn number_after(text: &str, prefix: &str) -> u64 {
    text.lines()
        .find_map(|l| l.trim().trim_start_matches("- ").strip_prefix(prefix))
        .and_then(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .unwrap_or_else(|| panic!("no {prefix:?}"))
}

/// The DaemonSet and the Helm chart give a pod being deleted time for its
/// preStop sleep and then the lame-duck interval, with 10 s to spare for
/// closing, before the kubelet kills it.
#[test]
fn the_grace_period_covers_the_pre_stop_sleep_and_the_lame_duck() {
    let read = |path: &str| std::fs::read_to_string(dns_server::repo_path(path)).unwrap();
    let daemonset = read("deploy/clusterset-dns.yaml");
    let grace = number_after(&daemonset, "terminationGracePeriodSeconds: ");
    let sleep = number_after(&daemonset, "sleep: {seconds: ");
    let lame_duck = number_after(&daemonset, "--lame-duck=");
    assert!(
        grace >= sleep + lame_duck + 10,
        "deploy: grace {grace} s < preStop {sleep} s + lame duck {lame_duck} s + 10 s"
    );
    let values = read("deploy/helm/clusterset-dns/values.yaml");
    let chart = read("deploy/helm/clusterset-dns/templates/clusterset-dns.yaml");
    assert!(chart.contains("--lame-duck={{ .Values.dns.lameDuckSeconds }}"));
    let dns_values = values.split("\ncontroller:").next().unwrap();
    let grace = number_after(dns_values, "terminationGracePeriodSeconds: ");
    let sleep = number_after(dns_values, "preStopSleepSeconds: ");
    let lame_duck = number_after(dns_values, "lameDuckSeconds: ");
    assert!(
        grace >= sleep + lame_duck + 10,
        "helm: grace {grace} s < preStop {sleep} s + lame duck {lame_duck} s + 10 s"
    );
}
