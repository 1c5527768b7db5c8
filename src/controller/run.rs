//! The controller's one loop: it owns every cluster's indexed state, takes
//! watch events, probe results and membership changes from the connection
//! tasks, and after each batch of events plans and writes the services
//! they touched.
//!
//! One owner, no locks: connection tasks only forward events; decisions
//! are pure functions of the state here: the peers'
//! ([`super::peers::Peers::handle`]), the plans
//! ([`super::reconcile::plan`]), what the cycle makes of them (`decide`),
//! what each Warning Event says ([`super::events::Warning`]), the
//! publication's marker ([`super::publication::marker`]) and `/explain`'s
//! answer ([`super::reconcile::explain`]). This shell carries them out:
//! the peers' effects in `peer_io`, the write cycle in `cycle`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::Api;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::watcher;
use tokio::sync::{mpsc, oneshot};

use super::cluster::{
    ClusterData, ClusterWatches, LocalData, Objects, PeerLimits, Published, Touched,
};
use super::connection::{ClusterKey, Connection, Report, Scope, WatchEvent, connect};
use super::events::Events;
use super::ip_share::IpShare;
use super::lean::Lean;
use super::metrics::ControllerMetrics;
use super::naming::FIELD_MANAGER;
use super::peers::{Contact, Input, Now, Peers, Settings as PeerSettings};
use super::publication::Form;
use super::reconcile::{Inputs, NamespaceFilter, explain, plan};
use super::schedule::{Gate, Schedule, Source};
use crate::api::ServiceRef;
use crate::api::{PublishedService, ServiceImport};
use crate::peering::membership::local_identity_problem;
use crate::peering::{Identity, read_identity};
use crate::watch::{Verdict, Watch};

mod cycle;
mod decide;
mod peer_io;

/// How often this cluster's ClusterProperties are read again.
const IDENTITY_CHECK: Duration = Duration::from_secs(30);

/// How many reports may wait for the loop; a watch whose report does not
/// fit waits, nothing is dropped. The loop plans once per batch of what is
/// queued, so the queue is what lets a cold start's events arrive in few,
/// large batches: with 512 instead, one run wrote 11 % more imports and
/// import statuses at a cold start ("Runs H to J" in
/// docs/benchmarks-controller.md). Queued reports hold decoded objects
/// (a 10-endpoint slice is about 5 KB before it is compacted); the slots
/// themselves are small ([`Report`] boxes its events).
const REPORTS_QUEUED: usize = 4096;

/// How many writes run at once.
const WRITE_CONCURRENCY: usize = 16;

