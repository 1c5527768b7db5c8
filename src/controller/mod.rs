//! The MCS controller (`clusterset-dns controller`): in every member
//! cluster, it turns the ServiceExports of all member clusters into this
//! cluster's ServiceImports, imported EndpointSlices and derived Services,
//! and writes the status of this cluster's own ServiceExports.
//!
//! Pull mesh, no broker: each controller reads its own cluster and every
//! peer (read-only credentials from Secrets), and writes only into its own
//! cluster. Every decision is a deterministic function of what every
//! cluster can read, so all clusters reach the same merge and the same
//! conditions without talking to each other.
//!
//! ```text
//!  peer Secrets ─▶ peers (pure state machine: generations, health, grace)
//!        ▲                 │ effects: connect, watch, refuse, replan, Leases
//!        │                 ▼
//!  connection (watches, probe) ─▶ run: the shell owning every cluster's
//!  local cluster ─▶ connection ─▶      indexed state (cluster) and its I/O
//!                                               │
//!                                               ▼
//!            reconcile::plan (merge, conditions, naming; pure) ─▶ apply (SSA)
//!                                                 writes held to the fence
//! ```
//!
//! - [`naming`], [`merge`], [`conditions`]: the pure rules (names, the
//!   export merge and its conflicts, status conditions).
//! - [`ownership`], [`addresses`], [`namespaces`], [`ip_share`]: what a peer
//!   may make this cluster do (which objects are ours, which endpoint
//!   addresses, namespaces and clusterset IPs a peer may have).
//! - [`peers`]: every peer as a pure state machine (inputs → effects):
//!   Secrets, connection generations, health, grace, refusals.
//! - [`schedule`]: when to plan and write, pure: the start-up gate, the
//!   bounded batches of dirty services, retries, the publication's tries.
//! - [`publication`]: what this cluster publishes for its peers, and how a
//!   peer's publication is read back.
//! - [`lean`], [`compact`], [`cluster`]: the objects as the watches decode
//!   them, as the stores hold them at rest, and the stores of each cluster.
//! - [`reconcile`]: desired state and the writes that reach it, one pure
//!   function per derived object.
//! - [`connection`]: the watch and probe tasks of one cluster.
//! - [`run`](mod@run): the shell: the event loop and the parts it owns,
//!   the stores and local watches (`run/stores.rs`), the peers' I/O
//!   (`run/peer_io.rs`) and the writer (`run/writer.rs`).
//!
//! docs/controller.md, "The code", follows one event from its socket to
//! the write it causes, a file a step.
//! - [`apply`]: server-side apply and deletes.
//! - [`leader`], [`fence`]: leader election on a Lease, and the deadline
//!   every write of the leader is held to.
//! - [`admin`], [`metrics`], [`args`]: operations.
//!
//! The peer contract the controller shares with `clusterset-dns peer`
//! (the peer Secret and Lease, the identity rules) is [`crate::peering`].

mod addresses;
mod admin;
mod apply;
pub mod args;
pub mod cluster;
pub mod compact;
pub mod compat;
mod conditions;
mod connection;
mod events;
mod fence;
mod hub;
mod ip_share;
pub mod leader;
pub mod lean;
mod merge;
pub mod metrics;
mod namespaces;
pub mod naming;
mod ownership;
mod peers;
pub mod publication;
mod reconcile;
mod run;
mod schedule;

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use tokio::sync::mpsc;

pub use self::args::ControllerArgs;
use self::cluster::PeerLimits;
use self::fence::{Fence, FenceLayer};
use self::metrics::ControllerMetrics;
use self::reconcile::NamespaceFilter;
use self::run::{Controller, Settings};

