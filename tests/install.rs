//! The install as documented: the commands of docs/deploy.md (fenced blocks
//! marked `sh <name>`, run verbatim with bash from the repository's top
//! directory) with the real `kubectl` and `helm` of `scripts/testenv-build.sh`,
//! against member clusters that behave like real ones (kube-apiserver,
//! kube-controller-manager, kube-scheduler, kwok: the DaemonSet's and the
//! Deployment's pods are scheduled on two fake nodes and become Ready).
//!
//! Each install must create every object, create the ServiceAccounts before
//! the workloads that use them, produce Ready workloads, and change nothing
//! when run again. The chart renders the same objects as the kustomization,
//! and its values end up where they belong. The rollout keeps a Ready DNS
//! server on every node at every pod change.
//!
//! Tier 2: `cargo test --features testenv --test install`.

mod controlplane;
mod markdown;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use controlplane::{Cluster, ClusterSpec, ControlPlane, kubernetes_version};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use serde_json::Value;

const DOC: &str = "docs/deploy.md";
const NS: &str = "clusterset-dns";
const CHART: &str = "deploy/helm/clusterset-dns";
/// Per wait; a normal run needs a few seconds.
const WAIT: Duration = Duration::from_secs(45);

/// Every tag of docs/deploy.md that a test here runs.
const RUN_TAGS: [&str; 12] = [
    "install",
    "install-no-crds",
    "install-kubernetes-1.33",
    "network-policy",
    "helm-install",
    "helm-install-no-crds",
    "helm-upgrade",
    "helm-values",
    "rollout",
    "hub-member",
    "helm-hub-member",
    "hub-member-drop-reader",
];

/// The ServiceAccount of the role peers read a cluster with.
const PEER_READER: &str = "ServiceAccount clusterset-dns/clusterset-dns-peer-reader";
/// And the one run with the `install` tag.
const EXAMPLE_TAG: &str = "example";

// ---------------------------------------------------------------------------
// The documented commands, and the tools.
// ---------------------------------------------------------------------------

/// The one block of docs/deploy.md tagged `tag` (` ```sh <tag>`).
fn doc_block(tag: &str) -> String {
    let blocks: Vec<markdown::Block> = markdown::blocks(DOC)
        .into_iter()
        .filter(|b| b.tag() == Some(tag))
        .collect();
    assert_eq!(
        blocks.len(),
        1,
        "{DOC} must have exactly one ```sh {tag} block (tests/install.rs runs it)"
    );
    assert_eq!(blocks[0].language(), "sh", "{}", blocks[0].place());
    blocks[0].text.clone()
}

/// Where commands run: the cluster's admin kubeconfig, the testenv's
/// kubectl and helm first on PATH, helm's state in a scratch directory.
struct Shell {
    kubeconfig: PathBuf,
    helm_home: tempfile::TempDir,
}

impl Shell {
    fn new(kubeconfig: &Path) -> Self {
        // Panics (never skips) when they were not built.
        controlplane::binary("kubectl");
        controlplane::binary("helm");
        Self {
            kubeconfig: kubeconfig.to_owned(),
            helm_home: tempfile::tempdir().unwrap(),
        }
    }

    /// Offline use (kustomize, helm template): no cluster.
    fn offline() -> Self {
        Self::new(Path::new("/nonexistent/kubeconfig"))
    }

    fn command(&self, program: &str) -> Command {
        let path = format!(
            "{}:{}",
            controlplane::bin_dir().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let home = self.helm_home.path();
        let mut command = Command::new(program);
        command
            .current_dir(markdown::repo())
            .env("PATH", path)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .stdin(Stdio::null());
        command
    }

    /// Runs `script` with `bash -euo pipefail`.
    fn bash(&self, script: &str) -> Output {
        self.command("bash")
            .args(["-euo", "pipefail", "-c", script])
            .output()
            .expect("run bash")
    }

    /// Runs docs/deploy.md's block `tag`; its stdout, or a panic with both
    /// outputs.
    fn run_doc(&self, tag: &str) -> String {
        let script = doc_block(tag);
        let t0 = Instant::now();
        let out = self.bash(&script);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success(),
            "{DOC} block `{tag}` failed ({}):\n{script}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            out.status
        );
        eprintln!(
            "`{tag}` ran in {:.1} s:\n{stdout}{stderr}",
            t0.elapsed().as_secs_f64()
        );
        stdout
    }

    /// `kubectl <args>`: its output, whatever the exit status.
    fn kubectl_output(&self, args: &[&str]) -> Output {
        self.command("kubectl")
            .args(args)
            .output()
            .expect("run kubectl")
    }

