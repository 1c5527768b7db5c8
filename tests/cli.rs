//! The built binary: `serve` answers queries and exits cleanly on SIGTERM;
//! `check` rejects a broken manifest naming the document and the field;
//! every subcommand speaks one dialect of flags (one name, environment
//! variable and duration syntax for one thing), old spellings still accepted.

mod dns_server;
mod support;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use dns_server::{
    POLL_INTERVAL, QUERY_TIMEOUT, Transport, exchange, query, repo_path, tcp_raw, udp_raw, within,
};
use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::RecordType;
use tokio::process::{Child, Command};
use tokio::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_clusterset-dns");
/// How long the binary may take to start answering.
const START_LIMIT: Duration = Duration::from_secs(10);
/// How long the binary may take to exit after SIGTERM.
const STOP_LIMIT: Duration = Duration::from_secs(5);

fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind TCP")
        .port()
}

/// Starts `serve` on free ports, with `extra` flags, and waits until it
/// answers; the ports are free only when chosen, so a child that lost a
/// race is retried.
async fn start_serve(extra: &[&str]) -> (Child, SocketAddr) {
    let probe = query("dns-version.clusterset.local.", RecordType::TXT);
    for _ in 0..3 {
        let dns = SocketAddr::from(([127, 0, 0, 1], dns_server::free_udp_and_tcp_port()));
        let admin = SocketAddr::from(([127, 0, 0, 1], free_tcp_port()));
        let mut child = Command::new(BIN)
            .arg("serve")
            .arg("--config")
            .arg(repo_path("config/clusterset-dns.toml"))
            .arg("--dns-listen")
            .arg(dns.to_string())
            .arg("--admin-listen")
            .arg(admin.to_string())
            .args(extra)
            .env("CLUSTERSET_DNS_LOG", "clusterset_dns=warn")
            // No lame-duck interval: tests/shutdown.rs is about that one.
            .env("CLUSTERSET_DNS_LAME_DUCK", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn clusterset-dns serve");
        let deadline = Instant::now() + START_LIMIT;
        loop {
            if let Some(status) = child.try_wait().expect("poll child") {
                eprintln!("serve exited early ({status}); retrying on other ports");
                break;
            }
            let bytes = dns_server::encode(&probe);
            match udp_raw(dns, &bytes, POLL_INTERVAL * 5).await {
                Some(reply) if is_response_to(&reply, &probe) => return (child, dns),
                // Not bound yet (refused at once) or not answering yet.
                _ => tokio::time::sleep(POLL_INTERVAL).await,
            }
            assert!(
                Instant::now() < deadline,
                "serve did not answer on {dns} within {START_LIMIT:?}"
            );
        }
    }
    panic!("serve failed to start three times");
}

/// Sends SIGTERM to `child`.
fn terminate(child: &Child) {
    let pid = child.id().expect("child is running") as libc::pid_t;
    // SAFETY: kill(2) with a pid we spawned and still own (not yet reaped,
    // so it cannot have been reused) and a valid signal number.
    #[allow(unsafe_code)]
    let sent = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(sent, 0, "kill: {}", std::io::Error::last_os_error());
}

/// Whether `reply` is a DNS response (QR set) to `query` (same ID).
fn is_response_to(reply: &[u8], query: &Message) -> bool {
    Message::from_vec(reply).is_ok_and(|m| {
        m.metadata.message_type == MessageType::Response && m.metadata.id == query.metadata.id
    })
}

/// `serve` answers over UDP and TCP and exits 0 within 5 s of SIGTERM.
#[tokio::test(flavor = "multi_thread")]
async fn serve_answers_and_exits_cleanly_on_sigterm() {
    let (mut child, dns) = start_serve(&[]).await;
    for transport in [Transport::Udp, Transport::Tcp] {
        let r = exchange(
            dns,
            transport,
            &query("web.shop.svc.clusterset.local.", RecordType::A),
        )
        .await;
        assert_eq!(r.metadata.response_code, ResponseCode::NoError);
        assert!(r.metadata.authoritative);
        assert_eq!(
            dns_server::sorted(&r.answers),
            ["web.shop.svc.clusterset.local. 5 IN A 10.96.10.10"],
            "{transport:?}"
        );
    }

    terminate(&child);
    let status = within(STOP_LIMIT, "exit after SIGTERM", child.wait())
        .await
        .expect("wait for child");
    assert!(status.success(), "exit status after SIGTERM: {status}");

    // Nothing answers any more.
    let bytes = dns_server::encode(&query("web.shop.svc.clusterset.local.", RecordType::A));
    assert!(tcp_raw(dns, &bytes, QUERY_TIMEOUT).await.is_none());
}

/// `check` accepts the example and rejects an invalid IP, naming document and field.
#[tokio::test(flavor = "multi_thread")]
async fn check_rejects_a_broken_manifest_naming_document_and_field() {
    let good = Command::new(BIN)
        .arg("check")
        .arg("--file")
        .arg(repo_path(dns_server::EXAMPLE))
        .output();
    let good = within(STOP_LIMIT, "check example", good)
        .await
        .expect("run check");
    let stdout = String::from_utf8_lossy(&good.stdout);
    assert!(good.status.success(), "check example: {}", good.status);
    assert!(stdout.contains("5 ServiceImports"), "{stdout}");

    let dir = tempfile::tempdir().expect("tempdir");
    let broken = dir.path().join("broken.yaml");
    std::fs::write(
        &broken,
        "apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {name: web, namespace: prod}
spec: {type: ClusterSetIP, ips: [10.96.0.1], ports: [{port: 80}]}
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {name: bad, namespace: prod}
spec: {type: ClusterSetIP, ips: [10.96.0.2, not-an-ip], ports: [{port: 80}]}
",
    )
    .expect("write broken manifest");
    let bad = Command::new(BIN)
        .arg("check")
        .arg("--file")
        .arg(&broken)
        .output();
    let bad = within(STOP_LIMIT, "check broken", bad)
        .await
        .expect("run check");
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success(), "check accepted a broken manifest");
    assert!(stderr.contains("document 2"), "{stderr}");
    assert!(stderr.contains("ServiceImport prod/bad"), "{stderr}");
    assert!(stderr.contains("spec.ips[1]"), "{stderr}");
}

