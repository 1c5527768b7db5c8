//! `clusterset-dns peer add|list|remove`, the real binary against two real
//! member clusters (their kube-controller-managers fill in token Secrets),
//! with the controller running in cluster a.
//!
//! The command lines of docs/controller.md ("Joining clusters") are taken
//! from the markdown and run as written, in a directory holding the
//! kubeconfig files they name: the documentation cannot drift from what
//! works. b.kubeconfig carries its cluster's CA, as an admin kubeconfig
//! does; a.kubeconfig skips TLS verification, so the CA of the token
//! Secret is used for a.
//!
//! The member clusters' fake Nodes start without `spec.podCIDRs` (node IPAM
//! is off), as under a CNI that allocates pod addresses elsewhere: `peer
//! add` is refused until the Nodes are given ranges, as node IPAM would
//! ([`Env::give_pod_ranges`]).
//!
//! Each behaviour is a named trial (`harness = false`, libtest-mimic), in
//! the order of the documented sequence on one pair of clusters; a failing
//! one is reported under its name while the rest still run. Each passes
//! alone too: a trial first takes the steps of the sequence it starts from
//! that have not been taken ([`Env::joined`], [`Env::web_imported`]). The
//! first two need a pair nobody joined yet, and the last two take the pair
//! apart.

mod controlplane;
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use clusterset_dns::api::{ClusterProperty, ServiceExport, ServiceImport};
use controlplane::{
    ADMIN_TOKEN, CONTROLLER_NAMESPACE, Cluster, ControlPlane, ControllerProcess, PEER_LABEL,
    apiserver_url, apply_file, apply_yaml, client_from_yaml, deploy_file, install_controller,
    set_cluster_properties, spawn_controller,
};
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::core::v1::{Namespace, Node, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use support::create_if_absent;
use support::trials::{self, behaviours};

const CLUSTERSET: &str = "demo-set";
const READER: &str = "clusterset-dns-peer-reader";
const READER_FOR: &str = "clusterset-dns.io/peer-reader-for";
const ENDPOINT_CIDRS: &str = "clusterset-dns.io/endpoint-cidrs";
const ENDPOINT_CIDRS_FROM: &str = "clusterset-dns.io/endpoint-cidrs-from";
/// The pod ranges the trials give each cluster's two Nodes (a /24 each,
/// as node IPAM would), and what `peer add` records from them.
const NODE_POD_CIDRS: [[&str; 2]; 2] = [
    ["10.200.0.0/24", "10.200.1.0/24"],
    ["10.201.0.0/24", "10.201.1.0/24"],
];
const MERGED_POD_CIDRS: [&str; 2] = ["10.200.0.0/23", "10.201.0.0/23"];
/// How long the controller may take to import or drop a service.
const WAIT: Duration = Duration::from_secs(20);

/// One `$ clusterset-dns …` line of the tested block and the output lines
/// shown under it.
struct DocCommand {
    line: String,
    args: Vec<String>,
    output: Vec<String>,
}

/// The commands of every ```console block that follows a
/// `<!-- peer-cli: … -->` marker in docs/controller.md.
fn documented_commands() -> Vec<DocCommand> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/controller.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut commands: Vec<DocCommand> = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if !line.starts_with("<!-- peer-cli:") {
            continue;
        }
        assert_eq!(
            lines.next(),
            Some("```console"),
            "a console block after the marker"
        );
        for line in lines.by_ref() {
            if line == "```" {
                break;
            }
            if let Some(command) = line.strip_prefix("$ ") {
                assert!(
                    !command.contains(['"', '\'', '$', '\\', '|', '<']),
                    "documented command needs a shell: {command}"
                );
                let mut words = command.split_whitespace().map(str::to_owned);
                assert_eq!(words.next().as_deref(), Some("clusterset-dns"), "{command}");
                commands.push(DocCommand {
                    line: command.to_owned(),
                    args: words.collect(),
                    output: Vec::new(),
                });
            } else {
                commands
                    .last_mut()
                    .expect("output before any command")
                    .output
                    .push(line.to_owned());
            }
        }
    }
    commands
}

/// What the binary did.
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs `clusterset-dns <args>` in `dir`, without `KUBECONFIG`.
async fn cli<S: AsRef<std::ffi::OsStr>>(dir: &Path, args: &[S]) -> Run {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_clusterset-dns"))
        .args(args)
        .current_dir(dir)
        .env_remove("KUBECONFIG")
        .output()
        .await
        .unwrap();
    Run {
        ok: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// `peer add --kubeconfig a.kubeconfig --peer-kubeconfig b.kubeconfig`
/// and `extra`, in `dir`: b becomes a peer of a.
async fn add_b_to_a(dir: &Path, extra: &[&str]) -> Run {
    let args = [
        &[
            "peer",
            "add",
            "--kubeconfig",
            "a.kubeconfig",
            "--peer-kubeconfig",
            "b.kubeconfig",
        ][..],
        extra,
    ]
    .concat();
    cli(dir, &args).await
}

/// Runs a documented command, which must succeed.
async fn run_doc(dir: &Path, command: &DocCommand) -> String {
    let t = Instant::now();
    let run = cli(dir, &command.args).await;
    assert!(
        run.ok,
        "documented `{}` failed:\n{}{}",
        command.line, run.stdout, run.stderr
    );
    eprintln!(
        "`{}` in {:.1} s:\n{}",
        command.line,
        t.elapsed().as_secs_f64(),
        run.stdout
    );
    run.stdout
}

/// Runs a command that must be refused with `reason`, and returns stderr.
async fn refused(dir: &Path, args: &[&str], reason: &str) -> String {
    let run = cli(dir, args).await;
    assert!(!run.ok, "{args:?} should be refused:\n{}", run.stdout);
    assert!(
        run.stderr
            .contains(&format!("refusing to add the peer: {reason}: "))
            && run.stderr.contains("nothing was written"),
        "{args:?}: {}",
        run.stderr
    );
    run.stderr
}

/// `peer list -o json` of the cluster of `kubeconfig`.
async fn list_json(dir: &Path, kubeconfig: &str) -> Vec<Value> {
    let run = cli(
        dir,
        &["peer", "list", "--kubeconfig", kubeconfig, "-o", "json"],
    )
    .await;
    assert!(run.ok, "peer list: {}", run.stderr);
    serde_json::from_str(&run.stdout).unwrap()
}

fn entry<'a>(list: &'a [Value], name: &str) -> &'a Value {
    list.iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{name} not listed: {list:?}"))
}

