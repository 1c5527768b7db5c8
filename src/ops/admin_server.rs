//! The admin HTTP server both processes run: the DNS server
//! ([`crate::admin`]) and the controller ([`crate::controller::admin`]).
//!
//! It answers the routes every process has — `/live` (also `/livez`,
//! `/health`, `/healthz`: 200 while the process runs), `/ready` (also
//! `/readyz`), `/metrics` — and hands `/explain` to the process, which
//! supplies its readiness, its metrics and its `/explain` through
//! [`Routes`].
//!
//! Probes must answer whatever clients do to the port, so the server keeps
//! its own budget: at most [`Limits::max_connections`] open at once (a new
//! one closes the oldest idle one, a connection with no request in flight,
//! so neither connections held open nor a flood of new ones can close a
//! probe mid-request), each open at most [`Limits::lifetime`], and an
//! accept error (EMFILE, ENFILE) backs off [`Limits::accept_backoff`]
//! instead of retrying at once. The routes answer GET and HEAD, and 405 to
//! any other method.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// Most admin connections open at once: a budget of its own, apart from
/// DNS's, so that probes answer however many DNS connections there are.
pub const MAX_CONNECTIONS: usize = 32;

/// What one process serves beyond the routes every process answers.
pub trait Routes: Send + Sync + 'static {
    /// `Ok` when the process is ready for traffic, with a warning for
    /// its operator if there is one, else why not: `/ready` answers 200
    /// (and the warning), or 503 with the reason.
    fn ready(&self) -> impl Future<Output = Result<Option<String>, String>> + Send;

    /// The process's metrics in the Prometheus text format.
    fn metrics(&self) -> String;

    /// The answer to `/explain` with this query string.
    fn explain(&self, query: &str) -> impl Future<Output = Reply> + Send;

    /// Counts a refusal (an accept error, or a connection closed at the
    /// cap); `Some(suppressed)` when its warning may be logged now, with
    /// the number of warnings held back since the last one.
    fn refused(&self) -> Option<u64>;
}

/// The budget of the admin endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most connections open at once; a new one closes the oldest idle
    /// one (the oldest of all when every one has a request in flight).
    pub max_connections: usize,
    /// How long one connection may stay open (probes take milliseconds,
    /// `/explain` waits up to 2 s for its answer).
    pub lifetime: Duration,
    /// How long the accept loop waits after an accept error.
    pub accept_backoff: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: MAX_CONNECTIONS,
            lifetime: Duration::from_secs(10),
            accept_backoff: Duration::from_millis(100),
        }
    }
}

/// One response: a status, a content type and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    status: StatusCode,
    content_type: &'static str,
    body: String,
}

/// Every text body, metrics included: the Prometheus text format's type.
const TEXT: &str = "text/plain; version=0.0.4";

impl Reply {
    /// A plain-text reply.
    pub fn text(status: StatusCode, body: impl Into<String>) -> Self {
        Self {
            status,
            content_type: TEXT,
            body: body.into(),
        }
    }

    /// 200 with `value` as indented JSON and a final newline.
    pub fn json(value: &impl serde::Serialize) -> Self {
        let mut body = serde_json::to_string_pretty(value).expect("plain data serialises");
        body.push('\n');
        Self {
            status: StatusCode::OK,
            content_type: "application/json",
            body,
        }
    }

    fn into_response(self) -> Response<Full<Bytes>> {
        Response::builder()
            .status(self.status)
            .header("content-type", self.content_type)
            .body(Full::new(Bytes::from(self.body)))
            .expect("static response parts are valid")
    }
}

/// The routes every process answers, by path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Live,
    Ready,
    Metrics,
    Explain,
    NotFound,
}

impl Route {
    fn of(path: &str) -> Self {
        match path {
            "/live" | "/livez" | "/health" | "/healthz" => Self::Live,
            "/ready" | "/readyz" => Self::Ready,
            "/metrics" => Self::Metrics,
            "/explain" => Self::Explain,
            _ => Self::NotFound,
        }
    }
}

