//! Zone building and lookup, without any server: projections in, lookups out.

use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::rr::{Name, RData, RecordType};

use super::*;
use crate::api::ServiceImportType;
use crate::api::ServiceRef;
use crate::model::{Endpoint, ImportedService, Port, PortProtocol, SliceEndpoints};

fn settings() -> ZoneSettings {
    ZoneSettings::new(Name::from_ascii("clusterset.local.").unwrap())
}

fn port(name: Option<&str>, protocol: PortProtocol, number: u16) -> Port {
    Port {
        name: name.map(String::from),
        protocol,
        port: number,
    }
}

fn cluster_set_ip(ns: &str, name: &str, ips: &[&str], ports: Vec<Port>) -> ImportedService {
    ImportedService {
        service: ServiceRef::new(ns, name),
        import_type: ServiceImportType::ClusterSetIp,
        ips: ips.iter().map(|i| i.parse().unwrap()).collect(),
        ports,
        locality: Default::default(),
    }
}

fn headless(ns: &str, name: &str, ports: Vec<Port>) -> ImportedService {
    ImportedService {
        service: ServiceRef::new(ns, name),
        import_type: ServiceImportType::Headless,
        ips: vec![],
        ports,
        locality: Default::default(),
    }
}

fn endpoint(hostname: Option<&str>, addresses: &[&str]) -> Endpoint {
    Endpoint {
        hostname: hostname.map(Into::into),
        addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
    }
}

fn slice(ns: &str, service: &str, cluster: &str, endpoints: Vec<Endpoint>) -> SliceEndpoints {
    SliceEndpoints {
        service: ServiceRef::new(ns, service),
        cluster: cluster.into(),
        ports: Arc::from([]),
        endpoints: endpoints.into(),
        not_ready: 0,
        serving: Default::default(),
        serving_count: 0,
    }
}

fn zone_of(services: &[(ImportedService, Vec<SliceEndpoints>)]) -> Zone {
    let settings = settings();
    let mut zone = Zone::new(settings.clone());
    for (service, slices) in services {
        let refs: Vec<&SliceEndpoints> = slices.iter().collect();
        let built = ServiceZone::build(service, &refs, &settings, None);
        zone.set_service(&service.service, Some(Arc::new(built)));
    }
    zone
}

/// Looks up a dotted name and renders the answer data, sorted.
fn answer(zone: &Zone, qname: &str, rtype: RecordType) -> Result<Vec<String>, &'static str> {
    zone.answer_texts(qname, rtype)
}

fn tcp(name: &str, number: u16) -> Port {
    port(Some(name), PortProtocol::Tcp, number)
}

#[test]
fn cluster_set_ip_answers_one_record_per_ip_and_family() {
    let zone = zone_of(&[(
        cluster_set_ip(
            "prod",
            "web",
            &["10.0.0.1", "fd00::1"],
            vec![tcp("http", 80)],
        ),
        vec![],
    )]);
    assert_eq!(
        answer(&zone, "web.prod.svc.clusterset.local.", RecordType::A),
        Ok(vec!["10.0.0.1".into()])
    );
    assert_eq!(
        answer(&zone, "web.prod.svc.clusterset.local.", RecordType::AAAA),
        Ok(vec!["fd00::1".into()])
    );
    assert_eq!(
        answer(&zone, "web.prod.svc.clusterset.local.", RecordType::TXT),
        Err("NODATA")
    );
}

#[test]
fn cluster_set_ip_never_answers_endpoint_addresses() {
    let slices = vec![slice(
        "prod",
        "web",
        "a",
        vec![endpoint(Some("pod"), &["10.9.9.9"])],
    )];
    let zone = zone_of(&[(
        cluster_set_ip("prod", "web", &["10.0.0.1"], vec![tcp("http", 80)]),
        slices,
    )]);
    assert_eq!(
        answer(&zone, "web.prod.svc.clusterset.local.", RecordType::A),
        Ok(vec!["10.0.0.1".into()])
    );
    assert_eq!(
        answer(&zone, "pod.a.web.prod.svc.clusterset.local.", RecordType::A),
        Err("NXDOMAIN")
    );
}

#[test]
fn import_without_ips_exists_without_addresses() {
    let zone = zone_of(&[(
        cluster_set_ip("prod", "web", &[], vec![tcp("http", 80)]),
        vec![],
    )]);
    assert_eq!(
        answer(&zone, "web.prod.svc.clusterset.local.", RecordType::A),
        Err("NODATA")
    );
}

