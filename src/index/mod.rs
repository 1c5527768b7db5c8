//! The mutable index: ServiceImports and imported EndpointSlices, joined by
//! namespace and `multicluster.kubernetes.io/service-name`.
//!
//! Sources (the manifest file, Kubernetes watches) call `apply_*`,
//! `delete_*` and `reset_*`; each call records which services changed.
//! [`Index::publish`] rebuilds only those services and hands out a new
//! immutable [`Zone`] that shares every untouched service with the previous
//! one. Applying an object identical to the stored one changes nothing, so it
//! neither rebuilds nor bumps the SOA serial. A ClusterSetIP service's names
//! come from its import alone (its clusterset IPs and ports), so a change of
//! its slices rebuilds nothing either: only the counts change, and they go
//! out with the next publish.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::api::ServiceRef;
use crate::model::{ImportedService, OwnCluster, Port, SliceEndpoints};
use crate::zone::{ServiceZone, Zone, ZoneSettings};

use crate::at_rest::Interner;

mod slices;

use slices::{SliceId, Slices};

/// Identifies one EndpointSlice: namespace and object name, shared strings
/// (the index interns the namespace and holds the key once, with the
/// slice).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SliceKey {
    /// Namespace.
    pub namespace: Arc<str>,
    /// Object name.
    pub name: Arc<str>,
}

impl SliceKey {
    /// The key of the slice `namespace/name`, as given.
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

/// One object of a relist as the index keeps it until the list is
/// complete: only the key of an object it holds unchanged (shared strings,
/// no copy of the object), or the version that replaces what it holds. A
/// relist after an outage then holds beside the index what changed, not a
/// second copy of everything.
#[derive(Debug, Clone, PartialEq)]
pub enum Relisted<K, V> {
    /// The object is held as listed.
    Held(K),
    /// A new or changed object.
    Changed(V),
}

impl<K, V> Relisted<K, Box<V>> {
    /// The changed object out of its box.
    pub fn unboxed(self) -> Relisted<K, V> {
        match self {
            Self::Held(key) => Relisted::Held(key),
            Self::Changed(object) => Relisted::Changed(*object),
        }
    }
}

/// What one [`Index::publish`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PublishStats {
    /// Services whose names were rebuilt.
    pub rebuilt: usize,
    /// How long the rebuild took.
    pub elapsed: Duration,
    /// How long applying the changes to the index took before the
    /// rebuild, where the source measures it as one step (the file source:
    /// bringing the index to the new manifest); zero from
    /// [`Index::publish`] itself, and for watch events, which are applied
    /// one at a time as they arrive.
    pub applied: Duration,
}

/// Rebuilds of at least this many services are spread over the CPUs.
const PARALLEL_REBUILD: usize = 512;

/// One service as the index joins it: its import, if any, and the slots
/// of the slices that name it. One table for both, so a service costs one
/// bucket.
#[derive(Debug, Default)]
struct Joined {
    /// Boxed: the table's buckets come in powers of two and many sit
    /// empty, so they hold a pointer, not the whole projection.
    import: Option<Box<ImportedService>>,
    /// A few each, so a small vector (a B-tree node costs ~0.5 KB per
    /// service at 10^4 services).
    slices: Vec<SliceId>,
}

impl Joined {
    /// Whether the service is neither imported nor named by a slice.
    fn is_unused(&self) -> bool {
        self.import.is_none() && self.slices.is_empty()
    }
}

/// The watch-fed index of imports and slices.
#[derive(Debug)]
pub struct Index {
    services: HashMap<ServiceRef, Joined>,
    /// Services in `services` with an import.
    imports: usize,
    slices: Slices,
    /// Endpoints across `slices`, kept as they change so that reading it
    /// costs nothing at 10^5 endpoints.
    endpoints: usize,
    dirty: HashSet<ServiceRef>,
    /// Changed headless services that [`Index::prebuild`] left for a
    /// later batch or the publish.
    held: HashSet<ServiceRef>,
    /// Services were rebuilt since the last publish (by
    /// [`Index::prebuild`]): the next zone gets a new serial.
    unpublished: bool,
    /// Slices changed that no name depends on: the next publish rebuilds
    /// nothing for them but reports the new counts.
    counts_changed: bool,
    /// When set, only imports in these namespaces have names (see
    /// [`Index::require_namespaces`]).
    namespaces: Option<HashSet<String>>,
    /// This cluster's id, which local-first imports answer by.
    own_cluster: OwnCluster,
    /// One copy of each namespace, service name and cluster id: at 10,000
    /// services and 28,788 slices, separate copies were 17 heap blocks per
    /// slice (`cargo bench --bench heap`).
    strings: Interner<str>,
    /// One copy of each port list (the same for nearly every slice of a
    /// service).
    ports: Interner<[Port]>,
    zone: Zone,
}

