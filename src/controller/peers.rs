//! The controller's peers as a pure state machine: [`Peers::handle`] takes
//! one [`Input`] (a peer Secret event, a peer's identity, a watch event or
//! probe result of one of its connections, a timer tick) and returns the
//! [`Effect`]s the shell carries out (connect, start watches, refuse with
//! an Event, replan, renew a peer Lease, metrics). No client, no task, no
//! runtime: the tests drive it with synthetic sequences.
//!
//! Each peer (one per Secret) has a current connection, whose data counts,
//! and while its Secret rotates a next one, which replaces it once synced
//! and probed.
//! A connection is named by a generation, so events of a connection that
//! has since been replaced are ignored. A peer's data counts while it is
//! synced and healthy, or within the grace period after it was last seen
//! healthy (recorded in its Lease across restarts).
//!
//! Reconnects that relist (a watch failing on a peer that answers, a
//! change of publication form) are spaced 1 s doubling to 60 s, and a
//! replacement that indexed what the old connection held replans nothing.
//! A peer that refuses its Secret's credential (401, 403), or whose
//! credential has expired, gets an Event naming that, not only an outage;
//! one about to expire is warned of a day ahead (`credential`).
//!
//! Inputs and effects are in `input`, one peer in `peer`, and what the
//! shell and the plans read of the peers in `views`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use super::cluster::{ClusterData, Objects, PeerLimits, Touched};
use super::compact::Compact;
use super::connection::WatchEvent;
use crate::api::ServiceRef;
use crate::peering::PeerSecret;
use crate::peering::membership::peer_refusal;
use crate::peering::reason;
use crate::watch::Verdict;
use crate::watch::backoff::RestartSchedule;

mod credential;
mod hub;
mod input;
mod peer;
mod views;

use credential::{rejection_in_text, rejection_in_watch};
pub(super) use input::{
    Contact, Effect, Input, Now, SECRET_DELETE_DEBOUNCE, hub_peer, is_hub_peer,
};
use peer::Usability;
pub(super) use peer::{Peer, PeerConn};

/// Settings of the peers.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    /// This cluster's id.
    pub local_id: String,
    /// This cluster's clusterset.
    pub local_clusterset: String,
    /// How long an unreachable peer's data stays.
    pub grace: Duration,
    /// How much of each peer's data is held at most.
    pub limits: PeerLimits,
}

/// Every peer named by a Secret.
#[derive(Debug)]
pub(super) struct Peers {
    settings: Settings,
    peers: BTreeMap<String, Peer>,
    generation: u64,
    /// Whether the peer Secrets have been listed once: until then the
    /// peers are not known, and nothing may start.
    secrets_listed: bool,
    /// The Secrets of a list in progress.
    secrets_relisted: Option<BTreeSet<String>>,
    /// Per Secret, as of the last input.
    usability: BTreeMap<String, Usability>,
    /// Peer Leases found at start-up: Secret name → (peer id, last seen).
    leases: BTreeMap<String, (String, SystemTime)>,
}

impl Peers {
    /// No peer yet; `leases` are the peer Leases of an earlier run.
    pub(super) fn new(settings: Settings, leases: BTreeMap<String, (String, SystemTime)>) -> Self {
        let mut peers = Self {
            settings,
            peers: BTreeMap::new(),
            generation: 0,
            secrets_listed: false,
            secrets_relisted: None,
            usability: BTreeMap::new(),
            leases,
        };
        peers.hub_members_of_leases();
        peers
    }

