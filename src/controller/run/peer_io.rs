//! The peers' I/O: the peer Secret watch fed to the peers' state machine
//! ([`crate::controller::peers`]), and its effects carried out (identity
//! reads, watches, refusal Events, peer Leases, gauges).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::runtime::watcher::{self, Event as WatcherEvent};
use kube::{Client, ResourceExt};

use super::{ConnTasks, Controller};
use crate::controller::connection::{ClusterKey, Scope, connect};
use crate::controller::naming::FIELD_MANAGER;
use crate::controller::peers::{Contact, Effect, Input, Now};
use crate::peering::{self, PeerSecret, lease, read_identity, reason};

impl Controller {
    /// The peer Secret watch, as inputs of the peers' state.
    pub(super) fn secrets(&mut self, event: Result<WatcherEvent<Secret>, watcher::Error>) {
        let input = match event {
            Ok(WatcherEvent::Apply(secret)) => Input::SecretApplied {
                secret: PeerSecret::read(&secret),
                name: secret.name_any(),
                listed: false,
            },
            Ok(WatcherEvent::InitApply(secret)) => Input::SecretApplied {
                secret: PeerSecret::read(&secret),
                name: secret.name_any(),
                listed: true,
            },
            Ok(WatcherEvent::Delete(secret)) => Input::SecretDeleted(secret.name_any()),
            Ok(WatcherEvent::Init) => Input::SecretsListing,
            Ok(WatcherEvent::InitDone) => Input::SecretsListed,
            Err(error) => {
                tracing::warn!(error = %crate::error::Chain(&error), "watch of peer Secrets failing");
                return;
            }
        };
        self.step(input);
    }

    /// Feeds one input to the peers' state and carries out its effects;
    /// then drops the I/O of connections the peers no longer have.
    pub(super) fn step(&mut self, input: Input) {
        for effect in self.peers.handle(input, Now::current()) {
            self.carry_out(effect);
        }
        let peers = &self.peers;
        self.tasks
            .retain(|(secret, generation), _| peers.is_live(secret, *generation));
    }

    fn carry_out(&mut self, effect: Effect) {
        match effect {
            Effect::Connect {
                secret,
                generation,
                kubeconfig,
            } => {
                let identity = self.spawn_identity(&secret, generation, kubeconfig);
                let tasks = ConnTasks {
                    identity: Some(identity),
                    client: None,
                    connection: None,
                };
                self.tasks.insert((secret, generation), tasks);
            }
            Effect::StartWatches {
                secret,
                generation,
                id,
            } => {
                let scope = Scope::Peer {
                    id,
                    probe_interval: self.settings.probe_interval,
                    probe_timeout: self.settings.probe_timeout,
                };
                let reports = self.reports_tx.clone();
                let key = (secret, generation);
                if let Some(tasks) = self.tasks.get_mut(&key)
                    && let Some(client) = tasks.client.clone()
                {
                    let (secret, generation) = key;
                    let cluster = ClusterKey::Peer { secret, generation };
                    tasks.connection = Some(connect(client, cluster, scope, reports));
                }
            }
            Effect::Refused {
                secret,
                reason,
                message,
            } => self.record_refusal(&secret, reason, &message),
            Effect::Touched(touched) => self.mark(touched),
            Effect::ReplanAll => self.dirty.all = true,
            Effect::SyncError { peer, kind } => self
                .metrics
                .peer_sync_errors
                .with_label_values(&[&peer, kind])
                .inc(),
            Effect::OverLimit { peer, count } => self
                .metrics
                .rejected
                .with_label_values(&[&peer, "peer-limit"])
                .inc_by(count),
            Effect::RenewLease { id, secret, seen } => {
                tokio::spawn(renew_lease(
                    self.client.clone(),
                    self.settings.namespace.clone(),
                    self.local_id.clone(),
                    self.settings.grace,
                    (id, secret, seen),
                ));
            }
            Effect::Gauges { id, up, last_seen } => {
                self.metrics
                    .peer_up
                    .with_label_values(&[&id])
                    .set(up as i64);
                if let Some(since) =
                    last_seen.and_then(|seen| seen.duration_since(SystemTime::UNIX_EPOCH).ok())
                {
                    self.metrics
                        .peer_last_seen
                        .with_label_values(&[&id])
                        .set(since.as_secs() as i64);
                }
            }
            Effect::Forget { id } => {
                self.metrics.peer_up.remove_label_values(&[&id]).ok();
            }
        }
    }

