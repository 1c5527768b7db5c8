//! `ClusterProperty` (`about.k8s.io`, KEP-2149): one named, cluster-scoped
//! string about this cluster, such as its cluster id
//! ([`CLUSTER_ID_PROPERTY`](super::well_known::CLUSTER_ID_PROPERTY)).
//!
//! Owns the spec/status types of both API versions, stamped from
//! [`cluster_property_version!`] like `ServiceImport`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// The type exists only so the CRD declares the status subresource, as
// upstream does.
/// Observed state of a ClusterProperty. The API defines no status fields.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ClusterPropertyStatus {}

/// Emits the `ClusterProperty` custom resource for one API version.
///
/// See `service_import_version!` for why each version gets its own spec type.
macro_rules! cluster_property_version {
    ($version:tt, served: $served:tt, storage: $storage:tt) => {
        use kube::CustomResource;
        use schemars::JsonSchema;
        use serde::{Deserialize, Serialize};

        pub use super::ClusterPropertyStatus;

        /// The value of a cluster property. The property name is the object's
        /// metadata.name.
        #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
        #[kube(
            group = "about.k8s.io",
            version = $version,
            kind = "ClusterProperty",
            plural = "clusterproperties",
            served = $served,
            storage = $storage,
            status = "ClusterPropertyStatus",
            derive = "PartialEq",
            category = "multicluster",
            doc = "ClusterProperty stores one named, cluster-scoped piece of information for multi-cluster tools. The property name is metadata.name.",
            printcolumn(name = "value", type_ = "string", json_path = ".spec.value"),
            printcolumn(name = "age", type_ = "date", json_path = ".metadata.creationTimestamp")
        )]
        pub struct ClusterPropertySpec {
            /// The property-dependent value, up to 128k Unicode code points.
            #[schemars(length(min = 1))]
            pub value: String,
        }
    };
}

/// `ClusterProperty` at `about.k8s.io/v1alpha1` (served, not stored).
pub(super) mod v1alpha1 {
    cluster_property_version!("v1alpha1", served: true, storage: false);
}

/// `ClusterProperty` at `about.k8s.io/v1beta1` (served and stored).
pub(super) mod v1beta1 {
    cluster_property_version!("v1beta1", served: true, storage: true);
}

convert_between_versions!(ClusterProperty, ClusterPropertySpec { value });

#[cfg(test)]
mod tests {
    use kube::Resource;

    use super::*;
    use crate::api::well_known::CLUSTER_ID_PROPERTY;

    #[test]
    fn cluster_id_property_deserializes() {
        let property: v1beta1::ClusterProperty = serde_saphyr::from_str(
            "apiVersion: about.k8s.io/v1beta1
kind: ClusterProperty
metadata:
  name: cluster.clusterset.k8s.io
spec:
  value: 721ab723-13bc-11e5-aec2-42010af0021e
",
        )
        .unwrap();

        assert_eq!(property.metadata.name.as_deref(), Some(CLUSTER_ID_PROPERTY));
        assert_eq!(property.spec.value, "721ab723-13bc-11e5-aec2-42010af0021e");
    }

    #[test]
    fn cluster_property_is_cluster_scoped_at_both_versions() {
        // `Api::namespaced` only compiles for namespaced scopes, so the
        // scope type is what keeps callers from asking for a namespace.
        fn is_cluster_scoped<K: Resource<Scope = kube::core::ClusterResourceScope>>() {}
        is_cluster_scoped::<v1alpha1::ClusterProperty>();
        is_cluster_scoped::<v1beta1::ClusterProperty>();
        assert_eq!(v1beta1::ClusterProperty::plural(&()), "clusterproperties");
    }

    #[test]
    fn v1alpha1_property_converts_to_v1beta1() {
        let alpha = v1alpha1::ClusterProperty::new(
            CLUSTER_ID_PROPERTY,
            v1alpha1::ClusterPropertySpec {
                value: "cluster-a".into(),
            },
        );

        let beta = v1beta1::ClusterProperty::from(alpha);
        assert_eq!(beta.spec.value, "cluster-a");
        assert_eq!(beta.metadata.name.as_deref(), Some(CLUSTER_ID_PROPERTY));
    }
}