/// The binary with `args`, without the options the caller's environment
/// may hold (`CLUSTERSET_DNS_*`, and `RUST_LOG`, which the controller still
/// reads) but with `env`.
fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(BIN);
    command.args(args);
    for (key, _) in std::env::vars() {
        if key.starts_with("CLUSTERSET_DNS_") || key == "RUST_LOG" {
            command.env_remove(key);
        }
    }
    command.envs(env.iter().copied());
    command
}

/// Runs the binary with `args` and `env` (see [`command`]) in `dir`;
/// returns exit success, stdout, stderr.
async fn run(args: &[&str], env: &[(&str, &str)], dir: &std::path::Path) -> (bool, String, String) {
    let mut command = command(args, env);
    command.current_dir(dir);
    let output = within(STOP_LIMIT, "run clusterset-dns", command.output())
        .await
        .expect("run clusterset-dns");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `--help` shows each default; `check` and `dump-zone` show only the
/// options they read.
#[tokio::test(flavor = "multi_thread")]
async fn help_shows_defaults_and_only_the_options_a_command_reads() {
    let here = std::env::temp_dir();
    let (ok, serve, _) = run(&["serve", "--help"], &[], &here).await;
    assert!(ok);
    for shown in [
        "[default: clusterset.local]",
        "[default: 0.0.0.0:53]",
        "[default: 0.0.0.0:9180]",
        "[default: 5]",
        "[default: 1000]",
        "[default: true]",
        "[default: text]",
        "[default: multicluster.x-k8s.io]",
        "--log-format",
        "CLUSTERSET_DNS_LOG_FORMAT",
    ] {
        assert!(
            serve.contains(shown),
            "serve --help lacks {shown}:\n{serve}"
        );
    }
    let (ok, check, _) = run(&["check", "--help"], &[], &here).await;
    assert!(ok);
    assert!(
        check.contains("--file") && check.contains("--config"),
        "{check}"
    );
    for hidden in ["--dns-listen", "--ttl", "--log", "--kubeconfig"] {
        assert!(
            !check.contains(hidden),
            "check --help shows {hidden}:\n{check}"
        );
    }
    let (ok, dump, _) = run(&["dump-zone", "--help"], &[], &here).await;
    assert!(ok);
    assert!(
        dump.contains("--negative-ttl") && dump.contains("[default: 5]"),
        "{dump}"
    );
    for hidden in ["--dns-listen", "--fast-path", "--log", "--import-group"] {
        assert!(
            !dump.contains(hidden),
            "dump-zone --help shows {hidden}:\n{dump}"
        );
    }
}

/// Flag over environment over file over default, seen in the zone
/// `dump-zone` prints; the file's relative `file` is taken from its own
/// directory, whatever the working directory.
#[tokio::test(flavor = "multi_thread")]
async fn flags_win_over_environment_over_file_over_defaults() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(repo_path(dns_server::EXAMPLE), dir.path().join("m.yaml")).expect("copy example");
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        "file = \"m.yaml\"\nzone = \"file.example\"\nttl = 30\nnegative_ttl = 31\nmax_records = 1\n",
    )
    .expect("write config");
    let config = config.to_str().expect("UTF-8 path");
    let elsewhere = std::env::temp_dir();
    let (ok, zone, stderr) = run(
        &["dump-zone", "--config", config, "--ttl", "10"],
        &[
            ("CLUSTERSET_DNS_TTL", "20"),
            ("CLUSTERSET_DNS_NEGATIVE_TTL", "21"),
        ],
        &elsewhere,
    )
    .await;
    assert!(ok, "{stderr}");
    // ttl: flag (10) over environment (20) over file (30).
    assert!(
        zone.contains("web.shop.svc.file.example. 10 IN A "),
        "{zone}"
    );
    // negative_ttl: environment (21) over file (31), in the SOA.
    let soa = zone.lines().find(|l| l.contains(" SOA ")).expect("an SOA");
    assert!(
        soa.starts_with("file.example. 21 IN SOA ") && soa.ends_with(" 21"),
        "{soa}"
    );
    // max_records: file (1) over default (1000); db has three IPv4 endpoints.
    let db = zone
        .lines()
        .filter(|l| l.starts_with("db.shop.svc.file.example. 10 IN A "))
        .count();
    assert_eq!(db, 1, "{zone}");
    // Defaults without flag, environment or file.
    let example = repo_path(dns_server::EXAMPLE);
    let (ok, zone, stderr) = run(
        &["dump-zone", "--file", example.to_str().expect("UTF-8 path")],
        &[],
        &elsewhere,
    )
    .await;
    assert!(ok, "{stderr}");
    assert!(
        zone.contains("web.shop.svc.clusterset.local. 5 IN A "),
        "{zone}"
    );
    // An unknown key in the file is an error naming it.
    std::fs::write(dir.path().join("bad.toml"), "tll = 5\n").expect("write config");
    let bad = dir.path().join("bad.toml");
    let (ok, _, stderr) = run(
        &["check", "--config", bad.to_str().expect("UTF-8 path")],
        &[],
        &elsewhere,
    )
    .await;
    assert!(!ok);
    assert!(stderr.contains("tll"), "{stderr}");
}

