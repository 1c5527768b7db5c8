use super::document::{DocumentReader, StreamStop, split_documents};
use super::*;

const GOOD: &str = r#"
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {name: web, namespace: prod}
spec:
  type: ClusterSetIP
  ips: [10.42.0.1, "fd00::1"]
  ports: [{name: http, protocol: TCP, port: 80}]
---
apiVersion: v1
kind: List
items:
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: web-a
    namespace: prod
    labels:
      multicluster.kubernetes.io/service-name: web
      multicluster.kubernetes.io/source-cluster: cluster-a
  addressType: IPv4
  endpoints: [{addresses: [10.1.0.1]}]
- apiVersion: multicluster.x-k8s.io/v1alpha1
  kind: ServiceExport
  metadata: {name: web, namespace: prod}
"#;

#[test]
fn reads_imports_slices_and_lists() {
    let m = parse(GOOD).unwrap();
    assert_eq!(m.imports.len(), 1);
    assert_eq!(m.slices.len(), 1);
    assert_eq!(&*m.slices[0].1.cluster, "cluster-a");
    assert_eq!(m.skipped.len(), 1, "{:?}", m.skipped);
}

/// Namespace documents (what makes a manifest applicable with kubectl
/// on a cluster without them) are neither served nor reported as
/// skipped, also inside a List; `check` then has nothing to complain about.
#[test]
fn namespaces_are_accepted_without_a_skip() {
    let namespaces = "apiVersion: v1\nkind: Namespace\nmetadata: {name: prod}\n---\n\
            apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Namespace, metadata: {name: other}}\n---\n";
    let text = format!("{namespaces}{GOOD}");
    let m = parse(&text).unwrap();
    assert_eq!((m.imports.len(), m.slices.len()), (1, 1));
    assert_eq!(
        m.skipped.len(),
        1,
        "only the ServiceExport: {:?}",
        m.skipped
    );
    let report = check(&text);
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!(report.manifest.skipped, m.skipped);
    // Only the core v1 kind: a look-alike of another group is skipped.
    let other = text.replacen(
        "apiVersion: v1\nkind: Namespace",
        "apiVersion: example.com/v1\nkind: Namespace",
        1,
    );
    assert_eq!(parse(&other).unwrap().skipped.len(), 2);
}

#[test]
fn a_bad_ip_names_document_object_and_field() {
    let text = GOOD.replace("fd00::1", "fd00::zz");
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.contains("document 1"), "{err}");
    assert!(err.contains("ServiceImport prod/web"), "{err}");
    assert!(err.contains("spec.ips[1]"), "{err}");
}

#[test]
fn a_wrongly_typed_field_names_its_path() {
    let text = GOOD.replace("port: 80", "port: eighty");
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.contains("spec.ports[0].port"), "{err}");
}

#[test]
fn a_slice_without_source_cluster_is_rejected_in_its_list_item() {
    let text = GOOD.replace(
        "      multicluster.kubernetes.io/source-cluster: cluster-a\n",
        "",
    );
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.contains("document 2 item 0"), "{err}");
    assert!(err.contains("source-cluster"), "{err}");
}

#[test]
fn an_unknown_field_names_document_object_and_path() {
    let text = GOOD.replace("ips: [", "ip: [");
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.contains("document 1"), "{err}");
    assert!(err.contains("ServiceImport prod/web"), "{err}");
    assert!(err.contains("unknown field \"spec.ip\""), "{err}");
    let text = GOOD.replace(
        "endpoints: [{addresses:",
        "endpoints: [{adresses: [x], addresses:",
    );
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.contains("document 2 item 0"), "{err}");
    assert!(
        err.contains("unknown field \"endpoints[0].adresses\""),
        "{err}"
    );
    let text = GOOD.replace(
        "metadata: {name: web, namespace: prod}",
        "metadata: {name: web, namespace: prod, lables: {a: b}}",
    );
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.contains("unknown field \"metadata.lables\""), "{err}");
    // Empty values of known optional fields are not unknown.
    let text = GOOD.replace(
        "ports: [{name: http",
        "ipFamilies: []\n  sessionAffinity: null\n  ports: [{name: http",
    );
    parse(&text).unwrap();
    // Kinds DNS does not read are skipped, not checked.
    parse(&GOOD.replace("kind: ServiceExport", "kind: ServiceExport\n  bogus: 1")).unwrap();
}

