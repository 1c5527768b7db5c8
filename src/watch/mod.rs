//! A reusable watch → store layer: one [`Watch`] per watched resource kind
//! drives an [`IndexResource`] from kube-runtime's watcher events and keeps
//! that resource's [`Health`].
//!
//! - A running watch's `Apply` and `Delete` go straight to the store.
//! - A list (`Init`, `InitApply`…, `InitDone`: the first one, or a relist
//!   after a restart, a 410 Gone or an apiserver restart) is buffered until
//!   it is complete and then replaces the store's state in one
//!   [`IndexResource::reset`], so no half-listed state is ever visible.
//!   A store that nobody reads before every watch has synced can take its
//!   first list object by object instead ([`Watch::applying_first_list`]),
//!   and do its work while the rest of the list is on its way.
//! - Errors are classified: 410 Gone is routine (the watcher relists at
//!   once), anything else makes the resource *failing* until its state is
//!   current again (a complete relist, or a change on a resumed watch).
//!
//! Nothing here knows about DNS: a store is any type implementing
//! [`IndexResource`] for the object type `K`, so one store can index
//! several kinds (one implementation per kind), and several clusters'
//! watches can feed stores of their own. Backoff policies for the watch
//! streams and for restarting them live in [`backoff`].

pub mod backoff;

use std::fmt::Debug;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;

/// A store indexing objects of kind `K`, driven by a [`Watch`] (the
/// counterpart of kubert's `IndexNamespacedResource`, as linkerd's
/// policy-controller uses it).
pub trait IndexResource<K> {
    /// What a list keeps of each object until the list is complete: a
    /// projection, so that a list of thousands of objects is not held as
    /// whole API objects beside the current state, or no more than its key
    /// when the store holds it unchanged (the DNS index: a relist after an
    /// outage then costs the changes, not a second copy of the state).
    type Listed;

    /// An object was created or changed on a running watch.
    fn apply(&mut self, object: K);

    /// An object was deleted on a running watch.
    fn delete(&mut self, object: K);

    /// A list begins; its objects follow through [`Self::listed`].
    fn list_started(&mut self) {}

    /// What the list keeps of `object`; `None` leaves it out of the new
    /// state.
    fn listed(&mut self, object: K) -> Option<Self::Listed>;

    /// A complete list: replaces the whole state of this kind.
    fn reset(&mut self, listed: Vec<Self::Listed>);
}

/// How one resource's watch is doing.
#[derive(Debug, Clone)]
pub struct Health {
    resource: &'static str,
    synced: bool,
    failing_since: Option<Instant>,
    last_error: Option<String>,
}

impl Health {
    fn new(resource: &'static str) -> Self {
        Self {
            resource,
            synced: false,
            failing_since: None,
            last_error: None,
        }
    }

    /// The resource's name, as used in logs and metric labels.
    pub fn resource(&self) -> &'static str {
        self.resource
    }

    /// Whether a complete list has been indexed at least once.
    pub fn synced(&self) -> bool {
        self.synced
    }

    /// Whether the watch is failing: the store may be out of date.
    pub fn failing(&self) -> bool {
        self.failing_since.is_some()
    }

    /// When the current failure began.
    pub fn failing_since(&self) -> Option<Instant> {
        self.failing_since
    }

    /// The last error of the current failure.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }
}

/// What one watcher event did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A list is in progress (`Init` or `InitApply`): nothing indexed yet.
    Listing,
    /// A change on a running watch was indexed.
    Changed {
        /// The resource was failing and is current again.
        recovered: bool,
    },
    /// A complete list replaced the state.
    Listed {
        /// This was the resource's first complete list.
        first: bool,
        /// The resource was failing and is current again.
        recovered: bool,
    },
    /// 410 Gone: the watch's resource version left the apiserver's window.
    /// The watcher relists at once; not a failure.
    Expired {
        /// The apiserver's message.
        message: String,
    },
    /// The list or the watch failed; the watcher retries with backoff.
    Failed {
        /// The resource was not failing before.
        started: bool,
        /// The apiserver's message when it refused access (403) before the
        /// resource was ever listed: retrying cannot help.
        forbidden_before_sync: Option<String>,
        /// The error.
        error: String,
    },
}

