//! Starting clusters: etcd, the kube-apiservers, and for member clusters
//! kube-controller-manager, kube-scheduler and kwok with fake Nodes;
//! [`ControlPlane`], [`Cluster`] and what the tests ask of them.

use super::*;

/// What member clusters need besides etcd and kube-apiserver.
pub(crate) const MEMBER_FILES: [&str; 4] = [
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "kwok-stages.yaml",
];

/// kwok's `Exec` CustomResourceDefinition, copied from its module by
/// `scripts/testenv-build.sh`: per-pod exec settings (the data plane's pod
/// network namespace).
pub(crate) const KWOK_CRDS: &str = "kwok-crds.yaml";

/// Where a [`ControlPlane`]'s apiservers listen and how its kwok serves
/// `kubectl exec`; the default is loopback and no exec.
#[derive(Clone, Debug, Default)]
pub(crate) struct Network {
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

/// One kube-apiserver.
pub(crate) struct ApiServer {
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
    pub(crate) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop(&mut child);
        }
    }

    /// The process id while it runs (for `kill -STOP` / `kill -CONT`: a
    /// hung apiserver rather than a stopped one).
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `signal` (`"STOP"`, `"CONT"`) to the running apiserver.
    pub(crate) fn signal(&self, signal: &str) {
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
    pub(crate) fn start_with(&mut self, extra: &[&str]) {
        self.args.extend(extra.iter().map(|flag| flag.to_string()));
        self.start();
    }

    /// Starts it again on the same port without the flags that start with
    /// `prefix` (an earlier [`ApiServer::start_with`]'s), and waits until
    /// it is ready.
    pub(crate) fn start_without(&mut self, prefix: &str) {
        self.args.retain(|flag| !flag.starts_with(prefix));
        self.start();
    }

    /// Starts it again on the same port and waits until it is ready.
    pub(crate) fn start(&mut self) {
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
    pub(crate) async fn admin_client(&self) -> kube::Client {
        client_from(&self.admin_kubeconfig).await
    }
}

/// Builds a kube client from a kubeconfig file.
pub(crate) async fn client_from(path: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// How to run one cluster of a [`ControlPlane`].
#[derive(Clone, Debug)]
pub(crate) struct ClusterSpec {
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
    /// Fake Nodes created (and waited for) at start; member clusters only:
    /// `kwok-node-<n>` in `topology.kubernetes.io/zone` `zone-a` for even
    /// `n`, `zone-b` for odd.
    pub nodes: usize,
    /// Install `crds/` at start (all but `tests/crds_install.rs`, which
    /// installs them itself: deleting freshly installed CRDs waits on the
    /// apiserver's finalizer, whose back-off outgrew 90 s on a loaded CI
    /// machine).
    pub crds: bool,
}

impl ClusterSpec {
    /// Just an apiserver, service CIDR 10.0.0.0/24 (what [`ControlPlane::start`] runs).
    pub(crate) fn api_only() -> Self {
        Self {
            service_cidrs: vec!["10.0.0.0/24".into()],
            pod_cidrs: Vec::new(),
            member: false,
            nodes: 0,
            crds: true,
        }
    }

    /// [`ClusterSpec::api_only`] without `crds/`.
    pub(crate) fn api_only_bare() -> Self {
        Self {
            crds: false,
            ..Self::api_only()
        }
    }

    /// Member cluster number `i` (0..=50), IPv4: services 10.(100+i).0.0/16,
    /// pods 10.(200+i).0.0/16, two fake Nodes.
    pub(crate) fn member(i: u8) -> Self {
        assert!(i <= 50, "cluster number {i} out of range");
        Self {
            service_cidrs: vec![format!("10.{}.0.0/16", 100 + i)],
            pod_cidrs: vec![format!("10.{}.0.0/16", 200 + i)],
            member: true,
            nodes: 2,
            crds: true,
        }
    }

    /// Like [`ClusterSpec::member`], plus IPv6: services fd00:100:i::/112,
    /// pods fd00:200:i::/64.
    pub(crate) fn member_dual_stack(i: u8) -> Self {
        let mut spec = Self::member(i);
        spec.service_cidrs.push(format!("fd00:100:{i:x}::/112"));
        spec.pod_cidrs.push(format!("fd00:200:{i:x}::/64"));
        spec
    }

    /// Whether `ip` is in one of the service CIDRs.
    pub(crate) fn in_service_cidrs(&self, ip: &str) -> bool {
        self.service_cidrs.iter().any(|c| cidr_contains(c, ip))
    }

    /// Whether `ip` is in one of the pod CIDRs.
    pub(crate) fn in_pod_cidrs(&self, ip: &str) -> bool {
        self.pod_cidrs.iter().any(|c| cidr_contains(c, ip))
    }
}

/// Whether `cidr` (like `10.1.0.0/16` or `fd00::/64`) contains `ip`.
/// False for mixed families or anything unparsable.
pub(crate) fn cidr_contains(cidr: &str, ip: &str) -> bool {
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

/// One cluster of a [`ControlPlane`]: its apiserver is `apiservers[index]`.
pub(crate) struct Cluster {
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
    pub(crate) async fn admin_client(&self) -> kube::Client {
        client_from(&self.admin_kubeconfig).await
    }

    /// Panics (with the log) if one of its controllers/kwok has exited.
    pub(crate) fn assert_running(&self) {
        for p in &self.processes {
            p.assert_running();
        }
    }

    /// The tail of each of its logs (apiserver included).
    pub(crate) fn log_tails(&self) -> String {
        let mut out = String::new();
        let mut logs = vec![self.dir.join("kube-apiserver.log")];
        logs.extend(self.processes.iter().map(|p| p.log.clone()));
        for log in logs {
            out += &format!("==> {} <==\n{}\n", log.display(), tail(&log));
        }
        out
    }

    /// [`support::wait_for`] with this cluster's context: on timeout the
    /// panic also holds the tail of this cluster's logs, and it panics at
    /// once if a controller or kwok exits.
    pub(crate) async fn wait_for<T, F, Fut>(&self, what: &str, timeout: Duration, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, String>>,
    {
        support::poll_until(timeout, || {
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
    pub(crate) async fn create_node(&self, client: &kube::Client, name: &str, zone: &str) {
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
    pub(crate) async fn wait_nodes_schedulable(&self, client: &kube::Client, count: usize) {
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
    pub(crate) async fn wait_deployment_ready(
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
pub(crate) fn node_schedulable(node: &k8s_openapi::api::core::v1::Node) -> bool {
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
pub(crate) fn pod_running_ready(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
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
pub(crate) struct ControlPlane {
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
    pub(crate) async fn start(clusters: usize) -> Self {
        Self::start_with(&vec![ClusterSpec::api_only(); clusters]).await
    }

    /// Starts `n` member clusters (see [`ClusterSpec::member`]); cluster `i`
    /// is dual-stack when `dual_stack(i)`.
    pub(crate) async fn start_members(n: u8, dual_stack: impl Fn(u8) -> bool) -> Self {
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
    /// installs `crds/` in each (unless its spec says not), then for member clusters starts
    /// kube-controller-manager, kube-scheduler and kwok, creates the fake
    /// Nodes and waits until they are schedulable.
    pub(crate) async fn start_with(specs: &[ClusterSpec]) -> Self {
        Self::start_networked(specs, &Network::default()).await
    }

    /// [`ControlPlane::start_with`], with the apiservers on `network.bind`
    /// and kwok serving `kubectl exec` through `network.exec_path` (what the
    /// routed data plane of `tests/dataplane` needs).
    pub(crate) async fn start_networked(specs: &[ClusterSpec], network: &Network) -> Self {
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
        for (api, spec) in plane.apiservers.iter().zip(specs) {
            let client = api.admin_client().await;
            if spec.crds {
                install_crds(&client).await;
            }
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
                // Two zones, alternating: a third Node shares zone-a with
                // the first (tests/connectivity.rs: same zone, other node).
                let zone = format!("zone-{}", (b'a' + (n % 2) as u8) as char);
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
    pub(crate) fn start_replica(&mut self, i: usize) -> usize {
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
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id of etcd, which every cluster of the plane shares
    /// (for a bench's CPU and memory figures).
    pub(crate) fn etcd_pid(&self) -> u32 {
        self.etcd.id()
    }
}

pub(super) fn write_kubeconfig(path: &Path, server: &str, token: &str, name: &str) {
    let mut f = std::fs::File::create(path).unwrap();
    write!(
        f,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\n\
users:\n- name: user\n  user:\n    token: {token}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: user\ncurrent-context: {name}\n"
    )
    .unwrap();
}

/// Writes `<cluster dir>/ca.crt`: the last certificate of the apiserver's
/// self-generated `pki/apiserver.crt`, which holds the serving certificate
/// followed by the CA that signed it. (The whole file is not a valid root CA
/// bundle: kcm's ClusterTrustBundle publisher rejects the leaf, "entry 0 does
/// not have the CA bit set".)
pub(super) fn write_root_ca(cluster: &Cluster) -> PathBuf {
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
pub(super) fn start_member_processes(
    cluster: &Cluster,
    sa_key: &Path,
    network: &Network,
) -> Vec<Process> {
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
