//! The watches every cluster has, this one and each peer: its
//! ServiceExports, Services and MCS EndpointSlices. One type for both, so
//! that an event of these kinds reaches a [`ClusterData`] the same way
//! whoever watches the cluster, and its [`Outcome`] is read by the one
//! policy on watch failures ([`crate::watch::Verdict`]).

use std::time::Instant;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::{ClusterData, Objects};
use crate::api::ServiceExport;
use crate::controller::connection::ClusterEvent;
use crate::controller::lean::Lean;
use crate::watch::{Health, Outcome, Watch};

/// The watches of the kinds a [`ClusterData`] holds.
#[derive(Debug)]
pub struct ClusterWatches {
    exports: Watch<Lean<ServiceExport>, Objects<ServiceExport>>,
    services: Watch<Lean<Service>, Objects<Service>>,
    mcs_slices: Watch<Lean<EndpointSlice>, Objects<EndpointSlice>>,
}

impl ClusterWatches {
    /// The watches, the slices' one named `mcs_slices` in logs and
    /// metrics (this cluster watches several kinds of slice).
    pub fn new(mcs_slices: &'static str) -> Self {
        Self {
            exports: Watch::new("serviceexports"),
            services: Watch::new("services"),
            mcs_slices: Watch::new(mcs_slices),
        }
    }

    /// Applies `event` to `data`.
    pub fn handle(&mut self, data: &mut ClusterData, event: ClusterEvent, now: Instant) -> Outcome {
        match event {
            ClusterEvent::Exports(e) => self.exports.handle(&mut data.exports, e, now),
            ClusterEvent::Services(e) => self.services.handle(&mut data.services, e, now),
            ClusterEvent::McsSlices(e) => self.mcs_slices.handle(&mut data.mcs_slices, e, now),
        }
    }

    /// How each watch is doing.
    pub fn healths(&self) -> [&Health; 3] {
        [
            self.exports.health(),
            self.services.health(),
            self.mcs_slices.health(),
        ]
    }

    /// Every watch has listed.
    pub fn synced(&self) -> bool {
        self.healths().iter().all(|health| health.synced())
    }

    /// A watch is failing (a failed list or watch, not yet followed by a
    /// relist or a change).
    pub fn failing(&self) -> bool {
        self.healths().iter().any(|health| health.failing())
    }
}
