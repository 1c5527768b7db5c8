//! A hostile member cluster (issue 31, docs/controller.md): two member
//! clusters (apiservers) reading each other with peer-reader tokens, a
//! controller in each on the shipped roles; then cluster1's admin turns
//! hostile: stops its controller (once its publication is complete) and
//! writes, only in cluster1, what a compromised cluster would publish. Each attack
//! is a named trial showing that it fails, that cluster0's objects keep
//! their resourceVersion, that the refusal is visible (Event, metric,
//! `/explain`), and that cluster1's honest exports keep importing.

mod controlplane;
mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use controlplane::{ClusterSpec, ControlPlane, ControllerProcess};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use support::trials::{self, behaviours};
use support::{counter, http_get, object};

use clusterset_dns::api::{PublishedService, ServiceExport, ServiceImport};
use clusterset_dns::controller::naming::mirrored_slice_name;
use clusterset_dns::controller::publication::PUBLISHED_BY;

const WAIT: Duration = Duration::from_secs(30);
/// The victim.
const VICTIM: usize = 0;
/// The hostile member.
const HOSTILE: usize = 1;

struct Pair {
    // Dropped before the plane, whose directory holds their logs.
    controllers: Vec<Option<ControllerProcess>>,
    plane: ControlPlane,
    clients: Vec<Client>,
    kubeconfigs: Vec<std::path::PathBuf>,
}

impl Pair {
    async fn start() -> Self {
        let plane =
            ControlPlane::start_with(&[ClusterSpec::api_only(), ClusterSpec::api_only()]).await;
        let mut clients = Vec::new();
        let mut kubeconfigs = Vec::new();
        for cluster in &plane.clusters {
            let client = cluster.admin_client().await;
            controlplane::set_cluster_properties(&client, &cluster.name, "hostile-test").await;
            kubeconfigs.push(controlplane::install_controller(cluster).await);
            clients.push(client);
        }
        // Each reads the other with a token of the shipped peer-reader role.
        for (i, client) in clients.iter().enumerate() {
            let other = &plane.clusters[1 - i];
            let reader = controlplane::service_account_kubeconfig(
                other,
                controlplane::CONTROLLER_NAMESPACE,
                controlplane::PEER_READER_SA,
                3600,
            )
            .await;
            controlplane::add_peer_secret(client, &other.name, &reader).await;
        }
        let mut pair = Self {
            controllers: Vec::new(),
            plane,
            clients,
            kubeconfigs,
        };
        for i in 0..2 {
            let controller = pair.spawn(i);
            pair.controllers.push(Some(controller));
        }
        for i in 0..2 {
            tokio::task::block_in_place(|| pair.controller(i).wait_ready(WAIT));
        }
        // The hostile admin takes over once its controller has published
        // (the victim reads the publication from then on): what cluster1
        // publishes is now whatever its admin writes.
        controlplane::wait_publication_marker(pair.client(HOSTILE), WAIT).await;
        pair.controllers[HOSTILE].take().unwrap().kill();
        pair
    }

    fn spawn(&self, i: usize) -> ControllerProcess {
        self.spawn_with(i, &[])
    }

    fn spawn_with(&self, i: usize, extra: &[&str]) -> ControllerProcess {
        // Identity and marker read again every 2 s: a changed id is
        // refused well within the 8 s grace the trials check against.
        let mut args = vec![
            "--peer-grace-period",
            "8s",
            "--startup-sync-timeout",
            "10s",
            "--peer-reread-interval",
            "2s",
        ];
        args.extend_from_slice(extra);
        controlplane::spawn_controller(&self.plane.clusters[i], &self.kubeconfigs[i], &args)
    }

    /// Restarts the victim's controller with `extra` flags, and waits for
    /// it to be ready.
    fn restart_victim(&mut self, extra: &[&str]) {
        self.controllers[VICTIM].take().unwrap().kill();
        let controller = self.spawn_with(VICTIM, extra);
        tokio::task::block_in_place(|| controller.wait_ready(WAIT));
        self.controllers[VICTIM] = Some(controller);
    }

    fn controller(&self, i: usize) -> &ControllerProcess {
        self.controllers[i].as_ref().expect("controller running")
    }

    fn client(&self, i: usize) -> &Client {
        &self.clients[i]
    }

    fn hostile_id(&self) -> &str {
        &self.plane.clusters[HOSTILE].name
    }
}

fn main() {
    let args = trials::serial_arguments();
    let runtime = trials::runtime();
    let behaviours = behaviours![
        a_peer_slice_named_after_a_local_slice_takes_nothing_over,
        an_object_not_ours_under_a_computed_name_is_refused_with_an_event_a_metric_and_explain,
        slices_under_peer_chosen_names_are_replaced_without_a_gap_on_upgrade,
        endpoints_in_the_victims_service_cidr_or_at_its_node_addresses_are_refused_and_the_rest_kept,
        endpoints_outside_the_ranges_recorded_for_a_peer_are_refused,
        an_export_into_the_controllers_namespace_is_refused_and_imported_nowhere,
        in_the_opt_in_mode_only_selected_namespaces_are_imported_into,
        a_peer_past_its_share_of_clusterset_ips_gets_no_new_import,
        a_publication_naming_another_or_no_valid_service_is_refused_with_an_event_and_a_metric,
        an_unnamed_port_beside_a_peers_named_port_is_a_port_conflict_and_the_service_keeps_following_its_endpoints,
        each_field_a_service_may_not_have_is_refused_and_the_honest_exporters_changes_still_arrive,
        an_import_made_first_by_someone_else_is_refused_and_never_written,
        headless_imports_flipped_to_clusterset_ip_count_against_the_peers_share,
        a_broken_rotation_of_a_peer_secret_is_refused_and_keeps_the_imports,
        a_publication_marker_toggled_every_2_s_causes_a_handful_of_reconnects_and_no_import_write,
        // Last: the hostile peer stays refused afterwards.
        a_peer_that_changes_its_cluster_id_is_refused_and_its_imports_go_after_grace,
    ];
    let start: trials::Start<Pair> = || Box::pin(Pair::start());
    let trials = trials::group(&args, &runtime, start, behaviours);
    let conclusion = libtest_mimic::run(&args, trials);
    drop(runtime);
    conclusion.exit();
}

/// What the hostile cluster's controller would publish of a selector-less
/// Service `ns/name` (port `http` 80), written by its admin: the
/// PublishedService and the ServiceExport (`controlplane::publish_export`),
/// and the Service itself.
async fn publish_selectorless(client: &Client, ns: &str, name: &str) {
    publish_selectorless_as(client, ns, name, false).await;
}

/// [`publish_selectorless`], of a headless Service (`clusterIP: None`)
/// when `headless`.
async fn publish_selectorless_as(client: &Client, ns: &str, name: &str, headless: bool) {
    let ports = json!([{"name": "http", "port": 80, "protocol": "TCP"}]);
    controlplane::publish_export(
        client,
        ns,
        name,
        json!({"headless": headless, "ports": ports}),
    )
    .await;
    let mut spec = json!({"ports": ports});
    if headless {
        spec["clusterIP"] = json!("None");
    }
    Api::<Service>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": name}, "spec": spec})),
        )
        .await
        .unwrap();
}

