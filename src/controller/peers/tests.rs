//! [`Peers`] driven by synthetic sequences: the start-up gate, a peer
//! flapping inside its grace period, grace expiry, a Secret rotated beside
//! the old connection, refusal and reconsideration (a refused rotation
//! dropping only its new connection), a watch failing and resuming,
//! Secrets deleted while the watch was down, a peer toggling its
//! publication form (M3), and credentials rejected, expiring and expired
//! (L9).

use kube::runtime::watcher::{self, Event};

use super::super::connection::ClusterEvent;
use super::super::lean::Lean;
use super::credential::credential_reason;
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

/// The services `effects` mark touched, by name.
fn touched_services(effects: &[Effect]) -> Vec<String> {
    let mut names: Vec<String> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Touched(touched) => Some(touched.services.iter()),
            _ => None,
        })
        .flatten()
        .map(|s| s.name.to_string())
        .collect();
    names.sort();
    names.dedup();
    names
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
    // The new connection's partial list does not replace the old data
    // (nor does its probe, which starts with its watches).
    let mut events = listed(&["api"]);
    let rest_of_list = events.split_off(4);
    let partial = run.watch("peer-b", new, events);
    assert!(!replans(&partial));
    run.probe("peer-b", new, Ok(()));
    assert_eq!(run.exported(), ["web"]);
    assert_eq!(run.usable("b"), Some(true));

    // Synced and probed, it replaces the old one: the services whose data
    // differ are replanned.
    let rest = run.watch("peer-b", new, rest_of_list);
    assert!(touched_services(&rest) == ["api", "web"], "{rest:?}");
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

/// Completes connection `generation` as the shell would for a peer that
/// exports `exports`: identity, list, probe. Returns every effect.
fn complete(run: &mut Run, generation: u64, exports: &[&str]) -> Vec<Effect> {
    let mut effects = run.identify("peer-b", generation, identity("b"));
    effects.extend(run.watch("peer-b", generation, listed(exports)));
    effects.extend(run.probe("peer-b", generation, Ok(())));
    effects
}

/// Security review M3: a peer flips its publication marker between
/// present and absent every 2 s for 2 minutes. Each connection's probe
/// reports a change of form once (as `connection::probe` does); the
/// reconnects are spaced as a failing watch's (1 s doubling to 60 s), and
/// as each replacement indexes what the old connection held, nothing is
/// replanned: no import is written.
#[test]
fn a_peer_toggling_its_marker_is_reconnected_spaced_and_replans_nothing() {
    let mut run = Run::new();
    let first = run.healthy_peer("peer-b", "b", &["web", "api"]);
    // By connection: the form it read (whether the marker was there), and
    // whether its probe reported a change.
    let mut forms = BTreeMap::from([(first, (true, false))]);
    let mut reconnects = 0;
    let mut effects = Vec::new();
    for second in 1..=120u64 {
        let marker = (second / 2) % 2 == 0;
        let mut now = run.wait(Duration::from_secs(1));
        let live: Vec<u64> = forms
            .keys()
            .copied()
            .filter(|g| run.peers.is_live("peer-b", *g))
            .collect();
        for generation in live {
            now.extend(run.probe("peer-b", generation, Ok(())));
            let (form, reported) = forms.get_mut(&generation).expect("known");
            if *form != marker && !*reported {
                *reported = true;
                now.extend(run.input(Input::Reconnect {
                    secret: "peer-b".into(),
                    generation,
                }));
            }
        }
        if let Some(generation) = connected(&now) {
            reconnects += 1;
            forms.insert(generation, (marker, false));
            now.extend(complete(&mut run, generation, &["web", "api"]));
            assert!(
                run.peers.peers["peer-b"]
                    .current
                    .as_ref()
                    .is_some_and(|c| c.generation == generation),
                "the replacement took over"
            );
        }
        effects.extend(now);
    }
    // 1 s doubling: at 2, 4, 6, 10, 18, 34 and 66 s (unspaced: one every
    // 2 s). Still read again: the form it publishes is followed.
    assert!((3..=8).contains(&reconnects), "{reconnects} reconnects");
    assert!(!replans(&effects), "{effects:?}");
    assert!(touched_services(&effects).is_empty(), "{effects:?}");
    assert_eq!(run.usable("b"), Some(true));
    assert_eq!(run.exported(), ["api", "web"]);
}

