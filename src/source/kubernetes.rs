//! The Kubernetes source: watches ServiceImports, imported EndpointSlices
//! and Namespaces, and keeps the index current.
//!
//! - ServiceImports are watched through a dynamic API resource, so the
//!   group, version and kind are configuration: vendors' mirror APIs with the
//!   same schema (mcs-api issue #20) work unchanged. Without a configured
//!   version, discovery picks `v1beta1`, else `v1alpha1`.
//! - EndpointSlices are selected on the server with the
//!   `multicluster.kubernetes.io/service-name` label, never filtered here.
//! - Namespaces are watched as metadata only: an import is served only while
//!   its namespace exists locally and is not terminating (KEP-1645 creates
//!   imports only "where the namespace exists").
//!
//! Objects are projected at ingest; nothing but the projections is kept.
//! EndpointSlices are even decoded stripped ([`super::stripped`]): the
//! parser skips the fields the index does not read.
//! A relist (watch restart, 410 Gone, apiserver restart) is buffered until it
//! is complete and then replaces the old state in one step, so there is no
//! window in which a half-listed index is served. Nothing is published until
//! every kind has been listed once: until then the DNS server answers
//! SERVFAIL and `/ready` says not ready.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use futures::stream::{BoxStream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use super::stripped::StrippedSlice;
use crate::api::ServiceImport;
use crate::api::well_known::LABEL_SERVICE_NAME;
use crate::explain::{Inquiries, Rejection, SourceReport};
use crate::index::{Index, SliceKey};
use crate::metrics::Metrics;
use crate::model::{ImportedService, ServiceRef, SliceEndpoints};
use crate::publish::ZoneHandle;
use crate::zone::ZoneSettings;

/// Which ServiceImport API to watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportApi {
    /// API group, default `multicluster.x-k8s.io`.
    pub group: String,
    /// API version; `None` discovers (`v1beta1`, then `v1alpha1`).
    pub version: Option<String>,
    /// Kind, default `ServiceImport`.
    pub kind: String,
}

impl Default for ImportApi {
    fn default() -> Self {
        Self {
            group: crate::api::well_known::MCS_GROUP.into(),
            version: None,
            kind: "ServiceImport".into(),
        }
    }
}

/// Why the Kubernetes source stopped.
#[derive(Debug, thiserror::Error)]
pub enum KubeSourceError {
    /// The ServiceImport API is not served.
    #[error(
        "{group}/{version} {kind} is not served by the apiserver: install the CRDs (`clusterset-dns crds | kubectl apply -f -`) or set import_group/import_version/import_kind"
    )]
    NoImportApi {
        /// Group looked for.
        group: String,
        /// Version(s) looked for.
        version: String,
        /// Kind looked for.
        kind: String,
    },
    /// The credentials may not list or watch a resource.
    #[error(
        "forbidden to list/watch {resource}: {message}. The service account needs get/list/watch on {resource} (see deploy/rbac.yaml)"
    )]
    Forbidden {
        /// The resource.
        resource: &'static str,
        /// The apiserver's message.
        message: String,
    },
    /// Discovery failed.
    #[error("discovering {group}")]
    Discovery {
        /// The group.
        group: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
}

/// Finds the API resource for ServiceImports.
pub async fn discover_import_api(
    client: &Client,
    api: &ImportApi,
) -> Result<ApiResource, KubeSourceError> {
    let group = match kube::discovery::group(client, &api.group).await {
        Ok(group) => group,
        Err(kube::Error::Api(status)) if status.is_not_found() => return Err(no_import_api(api)),
        Err(source) => {
            return Err(KubeSourceError::Discovery {
                group: api.group.clone(),
                source,
            });
        }
    };
    let preferred: Vec<String> = match &api.version {
        Some(v) => vec![v.clone()],
        None => vec!["v1beta1".into(), "v1alpha1".into()],
    };
    for version in &preferred {
        if let Some((resource, _)) = group
            .versioned_resources(version)
            .into_iter()
            .find(|(r, _)| r.kind == api.kind)
        {
            return Ok(resource);
        }
    }
    Err(no_import_api(api))
}

