//! The saved fuzz corpus replayed without the fuzzer (docs/robustness.md,
//! "Fuzzing"): every file under `tests/fuzz/corpus/<target>/` (the seeds and
//! what the fuzzer kept) and `tests/fuzz/regressions/<target>/` (the inputs
//! of past findings) goes through the same invariant checks the fuzz
//! targets run (`clusterset_dns::fuzzing`), so CI re-checks them all
//! without the fuzzer. An empty or missing corpus directory fails: a
//! replay of nothing tests nothing.

use std::path::PathBuf;

use clusterset_dns::fuzzing::{self, Dns};

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz")
}

/// The files of `tests/fuzz/<kind>/<target>/`, sorted.
fn dir_files(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = fuzz_dir().join(kind).join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} is empty", dir.display());
    files
}

/// One target's corpus and regression inputs, with their bytes.
fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = dir_files("corpus", target);
    // Only targets that had a finding have regression inputs.
    if fuzz_dir().join("regressions").join(target).exists() {
        files.extend(dir_files("regressions", target));
    }
    files
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path, bytes)
        })
        .collect()
}

/// Runs `check` on every file of `target`'s corpus; names the file that fails.
fn replay(target: &str, check: impl Fn(&[u8])) -> usize {
    let files = corpus(target);
    for (path, bytes) in &files {
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(bytes.as_slice())));
        if result.is_err() {
            panic!("{} breaks an invariant (message above)", path.display());
        }
    }
    eprintln!("{target}: {} inputs replayed", files.len());
    files.len()
}

#[test]
fn the_udp_fast_path_corpus_keeps_its_invariants() {
    let dns = Dns::new();
    assert!(replay("udp_fast_path", |bytes| dns.udp_fast_path(bytes)) > 0);
}

#[test]
fn the_hickory_path_corpus_keeps_its_invariants() {
    let dns = Dns::new();
    assert!(replay("hickory_path", |bytes| dns.hickory_path(bytes)) > 0);
}

#[test]
fn the_manifest_corpus_keeps_its_invariants() {
    assert!(replay("manifest", fuzzing::manifest) > 0);
}
