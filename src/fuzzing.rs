//! Entry points for the fuzz targets (`tests/fuzz/`) and the tier-1 replay
//! of their saved corpus (`tests/fuzz_corpus.rs`): each takes raw fuzzer
//! bytes, runs them through a real input path and panics if an invariant
//! breaks. Not part of the product API (hidden from the docs); public only
//! because the fuzz crate and the integration test are other crates, and
//! the paths they exercise (the UDP worker's per-datagram step, the
//! request path hickory serves) are crate-private.
//!
//! Invariants, for every input:
//! - DNS: no panic; a message shorter than a header or with QR set gets no
//!   response, every other one gets exactly one; a response decodes as a
//!   DNS message with the query's ID and opcode and QR set; over UDP it
//!   fits the 1232-byte payload we advertise, and 512 bytes when it
//!   carries no OPT record. Where the fast path answers, the hickory path
//!   answers the same query with the same RCODE and the same question.
//! - Manifest: no panic; [`crate::source::manifest::parse`] and
//!   [`crate::source::manifest::check`] agree on whether the text is
//!   accepted and on what it serves; a second parse through the document
//!   cache gives the same result; an accepted manifest builds a zone.
//!   An input holding a NUL character is two manifests, the file before
//!   and after a reload: [`manifest::Parser::parse_update`] on each in
//!   turn leaves the index holding exactly what a whole parse of the
//!   accepted text serves, and rejects what the whole parse rejects.
//!   Memory stays bounded by the parse budget; the fuzzer enforces a
//!   ceiling on it (`scripts/fuzz.sh`).

use std::net::SocketAddr;
use std::sync::Arc;

use hickory_proto::op::{Message, MessageType};
use hickory_proto::rr::Name;
use hickory_server::net::xfer::Protocol;

use crate::dns::Handler;
use crate::dns::fast_path::{self, Fast, MAX_RESPONSE};
use crate::dns::{request, udp};
use crate::index::Index;
use crate::metrics::Metrics;
use crate::publish::ZoneHandle;
use crate::source::manifest;
use crate::zone::{Zone, ZoneSettings};

/// The example clusterset of `config/`: what the DNS targets answer from.
pub const EXAMPLE: &str = include_str!("../config/example-clusterset.yaml");

/// The sender every fuzzed datagram comes from.
const SOURCE: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 5300);

/// A published zone and the handler serving it: the example clusterset
/// plus a headless service of 200 dual-stack endpoints, so that answers
/// reach the UDP size limit (truncation, dropped additionals).
#[derive(Debug, Clone)]
pub struct Dns {
    zone: Arc<Zone>,
    handler: Handler,
}

impl Default for Dns {
    fn default() -> Self {
        Self::new()
    }
}

impl Dns {
    /// Builds the zone (once per fuzzing process: it takes milliseconds).
    pub fn new() -> Self {
        let mut text = EXAMPLE.to_owned();
        text.push_str(&big_headless("wide", 200));
        let zone = Arc::new(zone_of(&text).expect("the example clusterset parses"));
        let handle = ZoneHandle::new();
        handle.store((*zone).clone());
        let handler = Handler::new(handle, Arc::new(Metrics::new()));
        Self { zone, handler }
    }

    /// One UDP datagram through the worker's per-datagram step, with the
    /// fast path on (as served by default), checking the invariants.
    pub fn udp_fast_path(&self, datagram: &[u8]) {
        let mut out = [0u8; MAX_RESPONSE];
        let len = udp::answer_datagram(
            &self.handler,
            Some(&self.zone),
            true,
            datagram,
            || Some(SOURCE),
            &mut out,
        );
        let response = check_response(datagram, len.map(|l| &out[..l]), true);
        // Where the fast path itself answered, the hickory path must agree.
        let mut fast = [0u8; MAX_RESPONSE];
        if let Fast::Reply { .. } = fast_path::answer(&self.zone, datagram, &mut fast) {
            let mut slow = [0u8; MAX_RESPONSE];
            let slow_len = udp::slow_path(&self.handler, datagram, SOURCE, &mut slow)
                .expect("the hickory path answers what the fast path answers");
            let hickory =
                check_response(datagram, Some(&slow[..slow_len]), true).expect("checked above");
            let fast = response.expect("the fast path replied");
            assert_eq!(
                fast.metadata.response_code, hickory.metadata.response_code,
                "the fast path and the hickory path disagree on the RCODE"
            );
            assert_eq!(
                fast.queries, hickory.queries,
                "the fast path and the hickory path echo different questions"
            );
        }
    }

    /// One message through the hickory path, as a UDP datagram with the
    /// fast path off (`--fast-path false`) and as a TCP message, checking
    /// the invariants.
    pub fn hickory_path(&self, message: &[u8]) {
        let mut out = [0u8; MAX_RESPONSE];
        let len = udp::answer_datagram(
            &self.handler,
            Some(&self.zone),
            false,
            message,
            || Some(SOURCE),
            &mut out,
        );
        check_response(message, len.map(|l| &out[..l]), true);
        let tcp = futures::executor::block_on(request::answer(
            &self.handler,
            message,
            SOURCE,
            Protocol::Tcp,
        ));
        check_response(message, tcp.as_deref(), false);
    }
}

