//! Index event sequences: applies, deletes, relists, repeats and
//! out-of-order arrivals, asserted on the published zone.

use hickory_proto::rr::{Name, RecordType};

use std::net::IpAddr;
use std::sync::Arc;

use super::*;
use crate::api::ServiceImportType;
use crate::model::{Endpoint, Port, PortProtocol};

fn index() -> Index {
    Index::new(ZoneSettings::new(
        Name::from_ascii("clusterset.local.").unwrap(),
    ))
}

fn import(ns: &str, name: &str, kind: (ServiceImportType, Vec<IpAddr>)) -> ImportedService {
    let (import_type, ips) = kind;
    ImportedService {
        service: ServiceRef::new(ns, name),
        import_type,
        ips,
        ports: vec![Port {
            name: Some("http".into()),
            protocol: PortProtocol::Tcp,
            port: 80,
        }],
        locality: Default::default(),
    }
}

fn vip(ip: &str) -> (ServiceImportType, Vec<IpAddr>) {
    (ServiceImportType::ClusterSetIp, vec![ip.parse().unwrap()])
}

fn headless() -> (ServiceImportType, Vec<IpAddr>) {
    (ServiceImportType::Headless, vec![])
}

fn slice(ns: &str, service: &str, cluster: &str, ips: &[&str]) -> SliceEndpoints {
    SliceEndpoints {
        service: ServiceRef::new(ns, service),
        cluster: cluster.into(),
        ports: Arc::from([]),
        endpoints: ips
            .iter()
            .map(|ip| Endpoint {
                hostname: None,
                addresses: vec![ip.parse().unwrap()],
            })
            .collect(),
        not_ready: 0,
        serving: Default::default(),
        serving_count: 0,
    }
}

fn key(ns: &str, name: &str) -> SliceKey {
    SliceKey {
        namespace: ns.into(),
        name: name.into(),
    }
}

fn a_records(zone: &Zone, qname: &str) -> Option<Vec<String>> {
    zone.answer_texts(qname, RecordType::A).ok()
}

const DB: &str = "db.prod.svc.clusterset.local.";

#[test]
fn a_slice_that_arrives_before_its_import_is_used_once_the_import_arrives() {
    let mut index = index();
    index.apply_slice(key("prod", "db-a"), slice("prod", "db", "a", &["10.0.0.1"]));
    let (zone, _) = index.publish();
    assert_eq!(a_records(&zone, DB), None);
    index.apply_import(import("prod", "db", headless()));
    let (zone, _) = index.publish();
    assert_eq!(a_records(&zone, DB), Some(vec!["10.0.0.1".into()]));
}

#[test]
fn repeating_an_identical_apply_rebuilds_nothing_and_keeps_the_serial() {
    let mut index = index();
    index.apply_import(import("prod", "web", vip("10.0.0.1")));
    let (zone, stats) = index.publish();
    assert_eq!(stats.rebuilt, 1);
    index.apply_import(import("prod", "db", headless()));
    index.apply_slice(key("prod", "s"), slice("prod", "db", "a", &["10.1.0.1"]));
    let (_, _) = index.publish();
    index.apply_slice(key("prod", "s"), slice("prod", "db", "a", &["10.1.0.1"]));
    assert!(!index.has_changes());
    let (again, stats) = index.publish();
    assert_eq!(stats.rebuilt, 0);
    assert!(
        again.serial() > zone.serial(),
        "the slice change bumped the serial once"
    );
    let (third, _) = index.publish();
    assert_eq!(third.serial(), again.serial());
}

#[test]
fn a_clusterset_ip_import_rebuilds_nothing_when_its_slices_change() {
    let mut index = index();
    index.apply_import(import("prod", "web", vip("10.0.0.1")));
    let (zone, _) = index.publish();
    index.apply_slice(key("prod", "s"), slice("prod", "web", "a", &["10.1.0.1"]));
    // The counts changed and go out with a publish; no name did.
    assert!(index.has_changes());
    let (again, stats) = index.publish();
    assert_eq!(stats.rebuilt, 0);
    assert_eq!(index.endpoint_count(), 1);
    assert_eq!(again.serial(), zone.serial(), "no answer changed");
    assert!(!index.has_changes());
    // Its type changes: the names are rebuilt from the slices kept.
    index.apply_import(import("prod", "web", headless()));
    let (zone, stats) = index.publish();
    assert_eq!(stats.rebuilt, 1);
    assert_eq!(
        a_records(&zone, "web.prod.svc.clusterset.local."),
        Some(vec!["10.1.0.1".into()])
    );
    // Now a slice change rebuilds it.
    index.apply_slice(key("prod", "s"), slice("prod", "web", "a", &["10.1.0.2"]));
    let (zone, stats) = index.publish();
    assert_eq!(stats.rebuilt, 1);
    assert_eq!(
        a_records(&zone, "web.prod.svc.clusterset.local."),
        Some(vec!["10.1.0.2".into()])
    );
}

