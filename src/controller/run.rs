//! The controller's one loop: it owns every cluster's indexed state, takes
//! watch events, probe results and membership changes from the connection
//! tasks, and after each batch of events plans and writes the services
//! they touched.
//!
//! One owner, no locks: connection tasks only forward events; decisions
//! ([`super::reconcile::plan`]) are pure functions of the state here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ObjectReference, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::watcher::{self, Event as WatcherEvent};
use kube::{Client, ResourceExt};
use tokio::sync::{mpsc, oneshot};

use super::apply::{Written, execute};
use super::cluster::{ClusterData, LocalData, Objects, PeerLimits, Touched};
use super::connection::{ClusterKey, Connection, Report, Scope, WatchEvent, connect};
use super::lean::Lean;
use super::membership::{local_identity_problem, peer_refusal};
use super::metrics::ControllerMetrics;
use super::naming::FIELD_MANAGER;
use super::reconcile::{Inputs, Kind, NamespaceFilter, PeerView, Plan, Write, plan};
use crate::api::{ServiceExport, ServiceImport};
use crate::model::ServiceRef;
use crate::peering::{self, Identity, identity, lease, read_identity, reason};
use crate::watch::backoff::RestartSchedule;
use crate::watch::{Outcome, Watch};

/// How often this cluster's ClusterProperties are read again.
const IDENTITY_CHECK: Duration = Duration::from_secs(30);

/// How many services one reconcile cycle plans and writes.
const SERVICES_PER_CYCLE: usize = 256;

/// How many writes run at once.
const WRITE_CONCURRENCY: usize = 16;

/// How many plan-and-write rounds a cycle runs for the services that wrote
/// (a new ClusterSetIP service needs three).
const ROUNDS_PER_CYCLE: usize = 3;

/// How long a deleted peer Secret may take to come back (a replace is a
/// delete and a create) before the peer's data is dropped.
const SECRET_DELETE_DEBOUNCE: Duration = Duration::from_secs(3);

/// Settings of the loop.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Namespace of peer Secrets and Leases.
    pub namespace: String,
    /// Peer Secret label selector.
    pub peer_selector: String,
    /// How long an unreachable peer's data stays.
    pub grace: Duration,
    /// How long start-up waits for peers.
    pub startup_sync_timeout: Duration,
    /// Denied namespaces.
    pub deny: NamespaceFilter,
    /// Probe interval.
    pub probe_interval: Duration,
    /// Probe timeout.
    pub probe_timeout: Duration,
    /// This replica's name in Events.
    pub instance: String,
    /// How much of each peer's data is held at most.
    pub peer_limits: PeerLimits,
}

/// A question for the loop, answered between events.
#[derive(Debug)]
pub enum Query {
    /// Readiness: peers synced or within grace.
    Ready(oneshot::Sender<Result<(), String>>),
    /// The merge of one service, as JSON.
    Explain(ServiceRef, oneshot::Sender<serde_json::Value>),
}

/// One connection to a peer and what it read.
struct PeerConn {
    generation: u64,
    client: Option<Client>,
    identity: Option<Identity>,
    data: ClusterData,
    exports: Watch<Lean<ServiceExport>, Objects<ServiceExport>>,
    services: Watch<Lean<Service>, Objects<Service>>,
    slices: Watch<Lean<EndpointSlice>, Objects<EndpointSlice>>,
    probe: Result<(), String>,
    connection: Option<Connection>,
    identity_task: Option<tokio::task::JoinHandle<()>>,
    /// Kinds whose limit this connection has hit (warned once each).
    over_limit: BTreeSet<&'static str>,
}

impl Drop for PeerConn {
    fn drop(&mut self) {
        if let Some(task) = &self.identity_task {
            task.abort();
        }
    }
}

impl PeerConn {
    fn new(generation: u64, limits: PeerLimits) -> Self {
        Self {
            generation,
            client: None,
            identity: None,
            data: ClusterData::for_peer(limits),
            exports: Watch::new("serviceexports"),
            services: Watch::new("services"),
            slices: Watch::new("endpointslices"),
            probe: Err("not probed yet".into()),
            connection: None,
            identity_task: None,
            over_limit: BTreeSet::new(),
        }
    }

    fn synced(&self) -> bool {
        self.exports.health().synced()
            && self.services.health().synced()
            && self.slices.health().synced()
    }

    fn healthy(&self) -> bool {
        self.synced() && self.probe.is_ok() && !self.failing()
    }

    /// Whether a watch is failing (a failed list or watch, not yet
    /// followed by a relist or a change).
    fn failing(&self) -> bool {
        self.exports.health().failing()
            || self.services.health().failing()
            || self.slices.health().failing()
    }

    fn problem(&self) -> Option<String> {
        if let Err(error) = &self.probe {
            return Some(format!("probe: {error}"));
        }
        [
            self.exports.health(),
            self.services.health(),
            self.slices.health(),
        ]
        .into_iter()
        .find_map(|h| {
            h.last_error()
                .map(|e| format!("watch of {}: {e}", h.resource()))
        })
    }
}

/// A peer named by a Secret.
struct Peer {
    secret: String,
    kubeconfig: Vec<u8>,
    /// The connection whose data counts.
    current: Option<PeerConn>,
    /// A replacement (rotated Secret) being synced; swapped in once synced.
    next: Option<PeerConn>,
    refused: Option<String>,
    removing_at: Option<Instant>,
    /// Last time the peer was healthy (from its Lease across restarts).
    last_seen: Option<SystemTime>,
    lease_renewed: Option<Instant>,
    /// The peer's id as its Lease recorded it, before the peer answers.
    lease_id: Option<String>,
    /// Spacing of reconnects to relist failing watches.
    reconnects: RestartSchedule,
}

impl Peer {
    fn id(&self) -> Option<&str> {
        self.current
            .as_ref()
            .and_then(|c| c.identity.as_ref())
            .map(|i| i.cluster_id.as_str())
    }

    fn within_grace(&self, grace: Duration) -> bool {
        self.last_seen
            .and_then(|seen| SystemTime::now().duration_since(seen).ok())
            .is_some_and(|age| age < grace)
    }

