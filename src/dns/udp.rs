//! The UDP workers: one SO_REUSEPORT socket and one OS thread per worker,
//! receiving and sending in batches with `recvmmsg`/`sendmmsg`.
//!
//! With the fast path on, common queries are answered from precompiled
//! wire data ([`super::fast_path`]); every other datagram (all of them
//! with the fast path off) is decoded by hickory and answered by the same
//! [`Handler`] the TCP listener uses, through `super::request::answer`;
//! both render the same [`super::plan::Plan`], and both drop what is not a
//! query and answer a malformed query FORMERR by the same rules.
//!
//! With response rate limiting on ([`super::rrl`]), every query is checked
//! against its client prefix's bucket before either path sees it: over the
//! limit it is dropped or slipped (a truncated response), the same on both
//! paths; messages that are not queries are never counted.
//!
//! A worker never dies of a query: if answering a batch panics (a bug), the
//! batch is dropped, counted in `clusterset_dns_udp_worker_panics_total`
//! and logged, and the worker goes on with the next one, so the socket
//! keeps being served while `/ready` says it is.

use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use hickory_server::net::xfer::Protocol;
use socket2::{SockAddr, SockAddrStorage};

use super::Handler;
use super::fast_path::{self, Fast, MAX_RESPONSE};
use super::request;
use super::rrl::{self, RateLimiter, Verdict};
use super::wire;
use crate::metrics::{Metrics, NetworkEvent, Transport};
use crate::publish::ZoneHandle;
use crate::zone::Zone;

/// Datagrams per `recvmmsg`/`sendmmsg` call.
const BATCH: usize = 32;
/// Receive buffer per datagram: larger than any query we answer.
const RECV_BUFFER: usize = 4096;
/// How often a blocked worker wakes up to check for shutdown.
const STOP_POLL: Duration = Duration::from_millis(100);

/// Running UDP workers.
#[derive(Debug)]
pub(crate) struct UdpWorkers {
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
}

impl UdpWorkers {
    /// Starts one worker thread per socket; `fast_path` answers common
    /// queries from precompiled wire data; `rrl`, when set, limits the
    /// responses per client prefix (shared by all workers).
    pub(crate) fn start(
        sockets: Vec<UdpSocket>,
        zone: ZoneHandle,
        handler: Handler,
        fast_path: bool,
        rrl: Option<Arc<RateLimiter>>,
    ) -> io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::new();
        for (i, socket) in sockets.into_iter().enumerate() {
            // Blocking with a timeout: the worker sleeps in recvmmsg while
            // idle and still notices shutdown within STOP_POLL.
            socket.set_nonblocking(false)?;
            socket.set_read_timeout(Some(STOP_POLL))?;
            let worker = Worker {
                socket,
                zone: zone.clone(),
                handler: handler.clone(),
                stop: stop.clone(),
                fast_path,
                rrl: rrl.clone(),
                rrl_log: RrlLog::default(),
            };
            workers.push(
                std::thread::Builder::new()
                    .name(format!("dns-udp-{i}"))
                    .spawn(move || worker.run())?,
            );
        }
        Ok(Self { stop, workers })
    }

    /// Stops the workers and waits for them.
    pub(crate) fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for worker in self.workers {
            let _ = worker.join();
        }
    }
}

struct Worker {
    socket: UdpSocket,
    zone: ZoneHandle,
    handler: Handler,
    stop: Arc<AtomicBool>,
    fast_path: bool,
    rrl: Option<Arc<RateLimiter>>,
    rrl_log: RrlLog,
}

/// A worker's own throttle of the rate-limiting log line (no lock shared
/// with the other workers on the hot path): one line a second at most.
#[derive(Debug, Default)]
struct RrlLog {
    /// Limiter time before which the worker stays silent.
    next: u64,
    /// Queries limited since the last line.
    suppressed: u64,
}

impl RrlLog {
    /// Logs the limited query from `ip` if a line is due at `now`.
    fn limited(&mut self, rrl: &RateLimiter, ip: IpAddr, now: u64, verdict: Verdict) {
        if now < self.next {
            self.suppressed += 1;
            return;
        }
        self.next = now + rrl::UNITS_PER_SECOND;
        tracing::warn!(
            prefix = %rrl.prefix(ip),
            action = if verdict == Verdict::Slip { "slipped" } else { "dropped" },
            suppressed = std::mem::take(&mut self.suppressed),
            "UDP queries over rrl_responses_per_second: responses dropped or sent truncated"
        );
    }
}

