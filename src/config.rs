//! Configuration: command line, environment (`CLUSTERSET_DNS_*`) and a TOML
//! file, in that order of precedence, over built-in defaults. Every setting
//! has all three forms; `config/clusterset-dns.toml` documents each key.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use hickory_proto::rr::Name;
use serde::Deserialize;

use crate::dns::DnsServerConfig;
use crate::source::kubernetes::ImportApi;
use crate::zone::ZoneSettings;

/// Default log filter: our own lifecycle at info, libraries quiet.
pub const DEFAULT_LOG_FILTER: &str = "clusterset_dns=info,hickory_server=warn,kube=warn,warn";

/// `serve` options. Each is optional here so that the file and the defaults
/// can fill what the command line and environment leave out.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// TOML configuration file.
    #[arg(long, env = "CLUSTERSET_DNS_CONFIG")]
    pub config: Option<PathBuf>,
    /// Manifest file (multi-document YAML) to serve; watched for changes.
    #[arg(long, env = "CLUSTERSET_DNS_FILE")]
    pub file: Option<PathBuf>,
    /// Zone to be authoritative for.
    #[arg(long, env = "CLUSTERSET_DNS_ZONE")]
    pub zone: Option<String>,
    /// UDP and TCP address for DNS.
    #[arg(long, env = "CLUSTERSET_DNS_DNS_LISTEN")]
    pub dns_listen: Option<SocketAddr>,
    /// HTTP address for /metrics, /ready and /live.
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
    /// UDP sockets/threads; 0 = one per CPU.
    #[arg(long, env = "CLUSTERSET_DNS_UDP_WORKERS")]
    pub udp_workers: Option<usize>,
    /// Answer common UDP queries from precompiled wire data.
    #[arg(long, env = "CLUSTERSET_DNS_FAST_PATH")]
    pub fast_path: Option<bool>,
    /// Close idle TCP connections after this many seconds.
    #[arg(long, env = "CLUSTERSET_DNS_TCP_IDLE_TIMEOUT")]
    pub tcp_idle_timeout: Option<u64>,
    /// tracing filter, e.g. `clusterset_dns=debug`.
    #[arg(long, env = "CLUSTERSET_DNS_LOG")]
    pub log: Option<String>,
    /// kubeconfig for the Kubernetes source (default: in-cluster, then $KUBECONFIG, then ~/.kube/config).
    #[arg(long, env = "CLUSTERSET_DNS_KUBECONFIG")]
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
}

/// The TOML file: the same keys as the flags, with `_` for `-`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// See [`ServeArgs::file`]; relative to the configuration file.
    pub file: Option<PathBuf>,
    /// See [`ServeArgs::zone`].
    pub zone: Option<String>,
    /// See [`ServeArgs::dns_listen`].
    pub dns_listen: Option<SocketAddr>,
    /// See [`ServeArgs::admin_listen`].
    pub admin_listen: Option<SocketAddr>,
    /// See [`ServeArgs::ttl`].
    pub ttl: Option<u32>,
    /// See [`ServeArgs::negative_ttl`].
    pub negative_ttl: Option<u32>,
    /// See [`ServeArgs::max_records`].
    pub max_records: Option<usize>,
    /// See [`ServeArgs::nameserver_addresses`].
    pub nameserver_addresses: Option<Vec<IpAddr>>,
    /// See [`ServeArgs::udp_workers`].
    pub udp_workers: Option<usize>,
    /// See [`ServeArgs::fast_path`].
    pub fast_path: Option<bool>,
    /// See [`ServeArgs::tcp_idle_timeout`].
    pub tcp_idle_timeout: Option<u64>,
    /// See [`ServeArgs::log`].
    pub log: Option<String>,
    /// See [`ServeArgs::kubeconfig`]; relative to the configuration file.
    pub kubeconfig: Option<PathBuf>,
    /// See [`ServeArgs::import_group`].
    pub import_group: Option<String>,
    /// See [`ServeArgs::import_version`].
    pub import_version: Option<String>,
    /// See [`ServeArgs::import_kind`].
    pub import_kind: Option<String>,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Manifest file to serve.
    pub file: Option<PathBuf>,
    /// Zone settings.
    pub zone: ZoneSettings,
    /// Socket settings.
    pub dns: DnsServerConfig,
    /// Admin HTTP address.
    pub admin_listen: SocketAddr,
    /// tracing filter.
    pub log: String,
    /// kubeconfig path for the Kubernetes source.
    pub kubeconfig: Option<PathBuf>,
    /// ServiceImport API for the Kubernetes source.
    pub import_api: ImportApi,
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown keys.
    #[error("parsing {path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The error.
        source: Box<toml::de::Error>,
    },
    /// A value is out of range.
    #[error("{0}")]
    Invalid(String),
}

