//! `clusterset-dns hub init|join|list|leave`, the real binary against a
//! real hub (etcd, kube-apiserver and kube-controller-manager, which
//! fills in quota usage, publishes the root CA and deletes namespaces)
//! and a member cluster (an apiserver with the ClusterProperty CRD).
//!
//! What a member's hub credential may do is tried with that credential,
//! as a hostile member would: write in another member's namespace, claim
//! another cluster id, name a PublishedService after another Service,
//! read Secrets, store past its quota. Each is refused by the layer meant
//! to refuse it (RBAC, the ValidatingAdmissionPolicy, the ResourceQuota),
//! with the reason in the answer.
//!
//! Each behaviour is a named trial on one hub and member; each passes
//! alone, taking the steps it starts from ([`Env::joined`]).

mod controlplane;
mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use clusterset_dns::api::PublishedService;
use clusterset_dns::hub;
use controlplane::{
    CONTROLLER_NAMESPACE, ClusterSpec, ControlPlane, client_from_yaml, set_cluster_properties,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ResourceQuota, Secret};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use support::create_if_absent;
use support::trials::{self, behaviours};

/// The member's cluster id.
const MEMBER: &str = "cluster-a";
/// The member's pod range, as `hub join --endpoint-cidr` records it
/// (docs/hub.md's commands give the same).
const MEMBER_POD_RANGE: &str = "10.1.0.0/16";
/// The quota's count of PublishedServices.
const PUBLISHED_COUNT: &str = "count/publishedservices.clusterset-dns.io";
/// How long the hub may take to apply a quota or delete a namespace.
const WAIT: Duration = Duration::from_secs(30);

/// What the binary did.
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs `clusterset-dns <args>`, without `KUBECONFIG`.
async fn cli(args: &[&str]) -> Run {
    cli_in(Path::new("."), args).await
}

