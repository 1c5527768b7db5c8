//! The objects a plan derives for one service (its ServiceImport, derived
//! Service and the ServiceExport status), and whether a live one differs
//! from them in the fields we own.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort as CoreServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, OwnerReference};
use kube::Resource;

use super::{Kind, Write};
use crate::api::ServiceRef;
use crate::api::well_known::{ANNOTATION_DERIVED_SERVICE, LABEL_SERVICE_NAME};
use crate::api::{ServiceExport, ServiceImport, ServiceImportSpec};
use crate::controller::merge::Merged;
use crate::controller::naming::{LABEL_APP_MANAGED_BY, MANAGED_BY};

pub(super) fn our_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(LABEL_APP_MANAGED_BY.to_owned(), MANAGED_BY.to_owned())])
}

pub(super) fn import_object(
    service: &ServiceRef,
    merged: &Merged,
    spec: ServiceImportSpec,
    clusterset_ip: bool,
    derived_name: &str,
) -> ServiceImport {
    let mut labels = merged.labels.clone();
    labels.extend(our_labels());
    let mut annotations = merged.annotations.clone();
    if clusterset_ip {
        annotations.insert(
            ANNOTATION_DERIVED_SERVICE.to_owned(),
            derived_name.to_owned(),
        );
    }
    ServiceImport {
        metadata: ObjectMeta {
            name: Some(service.name.to_string()),
            namespace: Some(service.namespace.to_string()),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    }
}

/// Whether the live import's metadata we own or its spec differ. We own the
/// whole object, so labels and annotations compare exactly (an exported
/// label removed at the source must go).
pub(super) fn import_differs(desired: &ServiceImport, observed: Option<&ServiceImport>) -> bool {
    let Some(observed) = observed else {
        return true;
    };
    observed.spec != desired.spec
        || observed.metadata.labels.clone().unwrap_or_default()
            != desired.metadata.labels.clone().unwrap_or_default()
        || observed.metadata.annotations.clone().unwrap_or_default()
            != desired.metadata.annotations.clone().unwrap_or_default()
}

pub(super) fn owner_reference(service: &ServiceRef, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: ServiceImport::api_version(&()).into_owned(),
        kind: ServiceImport::kind(&()).into_owned(),
        name: service.name.to_string(),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

pub(super) fn derived_service(
    service: &ServiceRef,
    merged: &Merged,
    traffic_distribution: Option<&str>,
    families: &[String],
    derived_name: &str,
    owner: &OwnerReference,
) -> Service {
    let mut labels = our_labels();
    labels.insert(LABEL_SERVICE_NAME.to_owned(), service.name.to_string());
    let spec = &merged.spec;
    Service {
        metadata: ObjectMeta {
            name: Some(derived_name.to_owned()),
            namespace: Some(service.namespace.to_string()),
            labels: Some(labels),
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            ports: Some(
                spec.ports
                    .iter()
                    .map(|port| CoreServicePort {
                        name: port.name.clone(),
                        protocol: port.protocol.clone(),
                        app_protocol: port.app_protocol.clone(),
                        port: port.port,
                        ..CoreServicePort::default()
                    })
                    .collect(),
            ),
            ip_families: Some(families.to_vec()),
            ip_family_policy: Some(
                if families.len() > 1 {
                    "RequireDualStack"
                } else {
                    "SingleStack"
                }
                .into(),
            ),
            session_affinity: spec.session_affinity.clone(),
            session_affinity_config: spec.session_affinity_config.clone(),
            internal_traffic_policy: spec.internal_traffic_policy.clone(),
            traffic_distribution: traffic_distribution.map(str::to_owned),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// Whether the fields we set on a derived Service differ from the live
/// one's, ignoring what the apiserver fills in (target ports, cluster IPs,
/// defaults of fields we leave unset).
pub(super) fn derived_differs(desired: &Service, observed: Option<&Service>) -> bool {
    let Some(observed) = observed else {
        return true;
    };
    let (Some(want), Some(have)) = (desired.spec.as_ref(), observed.spec.as_ref()) else {
        return true;
    };
    // (name, protocol, appProtocol, port): what we set of each port.
    type PortKey = (Option<String>, Option<String>, Option<String>, i32);
    let ports = |spec: &ServiceSpec| -> Vec<PortKey> {
        spec.ports
            .iter()
            .flatten()
            .map(|p| {
                (
                    p.name.clone(),
                    Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                    p.app_protocol.clone(),
                    p.port,
                )
            })
            .collect()
    };
    let defaulted =
        |value: &Option<String>, default: &str| value.clone().unwrap_or_else(|| default.to_owned());
    ports(want) != ports(have)
        || want.ip_families != have.ip_families
        || want.ip_family_policy != have.ip_family_policy
        || defaulted(&want.session_affinity, "None") != defaulted(&have.session_affinity, "None")
        || (want.session_affinity_config.is_some()
            && want.session_affinity_config != have.session_affinity_config)
        || defaulted(&want.internal_traffic_policy, "Cluster")
            != defaulted(&have.internal_traffic_policy, "Cluster")
        || want.traffic_distribution != have.traffic_distribution
        || !subset(&desired.metadata.labels, &observed.metadata.labels)
        || !owned_by(observed, desired)
}

pub(super) fn subset(
    want: &Option<BTreeMap<String, String>>,
    have: &Option<BTreeMap<String, String>>,
) -> bool {
    let have = have.as_ref();
    want.iter()
        .flatten()
        .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
}

pub(super) fn owned_by<K: Resource>(observed: &K, desired: &K) -> bool {
    let have = observed
        .meta()
        .owner_references
        .as_deref()
        .unwrap_or_default();
    desired
        .meta()
        .owner_references
        .iter()
        .flatten()
        .all(|want| {
            have.iter()
                .any(|h| h.uid == want.uid && h.controller == want.controller)
        })
}

/// Whether a slice's owned fields differ from the live one's.
pub(super) fn slice_differs(desired: &EndpointSlice, observed: Option<&EndpointSlice>) -> bool {
    let Some(observed) = observed else {
        return true;
    };
    observed.address_type != desired.address_type
        || observed.endpoints != desired.endpoints
        || observed.ports.clone().unwrap_or_default() != desired.ports.clone().unwrap_or_default()
        || !subset(&desired.metadata.labels, &observed.metadata.labels)
        || !subset(
            &desired.metadata.annotations,
            &observed.metadata.annotations,
        )
        || !owned_by(observed, desired)
}

/// The ServiceExport object a status write applies.
pub(crate) fn export_status_object(
    service: &ServiceRef,
    conditions: Vec<Condition>,
) -> ServiceExport {
    let mut export = ServiceExport::new(&service.name, Default::default());
    export.metadata.namespace = Some(service.namespace.to_string());
    export.status = Some(crate::api::ServiceExportStatus { conditions });
    export
}

pub(super) fn delete<K: Resource>(kind: Kind, object: &K) -> Write {
    Write::Delete {
        kind,
        namespace: object.meta().namespace.clone().unwrap_or_default(),
        name: object.meta().name.clone().unwrap_or_default(),
        uid: object.meta().uid.clone(),
    }
}
