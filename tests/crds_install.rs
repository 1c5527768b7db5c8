//! `clusterset-dns crds install` against a real kube-apiserver: a fresh
//! install creates the four CRDs (the three of the MCS API and
//! clusterset-dns's PublishedService); a second install changes nothing (same
//! resourceVersions, exit 0); an mcs-api CRD labelled with a newer release
//! is kept as it is (exit 3) while an older one is upgraded.
//!
//! One apiserver-only cluster; the binary runs as a process, the way an
//! operator runs it.
#![cfg(feature = "testenv")]

mod controlplane;
mod support;

use std::collections::BTreeMap;
use std::path::Path;

use clusterset_dns::api::well_known::{LABEL_RELEASE_VERSION, MCS_RELEASE_VERSION};
use controlplane::{ClusterSpec, ControlPlane};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};

const BIN: &str = env!("CARGO_BIN_EXE_clusterset-dns");
const IMPORTS: &str = "serviceimports.multicluster.x-k8s.io";
const EXPORTS: &str = "serviceexports.multicluster.x-k8s.io";
const PROPERTIES: &str = "clusterproperties.about.k8s.io";
const PUBLISHED: &str = "publishedservices.clusterset-dns.io";

/// Runs `crds install --kubeconfig <kubeconfig>`; returns the exit code and
/// stdout (stderr is echoed into the test output).
fn install(kubeconfig: &Path) -> (i32, String) {
    let output = std::process::Command::new(BIN)
        .args(["crds", "install", "--kubeconfig"])
        .arg(kubeconfig)
        .output()
        .expect("run clusterset-dns crds install");
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    (
        output.status.code().expect("exited, not killed"),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// `name → (resourceVersion, release-version label)` of the three CRDs.
async fn state(api: &Api<CustomResourceDefinition>) -> BTreeMap<String, (String, Option<String>)> {
    let mut state = BTreeMap::new();
    for name in [IMPORTS, EXPORTS, PROPERTIES] {
        let crd = api.get(name).await.expect("CRD exists");
        let release = crd
            .metadata
            .labels
            .unwrap_or_default()
            .get(LABEL_RELEASE_VERSION)
            .cloned();
        state.insert(
            name.to_owned(),
            (
                crd.metadata.resource_version.expect("resourceVersion"),
                release,
            ),
        );
    }
    state
}

/// Sets the `release-version` label of a CRD, as another installer would
/// have left it.
async fn label_release(api: &Api<CustomResourceDefinition>, name: &str, release: &str) {
    let patch = serde_json::json!({"metadata": {"labels": {LABEL_RELEASE_VERSION: release}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("label the CRD");
}

#[tokio::test(flavor = "multi_thread")]
async fn install_creates_then_changes_nothing_and_never_downgrades() {
    let plane = ControlPlane::start_with(&[ClusterSpec::api_only_bare()]).await;
    let kubeconfig = &plane.clusters[0].admin_kubeconfig;
    let api: Api<CustomResourceDefinition> = Api::all(plane.clusters[0].admin_client().await);
    for name in [IMPORTS, EXPORTS, PROPERTIES, PUBLISHED] {
        assert!(
            api.get_opt(name).await.expect("get CRD").is_none(),
            "{name} there before the install"
        );
    }

    // Fresh install.
    let (code, stdout) = install(kubeconfig);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(
        stdout,
        format!(
            "{PROPERTIES}: created\n{PUBLISHED}: created\n{EXPORTS}: created\n{IMPORTS}: created\n"
        )
    );
    let installed = state(&api).await;
    assert_eq!(installed[IMPORTS].1.as_deref(), Some(MCS_RELEASE_VERSION));
    assert_eq!(installed[PROPERTIES].1, None);
    for name in [IMPORTS, EXPORTS, PROPERTIES] {
        let crd = api.get(name).await.unwrap();
        let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True"),
            "{name} not Established after install: {conditions:?}"
        );
    }

    // Again: nothing to do, nothing written.
    let (code, stdout) = install(kubeconfig);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(
        stdout,
        format!(
            "{PROPERTIES}: unchanged\n{PUBLISHED}: unchanged\n{EXPORTS}: unchanged\n{IMPORTS}: unchanged\n"
        )
    );
    assert_eq!(state(&api).await, installed, "a re-install wrote");

    // The cluster holds a newer ServiceImport CRD and an older
    // ServiceExport one: the first is kept, the second upgraded.
    label_release(&api, IMPORTS, "v0.6.0").await;
    label_release(&api, EXPORTS, "v0.4.0").await;
    let before = state(&api).await;
    let (code, stdout) = install(kubeconfig);
    assert_eq!(code, 3, "exit code when a newer CRD is kept:\n{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert_eq!(lines[0], format!("{PROPERTIES}: unchanged"));
    assert_eq!(lines[1], format!("{PUBLISHED}: unchanged"));
    assert_eq!(lines[2], format!("{EXPORTS}: updated"));
    assert!(
        lines[3].starts_with(&format!("{IMPORTS}: kept the cluster's v0.6.0"))
            && lines[3].contains("not downgraded"),
        "{}",
        lines[3]
    );
    let after = state(&api).await;
    assert_eq!(after[IMPORTS], before[IMPORTS], "the newer CRD was touched");
    assert_eq!(after[IMPORTS].1.as_deref(), Some("v0.6.0"));
    assert_eq!(after[EXPORTS].1.as_deref(), Some(MCS_RELEASE_VERSION));
    assert_ne!(after[EXPORTS].0, before[EXPORTS].0);
    assert_eq!(after[PROPERTIES], before[PROPERTIES]);
}
