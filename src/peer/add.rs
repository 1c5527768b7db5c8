//! `clusterset-dns peer add`: reads both identities and checks them before
//! anything is written; then, in the peer, the peer-reader objects and a
//! new token Secret; here, the peer Secret; last, the peer's older tokens
//! for this cluster are deleted (so a re-run is a clean rotation).
//!
//! Why a `kubernetes.io/service-account-token` Secret rather than a
//! TokenRequest: the controller reads its credentials from a Secret and
//! cannot renew them, so an expiring token would cut the peer off on a
//! timer (after the grace period, its services drop everywhere). A token
//! Secret does not expire, is one per reading cluster (labelled with its
//! id), and deleting it revokes that cluster's token (within moments: the
//! apiserver checks token Secrets through its cache) without touching the
//! others. Rotating is running `peer add` again.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt};

use super::cluster::{
    Endpoint, apply, check_peer, connect_local, connect_peer, delete_tokens, require_namespace,
};
use super::rules::{self, Member, PeerKubeconfig, Target};
use super::{AddArgs, FIELD_MANAGER, PeerError, list, reader};
use crate::cidr::Cidr;
use crate::peering::kubeconfig::CaSource;
use crate::peering::{
    self, ANNOTATION_CLUSTER_ID, ANNOTATION_ENDPOINT_CIDRS, ANNOTATION_TOKEN_SECRET,
    KUBECONFIG_KEY, PEER_LABEL, read_identity,
};

/// How long the peer's kube-controller-manager may take to fill in a new
/// token Secret.
const TOKEN_WAIT: Duration = Duration::from_secs(30);

/// Runs `peer add` and returns what it did, one line per step.
pub async fn add(args: &AddArgs) -> Result<String, PeerError> {
    let local_ns = args.local.namespace.as_str();
    // Checked before anything is read or written.
    let endpoint_cidrs = args
        .endpoint_cidrs
        .iter()
        .map(|text| {
            text.parse::<Cidr>()
                .map(|cidr| cidr.to_string())
                .map_err(|e| PeerError::Failed(format!("--endpoint-cidr: {e}")))
        })
        .collect::<Result<Vec<String>, PeerError>>()?;
    let peer_ns = args.remote.peer_namespace.as_deref().unwrap_or(local_ns);
    let local = connect_local(&args.local).await?;
    let peer = connect_peer(
        &args.local,
        &args.remote,
        "which peer? pass --peer-kubeconfig (and/or --peer-context)",
    )
    .await?;

    // Read and decide; nothing is written before the checks pass.
    let local_id = read_identity(&local.client)
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
    let others: Vec<(String, Option<String>)> = list::inspect(&local.client, local_ns)
        .await?
        .into_iter()
        .map(|p| (p.name, p.cluster_id))
        .collect();
    let target = target(&local.client, local_ns, &name, &others).await?;
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
    let flag_ca = match &args.peer_certificate_authority {
        Some(path) => Some(std::fs::read(path).map_err(|e| {
            PeerError::Failed(format!(
                "--peer-certificate-authority {}: {e}",
                path.display()
            ))
        })?),
        None => None,
    };
    let kubeconfig_ca = match &peer.cluster.ca {
        Some(CaSource::Data(pem)) => Some(pem.clone()),
        Some(CaSource::File(path)) => Some(std::fs::read(path).map_err(|e| {
            PeerError::Failed(format!(
                "--peer-kubeconfig: certificate-authority {}: {e}",
                path.display()
            ))
        })?),
        None => None,
    };

    let mut out = format!(
        "this cluster: {} (clusterset {}); peer: {} at {}\n",
        local_id.cluster_id, local_id.clusterset, peer_id.cluster_id, peer.cluster.server
    );
    out += &install_reader(&peer, peer_ns).await?;
    let tokens: Api<Secret> = Api::namespaced(peer.client.clone(), peer_ns);
    let created = tokens
        .create(
            &PostParams::default(),
            &serde_json::from_value(reader::token_secret(peer_ns, &local_id.cluster_id))
                .map_err(|e| PeerError::Failed(format!("building the token Secret: {e}")))?,
        )
        .await
        .map_err(PeerError::kube(format!(
            "creating a token Secret in the peer's namespace {peer_ns}"
        )))?;
    let token_name = created.name_any();
    // From here on, a failure deletes the new token again.
    let result = async {
        let (token, token_ca) = wait_for_token(&tokens, &token_name).await?;
        let (ca, ca_origin) =
            rules::choose_ca(flag_ca, kubeconfig_ca, token_ca).map_err(PeerError::Failed)?;
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
        Ok::<_, PeerError>((kubeconfig, server.to_owned(), ca_origin))
    }
    .await;
    let (kubeconfig, server, ca_origin) = match result {
        Ok(done) => done,
        Err(error) => {
            let _ = tokens.delete(&token_name, &DeleteParams::default()).await;
            return Err(error);
        }
    };
    out += &format!(
        "peer: token Secret {peer_ns}/{token_name} created and checked (CA from {ca_origin})\n"
    );

    let mut annotations = serde_json::json!({
        ANNOTATION_CLUSTER_ID: peer_id.cluster_id,
        ANNOTATION_TOKEN_SECRET: format!("{peer_ns}/{token_name}"),
    });
    if !endpoint_cidrs.is_empty() {
        annotations[ANNOTATION_ENDPOINT_CIDRS] = endpoint_cidrs.join(",").into();
    }
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "namespace": local_ns,
            "labels": {PEER_LABEL: "true"},
            "annotations": annotations,
        },
        "data": {KUBECONFIG_KEY: k8s_openapi::ByteString(kubeconfig.into_bytes())},
    });
    let secrets: Api<Secret> = Api::namespaced(local.client.clone(), local_ns);
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
        let _ = tokens.delete(&token_name, &DeleteParams::default()).await;
        return Err(PeerError::Kube {
            what: format!("applying peer Secret {local_ns}/{name} in this cluster"),
            source: error,
        });
    }
    out += &format!("this cluster: peer Secret {local_ns}/{name} applied (server {server})\n");

    // The rotation: older tokens of this cluster in the peer go.
    let older = delete_tokens(&tokens, peer_ns, &local_id.cluster_id, Some(&token_name)).await?;
    for old in older {
        out += &format!("peer: older token Secret {peer_ns}/{old} deleted (revoked)\n");
    }
    Ok(out)
}