#[test]
fn named_ports_get_srv_and_unnamed_ports_do_not() {
    let ports = vec![
        tcp("http", 80),
        port(None, PortProtocol::Tcp, 8080),
        port(Some("dns"), PortProtocol::Udp, 53),
    ];
    let zone = zone_of(&[(cluster_set_ip("prod", "web", &["10.0.0.1"], ports), vec![])]);
    assert_eq!(
        answer(
            &zone,
            "_http._tcp.web.prod.svc.clusterset.local.",
            RecordType::SRV
        ),
        Ok(vec!["0 100 80 web.prod.svc.clusterset.local.".into()])
    );
    assert_eq!(
        answer(
            &zone,
            "_dns._udp.web.prod.svc.clusterset.local.",
            RecordType::SRV
        ),
        Ok(vec!["0 100 53 web.prod.svc.clusterset.local.".into()])
    );
    assert_eq!(
        answer(
            &zone,
            "_dns._tcp.web.prod.svc.clusterset.local.",
            RecordType::SRV
        ),
        Err("NXDOMAIN")
    );
    // The protocol label is an empty non-terminal.
    assert_eq!(
        answer(
            &zone,
            "_tcp.web.prod.svc.clusterset.local.",
            RecordType::SRV
        ),
        Err("NODATA")
    );
    // The bare name lists every port number once, named or not.
    assert_eq!(
        answer(&zone, "web.prod.svc.clusterset.local.", RecordType::SRV)
            .unwrap()
            .len(),
        3
    );
}

#[test]
fn bare_name_srv_merges_tcp_and_udp_on_the_same_port() {
    let ports = vec![tcp("tcp", 42), port(Some("udp"), PortProtocol::Udp, 42)];
    let zone = zone_of(&[(cluster_set_ip("ns", "hello", &["10.0.0.1"], ports), vec![])]);
    assert_eq!(
        answer(&zone, "hello.ns.svc.clusterset.local.", RecordType::SRV),
        Ok(vec!["0 100 42 hello.ns.svc.clusterset.local.".into()])
    );
}

#[test]
fn srv_additionals_carry_the_target_addresses() {
    let zone = zone_of(&[(
        cluster_set_ip(
            "prod",
            "web",
            &["10.0.0.1", "fd00::1"],
            vec![tcp("http", 80)],
        ),
        vec![],
    )]);
    let name = Name::from_ascii("_http._tcp.web.prod.svc.clusterset.local.").unwrap();
    let labels: Vec<&[u8]> = name.iter().collect();
    let Lookup::Found(rrset) = zone.lookup(&labels, RecordType::SRV) else {
        panic!("no SRV")
    };
    let glue: Vec<RecordType> = rrset
        .records(&name)
        .unwrap()
        .additionals
        .iter()
        .map(|r| r.record_type())
        .collect();
    assert_eq!(glue, vec![RecordType::A, RecordType::AAAA]);
}

fn db_slices() -> Vec<SliceEndpoints> {
    let mut east = slice(
        "prod",
        "db",
        "east",
        vec![
            endpoint(Some("db-0"), &["10.1.0.1"]),
            endpoint(Some("db-1"), &["10.1.0.2"]),
        ],
    );
    east.ports = Arc::from([tcp("pg", 5432)]);
    let mut east6 = slice(
        "prod",
        "db",
        "east",
        vec![endpoint(Some("db-0"), &["fd00::1"])],
    );
    east6.ports = Arc::from([tcp("pg", 5432)]);
    let mut west = slice(
        "prod",
        "db",
        "west",
        vec![endpoint(Some("db-0"), &["10.2.0.1"])],
    );
    // 10.2.0.9 is not ready: the model keeps only its count.
    west.not_ready = 1;
    west.ports = Arc::from([tcp("pg", 5432)]);
    vec![east, east6, west]
}

#[test]
fn headless_answers_exactly_the_ready_endpoints_of_all_clusters() {
    let zone = zone_of(&[(headless("prod", "db", vec![tcp("pg", 5432)]), db_slices())]);
    assert_eq!(
        answer(&zone, "db.prod.svc.clusterset.local.", RecordType::A),
        Ok(vec![
            "10.1.0.1".into(),
            "10.1.0.2".into(),
            "10.2.0.1".into()
        ])
    );
    assert_eq!(
        answer(&zone, "db.prod.svc.clusterset.local.", RecordType::AAAA),
        Ok(vec!["fd00::1".into()])
    );
}

