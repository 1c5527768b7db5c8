//! When the controller plans and writes, decided in one pure type beside
//! [`super::peers::Peers`]: the start-up gate, the services left to plan
//! and the bounded batch a cycle takes of them, failed writes retried on
//! the next tick, the change-to-write latency, and when the publication
//! for peers is tried (again). The shell (`run.rs`, `run/`) feeds it what
//! happened and asks it what to do; the tests drive it with synthetic time.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::cluster::Touched;
use crate::model::ServiceRef;

/// How many services one cycle plans and writes: events are read between
/// cycles, so fresh changes and `/ready` do not wait behind a cold start's
/// thousands of writes.
pub const SERVICES_PER_CYCLE: usize = 256;

/// How many plan-and-write rounds a cycle runs for the services that
/// wrote: a new ClusterSetIP service needs three (the import; then what it
/// owns, which needs the import's uid; then the VIP into the import), so it
/// is finished within its cycle rather than queued behind the rest.
pub const ROUNDS_PER_CYCLE: usize = 3;

/// How long after a failed try the publication is tried again.
pub const PUBLISH_RETRY: Duration = Duration::from_secs(5);

/// How often, at most, the heap that cycles freed is handed back to the
/// kernel while they write. The allocator keeps freed heap mapped, so
/// without it the process stays as large as the most it ever held, plus
/// whatever fragments the churn of decoded objects, plans and response
/// buffers leaves (docs/benchmarks-controller.md, "Runs H to J"). Each
/// release walks the whole heap, and once a second made some 330 of them
/// in a cold start ("Runs N, H2, O and P").
pub const MEMORY_RELEASE_INTERVAL: Duration = Duration::from_secs(10);

/// What the start-up gate waits for: this cluster listed, the peer Secrets
/// listed, and every peer synced, or the start-up timeout passed. Without
/// the Secrets listed the peers are not known at all, so starting would
/// delete everything imported from them: the timeout is for peers that do
/// not answer, not for Secrets not read yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    /// This cluster's watches have listed.
    pub local_listed: bool,
    /// The peer Secrets have been listed.
    pub secrets_listed: bool,
    /// Every peer has synced.
    pub peers_synced: bool,
}

/// The controller's schedule.
#[derive(Debug)]
pub struct Schedule {
    created: Instant,
    startup_timeout: Duration,
    started: bool,
    dirty: Touched,
    first_change: Option<Instant>,
    retry: BTreeSet<ServiceRef>,
    published: bool,
    next_publish: Instant,
    last_release: Option<Instant>,
    /// Cycles wrote (and so freed heap) since the last release.
    unreleased: bool,
}

impl Schedule {
    /// Nothing started, nothing dirty, the publication due at once.
    pub fn new(now: Instant, startup_timeout: Duration) -> Self {
        Self {
            created: now,
            startup_timeout,
            started: false,
            dirty: Touched::default(),
            first_change: None,
            retry: BTreeSet::new(),
            published: false,
            next_publish: now,
            last_release: None,
            unreleased: false,
        }
    }

    /// Whether the start-up gate has opened: only then are services planned
    /// and anything deleted.
    pub fn started(&self) -> bool {
        self.started
    }

    /// Opens the gate when `gate` allows it at `now`. Returns `Some(every
    /// peer synced)` when it opens now (then every service is planned), and
    /// `None` when it was open already or stays shut.
    pub fn open_gate(&mut self, gate: Gate, now: Instant) -> Option<bool> {
        if self.started {
            return None;
        }
        let timed_out = now.saturating_duration_since(self.created) >= self.startup_timeout;
        let opens = gate.local_listed && gate.secrets_listed && (gate.peers_synced || timed_out);
        if opens {
            self.started = true;
            self.dirty.all = true;
        }
        opens.then_some(gate.peers_synced)
    }

    /// Why the gate is still shut, for `/ready`; `None` once open.
    pub fn waiting_for(&self, gate: Gate) -> Option<&'static str> {
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

    /// Records that `touched` changed at `now`.
    pub fn mark(&mut self, touched: Touched, now: Instant) {
        if !touched.is_empty() && self.first_change.is_none() {
            self.first_change = Some(now);
        }
        self.dirty.merge(touched);
    }

    /// Every service may need planning (a peer connection replaced, a
    /// namespace or the cluster's IP families changed).
    pub fn mark_all(&mut self) {
        self.dirty.all = true;
    }

    /// Whether a cycle has work: started and something dirty.
    pub fn has_work(&self) -> bool {
        self.started && !self.dirty.is_empty()
    }

    /// Whether the next batch is taken from every service: the caller
    /// passes them to [`Self::take_batch`] then.
    pub fn wants_every_service(&self) -> bool {
        self.dirty.all
    }

