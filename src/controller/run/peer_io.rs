//! The peers' I/O: the peer Secret watch fed to the peers' state machine
//! ([`crate::controller::peers`]), and its effects carried out (identity
//! reads, watches, refusal Events, peer Leases, gauges).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher::{self, Event as WatcherEvent};
use kube::{Client, ResourceExt};

use super::{ConnTasks, Controller};
use crate::controller::connection::{ClusterKey, Scope, connect, read_form};
use crate::controller::events::{SecretRef, Warning};
use crate::controller::naming::FIELD_MANAGER;
use crate::controller::peers::{Contact, Effect, Input, Now};
use crate::controller::schedule::Source;
use crate::peering::{self, PeerSecret, lease, read_identity};

impl Controller {
    /// The peer Secret watch, as inputs of the peers' state.
    pub(super) fn secrets(&mut self, event: Result<WatcherEvent<Secret>, watcher::Error>) {
        let input = match event {
            Ok(WatcherEvent::Apply(secret)) => {
                let read = PeerSecret::read(&secret);
                self.credential_gauge(&secret.name_any(), &read);
                Input::SecretApplied {
                    secret: read,
                    name: secret.name_any(),
                    listed: false,
                }
            }
            Ok(WatcherEvent::InitApply(secret)) => {
                let read = PeerSecret::read(&secret);
                self.credential_gauge(&secret.name_any(), &read);
                Input::SecretApplied {
                    secret: read,
                    name: secret.name_any(),
                    listed: true,
                }
            }
            Ok(WatcherEvent::Delete(secret)) => {
                self.credential_gauge(&secret.name_any(), &PeerSecret::default());
                Input::SecretDeleted(secret.name_any())
            }
            Ok(WatcherEvent::Init) => Input::SecretsListing,
            Ok(WatcherEvent::InitDone) => Input::SecretsListed,
            Err(error) => {
                tracing::warn!(error = %crate::error::Chain(&error), "watch of peer Secrets failing");
                return;
            }
        };
        self.step(input);
    }

    /// Keeps `clusterset_dns_controller_peer_credential_expiry_timestamp_seconds`
    /// true to Secret `name` as now read: labelled with the peer id it
    /// records (else its name), removed when it never expires or is gone.
    fn credential_gauge(&mut self, name: &str, secret: &PeerSecret) {
        let gauge = &self.metrics.peer_credential_expiry;
        if let Some(old) = self.credential_labels.remove(name) {
            gauge.remove_label_values(&[&old]).ok();
        }
        if let Some(expires) = secret.credential_expires {
            let label = secret.cluster_id.clone().unwrap_or_else(|| name.to_owned());
            gauge.with_label_values(&[&label]).set(expires.as_second());
            self.credential_labels.insert(name.to_owned(), label);
        }
    }

    /// Feeds one input to the peers' state and carries out its effects;
    /// then drops the I/O of connections the peers no longer have.
    pub(super) fn step(&mut self, input: Input) {
        // What a peer's watch touched takes its turn as that peer's.
        let source = match &input {
            Input::Watch { secret, .. } => Source::Peer(secret.clone()),
            _ => Source::Local,
        };
        for effect in self.peers.handle(input, Now::current()) {
            self.carry_out(&source, effect);
        }
        let peers = &self.peers;
        self.tasks
            .retain(|(secret, generation), _| peers.is_live(secret, *generation));
    }

    fn carry_out(&mut self, source: &Source, effect: Effect) {
        match effect {
            Effect::Connect {
                secret,
                generation,
                kubeconfig,
                namespace,
            } => {
                let namespace = namespace.unwrap_or_else(|| self.settings.namespace.clone());
                let identity = self.spawn_identity(&secret, generation, kubeconfig, namespace);
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
                let reports = self.reports_tx.clone();
                let key = (secret, generation);
                if let Some(tasks) = self.tasks.get_mut(&key)
                    && let Some((client, namespace, form)) = tasks.client.clone()
                {
                    tracing::info!(peer = %id, ?form, %namespace, "reading the peer");
                    let scope = Scope::Peer {
                        id,
                        namespace,
                        form,
                        probe_interval: self.settings.probe_interval,
                        probe_timeout: self.settings.probe_timeout,
                    };
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
            Effect::Warning {
                secret,
                reason,
                message,
            } => self.events.warn(Warning::Credential {
                secret: self.secret_ref(&secret),
                reason,
                message: &message,
            }),
            Effect::Touched(touched) => self.mark(source, touched),
            Effect::ReplanAll => self.schedule.mark_all(),
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

    /// Builds the peer's client and reads its identity and the form it
    /// publishes in (its marker in `namespace`), retrying while the peer
    /// does not answer.
    fn spawn_identity(
        &self,
        secret: &str,
        generation: u64,
        kubeconfig: Vec<u8>,
        namespace: String,
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
                let read = match read_identity(&client).await {
                    Ok(identity) => read_form(&client, &namespace)
                        .await
                        .map(|form| (identity, form))
                        .map_err(|error| format!("reading its publication marker: {error}")),
                    Err(error) => Err(error),
                };
                let (contact, answered) = match read {
                    Ok((identity, form)) => (
                        Contact::Identified(identity),
                        Some((client.clone(), namespace.clone(), form)),
                    ),
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

    /// Counts part of a peer's publication refused as untrusted input, and
    /// records a Warning Event on the peer's Secret (the input names no
    /// service of ours to put it on).
    pub(super) fn publication_rejected(
        &self,
        key: &ClusterKey,
        peer: &str,
        reason: &'static str,
        what: &str,
    ) {
        let ClusterKey::Peer { secret, .. } = key else {
            return;
        };
        if let Some(suppressed) = self.rejection_logs.allow() {
            tracing::warn!(%peer, reason, what, suppressed, "refused untrusted peer input");
        }
        self.metrics
            .rejected
            .with_label_values(&[peer, reason])
            .inc();
        self.events.warn(Warning::PeerInputRejected {
            secret: self.secret_ref(secret),
            peer,
            reason,
            what,
        });
    }

    /// Counts a refused peer Secret and records a Warning Event on it.
    fn record_refusal(&self, secret: &str, reason: &'static str, message: &str) {
        self.metrics
            .peers_refused
            .with_label_values(&[reason])
            .inc();
        self.events.warn(Warning::PeerRefused {
            secret: self.secret_ref(secret),
            reason,
            message,
        });
    }

    /// The peer Secret `name`, as a Warning's subject.
    fn secret_ref<'a>(&'a self, name: &'a str) -> SecretRef<'a> {
        SecretRef {
            namespace: &self.settings.namespace,
            name,
        }
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
    let body = crate::api::apply_body(&lease).unwrap_or_default();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    if let Err(error) = api
        .patch(&lease::lease_name(&id), &params, &Patch::Apply(body))
        .await
    {
        tracing::warn!(peer = id, error = %crate::error::Chain(&error), "cannot renew the peer Lease");
    }
}