#[test]
fn a_prebuild_builds_a_headless_import_once_a_batch_has_left_it_alone() {
    let mut index = index();
    index.apply_import(import("prod", "web", vip("10.0.0.1")));
    index.apply_import(import("prod", "db", headless()));
    index.apply_slice(key("prod", "a"), slice("prod", "db", "a", &["10.0.0.7"]));
    assert_eq!(index.prebuild(), 1, "web only: db changed in this batch");
    assert!(index.has_changes());
    // More of db's slices arrive in the next batch: it waits again.
    index.apply_slice(key("prod", "b"), slice("prod", "db", "b", &["10.0.0.8"]));
    assert_eq!(index.prebuild(), 0);
    // A batch without db: it is built now, and the publish has nothing
    // left but the headless `cache`, changed in the last batch.
    index.apply_import(import("prod", "cache", headless()));
    assert_eq!(index.prebuild(), 1, "db");
    let (zone, stats) = index.publish();
    assert_eq!(stats.rebuilt, 1, "cache");
    assert!(zone.serial() > 0);
    assert_eq!(
        a_records(&zone, "web.prod.svc.clusterset.local."),
        Some(vec!["10.0.0.1".into()])
    );
    assert_eq!(
        a_records(&zone, DB),
        Some(vec!["10.0.0.7".into(), "10.0.0.8".into()])
    );
    assert!(!index.has_changes());
    // Exactly what building everything at once gives.
    let mut whole = self::index();
    whole.apply_import(import("prod", "web", vip("10.0.0.1")));
    whole.apply_import(import("prod", "db", headless()));
    whole.apply_slice(key("prod", "a"), slice("prod", "db", "a", &["10.0.0.7"]));
    whole.apply_slice(key("prod", "b"), slice("prod", "db", "b", &["10.0.0.8"]));
    whole.apply_import(import("prod", "cache", headless()));
    let (expected, _) = whole.publish();
    assert_eq!(zone.service_count(), expected.service_count());
    assert_eq!(a_records(&zone, DB), a_records(&expected, DB));
}

#[test]
fn a_change_rebuilds_only_the_changed_service() {
    let mut index = index();
    for i in 0..100 {
        index.apply_import(import(
            "prod",
            &format!("svc{i}"),
            vip(&format!("10.0.0.{i}")),
        ));
    }
    let (_, stats) = index.publish();
    assert_eq!(stats.rebuilt, 100);
    index.apply_import(import("prod", "svc7", vip("10.9.9.9")));
    let (zone, stats) = index.publish();
    assert_eq!(stats.rebuilt, 1);
    assert_eq!(
        a_records(&zone, "svc7.prod.svc.clusterset.local."),
        Some(vec!["10.9.9.9".into()])
    );
    assert_eq!(
        a_records(&zone, "svc8.prod.svc.clusterset.local."),
        Some(vec!["10.0.0.8".into()])
    );
}

#[test]
fn deleting_slices_and_imports_removes_their_names() {
    let mut index = index();
    index.apply_import(import("prod", "db", headless()));
    index.apply_slice(key("prod", "a"), slice("prod", "db", "a", &["10.0.0.1"]));
    index.apply_slice(key("prod", "b"), slice("prod", "db", "b", &["10.0.0.2"]));
    let (zone, _) = index.publish();
    assert_eq!(a_records(&zone, DB).unwrap().len(), 2);
    index.delete_slice(&key("prod", "a"));
    let (zone, _) = index.publish();
    assert_eq!(a_records(&zone, DB), Some(vec!["10.0.0.2".into()]));
    index.delete_import(&ServiceRef::new("prod", "db"));
    let (zone, _) = index.publish();
    assert_eq!(a_records(&zone, DB), None);
    assert_eq!(zone.service_count(), 0);
}

