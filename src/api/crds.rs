//! The installable `CustomResourceDefinition`s for every kind in
//! [`api`](super): both API versions merged into one CRD, plus the metadata
//! that belongs to the CRD bundle rather than to a type.
//!
//! `crds/*.yaml` in the repository is rendered from here and
//! `tests/crd_sync.rs` fails when the two drift apart. Prefer these
//! functions over a single version's `CustomResourceExt::crd()`, which lacks
//! the other version, the bundle labels and the `ServiceExport` spec fix-up.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use kube::core::crd::merge_crds;

use super::well_known::{
    LABEL_CRD_SCHEMA_REVISION, LABEL_RELEASE_VERSION, MCS_CRD_SCHEMA_REVISION, MCS_RELEASE_VERSION,
    STORAGE_VERSION,
};
use super::{PublishedService, cluster_property, service_export, service_import};

/// The `serviceimports.multicluster.x-k8s.io` CRD: v1alpha1 and v1beta1
/// (storage), labelled with the mcs-api release it matches.
pub fn service_import() -> CustomResourceDefinition {
    let mut crd = merge_versions(
        service_import::v1alpha1::ServiceImport::crd(),
        service_import::v1beta1::ServiceImport::crd(),
    );
    add_mcs_release_labels(&mut crd);
    crd
}

/// The `serviceexports.multicluster.x-k8s.io` CRD: v1alpha1 and v1beta1
/// (storage), labelled with the mcs-api release it matches. `spec` is
/// optional, as upstream, because most exports carry none.
pub fn service_export() -> CustomResourceDefinition {
    let mut crd = merge_versions(
        service_export::v1alpha1::ServiceExport::crd(),
        service_export::v1beta1::ServiceExport::crd(),
    );
    make_spec_optional(&mut crd);
    add_mcs_release_labels(&mut crd);
    crd
}

/// The cluster-scoped `clusterproperties.about.k8s.io` CRD: v1alpha1 and
/// v1beta1 (storage).
pub fn cluster_property() -> CustomResourceDefinition {
    let mut crd = merge_versions(
        cluster_property::v1alpha1::ClusterProperty::crd(),
        cluster_property::v1beta1::ClusterProperty::crd(),
    );
    // `*.k8s.io` groups are protected: the apiserver rejects a CRD in them
    // without this annotation pointing at the approved API (KEP-2149).
    crd.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            API_APPROVED_ANNOTATION.to_string(),
            CLUSTER_PROPERTY_API_APPROVAL.to_string(),
        );
    crd
}

/// The `publishedservices.clusterset-dns.io` CRD: what a controller
/// publishes to its peers (one version, ours, not part of the mcs-api
/// bundle).
pub fn published_service() -> CustomResourceDefinition {
    PublishedService::crd()
}

/// Annotation the apiserver requires on CRDs in protected (`*.k8s.io`) groups.
pub const API_APPROVED_ANNOTATION: &str = "api-approved.kubernetes.io";

/// Where the `about.k8s.io` API was approved: the ClusterProperty KEP.
pub const CLUSTER_PROPERTY_API_APPROVAL: &str =
    "https://github.com/kubernetes/enhancements/tree/master/keps/sig-multicluster/2149-clusterid";

/// The CRDs of the MCS API (KEP-1645, KEP-2149), ordered by CRD name.
pub fn mcs() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![service_import(), service_export(), cluster_property()];
    crds.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    crds
}

/// Every CRD this crate defines (the MCS API's and ours), ordered by CRD
/// name so the rendered output is stable.
pub fn all() -> Vec<CustomResourceDefinition> {
    let mut crds = mcs();
    crds.push(published_service());
    crds.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    crds
}

/// One CRD as a YAML document.
pub fn to_yaml(crd: &CustomResourceDefinition) -> String {
    serde_saphyr::to_string(crd).expect("a CustomResourceDefinition always serializes to YAML")
}

/// All CRDs from [`all`] as one multi-document YAML stream (`---`
/// separated), ready for `kubectl apply -f -`. The output is deterministic.
pub fn render_all_yaml() -> String {
    serde_saphyr::to_string_multiple(&all())
        .expect("a CustomResourceDefinition always serializes to YAML")
}

/// Merges the single-version CRDs derived for each API version into one,
/// with v1alpha1 listed first as in upstream manifests.
fn merge_versions(
    v1alpha1: CustomResourceDefinition,
    v1beta1: CustomResourceDefinition,
) -> CustomResourceDefinition {
    let mut crd = merge_crds(vec![v1alpha1, v1beta1], STORAGE_VERSION).expect(
        "both versions of a kind share group, kind and scope and include the storage version",
    );
    crd.spec.versions.sort_by(|a, b| a.name.cmp(&b.name));
    crd
}

/// Labels installers compare to refuse downgrading the MCS CRDs.
fn add_mcs_release_labels(crd: &mut CustomResourceDefinition) {
    crd.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .extend([
            (
                LABEL_RELEASE_VERSION.to_owned(),
                MCS_RELEASE_VERSION.to_owned(),
            ),
            (
                LABEL_CRD_SCHEMA_REVISION.to_owned(),
                MCS_CRD_SCHEMA_REVISION.to_owned(),
            ),
        ]);
}

