//! The pure rules of `clusterset-dns peer`: which cluster a kubeconfig
//! names, which CA a peer kubeconfig gets, which endpoint ranges a peer
//! Secret records, what it looks like, whether a join is allowed, whether
//! the controller's latest refusal still holds, and how `peer list`
//! prints. No I/O: the commands read, these decide.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use data_encoding::BASE64;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff;
use serde::Serialize;

use crate::cidr::Cidr;
use crate::peering::membership::{Refusal, local_identity_problem, peer_refusal};
use crate::peering::reason;

/// True when `pem` holds at least one PEM certificate.
pub(super) fn is_pem_certificate(pem: &[u8]) -> bool {
    std::str::from_utf8(pem).is_ok_and(|text| text.contains("-----BEGIN CERTIFICATE-----"))
}

/// Where the CA written into a peer kubeconfig came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::cli) enum CaOrigin {
    /// `--peer-certificate-authority`.
    Flag,
    /// The peer kubeconfig's cluster entry.
    Kubeconfig,
    /// The `ca.crt` of the peer's `kube-root-ca.crt` ConfigMap (its
    /// kube-controller-manager's `--root-ca-file`, what its pods trust).
    RootCa,
}

impl std::fmt::Display for CaOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Flag => "--peer-certificate-authority",
            Self::Kubeconfig => "the peer kubeconfig",
            Self::RootCa => "the peer's kube-root-ca.crt ConfigMap",
        })
    }
}

/// The CA a peer kubeconfig gets: the flag, else the peer kubeconfig's,
/// else the peer's `kube-root-ca.crt`. A peer kubeconfig never skips TLS
/// verification, so no CA at all is an error; so is one that holds no PEM
/// certificate.
pub(in crate::cli) fn choose_ca(
    flag: Option<Vec<u8>>,
    kubeconfig: Option<Vec<u8>>,
    root_ca: Option<Vec<u8>>,
) -> Result<(Vec<u8>, CaOrigin), String> {
    let (pem, origin) = flag
        .map(|pem| (pem, CaOrigin::Flag))
        .or_else(|| kubeconfig.map(|pem| (pem, CaOrigin::Kubeconfig)))
        .or_else(|| root_ca.map(|pem| (pem, CaOrigin::RootCa)))
        .ok_or(
            "no CA for the peer's apiserver: the peer kubeconfig has none and the peer no kube-root-ca.crt ConfigMap; pass --peer-certificate-authority FILE",
        )?;
    if !is_pem_certificate(&pem) {
        return Err(format!("the CA from {origin} holds no PEM certificate"));
    }
    Ok((pem, origin))
}

/// Annotation on a peer Secret written by `peer add`: where its endpoint
/// ranges came from ([`RangeSource::annotation`]). Informational (`peer
/// list` shows it); the controller reads only
/// [`crate::peering::ANNOTATION_ENDPOINT_CIDRS`].
pub(super) const ANNOTATION_ENDPOINT_CIDRS_FROM: &str = "clusterset-dns.io/endpoint-cidrs-from";

/// Where the endpoint ranges `peer add` records for a peer came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::cli) enum RangeSource {
    /// `--endpoint-cidr`, given explicitly.
    Flag,
    /// The `spec.podCIDRs` of the peer's Nodes (the default).
    Nodes,
    /// `--allow-any-endpoint`: none recorded.
    AllowAny,
}

impl RangeSource {
    /// Its value of [`ANNOTATION_ENDPOINT_CIDRS_FROM`].
    pub(super) fn annotation(self) -> &'static str {
        match self {
            Self::Flag => "endpoint-cidr",
            Self::Nodes => "nodes",
            Self::AllowAny => "allow-any-endpoint",
        }
    }

    /// The source an annotation value names, if any.
    pub(super) fn from_annotation(value: &str) -> Option<Self> {
        [Self::Flag, Self::Nodes, Self::AllowAny]
            .into_iter()
            .find(|source| source.annotation() == value)
    }
}

impl std::fmt::Display for RangeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Flag => "--endpoint-cidr",
            Self::Nodes => "the peer's Nodes' spec.podCIDRs",
            Self::AllowAny => "--allow-any-endpoint",
        })
    }
}

/// What reading the peer's Nodes gave.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::cli) enum PeerNodes {
    /// The Nodes.
    Read(Vec<Node>),
    /// The admin kubeconfig may not list Nodes (403): the apiserver's
    /// message.
    Forbidden(String),
}

