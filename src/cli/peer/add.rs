//! `clusterset-dns peer add`: reads both identities and checks them before
//! anything is written; then, in the peer, the peer-reader objects, a new
//! anchor Secret and a token bound to it; here, the peer Secret; last, the
//! peer's older anchors for this cluster are deleted (so a re-run is a
//! clean rotation, and the old token stops working at once).
//!
//! The peer Secret records the peer's pod ranges, outside which this
//! cluster's controller refuses the peer's endpoints: `--endpoint-cidr`
//! when given, else the `spec.podCIDRs` of the peer's Nodes (read with the
//! peer's admin kubeconfig), else `peer add` refuses before writing
//! anything, unless `--allow-any-endpoint` says to record none.
//!
//! The token is a TokenRequest of the peer-reader ServiceAccount that
//! expires after `--token-ttl` (90 days by default) and is bound to the
//! anchor: one anchor per reading cluster (labelled with its id), and
//! deleting it revokes that cluster's token before it expires, without
//! touching the others. The controller cannot renew a token (it holds no
//! credential that could mint one), so `peer list`, the metric
//! `clusterset_dns_controller_peer_credential_expiry_timestamp_seconds`
//! and its alert (docs/metrics.md) say when to run `peer add` again.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};

use super::cluster::{
    Endpoint, apply, apply_forced, check_peer, connect_local, connect_peer, delete_tokens,
    require_namespace,
};
use super::rules::{self, Joining, Member, PeerKubeconfig, PeerNodes, RangeSource, Target};
use super::{AddArgs, FIELD_MANAGER, PeerError, list, reader};
use crate::cidr::Cidr;
use crate::cli::credentials;
use crate::label_selector::LabelSelector;
use crate::peering::{self, NewPeerSecret, read_identity};

/// The shortest `--token-ttl` the apiserver accepts (TokenRequest's
/// minimum).
const MIN_TOKEN_TTL: Duration = Duration::from_secs(600);

