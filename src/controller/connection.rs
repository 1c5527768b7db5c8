//! Watches on one cluster, as tasks that send their events to the
//! reconciler's single loop.
//!
//! Each cluster gets the watches its role needs ([`Scope`]): this cluster
//! watches everything the controller reads or writes; a peer only what it
//! publishes: its ServiceExports, and in the [`Form`] its release writes
//! either its publication (PublishedServices and published slices in its
//! controller's namespace, turned back into Services and mirrored slices by
//! [`crate::controller::publication`]) or, from a previous release, its
//! Services except the derived ones and the MCS slices it mirrored itself
//! (selected on the server by `source-cluster=<peer id>` and our managed-by
//! label). Peers also get a liveness probe, because a hung connection does
//! not always end a watch with an error: the health probe of the peer
//! contract ([`crate::peering::probe`]), which also reads the peer's
//! publication marker and reports a change of form.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::Api;
use kube::runtime::watcher::{self, Event as WatcherEvent};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::lean::Lean;
use super::naming::{LABEL_APP_MANAGED_BY, MANAGED_BY};
use super::publication::{self, Form, PUBLISHED_BY, Viewer};
use crate::api::well_known::{
    LABEL_KUBERNETES_SERVICE_NAME, LABEL_MANAGED_BY, LABEL_SOURCE_CLUSTER,
};
use crate::api::{PublishedService, ServiceExport, ServiceImport};
use crate::{peering, watch};

/// Which cluster an event is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum ClusterKey {
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

/// A watch event of one kind. Large (a decoded object inline): it crosses
/// the reports channel boxed ([`Report::Watch`]).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub(super) enum WatchEvent {
    /// Of a kind every cluster is watched for, this one and each peer.
    Cluster(ClusterEvent),
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
    /// This cluster's PublishedServices (local only).
    Published(Result<WatcherEvent<Lean<PublishedService>>, watcher::Error>),
    /// This cluster's published slices (local only).
    PublishedSlices(Result<WatcherEvent<Lean<EndpointSlice>>, watcher::Error>),
}

/// A watch event of a kind every cluster is watched for, this one and
/// each peer ([`crate::controller::cluster::ClusterWatches`]).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum ClusterEvent {
    /// ServiceExports.
    Exports(Result<WatcherEvent<Lean<ServiceExport>>, watcher::Error>),
    /// Services (for a peer that publishes, its PublishedServices read as
    /// Services).
    Services(Result<WatcherEvent<Lean<Service>>, watcher::Error>),
    /// MCS EndpointSlices managed by clusterset-dns (for a peer that
    /// publishes, its published slices read as mirrored ones).
    McsSlices(Result<WatcherEvent<Lean<EndpointSlice>>, watcher::Error>),
}

impl ClusterEvent {
    fn exports(event: Result<WatcherEvent<Lean<ServiceExport>>, watcher::Error>) -> WatchEvent {
        WatchEvent::Cluster(Self::Exports(event))
    }

    fn services(event: Result<WatcherEvent<Lean<Service>>, watcher::Error>) -> WatchEvent {
        WatchEvent::Cluster(Self::Services(event))
    }

    fn mcs_slices(event: Result<WatcherEvent<Lean<EndpointSlice>>, watcher::Error>) -> WatchEvent {
        WatchEvent::Cluster(Self::McsSlices(event))
    }
}

impl From<ClusterEvent> for WatchEvent {
    fn from(event: ClusterEvent) -> Self {
        Self::Cluster(event)
    }
}

