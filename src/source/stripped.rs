//! EndpointSlices and ServiceImports as the watch decodes them: only the
//! fields the index reads. Everything else (`managedFields`, `targetRef`,
//! topology, hints, an import's status) is skipped by the JSON parser
//! without being built, which at 25,000 slices is most of the decoding
//! work and of the transient memory of a list.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::{ApiResource, DynamicResourceScope};
use serde::{Deserialize, Deserializer};

/// An EndpointSlice holding only what [`crate::model::SliceEndpoints`]
/// reads, plus the metadata the watch itself needs (resource version).
#[derive(Clone, Debug, PartialEq)]
pub struct StrippedSlice(pub EndpointSlice);

#[derive(Deserialize)]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
struct Conditions {
    ready: Option<bool>,
}

#[derive(Deserialize)]
struct StrippedEndpoint {
    #[serde(default)]
    addresses: Vec<String>,
    conditions: Option<Conditions>,
    hostname: Option<String>,
}

#[derive(Deserialize)]
struct Raw {
    metadata: Meta,
    #[serde(rename = "addressType", default)]
    address_type: String,
    #[serde(default)]
    endpoints: Option<Vec<StrippedEndpoint>>,
    ports: Option<Vec<EndpointPort>>,
}

impl<'de> Deserialize<'de> for StrippedSlice {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Raw::deserialize(deserializer)?;
        let endpoints = raw
            .endpoints
            .unwrap_or_default()
            .into_iter()
            .map(|e| Endpoint {
                addresses: e.addresses,
                conditions: e.conditions.map(|c| EndpointConditions {
                    ready: c.ready,
                    ..EndpointConditions::default()
                }),
                hostname: e.hostname,
                ..Endpoint::default()
            })
            .collect();
        Ok(Self(EndpointSlice {
            metadata: raw.metadata.into_object_meta(),
            address_type: raw.address_type,
            endpoints,
            ports: raw.ports,
        }))
    }
}

impl Resource for StrippedSlice {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        EndpointSlice::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        EndpointSlice::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        EndpointSlice::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        EndpointSlice::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

/// A ServiceImport of the configured API (group, version and kind are
/// configuration, so the type is dynamic like kube's `DynamicObject`):
/// the metadata the index reads, and the spec as JSON. The spec is decoded
/// by the source, object by object, so that one invalid import is
/// skipped and reported instead of failing the list it arrived in.
#[derive(Clone, Debug, PartialEq)]
pub struct StrippedImport {
    /// Name, namespace, resource version and labels only.
    pub metadata: ObjectMeta,
    /// `spec`, undecoded.
    pub spec: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct RawImport {
    metadata: Meta,
    spec: Option<serde_json::Value>,
}

impl<'de> Deserialize<'de> for StrippedImport {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = RawImport::deserialize(deserializer)?;
        Ok(Self {
            metadata: raw.metadata.into_object_meta(),
            spec: raw.spec,
        })
    }
}

impl Meta {
    fn into_object_meta(self) -> ObjectMeta {
        ObjectMeta {
            name: self.name,
            namespace: self.namespace,
            resource_version: self.resource_version,
            labels: self.labels,
            ..ObjectMeta::default()
        }
    }
}

impl Resource for StrippedImport {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slice as the apiserver sends it, with the fields we skip.
    const FULL: &str = r#"{
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "db-east", "namespace": "shop", "resourceVersion": "42",
            "uid": "0d9c3a6e-9a1b-4f0e-8c55-1f2e3d4c5b6a",
            "labels": {"multicluster.kubernetes.io/service-name": "db",
                       "multicluster.kubernetes.io/source-cluster": "east"},
            "managedFields": [{"manager": "mcs-controller", "operation": "Update",
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:endpoints": {}}}]
        },
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.1.0.1"], "hostname": "db-0",
             "conditions": {"ready": true, "serving": true, "terminating": false},
             "targetRef": {"kind": "Pod", "name": "db-0"}, "nodeName": "n1", "zone": "a"},
            {"addresses": ["10.1.0.2"], "conditions": {"ready": false}},
            {"addresses": ["10.1.0.3"]}
        ],
        "ports": [{"name": "pg", "port": 5432, "protocol": "TCP", "appProtocol": "postgresql"}]
    }"#;

    #[test]
    fn keeps_what_the_index_reads_and_projects_like_the_full_object() {
        let full: EndpointSlice = serde_json::from_str(FULL).unwrap();
        let stripped: StrippedSlice = serde_json::from_str(FULL).unwrap();
        assert_eq!(stripped.0.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(stripped.0.metadata.managed_fields, None);
        assert_eq!(stripped.0.endpoints[0].target_ref, None);
        assert_eq!(
            crate::model::SliceEndpoints::from_api(&stripped.0).unwrap(),
            crate::model::SliceEndpoints::from_api(&full).unwrap()
        );
        assert!(
            crate::model::SliceEndpoints::from_api(&stripped.0)
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn an_invalid_field_still_fails_where_the_full_object_fails() {
        let bad = FULL.replace(r#""10.1.0.3""#, "7");
        assert!(serde_json::from_str::<EndpointSlice>(&bad).is_err());
        assert!(serde_json::from_str::<StrippedSlice>(&bad).is_err());
    }

    #[test]
    fn the_resource_is_the_endpoint_slice_api() {
        assert_eq!(
            StrippedSlice::url_path(&(), Some("shop")),
            EndpointSlice::url_path(&(), Some("shop"))
        );
        assert_eq!(StrippedSlice::api_version(&()), "discovery.k8s.io/v1");
    }

    #[test]
    fn an_import_keeps_its_metadata_and_its_spec_undecoded() {
        let full = r#"{
            "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
            "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "7",
                         "labels": {"team": "a"},
                         "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"type": "ClusterSetIP", "ips": ["10.0.0.1"], "ports": [{"port": 80}]},
            "status": {"clusters": [{"cluster": "east"}]}
        }"#;
        let import: StrippedImport = serde_json::from_str(full).unwrap();
        assert_eq!(import.metadata.name.as_deref(), Some("web"));
        assert_eq!(import.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(import.metadata.labels.as_ref().unwrap()["team"], "a");
        assert_eq!(import.metadata.managed_fields, None);
        assert_eq!(import.spec.as_ref().unwrap()["ips"][0], "10.0.0.1");
        // A spec the typed API would refuse still decodes here, so that
        // one bad import cannot fail the list it came in.
        let bad = full.replace(r#""port": 80"#, r#""port": "eighty""#);
        assert!(serde_json::from_str::<crate::api::ServiceImport>(&bad).is_err());
        assert!(serde_json::from_str::<StrippedImport>(&bad).is_ok());
        let resource = kube::core::ApiResource::erase::<crate::api::ServiceImport>(&());
        assert_eq!(
            StrippedImport::url_path(&resource, None),
            crate::api::ServiceImport::url_path(&(), None)
        );
    }
}
