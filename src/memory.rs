//! Giving freed heap back to the kernel after a large load.

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
