use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

use super::*;

#[test]
fn method_creates_unless_the_object_is_shown_ours() {
    // No uid: the plan knows nothing of ours at the name, so only a POST.
    assert_eq!(method(false, None), Method::Create);
    // A uid: shown ours, forced apply with the uid as precondition.
    assert_eq!(method(false, Some("u1")), Method::ForcedApply);
}

#[test]
fn method_keeps_status_writes_on_the_subresource() {
    // Status writes target an existing object, never create.
    assert_eq!(method(true, None), Method::Status { force: false });
    assert_eq!(method(true, Some("u1")), Method::Status { force: true });
}

fn entry(manager: &str, operation: &str, subresource: Option<&str>) -> ManagedFieldsEntry {
    ManagedFieldsEntry {
        manager: Some(manager.to_owned()),
        operation: Some(operation.to_owned()),
        subresource: subresource.map(str::to_owned),
        api_version: Some("v1".to_owned()),
        fields_type: Some("FieldsV1".to_owned()),
        ..ManagedFieldsEntry::default()
    }
}

fn created(entries: Vec<ManagedFieldsEntry>) -> ObjectMeta {
    ObjectMeta {
        name: Some("web".to_owned()),
        namespace: Some("prod".to_owned()),
        uid: Some("u1".to_owned()),
        resource_version: Some("42".to_owned()),
        managed_fields: Some(entries),
        ..ObjectMeta::default()
    }
}

#[test]
fn adoption_patch_relabels_our_update_entry_as_apply() {
    let meta = created(vec![
        entry("kube-controller-manager", "Update", None),
        entry(FIELD_MANAGER, "Update", Some("status")),
        entry(FIELD_MANAGER, "Update", None),
    ]);
    let patch = adoption_patch(&meta).expect("an update entry of ours");
    assert_eq!(patch["metadata"]["uid"], "u1");
    assert_eq!(patch["metadata"]["resourceVersion"], "42");
    let entries = patch["metadata"]["managedFields"]
        .as_array()
        .expect("the whole list: a merge patch replaces lists");
    let ops: Vec<_> = entries
        .iter()
        .map(|e| {
            (
                e["manager"].as_str().unwrap_or_default(),
                e["operation"].as_str().unwrap_or_default(),
                e["subresource"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    // Only ours, on the object itself; other managers and the status
    // subresource's entry untouched.
    assert_eq!(
        ops,
        [
            ("kube-controller-manager", "Update", ""),
            (FIELD_MANAGER, "Update", "status"),
            (FIELD_MANAGER, "Apply", ""),
        ]
    );
}

#[test]
fn adoption_patch_leaves_an_adopted_object_alone() {
    assert_eq!(
        adoption_patch(&created(vec![entry(FIELD_MANAGER, "Apply", None)])),
        None
    );
    // An apply entry of ours exists: a second one would be invalid.
    assert_eq!(
        adoption_patch(&created(vec![
            entry(FIELD_MANAGER, "Apply", None),
            entry(FIELD_MANAGER, "Update", None),
        ])),
        None
    );
    // Another manager's update is not ours to relabel.
    assert_eq!(
        adoption_patch(&created(vec![entry("someone", "Update", None)])),
        None
    );
    let mut bare = created(Vec::new());
    bare.managed_fields = None;
    assert_eq!(adoption_patch(&bare), None);
}

#[test]
fn adoption_patch_needs_both_preconditions() {
    let mut no_uid = created(vec![entry(FIELD_MANAGER, "Update", None)]);
    no_uid.uid = None;
    assert_eq!(adoption_patch(&no_uid), None);
    let mut no_version = created(vec![entry(FIELD_MANAGER, "Update", None)]);
    no_version.resource_version = None;
    assert_eq!(adoption_patch(&no_version), None);
}

#[test]
fn what_is_written_lands_where_its_watch_puts_it_and_a_delete_leaves() {
    let mut local = ClusterData::default();
    let mut local_only = crate::controller::cluster::LocalData::default();
    let import: ServiceImport = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "demo", "uid": "u1"},
        "spec": {"type": "ClusterSetIP", "ports": []},
    }))
    .unwrap();
    Written::Import(Lean::from_whole(&import)).land(&mut local, &mut local_only);
    assert!(local_only.imports.get("demo", "web").is_some());
    let derived: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "derived-x", "namespace": "demo", "uid": "u2"},
    }))
    .unwrap();
    Written::Service(Lean::from_whole(&derived)).land(&mut local, &mut local_only);
    assert!(local.services.get("demo", "derived-x").is_some());

    let deleted = |kind, name: &str| Written::Deleted {
        kind,
        namespace: "demo".into(),
        name: name.into(),
    };
    deleted(Kind::Service, "derived-x").land(&mut local, &mut local_only);
    assert!(local.services.get("demo", "derived-x").is_none());
    assert!(local_only.imports.get("demo", "web").is_some());
    // A status is the import's: deleting either forgets the import.
    deleted(Kind::ServiceImportStatus, "web").land(&mut local, &mut local_only);
    assert!(local_only.imports.get("demo", "web").is_none());
}