    fn conn_mut(&mut self, generation: u64) -> Option<&mut PeerConn> {
        if self
            .current
            .as_ref()
            .is_some_and(|c| c.generation == generation)
        {
            self.current.as_mut()
        } else if self
            .next
            .as_ref()
            .is_some_and(|c| c.generation == generation)
        {
            self.next.as_mut()
        } else {
            None
        }
    }
}

/// The controller's state and loop.
pub struct Controller {
    settings: Settings,
    client: Client,
    local_id: String,
    local_clusterset: String,
    local: ClusterData,
    local_only: LocalData,
    local_watches: LocalWatches,
    peers: BTreeMap<String, Peer>,
    generation: u64,
    reports_tx: mpsc::Sender<Report>,
    reports: mpsc::Receiver<Report>,
    identities_tx: mpsc::Sender<(String, u64, Contact)>,
    identities: mpsc::Receiver<(String, u64, Contact)>,
    metrics: Arc<ControllerMetrics>,
    recorder: Recorder,
    started_at: Instant,
    started: bool,
    /// Whether the peer Secrets have been listed once: until then the
    /// peers are not known, and nothing may start.
    secrets_listed: bool,
    /// The Secrets of a list in progress.
    secrets_relisted: Option<BTreeSet<String>>,
    dirty: Touched,
    first_change: Option<Instant>,
    retry: BTreeSet<ServiceRef>,
    /// Per service: the local export's `Valid` reason and the conflict
    /// reasons, for the gauges.
    summaries: BTreeMap<ServiceRef, (Option<&'static str>, Option<String>)>,
    /// Why the controller must stop, once it knows.
    fatal: Option<String>,
    /// Per peer Secret: whether its data counts, whether it is within
    /// grace, and the connection's generation, as of the last loop
    /// iteration.
    usability: BTreeMap<String, Usability>,
    /// Peer Leases found at start-up: Secret name → (peer id, last seen).
    leases: BTreeMap<String, (String, SystemTime)>,
    _local_connection: Connection,
}

struct LocalWatches {
    exports: Watch<Lean<ServiceExport>, Objects<ServiceExport>>,
    services: Watch<Lean<Service>, Objects<Service>>,
    mcs_slices: Watch<Lean<EndpointSlice>, Objects<EndpointSlice>>,
    kubernetes_slices: Watch<Lean<EndpointSlice>, Objects<EndpointSlice>>,
    imports: Watch<Lean<ServiceImport>, Objects<ServiceImport>>,
    namespaces: Watch<k8s_openapi::api::core::v1::Namespace, LocalData>,
    cidrs: Watch<k8s_openapi::api::networking::v1::ServiceCIDR, LocalData>,
}

impl LocalWatches {
    fn new() -> Self {
        Self {
            exports: Watch::new("serviceexports"),
            services: Watch::new("services"),
            mcs_slices: Watch::new("endpointslices (ours)"),
            kubernetes_slices: Watch::new("endpointslices (of local services)"),
            imports: Watch::new("serviceimports"),
            namespaces: Watch::new("namespaces"),
            cidrs: Watch::new("servicecidrs"),
        }
    }

    fn synced(&self) -> bool {
        self.exports.health().synced()
            && self.services.health().synced()
            && self.mcs_slices.health().synced()
            && self.kubernetes_slices.health().synced()
            && self.imports.health().synced()
            && self.namespaces.health().synced()
            && self.cidrs.health().synced()
    }
}

/// Why the controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The local cluster's identity is missing or invalid.
    #[error("this cluster's identity: {0}")]
    Identity(String),
}

