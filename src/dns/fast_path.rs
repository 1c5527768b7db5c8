//! The UDP fast path's query decoder: a zero-allocation answer for the
//! common query (one question in plain labels, optional EDNS0 OPT record),
//! its [`Plan`] written by [`super::render`] from the zone's precompiled
//! wire data, as the hickory handler writes every answer that carries zone
//! records.
//!
//! Anything unusual — another opcode, EDNS version above 0, compressed or
//! malformed questions, another class, zone transfers, no zone yet —
//! returns [`Fast::Slow`] and goes through the hickory handler, which
//! renders the same plan. `tests/fast_path.rs` compares the two paths byte
//! by byte.

use hickory_proto::rr::RecordType;

use super::plan::{EdnsQuery, MAX_UDP_PAYLOAD, Plan, Query, Question, udp_limit};
use super::render::render;
use super::wire::{self, CLASS_IN, HEADER_LEN, OPT_RECORD_LEN};
use super::wire_check;
use crate::metrics::Outcome;
use crate::zone::{MAX_LABELS, Tier, Zone};

/// Largest response the fast path writes.
pub const MAX_RESPONSE: usize = MAX_UDP_PAYLOAD as usize;

/// What the fast path did with a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fast {
    /// A response of this many bytes is in the output buffer.
    Reply {
        /// Response length.
        len: usize,
        /// Whether TC is set: the answer needs TCP.
        truncated: bool,
        /// Query type, for metrics.
        qtype: RecordType,
        /// Outcome, for metrics.
        outcome: Outcome,
        /// The tier of the answer's records, when it has one and they
        /// went out (not truncated), for metrics.
        tier: Option<Tier>,
    },
    /// Hand the datagram to the hickory handler.
    Slow,
    /// Not a query (too short, or QR set): send nothing.
    Drop,
}