/// A slice as a peer's controller publishes one for a Service of `ns`,
/// with the name and address the hostile admin chose.
fn forged_slice(peer: &str, ns: &str, service: &str, name: &str, address: &str) -> EndpointSlice {
    object(json!({
        "metadata": {
            "name": name,
            "labels": {
                "multicluster.kubernetes.io/service-name": service,
                "clusterset-dns.io/service-namespace": ns,
                "multicluster.kubernetes.io/source-cluster": peer,
                "endpointslice.kubernetes.io/managed-by": PUBLISHED_BY,
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": true}}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }))
}

/// A slice of this cluster's own, not the controller's.
fn local_slice(name: &str, service: &str, address: &str) -> EndpointSlice {
    object(json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
    }))
}

/// Publishes `slice` in the hostile cluster (its controller's namespace).
async fn publish_slice(client: &Client, slice: &EndpointSlice) -> EndpointSlice {
    create_slice(client, controlplane::CONTROLLER_NAMESPACE, slice).await
}

async fn create_slice(client: &Client, ns: &str, slice: &EndpointSlice) -> EndpointSlice {
    Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), slice)
        .await
        .unwrap()
}

async fn get_slice(client: &Client, ns: &str, name: &str) -> Option<EndpointSlice> {
    Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

/// The addresses of the slices of `service` this cluster imports from
/// `source`, by slice name.
async fn imported(client: &Client, ns: &str, service: &str, source: &str) -> Vec<(String, String)> {
    let params = ListParams::default().labels(&format!(
        "multicluster.kubernetes.io/service-name={service},multicluster.kubernetes.io/source-cluster={source}"
    ));
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .list(&params)
        .await
        .unwrap();
    let mut found: Vec<(String, String)> = slices
        .items
        .iter()
        .flat_map(|slice| {
            let name = slice.metadata.name.clone().unwrap_or_default();
            slice
                .endpoints
                .iter()
                .flat_map(|e| e.addresses.clone())
                .map(move |address| (name.clone(), address))
        })
        .collect();
    found.sort();
    found
}

/// The measured attack: cluster1 publishes mirrored slices named
/// after cluster0's `default/kubernetes` slice (the apiserver's endpoints)
/// and after a hand-made slice of a selector-less Service. Before the fix
/// both ended with cluster1's address and our labels; now both keep their
/// resourceVersion, and cluster1's endpoints arrive under computed names.
async fn a_peer_slice_named_after_a_local_slice_takes_nothing_over(pair: &mut Pair) {
    let (victim, hostile) = (pair.client(VICTIM), pair.client(HOSTILE));
    let ns = "default";
    let hostile_id = pair.hostile_id().to_owned();
    // What the apiserver's endpoint reconciler writes (off in these
    // apiservers), and a user's slice of a selector-less Service.
    let kubernetes = create_slice(
        victim,
        ns,
        &local_slice("kubernetes", "kubernetes", "10.10.0.1"),
    )
    .await;
    let manual = create_slice(victim, ns, &local_slice("manual", "manual", "10.10.0.2")).await;

    publish_selectorless(hostile, ns, "takeover").await;
    for (name, address) in [("kubernetes", "10.244.66.1"), ("manual", "10.244.66.2")] {
        publish_slice(
            hostile,
            &forged_slice(&hostile_id, ns, "takeover", name, address),
        )
        .await;
    }

    let expected: Vec<(String, String)> = vec![
        (
            mirrored_slice_name(ns, "takeover", &hostile_id, "kubernetes"),
            "10.244.66.1".into(),
        ),
        (
            mirrored_slice_name(ns, "takeover", &hostile_id, "manual"),
            "10.244.66.2".into(),
        ),
    ];
    let mut expected = expected;
    expected.sort();
    support::wait_for(
        "cluster1's slices imported under computed names",
        WAIT,
        || async {
            let found = imported(victim, ns, "takeover", &hostile_id).await;
            if found == expected {
                Ok(())
            } else {
                Err(format!(
                    "{found:?}; controller log:\n{}",
                    pair.controller(VICTIM).log()
                ))
            }
        },
    )
    .await;
    for before in [&kubernetes, &manual] {
        let name = before.metadata.name.as_deref().unwrap();
        let after = get_slice(victim, ns, name).await.expect("still there");
        assert_eq!(
            after.metadata.resource_version, before.metadata.resource_version,
            "{name} was written: {after:?}"
        );
        assert_eq!(after.metadata.labels, before.metadata.labels, "{name}");
    }
    // An honest export of cluster1 keeps importing.
    honest_export_imports(pair, "honest-1").await;
}

/// An honest export from the hostile peer still reaches the victim.
async fn honest_export_imports(pair: &Pair, name: &str) {
    let (victim, hostile) = (pair.client(VICTIM), pair.client(HOSTILE));
    let ns = "default";
    publish_selectorless(hostile, ns, name).await;
    let hostile_id = pair.hostile_id().to_owned();
    // The hostile controller mirrors nothing for a selector-less Service:
    // the slice is its admin's, labelled as a mirror.
    publish_slice(
        hostile,
        &forged_slice(
            &hostile_id,
            ns,
            name,
            &format!("{name}-slice"),
            "10.244.77.7",
        ),
    )
    .await;
    support::wait_for(&format!("{name} imported"), WAIT, || async {
        let import = Api::<ServiceImport>::namespaced(victim.clone(), ns)
            .get_opt(name)
            .await
            .unwrap();
        let found = imported(victim, ns, name, &hostile_id).await;
        match import {
            Some(_) if found.iter().any(|(_, a)| a == "10.244.77.7") => Ok(()),
            other => Err(format!("{other:?} {found:?}")),
        }
    })
    .await;
}

/// A local object under the name the controller computes, not made by it:
/// the write is refused, the object keeps its resourceVersion, and the
/// refusal is a Warning Event on the ServiceImport, a metric and an
/// `/explain` entry; the export's other slice still imports.
async fn an_object_not_ours_under_a_computed_name_is_refused_with_an_event_a_metric_and_explain(
    pair: &mut Pair,
) {
    let (victim, hostile) = (pair.client(VICTIM), pair.client(HOSTILE));
    let ns = "default";
    let hostile_id = pair.hostile_id().to_owned();
    let admin = pair.controller(VICTIM).admin_addr();
    let metric = "clusterset_dns_controller_refused_total";
    let labels = ["kind=\"endpointslice\"", "reason=\"NotOurs\""];
    let refused_before = counter(admin, metric, &labels).await;

    let squatted = mirrored_slice_name(ns, "squat", &hostile_id, "taken");
    let squatter = create_slice(victim, ns, &local_slice(&squatted, "squatter", "10.10.0.3")).await;
    publish_selectorless(hostile, ns, "squat").await;
    for (name, address) in [("taken", "10.244.88.1"), ("free", "10.244.88.2")] {
        publish_slice(
            hostile,
            &forged_slice(&hostile_id, ns, "squat", name, address),
        )
        .await;
    }
    let free = mirrored_slice_name(ns, "squat", &hostile_id, "free");
    support::wait_for("the free slice imported, the squatted one refused", WAIT, || async {
        let found = imported(victim, ns, "squat", &hostile_id).await;
        let events = Api::<Event>::namespaced(victim.clone(), ns)
            .list(&ListParams::default())
            .await
            .unwrap();
        let event = events.items.iter().any(|e| {
            e.reason.as_deref() == Some("Refused")
                && e.type_.as_deref() == Some("Warning")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("squat")
                && e.note.as_deref().is_some_and(|n| n.starts_with("NotOurs: EndpointSlice") && n.contains(&squatted))
        });
        let refused = counter(admin, metric, &labels).await;
        let (_, explain) = http_get(admin, &format!("/explain?service={ns}/squat")).await;
        let explained = explain.contains(&squatted) && explain.contains("NotOurs");
        if found == [(free.clone(), "10.244.88.2".to_owned())]
            && event
            && refused > refused_before
            && explained
        {
            Ok(())
        } else {
            Err(format!(
                "imported {found:?}, event {event}, refused {refused} (was {refused_before}), explain {explain}"
            ))
        }
    })
    .await;
    let after = get_slice(victim, ns, &squatted).await.expect("still there");
    assert_eq!(
        after.metadata.resource_version,
        squatter.metadata.resource_version
    );
    assert_eq!(after.endpoints, squatter.endpoints);
}

/// The previous release copied a peer's slice under the peer's name. A
/// controller of this release, started over such a slice, writes the slice
/// under its computed name first and only then deletes the old one: a
/// watch on the namespace never sees the import without the peer's
/// endpoint.
async fn slices_under_peer_chosen_names_are_replaced_without_a_gap_on_upgrade(pair: &mut Pair) {
    let ns = "default";
    let hostile_id = pair.hostile_id().to_owned();
    let service = "upgraded";
    honest_export_imports(pair, service).await;
    let victim = pair.client(VICTIM).clone();
    let computed = mirrored_slice_name(ns, service, &hostile_id, &format!("{service}-slice"));

    // Stop this cluster's controller and put back what the previous
    // release wrote: the copy under the peer's name, ours in every other
    // way (labels, owner).
    pair.controllers[VICTIM].take().unwrap().kill();
    let import = Api::<ServiceImport>::namespaced(victim.clone(), ns)
        .get(service)
        .await
        .unwrap();
    let slices: Api<EndpointSlice> = Api::namespaced(victim.clone(), ns);
    let mut legacy = slices.get(&computed).await.unwrap();
    let legacy_name = format!("{service}-slice");
    legacy.metadata = object(json!({
        "name": legacy_name,
        "labels": legacy.metadata.labels,
        "annotations": legacy.metadata.annotations,
        "ownerReferences": [{
            "apiVersion": "multicluster.x-k8s.io/v1beta1",
            "kind": "ServiceImport",
            "name": service,
            "uid": import.metadata.uid,
            "controller": true,
        }],
    }));
    slices
        .create(&PostParams::default(), &legacy)
        .await
        .unwrap();
    slices
        .delete(&computed, &DeleteParams::default())
        .await
        .unwrap();

    // Every state the namespace passes through, from now on.
    let selector = format!("multicluster.kubernetes.io/service-name={service}");
    let watched = slices.clone();
    let gaps = tokio::spawn(async move {
        let mut live: BTreeSet<String> = BTreeSet::new();
        let mut seen: Vec<String> = Vec::new();
        let mut gaps = 0u32;
        let mut listed = false;
        let mut stream = watcher(watched, watcher::Config::default().labels(&selector)).boxed();
        let deadline = tokio::time::Instant::now() + WAIT;
        while let Ok(Some(event)) = tokio::time::timeout_at(deadline, stream.next()).await {
            let name = |s: &EndpointSlice| s.metadata.name.clone().unwrap_or_default();
            seen.push(format!("{event:?}").chars().take(120).collect());
            match event {
                Ok(watcher::Event::Apply(s)) | Ok(watcher::Event::InitApply(s)) => {
                    live.insert(name(&s));
                }
                Ok(watcher::Event::Delete(s)) => {
                    live.remove(&name(&s));
                }
                Ok(watcher::Event::InitDone) => listed = true,
                _ => {}
            }
            if listed && live.is_empty() {
                gaps += 1;
            }
            if live.len() == 1 && live.contains(&computed) {
                return (gaps, true, seen);
            }
        }
        (gaps, false, seen)
    });
    let controller = pair.spawn(VICTIM);
    pair.controllers[VICTIM] = Some(controller);
    let (gaps, finished, seen) = gaps.await.unwrap();
    assert!(
        finished,
        "the old slice was not replaced within {WAIT:?}; log:\n{}",
        pair.controller(VICTIM).log()
    );
    assert_eq!(
        gaps,
        0,
        "the import was left without a slice {gaps} times: {seen:#?}\n{}",
        pair.controller(VICTIM).log()
    );
    assert!(get_slice(&victim, ns, &legacy_name).await.is_none());
}

/// The hostile peer publishes what no controller would: a PublishedService
/// whose name and spec name different services (one service's fields
/// under another's name), one whose name is no `<namespace>.<name>`, and a
/// slice whose service-namespace label is no namespace. Each is refused
/// with a Warning Event on the peer's Secret and
/// `peer_objects_rejected_total`; nothing of them is imported, and the
/// victim's own Service of that name keeps its resourceVersion.
async fn a_publication_naming_another_or_no_valid_service_is_refused_with_an_event_and_a_metric(
    pair: &mut Pair,
) {
    let (victim, hostile) = (pair.client(VICTIM).clone(), pair.client(HOSTILE).clone());
    let ns = "default";
    let hostile_id = pair.hostile_id().to_owned();
    let admin = pair.controller(VICTIM).admin_addr();
    let metric = "clusterset_dns_controller_peer_objects_rejected_total";
    let name_reason = "reason=\"InvalidPublishedName\"";
    let slice_reason = "reason=\"InvalidPublishedSlice\"";
    let before = [
        counter(admin, metric, &[name_reason]).await,
        counter(admin, metric, &[slice_reason]).await,
    ];
    // The victim's own Service, whose name the forgery claims.
    let own: Service = Api::<Service>::namespaced(victim.clone(), ns)
        .create(
            &PostParams::default(),
            &object(json!({
                "metadata": {"name": "own"},
                "spec": {"ports": [{"port": 443, "protocol": "TCP"}]},
            })),
        )
        .await
        .unwrap();
    let published: Api<PublishedService> =
        Api::namespaced(hostile.clone(), controlplane::CONTROLLER_NAMESPACE);
    for (name, spec_name) in [("default.own", "elsewhere"), ("no-dot-at-all", "own")] {
        published
            .create(
                &PostParams::default(),
                &object(json!({
                    "apiVersion": "clusterset-dns.io/v1alpha1",
                    "kind": "PublishedService",
                    "metadata": {"name": name},
                    "spec": {"namespace": ns, "name": spec_name, "ipFamilies": ["IPv4"],
                             "ports": [{"port": 443, "protocol": "TCP"}]},
                })),
            )
            .await
            .unwrap();
    }
    let mut slice = forged_slice(&hostile_id, ns, "own", "own-forged", "10.244.40.1");
    slice.metadata.labels.as_mut().unwrap().insert(
        "clusterset-dns.io/service-namespace".into(),
        "Not-A-Namespace".into(),
    );
    publish_slice(&hostile, &slice).await;
    Api::<ServiceExport>::namespaced(hostile.clone(), ns)
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "own"}})),
        )
        .await
        .unwrap();
    let secret = format!("peer-{hostile_id}");
    support::wait_for("the forged publication refused", WAIT, || async {
        let counted = [
            counter(admin, metric, &[name_reason]).await,
            counter(admin, metric, &[slice_reason]).await,
        ];
        // One Event per reason: the Recorder folds Events of one reason on
        // one object into a series (the counter counts each).
        let events = [
            event_with(
                &victim,
                controlplane::CONTROLLER_NAMESPACE,
                "InvalidPublishedName",
                &secret,
                &["PublishedService", "published by cluster"],
            )
            .await,
            event_with(
                &victim,
                controlplane::CONTROLLER_NAMESPACE,
                "InvalidPublishedSlice",
                &secret,
                &["own-forged"],
            )
            .await,
        ];
        if counted[0] >= before[0] + 2.0 && counted[1] > before[1] && events.iter().all(|e| *e) {
            Ok(())
        } else {
            Err(format!(
                "counted {counted:?} (was {before:?}), events {events:?}"
            ))
        }
    })
    .await;
    // The export names a service the peer published nothing valid for:
    // no import, and the victim's own Service untouched.
    assert!(
        Api::<ServiceImport>::namespaced(victim.clone(), ns)
            .get_opt("own")
            .await
            .unwrap()
            .is_none(),
        "imported from a forged publication"
    );
    let after = Api::<Service>::namespaced(victim.clone(), ns)
        .get("own")
        .await
        .unwrap();
    assert_eq!(
        after.metadata.resource_version,
        own.metadata.resource_version
    );
    honest_export_imports(pair, "honest-5").await;
    // An honest slice turned invalid takes its endpoints with it: what a
    // peer published before is never left behind under the old labels.
    Api::<EndpointSlice>::namespaced(hostile.clone(), controlplane::CONTROLLER_NAMESPACE)
        .patch(
            "honest-5-slice",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({
                "metadata": {"labels": {"clusterset-dns.io/service-namespace": "Not_A_Namespace"}},
            })),
        )
        .await
        .unwrap();
    support::wait_for(
        "the slice turned invalid is no longer imported",
        WAIT,
        || async {
            match imported(&victim, ns, "honest-5", &hostile_id).await {
                found if found.is_empty() => Ok(()),
                found => Err(format!("{found:?}")),
            }
        },
    )
    .await;
}

