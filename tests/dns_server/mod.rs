//! The real DNS server started in-process on loopback, and a small DNS
//! client speaking to it over real UDP and TCP sockets: [`TestServer`]
//! for a manifest, [`start_dns`] for a cluster's apiserver; manifest
//! fixtures, and record rendering for comparisons.
//!
//! Owns: starting/stopping servers for tests, wire I/O with deadlines,
//! rendering. Doesn't own: assertions about DNS behaviour (the test files),
//! waiting and HTTP (`tests/support`).
#![allow(dead_code)] // each test crate uses a different subset

use crate::support;
#[allow(unused_imports)] // each test crate uses a different subset
pub(crate) use crate::support::free_udp_and_tcp_port;

use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::Duration;

use clusterset_dns::app::{self, Running, StartError};
use clusterset_dns::config::{Config, ServeArgs};
use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::timeout;

/// How long a query may take before the test fails.
pub(crate) const QUERY_TIMEOUT: Duration = Duration::from_secs(2);
/// How long to wait before concluding that no UDP reply is coming.
pub(crate) const NO_REPLY_WAIT: Duration = Duration::from_millis(300);
/// Pause between two polls of a changing state.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// The shipped three-cluster fixture.
pub(crate) const EXAMPLE: &str = "config/example-clusterset.yaml";
/// The SOA of negative answers with default settings; the serial is masked
/// by [`render`] because it is the publish time.
pub(crate) const SOA: &str = "clusterset.local. 5 IN SOA ns.dns.clusterset.local. hostmaster.clusterset.local. SERIAL 7200 1800 86400 5";

/// Sends test-scoped tracing output to the test writer, once per process.
pub(crate) fn init_tracing() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "clusterset_dns=warn".into());
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    });
}

/// Absolute path of a file in the repository.
pub(crate) fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// How a test server is configured.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Options {
    /// Serve UDP through the precompiled fast path.
    pub fast_path: bool,
    /// Most endpoints in a headless answer; `None` = the default.
    pub max_records: Option<usize>,
    /// The serving fallback (`serve_terminating`).
    pub serve_terminating: bool,
}

impl Options {
    /// Fast path on or off, other settings default.
    pub(crate) fn fast_path(fast_path: bool) -> Self {
        Self {
            fast_path,
            max_records: None,
            serve_terminating: false,
        }
    }
}

/// The configuration of a loopback server for `file`.
pub(crate) fn config(file: &Path, options: Options) -> Config {
    let args = ServeArgs {
        file: Some(file.to_path_buf()),
        dns_listen: Some("127.0.0.1:0".parse().expect("literal address")),
        admin_listen: Some("127.0.0.1:0".parse().expect("literal address")),
        fast_path: Some(options.fast_path),
        udp_workers: Some(2),
        max_records: options.max_records,
        serve_terminating: Some(options.serve_terminating),
        ..Default::default()
    };
    Config::resolve(&args).expect("test configuration is valid")
}

/// Starts a server for `file`; `Err` when the first load fails.
pub(crate) async fn try_start(file: &Path, options: Options) -> Result<Running, StartError> {
    init_tracing();
    app::start(&config(file, options)).await
}

/// clusterset-dns serving from the apiserver of `kubeconfig` (the
/// Kubernetes source), as its DaemonSet would, on loopback ports it picks:
/// one UDP worker, every other setting default unless `tweak` changes it.
/// Does not wait for readiness (`/ready`).
pub(crate) async fn start_dns(kubeconfig: &Path, tweak: impl FnOnce(&mut ServeArgs)) -> Running {
    init_tracing();
    let mut args = ServeArgs {
        kubeconfig: Some(kubeconfig.to_path_buf()),
        dns_listen: Some("127.0.0.1:0".parse().expect("literal address")),
        admin_listen: Some("127.0.0.1:0".parse().expect("literal address")),
        udp_workers: Some(1),
        ..Default::default()
    };
    tweak(&mut args);
    let config = Config::resolve(&args).expect("test configuration is valid");
    app::start(&config).await.unwrap_or_else(|e| {
        panic!(
            "clusterset-dns for {} did not start: {e}",
            kubeconfig.display()
        )
    })
}

/// A running server with the manifest it serves (in a tempdir unless it is
/// a repository file).
pub(crate) struct TestServer {
    running: Running,
    manifest: PathBuf,
    _dir: Option<TempDir>,
}

impl TestServer {
    /// Serves a repository file such as [`EXAMPLE`].
    pub(crate) async fn from_file(relative: &str, options: Options) -> Self {
        let manifest = repo_path(relative);
        let running = try_start(&manifest, options)
            .await
            .unwrap_or_else(|e| panic!("server for {relative} did not start: {e}"));
        Self {
            running,
            manifest,
            _dir: None,
        }
    }