/// An error is printed once, with its cause once: `reading <path>: No such
/// file or directory (os error 2)`, not the cause twice.
#[tokio::test(flavor = "multi_thread")]
async fn errors_show_their_cause_exactly_once() {
    let here = std::env::temp_dir();
    let cause = "No such file or directory";
    for args in [
        &["check", "--file", "/nonexistent/m.yaml"][..],
        &["check", "--config", "/nonexistent/c.toml"],
        &["dump-zone", "--file", "/nonexistent/m.yaml"],
        &["serve", "--file", "/nonexistent/m.yaml"],
    ] {
        let (ok, _, stderr) = run(args, &[], &here).await;
        assert!(!ok, "{args:?} succeeded");
        assert_eq!(stderr.matches(cause).count(), 1, "{args:?}: {stderr}");
        assert_eq!(
            stderr.matches("/nonexistent/").count(),
            1,
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.starts_with("error: reading /nonexistent/"),
            "{args:?}: {stderr}"
        );
    }
}

/// Reads `child`'s stderr lines until one satisfies `wanted`; returns all
/// lines read.
async fn stderr_until(child: &mut Child, wanted: impl Fn(&str) -> bool) -> Vec<String> {
    use tokio::io::AsyncBufReadExt;
    let stderr = child.stderr.take().expect("piped stderr");
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    let read = async {
        while let Some(line) = lines.next_line().await.expect("read stderr") {
            let done = wanted(&line);
            seen.push(line);
            if done {
                return;
            }
        }
    };
    if tokio::time::timeout(START_LIMIT, read).await.is_err() {
        panic!("no such line within {START_LIMIT:?}:\n{}", seen.join("\n"));
    }
    seen
}

/// Writes `dir/kubeconfig`, naming an apiserver on a loopback port nothing
/// listens on (bound, then released); returns its path and the URL.
fn unreachable_kubeconfig(dir: &std::path::Path) -> (std::path::PathBuf, String) {
    let url = format!("https://127.0.0.1:{}", free_tcp_port());
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{url}\"}}}}]\nusers: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n"
        ),
    )
    .expect("write kubeconfig");
    (kubeconfig, url)
}

/// An apiserver that refuses connections is logged with its URL and the
/// cause, in plain text (stderr is a pipe, not a terminal) or as JSON.
#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_apiserver_is_logged_with_its_url_and_cause() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (kubeconfig, url) = unreachable_kubeconfig(dir.path());
    for format in ["text", "json"] {
        let mut child = Command::new(BIN)
            .arg("serve")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args([
                "--dns-listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
            ])
            .args(["--log-format", format])
            .env_remove("NO_COLOR")
            .env_remove("CLUSTERSET_DNS_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn serve");
        let lines = stderr_until(&mut child, |l| {
            l.contains("ServiceImport API not available")
        })
        .await;
        child.kill().await.expect("kill serve");
        let line = lines.last().expect("a line");
        assert!(line.contains(&url), "{format}: {line}");
        assert!(line.contains("Connection refused"), "{format}: {line}");
        let all = lines.join("\n");
        assert!(
            !all.contains('\u{1b}'),
            "{format}: colour codes on a pipe:\n{all}"
        );
        assert!(!all.contains("failed with error"), "{format}: {all}");
        if format == "json" {
            for line in &lines {
                let value: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
                assert!(value.get("level").is_some(), "{line}");
            }
        }
    }
}

