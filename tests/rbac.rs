//! The shipped RBAC, checked against a real apiserver's RBAC authorizer:
//! `deploy/peer-reader.yaml` lets a peer's token read exactly this cluster's
//! publication in the controller's namespace (PublishedServices, published
//! EndpointSlices, the marker), the ServiceExports and the two
//! ClusterProperties, and nothing else (a real token gets 403 for the
//! Services, EndpointSlices and Secrets of a namespace, and for cluster-wide
//! lists of them), and
//! `deploy/controller.yaml` lets the controller do each thing it does locally
//! and no more (Secrets only in its namespace, no ServiceExport writes).
//! Also checks the harness's TokenRequest kubeconfigs and peer Secrets
//! (tests/controlplane) work as the controller will use them.
//!
//! One apiserver-only cluster; no controller process runs.

mod controlplane;
mod support;

use std::time::Instant;

use clusterset_dns::api::well_known::CLUSTER_ID_PROPERTY;
use clusterset_dns::api::{ClusterProperty, PublishedService, ServiceExport, ServiceImport};
use controlplane::{
    CONTROLLER_NAMESPACE, CONTROLLER_SA, ClusterSpec, ControlPlane, PEER_LABEL, PEER_READER_SA,
    add_peer_secret, client_from, client_from_yaml, install_controller, remove_peer_secret,
    service_account_kubeconfig, set_cluster_properties,
};
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};

/// A namespace of ordinary workloads.
const APP_NS: &str = "demo";

/// `(API group, resource)` the peer reader may read everywhere.
const PEER_READS_EVERYWHERE: [(&str, &str); 1] = [("multicluster.x-k8s.io", "serviceexports")];
/// `(API group, resource)` the peer reader may read in the controller's
/// namespace only (the publication).
const PEER_READS_PUBLICATION: [(&str, &str); 2] = [
    ("clusterset-dns.io", "publishedservices"),
    ("discovery.k8s.io", "endpointslices"),
];
const READ: [&str; 3] = ["get", "list", "watch"];
const WRITE: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];
const ALL: [&str; 7] = [
    "get", "list", "watch", "create", "update", "patch", "delete",
];

/// What the controller does cluster-wide: `(group, resource, verbs)`.
const CONTROLLER_CLUSTER_WIDE: &[(&str, &str, &[&str])] = &[
    ("multicluster.x-k8s.io", "serviceexports", &READ),
    (
        "multicluster.x-k8s.io",
        "serviceexports/status",
        &["get", "patch", "update"],
    ),
    ("multicluster.x-k8s.io", "serviceimports", &ALL),
    (
        "multicluster.x-k8s.io",
        "serviceimports/status",
        &["get", "patch", "update"],
    ),
    ("discovery.k8s.io", "endpointslices", &ALL),
    ("", "services", &ALL),
    ("", "namespaces", &READ),
    ("about.k8s.io", "clusterproperties", &READ),
    ("", "events", &["create", "patch"]),
    ("events.k8s.io", "events", &["create", "patch"]),
];

/// What the controller does in its own namespace only.
const CONTROLLER_OWN_NAMESPACE: &[(&str, &str, &[&str])] = &[
    ("", "secrets", &READ),
    ("coordination.k8s.io", "leases", &ALL),
    ("clusterset-dns.io", "publishedservices", &ALL),
];

/// One access question about a ServiceAccount.
#[derive(Debug, Clone, Copy)]
struct Access<'a> {
    verb: &'a str,
    group: &'a str,
    /// `resource` or `resource/subresource`.
    resource: &'a str,
    /// `None`: cluster-wide (all namespaces, or a cluster-scoped resource).
    namespace: Option<&'a str>,
    /// The object's name, for a rule that names its objects.
    name: Option<&'a str>,
}

