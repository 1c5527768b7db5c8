//! The hub contract: what a hub (a plain Kubernetes control plane the
//! members publish into) holds, and what `clusterset-dns hub` and the
//! controller's hub mode must agree on about it, in one place. It imports
//! neither of them.
//!
//! - The hub holds one namespace per member, `member-<cluster id>`
//!   ([`member_namespace`]), labelled [`LABEL_MEMBER`] with the id the hub
//!   admin bound at `hub join`. The namespace is the member: an object's
//!   cluster is its namespace's label, never what the object says.
//! - A member's credential is a bound token of the ServiceAccount
//!   [`MEMBER_SERVICE_ACCOUNT`] in its namespace. It may write its
//!   publication there (PublishedServices, published EndpointSlices, one
//!   Lease, [`MEMBER_LEASE`]) and read every member's publication; nothing
//!   else ([`objects`]).
//! - Behind RBAC, a ValidatingAdmissionPolicy ([`POLICY`]) refuses a
//!   member's write whose source-cluster label is not its namespace's
//!   member or whose name is not the one the publication computes; a
//!   ResourceQuota per namespace bounds what a member may store, and a
//!   FlowSchema ([`FLOW_SCHEMA`]) gives each member its own fair share of
//!   the hub's apiserver.
//! - Beside them, `hub join` writes the member's record ([`MEMBER_RECORD`]),
//!   a ConfigMap the member cannot write and every member reads: the
//!   member's pod ranges, outside which importers refuse its endpoints, as
//!   a peer Secret's ranges are for a peer ([`read_member_record`]).
//! - In a member cluster, the hub is reached through one Secret,
//!   [`HUB_SECRET`] in the controller's namespace, labelled
//!   [`HUB_LABEL`]`=true`, holding a kubeconfig as a peer Secret does.

pub mod objects;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;

use crate::api::limits::is_dns1123_label;
use crate::cidr::Cidr;

/// Prefix of a member's namespace on the hub.
pub const MEMBER_NAMESPACE_PREFIX: &str = "member-";

/// Label on a member namespace: the member's cluster id, bound by the hub
/// admin at `hub join`. Members cannot write namespaces.
pub const LABEL_MEMBER: &str = "hub.clusterset-dns.io/member";

/// The ServiceAccount in each member namespace whose tokens members hold.
pub const MEMBER_SERVICE_ACCOUNT: &str = "clusterset-dns-member";

/// The name of a member's Lease in its namespace: renewed while the
/// member's controller runs.
pub const MEMBER_LEASE: &str = "clusterset-dns-member";

/// How often a member's controller renews its Lease on the hub.
pub const LEASE_RENEW: Duration = Duration::from_secs(10);

/// The duration a member's Lease records: three renewals. A member whose
/// Lease was not renewed for as long is down, as its readers see it.
pub const LEASE_DURATION: Duration = Duration::from_secs(30);

/// The ConfigMap in each member namespace that `hub join` writes and
/// members may read but not write: what the hub admin recorded of the
/// member for its importers. The readers' role names it and no other
/// ConfigMap.
pub const MEMBER_RECORD: &str = "clusterset-dns-member";

/// Key of the member record: the member's pod ranges, comma-separated
/// (`hub join`: its Nodes' `spec.podCIDRs`, or `--endpoint-cidr`).
pub const RECORD_ENDPOINT_CIDRS: &str = "endpoint-cidrs";

/// Key of the member record, `"true"`: no ranges recorded (`hub join
/// --allow-any-endpoint`); importers accept any endpoint address their
/// other rules allow.
pub const RECORD_ANY_ENDPOINT: &str = "allow-any-endpoint";

/// The most ranges a member record may give: every endpoint of the member
/// is checked against each, so whoever writes the record must not make
/// that check unbounded. A cluster's pod ranges, merged, are a handful.
pub const MAX_RECORD_RANGES: usize = 256;

/// The ClusterRole that lets every member read every publication.
pub const READER_ROLE: &str = "clusterset-dns-hub-reader";

/// The ClusterRole a member is bound to in its own namespace: writing its
/// publication.
pub const PUBLISHER_ROLE: &str = "clusterset-dns-hub-publisher";

/// The ValidatingAdmissionPolicy (and its binding) on members' writes.
pub const POLICY: &str = "clusterset-dns-hub-member";

/// The FlowSchema and PriorityLevelConfiguration of members' requests.
pub const FLOW_SCHEMA: &str = "clusterset-dns-hub-members";

/// The ResourceQuota in each member namespace.
pub const QUOTA: &str = "clusterset-dns-member";

/// The Secret, in a member's controller namespace, holding the hub's
/// kubeconfig.
pub const HUB_SECRET: &str = "clusterset-dns-hub";

