//! Carries out planned writes on this cluster's apiserver: server-side
//! apply with our field manager (so apiserver defaults and other managers'
//! fields never fight ours), deletes with a uid precondition.
//!
//! Every apply follows [`super::ownership`]'s rule: forced only to an
//! object the plan has shown to be ours, with its uid as a precondition; a
//! create otherwise, which refuses what it finds in the way unless that is
//! ours.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::lean::Lean;
use super::naming::FIELD_MANAGER;
use super::ownership::{NOT_OURS, owns};
use super::reconcile::{Kind, Write, export_status_object};
use crate::api::{PublishedService, ServiceExport, ServiceImport};
use crate::model::ServiceRef;

/// What a successful write returned, for the local store (so the next plan
/// sees it before the watch event arrives), decoded as the watches decode
/// it.
#[derive(Debug)]
// Each value moves once, from the write to the store: boxing would only add
// an allocation.
#[allow(clippy::large_enum_variant)]
pub enum Written {
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

/// Why a write failed.
#[derive(Debug, thiserror::Error)]
#[error("{op} {kind} {namespace}/{name}")]
pub struct WriteError {
    op: &'static str,
    kind: &'static str,
    namespace: String,
    name: String,
    #[source]
    source: kube::Error,
}

impl WriteError {
    /// Whether the namespace is being deleted: nothing to write there.
    pub fn namespace_terminating(&self) -> bool {
        matches!(&self.source, kube::Error::Api(status)
            if status.message.contains("being terminated") || status.reason == "NamespaceTerminating")
    }

    /// Whether the apiserver refused on permissions (RBAC).
    pub fn forbidden(&self) -> bool {
        matches!(&self.source, kube::Error::Api(status) if status.code == 403)
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

/// Applies `object` (its status alone with `status`) by the ownership
/// rule: with a uid (the plan showed the live object is ours) the apply is
/// forced, and the uid in the body makes the apiserver refuse any other
/// object; without one it is a plain apply, and a conflict means some
/// object holds the name: it is read back, and kept in the store if ours,
/// refused if not. The apiserver's answer is decoded stripped, as the
/// watches decode it, for the store.
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
    let params = match uid {
        Some(_) => PatchParams::apply(FIELD_MANAGER).force(),
        None => PatchParams::apply(FIELD_MANAGER),
    };
    // Server-side apply needs apiVersion and kind in the body.
    let body = crate::api::apply_body(object).map_err(kube::Error::SerdeError)?;
    if status {
        // The status subresource ignores everything but `status`: send only
        // that (and the object's identity), not the spec again.
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
        return api
            .patch_status(&name, &params, &Patch::Apply(body))
            .await
            .map(Applied::Stored);
    }
    match api.patch(&name, &params, &Patch::Apply(body)).await {
        Ok(stored) => Ok(Applied::Stored(stored)),
        // A create that met an object: ours (our own earlier write, not
        // yet seen by the watch) is stored, anything else refused.
        Err(kube::Error::Api(status)) if uid.is_none() && status.code == 409 => {
            match api.get_opt(&name).await? {
                Some(live) if owns(kind, &live, service) => Ok(Applied::Stored(live)),
                Some(_) => Ok(Applied::NotOurs),
                None => Err(kube::Error::Api(status)),
            }
        }
        Err(error) => Err(error),
    }
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
pub async fn execute(
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