impl Controller {
    /// Reads this cluster's identity and starts the local watches.
    pub async fn start(
        client: Client,
        settings: Settings,
        metrics: Arc<ControllerMetrics>,
    ) -> Result<Self, StartError> {
        let identity = identity(&client).await.map_err(StartError::Identity)?;
        if let Some(problem) = local_identity_problem(&identity.cluster_id) {
            return Err(StartError::Identity(problem));
        }
        tracing::info!(cluster = %identity.cluster_id, clusterset = %identity.clusterset, "cluster identity");
        let leases = peer_leases(&client, &settings.namespace).await;
        let (reports_tx, reports) = mpsc::channel(4096);
        let (identities_tx, identities) = mpsc::channel(64);
        let local_connection = connect(
            client.clone(),
            ClusterKey::Local,
            Scope::Local,
            reports_tx.clone(),
        );
        // Peer Secrets, through the same channel as a pseudo-cluster.
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &settings.namespace);
        let secret_stream = crate::watch::stream(
            secrets,
            watcher::Config::default().labels(&settings.peer_selector),
        );
        let secret_tx = reports_tx.clone();
        let secret_task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(secret_stream);
            while let Some(event) = stream.next().await {
                if secret_tx.send(Report::Secrets(event)).await.is_err() {
                    return;
                }
            }
        });
        let mut local_connection = local_connection;
        local_connection.adopt(secret_task);
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: FIELD_MANAGER.into(),
                instance: Some(settings.instance.clone()),
            },
        );
        Ok(Self {
            settings,
            client,
            local_id: identity.cluster_id,
            local_clusterset: identity.clusterset,
            local: ClusterData::default(),
            local_only: LocalData::default(),
            local_watches: LocalWatches::new(),
            peers: BTreeMap::new(),
            generation: 0,
            reports_tx,
            reports,
            identities_tx,
            identities,
            metrics,
            recorder,
            started_at: Instant::now(),
            started: false,
            secrets_listed: false,
            secrets_relisted: None,
            dirty: Touched::default(),
            first_change: None,
            retry: BTreeSet::new(),
            summaries: BTreeMap::new(),
            usability: BTreeMap::new(),
            fatal: None,
            leases,
            _local_connection: local_connection,
        })
    }

    /// Runs until the process stops.
    /// Runs until this cluster's identity changes (KEP-2149: a changed id
    /// or clusterset is leaving and rejoining, so the process exits and its
    /// restart starts over), or its role turns out not to allow reading
    /// what it needs; returns why.
    pub async fn run(mut self, mut queries: mpsc::Receiver<Query>) -> String {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut identity_check = tokio::time::interval(IDENTITY_CHECK);
        identity_check.tick().await;
        loop {
            tokio::select! {
                Some(report) = self.reports.recv() => {
                    self.handle(report);
                    // Take whatever else is queued before planning: one
                    // plan per batch, not per event.
                    while let Ok(report) = self.reports.try_recv() {
                        self.handle(report);
                    }
                }
                Some((secret, generation, contact)) = self.identities.recv() => {
                    self.identified(&secret, generation, contact).await;
                }
                Some(query) = queries.recv() => self.answer(query),
                _ = tick.tick() => self.tick().await,
                // More planned work left from the last batch: go on at once.
                () = std::future::ready(()), if self.started && !self.dirty.is_empty() => {}
                _ = identity_check.tick() => {
                    if let Ok(now) = identity(&self.client).await
                        && (now.cluster_id != self.local_id || now.clusterset != self.local_clusterset)
                    {
                        return format!(
                            "this cluster's identity changed from {}/{} to {}/{}: restarting to rejoin",
                            self.local_clusterset, self.local_id, now.clusterset, now.cluster_id
                        );
                    }
                }
            }
            if let Some(fatal) = self.fatal.take() {
                return fatal;
            }
            self.maybe_start();
            self.notice_usability();
            if self.started && !self.dirty.is_empty() {
                self.reconcile().await;
            }
        }
    }

    /// Replans everything when a peer starts or stops counting (synced and
    /// probed, lost beyond grace, replaced), or leaves its grace period
    /// without having been read since start-up (services naming it were
    /// left alone until then): whichever event caused it.
    fn notice_usability(&mut self) {
        let grace = self.settings.grace;
        let now: BTreeMap<String, Usability> = self
            .peers
            .values()
            .map(|p| (p.secret.clone(), usability(p, grace)))
            .collect();
        if now != self.usability {
            for peer in self.peers.values() {
                let was_usable = self.usability.get(&peer.secret).is_some_and(|u| u.0);
                if was_usable && !now.get(&peer.secret).is_some_and(|u| u.0) {
                    tracing::warn!(
                        peer = peer.id().unwrap_or(&peer.secret),
                        problem = ?peer.current.as_ref().and_then(PeerConn::problem),
                        "peer no longer counts (unreachable beyond the grace period, or replaced): its services are no longer imported from it"
                    );
                }
            }
            self.usability = now;
            self.dirty.all = true;
        }
    }

    fn mark(&mut self, touched: Touched) {
        if !touched.is_empty() && self.first_change.is_none() {
            self.first_change = Some(Instant::now());
        }
        self.dirty.merge(touched);
    }

    fn handle(&mut self, report: Report) {
        let now = Instant::now();
        match report {
            Report::Watch(ClusterKey::Local, event) => {
                let w = &mut self.local_watches;
                let outcome = match event {
                    WatchEvent::Exports(e) => w.exports.handle(&mut self.local.exports, e, now),
                    WatchEvent::Services(e) => w.services.handle(&mut self.local.services, e, now),
                    WatchEvent::McsSlices(e) => {
                        w.mcs_slices.handle(&mut self.local.mcs_slices, e, now)
                    }
                    WatchEvent::KubernetesSlices(e) => {
                        w.kubernetes_slices
                            .handle(&mut self.local_only.kubernetes_slices, e, now)
                    }
                    WatchEvent::Imports(e) => {
                        w.imports.handle(&mut self.local_only.imports, e, now)
                    }
                    WatchEvent::Namespaces(e) => w.namespaces.handle(&mut self.local_only, e, now),
                    WatchEvent::ServiceCidrs(e) => w.cidrs.handle(&mut self.local_only, e, now),
                };
                match &outcome {
                    // Not allowed to read what it must: no amount of retrying
                    // helps, and running on would write from a partial view.
                    Outcome::Failed {
                        forbidden_before_sync: Some(message),
                        ..
                    } => {
                        self.fatal.get_or_insert_with(|| {
                            format!(
                                "the controller's role does not allow what it needs: {message} (deploy/controller.yaml has the role it needs)"
                            )
                        });
                    }
                    Outcome::Failed {
                        started: true,
                        error,
                        ..
                    } => tracing::warn!(%error, "local watch failing"),
                    _ => {}
                }
                let mut touched = self.take_local_touched();
                touched.all |= self.local_only.take_all_touched();
                self.mark(touched);
            }
            Report::Watch(ClusterKey::Peer { secret, generation }, event) => {
                let Some(peer) = self.peers.get_mut(&secret) else {
                    return;
                };
                let peer_name = peer.id().unwrap_or(&secret).to_owned();
                let Some(conn) = peer.conn_mut(generation) else {
                    return;
                };
                let outcome = match event {
                    WatchEvent::Exports(e) => conn.exports.handle(&mut conn.data.exports, e, now),
                    WatchEvent::Services(e) => {
                        conn.services.handle(&mut conn.data.services, e, now)
                    }
                    WatchEvent::McsSlices(e) => {
                        conn.slices.handle(&mut conn.data.mcs_slices, e, now)
                    }
                    _ => return,
                };
                if let Outcome::Failed { started, error, .. } = &outcome {
                    self.metrics
                        .peer_sync_errors
                        .with_label_values(&[&peer_name, "watch"])
                        .inc();
                    if *started {
                        tracing::warn!(peer = %peer_name, %error, "peer watch failing; its services stay imported within the grace period");
                    }
                }
                for (kind, refused) in conn.data.take_refused() {
                    if refused == 0 {
                        continue;
                    }
                    self.metrics
                        .rejected
                        .with_label_values(&[&peer_name, "peer-limit"])
                        .inc_by(refused);
                    // Once per connection and kind, not per object.
                    if conn.over_limit.insert(kind) {
                        let limits = self.settings.peer_limits;
                        tracing::warn!(
                            peer = %peer_name, kind, ?limits,
                            "peer exceeds the limits of what is read from one peer: objects beyond them are not imported (--peer-max-exports, --peer-max-services, --peer-max-slices, --peer-max-endpoints)"
                        );
                    }
                }
                let mut touched = conn.data.exports.take_touched();
                touched.merge(conn.data.services.take_touched());
                touched.merge(conn.data.mcs_slices.take_touched());
                let is_current = peer
                    .current
                    .as_ref()
                    .is_some_and(|c| c.generation == generation);
                if is_current {
                    self.mark(touched);
                } else if peer.next.as_ref().is_some_and(PeerConn::synced) {
                    // A rotated Secret's new connection has synced: it
                    // replaces the old one without a gap.
                    tracing::info!(peer = %peer_name, "peer connection replaced");
                    peer.current = peer.next.take();
                    self.dirty.all = true;
                }
            }
            Report::Probe(ClusterKey::Peer { secret, generation }, result) => {
                let Some(peer) = self.peers.get_mut(&secret) else {
                    return;
                };
                let peer_name = peer.id().unwrap_or(&secret).to_owned();
                let current = peer.current.as_ref().map(|c| c.generation) == Some(generation);
                let replacing = peer.next.is_some();
                let mut reconnect = false;
                if let Some(conn) = peer.conn_mut(generation) {
                    if let Err(error) = &result {
                        self.metrics
                            .peer_sync_errors
                            .with_label_values(&[&peer_name, "probe"])
                            .inc();
                        if conn.probe.is_ok() {
                            tracing::warn!(peer = %peer_name, %error, "peer probe failing");
                        }
                    } else {
                        // The peer answers, but a watch that failed and
                        // then resumed delivers nothing until an object
                        // changes: on a quiet peer it would stay failing,
                        // the peer unhealthy, and its services dropped
                        // after grace. Connect again beside it, relisting
                        // (spaced 1 s doubling to 60 s, for a watch that
                        // keeps failing).
                        reconnect = current && !replacing && conn.synced() && conn.failing();
                        if conn.probe.is_err() && conn.synced() {
                            tracing::info!(peer = %peer_name, "peer answers again");
                        }
                    }
                    conn.probe = result;
                }
                if reconnect && peer_reconnect_due(&mut peer.reconnects) {
                    tracing::info!(peer = %peer_name, "peer answers but a watch is failing; reconnecting to relist");
                    let kubeconfig = peer.kubeconfig.clone();
                    self.connect_peer(secret, kubeconfig);
                }
            }
            Report::Probe(ClusterKey::Local, _) => {}
            Report::Secrets(event) => self.secrets(event),
        }
    }

    fn take_local_touched(&mut self) -> Touched {
        let mut touched = self.local.exports.take_touched();
        touched.merge(self.local.services.take_touched());
        touched.merge(self.local.mcs_slices.take_touched());
        touched.merge(self.local_only.kubernetes_slices.take_touched());
        touched.merge(self.local_only.imports.take_touched());
        touched
    }

    fn secrets(&mut self, event: Result<WatcherEvent<Secret>, watcher::Error>) {
        match event {
            Ok(WatcherEvent::Apply(secret)) => self.peer_secret(secret),
            Ok(WatcherEvent::InitApply(secret)) => {
                if let Some(listed) = &mut self.secrets_relisted {
                    listed.insert(secret.name_any());
                }
                self.peer_secret(secret)
            }
            Ok(WatcherEvent::Delete(secret)) => {
                if let Some(peer) = self.peers.get_mut(&secret.name_any()) {
                    peer.removing_at = Some(Instant::now() + SECRET_DELETE_DEBOUNCE);
                }
            }
            Ok(WatcherEvent::Init) => self.secrets_relisted = Some(BTreeSet::new()),
            Ok(WatcherEvent::InitDone) => {
                self.secrets_listed = true;
                // A Secret deleted while the watch was down sends no
                // Delete: the list is the truth.
                let listed = self.secrets_relisted.take().unwrap_or_default();
                for peer in self.peers.values_mut() {
                    if !listed.contains(&peer.secret) && peer.removing_at.is_none() {
                        peer.removing_at = Some(Instant::now() + SECRET_DELETE_DEBOUNCE);
                    }
                }
            }
            Err(error) => {
                tracing::warn!(error = %crate::error::Chain(&error), "watch of peer Secrets failing");
            }
        }
    }

    fn peer_secret(&mut self, secret: Secret) {
        let name = secret.name_any();
        let kubeconfig = peering::kubeconfig_data(&secret).to_vec();
        if let Some(peer) = self.peers.get_mut(&name) {
            peer.removing_at = None;
            if peer.kubeconfig == kubeconfig {
                return;
            }
        }
        self.connect_peer(name, kubeconfig);
    }

    /// Connects (again) to the peer of Secret `name` with `kubeconfig`.
    fn connect_peer(&mut self, name: String, kubeconfig: Vec<u8>) {
        self.generation += 1;
        let mut conn = PeerConn::new(self.generation, self.settings.peer_limits);
        conn.identity_task = Some(self.spawn_identity(&name, self.generation, kubeconfig.clone()));
        let peer = self.peers.entry(name.clone()).or_insert_with(|| Peer {
            secret: name.clone(),
            kubeconfig: Vec::new(),
            current: None,
            next: None,
            refused: None,
            removing_at: None,
            last_seen: None,
            lease_renewed: None,
            lease_id: None,
            reconnects: RestartSchedule::default(),
        });
        if peer.last_seen.is_none()
            && let Some((id, seen)) = self.leases.get(&name)
        {
            peer.lease_id = Some(id.clone());
            peer.last_seen = Some(*seen);
        }
        peer.kubeconfig = kubeconfig;
        peer.refused = None;
        if peer.current.as_ref().is_some_and(PeerConn::synced) {
            tracing::info!(secret = %name, "connecting to the peer beside its current connection (new credentials, or a relist)");
            peer.next = Some(conn);
        } else {
            peer.current = Some(conn);
        }
    }

    /// Builds the peer's client and reads its identity, retrying while the
    /// peer does not answer.
    fn spawn_identity(
        &self,
        secret: &str,
        generation: u64,
        kubeconfig: Vec<u8>,
    ) -> tokio::task::JoinHandle<()> {
        let tx = self.identities_tx.clone();
        let secret = secret.to_owned();
        tokio::spawn(async move {
            let client = match peering::kubeconfig::client(&kubeconfig).await {
                Ok((client, _server)) => client,
                Err(error) => {
                    let _ = tx
                        .send((secret, generation, Contact::Invalid(error.to_string())))
                        .await;
                    return;
                }
            };
            let mut delay = Duration::from_millis(500);
            loop {
                let contact = match read_identity(&client).await {
                    Ok(identity) => Contact::Identified(client.clone(), identity),
                    Err(error) => Contact::Unreachable(error),
                };
                let done = matches!(contact, Contact::Identified(..));
                if tx
                    .send((secret.clone(), generation, contact))
                    .await
                    .is_err()
                    || done
                {
                    return;
                }
                tokio::time::sleep(delay).await;
                // Capped low: a peer back from a long outage is imported
                // again within seconds.
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        })
    }

    async fn identified(&mut self, secret: &str, generation: u64, contact: Contact) {
        let (client, identity) = match contact {
            Contact::Identified(client, identity) => (client, identity),
            Contact::Invalid(error) => {
                self.refuse(
                    secret,
                    reason::INVALID_KUBECONFIG,
                    &format!("Secret {secret}: {error}"),
                );
                return;
            }
            Contact::Unreachable(error) => {
                if let Some(peer) = self.peers.get(secret)
                    && peer
                        .current
                        .as_ref()
                        .is_some_and(|c| c.generation == generation && !c.synced())
                {
                    tracing::warn!(secret, %error, "cannot read the peer's identity yet; retrying");
                }
                return;
            }
        };
        let refusal = peer_refusal(
            &self.local_id,
            &self.local_clusterset,
            secret,
            &identity.cluster_id,
            &identity.clusterset,
            self.peers
                .values()
                .filter_map(|p| Some((p.secret.as_str(), p.id()?))),
        );
        if let Some(refusal) = refusal {
            self.refuse(secret, refusal.reason, &refusal.message);
            return;
        }
        let scope = Scope::Peer {
            id: identity.cluster_id.clone(),
            probe_interval: self.settings.probe_interval,
            probe_timeout: self.settings.probe_timeout,
        };
        let reports = self.reports_tx.clone();
        let Some(peer) = self.peers.get_mut(secret) else {
            return;
        };
        if let Some(previous) = peer.current.as_ref().and_then(|c| c.identity.as_ref())
            && previous.cluster_id != identity.cluster_id
            && peer
                .current
                .as_ref()
                .is_some_and(|c| c.generation != generation)
        {
            tracing::warn!(secret, old = %previous.cluster_id, new = %identity.cluster_id, "the Secret now names another cluster");
        }
        let Some(conn) = peer.conn_mut(generation) else {
            return;
        };
        let key = ClusterKey::Peer {
            secret: secret.to_owned(),
            generation,
        };
        conn.connection = Some(connect(client.clone(), key, scope, reports));
        conn.client = Some(client);
        tracing::info!(secret, peer = %identity.cluster_id, "peer accepted");
        conn.identity = Some(identity);
        self.dirty.all = true;
    }

    fn refuse(&mut self, secret: &str, reason: &'static str, message: &str) {
        tracing::error!(secret, reason, "peer refused: {message}");
        self.metrics
            .peers_refused
            .with_label_values(&[reason])
            .inc();
        if let Some(peer) = self.peers.get_mut(secret) {
            peer.refused = Some(message.to_owned());
            peer.current = None;
            peer.next = None;
        } else {
            self.peers.insert(
                secret.to_owned(),
                Peer {
                    secret: secret.to_owned(),
                    kubeconfig: Vec::new(),
                    current: None,
                    next: None,
                    refused: Some(message.to_owned()),
                    removing_at: None,
                    last_seen: None,
                    lease_renewed: None,
                    lease_id: None,
                    reconnects: RestartSchedule::default(),
                },
            );
        }
        self.dirty.all = true;
        let recorder = self.recorder.clone();
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Secret".into()),
            name: Some(secret.to_owned()),
            namespace: Some(self.settings.namespace.clone()),
            ..ObjectReference::default()
        };
        let event = KubeEvent {
            type_: EventType::Warning,
            reason: reason::PEER_REFUSED.into(),
            note: Some(format!("{reason}: {message}")),
            action: "Connect".into(),
            secondary: None,
        };
        tokio::spawn(async move {
            if let Err(error) = recorder.publish(&event, &reference).await {
                tracing::debug!(error = %crate::error::Chain(&error), "could not record an Event");
            }
        });
    }

    /// Once a second: drop peers whose Secret is gone, keep Leases and
    /// metrics current, and retry failed writes.
    async fn tick(&mut self) {
        let now = Instant::now();
        let removed: Vec<String> = self
            .peers
            .values()
            .filter(|p| p.removing_at.is_some_and(|at| at <= now))
            .map(|p| p.secret.clone())
            .collect();
        for secret in removed {
            let peer = self.peers.remove(&secret);
            let id = peer.as_ref().and_then(|p| p.id().map(str::to_owned));
            tracing::info!(secret, peer = ?id, "peer Secret deleted: its services are no longer imported");
            if let Some(id) = id {
                self.metrics.peer_up.remove_label_values(&[&id]).ok();
            }
            self.dirty.all = true;
            // A peer refused as a duplicate of this one may be valid now.
            let refused: Vec<(String, Vec<u8>)> = self
                .peers
                .values()
                .filter(|p| p.refused.is_some() && !p.kubeconfig.is_empty())
                .map(|p| (p.secret.clone(), p.kubeconfig.clone()))
                .collect();
            for (name, kubeconfig) in refused {
                self.connect_peer(name, kubeconfig);
            }
        }
        let grace = self.settings.grace;
        let renew_every = (grace / 4).clamp(Duration::from_secs(5), Duration::from_secs(60));
        let mut leases: Vec<(String, String, SystemTime)> = Vec::new();
        for peer in self.peers.values_mut() {
            let Some(id) = peer.id().map(str::to_owned) else {
                continue;
            };
            let healthy = peer.current.as_ref().is_some_and(PeerConn::healthy);
            self.metrics
                .peer_up
                .with_label_values(&[&id])
                .set(healthy as i64);
            if healthy {
                peer.last_seen = Some(SystemTime::now());
                if peer
                    .lease_renewed
                    .is_none_or(|at| now.duration_since(at) >= renew_every)
                {
                    peer.lease_renewed = Some(now);
                    leases.push((id.clone(), peer.secret.clone(), SystemTime::now()));
                }
            }
            if let Some(seen) = peer.last_seen
                && let Ok(since) = seen.duration_since(SystemTime::UNIX_EPOCH)
            {
                self.metrics
                    .peer_last_seen
                    .with_label_values(&[&id])
                    .set(since.as_secs() as i64);
            }
        }
        for (id, secret, seen) in leases {
            self.renew_lease(&id, &secret, seen).await;
        }
        if !self.retry.is_empty() {
            let retry = std::mem::take(&mut self.retry);
            self.dirty.services.extend(retry);
        }
    }

    async fn renew_lease(&self, id: &str, secret: &str, seen: SystemTime) {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.settings.namespace);
        let lease = lease::lease(
            &self.settings.namespace,
            id,
            secret,
            &self.local_id,
            self.settings.grace,
            seen,
        );
        let mut body = serde_json::to_value(&lease).unwrap_or_default();
        body["apiVersion"] = "coordination.k8s.io/v1".into();
        body["kind"] = "Lease".into();
        let params = PatchParams::apply(FIELD_MANAGER).force();
        if let Err(error) = api
            .patch(&lease::lease_name(id), &params, &Patch::Apply(body))
            .await
        {
            tracing::warn!(peer = id, error = %crate::error::Chain(&error), "cannot renew the peer Lease");
        }
    }

    /// Starts reconciling once this cluster is listed and every peer has
    /// synced, or the start-up timeout has passed.
    fn maybe_start(&mut self) {
        if self.started {
            return;
        }
        let peers_synced = self
            .peers
            .values()
            .filter(|p| p.refused.is_none())
            .all(|p| p.current.as_ref().is_some_and(PeerConn::synced));
        let timed_out = self.started_at.elapsed() >= self.settings.startup_sync_timeout;
        if may_start(
            self.local_watches.synced(),
            self.secrets_listed,
            peers_synced,
            timed_out,
        ) {
            if !peers_synced {
                tracing::warn!(
                    "start-up: not every peer synced within the start-up timeout; services naming an unread peer are left as they are"
                );
            }
            tracing::info!(peers = self.peers.len(), "reconciling");
            self.started = true;
            self.dirty.all = true;
        }
    }

    fn readiness(&self) -> Result<(), String> {
        if !self.local_watches.synced() {
            return Err("the local cluster is not listed yet".into());
        }
        if !self.secrets_listed {
            return Err("the peer Secrets are not listed yet".into());
        }
        if !self.started {
            return Err("waiting for peers' first sync".into());
        }
        let grace = self.settings.grace;
        let waiting: Vec<String> = self
            .peers
            .values()
            .filter(|p| p.refused.is_none() && !ready_peer(p, grace))
            .map(|p| p.id().unwrap_or(&p.secret).to_owned())
            .collect();
        if waiting.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "peers neither synced nor within grace: {}",
                waiting.join(", ")
            ))
        }
    }

    fn answer(&self, query: Query) {
        match query {
            Query::Ready(reply) => {
                let _ = reply.send(self.readiness());
            }
            Query::Explain(service, reply) => {
                let _ = reply.send(self.explain(&service));
            }
        }
    }

    fn peer_views(&self) -> (Vec<PeerView<'_>>, BTreeSet<String>) {
        let grace = self.settings.grace;
        let mut views = Vec::new();
        let mut unknown = BTreeSet::new();
        for peer in self.peers.values() {
            let Some(conn) = &peer.current else { continue };
            let Some(identity) = &conn.identity else {
                if peer.within_grace(grace)
                    && let Some(id) = &peer.lease_id
                {
                    unknown.insert(id.clone());
                }
                continue;
            };
            let id = identity.cluster_id.as_str();
            if !conn.synced() {
                if peer.within_grace(grace) {
                    unknown.insert(id.to_owned());
                }
                continue;
            }
            views.push(PeerView {
                id,
                data: &conn.data,
                usable: usable(peer, grace),
            });
        }
        (views, unknown)
    }

    fn explain(&self, service: &ServiceRef) -> serde_json::Value {
        let (plan, views) = self.with_inputs(|inputs| {
            let views: Vec<(String, bool)> = inputs
                .peers
                .iter()
                .map(|v| (v.id.to_owned(), v.usable))
                .collect();
            (plan(inputs, service), views)
        });
        serde_json::json!({
            "service": service.to_string(),
            "cluster": self.local_id,
            "peers": views.iter().map(|(id, usable)| serde_json::json!({"id": id, "usable": usable})).collect::<Vec<_>>(),
            "exporters": plan.merged.as_ref().map(|m| m.clusters.clone()),
            "excluded": plan.merged.as_ref().map(|m| m.excluded.clone()),
            "winner": plan.merged.as_ref().map(|m| m.winner().to_owned()),
            "conflict": plan.merged.as_ref().and_then(|m| m.conflict.as_ref()).map(|c| serde_json::json!({"reason": c.reason, "message": c.message})),
            "spec": plan.merged.as_ref().map(|m| serde_json::to_value(&m.spec).unwrap_or_default()),
            "fields": plan.merged.as_ref().map(|m| super::merge::field_decisions(&plan.exports, m)),
            "pending_writes": plan.writes.iter().map(|w| format!("{:?}", w.kind())).collect::<Vec<_>>(),
            "deferred": plan.deferred,
        })
    }

    /// Runs `f` with everything a plan reads, as of now.
    fn with_inputs<R>(&self, f: impl FnOnce(&Inputs<'_>) -> R) -> R {
        let (views, unknown) = self.peer_views();
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        f(&Inputs {
            local_id: &self.local_id,
            local: &self.local,
            local_only: &self.local_only,
            peers: &views,
            unknown_peers: &unknown,
            deny: &self.settings.deny,
            // Nothing is deleted before the start-up gate opens.
            deletions_allowed: self.started,
            now: &now,
        })
    }

    async fn reconcile(&mut self) {
        let touched = std::mem::take(&mut self.dirty);
        let mut keys: BTreeSet<ServiceRef> = if touched.all {
            self.all_services()
        } else {
            touched.services
        };
        // A bounded batch per cycle: events are read between batches, so
        // fresh changes and /ready do not wait behind a cold start's
        // thousands of writes; the rest stays dirty for the next cycle.
        if keys.len() > SERVICES_PER_CYCLE
            && let Some(first_left) = keys.iter().nth(SERVICES_PER_CYCLE).cloned()
        {
            let left = keys.split_off(&first_left);
            self.dirty.services.extend(left);
        }
        // A new ClusterSetIP service takes three rounds (the import; then
        // what it owns, which needs the import's uid; then the VIP into the
        // import): run them back to back for the services that wrote, so a
        // service is finished within its cycle rather than queued again
        // behind the rest of a cold start.
        let mut wrote = false;
        for round in 0..ROUNDS_PER_CYCLE {
            let plans = self.plan_round(keys, round == 0);
            if plans.is_empty() {
                break;
            }
            let written = self.write_round(plans).await;
            wrote |= !written.is_empty();
            keys = written;
        }
        // Our own writes come back as touched services; their plans are
        // empty, which ends the cycle.
        let touched = self.take_local_touched();
        self.dirty.merge(touched);
        if let Some(first) = self.first_change.take()
            && wrote
        {
            self.metrics
                .change_to_write
                .observe(first.elapsed().as_secs_f64());
        }
        self.metrics
            .imports
            .set(self.local_only.imports.services().count() as i64);
    }

    /// Plans `keys`, keeps the status summaries current, and returns the
    /// plans with something to do. Rejected peer input is counted once per
    /// cycle (`count_rejected` on its first round).
    fn plan_round(
        &mut self,
        keys: BTreeSet<ServiceRef>,
        count_rejected: bool,
    ) -> Vec<(ServiceRef, Plan)> {
        let (plans, summaries) = self.with_inputs(|inputs| {
            let mut summaries = Vec::new();
            let plans: Vec<(ServiceRef, Plan)> = keys
                .into_iter()
                .map(|key| {
                    let plan = plan(inputs, &key);
                    let conflict = plan
                        .merged
                        .as_ref()
                        .and_then(|m| m.conflict.as_ref())
                        .map(|c| c.reason.clone());
                    summaries.push((key.clone(), (plan.export_reason, conflict)));
                    (key, plan)
                })
                .filter(|(_, plan)| !plan.writes.is_empty() || !plan.rejected.is_empty())
                .collect();
            (plans, summaries)
        });
        for (key, summary) in summaries {
            if summary == (None, None) {
                self.summaries.remove(&key);
            } else {
                self.summaries.insert(key, summary);
            }
        }
        self.update_gauges();
        if count_rejected {
            for (_, plan) in &plans {
                for (peer, why) in &plan.rejected {
                    self.metrics
                        .rejected
                        .with_label_values(&[peer.as_str(), why])
                        .inc();
                }
            }
        }
        plans
            .into_iter()
            .filter(|(_, plan)| !plan.writes.is_empty())
            .collect()
    }

    /// Carries out the plans, `WRITE_CONCURRENCY` writes at a time (each
    /// service's writes in order, stopping at its first failure, which
    /// queues it for a retry), and records what was written. Returns the
    /// services whose writes all succeeded.
    async fn write_round(&mut self, plans: Vec<(ServiceRef, Plan)>) -> BTreeSet<ServiceRef> {
        let client = self.client.clone();
        let metrics = self.metrics.clone();
        let recorder = &self.recorder;
        let results: Vec<(ServiceRef, Vec<Result<Written, ()>>)> = futures::stream::iter(plans)
            .map(|(key, plan)| {
                let client = client.clone();
                let metrics = metrics.clone();
                async move {
                    let mut results = Vec::new();
                    for write in &plan.writes {
                        let op = if matches!(write, Write::Delete { .. }) { "delete" } else { "apply" };
                        metrics.writes.with_label_values(&[write.kind().as_str(), op]).inc();
                        match execute(&client, write).await {
                            Ok(written) => {
                                if let Write::Delete { kind: Kind::Service, namespace, name, .. } = write {
                                    vip_released(recorder, &key, namespace, name).await;
                                }
                                results.push(Ok(written));
                            }
                            Err(error) if error.namespace_terminating() => {}
                            Err(error) => {
                                metrics.write_errors.with_label_values(&[write.kind().as_str()]).inc();
                                tracing::warn!(service = %key, error = %crate::error::Chain(&error), "write failed; retrying");
                                results.push(Err(()));
                                // Later writes of this service may depend on it.
                                break;
                            }
                        }
                    }
                    (key, results)
                }
            })
            .buffer_unordered(WRITE_CONCURRENCY)
            .collect()
            .await;
        let mut succeeded = BTreeSet::new();
        for (key, results) in results {
            let mut failed = false;
            let mut any = false;
            for result in results {
                match result {
                    Ok(written) => {
                        any = true;
                        self.write_through(written);
                    }
                    Err(()) => failed = true,
                }
            }
            if failed {
                self.retry.insert(key);
            } else if any {
                succeeded.insert(key);
            }
        }
        succeeded
    }

    fn update_gauges(&self) {
        let mut exports: BTreeMap<&str, i64> = BTreeMap::new();
        let mut conflicts: BTreeMap<&str, i64> = BTreeMap::new();
        for (reason, conflict) in self.summaries.values() {
            if let Some(reason) = reason {
                *exports.entry(reason).or_default() += 1;
            }
            for reason in conflict.iter().flat_map(|c| c.split(',')) {
                *conflicts.entry(reason).or_default() += 1;
            }
        }
        self.metrics.exports.reset();
        for (reason, count) in exports {
            self.metrics.exports.with_label_values(&[reason]).set(count);
        }
        self.metrics.conflicts.reset();
        for (reason, count) in conflicts {
            self.metrics
                .conflicts
                .with_label_values(&[reason])
                .set(count);
        }
    }

    fn write_through(&mut self, written: Written) {
        use crate::watch::IndexResource;
        match written {
            Written::Import(import) => self.local_only.imports.apply(import),
            Written::Service(service) => self.local.services.apply(service),
            Written::Slice(slice) => self.local.mcs_slices.apply(slice),
            Written::Export(export) => self.local.exports.apply(export),
            Written::Deleted {
                kind,
                namespace,
                name,
            } => match kind {
                Kind::ServiceImport | Kind::ServiceImportStatus => {
                    self.local_only.imports.forget(&namespace, &name)
                }
                Kind::Service => self.local.services.forget(&namespace, &name),
                Kind::EndpointSlice => self.local.mcs_slices.forget(&namespace, &name),
                Kind::ServiceExportStatus => {}
            },
        }
    }

    fn all_services(&self) -> BTreeSet<ServiceRef> {
        let mut all: BTreeSet<ServiceRef> = self.local.exports.services().cloned().collect();
        all.extend(self.local.mcs_slices.services().cloned());
        all.extend(self.local_only.imports.services().cloned());
        // Derived Services whose import is gone (an orphan sweep at start).
        all.extend(
            self.local
                .services
                .services()
                .filter(|key| {
                    self.local
                        .services
                        .of(key)
                        .any(|s| super::cluster::is_ours(&**s))
                })
                .cloned(),
        );
        for peer in self.peers.values() {
            if let Some(conn) = &peer.current {
                all.extend(conn.data.exports.services().cloned());
            }
        }
        all
    }
}