#[test]
fn crd_limits_name_the_field() {
    let text = GOOD.replace(
        r#"ips: [10.42.0.1, "fd00::1"]"#,
        "ips: [10.42.0.1, 10.42.0.2]",
    );
    let err = parse(&text).unwrap_err().to_string();
    assert!(
        err.contains("ServiceImport prod/web: spec.ips: at most one address per IP family"),
        "{err}"
    );
    let text = GOOD.replace(
        r#"ips: [10.42.0.1, "fd00::1"]"#,
        r#"ips: [10.42.0.1, "fd00::1", 10.42.0.2]"#,
    );
    let err = parse(&text).unwrap_err().to_string();
    assert!(
        err.contains("spec.ips: 3 items, at most 2 allowed"),
        "{err}"
    );
    let text = GOOD.replace(
        "endpoints: [{addresses: [10.1.0.1]}]",
        "endpoints: [{addresses: []}]",
    );
    let err = parse(&text).unwrap_err().to_string();
    assert!(
        err.contains("endpoints[0].addresses: at least one address"),
        "{err}"
    );
}

#[test]
fn check_reports_every_rejected_document() {
    let doc = GOOD.split("---").next().unwrap();
    let text = format!(
        "{}---{}---\nkind: [unclosed\n---{}---{doc}",
        doc.replace("ips: [", "ip: ["),
        doc.replace("name: web", "name: ok"),
        doc.replace("name: web", "name: other")
            .replace("port: 80", "port: x"),
    );
    let report = check(&text);
    let rejected: Vec<String> = report.rejected.iter().map(ToString::to_string).collect();
    assert_eq!(rejected.len(), 3, "{rejected:#?}");
    assert!(
        rejected[0].starts_with("document 1:") && rejected[0].contains("spec.ip"),
        "{rejected:#?}"
    );
    assert!(rejected[1].contains("document 3"), "{rejected:#?}");
    assert!(rejected[2].starts_with("document 4:"), "{rejected:#?}");
    // Document 5 is served: document 1, the same service, was rejected.
    let served: Vec<_> = report
        .manifest
        .imports
        .iter()
        .map(|i| &*i.service.name)
        .collect();
    assert_eq!(served, ["ok", "web"]);
    // Duplicates are reported too, and the good manifest has no problem.
    let report = check(&format!("{doc}---{doc}"));
    assert_eq!(report.rejected.len(), 1);
    assert!(report.rejected[0].to_string().contains("duplicate"));
    assert!(check(GOOD).rejected.is_empty());
}

#[test]
fn broken_yaml_is_an_error() {
    assert!(matches!(
        parse("kind: [unclosed"),
        Err(ManifestError::Yaml(_))
    ));
}

#[test]
fn duplicate_imports_are_rejected() {
    let doc = GOOD.split("---").next().unwrap();
    let err = parse(&format!("{doc}---{doc}")).unwrap_err().to_string();
    assert!(err.contains("duplicate"), "{err}");
}

#[test]
fn yaml_1_1_booleans_and_numbers_in_string_fields_stay_strings() {
    let text = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: s\n  namespace: no\n  labels:\n    multicluster.kubernetes.io/service-name: web\n    multicluster.kubernetes.io/source-cluster: on\n    app.kubernetes.io/version: 1.2\naddressType: IPv4\nendpoints: [{addresses: [10.0.0.1], hostname: 7}]\n";
    let m = parse(text).unwrap();
    let (key, slice) = &m.slices[0];
    assert_eq!(&*key.namespace, "no");
    assert_eq!(&*slice.cluster, "on");
    assert_eq!(slice.endpoints.iter().next().unwrap().hostname(), Some("7"));
}

#[test]
fn manifests_larger_than_the_yaml_parser_defaults_load() {
    // serde-saphyr stops at 1,024 documents by default.
    let mut text = String::new();
    for i in 0..3000 {
        text.push_str(&format!(
                "---\napiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceImport\nmetadata: {{name: s{i}, namespace: n}}\nspec: {{type: Headless, ports: []}}\n"
            ));
    }
    assert_eq!(parse(&text).unwrap().imports.len(), 3000);
}

fn texts(text: &str) -> Vec<(usize, usize, &str)> {
    split_documents(text)
        .expect("no directives")
        .into_iter()
        .map(|p| match p.text {
            std::borrow::Cow::Borrowed(text) => (p.number, p.first_line, text),
            std::borrow::Cow::Owned(_) => unreachable!("a stream held whole is borrowed"),
        })
        .collect()
}

