//! EndpointSlice hints that make kube-proxy local-first for the clusterset
//! IP of a local-first import ([`Locality`]), without touching kube-proxy.
//!
//! kube-proxy (1.33 and later) reads the hints of a Service's ready
//! endpoints: when every ready endpoint has zone hints and some name the
//! node's zone, it sends only to those; when every ready endpoint has node
//! hints and some name the node, only to those (checked first,
//! `PreferSameNode`); otherwise to every ready endpoint. A mix of hinted and
//! unhinted endpoints makes it ignore the hints, so a hinted service hints
//! every endpoint of every slice.
//!
//! The rule, for the derived Service's slices in this cluster:
//! - other clusters' endpoints are hinted for [`ELSEWHERE`], a zone and a
//!   node no cluster has: no node ever picks them while it finds an endpoint
//!   hinted for itself, and every node falls back to them (and to nothing
//!   else, as no local endpoint is ready) when this cluster has none ready;
//! - this cluster's endpoints are hinted for their own zone (`zone` unset
//!   reads as the empty zone, as kube-proxy reads a node without the zone
//!   label), and the ready ones also for every zone of this cluster's nodes
//!   that has no ready local endpoint of its own, so that those nodes stay
//!   in the cluster too;
//! - `PreferSameNode` adds node hints: this cluster's endpoints for their own
//!   node, the others for [`ELSEWHERE`].
//!
//! Failover needs no write: an endpoint that stops being ready leaves
//! kube-proxy's choice at once, and with the last local one gone every node
//! falls back to the other clusters. A zone that loses its last ready
//! endpoint spreads over every cluster until the next plan hints it onto
//! the cluster's other ready endpoints.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointHints, ForNode, ForZone};

use crate::api::locality::Locality;

/// The zone and node name other clusters' endpoints are hinted for: a valid
/// label value and node name under the reserved `.invalid` top-level domain
/// (RFC 2606), so no zone or node of a cluster has it.
pub(super) const ELSEWHERE: &str = "elsewhere.clusterset.invalid";

/// The API's limit on zones (and on nodes) per endpoint.
const MAX_HINTS: usize = 8;

/// What a local-first clusterset IP's hints make kube-proxy in this
/// cluster do now (for `/explain`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct LocalFirst {
    /// `PreferSameZone` or `PreferSameNode`.
    pub locality: &'static str,
    /// This cluster's ready endpoints of the service.
    pub local_ready: usize,
    /// Where kube-proxy sends the clusterset IP's traffic, and why.
    pub kube_proxy: String,
    /// The zones of this cluster's nodes.
    pub node_zones: Vec<String>,
    /// Zones whose nodes use the ready endpoints of the cluster's other
    /// zones (they have none of their own).
    pub zones_without_ready_endpoints: Vec<String>,
    /// Why the locality written here is not the one the exports ask for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

/// The hints of one local-first import's slices in this cluster.
#[derive(Debug)]
pub(super) struct Hints {
    locality: Locality,
    local_ready: usize,
    node_hints: bool,
    /// Zones of this cluster's nodes.
    node_zones: BTreeSet<String>,
    /// Zones of this cluster's nodes without a ready local endpoint, in
    /// groups that fit an endpoint's hints beside its own zone.
    orphans: Vec<Vec<String>>,
    /// With more than one group: each ready local endpoint's group, by its
    /// first address (a stable order across plans).
    rank: BTreeMap<String, usize>,
}