#[test]
fn a_slice_relabelled_to_another_service_moves() {
    let mut index = index();
    index.apply_import(import("prod", "db", headless()));
    index.apply_import(import("prod", "cache", headless()));
    index.apply_slice(key("prod", "s"), slice("prod", "db", "a", &["10.0.0.1"]));
    let (zone, _) = index.publish();
    assert!(a_records(&zone, DB).is_some());
    index.apply_slice(key("prod", "s"), slice("prod", "cache", "a", &["10.0.0.1"]));
    let (zone, stats) = index.publish();
    assert_eq!(stats.rebuilt, 2);
    assert_eq!(a_records(&zone, DB), None);
    assert!(a_records(&zone, "cache.prod.svc.clusterset.local.").is_some());
}

#[test]
fn a_relist_drops_what_is_gone_and_keeps_what_is_unchanged() {
    let mut index = index();
    index.apply_import(import("prod", "web", vip("10.0.0.1")));
    index.apply_import(import("prod", "old", vip("10.0.0.2")));
    index.publish();
    index.reset_imports(vec![
        import("prod", "web", vip("10.0.0.1")),
        import("dev", "new", vip("10.0.0.3")),
    ]);
    let (zone, stats) = index.publish();
    assert_eq!(stats.rebuilt, 2, "old removed, new added, web untouched");
    assert_eq!(a_records(&zone, "old.prod.svc.clusterset.local."), None);
    assert!(a_records(&zone, "new.dev.svc.clusterset.local.").is_some());
    assert!(a_records(&zone, "web.prod.svc.clusterset.local.").is_some());
}

#[test]
fn a_relist_keeps_only_the_keys_of_what_it_holds_unchanged() {
    let mut index = index();
    index.apply_import(import("prod", "db", headless()));
    index.apply_import(import("prod", "web", vip("10.0.0.1")));
    index.apply_slice(
        key("prod", "db-a"),
        mixed_slice("a", &["10.0.0.1"], &["10.0.9.1"]),
    );
    index.apply_slice(key("prod", "db-b"), slice("prod", "db", "b", &["10.0.1.1"]));
    index.publish();

    // Held as listed (the serving endpoint is dropped before comparing, as
    // the index drops it): the key alone, sharing the index's strings.
    let held = index.relisted_slice(
        key("prod", "db-a"),
        mixed_slice("a", &["10.0.0.1"], &["10.0.9.1"]),
    );
    let Relisted::Held(held_key) = &held else {
        panic!("an unchanged slice is kept as its key: {held:?}");
    };
    assert!(Arc::ptr_eq(
        &held_key.namespace,
        &index
            .slices_of(&ServiceRef::new("prod", "db"))
            .next()
            .unwrap()
            .0
            .namespace
    ));
    assert_eq!(
        index.relisted_import(import("prod", "db", headless())),
        Relisted::Held(ServiceRef::new("prod", "db"))
    );
    // Changed: the new version, nothing applied yet.
    let changed = index.relisted_import(import("prod", "web", vip("10.0.0.2")));
    assert!(matches!(changed, Relisted::Changed(_)), "{changed:?}");
    let moved = index.relisted_slice(key("prod", "db-a"), slice("prod", "db", "a", &["10.0.0.7"]));
    assert!(matches!(moved, Relisted::Changed(_)), "{moved:?}");
    assert_eq!(
        a_records(&index.publish().0, "web.prod.svc.clusterset.local."),
        Some(vec!["10.0.0.1".into()])
    );

    // The relist completes without db-b: it goes, web changes, the held
    // slice's service is rebuilt for db-a's new address and db-b's loss.
    index.relist_imports([
        Relisted::Held(ServiceRef::new("prod", "db")),
        changed.unboxed(),
    ]);
    index.relist_slices([moved.unboxed()]);
    let (zone, stats) = index.publish();
    assert_eq!(stats.rebuilt, 2, "web and db");
    assert_eq!(
        a_records(&zone, "web.prod.svc.clusterset.local."),
        Some(vec!["10.0.0.2".into()])
    );
    assert_eq!(a_records(&zone, DB), Some(vec!["10.0.0.7".into()]));
    assert_eq!((index.slice_count(), index.endpoint_count()), (1, 1));

    // A relist naming everything as held changes nothing.
    index.relist_imports([
        Relisted::Held(ServiceRef::new("prod", "db")),
        Relisted::Held(ServiceRef::new("prod", "web")),
    ]);
    index.relist_slices([Relisted::Held(key("prod", "db-a"))]);
    assert!(!index.has_changes());
}

