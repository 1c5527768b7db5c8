//! What the controller knows of one cluster: the objects its watches have
//! indexed, keyed by the service they belong to.
//!
//! Every cluster (this one and each peer) has a [`ClusterData`] holding
//! ServiceExports, Services and MCS EndpointSlices. This cluster's store also
//! holds what only the local cluster has: the Kubernetes EndpointSlices of
//! local Services (mirrored for export), the ServiceImports, the Namespaces,
//! the ServiceCIDRs, the zones and addresses of the Nodes, and what this
//! cluster publishes for its peers ([`Published`]). Each kind is fed by a
//! [`crate::watch::Watch`] (the three kinds every cluster has by one
//! [`ClusterWatches`], for this cluster as for a peer), so a relist
//! replaces a kind's state in one step, and each store remembers the
//! services its changes touched ([`Objects::take_touched`]), so the
//! reconciler recomputes only those. Objects rest compacted
//! ([`super::compact`]) and are expanded when a decision reads them.

use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;

use super::compact::{Compact, Interner, RestExport, RestService, RestSlice};
use super::lean::Lean;
use crate::api::ServiceRef;
use crate::api::well_known::{LABEL_KUBERNETES_SERVICE_NAME, LABEL_SERVICE_NAME};
use crate::api::{ServiceExport, ServiceImport};
use crate::watch::IndexResource;

mod local;
mod published;
mod watched;
pub use local::{LocalData, NodeFacts};
pub use published::Published;
pub use watched::ClusterWatches;

/// Objects of one kind, keyed by namespace and name, with the services
/// they belong to: held compacted ([`super::compact`]) and expanded when
/// read.
#[derive(Debug)]
pub struct Objects<K: Compact> {
    /// Boxed: lists arrive in name order, and a B-tree filled in order
    /// leaves its nodes about half empty; inline, each empty slot cost a
    /// whole object (~250 bytes), boxed it costs a pointer.
    by_name: BTreeMap<Arc<str>, ByName<K>>,
    /// The names of each service's objects, in order (one or a few per
    /// service: a short vector, not a tree).
    by_service: BTreeMap<ServiceRef, Vec<Arc<str>>>,
    owner: fn(&K) -> Option<ServiceRef>,
    strings: Interner,
    len: usize,
    touched: Touched,
    cap: Option<Cap<K>>,
}

/// One namespace's objects by name, each boxed (see [`Objects`]).
type ByName<K> = BTreeMap<Arc<str>, Box<Stored<K>>>;

/// One object at rest and the service it belongs to (kept, so that a
/// removal need not expand the object to find it).
#[derive(Debug)]
struct Stored<K: Compact> {
    service: Option<ServiceRef>,
    /// Whether it carries our managed-by label ([`is_ours`]).
    ours: bool,
    rest: K::Rest,
}

/// An object of a complete list, compacted while the list arrives (a list
/// of thousands of objects is not held whole beside the current state).
#[derive(Debug)]
pub struct Listed<K: Compact> {
    namespace: String,
    name: String,
    stored: Box<Stored<K>>,
}

/// The most a peer may make this controller hold of one kind: a number of
/// objects, a total weight (endpoint addresses, for slices) and a size of
/// one object at rest. An object that would pass any is refused, not
/// stored, and counted; a complete list keeps the first objects in
/// (namespace, name) order, so every controller of the clusterset keeps
/// the same ones. While a list arrives, objects past the count are not
/// even buffered (the apiserver lists in key order, the same order), so a
/// peer listing millions costs one page at a time, not the whole list.
#[derive(Debug)]
struct Cap<K: Compact> {
    max_objects: usize,
    max_weight: usize,
    weight: fn(&K::Rest) -> usize,
    max_object_bytes: usize,
    bytes: fn(&K::Rest) -> usize,
    total_weight: usize,
    /// The list under way: its first `max_objects` objects in (namespace,
    /// name) order so far, the last of them on top, so one that sorts
    /// before it takes its place.
    listing: BinaryHeap<ByKey<K>>,
    refused: u64,
}

/// A listed object ordered by its key (namespace, name).
struct ByKey<K: Compact>(Listed<K>);

