//! What the shell and the plans read of the peers: whether they are
//! listed, synced and ready, which connections are live, and the view of
//! each peer a plan reads.

use std::collections::BTreeSet;

use super::{Now, Peer, PeerConn, Peers};
use crate::api::ServiceRef;
use crate::controller::reconcile::PeerView;

impl Peers {
    /// Whether the peer Secrets have been listed once.
    pub(in crate::controller) fn listed(&self) -> bool {
        self.secrets_listed
    }

    /// Whether every peer not refused has synced and been probed once.
    pub(in crate::controller) fn synced(&self) -> bool {
        self.peers
            .values()
            .filter(|p| p.refused.is_none())
            .all(|p| p.current.as_ref().is_some_and(PeerConn::settled))
    }

    /// How many peers there are (refused ones too).
    pub(in crate::controller) fn len(&self) -> usize {
        self.peers.len()
    }

    /// How many peers peer Secrets name (a hub's members aside).
    pub(in crate::controller) fn mesh_len(&self) -> usize {
        self.peers.values().filter(|p| !p.hub).count()
    }

    /// Whether connection `generation` of Secret `secret` is one of the
    /// peer's (current or next): the shell drops the tasks and clients of
    /// the others.
    pub(in crate::controller) fn is_live(&self, secret: &str, generation: u64) -> bool {
        self.peers.get(secret).is_some_and(|peer| {
            let is =
                |conn: &Option<PeerConn>| conn.as_ref().is_some_and(|c| c.generation == generation);
            // A frozen current connection (a changed identity, a refusal)
            // is read no more; its replacement is.
            is(&peer.next) || (!peer.identity_changed && is(&peer.current))
        })
    }

    /// The peers neither usable nor within grace (refused ones aside), by
    /// name: `/ready` waits for them.
    pub(in crate::controller) fn not_ready(&self, now: Now) -> Vec<String> {
        let grace = self.settings.grace;
        self.peers
            .values()
            .filter(|p| p.refused.is_none() && !p.ready(grace, now.wall))
            .map(Peer::name)
            .collect()
    }

    /// What a plan reads of the peers: a view of each identified and
    /// synced one, and the ids of peers not read yet but within grace
    /// (their services are left alone).
    pub(in crate::controller) fn views(&self, now: Now) -> (Vec<PeerView<'_>>, BTreeSet<String>) {
        let grace = self.settings.grace;
        let mut views: Vec<(bool, PeerView<'_>)> = Vec::new();
        let mut unknown = BTreeSet::new();
        for peer in self.peers.values() {
            let within_grace = peer.within_grace(grace, now.wall);
            let Some(conn) = &peer.current else {
                // Known only from its Lease, then refused for a changed
                // id: what it published is left alone until grace ends.
                if peer.identity_changed
                    && within_grace
                    && let Some(id) = &peer.lease_id
                {
                    unknown.insert(id.clone());
                }
                continue;
            };
            let Some(identity) = &conn.identity else {
                if within_grace && let Some(id) = &peer.lease_id {
                    unknown.insert(id.clone());
                }
                continue;
            };
            let id = identity.cluster_id.as_str();
            if !conn.settled() {
                // Listed but not probed yet, it is a moment from being
                // known up or down: what names it is left alone until then.
                if within_grace || conn.synced() {
                    unknown.insert(id.to_owned());
                }
                continue;
            }
            views.push((
                peer.hub,
                PeerView {
                    id,
                    endpoint_ranges: peer.endpoint_ranges.as_deref(),
                    data: &conn.data,
                    usable: peer.usable(grace, now.wall),
                },
            ));
        }
        once_by_id(views, unknown)
    }

    /// Every service some peer's current connection exports.
    pub(in crate::controller) fn exported_services(&self) -> impl Iterator<Item = &ServiceRef> {
        self.peers
            .values()
            .filter_map(|p| p.current.as_ref())
            .flat_map(|c| c.data.exports.services())
    }
}

/// A cluster read both through the mesh and through a hub (while the
/// clusterset moves from one to the other) is read once, by its id: its
/// mesh view while that counts, else its hub view; a cluster with a view
/// that counts is not also unknown. `views` are `(from the hub, view)`.
fn once_by_id<'a>(
    mut views: Vec<(bool, PeerView<'a>)>,
    mut unknown: BTreeSet<String>,
) -> (Vec<PeerView<'a>>, BTreeSet<String>) {
    // The view to keep first: counting before not, the mesh's before the
    // hub's.
    views.sort_by_key(|(hub, view)| (view.id, !view.usable, *hub));
    views.dedup_by(|later, kept| later.1.id == kept.1.id);
    for (_, view) in &views {
        if view.usable {
            unknown.remove(view.id);
        }
    }
    (views.into_iter().map(|(_, view)| view).collect(), unknown)
}
