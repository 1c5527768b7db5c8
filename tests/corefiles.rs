//! Every Corefile snippet of the repository — fenced blocks marked
//! `corefile` in README.md, docs/**/*.md and deploy/**, and `Corefile` keys
//! of ConfigMaps under deploy/ — is started with the real CoreDNS (1.15,
//! from `scripts/testenv-build.sh`) and must come up and answer a
//! clusterset query through clusterset-dns, which serves the example
//! clusterset. Placeholders for the user to fill in (`<clusterset-dns
//! ClusterIP>`, NodeLocal DNSCache's `__PILLAR__…__`) are replaced by the
//! test's addresses and ports; an unknown placeholder fails. A Corefile
//! server block written anywhere else (inline code, an unmarked fence)
//! fails too, so no snippet escapes the check.
//!
//! Tier 2: needs the Go-built coredns, hence the `testenv` feature.

mod controlplane;
mod dns_server;
mod markdown;
mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dns_server::{Options, TestServer};
use hickory_proto::rr::RecordType;
use markdown::Block;

/// How long CoreDNS may take to start and answer.
const WAIT: Duration = Duration::from_secs(15);

/// Every Corefile snippet: fenced `corefile` blocks of the Markdown files,
/// and `data.Corefile` of ConfigMaps in deploy/.
fn snippets() -> Vec<Block> {
    let mut files = vec!["README.md".to_owned()];
    files.extend(markdown::markdown_files("docs"));
    files.extend(markdown::markdown_files("deploy"));
    let mut out: Vec<Block> = files
        .iter()
        .flat_map(|f| markdown::blocks(f))
        .filter(|b| b.language() == "corefile")
        .collect();
    let mut yaml = Vec::new();
    markdown::walk(&markdown::repo().join("deploy"), &mut yaml);
    for path in yaml {
        let name = path.to_string_lossy().into_owned();
        if !(name.ends_with(".yaml") || name.ends_with(".yml")) || name.contains("/templates/") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        for doc in docs {
            if let Some(corefile) = doc.pointer("/data/Corefile").and_then(|v| v.as_str()) {
                out.push(Block {
                    file: name.clone(),
                    line: 0,
                    info: "corefile".into(),
                    text: corefile.to_owned(),
                });
            }
        }
    }
    out
}

/// Whether `text` opens a Corefile server block: a line `<zone>[:port] … {`.
fn opens_server_block(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim();
        let Some(keys) = line.split('{').next() else {
            return false;
        };
        line.contains('{')
            && !keys.trim().is_empty()
            && keys.split_whitespace().all(|key| {
                let zone = key.split(':').next().unwrap_or("");
                let port_ok = key
                    .split_once(':')
                    .is_none_or(|(_, p)| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
                (zone == "." || zone.contains('.'))
                    && zone
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || ".-_".contains(c))
                    && port_ok
            })
    })
}

/// The snippet as CoreDNS gets it: every server block on `port`, every
/// placeholder replaced. Panics on a placeholder it does not know.
fn instantiate(block: &Block, port: u16, upstream: SocketAddr) -> String {
    let upstream = upstream.to_string();
    let mut text = block
        .text
        .replace("<clusterset-dns ClusterIP>", &upstream)
        .replace("__PILLAR__CLUSTER__DNS__", &upstream)
        .replace("__PILLAR__LOCAL__DNS__", "127.0.0.1")
        .replace("__PILLAR__DNS__SERVER__", "127.0.0.2");
    for marker in ["<", "__PILLAR__"] {
        assert!(
            !text.contains(marker),
            "{}: a placeholder this test does not know; add it to `instantiate`:\n{text}",
            block.place()
        );
    }
    // Server block keys at brace depth 0 get the test's port.
    let mut depth = 0usize;
    let mut lines = Vec::new();
    for line in text.lines() {
        let mut line = line.to_owned();
        if depth == 0 && line.trim_end().ends_with('{') {
            let keys = line.trim_end().trim_end_matches('{');
            let keys: Vec<String> = keys
                .split_whitespace()
                .map(|k| format!("{}:{port}", k.split(':').next().unwrap()))
                .collect();
            line = format!("{} {{", keys.join(" "));
        }
        depth += line.matches('{').count();
        depth = depth.saturating_sub(line.matches('}').count());
        lines.push(line);
    }
    text = lines.join("\n");
    text.push('\n');
    text
}