/// `check` prints every skipped or rejected document (an unknown field, a
/// CRD limit, a kind DNS does not read) and exits non-zero.
#[tokio::test(flavor = "multi_thread")]
async fn check_fails_on_every_skipped_or_rejected_document() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("m.yaml");
    std::fs::write(
        &path,
        "apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {name: typo, namespace: prod}
spec: {type: ClusterSetIP, ip: [10.96.0.1], ports: [{port: 80}]}
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {name: good, namespace: prod}
spec: {type: ClusterSetIP, ips: [10.96.0.2], ports: [{port: 80}]}
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {name: twofour, namespace: prod}
spec: {type: ClusterSetIP, ips: [10.96.0.3, 10.96.0.4], ports: [{port: 80}]}
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata: {name: good, namespace: prod}
",
    )
    .expect("write manifest");
    let (ok, stdout, stderr) = run(
        &["check", "--file", path.to_str().expect("UTF-8 path")],
        &[],
        dir.path(),
    )
    .await;
    assert!(!ok, "check accepted:\n{stdout}{stderr}");
    assert!(
        stdout.contains("1 ServiceImports, 0 EndpointSlices, 1 skipped, 2 rejected"),
        "{stdout}"
    );
    for problem in [
        "rejected document 1: ServiceImport prod/typo: unknown field \"spec.ip\"",
        "rejected document 3: ServiceImport prod/twofour: spec.ips: at most one address per IP family",
        "skipped document 4: multicluster.x-k8s.io/v1beta1 ServiceExport prod/good",
    ] {
        assert!(stderr.contains(problem), "{problem}:\n{stderr}");
    }
}

/// `version` prints the crate version, the commit `HEAD` points at, the
/// target and the compiler, one fact per line; `--version` stays the short
/// clap form.
#[tokio::test(flavor = "multi_thread")]
async fn version_names_version_commit_target_and_rustc() {
    let here = std::env::temp_dir();
    let (ok, stdout, stderr) = run(&["version"], &[], &here).await;
    assert!(ok, "version failed: {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let [name, commit, target, rustc] = lines[..] else {
        panic!("four lines expected:\n{stdout}");
    };
    assert_eq!(
        name,
        format!("clusterset-dns {}", env!("CARGO_PKG_VERSION"))
    );
    let commit = commit.strip_prefix("commit: ").expect("commit line");
    let head = std::process::Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "HEAD"])
        .output()
        .expect("run git (the tests run in a git checkout)");
    assert!(head.status.success(), "git rev-parse HEAD failed");
    assert_eq!(commit, String::from_utf8_lossy(&head.stdout).trim());
    let target = target.strip_prefix("target: ").expect("target line");
    assert!(
        target.starts_with(std::env::consts::ARCH) && target.contains("linux"),
        "{target}"
    );
    assert!(rustc.starts_with("rustc: rustc 1."), "{rustc}");

    let (ok, short, _) = run(&["--version"], &[], &here).await;
    assert!(ok);
    assert_eq!(short.trim(), name);
}

/// Plain `crds` still prints the CRDs; `crds install` is a subcommand with
/// its own `--kubeconfig`, and fails naming the kubeconfig it cannot read.
#[tokio::test(flavor = "multi_thread")]
async fn crds_prints_and_crds_install_names_an_unreadable_kubeconfig() {
    let here = std::env::temp_dir();
    let (ok, yaml, _) = run(&["crds"], &[], &here).await;
    assert!(ok);
    assert_eq!(yaml, clusterset_dns::api::crds::render_all_yaml());
    let (ok, help, _) = run(&["crds", "install", "--help"], &[], &here).await;
    assert!(ok);
    assert!(
        help.contains("--kubeconfig") && help.contains("3 when"),
        "{help}"
    );
    let (ok, _, stderr) = run(
        &["crds", "install", "--kubeconfig", "/nonexistent/kubeconfig"],
        &[],
        &here,
    )
    .await;
    assert!(!ok);
    assert!(
        stderr.starts_with("error: reading /nonexistent/kubeconfig"),
        "{stderr}"
    );
}

/// `check` and `dump-zone` read the manifest as the server does: a FIFO
/// (which a plain read would wait on for a writer) or a file over
/// `--file-max-bytes` is refused at once, with the reason.
#[tokio::test(flavor = "multi_thread")]
async fn check_and_dump_zone_refuse_a_fifo_and_an_oversize_file_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("manifest.yaml");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(status.success(), "mkfifo failed");
    let fifo = fifo.to_str().unwrap();
    for command in ["check", "dump-zone"] {
        // `run` gives up after STOP_LIMIT: a blocked read fails the test.
        let (ok, _, stderr) = run(&[command, "--file", fifo], &[], dir.path()).await;
        assert!(!ok, "{command} accepted a FIFO");
        assert!(stderr.contains("is a FIFO"), "{command}: {stderr}");
    }
    let big = dir.path().join("big.yaml");
    std::fs::write(&big, "#".repeat(4096)).unwrap();
    let big = big.to_str().unwrap();
    for command in ["check", "dump-zone"] {
        let (ok, _, stderr) = run(
            &[command, "--file", big, "--file-max-bytes", "1024"],
            &[],
            dir.path(),
        )
        .await;
        assert!(!ok, "{command} read an oversize file");
        assert!(
            stderr.contains("more than the limit of 1024 bytes"),
            "{command}: {stderr}"
        );
    }
}

