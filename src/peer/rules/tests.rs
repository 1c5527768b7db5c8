//! The pure rules of `clusterset-dns peer`, without a server.

use super::*;
use crate::peering::kubeconfig::{self, CaSource};

const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

#[test]
fn the_ca_comes_from_the_flag_then_the_kubeconfig_then_the_token_secret() {
    let pem = |tag: &str| format!("{CA}{tag}").into_bytes();
    let (ca, origin) = choose_ca(Some(pem("flag")), Some(pem("kc")), Some(pem("tok"))).unwrap();
    assert_eq!((ca, origin), (pem("flag"), CaOrigin::Flag));
    let (_, origin) = choose_ca(None, Some(pem("kc")), Some(pem("tok"))).unwrap();
    assert_eq!(origin, CaOrigin::Kubeconfig);
    let (_, origin) = choose_ca(None, None, Some(pem("tok"))).unwrap();
    assert_eq!(origin, CaOrigin::RootCa);
}

#[test]
fn no_ca_or_a_non_pem_ca_is_an_error_never_an_insecure_kubeconfig() {
    assert!(
        choose_ca(None, None, None)
            .unwrap_err()
            .contains("--peer-certificate-authority")
    );
    assert_eq!(
        choose_ca(Some(b"not a cert".to_vec()), None, None).unwrap_err(),
        "the CA from --peer-certificate-authority holds no PEM certificate"
    );
}

#[test]
fn a_rendered_kubeconfig_reads_back_as_the_controller_reads_it() {
    let text = render_kubeconfig(&PeerKubeconfig {
        cluster_id: "cluster-b",
        server: "https://b.internal:6443",
        ca_pem: CA.as_bytes(),
        token: "secret-token",
        tls_server_name: Some("b.example"),
        user: "clusterset-dns-peer-reader",
    });
    let stored = kubeconfig::read(text.as_bytes()).unwrap();
    let (config, cluster) = (stored.kubeconfig, stored.cluster);
    assert_eq!(cluster.context, "cluster-b");
    assert_eq!(cluster.server, "https://b.internal:6443");
    assert_eq!(cluster.ca, Some(CaSource::Data(CA.as_bytes().to_vec())));
    assert!(!cluster.insecure);
    assert_eq!(cluster.tls_server_name.as_deref(), Some("b.example"));
    assert_eq!(config.auth_infos[0].name, "clusterset-dns-peer-reader");
    let raw: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(raw["users"][0]["user"]["token"], "secret-token");
}

#[test]
fn what_peer_add_writes_is_inline_only_so_the_controller_accepts_it() {
    // Whatever the admin kubeconfig used (a CA file, exec, a token file,
    // insecure-skip-tls-verify), `peer add` writes this form: the CA and
    // the token inline, nothing else that kubeconfig::read refuses.
    for tls_server_name in [None, Some("b.example")] {
        let text = render_kubeconfig(&PeerKubeconfig {
            cluster_id: "cluster-b",
            server: "https://b.internal:6443",
            ca_pem: CA.as_bytes(),
            token: "secret-token",
            tls_server_name,
            user: "clusterset-dns-peer-reader",
        });
        let raw: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        let mut cluster_fields: Vec<&str> = raw["clusters"][0]["cluster"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        cluster_fields.sort();
        let mut expected = vec!["certificate-authority-data", "server"];
        expected.extend(tls_server_name.map(|_| "tls-server-name"));
        assert_eq!(cluster_fields, expected);
        assert_eq!(
            raw["users"][0]["user"],
            serde_json::json!({"token": "secret-token"})
        );
        kubeconfig::read(text.as_bytes()).unwrap();
    }
}

fn member<'a>(cluster_id: &'a str, clusterset: &'a str) -> Member<'a> {
    Member {
        cluster_id,
        clusterset,
    }
}

fn join(
    peer: Member<'_>,
    others: &[(&str, Option<&str>)],
    target: Target,
) -> Result<(), &'static str> {
    let others: Vec<(String, Option<String>)> = others
        .iter()
        .map(|(n, id)| (n.to_string(), id.map(str::to_owned)))
        .collect();
    check_join(member("a", "set"), peer, "peer-b", &others, &target).map_err(|r| r.reason)
}

#[test]
fn a_new_peer_of_the_same_clusterset_may_join() {
    assert_eq!(
        join(member("b", "set"), &[("peer-c", Some("c"))], Target::Absent),
        Ok(())
    );
}

#[test]
fn the_controllers_rules_refuse_the_join() {
    assert_eq!(
        join(member("a", "set"), &[], Target::Absent),
        Err("SelfReference")
    );
    assert_eq!(
        join(member("b", "other"), &[], Target::Absent),
        Err("OtherClusterSet")
    );
    assert_eq!(
        join(member("B", "set"), &[], Target::Absent),
        Err("InvalidClusterId")
    );
    assert_eq!(
        join(member("b", "set"), &[("old-b", Some("b"))], Target::Absent),
        Err("DuplicateClusterId")
    );
}

#[test]
fn rerunning_for_the_same_secret_is_no_duplicate() {
    assert_eq!(
        join(
            member("b", "set"),
            &[("peer-b", Some("b"))],
            Target::Peer(Some("b".into()))
        ),
        Ok(())
    );
    // A peer whose id is unknown (down, no annotation) cannot be a duplicate.
    assert_eq!(
        join(member("b", "set"), &[("old", None)], Target::Peer(None)),
        Ok(())
    );
}

