//! docs/compatibility.md states the versions the repository really pins:
//! the testenv build's Kubernetes, etcd and CoreDNS, the mcs-api release and
//! schema revision labelled on `crds/*.yaml`, and the minimum Rust.

mod dns_server;
mod support;

use clusterset_dns::api::well_known::{
    LABEL_CRD_SCHEMA_REVISION, LABEL_RELEASE_VERSION, MCS_CRD_SCHEMA_REVISION, MCS_RELEASE_VERSION,
};
use dns_server::repo_path;

fn read(relative: &str) -> String {
    std::fs::read_to_string(repo_path(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// `NAME=value` in a shell script (the value up to the first blank).
fn shell_pin(script: &str, name: &str) -> String {
    script
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no {name}= in the script"))
        .to_owned()
}

/// The backticked version in the docs table row whose first cell starts
/// with `component`.
fn documented(docs: &str, component: &str) -> String {
    let row = docs
        .lines()
        .find(|l| l.starts_with(&format!("| {component}")))
        .unwrap_or_else(|| panic!("docs/compatibility.md has no row for {component}"));
    let cell = row.split('|').nth(2).expect("a version cell");
    cell.trim().trim_matches('`').to_owned()
}

/// The value of `key` under `metadata.labels` of a CRD file.
fn crd_label(yaml: &str, key: &str) -> Option<String> {
    yaml.lines()
        .take_while(|l| !l.starts_with("spec:"))
        .find_map(|l| l.trim().strip_prefix(&format!("{key}:")))
        .map(|v| v.trim().trim_matches('"').to_owned())
}

#[test]
fn compatibility_table_matches_the_pins_and_the_crds() {
    let docs = read("docs/compatibility.md");
    let testenv = read("scripts/testenv-build.sh");
    assert_eq!(
        documented(&docs, "Kubernetes, the newest"),
        shell_pin(&testenv, "K8S_NEWEST")
    );
    let oldest = shell_pin(&testenv, "K8S_OLDEST");
    assert_eq!(documented(&docs, "Kubernetes, the oldest"), oldest);
    // The oldest tested is the oldest the controller starts on.
    let (major, minor) = clusterset_dns::controller::compat::OLDEST_SUPPORTED;
    assert!(
        oldest.starts_with(&format!("v{major}.{minor}.")),
        "K8S_OLDEST {oldest} is not the controller's oldest supported {major}.{minor}"
    );
    assert_eq!(
        documented(&docs, "etcd"),
        shell_pin(&testenv, "ETCD_VERSION")
    );
    assert_eq!(
        documented(&docs, "CoreDNS"),
        shell_pin(&testenv, "COREDNS_VERSION")
    );

    let mut releases = Vec::new();
    let mut revisions = Vec::new();
    for entry in std::fs::read_dir(repo_path("crds")).expect("crds/") {
        let path = entry.expect("entry").path();
        let yaml = std::fs::read_to_string(&path).expect("read CRD");
        if !yaml.contains("group: multicluster.x-k8s.io") {
            continue;
        }
        releases.push(crd_label(&yaml, LABEL_RELEASE_VERSION).expect("release label"));
        revisions.push(crd_label(&yaml, LABEL_CRD_SCHEMA_REVISION).expect("revision label"));
    }
    assert_eq!(releases.len(), 2, "ServiceImport and ServiceExport CRDs");
    assert_eq!(releases, [MCS_RELEASE_VERSION; 2]);
    assert_eq!(revisions, [MCS_CRD_SCHEMA_REVISION; 2]);
    assert_eq!(documented(&docs, "mcs-api CRD bundle"), releases[0]);
    assert_eq!(
        documented(&docs, "mcs-api CRD schema revision"),
        revisions[0]
    );

    let cargo = read("Cargo.toml");
    let rust = cargo
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("rust-version")
        .trim_matches('"');
    assert_eq!(documented(&docs, "Rust"), rust);
}
