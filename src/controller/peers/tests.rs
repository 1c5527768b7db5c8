//! [`Peers`] driven by synthetic sequences: the start-up gate, a peer
//! flapping inside its grace period, grace expiry, a Secret rotated beside
//! the old connection, refusal and reconsideration (a refused rotation
//! dropping only its new connection), a watch failing and resuming, and
//! Secrets deleted while the watch was down.

use kube::runtime::watcher::{self, Event};

use super::super::connection::ClusterEvent;
use super::super::lean::Lean;
use super::*;
use crate::api::ServiceExport;
use crate::cidr::Cidr;
use crate::peering::Identity;

const GRACE: Duration = Duration::from_secs(10);

fn peers() -> Peers {
    Peers::new(
        Settings {
            local_id: "local".into(),
            local_clusterset: "set".into(),
            grace: GRACE,
            limits: PeerLimits {
                exports: 10,
                services: 10,
                slices: 10,
                endpoints: 100,
            },
        },
        BTreeMap::new(),
    )
}

fn identity(id: &str) -> Contact {
    Contact::Identified(Identity {
        cluster_id: id.into(),
        clusterset: "set".into(),
    })
}

fn export(name: &str) -> Lean<ServiceExport> {
    let mut export = ServiceExport::new(name, Default::default());
    export.metadata.namespace = Some("demo".into());
    Lean::new(export)
}

/// The three watches of a connection listing, `exports` among its exports.
fn listed(exports: &[&str]) -> Vec<WatchEvent> {
    let mut events = vec![ClusterEvent::Exports(Ok(Event::Init)).into()];
    events.extend(
        exports
            .iter()
            .map(|name| ClusterEvent::Exports(Ok(Event::InitApply(export(name)))).into()),
    );
    events.extend([
        ClusterEvent::Exports(Ok(Event::InitDone)).into(),
        ClusterEvent::Services(Ok(Event::Init)).into(),
        ClusterEvent::Services(Ok(Event::InitDone)).into(),
        ClusterEvent::McsSlices(Ok(Event::Init)).into(),
        ClusterEvent::McsSlices(Ok(Event::InitDone)).into(),
    ]);
    events
}

/// Drives `peers` and remembers every effect.
struct Run {
    peers: Peers,
    now: Now,
    effects: Vec<Effect>,
}

impl Run {
    fn new() -> Self {
        Self {
            peers: peers(),
            now: Now::current(),
            effects: Vec::new(),
        }
    }

    fn input(&mut self, input: Input) -> Vec<Effect> {
        let effects = self.peers.handle(input, self.now);
        self.effects.extend(effects.clone());
        effects
    }

    fn wait(&mut self, duration: Duration) -> Vec<Effect> {
        self.now = self.now.after(duration);
        self.input(Input::Tick)
    }

    fn apply_secret(&mut self, name: &str, kubeconfig: &str) -> Vec<Effect> {
        self.input(Input::SecretApplied {
            name: name.into(),
            secret: PeerSecret {
                kubeconfig: kubeconfig.into(),
                ..PeerSecret::default()
            },
            listed: false,
        })
    }

    fn identify(&mut self, secret: &str, generation: u64, contact: Contact) -> Vec<Effect> {
        self.input(Input::Identity {
            secret: secret.into(),
            generation,
            contact,
        })
    }

    fn watch(&mut self, secret: &str, generation: u64, events: Vec<WatchEvent>) -> Vec<Effect> {
        let mut effects = Vec::new();
        for event in events {
            effects.extend(self.input(Input::Watch {
                secret: secret.into(),
                generation,
                event,
            }));
        }
        effects
    }

    fn probe(&mut self, secret: &str, generation: u64, result: Result<(), &str>) -> Vec<Effect> {
        self.input(Input::Probe {
            secret: secret.into(),
            generation,
            result: result.map_err(str::to_owned),
        })
    }

    /// Secret `secret` listed, naming cluster `id`, synced and probed:
    /// returns its connection's generation.
    fn healthy_peer(&mut self, secret: &str, id: &str, exports: &[&str]) -> u64 {
        let generation = self.connect(secret, "kubeconfig-1");
        self.identify(secret, generation, identity(id));
        self.watch(secret, generation, listed(exports));
        self.probe(secret, generation, Ok(()));
        self.wait(Duration::from_secs(1));
        generation
    }