fn no_import_api(api: &ImportApi) -> KubeSourceError {
    KubeSourceError::NoImportApi {
        group: api.group.clone(),
        version: api
            .version
            .clone()
            .unwrap_or_else(|| "v1beta1|v1alpha1".into()),
        kind: api.kind.clone(),
    }
}

/// One event from any of the three watches.
enum Update {
    Import(Result<Event<DynamicObject>, watcher::Error>),
    Slice(Result<Event<EndpointSlice>, watcher::Error>),
    Namespace(Result<Event<PartialObjectMeta<Namespace>>, watcher::Error>),
}

/// The Kubernetes source.
pub struct KubeSource {
    client: Client,
    import_resource: ApiResource,
    index: Index,
    zone: ZoneHandle,
    metrics: Arc<Metrics>,
    /// Buffers of in-progress relists, per kind.
    import_relist: Option<Vec<ImportedService>>,
    slice_relist: Option<Vec<(SliceKey, SliceEndpoints)>>,
    namespace_relist: Option<Vec<String>>,
    synced: [bool; 3],
    failing: [bool; 3],
    /// The watches were restarted since the last failure: wait for that
    /// relist instead of starting another.
    restarted: bool,
    /// Restarts back off while they keep failing (a role that may list but
    /// not watch would otherwise relist everything every second).
    restarts: RestartBackoff,
    /// Objects whose latest version was rejected as invalid, for
    /// `/explain`: by kind and object, with the service they name.
    rejected: HashMap<ObjectKey, (ServiceRef, String)>,
    /// The last watch error of each failing resource, for `/explain`.
    watch_errors: [Option<String>; 3],
    /// A list was applied since the last publish: its pages are garbage.
    listed: bool,
}

impl std::fmt::Debug for KubeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeSource")
            .field("import_resource", &self.import_resource)
            .finish_non_exhaustive()
    }
}

/// Objects per page of a list. client-go's 500 costs 50 round trips for
/// 25,000 slices; lists are served from the apiserver's watch cache
/// (`resourceVersion=0`), where a larger page costs no etcd range read.
const LIST_PAGE_SIZE: u32 = 5000;

/// How often resources whose watch failed are probed for recovery.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

const IMPORTS: usize = 0;
const SLICES: usize = 1;
const NAMESPACES: usize = 2;
const RESOURCE_NAMES: [&str; 3] = ["serviceimports", "endpointslices", "namespaces"];
const IMPORT_KIND: &str = "ServiceImport";
const SLICE_KIND: &str = "EndpointSlice";

impl KubeSource {
    /// A source over `client`, watching `import_resource` for ServiceImports.
    pub fn new(
        client: Client,
        import_resource: ApiResource,
        settings: ZoneSettings,
        zone: ZoneHandle,
        metrics: Arc<Metrics>,
    ) -> Self {
        let mut index = Index::new(settings);
        index.require_namespaces();
        Self {
            client,
            import_resource,
            index,
            zone,
            metrics,
            import_relist: None,
            slice_relist: None,
            namespace_relist: None,
            synced: [false; 3],
            failing: [false; 3],
            restarted: false,
            restarts: RestartBackoff::default(),
            rejected: HashMap::new(),
            watch_errors: [None, None, None],
            listed: false,
        }
    }

