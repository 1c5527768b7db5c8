//! The MCS controller at scale (issue 9): three member clusters
//! (kube-apiserver, kube-controller-manager, kube-scheduler, kwok), one
//! release `clusterset-dns controller` per cluster on the shipped roles
//! (`tests/controlplane`: `install_controller`, peer-reader tokens in peer
//! Secrets), and in one run:
//!
//! 1. load: `BENCH_SERVICES` exported Services per cluster (four
//!    ClusterSetIP to one headless), each selector-less with one hand-written
//!    EndpointSlice of 10 ready endpoints from the cluster's pod CIDR
//!    (labelled like the in-tree controller's, which the controller
//!    mirrors), created with bounded concurrency before any controller runs;
//! 2. cold convergence: the three controllers start (pinned with `taskset`);
//!    time until every cluster holds every ServiceImport (`status.clusters`
//!    set, `spec.ips` for ClusterSetIP) and every imported MCS slice (10
//!    ready endpoints), seen through the bench's own watches;
//! 3. idle writes: `clusterset_dns_controller_writes_total` summed over the
//!    three admin endpoints, before and after `BENCH_IDLE` seconds;
//! 4. watches: the apiservers' `apiserver_longrunning_requests{verb="WATCH"}`
//!    per resource, before the controllers start and after convergence;
//! 5. warm convergence: `BENCH_WARM_SERVICES` more exports per cluster while
//!    the controllers run, timed from the first create to converged;
//! 6. latency: `clusterset-dns serve` (release, pinned) on cluster c; a
//!    headless Deployment+Service exported from cluster a is scaled up one
//!    pod at a time; each sample is from the bench's pod watch seeing the
//!    new pod Ready to the first UDP answer from c's server containing its
//!    IP (polled every `BENCH_POLL_MS`);
//! 7. VmHWM of each controller; a summary (stdout, and markdown into
//!    `BENCH_CONTROLLER_RESULTS`).
//!
//! Run it with `scripts/bench-controller.sh`. Every process started here is
//! killed when the bench ends (guards, and `PR_SET_PDEATHSIG`).

#[path = "../controlplane/mod.rs"]
mod controlplane;
#[path = "../support/mod.rs"]
mod support;

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::io::Read as _;
use std::io::Write as _;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clusterset_dns::api::{ServiceExport, ServiceImport, ServiceImportType};
use controlplane::{Cluster, ControlPlane, ControllerProcess};
use futures::StreamExt;
use hickory_proto::op::Message;
use hickory_proto::rr::RData;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;

const MCS_MANAGED: &str = "endpointslice.kubernetes.io/managed-by=controller.clusterset-dns.io";
const LAT_NS: &str = "lat";
const LAT_NAME: &str = "lat";

// ---------------------------------------------------------------- settings

struct Settings {
    /// Units (import, its status, a Service, a slice) per cluster of the
    /// apply-floor phase.
    floor_units: usize,
    services: usize,
    warm_services: usize,
    namespaces: usize,
    samples: usize,
    concurrency: usize,
    idle: u64,
    poll_ms: u64,
    converge_timeout: u64,
    controller_cpu: String,
    dns_cpu: String,
    max_busy: f64,
    quiet_wait: u64,
    results: PathBuf,
    logs: PathBuf,
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
    /// Knobs (defaults): BENCH_SERVICES (2000 per cluster),
    /// BENCH_WARM_SERVICES (200 per cluster; 0 skips the warm phase),
    /// BENCH_NAMESPACES (20), BENCH_SAMPLES (50), BENCH_CONCURRENCY (32),
    /// BENCH_IDLE (60 s), BENCH_POLL_MS (2), BENCH_CONVERGE_TIMEOUT (600 s),
    /// BENCH_CONTROLLER_CPU ("0"), BENCH_DNS_CPU ("1"), BENCH_MAX_BUSY (35 %),
    /// BENCH_QUIET_WAIT (90 s), BENCH_FLOOR_UNITS (1000 per cluster; 0
    /// skips the apply floor), BENCH_CONTROLLER_RESULTS
    /// (target/bench-controller/results.md; the controllers' logs are
    /// copied beside it).
    fn from_env() -> Self {
        let results: PathBuf = env_or(
            "BENCH_CONTROLLER_RESULTS",
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/target/bench-controller/results.md"
            )),
        );
        let logs = results
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        Self {
            services: env_or("BENCH_SERVICES", 2000),
            warm_services: env_or("BENCH_WARM_SERVICES", 200),
            namespaces: env_or("BENCH_NAMESPACES", 20),
            samples: env_or("BENCH_SAMPLES", 50),
            concurrency: env_or("BENCH_CONCURRENCY", 32),
            idle: env_or("BENCH_IDLE", 60),
            poll_ms: env_or("BENCH_POLL_MS", 2),
            converge_timeout: env_or("BENCH_CONVERGE_TIMEOUT", 600),
            controller_cpu: env_or("BENCH_CONTROLLER_CPU", "0".to_string()),
            dns_cpu: env_or("BENCH_DNS_CPU", "1".to_string()),
            max_busy: env_or("BENCH_MAX_BUSY", 35.0),
            quiet_wait: env_or("BENCH_QUIET_WAIT", 90),
            floor_units: env_or("BENCH_FLOOR_UNITS", 1000),
            results,
            logs,
        }
    }
}

