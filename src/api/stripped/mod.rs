//! API objects decoded without the fields their reader drops: the one
//! mechanism behind the DNS source's watches and the controller's watches
//! and writes.
//!
//! `managedFields`, a Service's annotations (often the whole object again,
//! in `kubectl.kubernetes.io/last-applied-configuration`) and status, the
//! endpoint fields the reader does not use (target references; for the DNS
//! source also node names and hints) are skipped by the JSON parser without being
//! built. At thousands of slices that is most of the decoding work and of
//! the transient memory of a list.
//!
//! A [`Stripped<K, S>`] is the `k8s-openapi` (or our CRD) type `K` itself
//! with the fields side `S` does not read unset, so the rest of the code
//! reads the usual types. The sides keep different amounts: the [`Dns`]
//! source, whose memory per endpoint matters most, only what the index
//! reads; the [`Controller`] what its decisions read and what it copies
//! between clusters ([`cross_cluster`]).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::marker::PhantomData;

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeSpec, NodeStatus, Service, ServiceSpec};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointHints, EndpointPort, EndpointSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use kube::core::DynamicObject;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Deserializer};

use super::{
    PublishedService, PublishedServiceSpec, ServiceExport, ServiceExportSpec, ServiceExportStatus,
    ServiceImport, ServiceImportSpec, ServiceImportStatus,
};

#[cfg(test)]
mod tests;

/// An object of kind `K` decoded with only what side `S` keeps of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Stripped<K, S>(pub K, PhantomData<S>);

impl<K, S> Stripped<K, S> {
    /// Wraps an object that holds no more than `S` keeps of it.
    pub fn new(object: K) -> Self {
        Self(object, PhantomData)
    }

    /// A whole object as `S` would decode it from the apiserver (tests
    /// that play the apiserver hold objects whole).
    #[cfg(test)]
    pub(crate) fn from_whole(object: &K) -> Self
    where
        K: serde::Serialize,
        Self: DeserializeOwned,
    {
        let value = serde_json::to_value(object).expect("an API object serializes");
        serde_json::from_value(value).expect("a serialized object decodes stripped")
    }
}

/// What one side of the binary keeps of the objects it decodes, where the
/// sides read the same kind (EndpointSlices).
pub trait Side {
    /// Object metadata as this side keeps it.
    type Meta: DeserializeOwned + Into<ObjectMeta>;
    /// One endpoint of a slice as this side keeps it.
    type Endpoint: DeserializeOwned + Into<Endpoint>;
}

/// The DNS server's Kubernetes source: only what the index reads, plus
/// the resource version the watch itself needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dns {}

/// The MCS controller: what a decision reads and what it copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Controller {}

impl Side for Dns {
    type Meta = DnsMeta;
    type Endpoint = DnsEndpoint;
}

impl Side for Controller {
    type Meta = ControllerMeta<KeptAnnotations>;
    type Endpoint = ControllerEndpoint;
}

/// Metadata the DNS source reads: names, labels (the service and cluster
/// a slice belongs to), resource version.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DnsMeta {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
}

impl From<DnsMeta> for ObjectMeta {
    fn from(meta: DnsMeta) -> Self {
        let DnsMeta {
            name,
            namespace,
            resource_version,
            labels,
        } = meta;
        Self {
            name,
            namespace,
            resource_version,
            labels,
            ..Self::default()
        }
    }
}

