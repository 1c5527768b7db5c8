//! Parsing a multi-document YAML manifest — what one would `kubectl apply` —
//! into index projections. ServiceImports (`v1alpha1` or `v1beta1`),
//! `discovery.k8s.io/v1` EndpointSlices and `kind: List` wrappers are read;
//! Namespaces are accepted silently (a manifest `kubectl apply` can take
//! declares the namespaces it uses); other kinds are skipped and reported. Any invalid object rejects the whole
//! manifest with an error naming the document, the object and the field, so
//! the caller can keep serving its last good index.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::Value;

use crate::api::ServiceImport;
use crate::api::well_known::MCS_GROUP;
use crate::index::{Index, SliceKey};
use crate::model::{ImportedService, ServiceRef, SliceEndpoints};

/// The objects a manifest contributes to the index.
#[derive(Debug, Default, Clone)]
pub struct Manifest {
    /// ServiceImport projections.
    pub imports: Vec<ImportedService>,
    /// EndpointSlice projections with their keys.
    pub slices: Vec<(SliceKey, SliceEndpoints)>,
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
            Update::Whole(manifest) => {
                index.reset_imports(manifest.imports);
                index.reset_slices(manifest.slices);
                manifest.skipped
            }
            Update::Delta(delta) => {
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
                    piece.text,
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
    let (manifest, duplicates) = collect(&documents);
    rejected.extend(duplicates);
    Report { manifest, rejected }
}

/// What one document holds: `(item in a kind: List, object)`.
type DocumentObjects = Arc<[(Option<usize>, Object)]>;

/// One object of a document, projected.
#[derive(Debug)]
enum Object {
    Import(ImportedService),
    Slice(SliceKey, SliceEndpoints),
    /// A `v1` Namespace: nothing to serve, nothing to report. A manifest
    /// meant for `kubectl apply` as well declares the namespaces its
    /// objects live in (the file source serves every namespace anyway).
    Namespace,
    /// Not served by DNS: what it is and why, for the skip report.
    Skipped(String),
}

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
                    Object::Namespace => {}
                }
            }
        }
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