/// M3: a change of form reported while a reconnect is not due waits until
/// it is, then connects (reading the marker afresh: the latest form wins);
/// one reported by a connection replaced since is dropped.
#[test]
fn a_form_change_before_a_reconnect_is_due_waits_for_it() {
    let mut run = Run::new();
    let first = run.healthy_peer("peer-b", "b", &["web"]);
    let reconnect = |generation| Input::Reconnect {
        secret: "peer-b".into(),
        generation,
    };
    let second = connected(&run.input(reconnect(first))).expect("the first one is due");
    complete(&mut run, second, &["web"]);
    assert!(!run.peers.is_live("peer-b", first));
    // Back again at once: not due (1 s after the last).
    let early = run.input(reconnect(second));
    assert_eq!(connected(&early), None, "{early:?}");
    // A late report of the replaced connection changes nothing.
    assert_eq!(connected(&run.input(reconnect(first))), None);
    let due = run.wait(Duration::from_secs(1));
    let third = connected(&due).expect("carried out once due");
    complete(&mut run, third, &["web"]);
    // Carried out once only.
    assert_eq!(connected(&run.wait(Duration::from_secs(5))), None);
    assert!(run.peers.is_live("peer-b", third) && !run.peers.is_live("peer-b", second));
}

/// M3: a replacement connection (here relisting a failing watch) that
/// indexed what the old one held replans nothing, neither everything nor
/// any service; one that found a change replans only the services that
/// changed.
#[test]
fn a_replacement_with_the_same_data_replans_nothing_and_a_changed_one_only_what_changed() {
    let mut run = Run::new();
    let failing = |run: &mut Run, generation| {
        run.watch(
            "peer-b",
            generation,
            vec![ClusterEvent::Services(Err(watcher::Error::NoResourceVersion)).into()],
        )
    };
    let old = run.healthy_peer("peer-b", "b", &["web", "api"]);
    failing(&mut run, old);
    run.wait(Duration::from_secs(1));
    let same = connected(&run.probe("peer-b", old, Ok(()))).expect("relists");
    let swapped = complete(&mut run, same, &["api", "web"]);
    assert!(!run.peers.is_live("peer-b", old), "replaced");
    assert!(!replans(&swapped), "{swapped:?}");
    assert!(touched_services(&swapped).is_empty(), "{swapped:?}");
    let healthy = run.wait(Duration::from_secs(1));
    assert!(!replans(&healthy), "{healthy:?}");
    assert_eq!(run.usable("b"), Some(true));

    // Once more (spaced: 2 s later), finding `api` gone and `db` new.
    failing(&mut run, same);
    run.wait(Duration::from_secs(2));
    let changed = connected(&run.probe("peer-b", same, Ok(()))).expect("relists");
    let swapped = complete(&mut run, changed, &["db", "web"]);
    assert!(!replans(&swapped), "{swapped:?}");
    assert_eq!(touched_services(&swapped), ["api", "db"]);
    assert_eq!(run.exported(), ["db", "web"]);
}

/// The text of a probe that the peer's apiserver answered with `code`,
/// as the shell makes it (`crate::watch::probe`, then `to_string`).
fn refused_probe(code: u16, reason: &str) -> String {
    let status = kube::core::Status::failure(reason, reason).with_code(code);
    let error = kube::Error::Api(status.boxed());
    crate::watch::ProbeError::Failed(crate::error::Chain(&error).to_string()).to_string()
}

fn refusals(effects: &[Effect]) -> Vec<(&'static str, &str)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Refused {
                reason, message, ..
            } => Some((*reason, message.as_str())),
            _ => None,
        })
        .collect()
}

/// The probe and the identity read reach the state machine as text: the
/// status code is read back from kube's own wording (this pins it), and
/// only from there, not from what the peer wrote.
#[test]
fn a_refusal_status_is_read_from_the_probe_text_as_kube_writes_it() {
    assert_eq!(
        rejection_in_text(&refused_probe(401, "Unauthorized")),
        Some(401)
    );
    assert_eq!(
        rejection_in_text(&refused_probe(403, "Forbidden")),
        Some(403)
    );
    let identity = format!(
        "reading ClusterProperty cluster.clusterset.k8s.io: {}",
        refused_probe(401, "Unauthorized")
    );
    assert_eq!(rejection_in_text(&identity), Some(401));
    assert_eq!(
        rejection_in_text(&refused_probe(500, "InternalError")),
        None
    );
    assert_eq!(rejection_in_text(&refused_probe(404, "code: 401, ")), None);
    let hung = crate::watch::ProbeError::NoAnswer(Duration::from_secs(3)).to_string();
    assert_eq!(rejection_in_text(&hung), None);
    assert_eq!(rejection_in_text("connection refused"), None);
}

