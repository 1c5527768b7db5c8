//! Rate limiting of log lines that the network causes: anyone can send a
//! malformed query or open a connection at any rate, and each such event
//! must not cost a line of log.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a log line caused by network input may be written, per reason.
pub const NETWORK_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// Lets one log line through per interval and counts the ones it holds
/// back, so that input from the network (which anyone can send at any
/// rate) cannot flood the log.
#[derive(Debug)]
pub struct LogLimiter {
    interval: Duration,
    /// When a line was last let through, and the lines held back since.
    state: Mutex<(Option<Instant>, u64)>,
}

impl LogLimiter {
    /// One line per `interval`.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            state: Mutex::new((None, 0)),
        }
    }

    /// Whether to write the line for an event now: `Some(suppressed)`, the
    /// number of lines held back since the last one written, or `None` to
    /// stay silent.
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(Instant::now())
    }

    fn allow_at(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (last, suppressed) = &mut *state;
        if last.is_some_and(|t| now.saturating_duration_since(t) < self.interval) {
            *suppressed += 1;
            return None;
        }
        *last = Some(now);
        Some(std::mem::take(suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limiter_lets_one_line_through_per_interval_and_counts_the_rest() {
        let limiter = LogLimiter::new(Duration::from_secs(1));
        let start = Instant::now();
        assert_eq!(limiter.allow_at(start), Some(0));
        for i in 1..=5 {
            assert_eq!(
                limiter.allow_at(start + Duration::from_millis(i * 100)),
                None
            );
        }
        assert_eq!(limiter.allow_at(start + Duration::from_secs(1)), Some(5));
        assert_eq!(limiter.allow_at(start + Duration::from_secs(3)), Some(0));
    }
}