    /// Applies the Secret; returns the generation of the Connect it asks for.
    fn connect(&mut self, secret: &str, kubeconfig: &str) -> u64 {
        let effects = self.apply_secret(secret, kubeconfig);
        connected(&effects).unwrap_or_else(|| panic!("no Connect in {effects:?}"))
    }

    fn usable(&self, id: &str) -> Option<bool> {
        let (views, _) = self.peers.views(self.now);
        views.iter().find(|v| v.id == id).map(|v| v.usable)
    }

    fn exported(&self) -> Vec<String> {
        self.peers
            .exported_services()
            .map(|s| s.name.to_string())
            .collect()
    }
}

fn connected(effects: &[Effect]) -> Option<u64> {
    effects.iter().find_map(|e| match e {
        Effect::Connect { generation, .. } => Some(*generation),
        _ => None,
    })
}

fn replans(effects: &[Effect]) -> bool {
    effects.contains(&Effect::ReplanAll)
}

#[test]
fn nothing_starts_before_the_peer_secrets_are_listed() {
    // No Secret seen yet looks like "every peer synced": it is not (the
    // gate itself: schedule.rs).
    let mut run = Run::new();
    run.input(Input::SecretsListing);
    let generation = run.connect("peer-b", "kubeconfig-1");
    assert!(!run.peers.listed());
    run.input(Input::SecretsListed);
    assert!(run.peers.listed());
    assert!(!run.peers.synced(), "listed, but the peer has not synced");
    run.identify("peer-b", generation, identity("b"));
    run.watch("peer-b", generation, listed(&[]));
    assert!(
        !run.peers.synced(),
        "listed, but whether it is up is not known before its first probe"
    );
    let (views, unknown) = run.peers.views(run.now);
    assert!(
        views.is_empty() && unknown.contains("b"),
        "what names it is left alone"
    );
    run.probe("peer-b", generation, Err("refused"));
    assert!(run.peers.synced(), "a failed probe answers that too");
}

#[test]
fn a_peer_flapping_inside_its_grace_period_keeps_counting_without_a_replan() {
    let mut run = Run::new();
    let generation = run.healthy_peer("peer-b", "b", &["web"]);
    assert_eq!(run.usable("b"), Some(true));
    assert!(
        run.effects
            .iter()
            .any(|e| matches!(e, Effect::RenewLease { id, .. } if id == "b")),
        "a healthy peer's Lease is renewed: {:?}",
        run.effects
    );
    for _ in 0..3 {
        let down = run.probe("peer-b", generation, Err("timeout"));
        assert!(down.contains(&Effect::SyncError {
            peer: "b".into(),
            kind: "probe"
        }));
        let ticks = [
            run.wait(Duration::from_secs(2)),
            run.wait(Duration::from_secs(2)),
        ];
        let up = run.probe("peer-b", generation, Ok(()));
        assert!(!replans(&down) && !ticks.iter().any(|t| replans(t)) && !replans(&up));
        assert_eq!(run.usable("b"), Some(true));
        run.wait(Duration::from_secs(1));
    }
    assert!(run.peers.not_ready(run.now).is_empty());
}

#[test]
fn a_peer_down_beyond_its_grace_period_stops_counting_and_everything_is_replanned() {
    let mut run = Run::new();
    let generation = run.healthy_peer("peer-b", "b", &["web"]);
    run.probe("peer-b", generation, Err("timeout"));
    let within = run.wait(GRACE - Duration::from_secs(2));
    assert!(!replans(&within));
    assert_eq!(run.usable("b"), Some(true));
    let beyond = run.wait(Duration::from_secs(3));
    assert!(replans(&beyond), "{beyond:?}");
    assert_eq!(run.usable("b"), Some(false));
    assert!(beyond.contains(&Effect::Gauges {
        id: "b".into(),
        up: false,
        last_seen: run.peers.peers["peer-b"].last_seen,
    }));
    assert_eq!(run.peers.not_ready(run.now), vec!["b".to_owned()]);
}

