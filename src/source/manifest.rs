//! Parsing a multi-document YAML manifest — what one would `kubectl apply` —
//! into index projections. ServiceImports (`v1alpha1` or `v1beta1`),
//! `discovery.k8s.io/v1` EndpointSlices and `kind: List` wrappers are read;
//! other kinds are skipped and reported. Any invalid object rejects the whole
//! manifest with an error naming the document, the object and the field, so
//! the caller can keep serving its last good index.

use std::collections::HashSet;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::Value;

use crate::api::ServiceImport;
use crate::api::well_known::MCS_GROUP;
use crate::index::SliceKey;
use crate::model::{ImportedService, ServiceRef, SliceEndpoints};

/// The objects a manifest contributes to the index.
#[derive(Debug, Default, Clone)]
pub struct Manifest {
    /// ServiceImport projections.
    pub imports: Vec<ImportedService>,
    /// EndpointSlice projections with their keys.
    pub slices: Vec<(SliceKey, SliceEndpoints)>,
    /// Objects that were skipped, as `document N: Kind ns/name (reason)`.
    pub skipped: Vec<String>,
}

/// Why a manifest was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The text is not valid YAML.
    #[error("invalid YAML: {0}")]
    Yaml(String),
    /// One object is invalid.
    #[error("document {document}{item}: {kind} {name}: {message}", item = item.map(|i| format!(" item {i}")).unwrap_or_default())]
    Object {
        /// 1-based document number in the file.
        document: usize,
        /// 0-based index inside a `kind: List`.
        item: Option<usize>,
        /// The object's kind.
        kind: String,
        /// `namespace/name`.
        name: String,
        /// Field path and problem.
        message: String,
    },
}

/// Parses `text` (one or more `---`-separated YAML documents).
pub fn parse(text: &str) -> Result<Manifest, ManifestError> {
    let documents: Vec<Value> = serde_saphyr::from_multiple_with_options(text, yaml_options())
        .map_err(|e| ManifestError::Yaml(e.to_string()))?;
    let mut manifest = Manifest::default();
    let mut seen_imports = HashSet::new();
    let mut seen_slices = HashSet::new();
    for (i, document) in documents.into_iter().enumerate() {
        let at = Position {
            document: i + 1,
            item: None,
        };
        if document.is_null() {
            continue;
        }
        if document.get("kind").and_then(Value::as_str) == Some("List") {
            let items = document
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for (j, item) in items.into_iter().enumerate() {
                let at = Position {
                    item: Some(j),
                    ..at
                };
                add_object(&mut manifest, item, at, &mut seen_imports, &mut seen_slices)?;
            }
        } else {
            add_object(
                &mut manifest,
                document,
                at,
                &mut seen_imports,
                &mut seen_slices,
            )?;
        }
    }
    Ok(manifest)
}

/// Parser limits sized for a whole clusterset (the defaults stop at 1,024
/// documents and 250,000 nodes; 10,000 services with slices need more).
/// They still bound memory against a hostile file.
fn yaml_options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_documents = 1_000_000;
    budget.max_nodes = 100_000_000;
    budget.max_events = 200_000_000;
    budget.max_total_scalar_bytes = 1 << 30;
    budget.max_reader_input_bytes = Some(1 << 30);
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    // YAML 1.2 booleans: a namespace called `n` or `no` stays a string.
    options.strict_booleans = true;
    options
}

#[derive(Clone, Copy)]
struct Position {
    document: usize,
    item: Option<usize>,
}

/// Kubernetes reads these fields as strings whatever YAML infers (kubectl
/// decodes into typed structs); decoding through a generic value does not,
/// so numbers and booleans there are turned back into their text:
/// `version: 1.2` in labels, a namespace called `123`.
fn stringify_string_fields(object: &mut Value) {
    fn text(v: &mut Value) {
        match v {
            Value::Number(n) => *v = Value::String(n.to_string()),
            Value::Bool(b) => *v = Value::String(b.to_string()),
            _ => {}
        }
    }
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in ["name", "namespace", "generateName"] {
            if let Some(v) = meta.get_mut(key) {
                text(v);
            }
        }
        for key in ["labels", "annotations"] {
            if let Some(map) = meta.get_mut(key).and_then(Value::as_object_mut) {
                map.values_mut().for_each(text);
            }
        }
    }
    if let Some(endpoints) = object.get_mut("endpoints").and_then(Value::as_array_mut) {
        for endpoint in endpoints {
            if let Some(h) = endpoint.get_mut("hostname") {
                text(h);
            }
        }
    }
}

