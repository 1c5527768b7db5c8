//! The response plan: every protocol rule of the server in one place.
//!
//! Both decoders (the UDP fast path's and hickory's) read a query into a
//! [`Query`]; [`Plan::new`] decides the whole response from it and the
//! published zone: the rcode, the AA flag, which precompiled sections go in,
//! whether an OPT record goes back and with which extended rcode and DO bit,
//! and, through [`Plan::fit`], what is dropped when the response does not
//! fit (additional records first, then the answers with TC set). The
//! writers only render the plan: [`super::render`] the answers both paths
//! send, the hickory handler its errors without records.
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

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

use super::wire::{CLASS_IN, HEADER_LEN, OPT_RECORD_LEN};
use crate::metrics::Outcome;
use crate::zone::{Lookup, RrSet, Tier, Zone};

/// The UDP payload size we advertise and never exceed (DNS Flag Day 2020).
pub const MAX_UDP_PAYLOAD: u16 = 1232;
/// The UDP size limit without EDNS (RFC 1035 §4.2.1).
pub const MIN_UDP_PAYLOAD: u16 = 512;

/// The largest UDP response for a query offering this EDNS payload size:
/// the offer clamped to 512..=1232 (below 512 counts as 512, RFC 6891
/// §6.2.5); 512 without EDNS (RFC 1035 §4.2.1).
pub fn udp_limit(offered_payload: Option<u16>) -> u16 {
    offered_payload.map_or(MIN_UDP_PAYLOAD, |offer| {
        offer.clamp(MIN_UDP_PAYLOAD, MAX_UDP_PAYLOAD)
    })
}

/// A query as a decoder read it.
#[derive(Debug, Clone, Copy)]
pub struct Query<'q> {
    /// The header's opcode (0 is QUERY).
    pub opcode: u8,
    /// The header's question count.
    pub question_count: u16,
    /// The first question, if there is one.
    pub question: Option<Question<'q>>,
    /// The OPT record, if the query has one.
    pub edns: Option<EdnsQuery>,
}

/// One question.
#[derive(Debug, Clone, Copy)]
pub struct Question<'q> {
    /// The name's labels, lower-case, leftmost first, no root label.
    pub labels: &'q [&'q [u8]],
    /// QTYPE.
    pub qtype: RecordType,
    /// QCLASS.
    pub qclass: u16,
}

/// What a query's OPT record asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EdnsQuery {
    /// EDNS version.
    pub version: u8,
    /// Offered UDP payload size.
    pub payload: u16,
    /// The DO bit (RFC 3225).
    pub dnssec_ok: bool,
}

/// The OPT record of a response: version 0, no options, our own payload
/// size ([`MAX_UDP_PAYLOAD`]: in a response the field is the responder's
/// size, RFC 6891 §6.2.3), the DO bit copied from the query (RFC 3225 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EdnsResponse {
    /// The DO bit.
    pub dnssec_ok: bool,
    /// The upper 8 bits of the 12-bit rcode (BADVERS is 16).
    pub rcode_high: u8,
}

/// What goes into the response when it does not fit, in the order things
/// are given up: the additional records are optional (RFC 2181 §9); an
/// answer section that does not fit goes out empty with TC, as Knot DNS
/// does (the client asks again over TCP and ignores a partial RRset anyway).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// Everything.
    Whole,
    /// The answers without the additional records.
    AnswersOnly,
    /// No records, TC set.
    Truncated,
}

impl Fit {
    /// The layouts in the order they are tried.
    pub const DROP_ORDER: [Self; 3] = [Self::Whole, Self::AnswersOnly, Self::Truncated];
}

/// The response to one query, decided; the writers render it.
#[derive(Debug, Clone, Copy)]
pub struct Plan<'z> {
    /// The response code (possibly extended: BADVERS).
    pub rcode: ResponseCode,
    /// The AA flag: set on every answer from the zone.
    pub authoritative: bool,
    /// The answer RRset, with its additional records.
    pub answer: Option<RrSet<'z>>,
    /// The zone whose SOA goes into the authority section (negative answers).
    pub soa: Option<&'z Zone>,
    /// The OPT record of the response; present when the query had one.
    pub edns: Option<EdnsResponse>,
    /// How the response counts in metrics.
    pub outcome: Outcome,
}

impl<'z> Plan<'z> {
    /// Decides the response to `query` from `zone` (`None` before the
    /// first load).
    pub fn new(zone: Option<&'z Zone>, query: &Query<'_>) -> Self {
        let mut plan = Self {
            rcode: ResponseCode::NoError,
            authoritative: false,
            answer: None,
            soa: None,
            edns: query.edns.map(|asked| EdnsResponse {
                dnssec_ok: asked.dnssec_ok,
                rcode_high: 0,
            }),
            outcome: Outcome::NoData,
        };
        let question = match query.question {
            _ if query.opcode != 0 => return plan.error(ResponseCode::NotImp),
            _ if query.edns.is_some_and(|e| e.version > 0) => {
                return plan.error(ResponseCode::BADVERS);
            }
            Some(question) if query.question_count == 1 => question,
            _ => return plan.error(ResponseCode::FormErr),
        };
        let Some(zone) = zone else {
            return plan.error(ResponseCode::ServFail);
        };
        let lookup = match question.qclass {
            CLASS_IN => zone.lookup(question.labels, question.qtype),
            _ => Lookup::NotInZone,
        };
        match lookup {
            Lookup::NotInZone => return plan.error(ResponseCode::Refused),
            Lookup::Found(rrset) => {
                plan.answer = Some(rrset);
                plan.outcome = Outcome::Answer;
            }
            Lookup::NoData => plan.soa = Some(zone),
            Lookup::NxDomain => {
                plan.soa = Some(zone);
                plan.rcode = ResponseCode::NXDomain;
                plan.outcome = Outcome::Code(ResponseCode::NXDomain);
            }
        }
        plan.authoritative = true;
        plan
    }

