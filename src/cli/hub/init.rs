//! `hub init`: the hub-wide objects ([`crate::hub::objects::hub_objects`]),
//! and a check that the hub counts PublishedServices against quotas.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::{HubClusterArgs, PeerError, apply_all, connect_hub};
use crate::hub::objects::hub_objects;
use crate::hub::{MANAGED_BY, QUOTA};

/// The prefix of the namespace of the quota check, deleted after it (a new
/// one each time: the last may still be terminating).
const PROBE_NAMESPACE: &str = "clusterset-dns-hub-init-";

/// How long `hub init` waits for the hub's quota controller to count
/// PublishedServices: it discovers a new CRD about every 30 s.
const QUOTA_WAIT: Duration = Duration::from_secs(120);

/// Applies the hub's objects; returns a line for each.
pub(super) async fn init(args: &HubClusterArgs) -> Result<String, PeerError> {
    let hub = connect_hub(args).await?;
    let mut out = apply_all(&hub.client, &hub_objects()).await?;
    quota_counts_publications(&hub.client).await?;
    out += "hub: its quota controller counts PublishedServices\n";
    out += "hub: ready for members (clusterset-dns hub join)\n";
    Ok(out)
}

/// Waits until the hub's resource quota controller counts PublishedServices.
///
/// Every member's namespace has a quota on them, and the hub refuses a
/// member's write until its quota is counted. The controller counts a new
/// CRD only once it has discovered it; a quota made before that waits for
/// the controller's full resync (5 minutes by default). So a quota is made
/// afresh in a scratch namespace until one is counted: from then on, a
/// member's quota is counted as soon as `hub join` makes it.
async fn quota_counts_publications(client: &Client) -> Result<(), PeerError> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let scratch: Namespace = serde_json::from_value(json!({
        "metadata": {"generateName": PROBE_NAMESPACE, "labels": {"app.kubernetes.io/managed-by": MANAGED_BY}},
    }))
    .map_err(|e| PeerError::Failed(e.to_string()))?;
    let scratch = namespaces
        .create(&PostParams::default(), &scratch)
        .await
        .map_err(PeerError::kube(
            "creating a namespace for the quota check on the hub",
        ))?
        .name_any();
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &scratch);
    let probe: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": QUOTA},
        "spec": {"hard": {"count/publishedservices.clusterset-dns.io": "0"}},
    }))
    .map_err(|e| PeerError::Failed(e.to_string()))?;
    let deadline = Instant::now() + QUOTA_WAIT;
    let counted = loop {
        quotas.delete(QUOTA, &DeleteParams::default()).await.ok();
        match quotas.create(&PostParams::default(), &probe).await {
            Ok(_) => {}
            // The delete has not gone through yet: try again.
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => {
                return Err(PeerError::kube(format!(
                    "creating the quota check in {scratch}"
                ))(error));
            }
        }
        let tried = Instant::now() + Duration::from_secs(5);
        let mut counted = false;
        while !counted && Instant::now() < tried {
            tokio::time::sleep(Duration::from_millis(250)).await;
            counted = quotas
                .get_opt(QUOTA)
                .await
                .ok()
                .flatten()
                .and_then(|q| q.status?.used)
                .is_some_and(|used| used.contains_key("count/publishedservices.clusterset-dns.io"));
        }
        if counted || Instant::now() >= deadline {
            break counted;
        }
    };
    namespaces
        .delete(&scratch, &DeleteParams::default())
        .await
        .map_err(PeerError::kube(format!(
            "deleting namespace {scratch} on the hub"
        )))?;
    if counted {
        Ok(())
    } else {
        Err(PeerError::Failed(format!(
            "the hub does not count PublishedServices against quotas after {}s, and would refuse every member's writes: does the hub run kube-controller-manager (its resource quota controller)?",
            QUOTA_WAIT.as_secs()
        )))
    }
}
