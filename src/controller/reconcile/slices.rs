//! The MCS EndpointSlices of one service: this cluster's own Kubernetes
//! slices mirrored, and usable peers' mirrored slices copied under names
//! computed here (never the peer's), each checked as untrusted input: the
//! slice as a whole (the peer's own mirror, of a known family, within the
//! API's endpoint limit), then each endpoint's addresses
//! ([`crate::controller::addresses`]: an endpoint refused, the rest kept);
//! for a local-first clusterset IP, every endpoint hinted ([`super::hints`]).

use std::collections::BTreeMap;

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use kube::ResourceExt;

use super::hints::Hints;
use super::{Inputs, PeerView, Rejection};
use crate::api::ServiceRef;
use crate::api::limits::MAX_SLICE_ENDPOINTS;
use crate::api::stripped::cross_cluster;
use crate::api::well_known::{
    LABEL_KUBERNETES_SERVICE_NAME, LABEL_MANAGED_BY, LABEL_SERVICE_NAME, LABEL_SOURCE_CLUSTER,
};
use crate::controller::addresses::{NOT_ROUTABLE, Screen};
use crate::controller::merge::Merged;
use crate::controller::naming::{ANNOTATION_SOURCE_SLICE, MANAGED_BY, mirrored_slice_name};

/// Reason of a peer slice whose computed name another slice of the
/// service already has: both are refused.
pub(super) const DUPLICATE_SLICE_NAME: &str = "DuplicateSliceName";

/// What every slice of one service shares.
pub(super) struct SliceContext<'a> {
    pub(super) service: &'a ServiceRef,
    pub(super) merged: &'a Merged,
    pub(super) families: &'a [String],
    pub(super) derived_name: &'a str,
    pub(super) owner: &'a OwnerReference,
    /// The hints of a local-first clusterset IP; `None` when it spreads,
    /// and for a headless import (its answers are the DNS server's to
    /// order).
    pub(super) hints: Option<&'a Hints>,
}

