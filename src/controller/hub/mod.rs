//! Hub mode's I/O: with a hub Secret ([`crate::hub::HUB_SECRET`], written
//! by `clusterset-dns hub join`) in the controller's namespace, this
//! cluster publishes into its namespace on the hub and reads every other
//! member's publication from there, beside whatever peers its peer Secrets
//! name (a clusterset moving from the mesh to a hub has both for a while;
//! a cluster read both ways is read once, by its id).
//!
//! - [`reader`]: three hub-wide watches, whatever the number of members,
//!   told to the loop as one peer per member;
//! - [`publisher`]: this cluster's publication copied to the hub, and its
//!   Lease there renewed.
//!
//! The hub Secret is checked as a peer Secret is (a kubeconfig that runs
//! no code and reads no local file, [`crate::peering::kubeconfig`]), and
//! must name this cluster: a Secret written for another member is refused.
//! A changed Secret starts a new hub connection; its members' data
//! replaces the old connection's once read, with no gap. A deleted one
//! ends hub mode: its members go as a deleted peer Secret's peer does.

pub(crate) mod publisher;
pub(crate) mod reader;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::connection::Report;
use super::peers::Input;
use crate::hub::{HUB_LABEL, HUB_SECRET, member_namespace};
use crate::peering::{ANNOTATION_CLUSTER_ID, KUBECONFIG_KEY};

/// One hub connection: its reader and publisher. Dropping it stops them.
struct Session {
    kubeconfig: Vec<u8>,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Session {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Why a hub Secret is not used.
fn refusal(secret: &Secret, local_id: &str) -> Option<String> {
    if secret.labels().get(HUB_LABEL).map(String::as_str) != Some("true") {
        return Some(format!("it is not labelled {HUB_LABEL}=true"));
    }
    match secret.annotations().get(ANNOTATION_CLUSTER_ID) {
        Some(id) if id == local_id => None,
        Some(id) => Some(format!(
            "it was written for member {id:?} and this cluster is {local_id:?} (run `clusterset-dns hub join` for this cluster)"
        )),
        None => Some(format!(
            "it has no {ANNOTATION_CLUSTER_ID} annotation naming this cluster"
        )),
    }
}

/// Follows this cluster's hub Secret in `namespace`, connecting to the hub
/// it names; the members read are reported on `reports`.
pub(super) fn spawn(
    local: Client,
    namespace: &str,
    local_id: &str,
    reports: mpsc::Sender<Report>,
) -> JoinHandle<()> {
    let namespace = namespace.to_owned();
    let local_id = local_id.to_owned();
    tokio::spawn(async move {
        let secrets: Api<Secret> = Api::namespaced(local.clone(), &namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={HUB_SECRET}"));
        let mut events = std::pin::pin!(crate::watch::stream(secrets, config));
        let mut session: Option<Session> = None;
        let mut generation = 0;
        let mut listed = false;
        let gone = |reports: &mpsc::Sender<Report>| {
            let reports = reports.clone();
            async move {
                reports
                    .send(Report::Peers(Box::new(Input::HubGone)))
                    .await
                    .is_ok()
            }
        };
        while let Some(event) = events.next().await {
            let secret = match event {
                Ok(Event::Init) => {
                    listed = false;
                    continue;
                }
                Ok(Event::InitApply(secret) | Event::Apply(secret)) => {
                    listed = true;
                    secret
                }
                Ok(Event::InitDone) => {
                    if !listed {
                        session = None;
                        if !gone(&reports).await {
                            return;
                        }
                    }
                    continue;
                }
                Ok(Event::Delete(_)) => {
                    tracing::info!("hub Secret deleted: this cluster leaves hub mode");
                    session = None;
                    if !gone(&reports).await {
                        return;
                    }
                    continue;
                }
                Err(error) => {
                    tracing::debug!(error = %crate::error::Chain(&error), "watch of the hub Secret failing");
                    continue;
                }
            };
            if let Some(why) = refusal(&secret, &local_id) {
                tracing::error!(
                    secret = HUB_SECRET,
                    reason = crate::peering::reason::PEER_REFUSED,
                    "hub Secret refused: {why}"
                );
                continue;
            }
            let kubeconfig = secret
                .data
                .as_ref()
                .and_then(|data| data.get(KUBECONFIG_KEY))
                .map(|bytes| bytes.0.clone())
                .unwrap_or_default();
            if session.as_ref().is_some_and(|s| s.kubeconfig == kubeconfig) {
                continue;
            }
            // A broken rotation keeps the connection there is.
            let client = match crate::peering::kubeconfig::client(&kubeconfig).await {
                Ok((client, server)) => {
                    tracing::info!(%server, "hub mode: publishing to and reading from the hub");
                    client
                }
                Err(error) => {
                    tracing::error!(
                        secret = HUB_SECRET,
                        reason = crate::peering::reason::INVALID_KUBECONFIG,
                        %error,
                        "hub Secret refused"
                    );
                    continue;
                }
            };
            let hub_namespace = match member_namespace(&local_id) {
                Ok(namespace) => namespace,
                Err(error) => {
                    tracing::error!(%error, "this cluster cannot be a hub member");
                    return;
                }
            };
            generation += 1;
            let reader = reader::Reader::new(generation, &local_id, reports.clone());
            let publisher = publisher::Publisher::new(
                local.clone(),
                &namespace,
                client.clone(),
                &hub_namespace,
                &local_id,
            );
            session = Some(Session {
                kubeconfig,
                tasks: [
                    tokio::spawn(reader.run(client)),
                    tokio::spawn(publisher.run()),
                ],
            });
        }
    })
}