async fn peer_secrets(client: &Client) -> Vec<Secret> {
    Api::<Secret>::namespaced(client.clone(), CONTROLLER_NAMESPACE)
        .list(&ListParams::default().labels(&format!("{PEER_LABEL}=true")))
        .await
        .unwrap()
        .items
}

/// Names of the token Secrets made for cluster `reader` (in the peer).
async fn token_secrets(client: &Client, reader: &str) -> Vec<String> {
    Api::<Secret>::namespaced(client.clone(), CONTROLLER_NAMESPACE)
        .list(&ListParams::default().labels(&format!("{READER_FOR}={reader}")))
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect()
}

/// The kubeconfig of a peer Secret.
async fn kubeconfig_of(client: &Client, name: &str) -> String {
    let secret = Api::<Secret>::namespaced(client.clone(), CONTROLLER_NAMESPACE)
        .get(name)
        .await
        .unwrap();
    String::from_utf8(secret.data.unwrap()["kubeconfig"].0.clone()).unwrap()
}

/// Whether the client's user may `verb` `resource` cluster-wide.
async fn may(client: &Client, verb: &str, group: &str, resource: &str) -> bool {
    let review: SelfSubjectAccessReview = serde_json::from_value(json!({
        "spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource}},
    }))
    .unwrap();
    Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .unwrap()
        .allowed
}

/// The status code of a failed request, or 200.
fn code<T>(result: kube::Result<T>) -> u16 {
    match result {
        Ok(_) => 200,
        Err(kube::Error::Api(status)) => status.code,
        Err(other) => panic!("not an API error: {other}"),
    }
}

/// `Ok` once the client's token is refused (401). The apiserver checks the
/// object a token is bound to through its informer cache, so a deleted
/// anchor's token stops working within moments, not at the instant of the
/// delete.
async fn revoked(client: &Client) -> Result<(), String> {
    match code(
        Api::<ServiceExport>::all(client.clone())
            .list(&ListParams::default())
            .await,
    ) {
        401 => Ok(()),
        other => Err(format!("the token still gets {other}")),
    }
}

/// The admin kubeconfig of `cluster`, with its CA inline instead of
/// skipping verification.
fn kubeconfig_with_ca(cluster: &Cluster) -> String {
    let ca = std::fs::read(cluster.dir.join("ca.crt")).unwrap();
    let ca = serde_json::to_value(k8s_openapi::ByteString(ca)).unwrap();
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "b", "cluster": {"server": apiserver_url(cluster), "certificate-authority-data": ca}}],
        "users": [{"name": "admin", "user": {"token": ADMIN_TOKEN}}],
        "contexts": [{"name": "b-admin", "context": {"cluster": "b", "user": "admin"}}],
        "current-context": "b-admin",
    })
    .to_string()
}

/// Two member clusters, the directory of the kubeconfig files `peer` is
/// run with, and the controllers: a's (`--peer-grace-period 30s`), read
/// by the trials, and b's, which publishes what a imports.
struct Env {
    plane: ControlPlane,
    admin_a: Client,
    admin_b: Client,
    dir: tempfile::TempDir,
    controller: Option<ControllerProcess>,
    _controller_b: ControllerProcess,
    t0: Instant,
    /// How far the documented sequence has come: the Nodes have pod
    /// ranges; `peer add` made b a peer of a (`[0]`, the first documented
    /// command) and a a peer of b (`[1]`); a imports `demo/web` from b.
    pod_ranges: bool,
    joined: [bool; 2],
    web_imported: bool,
}