    /// Builds the peer's client and reads its identity, retrying while the
    /// peer does not answer.
    fn spawn_identity(
        &self,
        secret: &str,
        generation: u64,
        kubeconfig: Vec<u8>,
    ) -> tokio::task::JoinHandle<()> {
        let tx = self.identities_tx.clone();
        let secret = secret.to_owned();
        tokio::spawn(async move {
            let client = match peering::kubeconfig::client(&kubeconfig).await {
                Ok((client, _server)) => client,
                Err(error) => {
                    let invalid = Contact::Invalid(error.to_string());
                    let _ = tx.send((secret, generation, invalid, None)).await;
                    return;
                }
            };
            let mut delay = Duration::from_millis(500);
            loop {
                let (contact, answered) = match read_identity(&client).await {
                    Ok(identity) => (Contact::Identified(identity), Some(client.clone())),
                    Err(error) => (Contact::Unreachable(error), None),
                };
                let done = answered.is_some();
                if tx
                    .send((secret.clone(), generation, contact, answered))
                    .await
                    .is_err()
                    || done
                {
                    return;
                }
                tokio::time::sleep(delay).await;
                // Capped low: a peer back from a long outage is imported
                // again within seconds.
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        })
    }

    /// Counts a refused peer Secret and records a Warning Event on it.
    fn record_refusal(&self, secret: &str, reason: &'static str, message: &str) {
        self.metrics
            .peers_refused
            .with_label_values(&[reason])
            .inc();
        let recorder = self.recorder.clone();
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Secret".into()),
            name: Some(secret.to_owned()),
            namespace: Some(self.settings.namespace.clone()),
            ..ObjectReference::default()
        };
        let event = KubeEvent {
            type_: EventType::Warning,
            reason: reason::PEER_REFUSED.into(),
            note: Some(format!("{reason}: {message}")),
            action: "Connect".into(),
            secondary: None,
        };
        tokio::spawn(async move {
            if let Err(error) = recorder.publish(&event, &reference).await {
                tracing::debug!(error = %crate::error::Chain(&error), "could not record an Event");
            }
        });
    }
}

/// The peer Leases of an earlier run: when each peer was last seen healthy,
/// so a restarted controller keeps honouring the grace period.
pub(super) async fn peer_leases(
    client: &Client,
    namespace: &str,
) -> BTreeMap<String, (String, SystemTime)> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let params = kube::api::ListParams::default().labels(lease::LEASE_SELECTOR);
    let leases = match api.list(&params).await {
        Ok(list) => list.items,
        Err(error) => {
            tracing::warn!(error = %crate::error::Chain(&error), "cannot list peer Leases: peers that do not answer at start-up get no grace");
            return BTreeMap::new();
        }
    };
    leases
        .iter()
        .filter_map(|found| match lease::parse(found) {
            Ok(peer) => Some((peer.secret, (peer.peer_id, SystemTime::from(peer.renewed)))),
            Err(error) => {
                tracing::warn!(%error, "ignoring a peer Lease that records no peer");
                None
            }
        })
        .collect()
}

/// Records in peer `id`'s Lease (held by this cluster) that the peer was
/// healthy at `seen`: a restarted controller keeps honouring the grace
/// period from there.
async fn renew_lease(
    client: Client,
    namespace: String,
    local_id: String,
    grace: Duration,
    (id, secret, seen): (String, String, SystemTime),
) {
    let api: Api<Lease> = Api::namespaced(client, &namespace);
    let lease = lease::lease(&namespace, &id, &secret, &local_id, grace, seen);
    let mut body = serde_json::to_value(&lease).unwrap_or_default();
    body["apiVersion"] = "coordination.k8s.io/v1".into();
    body["kind"] = "Lease".into();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    if let Err(error) = api
        .patch(&lease::lease_name(&id), &params, &Patch::Apply(body))
        .await
    {
        tracing::warn!(peer = id, error = %crate::error::Chain(&error), "cannot renew the peer Lease");
    }
}
