//! Records what the binary was built from, for `clusterset-dns version` and
//! the `clusterset_dns_build_info` metric: the git commit, the target
//! triple and the rustc version, as `CLUSTERSET_DNS_BUILD_*` compile-time
//! environment variables.
//!
//! Builds without a repository (a Docker build copies only `src/`, a source
//! tarball has no `.git`) still succeed: the commit is then
//! `CLUSTERSET_DNS_GIT_COMMIT` when set (the Dockerfile passes it as a build
//! argument), else `unknown`. Nothing here fails the build.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=CLUSTERSET_DNS_GIT_COMMIT");
    let commit = match std::env::var("CLUSTERSET_DNS_GIT_COMMIT") {
        Ok(commit) if !commit.trim().is_empty() => commit.trim().to_owned(),
        _ => git_commit().unwrap_or_else(|| "unknown".to_owned()),
    };
    println!("cargo:rustc-env=CLUSTERSET_DNS_BUILD_COMMIT={commit}");

    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=CLUSTERSET_DNS_BUILD_TARGET={target}");

    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let rustc_version =
        output(Command::new(rustc).arg("--version")).unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=CLUSTERSET_DNS_BUILD_RUSTC={rustc_version}");
}

/// The commit `HEAD` points at, or `None` outside a git checkout (or
/// without `git`). Asks cargo to rerun when `HEAD` or the branch it names
/// moves, so the recorded commit follows new commits without a clean build.
fn git_commit() -> Option<String> {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    let git = |args: &[&str]| output(Command::new("git").arg("-C").arg(&manifest_dir).args(args));
    let commit = git(&["rev-parse", "--verify", "HEAD"])?;
    for file in rerun_files(git) {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    Some(commit)
}

/// The files whose change moves `HEAD`: `HEAD` itself, `packed-refs` and
/// the branch's loose ref, each only where it exists: cargo reruns the
/// build script on every build for a path that does not exist. A packed
/// branch (no loose ref) is watched through the nearest directory above
/// it, which changes when the next commit writes the loose ref again; a
/// missing `packed-refs` needs nothing, since packing deletes a loose ref
/// that is watched.
pub(crate) fn rerun_files(git: impl Fn(&[&str]) -> Option<String>) -> Vec<PathBuf> {
    // In a worktree `.git` is a file; `--git-path` resolves the real paths.
    let git_path = |path: &str| {
        git(&["rev-parse", "--path-format=absolute", "--git-path", path]).map(PathBuf::from)
    };
    let mut files: Vec<PathBuf> = ["HEAD", "packed-refs"]
        .into_iter()
        .filter_map(git_path)
        .filter(|path| path.exists())
        .collect();
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]).and_then(|b| git_path(&b)) {
        let watched = branch
            .ancestors()
            .find(|path| path.exists())
            .map(PathBuf::from);
        files.extend(watched);
    }
    files
}

/// Trimmed stdout of a command that succeeded with non-empty output.
fn output(command: &mut Command) -> Option<String> {
    let output = command.output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (output.status.success() && !text.is_empty()).then(|| text.to_owned())
}