#[test]
fn per_endpoint_names_carry_all_addresses_of_that_endpoint() {
    let zone = zone_of(&[(headless("prod", "db", vec![]), db_slices())]);
    assert_eq!(
        answer(
            &zone,
            "db-0.east.db.prod.svc.clusterset.local.",
            RecordType::A
        ),
        Ok(vec!["10.1.0.1".into()])
    );
    assert_eq!(
        answer(
            &zone,
            "db-0.east.db.prod.svc.clusterset.local.",
            RecordType::AAAA
        ),
        Ok(vec!["fd00::1".into()])
    );
    assert_eq!(
        answer(
            &zone,
            "db-0.west.db.prod.svc.clusterset.local.",
            RecordType::A
        ),
        Ok(vec!["10.2.0.1".into()])
    );
    assert_eq!(
        answer(
            &zone,
            "db-1.west.db.prod.svc.clusterset.local.",
            RecordType::A
        ),
        Err("NXDOMAIN")
    );
    // A not-ready endpoint has no name, with or without a hostname.
    assert_eq!(
        answer(
            &zone,
            "10-2-0-9.west.db.prod.svc.clusterset.local.",
            RecordType::A
        ),
        Err("NXDOMAIN")
    );
}

#[test]
fn endpoints_without_hostname_are_named_by_dashed_address() {
    let slices = vec![
        slice("prod", "db", "east", vec![endpoint(None, &["10.1.0.7"])]),
        {
            let mut s = slice("prod", "db", "east", vec![endpoint(None, &["fd00::7"])]);
            s.cluster = "east".into();
            s
        },
    ];
    let zone = zone_of(&[(headless("prod", "db", vec![tcp("pg", 5432)]), slices)]);
    assert_eq!(
        answer(
            &zone,
            "10-1-0-7.east.db.prod.svc.clusterset.local.",
            RecordType::A
        ),
        Ok(vec!["10.1.0.7".into()])
    );
    assert_eq!(
        answer(
            &zone,
            "fd00--7.east.db.prod.svc.clusterset.local.",
            RecordType::AAAA
        ),
        Ok(vec!["fd00::7".into()])
    );
}

#[test]
fn cluster_label_is_an_empty_non_terminal() {
    let zone = zone_of(&[(headless("prod", "db", vec![]), db_slices())]);
    assert_eq!(
        answer(&zone, "east.db.prod.svc.clusterset.local.", RecordType::A),
        Err("NODATA")
    );
    assert_eq!(
        answer(&zone, "north.db.prod.svc.clusterset.local.", RecordType::A),
        Err("NXDOMAIN")
    );
}

#[test]
fn headless_srv_has_one_record_per_ready_endpoint_and_port() {
    let zone = zone_of(&[(headless("prod", "db", vec![tcp("pg", 5432)]), db_slices())]);
    let want = vec![
        "0 33 5432 db-0.east.db.prod.svc.clusterset.local.".to_string(),
        "0 33 5432 db-0.west.db.prod.svc.clusterset.local.".to_string(),
        "0 33 5432 db-1.east.db.prod.svc.clusterset.local.".to_string(),
    ];
    assert_eq!(
        answer(
            &zone,
            "_pg._tcp.db.prod.svc.clusterset.local.",
            RecordType::SRV
        ),
        Ok(want.clone())
    );
    assert_eq!(
        answer(&zone, "db.prod.svc.clusterset.local.", RecordType::SRV),
        Ok(want)
    );
}

#[test]
fn headless_without_ready_endpoints_is_nxdomain() {
    let mut east = slice("prod", "db", "east", vec![]);
    east.not_ready = 1;
    let slices = vec![east];
    let zone = zone_of(&[(headless("prod", "db", vec![tcp("pg", 5432)]), slices)]);
    for rtype in [RecordType::A, RecordType::AAAA, RecordType::SRV] {
        assert_eq!(
            answer(&zone, "db.prod.svc.clusterset.local.", rtype),
            Err("NXDOMAIN")
        );
    }
    assert_eq!(
        answer(&zone, "prod.svc.clusterset.local.", RecordType::A),
        Err("NXDOMAIN")
    );
}

