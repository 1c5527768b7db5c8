//! The hickory `RequestHandler`: every query gets exactly one response, and
//! every outcome is a response code (RFC 1035, 2308, 6891):
//!
//! | case | response |
//! |---|---|
//! | opcode other than QUERY | NOTIMP |
//! | EDNS version above 0 | BADVERS |
//! | not exactly one question | FORMERR |
//! | no zone loaded yet | SERVFAIL |
//! | name outside the zone, class other than IN, zone transfer | REFUSED |
//! | unknown name | NXDOMAIN, SOA in authority |
//! | name without the asked type | NOERROR, no answer, SOA in authority |
//! | otherwise | NOERROR, AA, the RRset; SRV target addresses in additional when they fit; over UDP an RRset that does not fit goes out empty with TC |
//!
//! The server is never recursive: RA is never set.

use hickory_proto::op::{Edns, Header, HeaderCounts, Metadata, OpCode, ResponseCode};
use hickory_proto::rr::{DNSClass, Record, RecordType};
use hickory_proto::serialize::binary::BinEncoder;
use hickory_server::net::runtime::Time;
use hickory_server::net::xfer::Protocol;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::{MessageResponse, MessageResponseBuilder};
use std::sync::Arc;

use crate::metrics::{Metrics, Outcome, Transport};
use crate::publish::ZoneHandle;
use crate::zone::{Lookup, MAX_LABELS};

/// The UDP payload size we advertise and never exceed (DNS Flag Day 2020).
pub const MAX_UDP_PAYLOAD: u16 = 1232;
/// The UDP size limit without EDNS (RFC 1035 §4.2.1).
pub const MIN_UDP_PAYLOAD: u16 = 512;

/// Answers queries from the published zone.
#[derive(Debug, Clone)]
pub struct Handler {
    zone: ZoneHandle,
    metrics: Arc<Metrics>,
}

impl Handler {
    /// A handler reading from `zone`.
    pub fn new(zone: ZoneHandle, metrics: Arc<Metrics>) -> Self {
        Self { zone, metrics }
    }

    /// The metrics this handler counts into.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
}

/// The EDNS record of our response: version 0, no options, and our own
/// payload size, 1232 (in a response the field is the responder's size,
/// RFC 6891 §6.2.3). hickory would encode UDP responses up to it; the
/// handler keeps answers within [`udp_limit`] itself.
pub fn response_edns() -> Edns {
    let mut edns = Edns::new();
    edns.set_max_payload(MAX_UDP_PAYLOAD);
    edns.set_version(0);
    edns
}

