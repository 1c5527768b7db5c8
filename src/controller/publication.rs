//! What this cluster publishes for its peers, and how a peer's publication
//! is read back (docs/controller.md, "What a peer can read").
//!
//! An exporting cluster's controller keeps, in its own namespace, one
//! [`PublishedService`] per valid export (the Service fields the merge
//! reads) and one published EndpointSlice per Kubernetes slice of that
//! Service (addresses, conditions, hostnames and zones; no node names, no
//! hints, no target references). Once its first round of writes is done it
//! writes the marker ConfigMap [`MARKER`], which tells a reader that the
//! publication is complete. A peer's reader token then needs a Role over
//! that one namespace, ServiceExports and two ClusterProperties: no other
//! Service or EndpointSlice of the cluster is readable.
//!
//! A reader turns what it reads back into the shapes the legacy read
//! delivered (a Service in its own namespace, a mirrored slice labelled by
//! its source cluster), so the merge and the checks of untrusted input
//! ([`super::reconcile`]) have one path whatever a peer's release. A
//! publication that names no valid service is refused ([`reason`]).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{
    ClientIPConfig, Service, ServicePort, ServiceSpec, SessionAffinityConfig,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::Event;

use super::naming::{
    ANNOTATION_SOURCE_SLICE, LABEL_APP_MANAGED_BY, MANAGED_BY, mirrored_slice_name,
};
use crate::api::ServiceRef;
use crate::api::limits::is_dns1123_label;
use crate::api::stripped::cross_cluster;
use crate::api::well_known::{LABEL_MANAGED_BY, LABEL_SERVICE_NAME, LABEL_SOURCE_CLUSTER};
use crate::api::{
    PublishedExport, PublishedPort, PublishedService, PublishedServiceSpec, ServiceExport,
    ServiceExportSpec,
};

/// `endpointslice.kubernetes.io/managed-by` of a published slice: not
/// [`MANAGED_BY`], so that neither this cluster's own MCS slice watch nor a
/// previous release's peers (which select [`MANAGED_BY`]) take it for an
/// imported or mirrored slice.
pub const PUBLISHED_BY: &str = "publisher.clusterset-dns.io";
/// Label of a published slice: the exported Service's namespace (its name
/// is in [`LABEL_SERVICE_NAME`]).
pub const LABEL_SERVICE_NAMESPACE: &str = "clusterset-dns.io/service-namespace";
/// The marker ConfigMap: present once the publication is complete.
pub const MARKER: &str = crate::peering::PUBLICATION_MARKER;
/// The marker's key holding the publication's format.
pub const MARKER_FORMAT_KEY: &str = "format";
/// The format this release publishes and reads.
pub const FORMAT: &str = "1";

/// How a peer's exports are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// From its publication in its controller's namespace (the peer runs
    /// this release or a later one, and its reader role grants the marker).
    Published,
    /// Its Services and mirrored slices in every namespace, as a previous
    /// release publishes them (the peer's reader role must grant that).
    Legacy,
}

/// What a marker's `data` says, as a form: [`Form::Published`] when it is
/// this release's format.
pub fn form_of_marker(data: Option<&BTreeMap<String, String>>) -> Form {
    match data.and_then(|data| data.get(MARKER_FORMAT_KEY)) {
        Some(format) if format == FORMAT => Form::Published,
        _ => Form::Legacy,
    }
}

/// The marker ConfigMap this cluster applies in `namespace` (its
/// controller's) once its publication is complete: what a peer reads back
/// with [`form_of_marker`] as [`Form::Published`]. `cluster-id` is for a
/// person listing the namespace.
pub(super) fn marker(namespace: &str, cluster_id: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": MARKER,
            "namespace": namespace,
            "labels": {LABEL_APP_MANAGED_BY: MANAGED_BY},
        },
        "data": {
            MARKER_FORMAT_KEY: FORMAT,
            "cluster-id": cluster_id,
        },
    })
}

/// The name of `service`'s PublishedService: `<namespace>.<name>`.
pub fn published_name(service: &ServiceRef) -> String {
    format!("{}.{}", service.namespace, service.name)
}

