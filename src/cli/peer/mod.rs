//! `clusterset-dns peer`: joining member clusters from an admin's machine.
//!
//! - `peer add`: with the admin kubeconfigs of this cluster and a peer,
//!   checks both identities with the controller's rules
//!   ([`crate::peering::membership`]), writes the peer-reader
//!   ServiceAccount, role, binding and a token Secret into the peer, and the
//!   peer Secret (label `clusterset-dns.io/peer=true`, `data.kubeconfig`,
//!   the peer's pod ranges: `--endpoint-cidr`, else its Nodes'
//!   `spec.podCIDRs`, or none with `--allow-any-endpoint`) here. Run
//!   again, it rotates the token.
//! - `peer list`: each peer Secret, whether the peer answers with it now
//!   (the controller's identity read and probe), its id, the controller's
//!   Lease and refusals.
//! - `peer remove`: deletes a peer Secret, and with `--revoke` the tokens
//!   this cluster was given in the peer.
//!
//! What a peer Secret and a peer Lease are, and how a peer is reached and
//! probed, is the peer contract the controller keeps too
//! ([`crate::peering`]). Here, [`rules`] decides (pure, unit-tested),
//! [`reader`] holds the objects of `deploy/peer-reader.yaml`, [`cluster`]
//! talks to the apiservers, and [`add`], [`list`] and [`remove`] are the
//! commands.

pub(super) mod add;
pub(super) mod cluster;
mod list;
mod reader;
mod remove;
pub(super) mod rules;

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use crate::cluster_args::{KubeconfigArgs, NamespaceArgs, PeerSelectorArgs};
use crate::peering::membership::Refusal;

/// Field manager of everything `peer` writes.
pub const FIELD_MANAGER: &str = "clusterset-dns-peer-cli";

/// `clusterset-dns peer`.
#[derive(Args, Debug, Clone)]
pub struct PeerArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: PeerCommand,
}

/// The `peer` subcommands.
#[derive(Subcommand, Debug, Clone)]
pub enum PeerCommand {
    /// Make another cluster a peer of this one: a read-only token in the
    /// peer, a peer Secret here. Idempotent; running it again rotates the
    /// token. Run it the other way round too, so each cluster reads the
    /// other.
    Add(AddArgs),
    /// List this cluster's peers: id, server, whether the peer answers with
    /// the Secret's credentials now, when the controller last saw it, and
    /// whether the controller refused it.
    List(ListArgs),
    /// Remove a peer Secret (the controller drops the peer's services within
    /// seconds); with --revoke, also delete this cluster's tokens in the peer.
    Remove(RemoveArgs),
}

/// Which cluster is "here" and where its peer Secrets are.
#[derive(Args, Debug, Clone)]
pub struct LocalArgs {
    /// This cluster, as the controller finds it.
    #[command(flatten)]
    pub cluster: KubeconfigArgs,
    /// Context in that kubeconfig (default: its current context).
    #[arg(long)]
    pub context: Option<String>,
    /// The controller's namespace, where peer Secrets live.
    #[command(flatten)]
    pub namespace: NamespaceArgs,
    /// Which Secrets the controller takes for peers: `peer add` labels its
    /// Secret to match, `peer list` and `peer remove` look for them.
    #[command(flatten)]
    pub peers: PeerSelectorArgs,
}

/// The peer, for commands that write into it.
#[derive(Args, Debug, Clone)]
pub struct RemoteArgs {
    /// Admin kubeconfig of the peer (default: --kubeconfig, with
    /// --peer-context).
    #[arg(long)]
    pub peer_kubeconfig: Option<PathBuf>,
    /// Context in the peer's kubeconfig (default: its current context).
    #[arg(long)]
    pub peer_context: Option<String>,
    /// Namespace of the peer-reader ServiceAccount and its tokens in the
    /// peer (default: --namespace).
    #[arg(long)]
    pub peer_namespace: Option<String>,
}