/// The largest UDP response for a query offering this EDNS payload size:
/// the offer clamped to 512..=1232 (below 512 counts as 512, RFC 6891
/// §6.2.5); 512 without EDNS (RFC 1035 §4.2.1). Both UDP paths use it.
pub fn udp_limit(offered_payload: Option<u16>) -> u16 {
    offered_payload.map_or(MIN_UDP_PAYLOAD, |offer| {
        offer.clamp(MIN_UDP_PAYLOAD, MAX_UDP_PAYLOAD)
    })
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let transport = match request.protocol() {
            Protocol::Udp => Transport::Udp,
            _ => Transport::Tcp,
        };
        // RFC 3225 §3: the DO bit of the query is copied into the response.
        let mut edns = request.edns.as_ref().map(|asked| {
            let mut edns = response_edns();
            edns.set_dnssec_ok(asked.flags().dnssec_ok);
            edns
        });
        let mut metadata = Metadata::response_from_request(&request.metadata);
        let qtype = request
            .queries
            .queries()
            .first()
            .map_or(RecordType::Unknown(0), |q| q.query_type());

        let error = if request.metadata.op_code != OpCode::Query {
            Some(ResponseCode::NotImp)
        } else if request.edns.as_ref().is_some_and(|e| e.version() > 0) {
            Some(ResponseCode::BADVERS)
        } else if request.queries.len() != 1 {
            Some(ResponseCode::FormErr)
        } else {
            None
        };
        if let Some(code) = error {
            if let Some(e) = edns.as_mut() {
                e.set_rcode_high(code.high());
            }
            self.metrics
                .count_response(transport, qtype, Outcome::Code(code));
            let response = MessageResponseBuilder::new(&request.queries, edns.as_ref())
                .error_msg(&request.metadata, code);
            return send(&mut response_handle, response, &request.metadata).await;
        }

        let query = &request.queries.queries()[0];
        let zone = self.zone.load();
        let builder = MessageResponseBuilder::new(&request.queries, edns.as_ref());
        let Some(zone) = zone.as_ref() else {
            metadata.response_code = ResponseCode::ServFail;
            self.metrics
                .count_response(transport, qtype, Outcome::Code(ResponseCode::ServFail));
            return send(
                &mut response_handle,
                builder.build_no_records(metadata),
                &request.metadata,
            )
            .await;
        };

        let mut labels: [&[u8]; MAX_LABELS] = [&[]; MAX_LABELS];
        let mut count = 0;
        for label in query.name().iter().take(MAX_LABELS) {
            labels[count] = label;
            count += 1;
        }
        let lookup = match query.query_class() {
            DNSClass::IN => zone.lookup(&labels[..count], qtype),
            _ => Lookup::NotInZone,
        };
        let no_records: [Record; 0] = [];
        match lookup {
            Lookup::NotInZone => {
                metadata.response_code = ResponseCode::Refused;
                self.metrics
                    .count_response(transport, qtype, Outcome::Code(ResponseCode::Refused));
                send(
                    &mut response_handle,
                    builder.build_no_records(metadata),
                    &request.metadata,
                )
                .await
            }
            Lookup::Found(rrset) => {
                metadata.authoritative = true;
                let (answers, additionals) = rrset.decode(query.name());
                // Additional data is optional (RFC 2181 §9): drop it rather
                // than truncate when it would not fit; an answer section
                // that does not fit goes out empty with TC. Only answers
                // whose uncompressed size exceeds the limit need the trial
                // encode.
                let mut answers = &answers[..];
                let mut additionals = &additionals[..];
                if matches!(transport, Transport::Udp) {
                    let limit = udp_limit(request.edns.as_ref().map(Edns::max_payload));
                    let question_len = request.queries.as_bytes().len();
                    let fits = |answers, additionals| {
                        encodes_whole(
                            request,
                            edns.as_ref(),
                            metadata,
                            answers,
                            additionals,
                            limit,
                        )
                    };
                    if rrset
                        .wire
                        .uncompressed_response_len(question_len, edns.is_some())
                        > usize::from(limit)
                        && !fits(answers, additionals)
                    {
                        let answers_fit = !additionals.is_empty() && fits(answers, &[]);
                        additionals = &[];
                        // As on the fast path: no partial RRset, TC.
                        if !answers_fit {
                            answers = &[];
                            metadata.truncation = true;
                        }
                    }
                }
                self.metrics
                    .count_response(transport, qtype, Outcome::Answer);
                let response = builder.build(
                    metadata,
                    answers.iter(),
                    no_records.iter(),
                    no_records.iter(),
                    additionals.iter(),
                );
                let info = send(&mut response_handle, response, &request.metadata).await;
                if info.truncation {
                    self.metrics.truncated.inc();
                }
                info
            }
            Lookup::NoData | Lookup::NxDomain => {
                metadata.authoritative = true;
                let outcome = if matches!(lookup, Lookup::NxDomain) {
                    metadata.response_code = ResponseCode::NXDomain;
                    Outcome::Code(ResponseCode::NXDomain)
                } else {
                    Outcome::NoData
                };
                self.metrics.count_response(transport, qtype, outcome);
                let soa = std::slice::from_ref(zone.soa());
                let response = builder.build(
                    metadata,
                    no_records.iter(),
                    no_records.iter(),
                    soa.iter(),
                    no_records.iter(),
                );
                send(&mut response_handle, response, &request.metadata).await
            }
        }
    }
}

/// Whether hickory's encoder, limited to `limit` bytes, writes this answer
/// without leaving a record out. The exact test rather than a size estimate:
/// hickory writes each name's labels in full before it replaces them with a
/// compression pointer, so a record can fail to fit although its compressed
/// form would.
fn encodes_whole(
    request: &Request,
    edns: Option<&Edns>,
    metadata: Metadata,
    answers: &[Record],
    additionals: &[Record],
    limit: u16,
) -> bool {
    let none: [Record; 0] = [];
    let mut scratch = Vec::with_capacity(usize::from(limit));
    let mut encoder = BinEncoder::new(&mut scratch);
    encoder.set_max_size(limit);
    MessageResponseBuilder::new(&request.queries, edns)
        .build(
            metadata,
            answers.iter(),
            none.iter(),
            none.iter(),
            additionals.iter(),
        )
        .destructive_emit(&mut encoder)
        .is_ok_and(|info| !info.truncation)
}

async fn send<'a, R: ResponseHandler>(
    handle: &mut R,
    response: MessageResponse<
        '_,
        'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
    >,
    request: &Metadata,
) -> ResponseInfo {
    match handle.send_response(response).await {
        Ok(info) => info,
        Err(error) => {
            tracing::debug!(%error, "failed to send response");
            let mut metadata = Metadata::response_from_request(request);
            metadata.response_code = ResponseCode::ServFail;
            ResponseInfo::from(Header {
                metadata,
                counts: HeaderCounts::default(),
            })
        }
    }
}