/// Writes [`ControllerMeta`] and its conversions to and from `ObjectMeta`
/// from one list of the metadata fields the controller keeps besides its
/// annotations, so that the decoding here and the stores' at-rest form
/// (`controller::compact`, which destructures a `ControllerMeta` whole)
/// cannot keep different fields.
macro_rules! controller_meta {
    ($($(#[$doc:meta])* $field:ident: $ty:ty,)*) => {
        /// Metadata the controller reads: everything but `managedFields`,
        /// finalizers and the like; annotations as `A` says.
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        pub struct ControllerMeta<A> {
            $($(#[$doc])* pub $field: Option<$ty>,)*
            /// Its annotations, kept or skipped.
            #[serde(default)]
            pub annotations: A,
        }

        impl<A: Into<KeptAnnotations>> From<ControllerMeta<A>> for ObjectMeta {
            fn from(meta: ControllerMeta<A>) -> Self {
                ObjectMeta {
                    $($field: meta.$field,)*
                    annotations: meta.annotations.into(),
                    ..ObjectMeta::default()
                }
            }
        }

        impl From<ObjectMeta> for ControllerMeta<KeptAnnotations> {
            /// What the controller keeps of `meta`.
            fn from(meta: ObjectMeta) -> Self {
                ControllerMeta {
                    $($field: meta.$field,)*
                    annotations: meta.annotations,
                }
            }
        }
    };
}

controller_meta! {
    /// The name.
    name: String,
    /// The namespace.
    namespace: String,
    /// The UID.
    uid: String,
    /// The resource version.
    resource_version: String,
    /// The generation.
    generation: i64,
    /// When it was created.
    creation_timestamp: Time,
    /// When its deletion was asked for.
    deletion_timestamp: Time,
    /// Its labels.
    labels: BTreeMap<String, String>,
    /// Its owners.
    owner_references: Vec<OwnerReference>,
}

/// Annotations kept.
pub type KeptAnnotations = Option<BTreeMap<String, String>>;

/// Annotations skipped: any JSON value is consumed without being built.
#[derive(Default)]
pub struct SkippedAnnotations;

impl<'de> Deserialize<'de> for SkippedAnnotations {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(deserializer)?;
        Ok(Self)
    }
}

impl From<SkippedAnnotations> for KeptAnnotations {
    fn from(_: SkippedAnnotations) -> Self {
        None
    }
}

/// An endpoint as the DNS index reads it: addresses, conditions (ready,
/// and serving and terminating for the serving fallback), hostname.
#[derive(Deserialize)]
pub struct DnsEndpoint {
    #[serde(default)]
    addresses: Vec<String>,
    conditions: Option<Readiness>,
    hostname: Option<String>,
}

#[derive(Deserialize)]
struct Readiness {
    ready: Option<bool>,
    serving: Option<bool>,
    terminating: Option<bool>,
}

impl From<DnsEndpoint> for Endpoint {
    fn from(endpoint: DnsEndpoint) -> Self {
        let DnsEndpoint {
            addresses,
            conditions,
            hostname,
        } = endpoint;
        Self {
            addresses,
            conditions: conditions.map(
                |Readiness {
                     ready,
                     serving,
                     terminating,
                 }| EndpointConditions {
                    ready,
                    serving,
                    terminating,
                },
            ),
            hostname,
            ..Self::default()
        }
    }
}

/// An endpoint as the controller reads it: what crosses clusters
/// ([`cross_cluster`]), and the node name and hints that a local-first
/// import's hints are computed from and compared with (src/controller
/// reconcile/hints.rs). Target references name objects the controller never
/// reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerEndpoint {
    #[serde(default)]
    addresses: Vec<String>,
    conditions: Option<EndpointConditions>,
    hostname: Option<String>,
    zone: Option<String>,
    node_name: Option<String>,
    hints: Option<EndpointHints>,
}

impl From<ControllerEndpoint> for Endpoint {
    fn from(endpoint: ControllerEndpoint) -> Self {
        let ControllerEndpoint {
            mut addresses,
            conditions,
            hostname,
            zone,
            node_name,
            hints,
        } = endpoint;
        // A decoded Vec grows by doubling (four slots for one address):
        // thousands of slices make the slack count.
        addresses.shrink_to_fit();
        Self {
            addresses,
            conditions,
            hostname,
            zone,
            node_name,
            hints,
            ..Self::default()
        }
    }
}

/// `endpoint` as it is mirrored into, and copied from, another cluster:
/// addresses, conditions, hostname and zone. Node names and hints belong to
/// the cluster that wrote them; in another cluster they would name foreign
/// nodes and zones.
pub fn cross_cluster(endpoint: &Endpoint) -> Endpoint {
    Endpoint {
        addresses: endpoint.addresses.clone(),
        conditions: endpoint.conditions.clone(),
        hostname: endpoint.hostname.clone(),
        zone: endpoint.zone.clone(),
        ..Endpoint::default()
    }
}

impl<'de, S: Side> Deserialize<'de> for Stripped<EndpointSlice, S> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Raw<M, E> {
            metadata: M,
            #[serde(default)]
            address_type: String,
            endpoints: Option<Vec<E>>,
            ports: Option<Vec<EndpointPort>>,
        }
        let raw = Raw::<S::Meta, S::Endpoint>::deserialize(deserializer)?;
        Ok(Self::new(EndpointSlice {
            metadata: raw.metadata.into(),
            address_type: raw.address_type,
            endpoints: raw
                .endpoints
                .unwrap_or_default()
                .into_iter()
                .map(Into::into)
                .collect(),
            ports: raw.ports,
        }))
    }
}

