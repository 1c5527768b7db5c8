//! The Kubernetes source as a pure state machine: [`State::handle`] takes
//! one [`Input`] (a watcher event of one of the three kinds or of the
//! ClusterProperty watch, a restart of the watches, the end of a batch)
//! and returns the [`Effect`]s the shell carries out (metrics, staleness,
//! publishing, a fatal error). No I/O, no client, no runtime: the tests
//! drive it with synthetic events.
//!
//! Each kind has a [`Watch`] (list buffering, health); all three feed one
//! [`Index`] through [`Ingest`], which projects objects, keeps an invalid
//! object at its last valid version, and remembers rejections for
//! `/explain`.
//!
//! Nothing is served before every kind has been listed, so the first lists
//! go into the index as they arrive, and the ClusterSetIP services they
//! change are built between batches ([`Index::prebuild`]): the first zone
//! then builds only the headless services, whose slices may still be on
//! their way, not everything after the last byte. Relists are buffered and
//! replace the index in one step.
//!
//! A fourth watch reads this cluster's id (the `ClusterProperty`
//! `cluster.clusterset.k8s.io`), which only local-first answers need. It is
//! optional: the first zone waits for its first list or its first failure,
//! but never longer, and its failures (the CRD not installed, the role
//! without `clusterproperties`) neither stop the server nor make it stale:
//! the id is then unknown, local-first imports answer from every cluster,
//! and the log and `/explain` say why.

use std::time::Instant;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::PartialObjectMeta;
use kube::core::DynamicObject;
use kube::runtime::watcher::{self, Event};

use super::KubeSourceError;
use crate::api::ClusterProperty;
use crate::api::ServiceRef;
use crate::api::stripped::{Dns, Stripped};
use crate::api::well_known::CLUSTER_ID_PROPERTY;
use crate::index::{Index, PublishStats};
use crate::inquiry::{Rejection, SourceReport};
use crate::model::OwnCluster;
use crate::watch::{Health, Outcome, Verdict, Watch};
use crate::zone::{Zone, ZoneSettings};

mod ingest;
#[cfg(test)]
mod tests;

use self::ingest::Ingest;

/// One of the three watched kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// ServiceImports.
    Imports,
    /// EndpointSlices with the service-name label.
    Slices,
    /// Namespaces (metadata only).
    Namespaces,
}

impl Kind {
    /// The three kinds.
    pub const ALL: [Self; 3] = [Self::Imports, Self::Slices, Self::Namespaces];

    /// The resource name, as in logs and metric labels.
    pub fn resource(self) -> &'static str {
        match self {
            Self::Imports => "serviceimports",
            Self::Slices => "endpointslices",
            Self::Namespaces => "namespaces",
        }
    }
}

/// The resource name of the ClusterProperty watch, in logs and metric
/// labels.
pub const CLUSTER_PROPERTIES: &str = "clusterproperties";

/// A ServiceImport as the watch decodes it: the metadata the index reads,
/// its spec undecoded (see [`Stripped`]).
pub type WatchedImport = Stripped<DynamicObject, Dns>;

/// What the state machine is told.
#[derive(Debug)]
pub enum Input {
    /// An item of the ServiceImport watch.
    Import(Result<Event<WatchedImport>, watcher::Error>),
    /// An item of the EndpointSlice watch.
    Slice(Result<Event<EndpointSlice>, watcher::Error>),
    /// An item of the Namespace watch.
    Namespace(Result<Event<PartialObjectMeta<Namespace>>, watcher::Error>),
    /// An item of the watch of the ClusterProperty
    /// `cluster.clusterset.k8s.io` (this cluster's id).
    ClusterProperty(Result<Event<ClusterProperty>, watcher::Error>),
    /// The apiserver left a liveness probe unanswered (the error says
    /// how long it waited): it or the path to it is hung, so every watch is
    /// failing though none has errored.
    Unresponsive(String),
    /// The shell restarted every watch (the apiserver answered again after
    /// a failure); each starts with a list.
    Restarted,
    /// The end of a batch of events: publish if there is something to.
    Flush,
}

