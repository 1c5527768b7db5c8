use serde_json::json;

use super::ingest::{IMPORT_KIND, SLICE_KIND};
use super::*;
use crate::api::well_known::{LABEL_SERVICE_NAME, LABEL_SOURCE_CLUSTER};
use crate::watch::testing::{forbidden, gone, unreachable};

fn import(name: &str, ip: &str) -> WatchedImport {
    serde_json::from_value(json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1",
            "kind": "ServiceImport",
            "metadata": { "name": name, "namespace": "shop" },
            "spec": { "type": "ClusterSetIP", "ips": [ip], "ports": [{ "port": 80, "protocol": "TCP" }] },
        }))
        .unwrap()
}

/// A slice of service `web`; without a cluster it is invalid.
fn slice(name: &str, cluster: Option<&str>, address: &str) -> EndpointSlice {
    let mut labels = json!({ LABEL_SERVICE_NAME: "web" });
    if let Some(cluster) = cluster {
        labels[LABEL_SOURCE_CLUSTER] = json!(cluster);
    }
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": { "name": name, "namespace": "shop", "labels": labels },
        "addressType": "IPv4",
        "endpoints": [{ "addresses": [address], "conditions": { "ready": true } }],
        "ports": [{ "port": 8080, "protocol": "TCP" }],
    }))
    .unwrap()
}

fn cluster_property(id: &str) -> ClusterProperty {
    serde_json::from_value(json!({
        "apiVersion": "about.k8s.io/v1beta1",
        "kind": "ClusterProperty",
        "metadata": { "name": CLUSTER_ID_PROPERTY },
        "spec": { "value": id },
    }))
    .unwrap()
}

fn namespace(name: &str) -> PartialObjectMeta<Namespace> {
    serde_json::from_value(json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": { "name": name },
    }))
    .unwrap()
}

/// Short names of effects, to compare sequences.
fn names(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .map(|effect| match effect {
            Effect::InvalidObject(kind) => format!("invalid {kind}"),
            Effect::WatchError(resource) => format!("error {resource}"),
            Effect::WatchExpired(resource) => format!("expired {resource}"),
            Effect::Unanswered => "unanswered".to_owned(),
            Effect::Restarted => "restarted".to_owned(),
            Effect::Stale(stale) => format!("stale {stale}"),
            Effect::Publish(p) if p.first => "publish first".to_owned(),
            Effect::Publish(p) if p.after_list => "publish after list".to_owned(),
            Effect::Publish(_) => "publish".to_owned(),
            Effect::Fatal(error) => format!("fatal {error}"),
        })
        .collect()
}

struct Driver {
    state: State,
}

impl Driver {
    fn new() -> Self {
        Self {
            state: State::new(ZoneSettings::new(
                hickory_proto::rr::Name::from_ascii("clusterset.local.").unwrap(),
            )),
        }
    }

    fn handle(&mut self, input: Input) -> Vec<String> {
        names(&self.state.handle(input, Instant::now()))
    }

    fn flush(&mut self) -> Vec<String> {
        self.handle(Input::Flush)
    }

    /// A whole list of one kind; the effects of all its events.
    fn list(&mut self, kind: Kind) -> Vec<String> {
        match kind {
            Kind::Imports => self.list_imports(vec![import("web", "10.0.0.1")]),
            Kind::Slices => self.list_slices(vec![slice("web-a", Some("east"), "10.1.0.1")]),
            Kind::Namespaces => self.list_namespaces(vec![namespace("shop")]),
        }
    }

    fn list_imports(&mut self, objects: Vec<WatchedImport>) -> Vec<String> {
        let mut events = vec![Event::Init];
        events.extend(objects.into_iter().map(Event::InitApply));
        events.push(Event::InitDone);
        events
            .into_iter()
            .flat_map(|e| self.handle(Input::Import(Ok(e))))
            .collect()
    }

    fn list_slices(&mut self, objects: Vec<EndpointSlice>) -> Vec<String> {
        let mut events = vec![Event::Init];
        events.extend(objects.into_iter().map(Event::InitApply));
        events.push(Event::InitDone);
        events
            .into_iter()
            .flat_map(|e| self.handle(Input::Slice(Ok(e))))
            .collect()
    }