impl<K: Compact> ByKey<K> {
    fn key(&self) -> (&str, &str) {
        (&self.0.namespace, &self.0.name)
    }
}

impl<K: Compact> PartialEq for ByKey<K> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<K: Compact> Eq for ByKey<K> {}

impl<K: Compact> PartialOrd for ByKey<K> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<K: Compact> Ord for ByKey<K> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

impl<K: Compact> std::fmt::Debug for ByKey<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.0.namespace, self.0.name)
    }
}

/// How a capped kind weighs and sizes its objects at rest.
struct Measure<K: Compact> {
    max_weight: usize,
    weight: fn(&K::Rest) -> usize,
    max_object_bytes: usize,
    bytes: fn(&K::Rest) -> usize,
}

impl<K: kube::Resource + Compact> Objects<K> {
    fn new(owner: fn(&K) -> Option<ServiceRef>) -> Self {
        Self {
            by_name: BTreeMap::new(),
            by_service: BTreeMap::new(),
            owner,
            strings: Interner::default(),
            len: 0,
            touched: Touched::default(),
            cap: None,
        }
    }

    fn capped(mut self, max_objects: usize, measure: Measure<K>) -> Self {
        self.cap = Some(Cap {
            max_objects,
            max_weight: measure.max_weight,
            weight: measure.weight,
            max_object_bytes: measure.max_object_bytes,
            bytes: measure.bytes,
            total_weight: 0,
            listing: BinaryHeap::new(),
            refused: 0,
        });
        self
    }

    /// A list begins: nothing of it is held yet.
    fn start_listing(&mut self) {
        if let Some(cap) = &mut self.cap {
            cap.listing.clear();
        }
    }

    /// `object` compacted for the list under way. A capped store keeps
    /// it itself, among the first `max_objects` in key order so far
    /// (those it displaces, and objects over the size limit, are counted
    /// as refused), and hands nothing to the caller's buffer: a peer
    /// listing millions of objects costs this many, whatever the order.
    fn listed_within_cap(&mut self, object: K) -> Option<Listed<K>> {
        let listed = self.compacted(object);
        let Some(cap) = &mut self.cap else {
            return Some(listed);
        };
        if (cap.bytes)(&listed.stored.rest) > cap.max_object_bytes {
            cap.refused += 1;
            return None;
        }
        cap.listing.push(ByKey(listed));
        if cap.listing.len() > cap.max_objects {
            cap.listing.pop();
            cap.refused += 1;
        }
        None
    }

    /// How many objects the cap refused since the last call.
    pub fn take_refused(&mut self) -> u64 {
        self.cap
            .as_mut()
            .map_or(0, |cap| std::mem::take(&mut cap.refused))
    }

    /// The services changed since the last call.
    pub fn take_touched(&mut self) -> Touched {
        std::mem::take(&mut self.touched)
    }

