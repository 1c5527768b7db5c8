//! The leader's fence: the instant until which this replica may write.
//!
//! A Lease only says who leads as of its last renewal; a replica cut off
//! from its apiserver cannot learn that a standby took over. So the leader
//! trusts its leadership only until the renewal deadline after its last
//! successful renewal ([`super::leader::RENEW_DEADLINE`], shorter than the
//! Lease duration a standby waits for): every write is refused once that
//! instant has passed and cut off when it passes mid-flight. The controller's
//! client carries the fence as a layer, so no write path can forget it.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{Method, Request};
use tokio::time::Instant;

/// The error a fenced write fails with.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Until when this replica may write; shared by the Lease holder, which
/// moves it, and the client layer, which enforces it.
#[derive(Clone, Debug)]
pub struct Fence(Arc<Mutex<Option<Instant>>>);

impl Fence {
    /// A fence that never closes: a single replica without leader election.
    pub fn open() -> Self {
        Self(Arc::new(Mutex::new(None)))
    }

    /// A fence closed from the start: a standby, until it takes the Lease.
    pub fn closed() -> Self {
        Self(Arc::new(Mutex::new(Some(Instant::now()))))
    }

    /// Writes are allowed until `deadline` (after a renewal).
    pub fn extend(&self, deadline: Instant) {
        *self.0.lock().unwrap() = Some(deadline);
    }

    /// No write from now on (leadership lost).
    pub fn close(&self) {
        self.extend(Instant::now());
    }

    /// The instant writes stop; `None` when they never do.
    pub fn deadline(&self) -> Option<Instant> {
        *self.0.lock().unwrap()
    }

    /// Whether a write may start now.
    pub fn is_open(&self) -> bool {
        self.deadline()
            .is_none_or(|deadline| Instant::now() < deadline)
    }

    /// Runs the write `write` within the fence: refused when it is closed,
    /// cut off (dropped, which aborts the request) when it closes first.
    pub async fn bound<T, E: Into<BoxError>>(
        &self,
        write: impl Future<Output = Result<T, E>>,
    ) -> Result<T, BoxError> {
        let Some(deadline) = self.deadline() else {
            return write.await.map_err(Into::into);
        };
        if Instant::now() >= deadline {
            return Err(Box::new(Fenced::Refused));
        }
        match tokio::time::timeout_at(deadline, write).await {
            Ok(result) => result.map_err(Into::into),
            Err(_) => Err(Box::new(Fenced::CutOff)),
        }
    }
}

/// Why a write did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fenced {
    /// The fence was closed when the write was to start.
    Refused,
    /// The fence closed while the write was in flight.
    CutOff,
}

impl fmt::Display for Fenced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Refused => {
                "write refused: this replica's leadership is past its renewal deadline"
            }
            Self::CutOff => "write cut off: this replica's leadership reached its renewal deadline",
        })
    }
}

impl std::error::Error for Fenced {}

/// Whether a request changes the cluster (reads, lists and watches pass
/// the fence: a standby's reads harm no one).
fn writes(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The client layer that holds every write of the controller's client to
/// its [`Fence`].
#[derive(Clone, Debug)]
pub(super) struct FenceLayer(pub Fence);

impl<S> tower::Layer<S> for FenceLayer {
    type Service = FencedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FencedService {
            inner,
            fence: self.0.clone(),
        }
    }
}

/// A client service whose writes are held to a [`Fence`].
#[derive(Clone, Debug)]
pub(super) struct FencedService<S> {
    inner: S,
    fence: Fence,
}

impl<S, B> tower::Service<Request<B>> for FencedService<S>
where
    S: tower::Service<Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if !writes(request.method()) {
            let call = self.inner.call(request);
            return Box::pin(async move { call.await.map_err(Into::into) });
        }
        if !self.fence.is_open() {
            return Box::pin(std::future::ready(Err(
                Box::new(Fenced::Refused) as BoxError
            )));
        }
        let fence = self.fence.clone();
        let call = self.inner.call(request);
        Box::pin(async move { fence.bound(call).await })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use tower::{Layer, Service, ServiceExt};

    use super::*;

    /// A service that answers after `delay`, counting the requests it saw.
    fn slow_server(
        delay: Duration,
        seen: Arc<AtomicUsize>,
    ) -> impl Service<Request<()>, Response = (), Error = BoxError, Future: Send + 'static> + Clone
    {
        tower::service_fn(move |_request: Request<()>| {
            seen.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::time::sleep(delay).await;
                Ok::<_, BoxError>(())
            }
        })
    }

    fn request(method: Method) -> Request<()> {
        Request::builder().method(method).uri("/").body(()).unwrap()
    }

    fn fenced_as(error: BoxError) -> Fenced {
        *error.downcast_ref::<Fenced>().expect("a fence error")
    }

    #[tokio::test(start_paused = true)]
    async fn writes_pass_an_open_fence_and_are_refused_once_it_closed() {
        let seen = Arc::new(AtomicUsize::new(0));
        let fence = Fence::closed();
        fence.extend(Instant::now() + Duration::from_secs(10));
        let mut client = FenceLayer(fence.clone()).layer(slow_server(Duration::ZERO, seen.clone()));
        client
            .ready()
            .await
            .unwrap()
            .call(request(Method::PATCH))
            .await
            .unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 1);

        tokio::time::advance(Duration::from_secs(10)).await;
        let error = client
            .ready()
            .await
            .unwrap()
            .call(request(Method::PATCH))
            .await
            .unwrap_err();
        assert_eq!(fenced_as(error), Fenced::Refused);
        assert_eq!(
            seen.load(Ordering::SeqCst),
            1,
            "a refused write reached the server"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_in_flight_when_the_fence_closes_is_cut_off_at_the_deadline() {
        let seen = Arc::new(AtomicUsize::new(0));
        let fence = Fence::closed();
        let started = Instant::now();
        fence.extend(started + Duration::from_secs(3));
        let mut client = FenceLayer(fence).layer(slow_server(Duration::from_secs(60), seen));
        let error = client
            .ready()
            .await
            .unwrap()
            .call(request(Method::PUT))
            .await
            .unwrap_err();
        assert_eq!(fenced_as(error), Fenced::CutOff);
        assert_eq!(started.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn reads_pass_a_closed_fence_and_a_fence_without_leader_election_never_closes() {
        let seen = Arc::new(AtomicUsize::new(0));
        let mut standby =
            FenceLayer(Fence::closed()).layer(slow_server(Duration::ZERO, seen.clone()));
        standby
            .ready()
            .await
            .unwrap()
            .call(request(Method::GET))
            .await
            .unwrap();
        let mut single =
            FenceLayer(Fence::open()).layer(slow_server(Duration::from_secs(600), seen.clone()));
        single
            .ready()
            .await
            .unwrap()
            .call(request(Method::DELETE))
            .await
            .unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn closing_the_fence_refuses_the_next_write_at_once() {
        let fence = Fence::closed();
        fence.extend(Instant::now() + Duration::from_secs(10));
        assert!(fence.is_open());
        fence.close();
        assert!(!fence.is_open());
        let result = fence.bound(async { Ok::<_, BoxError>(()) }).await;
        assert_eq!(fenced_as(result.unwrap_err()), Fenced::Refused);
    }
}