impl Config {
    /// Resolves `args` over the configuration file (if any) and the defaults.
    pub fn resolve(args: &ServeArgs) -> Result<Self, ConfigError> {
        let file = match &args.config {
            Some(path) => load_file(path)?,
            None => FileConfig::default(),
        };
        Self::merge(args, file)
    }

    fn merge(args: &ServeArgs, file: FileConfig) -> Result<Self, ConfigError> {
        let zone_name = args
            .zone
            .clone()
            .or(file.zone)
            .unwrap_or_else(|| "clusterset.local".into());
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
        zone.ttl = args.ttl.or(file.ttl).unwrap_or(zone.ttl);
        zone.negative_ttl = args
            .negative_ttl
            .or(file.negative_ttl)
            .unwrap_or(zone.negative_ttl);
        zone.max_records = args
            .max_records
            .or(file.max_records)
            .unwrap_or(zone.max_records);
        zone.nameserver_addresses = args
            .nameserver_addresses
            .clone()
            .or(file.nameserver_addresses)
            .unwrap_or_default();
        if zone.max_records == 0 {
            return Err(ConfigError::Invalid(
                "max_records must be at least 1".into(),
            ));
        }
        let dns = DnsServerConfig {
            listen: args
                .dns_listen
                .or(file.dns_listen)
                .unwrap_or(DnsServerConfig::default().listen),
            udp_workers: args.udp_workers.or(file.udp_workers).unwrap_or(0),
            fast_path: args.fast_path.or(file.fast_path).unwrap_or(true),
            tcp_idle_timeout: Duration::from_secs(
                args.tcp_idle_timeout
                    .or(file.tcp_idle_timeout)
                    .unwrap_or(10),
            ),
        };
        Ok(Self {
            file: args.file.clone().or(file.file),
            zone,
            dns,
            admin_listen: args
                .admin_listen
                .or(file.admin_listen)
                .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 9180))),
            log: args
                .log
                .clone()
                .or(file.log)
                .unwrap_or_else(|| DEFAULT_LOG_FILTER.into()),
            kubeconfig: args.kubeconfig.clone().or(file.kubeconfig),
            import_api: ImportApi {
                group: args
                    .import_group
                    .clone()
                    .or(file.import_group)
                    .unwrap_or_else(|| ImportApi::default().group),
                version: args.import_version.clone().or(file.import_version),
                kind: args
                    .import_kind
                    .clone()
                    .or(file.import_kind)
                    .unwrap_or_else(|| ImportApi::default().kind),
            },
        })
    }
}

/// Reads a TOML configuration file; relative paths in it are taken relative
/// to the file's directory, so a config works from any working directory.
pub fn load_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.into(),
        source,
    })?;
    let mut config: FileConfig = toml::from_str(&text).map_err(|source| ConfigError::Parse {
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

    #[test]
    fn flags_override_file_and_file_overrides_defaults() {
        let file: FileConfig =
            toml::from_str("ttl = 30\nnegative_ttl = 7\nzone = \"example.org\"").unwrap();
        let args = ServeArgs {
            ttl: Some(9),
            ..Default::default()
        };
        let config = Config::merge(&args, file).unwrap();
        assert_eq!(config.zone.ttl, 9);
        assert_eq!(config.zone.negative_ttl, 7);
        assert_eq!(config.zone.origin.to_string(), "example.org.");
        assert_eq!(config.zone.max_records, 1000);
    }

    #[test]
    fn unknown_keys_are_rejected() {
        assert!(toml::from_str::<FileConfig>("tll = 5").is_err());
    }

    #[test]
    fn invalid_zone_is_rejected() {
        let args = ServeArgs {
            zone: Some("bad_zone!".into()),
            ..Default::default()
        };
        assert!(Config::merge(&args, FileConfig::default()).is_err());
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
        let fits = Config::merge(&zone(60, 60), FileConfig::default());
        assert!(fits.is_ok(), "{fits:?}");
        let error = Config::merge(&zone(60, 61), FileConfig::default())
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
}
