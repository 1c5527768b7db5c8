//! Talking to the apiservers for `clusterset-dns peer`: clients from the
//! admin kubeconfigs and from peer Secrets, identities, and the probe that
//! tells whether a peer answers with a Secret's credentials.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use super::rules::{self, KubeconfigCluster};
use super::{FIELD_MANAGER, PeerError};
use crate::api::ServiceExport;
use crate::controller::connection::{Identity, identity};
use crate::error::Chain;

/// How long one read of a cluster may take.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A cluster reached with an admin kubeconfig.
pub struct Endpoint {
    /// The client.
    pub client: Client,
    /// What the kubeconfig says of the cluster.
    pub cluster: KubeconfigCluster,
    /// The flag it came from, for messages (`--kubeconfig`).
    pub flag: &'static str,
}

/// Reads the kubeconfig at `path` (default: `$KUBECONFIG`, else
/// `~/.kube/config`) and builds a client for `context` (default: the
/// current one). `flag` names the option in errors.
pub async fn connect(
    path: Option<&Path>,
    context: Option<&str>,
    flag: &'static str,
) -> Result<Endpoint, PeerError> {
    let failed = |e: String| PeerError::Failed(format!("{flag}: {e}"));
    let kubeconfig = match path {
        Some(path) => Kubeconfig::read_from(path),
        None => Kubeconfig::read(),
    }
    .map_err(|e| failed(Chain(&e).to_string()))?;
    let cluster = rules::kubeconfig_cluster(&kubeconfig, context).map_err(failed)?;
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| failed(Chain(&e).to_string()))?;
    let client = Client::try_from(config).map_err(|e| failed(Chain(&e).to_string()))?;
    Ok(Endpoint {
        client,
        cluster,
        flag,
    })
}

/// Connects to the peer named by `remote` (its kubeconfig defaults to this
/// cluster's, with `--peer-context`); `missing` is the error when neither
/// flag says which peer.
pub async fn connect_peer(
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
            .or(local.kubeconfig.as_deref()),
        remote.peer_context.as_deref(),
        "--peer-kubeconfig",
    )
    .await
}

/// A client from kubeconfig text (a peer Secret's `data.kubeconfig`), and
/// the server it names.
pub async fn client_from_text(kubeconfig: &[u8]) -> Result<(Client, String), String> {
    let text = std::str::from_utf8(kubeconfig).map_err(|_| "the kubeconfig is not UTF-8")?;
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|e| Chain(&e).to_string())?;
    let server = rules::kubeconfig_cluster(&kubeconfig, None)?.server;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| Chain(&e).to_string())?;
    let client = Client::try_from(config).map_err(|e| Chain(&e).to_string())?;
    Ok((client, server))
}

/// The cluster's identity (its ClusterProperties), within
/// [`READ_TIMEOUT`].
pub async fn read_identity(client: &Client) -> Result<Identity, String> {
    tokio::time::timeout(READ_TIMEOUT, identity(client))
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {READ_TIMEOUT:?}")))
}

/// What the controller does to a peer, once: read its identity, and list
/// one ServiceExport (the controller's probe). Fails on anything the
/// controller would fail on: no answer, bad credentials, a role without
/// these reads.
pub async fn probe(client: &Client) -> Result<Identity, String> {
    let identity = read_identity(client).await?;
    let exports: Api<ServiceExport> = Api::all(client.clone());
    tokio::time::timeout(READ_TIMEOUT, exports.list(&ListParams::default().limit(1)))
        .await
        .map_err(|_| format!("listing ServiceExports: no answer within {READ_TIMEOUT:?}"))?
        .map_err(|e| format!("listing ServiceExports: {}", Chain(&e)))?;
    Ok(identity)
}

/// Fails unless namespace `name` exists.
pub async fn require_namespace(endpoint: &Endpoint, name: &str) -> Result<(), PeerError> {
    let found = Api::<Namespace>::all(endpoint.client.clone())
        .get_opt(name)
        .await
        .map_err(PeerError::kube(format!(
            "reading namespace {name} ({})",
            endpoint.flag
        )))?;
    match found {
        Some(_) => Ok(()),
        None => Err(PeerError::Failed(format!(
            "namespace {name} does not exist in the cluster of {}: install the controller there (deploy/controller.yaml), or pass --namespace",
            endpoint.flag
        ))),
    }
}

/// Server-side applies `body` as [`FIELD_MANAGER`], not forced: a field
/// another manager set to another value is a conflict, reported.
pub async fn apply<K>(api: &Api<K>, name: &str, body: &serde_json::Value) -> Result<K, PeerError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let kind = body["kind"].as_str().unwrap_or("object");
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER),
        &Patch::Apply(body),
    )
    .await
    .map_err(PeerError::kube(format!("applying {kind} {name}")))
}