/// What an [`Outcome`] asks of whoever runs the watch: the one policy on
/// watch failures, for the DNS source and the controller alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// Nothing to report: progress, a recovery, or a routine 410.
    Quiet,
    /// Access was refused before the resource was ever listed: retrying
    /// cannot help and running on would act on a partial view of this
    /// cluster, so a watch of this cluster stops the caller (a peer's is a
    /// failing peer, kept within its grace).
    Fatal {
        /// The apiserver's message.
        message: &'a str,
        /// The resource was not failing before: report it once.
        started: bool,
    },
    /// The watch began failing: report it once (the watcher retries with
    /// backoff). The error.
    FailingStarted(&'a str),
    /// A failure already reported goes on: not news. The error.
    StillFailing(&'a str),
}

impl Outcome {
    /// What this outcome asks of the caller ([`Verdict`]).
    pub fn verdict(&self) -> Verdict<'_> {
        match self {
            Self::Failed {
                forbidden_before_sync: Some(message),
                started,
                ..
            } => Verdict::Fatal {
                message,
                started: *started,
            },
            Self::Failed {
                started: true,
                error,
                ..
            } => Verdict::FailingStarted(error),
            Self::Failed { error, .. } => Verdict::StillFailing(error),
            Self::Listing | Self::Changed { .. } | Self::Listed { .. } | Self::Expired { .. } => {
                Verdict::Quiet
            }
        }
    }
}

/// The watch of one resource kind: its list buffer and its health.
pub struct Watch<K, S: IndexResource<K>> {
    relist: Option<Vec<S::Listed>>,
    /// The first list is still to come and goes to the store object by
    /// object ([`Watch::applying_first_list`]).
    first_list_direct: bool,
    /// The list under way goes to the store object by object.
    direct: bool,
    health: Health,
    kind: PhantomData<fn(K)>,
}

impl<K, S: IndexResource<K>> std::fmt::Debug for Watch<K, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("health", &self.health)
            .field("listing", &(self.relist.is_some() || self.direct))
            .finish()
    }
}

impl<K, S: IndexResource<K>> Watch<K, S> {
    /// The watch of `resource` (its name in logs and metric labels).
    pub fn new(resource: &'static str) -> Self {
        Self {
            relist: None,
            first_list_direct: false,
            direct: false,
            health: Health::new(resource),
            kind: PhantomData,
        }
    }

    /// The watch of `resource` whose first list goes to the store object
    /// by object ([`IndexResource::apply`]) instead of in one
    /// [`IndexResource::reset`] at its end, for a store that nobody reads
    /// before every watch has synced: it indexes while the list arrives.
    /// Only the very first list: should it fail half-way, the list that
    /// replaces it is buffered and resets the store as any relist does,
    /// dropping what the failed one left.
    pub fn applying_first_list(resource: &'static str) -> Self {
        Self {
            first_list_direct: true,
            ..Self::new(resource)
        }
    }

    /// How the watch is doing.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Applies one item of the watcher stream to `store`; `now` dates a
    /// failure.
    pub fn handle(
        &mut self,
        store: &mut S,
        event: Result<Event<K>, watcher::Error>,
        now: Instant,
    ) -> Outcome {
        let event = match event {
            Ok(event) => event,
            Err(error) => return self.failed(&error, now),
        };
        match event {
            Event::Apply(object) => {
                store.apply(object);
                Outcome::Changed {
                    recovered: self.recovered(),
                }
            }
            Event::Delete(object) => {
                store.delete(object);
                Outcome::Changed {
                    recovered: self.recovered(),
                }
            }
            Event::Init => {
                store.list_started();
                self.direct = std::mem::take(&mut self.first_list_direct);
                self.relist = (!self.direct).then(Vec::new);
                Outcome::Listing
            }
            Event::InitApply(object) => {
                if self.direct {
                    store.apply(object);
                } else if let Some(listed) = store.listed(object)
                    && let Some(buffer) = &mut self.relist
                {
                    buffer.push(listed);
                }
                Outcome::Listing
            }
            Event::InitDone => {
                self.direct = false;
                if let Some(buffer) = self.relist.take() {
                    store.reset(buffer);
                }
                let first = !std::mem::replace(&mut self.health.synced, true);
                if first {
                    tracing::info!(resource = self.health.resource, "initial list indexed");
                }
                Outcome::Listed {
                    first,
                    recovered: self.recovered(),
                }
            }
        }
    }

    /// The watch is failing without an error of its own: the apiserver
    /// left a probe unanswered, so this watch's connection is as good as
    /// dead even though it never errors. Returns whether the failure
    /// started now. It lasts, as any failure, until the state is current
    /// again.
    pub fn unresponsive(&mut self, error: String, now: Instant) -> bool {
        let started = self.health.failing_since.is_none();
        if started {
            self.health.failing_since = Some(now);
        }
        self.health.last_error = Some(error);
        started
    }

