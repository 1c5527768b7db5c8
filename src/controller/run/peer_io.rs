//! The peers' I/O: each peer connection's tasks (identity read, watches,
//! probe), the peer Secret watch turned into inputs of the peers' state
//! machine ([`crate::controller::peers`]), and that machine's effects
//! carried out (connections, refusal Events, peer Leases, gauges). What an
//! effect asks of the loop itself (services to plan) is handed back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher::{self, Event as WatcherEvent};
use kube::{Client, ResourceExt};
use tokio::sync::{Semaphore, mpsc};

use super::settings::Settings;
use super::signals::Signals;
use crate::controller::cluster::Touched;
use crate::controller::connection::{
    ClusterKey, Connection, Probing, Report, Scope, connect, read_form,
};
use crate::controller::events::{SecretRef, Warning};
use crate::controller::naming::FIELD_MANAGER;
use crate::controller::peers::{Contact, Effect, Input, is_hub_peer};
use crate::controller::publication::Form;
use crate::peering::{self, PeerSecret, lease, read_identity};

/// What an identity task read: the connection, what it found, and when the
/// peer answered, the client it read with and where and in which form the
/// peer publishes.
pub(super) type IdentityRead = (String, u64, Contact, Option<PeerClient>);

/// A peer's client, the namespace it publishes in, and the form.
pub(super) type PeerClient = (Client, String, Form);

/// What an effect asks of the loop: services to plan.
pub(super) enum Replan {
    /// These services.
    Services(Touched),
    /// Every service.
    All,
}

/// The I/O of one peer connection: the identity read, the client it read
/// with, then the watches and probe. Dropping it stops them.
struct ConnTasks {
    identity: Option<tokio::task::JoinHandle<()>>,
    /// The client the identity was read with, and where and in which form
    /// the peer publishes.
    client: Option<PeerClient>,
    connection: Option<Connection>,
}

impl Drop for ConnTasks {
    fn drop(&mut self) {
        if let Some(task) = &self.identity {
            task.abort();
        }
    }
}

/// The peer connections' tasks and what starts and feeds them.
pub(super) struct PeerIo {
    /// This cluster's client: peer Leases are written here.
    client: Client,
    /// This cluster's id, the holder of the peer Leases.
    local_id: String,
    /// Where peer Secrets and Leases live (and, unless a Secret says
    /// otherwise, where peers publish).
    namespace: String,
    /// How long an unreachable peer's data stays (a Lease's duration).
    grace: Duration,
    probing: Probing,
    /// The I/O of each live peer connection, by Secret and generation.
    tasks: BTreeMap<(String, u64), ConnTasks>,
    /// Where connections report what they read.
    reports: mpsc::Sender<Report>,
    /// Where identity tasks report.
    identities: mpsc::Sender<IdentityRead>,
    /// The label of each peer Secret's credential expiry gauge.
    credential_labels: BTreeMap<String, String>,
    /// Peer Lease writes in flight at once: a hub's members are renewed
    /// in the same tick, and one connection each would open hundreds.
    lease_writes: Arc<Semaphore>,
}

/// The most peer Lease writes in flight at once.
const LEASE_WRITES: usize = 4;

impl PeerIo {
    /// Peer I/O for the cluster `local_id`, reached through `client`, its
    /// connections reporting to `reports`; identity reads come back on the
    /// receiver returned.
    pub(super) fn new(
        client: Client,
        local_id: &str,
        settings: &Settings,
        reports: mpsc::Sender<Report>,
    ) -> (Self, mpsc::Receiver<IdentityRead>) {
        let (identities, read) = mpsc::channel(64);
        let io = Self {
            client,
            local_id: local_id.to_owned(),
            namespace: settings.namespace.clone(),
            grace: settings.grace,
            probing: settings.probing,
            tasks: BTreeMap::new(),
            reports,
            identities,
            credential_labels: BTreeMap::new(),
            lease_writes: Arc::new(Semaphore::new(LEASE_WRITES)),
        };
        (io, read)
    }

    /// An event of the peer Secret watch as an input of the peers' state
    /// (`None` for a watch error, logged), keeping the credential expiry
    /// gauge true to it.
    pub(super) fn secret_input(
        &mut self,
        signals: &Signals,
        event: Result<WatcherEvent<Secret>, watcher::Error>,
    ) -> Option<Input> {
        let input = match event {
            Ok(WatcherEvent::Apply(secret)) => self.secret_applied(signals, &secret, false),
            Ok(WatcherEvent::InitApply(secret)) => self.secret_applied(signals, &secret, true),
            Ok(WatcherEvent::Delete(secret)) => {
                self.credential_gauge(signals, &secret.name_any(), &PeerSecret::default());
                Input::SecretDeleted(secret.name_any())
            }
            Ok(WatcherEvent::Init) => Input::SecretsListing,
            Ok(WatcherEvent::InitDone) => Input::SecretsListed,
            Err(error) => {
                tracing::warn!(error = %crate::error::Chain(&error), "watch of peer Secrets failing");
                return None;
            }
        };
        Some(input)
    }

    fn secret_applied(&mut self, signals: &Signals, secret: &Secret, listed: bool) -> Input {
        let read = PeerSecret::read(secret);
        self.credential_gauge(signals, &secret.name_any(), &read);
        Input::SecretApplied {
            secret: read,
            name: secret.name_any(),
            listed,
        }
    }