    /// Takes one input; returns what the shell must do, in order.
    pub(super) fn handle(&mut self, input: Input, now: Now) -> Vec<Effect> {
        let mut effects = Vec::new();
        match input {
            Input::SecretApplied {
                name,
                secret,
                listed,
            } => {
                if listed && let Some(relisted) = &mut self.secrets_relisted {
                    relisted.insert(name.clone());
                }
                self.secret_applied(name, secret, &mut effects);
            }
            Input::SecretDeleted(name) => {
                if let Some(peer) = self.peers.get_mut(&name) {
                    peer.removing_at = Some(now.at + SECRET_DELETE_DEBOUNCE);
                }
            }
            Input::SecretsListing => self.secrets_relisted = Some(BTreeSet::new()),
            Input::SecretsListed => {
                self.secrets_listed = true;
                // A Secret deleted while the watch was down sends no
                // Delete: the list is the truth. For peer Secrets only: a
                // hub member has none, and goes by the hub's own list.
                let listed = self.secrets_relisted.take().unwrap_or_default();
                for peer in self.peers.values_mut().filter(|p| !p.hub) {
                    if !listed.contains(&peer.secret) && peer.removing_at.is_none() {
                        peer.removing_at = Some(now.at + SECRET_DELETE_DEBOUNCE);
                    }
                }
            }
            Input::Identity {
                secret,
                generation,
                contact,
            } => self.identified(&secret, generation, contact, now, &mut effects),
            Input::Watch {
                secret,
                generation,
                event,
            } => self.watch_event(&secret, generation, event, now, &mut effects),
            Input::Probe {
                secret,
                generation,
                result,
            } => self.probed(&secret, generation, result, now, &mut effects),
            Input::Reconnect { secret, generation } => {
                self.reconnect(&secret, generation, now, &mut effects)
            }
            Input::HubMember { id, generation } => self.hub_member(id, generation, &mut effects),
            Input::HubMemberRanges { id, ranges } => {
                self.hub_member_ranges(&id, ranges, &mut effects)
            }
            Input::HubListed { generation } => self.hub_listed(generation, now),
            Input::HubReachable(reachable) => self.hub_reachable(reachable, now),
            Input::HubGone => self.hub_gone(now),
            Input::Tick => self.tick(now, &mut effects),
        }
        self.notice_usability(now, &mut effects);
        effects
    }

    fn secret_applied(&mut self, name: String, secret: PeerSecret, effects: &mut Vec<Effect>) {
        let PeerSecret {
            kubeconfig,
            cluster_id,
            endpoint_ranges,
            namespace,
            credential_expires,
        } = secret;
        let known = self.peers.contains_key(&name);
        let peer = self
            .peers
            .entry(name.clone())
            .or_insert_with(|| Peer::new(&name));
        peer.removing_at = None;
        if peer.kubeconfig != kubeconfig || peer.credential_expires != credential_expires {
            // Another credential: its problems are its own.
            peer.expiry_warned = false;
            peer.credential_reported.clear();
        }
        peer.credential_expires = credential_expires;
        let endpoint_ranges = match endpoint_ranges {
            Ok(ranges) => ranges,
            Err(why) => {
                peer.kubeconfig = kubeconfig;
                let message = format!("Secret {name}: {why}");
                self.refuse(
                    &name,
                    None,
                    reason::INVALID_ENDPOINT_CIDRS,
                    message,
                    effects,
                );
                return;
            }
        };
        // Where the peer is read is part of its credentials: a new
        // namespace is a new connection.
        let same_credentials =
            known && peer.kubeconfig == kubeconfig && peer.namespace == namespace;
        peer.namespace = namespace;
        let same_rules = peer.pinned_id == cluster_id && peer.endpoint_ranges == endpoint_ranges;
        peer.pinned_id = cluster_id;
        peer.endpoint_ranges = endpoint_ranges;
        if same_credentials {
            if same_rules {
                return;
            }
            if peer.refused.is_none() {
                // New ranges change which endpoints count; a new pinned id
                // is checked at the next identity read.
                effects.push(Effect::ReplanAll);
                return;
            }
            // Refused: the new rules may let it in.
        }
        self.connect(name, kubeconfig, effects);
    }

