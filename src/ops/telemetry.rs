//! Logging: a `tracing` subscriber with the configured filter and format.
//! Text lines are coloured only when stderr is a terminal and `NO_COLOR` is
//! unset (<https://no-color.org>); `json` writes one object per line.

use std::io::IsTerminal;

use serde::{Deserialize, Serialize};
use tracing_subscriber::EnvFilter;

/// Default log filter: our own lifecycle at info, libraries quiet. kube's
/// per-request failure line ("failed with error client error (Connect)")
/// is off: the source logs each failure itself, with its cause and the
/// apiserver's URL. hickory-proto warns about odd records in a message it
/// decodes (broken EDNS options, which the DNS server answers FORMERR
/// before hickory sees them), once per message and without a
/// limit: errors only, since anyone can send those messages (our own lines
/// about network input are counted and rate-limited).
pub const DEFAULT_LOG_FILTER: &str = "clusterset_dns=info,hickory_server=warn,hickory_proto=error,kube=warn,kube_client::client::builder=off,warn";

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber, writing to stderr; `filter` uses
/// `RUST_LOG` syntax.
pub fn init(filter: &str, format: LogFormat) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|error| {
        eprintln!(
            "invalid log filter {filter:?} ({error}); using {}",
            DEFAULT_LOG_FILTER
        );
        EnvFilter::new(DEFAULT_LOG_FILTER)
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

/// Colour only on a terminal, and not when `NO_COLOR` is set to anything
/// but the empty string.
fn use_colour(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(use_colour(true, None));
        assert!(use_colour(true, Some("".as_ref())));
        assert!(!use_colour(true, Some("1".as_ref())));
        assert!(!use_colour(false, None));
    }
}
