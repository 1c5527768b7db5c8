//! Names the controller gives the objects it creates, and the labels,
//! annotations and field manager it marks them with.
//!
//! Names are deterministic hashes rather than `generateName`: every cluster
//! must arrive at the same name for the same source without talking to the
//! others, and a create retried after a lost response must hit the object
//! it already made instead of creating a twin.

use data_encoding::BASE32HEX_NOPAD;
use ring::digest::{SHA256, digest};

/// Server-side apply field manager of every write the controller makes.
pub const FIELD_MANAGER: &str = "clusterset-dns-controller";

/// Value of `endpointslice.kubernetes.io/managed-by` on the MCS slices the
/// controller writes and of [`LABEL_APP_MANAGED_BY`] on derived Services.
/// Peers select slices to copy by it, and it keeps the built-in EndpointSlice
/// controller from claiming them.
pub const MANAGED_BY: &str = "controller.clusterset-dns.io";

/// Label marking a derived Service as ours ([`MANAGED_BY`]), so a user's
/// Service that happens to have the derived name is never taken over.
pub const LABEL_APP_MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// Annotation on an MCS slice: `<namespace>/<name>` of the slice it was
/// made from (the Kubernetes EndpointSlice a mirror copies, or the peer's
/// mirrored slice a copy copies), so a slice whose source is gone can be
/// found and deleted.
pub const ANNOTATION_SOURCE_SLICE: &str = "clusterset-dns.io/source-slice";

/// Prefix of every derived Service name (mcs-api's `derivedName`).
const DERIVED_PREFIX: &str = "derived-";

/// Characters of the hash kept in a name: 50 bits, as in mcs-api.
const HASH_CHARS: usize = 10;

/// The first [`HASH_CHARS`] characters of the lower-case, unpadded base32hex
/// SHA-256 of `input`: mcs-api's hash, so our derived names equal theirs.
fn short_hash(input: &str) -> String {
    let mut encoded = BASE32HEX_NOPAD.encode(digest(&SHA256, input.as_bytes()).as_ref());
    encoded.truncate(HASH_CHARS);
    encoded.make_ascii_lowercase();
    encoded
}

/// Name of the derived Service of the ServiceImport `<namespace>/<name>`:
/// `derived-` and 10 hash characters, the mcs-api algorithm, so tools that
/// know the reference controller find the same Service.
pub fn derived_service_name(namespace: &str, name: &str) -> String {
    format!(
        "{DERIVED_PREFIX}{}",
        short_hash(&format!("{namespace}/{name}"))
    )
}

/// Name of the MCS slice mirroring the Kubernetes slice `source_slice` of
/// Service `<namespace>/<service>` in `cluster`: the derived Service name,
/// `-`, and 10 hash characters of `<cluster>/<namespace>/<source_slice>`.
///
/// The cluster is part of the hash because one namespace holds every
/// cluster's slices. A peer's copy of that slice is named by this function
/// again, with the peer's slice name as `source_slice`: a name a peer chose
/// only ever feeds the hash. The result
/// is always 29 characters of `[a-z0-9-]`, a valid DNS subdomain and label.
pub fn mirrored_slice_name(
    namespace: &str,
    service: &str,
    cluster: &str,
    source_slice: &str,
) -> String {
    format!(
        "{}-{}",
        derived_service_name(namespace, service),
        short_hash(&format!("{cluster}/{namespace}/{source_slice}"))
    )
}

/// True for an RFC 1123 label as Kubernetes checks it (`IsDNS1123Label`):
/// 1–63 characters of `[a-z0-9-]`, starting and ending alphanumeric.
///
/// Stricter than [`crate::model::is_dns_label`], which accepts upper case
/// because DNS matching is case-insensitive; a cluster id goes into label
/// values and object names, where upper case is rejected.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| ok(c) || *c == b'-')
        && ok(&b[0])
        && ok(&b[b.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names_match_mcs_api_golden_values() {
        assert_eq!(derived_service_name("demo", "serve"), "derived-ovtkn0laet");
        assert_eq!(
            derived_service_name("default", "hello"),
            "derived-k5cuvo1ge4"
        );
        assert_eq!(
            derived_service_name("my-ns", "my-svc"),
            "derived-a2v4k9sqn6"
        );
    }

    #[test]
    fn mirrored_slice_name_is_stable_short_and_a_dns_label() {
        let name = mirrored_slice_name("demo", "serve", "cluster-a", "serve-abc12");
        assert_eq!(
            name,
            mirrored_slice_name("demo", "serve", "cluster-a", "serve-abc12")
        );
        assert!(name.starts_with("derived-ovtkn0laet-"));
        assert_eq!(name.len(), 29);
        assert!(is_dns_label(&name));

        let long = "x".repeat(253);
        let name = mirrored_slice_name(&long[..63], &long[..63], &long[..63], &long);
        assert!(name.len() <= 63 && is_dns_label(&name));
    }

    #[test]
    fn mirrored_slice_name_differs_by_cluster_and_source_slice() {
        let a = mirrored_slice_name("demo", "serve", "cluster-a", "serve-1");
        assert_ne!(
            a,
            mirrored_slice_name("demo", "serve", "cluster-b", "serve-1")
        );
        assert_ne!(
            a,
            mirrored_slice_name("demo", "serve", "cluster-a", "serve-2")
        );
    }

    #[test]
    fn dns_labels_are_lower_case_alnum_and_dashes_inside() {
        for ok in ["a", "cluster-1", "0", &"a".repeat(63)] {
            assert!(is_dns_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "Cluster", "a.b", "a_b", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
    }
}