    /// The object named `name` in `namespace`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<K> {
        let stored = self.by_name.get(namespace)?.get(name)?;
        Some(K::expand(&stored.rest, namespace, name))
    }

    /// The objects that belong to `service`.
    pub fn of(&self, service: &ServiceRef) -> impl Iterator<Item = K> {
        let namespace = &*service.namespace;
        let in_namespace = self.by_name.get(namespace);
        self.by_service
            .get(service)
            .into_iter()
            .flatten()
            .filter_map(move |name| {
                let stored = in_namespace?.get(name)?;
                Some(K::expand(&stored.rest, namespace, name))
            })
    }

    /// Every service some object belongs to.
    pub fn services(&self) -> impl Iterator<Item = &ServiceRef> {
        self.by_service.keys()
    }

    /// Every service one of our own objects belongs to (read without
    /// expanding any object).
    pub fn services_with_ours(&self) -> impl Iterator<Item = &ServiceRef> {
        self.by_service
            .iter()
            .filter(|(service, names)| {
                let in_namespace = self.by_name.get(&*service.namespace);
                names.iter().any(|name| {
                    in_namespace
                        .and_then(|objects| objects.get(name))
                        .is_some_and(|stored| stored.ours)
                })
            })
            .map(|(service, _)| service)
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `object` compacted, with its key and service.
    fn compacted(&mut self, object: K) -> Listed<K> {
        let namespace = object.namespace().unwrap_or_default();
        let name = object.name_any();
        let service = (self.owner)(&object).map(|service| {
            // One copy of the reference for all of a service's objects,
            // its namespace shared with every other service's.
            match self.by_service.get_key_value(&service) {
                Some((shared, _)) => shared.clone(),
                None => ServiceRef {
                    namespace: self.strings.intern(&service.namespace),
                    name: service.name,
                },
            }
        });
        Listed {
            namespace,
            name,
            stored: Box::new(Stored {
                service,
                ours: is_ours(&object),
                rest: object.compact(&mut self.strings),
            }),
        }
    }

    fn insert(&mut self, object: K) {
        let listed = self.compacted(object);
        self.insert_compacted(listed);
    }

    fn insert_compacted(&mut self, listed: Listed<K>) {
        let Listed {
            namespace,
            name,
            stored,
        } = listed;
        self.remove(&namespace, &name);
        if let Some(cap) = &mut self.cap {
            let weight = (cap.weight)(&stored.rest);
            if self.len >= cap.max_objects
                || cap.total_weight.saturating_add(weight) > cap.max_weight
                || (cap.bytes)(&stored.rest) > cap.max_object_bytes
            {
                // Refused: whatever the old version contributed is gone
                // too (removed above), as for a deletion.
                cap.refused += 1;
                return;
            }
            cap.total_weight += weight;
        }
        let namespace = self.strings.intern(&namespace);
        let name: Arc<str> = match &stored.service {
            // An export, an import or a Service named as its service.
            Some(service) if *service.name == *name => service.name.clone(),
            _ => name.into(),
        };
        if let Some(service) = &stored.service {
            let names = self.by_service.entry(service.clone()).or_default();
            if let Err(at) = names.binary_search(&name) {
                names.insert(at, name.clone());
            }
            self.touched.service(service.clone());
        }
        self.by_name
            .entry(namespace)
            .or_default()
            .insert(name, stored);
        self.len += 1;
    }

    /// Forgets an object deleted by our own write, before its watch event
    /// arrives (so the next plan does not delete it again).
    pub fn forget(&mut self, namespace: &str, name: &str) {
        self.remove(namespace, name);
    }

    fn remove(&mut self, namespace: &str, name: &str) {
        let Some(in_namespace) = self.by_name.get_mut(namespace) else {
            return;
        };
        let Some(old) = in_namespace.remove(name) else {
            return;
        };
        if in_namespace.is_empty() {
            self.by_name.remove(namespace);
        }
        self.len -= 1;
        if let Some(cap) = &mut self.cap {
            cap.total_weight -= (cap.weight)(&old.rest);
        }
        if let Some(service) = old.service {
            if let Some(names) = self.by_service.get_mut(&service) {
                if let Ok(at) = names.binary_search_by(|n| (**n).cmp(name)) {
                    names.remove(at);
                }
                if names.is_empty() {
                    self.by_service.remove(&service);
                }
            }
            self.touched.service(service);
        }
    }

    fn replace(&mut self, mut listed: Vec<Listed<K>>) {
        if let Some(cap) = &mut self.cap {
            listed.extend(cap.listing.drain().map(|keyed| keyed.0));
        }
        for service in std::mem::take(&mut self.by_service).into_keys() {
            self.touched.service(service);
        }
        self.by_name.clear();
        self.len = 0;
        if let Some(cap) = &mut self.cap {
            cap.total_weight = 0;
        }
        if self.cap.is_some() {
            // The same objects in every controller, whatever the list order.
            listed.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        }
        for object in listed {
            self.insert_compacted(object);
        }
    }
}

/// The services a change touched.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Touched {
    /// Services whose inputs or outputs changed.
    pub services: BTreeSet<ServiceRef>,
    /// Something that may affect every service changed (a namespace, the
    /// cluster's IP families).
    pub all: bool,
}

impl Touched {
    fn service(&mut self, service: ServiceRef) {
        self.services.insert(service);
    }

    /// Adds another change's services.
    pub fn merge(&mut self, other: Self) {
        self.all |= other.all;
        self.services.extend(other.services);
    }

    /// Whether nothing was touched.
    pub fn is_empty(&self) -> bool {
        !self.all && self.services.is_empty()
    }
}

