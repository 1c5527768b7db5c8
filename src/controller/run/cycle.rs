//! The write cycle: plan the services touched since the last cycle, in
//! bounded batches and rounds, write what the plans ask (a few at a time,
//! each service's writes in order), and write the results through to the
//! indexed state so the next plan starts from them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event as KubeEvent, EventType};

use super::super::schedule::{FAILURES_REPORTED, ROUNDS_PER_CYCLE, Source};
use super::{Controller, WRITE_CONCURRENCY};
use crate::api::ServiceImport;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};

use crate::api::ServiceRef;
use crate::controller::apply::{Written, execute};
use crate::controller::events::Events;
use crate::controller::naming::{FIELD_MANAGER, LABEL_APP_MANAGED_BY, MANAGED_BY};
use crate::controller::publication;
use crate::controller::reconcile::{Kind, Plan, Refusal, Rejection, Write, plan, plan_publication};

/// Writes a plan refused, with the service each belongs to.
type Refused = Vec<(ServiceRef, Refusal)>;

/// Peer input newly rejected, with the service it was for.
type Rejected = Vec<(ServiceRef, Rejection)>;

/// The most rejection Events one service gets per change (the rest are
/// counted, and all of them listed by `/explain`).
const REJECTED_EVENTS_PER_SERVICE: usize = 5;

impl Controller {
    /// One cycle over the services marked dirty.
    pub(super) async fn reconcile(&mut self) {
        let every = self
            .schedule
            .wants_every_service()
            .then(|| self.all_services());
        let mut keys = self.schedule.take_batch(every, Instant::now());
        let planned = keys.clone();
        // Rounds back to back for the services that wrote (see
        // ROUNDS_PER_CYCLE).
        let mut wrote = false;
        for round in 0..ROUNDS_PER_CYCLE {
            let (plans, refused, rejected) = self.plan_round(keys, round == 0);
            for (service, refusal) in &refused {
                refused_event(&self.events, service, refusal);
            }
            let mut per_service: BTreeMap<&ServiceRef, usize> = BTreeMap::new();
            for (service, rejection) in &rejected {
                let published = per_service.entry(service).or_default();
                if *published < REJECTED_EVENTS_PER_SERVICE {
                    *published += 1;
                    rejected_event(&self.events, service, rejection);
                }
            }
            if plans.is_empty() {
                break;
            }
            let written = self.write_round(plans).await;
            wrote |= !written.is_empty();
            keys = written;
        }
        // Our own writes come back as touched services; their plans are
        // empty, which ends the cycle.
        for service in planned.difference(&self.failed_this_cycle) {
            self.schedule.write_succeeded(service);
        }
        self.failed_this_cycle.clear();
        let touched = self.take_local_touched();
        let now = Instant::now();
        self.schedule.mark(&Source::Local, touched, now);
        if let Some(latency) = self.schedule.cycle_done(wrote, now) {
            self.metrics.change_to_write.observe(latency.as_secs_f64());
        }
        if self.schedule.release_due(wrote, now) {
            crate::ops::memory::release_freed_memory();
        }
        self.metrics
            .imports
            .set(self.local_only.imports.services().count() as i64);
    }

    /// Plans `keys`, keeps the status summaries current, and returns the
    /// plans with something to do, the writes refused and the peer input
    /// newly rejected. Refusals are counted once per cycle
    /// (`count_rejected` on its first round; later rounds return none),
    /// a rejection once when it first appears.
    fn plan_round(
        &mut self,
        keys: BTreeSet<ServiceRef>,
        count_rejected: bool,
    ) -> (Vec<(ServiceRef, Plan)>, Refused, Rejected) {
        let (plans, summaries, rejections) = self.with_inputs(|inputs| {
            let mut summaries = Vec::new();
            let mut rejections = Vec::new();
            let plans: Vec<(ServiceRef, Plan)> = keys
                .into_iter()
                .map(|key| {
                    let plan = plan(inputs, &key);
                    let conflict = plan
                        .merged
                        .as_ref()
                        .and_then(|m| m.conflict.as_ref())
                        .map(|c| c.reason.clone());
                    summaries.push((key.clone(), (plan.export_reason, conflict)));
                    rejections.push((key.clone(), plan.rejected.clone()));
                    (key, plan)
                })
                .filter(|(_, plan)| !plan.writes.is_empty() || !plan.refused.is_empty())
                .collect();
            (plans, summaries, rejections)
        });
        let mut rejected = Vec::new();
        for (service, mut now) in rejections {
            now.sort();
            now.dedup();
            let before = self.rejections.remove(&service).unwrap_or_default();
            for rejection in now.iter().filter(|r| before.binary_search(r).is_err()) {
                self.count_rejected(&service, rejection);
                rejected.push((service.clone(), rejection.clone()));
            }
            if !now.is_empty() {
                self.rejections.insert(service, now);
            }
        }
        for (key, summary) in summaries {
            if summary == (None, None) {
                self.summaries.remove(&key);
            } else {
                self.summaries.insert(key, summary);
            }
        }
        self.update_gauges();
        let mut refused = Vec::new();
        if count_rejected {
            for (service, plan) in &plans {
                for refusal in &plan.refused {
                    self.count_refused(refusal);
                    refused.push((service.clone(), refusal.clone()));
                }
            }
        }
        let plans = plans
            .into_iter()
            .filter(|(_, plan)| !plan.writes.is_empty())
            .collect();
        (plans, refused, rejected)
    }