#[test]
fn headless_cap_keeps_the_same_endpoints_for_a_and_aaaa() {
    let mut settings = settings();
    settings.max_records = 2;
    let v4 = slice(
        "prod",
        "db",
        "east",
        (0..5)
            .map(|i| endpoint(Some(&format!("db-{i}")), &[&format!("10.0.0.{i}")]))
            .collect(),
    );
    let v6 = slice(
        "prod",
        "db",
        "east",
        (0..5)
            .map(|i| endpoint(Some(&format!("db-{i}")), &[&format!("fd00::{i}")]))
            .collect(),
    );
    let built = ServiceZone::build(
        &headless("prod", "db", vec![tcp("pg", 1)]),
        &[&v4, &v6],
        &settings,
        None,
    );
    let mut zone = Zone::new(settings);
    zone.set_service(&ServiceRef::new("prod", "db"), Some(Arc::new(built)));
    let a = answer(&zone, "db.prod.svc.clusterset.local.", RecordType::A).unwrap();
    let aaaa = answer(&zone, "db.prod.svc.clusterset.local.", RecordType::AAAA).unwrap();
    assert_eq!(a, vec!["10.0.0.0", "10.0.0.1"]);
    assert_eq!(aaaa, vec!["fd00::", "fd00::1"]);
    assert_eq!(
        answer(&zone, "db.prod.svc.clusterset.local.", RecordType::SRV)
            .unwrap()
            .len(),
        2
    );
    // Per-endpoint names are not capped.
    assert!(
        answer(
            &zone,
            "db-4.east.db.prod.svc.clusterset.local.",
            RecordType::A
        )
        .is_ok()
    );
}

#[test]
fn apex_namespace_and_version_names() {
    let zone = zone_of(&[(cluster_set_ip("prod", "web", &["10.0.0.1"], vec![]), vec![])]);
    assert_eq!(
        answer(&zone, "dns-version.clusterset.local.", RecordType::TXT),
        Ok(vec!["1.0.0".into()])
    );
    assert!(answer(&zone, "clusterset.local.", RecordType::SOA).is_ok());
    assert_eq!(
        answer(&zone, "clusterset.local.", RecordType::NS),
        Ok(vec!["ns.dns.clusterset.local.".into()])
    );
    for (qname, why) in [
        ("clusterset.local.", "NODATA"),
        ("svc.clusterset.local.", "NODATA"),
        ("prod.svc.clusterset.local.", "NODATA"),
        ("dev.svc.clusterset.local.", "NXDOMAIN"),
        ("nope.clusterset.local.", "NXDOMAIN"),
        ("web.prod.svc.cluster.local.", "REFUSED"),
        ("local.", "REFUSED"),
    ] {
        assert_eq!(answer(&zone, qname, RecordType::A), Err(why), "{qname}");
    }
}

#[test]
fn removing_the_last_service_of_a_namespace_removes_the_namespace() {
    let mut zone = zone_of(&[(cluster_set_ip("prod", "web", &["10.0.0.1"], vec![]), vec![])]);
    zone.set_service(&ServiceRef::new("prod", "web"), None);
    assert_eq!(
        answer(&zone, "prod.svc.clusterset.local.", RecordType::A),
        Err("NXDOMAIN")
    );
    assert_eq!(zone.service_count(), 0);
}

#[test]
fn precompiled_answer_lengths_match_the_records() {
    let zone = zone_of(&[(
        cluster_set_ip("prod", "web", &["10.0.0.1"], vec![tcp("http", 80)]),
        vec![],
    )]);
    let name = Name::from_ascii("web.prod.svc.clusterset.local.").unwrap();
    let labels: Vec<&[u8]> = name.iter().collect();
    let Lookup::Found(rrset) = zone.lookup(&labels, RecordType::A) else {
        panic!()
    };
    // One A record whose owner is a pointer to the question: 2 + 10 + 4 bytes.
    assert_eq!(rrset.wire.tail.len(), 16);
    assert_eq!(rrset.wire.answer_count, 1);
    let ip: IpAddr = match &rrset.records(&name).unwrap().answers[0].data {
        RData::A(a) => IpAddr::V4(a.0),
        other => panic!("{other:?}"),
    };
    assert_eq!(ip, "10.0.0.1".parse::<IpAddr>().unwrap());
}

#[test]
fn master_file_lists_every_record() {
    let zone = zone_of(&[(headless("prod", "db", vec![tcp("pg", 5432)]), db_slices())]);
    let text = master_file(&zone);
    assert!(text.starts_with("$ORIGIN clusterset.local.\n"));
    assert!(
        text.contains("db-0.east.db.prod.svc.clusterset.local. 5 IN AAAA fd00::1"),
        "{text}"
    );
    assert!(text.contains("IN SOA"));
    assert!(text.contains("\"1.0.0\""));
}

