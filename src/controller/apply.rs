//! Carries out planned writes on this cluster's apiserver: server-side
//! apply with our field manager (so apiserver defaults and other managers'
//! fields never fight ours), deletes with a uid precondition.
//!
//! Every write follows [`super::ownership`]'s rule: a forced apply only to
//! an object the plan has shown to be ours, with its uid as a precondition;
//! otherwise a create (POST), which leaves alone what it finds in the way
//! and refuses it unless that is ours. A plain apply would not do: it
//! merges into any object whose fields do not conflict.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::cluster::{ClusterData, LocalData};
use super::lean::Lean;
use super::naming::FIELD_MANAGER;
use super::ownership::{NOT_OURS, owns};
use super::reconcile::{Kind, Write, export_status_object};
use crate::api::ServiceRef;
use crate::api::{PublishedService, ServiceExport, ServiceImport};
use crate::watch::IndexResource;

/// What a successful write returned, for the local store (so the next plan
/// sees it before the watch event arrives), decoded as the watches decode
/// it.
#[derive(Debug)]
// Each value moves once, from the write to the store: boxing would only add
// an allocation.
#[allow(clippy::large_enum_variant)]
pub(super) enum Written {
    /// A ServiceImport as stored.
    Import(Lean<ServiceImport>),
    /// A derived Service as stored.
    Service(Lean<Service>),
    /// An MCS slice as stored.
    Slice(Lean<EndpointSlice>),
    /// A ServiceExport with its new status.
    Export(Lean<ServiceExport>),
    /// A PublishedService as stored.
    Published(Lean<PublishedService>),
    /// A published slice as stored.
    PublishedSlice(Lean<EndpointSlice>),
    /// Not written: an object that is not ours holds the name.
    Refused {
        /// Its kind.
        kind: Kind,
        /// Its name.
        name: String,
        /// Why ([`NOT_OURS`]).
        reason: &'static str,
    },
    /// An object was deleted (or was already gone).
    Deleted {
        /// Its kind.
        kind: Kind,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

impl Written {
    /// Puts what was written into the store its watch fills, as that watch
    /// will: the next plan starts from it before the watch event arrives.
    pub(super) fn land(self, local: &mut ClusterData, local_only: &mut LocalData) {
        match self {
            Self::Import(import) => local_only.imports.apply(import),
            Self::Service(service) => local.services.apply(service),
            Self::Slice(slice) => local.mcs_slices.apply(slice),
            Self::Export(export) => local.exports.apply(export),
            Self::Published(published) => local_only.published.apply(published),
            Self::PublishedSlice(slice) => local_only.published.apply(slice),
            Self::Refused { .. } => {}
            Self::Deleted {
                kind,
                namespace,
                name,
            } => kind.forget(local, local_only, &namespace, &name),
        }
    }
}

// Here, beside `Written`: which store a write lands in is the writer's
// rule, shared with the tests that play the apiserver.
impl Kind {
    /// Forgets `namespace/name`, of this kind, deleted by our own write,
    /// from the store its watch fills (so the next plan does not delete it
    /// again).
    pub(super) fn forget(
        self,
        local: &mut ClusterData,
        local_only: &mut LocalData,
        namespace: &str,
        name: &str,
    ) {
        match self {
            Self::ServiceImport | Self::ServiceImportStatus => {
                local_only.imports.forget(namespace, name)
            }
            Self::Service => local.services.forget(namespace, name),
            Self::EndpointSlice => local.mcs_slices.forget(namespace, name),
            Self::PublishedService => local_only.published.forget_service(name),
            Self::PublishedSlice => local_only.published.forget_slice(name),
            // The export is the user's: none is ever deleted.
            Self::ServiceExportStatus => {}
        }
    }
}

/// Why a write failed.
#[derive(Debug, thiserror::Error)]
#[error("{op} {kind} {namespace}/{name}")]
pub(super) struct WriteError {
    op: &'static str,
    kind: &'static str,
    namespace: String,
    name: String,
    #[source]
    source: kube::Error,
}

impl WriteError {
    /// Whether the namespace is being deleted: nothing to write there.
    pub(super) fn namespace_terminating(&self) -> bool {
        matches!(&self.source, kube::Error::Api(status)
            if status.message.contains("being terminated") || status.reason == "NamespaceTerminating")
    }
}

/// What an apply found: the object as stored, or one in the way that is
/// not ours.
enum Applied<K: Compactable> {
    Stored(Lean<K>),
    NotOurs,
}

/// Shorthand for the bounds of the kinds the controller applies.
trait Compactable:
    Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()> + Serialize
{
}

impl<K> Compactable for K where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()> + Serialize
{
}

/// How a write reaches the apiserver, by the ownership rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    /// Forced server-side apply to an object the plan showed is ours: the
    /// uid in the body makes the apiserver refuse any other object.
    ForcedApply,
    /// POST of the whole object: nothing of ours is known at the name, so
    /// the write must only ever create; what is in the way is left alone.
    Create,
    /// Server-side apply of the status subresource, forced only with a
    /// uid. A subresource write never creates: its object exists.
    Status {
        /// Whether the apply is forced (the object's uid is known).
        force: bool,
    },
}

/// How a write of an object (its status alone with `status`) whose uid the
/// plan knows (`uid`: it showed the object is ours) or not reaches the
/// apiserver.
fn method(status: bool, uid: Option<&str>) -> Method {
    match (status, uid) {
        (true, uid) => Method::Status {
            force: uid.is_some(),
        },
        (false, Some(_)) => Method::ForcedApply,
        (false, None) => Method::Create,
    }
}

/// Writes `object` (its status alone with `status`) by [`method`]: a
/// forced apply, a status apply, or a create, which on finding an object at
/// the name reads it back: kept in the store if ours (our own earlier
/// write, not yet seen by the watch), refused if not. The apiserver's
/// answer is decoded stripped, as the watches decode it, for the store.
async fn apply<K>(
    client: &Client,
    object: &K,
    status: bool,
    kind: Kind,
    service: &ServiceRef,
) -> Result<Applied<K>, kube::Error>
where
    K: Compactable,
    Lean<K>: Clone + DeserializeOwned + std::fmt::Debug,
{
    let namespace = object.meta().namespace.clone().unwrap_or_default();
    let name = object.meta().name.clone().unwrap_or_default();
    let uid = object.meta().uid.clone();
    let api: Api<Lean<K>> = Api::namespaced(client.clone(), &namespace);
    // Server-side apply needs apiVersion and kind in the body; the create
    // sends the same body, so it writes exactly what an apply would.
    let body = crate::api::apply_body(object).map_err(kube::Error::SerdeError)?;
    match method(status, uid.as_deref()) {
        Method::Status { force } => {
            let params = match force {
                true => PatchParams::apply(FIELD_MANAGER).force(),
                false => PatchParams::apply(FIELD_MANAGER),
            };
            // The status subresource ignores everything but `status`: send
            // only that (and the object's identity), not the spec again.
            let mut metadata = serde_json::json!({"name": name, "namespace": namespace});
            if let Some(uid) = &uid {
                metadata["uid"] = uid.as_str().into();
            }
            let body = serde_json::json!({
                "apiVersion": body["apiVersion"],
                "kind": body["kind"],
                "metadata": metadata,
                "status": body["status"],
            });
            api.patch_status(&name, &params, &Patch::Apply(body))
                .await
                .map(Applied::Stored)
        }
        Method::ForcedApply => api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
            .map(Applied::Stored),
        Method::Create => {
            let raw: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &namespace, &ApiResource::erase::<K>(&()));
            let object: DynamicObject =
                serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
            // Our manager on the create, so the fields it sets are ours
            // from the start (see `adopt` for the operation it records).
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PostParams::default()
            };
            match raw.create(&params, &object).await {
                Ok(created) => adopt(&api, &raw, created).await.map(Applied::Stored),
                // Something holds the name: never written to, only read.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    match api.get_opt(&name).await? {
                        Some(live) if owns(kind, &live, service) => Ok(Applied::Stored(live)),
                        Some(_) => Ok(Applied::NotOurs),
                        None => Err(kube::Error::Api(status)),
                    }
                }
                Err(error) => Err(error),
            }
        }
    }
}

