//! The cached [`Parser`] and the assembly of documents into a manifest.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::document::{Piece, split_documents, yaml_error, yaml_options};
use super::object::project_document;
use super::{Delta, DocumentObjects, Manifest, ManifestError, Object, Update};

/// Parses manifests, reusing the objects of documents whose text has not
/// changed since the last successful parse: reloading a large file after a
/// small edit parses only the edited documents.
///
/// Documents are parsed one at a time, so the generic YAML value of only one
/// document exists at once: a 20 MB manifest of 10,000 services otherwise
/// takes some 300 MB of parse tree at its peak. The cache keeps the
/// projections of the last good manifest (about 25 MB at 10,000 services and
/// 100,000 endpoints), keyed by a hash of each document's text.
#[derive(Debug, Default)]
pub struct Parser {
    cache: HashMap<DocumentKey, DocumentObjects>,
    /// The cache holds exactly the documents of the last manifest this
    /// parser returned (false before the first, and after a stream parsed
    /// whole), so [`Parser::parse_update`] can tell what changed.
    primed: bool,
}

/// A document's text, identified by its length and two independent 64-bit
/// hashes (a collision would need both to collide at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct DocumentKey(usize, u64, u64);

impl DocumentKey {
    fn of(text: &str) -> Self {
        use std::hash::BuildHasher;
        let hash = |seed| foldhash::quality::FixedState::with_seed(seed).hash_one(text);
        Self(
            text.len(),
            hash(0x6d63_735f_646e_7301),
            hash(0x0d0c_0b0a_0908_0706),
        )
    }
}

impl Parser {
    /// How many documents the cache holds.
    #[cfg(test)]
    pub(super) fn cached(&self) -> usize {
        self.cache.len()
    }

    /// Parses `text`; documents seen in the last successful parse are not
    /// parsed again.
    pub fn parse(&mut self, text: &str) -> Result<Manifest, ManifestError> {
        let Some(pieces) = split_documents(text) else {
            self.primed = false;
            // Directives: parse the stream whole, without the cache.
            let documents: Vec<Value> =
                serde_saphyr::from_multiple_with_options(text, yaml_options(text.len()))
                    .map_err(|e| ManifestError::Yaml(e.to_string()))?;
            let mut parsed = Vec::with_capacity(documents.len());
            for (i, document) in documents.into_iter().enumerate() {
                parsed.push((i + 1, project_document(document, i + 1)?));
            }
            return assemble(&parsed);
        };
        let (parsed, _, cache) = self.parse_pieces(text, pieces)?;
        let manifest = assemble(&parsed)?;
        self.cache = cache;
        self.primed = true;
        Ok(manifest)
    }

    /// Parses `text` like [`Parser::parse`], and returns only what changed
    /// since the last successful parse when it can tell: the objects of
    /// documents whose text is new, and the objects of documents gone that
    /// no new document holds. Assembling the whole manifest would cost time
    /// in proportion to its size for every change.
    pub fn parse_update(&mut self, text: &str) -> Result<Update, ManifestError> {
        let pieces = match split_documents(text) {
            Some(pieces) if self.primed => pieces,
            _ => return self.parse(text).map(Update::Whole),
        };
        let (parsed, keys, cache) = self.parse_pieces(text, pieces)?;
        if let Some(duplicate) = first_duplicate(&parsed) {
            return Err(duplicate);
        }
        let mut delta = Delta::default();
        let mut applied_imports = HashSet::new();
        let mut applied_slices = HashSet::new();
        for ((number, objects), key) in parsed.iter().zip(&keys) {
            // A document is new when the last manifest had no such text;
            // one that moved keeps its objects.
            if self.cache.contains_key(key) {
                continue;
            }
            for (_, object) in objects.iter() {
                match object {
                    Object::Import(import) => {
                        applied_imports.insert(&import.service);
                        delta.imports.push(import.clone());
                    }
                    Object::Slice(key, slice) => {
                        applied_slices.insert(key);
                        delta.slices.push((key.clone(), slice.clone()));
                    }
                    Object::Skipped(what) => {
                        delta.skipped.push(format!("document {number}: {what}"));
                    }
                    Object::Namespace | Object::ClusterProperty(_) => {}
                }
            }
        }
        delta.cluster_id = cluster_id(&parsed);
        for (key, objects) in &self.cache {
            if cache.contains_key(key) {
                continue;
            }
            for (_, object) in objects.iter() {
                match object {
                    Object::Import(import) if !applied_imports.contains(&import.service) => {
                        delta.deleted_imports.push(import.service.clone());
                    }
                    Object::Slice(key, _) if !applied_slices.contains(key) => {
                        delta.deleted_slices.push(key.clone());
                    }
                    _ => {}
                }
            }
        }
        self.cache = cache;
        Ok(Update::Delta(delta))
    }