    fn count_rejected(&self, service: &ServiceRef, rejection: &Rejection) {
        // A peer decides how many there are: one line a second, counting
        // the rest; the metric and `/explain` have them all.
        if let Some(suppressed) = self.rejection_logs.allow() {
            tracing::warn!(
                %service,
                peer = %rejection.peer,
                reason = rejection.reason,
                what = %rejection.what,
                suppressed,
                "refused untrusted peer input"
            );
        }
        self.metrics
            .rejected
            .with_label_values(&[rejection.peer.as_str(), rejection.reason])
            .inc();
    }

    fn count_refused(&self, refusal: &Refusal) {
        tracing::warn!(
            kind = refusal.kind.object_kind(),
            name = %refusal.name,
            reason = refusal.reason,
            "refused to write over an object that is not ours"
        );
        self.metrics
            .refused
            .with_label_values(&[refusal.kind.as_str(), refusal.reason])
            .inc();
    }

    /// Carries out the plans, `WRITE_CONCURRENCY` writes at a time (each
    /// service's writes in order, skipping those that wait for a failed
    /// one, [`Write::waits_for`]; a failure queues the service for a
    /// retry), and records what was written. Returns the
    /// services whose writes all succeeded.
    async fn write_round(&mut self, plans: Vec<(ServiceRef, Plan)>) -> BTreeSet<ServiceRef> {
        let client = self.client.clone();
        let metrics = self.metrics.clone();
        let events = &self.events;
        let results: Vec<(ServiceRef, Vec<Result<Written, ()>>)> = futures::stream::iter(plans)
            .map(|(key, plan)| {
                let client = client.clone();
                let metrics = metrics.clone();
                async move {
                    let mut results = Vec::new();
                    // The uid of an import this plan creates: its status
                    // write follows, and names it.
                    let mut created_import = None;
                    let mut failed: Vec<&Write> = Vec::new();
                    for planned in &plan.writes {
                        if failed.iter().any(|f| planned.waits_for(f)) {
                            continue;
                        }
                        let write = planned;
                        let op = if matches!(write, Write::Delete { .. }) { "delete" } else { "apply" };
                        tracing::debug!(service = %key, kind = write.kind().as_str(), op, "write");
                        metrics.writes.with_label_values(&[write.kind().as_str(), op]).inc();
                        let claimed;
                        let write = match (write, &created_import) {
                            (Write::ImportStatus(import), Some(uid)) if import.metadata.uid.is_none() => {
                                let mut import = import.clone();
                                import.metadata.uid = Some(String::clone(uid));
                                claimed = Write::ImportStatus(import);
                                &claimed
                            }
                            _ => write,
                        };
                        match execute(&client, &key, write).await {
                            Ok(Written::Refused { kind, name, reason }) => {
                                let refusal = Refusal { kind, name, reason };
                                refused_event(events, &key, &refusal);
                                // What needs the object refused waits, as for a
                                // failure (no status written into a foreign import).
                                failed.push(planned);
                                results.push(Ok(Written::Refused { kind: refusal.kind, name: refusal.name, reason }));
                            }
                            Ok(written) => {
                                if let Written::Import(import) = &written {
                                    created_import = import.0.metadata.uid.clone();
                                }
                                if let Write::Delete { kind: Kind::Service, namespace, name, .. } = write {
                                    vip_released(events, &key, namespace, name);
                                }
                                results.push(Ok(written));
                            }
                            Err(error) if error.namespace_terminating() => {}
                            Err(error) => {
                                metrics.write_errors.with_label_values(&[write.kind().as_str()]).inc();
                                tracing::warn!(service = %key, error = %crate::error::Chain(&error), "write failed; retrying");
                                results.push(Err(()));
                                // Only the writes that depend on it wait
                                // (Write::waits_for); the retry plans again.
                                failed.push(planned);
                            }
                        }
                    }
                    (key, results)
                }
            })
            .buffer_unordered(WRITE_CONCURRENCY)
            .collect()
            .await;
        let mut succeeded = BTreeSet::new();
        for (key, results) in results {
            let mut failed = false;
            let mut any = false;
            self.write_refusals.remove(&key);
            for result in results {
                match result {
                    Ok(Written::Refused { kind, name, reason }) => {
                        let refusal = Refusal { kind, name, reason };
                        self.count_refused(&refusal);
                        self.write_refusals
                            .entry(key.clone())
                            .or_default()
                            .push(refusal);
                    }
                    Ok(written) => {
                        any = true;
                        self.write_through(written);
                    }
                    Err(()) => failed = true,
                }
            }
            if failed {
                let failures = self.schedule.write_failed(key.clone(), Instant::now());
                if failures == FAILURES_REPORTED {
                    failing_event(&self.events, &key, failures);
                }
                self.failed_this_cycle.insert(key);
            } else if any {
                succeeded.insert(key);
            }
        }
        succeeded
    }

