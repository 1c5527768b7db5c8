//! When the controller plans and writes, decided in one pure type beside
//! [`super::peers::Peers`]: the start-up gate, the services left to plan
//! and the bounded batch a cycle takes of them, fairly across the clusters
//! whose changes touched them, failed writes retried with a growing delay
//! after fresh work, the change-to-write latency, and when the publication
//! for peers is tried (again). The shell (`run.rs`, `run/`) feeds it what
//! happened and asks it what to do; the tests drive it with synthetic time.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use super::cluster::Touched;
use crate::api::ServiceRef;

/// How many services one cycle plans and writes: events are read between
/// cycles, so fresh changes and `/ready` do not wait behind a cold start's
/// thousands of writes.
pub(super) const SERVICES_PER_CYCLE: usize = 256;

/// How many plan-and-write rounds a cycle runs for the services that
/// wrote: a new ClusterSetIP service needs three (the import; then what it
/// owns, which needs the import's uid; then the VIP into the import), so it
/// is finished within its cycle rather than queued behind the rest.
pub(super) const ROUNDS_PER_CYCLE: usize = 3;

/// How long after a failed try the publication is tried again.
pub(super) const PUBLISH_RETRY: Duration = Duration::from_secs(5);

/// The delay before a service whose write failed is planned again; it
/// doubles with each failure in a row, up to [`RETRY_MAX`], plus up to a
/// quarter of jitter so that services failing together spread out.
pub(super) const RETRY_FIRST: Duration = Duration::from_secs(1);

/// The longest delay between two tries of a service whose writes keep
/// failing.
pub(super) const RETRY_MAX: Duration = Duration::from_secs(300);

/// How many services one peer's changes may have planned per second,
/// once its burst is spent: a peer rewriting its endpoints every second
/// makes every member write, so its churn is coalesced (a service changed
/// again while it waits is planned once) instead of passed on at its
/// pace. This cluster's own changes have no budget.
pub(super) const PEER_CHANGES_PER_SECOND: f64 = 200.0;

/// How many services one peer's changes may have planned at once: the
/// default export limit, so a peer's whole first list is taken at once.
pub(super) const PEER_CHANGE_BURST: f64 = 2_000.0;

/// After this many failures in a row, a service's failures are told on its
/// import (an Event), once.
pub(super) const FAILURES_REPORTED: u32 = 5;

/// How often, at most, the heap that cycles freed is handed back to the
/// kernel while they write. The allocator keeps freed heap mapped, so
/// without it the process stays as large as the most it ever held, plus
/// whatever fragments the churn of decoded objects, plans and response
/// buffers leaves (docs/benchmarks-controller.md, "Runs H to J"). Each
/// release walks the whole heap, and once a second made some 330 of them
/// in a cold start (same doc, "How we got here").
pub(super) const MEMORY_RELEASE_INTERVAL: Duration = Duration::from_secs(10);

/// Whose change touched a service: each source gets its turn in a batch,
/// so one peer's thousands of changes never delay another's few (nor this
/// cluster's).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Source {
    /// This cluster's own watches and writes.
    Local,
    /// A peer, by its Secret's name.
    Peer(String),
    /// A change that may affect every service (the gate opening, a peer
    /// connection replaced, a namespace or the IP families changed).
    Every,
}

/// The services waiting to be planned: one queue per source in the order
/// they were touched, each service in at most one queue, and the failed
/// ones apart, due after their delay.
#[derive(Debug, Default)]
struct Queues {
    by_source: BTreeMap<Source, VecDeque<ServiceRef>>,
    queued: HashSet<ServiceRef>,
    /// The source served first by the next batch: the one after the last
    /// served, so turns go round across batches too.
    next_turn: Option<Source>,
    /// Every service is to be planned; the caller passes them.
    all: bool,
    /// Each peer's budget of services taken.
    budgets: HashMap<Source, Budget>,
}

/// A token bucket: how many of a peer's changed services may be taken now.
#[derive(Debug, Clone, Copy)]
struct Budget {
    tokens: f64,
    at: Instant,
}

