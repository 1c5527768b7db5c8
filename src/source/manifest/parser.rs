//! The cached [`Parser`] and the assembly of documents into a manifest.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::io::BufRead;
use std::sync::Arc;

use serde_json::Value;

use super::document::{DocumentReader, Piece, split_documents, yaml_error, yaml_options};
use super::object::project_document;
use super::{Delta, DocumentObjects, Manifest, ManifestError, Object, StreamError, Update};
use crate::api::ServiceRef;
use crate::index::SliceKey;

/// Parses manifests, projecting only the documents whose text has changed
/// since the last successful parse: reloading a large file after a small
/// edit parses only the edited documents.
///
/// Documents are parsed one at a time, so the generic YAML value of only one
/// document exists at once: a 20 MB manifest of 10,000 services otherwise
/// takes some 300 MB of parse tree at its peak. The cache keeps, per
/// document (keyed by a hash of its text), only which objects it holds
/// ([`ObjectId`]), never their projections: the index holds those, and a
/// second copy here cost 23 MB at 10,000 services (`cargo bench --bench
/// heap`).
#[derive(Debug, Default)]
pub struct Parser {
    cache: HashMap<DocumentKey, DocumentIds>,
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

/// Which object one item of a document is: all the cache needs to find
/// duplicates, this cluster's id and the objects of documents gone.
#[derive(Debug)]
enum ObjectId {
    Import(ServiceRef),
    Slice(SliceKey),
    /// The ClusterProperty `cluster.clusterset.k8s.io` and its checked id.
    ClusterId(String),
    /// Anything the index does not hold (namespaces, other properties,
    /// skipped objects).
    Other,
}

impl ObjectId {
    fn of(object: &Object) -> Self {
        match object {
            Object::Import(import) => Self::Import(import.service.clone()),
            Object::Slice(key, _) => Self::Slice(key.clone()),
            Object::ClusterProperty(Some(id)) => Self::ClusterId(id.clone()),
            Object::ClusterProperty(None) | Object::Namespace | Object::Skipped(_) => Self::Other,
        }
    }
}

/// The items of one document, as the cache remembers them:
/// `(item in a kind: List, which object)`.
type DocumentIds = Arc<[(Option<usize>, ObjectId)]>;

fn ids_of(objects: &DocumentObjects) -> DocumentIds {
    objects
        .iter()
        .map(|(item, object)| (*item, ObjectId::of(object)))
        .collect()
}

impl Parser {
    /// How many documents the cache holds.
    #[cfg(test)]
    pub(super) fn cached(&self) -> usize {
        self.cache.len()
    }

    /// Forgets the last manifest: the next parse is whole, as the first.
    /// For a caller that does not use what the parser last returned.
    pub fn forget(&mut self) {
        self.cache = HashMap::new();
        self.primed = false;
    }

