//! Warning Events: what each says ([`Warning`], a pure mapping to its
//! subject and Event) and how they are published off the controller's
//! loop (issue 44, M1).
//!
//! Each Event is an API round trip, and a peer decides how many there are
//! (one per refused endpoint, slice or export). The loop hands each to
//! [`Events::warn`], which never waits; one task publishes them at most
//! [`PER_SECOND`] a second. Repeats of one (object, reason, action) that
//! wait together are folded into one Event that says how many it stands
//! for, and past [`MAX_PENDING`] distinct waiting Events new ones are
//! dropped and counted (`clusterset_dns_controller_events_dropped_total`):
//! the metric `peer_objects_rejected_total` and `/explain` still count and
//! list every refusal.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use prometheus::IntCounter;
use tokio::sync::mpsc;

use super::reconcile::{Refusal, Rejection};
use crate::api::{ServiceImport, ServiceRef};
use crate::peering::reason::PEER_REFUSED;

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

    /// Queues `warning`'s Event on its subject; returns at once, dropping
    /// it (counted) when the queue is full.
    pub(super) fn warn(&self, warning: Warning<'_>) {
        let (regarding, event) = warning.event();
        if self.tx.try_send(Request { regarding, event }).is_err() {
            self.dropped.inc();
        }
    }
}

/// A Warning Event the controller publishes: one variant per kind, each
/// with what its note says.
#[derive(Debug, Clone, Copy)]
pub(super) enum Warning<'a> {
    /// A write for `service` was refused: an object not ours holds the
    /// name (issue 31: never taken over). On the ServiceImport.
    Refused {
        /// The service the write was for.
        service: &'a ServiceRef,
        /// What was not written, and why.
        refusal: &'a Refusal,
    },
    /// The writes for `service` keep failing: they are retried with a
    /// growing delay, and the controller's log has each error. On the
    /// ServiceImport.
    WriteFailing {
        /// The service whose writes fail.
        service: &'a ServiceRef,
        /// How many tries in a row failed.
        failures: u32,
    },
    /// Part of a peer's input for `service` was refused as untrusted. On
    /// the ServiceImport.
    RejectedPeerInput {
        /// The service the input was for.
        service: &'a ServiceRef,
        /// What was refused, from which peer, by which rule.
        rejection: &'a Rejection,
    },
    /// Part of a peer's publication was refused as untrusted before it
    /// named a service of ours. On the peer's Secret.
    PeerInputRejected {
        /// The peer Secret.
        secret: SecretRef<'a>,
        /// The peer's cluster id.
        peer: &'a str,
        /// The rule it broke (CamelCase).
        reason: &'static str,
        /// What was refused, for a person.
        what: &'a str,
    },
    /// The derived Service holding `service`'s clusterset IP was deleted
    /// (the import became headless, or this cluster lost the import's
    /// families): clients holding the old VIP must resolve again. On the
    /// ServiceImport.
    ClusterSetIpReleased {
        /// The service.
        service: &'a ServiceRef,
        /// The derived Service's namespace.
        namespace: &'a str,
        /// The derived Service's name.
        derived: &'a str,
    },
    /// A peer Secret, or what it now holds, is refused
    /// ([`crate::peering::reason`]). On the Secret.
    PeerRefused {
        /// The peer Secret.
        secret: SecretRef<'a>,
        /// Why (CamelCase).
        reason: &'static str,
        /// What an operator reads.
        message: &'a str,
    },
    /// A peer Secret that refuses nothing needs care (its credential
    /// expires soon). On the Secret.
    Credential {
        /// The peer Secret.
        secret: SecretRef<'a>,
        /// The Event's reason (CamelCase).
        reason: &'static str,
        /// What an operator reads.
        message: &'a str,
    },
}

/// A peer Secret, as the subject of a Warning.
#[derive(Debug, Clone, Copy)]
pub(super) struct SecretRef<'a> {
    /// The controller's namespace, where peer Secrets live.
    pub namespace: &'a str,
    /// The Secret's name.
    pub name: &'a str,
}

