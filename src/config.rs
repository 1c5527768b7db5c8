//! Configuration: command line, environment (`CLUSTERSET_DNS_*`) and a TOML
//! file, in that order of precedence, over built-in defaults. Every option is
//! defined once, in [`ServeArgs`], and has all three forms;
//! `config/clusterset-dns.toml` documents each key.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use hickory_proto::rr::Name;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::dns::DnsServerConfig;
use crate::dns::rrl::{MAX_SLIP, MAX_TABLE_SIZE, RrlConfig};
use crate::ops::duration::HumanDuration;
use crate::ops::telemetry::{DEFAULT_LOG_FILTER, LogFormat};
use crate::source::kubernetes::ImportApi;
use crate::zone::ZoneSettings;

/// How long DNS keeps answering after SIGTERM (CoreDNS `health { lameduck }`).
pub const DEFAULT_LAME_DUCK: Duration = Duration::from_secs(5);

/// The shortest `apiserver_timeout` accepted (the liveness probe runs every
/// half of it and may wait the other half).
const MIN_APISERVER_TIMEOUT: Duration = Duration::from_secs(2);

/// The options of `serve` (and, a subset, of `check` and `dump-zone`),
/// defined once: each field is a flag, an environment variable
/// (`CLUSTERSET_DNS_*`) and a key of the TOML file (the field name). Every
/// field is optional so that the layers can be stacked with [`Self::or`]:
/// command line and environment (clap), then the file, then
/// [`Self::defaults`].
#[derive(Debug, Clone, Default, PartialEq, Args, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServeArgs {
    /// TOML configuration file.
    #[arg(long, env = "CLUSTERSET_DNS_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Manifest file (multi-document YAML) to serve; watched for changes
    /// (relative to the configuration file when set there).
    #[arg(long, env = "CLUSTERSET_DNS_FILE")]
    pub file: Option<PathBuf>,
    /// Largest manifest file read, bytes; a larger one is refused and the
    /// last good version keeps serving.
    #[arg(long, env = "CLUSTERSET_DNS_FILE_MAX_BYTES")]
    pub file_max_bytes: Option<u64>,
    /// Zone to be authoritative for.
    #[arg(long, env = "CLUSTERSET_DNS_ZONE")]
    pub zone: Option<String>,
    /// UDP and TCP address for DNS.
    #[arg(long, env = "CLUSTERSET_DNS_DNS_LISTEN")]
    pub dns_listen: Option<SocketAddr>,
    /// HTTP address for /metrics, /ready, /live and /explain.
    #[arg(long, env = "CLUSTERSET_DNS_ADMIN_LISTEN")]
    pub admin_listen: Option<SocketAddr>,
    /// TTL of positive answers, seconds.
    #[arg(long, env = "CLUSTERSET_DNS_TTL")]
    pub ttl: Option<u32>,
    /// TTL of negative answers (SOA TTL and MINIMUM), seconds.
    #[arg(long, env = "CLUSTERSET_DNS_NEGATIVE_TTL")]
    pub negative_ttl: Option<u32>,
    /// Most endpoints in a headless answer at the service name.
    #[arg(long, env = "CLUSTERSET_DNS_MAX_RECORDS")]
    pub max_records: Option<usize>,
    /// Addresses of `ns.dns.<zone>` (comma-separated), e.g. the pod IP.
    #[arg(
        long,
        env = "CLUSTERSET_DNS_NAMESERVER_ADDRESSES",
        value_delimiter = ','
    )]
    pub nameserver_addresses: Option<Vec<IpAddr>>,
    /// A headless import with no ready endpoint in any cluster answers
    /// with its terminating but still serving endpoints, as kube-proxy
    /// falls back to them for a ClusterIP (KEP-1669).
    #[arg(long, env = "CLUSTERSET_DNS_SERVE_TERMINATING")]
    pub serve_terminating: Option<bool>,
    /// UDP sockets/threads; 0 = one per CPU.
    #[arg(long, env = "CLUSTERSET_DNS_UDP_WORKERS")]
    pub udp_workers: Option<usize>,
    /// Answer common UDP queries from precompiled wire data.
    #[arg(long, env = "CLUSTERSET_DNS_FAST_PATH")]
    pub fast_path: Option<bool>,
    /// Close a TCP connection idle this long (`500ms`, `30s`, `5m`, `1h`; a
    /// plain number is seconds).
    #[arg(long, env = "CLUSTERSET_DNS_TCP_IDLE_TIMEOUT")]
    pub tcp_idle_timeout: Option<HumanDuration>,
    /// Most DNS TCP connections open at once; at the limit the one idle the
    /// longest is closed (lowered to fit the open-file limit).
    #[arg(long, env = "CLUSTERSET_DNS_MAX_TCP_CONNECTIONS")]
    pub max_tcp_connections: Option<usize>,
    /// UDP responses a second per client prefix (response rate limiting;
    /// over it, queries are dropped or slipped); 0 = off.
    #[arg(long, env = "CLUSTERSET_DNS_RRL_RESPONSES_PER_SECOND")]
    pub rrl_responses_per_second: Option<u32>,
    /// Every Nth UDP query over the rate limit gets a truncated response
    /// (TC, so that real clients retry over TCP) instead of none; 0 = never,
    /// 1 = always.
    #[arg(long, env = "CLUSTERSET_DNS_RRL_SLIP")]
    pub rrl_slip: Option<u8>,
    /// IPv4 prefix length of a rate-limited client.
    #[arg(long, env = "CLUSTERSET_DNS_RRL_IPV4_PREFIX")]
    pub rrl_ipv4_prefix: Option<u8>,
    /// IPv6 prefix length of a rate-limited client.
    #[arg(long, env = "CLUSTERSET_DNS_RRL_IPV6_PREFIX")]
    pub rrl_ipv6_prefix: Option<u8>,
    /// Buckets of the rate limiter's fixed table (8 bytes each, rounded up
    /// to a power of two); client prefixes that hash to one bucket share it.
    #[arg(long, env = "CLUSTERSET_DNS_RRL_TABLE_SIZE")]
    pub rrl_table_size: Option<usize>,
    /// How long DNS keeps answering after SIGTERM, with /ready at 503,
    /// before the server exits (`500ms`, `30s`, `5m`, `1h`; a plain number
    /// is seconds).
    #[arg(long, env = "CLUSTERSET_DNS_LAME_DUCK")]
    pub lame_duck: Option<HumanDuration>,
    /// tracing filter, e.g. `clusterset_dns=debug`.
    #[arg(long, env = "CLUSTERSET_DNS_LOG")]
    pub log: Option<String>,
    /// Log line format: `text` (coloured only on a terminal and without
    /// `NO_COLOR`) or `json` (one object per line, for log collectors).
    #[arg(long, env = "CLUSTERSET_DNS_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// kubeconfig for the Kubernetes source (help text and fallback order:
    /// [`crate::cluster_args`]).
    #[arg(long, env = crate::cluster_args::KUBECONFIG_ENV, help = crate::cluster_args::KUBECONFIG_HELP)]
    pub kubeconfig: Option<PathBuf>,
    /// API group of ServiceImports (a vendor's mirror API may differ).
    #[arg(long, env = "CLUSTERSET_DNS_IMPORT_GROUP")]
    pub import_group: Option<String>,
    /// API version of ServiceImports; unset discovers v1beta1, then v1alpha1.
    #[arg(long, env = "CLUSTERSET_DNS_IMPORT_VERSION")]
    pub import_version: Option<String>,
    /// Kind of ServiceImports.
    #[arg(long, env = "CLUSTERSET_DNS_IMPORT_KIND")]
    pub import_kind: Option<String>,
    /// How long the apiserver may leave requests unanswered (hung, or a
    /// network path that drops packets) before the Kubernetes source counts
    /// as stale (`500ms`, `30s`, `5m`, `1h`; a plain number is seconds); its
    /// watches restart once it answers again.
    #[arg(long, env = "CLUSTERSET_DNS_APISERVER_TIMEOUT")]
    pub apiserver_timeout: Option<HumanDuration>,
    /// Receive the initial objects of each watch as a stream where the
    /// apiserver serves that (Kubernetes 1.27+ with the WatchList feature);
    /// false always lists in pages.
    #[arg(long, env = "CLUSTERSET_DNS_STREAMING_LISTS")]
    pub streaming_lists: Option<bool>,
}

