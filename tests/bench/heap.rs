//! Where the DNS server's heap goes (issue 23): loads a manifest the way
//! the file source does (`Parser::parse_update_from`, `Index`, `Index::publish`)
//! under a counting allocator, and prints the live heap each part holds,
//! per service and per ready endpoint:
//!
//! - the parser's cache (what it remembers of the last manifest to tell
//!   the next one's changes),
//! - the index (projections of every import and slice),
//! - the published zone (precompiled answers),
//!
//! each measured by dropping it and counting what was freed; the zone is
//! dropped last, once nothing else shares its services. The transient peak
//! of the load (one document's text and YAML values at a time, the objects
//! parsed) is printed too.
//!
//! ```sh
//! python3 scripts/gen-bench-data.py --services 10000 --out /tmp/data
//! BENCH_MANIFEST=/tmp/data/clusterset.yaml cargo bench --bench heap
//! ```
//!
//! No server, no sockets: the process RSS adds the binary, the runtime's
//! threads and the allocator's own overhead on top (see
//! `scripts/bench-scale.sh` and `scripts/bench-knot.sh` for VmRSS).
//!
//! With `BENCH_CONTROLLER_EXPORTS=N` instead, it fills the stores of one
//! MCS controller as `scripts/bench-controller.sh` leaves them after
//! convergence (three clusters, N exports each, 80 % ClusterSetIP, 10
//! endpoints per slice; see `controller_census`) and prints the heap each
//! store holds, beside the same objects held as the decoded `k8s-openapi`
//! structs the stores kept before they held them compacted:
//!
//! ```sh
//! BENCH_CONTROLLER_EXPORTS=2000 cargo bench --bench heap
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

use clusterset_dns::index::Index;
use clusterset_dns::source::manifest::Parser;
use clusterset_dns::zone::ZoneSettings;

/// The system allocator, counting live bytes, their peak and live blocks.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);
static BLOCKS: AtomicUsize = AtomicUsize::new(0);

#[allow(unsafe_code)]
// SAFETY: every call is forwarded to `System` with the same arguments; the
// counters are only read.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live =
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed) + layout.size() as isize;
        PEAK.fetch_max(live, Ordering::Relaxed);
        BLOCKS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as the caller's contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        BLOCKS.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: as the caller's contract.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let delta = new_size as isize - layout.size() as isize;
        let live = LIVE.fetch_add(delta, Ordering::Relaxed) + delta;
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: as the caller's contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Live bytes and blocks now.
fn live() -> (isize, usize) {
    (LIVE.load(Ordering::Relaxed), BLOCKS.load(Ordering::Relaxed))
}

fn main() {
    if let Ok(exports) = std::env::var("BENCH_CONTROLLER_EXPORTS") {
        controller::census(
            exports
                .parse()
                .expect("BENCH_CONTROLLER_EXPORTS=<a number>"),
        );
        return;
    }
    let path = std::env::var("BENCH_MANIFEST")
        .expect("BENCH_MANIFEST=<a manifest of scripts/gen-bench-data.py>");
    let settings = ZoneSettings::new("clusterset.local.".parse().expect("a name"));
    let (before, before_blocks) = live();
    // As the file source reads it: a document at a time, the text never
    // whole in memory.
    let file = std::fs::File::open(&path).expect("opening BENCH_MANIFEST");
    let mut parser = Parser::default();
    let update = parser
        .parse_update_from(std::io::BufReader::new(file))
        .expect("the manifest parses");
    let mut index = Index::new(settings);
    update.apply_to(&mut index);
    let (zone, _) = index.publish();
    let peak = PEAK.load(Ordering::Relaxed) - before;

    let services = zone.service_count();
    let endpoints = index.endpoint_count();
    let slices = index.slice_count();
    let records: usize = zone.services().map(|s| s.record_count()).sum();
    let (loaded, loaded_blocks) = live();

    let mut parts = Vec::new();
    let mut measure = |name: &str, drop_it: &mut dyn FnMut()| {
        let (l0, b0) = live();
        drop_it();
        let (l1, b1) = live();
        parts.push((name.to_string(), l0 - l1, b0 - b1));
    };
    let mut parser = Some(parser);
    measure("parser cache", &mut || drop(parser.take()));
    let mut index = Some(index);
    measure("index", &mut || drop(index.take()));
    let mut zone = Some(zone);
    measure("zone", &mut || drop(zone.take()));

    let mib = |b: isize| b as f64 / (1024.0 * 1024.0);
    println!(
        "manifest {path}: {services} services with names, {slices} slices, {endpoints} ready endpoints, {records} answer records"
    );
    println!(
        "live heap once loaded: {:.1} MiB in {} blocks; transient peak of the load {:.1} MiB",
        mib(loaded - before),
        loaded_blocks - before_blocks,
        mib(peak)
    );
    println!("| part | MiB | blocks | bytes per service | bytes per ready endpoint |");
    println!("|---|---:|---:|---:|---:|");
    for (name, bytes, blocks) in &parts {
        println!(
            "| {name} | {:.1} | {blocks} | {:.0} | {:.0} |",
            mib(*bytes),
            *bytes as f64 / services.max(1) as f64,
            *bytes as f64 / endpoints.max(1) as f64,
        );
    }
    let total: isize = parts.iter().map(|p| p.1).sum();
    println!(
        "| all | {:.1} | {} | {:.0} | {:.0} |",
        mib(total),
        parts.iter().map(|p| p.2).sum::<usize>(),
        total as f64 / services.max(1) as f64,
        total as f64 / endpoints.max(1) as f64,
    );
}

