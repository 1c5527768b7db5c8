//! Every member's publication, read from the hub with four hub-wide
//! watches whatever the number of members (PublishedServices, published
//! slices, member Leases, member records), and told to the loop as if each
//! member were a peer of its own ([`crate::controller::peers::hub_peer`]).
//!
//! An object's member is its namespace (`member-<id>`, created by the hub
//! admin at `hub join`; members cannot create namespaces), never what the
//! object says: an object whose source-cluster label names another cluster
//! is refused, and the rest of that member's publication kept. Each
//! member's objects then go through the same views as a peer's
//! ([`crate::controller::publication`]): its exports from what its
//! PublishedServices carry of them, its Services, its slices.
//!
//! A hub-wide list is one list for every member: each member's watches
//! start and end theirs with it, so that a member's data is replaced whole
//! by a relist (a member that left while the hub was away is emptied by
//! it, not before). A member's endpoints count only inside the ranges its
//! record gives (written by the hub admin at `hub join`, which members
//! cannot write); a member without a readable record has none that count.
//! A member's liveness is its Lease: renewed within its
//! duration, as seen here (no clocks compared), or it is reported down,
//! and its data kept for the grace period, as an unreachable peer's. While
//! the hub itself does not answer, nothing is aged: the members' data is
//! frozen ([`Input::HubReachable`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, ObjectMeta};
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::api::well_known::{LABEL_MANAGED_BY, LABEL_SOURCE_CLUSTER};
use crate::api::{PublishedService, ServiceExport};
use crate::cidr::Cidr;
use crate::controller::connection::{
    ClusterEvent, ClusterKey, PEER_LIST_PAGE, Report, WatchEvent, tombstone,
};
use crate::controller::lean::Lean;
use crate::controller::naming::{LABEL_APP_MANAGED_BY, MANAGED_BY};
use crate::controller::peers::{Input, hub_peer};
use crate::controller::publication::reason::{FOREIGN_SOURCE_CLUSTER, NO_MEMBER_RECORD};
use crate::controller::publication::{self, PUBLISHED_BY, Viewer};
use crate::hub::{MEMBER_LEASE, MEMBER_RECORD, member_of_namespace, read_member_record};

/// How often each member's liveness is reported.
const LIVENESS_EVERY: Duration = Duration::from_secs(2);

/// A member's Lease duration when its Lease says none, or none is there.
const DEFAULT_LEASE: Duration = crate::hub::LEASE_DURATION;

/// The shortest and longest Lease duration honoured: a member cannot make
/// itself unkillable, nor flap with a 1 s Lease.
const LEASE_BOUNDS: (Duration, Duration) = (Duration::from_secs(10), Duration::from_secs(300));

/// How long a watch that failed counts as failing without a new error:
/// a resumed watch delivers nothing until an object changes, and one that
/// keeps failing reports an error at least every 30 s
/// ([`crate::watch::backoff::hub_watch_backoff`]).
const FAILING_FOR: Duration = Duration::from_secs(35);

/// One of the four hub-wide watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Published,
    Slices,
    Leases,
    Records,
}

impl Kind {
    const ALL: [Self; 4] = [Self::Published, Self::Slices, Self::Leases, Self::Records];
}

/// An event of one of the watches.
enum HubEvent {
    Published(Result<Event<Lean<PublishedService>>, watcher::Error>),
    Slices(Result<Event<Lean<EndpointSlice>>, watcher::Error>),
    Leases(Result<Event<Lease>, watcher::Error>),
    Records(Result<Event<ConfigMap>, watcher::Error>),
}

/// Where one watch's list stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum ListState {
    /// Not started.
    #[default]
    NotYet,
    /// Between its start and its end.
    InProgress,
    /// Done once at least.
    Done,
}

/// One member as read here: the views its objects go through.
struct Member {
    exports: Viewer<Lean<PublishedService>, Lean<ServiceExport>>,
    services: Viewer<Lean<PublishedService>, Lean<Service>>,
    slices: Viewer<Lean<EndpointSlice>, Lean<EndpointSlice>>,
    /// When this connection first read it.
    known_since: Instant,
}

