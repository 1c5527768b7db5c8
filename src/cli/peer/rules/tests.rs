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
        endpoint_cidrs_from: None,
        any_endpoint: false,
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
    ranged.endpoint_cidrs_from = Some("endpoint-cidr".into());
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
        "peer-cluster-b: endpoints only in 10.1.0.0/16, fd00:1::/64 (from --endpoint-cidr)"
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

#[test]
fn peer_list_says_where_the_ranges_came_from_and_when_there_are_none() {
    let mut nodes = status("peer-n", true);
    nodes.endpoint_cidrs = vec!["10.244.0.0/23".into()];
    nodes.endpoint_cidrs_from = Some("nodes".into());
    let mut any = status("peer-any", true);
    any.any_endpoint = true;
    any.endpoint_cidrs_from = Some("allow-any-endpoint".into());
    let mut old = status("peer-old", true);
    old.any_endpoint = true;
    // Ranges that do not parse: neither (the refusal says why).
    let broken = status("peer-broken", true);
    let table = render_table(&[nodes, any, old, broken]);
    let below: Vec<&str> = table.lines().skip(5).collect();
    assert_eq!(
        below,
        [
            "peer-n: endpoints only in 10.244.0.0/23 (from the peer's Nodes' spec.podCIDRs)",
            "peer-any: endpoints anywhere the controller's other rules allow (--allow-any-endpoint)",
            "peer-old: endpoints anywhere the controller's other rules allow (no ranges recorded)",
        ]
    );
    for source in [RangeSource::Flag, RangeSource::Nodes, RangeSource::AllowAny] {
        assert_eq!(
            RangeSource::from_annotation(source.annotation()),
            Some(source)
        );
    }
    assert_eq!(RangeSource::from_annotation("guess"), None);
}

fn cidrs(list: &[&str]) -> Vec<Cidr> {
    list.iter().map(|c| c.parse().unwrap()).collect()
}

fn texts(list: &[Cidr]) -> Vec<String> {
    list.iter().map(ToString::to_string).collect()
}

#[test]
fn ranges_merge_into_as_few_cidrs_as_cover_exactly_the_same_addresses() {
    let cases: &[(&[&str], &[&str])] = &[
        (&[], &[]),
        // Duplicates, and a range inside another.
        (&["10.1.0.0/24", "10.1.0.0/24"], &["10.1.0.0/24"]),
        (&["10.1.0.128/25", "10.1.0.0/16"], &["10.1.0.0/16"]),
        // Sibling halves join, again and again.
        (&["10.1.1.0/24", "10.1.0.0/24"], &["10.1.0.0/23"]),
        (
            &["10.1.0.0/24", "10.1.1.0/24", "10.1.2.0/24", "10.1.3.0/24"],
            &["10.1.0.0/22"],
        ),
        (
            &["10.1.0.0/24", "10.1.2.0/24", "10.1.3.0/24"],
            &["10.1.0.0/24", "10.1.2.0/23"],
        ),
        // Adjacent but not siblings: 10.1.1.0/24 and 10.1.2.0/24 are no /23.
        (
            &["10.1.2.0/24", "10.1.1.0/24"],
            &["10.1.1.0/24", "10.1.2.0/24"],
        ),
        // Each family apart, IPv4 first; halves of the whole space join.
        (
            &[
                "fd00:1:0:1::/64",
                "10.2.0.0/16",
                "fd00:1::/64",
                "10.1.0.0/16",
            ],
            &["10.1.0.0/16", "10.2.0.0/16", "fd00:1::/63"],
        ),
        (&["0.0.0.0/1", "128.0.0.0/1", "10.0.0.0/8"], &["0.0.0.0/0"]),
        (&["::/1", "8000::/1"], &["::/0"]),
        (
            &["255.255.255.255/32", "255.255.255.254/32"],
            &["255.255.255.254/31"],
        ),
    ];
    for (given, merged) in cases {
        assert_eq!(texts(&merge_ranges(&cidrs(given))), *merged, "{given:?}");
    }
}

