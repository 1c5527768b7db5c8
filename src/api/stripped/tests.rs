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

/// A slice as the apiserver sends it, with the fields we skip.
fn slice() -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": metadata("web-abc"),
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.1.0.1"], "hostname": "web-0", "zone": "a", "nodeName": "n1",
             "conditions": {"ready": true, "serving": true, "terminating": false},
             "targetRef": {"kind": "Pod", "name": "web-0"},
             "hints": {"forZones": [{"name": "a"}]}},
            {"addresses": ["10.1.0.2"], "conditions": {"ready": false}},
            {"addresses": ["10.1.0.3"]}
        ],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP", "appProtocol": "http"}]
    })
}

/// The full decode with what the controller leaves out cleared by hand.
fn full<K: DeserializeOwned + Resource>(value: &Value) -> K {
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
    Stripped<K, Controller>: DeserializeOwned,
{
    serde_json::from_value::<Stripped<K, Controller>>(value.clone())
        .unwrap()
        .0
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
fn the_controller_keeps_of_a_slice_what_it_copies_and_hints_from_but_not_target_references() {
    let value = slice();
    let mut expected: EndpointSlice = full(&value);
    for endpoint in &mut expected.endpoints {
        endpoint.target_ref = None;
    }
    let slice: EndpointSlice = lean(&value);
    assert_eq!(slice, expected);
    assert_eq!(slice.endpoints[0].zone.as_deref(), Some("a"));
    assert!(
        slice.metadata.annotations.is_some(),
        "slice annotations are kept"
    );
    // Held whole (as a peer's slice is read), an endpoint crosses clusters
    // with what the decoding keeps.
    // Node names and hints are read (local-first hints) but never cross.
    assert_eq!(slice.endpoints[0].node_name.as_deref(), Some("n1"));
    assert!(slice.endpoints[0].hints.is_some());
    let whole: EndpointSlice = serde_json::from_value(value).unwrap();
    let crossed: Vec<Endpoint> = whole.endpoints.iter().map(cross_cluster).collect();
    let mut without_local_fields = slice.endpoints.clone();
    for endpoint in &mut without_local_fields {
        endpoint.node_name = None;
        endpoint.hints = None;
    }
    assert_eq!(crossed, without_local_fields);
}

/// The DNS source's memory per endpoint: nothing beyond what the index
/// reads may be kept.
#[test]
fn the_dns_source_keeps_of_a_slice_only_what_the_index_reads() {
    let value = slice();
    let whole: EndpointSlice = serde_json::from_value(value.clone()).unwrap();
    let expected = EndpointSlice {
        metadata: ObjectMeta {
            name: whole.metadata.name,
            namespace: whole.metadata.namespace,
            resource_version: whole.metadata.resource_version,
            labels: whole.metadata.labels,
            ..ObjectMeta::default()
        },
        address_type: whole.address_type,
        endpoints: whole
            .endpoints
            .into_iter()
            .map(|endpoint| Endpoint {
                addresses: endpoint.addresses,
                // All three conditions: ready, and serving and
                // terminating for the serving fallback.
                conditions: endpoint.conditions,
                hostname: endpoint.hostname,
                ..Endpoint::default()
            })
            .collect(),
        ports: whole.ports,
    };
    let stripped: Stripped<EndpointSlice, Dns> = serde_json::from_value(value).unwrap();
    assert_eq!(stripped.0, expected);
    assert_eq!(
        stripped.0.endpoints[1].conditions.as_ref().unwrap().ready,
        Some(false)
    );
    assert_eq!(stripped.0.endpoints[2].conditions, None);
    assert_eq!(
        stripped.0.endpoints[0].conditions,
        Some(EndpointConditions {
            ready: Some(true),
            serving: Some(true),
            terminating: Some(false),
        })
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
fn what_fails_to_decode_whole_fails_stripped() {
    let bad = json!({"metadata": {"name": "web"}, "addressType": "IPv4",
        "endpoints": [{"addresses": [7]}]});
    assert!(serde_json::from_value::<EndpointSlice>(bad.clone()).is_err());
    assert!(serde_json::from_value::<Stripped<EndpointSlice, Controller>>(bad.clone()).is_err());
    assert!(serde_json::from_value::<Stripped<EndpointSlice, Dns>>(bad).is_err());
    let no_spec = json!({"metadata": {"name": "web"}});
    assert!(serde_json::from_value::<ServiceImport>(no_spec.clone()).is_err());
    assert!(serde_json::from_value::<Stripped<ServiceImport, Controller>>(no_spec).is_err());
}

#[test]
fn a_dns_import_keeps_its_metadata_and_its_spec_undecoded() {
    let full = r#"{
        "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
        "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "7",
                     "labels": {"team": "a"},
                     "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"type": "ClusterSetIP", "ips": ["10.0.0.1"], "ports": [{"port": 80}]},
        "status": {"clusters": [{"cluster": "east"}]}
    }"#;
    let import: Stripped<DynamicObject, Dns> = serde_json::from_str(full).unwrap();
    let import = import.0;
    assert_eq!(import.metadata.name.as_deref(), Some("web"));
    assert_eq!(import.metadata.resource_version.as_deref(), Some("7"));
    assert_eq!(import.metadata.labels.as_ref().unwrap()["team"], "a");
    assert_eq!(import.metadata.managed_fields, None);
    assert_eq!(import.data["spec"]["ips"][0], "10.0.0.1");
    assert_eq!(import.data.get("status"), None);
    // A spec the typed API would refuse still decodes here, so that one
    // bad import cannot fail the list it came in.
    let bad = full.replace(r#""port": 80"#, r#""port": "eighty""#);
    assert!(serde_json::from_str::<ServiceImport>(&bad).is_err());
    assert!(serde_json::from_str::<Stripped<DynamicObject, Dns>>(&bad).is_ok());
}

#[test]
fn the_resource_is_the_kind_it_wraps() {
    assert_eq!(
        Stripped::<Service, Controller>::url_path(&(), Some("shop")),
        Service::url_path(&(), Some("shop"))
    );
    assert_eq!(
        Stripped::<ServiceExport, Controller>::api_version(&()),
        "multicluster.x-k8s.io/v1beta1"
    );
    assert_eq!(
        Stripped::<EndpointSlice, Dns>::api_version(&()),
        "discovery.k8s.io/v1"
    );
    let resource = kube::core::ApiResource::erase::<ServiceImport>(&());
    assert_eq!(
        Stripped::<DynamicObject, Dns>::url_path(&resource, None),
        ServiceImport::url_path(&(), None)
    );
}

#[test]
fn a_node_keeps_its_pod_ranges_and_addresses_for_the_address_screen() {
    let value = json!({
        "metadata": metadata("node-a"),
        "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24", "fd00:10:244:1::/64"], "providerID": "x"},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "172.18.0.2"}],
            "images": [{"names": ["big"], "sizeBytes": 1}],
        },
    });
    let node: Node = lean(&value);
    let spec = node.spec.unwrap();
    assert_eq!(spec.pod_cidr.as_deref(), Some("10.244.1.0/24"));
    assert_eq!(
        spec.pod_cidrs.unwrap(),
        ["10.244.1.0/24", "fd00:10:244:1::/64"]
    );
    assert_eq!(spec.provider_id, None, "the rest of the spec is skipped");
    let status = node.status.unwrap();
    assert_eq!(status.addresses.unwrap()[0].address, "172.18.0.2");
    assert_eq!(status.images, None);
}
