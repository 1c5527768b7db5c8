//! The shipped manifests (`deploy/*.yaml`) are valid Kubernetes objects:
//! every document parses into the typed k8s-openapi object of its kind, and
//! serializing that object back gives the document again, so a misspelt or
//! misplaced field (which k8s-openapi would silently ignore) fails here.
//! Plus the invariants the install relies on: the kustomization lists every
//! manifest, one versioned image, the Helm chart's CRDs are the generated
//! ones, the DNS rollout surges behind a Service that prefers the node's
//! pod, and both pod templates carry the Prometheus scrape annotations.
//! Tier 1: no apiserver (tests/rbac.rs checks the roles against a real one,
//! tests/install.rs installs everything with kubectl and helm).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// One parsed document. Some kinds are only parsed, never inspected.
#[derive(Debug)]
#[allow(dead_code, clippy::large_enum_variant)]
enum Object {
    Namespace(Namespace),
    ServiceAccount(ServiceAccount),
    ClusterRole(ClusterRole),
    ClusterRoleBinding(ClusterRoleBinding),
    Role(Role),
    RoleBinding(RoleBinding),
    Deployment(Box<Deployment>),
    DaemonSet(Box<DaemonSet>),
    Service(Service),
    Secret(Secret),
}

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// `T` from `doc`, and `doc` again from `T`, or what differs.
fn round_trip<T: DeserializeOwned + Serialize>(doc: &Value, what: &str) -> T {
    let object: T = serde_path_to_error::deserialize(doc.clone())
        .unwrap_or_else(|e| panic!("{what}: {} : {e}", e.path()));
    let back = serde_json::to_value(&object).unwrap();
    if &back != doc {
        panic!(
            "{what}: fields lost or changed by parsing (unknown or misplaced field?): {}",
            diff(doc, &back, "")
        );
    }
    object
}

/// The first path where `a` and `b` differ.
fn diff(a: &Value, b: &Value, path: &str) -> String {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for key in x.keys().chain(y.keys()) {
                let (u, v) = (x.get(key), y.get(key));
                if u != v {
                    return match (u, v) {
                        (Some(u), Some(v)) => diff(u, v, &format!("{path}.{key}")),
                        (Some(u), None) => format!("{path}.{key} = {u} is dropped"),
                        (None, Some(v)) => format!("{path}.{key} = {v} appears"),
                        (None, None) => unreachable!(),
                    };
                }
            }
            format!("{path}: equal?")
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (u, v)) in x.iter().zip(y).enumerate() {
                if u != v {
                    return diff(u, v, &format!("{path}[{i}]"));
                }
            }
            format!("{path}: equal?")
        }
        _ => format!("{path}: {a} became {b}"),
    }
}

/// Every document of `deploy/<name>`, typed.
fn parse(name: &str) -> Vec<Object> {
    let path = deploy_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()));
    let mut objects = Vec::new();
    for (i, doc) in docs.into_iter().filter(|d| !d.is_null()).enumerate() {
        let api_version = doc["apiVersion"].as_str().unwrap_or_default().to_owned();
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        let what = format!("{name} document {i} ({api_version} {kind})");
        let object = match (api_version.as_str(), kind.as_str()) {
            ("v1", "Namespace") => Object::Namespace(round_trip(&doc, &what)),
            ("v1", "ServiceAccount") => Object::ServiceAccount(round_trip(&doc, &what)),
            ("v1", "Service") => Object::Service(round_trip(&doc, &what)),
            ("v1", "Secret") => Object::Secret(round_trip(&doc, &what)),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
                Object::ClusterRole(round_trip(&doc, &what))
            }
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                Object::ClusterRoleBinding(round_trip(&doc, &what))
            }
            ("rbac.authorization.k8s.io/v1", "Role") => Object::Role(round_trip(&doc, &what)),
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
                Object::RoleBinding(round_trip(&doc, &what))
            }
            ("apps/v1", "Deployment") => Object::Deployment(Box::new(round_trip(&doc, &what))),
            ("apps/v1", "DaemonSet") => Object::DaemonSet(Box::new(round_trip(&doc, &what))),
            _ => panic!("{what}: kind not known to this test; add it to `parse`"),
        };
        objects.push(object);
    }
    objects
}

