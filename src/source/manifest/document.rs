//! The YAML stream split into documents, the parser limits, and syntax
//! errors placed in the file.

use serde_json::Value;

use super::ManifestError;

/// One document of a multi-document stream.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Piece<'a> {
    /// 1-based document number.
    pub(super) number: usize,
    /// 1-based line of the file where the document's text starts.
    pub(super) first_line: usize,
    /// The document's text.
    pub(super) text: &'a str,
}

/// Splits a YAML stream at its document markers. A line that starts with
/// `---` followed by a space, a tab or the line end, or with `...`, can only
/// be a marker (YAML 1.2 §9.1.2: no content line may start so), so the split
/// is exact; the text after `--- ` on the same line belongs to the new
/// document. Text before the first `---` is a document only if it has
/// content; so is text after a `...`. `None` for a stream with directives
/// (`%YAML`, `%TAG`), which attach to the following document: the caller
/// parses those whole.
pub(super) fn split_documents(text: &str) -> Option<Vec<Piece<'_>>> {
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
pub(super) fn yaml_options(len: usize) -> serde_saphyr::Options {
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

/// The error for a document that is not valid YAML, with the file's own
/// line numbers and snippet (found by parsing the whole stream again, which
/// stops at the same place).
pub(super) fn yaml_error(
    text: &str,
    piece: &Piece<'_>,
    error: serde_saphyr::Error,
) -> ManifestError {
    let message = serde_saphyr::from_multiple_with_options::<Value>(text, yaml_options(text.len()))
        .err()
        .map_or_else(
            || format!("line {} and after: {error}", piece.first_line),
            |e| e.to_string(),
        );
    ManifestError::Yaml(format!("document {}: {message}", piece.number))
}