#[test]
fn documents_split_at_markers_only() {
    assert_eq!(texts("a: 1\n"), [(1, 1, "a: 1\n")]);
    // A leading `---` opens the first document; comments before it are not one.
    assert_eq!(texts("# c\n---\na: 1\n"), [(1, 2, "\na: 1\n")]);
    assert_eq!(
        texts("a: 1\n---\nb: 2\n--- {c: 3}\n"),
        [(1, 1, "a: 1\n"), (2, 2, "\nb: 2\n"), (3, 4, " {c: 3}\n")]
    );
    // `----` and indented or quoted dashes are content, not markers.
    assert_eq!(
        texts("a: |\n  ---\nb: \"---\"\n----: x\n"),
        [(1, 1, "a: |\n  ---\nb: \"---\"\n----: x\n")]
    );
    // `...` ends a document; only content after it makes another.
    assert_eq!(
        texts("a: 1\n...\n# c\n---\nb: 2\n"),
        [(1, 1, "a: 1\n"), (2, 4, "\nb: 2\n")]
    );
    assert!(split_documents("%YAML 1.2\n---\na: 1\n").is_none());
    // Also behind a byte order mark.
    assert!(split_documents("\u{feff}%YAML 1.2\n---\na: 1\n").is_none());
}

/// The documents of `text` read a line at a time, with their numbers and
/// first lines; `None` at directives.
fn read_texts(text: &str) -> Option<Vec<(usize, usize, String)>> {
    // One byte at a time: a document never arrives in one read.
    let reader = std::io::BufReader::with_capacity(1, text.as_bytes());
    let mut pieces = Vec::new();
    for piece in DocumentReader::new(reader) {
        match piece {
            Ok(p) => pieces.push((p.number, p.first_line, p.text.into_owned())),
            Err(StreamStop::Directives) => return None,
            Err(StreamStop::Read(error)) => panic!("{error}"),
        }
    }
    Some(pieces)
}

#[test]
fn a_stream_read_a_line_at_a_time_splits_as_one_held_whole() {
    let streams = [
        "a: 1\n",
        "a: 1",
        "",
        "# only a comment\n",
        "# c\n---\na: 1\n",
        "a: 1\n---\nb: 2\n--- {c: 3}\n",
        "a: |\n  ---\nb: \"---\"\n----: x\n",
        "a: 1\n...\n# c\n---\nb: 2\n",
        "a: 1\n...\n",
        "---\n---\n---\n",
        "a: 1\r\n---\r\nb: 2\r\n",
        "\u{feff}---\na: 1\n",
        "%YAML 1.2\n---\na: 1\n",
        "a: 1\n---\n%TAG ! x\n---\nb: 2\n",
        "\u{feff}%YAML 1.2\n---\na: 1\n",
        GOOD,
    ];
    for text in streams {
        let whole = split_documents(text).map(|pieces| {
            pieces
                .into_iter()
                .map(|p| (p.number, p.first_line, p.text.into_owned()))
                .collect::<Vec<_>>()
        });
        assert_eq!(read_texts(text), whole, "{text:?}");
    }
}

/// A document that is not an MCS object.
const OTHER: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: prod}\n";

/// `GOOD` and the edits a reload meets: a document inserted in front
/// (every number shifts), then one object changed, then another.
fn edited_manifests() -> Vec<String> {
    vec![
        GOOD.to_string(),
        format!("{OTHER}---{GOOD}"),
        GOOD.replace("10.1.0.1", "10.1.0.2"),
        GOOD.replace("port: 80", "port: 8080"),
    ]
}