impl Index {
    /// An empty index whose zones use `settings`.
    pub fn new(settings: ZoneSettings) -> Self {
        Self {
            services: HashMap::new(),
            imports: 0,
            slices: Slices::default(),
            endpoints: 0,
            dirty: HashSet::new(),
            held: HashSet::new(),
            unpublished: false,
            counts_changed: false,
            namespaces: None,
            own_cluster: OwnCluster::not_read(),
            strings: Interner::default(),
            ports: Interner::default(),
            zone: Zone::new(settings),
        }
    }

    /// The settings its zones are built with.
    pub fn settings(&self) -> &ZoneSettings {
        self.zone.settings()
    }

    /// What the index knows of this cluster's id.
    pub fn own_cluster(&self) -> &OwnCluster {
        &self.own_cluster
    }

    /// Records this cluster's id (or why it is unknown), as the source
    /// read it from the `ClusterProperty` `cluster.clusterset.k8s.io`. A
    /// change rebuilds the local-first imports and is logged; the same
    /// value again changes nothing.
    pub fn set_own_cluster(&mut self, own: OwnCluster) {
        if self.own_cluster == own {
            return;
        }
        let local_first = self
            .imports()
            .filter(|import| import.locality.local_first())
            .count();
        match &own {
            OwnCluster::Known(id) => tracing::info!(
                cluster_id = %id,
                local_first_imports = local_first,
                "this cluster's id is known: local-first imports answer with its endpoints first"
            ),
            OwnCluster::Unknown(why) => tracing::info!(
                reason = %why,
                local_first_imports = local_first,
                "this cluster's id is unknown: local-first imports answer from every cluster"
            ),
        }
        let known_before = self.own_cluster.id().is_some();
        self.own_cluster = own;
        // Only headless answers depend on it, and only while an id is known
        // before or after.
        if known_before || self.own_cluster.id().is_some() {
            let affected: Vec<ServiceRef> = self
                .imports()
                .filter(|import| {
                    import.locality.local_first()
                        && import.import_type == crate::api::ServiceImportType::Headless
                })
                .map(|import| import.service.clone())
                .collect();
            self.dirty.extend(affected);
        }
    }

    /// Number of ServiceImports held.
    pub fn import_count(&self) -> usize {
        self.imports
    }

    /// Every ServiceImport held.
    fn imports(&self) -> impl Iterator<Item = &ImportedService> {
        self.services
            .values()
            .filter_map(|joined| joined.import.as_deref())
    }

    /// Number of EndpointSlices held.
    pub fn slice_count(&self) -> usize {
        self.slices.len()
    }

    /// Number of endpoints across all slices.
    pub fn endpoint_count(&self) -> usize {
        self.endpoints
    }

    /// The indexed version of a ServiceImport, if any.
    pub fn import(&self, service: &ServiceRef) -> Option<&ImportedService> {
        self.services.get(service)?.import.as_deref()
    }

    /// The indexed version of an EndpointSlice, if any.
    pub fn slice(&self, key: &SliceKey) -> Option<&SliceEndpoints> {
        self.slices.get(key).map(|held| &held.slice)
    }

