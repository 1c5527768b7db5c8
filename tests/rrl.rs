//! Response rate limiting (`rrl_responses_per_second`) against the real
//! binary over loopback UDP: a noisy client prefix is limited, with every
//! second refused response slipped as a well-formed truncated one, on both
//! UDP paths alike; another prefix and TCP are not limited; and with the
//! option off (the default) nothing is dropped. docs/robustness.md row 8.

mod dns_server;
mod server_process;
mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dns_server::{Transport, decode, encode, exchange, metric, query};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use server_process::ServerProcess;
use tokio::net::UdpSocket;
use tokio::time::{Instant, timeout};

const NAME: &str = "web.shop.svc.clusterset.local.";
/// The limit under test, responses a second per prefix.
const RATE: usize = 50;
/// Noisy sockets (source ports: spread over both UDP workers by
/// SO_REUSEPORT) and queries each.
const NOISY_SOCKETS: usize = 4;
const NOISY_EACH: usize = 150;
/// Sequential queries of the quiet client: fewer than the limit.
const QUIET: usize = 40;

/// What a set of noisy sockets got back.
#[derive(Debug, Default)]
struct Replies {
    answered: usize,
    slipped: Vec<Vec<u8>>,
    /// From the first to the last query sent.
    sending: Duration,
}

/// Sends `NOISY_SOCKETS × NOISY_EACH` queries from 127.0.0.1 in chunks of
/// 50 with 10 ms between chunks, reading every socket meanwhile; returns
/// what came back within 500 ms of the last query.
async fn noisy(server: SocketAddr) -> Replies {
    let mut sockets = Vec::new();
    for _ in 0..NOISY_SOCKETS {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        socket.connect(server).await.unwrap();
        sockets.push(Arc::new(socket));
    }
    let readers: Vec<_> = sockets
        .iter()
        .map(|socket| {
            let socket = socket.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 2048];
                while let Ok(Ok(n)) =
                    timeout(Duration::from_millis(500), socket.recv(&mut buf)).await
                {
                    got.push(buf[..n].to_vec());
                }
                got
            })
        })
        .collect();
    let start = Instant::now();
    for i in 0..NOISY_EACH {
        for (s, socket) in sockets.iter().enumerate() {
            let mut q = query(NAME, RecordType::A);
            q.metadata.id = (s * NOISY_EACH + i) as u16;
            socket.send(&encode(&q)).await.unwrap();
        }
        if i % 12 == 11 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let mut replies = Replies {
        sending: start.elapsed(),
        ..Replies::default()
    };
    for reader in readers {
        for bytes in reader.await.unwrap() {
            let message = decode(&bytes, "noisy reply");
            if message.metadata.truncation {
                // Well-formed: the question as asked, no records, NOERROR.
                assert_eq!(message.metadata.response_code, ResponseCode::NoError);
                assert_eq!(message.queries.len(), 1, "{message:?}");
                assert_eq!(message.queries[0].name().to_string(), NAME);
                assert_eq!(message.queries[0].query_type(), RecordType::A);
                assert!(message.answers.is_empty(), "{message:?}");
                assert!(message.authorities.is_empty(), "{message:?}");
                assert!(message.additionals.is_empty(), "{message:?}");
                assert!(message.metadata.recursion_desired);
                replies.slipped.push(bytes[2..].to_vec());
            } else {
                assert_eq!(message.answers.len(), 1, "{message:?}");
                replies.answered += 1;
            }
        }
    }
    replies
}