#[test]
fn every_deploy_manifest_parses_into_typed_objects_without_unknown_fields() {
    let mut files: Vec<String> = std::fs::read_dir(deploy_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml"))
        .collect();
    files.retain(|f| f != "kustomization.yaml");
    files.sort();
    for required in ["controller.yaml", "peer-reader.yaml"] {
        assert!(
            files.iter().any(|f| f == required),
            "deploy/{required} missing"
        );
    }
    let mut namespaces = Vec::new();
    for file in &files {
        let objects = parse(file);
        assert!(!objects.is_empty(), "deploy/{file} has no documents");
        for object in objects {
            if let Object::Namespace(n) = object {
                namespaces.push(format!("{file}: {:?}", n.metadata.name));
            }
        }
    }
    // kustomize refuses an object declared twice.
    assert_eq!(namespaces.len(), 1, "the namespace, once: {namespaces:?}");
}

/// Verbs of the rules for `(group, resource)`.
fn verbs(
    rules: &[k8s_openapi::api::rbac::v1::PolicyRule],
    group: &str,
    resource: &str,
) -> BTreeSet<String> {
    rules
        .iter()
        .filter(|r| {
            r.api_groups
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|g| g == group)
                && r.resources
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .any(|x| x == resource)
        })
        .flat_map(|r| r.verbs.iter().cloned())
        .collect()
}

fn set(verbs: &[&str]) -> BTreeSet<String> {
    verbs.iter().map(|v| v.to_string()).collect()
}

/// Every rule of a role as `(group, resource, resourceNames, verbs)`.
fn grants(
    rules: &[k8s_openapi::api::rbac::v1::PolicyRule],
) -> BTreeSet<(String, String, Vec<String>, Vec<String>)> {
    let mut out = BTreeSet::new();
    for rule in rules {
        assert!(rule.non_resource_urls.is_none(), "{rule:?}");
        for group in rule.api_groups.as_deref().unwrap_or_default() {
            for resource in rule.resources.as_deref().unwrap_or_default() {
                let mut verbs = rule.verbs.clone();
                verbs.sort();
                out.insert((
                    group.clone(),
                    resource.clone(),
                    rule.resource_names.clone().unwrap_or_default(),
                    verbs,
                ));
            }
        }
    }
    out
}

fn grant(
    group: &str,
    resource: &str,
    names: &[&str],
    verbs: &[&str],
) -> (String, String, Vec<String>, Vec<String>) {
    let mut verbs: Vec<String> = verbs.iter().map(|v| v.to_string()).collect();
    verbs.sort();
    (
        group.into(),
        resource.into(),
        names.iter().map(|n| n.to_string()).collect(),
        verbs,
    )
}

