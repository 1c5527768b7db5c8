//! A real control plane for tests: one etcd and one or more kube-apiservers
//! (one "cluster" each, separated by `--etcd-prefix`) on loopback ports,
//! built by `scripts/testenv-build.sh` and cached outside the repository.
//!
//! Everything is torn down on drop — also when a test panics — and every
//! child gets `PR_SET_PDEATHSIG`, so even a killed test run leaks no
//! processes.
#![allow(dead_code)]

// Only the `testenv` tier may start a control plane: a test target that
// uses this module needs `required-features = ["testenv"]` in Cargo.toml,
// so that plain `cargo test` neither compiles it nor needs the binaries.
#[cfg(not(feature = "testenv"))]
compile_error!(
    "tests/controlplane needs the Go-built testenv binaries: give the test target \
     `required-features = [\"testenv\"]` in Cargo.toml (README.md, \"Tests\")"
);

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Token of the `system:masters` admin user.
pub const ADMIN_TOKEN: &str = "admin-token";
/// Token of the unprivileged user `clusterset-dns` (no groups).
pub const DNS_TOKEN: &str = "clusterset-dns-token";
/// User name behind [`DNS_TOKEN`].
pub const DNS_USER: &str = "clusterset-dns";

/// The Go-built binaries the `testenv` tier needs, and the apt packages of
/// the tools this module runs.
const BINARIES: [&str; 3] = ["kube-apiserver", "etcd", "coredns"];
const TOOLS: [(&str, &str); 2] = [("curl", "curl"), ("openssl", "openssl")];

/// How to get the binaries, for failure messages.
const HOW_TO_BUILD: &str = "build them with `scripts/testenv-build.sh` (Go module proxy; \
     ~25 min on 2 cores the first time, then cached in ~/.cache/clusterset-dns/testenv), \
     or run `scripts/test.sh`, which builds them and runs every test; \
     CLUSTERSET_DNS_TESTENV_BIN=DIR uses binaries from DIR";

/// The directory holding kube-apiserver, etcd and coredns:
/// `CLUSTERSET_DNS_TESTENV_BIN`, else the cache of `scripts/testenv-build.sh`
/// (asked with `--check`, which never builds). Panics — failing the test,
/// never skipping it — when a binary or a tool is missing.
pub fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
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
        let (dir, from) = match std::env::var_os("CLUSTERSET_DNS_TESTENV_BIN") {
            Some(dir) => (PathBuf::from(dir), "CLUSTERSET_DNS_TESTENV_BIN"),
            None => {
                let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/testenv-build.sh");
                let output = Command::new("bash")
                    .arg(&script)
                    .arg("--check")
                    .stderr(Stdio::inherit())
                    .output()
                    .expect("run scripts/testenv-build.sh --check");
                assert!(
                    output.status.success(),
                    "the testenv tests need kube-apiserver, etcd and coredns, and \
                     CLUSTERSET_DNS_TESTENV_BIN is unset and the testenv cache has none \
                     (see `scripts/testenv-build.sh --check` above): {HOW_TO_BUILD}"
                );
                let stdout = String::from_utf8_lossy(&output.stdout);
                let dir = stdout
                    .lines()
                    .last()
                    .expect("testenv-build.sh --check prints the bin dir")
                    .trim();
                (PathBuf::from(dir), "scripts/testenv-build.sh --check")
            }
        };
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
    })
}

/// A free TCP port on 127.0.0.1 (bound and released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn spawn(program: &Path, args: &[String], log: &Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    #[allow(unsafe_code)]
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    command
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()))
}

fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// One kube-apiserver.
pub struct ApiServer {
    child: Option<Child>,
    args: Vec<String>,
    log: PathBuf,
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// kubeconfig with the admin token.
    pub admin_kubeconfig: PathBuf,
    /// kubeconfig with the unprivileged `clusterset-dns` token.
    pub dns_kubeconfig: PathBuf,
}

impl ApiServer {
    /// Kills the apiserver (etcd keeps the data).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop(&mut child);
        }
    }

    /// Starts it again on the same port and waits until it is ready.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "apiserver already running");
        self.child = Some(spawn(
            &bin_dir().join("kube-apiserver"),
            &self.args,
            &self.log,
        ));
        self.wait_ready(Duration::from_secs(90));
    }

    fn wait_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let ok = Command::new("curl")
                .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", "-H"])
                .arg(format!("Authorization: Bearer {ADMIN_TOKEN}"))
                .arg(format!("{}/readyz", self.url))
                .output()
                .map(|o| o.stdout == b"200")
                .unwrap_or(false);
            if ok {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "kube-apiserver exited with {status}; log:\n{}",
                    tail(&self.log)
                );
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready in {timeout:?}; log:\n{}",
                tail(&self.log)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A client with the admin token.
    pub async fn admin_client(&self) -> kube::Client {
        client_from(&self.admin_kubeconfig).await
    }
}

