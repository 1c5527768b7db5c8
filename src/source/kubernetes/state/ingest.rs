//! [`Ingest`], the store the three watches feed: objects projected into
//! the index, an invalid object kept at its last valid version, and the
//! rejections remembered for `/explain`.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::PartialObjectMeta;

use super::WatchedImport;
use crate::api::ServiceRef;
use crate::api::well_known::{CLUSTER_ID_PROPERTY, LABEL_SERVICE_NAME};
use crate::api::{ClusterProperty, ServiceImport};
use crate::index::{Index, Relisted, SliceKey};
use crate::model::{ImportedService, OwnCluster, SliceEndpoints};
use crate::watch::IndexResource;

/// The kind of a rejected ServiceImport, in `/explain`.
pub(super) const IMPORT_KIND: &str = "ServiceImport";
/// The kind of a rejected EndpointSlice, in `/explain`.
pub(super) const SLICE_KIND: &str = "EndpointSlice";

/// Kind, namespace and name of an API object.
pub(super) type ObjectKey = (&'static str, String, String);

fn object_key(kind: &'static str, namespace: &str, name: &str) -> ObjectKey {
    (kind, namespace.to_owned(), name.to_owned())
}

/// The store the three watches feed: the index, and the objects whose
/// latest version was rejected.
#[derive(Debug)]
pub(super) struct Ingest {
    pub(super) index: Index,
    /// Objects whose latest version was rejected as invalid, for
    /// `/explain`: by kind and object, with the service they name.
    pub(super) rejected: HashMap<ObjectKey, (ServiceRef, String)>,
    /// Kinds of the objects rejected by the event being handled.
    pub(super) invalid: Vec<&'static str>,
}

impl Ingest {
    /// A store feeding `index`, with nothing rejected.
    pub(super) fn new(index: Index) -> Self {
        Self {
            index,
            rejected: HashMap::new(),
            invalid: Vec::new(),
        }
    }

    /// Projects a ServiceImport. An invalid object is logged and skipped;
    /// the last good version of it, if any, stays in the index.
    fn project_import(&mut self, object: &WatchedImport) -> Option<ImportedService> {
        let result = decode_import(object)
            .and_then(|import| ImportedService::from_api(&import).map_err(|e| e.to_string()));
        match result {
            Ok(import) => {
                let service = &import.service;
                self.forget_rejected(IMPORT_KIND, &service.namespace, &service.name);
                Some(import)
            }
            Err(error) => {
                let service = import_ref(object);
                let key = object_key(IMPORT_KIND, &service.namespace, &service.name);
                tracing::warn!(ns = %service.namespace, name = %service.name, %error, "ignoring invalid ServiceImport; keeping its last valid version");
                self.invalid.push(IMPORT_KIND);
                self.rejected.insert(key, (service, error));
                None
            }
        }
    }

    /// `None`: invalid (logged); `Some(None)`: not an MCS slice.
    fn project_slice(
        &mut self,
        slice: &EndpointSlice,
    ) -> Option<Option<(SliceKey, SliceEndpoints)>> {
        let key = slice_key(slice);
        match SliceEndpoints::from_api(slice) {
            Ok(projected) => {
                self.forget_rejected(SLICE_KIND, &key.namespace, &key.name);
                Some(projected.map(|p| (key, p)))
            }
            Err(error) => {
                tracing::warn!(ns = %key.namespace, name = %key.name, %error, "ignoring invalid EndpointSlice; keeping its last valid version");
                self.invalid.push(SLICE_KIND);
                // The watch selects on the service-name label, so it is set.
                let service_name = slice
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|labels| labels.get(LABEL_SERVICE_NAME))
                    .map_or("", String::as_str);
                let service = ServiceRef::new(&key.namespace, service_name);
                self.rejected.insert(
                    object_key(SLICE_KIND, &key.namespace, &key.name),
                    (service, error.to_string()),
                );
                None
            }
        }
    }

    /// Clears a rejection once its object is valid again or gone. Nearly
    /// always there is none: no key is built for an empty map.
    fn forget_rejected(&mut self, kind: &'static str, namespace: &str, name: &str) {
        if !self.rejected.is_empty() {
            self.rejected.remove(&object_key(kind, namespace, name));
        }
    }
}

impl IndexResource<WatchedImport> for Ingest {
    type Listed = Relisted<ServiceRef, Box<ImportedService>>;

    fn apply(&mut self, object: WatchedImport) {
        if let Some(import) = self.project_import(&object) {
            self.index.apply_import(import);
        }
    }

    fn delete(&mut self, object: WatchedImport) {
        let service = import_ref(&object);
        self.forget_rejected(IMPORT_KIND, &service.namespace, &service.name);
        self.index.delete_import(&service);
    }

    fn list_started(&mut self) {
        self.rejected.retain(|(kind, ..), _| *kind != IMPORT_KIND);
    }

    fn listed(&mut self, object: WatchedImport) -> Option<Self::Listed> {
        match self.project_import(&object) {
            Some(import) => Some(self.index.relisted_import(import)),
            // An object that is still there but invalid keeps its last
            // valid version through the relist, as it does through an
            // update.
            None => {
                let service = import_ref(&object);
                self.index
                    .import(&service)
                    .map(|held| Relisted::Held(held.service.clone()))
            }
        }
    }