/// The peer reader reads this cluster's publication in the controller's
/// namespace (a Role), and cluster-wide only what the KEPs make public to
/// the clusterset: ServiceExports, and the two ClusterProperties by name.
/// No Service, no EndpointSlice outside the namespace, no Secret, no write.
#[test]
fn peer_reader_reads_the_publication_and_only_what_the_keps_make_public() {
    let objects = parse("peer-reader.yaml");
    let cluster_roles: Vec<&ClusterRole> = objects
        .iter()
        .filter_map(|o| match o {
            Object::ClusterRole(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(cluster_roles.len(), 1, "one ClusterRole");
    assert_eq!(
        grants(&cluster_roles[0].rules.clone().unwrap_or_default()),
        BTreeSet::from([
            grant(
                "multicluster.x-k8s.io",
                "serviceexports",
                &[],
                &["get", "list", "watch"]
            ),
            grant(
                "about.k8s.io",
                "clusterproperties",
                &["cluster.clusterset.k8s.io", "clusterset.k8s.io"],
                &["get"]
            ),
        ])
    );
    let roles: Vec<&Role> = objects
        .iter()
        .filter_map(|o| match o {
            Object::Role(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(roles.len(), 1, "one Role");
    assert_eq!(
        roles[0].metadata.namespace.as_deref(),
        Some("clusterset-dns")
    );
    assert_eq!(
        grants(&roles[0].rules.clone().unwrap_or_default()),
        BTreeSet::from([
            grant(
                "clusterset-dns.io",
                "publishedservices",
                &[],
                &["get", "list", "watch"]
            ),
            grant(
                "discovery.k8s.io",
                "endpointslices",
                &[],
                &["get", "list", "watch"]
            ),
            grant("", "configmaps", &["clusterset-dns-publication"], &["get"]),
        ])
    );
    let reader = |subjects: Option<&Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        subjects.into_iter().flatten().any(|s| {
            s.kind == "ServiceAccount"
                && s.name == "clusterset-dns-peer-reader"
                && s.namespace.as_deref() == Some("clusterset-dns")
        })
    };
    assert!(
        objects
            .iter()
            .any(|o| matches!(o, Object::ClusterRoleBinding(b)
        if b.role_ref.name == "clusterset-dns-peer-reader" && reader(b.subjects.as_ref())))
    );
    assert!(objects.iter().any(|o| matches!(o, Object::RoleBinding(b)
        if b.role_ref.kind == "Role" && b.role_ref.name == "clusterset-dns-peer-reader"
            && reader(b.subjects.as_ref()))));
}

/// The upgrade's legacy grants give back exactly what a previous release's
/// peers read, and nothing else (docs/upgrade.md).
#[test]
fn the_legacy_reader_grants_are_what_a_previous_release_reads() {
    let objects = parse("upgrade/peer-reader-legacy.yaml");
    let role = objects
        .iter()
        .find_map(|o| match o {
            Object::ClusterRole(r) => Some(r),
            _ => None,
        })
        .expect("a ClusterRole");
    assert_eq!(
        grants(&role.rules.clone().unwrap_or_default()),
        BTreeSet::from([
            grant("", "services", &[], &["get", "list", "watch"]),
            grant(
                "discovery.k8s.io",
                "endpointslices",
                &[],
                &["get", "list", "watch"]
            ),
            grant(
                "about.k8s.io",
                "clusterproperties",
                &[],
                &["get", "list", "watch"]
            ),
        ])
    );
}

/// The DNS server's role lists and watches exactly what it reads, and the
/// Helm chart grants the same rules.
#[test]
fn the_dns_server_only_lists_and_watches_four_resources() {
    let objects = parse("rbac.yaml");
    let roles: Vec<&ClusterRole> = objects
        .iter()
        .filter_map(|o| match o {
            Object::ClusterRole(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(roles.len(), 1, "one ClusterRole");
    let rules = roles[0].rules.clone().unwrap_or_default();
    let mut granted = BTreeSet::new();
    for rule in &rules {
        assert!(rule.non_resource_urls.is_none() && rule.resource_names.is_none());
        for group in rule.api_groups.as_deref().unwrap_or_default() {
            for resource in rule.resources.as_deref().unwrap_or_default() {
                granted.insert((group.clone(), resource.clone()));
            }
        }
    }
    let expected: BTreeSet<(String, String)> = [
        ("multicluster.x-k8s.io", "serviceimports"),
        ("discovery.k8s.io", "endpointslices"),
        ("", "namespaces"),
        // This cluster's id, for local-first answers.
        ("about.k8s.io", "clusterproperties"),
    ]
    .iter()
    .map(|(g, r)| (g.to_string(), r.to_string()))
    .collect();
    assert_eq!(granted, expected);
    for (g, r) in &expected {
        assert_eq!(verbs(&rules, g, r), set(&["list", "watch"]), "{g}/{r}");
    }
    // The chart's template is YAML only once rendered: compare the rules
    // as text.
    let rules_of = |text: &str| -> String {
        let start = text.find("\nrules:\n").expect("a rules: block");
        let rest = &text[start..];
        rest[..rest.find("\n---").expect("a document after the role")].to_owned()
    };
    let plain = std::fs::read_to_string(deploy_dir().join("rbac.yaml")).unwrap();
    let chart =
        std::fs::read_to_string(deploy_dir().join("helm/clusterset-dns/templates/rbac.yaml"))
            .unwrap();
    assert_eq!(
        rules_of(&chart),
        rules_of(&plain),
        "the chart's DNS role differs"
    );
}

#[test]
fn controller_install_is_consistent() {
    let objects = parse("controller.yaml");
    let sa = "clusterset-dns-controller";
    let ns = Some("clusterset-dns");
    assert!(objects.iter().any(
        |o| matches!(o, Object::ServiceAccount(s) if s.metadata.name.as_deref() == Some(sa)
            && s.metadata.namespace.as_deref() == ns)
    ));
    // Secrets and Leases only through the namespaced Role.
    for o in &objects {
        if let Object::ClusterRole(r) = o {
            let rules = r.rules.clone().unwrap_or_default();
            assert!(
                verbs(&rules, "", "secrets").is_empty(),
                "Secrets cluster-wide"
            );
            assert!(verbs(&rules, "coordination.k8s.io", "leases").is_empty());
            assert!(
                verbs(&rules, "multicluster.x-k8s.io", "serviceexports")
                    .is_subset(&set(&["get", "list", "watch"])),
                "the controller never writes ServiceExports"
            );
        }
        if let Object::Role(r) = o {
            assert_eq!(r.metadata.namespace.as_deref(), ns);
            assert_eq!(
                verbs(r.rules.as_deref().unwrap_or_default(), "", "secrets"),
                set(&["get", "list", "watch"])
            );
        }
    }
    // Both bindings point at the SA.
    let bound: Vec<&str> =
        objects
            .iter()
            .filter_map(|o| match o {
                Object::ClusterRoleBinding(b) => Some((&b.role_ref, &b.subjects)),
                Object::RoleBinding(b) => Some((&b.role_ref, &b.subjects)),
                _ => None,
            })
            .filter(|(_, subjects)| {
                subjects.as_deref().unwrap_or_default().iter().any(|s| {
                    s.kind == "ServiceAccount" && s.name == sa && s.namespace.as_deref() == ns
                })
            })
            .map(|(role_ref, _)| role_ref.kind.as_str())
            .collect();
    assert_eq!(bound, ["ClusterRole", "Role"]);

    let deployment = objects
        .iter()
        .find_map(|o| match o {
            Object::Deployment(d) => Some(d),
            _ => None,
        })
        .expect("a Deployment");
    assert_eq!(deployment.metadata.namespace.as_deref(), ns);
    let spec = deployment.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some(sa));
    assert_eq!(
        pod.security_context
            .as_ref()
            .and_then(|s| s.run_as_non_root),
        Some(true)
    );
    assert!(
        pod.affinity
            .as_ref()
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| a
                .preferred_during_scheduling_ignored_during_execution
                .as_ref())
            .is_some_and(|p| !p.is_empty()),
        "preferred anti-affinity"
    );
    let container = &pod.containers[0];
    let args = container.args.clone().unwrap_or_default();
    assert_eq!(args.first().map(String::as_str), Some("controller"));
    let env = container.env.clone().unwrap_or_default();
    assert!(env.iter().any(|e| {
        e.name == "POD_NAMESPACE"
            && e.value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .map(|f| f.field_path.as_str())
                == Some("metadata.namespace")
    }));
    let admin_port = container
        .ports
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|p| p.name.as_deref() == Some("admin"))
        .expect("an admin port")
        .container_port;
    assert_eq!(admin_port, 9180);
    assert!(
        args.iter().any(|a| a == "--admin-listen=0.0.0.0:9180"),
        "{args:?}"
    );
    for (probe, path) in [
        (&container.readiness_probe, "/ready"),
        (&container.liveness_probe, "/health"),
    ] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .expect("HTTP probe");
        assert_eq!(get.path.as_deref(), Some(path));
    }
    let security = container.security_context.as_ref().unwrap();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert!(
        container
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .is_some_and(|r| r.contains_key("cpu") && r.contains_key("memory"))
    );
}

/// The manifests' manifest files (`deploy/*.yaml` but the kustomization).
fn manifest_files() -> BTreeSet<String> {
    std::fs::read_dir(deploy_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect()
}

/// A YAML file of the repository as JSON.
fn yaml(relative: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{relative}: {e}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

fn strings(value: &Value) -> BTreeSet<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

/// `kubectl apply -k deploy` installs every manifest and the CRDs, and the
/// CRDs' own kustomization lists every generated CRD.
#[test]
fn the_kustomization_lists_every_manifest_and_the_crds() {
    let kustomization = yaml("deploy/kustomization.yaml");
    let mut expected = manifest_files();
    expected.insert("../crds".into());
    assert_eq!(strings(&kustomization["resources"]), expected);

    let crds = yaml("crds/kustomization.yml");
    let generated: BTreeSet<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("crds"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".yaml"))
            .collect();
    assert_eq!(strings(&crds["resources"]), generated);
    // What `kubectl apply -k deploy -l 'app.kubernetes.io/component!=crd'` leaves out.
    assert_eq!(
        crds["labels"][0]["pairs"]["app.kubernetes.io/component"], "crd",
        "the CRDs' label"
    );
}

/// Every container runs `clusterset-dns:<Cargo.toml version>`, pulled only
/// when absent, in the raw manifests, the kustomization's `images:` and the
/// Helm chart; no `latest`.
#[test]
fn images_are_the_cargo_version_and_pulled_if_not_present() {
    let version = env!("CARGO_PKG_VERSION");
    let image = format!("clusterset-dns:{version}");
    let mut containers = 0;
    for file in manifest_files() {
        for object in parse(&file) {
            let pod = match &object {
                Object::DaemonSet(d) => d.spec.as_ref().unwrap().template.spec.clone(),
                Object::Deployment(d) => d.spec.as_ref().unwrap().template.spec.clone(),
                _ => continue,
            };
            for container in pod.unwrap().containers {
                assert_eq!(container.image.as_deref(), Some(image.as_str()), "{file}");
                assert_eq!(
                    container.image_pull_policy.as_deref(),
                    Some("IfNotPresent"),
                    "{file}"
                );
                containers += 1;
            }
        }
    }
    assert_eq!(containers, 2, "the DNS server and the controller");

    let kustomization = yaml("deploy/kustomization.yaml");
    let images = kustomization["images"].as_array().unwrap();
    assert_eq!(images.len(), 1);
    assert_eq!(images[0]["name"], "clusterset-dns");
    assert_eq!(images[0]["newTag"], version);

    let chart = yaml("deploy/helm/clusterset-dns/Chart.yaml");
    assert_eq!(chart["version"], version);
    assert_eq!(chart["appVersion"], version);
    let values = yaml("deploy/helm/clusterset-dns/values.yaml");
    assert_eq!(values["image"]["repository"], "clusterset-dns");
    assert_eq!(values["image"]["tag"], "", "empty: the appVersion");
    assert_eq!(values["image"]["pullPolicy"], "IfNotPresent");
}

/// The chart's `crds/` holds exactly the generated CRDs, byte for byte
/// (`UPDATE_CRDS=1 cargo test --test crd_sync` writes both).
#[test]
fn the_helm_chart_crds_are_the_generated_crds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |dir: &Path| -> BTreeMap<String, String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(&p).unwrap())
            })
            .collect()
    };
    let generated = read(&root.join("crds"));
    let chart = read(&root.join("deploy/helm/clusterset-dns/crds"));
    assert_eq!(
        generated.keys().collect::<Vec<_>>(),
        chart.keys().collect::<Vec<_>>()
    );
    for (name, text) in &generated {
        assert!(
            &chart[name] == text,
            "deploy/helm/clusterset-dns/crds/{name} differs from crds/{name}: \
             UPDATE_CRDS=1 cargo test --test crd_sync"
        );
    }
}

