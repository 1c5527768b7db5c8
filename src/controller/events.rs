//! Warning Events, published off the controller's loop (issue 44, M1).
//!
//! Each Event is an API round trip, and a peer decides how many there are
//! (one per refused endpoint, slice or export). The loop hands each to
//! [`Events::publish`], which never waits; one task publishes them at most
//! [`PER_SECOND`] a second. Repeats of one (object, reason, action) that
//! wait together are folded into one Event that says how many it stands
//! for, and past [`MAX_PENDING`] distinct waiting Events new ones are
//! dropped and counted (`clusterset_dns_controller_events_dropped_total`):
//! the metric `peer_objects_rejected_total` and `/explain` still count and
//! list every refusal.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder};
use prometheus::IntCounter;
use tokio::sync::mpsc;

/// The most Events published per second, by every caller together.
pub(super) const PER_SECOND: u32 = 20;

/// The most distinct Events waiting to be published.
pub(super) const MAX_PENDING: usize = 1024;

/// What one waiting Event is folded by.
type Key = (
    Option<String>,
    Option<String>,
    Option<String>,
    String,
    String,
);

/// One Event to publish about `regarding`.
struct Request {
    regarding: ObjectReference,
    event: Event,
}

/// The handle the loop publishes Events through: cheap to clone, never
/// blocks.
#[derive(Clone)]
pub(super) struct Events {
    tx: mpsc::Sender<Request>,
    dropped: IntCounter,
}

impl Events {
    /// Starts the task that publishes through `recorder`, counting what it
    /// drops in `dropped`.
    pub(super) fn spawn(recorder: Recorder, dropped: IntCounter) -> Self {
        // The task drains the channel between two publishes: a burst
        // beyond it while one is in flight is dropped, not buffered.
        let (tx, rx) = mpsc::channel(MAX_PENDING);
        tokio::spawn(publish_all(rx, recorder, dropped.clone()));
        Self { tx, dropped }
    }

    /// Queues `event` about `regarding`; returns at once, dropping it
    /// (counted) when the queue is full.
    pub(super) fn publish(&self, regarding: ObjectReference, event: Event) {
        if self.tx.try_send(Request { regarding, event }).is_err() {
            self.dropped.inc();
        }
    }
}

/// The Events waiting, in arrival order, with how many each stands for.
#[derive(Default)]
struct Pending {
    order: VecDeque<Key>,
    waiting: HashMap<Key, (Request, u32)>,
}

impl Pending {
    /// Adds one Event: folded into a waiting one of the same object,
    /// reason and action (the newest note kept), else queued; `false` when
    /// it is dropped because [`MAX_PENDING`] are waiting.
    fn add(&mut self, request: Request) -> bool {
        let key = key_of(&request);
        if let Some((waiting, count)) = self.waiting.get_mut(&key) {
            *waiting = request;
            *count += 1;
            return true;
        }
        if self.waiting.len() >= MAX_PENDING {
            return false;
        }
        self.order.push_back(key.clone());
        self.waiting.insert(key, (request, 1));
        true
    }

    /// The oldest waiting Event, its note saying how many it stands for.
    fn next(&mut self) -> Option<Request> {
        let key = self.order.pop_front()?;
        let (mut request, count) = self.waiting.remove(&key)?;
        if count > 1
            && let Some(note) = &mut request.event.note
        {
            note.push_str(&format!(" ({count} such Events folded into this one)"));
        }
        Some(request)
    }

    fn len(&self) -> usize {
        self.waiting.len()
    }
}

fn key_of(request: &Request) -> Key {
    let r = &request.regarding;
    (
        r.namespace.clone(),
        r.kind.clone(),
        r.name.clone(),
        request.event.reason.clone(),
        request.event.action.clone(),
    )
}

async fn publish_all(mut rx: mpsc::Receiver<Request>, recorder: Recorder, dropped: IntCounter) {
    let mut pending = Pending::default();
    let mut pace = tokio::time::interval(Duration::from_secs(1) / PER_SECOND);
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            request = rx.recv() => match request {
                Some(request) => {
                    if !pending.add(request) {
                        dropped.inc();
                    }
                }
                None => return,
            },
            _ = pace.tick(), if pending.len() > 0 => {
                if let Some(Request { regarding, event }) = pending.next()
                    && let Err(error) = recorder.publish(&event, &regarding).await
                {
                    tracing::debug!(error = %crate::error::Chain(&error), "could not record an Event");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::events::EventType;

    fn request(name: &str, reason: &str, note: &str) -> Request {
        Request {
            regarding: ObjectReference {
                kind: Some("ServiceImport".into()),
                namespace: Some("demo".into()),
                name: Some(name.into()),
                ..ObjectReference::default()
            },
            event: Event {
                type_: EventType::Warning,
                reason: reason.into(),
                note: Some(note.into()),
                action: "RejectPeerInput".into(),
                secondary: None,
            },
        }
    }

    #[test]
    fn repeats_waiting_together_are_one_event_saying_how_many() {
        let mut pending = Pending::default();
        for i in 0..1000 {
            assert!(pending.add(request("web", "NotRoutable", &format!("endpoint {i}"))));
        }
        assert!(pending.add(request("web", "InServiceCIDR", "x")));
        assert!(pending.add(request("db", "NotRoutable", "y")));
        assert_eq!(pending.len(), 3);
        let first = pending.next().unwrap();
        assert_eq!(
            first.event.note.as_deref(),
            Some("endpoint 999 (1000 such Events folded into this one)")
        );
        assert_eq!(pending.next().unwrap().event.note.as_deref(), Some("x"));
        assert_eq!(
            pending.next().unwrap().regarding.name.as_deref(),
            Some("db")
        );
        assert!(pending.next().is_none());
    }

    #[test]
    fn past_the_bound_new_events_are_dropped_and_the_waiting_kept() {
        let mut pending = Pending::default();
        for i in 0..MAX_PENDING {
            assert!(pending.add(request(&format!("s{i}"), "NotRoutable", "x")));
        }
        assert!(!pending.add(request("one-more", "NotRoutable", "x")));
        assert!(pending.add(request("s0", "NotRoutable", "folded still")));
        assert_eq!(pending.len(), MAX_PENDING);
        assert_eq!(
            pending.next().unwrap().regarding.name.as_deref(),
            Some("s0")
        );
    }
}