/// Builds a kube client from a kubeconfig file.
pub async fn client_from(path: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// The end of a log, errors (klog `E`/`F` lines) first.
fn tail(path: &Path) -> String {
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

fn wait_http_ok(url: &str, timeout: Duration, what: &str, log: &Path) {
    let deadline = Instant::now() + timeout;
    loop {
        let ok = Command::new("curl")
            .args(["-sf", "-o", "/dev/null", url])
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

/// etcd plus one apiserver per cluster.
pub struct ControlPlane {
    etcd: Child,
    /// The clusters' apiservers.
    pub apiservers: Vec<ApiServer>,
    dir: tempfile::TempDir,
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        for api in &mut self.apiservers {
            api.stop();
        }
        stop(&mut self.etcd);
    }
}

impl ControlPlane {
    /// Starts etcd and `clusters` apiservers, and installs `crds/` in each.
    pub async fn start(clusters: usize) -> Self {
        let bin = bin_dir();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (client_port, peer_port) = (free_port(), free_port());
        let etcd = spawn(
            &bin.join("etcd"),
            &[
                "--name=test".into(),
                format!("--data-dir={}", d.join("etcd").display()),
                format!("--listen-client-urls=http://127.0.0.1:{client_port}"),
                format!("--advertise-client-urls=http://127.0.0.1:{client_port}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-cluster=test=http://127.0.0.1:{peer_port}"),
                "--unsafe-no-fsync".into(),
                "--log-level=warn".into(),
            ],
            &d.join("etcd.log"),
        );
        wait_http_ok(
            &format!("http://127.0.0.1:{client_port}/readyz"),
            Duration::from_secs(30),
            "etcd",
            &d.join("etcd.log"),
        );
        let openssl = |args: &[&str]| {
            let ok = Command::new("openssl")
                .args(args)
                .stderr(Stdio::null())
                .status()
                .map(|s| s.success());
            assert!(
                matches!(ok, Ok(true)),
                "openssl {args:?} failed (is openssl installed?)"
            );
        };
        let sa_key = d.join("sa.key");
        let sa_pub = d.join("sa.pub");
        openssl(&["genrsa", "-out", sa_key.to_str().unwrap(), "2048"]);
        openssl(&[
            "rsa",
            "-in",
            sa_key.to_str().unwrap(),
            "-pubout",
            "-out",
            sa_pub.to_str().unwrap(),
        ]);
        let tokens = d.join("tokens.csv");
        std::fs::write(
            &tokens,
            format!(
                "{ADMIN_TOKEN},admin,admin,\"system:masters\"\n{DNS_TOKEN},{DNS_USER},{DNS_USER}\n"
            ),
        )
        .unwrap();

        let mut plane = Self {
            etcd,
            apiservers: Vec::new(),
            dir,
        };
        for i in 0..clusters {
            let port = free_port();
            let url = format!("https://127.0.0.1:{port}");
            let cluster_dir = plane.dir.path().join(format!("cluster{i}"));
            std::fs::create_dir_all(&cluster_dir).unwrap();
            let args = vec![
                format!("--etcd-servers=http://127.0.0.1:{client_port}"),
                format!("--etcd-prefix=/cluster{i}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={port}"),
                format!("--cert-dir={}", cluster_dir.join("pki").display()),
                format!("--service-account-issuer={url}"),
                format!("--service-account-key-file={}", sa_pub.display()),
                format!("--service-account-signing-key-file={}", sa_key.display()),
                "--service-cluster-ip-range=10.0.0.0/24".into(),
                "--authorization-mode=RBAC".into(),
                format!("--token-auth-file={}", tokens.display()),
                "--disable-admission-plugins=ServiceAccount".into(),
                "--allow-privileged=true".into(),
                "--profiling=false".into(),
                // No kubernetes.default endpoints: a loopback advertise address is refused otherwise.
                "--endpoint-reconciler-type=none".into(),
                "--enable-priority-and-fairness=false".into(),
            ];
            let admin_kubeconfig = cluster_dir.join("admin.kubeconfig");
            let dns_kubeconfig = cluster_dir.join("dns.kubeconfig");
            write_kubeconfig(&admin_kubeconfig, &url, ADMIN_TOKEN, &format!("cluster{i}"));
            write_kubeconfig(&dns_kubeconfig, &url, DNS_TOKEN, &format!("cluster{i}"));
            let mut api = ApiServer {
                child: None,
                args,
                log: cluster_dir.join("kube-apiserver.log"),
                url,
                admin_kubeconfig,
                dns_kubeconfig,
            };
            api.start();
            plane.apiservers.push(api);
        }
        for api in &plane.apiservers {
            install_crds(&api.admin_client().await).await;
        }
        plane
    }

    /// Starts a second apiserver for cluster `i` (same etcd prefix, new
    /// port) and returns its index in `apiservers`: writes through it reach
    /// cluster `i` while that cluster's first apiserver is down.
    pub fn start_replica(&mut self, i: usize) -> usize {
        let port = free_port();
        let url = format!("https://127.0.0.1:{port}");
        let n = self.apiservers.len();
        let dir = self.dir.path().join(format!("replica{n}"));
        std::fs::create_dir_all(&dir).unwrap();
        let args: Vec<String> = self.apiservers[i]
            .args
            .iter()
            .map(|a| {
                if a.starts_with("--secure-port=") {
                    format!("--secure-port={port}")
                } else if a.starts_with("--cert-dir=") {
                    format!("--cert-dir={}", dir.join("pki").display())
                } else {
                    a.clone()
                }
            })
            .collect();
        let admin_kubeconfig = dir.join("admin.kubeconfig");
        let dns_kubeconfig = dir.join("dns.kubeconfig");
        write_kubeconfig(&admin_kubeconfig, &url, ADMIN_TOKEN, &format!("replica{n}"));
        write_kubeconfig(&dns_kubeconfig, &url, DNS_TOKEN, &format!("replica{n}"));
        let mut api = ApiServer {
            child: None,
            args,
            log: dir.join("kube-apiserver.log"),
            url,
            admin_kubeconfig,
            dns_kubeconfig,
        };
        api.start();
        self.apiservers.push(api);
        n
    }

    /// A scratch directory that lives as long as the control plane.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

fn write_kubeconfig(path: &Path, server: &str, token: &str, name: &str) {
    let mut f = std::fs::File::create(path).unwrap();
    write!(
        f,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\n\
users:\n- name: user\n  user:\n    token: {token}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: user\ncurrent-context: {name}\n"
    )
    .unwrap();
}

/// Applies every CRD in `crds/` and waits until each is established.
pub async fn install_crds(client: &kube::Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, PostParams};
    use kube::runtime::wait::{await_condition, conditions};
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in clusterset_dns::api::crds::all() {
        let name = crd.metadata.name.clone().unwrap();
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("creating CRD {name}: {e}"),
        }
        tokio::time::timeout(
            Duration::from_secs(30),
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .unwrap_or_else(|_| panic!("CRD {name} not established in 30 s"))
        .unwrap();
    }
}

/// A running CoreDNS, killed on drop.
pub struct CoreDns {
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
    /// Starts CoreDNS with `corefile`, in which `{port}` is replaced by a free port.
    pub fn start(corefile: &str) -> Self {
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
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A port free for both UDP and TCP on 127.0.0.1.
pub fn free_udp_and_tcp_port() -> u16 {
    loop {
        let port = free_port();
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Creates every object of a multi-document manifest (expanding `kind:
/// List`) through the dynamic API, creating missing namespaces first.
pub async fn apply_manifest(client: &kube::Client, text: &str) {
    use kube::api::{Api, DynamicObject, PostParams};
    use kube::discovery::{Discovery, Scope};
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(text).unwrap();
    let mut objects = Vec::new();
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        if doc["kind"] == "List" {
            objects.extend(doc["items"].as_array().cloned().unwrap_or_default());
        } else {
            objects.push(doc);
        }
    }
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    for object in objects {
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        let types = object.types.clone().unwrap();
        let (group, version) = types
            .api_version
            .rsplit_once('/')
            .unwrap_or(("", &types.api_version));
        let gvk = kube::api::GroupVersionKind::gvk(group, version, &types.kind);
        let (resource, caps) = discovery
            .resolve_gvk(&gvk)
            .unwrap_or_else(|| panic!("{gvk:?} not served"));
        let api: Api<DynamicObject> = if caps.scope == Scope::Namespaced {
            let ns = object
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let namespace = k8s_openapi::api::core::v1::Namespace {
                metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    name: Some(ns.clone()),
                    ..Default::default()
                },
                ..Default::default()
            };
            let _ = namespaces.create(&PostParams::default(), &namespace).await;
            Api::namespaced_with(client.clone(), &ns, &resource)
        } else {
            Api::all_with(client.clone(), &resource)
        };
        api.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("creating {gvk:?}: {e}"));
    }
}