/// Which command records a cluster's pod ranges, for its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::cli) enum Joining {
    /// `peer add`: on the peer Secret, for this cluster's controller.
    Peer,
    /// `hub join`: in the member's record on the hub, for every member.
    Member,
}

impl Joining {
    /// What the cluster is called.
    fn noun(self) -> &'static str {
        match self {
            Self::Peer => "peer",
            Self::Member => "member",
        }
    }

    /// Where the ranges go, and who holds the cluster to them.
    fn record(self) -> &'static str {
        match self {
            Self::Peer => {
                "peer add records them on the peer Secret (from the podCIDRs of the peer's Nodes by default) so that this cluster's controller refuses any endpoint the peer publishes outside them"
            }
            Self::Member => {
                "hub join records them in the member's record on the hub (from the podCIDRs of the member's Nodes by default) so that every member's controller refuses any endpoint the member publishes outside them"
            }
        }
    }

    /// The flag of the cluster's admin kubeconfig.
    fn kubeconfig_flag(self) -> &'static str {
        match self {
            Self::Peer => "--peer-kubeconfig",
            Self::Member => "--member-kubeconfig",
        }
    }
}

/// The pod ranges the cluster's Nodes carry (`spec.podCIDRs`, else
/// `spec.podCIDR`), merged ([`merge_ranges`]); what to do instead when they
/// carry none or may not be read ([`no_pod_ranges`]). A range that does not
/// parse is an error naming its Node.
pub(in crate::cli) fn pod_ranges_of_nodes(
    nodes: &PeerNodes,
    joining: Joining,
) -> Result<Vec<Cidr>, String> {
    let noun = joining.noun();
    let nodes = match nodes {
        PeerNodes::Read(nodes) => nodes,
        PeerNodes::Forbidden(message) => {
            return Err(no_pod_ranges(
                &format!(
                    "listing the {noun}'s Nodes with {} was forbidden (403: {message})",
                    joining.kubeconfig_flag()
                ),
                joining,
            ));
        }
    };
    let mut ranges = Vec::new();
    for node in nodes {
        let spec = node.spec.as_ref();
        let listed = spec
            .and_then(|s| s.pod_cidrs.clone())
            .filter(|list| !list.is_empty())
            .or_else(|| spec.and_then(|s| s.pod_cidr.clone()).map(|one| vec![one]))
            .unwrap_or_default();
        for text in listed {
            ranges.push(text.parse::<Cidr>().map_err(|e| {
                format!(
                    "Node {} of the {noun}: spec.podCIDRs: {e}; pass --endpoint-cidr <cidr> for each pod range of the {noun}",
                    node.metadata.name.as_deref().unwrap_or("?")
                )
            })?);
        }
    }
    if ranges.is_empty() {
        let why = match nodes.len() {
            0 => format!("the {noun} has no Nodes"),
            1 => "its one Node has no spec.podCIDRs".to_owned(),
            n => format!("none of its {n} Nodes has spec.podCIDRs"),
        };
        return Err(no_pod_ranges(&why, joining));
    }
    Ok(merge_ranges(&ranges))
}

/// Why `peer add` or `hub join` stops when it does not know the cluster's
/// pod ranges (`why`), and the two ways on.
pub(in crate::cli) fn no_pod_ranges(why: &str, joining: Joining) -> String {
    let noun = joining.noun();
    format!(
        "the {noun}'s pod ranges are not known: {why}. {}; many CNIs allocate pod addresses \
         elsewhere (Cilium cluster-pool, Calico IPAM, VPC-native clusters). Pass \
         --endpoint-cidr <cidr> for each of the {noun}'s pod ranges (its CNI's pod pools), or \
         --allow-any-endpoint to record none: the controller then accepts any endpoint address \
         of the {noun} that its other rules allow (not this cluster's own Service, pod, Node or \
         apiserver addresses, nor loopback, link-local, multicast, metadata or reserved ones), \
         so the {noun} may point this cluster's clients at any other host they reach. \
         Nothing was written",
        joining.record()
    )
}

