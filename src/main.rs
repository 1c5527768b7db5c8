//! The `clusterset-dns` command: `serve`, `controller`, `check`, `dump-zone`,
//! `crds`, `peer`, `hub` and `version`.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use clusterset_dns::config::{CHECK_OPTIONS, Config, ServeArgs, ZONE_OPTIONS};
use clusterset_dns::index::Index;
use clusterset_dns::source::manifest;

#[derive(Parser)]
#[command(
    name = "clusterset-dns",
    version,
    about = "Authoritative DNS for Kubernetes Multi-Cluster Services (clusterset.local)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve DNS for the clusterset zone.
    #[command(defer(|c| ServeArgs::help(c, None)))]
    Serve(ServeArgs),
    /// Validate a manifest file and print what it contains; exits non-zero
    /// if any document is skipped or rejected.
    #[command(defer(|c| ServeArgs::help(c, Some(CHECK_OPTIONS))))]
    Check(ServeArgs),
    /// Print the zone built from a manifest in RFC 1035 master-file format.
    #[command(defer(|c| ServeArgs::help(c, Some(ZONE_OPTIONS))))]
    DumpZone(ServeArgs),
    /// Run the MCS controller: ServiceExports of every member cluster
    /// become this cluster's ServiceImports, EndpointSlices and derived
    /// Services.
    #[command(defer(clusterset_dns::controller::ControllerArgs::help))]
    Controller(clusterset_dns::controller::ControllerArgs),
    /// Print the CustomResourceDefinitions (ServiceImport, ServiceExport,
    /// ClusterProperty, PublishedService), or install them with `crds
    /// install`.
    Crds(CrdsArgs),
    /// Print the version, git commit, build target and rustc version.
    Version,
    /// Join member clusters: add, list and remove this cluster's peers
    /// (the controller's peer Secrets), from admin kubeconfigs.
    Peer(clusterset_dns::cli::PeerArgs),
    /// Run a large clusterset through a hub (an existing Kubernetes
    /// control plane): prepare it, join members, list and remove them.
    Hub(clusterset_dns::cli::HubArgs),
}

#[derive(clap::Args)]
struct CrdsArgs {
    #[command(subcommand)]
    action: Option<CrdsAction>,
}

#[derive(Subcommand)]
enum CrdsAction {
    /// Server-side apply the CRDs, keeping any mcs-api CRD the cluster holds
    /// in a newer release. Exits 0 when every CRD is at this version, 3 when
    /// one or more newer ones were kept (the rest applied), 1 on error.
    Install {
        /// The cluster.
        #[command(flatten)]
        cluster: clusterset_dns::cluster_args::KubeconfigArgs,
    },
}

/// Exit code of `crds install` when a newer CRD in the cluster was kept.
const EXIT_NEWER_CRD_KEPT: u8 = 3;

/// `crds install` kept at least one newer CRD: not a failure, but a
/// distinct exit code so that scripts can tell.
#[derive(Debug, thiserror::Error)]
#[error("{0} CRD(s) in the cluster are newer than this release and were kept")]
struct NewerCrdsKept(usize);