/// A Warning Event with `reason` regarding ServiceImport `ns/name` (or any
/// object, when `name` is empty) whose note contains every one of `parts`.
async fn event_with(client: &Client, ns: &str, reason: &str, name: &str, parts: &[&str]) -> bool {
    let events = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    events.items.iter().any(|e| {
        e.reason.as_deref() == Some(reason)
            && e.type_.as_deref() == Some("Warning")
            && (name.is_empty()
                || e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            && e.note
                .as_deref()
                .is_some_and(|n| parts.iter().all(|p| n.contains(p)))
    })
}

/// The hostile peer publishes, beside an honest endpoint, the victim's
/// `kubernetes` ClusterIP (in its Service CIDR, 10.0.0.0/24) and the
/// address of one of its Nodes: both are refused by name (Event, metric,
/// `/explain`), the honest endpoint of the same slice imported; the
/// victim's Service and Node keep their resourceVersion.
async fn endpoints_in_the_victims_service_cidr_or_at_its_node_addresses_are_refused_and_the_rest_kept(
    pair: &mut Pair,
) {
    use k8s_openapi::api::core::v1::Node;
    let (victim, hostile) = (pair.client(VICTIM), pair.client(HOSTILE));
    let ns = "default";
    let hostile_id = pair.hostile_id().to_owned();
    let admin = pair.controller(VICTIM).admin_addr();
    let nodes: Api<Node> = Api::all(victim.clone());
    nodes
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "victim-node"}})),
        )
        .await
        .unwrap();
    let node = nodes
        .patch_status(
            "victim-node",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {"addresses": [
                {"type": "InternalIP", "address": "172.31.0.5"},
                {"type": "Hostname", "address": "victim-node"},
            ]}})),
        )
        .await
        .unwrap();
    let kubernetes = Api::<Service>::namespaced(victim.clone(), ns)
        .get("kubernetes")
        .await
        .unwrap();
    let cluster_ip = kubernetes
        .spec
        .as_ref()
        .unwrap()
        .cluster_ip
        .clone()
        .unwrap();
    let metric = "clusterset_dns_controller_peer_objects_rejected_total";
    let peer_label = format!("peer=\"{hostile_id}\"");
    let before = [
        counter(admin, metric, &[&peer_label, "reason=\"InServiceCIDR\""]).await,
        counter(admin, metric, &[&peer_label, "reason=\"NodeAddress\""]).await,
    ];

    publish_selectorless(hostile, ns, "redirect").await;
    let mut slice = forged_slice(&hostile_id, ns, "redirect", "redirect-slice", "10.244.99.1");
    slice.endpoints = ["10.244.99.1", cluster_ip.as_str(), "172.31.0.5"]
        .iter()
        .map(|address| object(json!({"addresses": [address], "conditions": {"ready": true}})))
        .collect();
    publish_slice(hostile, &slice).await;

    support::wait_for("the honest endpoint imported, the others refused and shown", WAIT, || async {
        let found = imported(victim, ns, "redirect", &hostile_id).await;
        let addresses: Vec<&str> = found.iter().map(|(_, a)| a.as_str()).collect();
        let events = [
            event_with(victim, ns, "InServiceCIDR", "redirect", &["InServiceCIDR: endpoint", &cluster_ip]).await,
            event_with(victim, ns, "NodeAddress", "redirect", &["NodeAddress: endpoint 172.31.0.5"]).await,
        ];
        let counted = [
            counter(admin, metric, &[&peer_label, "reason=\"InServiceCIDR\""]).await,
            counter(admin, metric, &[&peer_label, "reason=\"NodeAddress\""]).await,
        ];
        let (_, explain) = http_get(admin, &format!("/explain?service={ns}/redirect")).await;
        let explained = explain.contains("InServiceCIDR") && explain.contains("NodeAddress") && explain.contains(&cluster_ip);
        if addresses == ["10.244.99.1"]
            && events == [true, true]
            && counted[0] > before[0]
            && counted[1] > before[1]
            && explained
        {
            Ok(())
        } else {
            Err(format!("imported {addresses:?}, events {events:?}, counted {counted:?} (was {before:?}), explain {explain}"))
        }
    })
    .await;
    // The victim's own objects were not written.
    let after = Api::<Service>::namespaced(victim.clone(), ns)
        .get("kubernetes")
        .await
        .unwrap();
    assert_eq!(
        after.metadata.resource_version,
        kubernetes.metadata.resource_version
    );
    let node_after = nodes.get("victim-node").await.unwrap();
    assert_eq!(
        node_after.metadata.resource_version,
        node.metadata.resource_version
    );
    honest_export_imports(pair, "honest-2").await;
}

