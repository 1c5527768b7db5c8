//! `ServiceImport` (`multicluster.x-k8s.io`): the cluster-local view of a
//! service exported from one or more clusters of the ClusterSet.
//!
//! Owns the spec/status types of both API versions. The two versions have
//! identical schemas, so the spec is written once in
//! [`service_import_version!`] and stamped into the `v1alpha1` and `v1beta1`
//! modules; the status and field types are shared by both. Doc comments on
//! fields become the descriptions in the generated CRD.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a `ServiceImport` is consumed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ServiceImportType {
    /// Reached through one or more cluster-set virtual IPs (`spec.ips`).
    #[serde(rename = "ClusterSetIP")]
    ClusterSetIp,
    /// No virtual IP; consumers resolve the endpoints through DNS.
    Headless,
}

impl ServiceImportType {
    /// The wire spelling: `ClusterSetIP` or `Headless`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClusterSetIp => "ClusterSetIP",
            Self::Headless => "Headless",
        }
    }
}

/// A port on which an imported service is exposed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    /// The name of this port within the service. This must be a DNS_LABEL.
    /// All ports within a ServiceImport must have unique names. Optional if
    /// only one port is defined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// The IP protocol for this port: "TCP", "UDP" or "SCTP". Default is TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,

    /// The application protocol for this port, following standard Kubernetes
    /// label syntax. Un-prefixed names are reserved for IANA standard service
    /// names; non-standard protocols should use prefixed names such as
    /// mycompany.com/my-custom-protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,

    /// The port that will be exposed by this service.
    pub port: i32,
}

/// An exporting cluster from which a ServiceImport was derived.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub struct ClusterStatus {
    /// The name of the exporting cluster. Must be a valid RFC-1123 DNS label.
    pub cluster: String,
}

/// Whether imported EndpointSlice objects are published for a ServiceImport:
/// Present or Absent.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum EndpointSliceObjects {
    /// Imported `EndpointSlice`s exist and may be read.
    Present,
    /// No imported `EndpointSlice`s; consumers must rely on `spec.ips`.
    Absent,
}

// Shared by both API versions: only the spec needs a type per version.
/// Observed state of a ServiceImport: the clusters exporting the service
/// and whether it could be imported here.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportStatus {
    /// The list of exporting clusters from which this service was derived.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["cluster"],
    ))]
    pub clusters: Vec<ClusterStatus>,

    /// The current state of the import, such as whether it could be
    /// imported into this cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["type"],
    ))]
    pub conditions: Vec<Condition>,

    /// Whether imported EndpointSlice objects are published for this
    /// service: Present or Absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_slice_objects: Option<EndpointSliceObjects>,
}

/// Emits the `ServiceImport` custom resource for one API version.
///
/// Each version needs its own spec type because `#[derive(CustomResource)]`
/// takes exactly one version; a macro keeps the field list in one place so
/// the versions cannot drift apart.
macro_rules! service_import_version {
    ($version:tt, served: $served:tt, storage: $storage:tt) => {
        use k8s_openapi::api::core::v1::SessionAffinityConfig;
        use kube::CustomResource;
        use schemars::JsonSchema;
        use serde::{Deserialize, Serialize};

        pub use super::{
            ClusterStatus, EndpointSliceObjects, ServiceImportStatus, ServiceImportType,
            ServicePort,
        };

        /// The imported service as this cluster sees it: how it is reached
        /// and which ports it exposes. Written by the multi-cluster services
        /// controller, not by users.
        #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
        #[kube(
            group = "multicluster.x-k8s.io",
            version = $version,
            kind = "ServiceImport",
            namespaced,
            served = $served,
            storage = $storage,
            status = "ServiceImportStatus",
            derive = "PartialEq",
            shortname = "svcim",
            shortname = "svcimport",
            category = "multicluster",
            doc = "ServiceImport describes a service imported from clusters in a ClusterSet.",
            printcolumn(
                name = "Type",
                type_ = "string",
                description = "The type of this ServiceImport",
                json_path = ".spec.type"
            ),
            printcolumn(
                name = "IP",
                type_ = "string",
                description = "The VIP for this ServiceImport",
                json_path = ".spec.ips"
            ),
            printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
        )]
        #[serde(rename_all = "camelCase")]
        pub struct ServiceImportSpec {
            /// The ports the imported service exposes.
            #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
            pub ports: Vec<ServicePort>,

            /// The cluster-set virtual IPs of this service when type is
            /// ClusterSetIP, at most one per IP family, in the order of
            /// ipFamilies.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            #[schemars(length(max = 2))]
            pub ips: Vec<String>,

            /// The type of this service: ClusterSetIP or Headless.
            #[serde(rename = "type")]
            pub type_: ServiceImportType,

            /// "ClientIP" or "None": whether connections from one client
            /// stick to one backend. Defaults to None. Ignored when type is
            /// Headless.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub session_affinity: Option<String>,

            /// Session affinity configuration.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub session_affinity_config: Option<SessionAffinityConfig>,

            /// The IP families ("IPv4", "IPv6") of this service, without
            /// duplicates.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            #[schemars(length(max = 2))]
            pub ip_families: Vec<String>,

            /// "Cluster" or "Local": whether in-cluster traffic may reach
            /// endpoints on other nodes.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub internal_traffic_policy: Option<String>,

            /// How traffic is preferably distributed across endpoints, for
            /// example "PreferClose".
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub traffic_distribution: Option<String>,
        }
    };
}