#[test]
fn a_rotated_secret_connects_beside_the_old_connection_which_counts_until_the_new_one_synced() {
    let mut run = Run::new();
    let old = run.healthy_peer("peer-b", "b", &["web"]);
    let new = run.connect("peer-b", "kubeconfig-2");
    assert!(new > old);
    assert!(run.peers.is_live("peer-b", old) && run.peers.is_live("peer-b", new));
    // The same Secret again changes nothing.
    assert_eq!(connected(&run.apply_secret("peer-b", "kubeconfig-2")), None);

    let accepted = run.identify("peer-b", new, identity("b"));
    assert!(accepted.contains(&Effect::StartWatches {
        secret: "peer-b".into(),
        generation: new,
        id: "b".into()
    }));
    // The new connection's partial list does not replace the old data.
    let mut events = listed(&["api"]);
    let rest_of_list = events.split_off(4);
    let partial = run.watch("peer-b", new, events);
    assert!(!replans(&partial));
    assert_eq!(run.exported(), ["web"]);
    assert_eq!(run.usable("b"), Some(true));

    let rest = run.watch("peer-b", new, rest_of_list);
    assert!(replans(&rest), "{rest:?}");
    assert_eq!(run.exported(), ["api"]);
    assert!(
        !run.peers.is_live("peer-b", old),
        "the old connection is dropped"
    );
    // Late events of the old connection are ignored.
    let late = run.watch(
        "peer-b",
        old,
        vec![ClusterEvent::Exports(Ok(Event::Apply(export("stale")))).into()],
    );
    assert!(late.is_empty(), "{late:?}");
    assert_eq!(run.exported(), ["api"]);
}

#[test]
fn a_refused_duplicate_is_reconsidered_once_the_secret_it_duplicates_is_deleted() {
    let mut run = Run::new();
    run.healthy_peer("peer-b", "b", &["web"]);
    let twin = run.connect("peer-b-again", "kubeconfig-twin");
    let refused = run.identify("peer-b-again", twin, identity("b"));
    assert!(
        refused
            .iter()
            .any(|e| matches!(e, Effect::Refused { secret, reason: "DuplicateClusterId", .. } if secret == "peer-b-again")),
        "{refused:?}"
    );
    assert!(!run.peers.is_live("peer-b-again", twin));
    assert!(
        run.peers.not_ready(run.now).is_empty(),
        "a refused peer does not hold /ready"
    );

    run.input(Input::SecretDeleted("peer-b".into()));
    // A replace is a delete and a create: nothing happens within the debounce.
    let debounced = run.wait(SECRET_DELETE_DEBOUNCE - Duration::from_secs(1));
    assert!(!debounced.iter().any(|e| matches!(e, Effect::Forget { .. })));
    let removed = run.wait(Duration::from_secs(1));
    assert!(
        removed.contains(&Effect::Forget { id: "b".into() }),
        "{removed:?}"
    );
    let again = connected(&removed).expect("the refused Secret is connected again");
    run.identify("peer-b-again", again, identity("b"));
    run.watch("peer-b-again", again, listed(&["web"]));
    assert_eq!(run.usable("b"), None, "not probed yet, never seen");
    assert!(
        run.peers.views(run.now).1.contains("b"),
        "left alone meanwhile"
    );
    run.probe("peer-b-again", again, Ok(()));
    assert_eq!(run.usable("b"), Some(true));
}