/// With `clusterset-dns.io/endpoint-cidrs` on the victim's peer Secret (as
/// `peer add --endpoint-cidr 10.244.0.0/16` writes it), an endpoint the
/// hostile peer publishes outside it is refused and one inside imported;
/// the ranges removed, both import again.
async fn endpoints_outside_the_ranges_recorded_for_a_peer_are_refused(pair: &mut Pair) {
    use k8s_openapi::api::core::v1::Secret;
    let (victim, hostile) = (pair.client(VICTIM), pair.client(HOSTILE));
    let ns = "default";
    let hostile_id = pair.hostile_id().to_owned();
    let admin = pair.controller(VICTIM).admin_addr();
    let secrets: Api<Secret> = Api::namespaced(victim.clone(), controlplane::CONTROLLER_NAMESPACE);
    let secret = format!("peer-{hostile_id}");
    let annotate = |value: serde_json::Value| {
        let secrets = secrets.clone();
        let secret = secret.clone();
        async move {
            secrets
                .patch(
                    &secret,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"metadata": {"annotations": {
                        clusterset_dns::peering::ANNOTATION_ENDPOINT_CIDRS: value,
                    }}})),
                )
                .await
                .unwrap();
        }
    };
    annotate(json!("10.244.0.0/16")).await;
    publish_selectorless(hostile, ns, "ranged").await;
    let mut slice = forged_slice(&hostile_id, ns, "ranged", "ranged-slice", "10.244.50.1");
    slice.endpoints = ["10.244.50.1", "10.250.0.9"]
        .iter()
        .map(|address| object(json!({"addresses": [address], "conditions": {"ready": true}})))
        .collect();
    publish_slice(hostile, &slice).await;
    let addresses =
        |found: Vec<(String, String)>| found.into_iter().map(|(_, a)| a).collect::<Vec<_>>();
    support::wait_for(
        "only the endpoint inside the peer's range imported",
        WAIT,
        || async {
            let found = addresses(imported(victim, ns, "ranged", &hostile_id).await);
            let event = event_with(
                victim,
                ns,
                "OutsidePeerRanges",
                "ranged",
                &["OutsidePeerRanges: endpoint 10.250.0.9"],
            )
            .await;
            let counted = counter(
                admin,
                "clusterset_dns_controller_peer_objects_rejected_total",
                &["reason=\"OutsidePeerRanges\""],
            )
            .await;
            if found == ["10.244.50.1"] && event && counted > 0.0 {
                Ok(())
            } else {
                Err(format!(
                    "imported {found:?}, event {event}, counted {counted}"
                ))
            }
        },
    )
    .await;
    // Ranges removed: nothing restricts the peer's addresses any more.
    annotate(serde_json::Value::Null).await;
    support::wait_for(
        "both endpoints imported once the ranges are gone",
        WAIT,
        || async {
            let found = addresses(imported(victim, ns, "ranged", &hostile_id).await);
            if found == ["10.244.50.1", "10.250.0.9"] {
                Ok(())
            } else {
                Err(format!("{found:?}"))
            }
        },
    )
    .await;
}