impl Env {
    async fn start() -> Self {
        let t0 = Instant::now();
        let plane = ControlPlane::start_members(2, |_| false).await;
        let (a, b) = (&plane.clusters[0], &plane.clusters[1]);
        let (admin_a, admin_b) = (a.admin_client().await, b.admin_client().await);
        set_cluster_properties(&admin_a, "cluster-a", CLUSTERSET).await;
        set_cluster_properties(&admin_b, "cluster-b", CLUSTERSET).await;
        // a: the controller and deploy/peer-reader.yaml; b: the CRDs and the
        // controller only, so `peer add` creates b's reader objects. b's
        // controller publishes what a imports.
        let controller_kubeconfig = install_controller(a).await;
        controlplane::install_crds(&admin_b).await;
        apply_file(&admin_b, &deploy_file("controller.yaml")).await;
        let b_kubeconfig_path = b.dir.join("controller.kubeconfig");
        std::fs::write(
            &b_kubeconfig_path,
            controlplane::service_account_kubeconfig(
                b,
                CONTROLLER_NAMESPACE,
                controlplane::CONTROLLER_SA,
                3600,
            )
            .await,
        )
        .unwrap();
        let controller_b =
            spawn_controller(b, &b_kubeconfig_path, &["--startup-sync-timeout", "5s"]);
        for client in [&admin_a, &admin_b] {
            Api::<Namespace>::all(client.clone())
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": {"name": "demo"}})).unwrap(),
                )
                .await
                .unwrap();
        }
        let tempdir = tempfile::tempdir().unwrap();
        let dir = tempdir.path();
        std::fs::copy(&a.admin_kubeconfig, dir.join("a.kubeconfig")).unwrap();
        std::fs::write(dir.join("b.kubeconfig"), kubeconfig_with_ca(b)).unwrap();
        let controller = spawn_controller(
            a,
            &controller_kubeconfig,
            &["--peer-grace-period", "30s", "--startup-sync-timeout", "5s"],
        );
        let docs = documented_commands();
        let subcommands: Vec<String> = docs.iter().map(|c| c.args[..2].join(" ")).collect();
        assert_eq!(
            subcommands,
            [
                "peer add",
                "peer add",
                "peer list",
                "peer list",
                "peer remove"
            ],
            "the documented sequence this test follows"
        );
        eprintln!("clusters up in {:.1} s", t0.elapsed().as_secs_f64());
        Self {
            plane,
            admin_a,
            admin_b,
            dir: tempdir,
            controller: Some(controller),
            _controller_b: controller_b,
            t0,
            pod_ranges: false,
            joined: [false; 2],
            web_imported: false,
        }
    }

    /// Both clusters' Nodes get their pod ranges ([`NODE_POD_CIDRS`]), as
    /// node IPAM would: what `peer add` records by default.
    async fn give_pod_ranges(&mut self) {
        if self.pod_ranges {
            return;
        }
        for (client, ranges) in [&self.admin_a, &self.admin_b]
            .into_iter()
            .zip(NODE_POD_CIDRS)
        {
            let nodes: Api<Node> = Api::all(client.clone());
            for (i, range) in ranges.into_iter().enumerate() {
                nodes
                    .patch(
                        &format!("kwok-node-{i}"),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"podCIDR": range, "podCIDRs": [range]}})),
                    )
                    .await
                    .unwrap();
            }
        }
        self.pod_ranges = true;
    }

    /// The documented join, the side `side` of it (0: b a peer of a, the
    /// first documented command; 1: a a peer of b) unless it was run.
    async fn join(&mut self, side: usize) {
        if self.joined[side] {
            return;
        }
        self.give_pod_ranges().await;
        run_doc(self.dir.path(), &documented_commands()[side]).await;
        self.joined[side] = true;
    }

    /// Both sides of the documented join ([`Env::join`]).
    async fn joined(&mut self) {
        self.join(0).await;
        self.join(1).await;
    }

    /// The pair joined, `demo/web` of b (exported there) imported in a by
    /// its controller, and b accepted by it (its Lease renewed), unless
    /// that was done.
    async fn web_imported(&mut self) {
        if self.web_imported {
            return;
        }
        self.joined().await;
        let a = &self.plane.clusters[0];
        let controller = self.controller.as_ref().expect("a's controller runs");
        controller.wait_ready(Duration::from_secs(60));
        create_if_absent(
            &Api::<Service>::namespaced(self.admin_b.clone(), "demo"),
            &serde_json::from_value(json!({
                "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80}]},
            }))
            .unwrap(),
        )
        .await;
        create_if_absent(
            &Api::<ServiceExport>::namespaced(self.admin_b.clone(), "demo"),
            &serde_json::from_value(json!({"metadata": {"name": "web"}})).unwrap(),
        )
        .await;
        let imports_a: Api<ServiceImport> = Api::namespaced(self.admin_a.clone(), "demo");
        a.wait_for("demo/web imported from cluster-b", WAIT, || async {
            imports_a
                .get_opt("web")
                .await
                .unwrap()
                .map(|_| ())
                .ok_or_else(|| {
                    format!(
                        "no ServiceImport yet; controller log:\n{}",
                        controller.log()
                    )
                })
        })
        .await;
        // And it has recorded the peer (renewed its Lease): `peer list`
        // shows it accepted.
        let dir = self.dir.path();
        a.wait_for("peer list shows peer-cluster-b accepted", WAIT, || async {
            let list = list_json(dir, "a.kubeconfig").await;
            let b = entry(&list, "peer-cluster-b");
            if b["last_seen"].is_string() && b["refused"].is_null() {
                Ok(())
            } else {
                Err(format!("{b}"))
            }
        })
        .await;
        self.web_imported = true;
    }
}

