//! The peer contract: what the controller ([`crate::controller`]) and
//! `clusterset-dns peer` ([`crate::cli`]) must agree on about a peer, in
//! one place. It imports neither of them.
//!
//! - A **peer Secret** lives in the controller's namespace, carries the
//!   label [`PEER_LABEL`]`=true` ([`PEER_SELECTOR`]) and holds a kubeconfig
//!   under `data.`[`KUBECONFIG_KEY`]; `peer add` annotates it with the
//!   peer's id ([`ANNOTATION_CLUSTER_ID`]) and its token
//!   ([`ANNOTATION_TOKEN_SECRET`]). [`kubeconfig`] turns it into a client.
//! - A peer's **credential** expires when its token's `exp` says
//!   ([`credential`]).
//! - A controller's **publication** is complete once its marker
//!   [`PUBLICATION_MARKER`] exists.
//! - A **peer Lease** (`clusterset-dns-peer-<id>`, [`lease`]) records when
//!   the controller last saw the peer healthy.
//! - **Contact** ([`contact`]): a peer's identity (its ClusterProperties),
//!   read within [`contact::IDENTITY_TIMEOUT`], and the health probe the
//!   controller repeats and `peer list` runs once.
//! - A refused peer gets a Warning Event [`reason::PEER_REFUSED`], its note
//!   starting with one of the [`reason`]s.
//! - Every answer a peer sends is bounded in size ([`body_limit`]).

pub mod body_limit;
pub mod contact;
pub mod credential;
pub mod kubeconfig;
pub mod lease;
pub mod membership;

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::cidr::Cidr;
use crate::label_selector::LabelSelector;

pub use contact::{Identity, identity, probe, read_identity};

/// The most peers a mesh suits: past it each controller holds more
/// connections, and each apiserver answers more probes, than a hub would
/// cost (docs/controller.md, "The mesh or a hub").
pub const MESH_SUITS_PEERS: usize = 20;

/// What `/ready` and `peer list` say of a mesh of `peers` peers past
/// [`MESH_SUITS_PEERS`].
pub fn mesh_size_warning(peers: usize) -> Option<String> {
    (peers > MESH_SUITS_PEERS).then(|| {
        format!(
            "{peers} peers: past about {MESH_SUITS_PEERS}, a hub costs each member less (docs/hub.md)"
        )
    })
}

/// Label that makes a Secret a peer (with the value `true`).
pub const PEER_LABEL: &str = "clusterset-dns.io/peer";
/// The label selector of peer Secrets: [`PEER_LABEL`]`=true` (the
/// controller's default `--peer-selector`).
pub const PEER_SELECTOR: &str = "clusterset-dns.io/peer=true";
/// The key of a peer Secret's kubeconfig.
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// Annotation on a peer Secret written by `peer add`: the peer's cluster
/// id, so the id is known while the peer is down.
pub const ANNOTATION_CLUSTER_ID: &str = "clusterset-dns.io/cluster-id";
/// Annotation on a peer Secret written by `peer add`: `<namespace>/<name>`
/// of the token Secret in the peer.
pub const ANNOTATION_TOKEN_SECRET: &str = "clusterset-dns.io/token-secret";
/// Annotation on a peer Secret written by `peer add --endpoint-cidr`: the
/// peer's pod ranges, comma-separated; when present, endpoints the peer
/// publishes outside them are refused.
pub const ANNOTATION_ENDPOINT_CIDRS: &str = "clusterset-dns.io/endpoint-cidrs";

/// Annotation on a peer Secret written by `peer add`: the namespace of the
/// peer's controller, where its publication and reader ServiceAccount are
/// (absent: the same namespace as this cluster's controller).
pub const ANNOTATION_PEER_NAMESPACE: &str = "clusterset-dns.io/peer-namespace";

/// The ConfigMap in a controller's namespace that says its publication for
/// peers is complete (`crate::controller::publication`); the reader role
/// may `get` it and no other ConfigMap.
pub const PUBLICATION_MARKER: &str = "clusterset-dns-publication";

/// What the controller reads of a peer Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerSecret {
    /// Its `data.kubeconfig` (empty when missing).
    pub kubeconfig: Vec<u8>,
    /// The id written at `peer add` ([`ANNOTATION_CLUSTER_ID`]): the only
    /// id the peer may answer with.
    pub cluster_id: Option<String>,
    /// The peer's endpoint ranges ([`ANNOTATION_ENDPOINT_CIDRS`]), `None`
    /// when not recorded; `Err` with why when the annotation does not parse.
    pub endpoint_ranges: Result<Option<Vec<Cidr>>, String>,
    /// The peer controller's namespace ([`ANNOTATION_PEER_NAMESPACE`]).
    pub namespace: Option<String>,
    /// When its credential expires ([`credential::expiry`]); `None` when
    /// it never does (or cannot be read).
    pub credential_expires: Option<k8s_openapi::jiff::Timestamp>,
}

impl Default for PeerSecret {
    fn default() -> Self {
        Self {
            kubeconfig: Vec::new(),
            cluster_id: None,
            endpoint_ranges: Ok(None),
            namespace: None,
            credential_expires: None,
        }
    }
}