/// What [`Reader::route`] made of a published object's event.
enum Routed<T> {
    /// Nothing more to do; `false` once the loop is gone.
    Handled(bool),
    /// This member's event.
    To(String, Event<T>),
}

/// A member's Lease as seen here.
struct Liveness {
    /// Its `renewTime`, as text: a change is a renewal, whatever the
    /// clocks say.
    renewed: Option<String>,
    /// When the last renewal was seen (or the Lease first read).
    seen_at: Instant,
    /// Its duration, within [`LEASE_BOUNDS`].
    duration: Duration,
}

/// The reader of one hub connection.
pub(super) struct Reader {
    generation: u64,
    local_id: String,
    reports: mpsc::Sender<Report>,
    members: BTreeMap<String, Member>,
    listing: BTreeMap<Kind, ListState>,
    leases: BTreeMap<String, Liveness>,
    /// Per watch, when it last failed and why, until it delivers again.
    failing: BTreeMap<Kind, (Instant, String)>,
    reachable: bool,
    listed_reported: bool,
    /// The members whose Lease a list in progress has read.
    leases_relisted: Option<BTreeSet<String>>,
    /// Each member's record as read: its endpoint ranges, or why none.
    records: BTreeMap<String, Result<Option<Vec<Cidr>>, String>>,
    /// The members whose record a list in progress has read.
    records_relisted: Option<BTreeSet<String>>,
}

/// The hub-wide watches of `client`, as one stream.
fn watches(client: &Client) -> impl futures::Stream<Item = HubEvent> + Send + 'static {
    let page = watcher::Config::default().page_size(PEER_LIST_PAGE);
    let published = crate::watch::stream_spread(
        Api::<Lean<PublishedService>>::all(client.clone()),
        page.clone()
            .labels(&format!("{LABEL_APP_MANAGED_BY}={MANAGED_BY}")),
    )
    .map(HubEvent::Published);
    let slices = crate::watch::stream_spread(
        Api::<Lean<EndpointSlice>>::all(client.clone()),
        page.clone()
            .labels(&format!("{LABEL_MANAGED_BY}={PUBLISHED_BY}")),
    )
    .map(HubEvent::Slices);
    let leases = crate::watch::stream_spread(
        Api::<Lease>::all(client.clone()),
        page.clone()
            .fields(&format!("metadata.name={MEMBER_LEASE}")),
    )
    .map(HubEvent::Leases);
    // The readers' role allows this one ConfigMap name, and a list or
    // watch only when it selects it.
    let records = crate::watch::stream_spread(
        Api::<ConfigMap>::all(client.clone()),
        page.fields(&format!("metadata.name={MEMBER_RECORD}")),
    )
    .map(HubEvent::Records);
    stream::select(
        stream::select(published, slices),
        stream::select(leases, records),
    )
}

impl Reader {
    /// A reader for hub connection `generation` of cluster `local_id`.
    pub(super) fn new(generation: u64, local_id: &str, reports: mpsc::Sender<Report>) -> Self {
        Self {
            generation,
            local_id: local_id.to_owned(),
            reports,
            members: BTreeMap::new(),
            listing: BTreeMap::new(),
            leases: BTreeMap::new(),
            failing: BTreeMap::new(),
            reachable: true,
            listed_reported: false,
            leases_relisted: None,
            records: BTreeMap::new(),
            records_relisted: None,
        }
    }