/// Settings of the loop.
#[derive(Debug, Clone)]
pub(super) struct Settings {
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
    /// In the opt-in mode, the labels of the namespaces imported into.
    pub import_selector: Option<crate::label_selector::LabelSelector>,
    /// The percentage of the Service CIDR one peer alone may make this
    /// cluster allocate as clusterset IPs.
    pub peer_ip_share: u8,
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
pub(super) enum Query {
    /// Readiness: peers synced or within grace.
    Ready(oneshot::Sender<Result<(), String>>),
    /// The merge of one service, as JSON.
    Explain(ServiceRef, oneshot::Sender<serde_json::Value>),
}

/// The I/O of one peer connection: the identity read, the client it read
/// with, then the watches and probe. Dropping it stops them.
struct ConnTasks {
    identity: Option<tokio::task::JoinHandle<()>>,
    /// The client the identity was read with, and where and in which form
    /// the peer publishes.
    client: Option<(Client, String, Form)>,
    connection: Option<Connection>,
}

impl Drop for ConnTasks {
    fn drop(&mut self) {
        if let Some(task) = &self.identity {
            task.abort();
        }
    }
}

/// The controller's state and loop.
pub(super) struct Controller {
    settings: Settings,
    client: Client,
    local_id: String,
    local_clusterset: String,
    local: ClusterData,
    local_only: LocalData,
    local_watches: LocalWatches,
    /// The peers' state (pure); its effects are carried out here.
    peers: Peers,
    /// The I/O of each live peer connection, by Secret and generation.
    tasks: BTreeMap<(String, u64), ConnTasks>,
    reports_tx: mpsc::Sender<Report>,
    reports: mpsc::Receiver<Report>,
    identities_tx: mpsc::Sender<IdentityRead>,
    identities: mpsc::Receiver<IdentityRead>,
    /// This cluster's identity, read again every [`IDENTITY_CHECK`].
    local_identity: mpsc::Receiver<Identity>,
    metrics: Arc<ControllerMetrics>,
    /// Warning Events, published off the loop ([`super::events`]).
    events: Events,
    /// The log lines of refused peer input: one a second.
    rejection_logs: crate::ops::log_limit::LogLimiter,
    /// When to plan and write: the start-up gate, what is dirty, retries,
    /// the publication's tries.
    schedule: Schedule,
    /// Writes of the last cycle refused at the apiserver (an object not
    /// ours found under the name), by service, for `/explain`.
    write_refusals: BTreeMap<ServiceRef, Vec<crate::controller::reconcile::Refusal>>,
    /// Services whose writes failed in the cycle under way: the others
    /// planned in it end their failure streak.
    failed_this_cycle: std::collections::BTreeSet<ServiceRef>,
    /// Peer input each service's last plan rejected: a rejection not in
    /// it is new, and counted and published once.
    rejections: BTreeMap<ServiceRef, Vec<crate::controller::reconcile::Rejection>>,
    /// Per service: the local export's `Valid` reason and the conflict
    /// reasons, for the gauges.
    summaries: BTreeMap<ServiceRef, decide::Summary>,
    /// Why the controller must stop, once it knows.
    fatal: Option<String>,
    /// The label of each peer Secret's credential expiry gauge.
    credential_labels: BTreeMap<String, String>,
    _local_connection: Connection,
}

/// What an identity task read: the connection, what it found, and when the
/// peer answered, the client it read with and where and in which form the
/// peer publishes.
type IdentityRead = (String, u64, Contact, Option<(Client, String, Form)>);

struct LocalWatches {
    cluster: ClusterWatches,
    kubernetes_slices: Watch<Lean<EndpointSlice>, Objects<EndpointSlice>>,
    imports: Watch<Lean<ServiceImport>, Objects<ServiceImport>>,
    namespaces: Watch<k8s_openapi::api::core::v1::Namespace, LocalData>,
    cidrs: Watch<k8s_openapi::api::networking::v1::ServiceCIDR, LocalData>,
    nodes: Watch<Lean<k8s_openapi::api::core::v1::Node>, LocalData>,
    published: Watch<Lean<PublishedService>, Published>,
    published_slices: Watch<Lean<EndpointSlice>, Published>,
}

impl LocalWatches {
    fn new() -> Self {
        Self {
            cluster: ClusterWatches::new("endpointslices (ours)"),
            kubernetes_slices: Watch::new("endpointslices (of local services)"),
            imports: Watch::new("serviceimports"),
            namespaces: Watch::new("namespaces"),
            cidrs: Watch::new("servicecidrs"),
            nodes: Watch::new("nodes"),
            published: Watch::new("publishedservices"),
            published_slices: Watch::new("endpointslices (published)"),
        }
    }

    fn synced(&self) -> bool {
        self.cluster.synced()
            && self.kubernetes_slices.health().synced()
            && self.imports.health().synced()
            && self.namespaces.health().synced()
            && self.cidrs.health().synced()
            && self.nodes.health().synced()
            && self.published.health().synced()
            && self.published_slices.health().synced()
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
    pub(super) async fn start(
        client: Client,
        settings: Settings,
        metrics: Arc<ControllerMetrics>,
    ) -> Result<Self, StartError> {
        let identity = read_identity(&client).await.map_err(StartError::Identity)?;
        if let Some(problem) = local_identity_problem(&identity.cluster_id) {
            return Err(StartError::Identity(problem));
        }
        tracing::info!(cluster = %identity.cluster_id, clusterset = %identity.clusterset, "cluster identity");
        let leases = peer_io::peer_leases(&client, &settings.namespace).await;
        let peer_settings = PeerSettings {
            local_id: identity.cluster_id.clone(),
            local_clusterset: identity.clusterset.clone(),
            grace: settings.grace,
            limits: settings.peer_limits,
        };
        let (reports_tx, reports) = mpsc::channel(REPORTS_QUEUED);
        let (identities_tx, identities) = mpsc::channel(64);
        let local_connection = connect(
            client.clone(),
            ClusterKey::Local,
            Scope::Local {
                namespace: settings.namespace.clone(),
            },
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
                if secret_tx
                    .send(Report::Secrets(Box::new(event)))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
        let mut local_connection = local_connection;
        local_connection.adopt(secret_task);
        // Read again off the loop: a hung apiserver must not stall it.
        let (identity_tx, local_identity) = mpsc::channel(1);
        local_connection.adopt(tokio::spawn(reread_identity(client.clone(), identity_tx)));
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: FIELD_MANAGER.into(),
                instance: Some(settings.instance.clone()),
            },
        );
        let events = Events::spawn(recorder, metrics.events_dropped.clone());
        let startup_sync_timeout = settings.startup_sync_timeout;
        Ok(Self {
            settings,
            client,
            local_id: identity.cluster_id,
            local_clusterset: identity.clusterset,
            local: ClusterData::default(),
            local_only: LocalData::default(),
            local_watches: LocalWatches::new(),
            peers: Peers::new(peer_settings, leases),
            tasks: BTreeMap::new(),
            reports_tx,
            reports,
            identities_tx,
            identities,
            local_identity,
            metrics,
            events,
            rejection_logs: crate::ops::log_limit::LogLimiter::new(
                crate::ops::log_limit::NETWORK_LOG_INTERVAL,
            ),
            schedule: Schedule::new(Instant::now(), startup_sync_timeout),
            write_refusals: BTreeMap::new(),
            failed_this_cycle: std::collections::BTreeSet::new(),
            rejections: BTreeMap::new(),
            summaries: BTreeMap::new(),
            fatal: None,
            credential_labels: BTreeMap::new(),
            _local_connection: local_connection,
        })
    }

