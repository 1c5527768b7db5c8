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

/// Characters of the hash in a derived Service name: 50 bits, as in
/// mcs-api, so tools that know it find the same Service. A collision is
/// refused, never shared ([`super::reconcile`]: no slice is written for an
/// import whose derived name is taken).
const DERIVED_HASH_CHARS: usize = 10;

/// Characters of the hash that tells one service's slices apart: 100 bits,
/// so that a peer cannot search out a slice name that replaces another
/// cluster's (50 bits is a day of one GPU).
const SLICE_HASH_CHARS: usize = 20;

/// The first `chars` characters of the lower-case, unpadded base32hex
/// SHA-256 of `input`: mcs-api's hash, so our derived names equal theirs.
fn short_hash(input: &str, chars: usize) -> String {
    let mut encoded = BASE32HEX_NOPAD.encode(digest(&SHA256, input.as_bytes()).as_ref());
    encoded.truncate(chars);
    encoded.make_ascii_lowercase();
    encoded
}

/// Name of the derived Service of the ServiceImport `<namespace>/<name>`:
/// `derived-` and 10 hash characters, the mcs-api algorithm, so tools that
/// know the reference controller find the same Service.
pub fn derived_service_name(namespace: &str, name: &str) -> String {
    format!(
        "{DERIVED_PREFIX}{}",
        short_hash(&format!("{namespace}/{name}"), DERIVED_HASH_CHARS)
    )
}

/// Name of the MCS slice mirroring the Kubernetes slice `source_slice` of
/// Service `<namespace>/<service>` in `cluster`: the derived Service name,
/// `-`, and 20 hash characters of
/// `<cluster>/<namespace>/<service>/<source_slice>`.
///
/// The cluster is part of the hash because one namespace holds every
/// cluster's slices. A peer's copy of that slice is named by this function
/// again, with the peer's slice name as `source_slice`: a name a peer chose
/// only ever feeds the hash. The service is in it too, so that slices of
/// two services whose derived names collide still differ. The result is
/// always 39 characters of `[a-z0-9-]`, a valid DNS subdomain and label.
pub fn mirrored_slice_name(
    namespace: &str,
    service: &str,
    cluster: &str,
    source_slice: &str,
) -> String {
    format!(
        "{}-{}",
        derived_service_name(namespace, service),
        short_hash(
            &format!("{cluster}/{namespace}/{service}/{source_slice}"),
            SLICE_HASH_CHARS
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::limits::is_dns1123_label;

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
        assert_eq!(name.len(), 39);
        assert!(is_dns1123_label(&name));

        let long = "x".repeat(253);
        let name = mirrored_slice_name(&long[..63], &long[..63], &long[..63], &long);
        assert!(name.len() <= 63 && is_dns1123_label(&name));
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
        assert_ne!(
            a.rsplit('-').next(),
            mirrored_slice_name("demo", "other", "cluster-a", "serve-1")
                .rsplit('-')
                .next(),
            "the service is hashed too"
        );
    }
}