#[test]
fn an_empty_relist_empties_the_index() {
    let mut index = index();
    index.apply_import(import("prod", "db", headless()));
    index.apply_slice(key("prod", "a"), slice("prod", "db", "a", &["10.0.0.1"]));
    index.publish();
    index.reset_imports(vec![]);
    index.reset_slices(vec![]);
    let (zone, _) = index.publish();
    assert_eq!(zone.service_count(), 0);
    assert_eq!(index.slice_count(), 0);
    assert_eq!(index.import_count(), 0);
}

#[test]
fn earlier_snapshots_are_not_changed_by_later_updates() {
    let mut index = index();
    index.apply_import(import("prod", "web", vip("10.0.0.1")));
    let (before, _) = index.publish();
    index.apply_import(import("prod", "web", vip("10.0.0.2")));
    let (after, _) = index.publish();
    assert_eq!(
        a_records(&before, "web.prod.svc.clusterset.local."),
        Some(vec!["10.0.0.1".into()])
    );
    assert_eq!(
        a_records(&after, "web.prod.svc.clusterset.local."),
        Some(vec!["10.0.0.2".into()])
    );
}

#[test]
fn with_namespaces_required_an_import_resolves_only_while_its_namespace_exists() {
    let mut index = index();
    index.require_namespaces();
    index.apply_import(import("prod", "web", vip("10.0.0.1")));
    let (zone, _) = index.publish();
    assert_eq!(a_records(&zone, "web.prod.svc.clusterset.local."), None);
    index.apply_namespace("prod");
    let (zone, _) = index.publish();
    assert!(a_records(&zone, "web.prod.svc.clusterset.local.").is_some());
    index.delete_namespace("prod");
    let (zone, _) = index.publish();
    assert_eq!(a_records(&zone, "web.prod.svc.clusterset.local."), None);
    index.reset_namespaces(vec!["prod".to_string(), "dev".to_string()]);
    let (zone, stats) = index.publish();
    assert_eq!(stats.rebuilt, 1);
    assert!(a_records(&zone, "web.prod.svc.clusterset.local.").is_some());
}

/// A rebuild large enough to be spread over threads gives every service
/// exactly the names that rebuilding it alone gives.
#[test]
fn a_parallel_rebuild_matches_one_service_at_a_time() {
    let services = 3 * PARALLEL_REBUILD;
    let mut bulk = index();
    let mut single = index();
    for i in 0..services {
        let name = format!("s{i}");
        let (kind, slices) = if i % 3 == 0 {
            let ips = [format!("10.1.{}.{}", i / 250, i % 250 + 1)];
            let refs: Vec<&str> = ips.iter().map(String::as_str).collect();
            (headless(), vec![slice("ns", &name, "east", &refs)])
        } else {
            (vip(&format!("10.96.{}.{}", i / 250, i % 250 + 1)), vec![])
        };
        for index in [&mut bulk, &mut single] {
            index.apply_import(import("ns", &name, kind.clone()));
            for (n, s) in slices.iter().enumerate() {
                index.apply_slice(key("ns", &format!("{name}-{n}")), s.clone());
            }
        }
        // One service per publish: never the parallel path.
        assert_eq!(single.publish().1.rebuilt, 1);
    }
    let (zone, stats) = bulk.publish();
    assert_eq!(stats.rebuilt, services);
    let (reference, _) = single.publish();
    for i in 0..services {
        let qname = format!("s{i}.ns.svc.clusterset.local.");
        let got = a_records(&zone, &qname);
        assert!(
            got.as_ref().is_some_and(|a| a.len() == 1),
            "{qname}: {got:?}"
        );
        assert_eq!(got, a_records(&reference, &qname), "{qname}");
    }
    assert_eq!(zone.service_count(), services);
}

#[test]
fn the_endpoint_count_follows_applies_replacements_deletes_and_relists() {
    let mut index = index();
    let count = |index: &Index| {
        let counted: usize = index
            .slices_of(&ServiceRef::new("prod", "db"))
            .map(|(_, s)| s.endpoints.len())
            .sum();
        assert_eq!(index.endpoint_count(), counted);
        counted
    };
    index.apply_slice(
        key("prod", "db-a"),
        slice("prod", "db", "a", &["10.0.0.1", "10.0.0.2"]),
    );
    index.apply_slice(key("prod", "db-b"), slice("prod", "db", "b", &["10.0.1.1"]));
    assert_eq!(count(&index), 3);
    index.apply_slice(key("prod", "db-a"), slice("prod", "db", "a", &["10.0.0.1"]));
    assert_eq!(count(&index), 2);
    index.delete_slice(&key("prod", "db-b"));
    index.delete_slice(&key("prod", "db-b"));
    assert_eq!(count(&index), 1);
    index.reset_slices([(
        key("prod", "db-c"),
        slice("prod", "db", "c", &["10.0.2.1", "10.0.2.2", "10.0.2.3"]),
    )]);
    assert_eq!(count(&index), 3);
}

