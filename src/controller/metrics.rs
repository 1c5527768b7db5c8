//! The controller's Prometheus metrics. Labels are bounded: peers (a few),
//! kinds, reasons; never object names (unlike per-object gauges, which grow
//! with the clusterset).

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// Every controller metric.
#[derive(Debug, Clone)]
pub struct ControllerMetrics {
    registry: Registry,
    /// Holds `clusterset_dns_build_info`, the same name as the DNS
    /// server's, which the prefixed `registry` cannot.
    build: Registry,
    /// `(name, help, labels)` of every metric, for the docs test.
    catalog: Vec<(String, Vec<String>)>,
    /// 1 while a peer is synced and its probe succeeds, by peer.
    pub peer_up: IntGaugeVec,
    /// Unix time a peer was last seen healthy, by peer.
    pub peer_last_seen: IntGaugeVec,
    /// Unix time a peer's credential expires, by peer (absent for one that
    /// never expires).
    pub peer_credential_expiry: IntGaugeVec,
    /// Watch and probe errors reading a peer, by peer and kind.
    pub peer_sync_errors: IntCounterVec,
    /// Peers refused, by reason.
    pub peers_refused: IntCounterVec,
    /// Peer input dropped as invalid, by peer and reason.
    pub rejected: IntCounterVec,
    /// Writes refused because an object not ours holds the name, by kind
    /// and reason.
    pub refused: IntCounterVec,
    /// Writes issued, by kind and operation.
    pub writes: IntCounterVec,
    /// Writes that failed, by kind.
    pub write_errors: IntCounterVec,
    /// Warning Events dropped because too many were waiting
    /// ([`super::events`]).
    pub events_dropped: IntCounter,
    /// ServiceImports this controller keeps.
    pub imports: IntGauge,
    /// Local ServiceExports, by `Valid` reason.
    pub exports: IntGaugeVec,
    /// Imported services in conflict, by reason.
    pub conflicts: IntGaugeVec,
    /// Seconds from a change arriving to the writes it caused finishing.
    pub change_to_write: Histogram,
    /// 1 while this replica holds the leader Lease.
    pub leader: IntGauge,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl ControllerMetrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let registry = Registry::new_custom(Some("clusterset_dns_controller".into()), None)
            .expect("static prefix is valid");
        let mut catalog = Vec::new();
        let mut counter_vec = |name: &str, help: &str, labels: &[&str]| {
            catalog.push((
                format!("clusterset_dns_controller_{name}"),
                labels.iter().map(|l| l.to_string()).collect(),
            ));
            let metric = IntCounterVec::new(Opts::new(name, help), labels).expect("static metric");
            registry.register(Box::new(metric.clone())).expect("unique");
            metric
        };
        let peer_sync_errors = counter_vec(
            "peer_sync_errors_total",
            "Errors reading a peer (watch or probe), by peer and kind.",
            &["peer", "kind"],
        );
        let peers_refused = counter_vec(
            "peers_refused_total",
            "Peer Secrets refused (invalid kubeconfig, unreadable identity, duplicate or own id, other clusterset, id not a DNS label), by reason.",
            &["reason"],
        );
        let rejected = counter_vec(
            "peer_objects_rejected_total",
            "Peer objects dropped as untrusted input, by peer and reason.",
            &["peer", "reason"],
        );
        let refused = counter_vec(
            "refused_total",
            "Writes refused because an object that is not ours holds the name (never taken over), by kind and reason.",
            &["kind", "reason"],
        );
        let writes = counter_vec(
            "writes_total",
            "Writes to the local apiserver, by kind and operation (apply, delete).",
            &["kind", "op"],
        );
        let write_errors = counter_vec(
            "write_errors_total",
            "Writes that failed (retried), by kind.",
            &["kind"],
        );
        catalog.push((
            "clusterset_dns_controller_events_dropped_total".into(),
            Vec::new(),
        ));
        let events_dropped = IntCounter::new(
            "events_dropped_total",
            "Warning Events dropped because too many were waiting to be published (the refusals are still counted and listed by /explain).",
        )
        .expect("static metric");
        registry
            .register(Box::new(events_dropped.clone()))
            .expect("unique");
        let mut gauge_vec = |name: &str, help: &str, labels: &[&str]| {
            catalog.push((
                format!("clusterset_dns_controller_{name}"),
                labels.iter().map(|l| l.to_string()).collect(),
            ));
            let metric = IntGaugeVec::new(Opts::new(name, help), labels).expect("static metric");
            registry.register(Box::new(metric.clone())).expect("unique");
            metric
        };
        let peer_up = gauge_vec(
            "peer_up",
            "1 while a peer is synced and answers its probe, else 0, by peer.",
            &["peer"],
        );
        let peer_last_seen = gauge_vec(
            "peer_last_seen_timestamp_seconds",
            "Unix time a peer was last seen healthy, by peer.",
            &["peer"],
        );
        let peer_credential_expiry = gauge_vec(
            "peer_credential_expiry_timestamp_seconds",
            "Unix time a peer's credential (the token in its Secret) expires, by peer: its cluster id as the Secret records it, else the Secret's name. Absent for a credential that never expires.",
            &["peer"],
        );
        let exports = gauge_vec(
            "exports",
            "Local ServiceExports, by Valid reason.",
            &["reason"],
        );
        let conflicts = gauge_vec(
            "conflicts",
            "Imported services with a Conflict, by reason (one per reason raised).",
            &["reason"],
        );
        let mut gauge = |name: &str, help: &str| {
            catalog.push((format!("clusterset_dns_controller_{name}"), Vec::new()));
            let metric = IntGauge::new(name, help).expect("static metric");
            registry.register(Box::new(metric.clone())).expect("unique");
            metric
        };
        let imports = gauge("service_imports", "ServiceImports this controller keeps.");
        let leader = gauge("leader", "1 while this replica holds the leader Lease.");
        catalog.push((
            "clusterset_dns_controller_change_to_write_seconds".into(),
            Vec::new(),
        ));
        let change_to_write = Histogram::with_opts(
            HistogramOpts::new(
                "change_to_write_seconds",
                "Seconds from a change arriving (watch event) to the writes it caused being done.",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
        )
        .expect("static metric");
        registry
            .register(Box::new(change_to_write.clone()))
            .expect("unique");
        // Unprefixed: the build-info metric is named alike in both processes.
        let build = Registry::new();
        build
            .register(Box::new(crate::ops::exposition::build_info(
                "clusterset_dns_",
            )))
            .expect("unique");
        catalog.push((
            "clusterset_dns_build_info".into(),
            vec!["version".into(), "commit".into()],
        ));
        Self {
            registry,
            build,
            catalog,
            peer_up,
            peer_last_seen,
            peer_credential_expiry,
            peer_sync_errors,
            peers_refused,
            rejected,
            refused,
            writes,
            write_errors,
            events_dropped,
            imports,
            exports,
            conflicts,
            change_to_write,
            leader,
        }
    }