#[test]
fn the_nameserver_name_exists_only_with_addresses() {
    let zone = zone_of(&[]);
    assert_eq!(
        answer(&zone, "ns.dns.clusterset.local.", RecordType::A),
        Err("NXDOMAIN")
    );
    assert_eq!(
        answer(&zone, "dns.clusterset.local.", RecordType::A),
        Err("NXDOMAIN")
    );
    let mut settings = settings();
    settings.nameserver_addresses = vec!["10.0.0.53".parse().unwrap()];
    let zone = Zone::new(settings);
    assert_eq!(
        answer(&zone, "ns.dns.clusterset.local.", RecordType::A),
        Ok(vec!["10.0.0.53".into()])
    );
    assert_eq!(
        answer(&zone, "ns.dns.clusterset.local.", RecordType::AAAA),
        Err("NODATA")
    );
    assert_eq!(
        answer(&zone, "dns.clusterset.local.", RecordType::A),
        Err("NODATA")
    );
}

#[test]
fn the_apex_ns_answer_carries_the_nameserver_addresses_when_configured() {
    let additional = |zone: &Zone| {
        let name = Name::from_ascii("clusterset.local.").unwrap();
        let labels: Vec<&[u8]> = name.iter().collect();
        let Lookup::Found(rrset) = zone.lookup(&labels, RecordType::NS) else {
            panic!("apex NS");
        };
        let mut out: Vec<String> = rrset
            .records(&name)
            .unwrap()
            .additionals
            .iter()
            .map(|r| format!("{} {}", r.name, r.data))
            .collect();
        out.sort();
        out
    };
    assert!(additional(&zone_of(&[])).is_empty());
    let mut settings = settings();
    settings.nameserver_addresses = vec!["10.0.0.53".parse().unwrap(), "fd00::53".parse().unwrap()];
    assert_eq!(
        additional(&Zone::new(settings)),
        [
            "ns.dns.clusterset.local. 10.0.0.53",
            "ns.dns.clusterset.local. fd00::53"
        ]
    );
}

/// `count` ready endpoints `<prefix>-<i>` with one address each: endpoint
/// `i` has `10.0.<i / 256>.<i % 256>`, or `fd00::<i>` when `v6`.
fn numbered_endpoints(count: usize, prefix: &str, v6: bool) -> Vec<Endpoint> {
    (0..count)
        .map(|i| {
            let ip = if v6 {
                format!("fd00::{i:x}")
            } else {
                format!("10.0.{}.{}", i / 256, i % 256)
            };
            endpoint(Some(&format!("{prefix}-{i}")), &[&ip])
        })
        .collect()
}

/// A headless service at the default cap with dual-stack endpoints and two
/// ports: the A and AAAA answers are whole, and the SRV answer, whose
/// records and glue exceed one DNS message, is cut to fit instead of
/// failing the build.
#[test]
fn answers_larger_than_one_dns_message_are_cut_to_fit() {
    let settings = settings();
    let count = settings.max_records;
    let endpoints = |v6| numbered_endpoints(count, "database-replica", v6);
    let v4 = slice("production", "database", "cluster-east", endpoints(false));
    let v6 = slice("production", "database", "cluster-east", endpoints(true));
    let ports = vec![tcp("postgres", 5432), tcp("metrics", 9187)];
    let built = ServiceZone::build(
        &headless("production", "database", ports),
        &[&v4, &v6],
        &settings,
        None,
    );
    let base = "database.production.svc.clusterset.local.";
    let node = built.node(b"").unwrap();
    let wire = |rtype| node.get(rtype).unwrap().wire;
    assert_eq!(usize::from(wire(RecordType::A).answer_count), count);
    assert_eq!(usize::from(wire(RecordType::AAAA).answer_count), count);
    let srv = wire(RecordType::SRV);
    assert!(usize::from(srv.answer_count) < count, "{srv:?}");
    assert!(srv.answer_count > 0);
    assert_eq!(srv.additional_count, 0, "glue is all or nothing");
    let name = Name::from_ascii(base).unwrap();
    let question_len = wire_len(&name) + 4;
    assert!(wire::HEADER_LEN + question_len + srv.tail.len() <= wire::MAX_PRECOMPILED_LEN);
    // What was kept decodes, and is a prefix of the full answer.
    let records = node.get(RecordType::SRV).unwrap().records(&name).unwrap();
    assert_eq!(records.answers.len(), usize::from(srv.answer_count));
    assert!(records.additionals.is_empty());
}

