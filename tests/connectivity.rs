//! Packets through the clusterset IP: the connectivity checks of the
//! KEP-1645 test plan, on three member clusters with a data plane
//! (`tests/dataplane`: pods in network namespaces, a real kube-proxy per
//! node, pod CIDRs routed between clusters, cluster DNS at the kube-dns
//! ClusterIP), and per cluster the controller, clusterset-dns and CoreDNS as
//! shipped. Clusters a and c are IPv4, b is dual-stack.
//!
//! Every connection is made from a client pod with `kubectl exec … -- sh -c
//! 'socat …'`: the name is resolved by the pod's resolver (kube-proxy →
//! CoreDNS → clusterset-dns), the clusterset IP is translated by kube-proxy,
//! and the answer names the pod and cluster that served it. The clusterset
//! starts once; each behaviour below is a named test in a namespace of its
//! own, run in order (the lost cluster last).

mod controlplane;
mod dataplane;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use controlplane::{ClusterSpec, ControllerProcess, CoreDns, Serve};
use dataplane::DataPlane;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use libtest_mimic::{Arguments, Failed, Trial};

/// Cluster ids (`ClusterProperty cluster.clusterset.k8s.io`), by index.
const IDS: [&str; 3] = ["cluster-a", "cluster-b", "cluster-c"];
/// The peers' grace period: how long a lost cluster's endpoints stay.
const GRACE: &str = "10s";
/// How long any convergence may take.
const CONVERGE: Duration = Duration::from_secs(60);

/// One member cluster's MCS processes.
struct Member {
    controller: ControllerProcess,
    serve: Serve,
    _coredns: CoreDns,
}

/// The clusterset every behaviour runs on.
struct Clusterset {
    members: Vec<Member>,
    dp: DataPlane,
}

fn main() {
    let args = Arguments::from_args();
    let runtime = Arc::new(
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
    );
    // Behaviours share the clusterset and one runtime: one at a time.
    let args = Arguments {
        test_threads: Some(1),
        ..args
    };
    let behaviours: Vec<(&str, Behaviour)> = vec![
        ("reach_and_route", |cs| Box::pin(reach_and_route(cs))),
        ("not_exported_not_reachable", |cs| {
            Box::pin(not_exported_not_reachable(cs))
        }),
        ("local_service_not_impacted", |cs| {
            Box::pin(local_service_not_impacted(cs))
        }),
        ("port_conflicts", |cs| Box::pin(port_conflicts(cs))),
        ("headless_per_pod_names", |cs| {
            Box::pin(headless_per_pod_names(cs))
        }),
        ("ports_kept_current", |cs| Box::pin(ports_kept_current(cs))),
        ("exec_and_dns_inside_pods", |cs| {
            Box::pin(exec_and_dns_inside_pods(cs))
        }),
        ("leftovers_of_a_killed_run_are_removed", |cs| {
            Box::pin(leftovers_of_a_killed_run_are_removed(cs))
        }),
        ("lost_cluster_failover", |cs| {
            Box::pin(lost_cluster_failover(cs))
        }),
    ];
    let selected: Vec<&str> = behaviours
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| args.filter.as_deref().is_none_or(|f| name.contains(f)))
        .filter(|name| !args.skip.iter().any(|s| name.contains(s.as_str())))
        .collect();
    let host_before = dataplane::host_network_snapshot();
    let clusterset = if args.list || selected.is_empty() {
        None
    } else {
        Some(Arc::new(std::sync::Mutex::new(
            runtime.block_on(Clusterset::start()),
        )))
    };
    let trials = behaviours
        .into_iter()
        .map(|(name, behaviour)| {
            let (runtime, clusterset) = (runtime.clone(), clusterset.clone());
            Trial::test(name, move || {
                let cs = clusterset.expect("the clusterset is up for selected tests");
                // A failed behaviour poisons the lock; the next one still runs.
                let mut cs = cs.lock().unwrap_or_else(|e| e.into_inner());
                runtime.block_on(behaviour(&mut cs));
                Ok::<(), Failed>(())
            })
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    if conclusion.has_failed()
        && let Some(cs) = &clusterset
    {
        cs.lock().unwrap_or_else(|e| e.into_inner()).print_logs();
    }
    drop(clusterset);
    drop(runtime);
    // Hygiene: the data plane touched only what it made.
    let host_after = dataplane::host_network_snapshot();
    if host_after != host_before {
        eprintln!(
            "the host's network configuration changed during the run:\n--- before\n{host_before}\n--- after\n{host_after}"
        );
        std::process::exit(101);
    }
    let left: Vec<String> = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("csd{}x", std::process::id())))
        .collect();
    if !left.is_empty() {
        eprintln!("network namespaces left behind: {left:?}");
        std::process::exit(101);
    }
    conclusion.exit();
}