    /// Keeps `clusterset_dns_controller_peer_credential_expiry_timestamp_seconds`
    /// true to Secret `name` as now read: labelled with the peer id it
    /// records (else its name), removed when it never expires or is gone.
    fn credential_gauge(&mut self, signals: &Signals, name: &str, secret: &PeerSecret) {
        let gauge = &signals.metrics.peer_credential_expiry;
        if let Some(old) = self.credential_labels.remove(name) {
            gauge.remove_label_values(&[&old]).ok();
        }
        if let Some(expires) = secret.credential_expires {
            let label = secret.cluster_id.clone().unwrap_or_else(|| name.to_owned());
            gauge.with_label_values(&[&label]).set(expires.as_second());
            self.credential_labels.insert(name.to_owned(), label);
        }
    }

    /// Keeps the client an identity task read with, for the watches the
    /// peers' state may start next.
    pub(super) fn identity_read(
        &mut self,
        secret: &str,
        generation: u64,
        client: Option<PeerClient>,
    ) {
        if let Some(tasks) = self.tasks.get_mut(&(secret.to_owned(), generation)) {
            tasks.client = client;
        }
    }

    /// Drops the I/O of every connection that `live` says is gone.
    pub(super) fn keep_live(&mut self, live: impl Fn(&str, u64) -> bool) {
        self.tasks
            .retain(|(secret, generation), _| live(secret, *generation));
    }

    /// Carries out `effect`; returns what it asks of the loop.
    pub(super) fn carry_out(&mut self, signals: &Signals, effect: Effect) -> Option<Replan> {
        match effect {
            Effect::Connect {
                secret,
                generation,
                kubeconfig,
                namespace,
            } => {
                let namespace = namespace.unwrap_or_else(|| self.namespace.clone());
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
            } => self.start_watches(secret, generation, id),
            Effect::Refused {
                secret,
                reason,
                message,
            } => {
                signals
                    .metrics
                    .peers_refused
                    .with_label_values(&[reason])
                    .inc();
                signals.events.warn(Warning::PeerRefused {
                    secret: self.secret_ref(&secret),
                    reason,
                    message: &message,
                });
            }
            Effect::Warning {
                secret,
                reason,
                message,
            } => signals.events.warn(Warning::Credential {
                secret: self.secret_ref(&secret),
                reason,
                message: &message,
            }),
            Effect::Touched(touched) => return Some(Replan::Services(touched)),
            Effect::ReplanAll => return Some(Replan::All),
            Effect::SyncError { peer, kind } => signals
                .metrics
                .peer_sync_errors
                .with_label_values(&[&peer, kind])
                .inc(),
            Effect::OverLimit { peer, count } => signals
                .metrics
                .rejected
                .with_label_values(&[&peer, "peer-limit"])
                .inc_by(count),
            Effect::RenewLease { id, secret, seen } => {
                let (client, namespace) = (self.client.clone(), self.namespace.clone());
                let (local_id, grace) = (self.local_id.clone(), self.grace);
                let writes = self.lease_writes.clone();
                tokio::spawn(async move {
                    let Ok(_permit) = writes.acquire_owned().await else {
                        return;
                    };
                    renew_lease(client, namespace, local_id, grace, (id, secret, seen)).await;
                });
            }
            Effect::Gauges { id, up, last_seen } => {
                signals
                    .metrics
                    .peer_up
                    .with_label_values(&[&id])
                    .set(up as i64);
                if let Some(since) =
                    last_seen.and_then(|seen| seen.duration_since(SystemTime::UNIX_EPOCH).ok())
                {
                    signals
                        .metrics
                        .peer_last_seen
                        .with_label_values(&[&id])
                        .set(since.as_secs() as i64);
                }
            }
            Effect::Forget { id } => {
                signals.metrics.peer_up.remove_label_values(&[&id]).ok();
            }
        }
        None
    }

    /// Starts the watches and probe of peer `id`'s connection, with the
    /// client its identity was read with.
    fn start_watches(&mut self, secret: String, generation: u64, id: String) {
        let key = (secret, generation);
        let Some(tasks) = self.tasks.get_mut(&key) else {
            return;
        };
        let Some((client, namespace, form)) = tasks.client.clone() else {
            return;
        };
        tracing::info!(peer = %id, ?form, %namespace, "reading the peer");
        let scope = Scope::Peer {
            id,
            namespace,
            form,
            probing: self.probing,
        };
        let (secret, generation) = key;
        let cluster = ClusterKey::Peer { secret, generation };
        tasks.connection = Some(connect(client, cluster, scope, self.reports.clone()));
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
        let tx = self.identities.clone();
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
        signals: &Signals,
        key: &ClusterKey,
        peer: &str,
        reason: &'static str,
        what: &str,
    ) {
        let ClusterKey::Peer { secret, .. } = key else {
            return;
        };
        signals.peer_input_refused(None, peer, reason, what);
        signals.events.warn(Warning::PeerInputRejected {
            secret: self.secret_ref(secret),
            peer,
            reason,
            what,
        });
    }

    /// The peer Secret `name`, as a Warning's subject: for a hub member,
    /// the hub Secret it is read through.
    fn secret_ref<'a>(&'a self, name: &'a str) -> SecretRef<'a> {
        let name = if is_hub_peer(name) {
            crate::hub::HUB_SECRET
        } else {
            name
        };
        SecretRef {
            namespace: &self.namespace,
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