    /// Reads the hub through `client` until the loop is gone.
    pub(super) async fn run(mut self, client: Client) {
        let mut events = std::pin::pin!(watches(&client));
        let mut liveness = tokio::time::interval(LIVENESS_EVERY);
        liveness.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let alive = tokio::select! {
                Some(event) = events.next() => self.event(event).await,
                _ = liveness.tick() => self.report_liveness().await,
            };
            if !alive {
                return;
            }
        }
    }

    /// Sends `input` to the loop; `false` once the loop is gone.
    async fn send(&self, input: Input) -> bool {
        self.reports
            .send(Report::Peers(Box::new(input)))
            .await
            .is_ok()
    }

    async fn event(&mut self, event: HubEvent) -> bool {
        let now = Instant::now();
        let kind = match &event {
            HubEvent::Published(_) => Kind::Published,
            HubEvent::Slices(_) => Kind::Slices,
            HubEvent::Leases(_) => Kind::Leases,
            HubEvent::Records(_) => Kind::Records,
        };
        let error = match &event {
            HubEvent::Published(Err(e)) => Some(crate::error::Chain(e).to_string()),
            HubEvent::Slices(Err(e)) => Some(crate::error::Chain(e).to_string()),
            HubEvent::Leases(Err(e)) => Some(crate::error::Chain(e).to_string()),
            HubEvent::Records(Err(e)) => Some(crate::error::Chain(e).to_string()),
            _ => None,
        };
        match error {
            Some(error) => {
                if !self.failing.contains_key(&kind) {
                    tracing::warn!(?kind, %error, "hub watch failing; what the members published stays as it is until the hub answers");
                }
                self.failing.insert(kind, (now, error));
            }
            None => {
                self.failing.remove(&kind);
            }
        }
        if !self.notice_reachability(now).await {
            return false;
        }
        match event {
            HubEvent::Published(Ok(event)) => self.published(event).await,
            HubEvent::Slices(Ok(event)) => self.slices(event).await,
            HubEvent::Leases(Ok(event)) => self.lease(event, now).await,
            HubEvent::Records(Ok(event)) => self.record(event).await,
            _ => true,
        }
    }

    /// Tells the loop when the hub stops or starts answering.
    async fn notice_reachability(&mut self, now: Instant) -> bool {
        self.failing
            .retain(|_, (at, _)| now.duration_since(*at) < FAILING_FOR);
        let reachable = self.failing.is_empty();
        if reachable == self.reachable {
            return true;
        }
        self.reachable = reachable;
        if reachable {
            tracing::info!("the hub answers again");
            // What was not seen while it was away is not held against a
            // member.
            self.restart_liveness(now);
        }
        self.send(Input::HubReachable(reachable)).await
    }

    /// Gives every member a Lease duration from `now` to show it lives.
    fn restart_liveness(&mut self, now: Instant) {
        for liveness in self.leases.values_mut() {
            liveness.seen_at = now;
        }
        for member in self.members.values_mut() {
            member.known_since = now;
        }
    }

    /// The member whose namespace `namespace` is, unless it is none or
    /// this cluster; announced to the loop when it is new.
    async fn member(&mut self, namespace: Option<&str>) -> Option<String> {
        let id = member_of_namespace(namespace?)?;
        if id == self.local_id {
            return None;
        }
        let id = id.to_owned();
        if !self.members.contains_key(&id) {
            self.members.insert(
                id.clone(),
                Member {
                    exports: Viewer::new(
                        |p: Lean<PublishedService>| publication::export_view(&p.0).map(Lean::new),
                        tombstone::<ServiceExport>,
                    ),
                    services: Viewer::new(
                        |p: Lean<PublishedService>| publication::service_view(&p.0).map(Lean::new),
                        tombstone::<Service>,
                    ),
                    slices: Viewer::new(
                        |s: Lean<EndpointSlice>| publication::slice_view(s.0).map(Lean::new),
                        tombstone::<EndpointSlice>,
                    ),
                    known_since: Instant::now(),
                },
            );
            let generation = self.generation;
            if !self
                .send(Input::HubMember {
                    id: id.clone(),
                    generation,
                })
                .await
            {
                return None;
            }
            // Its watches join the lists where they stand.
            for kind in [Kind::Published, Kind::Slices] {
                let listing = self.listing.get(&kind).copied().unwrap_or_default();
                if listing != ListState::NotYet && !self.boundary(&id, kind, true).await {
                    return None;
                }
                if listing == ListState::Done && !self.boundary(&id, kind, false).await {
                    return None;
                }
            }
        }
        Some(id)
    }

    /// The start or end of a list of `kind`, for member `id`'s watches.
    async fn boundary(&mut self, id: &str, kind: Kind, init: bool) -> bool {
        match kind {
            Kind::Published => {
                let event = if init { Event::Init } else { Event::InitDone };
                self.feed_published(id, event).await
            }
            Kind::Slices => {
                let event = if init { Event::Init } else { Event::InitDone };
                self.feed_slices(id, event).await
            }
            Kind::Leases | Kind::Records => true,
        }
    }

    /// Member `id`'s PublishedService event, as its exports and Services.
    async fn feed_published(&mut self, id: &str, event: Event<Lean<PublishedService>>) -> bool {
        let Some(member) = self.members.get_mut(id) else {
            return true;
        };
        let exports = member.exports.event(event.clone());
        let services = member.services.event(event);
        // Both views refuse the same objects for the same reasons.
        if let Some((reason, what)) = services.refused.or(exports.refused)
            && !self.refuse(id, reason, what).await
        {
            return false;
        }
        let events = exports
            .events
            .into_iter()
            .map(|e| ClusterEvent::Exports(Ok(e)).into())
            .chain(
                services
                    .events
                    .into_iter()
                    .map(|e| ClusterEvent::Services(Ok(e)).into()),
            )
            .collect();
        self.forward(id, events).await
    }

    /// Member `id`'s published slice event, as a mirrored slice's.
    async fn feed_slices(&mut self, id: &str, event: Event<Lean<EndpointSlice>>) -> bool {
        let Some(member) = self.members.get_mut(id) else {
            return true;
        };
        let viewed = member.slices.event(event);
        if let Some((reason, what)) = viewed.refused
            && !self.refuse(id, reason, what).await
        {
            return false;
        }
        let events = viewed
            .events
            .into_iter()
            .map(|e| ClusterEvent::McsSlices(Ok(e)).into())
            .collect();
        self.forward(id, events).await
    }

    /// Sends member `id`'s watch events to the loop.
    async fn forward(&self, id: &str, events: Vec<WatchEvent>) -> bool {
        let secret = hub_peer(id);
        for event in events {
            let input = Input::Watch {
                secret: secret.clone(),
                generation: self.generation,
                event,
            };
            if !self.send(input).await {
                return false;
            }
        }
        true
    }

    /// Refuses `what` of member `id` for `reason`.
    async fn refuse(&self, id: &str, reason: &'static str, what: String) -> bool {
        self.reports
            .send(Report::Rejected {
                key: ClusterKey::Peer {
                    secret: hub_peer(id),
                    generation: self.generation,
                },
                peer: id.to_owned(),
                reason,
                what,
            })
            .await
            .is_ok()
    }

    /// A list of `kind` starts or ends, for every member at once.
    async fn list_boundary(&mut self, kind: Kind, init: bool) -> bool {
        let listing = if init {
            ListState::InProgress
        } else {
            ListState::Done
        };
        self.listing.insert(kind, listing);
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            if !self.boundary(&id, kind, init).await {
                return false;
            }
        }
        let all_listed = Kind::ALL
            .iter()
            .all(|k| self.listing.get(k) == Some(&ListState::Done));
        if !init && !self.listed_reported && all_listed {
            self.listed_reported = true;
            // A hub slow to list (a thousand members' publications) is
            // not a member's fault.
            self.restart_liveness(Instant::now());
            let generation = self.generation;
            return self.send(Input::HubListed { generation }).await
                && self.report_liveness().await;
        }
        true
    }

    /// The member whose namespace an object is in, and whether its
    /// source-cluster label agrees; one that does not is refused.
    async fn owner(&mut self, meta: &ObjectMeta, kind: &str) -> Option<(String, bool)> {
        let id = self.member(meta.namespace.as_deref()).await?;
        let label = meta
            .labels
            .as_ref()
            .and_then(|labels| labels.get(LABEL_SOURCE_CLUSTER));
        let agrees = label.map(String::as_str) == Some(id.as_str());
        if !agrees {
            let what = format!(
                "{kind} {} labelled {LABEL_SOURCE_CLUSTER}={}",
                meta.name.as_deref().unwrap_or_default(),
                label.map_or("(none)", String::as_str)
            );
            if !self.refuse(&id, FOREIGN_SOURCE_CLUSTER, what).await {
                return None;
            }
        }
        Some((id, agrees))
    }

    async fn published(&mut self, event: Event<Lean<PublishedService>>) -> bool {
        match self.route(Kind::Published, "PublishedService", event).await {
            Routed::Handled(alive) => alive,
            Routed::To(id, event) => self.feed_published(&id, event).await,
        }
    }

    async fn slices(&mut self, event: Event<Lean<EndpointSlice>>) -> bool {
        match self.route(Kind::Slices, "EndpointSlice", event).await {
            Routed::Handled(alive) => alive,
            Routed::To(id, event) => self.feed_slices(&id, event).await,
        }
    }

    /// Where an event of a published `kind` goes: a list boundary is
    /// every member's (handled here), an object to the member whose
    /// namespace holds it, as that member's event. One whose
    /// source-cluster label does not agree is refused; one that no longer
    /// agrees goes, if it was read before.
    async fn route<K: kube::Resource>(
        &mut self,
        kind: Kind,
        what: &str,
        event: Event<Lean<K>>,
    ) -> Routed<Lean<K>> {
        let (object, listed) = match event {
            Event::Init => return Routed::Handled(self.list_boundary(kind, true).await),
            Event::InitDone => return Routed::Handled(self.list_boundary(kind, false).await),
            Event::InitApply(object) => (object, true),
            Event::Apply(object) => (object, false),
            Event::Delete(object) => {
                return match self.member(object.0.meta().namespace.as_deref()).await {
                    Some(id) => Routed::To(id, Event::Delete(object)),
                    None => Routed::Handled(true),
                };
            }
        };
        let Some((id, agrees)) = self.owner(&object.0.meta().clone(), what).await else {
            return Routed::Handled(true);
        };
        let event = match (agrees, listed) {
            (true, true) => Event::InitApply(object),
            (true, false) => Event::Apply(object),
            (false, true) => return Routed::Handled(true),
            (false, false) => Event::Delete(object),
        };
        Routed::To(id, event)
    }

    async fn lease(&mut self, event: Event<Lease>, now: Instant) -> bool {
        let lease = match event {
            Event::Init => {
                self.leases_relisted = Some(BTreeSet::new());
                return self.list_boundary(Kind::Leases, true).await;
            }
            Event::InitDone => {
                // A Lease deleted while the watch was down sends no Delete.
                if let Some(listed) = self.leases_relisted.take() {
                    self.leases.retain(|id, _| listed.contains(id));
                }
                return self.list_boundary(Kind::Leases, false).await;
            }
            Event::Delete(lease) => {
                if let Some(id) = self.member(lease.metadata.namespace.as_deref()).await {
                    self.leases.remove(&id);
                }
                return true;
            }
            Event::InitApply(lease) | Event::Apply(lease) => lease,
        };
        let Some(id) = self.member(lease.metadata.namespace.as_deref()).await else {
            return true;
        };
        if let Some(listed) = &mut self.leases_relisted {
            listed.insert(id.clone());
        }
        let spec = lease.spec.unwrap_or_default();
        let renewed = spec.renew_time.map(|time| time.0.to_string());
        let duration = spec
            .lease_duration_seconds
            .and_then(|seconds| u64::try_from(seconds).ok())
            .map_or(DEFAULT_LEASE, Duration::from_secs)
            .clamp(LEASE_BOUNDS.0, LEASE_BOUNDS.1);
        match self.leases.get_mut(&id) {
            Some(liveness) => {
                if liveness.renewed != renewed {
                    liveness.renewed = renewed;
                    liveness.seen_at = now;
                }
                liveness.duration = duration;
            }
            None => {
                self.leases.insert(
                    id,
                    Liveness {
                        renewed,
                        seen_at: now,
                        duration,
                    },
                );
            }
        }
        true
    }

    async fn record(&mut self, event: Event<ConfigMap>) -> bool {
        let record = match event {
            Event::Init => {
                self.records_relisted = Some(BTreeSet::new());
                return self.list_boundary(Kind::Records, true).await;
            }
            Event::InitDone => {
                // A record deleted while the watch was down sends no
                // Delete; a member listed without one has none.
                let listed = self.records_relisted.take().unwrap_or_default();
                let ids: Vec<String> = self.members.keys().cloned().collect();
                for id in ids {
                    if !listed.contains(&id) && !self.set_record(&id, None).await {
                        return false;
                    }
                }
                return self.list_boundary(Kind::Records, false).await;
            }
            Event::Delete(record) => {
                return match self.member(record.metadata.namespace.as_deref()).await {
                    Some(id) => self.set_record(&id, None).await,
                    None => true,
                };
            }
            Event::InitApply(record) | Event::Apply(record) => record,
        };
        let Some(id) = self.member(record.metadata.namespace.as_deref()).await else {
            return true;
        };
        if let Some(listed) = &mut self.records_relisted {
            listed.insert(id.clone());
        }
        let read = read_member_record(&record.data.unwrap_or_default());
        self.set_record(&id, Some(read)).await
    }

    /// Member `id`'s record is now `record` (`None`: it has none): its
    /// endpoint ranges go to the loop, and a record that gives none is
    /// refused, once per change.
    async fn set_record(
        &mut self,
        id: &str,
        record: Option<Result<Option<Vec<Cidr>>, String>>,
    ) -> bool {
        let record = record.unwrap_or_else(|| {
            Err(format!(
                "no ConfigMap {MEMBER_RECORD} in its hub namespace (hub join writes it; run it again for this member)"
            ))
        });
        if self.records.get(id) == Some(&record) {
            return true;
        }
        self.records.insert(id.to_owned(), record.clone());
        let ranges = match record {
            Ok(ranges) => ranges,
            Err(why) => {
                let what = format!("every endpoint: its record on the hub gives no ranges: {why}");
                if !self.refuse(id, NO_MEMBER_RECORD, what).await {
                    return false;
                }
                Some(Vec::new())
            }
        };
        self.send(Input::HubMemberRanges {
            id: id.to_owned(),
            ranges,
        })
        .await
    }

    /// Reports each member's liveness as a probe result: its Lease renewed
    /// within its duration, as seen here; while the hub does not answer,
    /// that it does not.
    async fn report_liveness(&self) -> bool {
        if !self.listed_reported {
            return true;
        }
        let now = Instant::now();
        for (id, member) in &self.members {
            let result = if let Some((_, error)) = self.failing.values().next() {
                Err(format!("the hub does not answer: {error}"))
            } else {
                match self.leases.get(id) {
                    Some(lease) if now.duration_since(lease.seen_at) < lease.duration => Ok(()),
                    Some(lease) => Err(format!(
                        "its Lease on the hub has not been renewed for {} s (its duration is {} s)",
                        now.duration_since(lease.seen_at).as_secs(),
                        lease.duration.as_secs()
                    )),
                    None if now.duration_since(member.known_since) < DEFAULT_LEASE => Ok(()),
                    None => Err("it holds no Lease on the hub".to_owned()),
                }
            };
            let input = Input::Probe {
                secret: hub_peer(id),
                generation: self.generation,
                result,
            };
            if !self.send(input).await {
                return false;
            }
        }
        true
    }
}
