//! A real control plane for tests: one etcd and one or more kube-apiservers
//! (one "cluster" each, separated by `--etcd-prefix`) on loopback ports,
//! built by `scripts/testenv-build.sh` and cached outside the repository.
//!
//! [`ControlPlane::start`] runs only apiservers (objects are stored, nothing
//! acts on them). [`ControlPlane::start_members`] runs *member clusters* that
//! behave like real ones without a kubelet: each also gets
//! kube-controller-manager, kube-scheduler and kwok with a few fake Nodes, so
//! Deployments get Running+Ready pods with IPs, the in-tree EndpointSlice
//! controller writes slices, namespaces finish deleting and owner references
//! are garbage-collected. See `tests/testenv/README.md` for the flags and why.
//!
//! Everything is torn down on drop — also when a test panics, in which case
//! the tail of every process's log is printed — and every child gets
//! `PR_SET_PDEATHSIG`, so even a killed test run leaks no processes.
#![allow(dead_code)]

use crate::support;
#[allow(unused_imports)] // each test crate uses a different subset
pub use crate::support::{
    create_namespace, free_port, free_udp_and_tcp_port, poll_until, wait_for,
};

// Only the `testenv` tier may start a control plane: a test target that
// uses this module needs `required-features = ["testenv"]` in Cargo.toml,
// so that plain `cargo test` neither compiles it nor needs the binaries.
#[cfg(not(feature = "testenv"))]
compile_error!(
    "tests/controlplane needs the Go-built testenv binaries: give the test target \
     `required-features = [\"testenv\"]` in Cargo.toml (README.md, \"Tests\")"
);

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Token of the `system:masters` admin user.
pub const ADMIN_TOKEN: &str = "admin-token";
/// Token of the unprivileged user `clusterset-dns` (no groups).
pub const DNS_TOKEN: &str = "clusterset-dns-token";
/// User name behind [`DNS_TOKEN`].
pub const DNS_USER: &str = "clusterset-dns";

/// The Go-built binaries the `testenv` tier needs, and the apt packages of
/// the tools this module runs.
const BINARIES: [&str; 7] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "etcd",
    "coredns",
    "kwok",
    "kwok-stages.yaml",
];
const TOOLS: [(&str, &str); 2] = [("curl", "curl"), ("openssl", "openssl")];

/// How to get the binaries, for failure messages.
const HOW_TO_BUILD: &str = "build them with `scripts/testenv-build.sh` (Go module proxy; \
     ~12 min on 2 cores the first time, then cached in ~/.cache/clusterset-dns/testenv), \
     or run `scripts/test.sh`, which builds them and runs every test; \
     CLUSTERSET_DNS_TESTENV_BIN=DIR uses binaries from DIR";

/// The directory holding kube-apiserver, kube-controller-manager,
/// kube-scheduler, etcd, coredns, kwok and kwok-stages.yaml (and kubectl,
/// helm and toxiproxy-server, which [`binary`] finds where a test needs
/// them):
/// `CLUSTERSET_DNS_TESTENV_BIN`, else the cache of `scripts/testenv-build.sh`
/// (asked with `--check`, which never builds). Panics — failing the test,
/// never skipping it — when a binary or a tool is missing.
pub fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        for (tool, package) in TOOLS {
            let found = Command::new(tool)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok();
            assert!(
                found,
                "`{tool}` not found: the testenv tests need it; \
                 `apt-get install {package}` (scripts/test.sh installs it)"
            );
        }
        let (dir, from) = match std::env::var_os("CLUSTERSET_DNS_TESTENV_BIN") {
            Some(dir) => (PathBuf::from(dir), "CLUSTERSET_DNS_TESTENV_BIN"),
            None => {
                let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/testenv-build.sh");
                let output = Command::new("bash")
                    .arg(&script)
                    .arg("--check")
                    .stderr(Stdio::inherit())
                    .output()
                    .expect("run scripts/testenv-build.sh --check");
                assert!(
                    output.status.success(),
                    "the testenv tests need the binaries of scripts/testenv-build.sh, and \
                     CLUSTERSET_DNS_TESTENV_BIN is unset and the testenv cache has none \
                     (see `scripts/testenv-build.sh --check` above): {HOW_TO_BUILD}"
                );
                let stdout = String::from_utf8_lossy(&output.stdout);
                let dir = stdout
                    .lines()
                    .last()
                    .expect("testenv-build.sh --check prints the bin dir")
                    .trim();
                (PathBuf::from(dir), "scripts/testenv-build.sh --check")
            }
        };
        let missing: Vec<&str> = BINARIES
            .into_iter()
            .filter(|b| !dir.join(b).is_file())
            .collect();
        assert!(
            missing.is_empty(),
            "the testenv tests need {}, which {} (from {from}) does not hold; {HOW_TO_BUILD}",
            missing.join(", "),
            dir.display()
        );
        dir
    })
}

/// What member clusters need besides etcd and kube-apiserver.
pub const MEMBER_FILES: [&str; 4] = [
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "kwok-stages.yaml",
];

/// kwok's `Exec` CustomResourceDefinition, copied from its module by
/// `scripts/testenv-build.sh`: per-pod exec settings (the data plane's pod
/// network namespace).
pub const KWOK_CRDS: &str = "kwok-crds.yaml";

/// Where a [`ControlPlane`]'s apiservers listen and how its kwok serves
/// `kubectl exec`; the default is loopback and no exec.
#[derive(Clone, Debug, Default)]
pub struct Network {
    /// The address every apiserver binds and advertises (default
    /// 127.0.0.1): the host end of the data plane's veth, which processes
    /// in its network namespaces can reach.
    pub bind: Option<IpAddr>,
    /// With a directory, kwok serves the kubelet API over TLS (so
    /// `kubectl exec` works), watches kwok `Exec` objects, and runs exec'd
    /// commands with this directory first on its `PATH` (where the data
    /// plane puts the wrappers that enter a pod's network namespace).
    pub exec_path: Option<PathBuf>,
}

/// `bin_dir()/name`, or a panic that says how to get it (never a skip).
pub fn binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.is_file(),
        "{} is missing: run scripts/testenv-build.sh (or point CLUSTERSET_DNS_TESTENV_BIN at \
         the directory it prints)",
        path.display()
    );
    path
}

/// Starts `program` with `args`, stdout and stderr to `log`, with
/// `PR_SET_PDEATHSIG` (it dies with this process); panics if it cannot start.
/// For processes the harness has no type for (the demo's `clusterset-dns serve`).
pub fn spawn_logged(program: &Path, args: &[String], log: &Path) -> Child {
    spawn(program, args, log)
}

/// The `clusterset-dns` binary: cargo's `CARGO_BIN_EXE_clusterset-dns` in
/// tests and benches; elsewhere (the demo, a Cargo example, which cargo gives
/// no such variable) `CLUSTERSET_DNS_BIN`, else `clusterset-dns` next to the
/// running executable's directory (`target/debug/examples/demo` →
/// `target/debug/clusterset-dns`).
pub fn clusterset_dns_binary() -> PathBuf {
    if let Some(path) = option_env!("CARGO_BIN_EXE_clusterset-dns") {
        return PathBuf::from(path);
    }
    if let Some(path) = std::env::var_os("CLUSTERSET_DNS_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the path of the running executable");
    exe.parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("clusterset-dns"))
        .expect("the executable is in a directory")
}