    /// The tier of the answer's records when they go out (`truncated`:
    /// they do not), for `clusterset_dns_local_first_answers_total`.
    #[inline]
    pub fn tier(&self, truncated: bool) -> Option<Tier> {
        self.answer
            .and_then(|rrset| rrset.tier)
            .filter(|_| !truncated)
    }

    fn error(mut self, rcode: ResponseCode) -> Self {
        self.rcode = rcode;
        self.outcome = Outcome::Code(rcode);
        if let Some(edns) = &mut self.edns {
            edns.rcode_high = rcode.high();
        }
        self
    }

    /// The size of the response as the fast path writes it (the
    /// precompiled sections verbatim) for a question of `question_len`
    /// bytes.
    pub fn response_len(&self, question_len: usize, fit: Fit) -> usize {
        let answer = self.answer.map_or(0, |rrset| match fit {
            Fit::Whole => rrset.wire.tail.len(),
            Fit::AnswersOnly => rrset.wire.answers_end,
            Fit::Truncated => 0,
        });
        let soa = self.soa.map_or(0, |zone| zone.soa_wire().len());
        let opt = if self.edns.is_some() {
            OPT_RECORD_LEN
        } else {
            0
        };
        HEADER_LEN + question_len + answer + soa + opt
    }

    /// The first layout in [`Fit::DROP_ORDER`] whose response fits `limit`
    /// bytes; `None` means no limit (TCP).
    pub fn fit(&self, question_len: usize, limit: Option<usize>) -> Fit {
        let Some(limit) = limit else {
            return Fit::Whole;
        };
        Fit::DROP_ORDER
            .into_iter()
            .find(|fit| self.response_len(question_len, *fit) <= limit)
            .unwrap_or(Fit::Truncated)
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::rr::Name;

    use super::*;
    use crate::zone::ZoneSettings;

    fn zone() -> Zone {
        Zone::new(ZoneSettings::new(
            Name::from_ascii("clusterset.local.").unwrap(),
        ))
    }

    fn query<'q>(labels: &'q [&'q [u8]], qtype: RecordType) -> Query<'q> {
        Query {
            opcode: 0,
            question_count: 1,
            question: Some(Question {
                labels,
                qtype,
                qclass: CLASS_IN,
            }),
            edns: None,
        }
    }

    const VERSION: [&[u8]; 3] = [b"dns-version", b"clusterset", b"local"];

    #[test]
    fn header_problems_come_first_in_a_fixed_order() {
        let zone = zone();
        let mut q = query(&VERSION, RecordType::TXT);
        q.opcode = 2;
        q.edns = Some(EdnsQuery {
            version: 1,
            payload: 1232,
            dnssec_ok: false,
        });
        q.question_count = 2;
        assert_eq!(Plan::new(Some(&zone), &q).rcode, ResponseCode::NotImp);
        q.opcode = 0;
        let badvers = Plan::new(Some(&zone), &q);
        assert_eq!(badvers.rcode, ResponseCode::BADVERS);
        assert_eq!(badvers.edns.unwrap().rcode_high, 1);
        q.edns = None;
        assert_eq!(Plan::new(Some(&zone), &q).rcode, ResponseCode::FormErr);
        q.question_count = 1;
        assert_eq!(Plan::new(None, &q).rcode, ResponseCode::ServFail);
        let found = Plan::new(Some(&zone), &q);
        assert!(found.authoritative && found.answer.is_some());
    }

    #[test]
    fn negative_answers_carry_the_soa_and_errors_do_not() {
        let zone = zone();
        let missing: [&[u8]; 3] = [b"nope", b"clusterset", b"local"];
        let nx = Plan::new(Some(&zone), &query(&missing, RecordType::A));
        assert_eq!(nx.rcode, ResponseCode::NXDomain);
        assert!(nx.soa.is_some() && nx.authoritative);
        let nodata = Plan::new(Some(&zone), &query(&VERSION, RecordType::A));
        assert_eq!(nodata.rcode, ResponseCode::NoError);
        assert!(nodata.soa.is_some() && nodata.answer.is_none());
        let outside: [&[u8]; 2] = [b"example", b"com"];
        let refused = Plan::new(Some(&zone), &query(&outside, RecordType::A));
        assert_eq!(refused.rcode, ResponseCode::Refused);
        assert!(refused.soa.is_none() && !refused.authoritative);
        let mut chaos = query(&VERSION, RecordType::TXT);
        chaos.question = chaos.question.map(|q| Question { qclass: 3, ..q });
        assert_eq!(Plan::new(Some(&zone), &chaos).rcode, ResponseCode::Refused);
    }

    #[test]
    fn additional_records_go_before_the_answers_do() {
        let zone = zone();
        let plan = Plan::new(Some(&zone), &query(&VERSION, RecordType::TXT));
        let whole = plan.response_len(30, Fit::Whole);
        assert_eq!(plan.fit(30, None), Fit::Whole);
        assert_eq!(plan.fit(30, Some(whole)), Fit::Whole);
        assert_eq!(plan.fit(30, Some(whole - 1)), Fit::Truncated);
        assert_eq!(plan.response_len(30, Fit::Truncated), HEADER_LEN + 30);
    }

    #[test]
    fn udp_limit_clamps_the_offer() {
        assert_eq!(udp_limit(None), 512);
        assert_eq!(udp_limit(Some(100)), 512);
        assert_eq!(udp_limit(Some(4096)), 1232);
        assert_eq!(udp_limit(Some(1000)), 1000);
    }
}
