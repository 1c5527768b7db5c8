//! clusterset-dns beside CoreDNS (`kubernetes … { multicluster }`) on one
//! real kube-apiserver holding a large ClusterSet, in one run:
//!
//! 1. load: 10,000 ServiceImports in 100 namespaces (80 % ClusterSetIP with
//!    one or two IPs, 20 % Headless) and their EndpointSlices (2–3 source
//!    clusters per service, 100,000 endpoints, hostnames on the headless
//!    ones), written through the kube client with bounded concurrency;
//! 2. start: the list floor (curl, pinned to the servers' CPU, lists what
//!    a server must have before it is ready, spawn → every byte read) and a
//!    start of the release `clusterset-dns serve` binary, in turns, then
//!    CoreDNS, each pinned to one CPU with `taskset`; time from spawn to
//!    ready, VmRSS;
//! 3. throughput: dnsperf (pinned to the other CPU) against each server in
//!    turn, the other one idle, in interleaved rounds (median reported);
//! 4. propagation: N EndpointSlice patches per server, one at a time, the
//!    two servers' changes interleaved, each timed from the API
//!    acknowledging the write to the DNS answer changing; for
//!    clusterset-dns also its own share per change (from its publish
//!    latency histogram), and `clusterset_dns_zone_services_rebuilt`
//!    before and after;
//! 5. a relist after an apiserver outage: the apiserver stops for
//!    `BENCH_OUTAGE` s and starts again with an empty watch cache; each
//!    server's peak memory from just before the stop until its state is
//!    current again (VmHWM reset through `/proc/PID/clear_refs`);
//! 6. a summary table (stdout, and markdown into `BENCH_KUBE_RESULTS`).
//!
//! Run it with `scripts/bench-kube.sh` (builds first, waits for a quiet
//! machine, bounds the run in time); it needs the Go-built binaries, so it
//! is behind the `testenv` cargo feature (`cargo bench --features testenv
//! --bench kube`). Every process started here is killed
//! when the bench ends, also on panic (guards), and gets `PR_SET_PDEATHSIG`
//! so that even a killed bench leaks nothing. Environment knobs are listed
//! in [`Settings::from_env`].

#[path = "../controlplane/mod.rs"]
mod controlplane;
#[path = "../support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clusterset_dns::api::ServiceImport;
use controlplane::ControlPlane;
use futures::StreamExt;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RData;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};

const ZONE: &str = "clusterset.local";
const CLUSTERS: [&str; 3] = ["cluster-a", "cluster-b", "cluster-c"];

// ---------------------------------------------------------------- settings

#[derive(Debug, Clone)]
struct Settings {
    services: usize,
    namespaces: usize,
    endpoints: usize,
    concurrency: usize,
    duration: u64,
    warmup: u64,
    rounds: usize,
    dnsperf: Vec<String>,
    queries: usize,
    changes: usize,
    coredns_propagation: bool,
    floor_runs: usize,
    outage: u64,
    ours_perf: Option<PathBuf>,
    baseline: Option<PathBuf>,
    server_cpu: String,
    client_cpu: String,
    max_busy: f64,
    quiet_wait: u64,
    quiet_budget: u64,
    results: Option<PathBuf>,
    binary: PathBuf,
    ours_env: Vec<(String, String)>,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not valid")),
        _ => default,
    }
}

impl Settings {
    /// Every knob, with its default.
    fn from_env() -> Self {
        Self {
            // Data set.
            services: env_or("BENCH_SERVICES", 10_000),
            namespaces: env_or("BENCH_NAMESPACES", 100),
            endpoints: env_or("BENCH_ENDPOINTS", 100_000),
            // Concurrent API writes while loading.
            concurrency: env_or("BENCH_CONCURRENCY", 32),
            // dnsperf: seconds per run, unmeasured warm-up, and the
            // ';'-separated settings tried per server and round (the best
            // lossless one counts).
            duration: env_or("BENCH_DURATION", 10),
            warmup: env_or("BENCH_WARMUP", 2),
            // Throughput rounds, servers interleaved (ours, CoreDNS, ours,
            // …); the summary takes the median per server. 0 skips the
            // throughput part (start-up and propagation only).
            rounds: env_or("BENCH_ROUNDS", 3),
            dnsperf: env_or("BENCH_DNSPERF", "-c 8 -q 200".to_string())
                .split(';')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            queries: env_or("BENCH_QUERIES", 100_000),
            // Propagation: changes per server; CoreDNS too unless 0.
            changes: env_or("BENCH_CHANGES", 200),
            coredns_propagation: env_or("BENCH_COREDNS_PROPAGATION", 1u8) != 0,
            // Runs of the list floor, each followed by a start of
            // clusterset-dns (the last one is kept for the rest of the
            // bench); the summary compares the medians.
            floor_runs: env_or("BENCH_FLOOR_RUNS", 3),
            // Seconds the apiserver stays down before the relist.
            outage: env_or("BENCH_OUTAGE", 5),
            // Profile the kept clusterset-dns with `perf record -g` into
            // this file (its start-up, mostly).
            ours_perf: std::env::var_os("BENCH_OURS_PERF").map(PathBuf::from),
            // Another clusterset-dns build started after each floor run
            // too, beside this one (start-up A/B in one run).
            baseline: std::env::var_os("CLUSTERSET_DNS_BASELINE_BIN").map(PathBuf::from),
            server_cpu: env_or("BENCH_SERVER_CPU", "0".to_string()),
            client_cpu: env_or("BENCH_CLIENT_CPU", "1".to_string()),
            // Before each throughput measurement, wait up to
            // BENCH_QUIET_WAIT s until the machine is below BENCH_MAX_BUSY %
            // CPU (both CPUs, 2 s sample) with our servers idle.
            max_busy: env_or("BENCH_MAX_BUSY", 15.0),
            quiet_wait: env_or("BENCH_QUIET_WAIT", 90),
            // Total waiting for quiet over the whole run, so that the run
            // stays bounded (scripts/bench-kube.sh allows 600 s).
            quiet_budget: env_or("BENCH_QUIET_BUDGET", 180),
            results: std::env::var_os("BENCH_KUBE_RESULTS").map(PathBuf::from),
            // Extra environment for clusterset-dns (`K=V K=V`), e.g.
            // GLIBC_TUNABLES for memory experiments.
            ours_env: env_or("BENCH_OURS_ENV", String::new())
                .split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            binary: std::env::var_os("CLUSTERSET_DNS_BIN")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_clusterset-dns"))),
        }
    }
}

// ---------------------------------------------------------------- data set

#[derive(Debug, Clone)]
struct Ep {
    ip: String,
    hostname: Option<String>,
    ready: bool,
}

#[derive(Debug, Clone)]
struct SliceSpec {
    name: String,
    cluster: &'static str,
    endpoints: Vec<Ep>,
}

#[derive(Debug, Clone)]
struct Svc {
    ns: String,
    name: String,
    headless: bool,
    ips: Vec<String>,
    slices: Vec<SliceSpec>,
}

impl Svc {
    fn fqdn(&self) -> String {
        format!("{}.{}.svc.{ZONE}.", self.name, self.ns)
    }
    fn has_v6(&self) -> bool {
        self.ips.iter().any(|ip| ip.contains(':'))
    }
    fn ready_ips(&self) -> Vec<String> {
        self.slices
            .iter()
            .flat_map(|s| s.endpoints.iter())
            .filter(|e| e.ready)
            .map(|e| e.ip.clone())
            .collect()
    }
}

/// The deterministic data set: service `i` lives in namespace `i % ns`; every
/// fifth is headless; a third of the ClusterSetIP ones are dual-stack;
/// endpoints per service cycle 0.5×, 1.5×, 0.8×, 1.2×, 1× the mean over 2–3
/// clusters; every 20th endpoint is not ready (never the first two of a
/// slice).
fn data_set(s: &Settings) -> Vec<Svc> {
    let mean = (s.endpoints / s.services.max(1)).max(1);
    let mut next_ip = 0usize;
    (0..s.services)
        .map(|i| {
            let headless = i % 5 == 4;
            let ns = format!("ns-{:03}", i % s.namespaces);
            let name = format!("svc-{i:05}");
            let ips = if headless {
                vec![]
            } else if i % 3 == 0 {
                vec![
                    format!("10.96.{}.{}", i / 256, i % 256),
                    format!("fd00:96::{i:x}"),
                ]
            } else {
                vec![format!("10.96.{}.{}", i / 256, i % 256)]
            };
            let n = match (i / 5) % 5 {
                0 => mean / 2,
                1 => mean + mean / 2,
                2 => mean - mean / 5,
                3 => mean + mean / 5,
                _ => mean,
            }
            .max(1);
            let clusters = 2 + (i / 25) % 2;
            let slices = (0..clusters)
                .map(|c| {
                    let count = n / clusters + usize::from(c < n % clusters);
                    let endpoints = (0..count)
                        .map(|k| {
                            let g = next_ip;
                            next_ip += 1;
                            Ep {
                                ip: format!(
                                    "10.{}.{}.{}",
                                    128 + g / 65536,
                                    (g / 256) % 256,
                                    g % 256
                                ),
                                hostname: headless.then(|| format!("pod-{k}")),
                                // Never pod-0/pod-1: the propagation test uses them.
                                ready: g % 20 != 19 || k < 2,
                            }
                        })
                        .collect();
                    SliceSpec {
                        name: format!("{name}-{}", CLUSTERS[c]),
                        cluster: CLUSTERS[c],
                        endpoints,
                    }
                })
                .collect();
            Svc {
                ns,
                name,
                headless,
                ips,
                slices,
            }
        })
        .collect()
}

