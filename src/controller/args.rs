//! The `clusterset-dns controller` command line.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

use crate::config::LogFormat;

/// Options of `clusterset-dns controller`. Kubernetes credentials come from
/// `KUBECONFIG` or the in-cluster service account.
#[derive(Args, Debug, Clone)]
pub struct ControllerArgs {
    /// Namespace of the peer Secrets and of the controller's Leases.
    #[arg(long, env = "POD_NAMESPACE", default_value = "clusterset-dns")]
    pub namespace: String,
    /// Label selector of the Secrets that name peers (each holds a
    /// kubeconfig under `data.kubeconfig`).
    #[arg(long, default_value = "clusterset-dns.io/peer=true")]
    pub peer_selector: String,
    /// How long an unreachable peer's services stay imported (`300s`, `5m`).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub peer_grace_period: Duration,
    /// How long to wait at start-up for every peer's first sync before
    /// reconciling without the peers that have not answered.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub startup_sync_timeout: Duration,
    /// Namespaces never imported into or exported from: names, or
    /// prefixes ending in `*`, comma-separated.
    #[arg(long, default_value = "kube-*", value_delimiter = ',')]
    pub deny_namespaces: Vec<String>,
    /// The most ServiceExports read from one peer; beyond it a peer's
    /// objects are refused and counted
    /// (`peer_objects_rejected_total{reason="peer-limit"}`).
    #[arg(long, default_value_t = 20_000)]
    pub peer_max_exports: usize,
    /// The most Services read from one peer (all its Services but the
    /// derived ones, exported or not).
    #[arg(long, default_value_t = 100_000)]
    pub peer_max_services: usize,
    /// The most mirrored EndpointSlices read from one peer.
    #[arg(long, default_value_t = 50_000)]
    pub peer_max_slices: usize,
    /// The most endpoints, over all its slices, read from one peer.
    #[arg(long, default_value_t = 500_000)]
    pub peer_max_endpoints: usize,
    /// Address of the admin endpoint (`/metrics`, `/ready`, `/live`,
    /// `/explain?service=<ns>/<name>`).
    #[arg(long, default_value = "0.0.0.0:9155")]
    pub admin_addr: SocketAddr,
    /// Elect one active replica with a Lease (turn off only when a single
    /// replica runs).
    #[arg(long, default_value = "true", action = clap::ArgAction::Set)]
    pub leader_election: bool,
    /// Name of the leader Lease.
    #[arg(long, default_value = "clusterset-dns-controller")]
    pub lease_name: String,
    /// This replica's identity in the leader Lease (the pod name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Log filter (tracing EnvFilter syntax).
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    pub log: String,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

/// Parses `500ms`, `30s`, `5m`, `1h`, or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let value: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 30s, 5m or 1h"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(value)),
        "s" => Ok(Duration::from_secs(value)),
        "m" => Ok(Duration::from_secs(value * 60)),
        "h" => Ok(Duration::from_secs(value * 3600)),
        _ => Err(format!("{text:?}: unknown unit {unit:?} (ms, s, m, h)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("300"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("300s"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("5 minutes").is_err());
        assert!(parse_duration("m").is_err());
    }
}
