//! Logging: a `tracing` subscriber with the configured filter and format.
//! Text lines are coloured only when stderr is a terminal and `NO_COLOR` is
//! unset (<https://no-color.org>); `json` writes one object per line.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber, writing to stderr; `filter` uses
/// `RUST_LOG` syntax.
pub fn init(filter: &str, format: LogFormat) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|error| {
        eprintln!(
            "invalid log filter {filter:?} ({error}); using {}",
            crate::config::DEFAULT_LOG_FILTER
        );
        EnvFilter::new(crate::config::DEFAULT_LOG_FILTER)
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(use_colour(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR").as_deref(),
            ))
            .try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
}

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

/// Colour only on a terminal, and not when `NO_COLOR` is set to anything
/// but the empty string.
fn use_colour(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
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

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(use_colour(true, None));
        assert!(use_colour(true, Some("".as_ref())));
        assert!(!use_colour(true, Some("1".as_ref())));
        assert!(!use_colour(false, None));
    }
}
