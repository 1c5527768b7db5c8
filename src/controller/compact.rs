//! The controller's objects at rest: what its stores hold between
//! decisions (issue 23).
//!
//! A store keeps every object of its kind for as long as it exists, while a
//! decision reads the few objects of the services it recomputes. So the
//! stores hold each object compacted, and a read expands it back into the
//! `k8s-openapi` (or our CRD) type the decisions are written against:
//!
//! - metadata without its name and namespace (the store's key has them), a
//!   resource version or UID that is a number or a UUID as its bytes, labels
//!   as an interned slice instead of a B-tree;
//! - an endpoint as its address (an IP address as its bytes) and packed
//!   conditions, with hostname, zone, node name and hints boxed apart;
//! - slice ports with their names and protocols interned;
//! - specs and statuses, read whole and seldom, as their JSON.
//!
//! It costs CPU on every read (`BENCH_CONTROLLER_EXPORTS=N cargo bench
//! --bench heap` times it: about 5 µs per object) and saves more than half
//! the heap the decoded structs took (docs/benchmarks-controller.md).
//!
//! Compacting is lossless: `expand(compact(o)) == o` for any object as the
//! watches decode it ([`super::lean`]), which the tests check kind by kind,
//! so no decision can tell the difference.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointHints, EndpointPort, EndpointSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::stripped::ControllerMeta;
use crate::api::{
    PublishedService, PublishedServiceSpec, ServiceExport, ServiceExportSpec, ServiceExportStatus,
    ServiceImport, ServiceImportSpec, ServiceImportStatus,
};
use crate::at_rest::OneOrMany;

/// Strings that repeat across a store's objects (label keys and values,
/// zones, node names, port names, owner kinds), held once
/// ([`crate::at_rest::Interner`]).
pub type Interner = crate::at_rest::Interner<str>;

/// A kind the controller's stores hold compacted.
pub trait Compact: Sized {
    /// The object at rest, without its namespace and name.
    type Rest: std::fmt::Debug;

    /// Compacts `self`, sharing repeated strings through `strings`.
    fn compact(self, strings: &mut Interner) -> Self::Rest;

    /// The object again, named `name` in `namespace` (the store's key).
    fn expand(rest: &Self::Rest, namespace: &str, name: &str) -> Self;
}

/// An opaque token that is usually a decimal number (resource versions)
/// or a UUID (UIDs): held as its value then, as text otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Number(u64),
    Uuid([u8; 16]),
    Text(Box<str>),
}

impl Token {
    fn new(text: String) -> Self {
        if let Ok(number) = text.parse::<u64>()
            && number.to_string() == text
        {
            return Self::Number(number);
        }
        if let Some(uuid) = parse_uuid(&text) {
            return Self::Uuid(uuid);
        }
        Self::Text(text.into_boxed_str())
    }

    fn text(&self) -> String {
        match self {
            Self::Number(number) => number.to_string(),
            Self::Uuid(bytes) => format_uuid(bytes),
            Self::Text(text) => text.to_string(),
        }
    }
}

/// The bytes of a UUID in its canonical text form (lowercase, hyphenated):
/// only that form, so that formatting gives the same text back.
fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let bytes = text.as_bytes();
    if bytes.len() != 36 {
        return None;
    }
    let mut out = [0u8; 16];
    let mut digits = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            if b != b'-' {
                return None;
            }
            continue;
        }
        let value = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        out[digits / 2] |= value << if digits % 2 == 0 { 4 } else { 0 };
        digits += 1;
    }
    Some(out)
}

fn format_uuid(bytes: &[u8; 16]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // Every expansion of an object with a UID comes here: no allocation
    // per byte.
    let mut text = String::with_capacity(36);
    for (i, byte) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            text.push('-');
        }
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    text
}

/// A value the decisions read whole and seldom (a Service's spec, an
/// import's spec and status, an export's status): held as its JSON, one
/// block instead of a struct of optional fields with a block per string.
pub struct Json<T> {
    bytes: Box<[u8]>,
    kind: PhantomData<fn() -> T>,
}

impl<T> Json<T> {
    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether it is empty (never, for a serialized value).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl<T: Serialize + DeserializeOwned> Json<T> {
    fn new(value: &T) -> Self {
        let bytes = serde_json::to_vec(value).expect("an API value serializes");
        Self {
            bytes: bytes.into_boxed_slice(),
            kind: PhantomData,
        }
    }

    fn get(&self) -> T {
        serde_json::from_slice(&self.bytes).expect("a value serialized here decodes")
    }
}

impl<T> std::fmt::Debug for Json<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.bytes))
    }
}

