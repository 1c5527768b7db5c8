//! The per-peer Lease: `clusterset-dns-peer-<peer id>` in the controller's
//! namespace, labelled [`LEASE_LABEL`]`=true`, annotated with the peer
//! Secret's name, renewed while the peer is healthy. A restarted controller
//! reads it to keep honouring the grace period; `peer list` shows it as
//! LAST SEEN.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

/// Prefix of a peer Lease's name; the peer's id follows.
pub const LEASE_PREFIX: &str = "clusterset-dns-peer-";
/// Label of the peer Leases (with the value `true`).
pub const LEASE_LABEL: &str = "clusterset-dns.io/peer-lease";
/// The label selector of peer Leases: [`LEASE_LABEL`]`=true`.
pub const LEASE_SELECTOR: &str = "clusterset-dns.io/peer-lease=true";
/// Annotation of a peer Lease naming the peer's Secret.
pub const LEASE_SECRET_ANNOTATION: &str = "clusterset-dns.io/peer-secret";

/// The name of the Lease of peer `peer_id`.
pub fn lease_name(peer_id: &str) -> String {
    format!("{LEASE_PREFIX}{peer_id}")
}

/// The peer id in a Lease name, if it is a peer Lease's.
pub fn peer_id(lease_name: &str) -> Option<&str> {
    lease_name
        .strip_prefix(LEASE_PREFIX)
        .filter(|id| !id.is_empty())
}

/// What a peer Lease records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerLease {
    /// The peer's cluster id.
    pub peer_id: String,
    /// The name of the peer's Secret.
    pub secret: String,
    /// When the peer was last seen healthy.
    pub renewed: Timestamp,
}

/// Why a Lease labelled as a peer Lease says nothing usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// The name is not `clusterset-dns-peer-<id>`.
    #[error("Lease {0}: the name is not {LEASE_PREFIX}<peer id>")]
    Name(String),
    /// No annotation names the peer's Secret.
    #[error("Lease {0}: no annotation {LEASE_SECRET_ANNOTATION}")]
    NoSecret(String),
    /// Never renewed.
    #[error("Lease {0}: no spec.renewTime")]
    NoRenewTime(String),
}

/// Reads a peer Lease back.
pub fn parse(lease: &Lease) -> Result<PeerLease, LeaseError> {
    let name = lease.name_any();
    let peer_id = peer_id(&name)
        .ok_or_else(|| LeaseError::Name(name.clone()))?
        .to_owned();
    let secret = lease
        .annotations()
        .get(LEASE_SECRET_ANNOTATION)
        .cloned()
        .ok_or_else(|| LeaseError::NoSecret(name.clone()))?;
    let renewed = lease
        .spec
        .as_ref()
        .and_then(|spec| spec.renew_time.as_ref())
        .map(|time| time.0)
        .ok_or(LeaseError::NoRenewTime(name))?;
    Ok(PeerLease {
        peer_id,
        secret,
        renewed,
    })
}

/// The Lease recording that peer `peer_id` of Secret `secret` was seen
/// healthy at `seen`, held by this cluster (`holder`), for `grace`.
pub fn lease(
    namespace: &str,
    peer_id: &str,
    secret: &str,
    holder: &str,
    grace: Duration,
    seen: SystemTime,
) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(lease_name(peer_id)),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                LEASE_LABEL.to_owned(),
                "true".to_owned(),
            )])),
            annotations: Some(BTreeMap::from([(
                LEASE_SECRET_ANNOTATION.to_owned(),
                secret.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(grace.as_secs().min(i32::MAX as u64) as i32),
            renew_time: Timestamp::try_from(seen).ok().map(MicroTime),
            ..LeaseSpec::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEEN: Duration = Duration::from_secs(1_700_000_000);

    fn written() -> Lease {
        lease(
            "clusterset-dns",
            "cluster-b",
            "peer-b",
            "cluster-a",
            Duration::from_secs(300),
            SystemTime::UNIX_EPOCH + SEEN,
        )
    }

    #[test]
    fn names_and_ids_round_trip() {
        assert_eq!(lease_name("cluster-b"), "clusterset-dns-peer-cluster-b");
        assert_eq!(peer_id(&lease_name("cluster-b")), Some("cluster-b"));
        assert_eq!(peer_id("clusterset-dns-peer-"), None);
        assert_eq!(peer_id("clusterset-dns-leader"), None);
        assert_eq!(LEASE_SELECTOR, format!("{LEASE_LABEL}=true"));
    }

    #[test]
    fn a_written_lease_parses_back() {
        let lease = written();
        assert_eq!(
            lease.labels().get(LEASE_LABEL).map(String::as_str),
            Some("true")
        );
        assert_eq!(
            parse(&lease),
            Ok(PeerLease {
                peer_id: "cluster-b".into(),
                secret: "peer-b".into(),
                renewed: Timestamp::from_second(SEEN.as_secs() as i64).unwrap(),
            })
        );
        let spec = lease.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("cluster-a"));
        assert_eq!(spec.lease_duration_seconds, Some(300));
    }

    #[test]
    fn a_malformed_lease_says_what_is_missing() {
        let mut renamed = written();
        renamed.metadata.name = Some("clusterset-dns-leader".into());
        assert_eq!(
            parse(&renamed).unwrap_err().to_string(),
            "Lease clusterset-dns-leader: the name is not clusterset-dns-peer-<peer id>"
        );
        let mut anonymous = written();
        anonymous.metadata.annotations = None;
        assert_eq!(
            parse(&anonymous).unwrap_err().to_string(),
            "Lease clusterset-dns-peer-cluster-b: no annotation clusterset-dns.io/peer-secret"
        );
        let mut unrenewed = written();
        unrenewed.spec.as_mut().unwrap().renew_time = None;
        assert_eq!(
            parse(&unrenewed).unwrap_err().to_string(),
            "Lease clusterset-dns-peer-cluster-b: no spec.renewTime"
        );
        let mut specless = written();
        specless.spec = None;
        assert!(matches!(parse(&specless), Err(LeaseError::NoRenewTime(_))));
    }
}
