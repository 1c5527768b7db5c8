//! EndpointSlices as the watch decodes them: only the fields the index
//! reads. Everything else (`managedFields`, `targetRef`, topology, hints)
//! is skipped by the JSON parser without being built, which at 25,000
//! slices is most of the decoding work and of the transient memory of a
//! list.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
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
            metadata: ObjectMeta {
                name: raw.metadata.name,
                namespace: raw.metadata.namespace,
                resource_version: raw.metadata.resource_version,
                labels: raw.metadata.labels,
                ..ObjectMeta::default()
            },
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
}
