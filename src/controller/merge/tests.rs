//! Decision tables for [`super::merge`] and [`super::project`]: the
//! conformance conflict cases (C7, C8, T1, G3), determinism across
//! clusters, and the normalisations that make equal values compare equal.

use k8s_openapi::api::core::v1::{Service, ServicePort as CorePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;

/// A second-granularity timestamp `secs` after a fixed epoch.
fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

fn port(name: &str, protocol: &str, number: i32) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        protocol: Some(protocol.into()),
        app_protocol: None,
        port: number,
    }
}

/// A ClusterIP IPv4 export of one `tcp/TCP/42` port with every default.
fn export(cluster: &str, secs: i64) -> ExportedService {
    ExportedService::example(cluster, secs)
}

/// Every ordering of `0..n`.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for rest in permutations(n - 1) {
        for at in 0..=rest.len() {
            let mut p = rest.clone();
            p.insert(at, n - 1);
            out.push(p);
        }
    }
    out
}

fn reason(merged: &Merged) -> &str {
    merged.conflict.as_ref().map_or("", |c| c.reason.as_str())
}

#[test]
fn no_exporters_merge_to_nothing() {
    assert_eq!(merge(&[]), None);
}

#[test]
fn agreeing_exporters_have_no_conflict() {
    let merged = merge(&[export("b", 1), export("a", 0)]).unwrap();

    assert_eq!(merged.conflict, None);
    assert_eq!(merged.clusters, ["a", "b"]);
    assert!(merged.excluded.is_empty());
    assert_eq!(merged.winner(), "a");
    assert_eq!(merged.spec.type_, ServiceImportType::ClusterSetIp);
    assert_eq!(merged.spec.ports, [port("tcp", "TCP", 42)]);
    assert_eq!(merged.spec.ip_families, ["IPv4"]);
    assert_eq!(merged.spec.session_affinity.as_deref(), Some("None"));
    assert_eq!(
        merged.spec.internal_traffic_policy.as_deref(),
        Some("Cluster")
    );
    assert!(merged.spec.ips.is_empty());
}

#[test]
fn input_order_does_not_matter() {
    let mut a = export("a", 0);
    a.session_affinity = "ClientIP".into();
    a.session_affinity_config = Some(SessionAffinityConfig {
        client_ip: Some(ClientIPConfig {
            timeout_seconds: Some(10),
        }),
    });
    let mut b = export("b", 5);
    b.ports = vec![port("tcp", "TCP", 43), port("udp", "UDP", 53)];
    b.labels.insert("team".into(), "dns".into());
    let mut c = export("c", 5);
    c.headless = true;
    let mut d = export("d", 2);
    d.ip_families = vec!["IPv6".into(), "IPv4".into()];
    let inputs = [a, b, c, d];

    let expected = merge(&inputs).unwrap();
    for order in permutations(inputs.len()) {
        let shuffled: Vec<_> = order.iter().map(|&i| inputs[i].clone()).collect();
        assert_eq!(merge(&shuffled).unwrap(), expected, "order {order:?}");
    }
    assert_eq!(expected.clusters, ["a", "d", "b"]);
    assert_eq!(expected.excluded, ["c"]);
}

#[test]
fn equal_timestamps_are_won_by_the_lower_cluster_id() {
    let mut a = export("cluster-a", 7);
    a.session_affinity = "None".into();
    let mut b = export("cluster-b", 7);
    b.session_affinity = "ClientIP".into();
    b.session_affinity_config = Some(SessionAffinityConfig {
        client_ip: Some(ClientIPConfig {
            timeout_seconds: Some(10800),
        }),
    });

    let merged = merge(&[b.clone(), a.clone()]).unwrap();
    assert_eq!(merged, merge(&[a, b]).unwrap());
    assert_eq!(merged.winner(), "cluster-a");
    assert_eq!(merged.spec.session_affinity.as_deref(), Some("None"));
    assert_eq!(
        merged.conflict.unwrap(),
        Conflict {
            reason: "SessionAffinityConflict,SessionAffinityConfigConflict".into(),
            message: "Conflicting sessionAffinity. 1/2 clusters disagree. Using \"None\" from oldest service export in cluster \"cluster-a\".\n\
                      Conflicting sessionAffinityConfig. 1/2 clusters disagree. Using \"<none>\" from oldest service export in cluster \"cluster-a\"."
                .into(),
        }
    );
}

