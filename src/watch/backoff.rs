//! Backoff policies, built on kube-runtime's [`ExponentialBackoff`] (the
//! `backon` crate underneath, as in [`watcher::DefaultBackoff`]).
//!
//! [`watcher::DefaultBackoff`]: kube::runtime::watcher::DefaultBackoff

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use backon::ExponentialBuilder;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::ExponentialBackoff;

/// Retry delays for a failing watch stream (pass to
/// [`WatchStreamExt::backoff`](kube::runtime::WatchStreamExt::backoff)):
/// 100 ms doubling to 2.5 s, each delay stretched by a random 0–100 %, so
/// retries come between 100 ms and 5 s apart and a DaemonSet's replicas do
/// not reconnect in step. The stream resets it with its first successful
/// event. kube's default goes up to 60 s; a DNS server should catch up
/// within seconds of the apiserver's return.
pub fn watch_backoff() -> impl Backoff {
    ExponentialBackoff::from(
        ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_millis(2500))
            .with_factor(2.0)
            .with_jitter()
            .without_max_times(),
    )
}

/// Retry delays for the watch of an optional resource, which may fail for
/// as long as a CRD is not installed or a role does not grant it (the DNS
/// server's ClusterProperty watch): 100 ms doubling to 60 s, each delay
/// stretched by a random 0–100 %. A DaemonSet's replicas on an old role
/// then cost the apiserver one refused list a minute or two each rather
/// than one every few seconds; the fixed role is noticed within two
/// minutes.
pub fn optional_watch_backoff() -> impl Backoff {
    ExponentialBackoff::from(
        ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(60))
            .with_factor(2.0)
            .with_jitter()
            .without_max_times(),
    )
}

/// Retry delays for a member's watches of its hub: 1 s doubling to 15 s,
/// each stretched by a random 0–100 %. A hub back from an outage is relisted
/// by its members spread over up to 30 s rather than all at once (what it
/// held is frozen at every member meanwhile, so waiting drops nothing).
pub fn hub_watch_backoff() -> impl Backoff {
    ExponentialBackoff::from(
        ExponentialBuilder::default()
            .with_min_delay(Duration::from_secs(1))
            .with_max_delay(Duration::from_secs(15))
            .with_factor(2.0)
            .with_jitter()
            .without_max_times(),
    )
}

/// A backoff that starts over after the apiserver answered that the
/// watch's resource version has expired (410 Gone). That answer means the
/// apiserver is back and the next step is a relist, which need not wait a
/// second full delay: after a hub restart the reconnection is spread by
/// the jitter already, and without the reset a member waited up to twice
/// the longest delay (the failed reconnection's, then the relist's).
pub struct ResetOnExpired<B> {
    inner: B,
    expired: Arc<AtomicBool>,
}

/// Tells a [`ResetOnExpired`] which errors its stream saw.
#[derive(Clone)]
pub struct ExpiredObserver(Arc<AtomicBool>);

impl<B: Backoff> ResetOnExpired<B> {
    /// Wraps `inner`.
    pub fn new(inner: B) -> Self {
        Self {
            inner,
            expired: Arc::new(AtomicBool::new(false)),
        }
    }

    /// What the stream calls with each error before the backoff is asked
    /// for its delay.
    pub fn observer(&self) -> ExpiredObserver {
        ExpiredObserver(self.expired.clone())
    }
}