/// A CoreDNS process, killed on drop.
struct CoreDns {
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for CoreDns {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl CoreDns {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Starts CoreDNS with `corefile`; `Ok` once it printed its version
    /// (after every plugin's setup), `Err(log)` if it exits first.
    fn start(corefile: &str) -> Result<Self, String> {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("Corefile");
        std::fs::write(&conf, corefile).unwrap();
        let log = dir.path().join("coredns.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(controlplane::binary("coredns"))
            .arg("-conf")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start coredns");
        let mut coredns = Self {
            child,
            log,
            _dir: dir,
        };
        let start = Instant::now();
        loop {
            if coredns.log().contains("CoreDNS-1.15") {
                return Ok(coredns);
            }
            if let Some(status) = coredns.child.try_wait().unwrap() {
                return Err(format!("exited with {status}:\n{}", coredns.log()));
            }
            assert!(
                start.elapsed() < WAIT,
                "coredns neither started nor failed in {WAIT:?}:\n{}",
                coredns.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Polls `server` until it answers `name` A, and returns the answers.
async fn resolve_through(server: SocketAddr, name: &str, log: impl Fn() -> String) -> Vec<String> {
    let start = Instant::now();
    loop {
        let answers = dns_server::answers(server, name, RecordType::A).await;
        if !answers.is_empty() {
            return answers;
        }
        assert!(
            start.elapsed() < WAIT,
            "no answer for {name} through {server} in {WAIT:?}; coredns log:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The snippets exist where the documents promise them: README's, and
/// docs/deploy.md's CoreDNS and NodeLocal DNSCache recipes.
#[test]
fn the_documented_corefile_snippets_are_found() {
    let found = snippets();
    let places: Vec<String> = found.iter().map(Block::place).collect();
    assert!(
        found.iter().any(|b| b.file == "README.md"),
        "README.md: no corefile block: {places:?}"
    );
    let recipes = found.iter().filter(|b| b.file == "docs/deploy.md").count();
    assert!(recipes >= 2, "docs/deploy.md: {recipes} corefile blocks");
    assert!(
        found
            .iter()
            .any(|b| b.file == "docs/deploy.md" && b.text.contains("__PILLAR__LOCAL__DNS__")),
        "docs/deploy.md has no NodeLocal DNSCache snippet"
    );
}

/// A Corefile server block outside a `corefile` fence would escape the
/// check below: inline code (where a one-line block is easy to write and
/// CoreDNS rejects it) and fences of another language are refused.
#[test]
fn corefile_server_blocks_appear_only_in_corefile_fences() {
    let mut files = vec!["README.md".to_owned()];
    files.extend(markdown::markdown_files("docs"));
    files.extend(markdown::markdown_files("deploy"));
    let mut misplaced = Vec::new();
    for file in &files {
        for (line, code) in markdown::inline_code(file) {
            if opens_server_block(&code) {
                misplaced.push(format!("{file}:{line}: inline `{code}`"));
            }
        }
        for block in markdown::blocks(file) {
            if block.language() != "corefile" && opens_server_block(&block.text) {
                misplaced.push(format!("{}: a ```{} fence", block.place(), block.info));
            }
        }
    }
    assert!(
        misplaced.is_empty(),
        "Corefile server blocks outside ```corefile fences (tests/corefiles.rs parses only \
         those):\n{}",
        misplaced.join("\n")
    );
    // The detector itself: what it must catch, and what it must not.
    assert!(opens_server_block(
        "clusterset.local:53 { forward . <addr> }"
    ));
    assert!(opens_server_block("clusterset.local {\n}"));
    assert!(opens_server_block(".:53 {"));
    assert!(!opens_server_block(
        r#"{"clusterset.local": ["10.0.0.10"]}"#
    ));
    assert!(!opens_server_block(
        "kubernetes cluster.local { multicluster clusterset.local }"
    ));
}

/// Every snippet starts in the real CoreDNS and forwards the stub domain to
/// clusterset-dns: `web.shop` gets the example's clusterset IP through it.
#[tokio::test(flavor = "multi_thread")]
async fn every_corefile_snippet_starts_in_coredns_and_forwards_to_clusterset_dns() {
    let t0 = Instant::now();
    let server = TestServer::from_file(dns_server::EXAMPLE, Options::fast_path(true)).await;
    let all = snippets();
    assert!(!all.is_empty());
    for block in &all {
        let port = controlplane::free_udp_and_tcp_port();
        let corefile = instantiate(block, port, server.dns());
        let coredns = CoreDns::start(&corefile).unwrap_or_else(|log| {
            panic!(
                "{}: CoreDNS 1.15 refuses this snippet:\n{}\nas run:\n{corefile}\n{log}",
                block.place(),
                block.text
            )
        });
        // Whatever address the snippet binds, 127.0.0.1 is among them.
        let answers = resolve_through(
            ([127, 0, 0, 1], port).into(),
            "web.shop.svc.clusterset.local.",
            || coredns.log(),
        )
        .await;
        assert!(
            answers.iter().any(|a| a.ends_with(" IN A 10.96.10.10")),
            "{}: {answers:?}",
            block.place()
        );
    }
    eprintln!(
        "{} snippets started and answered in {:.1} s",
        all.len(),
        t0.elapsed().as_secs_f64()
    );
    server.stop().await;
}

/// The check fails on a bad snippet: README's former one-line block,
/// which CoreDNS 1.15 rejects ("Unexpected '}'"), and an unknown plugin.
#[test]
fn a_bad_snippet_fails_to_start() {
    for (text, error) in [
        (
            "clusterset.local:53 { forward . 127.0.0.1:5353 }\n",
            "Unexpected '}'",
        ),
        (
            "clusterset.local:53 {\n    forwardd . 127.0.0.1:5353\n}\n",
            "Unknown directive 'forwardd'",
        ),
    ] {
        let block = Block {
            file: "test".into(),
            line: 0,
            info: "corefile".into(),
            text: text.into(),
        };
        let port = controlplane::free_udp_and_tcp_port();
        let corefile = instantiate(&block, port, ([127, 0, 0, 1], 9).into());
        match CoreDns::start(&corefile) {
            Ok(coredns) => panic!("CoreDNS started with:\n{corefile}\n{}", coredns.log()),
            Err(log) => assert!(log.contains(error), "{log}"),
        }
    }
}
