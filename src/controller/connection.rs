//! Watches on one cluster, as tasks that send their events to the
//! reconciler's single loop.
//!
//! Each cluster gets the watches its role needs ([`Scope`]): this cluster
//! watches everything the controller reads or writes; a peer only what it
//! publishes (its ServiceExports, its Services except the derived ones, and
//! the MCS slices it mirrored itself, selected on the server by `source-cluster=<peer id>` and
//! our managed-by label: one cheap watch instead of every slice). Peers also
//! get a liveness probe, because a hung connection does not always end a
//! watch with an error: the health probe of the peer contract
//! ([`crate::peering::probe`]).

use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::Client;
use kube::api::Api;
use kube::runtime::watcher::{self, Event as WatcherEvent};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::lean::Lean;
use super::naming::{LABEL_APP_MANAGED_BY, MANAGED_BY};
use crate::api::well_known::{
    LABEL_KUBERNETES_SERVICE_NAME, LABEL_MANAGED_BY, LABEL_SOURCE_CLUSTER,
};
use crate::api::{ServiceExport, ServiceImport};
use crate::{peering, watch};

/// Which cluster an event is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClusterKey {
    /// This cluster.
    Local,
    /// A peer, by the name of its Secret, and the generation of its
    /// connection (a rotated Secret starts a new one beside the old).
    Peer {
        /// The Secret's name.
        secret: String,
        /// The connection's generation.
        generation: u64,
    },
}

/// A watch event of one kind.
#[derive(Debug)]
// Events move once through the channel; boxing would add an allocation per
// event for nothing.
#[allow(clippy::large_enum_variant)]
pub enum WatchEvent {
    /// ServiceExports.
    Exports(Result<WatcherEvent<Lean<ServiceExport>>, watcher::Error>),
    /// Services.
    Services(Result<WatcherEvent<Lean<Service>>, watcher::Error>),
    /// MCS EndpointSlices managed by clusterset-dns.
    McsSlices(Result<WatcherEvent<Lean<EndpointSlice>>, watcher::Error>),
    /// Kubernetes EndpointSlices of local Services (local only).
    KubernetesSlices(Result<WatcherEvent<Lean<EndpointSlice>>, watcher::Error>),
    /// ServiceImports (local only).
    Imports(Result<WatcherEvent<Lean<ServiceImport>>, watcher::Error>),
    /// Namespaces (local only).
    Namespaces(Result<WatcherEvent<Namespace>, watcher::Error>),
    /// ServiceCIDRs (local only): which IP families Services can have.
    ServiceCidrs(Result<WatcherEvent<ServiceCIDR>, watcher::Error>),
    /// Nodes (local only): the zones local-first hints name, the addresses
    /// refused as peer endpoints.
    Nodes(Result<WatcherEvent<Lean<Node>>, watcher::Error>),
}

/// What a cluster task reports.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // as for WatchEvent
pub enum Report {
    /// A watch event.
    Watch(ClusterKey, WatchEvent),
    /// A peer's liveness probe result.
    Probe(ClusterKey, Result<(), String>),
    /// A peer's probe found it answering with another cluster id than the
    /// one its watches were started for.
    Identity(ClusterKey, peering::Identity),
    /// A peer Secret changed (local cluster).
    Secrets(Result<WatcherEvent<k8s_openapi::api::core::v1::Secret>, watcher::Error>),
}

/// Which watches a cluster gets.
#[derive(Debug, Clone)]
pub enum Scope {
    /// This cluster: everything read or written.
    Local,
    /// A peer with this cluster id: what it publishes.
    Peer {
        /// Its cluster id (selects its mirrored slices).
        id: String,
        /// How often to probe it.
        probe_interval: Duration,
        /// How long a probe may take.
        probe_timeout: Duration,
    },
}

/// The running watches of one cluster; dropping it stops them.
#[derive(Debug)]
pub struct Connection {
    tasks: Vec<JoinHandle<()>>,
}

impl Connection {
    /// Stops `task` with the connection.
    pub fn adopt(&mut self, task: JoinHandle<()>) {
        self.tasks.push(task);
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn forward<K, S>(
    key: ClusterKey,
    stream: S,
    wrap: fn(Result<WatcherEvent<K>, watcher::Error>) -> WatchEvent,
    reports: mpsc::Sender<Report>,
) -> JoinHandle<()>
where
    S: Stream<Item = Result<WatcherEvent<K>, watcher::Error>> + Send + 'static,
    K: Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if reports
                .send(Report::Watch(key.clone(), wrap(event)))
                .await
                .is_err()
            {
                return;
            }
        }
    })
}