/// The service a PublishedService's name names, when both parts are DNS
/// labels.
pub fn service_of_name(name: &str) -> Option<ServiceRef> {
    let (namespace, service) = name.split_once('.')?;
    (is_dns1123_label(namespace) && is_dns1123_label(service))
        .then(|| ServiceRef::new(namespace, service))
}

/// The PublishedService of the exported Service `service` of cluster
/// `local_id` (its spec as the merge reads it, and what the merge reads of
/// its `export`), in `namespace`. Labelled with its source cluster, so a
/// hub's admission policy can hold it to its member's id.
pub fn published_service(
    namespace: &str,
    service: &ServiceRef,
    local_id: &str,
    export: &ServiceExport,
    spec: &ServiceSpec,
) -> PublishedService {
    let mut object = PublishedService::new(
        &published_name(service),
        PublishedServiceSpec {
            namespace: service.namespace.to_string(),
            name: service.name.to_string(),
            type_: spec.type_.clone(),
            headless: spec.cluster_ip.as_deref() == Some("None"),
            ports: spec
                .ports
                .iter()
                .flatten()
                .map(|port| PublishedPort {
                    name: port.name.clone().filter(|name| !name.is_empty()),
                    protocol: port.protocol.clone(),
                    app_protocol: port.app_protocol.clone(),
                    port: port.port,
                })
                .collect(),
            session_affinity: spec.session_affinity.clone(),
            session_affinity_timeout_seconds: spec
                .session_affinity_config
                .as_ref()
                .and_then(|config| config.client_ip.as_ref())
                .and_then(|client_ip| client_ip.timeout_seconds),
            internal_traffic_policy: spec.internal_traffic_policy.clone(),
            traffic_distribution: spec.traffic_distribution.clone(),
            ip_families: spec.ip_families.clone().unwrap_or_default(),
            export: Some(PublishedExport {
                created: export.metadata.creation_timestamp.clone(),
                exported_labels: export.spec.exported_labels.clone(),
                exported_annotations: export.spec.exported_annotations.clone(),
            }),
        },
    );
    object.metadata.namespace = Some(namespace.to_owned());
    object.metadata.labels = Some(BTreeMap::from([
        (LABEL_APP_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
        (LABEL_SOURCE_CLUSTER.to_owned(), local_id.to_owned()),
    ]));
    object
}

/// The published copy, in `namespace`, of the Kubernetes slice `source` of
/// the exported Service `service` in cluster `local_id`; `None` for a slice
/// of another address type than IPv4 or IPv6. Named as its mirror is, so a
/// peer's copy has the same name whichever of the two it read.
pub fn published_slice(
    namespace: &str,
    service: &ServiceRef,
    local_id: &str,
    source: &EndpointSlice,
) -> Option<EndpointSlice> {
    if source.address_type != "IPv4" && source.address_type != "IPv6" {
        return None;
    }
    let source_name = source.metadata.name.as_deref()?;
    let mut ports = source.ports.clone().unwrap_or_default();
    ports.sort_by(|a, b| a.name.cmp(&b.name).then(a.port.cmp(&b.port)));
    Some(EndpointSlice {
        metadata: ObjectMeta {
            name: Some(mirrored_slice_name(
                &service.namespace,
                &service.name,
                local_id,
                source_name,
            )),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([
                (LABEL_SERVICE_NAME.to_owned(), service.name.to_string()),
                (
                    LABEL_SERVICE_NAMESPACE.to_owned(),
                    service.namespace.to_string(),
                ),
                (LABEL_SOURCE_CLUSTER.to_owned(), local_id.to_owned()),
                (LABEL_MANAGED_BY.to_owned(), PUBLISHED_BY.to_owned()),
            ])),
            annotations: Some(BTreeMap::from([(
                ANNOTATION_SOURCE_SLICE.to_owned(),
                format!("{}/{source_name}", service.namespace),
            )])),
            ..ObjectMeta::default()
        },
        address_type: source.address_type.clone(),
        endpoints: source.endpoints.iter().map(cross_cluster).collect(),
        ports: Some(ports),
    })
}