    /// Parses `text` whole (every document projected) and remembers its
    /// documents for the next [`Parser::parse_update`].
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
            return assemble(parsed);
        };
        match self.update_from(pieces.into_iter().map(Ok), Some(text), true) {
            Ok(Update::Whole(manifest)) => Ok(manifest),
            Ok(Update::Delta(_)) => unreachable!("a whole parse returns the whole manifest"),
            Err(failure) => Err(failure.into_manifest_error()),
        }
    }

    /// Parses `text` like [`Parser::parse`], and returns only what changed
    /// since the last successful parse when it can tell: the objects of
    /// documents whose text is new, and the objects of documents gone that
    /// no new document holds. Assembling the whole manifest would cost time
    /// in proportion to its size for every change.
    pub fn parse_update(&mut self, text: &str) -> Result<Update, ManifestError> {
        match split_documents(text) {
            Some(pieces) => {
                let whole = !self.primed;
                self.update_from(pieces.into_iter().map(Ok), Some(text), whole)
                    .map_err(Failure::into_manifest_error)
            }
            None => self.parse(text).map(Update::Whole),
        }
    }

    /// [`Parser::parse_update`] of a stream read from `reader` a document
    /// at a time, so that the text is never in memory whole (20 MB at
    /// 10,000 services, 224 MB at 100,000). It stops at directives, which
    /// need the stream parsed whole, and a syntax error is placed in its
    /// document only: the caller reads the stream whole and parses it
    /// with [`Parser::parse_update`] then. A failure changes nothing.
    pub fn parse_update_from(&mut self, reader: impl BufRead) -> Result<Update, StreamError> {
        let whole = !self.primed;
        self.update_from(DocumentReader::new(reader), None, whole)
            .map_err(|failure| match failure {
                Failure::Stopped(stop) => StreamError::Stopped(stop),
                Failure::Manifest(error) => StreamError::Manifest(error),
            })
    }

    /// The documents `pieces` yields, parsed one at a time: the whole
    /// manifest if `whole` (and the cache primed with its documents), else
    /// what changed since the last successful parse. `text` is the whole
    /// stream where it is held, to place a syntax error in it.
    fn update_from<'t, E>(
        &mut self,
        pieces: impl Iterator<Item = Result<Piece<'t>, E>>,
        text: Option<&str>,
        whole: bool,
    ) -> Result<Update, Failure<E>> {
        if whole {
            let mut parsed = Vec::new();
            let mut cache = HashMap::new();
            for piece in pieces {
                let piece = piece.map_err(Failure::Stopped)?;
                let objects = parse_piece(text, &piece)?;
                cache.insert(DocumentKey::of(&piece.text), ids_of(&objects));
                parsed.push((piece.number, objects));
            }
            let manifest = assemble(parsed)?;
            self.cache = cache;
            self.primed = true;
            return Ok(Update::Whole(manifest));
        }
        // Every document's ids in order; the objects of the new ones.
        let mut documents = Vec::new();
        let mut new = Vec::new();
        let mut cache = HashMap::new();
        for piece in pieces {
            let piece = piece.map_err(Failure::Stopped)?;
            let key = DocumentKey::of(&piece.text);
            let ids = match self.cache.get(&key) {
                Some(ids) => ids.clone(),
                None => {
                    let objects = parse_piece(text, &piece)?;
                    let ids = ids_of(&objects);
                    new.push((piece.number, objects));
                    ids
                }
            };
            cache.insert(key, ids.clone());
            documents.push((piece.number, ids));
        }
        if let Some(duplicate) = first_duplicate(&documents) {
            return Err(duplicate.into());
        }
        let mut delta = Delta::default();
        let mut applied_imports = HashSet::new();
        let mut applied_slices = HashSet::new();
        for (number, objects) in new {
            for (_, object) in objects.into_vec() {
                match object {
                    Object::Import(import) => {
                        applied_imports.insert(import.service.clone());
                        delta.imports.push(import);
                    }
                    Object::Slice(key, slice) => {
                        applied_slices.insert(key.clone());
                        delta.slices.push((key, slice));
                    }
                    Object::Skipped(what) => {
                        delta.skipped.push(format!("document {number}: {what}"));
                    }
                    Object::Namespace | Object::ClusterProperty(_) => {}
                }
            }
        }
        delta.cluster_id = cluster_id(&documents);
        for (key, ids) in &self.cache {
            if cache.contains_key(key) {
                continue;
            }
            for (_, id) in ids.iter() {
                match id {
                    ObjectId::Import(service) if !applied_imports.contains(service) => {
                        delta.deleted_imports.push(service.clone());
                    }
                    ObjectId::Slice(key) if !applied_slices.contains(key) => {
                        delta.deleted_slices.push(key.clone());
                    }
                    _ => {}
                }
            }
        }
        self.cache = cache;
        Ok(Update::Delta(delta))
    }
}

/// Why [`Parser::update_from`] failed: its pieces stopped, or the
/// manifest is invalid.
enum Failure<E> {
    Stopped(E),
    Manifest(ManifestError),
}