/// What a cluster task reports. Small, so that the slots of a full
/// reports channel cost little (docs/benchmarks-controller.md, "Runs H
/// to J").
#[derive(Debug)]
pub(super) enum Report {
    /// A watch event.
    Watch(ClusterKey, Box<WatchEvent>),
    /// A peer's liveness probe result.
    Probe(ClusterKey, Result<(), String>),
    /// A peer's probe found it answering with another cluster id than the
    /// one its watches were started for.
    Identity(ClusterKey, peering::Identity),
    /// A peer Secret changed (local cluster).
    Secrets(Box<Result<WatcherEvent<k8s_openapi::api::core::v1::Secret>, watcher::Error>>),
    /// A peer's probe found its publication in another form than the one
    /// its watches read (the peer was upgraded, or rolled back).
    FormChanged(ClusterKey, Form),
    /// An input of the peers' state made by the hub connection (its
    /// members, their watch events and liveness, the hub's reachability).
    Peers(Box<super::peers::Input>),
    /// Part of a peer's publication was refused as untrusted input.
    Rejected {
        /// The connection it came from.
        key: ClusterKey,
        /// The peer's cluster id.
        peer: String,
        /// Why ([`publication::reason`]).
        reason: &'static str,
        /// What, for a person.
        what: String,
    },
}

/// Which watches a cluster gets.
#[derive(Debug, Clone)]
pub(super) enum Scope {
    /// This cluster: everything read or written.
    Local {
        /// The controller's namespace (this cluster's publication).
        namespace: String,
    },
    /// A peer with this cluster id: what it publishes.
    Peer {
        /// Its cluster id (selects its mirrored slices).
        id: String,
        /// Its controller's namespace (where its publication is).
        namespace: String,
        /// How its exports are read.
        form: Form,
        /// How it is checked.
        probing: Probing,
    },
}

/// How a peer is checked: that it answers (by its watches delivering, else
/// by a probe), and that it is still the cluster it joined as, publishing
/// in the form its watches read.
#[derive(Debug, Clone, Copy)]
pub(super) struct Probing {
    /// How often whether it answers is checked.
    pub interval: Duration,
    /// How long a probe or a read may take.
    pub timeout: Duration,
    /// How often its identity and publication marker are read again
    /// (`--peer-reread-interval`).
    pub reread: Duration,
}

/// The running watches of one cluster; dropping it stops them.
#[derive(Debug)]
pub(super) struct Connection {
    tasks: Vec<JoinHandle<()>>,
}

impl Connection {
    /// Stops `task` with the connection.
    pub(super) fn adopt(&mut self, task: JoinHandle<()>) {
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

/// When a connection's watches last delivered something: a peer whose
/// watches deliver answers, and needs no probe meanwhile.
#[derive(Debug)]
struct Activity {
    start: Instant,
    /// Milliseconds from `start` to the last delivery (0: none yet).
    last: AtomicU64,
}

impl Activity {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            last: AtomicU64::new(0),
        })
    }

    /// A watch delivered an object or a list's end (not an error).
    fn delivered(&self) {
        let at = self.start.elapsed().as_millis().max(1);
        self.last
            .store(u64::try_from(at).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Whether a watch delivered within `window`.
    fn within(&self, window: Duration) -> bool {
        let last = self.last.load(Ordering::Relaxed);
        last != 0
            && self
                .start
                .elapsed()
                .saturating_sub(Duration::from_millis(last))
                < window
    }
}

fn forward<K, S>(
    key: ClusterKey,
    stream: S,
    wrap: fn(Result<WatcherEvent<K>, watcher::Error>) -> WatchEvent,
    (reports, activity): (mpsc::Sender<Report>, Arc<Activity>),
) -> JoinHandle<()>
where
    S: Stream<Item = Result<WatcherEvent<K>, watcher::Error>> + Send + 'static,
    K: Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if event.is_ok() {
                activity.delivered();
            }
            if reports
                .send(Report::Watch(key.clone(), Box::new(wrap(event))))
                .await
                .is_err()
            {
                return;
            }
        }
    })
}