/// Runs `peer add` and returns what it did, one line per step.
pub(super) async fn add(args: &AddArgs) -> Result<String, PeerError> {
    let local_ns = args.local.namespace.namespace.as_str();
    // Checked before anything is read or written.
    if args.token_ttl < MIN_TOKEN_TTL {
        return Err(PeerError::Failed(format!(
            "--token-ttl {}: a token must be valid for at least 10m",
            crate::ops::duration::format(args.token_ttl)
        )));
    }
    let flag_cidrs = parse_endpoint_cidrs(&args.endpoint_cidrs)?;
    let selector = &args.local.peers.peer_selector;
    let labels = selector.labels_that_match().ok_or_else(|| {
        PeerError::Failed(format!(
            "--peer-selector {selector}: no labels make a Secret match it, so the controller would not take the peer Secret"
        ))
    })?;
    let peer_ns = args.remote.peer_namespace.as_deref().unwrap_or(local_ns);
    let local = connect_local(&args.local).await?;
    let peer = connect_peer(
        &args.local,
        &args.remote,
        "which peer? pass --peer-kubeconfig (and/or --peer-context)",
    )
    .await?;

    // Read and decide; nothing is written before the checks pass.
    let local_id = read_identity(&local)
        .await
        .map_err(|e| PeerError::Failed(format!("this cluster's identity (--kubeconfig): {e}")))?;
    let peer_id = read_identity(&peer.client)
        .await
        .map_err(|e| PeerError::Failed(format!("the peer's identity (--peer-kubeconfig): {e}")))?;
    require_namespace(&local, local_ns).await?;
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| rules::secret_name(&peer_id.cluster_id));
    let others: Vec<(String, Option<String>)> = list::inspect(&local, local_ns, selector)
        .await?
        .into_iter()
        .map(|p| (p.name, p.cluster_id))
        .collect();
    let target = target(&local, local_ns, selector, &name, &others).await?;
    rules::check_join(
        Member {
            cluster_id: &local_id.cluster_id,
            clusterset: &local_id.clusterset,
        },
        Member {
            cluster_id: &peer_id.cluster_id,
            clusterset: &peer_id.clusterset,
        },
        &name,
        &others,
        &target,
    )
    .map_err(|refusal| PeerError::Refused {
        hint: rules::hint(refusal.reason),
        refusal,
    })?;
    let flag_ca = credentials::flag_ca(
        "peer-certificate-authority",
        args.peer_certificate_authority.as_deref(),
    )?;
    let (ranges, ranges_from) = endpoint_ranges(
        args.allow_any_endpoint,
        flag_cidrs,
        &peer.client,
        Joining::Peer,
    )
    .await?;
    let endpoint_cidrs: Vec<String> = ranges.iter().map(ToString::to_string).collect();
    let kubeconfig_ca = credentials::kubeconfig_ca("peer-kubeconfig", peer.cluster.ca.as_ref())?;

    let mut out = format!(
        "this cluster: {} (clusterset {}); peer: {} at {}\n",
        local_id.cluster_id, local_id.clusterset, peer_id.cluster_id, peer.cluster.server
    );
    out += &install_reader(&peer, peer_ns).await?;
    let anchors: Api<Secret> = Api::namespaced(peer.client.clone(), peer_ns);
    let anchor = anchors
        .create(
            &PostParams::default(),
            &serde_json::from_value(reader::token_anchor(peer_ns, &local_id.cluster_id))
                .map_err(|e| PeerError::Failed(format!("building the anchor Secret: {e}")))?,
        )
        .await
        .map_err(PeerError::kube(format!(
            "creating an anchor Secret in the peer's namespace {peer_ns}"
        )))?;
    let anchor_name = anchor.name_any();
    // From here on, a failure deletes the new anchor again (and with it
    // the token bound to it).
    let result = async {
        let (token, expires) = credentials::request_token(
            &peer.client,
            peer_ns,
            reader::SERVICE_ACCOUNT,
            &anchor,
            args.token_ttl,
            "the peer",
        )
        .await?;
        let root_ca = credentials::root_ca(&peer.client, peer_ns, Duration::ZERO).await;
        let (ca, ca_origin) =
            rules::choose_ca(flag_ca, kubeconfig_ca, root_ca).map_err(PeerError::Failed)?;
        let user = reader::SERVICE_ACCOUNT;
        let tls_server_name = peer.cluster.tls_server_name.as_deref();
        // The credentials are checked through the admin's address, which
        // this machine reaches; --peer-server is only written.
        let check = rules::render_kubeconfig(&PeerKubeconfig {
            cluster_id: &peer_id.cluster_id,
            server: &peer.cluster.server,
            ca_pem: &ca,
            token: &token,
            tls_server_name,
            user,
        });
        verify(check.as_bytes(), &peer_id.cluster_id).await?;
        let server = args.peer_server.as_deref().unwrap_or(&peer.cluster.server);
        let kubeconfig = rules::render_kubeconfig(&PeerKubeconfig {
            cluster_id: &peer_id.cluster_id,
            server,
            ca_pem: &ca,
            token: &token,
            tls_server_name,
            user,
        });
        Ok::<_, PeerError>((kubeconfig, server.to_owned(), ca_origin, expires))
    }
    .await;
    let (kubeconfig, server, ca_origin, expires) = match result {
        Ok(done) => done,
        Err(error) => {
            let _ = anchors.delete(&anchor_name, &DeleteParams::default()).await;
            return Err(error);
        }
    };
    let asked = Timestamp::now()
        .checked_add(
            k8s_openapi::jiff::SignedDuration::try_from(args.token_ttl).unwrap_or_default(),
        )
        .ok();
    out += &format!(
        "peer: token bound to Secret {peer_ns}/{anchor_name} issued and checked (CA from {ca_origin}); it expires at {expires}\n"
    );
    // The peer's apiserver may cap a token's life
    // (--service-account-max-token-expiration): say so, a day's margin
    // aside.
    if let Some(asked) = asked
        && expires.as_second() + 86_400 < asked.as_second()
    {
        out += &format!(
            "warning: the peer's apiserver issued a shorter token than --token-ttl {} asked for (expires {expires})\n",
            crate::ops::duration::format(args.token_ttl)
        );
    }

    let mut secret = NewPeerSecret {
        name: &name,
        namespace: local_ns,
        labels,
        kubeconfig: kubeconfig.as_bytes(),
        cluster_id: Some(&peer_id.cluster_id),
        token_secret: Some(format!("{peer_ns}/{anchor_name}")),
        peer_namespace: Some(peer_ns),
        endpoint_cidrs: &endpoint_cidrs,
    }
    .build();
    secret.metadata.annotations.get_or_insert_default().insert(
        rules::ANNOTATION_ENDPOINT_CIDRS_FROM.to_owned(),
        ranges_from.annotation().to_owned(),
    );
    let secrets: Api<Secret> = Api::namespaced(local.clone(), local_ns);
    // Forced: the Secret is this command's; a hand-made one it replaces
    // was checked above to name the same cluster.
    if let Err(error) = secrets
        .patch(
            &name,
            &kube::api::PatchParams::apply(FIELD_MANAGER).force(),
            &kube::api::Patch::Apply(&secret),
        )
        .await
    {
        let _ = anchors.delete(&anchor_name, &DeleteParams::default()).await;
        return Err(PeerError::Kube {
            what: format!("applying peer Secret {local_ns}/{name} in this cluster"),
            source: error,
        });
    }
    out += &format!("this cluster: peer Secret {local_ns}/{name} applied (server {server})\n");
    out += &if endpoint_cidrs.is_empty() {
        format!(
            "this cluster: no endpoint ranges recorded ({ranges_from}): the controller accepts the peer's endpoints anywhere its other rules allow\n"
        )
    } else {
        format!(
            "this cluster: the peer's endpoints accepted only in {} (from {ranges_from})\n",
            endpoint_cidrs.join(", ")
        )
    };

    // The rotation: older tokens of this cluster in the peer go (their
    // anchors, or an earlier release's token Secrets).
    let older = delete_tokens(&anchors, peer_ns, &local_id.cluster_id, Some(&anchor_name)).await?;
    for old in older {
        out += &format!("peer: older token of Secret {peer_ns}/{old} revoked\n");
    }
    Ok(out)
}