impl<'a> Access<'a> {
    fn named(
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        namespace: Option<&'a str>,
        name: &'a str,
    ) -> Self {
        Self {
            verb,
            group,
            resource,
            namespace,
            name: Some(name),
        }
    }
}

impl std::fmt::Display for Access<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            self.group
        };
        write!(f, "{} {group}/{}", self.verb, self.resource)?;
        if let Some(name) = self.name {
            write!(f, " {name}")?;
        }
        match self.namespace {
            Some(ns) => write!(f, " in {ns}"),
            None => write!(f, " cluster-wide"),
        }
    }
}

/// Asks the apiserver (as admin) whether ServiceAccount `namespace/name` may
/// do `access`.
async fn allowed(admin: &Client, service_account: &str, access: Access<'_>) -> bool {
    let (resource, subresource) = match access.resource.split_once('/') {
        Some((r, s)) => (r, Some(s)),
        None => (access.resource, None),
    };
    let review: SubjectAccessReview = serde_json::from_value(serde_json::json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": format!("system:serviceaccount:{CONTROLLER_NAMESPACE}:{service_account}"),
            "groups": [
                "system:serviceaccounts",
                format!("system:serviceaccounts:{CONTROLLER_NAMESPACE}"),
                "system:authenticated",
            ],
            "resourceAttributes": {
                "verb": access.verb,
                "group": access.group,
                "resource": resource,
                "subresource": subresource.unwrap_or(""),
                "namespace": access.namespace.unwrap_or(""),
                "name": access.name.unwrap_or(""),
            },
        },
    }))
    .unwrap();
    let answer = Api::<SubjectAccessReview>::all(admin.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap_or_else(|e| panic!("SubjectAccessReview {access}: {e}"));
    answer.status.expect("SubjectAccessReview status").allowed
}

/// Checks every access in `accesses` is `expected` for `service_account`,
/// and returns one line per mismatch.
async fn mismatches(
    admin: &Client,
    service_account: &str,
    expected: bool,
    accesses: &[Access<'_>],
) -> Vec<String> {
    let mut wrong = Vec::new();
    for access in accesses {
        if allowed(admin, service_account, *access).await != expected {
            let should = if expected { "may" } else { "must not" };
            wrong.push(format!("{service_account} {should} {access}"));
        }
    }
    wrong
}

fn accesses<'a>(
    rules: &[(&'a str, &'a str, &'a [&'a str])],
    namespaces: &[Option<&'a str>],
) -> Vec<Access<'a>> {
    let mut out = Vec::new();
    for &(group, resource, verbs) in rules {
        for &verb in verbs {
            for &namespace in namespaces {
                out.push(Access {
                    verb,
                    group,
                    resource,
                    namespace,
                    name: None,
                });
            }
        }
    }
    out
}

