//! This cluster's publication, copied to its namespace on the hub
//! (`member-<id>`), and its Lease there renewed.
//!
//! The controller writes its publication in its own namespace as it does
//! for mesh peers ([`crate::controller::reconcile`]); this task keeps the
//! hub's copy equal to it: what the local copy holds is applied on the
//! hub, what it does not is deleted there. The local copy is the one
//! source, so a member read through the mesh and through the hub (a move
//! from one to the other) publishes the same objects both ways, and a hub
//! that was away is brought up to date by one comparison when it answers.
//!
//! Memory: the local objects (to write them) and a fingerprint of each
//! copy on the hub (to compare), not the hub's objects themselves.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::time::{Duration, SystemTime};

use futures::{FutureExt, StreamExt, stream};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::api::PublishedService;
use crate::api::well_known::LABEL_MANAGED_BY;
use crate::controller::lean::Lean;
use crate::controller::naming::{LABEL_APP_MANAGED_BY, MANAGED_BY};
use crate::controller::publication::PUBLISHED_BY;
use crate::hub::{LEASE_RENEW, MEMBER_LEASE, member_lease};

/// The field manager of the hub copy.
pub(crate) const FIELD_MANAGER: &str = "clusterset-dns-member";

/// Writes to the hub in flight at once.
const WRITES_IN_FLIGHT: usize = 8;

/// How often differences left by failed writes are tried again.
const RETRY_EVERY: Duration = Duration::from_secs(5);

/// The longest pause after passes in which every write failed.
const MAX_PAUSE: Duration = Duration::from_secs(60);

/// Which kind of the publication.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Kind {
    Service,
    Slice,
}

/// An event of one of the four watches.
enum Read {
    Local(Kind, Result<Event<Value>, watcher::Error>),
    Hub(Kind, Result<Event<Value>, watcher::Error>),
}

/// What one watch holds, as it lists and changes.
#[derive(Default)]
struct Side<T> {
    objects: BTreeMap<(Kind, String), T>,
    relisted: BTreeMap<Kind, Option<BTreeSet<String>>>,
    listed: BTreeSet<Kind>,
}

impl<T> Side<T> {
    /// Takes one event of `kind`, `keep` making what is held of an object.
    fn event(&mut self, kind: Kind, event: Event<Value>, keep: impl Fn(&Value) -> T) {
        match event {
            Event::Init => {
                self.relisted.insert(kind, Some(BTreeSet::new()));
            }
            Event::InitApply(object) => {
                let name = name_of(&object);
                if let Some(Some(seen)) = self.relisted.get_mut(&kind) {
                    seen.insert(name.clone());
                }
                self.objects.insert((kind, name), keep(&object));
            }
            Event::Apply(object) => {
                self.objects.insert((kind, name_of(&object)), keep(&object));
            }
            Event::Delete(object) => {
                self.objects.remove(&(kind, name_of(&object)));
            }
            Event::InitDone => {
                if let Some(Some(seen)) = self.relisted.remove(&kind) {
                    self.objects
                        .retain(|(k, name), _| *k != kind || seen.contains(name));
                }
                self.listed.insert(kind);
            }
        }
    }

    fn synced(&self) -> bool {
        self.listed.len() == 2
    }
}

/// A watch event with its object as JSON.
fn as_json<K, T: serde::Serialize>(event: Event<K>, inner: fn(K) -> T) -> Event<Value> {
    let json = |object: K| serde_json::to_value(inner(object)).unwrap_or_default();
    match event {
        Event::Init => Event::Init,
        Event::InitApply(object) => Event::InitApply(json(object)),
        Event::InitDone => Event::InitDone,
        Event::Apply(object) => Event::Apply(json(object)),
        Event::Delete(object) => Event::Delete(json(object)),
    }
}

