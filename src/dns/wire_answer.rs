//! The UDP fast path's query decoder and response writer: a zero-allocation
//! answer for the common query (one question, class IN, optional EDNS0
//! version 0) built from the zone's precompiled wire data.
//!
//! Anything unusual — another opcode, EDNS version above 0, compressed or
//! malformed questions, no zone yet — returns
//! [`Fast::Slow`] and goes through the hickory handler instead. Both paths
//! give the same answers except within about 40 bytes of the UDP limit,
//! where hickory's encoder needs more room and so drops glue or sets TC
//! sooner (`docs/dns.md`, "The two UDP paths"); the tests in
//! `tests/fast_path.rs` compare them query by query.

use hickory_proto::rr::RecordType;

use super::handler::{MAX_UDP_PAYLOAD, MIN_UDP_PAYLOAD, udp_limit};
use crate::metrics::Outcome;
use crate::zone::wire::{HEADER_LEN, OPT_RECORD_LEN};
use crate::zone::{Lookup, MAX_LABELS, Zone};

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
    },
    /// Hand the datagram to the hickory handler.
    Slow,
    /// Not a query (too short, or QR set): send nothing.
    Drop,
}

const TYPE_OPT: u16 = 41;
const CLASS_IN: u16 = 1;
/// The DO flag in the high byte of an OPT record's flags (RFC 3225).
const DO_BIT: u8 = 0x80;

/// Tries to answer `query` from `zone` into `out`.
pub fn answer(zone: &Zone, query: &[u8], out: &mut [u8; MAX_RESPONSE]) -> Fast {
    if query.len() < HEADER_LEN || query[2] & 0x80 != 0 {
        return Fast::Drop;
    }
    let opcode = (query[2] >> 3) & 0x0f;
    let count = |i: usize| u16::from_be_bytes([query[i], query[i + 1]]);
    if opcode != 0 || count(4) != 1 || count(6) != 0 || count(8) != 0 || count(10) > 1 {
        return Fast::Slow;
    }

    // Question: plain labels only (no compression in a question we accept),
    // lower-cased into a stack buffer for the lookup.
    let mut lower = [0u8; 256];
    let mut starts = [0usize; MAX_LABELS];
    let mut lens = [0usize; MAX_LABELS];
    let mut labels = 0;
    let mut at = HEADER_LEN;
    loop {
        let Some(&len) = query.get(at) else {
            return Fast::Slow;
        };
        let len = len as usize;
        if len == 0 {
            at += 1;
            break;
        }
        if len > 63
            || labels == MAX_LABELS
            || at + 1 + len > query.len()
            || at - HEADER_LEN + 1 + len > 254
        {
            return Fast::Slow;
        }
        let offset = at + 1 - HEADER_LEN;
        for (dst, src) in lower[offset..offset + len]
            .iter_mut()
            .zip(&query[at + 1..at + 1 + len])
        {
            *dst = src.to_ascii_lowercase();
        }
        starts[labels] = offset;
        lens[labels] = len;
        labels += 1;
        at += 1 + len;
    }
    let Some(fixed) = query.get(at..at + 4) else {
        return Fast::Slow;
    };
    let qtype = u16::from_be_bytes([fixed[0], fixed[1]]);
    let qclass = u16::from_be_bytes([fixed[2], fixed[3]]);
    let question_end = at + 4;
    if qclass != CLASS_IN {
        return Fast::Slow;
    }
    let rtype = RecordType::from(qtype);
    if matches!(rtype, RecordType::AXFR | RecordType::IXFR | RecordType::OPT) {
        return Fast::Slow;
    }

    // Optional OPT record: root owner, version 0; options are ignored, as the
    // hickory handler ignores them.
    let mut limit = MIN_UDP_PAYLOAD;
    let edns = count(10) == 1;
    let mut dnssec_ok = false;
    if edns {
        let opt = &query[question_end..];
        if opt.len() < OPT_RECORD_LEN
            || opt[0] != 0
            || u16::from_be_bytes([opt[1], opt[2]]) != TYPE_OPT
            || opt[6] != 0
        {
            return Fast::Slow;
        }
        let rdlen = u16::from_be_bytes([opt[9], opt[10]]) as usize;
        if opt.len() != OPT_RECORD_LEN + rdlen {
            return Fast::Slow;
        }
        limit = udp_limit(Some(u16::from_be_bytes([opt[3], opt[4]])));
        dnssec_ok = opt[7] & DO_BIT != 0;
    } else if query.len() != question_end {
        return Fast::Slow;
    }
    let limit = limit as usize;

    let mut label_refs: [&[u8]; MAX_LABELS] = [&[]; MAX_LABELS];
    for i in 0..labels {
        label_refs[i] = &lower[starts[i]..starts[i] + lens[i]];
    }
    let question = &query[HEADER_LEN..question_end];
    let lookup = zone.lookup(&label_refs[..labels], rtype);

    let header = |out: &mut [u8; MAX_RESPONSE], aa: bool, rcode: u8, an: u16, ns: u16, ar: u16| {
        out[0] = query[0];
        out[1] = query[1];
        out[2] = 0x80 | if aa { 0x04 } else { 0 } | (query[2] & 0x01);
        out[3] = (query[3] & 0x10) | rcode;
        out[4..6].copy_from_slice(&1u16.to_be_bytes());
        out[6..8].copy_from_slice(&an.to_be_bytes());
        out[8..10].copy_from_slice(&ns.to_be_bytes());
        out[10..12].copy_from_slice(&(ar + u16::from(edns)).to_be_bytes());
        out[HEADER_LEN..question_end].copy_from_slice(question);
    };
    let finish = |out: &mut [u8; MAX_RESPONSE], mut len: usize| {
        if edns {
            out[len..len + OPT_RECORD_LEN].copy_from_slice(&opt_record(MAX_UDP_PAYLOAD, dnssec_ok));
            len += OPT_RECORD_LEN;
        }
        len
    };

    let mut truncated = false;
    let (len, outcome) = match lookup {
        Lookup::Found(rrset) => {
            let wire = &rrset.wire;
            // Additional data is optional (RFC 2181 §9): drop it before
            // truncating. An answer section that does not fit goes out
            // empty with TC, as Knot DNS does: the client asks again over
            // TCP and ignores a partial RRset anyway.
            let (body, an, ar) = if wire.response_len(question.len(), true, edns) <= limit {
                (&wire.tail[..], wire.answer_count, wire.additional_count)
            } else if wire.response_len(question.len(), false, edns) <= limit {
                (&wire.tail[..wire.answers_end], wire.answer_count, 0)
            } else {
                truncated = true;
                (&[][..], 0, 0)
            };
            header(out, true, 0, an, 0, ar);
            if truncated {
                out[2] |= 0x02;
            }
            out[question_end..question_end + body.len()].copy_from_slice(body);
            (finish(out, question_end + body.len()), Outcome::Answer)
        }
        Lookup::NoData | Lookup::NxDomain => {
            let nx = matches!(lookup, Lookup::NxDomain);
            header(out, true, if nx { 3 } else { 0 }, 0, 1, 0);
            // The zone apex inside the question, for compression pointers.
            let zone_labels = zone.settings().origin.num_labels() as usize;
            let apex = HEADER_LEN + starts[labels - zone_labels] - 1;
            let len = write_soa(zone, apex as u16, &mut out[question_end..]);
            let outcome = if nx {
                Outcome::Code(hickory_proto::op::ResponseCode::NXDomain)
            } else {
                Outcome::NoData
            };
            (finish(out, question_end + len), outcome)
        }
        Lookup::NotInZone => {
            header(out, false, 5, 0, 0, 0);
            (
                finish(out, question_end),
                Outcome::Code(hickory_proto::op::ResponseCode::Refused),
            )
        }
    };
    Fast::Reply {
        len,
        truncated,
        qtype: rtype,
        outcome,
    }
}

