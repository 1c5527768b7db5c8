//! Logging: a `tracing` subscriber with the configured filter.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; `filter` uses `RUST_LOG` syntax.
pub fn init(filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|error| {
        eprintln!(
            "invalid log filter {filter:?} ({error}); using {}",
            crate::config::DEFAULT_LOG_FILTER
        );
        EnvFilter::new(crate::config::DEFAULT_LOG_FILTER)
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .try_init();
}
