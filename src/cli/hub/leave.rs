//! `hub leave`: a member's token anchors, namespace and read binding
//! deleted on the hub, so every token the member held stops working.

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, ListParams};

use super::{LeaveArgs, PeerError, connect_hub, connect_member};
use crate::hub::objects::reader_binding;
use crate::hub::{HUB_SECRET, LABEL_MEMBER, member_namespace};

/// Removes member `args.member` from the hub.
pub(super) async fn leave(args: &LeaveArgs) -> Result<String, PeerError> {
    let id = &args.member;
    let namespace = member_namespace(id).map_err(PeerError::Failed)?;
    let hub = connect_hub(&args.hub).await?;
    let namespaces: Api<Namespace> = Api::all(hub.client.clone());
    let found = namespaces
        .get_opt(&namespace)
        .await
        .map_err(PeerError::kube(format!(
            "reading namespace {namespace} on the hub"
        )))?;
    let mut out = String::new();
    match found {
        Some(found) => {
            let bound = found
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_MEMBER));
            if bound.map(String::as_str) != Some(id.as_str()) {
                return Err(PeerError::Failed(format!(
                    "namespace {namespace} on the hub is not member {id}'s ({LABEL_MEMBER}: {bound:?}); nothing was deleted"
                )));
            }
            // The tokens go first, whatever the hub's namespace controller
            // does with the rest: each is bound to an anchor.
            let anchors: Api<Secret> = Api::namespaced(hub.client.clone(), &namespace);
            anchors
                .delete_collection(
                    &DeleteParams::default(),
                    &ListParams::default().labels(&format!("{LABEL_MEMBER}={id}")),
                )
                .await
                .map_err(PeerError::kube(format!(
                    "deleting the token anchors of {namespace}"
                )))?;
            namespaces
                .delete(&namespace, &DeleteParams::default())
                .await
                .map_err(PeerError::kube(format!(
                    "deleting namespace {namespace} on the hub"
                )))?;
            out +=
                &format!("hub: namespace {namespace} deleted: member {id}'s tokens are revoked\n");
        }
        None => out += &format!("hub: no namespace {namespace}\n"),
    }
    let binding = reader_binding(id);
    let bindings: Api<ClusterRoleBinding> = Api::all(hub.client.clone());
    if bindings
        .delete(&binding, &DeleteParams::default())
        .await
        .map(|_| true)
        .or_else(not_found)
        .map_err(PeerError::kube(format!(
            "deleting ClusterRoleBinding {binding} on the hub"
        )))?
    {
        out += &format!("hub: ClusterRoleBinding {binding} deleted\n");
    }
    if let Some(member) = connect_member(&args.member_cluster).await? {
        let ns = &args.member_cluster.namespace.namespace;
        let secrets: Api<Secret> = Api::namespaced(member.client.clone(), ns);
        if secrets
            .delete(HUB_SECRET, &DeleteParams::default())
            .await
            .map(|_| true)
            .or_else(not_found)
            .map_err(PeerError::kube(format!(
                "deleting Secret {ns}/{HUB_SECRET} in the member"
            )))?
        {
            out += &format!("member: Secret {ns}/{HUB_SECRET} deleted\n");
        }
    }
    Ok(out)
}

/// `Ok(false)` for a 404: what was to be deleted is already gone.
fn not_found(error: kube::Error) -> Result<bool, kube::Error> {
    match &error {
        kube::Error::Api(status) if status.code == 404 => Ok(false),
        _ => Err(error),
    }
}