/// Conflicts (the object changed since read) retried by [`adopt`] before
/// it gives up.
const ADOPT_RETRIES: usize = 2;

/// Turns the fields our create recorded into fields we applied, and
/// returns the object as stored.
///
/// A create records its fields under our manager with operation `Update`;
/// the forced applies that follow add a second, `Apply`, entry. Each field
/// is then owned twice, and a field an apply stops sending stays, held by
/// the `Update` entry (a dropped port or label would never go). Relabelling
/// the entry `Apply` makes the applies its sole owner. The patch carries
/// the uid and resourceVersion, so it changes nothing but that entry of
/// this very object. If it cannot be done, the object is deleted again
/// (by uid) and the error returned: the next round creates it afresh
/// rather than keep fields that cannot be removed.
async fn adopt<K>(
    api: &Api<Lean<K>>,
    raw: &Api<DynamicObject>,
    created: DynamicObject,
) -> Result<Lean<K>, kube::Error>
where
    K: Compactable,
    Lean<K>: Clone + DeserializeOwned + std::fmt::Debug,
{
    let name = created.metadata.name.clone().unwrap_or_default();
    let uid = created.metadata.uid.clone();
    let mut current = created;
    let mut retries = 0;
    let error = loop {
        let Some(patch) = adoption_patch(&current.metadata) else {
            // Nothing recorded as an update of ours: already as wanted.
            let value = serde_json::to_value(current).map_err(kube::Error::SerdeError)?;
            return serde_json::from_value(value).map_err(kube::Error::SerdeError);
        };
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(stored) => return Ok(stored),
            Err(kube::Error::Api(status)) if status.code == 409 && retries < ADOPT_RETRIES => {
                retries += 1;
                match raw.get_opt(&name).await {
                    Ok(Some(live)) if live.metadata.uid == uid => current = live,
                    // Gone or replaced: nothing of ours left to fix.
                    Ok(_) => return Err(kube::Error::Api(status)),
                    Err(error) => break error,
                }
            }
            Err(error) => break error,
        }
    };
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    if let Err(undo) = raw.delete(&name, &params).await {
        tracing::warn!(
            name,
            error = %crate::error::Chain(&undo),
            "deleting an object whose fields could not be adopted"
        );
    }
    Err(error)
}

