//! What this binary was built from: version, git commit, target triple and
//! rustc version, recorded by `build.rs`. Shown by `clusterset-dns version`
//! and exported as the `clusterset_dns_build_info` metric.

/// The crate version (`Cargo.toml`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The full git commit the binary was built from; `unknown` when built
/// outside a git checkout without `CLUSTERSET_DNS_GIT_COMMIT`.
pub const COMMIT: &str = env!("CLUSTERSET_DNS_BUILD_COMMIT");

/// The target triple (`x86_64-unknown-linux-gnu`).
pub const TARGET: &str = env!("CLUSTERSET_DNS_BUILD_TARGET");

/// `rustc --version` of the compiler that built the binary.
pub const RUSTC: &str = env!("CLUSTERSET_DNS_BUILD_RUSTC");

/// The `version` command's output: one `key: value` line per fact, the
/// first being `clusterset-dns <version>`.
pub fn describe() -> String {
    format!("clusterset-dns {VERSION}\ncommit: {COMMIT}\ntarget: {TARGET}\nrustc: {RUSTC}\n")
}