impl Worker {
    fn run(mut self) {
        let fd = self.socket.as_raw_fd();
        let mut recv_bufs = vec![[0u8; RECV_BUFFER]; BATCH];
        let mut send_bufs = vec![[0u8; MAX_RESPONSE]; BATCH];
        let mut send_lens = [0usize; BATCH];
        let mut send_addrs: [MaybeUninit<libc::sockaddr_storage>; BATCH] =
            [MaybeUninit::zeroed(); BATCH];
        let mut send_addr_lens = [0u32; BATCH];
        let mut addrs: [MaybeUninit<libc::sockaddr_storage>; BATCH] =
            [MaybeUninit::zeroed(); BATCH];
        let metrics = self.handler.metrics().clone();

        let mut last_panic_log: Option<std::time::Instant> = None;
        while !self.stop.load(Ordering::Relaxed) {
            let received = match recv_batch(fd, &mut recv_bufs, &mut addrs) {
                Ok(received) => received,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    continue;
                }
                Err(error) => {
                    if let Some(suppressed) = metrics.network_event(NetworkEvent::UdpReceive) {
                        tracing::warn!(%error, suppressed, "UDP receive failed");
                    }
                    continue;
                }
            };
            let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.answer_batch(
                    &received,
                    &recv_bufs,
                    &addrs,
                    &mut send_bufs,
                    &mut send_lens,
                    &mut send_addrs,
                    &mut send_addr_lens,
                )
            }));
            let replies = match answered {
                Ok(replies) => replies,
                Err(panic) => {
                    metrics.worker_panics.inc();
                    // At most one line a second: a query that keeps
                    // triggering the bug must not flood the log.
                    if last_panic_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                        last_panic_log = Some(std::time::Instant::now());
                        tracing::error!(
                            reason = panic_message(&*panic),
                            batch = received.len(),
                            "answering a UDP batch panicked; batch dropped, worker continues"
                        );
                    }
                    continue;
                }
            };
            if replies > 0
                && let Err(error) = send_batch(
                    fd,
                    &send_bufs,
                    &send_lens[..replies],
                    &send_addrs,
                    &send_addr_lens,
                )
            {
                tracing::debug!(%error, "UDP send failed");
            }
        }
    }

    /// Answers the received datagrams into the send buffers; returns how
    /// many replies to send.
    #[allow(clippy::too_many_arguments)]
    fn answer_batch(
        &mut self,
        received: &[(usize, u32)],
        recv_bufs: &[[u8; RECV_BUFFER]],
        addrs: &[MaybeUninit<libc::sockaddr_storage>; BATCH],
        send_bufs: &mut [[u8; MAX_RESPONSE]],
        send_lens: &mut [usize; BATCH],
        send_addrs: &mut [MaybeUninit<libc::sockaddr_storage>; BATCH],
        send_addr_lens: &mut [u32; BATCH],
    ) -> usize {
        let metrics = self.handler.metrics();
        let zone = self.zone.load();
        let rrl = self.rrl.as_deref();
        let now = rrl.map_or(0, RateLimiter::now);
        let mut replies = 0;
        for (i, (len, addr_len)) in received.iter().enumerate() {
            let query = &recv_bufs[i][..*len];
            let out = &mut send_bufs[replies];
            let limited = rrl.and_then(|rrl| {
                rate_limit(
                    rrl,
                    &mut self.rrl_log,
                    metrics,
                    query,
                    &addrs[i],
                    *addr_len,
                    now,
                    out,
                )
            });
            let reply_len = match limited {
                Some(slip) => slip,
                None => answer_datagram(
                    &self.handler,
                    zone.as_deref(),
                    self.fast_path,
                    query,
                    || sockaddr_to_std(&addrs[i], *addr_len),
                    out,
                ),
            };
            if let Some(reply_len) = reply_len {
                send_lens[replies] = reply_len;
                send_addrs[replies] = addrs[i];
                send_addr_lens[replies] = *addr_len;
                replies += 1;
            }
        }
        replies
    }
}