/// The 403 of a refused request, or a panic saying what happened instead.
fn assert_forbidden<T: std::fmt::Debug>(result: kube::Result<T>, what: &str) {
    match result {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn shipped_roles_grant_exactly_what_the_controller_and_peers_need() {
    let t0 = Instant::now();
    let plane = ControlPlane::start_with(&[ClusterSpec::api_only()]).await;
    let cluster = &plane.clusters[0];
    let admin = cluster.admin_client().await;
    let controller_kubeconfig = install_controller(cluster).await;
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": APP_NS}})).unwrap(),
        )
        .await
        .unwrap();
    eprintln!(
        "apiserver up, CRDs and deploy/*.yaml applied in {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    // --- The peer reader: the publication, the exports, the identity. ---
    let reads = |rules: &[(&'static str, &'static str)]| -> Vec<(&'static str, &'static str, &'static [&'static str])> {
        rules.iter().map(|&(g, r)| (g, r, &READ[..])).collect()
    };
    let cluster_and_app = [None, Some(APP_NS)];
    let mut peer_allowed = accesses(&reads(&PEER_READS_EVERYWHERE), &cluster_and_app);
    peer_allowed.extend(accesses(
        &reads(&PEER_READS_PUBLICATION),
        &[Some(CONTROLLER_NAMESPACE)],
    ));
    for property in [CLUSTER_ID_PROPERTY, "clusterset.k8s.io"] {
        peer_allowed.push(Access::named(
            "get",
            "about.k8s.io",
            "clusterproperties",
            None,
            property,
        ));
    }
    peer_allowed.push(Access::named(
        "get",
        "",
        "configmaps",
        Some(CONTROLLER_NAMESPACE),
        "clusterset-dns-publication",
    ));
    let mut wrong = mismatches(&admin, PEER_READER_SA, true, &peer_allowed).await;
    let every: Vec<(&str, &str)> = PEER_READS_EVERYWHERE
        .iter()
        .chain(&PEER_READS_PUBLICATION)
        .copied()
        .chain([("about.k8s.io", "clusterproperties"), ("", "configmaps")])
        .collect();
    let writes: Vec<(&str, &str, &[&str])> =
        every.iter().map(|&(g, r)| (g, r, &WRITE[..])).collect();
    let mut peer_denied = accesses(&writes, &[None, Some(APP_NS), Some(CONTROLLER_NAMESPACE)]);
    // Outside the publication: no Service, no EndpointSlice, no
    // PublishedService, no Secret, anywhere.
    peer_denied.extend(accesses(
        &[
            ("", "services", &READ),
            ("discovery.k8s.io", "endpointslices", &READ),
            ("clusterset-dns.io", "publishedservices", &READ),
        ],
        &[None, Some(APP_NS), Some("kube-system")],
    ));
    peer_denied.extend(accesses(
        &[
            ("", "services", &READ),
            ("", "secrets", &READ),
            ("multicluster.x-k8s.io", "serviceimports", &READ),
            ("", "namespaces", &READ),
            ("", "pods", &READ),
            ("", "configmaps", &["get", "list"]),
            ("about.k8s.io", "clusterproperties", &["list", "watch"]),
            ("coordination.k8s.io", "leases", &["get", "list"]),
            (
                "multicluster.x-k8s.io",
                "serviceexports/status",
                &["patch", "update"],
            ),
            ("", "serviceaccounts/token", &["create"]),
        ],
        &[None, Some(APP_NS), Some(CONTROLLER_NAMESPACE)],
    ));
    peer_denied.push(Access::named(
        "get",
        "about.k8s.io",
        "clusterproperties",
        None,
        "other.example.com",
    ));
    peer_denied.push(Access::named(
        "get",
        "",
        "configmaps",
        Some(CONTROLLER_NAMESPACE),
        "kube-root-ca.crt",
    ));
    wrong.extend(mismatches(&admin, PEER_READER_SA, false, &peer_denied).await);

    // --- The controller: each thing it does locally, and no more. ---
    let mut controller_allowed = accesses(CONTROLLER_CLUSTER_WIDE, &cluster_and_app);
    controller_allowed.extend(accesses(
        CONTROLLER_OWN_NAMESPACE,
        &[Some(CONTROLLER_NAMESPACE)],
    ));
    for verb in ["get", "patch", "update"] {
        controller_allowed.push(Access::named(
            verb,
            "",
            "configmaps",
            Some(CONTROLLER_NAMESPACE),
            "clusterset-dns-publication",
        ));
    }
    wrong.extend(mismatches(&admin, CONTROLLER_SA, true, &controller_allowed).await);
    let controller_denied = accesses(
        &[
            // Peer credentials elsewhere are none of its business.
            ("", "secrets", &READ),
            ("coordination.k8s.io", "leases", &ALL),
            // It never writes exports (only their status).
            (
                "multicluster.x-k8s.io",
                "serviceexports",
                &["create", "update", "patch", "delete", "deletecollection"],
            ),
            // It never creates or deletes namespaces or its identity.
            ("", "namespaces", &["create", "update", "delete"]),
            (
                "about.k8s.io",
                "clusterproperties",
                &["create", "update", "patch", "delete"],
            ),
            ("", "pods", &["get", "list", "create"]),
            ("", "configmaps", &["get", "list"]),
            ("", "serviceaccounts/token", &["create"]),
            ("", "events", &["delete"]),
        ],
        &[None, Some(APP_NS), Some("kube-system")],
    );
    wrong.extend(mismatches(&admin, CONTROLLER_SA, false, &controller_denied).await);
    wrong.extend(
        mismatches(
            &admin,
            CONTROLLER_SA,
            false,
            &accesses(
                &[("", "secrets", &["create", "update", "patch", "delete"][..])],
                &[Some(CONTROLLER_NAMESPACE)],
            ),
        )
        .await,
    );
    let checked = peer_allowed.len()
        + peer_denied.len()
        + controller_allowed.len()
        + controller_denied.len()
        + 4;
    assert!(
        wrong.is_empty(),
        "{} of {checked} access checks wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    eprintln!(
        "{checked} SubjectAccessReviews in {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    // --- Real tokens: a TokenRequest kubeconfig as peers will use it. ---
    set_cluster_properties(&admin, "cluster-a", "set-1").await;
    let peer_kubeconfig =
        service_account_kubeconfig(cluster, CONTROLLER_NAMESPACE, PEER_READER_SA, 600).await;
    let peer = client_from_yaml(&peer_kubeconfig).await;
    Api::<ServiceExport>::all(peer.clone())
        .list(&ListParams::default())
        .await
        .expect("the peer reader lists ServiceExports");
    let id = Api::<ClusterProperty>::all(peer.clone())
        .get(CLUSTER_ID_PROPERTY)
        .await
        .expect("the peer reader reads the cluster id");
    assert_eq!(id.spec.value, "cluster-a");
    let import: ServiceImport = serde_json::from_value(serde_json::json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1",
        "kind": "ServiceImport",
        "metadata": {"name": "web", "namespace": APP_NS},
        "spec": {"type": "ClusterSetIP", "ports": [{"port": 80, "protocol": "TCP"}]},
    }))
    .unwrap();
    assert_forbidden(
        Api::<ServiceImport>::namespaced(peer.clone(), APP_NS)
            .create(&PostParams::default(), &import)
            .await,
        "the peer reader creating a ServiceImport",
    );
    assert_forbidden(
        Api::<Secret>::namespaced(peer.clone(), CONTROLLER_NAMESPACE)
            .list(&ListParams::default())
            .await,
        "the peer reader listing Secrets",
    );
    // A namespace with no export reveals nothing through the token, and
    // nothing is listed cluster-wide but the exports.
    let list = ListParams::default();
    assert_forbidden(
        Api::<Service>::namespaced(peer.clone(), APP_NS)
            .list(&list)
            .await,
        "the peer reader listing the Services of a namespace",
    );
    assert_forbidden(
        Api::<EndpointSlice>::namespaced(peer.clone(), APP_NS)
            .list(&list)
            .await,
        "the peer reader listing the EndpointSlices of a namespace",
    );
    assert_forbidden(
        Api::<Secret>::namespaced(peer.clone(), APP_NS)
            .list(&list)
            .await,
        "the peer reader listing the Secrets of a namespace",
    );
    assert_forbidden(
        Api::<Service>::all(peer.clone()).list(&list).await,
        "the peer reader listing Services cluster-wide",
    );
    assert_forbidden(
        Api::<EndpointSlice>::all(peer.clone()).list(&list).await,
        "the peer reader listing EndpointSlices cluster-wide",
    );
    assert_forbidden(
        Api::<Secret>::all(peer.clone()).list(&list).await,
        "the peer reader listing Secrets cluster-wide",
    );
    Api::<PublishedService>::namespaced(peer.clone(), CONTROLLER_NAMESPACE)
        .list(&list)
        .await
        .expect("the peer reader lists the publication");
    Api::<EndpointSlice>::namespaced(peer.clone(), CONTROLLER_NAMESPACE)
        .list(&list)
        .await
        .expect("the peer reader lists the published slices");

    // --- The controller's own kubeconfig from install_controller. ---
    let controller = client_from(&controller_kubeconfig).await;
    Api::<ServiceImport>::namespaced(controller.clone(), APP_NS)
        .create(&PostParams::default(), &import)
        .await
        .expect("the controller creates a ServiceImport");
    assert_forbidden(
        Api::<Secret>::namespaced(controller.clone(), "default")
            .list(&ListParams::default())
            .await,
        "the controller listing Secrets in default",
    );

    // --- A peer Secret, read back the way the controller will. ---
    add_peer_secret(&admin, "cluster-b", &peer_kubeconfig).await;
    let secrets: Api<Secret> = Api::namespaced(controller.clone(), CONTROLLER_NAMESPACE);
    let listed = secrets
        .list(&ListParams::default().labels(&format!("{PEER_LABEL}=true")))
        .await
        .expect("the controller lists peer Secrets in its namespace");
    let names: Vec<_> = listed
        .items
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    assert_eq!(names, ["peer-cluster-b"]);
    let data = listed.items[0].data.clone().unwrap_or_default();
    let stored = String::from_utf8(data["kubeconfig"].0.clone()).unwrap();
    assert_eq!(stored, peer_kubeconfig);
    let through_secret = client_from_yaml(&stored).await;
    Api::<ServiceExport>::all(through_secret)
        .list(&ListParams::default())
        .await
        .expect("the Secret's kubeconfig lists ServiceExports");
    remove_peer_secret(&admin, "cluster-b").await;
    match secrets.get("peer-cluster-b").await {
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        other => panic!("peer Secret still there after remove_peer_secret: {other:?}"),
    }
    remove_peer_secret(&admin, "cluster-b").await;
    eprintln!("whole test in {:.1} s", t0.elapsed().as_secs_f64());
}