fn named(object: &impl kube::Resource) -> Option<ServiceRef> {
    Some(ServiceRef::new(
        &object.meta().namespace.clone().unwrap_or_default(),
        object.meta().name.as_deref()?,
    ))
}

/// The service a Service belongs to: itself, or for a derived Service the
/// imported service named in its `multicluster.kubernetes.io/service-name`
/// label.
fn service_owner(service: &Service) -> Option<ServiceRef> {
    let namespace = service.namespace().unwrap_or_default();
    match service.labels().get(LABEL_SERVICE_NAME) {
        Some(imported) if is_ours(service) => Some(ServiceRef::new(&namespace, imported)),
        _ => named(service),
    }
}

fn mcs_slice_owner(slice: &EndpointSlice) -> Option<ServiceRef> {
    let service = slice.labels().get(LABEL_SERVICE_NAME)?;
    Some(ServiceRef::new(
        &slice.namespace().unwrap_or_default(),
        service,
    ))
}

fn kubernetes_slice_owner(slice: &EndpointSlice) -> Option<ServiceRef> {
    let service = slice.labels().get(LABEL_KUBERNETES_SERVICE_NAME)?;
    Some(ServiceRef::new(
        &slice.namespace().unwrap_or_default(),
        service,
    ))
}

/// Whether an object carries our managed-by label.
pub fn is_ours(object: &impl kube::Resource) -> bool {
    use super::naming::{LABEL_APP_MANAGED_BY, MANAGED_BY};
    use crate::api::well_known::LABEL_MANAGED_BY;
    let labels = &object.meta().labels;
    labels.as_ref().is_some_and(|labels| {
        labels.get(LABEL_APP_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY)
            || labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY)
    })
}

/// What the controller reads from any cluster, this one or a peer.
#[derive(Debug)]
pub struct ClusterData {
    /// ServiceExports.
    pub exports: Objects<ServiceExport>,
    /// Services (exported ones, and in this cluster the derived ones).
    pub services: Objects<Service>,
    /// MCS EndpointSlices managed by a clusterset-dns controller: in a peer,
    /// the ones it mirrored from its own Services; here, all we wrote.
    pub mcs_slices: Objects<EndpointSlice>,
}

impl Default for ClusterData {
    fn default() -> Self {
        Self {
            exports: Objects::new(named),
            services: Objects::new(service_owner),
            mcs_slices: Objects::new(mcs_slice_owner),
        }
    }
}
/// The most one peer's ServiceExport may take at rest (its spec and
/// status as JSON): its conditions are a few KiB at most, and its
/// exported labels and annotations at most
/// [`crate::api::service_rules::MAX_EXPORTED_METADATA_BYTES`] (4 KiB).
pub const MAX_EXPORT_BYTES: usize = 16 * 1024;

/// The most one peer's Service (or the Service view of its
/// PublishedService) may take at rest, its spec as JSON: 100 ports with
/// long names and app protocols come to about 8 KiB.
pub const MAX_SERVICE_BYTES: usize = 16 * 1024;

/// What one peer at its limits can make this controller hold at most, in
/// bytes: every export and Service at its size limit, and every endpoint
/// address at its size at rest ([`BYTES_PER_ENDPOINT`]). docs/controller.md,
/// "Limits and budgets", sums it against the shipped memory limit.
pub fn peer_budget_bytes(limits: &PeerLimits) -> usize {
    limits.exports * MAX_EXPORT_BYTES
        + limits.services * MAX_SERVICE_BYTES
        + limits.endpoints * BYTES_PER_ENDPOINT
}

/// A generous bound on one endpoint address at rest with its share of
/// its slice, not a measurement: a compact endpoint is its address, its
/// conditions and, when it has a hostname or zone, a boxed rest; 256 B
/// leaves room for a hostname of about a hundred characters.
pub const BYTES_PER_ENDPOINT: usize = 256;

/// How much of a peer's data this controller holds at most (peer input is
/// untrusted: a broken or hostile peer must not exhaust our memory or fill
/// our cluster with objects).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerLimits {
    /// ServiceExports.
    pub exports: usize,
    /// Services (every Service of the peer but its derived ones).
    pub services: usize,
    /// Mirrored EndpointSlices.
    pub slices: usize,
    /// Endpoints in those slices, in total.
    pub endpoints: usize,
}