/// The `--endpoint-cidr` flags, parsed; checked before anything is read
/// or written.
pub(in crate::cli) fn parse_endpoint_cidrs(flags: &[String]) -> Result<Vec<Cidr>, PeerError> {
    flags
        .iter()
        .map(|text| {
            text.parse::<Cidr>()
                .map_err(|e| PeerError::Failed(format!("--endpoint-cidr: {e}")))
        })
        .collect()
}

/// The endpoint ranges to record for the cluster `client` reaches (a peer
/// or a hub member), and where they come from: none with
/// `--allow-any-endpoint` (`allow_any`), `flags` (`--endpoint-cidr`,
/// parsed) when given, else the pod ranges of its Nodes; an error saying
/// what to do when they carry none.
pub(in crate::cli) async fn endpoint_ranges(
    allow_any: bool,
    flags: Vec<Cidr>,
    client: &Client,
    joining: Joining,
) -> Result<(Vec<Cidr>, RangeSource), PeerError> {
    if allow_any {
        return Ok((Vec::new(), RangeSource::AllowAny));
    }
    if !flags.is_empty() {
        return Ok((flags, RangeSource::Flag));
    }
    let ranges = rules::pod_ranges_of_nodes(&cluster_nodes(client).await?, joining)
        .map_err(PeerError::Failed)?;
    Ok((ranges, RangeSource::Nodes))
}

