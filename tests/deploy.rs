//! The shipped manifests (`deploy/*.yaml`) are valid Kubernetes objects:
//! every document parses into the typed k8s-openapi object of its kind, and
//! serializing that object back gives the document again, so a misspelt or
//! misplaced field (which k8s-openapi would silently ignore) fails here.
//! Plus the invariants the controller's install relies on. Tier 1: no
//! apiserver (tests/rbac.rs checks the roles against a real one).

use std::collections::BTreeSet;
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
    files.sort();
    for required in ["controller.yaml", "peer-reader.yaml"] {
        assert!(
            files.iter().any(|f| f == required),
            "deploy/{required} missing"
        );
    }
    for file in &files {
        assert!(!parse(file).is_empty(), "deploy/{file} has no documents");
    }
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

#[test]
fn peer_reader_only_reads_four_resources() {
    let objects = parse("peer-reader.yaml");
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
        assert!(
            rule.verbs
                .iter()
                .all(|v| ["get", "list", "watch"].contains(&v.as_str())),
            "peer reader rule grants more than reading: {rule:?}"
        );
        assert!(rule.non_resource_urls.is_none() && rule.resource_names.is_none());
        for group in rule.api_groups.as_deref().unwrap_or_default() {
            for resource in rule.resources.as_deref().unwrap_or_default() {
                granted.insert((group.clone(), resource.clone()));
            }
        }
    }
    let expected: BTreeSet<(String, String)> = [
        ("multicluster.x-k8s.io", "serviceexports"),
        ("", "services"),
        ("discovery.k8s.io", "endpointslices"),
        ("about.k8s.io", "clusterproperties"),
    ]
    .iter()
    .map(|(g, r)| (g.to_string(), r.to_string()))
    .collect();
    assert_eq!(granted, expected);
    for (g, r) in &expected {
        assert_eq!(
            verbs(&rules, g, r),
            set(&["get", "list", "watch"]),
            "{g}/{r}"
        );
    }
    assert!(
        objects
            .iter()
            .any(|o| matches!(o, Object::ClusterRoleBinding(b)
        if b.role_ref.name == "clusterset-dns-peer-reader"
            && b.subjects.as_deref().unwrap_or_default().iter().any(|s|
                s.kind == "ServiceAccount" && s.name == "clusterset-dns-peer-reader"
                    && s.namespace.as_deref() == Some("clusterset-dns"))))
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
    assert_eq!(admin_port, 9155);
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