/// One option as `--help` describes it.
#[derive(Debug)]
struct HelpOption {
    /// The long name, without `--`.
    name: String,
    /// The environment variable it is read from, if any.
    env: Option<String>,
    /// The default `--help` shows, if any.
    default: Option<String>,
    /// Its whole description, whitespace collapsed (the layout differs
    /// between a short and a long `--help`).
    text: String,
}

/// The options `help` (a `--help` text) lists.
fn help_options(help: &str) -> Vec<HelpOption> {
    // An option starts on a line like `      --name <NAME>` or
    // `  -o, --output <OUTPUT>`; its text runs until the next one or the
    // next section (a line that is neither blank nor indented).
    let starts_option = |line: &str| {
        let line = line.trim_start();
        line.starts_with("--") || (line.starts_with('-') && line.get(2..6) == Some(", --"))
    };
    let mut options = Vec::new();
    let mut lines = help.lines().peekable();
    while let Some(line) = lines.next() {
        if !starts_option(line) {
            continue;
        }
        let (_, after) = line.split_once("--").expect("a long option");
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        let mut text = line.to_string();
        while let Some(next) =
            lines.next_if(|l| !starts_option(l) && (l.is_empty() || l.starts_with(' ')))
        {
            text.push_str(next);
        }
        let between = |open: &str, close: char| {
            let (_, rest) = text.split_once(open)?;
            rest.split_once(close).map(|(value, _)| value.to_string())
        };
        options.push(HelpOption {
            name,
            env: between("[env: ", '='),
            default: between("[default: ", ']'),
            text: text.split_whitespace().collect::<Vec<_>>().join(" "),
        });
    }
    options
}

/// Every subcommand path (`["peer", "add"]`), found through the `Commands:`
/// sections of `--help`, so that a new subcommand is surveyed too; each
/// with its `--help` text.
async fn every_subcommand_help() -> Vec<(Vec<String>, String)> {
    let here = std::env::temp_dir();
    let mut found = Vec::new();
    let mut pending = vec![Vec::<String>::new()];
    while let Some(path) = pending.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let (ok, help, stderr) = run(&args, &[], &here).await;
        assert!(ok, "{args:?}: {stderr}");
        let commands = help
            .split_once("Commands:\n")
            .map(|(_, rest)| rest.split("\n\n").next().unwrap_or_default());
        for line in commands.unwrap_or_default().lines() {
            let name = line.split_whitespace().next().expect("a command name");
            if name != "help" {
                pending.push([path.clone(), vec![name.to_string()]].concat());
            }
        }
        found.push((path, help));
    }
    found
}

/// One dialect: no subcommand shows an old spelling; an option two
/// subcommands share has one environment variable; the long-running
/// commands read every option from `CLUSTERSET_DNS_<OPTION>` (but the
/// downward-API namespace and pod name), and log with the same flags and
/// defaults.
#[tokio::test(flavor = "multi_thread")]
async fn every_subcommand_speaks_one_dialect() {
    let all = every_subcommand_help().await;
    let names: Vec<String> = all.iter().map(|(path, _)| path.join(" ")).collect();
    for expected in ["serve", "controller", "check", "peer add", "crds install"] {
        assert!(names.iter().any(|n| n == expected), "{expected}: {names:?}");
    }
    let mut seen: Vec<(String, HelpOption)> = Vec::new();
    for (path, help) in &all {
        let command = path.join(" ");
        for old in ["--admin-addr", "RUST_LOG"] {
            assert!(!help.contains(old), "{command} --help shows {old}:\n{help}");
        }
        for option in help_options(help) {
            if let Some((other, earlier)) = seen
                .iter()
                .find(|(_, o)| o.name == option.name && o.env.is_some() && option.env.is_some())
            {
                assert_eq!(
                    earlier.env, option.env,
                    "--{} of {other} and of {command}",
                    option.name
                );
            }
            seen.push((command.clone(), option));
        }
    }
    let options_of = |command: &str| {
        let (_, help) = all
            .iter()
            .find(|(path, _)| path.join(" ") == command)
            .expect("surveyed");
        help_options(help)
    };
    let (serve, controller) = (options_of("serve"), options_of("controller"));
    assert!(
        serve.len() > 25 && controller.len() > 15,
        "{serve:?} {controller:?}"
    );
    for option in serve.iter().chain(&controller) {
        if ["help", "version"].contains(&option.name.as_str()) {
            continue;
        }
        let scheme = format!(
            "CLUSTERSET_DNS_{}",
            option.name.replace('-', "_").to_uppercase()
        );
        let downward_api = ["POD_NAMESPACE", "POD_NAME"];
        let env = option.env.as_deref().unwrap_or("none");
        assert!(
            env == scheme || downward_api.contains(&env),
            "--{}: environment variable {env}, not {scheme}",
            option.name
        );
    }
    for shared in ["log", "log-format", "admin-listen"] {
        let find = |options: &[HelpOption]| {
            options
                .iter()
                .find(|o| o.name == shared)
                .map(|o| (o.env.clone(), o.default.clone()))
                .unwrap_or_else(|| panic!("no --{shared}"))
        };
        let (serve, controller) = (find(&serve), find(&controller));
        assert_eq!(serve.0, controller.0, "--{shared}");
        // Each admin endpoint has its own default port.
        if shared != "admin-listen" {
            assert_eq!(serve.1, controller.1, "--{shared}");
        }
    }
}