/// The trials, in the order of the documented sequence; each is named
/// after the behaviour it shows.
fn main() {
    let args = trials::serial_arguments();
    let runtime = trials::runtime();
    let behaviours = behaviours![
        refused_joins_write_nothing_in_either_cluster,
        without_pod_ranges_on_the_peers_nodes_add_is_refused_naming_both_flags,
        the_documented_join_both_ways_gives_a_read_only_token_that_expires,
        the_controller_imports_through_the_added_peer,
        the_same_cluster_under_another_name_is_refused_and_nothing_written,
        a_secret_the_controller_refuses_is_listed_as_refused,
        token_ttl_is_checked_first_and_a_short_one_is_what_the_token_says,
        running_add_again_rotates_the_token_and_revokes_the_old_one,
        peer_server_is_the_address_the_controller_uses,
        endpoint_cidrs_are_checked_recorded_and_listed,
        allow_any_endpoint_records_no_ranges,
        the_controller_reads_with_the_latest_token_and_never_drops_the_import,
        peer_list_shows_the_documented_table_and_json,
        peer_remove_revoke_takes_the_secret_the_token_and_the_import,
        a_peer_that_is_down_is_listed_unhealthy_with_its_id,
    ];
    let start: trials::Start<Env> = || Box::pin(Env::start());
    let trials = trials::group(&args, &runtime, start, behaviours);
    let conclusion = libtest_mimic::run(&args, trials);
    drop(runtime);
    conclusion.exit();
}

/// Refusals: nothing is written anywhere.
async fn refused_joins_write_nothing_in_either_cluster(env: &mut Env) {
    let dir = env.dir.path();
    let admin_a = &env.admin_a;
    let admin_b = &env.admin_b;
    let stderr = refused(
        dir,
        &[
            "peer",
            "add",
            "--kubeconfig",
            "a.kubeconfig",
            "--peer-kubeconfig",
            "a.kubeconfig",
        ],
        "SelfReference",
    )
    .await;
    assert!(
        stderr.contains("points at this cluster (cluster-a)"),
        "{stderr}"
    );
    set_cluster_properties(admin_b, "cluster-b", "other-set").await;
    let stderr = refused(
        dir,
        &[
            "peer",
            "add",
            "--kubeconfig",
            "a.kubeconfig",
            "--peer-kubeconfig",
            "b.kubeconfig",
        ],
        "OtherClusterSet",
    )
    .await;
    assert!(
        stderr.contains(
            "peer cluster-b belongs to clusterset \"other-set\", this cluster to \"demo-set\""
        ),
        "{stderr}"
    );
    set_cluster_properties(admin_b, "cluster-b", CLUSTERSET).await;
    assert!(peer_secrets(admin_a).await.is_empty());
    assert!(token_secrets(admin_a, "cluster-a").await.is_empty());
    assert!(token_secrets(admin_b, "cluster-a").await.is_empty());
    assert!(
        Api::<ServiceAccount>::namespaced(admin_b.clone(), CONTROLLER_NAMESPACE)
            .get_opt(READER)
            .await
            .unwrap()
            .is_none(),
        "refused, yet the reader ServiceAccount was written in the peer"
    );
    assert!(
        Api::<ClusterRole>::all(admin_b.clone())
            .get_opt(READER)
            .await
            .unwrap()
            .is_none()
    );
}

/// The peer's Nodes carry no pod ranges (nor may a kubeconfig that cannot
/// list Nodes read them): `peer add` is refused, says why and names
/// --endpoint-cidr and --allow-any-endpoint, and writes nothing.
async fn without_pod_ranges_on_the_peers_nodes_add_is_refused_naming_both_flags(env: &mut Env) {
    let b = &env.plane.clusters[1];
    let dir = env.dir.path();
    let admin_a = &env.admin_a;
    let admin_b = &env.admin_b;
    let check = |run: &Run, why: &str| {
        assert!(!run.ok, "added without pod ranges:\n{}", run.stdout);
        for said in [
            "the peer's pod ranges are not known: ",
            why,
            "--endpoint-cidr <cidr>",
            "--allow-any-endpoint",
            "Nothing was written",
        ] {
            assert!(run.stderr.contains(said), "{said}: {}", run.stderr);
        }
    };
    let run = add_b_to_a(dir, &[]).await;
    check(&run, "none of its 2 Nodes has spec.podCIDRs");
    // A peer kubeconfig that reads b's identity but may not list Nodes.
    apply_yaml(
        admin_b,
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: no-nodes, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: no-nodes}
rules:
- apiGroups: [about.k8s.io]
  resources: [clusterproperties]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: no-nodes}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: no-nodes}
subjects:
- {kind: ServiceAccount, name: no-nodes, namespace: default}
"#,
    )
    .await
    .unwrap();
    std::fs::write(
        dir.join("no-nodes.kubeconfig"),
        controlplane::service_account_kubeconfig(b, "default", "no-nodes", 3600).await,
    )
    .unwrap();
    let run = cli(
        dir,
        &[
            "peer",
            "add",
            "--kubeconfig",
            "a.kubeconfig",
            "--peer-kubeconfig",
            "no-nodes.kubeconfig",
        ],
    )
    .await;
    check(&run, "was forbidden (403: ");
    assert!(peer_secrets(admin_a).await.is_empty());
    assert!(token_secrets(admin_b, "cluster-a").await.is_empty());
    assert!(
        Api::<ServiceAccount>::namespaced(admin_b.clone(), CONTROLLER_NAMESPACE)
            .get_opt(READER)
            .await
            .unwrap()
            .is_none(),
        "refused, yet the reader ServiceAccount was written in the peer"
    );
}

