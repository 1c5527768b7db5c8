//! The writer: plans the services the schedule hands it, in bounded
//! batches and rounds, writes what the plans ask (a few at a time, each
//! service's writes in order), lands the results in the stores so the next
//! plan starts from them, and writes this cluster's publication and its
//! marker. What it remembers between cycles is only for Events, gauges
//! and `/explain`: which rejections were told, each service's summary, the
//! writes the apiserver refused.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use super::decide::{
    Summary, claim_uid, gauge_counts, new_rejections, sorted_rejections, summary, told_rejections,
};
use super::signals::Signals;
use super::stores::Stores;
use crate::api::ServiceRef;
use crate::controller::apply::{Written, execute};
use crate::controller::events::{Events, Warning};
use crate::controller::metrics::ControllerMetrics;
use crate::controller::naming::FIELD_MANAGER;
use crate::controller::publication;
use crate::controller::reconcile::{Kind, Plan, Refusal, Rejection, Write, plan, plan_publication};
use crate::controller::schedule::{FAILURES_REPORTED, ROUNDS_PER_CYCLE, Schedule, Source};

/// How many writes run at once.
const WRITE_CONCURRENCY: usize = 16;

/// Writes a plan refused, with the service each belongs to.
type Refused = Vec<(ServiceRef, Refusal)>;

/// Peer input newly rejected, with the service it was for.
type Rejected = Vec<(ServiceRef, Rejection)>;

/// What one plan's writes came to, in order: each `Ok` written (or
/// refused by the apiserver), each `Err` failed.
type Results = Vec<Result<Written, ()>>;

/// Carries out plans on this cluster's apiserver, and remembers what the
/// next cycle, the gauges and `/explain` need of them.
pub(super) struct Writer {
    client: Client,
    /// Where this cluster publishes (and its marker lives).
    namespace: String,
    /// This cluster's id, written into the marker.
    local_id: String,
    /// Writes of the last cycle refused at the apiserver (an object not
    /// ours found under the name), by service, for `/explain`.
    write_refusals: BTreeMap<ServiceRef, Vec<Refusal>>,
    /// Services whose writes failed in the cycle under way: the others
    /// planned in it end their failure streak.
    failed_this_cycle: BTreeSet<ServiceRef>,
    /// Peer input each service's last plan rejected: a rejection not in
    /// it is new, and counted and published once.
    rejections: BTreeMap<ServiceRef, Vec<Rejection>>,
    /// Per service: the local export's `Valid` reason and the conflict
    /// reasons, for the gauges.
    summaries: BTreeMap<ServiceRef, Summary>,
}

impl Writer {
    /// A writer through `client` for the cluster `local_id`, which
    /// publishes in `namespace`.
    pub(super) fn new(client: Client, namespace: &str, local_id: &str) -> Self {
        Self {
            client,
            namespace: namespace.to_owned(),
            local_id: local_id.to_owned(),
            write_refusals: BTreeMap::new(),
            failed_this_cycle: BTreeSet::new(),
            rejections: BTreeMap::new(),
            summaries: BTreeMap::new(),
        }
    }

    /// The writes of `service` the apiserver refused in its last cycle.
    pub(super) fn write_refusals(&self, service: &ServiceRef) -> &[Refusal] {
        self.write_refusals
            .get(service)
            .map_or(&[][..], Vec::as_slice)
    }

