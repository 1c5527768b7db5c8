//! The YAML stream split into documents, the parser limits, and syntax
//! errors placed in the file.

use std::borrow::Cow;
use std::io::BufRead;

use serde_json::Value;

use super::ManifestError;

/// One document of a multi-document stream.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Piece<'a> {
    /// 1-based document number.
    pub(super) number: usize,
    /// 1-based line of the file where the document's text starts.
    pub(super) first_line: usize,
    /// The document's text: borrowed from a stream held whole, owned when
    /// read a document at a time ([`DocumentReader`]).
    pub(super) text: Cow<'a, str>,
}

/// What one line (with its line end) is to the split.
enum Line {
    /// `%YAML`, `%TAG`: attaches to the following document.
    Directive,
    /// `---`: opens a document, whose text starts at this byte of the line
    /// (`--- |`, `--- {a: 1}`: the rest of the line is content).
    Opens(usize),
    /// `...`: ends the document.
    Closes,
    Content,
}

/// A line that starts with `---` followed by a space, a tab or the line
/// end, or with `...`, can only be a marker (YAML 1.2 §9.1.2: no content
/// line may start so), so the split is exact.
fn classify(line: &str) -> Line {
    let marker = |line: &str, mark: &str| {
        line.strip_prefix(mark)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
    };
    let bare = line.trim_end_matches(['\n', '\r']);
    // A byte order mark may precede a document (YAML 1.2 §5.2).
    let bom = if bare.starts_with('\u{feff}') {
        '\u{feff}'.len_utf8()
    } else {
        0
    };
    let bare = &bare[bom..];
    if bare.starts_with('%') {
        Line::Directive
    } else if marker(bare, "---") {
        Line::Opens(bom + 3)
    } else if marker(bare, "...") {
        Line::Closes
    } else {
        Line::Content
    }
}

/// Text before the first `---`, or after a `...`, is a document only if it
/// has content.
fn has_content(doc: &str) -> bool {
    doc.lines().any(|l| {
        let l = l.trim();
        !l.is_empty() && !l.starts_with('#')
    })
}

/// Splits a YAML stream at its document markers ([`classify`]); the text
/// after `--- ` on the same line belongs to the new document. `None` for a
/// stream with directives (`%YAML`, `%TAG`), which attach to the following
/// document: the caller parses those whole.
pub(super) fn split_documents(text: &str) -> Option<Vec<Piece<'_>>> {
    // (start offset, end offset, first line, opened by a `---`)
    let mut spans = Vec::new();
    let (mut start, mut first_line, mut opened) = (0, 1, false);
    let mut offset = 0;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        match classify(line) {
            Line::Directive => return None,
            Line::Opens(at) => {
                spans.push((start, offset, first_line, opened));
                (start, first_line, opened) = (offset + at, i + 1, true);
            }
            Line::Closes => {
                spans.push((start, offset, first_line, opened));
                (start, first_line, opened) = (offset + line.len(), i + 2, false);
            }
            Line::Content => {}
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
                text: Cow::Borrowed(doc),
            });
        }
    }
    Some(pieces)
}

/// Why a stream read a document at a time stopped before its end.
#[derive(Debug)]
pub enum StreamStop {
    /// Reading failed (or the text is not UTF-8).
    Read(std::io::Error),
    /// The stream has directives: it must be parsed whole.
    Directives,
}

/// The documents of a YAML stream read from `reader` one at a time, split
/// as [`split_documents`] splits a stream held whole: only one document's
/// text is in memory at once.
pub(super) struct DocumentReader<R> {
    reader: R,
    line: String,
    /// The document being read: its text, first line, whether a `---`
    /// opened it.
    current: String,
    first_line: usize,
    opened: bool,
    lines: usize,
    documents: usize,
    done: bool,
}

impl<R: BufRead> DocumentReader<R> {
    pub(super) fn new(reader: R) -> Self {
        Self {
            reader,
            line: String::new(),
            current: String::new(),
            first_line: 1,
            opened: false,
            lines: 0,
            documents: 0,
            done: false,
        }
    }

    /// Ends the current document, starting the next with `text` at line
    /// `first_line`; the ended one, if it is a document.
    fn next_document(
        &mut self,
        text: String,
        first_line: usize,
        opened: bool,
    ) -> Option<Piece<'static>> {
        let ended = std::mem::replace(&mut self.current, text);
        let ended_first = std::mem::replace(&mut self.first_line, first_line);
        let ended_opened = std::mem::replace(&mut self.opened, opened);
        (ended_opened || has_content(&ended)).then(|| {
            self.documents += 1;
            Piece {
                number: self.documents,
                first_line: ended_first,
                text: Cow::Owned(ended),
            }
        })
    }
}

impl<R: BufRead> Iterator for DocumentReader<R> {
    type Item = Result<Piece<'static>, StreamStop>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            self.line.clear();
            match self.reader.read_line(&mut self.line) {
                Err(error) => {
                    self.done = true;
                    return Some(Err(StreamStop::Read(error)));
                }
                Ok(0) => {
                    self.done = true;
                    return self.next_document(String::new(), 0, false).map(Ok);
                }
                Ok(_) => self.lines += 1,
            }
            let piece = match classify(&self.line) {
                Line::Directive => {
                    self.done = true;
                    return Some(Err(StreamStop::Directives));
                }
                Line::Opens(at) => {
                    let rest = self.line[at..].to_string();
                    self.next_document(rest, self.lines, true)
                }
                Line::Closes => self.next_document(String::new(), self.lines + 1, false),
                Line::Content => {
                    self.current.push_str(&self.line);
                    None
                }
            };
            if let Some(piece) = piece {
                return Some(Ok(piece));
            }
        }
        None
    }
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