    /// Runs until this cluster's identity changes (KEP-2149: a changed id
    /// or clusterset is leaving and rejoining, so the process exits and its
    /// restart starts over), or its role turns out not to allow reading
    /// what it needs; returns why.
    pub(super) async fn run(mut self, mut queries: mpsc::Receiver<Query>) -> String {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
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
                Some((secret, generation, contact, client)) = self.identities.recv() => {
                    if let Some(tasks) = self.tasks.get_mut(&(secret.clone(), generation)) {
                        tasks.client = client;
                    }
                    self.step(Input::Identity { secret, generation, contact });
                }
                Some(query) = queries.recv() => self.answer(query),
                _ = tick.tick() => self.tick(),
                // More planned work left from the last batch: go on at once.
                () = std::future::ready(()), if self.schedule.has_work() => {}
                Some(now) = self.local_identity.recv() => {
                    if now.cluster_id != self.local_id || now.clusterset != self.local_clusterset {
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
            // The publication reads no peer: it is written, and its marker,
            // as soon as this cluster is listed, so that peers waiting at
            // their own start-up gate for this one can read it.
            if self
                .schedule
                .publish_due(self.local_watches.synced(), Instant::now())
            {
                let complete = self.publish().await;
                self.schedule.publish_tried(complete, Instant::now());
            }
            self.maybe_start();
            if self.schedule.has_work() {
                self.reconcile().await;
            }
        }
    }

    fn mark(&mut self, source: &Source, touched: Touched) {
        self.schedule.mark(source, touched, Instant::now());
    }

    fn handle(&mut self, report: Report) {
        let now = Instant::now();
        match report {
            Report::Watch(ClusterKey::Local, event) => {
                let w = &mut self.local_watches;
                let outcome = match *event {
                    WatchEvent::Cluster(e) => w.cluster.handle(&mut self.local, e, now),
                    WatchEvent::KubernetesSlices(e) => {
                        w.kubernetes_slices
                            .handle(&mut self.local_only.kubernetes_slices, e, now)
                    }
                    WatchEvent::Imports(e) => {
                        w.imports.handle(&mut self.local_only.imports, e, now)
                    }
                    WatchEvent::Namespaces(e) => w.namespaces.handle(&mut self.local_only, e, now),
                    WatchEvent::ServiceCidrs(e) => w.cidrs.handle(&mut self.local_only, e, now),
                    WatchEvent::Nodes(e) => w.nodes.handle(&mut self.local_only, e, now),
                    WatchEvent::Published(e) => {
                        w.published.handle(&mut self.local_only.published, e, now)
                    }
                    WatchEvent::PublishedSlices(e) => {
                        w.published_slices
                            .handle(&mut self.local_only.published, e, now)
                    }
                };
                match outcome.verdict() {
                    Verdict::Fatal { message, .. } => {
                        self.fatal.get_or_insert_with(|| {
                            format!(
                                "the controller's role does not allow what it needs: {message} (deploy/controller.yaml has the role it needs)"
                            )
                        });
                    }
                    Verdict::FailingStarted(error) => tracing::warn!(%error, "local watch failing"),
                    Verdict::StillFailing(_) | Verdict::Quiet => {}
                }
                let mut touched = self.take_local_touched();
                touched.all |= self.local_only.take_all_touched();
                self.mark(&Source::Local, touched);
            }
            Report::Watch(ClusterKey::Peer { secret, generation }, event) => {
                self.step(Input::Watch {
                    secret,
                    generation,
                    event: *event,
                });
            }
            Report::Probe(ClusterKey::Peer { secret, generation }, result) => {
                self.step(Input::Probe {
                    secret,
                    generation,
                    result,
                });
            }
            Report::Identity(ClusterKey::Peer { secret, generation }, identity) => {
                self.step(Input::Identity {
                    secret,
                    generation,
                    contact: crate::controller::peers::Contact::Identified(identity),
                });
            }
            Report::FormChanged(ClusterKey::Peer { secret, generation }, form) => {
                tracing::info!(secret, ?form, "peer publishes in another form");
                self.step(Input::Reconnect { secret, generation });
            }
            Report::Rejected {
                key,
                peer,
                reason,
                what,
            } => self.publication_rejected(&key, &peer, reason, &what),
            Report::Probe(ClusterKey::Local, _)
            | Report::Identity(ClusterKey::Local, _)
            | Report::FormChanged(ClusterKey::Local, _) => {}
            Report::Secrets(event) => self.secrets(*event),
        }
    }

    fn take_local_touched(&mut self) -> Touched {
        let mut touched = self.local.take_touched();
        touched.merge(self.local_only.kubernetes_slices.take_touched());
        touched.merge(self.local_only.imports.take_touched());
        touched.merge(self.local_only.published.take_touched());
        touched
    }

    /// Once a second: the peers' timers (Secrets gone, Leases, gauges,
    /// grace periods), failed writes retried, and heap freed by the last
    /// writes released.
    fn tick(&mut self) {
        self.step(Input::Tick);
        self.schedule.tick(Instant::now());
        if self.schedule.release_due(false, Instant::now()) {
            crate::ops::memory::release_freed_memory();
        }
    }

    /// Starts reconciling once this cluster is listed and every peer has
    /// synced, or the start-up timeout has passed.
    fn maybe_start(&mut self) {
        let Some(peers_synced) = self.schedule.open_gate(self.gate(), Instant::now()) else {
            return;
        };
        if !peers_synced {
            tracing::warn!(
                "start-up: not every peer synced within the start-up timeout; services naming an unread peer are left as they are"
            );
        }
        tracing::info!(peers = self.peers.len(), "reconciling");
    }

    fn gate(&self) -> Gate {
        Gate {
            local_listed: self.local_watches.synced(),
            secrets_listed: self.peers.listed(),
            peers_synced: self.peers.synced(),
        }
    }

    fn readiness(&self) -> Result<(), String> {
        if let Some(waiting_for) = self.schedule.waiting_for(self.gate()) {
            return Err(waiting_for.into());
        }
        let waiting = self.peers.not_ready(Now::current());
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

    /// `/explain`'s answer for `service`, planned now.
    fn explain(&self, service: &ServiceRef) -> serde_json::Value {
        let write_refusals = self
            .write_refusals
            .get(service)
            .map_or(&[][..], Vec::as_slice);
        let explanation = self.with_inputs(|inputs| {
            let plan = plan(inputs, service);
            explain(
                service,
                inputs.local_id,
                inputs.peers,
                &plan,
                write_refusals,
            )
        });
        // Plain data (string keys only): serialising it cannot fail.
        serde_json::to_value(explanation).unwrap_or_default()
    }

    /// Runs `f` with everything a plan reads, as of now.
    fn with_inputs<R>(&self, f: impl FnOnce(&Inputs<'_>) -> R) -> R {
        let (views, unknown) = self.peers.views(Now::current());
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        f(&Inputs {
            local_id: &self.local_id,
            local: &self.local,
            local_only: &self.local_only,
            peers: &views,
            unknown_peers: &unknown,
            deny: &self.settings.deny,
            import_selector: self.settings.import_selector.as_ref(),
            ip_share: &IpShare::new(self.settings.peer_ip_share),
            // Nothing is deleted before the start-up gate opens.
            deletions_allowed: self.schedule.started(),
            publish_namespace: &self.settings.namespace,
            now: &now,
        })
    }
}

/// Reads this cluster's identity every [`IDENTITY_CHECK`] (each read
/// bounded by the identity timeout; a failed one is skipped) and sends it.
async fn reread_identity(client: Client, identities: mpsc::Sender<Identity>) {
    let mut every = tokio::time::interval(IDENTITY_CHECK);
    every.tick().await;
    loop {
        every.tick().await;
        match read_identity(&client).await {
            Ok(identity) => {
                if identities.send(identity).await.is_err() {
                    return;
                }
            }
            Err(error) => {
                tracing::debug!(%error, "cannot read this cluster's identity again; retrying")
            }
        }
    }
}
