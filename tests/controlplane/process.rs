//! The processes a control plane runs: where the testenv binaries are,
//! starting a child that logs to a file and dies with the test, stopping it,
//! the tail of its log, waiting for its HTTP endpoint, and CoreDNS.

use super::*;

/// The Go-built binaries the `testenv` tier needs, and the apt packages of
/// the tools this module runs.
pub(super) const BINARIES: [&str; 7] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "etcd",
    "coredns",
    "kwok",
    "kwok-stages.yaml",
];

pub(super) const TOOLS: [(&str, &str); 2] = [("curl", "curl"), ("openssl", "openssl")];

/// How to get the binaries, for failure messages.
pub(super) const HOW_TO_BUILD: &str = "build them with `scripts/testenv-build.sh` (Go module proxy; \
     ~12 min on 2 cores the first time, then cached in ~/.cache/clusterset-dns/testenv), \
     or run `scripts/test.sh`, which builds them and runs every test; \
     CLUSTERSET_DNS_TESTENV_BIN=DIR uses binaries from DIR";

/// The bin directory every test of this process uses, once chosen.
static DIR: OnceLock<PathBuf> = OnceLock::new();

/// The directory holding kube-apiserver, kube-controller-manager,
/// kube-scheduler, etcd, coredns, kwok and kwok-stages.yaml (and kubectl,
/// helm and toxiproxy-server, which [`binary`] finds where a test needs
/// them):
/// `CLUSTERSET_DNS_TESTENV_BIN`, else the cache of `scripts/testenv-build.sh`
/// (asked with `--check`, which never builds) for the Kubernetes that
/// `CLUSTERSET_DNS_KUBERNETES` names (newest by default). Panics — failing
/// the test, never skipping it — when a binary or a tool is missing.
pub(crate) fn bin_dir() -> &'static Path {
    DIR.get_or_init(|| match std::env::var_os("CLUSTERSET_DNS_TESTENV_BIN") {
        Some(dir) => checked(PathBuf::from(dir), "CLUSTERSET_DNS_TESTENV_BIN"),
        None => checked(cached_bin_dir(None), "scripts/testenv-build.sh --check"),
    })
}

/// Makes every test of this process run on the oldest supported
/// Kubernetes (`K8S_OLDEST`), whatever the run's version: for a test
/// target whose trial needs it (an apiserver emulating the release
/// before it). Call before anything starts; panics if another directory
/// was chosen already.
pub(crate) fn use_oldest_kubernetes() {
    let dir = DIR.get_or_init(|| {
        checked(
            cached_bin_dir(Some("oldest")),
            "CLUSTERSET_DNS_KUBERNETES=oldest scripts/testenv-build.sh --check",
        )
    });
    assert!(
        dir.to_string_lossy()
            .contains(&format!("k8s-{}_", kubernetes_pin("K8S_OLDEST"))),
        "{} is not the oldest Kubernetes' bin directory",
        dir.display()
    );
}

/// The (major, minor) of the Kubernetes in [`bin_dir`], from
/// `kube-apiserver --version` (`Kubernetes v1.33.13`): for the few
/// behaviours that differ between the releases the tests run on
/// (docs/compatibility.md).
pub(crate) fn kubernetes_version() -> (u32, u32) {
    static VERSION: OnceLock<(u32, u32)> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let output = Command::new(bin_dir().join("kube-apiserver"))
            .arg("--version")
            .output()
            .expect("kube-apiserver --version");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let version = text
            .split_whitespace()
            .find_map(|word| word.strip_prefix('v'))
            .unwrap_or_else(|| panic!("no version in `kube-apiserver --version`: {text}"));
        let mut numbers = version.split('.').map(|n| n.parse::<u32>().ok());
        match (numbers.next().flatten(), numbers.next().flatten()) {
            (Some(major), Some(minor)) => (major, minor),
            _ => panic!("no version in `kube-apiserver --version`: {text}"),
        }
    })
}

/// `NAME=value` of `scripts/testenv-build.sh` (a version pin).
pub(crate) fn kubernetes_pin(name: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/testenv-build.sh");
    let text = std::fs::read_to_string(&script).expect("read scripts/testenv-build.sh");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no {name}= in scripts/testenv-build.sh"))
        .to_owned()
}

