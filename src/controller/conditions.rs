//! Status conditions the controller writes: each cluster's ServiceExport
//! (`Valid`, `Ready`, `Conflict`; docs/controller.md, "Behaviour") and each
//! ServiceImport's `Ready`.
//!
//! Owns the condition bookkeeping only; the runtime decides when to write.
//! Conditions follow `meta.SetStatusCondition`: `lastTransitionTime` moves
//! only when the status flips, so a reconcile with unchanged inputs
//! produces the conditions it read and the runtime can skip the write
//! (the idle invariant: a converged clusterset makes no writes).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::merge::{Invalid, Merged};
use crate::api::ServiceImportType;
use crate::api::well_known::{export_condition, export_reason, import_condition, import_reason};

/// `Ready=False` reason on a ServiceImport whose derived Service name is
/// held by a Service we do not manage: we never take over a user's Service.
pub(super) const DERIVED_SERVICE_NAME_TAKEN: &str = "DerivedServiceNameTaken";

/// `Valid=True` message.
const VALID_MESSAGE: &str = "ServiceExport is valid";
/// `Ready=True` message on a ServiceExport.
const EXPORT_READY_MESSAGE: &str = "ServiceExport is ready";
/// `Conflict=False` message.
const NO_CONFLICTS_MESSAGE: &str = "ServiceExport has no conflicts";
/// `Ready=True` message on a ServiceImport.
const IMPORT_READY_MESSAGE: &str = "ServiceImport is ready";
/// `Ready=False/IPFamilyNotSupported` message (Cilium's wording).
const IP_FAMILY_NOT_SUPPORTED_MESSAGE: &str =
    "The local cluster does not support any of the ServiceImport IPFamilies";

/// Sets the condition `type_` with `meta.SetStatusCondition` semantics: a
/// new condition, or a status flip, takes `now` as its transition time;
/// otherwise only reason and message are updated in place. Returns whether
/// anything changed. `observedGeneration` is left as it was.
pub(super) fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: &Time,
) -> bool {
    let status = if status { "True" } else { "False" };
    let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) else {
        conditions.push(Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            last_transition_time: now.clone(),
            observed_generation: None,
        });
        return true;
    };
    let mut changed = false;
    if existing.status != status {
        existing.status = status.to_owned();
        existing.last_transition_time = now.clone();
        changed = true;
    }
    if existing.reason != reason {
        existing.reason = reason.to_owned();
        changed = true;
    }
    if existing.message != message {
        existing.message = message.to_owned();
        changed = true;
    }
    changed
}

/// Removes the condition `type_`; returns whether it was there.
pub(super) fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// Puts the conditions named in `order` first, in that order, and keeps any
/// other (someone else's) after them in their existing order, so the list
/// written never depends on the order it was read in.
fn sort_conditions(conditions: &mut [Condition], order: &[&str]) {
    conditions.sort_by_key(|c| {
        order
            .iter()
            .position(|t| *t == c.type_)
            .unwrap_or(order.len())
    });
}