/// The options `dump-zone` reads (the others are accepted but hidden);
/// `check` reads only `config`, `file` and `file_max_bytes`.
pub const ZONE_OPTIONS: &[&str] = &[
    "config",
    "file",
    "file_max_bytes",
    "zone",
    "ttl",
    "negative_ttl",
    "max_records",
    "nameserver_addresses",
    "serve_terminating",
];

/// The options `check` reads.
pub const CHECK_OPTIONS: &[&str] = &["config", "file", "file_max_bytes"];

impl ServeArgs {
    /// The built-in defaults: the bottom layer.
    pub fn defaults() -> Self {
        let zone = ZoneSettings::new(Name::root());
        let dns = DnsServerConfig::default();
        let import = ImportApi::default();
        Self {
            config: None,
            file: None,
            file_max_bytes: Some(crate::source::file::DEFAULT_MAX_BYTES),
            zone: Some("clusterset.local".into()),
            dns_listen: Some(dns.listen),
            admin_listen: Some(SocketAddr::from(([0, 0, 0, 0], 9180))),
            ttl: Some(zone.ttl),
            negative_ttl: Some(zone.negative_ttl),
            max_records: Some(zone.max_records),
            nameserver_addresses: None,
            serve_terminating: Some(zone.serve_terminating),
            udp_workers: Some(dns.udp_workers),
            fast_path: Some(dns.fast_path),
            tcp_idle_timeout: Some(dns.tcp_idle_timeout.into()),
            max_tcp_connections: Some(dns.max_tcp_connections),
            rrl_responses_per_second: Some(dns.rrl.responses_per_second),
            rrl_slip: Some(dns.rrl.slip),
            rrl_ipv4_prefix: Some(dns.rrl.ipv4_prefix),
            rrl_ipv6_prefix: Some(dns.rrl.ipv6_prefix),
            rrl_table_size: Some(dns.rrl.table_size),
            lame_duck: Some(DEFAULT_LAME_DUCK.into()),
            log: Some(DEFAULT_LOG_FILTER.into()),
            log_format: Some(LogFormat::default()),
            kubeconfig: None,
            import_group: Some(import.group),
            import_version: import.version,
            import_kind: Some(import.kind),
            apiserver_timeout: Some(crate::source::kubernetes::DEFAULT_APISERVER_TIMEOUT.into()),
            streaming_lists: Some(true),
        }
    }