    /// Connects (again) to the peer of Secret `name` with `kubeconfig`:
    /// beside its current connection when that one is synced, so the
    /// peer's data keeps counting until the new one has synced.
    fn connect(&mut self, name: String, kubeconfig: Vec<u8>, effects: &mut Vec<Effect>) {
        self.generation += 1;
        let generation = self.generation;
        let conn = PeerConn::new(generation, self.settings.limits);
        let peer = self
            .peers
            .entry(name.clone())
            .or_insert_with(|| Peer::new(&name));
        if peer.last_seen.is_none()
            && let Some((id, seen)) = self.leases.get(&name)
        {
            peer.lease_id = Some(id.clone());
            peer.last_seen = Some(*seen);
        }
        peer.kubeconfig = kubeconfig.clone();
        peer.refused = None;
        if peer.current.as_ref().is_some_and(PeerConn::synced) {
            tracing::info!(secret = %name, "connecting to the peer beside its current connection (new credentials, or a relist)");
            // A current connection frozen by a refusal stays frozen (not
            // up, its grace running) until this one replaces it: were the
            // new one refused too, the old data would otherwise count as
            // healthy for ever.
            peer.next = Some(conn);
        } else {
            peer.current = Some(conn);
            peer.identity_changed = false;
        }
        effects.push(Effect::Connect {
            secret: name,
            generation,
            kubeconfig,
            namespace: peer.namespace.clone(),
        });
    }

    /// Connects again to the peer of connection `generation`, which
    /// reported a change of publication form, when that is its current
    /// connection and no replacement is on its way (that one reads the
    /// form afresh). Spaced as the reconnects of a failing watch (1 s
    /// doubling to 60 s): a peer that flips its marker back and forth
    /// would otherwise make every member relist all it publishes back to
    /// back. Not due yet, the change waits for [`Self::tick`] to find it
    /// due; the new connection reads the marker then, so the latest form
    /// wins.
    fn reconnect(&mut self, secret: &str, generation: u64, now: Now, effects: &mut Vec<Effect>) {
        let Some(peer) = self.peers.get_mut(secret) else {
            return;
        };
        let current = peer.current.as_ref().map(|c| c.generation) == Some(generation);
        if !current || peer.next.is_some() || peer.refused.is_some() {
            return;
        }
        if !reconnect_due(&mut peer.reconnects, now) {
            if peer.form_changed != Some(generation) {
                tracing::info!(
                    secret,
                    "the peer publishes in another form: reading it again once a reconnect is due (they are spaced)"
                );
            }
            peer.form_changed = Some(generation);
            return;
        }
        peer.form_changed = None;
        tracing::info!(
            secret,
            "the peer publishes in another form: reading it again"
        );
        let kubeconfig = peer.kubeconfig.clone();
        self.connect(secret.to_owned(), kubeconfig, effects);
    }