    /// The store is current again: a failure, if any, is over.
    fn recovered(&mut self) -> bool {
        if self.health.failing_since.take().is_some() {
            self.health.last_error = None;
            tracing::info!(resource = self.health.resource, "watch recovered");
            true
        } else {
            false
        }
    }

    fn failed(&mut self, error: &watcher::Error, now: Instant) -> Outcome {
        let status = api_status(error);
        if let Some(status) = status
            && status.code == 410
        {
            return Outcome::Expired {
                message: status.message.clone(),
            };
        }
        let forbidden_before_sync = status
            .filter(|status| status.is_forbidden() && !self.health.synced)
            .map(|status| status.message.clone());
        let started = self.health.failing_since.is_none();
        if started {
            self.health.failing_since = Some(now);
        }
        // The whole cause chain, once: "client error (Connect)" alone
        // does not say the apiserver refused the connection.
        let error = crate::error::Chain(error).to_string();
        self.health.last_error = Some(error.clone());
        Outcome::Failed {
            started,
            forbidden_before_sync,
            error,
        }
    }
}

/// A watch of `api`, starting with a list, retrying failures with
/// [`backoff::watch_backoff`]: the items a [`Watch`] handles.
pub fn stream<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    stream_backing_off(api, config, backoff::watch_backoff())
}

/// A watch of `api` like [`stream`], its retries spread over a wider
/// window ([`backoff::hub_watch_backoff`]): many clients of one apiserver
/// (a hub's members) do not relist it in step when it comes back.
pub fn stream_spread<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let expired = backoff::ResetOnExpired::new(backoff::hub_watch_backoff());
    let seen = expired.observer();
    watcher::watcher(api, config)
        .inspect(move |item| {
            if let Err(error) = item {
                seen.saw(error);
            }
        })
        .backoff(expired)
}

/// [`stream`] retried with `backoff` instead (a watch that may fail for
/// long, where retrying every few seconds would only load the apiserver).
fn stream_backing_off<K, B>(
    api: Api<K>,
    config: watcher::Config,
    backoff: B,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    B: kube::runtime::utils::Backoff + Send + 'static,
{
    watcher::watcher(api, config).backoff(backoff)
}

/// How a watch receives the objects that exist when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitialList {
    /// A watch that first streams every current object, then a bookmark
    /// marking the end (`sendInitialEvents`, KEP-3157 "WatchList"). The
    /// apiserver sends objects from its watch cache one by one, so
    /// decoding overlaps its encoding and no list response is built whole
    /// (KEP-3157's reason for it). At 25,000 slices start-up took as long
    /// as with pages on the development machine
    /// (docs/benchmarks-kubernetes.md).
    Streaming,
    /// Paged lists, then a watch from the list's resource version.
    Paged,
}

impl InitialList {
    /// What an apiserver of version `major`.`minor` (as `/version` reports
    /// them; providers append `+`) can serve. Kubernetes 1.27 and later
    /// know `sendInitialEvents`: where the WatchList feature gate is off
    /// (1.27–1.31 and 1.33 by default) they refuse the watch with 422 and
    /// [`stream_with`] falls back to pages. Older apiservers ignore the
    /// parameter and would never mark the end of the initial objects, so
    /// they get pages from the start, as does an unknown version.
    pub fn for_version(major: &str, minor: &str) -> Self {
        let number = |text: &str| -> Option<u32> {
            let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        };
        match (number(major), number(minor)) {
            (Some(major), Some(minor)) if (major, minor) >= (1, 27) => Self::Streaming,
            _ => Self::Paged,
        }
    }
}

/// A watch of `api` like [`stream`], receiving its initial objects as
/// `initial` says. A streaming watch the apiserver refuses (422: the
/// WatchList feature gate is off) is replaced, for good, by one with
/// paged lists (`config`'s page size and semantics).
pub fn stream_with<K>(
    api: Api<K>,
    config: watcher::Config,
    initial: InitialList,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    stream_with_backoff(api, config, initial, backoff::watch_backoff)
}

