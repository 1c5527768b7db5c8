//! The OCI image of `scripts/build-image.sh`, checked with real OCI tools,
//! run without a container engine and run in one.
//!
//! Without an engine: `skopeo inspect` shows the labels, user and
//! entrypoint; `skopeo copy` + `umoci unpack` give a root filesystem
//! holding the binary, its libraries and loader and a few files in /etc,
//! and nothing else (no shell); the binary runs from that root (chroot, so
//! only the image's loader and libraries exist for it) as user 65532,
//! prints its version and serves the example clusterset it ships. Building
//! twice with the same SOURCE_DATE_EPOCH gives the same bytes.
//!
//! In podman (with runc): the ` ```sh podman` block of docs/image.md, run
//! line by line with the test's archive, container name and loopback ports,
//! so that the page and the test cannot drift. `podman load` names the
//! image; `podman run` carries exactly the security options that
//! deploy/clusterset-dns.yaml's securityContext implies (read from the
//! manifest), and the process has only what they allow (ids, capabilities,
//! no_new_privs, seccomp, a read-only root, from /proc); `curl` gets
//! `/ready`, `dig` the example's answers over UDP and TCP; `podman stop`
//! with the manifest's grace period sends SIGTERM, `/ready` turns 503 while
//! DNS answers, and the process exits 0 within the grace period the preStop
//! sleep leaves. podman's state lives in a temporary directory and the
//! container's cgroups under a parent of the test's own; a guard removes
//! the container, the image and those cgroups even when the test fails.
//!
//! Tier 2 (`testenv`): needs skopeo, umoci, podman, runc, dig and curl
//! (apt; scripts/test.sh installs them), root for podman (rootless podman
//! is not tried: its cgroups and limits differ), and builds the release
//! binary (`cargo build --release`, minutes the first time, a no-op after).
#![cfg(feature = "testenv")]