impl PeerSecret {
    /// Reads a peer Secret.
    pub fn read(secret: &Secret) -> Self {
        let annotations = secret.annotations();
        let endpoint_ranges = match annotations.get(ANNOTATION_ENDPOINT_CIDRS) {
            None => Ok(None),
            Some(text) => crate::cidr::parse_list(text)
                .map(Some)
                .map_err(|error| format!("annotation {ANNOTATION_ENDPOINT_CIDRS}: {error}")),
        };
        let kubeconfig = kubeconfig_data(secret);
        Self {
            credential_expires: credential::expiry(kubeconfig),
            kubeconfig: kubeconfig.to_vec(),
            cluster_id: annotations.get(ANNOTATION_CLUSTER_ID).cloned(),
            endpoint_ranges,
            namespace: annotations.get(ANNOTATION_PEER_NAMESPACE).cloned(),
        }
    }
}

/// Whether `selector` (the controller's `--peer-selector`) takes `secret`
/// for a peer.
pub fn is_peer_secret(secret: &Secret, selector: &LabelSelector) -> bool {
    selector.matches(secret.labels())
}

/// A peer Secret as `peer add` writes it (and the tests, which make peers
/// by hand): labelled to match the controller's `--peer-selector`, the
/// peer's kubeconfig under [`KUBECONFIG_KEY`], and the annotations the
/// controller reads ([`PeerSecret::read`]).
#[derive(Debug, Clone, Default)]
pub struct NewPeerSecret<'a> {
    /// Its name.
    pub name: &'a str,
    /// The controller's namespace.
    pub namespace: &'a str,
    /// Labels that make the controller's selector take it
    /// ([`LabelSelector::labels_that_match`]).
    pub labels: BTreeMap<String, String>,
    /// The peer's kubeconfig.
    pub kubeconfig: &'a [u8],
    /// [`ANNOTATION_CLUSTER_ID`]: the only id the peer may answer with.
    pub cluster_id: Option<&'a str>,
    /// [`ANNOTATION_TOKEN_SECRET`]: `<namespace>/<name>` of the token's
    /// Secret in the peer.
    pub token_secret: Option<String>,
    /// [`ANNOTATION_PEER_NAMESPACE`]: the peer controller's namespace.
    pub peer_namespace: Option<&'a str>,
    /// [`ANNOTATION_ENDPOINT_CIDRS`]: the peer's pod ranges (none: not
    /// recorded).
    pub endpoint_cidrs: &'a [String],
}

impl NewPeerSecret<'_> {
    /// The Secret, ready for a server-side apply.
    pub fn build(&self) -> Secret {
        let mut annotations = BTreeMap::new();
        let mut annotate = |key: &str, value: Option<String>| {
            if let Some(value) = value {
                annotations.insert(key.to_owned(), value);
            }
        };
        annotate(ANNOTATION_CLUSTER_ID, self.cluster_id.map(str::to_owned));
        annotate(ANNOTATION_TOKEN_SECRET, self.token_secret.clone());
        annotate(
            ANNOTATION_PEER_NAMESPACE,
            self.peer_namespace.map(str::to_owned),
        );
        annotate(
            ANNOTATION_ENDPOINT_CIDRS,
            (!self.endpoint_cidrs.is_empty()).then(|| self.endpoint_cidrs.join(",")),
        );
        Secret {
            metadata: ObjectMeta {
                name: Some(self.name.to_owned()),
                namespace: Some(self.namespace.to_owned()),
                labels: Some(self.labels.clone()),
                annotations: (!annotations.is_empty()).then_some(annotations),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".to_owned()),
            data: Some(BTreeMap::from([(
                KUBECONFIG_KEY.to_owned(),
                ByteString(self.kubeconfig.to_vec()),
            )])),
            ..Secret::default()
        }
    }
}

/// The kubeconfig a peer Secret holds (`data.kubeconfig`); empty when the
/// key is missing, which [`kubeconfig::read`] reports.
pub fn kubeconfig_data(secret: &Secret) -> &[u8] {
    secret
        .data
        .as_ref()
        .and_then(|data| data.get(KUBECONFIG_KEY))
        .map(|bytes| bytes.0.as_slice())
        .unwrap_or_default()
}

/// Why a peer is refused: the reason of the Event, and the reasons its note
/// starts with (also the `reason` label of
/// `clusterset_dns_controller_peers_refused_total`).
pub mod reason {
    /// The reason of the Warning Event on a refused peer's Secret.
    pub const PEER_REFUSED: &str = "PeerRefused";
    /// The Secret's kubeconfig cannot be used.
    pub const INVALID_KUBECONFIG: &str = "InvalidKubeconfig";
    /// The peer's id is not a DNS label.
    pub const INVALID_CLUSTER_ID: &str = "InvalidClusterId";
    /// The Secret points at this cluster.
    pub const SELF_REFERENCE: &str = "SelfReference";
    /// The peer belongs to another clusterset.
    pub const OTHER_CLUSTER_SET: &str = "OtherClusterSet";
    /// Another Secret names the same cluster.
    pub const DUPLICATE_CLUSTER_ID: &str = "DuplicateClusterId";
    /// The peer answers with an id other than the one it joined with (the
    /// Secret's [`super::ANNOTATION_CLUSTER_ID`], else the first id seen).
    pub const IDENTITY_CHANGED: &str = "IdentityChanged";
    /// The Secret's endpoint ranges do not parse.
    pub const INVALID_ENDPOINT_CIDRS: &str = "InvalidEndpointCidrs";
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;

