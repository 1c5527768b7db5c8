//! The hub contract's rules and objects, without a hub (tests/hub_cli.rs
//! runs them on a real apiserver).

use serde_json::Value;

use super::objects::{hub_objects, member_objects, token_anchor};
use super::*;

#[test]
fn a_member_namespace_is_its_cluster_id_behind_a_prefix_and_must_be_a_dns_label() {
    assert_eq!(member_namespace("cluster-a").unwrap(), "member-cluster-a");
    let longest = "a".repeat(MAX_MEMBER_ID);
    assert_eq!(member_namespace(&longest).unwrap().len(), 63);
    assert!(
        member_namespace(&"a".repeat(MAX_MEMBER_ID + 1))
            .unwrap_err()
            .contains("longer than 56")
    );
    for bad in ["", "Cluster", "a.b", "-a", "a_b"] {
        assert!(member_namespace(bad).is_err(), "{bad:?}");
    }
    assert_eq!(member_of_namespace("member-cluster-a"), Some("cluster-a"));
    assert_eq!(member_of_namespace("member-"), None);
    assert_eq!(member_of_namespace("kube-system"), None);
    assert_eq!(member_of_namespace("member-Bad"), None);
}

#[test]
fn a_member_token_authenticates_as_its_namespaces_account() {
    assert_eq!(
        member_user("a"),
        "system:serviceaccount:member-a:clusterset-dns-member"
    );
}

fn kinds(objects: &[Value]) -> Vec<&str> {
    objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect()
}

#[test]
fn init_writes_the_crd_first_and_each_object_after_what_it_names() {
    let objects = hub_objects();
    assert_eq!(
        kinds(&objects),
        [
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRole",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "PriorityLevelConfiguration",
            "FlowSchema",
        ]
    );
    assert_eq!(
        objects[0]["metadata"]["name"],
        "publishedservices.clusterset-dns.io"
    );
    assert_eq!(objects[4]["spec"]["policyName"], POLICY);
    assert_eq!(
        objects[6]["spec"]["priorityLevelConfiguration"]["name"],
        FLOW_SCHEMA
    );
}