/// Tells the users of an import that its clusterset IP is gone (the import
/// became headless, or this cluster lost the import's families): clients
/// holding the old VIP must resolve again.
async fn vip_released(recorder: &Recorder, service: &ServiceRef, namespace: &str, derived: &str) {
    let reference = ObjectReference {
        api_version: Some(<ServiceImport as kube::Resource>::api_version(&()).into_owned()),
        kind: Some("ServiceImport".into()),
        name: Some(service.name.clone()),
        namespace: Some(namespace.to_owned()),
        ..ObjectReference::default()
    };
    let event = KubeEvent {
        type_: EventType::Warning,
        reason: "ClusterSetIPReleased".into(),
        note: Some(format!(
            "derived Service {derived} deleted: the import no longer has a clusterset IP here"
        )),
        action: "DeleteDerivedService".into(),
        secondary: None,
    };
    if let Err(error) = recorder.publish(&event, &reference).await {
        tracing::debug!(error = %crate::error::Chain(&error), "could not record an Event");
    }
}

/// The peer Leases of an earlier run: when each peer was last seen healthy,
/// so a restarted controller keeps honouring the grace period.
async fn peer_leases(client: &Client, namespace: &str) -> BTreeMap<String, (String, SystemTime)> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let params = kube::api::ListParams::default().labels(lease::LEASE_SELECTOR);
    let leases = match api.list(&params).await {
        Ok(list) => list.items,
        Err(error) => {
            tracing::warn!(error = %crate::error::Chain(&error), "cannot list peer Leases: peers that do not answer at start-up get no grace");
            return BTreeMap::new();
        }
    };
    leases
        .iter()
        .filter_map(|found| match lease::parse(found) {
            Ok(peer) => Some((peer.secret, (peer.peer_id, SystemTime::from(peer.renewed)))),
            Err(error) => {
                tracing::warn!(%error, "ignoring a peer Lease that records no peer");
                None
            }
        })
        .collect()
}