fn main() -> ExitCode {
    clusterset_dns::ops::memory::limit_arenas();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.is::<NewerCrdsKept>() => {
            eprintln!("{error}");
            ExitCode::from(EXIT_NEWER_CRD_KEPT)
        }
        Err(error) => {
            let error: &(dyn std::error::Error + 'static) = error.as_ref();
            eprintln!("error: {}", clusterset_dns::error::Chain(error));
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve(&args),
        Command::Controller(args) => controller(&args),
        Command::Check(args) => {
            let config = Config::resolve(&args)?;
            let (path, text) = read_manifest(&config)?;
            let report = manifest::check(&text);
            let parsed = &report.manifest;
            println!(
                "{} ServiceImports, {} EndpointSlices, {} skipped, {} rejected",
                parsed.imports.len(),
                parsed.slices.len(),
                parsed.skipped.len(),
                report.rejected.len()
            );
            for skipped in &parsed.skipped {
                eprintln!("skipped {skipped}");
            }
            for rejected in &report.rejected {
                eprintln!("rejected {rejected}");
            }
            let problems = parsed.skipped.len() + report.rejected.len();
            if problems > 0 {
                anyhow::bail!(
                    "{}: {problems} object(s) or document(s) would not be served",
                    path.display()
                );
            }
            Ok(())
        }
        Command::DumpZone(args) => {
            let config = Config::resolve(&args)?;
            let (_, text) = read_manifest(&config)?;
            let parsed = manifest::parse(&text)?;
            let mut index = Index::new(config.zone.clone());
            // As the server loads it: the cluster id of a ClusterProperty
            // in the manifest shapes local-first answers.
            manifest::Update::Whole(parsed).apply_to(&mut index);
            let (zone, _) = index.publish();
            print!("{}", clusterset_dns::zone::master_file(&zone));
            Ok(())
        }
        Command::Crds(CrdsArgs { action: None }) => {
            print!("{}", clusterset_dns::api::crds::render_all_yaml());
            Ok(())
        }
        Command::Crds(CrdsArgs {
            action: Some(CrdsAction::Install { cluster }),
        }) => crds_install(cluster.kubeconfig.as_deref()),
        Command::Version => {
            print!("{}", clusterset_dns::ops::build_info::describe());
            Ok(())
        }
        Command::Peer(args) => peer(&args),
        Command::Hub(args) => hub(&args),
    }
}

fn peer(args: &clusterset_dns::cli::PeerArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    let output = runtime.block_on(clusterset_dns::cli::run_peer(args))?;
    print!("{output}");
    Ok(())
}

fn hub(args: &clusterset_dns::cli::HubArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    let output = runtime.block_on(clusterset_dns::cli::run_hub(args))?;
    print!("{output}");
    Ok(())
}

fn crds_install(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<()> {
    use clusterset_dns::api::install::{Action, install};
    let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    let outcomes = runtime.block_on(async {
        let (config, _) = clusterset_dns::cluster_args::client_config(kubeconfig, None)
            .await
            .map_err(|e| anyhow::anyhow!("reading {}: {}", e.origin, e.why))?;
        let client = kube::Client::try_from(config).context("building the API client")?;
        anyhow::Ok(install(&client).await?)
    })?;
    for outcome in &outcomes {
        println!("{outcome}");
    }
    let kept = outcomes
        .iter()
        .filter(|o| matches!(o.action, Action::KeptNewer { .. }))
        .count();
    if kept > 0 {
        return Err(NewerCrdsKept(kept).into());
    }
    Ok(())
}

fn read_manifest(config: &Config) -> anyhow::Result<(std::path::PathBuf, String)> {
    let path = config
        .file
        .clone()
        .context("no manifest: pass --file PATH")?;
    // The server's own reader: a FIFO, a device or an oversize file is
    // refused at once instead of blocking or exhausting memory.
    let (text, _) = clusterset_dns::source::file::read_manifest(&path, config.file_max_bytes)?;
    Ok((path, text))
}

fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    let config = Config::resolve(args)?;
    clusterset_dns::ops::telemetry::init(&config.log, config.log_format);
    let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    runtime.block_on(async {
        // Register the handlers before any socket is bound: a SIGTERM that
        // arrives once the server answers must mean "shut down", never the
        // default action of dying with the signal.
        let mut shutdown = ShutdownSignal::register().context("installing signal handlers")?;
        let mut running = clusterset_dns::app::start(&config).await?;
        let fatal = tokio::select! {
            _ = shutdown.received() => None,
            error = running.fatal_error() => Some(error),
        };
        let result = match fatal {
            // Answer the queries already on their way while clients move on.
            None => {
                // A second signal ends the interval early (Ctrl-C twice).
                tokio::select! {
                    _ = running.lame_duck() => {}
                    _ = shutdown.received() => tracing::info!("second signal: ending the lame-duck interval"),
                }
                Ok(())
            }
            Some(error) => Err(anyhow::Error::new(error)),
        };
        tracing::info!("shutting down");
        running.stop().await;
        result
    })
}

fn controller(args: &clusterset_dns::controller::ControllerArgs) -> anyhow::Result<()> {
    let (log_filter, from_deprecated_env) = args.log_filter();
    clusterset_dns::ops::telemetry::init(&log_filter, args.log_format);
    if from_deprecated_env {
        tracing::warn!(
            "the log filter came from {}, which the controller stops reading in 0.2.0: set CLUSTERSET_DNS_LOG (or --log), as for serve",
            clusterset_dns::controller::args::DEPRECATED_LOG_ENV
        );
    }
    let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    runtime.block_on(async {
        let mut shutdown = ShutdownSignal::register().context("installing signal handlers")?;
        clusterset_dns::controller::run(args, shutdown.received()).await?;
        tracing::info!("shutting down");
        Ok(())
    })
}

/// SIGTERM and SIGINT, registered up front so neither can kill the process.
struct ShutdownSignal {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl ShutdownSignal {
    fn register() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    async fn received(&mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}