impl Warning<'_> {
    /// The subject and the Event: pure, so what each Warning says is
    /// tested without an apiserver.
    pub(super) fn event(&self) -> (ObjectReference, Event) {
        match *self {
            Self::Refused { service, refusal } => (
                import_reference(service),
                warning(
                    "Refused",
                    "Write",
                    format!("{}: {}", refusal.reason, refusal.message(service)),
                ),
            ),
            Self::WriteFailing { service, failures } => (
                import_reference(service),
                warning(
                    "WriteFailing",
                    "Write",
                    format!(
                        "{failures} tries in a row to write what {service} needs here failed; retrying with a growing delay (up to 5 minutes); the controller's log says why"
                    ),
                ),
            ),
            // The reason names the rule: the Recorder folds Events of one
            // reason and action on one object into a series, whatever
            // their notes say.
            Self::RejectedPeerInput { service, rejection } => (
                import_reference(service),
                warning(
                    rejection.reason,
                    "RejectPeerInput",
                    format!(
                        "{}: {} from cluster {} is not imported for {service}",
                        rejection.reason, rejection.what, rejection.peer
                    ),
                ),
            ),
            // On the Secret: the input names no service of ours to put it
            // on.
            Self::PeerInputRejected {
                secret,
                peer,
                reason,
                what,
            } => (
                secret.reference(),
                warning(
                    reason,
                    "RejectPeerInput",
                    format!("{reason}: {what} published by cluster {peer} is not imported"),
                ),
            ),
            Self::ClusterSetIpReleased {
                service,
                namespace,
                derived,
            } => (
                ObjectReference {
                    namespace: Some(namespace.to_owned()),
                    ..import_reference(service)
                },
                warning(
                    "ClusterSetIPReleased",
                    "DeleteDerivedService",
                    format!(
                        "derived Service {derived} deleted: the import no longer has a clusterset IP here"
                    ),
                ),
            ),
            // The refusal's own reason as the action: Events of one reason
            // and action on one object are folded into a series that keeps
            // its first note, so a later refusal of the same Secret for
            // another reason would otherwise never be told.
            Self::PeerRefused {
                secret,
                reason,
                message,
            } => (
                secret.reference(),
                warning(PEER_REFUSED, reason, format!("{reason}: {message}")),
            ),
            // `reason` is the Event's own, so `peer list` does not take it
            // for a refusal.
            Self::Credential {
                secret,
                reason,
                message,
            } => (
                secret.reference(),
                warning(reason, "CheckCredential", message.to_owned()),
            ),
        }
    }
}

impl SecretRef<'_> {
    /// The peer Secret, as an Event's subject.
    fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Secret".into()),
            name: Some(self.name.to_owned()),
            namespace: Some(self.namespace.to_owned()),
            ..ObjectReference::default()
        }
    }
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