#[test]
fn type_conflict_keeps_the_oldest_type_and_excludes_the_other() {
    let a = export("a", 0);
    let mut b = export("b", 1);
    b.headless = true;
    // The loser's other fields do not count: no LabelsConflict from it.
    b.labels.insert("x".into(), "y".into());

    let merged = merge(&[a, b]).unwrap();

    assert_eq!(merged.spec.type_, ServiceImportType::ClusterSetIp);
    assert_eq!(merged.clusters, ["a"]);
    assert_eq!(merged.excluded, ["b"]);
    assert_eq!(reason(&merged), export_reason::TYPE_CONFLICT);
    assert_eq!(
        merged.conflict.as_ref().unwrap().message,
        "Conflicting type. 1/2 clusters disagree. Using \"ClusterSetIP\" from oldest service export in cluster \"a\"."
    );
    assert!(merged.keeps_port("a", Some("tcp")));
    assert!(!merged.keeps_port("b", Some("tcp")));
}

#[test]
fn older_headless_export_makes_the_import_headless() {
    let mut a = export("a", 0);
    a.headless = true;
    let merged = merge(&[a, export("b", 1)]).unwrap();

    assert_eq!(merged.spec.type_, ServiceImportType::Headless);
    assert_eq!(merged.excluded, ["b"]);
}

#[test]
fn added_port_is_unioned_with_a_port_conflict() {
    let a = export("a", 0);
    let mut b = export("b", 1);
    b.ports.push(port("stcp", "SCTP", 142));

    let merged = merge(&[b, a]).unwrap();

    assert_eq!(
        merged.spec.ports,
        [port("stcp", "SCTP", 142), port("tcp", "TCP", 42)]
    );
    assert_eq!(reason(&merged), export_reason::PORT_CONFLICT);
    assert_eq!(
        merged.conflict.as_ref().unwrap().message,
        "Conflicting ports. 1/2 clusters disagree. Using \"stcp/SCTP/142,tcp/TCP/42\", the union with the oldest service export in cluster \"a\" winning clashes."
    );
    assert!(merged.keeps_port("b", Some("stcp")));
    assert!(!merged.keeps_port("a", Some("stcp")));
}

#[test]
fn same_name_on_another_port_keeps_the_oldest_port() {
    let a = export("a", 0);
    let mut b = export("b", 1);
    b.ports = vec![port("tcp", "TCP", 43)];

    let merged = merge(&[b, a]).unwrap();

    assert_eq!(merged.spec.ports, [port("tcp", "TCP", 42)]);
    assert_eq!(reason(&merged), export_reason::PORT_CONFLICT);
    assert!(merged.keeps_port("a", Some("tcp")));
    assert!(!merged.keeps_port("b", Some("tcp")));
    assert!(!merged.keeps_port("c", Some("tcp")), "not an exporter");
}

#[test]
fn same_port_under_another_name_is_dropped() {
    let a = export("a", 0);
    let mut b = export("b", 1);
    b.ports = vec![port("other", "TCP", 42)];

    let merged = merge(&[a, b]).unwrap();

    assert_eq!(merged.spec.ports, [port("tcp", "TCP", 42)]);
    assert_eq!(reason(&merged), export_reason::PORT_CONFLICT);
    assert!(!merged.keeps_port("b", Some("other")));
}