    fn list_namespaces(&mut self, objects: Vec<PartialObjectMeta<Namespace>>) -> Vec<String> {
        let mut events = vec![Event::Init];
        events.extend(objects.into_iter().map(Event::InitApply));
        events.push(Event::InitDone);
        events
            .into_iter()
            .flat_map(|e| self.handle(Input::Namespace(Ok(e))))
            .collect()
    }

    /// A list of the ClusterProperty watch: this cluster's id, or none.
    fn list_cluster_id(&mut self, id: Option<&str>) -> Vec<String> {
        let mut events = vec![Event::Init];
        events.extend(id.map(|id| Event::InitApply(cluster_property(id))));
        events.push(Event::InitDone);
        events
            .into_iter()
            .flat_map(|e| self.handle(Input::ClusterProperty(Ok(e))))
            .collect()
    }

    /// Every kind listed and the first zone published.
    fn synced() -> Self {
        let mut driver = Self::new();
        driver.list_cluster_id(None);
        for kind in Kind::ALL {
            driver.list(kind);
        }
        assert_eq!(driver.flush(), ["publish first"]);
        driver
    }

    fn ip_of(&self, name: &str) -> Option<String> {
        let import = self.state.index().import(&ServiceRef::new("shop", name))?;
        import.ips.first().map(ToString::to_string)
    }

    fn report(&self) -> SourceReport {
        self.state.report(&ServiceRef::new("shop", "web"))
    }
}

#[test]
fn nothing_is_published_until_every_kind_is_listed_in_any_order() {
    use Kind::{Imports, Namespaces, Slices};
    let orders = [
        [Imports, Slices, Namespaces],
        [Imports, Namespaces, Slices],
        [Slices, Imports, Namespaces],
        [Slices, Namespaces, Imports],
        [Namespaces, Imports, Slices],
        [Namespaces, Slices, Imports],
    ];
    for order in orders {
        let mut driver = Driver::new();
        assert!(driver.list_cluster_id(None).is_empty());
        for (i, kind) in order.into_iter().enumerate() {
            assert!(driver.list(kind).is_empty(), "{order:?}");
            let effects = driver.state.handle(Input::Flush, Instant::now());
            if i < 2 {
                assert!(effects.is_empty(), "{order:?} published early");
                continue;
            }
            let [Effect::Publish(publication)] = &effects[..] else {
                panic!("{order:?}: {:?}", names(&effects));
            };
            assert!(publication.first && publication.after_list);
            assert_eq!(publication.zone.service_count(), 1);
        }
        // Nothing changed since: nothing to publish.
        assert!(driver.flush().is_empty());
    }
}

#[test]
fn a_relist_replaces_the_kind_in_one_step_and_drops_what_it_lacks() {
    let mut driver = Driver::synced();
    driver.handle(Input::Import(Ok(Event::Apply(import("db", "10.0.0.2")))));
    assert_eq!(driver.flush(), ["publish"]);
    // The relist no longer holds db and changes web; until it is
    // complete, both stay as they were.
    assert_eq!(driver.ip_of("web").as_deref(), Some("10.0.0.1"));
    driver.handle(Input::Import(Ok(Event::Init)));
    driver.handle(Input::Import(Ok(Event::InitApply(import(
        "web", "10.0.0.5",
    )))));
    assert_eq!(driver.ip_of("db").as_deref(), Some("10.0.0.2"));
    assert_eq!(driver.ip_of("web").as_deref(), Some("10.0.0.1"));
    driver.handle(Input::Import(Ok(Event::InitDone)));
    assert_eq!(driver.ip_of("db"), None);
    assert_eq!(driver.ip_of("web").as_deref(), Some("10.0.0.5"));
    assert_eq!(driver.flush(), ["publish after list"]);
    // Slices too: a relist without web-a leaves web without endpoints.
    assert_eq!(driver.report().slices.len(), 1);
    driver.list_slices(vec![]);
    assert!(driver.report().slices.is_empty());
}

#[test]
fn gone_is_counted_as_expired_and_relists_without_an_outage() {
    let mut driver = Driver::synced();
    assert_eq!(
        driver.handle(Input::Slice(Err(gone()))),
        ["expired endpointslices"]
    );
    assert!(!driver.state.wants_restart());
    assert!(driver.state.failing().is_empty());
    assert_eq!(driver.report().source_problem, None);
    // The watcher relists; that relist is not a recovery either.
    let relist = driver.list_slices(vec![slice("web-b", Some("east"), "10.1.0.2")]);
    assert!(relist.is_empty(), "{relist:?}");
    assert_eq!(driver.flush(), ["publish after list"]);
    assert_eq!(driver.report().slices[0].name, "web-b");
}

