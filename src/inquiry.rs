//! What `/explain` asks the source task, and what the task answers.
//!
//! The index belongs to the source task, so the DNS process's admin
//! endpoint sends an [`Inquiry`] through its [`Explainer`]; the task picks
//! it up from its [`Inquiries`] between events and answers with a
//! [`SourceReport`]: what it holds for one service. Sources and the
//! publisher use this module alone; the reading of the answer is
//! [`crate::explain`]'s.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::api::ServiceImportType;
use crate::api::ServiceRef;
use crate::api::locality::Locality;
use crate::index::Index;
use crate::model::{Endpoints, OwnCluster, Port, dashed_address};

/// A question for the source task: what it holds for one service.
#[derive(Debug)]
pub struct Inquiry {
    service: ServiceRef,
    reply: oneshot::Sender<SourceReport>,
}

impl Inquiry {
    /// The service asked about.
    pub fn service(&self) -> &ServiceRef {
        &self.service
    }

    /// Sends the report back. The asker may have given up waiting; then
    /// the report is dropped.
    pub fn answer(self, report: SourceReport) {
        let _ = self.reply.send(report);
    }
}

/// The source task's end of the channel: the inquiries it answers between
/// events, and whether the source is failing, which the source sets from
/// its own state and `/explain` reads.
#[derive(Debug)]
pub struct Inquiries {
    receiver: mpsc::Receiver<Inquiry>,
    failing: Arc<AtomicBool>,
}

impl Inquiries {
    /// The next inquiry; `None` once every [`Explainer`] is gone.
    pub async fn recv(&mut self) -> Option<Inquiry> {
        self.receiver.recv().await
    }

    /// Tells `/explain` whether the source is failing (answers come from
    /// the last good index).
    pub fn set_source_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::Relaxed);
    }
}

/// The admin endpoint's end of the channel to the source task.
#[derive(Debug, Clone)]
pub struct Explainer {
    inquiries: mpsc::Sender<Inquiry>,
    failing: Arc<AtomicBool>,
}

/// A connected pair: the admin endpoint asks through the [`Explainer`], the
/// source task answers what arrives on [`Inquiries`].
pub fn channel() -> (Explainer, Inquiries) {
    let (inquiries, receiver) = mpsc::channel(16);
    let failing = Arc::new(AtomicBool::new(false));
    (
        Explainer {
            inquiries,
            failing: failing.clone(),
        },
        Inquiries { receiver, failing },
    )
}

impl Explainer {
    /// Asks the source what it holds for `service`; `None` when it does not
    /// answer within `wait` (busy with a large relist, or not started yet).
    pub async fn ask(&self, service: ServiceRef, wait: Duration) -> Option<SourceReport> {
        let (reply, answer) = oneshot::channel();
        let inquiry = Inquiry { service, reply };
        tokio::time::timeout(wait, async {
            self.inquiries.send(inquiry).await.ok()?;
            answer.await.ok()
        })
        .await
        .ok()
        .flatten()
    }

    /// Whether the source says it is failing.
    pub fn source_failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }
}

/// What a source holds for one service.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SourceReport {
    /// The indexed ServiceImport, if any.
    pub import: Option<ImportReport>,
    /// Whether the namespace exists locally; `null` when the source does not
    /// track namespaces (a manifest file), so every namespace counts.
    pub namespace_exists: Option<bool>,
    /// The EndpointSlices joined to the service, by cluster and name.
    pub slices: Vec<SliceReport>,
    /// Objects of this service whose latest version was rejected; their
    /// last valid version (if any) is what the index holds.
    pub rejected: Vec<Rejection>,
    /// Why the source is failing, while it is.
    pub source_problem: Option<String>,
    /// This cluster's id, when the source knows it (the ClusterProperty
    /// `cluster.clusterset.k8s.io`).
    pub cluster_id: Option<String>,
    /// Why this cluster's id is unknown, while it is.
    pub cluster_id_unknown: Option<String>,
    /// Whether the serving fallback (`serve_terminating`) is on.
    pub serve_terminating: bool,
}

