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
use super::membership::local_identity_problem;
use super::metrics::ControllerMetrics;
use super::naming::FIELD_MANAGER;
use super::peers::{Contact, Effect, Input, Now, Peers, Settings as PeerSettings, may_start};
use super::reconcile::{Inputs, Kind, NamespaceFilter, Plan, Write, plan};
use crate::api::{ServiceExport, ServiceImport};
use crate::model::ServiceRef;
use crate::peering::{self, identity, lease, read_identity, reason};
use crate::watch::{Verdict, Watch};

/// How often this cluster's ClusterProperties are read again.
const IDENTITY_CHECK: Duration = Duration::from_secs(30);

/// How many services one reconcile cycle plans and writes.
const SERVICES_PER_CYCLE: usize = 256;

/// How many writes run at once.
const WRITE_CONCURRENCY: usize = 16;

/// How many plan-and-write rounds a cycle runs for the services that wrote
/// (a new ClusterSetIP service needs three).
const ROUNDS_PER_CYCLE: usize = 3;

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

/// The I/O of one peer connection: the identity read, the client it read
/// with, then the watches and probe. Dropping it stops them.
struct ConnTasks {
    identity: Option<tokio::task::JoinHandle<()>>,
    client: Option<Client>,
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
pub struct Controller {
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
    metrics: Arc<ControllerMetrics>,
    recorder: Recorder,
    started_at: Instant,
    started: bool,
    dirty: Touched,
    first_change: Option<Instant>,
    retry: BTreeSet<ServiceRef>,
    /// Per service: the local export's `Valid` reason and the conflict
    /// reasons, for the gauges.
    summaries: BTreeMap<ServiceRef, (Option<&'static str>, Option<String>)>,
    /// Why the controller must stop, once it knows.
    fatal: Option<String>,
    _local_connection: Connection,
}

/// What an identity task read: the connection, what it found, and the
/// client it read with when the peer answered.
type IdentityRead = (String, u64, Contact, Option<Client>);

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
        let peer_settings = PeerSettings {
            local_id: identity.cluster_id.clone(),
            local_clusterset: identity.clusterset.clone(),
            grace: settings.grace,
            limits: settings.peer_limits,
        };
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
            peers: Peers::new(peer_settings, leases),
            tasks: BTreeMap::new(),
            reports_tx,
            reports,
            identities_tx,
            identities,
            metrics,
            recorder,
            started_at: Instant::now(),
            started: false,
            dirty: Touched::default(),
            first_change: None,
            retry: BTreeSet::new(),
            summaries: BTreeMap::new(),
            fatal: None,
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
                Some((secret, generation, contact, client)) = self.identities.recv() => {
                    if let Some(tasks) = self.tasks.get_mut(&(secret.clone(), generation)) {
                        tasks.client = client;
                    }
                    self.step(Input::Identity { secret, generation, contact });
                }
                Some(query) = queries.recv() => self.answer(query),
                _ = tick.tick() => self.tick(),
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
            if self.started && !self.dirty.is_empty() {
                self.reconcile().await;
            }
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
                match outcome.verdict() {
                    Verdict::Fatal(message) => {
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
                self.mark(touched);
            }
            Report::Watch(ClusterKey::Peer { secret, generation }, event) => {
                self.step(Input::Watch {
                    secret,
                    generation,
                    event,
                });
            }
            Report::Probe(ClusterKey::Peer { secret, generation }, result) => {
                self.step(Input::Probe {
                    secret,
                    generation,
                    result,
                });
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

    /// The peer Secret watch, as inputs of the peers' state.
    fn secrets(&mut self, event: Result<WatcherEvent<Secret>, watcher::Error>) {
        let kubeconfig = |secret: &Secret| peering::kubeconfig_data(secret).to_vec();
        let input = match event {
            Ok(WatcherEvent::Apply(secret)) => Input::SecretApplied {
                kubeconfig: kubeconfig(&secret),
                name: secret.name_any(),
                listed: false,
            },
            Ok(WatcherEvent::InitApply(secret)) => Input::SecretApplied {
                kubeconfig: kubeconfig(&secret),
                name: secret.name_any(),
                listed: true,
            },
            Ok(WatcherEvent::Delete(secret)) => Input::SecretDeleted(secret.name_any()),
            Ok(WatcherEvent::Init) => Input::SecretsListing,
            Ok(WatcherEvent::InitDone) => Input::SecretsListed,
            Err(error) => {
                tracing::warn!(error = %crate::error::Chain(&error), "watch of peer Secrets failing");
                return;
            }
        };
        self.step(input);
    }

    /// Feeds one input to the peers' state and carries out its effects;
    /// then drops the I/O of connections the peers no longer have.
    fn step(&mut self, input: Input) {
        for effect in self.peers.handle(input, Now::current()) {
            self.carry_out(effect);
        }
        let peers = &self.peers;
        self.tasks
            .retain(|(secret, generation), _| peers.is_live(secret, *generation));
    }

    fn carry_out(&mut self, effect: Effect) {
        match effect {
            Effect::Connect {
                secret,
                generation,
                kubeconfig,
            } => {
                let identity = self.spawn_identity(&secret, generation, kubeconfig);
                let tasks = ConnTasks {
                    identity: Some(identity),
                    client: None,
                    connection: None,
                };
                self.tasks.insert((secret, generation), tasks);
            }
            Effect::StartWatches {
                secret,
                generation,
                id,
            } => {
                let scope = Scope::Peer {
                    id,
                    probe_interval: self.settings.probe_interval,
                    probe_timeout: self.settings.probe_timeout,
                };
                let reports = self.reports_tx.clone();
                let key = (secret, generation);
                if let Some(tasks) = self.tasks.get_mut(&key)
                    && let Some(client) = tasks.client.clone()
                {
                    let (secret, generation) = key;
                    let cluster = ClusterKey::Peer { secret, generation };
                    tasks.connection = Some(connect(client, cluster, scope, reports));
                }
            }
            Effect::Refused {
                secret,
                reason,
                message,
            } => self.record_refusal(&secret, reason, &message),
            Effect::Touched(touched) => self.mark(touched),
            Effect::ReplanAll => self.dirty.all = true,
            Effect::SyncError { peer, kind } => self
                .metrics
                .peer_sync_errors
                .with_label_values(&[&peer, kind])
                .inc(),
            Effect::OverLimit { peer, count } => self
                .metrics
                .rejected
                .with_label_values(&[&peer, "peer-limit"])
                .inc_by(count),
            Effect::RenewLease { id, secret, seen } => {
                tokio::spawn(renew_lease(
                    self.client.clone(),
                    self.settings.namespace.clone(),
                    self.local_id.clone(),
                    self.settings.grace,
                    (id, secret, seen),
                ));
            }
            Effect::Gauges { id, up, last_seen } => {
                self.metrics
                    .peer_up
                    .with_label_values(&[&id])
                    .set(up as i64);
                if let Some(since) =
                    last_seen.and_then(|seen| seen.duration_since(SystemTime::UNIX_EPOCH).ok())
                {
                    self.metrics
                        .peer_last_seen
                        .with_label_values(&[&id])
                        .set(since.as_secs() as i64);
                }
            }
            Effect::Forget { id } => {
                self.metrics.peer_up.remove_label_values(&[&id]).ok();
            }
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
                    let invalid = Contact::Invalid(error.to_string());
                    let _ = tx.send((secret, generation, invalid, None)).await;
                    return;
                }
            };
            let mut delay = Duration::from_millis(500);
            loop {
                let (contact, answered) = match read_identity(&client).await {
                    Ok(identity) => (Contact::Identified(identity), Some(client.clone())),
                    Err(error) => (Contact::Unreachable(error), None),
                };
                let done = answered.is_some();
                if tx
                    .send((secret.clone(), generation, contact, answered))
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

    /// Counts a refused peer Secret and records a Warning Event on it.
    fn record_refusal(&self, secret: &str, reason: &'static str, message: &str) {
        self.metrics
            .peers_refused
            .with_label_values(&[reason])
            .inc();
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

    /// Once a second: the peers' timers (Secrets gone, Leases, gauges,
    /// grace periods), and failed writes retried.
    fn tick(&mut self) {
        self.step(Input::Tick);
        if !self.retry.is_empty() {
            let retry = std::mem::take(&mut self.retry);
            self.dirty.services.extend(retry);
        }
    }

    /// Starts reconciling once this cluster is listed and every peer has
    /// synced, or the start-up timeout has passed.
    fn maybe_start(&mut self) {
        if self.started {
            return;
        }
        let peers_synced = self.peers.synced();
        let timed_out = self.started_at.elapsed() >= self.settings.startup_sync_timeout;
        if may_start(
            self.local_watches.synced(),
            self.peers.listed(),
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
        if !self.peers.listed() {
            return Err("the peer Secrets are not listed yet".into());
        }
        if !self.started {
            return Err("waiting for peers' first sync".into());
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
        let (views, unknown) = self.peers.views(Now::current());
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
        all.extend(self.peers.exported_services().cloned());
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

/// Records in peer `id`'s Lease (held by this cluster) that the peer was
/// healthy at `seen`: a restarted controller keeps honouring the grace
/// period from there.
async fn renew_lease(
    client: Client,
    namespace: String,
    local_id: String,
    grace: Duration,
    (id, secret, seen): (String, String, SystemTime),
) {
    let api: Api<Lease> = Api::namespaced(client, &namespace);
    let lease = lease::lease(&namespace, &id, &secret, &local_id, grace, seen);
    let mut body = serde_json::to_value(&lease).unwrap_or_default();
    body["apiVersion"] = "coordination.k8s.io/v1".into();
    body["kind"] = "Lease".into();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    if let Err(error) = api
        .patch(&lease::lease_name(&id), &params, &Patch::Apply(body))
        .await
    {
        tracing::warn!(peer = id, error = %crate::error::Chain(&error), "cannot renew the peer Lease");
    }
}
