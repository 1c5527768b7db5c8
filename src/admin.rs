//! The admin HTTP endpoint: `/metrics` (Prometheus), `/ready` (200 once a
//! zone is published, 503 before and from the moment shutdown begins),
//! `/live`, and
//! `/explain?name=<name>&type=<type>` (JSON: why a name answers the way it
//! does, see [`crate::explain`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hickory_proto::rr::{Name, RecordType};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::explain::{Context, Explanation, NameReading};
use crate::inquiry::Explainer;
use crate::metrics::{Metrics, NetworkEvent};
use crate::publish::ZoneHandle;

/// How long `/explain` waits for the source task to describe a service.
const EXPLAIN_WAIT: Duration = Duration::from_secs(2);
/// Most admin connections open at once: its own budget, apart from DNS's,
/// so that probes answer however many DNS connections there are.
pub const MAX_CONNECTIONS: usize = 32;
/// How long one admin connection may stay open (probes take milliseconds;
/// `/explain` up to [`EXPLAIN_WAIT`]).
const CONNECTION_LIFETIME: Duration = Duration::from_secs(10);
/// How long the accept loop waits after an accept error (such as EMFILE).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// What the admin endpoint reads.
#[derive(Debug, Clone)]
pub struct State {
    /// The published zone.
    pub zone: ZoneHandle,
    /// The process metrics.
    pub metrics: Arc<Metrics>,
    /// The channel to the source task, for `/explain`.
    pub explainer: Explainer,
    /// The configured zone apex.
    pub origin: Name,
    /// Set when shutdown begins: `/ready` turns 503 while DNS still answers
    /// (the lame-duck interval).
    pub shutting_down: Arc<AtomicBool>,
}

/// Serves the admin endpoint until `shutdown` turns true, at most
/// [`MAX_CONNECTIONS`] connections at once (a new one closes the oldest).
pub async fn serve(listener: TcpListener, state: State, mut shutdown: watch::Receiver<bool>) {
    let state = Arc::new(state);
    let connections = Arc::new(Connections::default());
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.changed() => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                if let Some(suppressed) = state.metrics.network_event(NetworkEvent::Admin) {
                    tracing::warn!(%error, suppressed, "admin accept failed; backing off");
                }
                tokio::select! {
                    _ = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                    _ = shutdown.changed() => return,
                }
            }
        };
        let (id, close) = connections.admit(|| {
            if let Some(suppressed) = state.metrics.network_event(NetworkEvent::Admin) {
                tracing::warn!(
                    max = MAX_CONNECTIONS,
                    suppressed,
                    "admin connection limit reached; closed the oldest connection"
                );
            }
        });
        let state = state.clone();
        let connections = connections.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(respond(&req, &state).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = tokio::time::timeout(CONNECTION_LIFETIME, connection) => {}
                _ = close.notified() => {}
            }
            connections.remove(id);
        });
    }
}

/// The open admin connections, oldest first.
#[derive(Debug, Default)]
struct Connections {
    next_id: std::sync::atomic::AtomicU64,
    open: std::sync::Mutex<std::collections::VecDeque<(u64, Arc<tokio::sync::Notify>)>>,
}

impl Connections {
    /// Registers a connection; at [`MAX_CONNECTIONS`] closes the oldest
    /// first (calling `on_full`), so a client holding connections open
    /// cannot lock probes out.
    fn admit(&self, on_full: impl FnOnce()) -> (u64, Arc<tokio::sync::Notify>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let close = Arc::new(tokio::sync::Notify::new());
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.len() >= MAX_CONNECTIONS
            && let Some((_, oldest)) = open.pop_front()
        {
            // A stored permit: the connection's task sees it when it waits.
            oldest.notify_one();
            on_full();
        }
        open.push_back((id, close.clone()));
        (id, close)
    }

    fn remove(&self, id: u64) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|(open_id, _)| *open_id != id);
    }
}

/// Binds the admin listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

const TEXT: &str = "text/plain; version=0.0.4";
const JSON: &str = "application/json";