/// Security review L9: a token the peer rejects (401: expired, revoked)
/// is reported `CredentialRejected` once per episode, saying to run `peer
/// add` again; the imports stay for the grace period as for any outage,
/// and the connection goes on probing. Once the credential works again the
/// episode is over: a later rejection is reported again.
#[test]
fn a_credential_the_peer_rejects_is_reported_once_and_imports_stay_for_the_grace_period() {
    let mut run = Run::new();
    let generation = run.healthy_peer("peer-b", "b", &["web"]);
    let unauthorized = refused_probe(401, "Unauthorized");
    let rejected = run.probe("peer-b", generation, Err(&unauthorized));
    let reported = refusals(&rejected);
    assert_eq!(reported.len(), 1, "{rejected:?}");
    let (reason, message) = reported[0];
    assert_eq!(reason, credential_reason::REJECTED);
    assert!(
        message.contains("peer-b") && message.contains("401") && message.contains("peer add"),
        "{message}"
    );
    // Not refused as a Secret is: still read, still within grace.
    assert!(run.peers.is_live("peer-b", generation));
    assert_eq!(run.usable("b"), Some(true));
    // The watches say it too: still one Event.
    let watched = run.watch(
        "peer-b",
        generation,
        vec![
            ClusterEvent::Exports(Err(crate::watch::testing::status_error(
                401,
                "Unauthorized",
            )))
            .into(),
        ],
    );
    let mut again = watched;
    for _ in 0..3 {
        again.extend(run.wait(Duration::from_secs(2)));
        again.extend(run.probe("peer-b", generation, Err(&unauthorized)));
    }
    assert!(refusals(&again).is_empty(), "{again:?}");
    assert_eq!(run.usable("b"), Some(true), "within grace");
    run.wait(GRACE);
    assert_eq!(
        run.usable("b"),
        Some(false),
        "dropped after grace, as today"
    );
    // The credential works again (the token was restored): episode over.
    run.watch("peer-b", generation, listed(&["web"]));
    run.probe("peer-b", generation, Ok(()));
    run.wait(Duration::from_secs(1));
    assert_eq!(run.usable("b"), Some(true));
    let forbidden = run.probe("peer-b", generation, Err(&refused_probe(403, "Forbidden")));
    let reported = refusals(&forbidden);
    assert_eq!(reported.len(), 1, "{forbidden:?}");
    assert_eq!(reported[0].0, credential_reason::REJECTED);
    assert!(reported[0].1.contains("403"), "{}", reported[0].1);
}

/// L9: a 401 on a first connection's identity read, and one on a watch,
/// are reported the same way; one on an old connection beside a rotated
/// Secret's new one is no news (its superseded token was revoked).
#[test]
fn a_rejected_credential_is_reported_from_the_identity_read_and_watches_but_not_for_an_old_one() {
    let mut run = Run::new();
    let generation = run.connect("peer-b", "kubeconfig-1");
    let unauthorized = refused_probe(401, "Unauthorized");
    let text = format!("reading ClusterProperty cluster.clusterset.k8s.io: {unauthorized}");
    let first = run.identify("peer-b", generation, Contact::Unreachable(text.clone()));
    assert_eq!(refusals(&first).len(), 1, "{first:?}");
    assert!(refusals(&run.identify("peer-b", generation, Contact::Unreachable(text))).is_empty());

    let mut run = Run::new();
    let old = run.healthy_peer("peer-b", "b", &["web"]);
    let new = run.connect("peer-b", "kubeconfig-2");
    run.identify("peer-b", new, identity("b"));
    let stale = run.probe("peer-b", old, Err(&unauthorized));
    assert!(refusals(&stale).is_empty(), "{stale:?}");
    // A 403 on a watch is the narrow reader role meeting a peer that has
    // not published yet (the previous release's form): no credential news.
    let forbidden = run.watch(
        "peer-b",
        new,
        vec![
            ClusterEvent::Services(Err(crate::watch::testing::status_error(403, "Forbidden")))
                .into(),
        ],
    );
    assert!(refusals(&forbidden).is_empty(), "{forbidden:?}");
    let watched = run.watch(
        "peer-b",
        new,
        vec![
            ClusterEvent::McsSlices(Err(crate::watch::testing::status_error(
                401,
                "Unauthorized",
            )))
            .into(),
        ],
    );
    assert_eq!(
        refusals(&watched).first().map(|r| r.0),
        Some(credential_reason::REJECTED),
        "{watched:?}"
    );
}