/// Join both ways, as documented (once the Nodes have pod ranges).
async fn the_documented_join_both_ways_gives_a_read_only_token_that_expires(env: &mut Env) {
    env.give_pod_ranges().await;
    let b = &env.plane.clusters[1];
    let dir = env.dir.path();
    let admin_a = &env.admin_a;
    let admin_b = &env.admin_b;
    let docs = documented_commands();
    let reader_objects = "Role and RoleBinding clusterset-dns/clusterset-dns-peer-reader, ClusterRole clusterset-dns-peer-reader and ClusterRoleBinding clusterset-dns-peer-reader applied";
    let out = run_doc(dir, &docs[0]).await;
    assert!(out.contains(reader_objects), "{out}");
    assert!(out.contains("(CA from the peer kubeconfig)"), "{out}");
    assert!(
        out.contains(&format!(
            "the peer's endpoints accepted only in {} (from the peer's Nodes' spec.podCIDRs)",
            MERGED_POD_CIDRS[1]
        )),
        "{out}"
    );
    let out = run_doc(dir, &docs[1]).await;
    assert!(out.contains(reader_objects), "{out}");
    assert!(
        out.contains("(CA from the peer's kube-root-ca.crt ConfigMap)"),
        "{out}"
    );
    env.joined = [true; 2];
    let secrets = peer_secrets(admin_a).await;
    assert_eq!(
        secrets
            .iter()
            .map(ResourceExt::name_any)
            .collect::<Vec<_>>(),
        ["peer-cluster-b"]
    );
    assert_eq!(
        secrets[0].annotations()["clusterset-dns.io/cluster-id"],
        "cluster-b"
    );
    // The pod ranges of the peer's Nodes, merged, recorded by default.
    assert_eq!(
        secrets[0].annotations()[ENDPOINT_CIDRS],
        MERGED_POD_CIDRS[1]
    );
    assert_eq!(secrets[0].annotations()[ENDPOINT_CIDRS_FROM], "nodes");
    let secrets_b = peer_secrets(admin_b).await;
    assert_eq!(
        secrets_b[0].annotations()[ENDPOINT_CIDRS],
        MERGED_POD_CIDRS[0]
    );
    assert_eq!(
        peer_secrets(admin_b)
            .await
            .iter()
            .map(ResourceExt::name_any)
            .collect::<Vec<_>>(),
        ["peer-cluster-a"]
    );
    let first_token = token_secrets(admin_b, "cluster-a").await;
    assert_eq!(first_token.len(), 1, "{first_token:?}");
    assert_eq!(token_secrets(admin_a, "cluster-b").await.len(), 1);
    let kubeconfig = kubeconfig_of(admin_a, "peer-cluster-b").await;
    let parsed: Value =
        serde_json::to_value(kube::config::Kubeconfig::from_yaml(&kubeconfig).unwrap()).unwrap();
    assert_eq!(parsed["clusters"][0]["cluster"]["server"], apiserver_url(b));
    assert!(
        parsed["clusters"][0]["cluster"]
            .get("insecure-skip-tls-verify")
            .is_none()
    );

    // The token reads what the controller pulls, verifies TLS, and writes
    // nothing: the exports, the two ClusterProperties by name, and no
    // Service or EndpointSlice cluster-wide.
    let reader = client_from_yaml(&kubeconfig).await;
    for verb in ["get", "list", "watch"] {
        assert!(
            may(&reader, verb, "multicluster.x-k8s.io", "serviceexports").await,
            "{verb}"
        );
        assert!(!may(&reader, verb, "", "services").await, "{verb}");
        assert!(
            !may(&reader, verb, "discovery.k8s.io", "endpointslices").await,
            "{verb}"
        );
    }
    assert!(!may(&reader, "list", "about.k8s.io", "clusterproperties").await);
    Api::<ClusterProperty>::all(reader.clone())
        .get("cluster.clusterset.k8s.io")
        .await
        .expect("the reader gets the peer's cluster id");
    // It expires, 90 days from now by default, as the Secret's token says.
    let expires = entry(&list_json(dir, "a.kubeconfig").await, "peer-cluster-b")
        ["credential_expires_in_seconds"]
        .as_i64()
        .expect("an expiring credential");
    assert!(
        (89 * 86400..=90 * 86400).contains(&expires),
        "expires in {expires} s"
    );
    for verb in ["create", "update", "patch", "delete"] {
        assert!(
            !may(&reader, verb, "multicluster.x-k8s.io", "serviceexports").await,
            "{verb}"
        );
    }
    assert!(!may(&reader, "get", "", "secrets").await);
    let exports_b: Api<ServiceExport> = Api::namespaced(reader.clone(), "demo");
    assert_eq!(code(exports_b.list(&ListParams::default()).await), 200);
    assert_eq!(
        code(
            exports_b
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap()
                )
                .await
        ),
        403,
        "the peer-reader token wrote a ServiceExport"
    );
}

/// The controller accepts the peer: an export in b is imported in a.
async fn the_controller_imports_through_the_added_peer(env: &mut Env) {
    env.web_imported().await;
    eprintln!(
        "imported through the added peer at {:.1} s",
        env.t0.elapsed().as_secs_f64()
    );
}

