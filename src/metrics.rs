//! Prometheus metrics: one registry for DNS answers, the index and sources.
//!
//! Per-query counters are created up front for every (transport, qtype,
//! rcode) combination and indexed by small integers, so counting a query is
//! one atomic add with no label hashing. Labels never carry names or IPs.

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use crate::ops::log_limit::{LogLimiter, NETWORK_LOG_INTERVAL};
use crate::zone::Tier;

/// Transport a query arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// UDP (either path).
    Udp,
    /// TCP.
    Tcp,
}

const TRANSPORTS: [&str; 2] = ["udp", "tcp"];
const QTYPES: [&str; 8] = ["A", "AAAA", "SRV", "TXT", "SOA", "NS", "ANY", "other"];
const RCODES: [&str; 8] = [
    "NOERROR", "NODATA", "NXDOMAIN", "REFUSED", "SERVFAIL", "FORMERR", "NOTIMP", "BADVERS",
];

/// Something the network did that the server refused, dropped or could
/// not serve. Each is counted in `clusterset_dns_network_events_total` by
/// its [`Self::reason`], and logged at most once per
/// [`NETWORK_LOG_INTERVAL`] (with the number of lines held back), since
/// anyone can send them at any rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkEvent {
    /// A malformed query, answered FORMERR.
    Malformed,
    /// A datagram or message that is not a query (QR set, or shorter than
    /// a header), dropped.
    NotAQuery,
    /// A response that could not be encoded within its size limit; a
    /// header-only error went out instead.
    EncodeFailed,
    /// A UDP receive error.
    UdpReceive,
    /// A TCP accept error (such as EMFILE); the listener backs off.
    TcpAccept,
    /// A TCP connection closed because the connection limit was reached
    /// (the oldest idle one), or refused when none was idle.
    TcpFull,
    /// An admin (HTTP) accept error, or a connection refused at its limit.
    Admin,
}

impl NetworkEvent {
    /// Every event, in label order.
    pub const ALL: [Self; 7] = [
        Self::Malformed,
        Self::NotAQuery,
        Self::EncodeFailed,
        Self::UdpReceive,
        Self::TcpAccept,
        Self::TcpFull,
        Self::Admin,
    ];

    /// The `reason` label.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::NotAQuery => "not_a_query",
            Self::EncodeFailed => "encode_failed",
            Self::UdpReceive => "udp_receive",
            Self::TcpAccept => "tcp_accept",
            Self::TcpFull => "tcp_full",
            Self::Admin => "admin",
        }
    }
}

/// What a response said, at the granularity the metrics count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// NOERROR with answers.
    Answer,
    /// NOERROR without answers.
    NoData,
    /// Any other response code.
    Code(ResponseCode),
}

