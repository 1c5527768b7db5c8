//! The Prometheus text exposition both processes serve on `/metrics`: one
//! rendering of their registries, and the `build_info` gauge they share.

use prometheus::{Encoder, IntGaugeVec, Opts, Registry, TextEncoder};

/// Renders registries in the Prometheus text format (the DNS server's and
/// the controller's alike), one after the other.
pub fn render(registries: &[&Registry]) -> String {
    let families: Vec<_> = registries.iter().flat_map(|r| r.gather()).collect();
    let mut out = Vec::new();
    // Encoding gathered families into a Vec cannot fail.
    let _ = TextEncoder::new().encode(&families, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// The `build_info` gauge: 1, labelled with this binary's version and git
/// commit (see [`crate::ops::build_info`]). `prefix` goes before `build_info`,
/// for a registry without one (the controller's has its own prefix, yet
/// both processes export the same `clusterset_dns_build_info`).
pub fn build_info(prefix: &str) -> IntGaugeVec {
    let gauge = IntGaugeVec::new(
        Opts::new(
            format!("{prefix}build_info"),
            "Always 1; the labels say which build is running (version, git commit).",
        ),
        &["version", "commit"],
    )
    .expect("static metric is valid");
    gauge
        .with_label_values(&[super::build_info::VERSION, super::build_info::COMMIT])
        .set(1);
    gauge
}
