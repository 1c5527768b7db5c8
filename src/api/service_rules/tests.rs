use super::*;

fn port(name: Option<&str>, protocol: Option<&str>, number: i32) -> ServicePort {
    ServicePort {
        name: name.map(Into::into),
        protocol: protocol.map(Into::into),
        app_protocol: None,
        port: number,
    }
}

fn field_of(result: Result<(), Violation>) -> String {
    result.unwrap_err().field
}

#[test]
fn valid_port_lists_pass() {
    assert_eq!(ports(&[]), Ok(()));
    assert_eq!(ports(&[port(None, None, 80)]), Ok(()));
    assert_eq!(ports(&[port(Some(""), Some("UDP"), 53)]), Ok(()));
    let mut two = vec![
        port(Some("http"), None, 80),
        port(Some("dns"), Some("UDP"), 80),
    ];
    assert_eq!(ports(&two), Ok(()), "same number, other protocol");
    two[0].app_protocol = Some("kubernetes.io/h2c".into());
    two[1].app_protocol = Some("dns".into());
    assert_eq!(ports(&two), Ok(()));
    let hundred: Vec<ServicePort> = (1..=100)
        .map(|i| port(Some(&format!("p{i}")), None, i))
        .collect();
    assert_eq!(ports(&hundred), Ok(()));
}

#[test]
fn each_invalid_port_field_is_named() {
    let cases: Vec<(Vec<ServicePort>, &str, &str)> = vec![
        (
            vec![port(None, None, 80), port(Some("metrics"), None, 9090)],
            "ports[0].name",
            "required",
        ),
        (
            vec![port(Some("metrics"), None, 9090), port(None, None, 80)],
            "ports[1].name",
            "required",
        ),
        (
            vec![port(Some("Web"), None, 80)],
            "ports[0].name",
            "DNS label",
        ),
        (
            vec![port(Some("a_b"), None, 80)],
            "ports[0].name",
            "DNS label",
        ),
        (
            vec![port(Some("a"), None, 80), port(Some("a"), None, 81)],
            "ports[1].name",
            "twice",
        ),
        (
            vec![port(None, Some("XTP"), 80)],
            "ports[0].protocol",
            "XTP",
        ),
        (
            vec![port(None, Some("tcp"), 80)],
            "ports[0].protocol",
            "tcp",
        ),
        (vec![port(None, None, 0)], "ports[0].port", "1-65535"),
        (vec![port(None, None, 70000)], "ports[0].port", "1-65535"),
        (vec![port(None, None, -1)], "ports[0].port", "1-65535"),
        (
            vec![port(Some("a"), None, 80), port(Some("b"), Some("TCP"), 80)],
            "ports[1].port",
            "TCP/80",
        ),
    ];
    for (list, field, says) in cases {
        let error = ports(&list).unwrap_err();
        assert_eq!(error.field, field, "{list:?}");
        assert!(error.message.contains(says), "{error} lacks {says:?}");
    }
    let mut bad_app = port(None, None, 80);
    for app in ["", "a/b/c", "-x", "UPPER.example/x", &"x".repeat(64)] {
        bad_app.app_protocol = Some(app.into());
        assert_eq!(
            field_of(ports(std::slice::from_ref(&bad_app))),
            "ports[0].appProtocol",
            "{app:?}"
        );
    }
    let too_many: Vec<ServicePort> = (1..=101)
        .map(|i| port(Some(&format!("p{i}")), None, i))
        .collect();
    assert_eq!(field_of(ports(&too_many)), "ports");
}

#[test]
fn enums_and_ranges_hold_the_apiserver_values() {
    assert_eq!(service_type(None), Ok(()));
    for ok in ["ClusterIP", "NodePort", "LoadBalancer"] {
        assert_eq!(service_type(Some(ok)), Ok(()));
    }
    assert_eq!(field_of(service_type(Some("Gateway"))), "type");
    assert_eq!(session_affinity("None", None), Ok(()));
    assert_eq!(session_affinity("ClientIP", Some(1)), Ok(()));
    assert_eq!(session_affinity("ClientIP", Some(86_400)), Ok(()));
    assert_eq!(
        field_of(session_affinity("Sticky", None)),
        "sessionAffinity"
    );
    for timeout in [0, -5, 86_401] {
        assert_eq!(
            field_of(session_affinity("ClientIP", Some(timeout))),
            "sessionAffinityConfig.clientIP.timeoutSeconds"
        );
    }
    assert_eq!(internal_traffic_policy("Local"), Ok(()));
    assert_eq!(
        field_of(internal_traffic_policy("x")),
        "internalTrafficPolicy"
    );
    assert_eq!(traffic_distribution(Some("PreferSameNode")), Ok(()));
    assert_eq!(
        field_of(traffic_distribution(Some("Anywhere"))),
        "trafficDistribution"
    );
}

#[test]
fn ip_families_are_distinct_known_and_at_most_two() {
    let families = |list: &[&str]| list.iter().map(|f| f.to_string()).collect::<Vec<_>>();
    assert_eq!(ip_families(&families(&[])), Ok(()));
    assert_eq!(ip_families(&families(&["IPv6", "IPv4"])), Ok(()));
    assert_eq!(
        field_of(ip_families(&families(&["IPv4", "IPv4"]))),
        "ipFamilies[1]"
    );
    assert_eq!(field_of(ip_families(&families(&["IPv5"]))), "ipFamilies[0]");
    assert_eq!(
        field_of(ip_families(&families(&["IPv4", "IPv6", "IPv4"]))),
        "ipFamilies"
    );
}

#[test]
fn exported_metadata_keeps_to_valid_keys_outside_the_reserved_prefixes() {
    let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let empty = BTreeMap::new();
    let ok = map(&[
        ("team", "payments"),
        ("app.kubernetes.io/name", "web"),
        ("example.com/tier", ""),
    ]);
    assert_eq!(exported_metadata(&ok, &ok), Ok(()));
    for key in [
        "kubernetes.io/service-name",
        "k8s.io/x",
        "multicluster.kubernetes.io/derived-service",
        "multicluster.x-k8s.io/release-version",
        "endpointslice.kubernetes.io/managed-by",
        "service.kubernetes.io/headless",
        "clusterset-dns.io/cluster-id",
        "controller.clusterset-dns.io/x",
    ] {
        let error = exported_metadata(&empty, &map(&[(key, "v")])).unwrap_err();
        assert!(error.message.contains("reserved"), "{key}: {error}");
        let error = exported_metadata(&map(&[(key, "v")]), &empty).unwrap_err();
        assert!(error.field.starts_with("exportedLabels"), "{key}: {error}");
    }
    for key in ["", "a b", "-a", "Example.COM/x", "a/b/c", &"k".repeat(64)] {
        let error = exported_metadata(&map(&[(key, "v")]), &empty).unwrap_err();
        assert!(error.message.contains("qualified name"), "{key:?}: {error}");
    }
    let long_value = "v".repeat(64);
    assert!(exported_metadata(&map(&[("k", &long_value)]), &empty).is_err());
    assert_eq!(
        exported_metadata(&empty, &map(&[("k", &long_value)])),
        Ok(())
    );
    let huge = "x".repeat(MAX_EXPORTED_METADATA_BYTES);
    assert_eq!(
        field_of(exported_metadata(&empty, &map(&[("k", &huge)]))),
        "exportedAnnotations"
    );
}
