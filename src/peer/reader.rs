//! The objects `peer add` writes into a peer: those of
//! `deploy/peer-reader.yaml` (its namespace, the `clusterset-dns-peer-reader`
//! ServiceAccount, ClusterRole and ClusterRoleBinding), and one token Secret
//! per cluster that reads the peer. A unit test keeps them equal to the
//! shipped file, which the image build does not see.

use serde_json::{Value, json};

/// The ServiceAccount whose tokens peers read with.
pub const SERVICE_ACCOUNT: &str = "clusterset-dns-peer-reader";
/// The ClusterRole it is bound to.
pub const CLUSTER_ROLE: &str = "clusterset-dns-peer-reader";
/// The namespace of `deploy/peer-reader.yaml`.
pub const SHIPPED_NAMESPACE: &str = "clusterset-dns";
/// Label on a token Secret: the cluster id of the cluster that reads with
/// it. Rotation and revocation find a reader's tokens by it.
pub const LABEL_READER_FOR: &str = "clusterset-dns.io/peer-reader-for";
/// `app.kubernetes.io/managed-by` of the token Secrets.
pub const MANAGED_BY: &str = "clusterset-dns-peer-cli";

/// `(API group, resource)` the role reads (get, list, watch): exactly
/// what the controller pulls from a peer.
pub const READS: [(&str, &str); 4] = [
    ("multicluster.x-k8s.io", "serviceexports"),
    ("", "services"),
    ("discovery.k8s.io", "endpointslices"),
    ("about.k8s.io", "clusterproperties"),
];

/// The namespace.
pub fn namespace(namespace: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
}

/// The ServiceAccount in `namespace`.
pub fn service_account(namespace: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": SERVICE_ACCOUNT, "namespace": namespace},
    })
}

/// The ClusterRole: get, list and watch of [`READS`].
pub fn cluster_role() -> Value {
    let rules: Vec<Value> = READS
        .iter()
        .map(|(group, resource)| {
            json!({
                "apiGroups": [group],
                "resources": [resource],
                "verbs": ["get", "list", "watch"],
            })
        })
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": CLUSTER_ROLE},
        "rules": rules,
    })
}

/// Name of the binding for a ServiceAccount in `namespace`: the shipped
/// name in the shipped namespace, suffixed elsewhere (a binding's subjects
/// are replaced as a whole, so two namespaces cannot share one).
pub fn binding_name(namespace: &str) -> String {
    if namespace == SHIPPED_NAMESPACE {
        CLUSTER_ROLE.to_owned()
    } else {
        format!("{CLUSTER_ROLE}-{namespace}")
    }
}

/// The ClusterRoleBinding of the ServiceAccount in `namespace`.
pub fn binding(namespace: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": binding_name(namespace)},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": CLUSTER_ROLE,
        },
        "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}],
    })
}

/// A new token Secret of the ServiceAccount for the cluster `reader_id`
/// (`generateName`: each run makes a new one, so a rotation never reuses a
/// token). The peer's kube-controller-manager fills in `data.token` and
/// `data.ca.crt`; deleting the Secret revokes the token.
pub fn token_secret(namespace: &str, reader_id: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/service-account-token",
        "metadata": {
            "generateName": format!("{SERVICE_ACCOUNT}-{reader_id}-"),
            "namespace": namespace,
            "labels": {
                LABEL_READER_FOR: reader_id,
                "app.kubernetes.io/managed-by": MANAGED_BY,
            },
            "annotations": {"kubernetes.io/service-account.name": SERVICE_ACCOUNT},
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
                include_str!("../../deploy/controller.yaml"),
            )
        } else {
            (
                "peer-reader.yaml",
                include_str!("../../deploy/peer-reader.yaml"),
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
    fn token_secrets_are_generated_per_reader() {
        let s = token_secret("clusterset-dns", "cluster-a");
        assert_eq!(s["type"], "kubernetes.io/service-account-token");
        assert_eq!(
            s["metadata"]["generateName"],
            "clusterset-dns-peer-reader-cluster-a-"
        );
        assert_eq!(s["metadata"]["labels"][LABEL_READER_FOR], "cluster-a");
        assert_eq!(
            s["metadata"]["annotations"]["kubernetes.io/service-account.name"],
            SERVICE_ACCOUNT
        );
    }
}
