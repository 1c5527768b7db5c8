//! `hub list`: the hub's members, read from their namespaces.

use std::fmt::Write as _;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ResourceQuota, Secret};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::{HubClusterArgs, PeerError, connect_hub};
use crate::hub::{LABEL_MEMBER, MEMBER_LEASE, MEMBER_RECORD, QUOTA, read_member_record};

/// One member as listed.
struct Row {
    id: String,
    namespace: String,
    lease: String,
    exports: String,
    slices: String,
    tokens: usize,
    endpoints: String,
}

/// The members of the hub, a line each.
pub(super) async fn list(args: &HubClusterArgs) -> Result<String, PeerError> {
    let hub = connect_hub(args).await?;
    let namespaces = Api::<Namespace>::all(hub.client.clone())
        .list(&ListParams::default().labels(LABEL_MEMBER))
        .await
        .map_err(PeerError::kube("listing member namespaces on the hub"))?;
    let mut rows = Vec::new();
    for namespace in &namespaces.items {
        let name = namespace.name_any();
        let id = namespace
            .labels()
            .get(LABEL_MEMBER)
            .cloned()
            .unwrap_or_default();
        rows.push(row(&hub.client, id, name).await?);
    }
    let mut out =
        String::from("MEMBER\tNAMESPACE\tLEASE RENEWED\tEXPORTS\tSLICES\tTOKENS\tENDPOINTS\n");
    for r in &rows {
        let _ = writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
            r.id, r.namespace, r.lease, r.exports, r.slices, r.tokens, r.endpoints
        );
    }
    Ok(out)
}

async fn row(client: &Client, id: String, namespace: String) -> Result<Row, PeerError> {
    let lease = Api::<Lease>::namespaced(client.clone(), &namespace)
        .get_opt(MEMBER_LEASE)
        .await
        .map_err(PeerError::kube(format!("reading the Lease of {namespace}")))?
        .and_then(|l| l.spec?.renew_time)
        .map_or_else(
            || "never".to_owned(),
            |t| {
                let age = k8s_openapi::jiff::Timestamp::now().duration_since(t.0);
                format!("{}s ago", age.as_secs())
            },
        );
    let quota = Api::<ResourceQuota>::namespaced(client.clone(), &namespace)
        .get_opt(QUOTA)
        .await
        .map_err(PeerError::kube(format!("reading the quota of {namespace}")))?;
    let used = |resource: &str| {
        let status = quota.as_ref().and_then(|q| q.status.as_ref());
        let used = status
            .and_then(|s| s.used.as_ref()?.get(resource))
            .map_or("?".to_owned(), |q| q.0.clone());
        // The limit as set: the status follows it once the hub's quota
        // controller has synced.
        let hard = quota
            .as_ref()
            .and_then(|q| q.spec.as_ref()?.hard.as_ref()?.get(resource))
            .map_or("?".to_owned(), |q| q.0.clone());
        format!("{used}/{hard}")
    };
    let tokens = Api::<Secret>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default().labels(&format!("{LABEL_MEMBER}={id}")))
        .await
        .map_err(PeerError::kube(format!(
            "listing the tokens of {namespace}"
        )))?
        .items
        .len();
    // What importers hold the member's endpoints to (its record).
    let record = Api::<ConfigMap>::namespaced(client.clone(), &namespace)
        .get_opt(MEMBER_RECORD)
        .await
        .map_err(PeerError::kube(format!(
            "reading the record of {namespace}"
        )))?;
    let endpoints = match record.map(|r| read_member_record(&r.data.unwrap_or_default())) {
        Some(Ok(Some(ranges))) => ranges
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
        Some(Ok(None)) => "any".to_owned(),
        Some(Err(_)) | None => "none (no valid record: hub join again)".to_owned(),
    };
    Ok(Row {
        endpoints,
        exports: used("count/publishedservices.clusterset-dns.io"),
        slices: used("count/endpointslices.discovery.k8s.io"),
        id,
        namespace,
        lease,
        tokens,
    })
}