/// The bin directory `scripts/testenv-build.sh --check` prints for the
/// Kubernetes `kubernetes` names (`None`: what the environment says).
fn cached_bin_dir(kubernetes: Option<&str>) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/testenv-build.sh");
    let mut command = Command::new("bash");
    command.arg(&script).arg("--check").stderr(Stdio::inherit());
    if let Some(kubernetes) = kubernetes {
        command.env("CLUSTERSET_DNS_KUBERNETES", kubernetes);
    }
    let output = command
        .output()
        .expect("run scripts/testenv-build.sh --check");
    assert!(
        output.status.success(),
        "the testenv tests need the binaries of scripts/testenv-build.sh, and \
         CLUSTERSET_DNS_TESTENV_BIN is unset and the testenv cache has none \
         (see `scripts/testenv-build.sh --check` above): {HOW_TO_BUILD}"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let dir = stdout
        .lines()
        .last()
        .expect("testenv-build.sh --check prints the bin dir")
        .trim();
    PathBuf::from(dir)
}

/// `dir`, once the tools and binaries the tests need are there.
fn checked(dir: PathBuf, from: &str) -> PathBuf {
    for (tool, package) in TOOLS {
        let found = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        assert!(
            found,
            "`{tool}` not found: the testenv tests need it; \
             `apt-get install {package}` (scripts/test.sh installs it)"
        );
    }
    let missing: Vec<&str> = BINARIES
        .into_iter()
        .filter(|b| !dir.join(b).is_file())
        .collect();
    assert!(
        missing.is_empty(),
        "the testenv tests need {}, which {} (from {from}) does not hold; {HOW_TO_BUILD}",
        missing.join(", "),
        dir.display()
    );
    dir
}

/// `bin_dir()/name`, or a panic that says how to get it (never a skip).
pub(crate) fn binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.is_file(),
        "{} is missing: run scripts/testenv-build.sh (or point CLUSTERSET_DNS_TESTENV_BIN at \
         the directory it prints)",
        path.display()
    );
    path
}

/// Starts `program` with `args`, stdout and stderr to `log`, with
/// `PR_SET_PDEATHSIG` (it dies with this process); panics if it cannot start.
/// For processes the harness has no type for (the demo's `clusterset-dns serve`).
pub(crate) fn spawn_logged(program: &Path, args: &[String], log: &Path) -> Child {
    spawn(program, args, log)
}

/// The `clusterset-dns` binary: cargo's `CARGO_BIN_EXE_clusterset-dns` in
/// tests and benches; elsewhere (the demo, a Cargo example, which cargo gives
/// no such variable) `CLUSTERSET_DNS_BIN`, else `clusterset-dns` next to the
/// running executable's directory (`target/debug/examples/demo` →
/// `target/debug/clusterset-dns`).
pub(crate) fn clusterset_dns_binary() -> PathBuf {
    if let Some(path) = option_env!("CARGO_BIN_EXE_clusterset-dns") {
        return PathBuf::from(path);
    }
    if let Some(path) = std::env::var_os("CLUSTERSET_DNS_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the path of the running executable");
    exe.parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("clusterset-dns"))
        .expect("the executable is in a directory")
}

pub(super) fn spawn(program: &Path, args: &[String], log: &Path) -> Child {
    spawn_with_env(program, args, &[], log)
}

pub(super) fn spawn_with_env(
    program: &Path,
    args: &[String],
    env: &[(&str, String)],
    log: &Path,
) -> Child {
    assert!(
        program.is_file(),
        "{} is missing: run scripts/testenv-build.sh (or point CLUSTERSET_DNS_TESTENV_BIN at \
         the directory it prints)",
        program.display()
    );
    let mut command = Command::new(program);
    command.args(args).envs(env.iter().map(|(k, v)| (k, v)));
    support::spawn_logged_command(&mut command, log, false)
}

pub(super) fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The end of a log, errors (klog `E`/`F` lines) first.
/// The last lines of the log at `path`, for failure messages.
pub(crate) fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let errors: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with('E') || l.starts_with('F') || l.contains("rror"))
        .collect();
    let last = &lines[lines.len().saturating_sub(15)..];
    format!(
        "errors:\n{}\nlast lines:\n{}",
        errors[errors.len().saturating_sub(15)..].join("\n"),
        last.join("\n")
    )
}