    fn update_gauges(&self) {
        let mut exports: BTreeMap<&str, i64> = BTreeMap::new();
        let mut conflicts: BTreeMap<&str, i64> = BTreeMap::new();
        for (reason, conflict) in self.summaries.values() {
            if let Some(reason) = reason {
                *exports.entry(reason).or_default() += 1;
            }
            for reason in conflict.iter().flat_map(|c| c.split(',')) {
                *conflicts.entry(reason).or_default() += 1;
            }
        }
        self.metrics.exports.reset();
        for (reason, count) in exports {
            self.metrics.exports.with_label_values(&[reason]).set(count);
        }
        self.metrics.conflicts.reset();
        for (reason, count) in conflicts {
            self.metrics
                .conflicts
                .with_label_values(&[reason])
                .set(count);
        }
    }

    fn write_through(&mut self, written: Written) {
        use crate::watch::IndexResource;
        match written {
            Written::Import(import) => self.local_only.imports.apply(import),
            Written::Service(service) => self.local.services.apply(service),
            Written::Slice(slice) => self.local.mcs_slices.apply(slice),
            Written::Export(export) => self.local.exports.apply(export),
            Written::Published(published) => self.local_only.published.apply(published),
            Written::PublishedSlice(slice) => self.local_only.published.apply(slice),
            Written::Refused { .. } => {}
            Written::Deleted {
                kind,
                namespace,
                name,
            } => match kind {
                Kind::ServiceImport | Kind::ServiceImportStatus => {
                    self.local_only.imports.forget(&namespace, &name)
                }
                Kind::Service => self.local.services.forget(&namespace, &name),
                Kind::EndpointSlice => self.local.mcs_slices.forget(&namespace, &name),
                Kind::PublishedService => self.local_only.published.forget_service(&name),
                Kind::PublishedSlice => self.local_only.published.forget_slice(&name),
                Kind::ServiceExportStatus => {}
            },
        }
    }

    /// Writes this cluster's whole publication, then its marker; returns
    /// whether both are written (a failed write is tried again on the next
    /// pass of the loop).
    pub(super) async fn publish(&mut self) -> bool {
        let mut services: BTreeSet<ServiceRef> = self.local.exports.services().cloned().collect();
        services.extend(self.local_only.published.services().cloned());
        let plans: Vec<(ServiceRef, Plan)> = self.with_inputs(|inputs| {
            services
                .into_iter()
                .map(|service| {
                    let writes = plan_publication(inputs, &service);
                    (
                        service,
                        Plan {
                            writes,
                            ..Plan::default()
                        },
                    )
                })
                .filter(|(_, plan)| !plan.writes.is_empty())
                .collect()
        });
        let count = plans.len();
        let planned: BTreeSet<ServiceRef> = plans.iter().map(|(s, _)| s.clone()).collect();
        let written = self.write_round(plans).await;
        if written.len() < count {
            tracing::warn!(
                failed = ?planned.difference(&written).collect::<Vec<_>>(),
                "some of the publication could not be written; retrying before the marker"
            );
            return false;
        }
        self.publish_marker().await
    }

