//! Mesh and hub at scale (issue 46), on real apiservers, in up to two
//! phases (`BENCH_HUB_PHASES`):
//!
//! - **sim**: one hub (etcd, kube-apiserver, kube-controller-manager; set
//!   up with `clusterset-dns hub init`), three apiserver-only members
//!   joined with `clusterset-dns hub join`, each running a release
//!   `clusterset-dns controller`, and `BENCH_HUB_K` further members
//!   simulated in this process. Each simulated member has what a member's
//!   controller has on the hub and nothing shared: its namespace and
//!   objects (`hub::objects::member_objects`), a TokenRequest token of its
//!   own ServiceAccount, its own `kube::Client` (its own connections), the
//!   six watches a controller holds there (four hub-wide, as
//!   `controller::hub::reader` opens them, and two on its own namespace,
//!   as the publisher does), drained and decoded as the controller decodes
//!   them; it writes what a controller writes (`publication::published_service`,
//!   `publication::published_slice`, `hub::member_lease`, server-side
//!   apply as `clusterset-dns-member`), renews its Lease every
//!   `hub::LEASE_RENEW` and churns one endpoint every
//!   `BENCH_HUB_CHURN_MS`. Measured: export → ServiceImport and endpoint
//!   change → imported slice at the real members, the hub apiserver's and
//!   etcd's CPU and memory, each real controller's connections, CPU and
//!   VmHWM, requests into the members' apiservers from anyone but their
//!   own controller (their audit logs), then a hub outage
//!   (`BENCH_HUB_OUTAGE` s): the real members' imports throughout, and
//!   when each member (real or simulated) lists or watches the hub again
//!   after its restart (the hub's audit log, enabled by the restart).
//! - **mesh-vs-hub**: for each N of `BENCH_HUB_MESH_SIZES`, N
//!   apiserver-only members with release controllers, first a mesh (peer
//!   Secrets with peer-reader tokens), then the same members through a
//!   hub (peer Secrets deleted, `hub init`/`hub join`, controllers
//!   restarted), each measured over an idle window: connections per
//!   controller, CPU, VmHWM, and requests per second into each member's
//!   apiserver from other clusters.
//!
//! Run it with `scripts/bench-hub.sh`; the knobs are in
//! [`Settings::from_env`]. Every process started here is killed when the
//! bench ends (guards, and `PR_SET_PDEATHSIG`).

#[path = "../controlplane/mod.rs"]
mod controlplane;
#[path = "../support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use clusterset_dns::api::well_known::LABEL_MANAGED_BY;
use clusterset_dns::api::{
    PublishedService, ServiceExport, ServiceExportSpec, ServiceImport, ServiceImportType,
    ServiceRef,
};
use clusterset_dns::controller::lean::Lean;
use clusterset_dns::controller::naming::{LABEL_APP_MANAGED_BY, MANAGED_BY};
use clusterset_dns::controller::publication::{PUBLISHED_BY, published_service, published_slice};
use clusterset_dns::hub::objects::member_objects;
use clusterset_dns::hub::{
    LEASE_RENEW, MEMBER_LEASE, MEMBER_RECORD, MEMBER_SERVICE_ACCOUNT, MemberQuota, QUOTA,
    member_lease, member_namespace,
};
use controlplane::{Cluster, ClusterSpec, ControlPlane, ControllerProcess};
use futures::{Stream, StreamExt};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, ResourceQuota, Secret, Service, ServiceAccount, ServicePort, ServiceSpec,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};

/// The field manager of a member's copy on the hub
/// (`controller::hub::publisher::FIELD_MANAGER`).
const MEMBER_FIELD_MANAGER: &str = "clusterset-dns-member";
/// The page size of a member's hub watches
/// (`controller::connection::PEER_LIST_PAGE`).
const HUB_PAGE: u32 = 50;
/// The page size of the publisher's watches of its own hub namespace
/// (`controller::connection::LIST_PAGE`).
const OWN_PAGE: u32 = 500;
/// Namespaces the exports are spread over.
const NAMESPACES: usize = 10;
/// Imported slices, as the real members' controllers label them.
const MCS_MANAGED: &str = "endpointslice.kubernetes.io/managed-by=controller.clusterset-dns.io";

// ---------------------------------------------------------------- settings

/// The bench's knobs.
struct Settings {
    phases: Vec<String>,
    k: usize,
    exports: usize,
    endpoints: usize,
    churn_ms: u64,
    samples: usize,
    idle: u64,
    outage: u64,
    after_outage: u64,
    watch_ramp: u64,
    mesh_sizes: Vec<usize>,
    mesh_exports: usize,
    concurrency: usize,
    converge_timeout: u64,
    results: PathBuf,
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
    /// Knobs (defaults): BENCH_HUB_PHASES ("sim,mesh-vs-hub"), BENCH_HUB_K
    /// (47 simulated members: 50 with the real ones), BENCH_HUB_EXPORTS (20
    /// per member, simulated and real), BENCH_HUB_ENDPOINTS (10 per slice),
    /// BENCH_HUB_CHURN_MS (5000: one endpoint change per simulated member
    /// every 5 s; 0 for none), BENCH_HUB_SAMPLES (30 of each latency),
    /// BENCH_HUB_IDLE (60 s windows), BENCH_HUB_OUTAGE (60 s),
    /// BENCH_HUB_AFTER_OUTAGE (60 s observed after the hub's restart),
    /// BENCH_HUB_WATCH_RAMP (30 s over which the simulated members open
    /// their watches), BENCH_HUB_MESH_SIZES ("3,10"),
    /// BENCH_HUB_MESH_EXPORTS (20 per member), BENCH_HUB_CONCURRENCY (8
    /// members set up at once), BENCH_HUB_CONVERGE_TIMEOUT (600 s),
    /// BENCH_HUB_RESULTS (target/bench-hub/results.md; logs beside it).
    fn from_env() -> Self {
        let list = |name: &str, default: &str| -> String { env_or(name, default.to_owned()) };
        Self {
            phases: list("BENCH_HUB_PHASES", "sim,mesh-vs-hub")
                .split(',')
                .map(|p| p.trim().to_owned())
                .filter(|p| !p.is_empty())
                .collect(),
            k: env_or("BENCH_HUB_K", 47),
            exports: env_or("BENCH_HUB_EXPORTS", 20),
            endpoints: env_or("BENCH_HUB_ENDPOINTS", 10),
            churn_ms: env_or("BENCH_HUB_CHURN_MS", 5000),
            samples: env_or("BENCH_HUB_SAMPLES", 30),
            idle: env_or("BENCH_HUB_IDLE", 60),
            outage: env_or("BENCH_HUB_OUTAGE", 60),
            after_outage: env_or("BENCH_HUB_AFTER_OUTAGE", 60),
            watch_ramp: env_or("BENCH_HUB_WATCH_RAMP", 30),
            mesh_sizes: list("BENCH_HUB_MESH_SIZES", "3,10")
                .split(',')
                .filter(|n| !n.trim().is_empty())
                .map(|n| n.trim().parse().expect("BENCH_HUB_MESH_SIZES: numbers"))
                .collect(),
            mesh_exports: env_or("BENCH_HUB_MESH_EXPORTS", 20),
            concurrency: env_or("BENCH_HUB_CONCURRENCY", 8),
            converge_timeout: env_or("BENCH_HUB_CONVERGE_TIMEOUT", 600),
            results: env_or(
                "BENCH_HUB_RESULTS",
                PathBuf::from(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/target/bench-hub/results.md"
                )),
            ),
        }
    }

    fn logs(&self) -> PathBuf {
        self.results
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."))
    }
}

// ---------------------------------------------------------------- processes and /proc

/// CPU time of `pid` so far.
fn cpu(pid: u32) -> Duration {
    Duration::from_millis(10 * support::process_cpu_ticks(pid))
}

/// (VmRSS, VmHWM) of `pid`, MiB.
fn memory_mib(pid: u32) -> (f64, f64) {
    (
        support::process_status_kib(pid, "VmRSS:") as f64 / 1024.0,
        support::process_status_kib(pid, "VmHWM:") as f64 / 1024.0,
    )
}

/// Busy and total clock ticks of the whole machine.
fn machine_ticks() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = text
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let total: u64 = fields.iter().sum();
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
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

/// CPU of a set of processes over a window: start it, then read cores.
struct CpuWindow {
    start: Instant,
    machine: (u64, u64),
    pids: Vec<(String, u32, Duration)>,
}

impl CpuWindow {
    fn start(pids: &[(String, u32)]) -> Self {
        Self {
            start: Instant::now(),
            machine: machine_ticks(),
            pids: pids
                .iter()
                .map(|(name, pid)| (name.clone(), *pid, cpu(*pid)))
                .collect(),
        }
    }

    /// Cores used by each process since the start, and the machine's busy
    /// share (%, both CPUs).
    fn end(&self) -> (BTreeMap<String, f64>, f64) {
        let wall = self.start.elapsed().as_secs_f64().max(0.001);
        let cores = self
            .pids
            .iter()
            .map(|(name, pid, before)| {
                (
                    name.clone(),
                    cpu(*pid).saturating_sub(*before).as_secs_f64() / wall,
                )
            })
            .collect();
        let (busy, total) = machine_ticks();
        let share = 100.0 * (busy - self.machine.0) as f64 / (total - self.machine.1).max(1) as f64;
        (cores, share)
    }
}

