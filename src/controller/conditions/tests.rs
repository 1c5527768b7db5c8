//! Condition bookkeeping: transition times (D1), idempotence (the idle
//! invariant), the per-situation export and import conditions, and the
//! `metav1.Condition` reason pattern for every reason we produce (D2).

use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::controller::merge::{ExportedService, merge};

fn time(secs: i64) -> Time {
    Time(Timestamp::from_second(1_700_000_000 + secs).unwrap())
}

/// A ClusterIP IPv4 export of one `tcp/TCP/42` port with every default.
fn export(cluster: &str, secs: i64) -> ExportedService {
    ExportedService::example(cluster, secs)
}

/// `(type, status, reason)` of each condition, in order.
fn summary(conditions: &[Condition]) -> Vec<(&str, &str, &str)> {
    conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
        .collect()
}

#[test]
fn transition_time_moves_only_when_the_status_flips() {
    let mut conditions = Vec::new();
    assert!(set_condition(
        &mut conditions,
        "Ready",
        false,
        "Pending",
        "wait",
        &time(0)
    ));
    assert_eq!(conditions[0].last_transition_time, time(0));

    assert!(!set_condition(
        &mut conditions,
        "Ready",
        false,
        "Pending",
        "wait",
        &time(1)
    ));
    assert!(set_condition(
        &mut conditions,
        "Ready",
        false,
        "Other",
        "new",
        &time(2)
    ));
    assert_eq!(conditions[0].last_transition_time, time(0));
    assert_eq!(
        (
            conditions[0].reason.as_str(),
            conditions[0].message.as_str()
        ),
        ("Other", "new")
    );

    assert!(set_condition(
        &mut conditions,
        "Ready",
        true,
        "Ready",
        "ok",
        &time(3)
    ));
    assert_eq!(conditions[0].last_transition_time, time(3));
    assert_eq!(conditions[0].status, "True");
    assert_eq!(conditions.len(), 1);
}

#[test]
fn remove_condition_reports_whether_it_was_there() {
    let mut conditions = Vec::new();
    set_condition(
        &mut conditions,
        "Conflict",
        false,
        "NoConflicts",
        "",
        &time(0),
    );
    assert!(remove_condition(&mut conditions, "Conflict"));
    assert!(!remove_condition(&mut conditions, "Conflict"));
    assert!(conditions.is_empty());
}

#[test]
fn valid_included_mirrored_export_is_valid_ready_and_conflict_free() {
    let merged = merge(&[export("a", 0), export("b", 1)]).unwrap();

    let conditions = export_conditions(&[], Ok(()), Some(&merged), "b", true, &time(0));

    assert_eq!(
        summary(&conditions),
        [
            ("Valid", "True", "Valid"),
            ("Ready", "True", "Ready"),
            ("Conflict", "False", "NoConflicts"),
        ]
    );
    assert_eq!(conditions[0].message, "ServiceExport is valid");
    assert_eq!(conditions[1].message, "ServiceExport is ready");
    assert_eq!(conditions[2].message, "ServiceExport has no conflicts");
}

#[test]
fn export_conditions_are_idempotent() {
    let mut b = export("b", 1);
    b.labels.insert("x".into(), "y".into());
    let merged = merge(&[export("a", 0), b]).unwrap();
    let cases: [(Result<(), &Invalid>, Option<&Merged>, bool); 4] = [
        (Ok(()), Some(&merged), true),
        (Ok(()), Some(&merged), false),
        (Ok(()), None, false),
        (Err(&Invalid::NoService), None, false),
    ];
    for (validity, merged, mirrored) in cases {
        let first = export_conditions(&[], validity, merged, "b", mirrored, &time(0));
        let second = export_conditions(&first, validity, merged, "b", mirrored, &time(9));
        assert_eq!(first, second, "{validity:?} {mirrored}");
    }
}

#[test]
fn conflict_is_the_merged_conflict_on_every_exporter() {
    let mut b = export("b", 1);
    b.labels.insert("x".into(), "y".into());
    let merged = merge(&[export("a", 0), b]).unwrap();

    let a = export_conditions(&[], Ok(()), Some(&merged), "a", true, &time(0));
    let b = export_conditions(&[], Ok(()), Some(&merged), "b", true, &time(5));

    assert_eq!(a[2].status, "True");
    assert_eq!(a[2].reason, "LabelsConflict");
    assert_eq!(a[2].message, merged.conflict.as_ref().unwrap().message);
    assert_eq!((&a[2].reason, &a[2].message), (&b[2].reason, &b[2].message));
}

#[test]
fn type_conflict_loser_is_not_ready_and_failed() {
    let mut b = export("b", 1);
    b.headless = true;
    let merged = merge(&[export("a", 0), b]).unwrap();

    let conditions = export_conditions(&[], Ok(()), Some(&merged), "b", true, &time(0));

    assert_eq!(
        summary(&conditions),
        [
            ("Valid", "True", "Valid"),
            ("Ready", "False", "Failed"),
            ("Conflict", "True", "TypeConflict"),
        ]
    );
    assert_eq!(
        conditions[1].message,
        "Service type Headless conflicts with type ClusterSetIP of the oldest service export in cluster \"a\"; its endpoints are not imported"
    );
}

#[test]
fn unmirrored_or_unmerged_export_is_pending() {
    let merged = merge(&[export("a", 0)]).unwrap();

    let unmirrored = export_conditions(&[], Ok(()), Some(&merged), "a", false, &time(0));
    assert_eq!(summary(&unmirrored)[1], ("Ready", "False", "Pending"));

    let unmerged = export_conditions(&[], Ok(()), None, "a", true, &time(0));
    assert_eq!(
        summary(&unmerged),
        [("Valid", "True", "Valid"), ("Ready", "False", "Pending")]
    );
}