fn spawn(program: &Path, args: &[String], log: &Path) -> Child {
    spawn_with_env(program, args, &[], log)
}

fn spawn_with_env(program: &Path, args: &[String], env: &[(&str, String)], log: &Path) -> Child {
    assert!(
        program.is_file(),
        "{} is missing: run scripts/testenv-build.sh (or point CLUSTERSET_DNS_TESTENV_BIN at \
         the directory it prints)",
        program.display()
    );
    let mut command = Command::new(program);
    command.args(args).envs(env.iter().map(|(k, v)| (k, v)));
    support::spawn_logged_command(&mut command, log, false)
}

fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// One kube-apiserver.
pub struct ApiServer {
    child: Option<Child>,
    args: Vec<String>,
    log: PathBuf,
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// kubeconfig with the admin token.
    pub admin_kubeconfig: PathBuf,
    /// kubeconfig with the unprivileged `clusterset-dns` token.
    pub dns_kubeconfig: PathBuf,
}

impl ApiServer {
    /// Kills the apiserver (etcd keeps the data).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop(&mut child);
        }
    }

    /// The process id while it runs (for `kill -STOP` / `kill -CONT`: a
    /// hung apiserver rather than a stopped one).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `signal` (`"STOP"`, `"CONT"`) to the running apiserver.
    pub fn signal(&self, signal: &str) {
        let pid = self.pid().expect("apiserver running");
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill -{signal} {pid} failed");
    }

    /// Starts it again on the same port with `extra` flags added to its
    /// command line from now on (`--feature-gates=…`), and waits until it
    /// is ready.
    pub fn start_with(&mut self, extra: &[&str]) {
        self.args.extend(extra.iter().map(|flag| flag.to_string()));
        self.start();
    }

    /// Starts it again on the same port and waits until it is ready.
    pub fn start(&mut self) {
        self.spawn();
        self.wait_ready(Duration::from_secs(90));
    }

    fn spawn(&mut self) {
        assert!(self.child.is_none(), "apiserver already running");
        self.child = Some(spawn(
            &bin_dir().join("kube-apiserver"),
            &self.args,
            &self.log,
        ));
    }

    fn wait_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let ok = Command::new("curl")
                .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", "-H"])
                .arg(format!("Authorization: Bearer {ADMIN_TOKEN}"))
                .arg(format!("{}/readyz", self.url))
                .output()
                .map(|o| o.stdout == b"200")
                .unwrap_or(false);
            if ok {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "kube-apiserver exited with {status}; log:\n{}",
                    tail(&self.log)
                );
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready in {timeout:?}; log:\n{}",
                tail(&self.log)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A client with the admin token.
    pub async fn admin_client(&self) -> kube::Client {
        client_from(&self.admin_kubeconfig).await
    }
}

/// Builds a kube client from a kubeconfig file.
pub async fn client_from(path: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// The end of a log, errors (klog `E`/`F` lines) first.
/// The last lines of the log at `path`, for failure messages.
pub fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let errors: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with('E') || l.starts_with('F') || l.contains("rror"))
        .collect();
    let last = &lines[lines.len().saturating_sub(15)..];
    format!(
        "errors:\n{}\nlast lines:\n{}",
        errors[errors.len().saturating_sub(15)..].join("\n"),
        last.join("\n")
    )
}

fn wait_http_ok(url: &str, timeout: Duration, what: &str, log: &Path) {
    let deadline = Instant::now() + timeout;
    loop {
        let ok = Command::new("curl")
            .args(["-sf", "-o", "/dev/null", url])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if ok {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} not ready in {timeout:?}; log:\n{}",
            tail(log)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How to run one cluster of a [`ControlPlane`].
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    /// The apiserver's (and kube-controller-manager's)
    /// `--service-cluster-ip-range`: one CIDR, or an IPv4 and an IPv6 one
    /// for a dual-stack cluster.
    pub service_cidrs: Vec<String>,
    /// Pod CIDRs (member clusters only). The first is kwok's `--cidr`; with
    /// two (IPv4 and IPv6) every fake Node also gets `spec.podCIDRs` = both,
    /// which is what makes kwok give each pod one IP of each family (its
    /// `--cidr` takes a single CIDR).
    pub pod_cidrs: Vec<String>,
    /// Run kube-controller-manager, kube-scheduler and kwok as well.
    pub member: bool,
    /// Fake Nodes created (and waited for) at start; member clusters only.
    pub nodes: usize,
}

impl ClusterSpec {
    /// Just an apiserver, service CIDR 10.0.0.0/24 (what [`ControlPlane::start`] runs).
    pub fn api_only() -> Self {
        Self {
            service_cidrs: vec!["10.0.0.0/24".into()],
            pod_cidrs: Vec::new(),
            member: false,
            nodes: 0,
        }
    }

    /// Member cluster number `i` (0..=50), IPv4: services 10.(100+i).0.0/16,
    /// pods 10.(200+i).0.0/16, two fake Nodes.
    pub fn member(i: u8) -> Self {
        assert!(i <= 50, "cluster number {i} out of range");
        Self {
            service_cidrs: vec![format!("10.{}.0.0/16", 100 + i)],
            pod_cidrs: vec![format!("10.{}.0.0/16", 200 + i)],
            member: true,
            nodes: 2,
        }
    }

    /// Like [`ClusterSpec::member`], plus IPv6: services fd00:100:i::/112,
    /// pods fd00:200:i::/64.
    pub fn member_dual_stack(i: u8) -> Self {
        let mut spec = Self::member(i);
        spec.service_cidrs.push(format!("fd00:100:{i:x}::/112"));
        spec.pod_cidrs.push(format!("fd00:200:{i:x}::/64"));
        spec
    }

    /// Whether `ip` is in one of the service CIDRs.
    pub fn in_service_cidrs(&self, ip: &str) -> bool {
        self.service_cidrs.iter().any(|c| cidr_contains(c, ip))
    }

    /// Whether `ip` is in one of the pod CIDRs.
    pub fn in_pod_cidrs(&self, ip: &str) -> bool {
        self.pod_cidrs.iter().any(|c| cidr_contains(c, ip))
    }
}

/// Whether `cidr` (like `10.1.0.0/16` or `fd00::/64`) contains `ip`.
/// False for mixed families or anything unparsable.
pub fn cidr_contains(cidr: &str, ip: &str) -> bool {
    let Some((net, len)) = cidr.split_once('/') else {
        return false;
    };
    let (Ok(net), Ok(len), Ok(ip)) = (
        net.parse::<IpAddr>(),
        len.parse::<u32>(),
        ip.parse::<IpAddr>(),
    ) else {
        return false;
    };
    let (net, ip, bits) = match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(i)) => (u32::from(n) as u128, u32::from(i) as u128, 32),
        (IpAddr::V6(n), IpAddr::V6(i)) => (u128::from(n), u128::from(i), 128),
        _ => return false,
    };
    if len > bits {
        return false;
    }
    let shift = bits - len;
    shift >= bits || (net >> shift) == (ip >> shift)
}

/// A child process other than etcd and the apiservers (kube-controller-manager,
/// kube-scheduler, kwok), killed on drop.
struct Process {
    name: String,
    child: Mutex<Child>,
    log: PathBuf,
}

