//! Which objects of this cluster are ours, and the one rule every write
//! follows (issue 31).
//!
//! - An object is **ours** when it carries our managed-by label and, unless
//!   it is a ServiceImport, a controller owner reference to the
//!   ServiceImport of its service ([`owns`]).
//! - A write to an object shown to be ours names its uid ([`claim`]): it is
//!   force-applied, and the uid in the body is a precondition the apiserver
//!   checks, so the write reaches that object and no other (one deleted or
//!   replaced since is a conflict, never a takeover).
//! - Any other write is a plain apply, not forced: it creates the object, or
//!   fails on the first field another manager holds. Whatever is then found
//!   under that name is read back and refused unless it is ours
//!   ([`NOT_OURS`]): the controller never writes over an object it does not
//!   own.

use kube::Resource;

use super::cluster::is_ours;
use super::publication::PUBLISHED_BY;
use crate::api::ServiceImport;
use crate::api::ServiceRef;
use crate::api::well_known::LABEL_MANAGED_BY;

/// The kinds the controller writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Kind {
    /// `multicluster.x-k8s.io` ServiceImport.
    ServiceImport,
    /// ServiceImport status.
    ServiceImportStatus,
    /// A derived Service.
    Service,
    /// An MCS EndpointSlice.
    EndpointSlice,
    /// ServiceExport status.
    ServiceExportStatus,
    /// A PublishedService (this cluster's publication).
    PublishedService,
    /// A published EndpointSlice (this cluster's publication).
    PublishedSlice,
}

impl Kind {
    /// The object kind, as Kubernetes names it.
    pub(super) fn object_kind(self) -> &'static str {
        match self {
            Self::ServiceImport | Self::ServiceImportStatus => "ServiceImport",
            Self::Service => "Service",
            Self::EndpointSlice | Self::PublishedSlice => "EndpointSlice",
            Self::ServiceExportStatus => "ServiceExport",
            Self::PublishedService => "PublishedService",
        }
    }

    /// The metric label value.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::ServiceImport => "serviceimport",
            Self::ServiceImportStatus => "serviceimport_status",
            Self::Service => "service",
            Self::EndpointSlice => "endpointslice",
            Self::ServiceExportStatus => "serviceexport_status",
            Self::PublishedService => "publishedservice",
            Self::PublishedSlice => "published_endpointslice",
        }
    }
}

/// Reason of a write refused because an object not ours holds the name
/// (`clusterset_dns_controller_refused_total{reason}`, the Event's reason
/// note).
pub(super) const NOT_OURS: &str = "NotOurs";

/// Whether `object`, of `kind`, belonging to `service`, is ours to write.
pub(super) fn owns(kind: Kind, object: &impl Resource, service: &ServiceRef) -> bool {
    match kind {
        Kind::ServiceImport | Kind::ServiceImportStatus => is_ours(object),
        Kind::Service | Kind::EndpointSlice => is_ours(object) && owned_by_import(object, service),
        // The export is the user's; only its status conditions are ours.
        Kind::ServiceExportStatus => true,
        Kind::PublishedService => is_ours(object),
        Kind::PublishedSlice => object
            .meta()
            .labels
            .as_ref()
            .and_then(|labels| labels.get(LABEL_MANAGED_BY))
            .is_some_and(|by| by == PUBLISHED_BY),
    }
}

/// Whether `object` has a controller owner reference to the ServiceImport
/// of `service`.
fn owned_by_import(object: &impl Resource, service: &ServiceRef) -> bool {
    let group = ServiceImport::group(&());
    let kind = ServiceImport::kind(&());
    // Any version of the group: an owner written before an API version
    // change is still our import.
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .any(|owner| {
            owner.controller == Some(true)
                && owner.kind == kind
                && owner.api_version.split('/').next() == Some(&*group)
                && owner.name == *service.name
        })
}

/// Marks `desired` as a write to `live` (an object shown to be ours): its
/// uid becomes the write's precondition. Without a live object the write
/// stays a create.
pub(super) fn claim<K: Resource>(desired: &mut K, live: Option<&K>) {
    desired.meta_mut().uid = live.and_then(|live| live.meta().uid.clone());
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    use super::*;
    use crate::controller::naming::MANAGED_BY;

    fn slice(labelled: bool, owner: Option<(&str, &str, bool)>) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                labels: labelled
                    .then(|| [(LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned())].into()),
                owner_references: owner.map(|(kind, name, controller)| {
                    vec![OwnerReference {
                        api_version: "multicluster.x-k8s.io/v1alpha1".into(),
                        kind: kind.into(),
                        name: name.into(),
                        uid: "u".into(),
                        controller: Some(controller),
                        block_owner_deletion: None,
                    }]
                }),
                ..ObjectMeta::default()
            },
            ..EndpointSlice::default()
        }
    }

    #[test]
    fn a_slice_is_ours_only_with_our_label_and_our_import_as_its_controller() {
        let web = ServiceRef::new("demo", "web");
        let ours = slice(true, Some(("ServiceImport", "web", true)));
        assert!(owns(Kind::EndpointSlice, &ours, &web));
        for (what, other) in [
            (
                "no label",
                slice(false, Some(("ServiceImport", "web", true))),
            ),
            ("no owner", slice(true, None)),
            (
                "another import",
                slice(true, Some(("ServiceImport", "db", true))),
            ),
            ("another kind", slice(true, Some(("Service", "web", true)))),
            (
                "not the controller",
                slice(true, Some(("ServiceImport", "web", false))),
            ),
        ] {
            assert!(!owns(Kind::EndpointSlice, &other, &web), "{what}");
        }
        // An import needs only the label: it owns the rest.
        assert!(owns(Kind::ServiceImport, &slice(true, None), &web));
        assert!(!owns(Kind::ServiceImport, &slice(false, None), &web));
    }

    #[test]
    fn a_claim_carries_the_live_uid_or_none() {
        let mut desired = slice(true, None);
        let mut live = slice(true, None);
        live.metadata.uid = Some("uid-1".into());
        claim(&mut desired, Some(&live));
        assert_eq!(desired.metadata.uid.as_deref(), Some("uid-1"));
        claim(&mut desired, None);
        assert_eq!(desired.metadata.uid, None);
    }
}
