//! One peer as the state machine keeps it: the Secret that names it, its
//! current connection (and the next one while its Secret rotates), what
//! each connection read, and whether its data counts.

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::jiff::Timestamp;

use super::super::cluster::{ClusterData, ClusterWatches, PeerLimits};
use crate::cidr::Cidr;
use crate::peering::Identity;
use crate::watch::backoff::RestartSchedule;

/// One connection to a peer and what it read.
#[derive(Debug)]
pub(crate) struct PeerConn {
    pub(super) generation: u64,
    pub(super) identity: Option<Identity>,
    pub(super) data: ClusterData,
    pub(super) watches: ClusterWatches,
    pub(super) probe: Result<(), String>,
    /// Whether a probe has answered (or failed) once: until then, a synced
    /// connection is not known to be up or down.
    pub(super) probed: bool,
    /// Kinds whose limit this connection has hit (warned once each).
    pub(super) over_limit: BTreeSet<&'static str>,
}

impl PeerConn {
    pub(super) fn new(generation: u64, limits: PeerLimits) -> Self {
        Self {
            generation,
            identity: None,
            data: ClusterData::for_peer(limits),
            watches: ClusterWatches::new("endpointslices"),
            probe: Err("not probed yet".into()),
            probed: false,
            over_limit: BTreeSet::new(),
        }
    }

    /// Every watch has listed.
    pub(crate) fn synced(&self) -> bool {
        self.watches.synced()
    }

    /// Synced, and probed once: whether it is up is known.
    pub(crate) fn settled(&self) -> bool {
        self.synced() && self.probed
    }

    /// Synced, answering its probe, and no watch failing.
    pub(crate) fn healthy(&self) -> bool {
        self.synced() && self.probe.is_ok() && !self.failing()
    }

    /// Whether a watch is failing (a failed list or watch, not yet
    /// followed by a relist or a change).
    pub(super) fn failing(&self) -> bool {
        self.watches.failing()
    }

    /// What is wrong with it, for logs.
    pub(crate) fn problem(&self) -> Option<String> {
        if let Err(error) = &self.probe {
            return Some(format!("probe: {error}"));
        }
        self.watches.healths().into_iter().find_map(|h| {
            h.last_error()
                .map(|e| format!("watch of {}: {e}", h.resource()))
        })
    }
}

/// A peer named by a Secret.
#[derive(Debug)]
pub(crate) struct Peer {
    pub(super) secret: String,
    pub(super) kubeconfig: Vec<u8>,
    /// Its controller's namespace, when its Secret names one.
    pub(super) namespace: Option<String>,
    /// The id its Secret records (`peer add`): the only one it may answer
    /// with.
    pub(super) pinned_id: Option<String>,
    /// The pod ranges its Secret records: its endpoints outside them are
    /// refused.
    pub(super) endpoint_ranges: Option<Vec<Cidr>>,
    /// The first id it was accepted with in this run (a Secret without a
    /// recorded id is pinned to it, or to its Lease's).
    pub(super) first_id: Option<String>,
    /// It answered with an id other than its pinned one: refused, and
    /// treated as unreachable (what it published before stays for the
    /// grace period, frozen, and is never relabelled).
    pub(super) identity_changed: bool,
    /// The connection whose data counts.
    pub(super) current: Option<PeerConn>,
    /// A replacement (rotated Secret, or a relist) being synced; swapped in
    /// once synced and probed.
    pub(super) next: Option<PeerConn>,
    pub(super) refused: Option<String>,
    pub(super) removing_at: Option<Instant>,
    /// Last time the peer was healthy (from its Lease across restarts).
    pub(super) last_seen: Option<SystemTime>,
    pub(super) lease_renewed: Option<Instant>,
    /// The peer's id as its Lease recorded it, before the peer answers.
    pub(super) lease_id: Option<String>,
    /// Spacing of reconnects, to relist failing watches or to read the
    /// peer in another form.
    pub(super) reconnects: RestartSchedule,
    /// A change of publication form that connection `generation` reported
    /// before a reconnect was due: carried out once it is.
    pub(super) form_changed: Option<u64>,
    /// When its Secret's credential expires (`None`: never, or unknown).
    pub(super) credential_expires: Option<Timestamp>,
    /// Whether the coming expiry of that credential was warned of.
    pub(super) expiry_warned: bool,
    /// The credential problems reported in the current episode (one Event
    /// each): from the first until the Secret's credential works again or
    /// the Secret holds another.
    pub(super) credential_reported: BTreeSet<&'static str>,
    /// A member of the hub rather than a peer of a Secret.
    pub(super) hub: bool,
    /// A hub member while the hub does not answer: its data counts as it
    /// was, however long (a hub outage freezes imports).
    pub(super) frozen: bool,
}