#[test]
fn an_outage_is_stale_until_the_relist_after_the_restart_is_indexed() {
    let mut driver = Driver::synced();
    assert_eq!(
        driver.handle(Input::Slice(Err(unreachable()))),
        ["error endpointslices", "stale true"]
    );
    assert_eq!(
        driver.handle(Input::Import(Err(unreachable()))),
        ["error serviceimports"]
    );
    assert_eq!(
        driver.handle(Input::Slice(Err(unreachable()))),
        ["error endpointslices"]
    );
    let problem = driver.report().source_problem.expect("a problem");
    assert!(
        problem.starts_with("watch of serviceimports: ")
            && problem.contains("; watch of endpointslices: "),
        "{problem}"
    );
    assert_eq!(driver.state.failing(), [Kind::Imports, Kind::Slices]);
    // The apiserver answers again: the shell restarts the watches once.
    assert!(driver.state.wants_restart());
    assert_eq!(driver.handle(Input::Restarted), ["restarted"]);
    assert!(!driver.state.wants_restart());
    // The restarted watches fail again: another restart is wanted.
    driver.handle(Input::Slice(Err(unreachable())));
    assert!(driver.state.wants_restart());
    assert_eq!(driver.handle(Input::Restarted), ["restarted"]);
    // Lists in progress are not current yet.
    driver.handle(Input::Slice(Ok(Event::Init)));
    driver.handle(Input::Import(Ok(Event::Init)));
    assert!(driver.report().source_problem.is_some());
    // One kind current again: still stale while the other is not.
    assert!(driver.handle(Input::Slice(Ok(Event::InitDone))).is_empty());
    assert_eq!(driver.state.failing(), [Kind::Imports]);
    assert_eq!(
        driver.handle(Input::Import(Ok(Event::InitDone))),
        ["stale false"]
    );
    assert_eq!(driver.report().source_problem, None);
    assert!(!driver.state.wants_restart());
    // Both relists were empty: the zone has nothing left to serve.
    let effects = driver.state.handle(Input::Flush, Instant::now());
    let [Effect::Publish(publication)] = &effects[..] else {
        panic!("{:?}", names(&effects));
    };
    assert_eq!(publication.zone.service_count(), 0);
}

#[test]
fn a_hung_apiserver_makes_every_kind_stale_until_the_relist_after_a_restart() {
    let mut driver = Driver::synced();
    let hung = || Input::Unresponsive("no answer within 5s".into());
    assert_eq!(driver.handle(hung()), ["unanswered", "stale true"]);
    assert_eq!(driver.state.failing(), Kind::ALL);
    assert!(driver.state.wants_restart());
    let problem = driver.report().source_problem.expect("a problem");
    assert!(
        problem.contains("watch of namespaces: no answer within 5s"),
        "{problem}"
    );
    // Still hung: counted, no second stale edge.
    assert_eq!(driver.handle(hung()), ["unanswered"]);
    assert_eq!(driver.handle(Input::Restarted), ["restarted"]);
    assert!(!driver.state.wants_restart());
    // The restarted watches hang too: another restart is wanted.
    assert_eq!(driver.handle(hung()), ["unanswered"]);
    assert!(driver.state.wants_restart());
    assert_eq!(driver.handle(Input::Restarted), ["restarted"]);
    // A resumed watch's change makes its kind current, not the source.
    assert!(
        driver
            .handle(Input::Namespace(Ok(Event::Apply(namespace("more")))))
            .is_empty()
    );
    assert_eq!(driver.state.failing(), [Kind::Imports, Kind::Slices]);
    assert!(driver.list(Kind::Imports).is_empty());
    assert_eq!(driver.list(Kind::Slices), ["stale false"]);
    assert_eq!(driver.report().source_problem, None);
    // The relists held what the index had: nothing new to serve.
    assert!(driver.flush().is_empty());
}

