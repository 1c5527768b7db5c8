//! The OCI image of `scripts/build-image.sh`, checked with real OCI tools
//! and run without a container engine: `skopeo inspect` shows the labels,
//! user and entrypoint; `skopeo copy` + `umoci unpack` give a root
//! filesystem holding the binary, its libraries and loader and a few files
//! in /etc, and nothing else (no shell); the binary runs from that root
//! (chroot, so only the image's loader and libraries exist for it) as user
//! 65532, prints its version and serves the example clusterset it ships.
//! Building twice with the same SOURCE_DATE_EPOCH gives the same bytes.
//!
//! Tier 2 (`testenv`): needs skopeo and umoci (apt; scripts/test.sh
//! installs them) and builds the release binary (`cargo build --release`,
//! minutes the first time, a no-op after).
#![cfg(feature = "testenv")]

mod dns_server;
mod support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use dns_server::{query, repo_path, udp_raw};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use support::{http_ok, wait_for};

/// The image's user and group.
const NONROOT: u32 = 65532;
const EPOCH: &str = "1700000000";
const CREATED: &str = "2023-11-14T22:13:20Z";
const SOURCE: &str = "https://example.org/clusterset-dns.git";
const ENTRYPOINT: &str = "/usr/local/bin/clusterset-dns";

/// Runs a command to success; returns stdout. Panics with stderr otherwise.
fn run(command: &mut Command) -> String {
    let output = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// Fails (never skips) when an apt-installed tool is missing.
fn require_tools() {
    for (tool, package) in [
        ("skopeo", "skopeo"),
        ("umoci", "umoci"),
        ("python3", "python3"),
        ("strip", "binutils"),
        ("chroot", "coreutils"),
        ("unshare", "util-linux"),
    ] {
        let found = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        assert!(
            found,
            "`{tool}` not found: the image test needs it; `apt-get install {package}` \
             (scripts/test.sh installs it)"
        );
    }
}

/// `scripts/build-image.sh` with a fixed epoch and source; extra args.
/// Without the `CARGO_*` variables and `OUT_DIR` that `cargo test` sets for
/// tests: build scripts that track them (ring's tracks `CARGO_MANIFEST_DIR`
/// and `OUT_DIR`) would otherwise make the script's `cargo build --release`
/// rebuild everything that a shell's would not, and the other way round.
fn build_image(output: &Path, extra: &[&str]) -> PathBuf {
    let mut command = Command::new(repo_path("scripts/build-image.sh"));
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let cargo_set =
            key.starts_with("CARGO_") && key != "CARGO_HOME" && key != "CARGO_TARGET_DIR";
        if cargo_set || key == "OUT_DIR" {
            command.env_remove(&*key);
        }
    }
    let stdout = run(command
        .args(["--output", output.to_str().expect("UTF-8 path")])
        .args(extra)
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .env("IMAGE_SOURCE", SOURCE)
        .stderr(Stdio::inherit()));
    let path = stdout.lines().last().expect("the archive path");
    assert_eq!(Path::new(path), output);
    output.to_owned()
}

fn sha256(path: &Path) -> String {
    run(Command::new("sha256sum").arg(path))
        .split_whitespace()
        .next()
        .expect("digest")
        .to_owned()
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).expect("JSON from skopeo")
}

/// Every file and directory under `root`, relative, `/`-prefixed.
fn tree(root: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).expect("read rootfs") {
            let path = entry.expect("dir entry").path();
            let relative = path.strip_prefix(root).unwrap().to_str().unwrap();
            out.insert(format!("/{relative}"));
            if path.is_dir() && !path.is_symlink() {
                walk(root, &path, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, root, &mut out);
    out
}

/// A command that runs `args` from `rootfs` as 65532:65532: `chroot
/// --userspec` when we are root, else a user namespace mapping our uid to
/// 65532 (`unshare --map-user --root`). Either way, `/` is the image's root.
fn as_nonroot(rootfs: &Path, args: &[&str]) -> Command {
    let mut command;
    if euid() == 0 {
        command = Command::new(in_path("chroot"));
        command
            .arg(format!("--userspec={NONROOT}:{NONROOT}"))
            .arg(format!("--groups={NONROOT}"))
            .arg(rootfs);
    } else {
        command = Command::new(in_path("unshare"));
        command
            .args(["--user", "--map-user", &NONROOT.to_string()])
            .args(["--map-group", &NONROOT.to_string()])
            .arg(format!("--root={}", rootfs.display()));
    }
    command.arg(ENTRYPOINT).args(args).env_clear();
    command
}

/// `tool`'s path in our `PATH` (the command's own environment is cleared).
fn in_path(tool: &str) -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join(tool))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{tool} not in PATH"))
}

