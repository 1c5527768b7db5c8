//! What only this cluster's store has, beside what every cluster's has
//! ([`super::ClusterData`]): its ServiceImports and the Kubernetes slices
//! of its Services, its namespaces, IP families and Service ranges, its
//! Nodes' zones, addresses and pod ranges, the apiserver's addresses, and
//! its publication; and how the local watches fill them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::ResourceExt;

use super::super::lean::Lean;
use super::{Objects, Published, kubernetes_slice_owner, named};
use crate::api::well_known::LABEL_TOPOLOGY_ZONE;
use crate::api::{ServiceImport, ServiceRef};
use crate::cidr::Cidr;
use crate::watch::IndexResource;

/// What only this cluster's store has.
#[derive(Debug)]
pub struct LocalData {
    /// Kubernetes EndpointSlices of local Services, by Service.
    pub kubernetes_slices: Objects<EndpointSlice>,
    /// ServiceImports, ours or not.
    pub imports: Objects<ServiceImport>,
    /// Namespaces that exist and are not terminating.
    pub namespaces: BTreeSet<String>,
    /// Their labels (`--import-namespace-selector` reads them).
    pub namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// IP families the cluster's Services can have (from its ServiceCIDRs),
    /// primary first.
    pub ip_families: Vec<String>,
    /// The zones of the Nodes (the empty zone for a Node without the zone
    /// label, as kube-proxy reads it): what local-first hints name.
    pub node_zones: BTreeSet<String>,
    /// Every CIDR of the ServiceCIDRs: no peer endpoint may be inside one
    /// ([`super::addresses`]).
    pub service_ranges: Vec<Cidr>,
    /// Every Node's InternalIP and ExternalIP: no peer endpoint may be one.
    pub node_addresses: BTreeSet<IpAddr>,
    /// Every Node's `spec.podCIDRs` (or `spec.podCIDR`): no peer endpoint
    /// may be inside one. Filled only as far as the Node watch's decoder
    /// (`Stripped<Node, Controller>`) keeps `spec`; empty for a CNI that
    /// does not allocate pod CIDRs to Nodes.
    pub pod_ranges: Vec<Cidr>,
    /// The addresses of the `default/kubernetes` Service's EndpointSlices
    /// (this cluster's apiserver endpoints, read from the watch of local
    /// Services' slices): no peer endpoint may be one.
    pub apiserver_addresses: BTreeSet<IpAddr>,
    /// What this cluster publishes for its peers.
    pub published: Published,
    service_cidrs: BTreeMap<String, Vec<String>>,
    /// What is read of each Node, by name.
    nodes: BTreeMap<String, NodeFacts>,
    all_touched: bool,
}

impl Default for LocalData {
    fn default() -> Self {
        Self {
            kubernetes_slices: Objects::new(kubernetes_slice_owner),
            imports: Objects::new(named),
            namespaces: BTreeSet::new(),
            namespace_labels: BTreeMap::new(),
            ip_families: Vec::new(),
            node_zones: BTreeSet::new(),
            service_ranges: Vec::new(),
            node_addresses: BTreeSet::new(),
            pod_ranges: Vec::new(),
            apiserver_addresses: BTreeSet::new(),
            published: Published::default(),
            service_cidrs: BTreeMap::new(),
            nodes: BTreeMap::new(),
            all_touched: false,
        }
    }
}

impl IndexResource<Namespace> for LocalData {
    type Listed = (String, BTreeMap<String, String>);

    fn apply(&mut self, namespace: Namespace) {
        let name = namespace.name_any();
        let live = namespace.metadata.deletion_timestamp.is_none();
        let changed = if live {
            let labels = namespace.metadata.labels.unwrap_or_default();
            let relabelled = self.namespace_labels.get(&name) != Some(&labels);
            self.namespace_labels.insert(name.clone(), labels);
            self.namespaces.insert(name) | relabelled
        } else {
            self.namespace_labels.remove(&name);
            self.namespaces.remove(&name)
        };
        self.all_touched |= changed;
    }

    fn delete(&mut self, namespace: Namespace) {
        let name = namespace.name_any();
        self.namespace_labels.remove(&name);
        self.all_touched |= self.namespaces.remove(&name);
    }

    fn listed(&mut self, namespace: Namespace) -> Option<Self::Listed> {
        namespace.metadata.deletion_timestamp.is_none().then(|| {
            (
                namespace.name_any(),
                namespace.metadata.labels.unwrap_or_default(),
            )
        })
    }

    fn reset(&mut self, listed: Vec<Self::Listed>) {
        let labels: BTreeMap<String, BTreeMap<String, String>> = listed.into_iter().collect();
        if labels != self.namespace_labels {
            self.namespaces = labels.keys().cloned().collect();
            self.namespace_labels = labels;
            self.all_touched = true;
        }
    }
}

impl IndexResource<ServiceCIDR> for LocalData {
    type Listed = (String, Vec<String>);

    fn apply(&mut self, cidr: ServiceCIDR) {
        let (name, cidrs) = cidrs_of(cidr);
        self.service_cidrs.insert(name, cidrs);
        self.recompute_families();
    }

    fn delete(&mut self, cidr: ServiceCIDR) {
        self.service_cidrs.remove(&cidr.name_any());
        self.recompute_families();
    }

    fn listed(&mut self, cidr: ServiceCIDR) -> Option<Self::Listed> {
        Some(cidrs_of(cidr))
    }

    fn reset(&mut self, listed: Vec<Self::Listed>) {
        self.service_cidrs = listed.into_iter().collect();
        self.recompute_families();
    }
}