pub(super) fn wait_http_ok(url: &str, timeout: Duration, what: &str, log: &Path) {
    wait_http_ok_while(url, timeout, what, log, || {});
}

/// Polls `url` with curl (2 s per try) until it answers 2xx, calling
/// `alive` before each try (it panics when the process has exited); panics
/// with the tail of `log` after `timeout`.
pub(super) fn wait_http_ok_while(
    url: &str,
    timeout: Duration,
    what: &str,
    log: &Path,
    alive: impl Fn(),
) {
    let deadline = Instant::now() + timeout;
    loop {
        alive();
        let ok = Command::new("curl")
            .args(["-sf", "-o", "/dev/null", "--max-time", "2", url])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if ok {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} not ready in {timeout:?}; log:\n{}",
            tail(log)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A child process other than etcd and the apiservers (kube-controller-manager,
/// kube-scheduler, kwok), killed on drop.
pub(super) struct Process {
    name: String,
    child: Mutex<Child>,
    pub(super) log: PathBuf,
}

impl Process {
    pub(super) fn start(name: &str, args: &[String], log: PathBuf) -> Self {
        Self::start_with_env(name, args, &[], log)
    }

    pub(super) fn start_with_env(
        name: &str,
        args: &[String],
        env: &[(&str, String)],
        log: PathBuf,
    ) -> Self {
        let child = spawn_with_env(&binary(name), args, env, &log);
        Self {
            name: name.into(),
            child: Mutex::new(child),
            log,
        }
    }

    /// Panics (with its log) if it has exited.
    pub(super) fn assert_running(&self) {
        let status = self.child.lock().unwrap().try_wait().ok().flatten();
        if let Some(status) = status {
            panic!(
                "{} exited with {status}; log {}:\n{}",
                self.name,
                self.log.display(),
                tail(&self.log)
            );
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        stop(self.child.get_mut().unwrap());
    }
}

/// A running CoreDNS, killed on drop.
pub(crate) struct CoreDns {
    child: Child,
    /// Its DNS address.
    pub addr: std::net::SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for CoreDns {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

impl CoreDns {
    /// Starts CoreDNS with `corefile`, in which `{port}` is replaced by a
    /// free port; `addr` is that port on 127.0.0.1.
    pub(crate) fn start(corefile: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_udp_and_tcp_port();
        let conf = dir.path().join("Corefile");
        std::fs::write(&conf, corefile.replace("{port}", &port.to_string())).unwrap();
        let log = dir.path().join("coredns.log");
        let child = spawn(
            &bin_dir().join("coredns"),
            &["-conf".into(), conf.display().to_string()],
            &log,
        );
        Self {
            child,
            addr: ([127, 0, 0, 1], port).into(),
            log,
            _dir: dir,
        }
    }

    /// CoreDNS's output so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The ESTABLISHED TCP connections of `pid`, counted by remote port: its
/// socket file descriptors whose inode is in `/proc/<pid>/net/tcp{,6}`
/// with state 01.
pub(crate) fn established_connections(pid: u32) -> std::collections::BTreeMap<u16, usize> {
    let mut inodes = std::collections::HashSet::new();
    if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                let target = target.to_string_lossy().into_owned();
                if let Some(inode) = target
                    .strip_prefix("socket:[")
                    .and_then(|rest| rest.strip_suffix(']'))
                    .and_then(|inode| inode.parse::<u64>().ok())
                {
                    inodes.insert(inode);
                }
            }
        }
    }
    let mut by_port = std::collections::BTreeMap::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 10 || fields[3] != "01" {
                continue;
            }
            let Ok(inode) = fields[9].parse::<u64>() else {
                continue;
            };
            if !inodes.contains(&inode) {
                continue;
            }
            let port = fields[2]
                .rsplit(':')
                .next()
                .and_then(|hex| u16::from_str_radix(hex, 16).ok())
                .unwrap_or(0);
            *by_port.entry(port).or_insert(0) += 1;
        }
    }
    by_port
}

/// The port of an `https://host:port` URL.
pub(crate) fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .expect("a URL with a port")
}