/// An object of kind `K` that is only a name: what a viewer forwards as
/// deleted when a peer's published object stops being valid or moves.
pub(super) fn tombstone<K: kube::Resource + Default>(namespace: &str, name: &str) -> Lean<K> {
    let mut object = K::default();
    *object.meta_mut() = ObjectMeta {
        namespace: Some(namespace.to_owned()),
        name: Some(name.to_owned()),
        ..ObjectMeta::default()
    };
    Lean::new(object)
}

/// Forwards a peer's published kind as the kind a previous release's
/// watch delivered, through a [`Viewer`]: an object that does not pass is
/// left out (deleted, if it passed before) and reported as
/// [`Report::Rejected`].
fn forward_viewed<P, K, S>(
    key: ClusterKey,
    peer: String,
    stream: S,
    mut viewer: Viewer<P, K>,
    wrap: fn(Result<WatcherEvent<K>, watcher::Error>) -> WatchEvent,
    (reports, activity): (mpsc::Sender<Report>, Arc<Activity>),
) -> JoinHandle<()>
where
    S: Stream<Item = Result<WatcherEvent<P>, watcher::Error>> + Send + 'static,
    P: kube::Resource<DynamicType = ()> + Send + 'static,
    K: kube::Resource + Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let viewed = match event {
                Ok(event) => {
                    activity.delivered();
                    viewer.event(event)
                }
                Err(error) => {
                    if reports
                        .send(Report::Watch(key.clone(), Box::new(wrap(Err(error)))))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    continue;
                }
            };
            if let Some((reason, what)) = viewed.refused
                && reports
                    .send(Report::Rejected {
                        key: key.clone(),
                        peer: peer.clone(),
                        reason,
                        what,
                    })
                    .await
                    .is_err()
            {
                return;
            }
            for event in viewed.events {
                if reports
                    .send(Report::Watch(key.clone(), Box::new(wrap(Ok(event)))))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    })
}

/// Objects per list page. A page is decoded whole before its first object
/// is handed on, and at most one page per watch waits behind a full
/// reports channel: 500 (the Kubernetes default) keeps that transient
/// memory a tenth of what 5,000 took, for one more round trip per 500
/// objects listed.
pub(super) const LIST_PAGE: u32 = 500;

/// Objects per list page read from a peer: its objects are untrusted in
/// size as in number, and a page is read whole (bounded by
/// [`crate::peering::body_limit::MAX_RESPONSE_BYTES`]), so a peer's page is
/// small.
pub(super) const PEER_LIST_PAGE: u32 = 50;