/// All metrics of the process.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    /// `(name, help, labels)` of every registered metric, labelled or not.
    catalog: Vec<(String, String, Vec<String>)>,
    responses: Vec<IntCounter>,
    /// UDP responses sent with TC set.
    pub truncated: IntCounter,
    /// UDP queries answered from precompiled wire data.
    pub fast_path_hits: IntCounter,
    /// Datagrams dropped without an answer (too short, or a response).
    pub dropped: IntCounter,
    /// Batches of UDP queries a worker dropped because answering them
    /// panicked (a bug); the worker goes on with the next batch.
    pub worker_panics: IntCounter,
    /// ServiceImports in the index.
    pub imports: IntGauge,
    /// EndpointSlices in the index.
    pub slices: IntGauge,
    /// Endpoints in the index.
    pub endpoints: IntGauge,
    /// Services with at least one name in the published zone.
    pub services_served: IntGauge,
    /// Unix time of the last published zone.
    pub last_publish: IntGauge,
    /// Services rebuilt per publish.
    pub rebuilt: Histogram,
    /// Seconds from a change reaching the source to its zone being published.
    pub publish_latency: Histogram,
    /// Seconds the publish step took: index update, rebuild and swap.
    pub publish_duration: Histogram,
    /// Source reloads, by result (`ok`, `error`).
    pub reloads: IntCounterVec,
    /// 1 when the current source is failing and answers come from the last good index.
    pub source_stale: IntGauge,
    /// Objects from the API that could not be projected, by kind.
    pub invalid_objects: IntCounterVec,
    /// Watch errors, by resource.
    pub watch_errors: IntCounterVec,
    /// Watches the apiserver ended with 410 Gone, by resource.
    pub watch_expired: IntCounterVec,
    /// Watches restarted (relisted) because the apiserver answered again.
    pub watch_restarts: IntCounter,
    /// Liveness probes the apiserver left unanswered.
    pub apiserver_probe_timeouts: IntCounter,
    /// Open DNS TCP connections.
    pub tcp_connections: IntGauge,
    /// UDP queries left unanswered by response rate limiting.
    pub rrl_dropped: IntCounter,
    /// UDP queries response rate limiting answered truncated (slipped).
    pub rrl_slipped: IntCounter,
    /// Answers of local-first imports and of the serving fallback, by
    /// [`Tier`] (in [`Tier::ALL`] order).
    local_first_answers: Vec<IntCounter>,
    network_events: Vec<IntCounter>,
    network_logs: std::sync::Arc<[LogLimiter]>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let registry = Registry::new_custom(Some("clusterset_dns".into()), None)
            .expect("static prefix is valid");
        let vec = IntCounterVec::new(
            Opts::new("responses_total", "DNS responses sent, by transport, query type and response code (NODATA = NOERROR without answers)."),
            &["transport", "qtype", "rcode"],
        )
        .expect("static metric is valid");
        let mut responses = Vec::new();
        for t in TRANSPORTS {
            for q in QTYPES {
                for r in RCODES {
                    responses.push(vec.with_label_values(&[t, q, r]));
                }
            }
        }
        let events = IntCounterVec::new(
            Opts::new(
                "network_events_total",
                "Network input the server refused, dropped or could not serve, by reason; \
                 each reason is logged at most once a second.",
            ),
            &["reason"],
        )
        .expect("static metric is valid");
        let network_events = NetworkEvent::ALL
            .iter()
            .map(|e| events.with_label_values(&[e.reason()]))
            .collect();
        let network_logs = NetworkEvent::ALL
            .iter()
            .map(|_| LogLimiter::new(NETWORK_LOG_INTERVAL))
            .collect();
        let rrl = IntCounterVec::new(
            Opts::new(
                "rrl_limited_total",
                "UDP queries over the response rate limit of their client prefix, by action: \
                 dropped (no response) or slipped (a truncated response sent instead).",
            ),
            &["action"],
        )
        .expect("static metric is valid");
        let tiers = IntCounterVec::new(
            Opts::new(
                "local_first_answers_total",
                "Answers with records taken by the local-first rule or the serving fallback, by \
                 tier: local (this cluster's ready endpoints), all (every cluster's, this one \
                 having none ready), local_serving and all_serving (terminating but serving \
                 endpoints, none being ready anywhere; serve_terminating on).",
            ),
            &["tier"],
        )
        .expect("static metric is valid");
        let local_first_answers = Tier::ALL
            .iter()
            .map(|tier| tiers.with_label_values(&[tier.label()]))
            .collect();
        let counter =
            |name: &str, help: &str| IntCounter::new(name, help).expect("static metric is valid");
        let gauge =
            |name: &str, help: &str| IntGauge::new(name, help).expect("static metric is valid");
        let mut metrics = Self {
            catalog: Vec::new(),
            truncated: counter("truncated_total", "UDP responses sent with the TC bit set."),
            fast_path_hits: counter(
                "udp_fast_path_hits_total",
                "UDP queries answered from precompiled wire data.",
            ),
            dropped: counter(
                "dropped_total",
                "Datagrams dropped without a response (shorter than a header, or not a query).",
            ),
            worker_panics: counter(
                "udp_worker_panics_total",
                "Batches of UDP queries dropped because answering them panicked (a bug: \
                 please report it); the worker carried on with the next batch.",
            ),
            imports: gauge("index_service_imports", "ServiceImports in the index."),
            slices: gauge(
                "index_endpoint_slices",
                "Imported EndpointSlices in the index.",
            ),
            endpoints: gauge(
                "index_endpoints",
                "Ready endpoints across imported EndpointSlices (not-ready ones are dropped at ingest).",
            ),
            services_served: gauge(
                "zone_services",
                "Services with at least one name in the published zone.",
            ),
            last_publish: gauge(
                "zone_last_publish_timestamp_seconds",
                "Unix time the zone was last published.",
            ),
            rebuilt: Histogram::with_opts(
                HistogramOpts::new(
                    "zone_services_rebuilt",
                    "Services rebuilt per published zone.",
                )
                .buckets(vec![1.0, 2.0, 5.0, 10.0, 100.0, 1000.0, 10000.0, 100000.0]),
            )
            .expect("static metric is valid"),
            publish_latency: Histogram::with_opts(
                HistogramOpts::new(
                    "zone_publish_latency_seconds",
                    "Seconds from a change reaching the source (a watch event received, a \
                     changed manifest seen) to the zone holding it being published; the first \
                     publish is not counted.",
                )
                .buckets(vec![
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0,
                ]),
            )
            .expect("static metric is valid"),
            publish_duration: Histogram::with_opts(
                HistogramOpts::new(
                    "zone_publish_duration_seconds",
                    "Seconds one publish took: bringing the index up to the change (the file \
                     source: the whole manifest's diff against the index), rebuilding the changed \
                     services and swapping the new zone in; no file read or parse, no wait. The \
                     first publish is not counted.",
                )
                .buckets(vec![
                    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                ]),
            )
            .expect("static metric is valid"),
            reloads: IntCounterVec::new(
                Opts::new("source_reloads_total", "Source loads, by result."),
                &["result"],
            )
            .expect("static metric is valid"),
            source_stale: gauge(
                "source_stale",
                "1 while the source is failing and answers come from the last good index.",
            ),
            invalid_objects: IntCounterVec::new(
                Opts::new(
                    "invalid_objects_total",
                    "Objects from the API that were ignored as invalid, by kind.",
                ),
                &["kind"],
            )
            .expect("static metric is valid"),
            watch_errors: IntCounterVec::new(
                Opts::new("watch_errors_total", "Watch or list errors, by resource."),
                &["resource"],
            )
            .expect("static metric is valid"),
            watch_expired: IntCounterVec::new(
                Opts::new(
                    "watch_expired_total",
                    "Watches the apiserver ended with 410 Gone (resource version too old), by \
                     resource; each is followed by a relist. Not counted in watch_errors_total.",
                ),
                &["resource"],
            )
            .expect("static metric is valid"),
            watch_restarts: counter(
                "watch_restarts_total",
                "Times the watches were restarted with a full relist because the apiserver \
                 answered again after watch failures.",
            ),
            apiserver_probe_timeouts: counter(
                "apiserver_probe_timeouts_total",
                "Liveness probes (a one-object list) the apiserver left unanswered within half \
                 of apiserver_timeout; the first of an outage marks the source stale.",
            ),
            tcp_connections: gauge("tcp_connections", "Open DNS TCP connections."),
            rrl_dropped: rrl.with_label_values(&["dropped"]),
            rrl_slipped: rrl.with_label_values(&["slipped"]),
            local_first_answers,
            network_events,
            network_logs,
            responses,
            registry,
        };
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(vec),
            Box::new(metrics.truncated.clone()),
            Box::new(metrics.fast_path_hits.clone()),
            Box::new(metrics.dropped.clone()),
            Box::new(metrics.worker_panics.clone()),
            Box::new(metrics.imports.clone()),
            Box::new(metrics.slices.clone()),
            Box::new(metrics.endpoints.clone()),
            Box::new(metrics.services_served.clone()),
            Box::new(metrics.last_publish.clone()),
            Box::new(metrics.rebuilt.clone()),
            Box::new(metrics.publish_latency.clone()),
            Box::new(metrics.publish_duration.clone()),
            Box::new(metrics.reloads.clone()),
            Box::new(metrics.source_stale.clone()),
            Box::new(metrics.invalid_objects.clone()),
            Box::new(metrics.watch_errors.clone()),
            Box::new(metrics.watch_expired.clone()),
            Box::new(metrics.watch_restarts.clone()),
            Box::new(metrics.apiserver_probe_timeouts.clone()),
            Box::new(metrics.tcp_connections.clone()),
            Box::new(events),
            Box::new(rrl),
            Box::new(tiers),
            Box::new(crate::ops::exposition::build_info("")),
        ];
        for c in collectors {
            for desc in c.desc() {
                metrics.catalog.push((
                    format!("clusterset_dns_{}", desc.fq_name),
                    desc.help.clone(),
                    desc.variable_labels.clone(),
                ));
            }
            metrics
                .registry
                .register(c)
                .expect("metric names are unique");
        }
        metrics
    }

    /// `(name, help, label names)` of every metric, including labelled
    /// families that have no series yet (which `/metrics` does not show).
    pub fn catalog(&self) -> &[(String, String, Vec<String>)] {
        &self.catalog
    }

    /// Counts one response.
    pub fn count_response(&self, transport: Transport, qtype: RecordType, outcome: Outcome) {
        let t = transport as usize;
        let q = match qtype {
            RecordType::A => 0,
            RecordType::AAAA => 1,
            RecordType::SRV => 2,
            RecordType::TXT => 3,
            RecordType::SOA => 4,
            RecordType::NS => 5,
            RecordType::ANY => 6,
            _ => 7,
        };
        let r = match outcome {
            Outcome::Answer => 0,
            Outcome::NoData => 1,
            Outcome::Code(ResponseCode::NXDomain) => 2,
            Outcome::Code(ResponseCode::Refused) => 3,
            Outcome::Code(ResponseCode::FormErr) => 5,
            Outcome::Code(ResponseCode::NotImp) => 6,
            Outcome::Code(ResponseCode::BADVERS) => 7,
            Outcome::Code(ResponseCode::NoError) => 0,
            Outcome::Code(_) => 4,
        };
        self.responses[(t * QTYPES.len() + q) * RCODES.len() + r].inc();
    }

    /// Counts one answer sent with the records of `tier` (one relaxed
    /// atomic add; only answers that carry a tier get here).
    #[inline]
    pub fn count_tier(&self, tier: Tier) {
        self.local_first_answers[tier as usize].inc();
    }

    /// Counts a [`NetworkEvent`]; `Some(suppressed)` when its log line is
    /// due (with the number of lines held back since the last one), `None`
    /// when the caller must stay silent.
    pub fn network_event(&self, event: NetworkEvent) -> Option<u64> {
        let i = event as usize;
        self.network_events[i].inc();
        self.network_logs[i].allow()
    }

    /// Records a published zone: index sizes, services served and rebuilt,
    /// and the publish time.
    pub fn record_publish(
        &self,
        index: &crate::index::Index,
        zone: &crate::zone::Zone,
        rebuilt: usize,
    ) {
        self.imports.set(index.import_count() as i64);
        self.slices.set(index.slice_count() as i64);
        self.endpoints.set(index.endpoint_count() as i64);
        self.services_served.set(zone.service_count() as i64);
        self.rebuilt.observe(rebuilt as f64);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.last_publish.set(now as i64);
    }

    /// Renders all metrics in the Prometheus text format.
    pub fn render(&self) -> String {
        crate::ops::exposition::render(&[&self.registry])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/metrics.md documents exactly the registered metrics.
    #[test]
    fn docs_list_every_metric_and_only_those() {
        let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md"))
            .expect("docs/metrics.md");
        let metrics = Metrics::new();
        let registered: std::collections::BTreeSet<String> = metrics
            .catalog()
            .iter()
            .map(|(name, _, _)| name.clone())
            .collect();
        // Table rows start with the metric name in backticks.
        let documented: std::collections::BTreeSet<String> = docs
            .lines()
            .filter_map(|line| line.strip_prefix("| `clusterset_dns_"))
            .filter_map(|rest| rest.split('`').next())
            .map(|rest| format!("clusterset_dns_{rest}"))
            .collect();
        assert_eq!(registered, documented, "registered vs documented metrics");
        for (name, _, labels) in metrics.catalog() {
            let row = docs
                .lines()
                .find(|l| l.starts_with(&format!("| `{name}`")))
                .expect("documented");
            for label in labels {
                assert!(
                    row.contains(&format!("`{label}`")),
                    "{name}: label {label} not documented"
                );
            }
        }
    }

    #[test]
    fn build_info_is_one_with_version_and_commit() {
        let text = Metrics::new().render();
        let line = format!(
            "clusterset_dns_build_info{{commit=\"{}\",version=\"{}\"}} 1",
            crate::ops::build_info::COMMIT,
            crate::ops::build_info::VERSION
        );
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    }

    #[test]
    fn responses_are_counted_by_transport_type_and_code() {
        let m = Metrics::new();
        m.count_response(Transport::Tcp, RecordType::SRV, Outcome::NoData);
        m.count_response(
            Transport::Udp,
            RecordType::MX,
            Outcome::Code(ResponseCode::NXDomain),
        );
        let text = m.render();
        assert!(
            text.contains(
                r#"clusterset_dns_responses_total{qtype="SRV",rcode="NODATA",transport="tcp"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"clusterset_dns_responses_total{qtype="other",rcode="NXDOMAIN",transport="udp"} 1"#), "{text}");
    }
}
