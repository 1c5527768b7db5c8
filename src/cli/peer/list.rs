//! `clusterset-dns peer list`: every peer Secret, probed with its own
//! credentials, with what the controller recorded about it (its per-peer
//! Lease and its `PeerRefused` Events).

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::cluster::{check_peer, connect_local};
use super::rules::{self, PeerStatus, RefusalEvent, current_refusal};
use super::{ListArgs, Output, PeerError};
use crate::label_selector::LabelSelector;
use crate::peering::{self, ANNOTATION_CLUSTER_ID, PeerSecret, lease, reason};

/// Runs `peer list`.
pub(super) async fn list(args: &ListArgs) -> Result<String, PeerError> {
    let local = connect_local(&args.local).await?;
    let peers = inspect(
        &local,
        &args.local.namespace.namespace,
        &args.local.peers.peer_selector,
    )
    .await?;
    Ok(match args.output {
        Output::Table => {
            let mut table = rules::render_table(&peers);
            if let Some(warning) = peering::mesh_size_warning(peers.len()) {
                table.push_str(&format!("\nwarning: {warning}\n"));
            }
            table
        }
        Output::Json => {
            let mut text = serde_json::to_string_pretty(&peers)
                .map_err(|e| PeerError::Failed(format!("rendering JSON: {e}")))?;
            text.push('\n');
            text
        }
    })
}

/// The peer Secrets in `namespace`, each probed at once with its own
/// kubeconfig (all in parallel, each within the read timeout).
pub(super) async fn inspect(
    client: &Client,
    namespace: &str,
    selector: &LabelSelector,
) -> Result<Vec<PeerStatus>, PeerError> {
    let secrets = Api::<Secret>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&selector.to_string()))
        .await
        .map_err(PeerError::kube(format!(
            "listing peer Secrets in namespace {namespace}"
        )))?
        .items;
    let leases = leases(client, namespace).await?;
    let mut refusals = refusals(client, namespace).await?;
    let now = Timestamp::now();
    let probes = futures::future::join_all(secrets.iter().map(|secret| async move {
        match peering::kubeconfig::client(peering::kubeconfig_data(secret)).await {
            Ok((client, server)) => (Some(server), check_peer(&client).await),
            Err(error) => (None, Err(error.to_string())),
        }
    }))
    .await;
    let mut peers = Vec::new();
    for (secret, (server, answer)) in secrets.iter().zip(probes) {
        let name = secret.name_any();
        let lease = leases.get(&name);
        let events = refusals.remove(&name).unwrap_or_default();
        let refused = current_refusal(&events, changed_at(secret), lease.map(|l| l.1))
            .map(|e| e.note.clone());
        let (live, error) = match answer {
            Ok(identity) => (Some(identity), None),
            Err(error) => (None, Some(error)),
        };
        let cluster_id = live
            .as_ref()
            .map(|i| i.cluster_id.clone())
            .or_else(|| secret.annotations().get(ANNOTATION_CLUSTER_ID).cloned())
            .or_else(|| lease.map(|l| l.0.clone()));
        let read = PeerSecret::read(secret);
        peers.push(PeerStatus {
            name,
            cluster_id,
            clusterset: live.as_ref().map(|i| i.clusterset.clone()),
            server,
            healthy: live.is_some(),
            error,
            last_seen: lease.map(|l| l.1.to_string()),
            last_seen_seconds_ago: lease.map(|l| now.duration_since(l.1).as_secs()),
            refused,
            credential_expires: read.credential_expires.map(|t| t.to_string()),
            credential_expires_in_seconds: read
                .credential_expires
                .map(|t| t.as_second() - k8s_openapi::jiff::Timestamp::now().as_second()),
            // As the controller reads them (one that does not parse is
            // shown by its refusal).
            endpoint_cidrs: read
                .endpoint_ranges
                .as_ref()
                .ok()
                .and_then(Option::as_ref)
                .into_iter()
                .flatten()
                .map(ToString::to_string)
                .collect(),
            endpoint_cidrs_from: secret
                .annotations()
                .get(rules::ANNOTATION_ENDPOINT_CIDRS_FROM)
                .cloned(),
            any_endpoint: read
                .endpoint_ranges
                .as_ref()
                .is_ok_and(|ranges| ranges.as_ref().is_none_or(Vec::is_empty)),
        });
    }
    Ok(peers)
}

/// The controller's per-peer Leases: Secret name → (peer id, renew time).
async fn leases(
    client: &Client,
    namespace: &str,
) -> Result<BTreeMap<String, (String, Timestamp)>, PeerError> {
    let leases = Api::<Lease>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(lease::LEASE_SELECTOR))
        .await
        .map_err(PeerError::kube(format!(
            "listing the controller's peer Leases in namespace {namespace}"
        )))?
        .items;
    // A Lease that records no peer (see `lease::parse`) has nothing to
    // show for any Secret.
    Ok(leases
        .iter()
        .filter_map(|found| lease::parse(found).ok())
        .map(|peer| (peer.secret, (peer.peer_id, peer.renewed)))
        .collect())
}

/// The controller's `PeerRefused` Events, by Secret name.
async fn refusals(
    client: &Client,
    namespace: &str,
) -> Result<BTreeMap<String, Vec<RefusalEvent>>, PeerError> {
    let events = Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(PeerError::kube(format!(
            "listing Events in namespace {namespace}"
        )))?
        .items;
    let mut by_secret: BTreeMap<String, Vec<RefusalEvent>> = BTreeMap::new();
    for event in events {
        if event.reason.as_deref() != Some(reason::PEER_REFUSED) {
            continue;
        }
        let Some(regarding) = &event.regarding else {
            continue;
        };
        let (Some("Secret"), Some(name)) = (regarding.kind.as_deref(), &regarding.name) else {
            continue;
        };
        let at = event
            .series
            .as_ref()
            .map(|s| s.last_observed_time.0)
            .or_else(|| event.event_time.as_ref().map(|t| t.0))
            .or_else(|| event.deprecated_last_timestamp.as_ref().map(|t| t.0))
            .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0));
        let Some(at) = at else { continue };
        by_secret
            .entry(name.clone())
            .or_default()
            .push(RefusalEvent {
                at,
                note: event.note.clone().unwrap_or_default(),
            });
    }
    Ok(by_secret)
}

/// When a Secret last changed: its latest managed-fields time, else its
/// creation.
fn changed_at(secret: &Secret) -> Option<Timestamp> {
    secret
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|f| f.time.as_ref().map(|t| t.0))
        .chain(secret.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .max()
}
