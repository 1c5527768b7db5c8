//! Parsing a multi-document YAML manifest — what one would `kubectl apply` —
//! into index projections. ServiceImports (`v1alpha1` or `v1beta1`),
//! `discovery.k8s.io/v1` EndpointSlices, the `about.k8s.io` ClusterProperty
//! `cluster.clusterset.k8s.io` (this cluster's id, for local-first answers)
//! and `kind: List` wrappers are read; Namespaces and other
//! ClusterProperties are accepted silently (a manifest `kubectl apply` can
//! take declares the namespaces it uses); other kinds are skipped and
//! reported. Any invalid object rejects the whole
//! manifest with an error naming the document, the object and the field, so
//! the caller can keep serving its last good index.
//!
//! # Layout
//!
//! - this module: what a manifest yields ([`Manifest`], [`Delta`],
//!   [`Update`]), its errors, and the entry points [`parse`] and [`check`]
//!   (the `check` command and the fuzz targets use both);
//! - `parser`: the [`Parser`] with its per-document cache, and the
//!   assembly of documents into a manifest (duplicates rejected);
//! - `document`: the YAML stream split into documents, and the parser
//!   limits that bound what a document may expand to;
//! - `object`: one document's objects decoded, checked (unknown fields,
//!   strings) and projected.

use serde_json::Value;

use crate::api::ServiceRef;
use crate::api::well_known::CLUSTER_ID_PROPERTY;
use crate::index::{Index, SliceKey};
use crate::model::{ImportedService, OwnCluster, SliceEndpoints};

pub use self::document::StreamStop;
use self::document::{split_documents, yaml_error, yaml_options};
use self::object::project_document;
pub use self::parser::Parser;
use self::parser::collect;

mod document;
mod object;
mod parser;

#[cfg(test)]
mod mangled;
#[cfg(test)]
mod tests;

/// The objects a manifest contributes to the index.
#[derive(Debug, Default, Clone)]
pub struct Manifest {
    /// ServiceImport projections.
    pub imports: Vec<ImportedService>,
    /// EndpointSlice projections with their keys.
    pub slices: Vec<(SliceKey, SliceEndpoints)>,
    /// This cluster's id: the value of the ClusterProperty
    /// `cluster.clusterset.k8s.io`, lower-case, if the manifest has one.
    pub cluster_id: Option<String>,
    /// Objects that were skipped, as `document N: Kind ns/name (reason)`.
    pub skipped: Vec<String>,
}

/// What changed between two successful parses of a [`Parser`], by
/// document: bringing an index that holds the previous manifest up to the
/// new one takes these and nothing else.
#[derive(Debug, Default, Clone)]
pub struct Delta {
    /// ServiceImports of new or edited documents (to apply; most differ
    /// from what the index holds, some may not).
    pub imports: Vec<ImportedService>,
    /// EndpointSlices of new or edited documents, with their keys.
    pub slices: Vec<(SliceKey, SliceEndpoints)>,
    /// ServiceImports that are in no document any more.
    pub deleted_imports: Vec<ServiceRef>,
    /// EndpointSlices that are in no document any more.
    pub deleted_slices: Vec<SliceKey>,
    /// The cluster id of the whole new manifest (not only of its changed
    /// documents), as [`Manifest::cluster_id`].
    pub cluster_id: Option<String>,
    /// Objects of the new or edited documents that were skipped.
    pub skipped: Vec<String>,
}

/// The outcome of [`Parser::parse_update`].
#[derive(Debug, Clone)]
pub enum Update {
    /// The whole manifest: the first successful parse, a stream with
    /// directives (parsed whole, without the cache), and the parse after
    /// one. A failed parse changes nothing: the next delta is against the
    /// last successful one.
    Whole(Manifest),
    /// The changes since the last successful parse.
    Delta(Delta),
}

impl Update {
    /// Brings `index` up to the manifest: replaces what it holds with a
    /// whole one, applies a delta (to an index that holds the manifest of
    /// the parse before). Returns the objects skipped.
    pub fn apply_to(self, index: &mut Index) -> Vec<String> {
        match self {
            Self::Whole(manifest) => {
                index.reset_imports(manifest.imports);
                index.reset_slices(manifest.slices);
                index.set_own_cluster(own_cluster(manifest.cluster_id));
                manifest.skipped
            }
            Self::Delta(delta) => {
                index.set_own_cluster(own_cluster(delta.cluster_id));
                for service in &delta.deleted_imports {
                    index.delete_import(service);
                }
                for key in &delta.deleted_slices {
                    index.delete_slice(key);
                }
                for import in delta.imports {
                    index.apply_import(import);
                }
                for (key, slice) in delta.slices {
                    index.apply_slice(key, slice);
                }
                delta.skipped
            }
        }
    }
}