/// A slice with `ready` ready endpoints and `serving` terminating but
/// serving ones, of headless `prod/db` in `cluster`.
fn mixed_slice(cluster: &str, ready: &[&str], serving: &[&str]) -> SliceEndpoints {
    let mut slice = slice("prod", "db", cluster, ready);
    slice.serving = serving
        .iter()
        .map(|ip| Endpoint {
            hostname: None,
            addresses: vec![ip.parse().unwrap()],
        })
        .collect();
    slice.not_ready = serving.len() as u32;
    slice.serving_count = serving.len() as u32;
    slice
}

#[test]
fn serving_endpoints_are_kept_only_with_the_fallback_on() {
    let mut off = index();
    off.apply_slice(key("prod", "db-a"), mixed_slice("a", &[], &["10.0.9.1"]));
    let kept = off.slice(&key("prod", "db-a")).unwrap();
    assert!(kept.serving.is_empty(), "{kept:?}");
    assert_eq!(kept.serving_count, 1, "the count stays for /explain");
    let mut settings = ZoneSettings::new(Name::from_ascii("clusterset.local.").unwrap());
    settings.serve_terminating = true;
    let mut on = Index::new(settings);
    on.apply_import(import("prod", "db", headless()));
    on.apply_slice(key("prod", "db-a"), mixed_slice("a", &[], &["10.0.9.1"]));
    assert_eq!(on.slice(&key("prod", "db-a")).unwrap().serving.len(), 1);
    let (zone, _) = on.publish();
    assert_eq!(a_records(&zone, DB), Some(vec!["10.0.9.1".into()]));
    // Readiness comes back: the ready endpoint answers, the serving one not.
    on.apply_slice(
        key("prod", "db-a"),
        mixed_slice("a", &["10.0.0.1"], &["10.0.9.1"]),
    );
    let (zone, _) = on.publish();
    assert_eq!(a_records(&zone, DB), Some(vec!["10.0.0.1".into()]));
}

/// The cluster id rebuilds the local-first headless imports (and only
/// them) when it changes; readiness changes switch tiers at the next
/// publish.
#[test]
fn the_cluster_id_and_readiness_switch_local_first_answers() {
    use crate::api::locality::Locality;
    let mut index = index();
    let mut db = import("prod", "db", headless());
    db.locality = Locality::PreferSameZone;
    index.apply_import(db);
    index.apply_import(import("prod", "web", vip("10.96.0.1")));
    index.apply_slice(key("prod", "db-a"), slice("prod", "db", "a", &["10.0.0.1"]));
    index.apply_slice(key("prod", "db-b"), slice("prod", "db", "b", &["10.0.1.1"]));
    let (zone, _) = index.publish();
    let both = Some(vec!["10.0.0.1".to_string(), "10.0.1.1".into()]);
    assert_eq!(a_records(&zone, DB), both);

    index.set_own_cluster(OwnCluster::Known("a".into()));
    let (zone, stats) = index.publish();
    assert_eq!(stats.rebuilt, 1, "only the local-first headless import");
    assert_eq!(a_records(&zone, DB), Some(vec!["10.0.0.1".into()]));
    index.set_own_cluster(OwnCluster::Known("a".into()));
    assert!(!index.has_changes(), "the same id again changes nothing");

    // a's endpoint goes not ready: b's answer; back: a's again.
    index.apply_slice(key("prod", "db-a"), slice("prod", "db", "a", &[]));
    let (zone, _) = index.publish();
    assert_eq!(a_records(&zone, DB), Some(vec!["10.0.1.1".into()]));
    index.apply_slice(key("prod", "db-a"), slice("prod", "db", "a", &["10.0.0.1"]));
    let (zone, _) = index.publish();
    assert_eq!(a_records(&zone, DB), Some(vec!["10.0.0.1".into()]));

    index.set_own_cluster(OwnCluster::Unknown("gone".into()));
    let (zone, _) = index.publish();
    assert_eq!(a_records(&zone, DB), both);
    // Unknown for another reason: nothing to rebuild.
    index.set_own_cluster(OwnCluster::Unknown("still gone".into()));
    assert!(!index.has_changes());
}
