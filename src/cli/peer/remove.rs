//! `clusterset-dns peer remove`: deletes a peer Secret; with `--revoke`,
//! first deletes every anchor (and token Secret of an earlier release)
//! made for this cluster in the peer (after checking the peer kubeconfig
//! reaches the cluster the Secret names), so the credentials die with the
//! membership, before they expire. The peer-reader
//! ServiceAccount and role stay: other clusters' tokens use them.

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};

use super::cluster::{connect_local, connect_peer, delete_tokens};
use super::{PeerError, RemoveArgs};
use crate::peering::{self, ANNOTATION_CLUSTER_ID, ANNOTATION_PEER_NAMESPACE, read_identity};

/// Runs `peer remove` and returns what it did.
pub(super) async fn remove(args: &RemoveArgs) -> Result<String, PeerError> {
    let namespace = args.local.namespace.namespace.as_str();
    let name = args.name.as_str();
    let local = connect_local(&args.local).await?;
    let secrets: Api<Secret> = Api::namespaced(local.clone(), namespace);
    let secret = secrets
        .get_opt(name)
        .await
        .map_err(PeerError::kube(format!(
            "reading Secret {namespace}/{name} in this cluster"
        )))?
        .ok_or_else(|| {
            PeerError::Failed(format!(
                "no Secret {namespace}/{name} in this cluster (`peer list` shows the peers)"
            ))
        })?;
    let selector = &args.local.peers.peer_selector;
    if !peering::is_peer_secret(&secret, selector) {
        return Err(PeerError::Failed(format!(
            "Secret {namespace}/{name} is not a peer Secret (--peer-selector {selector} does not match it): left alone"
        )));
    }
    let mut out = String::new();
    if args.revoke {
        out += &revoke(args, &local, &secret).await?;
    }
    secrets
        .delete(name, &DeleteParams::default())
        .await
        .map_err(PeerError::kube(format!(
            "deleting Secret {namespace}/{name} in this cluster"
        )))?;
    out += &format!("this cluster: peer Secret {namespace}/{name} deleted\n");
    Ok(out)
}

/// Deletes this cluster's anchors (and an earlier release's token Secrets)
/// in the peer that `secret` names: their tokens stop working.
async fn revoke(
    args: &RemoveArgs,
    local: &kube::Client,
    secret: &Secret,
) -> Result<String, PeerError> {
    let peer = connect_peer(
        &args.local,
        &args.remote,
        "--revoke needs the peer: pass --peer-kubeconfig (and/or --peer-context); nothing was deleted",
    )
    .await?;
    let local_id = read_identity(local)
        .await
        .map_err(|e| PeerError::Failed(format!("this cluster's identity (--kubeconfig): {e}")))?;
    let peer_id = read_identity(&peer.client).await.map_err(|e| {
        PeerError::Failed(format!(
            "the peer's identity (--peer-kubeconfig): {e}; nothing was deleted"
        ))
    })?;
    let named = match secret.annotations().get(ANNOTATION_CLUSTER_ID) {
        Some(id) => Some(id.clone()),
        None => named_by_kubeconfig(secret).await,
    };
    match named {
        Some(id) if id == peer_id.cluster_id => {}
        Some(id) => {
            return Err(PeerError::Failed(format!(
                "Secret {} names cluster {id}, but --peer-kubeconfig reaches {}; nothing was deleted",
                secret.name_any(),
                peer_id.cluster_id
            )));
        }
        None => {
            return Err(PeerError::Failed(format!(
                "cannot tell which cluster Secret {} names (no {ANNOTATION_CLUSTER_ID} annotation, and the peer does not answer with it); nothing was deleted",
                secret.name_any()
            )));
        }
    }
    let peer_ns = args
        .remote
        .peer_namespace
        .as_deref()
        .or(secret
            .annotations()
            .get(ANNOTATION_PEER_NAMESPACE)
            .map(String::as_str))
        .unwrap_or(&args.local.namespace.namespace);
    let tokens: Api<Secret> = Api::namespaced(peer.client.clone(), peer_ns);
    let revoked = delete_tokens(&tokens, peer_ns, &local_id.cluster_id, None).await?;
    let mut out = String::new();
    for token in &revoked {
        out += &format!("peer: token of Secret {peer_ns}/{token} deleted (revoked)\n");
    }
    if revoked.is_empty() {
        out += &format!(
            "peer: no token for {} in {peer_ns} (nothing to revoke)\n",
            local_id.cluster_id
        );
    }
    Ok(out)
}

/// The cluster id the peer answers with through the Secret's own
/// kubeconfig, if it answers.
async fn named_by_kubeconfig(secret: &Secret) -> Option<String> {
    let (client, _) = peering::kubeconfig::client(peering::kubeconfig_data(secret))
        .await
        .ok()?;
    read_identity(&client).await.ok().map(|i| i.cluster_id)
}