fn import_object(svc: &Svc) -> ServiceImport {
    let (kind, ports) = if svc.headless {
        (
            "Headless",
            serde_json::json!([{"name": "db", "protocol": "TCP", "port": 5432}]),
        )
    } else {
        (
            "ClusterSetIP",
            serde_json::json!([
                {"name": "http", "protocol": "TCP", "port": 80},
                {"name": "grpc", "protocol": "TCP", "port": 9090}
            ]),
        )
    };
    serde_json::from_value(serde_json::json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1",
        "kind": "ServiceImport",
        "metadata": {"name": svc.name, "namespace": svc.ns},
        "spec": {"type": kind, "ips": svc.ips, "ports": ports}
    }))
    .expect("ServiceImport JSON matches the type")
}

fn endpoints_json(endpoints: &[Ep]) -> serde_json::Value {
    endpoints
        .iter()
        .map(|e| {
            let mut v = serde_json::json!({
                "addresses": [e.ip],
                "conditions": {"ready": e.ready}
            });
            if let Some(h) = &e.hostname {
                v["hostname"] = serde_json::json!(h);
            }
            v
        })
        .collect()
}

fn slice_object(svc: &Svc, slice: &SliceSpec) -> EndpointSlice {
    let ports = if svc.headless {
        serde_json::json!([{"name": "db", "protocol": "TCP", "port": 5432}])
    } else {
        serde_json::json!([
            {"name": "http", "protocol": "TCP", "port": 8080},
            {"name": "grpc", "protocol": "TCP", "port": 9090}
        ])
    };
    serde_json::from_value(serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": slice.name,
            "namespace": svc.ns,
            "labels": {
                "multicluster.kubernetes.io/service-name": svc.name,
                "multicluster.kubernetes.io/source-cluster": slice.cluster,
                "endpointslice.kubernetes.io/managed-by": "bench.clusterset-dns"
            }
        },
        "addressType": "IPv4",
        "endpoints": endpoints_json(&slice.endpoints),
        "ports": ports
    }))
    .expect("EndpointSlice JSON matches the type")
}

// ---------------------------------------------------------------- queries

/// A tiny deterministic PRNG (splitmix64), so the query file is the same on
/// every run without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The query classes of the mix and their share in percent.
const MIX: [(&str, usize); 7] = [
    ("ClusterSetIP A", 25),
    ("ClusterSetIP AAAA (1/3 answer, 2/3 NODATA)", 15),
    ("SRV _http/_grpc._tcp (ClusterSetIP)", 15),
    ("headless A (all ready endpoints)", 15),
    ("headless AAAA (NODATA)", 5),
    ("per-endpoint A (<host>.<cluster>.<svc>)", 15),
    ("NXDOMAIN (unknown service)", 10),
];

fn queries(data: &[Svc], count: usize) -> Vec<(String, &'static str)> {
    let clusterset: Vec<&Svc> = data.iter().filter(|s| !s.headless).collect();
    let headless: Vec<&Svc> = data.iter().filter(|s| s.headless).collect();
    let mut rng = Rng(1);
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let mut roll = rng.below(100);
        let mut class = 0;
        for (i, (_, share)) in MIX.iter().enumerate() {
            if roll < *share {
                class = i;
                break;
            }
            roll -= share;
        }
        let c = clusterset[rng.below(clusterset.len())];
        let h = headless[rng.below(headless.len())];
        out.push(match class {
            0 => (c.fqdn(), "A"),
            1 => (c.fqdn(), "AAAA"),
            2 => {
                let port = if rng.below(2) == 0 { "_http" } else { "_grpc" };
                (format!("{port}._tcp.{}", c.fqdn()), "SRV")
            }
            3 => (h.fqdn(), "A"),
            4 => (h.fqdn(), "AAAA"),
            5 => {
                let slice = &h.slices[rng.below(h.slices.len())];
                let ready: Vec<&Ep> = slice.endpoints.iter().filter(|e| e.ready).collect();
                let e = ready[rng.below(ready.len())];
                (
                    format!(
                        "{}.{}.{}",
                        e.hostname.as_deref().unwrap_or_default(),
                        slice.cluster,
                        h.fqdn()
                    ),
                    "A",
                )
            }
            _ => (
                format!("missing-{}.{}.svc.{ZONE}.", rng.below(1_000_000), c.ns),
                "A",
            ),
        });
    }
    out
}

// ---------------------------------------------------------------- DNS client

fn qtype_code(t: &str) -> u16 {
    match t {
        "A" => 1,
        "AAAA" => 28,
        "SRV" => 33,
        "TXT" => 16,
        "SOA" => 6,
        other => panic!("unknown query type {other}"),
    }
}

fn query_bytes(id: u16, name: &str, qtype: &str) -> Vec<u8> {
    let mut q = Vec::with_capacity(64);
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype_code(qtype).to_be_bytes());
    q.extend_from_slice(&1u16.to_be_bytes());
    q
}

struct Dns {
    socket: UdpSocket,
    id: u16,
    buf: Vec<u8>,
}

impl Dns {
    fn new() -> Self {
        Self {
            socket: UdpSocket::bind("127.0.0.1:0").expect("bind a UDP socket"),
            id: 1,
            buf: vec![0; 65535],
        }
    }

    /// One UDP exchange; `None` on timeout or an undecodable response.
    fn ask(
        &mut self,
        server: SocketAddr,
        name: &str,
        qtype: &str,
        wait: Duration,
    ) -> Option<Message> {
        self.id = self.id.wrapping_add(1);
        let q = query_bytes(self.id, name, qtype);
        self.socket.send_to(&q, server).ok()?;
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            self.socket
                .set_read_timeout(Some(left.max(Duration::from_micros(100))))
                .ok()?;
            let (n, from) = self.socket.recv_from(&mut self.buf).ok()?;
            if from == server && n >= 2 && self.buf[..2] == self.id.to_be_bytes() {
                return Message::from_vec(&self.buf[..n]).ok();
            }
        }
    }
}

/// rcode and the answer section as sorted `name TYPE rdata` lines (TTLs
/// kept; SRV weights masked: they differ by design, see docs/coredns.md).
fn summarize(message: &Message) -> (String, Vec<String>) {
    let mut lines: Vec<String> = message
        .answers
        .iter()
        .map(|r| {
            let rdata = match &r.data {
                RData::SRV(_) => {
                    let text = r.data.to_string();
                    let f: Vec<&str> = text.split_whitespace().collect();
                    if f.len() == 4 {
                        format!("{} W {} {}", f[0], f[2], f[3].to_ascii_lowercase())
                    } else {
                        text
                    }
                }
                other => other.to_string().to_ascii_lowercase(),
            };
            format!(
                "{} {} {} {}",
                r.name.to_lowercase(),
                r.ttl,
                r.record_type(),
                rdata
            )
        })
        .collect();
    lines.sort();
    let rcode = match message.metadata.response_code {
        ResponseCode::NoError if message.answers.is_empty() => "NODATA".to_string(),
        code => code.to_string(),
    };
    (rcode, lines)
}

fn answer_ips(message: &Message) -> Vec<String> {
    let mut ips: Vec<String> = message
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0.to_string()),
            RData::AAAA(a) => Some(a.0.to_string()),
            _ => None,
        })
        .collect();
    ips.sort();
    ips
}

// ---------------------------------------------------------------- processes

/// A child process killed (and reaped) on drop.
struct Proc {
    name: &'static str,
    child: Child,
    log: PathBuf,
    /// Interrupt it first and give it 10 s to exit: `perf record` writes
    /// its profile on SIGINT and leaves a broken one when killed.
    interrupt_first: bool,
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.interrupt_first {
            // SAFETY: kill(2) on our own child's pid, not yet reaped.
            #[allow(unsafe_code)]
            let _ = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if matches!(self.child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!(
                "{} exited with {status}; log tail:\n{}",
                self.name,
                tail(&self.log, 30)
            )),
            _ => None,
        }
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Spawns `program args…` through `taskset -c cpus` (taskset execs the
/// program, so the pid is the server's), output to `log`.
fn spawn_pinned(
    name: &'static str,
    cpus: &str,
    program: &Path,
    args: &[String],
    env: &[(String, String)],
    log: &Path,
) -> Proc {
    let file = std::fs::File::create(log).expect("create log file");
    let mut command = Command::new("taskset");
    command
        .envs(env.iter().map(|(k, v)| (k, v)))
        .arg("-c")
        .arg(cpus)
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("clone log handle"))
        .stderr(file);
    support::dies_with_this_process(&mut command, false);
    let child = command
        .spawn()
        .unwrap_or_else(|e| panic!("starting {name} via taskset: {e}"));
    Proc {
        name,
        child,
        log: log.to_path_buf(),
        interrupt_first: false,
    }
}

/// (VmRSS, VmHWM) in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    (
        support::process_status_kib(pid, "VmRSS:"),
        support::process_status_kib(pid, "VmHWM:"),
    )
}

/// VmRSS split into (RssAnon, RssFile) in KiB: the heap and stacks, and
/// the binary's pages read from its file.
fn rss_parts_kib(pid: u32) -> (u64, u64) {
    (
        support::process_status_kib(pid, "RssAnon:"),
        support::process_status_kib(pid, "RssFile:"),
    )
}

/// Ticks of one line of /proc/stat.
#[derive(Debug, Clone, Copy, Default)]
struct Ticks {
    busy: u64,
    total: u64,
    steal: u64,
}