/// The options of every subcommand that talks to a cluster, written once
/// (src/cluster_args.rs): each with its environment variable, its default
/// as `--help` shows it, and the subcommands that take it.
const SHARED_CLUSTER_OPTIONS: &[(&str, &str, Option<&str>, &[&str])] = &[
    (
        "kubeconfig",
        "CLUSTERSET_DNS_KUBECONFIG",
        Some("$KUBECONFIG, else ~/.kube/config, else the pod's service account"),
        &[
            "serve",
            "controller",
            "crds install",
            "peer add",
            "peer list",
            "peer remove",
            "hub init",
            "hub join",
            "hub list",
            "hub leave",
        ],
    ),
    (
        "namespace",
        "CLUSTERSET_DNS_NAMESPACE",
        Some("$POD_NAMESPACE, else clusterset-dns"),
        &[
            "controller",
            "peer add",
            "peer list",
            "peer remove",
            "hub join",
            "hub leave",
        ],
    ),
    (
        "peer-selector",
        "CLUSTERSET_DNS_PEER_SELECTOR",
        Some("clusterset-dns.io/peer=true"),
        &["controller", "peer add", "peer list", "peer remove"],
    ),
];

/// `--kubeconfig`, `--namespace` and `--peer-selector` are spelled, read
/// from the environment, defaulted and described the same in every
/// subcommand that talks to a cluster.
#[tokio::test(flavor = "multi_thread")]
async fn every_subcommand_that_talks_to_a_cluster_takes_the_same_cluster_options() {
    let all = every_subcommand_help().await;
    for (name, env, default, commands) in SHARED_CLUSTER_OPTIONS {
        let mut described: Option<(String, String)> = None;
        for command in *commands {
            let (_, help) = all
                .iter()
                .find(|(path, _)| path.join(" ") == *command)
                .unwrap_or_else(|| panic!("no subcommand {command}"));
            let options = help_options(help);
            let option = options
                .iter()
                .find(|o| o.name == *name)
                .unwrap_or_else(|| panic!("{command} has no --{name}:\n{help}"));
            assert_eq!(option.env.as_deref(), Some(*env), "{command} --{name}");
            assert_eq!(option.default.as_deref(), *default, "{command} --{name}");
            // The text up to the environment variable: the description.
            let text = option
                .text
                .split(" [env: ")
                .next()
                .unwrap_or_default()
                .to_owned();
            match &described {
                Some((first, earlier)) => {
                    assert_eq!(&text, earlier, "--{name} of {first} and of {command}")
                }
                None => described = Some(((*command).to_owned(), text)),
            }
        }
    }
}

/// The shared options' environment variables are read: a namespace and a
/// peer selector from the environment reach `peer list` (its error names
/// them), and a kubeconfig from `CLUSTERSET_DNS_KUBECONFIG` is used by
/// `crds install` (its error names the file).
#[tokio::test(flavor = "multi_thread")]
async fn the_shared_options_are_read_from_the_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such.kubeconfig");
    let missing = missing.to_str().unwrap();
    let (ok, _, stderr) = run(
        &["crds", "install"],
        &[("CLUSTERSET_DNS_KUBECONFIG", missing)],
        dir.path(),
    )
    .await;
    assert!(!ok && stderr.contains(missing), "{stderr}");
    let (ok, _, stderr) = run(
        &["peer", "add", "--peer-kubeconfig", missing],
        &[
            ("CLUSTERSET_DNS_KUBECONFIG", missing),
            ("CLUSTERSET_DNS_PEER_SELECTOR", "a=x,a=y"),
        ],
        dir.path(),
    )
    .await;
    assert!(
        !ok && stderr.contains("--peer-selector a=x,a=y: no labels make a Secret match it"),
        "{stderr}"
    );
    let (ok, _, stderr) = run(
        &["controller"],
        &[("CLUSTERSET_DNS_PEER_SELECTOR", "team in (a")],
        dir.path(),
    )
    .await;
    assert!(!ok && stderr.contains("--peer-selector"), "{stderr}");
}