#[test]
fn a_resumed_watch_recovers_with_its_first_change() {
    let mut driver = Driver::synced();
    driver.handle(Input::Namespace(Err(unreachable())));
    assert_eq!(
        driver.handle(Input::Namespace(Ok(Event::Apply(namespace("more"))))),
        ["stale false"]
    );
}

#[test]
fn invalid_objects_keep_their_last_valid_version_through_updates_and_relists() {
    let mut driver = Driver::synced();
    // An update to an invalid version: counted, kept at the last valid one.
    assert_eq!(
        driver.handle(Input::Import(Ok(Event::Apply(import("web", "not-an-ip"))))),
        ["invalid ServiceImport"]
    );
    assert_eq!(driver.ip_of("web").as_deref(), Some("10.0.0.1"));
    let rejected = driver.report().rejected;
    assert_eq!(rejected.len(), 1);
    assert_eq!(
        (rejected[0].kind, rejected[0].name.as_str()),
        (IMPORT_KIND, "web")
    );
    // A relist holding the invalid version keeps the valid one too.
    assert_eq!(
        driver.list_imports(vec![import("web", "not-an-ip")]),
        ["invalid ServiceImport"]
    );
    assert_eq!(driver.ip_of("web").as_deref(), Some("10.0.0.1"));
    assert_eq!(driver.report().rejected.len(), 1);
    // A valid version replaces it and clears the rejection.
    driver.handle(Input::Import(Ok(Event::Apply(import("web", "10.0.0.9")))));
    assert_eq!(driver.ip_of("web").as_deref(), Some("10.0.0.9"));
    assert!(driver.report().rejected.is_empty());
    // Slices the same way.
    assert_eq!(
        driver.handle(Input::Slice(Ok(Event::Apply(slice(
            "web-a", None, "10.1.0.7"
        ))))),
        ["invalid EndpointSlice"]
    );
    assert_eq!(
        driver.list_slices(vec![slice("web-a", None, "10.1.0.8")]),
        ["invalid EndpointSlice"]
    );
    let report = driver.report();
    assert_eq!(report.slices.len(), 1);
    assert_eq!(
        report.slices[0].ready[0].addresses[0].to_string(),
        "10.1.0.1"
    );
    assert_eq!(report.rejected.len(), 1);
    assert_eq!(report.rejected[0].kind, SLICE_KIND);
    // Deleting it forgets the rejection.
    driver.handle(Input::Slice(Ok(Event::Delete(slice("web-a", None, "")))));
    let report = driver.report();
    assert!(report.slices.is_empty() && report.rejected.is_empty());
}

#[test]
fn forbidden_before_the_first_sync_is_fatal_and_after_it_an_outage() {
    let mut driver = Driver::new();
    driver.list(Kind::Imports);
    let effects = driver.handle(Input::Namespace(Err(forbidden())));
    assert_eq!(effects.len(), 2, "{effects:?}");
    assert_eq!(effects[0], "error namespaces");
    assert!(
        effects[1].starts_with("fatal forbidden to list/watch namespaces: synthetic"),
        "{effects:?}"
    );

    let mut driver = Driver::synced();
    assert_eq!(
        driver.handle(Input::Namespace(Err(forbidden()))),
        ["error namespaces", "stale true"]
    );
}

#[test]
fn a_terminating_namespace_hides_its_imports() {
    let mut driver = Driver::synced();
    assert_eq!(driver.report().namespace_exists, Some(true));
    let mut terminating = namespace("shop");
    terminating.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
    );
    driver.handle(Input::Namespace(Ok(Event::Apply(terminating))));
    assert_eq!(driver.report().namespace_exists, Some(false));
    let effects = driver.state.handle(Input::Flush, Instant::now());
    let [Effect::Publish(publication)] = &effects[..] else {
        panic!("{:?}", names(&effects));
    };
    assert_eq!(publication.zone.service_count(), 0);
}

