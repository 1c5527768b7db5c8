//! What one peer costs a member, bounded (issue 44, docs/controller.md
//! "Limits and budgets"): three member clusters (apiservers), a controller
//! in each on the shipped roles; cluster0 (the victim) reads the other two
//! with peer-reader tokens. cluster1's controller stops once its
//! publication is complete and its admin publishes, by hand, more than a
//! member should: objects past their size limit, more objects than the
//! caps, exports whose writes fail in the victim. cluster2 stays honest.
//! Each is a named trial showing the victim's memory stays bounded and the
//! honest peer's and the victim's own new exports are still imported
//! within 5 s.

mod controlplane;
mod support;

use std::time::{Duration, Instant};

use controlplane::{ClusterSpec, ControlPlane, ControllerProcess};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use support::trials::{self, behaviours};
use support::{counter, create_namespace, object};

use clusterset_dns::api::{PublishedService, ServiceImport};
use clusterset_dns::controller::naming::derived_service_name;

const WAIT: Duration = Duration::from_secs(30);
/// How soon a change of this cluster's own must be written meanwhile.
const PROMPT: Duration = Duration::from_secs(5);
const VICTIM: usize = 0;
const HOSTILE: usize = 1;
const HONEST: usize = 2;

struct Pair {
    // Dropped before the plane, whose directory holds their logs.
    victim: Option<ControllerProcess>,
    /// The honest peer's controller: held so that it runs until the pair drops.
    _honest: Option<ControllerProcess>,
    plane: ControlPlane,
    clients: Vec<Client>,
    kubeconfig: std::path::PathBuf,
}

impl Pair {
    async fn start() -> Self {
        let plane = ControlPlane::start_with(&[
            ClusterSpec::api_only(),
            ClusterSpec::api_only(),
            ClusterSpec::api_only(),
        ])
        .await;
        let mut clients = Vec::new();
        let mut kubeconfigs = Vec::new();
        for cluster in &plane.clusters {
            let client = cluster.admin_client().await;
            controlplane::set_cluster_properties(&client, &cluster.name, "cost-test").await;
            kubeconfigs.push(controlplane::install_controller(cluster).await);
            clients.push(client);
        }
        // The victim reads both peers; they read no one.
        for peer in [HOSTILE, HONEST] {
            let other = &plane.clusters[peer];
            let reader = controlplane::service_account_kubeconfig(
                other,
                controlplane::CONTROLLER_NAMESPACE,
                controlplane::PEER_READER_SA,
                3600,
            )
            .await;
            controlplane::add_peer_secret(&clients[VICTIM], &other.name, &reader).await;
        }
        let args = [
            "--peer-grace-period",
            "30s",
            "--startup-sync-timeout",
            "10s",
        ];
        let spawn =
            |i: usize| controlplane::spawn_controller(&plane.clusters[i], &kubeconfigs[i], &args);
        let hostile = spawn(HOSTILE);
        let honest = spawn(HONEST);
        tokio::task::block_in_place(|| {
            hostile.wait_ready(WAIT);
            honest.wait_ready(WAIT);
        });
        for peer in [HOSTILE, HONEST] {
            controlplane::wait_publication_marker(&clients[peer], WAIT).await;
        }
        hostile.kill();
        let victim = spawn(VICTIM);
        tokio::task::block_in_place(|| victim.wait_ready(WAIT));
        Self {
            victim: Some(victim),
            _honest: Some(honest),
            plane,
            clients,
            kubeconfig: kubeconfigs.swap_remove(0),
        }
    }

    fn victim(&self) -> &ControllerProcess {
        self.victim.as_ref().expect("victim running")
    }

    /// Restarts the victim's controller with `extra` flags.
    fn restart_victim(&mut self, extra: &[&str]) {
        self.victim.take().unwrap().kill();
        let mut args = vec![
            "--peer-grace-period",
            "30s",
            "--startup-sync-timeout",
            "10s",
        ];
        args.extend_from_slice(extra);
        let victim =
            controlplane::spawn_controller(&self.plane.clusters[VICTIM], &self.kubeconfig, &args);
        tokio::task::block_in_place(|| victim.wait_ready(WAIT));
        self.victim = Some(victim);
    }