// ---------------------------------------------------------------- data

/// The bench's Services of cluster `ci`: (namespace, name, headless).
fn services(
    ci: usize,
    prefix: &str,
    count: usize,
    namespaces: usize,
) -> Vec<(String, String, bool)> {
    (0..count)
        .map(|k| {
            (
                format!("bench-{}", k % namespaces),
                format!("{prefix}{ci}-{k}"),
                k % 5 == 4,
            )
        })
        .collect()
}

fn object<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).unwrap()
}

/// Creates one object; AlreadyExists is fine, other errors are retried.
async fn create<K>(api: Api<K>, value: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = object(value);
    for attempt in 0.. {
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => return,
            Err(e) if attempt < 10 => {
                eprintln!("[bench] create failed (retrying): {e}");
                tokio::time::sleep(Duration::from_millis(200 * (attempt + 1))).await;
            }
            Err(e) => panic!("create: {e}"),
        }
    }
}

/// Service, EndpointSlice and ServiceExport of every entry, `concurrency`
/// requests in flight per cluster; the 10 endpoints of service `k` are
/// consecutive addresses of the cluster's pod CIDR (10.(200+ci).0.0/16)
/// after `base`.
async fn load(
    client: &kube::Client,
    ci: usize,
    list: &[(String, String, bool)],
    base: usize,
    concurrency: usize,
) {
    let jobs = list.iter().enumerate().map(|(k, (ns, name, headless))| {
        let client = client.clone();
        async move {
            let mut spec = json!({"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]});
            if *headless {
                spec["clusterIP"] = "None".into();
            }
            create::<Service>(
                Api::namespaced(client.clone(), ns),
                json!({"metadata": {"name": name}, "spec": spec}),
            )
            .await;
            let endpoints: Vec<serde_json::Value> = (0..10)
                .map(|j| {
                    let i = (base + k) * 10 + j;
                    json!({
                        "addresses": [format!("10.{}.{}.{}", 200 + ci, i / 250, i % 250 + 1)],
                        "conditions": {"ready": true},
                    })
                })
                .collect();
            create::<EndpointSlice>(
                Api::namespaced(client.clone(), ns),
                json!({
                    "metadata": {
                        "name": format!("{name}-bench"),
                        "labels": {
                            "kubernetes.io/service-name": name,
                            "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                        },
                    },
                    "addressType": "IPv4",
                    "endpoints": endpoints,
                    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                }),
            )
            .await;
            create::<ServiceExport>(
                Api::namespaced(client, ns),
                json!({"metadata": {"name": name}}),
            )
            .await;
        }
    });
    futures::stream::iter(jobs)
        .buffer_unordered(concurrency)
        .collect::<Vec<()>>()
        .await;
}

// ---------------------------------------------------------------- tracking

/// Keys (`ns/name`) of the bench's objects in their final state, kept by a
/// watch of one cluster.
type Good = Arc<Mutex<HashSet<String>>>;

fn track<K>(api: Api<K>, config: watcher::Config, good: Good, ok: fn(&K) -> bool)
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default,
{
    tokio::spawn(async move {
        let key = |o: &K| {
            format!(
                "{}/{}",
                o.meta().namespace.clone().unwrap_or_default(),
                o.meta().name.clone().unwrap_or_default()
            )
        };
        let mut init = HashSet::new();
        let mut stream = watcher::watcher(api, config).boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::Apply(o)) => {
                    let mut g = good.lock().unwrap();
                    if ok(&o) {
                        g.insert(key(&o));
                    } else {
                        g.remove(&key(&o));
                    }
                }
                Ok(Event::Delete(o)) => {
                    good.lock().unwrap().remove(&key(&o));
                }
                Ok(Event::Init) => init.clear(),
                Ok(Event::InitApply(o)) => {
                    if ok(&o) {
                        init.insert(key(&o));
                    }
                }
                Ok(Event::InitDone) => *good.lock().unwrap() = std::mem::take(&mut init),
                Err(e) => {
                    eprintln!("[bench] watch error: {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    });
}

fn bench_name(name: &str) -> bool {
    name.starts_with('s') || name.starts_with('w')
}

fn import_ok(i: &ServiceImport) -> bool {
    bench_name(i.metadata.name.as_deref().unwrap_or_default())
        && i.status.as_ref().is_some_and(|s| !s.clusters.is_empty())
        && (i.spec.type_ == ServiceImportType::Headless || !i.spec.ips.is_empty())
}

fn slice_ok(s: &EndpointSlice) -> bool {
    let service = s
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("multicluster.kubernetes.io/service-name"))
        .cloned()
        .unwrap_or_default();
    bench_name(&service)
        && s.endpoints.len() == 10
        && s.endpoints
            .iter()
            .all(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
}

struct Tracker {
    imports: Vec<Good>,
    slices: Vec<Good>,
}

impl Tracker {
    fn counts(&self) -> Vec<(usize, usize)> {
        self.imports
            .iter()
            .zip(&self.slices)
            .map(|(i, s)| (i.lock().unwrap().len(), s.lock().unwrap().len()))
            .collect()
    }

    /// Waits until every cluster has `want` good imports and slices;
    /// returns, per cluster, when it got there (from `start`).
    fn wait(
        &self,
        want: usize,
        start: Instant,
        timeout: Duration,
        controllers: &[ControllerProcess],
    ) -> Vec<Duration> {
        let mut done: Vec<Option<Duration>> = vec![None; self.imports.len()];
        let mut last_print = Instant::now();
        loop {
            for c in controllers {
                c.assert_running();
            }
            let counts = self.counts();
            for (i, (imports, slices)) in counts.iter().enumerate() {
                if done[i].is_none() && *imports >= want && *slices >= want {
                    done[i] = Some(start.elapsed());
                }
            }
            if done.iter().all(Option::is_some) {
                return done.into_iter().map(Option::unwrap).collect();
            }
            if last_print.elapsed() > Duration::from_secs(5) {
                eprintln!(
                    "[bench] {:.1} s: (imports, slices) per cluster {counts:?}, want {want}",
                    start.elapsed().as_secs_f64()
                );
                last_print = Instant::now();
            }
            assert!(
                start.elapsed() < timeout,
                "not converged in {timeout:?}: (imports, slices) {counts:?}, want {want}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

// ---------------------------------------------------------------- processes

/// `taskset -a -p -c cpus pid`: pins every thread of a running process.
fn pin(pid: u32, cpus: &str) {
    let ok = Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "taskset -a -p -c {cpus} {pid} failed");
}

/// A child killed and reaped on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_serve(cluster: &Cluster, cpus: &str, dns: u16, admin: u16, log: &Path) -> Proc {
    let mut command = Command::new("taskset");
    command
        .args(["-c", cpus])
        .arg(env!("CARGO_BIN_EXE_clusterset-dns"))
        .arg("serve")
        .arg("--kubeconfig")
        .arg(&cluster.admin_kubeconfig)
        .args(["--dns-listen", &format!("127.0.0.1:{dns}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
        .args(["--udp-workers", "1"]);
    Proc(support::spawn_logged_command(&mut command, log, false))
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

/// The CPU time of each controller so far.
fn controller_cpu(controllers: &[ControllerProcess]) -> Vec<Duration> {
    controllers
        .iter()
        .map(|c| Duration::from_millis(10 * support::process_cpu_ticks(c.pid())))
        .collect()
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

fn cpu_busy() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = text
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let total: u64 = f.iter().sum();
    let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Waits (at most `quiet_wait` s) until both CPUs together are less than
/// `max_busy` % busy over 2 s; returns that share.
fn wait_quiet(s: &Settings, what: &str) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(s.quiet_wait);
    loop {
        let (b0, t0) = cpu_busy();
        std::thread::sleep(Duration::from_secs(2));
        let (b1, t1) = cpu_busy();
        let busy = 100.0 * (b1 - b0) as f64 / (t1 - t0).max(1) as f64;
        if busy < s.max_busy || Instant::now() >= deadline {
            let warn = if busy < s.max_busy {
                ""
            } else {
                " (WARNING: not quiet; measuring anyway)"
            };
            eprintln!(
                "[bench] before {what}: {busy:.1}% CPU busy, load {}{warn}",
                loadavg()
            );
            return busy;
        }
        eprintln!("[bench] waiting for a quiet machine before {what}: {busy:.1}% busy");
    }
}

fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// Sum of every series of metric `name` (any labels).
fn metric_sum(body: &str, name: &str) -> f64 {
    body.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn writes_total(controllers: &[ControllerProcess]) -> f64 {
    controllers
        .iter()
        .map(|c| {
            let body = http_get(c.admin_port(), "/metrics")
                .map(|(_, b)| b)
                .unwrap_or_default();
            metric_sum(&body, "clusterset_dns_controller_writes_total")
        })
        .sum()
}

/// `clusterset_dns_controller_writes_total` summed over the controllers,
/// by kind.
fn writes_by_kind(controllers: &[ControllerProcess]) -> BTreeMap<String, f64> {
    let mut by_kind = BTreeMap::new();
    for c in controllers {
        let body = http_get(c.admin_port(), "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default();
        for line in body
            .lines()
            .filter(|l| l.starts_with("clusterset_dns_controller_writes_total{"))
        {
            let kind = line
                .split("kind=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or("?");
            let value: f64 = line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            *by_kind.entry(kind.to_owned()).or_insert(0.0) += value;
        }
    }
    by_kind
}

/// The apply floor: how many server-side applies per second the three
/// apiservers (and etcd) of this machine accept from a plain client, with
/// the controller's write mix and concurrency. Per cluster, `units` times:
/// a ServiceImport, its status, a selector-less Service and a 10-endpoint
/// EndpointSlice, `concurrency` units in flight, the three clusters at
/// once. Returns (applies, elapsed).
async fn apply_floor(
    clients: &[kube::Client],
    units: usize,
    concurrency: usize,
) -> (usize, Duration) {
    let params = PatchParams::apply("bench-floor").force();
    let start = Instant::now();
    let per_cluster = clients.iter().enumerate().map(|(ci, client)| {
        let params = params.clone();
        async move {
            let ns = "bench-floor";
            create::<Namespace>(Api::all(client.clone()), json!({"metadata": {"name": ns}})).await;
            futures::stream::iter(0..units)
                .for_each_concurrent(concurrency, |k| {
                    let client = client.clone();
                    let params = params.clone();
                    async move {
                        let name = format!("floor-{k}");
                        let imports: Api<ServiceImport> = Api::namespaced(client.clone(), ns);
                        let import = json!({
                            "apiVersion": "multicluster.x-k8s.io/v1beta1",
                            "kind": "ServiceImport",
                            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "bench-floor"}},
                            "spec": {"type": "ClusterSetIP", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
                        });
                        imports.patch(&name, &params, &Patch::Apply(&import)).await.unwrap();
                        let status = json!({
                            "apiVersion": "multicluster.x-k8s.io/v1beta1",
                            "kind": "ServiceImport",
                            "metadata": {"name": name},
                            "status": {"clusters": [{"cluster": "cluster0"}]},
                        });
                        imports.patch_status(&name, &params, &Patch::Apply(&status)).await.unwrap();
                        let services: Api<Service> = Api::namespaced(client.clone(), ns);
                        let service = json!({
                            "apiVersion": "v1", "kind": "Service",
                            "metadata": {"name": name},
                            "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
                        });
                        services.patch(&name, &params, &Patch::Apply(&service)).await.unwrap();
                        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
                        let endpoints: Vec<serde_json::Value> = (0..10)
                            .map(|j| {
                                let i = k * 10 + j;
                                json!({
                                    "addresses": [format!("10.{}.{}.{}", 210 + ci, i / 250, i % 250 + 1)],
                                    "conditions": {"ready": true},
                                })
                            })
                            .collect();
                        let slice = json!({
                            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                            "metadata": {"name": name, "labels": {"kubernetes.io/service-name": name}},
                            "addressType": "IPv4",
                            "endpoints": endpoints,
                            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
                        });
                        slices.patch(&name, &params, &Patch::Apply(&slice)).await.unwrap();
                    }
                })
                .await;
        }
    });
    futures::future::join_all(per_cluster).await;
    (4 * units * clients.len(), start.elapsed())
}

/// `apiserver_longrunning_requests{verb="WATCH"}` of one apiserver, per
/// resource.
fn apiserver_watches(cluster: &Cluster) -> BTreeMap<String, i64> {
    let url = controlplane::apiserver_url(cluster);
    let out = Command::new("curl")
        .args(["-sk", "--max-time", "10", "-H"])
        .arg(format!(
            "Authorization: Bearer {}",
            controlplane::ADMIN_TOKEN
        ))
        .arg(format!("{url}/metrics"))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut map = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_longrunning_requests{") else {
            continue;
        };
        if !rest.contains("verb=\"WATCH\"") {
            continue;
        }
        let resource = rest
            .split("resource=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("?")
            .to_string();
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *map.entry(resource).or_insert(0) += value as i64;
    }
    map
}

// ---------------------------------------------------------------- DNS

/// An A query with EDNS (4096 bytes), so that an RRset of 50 addresses
/// fits in one UDP answer.
fn query_bytes(id: u16, name: &str) -> Vec<u8> {
    let mut q = Vec::with_capacity(80);
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1]);
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q.extend_from_slice(&[0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0]);
    q
}

/// The A addresses of `name`, or `None` on timeout.
fn ask(socket: &UdpSocket, id: u16, server: SocketAddr, name: &str) -> Option<Vec<String>> {
    socket.send_to(&query_bytes(id, name), server).ok()?;
    let mut buf = vec![0; 65535];
    let deadline = Instant::now() + Duration::from_millis(500);
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        socket
            .set_read_timeout(Some(left.max(Duration::from_micros(100))))
            .ok()?;
        let (n, _) = socket.recv_from(&mut buf).ok()?;
        if n >= 2 && buf[..2] == id.to_be_bytes() {
            let message = Message::from_vec(&buf[..n]).ok()?;
            return Some(
                message
                    .answers
                    .iter()
                    .filter_map(|r| match &r.data {
                        RData::A(a) => Some(a.0.to_string()),
                        _ => None,
                    })
                    .collect(),
            );
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn secs(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64())
}

fn verdict(met: bool) -> &'static str {
    if met { "**met**" } else { "**missed**" }
}

// ---------------------------------------------------------------- main

fn main() {
    let s = Settings::from_env();
    let run_started = Instant::now();
    std::fs::create_dir_all(&s.logs).unwrap();
    eprintln!("[bench] load average {}", loadavg());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    // Clusters, identities, roles, peers.
    let t = Instant::now();
    let plane = rt.block_on(ControlPlane::start_members(3, |_| false));
    let clusters = &plane.clusters;
    let clients: Vec<kube::Client> = clusters
        .iter()
        .map(|c| rt.block_on(c.admin_client()))
        .collect();
    let mut kubeconfigs = Vec::new();
    rt.block_on(async {
        for (cluster, client) in clusters.iter().zip(&clients) {
            controlplane::set_cluster_properties(client, &cluster.name, "bench").await;
            kubeconfigs.push(controlplane::install_controller(cluster).await);
        }
        for (cluster, client) in clusters.iter().zip(&clients) {
            for other in clusters.iter().filter(|o| o.name != cluster.name) {
                let reader = controlplane::service_account_kubeconfig(
                    other,
                    controlplane::CONTROLLER_NAMESPACE,
                    "clusterset-dns-peer-reader",
                    3600,
                )
                .await;
                controlplane::add_peer_secret(client, &other.name, &reader).await;
            }
        }
    });
    let plane_secs = t.elapsed();
    eprintln!(
        "[bench] 3 member clusters up in {:.1} s",
        plane_secs.as_secs_f64()
    );

    // Data.
    let t = Instant::now();
    rt.block_on(async {
        for client in &clients {
            let api: Api<Namespace> = Api::all(client.clone());
            for n in (0..s.namespaces)
                .map(|n| format!("bench-{n}"))
                .chain([LAT_NS.to_string()])
            {
                create(api.clone(), json!({"metadata": {"name": n}})).await;
            }
        }
        let loads = clients.iter().enumerate().map(|(ci, client)| {
            let list = services(ci, "s", s.services, s.namespaces);
            async move { load(client, ci, &list, 0, s.concurrency).await }
        });
        futures::future::join_all(loads).await;
    });
    let load_secs = t.elapsed();
    let objects = 3 * 3 * s.services;
    eprintln!(
        "[bench] loaded {} Services + slices + exports per cluster ({objects} objects) in {:.1} s",
        s.services,
        load_secs.as_secs_f64()
    );

    // The bench's watches (before the baseline of watch counts).
    let tracker = Tracker {
        imports: (0..3).map(|_| Good::default()).collect(),
        slices: (0..3).map(|_| Good::default()).collect(),
    };
    rt.block_on(async {
        for (i, client) in clients.iter().enumerate() {
            track(
                Api::<ServiceImport>::all(client.clone()),
                watcher::Config::default(),
                tracker.imports[i].clone(),
                import_ok,
            );
            track(
                Api::<EndpointSlice>::all(client.clone()),
                watcher::Config::default().labels(MCS_MANAGED),
                tracker.slices[i].clone(),
                slice_ok,
            );
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    });
    let watches_before: Vec<_> = clusters.iter().map(apiserver_watches).collect();

    // 1. Cold convergence.
    let cold_busy = wait_quiet(&s, "cold convergence");
    let machine_before = cpu_busy();
    let start = Instant::now();
    // Each peer exports BENCH_SERVICES, then BENCH_WARM_SERVICES more: the
    // per-peer caps (2,000 exports and Services by default) must hold them
    // all, or the warm phase never converges.
    let cap = (s.services + s.warm_services).max(2000).to_string();
    let caps = [
        "--peer-max-exports",
        cap.as_str(),
        "--peer-max-services",
        cap.as_str(),
    ];
    let controllers: Vec<ControllerProcess> = clusters
        .iter()
        .zip(&kubeconfigs)
        .map(|(cluster, kubeconfig)| {
            let c = controlplane::spawn_controller(cluster, kubeconfig, &caps);
            pin(c.pid(), &s.controller_cpu);
            c
        })
        .collect();
    let want = 3 * s.services;
    // `/ready` and the counts are watched at once: `/ready` may lag.
    let (ready, cold) = std::thread::scope(|scope| {
        let waiters: Vec<_> = controllers
            .iter()
            .map(|c| {
                scope.spawn(move || {
                    c.wait_ready(Duration::from_secs(s.converge_timeout));
                    start.elapsed()
                })
            })
            .collect();
        let cold = tracker.wait(
            want,
            start,
            Duration::from_secs(s.converge_timeout),
            &controllers,
        );
        let ready: Vec<Duration> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
        (ready, cold)
    });
    let cold_max = cold.iter().max().copied().unwrap();
    let cold_cpu = controller_cpu(&controllers);
    let machine_after = cpu_busy();
    // Both CPUs' busy time over the phase, in clock ticks of 10 ms.
    let cold_machine = Duration::from_millis(10 * (machine_after.0 - machine_before.0));
    eprintln!("[bench] cold convergence per cluster {cold:?} (ready {ready:?})");
    eprintln!(
        "[bench] CPU during cold convergence: controllers {cold_cpu:?}, whole machine {cold_machine:?}"
    );
    let rss_after_cold: Vec<(u64, u64)> = controllers.iter().map(|c| memory_kib(c.pid())).collect();
    let cold_writes = writes_by_kind(&controllers);
    eprintln!("[bench] writes during cold convergence (3 controllers): {cold_writes:?}");

    // Watches.
    std::thread::sleep(Duration::from_secs(2));
    let watches_after: Vec<_> = clusters.iter().map(apiserver_watches).collect();

    // 3. Idle writes.
    let idle_busy = wait_quiet(&s, "idle writes");
    let w0 = writes_total(&controllers);
    std::thread::sleep(Duration::from_secs(s.idle));
    let w1 = writes_total(&controllers);
    let idle_writes = w1 - w0;
    eprintln!("[bench] writes over {} s idle: {idle_writes}", s.idle);

    // 2b. Warm convergence.
    let mut warm = None;
    if s.warm_services > 0 {
        wait_quiet(&s, "warm convergence");
        let cpu_before = controller_cpu(&controllers);
        let start = Instant::now();
        rt.block_on(async {
            let loads = clients.iter().enumerate().map(|(ci, client)| {
                let list = services(ci, "w", s.warm_services, s.namespaces);
                async move { load(client, ci, &list, s.services, s.concurrency).await }
            });
            futures::future::join_all(loads).await;
        });
        let loaded = start.elapsed();
        let times = tracker.wait(
            want + 3 * s.warm_services,
            start,
            Duration::from_secs(s.converge_timeout),
            &controllers,
        );
        let max = times.iter().max().copied().unwrap();
        let cpu: Duration = controller_cpu(&controllers)
            .iter()
            .zip(&cpu_before)
            .map(|(after, before)| after.saturating_sub(*before))
            .sum();
        eprintln!(
            "[bench] warm: loaded in {loaded:?}, converged in {max:?}, controllers' CPU {cpu:?}"
        );
        warm = Some((loaded, max, cpu));
    }

    // 4. Latency through clusterset-dns serve on cluster c.
    let (dns_port, admin_port) = (
        controlplane::free_udp_and_tcp_port(),
        controlplane::free_udp_and_tcp_port(),
    );
    let serve_log = s.logs.join("serve-c.log");
    let serve = spawn_serve(&clusters[2], &s.dns_cpu, dns_port, admin_port, &serve_log);
    let serve_deadline = Instant::now() + Duration::from_secs(120);
    while http_get(admin_port, "/ready").map(|(c, _)| c) != Some(200) {
        assert!(
            Instant::now() < serve_deadline,
            "clusterset-dns serve not ready in 120 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let a = &clients[0];
    rt.block_on(async {
        create::<Deployment>(
            Api::namespaced(a.clone(), LAT_NS),
            json!({
                "metadata": {"name": LAT_NAME},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": {"app": LAT_NAME}},
                    "template": {
                        "metadata": {"labels": {"app": LAT_NAME}},
                        "spec": {"containers": [{"name": "app", "image": "example/app"}]},
                    },
                },
            }),
        )
        .await;
        create::<Service>(
            Api::namespaced(a.clone(), LAT_NS),
            json!({"metadata": {"name": LAT_NAME}, "spec": {
                "clusterIP": "None",
                "selector": {"app": LAT_NAME},
                "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
            }}),
        )
        .await;
        create::<ServiceExport>(
            Api::namespaced(a.clone(), LAT_NS),
            json!({"metadata": {"name": LAT_NAME}}),
        )
        .await;
    });
    let (tx, rx) = std::sync::mpsc::channel::<(String, Instant)>();
    {
        let pods: Api<Pod> = Api::namespaced(a.clone(), LAT_NS);
        rt.spawn(async move {
            let mut seen = HashSet::new();
            let config = watcher::Config::default().labels(&format!("app={LAT_NAME}"));
            let mut stream = watcher::watcher(pods, config).boxed();
            while let Some(event) = stream.next().await {
                let pod = match event {
                    Ok(Event::Apply(p) | Event::InitApply(p)) => p,
                    _ => continue,
                };
                let now = Instant::now();
                if !controlplane::pod_running_ready(&pod) {
                    continue;
                }
                if let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone())
                    && seen.insert(ip.clone())
                {
                    let _ = tx.send((ip, now));
                }
            }
        });
    }
    let lat_busy = wait_quiet(&s, "latency");
    let name = format!("{LAT_NAME}.{LAT_NS}.svc.clusterset.local");
    let server: SocketAddr = ([127, 0, 0, 1], dns_port).into();
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut id: u16 = 0;
    let mut samples = Vec::new();
    let mut first_poll = 0;
    let mut timeouts = 0;
    let deployments: Api<Deployment> = Api::namespaced(a.clone(), LAT_NS);
    for n in 1..=s.samples {
        rt.block_on(deployments.patch(
            LAT_NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": n}})),
        ))
        .expect("scaling the Deployment");
        let (ip, seen) = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("pod {n} not Ready in 60 s"));
        let deadline = seen + Duration::from_secs(30);
        let mut polls = 0;
        loop {
            id = id.wrapping_add(1);
            polls += 1;
            if ask(&socket, id, server, &name).is_some_and(|ips| ips.contains(&ip)) {
                samples.push(seen.elapsed());
                if polls == 1 {
                    first_poll += 1;
                }
                break;
            }
            if Instant::now() > deadline {
                timeouts += 1;
                break;
            }
            std::thread::sleep(Duration::from_millis(s.poll_ms));
        }
    }
    samples.sort();
    let (p50, p90, p99, max) = (
        percentile(&samples, 50.0),
        percentile(&samples, 90.0),
        percentile(&samples, 99.0),
        samples.last().copied().unwrap_or_default(),
    );
    eprintln!("[bench] latency p50 {p50:?} p99 {p99:?} max {max:?} timeouts {timeouts}");

    // Memory at the end.
    let rss_end: Vec<(u64, u64)> = controllers.iter().map(|c| memory_kib(c.pid())).collect();
    let serve_mem = memory_kib(serve.0.id());
    eprintln!(
        "[bench] controllers (VmRSS, VmHWM) KiB after convergence {rss_after_cold:?}, at end {rss_end:?}"
    );
    let parts_end: Vec<(u64, u64)> = controllers.iter().map(|c| rss_parts_kib(c.pid())).collect();
    eprintln!("[bench] controllers (RssAnon, RssFile) KiB at end {parts_end:?}");

    // 8. The apply floor, with the controllers still running (as during
    // convergence; they ignore objects they do not manage).
    let mut floor = None;
    if s.floor_units > 0 {
        wait_quiet(&s, "the apply floor");
        let (applies, took) = rt.block_on(apply_floor(&clients, s.floor_units, 16));
        let rate = applies as f64 / took.as_secs_f64();
        eprintln!("[bench] apply floor: {applies} applies in {took:?} ({rate:.0}/s)");
        floor = Some((applies, took, rate));
    }
    for (cluster, c) in clusters.iter().zip(&controllers) {
        let _ = std::fs::copy(
            c.log_path(),
            s.logs.join(format!("controller-{}.log", cluster.name)),
        );
    }

    // Summary.
    let mut out = String::new();
    let ids = ["a (cluster0)", "b (cluster1)", "c (cluster2)"];
    let _ = writeln!(
        out,
        "## clusterset-dns controller bench\n\n{} exported Services per cluster ({} ClusterSetIP, {} headless; 10 endpoints each) in {} namespaces: {} ServiceImports and {} imported slices expected per cluster. Clusters up in {} s; data loaded in {} s ({objects} objects, {} in flight per cluster). Controllers pinned to CPU {}, `serve` to CPU {}; apiservers, etcd, kcm, scheduler, kwok unpinned. Run took {} s.\n",
        s.services,
        s.services - s.services / 5,
        s.services / 5,
        s.namespaces,
        want,
        want,
        secs(plane_secs),
        secs(load_secs),
        s.concurrency,
        s.controller_cpu,
        s.dns_cpu,
        secs(run_started.elapsed()),
    );
    let _ = writeln!(
        out,
        "| cluster | controller `/ready` | all imports and slices | VmRSS / VmHWM after convergence (MiB) | VmRSS / VmHWM at end (MiB) |\n|---|---:|---:|---:|---:|"
    );
    for i in 0..3 {
        let _ = writeln!(
            out,
            "| {} | {} s | {} s | {} / {} | {} / {} |",
            ids[i],
            secs(ready[i]),
            secs(cold[i]),
            mib(rss_after_cold[i].0),
            mib(rss_after_cold[i].1),
            mib(rss_end[i].0),
            mib(rss_end[i].1),
        );
    }
    let _ = writeln!(
        out,
        "\n(CPU busy before: cold {cold_busy:.0} %, idle {idle_busy:.0} %, latency {lat_busy:.0} %.)\n"
    );
    let cold_cpu_sum: Duration = cold_cpu.iter().sum();
    let _ = writeln!(
        out,
        "CPU time during cold convergence: the 3 controllers {} s ({} / {} / {} s), {:.0} % of the phase's {} s of busy CPU on the whole machine (both CPUs).\n",
        secs(cold_cpu_sum),
        secs(cold_cpu[0]),
        secs(cold_cpu[1]),
        secs(cold_cpu[2]),
        100.0 * cold_cpu_sum.as_secs_f64() / cold_machine.as_secs_f64().max(0.01),
        secs(cold_machine),
    );
    if let Some((loaded, conv, cpu)) = warm {
        let _ = writeln!(
            out,
            "Warm: {} more exports per cluster created while the controllers ran ({} objects, loaded in {} s): every cluster had every import and slice {} s after the first create; the 3 controllers used {} s of CPU meanwhile.\n",
            s.warm_services,
            9 * s.warm_services,
            secs(loaded),
            secs(conv),
            secs(cpu),
        );
    }
    let total = 3 * s.services;
    let clusterset_ip = total - total / 5;
    let minimum: BTreeMap<&str, usize> = BTreeMap::from([
        ("serviceimport", total + clusterset_ip),
        ("serviceimport_status", total),
        ("service", clusterset_ip),
        ("endpointslice", total),
        ("serviceexport_status", s.services),
    ]);
    let _ = writeln!(
        out,
        "Writes during cold convergence, per cluster (sum of the 3 controllers / 3), against the least the design allows (a ClusterSetIP import is applied twice: its uid first, for the derived Service's owner reference, then the VIP):\n\n| kind | written | least |\n|---|---:|---:|"
    );
    let mut written_total = 0.0;
    for (kind, least) in &minimum {
        let written = cold_writes.get(*kind).copied().unwrap_or(0.0);
        written_total += written;
        let _ = writeln!(out, "| {kind} | {:.0} | {least} |", written / 3.0);
    }
    let least_total: usize = minimum.values().sum();
    let _ = writeln!(
        out,
        "| all | {:.0} | {least_total} |\n",
        written_total / 3.0
    );
    let _ = writeln!(
        out,
        "Controller CPU per cold-start write: {:.2} ms ({} s over {written_total:.0} writes of the 3 controllers).\n",
        1000.0 * cold_cpu_sum.as_secs_f64() / written_total.max(1.0),
        secs(cold_cpu_sum),
    );
    if let Some((applies, took, rate)) = floor {
        let _ = writeln!(
            out,
            "Apply floor: a plain client applied {applies} objects (per cluster {} × a ServiceImport, its status, a Service, a 10-endpoint slice; 16 in flight per cluster, the three clusters at once) in {} s: {rate:.0} applies/s on this machine. At that rate the controllers' {written_total:.0} cold-start writes take {:.1} s; cold convergence took {} s ({:.2}× the floor).\n",
            s.floor_units,
            secs(took),
            written_total / rate,
            secs(cold_max),
            cold_max.as_secs_f64() / (written_total / rate),
        );
    }
    let _ = writeln!(
        out,
        "Watches open on each apiserver (`apiserver_longrunning_requests{{verb=\"WATCH\"}}` by resource; after convergence minus before the controllers started; `serve` not yet running):\n\n| resource | a | b | c |\n|---|---:|---:|---:|"
    );
    let mut resources: Vec<&String> = watches_after.iter().flat_map(|m| m.keys()).collect();
    resources.sort();
    resources.dedup();
    for r in resources {
        let d: Vec<i64> = (0..3)
            .map(|i| {
                watches_after[i].get(r).copied().unwrap_or(0)
                    - watches_before[i].get(r).copied().unwrap_or(0)
            })
            .collect();
        if d.iter().any(|&v| v != 0) {
            let _ = writeln!(out, "| {r} | {} | {} | {} |", d[0], d[1], d[2]);
        }
    }
    let _ = writeln!(
        out,
        "\nLatency, pod Ready in a (the bench's watch sees it) → first answer from `serve` on c containing its IP, {} samples (polled every {} ms over UDP): p50 {} ms, p90 {} ms, p99 {} ms, max {} ms; {first_poll} visible on the first poll; {timeouts} timeouts (30 s). `serve` VmRSS {} MiB.\n",
        samples.len(),
        s.poll_ms,
        ms(p50),
        ms(p90),
        ms(p99),
        ms(max),
        mib(serve_mem.0),
    );
    let hwm_max = rss_end.iter().map(|m| m.1).max().unwrap_or(0);
    let _ = writeln!(
        out,
        "| target | measured | result |\n|---|---|---|\n| cold convergence < 30 s | {} s (slowest cluster) | {} |\n| p99 < 1 s | {} ms ({} samples, {timeouts} timeouts) | {} |\n| zero idle writes | {idle_writes} writes in {} s ({:.2}/s) | {} |\n| controller VmHWM ≤ 100 MiB (issue 23) | {} MiB (largest of 3) | {} |",
        secs(cold_max),
        verdict(cold_max < Duration::from_secs(30)),
        ms(p99),
        samples.len(),
        verdict(p99 < Duration::from_secs(1) && timeouts == 0 && samples.len() >= s.samples),
        s.idle,
        idle_writes / s.idle as f64,
        verdict(idle_writes == 0.0),
        mib(hwm_max),
        verdict(hwm_max <= 100 * 1024),
    );
    println!("{out}");
    if let Some(dir) = s.results.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    std::fs::write(&s.results, &out).unwrap();
    eprintln!("[bench] results in {}", s.results.display());
    drop(serve);
    drop(controllers);
    drop(plane);
}