/// What the index keeps of a ServiceImport.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    /// `ClusterSetIP` or `Headless`.
    #[serde(rename = "type")]
    pub kind: ServiceImportType,
    /// `spec.ips`.
    pub ips: Vec<IpAddr>,
    /// `spec.ports`, as `name/port/PROTOCOL` (`port/PROTOCOL` when unnamed).
    pub ports: Vec<String>,
    /// `spec.trafficDistribution` as read: `Spread`, `PreferSameZone` or
    /// `PreferSameNode`.
    #[serde(serialize_with = "locality_name")]
    pub locality: Locality,
}

fn locality_name<S: serde::Serializer>(locality: &Locality, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(locality.as_str())
}

/// What the index keeps of an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SliceReport {
    /// Object name.
    pub name: String,
    /// `multicluster.kubernetes.io/source-cluster`.
    pub cluster: String,
    /// Its ready endpoints (`conditions.ready` true or unset).
    pub ready: Vec<EndpointReport>,
    /// How many of its endpoints are not ready (in no answer unless the
    /// serving fallback takes them).
    pub not_ready: u32,
    /// How many of the not-ready ones are terminating but still serving.
    pub serving_count: u32,
    /// Those endpoints, kept with the serving fallback on (else none).
    pub serving: Vec<EndpointReport>,
}

/// One endpoint of a slice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EndpointReport {
    /// The host label of its per-endpoint name: `hostname`, else the first
    /// address dashed.
    pub host: String,
    /// Its addresses.
    pub addresses: Vec<IpAddr>,
}

/// An object whose latest version the source rejected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejection {
    /// `ServiceImport` or `EndpointSlice`.
    pub kind: &'static str,
    /// Object name.
    pub name: String,
    /// Why.
    pub error: String,
}

impl SourceReport {
    /// What `index` holds for `service`.
    pub fn from_index(index: &Index, service: &ServiceRef) -> Self {
        let import = index.import(service).map(|import| ImportReport {
            kind: import.import_type,
            ips: import.ips.clone(),
            ports: import.ports.iter().map(port_text).collect(),
            locality: import.locality,
        });
        let reports = |endpoints: &Endpoints| -> Vec<EndpointReport> {
            endpoints
                .iter()
                .filter_map(|endpoint| {
                    let first = endpoint.first()?;
                    Some(EndpointReport {
                        host: endpoint
                            .hostname()
                            .map_or_else(|| dashed_address(&first), String::from),
                        addresses: endpoint.addresses().collect(),
                    })
                })
                .collect()
        };
        let mut slices: Vec<SliceReport> = index
            .slices_of(service)
            .map(|(key, slice)| SliceReport {
                name: key.name.to_string(),
                cluster: slice.cluster.to_string(),
                not_ready: slice.not_ready,
                ready: reports(&slice.endpoints),
                serving_count: slice.serving_count,
                serving: reports(&slice.serving),
            })
            .collect();
        slices.sort_by(|a, b| (&a.cluster, &a.name).cmp(&(&b.cluster, &b.name)));
        let (cluster_id, cluster_id_unknown) = match index.own_cluster() {
            OwnCluster::Known(id) => (Some(id.clone()), None),
            OwnCluster::Unknown(why) => (None, Some(why.clone())),
        };
        Self {
            import,
            namespace_exists: index.namespace_known(&service.namespace),
            slices,
            rejected: Vec::new(),
            source_problem: None,
            cluster_id,
            cluster_id_unknown,
            serve_terminating: index.settings().serve_terminating,
        }
    }

    /// Ready endpoints as `(cluster, host)`: a dual-stack endpoint is in
    /// two slices but is one name.
    pub(crate) fn ready_hosts(&self) -> BTreeSet<(&str, &str)> {
        self.slices
            .iter()
            .flat_map(|s| {
                s.ready
                    .iter()
                    .map(move |e| (s.cluster.as_str(), e.host.as_str()))
            })
            .collect()
    }

