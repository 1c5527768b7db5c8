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
//! - The ClusterProperty `cluster.clusterset.k8s.io` is watched by name: this
//!   cluster's id, for local-first answers. Optional: its failures never
//!   stop the server nor make it stale (see [`state`]).
//!
//! Objects are projected at ingest; nothing but the projections is kept.
//! EndpointSlices and ServiceImports are even decoded stripped
//! ([`crate::api::stripped`]): the parser skips the fields the index does not
//! read.
//!
//! Each watch receives the current objects as a stream from the
//! apiserver's watch cache (`sendInitialEvents`) where the apiserver
//! serves that ([`InitialList::for_version`]), else as a list from the
//! same cache (one response: the cache does not page); a refused stream
//! falls back to the list ([`crate::watch::stream_with`]).
//!
//! A relist (watch restart, 410 Gone, apiserver restart) is buffered until it
//! is complete and then replaces the old state in one step, so there is no
//! window in which a half-listed index is served. What it buffers is the
//! changes: an object the index holds unchanged is kept as its key alone
//! ([`crate::index::Relisted`]), so a relist after an outage does not hold
//! a second copy of the state. Nothing is published until
//! every kind has been listed once: until then the DNS server answers
//! SERVFAIL and `/ready` says not ready.
//!
//!
//! A hung apiserver (stopped, not refusing: `SIGSTOP`, a proxy or network
//! path that drops packets) ends no watch and returns no error, and kube's
//! client has no read timeout. So a liveness probe lists one ServiceImport's
//! metadata every half of `apiserver_timeout`, each waiting at most the
//! other half: the source counts as stale (`source_stale` 1, `/explain`)
//! at most `apiserver_timeout` after the apiserver stopped answering. Once
//! it answers again, every watch is restarted with a relist (the hung
//! connections are dropped: data a proxy swallowed never arrives on them),
//! and the source is current when that relist is indexed.
//!
//! Layout: [`state`] is the whole behaviour as a pure state machine over
//! the generic [`crate::watch`] layer; [`KubeSource`] is the shell that
//! runs the watches, the liveness probe and the recovery probe, feeds the
//! state machine and carries out its effects through the shared
//! [`Publisher`].

pub mod state;

use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{BoxStream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use self::state::{Effect, Input, Kind, State, WatchedImport};
use crate::api::ClusterProperty;
use crate::api::stripped::{Dns, Stripped};
use crate::api::well_known::{CLUSTER_ID_PROPERTY, LABEL_SERVICE_NAME};
use crate::publish::Publisher;
use crate::watch::backoff::RestartSchedule;
use crate::watch::{InitialList, ProbeError};
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

/// The Kubernetes source: the shell around [`State`]. It runs the three
/// watches and the recovery probe, and carries out the state machine's
/// effects.
pub struct KubeSource {
    client: Client,
    import_resource: ApiResource,
    state: State,
    publisher: Publisher,
    apiserver_timeout: Duration,
    streaming_lists: bool,
    initial_list: InitialList,
}

/// Default of `apiserver_timeout`: how long the apiserver may leave the
/// liveness probe unanswered before the source counts as stale. A probe
/// every 15 s per server (a DaemonSet: one per node) costs the apiserver
/// less than the kubelets' 10 s node Lease renewals; a probe served from
/// the watch cache that takes 15 s means the apiserver is in trouble.
pub const DEFAULT_APISERVER_TIMEOUT: Duration = Duration::from_secs(30);

impl std::fmt::Debug for KubeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeSource")
            .field("import_resource", &self.import_resource)
            .finish_non_exhaustive()
    }
}

/// Objects per page asked of a list, where lists are not streamed (an
/// apiserver without streamed initial lists). The lists ask for
/// `resourceVersion=0`, served from the apiserver's watch cache, which
/// ignores the limit and answers in one response (`computeListLimit` in the
/// apiserver's cacher); the limit holds only where a list falls through to
/// etcd, and there 5000 costs a tenth of client-go's 500 round trips.
const LIST_PAGE_SIZE: u32 = 5000;

/// How often resources whose watch failed are probed for recovery.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

impl KubeSource {
    /// A source over `client`, watching `import_resource` for ServiceImports
    /// and publishing through `publisher`.
    pub fn new(
        client: Client,
        import_resource: ApiResource,
        settings: ZoneSettings,
        publisher: Publisher,
    ) -> Self {
        Self {
            client,
            import_resource,
            state: State::new(settings),
            publisher,
            apiserver_timeout: DEFAULT_APISERVER_TIMEOUT,
            streaming_lists: true,
            initial_list: InitialList::Paged,
        }
    }

    /// Counts the source stale at most `timeout` after the apiserver stops
    /// answering (default [`DEFAULT_APISERVER_TIMEOUT`]).
    pub fn with_apiserver_timeout(mut self, timeout: Duration) -> Self {
        self.apiserver_timeout = timeout;
        self
    }