    fn identified(
        &mut self,
        secret: &str,
        generation: u64,
        contact: Contact,
        now: Now,
        effects: &mut Vec<Effect>,
    ) {
        let identity = match contact {
            Contact::Identified(identity) => identity,
            Contact::Invalid(error) => {
                let message = format!("Secret {secret}: {error}");
                let generation = Some(generation);
                self.refuse(
                    secret,
                    generation,
                    reason::INVALID_KUBECONFIG,
                    message,
                    effects,
                );
                return;
            }
            Contact::Unreachable(error) => {
                if let Some(code) = rejection_in_text(&error) {
                    self.credential_rejected(secret, generation, code, now, effects);
                } else if let Some(peer) = self.peers.get(secret)
                    && peer
                        .current
                        .as_ref()
                        .is_some_and(|c| c.generation == generation && !c.synced())
                {
                    tracing::warn!(secret, %error, "cannot read the peer's identity yet; retrying");
                }
                return;
            }
        };
        // The id it joined as comes first: a peer that now claims another
        // cluster's id is not a duplicate of that cluster, it changed.
        if let Some(peer) = self.peers.get_mut(secret)
            && peer.conn_mut(generation).is_some()
            && let Some(expected) = peer.expected_id()
            && expected != identity.cluster_id
        {
            let message = format!(
                "Secret {secret}: the peer joined as {expected:?} and now answers as {:?}: it is treated as unreachable (what it published stays for the grace period, then goes) until its Secret is replaced",
                identity.cluster_id
            );
            self.identity_changed(secret, generation, message, effects);
            return;
        }
        let refusal = peer_refusal(
            &self.settings.local_id,
            &self.settings.local_clusterset,
            secret,
            &identity.cluster_id,
            &identity.clusterset,
            // A cluster read both through the mesh and through a hub (a
            // move from one to the other) is read once, by its id
            // (`views`): only two Secrets naming one cluster are refused.
            self.peers
                .values()
                .filter(|p| !p.hub)
                .filter_map(|p| Some((p.secret.as_str(), p.id()?))),
        );
        if let Some(refusal) = refusal {
            let generation = Some(generation);
            self.refuse(secret, generation, refusal.reason, refusal.message, effects);
            return;
        }
        let Some(peer) = self.peers.get_mut(secret) else {
            return;
        };
        if peer.conn_mut(generation).is_none() {
            return;
        }
        tracing::info!(secret, peer = %identity.cluster_id, "peer accepted");
        peer.first_id
            .get_or_insert_with(|| identity.cluster_id.clone());
        let Some(conn) = peer.conn_mut(generation) else {
            return;
        };
        effects.push(Effect::StartWatches {
            secret: secret.to_owned(),
            generation,
            id: identity.cluster_id.clone(),
        });
        conn.identity = Some(identity);
        // A plan reads the current connection only: a replacement's
        // identity changes nothing until it is swapped in.
        if peer.current.as_ref().map(|c| c.generation) == Some(generation) {
            effects.push(Effect::ReplanAll);
        }
    }

    /// Refuses a peer that answers with another id than the one it joined
    /// as: a connection that had synced under the old id keeps its data,
    /// frozen (its watches and probe stop), counted as unreachable, so it
    /// is dropped when the grace period ends; the new connection goes.
    fn identity_changed(
        &mut self,
        secret: &str,
        generation: u64,
        message: String,
        effects: &mut Vec<Effect>,
    ) {
        let Some(peer) = self.peers.get_mut(secret) else {
            return;
        };
        tracing::error!(
            secret,
            reason = reason::IDENTITY_CHANGED,
            "peer refused: {message}"
        );
        peer.refused = Some(message.clone());
        peer.identity_changed = true;
        peer.next = None;
        if peer
            .current
            .as_ref()
            .is_some_and(|c| c.generation == generation && c.identity.is_none())
        {
            peer.current = None;
        }
        effects.push(Effect::ReplanAll);
        effects.push(Effect::Refused {
            secret: secret.to_owned(),
            reason: reason::IDENTITY_CHANGED,
            message,
        });
    }

    /// Refuses what Secret `secret` now holds (`generation` `None`), or
    /// its connection `generation`. Only what is new goes: a replacement
    /// being synced, or a connection that has not synced yet. A synced
    /// current connection refused itself is kept as [`Self::identity_changed`]
    /// keeps it: frozen (read no more), counted as unreachable, so its data
    /// stays for the grace period, then goes. One refused beside it (a
    /// rotated Secret, a relist's connection) goes on as it was: a typo in
    /// a rotation drops no import. A connection replaced since is ignored.
    fn refuse(
        &mut self,
        secret: &str,
        generation: Option<u64>,
        reason: &'static str,
        message: String,
        effects: &mut Vec<Effect>,
    ) {
        let Some(peer) = self.peers.get_mut(secret) else {
            return;
        };
        if let Some(generation) = generation
            && peer.conn_mut(generation).is_none()
        {
            tracing::debug!(
                secret,
                reason,
                generation,
                "refusal of a replaced connection ignored: {message}"
            );
            return;
        }
        tracing::error!(secret, reason, "peer refused: {message}");
        peer.refused = Some(message.clone());
        // The replacement is the refused connection, or one the refused
        // Secret supersedes.
        peer.next = None;
        match &peer.current {
            Some(current) if !current.synced() => peer.current = None,
            Some(current) if Some(current.generation) == generation => {
                // The flag freezes the connection whatever the reason
                // (is_live, Peer::up), as for a changed identity.
                peer.identity_changed = true;
            }
            _ => {}
        }
        effects.push(Effect::ReplanAll);
        effects.push(Effect::Refused {
            secret: secret.to_owned(),
            reason,
            message,
        });
    }

