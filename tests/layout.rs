//! The source tree is three wings over one base (`src/lib.rs`, "Layout"):
//! the DNS server, the controller and the admin's CLI each import the base
//! and themselves, never each other; the base imports no wing. Read from
//! the code's own `crate::` paths, so a new import across wings fails here
//! before review.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every top-level module of `src/lib.rs`, by the part of the house it
/// belongs to. A module missing here fails [`every_module_has_a_place`].
const PLACES: &[(&str, &[&str])] = &[
    (
        "base",
        &[
            "api",
            "at_rest",
            "cidr",
            "cluster_args",
            "error",
            "hub",
            "kube_http",
            "label_selector",
            "ops",
            "peering",
            "watch",
        ],
    ),
    (
        "dns server",
        &[
            "admin", "app", "config", "dns", "explain", "fuzzing", "index", "inquiry", "metrics",
            "model", "publish", "source", "zone",
        ],
    ),
    ("controller", &["controller"]),
    ("cli", &["cli"]),
];

fn place_of(module: &str) -> Option<&'static str> {
    PLACES
        .iter()
        .find(|(_, modules)| modules.contains(&module))
        .map(|(place, _)| *place)
}

/// The wings a part may import besides itself.
fn may_import(from: &str, to: &str) -> bool {
    from == to || to == "base"
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its comments (line, doc and block comments)
/// and string literals, so a doc link or a message naming a module is not
/// an import.
fn code_only(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1)) {
            (b'/', Some(b'/')) => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            (b'/', Some(b'*')) => {
                let mut depth = 0;
                while i < bytes.len() {
                    if bytes[i..].starts_with(b"/*") {
                        depth += 1;
                        i += 2;
                    } else if bytes[i..].starts_with(b"*/") {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            (b'"', _) => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            // A char literal such as '"' or '{' (lifetimes have no closing quote).
            (b'\'', _) if bytes.get(i + 2) == Some(&b'\'') => {
                i += 3;
            }
            (b'\'', Some(b'\\')) => {
                i += 2;
                while i < bytes.len() && bytes[i] != b'\'' {
                    i += 1;
                }
                i += 1;
            }
            (byte, _) => {
                out.push(byte as char);
                i += 1;
            }
        }
    }
    out
}

/// The top-level modules a file's code names through `crate::`, including
/// every first segment of a `use crate::{a, b::c}` group.
fn crate_modules(code: &str) -> BTreeSet<String> {
    let mut modules = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices("crate::") {
        // `$crate::` in a macro is the same crate; `clusterset_dns::crate` is no path.
        let rest = code[at + "crate::".len()..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut expect_segment = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => {
                        depth += 1;
                        expect_segment = depth == 1;
                    }
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => expect_segment = true,
                    c if c.is_whitespace() => {}
                    _ if expect_segment && depth == 1 => {
                        let name = ident(&group[i..]);
                        if !name.is_empty() && name != "self" {
                            modules.insert(name);
                        }
                        expect_segment = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                modules.insert(name);
            }
        }
    }
    modules
}

/// `src/<module>.rs` or `src/<module>/...`: the top-level module a file is in.
fn top_module(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("under src");
    let first = relative.components().next().expect("a path");
    let first = first.as_os_str().to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

#[test]
fn no_wing_imports_another_and_the_base_imports_none() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut crossings: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut read = 0;
    for file in &files {
        let module = top_module(&src, file);
        if module == "lib" || module == "main" {
            continue; // the crate root and the command wire the wings
        }
        let from = place_of(&module).unwrap_or_else(|| panic!("{module} has no place"));
        let code = code_only(&std::fs::read_to_string(file).expect("readable"));
        read += 1;
        for target in crate_modules(&code) {
            let to = place_of(&target).unwrap_or_else(|| {
                panic!(
                    "{} names crate::{target}, which has no place",
                    file.display()
                )
            });
            if !may_import(from, to) {
                crossings
                    .entry(format!(
                        "{} ({from})",
                        file.strip_prefix(&src).unwrap().display()
                    ))
                    .or_default()
                    .insert(format!("{target} ({to})"));
            }
        }
    }
    assert!(read > 100, "read {read} files under src/");
    assert!(
        crossings.is_empty(),
        "imports across wings or from the base up:\n{crossings:#?}"
    );
}

#[test]
fn every_module_has_a_place() {
    let lib = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs"))
        .expect("src/lib.rs");
    let declared: BTreeSet<String> = lib
        .lines()
        .filter_map(|line| line.trim().strip_prefix("pub mod "))
        .filter_map(|rest| rest.strip_suffix(';'))
        .map(str::to_owned)
        .collect();
    let placed: BTreeSet<String> = PLACES
        .iter()
        .flat_map(|(_, modules)| modules.iter().map(|m| m.to_string()))
        .collect();
    assert!(
        declared.len() > 10,
        "read the modules of src/lib.rs: {declared:?}"
    );
    assert_eq!(
        declared, placed,
        "src/lib.rs's modules against this file's places"
    );
}

/// The reader itself: group imports, comments and strings.
#[test]
fn the_reader_finds_imports_and_ignores_prose() {
    let code = code_only(
        "use crate::{api::{A, B}, zone, self};\n/// see [`crate::controller`]\nlet s = \"crate::cli\";\nfn f() { crate::dns::x(); }\n/* crate::metrics */",
    );
    let found: Vec<String> = crate_modules(&code).into_iter().collect();
    assert_eq!(found, ["api", "dns", "zone"]);
}
