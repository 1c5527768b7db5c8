//! The controller's one loop: it takes watch events, probe results and
//! membership changes from the connection tasks, and after each batch of
//! events has the services they touched planned and written.
//!
//! One owner, no locks. The loop owns a few parts, each with one job:
//! `stores` (this cluster's objects and the peers' state: what plans
//! read), `peer_io` (the peer connections, and the peers' effects carried
//! out), `writer` (plans carried out on this cluster's apiserver, and the
//! publication), the [`super::schedule::Schedule`] (when), and `signals`
//! (metrics, Events, the log of refused input). Connection tasks only
//! forward events; decisions are pure functions of the stores: the
//! peers' ([`super::peers::Peers::handle`]), the plans
//! ([`super::reconcile::plan`]), what the writer makes of them (`decide`),
//! what each Warning Event says ([`super::events::Warning`]), the
//! publication's marker ([`super::publication::marker`]) and `/explain`'s
//! answer ([`super::reconcile::explain`]). The parts only carry them out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::watcher;
use tokio::sync::{mpsc, oneshot};

use super::compat::NodeHints;
use super::connection::{ClusterKey, Connection, Report, Scope, connect};
use super::events::Events;
use super::metrics::ControllerMetrics;
use super::naming::FIELD_MANAGER;
use super::peers::{Input, Now, Peers, Settings as PeerSettings};
use super::schedule::{Schedule, Source};
use crate::api::ServiceRef;
use crate::peering::membership::local_identity_problem;
use crate::peering::{Identity, read_identity};

mod decide;
mod peer_io;
mod settings;
mod signals;
mod stores;
mod writer;

pub(super) use settings::Settings;

use peer_io::{IdentityRead, PeerIo, Replan};
use signals::Signals;
use stores::Stores;
use writer::Writer;

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

/// A question for the loop, answered between events.
#[derive(Debug)]
pub(super) enum Query {
    /// Readiness: peers synced or within grace; a warning when the mesh
    /// is larger than a mesh suits.
    Ready(oneshot::Sender<Result<Option<String>, String>>),
    /// The merge of one service, as JSON.
    Explain(ServiceRef, oneshot::Sender<serde_json::Value>),
}