/// Why the controller stopped.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// No usable kubeconfig or in-cluster credentials.
    #[error("Kubernetes client configuration")]
    Config(#[source] crate::cluster_args::ClientConfigError),
    /// The client could not be built from its configuration.
    #[error("Kubernetes client")]
    Client(#[source] kube::Error),
    /// The admin port could not be bound.
    #[error("binding the admin endpoint on {addr}")]
    Admin {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The controller could not start.
    #[error(transparent)]
    Start(#[from] run::StartError),
    /// The controller cannot go on: its identity changed, or its role is
    /// too narrow.
    #[error("{0}")]
    Stopped(String),
    /// Leadership was lost: exit, so a restart comes back as a standby.
    #[error("leadership lost: {0}")]
    LostLeadership(String),
}

/// Runs the controller until `shutdown` resolves or an error stops it.
pub async fn run(
    args: &ControllerArgs,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ControllerError> {
    let (config, _) = crate::cluster_args::client_config(args.cluster.kubeconfig.as_deref(), None)
        .await
        .map_err(ControllerError::Config)?;
    // The Lease is taken and renewed on a client of its own: the fence
    // closes the controller's client to writes before the Lease is held.
    let lease_client = crate::kube_http::client(config.clone()).map_err(ControllerError::Client)?;
    let fence = if args.leader_election {
        Fence::closed()
    } else {
        Fence::open()
    };
    let client = crate::kube_http::builder(config)
        .map_err(ControllerError::Client)?
        .with_layer(&FenceLayer(fence.clone()))
        .build();
    let metrics = Arc::new(ControllerMetrics::new());
    let (queries_tx, queries) = mpsc::channel(16);
    let (leading_tx, leading) = tokio::sync::watch::channel(!args.leader_election);
    let (blocked_tx, blocked) = tokio::sync::watch::channel(None);
    let listener = tokio::net::TcpListener::bind(args.admin_listen)
        .await
        .map_err(|source| ControllerError::Admin {
            addr: args.admin_listen,
            source,
        })?;
    tokio::spawn(admin::serve(
        listener,
        admin::State {
            metrics: metrics.clone(),
            queries: queries_tx,
            leading,
            blocked,
        },
    ));
    let identity = args.identity.clone().unwrap_or_else(|| {
        std::env::var("HOSTNAME").unwrap_or_else(|_| format!("pid-{}", std::process::id()))
    });
    let leases: Api<Lease> = Api::namespaced(lease_client, &args.namespace.namespace);
    let mut shutdown = std::pin::pin!(shutdown);
    // Below the oldest supported Kubernetes nothing starts: not ready,
    // /ready says why, no crash loop (compat).
    tokio::select! {
        () = compat::wait_until_supported(&client, &blocked_tx) => {}
        _ = &mut shutdown => return Ok(()),
    }
    if args.leader_election {
        tokio::select! {
            began = leader::acquire(&leases, &args.lease_name, &identity) => {
                fence.extend(began + leader::RENEW_DEADLINE);
            }
            _ = &mut shutdown => return Ok(()),
        }
        let _ = leading_tx.send(true);
        metrics.leader.set(1);
    }
    let settings = Settings {
        namespace: args.namespace.namespace.clone(),
        peer_selector: args.peers.peer_selector.to_string(),
        grace: args.peer_grace_period,
        startup_sync_timeout: args.startup_sync_timeout,
        // The controller's own namespace holds the peer Secrets: never
        // imported into, whatever --deny-namespaces says.
        deny: NamespaceFilter::new(
            args.deny_namespaces
                .iter()
                .cloned()
                .chain([args.namespace.namespace.clone()]),
        ),
        import_selector: args.import_namespace_selector.clone(),
        peer_ip_share: args.peer_clusterset_ip_share,
        probing: connection::Probing {
            interval: crate::peering::contact::PROBE_INTERVAL,
            timeout: crate::peering::contact::PROBE_TIMEOUT,
            reread: args.peer_reread_interval,
        },
        instance: identity.clone(),
        peer_limits: PeerLimits {
            exports: args.peer_max_exports,
            services: args.peer_max_services,
            slices: args.peer_max_slices,
            endpoints: args.peer_max_endpoints,
        },
    };
    log_peer_budget(&settings.peer_limits);
    // Renewals start with the controller: its start-up reads the cluster
    // and may take longer than a renewal period.
    let hold = async {
        if args.leader_election {
            let why = leader::hold(&leases, &args.lease_name, &identity, &fence).await;
            let _ = leading_tx.send(false);
            metrics.leader.set(0);
            why
        } else {
            std::future::pending().await
        }
    };
    let work = async {
        let controller = Controller::start(client, settings, metrics.clone()).await?;
        Err(ControllerError::Stopped(controller.run(queries).await))
    };
    tokio::select! {
        // A lost Lease ends the work at once: the fence is already closed,
        // and dropping the work aborts every write in flight.
        biased;
        lost = hold => Err(ControllerError::LostLeadership(lost)),
        stopped = work => stopped,
        () = &mut shutdown => Ok(()),
    }
}

/// How many peers at `limits` a memory limit of `limit` bytes has room
/// for beside [`BASE_MEMORY_BYTES`].
pub fn peers_at_limits(limits: &PeerLimits, limit: usize) -> usize {
    limit.saturating_sub(BASE_MEMORY_BYTES) / cluster::peer_budget_bytes(limits).max(1)
}

/// Says at start what one peer at its limits can make this controller
/// hold, and how many such peers the container's memory limit (cgroup v2
/// `memory.max`) has room for beside [`BASE_MEMORY_BYTES`]; warns when it
/// is fewer than two.
fn log_peer_budget(limits: &PeerLimits) {
    let per_peer = cluster::peer_budget_bytes(limits);
    let mib = |bytes: usize| bytes / (1024 * 1024);
    let limit = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|text| text.trim().parse::<usize>().ok());
    match limit {
        Some(limit) => {
            let peers = peers_at_limits(limits, limit);
            if peers < 2 {
                tracing::warn!(
                    per_peer_mib = mib(per_peer),
                    memory_limit_mib = mib(limit),
                    peers_at_limits = peers,
                    "the memory limit has room for fewer than two peers at their limits: raise it or lower --peer-max-*"
                );
            } else {
                tracing::info!(
                    per_peer_mib = mib(per_peer),
                    memory_limit_mib = mib(limit),
                    peers_at_limits = peers,
                    "peer limits"
                );
            }
        }
        None => tracing::info!(per_peer_mib = mib(per_peer), "peer limits"),
    }
}

/// What the controller holds besides what its peers' caps allow: taken
/// as its peak in the controller bench at 3 × 2,000 exports (95.5–99.1 MiB
/// VmHWM, docs/benchmarks-controller.md, "Current figures"), which holds
/// this cluster's and two peers' data besides the process: a generous
/// base.
pub const BASE_MEMORY_BYTES: usize = 96 * 1024 * 1024;

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `clusterset-dns controller` alone, as the binary parses it.
    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        args: ControllerArgs,
    }

    #[test]
    fn the_default_peer_limits_fit_four_peers_in_the_shipped_limit() {
        // docs/controller.md, "Limits and budgets"; deploy/controller.yaml
        // ships `limits: {memory: 512Mi}`.
        let args = Command::parse_from(["controller"]).args;
        let limits = PeerLimits {
            exports: args.peer_max_exports,
            services: args.peer_max_services,
            slices: args.peer_max_slices,
            endpoints: args.peer_max_endpoints,
        };
        assert_eq!(cluster::peer_budget_bytes(&limits) / (1024 * 1024), 86);
        assert_eq!(peers_at_limits(&limits, 512 * 1024 * 1024), 4);
        let shipped = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/deploy/controller.yaml"
        ))
        .unwrap();
        assert!(
            shipped.contains("memory: 512Mi"),
            "the shipped limit changed"
        );
    }
}