/// Labels in key order, keys and values interned.
type Labels = Box<[(Arc<str>, Arc<str>)]>;

fn compact_labels(labels: BTreeMap<String, String>, strings: &mut Interner) -> Labels {
    labels
        .iter()
        .map(|(key, value)| (strings.intern(key), strings.intern(value)))
        .collect()
}

fn expand_labels(labels: &Labels) -> BTreeMap<String, String> {
    labels
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

/// Annotations in key order (few objects the controller keeps have any).
type Annotations = Box<[(Box<str>, Box<str>)]>;

/// An owner reference, its API version and kind interned.
#[derive(Debug)]
struct RestOwner {
    api_version: Arc<str>,
    kind: Arc<str>,
    name: Box<str>,
    uid: Token,
    block_owner_deletion: Option<bool>,
    controller: Option<bool>,
}

/// What the controller keeps of an object's metadata ([`super::lean`]),
/// without the name and namespace.
#[derive(Debug)]
pub struct RestMeta {
    uid: Option<Token>,
    resource_version: Option<Token>,
    generation: Option<i64>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    labels: Option<Labels>,
    annotations: Option<Annotations>,
    owner_references: Option<Box<[RestOwner]>>,
    /// Whether the object had a name and a namespace (objects from the
    /// apiserver always have a name, and a namespace for these kinds).
    named: bool,
    namespaced: bool,
}

impl RestMeta {
    fn new(meta: ObjectMeta, strings: &mut Interner) -> Self {
        // Whole, without `..`: a field the watches start to keep is a
        // compile error here until it is kept at rest too.
        let ControllerMeta {
            name,
            namespace,
            uid,
            resource_version,
            generation,
            creation_timestamp,
            deletion_timestamp,
            labels,
            annotations,
            owner_references,
        } = ControllerMeta::from(meta);
        Self {
            uid: uid.map(Token::new),
            resource_version: resource_version.map(Token::new),
            generation,
            creation_timestamp,
            deletion_timestamp,
            labels: labels.map(|labels| compact_labels(labels, strings)),
            annotations: annotations.map(|annotations| {
                annotations
                    .into_iter()
                    .map(|(key, value)| (key.into_boxed_str(), value.into_boxed_str()))
                    .collect()
            }),
            owner_references: owner_references.map(|owners| {
                owners
                    .into_iter()
                    .map(|owner| RestOwner {
                        api_version: strings.intern(&owner.api_version),
                        kind: strings.intern(&owner.kind),
                        name: owner.name.into_boxed_str(),
                        uid: Token::new(owner.uid),
                        block_owner_deletion: owner.block_owner_deletion,
                        controller: owner.controller,
                    })
                    .collect()
            }),
            named: name.is_some(),
            namespaced: namespace.is_some(),
        }
    }

    fn expand(&self, namespace: &str, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: self.named.then(|| name.to_owned()),
            namespace: self.namespaced.then(|| namespace.to_owned()),
            uid: self.uid.as_ref().map(Token::text),
            resource_version: self.resource_version.as_ref().map(Token::text),
            generation: self.generation,
            creation_timestamp: self.creation_timestamp.clone(),
            deletion_timestamp: self.deletion_timestamp.clone(),
            labels: self.labels.as_ref().map(expand_labels),
            annotations: self.annotations.as_ref().map(|annotations| {
                annotations
                    .iter()
                    .map(|(key, value)| (key.to_string(), value.to_string()))
                    .collect()
            }),
            owner_references: self.owner_references.as_ref().map(|owners| {
                owners
                    .iter()
                    .map(|owner| OwnerReference {
                        api_version: owner.api_version.to_string(),
                        kind: owner.kind.to_string(),
                        name: owner.name.to_string(),
                        uid: owner.uid.text(),
                        block_owner_deletion: owner.block_owner_deletion,
                        controller: owner.controller,
                    })
                    .collect()
            }),
            ..ObjectMeta::default()
        }
    }
}

/// An address: an IP address in its canonical text form as its bytes,
/// anything else as text.
#[derive(Debug)]
enum Address {
    Ip(IpAddr),
    Text(Box<str>),
}

impl Address {
    fn new(text: String) -> Self {
        match text.parse::<IpAddr>() {
            Ok(ip) if ip.to_string() == text => Self::Ip(ip),
            _ => Self::Text(text.into_boxed_str()),
        }
    }

    fn text(&self) -> String {
        match self {
            Self::Ip(ip) => ip.to_string(),
            Self::Text(text) => text.to_string(),
        }
    }
}