/// Label that makes a Secret the member's hub Secret (value `true`).
pub const HUB_LABEL: &str = "clusterset-dns.io/hub";

/// The label `hub` puts on everything it writes.
pub const MANAGED_BY: &str = "clusterset-dns-hub-cli";

/// The longest cluster id a member may have: its namespace name is a DNS
/// label of at most 63 characters.
pub const MAX_MEMBER_ID: usize = 63 - MEMBER_NAMESPACE_PREFIX.len();

/// The namespace of member `cluster_id` on the hub, or why the id cannot
/// name one.
pub fn member_namespace(cluster_id: &str) -> Result<String, String> {
    if cluster_id.len() > MAX_MEMBER_ID {
        return Err(format!(
            "cluster id {cluster_id:?} is longer than {MAX_MEMBER_ID} characters: its hub namespace {MEMBER_NAMESPACE_PREFIX}{cluster_id} would not be a DNS label"
        ));
    }
    if !is_dns1123_label(cluster_id) {
        return Err(format!(
            "cluster id {cluster_id:?} is not a DNS label (lower-case letters, digits and '-'): it cannot name a hub namespace"
        ));
    }
    Ok(format!("{MEMBER_NAMESPACE_PREFIX}{cluster_id}"))
}

/// The member a namespace of the hub belongs to, from its name; `None` for
/// a namespace that is no member's.
pub fn member_of_namespace(namespace: &str) -> Option<&str> {
    namespace
        .strip_prefix(MEMBER_NAMESPACE_PREFIX)
        .filter(|id| member_namespace(id).is_ok())
}

/// The user name a member's token authenticates as on the hub.
pub fn member_user(cluster_id: &str) -> String {
    format!("system:serviceaccount:{MEMBER_NAMESPACE_PREFIX}{cluster_id}:{MEMBER_SERVICE_ACCOUNT}")
}

/// How much one member may store on the hub, mirrored by its namespace's
/// ResourceQuota. The defaults are the controller's per-peer caps
/// (`--peer-max-exports`, `--peer-max-slices`): a member that fills its
/// quota is one the importers accept whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberQuota {
    /// PublishedServices: one per export.
    pub published_services: u32,
    /// Published EndpointSlices.
    pub slices: u32,
}

impl Default for MemberQuota {
    fn default() -> Self {
        Self {
            published_services: 2_000,
            slices: 10_000,
        }
    }
}

/// The member's endpoint ranges its record (`data` of [`MEMBER_RECORD`])
/// gives: `Some` ranges, `None` for any endpoint; why not, for a record
/// that says neither, both, or ranges that do not parse. Importers hold a
/// member without a readable record to no endpoint at all.
pub fn read_member_record(data: &BTreeMap<String, String>) -> Result<Option<Vec<Cidr>>, String> {
    let any = data.get(RECORD_ANY_ENDPOINT).map(String::as_str);
    match (data.get(RECORD_ENDPOINT_CIDRS), any) {
        (Some(_), Some(_)) => Err(format!(
            "{MEMBER_RECORD} holds both {RECORD_ENDPOINT_CIDRS} and {RECORD_ANY_ENDPOINT}"
        )),
        (None, Some("true")) => Ok(None),
        (None, Some(other)) => Err(format!(
            "{MEMBER_RECORD}: {RECORD_ANY_ENDPOINT} is {other:?}, not \"true\""
        )),
        (None, None) => Err(format!(
            "{MEMBER_RECORD} holds neither {RECORD_ENDPOINT_CIDRS} nor {RECORD_ANY_ENDPOINT}"
        )),
        (Some(text), None) => match crate::cidr::parse_list(text) {
            Ok(ranges) if ranges.is_empty() => {
                Err(format!("{MEMBER_RECORD}: {RECORD_ENDPOINT_CIDRS} is empty"))
            }
            Ok(ranges) if ranges.len() > MAX_RECORD_RANGES => Err(format!(
                "{MEMBER_RECORD}: {RECORD_ENDPOINT_CIDRS} gives {} ranges, more than the {MAX_RECORD_RANGES} allowed",
                ranges.len()
            )),
            Ok(ranges) => Ok(Some(ranges)),
            Err(error) => Err(format!("{MEMBER_RECORD}: {RECORD_ENDPOINT_CIDRS}: {error}")),
        },
    }
}

/// Member `local_id`'s Lease in its hub namespace, renewed at `now`.
pub fn member_lease(namespace: &str, local_id: &str, now: SystemTime) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(MEMBER_LEASE.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(local_id.to_owned()),
            lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
            renew_time: Timestamp::try_from(now).ok().map(MicroTime),
            ..LeaseSpec::default()
        }),
    }
}

#[cfg(test)]
mod tests;