    fn reset(&mut self, listed: Vec<Self::Listed>) {
        self.index
            .relist_imports(listed.into_iter().map(Relisted::unboxed));
    }
}

impl IndexResource<EndpointSlice> for Ingest {
    type Listed = Relisted<SliceKey, Box<(SliceKey, SliceEndpoints)>>;

    fn apply(&mut self, slice: EndpointSlice) {
        match self.project_slice(&slice) {
            Some(Some((key, projected))) => self.index.apply_slice(key, projected),
            // No longer an MCS slice (label removed): forget it.
            Some(None) => self.index.delete_slice(&slice_key(&slice)),
            None => {}
        }
    }

    fn delete(&mut self, slice: EndpointSlice) {
        let key = slice_key(&slice);
        self.forget_rejected(SLICE_KIND, &key.namespace, &key.name);
        self.index.delete_slice(&key);
    }

    fn list_started(&mut self) {
        self.rejected.retain(|(kind, ..), _| *kind != SLICE_KIND);
    }

    fn listed(&mut self, slice: EndpointSlice) -> Option<Self::Listed> {
        match self.project_slice(&slice) {
            Some(projected) => projected.map(|(key, slice)| self.index.relisted_slice(key, slice)),
            // Invalid: keep its last valid version (see the imports).
            None => {
                let key = slice_key(&slice);
                self.index.slice(&key).map(|_| Relisted::Held(key))
            }
        }
    }

    fn reset(&mut self, listed: Vec<Self::Listed>) {
        self.index
            .relist_slices(listed.into_iter().map(Relisted::unboxed));
    }
}

impl IndexResource<PartialObjectMeta<Namespace>> for Ingest {
    type Listed = String;

    fn apply(&mut self, ns: PartialObjectMeta<Namespace>) {
        if live(&ns) {
            self.index.apply_namespace(&namespace_name(&ns));
        } else {
            self.index.delete_namespace(&namespace_name(&ns));
        }
    }

    fn delete(&mut self, ns: PartialObjectMeta<Namespace>) {
        self.index.delete_namespace(&namespace_name(&ns));
    }

    fn listed(&mut self, ns: PartialObjectMeta<Namespace>) -> Option<String> {
        live(&ns).then(|| namespace_name(&ns))
    }

    fn reset(&mut self, listed: Vec<String>) {
        self.index.reset_namespaces(listed);
    }
}

/// The ClusterProperty watch selects `cluster.clusterset.k8s.io` by name;
/// any other property is ignored all the same.
impl IndexResource<ClusterProperty> for Ingest {
    type Listed = OwnCluster;

    fn apply(&mut self, property: ClusterProperty) {
        if is_cluster_id(&property) {
            self.index
                .set_own_cluster(OwnCluster::from_property(&property.spec.value));
        }
    }

    fn delete(&mut self, property: ClusterProperty) {
        if is_cluster_id(&property) {
            self.index.set_own_cluster(no_cluster_id());
        }
    }

    fn listed(&mut self, property: ClusterProperty) -> Option<OwnCluster> {
        is_cluster_id(&property).then(|| OwnCluster::from_property(&property.spec.value))
    }

    fn reset(&mut self, listed: Vec<OwnCluster>) {
        let own = listed.into_iter().next().unwrap_or_else(no_cluster_id);
        self.index.set_own_cluster(own);
    }
}

fn is_cluster_id(property: &ClusterProperty) -> bool {
    property.metadata.name.as_deref() == Some(CLUSTER_ID_PROPERTY)
}

fn no_cluster_id() -> OwnCluster {
    OwnCluster::Unknown(format!(
        "the ClusterProperty {CLUSTER_ID_PROPERTY} does not exist in this cluster"
    ))
}

/// A namespace that is not terminating.
fn live(ns: &PartialObjectMeta<Namespace>) -> bool {
    ns.metadata.deletion_timestamp.is_none()
}

fn namespace_name(ns: &PartialObjectMeta<Namespace>) -> String {
    ns.metadata.name.clone().unwrap_or_default()
}

/// The typed ServiceImport of a stripped one; the error names the field,
/// from the object's root (`spec.ports[0].port: …`).
fn decode_import(object: &WatchedImport) -> Result<ServiceImport, String> {
    let spec = object
        .0
        .data
        .get("spec")
        .unwrap_or(&serde_json::Value::Null);
    let spec = serde_path_to_error::deserialize(spec).map_err(|error| {
        let path = error.path().to_string();
        match path.as_str() {
            "." => format!("spec: {}", error.inner()),
            _ => format!("spec.{path}: {}", error.inner()),
        }
    })?;
    Ok(ServiceImport {
        metadata: object.0.metadata.clone(),
        spec,
        status: None,
    })
}

fn import_ref(object: &WatchedImport) -> ServiceRef {
    ServiceRef::new(
        object.0.metadata.namespace.as_deref().unwrap_or("default"),
        object.0.metadata.name.as_deref().unwrap_or_default(),
    )
}

fn slice_key(slice: &EndpointSlice) -> SliceKey {
    SliceKey::new(
        slice.metadata.namespace.as_deref().unwrap_or_default(),
        slice.metadata.name.as_deref().unwrap_or_default(),
    )
}