/// What Secret `name` is now, and the cluster id it names as far as
/// `peer list` knew (`others` holds every peer Secret).
async fn target(
    client: &Client,
    namespace: &str,
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
        Some(secret) if peering::is_peer_secret(&secret) => Target::Peer(
            others
                .iter()
                .find(|(other, _)| other == name)
                .and_then(|(_, id)| id.clone()),
        ),
        Some(_) => Target::NotAPeer,
    })
}

/// Applies the namespace, ServiceAccount and binding of
/// `deploy/peer-reader.yaml` in the peer, and its ClusterRole when missing
/// (one that exists is left as it is: the token's check shows whether it
/// grants enough).
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
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let role = if roles
        .get_opt(reader::CLUSTER_ROLE)
        .await
        .map_err(PeerError::kube("reading the peer's ClusterRole"))?
        .is_some()
    {
        "exists"
    } else {
        apply(&roles, reader::CLUSTER_ROLE, &reader::cluster_role()).await?;
        "created"
    };
    let binding = reader::binding_name(namespace);
    apply(
        &Api::<ClusterRoleBinding>::all(client.clone()),
        &binding,
        &reader::binding(namespace),
    )
    .await?;
    Ok(format!(
        "peer: ServiceAccount {namespace}/{}, ClusterRoleBinding {binding} applied; ClusterRole {} {role}\n",
        reader::SERVICE_ACCOUNT,
        reader::CLUSTER_ROLE
    ))
}

/// Waits until the peer's kube-controller-manager has filled in token
/// Secret `name`; returns the token and the `ca.crt` it added.
async fn wait_for_token(
    tokens: &Api<Secret>,
    name: &str,
) -> Result<(String, Option<Vec<u8>>), PeerError> {
    let deadline = Instant::now() + TOKEN_WAIT;
    loop {
        let secret = tokens.get(name).await.map_err(PeerError::kube(format!(
            "reading token Secret {name} in the peer"
        )))?;
        let data = secret.data.unwrap_or_default();
        if let Some(token) = data.get("token").filter(|t| !t.0.is_empty()) {
            let token = String::from_utf8(token.0.clone()).map_err(|_| {
                PeerError::Failed(format!("token Secret {name}: token is not UTF-8"))
            })?;
            return Ok((token, data.get("ca.crt").map(|c| c.0.clone())));
        }
        if Instant::now() >= deadline {
            return Err(PeerError::Failed(format!(
                "the peer's kube-controller-manager did not fill in token Secret {name} within {TOKEN_WAIT:?} (is its token controller running?)"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