/// The first zone waits for this cluster's id to be read, or to be
/// unreadable; a failure of that watch is counted, never fatal nor stale,
/// and the id then follows the property as it appears, changes and goes.
#[test]
fn the_cluster_id_is_read_before_the_first_zone_and_followed_after() {
    let mut driver = Driver::new();
    for kind in Kind::ALL {
        driver.list(kind);
    }
    assert!(
        driver.flush().is_empty(),
        "published before the id was read"
    );
    // The CRD is not installed (or the role lacks clusterproperties):
    // counted, and the zone goes out with the id unknown.
    let refused = driver.handle(Input::ClusterProperty(Err(forbidden())));
    assert_eq!(refused, ["error clusterproperties"]);
    assert_eq!(driver.flush(), ["publish first"]);
    let why = match driver.state.index().own_cluster() {
        OwnCluster::Unknown(why) => why.clone(),
        known => panic!("{known:?}"),
    };
    assert!(
        why.contains("cannot be read") && why.contains("Forbidden"),
        "{why}"
    );
    assert!(
        driver.state.failing().is_empty(),
        "the id's watch makes nothing stale"
    );
    let report = driver.report();
    assert_eq!(report.cluster_id, None);
    assert_eq!(report.cluster_id_unknown.as_deref(), Some(why.as_str()));

    // Readable again, without the property: unknown, for that reason.
    driver.list_cluster_id(None);
    assert!(matches!(
        driver.state.index().own_cluster(),
        OwnCluster::Unknown(why) if why.contains("does not exist")
    ));
    // It appears, changes (upper case is the same id), and goes.
    let apply = |driver: &mut Driver, id: &str| {
        driver.handle(Input::ClusterProperty(Ok(Event::Apply(cluster_property(
            id,
        )))))
    };
    assert!(apply(&mut driver, "east").is_empty());
    assert_eq!(driver.state.index().own_cluster().id(), Some("east"));
    apply(&mut driver, "West");
    assert_eq!(driver.state.index().own_cluster().id(), Some("west"));
    apply(&mut driver, "not an id!");
    assert!(matches!(
        driver.state.index().own_cluster(),
        OwnCluster::Unknown(why) if why.contains("not a valid cluster id")
    ));
    apply(&mut driver, "west");
    // A failure after the first list keeps the id last read.
    driver.handle(Input::ClusterProperty(Err(unreachable())));
    assert_eq!(driver.state.index().own_cluster().id(), Some("west"));
    driver.handle(Input::ClusterProperty(Ok(Event::Delete(cluster_property(
        "west",
    )))));
    assert!(matches!(
        driver.state.index().own_cluster(),
        OwnCluster::Unknown(why) if why.contains("does not exist")
    ));
    // A 410 is routine.
    assert_eq!(
        driver.handle(Input::ClusterProperty(Err(gone()))),
        ["expired clusterproperties"]
    );
}

/// A local-first headless import answers with this cluster's endpoints
/// once the id is read, and from every cluster while it is not.
#[test]
fn a_local_first_import_follows_the_cluster_id() {
    let mut driver = Driver::new();
    driver.list_cluster_id(Some("east"));
    driver.list_imports(vec![
        serde_json::from_value(json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1",
            "kind": "ServiceImport",
            "metadata": { "name": "web", "namespace": "shop" },
            "spec": { "type": "Headless", "trafficDistribution": "PreferClose",
                      "ports": [{ "port": 80, "protocol": "TCP" }] },
        }))
        .unwrap(),
    ]);
    driver.list_slices(vec![
        slice("web-east", Some("east"), "10.1.0.1"),
        slice("web-west", Some("west"), "10.2.0.1"),
    ]);
    driver.list_namespaces(vec![namespace("shop")]);
    let addresses = |effects: Vec<Effect>| -> Vec<String> {
        let [Effect::Publish(publication)] = &effects[..] else {
            panic!("{:?}", names(&effects));
        };
        publication
            .zone
            .answer_texts(
                "web.shop.svc.clusterset.local.",
                hickory_proto::rr::RecordType::A,
            )
            .expect("an A answer")
    };
    assert_eq!(
        addresses(driver.state.handle(Input::Flush, Instant::now())),
        ["10.1.0.1"]
    );
    driver.handle(Input::ClusterProperty(Ok(Event::Delete(cluster_property(
        "east",
    )))));
    assert_eq!(
        addresses(driver.state.handle(Input::Flush, Instant::now())),
        ["10.1.0.1", "10.2.0.1"]
    );
    driver.handle(Input::ClusterProperty(Ok(Event::Apply(cluster_property(
        "west",
    )))));
    assert_eq!(
        addresses(driver.state.handle(Input::Flush, Instant::now())),
        ["10.2.0.1"]
    );
}
