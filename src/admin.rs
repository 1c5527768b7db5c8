//! The DNS server's admin endpoint on the shared
//! [`admin_server`](crate::ops::admin_server): `/ready`
//! (200 once a zone is published, 503 before and from the moment shutdown
//! begins), its metrics, and `/explain?name=<name>&type=<type>` (JSON: why
//! a name answers the way it does, see [`crate::explain`]). `/live`,
//! `/health` and the connection budget are the server's, the same as the
//! controller's.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hickory_proto::rr::{Name, RecordType};
use hyper::StatusCode;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::explain::{Context, Explanation, NameReading};
use crate::inquiry::Explainer;
use crate::metrics::{Metrics, NetworkEvent};
pub use crate::ops::admin_server::bind;
use crate::ops::admin_server::{Limits, Reply, Routes};
use crate::publish::ZoneHandle;

/// How long `/explain` waits for the source task to describe a service.
const EXPLAIN_WAIT: Duration = Duration::from_secs(2);

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

/// Serves the admin endpoint until `shutdown` changes, within the shared
/// server's [`Limits`].
pub async fn serve(listener: TcpListener, state: State, mut shutdown: watch::Receiver<bool>) {
    let shutdown = async move {
        let _ = shutdown.changed().await;
    };
    crate::ops::admin_server::serve(listener, Arc::new(state), Limits::default(), shutdown).await;
}

impl Routes for State {
    async fn ready(&self) -> Result<Option<String>, String> {
        if self.shutting_down.load(Ordering::Relaxed) {
            Err("shutting down".into())
        } else if self.zone.is_ready() {
            Ok(None)
        } else {
            Err("no zone loaded yet".into())
        }
    }

    fn metrics(&self) -> String {
        self.metrics.render()
    }

    async fn explain(&self, query: &str) -> Reply {
        match explain_query(query) {
            Ok((name, rtype)) => Reply::json(&self.explanation(&name, rtype).await),
            Err(message) => Reply::text(StatusCode::BAD_REQUEST, message),
        }
    }

    fn refused(&self) -> Option<u64> {
        self.metrics.network_event(NetworkEvent::Admin)
    }
}

impl State {
    /// Why `name` answers `rtype` the way it does: the zone's answer, and
    /// what the source holds for the service the name belongs to.
    async fn explanation(&self, name: &Name, rtype: RecordType) -> Explanation {
        let service = NameReading::of(name, &self.origin, |_| false).service();
        let asked = service.is_some();
        let report = match service {
            Some(service) => self.explainer.ask(service, EXPLAIN_WAIT).await,
            None => None,
        };
        let context = Context {
            origin: &self.origin,
            stale: self.explainer.source_failing(),
            source_silent: asked && report.is_none(),
        };
        let zone = self.zone.load_full();
        Explanation::new(zone.as_deref(), name, rtype, report, context)
    }
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
    use crate::index::Index;
    use crate::ops::admin_server::testing::{LIVE_PATHS, get, loopback};
    use crate::zone::ZoneSettings;

    /// The DNS server's endpoint on a real socket: the health routes every
    /// process answers, `/ready` following the zone and shutdown, its
    /// metrics and `/explain`.
    #[tokio::test]
    async fn the_dns_endpoint_answers_the_shared_health_routes_and_its_own() {
        let origin = Name::from_ascii("clusterset.local.").unwrap();
        let (explainer, _inquiries) = crate::inquiry::channel();
        let state = State {
            zone: ZoneHandle::new(),
            metrics: Arc::new(Metrics::new()),
            explainer,
            origin: origin.clone(),
            shutting_down: Arc::new(AtomicBool::new(false)),
        };
        let (listener, addr) = loopback().await;
        let (_stop, shutdown) = watch::channel(false);
        tokio::spawn(serve(listener, state.clone(), shutdown));

        for path in LIVE_PATHS {
            assert_eq!(get(addr, path).await, (200, "ok\n".into()), "{path}");
        }
        let not_yet = (503, "not ready: no zone loaded yet\n".into());
        assert_eq!(get(addr, "/ready").await, not_yet);
        state
            .zone
            .store(Index::new(ZoneSettings::new(origin)).publish().0);
        assert_eq!(get(addr, "/readyz").await, (200, "ready\n".into()));
        let (status, json) = get(addr, "/explain?name=clusterset.local&type=SOA").await;
        assert_eq!(status, 200, "{json}");
        let explanation: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(explanation["question"], "clusterset.local. SOA", "{json}");
        assert_eq!(get(addr, "/explain").await.0, 400);
        state.shutting_down.store(true, Ordering::Relaxed);
        let draining = (503, "not ready: shutting down\n".into());
        assert_eq!(get(addr, "/ready").await, draining);
        for path in LIVE_PATHS {
            assert_eq!(get(addr, path).await.0, 200, "{path} while shutting down");
        }

        // A refusal counts as the `admin` network event.
        assert!(Routes::refused(&state).is_some(), "the first is logged");
        let (_, metrics) = get(addr, "/metrics").await;
        assert!(
            metrics.contains("clusterset_dns_network_events_total{reason=\"admin\"} 1"),
            "{metrics}"
        );
    }

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
}
