//! Fenced code blocks and inline code spans of the repository's Markdown,
//! for tests that run what the documentation shows (`tests/install.rs`
//! runs the install commands of docs/deploy.md, `tests/corefiles.rs` starts
//! CoreDNS with every Corefile snippet), so the documents and the tests
//! cannot drift apart.
#![allow(dead_code)] // each test crate uses a different part

use std::path::{Path, PathBuf};

/// One fenced code block.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    /// Repository-relative path of the file.
    pub file: String,
    /// 1-based line of the opening fence.
    pub line: usize,
    /// The info string after the fence, trimmed: `sh install`, `corefile`.
    pub info: String,
    /// The content, with the fence's indentation removed, ending in a newline.
    pub text: String,
}

impl Block {
    /// The first word of the info string (the language).
    pub(crate) fn language(&self) -> &str {
        self.info.split_whitespace().next().unwrap_or("")
    }

    /// The second word of the info string (our tag), if any.
    pub(crate) fn tag(&self) -> Option<&str> {
        self.info.split_whitespace().nth(1)
    }

    /// `file:line`, for messages.
    pub(crate) fn place(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// The repository's top directory.
pub(crate) fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every fenced block (``` or ~~~) of the Markdown file `relative`. An
/// unclosed fence is a panic: the rest of the file would silently be code.
pub(crate) fn blocks(relative: &str) -> Vec<Block> {
    let text = read(relative);
    let mut out = Vec::new();
    let mut open: Option<(usize, String, String, usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match &mut open {
            None => {
                for fence in ["```", "~~~"] {
                    if let Some(info) = trimmed.strip_prefix(fence) {
                        let info = info.trim_start_matches(&fence[..1]).trim().to_owned();
                        open = Some((i + 1, fence.to_owned(), info, indent, String::new()));
                        break;
                    }
                }
            }
            Some((start, fence, info, fence_indent, body)) => {
                if trimmed.starts_with(fence.as_str())
                    && trimmed.trim_start_matches(&fence[..1]).trim().is_empty()
                {
                    out.push(Block {
                        file: relative.to_owned(),
                        line: *start,
                        info: info.clone(),
                        text: std::mem::take(body),
                    });
                    open = None;
                } else {
                    let cut = line.len() - line.trim_start().len();
                    body.push_str(&line[cut.min(*fence_indent)..]);
                    body.push('\n');
                }
            }
        }
    }
    if let Some((start, ..)) = open {
        panic!("{relative}:{start}: code fence never closed");
    }
    out
}

/// Inline code spans (`like this`) outside fenced blocks, with their line.
pub(crate) fn inline_code(relative: &str) -> Vec<(usize, String)> {
    let text = read(relative);
    let mut out = Vec::new();
    let mut in_fence = false;
    // Spans may wrap lines within a paragraph: join each paragraph first.
    let mut paragraph = String::new();
    let mut first_line = 0;
    let flush = |paragraph: &mut String, first_line: usize, out: &mut Vec<(usize, String)>| {
        let mut rest = paragraph.as_str();
        while let Some(start) = rest.find('`') {
            let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
            let after = &rest[start + ticks..];
            let closing = "`".repeat(ticks);
            match after.find(&closing) {
                Some(end) => {
                    out.push((first_line, after[..end].trim().to_owned()));
                    rest = &after[end + ticks..];
                }
                None => break,
            }
        }
        paragraph.clear();
    };
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            flush(&mut paragraph, first_line, &mut out);
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        if trimmed.is_empty() {
            flush(&mut paragraph, first_line, &mut out);
            continue;
        }
        if paragraph.is_empty() {
            first_line = i + 1;
        } else {
            paragraph.push(' ');
        }
        paragraph.push_str(trimmed);
    }
    flush(&mut paragraph, first_line, &mut out);
    out
}

/// Repository-relative paths of the Markdown files under `dir` (recursive),
/// sorted.
pub(crate) fn markdown_files(dir: &str) -> Vec<String> {
    let mut out = Vec::new();
    walk(&repo().join(dir), &mut out);
    let mut out: Vec<String> = out
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| {
            p.strip_prefix(repo())
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    out.sort();
    out
}

/// Every file under `dir`, recursively.
pub(crate) fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(repo().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}