    /// `self` over `lower`: every option `self` leaves unset is taken from
    /// `lower`. Generic over the fields (through their serde form), so a new
    /// option needs no merging code.
    pub fn or(self, lower: Self) -> Self {
        let config = self.config.clone().or(lower.config.clone());
        let (Ok(Value::Object(mut upper)), Ok(Value::Object(lower))) =
            (serde_json::to_value(&self), serde_json::to_value(&lower))
        else {
            unreachable!("options serialize to a JSON object");
        };
        for (key, value) in lower {
            if upper.get(&key).is_none_or(Value::is_null) {
                upper.insert(key, value);
            }
        }
        let merged: Self = serde_json::from_value(Value::Object(upper))
            .expect("options read back what they serialized");
        Self { config, ..merged }
    }

    /// The default of each option that has one, as `--help` shows it.
    fn default_texts() -> Vec<(String, String)> {
        let Ok(Value::Object(defaults)) = serde_json::to_value(Self::defaults()) else {
            unreachable!("options serialize to a JSON object");
        };
        defaults
            .into_iter()
            .filter_map(|(key, value)| {
                let text = match value {
                    Value::Null => return None,
                    Value::String(s) => s,
                    Value::Array(items) => items
                        .iter()
                        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                        .collect::<Vec<_>>()
                        .join(","),
                    other => other.to_string(),
                };
                Some((key, text))
            })
            .collect()
    }