impl<'de> Deserialize<'de> for Stripped<DynamicObject, Dns> {
    /// A ServiceImport of the configured API (group, version and kind are
    /// configuration, so the object is dynamic): the metadata the index
    /// reads, and `spec` undecoded in `data`. The source decodes the spec
    /// object by object, so that one invalid import is skipped and
    /// reported instead of failing the list it arrived in.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            metadata: DnsMeta,
            spec: Option<serde_json::Value>,
        }
        let raw = Raw::deserialize(deserializer)?;
        let data = raw.spec.map(|spec| ("spec".to_owned(), spec));
        Ok(Self::new(DynamicObject {
            types: None,
            metadata: raw.metadata.into(),
            data: serde_json::Value::Object(data.into_iter().collect()),
        }))
    }
}

impl<'de> Deserialize<'de> for Stripped<ServiceExport, Controller> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            metadata: ControllerMeta<KeptAnnotations>,
            #[serde(default)]
            spec: ServiceExportSpec,
            status: Option<ServiceExportStatus>,
        }
        let raw = Raw::deserialize(deserializer)?;
        let mut export = ServiceExport::new("", raw.spec);
        export.metadata = raw.metadata.into();
        export.status = raw.status;
        Ok(Self::new(export))
    }
}

impl<'de> Deserialize<'de> for Stripped<ServiceImport, Controller> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            metadata: ControllerMeta<KeptAnnotations>,
            spec: ServiceImportSpec,
            status: Option<ServiceImportStatus>,
        }
        let raw = Raw::deserialize(deserializer)?;
        let mut import = ServiceImport::new("", raw.spec);
        import.metadata = raw.metadata.into();
        import.status = raw.status;
        Ok(Self::new(import))
    }
}

impl<'de> Deserialize<'de> for Stripped<Service, Controller> {
    /// The merge reads the spec (exported labels and annotations come from
    /// the ServiceExport), the plan our derived Services' spec, labels and
    /// owner references.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            metadata: ControllerMeta<SkippedAnnotations>,
            spec: Option<ServiceSpec>,
        }
        let raw = Raw::deserialize(deserializer)?;
        Ok(Self::new(Service {
            metadata: raw.metadata.into(),
            spec: raw.spec,
            status: None,
        }))
    }
}

impl<'de> Deserialize<'de> for Stripped<PublishedService, Controller> {
    /// A PublishedService without its managed fields.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            metadata: ControllerMeta<SkippedAnnotations>,
            spec: PublishedServiceSpec,
        }
        let raw = Raw::deserialize(deserializer)?;
        let mut published = PublishedService::new("", raw.spec);
        published.metadata = raw.metadata.into();
        Ok(Self::new(published))
    }
}

impl<'de> Deserialize<'de> for Stripped<Node, Controller> {
    /// A Node's labels (its zone), pod ranges and addresses (the address
    /// screen's "this cluster"): its images, conditions and the rest of
    /// its spec and status are skipped.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            metadata: ControllerMeta<SkippedAnnotations>,
            spec: Option<RawSpec>,
            status: Option<RawStatus>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct RawSpec {
            #[serde(rename = "podCIDR")]
            pod_cidr: Option<String>,
            #[serde(rename = "podCIDRs")]
            pod_cidrs: Option<Vec<String>>,
        }
        #[derive(Deserialize)]
        struct RawStatus {
            addresses: Option<Vec<NodeAddress>>,
        }
        let raw = Raw::deserialize(deserializer)?;
        Ok(Self::new(Node {
            metadata: raw.metadata.into(),
            spec: raw.spec.map(|spec| NodeSpec {
                pod_cidr: spec.pod_cidr,
                pod_cidrs: spec.pod_cidrs,
                ..NodeSpec::default()
            }),
            status: raw.status.map(|status| NodeStatus {
                addresses: status.addresses,
                ..NodeStatus::default()
            }),
        }))
    }
}

/// The API resource is that of the kind wrapped.
impl<K: Resource, S> Resource for Stripped<K, S> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }

    fn api_version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::api_version(dt)
    }

    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}