    #[test]
    fn a_mesh_past_twenty_peers_is_pointed_to_a_hub() {
        assert_eq!(mesh_size_warning(0), None);
        assert_eq!(mesh_size_warning(MESH_SUITS_PEERS), None);
        let warning = mesh_size_warning(MESH_SUITS_PEERS + 1).unwrap();
        assert!(warning.starts_with("21 peers") && warning.contains("docs/hub.md"));
    }

    fn secret(labels: &[(&str, &str)], data: &[(&str, &[u8])]) -> Secret {
        let mut secret = Secret::default();
        secret.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        secret.data = Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                .collect::<BTreeMap<_, _>>(),
        );
        secret
    }

    #[test]
    fn the_selector_is_the_label_set_to_true() {
        assert_eq!(PEER_SELECTOR, format!("{PEER_LABEL}=true"));
        let selector: LabelSelector = PEER_SELECTOR.parse().unwrap();
        assert!(is_peer_secret(
            &secret(&[(PEER_LABEL, "true")], &[]),
            &selector
        ));
        assert!(!is_peer_secret(
            &secret(&[(PEER_LABEL, "false")], &[]),
            &selector
        ));
        assert!(!is_peer_secret(&secret(&[], &[]), &selector));
    }

    #[test]
    fn a_built_peer_secret_reads_back_as_written_and_matches_its_selector() {
        let selector: LabelSelector = "mesh=prod,tier in (gold)".parse().unwrap();
        let cidrs = ["10.1.0.0/16".to_owned(), "fd00:1::/64".to_owned()];
        let secret = NewPeerSecret {
            name: "peer-b",
            namespace: "mcs",
            labels: selector.labels_that_match().unwrap(),
            kubeconfig: b"yaml",
            cluster_id: Some("b"),
            token_secret: Some("mcs-b/anchor-1".into()),
            peer_namespace: Some("mcs-b"),
            endpoint_cidrs: &cidrs,
        }
        .build();
        assert!(is_peer_secret(&secret, &selector));
        let read = PeerSecret::read(&secret);
        assert_eq!(read.kubeconfig, b"yaml");
        assert_eq!(read.cluster_id.as_deref(), Some("b"));
        assert_eq!(read.namespace.as_deref(), Some("mcs-b"));
        assert_eq!(read.endpoint_ranges.unwrap().unwrap().len(), 2);
        assert_eq!(
            secret
                .annotations()
                .get(ANNOTATION_TOKEN_SECRET)
                .map(String::as_str),
            Some("mcs-b/anchor-1")
        );
        let bare = NewPeerSecret {
            name: "peer-c",
            namespace: "mcs",
            kubeconfig: b"yaml",
            ..NewPeerSecret::default()
        }
        .build();
        assert_eq!(bare.metadata.annotations, None);
        assert_eq!(PeerSecret::read(&bare).endpoint_ranges, Ok(None));
    }

    #[test]
    fn the_kubeconfig_is_read_from_its_key_only() {
        let s = secret(&[], &[(KUBECONFIG_KEY, b"yaml"), ("other", b"x")]);
        assert_eq!(kubeconfig_data(&s), b"yaml");
        let s = secret(&[], &[("config", b"yaml")]);
        assert!(kubeconfig_data(&s).is_empty());
        assert!(kubeconfig_data(&Secret::default()).is_empty());
    }

    #[test]
    fn a_peer_secret_is_read_with_its_pinned_id_and_endpoint_ranges() {
        let mut s = secret(&[(PEER_LABEL, "true")], &[(KUBECONFIG_KEY, b"yaml")]);
        assert_eq!(
            PeerSecret::read(&s),
            PeerSecret {
                kubeconfig: b"yaml".to_vec(),
                ..PeerSecret::default()
            }
        );
        s.metadata.annotations = Some(
            [
                (ANNOTATION_CLUSTER_ID.to_owned(), "b".to_owned()),
                (
                    ANNOTATION_ENDPOINT_CIDRS.to_owned(),
                    "10.1.0.0/16,fd00:1::/64".to_owned(),
                ),
            ]
            .into(),
        );
        let read = PeerSecret::read(&s);
        assert_eq!(read.cluster_id.as_deref(), Some("b"));
        assert_eq!(
            read.endpoint_ranges.unwrap().unwrap(),
            crate::cidr::parse_list("10.1.0.0/16,fd00:1::/64").unwrap()
        );
        s.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(ANNOTATION_ENDPOINT_CIDRS.to_owned(), "10.1.0.0".to_owned());
        let error = PeerSecret::read(&s).endpoint_ranges.unwrap_err();
        assert!(error.contains(ANNOTATION_ENDPOINT_CIDRS), "{error}");
    }
}