/// The controller's loop and the parts it owns, each with one job.
pub(super) struct Controller {
    /// What the loop knows: this cluster's objects, the peers' state.
    stores: Stores,
    /// The peer connections and what the peers' state asks of them.
    peer_io: PeerIo,
    /// Plans carried out on this cluster's apiserver.
    writer: Writer,
    /// When to plan and write: the start-up gate, what is dirty, retries,
    /// the publication's tries.
    schedule: Schedule,
    /// Metrics, Warning Events, the log of refused input.
    signals: Signals,
    /// What the connection tasks read.
    reports: mpsc::Receiver<Report>,
    /// What the peers' identity tasks read.
    identities: mpsc::Receiver<IdentityRead>,
    /// This cluster's identity, read again every [`IDENTITY_CHECK`].
    local_identity: mpsc::Receiver<Identity>,
    /// Why the controller must stop, once it knows.
    fatal: Option<String>,
    /// This cluster's watches and the peer Secret watch.
    _local_connection: Connection,
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
        let node_hints = super::compat::node_hints(&client, &settings.namespace).await;
        if let NodeHints::Refused(message) = &node_hints {
            tracing::warn!(%message, "the apiserver refuses trafficDistribution PreferSameNode: local-first imports asking for it get zone hints (PreferClose) here");
        }
        let leases = peer_io::peer_leases(&client, &settings.namespace).await;
        let peers = Peers::new(
            PeerSettings {
                local_id: identity.cluster_id.clone(),
                local_clusterset: identity.clusterset.clone(),
                grace: settings.grace,
                limits: settings.peer_limits,
            },
            leases,
        );
        let (reports_tx, reports) = mpsc::channel(REPORTS_QUEUED);
        let mut local_connection = connect(
            client.clone(),
            ClusterKey::Local,
            Scope::Local {
                namespace: settings.namespace.clone(),
            },
            reports_tx.clone(),
        );
        local_connection.adopt(watch_peer_secrets(&client, &settings, reports_tx.clone()));
        local_connection.adopt(super::hub::spawn(
            client.clone(),
            &settings.namespace,
            &identity.cluster_id,
            reports_tx.clone(),
        ));
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
        let (peer_io, identities) =
            PeerIo::new(client.clone(), &identity.cluster_id, &settings, reports_tx);
        Ok(Self {
            writer: Writer::new(client, &settings.namespace, &identity.cluster_id),
            peer_io,
            schedule: Schedule::new(Instant::now(), settings.startup_sync_timeout),
            stores: Stores::new(identity, peers, &settings, node_hints),
            signals: Signals::new(metrics, events),
            reports,
            identities,
            local_identity,
            fatal: None,
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
                    self.peer_io.identity_read(&secret, generation, client);
                    self.step(Input::Identity { secret, generation, contact });
                }
                Some(query) = queries.recv() => self.answer(query),
                _ = tick.tick() => self.tick(),
                // More planned work left from the last batch: go on at once.
                () = std::future::ready(()), if self.schedule.has_work() => {}
                Some(now) = self.local_identity.recv() => {
                    if let Some(changed) = self.stores.identity_changed(&now) {
                        return changed;
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
                .publish_due(self.stores.local_synced(), Instant::now())
            {
                let complete = self
                    .writer
                    .publish(&mut self.stores, &mut self.schedule, &self.signals)
                    .await;
                self.schedule.publish_tried(complete, Instant::now());
            }
            self.maybe_start();
            if self.schedule.has_work() {
                self.writer
                    .reconcile(&mut self.stores, &mut self.schedule, &self.signals)
                    .await;
            }
        }
    }

    fn handle(&mut self, report: Report) {
        match report {
            Report::Watch(ClusterKey::Local, event) => {
                let (touched, fatal) = self.stores.local_event(*event, Instant::now());
                if let Some(fatal) = fatal {
                    self.fatal.get_or_insert(fatal);
                }
                self.schedule.mark(&Source::Local, touched, Instant::now());
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
            } => self
                .peer_io
                .publication_rejected(&self.signals, &key, &peer, reason, &what),
            Report::Probe(ClusterKey::Local, _)
            | Report::Identity(ClusterKey::Local, _)
            | Report::FormChanged(ClusterKey::Local, _) => {}
            Report::Peers(input) => self.step(*input),
            Report::Secrets(event) => {
                if let Some(input) = self.peer_io.secret_input(&self.signals, *event) {
                    self.step(input);
                }
            }
        }
    }

    /// Feeds one input to the peers' state, has the peers' I/O carry out
    /// its effects and marks what they touched; then drops the I/O of
    /// connections the peers no longer have.
    fn step(&mut self, input: Input) {
        // What a peer's watch touched takes its turn as that peer's.
        let source = match &input {
            Input::Watch { secret, .. } => Source::Peer(secret.clone()),
            _ => Source::Local,
        };
        for effect in self.stores.peers.handle(input, Now::current()) {
            match self.peer_io.carry_out(&self.signals, effect) {
                Some(Replan::Services(touched)) => {
                    self.schedule.mark(&source, touched, Instant::now())
                }
                Some(Replan::All) => self.schedule.mark_all(),
                None => {}
            }
        }
        let peers = &self.stores.peers;
        self.peer_io
            .keep_live(|secret, generation| peers.is_live(secret, generation));
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
        let Some(peers_synced) = self.schedule.open_gate(self.stores.gate(), Instant::now()) else {
            return;
        };
        if !peers_synced {
            tracing::warn!(
                "start-up: not every peer synced within the start-up timeout; services naming an unread peer are left as they are"
            );
        }
        tracing::info!(peers = self.stores.peers.len(), "reconciling");
    }

    fn readiness(&self) -> Result<Option<String>, String> {
        if let Some(waiting_for) = self.schedule.waiting_for(self.stores.gate()) {
            return Err(waiting_for.into());
        }
        let waiting = self.stores.peers.not_ready(Now::current());
        if waiting.is_empty() {
            Ok(crate::peering::mesh_size_warning(
                self.stores.peers.mesh_len(),
            ))
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
                let refusals = self.writer.write_refusals(&service);
                let started = self.schedule.started();
                let _ = reply.send(self.stores.explain(&service, refusals, started));
            }
        }
    }
}

/// Watches the peer Secrets (those matching the peer selector), sending
/// each event to the loop as a pseudo-cluster's report.
fn watch_peer_secrets(
    client: &Client,
    settings: &Settings,
    reports: mpsc::Sender<Report>,
) -> tokio::task::JoinHandle<()> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &settings.namespace);
    let stream = crate::watch::stream(
        secrets,
        watcher::Config::default().labels(&settings.peer_selector),
    );
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if reports
                .send(Report::Secrets(Box::new(event)))
                .await
                .is_err()
            {
                return;
            }
        }
    })
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
