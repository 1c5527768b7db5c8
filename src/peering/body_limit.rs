//! Bounded response bodies on the clients that read a peer (issue 44, H2).
//!
//! kube-client reads a list response whole before decoding it, and a watch
//! line by line with no bound on a line: a peer's apiserver decides how
//! much this process allocates. Every response of a peer client passes
//! through [`BodyLimitLayer`]: a list or get is cut off past
//! [`MAX_RESPONSE_BYTES`], a watch line past [`MAX_WATCH_LINE_BYTES`]. The
//! request then fails with an error that names the limit, which the watch
//! reports as any failure (the peer's data is kept for the grace period).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};

/// The most bytes one list page or one object read from a peer may take:
/// a page of [`crate::controller::connection::PEER_LIST_PAGE`] objects at
/// their size limits with room to spare.
pub const MAX_RESPONSE_BYTES: u64 = 16 * 1024 * 1024;

/// The most bytes one watch event from a peer may take (etcd's own limit
/// on an object is 1.5 MiB).
pub const MAX_WATCH_LINE_BYTES: u64 = 2 * 1024 * 1024;

/// The error a cut-off response fails with.
#[derive(Debug, thiserror::Error)]
#[error("the peer's response is larger than the {limit} bytes allowed for {what}")]
pub struct TooLarge {
    limit: u64,
    what: &'static str,
}

/// Wraps every response body of a peer client in a [`Bounded`] body.
#[derive(Clone, Copy, Debug, Default)]
pub struct BodyLimitLayer;

impl<S> tower::Layer<S> for BodyLimitLayer {
    type Service = BodyLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BodyLimit { inner }
    }
}

/// The service [`BodyLimitLayer`] makes.
#[derive(Clone, Debug)]
pub struct BodyLimit<S> {
    inner: S,
}

impl<S, ReqBody, B> tower::Service<Request<ReqBody>> for BodyLimit<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<B>>,
    S::Future: Send + 'static,
{
    type Response = Response<Bounded<B>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let mode = if is_watch(request.uri().query()) {
            Mode::PerLine
        } else {
            Mode::Total
        };
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|inner| Bounded {
                inner,
                mode,
                seen: 0,
            }))
        })
    }
}

/// Whether a request's query asks for a watch (`watch=true` or `watch=1`).
fn is_watch(query: Option<&str>) -> bool {
    query.is_some_and(|query| {
        form_urlencoded::parse(query.as_bytes())
            .any(|(key, value)| key == "watch" && (value == "true" || value == "1"))
    })
}

/// What a body is held to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// All of it: a list page or an object.
    Total,
    /// Each line: a watch event.
    PerLine,
}

/// A response body cut off past its limit.
#[derive(Debug)]
pub struct Bounded<B> {
    inner: B,
    mode: Mode,
    /// Bytes so far: of the whole body, or of the line under way.
    seen: u64,
}

impl<B> Bounded<B> {
    /// Counts `data`; the error when it goes past the limit.
    fn count(&mut self, data: &[u8]) -> Result<(), TooLarge> {
        match self.mode {
            Mode::Total => {
                self.seen += data.len() as u64;
                if self.seen > MAX_RESPONSE_BYTES {
                    return Err(TooLarge {
                        limit: MAX_RESPONSE_BYTES,
                        what: "a list page or an object",
                    });
                }
            }
            Mode::PerLine => {
                let mut rest = data;
                loop {
                    let (line, next) = match rest.iter().position(|&b| b == b'\n') {
                        Some(at) => (&rest[..at], Some(&rest[at + 1..])),
                        None => (rest, None),
                    };
                    self.seen += line.len() as u64;
                    if self.seen > MAX_WATCH_LINE_BYTES {
                        return Err(self.line_error());
                    }
                    match next {
                        Some(next) => {
                            self.seen = 0;
                            rest = next;
                        }
                        None => break,
                    }
                }
            }
        }
        Ok(())
    }

    fn line_error(&self) -> TooLarge {
        TooLarge {
            limit: MAX_WATCH_LINE_BYTES,
            what: "a watch event",
        }
    }
}

impl<B> Body for Bounded<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && let Err(error) = this.count(data)
                {
                    return Poll::Ready(Some(Err(error.into())));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(error.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full, StreamBody};

    fn bounded<B>(inner: B, mode: Mode) -> Bounded<B> {
        Bounded {
            inner,
            mode,
            seen: 0,
        }
    }

    async fn read<B>(body: Bounded<B>) -> Result<usize, String>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        body.collect()
            .await
            .map(|collected| collected.to_bytes().len())
            .map_err(|error| error.to_string())
    }

    #[test]
    fn watches_are_told_apart_by_their_query() {
        assert!(is_watch(Some("watch=true&resourceVersion=5")));
        assert!(is_watch(Some("labelSelector=a&watch=1")));
        assert!(!is_watch(Some("limit=50")));
        assert!(!is_watch(Some("watch=false")));
        assert!(!is_watch(None));
    }

    #[tokio::test]
    async fn a_list_is_cut_off_past_its_limit() {
        let within = Full::new(Bytes::from(vec![b'x'; MAX_RESPONSE_BYTES as usize]));
        assert_eq!(
            read(bounded(within, Mode::Total)).await,
            Ok(MAX_RESPONSE_BYTES as usize)
        );
        let over = Full::new(Bytes::from(vec![b'x'; MAX_RESPONSE_BYTES as usize + 1]));
        let error = read(bounded(over, Mode::Total)).await.unwrap_err();
        assert!(error.contains("16777216 bytes"), "{error}");
    }

    fn chunks(parts: Vec<Vec<u8>>) -> impl Body<Data = Bytes, Error = std::io::Error> + Unpin {
        StreamBody::new(futures::stream::iter(
            parts
                .into_iter()
                .map(|part| Ok::<_, std::io::Error>(Frame::data(Bytes::from(part)))),
        ))
    }

    #[tokio::test]
    async fn a_watch_is_held_to_its_line_limit_not_its_length() {
        let line = |n: usize| {
            let mut line = vec![b'x'; n];
            line.push(b'\n');
            line
        };
        let half = MAX_WATCH_LINE_BYTES as usize / 2;
        // Many lines, each within the limit, far past it in total.
        let many: Vec<Vec<u8>> = (0..10)
            .map(|_| line(MAX_WATCH_LINE_BYTES as usize))
            .collect();
        assert!(read(bounded(chunks(many), Mode::PerLine)).await.is_ok());
        // One line split over chunks, past the limit.
        let split = vec![
            vec![b'x'; half],
            vec![b'x'; half],
            vec![b'x'; 2],
            b"\n".to_vec(),
        ];
        let error = read(bounded(chunks(split), Mode::PerLine))
            .await
            .unwrap_err();
        assert!(error.contains("a watch event"), "{error}");
        // A long line inside one chunk, between short ones.
        let mut inside = line(10);
        inside.extend(line(MAX_WATCH_LINE_BYTES as usize + 1));
        inside.extend(line(10));
        assert!(
            read(bounded(chunks(vec![inside]), Mode::PerLine))
                .await
                .is_err()
        );
        // A line that carries over a chunk and ends within the limit.
        let carried = vec![vec![b'x'; half], line(half)];
        assert!(read(bounded(chunks(carried), Mode::PerLine)).await.is_ok());
    }
}
