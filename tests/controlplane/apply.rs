//! Putting objects into a cluster: the CRDs, the shipped manifests
//! (server-side applied as shipped) and multi-document manifests (created).

use super::*;

/// Creates every CustomResourceDefinition of the multi-document YAML file
/// `path` and waits until each is established.
pub(crate) async fn install_crd_file(client: &kube::Client, path: &Path) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()));
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        let crd: CustomResourceDefinition = serde_json::from_value(doc)
            .unwrap_or_else(|e| panic!("{}: not a CRD: {e}", path.display()));
        create_crd(client, &crd).await;
    }
}

/// Applies every CRD in `crds/` and waits until each is established.
pub(crate) async fn install_crds(client: &kube::Client) {
    for crd in clusterset_dns::api::crds::all() {
        create_crd(client, &crd).await;
    }
}

/// Creates `crd` (one that exists already is fine) and waits up to 30 s
/// until it is established.
pub(super) async fn create_crd(
    client: &kube::Client,
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) {
    use kube::api::{Api, PostParams};
    use kube::runtime::wait::{await_condition, conditions};
    let api = Api::all(client.clone());
    let name = crd.metadata.name.clone().unwrap_or_default();
    match api.create(&PostParams::default(), crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating CRD {name}: {e}"),
    }
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(api, &name, conditions::is_crd_established()),
    )
    .await
    .unwrap_or_else(|_| panic!("CRD {name} not established in 30 s"))
    .unwrap();
}

/// Creates every object of a multi-document manifest (expanding `kind:
/// List`) through the dynamic API, creating missing namespaces first.
pub(crate) async fn apply_manifest(client: &kube::Client, text: &str) {
    use kube::api::{Api, DynamicObject, PostParams};
    use kube::discovery::{Discovery, Scope};
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(text).unwrap();
    let mut objects = Vec::new();
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        if doc["kind"] == "List" {
            objects.extend(doc["items"].as_array().cloned().unwrap_or_default());
        } else {
            objects.push(doc);
        }
    }
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    for object in objects {
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        let types = object.types.clone().unwrap();
        let (group, version) = types
            .api_version
            .rsplit_once('/')
            .unwrap_or(("", &types.api_version));
        let gvk = kube::api::GroupVersionKind::gvk(group, version, &types.kind);
        let (resource, caps) = discovery
            .resolve_gvk(&gvk)
            .unwrap_or_else(|| panic!("{gvk:?} not served"));
        let api: Api<DynamicObject> = if caps.scope == Scope::Namespaced {
            let ns = object
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let namespace = k8s_openapi::api::core::v1::Namespace {
                metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    name: Some(ns.clone()),
                    ..Default::default()
                },
                ..Default::default()
            };
            let _ = namespaces.create(&PostParams::default(), &namespace).await;
            Api::namespaced_with(client.clone(), &ns, &resource)
        } else {
            Api::all_with(client.clone(), &resource)
        };
        api.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("creating {gvk:?}: {e}"));
    }
}

/// Field manager of everything the test helpers server-side apply.
pub(crate) const TEST_FIELD_MANAGER: &str = "clusterset-dns-tests";

/// `<repo>/deploy/<name>`.
pub(crate) fn deploy_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(name)
}

/// Server-side applies (field manager [`TEST_FIELD_MANAGER`], forced) every
/// document of the manifest at `path`, in file order, exactly as shipped:
/// applying twice, or two files that both declare the namespace, is fine
/// (unlike [`apply_manifest`], which creates).
///
/// Every kind is applied, the controller's Deployment included: on an
/// apiserver-only cluster it is just stored (no controller runs it), and on a
/// member cluster kwok turns it into two fake Running pods whose containers
/// never run. Neither touches what the tests look at, and neither holds the
/// leader Lease, so tests run the real controller with
/// [`spawn_controller`] (`--leader-election=false`).
pub(crate) async fn apply_file(client: &kube::Client, path: &Path) {
    apply_file_as(client, path, TEST_FIELD_MANAGER).await;
}

/// [`apply_file`] as field manager `manager`: the demo applies its sample
/// app as `kubectl apply --server-side` does (manager `kubectl`), so that a
/// user who applies the same file again owns what they apply. Under
/// another manager, fields the apiserver defaults inside an atomic struct
/// (`fieldRef.apiVersion`) conflict even though the file is the same.
pub(crate) async fn apply_file_as(client: &kube::Client, path: &Path, manager: &str) {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    apply_yaml_as(client, &text, manager)
        .await
        .unwrap_or_else(|e| panic!("applying {}: {e}", path.display()));
}

/// Server-side applies every document of `text` (see [`apply_file`]); the
/// error names the document that failed.
pub(crate) async fn apply_yaml(client: &kube::Client, text: &str) -> Result<(), String> {
    apply_yaml_as(client, text, TEST_FIELD_MANAGER).await
}

/// [`apply_yaml`] as field manager `manager`.
pub(crate) async fn apply_yaml_as(
    client: &kube::Client,
    text: &str,
    manager: &str,
) -> Result<(), String> {
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    use kube::discovery::{Discovery, Scope};
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(text).map_err(|e| format!("parsing YAML: {e}"))?;
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(|e| format!("API discovery: {e}"))?;
    let params = PatchParams::apply(manager).force();
    for (i, doc) in docs.into_iter().filter(|d| !d.is_null()).enumerate() {
        let object: DynamicObject = serde_json::from_value(doc.clone())
            .map_err(|e| format!("document {i}: not an object: {e}"))?;
        let types = object
            .types
            .clone()
            .ok_or_else(|| format!("document {i}: no apiVersion/kind"))?;
        let name = object.metadata.name.clone().unwrap_or_default();
        let what = format!("document {i} ({} {name})", types.kind);
        let (group, version) = types
            .api_version
            .rsplit_once('/')
            .unwrap_or(("", &types.api_version));
        let gvk = kube::api::GroupVersionKind::gvk(group, version, &types.kind);
        let (resource, caps) = discovery
            .resolve_gvk(&gvk)
            .ok_or_else(|| format!("{what}: {gvk:?} not served"))?;
        let api: Api<DynamicObject> = if caps.scope == Scope::Namespaced {
            let ns = object.metadata.namespace.as_deref().unwrap_or("default");
            Api::namespaced_with(client.clone(), ns, &resource)
        } else {
            Api::all_with(client.clone(), &resource)
        };
        api.patch(&name, &params, &Patch::Apply(&doc))
            .await
            .map_err(|e| format!("{what}: {e}"))?;
    }
    Ok(())
}