    /// Parses each document that is not in the cache; returns every
    /// document's objects and key in order, and the cache of this text.
    fn parse_pieces(&self, text: &str, pieces: Vec<Piece<'_>>) -> Result<Pieces, ManifestError> {
        let mut parsed = Vec::with_capacity(pieces.len());
        let mut keys = Vec::with_capacity(pieces.len());
        let mut cache = HashMap::with_capacity(pieces.len());
        for piece in pieces {
            let key = DocumentKey::of(piece.text);
            let objects = match self.cache.get(&key) {
                Some(objects) => objects.clone(),
                None => {
                    let document: Value = serde_saphyr::from_str_with_options(
                        piece.text,
                        yaml_options(piece.text.len()),
                    )
                    .map_err(|e| yaml_error(text, &piece, e))?;
                    project_document(document, piece.number)?
                }
            };
            cache.insert(key, objects.clone());
            keys.push(key);
            parsed.push((piece.number, objects));
        }
        Ok((parsed, keys, cache))
    }
}

/// The documents of a text: `(number, objects)` and key of each, in order,
/// and the cache they make.
type Pieces = (
    Vec<(usize, DocumentObjects)>,
    Vec<DocumentKey>,
    HashMap<DocumentKey, DocumentObjects>,
);

/// The cluster id the documents hold (at most one does: a second is a
/// duplicate).
fn cluster_id(documents: &[(usize, DocumentObjects)]) -> Option<String> {
    documents
        .iter()
        .flat_map(|(_, objects)| objects.iter())
        .find_map(|(_, object)| match object {
            Object::ClusterProperty(Some(id)) => Some(id.clone()),
            _ => None,
        })
}

/// The `namespace/name` a duplicate ClusterProperty is reported as
/// (cluster-scoped: the manifest's default namespace, as for any object).
const CLUSTER_ID_OBJECT: (&str, &str) = ("default", crate::api::well_known::CLUSTER_ID_PROPERTY);

/// The first duplicate object of `documents`, as [`assemble`] reports it,
/// found without copying any object.
fn first_duplicate(documents: &[(usize, DocumentObjects)]) -> Option<ManifestError> {
    let mut imports = HashSet::new();
    let mut slices = HashSet::new();
    let mut cluster_id = false;
    for (number, objects) in documents {
        for (item, object) in objects.iter() {
            let (kind, namespace, name) = match object {
                Object::Import(import) if !imports.insert(&import.service) => (
                    "ServiceImport",
                    import.service.namespace.as_str(),
                    import.service.name.as_str(),
                ),
                Object::Slice(key, _) if !slices.insert(key) => {
                    ("EndpointSlice", key.namespace.as_str(), key.name.as_str())
                }
                Object::ClusterProperty(Some(_)) if std::mem::replace(&mut cluster_id, true) => {
                    ("ClusterProperty", CLUSTER_ID_OBJECT.0, CLUSTER_ID_OBJECT.1)
                }
                _ => continue,
            };
            return Some(ManifestError::Object {
                document: *number,
                item: *item,
                kind: kind.into(),
                name: format!("{namespace}/{name}"),
                message: format!("duplicate {kind}"),
            });
        }
    }
    None
}

/// Collects the documents' objects in order, rejecting duplicates.
fn assemble(documents: &[(usize, DocumentObjects)]) -> Result<Manifest, ManifestError> {
    let (manifest, mut duplicates) = collect(documents);
    match duplicates.is_empty() {
        true => Ok(manifest),
        false => Err(duplicates.swap_remove(0)),
    }
}

/// Collects the documents' objects in order; a duplicate is left out and
/// reported.
pub(super) fn collect(documents: &[(usize, DocumentObjects)]) -> (Manifest, Vec<ManifestError>) {
    let mut duplicates = Vec::new();
    let mut manifest = Manifest::default();
    let mut seen_imports = HashSet::new();
    let mut seen_slices = HashSet::new();
    for (number, objects) in documents {
        for (item, object) in objects.iter() {
            let duplicate = |kind: &str, namespace: &str, name: &str| ManifestError::Object {
                document: *number,
                item: *item,
                kind: kind.into(),
                name: format!("{namespace}/{name}"),
                message: format!("duplicate {kind}"),
            };
            match object {
                Object::Import(import) => {
                    if !seen_imports.insert(import.service.clone()) {
                        let service = &import.service;
                        duplicates.push(duplicate(
                            "ServiceImport",
                            &service.namespace,
                            &service.name,
                        ));
                        continue;
                    }
                    manifest.imports.push(import.clone());
                }
                Object::Slice(key, slice) => {
                    if !seen_slices.insert(key.clone()) {
                        duplicates.push(duplicate("EndpointSlice", &key.namespace, &key.name));
                        continue;
                    }
                    manifest.slices.push((key.clone(), slice.clone()));
                }
                Object::ClusterProperty(Some(id)) => {
                    if manifest.cluster_id.is_some() {
                        let (namespace, name) = CLUSTER_ID_OBJECT;
                        duplicates.push(duplicate("ClusterProperty", namespace, name));
                        continue;
                    }
                    manifest.cluster_id = Some(id.clone());
                }
                Object::Skipped(what) => {
                    manifest.skipped.push(format!("document {number}: {what}"))
                }
                Object::Namespace | Object::ClusterProperty(None) => {}
            }
        }
    }
    (manifest, duplicates)
}