/// `ranges` as few CIDRs as cover exactly the same addresses: duplicates
/// and ranges inside another dropped, sibling halves joined (`10.1.0.0/24`
/// and `10.1.1.0/24` are `10.1.0.0/23`); IPv4 first, each family in
/// address order.
pub(super) fn merge_ranges(ranges: &[Cidr]) -> Vec<Cidr> {
    let mut merged = Vec::new();
    for v4 in [true, false] {
        let width: u32 = if v4 { 32 } else { 128 };
        // (network as a number, prefix length), in address order, the
        // wider of two ranges at one address first.
        let mut family: Vec<(u128, u32)> = ranges
            .iter()
            .filter(|cidr| cidr.network().is_ipv4() == v4)
            .map(|cidr| {
                let network = match cidr.network() {
                    IpAddr::V4(ip) => u128::from(u32::from(ip)),
                    IpAddr::V6(ip) => u128::from(ip),
                };
                (network, u32::from(cidr.prefix_len()))
            })
            .collect();
        family.sort_unstable();
        // Whether the range (network, prefix) holds `address`.
        let holds = |network: u128, prefix: u32, address: u128| {
            prefix == 0 || network >> (width - prefix) == address >> (width - prefix)
        };
        let mut kept: Vec<(u128, u32)> = Vec::new();
        for (network, prefix) in family {
            // CIDRs are nested or disjoint, and none kept starts later:
            // one that starts inside the last kept range is inside it.
            if let Some(&(last, last_prefix)) = kept.last()
                && holds(last, last_prefix, network)
            {
                continue;
            }
            kept.push((network, prefix));
            // Join sibling halves into their parent, as long as there are
            // two on top.
            while let [.., (low, low_prefix), (high, high_prefix)] = kept[..] {
                let joins = low_prefix == high_prefix
                    && low_prefix > 0
                    && (low >> (width - low_prefix)) & 1 == 0
                    && high == low + (1u128 << (width - low_prefix));
                if !joins {
                    break;
                }
                kept.truncate(kept.len() - 2);
                kept.push((low, low_prefix - 1));
            }
        }
        merged.extend(kept.into_iter().map(|(network, prefix)| {
            let ip = if v4 {
                IpAddr::V4(Ipv4Addr::from(u32::try_from(network).unwrap_or_default()))
            } else {
                IpAddr::V6(Ipv6Addr::from(network))
            };
            // Joining halves never widens past the family: a valid prefix.
            Cidr::new(ip, u8::try_from(prefix).unwrap_or_default())
                .unwrap_or_else(|| unreachable!("{ip}/{prefix} is a CIDR"))
        }));
    }
    merged
}

/// What a peer kubeconfig holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::cli) struct PeerKubeconfig<'a> {
    /// The peer's cluster id: the cluster and context name.
    pub(in crate::cli) cluster_id: &'a str,
    /// The URL the local cluster reaches the peer's apiserver at.
    pub(in crate::cli) server: &'a str,
    /// PEM CA of the peer's apiserver.
    pub(in crate::cli) ca_pem: &'a [u8],
    /// The peer-reader token.
    pub(in crate::cli) token: &'a str,
    /// `tls-server-name`, when the admin kubeconfig had one.
    pub(in crate::cli) tls_server_name: Option<&'a str>,
    /// The user name (the ServiceAccount).
    pub(in crate::cli) user: &'a str,
}

/// The YAML of a peer Secret's `data.kubeconfig`: one cluster, one user,
/// one context, which is current.
pub(in crate::cli) fn render_kubeconfig(peer: &PeerKubeconfig<'_>) -> String {
    let mut cluster = serde_json::json!({
        "server": peer.server,
        "certificate-authority-data": BASE64.encode(peer.ca_pem),
    });
    if let Some(name) = peer.tls_server_name {
        cluster["tls-server-name"] = name.into();
    }
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": peer.cluster_id, "cluster": cluster}],
        "users": [{"name": peer.user, "user": {"token": peer.token}}],
        "contexts": [{
            "name": peer.cluster_id,
            "context": {"cluster": peer.cluster_id, "user": peer.user},
        }],
        "current-context": peer.cluster_id,
    });
    // A JSON value always serializes; JSON is YAML too, should it not.
    serde_saphyr::to_string(&config).unwrap_or_else(|_| config.to_string())
}

/// The default name of the peer Secret for cluster `peer_id`.
pub(super) fn secret_name(peer_id: &str) -> String {
    format!("peer-{peer_id}")
}

/// What the Secret that `peer add` is about to write is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    /// No Secret of that name.
    Absent,
    /// A peer Secret, naming this cluster id if known.
    Peer(Option<String>),
    /// A Secret without the peer label: not ours to overwrite.
    NotAPeer,
}