/// Runs `clusterset-dns <args>` in `dir`, without `KUBECONFIG`.
async fn cli_in(dir: &Path, args: &[&str]) -> Run {
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

/// Runs a command that must succeed; returns its output.
async fn ok(args: &[&str]) -> String {
    let run = cli(args).await;
    assert!(run.ok, "{args:?} failed:\n{}{}", run.stdout, run.stderr);
    run.stdout
}

/// The status code of a failed request, or 200, with the message.
fn outcome<T>(result: kube::Result<T>) -> (u16, String) {
    match result {
        Ok(_) => (200, String::new()),
        Err(kube::Error::Api(status)) => (status.code, status.message),
        Err(other) => panic!("not an API error: {other}"),
    }
}

/// A PublishedService of `ns/name`, named `object_name`, labelled with
/// `cluster` as its source.
fn published(object_name: &str, ns: &str, name: &str, cluster: &str) -> PublishedService {
    serde_json::from_value(json!({
        "apiVersion": "clusterset-dns.io/v1alpha1",
        "kind": "PublishedService",
        "metadata": {
            "name": object_name,
            "labels": {"multicluster.kubernetes.io/source-cluster": cluster},
        },
        "spec": {"namespace": ns, "name": name, "ipFamilies": ["IPv4"], "ports": [{"port": 80, "protocol": "TCP"}]},
    }))
    .unwrap()
}

/// Creates `object`, waiting while the hub's quota controller has not yet
/// counted the namespace (admission refuses every create until it has);
/// returns the outcome.
async fn create_published(api: &Api<PublishedService>, object: &PublishedService) -> (u16, String) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (code, message) = outcome(api.create(&PostParams::default(), object).await);
        if !message.contains("status unknown for quota") || tokio::time::Instant::now() >= deadline
        {
            return (code, message);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A hub and a member, and the paths of their admin kubeconfigs.
struct Env {
    _plane: ControlPlane,
    hub: Client,
    member: Client,
    hub_kubeconfig: String,
    member_kubeconfig: String,
}

impl Env {
    async fn start() -> Self {
        let hub_spec = ClusterSpec {
            crds: false,
            nodes: 0,
            ..ClusterSpec::member(0)
        };
        let plane = ControlPlane::start_with(&[hub_spec, ClusterSpec::api_only()]).await;
        let hub = plane.clusters[0].admin_client().await;
        let member = plane.clusters[1].admin_client().await;
        set_cluster_properties(&member, MEMBER, "hub-set").await;
        let namespace: Namespace =
            serde_json::from_value(json!({"metadata": {"name": CONTROLLER_NAMESPACE}})).unwrap();
        create_if_absent(&Api::all(member.clone()), &namespace).await;
        let path = |i: usize| plane.clusters[i].admin_kubeconfig.display().to_string();
        Self {
            hub_kubeconfig: path(0),
            member_kubeconfig: path(1),
            hub,
            member,
            _plane: plane,
        }
    }

    /// `hub init`, then `hub join` of the member with `extra`, unless the
    /// member's hub Secret is there; returns the member's hub client.
    async fn joined(&self, extra: &[&str]) -> Client {
        let secrets: Api<Secret> = Api::namespaced(self.member.clone(), CONTROLLER_NAMESPACE);
        let namespace = Api::<Namespace>::all(self.hub.clone())
            .get_opt(&hub::member_namespace(MEMBER).unwrap())
            .await
            .unwrap();
        let live = namespace.is_some_and(|n| n.metadata.deletion_timestamp.is_none());
        if !live || secrets.get_opt(hub::HUB_SECRET).await.unwrap().is_none() || !extra.is_empty() {
            ok(&["hub", "init", "--kubeconfig", &self.hub_kubeconfig]).await;
            let args = [&self.join_command()[..], extra].concat();
            ok(&args).await;
        }
        self.member_credential().await
    }

    /// Waits until the member's quota says `hard` PublishedServices, of
    /// which `used` are stored, as the hub's quota controller counts them.
    async fn quota_counted(&self, hard: &str, used: &str) {
        let namespace = hub::member_namespace(MEMBER).unwrap();
        let quotas: Api<ResourceQuota> = Api::namespaced(self.hub.clone(), &namespace);
        support::wait_for("the quota counted", WAIT, || {
            let quotas = quotas.clone();
            async move {
                let status = quotas
                    .get(hub::QUOTA)
                    .await
                    .map_err(|e| e.to_string())?
                    .status
                    .unwrap_or_default();
                let count = |of: Option<BTreeMap<String, Quantity>>| {
                    of.and_then(|m| m.get(PUBLISHED_COUNT).map(|q| q.0.clone()))
                };
                let now = (count(status.hard), count(status.used));
                if now == (Some(hard.to_owned()), Some(used.to_owned())) {
                    Ok(())
                } else {
                    Err(format!("(hard, used) = {now:?}"))
                }
            }
        })
        .await;
    }

    /// `hub join` of the member, as the docs write it: its pod range
    /// given (the apiserver-only member has no Nodes to read one from).
    fn join_command(&self) -> [&str; 8] {
        [
            "hub",
            "join",
            "--kubeconfig",
            &self.hub_kubeconfig,
            "--member-kubeconfig",
            &self.member_kubeconfig,
            "--endpoint-cidr",
            MEMBER_POD_RANGE,
        ]
    }

    /// The member's hub client, from its hub Secret.
    async fn member_credential(&self) -> Client {
        let secret = Api::<Secret>::namespaced(self.member.clone(), CONTROLLER_NAMESPACE)
            .get(hub::HUB_SECRET)
            .await
            .unwrap();
        let yaml = String::from_utf8(secret.data.unwrap()["kubeconfig"].0.clone()).unwrap();
        client_from_yaml(&yaml).await
    }
}

fn main() {
    let args = trials::serial_arguments();
    let runtime = trials::runtime();
    let behaviours = behaviours![
        init_is_idempotent_and_installs_the_crd_roles_policy_and_flow_schema,
        a_joined_member_publishes_in_its_namespace_and_reads_every_publication,
        a_member_cannot_write_in_another_members_namespace,
        a_member_cannot_claim_another_cluster_id_or_another_services_name,
        a_member_reads_no_secret_and_writes_nothing_but_its_publication,
        a_member_past_its_quota_is_refused_by_the_hub,
        join_records_the_members_pod_ranges_and_without_them_writes_nothing,
        a_namespace_bound_to_another_member_is_never_joined,
        hub_list_shows_each_member_with_its_quota_and_tokens,
        joining_again_rotates_the_token_and_revokes_the_old_one,
        leave_revokes_the_members_token_and_deletes_its_hub_secret,
        the_documented_commands_run_as_written,
    ];
    let start: trials::Start<Env> = || Box::pin(Env::start());
    let trials = trials::group(&args, &runtime, start, behaviours);
    let conclusion = libtest_mimic::run(&args, trials);
    drop(runtime);
    conclusion.exit();
}

async fn init_is_idempotent_and_installs_the_crd_roles_policy_and_flow_schema(env: &mut Env) {
    for _ in 0..2 {
        let out = ok(&["hub", "init", "--kubeconfig", &env.hub_kubeconfig]).await;
        for object in [
            "CustomResourceDefinition publishedservices.clusterset-dns.io",
            "ClusterRole clusterset-dns-hub-reader",
            "ValidatingAdmissionPolicy clusterset-dns-hub-member",
            "ValidatingAdmissionPolicyBinding clusterset-dns-hub-member",
            "FlowSchema clusterset-dns-hub-members",
        ] {
            assert!(out.contains(&format!("{object} applied")), "{out}");
        }
    }
    let schemas: Api<kube::api::DynamicObject> = Api::all_with(
        env.hub.clone(),
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "flowcontrol.apiserver.k8s.io",
            "v1",
            "FlowSchema",
        )),
    );
    let schema = schemas.get(hub::FLOW_SCHEMA).await.unwrap();
    assert_eq!(
        schema.data["spec"]["distinguisherMethod"]["type"], "ByUser",
        "each member's requests queue apart"
    );
}