fn name_of(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// What of an object the copy carries, whichever side it was read on:
/// name, labels, annotations and content; not where it is or the
/// server's bookkeeping.
fn content(kind: Kind, object: &Value) -> Value {
    let mut metadata = serde_json::Map::new();
    for field in ["name", "labels", "annotations"] {
        let value = &object["metadata"][field];
        if !value.is_null() {
            metadata.insert(field.to_owned(), value.clone());
        }
    }
    let mut copy = serde_json::Map::new();
    copy.insert("metadata".to_owned(), Value::Object(metadata));
    let fields: &[&str] = match kind {
        Kind::Service => &["spec"],
        Kind::Slice => &["addressType", "endpoints", "ports"],
    };
    for field in fields {
        if !object[*field].is_null() {
            copy.insert((*field).to_owned(), object[*field].clone());
        }
    }
    Value::Object(copy)
}

fn fingerprint(value: &Value) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.to_string().hash(&mut hasher);
    hasher.finish()
}

/// Copies this cluster's publication to its hub namespace, and renews its
/// Lease there, until dropped.
pub(super) struct Publisher {
    local: Client,
    local_namespace: String,
    hub: Client,
    hub_namespace: String,
    local_id: String,
    /// The local publication: each object's content.
    desired: Side<Value>,
    /// The hub's copy: each object's fingerprint.
    copied: Side<u64>,
    /// Per object, the fingerprint of what was last applied and of what
    /// the hub stored of it: a hub that stores a field differently (an
    /// older CRD pruning a new field) is not written again and again.
    written: BTreeMap<(Kind, String), (u64, u64)>,
    /// When the last error was logged, so an outage logs once a minute.
    last_error_logged: Option<Instant>,
    /// After a pass in which every write failed: no pass before the
    /// instant, and the pause the next such pass doubles (5 s to 60 s). A
    /// hub that does not answer is not sent the whole publication again
    /// every few seconds; one that answers again ends the pause.
    paused: Option<(Instant, Duration)>,
}

impl Publisher {
    /// A publisher of `local_id`'s publication in `local_namespace` into
    /// `hub_namespace`.
    pub(super) fn new(
        local: Client,
        local_namespace: &str,
        hub: Client,
        hub_namespace: &str,
        local_id: &str,
    ) -> Self {
        Self {
            local,
            local_namespace: local_namespace.to_owned(),
            hub,
            hub_namespace: hub_namespace.to_owned(),
            local_id: local_id.to_owned(),
            desired: Side::default(),
            copied: Side::default(),
            written: BTreeMap::new(),
            last_error_logged: None,
            paused: None,
        }
    }

