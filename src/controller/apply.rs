//! Carries out planned writes on this cluster's apiserver: server-side
//! apply with our field manager (so apiserver defaults and other managers'
//! fields never fight ours), deletes with a uid precondition.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::lean::Lean;
use super::naming::FIELD_MANAGER;
use super::reconcile::{Kind, Write, export_status_object};
use crate::api::{ServiceExport, ServiceImport};

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

fn params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// Applies `object` (its status alone with `status`); the apiserver's
/// answer is decoded stripped, as the watches decode it, for the store.
async fn apply<K>(client: &Client, object: &K, status: bool) -> Result<Lean<K>, kube::Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope> + Serialize,
    K::DynamicType: Default,
    Lean<K>: Clone + DeserializeOwned + std::fmt::Debug,
{
    let namespace = object.meta().namespace.clone().unwrap_or_default();
    let name = object.meta().name.clone().unwrap_or_default();
    let api: Api<Lean<K>> = Api::namespaced(client.clone(), &namespace);
    // Server-side apply needs apiVersion and kind in the body.
    let mut body = serde_json::to_value(object).map_err(kube::Error::SerdeError)?;
    body["apiVersion"] = K::api_version(&Default::default()).into();
    body["kind"] = K::kind(&Default::default()).into();
    if status {
        // The status subresource ignores everything but `status`: send only
        // that (and the object's identity), not the spec again.
        let body = serde_json::json!({
            "apiVersion": body["apiVersion"],
            "kind": body["kind"],
            "metadata": {"name": name, "namespace": namespace},
            "status": body["status"],
        });
        api.patch_status(&name, &params(), &Patch::Apply(body))
            .await
    } else {
        api.patch(&name, &params(), &Patch::Apply(body)).await
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

/// Carries out one write.
pub async fn execute(client: &Client, write: &Write) -> Result<Written, WriteError> {
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
            apply(client, &**import, false)
                .await
                .map(Written::Import)
                .map_err(fail("apply", &ns, &name))
        }
        Write::ImportStatus(import) => {
            let (ns, name) = meta_of(&import.metadata);
            apply(client, &**import, true)
                .await
                .map(Written::Import)
                .map_err(fail("apply status of", &ns, &name))
        }
        Write::DerivedService(service) => {
            let (ns, name) = meta_of(&service.metadata);
            apply(client, &**service, false)
                .await
                .map(Written::Service)
                .map_err(fail("apply", &ns, &name))
        }
        Write::Slice(slice) => {
            let (ns, name) = meta_of(&slice.metadata);
            apply(client, &**slice, false)
                .await
                .map(Written::Slice)
                .map_err(fail("apply", &ns, &name))
        }
        Write::ExportStatus {
            service,
            conditions,
        } => {
            let export = export_status_object(service, conditions.clone());
            apply(client, &export, true)
                .await
                .map(Written::Export)
                .map_err(fail("apply status of", &service.namespace, &service.name))
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
                Kind::EndpointSlice => {
                    delete::<EndpointSlice>(client, namespace, name, uid.clone()).await
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