/// A bad duration is refused naming the option, whether from a flag, the
/// environment or the configuration file; good ones (units or plain
/// seconds) get past parsing (to the missing manifest, or the unreachable
/// apiserver).
#[tokio::test(flavor = "multi_thread")]
async fn durations_take_units_or_plain_seconds_and_a_bad_one_names_its_option() {
    let dir = tempfile::tempdir().expect("tempdir");
    let serve_durations = ["tcp-idle-timeout", "lame-duck", "apiserver-timeout"];
    let controller_durations = [
        "peer-grace-period",
        "startup-sync-timeout",
        "peer-reread-interval",
    ];
    let commands = [
        ("serve", &serve_durations[..]),
        ("controller", &controller_durations),
    ];
    for (command, durations) in commands {
        for flag in durations {
            let env = format!("CLUSTERSET_DNS_{}", flag.replace('-', "_").to_uppercase());
            let from_flag = run(&[command, &format!("--{flag}"), "5x"], &[], dir.path()).await;
            let from_env = run(&[command], &[(&env, "5x")], dir.path()).await;
            for (ok, _, stderr) in [from_flag, from_env] {
                assert!(!ok, "{command} --{flag} 5x accepted");
                assert!(
                    stderr.contains(&format!("invalid value '5x' for '--{flag} "))
                        && stderr.contains("unknown unit \"x\""),
                    "{command} --{flag}: {stderr}"
                );
            }
        }
    }
    let manifest = "/nonexistent/m.yaml";
    // Milliseconds count: 2500ms is over apiserver_timeout's least, 2s.
    for value in ["2500ms", "3", "2m", "1h"] {
        let flags: Vec<String> = serve_durations.iter().map(|f| format!("--{f}")).collect();
        let mut args = vec!["serve", "--file", manifest];
        for flag in &flags {
            args.extend([flag.as_str(), value]);
        }
        let (ok, _, stderr) = run(&args, &[], dir.path()).await;
        assert!(!ok);
        assert!(
            stderr.starts_with("error: reading /nonexistent/m.yaml"),
            "{value}: {stderr}"
        );
    }
    let config = dir.path().join("c.toml");
    std::fs::write(&config, "lame_duck = \"5x\"\n").expect("write config");
    let config = config.to_str().expect("UTF-8 path");
    let (ok, _, stderr) = run(&["serve", "--config", config], &[], dir.path()).await;
    assert!(!ok);
    assert!(
        stderr.contains("lame_duck") && stderr.contains("unknown unit \"x\""),
        "{stderr}"
    );
}

/// `--lame-duck` means the same written in milliseconds or in plain
/// seconds: `serve` exits that long after SIGTERM, not sooner.
#[tokio::test(flavor = "multi_thread")]
async fn lame_duck_in_milliseconds_or_plain_seconds_is_honoured() {
    for (value, lame_duck) in [
        ("1500ms", Duration::from_millis(1500)),
        ("1", Duration::from_secs(1)),
    ] {
        let (mut child, _) = start_serve(&["--lame-duck", value]).await;
        let sent = Instant::now();
        terminate(&child);
        let status = within(lame_duck + STOP_LIMIT, "exit after SIGTERM", child.wait())
            .await
            .expect("wait for serve");
        assert!(status.success(), "{value}: {status}");
        let exited = sent.elapsed();
        assert!(exited >= lame_duck, "{value}: exited after {exited:?}");
    }
}

