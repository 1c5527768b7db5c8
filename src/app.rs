//! Wiring: starts the source, the DNS server and the admin endpoint from a
//! [`Config`], and stops them again. `main` and the integration tests both
//! start the server through [`start`].

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::dns::{DnsServer, Handler};
use crate::metrics::Metrics;
use crate::publish::ZoneHandle;
use crate::source::FileSource;
use crate::source::file::FileSourceError;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// No source of objects is configured.
    #[error("no source configured: pass --file PATH (or set `file` in the configuration file)")]
    NoSource,
    /// The initial load of the source failed.
    #[error(transparent)]
    Source(#[from] FileSourceError),
    /// A socket could not be bound.
    #[error("binding {what} on {addr}: {source}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
}

/// A running server.
#[derive(Debug)]
pub struct Running {
    dns: DnsServer,
    admin_addr: SocketAddr,
    zone: ZoneHandle,
    metrics: Arc<Metrics>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// The DNS address (UDP and TCP).
    pub fn dns_addr(&self) -> SocketAddr {
        self.dns.local_addr()
    }

    /// The admin HTTP address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// The published zone.
    pub fn zone(&self) -> &ZoneHandle {
        &self.zone
    }

    /// The process metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Stops the source, the admin endpoint and the DNS server.
    pub async fn stop(self) {
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        self.dns.shutdown().await;
    }
}

/// Loads the source and starts serving. The first load must succeed: there
/// is no last good index to fall back on yet.
pub async fn start(config: &Config) -> Result<Running, StartError> {
    let metrics = Arc::new(Metrics::new());
    let zone = ZoneHandle::new();
    let (shutdown, shutdown_rx) = watch::channel(false);
    let mut tasks = Vec::new();

    let path = config.file.clone().ok_or(StartError::NoSource)?;
    let mut source = FileSource::new(&path, config.zone.clone(), zone.clone(), metrics.clone());
    let stats = source.load()?;
    tracing::info!(file = %path.display(), services = stats.rebuilt, "manifest loaded");
    tasks.push(tokio::spawn(source.watch(shutdown_rx.clone())));

    let admin = crate::admin::bind(config.admin_listen)
        .await
        .map_err(|source| StartError::Bind {
            what: "admin HTTP",
            addr: config.admin_listen,
            source,
        })?;
    let admin_addr = admin.local_addr().map_err(|source| StartError::Bind {
        what: "admin HTTP",
        addr: config.admin_listen,
        source,
    })?;
    tasks.push(tokio::spawn(crate::admin::serve(
        admin,
        zone.clone(),
        metrics.clone(),
        shutdown_rx,
    )));
    tracing::info!(%admin_addr, "admin endpoint listening (/metrics, /ready, /live)");

    let handler = Handler::new(zone.clone(), metrics.clone());
    let dns = DnsServer::start(&config.dns, zone.clone(), handler).map_err(|source| {
        StartError::Bind {
            what: "DNS",
            addr: config.dns.listen,
            source,
        }
    })?;
    Ok(Running {
        dns,
        admin_addr,
        zone,
        metrics,
        shutdown,
        tasks,
    })
}
