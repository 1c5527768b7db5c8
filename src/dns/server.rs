//! Sockets: N UDP sockets with SO_REUSEPORT on one port (served by the fast
//! path, or by hickory when the fast path is off) and one TCP listener on the
//! same port, served by hickory.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use super::Handler;
use super::udp::FastPath;
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
}

impl Default for DnsServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], 53)),
            udp_workers: 0,
            fast_path: true,
            tcp_idle_timeout: Duration::from_secs(10),
        }
    }
}

/// A running DNS server.
pub struct DnsServer {
    local_addr: SocketAddr,
    hickory: hickory_server::Server<Handler>,
    fast_path: Option<FastPath>,
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

        let mut hickory = hickory_server::Server::new(handler.clone());
        hickory.register_listener(
            tokio::net::TcpListener::from_std(tcp)?,
            config.tcp_idle_timeout,
            64,
        );
        let fast_path = if config.fast_path {
            Some(FastPath::start(udp, zone, handler)?)
        } else {
            for socket in udp {
                hickory.register_socket(tokio::net::UdpSocket::from_std(socket)?);
            }
            None
        };
        tracing::info!(%local_addr, udp_sockets = workers, fast_path = config.fast_path, "DNS server listening on UDP and TCP");
        Ok(Self {
            local_addr,
            hickory,
            fast_path,
        })
    }

    /// The bound address (UDP and TCP share the port).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting queries and waits for in-flight ones.
    pub async fn shutdown(mut self) {
        if let Some(fast_path) = self.fast_path.take() {
            // Joining threads blocks; do it off the async workers.
            let _ = tokio::task::spawn_blocking(move || fast_path.stop()).await;
        }
        if let Err(error) = self.hickory.shutdown_gracefully().await {
            tracing::warn!(%error, "DNS server shutdown");
        }
    }
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