/// The hostile member changes its ClusterProperty id. The victim refuses it
/// (`PeerRefused` Event with `IdentityChanged`, the peers-refused metric),
/// keeps what it published for the grace period (8 s here), then drops
/// it; nothing is ever imported under the new id.
async fn a_peer_that_changes_its_cluster_id_is_refused_and_its_imports_go_after_grace(
    pair: &mut Pair,
) {
    let (victim, hostile) = (pair.client(VICTIM), pair.client(HOSTILE));
    let ns = "default";
    let hostile_id = pair.hostile_id().to_owned();
    let admin = pair.controller(VICTIM).admin_addr();
    honest_export_imports(pair, "honest-3").await;
    let new_id = format!("{hostile_id}-renamed");
    controlplane::set_cluster_properties(hostile, &new_id, "hostile-test").await;
    let changed = std::time::Instant::now();
    support::wait_for("the peer refused as IdentityChanged", WAIT, || async {
        let event = event_with(
            victim,
            controlplane::CONTROLLER_NAMESPACE,
            "PeerRefused",
            "",
            &["IdentityChanged", &new_id],
        )
        .await;
        let counted = counter(
            admin,
            "clusterset_dns_controller_peers_refused_total",
            &["reason=\"IdentityChanged\""],
        )
        .await;
        if event && counted > 0.0 {
            Ok(())
        } else {
            Err(format!(
                "event {event}, counted {counted}, PeerRefused notes {:?}",
                controlplane::peer_refusal_notes(victim, &format!("peer-{hostile_id}")).await
            ))
        }
    })
    .await;
    // Within grace: still imported under the old id.
    let within = imported(victim, ns, "honest-3", &hostile_id).await;
    assert!(
        changed.elapsed() < Duration::from_secs(6),
        "refusal took {:?}, too long to check within the 8 s grace",
        changed.elapsed()
    );
    assert!(!within.is_empty(), "dropped before the grace period ended");
    support::wait_for("dropped once the grace period ended", WAIT, || async {
        let left = imported(victim, ns, "honest-3", &hostile_id).await;
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    })
    .await;
    let dropped = changed.elapsed();
    assert!(
        dropped >= Duration::from_secs(7),
        "dropped after {dropped:?}, before the 8 s grace"
    );
    let renamed = Api::<EndpointSlice>::namespaced(victim.clone(), ns)
        .list(&ListParams::default().labels(&format!(
            "multicluster.kubernetes.io/source-cluster={new_id}"
        )))
        .await
        .unwrap();
    assert!(
        renamed.items.is_empty(),
        "imported under the new id: {:?}",
        renamed.items
    );
    eprintln!(
        "identity change: refused, dropped {:.1} s after (grace 8 s)",
        dropped.as_secs_f64()
    );
}

/// The hostile member exports a Service in the controller's namespace
/// (where the victim keeps its peer Secrets): nothing is imported there,
/// and the refusal shows as an Event, a metric and in `/explain`.
async fn an_export_into_the_controllers_namespace_is_refused_and_imported_nowhere(pair: &mut Pair) {
    let (victim, hostile) = (pair.client(VICTIM), pair.client(HOSTILE));
    let ns = controlplane::CONTROLLER_NAMESPACE;
    let admin = pair.controller(VICTIM).admin_addr();
    publish_selectorless(hostile, ns, "intruder").await;
    support::wait_for(
        "the export in the controller's namespace refused",
        WAIT,
        || async {
            let event = event_with(
                victim,
                ns,
                "NamespaceDenied",
                "intruder",
                &["ServiceExport"],
            )
            .await;
            let counted = counter(
                admin,
                "clusterset_dns_controller_peer_objects_rejected_total",
                &["reason=\"NamespaceDenied\""],
            )
            .await;
            let (_, explain) = http_get(admin, &format!("/explain?service={ns}/intruder")).await;
            if event && counted > 0.0 && explain.contains("NamespaceDenied") {
                Ok(())
            } else {
                Err(format!(
                    "event {event}, counted {counted}, explain {explain}"
                ))
            }
        },
    )
    .await;
    let import = Api::<ServiceImport>::namespaced(victim.clone(), ns)
        .get_opt("intruder")
        .await
        .unwrap();
    assert!(
        import.is_none(),
        "imported into the controller's namespace: {import:?}"
    );
    honest_export_imports(pair, "honest-4").await;
}

/// The victim's controller runs with `--import-namespace-selector`: an
/// export into a namespace without the label is refused
/// (`NamespaceNotSelected`), one into a labelled namespace imported.
async fn in_the_opt_in_mode_only_selected_namespaces_are_imported_into(pair: &mut Pair) {
    use k8s_openapi::api::core::v1::Namespace;
    pair.restart_victim(&["--import-namespace-selector", "mcs.example/import=true"]);
    let (victim, hostile) = (pair.client(VICTIM).clone(), pair.client(HOSTILE).clone());
    let admin = pair.controller(VICTIM).admin_addr();
    let hostile_id = pair.hostile_id().to_owned();
    for (ns, labels) in [
        ("optin-yes", json!({"mcs.example/import": "true"})),
        ("optin-no", json!({})),
    ] {
        Api::<Namespace>::all(victim.clone())
            .create(
                &PostParams::default(),
                &object(json!({"metadata": {"name": ns, "labels": labels}})),
            )
            .await
            .unwrap();
        Api::<Namespace>::all(hostile.clone())
            .create(
                &PostParams::default(),
                &object(json!({"metadata": {"name": ns}})),
            )
            .await
            .unwrap();
        publish_selectorless(&hostile, ns, "opted").await;
        publish_slice(
            &hostile,
            // One namespace holds every published slice: the name says
            // which Service's.
            &forged_slice(
                &hostile_id,
                ns,
                "opted",
                &format!("opted-slice-{ns}"),
                "10.244.60.1",
            ),
        )
        .await;
    }
    support::wait_for(
        "imported only into the selected namespace",
        WAIT,
        || async {
            let yes = imported(&victim, "optin-yes", "opted", &hostile_id).await;
            let no = Api::<ServiceImport>::namespaced(victim.clone(), "optin-no")
                .get_opt("opted")
                .await
                .unwrap();
            let event = event_with(
                &victim,
                "optin-no",
                "NamespaceNotSelected",
                "opted",
                &["ServiceExport"],
            )
            .await;
            let counted = counter(
                admin,
                "clusterset_dns_controller_peer_objects_rejected_total",
                &["reason=\"NamespaceNotSelected\""],
            )
            .await;
            if !yes.is_empty() && no.is_none() && event && counted > 0.0 {
                Ok(())
            } else {
                Err(format!(
                    "optin-yes {yes:?}, optin-no {no:?}, event {event}, counted {counted}"
                ))
            }
        },
    )
    .await;
    pair.restart_victim(&[]);
}

