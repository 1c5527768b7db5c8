//! The response writer both DNS paths share: a decided [`Plan`] written
//! as wire bytes, from the question the query asked and the zone's
//! precompiled sections. The UDP fast path writes every answer with it
//! into its stack buffer; the hickory handler writes with it every answer
//! that carries zone records (records, or the SOA of a negative answer),
//! so the two paths send the same bytes (`tests/fast_path.rs` compares
//! them).

use super::plan::{Fit, MAX_UDP_PAYLOAD, Plan};
use super::wire::{HEADER_LEN, OPT_RECORD_LEN, opt_record, response_flags};

/// Writes the response `plan` decides into `out`, fitted to `limit` bytes
/// (`None`: no limit; `out` holds [`Plan::response_len`] of the layout
/// [`Plan::fit`] picks). `head` is the first four bytes of the query's
/// header (ID and flags) and `question` its single question in plain
/// labels, which the response echoes and the precompiled names point into.
/// Returns the length and whether TC is set.
// On every answer's path, now in a module apart from its callers: let the
// compiler inline it into the fast path as it did when they shared one.
#[inline]
pub(super) fn render(
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
    [out[2], out[3]] = response_flags([head[2], head[3]], plan.authoritative, truncated, rcode);
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