async fn a_joined_member_publishes_in_its_namespace_and_reads_every_publication(env: &mut Env) {
    let member = env.joined(&[]).await;
    let namespace = hub::member_namespace(MEMBER).unwrap();
    let own: Api<PublishedService> = Api::namespaced(member.clone(), &namespace);
    own.delete("demo.web", &DeleteParams::default()).await.ok();
    let (code, message) =
        create_published(&own, &published("demo.web", "demo", "web", MEMBER)).await;
    assert_eq!(code, 200, "publishing in its own namespace: {message}");
    let all = Api::<PublishedService>::all(member)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        all.items
            .iter()
            .any(|p| p.name_any() == "demo.web" && p.namespace().as_deref() == Some(&namespace[..]))
    );
}

async fn a_member_cannot_write_in_another_members_namespace(env: &mut Env) {
    let member = env.joined(&[]).await;
    // Another member's namespace, as `hub join` would bind it.
    let other: Namespace = serde_json::from_value(json!({
        "metadata": {"name": "member-cluster-b", "labels": {hub::LABEL_MEMBER: "cluster-b"}},
    }))
    .unwrap();
    create_if_absent(&Api::all(env.hub.clone()), &other).await;
    let theirs: Api<PublishedService> = Api::namespaced(member, "member-cluster-b");
    let (code, message) = outcome(
        theirs
            .create(
                &PostParams::default(),
                &published("demo.web", "demo", "web", "cluster-b"),
            )
            .await,
    );
    assert_eq!(code, 403, "{message}");
    assert!(message.contains("forbidden"), "{message}");
}

async fn a_member_cannot_claim_another_cluster_id_or_another_services_name(env: &mut Env) {
    let member = env.joined(&[]).await;
    let own: Api<PublishedService> =
        Api::namespaced(member, &hub::member_namespace(MEMBER).unwrap());
    let (code, message) = outcome(
        own.create(
            &PostParams::default(),
            &published("demo.api", "demo", "api", "cluster-b"),
        )
        .await,
    );
    assert_eq!(code, 403, "{message}");
    assert!(
        message.contains("the multicluster.kubernetes.io/source-cluster label must be the member's own cluster id"),
        "{message}"
    );
    let (code, message) = outcome(
        own.create(
            &PostParams::default(),
            &published("demo.api", "kube-system", "kube-dns", MEMBER),
        )
        .await,
    );
    assert_eq!(code, 422, "{message}");
    assert!(message.contains("is named <namespace>.<name>"), "{message}");
}

