//! Packets through the clusterset IP, measured (issue 20): two member
//! clusters with the data plane of `tests/dataplane` (kube-proxy in every
//! node namespace, routed pod CIDRs) and the release controller,
//! clusterset-dns and CoreDNS in each (`tests/clusterset`).
//!
//! 1. **Export → first connection.** Cluster a runs one server Deployment
//!    and `BENCH_SERVICES` Services selecting it, none exported. For each
//!    Service in turn: the clock starts, its ServiceExport is created in a,
//!    and a client inside cluster b's client pod's network namespace (a
//!    thread that entered it) resolves `<svc>.bench.svc.clusterset.local`
//!    through b's cluster DNS (the kube-dns ClusterIP, as the pod's
//!    resolver would) and connects to the answer, every
//!    `BENCH_PROBE_MS`, until a connection is answered by a pod. The clock
//!    stops there: the figure a user feels, export to working traffic. The
//!    first time the name resolves is recorded too (DNS propagation; the
//!    rest is kube-proxy programming the new clusterset IP).
//! 2. **Connection latency.** From the same pod, `BENCH_ROUNDS` rounds, each
//!    one connection to the clusterset IP of an exported Service (pods in
//!    cluster a) and one to the ClusterIP of a local Service in b (pods in
//!    b), alternated: the TCP connect time (SYN to SYN-ACK, through
//!    kube-proxy's DNAT) and the request time (connect, the server's
//!    answer, close). Both servers are the same socat command.
//!
//! Prints a markdown summary (also to `BENCH_CONNECT_RESULTS`, default
//! `target/bench-connect/results.md`). Run it as root:
//!
//! ```sh
//! CLUSTERSET_DNS_TESTENV_BIN=$(scripts/testenv-build.sh | tail -n1) \
//!     cargo bench --features testenv --bench connect
//! ```

#[path = "../clusterset/mod.rs"]
mod clusterset;
#[path = "../controlplane/mod.rs"]
mod controlplane;
#[path = "../dataplane/mod.rs"]
mod dataplane;
#[path = "../support/mod.rs"]
mod support;

use std::io::Read as _;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use clusterset::{Clusterset, IDS, export_yaml, server_yaml};
use controlplane::ClusterSpec;
use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RData, RecordType};

const NS: &str = "bench";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(run());
}

async fn run() {
    let services = env_or("BENCH_SERVICES", 50) as usize;
    let rounds = env_or("BENCH_ROUNDS", 500) as usize;
    let probe = Duration::from_millis(env_or("BENCH_PROBE_MS", 10));
    let results = std::env::var("BENCH_CONNECT_RESULTS")
        .unwrap_or_else(|_| "target/bench-connect/results.md".into());

    let cs = Clusterset::start(&[ClusterSpec::member(0), ClusterSpec::member(1)], "5m").await;
    clusterset::namespace_everywhere(&cs, NS).await;
    let (a, b) = (0, 1);
    let dns = SocketAddr::new(cs.dp.dns_ips[b], 53);
    let client = cs
        .dp
        .pod_netns(b, NS, "client")
        .expect("b's client pod runs");

    // The servers: one Deployment in a behind BENCH_SERVICES Services, and
    // a local one in b behind one Service.
    cs.apply(a, &server_yaml(NS, "srv", 2, IDS[a])).await;
    let mut manifest = String::new();
    for i in 0..services {
        manifest += &service_selecting(&format!("svc-{i}"), "srv");
    }
    cs.apply(a, &manifest).await;
    cs.wait_serving(a, NS, "srv", 2).await;
    cs.apply(b, &server_yaml(NS, "loc", 2, IDS[b])).await;
    cs.apply(b, &service_selecting("loc", "loc")).await;
    cs.wait_serving(b, NS, "loc", 2).await;
    wait_local_endpoints(&cs, a, services).await;

    // 1. Export → first connection from b.
    let (mut first, mut resolved) = (Vec::new(), Vec::new());
    for i in 0..services {
        let name = format!("svc-{i}.{NS}.svc.clusterset.local.");
        let started = Instant::now();
        cs.apply(a, &export_yaml(NS, &format!("svc-{i}"))).await;
        let (answered, attempts) = dataplane::in_netns(&client, || {
            let deadline = started + Duration::from_secs(60);
            let mut attempts = 0u32;
            let mut answered = None;
            loop {
                attempts += 1;
                if let Some(ip) = resolve(dns, &name) {
                    answered.get_or_insert_with(|| started.elapsed());
                    // Loopback-fast paths: a connection that takes 100 ms
                    // is one kube-proxy has not programmed yet (dropped).
                    if request(SocketAddr::new(ip, 80), Duration::from_millis(100)).is_ok() {
                        return (answered.unwrap(), attempts);
                    }
                }
                assert!(
                    Instant::now() < deadline,
                    "{name}: no connection from b within 60 s of the export"
                );
                std::thread::sleep(probe);
            }
        });
        first.push(started.elapsed());
        resolved.push(answered);
        eprintln!(
            "bench connect: svc-{i}: resolvable in b after {:.0} ms, first connection after {:.0} ms ({attempts} attempts)",
            answered.as_secs_f64() * 1e3,
            started.elapsed().as_secs_f64() * 1e3
        );
    }

    // 2. Latency: clusterset IP (pods in a) against local ClusterIP (pods in b).
    let (remote, local) = dataplane::in_netns(&client, || {
        (
            resolve(dns, &format!("svc-0.{NS}.svc.clusterset.local."))
                .expect("svc-0's clusterset IP"),
            resolve(dns, &format!("loc.{NS}.svc.cluster.local.")).expect("loc's ClusterIP"),
        )
    });
    let (mut remote_connect, mut local_connect) = (Vec::new(), Vec::new());
    let (mut remote_request, mut local_request) = (Vec::new(), Vec::new());
    let failures = dataplane::in_netns(&client, || {
        let mut failures = 0;
        for _ in 0..rounds {
            for (ip, connects, requests) in [
                (remote, &mut remote_connect, &mut remote_request),
                (local, &mut local_connect, &mut local_request),
            ] {
                let addr = SocketAddr::new(ip, 80);
                let t = Instant::now();
                match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                    Ok(stream) => {
                        connects.push(t.elapsed());
                        drop(stream);
                    }
                    Err(_) => failures += 1,
                }
                let t = Instant::now();
                match request(addr, Duration::from_secs(1)) {
                    Ok(_) => requests.push(t.elapsed()),
                    Err(_) => failures += 1,
                }
            }
        }
        failures
    });

    let mut out = String::new();
    out += &format!(
        "## Export → first connection from another cluster\n\n\
         {services} Services exported one at a time from cluster a; a client in cluster b's pod \
         resolves through b's cluster DNS and connects every {} ms.\n\n\
         | | p50 | p90 | p99 | max |\n|---|---|---|---|---|\n{}\n{}\n\n",
        probe.as_millis(),
        row("export → name resolves in b", &mut resolved),
        row("export → first answered connection", &mut first),
    );
    out += &format!(
        "## Connection latency from a pod in cluster b ({rounds} rounds, alternated; {failures} failed)\n\n\
         | | p50 | p90 | p99 | max |\n|---|---|---|---|---|\n{}\n{}\n{}\n{}\n\n",
        row(
            "TCP connect, clusterset IP (pods in a)",
            &mut remote_connect
        ),
        row(
            "TCP connect, local ClusterIP (pods in b)",
            &mut local_connect
        ),
        row("request, clusterset IP (pods in a)", &mut remote_request),
        row("request, local ClusterIP (pods in b)", &mut local_request),
    );
    out += &format!(
        "Ratio clusterset / local at p50: connect {:.2}, request {:.2}.\n",
        percentile(&mut remote_connect, 50.0).as_secs_f64()
            / percentile(&mut local_connect, 50.0).as_secs_f64(),
        percentile(&mut remote_request, 50.0).as_secs_f64()
            / percentile(&mut local_request, 50.0).as_secs_f64(),
    );
    println!("{out}");
    if let Some(dir) = std::path::Path::new(&results).parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(&results, &out).unwrap();
    eprintln!("bench connect: results in {results}");
    assert_eq!(failures, 0, "connections failed during the latency rounds");
}

