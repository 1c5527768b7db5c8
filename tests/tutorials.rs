//! The tutorials in docs/tutorials run as written: `scripts/demo.sh up`
//! brings up the demo clusterset once, then every tutorial's ```` ```console ````
//! blocks run in order in one bash session per tutorial (from the repository
//! root), and each command's output (stdout and stderr) must be what the
//! tutorial shows. How outputs are compared (docs/tutorials/README.md,
//! "How the tutorials are checked"):
//!
//! - runs of spaces count as one space, and trailing blank lines are ignored;
//! - a clusterset IP or cluster IP (an address in cluster X's service range)
//!   matches any address of that range: the apiservers allocate them at
//!   random. A pod IP matches any address of its cluster's pod range: kwok
//!   hands them out in creation order, which the workload controllers of
//!   the three clusters do not fix;
//! - a read-only command (`dig …`, `kubectl … get …`) is run again every
//!   second for up to [`CONVERGE`] until its output matches, because the
//!   clusterset converges in the background, as it does for a user who
//!   types the commands; every other command runs once.
//!
//! During the blue-green tutorial the test also resolves the migrated name
//! through every cluster's CoreDNS, several times a second, and asserts that
//! no lookup failed once a cluster had answered it, until 5 s after the
//! tutorial's last command; during the move from the mesh to the hub,
//! likewise, that every answer for `db` holds all four of its addresses.
//! The move runs last, after `scripts/demo.sh show`: the walkthrough runs
//! on the mesh.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};

/// How long a read-only command is retried until its output matches: more
/// than the demo's 20 s peer grace period plus the time to notice a peer is
/// gone and to relist it when it returns.
const CONVERGE: Duration = Duration::from_secs(90);
/// The longest any single command may run.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(180);
/// The demo's clusters, in the order of their service ranges 10.100/16,
/// 10.101/16, 10.102/16 (tests/controlplane `ClusterSpec::member`).
const CLUSTERS: [&str; 3] = ["a", "b", "c"];
/// The name the blue-green tutorial migrates.
const MIGRATED: &str = "checkout.checkout.svc.clusterset.local.";
/// The name watched while the clusterset moves to the hub, and how many
/// addresses each answer must hold (two exporters, two pods each).
const MOVED: (&str, usize) = ("db.shop.svc.clusterset.local.", 4);

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `scripts/demo.sh down` on drop, also when the test fails.
struct Demo {
    state: PathBuf,
}

impl Demo {
    fn up() -> Self {
        let state =
            std::env::temp_dir().join(format!("clusterset-dns-tutorials-{}", std::process::id()));
        let demo = Self { state };
        let started = Instant::now();
        let output = demo.script(&["up"]);
        assert!(
            output.status.success(),
            "scripts/demo.sh up failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        eprintln!(
            "demo up in {:.1} s (cargo build included)",
            started.elapsed().as_secs_f64()
        );
        demo
    }

    fn script(&self, args: &[&str]) -> std::process::Output {
        Command::new("bash")
            .arg(repo().join("scripts/demo.sh"))
            .args(args)
            .env("CLUSTERSET_DNS_DEMO_DIR", &self.state)
            .current_dir(repo())
            .stdin(Stdio::null())
            .output()
            .expect("run scripts/demo.sh")
    }