/// An endpoint's addresses: nearly always one, held inline.
type Addresses = OneOrMany<Address>;

/// `Option<bool>` in two bits.
fn tri(value: Option<bool>) -> u8 {
    match value {
        None => 0,
        Some(false) => 1,
        Some(true) => 2,
    }
}

fn untri(bits: u8) -> Option<bool> {
    match bits & 0b11 {
        0 => None,
        1 => Some(false),
        _ => Some(true),
    }
}

/// Endpoint conditions in one byte: whether they are present, then ready,
/// serving and terminating two bits each.
#[derive(Debug, Clone, Copy)]
struct Conditions(u8);

impl Conditions {
    const PRESENT: u8 = 1 << 7;

    fn new(conditions: Option<EndpointConditions>) -> Self {
        Self(conditions.map_or(0, |c| {
            Self::PRESENT | tri(c.ready) | tri(c.serving) << 2 | tri(c.terminating) << 4
        }))
    }

    fn expand(self) -> Option<EndpointConditions> {
        (self.0 & Self::PRESENT != 0).then(|| EndpointConditions {
            ready: untri(self.0),
            serving: untri(self.0 >> 2),
            terminating: untri(self.0 >> 4),
        })
    }
}

/// What the controller keeps of an endpoint ([`super::lean`]): the
/// address and conditions inline, the rest (absent from most endpoints of
/// a ClusterSetIP service) boxed apart.
#[derive(Debug)]
pub struct RestEndpoint {
    addresses: Addresses,
    conditions: Conditions,
    more: Option<Box<EndpointMore>>,
}

/// An endpoint's hostname, zone, node name and hints.
#[derive(Debug)]
struct EndpointMore {
    hostname: Option<Box<str>>,
    zone: Option<Arc<str>>,
    node_name: Option<Arc<str>>,
    hints: Option<EndpointHints>,
}

impl RestEndpoint {
    fn new(endpoint: Endpoint, strings: &mut Interner) -> Self {
        let Endpoint {
            addresses,
            conditions,
            hostname,
            hints,
            node_name,
            zone,
            ..
        } = endpoint;
        let addresses: Addresses = addresses.into_iter().map(Address::new).collect();
        let more = (hostname.is_some() || zone.is_some() || node_name.is_some() || hints.is_some())
            .then(|| {
                Box::new(EndpointMore {
                    hostname: hostname.map(String::into_boxed_str),
                    zone: zone.map(|zone| strings.intern(&zone)),
                    node_name: node_name.map(|node| strings.intern(&node)),
                    hints,
                })
            });
        Self {
            addresses,
            conditions: Conditions::new(conditions),
            more,
        }
    }

    fn expand(&self) -> Endpoint {
        let addresses = self.addresses.iter().map(Address::text).collect();
        let text = |text: Option<&str>| text.map(str::to_owned);
        let more = self.more.as_deref();
        Endpoint {
            addresses,
            conditions: self.conditions.expand(),
            hostname: text(more.and_then(|m| m.hostname.as_deref())),
            hints: more.and_then(|m| m.hints.clone()),
            node_name: text(more.and_then(|m| m.node_name.as_deref())),
            zone: text(more.and_then(|m| m.zone.as_deref())),
            ..Endpoint::default()
        }
    }

    /// Number of addresses.
    fn address_count(&self) -> usize {
        self.addresses.len()
    }
}

/// A slice port, its names and protocol interned.
#[derive(Debug)]
struct RestPort {
    app_protocol: Option<Arc<str>>,
    name: Option<Arc<str>>,
    protocol: Option<Arc<str>>,
    port: Option<i32>,
}

/// An EndpointSlice at rest.
#[derive(Debug)]
pub struct RestSlice {
    meta: RestMeta,
    address_type: Arc<str>,
    endpoints: Box<[RestEndpoint]>,
    ports: Option<Box<[RestPort]>>,
}

impl RestSlice {
    /// Number of endpoints.
    pub fn endpoint_count(&self) -> usize {
        self.endpoints.len()
    }

    /// Number of addresses over all endpoints.
    pub fn address_count(&self) -> usize {
        self.endpoints.iter().map(RestEndpoint::address_count).sum()
    }
}

impl Compact for EndpointSlice {
    type Rest = RestSlice;

