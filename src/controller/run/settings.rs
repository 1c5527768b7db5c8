//! The loop's settings, read by the parts it owns.

use std::time::Duration;

use crate::controller::cluster::PeerLimits;
use crate::controller::connection::Probing;
use crate::controller::reconcile::NamespaceFilter;

/// Settings of the loop.
#[derive(Debug, Clone)]
pub(in crate::controller) struct Settings {
    /// Namespace of peer Secrets and Leases.
    pub(in crate::controller) namespace: String,
    /// Peer Secret label selector.
    pub(in crate::controller) peer_selector: String,
    /// How long an unreachable peer's data stays.
    pub(in crate::controller) grace: Duration,
    /// How long start-up waits for peers.
    pub(in crate::controller) startup_sync_timeout: Duration,
    /// Denied namespaces.
    pub(in crate::controller) deny: NamespaceFilter,
    /// In the opt-in mode, the labels of the namespaces imported into.
    pub(in crate::controller) import_selector: Option<crate::label_selector::LabelSelector>,
    /// The percentage of the Service CIDR one peer alone may make this
    /// cluster allocate as clusterset IPs.
    pub(in crate::controller) peer_ip_share: u8,
    /// How peers are checked.
    pub(in crate::controller) probing: Probing,
    /// This replica's name in Events.
    pub(in crate::controller) instance: String,
    /// How much of each peer's data is held at most.
    pub(in crate::controller) peer_limits: PeerLimits,
}