impl SliceContext<'_> {
    /// The slices of every exporting cluster, by name: this cluster's
    /// mirrored, usable peers' copied; untrusted peer input dropped is
    /// recorded in `rejected`.
    pub(super) fn desired(
        &self,
        inputs: &Inputs<'_>,
        rejected: &mut Vec<Rejection>,
    ) -> BTreeMap<String, EndpointSlice> {
        let mut desired = BTreeMap::new();
        let mut duplicates = Vec::new();
        let hints = self.hints;
        for cluster in &self.merged.clusters {
            if cluster == inputs.local_id {
                for source in inputs.local_only.kubernetes_slices.of(self.service) {
                    if let Some(slice) = self.mirror(inputs.local_id, &source, hints) {
                        desired.insert(slice.name_any(), slice);
                    }
                }
            } else if let Some(peer) = inputs
                .peers
                .iter()
                .find(|peer| peer.usable && peer.id == cluster)
            {
                let screen = Screen {
                    service_cidrs: &inputs.local_only.service_ranges,
                    own_pod_cidrs: &inputs.local_only.pod_ranges,
                    node_addresses: &inputs.local_only.node_addresses,
                    apiserver_addresses: &inputs.local_only.apiserver_addresses,
                    peer_ranges: peer.endpoint_ranges,
                };
                for source in peer.data.mcs_slices.of(self.service) {
                    match self.copy(peer, &screen, &source, hints, rejected) {
                        Ok(Some(slice)) => {
                            let name = slice.name_any();
                            if desired.insert(name.clone(), slice).is_some() {
                                // Two sources under one name: neither is
                                // written, rather than one silently replacing
                                // the other.
                                desired.remove(&name);
                                duplicates.push(name);
                                rejected.push(Rejection {
                                    peer: peer.id.to_owned(),
                                    reason: DUPLICATE_SLICE_NAME,
                                    what: format!("EndpointSlice {}", source.name_any()),
                                });
                            }
                        }
                        Ok(None) => {}
                        Err(reason) => rejected.push(Rejection {
                            peer: peer.id.to_owned(),
                            reason,
                            what: format!("EndpointSlice {}", source.name_any()),
                        }),
                    }
                }
            }
        }
        // A name taken twice stays unwritten, whatever came after.
        for name in duplicates {
            desired.remove(&name);
        }
        desired
    }

    fn family_of(address_type: &str) -> Option<&'static str> {
        match address_type {
            "IPv4" => Some("IPv4"),
            "IPv6" => Some("IPv6"),
            _ => None,
        }
    }

    fn labels(&self, cluster: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (LABEL_SERVICE_NAME.to_owned(), self.service.name.to_string()),
            (LABEL_SOURCE_CLUSTER.to_owned(), cluster.to_owned()),
            (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
            (
                LABEL_KUBERNETES_SERVICE_NAME.to_owned(),
                self.derived_name.to_owned(),
            ),
        ])
    }

    fn ports(&self, cluster: &str, ports: &Option<Vec<EndpointPort>>) -> Option<Vec<EndpointPort>> {
        let mut kept: Vec<EndpointPort> = ports
            .iter()
            .flatten()
            .filter(|port| self.merged.keeps_port(cluster, port.name.as_deref()))
            .cloned()
            .collect();
        kept.sort_by(|a, b| a.name.cmp(&b.name).then(a.port.cmp(&b.port)));
        Some(kept)
    }

    fn build(
        &self,
        cluster: &str,
        name: String,
        source_name: String,
        address_type: &str,
        endpoints: Vec<Endpoint>,
        ports: &Option<Vec<EndpointPort>>,
    ) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(self.service.namespace.to_string()),
                labels: Some(self.labels(cluster)),
                annotations: Some(BTreeMap::from([(
                    ANNOTATION_SOURCE_SLICE.to_owned(),
                    source_name,
                )])),
                owner_references: Some(vec![self.owner.clone()]),
                ..ObjectMeta::default()
            },
            address_type: address_type.to_owned(),
            endpoints,
            ports: self.ports(cluster, ports),
        }
    }

    /// This cluster's Kubernetes slice of an exported Service as an MCS
    /// slice: endpoints without the references to local objects (peers copy
    /// it verbatim, and there those would name foreign objects), with this
    /// cluster's hints (peers drop them).
    fn mirror(
        &self,
        local_id: &str,
        source: &EndpointSlice,
        hints: Option<&Hints>,
    ) -> Option<EndpointSlice> {
        let family = Self::family_of(&source.address_type)?;
        if !self.families.iter().any(|f| f == family) {
            return None;
        }
        let source_name = source.metadata.name.clone()?;
        let endpoints = source
            .endpoints
            .iter()
            .map(|endpoint| Endpoint {
                hints: hints.map(|hints| hints.local(endpoint)),
                ..cross_cluster(endpoint)
            })
            .collect();
        let name = mirrored_slice_name(
            &self.service.namespace,
            &self.service.name,
            local_id,
            &source_name,
        );
        Some(self.build(
            local_id,
            name,
            format!("{}/{source_name}", self.service.namespace),
            family,
            endpoints,
            &source.ports,
        ))
    }

    /// A peer's mirrored slice, checked as untrusted input, with this
    /// cluster's hints for another cluster's endpoints. `Err` with the
    /// reason the whole slice is refused; an endpoint refused is left out
    /// and recorded in `rejected`.
    fn copy(
        &self,
        peer: &PeerView<'_>,
        screen: &Screen<'_>,
        source: &EndpointSlice,
        hints: Option<&Hints>,
        rejected: &mut Vec<Rejection>,
    ) -> Result<Option<EndpointSlice>, &'static str> {
        let labels = source.labels();
        if labels.get(LABEL_SOURCE_CLUSTER).map(String::as_str) != Some(peer.id)
            || labels.get(LABEL_MANAGED_BY).map(String::as_str) != Some(MANAGED_BY)
        {
            return Err(slice_reason::NOT_MIRRORED_BY_PEER);
        }
        let Some(family) = Self::family_of(&source.address_type) else {
            return Err(slice_reason::UNKNOWN_ADDRESS_TYPE);
        };
        if !self.families.iter().any(|f| f == family) {
            return Ok(None);
        }
        if source.endpoints.len() > MAX_SLICE_ENDPOINTS {
            return Err(slice_reason::TOO_MANY_ENDPOINTS);
        }
        // The peer's name for its slice only feeds the hash: a name a peer
        // chose never names an object here.
        let source_name = source
            .metadata
            .name
            .as_deref()
            .ok_or(slice_reason::UNNAMED)?;
        let name = mirrored_slice_name(
            &self.service.namespace,
            &self.service.name,
            peer.id,
            source_name,
        );
        let mut endpoints = Vec::with_capacity(source.endpoints.len());
        for endpoint in &source.endpoints {
            let refused = if endpoint.addresses.is_empty() {
                Some(("none".to_owned(), NOT_ROUTABLE))
            } else {
                endpoint.addresses.iter().find_map(|address| {
                    screen
                        .check(address, family)
                        .err()
                        .map(|reason| (address.clone(), reason))
                })
            };
            if let Some((address, reason)) = refused {
                rejected.push(Rejection {
                    peer: peer.id.to_owned(),
                    reason,
                    what: format!("endpoint {address} of EndpointSlice {source_name}"),
                });
                continue;
            }
            endpoints.push(Endpoint {
                hints: hints.map(Hints::remote),
                ..cross_cluster(endpoint)
            });
        }
        Ok(Some(self.build(
            peer.id,
            name,
            format!("{}/{source_name}", self.service.namespace),
            family,
            endpoints,
            &source.ports,
        )))
    }
}

/// Why a peer's slice is refused as a whole (the `reason` of
/// `peer_objects_rejected_total`, `/explain` and the Event).
pub(super) mod slice_reason {
    /// Its `source-cluster` label is not the peer it was read from, or it
    /// lacks our managed-by label: a relay of a third cluster's slice, or
    /// not a mirror at all.
    pub(crate) const NOT_MIRRORED_BY_PEER: &str = "NotMirroredByPeer";
    /// Its address type is not IPv4 or IPv6 (FQDN slices are not imported).
    pub(crate) const UNKNOWN_ADDRESS_TYPE: &str = "UnknownAddressType";
    /// It has more endpoints than the API allows in one slice.
    pub(crate) const TOO_MANY_ENDPOINTS: &str = "TooManyEndpoints";
    /// It has no name.
    pub(crate) const UNNAMED: &str = "Unnamed";
}
