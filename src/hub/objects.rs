//! The hub's objects, as `hub init` and `hub join` write them: what every
//! member may do on the hub, and nothing more.
//!
//! Reads are hub-wide (a member reads every publication with a fixed number
//! of watches, whatever the number of members); writes are bound to the
//! member's own namespace by a RoleBinding there, and checked again by a
//! ValidatingAdmissionPolicy, so that a hole in one layer is not a way in.

use serde_json::{Value, json};

use super::{
    FLOW_SCHEMA, LABEL_MEMBER, MANAGED_BY, MAX_RECORD_RANGES, MEMBER_LEASE,
    MEMBER_NAMESPACE_PREFIX, MEMBER_RECORD, MEMBER_SERVICE_ACCOUNT, MemberQuota, POLICY,
    PUBLISHER_ROLE, QUOTA, READER_ROLE, RECORD_ANY_ENDPOINT, RECORD_ENDPOINT_CIDRS,
    member_namespace,
};
use crate::api::well_known::LABEL_SOURCE_CLUSTER;
use crate::cidr::Cidr;

/// What a member publishes: (API group, resource).
const PUBLICATION: [(&str, &str); 3] = [
    ("clusterset-dns.io", "publishedservices"),
    ("discovery.k8s.io", "endpointslices"),
    ("coordination.k8s.io", "leases"),
];

fn labels() -> Value {
    json!({"app.kubernetes.io/managed-by": MANAGED_BY})
}

/// The hub-wide objects `hub init` applies, in order (each after what it
/// refers to): the PublishedService CRD, the two roles, the admission
/// policy and its binding, the flow control of members' requests.
pub fn hub_objects() -> Vec<Value> {
    let crd = serde_json::to_value(crate::api::crds::published_service())
        .expect("a generated CRD serializes");
    vec![
        crd,
        reader_role(),
        publisher_role(),
        admission_policy(),
        admission_policy_binding(),
        priority_level(),
        flow_schema(),
    ]
}

/// Read every member's publication, hub-wide, and every member's record.
/// A dedicated hub holds nothing else of the publication's kinds but its
/// own `default/kubernetes` slice and its control plane's leader Leases;
/// of ConfigMaps, only those named [`MEMBER_RECORD`] may be read (a list
/// or watch must then select that name).
fn reader_role() -> Value {
    let mut rules: Vec<Value> = PUBLICATION
        .iter()
        .map(|(group, resource)| {
            json!({
                "apiGroups": [group],
                "resources": [resource],
                "verbs": ["get", "list", "watch"],
            })
        })
        .collect();
    rules.push(json!({
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": [MEMBER_RECORD],
        "verbs": ["get", "list", "watch"],
    }));
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": READER_ROLE, "labels": labels()},
        "rules": rules,
    })
}

/// Write a publication; bound in the member's namespace only.
fn publisher_role() -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": PUBLISHER_ROLE, "labels": labels()},
        "rules": PUBLICATION.iter().map(|(group, resource)| json!({
            "apiGroups": [group],
            "resources": [resource],
            "verbs": ["create", "update", "patch", "delete"],
        })).collect::<Vec<_>>(),
    })
}

/// The CEL of the policy's checks, each with the message a refused write
/// gets. Members are matched by their user name; an admin's writes are
/// not checked.
fn policy_validations() -> Value {
    let member = format!("namespaceObject.metadata.labels['{LABEL_MEMBER}']");
    json!([
        {
            "expression": format!(
                "has(namespaceObject.metadata.labels) && '{LABEL_MEMBER}' in namespaceObject.metadata.labels \
                 && request.userInfo.username == 'system:serviceaccount:' + request.namespace + ':{MEMBER_SERVICE_ACCOUNT}'"
            ),
            "message": "a member writes only in its own member namespace",
            "reason": "Forbidden",
        },
        {
            "expression": format!(
                "request.resource.resource == 'leases' || (has(object.metadata.labels) \
                 && '{LABEL_SOURCE_CLUSTER}' in object.metadata.labels \
                 && object.metadata.labels['{LABEL_SOURCE_CLUSTER}'] == {member})"
            ),
            "message": format!("the {LABEL_SOURCE_CLUSTER} label must be the member's own cluster id"),
            "reason": "Forbidden",
        },
        {
            "expression": "request.resource.resource != 'publishedservices' \
                 || object.metadata.name == object.spec.namespace + '.' + object.spec.name",
            "message": "a PublishedService is named <namespace>.<name> of the Service it publishes",
            "reason": "Invalid",
        },
        {
            "expression": format!("request.resource.resource != 'leases' || object.metadata.name == '{MEMBER_LEASE}'"),
            "message": format!("a member's one Lease is named {MEMBER_LEASE}"),
            "reason": "Invalid",
        },
    ])
}

fn admission_policy() -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY, "labels": labels()},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": PUBLICATION.iter().map(|(group, resource)| json!({
                    "apiGroups": [group],
                    "apiVersions": ["*"],
                    "resources": [resource],
                    "operations": ["CREATE", "UPDATE"],
                })).collect::<Vec<_>>(),
            },
            "matchConditions": [{
                "name": "members-only",
                "expression": format!(
                    "request.userInfo.username.startsWith('system:serviceaccount:{MEMBER_NAMESPACE_PREFIX}')"
                ),
            }],
            "validations": policy_validations(),
        },
    })
}

