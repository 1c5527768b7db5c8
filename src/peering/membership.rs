//! Who may be a member: the identity rules (KEP-2149 ClusterProperties)
//! that the controller applies to this cluster at start-up and to every
//! peer Secret, and that `clusterset-dns peer add` applies before it writes
//! anything. Pure: the callers read the identities.

use super::reason;
use crate::api::limits::is_dns1123_label;

/// Why a peer is refused: a stable reason (the `reason` label of
/// `clusterset_dns_controller_peers_refused_total` and the start of the
/// `PeerRefused` Event's note) and a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// One of [`crate::peering::reason`]: `InvalidClusterId`,
    /// `SelfReference`, `OtherClusterSet` or `DuplicateClusterId` (and
    /// `peer add`'s own `InvalidLocalClusterId` and `NameTaken`).
    pub reason: &'static str,
    /// What is wrong, naming the Secrets and clusters involved.
    pub message: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason, self.message)
    }
}

/// Why this cluster cannot take part at all: its id (ClusterProperty
/// `cluster.clusterset.k8s.io`) is not a DNS label. `None` when it can.
pub fn local_identity_problem(cluster_id: &str) -> Option<String> {
    (!is_dns1123_label(cluster_id)).then(|| {
        format!(
            "cluster id {cluster_id:?} (ClusterProperty cluster.clusterset.k8s.io) is not a DNS label: it becomes one label of <host>.<clusterid>.<svc>.<ns>.svc.clusterset.local"
        )
    })
}

/// Why the cluster `peer_id` of clusterset `peer_clusterset`, named by
/// Secret `secret`, cannot be a peer of this cluster (`local_id` in
/// `local_clusterset`), given the other peers already known as
/// `(Secret name, cluster id)`; `None` when it can. The Secret itself may
/// be among `others` (a rotated or re-read Secret): it is skipped.
///
/// Checked in this order: the id is a DNS label, it is not this cluster,
/// the clusterset is the same, no other Secret names the same cluster.
pub fn peer_refusal<'a>(
    local_id: &str,
    local_clusterset: &str,
    secret: &str,
    peer_id: &str,
    peer_clusterset: &str,
    others: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Option<Refusal> {
    if !is_dns1123_label(peer_id) {
        return Some(Refusal {
            reason: reason::INVALID_CLUSTER_ID,
            message: format!("peer cluster id {peer_id:?} is not a DNS label"),
        });
    }
    if peer_id == local_id {
        return Some(Refusal {
            reason: reason::SELF_REFERENCE,
            message: format!("Secret {secret} points at this cluster ({local_id})"),
        });
    }
    if peer_clusterset != local_clusterset {
        return Some(Refusal {
            reason: reason::OTHER_CLUSTER_SET,
            message: format!(
                "peer {peer_id} belongs to clusterset {peer_clusterset:?}, this cluster to {local_clusterset:?}"
            ),
        });
    }
    others
        .into_iter()
        .find(|&(other, id)| other != secret && id == peer_id)
        .map(|(other, _)| Refusal {
            reason: reason::DUPLICATE_CLUSTER_ID,
            message: format!("Secrets {other} and {secret} both name cluster {peer_id}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(peer_id: &str, clusterset: &str, others: &[(&str, &str)]) -> Option<&'static str> {
        peer_refusal(
            "a",
            "set",
            "peer-x",
            peer_id,
            clusterset,
            others.iter().copied(),
        )
        .map(|r| r.reason)
    }

    #[test]
    fn a_peer_of_the_same_clusterset_with_a_new_id_is_accepted() {
        assert_eq!(refusal("b", "set", &[("peer-c", "c")]), None);
    }

    #[test]
    fn each_rule_refuses_with_its_reason() {
        assert_eq!(refusal("B", "set", &[]), Some("InvalidClusterId"));
        assert_eq!(refusal("a", "set", &[]), Some("SelfReference"));
        assert_eq!(refusal("b", "other", &[]), Some("OtherClusterSet"));
        assert_eq!(
            refusal("b", "set", &[("peer-b", "b")]),
            Some("DuplicateClusterId")
        );
    }

    #[test]
    fn the_secret_itself_is_no_duplicate() {
        assert_eq!(refusal("b", "set", &[("peer-x", "b")]), None);
    }

    #[test]
    fn rules_apply_in_order() {
        // Not a label and this cluster's clusterset differs: the id first.
        assert_eq!(refusal("-b", "other", &[]), Some("InvalidClusterId"));
        // This cluster in another clusterset: self first.
        assert_eq!(refusal("a", "other", &[]), Some("SelfReference"));
        assert_eq!(
            refusal("b", "other", &[("peer-b", "b")]),
            Some("OtherClusterSet")
        );
    }

    #[test]
    fn messages_name_the_secrets_and_clusters() {
        let r = peer_refusal("a", "set", "peer-new", "b", "set", [("peer-b", "b")]).unwrap();
        assert_eq!(r.message, "Secrets peer-b and peer-new both name cluster b");
        assert_eq!(
            r.to_string(),
            "DuplicateClusterId: Secrets peer-b and peer-new both name cluster b"
        );
        let r = peer_refusal("a", "set", "peer-b", "b", "other", []).unwrap();
        assert_eq!(
            r.message,
            "peer b belongs to clusterset \"other\", this cluster to \"set\""
        );
    }

    #[test]
    fn the_local_id_must_be_a_dns_label() {
        assert_eq!(local_identity_problem("cluster-a"), None);
        assert!(
            local_identity_problem("Cluster_A")
                .unwrap()
                .contains("not a DNS label")
        );
    }
}