impl Process {
    fn start(name: &str, args: &[String], log: PathBuf) -> Self {
        Self::start_with_env(name, args, &[], log)
    }

    fn start_with_env(name: &str, args: &[String], env: &[(&str, String)], log: PathBuf) -> Self {
        let child = spawn_with_env(&binary(name), args, env, &log);
        Self {
            name: name.into(),
            child: Mutex::new(child),
            log,
        }
    }

    /// Panics (with its log) if it has exited.
    fn assert_running(&self) {
        let status = self.child.lock().unwrap().try_wait().ok().flatten();
        if let Some(status) = status {
            panic!(
                "{} exited with {status}; log {}:\n{}",
                self.name,
                self.log.display(),
                tail(&self.log)
            );
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        stop(self.child.get_mut().unwrap());
    }
}

/// One cluster of a [`ControlPlane`]: its apiserver is `apiservers[index]`.
pub struct Cluster {
    /// `cluster<index>`: also its `--etcd-prefix`, kcm `--cluster-name` and
    /// kubeconfig context.
    pub name: String,
    /// Its index in [`ControlPlane::clusters`] and `apiservers`.
    pub index: usize,
    /// What it was started with.
    pub spec: ClusterSpec,
    /// kubeconfig with the admin token.
    pub admin_kubeconfig: PathBuf,
    /// Its directory (logs, pki, kubeconfigs).
    pub dir: PathBuf,
    /// kube-controller-manager, kube-scheduler, kwok (member clusters).
    processes: Vec<Process>,
}

impl Cluster {
    /// A client with the admin token.
    pub async fn admin_client(&self) -> kube::Client {
        client_from(&self.admin_kubeconfig).await
    }

    /// Panics (with the log) if one of its controllers/kwok has exited.
    pub fn assert_running(&self) {
        for p in &self.processes {
            p.assert_running();
        }
    }

    /// The tail of each of its logs (apiserver included).
    pub fn log_tails(&self) -> String {
        let mut out = String::new();
        let mut logs = vec![self.dir.join("kube-apiserver.log")];
        logs.extend(self.processes.iter().map(|p| p.log.clone()));
        for log in logs {
            out += &format!("==> {} <==\n{}\n", log.display(), tail(&log));
        }
        out
    }

    /// Polls `check` every 100 ms until it returns `Ok`, for at most
    /// `timeout`. `Err` explains what is still missing; on timeout that last
    /// explanation and the tail of this cluster's logs are in the panic. Also
    /// panics at once if a controller or kwok exits.
    pub async fn wait_for<T, F, Fut>(&self, what: &str, timeout: Duration, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, String>>,
    {
        support::poll_until(timeout, Duration::from_millis(100), || {
            self.assert_running();
            check()
        })
        .await
        .unwrap_or_else(|last| {
            panic!(
                "{}: {what}: not done in {timeout:?}; last: {last}\n{}",
                self.name,
                self.log_tails()
            )
        })
    }

    /// Creates fake Node `name` for kwok to manage: capacity cpu 32, memory
    /// 256Gi, pods 110, zone label `zone`; with two pod CIDRs, `spec.podCIDRs`
    /// is both (node IPAM is off, so nothing else sets it).
    pub async fn create_node(&self, client: &kube::Client, name: &str, zone: &str) {
        use k8s_openapi::api::core::v1::Node;
        use kube::api::{Api, PostParams};
        let mut node = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "topology.kubernetes.io/zone": zone,
                    "type": "kwok",
                },
                "annotations": {"kwok.x-k8s.io/node": "fake"},
            },
            "status": {
                "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            },
        });
        if self.spec.pod_cidrs.len() > 1 {
            node["spec"] = serde_json::json!({
                "podCIDR": self.spec.pod_cidrs[0],
                "podCIDRs": self.spec.pod_cidrs,
            });
        }
        let node: Node = serde_json::from_value(node).unwrap();
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap_or_else(|e| panic!("{}: creating node {name}: {e}", self.name));
    }

    /// Waits until `count` Nodes are Ready and carry no NoSchedule/NoExecute
    /// taint (kwok marks them Ready; node-lifecycle-controller then removes
    /// the `node.kubernetes.io/not-ready` taint).
    pub async fn wait_nodes_schedulable(&self, client: &kube::Client, count: usize) {
        use k8s_openapi::api::core::v1::Node;
        use kube::api::{Api, ListParams};
        let nodes: Api<Node> = Api::all(client.clone());
        self.wait_for("nodes Ready and untainted", Duration::from_secs(60), || {
            let nodes = nodes.clone();
            async move {
                let list = nodes
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?;
                let not_yet: Vec<String> = list
                    .items
                    .iter()
                    .filter(|n| !node_schedulable(n))
                    .map(|n| n.metadata.name.clone().unwrap_or_default())
                    .collect();
                if list.items.len() >= count && not_yet.is_empty() {
                    Ok(())
                } else {
                    Err(format!(
                        "{} nodes, not ready/untainted: {not_yet:?}",
                        list.items.len()
                    ))
                }
            }
        })
        .await
    }

    /// Waits until Deployment `ns/name` has exactly `replicas` pods, all
    /// Running and Ready with a pod IP and not terminating (and the
    /// Deployment reports them), and returns them sorted by name.
    pub async fn wait_deployment_ready(
        &self,
        client: &kube::Client,
        ns: &str,
        name: &str,
        replicas: usize,
    ) -> Vec<k8s_openapi::api::core::v1::Pod> {
        use k8s_openapi::api::apps::v1::Deployment;
        use k8s_openapi::api::core::v1::Pod;
        use kube::api::{Api, ListParams};
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let what = format!("deployment {ns}/{name}: {replicas} Ready pods");
        self.wait_for(&what, Duration::from_secs(60), || {
            let (deployments, pods) = (deployments.clone(), pods.clone());
            async move {
                let d = deployments.get(name).await.map_err(|e| e.to_string())?;
                let selector = d
                    .spec
                    .as_ref()
                    .and_then(|s| s.selector.match_labels.clone())
                    .unwrap_or_default()
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(",");
                let list = pods
                    .list(&ListParams::default().labels(&selector))
                    .await
                    .map_err(|e| e.to_string())?;
                let mut ready: Vec<Pod> = list
                    .items
                    .iter()
                    .filter(|p| pod_running_ready(p))
                    .cloned()
                    .collect();
                let status = d.status.unwrap_or_default();
                let reported = status.ready_replicas.unwrap_or(0) as usize;
                let updated = status.updated_replicas.unwrap_or(0) as usize;
                if ready.len() == replicas
                    && list.items.len() == replicas
                    && reported == replicas
                    && updated == replicas
                {
                    ready.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
                    Ok(ready)
                } else {
                    Err(format!(
                        "{} pods ({} Running+Ready with an IP), deployment readyReplicas \
                         {reported} updatedReplicas {updated}; pod phases: {:?}",
                        list.items.len(),
                        ready.len(),
                        list.items
                            .iter()
                            .map(|p| (
                                p.metadata.name.clone().unwrap_or_default(),
                                p.status.as_ref().and_then(|s| s.phase.clone())
                            ))
                            .collect::<Vec<_>>()
                    ))
                }
            }
        })
        .await
    }
}

/// Ready and without a NoSchedule/NoExecute taint.
pub fn node_schedulable(node: &k8s_openapi::api::core::v1::Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.effect != "PreferNoSchedule"));
    ready && !tainted
}