/// An identity as the join rules see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Member<'a> {
    /// `cluster.clusterset.k8s.io`.
    pub cluster_id: &'a str,
    /// `clusterset.k8s.io`.
    pub clusterset: &'a str,
}

/// Whether the cluster `peer` may join `local` as Secret `secret`, given
/// the other peer Secrets and the ids they are known to name (`None`: not
/// known) and what the Secret is now. The controller's rules
/// ([`peer_refusal`]) plus two of the command's own: this cluster's id
/// must be valid, and the Secret must not be someone else's.
pub(super) fn check_join(
    local: Member<'_>,
    peer: Member<'_>,
    secret: &str,
    others: &[(String, Option<String>)],
    target: &Target,
) -> Result<(), Refusal> {
    if let Some(problem) = local_identity_problem(local.cluster_id) {
        return Err(Refusal {
            reason: "InvalidLocalClusterId",
            message: problem,
        });
    }
    match target {
        Target::NotAPeer => {
            return Err(Refusal {
                reason: "NameTaken",
                message: format!("Secret {secret} exists and is not a peer Secret"),
            });
        }
        Target::Peer(Some(id)) if id != peer.cluster_id => {
            return Err(Refusal {
                reason: "NameTaken",
                message: format!(
                    "Secret {secret} names cluster {id}, not {}",
                    peer.cluster_id
                ),
            });
        }
        _ => {}
    }
    let known = others
        .iter()
        .filter_map(|(name, id)| Some((name.as_str(), id.as_deref()?)));
    match peer_refusal(
        local.cluster_id,
        local.clusterset,
        secret,
        peer.cluster_id,
        peer.clusterset,
        known,
    ) {
        Some(refusal) => Err(refusal),
        None => Ok(()),
    }
}

/// What to do about a refusal, by its reason.
pub(super) fn hint(reason: &str) -> &'static str {
    match reason {
        reason::SELF_REFERENCE => "the two kubeconfigs reach the same cluster",
        reason::OTHER_CLUSTER_SET => {
            "members of one clusterset share the ClusterProperty clusterset.k8s.io"
        }
        reason::DUPLICATE_CLUSTER_ID => {
            "that cluster is a peer already (re-run with --name <its Secret> to rotate its token), or two clusters share one ClusterProperty cluster.clusterset.k8s.io"
        }
        reason::INVALID_CLUSTER_ID | "InvalidLocalClusterId" => {
            "set the ClusterProperty cluster.clusterset.k8s.io to a DNS label"
        }
        "NameTaken" => "pass another --name, or remove that Secret first",
        _ => "see docs/controller.md, Identity and membership",
    }
}

/// A `PeerRefused` Event about a peer Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RefusalEvent {
    /// When the controller last refused it (series, event or creation time).
    pub at: jiff::Timestamp,
    /// The note: `<reason>: <message>`.
    pub note: String,
}

/// The controller's refusal that still holds: the latest `PeerRefused`
/// Event that is newer than the Secret's last change (a fixed Secret is
/// read again) and than the peer's Lease (renewed only while the peer is
/// accepted and healthy).
pub(super) fn current_refusal(
    events: &[RefusalEvent],
    secret_changed: Option<jiff::Timestamp>,
    lease_renewed: Option<jiff::Timestamp>,
) -> Option<&RefusalEvent> {
    events
        .iter()
        .filter(|e| secret_changed.is_none_or(|changed| e.at >= changed))
        .filter(|e| lease_renewed.is_none_or(|renewed| e.at > renewed))
        .max_by_key(|e| e.at)
}