impl Budget {
    fn full(now: Instant) -> Self {
        Self {
            tokens: PEER_CHANGE_BURST,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * PEER_CHANGES_PER_SECOND).min(PEER_CHANGE_BURST);
        self.at = now;
    }
}

impl Queues {
    fn push(&mut self, source: &Source, service: ServiceRef) {
        if self.queued.insert(service.clone()) {
            self.by_source
                .entry(source.clone())
                .or_default()
                .push_back(service);
        }
    }

    fn is_empty(&self) -> bool {
        !self.all && self.queued.is_empty()
    }

    /// Up to `max` services, one from each source in turn; a peer whose
    /// change budget is spent at `now` waits, its changes coalescing.
    fn take(&mut self, max: usize, now: Instant) -> BTreeSet<ServiceRef> {
        let mut batch = BTreeSet::new();
        let mut sources: Vec<Source> = self.by_source.keys().cloned().collect();
        if let Some(first) = &self.next_turn {
            let at = sources.partition_point(|s| s < first);
            sources.rotate_left(at);
        }
        for source in &sources {
            if let Source::Peer(_) = source {
                self.budgets
                    .entry(source.clone())
                    .or_insert_with(|| Budget::full(now))
                    .refill(now);
            }
        }
        let mut last_served = None;
        loop {
            let mut took = false;
            for source in &sources {
                if batch.len() == max {
                    break;
                }
                let budget = self.budgets.get_mut(source);
                if budget.as_ref().is_some_and(|b| b.tokens < 1.0) {
                    continue;
                }
                let Some(queue) = self.by_source.get_mut(source) else {
                    continue;
                };
                if let Some(service) = queue.pop_front() {
                    self.queued.remove(&service);
                    batch.insert(service);
                    last_served = Some(source.clone());
                    took = true;
                    if let Some(budget) = budget {
                        budget.tokens -= 1.0;
                    }
                }
                if queue.is_empty() {
                    self.by_source.remove(source);
                }
            }
            if !took || batch.len() == max {
                break;
            }
        }
        // A peer gone quiet with a full budget needs no entry.
        self.budgets.retain(|source, budget| {
            self.by_source.contains_key(source) || budget.tokens < PEER_CHANGE_BURST
        });
        // The next batch starts after the last source served.
        self.next_turn = last_served.and_then(|last| {
            self.by_source
                .range((std::ops::Bound::Excluded(last), std::ops::Bound::Unbounded))
                .next()
                .map(|(source, _)| source.clone())
        });
        batch
    }
}

/// A service whose writes failed: how often in a row, and when it is due
/// again.
#[derive(Debug, Clone, Copy)]
struct Failing {
    count: u32,
    due: Instant,
}

/// What the start-up gate waits for: this cluster listed, the peer Secrets
/// listed, and every peer synced, or the start-up timeout passed. Without
/// the Secrets listed the peers are not known at all, so starting would
/// delete everything imported from them: the timeout is for peers that do
/// not answer, not for Secrets not read yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Gate {
    /// This cluster's watches have listed.
    pub local_listed: bool,
    /// The peer Secrets have been listed.
    pub secrets_listed: bool,
    /// Every peer has synced.
    pub peers_synced: bool,
}

/// The controller's schedule.
#[derive(Debug)]
pub(super) struct Schedule {
    created: Instant,
    startup_timeout: Duration,
    started: bool,
    fresh: Queues,
    /// Failed services whose delay has passed: taken after fresh work.
    retry: VecDeque<ServiceRef>,
    failing: HashMap<ServiceRef, Failing>,
    first_change: Option<Instant>,
    published: bool,
    next_publish: Instant,
    last_release: Option<Instant>,
    /// Cycles wrote (and so freed heap) since the last release.
    unreleased: bool,
}

impl Schedule {
    /// Nothing started, nothing dirty, the publication due at once.
    pub(super) fn new(now: Instant, startup_timeout: Duration) -> Self {
        Self {
            created: now,
            startup_timeout,
            started: false,
            fresh: Queues::default(),
            retry: VecDeque::new(),
            failing: HashMap::new(),
            first_change: None,
            published: false,
            next_publish: now,
            last_release: None,
            unreleased: false,
        }
    }