#[test]
fn invalid_export_drops_its_conflict_and_is_pending() {
    let merged = merge(&[export("a", 0)]).unwrap();
    let valid = export_conditions(&[], Ok(()), Some(&merged), "a", true, &time(0));

    let invalid = Invalid::ExternalName;
    let conditions = export_conditions(&valid, Err(&invalid), None, "a", true, &time(7));

    assert_eq!(
        summary(&conditions),
        [
            ("Valid", "False", "InvalidServiceType"),
            ("Ready", "False", "Pending"),
        ]
    );
    assert_eq!(
        conditions[0].message,
        "Service type ExternalName is not supported"
    );
    assert_eq!(conditions[0].last_transition_time, time(7));
}

#[test]
fn conditions_are_ordered_and_foreign_ones_kept_last() {
    let merged = merge(&[export("a", 0)]).unwrap();
    let mut existing = Vec::new();
    set_condition(
        &mut existing,
        "Conflict",
        false,
        "NoConflicts",
        "x",
        &time(0),
    );
    set_condition(&mut existing, "Other", true, "Theirs", "", &time(0));
    set_condition(&mut existing, "Valid", true, "Valid", "x", &time(0));

    let conditions = export_conditions(&existing, Ok(()), Some(&merged), "a", true, &time(1));

    let types: Vec<&str> = conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, ["Valid", "Ready", "Conflict", "Other"]);
}

#[test]
fn import_readiness_maps_to_ready_conditions() {
    let cases = [
        (
            ImportReadiness::Ready,
            "True",
            "Ready",
            "ServiceImport is ready",
        ),
        (
            ImportReadiness::Pending("Waiting for the derived Service to be created".into()),
            "False",
            "Pending",
            "Waiting for the derived Service to be created",
        ),
        (
            ImportReadiness::IpFamilyNotSupported,
            "False",
            "IPFamilyNotSupported",
            "The local cluster does not support any of the ServiceImport IPFamilies",
        ),
        (
            ImportReadiness::NameTaken("Service derived-x exists".into()),
            "False",
            "DerivedServiceNameTaken",
            "Service derived-x exists",
        ),
    ];
    for (state, status, reason, message) in cases {
        let conditions = import_ready(&[], state.clone(), &time(0));
        assert_eq!(conditions.len(), 1);
        let c = &conditions[0];
        assert_eq!((c.type_.as_str(), c.status.as_str()), ("Ready", status));
        assert_eq!((c.reason.as_str(), c.message.as_str()), (reason, message));
        assert_eq!(import_ready(&conditions, state, &time(4)), conditions);
    }
}

/// `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`, the `metav1.Condition`
/// reason pattern.
fn is_condition_reason(reason: &str) -> bool {
    let b = reason.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || *c == b'_' || *c == b',' || *c == b':';
    let last = |c: &u8| c.is_ascii_alphanumeric() || *c == b'_';
    match b {
        [] => false,
        [first] => first.is_ascii_alphabetic(),
        [first, middle @ .., end] => {
            first.is_ascii_alphabetic() && middle.iter().all(inner) && last(end)
        }
    }
}

#[test]
fn every_reason_matches_the_condition_reason_pattern() {
    // All nine conflicts at once: a type loser plus an exporter that
    // differs in every other field.
    let mut b = export("b", 1);
    b.ports[0].port = 43;
    b.session_affinity = "ClientIP".into();
    b.session_affinity_config = Some(Default::default());
    b.labels.insert("l".into(), "1".into());
    b.annotations.insert("a".into(), "1".into());
    b.internal_traffic_policy = "Local".into();
    b.traffic_distribution = Some("PreferClose".into());
    b.ip_families = vec!["IPv6".into()];
    let mut c = export("c", 2);
    c.headless = true;
    let merged = merge(&[export("a", 0), b, c]).unwrap();
    assert_eq!(
        merged.conflict.as_ref().unwrap().reason.split(',').count(),
        9
    );

    let mut reasons = Vec::new();
    for cluster in ["a", "b", "c"] {
        for mirrored in [false, true] {
            let conditions =
                export_conditions(&[], Ok(()), Some(&merged), cluster, mirrored, &time(0));
            reasons.extend(conditions.into_iter().map(|c| c.reason));
        }
    }
    let single = merge(&[export("a", 0)]).unwrap();
    reasons.extend(
        export_conditions(&[], Ok(()), Some(&single), "a", true, &time(0))
            .into_iter()
            .map(|c| c.reason),
    );
    reasons.extend(
        export_conditions(&[], Ok(()), None, "a", true, &time(0))
            .into_iter()
            .map(|c| c.reason),
    );
    for invalid in [Invalid::NoService, Invalid::ExternalName] {
        reasons.extend(
            export_conditions(&[], Err(&invalid), None, "a", true, &time(0))
                .into_iter()
                .map(|c| c.reason),
        );
    }
    for state in [
        ImportReadiness::Ready,
        ImportReadiness::Pending(String::new()),
        ImportReadiness::IpFamilyNotSupported,
        ImportReadiness::NameTaken(String::new()),
    ] {
        reasons.extend(
            import_ready(&[], state, &time(0))
                .into_iter()
                .map(|c| c.reason),
        );
    }

    for required in [
        "Valid",
        "NoService",
        "InvalidServiceType",
        "Ready",
        "Pending",
        "Failed",
        "NoConflicts",
        "IPFamilyNotSupported",
        "DerivedServiceNameTaken",
    ] {
        assert!(
            reasons.iter().any(|r| r == required),
            "{required} not produced"
        );
    }
    for reason in &reasons {
        assert!(is_condition_reason(reason), "{reason:?}");
    }
    assert!(!is_condition_reason("Bad Reason"));
    assert!(!is_condition_reason("Trailing,"));
}