/// Whether a reconnect may happen now; if so, records it.
fn peer_reconnect_due(reconnects: &mut RestartSchedule) -> bool {
    let now = tokio::time::Instant::now();
    let due = reconnects.due(now);
    if due {
        reconnects.record(now);
    }
    due
}

/// Whether a peer's data counts: synced and healthy, or within grace.
fn usable(peer: &Peer, grace: Duration) -> bool {
    let Some(conn) = &peer.current else {
        return false;
    };
    conn.identity.is_some() && conn.synced() && (conn.healthy() || peer.within_grace(grace))
}

/// The start-up gate: this cluster listed, the peer Secrets listed, and
/// every peer synced or the start-up timeout passed. Without the Secrets
/// listed the peers are not known at all, so starting would delete
/// everything imported from them: the timeout is for peers that do not
/// answer, not for Secrets not read yet.
fn may_start(
    local_listed: bool,
    secrets_listed: bool,
    peers_synced: bool,
    timed_out: bool,
) -> bool {
    local_listed && secrets_listed && (peers_synced || timed_out)
}

/// What makes [`Controller::notice_usability`] replan: whether the peer's
/// data counts, whether it is within grace (a peer not read since start-up
/// is left alone only until its Lease's grace ends), and its connection's
/// generation.
type Usability = (bool, bool, Option<u64>);