/// The DNS rollout surges (a node's new pod is Ready before the old one
/// goes) and the Service prefers the node's own pod with fallback, never
/// `internalTrafficPolicy: Local` (docs/deploy.md, "Rollout").
#[test]
fn the_dns_rollout_surges_and_the_service_prefers_the_node() {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let objects = parse("clusterset-dns.yaml");
    let ds = objects
        .iter()
        .find_map(|o| match o {
            Object::DaemonSet(d) => Some(d),
            _ => None,
        })
        .expect("a DaemonSet");
    let spec = ds.spec.as_ref().unwrap();
    let strategy = spec.update_strategy.as_ref().unwrap();
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    let rolling = strategy.rolling_update.as_ref().unwrap();
    assert_eq!(rolling.max_surge, Some(IntOrString::Int(1)));
    assert_eq!(rolling.max_unavailable, Some(IntOrString::Int(0)));
    let pod = spec.template.spec.as_ref().unwrap();
    let container = &pod.containers[0];
    // Two pods per node during a surge: no host port may be taken.
    for port in container.ports.as_deref().unwrap_or_default() {
        assert_eq!(port.host_port, None, "{port:?}");
    }
    assert_eq!(pod.host_network, None);
    let sleep = container
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
        .and_then(|h| h.sleep.as_ref())
        .expect("a preStop sleep")
        .seconds;
    let grace = pod
        .termination_grace_period_seconds
        .expect("a grace period");
    assert!(
        0 < sleep && sleep < grace,
        "sleep {sleep} s, grace {grace} s"
    );
    assert!(container.readiness_probe.is_some());

    let service = objects
        .iter()
        .find_map(|o| match o {
            Object::Service(s) => Some(s),
            _ => None,
        })
        .expect("a Service");
    let spec = service.spec.as_ref().unwrap();
    assert_eq!(spec.traffic_distribution.as_deref(), Some("PreferSameNode"));
    assert_eq!(spec.internal_traffic_policy, None);
}