#[test]
fn a_secret_that_is_not_a_kubeconfig_or_names_this_cluster_is_refused_with_a_reason() {
    let mut run = Run::new();
    let broken = run.connect("peer-x", "not yaml");
    let invalid = run.identify(
        "peer-x",
        broken,
        Contact::Invalid("data.kubeconfig: bad".into()),
    );
    assert!(invalid.iter().any(|e| matches!(
        e,
        Effect::Refused { reason: "InvalidKubeconfig", message, .. } if message.contains("peer-x") && message.contains("bad")
    )));
    // What the shell reports for a kubeconfig with a credential plugin:
    // the Event's note is `<reason>: <message>`, naming the field.
    let plugin = "current-context: c\nusers:\n- name: u\n  user: {exec: {command: /bin/sh}}\n";
    let error = crate::peering::kubeconfig::read(plugin.as_bytes()).unwrap_err();
    let exec = run.connect("peer-exec", plugin);
    let refused = run.identify("peer-exec", exec, Contact::Invalid(error.to_string()));
    assert!(
        refused.contains(&Effect::Refused {
            secret: "peer-exec".into(),
            reason: "InvalidKubeconfig",
            message: "Secret peer-exec: data.kubeconfig: users[0].user.exec: credential plugins are not allowed in a peer kubeconfig".into(),
        }),
        "{refused:?}"
    );
    let me = run.connect("peer-self", "kubeconfig-self");
    let itself = run.identify("peer-self", me, identity("local"));
    assert!(itself.iter().any(|e| matches!(
        e,
        Effect::Refused {
            reason: "SelfReference",
            ..
        }
    )));
    // A fixed Secret is accepted.
    let fixed = run.connect("peer-x", "kubeconfig-fixed");
    let accepted = run.identify("peer-x", fixed, identity("x"));
    assert!(
        accepted
            .iter()
            .any(|e| matches!(e, Effect::StartWatches { .. }))
    );
}

#[test]
fn a_failing_watch_on_a_peer_that_answers_reconnects_to_relist_and_resumes() {
    let mut run = Run::new();
    let generation = run.healthy_peer("peer-b", "b", &["web"]);
    let failed = run.watch(
        "peer-b",
        generation,
        vec![ClusterEvent::Services(Err(watcher::Error::NoResourceVersion)).into()],
    );
    assert!(failed.contains(&Effect::SyncError {
        peer: "b".into(),
        kind: "watch"
    }));
    let tick = run.wait(Duration::from_secs(1));
    assert!(
        tick.contains(&Effect::Gauges {
            id: "b".into(),
            up: false,
            last_seen: run.peers.peers["peer-b"].last_seen,
        }),
        "a failing watch makes the peer down: {tick:?}"
    );
    // It answers its probe, but the failed watch may never deliver again.
    let relist = connected(&run.probe("peer-b", generation, Ok(())))
        .expect("a peer that answers with a failing watch is reconnected");
    assert!(
        run.peers.is_live("peer-b", generation),
        "the old connection counts meanwhile"
    );
    // A second probe right after does not reconnect again (spaced).
    assert_eq!(connected(&run.probe("peer-b", generation, Ok(()))), None);
    run.identify("peer-b", relist, identity("b"));
    run.watch("peer-b", relist, listed(&["web", "api"]));
    run.probe("peer-b", relist, Ok(()));
    let healthy = run.wait(Duration::from_secs(1));
    assert!(
        healthy
            .iter()
            .any(|e| matches!(e, Effect::Gauges { up: true, .. })),
        "{healthy:?}"
    );
    assert_eq!(run.exported(), ["api", "web"]);
}

#[test]
fn a_secret_deleted_while_the_watch_was_down_is_dropped_by_the_next_list() {
    let mut run = Run::new();
    run.healthy_peer("peer-b", "b", &["web"]);
    run.healthy_peer("peer-c", "c", &["db"]);
    run.input(Input::SecretsListing);
    run.input(Input::SecretApplied {
        name: "peer-c".into(),
        secret: PeerSecret {
            kubeconfig: b"kubeconfig-1".to_vec(),
            ..PeerSecret::default()
        },
        listed: true,
    });
    run.input(Input::SecretsListed);
    let removed = run.wait(SECRET_DELETE_DEBOUNCE);
    assert!(
        removed.contains(&Effect::Forget { id: "b".into() }),
        "{removed:?}"
    );
    assert!(!removed.contains(&Effect::Forget { id: "c".into() }));
    assert_eq!(run.exported(), ["db"]);
}

