//! The writer's own decisions, pure: which rejections are new, which of
//! them get an Event, which uid a status write claims, and what the
//! export and conflict gauges say. The writer (`writer.rs`) only carries
//! them out.

use std::collections::BTreeMap;

use crate::api::ServiceRef;
use crate::controller::reconcile::{Plan, Rejection, Write};

/// The most rejection Events one service gets per change (the rest are
/// counted, and all of them listed by `/explain`).
pub(super) const REJECTED_EVENTS_PER_SERVICE: usize = 5;

/// A plan's rejections as remembered until the service's next plan:
/// sorted, each once.
pub(super) fn sorted_rejections(mut now: Vec<Rejection>) -> Vec<Rejection> {
    now.sort();
    now.dedup();
    now
}

/// The rejections of `now` not in `before`, in order: each is counted and
/// told once, when it first appears. Both are as [`sorted_rejections`]
/// returns them.
pub(super) fn new_rejections<'a>(before: &[Rejection], now: &'a [Rejection]) -> Vec<&'a Rejection> {
    now.iter()
        .filter(|rejection| before.binary_search(rejection).is_err())
        .collect()
}

/// Which of the rejections `rejected` (new, with their service) get a
/// Warning Event: the first [`REJECTED_EVENTS_PER_SERVICE`] of each
/// service, in order. A peer decides how many there are.
pub(super) fn told_rejections(
    rejected: &[(ServiceRef, Rejection)],
) -> Vec<&(ServiceRef, Rejection)> {
    let mut told: BTreeMap<&ServiceRef, usize> = BTreeMap::new();
    rejected
        .iter()
        .filter(|(service, _)| {
            let count = told.entry(service).or_default();
            *count += 1;
            *count <= REJECTED_EVENTS_PER_SERVICE
        })
        .collect()
}

/// `write` naming the import created earlier in the same plan (uid
/// `created_import_uid`), when it is that import's status written without
/// a uid: the status must reach the import just created, and no other.
/// `None` when `write` goes as planned.
pub(super) fn claim_uid(write: &Write, created_import_uid: Option<&str>) -> Option<Write> {
    match (write, created_import_uid) {
        (Write::ImportStatus(import), Some(uid)) if import.metadata.uid.is_none() => {
            let mut import = import.clone();
            import.metadata.uid = Some(uid.to_owned());
            Some(Write::ImportStatus(import))
        }
        _ => None,
    }
}

/// What the gauges read of one service's last plan: its local export's
/// `Valid` reason and its conflict reasons (comma-joined).
pub(super) type Summary = (Option<&'static str>, Option<String>);

/// What the gauges read of `plan`; `None` when it has neither (the
/// service is then no longer held for them).
pub(super) fn summary(plan: &Plan) -> Option<Summary> {
    let conflict = plan
        .merged
        .as_ref()
        .and_then(|merged| merged.conflict.as_ref())
        .map(|conflict| conflict.reason.clone());
    match (plan.export_reason, conflict) {
        (None, None) => None,
        summary => Some(summary),
    }
}

/// The values of the export and conflict gauges.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct GaugeCounts<'a> {
    /// How many local exports have each `Valid` reason.
    pub exports: BTreeMap<&'a str, i64>,
    /// How many services have each conflict reason (a conflict of several
    /// reasons counts under each).
    pub conflicts: BTreeMap<&'a str, i64>,
}

