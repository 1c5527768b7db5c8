//! What this cluster publishes for its peers, as its watches of the
//! controller's namespace index it: our PublishedServices and published
//! slices, keyed by the exported service they describe
//! ([`crate::controller::publication`]). Published slices are held under
//! their service's namespace, as every other slice store holds them, so
//! [`Objects::of`] finds them; a write or delete puts them back in the
//! controller's namespace.

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;

use super::{Listed, Objects, Touched, mcs_slice_owner};
use crate::api::PublishedService;
use crate::api::ServiceRef;
use crate::controller::compact::Compact;
use crate::controller::lean::Lean;
use crate::controller::publication::{service_of_name, service_of_slice};
use crate::watch::IndexResource;

/// This cluster's publication, held compacted as every other store is,
/// each object under its service's namespace.
#[derive(Debug)]
pub struct Published {
    services: Objects<PublishedService>,
    slices: Objects<EndpointSlice>,
}

impl Default for Published {
    fn default() -> Self {
        Self {
            services: Objects::new(|published| service_of_name(&published.name_any())),
            slices: Objects::new(mcs_slice_owner),
        }
    }
}

impl Published {
    /// The PublishedService of `service`.
    pub fn service(&self, service: &ServiceRef) -> Option<PublishedService> {
        self.services.of(service).next()
    }

    /// The published slices of `service`, in its namespace.
    pub fn slices(&self, service: &ServiceRef) -> impl Iterator<Item = EndpointSlice> {
        self.slices.of(service)
    }

    /// Every service something is published for.
    pub fn services(&self) -> impl Iterator<Item = &ServiceRef> {
        self.services.services().chain(self.slices.services())
    }

    /// The services whose publication changed since the last call.
    pub fn take_touched(&mut self) -> Touched {
        let mut touched = self.services.take_touched();
        touched.merge(self.slices.take_touched());
        touched
    }

    /// Forgets a PublishedService deleted by our own write.
    pub fn forget_service(&mut self, name: &str) {
        forget_named(&mut self.services, name);
    }

    /// Forgets a published slice deleted by our own write (named as in the
    /// controller's namespace; held here under its service's).
    pub fn forget_slice(&mut self, name: &str) {
        forget_named(&mut self.slices, name);
    }
}

/// Forgets the object named `name`, in whichever namespace it is held.
fn forget_named<K: Compact + kube::Resource>(objects: &mut Objects<K>, name: &str) {
    let home = objects
        .by_name
        .iter()
        .find(|(_, objects)| objects.contains_key(name))
        .map(|(namespace, _)| namespace.clone());
    if let Some(namespace) = home {
        objects.forget(&namespace, name);
    }
}

/// A published slice moved to its service's namespace; `None` when its
/// labels name no valid service (not one of ours to keep).
fn at_home(slice: Lean<EndpointSlice>) -> Option<Lean<EndpointSlice>> {
    let mut slice = slice.0;
    let service = service_of_slice(&slice)?;
    slice.metadata.namespace = Some(service.namespace.to_string());
    Some(Lean::new(slice))
}

/// A PublishedService moved to its service's namespace; `None` when its
/// name names no valid service.
fn service_at_home(published: Lean<PublishedService>) -> Option<Lean<PublishedService>> {
    let mut published = published.0;
    let service = service_of_name(&published.name_any())?;
    published.metadata.namespace = Some(service.namespace.to_string());
    Some(Lean::new(published))
}

impl IndexResource<Lean<PublishedService>> for Published {
    type Listed = Listed<PublishedService>;

    fn apply(&mut self, object: Lean<PublishedService>) {
        if let Some(object) = service_at_home(object) {
            IndexResource::<Lean<PublishedService>>::apply(&mut self.services, object);
        }
    }

    fn delete(&mut self, object: Lean<PublishedService>) {
        if let Some(object) = service_at_home(object) {
            IndexResource::<Lean<PublishedService>>::delete(&mut self.services, object);
        }
    }

    fn listed(&mut self, object: Lean<PublishedService>) -> Option<Self::Listed> {
        IndexResource::<Lean<PublishedService>>::listed(
            &mut self.services,
            service_at_home(object)?,
        )
    }

    fn reset(&mut self, listed: Vec<Self::Listed>) {
        IndexResource::<Lean<PublishedService>>::reset(&mut self.services, listed);
    }
}

impl IndexResource<Lean<EndpointSlice>> for Published {
    type Listed = Listed<EndpointSlice>;

    fn apply(&mut self, slice: Lean<EndpointSlice>) {
        if let Some(slice) = at_home(slice) {
            IndexResource::<Lean<EndpointSlice>>::apply(&mut self.slices, slice);
        }
    }

    fn delete(&mut self, slice: Lean<EndpointSlice>) {
        if let Some(slice) = at_home(slice) {
            IndexResource::<Lean<EndpointSlice>>::delete(&mut self.slices, slice);
        }
    }

    fn listed(&mut self, slice: Lean<EndpointSlice>) -> Option<Self::Listed> {
        IndexResource::<Lean<EndpointSlice>>::listed(&mut self.slices, at_home(slice)?)
    }

    fn reset(&mut self, listed: Vec<Self::Listed>) {
        IndexResource::<Lean<EndpointSlice>>::reset(&mut self.slices, listed);
    }
}