/// Answers one received datagram into `out`: the fast path first (when on
/// and a zone is published), else hickory's decoder and the handler.
/// `src` gives the sender's address, read only when the slow path needs
/// it. Returns the response length, or `None` to send nothing.
pub(crate) fn answer_datagram(
    handler: &Handler,
    zone: Option<&Zone>,
    fast_path: bool,
    query: &[u8],
    src: impl FnOnce() -> Option<SocketAddr>,
    out: &mut [u8; MAX_RESPONSE],
) -> Option<usize> {
    let metrics = handler.metrics();
    let fast = match zone {
        Some(zone) if fast_path => fast_path::answer(zone, query, out),
        _ => Fast::Slow,
    };
    match fast {
        Fast::Reply {
            len,
            truncated,
            qtype,
            outcome,
            tier,
        } => {
            metrics.fast_path_hits.inc();
            if truncated {
                metrics.truncated.inc();
            }
            metrics.count_response(Transport::Udp, qtype, outcome);
            if let Some(tier) = tier {
                metrics.count_tier(tier);
            }
            Some(len)
        }
        Fast::Drop => {
            request::not_a_query(metrics, query.len());
            None
        }
        Fast::Slow => slow_path(handler, query, src()?, out),
    }
}

/// Checks a datagram against the rate limiter: `None` when it is to be
/// answered (within the limit, or not a query, which is never answered
/// and never counted), `Some(None)` when it is dropped, `Some(Some(len))`
/// when a truncated response of `len` bytes is slipped into `out`.
#[allow(clippy::too_many_arguments)]
fn rate_limit(
    rrl: &RateLimiter,
    log: &mut RrlLog,
    metrics: &Metrics,
    query: &[u8],
    addr: &MaybeUninit<libc::sockaddr_storage>,
    addr_len: u32,
    now: u64,
    out: &mut [u8; MAX_RESPONSE],
) -> Option<Option<usize>> {
    if !wire::is_query(query) {
        return None;
    }
    let ip = source_ip(addr, addr_len)?;
    let verdict = rrl.check(ip, now);
    let reply = match verdict {
        Verdict::Answer => return None,
        Verdict::Drop => {
            metrics.rrl_dropped.inc();
            None
        }
        Verdict::Slip => {
            metrics.rrl_slipped.inc();
            Some(rrl::write_slip(query, out))
        }
    };
    log.limited(rrl, ip, now, verdict);
    Some(reply)
}

/// The message of a panic payload.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("panic")
}

/// Answers one datagram through hickory's decoder and our handler
/// ([`super::request::answer`]).
pub(crate) fn slow_path(
    handler: &Handler,
    query: &[u8],
    src: SocketAddr,
    out: &mut [u8; MAX_RESPONSE],
) -> Option<usize> {
    if src.port() == 0 {
        return None;
    }
    // The handler never waits on anything but an in-memory buffer, so
    // driving it to completion on this thread does not block.
    let bytes = futures::executor::block_on(request::answer(handler, query, src, Protocol::Udp))?;
    let len = bytes.len().min(MAX_RESPONSE);
    out[..len].copy_from_slice(&bytes[..len]);
    Some(len)
}