/// The same cluster under another name: refused, nothing written.
async fn the_same_cluster_under_another_name_is_refused_and_nothing_written(env: &mut Env) {
    env.joined().await;
    let dir = env.dir.path();
    let admin_a = &env.admin_a;
    let admin_b = &env.admin_b;
    let first_token = token_secrets(admin_b, "cluster-a").await;
    let stderr = refused(
        dir,
        &[
            "peer",
            "add",
            "--kubeconfig",
            "a.kubeconfig",
            "--peer-kubeconfig",
            "b.kubeconfig",
            "--name",
            "peer-b-again",
        ],
        "DuplicateClusterId",
    )
    .await;
    assert!(
        stderr.contains("Secrets peer-cluster-b and peer-b-again both name cluster cluster-b"),
        "{stderr}"
    );
    assert_eq!(peer_secrets(admin_a).await.len(), 1);
    assert_eq!(token_secrets(admin_b, "cluster-a").await, first_token);
}

/// A Secret the controller refuses shows as refused in `peer list`.
async fn a_secret_the_controller_refuses_is_listed_as_refused(env: &mut Env) {
    env.joined().await;
    let a = &env.plane.clusters[0];
    let dir = env.dir.path();
    let admin_a = &env.admin_a;
    let kubeconfig = kubeconfig_of(admin_a, "peer-cluster-b").await;
    let copy: Secret = serde_json::from_value(json!({
        "metadata": {"name": "peer-copy", "labels": {PEER_LABEL: "true"}},
        "stringData": {"kubeconfig": kubeconfig},
    }))
    .unwrap();
    let secrets_a: Api<Secret> = Api::namespaced(admin_a.clone(), CONTROLLER_NAMESPACE);
    secrets_a
        .create(&PostParams::default(), &copy)
        .await
        .unwrap();
    a.wait_for("peer-copy listed as refused", WAIT, || async {
        let list = list_json(dir, "a.kubeconfig").await;
        let copy = entry(&list, "peer-copy");
        match copy["refused"].as_str() {
            Some(note) if note.starts_with("DuplicateClusterId: ") => Ok(()),
            _ => Err(format!("{copy}")),
        }
    })
    .await;
    secrets_a
        .delete("peer-copy", &DeleteParams::default())
        .await
        .unwrap();
}

/// --token-ttl: checked before anything is written; a short one is what the token says.
async fn token_ttl_is_checked_first_and_a_short_one_is_what_the_token_says(env: &mut Env) {
    env.joined().await;
    let dir = env.dir.path();
    let admin_b = &env.admin_b;
    let first_token = token_secrets(admin_b, "cluster-a").await;
    let run = add_b_to_a(dir, &["--token-ttl", "5m"]).await;
    assert!(!run.ok, "a 5-minute token was accepted");
    assert!(
        run.stderr
            .contains("--token-ttl 5m: a token must be valid for at least 10m"),
        "{}",
        run.stderr
    );
    assert_eq!(
        token_secrets(admin_b, "cluster-a").await,
        first_token,
        "written anyway"
    );
    let run = add_b_to_a(dir, &["--token-ttl", "1h"]).await;
    assert!(run.ok, "{}", run.stderr);
    let expires = entry(&list_json(dir, "a.kubeconfig").await, "peer-cluster-b")
        ["credential_expires_in_seconds"]
        .as_i64()
        .unwrap();
    assert!((3000..=3600).contains(&expires), "expires in {expires} s");
    let table = cli(dir, &["peer", "list", "--kubeconfig", "a.kubeconfig"]).await;
    assert!(
        table
            .stdout
            .lines()
            // 3600 s left (listed in the second it was issued) shows as
            // `in 1h`, any less as `in 59m`.
            .any(|l| l.starts_with("peer-cluster-b ")
                && (l.contains(" in 59m ") || l.contains(" in 1h "))),
        "{}",
        table.stdout
    );
}

/// Re-running is idempotent and rotates the token.
async fn running_add_again_rotates_the_token_and_revokes_the_old_one(env: &mut Env) {
    env.joined().await;
    let b = &env.plane.clusters[1];
    let dir = env.dir.path();
    let admin_a = &env.admin_a;
    let admin_b = &env.admin_b;
    let docs = documented_commands();
    let first_token = token_secrets(admin_b, "cluster-a").await;
    let kubeconfig = kubeconfig_of(admin_a, "peer-cluster-b").await;
    let reader = client_from_yaml(&kubeconfig).await;
    run_doc(dir, &docs[0]).await;
    let second_token = token_secrets(admin_b, "cluster-a").await;
    assert_eq!(second_token.len(), 1, "{second_token:?}");
    assert_ne!(second_token, first_token, "no new token");
    assert_eq!(peer_secrets(admin_a).await.len(), 1);
    let rotated = kubeconfig_of(admin_a, "peer-cluster-b").await;
    assert_ne!(rotated, kubeconfig);
    b.wait_for("the old token revoked", WAIT, || revoked(&reader))
        .await;
    let new: Api<ServiceExport> = Api::all(client_from_yaml(&rotated).await);
    assert_eq!(code(new.list(&ListParams::default()).await), 200);
}