/// The controller on exactly the shipped role becomes ready; on a role
/// without one rule it needs, it exits with an error naming the resource,
/// instead of running on a partial view.
#[tokio::test(flavor = "multi_thread")]
async fn the_controller_runs_on_the_shipped_role_and_a_narrower_one_fails_clearly() {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    use kube::api::{Patch, PatchParams};

    let plane = ControlPlane::start_with(&[ClusterSpec::api_only()]).await;
    let cluster = &plane.clusters[0];
    let admin = cluster.admin_client().await;
    set_cluster_properties(&admin, "solo", "test-clusterset").await;
    let kubeconfig = install_controller(cluster).await;
    let controller = controlplane::spawn_controller(cluster, &kubeconfig, &[]);
    controller.wait_ready(std::time::Duration::from_secs(30));
    controller.kill();

    // The same role without its ServiceCIDR rule.
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let mut role = roles.get("clusterset-dns-controller").await.unwrap();
    let rules = role.rules.take().unwrap_or_default();
    let narrower: Vec<_> = rules
        .into_iter()
        .filter(|rule| !rule.resources.iter().flatten().any(|r| r == "servicecidrs"))
        .collect();
    role.rules = Some(narrower);
    role.metadata.managed_fields = None;
    role.metadata.resource_version = None;
    roles
        .patch(
            "clusterset-dns-controller",
            &PatchParams::apply("rbac-test").force(),
            &Patch::Apply(&role),
        )
        .await
        .unwrap();
    let controller = controlplane::spawn_controller(cluster, &kubeconfig, &[]);
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = controller.exited() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running on a role without servicecidrs; log:\n{}",
            controller.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(!status.success());
    let log = controller.log();
    assert!(
        log.contains("servicecidrs") && log.contains("role does not allow"),
        "the error names what is missing:\n{log}"
    );
}