    /// Adapts the options of a subcommand built from `ServeArgs`: shows each
    /// default in `--help` (`[default: clusterset.local]`) and hides the
    /// options not in `shown` (`None`: all shown).
    pub fn help(command: clap::Command, shown: Option<&[&str]>) -> clap::Command {
        let defaults = Self::default_texts();
        command.mut_args(|arg| {
            let id = arg.get_id().as_str();
            let mut arg = match defaults.iter().find(|(key, _)| key == id) {
                Some((_, text)) => {
                    let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                    arg.help(format!("{help} [default: {text}]"))
                }
                None => arg,
            };
            if shown.is_some_and(|shown| !shown.contains(&arg.get_id().as_str())) {
                arg = arg.hide(true);
            }
            arg
        })
    }
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Manifest file to serve.
    pub file: Option<PathBuf>,
    /// Largest manifest file read, bytes.
    pub file_max_bytes: u64,
    /// Zone settings.
    pub zone: ZoneSettings,
    /// Socket settings.
    pub dns: DnsServerConfig,
    /// Admin HTTP address.
    pub admin_listen: SocketAddr,
    /// How long DNS keeps answering after SIGTERM.
    pub lame_duck: Duration,
    /// tracing filter.
    pub log: String,
    /// Log line format.
    pub log_format: LogFormat,
    /// kubeconfig path for the Kubernetes source.
    pub kubeconfig: Option<PathBuf>,
    /// ServiceImport API for the Kubernetes source.
    pub import_api: ImportApi,
    /// How long the apiserver may leave requests unanswered before the
    /// Kubernetes source counts as stale.
    pub apiserver_timeout: Duration,
    /// Whether the Kubernetes source may stream initial lists.
    pub streaming_lists: bool,
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown keys.
    #[error("parsing {path}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: Box<toml::de::Error>,
    },
    /// A value is out of range.
    #[error("{0}")]
    Invalid(String),
}

impl Config {
    /// Resolves `args` (command line and environment) over the configuration
    /// file (if any) and the defaults.
    pub fn resolve(args: &ServeArgs) -> Result<Self, ConfigError> {
        let file = match &args.config {
            Some(path) => load_file(path)?,
            None => ServeArgs::default(),
        };
        Self::from_options(args.clone().or(file).or(ServeArgs::defaults()))
    }