/// `peer add`.
#[derive(Args, Debug, Clone)]
pub struct AddArgs {
    /// This cluster.
    #[command(flatten)]
    pub local: LocalArgs,
    /// The peer.
    #[command(flatten)]
    pub remote: RemoteArgs,
    /// The apiserver URL this cluster's controller reaches the peer at
    /// (default: the server of the peer's kubeconfig, which may be an
    /// address only the admin's machine reaches).
    #[arg(long)]
    pub peer_server: Option<String>,
    /// PEM file of the CA of the peer's apiserver (default: the peer
    /// kubeconfig's, else the ca.crt of the peer's kube-root-ca.crt
    /// ConfigMap, what its pods trust).
    #[arg(long)]
    pub peer_certificate_authority: Option<PathBuf>,
    /// Name of the peer Secret (default: `peer-<peer cluster id>`).
    #[arg(long)]
    pub name: Option<String>,
    /// A pod range of the peer (repeat for each, e.g. `10.1.0.0/16` and
    /// `fd00:1::/64`): this cluster's controller refuses any endpoint the
    /// peer publishes outside the ranges recorded on the peer Secret.
    /// Default: the `spec.podCIDRs` of the peer's Nodes, merged; when they
    /// carry none (many CNIs allocate pod addresses elsewhere: Cilium
    /// cluster-pool, Calico IPAM, VPC-native) `peer add` refuses, and this
    /// flag gives the CNI's pod ranges instead.
    #[arg(long = "endpoint-cidr", value_name = "CIDR")]
    pub endpoint_cidrs: Vec<String>,
    /// Record no endpoint ranges: this cluster's controller then accepts
    /// any endpoint address of the peer that its other rules allow (not
    /// this cluster's own Service, pod, Node or apiserver addresses, nor
    /// loopback, link-local, multicast, metadata or reserved ones), so the
    /// peer may point this cluster's clients at any other host they reach.
    /// For a peer whose pod ranges are not known; prefer --endpoint-cidr.
    #[arg(long, conflicts_with = "endpoint_cidrs")]
    pub allow_any_endpoint: bool,
    /// How long the new credential is valid (at least 10m; the peer's
    /// apiserver may cap it with --service-account-max-token-expiration).
    /// `peer list` and the metric
    /// clusterset_dns_controller_peer_credential_expiry_timestamp_seconds
    /// show when it expires; running `peer add` again rotates it.
    #[arg(long, default_value = "90d", value_parser = crate::ops::duration::parse)]
    pub token_ttl: std::time::Duration,
}

/// Output format of `peer list`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// A table, then one line per problem.
    Table,
    /// A JSON array.
    Json,
}

/// `peer list`.
#[derive(Args, Debug, Clone)]
pub struct ListArgs {
    /// This cluster.
    #[command(flatten)]
    pub local: LocalArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    pub output: Output,
}

/// `peer remove`.
#[derive(Args, Debug, Clone)]
pub struct RemoveArgs {
    /// The peer Secret's name (as `peer list` shows it).
    pub name: String,
    /// This cluster.
    #[command(flatten)]
    pub local: LocalArgs,
    /// Also delete, in the peer, every token Secret made for this cluster
    /// (the tokens stop working). Needs the peer's kubeconfig.
    #[arg(long)]
    pub revoke: bool,
    /// The peer (with --revoke).
    #[command(flatten)]
    pub remote: RemoteArgs,
}

/// Why a `peer` command failed.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The identities do not allow the join; nothing was written.
    #[error("refusing to add the peer: {refusal}; nothing was written ({hint})")]
    Refused {
        /// The rule that refused.
        refusal: Refusal,
        /// What to do about it.
        hint: &'static str,
    },
    /// A request to an apiserver failed.
    #[error("{what}")]
    Kube {
        /// What was being done, and in which cluster.
        what: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
    /// Anything else, said in full.
    #[error("{0}")]
    Failed(String),
}

impl PeerError {
    /// A [`PeerError::Kube`] for `what`.
    pub fn kube(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let what = what.into();
        move |source| Self::Kube { what, source }
    }
}

/// Runs a `peer` command and returns what it prints.
pub async fn run(args: &PeerArgs) -> Result<String, PeerError> {
    match &args.command {
        PeerCommand::Add(args) => add::add(args).await,
        PeerCommand::List(args) => list::list(args).await,
        PeerCommand::Remove(args) => remove::remove(args).await,
    }
}