/// `ServiceImport` at `multicluster.x-k8s.io/v1alpha1` (served, not stored).
pub(super) mod v1alpha1 {
    service_import_version!("v1alpha1", served: true, storage: false);
}

/// `ServiceImport` at `multicluster.x-k8s.io/v1beta1` (served and stored).
pub(super) mod v1beta1 {
    service_import_version!("v1beta1", served: true, storage: true);
}

convert_between_versions!(
    ServiceImport,
    ServiceImportSpec {
        ports,
        ips,
        type_,
        session_affinity,
        session_affinity_config,
        ip_families,
        internal_traffic_policy,
        traffic_distribution,
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    /// The KEP-1645 example, extended to dual-stack with every optional
    /// field set and a field from a future schema.
    const DUAL_STACK_V1BETA1: &str = r#"
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata:
  name: my-svc
  namespace: my-ns
spec:
  ips:
  - "42.42.42.42"
  - "2001:db8::2a"
  ipFamilies:
  - IPv4
  - IPv6
  type: ClusterSetIP
  ports:
  - name: http
    protocol: TCP
    port: 80
  - name: grpc
    protocol: TCP
    appProtocol: kubernetes.io/h2c
    port: 8080
  sessionAffinity: ClientIP
  sessionAffinityConfig:
    clientIP:
      timeoutSeconds: 10
  internalTrafficPolicy: Cluster
  trafficDistribution: PreferClose
  fieldFromTheFuture: ignored
status:
  endpointSliceObjects: Present
  clusters:
  - cluster: us-west2-a-my-cluster
  - cluster: us-east1-b-my-cluster
  conditions:
  - type: Ready
    status: "True"
    reason: Ready
    message: imported
    lastTransitionTime: "2026-05-26T10:00:00Z"
"#;

    /// A headless import at the older API version, with one unnamed port.
    const HEADLESS_V1ALPHA1: &str = r#"
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata:
  name: db
  namespace: prod
spec:
  type: Headless
  ipFamilies:
  - IPv6
  ports:
  - protocol: UDP
    port: 53
status:
  endpointSliceObjects: Absent
  clusters:
  - cluster: cluster-a
  conditions:
  - type: Ready
    status: "False"
    reason: IPFamilyNotSupported
    message: IPv6-only service in an IPv4-only cluster
    observedGeneration: 3
    lastTransitionTime: "2026-05-26T10:00:00Z"
"#;

    fn parse<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn v1beta1_dual_stack_import_deserializes_every_field() {
        let import: v1beta1::ServiceImport = parse(DUAL_STACK_V1BETA1);

        assert_eq!(import.metadata.namespace.as_deref(), Some("my-ns"));
        let spec = &import.spec;
        assert_eq!(spec.type_, ServiceImportType::ClusterSetIp);
        assert_eq!(spec.ips, ["42.42.42.42", "2001:db8::2a"]);
        assert_eq!(spec.ip_families, ["IPv4", "IPv6"]);
        assert_eq!(
            spec.ports,
            [
                ServicePort {
                    name: Some("http".into()),
                    protocol: Some("TCP".into()),
                    app_protocol: None,
                    port: 80,
                },
                ServicePort {
                    name: Some("grpc".into()),
                    protocol: Some("TCP".into()),
                    app_protocol: Some("kubernetes.io/h2c".into()),
                    port: 8080,
                },
            ]
        );
        assert_eq!(spec.session_affinity.as_deref(), Some("ClientIP"));
        let timeout = spec
            .session_affinity_config
            .as_ref()
            .and_then(|config| config.client_ip.as_ref())
            .and_then(|client_ip| client_ip.timeout_seconds);
        assert_eq!(timeout, Some(10));
        assert_eq!(spec.internal_traffic_policy.as_deref(), Some("Cluster"));
        assert_eq!(spec.traffic_distribution.as_deref(), Some("PreferClose"));

        let status = import.status.unwrap();
        assert_eq!(
            status.endpoint_slice_objects,
            Some(EndpointSliceObjects::Present)
        );
        let clusters: Vec<_> = status.clusters.iter().map(|c| c.cluster.as_str()).collect();
        assert_eq!(clusters, ["us-west2-a-my-cluster", "us-east1-b-my-cluster"]);
        assert_eq!(status.conditions[0].type_, "Ready");
        assert_eq!(status.conditions[0].status, "True");
    }

    #[test]
    fn v1alpha1_headless_import_deserializes_with_unnamed_port() {
        let import: v1alpha1::ServiceImport = parse(HEADLESS_V1ALPHA1);

        assert_eq!(import.spec.type_, ServiceImportType::Headless);
        assert!(import.spec.ips.is_empty());
        assert_eq!(import.spec.ip_families, ["IPv6"]);
        assert_eq!(import.spec.ports[0].name, None);
        assert_eq!(import.spec.ports[0].protocol.as_deref(), Some("UDP"));
        assert_eq!(import.spec.ports[0].port, 53);
        assert_eq!(import.spec.session_affinity, None);

        let status = import.status.unwrap();
        assert_eq!(
            status.endpoint_slice_objects,
            Some(EndpointSliceObjects::Absent)
        );
        assert_eq!(status.clusters[0].cluster, "cluster-a");
        assert_eq!(status.conditions[0].reason, "IPFamilyNotSupported");
        assert_eq!(status.conditions[0].observed_generation, Some(3));
    }

    #[test]
    fn serialization_reproduces_the_parsed_document() {
        // The headless example has no unknown fields, so its JSON form must
        // come back exactly: camelCase names, no nulls for absent fields.
        let original: serde_json::Value = parse(HEADLESS_V1ALPHA1);
        let import: v1alpha1::ServiceImport = parse(HEADLESS_V1ALPHA1);

        assert_eq!(serde_json::to_value(&import).unwrap(), original);
    }

    #[test]
    fn yaml_round_trip_preserves_the_object() {
        let import: v1beta1::ServiceImport = parse(DUAL_STACK_V1BETA1);
        let yaml = serde_saphyr::to_string(&import).unwrap();

        assert_eq!(parse::<v1beta1::ServiceImport>(&yaml), import);
    }

    #[test]
    fn unknown_fields_are_dropped_not_rejected() {
        let import: v1beta1::ServiceImport = parse(DUAL_STACK_V1BETA1);
        let json = serde_json::to_value(&import).unwrap();

        assert!(json["spec"].get("fieldFromTheFuture").is_none());
    }

    #[test]
    fn absent_optional_fields_are_not_serialized() {
        let import = v1beta1::ServiceImport::new(
            "db",
            v1beta1::ServiceImportSpec {
                ports: vec![ServicePort {
                    port: 5432,
                    ..ServicePort::default()
                }],
                ips: Vec::new(),
                type_: ServiceImportType::Headless,
                session_affinity: None,
                session_affinity_config: None,
                ip_families: Vec::new(),
                internal_traffic_policy: None,
                traffic_distribution: None,
            },
        );

        let json = serde_json::to_value(&import).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "apiVersion": "multicluster.x-k8s.io/v1beta1",
                "kind": "ServiceImport",
                "metadata": { "name": "db" },
                "spec": { "ports": [{ "port": 5432 }], "type": "Headless" },
            })
        );
    }

    #[test]
    fn import_type_uses_the_api_spelling() {
        for (ty, wire) in [
            (ServiceImportType::ClusterSetIp, "ClusterSetIP"),
            (ServiceImportType::Headless, "Headless"),
        ] {
            assert_eq!(serde_json::to_value(ty).unwrap(), wire);
            assert_eq!(ty.as_str(), wire);
        }
    }

    #[test]
    fn v1alpha1_import_converts_to_v1beta1_and_back_unchanged() {
        let alpha: v1alpha1::ServiceImport = parse(HEADLESS_V1ALPHA1);

        let beta = v1beta1::ServiceImport::from(alpha.clone());
        assert_eq!(beta.metadata, alpha.metadata);
        assert_eq!(beta.spec.ports, alpha.spec.ports);
        assert_eq!(beta.status, alpha.status);
        assert_eq!(v1alpha1::ServiceImport::from(beta), alpha);
    }
}