/// The controller's stores (see the module documentation).
mod controller {
    use clusterset_dns::api::{ServiceExport, ServiceImport};
    use clusterset_dns::controller::cluster::{ClusterData, LocalData, Objects, PeerLimits};
    use clusterset_dns::controller::compact::Compact;
    use clusterset_dns::controller::lean::Lean;
    use clusterset_dns::watch::IndexResource;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use serde_json::{Value, json};

    use super::live;

    const CLUSTERS: [&str; 3] = ["c0", "c1", "c2"];
    const NAMESPACES: usize = 20;

    /// Metadata as the apiserver returns it (without managed fields, which
    /// no watch decodes).
    fn meta(name: &str, ns: &str, serial: usize, labels: Value, owner: Option<&str>) -> Value {
        let mut meta = json!({
            "name": name, "namespace": ns,
            "uid": format!("{:08x}-3f0a-4a8e-9d1c-7d2b6a5f4e31", serial),
            "resourceVersion": (100_000 + serial).to_string(),
            "creationTimestamp": "2026-12-02T10:00:00Z",
            "labels": labels,
        });
        if let Some(owner) = owner {
            meta["ownerReferences"] = json!([{
                "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
                "name": owner, "uid": format!("{:08x}-aaaa-4a8e-9d1c-7d2b6a5f4e31", serial),
                "controller": true, "blockOwnerDeletion": true,
            }]);
        }
        meta
    }