    /// Cluster `name`'s CoreDNS address, from the env file.
    fn dns(&self, name: &str) -> SocketAddr {
        let env = std::fs::read_to_string(self.state.join("env")).unwrap();
        let key = format!("export DNS_{}=", name.to_uppercase());
        let port = env
            .lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|p| p.parse::<u16>().ok())
            .unwrap_or_else(|| panic!("no {key} in the env file:\n{env}"));
        ([127, 0, 0, 1], port).into()
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let output = self.script(&["down"]);
        if !output.status.success() {
            eprintln!(
                "scripts/demo.sh down failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}

/// One command of a tutorial and the output it shows.
#[derive(Debug)]
struct Step {
    /// 1-based line of the `$ ` line in the tutorial.
    line: usize,
    command: String,
    expected: String,
}

/// The commands of every ```` ```console ```` block: a line starting with
/// `$ ` is a command (a trailing `\` continues it on the next line); the
/// lines after it, up to the next command or the end of the block, are its
/// output.
fn steps(markdown: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut in_console = false;
    let mut continued = false;
    for (i, line) in markdown.lines().enumerate() {
        if !in_console {
            in_console = line.trim_end() == "```console";
            continue;
        }
        if line.trim_end() == "```" {
            in_console = false;
            continue;
        }
        if continued {
            let step = steps.last_mut().unwrap();
            step.command.push('\n');
            step.command.push_str(line);
            continued = line.ends_with('\\');
        } else if let Some(command) = line.strip_prefix("$ ") {
            steps.push(Step {
                line: i + 1,
                command: command.to_owned(),
                expected: String::new(),
            });
            continued = line.ends_with('\\');
        } else {
            let step = steps
                .last_mut()
                .unwrap_or_else(|| panic!("line {}: output before any command", i + 1));
            step.expected.push_str(line);
            step.expected.push('\n');
        }
    }
    assert!(!in_console, "unterminated ```console block");
    steps
}

/// Whether a command only reads (and so may be run again until the
/// clusterset has converged): `dig`, `kubectl … get`, and `kubectl … exec`
/// (the tutorials' execs make requests that change nothing).
fn read_only(command: &str) -> bool {
    let words: Vec<&str> = command.split_whitespace().collect();
    match words.first() {
        Some(&"dig") => true,
        Some(&"kubectl") => words.contains(&"get") || words.contains(&"exec"),
        _ => false,
    }
}

/// The cluster whose service range holds `ip`, if any.
fn service_range_of(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, _, _] = v4.octets();
            (a == 10 && (100..=102).contains(&b)).then(|| CLUSTERS[usize::from(b - 100)])
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            (s[0] == 0xfd00 && s[1] == 0x100 && s[2] <= 2 && s[3..7] == [0, 0, 0, 0])
                .then(|| CLUSTERS[usize::from(s[2])])
        }
    }
}

/// The cluster whose pod range (10.200/16, 10.201/16, 10.202/16) holds
/// `ip`, if any.
fn pod_range_of(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, _, _] = v4.octets();
            (a == 10 && (200..=202).contains(&b)).then(|| CLUSTERS[usize::from(b - 200)])
        }
        IpAddr::V6(_) => None,
    }
}

/// What is compared (see the crate docs): service-range addresses replaced
/// by `<service IP of X>`, pod-range ones by `<pod IP of X>`, runs of
/// spaces collapsed, trailing blank lines dropped.
fn normalise(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut normalised = String::new();
        let mut token = String::new();
        let flush = |token: &mut String, out: &mut String| {
            let ip = token.parse::<IpAddr>().ok();
            if let Some(cluster) = ip.and_then(service_range_of) {
                out.push_str(&format!("<service IP of {cluster}>"));
            } else if let Some(cluster) = ip.and_then(pod_range_of) {
                out.push_str(&format!("<pod IP of {cluster}>"));
            } else {
                out.push_str(token);
            }
            token.clear();
        };
        for ch in line.chars() {
            if ch.is_ascii_hexdigit() || ch == '.' || ch == ':' {
                token.push(ch);
            } else {
                flush(&mut token, &mut normalised);
                normalised.push(ch);
            }
        }
        flush(&mut token, &mut normalised);
        out.push_str(&normalised.split_whitespace().collect::<Vec<_>>().join(" "));
        out.push('\n');
    }
    out.trim_end().to_owned()
}

/// A bash session (stderr into stdout) that runs one command at a time.
struct Shell {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

const DONE: &str = "__tutorial_step_done__";

impl Shell {
    fn start(state: &Path) -> Self {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new("bash")
            .args(["--noprofile", "--norc"])
            .env("CLUSTERSET_DNS_DEMO_DIR", state)
            .current_dir(repo())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            // Its own process group, so that drop also ends what a
            // tutorial left in the background.
            .process_group(0)
            .spawn()
            .expect("start bash");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut shell = Self {
            child,
            stdin,
            lines,
        };
        shell.run("exec 2>&1");
        shell
    }

