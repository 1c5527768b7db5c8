//! What the loop knows: this cluster's watched objects, the peers' state
//! (the peers' objects with it), and what a plan reads of them. Filled by
//! watch events and by our own writes as they land; read by plans,
//! `/ready` and `/explain`.

use std::collections::BTreeSet;
use std::time::Instant;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::settings::Settings;
use crate::api::ServiceRef;
use crate::api::{PublishedService, ServiceImport};
use crate::controller::apply::Written;
use crate::controller::cluster::{
    ClusterData, ClusterWatches, LocalData, Objects, Published, Touched,
};
use crate::controller::compat::NodeHints;
use crate::controller::connection::WatchEvent;
use crate::controller::ip_share::IpShare;
use crate::controller::lean::Lean;
use crate::controller::peers::{Now, Peers};
use crate::controller::reconcile::{Inputs, NamespaceFilter, Refusal, explain, plan};
use crate::controller::schedule::Gate;
use crate::label_selector::LabelSelector;
use crate::peering::Identity;
use crate::watch::{Verdict, Watch};

/// This cluster's objects, the peers' state, and the rules plans follow.
pub(super) struct Stores {
    /// This cluster's identity, as read at start.
    identity: Identity,
    /// Whether this cluster's apiserver accepts node hints, asked at start.
    node_hints: NodeHints,
    /// What this cluster's watches fill that peers' fill too.
    pub(super) local: ClusterData,
    /// What only this cluster has.
    pub(super) local_only: LocalData,
    watches: LocalWatches,
    /// The peers' state (pure); its effects are carried out by the peers'
    /// I/O.
    pub(super) peers: Peers,
    /// Denied namespaces.
    deny: NamespaceFilter,
    /// In the opt-in mode, the labels of the namespaces imported into.
    import_selector: Option<LabelSelector>,
    /// One peer's share of the Service CIDR, in percent.
    peer_ip_share: u8,
    /// Where this cluster publishes.
    publish_namespace: String,
}

/// This cluster's watches, each with its health.
struct LocalWatches {
    cluster: ClusterWatches,
    kubernetes_slices: Watch<Lean<EndpointSlice>, Objects<EndpointSlice>>,
    imports: Watch<Lean<ServiceImport>, Objects<ServiceImport>>,
    namespaces: Watch<k8s_openapi::api::core::v1::Namespace, LocalData>,
    cidrs: Watch<k8s_openapi::api::networking::v1::ServiceCIDR, LocalData>,
    nodes: Watch<Lean<k8s_openapi::api::core::v1::Node>, LocalData>,
    published: Watch<Lean<PublishedService>, Published>,
    published_slices: Watch<Lean<EndpointSlice>, Published>,
}

impl LocalWatches {
    fn new() -> Self {
        Self {
            cluster: ClusterWatches::new("endpointslices (ours)"),
            kubernetes_slices: Watch::new("endpointslices (of local services)"),
            imports: Watch::new("serviceimports"),
            namespaces: Watch::new("namespaces"),
            cidrs: Watch::new("servicecidrs"),
            nodes: Watch::new("nodes"),
            published: Watch::new("publishedservices"),
            published_slices: Watch::new("endpointslices (published)"),
        }
    }

    fn synced(&self) -> bool {
        self.cluster.synced()
            && self.kubernetes_slices.health().synced()
            && self.imports.health().synced()
            && self.namespaces.health().synced()
            && self.cidrs.health().synced()
            && self.nodes.health().synced()
            && self.published.health().synced()
            && self.published_slices.health().synced()
    }
}

impl Stores {
    /// Empty stores for the cluster `identity`, with `peers` as the peers'
    /// state and the rules of `settings`.
    pub(super) fn new(
        identity: Identity,
        peers: Peers,
        settings: &Settings,
        node_hints: NodeHints,
    ) -> Self {
        Self {
            node_hints,
            identity,
            local: ClusterData::default(),
            local_only: LocalData::default(),
            watches: LocalWatches::new(),
            peers,
            deny: settings.deny.clone(),
            import_selector: settings.import_selector.clone(),
            peer_ip_share: settings.peer_ip_share,
            publish_namespace: settings.namespace.clone(),
        }
    }

    /// Why the controller must restart when this cluster's identity now
    /// reads `now` (KEP-2149: a changed id or clusterset is leaving and
    /// rejoining); `None` while it is unchanged.
    pub(super) fn identity_changed(&self, now: &Identity) -> Option<String> {
        identity_change(&self.identity, now)
    }

