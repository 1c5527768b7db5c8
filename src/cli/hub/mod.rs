//! `clusterset-dns hub`: a hub for a large clusterset, set up from an
//! admin's machine on an existing Kubernetes control plane (the hub
//! contract is [`crate::hub`]).
//!
//! - `hub init`: the hub's CRD, roles, admission policy and flow control.
//!   Idempotent.
//! - `hub join`: with the hub's and a member's admin kubeconfigs, the
//!   member's namespace, its record (its pod ranges), account, bindings
//!   and quota on the hub, a bound token, and the hub Secret in the
//!   member. Run again, it rotates the token and records the ranges anew.
//! - `hub list`: the members, their ids, Lease age, quota use and tokens.
//! - `hub leave`: a member's namespace and read binding deleted on the hub,
//!   which revokes its tokens; with the member's kubeconfig, its hub Secret
//!   too.

mod init;
mod join;
mod leave;
mod list;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::{ApiResource, Discovery, Scope};
use serde_json::Value;

use super::peer::PeerError;
use super::peer::cluster::{Endpoint, connect};
use crate::cluster_args::{KubeconfigArgs, NamespaceArgs};
use crate::hub::MANAGED_BY;

/// `clusterset-dns hub`.
#[derive(Args, Debug, Clone)]
pub struct HubArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: HubCommand,
}

/// The `hub` subcommands.
#[derive(Subcommand, Debug, Clone)]
pub enum HubCommand {
    /// Prepare a Kubernetes control plane to be a clusterset's hub: the
    /// PublishedService CRD, the members' roles, the admission policy that
    /// holds each member to its own namespace and cluster id, and a flow
    /// schema that queues each member's requests apart. Idempotent.
    Init(HubClusterArgs),
    /// Make a cluster a member of the hub: its namespace member-<cluster
    /// id>, account, bindings and quota on the hub, a token bound to it,
    /// and the hub Secret in the member. Run again, it rotates the token.
    Join(JoinArgs),
    /// List the hub's members: id, namespace, how long ago each renewed
    /// its Lease, what it stores against its quota, its tokens.
    List(HubClusterArgs),
    /// Remove a member from the hub: its namespace (and with it its
    /// tokens, which stop working) and its read binding; with
    /// --member-kubeconfig, its hub Secret too.
    Leave(LeaveArgs),
}

/// The hub, as an admin reaches it.
#[derive(Args, Debug, Clone)]
pub struct HubClusterArgs {
    /// The hub, with an admin's credentials.
    #[command(flatten)]
    pub cluster: KubeconfigArgs,
    /// Context in that kubeconfig (default: its current context).
    #[arg(long)]
    pub context: Option<String>,
}

/// The member, as an admin reaches it.
#[derive(Args, Debug, Clone)]
pub struct MemberArgs {
    /// Admin kubeconfig of the member cluster.
    #[arg(long)]
    pub member_kubeconfig: Option<PathBuf>,
    /// Context in the member's kubeconfig (default: its current context).
    #[arg(long)]
    pub member_context: Option<String>,
    /// The controller's namespace in the member, where the hub Secret
    /// goes.
    #[command(flatten)]
    pub namespace: NamespaceArgs,
}

/// `hub join`.
#[derive(Args, Debug, Clone)]
pub struct JoinArgs {
    /// The hub.
    #[command(flatten)]
    pub hub: HubClusterArgs,
    /// The member.
    #[command(flatten)]
    pub member: MemberArgs,
    /// The hub's apiserver URL as the member's controller reaches it
    /// (default: the server of the hub kubeconfig).
    #[arg(long)]
    pub hub_server: Option<String>,
    /// PEM file of the CA of the hub's apiserver (default: the hub
    /// kubeconfig's, else the hub's kube-root-ca.crt).
    #[arg(long)]
    pub hub_certificate_authority: Option<PathBuf>,
    /// How long the member's token is valid (at least 10m).
    #[arg(long, default_value = "90d", value_parser = crate::ops::duration::parse)]
    pub token_ttl: Duration,
    /// The most PublishedServices the member may store on the hub (its
    /// exports).
    #[arg(long, default_value_t = crate::hub::MemberQuota::default().published_services)]
    pub max_exports: u32,
    /// The most published EndpointSlices the member may store on the hub.
    #[arg(long, default_value_t = crate::hub::MemberQuota::default().slices)]
    pub max_slices: u32,
    /// A pod range of the member (repeat for each, e.g. `10.1.0.0/16` and
    /// `fd00:1::/64`), recorded on the hub: every member's controller
    /// refuses any endpoint the member publishes outside them. Default:
    /// the `spec.podCIDRs` of the member's Nodes, merged; when they carry
    /// none (Cilium cluster-pool, Calico IPAM, VPC-native) `hub join`
    /// refuses, and this flag gives the CNI's pod ranges instead.
    #[arg(long = "endpoint-cidr", value_name = "CIDR")]
    pub endpoint_cidrs: Vec<String>,
    /// Record no endpoint ranges: every member's controller then accepts
    /// any endpoint address of the member that its other rules allow (not
    /// its own cluster's Service, pod, Node or apiserver addresses, nor
    /// loopback, link-local, multicast, metadata or reserved ones). For a
    /// member whose pod ranges are not known; prefer --endpoint-cidr.
    #[arg(long, conflicts_with = "endpoint_cidrs")]
    pub allow_any_endpoint: bool,
}