    fn client(&self, i: usize) -> Client {
        self.clients[i].clone()
    }
}

fn main() {
    let args = trials::serial_arguments();
    let runtime = trials::runtime();
    let behaviours = behaviours![
        objects_past_their_size_limit_and_lists_past_the_caps_leave_the_victims_memory_bounded,
        a_thousand_imports_whose_writes_fail_back_off_and_a_refused_derived_service_holds_back_no_slice,
    ];
    let start: trials::Start<Pair> = || Box::pin(Pair::start());
    let trials = trials::group(&args, &runtime, start, behaviours);
    let conclusion = libtest_mimic::run(&args, trials);
    drop(runtime);
    conclusion.exit();
}

/// The most memory the controller process has held (VmHWM), in MiB.
fn peak_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap();
    kib / 1024.0
}

/// A ValidatingAdmissionPolicy and its binding refusing every create of
/// `resource` in namespace `ns`, and a wait until it does.
async fn deny_creates(client: &Client, ns: &str, group: &str, resource: &str) {
    let name = format!("deny-{resource}-in-{ns}");
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .create(
            &PostParams::default(),
            &object(json!({
                "metadata": {"name": name},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {
                        "resourceRules": [{
                            "apiGroups": [group],
                            "apiVersions": ["*"],
                            "operations": ["CREATE"],
                            "resources": [resource],
                        }],
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                    },
                    "validations": [{"expression": "false", "message": "refused by the test"}],
                },
            })),
        )
        .await
        .unwrap();
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .create(
            &PostParams::default(),
            &object(json!({
                "metadata": {"name": name},
                "spec": {"policyName": name, "validationActions": ["Deny"]},
            })),
        )
        .await
        .unwrap();
    // The policy takes a moment to be loaded: wait for a dry-run create
    // to be refused.
    let (api_version, kind, body_spec) = if group.is_empty() {
        ("v1".to_owned(), "Service", json!({"ports": [{"port": 80}]}))
    } else {
        (
            format!("{group}/v1beta1"),
            "ServiceImport",
            json!({"type": "Headless", "ports": []}),
        )
    };
    let (group_part, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (String::new(), api_version.clone()),
    };
    let resource_type = kube::discovery::ApiResource {
        group: group_part,
        version,
        api_version: api_version.clone(),
        kind: kind.into(),
        plural: resource.into(),
    };
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &resource_type);
    let probe: kube::api::DynamicObject = object(json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "probe"},
        "spec": body_spec,
    }));
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    support::wait_for(&format!("{name} in force"), WAIT, || async {
        match api.create(&dry_run, &probe).await {
            Err(kube::Error::Api(status)) if status.message.contains("refused by the test") => {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// The hostile cluster exports `ns/name` with `ports` in its publication.
async fn publish_export(
    client: &Client,
    ns: &str,
    name: &str,
    ports: serde_json::Value,
    headless: bool,
) {
    let spec = json!({"headless": headless, "ports": ports});
    controlplane::publish_export(client, ns, name, spec).await;
}

/// A slice of `name` as the hostile controller would publish it.
async fn publish_slice(client: &Client, peer: &str, ns: &str, name: &str, address: &str) {
    Api::<EndpointSlice>::namespaced(client.clone(), controlplane::CONTROLLER_NAMESPACE)
        .create(
            &PostParams::default(),
            &object(json!({
                "metadata": {
                    "name": format!("{ns}-{name}"),
                    "labels": {
                        "multicluster.kubernetes.io/service-name": name,
                        "clusterset-dns.io/service-namespace": ns,
                        "multicluster.kubernetes.io/source-cluster": peer,
                        "endpointslice.kubernetes.io/managed-by": clusterset_dns::controller::publication::PUBLISHED_BY,
                    },
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [address], "conditions": {"ready": true}}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            })),
        )
        .await
        .unwrap();
}

/// `exporter` (the victim itself, or the honest peer) exports
/// `default/<name>` with one admin, and the victim imports it within
/// [`PROMPT`]: one peer's volume delays no one else's change.
async fn export_is_prompt(exporter: &Client, victim: &Client, name: &str) -> Duration {
    let started = Instant::now();
    controlplane::export_selectorless(
        exporter,
        "default",
        name,
        json!([{"name": "http", "port": 80}]),
        &[],
    )
    .await;
    let imports = Api::<ServiceImport>::namespaced(victim.clone(), "default");
    support::wait_for(&format!("{name} imported"), PROMPT, || async {
        match imports.get_opt(name).await {
            Ok(Some(_)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    started.elapsed()
}

/// 40 PublishedServices of about 1 MB each (20,000 ports: past the size
/// limit of one object and, 50 to a page, past the size limit of a page),
/// and 500 small exports past caps of 200: the victim holds at most 200
/// exports of the peer, its peak memory stays under 128 MiB (it was a
/// multiple of the published size before), and its own new export is
/// written within 5 s throughout.
async fn objects_past_their_size_limit_and_lists_past_the_caps_leave_the_victims_memory_bounded(
    pair: &mut Pair,
) {
    pair.restart_victim(&["--peer-max-exports", "200", "--peer-max-services", "200"]);
    let (victim, hostile) = (pair.client(VICTIM), pair.client(HOSTILE));
    let hostile_id = pair.plane.clusters[HOSTILE].name.clone();
    let admin = pair.victim().admin_addr();
    let pid = pair.victim().pid();
    let before = peak_mib(pid);
    let big_ports: Vec<serde_json::Value> = (0..20_000)
        .map(|i| json!({"name": format!("p{i}"), "protocol": "TCP", "port": 1 + i}))
        .collect();
    let big_ports = serde_json::Value::Array(big_ports);
    create_namespace(&hostile, "big").await;
    for i in 0..40 {
        publish_export(
            &hostile,
            "big",
            &format!("b{i:02}"),
            big_ports.clone(),
            false,
        )
        .await;
    }
    // Namespaces that sort first, as a flood that wants to be served first.
    create_namespace(&hostile, "aaa").await;
    for i in 0..500 {
        publish_export(
            &hostile,
            "aaa",
            &format!("s{i:03}"),
            json!([{"name": "http", "port": 80, "protocol": "TCP"}]),
            false,
        )
        .await;
        if i % 100 == 0 {
            publish_slice(
                &hostile,
                &hostile_id,
                "aaa",
                &format!("s{i:03}"),
                "10.244.80.1",
            )
            .await;
        }
    }
    let took = export_is_prompt(&victim, &victim, "own-during-flood").await;
    println!("own export imported {took:?} after the flood was written");
    let took = export_is_prompt(&pair.client(HONEST), &victim, "honest-during-flood").await;
    println!("the honest peer's export imported {took:?} after the flood was written");
    support::wait_for("the caps counted", WAIT, || async {
        let refused = counter(
            admin,
            "clusterset_dns_controller_peer_objects_rejected_total",
            &["reason=\"peer-limit\""],
        )
        .await;
        if refused > 0.0 {
            Ok(())
        } else {
            Err(format!("{refused}"))
        }
    })
    .await;
    // Nothing of the 1 MB objects is imported, and at most the cap of the rest.
    let imports = Api::<ServiceImport>::all(victim.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    let from_flood = imports
        .items
        .iter()
        .filter(|i| i.metadata.namespace.as_deref() == Some("aaa"))
        .count();
    assert!(
        imports
            .items
            .iter()
            .all(|i| i.metadata.namespace.as_deref() != Some("big")),
        "an export past the size limit imported"
    );
    assert!(from_flood <= 200, "{from_flood} imports from past the cap");
    let peak = peak_mib(pid);
    println!("victim VmHWM {before:.1} -> {peak:.1} MiB");
    assert!(peak < 128.0, "victim VmHWM {peak:.1} MiB");
    pair.victim().assert_running();
    // The flood goes: a peer whose list cannot be read (a page past its
    // size limit) is failing, and the trials after this one need it read.
    Api::<PublishedService>::namespaced(hostile.clone(), controlplane::CONTROLLER_NAMESPACE)
        .delete_collection(&Default::default(), &ListParams::default())
        .await
        .unwrap();
    pair.restart_victim(&[]);
}

/// 1,000 headless exports into a namespace where the victim may create
/// no ServiceImport (an admission policy refuses every create): each
/// import write fails. The failures back off
/// (far fewer tries in a later window than services) and this cluster's
/// own change is written within 5 s. Beside them, an export whose derived
/// Service is refused (a quota on Services) still gets its slice: a
/// refused derived Service holds back nothing else.
async fn a_thousand_imports_whose_writes_fail_back_off_and_a_refused_derived_service_holds_back_no_slice(
    pair: &mut Pair,
) {
    let (victim, hostile) = (pair.client(VICTIM), pair.client(HOSTILE));
    let hostile_id = pair.plane.clusters[HOSTILE].name.clone();
    let admin = pair.victim().admin_addr();
    for (ns, group, resource) in [
        ("quota", "multicluster.x-k8s.io", "serviceimports"),
        ("noservices", "", "services"),
    ] {
        create_namespace(&victim, ns).await;
        create_namespace(&hostile, ns).await;
        deny_creates(&victim, ns, group, resource).await;
    }
    publish_export(
        &hostile,
        "noservices",
        "vip",
        json!([{"name": "http", "port": 80, "protocol": "TCP"}]),
        false,
    )
    .await;
    publish_slice(&hostile, &hostile_id, "noservices", "vip", "10.244.81.1").await;
    for i in 0..1000 {
        publish_export(
            &hostile,
            "quota",
            &format!("f{i:04}"),
            json!([{"name": "http", "port": 80, "protocol": "TCP"}]),
            true,
        )
        .await;
    }
    let errors = || {
        counter(
            admin,
            "clusterset_dns_controller_write_errors_total",
            &["kind=\"serviceimport\""],
        )
    };
    support::wait_for("the imports refused", WAIT, || async {
        let failed = errors().await;
        if failed >= 1000.0 {
            Ok(())
        } else {
            Err(format!("{failed} import writes failed"))
        }
    })
    .await;
    let took = export_is_prompt(&victim, &victim, "own-beside-failures").await;
    println!("own export imported {took:?} beside 1,000 failing services");
    let took = export_is_prompt(&pair.client(HONEST), &victim, "honest-beside-failures").await;
    println!("the honest peer's export imported {took:?} beside 1,000 failing services");
    // The slice of a service whose derived Service is refused is written.
    let slices = Api::<EndpointSlice>::namespaced(victim.clone(), "noservices");
    support::wait_for(
        "vip's slice imported beside its refused Service",
        WAIT,
        || async {
            let list = slices
                .list(&ListParams::default().labels("multicluster.kubernetes.io/service-name=vip"))
                .await
                .unwrap();
            if list.items.is_empty() {
                Err("no slice".into())
            } else {
                Ok(())
            }
        },
    )
    .await;
    let derived = Api::<Service>::namespaced(victim.clone(), "noservices")
        .get_opt(&derived_service_name("noservices", "vip"))
        .await
        .unwrap();
    assert!(derived.is_none(), "the quota allowed a Service");
    // Backing off: 10 s later, in a 10 s window, each service is tried at
    // most once or twice (delays of 8 s and more), not ten times.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let from = errors().await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let tries = errors().await - from;
    println!("failed import writes in a 10 s window: {tries}");
    assert!(
        tries < 2000.0,
        "{tries} tries of 1,000 failing services in 10 s"
    );
}
