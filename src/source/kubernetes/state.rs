//! The Kubernetes source as a pure state machine: [`State::handle`] takes
//! one [`Input`] (a watcher event of one of the three kinds, a restart of
//! the watches, the end of a batch) and returns the [`Effect`]s the shell
//! carries out (metrics, staleness, publishing, a fatal error). No I/O, no
//! client, no runtime: the tests drive it with synthetic events.
//!
//! Each kind has a [`Watch`] (list buffering, health); all three feed one
//! [`Index`] through [`Ingest`], which projects objects, keeps an invalid
//! object at its last valid version, and remembers rejections for
//! `/explain`.

use std::collections::HashMap;
use std::time::Instant;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::PartialObjectMeta;
use kube::core::DynamicObject;
use kube::runtime::watcher::{self, Event};

use super::KubeSourceError;
use crate::api::ServiceImport;
use crate::api::stripped::{Dns, Stripped};
use crate::api::well_known::LABEL_SERVICE_NAME;
use crate::index::{Index, PublishStats, SliceKey};
use crate::inquiry::{Rejection, SourceReport};
use crate::model::{ImportedService, ServiceRef, SliceEndpoints};
use crate::watch::{Health, IndexResource, Outcome, Verdict, Watch};
use crate::zone::{Zone, ZoneSettings};

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
    pub const ALL: [Kind; 3] = [Kind::Imports, Kind::Slices, Kind::Namespaces];

    /// The resource name, as in logs and metric labels.
    pub fn resource(self) -> &'static str {
        match self {
            Kind::Imports => "serviceimports",
            Kind::Slices => "endpointslices",
            Kind::Namespaces => "namespaces",
        }
    }
}

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
}

/// The index and everything the three watches keep, without I/O.
#[derive(Debug)]
pub struct State {
    ingest: Ingest,
    imports: Watch<WatchedImport, Ingest>,
    slices: Watch<EndpointSlice, Ingest>,
    namespaces: Watch<PartialObjectMeta<Namespace>, Ingest>,
    /// The watches were restarted since the last failure: wait for that
    /// relist instead of starting another.
    restarted: bool,
    /// A zone was published.
    published: bool,
    /// A list was indexed since the last publish.
    listed: bool,
    /// The last [`Effect::Stale`] said failing.
    stale: bool,
}

const IMPORT_KIND: &str = "ServiceImport";
const SLICE_KIND: &str = "EndpointSlice";

