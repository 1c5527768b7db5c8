//! `hub join`: a member's place on the hub, its token, and the hub Secret
//! in the member.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};

use super::{JoinArgs, PeerError, apply_all, connect_hub, connect_member};
use crate::api::PublishedService;
use crate::cli::credentials;
use crate::cli::peer::add::{endpoint_ranges, parse_endpoint_cidrs};
use crate::cli::peer::rules::{Joining, PeerKubeconfig, RangeSource, choose_ca, render_kubeconfig};
use crate::hub::objects::{member_objects, token_anchor};
use crate::hub::{
    HUB_LABEL, HUB_SECRET, LABEL_MEMBER, MANAGED_BY, MEMBER_SERVICE_ACCOUNT, MemberQuota, QUOTA,
    member_namespace,
};
use crate::peering::{ANNOTATION_CLUSTER_ID, KUBECONFIG_KEY, read_identity};

/// The shortest token a member is given: the controller warns a day
/// before expiry, and a token that expires within minutes of the join is
/// a mistake.
const MIN_TOKEN_TTL: Duration = Duration::from_secs(600);

/// Joins the member named by `args` to the hub; returns what was done.
pub(super) async fn join(args: &JoinArgs) -> Result<String, PeerError> {
    if args.token_ttl < MIN_TOKEN_TTL {
        return Err(PeerError::Failed("--token-ttl: at least 10m".to_owned()));
    }
    let flag_cidrs = parse_endpoint_cidrs(&args.endpoint_cidrs)?;
    let member = connect_member(&args.member).await?.ok_or_else(|| {
        PeerError::Failed(
            "hub join needs the member: --member-kubeconfig or --member-context".into(),
        )
    })?;
    let hub = connect_hub(&args.hub).await?;
    let identity = read_identity(&member.client)
        .await
        .map_err(|e| PeerError::Failed(format!("reading the member's cluster id: {e}")))?;
    let id = identity.cluster_id;
    let namespace = member_namespace(&id).map_err(PeerError::Failed)?;
    // The namespace is the member: one bound to another id is not taken.
    let existing = Api::<Namespace>::all(hub.client.clone())
        .get_opt(&namespace)
        .await
        .map_err(PeerError::kube(format!(
            "reading namespace {namespace} on the hub"
        )))?;
    if let Some(existing) = existing {
        let bound = existing.labels().get(LABEL_MEMBER).cloned();
        if bound.as_deref() != Some(id.as_str()) {
            return Err(PeerError::Failed(format!(
                "namespace {namespace} on the hub exists and is not bound to member {id} ({LABEL_MEMBER}: {bound:?}); nothing was written"
            )));
        }
    }
    let (ranges, ranges_from) = endpoint_ranges(
        args.allow_any_endpoint,
        flag_cidrs,
        &member.client,
        Joining::Member,
    )
    .await?;
    let quota = MemberQuota {
        published_services: args.max_exports,
        slices: args.max_slices,
    };
    let recorded = (ranges_from != RangeSource::AllowAny).then_some(ranges.as_slice());
    let objects = member_objects(&id, recorded, quota).map_err(PeerError::Failed)?;
    let mut out = apply_all(&hub.client, &objects).await?;
    out += &match recorded {
        Some(_) => format!(
            "hub: the member's endpoints accepted only in {} (from {})\n",
            ranges
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            match ranges_from {
                RangeSource::Flag => "--endpoint-cidr",
                _ => "the member's Nodes' spec.podCIDRs",
            }
        ),
        None => "hub: no endpoint ranges recorded (--allow-any-endpoint): members accept the member's endpoints anywhere their other rules allow\n".to_owned(),
    };
    quota_counted(&hub.client, &namespace).await?;
    out += &format!("hub: quota of {namespace} counted by the hub\n");

    let anchors: Api<Secret> = Api::namespaced(hub.client.clone(), &namespace);
    let anchor: Secret = serde_json::from_value(token_anchor(&id).map_err(PeerError::Failed)?)
        .map_err(|e| PeerError::Failed(format!("building the token anchor: {e}")))?;
    let anchor = anchors
        .create(&PostParams::default(), &anchor)
        .await
        .map_err(PeerError::kube(format!(
            "creating a token anchor in {namespace} on the hub"
        )))?;
    let (token, expires) = credentials::request_token(
        &hub.client,
        &namespace,
        MEMBER_SERVICE_ACCOUNT,
        &anchor,
        args.token_ttl,
        "the hub",
    )
    .await?;

    let flag_ca = credentials::flag_ca(
        "hub-certificate-authority",
        args.hub_certificate_authority.as_deref(),
    )?;
    let kubeconfig_ca = credentials::kubeconfig_ca("kubeconfig", hub.cluster.ca.as_ref())?;
    // The namespace was just made: its kube-root-ca.crt may follow.
    let root_ca = credentials::root_ca(&hub.client, &namespace, Duration::from_secs(5)).await;
    let (ca, ca_origin) = choose_ca(flag_ca, kubeconfig_ca, root_ca).map_err(PeerError::Failed)?;
    let server = args.hub_server.as_deref().unwrap_or(&hub.cluster.server);
    let user = format!("{namespace}-{MEMBER_SERVICE_ACCOUNT}");
    let kubeconfig = |server: &str| {
        render_kubeconfig(&PeerKubeconfig {
            cluster_id: "hub",
            server,
            ca_pem: &ca,
            token: &token,
            tls_server_name: hub.cluster.tls_server_name.as_deref(),
            user: &user,
        })
    };
    // Checked through the admin's address, which this machine reaches;
    // --hub-server is only written.
    verify(kubeconfig(&hub.cluster.server).as_bytes()).await?;
    out += &format!(
        "hub: token of {namespace}/{MEMBER_SERVICE_ACCOUNT} issued and checked (CA from {ca_origin}); it expires at {expires}\n"
    );

    let ns = &args.member.namespace.namespace;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(HUB_SECRET.into()),
            namespace: Some(ns.clone()),
            labels: Some(BTreeMap::from([
                (HUB_LABEL.into(), "true".into()),
                ("app.kubernetes.io/managed-by".into(), MANAGED_BY.into()),
            ])),
            annotations: Some(BTreeMap::from([(ANNOTATION_CLUSTER_ID.into(), id.clone())])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            KUBECONFIG_KEY.into(),
            ByteString(kubeconfig(server).into_bytes()),
        )])),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(member.client.clone(), ns)
        .patch(
            HUB_SECRET,
            &PatchParams::apply(MANAGED_BY).force(),
            &Patch::Apply(&secret),
        )
        .await
        .map_err(PeerError::kube(format!(
            "writing Secret {ns}/{HUB_SECRET} in the member"
        )))?;
    out += &format!("member: Secret {ns}/{HUB_SECRET} written (hub {server}, member {id})\n");

    // The new token works: the member's earlier ones are revoked.
    let anchor_name = anchor.name_any();
    let older = anchors
        .list(&ListParams::default().labels(&format!("{LABEL_MEMBER}={id}")))
        .await
        .map_err(PeerError::kube(format!(
            "listing token anchors in {namespace} on the hub"
        )))?;
    for old in older.items.iter().map(ResourceExt::name_any) {
        if old != anchor_name {
            anchors
                .delete(&old, &DeleteParams::default())
                .await
                .map_err(PeerError::kube(format!(
                    "deleting token anchor {namespace}/{old}"
                )))?;
            out += &format!("hub: earlier token {namespace}/{old} revoked\n");
        }
    }
    Ok(out)
}