/// Starts the watches of one cluster.
pub(super) fn connect(
    client: Client,
    key: ClusterKey,
    scope: Scope,
    reports: mpsc::Sender<Report>,
) -> Connection {
    let page = match &scope {
        Scope::Local { .. } => LIST_PAGE,
        Scope::Peer { .. } => PEER_LIST_PAGE,
    };
    let all = watcher::Config::default().page_size(page);
    let ours = format!("{LABEL_MANAGED_BY}={MANAGED_BY}");
    let mut tasks = Tasks {
        key: key.clone(),
        reports: reports.clone(),
        activity: Activity::new(),
        started: Vec::new(),
    };
    tasks.watch(
        Api::<Lean<ServiceExport>>::all(client.clone()),
        all.clone(),
        ClusterEvent::exports,
    );
    match scope {
        Scope::Local { namespace } => {
            tasks.watch(
                Api::<Lean<Service>>::all(client.clone()),
                all.clone(),
                ClusterEvent::services,
            );
            tasks.watch(
                Api::<Lean<EndpointSlice>>::all(client.clone()),
                all.clone().labels(&ours),
                ClusterEvent::mcs_slices,
            );
            tasks.watch(
                Api::<Lean<EndpointSlice>>::all(client.clone()),
                all.clone().labels(&format!(
                    "{LABEL_KUBERNETES_SERVICE_NAME},{LABEL_MANAGED_BY}!={MANAGED_BY}"
                )),
                WatchEvent::KubernetesSlices,
            );
            tasks.watch(
                Api::<Lean<ServiceImport>>::all(client.clone()),
                all.clone(),
                WatchEvent::Imports,
            );
            tasks.watch(
                Api::<Namespace>::all(client.clone()),
                all.clone(),
                WatchEvent::Namespaces,
            );
            tasks.watch(
                Api::<ServiceCIDR>::all(client.clone()),
                all.clone(),
                WatchEvent::ServiceCidrs,
            );
            tasks.watch(
                Api::<Lean<Node>>::all(client.clone()),
                all.clone(),
                WatchEvent::Nodes,
            );
            tasks.watch(
                Api::<Lean<PublishedService>>::namespaced(client.clone(), &namespace),
                all.clone()
                    .labels(&format!("{LABEL_APP_MANAGED_BY}={MANAGED_BY}")),
                WatchEvent::Published,
            );
            tasks.watch(
                Api::<Lean<EndpointSlice>>::namespaced(client, &namespace),
                all.labels(&format!("{LABEL_MANAGED_BY}={PUBLISHED_BY}")),
                WatchEvent::PublishedSlices,
            );
        }
        Scope::Peer {
            id,
            namespace,
            form,
            probing,
        } => {
            match form {
                Form::Published => {
                    tasks.watch_viewed(
                        &id,
                        Api::<Lean<PublishedService>>::namespaced(client.clone(), &namespace),
                        all.clone(),
                        Viewer::new(
                            |published: Lean<PublishedService>| {
                                publication::service_view(&published.0).map(Lean::new)
                            },
                            tombstone::<Service>,
                        ),
                        ClusterEvent::services,
                    );
                    tasks.watch_viewed(
                        &id,
                        Api::<Lean<EndpointSlice>>::namespaced(client.clone(), &namespace),
                        all.labels(&format!(
                            "{LABEL_SOURCE_CLUSTER}={id},{LABEL_MANAGED_BY}={PUBLISHED_BY}"
                        )),
                        Viewer::new(
                            |slice: Lean<EndpointSlice>| {
                                publication::slice_view(slice.0).map(Lean::new)
                            },
                            tombstone::<EndpointSlice>,
                        ),
                        ClusterEvent::mcs_slices,
                    );
                }
                Form::Legacy => {
                    // A previous release's peer: its Services but the
                    // derived ones (never exported; at scale most of a
                    // peer's Services), and the slices it mirrored itself.
                    tasks.watch(
                        Api::<Lean<Service>>::all(client.clone()),
                        all.clone()
                            .labels(&format!("{LABEL_APP_MANAGED_BY}!={MANAGED_BY}")),
                        ClusterEvent::services,
                    );
                    tasks.watch(
                        Api::<Lean<EndpointSlice>>::all(client.clone()),
                        all.labels(&format!("{LABEL_SOURCE_CLUSTER}={id},{ours}")),
                        ClusterEvent::mcs_slices,
                    );
                }
            }
            let activity = tasks.activity.clone();
            tasks.started.push(tokio::spawn(probe(
                client,
                key,
                (id, namespace, form),
                probing,
                activity,
                reports,
            )));
        }
    }
    Connection {
        tasks: tasks.started,
    }
}

/// The tasks [`connect`] starts for one cluster, each sending what it
/// reads to the reconciler's loop as a [`Report`] about `key`.
struct Tasks {
    key: ClusterKey,
    reports: mpsc::Sender<Report>,
    /// When the watches last delivered (read by a peer's probe).
    activity: Arc<Activity>,
    started: Vec<JoinHandle<()>>,
}

