//! A clusterset for tests and benches that send packets: member clusters
//! with the data plane of `tests/dataplane`, and per cluster the controller,
//! clusterset-dns and CoreDNS as shipped (peers joined with `clusterset-dns
//! peer add`). Cluster `i` has the id [`IDS`]`[i]`. Helpers make server
//! Deployments whose pods answer every connection with `POD IP CLUSTER`, a
//! client pod per namespace, and connections from it through `kubectl exec`.

#![allow(dead_code)] // each test binary uses a different part

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::controlplane::{self, ClusterSpec, ControllerProcess, CoreDns, Serve};
use crate::dataplane::DataPlane;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

/// Cluster ids (`ClusterProperty cluster.clusterset.k8s.io`), by index.
pub(crate) const IDS: [&str; 3] = ["cluster-a", "cluster-b", "cluster-c"];
/// How long any convergence may take.
pub(crate) const CONVERGE: Duration = Duration::from_secs(60);

/// One member cluster's MCS processes.
pub(crate) struct Member {
    /// Its `clusterset-dns controller`.
    pub controller: ControllerProcess,
    /// Its `clusterset-dns serve`.
    pub serve: Serve,
    _coredns: CoreDns,
}

/// Member clusters with a data plane and the MCS processes.
pub(crate) struct Clusterset {
    /// The MCS processes of each cluster.
    pub members: Vec<Member>,
    /// The clusters and their network.
    pub dp: DataPlane,
}