/// The gauges' values over every service's [`Summary`].
pub(super) fn gauge_counts<'a>(
    summaries: impl IntoIterator<Item = &'a Summary>,
) -> GaugeCounts<'a> {
    let mut counts = GaugeCounts::default();
    for (reason, conflict) in summaries {
        if let Some(reason) = reason {
            *counts.exports.entry(*reason).or_default() += 1;
        }
        for reason in conflict.iter().flat_map(|c| c.split(',')) {
            *counts.conflicts.entry(reason).or_default() += 1;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ServiceImport;

    fn rejection(peer: &str, what: &str) -> Rejection {
        Rejection {
            peer: peer.into(),
            reason: "NotRoutable",
            what: what.into(),
        }
    }

    #[test]
    fn a_rejection_is_new_once_and_repeats_are_one() {
        let first = sorted_rejections(vec![
            rejection("b", "endpoint 2"),
            rejection("b", "endpoint 1"),
            rejection("b", "endpoint 2"),
        ]);
        assert_eq!(
            first,
            [rejection("b", "endpoint 1"), rejection("b", "endpoint 2")]
        );
        assert_eq!(
            new_rejections(&[], &first),
            first.iter().collect::<Vec<_>>()
        );
        // The next plan: one gone, one kept, one new.
        let second = sorted_rejections(vec![
            rejection("c", "endpoint 1"),
            rejection("b", "endpoint 2"),
        ]);
        assert_eq!(
            new_rejections(&first, &second),
            [&rejection("c", "endpoint 1")]
        );
        assert!(new_rejections(&second, &second).is_empty());
    }

    #[test]
    fn each_service_is_told_of_its_first_rejections_only() {
        let web = ServiceRef::new("demo", "web");
        let db = ServiceRef::new("demo", "db");
        let mut rejected = Vec::new();
        for i in 0..7 {
            rejected.push((web.clone(), rejection("b", &format!("web {i}"))));
            if i < 2 {
                rejected.push((db.clone(), rejection("b", &format!("db {i}"))));
            }
        }
        let told: Vec<&str> = told_rejections(&rejected)
            .into_iter()
            .map(|(_, r)| r.what.as_str())
            .collect();
        assert_eq!(
            told,
            ["web 0", "db 0", "web 1", "db 1", "web 2", "web 3", "web 4"]
        );
        assert_eq!(
            told.iter().filter(|what| what.starts_with("web")).count(),
            REJECTED_EVENTS_PER_SERVICE
        );
    }

    fn import(uid: Option<&str>) -> Box<ServiceImport> {
        let mut import: ServiceImport = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"type": "ClusterSetIP", "ports": []},
        }))
        .unwrap();
        import.metadata.uid = uid.map(str::to_owned);
        Box::new(import)
    }

    #[test]
    fn a_status_write_claims_the_import_its_plan_created() {
        let status = Write::ImportStatus(import(None));
        assert_eq!(
            claim_uid(&status, Some("created")),
            Some(Write::ImportStatus(import(Some("created"))))
        );
        // No import created: it goes as planned.
        assert_eq!(claim_uid(&status, None), None);
        // It already names an import: that one.
        let named = Write::ImportStatus(import(Some("live")));
        assert_eq!(claim_uid(&named, Some("created")), None);
        // Only a status write claims.
        let spec = Write::Import(import(None));
        assert_eq!(claim_uid(&spec, Some("created")), None);
    }

    #[test]
    fn the_gauges_count_each_reason_of_a_conflict() {
        let summaries: [Summary; 3] = [
            (Some("Exported"), Some("PortConflict,TypeConflict".into())),
            (Some("Exported"), None),
            (None, Some("PortConflict".into())),
        ];
        let counts = gauge_counts(&summaries);
        assert_eq!(counts.exports, BTreeMap::from([("Exported", 2)]));
        assert_eq!(
            counts.conflicts,
            BTreeMap::from([("PortConflict", 2), ("TypeConflict", 1)])
        );
        assert_eq!(gauge_counts(&[]), GaugeCounts::default());
    }

    #[test]
    fn a_plan_with_no_export_nor_conflict_is_not_gauged() {
        assert_eq!(summary(&Plan::default()), None);
        let exported = Plan {
            export_reason: Some("Exported"),
            ..Plan::default()
        };
        assert_eq!(summary(&exported), Some((Some("Exported"), None)));
    }
}