/// --peer-server: the address the controller uses, not the admin's (here one where nothing listens: `peer list` probes that address).
async fn peer_server_is_the_address_the_controller_uses(env: &mut Env) {
    env.joined().await;
    let dir = env.dir.path();
    let admin_a = &env.admin_a;
    let elsewhere = format!("https://127.0.0.1:{}", controlplane::free_port());
    let run = add_b_to_a(dir, &["--peer-server", &elsewhere]).await;
    assert!(run.ok, "{}", run.stderr);
    assert!(
        kubeconfig_of(admin_a, "peer-cluster-b")
            .await
            .contains(&elsewhere)
    );
    let list = list_json(dir, "a.kubeconfig").await;
    let moved = entry(&list, "peer-cluster-b");
    assert_eq!(moved["server"], elsewhere.as_str());
    assert_eq!(moved["healthy"], false, "{moved}");
    assert_eq!(
        moved["cluster_id"], "cluster-b",
        "known from the annotation"
    );
}

/// --endpoint-cidr: checked before anything is written, recorded on the Secret, shown by `peer list` (table and JSON).
async fn endpoint_cidrs_are_checked_recorded_and_listed(env: &mut Env) {
    env.joined().await;
    let dir = env.dir.path();
    let admin_a = &env.admin_a;
    let before = kubeconfig_of(admin_a, "peer-cluster-b").await;
    let run = add_b_to_a(dir, &["--endpoint-cidr", "10.1.0.0"]).await;
    assert!(!run.ok, "a range without a prefix length was accepted");
    assert!(
        run.stderr
            .contains("--endpoint-cidr: \"10.1.0.0\" is not a CIDR"),
        "{}",
        run.stderr
    );
    assert_eq!(
        kubeconfig_of(admin_a, "peer-cluster-b").await,
        before,
        "written anyway"
    );
    let run = add_b_to_a(
        dir,
        &[
            "--endpoint-cidr",
            "10.1.0.0/16",
            "--endpoint-cidr",
            "fd00:1::/64",
        ],
    )
    .await;
    assert!(run.ok, "{}", run.stderr);
    // Given explicitly, they win over the Nodes'.
    let list = list_json(dir, "a.kubeconfig").await;
    let ranged = entry(&list, "peer-cluster-b");
    assert_eq!(
        ranged["endpoint_cidrs"],
        json!(["10.1.0.0/16", "fd00:1::/64"])
    );
    assert_eq!(ranged["endpoint_cidrs_from"], "endpoint-cidr");
    assert_eq!(ranged["any_endpoint"], false);
    let table = cli(dir, &["peer", "list", "--kubeconfig", "a.kubeconfig"]).await;
    assert!(
        table.stdout.contains(
            "peer-cluster-b: endpoints only in 10.1.0.0/16, fd00:1::/64 (from --endpoint-cidr)"
        ),
        "{}",
        table.stdout
    );
}

/// --allow-any-endpoint: no ranges recorded, said so by `peer add` and
/// `peer list`; it cannot be given with --endpoint-cidr.
async fn allow_any_endpoint_records_no_ranges(env: &mut Env) {
    env.joined().await;
    let dir = env.dir.path();
    let admin_a = &env.admin_a;
    let run = add_b_to_a(
        dir,
        &["--allow-any-endpoint", "--endpoint-cidr", "10.1.0.0/16"],
    )
    .await;
    assert!(!run.ok, "both flags accepted");
    assert!(
        run.stderr.contains("--allow-any-endpoint") && run.stderr.contains("cannot be used with"),
        "{}",
        run.stderr
    );
    let run = add_b_to_a(dir, &["--allow-any-endpoint"]).await;
    assert!(run.ok, "{}", run.stderr);
    assert!(
        run.stdout
            .contains("no endpoint ranges recorded (--allow-any-endpoint)"),
        "{}",
        run.stdout
    );
    let secret = Api::<Secret>::namespaced(admin_a.clone(), CONTROLLER_NAMESPACE)
        .get("peer-cluster-b")
        .await
        .unwrap();
    assert!(
        !secret.annotations().contains_key(ENDPOINT_CIDRS),
        "{:?}",
        secret.annotations()
    );
    assert_eq!(
        secret.annotations()[ENDPOINT_CIDRS_FROM],
        "allow-any-endpoint"
    );
    let list = list_json(dir, "a.kubeconfig").await;
    let any = entry(&list, "peer-cluster-b");
    assert_eq!(any["endpoint_cidrs"], json!([]));
    assert_eq!(any["any_endpoint"], true);
    let table = cli(dir, &["peer", "list", "--kubeconfig", "a.kubeconfig"]).await;
    assert!(
        table.stdout.contains(
            "peer-cluster-b: endpoints anywhere the controller's other rules allow (--allow-any-endpoint)"
        ),
        "{}",
        table.stdout
    );
}