impl ClusterData {
    /// The store of a peer's data, within `limits`.
    pub fn for_peer(limits: PeerLimits) -> Self {
        Self {
            exports: Objects::new(named).capped(
                limits.exports,
                Measure {
                    max_weight: usize::MAX,
                    weight: |_| 0,
                    max_object_bytes: MAX_EXPORT_BYTES,
                    bytes: RestExport::bytes,
                },
            ),
            services: Objects::new(service_owner).capped(
                limits.services,
                Measure {
                    max_weight: usize::MAX,
                    weight: |_| 0,
                    max_object_bytes: MAX_SERVICE_BYTES,
                    bytes: RestService::bytes,
                },
            ),
            // Addresses, not endpoints: an endpoint may carry up to 100,
            // and each is held.
            mcs_slices: Objects::new(mcs_slice_owner).capped(
                limits.slices,
                Measure {
                    max_weight: limits.endpoints,
                    weight: RestSlice::address_count,
                    max_object_bytes: usize::MAX,
                    bytes: |_| 0,
                },
            ),
        }
    }

    /// The services its changes touched since the last call.
    pub fn take_touched(&mut self) -> Touched {
        let mut touched = self.exports.take_touched();
        touched.merge(self.services.take_touched());
        touched.merge(self.mcs_slices.take_touched());
        touched
    }