/// A per-endpoint name longer than 255 bytes (a long dotted cluster id) is
/// left out; the endpoint's address still answers for the service name and
/// the other endpoints keep their names.
#[test]
fn endpoint_names_longer_than_255_bytes_are_left_out() {
    // A valid cluster id (242 characters, at most 253) that leaves no room.
    let long_cluster = [
        "c".repeat(63),
        "d".repeat(63),
        "e".repeat(63),
        "f".repeat(50),
    ]
    .join(".");
    assert!(crate::model::is_dns_subdomain(&long_cluster));
    let slices = vec![
        slice(
            "prod",
            "db",
            &long_cluster,
            vec![endpoint(Some("db-0"), &["10.0.0.1"])],
        ),
        slice(
            "prod",
            "db",
            "east",
            vec![endpoint(Some("db-1"), &["10.0.0.2"])],
        ),
    ];
    let zone = zone_of(&[(headless("prod", "db", vec![tcp("pg", 5432)]), slices)]);
    assert_eq!(
        answer(&zone, "db.prod.svc.clusterset.local.", RecordType::A),
        Ok(vec!["10.0.0.1".into(), "10.0.0.2".into()])
    );
    assert_eq!(
        answer(
            &zone,
            "db-1.east.db.prod.svc.clusterset.local.",
            RecordType::A
        ),
        Ok(vec!["10.0.0.2".into()])
    );
    // Only the endpoint with a name is an SRV target.
    assert_eq!(
        answer(
            &zone,
            "_pg._tcp.db.prod.svc.clusterset.local.",
            RecordType::SRV
        ),
        Ok(vec![
            "0 100 5432 db-1.east.db.prod.svc.clusterset.local.".into()
        ])
    );
}

/// `db-0\.east.db...` has one label fewer than `db-0.east.db...`: it does
/// not exist, although the dotted keys of the service maps would match it.
#[test]
fn a_label_with_an_escaped_dot_matches_no_name() {
    let zone = zone_of(&[(headless("prod", "db", vec![tcp("pg", 1)]), db_slices())]);
    for name in [
        "db-0\\.east.db.prod.svc.clusterset.local.",
        "_pg\\._tcp.db.prod.svc.clusterset.local.",
        "db\\.prod.svc.clusterset.local.",
    ] {
        assert_eq!(
            answer(&zone, name, RecordType::A),
            Err("NXDOMAIN"),
            "{name}"
        );
        assert_eq!(
            answer(&zone, name, RecordType::SRV),
            Err("NXDOMAIN"),
            "{name}"
        );
    }
}

/// With `max_records` raised to 3000, 3000 dual-stack endpoints fit one
/// DNS message in A (16 bytes a record, the owner a pointer) but not in
/// AAAA (28 bytes). The subset shrinks to the endpoints that fit both, so
/// A and AAAA still hold the same endpoints.
#[test]
fn a_cut_headless_answer_keeps_the_same_subset_for_a_and_aaaa() {
    let mut settings = settings();
    settings.max_records = 3000;
    let (svc, ns) = ("s".repeat(63), "n".repeat(63));
    let count = settings.max_records;
    let hosts = |v6| numbered_endpoints(count, "h", v6);
    let v4 = slice(&ns, &svc, "east", hosts(false));
    let v6 = slice(&ns, &svc, "east", hosts(true));
    let built = ServiceZone::build(
        &headless(&ns, &svc, vec![tcp("pg", 1)]),
        &[&v4, &v6],
        &settings,
        None,
    );
    let mut zone = Zone::new(settings);
    zone.set_service(&ServiceRef::new(&ns, &svc), Some(Arc::new(built)));
    let name = format!("{svc}.{ns}.svc.clusterset.local.");
    let index = |ip: &str| -> usize {
        match ip.parse::<IpAddr>().unwrap() {
            IpAddr::V4(v4) => {
                let o = v4.octets();
                usize::from(o[2]) * 256 + usize::from(o[3])
            }
            IpAddr::V6(v6) => usize::from(v6.segments()[7]),
        }
    };
    let endpoints = |rtype| -> std::collections::BTreeSet<usize> {
        answer(&zone, &name, rtype)
            .unwrap()
            .iter()
            .map(|ip| index(ip))
            .collect()
    };
    let (a, aaaa) = (endpoints(RecordType::A), endpoints(RecordType::AAAA));
    assert!(a.len() < count, "the A answer was cut: {}", a.len());
    // As many AAAA records as fit after the header and the question.
    let question = wire_len(&Name::from_ascii(&name).unwrap()) + 4;
    assert_eq!(
        aaaa.len(),
        (wire::MAX_PRECOMPILED_LEN - wire::HEADER_LEN - question) / 28
    );
    assert_eq!(a, aaaa);
    assert!(answer(&zone, &name, RecordType::SRV).unwrap().len() <= a.len());
}