    /// Validates the layered options (every option with a default is set).
    fn from_options(options: ServeArgs) -> Result<Self, ConfigError> {
        fn set<T>(option: Option<T>) -> T {
            option.expect("ServeArgs::defaults sets every option with a default")
        }
        let zone_name = set(options.zone);
        let origin = Name::from_ascii(&zone_name)
            .ok()
            .filter(|n| {
                !n.is_root()
                    && zone_name
                        .split('.')
                        .filter(|l| !l.is_empty())
                        .all(crate::model::is_dns_label)
            })
            .ok_or_else(|| {
                ConfigError::Invalid(format!("zone {zone_name:?} is not a valid domain name"))
            })?;
        let mut origin = origin;
        origin.set_fqdn(true);
        if crate::zone::wire_len(&origin) > crate::zone::MAX_ORIGIN_LEN {
            return Err(ConfigError::Invalid(format!(
                "zone {zone_name:?} is too long: at most {} bytes on the wire, so that every <svc>.<ns>.svc.<zone> name fits in 255",
                crate::zone::MAX_ORIGIN_LEN
            )));
        }
        let mut zone = ZoneSettings::new(origin);
        zone.ttl = set(options.ttl);
        zone.negative_ttl = set(options.negative_ttl);
        zone.max_records = set(options.max_records);
        zone.nameserver_addresses = options.nameserver_addresses.unwrap_or_default();
        zone.serve_terminating = set(options.serve_terminating);
        if zone.max_records == 0 {
            return Err(ConfigError::Invalid(
                "max_records must be at least 1".into(),
            ));
        }
        let file_max_bytes = set(options.file_max_bytes);
        if file_max_bytes == 0 {
            return Err(ConfigError::Invalid(
                "file_max_bytes must be at least 1".into(),
            ));
        }
        let dns = DnsServerConfig {
            listen: set(options.dns_listen),
            udp_workers: set(options.udp_workers),
            fast_path: set(options.fast_path),
            tcp_idle_timeout: set(options.tcp_idle_timeout).0,
            max_tcp_connections: set(options.max_tcp_connections),
            rrl: RrlConfig {
                responses_per_second: set(options.rrl_responses_per_second),
                slip: set(options.rrl_slip),
                ipv4_prefix: set(options.rrl_ipv4_prefix),
                ipv6_prefix: set(options.rrl_ipv6_prefix),
                table_size: set(options.rrl_table_size),
            },
        };
        if dns.max_tcp_connections == 0 {
            return Err(ConfigError::Invalid(
                "max_tcp_connections must be at least 1".into(),
            ));
        }
        let apiserver_timeout = set(options.apiserver_timeout).0;
        if apiserver_timeout < MIN_APISERVER_TIMEOUT {
            return Err(ConfigError::Invalid(format!(
                "apiserver_timeout must be at least {}: a probe every half of it, each waiting the other half",
                crate::ops::duration::format(MIN_APISERVER_TIMEOUT)
            )));
        }
        let rrl = &dns.rrl;
        if rrl.slip > MAX_SLIP {
            return Err(ConfigError::Invalid(format!(
                "rrl_slip must be at most {MAX_SLIP}"
            )));
        }
        if rrl.ipv4_prefix > 32 || rrl.ipv6_prefix > 128 {
            return Err(ConfigError::Invalid(
                "rrl_ipv4_prefix must be at most 32 and rrl_ipv6_prefix at most 128".into(),
            ));
        }
        if !(1..=MAX_TABLE_SIZE).contains(&rrl.table_size) {
            return Err(ConfigError::Invalid(format!(
                "rrl_table_size must be between 1 and {MAX_TABLE_SIZE}"
            )));
        }
        Ok(Self {
            file: options.file,
            file_max_bytes,
            zone,
            dns,
            admin_listen: set(options.admin_listen),
            lame_duck: set(options.lame_duck).0,
            log: set(options.log),
            log_format: set(options.log_format),
            kubeconfig: options.kubeconfig,
            import_api: ImportApi {
                group: set(options.import_group),
                version: options.import_version,
                kind: set(options.import_kind),
            },
            apiserver_timeout,
            streaming_lists: set(options.streaming_lists),
        })
    }
}