impl Tasks {
    /// A watch of `api`, its events forwarded as `wrap` makes them.
    fn watch<K>(
        &mut self,
        api: Api<K>,
        config: watcher::Config,
        wrap: fn(Result<WatcherEvent<K>, watcher::Error>) -> WatchEvent,
    ) where
        K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        self.started.push(forward(
            self.key.clone(),
            watch::stream(api, config),
            wrap,
            (self.reports.clone(), self.activity.clone()),
        ));
    }

    /// A watch of the published kind `P` of `peer`, forwarded through
    /// `viewer` as the kind `K` ([`forward_viewed`]).
    fn watch_viewed<P, K>(
        &mut self,
        peer: &str,
        api: Api<P>,
        config: watcher::Config,
        viewer: Viewer<P, K>,
        wrap: fn(Result<WatcherEvent<K>, watcher::Error>) -> WatchEvent,
    ) where
        P: kube::Resource<DynamicType = ()>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug
            + Send
            + 'static,
        K: kube::Resource + Send + 'static,
    {
        self.started.push(forward_viewed(
            self.key.clone(),
            peer.to_owned(),
            watch::stream(api, config),
            viewer,
            wrap,
            (self.reports.clone(), self.activity.clone()),
        ));
    }
}

/// The form a peer's exports are read in: its publication once its marker
/// says so; a previous release's otherwise, also when the reader role does
/// not grant the marker (403: a peer not yet given this release's role).
/// `Err` when the peer did not answer.
pub(super) async fn read_form(client: &Client, namespace: &str) -> Result<Form, String> {
    let markers: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    match markers.get_opt(publication::MARKER).await {
        Ok(marker) => Ok(publication::form_of_marker(
            marker.as_ref().and_then(|marker| marker.data.as_ref()),
        )),
        Err(kube::Error::Api(status)) if status.code == 403 => Ok(Form::Legacy),
        Err(error) => Err(crate::error::Chain(&error).to_string()),
    }
}

/// Checks a peer every `probing.interval`, for as long as the connection
/// lives: that it answers, by the health probe of the peer contract
/// ([`peering::probe`]) unless its watches delivered within the interval
/// (they show it answers, at no cost to it); and every `probing.reread`
/// that it is still the cluster it joined as and publishes in the form
/// its watches read (a change of either is rare: a peer rejoining under
/// another id, an upgrade).
async fn probe(
    client: Client,
    key: ClusterKey,
    (id, namespace, form): (String, String, Form),
    Probing {
        interval,
        timeout,
        reread,
    }: Probing,
    activity: Arc<Activity>,
    reports: mpsc::Sender<Report>,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut form_reported = false;
    let mut reread_at = Instant::now();
    loop {
        ticker.tick().await;
        let result = if activity.within(interval) {
            Ok(())
        } else {
            peering::probe(&client, timeout)
                .await
                .map_err(|error| error.to_string())
        };
        let answered = result.is_ok();
        if reports
            .send(Report::Probe(key.clone(), result))
            .await
            .is_err()
        {
            return;
        }
        if !answered || reread_at.elapsed() < reread {
            continue;
        }
        reread_at = Instant::now();
        // The id it was accepted as, asked again: a peer whose id changes
        // is refused (IdentityChanged), not followed.
        if let Ok(Ok(identity)) = tokio::time::timeout(timeout, peering::identity(&client)).await
            && identity.cluster_id != id
            && reports
                .send(Report::Identity(key.clone(), identity))
                .await
                .is_err()
        {
            return;
        }
        // The peer upgraded (its marker appeared) or rolled back: its
        // exports are read again in the other form, by a new connection
        // (reported once; this one ends when that one has synced).
        if !form_reported
            && let Ok(Ok(now)) = tokio::time::timeout(timeout, read_form(&client, &namespace)).await
            && now != form
        {
            form_reported = true;
            if reports
                .send(Report::FormChanged(key.clone(), now))
                .await
                .is_err()
            {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_is_active_only_within_the_window_after_a_delivery() {
        let activity = Activity::new();
        assert!(!activity.within(Duration::from_secs(3600)), "nothing yet");
        activity.delivered();
        assert!(activity.within(Duration::from_secs(2)));
        std::thread::sleep(Duration::from_millis(30));
        assert!(!activity.within(Duration::from_millis(10)));
    }
}