#[test]
fn app_protocol_difference_is_a_port_conflict() {
    let a = export("a", 0);
    let mut b = export("b", 1);
    b.ports[0].app_protocol = Some("kubernetes.io/h2c".into());

    let merged = merge(&[a, b]).unwrap();

    assert_eq!(merged.spec.ports, [port("tcp", "TCP", 42)]);
    assert_eq!(reason(&merged), export_reason::PORT_CONFLICT);
    assert!(
        merged.keeps_port("b", Some("tcp")),
        "same protocol and number"
    );
}

#[test]
fn unnamed_ports_merge_and_are_kept() {
    let mut a = export("a", 0);
    a.ports = vec![ServicePort {
        name: None,
        protocol: Some("UDP".into()),
        app_protocol: None,
        port: 53,
    }];
    let b = ExportedService {
        cluster: "b".into(),
        ..a.clone()
    };

    let merged = merge(&[a, b]).unwrap();

    assert_eq!(merged.conflict, None);
    assert!(merged.keeps_port("b", None));
    assert!(merged.keeps_port("b", Some("")));
}

#[test]
fn labels_conflict_keeps_the_oldest_labels() {
    let mut a = export("a", 0);
    a.labels.insert("dummy-label".into(), "old".into());
    let mut b = export("b", 1);
    b.labels.insert("dummy-label".into(), "new".into());

    let merged = merge(&[b, a]).unwrap();

    assert_eq!(merged.labels["dummy-label"], "old");
    assert_eq!(reason(&merged), export_reason::LABELS_CONFLICT);
    assert_eq!(
        merged.conflict.as_ref().unwrap().message,
        "Conflicting exportedLabels. 1/2 clusters disagree. Using \"dummy-label=old\" from oldest service export in cluster \"a\"."
    );
}

#[test]
fn several_conflicts_join_in_the_fixed_order() {
    let a = export("a", 0);
    let mut b = export("b", 1);
    b.internal_traffic_policy = "Local".into();
    b.annotations.insert("k".into(), "v".into());
    b.ports = vec![port("tcp", "TCP", 43)];
    let mut c = export("c", 2);
    c.headless = true;

    let merged = merge(&[c, b, a]).unwrap();
    let conflict = merged.conflict.unwrap();

    assert_eq!(
        conflict.reason,
        "PortConflict,TypeConflict,AnnotationsConflict,InternalTrafficPolicyConflict"
    );
    let lines: Vec<&str> = conflict.message.lines().collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[0].starts_with("Conflicting ports. 1/2 "));
    assert!(lines[1].starts_with("Conflicting type. 1/3 "));
    assert!(lines[2].contains("Using \"<none>\""));
    assert_eq!(
        lines[3],
        "Conflicting internalTrafficPolicy. 1/2 clusters disagree. Using \"Cluster\" from oldest service export in cluster \"a\"."
    );
}

#[test]
fn two_conflicts_give_two_reasons_and_two_lines() {
    let a = export("a", 0);
    let mut b = export("b", 1);
    b.traffic_distribution = Some("PreferClose".into());
    b.labels.insert("l".into(), "1".into());

    let conflict = merge(&[a, b]).unwrap().conflict.unwrap();

    assert_eq!(
        conflict.reason,
        "LabelsConflict,TrafficDistributionConflict"
    );
    assert_eq!(conflict.message.split('\n').count(), 2);
}

#[test]
fn long_values_are_clipped_in_messages() {
    let mut a = export("a", 0);
    a.annotations.insert("k".into(), "v".repeat(1000));
    let conflict = merge(&[a, export("b", 1)]).unwrap().conflict.unwrap();
    assert!(conflict.message.len() < 400, "{}", conflict.message.len());
}

#[test]
fn ip_families_are_intersected_in_the_oldest_order() {
    let mut a = export("a", 0);
    a.ip_families = vec!["IPv6".into(), "IPv4".into()];
    let b = export("b", 1);

    let merged = merge(&[a, b]).unwrap();

    assert_eq!(merged.spec.ip_families, ["IPv4"]);
    assert_eq!(reason(&merged), export_reason::IP_FAMILY_CONFLICT);
    assert_eq!(
        merged.conflict.as_ref().unwrap().message,
        "Conflicting ipFamilies. 1/2 clusters disagree. Using \"IPv4\", the families common to all, in the order of the oldest service export in cluster \"a\"."
    );
}