/// Reads a TOML configuration file; relative paths in it are taken relative
/// to the file's directory, so a config works from any working directory.
pub fn load_file(path: &Path) -> Result<ServeArgs, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.into(),
        source,
    })?;
    let mut config: ServeArgs = toml::from_str(&text).map_err(|source| ConfigError::Parse {
        path: path.into(),
        source: Box::new(source),
    })?;
    if let Some(dir) = path.parent() {
        for p in [&mut config.file, &mut config.kubeconfig]
            .into_iter()
            .flatten()
        {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        }
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layered(args: ServeArgs, file: ServeArgs) -> Result<Config, ConfigError> {
        Config::from_options(args.or(file).or(ServeArgs::defaults()))
    }

    #[test]
    fn flags_override_file_and_file_overrides_defaults() {
        let file: ServeArgs = toml::from_str(
            "ttl = 30\nnegative_ttl = 7\nzone = \"example.org\"\nlog_format = \"json\"",
        )
        .unwrap();
        let args = ServeArgs {
            ttl: Some(9),
            ..Default::default()
        };
        let config = layered(args, file).unwrap();
        assert_eq!(config.zone.ttl, 9);
        assert_eq!(config.zone.negative_ttl, 7);
        assert_eq!(config.zone.origin.to_string(), "example.org.");
        assert_eq!(config.zone.max_records, 1000);
        assert_eq!(config.log_format, LogFormat::Json);
        assert_eq!(config.dns.listen, DnsServerConfig::default().listen);
    }

    #[test]
    fn layering_fills_only_unset_options() {
        let upper = ServeArgs {
            config: Some("a.toml".into()),
            nameserver_addresses: Some(vec!["10.0.0.1".parse().unwrap()]),
            fast_path: Some(false),
            ..Default::default()
        };
        let merged = upper.clone().or(ServeArgs::defaults());
        assert_eq!(merged.config, upper.config);
        assert_eq!(merged.nameserver_addresses, upper.nameserver_addresses);
        assert_eq!(merged.fast_path, Some(false));
        assert_eq!(merged.zone.as_deref(), Some("clusterset.local"));
        assert_eq!(
            ServeArgs::default().or(ServeArgs::defaults()),
            ServeArgs::defaults()
        );
    }

    #[test]
    fn rate_limiting_is_off_by_default_and_checked() {
        let config = layered(ServeArgs::default(), ServeArgs::default()).unwrap();
        assert_eq!(config.dns.rrl, RrlConfig::default());
        assert_eq!(config.dns.rrl.responses_per_second, 0);
        let file: ServeArgs = toml::from_str(
            "rrl_responses_per_second = 50\nrrl_slip = 3\nrrl_ipv4_prefix = 32\nrrl_ipv6_prefix = 64\nrrl_table_size = 1024",
        )
        .unwrap();
        let config = layered(ServeArgs::default(), file).unwrap();
        assert_eq!(
            config.dns.rrl,
            RrlConfig {
                responses_per_second: 50,
                slip: 3,
                ipv4_prefix: 32,
                ipv6_prefix: 64,
                table_size: 1024,
            }
        );
        for bad in [
            "rrl_slip = 101",
            "rrl_ipv4_prefix = 33",
            "rrl_ipv6_prefix = 129",
            "rrl_table_size = 0",
            "rrl_table_size = 16777217",
        ] {
            let file: ServeArgs = toml::from_str(bad).unwrap();
            assert!(layered(ServeArgs::default(), file).is_err(), "{bad}");
        }
    }

    #[test]
    fn unknown_keys_are_rejected() {
        assert!(toml::from_str::<ServeArgs>("tll = 5").is_err());
        // `config` is a flag, not a key of the file it names.
        assert!(toml::from_str::<ServeArgs>("config = \"x.toml\"").is_err());
        assert!(toml::from_str::<ServeArgs>("log_format = \"xml\"").is_err());
    }

    #[test]
    fn the_serving_fallback_is_off_by_default_and_can_be_turned_on() {
        assert!(
            !Config::resolve(&ServeArgs::default())
                .unwrap()
                .zone
                .serve_terminating
        );
        let file: ServeArgs = toml::from_str("serve_terminating = true").unwrap();
        assert!(Config::resolve(&file).unwrap().zone.serve_terminating);
        let args = ServeArgs {
            serve_terminating: Some(false),
            ..Default::default()
        };
        assert!(!layered(args, file).unwrap().zone.serve_terminating);
    }

    #[test]
    fn streaming_lists_default_on_and_can_be_turned_off() {
        assert!(
            Config::resolve(&ServeArgs::default())
                .unwrap()
                .streaming_lists
        );
        let file: ServeArgs = toml::from_str("streaming_lists = false").unwrap();
        assert!(!Config::resolve(&file).unwrap().streaming_lists);
    }

    #[test]
    fn apiserver_timeout_defaults_to_30_s_and_needs_at_least_2() {
        let config = layered(ServeArgs::default(), ServeArgs::default()).unwrap();
        assert_eq!(config.apiserver_timeout, Duration::from_secs(30));
        let file: ServeArgs = toml::from_str("apiserver_timeout = 6").unwrap();
        let config = layered(ServeArgs::default(), file).unwrap();
        assert_eq!(config.apiserver_timeout, Duration::from_secs(6));
        let args = ServeArgs {
            apiserver_timeout: Some(Duration::from_millis(1999).into()),
            ..Default::default()
        };
        let error = layered(args, ServeArgs::default()).unwrap_err().to_string();
        assert!(
            error.contains("apiserver_timeout must be at least 2s"),
            "{error}"
        );
    }

    /// The file's duration keys take units or plain seconds, and keep their
    /// milliseconds through the layering.
    #[test]
    fn file_durations_take_units_or_plain_seconds() {
        let file: ServeArgs = toml::from_str(
            "lame_duck = \"1500ms\"\ntcp_idle_timeout = 20\napiserver_timeout = \"2m\"",
        )
        .unwrap();
        let config = layered(ServeArgs::default(), file).unwrap();
        assert_eq!(config.lame_duck, Duration::from_millis(1500));
        assert_eq!(config.dns.tcp_idle_timeout, Duration::from_secs(20));
        assert_eq!(config.apiserver_timeout, Duration::from_secs(120));
        let error = toml::from_str::<ServeArgs>("lame_duck = \"5 s\"")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("lame_duck") && error.contains("unknown unit"),
            "{error}"
        );
    }

    #[test]
    fn invalid_zone_is_rejected() {
        let args = ServeArgs {
            zone: Some("bad_zone!".into()),
            ..Default::default()
        };
        assert!(layered(args, ServeArgs::default()).is_err());
    }

    /// A zone too long to hold `<63 bytes>.<63 bytes>.svc.<zone>` is refused
    /// up front; the longest one that leaves room is accepted.
    #[test]
    fn a_zone_without_room_for_service_names_is_rejected() {
        // Two labels and the root: (a + 1) + (b + 1) + 1 bytes on the wire.
        let zone = |a: usize, b: usize| ServeArgs {
            zone: Some(format!("{}.{}", "z".repeat(a), "y".repeat(b))),
            ..Default::default()
        };
        assert_eq!(crate::zone::MAX_ORIGIN_LEN, 60 + 1 + 60 + 1 + 1);
        let fits = layered(zone(60, 60), ServeArgs::default());
        assert!(fits.is_ok(), "{fits:?}");
        let error = layered(zone(60, 61), ServeArgs::default())
            .unwrap_err()
            .to_string();
        assert!(error.contains("too long"), "{error}");
    }

    #[test]
    fn the_shipped_config_file_parses_and_points_at_the_example() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/clusterset-dns.toml");
        let config = load_file(&path).unwrap();
        assert!(config.file.unwrap().ends_with("example-clusterset.yaml"));
    }

    /// Every key the shipped file documents (commented out or not) is an
    /// option, and every option is documented there.
    #[test]
    fn the_shipped_config_file_documents_every_option() {
        let text = include_str!("../config/clusterset-dns.toml");
        let Ok(Value::Object(all)) = serde_json::to_value(ServeArgs::defaults()) else {
            unreachable!()
        };
        for key in all.keys() {
            let documented = text
                .lines()
                .any(|l| l.trim_start_matches("# ").starts_with(&format!("{key} = ")));
            assert!(documented, "{key} is not in config/clusterset-dns.toml");
        }
        // The commented-out defaults parse too.
        let uncommented: String = text
            .lines()
            .map(|l| {
                let key = |l: &&str| {
                    l.split_once(" = ").is_some_and(|(k, _)| {
                        !k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                    })
                };
                l.strip_prefix("# ").filter(key).unwrap_or(l)
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let options: ServeArgs = toml::from_str(&uncommented).unwrap();
        assert_eq!(options.log_format, Some(LogFormat::Text));
    }
}
