use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::ForZone;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::*;
use crate::api::ClusterStatus;
use crate::controller::lean::Lean;

/// `object` as the watches decode it, compacted and expanded again.
fn round_trip<K>(object: &K) -> (K, K)
where
    K: Compact + kube::Resource + serde::Serialize + Clone,
    Lean<K>: serde::de::DeserializeOwned,
{
    let lean = Lean::from_whole(object).0;
    let namespace = lean.meta().namespace.clone().unwrap_or_default();
    let name = lean.meta().name.clone().unwrap_or_default();
    let mut strings = Interner::default();
    let rest = lean.clone().compact(&mut strings);
    (lean, K::expand(&rest, &namespace, &name))
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("shop".into()),
        uid: Some("0b9c8e5e-3f0a-4a8e-9d1c-7d2b6a5f4e31".into()),
        resource_version: Some("184467".into()),
        generation: Some(3),
        creation_timestamp: Some(Time("2026-12-02T10:00:00Z".parse().unwrap())),
        labels: Some(
            [
                ("multicluster.kubernetes.io/service-name", "web"),
                ("multicluster.kubernetes.io/source-cluster", "east"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        ),
        owner_references: Some(vec![OwnerReference {
            api_version: "multicluster.x-k8s.io/v1alpha1".into(),
            kind: "ServiceImport".into(),
            name: "web".into(),
            uid: "not-a-uuid".into(),
            controller: Some(true),
            block_owner_deletion: None,
        }]),
        ..ObjectMeta::default()
    }
}

fn endpoint(address: &str) -> Endpoint {
    Endpoint {
        addresses: vec![address.into()],
        conditions: Some(EndpointConditions {
            ready: Some(true),
            serving: Some(false),
            terminating: None,
        }),
        hostname: Some("web-0".into()),
        zone: Some("zone-a".into()),
        node_name: Some("node-1".into()),
        ..Endpoint::default()
    }
}

#[test]
fn a_slice_expands_to_what_the_watch_decoded() {
    let mut odd = endpoint("fd00:0::1");
    odd.addresses.push("not an address".into());
    odd.addresses.push("10.0.0.9".into());
    odd.conditions = None;
    odd.hints = Some(EndpointHints {
        for_zones: Some(vec![ForZone {
            name: "zone-a".into(),
        }]),
        for_nodes: None,
    });
    let slice = EndpointSlice {
        metadata: meta("web-east-1"),
        address_type: "IPv6".into(),
        endpoints: vec![
            endpoint("fd00::1"),
            odd,
            Endpoint {
                addresses: vec![],
                ..Endpoint::default()
            },
        ],
        ports: Some(vec![
            EndpointPort {
                name: Some("http".into()),
                port: Some(80),
                protocol: Some("TCP".into()),
                app_protocol: Some("http".into()),
            },
            EndpointPort::default(),
        ]),
    };
    let (lean, expanded) = round_trip(&slice);
    assert_eq!(expanded, lean);
    assert_eq!(
        expanded.endpoints[1].addresses[0], "fd00:0::1",
        "text kept as written"
    );
}

#[test]
fn every_condition_combination_survives() {
    let values = [None, Some(false), Some(true)];
    for ready in values {
        for serving in values {
            for terminating in values {
                let conditions = Some(EndpointConditions {
                    ready,
                    serving,
                    terminating,
                });
                assert_eq!(Conditions::new(conditions.clone()).expand(), conditions);
            }
        }
    }
    assert_eq!(Conditions::new(None).expand(), None);
}

#[test]
fn absent_and_empty_fields_stay_apart() {
    let mut bare = EndpointSlice {
        metadata: ObjectMeta {
            name: Some("bare".into()),
            namespace: Some("shop".into()),
            labels: Some(BTreeMap::new()),
            ..ObjectMeta::default()
        },
        address_type: "IPv4".into(),
        endpoints: vec![],
        ports: Some(vec![]),
    };
    let (lean, expanded) = round_trip(&bare);
    assert_eq!(expanded, lean);
    bare.metadata.labels = None;
    bare.ports = None;
    let (lean, expanded) = round_trip(&bare);
    assert_eq!(expanded, lean);
}

#[test]
fn tokens_keep_their_text() {
    for text in [
        "0",
        "184467",
        "0184467",
        "+1",
        "18446744073709551616",
        "0b9c8e5e-3f0a-4a8e-9d1c-7d2b6a5f4e31",
        "0B9C8E5E-3F0A-4A8E-9D1C-7D2B6A5F4E31",
        "0b9c8e5e3f0a4a8e9d1c7d2b6a5f4e31",
        "0b9c8e5e-3f0a-4a8e-9d1c-7d2b6a5f4e3g",
        "",
    ] {
        assert_eq!(Token::new(text.to_owned()).text(), text);
    }
    assert!(matches!(Token::new("184467".into()), Token::Number(184467)));
    assert!(matches!(
        Token::new("0b9c8e5e-3f0a-4a8e-9d1c-7d2b6a5f4e31".into()),
        Token::Uuid(_)
    ));
}

#[test]
fn services_exports_and_imports_expand_to_what_the_watch_decoded() {
    let service = Service {
        metadata: meta("web"),
        spec: Some(ServiceSpec {
            cluster_ips: Some(vec!["10.96.0.10".into()]),
            ports: Some(vec![ServicePort {
                port: 80,
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    };
    let (lean, expanded) = round_trip(&service);
    assert_eq!(expanded, lean);

    let mut export = ServiceExport::new("web", ServiceExportSpec::default());
    export.metadata = meta("web");
    export.metadata.annotations = Some([("note".to_owned(), "kept".to_owned())].into());
    export.status = Some(ServiceExportStatus {
        conditions: vec![Condition {
            type_: "Valid".into(),
            status: "True".into(),
            reason: "Valid".into(),
            message: String::new(),
            last_transition_time: Time("2026-12-02T10:00:00Z".parse().unwrap()),
            observed_generation: Some(3),
        }],
    });
    let (lean, expanded) = round_trip(&export);
    assert_eq!(expanded, lean);

    let mut import = ServiceImport::new(
        "web",
        serde_json::from_value::<ServiceImportSpec>(serde_json::json!({
            "type": "Headless",
            "ports": [{"port": 80, "protocol": "TCP"}],
        }))
        .unwrap(),
    );
    import.metadata = meta("web");
    import.status = Some(ServiceImportStatus {
        clusters: vec![ClusterStatus {
            cluster: "east".into(),
        }],
        ..ServiceImportStatus::default()
    });
    let (lean, expanded) = round_trip(&import);
    assert_eq!(expanded, lean);
}

#[test]
fn a_published_service_expands_to_what_the_watch_decoded() {
    let mut published = PublishedService::new(
        "shop.web",
        PublishedServiceSpec {
            namespace: "shop".into(),
            name: "web".into(),
            headless: true,
            ports: vec![crate::api::PublishedPort {
                name: Some("http".into()),
                protocol: Some("TCP".into()),
                app_protocol: None,
                port: 80,
            }],
            session_affinity_timeout_seconds: Some(30),
            ip_families: vec!["IPv4".into()],
            ..PublishedServiceSpec::default()
        },
    );
    published.metadata = meta("shop.web");
    let (lean, expanded) = round_trip(&published);
    assert_eq!(expanded, lean);
    assert_eq!(expanded.spec.ports[0].name.as_deref(), Some("http"));
}

#[test]
fn the_interner_shares_and_sweeps() {
    let mut strings = Interner::default();
    let a = strings.intern("zone-a");
    let b = strings.intern("zone-a");
    assert!(Arc::ptr_eq(&a, &b));
    // Unused strings go at the next sweep; used ones stay shared.
    for i in 0..2 * Interner::FIRST_SWEEP {
        strings.intern(&format!("gone-{i}"));
    }
    assert!(
        strings.len() < Interner::FIRST_SWEEP + 2,
        "{}",
        strings.len()
    );
    assert!(Arc::ptr_eq(&a, &strings.intern("zone-a")));
}