/// How long `hub join` waits for the hub to count a member's quota: its
/// quota controller discovers a new CRD (the PublishedService of a fresh
/// `hub init`) on its own schedule, about every 30 s.
const QUOTA_WAIT: Duration = Duration::from_secs(90);

/// Waits until the hub's quota controller has counted the quota of
/// `namespace`: until then the hub refuses every write the quota covers
/// ("status unknown for quota"), so a member could not publish.
async fn quota_counted(client: &Client, namespace: &str) -> Result<(), PeerError> {
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), namespace);
    let deadline = Instant::now() + QUOTA_WAIT;
    loop {
        let quota = quotas.get(QUOTA).await.map_err(PeerError::kube(format!(
            "reading the quota of {namespace} on the hub"
        )))?;
        let wanted = quota.spec.and_then(|s| s.hard).unwrap_or_default();
        let status = quota.status.unwrap_or_default();
        let (hard, used) = (
            status.hard.unwrap_or_default(),
            status.used.unwrap_or_default(),
        );
        if wanted
            .iter()
            .all(|(k, v)| hard.get(k) == Some(v) && used.contains_key(k))
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(PeerError::Failed(format!(
                "the hub has not counted the quota of {namespace} after {}s, and refuses the member's writes until it has: does the hub run kube-controller-manager (its resource quota controller)? Run hub join again once it does",
                QUOTA_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Checks that the new kubeconfig reads the publications hub-wide, as the
/// member's controller will. A new token may take a moment to be
/// accepted, so 401s are retried briefly.
async fn verify(kubeconfig: &[u8]) -> Result<(), PeerError> {
    let (client, _) = crate::peering::kubeconfig::client(kubeconfig)
        .await
        .map_err(|e| PeerError::Failed(format!("the member's hub kubeconfig: {e}")))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Api::<PublishedService>::all(client.clone())
            .list(&ListParams::default().limit(1))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 401 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => {
                return Err(PeerError::Failed(format!(
                    "with the new token the hub refuses to list publications: {}",
                    crate::error::Chain(&error)
                )));
            }
        }
    }
}