type Behaviour =
    for<'a> fn(&'a mut Clusterset) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>>;

impl Clusterset {
    async fn start() -> Self {
        let t0 = Instant::now();
        let dp = DataPlane::start(&[
            ClusterSpec::member(0),
            ClusterSpec::member_dual_stack(1),
            ClusterSpec::member(2),
        ])
        .await;
        let clusters = &dp.plane.clusters;
        let mut kubeconfigs = Vec::new();
        for (cluster, id) in clusters.iter().zip(IDS) {
            let client = cluster.admin_client().await;
            controlplane::set_cluster_properties(&client, id, "connectivity").await;
            let controller = controlplane::install_controller(cluster).await;
            controlplane::apply_file(&client, &controlplane::deploy_file("rbac.yaml")).await;
            let serve =
                controlplane::write_token_kubeconfig(cluster, "clusterset-dns", "serve", 3600)
                    .await;
            kubeconfigs.push((controller, serve));
        }
        controlplane::join_peers(clusters).await;
        let mut members = Vec::new();
        for (i, (controller, serve)) in kubeconfigs.iter().enumerate() {
            let cluster = &clusters[i];
            let controller = controlplane::spawn_controller(
                cluster,
                controller,
                &[
                    "--peer-grace-period",
                    GRACE,
                    "--startup-sync-timeout",
                    "10s",
                ],
            );
            let serve = Serve::spawn(cluster, serve);
            let coredns = dp.start_cluster_dns(i, serve.dns).await;
            members.push(Member {
                controller,
                serve,
                _coredns: coredns,
            });
        }
        for m in &members {
            m.controller.wait_ready(CONVERGE);
            m.serve.wait_ready(CONVERGE);
        }
        eprintln!(
            "connectivity: clusterset up in {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        Self { members, dp }
    }

    fn print_logs(&self) {
        for (i, m) in self.members.iter().enumerate() {
            eprintln!(
                "---- {} controller ----\n{}",
                IDS[i],
                controlplane::tail(m.controller.log_path())
            );
        }
        for note in self.dp.notes() {
            eprintln!("dataplane note: {note}");
        }
    }

    fn cluster(&self, i: usize) -> &controlplane::Cluster {
        &self.dp.plane.clusters[i]
    }

    async fn client(&self, i: usize) -> kube::Client {
        self.cluster(i).admin_client().await
    }

    /// Server-side applies `yaml` in cluster `i`.
    async fn apply(&self, i: usize, yaml: &str) {
        controlplane::apply_yaml(&self.client(i).await, yaml)
            .await
            .unwrap_or_else(|e| panic!("{}: applying: {e}\n{yaml}", IDS[i]));
    }

    /// `kubectl --context <cluster i> ARGS`; stdout, or a panic with stderr.
    fn kubectl(&self, i: usize, args: &[&str]) -> String {
        let out = std::process::Command::new(controlplane::binary("kubectl"))
            .arg("--kubeconfig")
            .arg(&self.cluster(i).admin_kubeconfig)
            .args(args)
            .output()
            .expect("run kubectl");
        assert!(
            out.status.success(),
            "{}: kubectl {} failed ({}):\n{}{}",
            IDS[i],
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs the server Deployment `name` (`replicas` pods) and its Service
    /// in cluster `i`, namespace `ns`, and waits until every pod listens.
    /// Returns the pods.
    async fn deploy_server(
        &self,
        i: usize,
        ns: &str,
        name: &str,
        replicas: usize,
        service: &str,
    ) -> Vec<Pod> {
        self.apply(i, &server_yaml(ns, name, replicas, IDS[i]))
            .await;
        self.apply(i, service).await;
        self.wait_serving(i, ns, name, replicas).await
    }

    /// Waits until Deployment `ns/name` of cluster `i` has `replicas` ready
    /// pods, each listening on its three ports.
    async fn wait_serving(&self, i: usize, ns: &str, name: &str, replicas: usize) -> Vec<Pod> {
        let client = self.client(i).await;
        let pods = self
            .cluster(i)
            .wait_deployment_ready(&client, ns, name, replicas)
            .await;
        for pod in &pods {
            let pod_name = pod.metadata.name.as_deref().unwrap();
            self.dp.wait_listening(i, ns, pod_name, "tcp", 8080);
            self.dp.wait_listening(i, ns, pod_name, "udp", 8081);
            self.dp.wait_listening(i, ns, pod_name, "tcp", 8082);
        }
        pods
    }

    /// A client pod `client` in namespace `ns` of cluster `i`, running.
    async fn client_pod(&self, i: usize, ns: &str) {
        self.apply(
            i,
            &format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: client\n  namespace: {ns}\nspec:\n  containers:\n  \
                 - name: client\n    image: registry.example/toolbox:1   # never pulled; the command runs on the host\n    \
                 command: [sleep, infinity]\n"
            ),
        )
        .await;
        let deadline = Instant::now() + CONVERGE;
        while self.dp.pod_netns(i, ns, "client").is_none() {
            assert!(
                Instant::now() < deadline,
                "{}: client pod in {ns} never got a network namespace; notes:\n{}",
                IDS[i],
                self.dp.notes().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `count` connections from cluster `i`'s `ns/client` pod to `dial`,
    /// through `kubectl exec`: each answer (`pod-name pod-ip cluster-id`)
    /// or the error of a failed one.
    fn connect(
        &self,
        i: usize,
        ns: &str,
        dial: &Dial<'_>,
        count: usize,
    ) -> Vec<Result<Answer, String>> {
        let Dial {
            target,
            proto,
            family,
            port,
        } = *dial;
        let address = match proto {
            "udp" => format!("UDP{family}:{target}:{port}"),
            _ => format!("TCP{family}:{target}:{port}"),
        };
        // UDP needs a datagram to answer; TCP answers on connect.
        let send = if proto == "udp" { "echo ping" } else { "true" };
        let script = format!(
            "for n in $(seq {count}); do \
               if r=$({send} | socat -T 2 -t 2 - {address} 2>&1); then echo \"ok $r\"; else echo \"fail $r\"; fi; \
             done"
        );
        let out = self.kubectl(i, &["exec", "-n", ns, "client", "--", "sh", "-c", &script]);
        let answers: Vec<Result<Answer, String>> = out
            .lines()
            .map(|line| match line.strip_prefix("ok ") {
                Some(reply) => {
                    Answer::parse(reply).ok_or_else(|| format!("unexpected reply {reply:?}"))
                }
                None => Err(line.to_owned()),
            })
            .collect();
        assert_eq!(
            answers.len(),
            count,
            "{}: expected {count} result lines from the client, got:\n{out}",
            IDS[i]
        );
        answers
    }

    /// Polls batches of 10 connections until every one succeeds and the
    /// answering clusters are exactly `clusters` (the clusterset converged).
    async fn wait_routed(&self, i: usize, ns: &str, dial: &Dial<'_>, clusters: &[&str]) {
        let Dial {
            target,
            proto,
            family,
            port,
        } = *dial;
        let want: BTreeSet<String> = clusters.iter().map(|c| c.to_string()).collect();
        let deadline = Instant::now() + CONVERGE;
        loop {
            let answers = self.connect(i, ns, dial, 10);
            let got: BTreeSet<String> = answers
                .iter()
                .filter_map(|a| a.as_ref().ok().map(|a| a.cluster.clone()))
                .collect();
            if answers.iter().all(Result::is_ok) && got == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{}: {proto}{family} {target}:{port} from {ns}/client: want answers from \
                 exactly {want:?}, last batch: {answers:?}",
                IDS[i]
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Where a client connects: a name (or address), `tcp` or `udp`, IPv4 or
/// IPv6 (`family` 4 or 6), a port.
#[derive(Clone, Copy, Debug)]
struct Dial<'a> {
    target: &'a str,
    proto: &'static str,
    family: u8,
    port: u16,
}

impl<'a> Dial<'a> {
    fn new(target: &'a str, proto: &'static str, family: u8, port: u16) -> Self {
        Self {
            target,
            proto,
            family,
            port,
        }
    }
}

/// What a test server answers: its pod's name and IP and its cluster id.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Answer {
    pod: String,
    ip: String,
    cluster: String,
}

impl Answer {
    fn parse(reply: &str) -> Option<Self> {
        let mut words = reply.split_whitespace();
        let answer = Self {
            pod: words.next()?.to_owned(),
            ip: words.next()?.to_owned(),
            cluster: words.next()?.to_owned(),
        };
        words.next().is_none().then_some(answer)
    }
}

/// A Deployment whose pods answer every connection with `POD IP CLUSTER`:
/// TCP on 8080 and 8082, UDP on 8081 (socat, on both families).
fn server_yaml(ns: &str, name: &str, replicas: usize, cluster: &str) -> String {
    let container = |cname: &str, listen: &str| {
        format!(
            "      - name: {cname}\n        image: registry.example/echo:1   # never pulled; the command runs on the host\n        \
             command: [socat, \"{listen}\", \"SYSTEM:echo $(POD_NAME) $(POD_IP) $(CLUSTER)\"]\n        \
             env:\n        - {{name: CLUSTER, value: {cluster}}}\n        \
             - name: POD_NAME\n          valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}\n        \
             - name: POD_IP\n          valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}\n"
        )
    };
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n---\n\
         apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  replicas: {replicas}\n  \
         selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n{}{}{}",
        container("tcp", "TCP6-LISTEN:8080,fork,reuseaddr,ipv6only=0"),
        container("udp", "UDP6-RECVFROM:8081,fork,reuseaddr,ipv6only=0"),
        container("tcp2", "TCP6-LISTEN:8082,fork,reuseaddr,ipv6only=0"),
    )
}

/// A Service `name` selecting the server pods, with `ports` (YAML list
/// items) and extra spec lines.
fn service_yaml(ns: &str, name: &str, ports: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  selector: {{app: {name}}}\n{extra}  ports:\n{ports}"
    )
}

/// The usual ports: tcp 80 → 8080, udp 81 → 8081.
const PORTS: &str = "  - {name: tcp, port: 80, targetPort: 8080, protocol: TCP}\n  - {name: udp, port: 81, targetPort: 8081, protocol: UDP}\n";

fn export_yaml(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceExport\nmetadata:\n  name: {name}\n  namespace: {ns}\n"
    )
}

/// The namespace of every cluster (clients live in all three).
async fn namespace_everywhere(cs: &Clusterset, ns: &str) {
    for i in 0..3 {
        cs.apply(
            i,
            &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"),
        )
        .await;
        cs.client_pod(i, ns).await;
    }
}

/// The ready pods of Deployment `ns/name` in cluster `i`: name → IPs.
async fn ready_pods(
    cs: &Clusterset,
    i: usize,
    ns: &str,
    name: &str,
) -> BTreeMap<String, Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(cs.client(i).await, ns);
    pods.list(&ListParams::default().labels(&format!("app={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(controlplane::pod_running_ready)
        .map(|p| {
            let ips = p
                .status
                .and_then(|s| s.pod_ips)
                .unwrap_or_default()
                .into_iter()
                .map(|ip| ip.ip)
                .collect();
            (p.metadata.name.unwrap_or_default(), ips)
        })
        .collect()
}

/// Asserts that every answer succeeded and came from one of `expected`
/// (pod name → IPs, per cluster id), and that each cluster of
/// `must_answer` answered at least once.
fn assert_routed(
    what: &str,
    answers: &[Result<Answer, String>],
    expected: &BTreeMap<String, BTreeMap<String, Vec<String>>>,
    must_answer: &[&str],
) {
    let failed: Vec<&String> = answers.iter().filter_map(|a| a.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{what}: {} of {} connections failed: {failed:?}",
        failed.len(),
        answers.len()
    );
    for answer in answers.iter().flatten() {
        let pods = expected.get(&answer.cluster);
        let ok = pods
            .and_then(|p| p.get(&answer.pod))
            .is_some_and(|ips| ips.contains(&answer.ip));
        assert!(
            ok,
            "{what}: answered by {answer:?}, which is not a ready pod of an exporting cluster {expected:?}"
        );
    }
    for cluster in must_answer {
        assert!(
            answers.iter().flatten().any(|a| a.cluster == *cluster),
            "{what}: {cluster} never answered in {} connections: {answers:?}",
            answers.len()
        );
    }
}

// ---------------------------------------------------------------------------
// The behaviours.
// ---------------------------------------------------------------------------

/// KEP test 1: a service exported from a and b is reached from every
/// cluster through its clusterset IP, over TCP and UDP, and only the
/// exporting clusters' ready pods answer, each cluster at least once. A
/// dual-stack export from b alone is reached over IPv6 from b and over IPv4
/// from everywhere.
async fn reach_and_route(cs: &Clusterset) {
    let ns = "reach";
    namespace_everywhere(cs, ns).await;
    for i in [0, 1] {
        cs.deploy_server(i, ns, "web", 2, &service_yaml(ns, "web", PORTS, ""))
            .await;
        cs.apply(i, &export_yaml(ns, "web")).await;
    }
    cs.deploy_server(
        1,
        ns,
        "web6",
        2,
        &service_yaml(ns, "web6", PORTS, "  ipFamilyPolicy: RequireDualStack\n"),
    )
    .await;
    cs.apply(1, &export_yaml(ns, "web6")).await;
    let mut expected = BTreeMap::new();
    for i in [0, 1] {
        expected.insert(IDS[i].to_owned(), ready_pods(cs, i, ns, "web").await);
    }
    let name = "web.reach.svc.clusterset.local";
    for (client, id) in IDS.iter().enumerate() {
        for (proto, port) in [("tcp", 80), ("udp", 81)] {
            cs.wait_routed(client, ns, &Dial::new(name, proto, 4, port), &IDS[..2])
                .await;
            let answers = cs.connect(client, ns, &Dial::new(name, proto, 4, port), 20);
            assert_routed(
                &format!("{} → {name} {proto}/{port}", id),
                &answers,
                &expected,
                &IDS[..2],
            );
        }
    }
    let b_only: BTreeMap<_, _> = [(IDS[1].to_owned(), ready_pods(cs, 1, ns, "web6").await)].into();
    let name6 = "web6.reach.svc.clusterset.local";
    for (client, family) in [(0, 4), (1, 4), (1, 6), (2, 4)] {
        cs.wait_routed(client, ns, &Dial::new(name6, "tcp", family, 80), &IDS[1..2])
            .await;
        let answers = cs.connect(client, ns, &Dial::new(name6, "tcp", family, 80), 20);
        assert_routed(
            &format!("{} → {name6} tcp{family}/80", IDS[client]),
            &answers,
            &b_only,
            &IDS[1..2],
        );
    }
}

/// A service that is not exported has no clusterset name, and its
/// cluster.local name is answered only by the local cluster's pods, though
/// a same-named service runs in another cluster.
async fn not_exported_not_reachable(cs: &Clusterset) {
    let ns = "private";
    namespace_everywhere(cs, ns).await;
    for i in [0, 1] {
        cs.deploy_server(i, ns, "db", 2, &service_yaml(ns, "db", PORTS, ""))
            .await;
    }
    let local: BTreeMap<_, _> = [(IDS[0].to_owned(), ready_pods(cs, 0, ns, "db").await)].into();
    let answers = cs.connect(
        0,
        ns,
        &Dial::new("db.private.svc.cluster.local", "tcp", 4, 80),
        30,
    );
    assert_routed(
        "cluster-a → db.private.svc.cluster.local",
        &answers,
        &local,
        &IDS[..1],
    );
    // Not exported: no clusterset name anywhere, and nothing routes to b's pods.
    for (i, id) in IDS.iter().enumerate() {
        let answers = cs.connect(
            i,
            ns,
            &Dial::new("db.private.svc.clusterset.local", "tcp", 4, 80),
            2,
        );
        assert!(
            answers.iter().all(Result::is_err),
            "{id}: the unexported db.private answered through the clusterset: {answers:?}"
        );
    }
}

/// KEP test 2: `foo` runs in a and b, exported only from b: from a,
/// `foo.<ns>.svc.cluster.local` is a's pods 50 times in a row, and the
/// clusterset name reaches b; once a exports too, the clusterset name
/// reaches both and cluster.local is still a's alone, 50 times in a row.
async fn local_service_not_impacted(cs: &Clusterset) {
    let ns = "local";
    namespace_everywhere(cs, ns).await;
    for i in [0, 1] {
        cs.deploy_server(i, ns, "foo", 2, &service_yaml(ns, "foo", PORTS, ""))
            .await;
    }
    let a_only: BTreeMap<_, _> = [(IDS[0].to_owned(), ready_pods(cs, 0, ns, "foo").await)].into();
    let local = "foo.local.svc.cluster.local";
    let clusterset = "foo.local.svc.clusterset.local";
    cs.apply(1, &export_yaml(ns, "foo")).await;
    cs.wait_routed(0, ns, &Dial::new(clusterset, "tcp", 4, 80), &IDS[1..2])
        .await;
    let answers = cs.connect(0, ns, &Dial::new(local, "tcp", 4, 80), 50);
    assert_routed(
        "cluster-a → foo cluster.local (b exports)",
        &answers,
        &a_only,
        &IDS[..1],
    );

    cs.apply(0, &export_yaml(ns, "foo")).await;
    cs.wait_routed(0, ns, &Dial::new(clusterset, "tcp", 4, 80), &IDS[..2])
        .await;
    let answers = cs.connect(0, ns, &Dial::new(local, "tcp", 4, 80), 50);
    assert_routed(
        "cluster-a → foo cluster.local (a and b export)",
        &answers,
        &a_only,
        &IDS[..1],
    );
}

/// Port conflicts: `same` has port `tcp` as 80 in a (exported first) and 90
/// in b: port 80 routes only to a. `union` exposes port `px` (80) in a and
/// `py` (90) in b: each port routes only to the cluster that exposes it.
async fn port_conflicts(cs: &Clusterset) {
    let ns = "ports";
    namespace_everywhere(cs, ns).await;
    let tcp = |name: &str, port: u16| {
        format!("  - {{name: {name}, port: {port}, targetPort: 8080, protocol: TCP}}\n")
    };
    cs.deploy_server(
        0,
        ns,
        "same",
        2,
        &service_yaml(ns, "same", &tcp("tcp", 80), ""),
    )
    .await;
    cs.apply(0, &export_yaml(ns, "same")).await;
    // b exports later, so a's port wins the conflict.
    cs.wait_routed(
        2,
        ns,
        &Dial::new("same.ports.svc.clusterset.local", "tcp", 4, 80),
        &IDS[..1],
    )
    .await;
    cs.deploy_server(
        1,
        ns,
        "same",
        2,
        &service_yaml(ns, "same", &tcp("tcp", 90), ""),
    )
    .await;
    cs.apply(1, &export_yaml(ns, "same")).await;
    let a_pods: BTreeMap<_, _> = [(IDS[0].to_owned(), ready_pods(cs, 0, ns, "same").await)].into();
    // Both endpoints are in the import (b's without the conflicting port):
    // wait until b's slices reached c, then count.
    wait_import_clusters(cs, 2, ns, "same", 2).await;
    let answers = cs.connect(
        2,
        ns,
        &Dial::new("same.ports.svc.clusterset.local", "tcp", 4, 80),
        20,
    );
    assert_routed(
        "cluster-c → same:80 (a wins the port)",
        &answers,
        &a_pods,
        &IDS[..1],
    );
    let answers = cs.connect(
        2,
        ns,
        &Dial::new("same.ports.svc.clusterset.local", "tcp", 4, 90),
        2,
    );
    assert!(
        answers.iter().all(Result::is_err),
        "port 90 (the loser's) answered: {answers:?}"
    );

    cs.deploy_server(
        0,
        ns,
        "union",
        2,
        &service_yaml(ns, "union", &tcp("px", 80), ""),
    )
    .await;
    cs.deploy_server(
        1,
        ns,
        "union",
        2,
        &service_yaml(ns, "union", &tcp("py", 90), ""),
    )
    .await;
    for i in [0, 1] {
        cs.apply(i, &export_yaml(ns, "union")).await;
    }
    let mut by_cluster = BTreeMap::new();
    for i in [0, 1] {
        by_cluster.insert(IDS[i].to_owned(), ready_pods(cs, i, ns, "union").await);
    }
    let name = "union.ports.svc.clusterset.local";
    for (port, owner) in [(80, 0), (90, 1)] {
        cs.wait_routed(
            2,
            ns,
            &Dial::new(name, "tcp", 4, port),
            &IDS[owner..owner + 1],
        )
        .await;
        let answers = cs.connect(2, ns, &Dial::new(name, "tcp", 4, port), 20);
        let only: BTreeMap<_, _> = [(IDS[owner].to_owned(), by_cluster[IDS[owner]].clone())].into();
        assert_routed(
            &format!("cluster-c → union:{port}"),
            &answers,
            &only,
            &IDS[owner..owner + 1],
        );
    }
}

/// Waits until cluster `i` holds imported EndpointSlices of `clusters`
/// distinct source clusters for `ns/name`.
async fn wait_import_clusters(cs: &Clusterset, i: usize, ns: &str, name: &str, clusters: usize) {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let slices: Api<EndpointSlice> = Api::namespaced(cs.client(i).await, ns);
    cs.cluster(i)
        .wait_for("imported slices of every exporter", CONVERGE, || {
            let slices = slices.clone();
            async move {
                let list = slices
                    .list(
                        &ListParams::default()
                            .labels(&format!("multicluster.kubernetes.io/service-name={name}")),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                let sources: BTreeSet<String> = list
                    .items
                    .iter()
                    .filter_map(|s| {
                        s.metadata
                            .labels
                            .as_ref()?
                            .get("multicluster.kubernetes.io/source-cluster")
                            .cloned()
                    })
                    .collect();
                if sources.len() >= clusters {
                    Ok(())
                } else {
                    Err(format!("slices from {sources:?}"))
                }
            }
        })
        .await;
}

/// Headless: a StatefulSet exported from a and b; a connection to each
/// `<hostname>.<clusterid>.db.hl.svc.clusterset.local` reaches that pod.
async fn headless_per_pod_names(cs: &Clusterset) {
    let ns = "hl";
    namespace_everywhere(cs, ns).await;
    for i in [0, 1] {
        let sts = server_yaml(ns, "db", 2, IDS[i])
            .replace("kind: Deployment", "kind: StatefulSet")
            .replace("  replicas: 2\n", "  replicas: 2\n  serviceName: db\n");
        cs.apply(i, &sts).await;
        cs.apply(i, &service_yaml(ns, "db", PORTS, "  clusterIP: None\n"))
            .await;
        cs.apply(i, &export_yaml(ns, "db")).await;
    }
    for i in [0, 1] {
        for pod in ["db-0", "db-1"] {
            cs.dp.wait_listening(i, ns, pod, "tcp", 8080);
        }
    }
    for client in [0, 2] {
        for i in [0, 1] {
            for pod in ["db-0", "db-1"] {
                let name = format!("{pod}.{}.db.hl.svc.clusterset.local", IDS[i]);
                let deadline = Instant::now() + CONVERGE;
                let answer = loop {
                    let answers = cs.connect(client, ns, &Dial::new(&name, "tcp", 4, 8080), 1);
                    match &answers[0] {
                        Ok(a) => break a.clone(),
                        Err(e) => {
                            assert!(Instant::now() < deadline, "{} → {name}: {e}", IDS[client])
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                };
                assert_eq!(
                    (answer.pod.as_str(), answer.cluster.as_str()),
                    (pod, IDS[i]),
                    "{} → {name} reached the wrong pod",
                    IDS[client]
                );
            }
        }
    }
}

/// A port added to an exported Service is reachable through the clusterset
/// IP within seconds (the reference controller never updates derived
/// ports, mcs-api #169).
async fn ports_kept_current(cs: &Clusterset) {
    let ns = "grow";
    namespace_everywhere(cs, ns).await;
    let one = "  - {name: tcp, port: 80, targetPort: 8080, protocol: TCP}\n";
    cs.deploy_server(0, ns, "api", 2, &service_yaml(ns, "api", one, ""))
        .await;
    cs.apply(0, &export_yaml(ns, "api")).await;
    let name = "api.grow.svc.clusterset.local";
    cs.wait_routed(1, ns, &Dial::new(name, "tcp", 4, 80), &IDS[..1])
        .await;
    let two = format!("{one}  - {{name: admin, port: 82, targetPort: 8082, protocol: TCP}}\n");
    cs.apply(0, &service_yaml(ns, "api", &two, "")).await;
    let added = Instant::now();
    cs.wait_routed(1, ns, &Dial::new(name, "tcp", 4, 82), &IDS[..1])
        .await;
    eprintln!(
        "ports_kept_current: the new port answered through the clusterset IP {:.1} s after it was added",
        added.elapsed().as_secs_f64()
    );
    assert!(added.elapsed() < Duration::from_secs(30));
}

/// `kubectl exec` runs in the pod: its network namespace (the pod's IP),
/// its cluster's DNS (`nslookup` of a clusterset name and, through the
/// search path, of a short cluster.local name).
async fn exec_and_dns_inside_pods(cs: &Clusterset) {
    let ns = "exec";
    namespace_everywhere(cs, ns).await;
    cs.deploy_server(1, ns, "hello", 1, &service_yaml(ns, "hello", PORTS, ""))
        .await;
    cs.apply(1, &export_yaml(ns, "hello")).await;
    for (i, id) in IDS.iter().enumerate() {
        let pod: Pod = Api::namespaced(cs.client(i).await, ns)
            .get("client")
            .await
            .unwrap();
        let pod_ip = pod.status.unwrap().pod_ip.unwrap();
        let addrs = cs.kubectl(
            i,
            &[
                "exec", "-n", ns, "client", "--", "ip", "-o", "addr", "show", "eth0",
            ],
        );
        assert!(
            addrs.contains(&format!("inet {pod_ip}/32")),
            "{}: exec ran outside the pod: {addrs}",
            id
        );
        let deadline = Instant::now() + CONVERGE;
        loop {
            let out = std::process::Command::new(controlplane::binary("kubectl"))
                .arg("--kubeconfig")
                .arg(&cs.cluster(i).admin_kubeconfig)
                .args([
                    "exec",
                    "-n",
                    ns,
                    "client",
                    "--",
                    "nslookup",
                    "hello.exec.svc.clusterset.local",
                ])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            if out.status.success() && text.contains("Address: 10.") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: nslookup from the pod: {text}",
                id
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let local = cs.kubectl(1, &["exec", "-n", ns, "client", "--", "nslookup", "hello"]);
    assert!(
        local.contains("hello.exec.svc.cluster.local"),
        "search path: {local}"
    );
}

/// A lost cluster: `lose` is exported from b and c; c's apiserver stops.
/// Connections from a keep succeeding throughout, and after the grace
/// period every one lands on b; when c returns, on both again.
async fn lost_cluster_failover(cs: &mut Clusterset) {
    let ns = "lose";
    namespace_everywhere(cs, ns).await;
    for i in [1, 2] {
        cs.deploy_server(i, ns, "svc", 2, &service_yaml(ns, "svc", PORTS, ""))
            .await;
        cs.apply(i, &export_yaml(ns, "svc")).await;
    }
    let name = "svc.lose.svc.clusterset.local";
    cs.wait_routed(0, ns, &Dial::new(name, "tcp", 4, 80), &IDS[1..])
        .await;
    let mut b_only = BTreeMap::new();
    b_only.insert(IDS[1].to_owned(), ready_pods(cs, 1, ns, "svc").await);
    cs.dp.plane.apiservers[2].stop();
    let stopped = Instant::now();
    let mut failed = Vec::new();
    let mut switched = None;
    while stopped.elapsed() < CONVERGE {
        let answers = cs.connect(0, ns, &Dial::new(name, "tcp", 4, 80), 10);
        failed.extend(answers.iter().filter_map(|a| a.as_ref().err().cloned()));
        if answers.iter().flatten().all(|a| a.cluster == IDS[1])
            && answers.iter().all(Result::is_ok)
        {
            switched = Some(stopped.elapsed());
            break;
        }
    }
    let switched = switched.unwrap_or_else(|| {
        panic!("connections from a still reach c {CONVERGE:?} after c was lost")
    });
    eprintln!(
        "lost_cluster_failover: all connections on b {:.1} s after c's apiserver stopped (grace {GRACE})",
        switched.as_secs_f64()
    );
    assert!(
        failed.is_empty(),
        "connections failed while c was being dropped: {failed:?}"
    );
    let answers = cs.connect(0, ns, &Dial::new(name, "tcp", 4, 80), 30);
    assert_routed(
        "cluster-a → svc after c was lost",
        &answers,
        &b_only,
        &IDS[1..2],
    );
    cs.dp.plane.apiservers[2].start();
    cs.wait_routed(0, ns, &Dial::new(name, "tcp", 4, 80), &IDS[1..])
        .await;
}

/// A killed run's namespaces (named after a process that is gone) are
/// removed with their processes and `/etc/netns` entries by the next start;
/// this run's own namespaces are left alone.
async fn leftovers_of_a_killed_run_are_removed(cs: &Clusterset) {
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let netns = format!("csd{}x0-r", gone.id());
    let ok = std::process::Command::new("ip")
        .args(["netns", "add", &netns])
        .status()
        .unwrap();
    assert!(ok.success(), "ip netns add {netns}");
    std::fs::create_dir_all(format!("/etc/netns/{netns}")).unwrap();
    std::fs::write(
        format!("/etc/netns/{netns}/resolv.conf"),
        "nameserver 10.0.0.10\n",
    )
    .unwrap();
    // A process that outlived its run (a pod's server whose test was killed).
    let mut orphan = std::process::Command::new("ip")
        .args(["netns", "exec", &netns, "sleep", "600"])
        .spawn()
        .unwrap();
    dataplane::cleanup_leftovers();
    let status = orphan.try_wait().unwrap();
    let status = match status {
        Some(status) => status,
        None => {
            tokio::time::sleep(Duration::from_millis(500)).await;
            orphan.try_wait().unwrap().unwrap_or_else(|| {
                let _ = orphan.kill();
                panic!("the leftover namespace's process still runs")
            })
        }
    };
    assert!(
        !status.success(),
        "the leftover process was killed: {status}"
    );
    assert!(
        !std::path::Path::new(&format!("/run/netns/{netns}")).exists(),
        "{netns} still exists"
    );
    assert!(
        !std::path::Path::new(&format!("/etc/netns/{netns}")).exists(),
        "/etc/netns/{netns} still exists"
    );
    // Ours are untouched.
    let _ = cs;
    let ours = format!("csd{}x", std::process::id());
    let still: Vec<String> = std::fs::read_dir("/run/netns")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&ours))
        .collect();
    assert!(
        still.len() >= 7,
        "cleanup removed namespaces of this run: {still:?} are left"
    );
}