/// Running, condition Ready true, a pod IP, and no deletion timestamp.
pub fn pod_running_ready(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    pod.metadata.deletion_timestamp.is_none()
        && status.phase.as_deref() == Some("Running")
        && status.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty())
        && status
            .conditions
            .as_ref()
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// etcd plus one apiserver per cluster, and for member clusters their
/// controllers and kwok.
pub struct ControlPlane {
    etcd: Child,
    /// The clusters' apiservers: `apiservers[i]` is cluster `i`'s; replicas
    /// from [`ControlPlane::start_replica`] come after them.
    pub apiservers: Vec<ApiServer>,
    /// The clusters, in order.
    pub clusters: Vec<Cluster>,
    dir: tempfile::TempDir,
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for cluster in &self.clusters {
                eprintln!("---- {} logs ----\n{}", cluster.name, cluster.log_tails());
            }
            let etcd_log = self.dir.path().join("etcd.log");
            eprintln!("---- etcd log ----\n{}", tail(&etcd_log));
            eprintln!(
                "(all logs are in {}, deleted now)",
                self.dir.path().display()
            );
        }
        // Controllers and kwok first: they only talk to the apiservers.
        for cluster in &mut self.clusters {
            while let Some(p) = cluster.processes.pop() {
                drop(p);
            }
        }
        for api in &mut self.apiservers {
            api.stop();
        }
        stop(&mut self.etcd);
    }
}

impl ControlPlane {
    /// Starts etcd and `clusters` apiservers (service CIDR 10.0.0.0/24 each),
    /// and installs `crds/` in each. No controllers run.
    pub async fn start(clusters: usize) -> Self {
        Self::start_with(&vec![ClusterSpec::api_only(); clusters]).await
    }

    /// Starts `n` member clusters (see [`ClusterSpec::member`]); cluster `i`
    /// is dual-stack when `dual_stack(i)`.
    pub async fn start_members(n: u8, dual_stack: impl Fn(u8) -> bool) -> Self {
        let specs: Vec<ClusterSpec> = (0..n)
            .map(|i| {
                if dual_stack(i) {
                    ClusterSpec::member_dual_stack(i)
                } else {
                    ClusterSpec::member(i)
                }
            })
            .collect();
        Self::start_with(&specs).await
    }

    /// Starts etcd and one cluster per spec (apiservers started in parallel),
    /// installs `crds/` in each, then for member clusters starts
    /// kube-controller-manager, kube-scheduler and kwok, creates the fake
    /// Nodes and waits until they are schedulable.
    pub async fn start_with(specs: &[ClusterSpec]) -> Self {
        Self::start_networked(specs, &Network::default()).await
    }

    /// [`ControlPlane::start_with`], with the apiservers on `network.bind`
    /// and kwok serving `kubectl exec` through `network.exec_path` (what the
    /// routed data plane of `tests/dataplane` needs).
    pub async fn start_networked(specs: &[ClusterSpec], network: &Network) -> Self {
        let bin = bin_dir();
        let mut needed = vec!["etcd", "kube-apiserver"];
        if specs.iter().any(|s| s.member) {
            needed.extend(MEMBER_FILES);
        }
        if network.exec_path.is_some() {
            needed.push(KWOK_CRDS);
        }
        let bind = network.bind.unwrap_or(IpAddr::from([127, 0, 0, 1]));
        let missing: Vec<&str> = needed
            .into_iter()
            .filter(|f| !bin.join(f).is_file())
            .collect();
        assert!(
            missing.is_empty(),
            "{missing:?} missing in {}: run scripts/testenv-build.sh (or point \
             CLUSTERSET_DNS_TESTENV_BIN at the directory it prints)",
            bin.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (client_port, peer_port) = (free_port(), free_port());
        let etcd = spawn(
            &bin.join("etcd"),
            &[
                "--name=test".into(),
                format!("--data-dir={}", d.join("etcd").display()),
                format!("--listen-client-urls=http://127.0.0.1:{client_port}"),
                format!("--advertise-client-urls=http://127.0.0.1:{client_port}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-cluster=test=http://127.0.0.1:{peer_port}"),
                "--unsafe-no-fsync".into(),
                "--log-level=warn".into(),
            ],
            &d.join("etcd.log"),
        );
        wait_http_ok(
            &format!("http://127.0.0.1:{client_port}/readyz"),
            Duration::from_secs(30),
            "etcd",
            &d.join("etcd.log"),
        );
        let openssl = |args: &[&str]| {
            let ok = Command::new("openssl")
                .args(args)
                .stderr(Stdio::null())
                .status()
                .map(|s| s.success());
            assert!(
                matches!(ok, Ok(true)),
                "openssl {args:?} failed (is openssl installed?)"
            );
        };
        let sa_key = d.join("sa.key");
        let sa_pub = d.join("sa.pub");
        openssl(&["genrsa", "-out", sa_key.to_str().unwrap(), "2048"]);
        openssl(&[
            "rsa",
            "-in",
            sa_key.to_str().unwrap(),
            "-pubout",
            "-out",
            sa_pub.to_str().unwrap(),
        ]);
        let tokens = d.join("tokens.csv");
        std::fs::write(
            &tokens,
            format!(
                "{ADMIN_TOKEN},admin,admin,\"system:masters\"\n{DNS_TOKEN},{DNS_USER},{DNS_USER}\n"
            ),
        )
        .unwrap();

        let mut plane = Self {
            etcd,
            apiservers: Vec::new(),
            clusters: Vec::new(),
            dir,
        };
        for (i, spec) in specs.iter().enumerate() {
            let port = free_port();
            let url = format!("https://{}", std::net::SocketAddr::from((bind, port)));
            let name = format!("cluster{i}");
            let cluster_dir = plane.dir.path().join(&name);
            std::fs::create_dir_all(&cluster_dir).unwrap();
            let args = vec![
                format!("--etcd-servers=http://127.0.0.1:{client_port}"),
                format!("--etcd-prefix=/{name}"),
                format!("--bind-address={bind}"),
                format!("--advertise-address={bind}"),
                format!("--secure-port={port}"),
                format!("--cert-dir={}", cluster_dir.join("pki").display()),
                format!("--service-account-issuer={url}"),
                format!("--service-account-key-file={}", sa_pub.display()),
                format!("--service-account-signing-key-file={}", sa_key.display()),
                format!(
                    "--service-cluster-ip-range={}",
                    spec.service_cidrs.join(",")
                ),
                "--authorization-mode=RBAC".into(),
                format!("--token-auth-file={}", tokens.display()),
                // Pods need no service account token volume (nothing runs them),
                // and without this plugin a pod does not wait for the
                // `default` ServiceAccount to exist.
                "--disable-admission-plugins=ServiceAccount".into(),
                "--allow-privileged=true".into(),
                "--profiling=false".into(),
                // No kubernetes.default endpoints: a loopback advertise address is refused otherwise.
                "--endpoint-reconciler-type=none".into(),
                "--enable-priority-and-fairness=false".into(),
            ];
            let admin_kubeconfig = cluster_dir.join("admin.kubeconfig");
            let dns_kubeconfig = cluster_dir.join("dns.kubeconfig");
            write_kubeconfig(&admin_kubeconfig, &url, ADMIN_TOKEN, &name);
            write_kubeconfig(&dns_kubeconfig, &url, DNS_TOKEN, &name);
            let mut api = ApiServer {
                child: None,
                args,
                log: cluster_dir.join("kube-apiserver.log"),
                url,
                admin_kubeconfig: admin_kubeconfig.clone(),
                dns_kubeconfig,
            };
            api.spawn();
            plane.apiservers.push(api);
            plane.clusters.push(Cluster {
                name,
                index: i,
                spec: spec.clone(),
                admin_kubeconfig,
                dir: cluster_dir,
                processes: Vec::new(),
            });
        }
        for api in &mut plane.apiservers {
            api.wait_ready(Duration::from_secs(90));
        }
        for api in &plane.apiservers {
            let client = api.admin_client().await;
            install_crds(&client).await;
            if network.exec_path.is_some() {
                install_crd_file(&client, &bin.join(KWOK_CRDS)).await;
            }
        }
        for cluster in &mut plane.clusters {
            if cluster.spec.member {
                cluster.processes = start_member_processes(cluster, &sa_key, network);
            }
        }
        for cluster in &plane.clusters {
            if !cluster.spec.member {
                continue;
            }
            let client = cluster.admin_client().await;
            for n in 0..cluster.spec.nodes {
                let zone = format!("zone-{}", (b'a' + (n % 3) as u8) as char);
                cluster
                    .create_node(&client, &format!("kwok-node-{n}"), &zone)
                    .await;
            }
        }
        for cluster in &plane.clusters {
            if cluster.spec.member {
                let client = cluster.admin_client().await;
                cluster
                    .wait_nodes_schedulable(&client, cluster.spec.nodes)
                    .await;
            }
        }
        plane
    }

    /// Starts a second apiserver for cluster `i` (same etcd prefix, new
    /// port) and returns its index in `apiservers`: writes through it reach
    /// cluster `i` while that cluster's first apiserver is down.
    pub fn start_replica(&mut self, i: usize) -> usize {
        let port = free_port();
        let host = self.apiservers[i]
            .url
            .rsplit_once(':')
            .map(|(host, _)| host.to_owned())
            .expect("an apiserver URL has a port");
        let url = format!("{host}:{port}");
        let n = self.apiservers.len();
        let dir = self.dir.path().join(format!("replica{n}"));
        std::fs::create_dir_all(&dir).unwrap();
        let args: Vec<String> = self.apiservers[i]
            .args
            .iter()
            .map(|a| {
                if a.starts_with("--secure-port=") {
                    format!("--secure-port={port}")
                } else if a.starts_with("--cert-dir=") {
                    format!("--cert-dir={}", dir.join("pki").display())
                } else {
                    a.clone()
                }
            })
            .collect();
        let admin_kubeconfig = dir.join("admin.kubeconfig");
        let dns_kubeconfig = dir.join("dns.kubeconfig");
        write_kubeconfig(&admin_kubeconfig, &url, ADMIN_TOKEN, &format!("replica{n}"));
        write_kubeconfig(&dns_kubeconfig, &url, DNS_TOKEN, &format!("replica{n}"));
        let mut api = ApiServer {
            child: None,
            args,
            log: dir.join("kube-apiserver.log"),
            url,
            admin_kubeconfig,
            dns_kubeconfig,
        };
        api.start();
        self.apiservers.push(api);
        n
    }

    /// A scratch directory that lives as long as the control plane.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

fn write_kubeconfig(path: &Path, server: &str, token: &str, name: &str) {
    let mut f = std::fs::File::create(path).unwrap();
    write!(
        f,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\n\
users:\n- name: user\n  user:\n    token: {token}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: user\ncurrent-context: {name}\n"
    )
    .unwrap();
}

/// Creates every CustomResourceDefinition of the multi-document YAML file
/// `path` and waits until each is established.
pub async fn install_crd_file(client: &kube::Client, path: &Path) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()));
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        let crd: CustomResourceDefinition = serde_json::from_value(doc)
            .unwrap_or_else(|e| panic!("{}: not a CRD: {e}", path.display()));
        create_crd(client, &crd).await;
    }
}

