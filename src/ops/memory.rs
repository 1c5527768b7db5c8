//! How the process uses the C library's heap: one malloc arena, and freed
//! heap given back to the kernel after a large load.

/// Malloc arenas the process uses. glibc gives each thread that meets
/// contention an arena of its own (up to 8 per core); the load thread and
/// each runtime worker then keep long-lived index and zone blocks, and free
/// pages between them, in heaps of their own. With one arena the server
/// holds the 10,000-service zone in 49.8 MiB instead of 54.4 MiB, at the
/// same CPU per query (docs/benchmarks.md, "One malloc arena").
pub const MALLOC_ARENAS: i32 = 1;

/// Caps glibc's malloc arenas at [`MALLOC_ARENAS`], unless the operator has
/// set `MALLOC_ARENA_MAX` or a `glibc.malloc.arena_max` tunable, which win.
/// Call it first thing in `main`, before any thread starts. A no-op where
/// the C library is not glibc.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn limit_arenas() {
    let operator_set = std::env::var_os("MALLOC_ARENA_MAX").is_some()
        || std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc.arena_max"));
    if operator_set {
        return;
    }
    // SAFETY: mallopt only changes malloc's parameters; called before any
    // other thread exists, it races with nothing.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS);
    }
}

/// Caps the malloc arenas: nothing to do without glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn limit_arenas() {}

/// Hands memory freed after a large load back to the kernel. A manifest of
/// 10,000 services parses through ~150 MB of transient values, and an
/// initial list of 25,000 EndpointSlices through tens of MB of response
/// pages; glibc keeps freed heap mapped, so without this the process would
/// stay that large. A no-op where the C library is not glibc (musl has no
/// `malloc_trim` and returns freed memory by itself).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn release_freed_memory() {
    // SAFETY: malloc_trim only releases free heap pages; it touches no live
    // allocation and is safe to call at any time from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Hands memory freed after a large load back to the kernel: nothing to do
/// without glibc's `malloc_trim`.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_freed_memory() {}