impl<E> From<ManifestError> for Failure<E> {
    fn from(error: ManifestError) -> Self {
        Self::Manifest(error)
    }
}

impl Failure<Infallible> {
    fn into_manifest_error(self) -> ManifestError {
        match self {
            Self::Manifest(error) => error,
            Self::Stopped(never) => match never {},
        }
    }
}

/// One document parsed and projected. A syntax error is placed in the
/// whole stream `text` where it is held, else in the document.
fn parse_piece(text: Option<&str>, piece: &Piece<'_>) -> Result<DocumentObjects, ManifestError> {
    let document: Value =
        serde_saphyr::from_str_with_options(&piece.text, yaml_options(piece.text.len())).map_err(
            |e| match text {
                Some(text) => yaml_error(text, piece, e),
                None => ManifestError::Yaml(format!(
                    "document {}: line {} and after: {e}",
                    piece.number, piece.first_line
                )),
            },
        )?;
    project_document(document, piece.number)
}
/// The cluster id the documents hold (at most one does: a second is a
/// duplicate).
fn cluster_id(documents: &[(usize, DocumentIds)]) -> Option<String> {
    documents
        .iter()
        .flat_map(|(_, ids)| ids.iter())
        .find_map(|(_, id)| match id {
            ObjectId::ClusterId(id) => Some(id.clone()),
            _ => None,
        })
}

/// The `namespace/name` a duplicate ClusterProperty is reported as
/// (cluster-scoped: the manifest's default namespace, as for any object).
const CLUSTER_ID_OBJECT: (&str, &str) = ("default", crate::api::well_known::CLUSTER_ID_PROPERTY);

/// The first duplicate object of `documents`, as [`assemble`] reports it,
/// found without copying any object.
fn first_duplicate(documents: &[(usize, DocumentIds)]) -> Option<ManifestError> {
    let mut imports = HashSet::new();
    let mut slices = HashSet::new();
    let mut cluster_id = false;
    for (number, ids) in documents {
        for (item, id) in ids.iter() {
            let (kind, namespace, name) = match id {
                ObjectId::Import(service) if !imports.insert(service) => {
                    ("ServiceImport", &*service.namespace, &*service.name)
                }
                ObjectId::Slice(key) if !slices.insert(key) => {
                    ("EndpointSlice", &*key.namespace, &*key.name)
                }
                ObjectId::ClusterId(_) if std::mem::replace(&mut cluster_id, true) => {
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
fn assemble(documents: Vec<(usize, DocumentObjects)>) -> Result<Manifest, ManifestError> {
    let (manifest, mut duplicates) = collect(documents);
    match duplicates.is_empty() {
        true => Ok(manifest),
        false => Err(duplicates.swap_remove(0)),
    }
}

/// Moves the documents' objects into one manifest, in order; a duplicate
/// is left out and reported.
pub(super) fn collect(documents: Vec<(usize, DocumentObjects)>) -> (Manifest, Vec<ManifestError>) {
    let mut duplicates = Vec::new();
    let mut manifest = Manifest::default();
    let mut seen_imports = HashSet::new();
    let mut seen_slices = HashSet::new();
    for (number, objects) in documents {
        for (item, object) in objects.into_vec() {
            let duplicate = |kind: &str, namespace: &str, name: &str| ManifestError::Object {
                document: number,
                item,
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
                    manifest.imports.push(import);
                }
                Object::Slice(key, slice) => {
                    if !seen_slices.insert(key.clone()) {
                        duplicates.push(duplicate("EndpointSlice", &key.namespace, &key.name));
                        continue;
                    }
                    manifest.slices.push((key, slice));
                }
                Object::ClusterProperty(Some(id)) => {
                    if manifest.cluster_id.is_some() {
                        let (namespace, name) = CLUSTER_ID_OBJECT;
                        duplicates.push(duplicate("ClusterProperty", namespace, name));
                        continue;
                    }
                    manifest.cluster_id = Some(id);
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
