use std::collections::BTreeSet;

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};

use super::{ELSEWHERE, Hints};
use crate::api::locality::Locality;

/// One endpoint: address, this cluster's or not, zone, node, ready.
fn endpoint(address: &str, zone: Option<&str>, node: Option<&str>, ready: bool) -> Endpoint {
    Endpoint {
        addresses: vec![address.to_owned()],
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            ..EndpointConditions::default()
        }),
        zone: zone.map(str::to_owned),
        node_name: node.map(str::to_owned),
        ..Endpoint::default()
    }
}

fn zones(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|z| (*z).to_owned()).collect()
}

/// Hints every endpoint as the controller writes them: local ones, then
/// remote ones; `None` when the import spreads.
fn hinted(
    locality: Locality,
    node_zones: &BTreeSet<String>,
    local: &[Endpoint],
    remote: &[Endpoint],
) -> Option<Vec<Endpoint>> {
    let hints = Hints::new(locality, node_zones, local)?;
    let mut all = Vec::new();
    for e in local {
        all.push(Endpoint {
            hints: Some(hints.local(e)),
            ..e.clone()
        });
    }
    for e in remote {
        all.push(Endpoint {
            hints: Some(hints.remote()),
            ..e.clone()
        });
    }
    Some(all)
}

/// What kube-proxy on node `node` in zone `zone` sends to, as its topology
/// filter decides (pkg/proxy/topology.go in Kubernetes 1.37, restated):
/// only ready endpoints count; if every ready one has node hints and one
/// names the node, those; else if every ready one has zone hints and one
/// names the zone, those; else every ready one.
fn kube_proxy(endpoints: &[Endpoint], node: &str, zone: &str) -> BTreeSet<String> {
    let ready: Vec<&Endpoint> = endpoints.iter().filter(|e| super::is_ready(e)).collect();
    let nodes = |e: &Endpoint| -> Vec<String> {
        e.hints
            .as_ref()
            .and_then(|h| h.for_nodes.as_ref())
            .map(|n| n.iter().map(|n| n.name.clone()).collect())
            .unwrap_or_default()
    };
    let zones = |e: &Endpoint| -> Vec<String> {
        e.hints
            .as_ref()
            .and_then(|h| h.for_zones.as_ref())
            .map(|z| z.iter().map(|z| z.name.clone()).collect())
            .unwrap_or_default()
    };
    let pick = |keep: &dyn Fn(&Endpoint) -> bool| -> BTreeSet<String> {
        ready
            .iter()
            .filter(|e| keep(e))
            .map(|e| e.addresses[0].clone())
            .collect()
    };
    if !ready.is_empty() {
        if ready.iter().all(|e| !nodes(e).is_empty())
            && ready.iter().any(|e| nodes(e).iter().any(|n| n == node))
        {
            return pick(&|e| nodes(e).iter().any(|n| n == node));
        }
        if ready.iter().all(|e| !zones(e).is_empty())
            && ready.iter().any(|e| zones(e).iter().any(|z| z == zone))
        {
            return pick(&|e| zones(e).iter().any(|z| z == zone));
        }
    }
    pick(&|_| true)
}

fn addresses(endpoints: &[Endpoint], keep: impl Fn(&Endpoint) -> bool) -> BTreeSet<String> {
    endpoints
        .iter()
        .filter(|e| super::is_ready(e) && keep(e))
        .map(|e| e.addresses[0].clone())
        .collect()
}

#[test]
fn a_spread_import_gets_no_hints() {
    let local = [endpoint("10.0.0.1", Some("a"), Some("n1"), true)];
    assert!(hinted(Locality::Spread, &zones(&["a"]), &local, &[]).is_none());
}