/// `apiserver_longrunning_requests{verb="WATCH"}` of an apiserver, summed;
/// `None` when a busy apiserver did not answer in three tries of 30 s.
fn apiserver_watches(url: &str) -> Option<i64> {
    for _ in 0..3 {
        let out = std::process::Command::new("curl")
            .args(["-sk", "--max-time", "30", "-H"])
            .arg(format!(
                "Authorization: Bearer {}",
                controlplane::ADMIN_TOKEN
            ))
            .arg(format!("{url}/metrics"))
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout);
        let values: Vec<f64> = text
            .lines()
            .filter(|l| {
                l.starts_with("apiserver_longrunning_requests{") && l.contains("verb=\"WATCH\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .collect();
        // A complete answer ends with the last family of the registry.
        if !values.is_empty() && text.trim_end().ends_with(|c: char| c.is_ascii_digit()) {
            return Some(values.iter().sum::<f64>() as i64);
        }
    }
    None
}

// ---------------------------------------------------------------- audit logs

/// What a member's apiserver logs: every request but its own controller's,
/// the bench's (`admin`) and its own loopback's, once, when received.
const MEMBER_AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["ResponseStarted", "ResponseComplete", "Panic"]
rules:
- level: None
  users: ["admin", "system:apiserver", "system:serviceaccount:clusterset-dns:clusterset-dns-controller"]
- level: Metadata
"#;

/// What the hub logs after its restart: lists and watches of the
/// publication's kinds by service accounts (the members), when received
/// and when answered.
const HUB_AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["ResponseStarted", "Panic"]
rules:
- level: Metadata
  verbs: ["list", "watch"]
  userGroups: ["system:serviceaccounts"]
  resources:
  - group: clusterset-dns.io
    resources: ["publishedservices"]
  - group: discovery.k8s.io
    resources: ["endpointslices"]
  - group: coordination.k8s.io
    resources: ["leases"]
- level: None
"#;

/// The audit flags of an apiserver logging to `log` with `policy`.
fn audit_flags(dir: &Path, name: &str, policy: &str) -> (Vec<String>, PathBuf) {
    let policy_file = dir.join(format!("{name}-audit-policy.yaml"));
    std::fs::write(&policy_file, policy).unwrap();
    let log = dir.join(format!("{name}-audit.log"));
    (
        vec![
            format!("--audit-log-path={}", log.display()),
            format!("--audit-policy-file={}", policy_file.display()),
        ],
        log,
    )
}

/// One audit event.
struct Audited {
    stage: String,
    verb: String,
    user: String,
    resource: String,
    namespace: String,
    received_ms: i64,
    code: Option<i64>,
}

/// The events of an audit log from byte `from` on.
fn read_audit(path: &Path, from: u64) -> Vec<Audited> {
    let bytes = std::fs::read(path).unwrap_or_default();
    let start = (from as usize).min(bytes.len());
    String::from_utf8_lossy(&bytes[start..])
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|e| Audited {
            stage: e["stage"].as_str().unwrap_or_default().to_owned(),
            verb: e["verb"].as_str().unwrap_or_default().to_owned(),
            user: e["user"]["username"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            resource: e["objectRef"]["resource"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            namespace: e["objectRef"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            received_ms: e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<Timestamp>().ok())
                .map_or(0, |t| t.as_millisecond()),
            code: e["responseStatus"]["code"].as_i64(),
        })
        .collect()
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

fn epoch_ms(at: SystemTime) -> i64 {
    Timestamp::try_from(at).map_or(0, |t| t.as_millisecond())
}

/// Requests received in an audit log from byte `from` on, by user.
fn requests_by_user(path: &Path, from: u64) -> BTreeMap<String, usize> {
    let mut by_user = BTreeMap::new();
    for event in read_audit(path, from) {
        if event.stage == "RequestReceived" {
            *by_user.entry(event.user).or_insert(0) += 1;
        }
    }
    by_user
}

// ---------------------------------------------------------------- helpers

/// Runs `clusterset-dns <args>` (the release build) without `KUBECONFIG`;
/// panics unless it succeeds.
fn cli(args: &[&str]) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_clusterset-dns"))
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("running clusterset-dns");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "clusterset-dns {args:?} failed:\n{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1000.0)
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "**missed**" }
}

/// A small deterministic generator (SplitMix64): churn targets and start
/// offsets, the same from run to run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// An IPv4 address `offset` after `base` (a.b.c.d as a number).
/// Where real member `r`'s endpoints are: `10.(32 + r).0.0/16`.
const REAL_ENDPOINTS: [u8; 4] = [10, 32, 0, 0];

/// The pod range `hub join` records for real member `r`.
fn real_endpoint_range(r: usize) -> String {
    format!("10.{}.0.0/16", usize::from(REAL_ENDPOINTS[1]) + r)
}

/// The pod ranges recorded for every simulated member: its exports', its
/// churn's and the latency samples' endpoints.
const SIM_ENDPOINT_RANGES: [&str; 3] = ["10.16.0.0/16", "10.64.0.0/16", "10.80.0.0/16"];

fn address(base: [u8; 4], offset: u32) -> String {
    std::net::Ipv4Addr::from(u32::from_be_bytes(base) + offset).to_string()
}

/// The Service `e` of a member: (namespace, name, headless); one in five
/// is headless, as in the controller bench.
fn service_of(prefix: &str, e: usize) -> (String, String, bool) {
    (
        format!("bench-{}", e % NAMESPACES),
        format!("{prefix}-{e}"),
        e % 5 == 4,
    )
}

fn service_spec(headless: bool) -> ServiceSpec {
    ServiceSpec {
        type_: Some("ClusterIP".into()),
        cluster_ip: headless.then(|| "None".to_owned()),
        ports: Some(vec![ServicePort {
            name: Some("http".into()),
            port: 80,
            protocol: Some("TCP".into()),
            ..ServicePort::default()
        }]),
        ip_families: Some(vec!["IPv4".into()]),
        ..ServiceSpec::default()
    }
}

/// A Kubernetes slice of `ns/name` holding `addresses`, ready, as the
/// in-tree controller labels its own.
fn source_slice(ns: &str, name: &str, addresses: &[String]) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!("{name}-src")),
            namespace: Some(ns.to_owned()),
            labels: Some(BTreeMap::from([
                ("kubernetes.io/service-name".to_owned(), name.to_owned()),
                (
                    LABEL_MANAGED_BY.to_owned(),
                    "endpointslice-controller.k8s.io".to_owned(),
                ),
            ])),
            ..ObjectMeta::default()
        },
        address_type: "IPv4".into(),
        endpoints: addresses
            .iter()
            .map(|a| Endpoint {
                addresses: vec![a.clone()],
                conditions: Some(EndpointConditions {
                    ready: Some(true),
                    ..EndpointConditions::default()
                }),
                ..Endpoint::default()
            })
            .collect(),
        ports: Some(vec![EndpointPort {
            name: Some("http".into()),
            port: Some(8080),
            protocol: Some("TCP".into()),
            ..EndpointPort::default()
        }]),
    }
}

/// Creates `object`, retrying a failure a few times; one that exists is
/// fine.
async fn create<K>(api: &Api<K>, object: &K)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    for attempt in 0..10u64 {
        match api.create(&PostParams::default(), object).await {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => return,
            Err(e) if attempt < 9 => {
                eprintln!("[bench] create failed (retrying): {e}");
                tokio::time::sleep(Duration::from_millis(200 * (attempt + 1))).await;
            }
            Err(e) => panic!("create: {e}"),
        }
    }
}

/// A real member's export `e`: Service, source slice, ServiceExport.
async fn export_real(client: &kube::Client, prefix: &str, e: usize, addresses: &[String]) {
    let (ns, name, headless) = service_of(prefix, e);
    let service = Service {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            ip_families: None,
            type_: None,
            ..service_spec(headless)
        }),
        ..Service::default()
    };
    create(&Api::namespaced(client.clone(), &ns), &service).await;
    create(
        &Api::namespaced(client.clone(), &ns),
        &source_slice(&ns, &name, addresses),
    )
    .await;
    let export = ServiceExport::new(&name, ServiceExportSpec::default());
    create(&Api::namespaced(client.clone(), &ns), &export).await;
}

/// The namespaces the exports live in, in a member.
async fn create_namespaces(client: &kube::Client) {
    for n in 0..NAMESPACES {
        create(
            &Api::<Namespace>::all(client.clone()),
            &support::object(json!({"metadata": {"name": format!("bench-{n}")}})),
        )
        .await;
    }
}

// ---------------------------------------------------------------- what the real members hold

/// What the bench's watches of one real member have seen.
#[derive(Default)]
struct View {
    /// Each ServiceImport (`ns/name`) and whether it is complete.
    imports: HashMap<String, bool>,
    /// When each ServiceImport was first complete.
    first_complete: HashMap<String, Instant>,
    /// Imported slices holding endpoints.
    slices: HashSet<String>,
    /// Addresses waited for, and when an imported slice first held each.
    wanted: HashMap<String, Option<Instant>>,
    /// Complete imports that went away or turned incomplete.
    import_losses: u64,
    /// Imported slices that went away or lost every endpoint.
    slice_losses: u64,
}

type Shared = Arc<Mutex<View>>;