/// The effective uid, from /proc (no libc call needed).
fn euid() -> u32 {
    std::fs::metadata("/proc/self").expect("/proc/self").uid()
}

/// `Uid:` of /proc/<pid>/status: real, effective, saved, filesystem.
fn uids(pid: u32) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .expect("Uid line")
        .split_whitespace()
        .map(|n| n.parse().expect("uid"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn image_unpacks_and_runs_as_nonroot_with_its_own_libraries() {
    require_tools();
    let dir = tempfile::tempdir().expect("tempdir");
    let started = std::time::Instant::now();
    let archive = build_image(&dir.path().join("a.oci.tar"), &[]);
    eprintln!(
        "image built in {:?}: {} bytes",
        started.elapsed(),
        std::fs::metadata(&archive).unwrap().len()
    );
    // Where the script's `cargo build --release` wrote it.
    let release = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| repo_path("target"), std::path::PathBuf::from)
        .join("release/clusterset-dns");
    let again = build_image(
        &dir.path().join("b.oci.tar"),
        &["--binary", release.to_str().unwrap()],
    );
    assert_eq!(
        sha256(&archive),
        sha256(&again),
        "the image is not reproducible"
    );

    // What the release binary says it is: the labels must say the same.
    let host_version = run(Command::new(&release).arg("version"));
    let commit = host_version
        .lines()
        .find_map(|l| l.strip_prefix("commit: "))
        .expect("commit line");
    let transport = format!("oci-archive:{}", archive.display());

    let config = json(&run(
        Command::new("skopeo").args(["inspect", "--config", &transport])
    ));
    let image_config = &config["config"];
    assert_eq!(image_config["User"], "65532:65532");
    assert_eq!(image_config["Entrypoint"], serde_json::json!([ENTRYPOINT]));
    assert_eq!(image_config["Cmd"], serde_json::json!(["serve"]));
    assert_eq!(config["created"], CREATED);
    let inspect = json(&run(Command::new("skopeo").args(["inspect", &transport])));
    let labels = &inspect["Labels"];
    for (key, value) in [
        ("version", env!("CARGO_PKG_VERSION")),
        ("revision", commit),
        ("source", SOURCE),
        ("created", CREATED),
    ] {
        assert_eq!(
            labels[format!("org.opencontainers.image.{key}")],
            value,
            "label {key}: {labels}"
        );
    }
    assert_eq!(inspect["Os"], "linux");
    assert_eq!(inspect["Layers"].as_array().map(Vec::len), Some(1));

    // skopeo copy to an OCI layout, umoci unpack to a bundle.
    let layout = dir.path().join("layout");
    run(Command::new("skopeo").args([
        "copy",
        "--quiet",
        &transport,
        &format!("oci:{}:image", layout.display()),
    ]));
    let bundle = dir.path().join("bundle");
    let mut unpack = Command::new("umoci");
    unpack.arg("unpack");
    if euid() != 0 {
        unpack.arg("--rootless");
    }
    run(unpack
        .args(["--image", &format!("{}:image", layout.display())])
        .arg(&bundle));
    let rootfs = bundle.join("rootfs");

    // Exactly: the binary, what ldd says it loads, their copyright files,
    // the example config, passwd/group/nsswitch and a few directories.
    let libraries: BTreeSet<String> =
        run(Command::new("ldd").arg(rootfs.join("usr/local/bin/clusterset-dns")))
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                match l.split_once(" => ") {
                    Some((_, path)) => path.split_whitespace().next(),
                    None => l.split_whitespace().next(),
                }
            })
            .filter(|p| p.starts_with('/'))
            .map(str::to_owned)
            .collect();
    assert!(
        libraries.iter().any(|l| l.contains("/ld-linux")),
        "no loader among {libraries:?}"
    );
    let files: BTreeSet<String> = tree(&rootfs)
        .into_iter()
        .filter(|p| rootfs.join(&p[1..]).is_file())
        .collect();
    let mut expected: BTreeSet<String> = [
        ENTRYPOINT,
        "/etc/passwd",
        "/etc/group",
        "/etc/nsswitch.conf",
        "/etc/clusterset-dns/clusterset-dns.toml",
        "/etc/clusterset-dns/example-clusterset.yaml",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    expected.extend(libraries.iter().cloned());
    let copyrights: BTreeSet<String> = files
        .iter()
        .filter(|f| f.starts_with("/usr/share/doc/") && f.ends_with("/copyright"))
        .cloned()
        .collect();
    expected.extend(copyrights);
    assert_eq!(files, expected, "files in the image");
    for shell in ["/bin/sh", "/bin/bash", "/usr/bin/sh", "/bin/busybox"] {
        assert!(!rootfs.join(&shell[1..]).exists(), "{shell} in the image");
    }
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
    assert!(
        passwd
            .lines()
            .any(|l| l.starts_with("nonroot:x:65532:65532:")),
        "{passwd}"
    );
    assert!(
        std::fs::read_to_string(rootfs.join("etc/group"))
            .unwrap()
            .contains("nonroot:x:65532:")
    );

    // `version` from the image's root, as 65532.
    let image_version = run(&mut as_nonroot(&rootfs, &["version"]));
    assert_eq!(image_version, host_version);

    // `serve` on the example config the image ships, on free ports.
    let dns = SocketAddr::from(([127, 0, 0, 1], dns_server::free_udp_and_tcp_port()));
    let admin = SocketAddr::from(([127, 0, 0, 1], dns_server::free_udp_and_tcp_port()));
    let mut child = as_nonroot(
        &rootfs,
        &[
            "serve",
            "--config",
            "/etc/clusterset-dns/clusterset-dns.toml",
            "--dns-listen",
            &dns.to_string(),
            "--admin-listen",
            &admin.to_string(),
        ],
    )
    .env("CLUSTERSET_DNS_LOG", "clusterset_dns=warn")
    .stdout(Stdio::null())
    .stderr(Stdio::inherit())
    .spawn()
    .expect("start serve from the image");
    let pid = child.id();
    let probe = query("web.shop.svc.clusterset.local.", RecordType::A);
    let reply = wait_for(
        "an answer from the image's serve",
        Duration::from_secs(10),
        || {
            let bytes = dns_server::encode(&probe);
            async move {
                udp_raw(dns, &bytes, Duration::from_millis(200))
                    .await
                    .and_then(|r| Message::from_vec(&r).ok())
                    .ok_or_else(|| "no answer".to_owned())
            }
        },
    )
    .await;
    assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
    assert_eq!(
        dns_server::sorted(&reply.answers),
        ["web.shop.svc.clusterset.local. 5 IN A 10.96.10.10"]
    );

    // It runs as 65532 (seen from here: 65532 itself when we are root, our
    // own uid mapped to 65532 otherwise) ...
    let ids = uids(pid);
    if euid() == 0 {
        assert_eq!(ids, [NONROOT; 4], "uids of serve");
    } else {
        let map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap();
        assert!(
            map.split_whitespace().next() == Some("65532"),
            "uid_map: {map}"
        );
    }
    // ... and its libc and loader are the image's files, not the host's.
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    for library in &libraries {
        let inode = std::fs::metadata(rootfs.join(&library[1..]))
            .expect("library in rootfs")
            .ino();
        assert!(
            maps.lines().any(|l| {
                l.ends_with(library.as_str())
                    && l.split_whitespace().nth(4) == Some(&inode.to_string())
            }),
            "{library} (inode {inode} in the rootfs) is not mapped from the image:\n{maps}"
        );
    }
    let metrics = http_ok(admin, "/metrics").await;
    let build_info = format!(
        "clusterset_dns_build_info{{commit=\"{commit}\",version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    assert!(
        metrics.lines().any(|l| l == build_info),
        "{build_info} missing"
    );

    child.kill().expect("kill serve");
    child.wait().expect("reap serve");
}