/// A cluster's Nodes, listed in pages; [`PeerNodes::Forbidden`] when the
/// admin kubeconfig may not list them.
async fn cluster_nodes(client: &Client) -> Result<PeerNodes, PeerError> {
    let api = Api::<Node>::all(client.clone());
    let mut nodes = Vec::new();
    let mut page = ListParams::default().limit(500);
    loop {
        let list = match api.list(&page).await {
            Ok(list) => list,
            Err(kube::Error::Api(status)) if status.code == 403 => {
                return Ok(PeerNodes::Forbidden(status.message));
            }
            Err(error) => {
                return Err(PeerError::Kube {
                    what: "listing the cluster's Nodes (for their spec.podCIDRs)".into(),
                    source: error,
                });
            }
        };
        nodes.extend(list.items);
        match list.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => page = page.continue_token(&token),
            None => return Ok(PeerNodes::Read(nodes)),
        }
    }
}

/// What Secret `name` is now, and the cluster id it names as far as
/// `peer list` knew (`others` holds every peer Secret).
async fn target(
    client: &Client,
    namespace: &str,
    selector: &LabelSelector,
    name: &str,
    others: &[(String, Option<String>)],
) -> Result<Target, PeerError> {
    let found = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(PeerError::kube(format!(
            "reading Secret {namespace}/{name} in this cluster"
        )))?;
    Ok(match found {
        None => Target::Absent,
        Some(secret) if peering::is_peer_secret(&secret, selector) => Target::Peer(
            others
                .iter()
                .find(|(other, _)| other == name)
                .and_then(|(_, id)| id.clone()),
        ),
        Some(_) => Target::NotAPeer,
    })
}

/// Applies the objects of `deploy/peer-reader.yaml` in the peer: the
/// namespace, the ServiceAccount, its Role over `namespace` and its
/// ClusterRole, each bound. The ClusterRole is this release's, applied over
/// an earlier one (which read every Service and EndpointSlice).
async fn install_reader(peer: &Endpoint, namespace: &str) -> Result<String, PeerError> {
    let client = &peer.client;
    apply(
        &Api::<Namespace>::all(client.clone()),
        namespace,
        &reader::namespace(namespace),
    )
    .await?;
    apply(
        &Api::<ServiceAccount>::namespaced(client.clone(), namespace),
        reader::SERVICE_ACCOUNT,
        &reader::service_account(namespace),
    )
    .await?;
    apply_forced(
        &Api::<Role>::namespaced(client.clone(), namespace),
        reader::ROLE,
        &reader::role(namespace),
    )
    .await?;
    apply(
        &Api::<RoleBinding>::namespaced(client.clone(), namespace),
        reader::ROLE,
        &reader::role_binding(namespace),
    )
    .await?;
    apply_forced(
        &Api::<ClusterRole>::all(client.clone()),
        reader::CLUSTER_ROLE,
        &reader::cluster_role(),
    )
    .await?;
    let binding = reader::binding_name(namespace);
    apply(
        &Api::<ClusterRoleBinding>::all(client.clone()),
        &binding,
        &reader::binding(namespace),
    )
    .await?;
    Ok(format!(
        "peer: ServiceAccount {namespace}/{sa}, Role and RoleBinding {namespace}/{role}, ClusterRole {role} and ClusterRoleBinding {binding} applied\n",
        sa = reader::SERVICE_ACCOUNT,
        role = reader::ROLE,
    ))
}

/// Checks that the new kubeconfig reads the peer as the controller will
/// (the controller's client, identity read and probe): its identity is
/// `peer_id`, and it may list ServiceExports. A new token may take a moment
/// to be accepted, so 401s are retried briefly.
async fn verify(kubeconfig: &[u8], peer_id: &str) -> Result<(), PeerError> {
    let (client, _) = peering::kubeconfig::client(kubeconfig)
        .await
        .map_err(|e| PeerError::Failed(format!("the peer kubeconfig built: {e}")))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match check_peer(&client).await {
            Ok(identity) if identity.cluster_id == peer_id => return Ok(()),
            Ok(identity) => {
                return Err(PeerError::Failed(format!(
                    "with the new token the peer says it is {}, not {peer_id}",
                    identity.cluster_id
                )));
            }
            Err(error) if Instant::now() < deadline && error.contains("401") => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(error) => {
                return Err(PeerError::Failed(format!(
                    "the new token does not read the peer as the controller will: {error}"
                )));
            }
        }
    }
}