fn usability(peer: &Peer, grace: Duration) -> Usability {
    (
        usable(peer, grace),
        peer.within_grace(grace),
        peer.current.as_ref().map(|c| c.generation),
    )
}

/// Whether a peer lets `/ready` answer 200: synced (and up or within
/// grace), or not read yet but within the grace its Lease recorded.
fn ready_peer(peer: &Peer, grace: Duration) -> bool {
    usable(peer, grace) || peer.within_grace(grace)
}

/// What reading a peer's identity gave.
enum Contact {
    /// The kubeconfig cannot be used.
    Invalid(String),
    /// The peer did not answer (retrying).
    Unreachable(String),
    /// The peer's client and identity.
    Identified(Client, Identity),
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(10);

    /// A peer whose Secret names an unreachable cluster: connecting, never
    /// identified, last seen (from its Lease) `ago`.
    fn unread_peer(ago: Option<Duration>) -> Peer {
        Peer {
            secret: "peer-a".into(),
            kubeconfig: Vec::new(),
            current: Some(PeerConn::new(
                1,
                PeerLimits {
                    exports: 10,
                    services: 10,
                    slices: 10,
                    endpoints: 100,
                },
            )),
            next: None,
            refused: None,
            removing_at: None,
            last_seen: ago.map(|ago| SystemTime::now() - ago),
            lease_renewed: None,
            lease_id: Some("a".into()),
            reconnects: RestartSchedule::default(),
        }
    }

