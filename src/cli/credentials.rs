//! What `peer add` and `hub join` both do to hand a cluster a credential
//! for another: a bound token of a ServiceAccount there, and the CA that
//! verifies that apiserver (a flag's file, the admin kubeconfig's, or the
//! cluster's `kube-root-ca.crt`, chosen by [`super::peer::rules::choose_ca`]).

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};

use super::peer::PeerError;
use crate::peering::kubeconfig::CaSource;

/// Issues a token of ServiceAccount `namespace/service_account` valid for
/// `ttl` (or what the apiserver caps it to) and bound to `anchor`: deleting
/// the anchor revokes it. Returns it and when it expires; `cluster` names
/// the cluster in errors ("the peer", "the hub").
pub(super) async fn request_token(
    client: &Client,
    namespace: &str,
    service_account: &str,
    anchor: &Secret,
    ttl: Duration,
    cluster: &str,
) -> Result<(String, Timestamp), PeerError> {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Secret".into()),
                name: anchor.metadata.name.clone(),
                uid: anchor.metadata.uid.clone(),
            }),
            expiration_seconds: Some(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX)),
        },
        ..TokenRequest::default()
    };
    let issued = Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(service_account, &PostParams::default(), &request)
        .await
        .map_err(PeerError::kube(format!(
            "requesting a token of ServiceAccount {namespace}/{service_account} in {cluster}"
        )))?;
    let status = issued.status.ok_or_else(|| {
        PeerError::Failed(format!(
            "{cluster}'s TokenRequest came back without a token"
        ))
    })?;
    Ok((status.token, status.expiration_timestamp.0))
}

/// The CA the cluster's pods trust: `ca.crt` of its `kube-root-ca.crt`
/// ConfigMap in `namespace`, when there is one. Its kube-controller-manager
/// publishes it into a new namespace moments after it is made: up to
/// `wait` is given for that.
pub(super) async fn root_ca(client: &Client, namespace: &str, wait: Duration) -> Option<Vec<u8>> {
    let deadline = Instant::now() + wait;
    loop {
        let found = Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .get_opt("kube-root-ca.crt")
            .await
            .ok()
            .flatten();
        if let Some(pem) = found
            .and_then(|c| c.data)
            .and_then(|mut d| d.remove("ca.crt"))
        {
            return Some(pem.into_bytes());
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The PEM of the CA file `--<flag> path`, when given.
pub(super) fn flag_ca(flag: &str, path: Option<&Path>) -> Result<Option<Vec<u8>>, PeerError> {
    path.map(|path| {
        std::fs::read(path)
            .map_err(|e| PeerError::Failed(format!("--{flag} {}: {e}", path.display())))
    })
    .transpose()
}

/// The PEM of an admin kubeconfig's CA (inline or a file), when it has
/// one; `flag` names the kubeconfig in errors.
pub(super) fn kubeconfig_ca(
    flag: &str,
    ca: Option<&CaSource>,
) -> Result<Option<Vec<u8>>, PeerError> {
    match ca {
        Some(CaSource::Data(pem)) => Ok(Some(pem.clone())),
        Some(CaSource::File(path)) => std::fs::read(path).map(Some).map_err(|e| {
            PeerError::Failed(format!(
                "--{flag}: certificate-authority {}: {e}",
                path.display()
            ))
        }),
        None => Ok(None),
    }
}