    /// The slices joined to `service`, with their keys.
    pub fn slices_of<'a>(
        &'a self,
        service: &ServiceRef,
    ) -> impl Iterator<Item = (&'a SliceKey, &'a SliceEndpoints)> + 'a {
        self.services
            .get(service)
            .into_iter()
            .flat_map(|joined| &joined.slices)
            .map(|id| {
                let held = self.slices.at(*id);
                (&held.key, &held.slice)
            })
    }

    /// Whether the lower-case `namespace` exists locally; `None` when
    /// namespaces are not tracked (see [`Index::require_namespaces`]) and
    /// every one counts.
    pub fn namespace_known(&self, namespace: &str) -> Option<bool> {
        self.namespaces.as_ref().map(|set| set.contains(namespace))
    }

    /// True when changes are waiting for [`Index::publish`].
    pub fn has_changes(&self) -> bool {
        !self.dirty.is_empty() || !self.held.is_empty() || self.unpublished || self.counts_changed
    }

    /// Adds or replaces a ServiceImport.
    pub fn apply_import(&mut self, mut import: ImportedService) {
        import.service = shared_service(&mut self.strings, &import.service);
        if self.import(&import.service) == Some(&import) {
            return;
        }
        self.dirty.insert(import.service.clone());
        let joined = self.services.entry(import.service.clone()).or_default();
        if joined.import.replace(Box::new(import)).is_none() {
            self.imports += 1;
        }
    }

    /// Removes a ServiceImport.
    pub fn delete_import(&mut self, service: &ServiceRef) {
        let Some(joined) = self.services.get_mut(service) else {
            return;
        };
        if joined.import.take().is_some() {
            self.imports -= 1;
            if joined.is_unused() {
                self.services.remove(service);
            }
            self.dirty.insert(service.clone());
        }
    }

    /// Adds or replaces an EndpointSlice. A slice may move between services
    /// when its service-name label changes; both are rebuilt. Its serving
    /// endpoints are kept only with the serving fallback on.
    pub fn apply_slice(&mut self, mut key: SliceKey, mut slice: SliceEndpoints) {
        self.as_held(&mut key, &mut slice);
        if let Some(old) = self.slices.get(&key)
            && old.slice == slice
        {
            return;
        }
        let service = slice.service.clone();
        self.slices_changed(&service);
        self.endpoints += slice.endpoints.len();
        let (id, old) = self.slices.insert(key, slice);
        if let Some(old) = old {
            self.endpoints -= old.slice.endpoints.len();
            if old.slice.service == service {
                return;
            }
            self.unlink_slice(&old.slice.service, id);
        }
        self.services.entry(service).or_default().slices.push(id);
    }

    /// A slice as the index would hold it: serving endpoints dropped
    /// unless the serving fallback is on, strings and ports shared.
    fn as_held(&mut self, key: &mut SliceKey, slice: &mut SliceEndpoints) {
        if !self.zone.settings().serve_terminating {
            slice.drop_serving();
        }
        key.namespace = self.strings.share(&key.namespace);
        slice.service = shared_service(&mut self.strings, &slice.service);
        slice.cluster = self.strings.share(&slice.cluster);
        slice.ports = self.ports.share(&slice.ports);
    }

    /// Removes an EndpointSlice.
    pub fn delete_slice(&mut self, key: &SliceKey) {
        if let Some((id, old)) = self.slices.remove(key) {
            self.endpoints -= old.slice.endpoints.len();
            self.unlink_slice(&old.slice.service, id);
        }
    }

    /// Replaces every ServiceImport (a relist); only services whose import
    /// differs from before are rebuilt.
    pub fn reset_imports(&mut self, imports: impl IntoIterator<Item = ImportedService>) {
        self.relist_imports(imports.into_iter().map(Relisted::Changed));
    }

    /// What a relist keeps of `import` until it completes
    /// ([`Index::relist_imports`]): its key if the index holds it
    /// unchanged, else the import.
    pub fn relisted_import(
        &mut self,
        mut import: ImportedService,
    ) -> Relisted<ServiceRef, Box<ImportedService>> {
        import.service = shared_service(&mut self.strings, &import.service);
        match self.import(&import.service) {
            Some(held) if *held == import => Relisted::Held(held.service.clone()),
            _ => Relisted::Changed(Box::new(import)),
        }
    }

    /// A complete relist of the ServiceImports: every one it does not name
    /// is deleted, every changed one applied.
    pub fn relist_imports(
        &mut self,
        listed: impl IntoIterator<Item = Relisted<ServiceRef, ImportedService>>,
    ) {
        let mut seen = HashSet::new();
        for item in listed {
            match item {
                Relisted::Held(service) => {
                    seen.insert(service);
                }
                Relisted::Changed(import) => {
                    seen.insert(import.service.clone());
                    self.apply_import(import);
                }
            }
        }
        let gone: Vec<ServiceRef> = self
            .imports()
            .map(|import| &import.service)
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        for service in gone {
            self.delete_import(&service);
        }
    }

    /// Replaces every EndpointSlice (a relist).
    pub fn reset_slices(&mut self, slices: impl IntoIterator<Item = (SliceKey, SliceEndpoints)>) {
        self.relist_slices(slices.into_iter().map(Relisted::Changed));
    }

    /// What a relist keeps of a slice until it completes
    /// ([`Index::relist_slices`]): its key if the index holds it
    /// unchanged, else the slice.
    pub fn relisted_slice(
        &mut self,
        mut key: SliceKey,
        mut slice: SliceEndpoints,
    ) -> Relisted<SliceKey, Box<(SliceKey, SliceEndpoints)>> {
        self.as_held(&mut key, &mut slice);
        match self.slices.get(&key) {
            Some(held) if held.slice == slice => Relisted::Held(held.key.clone()),
            _ => Relisted::Changed(Box::new((key, slice))),
        }
    }

    /// A complete relist of the EndpointSlices: every one it does not name
    /// is deleted, every changed one applied.
    pub fn relist_slices(
        &mut self,
        listed: impl IntoIterator<Item = Relisted<SliceKey, (SliceKey, SliceEndpoints)>>,
    ) {
        let mut seen = HashSet::new();
        for item in listed {
            match item {
                Relisted::Held(key) => {
                    seen.insert(key);
                }
                Relisted::Changed((key, slice)) => {
                    seen.insert(key.clone());
                    self.apply_slice(key, slice);
                }
            }
        }
        let gone: Vec<SliceKey> = self
            .slices
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        for key in gone {
            self.delete_slice(&key);
        }
    }

    /// Serves an import only while its namespace exists locally (and is not
    /// being deleted). Until namespaces are reported, nothing is served.
    pub fn require_namespaces(&mut self) {
        if self.namespaces.is_none() {
            self.namespaces = Some(HashSet::new());
            let imported: Vec<ServiceRef> = self
                .imports()
                .map(|import| import.service.clone())
                .collect();
            self.dirty.extend(imported);
        }
    }

    /// Records that `namespace` exists.
    pub fn apply_namespace(&mut self, namespace: &str) {
        if let Some(set) = &mut self.namespaces
            && set.insert(namespace.to_ascii_lowercase())
        {
            self.touch_namespace(namespace);
        }
    }

    /// Records that `namespace` is gone (or terminating).
    pub fn delete_namespace(&mut self, namespace: &str) {
        if let Some(set) = &mut self.namespaces
            && set.remove(&namespace.to_ascii_lowercase())
        {
            self.touch_namespace(namespace);
        }
    }

    /// Replaces the set of existing namespaces (a relist).
    pub fn reset_namespaces(&mut self, namespaces: impl IntoIterator<Item = String>) {
        let Some(old) = self.namespaces.take() else {
            return;
        };
        let new: HashSet<String> = namespaces
            .into_iter()
            .map(|n| n.to_ascii_lowercase())
            .collect();
        let changed: Vec<String> = old.symmetric_difference(&new).cloned().collect();
        self.namespaces = Some(new);
        for namespace in changed {
            self.touch_namespace(&namespace);
        }
    }

    fn touch_namespace(&mut self, namespace: &str) {
        let namespace = namespace.to_ascii_lowercase();
        let affected: Vec<ServiceRef> = self
            .imports()
            .map(|import| &import.service)
            .filter(|s| *s.namespace == *namespace)
            .cloned()
            .collect();
        self.dirty.extend(affected);
    }

    fn namespace_exists(&self, namespace: &str) -> bool {
        self.namespace_known(namespace).unwrap_or(true)
    }

    /// Rebuilds the changed services and returns the new zone snapshot.
    ///
    /// Services build independently, so a large rebuild (the first publish,
    /// a relist) is spread over the CPUs; a few changed services are built
    /// on the calling thread.
    pub fn publish(&mut self) -> (Zone, PublishStats) {
        let started = Instant::now();
        // Taken, not drained: a set that held every service through a
        // first sync keeps none of its room.
        let mut changed = std::mem::take(&mut self.dirty);
        changed.extend(std::mem::take(&mut self.held));
        let rebuilt = self.rebuild(changed.into_iter().collect());
        self.counts_changed = false;
        if std::mem::take(&mut self.unpublished) {
            self.zone.set_serial(next_serial(self.zone.serial()));
        }
        let stats = PublishStats {
            rebuilt,
            elapsed: started.elapsed(),
            applied: Duration::ZERO,
        };
        (self.zone.clone(), stats)
    }

    /// Rebuilds, without handing out a zone, the changed services that
    /// slices still to come are unlikely to change, so that the next
    /// [`Index::publish`] rebuilds only the rest: a source calls it between
    /// the batches of a long first sync, to build while the rest of its
    /// lists is on its way. Those are the ClusterSetIP imports (no slice
    /// changes their names) and the headless imports that a whole batch
    /// left alone since they last changed: a list arrives in key order, so
    /// a service's slices come together, and one that came back would only
    /// be rebuilt again. A headless import changed in this batch waits.
    /// Returns how many services it rebuilt.
    pub fn prebuild(&mut self) -> usize {
        let fresh = std::mem::take(&mut self.dirty);
        let mut now: Vec<ServiceRef> = self
            .held
            .iter()
            .filter(|service| !fresh.contains(*service))
            .cloned()
            .collect();
        for service in &now {
            self.held.remove(service);
        }
        for service in fresh {
            if self.answers_with_endpoints(&service) {
                self.held.insert(service);
            } else {
                now.push(service);
            }
        }
        self.rebuild(now)
    }

    /// Rebuilds `dirty` into the next zone.
    fn rebuild(&mut self, dirty: Vec<ServiceRef>) -> usize {
        let rebuilt = dirty.len();
        if rebuilt == 0 {
            return 0;
        }
        // Asked only for a large rebuild: it reads the CPU affinity and the
        // cgroup's quota, system calls that a prebuild between every batch
        // of a list would otherwise pay each time.
        let threads = match rebuilt < PARALLEL_REBUILD {
            true => 1,
            false => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let index = &*self;
        let built: Vec<Option<Arc<ServiceZone>>> = if threads == 1 {
            dirty.iter().map(|service| index.build(service)).collect()
        } else {
            let chunk = rebuilt.div_ceil(threads);
            std::thread::scope(|scope| {
                let workers: Vec<_> = dirty
                    .chunks(chunk)
                    .map(|services| {
                        scope.spawn(move || {
                            services.iter().map(|s| index.build(s)).collect::<Vec<_>>()
                        })
                    })
                    .collect();
                workers
                    .into_iter()
                    .flat_map(|worker| {
                        worker
                            .join()
                            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                    })
                    .collect()
            })
        };
        for (service, built) in dirty.iter().zip(built) {
            self.zone.set_service(service, built);
        }
        self.unpublished |= rebuilt > 0;
        rebuilt
    }

    /// The names of one service, or `None` when it has none (no import, or
    /// its namespace is missing).
    fn build(&self, service: &ServiceRef) -> Option<Arc<ServiceZone>> {
        let joined = self.services.get(service)?;
        let import = joined
            .import
            .as_deref()
            .filter(|_| self.namespace_exists(&service.namespace))?;
        let slices: Vec<&SliceEndpoints> = joined
            .slices
            .iter()
            .map(|id| &self.slices.at(*id).slice)
            .collect();
        Some(Arc::new(ServiceZone::build(
            import,
            &slices,
            self.zone.settings(),
            self.own_cluster.id(),
        )))
    }

    /// Forgets that the slice in slot `id` names `service`.
    fn unlink_slice(&mut self, service: &ServiceRef, id: SliceId) {
        if let Some(joined) = self.services.get_mut(service) {
            joined.slices.retain(|slot| *slot != id);
            if joined.is_unused() {
                self.services.remove(service);
            }
        }
        self.slices_changed(service);
    }

    /// The slices of `service` changed: its names are rebuilt if they
    /// depend on them, which only a headless import's do. Without an
    /// import there are no names; its arrival rebuilds them.
    fn slices_changed(&mut self, service: &ServiceRef) {
        if self.answers_with_endpoints(service) {
            self.dirty.insert(service.clone());
        } else {
            self.counts_changed = true;
        }
    }

    /// Whether the names of `service` are built from its slices: a
    /// headless import's are, a ClusterSetIP import's are not.
    fn answers_with_endpoints(&self, service: &ServiceRef) -> bool {
        self.import(service)
            .is_some_and(|import| import.import_type == crate::api::ServiceImportType::Headless)
    }
}

/// The SOA serial: the current Unix time, but always ahead of the previous
/// serial so that every published change is visible to secondaries.
fn next_serial(previous: u32) -> u32 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32);
    now.max(previous.wrapping_add(1))
}

/// `service` made of the shared copies of its strings.
fn shared_service(strings: &mut Interner<str>, service: &ServiceRef) -> ServiceRef {
    ServiceRef {
        namespace: strings.share(&service.namespace),
        name: strings.share(&service.name),
    }
}

#[cfg(test)]
mod tests;