mod dns_server;
mod markdown;
mod support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use dns_server::{query, repo_path, udp_raw, within};
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
        ("podman", "podman"),
        ("runc", "runc"),
        ("dig", "bind9-dnsutils"),
        ("curl", "curl"),
    ] {
        let found = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
            // podman finds runc in /usr/sbin, which may not be on PATH.
            || (tool == "runc" && Path::new("/usr/sbin/runc").is_file());
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

// ---------------------------------------------------------------------------
// In podman, as the DaemonSet runs it: the commands of docs/image.md.
// ---------------------------------------------------------------------------

/// The page whose `sh podman` block the test runs, line by line.
const IMAGE_DOC: &str = "docs/image.md";
/// The tag of that block (` ```sh podman`).
const PODMAN_TAG: &str = "podman";
/// The manifest whose container the documented `podman run` must mirror.
const DAEMONSET: &str = "deploy/clusterset-dns.yaml";
/// Kubernetes' `terminationGracePeriodSeconds` when a pod sets none.
const DEFAULT_GRACE_SECONDS: i64 = 30;
/// Longest a podman command other than `stop` may take (`load` copies the
/// image into the test's store: about a second).
const PODMAN_LIMIT: Duration = Duration::from_secs(120);
/// Longest the container may take from `podman run` to `/ready` 200.
const READY_LIMIT: Duration = Duration::from_secs(30);
/// Longest one `dig` or `curl` may run.
const TOOL_LIMIT: Duration = Duration::from_secs(20);
/// What the example clusterset answers, for the questions the page asks.
const EXAMPLE_ANSWERS: [(&str, &str, &str); 2] = [
    (
        "web.shop.svc.clusterset.local",
        "A",
        "web.shop.svc.clusterset.local. 5 IN A 10.96.10.10",
    ),
    (
        "web.shop.svc.clusterset.local",
        "AAAA",
        "web.shop.svc.clusterset.local. 5 IN AAAA fd00:10:96::a",
    ),
];
/// `podman run` options that decide what the process may do: the ones
/// the DaemonSet's securityContext decides in Kubernetes. The page's run
/// must have exactly those the manifest implies (see [`Mirror::options`]).
const SECURITY_OPTIONS: [&str; 10] = [
    "--user",
    "--read-only",
    "--read-only-tmpfs",
    "--cap-drop",
    "--cap-add",
    "--security-opt",
    "--privileged",
    "--group-add",
    "--userns",
    "--systemd",
];
/// `podman run` options without a value (the others take one, as
/// `--opt value` or `--opt=value`).
const RUN_SWITCHES: [&str; 6] = [
    "-d",
    "--detach",
    "--read-only",
    "--privileged",
    "--rm",
    "--init",
];

/// The Linux capabilities by their Kubernetes names (without `CAP_`), in
/// bit order (linux/capability.h).
const CAPABILITIES: &str = "CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID \
    SETUID SETPCAP LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK \
    IPC_OWNER SYS_MODULE SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE \
    SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP \
    MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF \
    CHECKPOINT_RESTORE";

/// The bit of capability `name` ([`CAPABILITIES`]).
fn capability_bit(name: &str) -> Option<usize> {
    CAPABILITIES.split_whitespace().position(|c| c == name)
}

/// What deploy/clusterset-dns.yaml asks of the DNS server's container,
/// read from the manifest so that the test follows it.
#[derive(Debug)]
struct Mirror {
    /// `runAsUser` (the container's, else the pod's).
    uid: i64,
    /// `runAsGroup`; `None`: the group the image gives that user.
    gid: Option<i64>,
    read_only: bool,
    no_new_privileges: bool,
    add: Vec<String>,
    /// `terminationGracePeriodSeconds`, Kubernetes' default when unset.
    grace: Duration,
    /// The preStop sleep, which Kubernetes counts in the grace period
    /// before it sends SIGTERM.
    pre_stop: Duration,
}

impl Mirror {
    fn read() -> Self {
        use k8s_openapi::api::apps::v1::DaemonSet;
        let text = std::fs::read_to_string(repo_path(DAEMONSET)).expect("the DaemonSet manifest");
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{DAEMONSET}: {e}"));
        let daemonset: DaemonSet = docs
            .into_iter()
            .find(|d| d["kind"] == "DaemonSet")
            .map(|d| serde_json::from_value(d).expect("a DaemonSet"))
            .unwrap_or_else(|| panic!("{DAEMONSET}: no DaemonSet"));
        let pod = daemonset
            .spec
            .and_then(|s| s.template.spec)
            .expect("a pod template");
        let container = pod
            .containers
            .iter()
            .find(|c| c.name == "clusterset-dns")
            .unwrap_or_else(|| panic!("{DAEMONSET}: no container clusterset-dns"));
        let pod_context = pod.security_context.clone().unwrap_or_default();
        let context = container.security_context.clone().unwrap_or_default();
        let uid = context
            .run_as_user
            .or(pod_context.run_as_user)
            .unwrap_or_else(|| panic!("{DAEMONSET}: no runAsUser"));
        if context.run_as_non_root.or(pod_context.run_as_non_root) == Some(true) {
            assert_ne!(uid, 0, "{DAEMONSET}: runAsNonRoot with runAsUser 0");
        }
        // podman's default seccomp profile is what RuntimeDefault means;
        // another profile would need its own podman option here.
        let seccomp = context
            .seccomp_profile
            .or(pod_context.seccomp_profile)
            .map(|p| p.type_);
        assert_eq!(
            seccomp.as_deref(),
            Some("RuntimeDefault"),
            "{DAEMONSET}: the test mirrors only the RuntimeDefault seccomp profile"
        );
        assert_ne!(context.privileged, Some(true), "{DAEMONSET}: privileged");
        let capabilities = context.capabilities.clone().unwrap_or_default();
        let drop = capabilities.drop.unwrap_or_default();
        // Without `drop: [ALL]` the container keeps the runtime's default
        // set, which is containerd's and not podman's: not mirrored here.
        assert!(
            drop.iter().any(|c| c == "ALL"),
            "{DAEMONSET}: the test mirrors capabilities only after `drop: [ALL]`: {drop:?}"
        );
        let add = capabilities.add.unwrap_or_default();
        for capability in &add {
            assert!(
                capability_bit(capability).is_some(),
                "{DAEMONSET}: unknown capability {capability}"
            );
        }
        let pre_stop = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
            .and_then(|h| h.sleep.as_ref())
            .map_or(0, |s| s.seconds);
        let grace = pod
            .termination_grace_period_seconds
            .unwrap_or(DEFAULT_GRACE_SECONDS);
        assert!(
            pre_stop < grace,
            "{DAEMONSET}: the preStop sleep ({pre_stop} s) leaves no grace for SIGTERM ({grace} s)"
        );
        Self {
            uid,
            gid: context.run_as_group.or(pod_context.run_as_group),
            read_only: context.read_only_root_filesystem == Some(true),
            no_new_privileges: context.allow_privilege_escalation == Some(false),
            add,
            grace: Duration::from_secs(grace.try_into().expect("grace >= 0")),
            pre_stop: Duration::from_secs(pre_stop.try_into().expect("preStop >= 0")),
        }
    }

    /// The [`SECURITY_OPTIONS`] of a `podman run` that mirrors the
    /// container, sorted; `image_user` is the image's `uid:gid`.
    /// `--read-only-tmpfs=false`: Kubernetes mounts no tmpfs where podman's
    /// `--read-only` does by default (/tmp, /var/tmp, /run).
    fn options(&self, image_user: &str) -> Vec<String> {
        let gid = self.gid.map_or_else(
            || {
                let (uid, gid) = image_user.split_once(':').expect("image user uid:gid");
                assert_eq!(
                    uid,
                    self.uid.to_string(),
                    "{DAEMONSET} sets no runAsGroup and runs another user than the image's"
                );
                gid.to_owned()
            },
            |gid| gid.to_string(),
        );
        let mut options = vec![
            format!("--user={}:{gid}", self.uid),
            "--cap-drop=ALL".into(),
        ];
        if self.read_only {
            options.extend(["--read-only".into(), "--read-only-tmpfs=false".into()]);
        }
        options.extend(self.add.iter().map(|c| format!("--cap-add={c}")));
        if self.no_new_privileges {
            options.push("--security-opt=no-new-privileges".into());
        }
        options.sort();
        options
    }

    /// The capability mask the container's bounding set must be.
    fn capability_mask(&self) -> u64 {
        self.add.iter().fold(0, |mask, name| {
            let bit = capability_bit(name).expect("a known capability");
            mask | 1 << bit
        })
    }
}

/// The commands of the page's ` ```sh podman` block: continuation lines
/// joined, comments and blank lines left out, each split into words. The
/// block holds no quoting or other shell syntax, so that the words are what
/// bash would pass.
fn documented_commands() -> Vec<(String, Vec<String>)> {
    let blocks: Vec<markdown::Block> = markdown::blocks(IMAGE_DOC)
        .into_iter()
        .filter(|b| b.tag() == Some(PODMAN_TAG))
        .collect();
    assert_eq!(
        blocks.len(),
        1,
        "{IMAGE_DOC} must have exactly one ```sh {PODMAN_TAG} block (tests/image.rs runs it)"
    );
    let block = &blocks[0];
    assert_eq!(block.language(), "sh", "{}", block.place());
    for other in markdown::blocks(IMAGE_DOC) {
        if other.tag() != Some(PODMAN_TAG) {
            assert!(
                !other
                    .text
                    .lines()
                    .any(|l| l.trim_start().starts_with("podman ")),
                "{}: a podman command outside the ```sh {PODMAN_TAG} block tests/image.rs runs",
                other.place()
            );
        }
    }
    let mut commands = Vec::new();
    let mut pending = String::new();
    for (i, line) in block.text.lines().enumerate() {
        let place = format!("{IMAGE_DOC}:{}", block.line + 1 + i);
        let line = line.trim();
        if pending.is_empty() && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        if let Some(start) = line.strip_suffix('\\') {
            pending.push_str(start);
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let text = std::mem::take(&mut pending);
        assert!(
            !text.contains(['\'', '"', '$', '`', '|', ';', '&', '<', '>', '(', '*', '#']),
            "{place}: shell syntax in `{text}`: tests/image.rs splits the commands at spaces"
        );
        commands.push((place, text.split_whitespace().map(str::to_owned).collect()));
    }
    assert!(
        pending.is_empty(),
        "{}: a continued last line",
        block.place()
    );
    commands
}

/// runc's state directory as root. podman's `--runtime-flag=root=...`
/// would move it, but the `podman container cleanup` that conmon runs when
/// the container exits does not get that flag: its `runc delete` would
/// look here, find nothing, and leave the container's cgroups behind.
const RUNC_ROOT: &str = "/run/runc";

/// A podman whose state (image store, containers, its runtime and network
/// files, temporary files) lives in one temporary directory, so that the
/// test creates and removes only its own; runc as the runtime. Outside it:
/// runc's state of the container (`/run/runc/<id>`, which `runc delete`
/// removes) and the container's cgroups, under a parent of the test's own.
/// Dropped, even by a failing test: its container and image go (`podman rm
/// --force`, `podman rmi --force`, bounded), then the cgroup parent,
/// `/run/runc` if the test created it and it is empty, then the directory.
struct Podman {
    dir: tempfile::TempDir,
    /// The container's name, once `podman run` was tried.
    container: Option<String>,
    /// The image's name, once `podman load` was tried.
    image: Option<String>,
    /// Whether [`RUNC_ROOT`] existed before the test.
    runc_root_existed: bool,
}

impl Podman {
    fn new() -> Self {
        // A short path: conmon's sockets live under it.
        let dir = tempfile::Builder::new()
            .prefix("podman")
            .tempdir()
            .expect("tempdir");
        std::fs::create_dir(dir.path().join("copy")).unwrap();
        Self {
            dir,
            container: None,
            image: None,
            runc_root_existed: Path::new(RUNC_ROOT).exists(),
        }
    }

    /// `podman`'s global options that keep its state under [`Self::dir`]:
    /// the store (vfs: plain directories, no mounts to leave behind),
    /// podman's runtime state, libpod's temporary files and events, and
    /// the network configuration
    /// (the CNI backend, whose lock lives in --network-config-dir;
    /// netavark's would be in /run/containers).
    fn global_options(&self) -> Vec<String> {
        let dir = self.dir.path().display();
        [
            format!("--root={dir}/root"),
            format!("--runroot={dir}/run"),
            format!("--tmpdir={dir}/tmp"),
            format!("--network-config-dir={dir}/net"),
            "--network-backend=cni".into(),
            "--storage-driver=vfs".into(),
            "--events-backend=file".into(),
        ]
        .into()
    }

    /// The container's cgroup parent (`podman run --cgroup-parent`): one of
    /// the test's own, which [`Self::remove_cgroups`] removes, instead of
    /// podman's shared `libpod_parent`.
    fn cgroup_parent(&self) -> String {
        let dir = self.dir.path().file_name().unwrap().to_string_lossy();
        format!("/clusterset-dns-test-{dir}")
    }

    /// Removes [`Self::cgroup_parent`] from every cgroup hierarchy (v1 and
    /// v2) once the container is gone; returns what could not be removed.
    fn remove_cgroups(&self) -> Vec<String> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        let mut failed = Vec::new();
        for line in mountinfo.lines() {
            let (fields, after) = line.split_once(" - ").expect("mountinfo line");
            let fstype = after.split_whitespace().next().unwrap_or_default();
            if fstype != "cgroup" && fstype != "cgroup2" {
                continue;
            }
            let mount_point = fields.split_whitespace().nth(4).expect("mount point");
            let dir = Path::new(mount_point).join(&self.cgroup_parent()[1..]);
            match std::fs::remove_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => failed.push(format!("{}: {e}", dir.display())),
            }
        }
        failed
    }

    /// `podman <global options> <args>`; the image copies' temporary files
    /// (TMPDIR) are under [`Self::dir`] too.
    fn command(&self, args: &[String]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("podman");
        command
            .args(self.global_options())
            .args(args)
            .env("TMPDIR", self.dir.path().join("copy"))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    /// Runs `podman <args>` to success within `limit`; returns stdout.
    async fn run(&self, args: &[String], limit: Duration) -> String {
        let what = format!("podman {}", args.join(" "));
        let output = within(limit, &what, self.command(args).output())
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            output.status.success(),
            "{what}: {}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("UTF-8 output")
    }

    /// `podman inspect` of the container or image `name`.
    async fn inspect(&self, kind: &str, name: &str) -> serde_json::Value {
        let args = [kind.to_owned(), "inspect".into(), name.to_owned()];
        let all = json(&self.run(&args, PODMAN_LIMIT).await);
        all[0].clone()
    }

    /// The names of the containers or images that exist (`ps -a` or
    /// `images`), as podman lists them.
    async fn list(&self, what: &str) -> Vec<String> {
        let args: Vec<String> = match what {
            "containers" => ["ps", "--all", "--format={{.Names}}"]
                .map(str::to_owned)
                .into(),
            _ => ["images", "--format={{.Repository}}:{{.Tag}}"]
                .map(str::to_owned)
                .into(),
        };
        self.run(&args, PODMAN_LIMIT)
            .await
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// For `Drop`: runs `podman <args>` for at most [`PODMAN_LIMIT`],
    /// killing it after; returns its stdout and stderr, or says on stderr
    /// what did not work.
    fn cleanup(&self, args: &[&str]) -> String {
        let mut child = match std::process::Command::new("podman")
            .args(self.global_options())
            .args(args)
            .env("TMPDIR", self.dir.path().join("copy"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(child) => child,
            Err(e) => {
                eprintln!("podman {args:?}: {e}");
                return String::new();
            }
        };
        let deadline = std::time::Instant::now() + PODMAN_LIMIT;
        while child.try_wait().ok().flatten().is_none() {
            if std::time::Instant::now() > deadline {
                eprintln!("podman {args:?}: still running after {PODMAN_LIMIT:?}, killed");
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        match child.wait_with_output() {
            // `podman logs` writes the container's stderr to its own.
            Ok(output) if output.status.success() => format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
            Ok(output) => {
                eprintln!(
                    "podman {args:?}: {}\n{}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                );
                String::new()
            }
            Err(e) => {
                eprintln!("podman {args:?}: {e}");
                String::new()
            }
        }
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        if let Some(name) = &self.container {
            if std::thread::panicking() {
                eprintln!(
                    "podman logs {name}:\n{}",
                    self.cleanup(&["logs", name.as_str()])
                );
            }
            self.cleanup(&["rm", "--force", "--time=0", "--ignore", name.as_str()]);
        }
        if let Some(image) = &self.image {
            self.cleanup(&["rmi", "--force", "--ignore", image.as_str()]);
        }
        for failure in self.remove_cgroups() {
            eprintln!("cgroup left: {failure}");
        }
        if !self.runc_root_existed {
            // Fails, leaving it, when not empty (another runc's container).
            let _ = std::fs::remove_dir(RUNC_ROOT);
        }
    }
}

/// The value of `option` in `words` (`--opt value` or `--opt=value`) and
/// the index of the value.
fn option_value(words: &[String], option: &str) -> Option<(usize, String)> {
    words.iter().enumerate().find_map(|(i, word)| {
        if word == option {
            words.get(i + 1).map(|value| (i + 1, value.clone()))
        } else {
            word.strip_prefix(&format!("{option}="))
                .map(|value| (i, value.to_owned()))
        }
    })
}

/// Replaces `option`'s value in `words` with `value`; panics when absent.
fn replace_option(words: &mut [String], option: &str, value: &str, place: &str) {
    let (i, _) = option_value(words, option)
        .unwrap_or_else(|| panic!("{place}: no {option} in `{}`", words.join(" ")));
    words[i] = if words[i].starts_with(&format!("{option}=")) {
        format!("{option}={value}")
    } else {
        value.to_owned()
    };
}

/// `podman run`'s words split: its options (each `--opt=value`, or a
/// switch alone), the image, and the arguments after the image.
fn split_run(words: &[String], place: &str) -> (Vec<String>, String, Vec<String>) {
    let mut options = Vec::new();
    let mut i = 2; // after `podman run`
    while let Some(word) = words.get(i) {
        if !word.starts_with('-') {
            return (options, word.clone(), words[i + 1..].to_vec());
        }
        if RUN_SWITCHES.contains(&word.as_str()) || word.contains('=') {
            options.push(word.clone());
            i += 1;
        } else {
            let value = words
                .get(i + 1)
                .unwrap_or_else(|| panic!("{place}: {word} without a value"));
            options.push(format!("{word}={value}"));
            i += 2;
        }
    }
    panic!("{place}: `podman run` without an image");
}

/// `host:port` with `port` changed, for the page's addresses.
fn with_port(address: &str, port: u16, place: &str) -> String {
    let (host, _) = address
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("{place}: {address} has no port"));
    assert_eq!(
        host, "127.0.0.1",
        "{place}: the page's servers are on loopback"
    );
    format!("{host}:{port}")
}

/// A tool run for at most [`TOOL_LIMIT`]: its status, stdout and stderr.
async fn tool(words: &[String]) -> std::process::Output {
    let what = words.join(" ");
    within(
        TOOL_LIMIT,
        &what,
        tokio::process::Command::new(&words[0])
            .args(&words[1..])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// `dig`'s status, header flags and answer records (spaces normalised,
/// sorted), from its default output.
fn parse_dig(text: &str) -> (String, Vec<String>, Vec<String>) {
    let mut status = None;
    let mut flags = Vec::new();
    let mut answer = Vec::new();
    let mut in_answer = false;
    for line in text.lines() {
        if let Some((_, rest)) = line.split_once("status: ") {
            status = rest.split(',').next().map(|s| s.trim().to_owned());
        } else if let Some(rest) = line.strip_prefix(";; flags:") {
            let list = rest.split(';').next().unwrap_or_default();
            flags = list.split_whitespace().map(str::to_owned).collect();
        } else if line.starts_with(";; ANSWER SECTION:") {
            in_answer = true;
        } else if in_answer {
            if line.trim().is_empty() || line.starts_with(';') {
                in_answer = false;
            } else {
                answer.push(line.split_whitespace().collect::<Vec<_>>().join(" "));
            }
        }
    }
    answer.sort();
    let status = status.unwrap_or_else(|| panic!("no status in dig's output:\n{text}"));
    (status, flags, answer)
}

/// `/proc/<pid>/status` as `field -> value`.
fn proc_status(pid: u64) -> std::collections::BTreeMap<String, String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"))
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

/// What the container's process is allowed, seen from the host: its ids,
/// capabilities, no_new_privs, seccomp and its read-only root, as the
/// DaemonSet's securityContext says.
fn check_process(pid: u64, mirror: &Mirror, gid: &str) {
    let status = proc_status(pid);
    let field = |name: &str| {
        status
            .get(name)
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
            .clone()
    };
    let uid = mirror.uid.to_string();
    assert_eq!(field("Uid"), [uid.as_str(); 4].join("\t"), "uids");
    assert_eq!(field("Gid"), [gid; 4].join("\t"), "gids");
    let mask = mirror.capability_mask();
    let caps = |name: &str| u64::from_str_radix(&field(name), 16).expect("hex capabilities");
    assert_eq!(caps("CapBnd"), mask, "bounding capabilities");
    for set in ["CapPrm", "CapEff", "CapInh", "CapAmb"] {
        assert_eq!(caps(set) & !mask, 0, "{set} beyond the added capabilities");
    }
    let no_new_privileges = if mirror.no_new_privileges { "1" } else { "0" };
    assert_eq!(field("NoNewPrivs"), no_new_privileges, "no_new_privs");
    assert_eq!(field("Seccomp"), "2", "a seccomp filter (RuntimeDefault)");
    // The root as the process sees it: read-only, and no tmpfs on it.
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("mountinfo");
    let mounts: Vec<Vec<&str>> = mountinfo
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let root = mounts
        .iter()
        .rfind(|m| m[4] == "/")
        .unwrap_or_else(|| panic!("no / in\n{mountinfo}"));
    let root_read_only = root[5].split(',').any(|o| o == "ro");
    assert_eq!(root_read_only, mirror.read_only, "read-only root: {root:?}");
    for dir in ["/tmp", "/var/tmp", "/run"] {
        assert!(
            !mirror.read_only || mounts.iter().all(|m| m[4] != dir),
            "{dir} is mounted over the read-only root:\n{mountinfo}"
        );
    }
}

/// The page's podman commands, run in order with the test's archive,
/// container name and free ports: `podman load` names the image as the
/// page says; `podman run` has exactly the security options the DaemonSet
/// implies, and the process has only what they allow; `curl /ready` says
/// ready; `dig` (UDP and TCP) gets the example clusterset's answers;
/// `podman stop` (SIGTERM) turns /ready 503 while DNS still answers and
/// the process exits 0 within the grace period left after the preStop
/// sleep; `podman rm` and `podman rmi` leave nothing behind.
#[tokio::test(flavor = "multi_thread")]
async fn the_documented_podman_commands_run_the_image_as_the_daemonset_does() {
    require_tools();
    assert_eq!(
        euid(),
        0,
        "the podman test needs root: it runs podman as root, as tests/connectivity.rs does"
    );
    let mirror = Mirror::read();
    let commands = documented_commands();
    let dir = tempfile::tempdir().expect("tempdir");
    let archive = build_image(&dir.path().join("image.oci.tar"), &[]);
    let version = env!("CARGO_PKG_VERSION");
    let mut podman = Podman::new();
    // Unique on this machine: named after the test's own state directory.
    let name = podman.cgroup_parent()[1..].to_owned();
    let dns = SocketAddr::from(([127, 0, 0, 1], dns_server::free_udp_and_tcp_port()));
    let admin = SocketAddr::from(([127, 0, 0, 1], dns_server::free_udp_and_tcp_port()));
    let mut loaded: Option<String> = None;
    let mut pid: Option<u64> = None;
    let mut id = String::new();
    let mut done: Vec<&str> = Vec::new();
    for (place, mut words) in commands {
        let line = words.join(" ");
        eprintln!("{place}: {line}");
        let step = match (words[0].as_str(), words.get(1).map(String::as_str)) {
            ("podman", Some("load")) => {
                let (_, path) = option_value(&words, "-i")
                    .unwrap_or_else(|| panic!("{place}: podman load without -i"));
                assert_eq!(
                    path,
                    format!("target/image/clusterset-dns-{version}.oci.tar"),
                    "{place}: not the archive scripts/build-image.sh writes"
                );
                replace_option(&mut words, "-i", archive.to_str().unwrap(), &place);
                let expected = format!("docker.io/library/clusterset-dns:{version}");
                podman.image = Some(expected.clone());
                let output = podman.run(&words[1..], PODMAN_LIMIT).await;
                assert!(
                    output
                        .lines()
                        .any(|l| l == format!("Loaded image: {expected}")),
                    "{place}: podman load did not name the image {expected}:\n{output}"
                );
                assert_eq!(podman.list("images").await, std::slice::from_ref(&expected));
                loaded = Some(expected);
                "load"
            }
            ("podman", Some("run")) => {
                let (options, image, args) = split_run(&words, &place);
                let loaded = loaded.as_deref().expect("podman run before podman load");
                assert_eq!(image, loaded, "{place}: not the image podman load named");
                let image_user = podman.inspect("image", loaded).await["Config"]["User"]
                    .as_str()
                    .expect("the image's user")
                    .to_owned();
                let mut security: Vec<String> = options
                    .iter()
                    .filter(|o| SECURITY_OPTIONS.contains(&o.split('=').next().unwrap()))
                    .cloned()
                    .collect();
                security.sort();
                assert_eq!(
                    security,
                    mirror.options(&image_user),
                    "{place}: the security options of `podman run` are not what {DAEMONSET} \
                     asks for its container"
                );
                for wanted in ["--runtime=runc", "--network=host"] {
                    assert!(options.iter().any(|o| o == wanted), "{place}: no {wanted}");
                }
                assert_eq!(
                    args.first().map(String::as_str),
                    Some("serve"),
                    "{place}: the container runs `serve`"
                );
                replace_option(&mut words, "--name", &name, &place);
                let (_, dns_listen) = option_value(&words, "--dns-listen").expect("--dns-listen");
                let (_, admin_listen) =
                    option_value(&words, "--admin-listen").expect("--admin-listen");
                let dns_listen = with_port(&dns_listen, dns.port(), &place);
                let admin_listen = with_port(&admin_listen, admin.port(), &place);
                replace_option(&mut words, "--dns-listen", &dns_listen, &place);
                replace_option(&mut words, "--admin-listen", &admin_listen, &place);
                // The test's own cgroup parent, and none for conmon (which
                // podman would put in the shared `libpod_parent/conmon`).
                let cgroups = [
                    format!("--cgroup-parent={}", podman.cgroup_parent()),
                    "--cgroups=no-conmon".into(),
                ];
                words.splice(2..2, cgroups);
                podman.container = Some(name.clone());
                podman.run(&words[1..], PODMAN_LIMIT).await;
                let state = podman.inspect("container", &name).await;
                assert_eq!(state["State"]["Status"], "running", "{state:#}");
                assert_eq!(state["OCIRuntime"], "runc");
                id = state["Id"].as_str().expect("the container's id").to_owned();
                let process = state["State"]["Pid"].as_u64().expect("the container's pid");
                let gid = image_user.split_once(':').unwrap().1;
                let gid = mirror.gid.map_or_else(|| gid.to_owned(), |g| g.to_string());
                check_process(process, &mirror, &gid);
                pid = Some(process);
                "run"
            }
            ("curl", _) => {
                let url = words.last().cloned().expect("curl's URL");
                let (address, path) = url
                    .strip_prefix("http://")
                    .and_then(|u| u.split_once('/'))
                    .unwrap_or_else(|| panic!("{place}: {url} is not http://host:port/path"));
                assert_eq!(path, "ready", "{place}: the page asks /ready");
                let address = with_port(address, admin.port(), &place);
                *words.last_mut().unwrap() = format!("http://{address}/{path}");
                // As a user would: again until the server has loaded.
                wait_for("curl /ready saying ready", READY_LIMIT, || {
                    let words = words.clone();
                    async move {
                        let output = tool(&words).await;
                        let body = String::from_utf8_lossy(&output.stdout).into_owned();
                        (output.status.success() && body == "ready\n")
                            .then_some(())
                            .ok_or(format!("{}: {body:?}", output.status))
                    }
                })
                .await;
                "curl"
            }
            ("dig", _) => {
                let server = words
                    .iter()
                    .position(|w| w.starts_with('@'))
                    .unwrap_or_else(|| panic!("{place}: dig without @server"));
                assert_eq!(words[server], "@127.0.0.1", "{place}");
                replace_option(&mut words, "-p", &dns.port().to_string(), &place);
                let question: Vec<&String> = words[1..]
                    .iter()
                    .filter(|w| !w.starts_with(['@', '+', '-']))
                    .filter(|w| w.parse::<u16>().is_err())
                    .collect();
                let [qname, qtype] = question[..] else {
                    panic!("{place}: dig asks one name and one type: {question:?}");
                };
                let (_, _, record) = EXAMPLE_ANSWERS
                    .iter()
                    .find(|(n, t, _)| n == qname && t == qtype)
                    .unwrap_or_else(|| {
                        panic!("{place}: the test knows no answer to {qname} {qtype}")
                    });
                let output = tool(&words).await;
                let stdout = String::from_utf8_lossy(&output.stdout);
                assert!(
                    output.status.success(),
                    "{place}: {}\n{stdout}",
                    output.status
                );
                let (status, flags, answer) = parse_dig(&stdout);
                assert_eq!(status, "NOERROR", "{place}:\n{stdout}");
                assert!(
                    flags.iter().any(|f| f == "aa"),
                    "{place}: not authoritative:\n{stdout}"
                );
                assert_eq!(answer, [record.to_string()], "{place}:\n{stdout}");
                "dig"
            }
            ("podman", Some("stop")) => {
                let (_, time) = option_value(&words, "--time")
                    .unwrap_or_else(|| panic!("{place}: podman stop without --time"));
                assert_eq!(
                    time,
                    mirror.grace.as_secs().to_string(),
                    "{place}: --time is not {DAEMONSET}'s terminationGracePeriodSeconds"
                );
                assert_eq!(
                    words.last().map(String::as_str),
                    Some("clusterset-dns"),
                    "{place}"
                );
                *words.last_mut().unwrap() = name.clone();
                let state = podman.inspect("container", &name).await;
                // podman stop sends the container's stop signal: SIGTERM.
                let signal = &state["Config"]["StopSignal"];
                assert!(
                    signal == 15 || signal == "SIGTERM" || signal == "15",
                    "stop signal {signal}"
                );
                // What Kubernetes leaves for SIGTERM to exit after preStop.
                let budget = mirror.grace - mirror.pre_stop;
                let started = tokio::time::Instant::now();
                let stop = podman.command(&words[1..]).output();
                let watch = async {
                    let (status, body) =
                        wait_for("/ready 503 after SIGTERM", budget, || async move {
                            let (status, body) = support::http_get(admin, "/ready").await;
                            (status != 200)
                                .then_some((status, body))
                                .ok_or("still 200".to_owned())
                        })
                        .await;
                    assert_eq!(
                        (status, body.as_str()),
                        (503, "not ready: shutting down\n"),
                        "/ready after SIGTERM"
                    );
                    // The lame-duck interval: DNS answers on.
                    let probe =
                        dns_server::encode(&query("web.shop.svc.clusterset.local.", RecordType::A));
                    let reply = udp_raw(dns, &probe, Duration::from_secs(2))
                        .await
                        .and_then(|r| Message::from_vec(&r).ok())
                        .expect("an answer in the lame-duck interval");
                    assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
                };
                let (stopped, ()) = tokio::join!(
                    within(budget + Duration::from_secs(15), "podman stop", stop),
                    watch
                );
                let elapsed = started.elapsed();
                let stopped = stopped.expect("podman stop");
                assert!(
                    stopped.status.success(),
                    "{place}: {}\n{}",
                    stopped.status,
                    String::from_utf8_lossy(&stopped.stderr)
                );
                let state = podman.inspect("container", &name).await;
                assert_eq!(state["State"]["Status"], "exited", "{:#}", state["State"]);
                assert_eq!(
                    state["State"]["ExitCode"], 0,
                    "the exit code after SIGTERM (137: killed after --time)"
                );
                assert!(
                    elapsed < budget,
                    "stopped in {elapsed:?}, more than the {budget:?} the grace period leaves"
                );
                let pid = pid.expect("podman stop before podman run");
                assert!(
                    !Path::new(&format!("/proc/{pid}")).exists(),
                    "the process {pid} is still there"
                );
                eprintln!("stopped in {elapsed:?} (budget {budget:?})");
                "stop"
            }
            ("podman", Some("rm")) => {
                assert_eq!(
                    words.last().map(String::as_str),
                    Some("clusterset-dns"),
                    "{place}"
                );
                *words.last_mut().unwrap() = name.clone();
                podman.run(&words[1..], PODMAN_LIMIT).await;
                assert_eq!(podman.list("containers").await, Vec::<String>::new());
                let runc_state = Path::new(RUNC_ROOT).join(&id);
                assert!(!runc_state.exists(), "{} left", runc_state.display());
                "rm"
            }
            ("podman", Some("rmi")) => {
                let loaded = loaded.as_deref().expect("podman rmi before podman load");
                assert_eq!(words.last().map(String::as_str), Some(loaded), "{place}");
                podman.run(&words[1..], PODMAN_LIMIT).await;
                assert_eq!(podman.list("images").await, Vec::<String>::new());
                "rmi"
            }
            _ => panic!("{place}: tests/image.rs does not know how to run `{line}`"),
        };
        done.push(step);
    }
    assert_eq!(
        done,
        ["load", "run", "curl", "dig", "dig", "stop", "rm", "rmi"],
        "the steps of {IMAGE_DOC}'s ```sh {PODMAN_TAG} block"
    );
    // The container's cgroups are gone with it; its parent goes now.
    assert_eq!(podman.remove_cgroups(), Vec::<String>::new(), "cgroups");
    // Nothing of podman's is mounted any more under its directory.
    let state = podman.dir.path().to_str().unwrap().to_owned();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo.lines().any(|l| l.contains(&state)),
        "mounts left under {state}:\n{mountinfo}"
    );
}