fn key(meta: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

/// Complete: status names a cluster, and a ClusterSetIP import has its IP.
fn import_complete(import: &ServiceImport) -> bool {
    import
        .status
        .as_ref()
        .is_some_and(|s| !s.clusters.is_empty())
        && (import.spec.type_ == ServiceImportType::Headless || !import.spec.ips.is_empty())
}

/// Starts the bench's two watches of a real member (its ServiceImports
/// and imported slices) into a new [`View`]; their tasks go to `tasks`
/// (aborted at the end of the phase).
fn watch_member(
    client: &kube::Client,
    rt: &tokio::runtime::Runtime,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Shared {
    let view = Shared::default();
    let imports: Api<ServiceImport> = Api::all(client.clone());
    let shared = view.clone();
    tasks.push(rt.spawn(async move {
        let mut events = std::pin::pin!(watcher::watcher(imports, watcher::Config::default()));
        while let Some(event) = events.next().await {
            let now = Instant::now();
            let mut v = shared.lock().unwrap();
            match event {
                Ok(Event::Apply(o) | Event::InitApply(o)) => {
                    let k = key(&o.metadata);
                    let complete = import_complete(&o);
                    if complete {
                        v.first_complete.entry(k.clone()).or_insert(now);
                    }
                    if v.imports.insert(k, complete) == Some(true) && !complete {
                        v.import_losses += 1;
                    }
                }
                Ok(Event::Delete(o)) => {
                    if v.imports.remove(&key(&o.metadata)) == Some(true) {
                        v.import_losses += 1;
                    }
                }
                Ok(_) => {}
                Err(e) => eprintln!("[bench] import watch: {e}"),
            }
        }
    }));
    let slices: Api<EndpointSlice> = Api::all(client.clone());
    let shared = view.clone();
    tasks.push(rt.spawn(async move {
        let config = watcher::Config::default().labels(MCS_MANAGED);
        let mut events = std::pin::pin!(watcher::watcher(slices, config));
        while let Some(event) = events.next().await {
            let now = Instant::now();
            let mut v = shared.lock().unwrap();
            match event {
                Ok(Event::Apply(o) | Event::InitApply(o)) => {
                    let k = key(&o.metadata);
                    if o.endpoints.is_empty() {
                        if v.slices.remove(&k) {
                            v.slice_losses += 1;
                        }
                    } else {
                        v.slices.insert(k);
                    }
                    for address in o.endpoints.iter().flat_map(|e| e.addresses.iter()) {
                        if let Some(seen @ None) = v.wanted.get_mut(address) {
                            *seen = Some(now);
                        }
                    }
                }
                Ok(Event::Delete(o)) => {
                    if v.slices.remove(&key(&o.metadata)) {
                        v.slice_losses += 1;
                    }
                }
                Ok(_) => {}
                Err(e) => eprintln!("[bench] slice watch: {e}"),
            }
        }
    }));
    view
}

/// (complete imports, imported slices) of each view.
fn counts(views: &[Shared]) -> Vec<(usize, usize)> {
    views
        .iter()
        .map(|v| {
            let v = v.lock().unwrap();
            (v.imports.values().filter(|c| **c).count(), v.slices.len())
        })
        .collect()
}

/// Waits until every view holds `want` complete imports and slices.
fn wait_converged(
    views: &[Shared],
    want: usize,
    timeout: Duration,
    controllers: &[ControllerProcess],
) -> Duration {
    let start = Instant::now();
    let mut last_print = Instant::now();
    loop {
        for c in controllers {
            c.assert_running();
        }
        let now = counts(views);
        if now.iter().all(|(i, s)| *i >= want && *s >= want) {
            return start.elapsed();
        }
        if last_print.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "[bench] {:.0} s: (imports, slices) per member {now:?}, want {want}",
                start.elapsed().as_secs_f64()
            );
            last_print = Instant::now();
        }
        assert!(
            start.elapsed() < timeout,
            "not converged in {timeout:?}: (imports, slices) {now:?}, want {want}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits (at most `timeout`) until `done` holds for every view; returns
/// each view's instant, `None` for one that timed out.
fn wait_each(
    views: &[Shared],
    timeout: Duration,
    done: impl Fn(&View) -> Option<Instant>,
) -> Vec<Option<Instant>> {
    let deadline = Instant::now() + timeout;
    loop {
        let seen: Vec<Option<Instant>> = views.iter().map(|v| done(&v.lock().unwrap())).collect();
        if seen.iter().all(Option::is_some) || Instant::now() >= deadline {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------- real members

/// A hub (optional) and `n` apiserver-only members with the controller's
/// prerequisites, each member's apiserver auditing requests from others.
struct Plane {
    /// The hub is `plane.clusters[0]`, the members follow.
    plane: ControlPlane,
    /// The members' cluster ids.
    ids: Vec<String>,
    /// Admin clients of the members.
    members: Vec<kube::Client>,
    /// The controllers' kubeconfigs.
    kubeconfigs: Vec<PathBuf>,
    /// The members' audit logs.
    audits: Vec<PathBuf>,
    /// The running controllers.
    controllers: Vec<ControllerProcess>,
}

impl Plane {
    /// A hub and `n` members named `<prefix>-<i>`.
    fn start(rt: &tokio::runtime::Runtime, n: usize, prefix: &str) -> Self {
        let hub_spec = ClusterSpec {
            crds: false,
            nodes: 0,
            ..ClusterSpec::member(0)
        };
        let mut specs = vec![hub_spec];
        for i in 1..=n {
            // A /16 each: every ClusterSetIP import takes an IP.
            specs.push(ClusterSpec {
                service_cidrs: vec![format!("10.{}.0.0/16", 100 + i)],
                ..ClusterSpec::api_only()
            });
        }
        let mut plane = rt.block_on(ControlPlane::start_with(&specs));
        let mut audits = Vec::new();
        for i in 1..=n {
            let dir = plane.clusters[i].dir.clone();
            let (flags, log) = audit_flags(&dir, "member", MEMBER_AUDIT_POLICY);
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            plane.apiservers[i].stop();
            plane.apiservers[i].start_with(&flags);
            audits.push(log);
        }
        let ids: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
        let mut members = Vec::new();
        let mut kubeconfigs = Vec::new();
        rt.block_on(async {
            for (i, id) in ids.iter().enumerate() {
                let cluster = &plane.clusters[i + 1];
                let client = cluster.admin_client().await;
                kubeconfigs.push(controlplane::install_controller(cluster).await);
                controlplane::set_cluster_properties(&client, id, "bench-hub").await;
                create_namespaces(&client).await;
                members.push(client);
            }
        });
        Self {
            plane,
            ids,
            members,
            kubeconfigs,
            audits,
            controllers: Vec::new(),
        }
    }

    fn hub_cluster(&self) -> &Cluster {
        &self.plane.clusters[0]
    }

    fn member_cluster(&self, i: usize) -> &Cluster {
        &self.plane.clusters[i + 1]
    }

    fn hub_kubeconfig(&self) -> String {
        self.hub_cluster().admin_kubeconfig.display().to_string()
    }

    /// `hub init`, then `hub join` of every member, each with the range
    /// its endpoints are in ([`REAL_ENDPOINTS`]).
    fn join_all(&self) {
        cli(&["hub", "init", "--kubeconfig", &self.hub_kubeconfig()]);
        for i in 0..self.ids.len() {
            let member = self
                .member_cluster(i)
                .admin_kubeconfig
                .display()
                .to_string();
            cli(&[
                "hub",
                "join",
                "--kubeconfig",
                &self.hub_kubeconfig(),
                "--member-kubeconfig",
                &member,
                "--endpoint-cidr",
                &real_endpoint_range(i),
            ]);
        }
    }

    /// Starts every member's controller (release build) and waits until
    /// each is ready (at most `timeout`: a controller is ready once it has
    /// read every member, which takes longer the more there are).
    fn spawn_controllers(&mut self, timeout: Duration) {
        for i in 0..self.ids.len() {
            let c =
                controlplane::spawn_controller(self.member_cluster(i), &self.kubeconfigs[i], &[]);
            self.controllers.push(c);
        }
        for c in &self.controllers {
            c.wait_ready(timeout);
        }
    }

    /// Stops every controller, keeping its log.
    fn stop_controllers(&mut self, logs: &Path, label: &str) {
        for (i, c) in self.controllers.drain(..).enumerate() {
            let _ = std::fs::copy(
                c.log_path(),
                logs.join(format!("controller-{label}-{}.log", self.ids[i])),
            );
            drop(c);
        }
    }

    /// The members' apiserver ports, in order.
    fn member_ports(&self) -> Vec<u16> {
        (0..self.ids.len())
            .map(|i| controlplane::port_of(&self.plane.apiservers[i + 1].url))
            .collect()
    }

    fn hub_port(&self) -> u16 {
        controlplane::port_of(&self.plane.apiservers[0].url)
    }
}

/// One controller's connections: (to its own apiserver, to other members'
/// apiservers, to the hub, elsewhere).
fn split_connections(
    pid: u32,
    own: u16,
    members: &[u16],
    hub: u16,
) -> (usize, usize, usize, usize) {
    let mut split = (0, 0, 0, 0);
    for (port, n) in controlplane::established_connections(pid) {
        if port == own {
            split.0 += n;
        } else if port == hub {
            split.2 += n;
        } else if members.contains(&port) {
            split.1 += n;
        } else {
            split.3 += n;
        }
    }
    split
}

// ---------------------------------------------------------------- simulated members

/// Counts of what the simulated members did.
#[derive(Default)]
struct Counters {
    watch_events: AtomicU64,
    watch_errors: AtomicU64,
    lease_writes: AtomicU64,
    lease_failures: AtomicU64,
    churn_writes: AtomicU64,
    churn_failures: AtomicU64,
}

/// One simulated member.
struct Sim {
    index: usize,
    id: String,
    namespace: String,
    client: kube::Client,
    /// The addresses of each export's slice; held across a write, so that
    /// the churn and a latency sample never reorder two writes of one
    /// slice.
    addresses: tokio::sync::Mutex<Vec<Vec<String>>>,
}

/// Server-side apply of `object` as a member's controller applies it.
async fn member_apply<K>(api: &Api<K>, object: &K) -> kube::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(MEMBER_FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map(|_| ())
}

impl Sim {
    fn prefix(&self) -> String {
        format!("s{}", self.index)
    }

    /// Publishes export `ns/name` holding `addresses`, as the controller
    /// copies one to the hub: its slice, then its PublishedService.
    async fn publish(
        &self,
        ns: &str,
        name: &str,
        headless: bool,
        addresses: &[String],
    ) -> kube::Result<()> {
        self.publish_slice(ns, name, addresses).await?;
        let service = ServiceRef::new(ns, name);
        let mut export = ServiceExport::new(name, ServiceExportSpec::default());
        export.metadata.namespace = Some(ns.to_owned());
        export.metadata.creation_timestamp = Some(Time(Timestamp::now()));
        let published = published_service(
            &self.namespace,
            &service,
            &self.id,
            &export,
            &service_spec(headless),
        );
        member_apply(
            &Api::namespaced(self.client.clone(), &self.namespace),
            &published,
        )
        .await
    }

    /// Writes the published slice of `ns/name` holding `addresses`.
    async fn publish_slice(&self, ns: &str, name: &str, addresses: &[String]) -> kube::Result<()> {
        let service = ServiceRef::new(ns, name);
        let slice = published_slice(
            &self.namespace,
            &service,
            &self.id,
            &source_slice(ns, name, addresses),
        )
        .expect("an IPv4 slice is published");
        member_apply(
            &Api::namespaced(self.client.clone(), &self.namespace),
            &slice,
        )
        .await
    }

    /// Writes its Lease and every export, retrying each a few times (the
    /// quota may not be counted yet); returns the failures left.
    async fn publish_all(&self) -> usize {
        let addresses = self.addresses.lock().await;
        let mut failed = 0;
        // Its Lease first, as a controller's publisher renews it from its
        // start: a member with a publication and no Lease reads as down.
        let lease = member_lease(&self.namespace, &self.id, SystemTime::now());
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        for attempt in 0..20u64 {
            match member_apply(&leases, &lease).await {
                Ok(()) => break,
                Err(error) if attempt == 19 => {
                    eprintln!("[bench] {}: its Lease: {error}", self.id);
                    failed += 1;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
        for (e, addrs) in addresses.iter().enumerate() {
            let (ns, name, headless) = service_of(&self.prefix(), e);
            let mut ok = false;
            for attempt in 0..20u64 {
                match self.publish(&ns, &name, headless, addrs).await {
                    Ok(()) => {
                        ok = true;
                        break;
                    }
                    Err(error) => {
                        if attempt == 19 {
                            eprintln!("[bench] {}: publishing {ns}/{name}: {error}", self.id);
                        }
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            }
            failed += usize::from(!ok);
        }
        failed
    }

    /// Changes endpoint `j` of export `e` to `to`, and writes its slice.
    async fn change_endpoint(&self, e: usize, j: usize, to: String) -> kube::Result<()> {
        let mut addresses = self.addresses.lock().await;
        addresses[e][j] = to;
        let (ns, name, _) = service_of(&self.prefix(), e);
        self.publish_slice(&ns, &name, &addresses[e]).await
    }
}

/// Makes member `index` on the hub: its objects, a token of its own, a
/// client of its own.
async fn join_sim(
    hub: &kube::Client,
    template: &Value,
    index: usize,
    exports: usize,
    endpoints: usize,
) -> Sim {
    let id = format!("sim-{index}");
    let namespace = member_namespace(&id).unwrap();
    let params = PatchParams::apply("bench-hub").force();
    let ranges: Vec<clusterset_dns::cidr::Cidr> = SIM_ENDPOINT_RANGES
        .iter()
        .map(|r| r.parse().unwrap())
        .collect();
    for object in member_objects(&id, Some(&ranges), MemberQuota::default()).unwrap() {
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        let patch = Patch::Apply(&object);
        let result = match object["kind"].as_str().unwrap() {
            "Namespace" => Api::<Namespace>::all(hub.clone())
                .patch(&name, &params, &patch)
                .await
                .map(|_| ()),
            "ServiceAccount" => Api::<ServiceAccount>::namespaced(hub.clone(), &namespace)
                .patch(&name, &params, &patch)
                .await
                .map(|_| ()),
            "RoleBinding" => Api::<RoleBinding>::namespaced(hub.clone(), &namespace)
                .patch(&name, &params, &patch)
                .await
                .map(|_| ()),
            "ClusterRoleBinding" => Api::<ClusterRoleBinding>::all(hub.clone())
                .patch(&name, &params, &patch)
                .await
                .map(|_| ()),
            "ResourceQuota" => Api::<ResourceQuota>::namespaced(hub.clone(), &namespace)
                .patch(&name, &params, &patch)
                .await
                .map(|_| ()),
            "ConfigMap" => Api::<ConfigMap>::namespaced(hub.clone(), &namespace)
                .patch(&name, &params, &patch)
                .await
                .map(|_| ()),
            other => panic!("member_objects holds a {other}, which the bench does not apply"),
        };
        result.unwrap_or_else(|e| panic!("{id}: applying {name}: {e}"));
    }
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(4 * 3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(hub.clone(), &namespace)
        .create_token_request(MEMBER_SERVICE_ACCOUNT, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("{id}: TokenRequest: {e}"))
        .status
        .expect("a TokenRequest's status")
        .token;
    let mut kubeconfig = template.clone();
    kubeconfig["users"][0]["user"]["token"] = json!(token);
    // As a member's controller reaches the hub: the same kubeconfig
    // reading and HTTP/2 stack (`peering::kubeconfig::client`).
    let (client, _) =
        clusterset_dns::peering::kubeconfig::client(kubeconfig.to_string().as_bytes())
            .await
            .unwrap_or_else(|e| panic!("{id}: the hub kubeconfig: {e}"));
    let addresses = (0..exports)
        .map(|e| {
            (0..endpoints)
                .map(|j| {
                    address(
                        [10, 16, 0, 0],
                        ((index * exports + e) * endpoints + j) as u32,
                    )
                })
                .collect()
        })
        .collect();
    Sim {
        index,
        id,
        namespace,
        client,
        addresses: tokio::sync::Mutex::new(addresses),
    }
}

/// Drains one watch, counting what it delivers.
async fn drain<T>(
    events: impl Stream<Item = Result<Event<T>, watcher::Error>>,
    counters: Arc<Counters>,
) {
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Apply(_) | Event::InitApply(_) | Event::Delete(_)) => {
                counters.watch_events.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(_) => {
                counters.watch_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Renews a member's Lease every `LEASE_RENEW`, from a random point of
/// the period on, as its controller does from its start, until `stop`
/// (or aborted).
fn renew_lease(
    sim: Arc<Sim>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let mut rng = Rng(sim.index as u64 * 104_729 + 7);
    let offset = Duration::from_millis(rng.below(LEASE_RENEW.as_millis() as u64));
    tokio::spawn(async move {
        tokio::time::sleep(offset).await;
        let api: Api<Lease> = Api::namespaced(sim.client.clone(), &sim.namespace);
        let mut tick = tokio::time::interval(LEASE_RENEW);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            let lease = member_lease(&sim.namespace, &sim.id, SystemTime::now());
            let counter = match member_apply(&api, &lease).await {
                Ok(()) => &counters.lease_writes,
                Err(_) => &counters.lease_failures,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    })
}

/// Starts what a member's controller keeps doing on the hub besides its
/// Lease, after `delay`: its six watches and (every `churn`, when not
/// zero) one endpoint change. The loops end with `stop` (or when
/// aborted).
fn run_sim(
    sim: Arc<Sim>,
    delay: Duration,
    churn: Duration,
    endpoints: usize,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    churn_addresses: Arc<AtomicU32>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let client = sim.client.clone();
    let hub_page = watcher::Config::default().page_size(HUB_PAGE);
    let own_page = watcher::Config::default().page_size(OWN_PAGE);
    let services = format!("{LABEL_APP_MANAGED_BY}={MANAGED_BY}");
    let slices = format!("{LABEL_MANAGED_BY}={PUBLISHED_BY}");
    let mut tasks = Vec::new();
    // The reader's four hub-wide watches.
    let w1 = clusterset_dns::watch::stream_spread(
        Api::<Lean<PublishedService>>::all(client.clone()),
        hub_page.clone().labels(&services),
    );
    let w2 = clusterset_dns::watch::stream_spread(
        Api::<Lean<EndpointSlice>>::all(client.clone()),
        hub_page.clone().labels(&slices),
    );
    let w3 = clusterset_dns::watch::stream_spread(
        Api::<Lease>::all(client.clone()),
        hub_page
            .clone()
            .fields(&format!("metadata.name={MEMBER_LEASE}")),
    );
    let w6 = clusterset_dns::watch::stream_spread(
        Api::<ConfigMap>::all(client.clone()),
        hub_page.fields(&format!("metadata.name={MEMBER_RECORD}")),
    );
    // The publisher's two watches of its own namespace.
    let w4 = clusterset_dns::watch::stream_spread(
        Api::<Lean<PublishedService>>::namespaced(client.clone(), &sim.namespace),
        own_page.clone().labels(&services),
    );
    let w5 = clusterset_dns::watch::stream_spread(
        Api::<Lean<EndpointSlice>>::namespaced(client.clone(), &sim.namespace),
        own_page.labels(&slices),
    );
    let later = move |c: Arc<Counters>| async move {
        tokio::time::sleep(delay).await;
        c
    };
    let c = counters.clone();
    tasks.push(tokio::spawn(async move { drain(w1, later(c).await).await }));
    let c = counters.clone();
    tasks.push(tokio::spawn(async move { drain(w2, later(c).await).await }));
    let c = counters.clone();
    tasks.push(tokio::spawn(async move { drain(w3, later(c).await).await }));
    let c = counters.clone();
    tasks.push(tokio::spawn(async move { drain(w4, later(c).await).await }));
    let c = counters.clone();
    tasks.push(tokio::spawn(async move { drain(w5, later(c).await).await }));
    let c = counters.clone();
    tasks.push(tokio::spawn(async move { drain(w6, later(c).await).await }));
    let mut rng = Rng(sim.index as u64 * 7919 + 1);
    if !churn.is_zero() {
        let churn_offset = Duration::from_millis(rng.below(churn.as_millis() as u64));
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(delay + churn_offset).await;
            let mut tick = tokio::time::interval(churn);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let exports = sim.addresses.lock().await.len();
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let e = rng.below(exports as u64) as usize;
                let j = rng.below(endpoints as u64) as usize;
                let to = address(
                    [10, 64, 0, 0],
                    churn_addresses.fetch_add(1, Ordering::Relaxed),
                );
                let counter = match sim.change_endpoint(e, j, to).await {
                    Ok(()) => &counters.churn_writes,
                    Err(_) => &counters.churn_failures,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    tasks
}

/// Waits until the hub's quota controller has counted every member
/// namespace's quota (until then the hub refuses what it covers).
async fn wait_quotas(hub: &kube::Client, members: usize) {
    let api: Api<ResourceQuota> = Api::all(hub.clone());
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let counted = api
            .list(&ListParams::default().fields(&format!("metadata.name={QUOTA}")))
            .await
            .map(|list| {
                list.items
                    .iter()
                    .filter(|q| {
                        q.status
                            .as_ref()
                            .and_then(|s| s.hard.as_ref())
                            .is_some_and(|h| {
                                h.contains_key("count/publishedservices.clusterset-dns.io")
                            })
                    })
                    .count()
            })
            .unwrap_or(0);
        if counted >= members {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{counted} of {members} quotas counted in 300 s"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

// ---------------------------------------------------------------- reconnection

/// When the members came back to the hub after its restart, from its
/// audit log: per watch (member, resource, namespace), its first request
/// (list or watch) and its first list, in ms after the restart began.
struct Reconnection {
    first: BTreeMap<(String, String, String), i64>,
    first_list: BTreeMap<(String, String, String), i64>,
    /// Members (users) seen.
    users: BTreeSet<String>,
    /// The real members' users.
    real: Vec<String>,
    /// Requests received, by second after the restart.
    per_second: BTreeMap<i64, usize>,
    /// Answers, by status code.
    codes: BTreeMap<i64, usize>,
}

fn reconnection(log: &Path, restart_ms: i64, real_ids: &[String]) -> Reconnection {
    let mut back = Reconnection {
        first: BTreeMap::new(),
        first_list: BTreeMap::new(),
        users: BTreeSet::new(),
        real: real_ids
            .iter()
            .map(|id| clusterset_dns::hub::member_user(id))
            .collect(),
        per_second: BTreeMap::new(),
        codes: BTreeMap::new(),
    };
    for event in read_audit(log, 0) {
        if !event.user.starts_with("system:serviceaccount:member-") {
            continue;
        }
        if event.stage == "ResponseComplete" {
            *back.codes.entry(event.code.unwrap_or(0)).or_insert(0) += 1;
            continue;
        }
        let at = event.received_ms - restart_ms;
        *back.per_second.entry(at.div_euclid(1000)).or_insert(0) += 1;
        back.users.insert(event.user.clone());
        let watch = (event.user, event.resource, event.namespace);
        if event.verb == "list" {
            back.first_list.entry(watch.clone()).or_insert(at);
        }
        back.first.entry(watch).or_insert(at);
    }
    back
}

fn sorted_offsets<'a>(values: impl Iterator<Item = &'a i64>) -> Vec<Duration> {
    let mut offsets: Vec<Duration> = values
        .map(|ms| Duration::from_millis((*ms).max(0) as u64))
        .collect();
    offsets.sort();
    offsets
}

impl Reconnection {
    /// From the first watch back to the last.
    fn spread(&self) -> Duration {
        let offsets = sorted_offsets(self.first.values());
        match (offsets.first(), offsets.last()) {
            (Some(first), Some(last)) => *last - *first,
            _ => Duration::ZERO,
        }
    }

    fn describe(&self, members: usize) -> String {
        let secs = |d: Duration| format!("{:.1}", d.as_secs_f64());
        let all = sorted_offsets(self.first.values());
        let lists = sorted_offsets(self.first_list.values());
        let real: Vec<Duration> = sorted_offsets(
            self.first
                .iter()
                .filter(|((user, _, _), _)| self.real.contains(user))
                .map(|(_, at)| at),
        );
        let buckets: Vec<String> = (0..=(all.last().map_or(0, |d| d.as_secs() / 5)))
            .map(|b| {
                all.iter()
                    .filter(|d| d.as_secs() / 5 == b)
                    .count()
                    .to_string()
            })
            .collect();
        format!(
            "Reconnection (the hub's audit log: each watch's first list or watch after the restart began): {} watches of {} of {members} members came back; first at {} s, p50 {} s, p90 {} s, last at {} s (spread {} s); per 5 s from the restart: {}. Relists: {} watches listed again, p50 {} s, last {} s. The real members' {} watches came back from {} s to {} s. At most {} lists and watches in one second. Answers by code: {:?}.",
            all.len(),
            self.users.len(),
            secs(all.first().copied().unwrap_or_default()),
            secs(percentile(&all, 50.0)),
            secs(percentile(&all, 90.0)),
            secs(all.last().copied().unwrap_or_default()),
            secs(self.spread()),
            buckets.join(" / "),
            lists.len(),
            secs(percentile(&lists, 50.0)),
            secs(lists.last().copied().unwrap_or_default()),
            real.len(),
            secs(real.first().copied().unwrap_or_default()),
            secs(real.last().copied().unwrap_or_default()),
            self.per_second.values().copied().max().unwrap_or(0),
            self.codes,
        )
    }
}

// ---------------------------------------------------------------- phase: sim

fn phase_sim(s: &Settings, rt: &tokio::runtime::Runtime, out: &mut String) {
    let real = 3;
    let k = s.k;
    let (e_count, n_endpoints) = (s.exports, s.endpoints);
    let t = Instant::now();
    let mut p = Plane::start(rt, real, "real");
    p.join_all();
    let hub = rt.block_on(p.hub_cluster().admin_client());
    eprintln!(
        "[bench] hub and {real} members joined in {:.0} s",
        t.elapsed().as_secs_f64()
    );

    // The real members' own exports.
    rt.block_on(async {
        for (r, client) in p.members.iter().enumerate() {
            for e in 0..e_count {
                let addrs: Vec<String> = (0..n_endpoints)
                    .map(|j| address(REAL_ENDPOINTS, (r * 65_536 + e * n_endpoints + j) as u32))
                    .collect();
                export_real(client, &format!("r{r}"), e, &addrs).await;
            }
        }
    });

    // The simulated members: objects, tokens, clients.
    let t = Instant::now();
    let sims: Vec<Arc<Sim>> = rt.block_on(async {
        // The kubeconfig every member's is made from (the hub's URL and
        // CA), from a first member's ServiceAccount.
        let first = join_sim_template(&p, &hub).await;
        futures::stream::iter(0..k)
            .map(|m| {
                let hub = hub.clone();
                let first = first.clone();
                async move { Arc::new(join_sim(&hub, &first, m, e_count, n_endpoints).await) }
            })
            .buffered(s.concurrency)
            .collect()
            .await
    });
    rt.block_on(wait_quotas(&hub, k + real));
    let joined = t.elapsed();
    eprintln!(
        "[bench] {k} simulated members joined in {:.0} s",
        joined.as_secs_f64()
    );

    // Their publications.
    let t = Instant::now();
    let failed: usize = rt
        .block_on(
            futures::stream::iter(sims.clone())
                .map(|sim| async move { sim.publish_all().await })
                .buffer_unordered(s.concurrency)
                .collect::<Vec<usize>>(),
        )
        .iter()
        .sum();
    let published = t.elapsed();
    // From here on each member renews its Lease, as its controller would.
    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    {
        let _guard = rt.enter();
        for sim in &sims {
            tasks.push(renew_lease(sim.clone(), counters.clone(), stop.clone()));
        }
    }
    let hub_writes = k * e_count * 2;
    eprintln!(
        "[bench] {hub_writes} publication writes of the simulated members in {:.0} s ({failed} failed)",
        published.as_secs_f64()
    );

    // The real members: their views, then their controllers.
    let mut view_tasks = Vec::new();
    let views: Vec<Shared> = p
        .members
        .iter()
        .map(|c| watch_member(c, rt, &mut view_tasks))
        .collect();
    let watches_before = apiserver_watches(&p.plane.apiservers[0].url);
    let t = Instant::now();
    p.spawn_controllers(Duration::from_secs(s.converge_timeout));
    let want = (k + real) * e_count;
    wait_converged(
        &views,
        want,
        Duration::from_secs(s.converge_timeout),
        &p.controllers,
    );
    let cold = t.elapsed();
    eprintln!(
        "[bench] every real member imports {want} services {:.0} s after its controller started",
        cold.as_secs_f64()
    );

    // The simulated members read and churn.
    let churn_addresses = Arc::new(AtomicU32::new(0));
    {
        let _guard = rt.enter();
        for sim in &sims {
            let delay =
                Duration::from_millis(s.watch_ramp * 1000 * sim.index as u64 / k.max(1) as u64);
            tasks.extend(run_sim(
                sim.clone(),
                delay,
                Duration::from_millis(s.churn_ms),
                n_endpoints,
                counters.clone(),
                stop.clone(),
                churn_addresses.clone(),
            ));
        }
    }
    std::thread::sleep(Duration::from_secs(s.watch_ramp + 20));
    let watches_hub = match (
        apiserver_watches(&p.plane.apiservers[0].url),
        watches_before,
    ) {
        (Some(after), Some(before)) => (after - before).to_string(),
        _ => "(not read: the hub did not answer /metrics)".to_owned(),
    };

    // Steady window.
    let hub_pid = p.plane.apiservers[0].pid().expect("the hub runs");
    let etcd_pid = p.plane.etcd_pid();
    let mut pids = vec![
        ("hub apiserver".to_owned(), hub_pid),
        ("etcd".to_owned(), etcd_pid),
        ("simulator (this process)".to_owned(), std::process::id()),
    ];
    for (i, c) in p.controllers.iter().enumerate() {
        pids.push((format!("controller {}", p.ids[i]), c.pid()));
    }
    for i in 0..real {
        pids.push((
            format!("apiserver {}", p.ids[i]),
            p.plane.apiservers[i + 1].pid().unwrap(),
        ));
    }
    let audit_from: Vec<u64> = p.audits.iter().map(|a| file_len(a)).collect();
    let events_before = counters.watch_events.load(Ordering::Relaxed);
    let churn_before = counters.churn_writes.load(Ordering::Relaxed);
    let lease_before = counters.lease_writes.load(Ordering::Relaxed);
    let window = CpuWindow::start(&pids);
    std::thread::sleep(Duration::from_secs(s.idle));
    let (cores, busy) = window.end();
    let wall = window.start.elapsed().as_secs_f64();
    let events_rate = (counters.watch_events.load(Ordering::Relaxed) - events_before) as f64 / wall;
    let churn_rate = (counters.churn_writes.load(Ordering::Relaxed) - churn_before) as f64 / wall;
    let lease_rate = (counters.lease_writes.load(Ordering::Relaxed) - lease_before) as f64 / wall;
    let from_others: Vec<BTreeMap<String, usize>> = p
        .audits
        .iter()
        .zip(&audit_from)
        .map(|(a, from)| requests_by_user(a, *from))
        .collect();
    let hub_mem = memory_mib(hub_pid);
    let etcd_mem = memory_mib(etcd_pid);
    let member_ports = p.member_ports();
    let conns: Vec<(usize, usize, usize, usize)> = p
        .controllers
        .iter()
        .enumerate()
        .map(|(i, c)| split_connections(c.pid(), member_ports[i], &member_ports, p.hub_port()))
        .collect();
    let sim_conns = controlplane::established_connections(std::process::id())
        .get(&p.hub_port())
        .copied()
        .unwrap_or(0);
    let controller_mem: Vec<(f64, f64)> =
        p.controllers.iter().map(|c| memory_mib(c.pid())).collect();
    eprintln!("[bench] steady: cores {cores:?}, busy {busy:.0} %, connections {conns:?}");

    // Latency: export → ServiceImport, endpoint change → imported slice.
    let mut export_samples = Vec::new();
    let mut export_timeouts = 0;
    let mut change_samples = Vec::new();
    let mut change_timeouts = 0;
    let mut refused_writes = 0;
    let probes = AtomicU32::new(0);
    for i in 0..s.samples {
        let sim = &sims[i % k];
        let name = format!("lat-{i}");
        let addrs: Vec<String> = (0..n_endpoints)
            .map(|_| address([10, 80, 0, 0], probes.fetch_add(1, Ordering::Relaxed)))
            .collect();
        let t0 = Instant::now();
        // A hub that refuses or times out the write is a sample lost:
        // counted, not fatal (at 1,000 members on this machine it did).
        if let Err(e) = rt.block_on(sim.publish("bench-0", &name, false, &addrs)) {
            eprintln!("[bench] {}: publishing {name}: {e}", sim.id);
            refused_writes += 1;
        }
        let wanted = format!("bench-0/{name}");
        for seen in wait_each(&views, Duration::from_secs(60), |v| {
            v.first_complete.get(&wanted).copied()
        }) {
            match seen {
                Some(at) => export_samples.push(at.duration_since(t0)),
                None => export_timeouts += 1,
            }
        }
        let sim = &sims[(i * 7 + 1) % k];
        let to = address([10, 80, 0, 0], probes.fetch_add(1, Ordering::Relaxed));
        for v in &views {
            v.lock().unwrap().wanted.insert(to.clone(), None);
        }
        let t0 = Instant::now();
        if let Err(e) = rt.block_on(sim.change_endpoint(0, 0, to.clone())) {
            eprintln!("[bench] {}: changing an endpoint: {e}", sim.id);
            refused_writes += 1;
        }
        for seen in wait_each(&views, Duration::from_secs(60), |v| {
            v.wanted.get(&to).copied().flatten()
        }) {
            match seen {
                Some(at) => change_samples.push(at.duration_since(t0)),
                None => change_timeouts += 1,
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    export_samples.sort();
    change_samples.sort();
    eprintln!(
        "[bench] export → import p50 {:?} p99 {:?}; endpoint → slice p50 {:?} p99 {:?}",
        percentile(&export_samples, 50.0),
        percentile(&export_samples, 99.0),
        percentile(&change_samples, 50.0),
        percentile(&change_samples, 99.0)
    );

    // Hub outage.
    let before_outage = counts(&views);
    let losses_before: Vec<(u64, u64)> = views
        .iter()
        .map(|v| {
            let v = v.lock().unwrap();
            (v.import_losses, v.slice_losses)
        })
        .collect();
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let views = views.clone();
        let sampling = sampling.clone();
        std::thread::spawn(move || {
            let mut least = counts(&views);
            let mut samples = 0;
            while sampling.load(Ordering::Relaxed) {
                for (l, now) in least.iter_mut().zip(counts(&views)) {
                    l.0 = l.0.min(now.0);
                    l.1 = l.1.min(now.1);
                }
                samples += 1;
                std::thread::sleep(Duration::from_millis(500));
            }
            (least, samples)
        })
    };
    eprintln!("[bench] hub down for {} s", s.outage);
    p.plane.apiservers[0].stop();
    std::thread::sleep(Duration::from_secs(s.outage));
    let (flags, hub_audit) = audit_flags(p.plane.dir(), "hub", HUB_AUDIT_POLICY);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let restarted_at = SystemTime::now();
    let restarted = Instant::now();
    p.plane.apiservers[0].start_with(&flags);
    let ready_after = restarted.elapsed();
    let hub_pid = p.plane.apiservers[0].pid().expect("the hub runs again");
    let after_window = CpuWindow::start(&[
        ("hub apiserver".to_owned(), hub_pid),
        ("etcd".to_owned(), etcd_pid),
    ]);
    // A change made as soon as the hub answers.
    let addrs: Vec<String> = (0..n_endpoints)
        .map(|_| address([10, 80, 0, 0], probes.fetch_add(1, Ordering::Relaxed)))
        .collect();
    let t0 = Instant::now();
    let mut first_write = None;
    for _ in 0..60 {
        if rt
            .block_on(sims[0].publish("bench-0", "after-outage", false, &addrs))
            .is_ok()
        {
            first_write = Some(t0.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let resumed: Vec<Option<Duration>> = wait_each(
        &views,
        Duration::from_secs(s.after_outage.max(60) + 60),
        |v| v.first_complete.get("bench-0/after-outage").copied(),
    )
    .into_iter()
    .map(|at| at.map(|at| at.duration_since(t0)))
    .collect();
    let observed = restarted.elapsed();
    if observed < Duration::from_secs(s.after_outage) {
        std::thread::sleep(Duration::from_secs(s.after_outage) - observed);
    }
    let (after_cores, _) = after_window.end();
    let hub_mem_after = memory_mib(hub_pid);
    sampling.store(false, Ordering::Relaxed);
    let (least, sampled) = sampler.join().unwrap();
    let losses: Vec<(u64, u64)> = views
        .iter()
        .zip(&losses_before)
        .map(|(v, before)| {
            let v = v.lock().unwrap();
            (v.import_losses - before.0, v.slice_losses - before.1)
        })
        .collect();

    let back = reconnection(&hub_audit, epoch_ms(restarted_at), &p.ids);

    stop.store(true, Ordering::Relaxed);
    for task in &tasks {
        task.abort();
    }
    let totals = (
        counters.lease_failures.load(Ordering::Relaxed),
        counters.churn_failures.load(Ordering::Relaxed),
        counters.watch_errors.load(Ordering::Relaxed),
    );
    p.stop_controllers(&s.logs(), "sim");
    for task in view_tasks {
        task.abort();
    }

    // Summary.
    let members = k + real;
    let _ = writeln!(
        out,
        "## Hub with simulated members\n\nK = {k} simulated members + {real} real members ({members} members), E = {e_count} exports per member ({} headless), N = {n_endpoints} endpoints per slice; hub objects: {} PublishedServices and {} published slices, {members} Leases. Churn: one endpoint change per simulated member every {} ms ({churn_rate:.1} writes/s measured); Lease renewals {lease_rate:.1}/s. Machine {busy:.0} % busy over the {} s steady window.\n",
        e_count / 5,
        members * e_count,
        members * e_count,
        s.churn_ms,
        s.idle,
    );
    let _ = writeln!(
        out,
        "Set-up: {k} members joined (objects, token, client) in {:.0} s; their {hub_writes} publication writes in {:.1} s ({:.0}/s, {failed} failed); the real controllers (started then) held all {want} imports, complete, and their slices {:.0} s after they started.\n",
        joined.as_secs_f64(),
        published.as_secs_f64(),
        hub_writes as f64 / published.as_secs_f64().max(0.001),
        cold.as_secs_f64(),
    );
    let _ = writeln!(
        out,
        "| process | CPU (cores, steady window) | VmRSS / VmHWM (MiB) |\n|---|---:|---:|"
    );
    let _ = writeln!(
        out,
        "| hub apiserver | {:.3} | {:.0} / {:.0} |",
        cores["hub apiserver"], hub_mem.0, hub_mem.1
    );
    let _ = writeln!(
        out,
        "| etcd (all 4 clusters) | {:.3} | {:.0} / {:.0} |",
        cores["etcd"], etcd_mem.0, etcd_mem.1
    );
    let _ = writeln!(
        out,
        "| simulator ({k} members, this process) | {:.3} | {:.0} / {:.0} |",
        cores["simulator (this process)"],
        memory_mib(std::process::id()).0,
        memory_mib(std::process::id()).1
    );
    for i in 0..real {
        let _ = writeln!(
            out,
            "| apiserver {} | {:.3} | |",
            p.ids[i],
            cores[&format!("apiserver {}", p.ids[i])]
        );
    }
    let _ = writeln!(
        out,
        "\n| real controller | CPU (cores) | VmRSS / VmHWM (MiB) | connections: own apiserver / hub / other | requests into its apiserver from others (/s) |\n|---|---:|---:|---|---:|"
    );
    for i in 0..real {
        let others: usize = from_others[i].values().sum();
        let _ = writeln!(
            out,
            "| {} | {:.3} | {:.1} / {:.1} | {} / {} / {} | {:.2} |",
            p.ids[i],
            cores[&format!("controller {}", p.ids[i])],
            controller_mem[i].0,
            controller_mem[i].1,
            conns[i].0,
            conns[i].2,
            conns[i].1 + conns[i].3,
            others as f64 / wall,
        );
    }
    let _ = writeln!(
        out,
        "\nOn the hub: {watches_hub} watches opened by the members (`apiserver_longrunning_requests`, after minus before); the simulator holds {sim_conns} connections to the hub ({:.1} per simulated member); the simulated members' watches delivered {events_rate:.0} events/s in all ({:.1} per member).\n",
        sim_conns as f64 / k as f64,
        events_rate / k as f64,
    );
    let _ = writeln!(
        out,
        "Latency at the real members ({} samples × {real} members each, churn running): export → ServiceImport complete p50 {} ms, p99 {} ms, max {} ms ({export_timeouts} timeouts); endpoint change → imported slice p50 {} ms, p99 {} ms, max {} ms ({change_timeouts} timeouts); {refused_writes} of the samples' writes failed at the hub.\n",
        s.samples,
        ms(percentile(&export_samples, 50.0)),
        ms(percentile(&export_samples, 99.0)),
        ms(export_samples.last().copied().unwrap_or_default()),
        ms(percentile(&change_samples, 50.0)),
        ms(percentile(&change_samples, 99.0)),
        ms(change_samples.last().copied().unwrap_or_default()),
    );
    let _ = writeln!(
        out,
        "Hub outage: down {} s, ready {:.1} s after its restart. Real members' (imports, slices) before {before_outage:?}, least seen over {sampled} samples through the outage and {} s after {least:?}; losses (imports, slices) {losses:?}. First write accepted {} after the restart began; that export imported at the real members after {:?} ms. Hub apiserver over the {} s after its restart: {:.3} cores, VmRSS / VmHWM {:.0} / {:.0} MiB; etcd {:.3} cores.\n",
        s.outage,
        ready_after.as_secs_f64(),
        s.after_outage,
        first_write.map_or("none".to_owned(), |d| format!(
            "{:.1} s",
            (d + ready_after).as_secs_f64()
        )),
        resumed
            .iter()
            .map(|d| d.map(|d| d.as_millis()))
            .collect::<Vec<_>>(),
        s.after_outage,
        after_cores["hub apiserver"],
        hub_mem_after.0,
        hub_mem_after.1,
        after_cores["etcd"],
    );
    let _ = writeln!(out, "{}\n", back.describe(members));
    let _ = writeln!(
        out,
        "Simulated members over the run: {} Lease renewals and {} churn writes failed (the outage), {} watch errors.\n",
        totals.0, totals.1, totals.2
    );
    let max_conns = conns
        .iter()
        .map(|c| c.0 + c.1 + c.2 + c.3)
        .max()
        .unwrap_or(0);
    let max_hub_conns = conns.iter().map(|c| c.2).max().unwrap_or(0);
    let others_max = from_others
        .iter()
        .map(|m| m.values().sum::<usize>())
        .max()
        .unwrap_or(0);
    let p99_export = percentile(&export_samples, 99.0);
    let p99_change = percentile(&change_samples, 99.0);
    let spread = back.spread();
    let dropped = losses.iter().any(|l| l.0 + l.1 > 0)
        || least
            .iter()
            .zip(&before_outage)
            .any(|(l, b)| l.0 < b.0 || l.1 < b.1);
    let _ = writeln!(
        out,
        "| goal | measured | |\n|---|---|---|\n| connections per controller ≤ 20 | {max_conns} in all, {max_hub_conns} to the hub (largest of {real}) | {} |\n| 0 requests from other clusters into a member | {others_max} in {:.0} s (largest) | {} |\n| one credential per member | one TokenRequest token per member namespace | met |\n| p99 export → import ≤ 1 s | {} ms | {} |\n| p99 endpoint → imported slice ≤ 1 s | {} ms | {} |\n| hub apiserver ≤ 0.5 core, ≤ 1.5 GiB | {:.2} cores, VmHWM {:.0} MiB | {} |\n| nothing dropped during the outage | {} | {} |\n| reconnection spread over the jitter window (~15–30 s) | {:.1} s | {} |\n",
        verdict(max_conns <= 20),
        wall,
        verdict(others_max == 0),
        ms(p99_export),
        verdict(p99_export <= Duration::from_secs(1) && export_timeouts == 0),
        ms(p99_change),
        verdict(p99_change <= Duration::from_secs(1) && change_timeouts == 0),
        cores["hub apiserver"],
        hub_mem.1.max(hub_mem_after.1),
        verdict(cores["hub apiserver"] <= 0.5 && hub_mem.1.max(hub_mem_after.1) <= 1536.0),
        if dropped {
            "some dropped"
        } else {
            "none dropped"
        },
        verdict(!dropped),
        spread.as_secs_f64(),
        verdict(spread >= Duration::from_secs(15)),
    );
    drop(sims);
    drop(hub);
}

/// The hub kubeconfig template (URL, CA, a token to replace) from a
/// first ServiceAccount on the hub, made for it.
async fn join_sim_template(p: &Plane, hub: &kube::Client) -> Value {
    let namespace = "bench-template";
    create(
        &Api::<Namespace>::all(hub.clone()),
        &support::object(json!({"metadata": {"name": namespace}})),
    )
    .await;
    create(
        &Api::<ServiceAccount>::namespaced(hub.clone(), namespace),
        &support::object(json!({"metadata": {"name": "template"}})),
    )
    .await;
    let text =
        controlplane::service_account_kubeconfig(p.hub_cluster(), namespace, "template", 600).await;
    serde_json::from_str(&text).expect("a JSON kubeconfig")
}

// ---------------------------------------------------------------- phase: mesh vs hub

/// What one mode measured for each member.
struct ModeFigures {
    cores: Vec<f64>,
    memory: Vec<(f64, f64)>,
    /// (own apiserver, other members, hub, elsewhere).
    conns: Vec<(usize, usize, usize, usize)>,
    /// Requests per second into each member's apiserver from others.
    from_others: Vec<f64>,
    /// Watches open on each member's apiserver.
    watches: Vec<Option<i64>>,
    apiserver_cores: f64,
    hub_cores: Option<f64>,
    converge: Duration,
}

/// Measures the controllers of `p` over an idle window.
fn measure_idle(s: &Settings, p: &Plane, with_hub: bool, converge: Duration) -> ModeFigures {
    std::thread::sleep(Duration::from_secs(10));
    let n = p.ids.len();
    let mut pids: Vec<(String, u32)> = p
        .controllers
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("c{i}"), c.pid()))
        .collect();
    for i in 0..n {
        pids.push((format!("a{i}"), p.plane.apiservers[i + 1].pid().unwrap()));
    }
    if with_hub {
        pids.push(("hub".to_owned(), p.plane.apiservers[0].pid().unwrap()));
    }
    let from: Vec<u64> = p.audits.iter().map(|a| file_len(a)).collect();
    let window = CpuWindow::start(&pids);
    std::thread::sleep(Duration::from_secs(s.idle));
    let (cores, _) = window.end();
    let wall = window.start.elapsed().as_secs_f64();
    let ports = p.member_ports();
    ModeFigures {
        cores: (0..n).map(|i| cores[&format!("c{i}")]).collect(),
        memory: p.controllers.iter().map(|c| memory_mib(c.pid())).collect(),
        conns: p
            .controllers
            .iter()
            .enumerate()
            .map(|(i, c)| split_connections(c.pid(), ports[i], &ports, p.hub_port()))
            .collect(),
        from_others: p
            .audits
            .iter()
            .zip(&from)
            .map(|(a, f)| requests_by_user(a, *f).values().sum::<usize>() as f64 / wall)
            .collect(),
        watches: (0..n)
            .map(|i| apiserver_watches(&p.plane.apiservers[i + 1].url))
            .collect(),
        apiserver_cores: (0..n).map(|i| cores[&format!("a{i}")]).sum(),
        hub_cores: cores.get("hub").copied(),
        converge,
    }
}

fn phase_mesh_vs_hub(s: &Settings, rt: &tokio::runtime::Runtime, n: usize, out: &mut String) {
    let e_count = s.mesh_exports;
    let mut p = Plane::start(rt, n, "m");
    let mut view_tasks = Vec::new();
    let views: Vec<Shared> = p
        .members
        .iter()
        .map(|c| watch_member(c, rt, &mut view_tasks))
        .collect();
    rt.block_on(async {
        for (r, client) in p.members.iter().enumerate() {
            for e in 0..e_count {
                let addrs: Vec<String> = (0..s.endpoints)
                    .map(|j| address(REAL_ENDPOINTS, (r * 65_536 + e * s.endpoints + j) as u32))
                    .collect();
                export_real(client, &format!("r{r}"), e, &addrs).await;
            }
        }
    });
    let want = n * e_count;

    // As a mesh: each publishes, then the others read it with peer-reader
    // tokens (the apiserver-only members publish no CA for `peer add`).
    let t = Instant::now();
    p.spawn_controllers(Duration::from_secs(s.converge_timeout));
    rt.block_on(async {
        for member in &p.members {
            controlplane::wait_publication_marker(member, Duration::from_secs(120)).await;
        }
        for (i, member) in p.members.iter().enumerate() {
            for (j, id) in p.ids.iter().enumerate() {
                if i != j {
                    let kubeconfig = controlplane::service_account_kubeconfig(
                        p.member_cluster(j),
                        controlplane::CONTROLLER_NAMESPACE,
                        controlplane::PEER_READER_SA,
                        3600,
                    )
                    .await;
                    controlplane::add_peer_secret(member, id, &kubeconfig).await;
                }
            }
        }
    });
    wait_converged(
        &views,
        want,
        Duration::from_secs(s.converge_timeout),
        &p.controllers,
    );
    let mesh = measure_idle(s, &p, false, t.elapsed());
    eprintln!("[bench] mesh of {n}: {:?} connections", mesh.conns);
    p.stop_controllers(&s.logs(), &format!("mesh{n}"));

    // Through a hub: the peer Secrets go, every member joins, the
    // controllers start again (fresh processes: their own VmHWM).
    rt.block_on(async {
        for member in &p.members {
            let secrets: Api<Secret> =
                Api::namespaced(member.clone(), controlplane::CONTROLLER_NAMESPACE);
            let peers = secrets
                .list(&ListParams::default().labels(clusterset_dns::peering::PEER_SELECTOR))
                .await
                .unwrap();
            for secret in peers.items {
                let name = secret.metadata.name.unwrap_or_default();
                let _ = secrets.delete(&name, &DeleteParams::default()).await;
            }
        }
    });
    let t = Instant::now();
    p.join_all();
    p.spawn_controllers(Duration::from_secs(s.converge_timeout));
    // A new export per member, imported everywhere through the hub only.
    rt.block_on(async {
        for (r, client) in p.members.iter().enumerate() {
            let addrs: Vec<String> = (0..s.endpoints)
                .map(|j| address(REAL_ENDPOINTS, (r * 65_536 + 60_000 + j) as u32))
                .collect();
            export_real(client, &format!("h{r}"), 0, &addrs).await;
        }
    });
    wait_converged(
        &views,
        want + n,
        Duration::from_secs(s.converge_timeout),
        &p.controllers,
    );
    let hub = measure_idle(s, &p, true, t.elapsed());
    eprintln!("[bench] hub of {n}: {:?} connections", hub.conns);
    p.stop_controllers(&s.logs(), &format!("hub{n}"));
    for task in view_tasks {
        task.abort();
    }

    let _ = writeln!(
        out,
        "## Mesh and hub, {n} real members\n\n{n} apiserver-only members on one etcd, E = {e_count} exports each (N = {} endpoints), one release controller each; measured over a {} s idle window after convergence (the mesh converged {:.0} s after its controllers started; the hub {:.0} s after `hub init`).\n",
        s.endpoints,
        s.idle,
        mesh.converge.as_secs_f64(),
        hub.converge.as_secs_f64(),
    );
    let _ = writeln!(
        out,
        "| per controller (mean; largest) | mesh | hub |\n|---|---:|---:|"
    );
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let maxf = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let row =
        |out: &mut String, what: &str, f: &dyn Fn(&ModeFigures) -> Vec<f64>, digits: usize| {
            let (m, h) = (f(&mesh), f(&hub));
            let _ = writeln!(
                out,
                "| {what} | {:.d$}; {:.d$} | {:.d$}; {:.d$} |",
                mean(&m),
                maxf(&m),
                mean(&h),
                maxf(&h),
                d = digits
            );
        };
    let total = |c: &(usize, usize, usize, usize)| (c.0 + c.1 + c.2 + c.3) as f64;
    row(
        out,
        "TCP connections, all",
        &|f| f.conns.iter().map(total).collect(),
        1,
    );
    row(
        out,
        "… to its own apiserver",
        &|f| f.conns.iter().map(|c| c.0 as f64).collect(),
        1,
    );
    row(
        out,
        "… to other members' apiservers",
        &|f| f.conns.iter().map(|c| c.1 as f64).collect(),
        1,
    );
    row(
        out,
        "… to the hub",
        &|f| f.conns.iter().map(|c| c.2 as f64).collect(),
        1,
    );
    row(
        out,
        "CPU over the idle window (cores)",
        &|f| f.cores.clone(),
        4,
    );
    row(
        out,
        "VmHWM (MiB)",
        &|f| f.memory.iter().map(|m| m.1).collect(),
        1,
    );
    row(
        out,
        "requests/s into its apiserver from other clusters",
        &|f| f.from_others.clone(),
        2,
    );
    row(
        out,
        "watches open on its apiserver (its own and peers')",
        &|f| {
            f.watches
                .iter()
                .map(|w| w.map_or(f64::NAN, |w| w as f64))
                .collect()
        },
        1,
    );
    let _ = writeln!(
        out,
        "| the {n} member apiservers, CPU (cores, sum) | {:.3} | {:.3} |\n| hub apiserver, CPU (cores) | | {:.3} |\n",
        mesh.apiserver_cores,
        hub.apiserver_cores,
        hub.hub_cores.unwrap_or(0.0),
    );
}

// ---------------------------------------------------------------- main

fn main() {
    let s = Settings::from_env();
    std::fs::create_dir_all(s.logs()).unwrap();
    let started = Instant::now();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut out = format!(
        "# clusterset-dns hub bench\n\nLoad average at start {}; phases {:?}.\n\n",
        loadavg(),
        s.phases
    );
    for phase in &s.phases {
        match phase.as_str() {
            "sim" => phase_sim(&s, &rt, &mut out),
            "mesh-vs-hub" => {
                for &n in &s.mesh_sizes {
                    phase_mesh_vs_hub(&s, &rt, n, &mut out);
                }
            }
            other => panic!("BENCH_HUB_PHASES: no phase {other:?} (sim, mesh-vs-hub)"),
        }
        std::fs::write(&s.results, &out).unwrap();
    }
    let _ = writeln!(out, "Run took {:.0} s.", started.elapsed().as_secs_f64());
    println!("{out}");
    std::fs::write(&s.results, &out).unwrap();
    eprintln!("[bench] results in {}", s.results.display());
    drop(rt);
}