#[test]
fn disjoint_ip_families_fall_back_to_the_oldest() {
    let mut a = export("a", 0);
    a.ip_families = vec!["IPv6".into()];
    let merged = merge(&[a, export("b", 1)]).unwrap();

    assert_eq!(merged.spec.ip_families, ["IPv6"]);
    assert_eq!(reason(&merged), export_reason::IP_FAMILY_CONFLICT);
    assert_eq!(
        merged.conflict.as_ref().unwrap().message,
        "Conflicting ipFamilies. 1/2 clusters disagree. No family is common to all; using \"IPv6\" from oldest service export in cluster \"a\"."
    );
}

#[test]
fn same_families_in_another_order_do_not_conflict() {
    let mut a = export("a", 0);
    a.ip_families = vec!["IPv4".into(), "IPv6".into()];
    let mut b = export("b", 1);
    b.ip_families = vec!["IPv6".into(), "IPv4".into()];

    let merged = merge(&[b, a]).unwrap();

    assert_eq!(merged.conflict, None);
    assert_eq!(merged.spec.ip_families, ["IPv4", "IPv6"]);
}

// --- project() ---

fn service(spec: ServiceSpec) -> Service {
    Service {
        spec: Some(spec),
        ..Default::default()
    }
}

fn service_export(secs: i64) -> ServiceExport {
    let mut export = ServiceExport::new("hello", Default::default());
    export.metadata.creation_timestamp = Some(Time(at(secs)));
    export
}

fn core_port(name: Option<&str>, protocol: Option<&str>, number: i32) -> CorePort {
    CorePort {
        name: name.map(Into::into),
        protocol: protocol.map(Into::into),
        port: number,
        ..Default::default()
    }
}

#[test]
fn missing_service_is_no_service() {
    assert_eq!(
        project("a", &service_export(0), None),
        Err(Invalid::NoService)
    );
    assert_eq!(Invalid::NoService.reason(), "NoService");
    assert_eq!(Invalid::NoService.message(), "Service doesn't exist");
}

#[test]
fn external_name_service_is_an_invalid_type() {
    let svc = service(ServiceSpec {
        type_: Some("ExternalName".into()),
        external_name: Some("example.com".into()),
        ..Default::default()
    });
    let invalid = project("a", &service_export(0), Some(&svc)).unwrap_err();
    assert_eq!(invalid, Invalid::ExternalName);
    assert_eq!(invalid.reason(), "InvalidServiceType");
}

#[test]
fn node_port_and_load_balancer_export_as_cluster_set_ip() {
    for type_ in ["ClusterIP", "NodePort", "LoadBalancer"] {
        let svc = service(ServiceSpec {
            type_: Some(type_.into()),
            cluster_ip: Some("10.0.0.1".into()),
            ..Default::default()
        });
        let exported = project("a", &service_export(0), Some(&svc)).unwrap();
        assert!(!exported.headless, "{type_}");
        let merged = merge(&[exported]).unwrap();
        assert_eq!(
            merged.spec.type_,
            ServiceImportType::ClusterSetIp,
            "{type_}"
        );
    }
}

#[test]
fn headless_service_projects_as_headless() {
    let svc = service(ServiceSpec {
        cluster_ip: Some("None".into()),
        ..Default::default()
    });
    let exported = project("a", &service_export(0), Some(&svc)).unwrap();
    assert!(exported.headless);
    assert_eq!(
        merge(&[exported]).unwrap().spec.type_,
        ServiceImportType::Headless
    );
}