/// Binds the admin listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves `routes` on `listener` within `limits` until `shutdown`
/// resolves. Connections still open then finish within their lifetime.
pub async fn serve<R: Routes>(
    listener: TcpListener,
    routes: Arc<R>,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    let connections = Arc::new(Connections::new(limits.max_connections));
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Retrying at once would spin as long as the cause lasts
                // (EMFILE lasts until a descriptor is closed).
                if let Some(suppressed) = routes.refused() {
                    tracing::warn!(%error, suppressed, "admin accept failed; backing off");
                }
                tokio::select! {
                    () = tokio::time::sleep(limits.accept_backoff) => continue,
                    () = &mut shutdown => return,
                }
            }
        };
        let (id, close, in_flight) = connections.admit(Some(stream.as_raw_fd()), || {
            if let Some(suppressed) = routes.refused() {
                tracing::warn!(
                    max = limits.max_connections,
                    suppressed,
                    "admin connection limit reached; closed the oldest connection"
                );
            }
        });
        tokio::spawn(serve_connection(
            stream,
            routes.clone(),
            limits.lifetime,
            close,
            Closing {
                connections: connections.clone(),
                id,
                in_flight,
            },
        ));
    }
}

/// Serves one connection until the client is done, its lifetime is over
/// or a newer connection takes its place.
async fn serve_connection<R: Routes>(
    stream: TcpStream,
    routes: Arc<R>,
    lifetime: Duration,
    close: Arc<Notify>,
    closing: Closing,
) {
    let in_flight = closing.in_flight.clone();
    let service = hyper::service::service_fn(move |request| {
        let routes = routes.clone();
        let busy = Busy::begin(&in_flight);
        async move {
            let response = respond(&request, &*routes).await;
            drop(busy);
            Ok::<_, Infallible>(response)
        }
    });
    let connection =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        _ = tokio::time::timeout(lifetime, connection) => {}
        () = close.notified() => {}
    }
}

async fn respond<R: Routes>(request: &Request<Incoming>, routes: &R) -> Response<Full<Bytes>> {
    // Read-only routes: a HEAD is answered as its GET (hyper sends no body).
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response =
            Reply::text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n").into_response();
        response.headers_mut().insert(
            hyper::header::ALLOW,
            hyper::header::HeaderValue::from_static("GET, HEAD"),
        );
        return response;
    }
    let reply = match Route::of(request.uri().path()) {
        Route::Live => Reply::text(StatusCode::OK, "ok\n"),
        Route::Ready => match routes.ready().await {
            Ok(None) => Reply::text(StatusCode::OK, "ready\n"),
            Ok(Some(warning)) => {
                Reply::text(StatusCode::OK, format!("ready\nwarning: {warning}\n"))
            }
            Err(why) => Reply::text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {why}\n"),
            ),
        },
        Route::Metrics => Reply::text(StatusCode::OK, routes.metrics()),
        Route::Explain => routes.explain(request.uri().query().unwrap_or("")).await,
        Route::NotFound => Reply::text(StatusCode::NOT_FOUND, "not found\n"),
    };
    reply.into_response()
}

/// The open connections, oldest first, each with the signal that closes it
/// and its count of requests in flight.
#[derive(Debug)]
struct Connections {
    max: usize,
    next_id: AtomicU64,
    open: Mutex<VecDeque<Open>>,
}

#[derive(Debug)]
struct Open {
    id: u64,
    close: Arc<Notify>,
    in_flight: Arc<AtomicUsize>,
    /// Its socket, to ask whether a request has arrived that its task has
    /// not read yet.
    socket: Option<RawFd>,
}

impl Open {
    /// No request being answered, none arrived unread: a connection that
    /// is doing nothing. One that has just sent its request counts as
    /// busy, though its task may not have run yet: under a flood of new
    /// connections the accept loop outpaces the tasks, and a probe would
    /// otherwise be closed before it was read.
    fn idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0 && !self.socket.is_some_and(bytes_waiting)
    }
}

/// Whether `socket` holds received bytes not yet read (FIONREAD).
fn bytes_waiting(socket: RawFd) -> bool {
    let mut waiting: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer, which is
    // valid for the call. The descriptor is a socket of ours; were it
    // closed and reused meanwhile, the answer would only misjudge which
    // connection to close.
    #[allow(unsafe_code)]
    let result = unsafe { libc::ioctl(socket, libc::FIONREAD, &mut waiting) };
    result == 0 && waiting > 0
}

impl Connections {
    fn new(max: usize) -> Self {
        Self {
            max,
            next_id: AtomicU64::new(0),
            open: Mutex::new(VecDeque::new()),
        }
    }