    /// One cycle over the services `schedule` marks dirty, planned from
    /// and landed in `stores`.
    pub(super) async fn reconcile(
        &mut self,
        stores: &mut Stores,
        schedule: &mut Schedule,
        signals: &Signals,
    ) {
        let every = schedule
            .wants_every_service()
            .then(|| stores.all_services());
        let mut keys = schedule.take_batch(every, Instant::now());
        let planned = keys.clone();
        let deletions_allowed = schedule.started();
        // Rounds back to back for the services that wrote (see
        // ROUNDS_PER_CYCLE).
        let mut wrote = false;
        for round in 0..ROUNDS_PER_CYCLE {
            let (plans, refused, rejected) =
                self.plan_round(stores, signals, keys, round == 0, deletions_allowed);
            for (service, refusal) in &refused {
                signals.events.warn(Warning::Refused { service, refusal });
            }
            for (service, rejection) in told_rejections(&rejected) {
                signals
                    .events
                    .warn(Warning::RejectedPeerInput { service, rejection });
            }
            if plans.is_empty() {
                break;
            }
            let written = self.write_round(stores, schedule, signals, plans).await;
            wrote |= !written.is_empty();
            keys = written;
        }
        // Our own writes come back as touched services; their plans are
        // empty, which ends the cycle.
        for service in planned.difference(&self.failed_this_cycle) {
            schedule.write_succeeded(service);
        }
        self.failed_this_cycle.clear();
        let touched = stores.take_local_touched();
        let now = Instant::now();
        schedule.mark(&Source::Local, touched, now);
        if let Some(latency) = schedule.cycle_done(wrote, now) {
            signals
                .metrics
                .change_to_write
                .observe(latency.as_secs_f64());
        }
        if schedule.release_due(wrote, now) {
            crate::ops::memory::release_freed_memory();
        }
        signals.metrics.imports.set(stores.imports() as i64);
    }