/// The first duplicate object of `documents`, as [`assemble`] reports it,
/// found without copying any object.
fn first_duplicate(documents: &[(usize, DocumentObjects)]) -> Option<ManifestError> {
    let mut imports = HashSet::new();
    let mut slices = HashSet::new();
    for (number, objects) in documents {
        for (item, object) in objects.iter() {
            let (kind, namespace, name) = match object {
                Object::Import(import) if !imports.insert(&import.service) => (
                    "ServiceImport",
                    &import.service.namespace,
                    &import.service.name,
                ),
                Object::Slice(key, _) if !slices.insert(key) => {
                    ("EndpointSlice", &key.namespace, &key.name)
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

/// The error for a document that is not valid YAML, with the file's own
/// line numbers and snippet (found by parsing the whole stream again, which
/// stops at the same place).
fn yaml_error(text: &str, piece: &Piece<'_>, error: serde_saphyr::Error) -> ManifestError {
    let message = serde_saphyr::from_multiple_with_options::<Value>(text, yaml_options(text.len()))
        .err()
        .map_or_else(
            || format!("line {} and after: {error}", piece.first_line),
            |e| e.to_string(),
        );
    ManifestError::Yaml(format!("document {}: {message}", piece.number))
}

/// Projects document `number` (1-based): one object or a `kind: List`.
fn project_document(document: Value, number: usize) -> Result<DocumentObjects, ManifestError> {
    let mut objects = Vec::new();
    if document.is_null() {
        return Ok(objects.into());
    }
    let at = |item| Position {
        document: number,
        item,
    };
    if document.get("kind").and_then(Value::as_str) != Some("List") {
        objects.push((None, project_object(document, at(None))?));
        return Ok(objects.into());
    }
    let items = match document {
        Value::Object(mut map) => map.remove("items"),
        _ => None,
    };
    if let Some(Value::Array(items)) = items {
        for (j, item) in items.into_iter().enumerate() {
            objects.push((Some(j), project_object(item, at(Some(j)))?));
        }
    }
    Ok(objects.into())
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
fn collect(documents: &[(usize, DocumentObjects)]) -> (Manifest, Vec<ManifestError>) {
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
                Object::Skipped(what) => {
                    manifest.skipped.push(format!("document {number}: {what}"))
                }
                Object::Namespace => {}
            }
        }
    }
    (manifest, duplicates)
}

/// One document of a multi-document stream.
#[derive(Debug, PartialEq, Eq)]
struct Piece<'a> {
    /// 1-based document number.
    number: usize,
    /// 1-based line of the file where the document's text starts.
    first_line: usize,
    /// The document's text.
    text: &'a str,
}

/// Splits a YAML stream at its document markers. A line that starts with
/// `---` followed by a space, a tab or the line end, or with `...`, can only
/// be a marker (YAML 1.2 §9.1.2: no content line may start so), so the split
/// is exact; the text after `--- ` on the same line belongs to the new
/// document. Text before the first `---` is a document only if it has
/// content; so is text after a `...`. `None` for a stream with directives
/// (`%YAML`, `%TAG`), which attach to the following document: the caller
/// parses those whole.
fn split_documents(text: &str) -> Option<Vec<Piece<'_>>> {
    let marker = |line: &str, mark: &str| {
        line.strip_prefix(mark)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
    };
    let has_content = |doc: &str| {
        doc.lines().any(|l| {
            let l = l.trim();
            !l.is_empty() && !l.starts_with('#')
        })
    };
    // (start offset, end offset, first line, opened by a `---`)
    let mut spans = Vec::new();
    let (mut start, mut first_line, mut opened) = (0, 1, false);
    let mut offset = 0;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.trim_end_matches(['\n', '\r']);
        // A byte order mark may precede a document (YAML 1.2 §5.2).
        let bom = if bare.starts_with('\u{feff}') {
            '\u{feff}'.len_utf8()
        } else {
            0
        };
        let bare = &bare[bom..];
        if bare.starts_with('%') {
            return None;
        }
        if marker(bare, "---") {
            spans.push((start, offset, first_line, opened));
            // The rest of the marker line (`--- |`, `--- {a: 1}`) opens the document.
            (start, first_line, opened) = (offset + bom + 3, i + 1, true);
        } else if marker(bare, "...") {
            spans.push((start, offset, first_line, opened));
            (start, first_line, opened) = (offset + line.len(), i + 2, false);
        }
        offset += line.len();
    }
    spans.push((start, text.len(), first_line, opened));
    let mut pieces = Vec::new();
    for (from, to, first_line, opened) in spans {
        let doc = &text[from..to];
        if opened || has_content(doc) {
            pieces.push(Piece {
                number: pieces.len() + 1,
                first_line,
                text: doc,
            });
        }
    }
    Some(pieces)
}

/// Parser limits for `len` bytes of YAML, proportional to it: what the
/// text can hold without aliases, so that an alias bomb (a few kilobytes
/// of anchors referring to anchors) stops once it has expanded to about
/// the size of an honest document of the same length, and memory stays
/// within a small multiple of the file's size. Counted per parse: a
/// document of a split stream gets the budget of its own length.
///
/// Written out, YAML takes at least a byte per node (`[a,b]`: 3 nodes in 5
/// bytes) and scalars decode to no more bytes than they are written in;
/// tags (`!!str` is `tag:yaml.org,2002:str`) and a few forms like `[:]`
/// (4 nodes in 3 bytes) give a little more, hence the factors and the
/// constant floor for small documents.
fn yaml_options(len: usize) -> serde_saphyr::Options {
    /// Room for the smallest documents (and their tags).
    const FLOOR: usize = 64 * 1024;
    let mut budget = serde_saphyr::Budget::default();
    budget.max_documents = 1_000_000;
    budget.max_nodes = 2 * len + FLOOR;
    budget.max_events = 4 * len + FLOOR;
    budget.max_total_scalar_bytes = 4 * len + FLOOR;
    budget.max_aliases = len / 2 + 100;
    budget.max_recorded_anchor_events = 2 * len + FLOOR;
    budget.max_recorded_anchor_bytes = 4 * len + FLOOR;
    budget.max_reader_input_bytes = Some(len + 1);
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    // YAML 1.2 booleans: a namespace called `n` or `no` stays a string.
    options.strict_booleans = true;
    options
}