    fn watch_event(
        &mut self,
        secret: &str,
        generation: u64,
        event: WatchEvent,
        now: Now,
        effects: &mut Vec<Effect>,
    ) {
        let limits = self.settings.limits;
        let Some(peer) = self.peers.get_mut(secret) else {
            return;
        };
        let peer_name = peer.name();
        let Some(conn) = peer.conn_mut(generation) else {
            return;
        };
        // A peer connection watches only the kinds every cluster has.
        let WatchEvent::Cluster(event) = event else {
            return;
        };
        let rejected = rejection_in_watch(&event);
        let outcome = conn.watches.handle(&mut conn.data, event, now.at);
        // The one policy on watch failures (Verdict), read for a peer: a
        // refusal before its first list is a failing peer, not fatal here.
        let (failing, reported) = match outcome.verdict() {
            Verdict::Quiet => (false, None),
            Verdict::StillFailing(_) | Verdict::Fatal { started: false, .. } => (true, None),
            Verdict::FailingStarted(error)
            | Verdict::Fatal {
                message: error,
                started: true,
            } => (true, Some(error)),
        };
        if failing {
            effects.push(Effect::SyncError {
                peer: peer_name.clone(),
                kind: "watch",
            });
        }
        if let Some(error) = reported
            && rejected.is_none()
        {
            tracing::warn!(peer = %peer_name, %error, "peer watch failing; its services stay imported within the grace period");
        }
        for (kind, count) in conn.data.take_refused() {
            if count == 0 {
                continue;
            }
            effects.push(Effect::OverLimit {
                peer: peer_name.clone(),
                count,
            });
            // Once per connection and kind, not per object.
            if conn.over_limit.insert(kind) {
                tracing::warn!(
                    peer = %peer_name, kind, ?limits,
                    "peer exceeds the limits of what is read from one peer: objects beyond them are not imported (--peer-max-exports, --peer-max-services, --peer-max-slices, --peer-max-endpoints)"
                );
            }
        }
        let touched = conn.data.take_touched();
        let is_current = peer
            .current
            .as_ref()
            .is_some_and(|c| c.generation == generation);
        if is_current {
            if !touched.is_empty() {
                effects.push(Effect::Touched(touched));
            }
        } else {
            self.replace_if_settled(secret, effects);
        }
        if let Some(code) = rejected {
            self.credential_rejected(secret, generation, code, now, effects);
        }
    }

    /// Swaps the peer's replacement connection in once it is settled
    /// (synced, and probed once: whether it is up is known), without a
    /// gap. Only the services whose data differ between the two are
    /// replanned: a relist that found what the old connection held (a
    /// reconnect to relist, a peer flipping its publication form back and
    /// forth) replans nothing.
    fn replace_if_settled(&mut self, secret: &str, effects: &mut Vec<Effect>) {
        let Some(peer) = self.peers.get_mut(secret) else {
            return;
        };
        if !peer.next.as_ref().is_some_and(PeerConn::settled) {
            return;
        }
        let Some(next) = peer.next.take() else {
            return;
        };
        let generation = next.generation;
        let old = peer.current.replace(next);
        // What froze the old connection does not concern this one.
        peer.identity_changed = false;
        let Some(old) = old else {
            effects.push(Effect::ReplanAll);
            return;
        };
        let touched = peer
            .current
            .as_ref()
            .map(|new| differing_services(&old.data, &new.data))
            .unwrap_or_default();
        tracing::info!(peer = %peer.name(), changed = touched.services.len(), "peer connection replaced");
        if !touched.is_empty() {
            effects.push(Effect::Touched(touched));
        }
        // The connection is part of the usability the last input left:
        // noted as the new one, so the swap alone does not replan
        // everything (a change of whether the peer counts still does).
        if let Some(usability) = self.usability.get_mut(secret)
            && usability.2 == Some(old.generation)
        {
            usability.2 = Some(generation);
        }
    }