#[test]
fn merging_never_changes_which_addresses_are_covered() {
    // Pseudo-random /25 to /32 ranges of one /24, duplicates and nested
    // ones among them: each address of the /24 is covered after the merge
    // exactly when it was before, merging again changes nothing, and no
    // two merged ranges overlap.
    let mut state: u32 = 0x2545_f491;
    for _ in 0..200 {
        let mut given = Vec::new();
        for _ in 0..12 {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let prefix = 25 + state % 8;
            let offset = (state >> 8) % 256;
            given.push(format!("10.9.0.{offset}/{prefix}").parse::<Cidr>().unwrap());
        }
        let merged = merge_ranges(&given);
        for last in 0..=255u8 {
            let ip = IpAddr::V4(Ipv4Addr::new(10, 9, 0, last));
            assert_eq!(
                merged.iter().any(|c| c.contains(ip)),
                given.iter().any(|c| c.contains(ip)),
                "{ip}: {given:?} -> {merged:?}"
            );
        }
        assert_eq!(
            merge_ranges(&merged),
            merged,
            "merging again changes nothing"
        );
        for (i, a) in merged.iter().enumerate() {
            for b in &merged[i + 1..] {
                assert!(
                    !a.contains(b.network()) && !b.contains(a.network()),
                    "{merged:?}"
                );
            }
        }
    }
}

fn node(name: &str, spec: serde_json::Value) -> Node {
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

#[test]
fn the_pod_ranges_of_the_peers_nodes_are_their_pod_cidrs_merged() {
    let nodes = PeerNodes::Read(vec![
        node(
            "n0",
            serde_json::json!({"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24", "fd00:244::/64"]}),
        ),
        node(
            "n1",
            serde_json::json!({"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24", "fd00:244:0:1::/64"]}),
        ),
        // An older apiserver's Node: spec.podCIDR alone.
        node("n2", serde_json::json!({"podCIDR": "10.244.2.0/24"})),
        // A Node not yet given a range.
        node("n3", serde_json::json!({})),
    ]);
    assert_eq!(
        texts(&pod_ranges_of_nodes(&nodes, Joining::Peer).unwrap()),
        ["10.244.0.0/23", "10.244.2.0/24", "fd00:244::/63"]
    );
    let bad = PeerNodes::Read(vec![node(
        "n0",
        serde_json::json!({"podCIDRs": ["10.244.0.0"]}),
    )]);
    let error = pod_ranges_of_nodes(&bad, Joining::Peer).unwrap_err();
    assert!(
        error.contains("Node n0") && error.contains("--endpoint-cidr"),
        "{error}"
    );
}

#[test]
fn without_pod_ranges_on_the_peers_nodes_add_says_why_and_what_to_pass() {
    let none = |nodes| pod_ranges_of_nodes(&nodes, Joining::Peer).unwrap_err();
    let cases = [
        (none(PeerNodes::Read(Vec::new())), "the peer has no Nodes"),
        (
            none(PeerNodes::Read(vec![node("n0", serde_json::json!({}))])),
            "its one Node has no spec.podCIDRs",
        ),
        (
            none(PeerNodes::Read(vec![
                node("n0", serde_json::json!({"podCIDRs": []})),
                node("n1", serde_json::json!({})),
            ])),
            "none of its 2 Nodes has spec.podCIDRs",
        ),
        (
            none(PeerNodes::Forbidden(
                "nodes is forbidden: User \"x\" cannot list resource \"nodes\"".into(),
            )),
            "forbidden (403: nodes is forbidden",
        ),
    ];
    // hub join says the same of a member.
    let member = pod_ranges_of_nodes(&PeerNodes::Read(Vec::new()), Joining::Member).unwrap_err();
    assert!(
        member.starts_with("the member's pod ranges are not known: the member has no Nodes")
            && member.contains("hub join records them in the member's record on the hub")
            && member.contains("--allow-any-endpoint"),
        "{member}"
    );
    for (message, why) in cases {
        assert!(
            message.starts_with("the peer's pod ranges are not known: "),
            "{message}"
        );
        assert!(message.contains(why), "{why}: {message}");
        for what in [
            "--endpoint-cidr <cidr>",
            "--allow-any-endpoint",
            "Cilium cluster-pool, Calico IPAM, VPC-native",
            "accepts any endpoint address of the peer that its other rules allow",
            "Nothing was written",
        ] {
            assert!(message.contains(what), "{what}: {message}");
        }
    }
}
