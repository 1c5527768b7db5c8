//! An idle server does not burn CPU: the UDP workers sleep in the kernel.

mod dns_server;
mod support;

use std::time::Duration;

use dns_server::{Options, TestServer};

/// CPU ticks (user + system) used so far by this process's `dns-udp-*` threads.
fn udp_worker_ticks() -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("dns-udp-") {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        total += fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    }
    total
}

/// With no queries, the fast-path workers use (almost) no CPU.
#[tokio::test(flavor = "multi_thread")]
async fn idle_fast_path_workers_do_not_spin() {
    let server = TestServer::from_file(dns_server::EXAMPLE, Options::fast_path(true)).await;
    let before = udp_worker_ticks();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let used = udp_worker_ticks() - before;
    // A spinning worker uses ~100 ticks per second; a sleeping one ~0.
    assert!(
        used < 10,
        "UDP workers used {used} ticks in 1 s of idleness"
    );
    server.stop().await;
}
