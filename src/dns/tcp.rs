//! DNS over TCP: our own accept loop and connections, answering each
//! length-prefixed message through `super::request::answer` (the same
//! rules as UDP).
//!
//! At most `max_connections` connections are open at once (Knot's
//! `tcp-max-clients`): when a new one arrives at the limit, the connection
//! idle the longest is closed to make room (never one whose query is being
//! answered; one whose query is still arriving counts as idle, so a client
//! trickling bytes holds no slot it cannot lose),
//! and the new one is refused only when every connection is busy. An accept
//! error (EMFILE, ENFILE, ENOBUFS…) backs off instead of spinning, and also
//! closes the oldest idle connection, since the error means descriptors
//! are short. A connection is closed after `idle_timeout` without a query,
//! and when a query is not read or its response not written within it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_server::net::xfer::Protocol;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::Handler;
use super::request;
use crate::metrics::NetworkEvent;

/// How long the accept loop waits after an accept error.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The running TCP listener.
#[derive(Debug)]
pub(super) struct TcpServer {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    connections: Arc<Connections>,
}

impl TcpServer {
    /// Starts accepting on `listener`. Must run inside a tokio runtime.
    pub(super) fn start(
        listener: TcpListener,
        handler: Handler,
        max_connections: usize,
        idle_timeout: Duration,
    ) -> Self {
        let (stop, stopped) = watch::channel(false);
        let connections = Arc::new(Connections {
            max: max_connections.max(1),
            open: Mutex::new(Open::default()),
        });
        let task = tokio::spawn(accept_loop(
            listener,
            handler,
            connections.clone(),
            idle_timeout,
            stopped,
        ));
        Self {
            stop,
            task,
            connections,
        }
    }

    /// Stops accepting and closes every connection (a query being answered
    /// is finished first).
    pub(super) async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        self.connections.close_all();
    }
}

/// The open connections.
#[derive(Debug)]
struct Connections {
    max: usize,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    next_id: u64,
    by_id: HashMap<u64, Connection>,
}

#[derive(Debug)]
struct Connection {
    /// When the last query was answered (or the connection opened).
    idle_since: Instant,
    /// Between reading a whole query and writing its response.
    busy: bool,
    close: Arc<Notify>,
}

impl Connections {
    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a new connection, closing the oldest idle one when full;
    /// `None` when full and every connection is busy.
    fn admit(&self) -> Option<(u64, Arc<Notify>, bool)> {
        let mut open = self.lock();
        let mut evicted = false;
        if open.by_id.len() >= self.max {
            evicted = open.evict_oldest_idle();
            if !evicted {
                return None;
            }
        }
        let id = open.next_id;
        open.next_id += 1;
        let close = Arc::new(Notify::new());
        open.by_id.insert(
            id,
            Connection {
                idle_since: Instant::now(),
                busy: false,
                close: close.clone(),
            },
        );
        Some((id, close, evicted))
    }

    fn set_busy(&self, id: u64, busy: bool) {
        if let Some(connection) = self.lock().by_id.get_mut(&id) {
            connection.busy = busy;
            connection.idle_since = Instant::now();
        }
    }

    fn remove(&self, id: u64) {
        self.lock().by_id.remove(&id);
    }

    fn count(&self) -> usize {
        self.lock().by_id.len()
    }

    fn close_all(&self) {
        for (_, connection) in self.lock().by_id.drain() {
            connection.close.notify_one();
        }
    }
}