    fn probed(
        &mut self,
        secret: &str,
        generation: u64,
        result: Result<(), String>,
        now: Now,
        effects: &mut Vec<Effect>,
    ) {
        let Some(peer) = self.peers.get_mut(secret) else {
            return;
        };
        let peer_name = peer.name();
        let current = peer.current.as_ref().map(|c| c.generation) == Some(generation);
        let replacing = peer.next.is_some();
        // A refused Secret's kubeconfig is not tried again by a relist:
        // its current connection goes on until it fails, then grace.
        let refused = peer.refused.is_some();
        // A hub member's data comes over the one hub connection, relisted
        // by that connection itself.
        let hub = peer.hub;
        let Some(conn) = peer.conn_mut(generation) else {
            return;
        };
        let mut reconnect = false;
        let mut rejected = None;
        match &result {
            Err(error) => {
                effects.push(Effect::SyncError {
                    peer: peer_name.clone(),
                    kind: "probe",
                });
                rejected = rejection_in_text(error);
                if conn.probe.is_ok() && rejected.is_none() {
                    tracing::warn!(peer = %peer_name, %error, "peer probe failing");
                }
            }
            Ok(()) => {
                // The peer answers, but a watch that failed and then
                // resumed delivers nothing until an object changes: on a
                // quiet peer it would stay failing, the peer unhealthy,
                // and its services dropped after grace. Connect again
                // beside it, relisting (spaced 1 s doubling to 60 s, for a
                // watch that keeps failing).
                reconnect =
                    current && !replacing && !refused && !hub && conn.synced() && conn.failing();
                if conn.probe.is_err() && conn.synced() {
                    tracing::info!(peer = %peer_name, "peer answers again");
                }
            }
        }
        conn.probe = result;
        conn.probed = true;
        if reconnect && reconnect_due(&mut peer.reconnects, now) {
            tracing::info!(peer = %peer_name, "peer answers but a watch is failing; reconnecting to relist");
            let kubeconfig = peer.kubeconfig.clone();
            self.connect(secret.to_owned(), kubeconfig, effects);
        }
        if !current {
            self.replace_if_settled(secret, effects);
        }
        if let Some(code) = rejected {
            self.credential_rejected(secret, generation, code, now, effects);
        }
    }

    /// Carries out the changes of publication form that waited for a
    /// reconnect to be due ([`Self::reconnect`]).
    fn pending_reconnects(&mut self, now: Now, effects: &mut Vec<Effect>) {
        let mut pending = Vec::new();
        for peer in self.peers.values_mut() {
            let Some(generation) = peer.form_changed else {
                continue;
            };
            if peer.current.as_ref().map(|c| c.generation) != Some(generation) {
                // Replaced since: the new connection read the form afresh.
                peer.form_changed = None;
            } else if peer.next.is_none()
                && peer.refused.is_none()
                && peer.reconnects.due(tokio::time::Instant::from_std(now.at))
            {
                pending.push((peer.secret.clone(), generation));
            }
        }
        for (secret, generation) in pending {
            self.reconnect(&secret, generation, now, effects);
        }
    }

