//! Keeps `crds/*.yaml` in sync with the Rust types in `clusterset_dns::api`.
//!
//! The files are generated, never edited by hand. Run
//! `UPDATE_CRDS=1 cargo test --test crd_sync` to rewrite them, and the Helm
//! chart's copies, after changing a type. The comparison parses the YAML, so formatting or key order alone
//! never fails it.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use clusterset_dns::api::crds;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

const REGENERATE: &str = "UPDATE_CRDS=1 cargo test --test crd_sync";

fn crd_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("crds")
}

/// The chart ships the same files; `tests/deploy.rs` checks them byte for byte.
fn chart_crd_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/helm/clusterset-dns/crds")
}

fn file_name(crd: &CustomResourceDefinition) -> String {
    let name = crd
        .metadata
        .name
        .as_deref()
        .expect("generated CRDs are named");
    format!("{name}.yaml")
}

#[test]
fn crd_yaml_on_disk_matches_the_generated_crds() {
    let dir = crd_dir();
    let update = std::env::var_os("UPDATE_CRDS").is_some();
    if update {
        fs::create_dir_all(&dir).expect("create crds/");
    }

    for crd in crds::all() {
        let path = dir.join(file_name(&crd));
        if update {
            let yaml = crds::to_yaml(&crd);
            fs::write(&path, &yaml).expect("write CRD YAML");
            fs::write(chart_crd_dir().join(file_name(&crd)), &yaml)
                .expect("write the chart's CRD YAML");
        }

        let on_disk = fs::read_to_string(&path).unwrap_or_else(|err| {
            panic!(
                "cannot read {}: {err}; generate it with `{REGENERATE}`",
                path.display()
            )
        });
        let on_disk: serde_json::Value = serde_saphyr::from_str(&on_disk)
            .unwrap_or_else(|err| panic!("{} is not valid YAML: {err}", path.display()));
        let generated = serde_json::to_value(&crd).expect("CRD serializes to JSON");

        assert!(
            on_disk == generated,
            "{} is out of date with the Rust types in src/api; regenerate it with `{REGENERATE}`",
            path.display(),
        );
    }
}

#[test]
fn crd_directory_holds_only_generated_crds() {
    let expected: BTreeSet<String> = crds::all().iter().map(file_name).collect();
    let present: BTreeSet<String> = fs::read_dir(crd_dir())
        .expect("read crds/")
        .map(|entry| entry.expect("read crds/ entry").file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml"))
        .collect();

    let stale: Vec<_> = present.difference(&expected).collect();
    assert!(
        stale.is_empty(),
        "crds/ holds YAML no Rust type generates: {stale:?}; delete it, then run `{REGENERATE}`",
    );
}
