//! The hickory `RequestHandler`: renders the [`Plan`] of every query hickory
//! decodes (TCP, UDP with the fast path off, and the unusual UDP queries
//! the fast path hands over) as a hickory `MessageResponse`. Every
//! protocol rule lives in [`super::plan`]; this module only reads the
//! query and writes the plan's records.

use hickory_proto::op::{Edns, Header, HeaderCounts, Metadata, ResponseCode};
use hickory_proto::rr::{Name, Record, RecordType};
use hickory_proto::serialize::binary::BinEncoder;
use hickory_server::net::runtime::Time;
use hickory_server::net::xfer::Protocol;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use std::sync::Arc;

use super::plan::{
    EdnsQuery, EdnsResponse, Fit, MAX_UDP_PAYLOAD, Plan, Query, Question, udp_limit,
};
use crate::metrics::{Metrics, Transport};
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

        let edns = plan.edns.as_ref().map(response_edns);
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.response_code = plan.rcode;
        metadata.authoritative = plan.authoritative;
        let builder = MessageResponseBuilder::new(&request.queries, edns.as_ref());

        let no_records: &[Record] = &[];
        let records = match (plan.answer, lower.as_ref()) {
            (Some(rrset), Some(owner)) => match rrset.records(owner) {
                Some(records) => Some(records),
                None => {
                    metadata.response_code = ResponseCode::ServFail;
                    metadata.authoritative = false;
                    None
                }
            },
            _ => None,
        };
        let (mut answers, mut additionals) = records.map_or((no_records, no_records), |r| {
            (&r.answers[..], &r.additionals[..])
        });
        let udp_answer = plan.answer.filter(|_| records.is_some());
        if let (Transport::Udp, Some(rrset)) = (transport, udp_answer) {
            let limit = udp_limit(query.edns.map(|e| e.payload));
            let question_len = request.queries.as_bytes().len();
            // The plan's choice on the precompiled sizes, then a step further
            // down the drop order while hickory's own encoding, which
            // compresses less, does not fit. Only answers whose uncompressed
            // size exceeds the limit need the trial encode.
            let start = plan.fit(question_len, Some(usize::from(limit)));
            let layouts = Fit::DROP_ORDER.into_iter().skip_while(|f| *f != start);
            for fit in layouts {
                (answers, additionals) = match fit {
                    Fit::Whole => (answers, additionals),
                    Fit::AnswersOnly => (answers, no_records),
                    Fit::Truncated => (no_records, no_records),
                };
                if fit == Fit::Truncated {
                    metadata.truncation = true;
                    break;
                }
                let bound = rrset
                    .wire
                    .uncompressed_response_len(question_len, edns.is_some());
                if bound <= usize::from(limit)
                    || encodes_whole(
                        request,
                        edns.as_ref(),
                        metadata,
                        answers,
                        additionals,
                        limit,
                    )
                {
                    break;
                }
            }
        }
        let soa = plan
            .soa
            .map_or(no_records, |zone| std::slice::from_ref(zone.soa()));
        let response = builder.build(
            metadata,
            answers.iter(),
            no_records.iter(),
            soa.iter(),
            additionals.iter(),
        );
        let info = match response_handle.send_response(response).await {
            Ok(info) => info,
            Err(error) => {
                tracing::debug!(%error, "failed to send response");
                let mut metadata = Metadata::response_from_request(&request.metadata);
                metadata.response_code = ResponseCode::ServFail;
                ResponseInfo::from(Header {
                    metadata,
                    counts: HeaderCounts::default(),
                })
            }
        };
        if info.truncation {
            self.metrics.truncated.inc();
        }
        info
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