/// Checks one response (or its absence) to `query`; returns it decoded.
fn check_response(query: &[u8], response: Option<&[u8]>, udp: bool) -> Option<Message> {
    let is_query = query.len() >= 12 && query[2] & 0x80 == 0;
    let Some(bytes) = response else {
        assert!(!is_query, "a query got no response");
        return None;
    };
    assert!(is_query, "answered something that is not a query");
    let message = match Message::from_vec(bytes) {
        Ok(message) => message,
        Err(error) => panic!("the response does not decode ({error}): {bytes:02x?}"),
    };
    let id = u16::from_be_bytes([query[0], query[1]]);
    let opcode = (query[2] >> 3) & 0x0f;
    assert_eq!(message.metadata.id, id, "the response's ID");
    assert_eq!(
        message.metadata.message_type,
        MessageType::Response,
        "QR in the response"
    );
    assert_eq!(
        u8::from(message.metadata.op_code),
        opcode,
        "the response's opcode"
    );
    if udp {
        assert!(
            bytes.len() <= MAX_RESPONSE,
            "{} bytes over UDP",
            bytes.len()
        );
        assert!(
            message.edns.is_some() || bytes.len() <= 512,
            "{} bytes over UDP without EDNS",
            bytes.len()
        );
    } else {
        assert!(
            bytes.len() <= usize::from(u16::MAX),
            "{} bytes",
            bytes.len()
        );
    }
    Some(message)
}

/// One manifest through the parser, checking the invariants. Bytes that
/// are not UTF-8 are refused before the parser (`src/source/file.rs`).
pub fn manifest(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    // A NUL is refused by the YAML parser anyway, so it can mark a reload.
    if let Some((before, after)) = text.split_once('\0') {
        return manifest_reload(before, after);
    }
    let mut parser = manifest::Parser::default();
    let parsed = parser.parse(text);
    let report = manifest::check(text);
    match &parsed {
        Ok(manifest) => {
            assert!(
                report.rejected.is_empty(),
                "parse accepted what check rejects: {:?}",
                report.rejected
            );
            assert_eq!(
                summary(manifest),
                summary(&report.manifest),
                "parse and check serve different objects"
            );
            let again = parser
                .parse(text)
                .expect("the cached parse accepts it again");
            assert_eq!(
                summary(manifest),
                summary(&again),
                "the cached parse differs"
            );
            let mut index = Index::new(ZoneSettings::new(
                Name::from_ascii("clusterset.local.").unwrap(),
            ));
            index.reset_imports(manifest.imports.clone());
            index.reset_slices(manifest.slices.clone());
            index.publish();
        }
        Err(error) => assert!(
            !report.rejected.is_empty(),
            "check accepted what parse rejects ({error})"
        ),
    }
}

/// A file read, then read again after it changed: the index fed the
/// updates (deltas where the parser can) must hold what a whole parse of
/// the last accepted text serves.
fn manifest_reload(before: &str, after: &str) {
    let mut parser = manifest::Parser::default();
    let mut index = Index::new(ZoneSettings::new(
        Name::from_ascii("clusterset.local.").unwrap(),
    ));
    for text in [before, after] {
        let whole = manifest::parse(text);
        let update = match parser.parse_update(text) {
            Ok(update) => update,
            Err(error) => {
                assert!(
                    whole.is_err(),
                    "parse accepts what the update rejects ({error})"
                );
                continue;
            }
        };
        update.apply_to(&mut index);
        let whole = whole.expect("parse accepts what the update accepts");
        assert_eq!(
            index.import_count(),
            whole.imports.len(),
            "imports after an update"
        );
        assert_eq!(
            index.slice_count(),
            whole.slices.len(),
            "slices after an update"
        );
        for import in &whole.imports {
            assert_eq!(
                index.import(&import.service),
                Some(import),
                "an updated import"
            );
        }
        for (key, slice) in &whole.slices {
            assert_eq!(index.slice(key), Some(slice), "an updated slice");
        }
    }
    index.publish();
}

/// What a manifest serves, in a comparable form.
fn summary(manifest: &manifest::Manifest) -> (Vec<String>, Vec<String>) {
    let mut imports: Vec<String> = manifest.imports.iter().map(|i| format!("{i:?}")).collect();
    let mut slices: Vec<String> = manifest.slices.iter().map(|s| format!("{s:?}")).collect();
    imports.sort();
    slices.sort();
    (imports, slices)
}

/// The zone a manifest serves.
fn zone_of(text: &str) -> Result<Zone, manifest::ManifestError> {
    let parsed = manifest::parse(text)?;
    let mut index = Index::new(ZoneSettings::new(
        Name::from_ascii("clusterset.local.").expect("a valid name"),
    ));
    index.reset_imports(parsed.imports);
    index.reset_slices(parsed.slices);
    Ok(index.publish().0)
}

/// A dual-stack headless service in `shop` with `count` named endpoints.
fn big_headless(name: &str, count: usize) -> String {
    let mut out = format!(
        "---\napiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceImport\nmetadata: {{name: {name}, namespace: shop}}\nspec: {{type: Headless, ports: [{{name: http, port: 80, protocol: TCP}}]}}\n"
    );
    for (family, prefix) in [("IPv4", "10.77.0."), ("IPv6", "fd77::")] {
        out.push_str(&format!(
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}-{family}\n  namespace: shop\n  labels: {{multicluster.kubernetes.io/service-name: {name}, multicluster.kubernetes.io/source-cluster: cluster-a}}\naddressType: {family}\nports: [{{name: http, port: 80, protocol: TCP}}]\nendpoints:\n"
        ));
        for i in 0..count {
            out.push_str(&format!(
                "- addresses: [\"{prefix}{}\"]\n  hostname: h-{i}\n",
                i + 1
            ));
        }
    }
    out
}