/// Both pod templates are scraped by Prometheus on the port their admin
/// endpoint listens on (9180), path /metrics.
#[test]
fn both_pod_templates_carry_the_prometheus_scrape_annotations() {
    let mut seen = 0;
    for file in manifest_files() {
        for object in parse(&file) {
            let template = match &object {
                Object::DaemonSet(d) => d.spec.as_ref().unwrap().template.clone(),
                Object::Deployment(d) => d.spec.as_ref().unwrap().template.clone(),
                _ => continue,
            };
            let annotations = template
                .metadata
                .as_ref()
                .and_then(|m| m.annotations.clone())
                .unwrap_or_default();
            let get = |k: &str| annotations.get(k).map(String::as_str);
            assert_eq!(get("prometheus.io/scrape"), Some("true"), "{file}");
            assert_eq!(get("prometheus.io/port"), Some("9180"), "{file}");
            assert_eq!(get("prometheus.io/path"), Some("/metrics"), "{file}");
            let container = &template.spec.as_ref().unwrap().containers[0];
            let admin = container
                .ports
                .as_deref()
                .unwrap_or_default()
                .iter()
                .find(|p| p.name.as_deref() == Some("admin"))
                .unwrap_or_else(|| panic!("{file}: an admin port"))
                .container_port;
            assert_eq!(admin, 9180, "{file}");
            let args = container.args.clone().unwrap_or_default();
            assert!(
                args.iter().any(|a| a == "--admin-listen=0.0.0.0:9180"),
                "{file}: the admin endpoint listens on 9180: {args:?}"
            );
            seen += 1;
        }
    }
    assert_eq!(seen, 2, "the DaemonSet and the Deployment");
}