/// Applies every CRD in `crds/` and waits until each is established.
pub async fn install_crds(client: &kube::Client) {
    for crd in clusterset_dns::api::crds::all() {
        create_crd(client, &crd).await;
    }
}

/// Creates `crd` (one that exists already is fine) and waits up to 30 s
/// until it is established.
async fn create_crd(
    client: &kube::Client,
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) {
    use kube::api::{Api, PostParams};
    use kube::runtime::wait::{await_condition, conditions};
    let api = Api::all(client.clone());
    let name = crd.metadata.name.clone().unwrap_or_default();
    match api.create(&PostParams::default(), crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating CRD {name}: {e}"),
    }
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(api, &name, conditions::is_crd_established()),
    )
    .await
    .unwrap_or_else(|_| panic!("CRD {name} not established in 30 s"))
    .unwrap();
}

/// A running CoreDNS, killed on drop.
pub struct CoreDns {
    child: Child,
    /// Its DNS address.
    pub addr: std::net::SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for CoreDns {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

impl CoreDns {
    /// Starts CoreDNS with `corefile`, in which `{port}` is replaced by a
    /// free port; `addr` is that port on 127.0.0.1.
    pub fn start(corefile: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_udp_and_tcp_port();
        let conf = dir.path().join("Corefile");
        std::fs::write(&conf, corefile.replace("{port}", &port.to_string())).unwrap();
        let log = dir.path().join("coredns.log");
        let child = spawn(
            &bin_dir().join("coredns"),
            &["-conf".into(), conf.display().to_string()],
            &log,
        );
        Self {
            child,
            addr: ([127, 0, 0, 1], port).into(),
            log,
            _dir: dir,
        }
    }

    /// CoreDNS's output so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Creates every object of a multi-document manifest (expanding `kind:
/// List`) through the dynamic API, creating missing namespaces first.
pub async fn apply_manifest(client: &kube::Client, text: &str) {
    use kube::api::{Api, DynamicObject, PostParams};
    use kube::discovery::{Discovery, Scope};
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(text).unwrap();
    let mut objects = Vec::new();
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        if doc["kind"] == "List" {
            objects.extend(doc["items"].as_array().cloned().unwrap_or_default());
        } else {
            objects.push(doc);
        }
    }
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    for object in objects {
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        let types = object.types.clone().unwrap();
        let (group, version) = types
            .api_version
            .rsplit_once('/')
            .unwrap_or(("", &types.api_version));
        let gvk = kube::api::GroupVersionKind::gvk(group, version, &types.kind);
        let (resource, caps) = discovery
            .resolve_gvk(&gvk)
            .unwrap_or_else(|| panic!("{gvk:?} not served"));
        let api: Api<DynamicObject> = if caps.scope == Scope::Namespaced {
            let ns = object
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let namespace = k8s_openapi::api::core::v1::Namespace {
                metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    name: Some(ns.clone()),
                    ..Default::default()
                },
                ..Default::default()
            };
            let _ = namespaces.create(&PostParams::default(), &namespace).await;
            Api::namespaced_with(client.clone(), &ns, &resource)
        } else {
            Api::all_with(client.clone(), &resource)
        };
        api.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("creating {gvk:?}: {e}"));
    }
}

