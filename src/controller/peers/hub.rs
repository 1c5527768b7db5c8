//! The members of a hub as peers: one per member namespace the hub
//! connection reads, named [`hub_peer`]`(id)`. Everything else about them
//! is a peer's: the limits, the checks of what they publish, grace, the
//! Lease that remembers them across restarts. What differs: their id is
//! their hub namespace's (bound by the hub admin at `hub join`), so there
//! is no identity to read or to change; their liveness is their Lease on
//! the hub (the hub connection reports it as a probe result); and while
//! the hub does not answer, their data is frozen as it was, not aged.

use super::input::{hub_peer, is_hub_peer};
use super::{Effect, Now, Peer, PeerConn, Peers, SECRET_DELETE_DEBOUNCE};
use crate::cidr::Cidr;
use crate::peering::Identity;

impl Peers {
    /// Hub members an earlier run saw (their peer Leases), before the hub
    /// is read: known by id and last seen, so that their services are left
    /// alone while the hub lists, within grace.
    pub(super) fn hub_members_of_leases(&mut self) {
        let limits = self.settings.limits;
        for (name, (id, seen)) in &self.leases {
            if !is_hub_peer(name) {
                continue;
            }
            let mut peer = Peer::new(name);
            peer.hub = true;
            // No endpoint counts until its record on the hub is read.
            peer.endpoint_ranges = Some(Vec::new());
            peer.pinned_id = Some(id.clone());
            peer.lease_id = Some(id.clone());
            peer.last_seen = Some(*seen);
            // Generation 0: never a hub connection's, replaced by the
            // first that lists the member.
            peer.current = Some(PeerConn::new(0, limits));
            self.peers.insert(name.clone(), peer);
        }
    }

    /// Member `id` read by hub connection `generation`: a new member, or
    /// one the hub connection reads anew (the hub Secret changed), beside
    /// its current data until the new connection has synced and reported
    /// its Lease, as a rotated peer Secret is.
    pub(super) fn hub_member(&mut self, id: String, generation: u64, effects: &mut Vec<Effect>) {
        if id == self.settings.local_id {
            return;
        }
        let name = hub_peer(&id);
        let limits = self.settings.limits;
        let clusterset = self.settings.local_clusterset.clone();
        let peer = self.peers.entry(name.clone()).or_insert_with(|| {
            let mut peer = Peer::new(&name);
            // No endpoint counts until its record on the hub is read.
            peer.endpoint_ranges = Some(Vec::new());
            peer
        });
        peer.hub = true;
        peer.pinned_id = Some(id.clone());
        peer.removing_at = None;
        if peer.newest() == Some(generation) {
            return;
        }
        let mut conn = PeerConn::new(generation, limits);
        conn.identity = Some(Identity {
            cluster_id: id.clone(),
            clusterset,
        });
        peer.first_id.get_or_insert(id);
        if peer.current.as_ref().is_some_and(PeerConn::synced) {
            peer.next = Some(conn);
        } else {
            peer.current = Some(conn);
            effects.push(Effect::ReplanAll);
        }
    }

    /// Member `id`'s endpoint ranges as its record on the hub gives them:
    /// a change counts for every service it exports.
    pub(super) fn hub_member_ranges(
        &mut self,
        id: &str,
        ranges: Option<Vec<Cidr>>,
        effects: &mut Vec<Effect>,
    ) {
        let Some(peer) = self.peers.get_mut(&hub_peer(id)) else {
            return;
        };
        if peer.endpoint_ranges != ranges {
            peer.endpoint_ranges = ranges;
            effects.push(Effect::ReplanAll);
        }
    }

    /// Hub connection `generation` has listed every member: one known only
    /// from an earlier run's Lease (never read by a hub connection) has
    /// left the hub, and goes as a deleted peer Secret's peer does.
    pub(super) fn hub_listed(&mut self, generation: u64, now: Now) {
        for peer in self.peers.values_mut().filter(|p| p.hub) {
            let only_remembered = peer.current.as_ref().is_some_and(|c| c.generation == 0);
            if only_remembered && peer.next.is_none() {
                tracing::info!(peer = %peer.name(), generation, "hub member of an earlier run not on the hub");
                peer.removing_at = Some(now.at + SECRET_DELETE_DEBOUNCE);
            }
        }
    }

    /// The hub answers again, or stopped answering: its members' data is
    /// frozen while it does not. Back, each frozen member gets a grace
    /// period from now: the outage is not held against it (without this,
    /// every member last seen before an outage longer than the grace was
    /// dropped the moment the hub answered, and back a probe later).
    pub(super) fn hub_reachable(&mut self, reachable: bool, now: Now) {
        for peer in self.peers.values_mut().filter(|p| p.hub) {
            if reachable && peer.frozen && peer.last_seen.is_some() {
                peer.last_seen = Some(now.wall);
            }
            peer.frozen = !reachable;
        }
    }

    /// No hub Secret (any more): every member goes, after the debounce a
    /// replaced Secret gets.
    pub(super) fn hub_gone(&mut self, now: Now) {
        for peer in self.peers.values_mut().filter(|p| p.hub) {
            peer.frozen = false;
            peer.removing_at
                .get_or_insert(now.at + SECRET_DELETE_DEBOUNCE);
        }
    }
}