    /// Whether initial lists may be streamed (default true); false always
    /// lists in pages.
    pub fn with_streaming_lists(mut self, streaming: bool) -> Self {
        self.streaming_lists = streaming;
        self
    }

    /// How often the liveness probe runs, and how long each may wait: half
    /// of `apiserver_timeout` each, so that a hang is noticed within it
    /// (the probe sent just before the hang times out first; at worst the
    /// one sent right after an answer that came just before the hang).
    fn probe_half(&self) -> Duration {
        self.apiserver_timeout / 2
    }

    /// Watches until `shutdown` turns true, answering `/explain` inquiries
    /// between events. Returns an error only for problems that retrying
    /// cannot fix before the first sync (missing permissions), so that a
    /// misconfigured deployment fails loudly instead of serving empty
    /// answers.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Result<(), KubeSourceError> {
        if self.streaming_lists {
            self.initial_list = tokio::select! {
                initial = initial_list(&self.client, self.probe_half()) => initial,
                _ = shutdown.changed() => return Ok(()),
            };
        } else {
            tracing::info!(initial = ?InitialList::Paged, "initial lists (streaming_lists = false)");
        }
        let mut updates = self.watches();
        let mut restarts = RestartSchedule::default();
        let mut probe = tokio::time::interval(PROBE_INTERVAL);
        probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut liveness = tokio::time::interval(self.probe_half());
        liveness.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Probes in flight. They run beside the loop, never inside it: a
        // hung apiserver must not hold up `/explain` or shutdown.
        let mut alive: Option<BoxFuture<'static, Result<(), ProbeError>>> = None;
        let mut recovery: Option<BoxFuture<'static, bool>> = None;
        loop {
            let first = tokio::select! {
                next = updates.next() => next,
                _ = liveness.tick(), if alive.is_none() => {
                    alive = Some(self.liveness_probe());
                    continue;
                }
                answer = in_flight(&mut alive) => {
                    alive = None;
                    if let Err(error @ ProbeError::NoAnswer(_)) = answer {
                        self.step(Input::Unresponsive(error.to_string()), Instant::now())?;
                    }
                    continue;
                }
                _ = probe.tick(), if recovery.is_none() && self.state.wants_restart() => {
                    if restarts.due(tokio::time::Instant::now()) {
                        recovery = Some(self.apiserver_serves_failing());
                    }
                    continue;
                }
                serves = in_flight(&mut recovery) => {
                    recovery = None;
                    if serves && self.state.wants_restart() {
                        // Back: relist everything now rather than wait out
                        // the backoff the outage built up, and so that
                        // "not stale" means "the index is current again".
                        // The old watches go with their connections, which
                        // a hang may have left holding half a message.
                        tracing::info!("apiserver reachable again; relisting");
                        restarts.record(tokio::time::Instant::now());
                        updates = self.watches();
                        self.step(Input::Restarted, Instant::now())?;
                    }
                    continue;
                }
                inquiry = self.publisher.inquiry() => {
                    let report = self.state.report(inquiry.service());
                    inquiry.answer(report);
                    continue;
                }
                _ = shutdown.changed() => return Ok(()),
            };
            let Some(first) = first else { return Ok(()) };
            let received = Instant::now();
            self.step(first, received)?;
            // Apply everything already waiting before publishing once.
            while let Some(Some(update)) = updates.next().now_or_never() {
                self.step(update, received)?;
            }
            self.step(Input::Flush, received)?;
        }
    }

    /// Feeds `input` to the state machine and carries out its effects;
    /// `received` is when the batch it belongs to began.
    fn step(&mut self, input: Input, received: Instant) -> Result<(), KubeSourceError> {
        let metrics = self.publisher.metrics().clone();
        for effect in self.state.handle(input, Instant::now()) {
            match effect {
                Effect::InvalidObject(kind) => {
                    metrics.invalid_objects.with_label_values(&[kind]).inc();
                }
                Effect::WatchError(resource) => {
                    metrics.watch_errors.with_label_values(&[resource]).inc();
                }
                Effect::WatchExpired(resource) => {
                    metrics.watch_expired.with_label_values(&[resource]).inc();
                }
                Effect::Unanswered => metrics.apiserver_probe_timeouts.inc(),
                Effect::Restarted => metrics.watch_restarts.inc(),
                Effect::Stale(stale) => self.publisher.set_failing(stale),
                Effect::Publish(publication) => {
                    let index = self.state.index();
                    if publication.first {
                        tracing::info!(
                            services = publication.zone.service_count(),
                            imports = index.import_count(),
                            slices = index.slice_count(),
                            prebuilt = publication.prebuilt,
                            build_ms = publication.stats.elapsed.as_millis() as u64,
                            "first zone published; ready"
                        );
                    }
                    self.publisher.publish(
                        index,
                        publication.zone,
                        publication.stats,
                        Some(received),
                        publication.after_list,
                    );
                }
                Effect::Fatal(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// Fresh watches on the three resources and on this cluster's id, each
    /// starting with a list.
    fn watches(&self) -> futures::stream::SelectAll<BoxStream<'static, Input>> {
        let config = watcher::Config::default()
            .any_semantic()
            .page_size(LIST_PAGE_SIZE);
        let initial = self.initial_list;
        let imports = crate::watch::stream_with(
            Api::<WatchedImport>::all_with(self.client.clone(), &self.import_resource),
            config.clone(),
            initial,
        )
        .map(Input::Import);
        let slices = crate::watch::stream_with(
            Api::<Stripped<EndpointSlice, Dns>>::all(self.client.clone()),
            config.clone().labels(LABEL_SERVICE_NAME),
            initial,
        )
        .map(|result| Input::Slice(result.map(unwrap_slice)));
        let namespaces = crate::watch::stream_with(
            Api::<PartialObjectMeta<Namespace>>::all(self.client.clone()),
            config.clone(),
            initial,
        )
        .map(Input::Namespace);
        // This cluster's id, the one object (at the API version the
        // controller reads it). Optional, so a failure is retried slowly.
        let cluster_id = crate::watch::stream_with_backoff(
            Api::<ClusterProperty>::all(self.client.clone()),
            config.fields(&format!("metadata.name={CLUSTER_ID_PROPERTY}")),
            initial,
            crate::watch::backoff::optional_watch_backoff,
        )
        .map(Input::ClusterProperty);
        futures::stream::select_all([
            imports.boxed(),
            slices.boxed(),
            namespaces.boxed(),
            cluster_id.boxed(),
        ])
    }

    /// One liveness probe: a ServiceImport list, limited to half of
    /// `apiserver_timeout`.
    fn liveness_probe(&self) -> BoxFuture<'static, Result<(), ProbeError>> {
        let api = Api::<DynamicObject>::all_with(self.client.clone(), &self.import_resource);
        let timeout = self.probe_half();
        async move { crate::watch::probe(&api, timeout).await }.boxed()
    }

    /// Whether the apiserver lists every resource whose watch is failing,
    /// each within half of `apiserver_timeout`.
    fn apiserver_serves_failing(&self) -> BoxFuture<'static, bool> {
        let failing = self.state.failing();
        let client = self.client.clone();
        let import_resource = self.import_resource.clone();
        let timeout = self.probe_half();
        async move {
            for kind in failing {
                let serves = match kind {
                    Kind::Imports => {
                        let api = Api::<DynamicObject>::all_with(client.clone(), &import_resource);
                        crate::watch::serves(&api, timeout).await
                    }
                    Kind::Slices => {
                        let api = Api::<EndpointSlice>::all(client.clone());
                        crate::watch::serves(&api, timeout).await
                    }
                    Kind::Namespaces => {
                        let api = Api::<Namespace>::all(client.clone());
                        crate::watch::serves(&api, timeout).await
                    }
                };
                if !serves {
                    return false;
                }
            }
            true
        }
        .boxed()
    }
}