async fn a_member_reads_no_secret_and_writes_nothing_but_its_publication(env: &mut Env) {
    let member = env.joined(&[]).await;
    let namespace = hub::member_namespace(MEMBER).unwrap();
    let (code, _) = outcome(
        Api::<Secret>::namespaced(member.clone(), &namespace)
            .list(&ListParams::default())
            .await,
    );
    assert_eq!(
        code, 403,
        "a member reads no Secret, not even its own namespace's"
    );
    let config: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "anything"}})).unwrap();
    let (code, _) = outcome(
        Api::<ConfigMap>::namespaced(member.clone(), &namespace)
            .create(&PostParams::default(), &config)
            .await,
    );
    assert_eq!(code, 403, "a member writes nothing but its publication");
    // Its record (its pod ranges, the hub admin's) it reads, as every
    // member does, and cannot change; no other ConfigMap is readable.
    let configs: Api<ConfigMap> = Api::namespaced(member.clone(), &namespace);
    let record = configs.get(hub::MEMBER_RECORD).await.unwrap();
    assert_eq!(
        record.data.unwrap()[hub::RECORD_ENDPOINT_CIDRS],
        MEMBER_POD_RANGE
    );
    let widen = json!({"data": {hub::RECORD_ANY_ENDPOINT: "true"}});
    let (code, _) = outcome(
        configs
            .patch(
                hub::MEMBER_RECORD,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&widen),
            )
            .await,
    );
    assert_eq!(code, 403, "a member cannot widen its own record");
    let (code, _) = outcome(
        configs
            .delete(hub::MEMBER_RECORD, &DeleteParams::default())
            .await,
    );
    assert_eq!(code, 403, "a member cannot delete its own record");
    let (code, _) = outcome(configs.get("kube-root-ca.crt").await);
    assert_eq!(code, 403, "no ConfigMap but the records is readable");
    let (code, _) = outcome(
        Api::<ConfigMap>::all(member.clone())
            .list(&ListParams::default())
            .await,
    );
    assert_eq!(code, 403, "a list must select the records' name");
    let (code, _) = outcome(
        Api::<Namespace>::all(member)
            .list(&ListParams::default())
            .await,
    );
    assert_eq!(code, 403, "a member cannot list the hub's namespaces");
}

async fn join_records_the_members_pod_ranges_and_without_them_writes_nothing(env: &mut Env) {
    // The member has no Nodes: without --endpoint-cidr or
    // --allow-any-endpoint, nothing is written.
    let hub_namespaces = Api::<Namespace>::all(env.hub.clone());
    let namespace = hub::member_namespace(MEMBER).unwrap();
    let before = hub_namespaces.get_opt(&namespace).await.unwrap().is_some();
    let run = cli(&env.join_command()[..6]).await;
    assert!(!run.ok, "{}", run.stdout);
    assert!(
        run.stderr
            .contains("the member's pod ranges are not known: the member has no Nodes")
            && run.stderr.contains("--endpoint-cidr")
            && run.stderr.contains("Nothing was written"),
        "{}",
        run.stderr
    );
    let after = hub_namespaces.get_opt(&namespace).await.unwrap().is_some();
    assert_eq!(before, after, "no member namespace made or removed");
    // With --allow-any-endpoint the record says so, and `hub list` too.
    let out = ok(&[&env.join_command()[..6], &["--allow-any-endpoint"]].concat()).await;
    assert!(
        out.contains("no endpoint ranges recorded (--allow-any-endpoint)"),
        "{out}"
    );
    let record = Api::<ConfigMap>::namespaced(env.hub.clone(), &namespace)
        .get(hub::MEMBER_RECORD)
        .await
        .unwrap();
    assert_eq!(
        hub::read_member_record(&record.data.unwrap_or_default()),
        Ok(None)
    );
    let list = ok(&["hub", "list", "--kubeconfig", &env.hub_kubeconfig]).await;
    assert!(list.contains("\tany\n"), "{list}");
    // Back to the range the other trials expect.
    let out = ok(&env.join_command()).await;
    assert!(
        out.contains(&format!(
            "endpoints accepted only in {MEMBER_POD_RANGE} (from --endpoint-cidr)"
        )),
        "{out}"
    );
}