/// Back to the documented command: the controller reads b with the latest token (its Lease is renewed after it), the import never dropped.
async fn the_controller_reads_with_the_latest_token_and_never_drops_the_import(env: &mut Env) {
    env.web_imported().await;
    let a = &env.plane.clusters[0];
    let b = &env.plane.clusters[1];
    let dir = env.dir.path();
    let admin_a = &env.admin_a;
    let admin_b = &env.admin_b;
    let docs = documented_commands();
    let imports_a: Api<ServiceImport> = Api::namespaced(admin_a.clone(), "demo");
    run_doc(dir, &docs[0]).await;
    let rotated_at = k8s_openapi::jiff::Timestamp::now();
    let rotated = kubeconfig_of(admin_a, "peer-cluster-b").await;
    assert!(rotated.contains(&apiserver_url(b)));
    assert_eq!(token_secrets(admin_b, "cluster-a").await.len(), 1);
    a.wait_for(
        "the controller reads b with the latest token",
        WAIT,
        || async {
            let list = list_json(dir, "a.kubeconfig").await;
            let b = entry(&list, "peer-cluster-b");
            let seen: Option<k8s_openapi::jiff::Timestamp> =
                b["last_seen"].as_str().and_then(|t| t.parse().ok());
            if b["healthy"] == true
                && b["refused"].is_null()
                && seen.is_some_and(|t| t > rotated_at)
            {
                Ok(())
            } else {
                Err(format!("{b}"))
            }
        },
    )
    .await;
    assert!(
        imports_a.get_opt("web").await.unwrap().is_some(),
        "the import dropped during rotations"
    );
    let listed = entry(&list_json(dir, "a.kubeconfig").await, "peer-cluster-b").clone();
    assert_eq!(
        (&listed["endpoint_cidrs"], &listed["endpoint_cidrs_from"]),
        (&json!([MERGED_POD_CIDRS[1]]), &json!("nodes")),
        "re-run without a range flag: the Nodes' ranges again"
    );
}

/// `peer list`, table and JSON, as documented.
async fn peer_list_shows_the_documented_table_and_json(env: &mut Env) {
    env.web_imported().await;
    let b = &env.plane.clusters[1];
    let dir = env.dir.path();
    let docs = documented_commands();
    let table = run_doc(dir, &docs[2]).await;
    let lines: Vec<&str> = table.lines().collect();
    let words = |line: &str| {
        line.split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        words(lines[0]),
        words(&docs[2].output[0]),
        "the documented header"
    );
    let row = words(
        lines
            .iter()
            .find(|l| l.starts_with("peer-cluster-b "))
            .unwrap(),
    );
    let documented = words(&docs[2].output[1]);
    for i in [0, 1, 3, 6, 7, 8] {
        assert_eq!(row[i], documented[i], "column {i} of {row:?}");
    }
    assert_eq!(row[2], apiserver_url(b));
    let list: Vec<Value> = serde_json::from_str(&run_doc(dir, &docs[3]).await).unwrap();
    let entry_b = entry(&list, "peer-cluster-b");
    assert_eq!(entry_b["cluster_id"], "cluster-b");
    assert_eq!(entry_b["clusterset"], CLUSTERSET);
    assert!(entry_b["last_seen_seconds_ago"].as_i64().unwrap() < 120);
}

/// `peer remove --revoke`: the Secret, the token and the import go.
async fn peer_remove_revoke_takes_the_secret_the_token_and_the_import(env: &mut Env) {
    env.web_imported().await;
    let a = &env.plane.clusters[0];
    let b = &env.plane.clusters[1];
    let dir = env.dir.path();
    let admin_a = &env.admin_a;
    let admin_b = &env.admin_b;
    let docs = documented_commands();
    let imports_a: Api<ServiceImport> = Api::namespaced(admin_a.clone(), "demo");
    let rotated = kubeconfig_of(admin_a, "peer-cluster-b").await;
    let out = run_doc(dir, &docs[4]).await;
    env.joined[0] = false;
    env.web_imported = false;
    assert!(out.contains("deleted (revoked)"), "{out}");
    assert!(peer_secrets(admin_a).await.is_empty());
    assert!(token_secrets(admin_b, "cluster-a").await.is_empty());
    let last = client_from_yaml(&rotated).await;
    b.wait_for("the last token revoked", WAIT, || revoked(&last))
        .await;
    a.wait_for("demo/web no longer imported", WAIT, || async {
        match imports_a.get_opt("web").await.unwrap() {
            None => Ok(()),
            Some(_) => Err("still imported".to_owned()),
        }
    })
    .await;
    let run = cli(
        dir,
        &[
            "peer",
            "remove",
            "peer-cluster-b",
            "--kubeconfig",
            "a.kubeconfig",
        ],
    )
    .await;
    assert!(
        !run.ok
            && run
                .stderr
                .contains("no Secret clusterset-dns/peer-cluster-b"),
        "{}",
        run.stderr
    );
}

/// A peer that is down is listed as unhealthy, its id still known.
async fn a_peer_that_is_down_is_listed_unhealthy_with_its_id(env: &mut Env) {
    env.join(1).await;
    let dir = env.dir.path().to_owned();
    let dir = dir.as_path();
    let t0 = env.t0;
    drop(env.controller.take());
    let list = list_json(dir, "b.kubeconfig").await;
    assert_eq!(entry(&list, "peer-cluster-a")["healthy"], true, "{list:?}");
    env.plane.apiservers[0].stop();
    let list = list_json(dir, "b.kubeconfig").await;
    let down = entry(&list, "peer-cluster-a");
    assert_eq!(down["healthy"], false, "{down}");
    assert_eq!(down["cluster_id"], "cluster-a");
    assert!(down["error"].is_string());
    let run = cli(dir, &["peer", "list", "--kubeconfig", "b.kubeconfig"]).await;
    assert!(run.ok);
    let row = run
        .stdout
        .lines()
        .find(|l| l.starts_with("peer-cluster-a "))
        .unwrap();
    assert_eq!(
        row.split_whitespace().nth(3),
        Some("unhealthy"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("peer-cluster-a: ") && !l.contains("endpoints")),
        "the reason under the table: {}",
        run.stdout
    );
    eprintln!("whole test in {:.1} s", t0.elapsed().as_secs_f64());
}