#[derive(Clone, Copy)]
struct Position {
    document: usize,
    item: Option<usize>,
}

/// Kubernetes reads these fields as strings whatever YAML infers (kubectl
/// decodes into typed structs); decoding through a generic value does not,
/// so numbers and booleans there are turned back into their text:
/// `version: 1.2` in labels, a namespace called `123`.
fn stringify_string_fields(object: &mut Value) {
    fn text(v: &mut Value) {
        match v {
            Value::Number(n) => *v = Value::String(n.to_string()),
            Value::Bool(b) => *v = Value::String(b.to_string()),
            _ => {}
        }
    }
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in ["name", "namespace", "generateName"] {
            if let Some(v) = meta.get_mut(key) {
                text(v);
            }
        }
        for key in ["labels", "annotations"] {
            if let Some(map) = meta.get_mut(key).and_then(Value::as_object_mut) {
                map.values_mut().for_each(text);
            }
        }
    }
    if let Some(endpoints) = object.get_mut("endpoints").and_then(Value::as_array_mut) {
        for endpoint in endpoints {
            if let Some(h) = endpoint.get_mut("hostname") {
                text(h);
            }
        }
    }
}

/// Rejects a field of `input` that `decoded` (what `input` decoded into)
/// does not have, naming it as `kubectl apply` does: the typed decoding
/// drops unknown fields silently, so `ip:` for `ips:` would otherwise leave
/// a service without addresses and without an error. Found by encoding
/// `decoded` again and comparing; empty values (`null`, `[]`, `{}`) are
/// not compared, because encoding leaves out empty optional fields.
fn reject_unknown_fields(input: &Value, decoded: &impl serde::Serialize) -> Result<(), String> {
    fn empty(value: &Value) -> bool {
        match value {
            Value::Null => true,
            Value::Array(items) => items.is_empty(),
            Value::Object(map) => map.is_empty(),
            _ => false,
        }
    }
    fn walk(input: &Value, known: &Value, path: &mut String) -> bool {
        match (input, known) {
            (Value::Object(input), Value::Object(known)) => input.iter().any(|(key, value)| {
                let len = path.len();
                if len > 0 {
                    path.push('.');
                }
                path.push_str(key);
                let unknown = match known.get(key) {
                    Some(known) => walk(value, known, path),
                    None => !empty(value),
                };
                if !unknown {
                    path.truncate(len);
                }
                unknown
            }),
            (Value::Array(input), Value::Array(known)) => {
                input
                    .iter()
                    .zip(known)
                    .enumerate()
                    .any(|(i, (value, known))| {
                        let len = path.len();
                        path.push_str(&format!("[{i}]"));
                        let unknown = walk(value, known, path);
                        if !unknown {
                            path.truncate(len);
                        }
                        unknown
                    })
            }
            _ => false,
        }
    }
    let known = serde_json::to_value(decoded).expect("API objects encode as JSON");
    let mut path = String::new();
    match walk(input, &known, &mut path) {
        true => Err(format!("unknown field {path:?}")),
        false => Ok(()),
    }
}