    fn api<K>(client: &Client, namespace: &str) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(client.clone(), namespace)
    }

    /// The four watches, as one stream of JSON objects.
    fn watches(&self) -> impl futures::Stream<Item = Read> + Send + 'static {
        let services = format!("{LABEL_APP_MANAGED_BY}={MANAGED_BY}");
        let slices = format!("{LABEL_MANAGED_BY}={PUBLISHED_BY}");
        let config = |labels: &str| {
            watcher::Config::default()
                .page_size(crate::controller::connection::LIST_PAGE)
                .labels(labels)
        };
        let json = |event: Result<Event<Lean<PublishedService>>, watcher::Error>| {
            event.map(|e| as_json(e, |o| o.0))
        };
        let json_slice = |event: Result<Event<Lean<EndpointSlice>>, watcher::Error>| {
            event.map(|e| as_json(e, |o| o.0))
        };
        let local_services = crate::watch::stream(
            Self::api::<Lean<PublishedService>>(&self.local, &self.local_namespace),
            config(&services),
        )
        .map(move |e| Read::Local(Kind::Service, json(e)));
        let local_slices = crate::watch::stream(
            Self::api::<Lean<EndpointSlice>>(&self.local, &self.local_namespace),
            config(&slices),
        )
        .map(move |e| Read::Local(Kind::Slice, json_slice(e)));
        let hub_services = crate::watch::stream_spread(
            Self::api::<Lean<PublishedService>>(&self.hub, &self.hub_namespace),
            config(&services),
        )
        .map(move |e| Read::Hub(Kind::Service, json(e)));
        let hub_slices = crate::watch::stream_spread(
            Self::api::<Lean<EndpointSlice>>(&self.hub, &self.hub_namespace),
            config(&slices),
        )
        .map(move |e| Read::Hub(Kind::Slice, json_slice(e)));
        stream::select(
            stream::select(local_services, local_slices),
            stream::select(hub_services, hub_slices),
        )
    }

    /// Runs until dropped.
    pub(super) async fn run(mut self) {
        let mut reads = std::pin::pin!(self.watches());
        let mut lease = tokio::time::interval(LEASE_RENEW);
        lease.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut retry = tokio::time::interval(RETRY_EVERY);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                Some(read) = reads.next() => {
                    self.read(read);
                    // Take what else is ready before comparing.
                    while let Some(Some(read)) = reads.next().now_or_never() {
                        self.read(read);
                    }
                    self.copy().await;
                }
                _ = lease.tick() => self.renew_lease().await,
                _ = retry.tick() => self.copy().await,
            }
        }
    }

    fn read(&mut self, read: Read) {
        match read {
            Read::Local(kind, Ok(event)) => self.desired.event(kind, event, |o| content(kind, o)),
            Read::Hub(kind, Ok(event)) => {
                self.paused = None;
                self.copied
                    .event(kind, event, |o| fingerprint(&content(kind, o)));
            }
            Read::Local(_, Err(error)) => {
                tracing::debug!(error = %crate::error::Chain(&error), "watch of the local publication failing")
            }
            Read::Hub(_, Err(error)) => self.log_error("watching the publication's copy", &error),
        }
    }

    /// Logs a failure to reach the hub, once a minute at most.
    fn log_error(&mut self, doing: &str, error: &(dyn std::error::Error + 'static)) {
        let now = Instant::now();
        if self
            .last_error_logged
            .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(60))
        {
            self.last_error_logged = Some(now);
            tracing::warn!(error = %crate::error::Chain(error), "hub: {doing} failed; trying again");
        }
    }

    /// Makes the hub's copy what the local publication holds, once both
    /// are listed: slices before services (a reader that sees a service
    /// sees its endpoints), deletions last.
    async fn copy(&mut self) {
        if !self.desired.synced() || !self.copied.synced() {
            return;
        }
        if self.paused.is_some_and(|(until, _)| Instant::now() < until) {
            return;
        }
        let (written, failed) = self.copy_pass().await;
        if failed > 0 && written == 0 {
            let pause = self
                .paused
                .map_or(RETRY_EVERY, |(_, pause)| (pause * 2).min(MAX_PAUSE));
            self.paused = Some((Instant::now() + pause, pause));
        } else if written > 0 {
            self.paused = None;
        }
    }

    /// One comparison and the writes it calls for; returns how many
    /// writes succeeded and failed. A batch of which every write failed
    /// ends the pass: the rest would fail alike.
    async fn copy_pass(&mut self) -> (usize, usize) {
        let (mut written, mut failed) = (0, 0);
        let mut applies: Vec<((Kind, String), Value, u64)> = Vec::new();
        for (key, content) in &self.desired.objects {
            let want = fingerprint(content);
            let current = self.copied.objects.get(key).copied();
            let stored_as_written =
                current.is_some() && self.written.get(key).copied() == current.map(|c| (want, c));
            if current != Some(want) && !stored_as_written {
                applies.push((key.clone(), content.clone(), want));
            }
        }
        let deletes: Vec<(Kind, String)> = self
            .copied
            .objects
            .keys()
            .filter(|key| !self.desired.objects.contains_key(*key))
            .cloned()
            .collect();
        if applies.is_empty() && deletes.is_empty() {
            return (0, 0);
        }
        let (slices, services): (Vec<_>, Vec<_>) = applies
            .into_iter()
            .partition(|((kind, _), _, _)| *kind == Kind::Slice);
        for batch in [slices, services] {
            let this = &*self;
            let results: Vec<_> = stream::iter(batch)
                .map(|(key, content, want)| async move {
                    let result = this.apply(key.0, content).await;
                    (key, want, result)
                })
                .buffer_unordered(WRITES_IN_FLIGHT)
                .collect()
                .await;
            let before = written;
            for (key, want, result) in results {
                match result {
                    Ok(stored) => {
                        written += 1;
                        let stored = fingerprint(&content(key.0, &stored));
                        self.written.insert(key.clone(), (want, stored));
                        self.copied.objects.insert(key, stored);
                    }
                    Err(error) => {
                        failed += 1;
                        self.log_error("writing the publication's copy", &error);
                    }
                }
            }
            if failed > 0 && written == before {
                return (written, failed);
            }
        }
        let this = &*self;
        let results: Vec<_> = stream::iter(deletes)
            .map(|key| async move {
                let result = this.delete(key.0, &key.1).await;
                (key, result)
            })
            .buffer_unordered(WRITES_IN_FLIGHT)
            .collect()
            .await;
        for (key, result) in results {
            match result {
                Ok(()) => {
                    written += 1;
                    self.copied.objects.remove(&key);
                    self.written.remove(&key);
                }
                Err(error) => {
                    failed += 1;
                    self.log_error("deleting from the publication's copy", &error);
                }
            }
        }
        (written, failed)
    }

    /// Applies `content` as the hub's copy; returns what the hub stored.
    async fn apply(&self, kind: Kind, content: Value) -> kube::Result<Value> {
        let name = name_of(&content);
        let mut object = content;
        object["metadata"]["namespace"] = json!(self.hub_namespace);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match kind {
            Kind::Service => {
                object["apiVersion"] = json!("clusterset-dns.io/v1alpha1");
                object["kind"] = json!("PublishedService");
                let api: Api<PublishedService> = Self::api(&self.hub, &self.hub_namespace);
                let stored = api.patch(&name, &params, &Patch::Apply(&object)).await?;
                Ok(serde_json::to_value(stored).unwrap_or_default())
            }
            Kind::Slice => {
                object["apiVersion"] = json!("discovery.k8s.io/v1");
                object["kind"] = json!("EndpointSlice");
                let api: Api<EndpointSlice> = Self::api(&self.hub, &self.hub_namespace);
                let stored = api.patch(&name, &params, &Patch::Apply(&object)).await?;
                Ok(serde_json::to_value(stored).unwrap_or_default())
            }
        }
    }

    async fn delete(&self, kind: Kind, name: &str) -> kube::Result<()> {
        let params = DeleteParams::default();
        let result = match kind {
            Kind::Service => Self::api::<PublishedService>(&self.hub, &self.hub_namespace)
                .delete(name, &params)
                .await
                .map(|_| ()),
            Kind::Slice => Self::api::<EndpointSlice>(&self.hub, &self.hub_namespace)
                .delete(name, &params)
                .await
                .map(|_| ()),
        };
        match result {
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            other => other,
        }
    }

    /// Renews this member's Lease on the hub: how the other members know
    /// it runs. Only while this cluster's own apiserver answers (the probe
    /// a mesh peer would make of it): a member whose publication can no
    /// longer follow its cluster is lost to the others after grace, as an
    /// unreachable mesh peer is, not kept for ever by a controller that
    /// still reaches the hub.
    async fn renew_lease(&mut self) {
        if let Err(error) =
            crate::peering::probe(&self.local, crate::peering::contact::PROBE_TIMEOUT).await
        {
            self.log_error(
                "reaching this cluster's apiserver (the Lease is not renewed)",
                &error,
            );
            return;
        }
        let lease = member_lease(&self.hub_namespace, &self.local_id, SystemTime::now());
        let api: Api<Lease> = Self::api(&self.hub, &self.hub_namespace);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        if let Err(error) = api
            .patch(MEMBER_LEASE, &params, &Patch::Apply(&lease))
            .await
        {
            self.log_error("renewing this member's Lease", &error);
        }
    }
}