/// L9: the Secret records when its credential expires. Less than 24 h
/// ahead it is warned of once (`CredentialExpiring`, not a refusal); past
/// it, the peer refusing it is reported `CredentialExpired` (once) rather
/// than `CredentialRejected` or a mere outage, its imports kept for the
/// grace period. A new credential starts afresh.
#[test]
fn an_expiring_credential_is_warned_of_a_day_ahead_and_an_expired_one_reported_as_such() {
    let mut run = Run::new();
    let at = |wall: SystemTime| k8s_openapi::jiff::Timestamp::try_from(wall).unwrap();
    let secret = |kubeconfig: &str, expires| Input::SecretApplied {
        name: "peer-b".into(),
        secret: PeerSecret {
            kubeconfig: kubeconfig.into(),
            credential_expires: Some(expires),
            ..PeerSecret::default()
        },
        listed: false,
    };
    let hour = Duration::from_secs(3600);
    let expires = at(run.now.wall + 25 * hour);
    let generation = connected(&run.input(secret("kubeconfig-1", expires))).unwrap();
    complete(&mut run, generation, &["web"]);
    let warnings = |effects: &[Effect]| -> Vec<String> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Warning {
                    reason, message, ..
                } => {
                    assert_eq!(*reason, credential_reason::EXPIRING);
                    Some(message.clone())
                }
                _ => None,
            })
            .collect()
    };
    assert!(
        warnings(&run.wait(Duration::from_secs(1))).is_empty(),
        "25 h ahead"
    );
    let warned = warnings(&run.wait(2 * hour));
    assert_eq!(warned.len(), 1);
    assert!(
        warned[0].contains("peer-b") && warned[0].contains("peer add"),
        "{}",
        warned[0]
    );
    run.probe("peer-b", generation, Ok(()));
    let mut later = run.wait(hour);
    later.extend(run.wait(Duration::from_secs(1)));
    assert!(warnings(&later).is_empty(), "once: {later:?}");
    assert!(refusals(&later).is_empty(), "a warning, not a refusal");

    // Past it, while the peer still answers (clocks differ): nothing yet.
    run.wait(22 * hour);
    run.probe("peer-b", generation, Ok(()));
    assert!(refusals(&run.wait(Duration::from_secs(1))).is_empty());
    // It rejects the token: CredentialExpired, once.
    let rejected = run.probe(
        "peer-b",
        generation,
        Err(&refused_probe(401, "Unauthorized")),
    );
    let reported = refusals(&rejected);
    assert_eq!(reported.len(), 1, "{rejected:?}");
    assert_eq!(reported[0].0, credential_reason::EXPIRED);
    assert!(
        reported[0].1.contains("expired") && reported[0].1.contains("peer add"),
        "{}",
        reported[0].1
    );
    let ticked = run.wait(Duration::from_secs(1));
    assert!(refusals(&ticked).is_empty(), "{ticked:?}");
    assert_eq!(run.usable("b"), Some(true), "within grace");

    // A new credential, expired already, on a peer that does not answer at
    // all: reported expired by the tick, without any 401.
    let renewed = at(run.now.wall - hour);
    let next = connected(&run.input(secret("kubeconfig-2", renewed))).unwrap();
    run.identify("peer-b", next, Contact::Unreachable("timed out".into()));
    let ticked = run.wait(Duration::from_secs(1));
    assert_eq!(
        refusals(&ticked).first().map(|r| r.0),
        Some(credential_reason::EXPIRED),
        "{ticked:?}"
    );
    assert!(warnings(&ticked).is_empty(), "past it: no warning");
}

mod hub;
