//! `ServiceExport` (`multicluster.x-k8s.io`): marks the same-named `Service`
//! in its namespace for export to the ClusterSet.
//!
//! Owns the spec/status types of both API versions, stamped from
//! [`service_export_version!`] like `ServiceImport`. Most real exports have
//! no `spec` at all, so the spec deserializes a missing or null `spec` as
//! empty instead of failing the object (and with it a whole watch list).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// Shared by both API versions: only the spec needs a type per version.
/// Observed state of a ServiceExport, written by the multi-cluster services
/// controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExportStatus {
    /// The current state of the export (Valid, Ready, Conflict).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["type"],
    ))]
    pub conditions: Vec<Condition>,
}

/// Emits the `ServiceExport` custom resource for one API version.
///
/// See `service_import_version!` for why each version gets its own spec type.
macro_rules! service_export_version {
    ($version:tt, served: $served:tt, storage: $storage:tt) => {
        use std::collections::BTreeMap;

        use kube::CustomResource;
        use schemars::JsonSchema;
        use serde::{Deserialize, Deserializer, Serialize};

        pub use super::ServiceExportStatus;

        /// What to export besides the Service itself. Optional; most exports
        /// have no spec.
        #[derive(CustomResource, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
        #[kube(
            group = "multicluster.x-k8s.io",
            version = $version,
            kind = "ServiceExport",
            namespaced,
            served = $served,
            storage = $storage,
            status = "ServiceExportStatus",
            derive = "PartialEq",
            derive = "Default",
            shortname = "svcex",
            shortname = "svcexport",
            category = "multicluster",
            doc = "ServiceExport declares that the Service with the same name and namespace as this export should be consumable from other clusters.",
            printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
        )]
        #[serde(rename_all = "camelCase")]
        pub struct ServiceExportSpec {
            /// Labels to put on the ServiceImport. Labels are never taken
            /// from the metadata of the Service or the ServiceExport.
            #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
            pub exported_labels: BTreeMap<String, String>,

            /// Annotations to put on the ServiceImport. Annotations are
            /// never taken from the metadata of the Service or the
            /// ServiceExport.
            #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
            pub exported_annotations: BTreeMap<String, String>,
        }

        impl<'de> Deserialize<'de> for ServiceExportSpec {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                // Going through `Option` matters: when the root object has
                // no `spec`, serde's missing-field path asks for an option
                // and gets `None`, which becomes an empty spec. `null` maps
                // read as empty, as they do in Go. `Wire` mirrors the fields
                // above; the round-trip tests catch any drift.
                #[derive(Deserialize)]
                #[serde(rename_all = "camelCase")]
                struct Wire {
                    exported_labels: Option<BTreeMap<String, String>>,
                    exported_annotations: Option<BTreeMap<String, String>>,
                }

                let wire = Option::<Wire>::deserialize(deserializer)?;
                Ok(wire.map_or_else(Self::default, |wire| Self {
                    exported_labels: wire.exported_labels.unwrap_or_default(),
                    exported_annotations: wire.exported_annotations.unwrap_or_default(),
                }))
            }
        }
    };
}

/// `ServiceExport` at `multicluster.x-k8s.io/v1alpha1` (served, not stored).
pub(super) mod v1alpha1 {
    service_export_version!("v1alpha1", served: true, storage: false);
}

/// `ServiceExport` at `multicluster.x-k8s.io/v1beta1` (served and stored).
pub(super) mod v1beta1 {
    service_export_version!("v1beta1", served: true, storage: true);
}

convert_between_versions!(
    ServiceExport,
    ServiceExportSpec {
        exported_labels,
        exported_annotations,
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::well_known::{export_condition, export_reason};

    fn parse<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn export_without_spec_deserializes_as_empty_spec() {
        let export: v1beta1::ServiceExport = parse(
            "apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata:
  name: hello
  namespace: demo
",
        );

        assert_eq!(export.spec, v1beta1::ServiceExportSpec::default());
        assert_eq!(export.status, None);
    }

    #[test]
    fn export_with_null_spec_and_null_maps_deserializes_as_empty_spec() {
        let export: v1alpha1::ServiceExport = serde_json::from_value(serde_json::json!({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1",
            "kind": "ServiceExport",
            "metadata": { "name": "hello" },
            "spec": null,
        }))
        .unwrap();
        assert_eq!(export.spec, v1alpha1::ServiceExportSpec::default());

        let spec: v1alpha1::ServiceExportSpec =
            serde_json::from_value(serde_json::json!({ "exportedLabels": null })).unwrap();
        assert_eq!(spec, v1alpha1::ServiceExportSpec::default());
    }

    #[test]
    fn export_with_exported_metadata_and_conditions_round_trips() {
        let yaml = r#"
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata:
  name: hello
  namespace: demo
spec:
  exportedLabels:
    dummy-label: value
  exportedAnnotations:
    dummy-annotation: value
status:
  conditions:
  - type: Valid
    status: "True"
    reason: Valid
    message: ""
    lastTransitionTime: "2026-05-26T10:00:00Z"
  - type: Conflict
    status: "True"
    reason: PortConflict,TypeConflict
    message: Conflicting type. Using "ClusterSetIP" from oldest service export in "cluster-1".
    lastTransitionTime: "2026-05-26T10:00:01Z"
"#;
        let export: v1beta1::ServiceExport = parse(yaml);

        assert_eq!(export.spec.exported_labels["dummy-label"], "value");
        assert_eq!(
            export.spec.exported_annotations["dummy-annotation"],
            "value"
        );
        let conditions = &export.status.as_ref().unwrap().conditions;
        assert_eq!(conditions[0].type_, export_condition::VALID);
        assert_eq!(conditions[0].reason, export_reason::VALID);
        assert_eq!(conditions[1].type_, export_condition::CONFLICT);
        assert_eq!(
            conditions[1].reason,
            [export_reason::PORT_CONFLICT, export_reason::TYPE_CONFLICT].join(",")
        );
        assert_eq!(
            serde_json::to_value(&export).unwrap(),
            parse::<serde_json::Value>(yaml)
        );
    }

    #[test]
    fn empty_spec_serializes_as_empty_object() {
        let export = v1beta1::ServiceExport::new("hello", Default::default());

        assert_eq!(
            serde_json::to_value(&export).unwrap()["spec"],
            serde_json::json!({})
        );
    }

    #[test]
    fn v1beta1_export_converts_to_v1alpha1_and_back_unchanged() {
        let mut beta = v1beta1::ServiceExport::new("hello", Default::default());
        beta.spec
            .exported_labels
            .insert("team".into(), "dns".into());

        let alpha = v1alpha1::ServiceExport::from(beta.clone());
        assert_eq!(alpha.spec.exported_labels, beta.spec.exported_labels);
        assert_eq!(v1beta1::ServiceExport::from(alpha), beta);
    }
}