/// kube-derive always lists `spec` as required because the generated struct
/// has a non-optional `spec` field; upstream `ServiceExport` allows objects
/// without one, and the Rust type reads those as an empty spec.
fn make_spec_optional(crd: &mut CustomResourceDefinition) {
    let schemas = crd
        .spec
        .versions
        .iter_mut()
        .filter_map(|version| version.schema.as_mut())
        .filter_map(|validation| validation.open_api_v3_schema.as_mut());
    for schema in schemas {
        if let Some(required) = schema.required.as_mut() {
            required.retain(|field| field != "spec");
            if required.is_empty() {
                schema.required = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceDefinitionVersion, JSONSchemaProps,
    };

    use super::*;
    use crate::api::well_known::{ABOUT_GROUP, MCS_GROUP, V1ALPHA1, V1BETA1};

    fn schema(version: &CustomResourceDefinitionVersion) -> &JSONSchemaProps {
        version
            .schema
            .as_ref()
            .and_then(|validation| validation.open_api_v3_schema.as_ref())
            .unwrap()
    }

    fn property<'a>(schema: &'a JSONSchemaProps, path: &[&str]) -> &'a JSONSchemaProps {
        path.iter().fold(schema, |schema, name| {
            &schema.properties.as_ref().unwrap()[*name]
        })
    }

    fn columns(crd: &CustomResourceDefinition) -> Vec<Vec<(String, String, String)>> {
        crd.spec
            .versions
            .iter()
            .map(|version| {
                version
                    .additional_printer_columns
                    .iter()
                    .flatten()
                    .map(|c| (c.name.clone(), c.type_.clone(), c.json_path.clone()))
                    .collect()
            })
            .collect()
    }

    fn owned(items: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
        items
            .iter()
            .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
            .collect()
    }

    #[test]
    fn every_mcs_crd_serves_both_versions_and_stores_only_v1beta1() {
        for crd in mcs() {
            let versions: Vec<_> = crd
                .spec
                .versions
                .iter()
                .map(|v| (v.name.as_str(), v.served, v.storage))
                .collect();
            assert_eq!(
                versions,
                [(V1ALPHA1, true, false), (V1BETA1, true, true)],
                "{:?}",
                crd.metadata.name
            );
        }
    }

    #[test]
    fn both_versions_of_a_kind_share_one_schema() {
        for crd in mcs() {
            let [alpha, beta] = &crd.spec.versions[..] else {
                panic!("two versions expected in {:?}", crd.metadata.name);
            };
            assert_eq!(schema(alpha), schema(beta), "{:?}", crd.metadata.name);
        }
    }

    #[test]
    fn crds_are_named_plural_dot_group_in_the_well_known_groups() {
        let names: Vec<_> = all()
            .iter()
            .map(|crd| (crd.metadata.name.clone().unwrap(), crd.spec.group.clone()))
            .collect();
        assert_eq!(
            names,
            [
                ("clusterproperties.about.k8s.io".into(), ABOUT_GROUP.into()),
                (
                    "publishedservices.clusterset-dns.io".into(),
                    crate::api::published_service::GROUP.into()
                ),
                (
                    "serviceexports.multicluster.x-k8s.io".into(),
                    MCS_GROUP.into()
                ),
                (
                    "serviceimports.multicluster.x-k8s.io".into(),
                    MCS_GROUP.into()
                ),
            ]
        );
    }

    #[test]
    fn typed_resources_use_the_well_known_groups_and_versions() {
        use crate::api::{v1alpha1, v1beta1};
        use kube::Resource;

        assert_eq!(v1beta1::ServiceImport::group(&()), MCS_GROUP);
        assert_eq!(v1beta1::ServiceExport::group(&()), MCS_GROUP);
        assert_eq!(v1beta1::ClusterProperty::group(&()), ABOUT_GROUP);
        assert_eq!(v1alpha1::ServiceImport::version(&()), V1ALPHA1);
        assert_eq!(v1alpha1::ServiceExport::version(&()), V1ALPHA1);
        assert_eq!(v1alpha1::ClusterProperty::version(&()), V1ALPHA1);
        assert_eq!(v1beta1::ServiceImport::version(&()), STORAGE_VERSION);
        assert_eq!(v1beta1::ServiceExport::version(&()), STORAGE_VERSION);
        assert_eq!(v1beta1::ClusterProperty::version(&()), STORAGE_VERSION);
    }

    #[test]
    fn mcs_crds_carry_release_labels_and_cluster_property_does_not() {
        for crd in [service_import(), service_export()] {
            let labels = crd.metadata.labels.unwrap();
            assert_eq!(labels[LABEL_RELEASE_VERSION], "v0.5.0");
            assert_eq!(labels[LABEL_CRD_SCHEMA_REVISION], "0");
        }
        assert_eq!(cluster_property().metadata.labels, None);
    }

    #[test]
    fn crds_have_upstream_names_and_scopes() {
        let import = service_import();
        assert_eq!(import.spec.names.kind, "ServiceImport");
        assert_eq!(
            import.spec.names.short_names.unwrap(),
            ["svcim", "svcimport"]
        );
        assert_eq!(import.spec.scope, "Namespaced");

        let export = service_export();
        assert_eq!(export.spec.names.kind, "ServiceExport");
        assert_eq!(
            export.spec.names.short_names.unwrap(),
            ["svcex", "svcexport"]
        );
        assert_eq!(export.spec.scope, "Namespaced");

        let property = cluster_property();
        assert_eq!(property.spec.names.kind, "ClusterProperty");
        assert_eq!(property.spec.names.plural, "clusterproperties");
        assert_eq!(property.spec.names.categories.unwrap(), ["multicluster"]);
        assert_eq!(property.spec.scope, "Cluster");
    }

    #[test]
    fn printer_columns_match_upstream_in_every_version() {
        let age = ("Age", "date", ".metadata.creationTimestamp");
        let import = owned(&[
            ("Type", "string", ".spec.type"),
            ("IP", "string", ".spec.ips"),
            age,
        ]);
        assert_eq!(columns(&service_import()), [import.clone(), import]);

        let export = owned(&[age]);
        assert_eq!(columns(&service_export()), [export.clone(), export]);

        let property = owned(&[
            ("value", "string", ".spec.value"),
            ("age", "date", ".metadata.creationTimestamp"),
        ]);
        assert_eq!(columns(&cluster_property()), [property.clone(), property]);
    }

    #[test]
    fn every_mcs_version_has_the_status_subresource() {
        for crd in mcs() {
            for version in &crd.spec.versions {
                let subresources = version.subresources.as_ref().unwrap();
                assert!(subresources.status.is_some(), "{:?}", crd.metadata.name);
                assert!(subresources.scale.is_none());
            }
        }
    }

    #[test]
    fn service_import_spec_requires_ports_and_type() {
        let crd = service_import();
        let spec = property(schema(&crd.spec.versions[1]), &["spec"]);

        let required = spec.required.as_ref().unwrap();
        assert!(required.contains(&"ports".to_owned()));
        assert!(required.contains(&"type".to_owned()));
        let port = spec.properties.as_ref().unwrap()["ports"].items.as_ref();
        assert!(
            serde_json::to_value(port).unwrap()["required"] == serde_json::json!(["port"]),
            "a port number is required"
        );
    }

    #[test]
    fn service_import_type_is_an_enum_of_clusterset_ip_and_headless() {
        let crd = service_import();
        let ty = property(schema(&crd.spec.versions[1]), &["spec", "type"]);

        assert_eq!(ty.type_.as_deref(), Some("string"));
        let values: Vec<_> = ty.enum_.iter().flatten().map(|v| &v.0).collect();
        assert_eq!(values, ["ClusterSetIP", "Headless"]);
    }

    #[test]
    fn service_import_allows_at_most_two_ips_and_ip_families() {
        let crd = service_import();
        for field in ["ips", "ipFamilies"] {
            let list = property(schema(&crd.spec.versions[1]), &["spec", field]);
            assert_eq!(list.max_items, Some(2), "{field}");
        }
    }

    #[test]
    fn service_import_status_lists_are_maps_keyed_like_upstream() {
        let crd = service_import();
        let status = schema(&crd.spec.versions[1]);
        for (field, key) in [("clusters", "cluster"), ("conditions", "type")] {
            let list = property(status, &["status", field]);
            assert_eq!(list.x_kubernetes_list_type.as_deref(), Some("map"));
            assert_eq!(
                list.x_kubernetes_list_map_keys.as_deref(),
                Some(&[key.to_owned()][..])
            );
        }
        let endpoint_slices = property(status, &["status", "endpointSliceObjects"]);
        let values: Vec<_> = endpoint_slices
            .enum_
            .iter()
            .flatten()
            .map(|v| &v.0)
            .collect();
        assert_eq!(values, ["Present", "Absent"]);
    }

    #[test]
    fn service_export_accepts_objects_without_spec() {
        for version in &service_export().spec.versions {
            let root = schema(version);
            assert!(root.required.is_none(), "{:?}", root.required);
            assert!(property(root, &["spec"]).required.is_none());
        }
    }

    #[test]
    fn cluster_property_value_is_required_and_non_empty() {
        let crd = cluster_property();
        let spec = property(schema(&crd.spec.versions[1]), &["spec"]);

        assert_eq!(spec.required.as_deref(), Some(&["value".to_owned()][..]));
        assert_eq!(property(spec, &["value"]).min_length, Some(1));
    }

    #[test]
    fn rendered_yaml_is_deterministic_and_parses_back_to_every_crd() {
        let yaml = render_all_yaml();
        assert_eq!(yaml, render_all_yaml());
        assert_eq!(yaml.matches("\n---\n").count(), 3);

        let parsed: Vec<CustomResourceDefinition> = serde_saphyr::from_multiple(&yaml).unwrap();
        assert_eq!(parsed, all());
    }
}