/// Receives up to `BATCH` datagrams; returns `(length, address length)` per datagram.
#[allow(unsafe_code)]
fn recv_batch(
    fd: i32,
    bufs: &mut [[u8; RECV_BUFFER]],
    addrs: &mut [MaybeUninit<libc::sockaddr_storage>; BATCH],
) -> io::Result<Vec<(usize, u32)>> {
    // SAFETY: iovec and mmsghdr are plain C structs for which all zeros
    // is a valid value (null pointers, zero lengths).
    let mut iovecs: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut headers: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    for i in 0..BATCH {
        iovecs[i] = libc::iovec {
            iov_base: bufs[i].as_mut_ptr().cast(),
            iov_len: RECV_BUFFER,
        };
        headers[i].msg_hdr.msg_name = addrs[i].as_mut_ptr().cast();
        headers[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
        headers[i].msg_hdr.msg_iov = &mut iovecs[i];
        headers[i].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: every header points at a live iovec and sockaddr_storage of
    // the advertised sizes, all outliving the call; the kernel writes at most
    // those sizes. MSG_WAITFORONE returns once at least one datagram arrived.
    let n = unsafe {
        libc::recvmmsg(
            fd,
            headers.as_mut_ptr(),
            BATCH as u32,
            libc::MSG_WAITFORONE,
            std::ptr::null_mut(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(headers[..n as usize]
        .iter()
        .map(|h| (h.msg_len as usize, h.msg_hdr.msg_namelen))
        .collect())
}

/// Sends `lens.len()` responses in one call (retrying the rest on a short send).
#[allow(unsafe_code)]
fn send_batch(
    fd: i32,
    bufs: &[[u8; MAX_RESPONSE]],
    lens: &[usize],
    addrs: &[MaybeUninit<libc::sockaddr_storage>; BATCH],
    addr_lens: &[u32; BATCH],
) -> io::Result<()> {
    let count = lens.len();
    // SAFETY: iovec and mmsghdr are plain C structs for which all zeros
    // is a valid value (null pointers, zero lengths).
    let mut iovecs: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut headers: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    for i in 0..count {
        iovecs[i] = libc::iovec {
            iov_base: bufs[i].as_ptr() as *mut _,
            iov_len: lens[i],
        };
        headers[i].msg_hdr.msg_name = addrs[i].as_ptr() as *mut _;
        headers[i].msg_hdr.msg_namelen = addr_lens[i];
        headers[i].msg_hdr.msg_iov = &mut iovecs[i];
        headers[i].msg_hdr.msg_iovlen = 1;
    }
    let mut sent = 0;
    while sent < count {
        // SAFETY: headers[sent..count] point at live buffers and addresses of
        // the given lengths; sendmmsg only reads them.
        let n =
            unsafe { libc::sendmmsg(fd, headers[sent..].as_mut_ptr(), (count - sent) as u32, 0) };
        if n < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // Skip the datagram that failed (e.g. an unreachable peer) and go on.
            sent += 1;
            if sent >= count {
                return Err(error);
            }
            continue;
        }
        sent += n as usize;
    }
    Ok(())
}

/// Converts a socket address the kernel wrote (`len` bytes) to a std one.
#[allow(unsafe_code)]
fn sockaddr_to_std(addr: &MaybeUninit<libc::sockaddr_storage>, len: u32) -> Option<SocketAddr> {
    let mut storage = SockAddrStorage::zeroed();
    // SAFETY: `sockaddr_storage` is one of this platform's sockaddr types,
    // which is what `view_as` requires.
    let view = unsafe { storage.view_as::<libc::sockaddr_storage>() };
    // SAFETY: the storage started zeroed (MaybeUninit::zeroed) and recvmmsg
    // wrote the address into it, so every byte is initialised.
    *view = unsafe { addr.assume_init() };
    // SAFETY: recvmmsg wrote an address of its family's layout and set
    // `len` to its length, at most the size of the storage.
    let address = unsafe { SockAddr::new(storage, len) };
    address.as_socket()
}

/// The IP address of a socket address the kernel wrote (`len` bytes),
/// read in place: the rate limiter needs it for every query.
#[allow(unsafe_code)]
fn source_ip(addr: &MaybeUninit<libc::sockaddr_storage>, len: u32) -> Option<IpAddr> {
    let len = len as usize;
    let storage = addr.as_ptr();
    // SAFETY: the storage started zeroed and recvmmsg wrote an address of
    // `len` bytes into it; each branch reads the family's struct only when
    // the kernel wrote at least that many bytes, and sockaddr_storage is
    // aligned for every sockaddr type.
    unsafe {
        match i32::from((*storage).ss_family) {
            libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
                let v4 = &*storage.cast::<libc::sockaddr_in>();
                Some(IpAddr::from(u32::from_be(v4.sin_addr.s_addr).to_be_bytes()))
            }
            libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
                let v6 = &*storage.cast::<libc::sockaddr_in6>();
                Some(IpAddr::from(v6.sin6_addr.s6_addr))
            }
            _ => None,
        }
    }
}