/// The conditions `cluster` writes on its own ServiceExport, starting from
/// the `existing` ones: `Valid`, `Ready`, `Conflict`, in that order.
///
/// - `Valid`: True, or False with the [`Invalid`] reason.
/// - `Ready`: True once the export is merged, included and its slices
///   `mirrored`; False/Failed for a type-conflict loser (its endpoints are
///   not imported anywhere); False/Pending otherwise, and while invalid.
/// - `Conflict`: the merge's conflict, identical on every exporter, or
///   False/NoConflicts; removed while invalid, since an invalid export takes
///   no part in the merge. Left as it is while this export is not yet in
///   `merged`, since nothing is known about it then.
///
/// With its own output as `existing` and the same other inputs it returns
/// an equal list, so idle reconciles write nothing.
pub(super) fn export_conditions(
    existing: &[Condition],
    validity: Result<(), &Invalid>,
    merged: Option<&Merged>,
    cluster: &str,
    mirrored: bool,
    now: &Time,
) -> Vec<Condition> {
    let mut conditions = existing.to_vec();
    let mut set = |type_, status, reason, message: &str| {
        set_condition(&mut conditions, type_, status, reason, message, now);
    };

    match validity {
        Err(invalid) => {
            set(
                export_condition::VALID,
                false,
                invalid.reason(),
                &invalid.message(),
            );
            set(
                export_condition::READY,
                false,
                export_reason::PENDING,
                "ServiceExport is not valid",
            );
            remove_condition(&mut conditions, export_condition::CONFLICT);
        }
        Ok(()) => {
            set(
                export_condition::VALID,
                true,
                export_reason::VALID,
                VALID_MESSAGE,
            );
            let included = merged.filter(|m| m.clusters.iter().any(|c| c == cluster));
            let excluded = merged.filter(|m| m.excluded.iter().any(|c| c == cluster));
            match (included, excluded) {
                (Some(_), _) if mirrored => set(
                    export_condition::READY,
                    true,
                    export_reason::READY,
                    EXPORT_READY_MESSAGE,
                ),
                (Some(_), _) => set(
                    export_condition::READY,
                    false,
                    export_reason::PENDING,
                    "Waiting for the EndpointSlices to be mirrored",
                ),
                (None, Some(m)) => set(
                    export_condition::READY,
                    false,
                    export_reason::FAILED,
                    &type_loser_message(m),
                ),
                (None, None) => set(
                    export_condition::READY,
                    false,
                    export_reason::PENDING,
                    "Waiting for the ServiceExport to be merged",
                ),
            }
            if let Some(m) = included.or(excluded) {
                match &m.conflict {
                    Some(c) => set(export_condition::CONFLICT, true, &c.reason, &c.message),
                    None => set(
                        export_condition::CONFLICT,
                        false,
                        export_reason::NO_CONFLICTS,
                        NO_CONFLICTS_MESSAGE,
                    ),
                }
            }
        }
    }

    sort_conditions(
        &mut conditions,
        &[
            export_condition::VALID,
            export_condition::READY,
            export_condition::CONFLICT,
        ],
    );
    conditions
}

/// `Ready=False/Failed` message of a type-conflict loser: its own type, the
/// winning type and the cluster it comes from.
fn type_loser_message(merged: &Merged) -> String {
    let own = match merged.spec.type_ {
        ServiceImportType::ClusterSetIp => ServiceImportType::Headless,
        ServiceImportType::Headless => ServiceImportType::ClusterSetIp,
    };
    format!(
        "Service type {} conflicts with type {} of the oldest service export in cluster \"{}\"; its endpoints are not imported",
        own.as_str(),
        merged.spec.type_.as_str(),
        merged.winner()
    )
}

/// Whether a ServiceImport could be imported into this cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ImportReadiness {
    /// The derived Service exists and `spec.ips` is filled (or headless).
    Ready,
    /// Not yet; the message says what is awaited.
    Pending(String),
    /// None of the import's IP families is served by this cluster.
    IpFamilyNotSupported,
    /// A Service we do not manage holds the derived name; the message names
    /// it.
    NameTaken(String),
}

/// The ServiceImport conditions for `state`, starting from the `existing`
/// ones: `Ready` first, others kept after it. Idempotent like
/// [`export_conditions`].
pub(super) fn import_ready(
    existing: &[Condition],
    state: ImportReadiness,
    now: &Time,
) -> Vec<Condition> {
    let mut conditions = existing.to_vec();
    let (status, reason, message) = match &state {
        ImportReadiness::Ready => (true, import_reason::READY, IMPORT_READY_MESSAGE),
        ImportReadiness::Pending(message) => (false, import_reason::PENDING, message.as_str()),
        ImportReadiness::IpFamilyNotSupported => (
            false,
            import_reason::IP_FAMILY_NOT_SUPPORTED,
            IP_FAMILY_NOT_SUPPORTED_MESSAGE,
        ),
        ImportReadiness::NameTaken(message) => {
            (false, DERIVED_SERVICE_NAME_TAKEN, message.as_str())
        }
    };
    set_condition(
        &mut conditions,
        import_condition::READY,
        status,
        reason,
        message,
        now,
    );
    sort_conditions(&mut conditions, &[import_condition::READY]);
    conditions
}

#[cfg(test)]
mod tests;