/// What the shell does.
#[derive(Debug)]
pub enum Effect {
    /// Count an object rejected as invalid (`invalid_objects_total{kind}`).
    InvalidObject(&'static str),
    /// Count a failed list or watch (`watch_errors_total{resource}`).
    WatchError(&'static str),
    /// Count a 410 Gone (`watch_expired_total{resource}`).
    WatchExpired(&'static str),
    /// Count a liveness probe the apiserver left unanswered
    /// (`apiserver_probe_timeouts_total`).
    Unanswered,
    /// Count a restart of the watches (`watch_restarts_total`).
    Restarted,
    /// The source is failing (`true`) or current again (`false`).
    Stale(bool),
    /// Serve a new zone.
    Publish(Publication),
    /// Stop: retrying cannot help.
    Fatal(KubeSourceError),
}

/// A zone to serve.
#[derive(Debug)]
pub struct Publication {
    /// The zone.
    pub zone: Zone,
    /// What building it did.
    pub stats: PublishStats,
    /// It is the first zone: the server becomes ready.
    pub first: bool,
    /// A list was indexed since the last zone: its pages are garbage.
    pub after_list: bool,
    /// Services built while the first lists arrived (the first zone only).
    pub prebuilt: usize,
}

/// The index and everything the three watches keep, without I/O.
#[derive(Debug)]
pub struct State {
    ingest: Ingest,
    imports: Watch<WatchedImport, Ingest>,
    slices: Watch<EndpointSlice, Ingest>,
    namespaces: Watch<PartialObjectMeta<Namespace>, Ingest>,
    /// This cluster's id; optional (see the module documentation).
    cluster_id: Watch<ClusterProperty, Ingest>,
    /// The watches were restarted since the last failure: wait for that
    /// relist instead of starting another.
    restarted: bool,
    /// A zone was published.
    published: bool,
    /// A list was indexed since the last publish.
    listed: bool,
    /// The last [`Effect::Stale`] said failing.
    stale: bool,
    /// Services built while the first lists arrived.
    prebuilt: usize,
}

impl State {
    /// An empty state: nothing listed yet.
    pub fn new(settings: ZoneSettings) -> Self {
        let mut index = Index::new(settings);
        index.require_namespaces();
        Self {
            ingest: Ingest::new(index),
            imports: Watch::applying_first_list(Kind::Imports.resource()),
            slices: Watch::applying_first_list(Kind::Slices.resource()),
            namespaces: Watch::applying_first_list(Kind::Namespaces.resource()),
            cluster_id: Watch::new(CLUSTER_PROPERTIES),
            restarted: false,
            published: false,
            listed: false,
            stale: false,
            prebuilt: 0,
        }
    }

    /// The index.
    pub fn index(&self) -> &Index {
        &self.ingest.index
    }

    /// How the watch of `kind` is doing.
    pub fn health(&self, kind: Kind) -> &Health {
        match kind {
            Kind::Imports => self.imports.health(),
            Kind::Slices => self.slices.health(),
            Kind::Namespaces => self.namespaces.health(),
        }
    }

    /// How the watch of this cluster's id is doing.
    pub fn cluster_id_health(&self) -> &Health {
        self.cluster_id.health()
    }

    /// The kinds whose watch is failing.
    pub fn failing(&self) -> Vec<Kind> {
        Kind::ALL
            .into_iter()
            .filter(|kind| self.health(*kind).failing())
            .collect()
    }

    /// Whether the shell should restart the watches once the apiserver
    /// serves the failing kinds again: some watch is failing, and no
    /// restart is under way since.
    pub fn wants_restart(&self) -> bool {
        !self.restarted && !self.failing().is_empty()
    }

    /// Handles one input; `now` dates a failure.
    pub fn handle(&mut self, input: Input, now: Instant) -> Vec<Effect> {
        let (kind, outcome) = match input {
            Input::Import(event) => (
                Kind::Imports,
                self.imports.handle(&mut self.ingest, event, now),
            ),
            Input::Slice(event) => (
                Kind::Slices,
                self.slices.handle(&mut self.ingest, event, now),
            ),
            Input::Namespace(event) => (
                Kind::Namespaces,
                self.namespaces.handle(&mut self.ingest, event, now),
            ),
            Input::ClusterProperty(event) => return self.cluster_property(event, now),
            Input::Unresponsive(error) => return self.unresponsive(error, now),
            Input::Restarted => {
                self.restarted = true;
                return vec![Effect::Restarted];
            }
            Input::Flush => return self.publish().into_iter().collect(),
        };
        let mut effects: Vec<Effect> = self
            .ingest
            .invalid
            .drain(..)
            .map(Effect::InvalidObject)
            .collect();
        self.outcome(kind, outcome, &mut effects);
        effects
    }

    fn outcome(&mut self, kind: Kind, outcome: Outcome, effects: &mut Vec<Effect>) {
        let resource = kind.resource();
        match outcome {
            Outcome::Listing => {}
            Outcome::Changed { recovered } => self.recovered(recovered, effects),
            Outcome::Listed { recovered, .. } => {
                self.listed = true;
                self.recovered(recovered, effects);
            }
            // 410 Gone: our resource version left the apiserver's window
            // (after an apiserver restart, or a long disconnection). The
            // apiserver is there; the watcher relists at once, and the
            // relist replaces the index in one step. Routine, not an outage.
            Outcome::Expired { message } => {
                tracing::info!(resource, %message, "watch expired (410 Gone); relisting");
                effects.push(Effect::WatchExpired(resource));
            }
            Outcome::Failed { .. } => {
                effects.push(Effect::WatchError(resource));
                self.restarted = false;
                match outcome.verdict() {
                    Verdict::Fatal { message, .. } => {
                        effects.push(Effect::Fatal(KubeSourceError::Forbidden {
                            resource,
                            message: message.to_owned(),
                        }));
                    }
                    Verdict::FailingStarted(error) => {
                        if !std::mem::replace(&mut self.stale, true) {
                            effects.push(Effect::Stale(true));
                        }
                        if self.published {
                            tracing::error!(resource, %error, "watch failed; still serving the last index, retrying with backoff");
                        } else {
                            tracing::error!(resource, %error, "watch failed before the first sync; answering SERVFAIL, retrying with backoff");
                        }
                    }
                    Verdict::StillFailing(error) => {
                        tracing::debug!(resource, %error, "watch still failing");
                    }
                    Verdict::Quiet => {}
                }
            }
        }
    }

    /// An item of the ClusterProperty watch. Its failures are counted and
    /// logged once each, and before its first list make the id unknown,
    /// with the error as the reason; never fatal, never stale.
    fn cluster_property(
        &mut self,
        event: Result<Event<ClusterProperty>, watcher::Error>,
        now: Instant,
    ) -> Vec<Effect> {
        let outcome = self.cluster_id.handle(&mut self.ingest, event, now);
        match outcome {
            Outcome::Expired { message } => {
                tracing::info!(resource = CLUSTER_PROPERTIES, %message, "watch expired (410 Gone); relisting");
                vec![Effect::WatchExpired(CLUSTER_PROPERTIES)]
            }
            Outcome::Failed { started, error, .. } => {
                let synced = self.cluster_id.health().synced();
                if started && synced {
                    tracing::warn!(resource = CLUSTER_PROPERTIES, %error, "watch of this cluster's id failed; keeping the id last read, retrying with backoff");
                } else if started {
                    tracing::warn!(
                        resource = CLUSTER_PROPERTIES,
                        %error,
                        "cannot read the ClusterProperty {CLUSTER_ID_PROPERTY} (is the CRD installed, and may the server list and watch clusterproperties.about.k8s.io? deploy/rbac.yaml); local-first imports answer from every cluster meanwhile, retrying with backoff"
                    );
                    self.ingest
                        .index
                        .set_own_cluster(OwnCluster::Unknown(format!(
                            "the ClusterProperty {CLUSTER_ID_PROPERTY} cannot be read: {error}"
                        )));
                }
                vec![Effect::WatchError(CLUSTER_PROPERTIES)]
            }
            Outcome::Listing | Outcome::Changed { .. } | Outcome::Listed { .. } => Vec::new(),
        }
    }

    /// The apiserver is hung: every watch is failing until its relist
    /// after a restart (or a change on a resumed watch), as after errors.
    fn unresponsive(&mut self, error: String, now: Instant) -> Vec<Effect> {
        let mut effects = vec![Effect::Unanswered];
        self.imports.unresponsive(error.clone(), now);
        self.slices.unresponsive(error.clone(), now);
        self.namespaces.unresponsive(error.clone(), now);
        // A restart under way is hung as well: the next one is wanted.
        self.restarted = false;
        if !std::mem::replace(&mut self.stale, true) {
            effects.push(Effect::Stale(true));
            if self.published {
                tracing::error!(%error, "apiserver not answering; still serving the last index, watches restart once it answers");
            } else {
                tracing::error!(%error, "apiserver not answering before the first sync; answering SERVFAIL");
            }
        } else {
            tracing::debug!(%error, "apiserver still not answering");
        }
        effects
    }

    /// A kind is current again; the source is once none is failing.
    fn recovered(&mut self, recovered: bool, effects: &mut Vec<Effect>) {
        if recovered && self.stale && self.failing().is_empty() {
            self.stale = false;
            effects.push(Effect::Stale(false));
        }
    }

    /// A zone of what changed, once every kind has been listed.
    fn publish(&mut self) -> Option<Effect> {
        // This cluster's id: read, or known to be unreadable for now.
        let cluster_id = self.cluster_id.health();
        let synced = Kind::ALL.into_iter().all(|kind| self.health(kind).synced())
            && (cluster_id.synced() || cluster_id.failing());
        if !synced {
            if !self.published {
                // The first sync: build what slices still to come are
                // unlikely to change while the rest is on its way.
                self.prebuilt += self.ingest.index.prebuild();
            }
            return None;
        }
        if self.published && !self.ingest.index.has_changes() {
            return None;
        }
        let (zone, stats) = self.ingest.index.publish();
        let first = !std::mem::replace(&mut self.published, true);
        Some(Effect::Publish(Publication {
            zone,
            stats,
            first,
            after_list: std::mem::take(&mut self.listed),
            prebuilt: std::mem::take(&mut self.prebuilt),
        }))
    }

    /// What the index and the watches hold for `service`, for `/explain`.
    pub fn report(&self, service: &ServiceRef) -> SourceReport {
        let mut report = SourceReport::from_index(&self.ingest.index, service);
        let mut rejected: Vec<Rejection> = self
            .ingest
            .rejected
            .iter()
            .filter(|(_, (of, _))| of == service)
            .map(|((kind, _, name), (_, error))| Rejection {
                kind,
                name: name.clone(),
                error: error.clone(),
            })
            .collect();
        rejected.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
        report.rejected = rejected;
        let problems: Vec<String> = Kind::ALL
            .into_iter()
            .map(|kind| self.health(kind))
            .filter_map(|health| {
                Some(format!(
                    "watch of {}: {}",
                    health.resource(),
                    health.last_error()?
                ))
            })
            .collect();
        if !problems.is_empty() {
            report.source_problem = Some(problems.join("; "));
        }
        report
    }
}