    /// Registers a connection; at the cap first closes the oldest idle one
    /// (no request in flight), else the oldest, calling `on_full`: a client
    /// holding connections open, or opening them as fast as it can, cannot
    /// lock probes out or close one being answered.
    fn admit(
        &self,
        socket: Option<RawFd>,
        on_full: impl FnOnce(),
    ) -> (u64, Arc<Notify>, Arc<AtomicUsize>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let close = Arc::new(Notify::new());
        let in_flight = Arc::new(AtomicUsize::new(0));
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.len() >= self.max {
            let victim = open
                .iter()
                .position(Open::idle)
                .or_else(|| {
                    open.iter()
                        .position(|c| c.in_flight.load(Ordering::Acquire) == 0)
                })
                .unwrap_or(0);
            if let Some(evicted) = open.remove(victim) {
                // A stored permit: the connection's task sees it when it waits.
                evicted.close.notify_one();
                on_full();
            }
        }
        open.push_back(Open {
            id,
            close: close.clone(),
            in_flight: in_flight.clone(),
            socket,
        });
        (id, close, in_flight)
    }

    fn remove(&self, id: u64) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|c| c.id != id);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// A request in flight on a connection, for as long as it is answered.
struct Busy(Arc<AtomicUsize>);

impl Busy {
    fn begin(in_flight: &Arc<AtomicUsize>) -> Self {
        in_flight.fetch_add(1, Ordering::AcqRel);
        Self(in_flight.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Takes a connection off the list when its task ends, however it ends
/// (a panic in a route included).
struct Closing {
    connections: Arc<Connections>,
    id: u64,
    in_flight: Arc<AtomicUsize>,
}

impl Drop for Closing {
    fn drop(&mut self) {
        self.connections.remove(self.id);
    }
}

/// An HTTP/1.1 client for the tests of both processes' endpoints: one
/// request at a time on a connection the server keeps open.
#[cfg(test)]
pub(crate) mod testing {
    use std::net::SocketAddr;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// The liveness paths every process answers 200 on (the controller's
    /// manifests probe `/health`, the DNS server's `/live`).
    pub(crate) const LIVE_PATHS: [&str; 4] = ["/live", "/livez", "/health", "/healthz"];

    /// A listener on a free loopback port, and its address.
    pub(crate) async fn loopback() -> (TcpListener, SocketAddr) {
        let listener = super::bind((std::net::Ipv4Addr::LOCALHOST, 0).into())
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        (listener, addr)
    }

    /// `GET path` on a new connection: the status and the body.
    pub(crate) async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        get_on(&mut stream, path).await
    }

    /// `GET path` on `stream`, which stays open: the status and the body.
    pub(crate) async fn get_on(stream: &mut TcpStream, path: &str) -> (u16, String) {
        let request = format!("GET {path} HTTP/1.1\r\nhost: admin\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("send");
        let mut received = Vec::new();
        let head_end = loop {
            if let Some(at) = received.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let mut chunk = [0; 4096];
            let n = stream.read(&mut chunk).await.expect("read");
            assert!(n > 0, "closed before a response to {path}");
            received.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&received[..head_end]).to_ascii_lowercase();
        let status = head[9..12].parse().expect("a status code");
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .expect("a content-length")
            .trim()
            .parse()
            .expect("a length");
        while received.len() < head_end + length {
            let mut chunk = [0; 4096];
            let n = stream.read(&mut chunk).await.expect("read");
            assert!(n > 0, "closed within the body of {path}");
            received.extend_from_slice(&chunk[..n]);
        }
        let body = String::from_utf8_lossy(&received[head_end..head_end + length]).into_owned();
        (status, body)
    }

    /// Whether the server closes `stream` (reads end) within `wait`.
    pub(crate) async fn closed_within(stream: &mut TcpStream, wait: std::time::Duration) -> bool {
        let mut byte = [0; 1];
        matches!(
            tokio::time::timeout(wait, stream.read(&mut byte)).await,
            Ok(Ok(0) | Err(_))
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;
    use std::time::Instant;

    use futures::FutureExt;
    use tokio::sync::oneshot;

    use super::testing::{LIVE_PATHS, closed_within, get, get_on, loopback};
    use super::*;

    /// A process with fixed answers, counting its refusals.
    #[derive(Debug, Default)]
    struct Fixed {
        not_ready: Option<&'static str>,
        refused: AtomicU64,
    }

    impl Routes for Fixed {
        async fn ready(&self) -> Result<Option<String>, String> {
            self.not_ready.map_or(Ok(None), |why| Err(why.into()))
        }

        fn metrics(&self) -> String {
            "fixed_metric 1\n".into()
        }

        async fn explain(&self, query: &str) -> Reply {
            Reply::text(StatusCode::OK, format!("asked {query}\n"))
        }

        fn refused(&self) -> Option<u64> {
            self.refused.fetch_add(1, Ordering::Relaxed);
            None
        }
    }

    /// A running server and what stops it.
    struct Running {
        addr: SocketAddr,
        routes: Arc<Fixed>,
        stop: oneshot::Sender<()>,
        task: tokio::task::JoinHandle<()>,
    }

    async fn start(routes: Fixed, limits: Limits) -> Running {
        let (listener, addr) = loopback().await;
        let routes = Arc::new(routes);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, routes.clone(), limits, async {
            let _ = stopped.await;
        }));
        Running {
            addr,
            routes,
            stop,
            task,
        }
    }

    #[test]
    fn the_health_routes_are_the_same_for_every_process() {
        for path in LIVE_PATHS {
            assert_eq!(Route::of(path), Route::Live, "{path}");
        }
        for path in ["/ready", "/readyz"] {
            assert_eq!(Route::of(path), Route::Ready, "{path}");
        }
        assert_eq!(Route::of("/metrics"), Route::Metrics);
        assert_eq!(Route::of("/explain"), Route::Explain);
        for path in ["/", "/healthy", "/live/", "/metrics.txt"] {
            assert_eq!(Route::of(path), Route::NotFound, "{path}");
        }
    }

    #[test]
    fn a_full_endpoint_closes_its_oldest_idle_connection() {
        let connections = Connections::new(MAX_CONNECTIONS);
        let (_, oldest, oldest_busy) = connections.admit(None, || panic!("not full yet"));
        let (_, second, _) = connections.admit(None, || panic!("not full yet"));
        for _ in 2..MAX_CONNECTIONS {
            connections.admit(None, || panic!("not full yet"));
        }
        // The oldest is answering a request: the next oldest goes.
        let busy = Busy::begin(&oldest_busy);
        let mut full = false;
        let (newest, _, _) = connections.admit(None, || full = true);
        assert!(full);
        assert!(oldest.notified().now_or_never().is_none(), "busy, kept");
        assert!(
            second.notified().now_or_never().is_some(),
            "oldest idle told to close"
        );
        drop(busy);
        connections.admit(None, || {});
        assert!(
            oldest.notified().now_or_never().is_some(),
            "idle again, oldest"
        );
        connections.remove(newest);
        assert_eq!(connections.len(), MAX_CONNECTIONS - 1);
    }

    #[test]
    fn when_every_connection_is_busy_the_oldest_goes() {
        let connections = Connections::new(2);
        let (_, first, first_busy) = connections.admit(None, || {});
        let (_, _, second_busy) = connections.admit(None, || {});
        let _busy = [Busy::begin(&first_busy), Busy::begin(&second_busy)];
        connections.admit(None, || {});
        assert!(first.notified().now_or_never().is_some());
        assert_eq!(connections.len(), 2);
    }

    #[tokio::test]
    async fn the_process_supplies_readiness_metrics_and_explain() {
        let routes = Fixed {
            not_ready: Some("warming up"),
            ..Fixed::default()
        };
        let server = start(routes, Limits::default()).await;
        let addr = server.addr;
        for path in LIVE_PATHS {
            assert_eq!(get(addr, path).await, (200, "ok\n".into()), "{path}");
        }
        for path in ["/ready", "/readyz"] {
            let answer = (503, "not ready: warming up\n".into());
            assert_eq!(get(addr, path).await, answer, "{path}");
        }
        assert_eq!(
            get(addr, "/metrics").await,
            (200, "fixed_metric 1\n".into())
        );
        assert_eq!(
            get(addr, "/explain?name=a").await,
            (200, "asked name=a\n".into())
        );
        assert_eq!(get(addr, "/nothing").await, (404, "not found\n".into()));
        assert_eq!(server.routes.refused.load(Ordering::Relaxed), 0);

        server.stop.send(()).expect("the server runs");
        tokio::time::timeout(Duration::from_secs(2), server.task)
            .await
            .expect("the server stops at shutdown")
            .expect("the server did not panic");
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "the listener is closed after shutdown"
        );
    }

    /// A request in `raw` (with `connection: close`) on a new connection:
    /// the whole response, lower-cased.
    async fn head_of(addr: SocketAddr, raw: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.write_all(raw.as_bytes()).await.expect("send");
        let mut received = Vec::new();
        stream.read_to_end(&mut received).await.expect("read");
        String::from_utf8_lossy(&received).to_ascii_lowercase()
    }

    #[tokio::test]
    async fn the_routes_answer_get_and_head_and_405_to_anything_else() {
        let server = start(Fixed::default(), Limits::default()).await;
        for method in ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"] {
            for path in ["/live", "/ready", "/metrics", "/explain", "/nothing"] {
                let head = head_of(
                    server.addr,
                    &format!("{method} {path} HTTP/1.1\r\nhost: a\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"),
                )
                .await;
                assert!(head.starts_with("http/1.1 405"), "{method} {path}: {head}");
                assert!(head.contains("allow: get, head"), "{method} {path}: {head}");
            }
        }
        let head = head_of(
            server.addr,
            "HEAD /ready HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert!(head.ends_with("\r\n\r\n"), "HEAD has no body: {head}");
    }

    #[tokio::test]
    async fn at_its_cap_the_endpoint_closes_the_oldest_connection() {
        let limits = Limits {
            max_connections: 2,
            ..Limits::default()
        };
        let server = start(Fixed::default(), limits).await;
        let mut open = Vec::new();
        for _ in 0..3 {
            let mut stream = TcpStream::connect(server.addr).await.expect("connect");
            assert_eq!(get_on(&mut stream, "/live").await.0, 200);
            open.push(stream);
        }
        assert!(
            closed_within(&mut open[0], Duration::from_secs(2)).await,
            "the oldest connection is closed for the third"
        );
        for stream in &mut open[1..] {
            assert_eq!(get_on(stream, "/ready").await.0, 200, "a newer one stays");
        }
        assert_eq!(server.routes.refused.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_connection_is_closed_at_the_end_of_its_lifetime() {
        let lifetime = Duration::from_millis(300);
        let limits = Limits {
            lifetime,
            ..Limits::default()
        };
        let server = start(Fixed::default(), limits).await;
        let opened = Instant::now();
        let mut stream = TcpStream::connect(server.addr).await.expect("connect");
        assert_eq!(get_on(&mut stream, "/live").await.0, 200);
        assert!(
            closed_within(&mut stream, Duration::from_secs(3)).await,
            "an idle connection outlived its lifetime"
        );
        let lived = opened.elapsed();
        assert!(
            lived >= lifetime,
            "closed after {lived:?}, before its lifetime"
        );
    }

    /// Under EMFILE the accept loop backs off instead of spinning, and
    /// accepts again once a descriptor is free. The descriptor limit is the
    /// process's, so the test runs itself again as a child process under
    /// `ulimit -n 64`.
    #[test]
    fn accept_errors_back_off_and_the_loop_survives_them() {
        const CHILD: &str = "CLUSTERSET_DNS_TEST_ADMIN_EMFILE";
        if std::env::var_os(CHILD).is_none() {
            let name = module_path!()
                .split_once("::")
                .map_or(module_path!(), |(_, path)| path)
                .to_owned()
                + "::accept_errors_back_off_and_the_loop_survives_them";
            let output = std::process::Command::new("sh")
                .args(["-c", "ulimit -n 64 && exec \"$0\" \"$@\""])
                .arg(std::env::current_exe().expect("the test binary"))
                .args(["--exact", &name, "--nocapture", "--test-threads=1"])
                .env(CHILD, "1")
                .output()
                .expect("run the child");
            let stdout = String::from_utf8_lossy(&output.stdout);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(output.status.success(), "{stdout}{stderr}");
            assert!(
                stdout.contains("1 passed"),
                "the child ran no test: {stdout}"
            );
            return;
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let server = start(Fixed::default(), Limits::default()).await;
            // Take every descriptor left but one, which the client's
            // socket takes: the server's accept then finds none.
            let mut taken = Vec::new();
            loop {
                match std::fs::File::open("/dev/null") {
                    Ok(file) => taken.push(file),
                    Err(error) if error.raw_os_error() == Some(libc::EMFILE) => break,
                    Err(error) => panic!("opening /dev/null: {error}"),
                }
            }
            taken.pop();
            let mut client = TcpStream::connect(server.addr).await.expect("connect");
            tokio::time::sleep(Duration::from_millis(550)).await;
            let errors = server.routes.refused.load(Ordering::Relaxed);
            assert!(
                (2..=8).contains(&errors),
                "{errors} accept errors in 550 ms: backing off 100 ms makes about 6"
            );
            drop(taken);
            let answer = tokio::time::timeout(Duration::from_secs(2), get_on(&mut client, "/live"))
                .await
                .expect("the queued connection is accepted once descriptors are free");
            assert_eq!(answer, (200, "ok\n".into()));
        });
    }
}
