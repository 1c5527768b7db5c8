//! One query message in, its response bytes out: the path every query
//! takes that the fast path does not answer (TCP, UDP with the fast path
//! off, unusual UDP queries). The same rules on every transport:
//!
//! - not a query (QR set, shorter than a header): no response at all;
//! - malformed ([`super::wire_check`], or hickory cannot decode it):
//!   FORMERR, the header only, with the query's ID, opcode, RD and CD;
//! - otherwise hickory decodes it and the [`Handler`] answers it.

use std::net::SocketAddr;
use std::sync::Arc;

use hickory_proto::op::{Header, HeaderCounts, MessageType, Metadata, ResponseCode};
use hickory_proto::rr::{Record, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder, BinEncodable, BinEncoder};
use hickory_server::net::NetError;
use hickory_server::net::runtime::TokioTime;
use hickory_server::net::xfer::Protocol;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponse;

use super::Handler;
use super::wire_check::{self, Verdict};
use crate::metrics::{Metrics, NetworkEvent, Outcome, Transport};

/// Answers one message that arrived over `protocol` from `src`; `None`
/// means send nothing.
pub(crate) async fn answer(
    handler: &Handler,
    message: &[u8],
    src: SocketAddr,
    protocol: Protocol,
) -> Option<Vec<u8>> {
    let metrics = handler.metrics();
    let transport = match protocol {
        Protocol::Udp => Transport::Udp,
        _ => Transport::Tcp,
    };
    match wire_check::check(message) {
        Verdict::NotAQuery => {
            not_a_query(metrics, message.len());
            return None;
        }
        Verdict::Malformed => return form_error(metrics, message, transport, "malformed"),
        Verdict::Query => {}
    }
    let request = match Request::from_bytes(message.to_vec(), src, protocol) {
        Ok(request) => request,
        Err(_) => return form_error(metrics, message, transport, "undecodable"),
    };
    let capture = Capture {
        out: Default::default(),
        udp: protocol == Protocol::Udp,
        metrics: metrics.clone(),
    };
    handler
        .handle_request::<_, TokioTime>(&request, capture.clone())
        .await;
    let bytes = std::mem::take(&mut *capture.out.lock().unwrap_or_else(|e| e.into_inner()));
    Some(bytes)
}

/// Counts a message that is not a query (it gets no response).
pub(crate) fn not_a_query(metrics: &Metrics, len: usize) {
    metrics.dropped.inc();
    if let Some(suppressed) = metrics.network_event(NetworkEvent::NotAQuery) {
        tracing::debug!(len, suppressed, "dropped a message that is not a query");
    }
}

/// FORMERR for a message whose header reads but whose body does not: the
/// header only (a question we could not read is not echoed), with the
/// query's ID, opcode, RD and CD.
fn form_error(
    metrics: &Metrics,
    message: &[u8],
    transport: Transport,
    why: &'static str,
) -> Option<Vec<u8>> {
    let header = Header::read(&mut BinDecoder::new(message)).ok()?;
    if let Some(suppressed) = metrics.network_event(NetworkEvent::Malformed) {
        tracing::debug!(why, suppressed, "malformed query answered FORMERR");
    }
    metrics.count_response(
        transport,
        RecordType::Unknown(0),
        Outcome::Code(ResponseCode::FormErr),
    );
    let mut metadata = Metadata::response_from_request(&header.metadata);
    metadata.response_code = ResponseCode::FormErr;
    Some(header_only(metadata))
}

/// A response of `metadata` and no sections.
fn header_only(metadata: Metadata) -> Vec<u8> {
    let header = Header {
        metadata,
        counts: HeaderCounts::default(),
    };
    let mut bytes = Vec::with_capacity(12);
    header
        .emit(&mut BinEncoder::new(&mut bytes))
        .expect("a header always encodes");
    bytes
}

/// A `ResponseHandler` that encodes into memory with hickory's size rules:
/// over UDP the response's OPT payload (our 1232) or 512 without EDNS,
/// over TCP 64 KiB.
#[derive(Clone)]
struct Capture {
    out: Arc<std::sync::Mutex<Vec<u8>>>,
    udp: bool,
    metrics: Arc<Metrics>,
}

#[async_trait::async_trait]
impl ResponseHandler for Capture {
    async fn send_response<'a>(
        &mut self,
        response: MessageResponse<
            '_,
            'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
        >,
    ) -> Result<ResponseInfo, NetError> {
        let mut metadata = *response.metadata();
        let limit = match self.udp {
            true => response.edns().map_or(512, |e| e.max_payload()),
            false => u16::MAX,
        };
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let mut encoder = BinEncoder::new(&mut out);
        encoder.set_max_size(limit);
        match response.destructive_emit(&mut encoder) {
            Ok(info) => Ok(info),
            Err(error) => {
                // A query can ask for this (several long questions that do
                // not fit back into 512 bytes): keep what the query said
                // and send the error alone.
                if let Some(suppressed) = self.metrics.network_event(NetworkEvent::EncodeFailed) {
                    tracing::warn!(%error, rcode = %metadata.response_code, suppressed, "a response did not encode within its size limit; sent its header alone");
                }
                if !matches!(
                    metadata.response_code,
                    ResponseCode::FormErr | ResponseCode::NotImp | ResponseCode::Refused
                ) {
                    metadata.response_code = ResponseCode::ServFail;
                }
                metadata.message_type = MessageType::Response;
                metadata.authoritative = false;
                metadata.truncation = false;
                *out = header_only(metadata);
                Ok(ResponseInfo::from(Header {
                    metadata,
                    counts: HeaderCounts::default(),
                }))
            }
        }
    }
}