#[test]
fn a_stream_parsed_a_document_at_a_time_updates_as_one_held_whole() {
    let mut variants = edited_manifests();
    variants.push(format!(
        "{OTHER}---\n{}",
        OTHER.replace("name: c", "name: d")
    ));
    variants.push(GOOD.to_string());
    let (mut streamed, mut held) = (Parser::default(), Parser::default());
    for text in &variants {
        let from_stream = streamed.parse_update_from(text.as_bytes()).unwrap();
        let from_text = held.parse_update(text).unwrap();
        assert_eq!(
            format!("{from_stream:?}"),
            format!("{from_text:?}"),
            "{text}"
        );
    }
    // Errors: a syntax error is placed in its document; an invalid object
    // and directives are reported as a whole parse reports them.
    let broken = format!("{GOOD}---\nkind: [unclosed\n");
    let Err(StreamError::Manifest(ManifestError::Yaml(message))) =
        streamed.parse_update_from(broken.as_bytes())
    else {
        panic!("a syntax error");
    };
    assert!(
        message.starts_with("document 3: line 26 and after: "),
        "{message}"
    );
    let invalid = GOOD.replace("port: 80", "port: x");
    let (Err(StreamError::Manifest(from_stream)), Err(from_text)) = (
        streamed.parse_update_from(invalid.as_bytes()),
        held.parse_update(&invalid),
    ) else {
        panic!("an invalid object");
    };
    assert_eq!(from_stream.to_string(), from_text.to_string());
    assert!(matches!(
        streamed.parse_update_from(format!("%YAML 1.2\n---{GOOD}").as_bytes()),
        Err(StreamError::Stopped(StreamStop::Directives))
    ));
    // A failure changed nothing: the next update is the same delta.
    let next = GOOD.replace("10.1.0.1", "10.1.0.3");
    assert_eq!(
        format!("{:?}", streamed.parse_update_from(next.as_bytes()).unwrap()),
        format!("{:?}", held.parse_update(&next).unwrap())
    );
}

#[test]
fn empty_documents_count_in_numbering() {
    let doc = GOOD.split("---").next().unwrap();
    let bad = doc.replace("port: 80", "port: x");
    let err = parse(&format!("{doc}---\n---\n{bad}"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("document 3"), "{err}");
}

#[test]
fn directives_parse_whole() {
    let text = format!("%YAML 1.2\n---\n{}", GOOD.trim_start());
    let m = parse(&text).unwrap();
    assert_eq!((m.imports.len(), m.slices.len()), (1, 1));
    // A byte order mark (as some Windows editors save) changes nothing.
    let m = parse(&format!("\u{feff}{text}")).unwrap();
    assert_eq!((m.imports.len(), m.slices.len()), (1, 1));
    let m = parse(&format!("\u{feff}---\n{}", GOOD.trim_start())).unwrap();
    assert_eq!((m.imports.len(), m.slices.len()), (1, 1));
}

#[test]
fn a_syntax_error_names_its_document_and_line() {
    let text = format!("{GOOD}---\nkind: [unclosed\n");
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.contains("document 3: error: line 27 column 7"), "{err}");
}

#[test]
fn a_warm_parser_gives_what_a_cold_parse_gives() {
    let mut variants = edited_manifests();
    variants.push(GOOD.to_string());
    let mut parser = Parser::default();
    for text in &variants {
        let warm = parser.parse(text).unwrap();
        let cold = parse(text).unwrap();
        assert_eq!(format!("{warm:?}"), format!("{cold:?}"), "{text}");
    }
    assert_eq!(
        parser.cached(),
        2,
        "one entry per document of the last parse"
    );
}