    /// Whether the start-up gate has opened: only then are services planned
    /// and anything deleted.
    pub(super) fn started(&self) -> bool {
        self.started
    }

    /// Opens the gate when `gate` allows it at `now`. Returns `Some(every
    /// peer synced)` when it opens now (then every service is planned), and
    /// `None` when it was open already or stays shut.
    pub(super) fn open_gate(&mut self, gate: Gate, now: Instant) -> Option<bool> {
        if self.started {
            return None;
        }
        let timed_out = now.saturating_duration_since(self.created) >= self.startup_timeout;
        let opens = gate.local_listed && gate.secrets_listed && (gate.peers_synced || timed_out);
        if opens {
            self.started = true;
            self.fresh.all = true;
        }
        opens.then_some(gate.peers_synced)
    }

    /// Why the gate is still shut, for `/ready`; `None` once open.
    pub(super) fn waiting_for(&self, gate: Gate) -> Option<&'static str> {
        if !gate.local_listed {
            Some("the local cluster is not listed yet")
        } else if !gate.secrets_listed {
            Some("the peer Secrets are not listed yet")
        } else if !self.started {
            Some("waiting for peers' first sync")
        } else {
            None
        }
    }

    /// Records that a change from `source` touched `touched` at `now`.
    pub(super) fn mark(&mut self, source: &Source, touched: Touched, now: Instant) {
        if !touched.is_empty() && self.first_change.is_none() {
            self.first_change = Some(now);
        }
        self.fresh.all |= touched.all;
        for service in touched.services {
            self.fresh.push(source, service);
        }
    }

    /// Every service may need planning (a peer connection replaced, a
    /// namespace or the cluster's IP families changed).
    pub(super) fn mark_all(&mut self) {
        self.fresh.all = true;
    }

    /// Whether a cycle has work: started and something dirty.
    pub(super) fn has_work(&self) -> bool {
        self.started && !(self.fresh.is_empty() && self.retry.is_empty())
    }

    /// Whether the next batch is taken from every service: the caller
    /// passes them to [`Self::take_batch`] then.
    pub(super) fn wants_every_service(&self) -> bool {
        self.fresh.all
    }

    /// The services this cycle plans, at most [`SERVICES_PER_CYCLE`]: fresh
    /// changes first, a service of each source in turn (`every` service,
    /// when [`Self::wants_every_service`], is one more source), then the
    /// failed services that are due. The rest waits for the next cycle.
    pub(super) fn take_batch(
        &mut self,
        every: Option<BTreeSet<ServiceRef>>,
        now: Instant,
    ) -> BTreeSet<ServiceRef> {
        if let Some(every) = every.filter(|_| self.fresh.all) {
            for service in every {
                self.fresh.push(&Source::Every, service);
            }
        }
        self.fresh.all = false;
        let mut batch = self.fresh.take(SERVICES_PER_CYCLE, now);
        while batch.len() < SERVICES_PER_CYCLE
            && let Some(service) = self.retry.pop_front()
        {
            batch.insert(service);
        }
        batch
    }

    /// A write of `service` failed at `now`: it is planned again after a
    /// delay that doubles with each failure in a row ([`RETRY_FIRST`] to
    /// [`RETRY_MAX`]). Returns how many times in a row it has failed.
    pub(super) fn write_failed(&mut self, service: ServiceRef, now: Instant) -> u32 {
        let count = self.failing.get(&service).map_or(1, |f| f.count + 1);
        let due = now + retry_delay(&service, count);
        self.failing.insert(service, Failing { count, due });
        count
    }

    /// `service` was planned and none of its writes failed: its next
    /// failure starts the delay over.
    pub(super) fn write_succeeded(&mut self, service: &ServiceRef) {
        self.failing.remove(service);
    }

    /// How many services are failing (waiting out a delay or due).
    #[cfg(test)]
    pub(super) fn failing(&self) -> usize {
        self.failing.len()
    }

    /// Once a second: failed services whose delay has passed are due again.
    pub(super) fn tick(&mut self, now: Instant) {
        let queued = &self.fresh.queued;
        let retry = &mut self.retry;
        for (service, failing) in &mut self.failing {
            // Queued once per delay (a fresh change plans it anyway): the
            // due time moves out of reach until the try's outcome is known,
            // which sets the next one or ends the failure.
            if failing.due <= now && !queued.contains(service) {
                retry.push_back(service.clone());
                failing.due = now + RETRY_MAX;
            }
        }
    }

    /// A cycle ended at `now`, having written something or not. Returns
    /// how long ago the first change it answered happened, once per change
    /// that led to a write (the change-to-write latency).
    pub(super) fn cycle_done(&mut self, wrote: bool, now: Instant) -> Option<Duration> {
        let first = self.first_change.take()?;
        wrote.then(|| now.saturating_duration_since(first))
    }

    /// Whether freed heap is handed back at `now`, when a cycle ended
    /// (`wrote` says whether it wrote) or on a tick (`wrote` false): once
    /// cycles have written since the last release, at most once per
    /// [`MEMORY_RELEASE_INTERVAL`], so the end of a burst of writes is
    /// released by a tick within the interval; an idle controller frees
    /// nothing.
    pub(super) fn release_due(&mut self, wrote: bool, now: Instant) -> bool {
        self.unreleased |= wrote;
        let due = self.unreleased
            && self
                .last_release
                .is_none_or(|last| now.saturating_duration_since(last) >= MEMORY_RELEASE_INTERVAL);
        if due {
            self.last_release = Some(now);
            self.unreleased = false;
        }
        due
    }

    /// Whether the publication should be tried at `now`: not written yet,
    /// this cluster listed (it reads no peer, so it does not wait for the
    /// gate: peers waiting at their own gate for this cluster can read it),
    /// and not within [`PUBLISH_RETRY`] of a failed try.
    pub(super) fn publish_due(&self, local_listed: bool, now: Instant) -> bool {
        !self.published && local_listed && now >= self.next_publish
    }

    /// The publication was tried at `now`; `complete` when it and its
    /// marker are written.
    pub(super) fn publish_tried(&mut self, complete: bool, now: Instant) {
        self.published = complete;
        self.next_publish = now + PUBLISH_RETRY;
    }
}

