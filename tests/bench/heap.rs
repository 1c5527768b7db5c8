//! Where the DNS server's heap goes (issue 23): loads a manifest the way
//! the file source does (`Parser::parse_update`, `Index`, `Index::publish`)
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
//! of the load (the text, the YAML values) is printed too.
//!
//! ```sh
//! python3 scripts/gen-bench-data.py --services 10000 --out /tmp/data
//! BENCH_MANIFEST=/tmp/data/clusterset.yaml cargo bench --bench heap
//! ```
//!
//! No server, no sockets: the process RSS adds the binary, the runtime's
//! threads and the allocator's own overhead on top (see
//! `scripts/bench-scale.sh` and `scripts/bench-knot.sh` for VmRSS).

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
    let path = std::env::var("BENCH_MANIFEST")
        .expect("BENCH_MANIFEST=<a manifest of scripts/gen-bench-data.py>");
    let settings = ZoneSettings::new("clusterset.local.".parse().expect("a name"));
    let (before, before_blocks) = live();
    let text = std::fs::read_to_string(&path).expect("reading BENCH_MANIFEST");
    let mut parser = Parser::default();
    let update = parser.parse_update(&text).expect("the manifest parses");
    let mut index = Index::new(settings);
    update.apply_to(&mut index);
    let (zone, _) = index.publish();
    let peak = PEAK.load(Ordering::Relaxed) - before;
    drop(text);

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