#[test]
fn a_warm_parser_reports_errors_and_duplicates_at_their_current_place() {
    let mut parser = Parser::default();
    parser.parse(GOOD).unwrap();
    let doc = GOOD.split("---").next().unwrap();
    // The same, cached, ServiceImport twice: a duplicate in document 3.
    let err = parser
        .parse(&format!("{GOOD}---{doc}"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("document 3") && err.contains("duplicate"),
        "{err}"
    );
    let err = parser
        .parse(&GOOD.replace("fd00::1", "fd00::zz"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("document 1") && err.contains("spec.ips[1]"),
        "{err}"
    );
    // A failed parse leaves the last good documents cached.
    assert_eq!(parser.cached(), 2);
    assert_eq!(parser.parse(GOOD).unwrap().imports.len(), 1);
}

/// Six levels of ten aliases over a 10 KB scalar would expand to 10 GB
/// (16 KB of text): the budget, sized by the document, stops it at a
/// few times the text's size, with an error that says so.
#[test]
fn an_alias_bomb_is_stopped_by_the_budget() {
    let mut text = format!("a0: &a0 \"{}\"\n", "x".repeat(10 * 1024));
    for level in 1..=6 {
        let refs = vec![format!("*a{}", level - 1); 10].join(", ");
        text.push_str(&format!("a{level}: &a{level} [{refs}]\n"));
    }
    let started = std::time::Instant::now();
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.contains("budget"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    // The same in a stream with a directive, parsed whole.
    let err = parse(&format!("%YAML 1.2\n---\n{text}"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("budget"), "{err}");
    // A few aliases, as a hand-written manifest may use, are fine.
    let import = |name: &str, ip: &str, ports: &str| {
        format!(
            "- apiVersion: multicluster.x-k8s.io/v1beta1\n  kind: ServiceImport\n  metadata: {{name: {name}, namespace: prod}}\n  spec: {{type: ClusterSetIP, ips: [{ip}], ports: {ports}}}\n"
        )
    };
    let text = format!(
        "apiVersion: v1\nkind: List\nitems:\n{}{}",
        import(
            "web",
            "10.42.0.1",
            "&ports [{name: http, protocol: TCP, port: 80}]"
        ),
        import("api", "10.42.0.2", "*ports"),
    );
    let m = parse(&text).unwrap();
    assert_eq!(m.imports.len(), 2);
}

const CLUSTER_ID: &str = "apiVersion: about.k8s.io/v1beta1
kind: ClusterProperty
metadata: {name: cluster.clusterset.k8s.io}
spec: {value: Cluster-A}
";

/// The ClusterProperty `cluster.clusterset.k8s.io` is this cluster's id,
/// at either version; other properties are accepted silently.
#[test]
fn the_cluster_id_property_is_read_and_checked() {
    let clusterset = "apiVersion: about.k8s.io/v1alpha1\nkind: ClusterProperty\n\
                      metadata: {name: clusterset.k8s.io}\nspec: {value: set-1}\n";
    let text = format!("{CLUSTER_ID}---\n{clusterset}---{GOOD}");
    let m = parse(&text).unwrap();
    assert_eq!(m.cluster_id.as_deref(), Some("cluster-a"));
    assert_eq!(
        m.skipped.len(),
        1,
        "only the ServiceExport: {:?}",
        m.skipped
    );
    assert!(check(&text).rejected.is_empty());
    let alpha = CLUSTER_ID.replace("v1beta1", "v1alpha1");
    assert_eq!(
        parse(&alpha).unwrap().cluster_id.as_deref(),
        Some("cluster-a")
    );
    assert_eq!(parse(GOOD).unwrap().cluster_id, None);
    assert_eq!(parse(clusterset).unwrap().cluster_id, None);
    // An id no source-cluster label could match, a typo, a second one.
    let err = parse(&CLUSTER_ID.replace("Cluster-A", "cluster_a"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ClusterProperty") && err.contains("not a valid cluster id"),
        "{err}"
    );
    let err = parse(&CLUSTER_ID.replace("spec: {value", "spec: {valeu"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("ClusterProperty"), "{err}");
    let err = parse(&format!("{CLUSTER_ID}---\n{CLUSTER_ID}"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("document 2") && err.contains("duplicate ClusterProperty"),
        "{err}"
    );
}

/// A reload that adds, changes or removes the property brings the index's
/// cluster id along, whatever else the delta holds.
#[test]
fn deltas_carry_the_cluster_id_of_the_whole_manifest() {
    use crate::zone::ZoneSettings;
    let mut parser = Parser::default();
    let mut index = Index::new(ZoneSettings::new(
        hickory_proto::rr::Name::from_ascii("clusterset.local.").unwrap(),
    ));
    let mut load = |text: &str| {
        parser.parse_update(text).unwrap().apply_to(&mut index);
        match index.own_cluster() {
            OwnCluster::Known(id) => id.clone(),
            OwnCluster::Unknown(why) => format!("unknown: {why}"),
        }
    };
    assert!(load(GOOD).contains("the manifest has no ClusterProperty"));
    assert_eq!(load(&format!("{GOOD}---\n{CLUSTER_ID}")), "cluster-a");
    // Only an unrelated document changes: the id stays.
    let edited = GOOD.replace("10.1.0.1", "10.1.0.2");
    assert_eq!(load(&format!("{edited}---\n{CLUSTER_ID}")), "cluster-a");
    let moved = CLUSTER_ID.replace("Cluster-A", "cluster-b");
    assert_eq!(load(&format!("{edited}---\n{moved}")), "cluster-b");
    assert!(load(&edited).contains("the manifest has no ClusterProperty"));
}