    #[test]
    fn nothing_starts_before_the_peer_secrets_are_listed() {
        // No Secret seen yet looks like "every peer synced": it is not.
        assert!(!may_start(true, false, true, true));
        assert!(!may_start(false, true, true, true));
        assert!(may_start(true, true, true, false));
        assert!(may_start(true, true, false, true));
        assert!(!may_start(true, true, false, false));
    }

    #[test]
    fn an_unread_peer_within_its_lease_grace_keeps_the_controller_ready() {
        let fresh = unread_peer(Some(Duration::from_secs(2)));
        assert!(
            !usable(&fresh, GRACE),
            "never read: its data does not count"
        );
        assert!(ready_peer(&fresh, GRACE), "but it is within grace");
        let stale = unread_peer(Some(Duration::from_secs(20)));
        assert!(!ready_peer(&stale, GRACE));
        assert!(!ready_peer(&unread_peer(None), GRACE), "never seen at all");
    }

    #[test]
    fn an_unread_peer_leaving_grace_changes_its_usability() {
        // Neither is usable, so only the grace flag tells them apart: the
        // loop must replan when it flips, or the services left alone for
        // the unread peer keep its data forever.
        let fresh = usability(&unread_peer(Some(Duration::from_secs(2))), GRACE);
        let stale = usability(&unread_peer(Some(Duration::from_secs(20))), GRACE);
        assert_eq!((fresh.0, stale.0), (false, false));
        assert_ne!(fresh, stale);
    }
}