impl Peer {
    pub(super) fn new(secret: &str) -> Self {
        Self {
            secret: secret.to_owned(),
            kubeconfig: Vec::new(),
            namespace: None,
            pinned_id: None,
            endpoint_ranges: None,
            first_id: None,
            identity_changed: false,
            current: None,
            next: None,
            refused: None,
            removing_at: None,
            last_seen: None,
            lease_renewed: None,
            lease_id: None,
            reconnects: RestartSchedule::default(),
            form_changed: None,
            credential_expires: None,
            expiry_warned: false,
            credential_reported: BTreeSet::new(),
            hub: false,
            frozen: false,
        }
    }

    /// Its cluster id once its current connection read it.
    pub(crate) fn id(&self) -> Option<&str> {
        self.current
            .as_ref()
            .and_then(|c| c.identity.as_ref())
            .map(|i| i.cluster_id.as_str())
    }

    /// Its id, else its Secret's name: how logs and metrics name it.
    pub(super) fn name(&self) -> String {
        self.id().unwrap_or(&self.secret).to_owned()
    }

    pub(super) fn within_grace(&self, grace: Duration, now: SystemTime) -> bool {
        self.last_seen
            .and_then(|seen| now.duration_since(seen).ok())
            .is_some_and(|age| age < grace)
    }

    pub(super) fn conn_mut(&mut self, generation: u64) -> Option<&mut PeerConn> {
        if self
            .current
            .as_ref()
            .is_some_and(|c| c.generation == generation)
        {
            self.current.as_mut()
        } else if self
            .next
            .as_ref()
            .is_some_and(|c| c.generation == generation)
        {
            self.next.as_mut()
        } else {
            None
        }
    }

    /// Whether its data counts: synced and healthy, or within grace.
    pub(super) fn usable(&self, grace: Duration, now: SystemTime) -> bool {
        let Some(conn) = &self.current else {
            return false;
        };
        conn.identity.is_some()
            && conn.synced()
            && (self.up() || self.frozen || self.within_grace(grace, now))
    }

    /// Healthy and still the cluster it joined as.
    pub(super) fn up(&self) -> bool {
        !self.identity_changed && self.current.as_ref().is_some_and(PeerConn::healthy)
    }

    /// The generation of the connection made with what its Secret holds
    /// now: the replacement on its way, else the current one.
    pub(super) fn newest(&self) -> Option<u64> {
        self.next
            .as_ref()
            .or(self.current.as_ref())
            .map(|c| c.generation)
    }

    /// Whether the Secret's present credential works: its newest
    /// connection is healthy (a credential problem is over).
    pub(super) fn credential_works(&self) -> bool {
        match &self.next {
            Some(next) => next.healthy(),
            None => self.up(),
        }
    }

    /// When its credential expires, if it expires.
    pub(super) fn expires_at(&self) -> Option<SystemTime> {
        self.credential_expires.map(SystemTime::from)
    }

    /// The id it must answer with: its Secret's, else the first it was
    /// accepted with, else its Lease's from an earlier run.
    pub(super) fn expected_id(&self) -> Option<&str> {
        self.pinned_id
            .as_deref()
            .or(self.first_id.as_deref())
            .or(self.lease_id.as_deref())
    }

    /// Whether it lets `/ready` answer 200: usable, or not read yet but
    /// within the grace its Lease recorded.
    pub(super) fn ready(&self, grace: Duration, now: SystemTime) -> bool {
        self.usable(grace, now) || self.within_grace(grace, now)
    }

    /// What makes the controller replan: whether its data counts, whether
    /// it is within grace (a peer not read since start-up is left alone
    /// only until its Lease's grace ends), and its connection.
    pub(super) fn usability(&self, grace: Duration, now: SystemTime) -> Usability {
        (
            self.usable(grace, now),
            self.within_grace(grace, now),
            self.current.as_ref().map(|c| c.generation),
        )
    }
}

pub(super) type Usability = (bool, bool, Option<u64>);
