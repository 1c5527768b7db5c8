//! Real resolvers' tools against the server: `dig` (bind9-dnsutils) and
//! `kdig` (knot-dnsutils), over UDP and TCP, on the fast path and the
//! hickory path. Their output is parsed and compared with the expected
//! status, flags and answer records. CI installs both tools; a missing tool
//! fails the test instead of skipping it.

mod dns_server;
mod support;

use std::process::Stdio;
use std::time::Duration;

use dns_server::{EXAMPLE, Options, TestServer, within};
use tokio::process::Command;

/// How long one tool run may take.
const TOOL_LIMIT: Duration = Duration::from_secs(10);

/// What a tool printed, parsed.
#[derive(Debug)]
struct Output {
    status: String,
    flags: Vec<String>,
    answer: Vec<String>,
}

/// Parses dig's and kdig's default output: the `status:` of the header
/// line, the `flags:` line and the answer section records.
fn parse(text: &str) -> Output {
    let mut status = None;
    let mut flags = Vec::new();
    let mut answer = Vec::new();
    let mut in_answer = false;
    for line in text.lines() {
        let lower = line.to_ascii_lowercase();
        if let Some((_, rest)) = line.split_once("status: ") {
            status = rest.split([',', ';']).next().map(|s| s.trim().to_string());
        } else if lower.starts_with(";; flags:") {
            let list = &line[";; flags:".len()..];
            let list = list.split(';').next().unwrap_or_default();
            flags = list.split_whitespace().map(String::from).collect();
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
    Output {
        status: status.unwrap_or_else(|| panic!("no status line in:\n{text}")),
        flags,
        answer,
    }
}

/// Fails with an installation hint when `tool` is not on PATH.
async fn require(tool: &str, package: &str) {
    let probe = Command::new(tool)
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    if let Err(error) = probe {
        panic!(
            "`{tool}` is required by this test but could not be run ({error}); \
             install it with `apt-get install {package}` (scripts/test.sh installs it)"
        );
    }
}

/// Runs `tool` for `name`/`qtype` against `server`.
async fn run(tool: &str, server: &TestServer, tcp: bool, name: &str, qtype: &str) -> Output {
    let addr = server.dns();
    let mut command = Command::new(tool);
    command
        .arg(format!("@{}", addr.ip()))
        .arg("-p")
        .arg(addr.port().to_string())
        .arg(name)
        .arg(qtype)
        .kill_on_drop(true);
    match tool {
        "dig" => command.args(["+tries=1", "+time=3"]),
        _ => command.args(["+retry=0", "+time=3"]),
    };
    if tcp {
        command.arg("+tcp");
    }
    let what = format!("{tool} {name} {qtype} (tcp: {tcp})");
    let output = within(TOOL_LIMIT, &what, command.output())
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{what} failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    parse(&stdout)
}

/// `(name, type, status, answer records)` checked with each tool.
const CHECKS: &[(&str, &str, &str, &[&str])] = &[
    (
        "web.shop.svc.clusterset.local.",
        "A",
        "NOERROR",
        &["web.shop.svc.clusterset.local. 5 IN A 10.96.10.10"],
    ),
    (
        "web.shop.svc.clusterset.local.",
        "AAAA",
        "NOERROR",
        &["web.shop.svc.clusterset.local. 5 IN AAAA fd00:10:96::a"],
    ),
    (
        "_https._tcp.web.shop.svc.clusterset.local.",
        "SRV",
        "NOERROR",
        &[
            "_https._tcp.web.shop.svc.clusterset.local. 5 IN SRV 0 100 443 web.shop.svc.clusterset.local.",
        ],
    ),
    (
        "db.shop.svc.clusterset.local.",
        "A",
        "NOERROR",
        &[
            "db.shop.svc.clusterset.local. 5 IN A 10.1.1.10",
            "db.shop.svc.clusterset.local. 5 IN A 10.1.1.11",
            "db.shop.svc.clusterset.local. 5 IN A 10.2.1.10",
        ],
    ),
    (
        "db-0.cluster-east.db.shop.svc.clusterset.local.",
        "AAAA",
        "NOERROR",
        &["db-0.cluster-east.db.shop.svc.clusterset.local. 5 IN AAAA fd00:1:1::10"],
    ),
    ("cache.shop.svc.clusterset.local.", "AAAA", "NOERROR", &[]),
    ("nope.shop.svc.clusterset.local.", "A", "NXDOMAIN", &[]),
    (
        "db-1.cluster-west.db.shop.svc.clusterset.local.",
        "A",
        "NXDOMAIN",
        &[],
    ),
    ("example.com.", "A", "REFUSED", &[]),
];

/// dig and kdig get the expected status, flags and answers over UDP and TCP on both paths.
#[tokio::test(flavor = "multi_thread")]
async fn dig_and_kdig_get_the_expected_answers_over_udp_and_tcp() {
    require("dig", "bind9-dnsutils").await;
    require("kdig", "knot-dnsutils").await;
    let servers = [
        (
            "fast path",
            TestServer::from_file(EXAMPLE, Options::fast_path(true)).await,
        ),
        (
            "hickory path",
            TestServer::from_file(EXAMPLE, Options::fast_path(false)).await,
        ),
    ];
    let mut failures = Vec::new();
    for (path, server) in &servers {
        for tool in ["dig", "kdig"] {
            for tcp in [false, true] {
                for (i, (name, qtype, status, answer)) in CHECKS.iter().enumerate() {
                    let out = run(tool, server, tcp, name, qtype).await;
                    let mut want: Vec<String> = answer.iter().map(|s| s.to_string()).collect();
                    want.sort();
                    let aa = out.flags.iter().any(|f| f == "aa");
                    let ra = out.flags.iter().any(|f| f == "ra");
                    let aa_expected = *status != "REFUSED";
                    if out.status != *status || out.answer != want || aa != aa_expected || ra {
                        failures.push(format!(
                            "#{i} {tool} {name} {qtype} (tcp: {tcp}, {path}): got {out:?}, \
                             want status {status}, aa {aa_expected}, answer {want:?}"
                        ));
                    }
                }
            }
        }
    }
    for (_, server) in servers {
        server.stop().await;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The output parser reads both tools' formats.
#[test]
fn the_parser_reads_dig_and_kdig_output() {
    let dig = ";; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: 1\n\
               ;; flags: qr aa rd; QUERY: 1, ANSWER: 1, AUTHORITY: 0, ADDITIONAL: 1\n\n\
               ;; ANSWER SECTION:\nweb.x. 5 IN\tA\t10.0.0.1\n\n;; Query time: 1 msec\n";
    let out = parse(dig);
    assert_eq!(out.status, "NOERROR");
    assert_eq!(out.flags, ["qr", "aa", "rd"]);
    assert_eq!(out.answer, ["web.x. 5 IN A 10.0.0.1"]);
    let kdig = ";; ->>HEADER<<- opcode: QUERY; status: NXDOMAIN; id: 2\n\
                ;; Flags: qr aa rd; QUERY: 1; ANSWER: 0; AUTHORITY: 1; ADDITIONAL: 0\n";
    let out = parse(kdig);
    assert_eq!(out.status, "NXDOMAIN");
    assert_eq!(out.flags, ["qr", "aa", "rd"]);
    assert!(out.answer.is_empty());
}