impl Clusterset {
    /// Starts the clusters of `specs` with a data plane, joins them as
    /// peers, and runs the controller (`--peer-grace-period grace`),
    /// clusterset-dns and cluster DNS in each; waits until all are ready.
    pub(crate) async fn start(specs: &[ClusterSpec], grace: &str) -> Self {
        let t0 = Instant::now();
        let dp = DataPlane::start(specs).await;
        let clusters = &dp.plane.clusters;
        let mut kubeconfigs = Vec::new();
        for (cluster, id) in clusters.iter().zip(IDS) {
            let client = cluster.admin_client().await;
            controlplane::set_cluster_properties(&client, id, "test-clusterset").await;
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
                    grace,
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
        eprintln!("clusterset: up in {:.1} s", t0.elapsed().as_secs_f64());
        Self { members, dp }
    }

    pub(crate) fn print_logs(&self) {
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

    pub(crate) fn cluster(&self, i: usize) -> &controlplane::Cluster {
        &self.dp.plane.clusters[i]
    }

    pub(crate) async fn client(&self, i: usize) -> kube::Client {
        self.cluster(i).admin_client().await
    }

    /// Server-side applies `yaml` in cluster `i`.
    pub(crate) async fn apply(&self, i: usize, yaml: &str) {
        controlplane::apply_yaml(&self.client(i).await, yaml)
            .await
            .unwrap_or_else(|e| panic!("{}: applying: {e}\n{yaml}", IDS[i]));
    }

    /// Runs `kubectl <args>` against cluster `i` with the admin kubeconfig
    /// and returns what it did, success or not (for callers that retry).
    pub(crate) fn try_kubectl(&self, i: usize, args: &[&str]) -> std::process::Output {
        std::process::Command::new(controlplane::binary("kubectl"))
            .arg("--kubeconfig")
            .arg(&self.cluster(i).admin_kubeconfig)
            .args(args)
            .output()
            .expect("run kubectl")
    }

    /// `kubectl --context <cluster i> ARGS`; stdout, or a panic with stderr.
    pub(crate) fn kubectl(&self, i: usize, args: &[&str]) -> String {
        let out = self.try_kubectl(i, args);
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
    pub(crate) async fn deploy_server(
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
    pub(crate) async fn wait_serving(
        &self,
        i: usize,
        ns: &str,
        name: &str,
        replicas: usize,
    ) -> Vec<Pod> {
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
    pub(crate) async fn client_pod(&self, i: usize, ns: &str) {
        self.client_pod_on(i, ns, "client", None).await;
    }

    /// A client pod `name` in namespace `ns` of cluster `i`, running; on
    /// Node `node` (its `spec.nodeName`, past the scheduler) when given.
    pub(crate) async fn client_pod_on(&self, i: usize, ns: &str, name: &str, node: Option<&str>) {
        let node_name = node
            .map(|n| format!("  nodeName: {n}\n"))
            .unwrap_or_default();
        self.apply(
            i,
            &format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n{node_name}  containers:\n  \
                 - name: client\n    image: registry.example/toolbox:1   # never pulled; the command runs on the host\n    \
                 command: [sleep, infinity]\n"
            ),
        )
        .await;
        let deadline = Instant::now() + CONVERGE;
        while self.dp.pod_netns(i, ns, name).is_none() {
            assert!(
                Instant::now() < deadline,
                "{}: client pod {ns}/{name} never got a network namespace; notes:\n{}",
                IDS[i],
                self.dp.notes().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `count` connections from cluster `i`'s `ns/client` pod to `dial`,
    /// through `kubectl exec`: each answer (`pod-name pod-ip cluster-id`)
    /// or the error of a failed one.
    pub(crate) fn connect(
        &self,
        i: usize,
        ns: &str,
        dial: &Dial<'_>,
        count: usize,
    ) -> Vec<Result<Answer, String>> {
        self.connect_from(i, ns, "client", dial, count)
    }

    /// [`Clusterset::connect`] from pod `ns/client` (any pod made by
    /// [`Clusterset::client_pod_on`]).
    pub(crate) fn connect_from(
        &self,
        i: usize,
        ns: &str,
        client: &str,
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
        // TCP answers on connect. UDP needs a datagram to answer, and like
        // any UDP client this one sends again (up to 3 times, 1 s apart)
        // when no answer comes: a lost datagram is not a routing failure.
        let attempt = if proto == "udp" {
            format!(
                "r=; for t in 1 2 3; do r=$(echo ping | socat -T 1 - {address} 2>&1) || break; \
                 [ -n \"$r\" ] && break; done; [ -n \"$r\" ]"
            )
        } else {
            format!("r=$(socat -T 2 -t 2 - {address} </dev/null 2>&1)")
        };
        let script = format!(
            "for n in $(seq {count}); do \
               if {attempt}; then echo \"ok $r\"; else echo \"fail $r\"; fi; \
             done"
        );
        let out = self.kubectl(i, &["exec", "-n", ns, client, "--", "sh", "-c", &script]);
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
    pub(crate) async fn wait_routed(&self, i: usize, ns: &str, dial: &Dial<'_>, clusters: &[&str]) {
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
                "{}: {dial:?} from {ns}/client: want answers from exactly {want:?}, last \
                 batch: {answers:?}",
                IDS[i]
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Polls batches of `batch` connections from pod `ns/client` of
    /// cluster `i` (no pause between them) until one batch succeeds whole
    /// with every answer from a pod of `want`; returns how long that took,
    /// to the end of that batch, and the failed connections on the way.
    /// Panics after `within`, saying `what` and showing the last batch.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn wait_answered_by(
        &self,
        i: usize,
        ns: &str,
        client: &str,
        dial: &Dial<'_>,
        want: &PodSet,
        batch: usize,
        within: Duration,
        what: &str,
    ) -> (Duration, Vec<String>) {
        let started = Instant::now();
        let mut failed = Vec::new();
        loop {
            let answers = self.connect_from(i, ns, client, dial, batch);
            failed.extend(answers.iter().filter_map(|a| a.as_ref().err().cloned()));
            if answers
                .iter()
                .all(|a| a.as_ref().is_ok_and(|a| want.contains(&a.key())))
            {
                return (started.elapsed(), failed);
            }
            assert!(
                started.elapsed() < within,
                "{what}: {} from {ns}/{client}: not answered by {want:?} alone within \
                 {within:?}; last batch: {answers:?}",
                IDS[i]
            );
        }
    }

    /// `kubectl scale WORKLOAD --replicas=N` in cluster `i` (`workload`:
    /// `deployment/web`, `statefulset/db`).
    pub(crate) fn scale(&self, i: usize, ns: &str, workload: &str, replicas: usize) {
        self.kubectl(
            i,
            &[
                "scale",
                workload,
                "-n",
                ns,
                &format!("--replicas={replicas}"),
            ],
        );
    }

    /// Sets the `Ready` (and `ContainersReady`) condition of pod `ns/name`
    /// in cluster `i` through the status subresource, as a kubelet does when
    /// a readiness probe starts failing or passes again. The pod keeps
    /// running and listening; kwok leaves a Running pod's conditions alone
    /// (its pod-ready Stage matches Pending pods only).
    pub(crate) async fn set_pod_ready(&self, i: usize, ns: &str, name: &str, ready: bool) {
        use kube::api::{Patch, PatchParams};
        let status = if ready { "True" } else { "False" };
        let patch = serde_json::json!({"status": {"conditions": [
            {"type": "Ready", "status": status},
            {"type": "ContainersReady", "status": status},
        ]}});
        Api::<Pod>::namespaced(self.client(i).await, ns)
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .unwrap_or_else(|e| panic!("{}: setting pod {ns}/{name} Ready={status}: {e}", IDS[i]));
    }

    /// `dig +short NAME TYPE` inside pod `ns/pod` of cluster `i`, through
    /// the pod's resolver (the cluster's CoreDNS, which forwards
    /// `clusterset.local` to clusterset-dns): the answer's lines, sorted;
    /// none for NXDOMAIN or NODATA.
    pub(crate) fn dig_in_pod(
        &self,
        i: usize,
        ns: &str,
        pod: &str,
        name: &str,
        qtype: &str,
    ) -> Vec<String> {
        let out = self.dp.sh_in_pod(
            i,
            ns,
            pod,
            &format!("dig +short +tries=3 +time=2 {name} {qtype}"),
        );
        let mut lines: Vec<String> = out.lines().map(str::to_owned).collect();
        lines.sort();
        lines
    }

    /// Waits until cluster `i`'s ServiceImport `ns/name` is exported by
    /// exactly `exporters` (`status.clusters`) with `trafficDistribution`
    /// `traffic_distribution`, and holds imported EndpointSlices from each
    /// exporter: until then a count of who answers proves nothing.
    pub(crate) async fn wait_import(
        &self,
        i: usize,
        ns: &str,
        name: &str,
        exporters: &[&str],
        traffic_distribution: Option<&str>,
    ) {
        use k8s_openapi::api::discovery::v1::EndpointSlice;
        use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("multicluster.x-k8s.io", "v1beta1", "ServiceImport"),
            "serviceimports",
        );
        let client = self.client(i).await;
        let imports: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
        let slices: Api<EndpointSlice> = Api::namespaced(client, ns);
        let want: BTreeSet<String> = exporters.iter().map(|c| c.to_string()).collect();
        let what = format!(
            "ServiceImport {ns}/{name} exported by {want:?} with trafficDistribution \
             {traffic_distribution:?}, and their slices"
        );
        self.cluster(i)
            .wait_for(&what, CONVERGE, || {
                let (imports, slices, want) = (imports.clone(), slices.clone(), want.clone());
                async move {
                    let import = imports.get(name).await.map_err(|e| e.to_string())?;
                    let clusters: BTreeSet<String> = import.data["status"]["clusters"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c["cluster"].as_str().map(str::to_owned))
                        .collect();
                    let td = import.data["spec"]["trafficDistribution"].as_str();
                    let sources = slice_sources(&slices, name).await?;
                    if clusters == want && td == traffic_distribution && sources == want {
                        Ok(())
                    } else {
                        Err(format!(
                            "exported by {clusters:?}, trafficDistribution {td:?}, slices from \
                             {sources:?}"
                        ))
                    }
                }
            })
            .await;
    }
}

/// Pods by (cluster id, pod name).
pub(crate) type PodSet = BTreeSet<(String, String)>;

/// `pods` (by name) of cluster `i`, as a [`PodSet`].
pub(crate) fn pod_set<'a>(i: usize, pods: impl IntoIterator<Item = &'a Pod>) -> PodSet {
    pods.into_iter()
        .map(|p| {
            (
                IDS[i].to_owned(),
                p.metadata.name.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// Asserts that every answer succeeded and came from a pod of `want`,
/// and, with `each`, that every pod of `want` answered at least once.
pub(crate) fn assert_answered_by(
    what: &str,
    answers: &[Result<Answer, String>],
    want: &PodSet,
    each: bool,
) {
    let failed: Vec<&String> = answers.iter().filter_map(|a| a.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{what}: {} of {} connections failed: {failed:?}",
        failed.len(),
        answers.len()
    );
    let got: PodSet = answers.iter().flatten().map(Answer::key).collect();
    let strangers: Vec<&(String, String)> = got.difference(want).collect();
    assert!(
        strangers.is_empty(),
        "{what}: answered by {strangers:?}, which are not of {want:?}; all answers: {answers:?}"
    );
    if each {
        let silent: Vec<&(String, String)> = want.difference(&got).collect();
        assert!(
            silent.is_empty(),
            "{what}: {silent:?} never answered in {} connections: {answers:?}",
            answers.len()
        );
    }
}

/// Where a client connects: a name (or address), `tcp` or `udp`, IPv4 or
/// IPv6 (`family` 4 or 6), a port.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dial<'a> {
    pub target: &'a str,
    pub proto: &'static str,
    pub family: u8,
    pub port: u16,
}

impl<'a> Dial<'a> {
    pub(crate) fn new(target: &'a str, proto: &'static str, family: u8, port: u16) -> Self {
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
pub(crate) struct Answer {
    pub pod: String,
    pub ip: String,
    pub cluster: String,
}

impl Answer {
    /// (cluster id, pod name), as in a [`PodSet`].
    pub(crate) fn key(&self) -> (String, String) {
        (self.cluster.clone(), self.pod.clone())
    }

    pub(crate) fn parse(reply: &str) -> Option<Self> {
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
pub(crate) fn server_yaml(ns: &str, name: &str, replicas: usize, cluster: &str) -> String {
    server_yaml_with(ns, name, name, replicas, cluster, "")
}

/// [`server_yaml`] with a Deployment `deployment` whose pods carry
/// `app: <app>` (the selector of [`service_yaml`]`(…, app, …)`, so that
/// several Deployments can back one Service) and `pod_spec`: lines added
/// to the pod spec, indented by 6 spaces (say a `nodeSelector`).
pub(crate) fn server_yaml_with(
    ns: &str,
    deployment: &str,
    app: &str,
    replicas: usize,
    cluster: &str,
    pod_spec: &str,
) -> String {
    let container = |cname: &str, listen: &str| {
        format!(
            "      - name: {cname}\n        image: registry.example/echo:1   # never pulled; the command runs on the host\n        \
             command: [socat, \"{listen}\", \"SYSTEM:echo $(POD_NAME) $(POD_IP) $(CLUSTER)\"]\n        \
             env:\n        - {{name: CLUSTER, value: {cluster}}}\n        \
             - name: POD_NAME\n          valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}\n        \
             - name: POD_IP\n          valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}\n"
        )
    };
    let labels = if deployment == app {
        format!("{{app: {app}}}")
    } else {
        format!("{{app: {app}, deployment: {deployment}}}")
    };
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n---\n\
         apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {deployment}\n  namespace: {ns}\nspec:\n  replicas: {replicas}\n  \
         selector:\n    matchLabels: {labels}\n  template:\n    metadata:\n      labels: {labels}\n    spec:\n{pod_spec}      containers:\n{}{}{}",
        container("tcp", "TCP6-LISTEN:8080,fork,reuseaddr,ipv6only=0"),
        container("udp", "UDP6-RECVFROM:8081,fork,reuseaddr,ipv6only=0"),
        container("tcp2", "TCP6-LISTEN:8082,fork,reuseaddr,ipv6only=0"),
    )
}

/// A Service `name` selecting the server pods, with `ports` (YAML list
/// items) and extra spec lines.
pub(crate) fn service_yaml(ns: &str, name: &str, ports: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  selector: {{app: {name}}}\n{extra}  ports:\n{ports}"
    )
}

/// The usual ports: tcp 80 → 8080, udp 81 → 8081.
pub(crate) const PORTS: &str = "  - {name: tcp, port: 80, targetPort: 8080, protocol: TCP}\n  - {name: udp, port: 81, targetPort: 8081, protocol: UDP}\n";

pub(crate) fn export_yaml(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceExport\nmetadata:\n  name: {name}\n  namespace: {ns}\n"
    )
}

/// The namespace of every cluster (clients live in all three).
pub(crate) async fn namespace_everywhere(cs: &Clusterset, ns: &str) {
    for i in 0..cs.dp.plane.clusters.len() {
        cs.apply(
            i,
            &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"),
        )
        .await;
        cs.client_pod(i, ns).await;
    }
}

/// The ready pods of Deployment `ns/name` in cluster `i`: name → IPs.
pub(crate) async fn ready_pods(
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
pub(crate) fn assert_routed(
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

/// The source clusters of the imported EndpointSlices of `name` in `slices`.
pub(crate) async fn slice_sources(
    slices: &Api<k8s_openapi::api::discovery::v1::EndpointSlice>,
    name: &str,
) -> Result<BTreeSet<String>, String> {
    let list = slices
        .list(
            &ListParams::default()
                .labels(&format!("multicluster.kubernetes.io/service-name={name}")),
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(list
        .items
        .iter()
        .filter_map(|s| {
            s.metadata
                .labels
                .as_ref()?
                .get("multicluster.kubernetes.io/source-cluster")
                .cloned()
        })
        .collect())
}