    /// Writes the publication marker ([`publication::MARKER`]): peers of
    /// this release read this cluster's publication from then on. Not
    /// forced: a ConfigMap of that name someone else wrote is not taken
    /// over. Returns whether it is written.
    async fn publish_marker(&self) -> bool {
        let namespace = &self.settings.namespace;
        let marker = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": publication::MARKER,
                "namespace": namespace,
                "labels": {LABEL_APP_MANAGED_BY: MANAGED_BY},
            },
            "data": {
                publication::MARKER_FORMAT_KEY: publication::FORMAT,
                "cluster-id": self.local_id,
            },
        });
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        match api
            .patch(
                publication::MARKER,
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Apply(&marker),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(%namespace, "publication complete: marker written");
                true
            }
            Err(error) => {
                tracing::warn!(error = %crate::error::Chain(&error), "cannot write the publication marker; peers keep reading this cluster as a previous release's");
                false
            }
        }
    }

    fn all_services(&self) -> BTreeSet<ServiceRef> {
        let mut all: BTreeSet<ServiceRef> = self.local.exports.services().cloned().collect();
        all.extend(self.local.mcs_slices.services().cloned());
        all.extend(self.local_only.imports.services().cloned());
        // Derived Services whose import is gone (an orphan sweep at start).
        all.extend(self.local.services.services_with_ours().cloned());
        all.extend(self.peers.exported_services().cloned());
        // What this cluster publishes, whose export may be gone.
        all.extend(self.local_only.published.services().cloned());
        all
    }
}

/// Tells the users of an import that a write for it was refused: an
/// object not ours holds the name (issue 31: never taken over).
fn refused_event(events: &Events, service: &ServiceRef, refusal: &Refusal) {
    let event = KubeEvent {
        type_: EventType::Warning,
        reason: "Refused".into(),
        note: Some(format!("{}: {}", refusal.reason, refusal.message(service))),
        action: "Write".into(),
        secondary: None,
    };
    events.publish(import_reference(service), event);
}

/// Tells the users of an import that its writes keep failing: they are
/// retried with a growing delay, and the controller's log has each error.
fn failing_event(events: &Events, service: &ServiceRef, failures: u32) {
    let event = KubeEvent {
        type_: EventType::Warning,
        reason: "WriteFailing".into(),
        note: Some(format!(
            "{failures} tries in a row to write what {service} needs here failed; retrying with a growing delay (up to 5 minutes); the controller's log says why"
        )),
        action: "Write".into(),
        secondary: None,
    };
    events.publish(import_reference(service), event);
}

/// Tells the users of an import that part of a peer's input was refused.
fn rejected_event(events: &Events, service: &ServiceRef, rejection: &Rejection) {
    // The reason names the rule: the Recorder folds Events of one reason
    // and action on one object into a series, whatever their notes say.
    let event = KubeEvent {
        type_: EventType::Warning,
        reason: rejection.reason.into(),
        note: Some(format!(
            "{}: {} from cluster {} is not imported for {service}",
            rejection.reason, rejection.what, rejection.peer
        )),
        action: "RejectPeerInput".into(),
        secondary: None,
    };
    events.publish(import_reference(service), event);
}

/// The ServiceImport of `service`, as an Event's subject.
fn import_reference(service: &ServiceRef) -> ObjectReference {
    ObjectReference {
        api_version: Some(<ServiceImport as kube::Resource>::api_version(&()).into_owned()),
        kind: Some("ServiceImport".into()),
        name: Some(service.name.to_string()),
        namespace: Some(service.namespace.to_string()),
        ..ObjectReference::default()
    }
}

/// Tells the users of an import that its clusterset IP is gone (the import
/// became headless, or this cluster lost the import's families): clients
/// holding the old VIP must resolve again.
fn vip_released(events: &Events, service: &ServiceRef, namespace: &str, derived: &str) {
    let reference = ObjectReference {
        namespace: Some(namespace.to_owned()),
        ..import_reference(service)
    };
    let event = KubeEvent {
        type_: EventType::Warning,
        reason: "ClusterSetIPReleased".into(),
        note: Some(format!(
            "derived Service {derived} deleted: the import no longer has a clusterset IP here"
        )),
        action: "DeleteDerivedService".into(),
        secondary: None,
    };
    events.publish(reference, event);
}