/// One row of `peer list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct PeerStatus {
    /// The Secret's name.
    pub name: String,
    /// The peer's cluster id: what it answers now, else the Secret's
    /// annotation, else the controller's Lease.
    pub cluster_id: Option<String>,
    /// The peer's clusterset, when it answered.
    pub clusterset: Option<String>,
    /// The server of the Secret's kubeconfig.
    pub server: Option<String>,
    /// Whether the peer answered with the Secret's credentials just now
    /// (its ClusterProperties and a one-item list of ServiceExports).
    pub healthy: bool,
    /// Why not.
    pub error: Option<String>,
    /// When the controller last saw it healthy (its Lease), RFC 3339.
    pub last_seen: Option<String>,
    /// Seconds since then.
    pub last_seen_seconds_ago: Option<i64>,
    /// The controller's refusal that still holds (the `PeerRefused` note).
    pub refused: Option<String>,
    /// The pod ranges recorded for it (`peer add`): its endpoints outside
    /// them are refused. Empty when none are recorded.
    pub endpoint_cidrs: Vec<String>,
    /// Where `peer add` took them from ([`RangeSource::annotation`]:
    /// `nodes`, `endpoint-cidr`, `allow-any-endpoint`); `None` for a
    /// Secret that does not say (hand-made, or from an earlier release).
    pub endpoint_cidrs_from: Option<String>,
    /// True when the Secret records no ranges (and none that fail to
    /// parse): the controller accepts any endpoint address of the peer
    /// that its other rules allow.
    pub any_endpoint: bool,
    /// When the Secret's credential expires, RFC 3339; `None` when it never
    /// does (a token Secret of an earlier release).
    pub credential_expires: Option<String>,
    /// Seconds from now until then (negative once expired).
    pub credential_expires_in_seconds: Option<i64>,
}

impl PeerStatus {
    /// What the controller makes of it: `refused`, `accepted` (its Lease
    /// is renewed) or `-` (no controller has recorded anything).
    pub(super) fn controller(&self) -> &'static str {
        if self.refused.is_some() {
            "refused"
        } else if self.last_seen.is_some() {
            "accepted"
        } else {
            "-"
        }
    }
}

/// `4s ago`, `3m ago`, `2h ago`, `5d ago`.
pub(super) fn age(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..60 => format!("{s}s ago"),
        60..3600 => format!("{}m ago", s / 60),
        3600..86400 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86400),
    }
}

/// When a credential expires, for a person: `in 89d`, `expired 2h ago`,
/// `never` (`None`).
pub(super) fn expiry(seconds_left: Option<i64>) -> String {
    match seconds_left {
        None => "never".into(),
        Some(left) if left <= 0 => format!("expired {}", age(-left)),
        Some(left) => format!("in {}", age(left).trim_end_matches(" ago")),
    }
}

/// The header of `peer list`'s table.
pub(super) const TABLE_HEADER: [&str; 7] = [
    "NAME",
    "CLUSTER",
    "SERVER",
    "HEALTH",
    "LAST SEEN",
    "EXPIRES",
    "CONTROLLER",
];

/// `peer list`'s table, columns padded to their widest cell, then one
/// line per problem (why a peer is unhealthy, why it was refused).
pub(super) fn render_table(peers: &[PeerStatus]) -> String {
    let rows: Vec<[String; 7]> = peers
        .iter()
        .map(|p| {
            [
                p.name.clone(),
                p.cluster_id.clone().unwrap_or_else(|| "?".into()),
                p.server.clone().unwrap_or_else(|| "?".into()),
                if p.healthy { "ok" } else { "unhealthy" }.into(),
                p.last_seen_seconds_ago.map_or_else(|| "-".into(), age),
                expiry(p.credential_expires_in_seconds),
                p.controller().into(),
            ]
        })
        .collect();
    let mut widths = TABLE_HEADER.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let line = |cells: &[&str]| {
        let mut text = String::new();
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  "));
            }
        }
        text.trim_end().to_owned() + "\n"
    };
    let mut out = line(&TABLE_HEADER);
    for row in &rows {
        out += &line(&row.each_ref().map(String::as_str));
    }
    for p in peers {
        let from = p
            .endpoint_cidrs_from
            .as_deref()
            .and_then(RangeSource::from_annotation);
        if !p.endpoint_cidrs.is_empty() {
            let from = from.map(|f| format!(" (from {f})")).unwrap_or_default();
            out += &format!(
                "{}: endpoints only in {}{from}\n",
                p.name,
                p.endpoint_cidrs.join(", ")
            );
        } else if p.any_endpoint {
            let why = match from {
                Some(RangeSource::AllowAny) => "--allow-any-endpoint",
                _ => "no ranges recorded",
            };
            out += &format!(
                "{}: endpoints anywhere the controller's other rules allow ({why})\n",
                p.name
            );
        }
        if let Some(error) = &p.error {
            out += &format!("{}: {error}\n", p.name);
        }
        if let Some(note) = &p.refused {
            out += &format!("{}: refused by the controller: {note}\n", p.name);
        }
    }
    out
}

#[cfg(test)]
mod tests;
