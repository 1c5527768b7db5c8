//! `PublishedService` (`clusterset-dns.io/v1alpha1`): what an exporting
//! cluster's controller publishes for its peers about one exported Service,
//! in the controller's own namespace, so that a peer's reader token needs
//! no access to the Service's namespace (docs/controller.md, "What a peer
//! can read").
//!
//! Named `<namespace>.<name>` of the exported Service: both are DNS labels,
//! so the name is a valid, unique object name. It carries the fields of the
//! Service that the export merge reads and nothing else: no cluster IP, no
//! selector, no status, no annotations.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of the kinds clusterset-dns defines for itself.
pub const GROUP: &str = "clusterset-dns.io";

/// The exported Service's fields, as its peers merge them.
// Three printer columns are strings: clippy reads the repeated
// `type_ = "string"` as one attribute given twice.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "clusterset-dns.io",
    version = "v1alpha1",
    kind = "PublishedService",
    plural = "publishedservices",
    namespaced,
    derive = "PartialEq",
    derive = "Default",
    shortname = "pubsvc",
    category = "multicluster",
    doc = "PublishedService holds what one member cluster's clusterset-dns controller publishes to its peers about one exported Service, named <namespace>.<name> of that Service. Written by the controller; read by peers with the peer-reader token.",
    printcolumn(name = "Service", type_ = "string", json_path = ".spec.name"),
    printcolumn(name = "Namespace", type_ = "string", json_path = ".spec.namespace"),
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PublishedServiceSpec {
    /// The exported Service's namespace.
    pub namespace: String,
    /// The exported Service's name.
    pub name: String,
    /// The Service's type (`ClusterIP`, `NodePort` or `LoadBalancer`).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Whether the Service is headless (`clusterIP: None`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub headless: bool,
    /// The Service's ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<PublishedPort>,
    /// `None` or `ClientIP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<String>,
    /// The `ClientIP` affinity timeout, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity_timeout_seconds: Option<i32>,
    /// `Cluster` or `Local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_traffic_policy: Option<String>,
    /// The Service's `trafficDistribution`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_distribution: Option<String>,
    /// The Service's IP families, primary first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_families: Vec<String>,
    /// The ServiceExport's fields the merge reads, for a reader that
    /// cannot read the export itself (a member of a hub reads only
    /// publications). Absent from a previous release's publication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export: Option<PublishedExport>,
}

/// What a PublishedService carries of its ServiceExport: when it was
/// created (the oldest export wins a conflict) and what it exports onto
/// the ServiceImport.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PublishedExport {
    /// The ServiceExport's `creationTimestamp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// The ServiceExport's `spec.exportedLabels`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_labels: BTreeMap<String, String>,
    /// The ServiceExport's `spec.exportedAnnotations`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_annotations: BTreeMap<String, String>,
}

/// One port of a published Service: the fields an imported port has
/// ([`super::ServicePort`]), so the merge copies it as it is.
pub type PublishedPort = super::ServicePort;