    /// Takes one event of this cluster's watches; returns the services it
    /// touched, and why the controller must stop if the event says its
    /// role does not allow what it needs.
    pub(super) fn local_event(
        &mut self,
        event: WatchEvent,
        now: Instant,
    ) -> (Touched, Option<String>) {
        let w = &mut self.watches;
        let only = &mut self.local_only;
        let outcome = match event {
            WatchEvent::Cluster(e) => w.cluster.handle(&mut self.local, e, now),
            WatchEvent::KubernetesSlices(e) => {
                w.kubernetes_slices
                    .handle(&mut only.kubernetes_slices, e, now)
            }
            WatchEvent::Imports(e) => w.imports.handle(&mut only.imports, e, now),
            WatchEvent::Namespaces(e) => w.namespaces.handle(only, e, now),
            WatchEvent::ServiceCidrs(e) => w.cidrs.handle(only, e, now),
            WatchEvent::Nodes(e) => w.nodes.handle(only, e, now),
            WatchEvent::Published(e) => w.published.handle(&mut only.published, e, now),
            WatchEvent::PublishedSlices(e) => {
                w.published_slices.handle(&mut only.published, e, now)
            }
        };
        let fatal = match outcome.verdict() {
            Verdict::Fatal { message, .. } => Some(format!(
                "the controller's role does not allow what it needs: {message} (deploy/controller.yaml has the role it needs)"
            )),
            Verdict::FailingStarted(error) => {
                tracing::warn!(%error, "local watch failing");
                None
            }
            Verdict::StillFailing(_) | Verdict::Quiet => None,
        };
        let mut touched = self.take_local_touched();
        touched.all |= self.local_only.take_all_touched();
        (touched, fatal)
    }

    /// The services touched in this cluster's stores since last asked.
    pub(super) fn take_local_touched(&mut self) -> Touched {
        let mut touched = self.local.take_touched();
        touched.merge(self.local_only.kubernetes_slices.take_touched());
        touched.merge(self.local_only.imports.take_touched());
        touched.merge(self.local_only.published.take_touched());
        touched
    }

    /// Puts what a write returned where its watch would (the next plan
    /// starts from it before the watch event arrives).
    pub(super) fn land(&mut self, written: Written) {
        written.land(&mut self.local, &mut self.local_only);
    }

    /// Whether every watch of this cluster has listed once.
    pub(super) fn local_synced(&self) -> bool {
        self.watches.synced()
    }

    /// What the start-up gate waits for, as of now.
    pub(super) fn gate(&self) -> Gate {
        Gate {
            local_listed: self.watches.synced(),
            secrets_listed: self.peers.listed(),
            peers_synced: self.peers.synced(),
        }
    }

    /// How many services this cluster imports.
    pub(super) fn imports(&self) -> usize {
        self.local_only.imports.services().count()
    }

    /// Every service the controller has anything of: a full pass plans
    /// each.
    pub(super) fn all_services(&self) -> BTreeSet<ServiceRef> {
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

    /// The services this cluster publishes or should: its exports and
    /// what its publication still holds.
    pub(super) fn publication_services(&self) -> BTreeSet<ServiceRef> {
        let mut services: BTreeSet<ServiceRef> = self.local.exports.services().cloned().collect();
        services.extend(self.local_only.published.services().cloned());
        services
    }

    /// `/explain`'s answer for `service`, planned now; `write_refusals` are
    /// the writes the apiserver refused in its last cycle.
    pub(super) fn explain(
        &self,
        service: &ServiceRef,
        write_refusals: &[Refusal],
        deletions_allowed: bool,
    ) -> serde_json::Value {
        let explanation = self.with_inputs(deletions_allowed, |inputs| {
            let plan = plan(inputs, service);
            explain(
                service,
                inputs.local_id,
                inputs.peers,
                &plan,
                write_refusals,
            )
        });
        // Plain data (string keys only): serialising it cannot fail.
        serde_json::to_value(explanation).unwrap_or_default()
    }

    /// Runs `f` with everything a plan reads, as of now; nothing is
    /// deleted unless `deletions_allowed` (the start-up gate is open).
    pub(super) fn with_inputs<R>(
        &self,
        deletions_allowed: bool,
        f: impl FnOnce(&Inputs<'_>) -> R,
    ) -> R {
        let (views, unknown) = self.peers.views(Now::current());
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        f(&Inputs {
            local_id: &self.identity.cluster_id,
            local: &self.local,
            local_only: &self.local_only,
            peers: &views,
            unknown_peers: &unknown,
            deny: &self.deny,
            import_selector: self.import_selector.as_ref(),
            ip_share: &IpShare::new(self.peer_ip_share),
            deletions_allowed,
            publish_namespace: &self.publish_namespace,
            now: &now,
            node_hints: self.node_hints.accepted(),
        })
    }
}

/// Why a cluster whose identity was `was` and now reads `now` must
/// restart; `None` while neither its id nor its clusterset changed.
fn identity_change(was: &Identity, now: &Identity) -> Option<String> {
    (now.cluster_id != was.cluster_id || now.clusterset != was.clusterset).then(|| {
        format!(
            "this cluster's identity changed from {}/{} to {}/{}: restarting to rejoin",
            was.clusterset, was.cluster_id, now.clusterset, now.cluster_id
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(clusterset: &str, cluster_id: &str) -> Identity {
        Identity {
            cluster_id: cluster_id.into(),
            clusterset: clusterset.into(),
        }
    }

    #[test]
    fn a_changed_id_or_clusterset_restarts_the_controller_and_says_both() {
        let was = identity("set", "a");
        assert_eq!(identity_change(&was, &identity("set", "a")), None);
        assert_eq!(
            identity_change(&was, &identity("set", "b")).as_deref(),
            Some("this cluster's identity changed from set/a to set/b: restarting to rejoin")
        );
        assert!(identity_change(&was, &identity("other", "a")).is_some());
    }
}