async fn respond(req: &Request<Incoming>, state: &State) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match req.uri().path() {
        "/metrics" => (StatusCode::OK, TEXT, state.metrics.render()),
        "/ready" | "/readyz" if state.shutting_down.load(Ordering::Relaxed) => (
            StatusCode::SERVICE_UNAVAILABLE,
            TEXT,
            "not ready: shutting down\n".into(),
        ),
        "/ready" | "/readyz" if state.zone.is_ready() => (StatusCode::OK, TEXT, "ready\n".into()),
        "/ready" | "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            TEXT,
            "not ready: no zone loaded yet\n".into(),
        ),
        "/live" | "/livez" | "/healthz" => (StatusCode::OK, TEXT, "ok\n".into()),
        "/explain" => match explain(req.uri().query().unwrap_or(""), state).await {
            Ok(json) => (StatusCode::OK, JSON, json),
            Err(message) => (StatusCode::BAD_REQUEST, TEXT, message),
        },
        _ => (StatusCode::NOT_FOUND, TEXT, "not found\n".into()),
    };
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("static response parts are valid")
}

/// `/explain?name=<name>&type=<type>` (type defaults to A).
async fn explain(query: &str, state: &State) -> Result<String, String> {
    let (name, rtype) = explain_query(query)?;
    let service = NameReading::of(&name, &state.origin, |_| false).service();
    let asked = service.is_some();
    let report = match service {
        Some(service) => state.explainer.ask(service, EXPLAIN_WAIT).await,
        None => None,
    };
    let context = Context {
        origin: &state.origin,
        stale: state.explainer.source_failing(),
        source_silent: asked && report.is_none(),
    };
    let zone = state.zone.load_full();
    let explanation = Explanation::new(zone.as_deref(), &name, rtype, report, context);
    let mut json = serde_json::to_string_pretty(&explanation).expect("plain data serialises");
    json.push('\n');
    Ok(json)
}

/// Reads the `/explain` query string (`application/x-www-form-urlencoded`:
/// `%XX` escapes, `+` for a space).
fn explain_query(query: &str) -> Result<(Name, RecordType), String> {
    let usage = "usage: /explain?name=<name>[&type=<A|AAAA|SRV|TXT|...>]\n";
    let mut name = None;
    let mut rtype = RecordType::A;
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match &*key {
            "name" => {
                let mut parsed = Name::from_ascii(&value)
                    .map_err(|e| format!("name {value:?}: {e}\n{usage}"))?;
                parsed.set_fqdn(true);
                name = Some(parsed);
            }
            "type" => {
                rtype = RecordType::from_str(&value.to_ascii_uppercase())
                    .map_err(|_| format!("type {value:?} is not a record type\n{usage}"))?;
            }
            other => return Err(format!("unknown parameter {other:?}\n{usage}")),
        }
    }
    let name = name.ok_or_else(|| format!("missing name\n{usage}"))?;
    Ok((name, rtype))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explain_queries_are_form_decoded() {
        let (name, rtype) = explain_query("name=web%2Eshop.svc&type=aaaa").unwrap();
        assert_eq!(name.to_string(), "web.shop.svc.");
        assert_eq!(rtype, RecordType::AAAA);
        let (name, rtype) = explain_query("name=web.shop").unwrap();
        assert_eq!(
            (name.to_string().as_str(), rtype),
            ("web.shop.", RecordType::A)
        );
        assert!(explain_query("name=a+b").is_err(), "a space is no name");
        assert!(explain_query("type=A").is_err());
        assert!(explain_query("name=a&colour=red").is_err());
        assert!(explain_query("name=bad%2").is_err());
    }

    #[test]
    fn a_full_admin_endpoint_closes_its_oldest_connection() {
        use futures::FutureExt;
        let connections = Connections::default();
        let (_, oldest) = connections.admit(|| panic!("not full yet"));
        for _ in 1..MAX_CONNECTIONS {
            connections.admit(|| panic!("not full yet"));
        }
        let mut full = false;
        let (newest, _) = connections.admit(|| full = true);
        assert!(full);
        assert!(
            oldest.notified().now_or_never().is_some(),
            "oldest told to close"
        );
        connections.remove(newest);
        let open = connections.open.lock().unwrap().len();
        assert_eq!(open, MAX_CONNECTIONS - 1);
    }
}