#[test]
fn projection_fills_defaults_and_copies_exported_metadata() {
    let mut export = service_export(3);
    export
        .spec
        .exported_labels
        .insert("team".into(), "dns".into());
    export.metadata.labels = Some([("own".to_string(), "no".to_string())].into());
    let svc = service(ServiceSpec {
        cluster_ip: Some("10.0.0.1".into()),
        ports: Some(vec![core_port(Some(""), None, 80)]),
        session_affinity: Some("ClientIP".into()),
        ip_families: Some(vec!["IPv6".into(), "IPv4".into()]),
        ..Default::default()
    });

    let exported = project("a", &export, Some(&svc)).unwrap();

    assert_eq!(exported.created, at(3));
    assert_eq!(
        exported.ports,
        [ServicePort {
            name: None,
            protocol: Some("TCP".into()),
            app_protocol: None,
            port: 80,
        }]
    );
    assert_eq!(
        exported.session_affinity_config,
        Some(SessionAffinityConfig {
            client_ip: Some(ClientIPConfig {
                timeout_seconds: Some(10800)
            })
        })
    );
    assert_eq!(exported.internal_traffic_policy, "Cluster");
    assert_eq!(exported.ip_families, ["IPv6", "IPv4"]);
    assert_eq!(exported.labels, [("team".into(), "dns".into())].into());
    assert!(exported.annotations.is_empty());
}

#[test]
fn unset_internal_traffic_policy_equals_cluster() {
    let unset = service(ServiceSpec::default());
    let explicit = service(ServiceSpec {
        internal_traffic_policy: Some("Cluster".into()),
        ..Default::default()
    });
    let a = project("a", &service_export(0), Some(&unset)).unwrap();
    let b = project("b", &service_export(1), Some(&explicit)).unwrap();
    assert_eq!(merge(&[a, b]).unwrap().conflict, None);
}

#[test]
fn prefer_same_zone_equals_prefer_close() {
    let same_zone = service(ServiceSpec {
        traffic_distribution: Some("PreferSameZone".into()),
        ..Default::default()
    });
    let close = service(ServiceSpec {
        traffic_distribution: Some("PreferClose".into()),
        ..Default::default()
    });
    let a = project("a", &service_export(0), Some(&same_zone)).unwrap();
    let b = project("b", &service_export(1), Some(&close)).unwrap();

    let merged = merge(&[a, b]).unwrap();

    assert_eq!(merged.conflict, None);
    assert_eq!(
        merged.spec.traffic_distribution.as_deref(),
        Some("PreferClose")
    );
}

#[test]
fn explicit_default_affinity_timeout_equals_unset() {
    let unset = service(ServiceSpec {
        session_affinity: Some("ClientIP".into()),
        ..Default::default()
    });
    let explicit = service(ServiceSpec {
        session_affinity: Some("ClientIP".into()),
        session_affinity_config: Some(SessionAffinityConfig {
            client_ip: Some(ClientIPConfig {
                timeout_seconds: Some(10800),
            }),
        }),
        ..Default::default()
    });
    let a = project("a", &service_export(0), Some(&unset)).unwrap();
    let b = project("b", &service_export(1), Some(&explicit)).unwrap();
    assert_eq!(merge(&[a, b]).unwrap().conflict, None);
}

fn decision<'a>(decisions: &'a [FieldDecision], field: &str) -> &'a FieldDecision {
    decisions
        .iter()
        .find(|d| d.field == field)
        .unwrap_or_else(|| panic!("no decision for {field}: {decisions:?}"))
}