#[test]
fn a_peer_from_an_earlier_run_is_left_alone_within_the_grace_its_lease_recorded() {
    let now = Now::current();
    let mut leases = BTreeMap::new();
    leases.insert(
        "peer-b".to_owned(),
        ("b".to_owned(), now.wall - Duration::from_secs(2)),
    );
    let mut peers = Peers::new(peers().settings, leases);
    let effects = peers.handle(
        Input::SecretApplied {
            name: "peer-b".into(),
            secret: PeerSecret {
                kubeconfig: b"kubeconfig-1".to_vec(),
                ..PeerSecret::default()
            },
            listed: false,
        },
        now,
    );
    assert_eq!(connected(&effects), Some(1));
    let (views, unknown) = peers.views(now);
    assert!(views.is_empty(), "never read: nothing of it counts");
    assert_eq!(
        unknown,
        BTreeSet::from(["b".to_owned()]),
        "but its services are left alone"
    );
    assert!(
        peers.not_ready(now).is_empty(),
        "and /ready does not wait for it"
    );
    // Once its Lease's grace has passed, it no longer holds anything.
    let later = now.after(GRACE);
    let replanned = peers.handle(Input::Tick, later);
    assert!(replanned.contains(&Effect::ReplanAll), "{replanned:?}");
    assert!(peers.views(later).1.is_empty());
    assert_eq!(peers.not_ready(later), vec!["peer-b".to_owned()]);
}

fn refused_with(effects: &[Effect]) -> Vec<&'static str> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Refused { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect()
}

/// Issue 31: a peer that answers with another id than the one it joined
/// as (found by the probe on a live connection) is refused
/// `IdentityChanged` and treated as unreachable: its data stays, frozen
/// and under its old id, for the grace period, then counts no more; its
/// connection's I/O stops, and its Lease is not renewed.
#[test]
fn a_peer_whose_id_changes_is_refused_kept_within_grace_frozen_then_dropped() {
    let mut run = Run::new();
    let generation = run.healthy_peer("peer-b", "b", &["web"]);
    let changed = run.identify("peer-b", generation, identity("b2"));
    assert_eq!(refused_with(&changed), [reason::IDENTITY_CHANGED]);
    assert!(
        !run.peers.is_live("peer-b", generation),
        "its watches and probe stop"
    );
    assert_eq!(run.usable("b"), Some(true), "within grace its data counts");
    assert_eq!(run.usable("b2"), None, "never under the new id");
    assert_eq!(run.exported(), ["web"]);
    // Its (stopped) watches and probe no longer make it healthy.
    run.probe("peer-b", generation, Ok(()));
    let ticked = run.wait(Duration::from_secs(2));
    assert!(
        !ticked
            .iter()
            .any(|e| matches!(e, Effect::RenewLease { .. })),
        "{ticked:?}"
    );
    run.wait(GRACE);
    assert_eq!(run.usable("b"), Some(false), "dropped after grace");
}

/// The id recorded on the Secret (`peer add`) is the peer's: a first
/// contact answering with another is refused before anything is watched;
/// one answering with it is accepted.
#[test]
fn the_id_on_the_secret_is_the_only_one_a_peer_may_answer_with() {
    let mut run = Run::new();
    let secret = |id: &str| Input::SecretApplied {
        name: "peer-b".into(),
        secret: PeerSecret {
            kubeconfig: b"kubeconfig-1".to_vec(),
            cluster_id: Some(id.into()),
            ..PeerSecret::default()
        },
        listed: false,
    };
    let generation = connected(&run.input(secret("b"))).unwrap();
    let refused = run.identify("peer-b", generation, identity("c"));
    assert_eq!(refused_with(&refused), [reason::IDENTITY_CHANGED]);
    assert!(
        !refused
            .iter()
            .any(|e| matches!(e, Effect::StartWatches { .. })),
        "{refused:?}"
    );
    assert!(run.peers.views(run.now).0.is_empty());
    // Re-added for the cluster it really is: accepted.
    let generation = connected(&run.input(secret("c"))).unwrap();
    let accepted = run.identify("peer-b", generation, identity("c"));
    assert!(
        accepted
            .iter()
            .any(|e| matches!(e, Effect::StartWatches { id, .. } if id == "c")),
        "{accepted:?}"
    );
}

/// A Secret without a recorded id is pinned to the first id accepted: new
/// credentials for another cluster under the same Secret are refused.
#[test]
fn a_secret_without_an_id_is_pinned_to_the_first_one_seen() {
    let mut run = Run::new();
    run.healthy_peer("peer-b", "b", &["web"]);
    let generation = run.connect("peer-b", "kubeconfig-2");
    let refused = run.identify("peer-b", generation, identity("c"));
    assert_eq!(refused_with(&refused), [reason::IDENTITY_CHANGED]);
    assert_eq!(
        run.usable("b"),
        Some(true),
        "the old connection's data, within grace"
    );
}