/// The victim's controller runs with `--peer-clusterset-ip-share 1` (2
/// addresses of its /24): the hostile peer already holds as many imports
/// as that (honest exports, made here when earlier trials have not), so
/// its next export alone gets none (Event, metric), while the ones it has
/// keep theirs.
async fn a_peer_past_its_share_of_clusterset_ips_gets_no_new_import(pair: &mut Pair) {
    let ns = "default";
    let hostile_id = pair.hostile_id().to_owned();
    let limit = share_limit(pair, VICTIM, 1);
    honest_export_imports(pair, "share-held-0").await;
    for i in 1..limit {
        if held_by(pair.client(VICTIM), &hostile_id).await >= limit {
            break;
        }
        honest_export_imports(pair, &format!("share-held-{i}")).await;
    }
    support::wait_for("the peer holds its share", WAIT, || async {
        match held_by(pair.client(VICTIM), &hostile_id).await {
            held if held >= limit => Ok(()),
            held => Err(format!("{held} held, share {limit}")),
        }
    })
    .await;
    let held = imported(pair.client(VICTIM), ns, "share-held-0", &hostile_id).await;
    assert!(!held.is_empty(), "share-held-0 imported");
    pair.restart_victim(&["--peer-clusterset-ip-share", "1"]);
    let (victim, hostile) = (pair.client(VICTIM).clone(), pair.client(HOSTILE).clone());
    let admin = pair.controller(VICTIM).admin_addr();
    publish_selectorless(&hostile, ns, "one-too-many").await;
    publish_slice(
        &hostile,
        &forged_slice(&hostile_id, ns, "one-too-many", "many-slice", "10.244.61.1"),
    )
    .await;
    support::wait_for("the import past the share refused", WAIT, || async {
        let event = event_with(
            &victim,
            ns,
            "ClusterSetIPShareExceeded",
            "one-too-many",
            &["ServiceExport"],
        )
        .await;
        let counted = counter(
            admin,
            "clusterset_dns_controller_peer_objects_rejected_total",
            &["reason=\"ClusterSetIPShareExceeded\""],
        )
        .await;
        if event && counted > 0.0 {
            Ok(())
        } else {
            Err(format!("event {event}, counted {counted}"))
        }
    })
    .await;
    let import = Api::<ServiceImport>::namespaced(victim.clone(), ns)
        .get_opt("one-too-many")
        .await
        .unwrap();
    assert!(import.is_none(), "imported past the share: {import:?}");
    assert_eq!(
        imported(&victim, ns, "share-held-0", &hostile_id).await,
        held,
        "an import it had is kept"
    );
    pair.restart_victim(&[]);
}

/// The hostile cluster co-exports `name` with the published `spec`
/// fields given (its Service there is an ordinary one: the apiserver
/// validates it; the publication is the peer's own word).
async fn co_export(client: &Client, ns: &str, name: &str, spec: serde_json::Value) {
    controlplane::publish_export(client, ns, name, spec).await;
    Api::<Service>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}})),
        )
        .await
        .unwrap();
}

/// Replaces this cluster's slice of `name` with one holding `addresses`,
/// and waits (at most 5 s) for the import's slices of this cluster to
/// hold exactly them.
async fn endpoints_follow(
    client: &Client,
    local_id: &str,
    ns: &str,
    name: &str,
    addresses: &[&str],
) {
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), ns);
    let source = controlplane::source_slice_name(name);
    let mut slice = slices.get(&source).await.unwrap();
    slice.endpoints = addresses
        .iter()
        .map(|a| object(json!({"addresses": [a], "conditions": {"ready": true}})))
        .collect();
    slices
        .replace(&source, &PostParams::default(), &slice)
        .await
        .unwrap();
    let want: BTreeSet<String> = addresses.iter().map(|a| a.to_string()).collect();
    support::wait_for(
        &format!("{name}'s imported slices follow"),
        Duration::from_secs(5),
        || async {
            let found: BTreeSet<String> = imported(client, ns, name, local_id)
                .await
                .into_iter()
                .map(|(_, address)| address)
                .collect();
            if found == want {
                Ok(())
            } else {
                Err(format!("{found:?}"))
            }
        },
    )
    .await;
}

/// Issue 44 (H1), between honest clusters: this cluster exports `web`
/// with one unnamed port, the peer with one named port. Both are valid
/// Services; their union is not. The merge keeps the oldest's ports and
/// says `PortConflict`; no write fails; the service's slices keep
/// following its endpoints.
async fn an_unnamed_port_beside_a_peers_named_port_is_a_port_conflict_and_the_service_keeps_following_its_endpoints(
    pair: &mut Pair,
) {
    let ns = "default";
    let (victim, hostile) = (pair.client(VICTIM).clone(), pair.client(HOSTILE).clone());
    let victim_id = pair.plane.clusters[VICTIM].name.clone();
    let admin = pair.controller(VICTIM).admin_addr();
    let errors_before = counter(admin, "clusterset_dns_controller_write_errors_total", &[]).await;
    controlplane::export_selectorless(
        &victim,
        ns,
        "mixed",
        json!([{"port": 80, "protocol": "TCP"}]),
        &["10.244.5.1"],
    )
    .await;
    co_export(
        &hostile,
        ns,
        "mixed",
        json!({"ports": [{"name": "metrics", "port": 9090, "protocol": "TCP"}]}),
    )
    .await;
    support::wait_for("the port conflict on the import", WAIT, || async {
        let import = Api::<ServiceImport>::namespaced(victim.clone(), ns)
            .get_opt("mixed")
            .await
            .unwrap();
        let conflict = Api::<ServiceExport>::namespaced(victim.clone(), ns)
            .get("mixed")
            .await
            .unwrap()
            .status
            .into_iter()
            .flat_map(|s| s.conditions)
            .any(|c| {
                c.type_ == "Conflict" && c.status == "True" && c.reason.contains("PortConflict")
            });
        match import {
            Some(import) if conflict && import.spec.ports.len() == 1 => Ok(()),
            other => Err(format!("conflict {conflict}, {other:?}")),
        }
    })
    .await;
    endpoints_follow(
        &victim,
        &victim_id,
        ns,
        "mixed",
        &["10.244.5.1", "10.244.5.2"],
    )
    .await;
    endpoints_follow(&victim, &victim_id, ns, "mixed", &["10.244.5.2"]).await;
    let errors_after = counter(admin, "clusterset_dns_controller_write_errors_total", &[]).await;
    assert_eq!(errors_after, errors_before, "no write failed");
}

