//! Talking to the apiservers for `clusterset-dns peer`: clients from the
//! admin kubeconfigs, and whether a peer answers with a Secret's
//! credentials as the controller needs it to (through the peer contract,
//! [`crate::peering`]).

use std::path::Path;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::config::KubeConfigOptions;
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::{FIELD_MANAGER, PeerError, reader};
use crate::cluster_args;
use crate::error::Chain;
use crate::peering::contact::PROBE_TIMEOUT;
use crate::peering::kubeconfig::{KubeconfigCluster, kubeconfig_cluster};
use crate::peering::{self, Identity};

/// A cluster reached with an admin kubeconfig.
pub(in crate::cli) struct Endpoint {
    /// The client.
    pub(in crate::cli) client: Client,
    /// What the kubeconfig says of the cluster.
    pub(in crate::cli) cluster: KubeconfigCluster,
}

/// Reads the kubeconfig at `path` (default: `$KUBECONFIG`, else
/// `~/.kube/config`) and builds a client for `context` (default: the
/// current one). `flag` names the option in errors.
pub(in crate::cli) async fn connect(
    path: Option<&Path>,
    context: Option<&str>,
    flag: &'static str,
) -> Result<Endpoint, PeerError> {
    let failed = |e: String| PeerError::Failed(format!("{flag}: {e}"));
    let kubeconfig = cluster_args::read_kubeconfig(path).map_err(|e| failed(e.to_string()))?;
    let cluster = kubeconfig_cluster(&kubeconfig, context).map_err(failed)?;
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| failed(Chain(&e).to_string()))?;
    let client = Client::try_from(config).map_err(|e| failed(Chain(&e).to_string()))?;
    Ok(Endpoint { client, cluster })
}

/// Connects to this cluster, as `local` names it, in the order every
/// subcommand follows ([`cluster_args::client_config`]).
pub(super) async fn connect_local(local: &super::LocalArgs) -> Result<Client, PeerError> {
    let failed = |e: String| PeerError::Failed(format!("--kubeconfig: {e}"));
    let (config, _) = cluster_args::client_config(
        local.cluster.kubeconfig.as_deref(),
        local.context.as_deref(),
    )
    .await
    .map_err(|e| failed(e.to_string()))?;
    Client::try_from(config).map_err(|e| failed(Chain(&e).to_string()))
}

/// Deletes the Secrets in `tokens` (the peer's namespace `namespace`) that
/// hold or anchor a token made for the cluster `reader_id` (anchors, and an
/// earlier release's token Secrets), except `keep` (the anchor just made);
/// returns their names. Deleting one revokes its token.
pub(super) async fn delete_tokens(
    tokens: &Api<Secret>,
    namespace: &str,
    reader_id: &str,
    keep: Option<&str>,
) -> Result<Vec<String>, PeerError> {
    let found = tokens
        .list(&ListParams::default().labels(&format!("{}={reader_id}", reader::LABEL_READER_FOR)))
        .await
        .map_err(PeerError::kube(format!(
            "listing the token Secrets for {reader_id} in the peer's namespace {namespace}"
        )))?
        .items;
    let mut deleted = Vec::new();
    for name in found.iter().map(ResourceExt::name_any) {
        if keep == Some(name.as_str()) {
            continue;
        }
        tokens
            .delete(&name, &DeleteParams::default())
            .await
            .map_err(PeerError::kube(format!(
                "deleting token Secret {namespace}/{name} in the peer"
            )))?;
        deleted.push(name);
    }
    Ok(deleted)
}

/// Connects to the peer named by `remote` (its kubeconfig defaults to this
/// cluster's, with `--peer-context`); `missing` is the error when neither
/// flag says which peer.
pub(super) async fn connect_peer(
    local: &super::LocalArgs,
    remote: &super::RemoteArgs,
    missing: &str,
) -> Result<Endpoint, PeerError> {
    if remote.peer_kubeconfig.is_none() && remote.peer_context.is_none() {
        return Err(PeerError::Failed(missing.to_owned()));
    }
    connect(
        remote
            .peer_kubeconfig
            .as_deref()
            .or(local.cluster.kubeconfig.as_deref()),
        remote.peer_context.as_deref(),
        "--peer-kubeconfig",
    )
    .await
}

/// What the controller needs of a peer, checked once: its identity
/// ([`peering::read_identity`]), then the controller's health probe
/// ([`peering::probe`], with its timeout). Fails on anything the controller
/// would fail on: no answer, bad credentials, a role without these reads.
pub(super) async fn check_peer(client: &Client) -> Result<Identity, String> {
    let identity = peering::read_identity(client).await?;
    peering::probe(client, PROBE_TIMEOUT)
        .await
        .map_err(|e| format!("listing ServiceExports: {e}"))?;
    Ok(identity)
}

/// Fails unless namespace `name` exists.
pub(super) async fn require_namespace(local: &Client, name: &str) -> Result<(), PeerError> {
    let found = Api::<Namespace>::all(local.clone())
        .get_opt(name)
        .await
        .map_err(PeerError::kube(format!(
            "reading namespace {name} (--kubeconfig)"
        )))?;
    match found {
        Some(_) => Ok(()),
        None => Err(PeerError::Failed(format!(
            "namespace {name} does not exist in the cluster of --kubeconfig: install the controller there (deploy/controller.yaml), or pass --namespace"
        ))),
    }
}

/// Server-side applies `body` as [`FIELD_MANAGER`], not forced: a field
/// another manager set to another value is a conflict, reported.
pub(super) async fn apply<K>(
    api: &Api<K>,
    name: &str,
    body: &serde_json::Value,
) -> Result<K, PeerError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    apply_with(api, name, body, PatchParams::apply(FIELD_MANAGER)).await
}

/// Applies `body` as [`apply`] does, forced: for the reader's roles, which
/// bear our names and whose rules an earlier install (`kubectl apply -k
/// deploy`, or an earlier release's `peer add`) may hold.
pub(super) async fn apply_forced<K>(
    api: &Api<K>,
    name: &str,
    body: &serde_json::Value,
) -> Result<K, PeerError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    apply_with(api, name, body, PatchParams::apply(FIELD_MANAGER).force()).await
}

async fn apply_with<K>(
    api: &Api<K>,
    name: &str,
    body: &serde_json::Value,
    params: PatchParams,
) -> Result<K, PeerError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let kind = body["kind"].as_str().unwrap_or("object");
    api.patch(name, &params, &Patch::Apply(body))
        .await
        .map_err(PeerError::kube(format!("applying {kind} {name}")))
}