/// Endpoint ranges that do not parse refuse the peer, naming the
/// annotation; fixed, the peer connects again.
#[test]
fn unreadable_endpoint_ranges_refuse_the_peer_until_fixed() {
    let mut run = Run::new();
    let secret = |ranges: Result<Option<Vec<Cidr>>, String>| Input::SecretApplied {
        name: "peer-b".into(),
        secret: PeerSecret {
            kubeconfig: b"kubeconfig-1".to_vec(),
            endpoint_ranges: ranges,
            ..PeerSecret::default()
        },
        listed: false,
    };
    let refused = run.input(secret(Err("annotation x: nonsense".into())));
    assert_eq!(refused_with(&refused), [reason::INVALID_ENDPOINT_CIDRS]);
    assert_eq!(connected(&refused), None);
    let fixed = run.input(secret(Ok(Some(vec!["10.1.0.0/16".parse().unwrap()]))));
    let generation = connected(&fixed).expect("connects once fixed");
    run.identify("peer-b", generation, identity("b"));
    run.watch("peer-b", generation, listed(&[]));
    run.probe("peer-b", generation, Ok(()));
    let (views, _) = run.peers.views(run.now);
    assert_eq!(
        views[0].endpoint_ranges.map(<[Cidr]>::len),
        Some(1),
        "the ranges reach the plan"
    );
}

/// Security review M8: a rotated Secret that is refused (here not a
/// kubeconfig) costs only its new connection. The old one is still read
/// and probed, so the peer's imports stay as they were, past the grace
/// period while it is healthy; the refusal is still an Event, and the
/// refused kubeconfig is not tried again by a relist. Once the old
/// connection fails, the usual grace applies.
#[test]
fn a_rotated_secret_that_is_refused_drops_only_its_new_connection() {
    let mut run = Run::new();
    let old = run.healthy_peer("peer-b", "b", &["web"]);
    let new = run.connect("peer-b", "not yaml");
    let refused = run.identify(
        "peer-b",
        new,
        Contact::Invalid("data.kubeconfig is not a kubeconfig: it does not parse".into()),
    );
    assert_eq!(refused_with(&refused), [reason::INVALID_KUBECONFIG]);
    assert!(!run.peers.is_live("peer-b", new), "the new connection goes");
    assert!(
        run.peers.is_live("peer-b", old),
        "the old one is still read"
    );
    assert_eq!(run.usable("b"), Some(true));
    assert_eq!(run.exported(), ["web"]);
    // The same Secret again: no new attempt, no second Event.
    let again = run.apply_secret("peer-b", "not yaml");
    assert!(connected(&again).is_none() && refused_with(&again).is_empty());
    // Twice the grace period (2 s a round), the old connection probing.
    for _ in 0..GRACE.as_secs() {
        let probed = run.probe("peer-b", old, Ok(()));
        let ticked = run.wait(Duration::from_secs(2));
        assert!(!replans(&probed) && !replans(&ticked), "{ticked:?}");
        assert_eq!(run.usable("b"), Some(true));
    }
    let changed = run.watch(
        "peer-b",
        old,
        vec![ClusterEvent::Exports(Ok(Event::Apply(export("api")))).into()],
    );
    assert!(!changed.is_empty(), "its changes still reach the plan");
    assert_eq!(run.exported(), ["api", "web"]);
    // A failing watch is not relisted with the refused kubeconfig.
    run.watch(
        "peer-b",
        old,
        vec![ClusterEvent::Services(Err(watcher::Error::NoResourceVersion)).into()],
    );
    assert_eq!(connected(&run.probe("peer-b", old, Ok(()))), None);
    run.wait(GRACE - Duration::from_secs(1));
    assert_eq!(run.usable("b"), Some(true), "unhealthy, within grace");
    run.wait(Duration::from_secs(2));
    assert_eq!(run.usable("b"), Some(false), "unhealthy beyond grace");
    // A fixed Secret replaces the old connection.
    let fixed = run.connect("peer-b", "kubeconfig-3");
    run.identify("peer-b", fixed, identity("b"));
    run.watch("peer-b", fixed, listed(&["web"]));
    run.probe("peer-b", fixed, Ok(()));
    assert_eq!(run.usable("b"), Some(true));
    assert!(!run.peers.is_live("peer-b", old));
}

