//! The `clusterset-dns controller` command line.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

use crate::cluster_args::{KubeconfigArgs, NamespaceArgs, PeerSelectorArgs};
use crate::ops::duration;
use crate::ops::telemetry::{DEFAULT_LOG_FILTER, LogFormat};

/// Options of `clusterset-dns controller`.
///
/// The flags other subcommands have too are spelled, defaulted and read
/// from the environment as they are there: `--kubeconfig`, `--namespace`
/// and `--peer-selector` ([`crate::cluster_args`]), `--admin-listen`,
/// `--log`, `--log-format`, durations with units, `CLUSTERSET_DNS_<FLAG>`;
/// only the identity comes from a Kubernetes downward-API variable alone.
#[derive(Args, Debug, Clone)]
pub struct ControllerArgs {
    /// The cluster.
    #[command(flatten)]
    pub cluster: KubeconfigArgs,
    /// The controller's namespace.
    #[command(flatten)]
    pub namespace: NamespaceArgs,
    /// Which Secrets are peers.
    #[command(flatten)]
    pub peers: PeerSelectorArgs,
    /// How long an unreachable peer's services stay imported (`500ms`,
    /// `30s`, `5m`, `1h`; a plain number is seconds).
    #[arg(long, env = "CLUSTERSET_DNS_PEER_GRACE_PERIOD", default_value = "5m", value_parser = duration::parse)]
    pub peer_grace_period: Duration,
    /// How often each peer's cluster id and publication marker are read
    /// again (a duration, as for --peer-grace-period): a peer answering
    /// with another id is refused within this.
    #[arg(long, env = "CLUSTERSET_DNS_PEER_REREAD_INTERVAL", default_value = "10s", value_parser = duration::parse)]
    pub peer_reread_interval: Duration,
    /// How long to wait at start-up for every peer's first sync before
    /// reconciling without the peers that have not answered (a duration,
    /// as for --peer-grace-period).
    #[arg(long, env = "CLUSTERSET_DNS_STARTUP_SYNC_TIMEOUT", default_value = "30s", value_parser = duration::parse)]
    pub startup_sync_timeout: Duration,
    /// Namespaces never imported into or exported from: names, or
    /// prefixes ending in `*`, comma-separated. The controller's own
    /// namespace (`--namespace`) is always denied besides.
    #[arg(
        long,
        env = "CLUSTERSET_DNS_DENY_NAMESPACES",
        default_value = "kube-*",
        value_delimiter = ','
    )]
    pub deny_namespaces: Vec<String>,
    /// Opt-in mode: import only into namespaces whose labels match this
    /// label selector (`clusterset.example/import=true`, `team in (a,b)`).
    /// Unset, every namespace not denied is imported into.
    #[arg(long, env = "CLUSTERSET_DNS_IMPORT_NAMESPACE_SELECTOR")]
    pub import_namespace_selector: Option<crate::label_selector::LabelSelector>,
    /// The most ServiceExports read from one peer; beyond it a peer's
    /// objects are refused and counted
    /// (`peer_objects_rejected_total{reason="peer-limit"}`).
    #[arg(long, env = "CLUSTERSET_DNS_PEER_MAX_EXPORTS", default_value_t = 2_000)]
    pub peer_max_exports: usize,
    /// The most Services read from one peer (all its Services but the
    /// derived ones, exported or not).
    #[arg(
        long,
        env = "CLUSTERSET_DNS_PEER_MAX_SERVICES",
        default_value_t = 2_000
    )]
    pub peer_max_services: usize,
    /// The percentage of this cluster's Service CIDR (its primary family)
    /// that one peer alone may fill with clusterset IPs: imports only that
    /// peer exports count against it, and past it further ones are refused
    /// (`peer_objects_rejected_total{reason="ClusterSetIPShareExceeded"}`).
    #[arg(
        long,
        env = "CLUSTERSET_DNS_PEER_CLUSTERSET_IP_SHARE",
        default_value_t = 25,
        value_parser = clap::value_parser!(u8).range(1..=100)
    )]
    pub peer_clusterset_ip_share: u8,
    /// The most mirrored EndpointSlices read from one peer.
    #[arg(long, env = "CLUSTERSET_DNS_PEER_MAX_SLICES", default_value_t = 10_000)]
    pub peer_max_slices: usize,
    /// The most endpoint addresses, over all its slices, read from one
    /// peer. The defaults hold one peer at its limits to about 90 MiB of
    /// this controller's memory (docs/controller.md, "Limits and budgets").
    #[arg(
        long,
        env = "CLUSTERSET_DNS_PEER_MAX_ENDPOINTS",
        default_value_t = 100_000
    )]
    pub peer_max_endpoints: usize,
    /// HTTP address for /metrics, /ready, /live and
    /// `/explain?service=<ns>/<name>`.
    // `--admin-addr`: the old spelling, accepted (hidden) in 0.1.x only.
    #[arg(
        long,
        alias = "admin-addr",
        env = "CLUSTERSET_DNS_ADMIN_LISTEN",
        default_value = "0.0.0.0:9155"
    )]
    pub admin_listen: SocketAddr,
    /// Elect one active replica with a Lease (turn off only when a single
    /// replica runs).
    #[arg(
        long,
        env = "CLUSTERSET_DNS_LEADER_ELECTION",
        default_value = "true",
        action = clap::ArgAction::Set
    )]
    pub leader_election: bool,
    /// Name of the leader Lease.
    #[arg(
        long,
        env = "CLUSTERSET_DNS_LEASE_NAME",
        default_value = "clusterset-dns-controller"
    )]
    pub lease_name: String,
    /// This replica's identity in the leader Lease (the pod name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// tracing filter, e.g. `clusterset_dns=debug`.
    #[arg(long, env = "CLUSTERSET_DNS_LOG")]
    pub log: Option<String>,
    /// Log line format: `text` (coloured only on a terminal and without
    /// `NO_COLOR`) or `json` (one object per line, for log collectors).
    #[arg(
        long,
        env = "CLUSTERSET_DNS_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
}

/// The environment variable the controller used to read its log filter
/// from; still read in 0.1.x (not in 0.2.0) when neither `--log` nor
/// `CLUSTERSET_DNS_LOG` is set.
pub const DEPRECATED_LOG_ENV: &str = "RUST_LOG";

impl ControllerArgs {
    /// The log filter: `--log` (or `CLUSTERSET_DNS_LOG`), else
    /// [`DEPRECATED_LOG_ENV`], else `serve`'s default, [`DEFAULT_LOG_FILTER`].
    /// The flag is true when the deprecated variable was used, so that the
    /// caller can warn once logging is set up.
    pub fn log_filter(&self) -> (String, bool) {
        match (&self.log, std::env::var(DEPRECATED_LOG_ENV)) {
            (Some(filter), _) => (filter.clone(), false),
            (None, Ok(filter)) => (filter, true),
            (None, Err(_)) => (DEFAULT_LOG_FILTER.to_string(), false),
        }
    }

    /// Shows the log filter's default in `--help`, as `serve --help` does
    /// (the option itself has none, so that [`DEPRECATED_LOG_ENV`] can fill in).
    pub fn help(command: clap::Command) -> clap::Command {
        command.mut_arg("log", |arg| {
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            arg.help(format!("{help} [default: {DEFAULT_LOG_FILTER}]"))
        })
    }
}