/// Per-CPU ticks from /proc/stat; index 0 is the aggregate, `i + 1` CPU `i`.
fn cpu_ticks() -> Vec<Ticks> {
    std::fs::read_to_string("/proc/stat")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("cpu"))
        .map(|l| {
            let v: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .take(8)
                .map(|f| f.parse().unwrap_or(0))
                .collect();
            let total: u64 = v.iter().sum();
            let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
            Ticks {
                busy: total - idle,
                total,
                steal: v.get(7).copied().unwrap_or(0),
            }
        })
        .collect()
}

/// Share of CPU `i`'s ticks between two samples: (busy %, steal %).
fn cpu_percent(before: &[Ticks], after: &[Ticks], i: usize) -> (f64, f64) {
    let a = before.get(i).copied().unwrap_or_default();
    let b = after.get(i).copied().unwrap_or_default();
    if b.total > a.total {
        let total = (b.total - a.total) as f64;
        (
            100.0 * (b.busy - a.busy) as f64 / total,
            100.0 * (b.steal - a.steal) as f64 / total,
        )
    } else {
        (0.0, 0.0)
    }
}

fn busy_percent(before: &[Ticks], after: &[Ticks], i: usize) -> f64 {
    cpu_percent(before, after, i).0
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Seconds spent in [`wait_quiet`] so far, against `BENCH_QUIET_BUDGET`.
static QUIET_SPENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Waits until the whole machine is below `max_busy` % CPU over a 2 s sample
/// (our servers idle), at most `quiet_wait` s, and at most what is left of
/// `quiet_budget` over the whole run. Returns the last sample.
fn wait_quiet(settings: &Settings, what: &str) -> f64 {
    use std::sync::atomic::Ordering::Relaxed;
    let started = Instant::now();
    let left = settings
        .quiet_budget
        .saturating_sub(QUIET_SPENT.load(Relaxed));
    let deadline = started + Duration::from_secs(settings.quiet_wait.min(left));
    loop {
        let before = cpu_ticks();
        std::thread::sleep(Duration::from_secs(2));
        let busy = busy_percent(&before, &cpu_ticks(), 0);
        if busy < settings.max_busy {
            eprintln!(
                "[bench] quiet before {what}: {busy:.1}% CPU busy (load {})",
                loadavg()
            );
            QUIET_SPENT.fetch_add(started.elapsed().as_secs(), Relaxed);
            return busy;
        }
        if Instant::now() >= deadline {
            eprintln!(
                "[bench] WARNING: still {busy:.1}% CPU busy (load {}) after {} s of waiting; measuring {what} anyway",
                loadavg(),
                started.elapsed().as_secs()
            );
            QUIET_SPENT.fetch_add(started.elapsed().as_secs(), Relaxed);
            return busy;
        }
        eprintln!(
            "[bench] waiting for a quiet machine before {what}: {busy:.1}% CPU busy (load {})",
            loadavg()
        );
    }
}

/// GET `path` over HTTP/1.1; (status, body).
fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

// ---------------------------------------------------------------- servers

struct Server {
    label: &'static str,
    proc: Proc,
    dns: SocketAddr,
    /// Our admin port, or CoreDNS's `ready` plugin.
    http: SocketAddr,
    ready_after: Duration,
    answering_after: Duration,
    /// CPU time (user + system) the server had used when it was ready and
    /// answering: against `answering_after`, how much of its start it
    /// spent waiting for the apiserver.
    cpu_ready: Duration,
    memory_ready: (u64, u64),
}

/// CPU time (user + system) of process `pid` so far.
fn process_cpu(pid: u32) -> Duration {
    // SAFETY: sysconf has no preconditions.
    #[allow(unsafe_code)]
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Duration::from_secs_f64(support::process_cpu_ticks(pid) as f64 / ticks_per_second)
}

/// A name of the data set with its expected A answer, to tell that a server
/// has loaded everything.
fn probe(data: &[Svc]) -> (String, Vec<String>) {
    let svc = data
        .iter()
        .rev()
        .find(|s| s.headless)
        .expect("at least one headless service");
    let mut ips = svc.ready_ips();
    ips.sort();
    (svc.fqdn(), ips)
}

/// Polls (≤ 5 ms apart) until `/ready` is 200 and the probe name answers
/// with all its addresses; records both times from `spawned`.
fn wait_ready(
    proc: &mut Proc,
    spawned: Instant,
    http: SocketAddr,
    dns_addr: SocketAddr,
    probe: &(String, Vec<String>),
) -> (Duration, Duration) {
    let mut dns = Dns::new();
    let (mut ready, mut answering) = (None, None);
    loop {
        if ready.is_none() && http_get(http, "/ready").is_some_and(|(s, _)| s == 200) {
            ready = Some(spawned.elapsed());
        }
        if answering.is_none()
            && dns
                .ask(dns_addr, &probe.0, "A", Duration::from_millis(200))
                .is_some_and(|m| answer_ips(&m) == probe.1)
        {
            answering = Some(spawned.elapsed());
        }
        if let (Some(r), Some(a)) = (ready, answering) {
            return (r, a);
        }
        if let Some(exit) = proc.exited() {
            panic!("{exit}");
        }
        assert!(
            spawned.elapsed() < Duration::from_secs(120),
            "{} not ready within 120 s (ready: {ready:?}, answering: {answering:?}); log tail:\n{}",
            proc.name,
            tail(&proc.log, 30)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One run of the list floor: how long a bare client takes to list what a
/// server must hold before it is ready (the ServiceImports, the
/// EndpointSlices with the service-name label, the namespaces) from the
/// same apiserver. The client is curl, spawned pinned to the servers' CPU
/// so that spawn → done compares with their spawn → ready; it asks for the
/// three lists at once, each on its own HTTP/1.1 connection as the servers'
/// watches are, unpaged from the watch cache (`resourceVersion=0`, the
/// cheapest list the apiserver serves), and reads every byte without
/// decoding any. Returns the time and the bytes read.
fn list_floor(settings: &Settings, api_url: &str) -> (Duration, u64) {
    let selector = clusterset_dns::api::well_known::LABEL_SERVICE_NAME.replace('/', "%2F");
    let lists = [
        "/apis/multicluster.x-k8s.io/v1beta1/serviceimports?resourceVersion=0".to_string(),
        format!(
            "/apis/discovery.k8s.io/v1/endpointslices?labelSelector={selector}&resourceVersion=0"
        ),
        "/api/v1/namespaces?resourceVersion=0".to_string(),
    ];
    let mut command = Command::new("taskset");
    command.args([
        "-c",
        &settings.server_cpu,
        "curl",
        "--silent",
        "--show-error",
        "--fail",
        "--insecure",
        "--http1.1",
        "--parallel",
        "--parallel-immediate",
        "--header",
        &format!("Authorization: Bearer {}", controlplane::ADMIN_TOKEN),
        "--header",
        "Accept: application/json",
        "--write-out",
        "%{size_download}\n",
    ]);
    for path in &lists {
        command.args(["--output", "/dev/null", &format!("{api_url}{path}")]);
    }
    let started = Instant::now();
    let out = command.output().expect("running curl for the list floor");
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "the list floor's curl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sizes: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert_eq!(sizes.len(), lists.len(), "curl reported {sizes:?}");
    (took, sizes.iter().sum())
}

/// Starts the clusterset-dns `binary` on the apiserver of `kubeconfig`
/// (log: `<dir>/<log_name>.log`) and waits until it is ready and answers
/// `probe`; under `perf record -g -o <perf>` if given.
#[allow(clippy::too_many_arguments)]
fn start_ours(
    settings: &Settings,
    binary: &Path,
    log_name: &str,
    kubeconfig: &Path,
    dir: &Path,
    probe: &(String, Vec<String>),
    perf: Option<&Path>,
) -> Server {
    let (port, admin) = (
        controlplane::free_udp_and_tcp_port(),
        controlplane::free_udp_and_tcp_port(),
    );
    let dns: SocketAddr = ([127, 0, 0, 1], port).into();
    let http: SocketAddr = ([127, 0, 0, 1], admin).into();
    let serve = [
        "serve",
        "--kubeconfig",
        &kubeconfig.display().to_string(),
        "--dns-listen",
        &dns.to_string(),
        "--admin-listen",
        &http.to_string(),
        "--udp-workers",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect::<Vec<String>>();
    let (program, args): (PathBuf, Vec<String>) = match perf {
        None => (binary.to_path_buf(), serve),
        Some(out) => (
            PathBuf::from("perf"),
            ["record", "-g", "-o", &out.display().to_string(), "--"]
                .iter()
                .map(|s| s.to_string())
                .chain([binary.display().to_string()])
                .chain(serve)
                .collect(),
        ),
    };
    let spawned = Instant::now();
    let mut proc = spawn_pinned(
        "clusterset-dns",
        &settings.server_cpu,
        &program,
        &args,
        &settings.ours_env,
        &dir.join(format!("{log_name}.log")),
    );
    proc.interrupt_first = perf.is_some();
    let (ready_after, answering_after) = wait_ready(&mut proc, spawned, http, dns, probe);
    let cpu_ready = process_cpu(proc.pid());
    let memory_ready = memory_kib(proc.pid());
    Server {
        label: "clusterset-dns",
        proc,
        dns,
        http,
        ready_after,
        answering_after,
        cpu_ready,
        memory_ready,
    }
}

/// What a relist after an apiserver outage costs one server.
struct Relist {
    label: String,
    /// VmRSS just before the apiserver stopped, KiB.
    rss_before: u64,
    /// The peak from then until the relist was done (VmHWM reset by
    /// `clear_refs` before the outage), KiB.
    hwm: u64,
    /// VmRSS once the relist was done, KiB.
    rss_after: u64,
    /// Of it, (RssAnon, RssFile) KiB.
    parts_after: (u64, u64),
}

/// Resets the VmHWM of `pid` to its VmRSS (`echo 5 > /proc/PID/clear_refs`),
/// so that the next read of VmHWM is the peak from now on.
fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset VmHWM (clear_refs)");
}

/// Polls `server`'s `/metrics` every 50 ms until `name` reads `value`, for
/// at most `timeout`; returns how long it took.
fn wait_metric(server: &Server, name: &str, value: f64, timeout: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let now = http_get(server.http, "/metrics").and_then(|(_, body)| metric(&body, name));
        if now == Some(value) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < timeout,
            "{} did not report {name} {value} within {timeout:?} (last: {now:?})",
            server.label
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls VmHWM of `pid` until it has not grown for `still`, for at most
/// `timeout` (a server whose relist has no metric of its own).
fn wait_peak_settled(pid: u32, still: Duration, timeout: Duration) {
    let started = Instant::now();
    let (mut last, mut since) = (memory_kib(pid).1, Instant::now());
    while since.elapsed() < still && started.elapsed() < timeout {
        std::thread::sleep(Duration::from_millis(100));
        let hwm = memory_kib(pid).1;
        if hwm != last {
            (last, since) = (hwm, Instant::now());
        }
    }
}

/// Stops the apiserver for `outage`, starts it again and waits until every
/// clusterset-dns server in `ours` has relisted (its source no longer
/// stale) and `others` have stopped growing; returns each server's memory
/// before, at its peak through the relist, and after.
fn outage_relist(
    plane: &mut ControlPlane,
    ours: &[&Server],
    others: &[&Server],
    outage: Duration,
) -> (Vec<Relist>, Duration) {
    let all: Vec<&Server> = ours.iter().chain(others).copied().collect();
    let before: Vec<u64> = all.iter().map(|s| memory_kib(s.proc.pid()).0).collect();
    for server in &all {
        reset_peak(server.proc.pid());
    }
    plane.apiservers[0].stop();
    let stopped = Instant::now();
    for server in ours {
        wait_metric(
            server,
            "clusterset_dns_source_stale",
            1.0,
            Duration::from_secs(60),
        );
    }
    std::thread::sleep(outage.saturating_sub(stopped.elapsed()));
    plane.apiservers[0].start();
    let restarted = Instant::now();
    for server in ours {
        wait_metric(
            server,
            "clusterset_dns_source_stale",
            0.0,
            Duration::from_secs(300),
        );
    }
    let relisted = restarted.elapsed();
    for server in others {
        wait_peak_settled(
            server.proc.pid(),
            Duration::from_secs(5),
            Duration::from_secs(120),
        );
    }
    let relists = all
        .iter()
        .zip(before)
        .map(|(server, rss_before)| {
            let (rss_after, hwm) = memory_kib(server.proc.pid());
            Relist {
                label: server.label.to_string(),
                rss_before,
                hwm,
                rss_after,
                parts_after: rss_parts_kib(server.proc.pid()),
            }
        })
        .collect();
    (relists, relisted)
}

fn start_coredns(
    settings: &Settings,
    kubeconfig: &Path,
    dir: &Path,
    probe: &(String, Vec<String>),
) -> Server {
    let (port, ready_port) = (
        controlplane::free_udp_and_tcp_port(),
        controlplane::free_udp_and_tcp_port(),
    );
    let dns: SocketAddr = ([127, 0, 0, 1], port).into();
    let http: SocketAddr = ([127, 0, 0, 1], ready_port).into();
    let corefile = dir.join("Corefile");
    std::fs::write(
        &corefile,
        format!(
            ".:{port} {{\n  bind 127.0.0.1\n  ready 127.0.0.1:{ready_port}\n  kubernetes cluster.local {ZONE} {{\n    kubeconfig {} cluster0\n    multicluster {ZONE}\n    ttl 5\n  }}\n}}\n",
            kubeconfig.display()
        ),
    )
    .expect("write Corefile");
    let spawned = Instant::now();
    let mut proc = spawn_pinned(
        "coredns",
        &settings.server_cpu,
        &controlplane::bin_dir().join("coredns"),
        &["-conf".to_string(), corefile.display().to_string()],
        &[],
        &dir.join("coredns.log"),
    );
    let (ready_after, answering_after) = wait_ready(&mut proc, spawned, http, dns, probe);
    let cpu_ready = process_cpu(proc.pid());
    let memory_ready = memory_kib(proc.pid());
    Server {
        label: "CoreDNS",
        proc,
        dns,
        http,
        ready_after,
        answering_after,
        cpu_ready,
        memory_ready,
    }
}

// ---------------------------------------------------------------- load

enum Item<'a> {
    Import(&'a Svc),
    Slice(&'a Svc, &'a SliceSpec),
}

async fn create_with_retry<F, Fut>(what: &str, mut create: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), kube::Error>>,
{
    let mut delay = Duration::from_millis(100);
    for attempt in 1.. {
        match create().await {
            Ok(()) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => return,
            Err(e) if attempt < 6 => {
                eprintln!("[bench] creating {what} failed (attempt {attempt}): {e}; retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            Err(e) => panic!("creating {what}: {e}"),
        }
    }
}

struct LoadStats {
    namespaces: usize,
    imports: usize,
    slices: usize,
    endpoints: usize,
    seconds: f64,
}

async fn load(client: &kube::Client, data: &[Svc], settings: &Settings) -> LoadStats {
    let start = Instant::now();
    let pp = PostParams::default();
    let namespaces: Vec<String> = {
        let mut v: Vec<String> = data.iter().map(|s| s.ns.clone()).collect();
        v.sort();
        v.dedup();
        v
    };
    let ns_api: Api<Namespace> = Api::all(client.clone());
    futures::stream::iter(namespaces.iter())
        .map(|ns| {
            let ns_api = ns_api.clone();
            let pp = pp.clone();
            async move {
                let object: Namespace =
                    serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))
                        .expect("namespace JSON");
                create_with_retry(&format!("namespace {ns}"), || async {
                    ns_api.create(&pp, &object).await.map(|_| ())
                })
                .await;
            }
        })
        .buffer_unordered(settings.concurrency)
        .collect::<Vec<()>>()
        .await;

    let items: Vec<Item<'_>> = data
        .iter()
        .flat_map(|svc| {
            std::iter::once(Item::Import(svc))
                .chain(svc.slices.iter().map(move |sl| Item::Slice(svc, sl)))
        })
        .collect();
    let total = items.len();
    let mut done = 0usize;
    let mut last_report = Instant::now();
    let mut stream = futures::stream::iter(items)
        .map(|item| {
            let client = client.clone();
            let pp = pp.clone();
            async move {
                match item {
                    Item::Import(svc) => {
                        let api: Api<ServiceImport> = Api::namespaced(client, &svc.ns);
                        let object = import_object(svc);
                        create_with_retry(
                            &format!("ServiceImport {}/{}", svc.ns, svc.name),
                            || {
                                let api = api.clone();
                                let object = object.clone();
                                let pp = pp.clone();
                                async move { api.create(&pp, &object).await.map(|_| ()) }
                            },
                        )
                        .await;
                    }
                    Item::Slice(svc, slice) => {
                        let api: Api<EndpointSlice> = Api::namespaced(client, &svc.ns);
                        let object = slice_object(svc, slice);
                        create_with_retry(
                            &format!("EndpointSlice {}/{}", svc.ns, slice.name),
                            || {
                                let api = api.clone();
                                let object = object.clone();
                                let pp = pp.clone();
                                async move { api.create(&pp, &object).await.map(|_| ()) }
                            },
                        )
                        .await;
                    }
                }
            }
        })
        .buffer_unordered(settings.concurrency);
    while stream.next().await.is_some() {
        done += 1;
        if last_report.elapsed() > Duration::from_secs(10) {
            last_report = Instant::now();
            eprintln!(
                "[bench] loaded {done}/{total} objects in {:.0} s (load {})",
                start.elapsed().as_secs_f64(),
                loadavg()
            );
        }
    }
    LoadStats {
        namespaces: namespaces.len(),
        imports: data.len(),
        slices: data.iter().map(|s| s.slices.len()).sum(),
        endpoints: data
            .iter()
            .flat_map(|s| s.slices.iter())
            .map(|s| s.endpoints.len())
            .sum(),
        seconds: start.elapsed().as_secs_f64(),
    }
}

// ---------------------------------------------------------------- throughput

#[derive(Debug, Clone, Default)]
struct PerfRun {
    setting: String,
    qps: f64,
    sent: u64,
    lost: u64,
    avg_ms: f64,
    min_ms: f64,
    max_ms: f64,
    stddev_ms: f64,
    rcodes: String,
    server_cpu: f64,
    client_cpu_busy: f64,
    server_cpu_busy: f64,
    steal: f64,
    round: usize,
}

fn parse_dnsperf(text: &str, setting: &str) -> PerfRun {
    let grab = |key: &str| -> Option<String> {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key).map(|r| r.trim().to_string()))
    };
    let first_num = |s: Option<String>| -> f64 {
        s.and_then(|v| v.split_whitespace().next().and_then(|x| x.parse().ok()))
            .unwrap_or(f64::NAN)
    };
    let latency = grab("Average Latency (s):").unwrap_or_default();
    let inner = |key: &str| -> f64 {
        latency
            .split_once(key)
            .and_then(|(_, r)| {
                r.trim_matches(|c: char| c == ' ' || c == ',' || c == ')')
                    .split([',', ')'])
                    .next()
                    .and_then(|x| x.trim().parse::<f64>().ok())
            })
            .unwrap_or(f64::NAN)
    };
    PerfRun {
        setting: setting.to_string(),
        qps: first_num(grab("Queries per second:")),
        sent: first_num(grab("Queries sent:")) as u64,
        lost: first_num(grab("Queries lost:")) as u64,
        avg_ms: first_num(Some(latency.clone())) * 1000.0,
        min_ms: inner("min") * 1000.0,
        max_ms: inner("max") * 1000.0,
        stddev_ms: first_num(grab("Latency StdDev (s):")) * 1000.0,
        rcodes: grab("Response codes:").unwrap_or_default(),
        ..Default::default()
    }
}

fn dnsperf(
    settings: &Settings,
    server: &Server,
    file: &Path,
    seconds: u64,
    setting: &str,
) -> PerfRun {
    let mut command = Command::new("timeout");
    command
        .arg((seconds + 30).to_string())
        .args(["taskset", "-c", &settings.client_cpu, "dnsperf", "-s"])
        .arg(server.dns.ip().to_string())
        .arg("-p")
        .arg(server.dns.port().to_string())
        .arg("-d")
        .arg(file)
        .arg("-l")
        .arg(seconds.to_string())
        .args(["-T", "1"])
        .args(setting.split_whitespace())
        .stdin(Stdio::null());
    support::dies_with_this_process(&mut command, false);
    let pid = server.proc.pid();
    let (cpu0, proc0) = (cpu_ticks(), support::process_cpu_ticks(pid));
    let output = command
        .output()
        .expect("run dnsperf (apt-get install dnsperf)");
    let (cpu1, proc1) = (cpu_ticks(), support::process_cpu_ticks(pid));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "dnsperf {setting} against {} failed ({}):\n{text}",
        server.label,
        output.status
    );
    let mut run = parse_dnsperf(&text, setting);
    assert!(
        run.qps.is_finite() && run.avg_ms.is_finite(),
        "unexpected dnsperf output:\n{text}"
    );
    let index = |cpus: &str| cpus.parse::<usize>().map(|c| c + 1).ok();
    // The server's CPU time relative to one CPU's elapsed ticks.
    if let Some(i) = index(&settings.server_cpu) {
        let (t0, t1) = (cpu0[i].total, cpu1[i].total);
        run.server_cpu = 100.0 * (proc1 - proc0) as f64 / (t1 - t0).max(1) as f64;
        run.server_cpu_busy = busy_percent(&cpu0, &cpu1, i);
    }
    if let Some(i) = index(&settings.client_cpu) {
        run.client_cpu_busy = busy_percent(&cpu0, &cpu1, i);
    }
    run.steal = cpu_percent(&cpu0, &cpu1, 0).1;
    run
}

/// All dnsperf runs against one server.
#[derive(Default)]
struct Throughput {
    runs: Vec<PerfRun>,
    /// Per round, the best lossless setting (the best one if all lost).
    best: Vec<PerfRun>,
    /// Machine CPU busy % and load average before each round.
    quiet: Vec<(f64, String)>,
    memory_after: (u64, u64),
}

impl Throughput {
    /// Median, min and max of the per-round best QPS.
    fn qps(&self) -> (f64, f64, f64) {
        let mut q: Vec<f64> = self.best.iter().map(|r| r.qps).collect();
        q.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        if q.is_empty() {
            return (f64::NAN, f64::NAN, f64::NAN);
        }
        let mid = q.len() / 2;
        let median = if q.len() % 2 == 1 {
            q[mid]
        } else {
            (q[mid - 1] + q[mid]) / 2.0
        };
        (median, q[0], q[q.len() - 1])
    }
}

/// One round against `server`: wait for a quiet machine, warm up, run each
/// dnsperf setting.
fn throughput_round(
    settings: &Settings,
    server: &mut Server,
    file: &Path,
    round: usize,
    out: &mut Throughput,
) {
    let busy = wait_quiet(
        settings,
        &format!("loading {} (round {round})", server.label),
    );
    out.quiet.push((busy, loadavg()));
    if settings.warmup > 0 {
        let _ = dnsperf(settings, server, file, settings.warmup, "-c 8 -q 100");
    }
    let mut runs = Vec::new();
    for setting in &settings.dnsperf {
        let mut run = dnsperf(settings, server, file, settings.duration, setting);
        run.round = round;
        eprintln!(
            "[bench] round {round} {:<15} dnsperf {:<14} {:>9.0} QPS  avg {:.3} ms  lost {}  server CPU {:.0}% (CPU {} busy {:.0}%)  CPU {} busy {:.0}%  steal {:.1}%  ({})",
            server.label,
            setting,
            run.qps,
            run.avg_ms,
            run.lost,
            run.server_cpu,
            settings.server_cpu,
            run.server_cpu_busy,
            settings.client_cpu,
            run.client_cpu_busy,
            run.steal,
            run.rcodes
        );
        if let Some(exit) = server.proc.exited() {
            panic!("{exit}");
        }
        runs.push(run);
    }
    let best = runs
        .iter()
        .max_by(|a, b| {
            (a.lost == 0, a.qps)
                .partial_cmp(&(b.lost == 0, b.qps))
                .unwrap_or(std::cmp::Ordering::Equal)
        })
        .cloned()
        .expect("at least one dnsperf setting");
    out.best.push(best);
    out.runs.extend(runs);
}

// ---------------------------------------------------------------- sanity

struct Sanity {
    compared: usize,
    identical: usize,
    examples: Vec<String>,
}

/// Sends a sample of the query file to both servers and compares rcode and
/// the answer section.
fn compare(ours: &Server, coredns: &Server, queries: &[(String, &'static str)]) -> Sanity {
    let mut dns = Dns::new();
    let step = (queries.len() / 400).max(1);
    let mut sanity = Sanity {
        compared: 0,
        identical: 0,
        examples: Vec::new(),
    };
    for (name, qtype) in queries.iter().step_by(step).take(400) {
        let wait = Duration::from_secs(2);
        let a = dns.ask(ours.dns, name, qtype, wait).map(|m| summarize(&m));
        let b = dns
            .ask(coredns.dns, name, qtype, wait)
            .map(|m| summarize(&m));
        sanity.compared += 1;
        if a == b && a.is_some() {
            sanity.identical += 1;
        } else if sanity.examples.len() < 5 {
            sanity.examples.push(format!(
                "{name} {qtype}: clusterset-dns {a:?} / CoreDNS {b:?}"
            ));
        }
    }
    sanity
}

// ---------------------------------------------------------------- propagation

#[derive(Default)]
struct Propagation {
    /// ack → answer changed, per change.
    after_ack: Vec<Duration>,
    /// request sent → answer changed.
    after_send: Vec<Duration>,
    /// send → ack (the API write itself).
    write: Vec<Duration>,
    /// Per change, clusterset-dns only: the server's own share (watch
    /// event received → zone published), from the growth of
    /// `clusterset_dns_zone_publish_latency_seconds_sum` over the change;
    /// and the publishes counted meanwhile (1 unless events coalesced or
    /// another change was still arriving).
    own: Vec<Duration>,
    own_publishes: Vec<f64>,
    /// Changes already visible on the first poll after the ack.
    first_poll: usize,
    timeouts: usize,
}

/// The changes of both servers, interleaved: change k goes to clusterset-dns
/// when k is even, to CoreDNS when odd, each on its own services, so that
/// neither server's changes all come first (after the throughput rounds,
/// the apiserver and the other server may still be settling) or last.
/// Both servers see every change, since both watch every slice; each is
/// timed on one of them only.
fn propagation(
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    ours: &Server,
    coredns: Option<&Server>,
    services: &[&Svc],
) -> (Propagation, Option<Propagation>) {
    let mut dns = Dns::new();
    let (mut ours_out, mut coredns_out) = (Propagation::default(), Propagation::default());
    let servers = if coredns.is_some() { 2 } else { 1 };
    for (k, svc) in services.iter().enumerate() {
        match (k % servers, coredns) {
            (1, Some(coredns)) => {
                change(rt, client, &mut dns, coredns, svc, k, 201, &mut coredns_out)
            }
            _ => {
                let before = publish_latency(ours);
                change(rt, client, &mut dns, ours, svc, k, 200, &mut ours_out);
                // The zone is stored before the latency is observed: wait
                // for the observation rather than read the sum too early.
                let mut after = publish_latency(ours);
                for _ in 0..100 {
                    if after.1 > before.1 {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                    after = publish_latency(ours);
                }
                ours_out
                    .own
                    .push(Duration::from_secs_f64((after.0 - before.0).max(0.0)));
                ours_out.own_publishes.push(after.1 - before.1);
            }
        }
    }
    (ours_out, coredns.map(|_| coredns_out))
}

/// Changes the service's first slice: pod-0's address (`k` even) or pod-1
/// becomes not ready (`k` odd); then polls `server` until the answer
/// reflects it, and records the times in `out`.
#[allow(clippy::too_many_arguments)]
fn change(
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    dns: &mut Dns,
    server: &Server,
    svc: &Svc,
    k: usize,
    ip_prefix: u8,
    out: &mut Propagation,
) {
    let pp = PatchParams::default();
    let slice = &svc.slices[0];
    let mut endpoints = slice.endpoints.clone();
    let address_change = (k / 2).is_multiple_of(2);
    let (host, expect_ip) = if address_change {
        let ip = format!("10.{ip_prefix}.{}.{}", k / 256, k % 256);
        endpoints[0].ip = ip.clone();
        ("pod-0", Some(ip))
    } else {
        endpoints[1].ready = false;
        ("pod-1", None)
    };
    let name = format!("{host}.{}.{}", slice.cluster, svc.fqdn());
    let changed = |m: &Message| match &expect_ip {
        Some(ip) => {
            m.metadata.response_code == ResponseCode::NoError && answer_ips(m) == [ip.clone()]
        }
        None => m.metadata.response_code == ResponseCode::NXDomain,
    };
    // The state before: answering, and not yet changed.
    let before = dns.ask(server.dns, &name, "A", Duration::from_secs(2));
    assert!(
        before
            .as_ref()
            .is_some_and(|m| m.metadata.response_code == ResponseCode::NoError && !changed(m)),
        "{}: {name} A before change {k}: {:?}",
        server.label,
        before.map(|m| summarize(&m))
    );
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &svc.ns);
    let patch = serde_json::json!({"endpoints": endpoints_json(&endpoints)});
    let sent = Instant::now();
    rt.block_on(api.patch(&slice.name, &pp, &Patch::Merge(&patch)))
        .unwrap_or_else(|e| panic!("patching {}/{}: {e}", svc.ns, slice.name));
    let acked = Instant::now();
    let mut polls = 0usize;
    loop {
        polls += 1;
        if dns
            .ask(server.dns, &name, "A", Duration::from_millis(500))
            .is_some_and(|m| changed(&m))
        {
            let seen = Instant::now();
            out.after_ack.push(seen - acked);
            out.after_send.push(seen - sent);
            out.write.push(acked - sent);
            if polls == 1 {
                out.first_poll += 1;
            }
            return;
        }
        if acked.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "[bench] {}: change {k} ({name}) not visible after 10 s",
                server.label
            );
            out.timeouts += 1;
            return;
        }
        // Tight polling; the pause only leaves the CPU to the apiserver.
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // Nearest rank.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median of `runs` (the upper one of an even count) and the runs in
/// their order, as "a, b, c" in ms.
fn median_and_runs(runs: &[Duration]) -> (Duration, String) {
    let mut sorted = runs.to_vec();
    sorted.sort();
    let listed = runs.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", ");
    (sorted[sorted.len() / 2], listed)
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn dist(values: &[Duration]) -> (Duration, Duration, Duration, Duration) {
    let mut v = values.to_vec();
    v.sort();
    (
        percentile(&v, 50.0),
        percentile(&v, 90.0),
        percentile(&v, 99.0),
        v.last().copied().unwrap_or_default(),
    )
}

/// (sum, count) of one of our server's histograms.
fn histogram(server: &Server, name: &str) -> (f64, f64) {
    let body = http_get(server.http, "/metrics")
        .map(|(_, b)| b)
        .unwrap_or_default();
    (
        metric(&body, &format!("{name}_sum")).unwrap_or(f64::NAN),
        metric(&body, &format!("{name}_count")).unwrap_or(f64::NAN),
    )
}

fn rebuilt(server: &Server) -> (f64, f64) {
    histogram(server, "clusterset_dns_zone_services_rebuilt")
}

fn publish_latency(server: &Server) -> (f64, f64) {
    histogram(server, "clusterset_dns_zone_publish_latency_seconds")
}

// ---------------------------------------------------------------- report

fn command_output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
        .unwrap_or_default()
}

fn environment(settings: &Settings) -> BTreeMap<&'static str, String> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_default();
    let versions =
        std::fs::read_to_string(controlplane::bin_dir().join("VERSIONS")).unwrap_or_default();
    let version_line = |prefix: &str| {
        versions
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_default()
            .to_string()
    };
    let mut env = BTreeMap::new();
    env.insert("nproc", command_output("nproc", &[]).trim().to_string());
    env.insert("cpu", model);
    env.insert(
        "kernel",
        command_output("uname", &["-r"]).trim().to_string(),
    );
    env.insert(
        "coredns",
        command_output(
            &controlplane::bin_dir()
                .join("coredns")
                .display()
                .to_string(),
            &["-version"],
        )
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" "),
    );
    env.insert("kube-apiserver", version_line("kube-apiserver"));
    env.insert("etcd", version_line("etcd"));
    env.insert(
        "dnsperf",
        command_output("dnsperf", &["-h"])
            .lines()
            .find(|l| l.starts_with("Version"))
            .unwrap_or_default()
            .to_string(),
    );
    env.insert(
        "clusterset-dns",
        format!(
            "{} ({})",
            command_output(&settings.binary.display().to_string(), &["--version"]).trim(),
            settings.binary.display()
        ),
    );
    env
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

// ---------------------------------------------------------------- main

fn main() {
    let settings = Settings::from_env();
    let run_started = Instant::now();
    assert!(
        settings.binary.exists(),
        "no clusterset-dns binary at {} (cargo build --release, or set CLUSTERSET_DNS_BIN)",
        settings.binary.display()
    );
    let env = environment(&settings);
    eprintln!("[bench] environment:");
    for (k, v) in &env {
        eprintln!("[bench]   {k:<15} {v}");
    }
    eprintln!("[bench]   load average    {}", loadavg());

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");

    // 1. Control plane and data.
    let t = Instant::now();
    let mut plane = rt.block_on(ControlPlane::start(1));
    let plane_seconds = t.elapsed().as_secs_f64();
    let api = &plane.apiservers[0];
    eprintln!(
        "[bench] control plane up in {plane_seconds:.1} s at {}",
        api.url
    );
    let client = rt.block_on(api.admin_client());
    let data = data_set(&settings);
    let stats = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(360), load(&client, &data, &settings))
            .await
            .expect("loading took over 360 s")
    });
    eprintln!(
        "[bench] loaded {} namespaces, {} ServiceImports, {} EndpointSlices ({} endpoints) in {:.1} s",
        stats.namespaces, stats.imports, stats.slices, stats.endpoints, stats.seconds
    );
    let query_list = queries(&data, settings.queries);
    let query_file = plane.dir().join("queries.txt");
    {
        let mut text = String::with_capacity(query_list.len() * 64);
        for (name, qtype) in &query_list {
            let _ = writeln!(text, "{name} {qtype}");
        }
        std::fs::write(&query_file, text).expect("write query file");
    }
    let probe = probe(&data);

    // 2. The list floor and our starts in turns, then CoreDNS (same CPU).
    let mut floor: Vec<Duration> = Vec::new();
    let mut floor_bytes = 0;
    let mut ours_starts: Vec<Duration> = Vec::new();
    let mut baseline_starts: Vec<Duration> = Vec::new();
    let mut baseline_memory: Vec<u64> = Vec::new();
    let runs = settings.floor_runs.max(1);
    for run in 1..=runs {
        let _ = wait_quiet(&settings, "measuring the list floor");
        let (took, bytes) = list_floor(&settings, &api.url);
        floor.push(took);
        floor_bytes = bytes;
        if let Some(baseline) = &settings.baseline {
            let _ = wait_quiet(&settings, "starting the baseline clusterset-dns");
            let unkept = start_ours(
                &settings,
                baseline,
                "clusterset-dns-baseline",
                &api.admin_kubeconfig,
                plane.dir(),
                &probe,
                None,
            );
            eprintln!(
                "[bench] baseline clusterset-dns ready after {} ms, {} ms of CPU, VmRSS {} MiB (start {run} of {runs})",
                ms(unkept.ready_after),
                ms(unkept.cpu_ready),
                mib(unkept.memory_ready.0)
            );
            baseline_starts.push(unkept.ready_after);
            baseline_memory.push(unkept.memory_ready.0);
        }
        if run < runs {
            let _ = wait_quiet(&settings, "starting clusterset-dns");
            let unkept = start_ours(
                &settings,
                &settings.binary,
                "clusterset-dns",
                &api.admin_kubeconfig,
                plane.dir(),
                &probe,
                None,
            );
            eprintln!(
                "[bench] list floor {} ms; clusterset-dns ready after {} ms, {} ms of CPU, VmRSS {} MiB (start {run} of {runs})",
                ms(floor[run - 1]),
                ms(unkept.ready_after),
                ms(unkept.cpu_ready),
                mib(unkept.memory_ready.0)
            );
            ours_starts.push(unkept.ready_after);
        }
    }
    let (floor_median, floor_runs) = median_and_runs(&floor);
    eprintln!(
        "[bench] list floor: {} ms median of {} runs ({floor_runs}), {:.1} MB",
        ms(floor_median),
        floor.len(),
        floor_bytes as f64 / 1e6
    );
    let _ = wait_quiet(&settings, "starting clusterset-dns");
    let mut ours = start_ours(
        &settings,
        &settings.binary,
        "clusterset-dns",
        &api.admin_kubeconfig,
        plane.dir(),
        &probe,
        settings.ours_perf.as_deref(),
    );
    ours_starts.push(ours.ready_after);
    let (ours_ready_median, ours_runs) = median_and_runs(&ours_starts);
    eprintln!(
        "[bench] clusterset-dns ready after {} ms, answering after {} ms, VmRSS {} MiB",
        ms(ours.ready_after),
        ms(ours.answering_after),
        mib(ours.memory_ready.0)
    );
    eprintln!(
        "[bench] clusterset-dns (RssAnon, RssFile) KiB once ready {:?}",
        rss_parts_kib(ours.proc.pid())
    );
    eprintln!(
        "[bench] clusterset-dns log so far:\n{}",
        tail(&ours.proc.log, 20)
    );
    let index_metrics = http_get(ours.http, "/metrics")
        .map(|(_, b)| b)
        .unwrap_or_default();
    let indexed = |name: &str| metric(&index_metrics, name).unwrap_or(f64::NAN);
    let indexed = (
        indexed("clusterset_dns_index_service_imports"),
        indexed("clusterset_dns_index_endpoint_slices"),
        indexed("clusterset_dns_index_endpoints"),
    );
    let _ = wait_quiet(&settings, "starting CoreDNS");
    let coredns_dir = plane.dir().join("coredns");
    std::fs::create_dir_all(&coredns_dir).expect("create CoreDNS dir");
    let mut coredns = start_coredns(&settings, &api.admin_kubeconfig, &coredns_dir, &probe);
    eprintln!(
        "[bench] CoreDNS ready after {} ms, answering after {} ms, VmRSS {} MiB",
        ms(coredns.ready_after),
        ms(coredns.answering_after),
        mib(coredns.memory_ready.0)
    );

    // Same answers?
    let sanity = compare(&ours, &coredns, &query_list);
    eprintln!(
        "[bench] answer comparison: {}/{} identical (rcode + answer section)",
        sanity.identical, sanity.compared
    );
    for e in &sanity.examples {
        eprintln!("[bench]   differs: {e}");
    }

    // 3. Throughput, one server at a time, rounds interleaved.
    let mut ours_perf = Throughput::default();
    let mut coredns_perf = Throughput::default();
    for round in 1..=settings.rounds {
        throughput_round(&settings, &mut ours, &query_file, round, &mut ours_perf);
        throughput_round(
            &settings,
            &mut coredns,
            &query_file,
            round,
            &mut coredns_perf,
        );
    }
    ours_perf.memory_after = memory_kib(ours.proc.pid());
    coredns_perf.memory_after = memory_kib(coredns.proc.pid());
    eprintln!(
        "[bench] clusterset-dns (RssAnon, RssFile) KiB after dnsperf {:?}",
        rss_parts_kib(ours.proc.pid())
    );

    // 4. Propagation.
    let headless: Vec<&Svc> = data
        .iter()
        .filter(|s| s.headless && s.slices[0].endpoints.len() >= 2)
        .collect();
    let n = settings.changes.min(headless.len() / 2);
    let both = settings.coredns_propagation;
    let rebuilt_before = rebuilt(&ours);
    let latency_before = publish_latency(&ours);
    let (ours_prop, coredns_prop) = propagation(
        &rt,
        &client,
        &ours,
        both.then_some(&coredns),
        &headless[..if both { 2 * n } else { n }],
    );
    let rebuilt_after = rebuilt(&ours);
    let latency_after = publish_latency(&ours);
    let ours_memory_end = memory_kib(ours.proc.pid());
    let coredns_memory_end = memory_kib(coredns.proc.pid());

    // 5. A relist after an apiserver outage: every server's peak from just
    // before the apiserver stops until its state is current again (the
    // baseline build, if any, started now and relisting beside ours).
    let mut baseline_kept = settings.baseline.as_ref().map(|baseline| {
        let _ = wait_quiet(&settings, "starting the baseline clusterset-dns");
        start_ours(
            &settings,
            baseline,
            "clusterset-dns-baseline-relist",
            &plane.apiservers[0].admin_kubeconfig,
            plane.dir(),
            &probe,
            None,
        )
    });
    if let Some(baseline) = &mut baseline_kept {
        baseline.label = "clusterset-dns (baseline build)";
    }
    let ours_relisting: Vec<&Server> = std::iter::once(&ours).chain(&baseline_kept).collect();
    let (relists, relisted_after) = outage_relist(
        &mut plane,
        &ours_relisting,
        &[&coredns],
        Duration::from_secs(settings.outage),
    );
    for relist in &relists {
        eprintln!(
            "[bench] relist after an outage of {} s: {} VmRSS {} MiB before, VmHWM {} MiB through it ({:.2}×), VmRSS {} MiB after",
            settings.outage,
            relist.label,
            mib(relist.rss_before),
            mib(relist.hwm),
            relist.hwm as f64 / relist.rss_before.max(1) as f64,
            mib(relist.rss_after)
        );
    }
    drop(baseline_kept);

    // 6. Report.
    let mut r = String::new();
    let _ = writeln!(r, "### Environment\n");
    let _ = writeln!(r, "| | |\n|---|---|");
    for (k, v) in &env {
        let _ = writeln!(r, "| {k} | {v} |");
    }
    let _ = writeln!(
        r,
        "| CPUs | servers on CPU {} (taskset), dnsperf on CPU {}; apiserver, etcd and the bench unpinned |",
        settings.server_cpu, settings.client_cpu
    );
    let _ = writeln!(r, "| load average at the end | {} |", loadavg());
    let _ = writeln!(
        r,
        "| bench duration | {:.0} s (control plane start {:.1} s) |",
        run_started.elapsed().as_secs_f64(),
        plane_seconds
    );

    let _ = writeln!(r, "\n### Data set and load\n");
    let _ = writeln!(
        r,
        "{} namespaces, {} ServiceImports ({} ClusterSetIP, of which {} dual-stack; {} Headless), {} EndpointSlices over {} source clusters, {} endpoints ({} not ready). Written with the kube client, {} concurrent creates: **{:.1} s** ({:.0} objects/s). clusterset-dns indexed {} imports, {} slices, {} endpoints.",
        stats.namespaces,
        stats.imports,
        data.iter().filter(|s| !s.headless).count(),
        data.iter().filter(|s| s.has_v6()).count(),
        data.iter().filter(|s| s.headless).count(),
        stats.slices,
        CLUSTERS.len(),
        stats.endpoints,
        data.iter()
            .flat_map(|s| s.slices.iter())
            .flat_map(|s| s.endpoints.iter())
            .filter(|e| !e.ready)
            .count(),
        settings.concurrency,
        stats.seconds,
        (stats.namespaces + stats.imports + stats.slices) as f64 / stats.seconds,
        indexed.0,
        indexed.1,
        indexed.2,
    );
    let _ = writeln!(
        r,
        "\nQuery mix ({} queries, dnsperf loops over them):\n",
        query_list.len()
    );
    for (class, share) in MIX {
        let _ = writeln!(r, "- {share} % {class}");
    }
    let _ = writeln!(
        r,
        "\nAnswer comparison on {} sampled queries: {} identical (rcode + answer section, SRV weights masked).",
        sanity.compared, sanity.identical
    );
    for e in &sanity.examples {
        let _ = writeln!(r, "- differs: `{e}`");
    }

    let _ = writeln!(
        r,
        "\n### Throughput (dnsperf, {} s per setting)\n",
        settings.duration
    );
    let _ = writeln!(
        r,
        "| round | server | dnsperf | QPS | avg latency ms | min / max ms | stddev ms | lost | server process CPU % | QPS per server CPU (derived) | CPU {} (server) busy % | CPU {} (dnsperf) busy % | steal % | response codes |",
        settings.server_cpu, settings.client_cpu
    );
    let _ = writeln!(
        r,
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    );
    let mut all_runs: Vec<(&str, &PerfRun)> = ours_perf
        .runs
        .iter()
        .map(|run| ("clusterset-dns", run))
        .chain(coredns_perf.runs.iter().map(|run| ("CoreDNS", run)))
        .collect();
    all_runs.sort_by_key(|(label, run)| (run.round, *label != "clusterset-dns"));
    for (label, run) in all_runs {
        let _ = writeln!(
            r,
            "| {} | {label} | `{}` | {:.0} | {:.3} | {:.3} / {:.3} | {:.3} | {} of {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1} | {} |",
            run.round,
            run.setting,
            run.qps,
            run.avg_ms,
            run.min_ms,
            run.max_ms,
            run.stddev_ms,
            run.lost,
            run.sent,
            run.server_cpu,
            run.qps / (run.server_cpu / 100.0).max(0.01),
            run.server_cpu_busy,
            run.client_cpu_busy,
            run.steal,
            run.rcodes
        );
    }
    let (ours_qps, ours_min, ours_max) = ours_perf.qps();
    let (core_qps, core_min, core_max) = coredns_perf.qps();
    let ratio = ours_qps / core_qps;
    let round_ratios: Vec<String> = ours_perf
        .best
        .iter()
        .zip(&coredns_perf.best)
        .map(|(a, b)| format!("{:.2}×", a.qps / b.qps))
        .collect();
    let quiet: Vec<String> = ours_perf
        .quiet
        .iter()
        .zip(&coredns_perf.quiet)
        .map(|(a, b)| format!("{:.1} % / {:.1} %", a.0, b.0))
        .collect();
    let _ = writeln!(
        r,
        "\nPer round, the best setting without loss counts; over {} rounds: clusterset-dns median **{ours_qps:.0} QPS** [{ours_min:.0}–{ours_max:.0}], CoreDNS median **{core_qps:.0} QPS** [{core_min:.0}–{core_max:.0}]: **{ratio:.2}×** (per round: {}). Machine CPU busy over 2 s before each round (clusterset-dns / CoreDNS): {}.",
        ours_perf.best.len(),
        round_ratios.join(", "),
        quiet.join("; ")
    );

    let _ = writeln!(r, "\n### Start and memory\n");
    let _ = writeln!(
        r,
        "| server | spawn → /ready 200 ms | spawn → probe name answers ms | CPU used by then ms | VmRSS ready MiB | VmRSS after dnsperf MiB | VmRSS at end MiB | VmHWM MiB |"
    );
    let _ = writeln!(r, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for (s, perf, end) in [
        (&ours, &ours_perf, ours_memory_end),
        (&coredns, &coredns_perf, coredns_memory_end),
    ] {
        let _ = writeln!(
            r,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            s.label,
            ms(s.ready_after),
            ms(s.answering_after),
            ms(s.cpu_ready),
            mib(s.memory_ready.0),
            mib(perf.memory_after.0),
            mib(end.0),
            mib(end.1)
        );
    }

    let _ = writeln!(
        r,
        "\nList floor (curl pinned to the servers' CPU lists the ServiceImports, the labelled EndpointSlices and the namespaces at once, unpaged from the watch cache, {:.1} MB read, not decoded; spawn → done): median **{} ms** of {} runs ({floor_runs}). clusterset-dns spawn → /ready 200, started after each floor run: median **{} ms** ({ours_runs}). Over the floor: clusterset-dns **{:.2}×**, CoreDNS {:.2}× (one start).",
        floor_bytes as f64 / 1e6,
        ms(floor_median),
        floor.len(),
        ms(ours_ready_median),
        ours_ready_median.as_secs_f64() / floor_median.as_secs_f64(),
        coredns.ready_after.as_secs_f64() / floor_median.as_secs_f64()
    );
    if !baseline_starts.is_empty() {
        let (median, baseline_runs) = median_and_runs(&baseline_starts);
        let _ = writeln!(
            r,
            "\nBaseline build (`CLUSTERSET_DNS_BASELINE_BIN`, {}), started after each floor run before this build: median **{} ms** ({baseline_runs}), {:.2}× the floor; VmRSS when ready {} MiB.",
            settings
                .baseline
                .as_ref()
                .map(|b| {
                    let version = command_output(&b.display().to_string(), &["version"]);
                    let commit = version
                        .lines()
                        .find_map(|l| l.strip_prefix("commit:"))
                        .unwrap_or_default()
                        .trim()
                        .chars()
                        .take(7)
                        .collect::<String>();
                    format!("{}, commit {commit}", b.display())
                })
                .unwrap_or_default(),
            ms(median),
            median.as_secs_f64() / floor_median.as_secs_f64(),
            baseline_memory
                .iter()
                .map(|k| mib(*k))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }

    let _ = writeln!(r, "\n### Propagation (EndpointSlice patch → DNS answer)\n");
    let _ = writeln!(
        r,
        "| server | changes | p50 ms | p90 ms | p99 ms | max ms | visible on first poll | timeouts | API write p50 / max ms | send → answer p99 ms |"
    );
    let _ = writeln!(r, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut prop_rows = vec![("clusterset-dns", &ours_prop)];
    if let Some(p) = &coredns_prop {
        prop_rows.push(("CoreDNS", p));
    }
    for (label, p) in &prop_rows {
        let (p50, p90, p99, max) = dist(&p.after_ack);
        let (w50, _, _, wmax) = dist(&p.write);
        let (_, _, s99, _) = dist(&p.after_send);
        let _ = writeln!(
            r,
            "| {label} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} |",
            p.after_ack.len() + p.timeouts,
            ms(p50),
            ms(p90),
            ms(p99),
            ms(max),
            p.first_poll,
            p.timeouts,
            ms(w50),
            ms(wmax),
            ms(s99)
        );
    }
    if !ours_prop.own.is_empty() {
        // What the server itself spent, and the rest (watch delivery from
        // the apiserver, the wait for the next poll), per change.
        let rest: Vec<Duration> = ours_prop
            .after_ack
            .iter()
            .zip(&ours_prop.own)
            .map(|(total, own)| total.saturating_sub(*own))
            .collect();
        let (o50, o90, o99, omax) = dist(&ours_prop.own);
        let (r50, r90, r99, rmax) = dist(&rest);
        let coalesced = ours_prop
            .own_publishes
            .iter()
            .filter(|&&p| p != 1.0)
            .count();
        let _ = writeln!(
            r,
            "\nclusterset-dns per change, p50 / p90 / p99 / max ms: own share (watch event received → zone published, from `clusterset_dns_zone_publish_latency_seconds`) {} / {} / {} / {}; the rest (apiserver → watch event, published → seen by the next poll) {} / {} / {} / {}. Changes not counted as exactly one publish: {}.",
            ms(o50),
            ms(o90),
            ms(o99),
            ms(omax),
            ms(r50),
            ms(r90),
            ms(r99),
            ms(rmax),
            coalesced
        );
    }
    let changes = ours_prop.after_ack.len()
        + ours_prop.timeouts
        + coredns_prop
            .as_ref()
            .map_or(0, |p| p.after_ack.len() + p.timeouts);
    let d_sum = rebuilt_after.0 - rebuilt_before.0;
    let d_count = rebuilt_after.1 - rebuilt_before.1;
    let _ = writeln!(
        r,
        "\n`clusterset_dns_zone_services_rebuilt` over the {} changes (both servers', interleaved; clusterset-dns sees them all): sum {} → {} (+{}), count {} → {} (+{} publishes): **{:.2} services rebuilt per change**, {:.2} per publish.",
        changes,
        rebuilt_before.0,
        rebuilt_after.0,
        d_sum,
        rebuilt_before.1,
        rebuilt_after.1,
        d_count,
        d_sum / changes.max(1) as f64,
        d_sum / d_count.max(1.0)
    );
    let _ = writeln!(
        r,
        "`clusterset_dns_zone_publish_latency_seconds` over the same changes (watch event received → zone published, the server's own share of propagation): {} publishes, **mean {:.3} ms**.",
        latency_after.1 - latency_before.1,
        (latency_after.0 - latency_before.0) * 1000.0
            / (latency_after.1 - latency_before.1).max(1.0)
    );

    let _ = writeln!(r, "\n### Relist after an apiserver outage\n");
    let _ = writeln!(
        r,
        "The apiserver stopped for {} s and started again (its watch cache empty, so every watch relists); each server's VmHWM was reset (`/proc/PID/clear_refs`) just before the stop and read once its state was current again ({} ms after the restart for clusterset-dns: `clusterset_dns_source_stale` back to 0; CoreDNS once its VmHWM had not grown for 5 s).\n",
        settings.outage,
        ms(relisted_after)
    );
    let _ = writeln!(
        r,
        "| server | VmRSS before MiB | VmHWM through the relist MiB | × VmRSS before | VmRSS after MiB | of it RssAnon / RssFile MiB |\n|---|---:|---:|---:|---:|---:|"
    );
    for relist in &relists {
        let _ = writeln!(
            r,
            "| {} | {} | {} | {:.2}× | {} | {} / {} |",
            relist.label,
            mib(relist.rss_before),
            mib(relist.hwm),
            relist.hwm as f64 / relist.rss_before.max(1) as f64,
            mib(relist.rss_after),
            mib(relist.parts_after.0),
            mib(relist.parts_after.1)
        );
    }

    let (_, _, ours_p99, _) = dist(&ours_prop.after_ack);
    let qps_met = ratio >= 4.0;
    let p99_met = ours_p99 < Duration::from_millis(100) && ours_prop.timeouts == 0;
    let mem_met = ours_memory_end.0 * 2 < coredns_memory_end.0
        && ours_perf.memory_after.0 * 2 < coredns_perf.memory_after.0;
    let ready_met = ours.ready_after < Duration::from_secs(3);
    let floor_ratio = ours_ready_median.as_secs_f64() / floor_median.as_secs_f64();
    let _ = writeln!(r, "\n### Targets\n");
    let _ = writeln!(r, "| target | measured | result |\n|---|---|---|");
    let _ = writeln!(
        r,
        "| QPS ≥ 4× CoreDNS | {ratio:.2}× (medians {ours_qps:.0} vs {core_qps:.0}; per round {}) | {} |",
        round_ratios.join(", "),
        verdict(qps_met)
    );
    let _ = writeln!(
        r,
        "| propagation p99 < 100 ms | {} ms ({} timeouts) | {} |",
        ms(ours_p99),
        ours_prop.timeouts,
        verdict(p99_met)
    );
    let _ = writeln!(
        r,
        "| memory < ½ CoreDNS | {} vs {} MiB after dnsperf; {} vs {} MiB at end | {} |",
        mib(ours_perf.memory_after.0),
        mib(coredns_perf.memory_after.0),
        mib(ours_memory_end.0),
        mib(coredns_memory_end.0),
        verdict(mem_met)
    );
    let _ = writeln!(
        r,
        "| ready < 3 s | {} ms (CoreDNS {} ms) | {} |",
        ms(ours.ready_after),
        ms(coredns.ready_after),
        verdict(ready_met)
    );
    let _ = writeln!(
        r,
        "| ready ≤ 1.1× the list floor (medians) | {} ms over {} ms: {floor_ratio:.2}× (CoreDNS {:.2}×) | {} |",
        ms(ours_ready_median),
        ms(floor_median),
        coredns.ready_after.as_secs_f64() / floor_median.as_secs_f64(),
        verdict(floor_ratio <= 1.1)
    );

    let relist_ratio = relists[0].hwm as f64 / relists[0].rss_before.max(1) as f64;
    let _ = writeln!(
        r,
        "| VmHWM ≤ 1.3× VmRSS through a relist after an apiserver outage | {} MiB over {} MiB: {relist_ratio:.2}× | {} |",
        mib(relists[0].hwm),
        mib(relists[0].rss_before),
        verdict(relist_ratio <= 1.3)
    );
    let hwm_ratio = ours_memory_end.1 as f64 / ours_memory_end.0.max(1) as f64;
    let _ = writeln!(
        r,
        "| VmHWM ≤ 1.3× VmRSS from spawn to the end (before the outage) | {} MiB over {} MiB: {hwm_ratio:.2}× | {} |",
        mib(ours_memory_end.1),
        mib(ours_memory_end.0),
        verdict(hwm_ratio <= 1.3)
    );

    println!("\n{r}");
    if let Some(path) = &settings.results {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        std::fs::write(path, &r).expect("write BENCH_KUBE_RESULTS");
        eprintln!("[bench] results written to {}", path.display());
    }
    // Servers first, then the control plane (guards).
    drop(ours);
    drop(coredns);
    drop(plane);
}