impl ExpiredObserver {
    /// Notes `error` if it is the apiserver's 410 Gone.
    pub fn saw(&self, error: &kube::runtime::watcher::Error) {
        if is_expired(error) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

/// Whether the apiserver answered that the watch's resource version is
/// too old (410 Gone), in a watch event or as the watch request's answer.
pub fn is_expired(error: &kube::runtime::watcher::Error) -> bool {
    use kube::runtime::watcher::Error;
    match error {
        Error::WatchError(status) => status.code == 410,
        Error::WatchStartFailed(kube::Error::Api(status))
        | Error::InitialListFailed(kube::Error::Api(status))
        | Error::WatchFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

impl<B: Backoff> Iterator for ResetOnExpired<B> {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if self.expired.swap(false, Ordering::Relaxed) {
            self.inner.reset();
        }
        self.inner.next()
    }
}

impl<B: Backoff> Backoff for ResetOnExpired<B> {
    fn reset(&mut self) {
        self.inner.reset()
    }
}

/// Spacing of whole restarts (every watch relisted at once after an
/// outage): at least 1 s after the previous one, doubling to 60 s while
/// restarts keep being needed, back to 1 s after 5 minutes without one.
pub struct RestartSchedule {
    backoff: ExponentialBackoff,
    last: Option<Instant>,
    next: Option<Instant>,
}

impl std::fmt::Debug for RestartSchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestartSchedule")
            .field("last", &self.last)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl RestartSchedule {
    const FIRST: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(60);
    const QUIET: Duration = Duration::from_secs(300);

    /// Whether a restart may happen at `now`.
    pub fn due(&self, now: Instant) -> bool {
        self.next.is_none_or(|next| now >= next)
    }

    /// A restart happened at `now`.
    pub fn record(&mut self, now: Instant) {
        if self.last.is_some_and(|last| now >= last + Self::QUIET) {
            self.backoff.reset();
        }
        let delay = self.backoff.next().unwrap_or(Self::MAX);
        self.last = Some(now);
        self.next = Some(now + delay);
    }
}

impl Default for RestartSchedule {
    fn default() -> Self {
        Self {
            backoff: ExponentialBackoff::from(
                ExponentialBuilder::default()
                    .with_min_delay(Self::FIRST)
                    .with_max_delay(Self::MAX)
                    .with_factor(2.0)
                    .without_max_times(),
            ),
            last: None,
            next: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_retries_double_from_100_ms_to_at_most_5_s_and_reset() {
        let mut backoff = watch_backoff();
        let delays: Vec<Duration> = (&mut backoff).take(10).collect();
        let ms = |d: &Duration| d.as_millis();
        assert!((100..200).contains(&ms(&delays[0])), "{delays:?}");
        assert!((200..400).contains(&ms(&delays[1])), "{delays:?}");
        assert!(
            delays.iter().all(|d| *d < Duration::from_secs(5)),
            "{delays:?}"
        );
        assert!(delays[9] >= Duration::from_millis(2500), "{delays:?}");
        backoff.reset();
        assert!(backoff.next().unwrap() < Duration::from_millis(200));
    }

    fn status(code: u16) -> Box<kube::core::Status> {
        let mut status = kube::core::Status::failure("expired", "Expired");
        status.code = code;
        Box::new(status)
    }

    #[test]
    fn a_hub_watch_starts_over_after_410_and_only_then() {
        use kube::runtime::watcher::Error;
        let mut backoff = ResetOnExpired::new(hub_watch_backoff());
        let seen = backoff.observer();
        // An outage: refused connections walk the delays up to 15-30 s.
        let outage: Vec<Duration> = (&mut backoff).take(6).collect();
        assert!(outage[5] >= Duration::from_secs(15), "{outage:?}");
        // Another answer (429) keeps the long delay.
        seen.saw(&Error::WatchError(status(429)));
        assert!(backoff.next().unwrap() >= Duration::from_secs(15));
        // 410: the hub is back and a relist is due; 1-2 s, not a second 15-30 s.
        seen.saw(&Error::WatchError(status(410)));
        assert!(backoff.next().unwrap() < Duration::from_secs(2));
        seen.saw(&Error::WatchStartFailed(kube::Error::Api(status(410))));
        let delays: Vec<Duration> = (&mut backoff).take(2).collect();
        assert!(delays[0] < Duration::from_secs(2), "{delays:?}");
        assert!(delays[1] >= Duration::from_secs(2), "{delays:?}");
    }

    #[test]
    fn restarts_back_off_to_a_minute_and_reset_after_five_quiet_minutes() {
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let mut restarts = RestartSchedule::default();
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
}