/// A Service `name` on port 80 (→ 8080) selecting `app: <app>`.
fn service_selecting(name: &str, app: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {NS}\nspec:\n  \
         selector: {{app: {app}}}\n  ports:\n  - {{name: tcp, port: 80, targetPort: 8080, protocol: TCP}}\n"
    )
}

/// Waits until every `svc-<i>` of cluster `i` has a ready endpoint, so the
/// clock measures the export alone.
async fn wait_local_endpoints(cs: &Clusterset, i: usize, services: usize) {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::api::{Api, ListParams};
    let slices: Api<EndpointSlice> = Api::namespaced(cs.client(i).await, NS);
    cs.cluster(i)
        .wait_for(
            "local EndpointSlices of every service",
            Duration::from_secs(120),
            || {
                let slices = slices.clone();
                async move {
                    let list = slices
                        .list(&ListParams::default())
                        .await
                        .map_err(|e| e.to_string())?;
                    let ready = list
                        .items
                        .iter()
                        .filter(|s| {
                            s.metadata
                                .labels
                                .as_ref()
                                .and_then(|l| l.get("kubernetes.io/service-name"))
                                .is_some_and(|n| n.starts_with("svc-"))
                                && s.endpoints.iter().any(|e| {
                                    e.conditions.as_ref().and_then(|c| c.ready) == Some(true)
                                })
                        })
                        .count();
                    if ready >= services {
                        Ok(())
                    } else {
                        Err(format!("{ready} of {services} have ready endpoints"))
                    }
                }
            },
        )
        .await;
}

/// The first A record of `name` from `dns` (one UDP query, 200 ms timeout).
fn resolve(dns: SocketAddr, name: &str) -> Option<IpAddr> {
    let mut query = Message::query();
    query.metadata.recursion_desired = true;
    query.add_query(Query::query(Name::from_ascii(name).ok()?, RecordType::A));
    let socket = UdpSocket::bind("0.0.0.0:0").ok()?;
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .ok()?;
    socket.send_to(&query.to_vec().ok()?, dns).ok()?;
    let mut buf = [0u8; 4096];
    let (n, _) = socket.recv_from(&mut buf).ok()?;
    let answer = Message::from_vec(&buf[..n]).ok()?;
    answer.answers.iter().find_map(|r| match &r.data {
        RData::A(a) => Some(IpAddr::V4(a.0)),
        _ => None,
    })
}

/// One connection to `addr` (connect within `timeout`): the server's
/// answer (`POD IP CLUSTER`).
fn request(addr: SocketAddr, timeout: Duration) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    if answer.split_whitespace().count() == 3 {
        Ok(answer)
    } else {
        Err(std::io::Error::other(format!(
            "unexpected answer {answer:?}"
        )))
    }
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

fn row(what: &str, samples: &mut [Duration]) -> String {
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    format!(
        "| {what} | {} | {} | {} | {} |",
        ms(percentile(samples, 50.0)),
        ms(percentile(samples, 90.0)),
        ms(percentile(samples, 99.0)),
        ms(percentile(samples, 100.0)),
    )
}
