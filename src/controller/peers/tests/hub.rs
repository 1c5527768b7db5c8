//! The members of a hub as peers: read once listed and alive by their
//! Lease, frozen while the hub does not answer, dropped after grace when
//! their Lease expires on a hub that does, read once when the mesh reads
//! them too, and remembered across a restart until the hub is listed.

use super::*;

/// Hub connection `generation` lists member `id` (exporting `exports`)
/// and reports its Lease alive.
fn hub_member(run: &mut Run, id: &str, generation: u64, exports: &[&str]) {
    run.input(Input::HubMember {
        id: id.into(),
        generation,
    });
    run.watch(&hub_peer(id), generation, listed(exports));
    run.input(Input::HubListed { generation });
    run.probe(&hub_peer(id), generation, Ok(()));
    run.wait(Duration::from_secs(1));
}

#[test]
fn a_hub_member_counts_once_listed_and_alive_under_its_namespaces_id() {
    let mut run = Run::new();
    run.input(Input::HubMember {
        id: "b".into(),
        generation: 1,
    });
    assert_eq!(run.usable("b"), None, "not listed yet");
    hub_member(&mut run, "b", 1, &["web"]);
    assert_eq!(run.usable("b"), Some(true));
    assert_eq!(run.exported(), ["web"]);
    assert!(run.peers.synced());
    // This cluster's own namespace on the hub is no member.
    run.input(Input::HubMember {
        id: "local".into(),
        generation: 1,
    });
    assert_eq!(run.peers.len(), 1);
}

#[test]
fn a_hub_that_does_not_answer_freezes_its_members_however_long() {
    let mut run = Run::new();
    hub_member(&mut run, "b", 1, &["web"]);
    run.input(Input::HubReachable(false));
    run.probe(&hub_peer("b"), 1, Err("the hub does not answer"));
    for _ in 0..6 {
        run.wait(GRACE);
        assert_eq!(run.usable("b"), Some(true), "frozen, not aged");
    }
    assert_eq!(run.exported(), ["web"]);
    // Back: kept before its Lease is read again (the outage spent no
    // grace), and as before once it is.
    run.input(Input::HubReachable(true));
    assert_eq!(
        run.usable("b"),
        Some(true),
        "not dropped as the hub answers"
    );
    run.wait(GRACE / 2);
    assert_eq!(
        run.usable("b"),
        Some(true),
        "a grace period from its return"
    );
    run.probe(&hub_peer("b"), 1, Ok(()));
    run.wait(GRACE * 2);
    assert_eq!(run.usable("b"), Some(true));
}

#[test]
fn a_member_whose_lease_expired_on_a_reachable_hub_is_dropped_after_grace() {
    let mut run = Run::new();
    hub_member(&mut run, "b", 1, &["web"]);
    run.probe(
        &hub_peer("b"),
        1,
        Err("its Lease on the hub has not been renewed"),
    );
    run.wait(GRACE / 2);
    assert_eq!(run.usable("b"), Some(true), "within grace");
    run.wait(GRACE);
    assert_eq!(run.usable("b"), Some(false), "dropped after grace");
    // Renewed again: back.
    run.probe(&hub_peer("b"), 1, Ok(()));
    run.wait(Duration::from_secs(1));
    assert_eq!(run.usable("b"), Some(true));
}

#[test]
fn a_cluster_read_through_the_mesh_and_the_hub_is_read_once_with_no_gap() {
    let mut run = Run::new();
    run.input(Input::SecretsListing);
    run.healthy_peer("peer-b", "b", &["web"]);
    run.input(Input::SecretsListed);
    hub_member(&mut run, "b", 1, &["web"]);
    let refused = run
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Refused { .. }));
    assert!(!refused, "not a duplicate: {:?}", run.effects);
    let (views, _) = run.peers.views(run.now);
    assert_eq!(views.iter().filter(|v| v.id == "b").count(), 1);
    // The mesh Secret goes (the last step of a move to the hub): the hub's
    // view takes over, counting at every step.
    run.input(Input::SecretDeleted("peer-b".into()));
    for _ in 0..5 {
        run.wait(Duration::from_secs(1));
        let (views, unknown) = run.peers.views(run.now);
        let b: Vec<_> = views.iter().filter(|v| v.id == "b").collect();
        assert_eq!(b.len(), 1);
        assert!(b[0].usable && !unknown.contains("b"));
    }
    assert_eq!(run.peers.len(), 1, "the mesh peer is gone");
}