/// A Warning Event.
fn warning(reason: &str, action: &str, note: String) -> Event {
    Event {
        type_: EventType::Warning,
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
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

    /// A Warning's subject as (kind, namespace, name), and its Event's
    /// (reason, action, note).
    type Told = ((String, String, String), (String, String, String));

    fn told(warning: Warning<'_>) -> Told {
        let (subject, event) = warning.event();
        assert_eq!(event.type_, EventType::Warning);
        assert_eq!(event.secondary, None);
        let text = |s: Option<String>| s.unwrap_or_default();
        (
            (
                text(subject.kind),
                text(subject.namespace),
                text(subject.name),
            ),
            (event.reason, event.action, text(event.note)),
        )
    }

    fn told_as(
        kind: &str,
        namespace: &str,
        name: &str,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Told {
        (
            (kind.into(), namespace.into(), name.into()),
            (reason.into(), action.into(), note.into()),
        )
    }

    fn web() -> ServiceRef {
        ServiceRef::new("demo", "web")
    }

    const PEERS: SecretRef<'static> = SecretRef {
        namespace: "clusterset-dns",
        name: "peer-b",
    };

    #[test]
    fn warnings_about_an_import_are_on_its_service_import() {
        let service = web();
        let refusal = Refusal {
            kind: crate::controller::reconcile::Kind::Service,
            name: "derived-abc".into(),
            reason: crate::controller::ownership::NOT_OURS,
        };
        assert_eq!(
            told(Warning::Refused {
                service: &service,
                refusal: &refusal,
            }),
            told_as(
                "ServiceImport",
                "demo",
                "web",
                "Refused",
                "Write",
                "NotOurs: Service demo/derived-abc exists and is not managed by clusterset-dns: it is left untouched, and nothing is written over it for demo/web",
            )
        );
        assert_eq!(
            told(Warning::WriteFailing {
                service: &service,
                failures: 5,
            }),
            told_as(
                "ServiceImport",
                "demo",
                "web",
                "WriteFailing",
                "Write",
                "5 tries in a row to write what demo/web needs here failed; retrying with a growing delay (up to 5 minutes); the controller's log says why",
            )
        );
        let rejection = Rejection {
            peer: "b".into(),
            reason: "NotRoutable",
            what: "endpoint 127.0.0.1 of EndpointSlice web-x".into(),
        };
        assert_eq!(
            told(Warning::RejectedPeerInput {
                service: &service,
                rejection: &rejection,
            }),
            told_as(
                "ServiceImport",
                "demo",
                "web",
                "NotRoutable",
                "RejectPeerInput",
                "NotRoutable: endpoint 127.0.0.1 of EndpointSlice web-x from cluster b is not imported for demo/web",
            )
        );
        assert_eq!(
            told(Warning::ClusterSetIpReleased {
                service: &service,
                namespace: "demo",
                derived: "derived-abc",
            }),
            told_as(
                "ServiceImport",
                "demo",
                "web",
                "ClusterSetIPReleased",
                "DeleteDerivedService",
                "derived Service derived-abc deleted: the import no longer has a clusterset IP here",
            )
        );
        let (subject, _) = Warning::WriteFailing {
            service: &service,
            failures: 5,
        }
        .event();
        assert_eq!(
            subject.api_version.as_deref(),
            Some(&*<ServiceImport as kube::Resource>::api_version(&()))
        );
    }

    #[test]
    fn warnings_about_a_peer_are_on_its_secret() {
        assert_eq!(
            told(Warning::PeerInputRejected {
                secret: PEERS,
                peer: "b",
                reason: "InvalidName",
                what: "PublishedService x",
            }),
            told_as(
                "Secret",
                "clusterset-dns",
                "peer-b",
                "InvalidName",
                "RejectPeerInput",
                "InvalidName: PublishedService x published by cluster b is not imported",
            )
        );
        assert_eq!(
            told(Warning::Credential {
                secret: PEERS,
                reason: "CredentialExpiring",
                message: "expires in 2 days",
            }),
            told_as(
                "Secret",
                "clusterset-dns",
                "peer-b",
                "CredentialExpiring",
                "CheckCredential",
                "expires in 2 days",
            )
        );
        let (subject, _) = Warning::Credential {
            secret: PEERS,
            reason: "CredentialExpiring",
            message: "",
        }
        .event();
        assert_eq!(subject.api_version.as_deref(), Some("v1"));
    }

    #[test]
    fn each_refusal_of_a_peer_is_its_own_series() {
        let refused = |reason| {
            told(Warning::PeerRefused {
                secret: PEERS,
                reason,
                message: "why",
            })
        };
        assert_eq!(
            refused("IdentityChanged"),
            told_as(
                "Secret",
                "clusterset-dns",
                "peer-b",
                "PeerRefused",
                "IdentityChanged",
                "IdentityChanged: why",
            )
        );
        // The action differs, so the Recorder does not fold the second
        // refusal into the first's series.
        assert_ne!(
            refused("InvalidKubeconfig").1.1,
            refused("IdentityChanged").1.1
        );
    }
}