    fn slice(name: &str, ns: &str, serial: usize, labels: Value, owner: Option<&str>) -> Value {
        let endpoints: Vec<Value> = (0..10)
            .map(|j| {
                let i = serial * 10 + j;
                json!({"addresses": [format!("10.{}.{}.{}", 200 + serial % 3, i / 250 % 250, i % 250 + 1)],
                       "conditions": {"ready": true, "serving": true, "terminating": false}})
            })
            .collect();
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": meta(name, ns, serial, labels, owner),
            "addressType": "IPv4", "endpoints": endpoints,
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        })
    }

    fn service(name: &str, ns: &str, serial: usize, labels: Value, headless: bool) -> Value {
        let ip = if headless {
            "None".to_owned()
        } else {
            format!("10.96.{}.{}", serial / 250, serial % 250 + 1)
        };
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": meta(name, ns, serial, labels, None),
            "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80}],
                     "clusterIP": ip, "clusterIPs": [ip], "type": "ClusterIP",
                     "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                     "sessionAffinity": "None", "internalTrafficPolicy": "Cluster"},
        })
    }

    fn condition(kind: &str) -> Value {
        json!({"type": kind, "status": "True", "reason": kind, "message": "",
               "lastTransitionTime": "2026-12-02T10:00:00Z", "observedGeneration": 1})
    }

    fn apply<K>(store: &mut Objects<K>, plain: &mut Vec<K>, object: Value)
    where
        K: Compact + kube::Resource + Clone,
        Lean<K>: serde::de::DeserializeOwned,
        Objects<K>: IndexResource<Lean<K>>,
    {
        let lean: Lean<K> = serde_json::from_value(object).expect("a bench object decodes");
        plain.push(lean.0.clone());
        store.apply(lean);
    }

    /// Reads every object of `store`, service by service; how many.
    fn expand_all<K: Compact + kube::Resource>(store: &Objects<K>) -> usize {
        store
            .services()
            .map(|service| store.of(service).map(std::hint::black_box).count())
            .sum()
    }

    /// Each of the store's kinds, as held decoded and whole.
    #[derive(Default)]
    struct Plain {
        exports: Vec<ServiceExport>,
        services: Vec<Service>,
        slices: Vec<EndpointSlice>,
        imports: Vec<ServiceImport>,
    }

    /// One cluster's exports as a peer's watches see them (or this
    /// cluster's own, with `local`).
    fn cluster(data: &mut ClusterData, plain: &mut Plain, ci: usize, exports: usize) {
        let id = CLUSTERS[ci];
        for k in 0..exports {
            let (ns, name) = (format!("bench-{}", k % NAMESPACES), format!("{id}-svc-{k}"));
            let serial = ci * 1_000_000 + k;
            let mut export = json!({
                "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
                "metadata": meta(&name, &ns, serial, json!({}), None),
                "spec": {},
                "status": {"conditions": [condition("Valid"), condition("Ready"), condition("Conflict")]},
            });
            export["metadata"]["labels"] = Value::Null;
            apply(&mut data.exports, &mut plain.exports, export);
            apply(
                &mut data.services,
                &mut plain.services,
                service(&name, &ns, serial, json!({}), k % 5 == 4),
            );
            let labels = json!({
                "multicluster.kubernetes.io/service-name": name,
                "multicluster.kubernetes.io/source-cluster": id,
                "endpointslice.kubernetes.io/managed-by": "controller.clusterset-dns.io",
                "app.kubernetes.io/managed-by": "controller.clusterset-dns.io",
            });
            apply(
                &mut data.mcs_slices,
                &mut plain.slices,
                slice(&format!("{name}-{id}-ipv4"), &ns, serial, labels, None),
            );
        }
    }

    /// Fills one controller's stores as the bench leaves them after
    /// convergence and prints what each holds.
    pub(crate) fn census(per_cluster: usize) {
        let limits = PeerLimits {
            exports: usize::MAX,
            services: usize::MAX,
            slices: usize::MAX,
            endpoints: usize::MAX,
        };
        let (before, _) = live();
        let mut plain = Plain::default();
        let mut local = ClusterData::default();
        let mut local_only = LocalData::default();
        let mut peers = [ClusterData::for_peer(limits), ClusterData::for_peer(limits)];
        // This cluster's exports, their Services and the slices the
        // endpointslice controller wrote; the peers' through their watches.
        cluster(&mut local, &mut plain, 0, per_cluster);
        // `cluster` gave this cluster's store its mirrored slices; the
        // Kubernetes slices of the same Services come from the local watch.
        for k in 0..per_cluster {
            let (ns, name) = (format!("bench-{}", k % NAMESPACES), format!("c0-svc-{k}"));
            let labels = json!({"kubernetes.io/service-name": name,
                                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"});
            apply(
                &mut local_only.kubernetes_slices,
                &mut plain.slices,
                slice(&format!("{name}-bench"), &ns, k, labels, None),
            );
        }
        for (p, peer) in peers.iter_mut().enumerate() {
            cluster(peer, &mut plain, p + 1, per_cluster);
        }
        // Every cluster's import here, the ClusterSetIP ones with their
        // derived Service, and the peers' slices copied.
        for (ci, id) in CLUSTERS.iter().enumerate() {
            for k in 0..per_cluster {
                let (ns, name) = (format!("bench-{}", k % NAMESPACES), format!("{id}-svc-{k}"));
                let serial = 10_000_000 + ci * 1_000_000 + k;
                let headless = k % 5 == 4;
                let ip = format!("10.97.{}.{}", serial / 250 % 250, serial % 250 + 1);
                let import = json!({
                    "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
                    "metadata": meta(&name, &ns, serial, json!({"app.kubernetes.io/managed-by": "controller.clusterset-dns.io"}), None),
                    "spec": {"type": if headless { "Headless" } else { "ClusterSetIP" },
                             "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
                             "ips": if headless { json!([]) } else { json!([ip]) },
                             "ipFamilies": ["IPv4"], "sessionAffinity": "None"},
                    "status": {"clusters": [{"cluster": id}], "conditions": [condition("Ready")],
                               "endpointSliceObjects": "Present"},
                });
                apply(&mut local_only.imports, &mut plain.imports, import);
                let derived = format!("derived-{serial:x}");
                if !headless {
                    let labels = json!({"multicluster.kubernetes.io/service-name": name,
                                        "app.kubernetes.io/managed-by": "controller.clusterset-dns.io"});
                    let mut svc = service(&derived, &ns, serial, labels, false);
                    svc["metadata"]["ownerReferences"] =
                        meta("", "", serial, json!({}), Some(&name))["ownerReferences"].clone();
                    apply(&mut local.services, &mut plain.services, svc);
                }
                if ci > 0 {
                    let labels = json!({
                        "multicluster.kubernetes.io/service-name": name,
                        "multicluster.kubernetes.io/source-cluster": id,
                        "endpointslice.kubernetes.io/managed-by": "controller.clusterset-dns.io",
                        "app.kubernetes.io/managed-by": "controller.clusterset-dns.io",
                        "kubernetes.io/service-name": derived,
                    });
                    apply(
                        &mut local.mcs_slices,
                        &mut plain.slices,
                        slice(
                            &format!("{name}-{id}-ipv4"),
                            &ns,
                            serial,
                            labels,
                            Some(&name),
                        ),
                    );
                }
            }
        }
        let (filled, _) = live();

        // What a read costs: every object expanded once, by service, as
        // the decisions read them (best of 3 passes).
        let pass = || {
            let start = std::time::Instant::now();
            let mut read = 0usize;
            for data in std::iter::once(&local).chain(&peers) {
                read += expand_all(&data.exports) + expand_all(&data.services);
                read += expand_all(&data.mcs_slices);
            }
            read += expand_all(&local_only.kubernetes_slices) + expand_all(&local_only.imports);
            (start.elapsed(), read)
        };
        let (took, read) = (0..3).map(|_| pass()).min().expect("three passes");
        println!(
            "expanding every stored object once: {read} objects in {:.1} ms, {:.2} µs per object (best of 3)",
            took.as_secs_f64() * 1e3,
            took.as_secs_f64() * 1e6 / read.max(1) as f64
        );

        let mib = |b: isize| b as f64 / (1024.0 * 1024.0);
        // What dropping something frees.
        let freed = |held: &mut dyn FnMut()| {
            let (l0, _) = live();
            held();
            l0 - live().0
        };
        // Each kind's stores (this cluster's and the peers'), dropped
        // together, beside the same objects held whole.
        let mut exports = Vec::new();
        let mut services = Vec::new();
        let mut slices = Vec::new();
        for data in std::iter::once(local).chain(peers) {
            let ClusterData {
                exports: e,
                services: s,
                mcs_slices: m,
            } = data;
            exports.push(e);
            services.push(s);
            slices.push(m);
        }
        let LocalData {
            kubernetes_slices,
            imports,
            ..
        } = local_only;
        let mut kubernetes_slices = Some(kubernetes_slices);
        let mut imports = Some(imports);
        let mut rows: Vec<(&str, usize, isize, isize)> = Vec::new();
        let count = plain.exports.len();
        rows.push((
            "ServiceExports (ours, 2 peers')",
            count,
            freed(&mut || exports.clear()),
            freed(&mut || plain.exports = Vec::new()),
        ));
        let count = plain.services.len();
        rows.push((
            "Services (ours, our derived ones, 2 peers')",
            count,
            freed(&mut || services.clear()),
            freed(&mut || plain.services = Vec::new()),
        ));
        let count = plain.slices.len();
        let stored = freed(&mut || slices.clear()) + freed(&mut || drop(kubernetes_slices.take()));
        rows.push((
            "EndpointSlices (MCS: ours, 2 peers'; Kubernetes: ours)",
            count,
            stored,
            freed(&mut || plain.slices = Vec::new()),
        ));
        let count = plain.imports.len();
        rows.push((
            "ServiceImports",
            count,
            freed(&mut || drop(imports.take())),
            freed(&mut || plain.imports = Vec::new()),
        ));

        let objects: usize = rows.iter().map(|r| r.1).sum();
        println!(
            "one controller's stores at {per_cluster} exports per cluster × 3 clusters: {objects} objects; heap {:.1} MiB with the decoded copies",
            mib(filled - before)
        );
        println!(
            "| kind | objects | stores, MiB | B per object | decoded structs, MiB | B per object |"
        );
        println!("|---|---:|---:|---:|---:|---:|");
        let row = |name: &str, count: usize, stored: isize, whole: isize| {
            let per = |bytes: isize| bytes as f64 / count.max(1) as f64;
            println!(
                "| {name} | {count} | {:.1} | {:.0} | {:.1} | {:.0} |",
                mib(stored),
                per(stored),
                mib(whole),
                per(whole)
            );
        };
        for (name, count, stored, whole) in &rows {
            row(name, *count, *stored, *whole);
        }
        row(
            "all",
            objects,
            rows.iter().map(|r| r.2).sum(),
            rows.iter().map(|r| r.3).sum(),
        );
    }
}
