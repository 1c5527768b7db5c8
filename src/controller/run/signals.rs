//! What the loop tells the world: its metrics, its Warning Events
//! (published off the loop, [`crate::controller::events`]) and the log of
//! refused input. The peers' I/O and the writer both refuse things; each
//! refusal is logged and counted here, one way.

use std::sync::Arc;

use crate::api::ServiceRef;
use crate::controller::events::Events;
use crate::controller::metrics::ControllerMetrics;
use crate::controller::reconcile::Refusal;
use crate::ops::log_limit::{LogLimiter, NETWORK_LOG_INTERVAL};

/// The loop's metrics, Events and refusal log, shared by its parts.
pub(super) struct Signals {
    /// The controller's metrics.
    pub(super) metrics: Arc<ControllerMetrics>,
    /// Warning Events, queued for the task that publishes them.
    pub(super) events: Events,
    /// A peer decides how much input of its is refused: one log line a
    /// second, counting the rest; the metric and `/explain` have them all.
    rejection_logs: LogLimiter,
}

impl Signals {
    /// Signals through `metrics` and `events`.
    pub(super) fn new(metrics: Arc<ControllerMetrics>, events: Events) -> Self {
        Self {
            metrics,
            events,
            rejection_logs: LogLimiter::new(NETWORK_LOG_INTERVAL),
        }
    }

    /// Logs and counts peer input refused as untrusted: `what`, from
    /// `peer`, for `service` when it names one of ours.
    pub(super) fn peer_input_refused(
        &self,
        service: Option<&ServiceRef>,
        peer: &str,
        reason: &'static str,
        what: &str,
    ) {
        if let Some(suppressed) = self.rejection_logs.allow() {
            tracing::warn!(
                service = service.map(tracing::field::display),
                %peer,
                reason,
                what,
                suppressed,
                "refused untrusted peer input"
            );
        }
        self.metrics
            .rejected
            .with_label_values(&[peer, reason])
            .inc();
    }

    /// Logs and counts a write refused because an object that is not ours
    /// holds its name.
    pub(super) fn write_refused(&self, refusal: &Refusal) {
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
}