/// [`stream_with`], retrying failures with a fresh `backoff()` per
/// stream: for an optional resource that may fail for long (a CRD not
/// installed, a role without it), [`backoff::optional_watch_backoff`].
pub fn stream_with_backoff<K, B>(
    api: Api<K>,
    config: watcher::Config,
    initial: InitialList,
    backoff: fn() -> B,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    B: kube::runtime::utils::Backoff + Send + 'static,
{
    use futures::StreamExt;
    use std::task::Poll;

    let first = match initial {
        InitialList::Streaming => config.clone().streaming_lists(),
        InitialList::Paged => config.clone(),
    };
    let resource = api.resource_url().to_owned();
    let mut fallback = (initial == InitialList::Streaming).then(|| (api.clone(), config));
    let mut current = stream_backing_off(api, first, backoff()).boxed();
    futures::stream::poll_fn(move |cx| {
        loop {
            let item = std::task::ready!(current.poll_next_unpin(cx));
            if let Some(Err(error)) = &item
                && refuses_streaming(error)
                && let Some((api, config)) = fallback.take()
            {
                tracing::info!(
                    %resource,
                    error = %crate::error::Chain(error),
                    "the apiserver does not stream initial lists (WatchList feature gate off); using paged lists"
                );
                current = stream_backing_off(api, config, backoff()).boxed();
                continue;
            }
            return Poll::Ready(item);
        }
    })
}

/// The apiserver refused a watch with `sendInitialEvents` as invalid.
fn refuses_streaming(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchStartFailed(kube::Error::Api(status)) => status.code == 422,
        watcher::Error::WatchError(status) => status.code == 422,
        _ => false,
    }
}

/// Why a [`probe`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// No answer within the timeout: the apiserver (or the path to it) is
    /// hung. A watch on a hung connection neither ends nor errors, so only
    /// a probe can tell.
    #[error("the apiserver did not answer a list within {0:?}")]
    NoAnswer(Duration),
    /// An answer, but an error (refused, forbidden, 5xx): the watches see
    /// the same errors themselves.
    #[error("{0}")]
    Failed(String),
}

/// Lists one object's metadata of `api`, waiting at most `timeout`: proof
/// that the apiserver answers, authorizes us and serves the resource,
/// independent of whether a watch happens to deliver events.
pub async fn probe<K>(api: &Api<K>, timeout: Duration) -> Result<(), ProbeError>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug,
{
    let params = kube::api::ListParams::default().limit(1);
    match tokio::time::timeout(timeout, api.list_metadata(&params)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(ProbeError::Failed(crate::error::Chain(&error).to_string())),
        Err(_) => Err(ProbeError::NoAnswer(timeout)),
    }
}

/// Whether the apiserver lists `api` again within `timeout`. A watch that
/// resumes after an outage emits nothing until an object changes, so
/// recovery cannot be read off the event stream alone: probe, then restart
/// the watch to relist.
pub async fn serves<K>(api: &Api<K>, timeout: Duration) -> bool
where
    K: kube::Resource + Clone + DeserializeOwned + Debug,
{
    probe(api, timeout).await.is_ok()
}