#[test]
fn a_secret_of_another_cluster_or_not_a_peer_is_not_overwritten() {
    assert_eq!(
        join(
            member("b", "set"),
            &[("peer-b", Some("c"))],
            Target::Peer(Some("c".into()))
        ),
        Err("NameTaken")
    );
    assert_eq!(
        join(member("b", "set"), &[], Target::NotAPeer),
        Err("NameTaken")
    );
}

#[test]
fn this_clusters_id_must_be_valid_too() {
    let refusal = check_join(
        member("A_", "set"),
        member("b", "set"),
        "peer-b",
        &[],
        &Target::Absent,
    )
    .unwrap_err();
    assert_eq!(refusal.reason, "InvalidLocalClusterId");
    assert!(hint(refusal.reason).contains("DNS label"));
}

#[test]
fn every_refusal_has_a_hint() {
    for reason in [
        "SelfReference",
        "OtherClusterSet",
        "DuplicateClusterId",
        "InvalidClusterId",
        "NameTaken",
    ] {
        assert!(!hint(reason).starts_with("see docs"), "{reason}");
    }
}

fn at(seconds: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

fn refused(at_s: i64, note: &str) -> RefusalEvent {
    RefusalEvent {
        at: at(at_s),
        note: note.into(),
    }
}

#[test]
fn the_latest_refusal_after_the_secret_changed_holds() {
    let events = [
        refused(10, "old"),
        refused(30, "new"),
        refused(20, "middle"),
    ];
    assert_eq!(
        current_refusal(&events, Some(at(5)), None).unwrap().note,
        "new"
    );
}

#[test]
fn a_refusal_before_the_secret_changed_or_before_the_lease_is_stale() {
    let events = [refused(10, "DuplicateClusterId: x")];
    assert_eq!(
        current_refusal(&events, Some(at(11)), None),
        None,
        "Secret fixed since"
    );
    assert_eq!(
        current_refusal(&events, Some(at(1)), Some(at(12))),
        None,
        "accepted since"
    );
    assert!(current_refusal(&events, Some(at(1)), Some(at(9))).is_some());
    assert!(current_refusal(&[], None, None).is_none());
}

#[test]
fn ages_read_in_the_largest_unit() {
    assert_eq!(age(0), "0s ago");
    assert_eq!(age(59), "59s ago");
    assert_eq!(age(60), "1m ago");
    assert_eq!(age(7200), "2h ago");
    assert_eq!(age(3 * 86400 + 5), "3d ago");
    assert_eq!(age(-3), "0s ago", "clock skew");
}

fn status(name: &str, healthy: bool) -> PeerStatus {
    PeerStatus {
        name: name.into(),
        cluster_id: Some("cluster-b".into()),
        clusterset: healthy.then(|| "set".into()),
        server: Some("https://127.0.0.1:6443".into()),
        healthy,
        error: (!healthy).then(|| "connection refused".into()),
        last_seen: Some("2027-01-15T08:00:00Z".into()),
        last_seen_seconds_ago: Some(4),
        refused: None,
        endpoint_cidrs: Vec::new(),
        credential_expires: Some("2027-04-15T08:00:00Z".into()),
        credential_expires_in_seconds: Some(89 * 86400 + 7),
    }
}

#[test]
fn the_table_aligns_columns_and_lists_problems_after_it() {
    let mut down = status("peer-cluster-c", false);
    down.cluster_id = None;
    down.last_seen = None;
    down.last_seen_seconds_ago = None;
    down.refused = Some("DuplicateClusterId: Secrets a and b both name cluster c".into());
    down.credential_expires = None;
    down.credential_expires_in_seconds = None;
    let mut ranged = status("peer-cluster-b", true);
    ranged.endpoint_cidrs = vec!["10.1.0.0/16".into(), "fd00:1::/64".into()];
    let table = render_table(&[ranged, down]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        [
            "NAME",
            "CLUSTER",
            "SERVER",
            "HEALTH",
            "LAST",
            "SEEN",
            "EXPIRES",
            "CONTROLLER"
        ]
    );
    assert_eq!(
        lines[1],
        "peer-cluster-b  cluster-b  https://127.0.0.1:6443  ok         4s ago     in 89d   accepted"
    );
    assert_eq!(
        lines[2],
        "peer-cluster-c  ?          https://127.0.0.1:6443  unhealthy  -          never    refused"
    );
    assert_eq!(
        lines[3],
        "peer-cluster-b: endpoints only in 10.1.0.0/16, fd00:1::/64"
    );
    assert_eq!(lines[4], "peer-cluster-c: connection refused");
    assert_eq!(
        lines[5],
        "peer-cluster-c: refused by the controller: DuplicateClusterId: Secrets a and b both name cluster c"
    );
    assert_eq!(lines.len(), 6);
}

#[test]
fn expiries_read_ahead_or_behind() {
    assert_eq!(expiry(None), "never");
    assert_eq!(expiry(Some(90 * 86400)), "in 90d");
    assert_eq!(expiry(Some(30)), "in 30s");
    assert_eq!(expiry(Some(0)), "expired 0s ago");
    assert_eq!(expiry(Some(-7200)), "expired 2h ago");
}

#[test]
fn the_controller_column_says_refused_accepted_or_nothing() {
    let mut s = status("p", true);
    assert_eq!(s.controller(), "accepted");
    s.refused = Some("x".into());
    assert_eq!(s.controller(), "refused");
    s.refused = None;
    s.last_seen = None;
    assert_eq!(s.controller(), "-");
}

#[test]
fn secret_names_default_to_the_peer_id() {
    assert_eq!(secret_name("cluster-b"), "peer-cluster-b");
}