    /// Runs `command` (stdin from /dev/null) and returns its output.
    fn run(&mut self, command: &str) -> String {
        write!(
            self.stdin,
            "{{\n{command}\n}} </dev/null\nprintf '\\n%s\\n' {DONE}\n"
        )
        .expect("write to bash");
        self.stdin.flush().unwrap();
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        let mut output = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line == DONE => return output,
                Ok(line) => {
                    output.push_str(&line);
                    output.push('\n');
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "`{command}` still running after {COMMAND_TIMEOUT:?}; output so far:\n{output}"
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("bash exited during `{command}`; output:\n{output}")
                }
            }
        }
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        let group = self.child.id();
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{group}")])
            .status();
        let _ = self.child.wait();
    }
}

/// Runs every step of `tutorial` in one shell; panics at the first output
/// that does not match.
fn run_tutorial(demo: &Demo, tutorial: &Path) {
    let markdown = std::fs::read_to_string(tutorial).unwrap();
    let steps = steps(&markdown);
    assert!(
        steps.len() >= 5,
        "{}: only {} commands",
        tutorial.display(),
        steps.len()
    );
    let mut shell = Shell::start(&demo.state);
    let name = tutorial.file_name().unwrap().to_string_lossy().into_owned();
    for step in &steps {
        let want = normalise(&step.expected);
        let started = Instant::now();
        let mut runs = 0;
        let got = loop {
            let got = shell.run(&step.command);
            runs += 1;
            if normalise(&got) == want || !read_only(&step.command) || started.elapsed() > CONVERGE
            {
                break got;
            }
            std::thread::sleep(Duration::from_secs(1));
        };
        // Where a slow tutorial spends its time (shown with --nocapture).
        let took = started.elapsed();
        if runs > 1 || took > Duration::from_secs(2) {
            eprintln!(
                "{name}:{}: {:.1} s, {runs} run(s)",
                step.line,
                took.as_secs_f64()
            );
        }
        assert_eq!(
            normalise(&got),
            want,
            "{name}:{}: `{}` printed (normalised as shown; raw below) something else than the \
             tutorial shows{}\nraw output:\n{got}",
            step.line,
            step.command,
            if read_only(&step.command) {
                format!(" (retried for {CONVERGE:?})")
            } else {
                String::new()
            }
        );
    }
}