#[test]
fn every_endpoint_is_hinted_or_none_is() {
    let node_zones = zones(&["a", "b", "c"]);
    let local = [
        endpoint("10.0.0.1", Some("a"), Some("n1"), true),
        endpoint("10.0.0.2", Some("b"), Some("n2"), false),
        endpoint("10.0.0.3", None, None, true),
    ];
    let remote = [
        endpoint("10.1.0.1", Some("a"), None, true),
        endpoint("10.1.0.2", Some("z"), None, false),
    ];
    for locality in [Locality::PreferSameZone, Locality::PreferSameNode] {
        let all = hinted(locality, &node_zones, &local, &remote).unwrap();
        for e in &all {
            let hints = e.hints.as_ref().expect("hinted");
            let for_zones = hints.for_zones.as_ref().expect("zone hints");
            assert!(!for_zones.is_empty() && for_zones.len() <= 8, "{e:?}");
            let unique: BTreeSet<_> = for_zones.iter().map(|z| &z.name).collect();
            assert_eq!(unique.len(), for_zones.len(), "duplicate zone: {e:?}");
            assert!(for_zones.iter().all(|z| z.name.len() <= 63));
            match locality {
                Locality::PreferSameNode => assert_eq!(hints.for_nodes.as_ref().unwrap().len(), 1),
                _ => assert!(hints.for_nodes.is_none(), "{e:?}"),
            }
        }
        // Another cluster's zone names never reach this cluster's hints.
        for e in &all[local.len()..] {
            assert_eq!(
                e.hints.as_ref().unwrap().for_zones.as_ref().unwrap()[0].name,
                ELSEWHERE
            );
        }
    }
}

#[test]
fn nodes_stay_in_the_cluster_while_it_has_a_ready_endpoint_and_fail_over_when_not() {
    let node_zones = zones(&["a", "b"]);
    let remote = [
        endpoint("10.1.0.1", Some("a"), Some("n1"), true),
        endpoint("10.1.0.2", Some("b"), Some("n2"), true),
    ];
    let all_remote = addresses(&remote, |_| true);
    // Both zones served: each node's own zone.
    let local = [
        endpoint("10.0.0.1", Some("a"), Some("n1"), true),
        endpoint("10.0.0.2", Some("b"), Some("n2"), true),
    ];
    let all = hinted(Locality::PreferSameZone, &node_zones, &local, &remote).unwrap();
    assert_eq!(kube_proxy(&all, "n1", "a"), ["10.0.0.1".to_owned()].into());
    assert_eq!(kube_proxy(&all, "n2", "b"), ["10.0.0.2".to_owned()].into());

    // Zone b's endpoint not ready, before any new plan: kube-proxy in b
    // spreads (the documented gap); after the plan, b uses a's endpoint.
    let mut stale = all.clone();
    stale[1].conditions.as_mut().unwrap().ready = Some(false);
    assert_eq!(kube_proxy(&stale, "n2", "b").len(), 3);
    let local_b_down = [local[0].clone(), {
        let mut e = local[1].clone();
        e.conditions.as_mut().unwrap().ready = Some(false);
        e
    }];
    let replanned = hinted(
        Locality::PreferSameZone,
        &node_zones,
        &local_b_down,
        &remote,
    )
    .unwrap();
    assert_eq!(
        kube_proxy(&replanned, "n2", "b"),
        ["10.0.0.1".to_owned()].into()
    );
    assert_eq!(
        kube_proxy(&replanned, "n1", "a"),
        ["10.0.0.1".to_owned()].into()
    );

    // No local endpoint ready: every node fails over to the others, with
    // the hints as they stand (no write needed) and after a new plan.
    let mut down = all.clone();
    for e in &mut down[..2] {
        e.conditions.as_mut().unwrap().ready = Some(false);
    }
    let none_ready: Vec<Endpoint> = down[..2]
        .iter()
        .map(|e| Endpoint {
            hints: None,
            ..e.clone()
        })
        .collect();
    let replanned = hinted(Locality::PreferSameZone, &node_zones, &none_ready, &remote).unwrap();
    for hints in [&down, &replanned] {
        assert_eq!(kube_proxy(hints, "n1", "a"), all_remote);
        assert_eq!(kube_proxy(hints, "n2", "b"), all_remote);
    }
}

