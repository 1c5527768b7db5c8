//! What `/explain` answers about one service ([`Explanation`]): the peers
//! read, the merge and who decided each field, and what the plan would
//! write, refuse and reject, built by a pure function ([`explain`]) from the
//! plan and what the loop knows beside it.

use serde::Serialize;

use super::{LocalFirst, PeerView, Plan, Refusal, Rejection};
use crate::api::{ServiceImportSpec, ServiceRef};
use crate::controller::merge::{FieldDecision, field_decisions};

/// The answer of `/explain?service=<namespace>/<name>`. Every key is
/// always there: what does not apply (no cluster exports the service) is
/// `null`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(in crate::controller) struct Explanation {
    /// `<namespace>/<name>`.
    service: String,
    /// This cluster's id.
    cluster: String,
    /// Every peer known, and whether its data takes part.
    peers: Vec<PeerShown>,
    /// Exporters whose endpoints are imported, in priority order.
    exporters: Option<Vec<String>>,
    /// Type-conflict losers, in priority order.
    excluded: Option<Vec<String>>,
    /// The oldest exporter, whose values win every conflict.
    winner: Option<String>,
    /// The `Conflict` condition raised, if any.
    conflict: Option<ConflictShown>,
    /// The merged ServiceImport spec.
    spec: Option<ServiceImportSpec>,
    /// Who decided each field of the merge.
    fields: Option<Vec<FieldDecision>>,
    /// For a local-first clusterset IP, what its hints make kube-proxy do.
    local_first: Option<LocalFirst>,
    /// The kinds of the writes the plan asks for now, in order.
    pending_writes: Vec<String>,
    /// Whether the service is left alone: it names a peer not read.
    deferred: bool,
    /// Writes refused by the plan, then by the apiserver in the last cycle.
    refused: Vec<RefusalShown>,
    /// Untrusted peer input dropped.
    rejected: Vec<RejectionShown>,
}

/// One peer, as `/explain` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct PeerShown {
    id: String,
    usable: bool,
}

/// A raised conflict, as `/explain` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct ConflictShown {
    reason: String,
    message: String,
}

/// A refused write, as `/explain` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct RefusalShown {
    /// The object kind, as Kubernetes names it.
    kind: &'static str,
    name: String,
    reason: &'static str,
    /// What the Event's note says after its reason.
    message: String,
}

/// Rejected peer input, as `/explain` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct RejectionShown {
    peer: String,
    reason: &'static str,
    what: String,
}

/// What `/explain` answers for `service` in cluster `local_id`, given its
/// `plan` as of now, the `peers` that plan read and the writes of the last
/// cycle the apiserver refused for it (`write_refusals`).
pub(in crate::controller) fn explain(
    service: &ServiceRef,
    local_id: &str,
    peers: &[PeerView<'_>],
    plan: &Plan,
    write_refusals: &[Refusal],
) -> Explanation {
    let merged = plan.merged.as_ref();
    Explanation {
        service: service.to_string(),
        cluster: local_id.to_owned(),
        peers: peers
            .iter()
            .map(|peer| PeerShown {
                id: peer.id.to_owned(),
                usable: peer.usable,
            })
            .collect(),
        exporters: merged.map(|m| m.clusters.clone()),
        excluded: merged.map(|m| m.excluded.clone()),
        winner: merged.map(|m| m.winner().to_owned()),
        conflict: merged
            .and_then(|m| m.conflict.as_ref())
            .map(|c| ConflictShown {
                reason: c.reason.clone(),
                message: c.message.clone(),
            }),
        spec: merged.map(|m| m.spec.clone()),
        fields: merged.map(|m| field_decisions(&plan.exports, m)),
        local_first: plan.local_first.clone(),
        pending_writes: plan
            .writes
            .iter()
            .map(|write| format!("{:?}", write.kind()))
            .collect(),
        deferred: plan.deferred,
        refused: plan
            .refused
            .iter()
            .chain(write_refusals)
            .map(|refusal| refusal_shown(service, refusal))
            .collect(),
        rejected: plan.rejected.iter().map(rejection_shown).collect(),
    }
}

fn refusal_shown(service: &ServiceRef, refusal: &Refusal) -> RefusalShown {
    RefusalShown {
        kind: refusal.kind.object_kind(),
        name: refusal.name.clone(),
        reason: refusal.reason,
        message: refusal.message(service),
    }
}

fn rejection_shown(rejection: &Rejection) -> RejectionShown {
    RejectionShown {
        peer: rejection.peer.clone(),
        reason: rejection.reason,
        what: rejection.what.clone(),
    }
}
