//! Sockets: N UDP sockets with SO_REUSEPORT on one port (served by the UDP
//! workers, with or without the fast path) and one TCP listener on the same
//! port (served by [`super::tcp`]).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use super::Handler;
use super::rrl::{RateLimiter, RrlConfig};
use super::tcp::TcpServer;
use super::udp::UdpWorkers;
use crate::publish::ZoneHandle;

/// Socket-level settings of the DNS server.
#[derive(Debug, Clone)]
pub struct DnsServerConfig {
    /// Address for both UDP and TCP; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Number of UDP sockets (and fast-path threads); 0 means one per CPU.
    pub udp_workers: usize,
    /// Serve UDP from precompiled wire answers with batched socket calls.
    pub fast_path: bool,
    /// Close TCP connections idle this long.
    pub tcp_idle_timeout: Duration,
    /// Most TCP connections open at once; at the limit the one idle the
    /// longest is closed. Lowered at start to fit the open-file limit.
    pub max_tcp_connections: usize,
    /// Response rate limiting of UDP per client prefix (off by default).
    pub rrl: RrlConfig,
}

impl Default for DnsServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], 53)),
            udp_workers: 0,
            fast_path: true,
            tcp_idle_timeout: Duration::from_secs(10),
            max_tcp_connections: 1000,
            rrl: RrlConfig::default(),
        }
    }
}

/// A running DNS server.
pub struct DnsServer {
    local_addr: SocketAddr,
    tcp: TcpServer,
    udp: UdpWorkers,
}

impl std::fmt::Debug for DnsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DnsServer")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl DnsServer {
    /// Binds the sockets and starts serving. Must run inside a tokio runtime.
    pub fn start(config: &DnsServerConfig, zone: ZoneHandle, handler: Handler) -> io::Result<Self> {
        let workers = match config.udp_workers {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        // Port 0 lets the kernel pick a free UDP port, but the same TCP port
        // may be taken (e.g. by a client connection's ephemeral port): then
        // pick again.
        let attempts = if config.listen.port() == 0 { 16 } else { 1 };
        let mut attempt = 1;
        let (udp, tcp, local_addr) = loop {
            match bind_all(config.listen, workers) {
                Err(e) if e.kind() == io::ErrorKind::AddrInUse && attempt < attempts => {
                    attempt += 1;
                }
                result => break result?,
            }
        };

        let max_tcp = fit_open_files(config.max_tcp_connections, open_file_limit());
        if max_tcp < config.max_tcp_connections {
            tracing::warn!(
                configured = config.max_tcp_connections,
                max_tcp_connections = max_tcp,
                "the open-file limit (ulimit -n) leaves room for fewer TCP connections than configured"
            );
        }
        let tcp = TcpServer::start(
            tokio::net::TcpListener::from_std(tcp)?,
            handler.clone(),
            max_tcp,
            config.tcp_idle_timeout,
        );
        let rrl = RateLimiter::new(&config.rrl).map(Arc::new);
        let udp = UdpWorkers::start(udp, zone, handler, config.fast_path, rrl)?;
        tracing::info!(%local_addr, udp_sockets = workers, fast_path = config.fast_path, max_tcp_connections = max_tcp, rrl_responses_per_second = config.rrl.responses_per_second, "DNS server listening on UDP and TCP");
        Ok(Self {
            local_addr,
            tcp,
            udp,
        })
    }

    /// The bound address (UDP and TCP share the port).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting queries and waits for in-flight ones.
    pub async fn shutdown(self) {
        let udp = self.udp;
        // Joining threads blocks; do it off the async workers.
        let _ = tokio::task::spawn_blocking(move || udp.stop()).await;
        self.tcp.stop().await;
    }
}

/// Descriptors kept out of the TCP connection budget: the sockets, the
/// admin endpoint's connections ([`crate::ops::admin_server::MAX_CONNECTIONS`]), the
/// manifest, the runtime's own.
pub(super) const RESERVED_FILES: u64 = 128;

/// The TCP connection limit that fits `open_files` descriptors.
fn fit_open_files(max_tcp_connections: usize, open_files: Option<u64>) -> usize {
    match open_files {
        Some(limit) => {
            let room = limit.saturating_sub(RESERVED_FILES).max(1);
            max_tcp_connections.min(usize::try_from(room).unwrap_or(usize::MAX))
        }
        None => max_tcp_connections,
    }
}

/// The soft RLIMIT_NOFILE, if there is one.
#[allow(unsafe_code)]
fn open_file_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    let status = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    (status == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// Binds `workers` UDP sockets and the TCP listener on one port.
fn bind_all(
    listen: SocketAddr,
    workers: usize,
) -> io::Result<(Vec<UdpSocket>, std::net::TcpListener, SocketAddr)> {
    let first = bind_udp(listen)?;
    let local_addr = first.local_addr()?;
    let mut udp = vec![first];
    for _ in 1..workers {
        udp.push(bind_udp(local_addr)?);
    }
    let tcp = bind_tcp(local_addr)?;
    Ok((udp, tcp, local_addr))
}

fn bind_udp(addr: SocketAddr) -> io::Result<UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_port(true)?;
    // Best effort: the kernel caps this at net.core.rmem_max.
    let _ = socket.set_recv_buffer_size(4 << 20);
    let _ = socket.set_send_buffer_size(4 << 20);
    if addr.is_ipv6() {
        socket.set_only_v6(false)?;
    }
    socket.bind(&addr.into())?;
    socket.set_nonblocking(true)?;
    let socket: UdpSocket = socket.into();
    Ok(socket)
}

fn bind_tcp(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(false)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tcp_limit_leaves_descriptors_for_everything_else() {
        assert_eq!(fit_open_files(1000, None), 1000);
        assert_eq!(fit_open_files(1000, Some(1 << 20)), 1000);
        assert_eq!(fit_open_files(1000, Some(256)), 128);
        assert_eq!(fit_open_files(1000, Some(10)), 1);
    }
}