#[test]
fn field_decisions_name_who_gave_and_who_lost_each_field() {
    let a = export("a", 0);
    let mut b = export("b", 10);
    b.session_affinity = "ClientIP".into();
    b.ports = vec![port("tcp", "TCP", 43), port("metrics", "TCP", 9090)];
    let mut c = export("c", 20);
    c.headless = true;
    let exports = [c, b, a];
    let merged = merge(&exports).unwrap();
    let decisions = field_decisions(&exports, &merged);

    let type_ = decision(&decisions, "type");
    assert_eq!(
        (
            type_.value.as_str(),
            type_.from.clone(),
            type_.overruled.clone()
        ),
        (
            "ClusterSetIP",
            vec!["a".into(), "b".into()],
            vec!["c".into()]
        )
    );
    // The type loser takes no part in the other fields.
    let affinity = decision(&decisions, "sessionAffinity");
    assert_eq!(affinity.value, "None");
    assert_eq!(affinity.from, ["a"]);
    assert_eq!(affinity.overruled, ["b"]);
    let ports: Vec<(&str, Vec<String>, Vec<String>)> = decisions
        .iter()
        .filter(|d| d.field == "ports")
        .map(|d| (d.value.as_str(), d.from.clone(), d.overruled.clone()))
        .collect();
    assert_eq!(
        ports,
        [
            ("metrics/TCP/9090", vec!["b".to_owned()], vec![]),
            ("tcp/TCP/42", vec!["a".to_owned()], vec!["b".to_owned()]),
        ]
    );
}

// --- validity: what is merged, and what the merge makes ---

fn unnamed(protocol: &str, number: i32) -> ServicePort {
    ServicePort {
        name: None,
        protocol: Some(protocol.into()),
        app_protocol: None,
        port: number,
    }
}

#[test]
fn an_unnamed_port_beside_named_ones_is_a_port_conflict_not_a_union() {
    // Issue 44 (H1), between honest clusters: a's single unnamed TCP/80 and
    // b's `metrics` TCP/9090 are both valid Services; their union is not.
    let mut a = export("a", 0);
    a.ports = vec![unnamed("TCP", 80)];
    let mut b = export("b", 1);
    b.ports = vec![port("metrics", "TCP", 9090)];

    let merged = merge(&[a.clone(), b.clone()]).unwrap();
    assert_eq!(
        merged.spec.ports, a.ports,
        "the oldest exporter's ports stand"
    );
    assert_eq!(reason(&merged), "PortConflict");
    assert!(merged.check().is_ok());
    assert!(merged.keeps_port("a", None));
    assert!(!merged.keeps_port("b", Some("metrics")));
    assert_eq!(merged.clusters, ["a", "b"], "b still takes part");

    // The other way round: the named port is older and stands.
    b.created = at(-1);
    let merged = merge(&[a, b.clone()]).unwrap();
    assert_eq!(merged.spec.ports, b.ports);
    assert_eq!(reason(&merged), "PortConflict");
    assert!(merged.check().is_ok());
}

#[test]
fn a_service_breaking_a_service_rule_is_invalid_with_the_field_named() {
    let cases: [(&str, ServiceSpec, &str); 5] = [
        (
            "protocol",
            ServiceSpec {
                ports: Some(vec![core_port(None, Some("XTP"), 80)]),
                ..Default::default()
            },
            "ports[0].protocol",
        ),
        (
            "port 0",
            ServiceSpec {
                ports: Some(vec![core_port(None, None, 0)]),
                ..Default::default()
            },
            "ports[0].port",
        ),
        (
            "families",
            ServiceSpec {
                ip_families: Some(vec!["IPv4".into(), "IPv4".into()]),
                ..Default::default()
            },
            "ipFamilies[1]",
        ),
        (
            "timeout",
            ServiceSpec {
                session_affinity: Some("ClientIP".into()),
                session_affinity_config: Some(SessionAffinityConfig {
                    client_ip: Some(ClientIPConfig {
                        timeout_seconds: Some(0),
                    }),
                }),
                ..Default::default()
            },
            "sessionAffinityConfig.clientIP.timeoutSeconds",
        ),
        (
            "type",
            ServiceSpec {
                type_: Some("Tunnel".into()),
                ..Default::default()
            },
            "type",
        ),
    ];
    for (case, spec, field) in cases {
        match project("a", &service_export(0), Some(&service(spec))) {
            Err(Invalid::Field(violation)) => assert_eq!(violation.field, field, "{case}"),
            other => panic!("{case}: {other:?}"),
        }
    }
    let mut export = service_export(0);
    export.spec.exported_annotations.insert(
        "multicluster.kubernetes.io/derived-service".into(),
        "kubernetes".into(),
    );
    let invalid = project("a", &export, Some(&service(ServiceSpec::default()))).unwrap_err();
    assert_eq!(invalid.reason(), "InvalidExport");
    assert!(
        invalid.message().contains("reserved"),
        "{}",
        invalid.message()
    );
}

