//! What this cluster publishes for one service
//! ([`crate::controller::publication`]): for a valid export of a namespace
//! that is not denied, its PublishedService and one published slice per
//! Kubernetes slice of the Service, in the controller's namespace; nothing
//! otherwise. Only this cluster's own objects are read, so the publication
//! does not wait for, or depend on, any peer or import.

use std::collections::BTreeMap;

use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::objects::{slice_differs, subset};
use super::{Inputs, Kind, Write};
use crate::api::PublishedService;
use crate::api::ServiceRef;
use crate::controller::merge::project;
use crate::controller::ownership::claim;
use crate::controller::publication::{published_name, published_service, published_slice};

/// The writes that make `service`'s publication what it should be.
pub(super) fn writes(inputs: &Inputs<'_>, service: &ServiceRef) -> Vec<Write> {
    let published = &inputs.local_only.published;
    let live_service = published.service(service);
    let live_slices: BTreeMap<String, EndpointSlice> = published
        .slices(service)
        .map(|slice| (slice.metadata.name.clone().unwrap_or_default(), slice))
        .collect();
    let (desired_service, desired_slices) = match desired(inputs, service) {
        Some((object, slices)) => (Some(object), slices),
        None => (None, BTreeMap::new()),
    };
    let mut writes = Vec::new();
    // Slices first: a peer that sees the PublishedService sees its
    // endpoints too.
    for (name, slice) in &desired_slices {
        let live = live_slices.get(name);
        if slice_differs(slice, live) {
            let mut slice = slice.clone();
            claim(&mut slice, live);
            writes.push(Write::PublishedSlice(Box::new(slice)));
        }
    }
    match (desired_service, live_service.as_ref()) {
        (Some(mut object), live) if differs(&object, live) => {
            claim(&mut object, live);
            writes.push(Write::Published(Box::new(object)));
        }
        (None, Some(live)) if inputs.deletions_allowed => writes.push(Write::Delete {
            kind: Kind::PublishedService,
            namespace: inputs.publish_namespace.to_owned(),
            name: published_name(service),
            uid: live.metadata.uid.clone(),
        }),
        _ => {}
    }
    if inputs.deletions_allowed {
        writes.extend(
            live_slices
                .iter()
                .filter(|(name, _)| !desired_slices.contains_key(*name))
                .map(|(name, live)| Write::Delete {
                    kind: Kind::PublishedSlice,
                    namespace: inputs.publish_namespace.to_owned(),
                    name: name.clone(),
                    uid: live.metadata.uid.clone(),
                }),
        );
    }
    writes
}

/// The publication `service` should have: `None` unless this cluster
/// exports it validly from a namespace that is not denied.
fn desired(
    inputs: &Inputs<'_>,
    service: &ServiceRef,
) -> Option<(PublishedService, BTreeMap<String, EndpointSlice>)> {
    if inputs.deny.denies(&service.namespace) {
        return None;
    }
    let export = inputs
        .local
        .exports
        .get(&service.namespace, &service.name)?;
    let local = inputs
        .local
        .services
        .get(&service.namespace, &service.name)?;
    project(inputs.local_id, &export, Some(&local)).ok()?;
    let object = published_service(
        inputs.publish_namespace,
        service,
        inputs.local_id,
        &export,
        &local.spec.unwrap_or_default(),
    );
    let slices = inputs
        .local_only
        .kubernetes_slices
        .of(service)
        .filter_map(|source| {
            published_slice(inputs.publish_namespace, service, inputs.local_id, &source)
        })
        .map(|slice| (slice.metadata.name.clone().unwrap_or_default(), slice))
        .collect();
    Some((object, slices))
}

fn differs(desired: &PublishedService, live: Option<&PublishedService>) -> bool {
    live.is_none_or(|live| {
        live.spec != desired.spec || !subset(&desired.metadata.labels, &live.metadata.labels)
    })
}
