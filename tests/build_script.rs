//! The build script asks cargo to rerun only on files that exist: cargo
//! reruns a build script on every build for a missing path, and this crate
//! then recompiles on every `cargo build` with nothing changed.

use std::path::{Path, PathBuf};
use std::process::Command;

#[allow(dead_code)] // Its `main` is the build script's; the tests use `rerun_files`.
#[path = "../build.rs"]
mod build_script;

/// `git -C dir args…`, trimmed stdout when it succeeds.
fn git_in(dir: &Path) -> impl Fn(&[&str]) -> Option<String> + '_ {
    move |args| {
        let output = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .ok()?;
        let text = String::from_utf8(output.stdout).ok()?.trim().to_owned();
        (output.status.success() && !text.is_empty()).then_some(text)
    }
}

/// A new repository with one commit on `main`.
fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let status = Command::new("git")
            .arg("-C")
            .arg(dir.path())
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    run(&["init", "-q", "-b", "main"]);
    run(&["commit", "-q", "--allow-empty", "-m", "first"]);
    dir
}

fn assert_all_exist(files: &[PathBuf]) {
    assert!(!files.is_empty());
    for file in files {
        assert!(
            file.exists(),
            "asks cargo to watch {} which does not exist",
            file.display()
        );
    }
}

#[test]
fn a_fresh_clone_without_packed_refs_watches_only_existing_files() {
    let repo = repository();
    let git = git_in(repo.path());
    let packed = PathBuf::from(
        git(&[
            "rev-parse",
            "--path-format=absolute",
            "--git-path",
            "packed-refs",
        ])
        .unwrap(),
    );
    assert!(!packed.exists(), "a new repository has no packed-refs");
    let files = build_script::rerun_files(&git);
    assert_all_exist(&files);
    assert!(
        files.iter().any(|f| f.ends_with("refs/heads/main")),
        "{files:?}"
    );
}

#[test]
fn a_packed_branch_is_watched_through_packed_refs_and_its_directory() {
    let repo = repository();
    let git = git_in(repo.path());
    git(&["pack-refs", "--all"]);
    let loose = repo.path().join(".git/refs/heads/main");
    assert!(!loose.exists(), "pack-refs --all removes the loose ref");
    let files = build_script::rerun_files(&git);
    assert_all_exist(&files);
    assert!(
        files.iter().any(|f| f.ends_with("packed-refs")),
        "{files:?}"
    );
    assert!(files.iter().any(|f| f.ends_with("refs/heads")), "{files:?}");
}

#[test]
fn this_build_asked_cargo_to_watch_only_existing_files() {
    // Cargo writes the build script's output next to OUT_DIR.
    let output = Path::new(env!("OUT_DIR")).parent().unwrap().join("output");
    let text = std::fs::read_to_string(&output).unwrap();
    let watched: Vec<PathBuf> = text
        .lines()
        .filter_map(|line| line.strip_prefix("cargo:rerun-if-changed="))
        .map(PathBuf::from)
        .collect();
    let commit_given =
        option_env!("CLUSTERSET_DNS_GIT_COMMIT").is_some_and(|c| !c.trim().is_empty());
    if Path::new(env!("CARGO_MANIFEST_DIR")).join(".git").exists() && !commit_given {
        assert_all_exist(&watched);
    } else {
        // Outside a checkout, or with the commit given, git is not read.
        assert!(watched.is_empty(), "{watched:?}");
    }
}