/// `QUIET` queries from 127.0.1.1 (another /24), one after the other,
/// every 5 ms: how many were answered in full.
async fn quiet(server: SocketAddr) -> usize {
    let socket = UdpSocket::bind("127.0.1.1:0").await.unwrap();
    socket.connect(server).await.unwrap();
    let mut answered = 0;
    let mut buf = [0u8; 2048];
    for id in 0..QUIET {
        let mut q = query(NAME, RecordType::A);
        q.metadata.id = 10_000 + id as u16;
        socket.send(&encode(&q)).await.unwrap();
        if let Ok(Ok(n)) = timeout(Duration::from_secs(2), socket.recv(&mut buf)).await {
            let message: Message = decode(&buf[..n], "quiet reply");
            if !message.metadata.truncation && message.answers.len() == 1 {
                answered += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    answered
}

async fn limited_counts(admin: SocketAddr) -> (f64, f64) {
    let text = support::http_ok(admin, "/metrics").await;
    let read = |action: &str| {
        let name = format!("clusterset_dns_rrl_limited_total{{action=\"{action}\"}}");
        metric(&text, &name).unwrap_or_else(|| panic!("{name} missing"))
    };
    (read("dropped"), read("slipped"))
}

/// With `--rrl-responses-per-second 50` (slip 2): the noisy prefix
/// (600 queries from four source ports, so both UDP workers) gets a full
/// bucket plus the refill and nothing more, the rest alternately dropped
/// and slipped; the quiet prefix, querying meanwhile, gets every answer;
/// TCP from the noisy prefix is answered. The same on the fast path and
/// the hickory path, down to the slipped bytes.
#[tokio::test(flavor = "multi_thread")]
async fn a_noisy_prefix_is_limited_with_slips_and_a_quiet_prefix_is_not() {
    let mut slips_by_path = Vec::new();
    for fast_path in ["true", "false"] {
        let server = ServerProcess::start(
            &[
                &format!("--fast-path={fast_path}"),
                &format!("--rrl-responses-per-second={RATE}"),
                "--rrl-slip=2",
            ],
            None,
        )
        .await;
        let (noisy, quiet) = tokio::join!(noisy(server.dns), quiet(server.dns));
        let context = format!("fast path {fast_path}: {noisy:?}");
        let sent = NOISY_SOCKETS * NOISY_EACH;
        // A full bucket, plus the refill while sending (and 1 for rounding).
        let most = RATE + (noisy.sending.as_secs_f64() * RATE as f64).ceil() as usize + 1;
        assert!(
            (RATE..=most).contains(&noisy.answered),
            "{context}: {} answered, expected {RATE}..={most}",
            noisy.answered
        );
        let refused = sent - noisy.answered;
        let (dropped, slipped) = limited_counts(server.admin).await;
        assert_eq!(dropped + slipped, refused as f64, "{context}");
        // Slip 2: every second refused response slips.
        assert_eq!(slipped, (refused / 2) as f64, "{context}");
        assert_eq!(noisy.slipped.len(), refused / 2, "{context}");
        assert_eq!(quiet, QUIET, "{context}: the quiet prefix lost answers");
        eprintln!(
            "fast path {fast_path}: {sent} noisy queries in {:?}: {} answered, {dropped} dropped, \
             {slipped} slipped; quiet {quiet} of {QUIET} answered",
            noisy.sending, noisy.answered
        );

        // TCP is not limited.
        let over_tcp = exchange(server.dns, Transport::Tcp, &query(NAME, RecordType::A)).await;
        assert_eq!(over_tcp.answers.len(), 1, "{context}");
        assert!(!over_tcp.metadata.truncation);

        // One log line (per worker and second) names the noisy prefix,
        // never the quiet one.
        let lines = server.log_lines("rrl_responses_per_second");
        assert!(!lines.is_empty(), "{context}: no rate-limiting log line");
        assert!(lines.len() <= 2 * 2, "{context}: {lines:?}");
        for line in &lines {
            assert_eq!(line["fields"]["prefix"], "127.0.0.0/24", "{line}");
        }
        let mut slips = noisy.slipped;
        slips.sort();
        slips.dedup();
        slips_by_path.push(slips);
    }
    // The slipped responses (ID aside) are the same bytes on both paths.
    assert_eq!(slips_by_path[0].len(), 1, "{:?}", slips_by_path[0]);
    assert_eq!(slips_by_path[0], slips_by_path[1]);
}

/// Off by default: the same noisy load is answered in full, nothing is
/// counted as limited, and no rate-limiting line is logged.
#[tokio::test(flavor = "multi_thread")]
async fn without_the_option_nothing_is_limited() {
    for fast_path in ["true", "false"] {
        let server = ServerProcess::start(&[&format!("--fast-path={fast_path}")], None).await;
        let noisy = noisy(server.dns).await;
        let sent = NOISY_SOCKETS * NOISY_EACH;
        assert_eq!(noisy.answered, sent, "fast path {fast_path}: {noisy:?}");
        assert!(noisy.slipped.is_empty());
        assert_eq!(limited_counts(server.admin).await, (0.0, 0.0));
        assert!(server.log_lines("rrl_responses_per_second").is_empty());
    }
}
