//! The response writer both DNS paths share: a decided [`Plan`] written
//! as wire bytes, from the question the query asked and the zone's
//! precompiled sections. The UDP fast path writes every answer with it
//! into its stack buffer; the hickory handler writes with it every answer
//! that carries zone records (records, or the SOA of a negative answer),
//! so the two paths send the same bytes (`tests/fast_path.rs` compares
//! them).

use super::plan::{DO_BIT, Fit, MAX_UDP_PAYLOAD, Plan, TYPE_OPT};
use crate::zone::wire::{HEADER_LEN, OPT_RECORD_LEN};

/// Writes the response `plan` decides into `out`, fitted to `limit` bytes
/// (`None`: no limit; `out` holds [`Plan::response_len`] of the layout
/// [`Plan::fit`] picks). `head` is the first four bytes of the query's
/// header (ID and flags) and `question` its single question in plain
/// labels, which the response echoes and the precompiled names point into.
/// Returns the length and whether TC is set.
// On every answer's path, now in a module apart from its callers: let the
// compiler inline it into the fast path as it did when they shared one.
#[inline]
pub fn render(
    plan: &Plan<'_>,
    head: [u8; 4],
    question: &[u8],
    limit: Option<usize>,
    out: &mut [u8],
) -> (usize, bool) {
    let question_end = HEADER_LEN + question.len();
    let fit = plan.fit(question.len(), limit);
    let truncated = fit == Fit::Truncated && plan.answer.is_some();
    let (body, answers, additionals) = match (plan.answer, fit) {
        (Some(rrset), Fit::Whole) => (
            rrset.wire.tail,
            rrset.wire.answer_count,
            rrset.wire.additional_count,
        ),
        (Some(rrset), Fit::AnswersOnly) => (
            &rrset.wire.tail[..rrset.wire.answers_end],
            rrset.wire.answer_count,
            0,
        ),
        _ => (&[][..], 0, 0),
    };
    let authorities = u16::from(plan.soa.is_some());
    let rcode = u16::from(plan.rcode);

    out[0] = head[0];
    out[1] = head[1];
    // QR, the opcode, AA, TC and RD as asked; RA never (not recursive).
    out[2] = 0x80
        | (head[2] & 0x78)
        | if plan.authoritative { 0x04 } else { 0 }
        | if truncated { 0x02 } else { 0 }
        | (head[2] & 0x01);
    // CD as asked; the low four bits of the rcode.
    out[3] = (head[3] & 0x10) | (rcode & 0x0f) as u8;
    out[4..6].copy_from_slice(&1u16.to_be_bytes());
    out[6..8].copy_from_slice(&answers.to_be_bytes());
    out[8..10].copy_from_slice(&authorities.to_be_bytes());
    let opt = u16::from(plan.edns.is_some());
    out[10..12].copy_from_slice(&(additionals + opt).to_be_bytes());
    out[HEADER_LEN..question_end].copy_from_slice(question);
    let mut len = question_end;
    out[len..len + body.len()].copy_from_slice(body);
    len += body.len();
    if let Some(zone) = plan.soa {
        // The zone origin is the question name's suffix: the SOA's names
        // point at it.
        let origin_len = zone.origin_wire_len();
        let origin_at = (question_end - 4 - origin_len) as u16;
        len += zone.soa_wire().write(origin_at, &mut out[len..]);
    }
    if let Some(edns) = plan.edns {
        out[len..len + OPT_RECORD_LEN].copy_from_slice(&opt_record(
            MAX_UDP_PAYLOAD,
            edns.rcode_high,
            edns.dnssec_ok,
        ));
        len += OPT_RECORD_LEN;
    }
    (len, truncated)
}

/// Our OPT record: root owner, our payload size, the extended rcode, version
/// 0, the DO bit as asked (RFC 3225 §3), no options.
fn opt_record(payload: u16, rcode_high: u8, dnssec_ok: bool) -> [u8; OPT_RECORD_LEN] {
    let p = payload.to_be_bytes();
    let flags = if dnssec_ok { DO_BIT } else { 0 };
    [
        0,
        0,
        TYPE_OPT as u8,
        p[0],
        p[1],
        rcode_high,
        0,
        flags,
        0,
        0,
        0,
    ]
}