    /// Plans `keys`, keeps the status summaries current, and returns the
    /// plans with something to do, the writes refused and the peer input
    /// newly rejected. Refusals are counted once per cycle
    /// (`count_refused` on its first round; later rounds return none),
    /// a rejection once when it first appears.
    fn plan_round(
        &mut self,
        stores: &Stores,
        signals: &Signals,
        keys: BTreeSet<ServiceRef>,
        count_refused: bool,
        deletions_allowed: bool,
    ) -> (Vec<(ServiceRef, Plan)>, Refused, Rejected) {
        let (plans, summaries, rejections) = stores.with_inputs(deletions_allowed, |inputs| {
            let mut summaries = Vec::new();
            let mut rejections = Vec::new();
            let plans: Vec<(ServiceRef, Plan)> = keys
                .into_iter()
                .map(|key| {
                    let plan = plan(inputs, &key);
                    summaries.push((key.clone(), summary(&plan)));
                    rejections.push((key.clone(), plan.rejected.clone()));
                    (key, plan)
                })
                .filter(|(_, plan)| !plan.writes.is_empty() || !plan.refused.is_empty())
                .collect();
            (plans, summaries, rejections)
        });
        let mut rejected = Vec::new();
        for (service, now) in rejections {
            let now = sorted_rejections(now);
            let before = self.rejections.remove(&service).unwrap_or_default();
            for rejection in new_rejections(&before, &now) {
                signals.peer_input_refused(
                    Some(&service),
                    &rejection.peer,
                    rejection.reason,
                    &rejection.what,
                );
                rejected.push((service.clone(), rejection.clone()));
            }
            if !now.is_empty() {
                self.rejections.insert(service, now);
            }
        }
        for (key, summary) in summaries {
            match summary {
                Some(summary) => self.summaries.insert(key, summary),
                None => self.summaries.remove(&key),
            };
        }
        self.update_gauges(signals);
        let mut refused = Vec::new();
        if count_refused {
            for (service, plan) in &plans {
                for refusal in &plan.refused {
                    signals.write_refused(refusal);
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

    /// Carries out the plans, `WRITE_CONCURRENCY` writes at a time (each
    /// service's writes in order, skipping those that wait for a failed
    /// one, [`Write::waits_for`]; a failure queues the service for a
    /// retry), and lands what was written in `stores`. Returns the
    /// services whose writes all succeeded.
    async fn write_round(
        &mut self,
        stores: &mut Stores,
        schedule: &mut Schedule,
        signals: &Signals,
        plans: Vec<(ServiceRef, Plan)>,
    ) -> BTreeSet<ServiceRef> {
        let client = &self.client;
        let metrics = &signals.metrics;
        let events = &signals.events;
        let results: Vec<(ServiceRef, Results)> = futures::stream::iter(plans)
            .map(|(key, plan)| async move {
                let results = write_plan(client, metrics, events, &key, &plan).await;
                (key, results)
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
                        signals.write_refused(&refusal);
                        self.write_refusals
                            .entry(key.clone())
                            .or_default()
                            .push(refusal);
                    }
                    Ok(written) => {
                        any = true;
                        stores.land(written);
                    }
                    Err(()) => failed = true,
                }
            }
            if failed {
                let failures = schedule.write_failed(key.clone(), Instant::now());
                if failures == FAILURES_REPORTED {
                    signals.events.warn(Warning::WriteFailing {
                        service: &key,
                        failures,
                    });
                }
                self.failed_this_cycle.insert(key);
            } else if any {
                succeeded.insert(key);
            }
        }
        succeeded
    }

    fn update_gauges(&self, signals: &Signals) {
        let counts = gauge_counts(self.summaries.values());
        let metrics = &signals.metrics;
        metrics.exports.reset();
        for (reason, count) in counts.exports {
            metrics.exports.with_label_values(&[reason]).set(count);
        }
        metrics.conflicts.reset();
        for (reason, count) in counts.conflicts {
            metrics.conflicts.with_label_values(&[reason]).set(count);
        }
    }

    /// Writes this cluster's whole publication, then its marker; returns
    /// whether both are written (a failed write is tried again on the next
    /// pass of the loop).
    pub(super) async fn publish(
        &mut self,
        stores: &mut Stores,
        schedule: &mut Schedule,
        signals: &Signals,
    ) -> bool {
        let services = stores.publication_services();
        let plans: Vec<(ServiceRef, Plan)> = stores.with_inputs(schedule.started(), |inputs| {
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
        let written = self.write_round(stores, schedule, signals, plans).await;
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
        let namespace = &self.namespace;
        let marker = publication::marker(namespace, &self.local_id);
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
}

/// Carries out one service's plan: its writes in order, skipping those
/// that wait for one that failed or was refused ([`Write::waits_for`]);
/// a status write names the import created before it ([`claim_uid`]).
async fn write_plan(
    client: &Client,
    metrics: &Arc<ControllerMetrics>,
    events: &Events,
    key: &ServiceRef,
    plan: &Plan,
) -> Results {
    let mut results = Vec::new();
    // The uid of an import this plan creates: its status write follows,
    // and names it.
    let mut created_import = None;
    let mut failed: Vec<&Write> = Vec::new();
    for planned in &plan.writes {
        if failed.iter().any(|f| planned.waits_for(f)) {
            continue;
        }
        let kind_label = planned.kind().as_str();
        let op = if matches!(planned, Write::Delete { .. }) {
            "delete"
        } else {
            "apply"
        };
        tracing::debug!(service = %key, kind = kind_label, op, "write");
        metrics.writes.with_label_values(&[kind_label, op]).inc();
        let claimed = claim_uid(planned, created_import.as_deref());
        let write = claimed.as_ref().unwrap_or(planned);
        match execute(client, key, write).await {
            Ok(Written::Refused { kind, name, reason }) => {
                let refusal = Refusal { kind, name, reason };
                events.warn(Warning::Refused {
                    service: key,
                    refusal: &refusal,
                });
                // What needs the object refused waits, as for a failure
                // (no status written into a foreign import).
                failed.push(planned);
                let Refusal { kind, name, reason } = refusal;
                results.push(Ok(Written::Refused { kind, name, reason }));
            }
            Ok(written) => {
                if let Written::Import(import) = &written {
                    created_import = import.0.metadata.uid.clone();
                }
                if let Write::Delete {
                    kind: Kind::Service,
                    namespace,
                    name,
                    ..
                } = write
                {
                    events.warn(Warning::ClusterSetIpReleased {
                        service: key,
                        namespace,
                        derived: name,
                    });
                }
                results.push(Ok(written));
            }
            Err(error) if error.namespace_terminating() => {}
            Err(error) => {
                metrics.write_errors.with_label_values(&[kind_label]).inc();
                tracing::warn!(service = %key, error = %crate::error::Chain(&error), "write failed; retrying");
                results.push(Err(()));
                // Only the writes that depend on it wait (Write::waits_for);
                // the retry plans again.
                failed.push(planned);
            }
        }
    }
    results
}