#[test]
fn members_of_an_earlier_run_are_left_alone_until_the_hub_is_listed() {
    let now = Now::current();
    let leases = BTreeMap::from([
        (hub_peer("b"), ("b".to_owned(), now.wall)),
        (hub_peer("c"), ("c".to_owned(), now.wall)),
    ]);
    let mut run = Run::new();
    run.peers = Peers::new(run.peers.settings.clone(), leases);
    run.now = now;
    let (views, unknown) = run.peers.views(run.now);
    assert!(views.is_empty());
    assert_eq!(unknown, BTreeSet::from(["b".to_owned(), "c".to_owned()]));
    assert!(!run.peers.synced(), "the start-up gate waits for the hub");
    // The hub lists b, not c: c has left it while this cluster was down.
    hub_member(&mut run, "b", 1, &["web"]);
    run.wait(SECRET_DELETE_DEBOUNCE);
    assert_eq!(run.usable("b"), Some(true));
    assert_eq!(run.peers.len(), 1);
    assert!(run.peers.synced());
}

#[test]
fn without_a_hub_secret_every_member_goes() {
    let mut run = Run::new();
    hub_member(&mut run, "b", 1, &["web"]);
    run.input(Input::HubGone);
    run.wait(SECRET_DELETE_DEBOUNCE);
    assert_eq!(run.usable("b"), None);
    assert!(run.exported().is_empty());
}

#[test]
fn a_relist_of_the_peer_secrets_leaves_the_hub_members_alone() {
    let mut run = Run::new();
    hub_member(&mut run, "b", 1, &["web"]);
    // The peer Secret watch lists again (its watch restarted) and finds
    // no peer Secret: a hub member is no peer Secret's, so it stays.
    run.input(Input::SecretsListing);
    run.input(Input::SecretsListed);
    run.wait(SECRET_DELETE_DEBOUNCE * 2);
    assert_eq!(run.usable("b"), Some(true));
    assert_eq!(run.exported(), ["web"]);
}

/// A member's endpoints count only inside the ranges its record on the
/// hub gives: none before the record is read (fail closed), the record's
/// ranges once it is, and a change replans.
#[test]
fn a_members_endpoints_count_only_inside_the_ranges_its_hub_record_gives() {
    let mut run = Run::new();
    hub_member(&mut run, "b", 1, &["web"]);
    let ranges = |run: &Run| {
        let (views, _) = run.peers.views(run.now);
        views[0].endpoint_ranges.map(<[Cidr]>::to_vec)
    };
    assert_eq!(ranges(&run), Some(Vec::new()), "no record read: none");
    let recorded: Vec<Cidr> = vec!["10.1.0.0/16".parse().unwrap()];
    let effects = run.input(Input::HubMemberRanges {
        id: "b".into(),
        ranges: Some(recorded.clone()),
    });
    assert!(effects.contains(&Effect::ReplanAll), "{effects:?}");
    assert_eq!(ranges(&run), Some(recorded.clone()));
    // The same record again changes nothing.
    let effects = run.input(Input::HubMemberRanges {
        id: "b".into(),
        ranges: Some(recorded),
    });
    assert!(!effects.contains(&Effect::ReplanAll), "{effects:?}");
    // `hub join --allow-any-endpoint`: any endpoint the other rules allow.
    run.input(Input::HubMemberRanges {
        id: "b".into(),
        ranges: None,
    });
    assert_eq!(ranges(&run), None);
    // A record for no member read yet is not a member.
    run.input(Input::HubMemberRanges {
        id: "z".into(),
        ranges: None,
    });
    assert_eq!(run.peers.len(), 1);
}