fn add_object(
    manifest: &mut Manifest,
    mut object: Value,
    at: Position,
    seen_imports: &mut HashSet<ServiceRef>,
    seen_slices: &mut HashSet<SliceKey>,
) -> Result<(), ManifestError> {
    stringify_string_fields(&mut object);
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let meta = |field: &str| {
        object
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let namespace = meta("namespace").unwrap_or_else(|| "default".into());
    let name = meta("name").unwrap_or_default();
    let fail = |message: String| ManifestError::Object {
        document: at.document,
        item: at.item,
        kind: if kind.is_empty() {
            "object".into()
        } else {
            kind.clone()
        },
        name: format!("{namespace}/{name}"),
        message,
    };
    if kind.is_empty() || api_version.is_empty() {
        return Err(fail("apiVersion and kind are required".into()));
    }
    if name.is_empty() {
        return Err(fail("metadata.name is required".into()));
    }
    let (group, version) = api_version
        .rsplit_once('/')
        .unwrap_or(("", api_version.as_str()));
    match (group, version, kind.as_str()) {
        (MCS_GROUP, "v1alpha1" | "v1beta1", "ServiceImport") => {
            // Both versions share one schema, so both decode into the v1beta1 type.
            let import: ServiceImport =
                serde_path_to_error::deserialize(&object).map_err(|e| fail(e.to_string()))?;
            let projected = ImportedService::from_api(&import).map_err(|e| fail(e.to_string()))?;
            if !seen_imports.insert(projected.service.clone()) {
                return Err(fail("duplicate ServiceImport".into()));
            }
            manifest.imports.push(projected);
        }
        ("discovery.k8s.io", "v1", "EndpointSlice") => {
            let slice: EndpointSlice =
                serde_path_to_error::deserialize(&object).map_err(|e| fail(e.to_string()))?;
            match SliceEndpoints::from_api(&slice).map_err(|e| fail(e.to_string()))? {
                Some(projected) => {
                    let key = SliceKey { namespace: namespace.clone(), name: name.clone() };
                    if !seen_slices.insert(key.clone()) {
                        return Err(fail("duplicate EndpointSlice".into()));
                    }
                    manifest.slices.push((key, projected));
                }
                None => manifest.skipped.push(format!(
                    "document {}: EndpointSlice {namespace}/{name} (not an imported slice, or FQDN addresses)",
                    at.document
                )),
            }
        }
        _ => manifest.skipped.push(format!(
            "document {}: {api_version} {kind} {namespace}/{name} (not served by DNS)",
            at.document
        )),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {name: web, namespace: prod}
spec:
  type: ClusterSetIP
  ips: [10.42.0.1, "fd00::1"]
  ports: [{name: http, protocol: TCP, port: 80}]
---
apiVersion: v1
kind: List
items:
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: web-a
    namespace: prod
    labels:
      multicluster.kubernetes.io/service-name: web
      multicluster.kubernetes.io/source-cluster: cluster-a
  addressType: IPv4
  endpoints: [{addresses: [10.1.0.1]}]
- apiVersion: multicluster.x-k8s.io/v1alpha1
  kind: ServiceExport
  metadata: {name: web, namespace: prod}
"#;

    #[test]
    fn reads_imports_slices_and_lists() {
        let m = parse(GOOD).unwrap();
        assert_eq!(m.imports.len(), 1);
        assert_eq!(m.slices.len(), 1);
        assert_eq!(m.slices[0].1.cluster, "cluster-a");
        assert_eq!(m.skipped.len(), 1, "{:?}", m.skipped);
    }

    #[test]
    fn a_bad_ip_names_document_object_and_field() {
        let text = GOOD.replace("fd00::1", "fd00::zz");
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains("document 1"), "{err}");
        assert!(err.contains("ServiceImport prod/web"), "{err}");
        assert!(err.contains("spec.ips[1]"), "{err}");
    }

    #[test]
    fn a_wrongly_typed_field_names_its_path() {
        let text = GOOD.replace("port: 80", "port: eighty");
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains("spec.ports[0].port"), "{err}");
    }

    #[test]
    fn a_slice_without_source_cluster_is_rejected_in_its_list_item() {
        let text = GOOD.replace(
            "      multicluster.kubernetes.io/source-cluster: cluster-a\n",
            "",
        );
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains("document 2 item 0"), "{err}");
        assert!(err.contains("source-cluster"), "{err}");
    }

    #[test]
    fn broken_yaml_is_an_error() {
        assert!(matches!(
            parse("kind: [unclosed"),
            Err(ManifestError::Yaml(_))
        ));
    }

    #[test]
    fn duplicate_imports_are_rejected() {
        let doc = GOOD.split("---").next().unwrap();
        let err = parse(&format!("{doc}---{doc}")).unwrap_err().to_string();
        assert!(err.contains("duplicate"), "{err}");
    }

    #[test]
    fn yaml_1_1_booleans_and_numbers_in_string_fields_stay_strings() {
        let text = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: s\n  namespace: no\n  labels:\n    multicluster.kubernetes.io/service-name: web\n    multicluster.kubernetes.io/source-cluster: on\n    app.kubernetes.io/version: 1.2\naddressType: IPv4\nendpoints: [{addresses: [10.0.0.1], hostname: 7}]\n";
        let m = parse(text).unwrap();
        let (key, slice) = &m.slices[0];
        assert_eq!(key.namespace, "no");
        assert_eq!(slice.cluster, "on");
        assert_eq!(slice.endpoints[0].hostname.as_deref(), Some("7"));
    }

    #[test]
    fn manifests_larger_than_the_yaml_parser_defaults_load() {
        // serde-saphyr stops at 1,024 documents by default.
        let mut text = String::new();
        for i in 0..3000 {
            text.push_str(&format!(
                "---\napiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceImport\nmetadata: {{name: s{i}, namespace: n}}\nspec: {{type: Headless, ports: []}}\n"
            ));
        }
        assert_eq!(parse(&text).unwrap().imports.len(), 3000);
    }
}