    /// Watches until `shutdown` turns true, answering `/explain` inquiries
    /// between events. Returns an error only for problems that retrying
    /// cannot fix before the first sync (missing permissions), so that a
    /// misconfigured deployment fails loudly instead of serving empty
    /// answers.
    pub async fn run(
        mut self,
        mut shutdown: watch::Receiver<bool>,
        mut inquiries: Inquiries,
    ) -> Result<(), KubeSourceError> {
        let mut updates = self.watches();
        let mut probe = tokio::time::interval(PROBE_INTERVAL);
        probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let first = tokio::select! {
                next = updates.next() => next,
                _ = probe.tick(), if self.failing.iter().any(|f| *f) && !self.restarted => {
                    if self.restarts.due(tokio::time::Instant::now())
                        && self.apiserver_serves_failing().await
                    {
                        // Back: relist everything now rather than wait out
                        // the backoff the outage built up, and so that
                        // "not stale" means "the index is current again".
                        tracing::info!("apiserver reachable again; relisting");
                        self.metrics.watch_restarts.inc();
                        self.restarts.record(tokio::time::Instant::now());
                        self.restarted = true;
                        updates = self.watches();
                    }
                    continue;
                }
                Some(inquiry) = inquiries.recv() => {
                    let report = self.report(inquiry.service());
                    inquiry.answer(report);
                    continue;
                }
                _ = shutdown.changed() => return Ok(()),
            };
            let Some(first) = first else { return Ok(()) };
            let received = std::time::Instant::now();
            self.handle(first)?;
            // Apply everything already waiting before publishing once.
            while let Some(Some(update)) = updates.next().now_or_never() {
                self.handle(update)?;
            }
            self.publish(received);
        }
    }

    /// Fresh watches on the three resources, each starting with a list.
    fn watches(&self) -> futures::stream::SelectAll<BoxStream<'static, Update>> {
        let config = watcher::Config::default()
            .any_semantic()
            .page_size(LIST_PAGE_SIZE);
        let imports = watcher::watcher(
            Api::<DynamicObject>::all_with(self.client.clone(), &self.import_resource),
            config.clone(),
        )
        .backoff(WatchBackoff::default())
        .map(Update::Import);
        let slices = watcher::watcher(
            Api::<StrippedSlice>::all(self.client.clone()),
            config.clone().labels(LABEL_SERVICE_NAME),
        )
        .backoff(WatchBackoff::default())
        .map(|result| Update::Slice(result.map(unwrap_slice)));
        let namespaces = watcher::watcher(
            Api::<PartialObjectMeta<Namespace>>::all(self.client.clone()),
            config,
        )
        .backoff(WatchBackoff::default())
        .map(Update::Namespace);
        futures::stream::select_all([imports.boxed(), slices.boxed(), namespaces.boxed()])
    }

    /// Whether the apiserver lists every resource whose watch is failing
    /// (one object each). A watch that resumes after an outage emits
    /// nothing until an object changes, so recovery cannot be read off the
    /// event stream alone.
    async fn apiserver_serves_failing(&self) -> bool {
        let one = kube::api::ListParams::default().limit(1);
        for kind in 0..RESOURCE_NAMES.len() {
            if !self.failing[kind] {
                continue;
            }
            let result = match kind {
                IMPORTS => {
                    Api::<DynamicObject>::all_with(self.client.clone(), &self.import_resource)
                        .list_metadata(&one)
                        .await
                        .map(drop)
                }
                SLICES => Api::<EndpointSlice>::all(self.client.clone())
                    .list_metadata(&one)
                    .await
                    .map(drop),
                _ => Api::<Namespace>::all(self.client.clone())
                    .list_metadata(&one)
                    .await
                    .map(drop),
            };
            if result.is_err() {
                return false;
            }
        }
        true
    }

    fn handle(&mut self, update: Update) -> Result<(), KubeSourceError> {
        match update {
            // A resource is current again once its relist is complete or a
            // resumed watch delivers a change, not when a list begins.
            Update::Import(Ok(event)) => {
                if is_current(&event) {
                    self.recovered(IMPORTS);
                }
                self.on_import(event);
            }
            Update::Slice(Ok(event)) => {
                if is_current(&event) {
                    self.recovered(SLICES);
                }
                self.on_slice(event);
            }
            Update::Namespace(Ok(event)) => {
                if is_current(&event) {
                    self.recovered(NAMESPACES);
                }
                self.on_namespace(event);
            }
            Update::Import(Err(e)) => self.failed(IMPORTS, e)?,
            Update::Slice(Err(e)) => self.failed(SLICES, e)?,
            Update::Namespace(Err(e)) => self.failed(NAMESPACES, e)?,
        }
        Ok(())
    }

    fn on_import(&mut self, event: Event<DynamicObject>) {
        match event {
            Event::Apply(object) => {
                if let Some(import) = self.project_import(&object) {
                    self.index.apply_import(import);
                }
            }
            Event::Delete(object) => {
                let service = import_ref(&object);
                self.forget_rejected(IMPORT_KIND, &service.namespace, &service.name);
                self.index.delete_import(&service);
            }
            Event::Init => {
                self.rejected.retain(|(kind, ..), _| *kind != IMPORT_KIND);
                self.import_relist = Some(Vec::new());
            }
            Event::InitApply(object) => {
                // An object that is still there but invalid keeps its last
                // valid version through the relist, as it does through an
                // update: the relist replaces the index with what it holds.
                let projected = self
                    .project_import(&object)
                    .or_else(|| self.index.import(&import_ref(&object)).cloned());
                if let (Some(buffer), Some(import)) = (&mut self.import_relist, projected) {
                    buffer.push(import);
                }
            }
            Event::InitDone => {
                if let Some(buffer) = self.import_relist.take() {
                    self.index.reset_imports(buffer);
                }
                self.mark_synced(IMPORTS);
            }
        }
    }

    fn on_slice(&mut self, event: Event<EndpointSlice>) {
        match event {
            Event::Apply(slice) => match self.project_slice(&slice) {
                Some(Some((key, projected))) => self.index.apply_slice(key, projected),
                // No longer an MCS slice (label removed): forget it.
                Some(None) => self.index.delete_slice(&slice_key(&slice)),
                None => {}
            },
            Event::Delete(slice) => {
                let key = slice_key(&slice);
                self.forget_rejected(SLICE_KIND, &key.namespace, &key.name);
                self.index.delete_slice(&key);
            }
            Event::Init => {
                self.rejected.retain(|(kind, ..), _| *kind != SLICE_KIND);
                self.slice_relist = Some(Vec::new());
            }
            Event::InitApply(slice) => {
                let entry = match self.project_slice(&slice) {
                    Some(projected) => projected,
                    // Invalid: keep its last valid version (see on_import).
                    None => {
                        let key = slice_key(&slice);
                        self.index.slice(&key).cloned().map(|kept| (key, kept))
                    }
                };
                if let Some(entry) = entry
                    && let Some(buffer) = &mut self.slice_relist
                {
                    buffer.push(entry);
                }
            }
            Event::InitDone => {
                if let Some(buffer) = self.slice_relist.take() {
                    self.index.reset_slices(buffer);
                }
                self.mark_synced(SLICES);
            }
        }
    }

    fn on_namespace(&mut self, event: Event<PartialObjectMeta<Namespace>>) {
        let live = |ns: &PartialObjectMeta<Namespace>| ns.metadata.deletion_timestamp.is_none();
        let name = |ns: &PartialObjectMeta<Namespace>| ns.metadata.name.clone().unwrap_or_default();
        match event {
            Event::Apply(ns) if live(&ns) => self.index.apply_namespace(&name(&ns)),
            Event::Apply(ns) | Event::Delete(ns) => self.index.delete_namespace(&name(&ns)),
            Event::Init => self.namespace_relist = Some(Vec::new()),
            Event::InitApply(ns) => {
                if live(&ns)
                    && let Some(buffer) = &mut self.namespace_relist
                {
                    buffer.push(name(&ns));
                }
            }
            Event::InitDone => {
                if let Some(buffer) = self.namespace_relist.take() {
                    self.index.reset_namespaces(buffer);
                }
                self.mark_synced(NAMESPACES);
            }
        }
    }

    /// Projects a ServiceImport. An invalid object is logged and skipped;
    /// the last good version of it, if any, stays in the index.
    fn project_import(&mut self, object: &DynamicObject) -> Option<ImportedService> {
        let value =
            serde_json::json!({ "metadata": object.metadata, "spec": object.data.get("spec") });
        let result = serde_path_to_error::deserialize::<_, ServiceImport>(&value)
            .map_err(|e| e.to_string())
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
                self.metrics
                    .invalid_objects
                    .with_label_values(&[IMPORT_KIND])
                    .inc();
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
                self.metrics
                    .invalid_objects
                    .with_label_values(&[SLICE_KIND])
                    .inc();
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

    /// What the index and this source hold for `service`, for `/explain`.
    fn report(&self, service: &ServiceRef) -> SourceReport {
        let mut report = SourceReport::from_index(&self.index, service);
        let mut rejected: Vec<Rejection> = self
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
        let problems: Vec<String> = RESOURCE_NAMES
            .iter()
            .zip(&self.watch_errors)
            .filter_map(|(resource, error)| {
                Some(format!("watch of {resource}: {}", error.as_ref()?))
            })
            .collect();
        if !problems.is_empty() {
            report.source_problem = Some(problems.join("; "));
        }
        report
    }

    fn mark_synced(&mut self, kind: usize) {
        self.listed = true;
        if !self.synced[kind] {
            self.synced[kind] = true;
            tracing::info!(resource = RESOURCE_NAMES[kind], "initial list indexed");
        }
    }

    fn recovered(&mut self, kind: usize) {
        if std::mem::take(&mut self.failing[kind]) {
            self.watch_errors[kind] = None;
            tracing::info!(resource = RESOURCE_NAMES[kind], "watch recovered");
            if !self.failing.iter().any(|f| *f) {
                self.metrics.source_stale.set(0);
            }
        }
    }

    fn failed(&mut self, kind: usize, error: watcher::Error) -> Result<(), KubeSourceError> {
        let resource = RESOURCE_NAMES[kind];
        // 410 Gone: our resource version left the apiserver's window (after
        // an apiserver restart, or a long disconnection). The apiserver is
        // there; the watcher relists at once, and the relist replaces the
        // index in one step. Routine, not an outage.
        if let Some(status) = api_status(&error)
            && status.code == 410
        {
            self.metrics
                .watch_expired
                .with_label_values(&[resource])
                .inc();
            tracing::info!(resource, message = %status.message, "watch expired (410 Gone); relisting");
            return Ok(());
        }
        self.metrics
            .watch_errors
            .with_label_values(&[resource])
            .inc();
        self.restarted = false;
        if let Some(status) = api_status(&error)
            && status.is_forbidden()
            && !self.synced[kind]
        {
            return Err(KubeSourceError::Forbidden {
                resource,
                message: status.message.clone(),
            });
        }
        let error = crate::error::Chain(&error).to_string();
        self.watch_errors[kind] = Some(error.clone());
        if !self.failing[kind] {
            self.failing[kind] = true;
            self.metrics.source_stale.set(1);
            if self.zone.is_ready() {
                tracing::error!(resource, %error, "watch failed; still serving the last index, retrying with backoff");
            } else {
                tracing::error!(resource, %error, "watch failed before the first sync; answering SERVFAIL, retrying with backoff");
            }
        } else {
            tracing::debug!(resource, %error, "watch still failing");
        }
        Ok(())
    }

    /// Publishes what changed since the last zone; `received` is when the
    /// first of the changes arrived.
    fn publish(&mut self, received: std::time::Instant) {
        if !self.synced.iter().all(|s| *s) || (self.zone.is_ready() && !self.index.has_changes()) {
            return;
        }
        let (zone, stats) = self.index.publish();
        self.metrics
            .record_publish(&self.index, &zone, stats.rebuilt);
        let first = !self.zone.is_ready();
        if first {
            tracing::info!(
                services = zone.service_count(),
                imports = self.index.import_count(),
                slices = self.index.slice_count(),
                build_ms = stats.elapsed.as_millis() as u64,
                "first zone published; ready"
            );
        }
        self.zone.store(zone);
        if !first {
            self.metrics
                .publish_latency
                .observe(received.elapsed().as_secs_f64());
        }
        // Housekeeping once the new zone is served.
        if std::mem::take(&mut self.listed) {
            super::release_freed_memory();
        }
    }
}

