//! What goes into the peers' state machine and what comes out: the
//! [`Input`]s the shell feeds [`super::Peers::handle`], the time they happen
//! at, and the [`Effect`]s it returns.

use std::time::{Duration, Instant, SystemTime};

use super::super::cluster::Touched;
use super::super::connection::WatchEvent;
use crate::peering::{Identity, PeerSecret};

/// How long a deleted peer Secret may take to come back (a replace is a
/// delete and a create) before the peer's data is dropped.
pub(crate) const SECRET_DELETE_DEBOUNCE: Duration = Duration::from_secs(3);

/// The time an input happens at: the monotonic clock for local deadlines,
/// the wall clock for when a peer was last seen (it outlives the process
/// in the peer's Lease).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Now {
    /// Monotonic.
    pub at: Instant,
    /// Wall clock.
    pub wall: SystemTime,
}

impl Now {
    /// The current time.
    pub(crate) fn current() -> Self {
        Self {
            at: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    /// `duration` later on both clocks.
    #[cfg(test)]
    pub(crate) fn after(self, duration: Duration) -> Self {
        Self {
            at: self.at + duration,
            wall: self.wall + duration,
        }
    }
}

/// What reading a connection's identity gave.
#[derive(Debug, Clone)]
pub(crate) enum Contact {
    /// The kubeconfig cannot be used.
    Invalid(String),
    /// The peer did not answer (the shell retries).
    Unreachable(String),
    /// The peer's identity.
    Identified(Identity),
}

/// What the state machine is told.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // as for WatchEvent: moved once, not stored
pub(crate) enum Input {
    /// Peer Secret `name` was applied holding `secret` (an empty
    /// kubeconfig when it has none); `listed` when it came as part of a
    /// (re)list.
    SecretApplied {
        /// The Secret's name.
        name: String,
        /// What it holds.
        secret: PeerSecret,
        /// Part of a list.
        listed: bool,
    },
    /// Peer Secret `name` was deleted.
    SecretDeleted(String),
    /// A (re)list of the peer Secrets begins.
    SecretsListing,
    /// The (re)list is complete: Secrets it did not name are gone.
    SecretsListed,
    /// Reading the identity of connection `generation` gave `contact`.
    Identity {
        /// The peer's Secret.
        secret: String,
        /// The connection.
        generation: u64,
        /// What was read.
        contact: Contact,
    },
    /// An item of one of connection `generation`'s watches.
    Watch {
        /// The peer's Secret.
        secret: String,
        /// The connection.
        generation: u64,
        /// The item.
        event: WatchEvent,
    },
    /// A probe of connection `generation` answered (or not).
    Probe {
        /// The peer's Secret.
        secret: String,
        /// The connection.
        generation: u64,
        /// `Err` with why it failed.
        result: Result<(), String>,
    },
    /// Connection `generation`'s peer publishes in another form than its
    /// watches read (it was upgraded, or rolled back): connect again beside
    /// it, in the new form.
    Reconnect {
        /// The peer's Secret.
        secret: String,
        /// The connection.
        generation: u64,
    },
    /// Member `id` of the hub was read by hub connection `generation`: a
    /// peer of its own, named [`hub_peer`]`(id)`, whose id is its hub
    /// namespace's (bound by the hub admin), not one it claims.
    HubMember {
        /// The member's cluster id.
        id: String,
        /// The hub connection.
        generation: u64,
    },
    /// What the hub admin recorded of member `id` (its record on the hub,
    /// `hub join`): the ranges its endpoints must be in, `None` for any.
    /// A member without a readable record gets `Some` of no range: none
    /// of its endpoints is taken.
    HubMemberRanges {
        /// The member's cluster id.
        id: String,
        /// Its endpoint ranges.
        ranges: Option<Vec<crate::cidr::Cidr>>,
    },
    /// Hub connection `generation` has listed every member once: a member
    /// known only from an earlier run's Lease and not listed has left.
    HubListed {
        /// The hub connection.
        generation: u64,
    },
    /// Whether the hub answers. While it does not, what its members
    /// published stays as it was, however long: a hub outage freezes
    /// imports, it never empties them.
    HubReachable(bool),
    /// This cluster has no hub (any more): its members go as a deleted
    /// peer Secret's peer does.
    HubGone,
    /// Once a second: drop peers whose Secret is gone, keep Leases and
    /// gauges current, notice grace periods ending.
    Tick,
}

/// Prefix of a hub member's peer name. A Secret's name cannot hold `:`,
/// so no peer Secret is mistaken for a hub member.
const HUB_PEER_PREFIX: &str = "hub:";

/// The peer name of hub member `id`.
pub(crate) fn hub_peer(id: &str) -> String {
    format!("{HUB_PEER_PREFIX}{id}")
}

/// Whether `name` is a hub member's peer name.
pub(crate) fn is_hub_peer(name: &str) -> bool {
    name.starts_with(HUB_PEER_PREFIX)
}

/// What the shell does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Effect {
    /// Build a client from `kubeconfig` and read the peer's identity,
    /// answering with [`Input::Identity`] for `generation`.
    Connect {
        /// The peer's Secret.
        secret: String,
        /// The new connection.
        generation: u64,
        /// The credentials.
        kubeconfig: Vec<u8>,
        /// The peer controller's namespace, when its Secret names one.
        namespace: Option<String>,
    },
    /// The peer was accepted as `id`: start connection `generation`'s
    /// watches and probe with the client the identity was read with.
    StartWatches {
        /// The peer's Secret.
        secret: String,
        /// The connection.
        generation: u64,
        /// The peer's cluster id.
        id: String,
    },
    /// The Secret is refused, or the peer refuses its credential: count
    /// it and record a Warning Event on it.
    Refused {
        /// The Secret.
        secret: String,
        /// The Event's reason (`InvalidKubeconfig`, `SelfReference`,
        /// `CredentialRejected`…).
        reason: &'static str,
        /// Why, for a person.
        message: String,
    },
    /// Record a Warning Event on the peer's Secret that refuses nothing
    /// (its credential expires soon): the peer goes on as it was.
    Warning {
        /// The Secret.
        secret: String,
        /// The Event's reason (`CredentialExpiring`).
        reason: &'static str,
        /// Why, for a person.
        message: String,
    },
    /// These services changed in a peer's data: replan them.
    Touched(Touched),
    /// Which peers count changed: replan everything.
    ReplanAll,
    /// Count a peer sync error (`peer_sync_errors_total{peer, kind}`).
    SyncError {
        /// The peer's id, or its Secret before it is known.
        peer: String,
        /// `watch` or `probe`.
        kind: &'static str,
    },
    /// Count peer objects refused by the limits
    /// (`peer_objects_rejected_total{peer, reason="peer-limit"}`).
    OverLimit {
        /// The peer.
        peer: String,
        /// How many.
        count: u64,
    },
    /// Record in the peer's Lease that it was healthy at `seen`.
    RenewLease {
        /// The peer's cluster id.
        id: String,
        /// Its Secret.
        secret: String,
        /// When it was last healthy.
        seen: SystemTime,
    },
    /// The peer's gauges: up or not, and when it was last seen healthy.
    Gauges {
        /// The peer's cluster id.
        id: String,
        /// Synced and answering.
        up: bool,
        /// Last healthy.
        last_seen: Option<SystemTime>,
    },
    /// The peer is gone: remove its gauges.
    Forget {
        /// The peer's cluster id.
        id: String,
    },
}
