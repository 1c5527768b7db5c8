//! Wiring: starts the source, the DNS server and the admin endpoint from a
//! [`Config`], and stops them again. `main` and the integration tests both
//! start the server through [`start`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::config::Config;
use crate::dns::{DnsServer, Handler};
use crate::error::Chain;
use crate::metrics::Metrics;
use crate::publish::{Publisher, ZoneHandle};
use crate::source::FileSource;
use crate::source::file::FileSourceError;
use crate::source::kubernetes::{KubeSource, KubeSourceError, discover_import_api};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// No Kubernetes client could be configured.
    #[error(
        "configuring the Kubernetes client from {origin} (pass --file PATH to serve a manifest instead)"
    )]
    Client {
        /// Where the configuration came from: a kubeconfig path, or
        /// "the environment" (in-cluster, $KUBECONFIG, ~/.kube/config).
        origin: String,
        /// The error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The initial load of the source failed.
    #[error(transparent)]
    Source(#[from] FileSourceError),
    /// A socket could not be bound.
    #[error("binding {what} on {addr}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Why a running server has to stop.
#[derive(Debug, thiserror::Error)]
pub enum FatalError {
    /// The Kubernetes source cannot go on (missing permissions).
    #[error(transparent)]
    Kubernetes(#[from] KubeSourceError),
    /// A long-running task died (a bug): without the source the answers
    /// would go stale while `/ready` still said ready, and without the
    /// admin endpoint nothing could tell, so the process stops instead and
    /// its supervisor (the kubelet) restarts it.
    #[error("the {task} stopped unexpectedly: {reason}")]
    TaskDied {
        /// Which task: `file source`, `kubernetes source`, `admin endpoint`.
        task: &'static str,
        /// The panic message.
        reason: String,
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
    shutting_down: Arc<AtomicBool>,
    lame_duck: Duration,
    tasks: Vec<JoinHandle<()>>,
    fatal: mpsc::Receiver<FatalError>,
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

    /// Resolves when the source fails in a way retrying cannot fix (missing
    /// permissions before the first sync, or a source task that died);
    /// pending forever otherwise.
    pub async fn fatal_error(&mut self) -> FatalError {
        match self.fatal.recv().await {
            Some(error) => error,
            None => std::future::pending().await,
        }
    }

    /// The lame-duck interval (CoreDNS's `health { lameduck }`): turns
    /// `/ready` to 503 at once, so that Services stop sending new clients
    /// here, and returns after the configured interval, during which DNS
    /// keeps answering on UDP and TCP; then call [`Self::stop`].
    pub async fn lame_duck(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
        tracing::info!(
            lame_duck_secs = self.lame_duck.as_secs_f64(),
            "shutting down: /ready is 503, DNS answers until the lame-duck interval ends"
        );
        tokio::time::sleep(self.lame_duck).await;
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
    let shutting_down = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();

    let (fatal_tx, fatal) = mpsc::channel(1);
    let (explainer, inquiries) = crate::inquiry::channel();
    match &config.file {
        Some(path) => {
            let publisher = Publisher::new(zone.clone(), metrics.clone(), inquiries);
            let source = FileSource::new(path, config.zone.clone(), publisher)
                .with_max_bytes(config.file_max_bytes);
            let (source, result) = source.load_off_runtime().await;
            let stats = result?;
            tracing::info!(
                file = %path.display(),
                services = stats.rebuilt,
                build_ms = stats.elapsed.as_millis() as u64,
                "manifest loaded"
            );
            let task = tokio::spawn(source.watch(shutdown_rx.clone()));
            tasks.push(tokio::spawn(supervise(
                "file source",
                task,
                fatal_tx.clone(),
            )));
        }
        None => {
            let (client, apiserver) = kube_client(config).await?;
            tracing::info!(%apiserver, "using the Kubernetes source");
            // Every line the source logs names the apiserver it talks to.
            let span = tracing::info_span!("kubernetes", %apiserver);
            let publisher = Publisher::new(zone.clone(), metrics.clone(), inquiries);
            let task = tokio::spawn(
                run_kubernetes(
                    client,
                    config.clone(),
                    publisher,
                    shutdown_rx.clone(),
                    fatal_tx.clone(),
                )
                .instrument(span),
            );
            tasks.push(tokio::spawn(supervise(
                "kubernetes source",
                task,
                fatal_tx.clone(),
            )));
        }
    }

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
    let admin_task = tokio::spawn(crate::admin::serve(
        admin,
        crate::admin::State {
            zone: zone.clone(),
            metrics: metrics.clone(),
            explainer,
            origin: config.zone.origin.clone(),
            shutting_down: shutting_down.clone(),
        },
        shutdown_rx,
    ));
    tasks.push(tokio::spawn(supervise(
        "admin endpoint",
        admin_task,
        fatal_tx,
    )));
    tracing::info!(%admin_addr, "admin endpoint listening (/metrics, /ready, /live, /explain)");

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
        shutting_down,
        lame_duck: config.lame_duck,
        tasks,
        fatal,
    })
}

/// Waits for a long-running task; if it panicked, reports it as fatal.
/// (The UDP workers survive a panicking batch themselves: see `dns::udp`.)
async fn supervise(task_name: &'static str, task: JoinHandle<()>, fatal: mpsc::Sender<FatalError>) {
    if let Err(error) = task.await
        && error.is_panic()
    {
        let panic = error.into_panic();
        let reason = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".to_owned());
        tracing::error!(task = task_name, %reason, "task stopped unexpectedly; shutting down");
        let _ = fatal
            .send(FatalError::TaskDied {
                task: task_name,
                reason,
            })
            .await;
    }
}

/// The client for the configured cluster, and the apiserver's URL (for
/// log lines about it).
async fn kube_client(config: &Config) -> Result<(kube::Client, String), StartError> {
    let failed = |origin: String| {
        move |source: Box<dyn std::error::Error + Send + Sync>| StartError::Client {
            origin,
            source,
        }
    };
    let (client_config, _) = crate::cluster_args::client_config(config.kubeconfig.as_deref(), None)
        .await
        .map_err(|e| failed(e.origin.clone())(e.why.into()))?;
    let url = client_config.cluster_url.to_string();
    let client =
        crate::kube_http::client(client_config).map_err(|e| failed(url.clone())(e.into()))?;
    Ok((client, url))
}

/// Discovers the ServiceImport API (retrying while it is missing: CRDs may
/// be installed after us) and runs the watches.
async fn run_kubernetes(
    client: kube::Client,
    config: Config,
    publisher: Publisher,
    mut shutdown: watch::Receiver<bool>,
    fatal: mpsc::Sender<FatalError>,
) {
    let mut delay = std::time::Duration::from_millis(500);
    let resource = loop {
        match discover_import_api(&client, &config.import_api).await {
            Ok(resource) => break resource,
            Err(error) => {
                let error = Chain(&error).to_string();
                tracing::error!(%error, "ServiceImport API not available; answering SERVFAIL, retrying in {delay:?}");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shutdown.changed() => return,
                }
                delay = (delay * 2).min(std::time::Duration::from_secs(30));
            }
        }
    };
    tracing::info!(api_version = %resource.api_version, kind = %resource.kind, "watching ServiceImports, EndpointSlices and Namespaces");
    let source = KubeSource::new(client, resource, config.zone.clone(), publisher)
        .with_apiserver_timeout(config.apiserver_timeout)
        .with_streaming_lists(config.streaming_lists);
    if let Err(error) = source.run(shutdown).await {
        tracing::error!(error = %Chain(&error), "Kubernetes source stopped");
        let _ = fatal.send(error.into()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_source_task_that_panics_is_reported_as_fatal() {
        let (tx, mut rx) = mpsc::channel(1);
        let task = tokio::spawn(async { panic!("index invariant broken") });
        supervise("file source", task, tx).await;
        let error = rx.recv().await.expect("a fatal error");
        assert_eq!(
            error.to_string(),
            "the file source stopped unexpectedly: index invariant broken"
        );
    }

    #[tokio::test]
    async fn a_source_task_that_returns_is_not_fatal() {
        let (tx, mut rx) = mpsc::channel(1);
        supervise("file source", tokio::spawn(async {}), tx).await;
        assert!(rx.recv().await.is_none());
    }

    /// Our own errors do not repeat their source in their message.
    #[test]
    fn our_errors_leave_their_cause_to_the_chain() {
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let cause = io().to_string();
        let errors: Vec<Box<dyn std::error::Error + 'static>> = vec![
            Box::new(crate::config::ConfigError::Read {
                path: "/x.toml".into(),
                source: io(),
            }),
            Box::new(StartError::Bind {
                what: "DNS",
                addr: "127.0.0.1:53".parse().unwrap(),
                source: io(),
            }),
            Box::new(crate::source::file::FileSourceError::Read {
                path: "/x.yaml".into(),
                source: io(),
            }),
        ];
        for error in errors {
            assert!(!error.to_string().contains(&cause), "{error}");
            assert!(error.source().is_some(), "{error}");
            assert_eq!(
                crate::error::Chain(&*error)
                    .to_string()
                    .matches(&cause)
                    .count(),
                1
            );
        }
    }
}