impl Open {
    /// Closes the connection idle the longest; false if all are busy.
    fn evict_oldest_idle(&mut self) -> bool {
        let oldest = self
            .by_id
            .iter()
            .filter(|(_, c)| !c.busy)
            .min_by_key(|(_, c)| c.idle_since)
            .map(|(id, _)| *id);
        match oldest.and_then(|id| self.by_id.remove(&id)) {
            Some(connection) => {
                // A stored permit: the connection sees it at its next wait.
                connection.close.notify_one();
                true
            }
            None => false,
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    handler: Handler,
    connections: Arc<Connections>,
    idle_timeout: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let metrics = handler.metrics().clone();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped.changed() => return,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                let freed = connections.lock().evict_oldest_idle();
                if let Some(suppressed) = metrics.network_event(NetworkEvent::TcpAccept) {
                    tracing::warn!(%error, suppressed, closed_idle = freed, "TCP accept failed; backing off");
                }
                tokio::select! {
                    _ = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                    _ = stopped.changed() => return,
                }
            }
        };
        let Some((id, close, evicted)) = connections.admit() else {
            if let Some(suppressed) = metrics.network_event(NetworkEvent::TcpFull) {
                tracing::warn!(
                    max = connections.max,
                    suppressed,
                    "TCP connection limit reached and every connection busy; refused a connection"
                );
            }
            drop(stream);
            continue;
        };
        if evicted && let Some(suppressed) = metrics.network_event(NetworkEvent::TcpFull) {
            tracing::warn!(
                max = connections.max,
                suppressed,
                "TCP connection limit reached; closed the connection idle the longest"
            );
        }
        metrics.tcp_connections.set(connections.count() as i64);
        let handler = handler.clone();
        let connections = connections.clone();
        tokio::spawn(async move {
            serve(
                stream,
                peer,
                &handler,
                id,
                &connections,
                &close,
                idle_timeout,
            )
            .await;
            connections.remove(id);
            handler
                .metrics()
                .tcp_connections
                .set(connections.count() as i64);
        });
    }
}

/// Answers the queries of one connection, one after the other, until the
/// client closes it, it idles out, it breaks the framing, or it is closed
/// to make room.
async fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    handler: &Handler,
    id: u64,
    connections: &Connections,
    close: &Notify,
    idle_timeout: Duration,
) {
    let _ = stream.set_nodelay(true);
    loop {
        // Idle, and so closable to make room, until a whole query is in:
        // a client trickling a message in holds no slot it cannot lose.
        let message = tokio::select! {
            read = read_message(&mut stream, idle_timeout) => match read {
                Some(message) => message,
                None => return,
            },
            _ = close.notified() => return,
        };
        connections.set_busy(id, true);
        if let Some(response) = request::answer(handler, &message, peer, Protocol::Tcp).await {
            let mut framed = Vec::with_capacity(2 + response.len());
            framed.extend_from_slice(&(response.len() as u16).to_be_bytes());
            framed.extend_from_slice(&response);
            match tokio::time::timeout(idle_timeout, stream.write_all(&framed)).await {
                Ok(Ok(())) => {}
                _ => return,
            }
        }
        connections.set_busy(id, false);
    }
}

/// Reads one length-prefixed message, each part within `idle_timeout`;
/// `None` when the client closes, stalls or breaks the framing.
async fn read_message(stream: &mut TcpStream, idle_timeout: Duration) -> Option<Vec<u8>> {
    let len = tokio::time::timeout(idle_timeout, stream.read_u16())
        .await
        .ok()?
        .ok()?;
    let mut message = vec![0; usize::from(len)];
    tokio::time::timeout(idle_timeout, stream.read_exact(&mut message))
        .await
        .ok()?
        .ok()?;
    Some(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_closes_the_connection_idle_the_longest_and_never_a_busy_one() {
        let connections = Connections {
            max: 3,
            open: Mutex::new(Open::default()),
        };
        let (first, _, _) = connections.admit().unwrap();
        let (_second, second_close, _) = connections.admit().unwrap();
        let (third, _, _) = connections.admit().unwrap();
        connections.set_busy(first, true);
        // Full: the second is idle the longest of the idle ones.
        let (_, _, evicted) = connections.admit().unwrap();
        assert!(evicted);
        let open: Vec<u64> = {
            let mut ids: Vec<u64> = connections.lock().by_id.keys().copied().collect();
            ids.sort();
            ids
        };
        assert_eq!(open, vec![first, third, 3]);
        assert_eq!(connections.count(), 3);
        // All busy: a new connection is refused.
        connections.set_busy(third, true);
        connections.set_busy(3, true);
        assert!(connections.admit().is_none());
        assert!(!connections.lock().evict_oldest_idle());
        // The evicted connection was told to close.
        use futures::FutureExt;
        assert!(second_close.notified().now_or_never().is_some());
    }
}
