//! One document's objects: decoded, checked as `kubectl apply` would check
//! them, and projected for the index.

use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::Value;

use super::{DocumentObjects, ManifestError, Object};
use crate::api::well_known::{ABOUT_GROUP, CLUSTER_ID_PROPERTY, MCS_GROUP};
use crate::api::{ClusterProperty, ServiceImport};
use crate::index::SliceKey;
use crate::model::{ImportedService, OwnCluster, SliceEndpoints};

/// Projects document `number` (1-based): one object or a `kind: List`.
pub(super) fn project_document(
    document: Value,
    number: usize,
) -> Result<DocumentObjects, ManifestError> {
    let mut objects = Vec::new();
    if document.is_null() {
        return Ok(objects.into_boxed_slice());
    }
    let at = |item| Position {
        document: number,
        item,
    };
    if document.get("kind").and_then(Value::as_str) != Some("List") {
        objects.push((None, project_object(document, at(None))?));
        return Ok(objects.into_boxed_slice());
    }
    let items = match document {
        Value::Object(mut map) => map.remove("items"),
        _ => None,
    };
    if let Some(Value::Array(items)) = items {
        for (j, item) in items.into_iter().enumerate() {
            objects.push((Some(j), project_object(item, at(Some(j)))?));
        }
    }
    Ok(objects.into_boxed_slice())
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

/// Rejects a field of `input` that `decoded` (what `input` decoded into)
/// does not have, naming it as `kubectl apply` does: the typed decoding
/// drops unknown fields silently, so `ip:` for `ips:` would otherwise leave
/// a service without addresses and without an error. Found by encoding
/// `decoded` again and comparing; empty values (`null`, `[]`, `{}`) are
/// not compared, because encoding leaves out empty optional fields.
fn reject_unknown_fields(input: &Value, decoded: &impl serde::Serialize) -> Result<(), String> {
    fn empty(value: &Value) -> bool {
        match value {
            Value::Null => true,
            Value::Array(items) => items.is_empty(),
            Value::Object(map) => map.is_empty(),
            _ => false,
        }
    }
    fn walk(input: &Value, known: &Value, path: &mut String) -> bool {
        match (input, known) {
            (Value::Object(input), Value::Object(known)) => input.iter().any(|(key, value)| {
                let len = path.len();
                if len > 0 {
                    path.push('.');
                }
                path.push_str(key);
                let unknown = match known.get(key) {
                    Some(known) => walk(value, known, path),
                    None => !empty(value),
                };
                if !unknown {
                    path.truncate(len);
                }
                unknown
            }),
            (Value::Array(input), Value::Array(known)) => {
                input
                    .iter()
                    .zip(known)
                    .enumerate()
                    .any(|(i, (value, known))| {
                        let len = path.len();
                        path.push_str(&format!("[{i}]"));
                        let unknown = walk(value, known, path);
                        if !unknown {
                            path.truncate(len);
                        }
                        unknown
                    })
            }
            _ => false,
        }
    }
    let known = serde_json::to_value(decoded).expect("API objects encode as JSON");
    let mut path = String::new();
    match walk(input, &known, &mut path) {
        true => Err(format!("unknown field {path:?}")),
        false => Ok(()),
    }
}

/// Validates and projects one object; duplicates are checked by [`assemble`].
fn project_object(mut object: Value, at: Position) -> Result<Object, ManifestError> {
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
            reject_unknown_fields(&object, &import).map_err(fail)?;
            let projected = ImportedService::from_api(&import).map_err(|e| fail(e.to_string()))?;
            Ok(Object::Import(projected))
        }
        ("discovery.k8s.io", "v1", "EndpointSlice") => {
            let slice: EndpointSlice =
                serde_path_to_error::deserialize(&object).map_err(|e| fail(e.to_string()))?;
            reject_unknown_fields(&object, &slice).map_err(fail)?;
            Ok(
                match SliceEndpoints::from_api(&slice).map_err(|e| fail(e.to_string()))? {
                    Some(projected) => Object::Slice(SliceKey::new(&namespace, &name), projected),
                    None => Object::Skipped(format!(
                        "EndpointSlice {namespace}/{name} (not an imported slice, or FQDN addresses)"
                    )),
                },
            )
        }
        ("", "v1", "Namespace") => Ok(Object::Namespace),
        (ABOUT_GROUP, "v1alpha1" | "v1beta1", "ClusterProperty") => {
            // Both versions share one schema, as for ServiceImports.
            let property: ClusterProperty =
                serde_path_to_error::deserialize(&object).map_err(|e| fail(e.to_string()))?;
            reject_unknown_fields(&object, &property).map_err(fail)?;
            if name != CLUSTER_ID_PROPERTY {
                // Another property (the ClusterSet's name, say): nothing
                // DNS reads.
                return Ok(Object::ClusterProperty(None));
            }
            match OwnCluster::from_property(&property.spec.value) {
                OwnCluster::Known(id) => Ok(Object::ClusterProperty(Some(id))),
                OwnCluster::Unknown(why) => Err(fail(format!("spec.value: {why}"))),
            }
        }
        _ => Ok(Object::Skipped(format!(
            "{api_version} {kind} {namespace}/{name} (not served by DNS)"
        ))),
    }
}