fn admission_policy_binding() -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY, "labels": labels()},
        "spec": {"policyName": POLICY, "validationActions": ["Deny"]},
    })
}

/// Members' requests get a priority level of their own, queued per member
/// (the FlowSchema distinguishes flows by user): one member's burst waits
/// in its own queues, not in front of the others'.
fn priority_level() -> Value {
    json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": FLOW_SCHEMA, "labels": labels()},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 30,
                "lendablePercent": 50,
                "limitResponse": {
                    "type": "Queue",
                    "queuing": {"queues": 128, "handSize": 6, "queueLengthLimit": 50},
                },
            },
        },
    })
}

fn flow_schema() -> Value {
    json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": FLOW_SCHEMA, "labels": labels()},
        "spec": {
            "priorityLevelConfiguration": {"name": FLOW_SCHEMA},
            // Before the built-in `service-accounts` (9000), after every
            // system schema (kube-controller-manager's is 800).
            "matchingPrecedence": 8000,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{
                "subjects": [{"kind": "Group", "group": {"name": "system:serviceaccounts"}}],
                "resourceRules": PUBLICATION.iter().map(|(group, resource)| json!({
                    "apiGroups": [group],
                    "resources": [resource],
                    "verbs": ["*"],
                    "namespaces": ["*"],
                    "clusterScope": true,
                })).collect::<Vec<_>>(),
            }],
        },
    })
}

/// The objects `hub join` applies for member `cluster_id`, in order: its
/// namespace (labelled with the id), its record (`endpoint_ranges`: its
/// pod ranges, or `None` for any endpoint), the ServiceAccount its tokens
/// belong to, its write binding there, its read binding hub-wide, its
/// quota. Ranges past [`MAX_RECORD_RANGES`], which readers would refuse,
/// are an error.
pub fn member_objects(
    cluster_id: &str,
    endpoint_ranges: Option<&[Cidr]>,
    quota: MemberQuota,
) -> Result<Vec<Value>, String> {
    let namespace = member_namespace(cluster_id)?;
    if let Some(ranges) = endpoint_ranges
        && ranges.len() > MAX_RECORD_RANGES
    {
        return Err(format!(
            "the member's pod ranges are {} CIDRs, more than the {MAX_RECORD_RANGES} a member record may give; pass fewer, wider --endpoint-cidr ranges",
            ranges.len()
        ));
    }
    let subject = json!([{
        "kind": "ServiceAccount",
        "name": MEMBER_SERVICE_ACCOUNT,
        "namespace": namespace,
    }]);
    Ok(vec![
        json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": namespace,
                "labels": {LABEL_MEMBER: cluster_id, "app.kubernetes.io/managed-by": MANAGED_BY},
            },
        }),
        member_record(&namespace, cluster_id, endpoint_ranges),
        json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": MEMBER_SERVICE_ACCOUNT, "namespace": namespace, "labels": labels()},
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": PUBLISHER_ROLE, "namespace": namespace, "labels": labels()},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": PUBLISHER_ROLE},
            "subjects": subject,
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": reader_binding(cluster_id), "labels": member_labels(cluster_id)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": READER_ROLE},
            "subjects": subject,
        }),
        json!({
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": QUOTA, "namespace": namespace, "labels": labels()},
            "spec": {"hard": {
                "count/publishedservices.clusterset-dns.io": quota.published_services.to_string(),
                "count/endpointslices.discovery.k8s.io": quota.slices.to_string(),
                "count/leases.coordination.k8s.io": "1",
            }},
        }),
    ])
}

/// Member `cluster_id`'s record in `namespace`: its endpoint ranges, or
/// that any endpoint goes ([`super::read_member_record`] reads it).
fn member_record(namespace: &str, cluster_id: &str, endpoint_ranges: Option<&[Cidr]>) -> Value {
    let data = match endpoint_ranges {
        Some(ranges) => {
            let text: Vec<String> = ranges.iter().map(ToString::to_string).collect();
            json!({RECORD_ENDPOINT_CIDRS: text.join(",")})
        }
        None => json!({RECORD_ANY_ENDPOINT: "true"}),
    };
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": MEMBER_RECORD, "namespace": namespace, "labels": member_labels(cluster_id)},
        "data": data,
    })
}

/// The name of member `cluster_id`'s hub-wide read binding.
pub fn reader_binding(cluster_id: &str) -> String {
    format!("{READER_ROLE}-{cluster_id}")
}

fn member_labels(cluster_id: &str) -> Value {
    json!({LABEL_MEMBER: cluster_id, "app.kubernetes.io/managed-by": MANAGED_BY})
}

/// A Secret in member `cluster_id`'s namespace that its token is bound
/// to: deleting it revokes the token.
pub fn token_anchor(cluster_id: &str) -> Result<Value, String> {
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "generateName": format!("{MEMBER_SERVICE_ACCOUNT}-token-"),
            "namespace": member_namespace(cluster_id)?,
            "labels": member_labels(cluster_id),
        },
    }))
}