/// Issue 44 (H1), on purpose: the hostile peer co-exports a service this
/// cluster exports, each time with one field the apiserver would refuse
/// in a Service. Each is refused (metric, Event), none reaches the
/// import, no write fails, and this cluster's endpoint changes still
/// reach its imported slices within 5 s.
async fn each_field_a_service_may_not_have_is_refused_and_the_honest_exporters_changes_still_arrive(
    pair: &mut Pair,
) {
    let ns = "default";
    let (victim, hostile) = (pair.client(VICTIM).clone(), pair.client(HOSTILE).clone());
    let victim_id = pair.plane.clusters[VICTIM].name.clone();
    let admin = pair.controller(VICTIM).admin_addr();
    let variants: [(&str, serde_json::Value); 6] = [
        (
            "xtp",
            json!({"ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "zz", "port": 1, "protocol": "XTP"}]}),
        ),
        (
            "zero",
            json!({"ports": [{"name": "http", "port": 0, "protocol": "TCP"}]}),
        ),
        (
            "big",
            json!({"ports": [{"name": "http", "port": 70000, "protocol": "TCP"}]}),
        ),
        (
            "families",
            json!({"ports": [{"name": "http", "port": 80, "protocol": "TCP"}], "ipFamilies": ["IPv4", "IPv4"]}),
        ),
        (
            "timeout",
            json!({"ports": [{"name": "http", "port": 80, "protocol": "TCP"}], "sessionAffinity": "ClientIP", "sessionAffinityTimeoutSeconds": 0}),
        ),
        (
            "app",
            json!({"ports": [{"name": "http", "port": 80, "protocol": "TCP", "appProtocol": "not/a/name"}]}),
        ),
    ];
    let errors_before = counter(admin, "clusterset_dns_controller_write_errors_total", &[]).await;
    for (case, spec) in variants {
        let name = format!("shared-{case}");
        controlplane::export_selectorless(
            &victim,
            ns,
            &name,
            json!([{"name": "http", "port": 80, "protocol": "TCP"}]),
            &["10.244.6.1"],
        )
        .await;
        let rejected_before = counter(
            admin,
            "clusterset_dns_controller_peer_objects_rejected_total",
            &["reason=\"InvalidExport\""],
        )
        .await;
        co_export(&hostile, ns, &name, spec).await;
        support::wait_for(&format!("{case}: refused"), WAIT, || async {
            let counted = counter(
                admin,
                "clusterset_dns_controller_peer_objects_rejected_total",
                &["reason=\"InvalidExport\""],
            )
            .await;
            let event = event_with(&victim, ns, "InvalidExport", &name, &["ServiceExport"]).await;
            if counted > rejected_before && event {
                Ok(())
            } else {
                Err(format!("counted {counted}, event {event}"))
            }
        })
        .await;
        let import = Api::<ServiceImport>::namespaced(victim.clone(), ns)
            .get(&name)
            .await
            .unwrap();
        let ports: Vec<(Option<String>, i32)> = import
            .spec
            .ports
            .iter()
            .map(|p| (p.name.clone(), p.port))
            .collect();
        assert_eq!(ports, [(Some("http".to_owned()), 80)], "{case}");
        assert!(
            import.spec.ip_families.len() <= 1,
            "{case}: {:?}",
            import.spec.ip_families
        );
        endpoints_follow(
            &victim,
            &victim_id,
            ns,
            &name,
            &["10.244.6.1", "10.244.6.2"],
        )
        .await;
    }
    let errors_after = counter(admin, "clusterset_dns_controller_write_errors_total", &[]).await;
    assert_eq!(errors_after, errors_before, "no write failed");
}

/// The last lines of the victim's controller log, for a failure message.
fn victim_log(pair: &Pair) -> String {
    let log = pair.controller(VICTIM).log();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Issue 31 (L5): a ServiceImport under the name the controller would
/// create, made first by someone else (no labels, the spec the merge
/// would write). The controller only ever creates an import it does not
/// own: it refuses (`NotOurs`, a Warning Event and
/// `refused_total{kind="serviceimport"}`), writes neither the object nor
/// its status, and nothing that would be owned by it.
async fn an_import_made_first_by_someone_else_is_refused_and_never_written(pair: &mut Pair) {
    use clusterset_dns::controller::naming::{FIELD_MANAGER, derived_service_name};
    let ns = "default";
    let name = "squat-import";
    let (victim, hostile) = (pair.client(VICTIM).clone(), pair.client(HOSTILE).clone());
    let hostile_id = pair.hostile_id().to_owned();
    let admin = pair.controller(VICTIM).admin_addr();
    let imports: Api<ServiceImport> = Api::namespaced(victim.clone(), ns);
    // The spec the merge writes for an export like the one below, as the
    // controller wrote it for another service (without its clusterset IP).
    honest_export_imports(pair, "squat-import-model").await;
    let model = imports.get("squat-import-model").await.unwrap();
    let mut spec = serde_json::to_value(&model.spec).unwrap();
    spec.as_object_mut().unwrap().remove("ips");
    assert_eq!(
        spec,
        json!({
            "type": "ClusterSetIP",
            "ports": [{"name": "http", "protocol": "TCP", "port": 80}],
            "ipFamilies": ["IPv4"],
            "sessionAffinity": "None",
            "internalTrafficPolicy": "Cluster",
        }),
        "the model import's spec"
    );
    let metric = "clusterset_dns_controller_refused_total";
    let labels = ["kind=\"serviceimport\"", "reason=\"NotOurs\""];
    let refused_before = counter(admin, metric, &labels).await;
    let squatter = imports
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "multicluster.x-k8s.io/v1beta1",
                "kind": "ServiceImport",
                "metadata": {"name": name},
                "spec": spec,
            })),
        )
        .await
        .unwrap();
    publish_selectorless(&hostile, ns, name).await;
    publish_slice(
        &hostile,
        &forged_slice(&hostile_id, ns, name, "squat-import-slice", "10.244.63.1"),
    )
    .await;
    support::wait_for("the import not ours refused", WAIT, || async {
        let event = event_with(&victim, ns, "Refused", name, &["NotOurs"]).await;
        let refused = counter(admin, metric, &labels).await;
        if event && refused > refused_before {
            Ok(())
        } else {
            Err(format!(
                "event {event}, refused {refused} (was {refused_before}); log:\n{}",
                victim_log(pair)
            ))
        }
    })
    .await;
    let check = |when: &'static str| {
        let imports = imports.clone();
        let squatter = squatter.clone();
        async move {
            let after = imports.get(name).await.unwrap();
            assert!(
                after.metadata.labels.as_ref().is_none_or(|l| l.is_empty()),
                "{when}: labelled: {:?}",
                after.metadata.labels
            );
            let managers: Vec<Option<String>> = after
                .metadata
                .managed_fields
                .iter()
                .flatten()
                .map(|entry| entry.manager.clone())
                .collect();
            assert!(
                !managers.iter().any(|m| m.as_deref() == Some(FIELD_MANAGER)),
                "{when}: managed by the controller: {managers:?}"
            );
            assert_eq!(
                after.metadata.resource_version, squatter.metadata.resource_version,
                "{when}: written: {after:?}"
            );
        }
    };
    check("at the refusal").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    check("3 s later").await;
    // Nothing that would need the import as its owner was written.
    let derived = Api::<Service>::namespaced(victim.clone(), ns)
        .get_opt(&derived_service_name(ns, name))
        .await
        .unwrap();
    assert!(derived.is_none(), "a derived Service: {derived:?}");
    let slices = imported(&victim, ns, name, &hostile_id).await;
    assert!(slices.is_empty(), "imported slices: {slices:?}");
}

/// How many clusterset IPs one peer alone may hold in cluster `i` with
/// `--peer-clusterset-ip-share percent`: that share of its (IPv4) Service
/// CIDR's addresses, rounded down, as the controller computes it.
fn share_limit(pair: &Pair, i: usize, percent: u64) -> u64 {
    let cidr = &pair.plane.clusters[i].spec.service_cidrs[0];
    let prefix: u32 = cidr.split_once('/').unwrap().1.parse().unwrap();
    let addresses = 1u64 << (32 - prefix);
    addresses / 100 * percent + addresses % 100 * percent / 100
}

/// The controller's ClusterSetIP imports in the victim exported by `peer`
/// alone: what counts against that peer's share.
async fn held_by(client: &Client, peer: &str) -> u64 {
    use clusterset_dns::api::ServiceImportType;
    use clusterset_dns::controller::cluster::is_ours;
    Api::<ServiceImport>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|import| is_ours(*import) && import.spec.type_ == ServiceImportType::ClusterSetIp)
        .filter(|import| {
            import
                .status
                .as_ref()
                .is_some_and(|s| matches!(s.clusters.as_slice(), [only] if only.cluster == peer))
        })
        .count() as u64
}