/// The service a published slice belongs to, from its labels.
pub fn service_of_slice(slice: &EndpointSlice) -> Option<ServiceRef> {
    let labels = slice.metadata.labels.as_ref()?;
    let namespace = labels.get(LABEL_SERVICE_NAMESPACE)?;
    let name = labels.get(LABEL_SERVICE_NAME)?;
    (is_dns1123_label(namespace) && is_dns1123_label(name))
        .then(|| ServiceRef::new(namespace, name))
}

/// Why a peer's publication is refused (the `reason` of
/// `peer_objects_rejected_total`).
pub mod reason {
    /// A PublishedService whose name is not `<namespace>.<name>` of DNS
    /// labels, or whose spec names another service than its name.
    pub const INVALID_PUBLISHED_NAME: &str = "InvalidPublishedName";
    /// A published slice without valid service labels.
    pub const INVALID_PUBLISHED_SLICE: &str = "InvalidPublishedSlice";
    /// An object in a hub member's namespace whose source-cluster label
    /// names another cluster than that member.
    pub const FOREIGN_SOURCE_CLUSTER: &str = "ForeignSourceCluster";
    /// A hub member without a readable record on the hub (its endpoint
    /// ranges, written by `hub join`): none of its endpoints is taken.
    pub const NO_MEMBER_RECORD: &str = "NoMemberRecord";
}