impl Hints {
    /// The hints for an import of `locality`, given the zones of this
    /// cluster's nodes and this cluster's endpoints of the service; `None`
    /// when the import spreads (no hints at all).
    pub(super) fn new<'a>(
        locality: Locality,
        node_zones: &BTreeSet<String>,
        local: impl IntoIterator<Item = &'a Endpoint>,
    ) -> Option<Self> {
        if !locality.local_first() {
            return None;
        }
        let ready: Vec<&Endpoint> = local.into_iter().filter(|e| is_ready(e)).collect();
        let served: BTreeSet<&str> = ready.iter().map(|e| zone_of(e)).collect();
        let orphans: Vec<String> = node_zones
            .iter()
            .filter(|zone| !served.contains(zone.as_str()))
            .cloned()
            .collect();
        let orphans: Vec<Vec<String>> = orphans
            .chunks(MAX_HINTS - 1)
            .map(<[String]>::to_vec)
            .collect();
        let mut rank = BTreeMap::new();
        if orphans.len() > 1 {
            let mut keys: Vec<&str> = ready.iter().filter_map(|e| first_address(e)).collect();
            keys.sort_unstable();
            keys.dedup();
            rank = keys
                .into_iter()
                .enumerate()
                .map(|(i, key)| (key.to_owned(), i % orphans.len()))
                .collect();
        }
        Some(Self {
            locality,
            local_ready: ready.len(),
            node_hints: locality == Locality::PreferSameNode,
            node_zones: node_zones.clone(),
            orphans,
            rank,
        })
    }

    /// What these hints make kube-proxy do.
    pub(super) fn summary(&self) -> LocalFirst {
        let kube_proxy = if self.node_zones.is_empty() {
            "every cluster's ready endpoints: no Node of this cluster is known".into()
        } else if self.local_ready > 0 {
            format!(
                "this cluster's {} ready endpoint(s){}",
                self.local_ready,
                match self.locality {
                    Locality::PreferSameNode => ", the node's own first, then its zone's",
                    _ => ", its zone's first",
                }
            )
        } else {
            "every cluster's ready endpoints: this cluster has none ready".into()
        };
        LocalFirst {
            locality: self.locality.as_str(),
            local_ready: self.local_ready,
            kube_proxy,
            node_zones: self.node_zones.iter().cloned().collect(),
            zones_without_ready_endpoints: if self.local_ready > 0 {
                self.orphans.iter().flatten().cloned().collect()
            } else {
                Vec::new()
            },
            fallback: None,
        }
    }

    /// The hints of one of this cluster's endpoints.
    pub(super) fn local(&self, endpoint: &Endpoint) -> EndpointHints {
        let zone = zone_of(endpoint);
        let mut zones: BTreeSet<&str> = BTreeSet::new();
        if self.node_zones.contains(zone) {
            zones.insert(zone);
        }
        if is_ready(endpoint) {
            let group = match self.orphans.len() {
                0 => None,
                1 => self.orphans.first(),
                _ => first_address(endpoint)
                    .and_then(|key| self.rank.get(key))
                    .and_then(|&i| self.orphans.get(i)),
            };
            zones.extend(group.into_iter().flatten().map(String::as_str));
        }
        if zones.is_empty() {
            zones.insert(ELSEWHERE);
        }
        EndpointHints {
            for_zones: Some(
                zones
                    .into_iter()
                    .map(|name| ForZone {
                        name: name.to_owned(),
                    })
                    .collect(),
            ),
            for_nodes: self.node_hints.then(|| {
                vec![ForNode {
                    name: endpoint
                        .node_name
                        .clone()
                        .unwrap_or_else(|| ELSEWHERE.to_owned()),
                }]
            }),
        }
    }

    /// The hints of another cluster's endpoint.
    pub(super) fn remote(&self) -> EndpointHints {
        EndpointHints {
            for_zones: Some(vec![ForZone {
                name: ELSEWHERE.to_owned(),
            }]),
            for_nodes: self.node_hints.then(|| {
                vec![ForNode {
                    name: ELSEWHERE.to_owned(),
                }]
            }),
        }
    }
}

/// Ready as kube-proxy reads it: `ready` unset means ready.
fn is_ready(endpoint: &Endpoint) -> bool {
    endpoint
        .conditions
        .as_ref()
        .and_then(|c| c.ready)
        .unwrap_or(true)
}

/// The zone kube-proxy on the endpoint's node reads: the empty zone when
/// the node (and so the endpoint) has none.
fn zone_of(endpoint: &Endpoint) -> &str {
    endpoint.zone.as_deref().unwrap_or("")
}

fn first_address(endpoint: &Endpoint) -> Option<&str> {
    endpoint.addresses.first().map(String::as_str)
}

#[cfg(test)]
mod tests;