/// What a manifest says of this cluster's id.
fn own_cluster(cluster_id: Option<String>) -> OwnCluster {
    match cluster_id {
        Some(id) => OwnCluster::Known(id),
        None => OwnCluster::Unknown(format!(
            "the manifest has no ClusterProperty {CLUSTER_ID_PROPERTY}"
        )),
    }
}

/// Why a manifest was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The text is not valid YAML.
    #[error("invalid YAML: {0}")]
    Yaml(String),
    /// One object is invalid.
    #[error("document {document}{item}: {kind} {name}: {message}", item = item.map(|i| format!(" item {i}")).unwrap_or_default())]
    Object {
        /// 1-based document number in the file.
        document: usize,
        /// 0-based index inside a `kind: List`.
        item: Option<usize>,
        /// The object's kind.
        kind: String,
        /// `namespace/name`.
        name: String,
        /// Field path and problem.
        message: String,
    },
}

/// Why [`Parser::parse_update_from`] returned no update.
#[derive(Debug)]
pub enum StreamError {
    /// The stream could not be read a document at a time.
    Stopped(StreamStop),
    /// The manifest is invalid (a syntax error placed in its document).
    Manifest(ManifestError),
}

/// Parses `text` (one or more `---`-separated YAML documents).
pub fn parse(text: &str) -> Result<Manifest, ManifestError> {
    Parser::default().parse(text)
}

/// A manifest with every problem in it, not only the first: what `check`
/// reports.
#[derive(Debug, Default)]
pub struct Report {
    /// The objects that would be served.
    pub manifest: Manifest,
    /// Documents and objects that were rejected, in document order
    /// (duplicates last); each document reports its first problem.
    pub rejected: Vec<ManifestError>,
}

/// Parses `text` like [`parse`], but goes on past invalid documents and
/// reports them all.
pub fn check(text: &str) -> Report {
    let mut rejected = Vec::new();
    let mut documents = Vec::new();
    let mut project =
        |document, number, rejected: &mut Vec<_>| match project_document(document, number) {
            Ok(objects) => documents.push((number, objects)),
            Err(error) => rejected.push(error),
        };
    match split_documents(text) {
        Some(pieces) => {
            for piece in pieces {
                match serde_saphyr::from_str_with_options(
                    &piece.text,
                    yaml_options(piece.text.len()),
                ) {
                    Ok(document) => project(document, piece.number, &mut rejected),
                    // Only the first syntax error can be placed by parsing
                    // the whole stream again.
                    Err(error) if !rejected.iter().any(|e| matches!(e, ManifestError::Yaml(_))) => {
                        rejected.push(yaml_error(text, &piece, error));
                    }
                    Err(error) => rejected.push(ManifestError::Yaml(format!(
                        "document {}: line {} and after: {error}",
                        piece.number, piece.first_line
                    ))),
                }
            }
        }
        None => {
            match serde_saphyr::from_multiple_with_options::<Value>(text, yaml_options(text.len()))
            {
                Ok(values) => {
                    for (i, document) in values.into_iter().enumerate() {
                        project(document, i + 1, &mut rejected);
                    }
                }
                Err(error) => rejected.push(ManifestError::Yaml(error.to_string())),
            }
        }
    }
    let (manifest, duplicates) = collect(documents);
    rejected.extend(duplicates);
    Report { manifest, rejected }
}

/// What one document holds: `(item in a kind: List, object)`, without
/// spare capacity (most documents hold one object). The objects move into
/// the manifest or the delta instead of being copied there.
type DocumentObjects = Box<[(Option<usize>, Object)]>;

/// One object of a document, projected.
#[derive(Debug)]
enum Object {
    Import(ImportedService),
    Slice(SliceKey, SliceEndpoints),
    /// A `v1` Namespace: nothing to serve, nothing to report. A manifest
    /// meant for `kubectl apply` as well declares the namespaces its
    /// objects live in (the file source serves every namespace anyway).
    Namespace,
    /// An `about.k8s.io` ClusterProperty: this cluster's id for
    /// `cluster.clusterset.k8s.io` (checked), nothing for another property.
    ClusterProperty(Option<String>),
    /// Not served by DNS: what it is and why, for the skip report.
    Skipped(String),
}