/// Validates and projects one object; duplicates are checked by [`assemble`].
fn project_object(mut object: Value, at: Position) -> Result<Object, ManifestError> {
    stringify_string_fields(&mut object);
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let meta = |field: &str| {
        object
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let namespace = meta("namespace").unwrap_or_else(|| "default".into());
    let name = meta("name").unwrap_or_default();
    let fail = |message: String| ManifestError::Object {
        document: at.document,
        item: at.item,
        kind: if kind.is_empty() {
            "object".into()
        } else {
            kind.clone()
        },
        name: format!("{namespace}/{name}"),
        message,
    };
    if kind.is_empty() || api_version.is_empty() {
        return Err(fail("apiVersion and kind are required".into()));
    }
    if name.is_empty() {
        return Err(fail("metadata.name is required".into()));
    }
    let (group, version) = api_version
        .rsplit_once('/')
        .unwrap_or(("", api_version.as_str()));
    match (group, version, kind.as_str()) {
        (MCS_GROUP, "v1alpha1" | "v1beta1", "ServiceImport") => {
            // Both versions share one schema, so both decode into the v1beta1 type.
            let import: ServiceImport =
                serde_path_to_error::deserialize(&object).map_err(|e| fail(e.to_string()))?;
            reject_unknown_fields(&object, &import).map_err(fail)?;
            let projected = ImportedService::from_api(&import).map_err(|e| fail(e.to_string()))?;
            Ok(Object::Import(projected))
        }
        ("discovery.k8s.io", "v1", "EndpointSlice") => {
            let slice: EndpointSlice =
                serde_path_to_error::deserialize(&object).map_err(|e| fail(e.to_string()))?;
            reject_unknown_fields(&object, &slice).map_err(fail)?;
            Ok(
                match SliceEndpoints::from_api(&slice).map_err(|e| fail(e.to_string()))? {
                    Some(projected) => Object::Slice(SliceKey { namespace, name }, projected),
                    None => Object::Skipped(format!(
                        "EndpointSlice {namespace}/{name} (not an imported slice, or FQDN addresses)"
                    )),
                },
            )
        }
        ("", "v1", "Namespace") => Ok(Object::Namespace),
        _ => Ok(Object::Skipped(format!(
            "{api_version} {kind} {namespace}/{name} (not served by DNS)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {name: web, namespace: prod}
spec:
  type: ClusterSetIP
  ips: [10.42.0.1, "fd00::1"]
  ports: [{name: http, protocol: TCP, port: 80}]
---
apiVersion: v1
kind: List
items:
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: web-a
    namespace: prod
    labels:
      multicluster.kubernetes.io/service-name: web
      multicluster.kubernetes.io/source-cluster: cluster-a
  addressType: IPv4
  endpoints: [{addresses: [10.1.0.1]}]
- apiVersion: multicluster.x-k8s.io/v1alpha1
  kind: ServiceExport
  metadata: {name: web, namespace: prod}
"#;

    #[test]
    fn reads_imports_slices_and_lists() {
        let m = parse(GOOD).unwrap();
        assert_eq!(m.imports.len(), 1);
        assert_eq!(m.slices.len(), 1);
        assert_eq!(m.slices[0].1.cluster, "cluster-a");
        assert_eq!(m.skipped.len(), 1, "{:?}", m.skipped);
    }

    /// Namespace documents (what makes a manifest applicable with kubectl
    /// on a cluster without them) are neither served nor reported as
    /// skipped, also inside a List; `check` then has nothing to complain about.
    #[test]
    fn namespaces_are_accepted_without_a_skip() {
        let namespaces = "apiVersion: v1\nkind: Namespace\nmetadata: {name: prod}\n---\n\
            apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Namespace, metadata: {name: other}}\n---\n";
        let text = format!("{namespaces}{GOOD}");
        let m = parse(&text).unwrap();
        assert_eq!((m.imports.len(), m.slices.len()), (1, 1));
        assert_eq!(
            m.skipped.len(),
            1,
            "only the ServiceExport: {:?}",
            m.skipped
        );
        let report = check(&text);
        assert!(report.rejected.is_empty(), "{:?}", report.rejected);
        assert_eq!(report.manifest.skipped, m.skipped);
        // Only the core v1 kind: a look-alike of another group is skipped.
        let other = text.replacen(
            "apiVersion: v1\nkind: Namespace",
            "apiVersion: example.com/v1\nkind: Namespace",
            1,
        );
        assert_eq!(parse(&other).unwrap().skipped.len(), 2);
    }

    #[test]
    fn a_bad_ip_names_document_object_and_field() {
        let text = GOOD.replace("fd00::1", "fd00::zz");
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains("document 1"), "{err}");
        assert!(err.contains("ServiceImport prod/web"), "{err}");
        assert!(err.contains("spec.ips[1]"), "{err}");
    }

    #[test]
    fn a_wrongly_typed_field_names_its_path() {
        let text = GOOD.replace("port: 80", "port: eighty");
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains("spec.ports[0].port"), "{err}");
    }

    #[test]
    fn a_slice_without_source_cluster_is_rejected_in_its_list_item() {
        let text = GOOD.replace(
            "      multicluster.kubernetes.io/source-cluster: cluster-a\n",
            "",
        );
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains("document 2 item 0"), "{err}");
        assert!(err.contains("source-cluster"), "{err}");
    }

    #[test]
    fn an_unknown_field_names_document_object_and_path() {
        let text = GOOD.replace("ips: [", "ip: [");
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains("document 1"), "{err}");
        assert!(err.contains("ServiceImport prod/web"), "{err}");
        assert!(err.contains("unknown field \"spec.ip\""), "{err}");
        let text = GOOD.replace(
            "endpoints: [{addresses:",
            "endpoints: [{adresses: [x], addresses:",
        );
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains("document 2 item 0"), "{err}");
        assert!(
            err.contains("unknown field \"endpoints[0].adresses\""),
            "{err}"
        );
        let text = GOOD.replace(
            "metadata: {name: web, namespace: prod}",
            "metadata: {name: web, namespace: prod, lables: {a: b}}",
        );
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains("unknown field \"metadata.lables\""), "{err}");
        // Empty values of known optional fields are not unknown.
        let text = GOOD.replace(
            "ports: [{name: http",
            "ipFamilies: []\n  sessionAffinity: null\n  ports: [{name: http",
        );
        parse(&text).unwrap();
        // Kinds DNS does not read are skipped, not checked.
        parse(&GOOD.replace("kind: ServiceExport", "kind: ServiceExport\n  bogus: 1")).unwrap();
    }

    #[test]
    fn crd_limits_name_the_field() {
        let text = GOOD.replace(
            r#"ips: [10.42.0.1, "fd00::1"]"#,
            "ips: [10.42.0.1, 10.42.0.2]",
        );
        let err = parse(&text).unwrap_err().to_string();
        assert!(
            err.contains("ServiceImport prod/web: spec.ips: at most one address per IP family"),
            "{err}"
        );
        let text = GOOD.replace(
            r#"ips: [10.42.0.1, "fd00::1"]"#,
            r#"ips: [10.42.0.1, "fd00::1", 10.42.0.2]"#,
        );
        let err = parse(&text).unwrap_err().to_string();
        assert!(
            err.contains("spec.ips: 3 items, at most 2 allowed"),
            "{err}"
        );
        let text = GOOD.replace(
            "endpoints: [{addresses: [10.1.0.1]}]",
            "endpoints: [{addresses: []}]",
        );
        let err = parse(&text).unwrap_err().to_string();
        assert!(
            err.contains("endpoints[0].addresses: at least one address"),
            "{err}"
        );
    }

    #[test]
    fn check_reports_every_rejected_document() {
        let doc = GOOD.split("---").next().unwrap();
        let text = format!(
            "{}---{}---\nkind: [unclosed\n---{}---{doc}",
            doc.replace("ips: [", "ip: ["),
            doc.replace("name: web", "name: ok"),
            doc.replace("name: web", "name: other")
                .replace("port: 80", "port: x"),
        );
        let report = check(&text);
        let rejected: Vec<String> = report.rejected.iter().map(ToString::to_string).collect();
        assert_eq!(rejected.len(), 3, "{rejected:#?}");
        assert!(
            rejected[0].starts_with("document 1:") && rejected[0].contains("spec.ip"),
            "{rejected:#?}"
        );
        assert!(rejected[1].contains("document 3"), "{rejected:#?}");
        assert!(rejected[2].starts_with("document 4:"), "{rejected:#?}");
        // Document 5 is served: document 1, the same service, was rejected.
        let served: Vec<_> = report
            .manifest
            .imports
            .iter()
            .map(|i| i.service.name.as_str())
            .collect();
        assert_eq!(served, ["ok", "web"]);
        // Duplicates are reported too, and the good manifest has no problem.
        let report = check(&format!("{doc}---{doc}"));
        assert_eq!(report.rejected.len(), 1);
        assert!(report.rejected[0].to_string().contains("duplicate"));
        assert!(check(GOOD).rejected.is_empty());
    }

    #[test]
    fn broken_yaml_is_an_error() {
        assert!(matches!(
            parse("kind: [unclosed"),
            Err(ManifestError::Yaml(_))
        ));
    }

    #[test]
    fn duplicate_imports_are_rejected() {
        let doc = GOOD.split("---").next().unwrap();
        let err = parse(&format!("{doc}---{doc}")).unwrap_err().to_string();
        assert!(err.contains("duplicate"), "{err}");
    }

    #[test]
    fn yaml_1_1_booleans_and_numbers_in_string_fields_stay_strings() {
        let text = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: s\n  namespace: no\n  labels:\n    multicluster.kubernetes.io/service-name: web\n    multicluster.kubernetes.io/source-cluster: on\n    app.kubernetes.io/version: 1.2\naddressType: IPv4\nendpoints: [{addresses: [10.0.0.1], hostname: 7}]\n";
        let m = parse(text).unwrap();
        let (key, slice) = &m.slices[0];
        assert_eq!(key.namespace, "no");
        assert_eq!(slice.cluster, "on");
        assert_eq!(slice.endpoints[0].hostname.as_deref(), Some("7"));
    }

    #[test]
    fn manifests_larger_than_the_yaml_parser_defaults_load() {
        // serde-saphyr stops at 1,024 documents by default.
        let mut text = String::new();
        for i in 0..3000 {
            text.push_str(&format!(
                "---\napiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceImport\nmetadata: {{name: s{i}, namespace: n}}\nspec: {{type: Headless, ports: []}}\n"
            ));
        }
        assert_eq!(parse(&text).unwrap().imports.len(), 3000);
    }

    fn texts(text: &str) -> Vec<(usize, usize, &str)> {
        split_documents(text)
            .expect("no directives")
            .into_iter()
            .map(|p| (p.number, p.first_line, p.text))
            .collect()
    }

    #[test]
    fn documents_split_at_markers_only() {
        assert_eq!(texts("a: 1\n"), [(1, 1, "a: 1\n")]);
        // A leading `---` opens the first document; comments before it are not one.
        assert_eq!(texts("# c\n---\na: 1\n"), [(1, 2, "\na: 1\n")]);
        assert_eq!(
            texts("a: 1\n---\nb: 2\n--- {c: 3}\n"),
            [(1, 1, "a: 1\n"), (2, 2, "\nb: 2\n"), (3, 4, " {c: 3}\n")]
        );
        // `----` and indented or quoted dashes are content, not markers.
        assert_eq!(
            texts("a: |\n  ---\nb: \"---\"\n----: x\n"),
            [(1, 1, "a: |\n  ---\nb: \"---\"\n----: x\n")]
        );
        // `...` ends a document; only content after it makes another.
        assert_eq!(
            texts("a: 1\n...\n# c\n---\nb: 2\n"),
            [(1, 1, "a: 1\n"), (2, 4, "\nb: 2\n")]
        );
        assert!(split_documents("%YAML 1.2\n---\na: 1\n").is_none());
        // Also behind a byte order mark.
        assert!(split_documents("\u{feff}%YAML 1.2\n---\na: 1\n").is_none());
    }

    #[test]
    fn empty_documents_count_in_numbering() {
        let doc = GOOD.split("---").next().unwrap();
        let bad = doc.replace("port: 80", "port: x");
        let err = parse(&format!("{doc}---\n---\n{bad}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("document 3"), "{err}");
    }

    #[test]
    fn directives_parse_whole() {
        let text = format!("%YAML 1.2\n---\n{}", GOOD.trim_start());
        let m = parse(&text).unwrap();
        assert_eq!((m.imports.len(), m.slices.len()), (1, 1));
        // A byte order mark (as some Windows editors save) changes nothing.
        let m = parse(&format!("\u{feff}{text}")).unwrap();
        assert_eq!((m.imports.len(), m.slices.len()), (1, 1));
        let m = parse(&format!("\u{feff}---\n{}", GOOD.trim_start())).unwrap();
        assert_eq!((m.imports.len(), m.slices.len()), (1, 1));
    }

    #[test]
    fn a_syntax_error_names_its_document_and_line() {
        let text = format!("{GOOD}---\nkind: [unclosed\n");
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains("document 3: error: line 27 column 7"), "{err}");
    }

    #[test]
    fn a_warm_parser_gives_what_a_cold_parse_gives() {
        let other = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: prod}\n";
        let variants = [
            GOOD.to_string(),
            // A document inserted in front: every number shifts.
            format!("{other}---{GOOD}"),
            // One object changed.
            GOOD.replace("10.1.0.1", "10.1.0.2"),
            GOOD.replace("port: 80", "port: 8080"),
            GOOD.to_string(),
        ];
        let mut parser = Parser::default();
        for text in &variants {
            let warm = parser.parse(text).unwrap();
            let cold = parse(text).unwrap();
            assert_eq!(format!("{warm:?}"), format!("{cold:?}"), "{text}");
        }
        assert_eq!(
            parser.cache.len(),
            2,
            "one entry per document of the last parse"
        );
    }

    #[test]
    fn a_warm_parser_reports_errors_and_duplicates_at_their_current_place() {
        let mut parser = Parser::default();
        parser.parse(GOOD).unwrap();
        let doc = GOOD.split("---").next().unwrap();
        // The same, cached, ServiceImport twice: a duplicate in document 3.
        let err = parser
            .parse(&format!("{GOOD}---{doc}"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("document 3") && err.contains("duplicate"),
            "{err}"
        );
        let err = parser
            .parse(&GOOD.replace("fd00::1", "fd00::zz"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("document 1") && err.contains("spec.ips[1]"),
            "{err}"
        );
        // A failed parse leaves the last good documents cached.
        assert_eq!(parser.cache.len(), 2);
        assert_eq!(parser.parse(GOOD).unwrap().imports.len(), 1);
    }

    /// Six levels of ten aliases over a 10 KB scalar would expand to 10 GB
    /// (16 KB of text): the budget, sized by the document, stops it at a
    /// few times the text's size, with an error that says so.
    #[test]
    fn an_alias_bomb_is_stopped_by_the_budget() {
        let mut text = format!("a0: &a0 \"{}\"\n", "x".repeat(10 * 1024));
        for level in 1..=6 {
            let refs = vec![format!("*a{}", level - 1); 10].join(", ");
            text.push_str(&format!("a{level}: &a{level} [{refs}]\n"));
        }
        let started = std::time::Instant::now();
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains("budget"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        // The same in a stream with a directive, parsed whole.
        let err = parse(&format!("%YAML 1.2\n---\n{text}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("budget"), "{err}");
        // A few aliases, as a hand-written manifest may use, are fine.
        let import = |name: &str, ip: &str, ports: &str| {
            format!(
                "- apiVersion: multicluster.x-k8s.io/v1beta1\n  kind: ServiceImport\n  metadata: {{name: {name}, namespace: prod}}\n  spec: {{type: ClusterSetIP, ips: [{ip}], ports: {ports}}}\n"
            )
        };
        let text = format!(
            "apiVersion: v1\nkind: List\nitems:\n{}{}",
            import(
                "web",
                "10.42.0.1",
                "&ports [{name: http, protocol: TCP, port: 80}]"
            ),
            import("api", "10.42.0.2", "*ports"),
        );
        let m = parse(&text).unwrap();
        assert_eq!(m.imports.len(), 2);
    }
}

/// Mangled manifests, as an editor in mid-save or a bad merge leaves them,
/// through the whole reload path (cached parser, index, zone): every one is
/// accepted or rejected with an error, never a panic.
#[cfg(test)]
mod mangled {
    use super::*;
    use crate::index::Index;
    use crate::zone::ZoneSettings;

    const EXAMPLE: &str = include_str!("../../config/example-clusterset.yaml");
    /// Bytes that mean something to YAML or to our fields.
    const NASTY: &[u8] = b":-[]{}\"'&*!|>#%@,.?\n\t 0123456789abcdefxyz:-";

    /// xorshift64: deterministic, so a failure reproduces.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    fn mangle(text: &str, rng: &mut Rng) -> String {
        let mut bytes = text.as_bytes().to_vec();
        for _ in 0..1 + rng.below(4) {
            // A truncation to nothing leaves nothing to mangle further.
            if bytes.is_empty() {
                break;
            }
            let at = rng.below(bytes.len());
            match rng.below(5) {
                0 => bytes[at] = NASTY[rng.below(NASTY.len())],
                1 => {
                    let end = (at + rng.below(40)).min(bytes.len());
                    bytes.drain(at..end);
                }
                2 => bytes.insert(at, NASTY[rng.below(NASTY.len())]),
                3 => {
                    // Repeat a stretch: duplicated keys, documents, items.
                    let end = (at + rng.below(200)).min(bytes.len());
                    let stretch = bytes[at..end].to_vec();
                    bytes.splice(at..at, stretch);
                }
                _ => bytes.truncate(at),
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Over a sequence of accepted and rejected manifests (mangled,
    /// documents reordered, some parsed whole for a directive), the deltas
    /// of `parse_update` leave the index exactly where replacing it with
    /// each whole manifest does.
    #[test]
    fn deltas_leave_the_index_where_whole_manifests_do() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut parser = Parser::default();
        let settings =
            ZoneSettings::new(hickory_proto::rr::Name::from_ascii("clusterset.local.").unwrap());
        let mut index = Index::new(settings);
        let (mut deltas, mut wholes, mut rejected) = (0, 0, 0);
        for step in 0..600 {
            let mut text = mangle(EXAMPLE, &mut rng);
            if step % 7 == 3 {
                // Documents in another order: no change at all.
                let mut docs: Vec<&str> = EXAMPLE.split("\n---\n").collect();
                let n = docs.len();
                docs.rotate_left(1 + rng.below(n - 1));
                text = docs.join("\n---\n");
            } else if step % 11 == 5 {
                text = format!("%YAML 1.2\n---\n{text}");
            } else if step % 5 == 0 {
                text = EXAMPLE.to_string();
            }
            let update = match parser.parse_update(&text) {
                Ok(update) => update,
                Err(error) => {
                    // The whole parse rejects it too.
                    assert!(parse(&text).is_err(), "{error}");
                    rejected += 1;
                    continue;
                }
            };
            match &update {
                Update::Whole(_) => wholes += 1,
                Update::Delta(_) => deltas += 1,
            }
            update.apply_to(&mut index);
            let whole = parse(&text).expect("the whole parse accepts it too");
            assert_eq!(index.import_count(), whole.imports.len(), "{text}");
            assert_eq!(index.slice_count(), whole.slices.len(), "{text}");
            for import in &whole.imports {
                assert_eq!(index.import(&import.service), Some(import), "{text}");
            }
            for (key, slice) in &whole.slices {
                assert_eq!(index.slice(key), Some(slice), "{text}");
            }
        }
        assert!(
            deltas > 100 && wholes > 20 && rejected > 100,
            "{deltas} deltas, {wholes} whole, {rejected} rejected"
        );
    }

    #[test]
    fn mangled_manifests_are_accepted_or_rejected_never_a_panic() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut parser = Parser::default();
        let mut index = Index::new(ZoneSettings::new(
            hickory_proto::rr::Name::from_ascii("clusterset.local.").unwrap(),
        ));
        let (mut accepted, mut rejected) = (0, 0);
        for _ in 0..800 {
            let text = mangle(EXAMPLE, &mut rng);
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                match parser.parse(&text) {
                    Ok(manifest) => {
                        index.reset_imports(manifest.imports);
                        index.reset_slices(manifest.slices);
                        index.publish();
                        true
                    }
                    Err(_) => false,
                }
            }));
            match result {
                Ok(true) => accepted += 1,
                Ok(false) => rejected += 1,
                Err(_) => panic!("panicked on this manifest:\n{text}"),
            }
        }
        // Both outcomes occur, or the mutations test nothing.
        assert!(
            accepted > 100 && rejected > 100,
            "{accepted} accepted, {rejected} rejected"
        );
    }
}