/// Nodes, decoded without their status but for addresses: a Node's zone
/// names local-first hints, its addresses and pod CIDRs are refused as
/// peer endpoints.
impl IndexResource<Lean<Node>> for LocalData {
    type Listed = (String, NodeFacts);

    fn apply(&mut self, node: Lean<Node>) {
        let (name, facts) = facts_of(node.0);
        self.nodes.insert(name, facts);
        self.recompute_nodes();
    }

    fn delete(&mut self, node: Lean<Node>) {
        self.nodes.remove(&node.0.name_any());
        self.recompute_nodes();
    }

    fn listed(&mut self, node: Lean<Node>) -> Option<Self::Listed> {
        Some(facts_of(node.0))
    }

    fn reset(&mut self, listed: Vec<Self::Listed>) {
        self.nodes = listed.into_iter().collect();
        self.recompute_nodes();
    }
}

/// What the controller reads of a Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    zone: String,
    addresses: Vec<IpAddr>,
    pod_cidrs: Vec<Cidr>,
}

fn facts_of(node: Node) -> (String, NodeFacts) {
    let zone = node
        .labels()
        .get(LABEL_TOPOLOGY_ZONE)
        .cloned()
        .unwrap_or_default();
    // Hostname and DNS entries are names, not addresses a slice can hold.
    let addresses = node
        .status
        .iter()
        .flat_map(|status| status.addresses.iter().flatten())
        .filter(|a| a.type_ == "InternalIP" || a.type_ == "ExternalIP")
        .filter_map(|a| a.address.parse().ok())
        .collect();
    // podCIDRs holds podCIDR first when set; an older Node may have only
    // podCIDR. One that does not parse is the apiserver's to refuse.
    let pod_cidrs = node
        .spec
        .iter()
        .flat_map(|spec| spec.pod_cidrs.iter().flatten().chain(spec.pod_cidr.iter()))
        .filter_map(|cidr| cidr.parse().ok())
        .collect();
    (
        node.name_any(),
        NodeFacts {
            zone,
            addresses,
            pod_cidrs,
        },
    )
}

fn cidrs_of(cidr: ServiceCIDR) -> (String, Vec<String>) {
    let name = cidr.name_any();
    let cidrs = cidr.spec.and_then(|spec| spec.cidrs).unwrap_or_default();
    (name, cidrs)
}

impl LocalData {
    /// Whether a namespace, the IP families or an address the peers'
    /// endpoints are screened against changed since the last call: that
    /// may change any service.
    pub fn take_all_touched(&mut self) -> bool {
        // Called after every local watch event: the apiserver's slices
        // come with the other local slices, so a change is noticed here.
        self.recompute_apiserver();
        std::mem::take(&mut self.all_touched)
    }

    /// The addresses of the `default/kubernetes` slices; a change may
    /// change which peer endpoints any service keeps.
    fn recompute_apiserver(&mut self) {
        let service = ServiceRef::new("default", "kubernetes");
        let addresses: BTreeSet<IpAddr> = self
            .kubernetes_slices
            .of(&service)
            .flat_map(|slice| slice.endpoints)
            .flat_map(|endpoint| endpoint.addresses)
            .filter_map(|address| address.parse().ok())
            .collect();
        if addresses != self.apiserver_addresses {
            self.apiserver_addresses = addresses;
            self.all_touched = true;
        }
    }

    /// The set of zones, of Node addresses and of pod CIDRs; a new or
    /// vanished zone may change the hints of any local-first service (a
    /// Node joining a known zone changes none), a Node address or pod CIDR
    /// which peer endpoints any service keeps.
    fn recompute_nodes(&mut self) {
        let zones: BTreeSet<String> = self.nodes.values().map(|n| n.zone.clone()).collect();
        if zones != self.node_zones {
            self.node_zones = zones;
            self.all_touched = true;
        }
        let addresses: BTreeSet<IpAddr> = self
            .nodes
            .values()
            .flat_map(|n| n.addresses.iter().copied())
            .collect();
        if addresses != self.node_addresses {
            self.node_addresses = addresses;
            self.all_touched = true;
        }
        let pod_ranges: BTreeSet<Cidr> = self
            .nodes
            .values()
            .flat_map(|n| n.pod_cidrs.iter().copied())
            .collect();
        let pod_ranges: Vec<Cidr> = pod_ranges.into_iter().collect();
        if pod_ranges != self.pod_ranges {
            self.pod_ranges = pod_ranges;
            self.all_touched = true;
        }
    }

    /// The families of the ServiceCIDRs, the default one (`kubernetes`,
    /// whose first CIDR is the primary family) first.
    fn recompute_families(&mut self) {
        let mut families = Vec::new();
        let default = self.service_cidrs.get("kubernetes");
        let others = self
            .service_cidrs
            .iter()
            .filter(|(name, _)| name.as_str() != "kubernetes")
            .map(|(_, cidrs)| cidrs);
        for cidr in default.into_iter().chain(others).flatten() {
            let family = if cidr.contains(':') { "IPv6" } else { "IPv4" };
            if !families.iter().any(|f| f == family) {
                families.push(family.to_owned());
            }
        }
        if families != self.ip_families {
            self.ip_families = families;
            self.all_touched = true;
        }
        // A CIDR that does not parse is the apiserver's to refuse; one it
        // stored and we cannot read is logged, not guessed at.
        let mut ranges: Vec<Cidr> = Vec::new();
        for text in self.service_cidrs.values().flatten() {
            match text.parse() {
                Ok(cidr) if !ranges.contains(&cidr) => ranges.push(cidr),
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "a ServiceCIDR that cannot be read"),
            }
        }
        ranges.sort();
        if ranges != self.service_ranges {
            self.service_ranges = ranges;
            self.all_touched = true;
        }
    }
}