    /// The services this cycle plans, at most [`SERVICES_PER_CYCLE`]: of
    /// `every` service when [`Self::wants_every_service`], else of those
    /// marked. The rest stays dirty for the next cycle.
    pub fn take_batch(&mut self, every: Option<BTreeSet<ServiceRef>>) -> BTreeSet<ServiceRef> {
        let touched = std::mem::take(&mut self.dirty);
        let mut batch = match every {
            Some(every) if touched.all => every,
            _ => touched.services,
        };
        if let Some(first_left) = batch.iter().nth(SERVICES_PER_CYCLE).cloned() {
            self.dirty.services.extend(batch.split_off(&first_left));
        }
        batch
    }

    /// A write of `service` failed: it is planned again on the next tick.
    pub fn write_failed(&mut self, service: ServiceRef) {
        self.retry.insert(service);
    }

    /// Once a second: failed writes are due again.
    pub fn tick(&mut self) {
        self.dirty.services.append(&mut self.retry);
    }

    /// A cycle ended at `now`, having written something or not. Returns
    /// how long ago the first change it answered happened, once per change
    /// that led to a write (the change-to-write latency).
    pub fn cycle_done(&mut self, wrote: bool, now: Instant) -> Option<Duration> {
        let first = self.first_change.take()?;
        wrote.then(|| now.saturating_duration_since(first))
    }

    /// Whether freed heap is handed back at `now`, when a cycle ended
    /// (`wrote` says whether it wrote) or on a tick (`wrote` false): once
    /// cycles have written since the last release, at most once per
    /// [`MEMORY_RELEASE_INTERVAL`], so the end of a burst of writes is
    /// released by a tick within the interval; an idle controller frees
    /// nothing.
    pub fn release_due(&mut self, wrote: bool, now: Instant) -> bool {
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
    pub fn publish_due(&self, local_listed: bool, now: Instant) -> bool {
        !self.published && local_listed && now >= self.next_publish
    }

    /// The publication was tried at `now`; `complete` when it and its
    /// marker are written.
    pub fn publish_tried(&mut self, complete: bool, now: Instant) {
        self.published = complete;
        self.next_publish = now + PUBLISH_RETRY;
    }
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
        schedule.mark(touched([service(1)]), t0);
        assert!(!schedule.has_work());
        schedule.open_gate(LISTED, t0);
        assert!(schedule.wants_every_service());
        let every = BTreeSet::from([service(1), service(2)]);
        assert_eq!(schedule.take_batch(Some(every.clone())), every);
        assert!(!schedule.has_work());
    }

    #[test]
    fn a_cycle_takes_a_bounded_batch_and_leaves_the_rest_dirty() {
        let t0 = Instant::now();
        let mut schedule = Schedule::new(t0, TIMEOUT);
        schedule.open_gate(LISTED, t0);
        schedule.take_batch(Some(BTreeSet::new()));
        let total = SERVICES_PER_CYCLE * 2 + 10;
        schedule.mark(touched((0..total).map(service)), t0);
        let mut seen = BTreeSet::new();
        let mut cycles = 0;
        while schedule.has_work() {
            assert!(!schedule.wants_every_service());
            let batch = schedule.take_batch(None);
            assert!(batch.len() <= SERVICES_PER_CYCLE);
            assert!(batch.is_disjoint(&seen));
            seen.extend(batch);
            cycles += 1;
        }
        assert_eq!((seen.len(), cycles), (total, 3));
    }

    #[test]
    fn a_failed_write_is_planned_again_on_the_next_tick() {
        let t0 = Instant::now();
        let mut schedule = Schedule::new(t0, TIMEOUT);
        schedule.open_gate(LISTED, t0);
        schedule.take_batch(Some(BTreeSet::new()));
        schedule.write_failed(service(7));
        assert!(!schedule.has_work(), "not before the tick");
        schedule.tick();
        assert_eq!(
            schedule.take_batch(Some(BTreeSet::new())),
            BTreeSet::from([service(7)])
        );
        schedule.tick();
        assert!(!schedule.has_work(), "retried once per failure");
    }

    #[test]
    fn the_change_to_write_latency_counts_from_the_first_change_of_a_cycle_that_wrote() {
        let t0 = Instant::now();
        let mut schedule = Schedule::new(t0, TIMEOUT);
        schedule.mark(touched([service(1)]), t0);
        schedule.mark(touched([service(2)]), t0 + Duration::from_secs(1));
        assert_eq!(
            schedule.cycle_done(true, t0 + Duration::from_secs(3)),
            Some(Duration::from_secs(3))
        );
        assert_eq!(schedule.cycle_done(true, t0 + Duration::from_secs(4)), None);
        schedule.mark(touched([service(3)]), t0 + Duration::from_secs(5));
        assert_eq!(
            schedule.cycle_done(false, t0 + Duration::from_secs(6)),
            None
        );
        schedule.mark(Touched::default(), t0 + Duration::from_secs(7));
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