/// A small deterministic generator (xorshift64*), so the property test
/// needs no dependency and every failure is reproducible from its case.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len() as u64) as usize]
    }
}

/// A random export that keeps to the Service rules, from a small pool of
/// names, numbers and values so exporters often overlap and clash.
fn valid_export(rng: &mut Rng, cluster: &str) -> ExportedService {
    let mut export = export(cluster, rng.below(4) as i64);
    export.headless = rng.below(4) == 0;
    let count = rng.below(4) as usize;
    let named = count > 1 || rng.below(2) == 0;
    export.ports = Vec::new();
    while export.ports.len() < count {
        let port = ServicePort {
            name: named.then(|| {
                rng.pick(&["http", "https", "metrics", "dns", "grpc"])
                    .into()
            }),
            protocol: Some(rng.pick(&["TCP", "UDP", "SCTP"]).into()),
            app_protocol: (rng.below(3) == 0).then(|| rng.pick(&["h2c", "example.com/x"]).into()),
            port: [53, 80, 443, 9090][rng.below(4) as usize],
        };
        let mut with = export.ports.clone();
        with.push(port);
        if service_rules::ports(&with).is_ok() {
            export.ports = with;
        } else if rng.below(8) == 0 {
            break;
        }
    }
    export.session_affinity = rng.pick(&["None", "ClientIP"]).into();
    export.session_affinity_config =
        (export.session_affinity == "ClientIP").then(|| SessionAffinityConfig {
            client_ip: Some(ClientIPConfig {
                timeout_seconds: Some([1, 60, 10800, 86400][rng.below(4) as usize]),
            }),
        });
    export.internal_traffic_policy = rng.pick(&["Cluster", "Local"]).into();
    export.traffic_distribution = (rng.below(2) == 0).then(|| rng.pick(&["PreferClose"]).into());
    export.ip_families = match rng.below(5) {
        0 => vec![],
        1 => vec!["IPv6".into()],
        2 => vec!["IPv4".into(), "IPv6".into()],
        3 => vec!["IPv6".into(), "IPv4".into()],
        _ => vec!["IPv4".into()],
    };
    if rng.below(3) == 0 {
        export.labels.insert(
            rng.pick(&["team", "app.kubernetes.io/name"]).into(),
            "x".into(),
        );
    }
    export.check().expect("the generator makes valid exports");
    export
}

#[test]
fn any_merge_of_valid_exports_is_a_valid_service() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for case in 0..20_000 {
        let count = 1 + rng.below(4) as usize;
        let exports: Vec<ExportedService> = (0..count)
            .map(|i| valid_export(&mut rng, &format!("c{i}")))
            .collect();
        let merged = merge(&exports).unwrap();
        if let Err(violation) = merged.check() {
            panic!(
                "case {case}: {violation}\n{exports:#?}\nmerged {:#?}",
                merged.spec
            );
        }
    }
}

#[test]
fn the_union_stops_at_the_port_cap() {
    let many = |cluster: &str, from: i32| {
        let mut e = export(cluster, from as i64);
        e.ports = (from..from + 60)
            .map(|i| port(&format!("p{i}"), "TCP", i))
            .collect();
        e
    };
    let merged = merge(&[many("a", 1), many("b", 61)]).unwrap();
    assert_eq!(merged.spec.ports.len(), MAX_PORTS);
    assert_eq!(reason(&merged), "PortConflict");
}