    fn compact(self, strings: &mut Interner) -> RestSlice {
        let intern =
            |strings: &mut Interner, text: Option<String>| text.map(|text| strings.intern(&text));
        RestSlice {
            meta: RestMeta::new(self.metadata, strings),
            address_type: strings.intern(&self.address_type),
            endpoints: self
                .endpoints
                .into_iter()
                .map(|endpoint| RestEndpoint::new(endpoint, strings))
                .collect(),
            ports: self.ports.map(|ports| {
                ports
                    .into_iter()
                    .map(|port| RestPort {
                        app_protocol: intern(strings, port.app_protocol),
                        name: intern(strings, port.name),
                        protocol: intern(strings, port.protocol),
                        port: port.port,
                    })
                    .collect()
            }),
        }
    }

    fn expand(rest: &RestSlice, namespace: &str, name: &str) -> Self {
        let text = |text: &Option<Arc<str>>| text.as_deref().map(str::to_owned);
        Self {
            metadata: rest.meta.expand(namespace, name),
            address_type: rest.address_type.to_string(),
            endpoints: rest.endpoints.iter().map(RestEndpoint::expand).collect(),
            ports: rest.ports.as_ref().map(|ports| {
                ports
                    .iter()
                    .map(|port| EndpointPort {
                        app_protocol: text(&port.app_protocol),
                        name: text(&port.name),
                        protocol: text(&port.protocol),
                        port: port.port,
                    })
                    .collect()
            }),
        }
    }
}

/// A Service at rest.
#[derive(Debug)]
pub struct RestService {
    meta: RestMeta,
    spec: Option<Json<ServiceSpec>>,
}

impl RestService {
    /// Its spec's size at rest, in bytes.
    pub fn bytes(&self) -> usize {
        self.spec.as_ref().map_or(0, Json::len)
    }
}

impl Compact for Service {
    type Rest = RestService;

    fn compact(self, strings: &mut Interner) -> RestService {
        RestService {
            meta: RestMeta::new(self.metadata, strings),
            spec: self.spec.as_ref().map(Json::new),
        }
    }

    fn expand(rest: &RestService, namespace: &str, name: &str) -> Self {
        Self {
            metadata: rest.meta.expand(namespace, name),
            spec: rest.spec.as_ref().map(Json::get),
            status: None,
        }
    }
}

/// A ServiceExport at rest.
#[derive(Debug)]
pub struct RestExport {
    meta: RestMeta,
    spec: Json<ServiceExportSpec>,
    status: Option<Json<ServiceExportStatus>>,
}

impl RestExport {
    /// Its spec's and status's size at rest, in bytes.
    pub fn bytes(&self) -> usize {
        self.spec.len() + self.status.as_ref().map_or(0, Json::len)
    }
}

impl Compact for ServiceExport {
    type Rest = RestExport;

    fn compact(self, strings: &mut Interner) -> RestExport {
        RestExport {
            meta: RestMeta::new(self.metadata, strings),
            spec: Json::new(&self.spec),
            status: self.status.as_ref().map(Json::new),
        }
    }

    fn expand(rest: &RestExport, namespace: &str, name: &str) -> Self {
        let mut export = Self::new(name, rest.spec.get());
        export.metadata = rest.meta.expand(namespace, name);
        export.status = rest.status.as_ref().map(Json::get);
        export
    }
}

/// A ServiceImport at rest.
#[derive(Debug)]
pub struct RestImport {
    meta: RestMeta,
    spec: Json<ServiceImportSpec>,
    status: Option<Json<ServiceImportStatus>>,
}

impl Compact for ServiceImport {
    type Rest = RestImport;

    fn compact(self, strings: &mut Interner) -> RestImport {
        RestImport {
            meta: RestMeta::new(self.metadata, strings),
            spec: Json::new(&self.spec),
            status: self.status.as_ref().map(Json::new),
        }
    }

    fn expand(rest: &RestImport, namespace: &str, name: &str) -> Self {
        let mut import = Self::new(name, rest.spec.get());
        import.metadata = rest.meta.expand(namespace, name);
        import.status = rest.status.as_ref().map(Json::get);
        import
    }
}

/// A PublishedService at rest.
#[derive(Debug)]
pub struct RestPublished {
    meta: RestMeta,
    spec: Json<PublishedServiceSpec>,
}

impl Compact for PublishedService {
    type Rest = RestPublished;

    fn compact(self, strings: &mut Interner) -> RestPublished {
        RestPublished {
            meta: RestMeta::new(self.metadata, strings),
            spec: Json::new(&self.spec),
        }
    }

    fn expand(rest: &RestPublished, namespace: &str, name: &str) -> Self {
        let mut published = Self::new(name, rest.spec.get());
        published.metadata = rest.meta.expand(namespace, name);
        published
    }
}

#[cfg(test)]
mod tests;