/// Starts `controller` against an apiserver that refuses connections (it
/// keeps trying to take its Lease, serving its admin endpoint), with `args`
/// and `env`; returns it once `admin` answers `/live` (stderr piped), with
/// the directory of its kubeconfig.
async fn start_controller(
    args: &[&str],
    env: &[(&str, &str)],
    admin: SocketAddr,
) -> (Child, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (kubeconfig, _) = unreachable_kubeconfig(dir.path());
    let mut child = command(&[&["controller"], args].concat(), env)
        .env("KUBECONFIG", &kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn controller");
    let deadline = Instant::now() + START_LIMIT;
    loop {
        if let Some(status) = child.try_wait().expect("poll controller") {
            let output = child.wait_with_output().await.expect("controller output");
            panic!(
                "controller {args:?} exited ({status}):\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        if let Ok(mut stream) = tokio::net::TcpStream::connect(admin).await {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut reply = String::new();
            stream
                .write_all(b"GET /live HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                .await
                .expect("send GET /live");
            stream.read_to_string(&mut reply).await.expect("read /live");
            assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
            return (child, dir);
        }
        assert!(
            Instant::now() < deadline,
            "controller {args:?}: nothing on {admin} within {START_LIMIT:?}"
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// The controller's admin address is `--admin-listen`, as for `serve`, or
/// `CLUSTERSET_DNS_ADMIN_LISTEN`; the old `--admin-addr` still works; its
/// durations take units or plain seconds there too.
#[tokio::test(flavor = "multi_thread")]
async fn controller_takes_admin_listen_and_still_the_old_admin_addr() {
    for spelling in ["--admin-listen", "--admin-addr", "env"] {
        let admin = SocketAddr::from(([127, 0, 0, 1], free_tcp_port()));
        let admin_text = admin.to_string();
        let (mut args, mut env) = (vec!["--peer-grace-period", "1500ms"], Vec::new());
        match spelling {
            "env" => env.push(("CLUSTERSET_DNS_ADMIN_LISTEN", admin_text.as_str())),
            flag => args.extend([flag, &admin_text, "--startup-sync-timeout", "2"]),
        }
        let (mut child, _dir) = start_controller(&args, &env, admin).await;
        child.kill().await.expect("kill controller");
    }
}

/// The controller's log filter is `--log` or `CLUSTERSET_DNS_LOG`, as for
/// `serve`; `RUST_LOG`, which it used to read, still works when neither is
/// set, with a warning naming the new variable.
#[tokio::test(flavor = "multi_thread")]
async fn controller_logs_by_clusterset_dns_log_and_still_by_rust_log() {
    let deprecated = |l: &str| l.contains("RUST_LOG") && l.contains("CLUSTERSET_DNS_LOG");
    let lease = |l: &str| l.contains("cannot take the leader Lease");
    for (env, says_deprecated) in [
        (vec![("RUST_LOG", "warn")], true),
        (
            vec![("CLUSTERSET_DNS_LOG", "warn"), ("RUST_LOG", "off")],
            false,
        ),
    ] {
        let admin = SocketAddr::from(([127, 0, 0, 1], free_tcp_port()));
        let admin_text = admin.to_string();
        let (mut child, _dir) =
            start_controller(&["--admin-listen", &admin_text], &env, admin).await;
        // The Lease warning comes after the deprecation one, if any.
        let lines = stderr_until(&mut child, lease).await;
        child.kill().await.expect("kill controller");
        assert_eq!(
            lines.iter().any(|l| deprecated(l)),
            says_deprecated,
            "{env:?}:\n{}",
            lines.join("\n")
        );
    }
}

/// The markdown files whose commands users copy.
fn user_docs() -> Vec<std::path::PathBuf> {
    let mut files = vec![repo_path("README.md"), repo_path("tests/testenv/README.md")];
    let mut dirs = vec![repo_path("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read docs") {
            let path = entry.expect("a docs entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files
}

/// The long flags on `line` after `clusterset-dns <command>` (up to the end
/// of the inline code, a comment or a pipe), for the longest `command` of
/// `commands` that follows it.
fn flags_given(line: &str, commands: &[String]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (at, _) in line.match_indices("clusterset-dns ") {
        let rest = &line[at + "clusterset-dns ".len()..];
        let rest = rest.split(['`', '#', '|', ';']).next().unwrap_or_default();
        let Some(command) = commands
            .iter()
            .filter(|c| rest.starts_with(&format!("{c} ")) || rest.trim_end() == c.as_str())
            .max_by_key(|c| c.len())
        else {
            continue;
        };
        for word in rest[command.len()..].split_whitespace() {
            let word = word.trim_start_matches('[');
            if let Some(flag) = word.strip_prefix("--") {
                let flag = flag.split('=').next().unwrap_or_default();
                let flag = flag.trim_end_matches([']', ')', ',', '.']);
                found.push((command.clone(), flag.to_string()));
            }
        }
    }
    found
}

/// Every flag the docs give a subcommand (`clusterset-dns controller
/// --admin-listen …`) and every flag the shipped manifests pass is one that
/// subcommand's `--help` shows: no old spelling, hidden or not, is taught.
#[tokio::test(flavor = "multi_thread")]
async fn docs_and_manifests_give_each_subcommand_only_flags_it_shows() {
    let all = every_subcommand_help().await;
    let commands: Vec<String> = all
        .iter()
        .map(|(path, _)| path.join(" "))
        .filter(|c| !c.is_empty())
        .collect();
    let shown = |command: &str, flag: &str| {
        all.iter()
            .find(|(path, _)| path.join(" ") == command)
            .is_some_and(|(_, help)| help_options(help).iter().any(|o| o.name == flag))
    };
    let mut given = Vec::new();
    for file in user_docs() {
        let text = std::fs::read_to_string(&file).expect("read a doc");
        for (n, line) in text.lines().enumerate() {
            for (command, flag) in flags_given(line, &commands) {
                given.push((format!("{}:{}", file.display(), n + 1), command, flag));
            }
        }
    }
    for manifest in [
        "deploy/clusterset-dns.yaml",
        "deploy/controller.yaml",
        "deploy/helm/clusterset-dns/templates/clusterset-dns.yaml",
        "deploy/helm/clusterset-dns/templates/controller.yaml",
    ] {
        let text = std::fs::read_to_string(repo_path(manifest)).expect("read a manifest");
        // `args:` lists the subcommand, then its flags.
        let mut command = None;
        for (n, line) in text.lines().enumerate() {
            let item = line.trim().strip_prefix("- ").unwrap_or_default();
            if commands.iter().any(|c| c == item) {
                command = Some(item.to_string());
            } else if let (Some(command), Some(flag)) = (&command, item.strip_prefix("--")) {
                let flag = flag.split('=').next().unwrap_or_default().to_string();
                given.push((format!("{manifest}:{}", n + 1), command.clone(), flag));
            }
        }
    }
    for (command, flag) in [("serve", "lame-duck"), ("controller", "admin-listen")] {
        assert!(
            given.iter().any(|(_, c, f)| c == command && f == flag),
            "no doc or manifest gives {command} --{flag}: {given:?}"
        );
    }
    let unknown: Vec<String> = given
        .iter()
        .filter(|(_, command, flag)| !shown(command, flag))
        .map(|(place, command, flag)| format!("{place}: {command} --{flag}"))
        .collect();
    assert!(
        unknown.is_empty(),
        "flags that --help does not show:\n{}",
        unknown.join("\n")
    );
}
