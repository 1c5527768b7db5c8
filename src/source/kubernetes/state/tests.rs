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

    /// Every kind listed and the first zone published.
    fn synced() -> Self {
        let mut driver = Self::new();
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
    // The relist no longer holds db; until it is complete, db stays.
    driver.handle(Input::Import(Ok(Event::Init)));
    driver.handle(Input::Import(Ok(Event::InitApply(import(
        "web", "10.0.0.1",
    )))));
    assert_eq!(driver.ip_of("db").as_deref(), Some("10.0.0.2"));
    driver.handle(Input::Import(Ok(Event::InitDone)));
    assert_eq!(driver.ip_of("db"), None);
    assert_eq!(driver.ip_of("web").as_deref(), Some("10.0.0.1"));
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