/// Our OPT record: root owner, our payload size, extended rcode 0, version
/// 0, the DO bit as asked (RFC 3225 §3), no options.
fn opt_record(payload: u16, dnssec_ok: bool) -> [u8; OPT_RECORD_LEN] {
    let p = payload.to_be_bytes();
    let flags = if dnssec_ok { DO_BIT } else { 0 };
    [0, 0, TYPE_OPT as u8, p[0], p[1], 0, 0, flags, 0, 0, 0]
}

/// Writes the zone's SOA record with names compressed against the apex at
/// offset `apex`, exactly as hickory's encoder does; returns its length.
fn write_soa(zone: &Zone, apex: u16, out: &mut [u8]) -> usize {
    use hickory_proto::rr::RData;
    let soa = zone.soa();
    let RData::SOA(data) = &soa.data else {
        unreachable!("the zone SOA record holds SOA data")
    };
    let pointer = (0xC000 | apex).to_be_bytes();
    let mut rdata = [0u8; 64];
    let mut n = 0;
    // mname is ns.dns.<zone>, rname hostmaster.<zone> (see zone::Apex).
    for prefix in [&b"\x02ns\x03dns"[..], &b"\x0ahostmaster"[..]] {
        rdata[n..n + prefix.len()].copy_from_slice(prefix);
        n += prefix.len();
        rdata[n..n + 2].copy_from_slice(&pointer);
        n += 2;
    }
    for v in [
        data.serial,
        data.refresh as u32,
        data.retry as u32,
        data.expire as u32,
        data.minimum,
    ] {
        rdata[n..n + 4].copy_from_slice(&v.to_be_bytes());
        n += 4;
    }
    out[0..2].copy_from_slice(&pointer);
    out[2..4].copy_from_slice(&6u16.to_be_bytes());
    out[4..6].copy_from_slice(&CLASS_IN.to_be_bytes());
    out[6..10].copy_from_slice(&soa.ttl.to_be_bytes());
    out[10..12].copy_from_slice(&(n as u16).to_be_bytes());
    out[12..12 + n].copy_from_slice(&rdata[..n]);
    12 + n
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