/// Starts the watches of one cluster.
pub fn connect(
    client: Client,
    key: ClusterKey,
    scope: Scope,
    reports: mpsc::Sender<Report>,
) -> Connection {
    let all = watcher::Config::default().page_size(5_000);
    let ours = format!("{LABEL_MANAGED_BY}={MANAGED_BY}");
    // Here the derived Services are ours to keep current; a peer's derived
    // Services are never exported, so they stay on the peer's side of the
    // wire (at scale, most of a peer's Services).
    let services = match scope {
        Scope::Local => all.clone(),
        Scope::Peer { .. } => all
            .clone()
            .labels(&format!("{LABEL_APP_MANAGED_BY}!={MANAGED_BY}")),
    };
    let mut tasks = vec![
        forward(
            key.clone(),
            watch::stream(Api::<Lean<ServiceExport>>::all(client.clone()), all.clone()),
            WatchEvent::Exports,
            reports.clone(),
        ),
        forward(
            key.clone(),
            watch::stream(Api::<Lean<Service>>::all(client.clone()), services),
            WatchEvent::Services,
            reports.clone(),
        ),
    ];
    match scope {
        Scope::Local => {
            tasks.push(forward(
                key.clone(),
                watch::stream(
                    Api::<Lean<EndpointSlice>>::all(client.clone()),
                    all.clone().labels(&ours),
                ),
                WatchEvent::McsSlices,
                reports.clone(),
            ));
            tasks.push(forward(
                key.clone(),
                watch::stream(
                    Api::<Lean<EndpointSlice>>::all(client.clone()),
                    all.clone().labels(&format!(
                        "{LABEL_KUBERNETES_SERVICE_NAME},{LABEL_MANAGED_BY}!={MANAGED_BY}"
                    )),
                ),
                WatchEvent::KubernetesSlices,
                reports.clone(),
            ));
            tasks.push(forward(
                key.clone(),
                watch::stream(Api::<Lean<ServiceImport>>::all(client.clone()), all.clone()),
                WatchEvent::Imports,
                reports.clone(),
            ));
            tasks.push(forward(
                key.clone(),
                watch::stream(Api::<Namespace>::all(client.clone()), all.clone()),
                WatchEvent::Namespaces,
                reports.clone(),
            ));
            tasks.push(forward(
                key.clone(),
                watch::stream(Api::<ServiceCIDR>::all(client.clone()), all.clone()),
                WatchEvent::ServiceCidrs,
                reports.clone(),
            ));
            tasks.push(forward(
                key,
                watch::stream(Api::<Lean<Node>>::all(client), all),
                WatchEvent::Nodes,
                reports,
            ));
        }
        Scope::Peer {
            id,
            probe_interval,
            probe_timeout,
        } => {
            tasks.push(forward(
                key.clone(),
                watch::stream(
                    Api::<Lean<EndpointSlice>>::all(client.clone()),
                    all.labels(&format!("{LABEL_SOURCE_CLUSTER}={id},{ours}")),
                ),
                WatchEvent::McsSlices,
                reports.clone(),
            ));
            tasks.push(tokio::spawn(probe(
                client,
                key,
                id,
                probe_interval,
                probe_timeout,
                reports,
            )));
        }
    }
    Connection { tasks }
}

/// Runs the peer's health probe ([`peering::probe`]) every `interval`, for
/// as long as the connection lives.
async fn probe(
    client: Client,
    key: ClusterKey,
    id: String,
    interval: Duration,
    timeout: Duration,
    reports: mpsc::Sender<Report>,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let result = peering::probe(&client, timeout)
            .await
            .map_err(|error| error.to_string());
        let answered = result.is_ok();
        if reports
            .send(Report::Probe(key.clone(), result))
            .await
            .is_err()
        {
            return;
        }
        // The id it was accepted as, asked again: a peer whose id changes
        // is refused (IdentityChanged), not followed.
        if answered
            && let Ok(Ok(identity)) =
                tokio::time::timeout(timeout, peering::identity(&client)).await
            && identity.cluster_id != id
            && reports
                .send(Report::Identity(key.clone(), identity))
                .await
                .is_err()
        {
            return;
        }
    }
}