/// The apiserver's status in a watcher error, if it sent one.
pub fn api_status(error: &watcher::Error) -> Option<&kube::core::Status> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => Some(status),
        watcher::Error::WatchError(status) => Some(status),
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Synthetic watcher errors for tests.

    use kube::core::Status;
    use kube::runtime::watcher;

    /// A watch error the apiserver answered with `code`.
    pub(crate) fn status_error(code: u16, reason: &str) -> watcher::Error {
        watcher::Error::WatchError(Box::new(
            Status::failure(&format!("synthetic {reason}"), reason).with_code(code),
        ))
    }

    /// 410 Gone.
    pub(crate) fn gone() -> watcher::Error {
        status_error(410, "Expired")
    }

    /// 403 Forbidden.
    pub(crate) fn forbidden() -> watcher::Error {
        status_error(403, "Forbidden")
    }

    /// A failure without a status (connection refused and the like).
    pub(crate) fn unreachable() -> watcher::Error {
        watcher::Error::NoResourceVersion
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::testing::{forbidden, gone, unreachable};
    use super::*;

    /// Objects are `(name, value)`; a negative value is invalid and keeps
    /// the last valid one.
    #[derive(Default)]
    struct Map {
        objects: BTreeMap<&'static str, i32>,
        resets: usize,
    }

    impl IndexResource<(&'static str, i32)> for Map {
        type Listed = (&'static str, i32);

        fn apply(&mut self, (name, value): (&'static str, i32)) {
            if value >= 0 {
                self.objects.insert(name, value);
            }
        }

        fn delete(&mut self, (name, _): (&'static str, i32)) {
            self.objects.remove(name);
        }

        fn listed(&mut self, (name, value): (&'static str, i32)) -> Option<(&'static str, i32)> {
            if value >= 0 {
                Some((name, value))
            } else {
                self.objects.get(name).map(|kept| (name, *kept))
            }
        }

        fn reset(&mut self, listed: Vec<(&'static str, i32)>) {
            self.resets += 1;
            self.objects = listed.into_iter().collect();
        }
    }

    type Object = (&'static str, i32);

    fn list(watch: &mut Watch<Object, Map>, map: &mut Map, objects: &[Object]) -> Vec<Outcome> {
        let now = Instant::now();
        let mut outcomes = vec![watch.handle(map, Ok(Event::Init), now)];
        for object in objects {
            outcomes.push(watch.handle(map, Ok(Event::InitApply(*object)), now));
        }
        outcomes.push(watch.handle(map, Ok(Event::InitDone), now));
        outcomes
    }

    fn listed(first: bool, recovered: bool) -> Outcome {
        Outcome::Listed { first, recovered }
    }

    #[test]
    fn a_list_replaces_the_state_in_one_step_when_complete() {
        let mut watch = Watch::new("things");
        let mut map = Map::default();
        let outcomes = list(&mut watch, &mut map, &[("a", 1), ("b", 2)]);
        assert_eq!(outcomes.last(), Some(&listed(true, false)));
        assert!(watch.health().synced());
        let now = Instant::now();
        watch.handle(&mut map, Ok(Event::Apply(("c", 3))), now);
        // A relist: nothing changes until InitDone, then b and c are gone
        // and a keeps its last valid version.
        watch.handle(&mut map, Ok(Event::Init), now);
        watch.handle(&mut map, Ok(Event::InitApply(("a", -1))), now);
        assert_eq!(map.objects.len(), 3);
        assert_eq!(map.resets, 1);
        let done = watch.handle(&mut map, Ok(Event::InitDone), now);
        assert_eq!(done, listed(false, false));
        assert_eq!(map.objects, BTreeMap::from([("a", 1)]));
    }

    #[test]
    fn a_first_list_applied_directly_indexes_as_it_arrives_and_a_failed_one_is_replaced() {
        let mut watch = Watch::applying_first_list("things");
        let mut map = Map::default();
        let now = Instant::now();
        watch.handle(&mut map, Ok(Event::Init), now);
        watch.handle(&mut map, Ok(Event::InitApply(("a", 1))), now);
        watch.handle(&mut map, Ok(Event::InitApply(("b", 2))), now);
        // Indexed before the list ends, without a reset.
        assert_eq!(map.objects, BTreeMap::from([("a", 1), ("b", 2)]));
        assert!(!watch.health().synced());
        // The list fails half-way: the watcher lists again, and that list
        // is buffered and replaces what the first one left.
        let failed = watch.handle(&mut map, Err(unreachable()), now);
        assert!(matches!(failed, Outcome::Failed { .. }));
        let outcomes = list(&mut watch, &mut map, &[("b", 3)]);
        assert_eq!(map.resets, 1);
        assert_eq!(map.objects, BTreeMap::from([("b", 3)]));
        assert_eq!(outcomes.last(), Some(&listed(true, true)));
        // Later relists are buffered too: nothing changes until InitDone.
        watch.handle(&mut map, Ok(Event::Init), now);
        watch.handle(&mut map, Ok(Event::InitApply(("c", 4))), now);
        assert_eq!(map.objects, BTreeMap::from([("b", 3)]));
        watch.handle(&mut map, Ok(Event::InitDone), now);
        assert_eq!(map.objects, BTreeMap::from([("c", 4)]));
        assert_eq!(map.resets, 2);
    }

    #[test]
    fn a_first_list_applied_directly_needs_no_reset() {
        let mut watch = Watch::applying_first_list("things");
        let mut map = Map::default();
        let outcomes = list(&mut watch, &mut map, &[("a", 1), ("b", -1)]);
        assert_eq!(map.resets, 0);
        assert_eq!(map.objects, BTreeMap::from([("a", 1)]));
        assert_eq!(outcomes.last(), Some(&listed(true, false)));
        assert!(watch.health().synced());
    }

    #[test]
    fn a_failure_lasts_until_the_state_is_current_again() {
        let mut watch = Watch::new("things");
        let mut map = Map::default();
        list(&mut watch, &mut map, &[("a", 1)]);
        let since = Instant::now();
        let outcome = watch.handle(&mut map, Err(unreachable()), since);
        assert!(matches!(
            outcome,
            Outcome::Failed {
                started: true,
                forbidden_before_sync: None,
                ..
            }
        ));
        let again = watch.handle(&mut map, Err(unreachable()), Instant::now());
        assert!(matches!(again, Outcome::Failed { started: false, .. }));
        assert_eq!(watch.health().failing_since(), Some(since));
        assert!(watch.health().last_error().is_some());
        // A list in progress is not current yet.
        watch.handle(&mut map, Ok(Event::Init), Instant::now());
        assert!(watch.health().failing());
        let done = watch.handle(&mut map, Ok(Event::InitDone), Instant::now());
        assert_eq!(done, listed(false, true));
        assert!(!watch.health().failing() && watch.health().last_error().is_none());
        // A resumed watch delivering a change is current too.
        watch.handle(&mut map, Err(unreachable()), Instant::now());
        let change = watch.handle(&mut map, Ok(Event::Delete(("a", 0))), Instant::now());
        assert_eq!(change, Outcome::Changed { recovered: true });
        assert!(map.objects.is_empty());
    }

    #[test]
    fn gone_is_routine_and_forbidden_matters_only_before_the_first_list() {
        let mut watch = Watch::new("things");
        let mut map = Map::default();
        let expired = watch.handle(&mut map, Err(gone()), Instant::now());
        assert!(matches!(expired, Outcome::Expired { .. }));
        assert!(!watch.health().failing());
        let refused = watch.handle(&mut map, Err(forbidden()), Instant::now());
        assert!(matches!(
            refused,
            Outcome::Failed {
                forbidden_before_sync: Some(_),
                ..
            }
        ));
        list(&mut watch, &mut map, &[]);
        let later = watch.handle(&mut map, Err(forbidden()), Instant::now());
        assert!(matches!(
            later,
            Outcome::Failed {
                started: true,
                forbidden_before_sync: None,
                ..
            }
        ));
    }

    #[test]
    fn the_verdict_is_fatal_for_a_refusal_before_the_first_list_and_warns_once_otherwise() {
        let mut watch = Watch::new("things");
        let mut map = Map::default();
        let refused = watch.handle(&mut map, Err(forbidden()), Instant::now());
        assert!(
            matches!(refused.verdict(), Verdict::Fatal { message, started: true } if message.contains("Forbidden"))
        );
        list(&mut watch, &mut map, &[("a", 1)]);
        assert_eq!(
            watch
                .handle(&mut map, Ok(Event::Apply(("a", 2))), Instant::now())
                .verdict(),
            Verdict::Quiet
        );
        // Refused after the first list: a failure like any other.
        let failing = watch.handle(&mut map, Err(forbidden()), Instant::now());
        assert!(matches!(failing.verdict(), Verdict::FailingStarted(_)));
        let again = watch.handle(&mut map, Err(unreachable()), Instant::now());
        assert!(matches!(again.verdict(), Verdict::StillFailing(_)));
        let expired = watch.handle(&mut map, Err(gone()), Instant::now());
        assert_eq!(expired.verdict(), Verdict::Quiet);
    }

    #[test]
    fn streaming_lists_only_where_the_apiserver_knows_them() {
        for (major, minor, want) in [
            ("1", "37", InitialList::Streaming),
            ("1", "27", InitialList::Streaming),
            ("1", "33+", InitialList::Streaming),
            ("2", "0", InitialList::Streaming),
            ("1", "26", InitialList::Paged),
            ("1", "9", InitialList::Paged),
            ("", "", InitialList::Paged),
            ("one", "thirty", InitialList::Paged),
        ] {
            assert_eq!(
                InitialList::for_version(major, minor),
                want,
                "{major}.{minor}"
            );
        }
    }

    #[test]
    fn only_an_invalid_watch_request_means_no_streaming() {
        let invalid = super::testing::status_error(422, "Invalid");
        assert!(refuses_streaming(&invalid));
        let start_refused = watcher::Error::WatchStartFailed(kube::Error::Api(Box::new(
            kube::core::Status::failure("sendInitialEvents is forbidden", "Invalid").with_code(422),
        )));
        assert!(refuses_streaming(&start_refused));
        for other in [gone(), forbidden(), unreachable()] {
            assert!(!refuses_streaming(&other), "{other}");
        }
    }
}