/// `hub leave`.
#[derive(Args, Debug, Clone)]
pub struct LeaveArgs {
    /// The hub.
    #[command(flatten)]
    pub hub: HubClusterArgs,
    /// The member's cluster id.
    #[arg(long)]
    pub member: String,
    /// The member, to delete its hub Secret too (optional).
    #[command(flatten)]
    pub member_cluster: MemberArgs,
}

/// Runs a `hub` command and returns what it prints.
pub async fn run(args: &HubArgs) -> Result<String, PeerError> {
    match &args.command {
        HubCommand::Init(args) => init::init(args).await,
        HubCommand::Join(args) => join::join(args).await,
        HubCommand::List(args) => list::list(args).await,
        HubCommand::Leave(args) => leave::leave(args).await,
    }
}

/// Connects to the hub with the admin's kubeconfig.
async fn connect_hub(hub: &HubClusterArgs) -> Result<Endpoint, PeerError> {
    connect(
        hub.cluster.kubeconfig.as_deref(),
        hub.context.as_deref(),
        "--kubeconfig",
    )
    .await
}

/// Connects to the member with the admin's kubeconfig, when one is named.
async fn connect_member(member: &MemberArgs) -> Result<Option<Endpoint>, PeerError> {
    if member.member_kubeconfig.is_none() && member.member_context.is_none() {
        return Ok(None);
    }
    connect(
        member.member_kubeconfig.as_deref(),
        member.member_context.as_deref(),
        "--member-kubeconfig",
    )
    .await
    .map(Some)
}

/// Server-side applies `objects` (forced: the hub's objects are ours) and
/// returns a line per object.
async fn apply_all(client: &Client, objects: &[Value]) -> Result<String, PeerError> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(PeerError::kube("discovering the hub's API"))?;
    let mut out = String::new();
    for object in objects {
        let (resource, namespaced) = resource_of(&discovery, object)?;
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let namespace = object["metadata"]["namespace"].as_str();
        let api: Api<DynamicObject> = match (namespaced, namespace) {
            (true, Some(namespace)) => Api::namespaced_with(client.clone(), namespace, &resource),
            _ => Api::all_with(client.clone(), &resource),
        };
        let params = PatchParams::apply(MANAGED_BY).force();
        api.patch(name, &params, &Patch::Apply(object))
            .await
            .map_err(PeerError::kube(format!(
                "applying {} {name}",
                resource.kind
            )))?;
        let at = namespace.map(|n| format!("{n}/")).unwrap_or_default();
        out += &format!("hub: {} {at}{name} applied\n", resource.kind);
        // A CRD serves its kind only once established; what follows may
        // refer to it.
        if resource.kind == "CustomResourceDefinition" {
            wait_established(client, name).await?;
        }
    }
    Ok(out)
}

/// The API resource of `object`, and whether it is namespaced.
fn resource_of(discovery: &Discovery, object: &Value) -> Result<(ApiResource, bool), PeerError> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    match discovery.resolve_gvk(&gvk) {
        Some((resource, capabilities)) => Ok((resource, capabilities.scope == Scope::Namespaced)),
        None => Err(PeerError::Failed(format!(
            "the hub does not serve {api_version} {kind} (its Kubernetes is too old for a hub: ValidatingAdmissionPolicy v1 needs 1.30, flowcontrol v1 1.29)"
        ))),
    }
}

/// Waits up to 30 s for CRD `name` to be Established.
async fn wait_established(client: &Client, name: &str) -> Result<(), PeerError> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let crd = api
            .get(name)
            .await
            .map_err(PeerError::kube(format!("reading CRD {name}")))?;
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(PeerError::Failed(format!(
                "CRD {name} is not Established after 30 s"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