#[test]
fn members_read_publications_hub_wide_and_write_nothing_through_that_role() {
    let objects = hub_objects();
    let reader = &objects[1];
    assert_eq!(reader["metadata"]["name"], READER_ROLE);
    for rule in reader["rules"].as_array().unwrap() {
        assert_eq!(rule["verbs"], serde_json::json!(["get", "list", "watch"]));
    }
    let resources: Vec<&str> = reader["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["resources"][0].as_str().unwrap())
        .collect();
    assert_eq!(
        resources,
        [
            "publishedservices",
            "endpointslices",
            "leases",
            "configmaps"
        ]
    );
    // Of ConfigMaps, the member records only.
    assert_eq!(
        reader["rules"][3]["resourceNames"],
        serde_json::json!([MEMBER_RECORD])
    );
    let publisher = &objects[2];
    for rule in publisher["rules"].as_array().unwrap() {
        assert!(
            !rule["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v == "list" || v == "get")
        );
    }
}

#[test]
fn the_policy_checks_only_members_and_holds_them_to_namespace_label_and_names() {
    let policy = &hub_objects()[3];
    let spec = &policy["spec"];
    assert_eq!(spec["failurePolicy"], "Fail");
    assert_eq!(
        spec["matchConditions"][0]["expression"],
        "request.userInfo.username.startsWith('system:serviceaccount:member-')"
    );
    let expressions: Vec<&str> = spec["validations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["expression"].as_str().unwrap())
        .collect();
    assert_eq!(expressions.len(), 4);
    assert!(expressions[0].contains(&format!(
        "'{LABEL_MEMBER}' in namespaceObject.metadata.labels"
    )));
    assert!(expressions[1].contains("multicluster.kubernetes.io/source-cluster"));
    assert!(expressions[2].contains("object.spec.namespace + '.' + object.spec.name"));
    assert!(expressions[3].contains(MEMBER_LEASE));
}

#[test]
fn a_members_objects_bind_its_id_to_its_namespace_and_bound_its_store() {
    let ranges: Vec<Cidr> = vec![
        "10.1.0.0/16".parse().unwrap(),
        "fd00:1::/64".parse().unwrap(),
    ];
    let objects = member_objects(
        "cluster-a",
        Some(&ranges),
        MemberQuota {
            published_services: 7,
            slices: 9,
        },
    )
    .unwrap();
    let mut objects = objects;
    let record = objects.remove(1);
    assert_eq!(record["kind"], "ConfigMap");
    assert_eq!(record["metadata"]["name"], MEMBER_RECORD);
    assert_eq!(record["metadata"]["namespace"], "member-cluster-a");
    let data: BTreeMap<String, String> = serde_json::from_value(record["data"].clone()).unwrap();
    assert_eq!(read_member_record(&data), Ok(Some(ranges)));
    assert_eq!(
        kinds(&objects),
        [
            "Namespace",
            "ServiceAccount",
            "RoleBinding",
            "ClusterRoleBinding",
            "ResourceQuota"
        ]
    );
    assert_eq!(objects[0]["metadata"]["name"], "member-cluster-a");
    assert_eq!(objects[0]["metadata"]["labels"][LABEL_MEMBER], "cluster-a");
    assert_eq!(objects[2]["metadata"]["namespace"], "member-cluster-a");
    assert_eq!(objects[2]["roleRef"]["name"], PUBLISHER_ROLE);
    assert_eq!(objects[3]["roleRef"]["name"], READER_ROLE);
    for binding in &objects[2..4] {
        assert_eq!(binding["subjects"][0]["namespace"], "member-cluster-a");
        assert_eq!(binding["subjects"][0]["name"], MEMBER_SERVICE_ACCOUNT);
    }
    let hard = &objects[4]["spec"]["hard"];
    assert_eq!(hard["count/publishedservices.clusterset-dns.io"], "7");
    assert_eq!(hard["count/endpointslices.discovery.k8s.io"], "9");
    assert_eq!(hard["count/leases.coordination.k8s.io"], "1");
    assert!(member_objects("Not-A-Label", None, MemberQuota::default()).is_err());
    let any = member_objects("cluster-a", None, MemberQuota::default()).unwrap();
    let data: BTreeMap<String, String> = serde_json::from_value(any[1]["data"].clone()).unwrap();
    assert_eq!(read_member_record(&data), Ok(None));
    let anchor = token_anchor("cluster-a").unwrap();
    assert_eq!(anchor["metadata"]["namespace"], "member-cluster-a");
    assert_eq!(anchor["metadata"]["labels"][LABEL_MEMBER], "cluster-a");
}

#[test]
fn a_member_record_gives_ranges_or_any_endpoint_and_anything_else_is_refused() {
    let record = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    assert_eq!(
        read_member_record(&record(&[(
            RECORD_ENDPOINT_CIDRS,
            "10.1.0.0/16, 10.2.0.0/16"
        )]))
        .unwrap()
        .map(|r| r.len()),
        Some(2)
    );
    assert_eq!(
        read_member_record(&record(&[(RECORD_ANY_ENDPOINT, "true")])),
        Ok(None)
    );
    // Each endpoint is checked against every range: a record holds a
    // bounded number, and hub join writes no more.
    let ranges: Vec<Cidr> = (0..=MAX_RECORD_RANGES)
        .map(|i| format!("10.{}.{}.0/24", i / 256, i % 256).parse().unwrap())
        .collect();
    let too_many: String = ranges
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let error = member_objects("cluster-a", Some(&ranges), MemberQuota::default()).unwrap_err();
    assert!(error.contains("more than the 256"), "{error}");
    assert!(member_objects("cluster-a", Some(&ranges[1..]), MemberQuota::default()).is_ok());
    for (bad, why) in [
        (
            record(&[(RECORD_ENDPOINT_CIDRS, too_many.as_str())]),
            "more than the 256 allowed",
        ),
        (record(&[]), "neither"),
        (record(&[(RECORD_ANY_ENDPOINT, "yes")]), "not \"true\""),
        (record(&[(RECORD_ENDPOINT_CIDRS, "")]), "empty"),
        (
            record(&[(RECORD_ENDPOINT_CIDRS, "10.1.0.0/33")]),
            RECORD_ENDPOINT_CIDRS,
        ),
        (
            record(&[
                (RECORD_ENDPOINT_CIDRS, "10.1.0.0/16"),
                (RECORD_ANY_ENDPOINT, "true"),
            ]),
            "both",
        ),
    ] {
        let error = read_member_record(&bad).unwrap_err();
        assert!(error.contains(why), "{bad:?}: {error}");
    }
}
