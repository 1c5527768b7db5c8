//! The controller's objects as its watches decode them: only the fields a
//! decision reads. `managedFields`, Service annotations (often the whole
//! object again, in `kubectl.kubernetes.io/last-applied-configuration`) and
//! status, and the slice fields that name objects of the source cluster
//! (node names, target references, hints) are skipped by the JSON parser
//! without being built. A list page of thousands of objects is then a
//! fraction of the memory and of the decoding work it was (the DNS
//! server's source does the same for its slices, `crate::source::stripped`).
//!
//! Each [`Lean`] type is the `k8s-openapi` (or our CRD) type itself with the
//! skipped fields unset, so the rest of the controller reads the usual
//! types.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use serde::{Deserialize, Deserializer};

use crate::api::{
    ServiceExport, ServiceExportSpec, ServiceExportStatus, ServiceImport, ServiceImportSpec,
    ServiceImportStatus,
};

/// An object of kind `K` decoded without the fields no decision reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Lean<K>(pub K);

/// Object metadata without `managedFields` (and, for [`LeanMeta::annotations`]
/// = `false` kinds, without annotations).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta<A> {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    annotations: A,
    owner_references: Option<Vec<OwnerReference>>,
}

/// Annotations kept.
type Kept = Option<BTreeMap<String, String>>;

/// Annotations skipped: any JSON value is consumed without being built.
#[derive(Default)]
struct Skipped;

impl<'de> Deserialize<'de> for Skipped {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(deserializer)?;
        Ok(Skipped)
    }
}

trait Annotations {
    fn into_annotations(self) -> Option<BTreeMap<String, String>>;
}

impl Annotations for Kept {
    fn into_annotations(self) -> Option<BTreeMap<String, String>> {
        self
    }
}

impl Annotations for Skipped {
    fn into_annotations(self) -> Option<BTreeMap<String, String>> {
        None
    }
}

impl<A: Annotations> From<Meta<A>> for ObjectMeta {
    fn from(meta: Meta<A>) -> Self {
        ObjectMeta {
            name: meta.name,
            namespace: meta.namespace,
            uid: meta.uid,
            resource_version: meta.resource_version,
            generation: meta.generation,
            creation_timestamp: meta.creation_timestamp,
            deletion_timestamp: meta.deletion_timestamp,
            labels: meta.labels,
            annotations: meta.annotations.into_annotations(),
            owner_references: meta.owner_references,
            ..ObjectMeta::default()
        }
    }
}

impl<'de> Deserialize<'de> for Lean<ServiceExport> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            metadata: Meta<Kept>,
            #[serde(default)]
            spec: ServiceExportSpec,
            status: Option<ServiceExportStatus>,
        }
        let raw = Raw::deserialize(deserializer)?;
        let mut export = ServiceExport::new("", raw.spec);
        export.metadata = raw.metadata.into();
        export.status = raw.status;
        Ok(Self(export))
    }
}

impl<'de> Deserialize<'de> for Lean<ServiceImport> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            metadata: Meta<Kept>,
            spec: ServiceImportSpec,
            status: Option<ServiceImportStatus>,
        }
        let raw = Raw::deserialize(deserializer)?;
        let mut import = ServiceImport::new("", raw.spec);
        import.metadata = raw.metadata.into();
        import.status = raw.status;
        Ok(Self(import))
    }
}

impl<'de> Deserialize<'de> for Lean<Service> {
    /// The merge reads the spec (exported labels and annotations come from
    /// the ServiceExport), the plan our derived Services' spec, labels and
    /// owner references.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            metadata: Meta<Skipped>,
            spec: Option<ServiceSpec>,
        }
        let raw = Raw::deserialize(deserializer)?;
        Ok(Self(Service {
            metadata: raw.metadata.into(),
            spec: raw.spec,
            status: None,
        }))
    }
}