    /// Writes `yaml` to a fresh tempdir and serves it.
    pub(crate) async fn from_yaml(yaml: &str, options: Options) -> Self {
        let dir = tempfile::tempdir().expect("create tempdir");
        let manifest = dir.path().join("clusterset.yaml");
        std::fs::write(&manifest, yaml).expect("write manifest");
        let running = try_start(&manifest, options)
            .await
            .unwrap_or_else(|e| panic!("server for a test manifest did not start: {e}"));
        Self {
            running,
            manifest,
            _dir: Some(dir),
        }
    }

    /// DNS address (UDP and TCP).
    pub(crate) fn dns(&self) -> SocketAddr {
        self.running.dns_addr()
    }

    /// Admin HTTP address.
    pub(crate) fn admin(&self) -> SocketAddr {
        self.running.admin_addr()
    }

    /// The manifest file being served.
    pub(crate) fn manifest(&self) -> &Path {
        &self.manifest
    }

    /// Replaces the manifest atomically (write + rename), as a ConfigMap
    /// update does, so the watcher never sees a half-written file.
    pub(crate) fn write_manifest(&self, yaml: &str) {
        assert!(
            self._dir.is_some(),
            "write_manifest on a repository file ({}): start the server with from_yaml",
            self.manifest.display()
        );
        let tmp = self.manifest.with_extension("tmp");
        std::fs::write(&tmp, yaml).expect("write manifest");
        std::fs::rename(&tmp, &self.manifest).expect("replace manifest");
    }

    /// Stops the server and waits for it.
    pub(crate) async fn stop(self) {
        self.running.stop().await;
    }
}

/// The transport of one exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// One datagram each way.
    Udp,
    /// One length-prefixed message each way on a fresh connection.
    Tcp,
}

/// A query for `name`/`rtype` (class IN, RD set as stub resolvers do).
pub(crate) fn query(name: &str, rtype: RecordType) -> Message {
    let name = Name::from_ascii(name).unwrap_or_else(|e| panic!("bad name {name:?}: {e}"));
    let mut message = Message::query();
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(name, rtype));
    message
}

/// A query with an OPT record advertising `payload` bytes at `version`.
pub(crate) fn query_edns(name: &str, rtype: RecordType, payload: u16, version: u8) -> Message {
    let mut message = query(name, rtype);
    let mut edns = Edns::new();
    edns.set_max_payload(payload).set_version(version);
    message.set_edns(edns);
    message
}

/// Encodes a message.
pub(crate) fn encode(message: &Message) -> Vec<u8> {
    message.to_vec().expect("test queries encode")
}

/// Decodes a response, failing the test with `context` on error.
pub(crate) fn decode(bytes: &[u8], context: &str) -> Message {
    Message::from_vec(bytes).unwrap_or_else(|e| panic!("{context}: undecodable response: {e}"))
}

/// Sends `message` and returns the decoded response; panics on timeout.
pub(crate) async fn exchange(
    server: SocketAddr,
    transport: Transport,
    message: &Message,
) -> Message {
    exchange_sized(server, transport, message).await.0
}

/// Like [`exchange`], also returning the response size in bytes.
pub(crate) async fn exchange_sized(
    server: SocketAddr,
    transport: Transport,
    message: &Message,
) -> (Message, usize) {
    let bytes = encode(message);
    let reply = match transport {
        Transport::Udp => udp_raw(server, &bytes, QUERY_TIMEOUT).await,
        Transport::Tcp => tcp_raw(server, &bytes, QUERY_TIMEOUT).await,
    };
    let context = format!("{transport:?} {:?}", message.queries);
    let reply = reply.unwrap_or_else(|| panic!("{context}: no response within {QUERY_TIMEOUT:?}"));
    let response = decode(&reply, &context);
    assert_eq!(
        response.metadata.id, message.metadata.id,
        "{context}: response ID"
    );
    (response, reply.len())
}

/// A loopback UDP socket connected to `server`, never to itself.
///
/// While nothing is bound to `server` yet (a server still starting on a
/// port chosen up front), the kernel may hand that very port to the client
/// as its ephemeral port: the socket is then connected to itself and
/// "receives" its own query, which parses as a DNS message. Such a socket
/// is kept until another is bound, so the next one gets a different port.
pub(crate) async fn client_udp_socket(server: SocketAddr) -> UdpSocket {
    let mut self_connected = Vec::new();
    loop {
        let socket = UdpSocket::bind("127.0.0.1:0")
            .await
            .expect("bind client UDP socket");
        if socket.local_addr().expect("client address") == server {
            self_connected.push(socket);
            continue;
        }
        socket.connect(server).await.expect("connect UDP socket");
        return socket;
    }
}