/// Spacing of watch restarts: 1 s after the previous one, doubling to 60 s
/// while restarts keep being needed, back to 1 s after 5 minutes without one.
#[derive(Debug)]
struct RestartBackoff {
    last: Option<tokio::time::Instant>,
    delay: Duration,
}

impl RestartBackoff {
    const FIRST: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(60);
    const QUIET: Duration = Duration::from_secs(300);

    fn due(&self, now: tokio::time::Instant) -> bool {
        self.last.is_none_or(|last| now >= last + self.delay)
    }

    fn record(&mut self, now: tokio::time::Instant) {
        self.delay = match self.last {
            Some(last) if now < last + Self::QUIET => (self.delay * 2).min(Self::MAX),
            _ => Self::FIRST,
        };
        self.last = Some(now);
    }
}

impl Default for RestartBackoff {
    fn default() -> Self {
        Self {
            last: None,
            delay: Self::FIRST,
        }
    }
}

/// Whether the index holds this resource's current state once `event` is
/// applied: after a complete list, or a change on a running watch.
fn is_current<K>(event: &Event<K>) -> bool {
    !matches!(event, Event::Init | Event::InitApply(_))
}

fn api_status(error: &watcher::Error) -> Option<&kube::core::Status> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => Some(status),
        watcher::Error::WatchError(status) => Some(status),
        _ => None,
    }
}