    /// `kubectl <args>`, which must succeed; its stdout.
    fn kubectl(&self, args: &[&str]) -> String {
        let out = self.kubectl_output(args);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}\n{}{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// `helm <args>`, which must succeed; its stdout.
    fn helm(&self, args: &[&str]) -> String {
        let out = self.command("helm").args(args).output().expect("run helm");
        assert!(
            out.status.success(),
            "helm {args:?}: {}\n{}{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// The live objects named by `args` (`-k deploy`, `-f file`), as JSON.
    fn live(&self, args: &[&str]) -> Vec<Value> {
        let mut all = vec!["get", "-o", "json"];
        all.extend(args);
        let list: Value = serde_json::from_str(&self.kubectl(&all)).unwrap();
        match list["kind"].as_str() {
            Some("List") => list["items"].as_array().cloned().unwrap_or_default(),
            _ => vec![list],
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The documents of a YAML stream, without empty ones.
fn documents(yaml: &str) -> Vec<Value> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(yaml).unwrap_or_else(|e| panic!("not YAML: {e}\n{yaml}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// `Kind namespace/name` of an object.
fn id(object: &Value) -> String {
    format!(
        "{} {}/{}",
        object["kind"].as_str().unwrap_or("?"),
        object["metadata"]["namespace"].as_str().unwrap_or(""),
        object["metadata"]["name"].as_str().unwrap_or("?")
    )
}

/// The peer reader's ServiceAccount is not in the cluster (nor, with it,
/// any token of it).
fn assert_peer_reader_gone(shell: &Shell) {
    let name = PEER_READER.rsplit('/').next().unwrap();
    let get = shell.kubectl_output(&["get", "serviceaccount", "--namespace", NS, name]);
    assert!(
        !get.status.success() && text(&get.stderr).contains("NotFound"),
        "{}{}",
        text(&get.stdout),
        text(&get.stderr)
    );
}

/// What `kubectl apply -k deploy` applies: `kubectl kustomize deploy`.
fn kustomized(shell: &Shell) -> Vec<Value> {
    documents(&shell.kubectl(&["kustomize", "deploy"]))
}

fn is_crd(object: &Value) -> bool {
    object["kind"] == "CustomResourceDefinition"
}

// ---------------------------------------------------------------------------
// What an install must achieve.
// ---------------------------------------------------------------------------

/// Records the creation revision of every ServiceAccount, DaemonSet and
/// Deployment created after it starts: the resourceVersion of a watch's
/// ADDED event is the etcd revision that created the object, one counter
/// for all kinds, so it orders creations across kinds exactly.
struct Creations {
    seen: Arc<Mutex<BTreeMap<String, u64>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Creations {
    async fn start(client: &kube::Client) -> Self {
        let seen = Arc::new(Mutex::new(BTreeMap::new()));
        let tasks = vec![
            Self::watch::<ServiceAccount>(client, "ServiceAccount", &seen).await,
            Self::watch::<DaemonSet>(client, "DaemonSet", &seen).await,
            Self::watch::<Deployment>(client, "Deployment", &seen).await,
        ];
        Self { seen, tasks }
    }

    async fn watch<K>(
        client: &kube::Client,
        kind: &'static str,
        seen: &Arc<Mutex<BTreeMap<String, u64>>>,
    ) -> tokio::task::JoinHandle<()>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + 'static,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::all(client.clone());
        let now = api
            .list_metadata(&ListParams::default().limit(1))
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap();
        let mut events = api
            .watch(&WatchParams::default().timeout(290), &now)
            .await
            .unwrap()
            .boxed();
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Some(Ok(event)) = events.next().await {
                if let WatchEvent::Added(object) = event {
                    let meta = object.meta();
                    let key = format!(
                        "{kind} {}/{}",
                        meta.namespace.clone().unwrap_or_default(),
                        meta.name.clone().unwrap_or_default()
                    );
                    let revision = meta.resource_version.as_deref().unwrap().parse().unwrap();
                    seen.lock().unwrap().entry(key).or_insert(revision);
                }
            }
        })
    }

    /// Each DaemonSet and Deployment among `objects` was created after the
    /// ServiceAccount its pods run as, which is among `objects` too.
    async fn assert_service_accounts_first(&self, objects: &[Value]) {
        let ids: BTreeSet<String> = objects.iter().map(id).collect();
        let pairs: Vec<(String, String)> = objects
            .iter()
            .filter(|o| o["kind"] == "DaemonSet" || o["kind"] == "Deployment")
            .map(|o| {
                let account = format!(
                    "ServiceAccount {}/{}",
                    o["metadata"]["namespace"].as_str().unwrap(),
                    o["spec"]["template"]["spec"]["serviceAccountName"]
                        .as_str()
                        .unwrap_or_else(|| panic!("{}: no serviceAccountName", id(o)))
                );
                assert!(
                    ids.contains(&account),
                    "{}: {account} is not installed",
                    id(o)
                );
                (account, id(o))
            })
            .collect();
        assert_eq!(
            pairs.len(),
            2,
            "the DNS DaemonSet and the controller Deployment"
        );
        let start = Instant::now();
        let seen = loop {
            let seen = self.seen.lock().unwrap().clone();
            if pairs
                .iter()
                .all(|(a, w)| seen.contains_key(a) && seen.contains_key(w))
            {
                break seen;
            }
            assert!(
                start.elapsed() < WAIT,
                "creations not all seen: wanted {pairs:?}, seen {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        for (account, workload) in &pairs {
            assert!(
                seen[account] < seen[workload],
                "{workload} was created before {account} (creation revisions {} and {})",
                seen[workload],
                seen[account]
            );
        }
    }
}

impl Drop for Creations {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Waits until every CRD among `objects` is Established, the DaemonSet has
/// a Ready, up-to-date pod on each of the `nodes`, the controller
/// Deployment has its two Ready replicas, and nothing failed to create pods.
async fn wait_installed(cluster: &Cluster, shell: &Shell, objects: &[Value], nodes: usize) {
    let client = cluster.admin_client().await;
    let crds: Vec<String> = objects
        .iter()
        .filter(|o| is_crd(o))
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    for crd in &crds {
        shell.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=30s",
            &format!("crd/{crd}"),
        ]);
    }
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    cluster
        .wait_for(
            "DaemonSet clusterset-dns: a Ready pod per node",
            WAIT,
            || {
                let daemonsets = daemonsets.clone();
                async move {
                    let ds = daemonsets
                        .get("clusterset-dns")
                        .await
                        .map_err(|e| e.to_string())?;
                    let status = ds.status.clone().unwrap_or_default();
                    let done = status.desired_number_scheduled as usize == nodes
                        && status.number_ready as usize == nodes
                        && status.updated_number_scheduled.unwrap_or(0) as usize == nodes
                        && status.observed_generation == ds.metadata.generation;
                    done.then_some(()).ok_or(format!("{status:?}"))
                }
            },
        )
        .await;
    cluster
        .wait_deployment_ready(&client, NS, "clusterset-dns-controller", 2)
        .await;
    let failures = shell.kubectl(&[
        "get",
        "events",
        "-n",
        NS,
        "--field-selector",
        "reason=FailedCreate",
        "-o",
        "name",
    ]);
    assert!(
        failures.trim().is_empty(),
        "pod creation failed: {failures}"
    );
}

/// The Service is served with `trafficDistribution: PreferSameNode` (read
/// back from the apiserver, which drops fields it does not serve), and the
/// EndpointSlice controller acts on it: every endpoint is hinted for its
/// own node. Before Kubernetes 1.34, which refuses it, the chart writes
/// `PreferClose`: every endpoint is hinted for its own zone.
async fn assert_dns_service_locality(cluster: &Cluster, shell: &Shell) {
    if kubernetes_version() < (1, 34) {
        return assert_prefers_the_zone(cluster, shell).await;
    }
    let service = dns_service_hinted(cluster, shell, "PreferSameNode", "node", |e| {
        e["nodeName"].is_string()
            && e["hints"]["forNodes"] == serde_json::json!([{"name": e["nodeName"]}])
    })
    .await;
    assert!(service["spec"]["internalTrafficPolicy"] != "Local");
}

/// The Service is served with `trafficDistribution: PreferClose` and every
/// endpoint is hinted for its own node's zone.
async fn assert_prefers_the_zone(cluster: &Cluster, shell: &Shell) {
    dns_service_hinted(cluster, shell, "PreferClose", "zone", |e| {
        e["zone"].is_string()
            && e["hints"]["forZones"] == serde_json::json!([{"name": e["zone"]}])
            && e["hints"]["forNodes"].is_null()
    })
    .await;
}

/// The DNS Service as served, once it has `trafficDistribution` and both
/// endpoints of its EndpointSlices are `hinted` (for their `what`).
async fn dns_service_hinted(
    cluster: &Cluster,
    shell: &Shell,
    distribution: &str,
    what: &str,
    hinted: fn(&Value) -> bool,
) -> Value {
    let service: Value = serde_json::from_str(&shell.kubectl(&[
        "get",
        "-n",
        NS,
        "service/clusterset-dns",
        "-o",
        "json",
    ]))
    .unwrap();
    assert_eq!(service["spec"]["trafficDistribution"], distribution);
    cluster
        .wait_for(
            &format!("EndpointSlice endpoints hinted for their {what}"),
            WAIT,
            || async {
                let out = shell.kubectl(&[
                    "get",
                    "endpointslices",
                    "-n",
                    NS,
                    "-l",
                    "kubernetes.io/service-name=clusterset-dns",
                    "-o",
                    "json",
                ]);
                let list: Value = serde_json::from_str(&out).unwrap();
                let endpoints: Vec<&Value> = list["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(|s| s["endpoints"].as_array().into_iter().flatten())
                    .collect();
                let count = endpoints.iter().filter(|e| hinted(e)).count();
                if endpoints.len() == 2 && count == 2 {
                    Ok(())
                } else {
                    Err(format!("{endpoints:?}"))
                }
            },
        )
        .await;
    service
}

/// What must not change when the install runs again: each object's
/// resourceVersion, except for the workloads, whose status kwok and the
/// controllers keep updating: their generation (bumped by any spec change)
/// and metadata labels and annotations instead.
fn fingerprint(objects: &[Value]) -> BTreeMap<String, String> {
    objects
        .iter()
        .map(|o| {
            let meta = &o["metadata"];
            let print = match o["kind"].as_str() {
                Some("DaemonSet" | "Deployment") => format!(
                    "generation {} labels {} annotations {}",
                    meta["generation"], meta["labels"], meta["annotations"]
                ),
                _ => format!("resourceVersion {}", meta["resourceVersion"]),
            };
            (id(o), print)
        })
        .collect()
}

/// A member cluster without CRDs: the harness installs ours, an install
/// from scratch deletes them first.
async fn member_cluster_without_crds() -> ControlPlane {
    let plane = ControlPlane::start_with(&[ClusterSpec::member(0)]).await;
    let shell = Shell::new(&plane.clusters[0].admin_kubeconfig);
    shell.kubectl(&[
        "delete",
        "crd",
        "--wait",
        "--timeout=30s",
        "serviceimports.multicluster.x-k8s.io",
        "serviceexports.multicluster.x-k8s.io",
        "clusterproperties.about.k8s.io",
        "publishedservices.clusterset-dns.io",
    ]);
    plane
}

/// The CRDs the harness installed (as another implementation would have),
/// with their resourceVersions.
fn existing_crds(shell: &Shell) -> BTreeMap<String, String> {
    let out = shell.kubectl(&["get", "crds", "-o", "json"]);
    let list: Value = serde_json::from_str(&out).unwrap();
    let crds = fingerprint(list["items"].as_array().unwrap());
    // The three of the MCS API and clusterset-dns's PublishedService.
    assert_eq!(crds.len(), 4, "{crds:?}");
    crds
}

// ---------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------

/// `kubectl apply -k deploy` on a fresh member cluster: every object, the
/// ServiceAccounts first, Ready workloads, PreferSameNode in effect; the
/// second apply changes nothing; the example clusterset applies; the
/// rollout keeps a Ready server on every node.
#[tokio::test(flavor = "multi_thread")]
async fn kustomize_install_creates_everything_and_a_second_apply_changes_nothing() {
    let t0 = Instant::now();
    let plane = member_cluster_without_crds().await;
    let cluster = &plane.clusters[0];
    let client = cluster.admin_client().await;
    let shell = Shell::new(&cluster.admin_kubeconfig);
    let expected = kustomized(&shell);
    eprintln!("cluster up in {:.1} s", t0.elapsed().as_secs_f64());

    let creations = Creations::start(&client).await;
    shell.run_doc("install");
    let live = shell.live(&["-k", "deploy"]);
    let (want, got): (BTreeSet<String>, BTreeSet<String>) = (
        expected.iter().map(id).collect(),
        live.iter().map(id).collect(),
    );
    assert_eq!(want, got);
    assert!(
        want.iter()
            .any(|w| w.starts_with("CustomResourceDefinition "))
    );
    assert!(want.contains("Namespace /clusterset-dns"));
    creations.assert_service_accounts_first(&expected).await;
    wait_installed(cluster, &shell, &expected, cluster.spec.nodes).await;
    assert_dns_service_locality(cluster, &shell).await;
    eprintln!("installed and Ready at {:.1} s", t0.elapsed().as_secs_f64());

    let before = fingerprint(&shell.live(&["-k", "deploy"]));
    let again = shell.run_doc("install");
    let lines: Vec<&str> = again.lines().collect();
    assert_eq!(lines.len(), expected.len(), "{again}");
    assert!(
        lines.iter().all(|l| l.ends_with(" unchanged")),
        "the second apply changed something:\n{again}"
    );
    let diff = shell.kubectl_output(&["diff", "-k", "deploy"]);
    assert_eq!(
        diff.status.code(),
        Some(0),
        "kubectl diff -k deploy:\n{}{}",
        text(&diff.stdout),
        text(&diff.stderr)
    );
    assert_eq!(before, fingerprint(&shell.live(&["-k", "deploy"])));
    // The optional NetworkPolicies, as documented, on this apiserver.
    let policies = shell.run_doc("network-policy");
    assert_eq!(policies.matches(" created").count(), 2, "{policies}");

    // The example clusterset, namespaces included, on the installed CRDs.
    let out = shell.run_doc(EXAMPLE_TAG);
    assert!(out.contains("namespace/shop created"), "{out}");
    let imports = shell.kubectl(&["get", "serviceimports", "-A", "-o", "name"]);
    assert_eq!(imports.lines().count(), 5, "{imports}");

    rollout_keeps_a_ready_server_on_every_node(cluster, &shell).await;

    // Moved to a hub: the peer reader goes, and a hub member's install
    // brings back nothing of it and changes nothing else.
    let dropped = shell.run_doc("hub-member-drop-reader");
    assert_eq!(dropped.matches(" deleted").count(), 5, "{dropped}");
    let again = shell.run_doc("hub-member");
    assert_eq!(again.lines().count(), expected.len() - 5, "{again}");
    assert!(!again.contains("peer-reader"), "{again}");
    assert_peer_reader_gone(&shell);
    eprintln!("whole test in {:.1} s", t0.elapsed().as_secs_f64());
}

/// The documented rollout, watched: after every pod change each node still
/// has a Ready, non-terminating clusterset-dns pod, and in the end every
/// pod is of the new template.
async fn rollout_keeps_a_ready_server_on_every_node(cluster: &Cluster, shell: &Shell) {
    use kube::runtime::watcher::{self, Event};
    let client = cluster.admin_client().await;
    let pods: Api<Pod> = Api::namespaced(client, NS);
    let config = watcher::Config::default().labels("app.kubernetes.io/name=clusterset-dns");
    let nodes = cluster.spec.nodes;
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let watch = tokio::spawn(async move {
        let mut state: BTreeMap<String, (String, bool, bool)> = BTreeMap::new();
        let mut gaps = Vec::new();
        let mut ready_tx = Some(ready_tx);
        let mut stream = watcher::watcher(pods, config).boxed();
        while let Some(event) = stream.try_next().await.unwrap() {
            let pod = match event {
                Event::InitApply(pod) | Event::Apply(pod) => pod,
                Event::Delete(pod) => {
                    state.remove(&pod.metadata.name.unwrap());
                    continue;
                }
                Event::InitDone => {
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(());
                    }
                    continue;
                }
                Event::Init => continue,
            };
            let node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            let serving = controlplane::pod_running_ready(&pod);
            let terminating = pod.metadata.deletion_timestamp.is_some();
            let generation = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("pod-template-generation").cloned())
                .unwrap_or_default();
            state.insert(
                pod.metadata.name.clone().unwrap(),
                (format!("{node} gen {generation}"), serving, terminating),
            );
            log.lock().unwrap().push(format!(
                "{state:?} after {} deleting {:?} phase {:?} conditions {:?}",
                pod.metadata.name.clone().unwrap(),
                pod.metadata.deletion_timestamp,
                pod.status.as_ref().and_then(|s| s.phase.clone()),
                pod.status
                    .as_ref()
                    .and_then(|s| s.conditions.clone())
                    .unwrap_or_default()
                    .iter()
                    .map(|c| format!("{}={}", c.type_, c.status))
                    .collect::<Vec<_>>()
            ));
            if ready_tx.is_none() {
                let mut ready_nodes = BTreeSet::new();
                for (node, serving, _) in state.values() {
                    if *serving {
                        ready_nodes.insert(node.split(" gen ").next().unwrap().to_owned());
                    }
                }
                if ready_nodes.len() < nodes {
                    gaps.push(format!("{state:?}"));
                }
            }
            // Done when every node runs a Ready pod of the new template and
            // every old pod is terminating or gone (kwok keeps a
            // terminating pod for its whole grace period, a kubelet only
            // for the preStop sleep).
            let new: BTreeSet<&str> = state
                .values()
                .filter(|(n, s, t)| *s && !*t && !n.ends_with(" gen 1"))
                .map(|(n, ..)| n.as_str())
                .collect();
            let old_left = state
                .values()
                .filter(|(n, _, t)| n.ends_with(" gen 1") && !*t)
                .count();
            if new.len() == nodes && old_left == 0 {
                return (gaps, state);
            }
        }
        panic!("pod watch ended");
    });
    ready_rx.await.unwrap();
    let t0 = Instant::now();
    shell.run_doc("rollout");
    let Ok(result) = tokio::time::timeout(WAIT, watch).await else {
        panic!(
            "the rollout's pod changes not all seen in {WAIT:?}; seen:\n{}",
            seen.lock().unwrap().join("\n")
        );
    };
    let (gaps, state) = result.unwrap();
    eprintln!("rollout in {:.1} s: {state:?}", t0.elapsed().as_secs_f64());
    assert!(
        gaps.is_empty(),
        "a node had no Ready clusterset-dns pod during the rollout:\n{}",
        gaps.join("\n")
    );
}

/// Without our CRDs: the harness's CRDs stand for another implementation's
/// and are not touched; everything else is installed; again changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn kustomize_install_without_crds_leaves_existing_crds_alone() {
    let plane = ControlPlane::start_with(&[ClusterSpec::api_only()]).await;
    let shell = Shell::new(&plane.clusters[0].admin_kubeconfig);
    let crds = existing_crds(&shell);
    let expected: Vec<Value> = kustomized(&shell)
        .into_iter()
        .filter(|o| !is_crd(o))
        .collect();
    let out = shell.run_doc("install-no-crds");
    assert_eq!(out.lines().count(), expected.len(), "{out}");
    assert!(!out.contains("customresourcedefinition"), "{out}");
    assert!(out.lines().all(|l| l.ends_with(" created")), "{out}");
    // (`kubectl get -k` ignores a label selector: the CRDs are left out here.)
    let live_objects = || -> Vec<Value> {
        shell
            .live(&["-k", "deploy"])
            .into_iter()
            .filter(|o| !is_crd(o))
            .collect()
    };
    let live = live_objects();
    assert_eq!(
        live.iter().map(id).collect::<BTreeSet<_>>(),
        expected.iter().map(id).collect::<BTreeSet<_>>()
    );
    let before = fingerprint(&live);
    let again = shell.run_doc("install-no-crds");
    assert!(again.lines().all(|l| l.ends_with(" unchanged")), "{again}");
    assert_eq!(before, fingerprint(&live_objects()));
    assert_eq!(
        crds,
        existing_crds(&shell),
        "the existing CRDs were modified"
    );
}

/// The objects Helm installed: its manifest, plus the chart's CRDs unless skipped.
fn helm_objects(shell: &Shell, with_crds: bool) -> (Vec<Value>, Vec<Value>) {
    let manifest = shell.helm(&["get", "manifest", "clusterset-dns", "--namespace", NS]);
    let mut expected = documents(&manifest);
    if with_crds {
        for entry in std::fs::read_dir(markdown::repo().join(CHART).join("crds")).unwrap() {
            expected.extend(documents(
                &std::fs::read_to_string(entry.unwrap().path()).unwrap(),
            ));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objects.yaml");
    let all: Vec<String> = expected
        .iter()
        .map(|o| serde_json::to_string(o).unwrap())
        .collect();
    std::fs::write(&file, all.join("\n---\n")).unwrap();
    let live = shell.live(&["-f", file.to_str().unwrap()]);
    (expected, live)
}

/// docs/deploy.md's block for Kubernetes 1.33 (`kubectl kustomize deploy`,
/// the DNS Service's PreferSameNode turned into PreferClose, applied): the
/// objects of the kustomization, the Service preferring the zone and
/// hinted so, and a second run changes nothing. Runs on every version:
/// what 1.33 accepts, later ones accept too.
#[tokio::test(flavor = "multi_thread")]
async fn the_kubernetes_1_33_install_creates_everything_preferring_the_zone() {
    let plane = member_cluster_without_crds().await;
    let cluster = &plane.clusters[0];
    let shell = Shell::new(&cluster.admin_kubeconfig);
    let expected = kustomized(&shell);
    shell.run_doc("install-kubernetes-1.33");
    let live = shell.live(&["-k", "deploy"]);
    assert_eq!(
        expected.iter().map(id).collect::<BTreeSet<_>>(),
        live.iter().map(id).collect::<BTreeSet<_>>()
    );
    wait_installed(cluster, &shell, &expected, cluster.spec.nodes).await;
    assert_prefers_the_zone(cluster, &shell).await;
    let before = fingerprint(&shell.live(&["-k", "deploy"]));
    let again = shell.run_doc("install-kubernetes-1.33");
    assert!(
        again.lines().all(|l| l.ends_with(" unchanged")),
        "the second apply changed something:\n{again}"
    );
    assert_eq!(before, fingerprint(&shell.live(&["-k", "deploy"])));
}

/// `helm install` on a fresh member cluster: every object (CRDs from the
/// chart), ServiceAccounts first, Ready workloads; `helm upgrade` with the
/// same values changes no object.
#[tokio::test(flavor = "multi_thread")]
async fn helm_install_creates_everything_and_an_upgrade_changes_nothing() {
    let t0 = Instant::now();
    let plane = member_cluster_without_crds().await;
    let cluster = &plane.clusters[0];
    let client = cluster.admin_client().await;
    let shell = Shell::new(&cluster.admin_kubeconfig);

    let creations = Creations::start(&client).await;
    shell.run_doc("helm-install");
    let (expected, live) = helm_objects(&shell, true);
    assert_eq!(
        expected.iter().map(id).collect::<BTreeSet<_>>(),
        live.iter().map(id).collect::<BTreeSet<_>>()
    );
    assert_eq!(expected.iter().filter(|o| is_crd(o)).count(), 4);
    // The same objects as the kustomization, the namespace aside (Helm's
    // --create-namespace makes it).
    let kustomize: BTreeSet<String> = kustomized(&shell)
        .iter()
        .map(id)
        .filter(|i| !i.starts_with("Namespace "))
        .collect();
    assert_eq!(expected.iter().map(id).collect::<BTreeSet<_>>(), kustomize);
    creations.assert_service_accounts_first(&expected).await;
    wait_installed(cluster, &shell, &expected, cluster.spec.nodes).await;
    assert_dns_service_locality(cluster, &shell).await;
    eprintln!("installed and Ready at {:.1} s", t0.elapsed().as_secs_f64());

    let before = fingerprint(&live);
    let (_, before_live) = helm_objects(&shell, true);
    assert_eq!(before, fingerprint(&before_live), "changed while settled");
    let before = fingerprint(&before_live);
    shell.run_doc("helm-upgrade");
    let (_, after) = helm_objects(&shell, true);
    assert_eq!(before, fingerprint(&after), "helm upgrade changed objects");
    let history = shell.helm(&["history", "clusterset-dns", "--namespace", NS]);
    assert_eq!(
        history.lines().count(),
        3,
        "header and two revisions:\n{history}"
    );

    // As a member of a hub: the peer reader goes, nothing else changes.
    shell.run_doc("helm-hub-member");
    let (_, hub_member) = helm_objects(&shell, true);
    let ids: BTreeSet<String> = hub_member.iter().map(id).collect();
    assert!(!ids.contains(PEER_READER), "{ids:?}");
    assert_eq!(ids.len(), expected.len() - 5, "{ids:?}");
    assert_peer_reader_gone(&shell);

    // The documented non-default values render objects this apiserver
    // accepts; offline, for 1.33 when told so (docs/deploy.md).
    let rendered = if kubernetes_version() < (1, 34) {
        let script = format!(
            "{} --kube-version 1.33",
            doc_block("helm-values").trim_end()
        );
        let out = shell.bash(&script);
        assert!(out.status.success(), "{script}: {}", text(&out.stderr));
        text(&out.stdout)
    } else {
        shell.run_doc("helm-values")
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, rendered).unwrap();
    shell.kubectl(&["apply", "--dry-run=server", "-f", file.to_str().unwrap()]);
    eprintln!("whole test in {:.1} s", t0.elapsed().as_secs_f64());
}

/// `helm install --skip-crds` over another implementation's CRDs leaves them
/// alone and installs the rest.
#[tokio::test(flavor = "multi_thread")]
async fn helm_install_without_crds_leaves_existing_crds_alone() {
    let plane = ControlPlane::start_with(&[ClusterSpec::api_only()]).await;
    let shell = Shell::new(&plane.clusters[0].admin_kubeconfig);
    let crds = existing_crds(&shell);
    shell.run_doc("helm-install-no-crds");
    let (expected, live) = helm_objects(&shell, false);
    assert!(!expected.iter().any(is_crd));
    assert_eq!(
        expected.iter().map(id).collect::<BTreeSet<_>>(),
        live.iter().map(id).collect::<BTreeSet<_>>()
    );
    assert!(expected.len() >= 14, "{}", expected.len());
    assert_eq!(
        crds,
        existing_crds(&shell),
        "the existing CRDs were modified"
    );
}

/// With default values the chart renders exactly the kustomization's
/// objects (the namespace aside, and the CRDs without the label the
/// kustomization adds to tell them apart).
#[test]
fn the_chart_renders_the_objects_of_the_kustomization() {
    let shell = Shell::offline();
    let key = |o: &Value| id(o);
    let mut kustomize: BTreeMap<String, Value> = BTreeMap::new();
    for mut object in kustomized(&shell) {
        if object["kind"] == "Namespace" {
            continue;
        }
        if is_crd(&object) {
            let labels = object["metadata"]["labels"].as_object_mut().unwrap();
            labels.remove("app.kubernetes.io/component");
            if labels.is_empty() {
                object["metadata"].as_object_mut().unwrap().remove("labels");
            }
        }
        kustomize.insert(key(&object), object);
    }
    let helm: BTreeMap<String, Value> = documents(&shell.helm(&[
        "template",
        "clusterset-dns",
        CHART,
        "--namespace",
        NS,
        "--include-crds",
    ]))
    .into_iter()
    .map(|o| (key(&o), o))
    .collect();
    assert_eq!(
        kustomize.keys().collect::<Vec<_>>(),
        helm.keys().collect::<Vec<_>>()
    );
    for (id, object) in &kustomize {
        assert_eq!(
            object, &helm[id],
            "{id}: the chart renders it differently from the kustomization"
        );
    }
}

/// The optional NetworkPolicies (issue 32): off by default in the chart,
/// and with `networkPolicy.enabled=true` exactly the objects of
/// `kubectl kustomize deploy/network-policy`.
#[test]
fn the_network_policies_are_optional_and_the_chart_renders_the_kustomizations() {
    let shell = Shell::offline();
    let render = |extra: &[&str]| -> Vec<Value> {
        let mut args = vec!["template", "clusterset-dns", CHART, "--namespace", NS];
        args.extend_from_slice(extra);
        documents(&shell.helm(&args))
    };
    let policies = |objects: Vec<Value>| -> BTreeMap<String, Value> {
        objects
            .into_iter()
            .filter(|o| o["kind"] == "NetworkPolicy")
            .map(|o| (id(&o), o))
            .collect()
    };
    assert!(policies(render(&[])).is_empty(), "off by default");
    assert!(
        policies(kustomized(&shell)).is_empty(),
        "in `kubectl apply -k deploy`"
    );
    let kustomize = policies(documents(
        &shell.kubectl(&["kustomize", "deploy/network-policy"]),
    ));
    assert_eq!(kustomize.len(), 2, "{kustomize:?}");
    assert_eq!(
        policies(render(&["--set", "networkPolicy.enabled=true"])),
        kustomize
    );
    let other = policies(render(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "networkPolicy.monitoringNamespace=observability",
    ]));
    for policy in other.values() {
        let text = policy.to_string();
        assert!(
            text.contains("observability") && !text.contains("monitoring"),
            "{text}"
        );
    }
}

/// The documented `helm template` with non-default values shows every one
/// of them where it belongs, and none of them is a default.
#[test]
fn helm_values_end_up_in_the_rendered_objects() {
    let shell = Shell::offline();
    let block = doc_block("helm-values");
    let sets: Vec<(String, String)> = block
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "--set")
        .map(|w| {
            let (k, v) = w[1].split_once('=').unwrap();
            (k.to_owned(), v.to_owned())
        })
        .collect();
    let names: BTreeSet<&str> = sets
        .iter()
        .map(|(k, _)| k.split('.').next().unwrap())
        .collect();
    for wanted in ["image", "dns", "controller"] {
        assert!(
            names.contains(wanted),
            "{DOC} helm-values sets no {wanted}.*"
        );
    }
    let render = |yaml: &str| -> BTreeMap<String, Value> {
        documents(yaml)
            .into_iter()
            .map(|o| (o["kind"].as_str().unwrap().to_owned(), o))
            .collect()
    };
    let custom = render(&shell.run_doc("helm-values"));
    let default = render(&shell.helm(&["template", "clusterset-dns", CHART, "--namespace", NS]));
    for (key, value) in &sets {
        assert!(
            lookup(&custom, key, value),
            "--set {key}={value}: not in the rendered objects"
        );
        assert!(
            !lookup(&default, key, value),
            "--set {key}={value}: already the default, tests nothing"
        );
    }
}

/// Whether the value `key` = `value` shows in `objects` (by kind) where the
/// chart puts it. A key this test does not know fails it.
fn lookup(objects: &BTreeMap<String, Value>, key: &str, value: &str) -> bool {
    let (workload, rest) = key.split_once('.').unwrap();
    let pods: Vec<&Value> = ["DaemonSet", "Deployment"]
        .iter()
        .map(|k| &objects[*k]["spec"]["template"]["spec"])
        .collect();
    let kind = match workload {
        "dns" => "DaemonSet",
        "controller" => "Deployment",
        "image" => {
            return pods.iter().all(|pod| {
                let image = pod["containers"][0]["image"].as_str().unwrap();
                match rest {
                    "repository" => image.starts_with(&format!("{value}:")),
                    "tag" => image.ends_with(&format!(":{value}")),
                    "pullPolicy" => pod["containers"][0]["imagePullPolicy"] == value,
                    _ => panic!("unknown value {key}"),
                }
            });
        }
        _ => panic!("unknown value {key}"),
    };
    let object = &objects[kind];
    let pod = &object["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let arg = |flag: &str| {
        container["args"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == &Value::from(format!("--{flag}={value}")))
    };
    let number = |v: &Value| v.as_i64().map(|n| n.to_string()).as_deref() == Some(value);
    match rest {
        "zone" => arg("zone"),
        "ttl" => arg("ttl"),
        "negativeTtl" => arg("negative-ttl"),
        "peerGracePeriod" => arg("peer-grace-period"),
        "replicas" => number(&object["spec"]["replicas"]),
        "terminationGracePeriodSeconds" => number(&pod["terminationGracePeriodSeconds"]),
        "preStopSleepSeconds" => number(&container["lifecycle"]["preStop"]["sleep"]["seconds"]),
        _ if rest.starts_with("resources.") => {
            let pointer = format!("/{}", rest.replace('.', "/"));
            container.pointer(&pointer) == Some(&Value::from(value))
        }
        _ => panic!("unknown value {key}"),
    }
}

/// Every install command in docs/deploy.md is in a block a test here runs:
/// a `kubectl apply`, `helm install` or similar elsewhere (another fence,
/// inline code) would be documented without being tested.
#[test]
fn every_install_command_of_the_doc_is_run_by_a_test() {
    // A kubectl or helm command with one of these verbs installs something.
    let installing = |line: &str| {
        let words: Vec<&str> = line.split_whitespace().collect();
        let has = |w: &[&str]| words.iter().any(|x| w.contains(x));
        (has(&["kubectl"]) && has(&["apply", "create", "replace", "rollout", "kustomize"]))
            || (has(&["helm"]) && has(&["install", "upgrade", "template"]))
    };
    assert!(
        installing("kubectl -n x rollout restart ds/y") && !installing("kubectl diff -k deploy")
    );
    let mut run = BTreeSet::new();
    let mut run_lines = BTreeSet::new();
    let mut stray = Vec::new();
    for block in markdown::blocks(DOC) {
        match block.tag() {
            Some(tag) if RUN_TAGS.contains(&tag) || tag == EXAMPLE_TAG => {
                assert!(
                    run.insert(tag.to_owned()),
                    "{}: tag {tag} twice",
                    block.place()
                );
                run_lines.extend(block.text.lines().map(|l| l.trim().to_owned()));
            }
            Some(tag) => panic!("{}: tag {tag} is run by no test", block.place()),
            None => {
                for line in block.text.lines() {
                    if installing(line) {
                        stray.push(format!("{}: {line}", block.place()));
                    }
                }
            }
        }
    }
    for (line, code) in markdown::inline_code(DOC) {
        // Naming a command that a run block holds verbatim is fine.
        if installing(&code) && !run_lines.contains(code.trim()) {
            stray.push(format!("{DOC}:{line}: `{code}`"));
        }
    }
    assert!(
        stray.is_empty(),
        "install commands outside the blocks tests/install.rs runs:\n{}",
        stray.join("\n")
    );
    let all: BTreeSet<String> = RUN_TAGS
        .iter()
        .chain([&EXAMPLE_TAG])
        .map(|t| t.to_string())
        .collect();
    assert_eq!(run, all, "blocks missing from {DOC}");
}