/// Sends raw bytes in one datagram from a fresh socket and returns the
/// first reply within `wait`, or `None`.
pub(crate) async fn udp_raw(server: SocketAddr, bytes: &[u8], wait: Duration) -> Option<Vec<u8>> {
    let socket = client_udp_socket(server).await;
    socket.send(bytes).await.expect("send UDP query");
    let mut buf = vec![0u8; 65535];
    match timeout(wait, socket.recv(&mut buf)).await {
        Ok(Ok(n)) => Some(buf[..n].to_vec()),
        // ICMP port unreachable (nothing listening) is no reply as well.
        Ok(Err(_)) | Err(_) => None,
    }
}

/// A connected UDP client socket reused across queries (fast for long
/// query lists); replies are matched by ID.
pub(crate) struct UdpClient {
    socket: UdpSocket,
}

impl UdpClient {
    /// A client socket connected to `server`.
    pub(crate) async fn connect(server: SocketAddr) -> Self {
        Self {
            socket: client_udp_socket(server).await,
        }
    }

    /// Sends `bytes` (a query with an ID) and returns the reply with the
    /// same ID, or `None` after [`QUERY_TIMEOUT`].
    pub(crate) async fn exchange_raw(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        self.socket.send(bytes).await.expect("send UDP query");
        let mut buf = vec![0u8; 65535];
        let receive = async {
            loop {
                let n = self.socket.recv(&mut buf).await.expect("UDP receive");
                if n >= 2 && buf[..2] == bytes[..2] {
                    return buf[..n].to_vec();
                }
            }
        };
        timeout(QUERY_TIMEOUT, receive).await.ok()
    }
}

/// Sends raw bytes as one TCP message (2-byte length prefix) on a fresh
/// connection and reads one message back; `None` if the server closes the
/// connection or does not answer within `wait`.
pub(crate) async fn tcp_raw(server: SocketAddr, bytes: &[u8], wait: Duration) -> Option<Vec<u8>> {
    let exchange = async {
        let mut stream = TcpStream::connect(server).await.ok()?;
        // With no listener on `server`, a connect from the same ephemeral
        // port completes as a TCP simultaneous open with itself.
        if stream.local_addr().ok()? == server {
            return None;
        }
        let mut framed = Vec::with_capacity(bytes.len() + 2);
        framed.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
        framed.extend_from_slice(bytes);
        stream.write_all(&framed).await.ok()?;
        read_tcp_message(&mut stream).await
    };
    timeout(wait, exchange).await.ok().flatten()
}

/// Reads one length-prefixed DNS message from a TCP stream.
pub(crate) async fn read_tcp_message(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).await.ok()?;
    let mut reply = vec![0u8; u16::from_be_bytes(len) as usize];
    stream.read_exact(&mut reply).await.ok()?;
    Some(reply)
}

/// Renders a record as a zone-file line with lower-case names (comparisons
/// are case-insensitive, as DNS is), TXT strings quoted and the SOA serial
/// masked as `SERIAL`.
pub(crate) fn render(record: &Record) -> String {
    let rdata = match &record.data {
        RData::TXT(txt) => txt
            .txt_data
            .iter()
            .map(|s| format!("\"{}\"", String::from_utf8_lossy(s)))
            .collect::<Vec<_>>()
            .join(" "),
        RData::SOA(soa) => format!(
            "{} {} SERIAL {} {} {} {}",
            soa.mname.to_lowercase(),
            soa.rname.to_lowercase(),
            soa.refresh,
            soa.retry,
            soa.expire,
            soa.minimum
        ),
        other => other.to_string().to_ascii_lowercase(),
    };
    format!(
        "{} {} {} {} {}",
        record.name.to_lowercase(),
        record.ttl,
        record.dns_class,
        record.record_type(),
        rdata
    )
}

/// Renders and sorts a section.
pub(crate) fn sorted(records: &[Record]) -> Vec<String> {
    let mut lines: Vec<String> = records.iter().map(render).collect();
    lines.sort();
    lines
}

/// Normalises expected zone-file lines the way [`render`] does, sorted.
pub(crate) fn expected(lines: &[&str]) -> Vec<String> {
    let mut lines: Vec<String> = lines
        .iter()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    lines.sort();
    lines
}