/// The merge patch that relabels our manager's `Update` entry of the
/// object (not a subresource's) as `Apply`, with the object's uid and
/// resourceVersion as preconditions; `None` when there is no such entry,
/// or when an `Apply` entry of ours exists already (two entries of one
/// manager and operation are not valid).
fn adoption_patch(meta: &ObjectMeta) -> Option<serde_json::Value> {
    let ours = |entry: &ManagedFieldsEntry, operation: &str| {
        entry.manager.as_deref() == Some(FIELD_MANAGER)
            && entry.operation.as_deref() == Some(operation)
            && entry.subresource.as_deref().unwrap_or_default().is_empty()
    };
    // Without both preconditions the patch could land on another object.
    let (uid, resource_version) = (meta.uid.as_ref()?, meta.resource_version.as_ref()?);
    let mut entries = meta.managed_fields.clone()?;
    if entries.iter().any(|entry| ours(entry, "Apply")) {
        return None;
    }
    let update = entries.iter_mut().find(|entry| ours(entry, "Update"))?;
    update.operation = Some("Apply".to_owned());
    Some(serde_json::json!({
        "metadata": {
            "uid": uid,
            "resourceVersion": resource_version,
            "managedFields": entries,
        }
    }))
}

async fn delete<K>(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: Option<String>,
) -> Result<(), kube::Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        // Already gone, or replaced by an object with another uid: either
        // way not ours to delete any more.
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(error) => Err(error),
    }
}

