//! How the long-running processes talk HTTP to an apiserver: one HTTP/2
//! connection per client, every watch and request a stream on it.
//!
//! kube-client builds HTTP/1.1 connectors only, and an HTTP/1.1 watch holds
//! a connection for as long as it runs: the controller's ~14 watches and
//! up to 16 concurrent writes held 27–32 connections to its own apiserver
//! (docs/benchmarks-controller.md), and every peer client about 4. The
//! apiserver offers HTTP/2 by ALPN, as client-go uses it; the stack built
//! here offers `h2` first and falls back to HTTP/1.1 where a proxy in
//! front of the apiserver does not speak it.
//!
//! kube-apiserver allows 100 concurrent streams per connection unless
//! `--http2-max-streams-per-connection` says otherwise; a request past
//! that waits for a stream to end. The controller's client holds its
//! watches (about 15), at most 16 writes and 4 peer Lease writes in
//! flight; the hub client six watches and 8 writes; a peer client three
//! watches and a probe: all well under it.
//!
//! One connection carries everything, so its death must be seen: a ping
//! every [`PING_INTERVAL`], unanswered for [`PING_TIMEOUT`], closes it and
//! every stream on it fails at once (client-go closes a silent HTTP/2
//! connection after 30 s + 15 s the same way). The watches then relist
//! as after any failure.
//!
//! Everything else is kube-client's own stack, layer for layer, minus its
//! request tracing: the base URI, the credential (refreshed when it
//! rotates), extra headers, the connect, read and write timeouts. A
//! configuration this stack does not cover (a proxy, an exec credential
//! whose client certificate expires) gets kube-client's stack unchanged.

use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ClientBuilder, ConfigExt, DynBody};
use tower::util::BoxService;
use tower::{BoxError, ServiceBuilder, ServiceExt};

/// How often an HTTP/2 connection is pinged, idle or not.
pub const PING_INTERVAL: Duration = Duration::from_secs(30);

/// How long a ping may go unanswered before the connection is closed.
pub const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// The service under every client built here: kube-client's own type.
pub type Service = BoxService<http::Request<Body>, http::Response<Box<DynBody>>, BoxError>;

/// A client for `config` over HTTP/2 (see the module's text).
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    builder(config).map(ClientBuilder::build)
}

/// A client builder for `config` over HTTP/2, for a caller that adds its
/// own layers (the controller's write fence, a peer's body limit).
pub fn builder(config: kube::Config) -> Result<ClientBuilder<Service>, kube::Error> {
    if config.proxy_url.is_some() || config.auth_info.exec.is_some() {
        return ClientBuilder::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    // HTTP/2 writes many small frames (headers, window updates, ping
    // acknowledgements) on one connection: with Nagle's algorithm one
    // waits for the peer's delayed ACK, up to 40 ms each. Without this the
    // hub bench's export → import p50 was 496 ms (HTTP/1.1: 108 ms; with
    // it: 93 ms). Go's clients, the apiserver's among them, set it too.
    http.set_nodelay(true);
    let mut tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = name
            .clone()
            .try_into()
            .map_err(kube::client::RustlsTlsError::InvalidServerName)
            .map_err(kube::Error::RustlsTls)?;
        tls = tls.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let tls = tls.enable_all_versions().wrap_connector(http);
    let mut connector = hyper_timeout::TimeoutConnector::new(tls);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http_client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .http2_keep_alive_interval(PING_INTERVAL)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .build::<_, Body>(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.default_retry.then(|| {
            tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry())
        }))
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http_client)
        .map_response(|response| {
            response.map(|body| {
                Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<DynBody>
            })
        });
    Ok(ClientBuilder::new(
        BoxService::new(service),
        config.default_namespace,
    ))
}