/// Every field of a response except the ID: header flags, the question as
/// sent (exact case), records as [`render`] shows them (TTLs included,
/// names in lower case, SOA serial masked) and the OPT record.
pub(crate) fn describe(message: &Message) -> String {
    let m = &message.metadata;
    let mut out = format!(
        "type={:?} opcode={:?} rcode={} aa={} tc={} rd={} ra={} ad={} cd={}\n",
        m.message_type,
        m.op_code,
        u16::from(m.response_code),
        m.authoritative,
        m.truncation,
        m.recursion_desired,
        m.recursion_available,
        m.authentic_data,
        m.checking_disabled
    );
    for q in &message.queries {
        let _ = writeln!(
            out,
            "question: {} {} {}",
            q.name(),
            q.query_class(),
            q.query_type()
        );
    }
    let sections = [
        ("answer", &message.answers),
        ("authority", &message.authorities),
        ("additional", &message.additionals),
    ];
    for (section, records) in sections {
        for r in records {
            let _ = writeln!(out, "{section}: {}", render(r));
        }
    }
    match &message.edns {
        Some(e) => {
            let _ = writeln!(
                out,
                "edns: payload={} version={} rcode_high={} do={} options={:?}",
                e.max_payload(),
                e.version(),
                e.rcode_high(),
                e.flags().dnssec_ok,
                e.options()
            );
        }
        None => out.push_str("edns: none\n"),
    }
    out
}

/// A query message for a class other than IN.
pub(crate) fn query_class(name: &str, rtype: RecordType, class: DNSClass) -> Message {
    let mut message = Message::new(rand_id(), MessageType::Query, OpCode::Query);
    let mut q = Query::query(Name::from_ascii(name).expect("valid name"), rtype);
    q.set_query_class(class);
    message.add_query(q);
    message
}

fn rand_id() -> u16 {
    Message::query().metadata.id
}

/// `/explain` for `name` and `rtype`, parsed.
pub(crate) async fn explain(admin: SocketAddr, name: &str, rtype: &str) -> serde_json::Value {
    let body = support::http_ok(admin, &format!("/explain?name={name}&type={rtype}")).await;
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("/explain {name} {rtype}: {e}: {body}"))
}

/// The notes of an `/explain` answer, joined by newlines.
pub(crate) fn explain_notes(explanation: &serde_json::Value) -> String {
    explanation["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .map(|n| n.as_str().expect("a note is a string"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The value of an unlabelled metric in a Prometheus text exposition.
pub(crate) fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let mut parts = l.split_whitespace();
        (parts.next() == Some(name))
            .then(|| parts.next()?.parse().ok())
            .flatten()
    })
}

/// Reads one metric from the server's `/metrics`.
pub(crate) async fn read_metric(admin: SocketAddr, name: &str) -> f64 {
    let text = support::http_ok(admin, "/metrics").await;
    metric(&text, name).unwrap_or_else(|| panic!("metric {name} missing from:\n{text}"))
}

/// Sorted rendered answers of `name`/`rtype` over UDP.
pub(crate) async fn answers(server: SocketAddr, name: &str, rtype: RecordType) -> Vec<String> {
    sorted(
        &exchange(server, Transport::Udp, &query(name, rtype))
            .await
            .answers,
    )
}

/// A headless ServiceImport `<name>.<ns>` with one named TCP port.
pub(crate) fn headless_import(ns: &str, name: &str, port_name: &str, port: u16) -> String {
    format!(
        "apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {{name: {name}, namespace: {ns}}}
spec:
  type: Headless
  ports:
  - {{name: {port_name}, protocol: TCP, port: {port}}}
---
"
    )
}

/// An imported EndpointSlice of `<service>.<ns>` from `cluster` with the
/// given `(hostname, address, ready)` endpoints.
pub(crate) fn slice(
    ns: &str,
    service: &str,
    cluster: &str,
    family: &str,
    endpoints: &[(Option<String>, String, bool)],
) -> String {
    let mut out = format!(
        "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: imported-{service}-{cluster}-{family}
  namespace: {ns}
  labels:
    multicluster.kubernetes.io/service-name: {service}
    multicluster.kubernetes.io/source-cluster: {cluster}
addressType: {family}
endpoints:
",
        family = family
    );
    for (hostname, address, ready) in endpoints {
        let _ = write!(
            out,
            "- addresses: [\"{address}\"]\n  conditions: {{ready: {ready}}}\n"
        );
        if let Some(h) = hostname {
            let _ = writeln!(out, "  hostname: {h}");
        }
    }
    out.push_str("---\n");
    out
}

/// IPv4 address of endpoint `i` of a generated service (`10.<base>.x.y`).
pub(crate) fn v4(base: u8, i: usize) -> String {
    format!("10.{base}.{}.{}", i / 250, i % 250 + 1)
}