/// Writes `<cluster dir>/ca.crt`: the last certificate of the apiserver's
/// self-generated `pki/apiserver.crt`, which holds the serving certificate
/// followed by the CA that signed it. (The whole file is not a valid root CA
/// bundle: kcm's ClusterTrustBundle publisher rejects the leaf, "entry 0 does
/// not have the CA bit set".)
fn write_root_ca(cluster: &Cluster) -> PathBuf {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    let serving = cluster.dir.join("pki/apiserver.crt");
    let text = std::fs::read_to_string(&serving)
        .unwrap_or_else(|e| panic!("reading {}: {e}", serving.display()));
    assert!(
        text.matches(BEGIN).count() >= 2,
        "{} does not hold two certificates (the serving cert and its CA)",
        serving.display()
    );
    let at = text.rfind(BEGIN).unwrap();
    let ca = cluster.dir.join("ca.crt");
    std::fs::write(&ca, &text[at..]).unwrap();
    ca
}

/// kube-controller-manager, kube-scheduler and kwok for `cluster`, in start
/// order (they are stopped in reverse: kwok first).
fn start_member_processes(cluster: &Cluster, sa_key: &Path, network: &Network) -> Vec<Process> {
    let d = &cluster.dir;
    let kubeconfig = cluster.admin_kubeconfig.display().to_string();
    let auth = [
        format!("--kubeconfig={kubeconfig}"),
        format!("--authentication-kubeconfig={kubeconfig}"),
        format!("--authorization-kubeconfig={kubeconfig}"),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
    ];
    let mut kcm = auth.to_vec();
    kcm.extend([
        format!("--secure-port={}", free_port()),
        format!("--cert-dir={}", d.join("kcm-pki").display()),
        // Signs the tokens of `kubernetes.io/service-account-token` Secrets
        // (the apiserver's --service-account-signing-key-file).
        format!("--service-account-private-key-file={}", sa_key.display()),
        // The CA of the apiserver's self-signed serving certificate: it goes
        // into token Secrets' ca.crt, the kube-root-ca.crt ConfigMaps and the
        // kube-apiserver-serving ClusterTrustBundle.
        format!("--root-ca-file={}", write_root_ca(cluster).display()),
        "--use-service-account-credentials=false".into(),
        format!("--cluster-name={}", cluster.name),
        format!(
            "--service-cluster-ip-range={}",
            cluster.spec.service_cidrs.join(",")
        ),
        // All controllers but node IPAM (kwok assigns pod IPs; Nodes get
        // spec.podCIDRs from us). node-lifecycle-controller must stay on: it
        // removes the not-ready NoSchedule taint new Nodes carry.
        "--controllers=*,-node-ipam-controller".into(),
    ]);
    let mut scheduler = auth.to_vec();
    scheduler.push(format!("--secure-port={}", free_port()));
    let kwok_port = free_port();
    let mut kwok = vec![
        format!("--kubeconfig={kubeconfig}"),
        format!("--config={}", binary("kwok-stages.yaml").display()),
        "--manage-all-nodes=true".into(),
        format!("--cidr={}", cluster.spec.pod_cidrs[0]),
        "--node-ip=127.0.0.1".into(),
        format!("--server-address=127.0.0.1:{kwok_port}"),
        // The heartbeat-with-lease Stage updates Node status only every
        // ~10 min: the heartbeat kube-controller-manager watches is the
        // Lease, which kwok renews only with this flag. Without it every
        // Node turns NotReady ~50 s after start (node-monitor-grace-period)
        // and node-lifecycle-controller marks all its pods NotReady for
        // good, which only a cluster that lives past a minute notices.
        "--node-lease-duration-seconds=40".into(),
    ];
    let mut kwok_env = Vec::new();
    if let Some(exec_path) = &network.exec_path {
        // The apiserver reaches the kubelet API (exec) at the Node's
        // address (kwok's --node-ip) and its reported port (--node-port);
        // it does not verify the certificate.
        let (cert, key) = (d.join("kwok.crt"), d.join("kwok.key"));
        let ok = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
            ])
            .args([
                "-subj",
                "/CN=kwok",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "openssl could not make kwok's serving certificate");
        kwok.extend([
            format!("--node-port={kwok_port}"),
            format!("--tls-cert-file={}", cert.display()),
            format!("--tls-private-key-file={}", key.display()),
            "--enable-crds=Exec".into(),
        ]);
        let path = std::env::var("PATH").unwrap_or_default();
        kwok_env.push(("PATH", format!("{}:{path}", exec_path.display())));
    }
    let kcm = Process::start(
        "kube-controller-manager",
        &kcm,
        d.join("kube-controller-manager.log"),
    );
    let scheduler = Process::start("kube-scheduler", &scheduler, d.join("kube-scheduler.log"));
    let kwok = Process::start_with_env("kwok", &kwok, &kwok_env, d.join("kwok.log"));
    vec![kcm, scheduler, kwok]
}

// ---------------------------------------------------------------------------
// The controller: shipped manifests, identity, peers and the process.
// ---------------------------------------------------------------------------

/// The namespace the shipped manifests (`deploy/controller.yaml`,
/// `deploy/peer-reader.yaml`) install into, where peer Secrets and Leases live.
pub const CONTROLLER_NAMESPACE: &str = "clusterset-dns";
/// The controller's ServiceAccount in `deploy/controller.yaml`.
pub const CONTROLLER_SA: &str = "clusterset-dns-controller";
/// The ServiceAccount of `deploy/peer-reader.yaml`, whose tokens peers use.
pub const PEER_READER_SA: &str = "clusterset-dns-peer-reader";
/// Label that makes a Secret in [`CONTROLLER_NAMESPACE`] a peer.
pub const PEER_LABEL: &str = "clusterset-dns.io/peer";
/// Field manager of everything the test helpers server-side apply.
pub const TEST_FIELD_MANAGER: &str = "clusterset-dns-tests";

/// `<repo>/deploy/<name>`.
pub fn deploy_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(name)
}

/// Server-side applies (field manager [`TEST_FIELD_MANAGER`], forced) every
/// document of the manifest at `path`, in file order, exactly as shipped:
/// applying twice, or two files that both declare the namespace, is fine
/// (unlike [`apply_manifest`], which creates).
///
/// Every kind is applied, the controller's Deployment included: on an
/// apiserver-only cluster it is just stored (no controller runs it), and on a
/// member cluster kwok turns it into two fake Running pods whose containers
/// never run. Neither touches what the tests look at, and neither holds the
/// leader Lease, so tests run the real controller with
/// [`spawn_controller`] (`--leader-election=false`).
pub async fn apply_file(client: &kube::Client, path: &Path) {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    apply_yaml(client, &text)
        .await
        .unwrap_or_else(|e| panic!("applying {}: {e}", path.display()));
}