    /// Serving endpoints kept (the fallback is on), as `(cluster, host)`.
    pub(crate) fn serving_hosts(&self) -> BTreeSet<(&str, &str)> {
        self.slices
            .iter()
            .flat_map(|s| {
                s.serving
                    .iter()
                    .map(move |e| (s.cluster.as_str(), e.host.as_str()))
            })
            .collect()
    }

    pub(crate) fn not_ready(&self) -> u32 {
        self.slices.iter().map(|s| s.not_ready).sum()
    }

    /// Not-ready endpoints that are terminating but serving, kept or not.
    pub(crate) fn serving_count(&self) -> u32 {
        self.slices.iter().map(|s| s.serving_count).sum()
    }
}

fn port_text(port: &Port) -> String {
    let protocol = &port.protocol.srv_label()[1..];
    match &port.name {
        Some(name) => format!("{name}/{}/{}", port.port, protocol.to_ascii_uppercase()),
        None => format!("{}/{}", port.port, protocol.to_ascii_uppercase()),
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use hickory_proto::rr::Name;

    use super::*;

    #[test]
    fn a_report_groups_what_the_index_holds_for_one_service() {
        use crate::index::{Index, SliceKey};
        use crate::model::{Endpoint, ImportedService, SliceEndpoints};
        use crate::zone::ZoneSettings;

        let mut index = Index::new(ZoneSettings::new(
            Name::from_str("clusterset.local.").unwrap(),
        ));
        let db = ServiceRef::new("shop", "db");
        index.apply_import(ImportedService {
            service: db.clone(),
            import_type: ServiceImportType::Headless,
            ips: vec![],
            ports: vec![Port::from_api(Some("pg"), None, 5432).unwrap()],
            locality: Default::default(),
        });
        let slice = |cluster: &str, ip: &str, not_ready| SliceEndpoints {
            service: db.clone(),
            cluster: cluster.into(),
            ports: std::sync::Arc::from([]),
            endpoints: vec![Endpoint {
                hostname: None,
                addresses: vec![ip.parse().unwrap()],
            }]
            .into(),
            not_ready,
            serving: Default::default(),
            serving_count: 0,
        };
        let key = |name: &str| SliceKey {
            namespace: "shop".into(),
            name: name.into(),
        };
        index.apply_slice(key("west-1"), slice("west", "10.2.0.1", 0));
        index.apply_slice(key("east-1"), slice("east", "fd00::1", 2));
        let report = SourceReport::from_index(&index, &db);
        let import = report.import.as_ref().unwrap();
        assert_eq!(import.kind, ServiceImportType::Headless);
        assert_eq!(import.ports, ["pg/5432/TCP"]);
        let slices: Vec<(&str, &str, u32)> = report
            .slices
            .iter()
            .map(|s| (s.name.as_str(), s.ready[0].host.as_str(), s.not_ready))
            .collect();
        assert_eq!(
            slices,
            [("east-1", "fd00--1", 2), ("west-1", "10-2-0-1", 0)]
        );
        assert_eq!(report.not_ready(), 2);
        assert_eq!(report.namespace_exists, None);
        let missing = SourceReport::from_index(&index, &ServiceRef::new("shop", "web"));
        assert_eq!(missing.import, None);
        assert!(missing.slices.is_empty());
        // What the index knows of this cluster comes with every report.
        assert_eq!(missing.cluster_id, None);
        assert!(
            missing
                .cluster_id_unknown
                .as_deref()
                .is_some_and(|why| why.contains("has not been read yet")),
            "{missing:?}"
        );
        assert!(!missing.serve_terminating);
        index.set_own_cluster(OwnCluster::Known("east".into()));
        let known = SourceReport::from_index(&index, &db);
        assert_eq!(known.cluster_id.as_deref(), Some("east"));
        assert_eq!(known.cluster_id_unknown, None);
    }

    #[test]
    fn ports_read_as_name_number_protocol() {
        let named = Port::from_api(Some("http"), Some("TCP"), 80).unwrap();
        let unnamed = Port::from_api(None, Some("UDP"), 53).unwrap();
        assert_eq!(port_text(&named), "http/80/TCP");
        assert_eq!(port_text(&unnamed), "53/UDP");
    }
}