/// Issue 31 (H3): the share of clusterset IPs holds when an import is
/// not new but changes type. The hostile peer exports three headless
/// services (no clusterset IP, nothing counted), then flips all three to
/// ClusterSetIP: each would now need a derived Service, and only as many
/// as its share has room for get one; the others are refused
/// (`ClusterSetIPShareExceeded`, Event and metric).
async fn headless_imports_flipped_to_clusterset_ip_count_against_the_peers_share(pair: &mut Pair) {
    use clusterset_dns::api::ServiceImportType;
    use clusterset_dns::controller::naming::derived_service_name;
    let ns = "default";
    let names = ["flip-a", "flip-b", "flip-c"];
    let hostile_id = pair.hostile_id().to_owned();
    let limit = share_limit(pair, VICTIM, 1);
    pair.restart_victim(&["--peer-clusterset-ip-share", "1"]);
    let (victim, hostile) = (pair.client(VICTIM).clone(), pair.client(HOSTILE).clone());
    let admin = pair.controller(VICTIM).admin_addr();
    let imports: Api<ServiceImport> = Api::namespaced(victim.clone(), ns);
    for (i, name) in names.iter().enumerate() {
        publish_selectorless_as(&hostile, ns, name, true).await;
        publish_slice(
            &hostile,
            &forged_slice(
                &hostile_id,
                ns,
                name,
                &format!("{name}-slice"),
                &format!("10.244.64.{}", i + 1),
            ),
        )
        .await;
    }
    support::wait_for("the three headless imports", WAIT, || async {
        let mut types = Vec::new();
        for name in names {
            types.push(imports.get_opt(name).await.unwrap().map(|i| i.spec.type_));
        }
        if types
            .iter()
            .all(|t| *t == Some(ServiceImportType::Headless))
        {
            Ok(())
        } else {
            Err(format!("{types:?}; log:\n{}", victim_log(pair)))
        }
    })
    .await;
    let held = held_by(&victim, &hostile_id).await;
    let allowed = limit.saturating_sub(held);
    assert!(
        allowed < names.len() as u64,
        "the share ({limit}, {held} held) has room for all three"
    );
    let metric = "clusterset_dns_controller_peer_objects_rejected_total";
    let peer_label = format!("peer=\"{hostile_id}\"");
    let labels = [peer_label.as_str(), "reason=\"ClusterSetIPShareExceeded\""];
    let rejected_before = counter(admin, metric, &labels).await;
    let published: Api<PublishedService> =
        Api::namespaced(hostile.clone(), controlplane::CONTROLLER_NAMESPACE);
    for name in names {
        published
            .patch(
                &format!("{ns}.{name}"),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"spec": {"headless": false}})),
            )
            .await
            .unwrap();
    }
    let derived = || async {
        let services: Api<Service> = Api::namespaced(victim.clone(), ns);
        let mut with = Vec::new();
        for name in names {
            if services
                .get_opt(&derived_service_name(ns, name))
                .await
                .unwrap()
                .is_some()
            {
                with.push(name);
            }
        }
        with
    };
    support::wait_for(
        "a flip past the share refused, the others given a clusterset IP",
        WAIT,
        || async {
            let mut events = Vec::new();
            for name in names {
                if event_with(
                    &victim,
                    ns,
                    "ClusterSetIPShareExceeded",
                    name,
                    &["ServiceExport"],
                )
                .await
                {
                    events.push(name);
                }
            }
            let counted = counter(admin, metric, &labels).await;
            let with = derived().await;
            if !events.is_empty() && counted > rejected_before && with.len() as u64 == allowed {
                Ok(())
            } else {
                Err(format!(
                    "refused {events:?}, counted {counted} (was {rejected_before}), derived {with:?} (share {limit}, {held} held); log:\n{}",
                    victim_log(pair)
                ))
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let with = derived().await;
    assert!(
        with.len() as u64 <= allowed,
        "derived Services for {with:?}, past the share ({limit}, {held} held)"
    );
    eprintln!("headless flip: share {limit}, {held} held, derived Services for {with:?}");
    pair.restart_victim(&[]);
}

/// Issue 31 (M8): the victim's peer Secret for the hostile cluster is
/// rotated to a kubeconfig that does not parse. The new credential is
/// refused (`PeerRefused` on the Secret, quoting none of its text); the
/// peer's imports stay, read by the connection the Secret held before.
/// The Secret restored, the peer is read again.
async fn a_broken_rotation_of_a_peer_secret_is_refused_and_keeps_the_imports(pair: &mut Pair) {
    use k8s_openapi::api::core::v1::Secret;
    let ns = "default";
    let service = "rotation-kept";
    let hostile_id = pair.hostile_id().to_owned();
    let admin = pair.controller(VICTIM).admin_addr();
    honest_export_imports(pair, service).await;
    let victim = pair.client(VICTIM).clone();
    let held = imported(&victim, ns, service, &hostile_id).await;
    let secrets: Api<Secret> = Api::namespaced(victim.clone(), controlplane::CONTROLLER_NAMESPACE);
    let secret = format!("peer-{hostile_id}");
    let original = secrets.get(&secret).await.unwrap();
    let kubeconfig = original
        .data
        .as_ref()
        .and_then(|d| d.get("kubeconfig"))
        .cloned()
        .expect("the peer Secret's kubeconfig");
    let refused_metric = "clusterset_dns_controller_peers_refused_total";
    let refused_labels = ["reason=\"InvalidKubeconfig\""];
    let refused_before = counter(admin, refused_metric, &refused_labels).await;
    let peer_up = format!("peer=\"{hostile_id}\"");
    secrets
        .patch(
            &secret,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"stringData": {"kubeconfig": "not yaml"}})),
        )
        .await
        .unwrap();
    let rotated = std::time::Instant::now();
    let notes = support::wait_for("the broken rotation refused", WAIT, || async {
        let notes = controlplane::peer_refusal_notes(&victim, &secret).await;
        let refused = counter(admin, refused_metric, &refused_labels).await;
        if notes.iter().any(|n| n.starts_with("InvalidKubeconfig")) && refused > refused_before {
            Ok(notes)
        } else {
            Err(format!(
                "notes {notes:?}, refused {refused} (was {refused_before}); log:\n{}",
                victim_log(pair)
            ))
        }
    })
    .await;
    assert!(
        notes.iter().all(|n| !n.contains("not yaml")),
        "a note quotes the Secret: {notes:?}"
    );
    // 4 s after the rotation (the grace is 8 s): the import and its slice
    // are all there.
    tokio::time::sleep_until((rotated + Duration::from_secs(4)).into()).await;
    assert!(
        Api::<ServiceImport>::namespaced(victim.clone(), ns)
            .get_opt(service)
            .await
            .unwrap()
            .is_some(),
        "the import went; log:\n{}",
        victim_log(pair)
    );
    assert_eq!(
        imported(&victim, ns, service, &hostile_id).await,
        held,
        "the imported slices changed; log:\n{}",
        victim_log(pair)
    );
    eprintln!(
        "broken rotation: 4 s later peer_up {}",
        counter(admin, "clusterset_dns_controller_peer_up", &[&peer_up]).await
    );
    // Restored: the peer is read with it again.
    secrets
        .patch(
            &secret,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"data": {"kubeconfig": kubeconfig}})),
        )
        .await
        .unwrap();
    support::wait_for("the peer usable again", WAIT, || async {
        let up = counter(admin, "clusterset_dns_controller_peer_up", &[&peer_up]).await;
        let found = imported(&victim, ns, service, &hostile_id).await;
        if up == 1.0 && found == held {
            Ok(())
        } else {
            Err(format!(
                "peer_up {up}, imported {found:?}; log:\n{}",
                victim_log(pair)
            ))
        }
    })
    .await;
    honest_export_imports(pair, "rotation-restored").await;
}

/// Issue 44 (M3): the hostile peer deletes and recreates its publication
/// marker every 2 s for 40 s, so that every member would switch how it
/// reads the peer back and forth. Reconnects are spaced like those of a
/// failing watch (at most 8 in the 40 s), and no ServiceImport is written.
async fn a_publication_marker_toggled_every_2_s_causes_a_handful_of_reconnects_and_no_import_write(
    pair: &mut Pair,
) {
    let hostile = pair.client(HOSTILE).clone();
    let admin = pair.controller(VICTIM).admin_addr();
    let markers: Api<ConfigMap> =
        Api::namespaced(hostile.clone(), controlplane::CONTROLLER_NAMESPACE);
    let marker = markers
        .get(clusterset_dns::peering::PUBLICATION_MARKER)
        .await
        .unwrap();
    let reconnects = |log: &str| log.matches("reading the peer").count();
    let writes = || {
        counter(
            admin,
            "clusterset_dns_controller_writes_total",
            &["kind=\"serviceimport\""],
        )
    };
    let (reconnects_before, writes_before) =
        (reconnects(&pair.controller(VICTIM).log()), writes().await);
    for _ in 0..10 {
        markers
            .delete(
                clusterset_dns::peering::PUBLICATION_MARKER,
                &DeleteParams::default(),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut again = marker.clone();
        again.metadata.resource_version = None;
        again.metadata.uid = None;
        again.metadata.creation_timestamp = None;
        again.metadata.managed_fields = None;
        markers
            .create(&PostParams::default(), &again)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // Settled: the marker is back, as it was before.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let made = reconnects(&pair.controller(VICTIM).log()) - reconnects_before;
    let written = writes().await - writes_before;
    println!("marker toggled 20 times in 40 s: {made} reconnects, {written} import writes");
    assert!(made <= 8, "{made} reconnects");
    assert_eq!(written, 0.0, "imports written while the marker toggled");
    pair.controller(VICTIM).assert_running();
}