/// IPv6 address of endpoint `i` of a generated service.
pub(crate) fn v6(base: u8, i: usize) -> String {
    format!("fd00:{base}::{:x}", i + 1)
}

/// A headless service `<name>.<ns>` with `n` ready endpoints `h-<i>` in
/// `cluster-a`, IPv4 and optionally IPv6 (the same hostnames, so each
/// endpoint is dual-stack).
pub(crate) fn big_headless(ns: &str, name: &str, base: u8, n: usize, dual_stack: bool) -> String {
    let mut out = headless_import(ns, name, "http", 80);
    let host = |i: usize| Some(format!("h-{i:03}"));
    let ipv4: Vec<_> = (0..n).map(|i| (host(i), v4(base, i), true)).collect();
    out.push_str(&slice(ns, name, "cluster-a", "IPv4", &ipv4));
    if dual_stack {
        let ipv6: Vec<_> = (0..n).map(|i| (host(i), v6(base, i), true)).collect();
        out.push_str(&slice(ns, name, "cluster-a", "IPv6", &ipv6));
    }
    out
}

/// Runs `f` under a deadline, failing the test with `what` on timeout.
pub(crate) async fn within<T>(limit: Duration, what: &str, f: impl Future<Output = T>) -> T {
    timeout(limit, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {limit:?}"))
}

/// Endpoint conditions of [`local_first_clusterset`]: ready.
pub(crate) const READY: &str = "{ready: true, serving: true, terminating: false}";
/// Not ready and not serving (a failing readiness probe).
pub(crate) const NOT_READY: &str = "{ready: false, serving: false, terminating: false}";
/// Terminating but still serving (a pod in its grace period).
pub(crate) const TERMINATING: &str = "{ready: false, serving: true, terminating: true}";

/// The ClusterProperty that names this cluster `id`.
pub(crate) fn cluster_id_property(id: &str) -> String {
    format!(
        "apiVersion: about.k8s.io/v1beta1
kind: ClusterProperty
metadata: {{name: cluster.clusterset.k8s.io}}
spec: {{value: {id}}}
---
"
    )
}

/// A clusterset seen from one member (this cluster's id `cluster_id`, none
/// without the ClusterProperty): the local-first (`PreferClose`) headless
/// import `db.shop` (port `pg` 5432) exported from `cluster-a` (`db-0`
/// 10.1.0.10 and `db-1` 10.1.0.11, conditions `a`) and `cluster-b` (`db-0`
/// 10.2.0.10, conditions `b`), and the local-first ClusterSetIP import
/// `web.shop` (10.96.0.20) with one endpoint in each (conditions `a[0]`
/// and `b`).
pub(crate) fn local_first_clusterset(cluster_id: Option<&str>, a: [&str; 2], b: &str) -> String {
    let mut out = cluster_id.map(cluster_id_property).unwrap_or_default();
    out.push_str(
        "apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {name: db, namespace: shop}
spec:
  type: Headless
  trafficDistribution: PreferClose
  ports: [{name: pg, protocol: TCP, port: 5432}]
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {name: web, namespace: shop}
spec:
  type: ClusterSetIP
  trafficDistribution: PreferClose
  ips: [10.96.0.20]
  ports: [{name: http, protocol: TCP, port: 80}]
---
",
    );
    let slice = |service: &str, cluster: &str, endpoints: &[(Option<&str>, &str, &str)]| {
        let mut text = format!(
            "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: imported-{service}-{cluster}
  namespace: shop
  labels:
    multicluster.kubernetes.io/service-name: {service}
    multicluster.kubernetes.io/source-cluster: {cluster}
addressType: IPv4
endpoints:
"
        );
        for (hostname, address, conditions) in endpoints {
            let _ = writeln!(
                text,
                "- addresses: [\"{address}\"]\n  conditions: {conditions}"
            );
            if let Some(h) = hostname {
                let _ = writeln!(text, "  hostname: {h}");
            }
        }
        text.push_str("---\n");
        text
    };
    out.push_str(&slice(
        "db",
        "cluster-a",
        &[
            (Some("db-0"), "10.1.0.10", a[0]),
            (Some("db-1"), "10.1.0.11", a[1]),
        ],
    ));
    out.push_str(&slice("db", "cluster-b", &[(Some("db-0"), "10.2.0.10", b)]));
    out.push_str(&slice("web", "cluster-a", &[(None, "10.1.0.20", a[0])]));
    out.push_str(&slice("web", "cluster-b", &[(None, "10.2.0.20", b)]));
    out
}
