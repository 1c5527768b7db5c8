//! One query message in, its response bytes out: the path every query
//! takes that the fast path does not answer (TCP, UDP with the fast path
//! off, unusual UDP queries). The same rules on every transport:
//!
//! - not a query (QR set, shorter than a header): no response at all;
//! - malformed ([`super::wire_check`], or hickory cannot decode it):
//!   FORMERR, the header only, with the query's ID, opcode, RD and CD;
//! - otherwise hickory decodes it and the [`Handler`] answers it.

use std::net::SocketAddr;

use hickory_proto::op::{Header, HeaderCounts, Metadata, ResponseCode};
use hickory_proto::rr::RecordType;
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder, BinEncodable, BinEncoder};
use hickory_server::net::xfer::Protocol;
use hickory_server::server::Request;

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
    Some(handler.respond(&request, transport))
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
pub(super) fn header_only(metadata: Metadata) -> Vec<u8> {
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
