//! The controller's admin endpoint on the shared
//! [`crate::ops::admin_server`]: `/ready` (200 once this cluster is listed and
//! every peer is synced or within its grace period; 503 on a standby), its
//! metrics, and `/explain?service=<namespace>/<name>` (JSON: the exporters,
//! the winner of the merge, the conflict and the writes still pending).
//! `/live`, `/health` and the connection budget are the server's, the same
//! as the DNS server's ([`crate::admin`]).

use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use super::metrics::ControllerMetrics;
use super::run::Query;
use crate::api::ServiceRef;
use crate::ops::admin_server::{self as server, Limits, Reply, Routes};
use crate::ops::log_limit::{LogLimiter, NETWORK_LOG_INTERVAL};

/// How long a question to the controller loop may take.
const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// What the endpoint reads.
#[derive(Debug, Clone)]
pub(super) struct State {
    /// The metrics.
    pub metrics: Arc<ControllerMetrics>,
    /// Questions to the controller loop; `None` while this replica waits to
    /// become leader.
    pub queries: mpsc::Sender<Query>,
    /// Whether this replica leads (a standby is live and not ready).
    pub leading: tokio::sync::watch::Receiver<bool>,
    /// Why the controller does not start its work (an unsupported
    /// Kubernetes), while it does not.
    pub blocked: tokio::sync::watch::Receiver<Option<String>>,
}

/// Serves the endpoint until the process ends, within the shared server's
/// [`Limits`].
pub(super) async fn serve(listener: TcpListener, state: State) {
    let routes = ControllerRoutes {
        state,
        refusals: LogLimiter::new(NETWORK_LOG_INTERVAL),
    };
    server::serve(
        listener,
        Arc::new(routes),
        Limits::default(),
        std::future::pending(),
    )
    .await;
}

/// The controller's routes: its [`State`], and the limiter of the
/// warnings about refused connections (the controller counts them in no
/// metric).
#[derive(Debug)]
struct ControllerRoutes {
    state: State,
    refusals: LogLimiter,
}

impl ControllerRoutes {
    /// Asks the controller loop; `None` when it does not answer in time
    /// (a standby, or still starting).
    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Query) -> Option<T> {
        let (reply, answer) = oneshot::channel();
        self.state.queries.send(make(reply)).await.ok()?;
        tokio::time::timeout(ANSWER_WAIT, answer).await.ok()?.ok()
    }
}

impl Routes for ControllerRoutes {
    async fn ready(&self) -> Result<Option<String>, String> {
        if let Some(why) = self.state.blocked.borrow().clone() {
            return Err(why);
        }
        if !*self.state.leading.borrow() {
            return Err("standby, waiting for the leader Lease".into());
        }
        self.ask(Query::Ready)
            .await
            .unwrap_or_else(|| Err("the controller loop did not answer".into()))
    }

    fn metrics(&self) -> String {
        self.state.metrics.render()
    }

    async fn explain(&self, query: &str) -> Reply {
        let service = match service_param(query) {
            Ok(service) => service,
            Err(message) => return Reply::text(StatusCode::BAD_REQUEST, message),
        };
        match self.ask(|reply| Query::Explain(service, reply)).await {
            Some(json) => Reply::json(&json),
            None => Reply::text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the controller loop did not answer (standby or starting)\n",
            ),
        }
    }

    fn refused(&self) -> Option<u64> {
        self.refusals.allow()
    }
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
    use crate::ops::admin_server::testing::{LIVE_PATHS, get, loopback};

    /// The controller's endpoint on a real socket, its loop played by a
    /// task answering the queries: the health routes every process
    /// answers, `/ready` of a standby and of a leader, `/explain`.
    #[tokio::test]
    async fn the_controller_endpoint_answers_the_shared_health_routes_and_its_own() {
        let (queries, mut asked) = mpsc::channel(4);
        let (leading_tx, leading) = tokio::sync::watch::channel(false);
        let (blocked_tx, blocked) = tokio::sync::watch::channel(Some("Kubernetes 1.32".into()));
        let state = State {
            metrics: Arc::new(ControllerMetrics::new()),
            queries,
            leading,
            blocked,
        };
        let (listener, addr) = loopback().await;
        tokio::spawn(serve(listener, state));

        for path in LIVE_PATHS {
            assert_eq!(get(addr, path).await, (200, "ok\n".into()), "{path}");
        }
        // An unsupported Kubernetes: live, not ready, and why.
        let blocked = (503, "not ready: Kubernetes 1.32\n".into());
        assert_eq!(get(addr, "/ready").await, blocked);
        blocked_tx.send(None).unwrap();
        let standby = (
            503,
            "not ready: standby, waiting for the leader Lease\n".into(),
        );
        assert_eq!(get(addr, "/ready").await, standby);

        leading_tx.send(true).unwrap();
        let answers = tokio::spawn(async move {
            let mut ready = [
                Err("peer east is not synced".to_owned()),
                Ok(None),
                Ok(Some("21 mesh peers".to_owned())),
            ]
            .into_iter();
            while let Some(query) = asked.recv().await {
                match query {
                    Query::Ready(reply) => {
                        let _ = reply.send(ready.next().expect("asked twice"));
                    }
                    Query::Explain(service, reply) => {
                        let _ = reply.send(serde_json::json!({"service": service.to_string()}));
                    }
                }
            }
        });
        let syncing = (503, "not ready: peer east is not synced\n".into());
        assert_eq!(get(addr, "/ready").await, syncing);
        assert_eq!(get(addr, "/readyz").await, (200, "ready\n".into()));
        assert_eq!(
            get(addr, "/ready").await,
            (200, "ready\nwarning: 21 mesh peers\n".into())
        );
        let (status, json) = get(addr, "/explain?service=demo/web").await;
        assert_eq!(status, 200, "{json}");
        let explained: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(explained["service"], "demo/web", "{json}");
        assert_eq!(get(addr, "/explain?service=web").await.0, 400);
        assert_eq!(get(addr, "/metrics").await.0, 200);

        answers.abort();
        let _ = answers.await;
        let gone = (
            503,
            "not ready: the controller loop did not answer\n".into(),
        );
        assert_eq!(get(addr, "/ready").await, gone);
    }

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