    /// `(name, labels)` of every metric.
    pub fn catalog(&self) -> &[(String, Vec<String>)] {
        &self.catalog
    }

    /// Renders all metrics in the Prometheus text format.
    pub fn render(&self) -> String {
        crate::ops::exposition::render(&[&self.registry, &self.build])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/controller.md documents exactly the registered metrics, with
    /// their labels.
    #[test]
    fn docs_list_every_metric_and_only_those() {
        let docs =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/controller.md"))
                .expect("docs/controller.md");
        let metrics = ControllerMetrics::new();
        let documented: std::collections::BTreeMap<String, Vec<String>> = docs
            .lines()
            .filter_map(|line| {
                let rest = line.strip_prefix("| `clusterset_dns_")?;
                (rest.starts_with("controller_") || rest.starts_with("build_info`")).then_some(rest)
            })
            .map(|rest| {
                let mut cells = rest.split('|');
                let name = cells
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .trim_end_matches('`');
                let labels = cells
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(|l| l.trim().to_owned())
                    .filter(|l| !l.is_empty())
                    .collect();
                (format!("clusterset_dns_{name}"), labels)
            })
            .collect();
        let registered: std::collections::BTreeMap<String, Vec<String>> =
            metrics.catalog().iter().cloned().collect();
        assert_eq!(registered, documented);
        // Every metric renders (labelled ones once a value is set).
        metrics.peer_up.with_label_values(&["b"]).set(1);
        assert!(
            metrics
                .render()
                .contains("clusterset_dns_controller_peer_up{peer=\"b\"} 1")
        );
        let build_info = format!(
            "clusterset_dns_build_info{{commit=\"{}\",version=\"{}\"}} 1",
            crate::ops::build_info::COMMIT,
            crate::ops::build_info::VERSION
        );
        assert!(metrics.render().lines().any(|l| l == build_info));
    }
}