/// A zone of one headless import of `locality` with ready endpoints
/// `east-<i>` in cluster `east` and `west-<i>` in `west`, and serving
/// (terminating) ones `old-<i>`, as built in cluster `own` with the
/// fallback on or off.
fn local_first_zone(
    locality: crate::api::locality::Locality,
    own: Option<&str>,
    serve_terminating: bool,
    ready: (usize, usize),
    serving: (usize, usize),
) -> Zone {
    let mut settings = settings();
    settings.serve_terminating = serve_terminating;
    let mut service = headless("shop", "db", vec![tcp("pg", 5432)]);
    service.locality = locality;
    let cluster = |name: &str, octet: u8, ready: usize, serving: usize| {
        let mut slice = slice(
            "shop",
            "db",
            name,
            (0..ready)
                .map(|i| {
                    endpoint(
                        Some(&format!("{name}-{i}")),
                        &[&format!("10.{octet}.0.{i}")],
                    )
                })
                .collect(),
        );
        slice.serving = (0..serving)
            .map(|i| endpoint(Some(&format!("old-{i}")), &[&format!("10.{octet}.9.{i}")]))
            .collect();
        slice.not_ready = serving as u32;
        slice.serving_count = serving as u32;
        slice
    };
    let east = cluster("east", 1, ready.0, serving.0);
    let west = cluster("west", 2, ready.1, serving.1);
    let built = ServiceZone::build(&service, &[&east, &west], &settings, own);
    let mut zone = Zone::new(settings);
    zone.set_service(&service.service, Some(Arc::new(built)));
    zone
}

/// The tier of the answer at `qname`/`rtype`, and its addresses or targets.
fn tiered(zone: &Zone, qname: &str, rtype: RecordType) -> (Option<Tier>, Vec<String>) {
    let name = Name::from_ascii(qname).unwrap().to_lowercase();
    let labels: Vec<&[u8]> = name.iter().collect();
    let Lookup::Found(rrset) = zone.lookup(&labels, rtype) else {
        panic!("{qname} {rtype}: no answer");
    };
    (rrset.tier, answer(zone, qname, rtype).unwrap())
}

const DB: &str = "db.shop.svc.clusterset.local.";

#[test]
fn a_local_first_service_name_answers_this_clusters_ready_endpoints_first() {
    use crate::api::locality::Locality;
    let zone = local_first_zone(
        Locality::PreferSameZone,
        Some("east"),
        false,
        (2, 3),
        (0, 0),
    );
    assert_eq!(
        tiered(&zone, DB, RecordType::A),
        (
            Some(Tier::Local),
            vec!["10.1.0.0".into(), "10.1.0.1".into()]
        )
    );
    // SRV and per-endpoint names answer for every cluster, uncounted.
    let (tier, srv) = tiered(&zone, DB, RecordType::SRV);
    assert_eq!((tier, srv.len()), (None, 5), "{srv:?}");
    let (tier, srv) = tiered(&zone, &format!("_pg._tcp.{DB}"), RecordType::SRV);
    assert_eq!((tier, srv.len()), (None, 5), "{srv:?}");
    assert_eq!(
        tiered(&zone, &format!("west-2.west.{DB}"), RecordType::A),
        (None, vec!["10.2.0.2".into()])
    );
    // The other cluster's server answers with its own.
    let zone = local_first_zone(
        Locality::PreferSameNode,
        Some("west"),
        false,
        (2, 3),
        (0, 0),
    );
    assert_eq!(
        tiered(&zone, DB, RecordType::A),
        (
            Some(Tier::Local),
            vec!["10.2.0.0".into(), "10.2.0.1".into(), "10.2.0.2".into()]
        )
    );
    // A cluster without ready endpoints (failed over, or not exporting).
    let every = vec!["10.2.0.0".to_string(), "10.2.0.1".into(), "10.2.0.2".into()];
    let zone = local_first_zone(
        Locality::PreferSameZone,
        Some("east"),
        false,
        (0, 3),
        (0, 0),
    );
    assert_eq!(
        tiered(&zone, DB, RecordType::A),
        (Some(Tier::All), every.clone())
    );
    let zone = local_first_zone(
        Locality::PreferSameZone,
        Some("north"),
        false,
        (0, 3),
        (0, 0),
    );
    assert_eq!(tiered(&zone, DB, RecordType::A), (Some(Tier::All), every));
}

