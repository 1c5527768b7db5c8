//! The admin HTTP endpoint: `/metrics` (Prometheus), `/ready` (200 once a
//! zone is published, 503 before) and `/live`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::publish::ZoneHandle;

/// Serves the admin endpoint until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    zone: ZoneHandle,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(error) => { tracing::warn!(%error, "admin accept failed"); continue; }
            },
            _ = shutdown.changed() => return,
        };
        let zone = zone.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let response = respond(&req, &zone, &metrics);
                async move { Ok::<_, Infallible>(response) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Binds the admin listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

fn respond(req: &Request<Incoming>, zone: &ZoneHandle, metrics: &Metrics) -> Response<Full<Bytes>> {
    let (status, body) = match req.uri().path() {
        "/metrics" => (StatusCode::OK, metrics.render()),
        "/ready" | "/readyz" if zone.is_ready() => (StatusCode::OK, "ready\n".into()),
        "/ready" | "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: no zone loaded yet\n".into(),
        ),
        "/live" | "/livez" | "/healthz" => (StatusCode::OK, "ok\n".into()),
        _ => (StatusCode::NOT_FOUND, "not found\n".into()),
    };
    Response::builder()
        .status(status)
        .header("content-type", "text/plain; version=0.0.4")
        .body(Full::new(Bytes::from(body)))
        .expect("static response parts are valid")
}
