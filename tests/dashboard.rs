//! `deploy/grafana/clusterset-dns.json` queries only metrics the binaries
//! export: every PromQL expression is tokenized, the metric names in it are
//! picked out (not functions, keywords, label names, durations or strings),
//! and each must be a series the DNS server's `/metrics` (a running server)
//! or the controller's registry renders, a histogram's `_bucket`, `_sum` or
//! `_count` included. The dashboard also has to show what it is for.

mod dns_server;
mod support;

use std::collections::BTreeSet;

use clusterset_dns::controller::metrics::ControllerMetrics;
use dns_server::{EXAMPLE, Options, TestServer};

const DASHBOARD: &str = "deploy/grafana/clusterset-dns.json";

/// Words that are PromQL syntax rather than metric names when not followed
/// by `(`.
const KEYWORDS: [&str; 13] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
];

/// Aggregation operators, which may take `by (...)` or `without (...)`
/// before their `(`.
const AGGREGATIONS: [&str; 14] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// Modifiers whose parenthesised list holds label names.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Grafana's variables, replaced by what Prometheus would see.
fn substitute_grafana_variables(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("$__interval", "1m")
        .replace("$__range", "1h")
}

/// The metric names an expression selects.
fn metric_names(expr: &str) -> Result<BTreeSet<String>, String> {
    let chars: Vec<char> = expr.chars().collect();
    // A Grafana variable left over (a regex's `$` anchor is fine).
    if chars
        .windows(2)
        .any(|w| w[0] == '$' && (w[1].is_ascii_alphabetic() || w[1] == '_' || w[1] == '{'))
    {
        return Err(format!("unknown Grafana variable in {expr}"));
    }
    let mut names = BTreeSet::new();
    let mut i = 0;
    // The identifier just before a `(` that opens a label list.
    let mut previous_word = String::new();
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            // A string: skip to its closing quote (backslash escapes).
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            if i >= chars.len() {
                return Err(format!("unterminated string in {expr}"));
            }
            i += 1;
        } else if c == '{' || c == '[' {
            // Label matchers or a range/subquery duration: no metric names.
            let close = if c == '{' { '}' } else { ']' };
            while i < chars.len() && chars[i] != close {
                if chars[i] == '"' {
                    i += 1;
                    while i < chars.len() && chars[i] != '"' {
                        i += if chars[i] == '\\' { 2 } else { 1 };
                    }
                }
                i += 1;
            }
            if i >= chars.len() {
                return Err(format!("unclosed {c} in {expr}"));
            }
            i += 1;
        } else if c == '(' && LABEL_LISTS.contains(&previous_word.as_str()) {
            let close = chars[i..]
                .iter()
                .position(|&c| c == ')')
                .ok_or_else(|| format!("unclosed label list in {expr}"))?;
            i += close + 1;
            previous_word.clear();
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            // A number or a duration (5m, 1e3, 0.99).
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            previous_word.clear();
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let rest: String = chars[i..].iter().collect();
            let rest = rest.trim_start();
            let is_call = rest.starts_with('(')
                || (AGGREGATIONS.contains(&word.as_str())
                    && (rest.starts_with("by") || rest.starts_with("without")));
            if !is_call && !KEYWORDS.contains(&word.as_str()) {
                names.insert(word.clone());
            }
            previous_word = word;
        } else {
            if !c.is_whitespace() {
                previous_word.clear();
            }
            i += 1;
        }
    }
    Ok(names)
}

/// Series names a Prometheus text exposition can hold: from `# TYPE`
/// lines, a histogram's or summary's suffixed series included.
fn exposed_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
            continue;
        };
        names.insert(name.to_owned());
        if kind == "histogram" || kind == "summary" {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{name}{suffix}"));
            }
        }
    }
    names
}

/// Every `expr` of every panel target, with the panel's title.
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(dns_server::repo_path(DASHBOARD)).expect("read dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard is JSON");
    let mut queries = Vec::new();
    let mut panels: Vec<&serde_json::Value> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .collect();
    while let Some(panel) = panels.pop() {
        if let Some(nested) = panel["panels"].as_array() {
            panels.extend(nested);
        }
        for target in panel["targets"].as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or_default().to_owned();
            let expr = target["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("panel {title:?}: a target without expr"));
            queries.push((title, expr.to_owned()));
        }
    }
    queries
}