/// How the watches receive their initial objects, from the apiserver's
/// version ([`InitialList::for_version`]); paged lists when `/version`
/// does not answer within `timeout`.
async fn initial_list(client: &Client, timeout: Duration) -> InitialList {
    match tokio::time::timeout(timeout, client.apiserver_version()).await {
        Ok(Ok(version)) => {
            let initial = InitialList::for_version(&version.major, &version.minor);
            tracing::info!(version = %version.git_version, ?initial, "initial lists");
            initial
        }
        Ok(Err(error)) => {
            tracing::warn!(error = %crate::error::Chain(&error), "reading the apiserver version; using paged lists");
            InitialList::Paged
        }
        Err(_) => {
            tracing::warn!(
                ?timeout,
                "the apiserver did not report its version; using paged lists"
            );
            InitialList::Paged
        }
    }
}

/// The output of the future in `slot`; pending while there is none (a
/// `select!` branch for a probe that may or may not be in flight).
async fn in_flight<T>(slot: &mut Option<BoxFuture<'static, T>>) -> T {
    match slot {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

/// The slice inside each event of the stripped-slice watch.
fn unwrap_slice(event: Event<Stripped<EndpointSlice, Dns>>) -> Event<EndpointSlice> {
    match event {
        Event::Apply(slice) => Event::Apply(slice.0),
        Event::Delete(slice) => Event::Delete(slice.0),
        Event::Init => Event::Init,
        Event::InitApply(slice) => Event::InitApply(slice.0),
        Event::InitDone => Event::InitDone,
    }
}