impl<'de> Deserialize<'de> for Lean<EndpointSlice> {
    /// Slices are mirrored and copied with addresses, conditions, hostname
    /// and zone only.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct LeanEndpoint {
            #[serde(default)]
            addresses: Vec<String>,
            conditions: Option<EndpointConditions>,
            hostname: Option<String>,
            zone: Option<String>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Raw {
            metadata: Meta<Kept>,
            #[serde(default)]
            address_type: String,
            endpoints: Option<Vec<LeanEndpoint>>,
            ports: Option<Vec<EndpointPort>>,
        }
        let raw = Raw::deserialize(deserializer)?;
        let endpoints = raw
            .endpoints
            .unwrap_or_default()
            .into_iter()
            .map(|mut e| Endpoint {
                // A decoded Vec grows by doubling (four slots for one
                // address): thousands of slices make the slack count.
                addresses: {
                    e.addresses.shrink_to_fit();
                    e.addresses
                },
                conditions: e.conditions,
                hostname: e.hostname,
                zone: e.zone,
                ..Endpoint::default()
            })
            .collect();
        Ok(Self(EndpointSlice {
            metadata: raw.metadata.into(),
            address_type: raw.address_type,
            endpoints,
            ports: raw.ports,
        }))
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Lean<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// Metadata as the apiserver sends it, with the fields we skip.
    fn metadata(name: &str) -> Value {
        json!({
            "name": name, "namespace": "shop", "uid": "0d9c3a6e-9a1b-4f0e-8c55-1f2e3d4c5b6a",
            "resourceVersion": "42", "generation": 3,
            "creationTimestamp": "2026-12-01T06:00:00Z",
            "labels": {"app": "web", "multicluster.kubernetes.io/service-name": "web"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"a\":1}"},
            "ownerReferences": [{"apiVersion": "multicluster.x-k8s.io/v1beta1",
                "kind": "ServiceImport", "name": "web", "uid": "u-1"}],
            "finalizers": ["example.com/keep"],
            "managedFields": [{"manager": "kubectl", "operation": "Update",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:ports": {}}}}]
        })
    }

    /// The full decode with what [`Lean`] leaves out cleared by hand.
    fn full<K: serde::de::DeserializeOwned + Resource>(value: &Value) -> K {
        let mut object: K = serde_json::from_value(value.clone()).unwrap();
        let meta = object.meta_mut();
        assert!(
            meta.managed_fields.is_some(),
            "the fixture has managedFields"
        );
        meta.managed_fields = None;
        meta.finalizers = None;
        object
    }

    fn lean<K>(value: &Value) -> K
    where
        Lean<K>: serde::de::DeserializeOwned,
    {
        serde_json::from_value::<Lean<K>>(value.clone()).unwrap().0
    }

    #[test]
    fn a_service_keeps_metadata_and_spec_but_not_annotations_or_status() {
        let value = json!({
            "apiVersion": "v1", "kind": "Service", "metadata": metadata("web"),
            "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
                "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
                "selector": {"app": "web"}},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}
        });
        let mut expected: Service = full(&value);
        expected.metadata.annotations = None;
        expected.status = None;
        let service: Service = lean(&value);
        assert_eq!(service, expected);
        assert!(service.spec.unwrap().session_affinity_config.is_some());
    }

    #[test]
    fn a_slice_keeps_what_is_copied_and_drops_what_names_the_source_cluster() {
        let value = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": metadata("web-abc"),
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.1.0.1"], "hostname": "web-0", "zone": "a", "nodeName": "n1",
                 "conditions": {"ready": true, "serving": true, "terminating": false},
                 "targetRef": {"kind": "Pod", "name": "web-0"},
                 "hints": {"forZones": [{"name": "a"}]}},
                {"addresses": ["10.1.0.2"], "conditions": {"ready": false}}
            ],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP", "appProtocol": "http"}]
        });
        let mut expected: EndpointSlice = full(&value);
        for endpoint in &mut expected.endpoints {
            endpoint.node_name = None;
            endpoint.target_ref = None;
            endpoint.hints = None;
        }
        let slice: EndpointSlice = lean(&value);
        assert_eq!(slice, expected);
        assert_eq!(slice.endpoints[0].zone.as_deref(), Some("a"));
        assert!(
            slice.metadata.annotations.is_some(),
            "slice annotations are kept"
        );
    }

    #[test]
    fn exports_and_imports_keep_spec_and_status() {
        let export = json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
            "metadata": metadata("web"),
            "spec": {"exportedLabels": {"tier": "front"}},
            "status": {"conditions": [{"type": "Valid", "status": "True", "reason": "Valid",
                "message": "", "lastTransitionTime": "2026-12-01T06:00:00Z"}]}
        });
        assert_eq!(
            lean::<ServiceExport>(&export),
            full::<ServiceExport>(&export)
        );
        let mut no_spec = export.clone();
        no_spec.as_object_mut().unwrap().remove("spec");
        assert_eq!(
            lean::<ServiceExport>(&no_spec),
            full::<ServiceExport>(&no_spec)
        );

        let import = json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
            "metadata": metadata("web"),
            "spec": {"type": "ClusterSetIP", "ips": ["10.96.5.5"],
                "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
            "status": {"clusters": [{"cluster": "east"}]}
        });
        assert_eq!(
            lean::<ServiceImport>(&import),
            full::<ServiceImport>(&import)
        );
    }

    #[test]
    fn what_fails_to_decode_whole_fails_lean() {
        let bad = json!({"metadata": {"name": "web"}, "addressType": "IPv4",
            "endpoints": [{"addresses": [7]}]});
        assert!(serde_json::from_value::<EndpointSlice>(bad.clone()).is_err());
        assert!(serde_json::from_value::<Lean<EndpointSlice>>(bad).is_err());
        let no_spec = json!({"metadata": {"name": "web"}});
        assert!(serde_json::from_value::<ServiceImport>(no_spec.clone()).is_err());
        assert!(serde_json::from_value::<Lean<ServiceImport>>(no_spec).is_err());
    }

    #[test]
    fn the_resource_is_the_kind_it_wraps() {
        assert_eq!(
            Lean::<Service>::url_path(&(), Some("shop")),
            Service::url_path(&(), Some("shop"))
        );
        assert_eq!(
            Lean::<ServiceExport>::api_version(&()),
            "multicluster.x-k8s.io/v1beta1"
        );
    }
}