async fn a_member_past_its_quota_is_refused_by_the_hub(env: &mut Env) {
    let member = env.joined(&["--max-exports", "2"]).await;
    let namespace = hub::member_namespace(MEMBER).unwrap();
    let own: Api<PublishedService> = Api::namespaced(member, &namespace);
    let clear = || async {
        for p in own.list(&ListParams::default()).await.unwrap().items {
            own.delete(&p.name_any(), &DeleteParams::default())
                .await
                .unwrap();
        }
    };
    clear().await;
    env.quota_counted("2", "0").await;
    for n in 0..2 {
        let service = format!("web{n}");
        let (code, message) = create_published(
            &own,
            &published(&format!("demo.{service}"), "demo", &service, MEMBER),
        )
        .await;
        assert_eq!(code, 200, "{message}");
    }
    let (code, refusal) =
        create_published(&own, &published("demo.web2", "demo", "web2", MEMBER)).await;
    assert_eq!(code, 403, "{refusal}");
    assert!(
        refusal.contains("exceeded quota")
            && refusal.contains("count/publishedservices.clusterset-dns.io"),
        "{refusal}"
    );
    // Back to the default for the trials after this one.
    clear().await;
    env.joined(&["--max-exports", "2000"]).await;
    env.quota_counted("2k", "0").await;
}

async fn a_namespace_bound_to_another_member_is_never_joined(env: &mut Env) {
    env.joined(&[]).await;
    let namespaces: Api<Namespace> = Api::all(env.hub.clone());
    let namespace = hub::member_namespace(MEMBER).unwrap();
    let relabel = |id: &str| {
        kube::api::Patch::Merge(json!({"metadata": {"labels": {hub::LABEL_MEMBER: id}}}))
    };
    namespaces
        .patch(
            &namespace,
            &kube::api::PatchParams::default(),
            &relabel("cluster-z"),
        )
        .await
        .unwrap();
    let run = cli(&env.join_command()).await;
    namespaces
        .patch(
            &namespace,
            &kube::api::PatchParams::default(),
            &relabel(MEMBER),
        )
        .await
        .unwrap();
    assert!(!run.ok, "{}", run.stdout);
    assert!(
        run.stderr.contains("is not bound to member cluster-a")
            && run.stderr.contains("nothing was written"),
        "{}",
        run.stderr
    );
}

async fn hub_list_shows_each_member_with_its_quota_and_tokens(env: &mut Env) {
    env.joined(&[]).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let out = ok(&["hub", "list", "--kubeconfig", &env.hub_kubeconfig]).await;
        let row = out
            .lines()
            .find(|l| l.starts_with(&format!("{MEMBER}\t")))
            .unwrap_or_else(|| panic!("{MEMBER} not listed:\n{out}"));
        let cells: Vec<&str> = row.split('\t').collect();
        assert_eq!(cells[1], "member-cluster-a", "{row}");
        assert_eq!(
            cells[2], "never",
            "no controller renews its Lease here: {row}"
        );
        assert_eq!(cells[5], "1", "one live token: {row}");
        assert_eq!(cells[6], MEMBER_POD_RANGE, "its recorded pod range: {row}");
        // Used counts show once the quota controller has counted; limits
        // as the apiserver writes quantities.
        if cells[3].ends_with("/2k") && cells[4].ends_with("/10k") && !cells[3].starts_with('?') {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "quota never counted: {row}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn joining_again_rotates_the_token_and_revokes_the_old_one(env: &mut Env) {
    let before = env.joined(&[]).await;
    let out = ok(&env.join_command()).await;
    assert!(out.contains("earlier token"), "{out}");
    let after = env.member_credential().await;
    assert_eq!(list_code(after).await, 200);
    token_refused("the old token", &before).await;
}

async fn leave_revokes_the_members_token_and_deletes_its_hub_secret(env: &mut Env) {
    let member = env.joined(&[]).await;
    let out = ok(&[
        "hub",
        "leave",
        "--kubeconfig",
        &env.hub_kubeconfig,
        "--member",
        MEMBER,
        "--member-kubeconfig",
        &env.member_kubeconfig,
    ])
    .await;
    assert!(out.contains("tokens are revoked"), "{out}");
    assert!(
        out.contains(&format!(
            "Secret {CONTROLLER_NAMESPACE}/{} deleted",
            hub::HUB_SECRET
        )),
        "{out}"
    );
    token_refused("the member's token", &member).await;
    let secrets: Api<Secret> = Api::namespaced(env.member.clone(), CONTROLLER_NAMESPACE);
    assert!(secrets.get_opt(hub::HUB_SECRET).await.unwrap().is_none());
    member_namespace_gone(env).await;
}

/// The `$ clusterset-dns …` lines of the console block after the
/// `<!-- hub-cli:` marker in docs/hub.md, as arguments.
fn documented_commands() -> Vec<Vec<String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/hub.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines = text.lines().skip_while(|l| !l.starts_with("<!-- hub-cli:"));
    assert!(
        lines.next().is_some(),
        "no <!-- hub-cli: marker in docs/hub.md"
    );
    assert_eq!(
        lines.next(),
        Some("```console"),
        "a console block after the marker"
    );
    lines
        .take_while(|l| *l != "```")
        .filter_map(|l| l.strip_prefix("$ "))
        .map(|command| {
            assert!(
                !command.contains(['"', '\'', '$', '\\', '|', '<']),
                "documented command needs a shell: {command}"
            );
            let mut words = command.split_whitespace().map(str::to_owned);
            assert_eq!(words.next().as_deref(), Some("clusterset-dns"), "{command}");
            words.collect()
        })
        .collect()
}