/// Server-side applies every document of `text` (see [`apply_file`]); the
/// error names the document that failed.
pub async fn apply_yaml(client: &kube::Client, text: &str) -> Result<(), String> {
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    use kube::discovery::{Discovery, Scope};
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(text).map_err(|e| format!("parsing YAML: {e}"))?;
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(|e| format!("API discovery: {e}"))?;
    let params = PatchParams::apply(TEST_FIELD_MANAGER).force();
    for (i, doc) in docs.into_iter().filter(|d| !d.is_null()).enumerate() {
        let object: DynamicObject = serde_json::from_value(doc.clone())
            .map_err(|e| format!("document {i}: not an object: {e}"))?;
        let types = object
            .types
            .clone()
            .ok_or_else(|| format!("document {i}: no apiVersion/kind"))?;
        let name = object.metadata.name.clone().unwrap_or_default();
        let what = format!("document {i} ({} {name})", types.kind);
        let (group, version) = types
            .api_version
            .rsplit_once('/')
            .unwrap_or(("", &types.api_version));
        let gvk = kube::api::GroupVersionKind::gvk(group, version, &types.kind);
        let (resource, caps) = discovery
            .resolve_gvk(&gvk)
            .ok_or_else(|| format!("{what}: {gvk:?} not served"))?;
        let api: Api<DynamicObject> = if caps.scope == Scope::Namespaced {
            let ns = object.metadata.namespace.as_deref().unwrap_or("default");
            Api::namespaced_with(client.clone(), ns, &resource)
        } else {
            Api::all_with(client.clone(), &resource)
        };
        api.patch(&name, &params, &Patch::Apply(&doc))
            .await
            .map_err(|e| format!("{what}: {e}"))?;
    }
    Ok(())
}

/// Creates or updates the two `about.k8s.io/v1beta1` ClusterProperties the
/// controller reads its identity from: `cluster.clusterset.k8s.io` =
/// `cluster_id` and `clusterset.k8s.io` = `clusterset`.
pub async fn set_cluster_properties(client: &kube::Client, cluster_id: &str, clusterset: &str) {
    use clusterset_dns::api::well_known::{CLUSTER_ID_PROPERTY, CLUSTERSET_PROPERTY};
    use clusterset_dns::api::{ClusterProperty, ClusterPropertySpec};
    use kube::api::{Api, Patch, PatchParams};
    let api: Api<ClusterProperty> = Api::all(client.clone());
    let params = PatchParams::apply(TEST_FIELD_MANAGER).force();
    for (name, value) in [
        (CLUSTER_ID_PROPERTY, cluster_id),
        (CLUSTERSET_PROPERTY, clusterset),
    ] {
        let property = ClusterProperty::new(
            name,
            ClusterPropertySpec {
                value: value.into(),
            },
        );
        api.patch(name, &params, &Patch::Apply(&property))
            .await
            .unwrap_or_else(|e| panic!("setting ClusterProperty {name}={value}: {e}"));
    }
}

/// The apiserver URL in `cluster`'s admin kubeconfig.
pub fn apiserver_url(cluster: &Cluster) -> String {
    let kubeconfig = kube::config::Kubeconfig::read_from(&cluster.admin_kubeconfig).unwrap();
    kubeconfig.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.server.clone())
        .expect("admin kubeconfig names its server")
}

/// A kubeconfig (YAML text) for ServiceAccount `namespace/service_account`
/// of `cluster`: a `TokenRequest` token valid for `ttl_seconds` (the
/// apiserver refuses less than 600), the apiserver's URL, and its CA inline
/// (`certificate-authority-data`, the CA of the apiserver's self-signed
/// serving certificate), so TLS is verified, unlike the admin kubeconfig.
/// Self-contained: fit for a peer Secret's `data.kubeconfig`. The
/// ServiceAccount must exist (the test apiservers run no ServiceAccount
/// controller, but the shipped manifests declare theirs).
pub async fn service_account_kubeconfig(
    cluster: &Cluster,
    namespace: &str,
    service_account: &str,
    ttl_seconds: i64,
) -> String {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    use kube::api::{Api, PostParams};
    let client = cluster.admin_client().await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client, namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(ttl_seconds),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = accounts
        .create_token_request(service_account, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{}: TokenRequest for {namespace}/{service_account}: {e}",
                cluster.name
            )
        })
        .status
        .expect("TokenRequest answered with a status")
        .token;
    let ca = std::fs::read(write_root_ca(cluster)).unwrap();
    // ByteString serializes as base64, which spares a dependency.
    let ca = serde_json::to_value(k8s_openapi::ByteString(ca)).unwrap();
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": cluster.name,
            "cluster": {"server": apiserver_url(cluster), "certificate-authority-data": ca},
        }],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [{
            "name": cluster.name,
            "context": {"cluster": cluster.name, "user": service_account},
        }],
        "current-context": cluster.name,
    });
    // JSON is YAML; a kubeconfig file may be either.
    serde_json::to_string_pretty(&kubeconfig).unwrap()
}

/// A client from kubeconfig text (as [`service_account_kubeconfig`] returns).
pub async fn client_from_yaml(kubeconfig_yaml: &str) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(kubeconfig_yaml).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// Creates or replaces peer Secret `peer-<peer_id>` in [`CONTROLLER_NAMESPACE`]
/// of the local cluster: label `clusterset-dns.io/peer: "true"` and
/// `data.kubeconfig` = `kubeconfig_yaml` (a read-only kubeconfig of the
/// peer, from [`service_account_kubeconfig`] with [`PEER_READER_SA`]).
/// Applying it again with a new kubeconfig is a rotation.
pub async fn add_peer_secret(local_client: &kube::Client, peer_id: &str, kubeconfig_yaml: &str) {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, Patch, PatchParams};
    let name = format!("peer-{peer_id}");
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": CONTROLLER_NAMESPACE,
            "labels": {PEER_LABEL: "true"},
        },
        "type": "Opaque",
        "stringData": {"kubeconfig": kubeconfig_yaml},
    }))
    .unwrap();
    Api::<Secret>::namespaced(local_client.clone(), CONTROLLER_NAMESPACE)
        .patch(
            &name,
            &PatchParams::apply(TEST_FIELD_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap_or_else(|e| panic!("applying Secret {CONTROLLER_NAMESPACE}/{name}: {e}"));
}

/// Deletes peer Secret `peer-<peer_id>` from [`CONTROLLER_NAMESPACE`];
/// a missing one is fine.
pub async fn remove_peer_secret(local_client: &kube::Client, peer_id: &str) {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, DeleteParams};
    let name = format!("peer-{peer_id}");
    match Api::<Secret>::namespaced(local_client.clone(), CONTROLLER_NAMESPACE)
        .delete(&name, &DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("deleting Secret {CONTROLLER_NAMESPACE}/{name}: {e}"),
    }
}

/// Installs the controller's prerequisites into `cluster` exactly as shipped:
/// the CRDs, `deploy/controller.yaml` (namespace, local RBAC, Deployment) and
/// `deploy/peer-reader.yaml` (the role peers read this cluster with). Writes
/// `<cluster dir>/controller.kubeconfig`, a one-hour TokenRequest kubeconfig
/// of the `clusterset-dns-controller` ServiceAccount, and returns its path:
/// pass it to [`spawn_controller`] so the controller runs with exactly the
/// shipped local role. ClusterProperties are separate
/// ([`set_cluster_properties`]).
pub async fn install_controller(cluster: &Cluster) -> PathBuf {
    let client = cluster.admin_client().await;
    install_crds(&client).await;
    apply_file(&client, &deploy_file("controller.yaml")).await;
    apply_file(&client, &deploy_file("peer-reader.yaml")).await;
    let kubeconfig =
        service_account_kubeconfig(cluster, CONTROLLER_NAMESPACE, CONTROLLER_SA, 3600).await;
    let path = cluster.dir.join("controller.kubeconfig");
    std::fs::write(&path, kubeconfig).unwrap();
    path
}