    /// Objects refused by the limits since the last call, by kind.
    pub fn take_refused(&mut self) -> [(&'static str, u64); 3] {
        [
            ("serviceexports", self.exports.take_refused()),
            ("services", self.services.take_refused()),
            ("endpointslices", self.mcs_slices.take_refused()),
        ]
    }
}

macro_rules! objects_store {
    ($kind:ty) => {
        /// Objects as the watches and our writes decode them (stripped).
        impl IndexResource<Lean<$kind>> for Objects<$kind> {
            type Listed = Listed<$kind>;

            fn apply(&mut self, object: Lean<$kind>) {
                self.insert(object.0);
            }

            fn delete(&mut self, object: Lean<$kind>) {
                let object = object.0;
                self.remove(&object.namespace().unwrap_or_default(), &object.name_any());
            }

            fn list_started(&mut self) {
                self.start_listing();
            }

            fn listed(&mut self, object: Lean<$kind>) -> Option<Listed<$kind>> {
                self.listed_within_cap(object.0)
            }

            fn reset(&mut self, listed: Vec<Listed<$kind>>) {
                self.replace(listed);
            }
        }
    };
}

/// Objects held whole, as tests that play the apiserver build them: stored
/// as the apiserver's answer would be decoded.
#[cfg(test)]
impl<K> IndexResource<K> for Objects<K>
where
    K: serde::Serialize + Compact,
    Self: IndexResource<Lean<K>, Listed = Listed<K>>,
    Lean<K>: serde::de::DeserializeOwned,
{
    type Listed = Listed<K>;

    fn apply(&mut self, object: K) {
        IndexResource::<Lean<K>>::apply(self, Lean::from_whole(&object));
    }

    fn delete(&mut self, object: K) {
        IndexResource::<Lean<K>>::delete(self, Lean::new(object));
    }

    fn listed(&mut self, object: K) -> Option<Listed<K>> {
        IndexResource::<Lean<K>>::listed(self, Lean::from_whole(&object))
    }

    fn reset(&mut self, listed: Vec<Listed<K>>) {
        IndexResource::<Lean<K>>::reset(self, listed);
    }
}

objects_store!(ServiceExport);
objects_store!(Service);
objects_store!(EndpointSlice);
objects_store!(ServiceImport);
objects_store!(crate::api::PublishedService);

#[cfg(test)]
mod tests {
    use k8s_openapi::api::discovery::v1::Endpoint;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn slice(name: &str, endpoints: usize) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("shop".into()),
                labels: Some([(LABEL_SERVICE_NAME.to_owned(), "web".to_owned())].into()),
                ..ObjectMeta::default()
            },
            address_type: "IPv4".into(),
            endpoints: vec![
                Endpoint {
                    addresses: vec!["10.1.0.1".into()],
                    ..Endpoint::default()
                };
                endpoints
            ],
            ports: None,
        }
    }

    fn names(objects: &Objects<EndpointSlice>) -> Vec<String> {
        objects
            .by_name
            .values()
            .flat_map(|names| names.keys().map(|name| name.to_string()))
            .collect()
    }

    fn peer() -> ClusterData {
        ClusterData::for_peer(PeerLimits {
            exports: 10,
            services: 10,
            slices: 3,
            endpoints: 100,
        })
    }

    #[test]
    fn a_peer_beyond_its_slice_limit_is_refused_and_counted() {
        let mut data = peer();
        for name in ["a", "b", "c", "d"] {
            IndexResource::apply(&mut data.mcs_slices, Lean::new(slice(name, 1)));
        }
        assert_eq!(names(&data.mcs_slices), ["a", "b", "c"]);
        assert_eq!(data.take_refused()[2], ("endpointslices", 1));
        assert_eq!(data.take_refused()[2], ("endpointslices", 0));
        // A deletion makes room again.
        IndexResource::delete(&mut data.mcs_slices, Lean::new(slice("a", 1)));
        IndexResource::apply(&mut data.mcs_slices, Lean::new(slice("d", 1)));
        assert_eq!(names(&data.mcs_slices), ["b", "c", "d"]);
    }

    #[test]
    fn the_endpoint_limit_counts_every_slice_and_follows_updates() {
        let mut data = peer();
        IndexResource::apply(&mut data.mcs_slices, Lean::new(slice("a", 60)));
        IndexResource::apply(&mut data.mcs_slices, Lean::new(slice("b", 50)));
        assert_eq!(names(&data.mcs_slices), ["a"], "60 + 50 > 100");
        // Shrinking a makes room for b; growing a past the limit drops it.
        IndexResource::apply(&mut data.mcs_slices, Lean::new(slice("a", 10)));
        IndexResource::apply(&mut data.mcs_slices, Lean::new(slice("b", 50)));
        assert_eq!(names(&data.mcs_slices), ["a", "b"]);
        IndexResource::apply(&mut data.mcs_slices, Lean::new(slice("a", 60)));
        assert_eq!(names(&data.mcs_slices), ["b"]);
        assert_eq!(data.take_refused()[2].1, 2);
    }

    #[test]
    fn a_list_over_the_limit_keeps_the_same_objects_in_any_order() {
        let listed = |order: &[&str]| {
            let mut data = peer();
            let store = &mut data.mcs_slices;
            let objects = order
                .iter()
                .filter_map(|name| IndexResource::listed(store, Lean::new(slice(name, 1))))
                .collect();
            IndexResource::<Lean<EndpointSlice>>::reset(store, objects);
            names(&data.mcs_slices)
        };
        assert_eq!(listed(&["e", "d", "c", "b", "a"]), ["a", "b", "c"]);
        assert_eq!(listed(&["b", "a", "e", "c", "d"]), ["a", "b", "c"]);
    }

    #[test]
    fn a_list_past_the_limit_holds_no_more_than_the_limit_while_it_arrives() {
        // Issue 44 (H2): 300,000 objects listed cost the limit, not the list.
        let mut data = peer();
        let store = &mut data.mcs_slices;
        IndexResource::<Lean<EndpointSlice>>::list_started(store);
        for i in (0..300_000).rev() {
            let kept = IndexResource::listed(store, Lean::new(slice(&format!("s{i:06}"), 0)));
            assert!(kept.is_none(), "the store holds it, not the caller");
            assert!(store.cap.as_ref().unwrap().listing.len() <= 3);
        }
        IndexResource::<Lean<EndpointSlice>>::reset(store, Vec::new());
        assert_eq!(names(&data.mcs_slices), ["s000000", "s000001", "s000002"]);
        assert_eq!(data.take_refused()[2].1, 300_000 - 3);
    }

    #[test]
    fn a_peers_export_or_service_over_its_size_limit_is_refused_and_counted() {
        use crate::api::ServiceExport;
        let export = |name: &str, annotation_bytes: usize| {
            let mut export = ServiceExport::new(name, Default::default());
            export.metadata.namespace = Some("shop".into());
            export
                .spec
                .exported_annotations
                .insert("padding".into(), "x".repeat(annotation_bytes));
            export
        };
        let mut data = peer();
        IndexResource::apply(&mut data.exports, Lean::new(export("small", 1000)));
        IndexResource::apply(
            &mut data.exports,
            Lean::new(export("big", MAX_EXPORT_BYTES)),
        );
        assert!(data.exports.get("shop", "small").is_some());
        assert!(data.exports.get("shop", "big").is_none());
        // A list, too.
        let store = &mut data.exports;
        IndexResource::<Lean<ServiceExport>>::list_started(store);
        for (name, bytes) in [("a", 10), ("b", MAX_EXPORT_BYTES * 64), ("c", 10)] {
            IndexResource::listed(store, Lean::new(export(name, bytes)));
        }
        IndexResource::<Lean<ServiceExport>>::reset(store, Vec::new());
        assert_eq!(data.exports.len(), 2);
        assert_eq!(data.take_refused()[0], ("serviceexports", 2));
        assert!(
            peer_budget_bytes(&PeerLimits {
                exports: 2_000,
                services: 2_000,
                slices: 10_000,
                endpoints: 100_000,
            }) < 100 * 1024 * 1024,
            "the defaults' budget, docs/controller.md"
        );
    }

    #[test]
    fn a_store_reads_back_what_it_was_given_by_name_and_by_service() {
        let mut data = ClusterData::default();
        let web = ServiceRef::new("shop", "web");
        let mut first = slice("a", 2);
        first.endpoints[0].addresses = vec!["10.0.0.1".into()];
        first.endpoints[0].zone = Some("zone-a".into());
        IndexResource::apply(&mut data.mcs_slices, Lean::new(first.clone()));
        IndexResource::apply(&mut data.mcs_slices, Lean::new(slice("b", 1)));
        assert_eq!(data.mcs_slices.get("shop", "a"), Some(first));
        assert_eq!(data.mcs_slices.get("shop", "c"), None);
        assert_eq!(data.mcs_slices.get("other", "a"), None);
        let names = |data: &ClusterData| -> Vec<String> {
            data.mcs_slices
                .of(&web)
                .map(|s| s.metadata.name.unwrap_or_default())
                .collect()
        };
        assert_eq!(names(&data), ["a", "b"]);
        assert!(data.mcs_slices.take_touched().services.contains(&web));
        IndexResource::delete(&mut data.mcs_slices, Lean::new(slice("a", 0)));
        assert_eq!(names(&data), ["b"]);
        assert_eq!(data.mcs_slices.len(), 1);
        IndexResource::delete(&mut data.mcs_slices, Lean::new(slice("b", 0)));
        assert!(data.mcs_slices.is_empty());
        assert_eq!(data.mcs_slices.services().count(), 0);
    }

    #[test]
    fn services_with_ours_are_found_by_the_managed_by_label() {
        use super::super::naming::{LABEL_APP_MANAGED_BY, MANAGED_BY};
        let mut data = ClusterData::default();
        let mut user = slice("user", 1);
        user.metadata.labels = Some(
            [
                (LABEL_SERVICE_NAME.to_owned(), "shop-api".to_owned()),
                (LABEL_APP_MANAGED_BY.to_owned(), "someone-else".to_owned()),
            ]
            .into(),
        );
        let mut ours = slice("ours", 1);
        ours.metadata
            .labels
            .get_or_insert_default()
            .insert(LABEL_APP_MANAGED_BY.to_owned(), MANAGED_BY.to_owned());
        IndexResource::apply(&mut data.mcs_slices, Lean::new(user));
        IndexResource::apply(&mut data.mcs_slices, Lean::new(ours));
        let found: Vec<_> = data.mcs_slices.services_with_ours().collect();
        assert_eq!(found, [&ServiceRef::new("shop", "web")]);
    }

    #[test]
    fn this_clusters_own_data_has_no_limit() {
        let mut data = ClusterData::default();
        for i in 0..20 {
            IndexResource::apply(
                &mut data.mcs_slices,
                Lean::new(slice(&format!("s{i}"), 1000)),
            );
        }
        assert_eq!(data.mcs_slices.len(), 20);
        assert_eq!(data.take_refused()[2].1, 0);
    }
}