#[test]
fn a_zone_without_local_endpoints_uses_the_clusters_other_zones() {
    let node_zones = zones(&["a", "b", "c"]);
    let local = [
        endpoint("10.0.0.1", Some("a"), Some("n1"), true),
        endpoint("10.0.0.2", Some("a"), Some("n1"), true),
    ];
    let remote = [endpoint("10.1.0.1", Some("c"), None, true)];
    let all = hinted(Locality::PreferSameZone, &node_zones, &local, &remote).unwrap();
    let local_ready = addresses(&local, |_| true);
    for zone in ["a", "b", "c"] {
        assert_eq!(
            kube_proxy(&all, "some-node", zone),
            local_ready,
            "zone {zone}"
        );
    }
    // A node without the zone label is a node of the empty zone.
    let unlabeled = zones(&["a", ""]);
    let all = hinted(Locality::PreferSameZone, &unlabeled, &local, &remote).unwrap();
    assert_eq!(kube_proxy(&all, "bare-metal-1", ""), local_ready);
    // A node of a zone the controller has not seen yet spreads (it reads
    // Nodes, and the next plan includes the zone).
    assert_eq!(kube_proxy(&all, "new-node", "d").len(), 3);
}

#[test]
fn prefer_same_node_keeps_traffic_on_the_node_then_in_the_zone_then_the_cluster() {
    let node_zones = zones(&["a", "b"]);
    let local = [
        endpoint("10.0.0.1", Some("a"), Some("n1"), true),
        endpoint("10.0.0.2", Some("a"), Some("n2"), true),
        endpoint("10.0.0.3", Some("b"), Some("n3"), true),
    ];
    let remote = [endpoint("10.1.0.1", Some("a"), Some("n1"), true)];
    let all = hinted(Locality::PreferSameNode, &node_zones, &local, &remote).unwrap();
    assert_eq!(kube_proxy(&all, "n1", "a"), ["10.0.0.1".to_owned()].into());
    assert_eq!(kube_proxy(&all, "n3", "b"), ["10.0.0.3".to_owned()].into());
    // n4 has no endpoint: its zone's.
    assert_eq!(
        kube_proxy(&all, "n4", "a"),
        ["10.0.0.1".to_owned(), "10.0.0.2".to_owned()].into()
    );
    // A remote endpoint that names a node of the same name as a local
    // one is never picked for it: remote node hints are ELSEWHERE.
    assert!(!kube_proxy(&all, "n1", "a").contains("10.1.0.1"));
}

#[test]
fn more_zones_than_one_endpoint_can_name_are_shared_out() {
    let names: Vec<String> = (0..20).map(|i| format!("z{i:02}")).collect();
    let node_zones: BTreeSet<String> = names.iter().cloned().collect();
    let local: Vec<Endpoint> = (0..5)
        .map(|i| endpoint(&format!("10.0.0.{i}"), Some("z00"), None, true))
        .collect();
    let all = hinted(Locality::PreferSameZone, &node_zones, &local, &[]).unwrap();
    for e in &all {
        assert!(e.hints.as_ref().unwrap().for_zones.as_ref().unwrap().len() <= 8);
    }
    // Every zone's nodes stay in the cluster: 19 orphans in 3 groups, 5
    // ready endpoints to carry them.
    for zone in &names {
        let picked = kube_proxy(&all, "n", zone);
        assert!(
            !picked.is_empty() && picked.len() < 5 || zone == "z00",
            "{zone}: {picked:?}"
        );
    }
    // Stable: the same inputs hint the same way.
    assert_eq!(
        all,
        hinted(Locality::PreferSameZone, &node_zones, &local, &[]).unwrap()
    );
}