/// What the store learns from an apply.
fn outcome<K: Compactable>(
    applied: Applied<K>,
    kind: Kind,
    name: &str,
    stored: fn(Lean<K>) -> Written,
) -> Written {
    match applied {
        Applied::Stored(object) => stored(object),
        Applied::NotOurs => Written::Refused {
            kind,
            name: name.to_owned(),
            reason: NOT_OURS,
        },
    }
}

/// Carries out one write of `service`'s plan.
pub(super) async fn execute(
    client: &Client,
    service: &ServiceRef,
    write: &Write,
) -> Result<Written, WriteError> {
    let kind = write.kind();
    let fail = |op: &'static str, namespace: &str, name: &str| {
        let namespace = namespace.to_owned();
        let name = name.to_owned();
        move |source| WriteError {
            op,
            kind: kind.as_str(),
            namespace,
            name,
            source,
        }
    };
    let meta_of = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        (
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        )
    };
    match write {
        Write::Import(import) => {
            let (ns, name) = meta_of(&import.metadata);
            apply(client, &**import, false, kind, service)
                .await
                .map(|applied| outcome(applied, kind, &name, Written::Import))
                .map_err(fail("apply", &ns, &name))
        }
        Write::ImportStatus(import) => {
            let (ns, name) = meta_of(&import.metadata);
            apply(client, &**import, true, kind, service)
                .await
                .map(|applied| outcome(applied, kind, &name, Written::Import))
                .map_err(fail("apply status of", &ns, &name))
        }
        Write::DerivedService(derived) => {
            let (ns, name) = meta_of(&derived.metadata);
            apply(client, &**derived, false, kind, service)
                .await
                .map(|applied| outcome(applied, kind, &name, Written::Service))
                .map_err(fail("apply", &ns, &name))
        }
        Write::Slice(slice) => {
            let (ns, name) = meta_of(&slice.metadata);
            apply(client, &**slice, false, kind, service)
                .await
                .map(|applied| outcome(applied, kind, &name, Written::Slice))
                .map_err(fail("apply", &ns, &name))
        }
        Write::Published(published) => {
            let (ns, name) = meta_of(&published.metadata);
            apply(client, &**published, false, kind, service)
                .await
                .map(|applied| outcome(applied, kind, &name, Written::Published))
                .map_err(fail("apply", &ns, &name))
        }
        Write::PublishedSlice(slice) => {
            let (ns, name) = meta_of(&slice.metadata);
            apply(client, &**slice, false, kind, service)
                .await
                .map(|applied| outcome(applied, kind, &name, Written::PublishedSlice))
                .map_err(fail("apply", &ns, &name))
        }
        Write::ExportStatus {
            service: exported,
            conditions,
            uid,
        } => {
            let mut export = export_status_object(exported, conditions.clone());
            export.metadata.uid = uid.clone();
            apply(client, &export, true, kind, service)
                .await
                .map(|applied| outcome(applied, kind, &exported.name, Written::Export))
                .map_err(fail("apply status of", &exported.namespace, &exported.name))
        }
        Write::Delete {
            kind,
            namespace,
            name,
            uid,
        } => {
            let result = match kind {
                Kind::ServiceImport | Kind::ServiceImportStatus => {
                    delete::<ServiceImport>(client, namespace, name, uid.clone()).await
                }
                Kind::Service => delete::<Service>(client, namespace, name, uid.clone()).await,
                Kind::EndpointSlice | Kind::PublishedSlice => {
                    delete::<EndpointSlice>(client, namespace, name, uid.clone()).await
                }
                Kind::PublishedService => {
                    delete::<PublishedService>(client, namespace, name, uid.clone()).await
                }
                Kind::ServiceExportStatus => Ok(()),
            };
            result
                .map(|()| Written::Deleted {
                    kind: *kind,
                    namespace: namespace.clone(),
                    name: name.clone(),
                })
                .map_err(fail("delete", namespace, name))
        }
    }
}

#[cfg(test)]
mod tests;