    fn tick(&mut self, now: Now, effects: &mut Vec<Effect>) {
        self.pending_reconnects(now, effects);
        self.credential_checks(now, effects);
        let removed: Vec<String> = self
            .peers
            .values()
            .filter(|p| p.removing_at.is_some_and(|at| at <= now.at))
            .map(|p| p.secret.clone())
            .collect();
        for secret in removed {
            let id = self
                .peers
                .remove(&secret)
                .and_then(|p| p.id().map(str::to_owned));
            tracing::info!(secret, peer = ?id, "peer Secret deleted: its services are no longer imported");
            if let Some(id) = id {
                effects.push(Effect::Forget { id });
            }
            effects.push(Effect::ReplanAll);
            // A peer refused as a duplicate of this one may be valid now.
            let refused: Vec<(String, Vec<u8>)> = self
                .peers
                .values()
                .filter(|p| p.refused.is_some() && !p.kubeconfig.is_empty())
                .map(|p| (p.secret.clone(), p.kubeconfig.clone()))
                .collect();
            for (name, kubeconfig) in refused {
                self.connect(name, kubeconfig, effects);
            }
        }
        let grace = self.settings.grace;
        let renew_every = (grace / 4).clamp(Duration::from_secs(5), Duration::from_secs(60));
        for peer in self.peers.values_mut() {
            let Some(id) = peer.id().map(str::to_owned) else {
                continue;
            };
            let up = peer.up();
            if up {
                peer.last_seen = Some(now.wall);
                if peer
                    .lease_renewed
                    .is_none_or(|at| now.at.duration_since(at) >= renew_every)
                {
                    peer.lease_renewed = Some(now.at);
                    effects.push(Effect::RenewLease {
                        id: id.clone(),
                        secret: peer.secret.clone(),
                        seen: now.wall,
                    });
                }
            }
            effects.push(Effect::Gauges {
                id,
                up,
                last_seen: peer.last_seen,
            });
        }
    }

    /// Replans everything when a peer starts or stops counting (synced and
    /// probed, lost beyond grace, its connection replaced by one that does
    /// not count), or leaves its grace period without having been read
    /// since start-up (services naming it were left alone until then):
    /// whichever input caused it. A replacement alone replans only what
    /// changed ([`Self::replace_if_settled`]).
    fn notice_usability(&mut self, now: Now, effects: &mut Vec<Effect>) {
        let grace = self.settings.grace;
        let usability: BTreeMap<String, Usability> = self
            .peers
            .values()
            .map(|p| (p.secret.clone(), p.usability(grace, now.wall)))
            .collect();
        if usability == self.usability {
            return;
        }
        for peer in self.peers.values() {
            let was_usable = self.usability.get(&peer.secret).is_some_and(|u| u.0);
            if was_usable && !usability.get(&peer.secret).is_some_and(|u| u.0) {
                tracing::warn!(
                    peer = %peer.name(),
                    problem = ?peer.current.as_ref().and_then(PeerConn::problem),
                    credential = ?peer.credential_reported,
                    "peer no longer counts (unreachable beyond the grace period, or replaced): its services are no longer imported from it"
                );
            }
        }
        self.usability = usability;
        if effects.last() != Some(&Effect::ReplanAll) {
            effects.push(Effect::ReplanAll);
        }
    }
}

/// The services whose objects differ between two connections' data of
/// one peer, compared as a plan reads them (expanded, service by
/// service; objects that belong to no service are read by no plan).
/// Costs an expansion of every object of both: done once per swap.
fn differing_services(old: &ClusterData, new: &ClusterData) -> Touched {
    fn kind<K: kube::Resource + Compact + PartialEq>(
        old: &Objects<K>,
        new: &Objects<K>,
        into: &mut BTreeSet<ServiceRef>,
    ) {
        let services: BTreeSet<&ServiceRef> = old.services().chain(new.services()).collect();
        for service in services {
            if !into.contains(service) && !old.of(service).eq(new.of(service)) {
                into.insert(service.clone());
            }
        }
    }
    let mut touched = Touched::default();
    kind(&old.exports, &new.exports, &mut touched.services);
    kind(&old.services, &new.services, &mut touched.services);
    kind(&old.mcs_slices, &new.mcs_slices, &mut touched.services);
    touched
}

/// Whether a reconnect may happen now; if so, records it.
fn reconnect_due(reconnects: &mut RestartSchedule, now: Now) -> bool {
    let now = tokio::time::Instant::from_std(now.at);
    let due = reconnects.due(now);
    if due {
        reconnects.record(now);
    }
    due
}

#[cfg(test)]
mod tests;
