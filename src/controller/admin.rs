//! The controller's admin endpoint: `/metrics`, `/ready` (200 once this
//! cluster is listed and every peer is synced or within its grace period),
//! `/live`, and `/explain?service=<namespace>/<name>` (JSON: the exporters,
//! the winner of the merge, the conflict and the writes still pending).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use super::metrics::ControllerMetrics;
use super::run::Query;
use crate::model::ServiceRef;

/// How long a question to the controller loop may take.
const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// What the endpoint reads.
#[derive(Debug, Clone)]
pub struct State {
    /// The metrics.
    pub metrics: Arc<ControllerMetrics>,
    /// Questions to the controller loop; `None` while this replica waits to
    /// become leader.
    pub queries: mpsc::Sender<Query>,
    /// Whether this replica leads (a standby is live and not ready).
    pub leading: tokio::sync::watch::Receiver<bool>,
}

/// Serves the endpoint until the process ends.
pub async fn serve(listener: TcpListener, state: State) {
    let state = Arc::new(state);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(respond(&req, &state).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn ask<T>(state: &State, make: impl FnOnce(oneshot::Sender<T>) -> Query) -> Option<T> {
    let (reply, answer) = oneshot::channel();
    state.queries.send(make(reply)).await.ok()?;
    tokio::time::timeout(ANSWER_WAIT, answer).await.ok()?.ok()
}

async fn respond(req: &Request<Incoming>, state: &State) -> Response<Full<Bytes>> {
    const TEXT: &str = "text/plain; version=0.0.4";
    let (status, content_type, body) = match req.uri().path() {
        "/metrics" => (StatusCode::OK, TEXT, state.metrics.render()),
        "/live" | "/livez" | "/healthz" | "/health" => (StatusCode::OK, TEXT, "ok\n".into()),
        "/ready" | "/readyz" if !*state.leading.borrow() => (
            StatusCode::SERVICE_UNAVAILABLE,
            TEXT,
            "not ready: standby, waiting for the leader Lease\n".into(),
        ),
        "/ready" | "/readyz" => match ask(state, Query::Ready).await {
            Some(Ok(())) => (StatusCode::OK, TEXT, "ready\n".into()),
            Some(Err(why)) => (
                StatusCode::SERVICE_UNAVAILABLE,
                TEXT,
                format!("not ready: {why}\n"),
            ),
            None => (
                StatusCode::SERVICE_UNAVAILABLE,
                TEXT,
                "not ready: the controller loop did not answer\n".into(),
            ),
        },
        "/explain" => match service_param(req.uri().query().unwrap_or("")) {
            Ok(service) => match ask(state, |reply| Query::Explain(service, reply)).await {
                Some(json) => (
                    StatusCode::OK,
                    "application/json",
                    format!(
                        "{}\n",
                        serde_json::to_string_pretty(&json).unwrap_or_default()
                    ),
                ),
                None => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    TEXT,
                    "the controller loop did not answer (standby or starting)\n".into(),
                ),
            },
            Err(message) => (StatusCode::BAD_REQUEST, TEXT, message),
        },
        _ => (StatusCode::NOT_FOUND, TEXT, "not found\n".into()),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response.headers_mut().insert("content-type", value);
    }
    response
}

fn service_param(query: &str) -> Result<ServiceRef, String> {
    let usage = "usage: /explain?service=<namespace>/<name>\n";
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        if key == "service" {
            return match value.split_once('/') {
                Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() => {
                    Ok(ServiceRef::new(namespace, name))
                }
                _ => Err(format!(
                    "service {value:?} is not <namespace>/<name>\n{usage}"
                )),
            };
        }
    }
    Err(format!("missing service\n{usage}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explain_takes_namespace_slash_name() {
        assert_eq!(
            service_param("service=demo%2Fweb"),
            Ok(ServiceRef::new("demo", "web"))
        );
        assert_eq!(
            service_param("service=demo/web"),
            Ok(ServiceRef::new("demo", "web"))
        );
        assert!(service_param("service=demo").is_err());
        assert!(service_param("service=/web").is_err());
        assert!(service_param("").is_err());
    }
}