async fn the_documented_commands_run_as_written(env: &mut Env) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&env.hub_kubeconfig, dir.path().join("hub.kubeconfig")).unwrap();
    std::fs::copy(&env.member_kubeconfig, dir.path().join("a.kubeconfig")).unwrap();
    let commands = documented_commands();
    let verbs: Vec<&str> = commands.iter().map(|c| c[1].as_str()).collect();
    assert_eq!(verbs, ["init", "join", "list", "leave"]);
    let mut outputs = Vec::new();
    for command in &commands {
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        let run = cli_in(dir.path(), &args).await;
        assert!(
            run.ok,
            "documented {args:?} failed:\n{}{}",
            run.stdout, run.stderr
        );
        eprintln!("`{}`:\n{}", args.join(" "), run.stdout);
        outputs.push(run.stdout);
    }
    assert!(outputs[0].contains("ready for members"), "{}", outputs[0]);
    let written = format!("Secret {CONTROLLER_NAMESPACE}/{} written", hub::HUB_SECRET);
    assert!(outputs[1].contains(&written), "{}", outputs[1]);
    let row = format!("{MEMBER}\tmember-{MEMBER}\t");
    assert!(outputs[2].contains(&row), "{}", outputs[2]);
    assert!(outputs[3].contains("tokens are revoked"), "{}", outputs[3]);
    member_namespace_gone(env).await;
}

/// Waits until the member's namespace is gone from the hub (its namespace
/// controller deletes its contents first): a later join needs it gone.
async fn member_namespace_gone(env: &Env) {
    support::wait_for("the member namespace gone", Duration::from_secs(90), || {
        let hub = env.hub.clone();
        async move {
            Api::<Namespace>::all(hub)
                .get_opt(&hub::member_namespace(MEMBER).unwrap())
                .await
                .unwrap()
                .map_or(Ok(()), |n| Err(format!("{:?}", n.status)))
        }
    })
    .await;
}

/// The status of a hub-wide list of PublishedServices with `client`.
async fn list_code(client: Client) -> u16 {
    outcome(
        Api::<PublishedService>::all(client)
            .list(&ListParams::default())
            .await,
    )
    .0
}

/// Waits until `client`'s token is refused (401): the apiserver checks a
/// token's anchor through its cache, so a revoked one stops within moments.
async fn token_refused(what: &str, client: &Client) {
    support::wait_for(&format!("{what} refused"), WAIT, || {
        let client = client.clone();
        async move {
            match list_code(client).await {
                401 => Ok(()),
                code => Err(format!("still {code}")),
            }
        }
    })
    .await;
}