/// A peer's PublishedService as the Service the merge reads: in the
/// service's own namespace, with the published fields and nothing else.
pub fn service_view(published: &PublishedService) -> Result<Service, &'static str> {
    let name = published.metadata.name.as_deref().unwrap_or_default();
    let service = service_of_name(name).ok_or(reason::INVALID_PUBLISHED_NAME)?;
    let spec = &published.spec;
    if *service.namespace != *spec.namespace || *service.name != *spec.name {
        return Err(reason::INVALID_PUBLISHED_NAME);
    }
    Ok(Service {
        metadata: ObjectMeta {
            namespace: Some(spec.namespace.clone()),
            name: Some(spec.name.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: spec.type_.clone(),
            cluster_ip: spec.headless.then(|| "None".to_owned()),
            ports: Some(
                spec.ports
                    .iter()
                    .map(|port| ServicePort {
                        name: port.name.clone(),
                        protocol: port.protocol.clone(),
                        app_protocol: port.app_protocol.clone(),
                        port: port.port,
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            session_affinity: spec.session_affinity.clone(),
            session_affinity_config: spec.session_affinity_timeout_seconds.map(|timeout| {
                SessionAffinityConfig {
                    client_ip: Some(ClientIPConfig {
                        timeout_seconds: Some(timeout),
                    }),
                }
            }),
            internal_traffic_policy: spec.internal_traffic_policy.clone(),
            traffic_distribution: spec.traffic_distribution.clone(),
            ip_families: (!spec.ip_families.is_empty()).then(|| spec.ip_families.clone()),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// A member's PublishedService as the ServiceExport it stands for, for a
/// reader that reads publications only (a hub's members): in the
/// service's namespace, with the export's creation time, exported labels
/// and annotations as published (checked by the merge as any peer's). A
/// previous release's publication carries no export: it reads as the
/// newest possible export, which displaces no real oldest one.
pub fn export_view(published: &PublishedService) -> Result<ServiceExport, &'static str> {
    let name = published.metadata.name.as_deref().unwrap_or_default();
    let service = service_of_name(name).ok_or(reason::INVALID_PUBLISHED_NAME)?;
    let spec = &published.spec;
    if *service.namespace != *spec.namespace || *service.name != *spec.name {
        return Err(reason::INVALID_PUBLISHED_NAME);
    }
    let export = spec.export.clone().unwrap_or_default();
    let mut view = ServiceExport::new(
        &spec.name,
        ServiceExportSpec {
            exported_labels: export.exported_labels,
            exported_annotations: export.exported_annotations,
        },
    );
    view.metadata.namespace = Some(spec.namespace.clone());
    view.metadata.creation_timestamp = export.created;
    Ok(view)
}

/// A peer's published slice as the mirrored slice the legacy read
/// delivered: in the service's namespace, its managed-by label ours when
/// the peer published it. Its source-cluster label is kept as read: the
/// copy checks it against the peer ([`super::reconcile`]).
pub fn slice_view(mut slice: EndpointSlice) -> Result<EndpointSlice, &'static str> {
    let service = service_of_slice(&slice).ok_or(reason::INVALID_PUBLISHED_SLICE)?;
    slice.metadata.namespace = Some(service.namespace.to_string());
    let labels = slice.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.remove(LABEL_SERVICE_NAMESPACE);
    if labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(PUBLISHED_BY) {
        labels.insert(LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned());
    }
    Ok(slice)
}

/// Turns a peer's watch events of a published kind into events of the kind
/// it stands for ([`service_view`], [`slice_view`]), remembering the key
/// (namespace and name) each object was last seen under: an object that
/// turns invalid, or whose labels move it to another service, is deleted
/// under the key it had, so nothing it published before lingers.
pub struct Viewer<P, K> {
    view: fn(P) -> Result<K, &'static str>,
    tombstone: fn(&str, &str) -> K,
    /// By the peer's object name: the key of its last valid view.
    seen: HashMap<String, (String, String)>,
}

/// What one event of a published kind comes to.
#[derive(Debug)]
pub struct Viewed<K> {
    /// The events of the kind it stands for.
    pub events: Vec<Event<K>>,
    /// The reason and what, when the object was refused.
    pub refused: Option<(&'static str, String)>,
}

impl<P: kube::Resource<DynamicType = ()>, K: kube::Resource> Viewer<P, K> {
    /// A viewer with `view`, deleting through `tombstone(namespace, name)`.
    pub fn new(view: fn(P) -> Result<K, &'static str>, tombstone: fn(&str, &str) -> K) -> Self {
        Self {
            view,
            tombstone,
            seen: HashMap::new(),
        }
    }

    /// The events `event` comes to.
    pub fn event(&mut self, event: Event<P>) -> Viewed<K> {
        let mut events = Vec::new();
        let mut refused = None;
        match event {
            Event::Init => {
                // The list replaces the whole kind: what it holds is seen anew.
                self.seen.clear();
                events.push(Event::Init);
            }
            Event::InitDone => events.push(Event::InitDone),
            Event::InitApply(object) => {
                let name = object.meta().name.clone().unwrap_or_default();
                match self.viewed(object, &mut refused) {
                    Some(view) => {
                        self.seen.insert(name, key_of(&view));
                        events.push(Event::InitApply(view));
                    }
                    None => {
                        self.seen.remove(&name);
                    }
                }
            }
            Event::Apply(object) => {
                let name = object.meta().name.clone().unwrap_or_default();
                match self.viewed(object, &mut refused) {
                    Some(view) => {
                        let key = key_of(&view);
                        if let Some(old) = self.seen.insert(name, key.clone())
                            && old != key
                        {
                            events.push(Event::Delete((self.tombstone)(&old.0, &old.1)));
                        }
                        events.push(Event::Apply(view));
                    }
                    None => {
                        if let Some(old) = self.seen.remove(&name) {
                            events.push(Event::Delete((self.tombstone)(&old.0, &old.1)));
                        }
                    }
                }
            }
            Event::Delete(object) => {
                let name = object.meta().name.clone().unwrap_or_default();
                if let Some(old) = self.seen.remove(&name) {
                    events.push(Event::Delete((self.tombstone)(&old.0, &old.1)));
                }
            }
        }
        Viewed { events, refused }
    }

    fn viewed(&self, object: P, refused: &mut Option<(&'static str, String)>) -> Option<K> {
        let what = format!(
            "{} {}",
            P::kind(&()),
            object.meta().name.as_deref().unwrap_or_default()
        );
        match (self.view)(object) {
            Ok(view) => Some(view),
            Err(reason) => {
                *refused = Some((reason, what));
                None
            }
        }
    }
}

fn key_of(object: &impl kube::Resource) -> (String, String) {
    (
        object.meta().namespace.clone().unwrap_or_default(),
        object.meta().name.clone().unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointHints, EndpointPort, ForZone};

    use super::*;

    fn web() -> ServiceRef {
        ServiceRef::new("shop", "web")
    }

    fn spec() -> ServiceSpec {
        ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: Some("10.96.0.10".into()),
            selector: Some(BTreeMap::from([("app".into(), "web".into())])),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                protocol: Some("TCP".into()),
                port: 80,
                ..ServicePort::default()
            }]),
            session_affinity: Some("ClientIP".into()),
            session_affinity_config: Some(SessionAffinityConfig {
                client_ip: Some(ClientIPConfig {
                    timeout_seconds: Some(600),
                }),
            }),
            internal_traffic_policy: Some("Local".into()),
            traffic_distribution: Some("PreferClose".into()),
            ip_families: Some(vec!["IPv4".into()]),
            ..ServiceSpec::default()
        }
    }

    /// The export of [`web`], created at a fixed instant, with one
    /// exported label and annotation.
    fn export() -> ServiceExport {
        let mut export = ServiceExport::new(
            "web",
            ServiceExportSpec {
                exported_labels: BTreeMap::from([("tier".into(), "front".into())]),
                exported_annotations: BTreeMap::from([("owner".into(), "shop".into())]),
            },
        );
        export.metadata.namespace = Some("shop".into());
        export.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-12-01T10:00:00Z".parse().unwrap(),
            ));
        export
    }

    #[test]
    fn a_published_service_carries_its_export_and_reads_back_as_it() {
        let published = published_service("clusterset-dns", &web(), "east", &export(), &spec());
        assert_eq!(
            published.metadata.labels.as_ref().unwrap()[LABEL_SOURCE_CLUSTER],
            "east"
        );
        let view = export_view(&published).unwrap();
        let sent = export();
        assert_eq!(view.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(view.metadata.name.as_deref(), Some("web"));
        assert_eq!(
            view.metadata.creation_timestamp,
            sent.metadata.creation_timestamp
        );
        assert_eq!(view.spec, sent.spec);
        // A previous release's publication carries no export: it reads as
        // an export of no known age, which wins no conflict.
        let mut old = published.clone();
        old.spec.export = None;
        let view = export_view(&old).unwrap();
        assert_eq!(view.metadata.creation_timestamp, None);
        assert!(view.spec.exported_labels.is_empty());
        // Named after another service than it publishes: refused.
        let mut renamed = published;
        renamed.metadata.name = Some("shop.api".into());
        assert_eq!(
            export_view(&renamed).unwrap_err(),
            reason::INVALID_PUBLISHED_NAME
        );
    }

    #[test]
    fn a_published_service_reads_back_as_the_fields_the_merge_reads() {
        let published = published_service("clusterset-dns", &web(), "east", &export(), &spec());
        assert_eq!(published.metadata.name.as_deref(), Some("shop.web"));
        assert_eq!(
            published.metadata.namespace.as_deref(),
            Some("clusterset-dns")
        );
        let view = service_view(&published).unwrap();
        assert_eq!(view.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(view.metadata.name.as_deref(), Some("web"));
        let read = view.spec.unwrap();
        let sent = spec();
        assert_eq!(read.type_, sent.type_);
        assert_eq!(read.session_affinity_config, sent.session_affinity_config);
        assert_eq!(read.internal_traffic_policy, sent.internal_traffic_policy);
        assert_eq!(read.traffic_distribution, sent.traffic_distribution);
        assert_eq!(read.ip_families, sent.ip_families);
        assert_eq!(read.ports, sent.ports);
        // What only this cluster needs is not published.
        assert_eq!(read.cluster_ip, None);
        assert_eq!(read.selector, None);
        let headless = ServiceSpec {
            cluster_ip: Some("None".into()),
            ..spec()
        };
        let view = service_view(&published_service(
            "ns",
            &web(),
            "east",
            &export(),
            &headless,
        ))
        .unwrap();
        assert_eq!(view.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    }

    #[test]
    fn a_publication_naming_no_valid_service_is_refused() {
        let mut published = published_service("clusterset-dns", &web(), "east", &export(), &spec());
        for name in ["shopweb", "shop.", ".web", "Shop.web", "a.b.c", "shop.web-"] {
            published.metadata.name = Some(name.into());
            assert_eq!(
                service_view(&published).unwrap_err(),
                reason::INVALID_PUBLISHED_NAME,
                "{name}"
            );
        }
        // The name and the spec must agree: a peer cannot publish one
        // service's fields under another's name.
        published.metadata.name = Some("shop.api".into());
        assert_eq!(
            service_view(&published).unwrap_err(),
            reason::INVALID_PUBLISHED_NAME
        );
    }

    fn kubernetes_slice() -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some("web-abcde".into()),
                namespace: Some("shop".into()),
                ..ObjectMeta::default()
            },
            address_type: "IPv4".into(),
            endpoints: vec![Endpoint {
                addresses: vec!["10.1.0.5".into()],
                node_name: Some("node-1".into()),
                zone: Some("z1".into()),
                hints: Some(EndpointHints {
                    for_zones: Some(vec![ForZone { name: "z1".into() }]),
                    ..EndpointHints::default()
                }),
                ..Endpoint::default()
            }],
            ports: Some(vec![
                EndpointPort {
                    name: Some("metrics".into()),
                    port: Some(9090),
                    ..EndpointPort::default()
                },
                EndpointPort {
                    name: Some("http".into()),
                    port: Some(8080),
                    ..EndpointPort::default()
                },
            ]),
        }
    }

    #[test]
    fn a_published_slice_reads_back_as_the_mirror_a_previous_release_wrote() {
        let published =
            published_slice("clusterset-dns", &web(), "east", &kubernetes_slice()).unwrap();
        assert_eq!(
            published.metadata.namespace.as_deref(),
            Some("clusterset-dns")
        );
        assert_eq!(
            published.metadata.name,
            Some(mirrored_slice_name("shop", "web", "east", "web-abcde"))
        );
        let endpoint = &published.endpoints[0];
        assert_eq!(endpoint.node_name, None);
        assert_eq!(endpoint.hints, None);
        assert_eq!(endpoint.zone.as_deref(), Some("z1"));
        let labels = published.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_MANAGED_BY], PUBLISHED_BY);
        assert_eq!(service_of_slice(&published), Some(web()));

        let view = slice_view(published).unwrap();
        assert_eq!(view.metadata.namespace.as_deref(), Some("shop"));
        let labels = view.metadata.labels.unwrap();
        assert_eq!(labels[LABEL_MANAGED_BY], MANAGED_BY);
        assert_eq!(labels[LABEL_SOURCE_CLUSTER], "east");
        assert_eq!(labels[LABEL_SERVICE_NAME], "web");
        assert!(!labels.contains_key(LABEL_SERVICE_NAMESPACE));
    }

    #[test]
    fn a_published_slice_without_valid_service_labels_is_refused() {
        let mut published =
            published_slice("clusterset-dns", &web(), "east", &kubernetes_slice()).unwrap();
        let labels = published.metadata.labels.as_mut().unwrap();
        labels.insert(LABEL_SERVICE_NAMESPACE.into(), "../kube-system".into());
        assert_eq!(
            slice_view(published.clone()).unwrap_err(),
            reason::INVALID_PUBLISHED_SLICE
        );
        published
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .remove(LABEL_SERVICE_NAMESPACE);
        assert_eq!(
            slice_view(published).unwrap_err(),
            reason::INVALID_PUBLISHED_SLICE
        );
        let mut fqdn = kubernetes_slice();
        fqdn.address_type = "FQDN".into();
        assert_eq!(published_slice("ns", &web(), "east", &fqdn), None);
    }

    #[test]
    fn a_slice_another_controller_published_keeps_its_foreign_managed_by() {
        let mut published =
            published_slice("clusterset-dns", &web(), "east", &kubernetes_slice()).unwrap();
        published
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(LABEL_MANAGED_BY.into(), "someone-else".into());
        let view = slice_view(published).unwrap();
        assert_eq!(
            view.metadata.labels.unwrap()[LABEL_MANAGED_BY],
            "someone-else"
        );
    }

    fn tombstone(namespace: &str, name: &str) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            ..EndpointSlice::default()
        }
    }

    fn keys(events: &[Event<EndpointSlice>]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                Event::Apply(s) => format!("apply {:?}", key_of(s)),
                Event::InitApply(s) => format!("list {:?}", key_of(s)),
                Event::Delete(s) => format!("delete {:?}", key_of(s)),
                Event::Init => "init".into(),
                Event::InitDone => "done".into(),
            })
            .collect()
    }

    #[test]
    fn a_published_slice_turned_invalid_or_moved_is_deleted_under_its_old_key() {
        let mut viewer = Viewer::new(slice_view, tombstone);
        let published =
            published_slice("clusterset-dns", &web(), "east", &kubernetes_slice()).unwrap();
        let name = published.metadata.name.clone().unwrap();
        let viewed = viewer.event(Event::Apply(published.clone()));
        assert_eq!(
            keys(&viewed.events),
            [format!("apply (\"shop\", {name:?})")]
        );
        // Its labels now name another namespace: gone from the first.
        let mut moved = published.clone();
        moved
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(LABEL_SERVICE_NAMESPACE.into(), "shop-2".into());
        let viewed = viewer.event(Event::Apply(moved));
        assert_eq!(
            keys(&viewed.events),
            [
                format!("delete (\"shop\", {name:?})"),
                format!("apply (\"shop-2\", {name:?})")
            ]
        );
        // Then no valid namespace at all: deleted, and refused.
        let mut broken = published.clone();
        broken
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(LABEL_SERVICE_NAMESPACE.into(), "-".into());
        let viewed = viewer.event(Event::Apply(broken.clone()));
        assert_eq!(
            keys(&viewed.events),
            [format!("delete (\"shop-2\", {name:?})")]
        );
        assert_eq!(viewed.refused.unwrap().0, reason::INVALID_PUBLISHED_SLICE);
        // Its deletion, and any other event of it, come to nothing more.
        assert!(
            viewer
                .event(Event::Delete(broken.clone()))
                .events
                .is_empty()
        );
        assert!(viewer.event(Event::Apply(broken)).events.is_empty());
        // A relist forgets what was seen; its objects are seen anew.
        let viewed = viewer.event(Event::Init);
        assert_eq!(keys(&viewed.events), ["init"]);
        let viewed = viewer.event(Event::InitApply(published.clone()));
        assert_eq!(keys(&viewed.events), [format!("list (\"shop\", {name:?})")]);
        let viewed = viewer.event(Event::Delete(published));
        assert_eq!(
            keys(&viewed.events),
            [format!("delete (\"shop\", {name:?})")]
        );
    }

    #[test]
    fn only_this_formats_marker_selects_the_publication() {
        let data = BTreeMap::from([(MARKER_FORMAT_KEY.to_owned(), FORMAT.to_owned())]);
        assert_eq!(form_of_marker(Some(&data)), Form::Published);
        let later = BTreeMap::from([(MARKER_FORMAT_KEY.to_owned(), "2".to_owned())]);
        assert_eq!(form_of_marker(Some(&later)), Form::Legacy);
        assert_eq!(form_of_marker(None), Form::Legacy);
    }

    #[test]
    fn the_marker_written_is_read_back_as_this_releases_publication() {
        let written: k8s_openapi::api::core::v1::ConfigMap =
            serde_json::from_value(marker("clusterset-dns", "a")).unwrap();
        // Where a peer's reader looks for it.
        assert_eq!(written.metadata.name.as_deref(), Some(MARKER));
        assert_eq!(
            written.metadata.namespace.as_deref(),
            Some("clusterset-dns")
        );
        assert_eq!(form_of_marker(written.data.as_ref()), Form::Published);
        let data = written.data.unwrap_or_default();
        assert_eq!(data.get("cluster-id").map(String::as_str), Some("a"));
        let labels = written.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.get(LABEL_APP_MANAGED_BY).map(String::as_str),
            Some(MANAGED_BY)
        );
    }
}
