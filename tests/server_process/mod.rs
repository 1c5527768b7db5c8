//! The built binary as a child process serving the example clusterset on
//! loopback ports it picks itself, with its stderr (JSON log lines)
//! collected for the test to read: for tests about the process as a whole
//! (signals, file-descriptor limits, what it logs).
#![allow(dead_code)] // each test crate uses a different subset

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};
use tokio::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_clusterset-dns");
/// How long the binary may take to start listening.
const START_LIMIT: Duration = Duration::from_secs(15);

/// A running `clusterset-dns serve`.
pub(crate) struct ServerProcess {
    /// The process (killed when dropped).
    pub child: Child,
    /// DNS address (UDP and TCP).
    pub dns: SocketAddr,
    /// Admin HTTP address.
    pub admin: SocketAddr,
    stderr: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl ServerProcess {
    /// Starts `serve` on the example clusterset with `args` added; with
    /// `open_files`, under that RLIMIT_NOFILE (`ulimit -n`).
    pub(crate) async fn start(args: &[&str], open_files: Option<u32>) -> Self {
        Self::start_holding(args, open_files, 0).await
    }

    /// Like [`Self::start`], and the process inherits `held` open
    /// descriptors (`/dev/null`, numbers 10 and up) that it knows nothing
    /// of: descriptors taken by something else, which its limits on
    /// connections cannot count.
    pub(crate) async fn start_holding(args: &[&str], open_files: Option<u32>, held: u32) -> Self {
        let repo = env!("CARGO_MANIFEST_DIR");
        let mut command = if open_files.is_some() || held > 0 {
            let mut script = String::new();
            if let Some(limit) = open_files {
                script += &format!("ulimit -n {limit} && ");
            }
            if held > 0 {
                let last = 10 + held - 1;
                script += &format!(
                    "for fd in $(seq 10 {last}); do eval \"exec $fd</dev/null\"; done && "
                );
            }
            script += "exec \"$0\" \"$@\"";
            let mut c = Command::new("bash");
            c.arg("-c").arg(script).arg(BIN);
            c
        } else {
            Command::new(BIN)
        };
        command
            .args(["serve", "--file"])
            .arg(format!("{repo}/config/example-clusterset.yaml"))
            .args([
                "--dns-listen=127.0.0.1:0",
                "--admin-listen=127.0.0.1:0",
                "--udp-workers=2",
                "--log-format=json",
            ])
            .args(args)
            // The default log filter, as shipped.
            .env_remove("CLUSTERSET_DNS_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("spawn clusterset-dns serve");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let lines = stderr.clone();
        let pipe = child.stderr.take().expect("piped stderr");
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(pipe).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|_| serde_json::json!({ "raw": line }));
                lines.lock().unwrap().push(value);
            }
        });
        let deadline = Instant::now() + START_LIMIT;
        let (mut dns, mut admin) = (None, None);
        while dns.is_none() || admin.is_none() {
            assert!(
                Instant::now() < deadline,
                "serve did not start within {START_LIMIT:?}: {:?}",
                stderr.lock().unwrap()
            );
            if let Some(status) = child.try_wait().expect("poll child") {
                panic!("serve exited ({status}): {:?}", stderr.lock().unwrap());
            }
            for line in stderr.lock().unwrap().iter() {
                let field = |name: &str| {
                    line["fields"][name]
                        .as_str()
                        .and_then(|s| s.parse::<SocketAddr>().ok())
                };
                dns = dns.or(field("local_addr"));
                admin = admin.or(field("admin_addr"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self {
            child,
            dns: dns.expect("DNS address logged"),
            admin: admin.expect("admin address logged"),
            stderr,
        }
    }

    /// The log lines so far whose message contains `text`.
    pub(crate) fn log_lines(&self, text: &str) -> Vec<serde_json::Value> {
        self.stderr
            .lock()
            .unwrap()
            .iter()
            .filter(|l| {
                l["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(text))
            })
            .cloned()
            .collect()
    }

    /// Every log line so far.
    pub(crate) fn stderr_lines(&self) -> Vec<serde_json::Value> {
        self.stderr.lock().unwrap().clone()
    }

    /// How many log lines so far.
    pub(crate) fn all_log_lines(&self) -> usize {
        self.stderr.lock().unwrap().len()
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id().expect("child is running")
    }

    /// CPU time (user + system) the process has used, in clock ticks.
    pub(crate) fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).expect("stat");
        // Fields after the parenthesised name: utime is 14, stime 15.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    }

    /// Sends SIGTERM.
    pub(crate) fn terminate(&self) {
        let pid = self.pid() as libc::pid_t;
        // SAFETY: kill(2) with a pid we spawned and still own (not yet
        // reaped, so it cannot have been reused) and a valid signal number.
        #[allow(unsafe_code)]
        let sent = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(sent, 0, "kill: {}", std::io::Error::last_os_error());
    }
}