impl State {
    /// An empty state: nothing listed yet.
    pub fn new(settings: ZoneSettings) -> Self {
        let mut index = Index::new(settings);
        index.require_namespaces();
        Self {
            ingest: Ingest {
                index,
                rejected: HashMap::new(),
                invalid: Vec::new(),
            },
            imports: Watch::new(Kind::Imports.resource()),
            slices: Watch::new(Kind::Slices.resource()),
            namespaces: Watch::new(Kind::Namespaces.resource()),
            restarted: false,
            published: false,
            listed: false,
            stale: false,
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
                    Verdict::Fatal(message) => {
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
        let synced = Kind::ALL.into_iter().all(|kind| self.health(kind).synced());
        if !synced || (self.published && !self.ingest.index.has_changes()) {
            return None;
        }
        let (zone, stats) = self.ingest.index.publish();
        let first = !std::mem::replace(&mut self.published, true);
        Some(Effect::Publish(Publication {
            zone,
            stats,
            first,
            after_list: std::mem::take(&mut self.listed),
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

/// Kind, namespace and name of an API object.
type ObjectKey = (&'static str, String, String);

fn object_key(kind: &'static str, namespace: &str, name: &str) -> ObjectKey {
    (kind, namespace.to_owned(), name.to_owned())
}

/// The store the three watches feed: the index, and the objects whose
/// latest version was rejected.
#[derive(Debug)]
struct Ingest {
    index: Index,
    /// Objects whose latest version was rejected as invalid, for
    /// `/explain`: by kind and object, with the service they name.
    rejected: HashMap<ObjectKey, (ServiceRef, String)>,
    /// Kinds of the objects rejected by the event being handled.
    invalid: Vec<&'static str>,
}

impl Ingest {
    /// Projects a ServiceImport. An invalid object is logged and skipped;
    /// the last good version of it, if any, stays in the index.
    fn project_import(&mut self, object: &WatchedImport) -> Option<ImportedService> {
        let result = decode_import(object)
            .and_then(|import| ImportedService::from_api(&import).map_err(|e| e.to_string()));
        match result {
            Ok(import) => {
                let service = &import.service;
                self.forget_rejected(IMPORT_KIND, &service.namespace, &service.name);
                Some(import)
            }
            Err(error) => {
                let service = import_ref(object);
                let key = object_key(IMPORT_KIND, &service.namespace, &service.name);
                tracing::warn!(ns = %service.namespace, name = %service.name, %error, "ignoring invalid ServiceImport; keeping its last valid version");
                self.invalid.push(IMPORT_KIND);
                self.rejected.insert(key, (service, error));
                None
            }
        }
    }

    /// `None`: invalid (logged); `Some(None)`: not an MCS slice.
    fn project_slice(
        &mut self,
        slice: &EndpointSlice,
    ) -> Option<Option<(SliceKey, SliceEndpoints)>> {
        let key = slice_key(slice);
        match SliceEndpoints::from_api(slice) {
            Ok(projected) => {
                self.forget_rejected(SLICE_KIND, &key.namespace, &key.name);
                Some(projected.map(|p| (key, p)))
            }
            Err(error) => {
                tracing::warn!(ns = %key.namespace, name = %key.name, %error, "ignoring invalid EndpointSlice; keeping its last valid version");
                self.invalid.push(SLICE_KIND);
                // The watch selects on the service-name label, so it is set.
                let service_name = slice
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|labels| labels.get(LABEL_SERVICE_NAME))
                    .map_or("", String::as_str);
                let service = ServiceRef::new(&key.namespace, service_name);
                self.rejected.insert(
                    object_key(SLICE_KIND, &key.namespace, &key.name),
                    (service, error.to_string()),
                );
                None
            }
        }
    }

    /// Clears a rejection once its object is valid again or gone. Nearly
    /// always there is none: no key is built for an empty map.
    fn forget_rejected(&mut self, kind: &'static str, namespace: &str, name: &str) {
        if !self.rejected.is_empty() {
            self.rejected.remove(&object_key(kind, namespace, name));
        }
    }
}

impl IndexResource<WatchedImport> for Ingest {
    type Listed = ImportedService;

    fn apply(&mut self, object: WatchedImport) {
        if let Some(import) = self.project_import(&object) {
            self.index.apply_import(import);
        }
    }

    fn delete(&mut self, object: WatchedImport) {
        let service = import_ref(&object);
        self.forget_rejected(IMPORT_KIND, &service.namespace, &service.name);
        self.index.delete_import(&service);
    }

    fn list_started(&mut self) {
        self.rejected.retain(|(kind, ..), _| *kind != IMPORT_KIND);
    }

    fn listed(&mut self, object: WatchedImport) -> Option<ImportedService> {
        // An object that is still there but invalid keeps its last valid
        // version through the relist, as it does through an update: the
        // relist replaces the index with what it holds.
        self.project_import(&object)
            .or_else(|| self.index.import(&import_ref(&object)).cloned())
    }

    fn reset(&mut self, listed: Vec<ImportedService>) {
        self.index.reset_imports(listed);
    }
}

impl IndexResource<EndpointSlice> for Ingest {
    type Listed = (SliceKey, SliceEndpoints);

    fn apply(&mut self, slice: EndpointSlice) {
        match self.project_slice(&slice) {
            Some(Some((key, projected))) => self.index.apply_slice(key, projected),
            // No longer an MCS slice (label removed): forget it.
            Some(None) => self.index.delete_slice(&slice_key(&slice)),
            None => {}
        }
    }

    fn delete(&mut self, slice: EndpointSlice) {
        let key = slice_key(&slice);
        self.forget_rejected(SLICE_KIND, &key.namespace, &key.name);
        self.index.delete_slice(&key);
    }

    fn list_started(&mut self) {
        self.rejected.retain(|(kind, ..), _| *kind != SLICE_KIND);
    }

    fn listed(&mut self, slice: EndpointSlice) -> Option<(SliceKey, SliceEndpoints)> {
        match self.project_slice(&slice) {
            Some(projected) => projected,
            // Invalid: keep its last valid version (see the imports).
            None => {
                let key = slice_key(&slice);
                self.index.slice(&key).cloned().map(|kept| (key, kept))
            }
        }
    }

    fn reset(&mut self, listed: Vec<(SliceKey, SliceEndpoints)>) {
        self.index.reset_slices(listed);
    }
}

impl IndexResource<PartialObjectMeta<Namespace>> for Ingest {
    type Listed = String;

    fn apply(&mut self, ns: PartialObjectMeta<Namespace>) {
        if live(&ns) {
            self.index.apply_namespace(&namespace_name(&ns));
        } else {
            self.index.delete_namespace(&namespace_name(&ns));
        }
    }

    fn delete(&mut self, ns: PartialObjectMeta<Namespace>) {
        self.index.delete_namespace(&namespace_name(&ns));
    }

    fn listed(&mut self, ns: PartialObjectMeta<Namespace>) -> Option<String> {
        live(&ns).then(|| namespace_name(&ns))
    }

    fn reset(&mut self, listed: Vec<String>) {
        self.index.reset_namespaces(listed);
    }
}

/// A namespace that is not terminating.
fn live(ns: &PartialObjectMeta<Namespace>) -> bool {
    ns.metadata.deletion_timestamp.is_none()
}

fn namespace_name(ns: &PartialObjectMeta<Namespace>) -> String {
    ns.metadata.name.clone().unwrap_or_default()
}

/// The typed ServiceImport of a stripped one; the error names the field,
/// from the object's root (`spec.ports[0].port: …`).
fn decode_import(object: &WatchedImport) -> Result<ServiceImport, String> {
    let spec = object
        .0
        .data
        .get("spec")
        .unwrap_or(&serde_json::Value::Null);
    let spec = serde_path_to_error::deserialize(spec).map_err(|error| {
        let path = error.path().to_string();
        match path.as_str() {
            "." => format!("spec: {}", error.inner()),
            _ => format!("spec.{path}: {}", error.inner()),
        }
    })?;
    Ok(ServiceImport {
        metadata: object.0.metadata.clone(),
        spec,
        status: None,
    })
}

fn import_ref(object: &WatchedImport) -> ServiceRef {
    ServiceRef::new(
        object.0.metadata.namespace.as_deref().unwrap_or("default"),
        object.0.metadata.name.as_deref().unwrap_or_default(),
    )
}

fn slice_key(slice: &EndpointSlice) -> SliceKey {
    SliceKey {
        namespace: slice.metadata.namespace.clone().unwrap_or_default(),
        name: slice.metadata.name.clone().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::well_known::LABEL_SOURCE_CLUSTER;
    use crate::watch::testing::{forbidden, gone, unreachable};

    fn import(name: &str, ip: &str) -> WatchedImport {
        serde_json::from_value(json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1",
            "kind": "ServiceImport",
            "metadata": { "name": name, "namespace": "shop" },
            "spec": { "type": "ClusterSetIP", "ips": [ip], "ports": [{ "port": 80, "protocol": "TCP" }] },
        }))
        .unwrap()
    }

    /// A slice of service `web`; without a cluster it is invalid.
    fn slice(name: &str, cluster: Option<&str>, address: &str) -> EndpointSlice {
        let mut labels = json!({ LABEL_SERVICE_NAME: "web" });
        if let Some(cluster) = cluster {
            labels[LABEL_SOURCE_CLUSTER] = json!(cluster);
        }
        serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": { "name": name, "namespace": "shop", "labels": labels },
            "addressType": "IPv4",
            "endpoints": [{ "addresses": [address], "conditions": { "ready": true } }],
            "ports": [{ "port": 8080, "protocol": "TCP" }],
        }))
        .unwrap()
    }

    fn namespace(name: &str) -> PartialObjectMeta<Namespace> {
        serde_json::from_value(json!({
            "apiVersion": "meta.k8s.io/v1",
            "kind": "PartialObjectMetadata",
            "metadata": { "name": name },
        }))
        .unwrap()
    }

    /// Short names of effects, to compare sequences.
    fn names(effects: &[Effect]) -> Vec<String> {
        effects
            .iter()
            .map(|effect| match effect {
                Effect::InvalidObject(kind) => format!("invalid {kind}"),
                Effect::WatchError(resource) => format!("error {resource}"),
                Effect::WatchExpired(resource) => format!("expired {resource}"),
                Effect::Unanswered => "unanswered".to_owned(),
                Effect::Restarted => "restarted".to_owned(),
                Effect::Stale(stale) => format!("stale {stale}"),
                Effect::Publish(p) if p.first => "publish first".to_owned(),
                Effect::Publish(p) if p.after_list => "publish after list".to_owned(),
                Effect::Publish(_) => "publish".to_owned(),
                Effect::Fatal(error) => format!("fatal {error}"),
            })
            .collect()
    }

    struct Driver {
        state: State,
    }

    impl Driver {
        fn new() -> Self {
            Self {
                state: State::new(ZoneSettings::new(
                    hickory_proto::rr::Name::from_ascii("clusterset.local.").unwrap(),
                )),
            }
        }

        fn handle(&mut self, input: Input) -> Vec<String> {
            names(&self.state.handle(input, Instant::now()))
        }

        fn flush(&mut self) -> Vec<String> {
            self.handle(Input::Flush)
        }

        /// A whole list of one kind; the effects of all its events.
        fn list(&mut self, kind: Kind) -> Vec<String> {
            match kind {
                Kind::Imports => self.list_imports(vec![import("web", "10.0.0.1")]),
                Kind::Slices => self.list_slices(vec![slice("web-a", Some("east"), "10.1.0.1")]),
                Kind::Namespaces => self.list_namespaces(vec![namespace("shop")]),
            }
        }

        fn list_imports(&mut self, objects: Vec<WatchedImport>) -> Vec<String> {
            let mut events = vec![Event::Init];
            events.extend(objects.into_iter().map(Event::InitApply));
            events.push(Event::InitDone);
            events
                .into_iter()
                .flat_map(|e| self.handle(Input::Import(Ok(e))))
                .collect()
        }

        fn list_slices(&mut self, objects: Vec<EndpointSlice>) -> Vec<String> {
            let mut events = vec![Event::Init];
            events.extend(objects.into_iter().map(Event::InitApply));
            events.push(Event::InitDone);
            events
                .into_iter()
                .flat_map(|e| self.handle(Input::Slice(Ok(e))))
                .collect()
        }

        fn list_namespaces(&mut self, objects: Vec<PartialObjectMeta<Namespace>>) -> Vec<String> {
            let mut events = vec![Event::Init];
            events.extend(objects.into_iter().map(Event::InitApply));
            events.push(Event::InitDone);
            events
                .into_iter()
                .flat_map(|e| self.handle(Input::Namespace(Ok(e))))
                .collect()
        }

        /// Every kind listed and the first zone published.
        fn synced() -> Self {
            let mut driver = Self::new();
            for kind in Kind::ALL {
                driver.list(kind);
            }
            assert_eq!(driver.flush(), ["publish first"]);
            driver
        }

        fn ip_of(&self, name: &str) -> Option<String> {
            let import = self.state.index().import(&ServiceRef::new("shop", name))?;
            import.ips.first().map(ToString::to_string)
        }

        fn report(&self) -> SourceReport {
            self.state.report(&ServiceRef::new("shop", "web"))
        }
    }

    #[test]
    fn nothing_is_published_until_every_kind_is_listed_in_any_order() {
        use Kind::{Imports, Namespaces, Slices};
        let orders = [
            [Imports, Slices, Namespaces],
            [Imports, Namespaces, Slices],
            [Slices, Imports, Namespaces],
            [Slices, Namespaces, Imports],
            [Namespaces, Imports, Slices],
            [Namespaces, Slices, Imports],
        ];
        for order in orders {
            let mut driver = Driver::new();
            for (i, kind) in order.into_iter().enumerate() {
                assert!(driver.list(kind).is_empty(), "{order:?}");
                let effects = driver.state.handle(Input::Flush, Instant::now());
                if i < 2 {
                    assert!(effects.is_empty(), "{order:?} published early");
                    continue;
                }
                let [Effect::Publish(publication)] = &effects[..] else {
                    panic!("{order:?}: {:?}", names(&effects));
                };
                assert!(publication.first && publication.after_list);
                assert_eq!(publication.zone.service_count(), 1);
            }
            // Nothing changed since: nothing to publish.
            assert!(driver.flush().is_empty());
        }
    }

    #[test]
    fn a_relist_replaces_the_kind_in_one_step_and_drops_what_it_lacks() {
        let mut driver = Driver::synced();
        driver.handle(Input::Import(Ok(Event::Apply(import("db", "10.0.0.2")))));
        assert_eq!(driver.flush(), ["publish"]);
        // The relist no longer holds db; until it is complete, db stays.
        driver.handle(Input::Import(Ok(Event::Init)));
        driver.handle(Input::Import(Ok(Event::InitApply(import(
            "web", "10.0.0.1",
        )))));
        assert_eq!(driver.ip_of("db").as_deref(), Some("10.0.0.2"));
        driver.handle(Input::Import(Ok(Event::InitDone)));
        assert_eq!(driver.ip_of("db"), None);
        assert_eq!(driver.ip_of("web").as_deref(), Some("10.0.0.1"));
        assert_eq!(driver.flush(), ["publish after list"]);
        // Slices too: a relist without web-a leaves web without endpoints.
        assert_eq!(driver.report().slices.len(), 1);
        driver.list_slices(vec![]);
        assert!(driver.report().slices.is_empty());
    }

    #[test]
    fn gone_is_counted_as_expired_and_relists_without_an_outage() {
        let mut driver = Driver::synced();
        assert_eq!(
            driver.handle(Input::Slice(Err(gone()))),
            ["expired endpointslices"]
        );
        assert!(!driver.state.wants_restart());
        assert!(driver.state.failing().is_empty());
        assert_eq!(driver.report().source_problem, None);
        // The watcher relists; that relist is not a recovery either.
        let relist = driver.list_slices(vec![slice("web-b", Some("east"), "10.1.0.2")]);
        assert!(relist.is_empty(), "{relist:?}");
        assert_eq!(driver.flush(), ["publish after list"]);
        assert_eq!(driver.report().slices[0].name, "web-b");
    }

    #[test]
    fn an_outage_is_stale_until_the_relist_after_the_restart_is_indexed() {
        let mut driver = Driver::synced();
        assert_eq!(
            driver.handle(Input::Slice(Err(unreachable()))),
            ["error endpointslices", "stale true"]
        );
        assert_eq!(
            driver.handle(Input::Import(Err(unreachable()))),
            ["error serviceimports"]
        );
        assert_eq!(
            driver.handle(Input::Slice(Err(unreachable()))),
            ["error endpointslices"]
        );
        let problem = driver.report().source_problem.expect("a problem");
        assert!(
            problem.starts_with("watch of serviceimports: ")
                && problem.contains("; watch of endpointslices: "),
            "{problem}"
        );
        assert_eq!(driver.state.failing(), [Kind::Imports, Kind::Slices]);
        // The apiserver answers again: the shell restarts the watches once.
        assert!(driver.state.wants_restart());
        assert_eq!(driver.handle(Input::Restarted), ["restarted"]);
        assert!(!driver.state.wants_restart());
        // The restarted watches fail again: another restart is wanted.
        driver.handle(Input::Slice(Err(unreachable())));
        assert!(driver.state.wants_restart());
        assert_eq!(driver.handle(Input::Restarted), ["restarted"]);
        // Lists in progress are not current yet.
        driver.handle(Input::Slice(Ok(Event::Init)));
        driver.handle(Input::Import(Ok(Event::Init)));
        assert!(driver.report().source_problem.is_some());
        // One kind current again: still stale while the other is not.
        assert!(driver.handle(Input::Slice(Ok(Event::InitDone))).is_empty());
        assert_eq!(driver.state.failing(), [Kind::Imports]);
        assert_eq!(
            driver.handle(Input::Import(Ok(Event::InitDone))),
            ["stale false"]
        );
        assert_eq!(driver.report().source_problem, None);
        assert!(!driver.state.wants_restart());
        // Both relists were empty: the zone has nothing left to serve.
        let effects = driver.state.handle(Input::Flush, Instant::now());
        let [Effect::Publish(publication)] = &effects[..] else {
            panic!("{:?}", names(&effects));
        };
        assert_eq!(publication.zone.service_count(), 0);
    }

    #[test]
    fn a_hung_apiserver_makes_every_kind_stale_until_the_relist_after_a_restart() {
        let mut driver = Driver::synced();
        let hung = || Input::Unresponsive("no answer within 5s".into());
        assert_eq!(driver.handle(hung()), ["unanswered", "stale true"]);
        assert_eq!(driver.state.failing(), Kind::ALL);
        assert!(driver.state.wants_restart());
        let problem = driver.report().source_problem.expect("a problem");
        assert!(
            problem.contains("watch of namespaces: no answer within 5s"),
            "{problem}"
        );
        // Still hung: counted, no second stale edge.
        assert_eq!(driver.handle(hung()), ["unanswered"]);
        assert_eq!(driver.handle(Input::Restarted), ["restarted"]);
        assert!(!driver.state.wants_restart());
        // The restarted watches hang too: another restart is wanted.
        assert_eq!(driver.handle(hung()), ["unanswered"]);
        assert!(driver.state.wants_restart());
        assert_eq!(driver.handle(Input::Restarted), ["restarted"]);
        // A resumed watch's change makes its kind current, not the source.
        assert!(
            driver
                .handle(Input::Namespace(Ok(Event::Apply(namespace("more")))))
                .is_empty()
        );
        assert_eq!(driver.state.failing(), [Kind::Imports, Kind::Slices]);
        assert!(driver.list(Kind::Imports).is_empty());
        assert_eq!(driver.list(Kind::Slices), ["stale false"]);
        assert_eq!(driver.report().source_problem, None);
        // The relists held what the index had: nothing new to serve.
        assert!(driver.flush().is_empty());
    }

    #[test]
    fn a_resumed_watch_recovers_with_its_first_change() {
        let mut driver = Driver::synced();
        driver.handle(Input::Namespace(Err(unreachable())));
        assert_eq!(
            driver.handle(Input::Namespace(Ok(Event::Apply(namespace("more"))))),
            ["stale false"]
        );
    }

    #[test]
    fn invalid_objects_keep_their_last_valid_version_through_updates_and_relists() {
        let mut driver = Driver::synced();
        // An update to an invalid version: counted, kept at the last valid one.
        assert_eq!(
            driver.handle(Input::Import(Ok(Event::Apply(import("web", "not-an-ip"))))),
            ["invalid ServiceImport"]
        );
        assert_eq!(driver.ip_of("web").as_deref(), Some("10.0.0.1"));
        let rejected = driver.report().rejected;
        assert_eq!(rejected.len(), 1);
        assert_eq!(
            (rejected[0].kind, rejected[0].name.as_str()),
            (IMPORT_KIND, "web")
        );
        // A relist holding the invalid version keeps the valid one too.
        assert_eq!(
            driver.list_imports(vec![import("web", "not-an-ip")]),
            ["invalid ServiceImport"]
        );
        assert_eq!(driver.ip_of("web").as_deref(), Some("10.0.0.1"));
        assert_eq!(driver.report().rejected.len(), 1);
        // A valid version replaces it and clears the rejection.
        driver.handle(Input::Import(Ok(Event::Apply(import("web", "10.0.0.9")))));
        assert_eq!(driver.ip_of("web").as_deref(), Some("10.0.0.9"));
        assert!(driver.report().rejected.is_empty());
        // Slices the same way.
        assert_eq!(
            driver.handle(Input::Slice(Ok(Event::Apply(slice(
                "web-a", None, "10.1.0.7"
            ))))),
            ["invalid EndpointSlice"]
        );
        assert_eq!(
            driver.list_slices(vec![slice("web-a", None, "10.1.0.8")]),
            ["invalid EndpointSlice"]
        );
        let report = driver.report();
        assert_eq!(report.slices.len(), 1);
        assert_eq!(
            report.slices[0].ready[0].addresses[0].to_string(),
            "10.1.0.1"
        );
        assert_eq!(report.rejected.len(), 1);
        assert_eq!(report.rejected[0].kind, SLICE_KIND);
        // Deleting it forgets the rejection.
        driver.handle(Input::Slice(Ok(Event::Delete(slice("web-a", None, "")))));
        let report = driver.report();
        assert!(report.slices.is_empty() && report.rejected.is_empty());
    }

    #[test]
    fn forbidden_before_the_first_sync_is_fatal_and_after_it_an_outage() {
        let mut driver = Driver::new();
        driver.list(Kind::Imports);
        let effects = driver.handle(Input::Namespace(Err(forbidden())));
        assert_eq!(effects.len(), 2, "{effects:?}");
        assert_eq!(effects[0], "error namespaces");
        assert!(
            effects[1].starts_with("fatal forbidden to list/watch namespaces: synthetic"),
            "{effects:?}"
        );

        let mut driver = Driver::synced();
        assert_eq!(
            driver.handle(Input::Namespace(Err(forbidden()))),
            ["error namespaces", "stale true"]
        );
    }

    #[test]
    fn a_terminating_namespace_hides_its_imports() {
        let mut driver = Driver::synced();
        assert_eq!(driver.report().namespace_exists, Some(true));
        let mut terminating = namespace("shop");
        terminating.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
        );
        driver.handle(Input::Namespace(Ok(Event::Apply(terminating))));
        assert_eq!(driver.report().namespace_exists, Some(false));
        let effects = driver.state.handle(Input::Flush, Instant::now());
        let [Effect::Publish(publication)] = &effects[..] else {
            panic!("{:?}", names(&effects));
        };
        assert_eq!(publication.zone.service_count(), 0);
    }
}
