//! The rate limiter's own cost per query (`RateLimiter::check`, what the
//! UDP workers add to each query with `rrl_responses_per_second` set), in
//! nanoseconds, without sockets: one thread on one prefix, one thread on
//! many prefixes (a table-sized working set), and two threads at once on
//! the same prefix (the one slot both workers update) and on different
//! prefixes. Run by `scripts/bench-rrl.sh` (part C):
//!
//!     cargo bench --bench rrl
//!
//! `BENCH_RRL_CHECKS` (default 20,000,000) checks per thread and case.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use clusterset_dns::dns::rrl::{RateLimiter, RrlConfig, Verdict};

/// Runs `checks` checks on each of `threads` threads, thread `t` sending
/// from `source(t, i)`; returns wall-clock nanoseconds per check per thread
/// and how many were answered.
fn run(
    rrl: &RateLimiter,
    threads: usize,
    checks: u64,
    source: impl Fn(usize, u64) -> IpAddr + Sync,
) -> (f64, u64) {
    let start = Instant::now();
    let answered: u64 = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let source = &source;
                scope.spawn(move || {
                    let mut answered = 0;
                    let mut now = rrl.now();
                    for i in 0..checks {
                        // The workers read the clock once per batch of 32.
                        if i % 32 == 0 {
                            now = rrl.now();
                        }
                        if black_box(rrl.check(source(t, i), now)) == Verdict::Answer {
                            answered += 1;
                        }
                    }
                    answered
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    (start.elapsed().as_nanos() as f64 / checks as f64, answered)
}

/// Which address thread `t` sends its `i`-th query from.
type Source = dyn Fn(usize, u64) -> IpAddr + Sync;

fn main() {
    let checks: u64 = std::env::var("BENCH_RRL_CHECKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000_000);
    let config = |rate| RrlConfig {
        responses_per_second: rate,
        ..RrlConfig::default()
    };
    let one = |_: usize, _: u64| IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    // 65,536 /24s in turn: every slot of the default table.
    let many =
        |t: usize, i: u64| IpAddr::V4(((t as u32) << 28 | ((i as u32 & 0xffff) << 8)).into());
    let own = |t: usize, _: u64| IpAddr::V4(Ipv4Addr::new(10, t as u8, 0, 1));
    println!("case\tthreads\tlimit\tns_per_check\tanswered_pct");
    let cases: [(&str, usize, u32, &Source); 6] = [
        ("one prefix, never limited", 1, 1_000_000_000, &one),
        ("one prefix, limited (drop/slip)", 1, 1000, &one),
        ("65,536 prefixes", 1, 1_000_000_000, &many),
        ("one prefix shared by 2 threads", 2, 1_000_000_000, &one),
        ("a prefix per thread", 2, 1_000_000_000, &own),
        ("65,536 prefixes per thread", 2, 1_000_000_000, &many),
    ];
    for (name, threads, rate, source) in cases {
        let rrl = RateLimiter::new(&config(rate)).expect("on");
        let (ns, answered) = run(&rrl, threads, checks, source);
        let pct = 100.0 * answered as f64 / (checks * threads as u64) as f64;
        println!("{name}\t{threads}\t{rate}\t{ns:.1}\t{pct:.2}");
    }
}
