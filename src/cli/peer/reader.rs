//! The objects `peer add` writes into a peer: those of
//! `deploy/peer-reader.yaml` (the `clusterset-dns-peer-reader`
//! ServiceAccount, its Role over the controller's namespace and its
//! ClusterRole, each bound), and one anchor Secret per cluster that reads
//! the peer, to which that cluster's token is bound. A unit test keeps them
//! equal to the shipped file, which the image build does not see.

use serde_json::{Value, json};

use crate::api::well_known::{ABOUT_GROUP, CLUSTER_ID_PROPERTY, CLUSTERSET_PROPERTY, MCS_GROUP};
use crate::peering::PUBLICATION_MARKER;

/// The ServiceAccount whose tokens peers read with.
pub(super) const SERVICE_ACCOUNT: &str = "clusterset-dns-peer-reader";
/// The Role (in the controller's namespace) and the ClusterRole it is
/// bound to.
pub(super) const ROLE: &str = "clusterset-dns-peer-reader";
/// The ClusterRole it is bound to.
pub(super) const CLUSTER_ROLE: &str = ROLE;
/// The namespace of `deploy/peer-reader.yaml`.
pub(super) const SHIPPED_NAMESPACE: &str = crate::cluster_args::DEFAULT_NAMESPACE;
/// Label on an anchor Secret: the cluster id of the cluster that reads
/// with the token bound to it. Rotation and revocation find a reader's
/// tokens by it.
pub(super) const LABEL_READER_FOR: &str = "clusterset-dns.io/peer-reader-for";
/// `app.kubernetes.io/component` of the reader's objects: what a member
/// of a hub leaves out (docs/deploy.md, "A member of a hub").
pub(super) const COMPONENT: &str = "peer-reader";
/// `app.kubernetes.io/managed-by` of the anchor Secrets.
pub(super) const MANAGED_BY: &str = "clusterset-dns-peer-cli";

/// `(API group, resource)` the Role reads (get, list, watch) in the
/// controller's namespace: this cluster's publication.
pub(super) const PUBLICATION_READS: [(&str, &str); 2] = [
    ("clusterset-dns.io", "publishedservices"),
    ("discovery.k8s.io", "endpointslices"),
];

/// The namespace.
pub(super) fn namespace(namespace: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
}

/// The ServiceAccount in `namespace`.
pub(super) fn service_account(namespace: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": SERVICE_ACCOUNT, "namespace": namespace, "labels": {"app.kubernetes.io/component": COMPONENT}},
    })
}

/// The Role in `namespace`: the publication, and the marker by name.
pub(super) fn role(namespace: &str) -> Value {
    let mut rules: Vec<Value> = PUBLICATION_READS
        .iter()
        .map(|(group, resource)| {
            json!({
                "apiGroups": [group],
                "resources": [resource],
                "verbs": ["get", "list", "watch"],
            })
        })
        .collect();
    rules.push(json!({
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": [PUBLICATION_MARKER],
        "verbs": ["get"],
    }));
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": ROLE, "namespace": namespace, "labels": {"app.kubernetes.io/component": COMPONENT}},
        "rules": rules,
    })
}

/// The RoleBinding of the Role to the ServiceAccount, in `namespace`.
pub(super) fn role_binding(namespace: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": ROLE, "namespace": namespace, "labels": {"app.kubernetes.io/component": COMPONENT}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}],
    })
}

/// The ClusterRole: what the KEPs make public to the clusterset, the
/// ServiceExports and this cluster's two ClusterProperties (by name).
pub(super) fn cluster_role() -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": CLUSTER_ROLE, "labels": {"app.kubernetes.io/component": COMPONENT}},
        "rules": [
            {
                "apiGroups": [MCS_GROUP],
                "resources": ["serviceexports"],
                "verbs": ["get", "list", "watch"],
            },
            {
                "apiGroups": [ABOUT_GROUP],
                "resources": ["clusterproperties"],
                "resourceNames": [CLUSTER_ID_PROPERTY, CLUSTERSET_PROPERTY],
                "verbs": ["get"],
            },
        ],
    })
}

/// Name of the binding for a ServiceAccount in `namespace`: the shipped
/// name in the shipped namespace, suffixed elsewhere (a binding's subjects
/// are replaced as a whole, so two namespaces cannot share one).
pub(super) fn binding_name(namespace: &str) -> String {
    if namespace == SHIPPED_NAMESPACE {
        CLUSTER_ROLE.to_owned()
    } else {
        format!("{CLUSTER_ROLE}-{namespace}")
    }
}

/// The ClusterRoleBinding of the ServiceAccount in `namespace`.
pub(super) fn binding(namespace: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": binding_name(namespace), "labels": {"app.kubernetes.io/component": COMPONENT}},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": CLUSTER_ROLE,
        },
        "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}],
    })
}

/// A new anchor Secret for the cluster `reader_id` (`generateName`: each
/// run makes a new one, so a rotation never reuses a token). The token is
/// bound to it: deleting it revokes the token, whatever its expiry.
pub(super) fn token_anchor(namespace: &str, reader_id: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "generateName": format!("{SERVICE_ACCOUNT}-{reader_id}-"),
            "namespace": namespace,
            "labels": {
                LABEL_READER_FOR: reader_id,
                "app.kubernetes.io/managed-by": MANAGED_BY,
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The documents of the shipped manifest, by kind (the namespace is
    /// created by deploy/controller.yaml, the first file of the install).
    fn shipped(kind: &str) -> Value {
        let (file, text) = if kind == "Namespace" {
            (
                "controller.yaml",
                include_str!("../../../deploy/controller.yaml"),
            )
        } else {
            (
                "peer-reader.yaml",
                include_str!("../../../deploy/peer-reader.yaml"),
            )
        };
        let docs: Vec<Value> = serde_saphyr::from_multiple(text).unwrap();
        docs.into_iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in deploy/{file}"))
    }

    #[test]
    fn objects_equal_the_shipped_manifest() {
        assert_eq!(cluster_role(), shipped("ClusterRole"));
        assert_eq!(role(SHIPPED_NAMESPACE), shipped("Role"));
        assert_eq!(role_binding(SHIPPED_NAMESPACE), shipped("RoleBinding"));
        assert_eq!(
            service_account(SHIPPED_NAMESPACE),
            shipped("ServiceAccount")
        );
        assert_eq!(binding(SHIPPED_NAMESPACE), shipped("ClusterRoleBinding"));
        assert_eq!(namespace(SHIPPED_NAMESPACE), shipped("Namespace"));
    }

    #[test]
    fn bindings_of_other_namespaces_get_their_own_name() {
        assert_eq!(binding_name("mesh"), "clusterset-dns-peer-reader-mesh");
        let b = binding("mesh");
        assert_eq!(b["subjects"][0]["namespace"], "mesh");
        assert_eq!(b["roleRef"]["name"], CLUSTER_ROLE);
    }

    #[test]
    fn anchors_are_generated_per_reader() {
        let s = token_anchor("clusterset-dns", "cluster-a");
        assert_eq!(s["type"], "Opaque");
        assert_eq!(
            s["metadata"]["generateName"],
            "clusterset-dns-peer-reader-cluster-a-"
        );
        assert_eq!(s["metadata"]["labels"][LABEL_READER_FOR], "cluster-a");
    }
}