/// A `clusterset-dns controller` process, killed on drop (its log tail is
/// printed then if the test is panicking).
pub struct ControllerProcess {
    child: Mutex<Child>,
    log: PathBuf,
    admin_port: u16,
    /// The arguments after the binary, for messages.
    pub args: Vec<String>,
}

impl ControllerProcess {
    /// Everything it has written to stdout and stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its log file (in the cluster's directory).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The loopback port of its admin server (`/ready`, `/health`, `/metrics`).
    pub fn admin_port(&self) -> u16 {
        self.admin_port
    }

    /// `http://127.0.0.1:<admin port><path>`.
    pub fn admin_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.admin_port)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.lock().unwrap().id()
    }

    /// Its exit status if it has exited.
    pub fn exited(&self) -> Option<std::process::ExitStatus> {
        self.child.lock().unwrap().try_wait().ok().flatten()
    }

    /// Panics, with the log, if it has exited.
    pub fn assert_running(&self) {
        if let Some(status) = self.exited() {
            panic!(
                "clusterset-dns {} exited with {status}; log:\n{}",
                self.args.join(" "),
                self.log()
            );
        }
    }

    /// Waits until `GET /ready` on the admin port answers 200; panics with
    /// the log on timeout or if the process exits.
    pub fn wait_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            self.assert_running();
            let ok = Command::new("curl")
                .args(["-sf", "-o", "/dev/null", "--max-time", "2"])
                .arg(self.admin_url("/ready"))
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "controller not ready in {timeout:?}; log:\n{}",
                tail(&self.log)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Kills it (SIGKILL) and waits for it; also what drop does.
    pub fn kill(&self) {
        stop(&mut self.child.lock().unwrap());
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        stop(self.child.get_mut().unwrap());
        if std::thread::panicking() {
            eprintln!(
                "---- controller log {} ----\n{}",
                self.log.display(),
                tail(&self.log)
            );
        }
    }
}

/// Starts `clusterset-dns controller --leader-election=false --admin-listen
/// 127.0.0.1:<free port> <extra_args>` for `cluster` with `KUBECONFIG` =
/// `kubeconfig_path` (usually [`install_controller`]'s) and `POD_NAMESPACE`
/// unset (so `--namespace` defaults to `clusterset-dns` unless `extra_args`
/// says otherwise). Output goes to `<cluster dir>/controller-<n>.log`; `n`
/// counts up, so several controllers per cluster keep separate logs. Does not
/// wait: see [`ControllerProcess::wait_ready`]. `--leader-election=false` is
/// left out when `extra_args` sets `--leader-election=…` itself.
pub fn spawn_controller(
    cluster: &Cluster,
    kubeconfig_path: &Path,
    extra_args: &[&str],
) -> ControllerProcess {
    static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let admin_port = free_port();
    let mut args: Vec<String> = vec!["controller".into()];
    if !extra_args
        .iter()
        .any(|a| a.starts_with("--leader-election"))
    {
        args.push("--leader-election=false".into());
    }
    args.extend(["--admin-listen".into(), format!("127.0.0.1:{admin_port}")]);
    args.extend(extra_args.iter().map(|a| a.to_string()));
    let log = cluster.dir.join(format!("controller-{n}.log"));
    // A profiler to run the controller under (`heaptrack`, `valgrind
    // --tool=massif`…), for finding where memory goes; the pid is then the
    // wrapper's.
    let mut command = match std::env::var_os("CLUSTERSET_DNS_CONTROLLER_WRAPPER") {
        Some(wrapper) => {
            let mut command = Command::new(wrapper);
            command.arg(clusterset_dns_binary());
            command
        }
        None => Command::new(clusterset_dns_binary()),
    };
    command
        .args(&args)
        .env("KUBECONFIG", kubeconfig_path)
        .env_remove("POD_NAMESPACE");
    let child = support::spawn_logged_command(&mut command, &log, false);
    ControllerProcess {
        child: Mutex::new(child),
        log,
        admin_port,
        args,
    }
}

/// A `clusterset-dns serve` process, killed on drop.
pub struct Serve {
    child: Child,
    /// Its DNS address (UDP and TCP).
    pub dns: std::net::SocketAddr,
    /// Its admin address (`/ready`, `/metrics`, `/explain`).
    pub admin: std::net::SocketAddr,
    log: PathBuf,
}

impl Drop for Serve {
    fn drop(&mut self) {
        stop(&mut self.child);
        if std::thread::panicking() {
            eprintln!(
                "---- serve log {} ----\n{}",
                self.log.display(),
                tail(&self.log)
            );
        }
    }
}

impl Serve {
    /// `clusterset-dns serve` for `cluster` with `kubeconfig` (the role of
    /// deploy/rbac.yaml), DNS and admin on free loopback ports, log
    /// `<cluster dir>/serve.log`. Does not wait: see [`Serve::wait_ready`].
    pub fn spawn(cluster: &Cluster, kubeconfig: &Path) -> Self {
        let dns: std::net::SocketAddr = ([127, 0, 0, 1], free_udp_and_tcp_port()).into();
        let admin: std::net::SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let args: Vec<String> = vec![
            "serve".into(),
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--dns-listen".into(),
            dns.to_string(),
            "--admin-listen".into(),
            admin.to_string(),
            "--udp-workers".into(),
            "1".into(),
        ];
        let log = cluster.dir.join("serve.log");
        let child = spawn(&clusterset_dns_binary(), &args, &log);
        Self {
            child,
            dns,
            admin,
            log,
        }
    }

    /// Waits until `/ready` answers 200.
    pub fn wait_ready(&self, timeout: Duration) {
        wait_http_ok(
            &format!("http://{}/ready", self.admin),
            timeout,
            "clusterset-dns serve",
            &self.log,
        );
    }
}

/// Writes `<cluster dir>/<file>.kubeconfig`: a TokenRequest kubeconfig of
/// ServiceAccount `clusterset-dns/<service_account>` valid `ttl_seconds`.
pub async fn write_token_kubeconfig(
    cluster: &Cluster,
    service_account: &str,
    file: &str,
    ttl_seconds: i64,
) -> PathBuf {
    let kubeconfig =
        service_account_kubeconfig(cluster, CONTROLLER_NAMESPACE, service_account, ttl_seconds)
            .await;
    let path = cluster.dir.join(format!("{file}.kubeconfig"));
    std::fs::write(&path, kubeconfig).unwrap();
    path
}

/// Joins every pair of clusters the supported way: `clusterset-dns peer add`
/// with the two admin kubeconfigs (docs/controller.md, "Joining clusters"),
/// which makes the peer-reader token in the peer and the peer Secret here.
pub async fn join_peers(clusters: &[Cluster]) {
    let binary = clusterset_dns_binary();
    for local in clusters {
        for peer in clusters.iter().filter(|p| p.name != local.name) {
            let output = tokio::process::Command::new(&binary)
                .arg("peer")
                .arg("add")
                .arg("--kubeconfig")
                .arg(&local.admin_kubeconfig)
                .arg("--peer-kubeconfig")
                .arg(&peer.admin_kubeconfig)
                .output()
                .await
                .expect("running clusterset-dns peer add");
            assert!(
                output.status.success(),
                "clusterset-dns peer add ({} reads {}) failed:\n{}{}",
                local.name,
                peer.name,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}