/// Tries to answer `query` from `zone` into `out`.
pub fn answer(zone: &Zone, query: &[u8], out: &mut [u8; MAX_RESPONSE]) -> Fast {
    if !wire::is_query(query) {
        return Fast::Drop;
    }
    let opcode = wire::opcode(query);
    let [questions, answers, authorities, additionals] = wire::counts(query);
    if opcode != 0 || questions != 1 || answers != 0 || authorities != 0 || additionals > 1 {
        return Fast::Slow;
    }

    // Question: plain labels only (no compression in a question we accept),
    // lower-cased into a stack buffer for the lookup.
    let mut lower = [0u8; 256];
    let mut starts = [0usize; MAX_LABELS];
    let mut lens = [0usize; MAX_LABELS];
    let mut labels = 0;
    let name_end = wire::plain_name_end(query, HEADER_LEN, |at, len| {
        // A name of at most 255 bytes has at most MAX_LABELS labels.
        let offset = at - HEADER_LEN;
        for (dst, src) in lower[offset..offset + len]
            .iter_mut()
            .zip(&query[at..at + len])
        {
            *dst = src.to_ascii_lowercase();
        }
        starts[labels] = offset;
        lens[labels] = len;
        labels += 1;
    });
    let Some(at) = name_end else {
        return Fast::Slow;
    };
    let Some(fixed) = query.get(at..at + 4) else {
        return Fast::Slow;
    };
    let qtype = u16::from_be_bytes([fixed[0], fixed[1]]);
    let qclass = u16::from_be_bytes([fixed[2], fixed[3]]);
    let question_end = at + 4;
    let rtype = RecordType::from(qtype);
    if qclass != CLASS_IN || matches!(rtype, RecordType::AXFR | RecordType::IXFR | RecordType::OPT)
    {
        return Fast::Slow;
    }

    // Optional OPT record: root owner, version 0; options are ignored once
    // they are well-formed, as the hickory handler ignores them.
    let edns = if additionals == 1 {
        let Some(opt) = wire::read_opt(&query[question_end..]).filter(|opt| opt.version == 0)
        else {
            return Fast::Slow;
        };
        // Broken options and trailing bytes: the slow path answers FORMERR.
        let options = &query[question_end + OPT_RECORD_LEN..];
        if options.len() != opt.rdata_len || !wire_check::options_well_formed(options) {
            return Fast::Slow;
        }
        Some(EdnsQuery {
            version: opt.version,
            payload: opt.payload,
            dnssec_ok: opt.dnssec_ok,
        })
    } else if query.len() != question_end {
        return Fast::Slow;
    } else {
        None
    };

    let mut label_refs: [&[u8]; MAX_LABELS] = [&[]; MAX_LABELS];
    for i in 0..labels {
        label_refs[i] = &lower[starts[i]..starts[i] + lens[i]];
    }
    let asked = Query {
        opcode,
        question_count: 1,
        question: Some(Question {
            labels: &label_refs[..labels],
            qtype: rtype,
            qclass,
        }),
        edns,
    };
    let plan = Plan::new(Some(zone), &asked);
    let limit = usize::from(udp_limit(edns.map(|e| e.payload)));
    let head = [query[0], query[1], query[2], query[3]];
    let question = &query[HEADER_LEN..question_end];
    let (len, truncated) = render(&plan, head, question, Some(limit), out);
    Fast::Reply {
        len,
        truncated,
        qtype: rtype,
        outcome: plan.outcome,
        tier: plan.tier(truncated),
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{Edns, Message, Query};
    use hickory_proto::rr::Name;

    use super::*;
    use crate::index::Index;
    use crate::zone::ZoneSettings;

    fn example_zone() -> Zone {
        let text = include_str!("../../config/example-clusterset.yaml");
        let manifest = crate::source::manifest::parse(text).expect("the example parses");
        let mut index = Index::new(ZoneSettings::new(
            Name::from_ascii("clusterset.local.").unwrap(),
        ));
        index.reset_imports(manifest.imports);
        index.reset_slices(manifest.slices);
        index.publish().0
    }

    fn query_bytes(name: &str, rtype: RecordType, edns: bool) -> Vec<u8> {
        let mut message = Message::query();
        message.add_query(Query::query(Name::from_ascii(name).unwrap(), rtype));
        if edns {
            message.set_edns(Edns::new());
        }
        message.to_vec().unwrap()
    }

    /// Random damage to real queries (flipped, dropped, inserted and
    /// truncated bytes): the decoder never panics or reads out of bounds, and
    /// whatever it answers is a well-formed DNS message with the query's ID.
    #[test]
    fn damaged_queries_never_panic_and_replies_parse() {
        let zone = example_zone();
        let seeds = [
            query_bytes("web.shop.svc.clusterset.local.", RecordType::A, false),
            query_bytes(
                "_http._tcp.web.shop.svc.clusterset.local.",
                RecordType::SRV,
                true,
            ),
            query_bytes(
                "db-0.cluster-east.db.shop.svc.clusterset.local.",
                RecordType::AAAA,
                true,
            ),
            query_bytes("nope.shop.svc.clusterset.local.", RecordType::TXT, false),
            query_bytes("example.com.", RecordType::A, true),
        ];
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n.max(1) as u64) as usize
        };
        let mut out = [0u8; MAX_RESPONSE];
        let mut replies = 0;
        for round in 0..20_000 {
            let mut bytes = seeds[round % seeds.len()].clone();
            for _ in 0..1 + next(3) {
                let at = next(bytes.len());
                match next(4) {
                    0 => bytes[at] ^= 1 << next(8),
                    1 => bytes[at] = next(256) as u8,
                    2 => bytes.insert(at, next(256) as u8),
                    _ => bytes.truncate(at.max(1)),
                }
            }
            if let Fast::Reply { len, .. } = answer(&zone, &bytes, &mut out) {
                let reply = Message::from_vec(&out[..len])
                    .unwrap_or_else(|e| panic!("reply to {bytes:?} does not parse: {e}"));
                assert_eq!(reply.metadata.id, u16::from_be_bytes([bytes[0], bytes[1]]));
                replies += 1;
            }
        }
        assert!(
            replies > 1000,
            "only {replies} damaged queries were answered"
        );
    }
}
