//! The handler of every query hickory decodes (TCP, UDP with the fast path
//! off, and the unusual UDP queries the fast path hands over): reads the
//! hickory request as a [`Query`] and renders its [`Plan`]. An answer from
//! the zone goes out as the fast path writes it ([`super::render`]: the
//! precompiled, fully compressed bytes after the echoed question); errors
//! without records go through hickory's `MessageResponse`. Every protocol
//! rule lives in [`super::plan`].

use std::borrow::Cow;
use std::sync::Arc;

use hickory_proto::op::{Edns, Metadata, Query as HickoryQuery, ResponseCode};
use hickory_proto::rr::{Name, Record, RecordType};
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder, NameEncoding};
use hickory_server::server::Request;
use hickory_server::zone_handler::MessageResponseBuilder;

use super::plan::{
    EdnsQuery, EdnsResponse, MAX_UDP_PAYLOAD, MIN_UDP_PAYLOAD, Plan, Query, Question, udp_limit,
};
use super::render::render;
use super::request::header_only;
use super::wire;
use crate::metrics::{Metrics, NetworkEvent, Transport};
use crate::publish::ZoneHandle;
use crate::zone::MAX_LABELS;

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

/// The hickory form of a plan's OPT record.
fn response_edns(plan: &EdnsResponse) -> Edns {
    let mut edns = Edns::new();
    edns.set_max_payload(MAX_UDP_PAYLOAD);
    edns.set_version(0);
    edns.set_dnssec_ok(plan.dnssec_ok);
    edns.set_rcode_high(plan.rcode_high);
    edns
}

/// Reads a hickory request as a [`Query`]; `lower` is the first question's
/// name lower-cased, and its labels go into `labels`.
fn read_query<'q>(
    request: &Request,
    lower: Option<&'q Name>,
    labels: &'q mut [&'q [u8]; MAX_LABELS],
) -> Query<'q> {
    let first = request.queries.queries().first();
    let question = first.zip(lower).map(|(q, name)| {
        let mut count = 0;
        for label in name.iter().take(MAX_LABELS) {
            labels[count] = label;
            count += 1;
        }
        Question {
            labels: &labels[..count],
            qtype: q.query_type(),
            qclass: u16::from(q.query_class()),
        }
    });
    Query {
        opcode: u8::from(request.metadata.op_code),
        question_count: request.queries.len() as u16,
        question,
        edns: request.edns.as_ref().map(|e| EdnsQuery {
            version: e.version(),
            payload: e.max_payload(),
            dnssec_ok: e.flags().dnssec_ok,
        }),
    }
}

impl Handler {
    /// The response to a query hickory decoded, arrived over `transport`.
    pub(crate) fn respond(&self, request: &Request, transport: Transport) -> Vec<u8> {
        let zone = self.zone.load();
        let lower = request
            .queries
            .queries()
            .first()
            .map(|q| q.name().to_lowercase());
        let mut labels: [&[u8]; MAX_LABELS] = [&[]; MAX_LABELS];
        let query = read_query(request, lower.as_ref(), &mut labels);
        let plan = Plan::new(zone.as_deref(), &query);
        let qtype = query.question.map_or(RecordType::Unknown(0), |q| q.qtype);
        self.metrics.count_response(transport, qtype, plan.outcome);

        // An answer from the zone (records, or the SOA of a negative
        // answer; always to exactly one question): the precompiled bytes,
        // exactly as the fast path writes them.
        let first = request.queries.queries().first();
        if let Some(first) = first.filter(|_| plan.answer.is_some() || plan.soa.is_some()) {
            let question = plain_question(request.queries.as_bytes(), first.original());
            let metadata = &request.metadata;
            let [id_high, id_low] = metadata.id.to_be_bytes();
            let head = [
                id_high,
                id_low,
                (u8::from(metadata.op_code) << 3) | u8::from(metadata.recursion_desired),
                u8::from(metadata.checking_disabled) << 4,
            ];
            let limit = match transport {
                Transport::Udp => Some(usize::from(udp_limit(query.edns.map(|e| e.payload)))),
                Transport::Tcp => None,
            };
            let fit = plan.fit(question.len(), limit);
            let mut out = vec![0; plan.response_len(question.len(), fit)];
            let (len, truncated) = render(&plan, head, &question, limit, &mut out);
            out.truncate(len);
            if truncated {
                self.metrics.truncated.inc();
            }
            if let Some(tier) = plan.tier(truncated) {
                self.metrics.count_tier(tier);
            }
            return out;
        }

        // Everything else is an error without records: hickory writes it.
        let edns = plan.edns.as_ref().map(response_edns);
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.response_code = plan.rcode;
        metadata.authoritative = plan.authoritative;
        let none: &[Record] = &[];
        let response = MessageResponseBuilder::new(&request.queries, edns.as_ref()).build(
            metadata,
            none.iter(),
            none.iter(),
            none.iter(),
            none.iter(),
        );
        let limit = match transport {
            Transport::Udp => edns.as_ref().map_or(MIN_UDP_PAYLOAD, |e| e.max_payload()),
            Transport::Tcp => u16::MAX,
        };
        let mut out = Vec::new();
        let mut encoder = BinEncoder::new(&mut out);
        encoder.set_max_size(limit);
        if let Err(error) = response.destructive_emit(&mut encoder) {
            // A query can ask for this (several long questions that do not
            // fit back into 512 bytes): keep what the query said and send
            // the error alone.
            if let Some(suppressed) = self.metrics.network_event(NetworkEvent::EncodeFailed) {
                tracing::warn!(%error, rcode = %metadata.response_code, suppressed, "a response did not encode within its size limit; sent its header alone");
            }
            if !matches!(
                metadata.response_code,
                ResponseCode::FormErr | ResponseCode::NotImp | ResponseCode::Refused
            ) {
                metadata.response_code = ResponseCode::ServFail;
            }
            metadata.authoritative = false;
            return header_only(metadata);
        }
        out
    }
}

/// The question as the query wrote it when that is plain labels (the
/// precompiled names point into it by offset), else `original` written
/// out in plain labels, letter case kept.
fn plain_question<'q>(raw: &'q [u8], original: &HickoryQuery) -> Cow<'q, [u8]> {
    if wire::plain_name_end(raw, 0, |_, _| {}).is_some_and(|end| raw.len() == end + 4) {
        return Cow::Borrowed(raw);
    }
    let mut bytes = Vec::with_capacity(raw.len() + 4);
    let mut encoder = BinEncoder::new(&mut bytes);
    encoder.set_name_encoding(NameEncoding::Uncompressed);
    // A name hickory decoded is valid, so it encodes.
    original
        .emit(&mut encoder)
        .expect("a decoded question encodes");
    Cow::Owned(bytes)
}
