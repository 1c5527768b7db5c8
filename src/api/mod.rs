//! Kubernetes types of the Multi-Cluster Services API and their CRDs.
//!
//! # Layout
//!
//! - `service_import`, `service_export` (`multicluster.x-k8s.io`) and
//!   `cluster_property` (`about.k8s.io`): the custom resources, each in the
//!   two API versions `v1alpha1` and `v1beta1`. Both versions of a kind have
//!   identical schemas; v1beta1 is the storage version.
//! - [`v1alpha1`], [`v1beta1`]: every kind of one API version. The v1beta1
//!   types are also re-exported here, so `api::ServiceImport` is
//!   `api::v1beta1::ServiceImport`. Objects convert between versions with
//!   `From`.
//! - [`published_service`] (`clusterset-dns.io`): what a controller
//!   publishes to its peers about each exported Service.
//! - [`well_known`]: label, annotation, property, condition and group names.
//! - [`crds`]: the merged multi-version CRDs and their YAML rendering.
//! - [`install`]: `crds install`, a server-side apply that never downgrades
//!   a newer mcs-api CRD bundle.
//! - [`limits`]: the CRD and apiserver limits both sources check objects
//!   against.
//! - [`service_rules`]: the apiserver's Service field rules, which every
//!   export is held to before it is merged.
//! - [`locality`]: which imports are local-first (`trafficDistribution`).
//! - [`stripped`]: objects decoded with only what their reader keeps (the
//!   DNS source's and the controller's watches, the controller's writes).
//!
//! Apart from [`install`], this module only describes data: no client, no
//! reconciliation. Field
//! types follow the Go API (`omitempty` lists and maps are empty
//! collections that are skipped when serializing; optional scalars and
//! objects are `Option`s). Unknown fields are ignored when deserializing, so
//! objects written against a newer schema still load; the manifest source
//! rejects them itself, as `kubectl apply` would.

/// Implements `From` in both directions between the `v1alpha1` and
/// `v1beta1` versions of a kind and its spec, in the module that invokes it.
///
/// The versions have identical schemas, so conversion moves every field.
/// The spec is destructured without `..`, so a field added to the spec but
/// not listed in the invocation is a compile error.
macro_rules! convert_between_versions {
    ($kind:ident, $spec:ident { $($field:ident),+ $(,)? }) => {
        convert_between_versions!(@one v1alpha1 => v1beta1, $kind, $spec { $($field),+ });
        convert_between_versions!(@one v1beta1 => v1alpha1, $kind, $spec { $($field),+ });
    };
    (@one $from:ident => $to:ident, $kind:ident, $spec:ident { $($field:ident),+ }) => {
        impl From<$from::$spec> for $to::$spec {
            fn from(spec: $from::$spec) -> Self {
                let $from::$spec { $($field),+ } = spec;
                Self { $($field),+ }
            }
        }

        impl From<$from::$kind> for $to::$kind {
            fn from(object: $from::$kind) -> Self {
                Self {
                    metadata: object.metadata,
                    spec: object.spec.into(),
                    status: object.status,
                }
            }
        }
    };
}

mod cluster_property;
pub mod crds;
pub mod install;
pub mod limits;
pub mod locality;
pub mod published_service;
mod service_export;
mod service_import;
mod service_ref;
pub mod service_rules;
pub mod stripped;
pub mod well_known;

/// Every kind at API version `v1alpha1`: served for older clients (CoreDNS
/// still lists `ServiceImport`s at this version), not stored.
pub mod v1alpha1 {
    pub use super::cluster_property::v1alpha1::*;
    pub use super::service_export::v1alpha1::*;
    pub use super::service_import::v1alpha1::*;
}

/// Every kind at API version `v1beta1`, the storage version.
pub mod v1beta1 {
    pub use super::cluster_property::v1beta1::*;
    pub use super::service_export::v1beta1::*;
    pub use super::service_import::v1beta1::*;
}

pub use published_service::{
    PublishedExport, PublishedPort, PublishedService, PublishedServiceSpec,
};
pub use service_ref::ServiceRef;
pub use v1beta1::{
    ClusterProperty, ClusterPropertySpec, ClusterPropertyStatus, ClusterStatus,
    EndpointSliceObjects, ServiceExport, ServiceExportSpec, ServiceExportStatus, ServiceImport,
    ServiceImportSpec, ServiceImportStatus, ServiceImportType, ServicePort,
};

/// The body of a server-side apply of `object`: the object as JSON with
/// its `apiVersion` and `kind`, which an apply needs and which every write
/// of the controller and of `peer` sends through here.
pub fn apply_body<K>(object: &K) -> Result<serde_json::Value, serde_json::Error>
where
    K: kube::Resource<DynamicType = ()> + serde::Serialize,
{
    let mut body = serde_json::to_value(object)?;
    body["apiVersion"] = K::api_version(&()).into();
    body["kind"] = K::kind(&()).into();
    Ok(body)
}