/// Resolves `name` through every cluster's CoreDNS until stopped, each
/// answer to hold at least `least` addresses; returns, per cluster,
/// (answered lookups, failed lookups after the first answer, the first
/// failures).
fn count_lookups(
    servers: Vec<(&'static str, SocketAddr)>,
    (name, least): (&'static str, usize),
    stop: Arc<AtomicBool>,
) -> Vec<(&'static str, usize, usize, Vec<String>)> {
    let mut counts: Vec<(&'static str, usize, usize, Vec<String>)> = servers
        .iter()
        .map(|(n, _)| (*n, 0, 0, Vec::new()))
        .collect();
    let mut query = Message::query();
    query.metadata.recursion_desired = true;
    query.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    while !stop.load(Ordering::Relaxed) {
        for ((_, server), (_, answered, failed, why)) in servers.iter().zip(counts.iter_mut()) {
            let result = resolve(*server, &query, least);
            match result {
                Ok(()) => *answered += 1,
                Err(e) if *answered > 0 => {
                    *failed += 1;
                    if why.len() < 5 {
                        why.push(e);
                    }
                }
                Err(_) => {}
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    counts
}

/// One UDP lookup: Ok when NOERROR with at least `least` records.
fn resolve(server: SocketAddr, query: &Message, least: usize) -> Result<(), String> {
    let socket = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    socket
        .set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    socket
        .send_to(&query.to_vec().unwrap(), server)
        .map_err(|e| e.to_string())?;
    let mut buf = [0u8; 4096];
    let n = socket
        .recv(&mut buf)
        .map_err(|e| format!("no answer: {e}"))?;
    let response = Message::from_vec(&buf[..n]).map_err(|e| e.to_string())?;
    match response.metadata.response_code {
        ResponseCode::NoError if response.answers.len() >= least => Ok(()),
        ResponseCode::NoError => Err(format!(
            "NOERROR with {} of {least} records",
            response.answers.len()
        )),
        rcode => Err(rcode.to_string()),
    }
}

/// The commands of README's "Try it locally" block that read a running
/// demo (`scripts/demo.sh env`, `dig`, `kubectl`), run in one bash session
/// against the demo just brought up: each must succeed and print something,
/// the `dig` answer the headless `shop/db` from clusters a and b. (`up` and
/// `down` are what [`Demo`] runs; the full show is the same code path.)
fn readme_try_it_locally(demo: &Demo) {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let section = readme
        .split("\n## Try it locally\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("README.md has a \"Try it locally\" section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("its first ```sh block");
    let commands: Vec<&str> = block
        .lines()
        .map(|line| line.split(" # ").next().unwrap_or("").trim())
        .filter(|c| !c.is_empty() && !c.starts_with("scripts/demo.sh"))
        .collect();
    assert!(
        commands
            .iter()
            .any(|c| c.starts_with("source <(scripts/demo.sh env)")),
        "{commands:?}"
    );
    for (i, command) in commands.iter().enumerate().skip(1) {
        let script = format!("set -e\n{}\n{command}\n", commands[0]);
        let deadline = Instant::now() + CONVERGE;
        loop {
            let output = Command::new("bash")
                .arg("-c")
                .arg(&script)
                .env("CLUSTERSET_DNS_DEMO_DIR", &demo.state)
                .current_dir(repo())
                .stdin(Stdio::null())
                .output()
                .expect("run bash");
            let stdout = String::from_utf8_lossy(&output.stdout);
            let ok = output.status.success()
                && !stdout.trim().is_empty()
                && (!command.starts_with("dig")
                    || (stdout.contains("10.200.") && stdout.contains("10.201.")));
            if ok {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "README.md Try it locally, command {i} `{command}`: {}\n{stdout}{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

#[test]
fn tutorials_run_as_written() {
    let started = Instant::now();
    let demo = Demo::up();
    readme_try_it_locally(&demo);
    let mut tutorials: Vec<PathBuf> = std::fs::read_dir(repo().join("docs/tutorials"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.ends_with(".md") && name.starts_with(|c: char| c.is_ascii_digit())
        })
        .collect();
    tutorials.sort();
    assert_eq!(tutorials.len(), 6, "tutorials found: {tutorials:?}");
    let (to_hub, on_mesh): (Vec<PathBuf>, Vec<PathBuf>) = tutorials
        .into_iter()
        .partition(|t| t.to_string_lossy().contains("mesh-to-hub"));
    for tutorial in &on_mesh {
        let watched = tutorial
            .to_string_lossy()
            .contains("blue-green")
            .then_some((MIGRATED, 1));
        run_watched(&demo, tutorial, watched);
    }
    let t0 = Instant::now();
    demo_walkthrough_says_only_what_it_shows(&demo);
    eprintln!(
        "scripts/demo.sh show ran true in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    for tutorial in &to_hub {
        run_watched(&demo, tutorial, Some(MOVED));
    }
    eprintln!("all tutorials in {:.1} s", started.elapsed().as_secs_f64());
}

/// Runs `tutorial`; with `watched` (a name and the least addresses an
/// answer holds), resolves it through every cluster's CoreDNS meanwhile,
/// and until 5 s after, and fails on any answer short of it once a
/// cluster had answered it in full.
fn run_watched(demo: &Demo, tutorial: &Path, watched: Option<(&'static str, usize)>) {
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let counter = watched.map(|watched| {
        let servers: Vec<(&str, SocketAddr)> = CLUSTERS.iter().map(|c| (*c, demo.dns(c))).collect();
        let stop = stop.clone();
        std::thread::spawn(move || count_lookups(servers, watched, stop))
    });
    run_tutorial(demo, tutorial);
    if let (Some(counter), Some((name, _))) = (counter, watched) {
        // A removal that lands a few seconds after the last command (a
        // debounce, a deferred delete) must be caught too.
        std::thread::sleep(Duration::from_secs(5));
        stop.store(true, Ordering::Relaxed);
        for (cluster, answered, failed, why) in counter.join().unwrap() {
            eprintln!(
                "{}: cluster {cluster}: {answered} lookups of {name} answered, {failed} failed",
                tutorial.display()
            );
            // The tutorial takes a few seconds; a counter that did not
            // run during it proves nothing.
            assert!(
                answered >= 10,
                "cluster {cluster}: only {answered} lookups of {name} answered"
            );
            assert_eq!(
                failed,
                0,
                "cluster {cluster}: lookups of {name} failed during {}: {why:?}",
                tutorial.display()
            );
        }
    }
    eprintln!(
        "{} ran as written in {:.1} s",
        tutorial.display(),
        t0.elapsed().as_secs_f64()
    );
}

/// `scripts/demo.sh show`, the walkthrough a new user runs (on the demo
/// the tutorials used, which they leave as they found it): it succeeds,
/// prints no error, and what it claims is what its commands show.
fn demo_walkthrough_says_only_what_it_shows(demo: &Demo) {
    let output = demo.script(&["show"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "scripts/demo.sh show: {}\n{stdout}{stderr}",
        output.status
    );
    // The data plane is what the connection claims need; the tier-2 run
    // has it (root), so a walkthrough without it would skip them.
    assert!(
        stdout.contains("== Connections through the clusterset IP"),
        "the walkthrough ran without its data plane:\n{stdout}"
    );
    // How long each wait took (`demo: cluster c answers ... after 1 s`).
    for line in stderr.lines().filter(|l| l.starts_with("demo: cluster")) {
        eprintln!("{line}");
    }
    let problems = walkthrough_problems(&stdout, &stderr);
    assert!(
        problems.is_empty(),
        "scripts/demo.sh show:\n{}\n\n{stdout}\n{stderr}",
        problems.join("\n")
    );
}

/// The commands the walkthrough ran (`$ ` lines) and what each printed, up
/// to the next blank line.
fn walkthrough_steps(stdout: &str) -> Vec<(&str, Vec<&str>)> {
    let mut steps: Vec<(&str, Vec<&str>)> = Vec::new();
    let mut open = false;
    for line in stdout.lines() {
        if let Some(command) = line.strip_prefix("$ ") {
            steps.push((command, Vec::new()));
            open = true;
        } else if line.trim().is_empty() || line.starts_with("== ") {
            open = false;
        } else if open && let Some((_, printed)) = steps.last_mut() {
            printed.push(line);
        }
    }
    steps
}

/// What contradicts the walkthrough in its output: an error line, and
/// every claim (a `# ...` after a command, or what a step stands for)
/// that the command's own output does not bear out. A claim this does not
/// know is reported too, so that a new one gets its check.
fn walkthrough_problems(stdout: &str, stderr: &str) -> Vec<String> {
    let mut problems: Vec<String> = stdout
        .lines()
        .chain(stderr.lines())
        .filter(|line| {
            let line = line.trim_start();
            line.starts_with("error:") || line.starts_with("Error ") || line.contains("ERROR:")
        })
        .map(|line| format!("an error: {line}"))
        .collect();
    for (command, printed) in walkthrough_steps(stdout) {
        let claim = command.split_once("    # ").map(|(_, claim)| claim.trim());
        let fail = |why: String| format!("`{command}`: {why}; printed {printed:?}");
        match claim {
            None => {}
            Some("within grace: still 4") if printed.len() != 4 => {
                problems.push(fail(format!("{} answers, not 4", printed.len())))
            }
            Some("within grace: still 4") => {}
            Some("only b now") => {
                // `uniq -c` lines: `<count> web from <pod IP>`.
                let (mut total, mut elsewhere) = (0, Vec::new());
                for line in &printed {
                    let mut words = line.split_whitespace();
                    total += words
                        .next()
                        .and_then(|n| n.parse::<u32>().ok())
                        .unwrap_or(0);
                    if !line.contains(" from 10.201.") {
                        elsewhere.push(*line);
                    }
                }
                if total != 20 || !elsewhere.is_empty() {
                    problems.push(fail(format!(
                        "{total} of 20 answered, {elsewhere:?} not by cluster b's pods"
                    )));
                }
            }
            Some(other) => {
                problems.push(fail(format!("a claim this test does not check: {other:?}")))
            }
        }
        // b unexported db: b's per-pod names are gone.
        if command.contains("db-0.cluster-b.db.shop")
            && !printed.iter().any(|l| l.contains("NXDOMAIN"))
        {
            problems.push(fail(
                "cluster b's pod name still answers after the unexport".into(),
            ));
        }
    }
    problems
}

#[test]
fn a_walkthrough_that_contradicts_itself_is_caught() {
    let good = "\n$ dig +short x | sort    # within grace: still 4\n1\n2\n3\n4\n\n\
                $ curl ... | sort | uniq -c    # only b now\n     12 web from 10.201.0.2\n      8 web from 10.201.0.3\n\n\
                $ dig @127.0.0.1 db-0.cluster-b.db.shop.svc.clusterset.local | grep status:\n;; ->>HEADER<<- opcode: QUERY, status: NXDOMAIN, id: 1\n";
    assert_eq!(walkthrough_problems(good, ""), Vec::<String>::new());
    let mixed = good.replace("      8 web from 10.201.0.3", "      8 web from 10.200.0.3");
    assert_eq!(walkthrough_problems(&mixed, "").len(), 1, "{mixed}");
    let three = good.replace("3\n4\n", "3\n");
    assert_eq!(walkthrough_problems(&three, "").len(), 1);
    let kept = good.replace("NXDOMAIN", "NOERROR");
    assert_eq!(walkthrough_problems(&kept, "").len(), 1);
    let conflict = "error: Apply failed with 2 conflicts: conflicts with \"clusterset-dns-tests\":";
    assert_eq!(walkthrough_problems(good, conflict).len(), 1);
    let unknown = good.replace("# only b now", "# all good");
    assert!(walkthrough_problems(&unknown, "")[0].contains("does not check"));
}

#[test]
fn console_blocks_parse_into_commands_and_outputs() {
    let markdown = "text\n```console\n$ echo a \\\n  b\na b\n$ true\n```\n```sh\n$ not run\n```\n";
    let steps = steps(markdown);
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert_eq!(steps[0].line, 3);
    assert_eq!(steps[0].command, "echo a \\\n  b");
    assert_eq!(steps[0].expected, "a b\n");
    assert_eq!(steps[1].command, "true");
    assert_eq!(steps[1].expected, "");
}

#[test]
fn service_and_pod_ips_match_by_cluster_range() {
    assert_eq!(
        normalise("hello   ClusterSetIP   10.101.209.164   cluster-a\n\n"),
        "hello ClusterSetIP <service IP of b> cluster-a"
    );
    assert_eq!(
        normalise("[10.102.1.2 fd00:100:1::7f]"),
        "[<service IP of c> <service IP of b>]"
    );
    assert_eq!(normalise("10.200.0.7"), normalise("10.200.0.8"));
    assert_ne!(normalise("10.200.0.7"), normalise("10.202.0.7"));
    assert_ne!(normalise("10.200.0.7\n10.200.0.8"), normalise("10.200.0.7"));
    assert_ne!(normalise("10.100.0.7"), normalise("10.101.0.7"));
    assert_ne!(normalise("10.203.0.7"), normalise("10.203.0.8"));
    assert!(read_only("dig +short @127.0.0.1 -p $DNS_A x"));
    assert!(read_only("kubectl --context c get serviceimports -n x"));
    assert!(!read_only(
        "kubectl --context a delete serviceexport x -n x"
    ));
    assert!(!read_only("scripts/demo.sh stop-cluster b"));
    assert!(read_only(
        "kubectl --context c exec toolbox -- curl -s x.y.svc.clusterset.local"
    ));
}