#[test]
fn spread_imports_and_an_unknown_cluster_id_answer_from_every_cluster_uncounted() {
    use crate::api::locality::Locality;
    for (locality, own) in [
        (Locality::Spread, Some("east")),
        (Locality::PreferSameZone, None),
    ] {
        let zone = local_first_zone(locality, own, true, (2, 1), (1, 1));
        let (tier, ips) = tiered(&zone, DB, RecordType::A);
        assert_eq!(
            (tier, ips),
            (
                None,
                vec!["10.1.0.0".into(), "10.1.0.1".into(), "10.2.0.0".into()]
            ),
            "{locality:?} {own:?}"
        );
        // Serving endpoints have no names while some are ready.
        assert_eq!(
            answer(&zone, &format!("old-0.east.{DB}"), RecordType::A),
            Err("NXDOMAIN")
        );
    }
}

#[test]
fn the_serving_fallback_answers_only_when_nothing_is_ready_and_only_when_on() {
    use crate::api::locality::Locality;
    // Off: serving endpoints answer nothing (the index does not even keep
    // them; here they are in the slice, and still ignored).
    let zone = local_first_zone(
        Locality::PreferSameZone,
        Some("east"),
        false,
        (0, 0),
        (1, 2),
    );
    assert_eq!(answer(&zone, DB, RecordType::A), Err("NXDOMAIN"));
    // On: this cluster's serving endpoints first at the service name ...
    let zone = local_first_zone(Locality::PreferSameZone, Some("east"), true, (0, 0), (1, 2));
    assert_eq!(
        tiered(&zone, DB, RecordType::A),
        (Some(Tier::LocalServing), vec!["10.1.9.0".into()])
    );
    // ... and every name answers from every cluster's serving endpoints.
    let (tier, srv) = tiered(&zone, DB, RecordType::SRV);
    assert_eq!((tier, srv.len()), (Some(Tier::AllServing), 3), "{srv:?}");
    assert_eq!(
        tiered(&zone, &format!("old-1.west.{DB}"), RecordType::A),
        (Some(Tier::AllServing), vec!["10.2.9.1".into()])
    );
    // Without serving endpoints here: every cluster's.
    let zone = local_first_zone(Locality::PreferSameZone, Some("east"), true, (0, 0), (0, 2));
    assert_eq!(
        tiered(&zone, DB, RecordType::A),
        (
            Some(Tier::AllServing),
            vec!["10.2.9.0".into(), "10.2.9.1".into()]
        )
    );
    // A spread import falls back the same way, every cluster at once.
    let zone = local_first_zone(Locality::Spread, Some("east"), true, (0, 0), (1, 1));
    assert_eq!(
        tiered(&zone, DB, RecordType::A),
        (
            Some(Tier::AllServing),
            vec!["10.1.9.0".into(), "10.2.9.0".into()]
        )
    );
}

/// `max_records` caps the local subset too, and SRV keeps its own subset
/// of every cluster.
#[test]
fn the_cap_applies_to_the_local_subset_and_srv_keeps_every_cluster() {
    use crate::api::locality::Locality;
    let mut settings = settings();
    settings.max_records = 2;
    let mut service = headless("shop", "db", vec![tcp("pg", 5432)]);
    service.locality = Locality::PreferSameZone;
    let hosts = |prefix: &str, octet: u8| -> Vec<Endpoint> {
        (0..3)
            .map(|i| {
                endpoint(
                    Some(&format!("{prefix}-{i}")),
                    &[&format!("10.{octet}.0.{i}")],
                )
            })
            .collect()
    };
    let west = slice("shop", "db", "west", hosts("w", 2));
    let east = slice("shop", "db", "east", hosts("e", 1));
    let built = ServiceZone::build(&service, &[&east, &west], &settings, Some("west"));
    let mut zone = Zone::new(settings);
    zone.set_service(&service.service, Some(Arc::new(built)));
    let (tier, a) = tiered(&zone, DB, RecordType::A);
    assert_eq!(tier, Some(Tier::Local));
    assert_eq!(a.len(), 2, "{a:?}");
    assert!(
        a.iter().all(|ip| ip.starts_with("10.2.")),
        "{a:?} not west's"
    );
    // SRV: the first two endpoints of every cluster in (cluster, host)
    // order: east's.
    let srv = answer(&zone, DB, RecordType::SRV).unwrap();
    assert_eq!(srv.len(), 2, "{srv:?}");
    assert!(srv.iter().all(|r| r.contains(".east.")), "{srv:?}");
}
