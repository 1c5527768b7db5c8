//! The YAML and JSON examples of the README and docs/ parse: a YAML block
//! is Kubernetes objects that decode as their kind (a typo in a field
//! name of a known kind fails here), a JSON block is one JSON value. The
//! maps of the code match the tree: the README's Repository table names
//! every entry of `src/`, docs/controller.md's "The code" every file of
//! `src/controller`, and neither names a path that does not exist; every
//! `docs/<file>.md, "<section>"` a comment points to is a heading there. The
//! Corefiles, shell commands and tutorials have tests of their own
//! (tests/corefiles.rs, tests/install.rs, tests/tutorials.rs).

mod markdown;

use k8s_openapi::api::core::v1::{Secret, Service};
use serde_json::Value;

fn files() -> Vec<String> {
    let mut files = vec!["README.md".to_owned()];
    files.extend(markdown::markdown_files("docs"));
    files
}

/// Decodes `value` as `K` and fails on a field `K` does not have: the
/// typed object, serialized back, must hold every field the YAML had.
fn decodes_as<K: serde::de::DeserializeOwned + serde::Serialize>(value: &Value, place: &str) {
    let typed: K = serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("{place}: not a valid object of its kind: {e}"));
    let back = serde_json::to_value(&typed).unwrap();
    fn missing(want: &Value, have: &Value, path: &str, out: &mut Vec<String>) {
        match (want, have) {
            (Value::Object(w), Value::Object(h)) => {
                for (key, value) in w {
                    match h.get(key) {
                        Some(inner) => missing(value, inner, &format!("{path}.{key}"), out),
                        None => out.push(format!("{path}.{key}")),
                    }
                }
            }
            (Value::Array(w), Value::Array(h)) => {
                for (i, (value, inner)) in w.iter().zip(h).enumerate() {
                    missing(value, inner, &format!("{path}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut unknown = Vec::new();
    missing(value, &back, "", &mut unknown);
    assert!(unknown.is_empty(), "{place}: unknown fields {unknown:?}");
}

#[test]
fn yaml_examples_are_kubernetes_objects_of_their_kind() {
    let mut checked = 0;
    for file in files() {
        for block in markdown::blocks(&file) {
            if block.language() != "yaml" {
                continue;
            }
            let place = block.place();
            let objects: Vec<Value> = serde_saphyr::from_multiple(&block.text)
                .unwrap_or_else(|e| panic!("{place}: not YAML: {e}"));
            assert!(!objects.is_empty(), "{place}: empty");
            for object in &objects {
                let kind = object["kind"].as_str();
                assert!(
                    object["apiVersion"].is_string() && kind.is_some(),
                    "{place}: not a Kubernetes object (apiVersion, kind): {object}"
                );
                assert!(
                    object["metadata"]["name"].is_string(),
                    "{place}: no metadata.name"
                );
                match kind {
                    Some("Service") => decodes_as::<Service>(object, &place),
                    Some("Secret") => decodes_as::<Secret>(object, &place),
                    Some(other) => panic!("{place}: add a decoder for kind {other} here"),
                    None => unreachable!(),
                }
                checked += 1;
            }
        }
    }
    assert!(
        checked > 0,
        "no YAML example found: the test looks in the wrong place"
    );
}

#[test]
fn json_examples_parse() {
    for file in files() {
        for block in markdown::blocks(&file) {
            if block.language() == "json" {
                serde_json::from_str::<Value>(&block.text)
                    .unwrap_or_else(|e| panic!("{}: not JSON: {e}", block.place()));
            }
        }
    }
}

/// The checker itself: a misspelt field is caught.
#[test]
fn a_misspelt_field_is_caught() {
    let value = serde_json::json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
        "spec": {"trafficDistributon": "PreferClose"}
    });
    let caught = std::panic::catch_unwind(|| decodes_as::<Service>(&value, "here"));
    assert!(caught.is_err());
}

/// The `src/` paths named in code spans of `file`'s section under the
/// heading `heading` (up to the next heading of the same level).
fn src_paths_in_section(file: &str, heading: &str) -> std::collections::BTreeSet<String> {
    let text = std::fs::read_to_string(markdown::repo().join(file)).unwrap();
    let level = heading.split(' ').next().unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|line| *line == heading)
        .unwrap_or_else(|| panic!("{file}: no heading {heading:?}"))
        + 1;
    let end = lines[start..]
        .iter()
        .position(|line| line.split(' ').next() == Some(level))
        .map_or(lines.len(), |n| start + n);
    markdown::inline_code(file)
        .into_iter()
        .filter(|(line, _)| (start..end).contains(&(line - 1)))
        .map(|(_, code)| code)
        .filter(|code| code.starts_with("src/"))
        .collect()
}

/// Paths named in a map that are not in the tree.
fn missing_paths(named: &std::collections::BTreeSet<String>) -> Vec<&String> {
    named
        .iter()
        .filter(|path| !markdown::repo().join(path).exists())
        .collect()
}

#[test]
fn the_readme_repository_table_names_every_entry_of_src_and_only_existing_paths() {
    let named = src_paths_in_section("README.md", "## Repository");
    assert_eq!(
        missing_paths(&named),
        Vec::<&String>::new(),
        "named, not in the tree"
    );
    let unnamed: Vec<String> = std::fs::read_dir(markdown::repo().join("src"))
        .unwrap()
        .map(|entry| format!("src/{}", entry.unwrap().file_name().to_string_lossy()))
        .filter(|entry| {
            !named
                .iter()
                .any(|path| path == entry || path.starts_with(&format!("{entry}/")))
        })
        .collect();
    assert_eq!(
        unnamed,
        Vec::<String>::new(),
        "in src/, not in the README's Repository table"
    );
}

#[test]
fn the_controllers_map_names_every_file_of_src_controller_and_only_existing_ones() {
    let named = src_paths_in_section("docs/controller.md", "## The code");
    assert_eq!(
        missing_paths(&named),
        Vec::<&String>::new(),
        "named, not in the tree"
    );
    let mut files = Vec::new();
    markdown::walk(&markdown::repo().join("src/controller"), &mut files);
    let mut unnamed: Vec<String> = files
        .iter()
        .map(|file| {
            file.strip_prefix(markdown::repo())
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|file| !file.ends_with("/tests.rs") && !named.contains(file))
        .collect();
    unnamed.sort();
    assert_eq!(
        unnamed,
        Vec::<String>::new(),
        "in src/controller, not in docs/controller.md's map"
    );
}

/// `(file, section)` for every `docs/<file>.md, "<section>"` a comment
/// in `text` names, its comment lines joined first (a reference may wrap).
fn section_references(text: &str) -> Vec<(String, String)> {
    let mut joined = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        match trimmed.strip_prefix("//") {
            Some(comment) => {
                joined.push(' ');
                joined.push_str(comment.trim_start_matches(['/', '!']).trim());
            }
            None => joined.push('\n'),
        }
    }
    let mut out = Vec::new();
    let mut rest = joined.as_str();
    while let Some(at) = rest.find("docs/") {
        rest = &rest[at + "docs/".len()..];
        let Some((file, after)) = rest.split_once(".md, \"") else {
            continue;
        };
        if !file
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            continue;
        }
        if let Some((section, _)) = after.split_once('"') {
            out.push((format!("docs/{file}.md"), section.to_owned()));
        }
    }
    out
}

#[test]
fn sections_the_code_points_to_exist() {
    let mut sources = Vec::new();
    markdown::walk(&markdown::repo().join("src"), &mut sources);
    markdown::walk(&markdown::repo().join("tests"), &mut sources);
    let mut checked = 0;
    let mut dangling = Vec::new();
    for source in sources
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
    {
        let text = std::fs::read_to_string(source).unwrap();
        for (file, section) in section_references(&text) {
            let doc = std::fs::read_to_string(markdown::repo().join(&file)).unwrap_or_default();
            let found = doc.lines().any(|line| {
                line.starts_with('#') && line.trim_start_matches('#').trim().starts_with(&section)
            });
            checked += 1;
            if !found {
                dangling.push(format!("{}: {file}, {section:?}", source.display()));
            }
        }
    }
    assert!(
        checked >= 10,
        "only {checked} references found: is the reader broken?"
    );
    assert_eq!(
        dangling,
        Vec::<String>::new(),
        "sections named in comments that the docs do not have"
    );
}

#[test]
fn a_wrapped_section_reference_is_read_whole() {
    let text =
        "/// Loop-free (docs/controller.md,\n/// \"What a peer can read\"), and more.\nfn f() {}\n";
    assert_eq!(
        section_references(text),
        [(
            "docs/controller.md".to_owned(),
            "What a peer can read".to_owned()
        )]
    );
}