/// The delay after `service`'s `count`th failure in a row: [`RETRY_FIRST`]
/// doubling, at most [`RETRY_MAX`], plus up to a quarter more from a hash
/// of the service and the count (spread, yet the same on every run).
fn retry_delay(service: &ServiceRef, count: u32) -> Duration {
    let doubled = RETRY_FIRST.saturating_mul(1 << count.saturating_sub(1).min(16));
    let base = doubled.min(RETRY_MAX);
    let quarter = foldhash::fast::FixedState::with_seed(0x5eed).hash_one((service, count)) % 1024;
    (base + base.mul_f64(quarter as f64 / 4096.0)).min(RETRY_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(30);

    fn service(i: usize) -> ServiceRef {
        ServiceRef::new("demo", &format!("s{i:04}"))
    }

    fn touched(services: impl IntoIterator<Item = ServiceRef>) -> Touched {
        Touched {
            services: services.into_iter().collect(),
            all: false,
        }
    }

    const LISTED: Gate = Gate {
        local_listed: true,
        secrets_listed: true,
        peers_synced: true,
    };

    #[test]
    fn the_gate_waits_for_this_cluster_and_the_secrets_and_for_peers_until_the_timeout() {
        let t0 = Instant::now();
        let mut schedule = Schedule::new(t0, TIMEOUT);
        let unsynced = Gate {
            peers_synced: false,
            ..LISTED
        };
        let no_secrets = Gate {
            secrets_listed: false,
            ..LISTED
        };
        let local_unlisted = Gate {
            local_listed: false,
            ..LISTED
        };
        assert_eq!(schedule.open_gate(unsynced, t0), None);
        assert_eq!(
            schedule.waiting_for(unsynced),
            Some("waiting for peers' first sync")
        );
        // Past the timeout, unread Secrets or an unlisted cluster still hold it.
        let late = t0 + TIMEOUT;
        assert_eq!(schedule.open_gate(no_secrets, late), None);
        assert_eq!(schedule.open_gate(local_unlisted, late), None);
        assert_eq!(
            schedule.waiting_for(no_secrets),
            Some("the peer Secrets are not listed yet")
        );
        assert!(!schedule.started() && !schedule.has_work());
        // A peer that never syncs: open at the timeout, saying so.
        assert_eq!(schedule.open_gate(unsynced, late), Some(false));
        assert!(schedule.started() && schedule.has_work());
        assert_eq!(schedule.waiting_for(LISTED), None);
        assert_eq!(schedule.open_gate(LISTED, late), None, "opens once");
        let mut synced = Schedule::new(t0, TIMEOUT);
        assert_eq!(synced.open_gate(LISTED, t0), Some(true));
    }

    #[test]
    fn nothing_is_planned_before_the_gate_and_everything_once_it_opens() {
        let t0 = Instant::now();
        let mut schedule = Schedule::new(t0, TIMEOUT);
        schedule.mark(&Source::Local, touched([service(1)]), t0);
        assert!(!schedule.has_work());
        schedule.open_gate(LISTED, t0);
        assert!(schedule.wants_every_service());
        let every = BTreeSet::from([service(1), service(2)]);
        assert_eq!(schedule.take_batch(Some(every.clone()), t0), every);
        assert!(!schedule.has_work());
    }

    #[test]
    fn a_cycle_takes_a_bounded_batch_and_leaves_the_rest_dirty() {
        let t0 = Instant::now();
        let mut schedule = Schedule::new(t0, TIMEOUT);
        schedule.open_gate(LISTED, t0);
        schedule.take_batch(Some(BTreeSet::new()), t0);
        let total = SERVICES_PER_CYCLE * 2 + 10;
        schedule.mark(&Source::Local, touched((0..total).map(service)), t0);
        let mut seen = BTreeSet::new();
        let mut cycles = 0;
        while schedule.has_work() {
            assert!(!schedule.wants_every_service());
            let batch = schedule.take_batch(None, t0);
            assert!(batch.len() <= SERVICES_PER_CYCLE);
            assert!(batch.is_disjoint(&seen));
            seen.extend(batch);
            cycles += 1;
        }
        assert_eq!((seen.len(), cycles), (total, 3));
    }

    #[test]
    fn a_failed_write_is_planned_again_after_a_delay_that_doubles_to_a_cap() {
        let t0 = Instant::now();
        let mut schedule = Schedule::new(t0, TIMEOUT);
        schedule.open_gate(LISTED, t0);
        schedule.take_batch(Some(BTreeSet::new()), t0);
        let mut now = t0;
        let mut delays = Vec::new();
        for failure in 1..=12 {
            assert_eq!(schedule.write_failed(service(7), now), failure);
            let failed_at = now;
            // Ticks once a second until the service is due again.
            loop {
                now += Duration::from_secs(1);
                schedule.tick(now);
                if schedule.has_work() {
                    break;
                }
                assert!(now - failed_at <= RETRY_MAX, "due within the cap");
            }
            assert_eq!(schedule.take_batch(None, now), BTreeSet::from([service(7)]));
            delays.push((now - failed_at).as_secs());
        }
        assert_eq!(delays[0], 2, "1 s and up to a quarter more, seen at a tick");
        assert!(delays.windows(2).all(|w| w[1] >= w[0]), "{delays:?}");
        assert!((256..=300).contains(delays.last().unwrap()), "{delays:?}");
        // Once its writes succeed, the next failure starts over.
        schedule.write_succeeded(&service(7));
        assert_eq!(schedule.failing(), 0);
        assert_eq!(schedule.write_failed(service(7), now), 1);
    }

    #[test]
    fn a_due_retry_is_queued_once_and_comes_after_fresh_work() {
        let t0 = Instant::now();
        let mut schedule = Schedule::new(t0, TIMEOUT);
        schedule.open_gate(LISTED, t0);
        schedule.take_batch(Some(BTreeSet::new()), t0);
        for i in 0..SERVICES_PER_CYCLE {
            schedule.write_failed(service(10_000 + i), t0);
        }
        let later = t0 + Duration::from_secs(2);
        schedule.tick(later);
        schedule.tick(later + Duration::from_secs(1));
        schedule.mark(&Source::Local, touched([service(1)]), later);
        let batch = schedule.take_batch(None, t0);
        assert!(batch.contains(&service(1)), "fresh work first");
        assert_eq!(batch.len(), SERVICES_PER_CYCLE);
        assert_eq!(
            schedule.take_batch(None, t0).len(),
            1,
            "the retry left over, once"
        );
        assert!(!schedule.has_work());
    }

    #[test]
    fn one_sources_backlog_does_not_delay_another_source() {
        // Issue 44: a peer whose 25,000 exports sort first held another
        // peer's 20 new exports back for 152 s.
        let t0 = Instant::now();
        let mut schedule = Schedule::new(t0, TIMEOUT);
        schedule.open_gate(LISTED, t0);
        schedule.take_batch(Some(BTreeSet::new()), t0);
        let flood = Source::Peer("a-flood".into());
        let honest = Source::Peer("z-honest".into());
        let flooded: Vec<ServiceRef> = (0..25_000)
            .map(|i| ServiceRef::new("aaa", &format!("s{i}")))
            .collect();
        schedule.mark(&flood, touched(flooded), t0);
        schedule.take_batch(None, t0);
        let new: Vec<ServiceRef> = (0..20)
            .map(|i| ServiceRef::new("zzz", &format!("n{i}")))
            .collect();
        schedule.mark(&honest, touched(new.clone()), t0);
        schedule.mark(&Source::Local, touched([ServiceRef::new("zzz", "own")]), t0);
        let batch = schedule.take_batch(None, t0);
        assert!(
            new.iter().all(|s| batch.contains(s)),
            "every honest change in the next batch"
        );
        assert!(batch.contains(&ServiceRef::new("zzz", "own")));
        assert_eq!(batch.len(), SERVICES_PER_CYCLE, "the flood fills the rest");
    }

    #[test]
    fn a_peers_churn_past_its_budget_waits_and_coalesces() {
        let t0 = Instant::now();
        let mut schedule = Schedule::new(t0, TIMEOUT);
        schedule.open_gate(LISTED, t0);
        schedule.take_batch(Some(BTreeSet::new()), t0);
        let churn = Source::Peer("churn".into());
        let services: Vec<ServiceRef> = (0..3_000).map(service).collect();
        // Its first burst is taken whole, batch by batch.
        schedule.mark(&churn, touched(services.clone()), t0);
        let mut taken = 0;
        while schedule.has_work() {
            let batch = schedule.take_batch(None, t0);
            if batch.is_empty() {
                break;
            }
            taken += batch.len();
        }
        assert_eq!(
            taken, PEER_CHANGE_BURST as usize,
            "the burst, then it waits"
        );
        // It rewrites everything every second for 10 s: 200 a second are
        // planned, each waiting service once however often it changed.
        let mut planned = 0;
        for second in 1..=10 {
            let now = t0 + Duration::from_secs(second);
            schedule.mark(&churn, touched(services.clone()), now);
            while let batch = schedule.take_batch(None, now)
                && !batch.is_empty()
            {
                planned += batch.len();
            }
        }
        assert_eq!(planned, 10 * PEER_CHANGES_PER_SECOND as usize);
        // This cluster's own change is not held back meanwhile.
        let now = t0 + Duration::from_secs(10);
        schedule.mark(&Source::Local, touched([ServiceRef::new("own", "x")]), now);
        assert!(
            schedule
                .take_batch(None, now)
                .contains(&ServiceRef::new("own", "x"))
        );
    }

    #[test]
    fn turns_go_round_across_batches_and_a_service_is_queued_once() {
        let t0 = Instant::now();
        let mut schedule = Schedule::new(t0, TIMEOUT);
        schedule.open_gate(LISTED, t0);
        let every: BTreeSet<ServiceRef> = (0..SERVICES_PER_CYCLE * 4).map(service).collect();
        let a = Source::Peer("a".into());
        let b = Source::Peer("b".into());
        let of = |name: &str, n: usize| -> Vec<ServiceRef> {
            (0..n)
                .map(|i| ServiceRef::new(name, &format!("s{i}")))
                .collect()
        };
        schedule.mark(&a, touched(of("a", SERVICES_PER_CYCLE * 2)), t0);
        schedule.mark(&b, touched(of("b", SERVICES_PER_CYCLE * 2)), t0);
        // Touched again by another source: still queued once.
        schedule.mark(&b, touched(of("a", 10)), t0);
        let mut counts = Vec::new();
        let mut seen = BTreeSet::new();
        let mut first = true;
        while schedule.has_work() {
            let batch = schedule.take_batch(first.then(|| every.clone()), t0);
            first = false;
            assert!(batch.is_disjoint(&seen), "nothing planned twice");
            let count = |ns: &str| batch.iter().filter(|s| &*s.namespace == ns).count();
            counts.push((count("a"), count("b"), count("demo")));
            seen.extend(batch);
        }
        assert_eq!(seen.len(), SERVICES_PER_CYCLE * 8);
        // Each batch shares its places among the sources that have work.
        for (a, b, every) in &counts[..4] {
            assert!(a.abs_diff(*b) <= 1 && a.abs_diff(*every) <= 1, "{counts:?}");
        }
    }

    #[test]
    fn the_change_to_write_latency_counts_from_the_first_change_of_a_cycle_that_wrote() {
        let t0 = Instant::now();
        let mut schedule = Schedule::new(t0, TIMEOUT);
        schedule.mark(&Source::Local, touched([service(1)]), t0);
        schedule.mark(
            &Source::Local,
            touched([service(2)]),
            t0 + Duration::from_secs(1),
        );
        assert_eq!(
            schedule.cycle_done(true, t0 + Duration::from_secs(3)),
            Some(Duration::from_secs(3))
        );
        assert_eq!(schedule.cycle_done(true, t0 + Duration::from_secs(4)), None);
        schedule.mark(
            &Source::Local,
            touched([service(3)]),
            t0 + Duration::from_secs(5),
        );
        assert_eq!(
            schedule.cycle_done(false, t0 + Duration::from_secs(6)),
            None
        );
        schedule.mark(
            &Source::Local,
            Touched::default(),
            t0 + Duration::from_secs(7),
        );
        assert_eq!(schedule.cycle_done(true, t0 + Duration::from_secs(8)), None);
    }

    #[test]
    fn the_publication_waits_for_this_cluster_and_is_retried_after_a_failure() {
        let t0 = Instant::now();
        let mut schedule = Schedule::new(t0, TIMEOUT);
        assert!(!schedule.publish_due(false, t0));
        assert!(schedule.publish_due(true, t0), "before the gate opens");
        schedule.publish_tried(false, t0);
        assert!(!schedule.publish_due(true, t0 + PUBLISH_RETRY / 2));
        assert!(schedule.publish_due(true, t0 + PUBLISH_RETRY));
        schedule.publish_tried(true, t0 + PUBLISH_RETRY);
        assert!(!schedule.publish_due(true, t0 + PUBLISH_RETRY * 10));
    }

    #[test]
    fn freed_heap_is_released_after_writing_cycles_at_most_once_an_interval() {
        let start = Instant::now();
        let mut schedule = Schedule::new(start, TIMEOUT);
        assert!(!schedule.release_due(false, start), "nothing written");
        assert!(schedule.release_due(true, start));
        let soon = start + MEMORY_RELEASE_INTERVAL / 2;
        assert!(!schedule.release_due(true, soon), "within the interval");
        let later = start + MEMORY_RELEASE_INTERVAL;
        assert!(
            schedule.release_due(false, later),
            "the tick after a burst releases what its last cycles freed"
        );
        let much_later = later + MEMORY_RELEASE_INTERVAL * 3;
        assert!(
            !schedule.release_due(false, much_later),
            "nothing written since"
        );
        assert!(schedule.release_due(true, much_later));
    }
}