/// M8: a rotated Secret whose endpoint ranges do not parse is refused
/// before anything connects; the current connection goes on, with the
/// ranges it was accepted with.
#[test]
fn a_rotated_secret_with_unreadable_ranges_keeps_the_current_connection() {
    let mut run = Run::new();
    let old = run.healthy_peer("peer-b", "b", &["web"]);
    let refused = run.input(Input::SecretApplied {
        name: "peer-b".into(),
        secret: PeerSecret {
            kubeconfig: b"kubeconfig-1".to_vec(),
            endpoint_ranges: Err("annotation x: nonsense".into()),
            ..PeerSecret::default()
        },
        listed: false,
    });
    assert_eq!(refused_with(&refused), [reason::INVALID_ENDPOINT_CIDRS]);
    assert_eq!(connected(&refused), None);
    assert!(run.peers.is_live("peer-b", old));
    assert_eq!(run.usable("b"), Some(true));
    assert_eq!(run.exported(), ["web"]);
    run.probe("peer-b", old, Ok(()));
    run.wait(GRACE + Duration::from_secs(1));
    assert_eq!(run.usable("b"), Some(true));
}

/// M8: a synced connection refused itself (here its clusterset changed
/// on a re-read) is kept as for a changed id: frozen, its data counting
/// for the grace period, then dropped. A new connection refused beside it
/// does not thaw it.
#[test]
fn a_synced_connection_refused_itself_is_kept_frozen_for_the_grace_period() {
    let mut run = Run::new();
    let generation = run.healthy_peer("peer-b", "b", &["web"]);
    let elsewhere = || {
        Contact::Identified(Identity {
            cluster_id: "b".into(),
            clusterset: "other".into(),
        })
    };
    let refused = run.identify("peer-b", generation, elsewhere());
    assert_eq!(refused_with(&refused), [reason::OTHER_CLUSTER_SET]);
    assert!(!run.peers.is_live("peer-b", generation), "read no more");
    assert_eq!(run.usable("b"), Some(true), "within grace");
    assert_eq!(run.exported(), ["web"]);
    run.wait(Duration::from_secs(2));
    // New credentials for the same mismatch: refused beside it.
    let next = run.connect("peer-b", "kubeconfig-2");
    assert!(run.peers.is_live("peer-b", next));
    assert!(!run.peers.is_live("peer-b", generation), "still frozen");
    let again = run.identify("peer-b", next, elsewhere());
    assert_eq!(refused_with(&again), [reason::OTHER_CLUSTER_SET]);
    assert!(!run.peers.is_live("peer-b", generation));
    let ticked = run.wait(Duration::from_secs(2));
    assert!(
        !ticked
            .iter()
            .any(|e| matches!(e, Effect::RenewLease { .. })),
        "a frozen peer is not seen: {ticked:?}"
    );
    let beyond = run.wait(GRACE);
    assert!(replans(&beyond));
    assert_eq!(run.usable("b"), Some(false), "dropped after grace");
}

/// A refusal that arrives for a connection replaced since (a Secret
/// rotated twice) concerns nothing any more: no Event, nothing dropped.
#[test]
fn a_refusal_of_a_replaced_connection_is_ignored() {
    let mut run = Run::new();
    let old = run.healthy_peer("peer-b", "b", &["web"]);
    let first = run.connect("peer-b", "kubeconfig-2");
    let second = run.connect("peer-b", "kubeconfig-3");
    assert!(!run.peers.is_live("peer-b", first));
    let late = run.identify("peer-b", first, Contact::Invalid("bad".into()));
    assert!(late.is_empty(), "{late:?}");
    assert!(run.peers.is_live("peer-b", old) && run.peers.is_live("peer-b", second));
    run.identify("peer-b", second, identity("b"));
    run.watch("peer-b", second, listed(&["web"]));
    run.probe("peer-b", second, Ok(()));
    assert!(!run.peers.is_live("peer-b", old), "replaced");
    assert_eq!(run.usable("b"), Some(true));
}