/// What both binaries export: the running DNS server's `/metrics` (plus its
/// labelled families that have no series yet, from its catalog) and the
/// controller's registry (catalog and rendered types).
async fn exported_names() -> BTreeSet<String> {
    let server = TestServer::from_file(EXAMPLE, Options::fast_path(true)).await;
    let scraped = support::http_ok(server.admin(), "/metrics").await;
    let mut names = exposed_names(&scraped);
    assert!(
        names.contains("clusterset_dns_responses_total")
            && names.contains("clusterset_dns_zone_publish_latency_seconds_bucket"),
        "the DNS server's /metrics looks wrong:\n{scraped}"
    );
    // Families with labels show up once they have a series; a file source
    // never counts watch errors, yet a Kubernetes one does.
    let dns = clusterset_dns::metrics::Metrics::new();
    names.extend(dns.catalog().iter().map(|(name, _, _)| name.clone()));

    let controller = ControllerMetrics::new();
    names.extend(exposed_names(&controller.render()));
    names.extend(controller.catalog().iter().map(|(name, _)| name.clone()));
    assert!(names.contains("clusterset_dns_controller_change_to_write_seconds_bucket"));
    names
}

#[tokio::test(flavor = "multi_thread")]
async fn every_dashboard_query_uses_only_exported_metrics() {
    let exported = exported_names().await;
    let queries = dashboard_queries();
    assert!(queries.len() >= 20, "only {} queries", queries.len());
    let mut used = BTreeSet::new();
    let mut problems = Vec::new();
    for (title, expr) in &queries {
        match metric_names(&substitute_grafana_variables(expr)) {
            Ok(names) if names.is_empty() => problems.push(format!("{title}: no metric in {expr}")),
            Ok(names) => {
                for name in names {
                    if !exported.contains(&name) {
                        problems.push(format!("{title}: {name} is not exported ({expr})"));
                    }
                    used.insert(name);
                }
            }
            Err(error) => problems.push(format!("{title}: {error}")),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // What the dashboard is for.
    for wanted in [
        "clusterset_dns_responses_total",
        "clusterset_dns_zone_services",
        "clusterset_dns_zone_publish_latency_seconds_bucket",
        "clusterset_dns_build_info",
        "clusterset_dns_controller_peer_up",
        "clusterset_dns_controller_conflicts",
        "clusterset_dns_controller_writes_total",
        "clusterset_dns_controller_change_to_write_seconds_bucket",
    ] {
        assert!(used.contains(wanted), "no panel shows {wanted}");
    }
    assert!(
        queries
            .iter()
            .any(|(_, e)| e.contains("by (rcode)") && e.contains("responses_total")),
        "no query by rcode"
    );
}

#[test]
fn metric_names_skip_functions_keywords_labels_and_durations() {
    let names = |expr: &str| {
        metric_names(&substitute_grafana_variables(expr))
            .unwrap()
            .into_iter()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            r#"histogram_quantile(0.99, sum by (le, job) (rate(a_seconds_bucket{kind="x",le!="+Inf"}[$__rate_interval])))"#
        ),
        ["a_seconds_bucket"]
    );
    assert_eq!(
        names("sum without (peer) (b) / on (job) group_left (version) c offset 5m > bool 1"),
        ["b", "c"]
    );
    assert_eq!(
        names(r#"time() - max by (peer) (d_ts{peer=~"a|b\"}"}) or vector(0)"#),
        ["d_ts"]
    );
    assert_eq!(names("count by (version, commit) (e:rule)"), ["e:rule"]);
    assert_eq!(names("1e3 * f[5m:1m]"), ["f"]);
    assert!(metric_names("rate(x[$job])").is_err());
    assert!(metric_names(r#"x{a="b"#).is_err());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_made_up_metric_would_be_caught() {
    let exported = exported_names().await;
    for made_up in [
        "clusterset_dns_query_latency_seconds_bucket",
        "clusterset_dns_zone_services_bucket",
        "clusterset_dns_controller_peers_up",
    ] {
        let names = metric_names(&format!("sum(rate({made_up}[5m]))")).unwrap();
        assert!(
            names.iter().any(|n| !exported.contains(n)),
            "{made_up} passed as exported"
        );
    }
}