fn import_ref(object: &DynamicObject) -> ServiceRef {
    ServiceRef::new(
        object.metadata.namespace.as_deref().unwrap_or("default"),
        object.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// Kind, namespace and name of an API object.
type ObjectKey = (&'static str, String, String);

fn object_key(kind: &'static str, namespace: &str, name: &str) -> ObjectKey {
    (kind, namespace.to_owned(), name.to_owned())
}

/// The slice inside each event of the stripped-slice watch.
fn unwrap_slice(event: Event<StrippedSlice>) -> Event<EndpointSlice> {
    match event {
        Event::Apply(slice) => Event::Apply(slice.0),
        Event::Delete(slice) => Event::Delete(slice.0),
        Event::Init => Event::Init,
        Event::InitApply(slice) => Event::InitApply(slice.0),
        Event::InitDone => Event::InitDone,
    }
}

fn slice_key(slice: &EndpointSlice) -> SliceKey {
    SliceKey {
        namespace: slice.metadata.namespace.clone().unwrap_or_default(),
        name: slice.metadata.name.clone().unwrap_or_default(),
    }
}

/// Retry delays for failing watches: 200 ms doubling to 5 s, with ±20 %
/// jitter, reset by the first successful event. kube's default goes up to
/// 30 s; a DNS server should catch up within seconds of the apiserver's
/// return, and the jitter spreads a DaemonSet's reconnects.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    next: Duration,
}

impl WatchBackoff {
    const MIN: Duration = Duration::from_millis(200);
    const MAX: Duration = Duration::from_secs(5);
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self { next: Self::MIN }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let base = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        // Cheap jitter from the clock; no need for a random number generator.
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let permille = 800 + u64::from(nanos % 401); // 0.8 ..= 1.2
        Some(Duration::from_millis(
            base.as_millis() as u64 * permille / 1000,
        ))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = Self::MIN;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_to_a_minute_and_reset_after_five_quiet_minutes() {
        let start = tokio::time::Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let mut restarts = RestartBackoff::default();
        assert!(restarts.due(at(0)));
        restarts.record(at(0));
        assert!(!restarts.due(at(0)) && restarts.due(at(1)));
        // Restarts that keep coming: 1, 2, 4 ... 60 s apart.
        let mut now = 0;
        let mut gaps = Vec::new();
        for _ in 0..8 {
            let gap = (1..=60).find(|g| restarts.due(at(now + g))).unwrap();
            gaps.push(gap);
            now += gap;
            restarts.record(at(now));
        }
        assert_eq!(gaps, [1, 2, 4, 8, 16, 32, 60, 60]);
        // After five quiet minutes the next restart may come 1 s after that one.
        now += 301;
        assert!(restarts.due(at(now)));
        restarts.record(at(now));
        assert!(restarts.due(at(now + 1)));
    }

    #[test]
    fn watch_backoff_doubles_to_five_seconds_with_jitter_and_resets() {
        use kube::runtime::utils::Backoff;
        let mut backoff = WatchBackoff::default();
        let delays: Vec<Duration> = (&mut backoff).take(8).collect();
        assert!(
            delays[0] >= Duration::from_millis(160) && delays[0] <= Duration::from_millis(240),
            "{delays:?}"
        );
        assert!(
            delays.iter().all(|d| *d <= Duration::from_secs(6)),
            "{delays:?}"
        );
        assert!(delays[7] >= Duration::from_secs(4), "{delays:?}");
        backoff.reset();
        assert!(backoff.next().unwrap() <= Duration::from_millis(240));
    }
}
