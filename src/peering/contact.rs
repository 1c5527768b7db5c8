//! Reaching a peer: its identity (KEP-2149 ClusterProperties) and the
//! health probe. The controller reads a peer's identity before it watches
//! anything and then probes it again and again; `peer add` and `peer list`
//! run the same two reads once.

use std::time::Duration;

use kube::Client;
use kube::api::Api;

use crate::api::well_known::{CLUSTER_ID_PROPERTY, CLUSTERSET_PROPERTY};
use crate::api::{ClusterProperty, ServiceExport};
use crate::watch::{self, ProbeError};

/// How long reading a cluster's identity may take.
pub const IDENTITY_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the controller probes a peer.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(2);
/// How long one probe may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// What a cluster says about itself (KEP-2149 ClusterProperties).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `cluster.clusterset.k8s.io`.
    pub cluster_id: String,
    /// `clusterset.k8s.io`.
    pub clusterset: String,
}

/// Reads a cluster's identity, waiting as long as the client does (see
/// [`read_identity`] for a bounded read).
pub async fn identity(client: &Client) -> Result<Identity, String> {
    let api: Api<ClusterProperty> = Api::all(client.clone());
    let read = |name: &'static str| {
        let api = api.clone();
        async move {
            match api.get_opt(name).await {
                Ok(Some(property)) => Ok(property.spec.value),
                Ok(None) => Err(format!("ClusterProperty {name} does not exist")),
                Err(error) => Err(format!(
                    "reading ClusterProperty {name}: {}",
                    crate::error::Chain(&error)
                )),
            }
        }
    };
    Ok(Identity {
        cluster_id: read(CLUSTER_ID_PROPERTY).await?,
        clusterset: read(CLUSTERSET_PROPERTY).await?,
    })
}

/// Reads a cluster's identity within [`IDENTITY_TIMEOUT`].
pub async fn read_identity(client: &Client) -> Result<Identity, String> {
    tokio::time::timeout(IDENTITY_TIMEOUT, identity(client))
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {IDENTITY_TIMEOUT:?}")))
}

/// The health probe: lists one ServiceExport, within `timeout`. Proof that
/// the peer answers, authorizes these credentials and serves the
/// ServiceExport API, independent of whether its watches happen to deliver
/// events.
pub async fn probe(client: &Client, timeout: Duration) -> Result<(), ProbeError> {
    watch::probe(&Api::<ServiceExport>::all(client.clone()), timeout).await
}
