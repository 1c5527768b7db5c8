//! Wire-format precompilation of positive answers.
//!
//! Each RRset in the zone carries the bytes that follow the question section
//! of its response, encoded once at build time with hickory's own encoder
//! against a lower-case question. Name compression pointers in those bytes
//! point at offsets inside the question, and a question asked in any letter
//! case has the same length and label layout, so the bytes stay valid for
//! every casing of the name. The UDP fast path copies them after the echoed
//! question; the hickory path decodes them back into records.

use hickory_proto::ProtoError;
use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, Record, RecordType};
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder, NameEncoding};

/// Bytes of a fixed DNS header.
pub const HEADER_LEN: usize = 12;

/// Bytes of our response OPT record: root name, type, class (payload), TTL
/// (extended rcode, version, flags) and an empty RDATA.
pub const OPT_RECORD_LEN: usize = 11;

/// The precompiled sections of one positive answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireAnswer {
    /// Answer records followed by additional records, encoded as they follow
    /// the question of a response to the owner name.
    pub tail: Box<[u8]>,
    /// Where the additional records start in `tail`.
    pub answers_end: usize,
    /// Number of answer records.
    pub answer_count: u16,
    /// Number of additional records (before any OPT).
    pub additional_count: u16,
    /// Length of answers plus additionals with no name compressed at all.
    /// No encoder ever writes more than this, not even transiently
    /// (hickory's encoder writes a name's labels in full before it replaces
    /// them with a pointer), so a response whose uncompressed size fits the
    /// limit needs no further check on the hickory path. Saturates at
    /// `u16::MAX`.
    pub uncompressed_len: u16,
}

impl WireAnswer {
    /// Encodes `answers` and `additionals` as the response to `qname`/`qtype`.
    pub fn encode(
        qname: &Name,
        qtype: RecordType,
        answers: &[Record],
        additionals: &[Record],
    ) -> Self {
        let (full, question_end, answers_end) =
            encode_once(qname, qtype, answers, additionals, NameEncoding::Compressed);
        let (plain, plain_question_end, _) = encode_once(
            qname,
            qtype,
            answers,
            additionals,
            NameEncoding::Uncompressed,
        );
        Self {
            tail: full[question_end..].into(),
            answers_end: answers_end - question_end,
            answer_count: answers.len() as u16,
            additional_count: additionals.len() as u16,
            uncompressed_len: u16::try_from(plain.len() - plain_question_end).unwrap_or(u16::MAX),
        }
    }

    /// Upper bound of the response size on any encoder, for a question of
    /// `question_len` bytes (see [`WireAnswer::uncompressed_len`]).
    pub fn uncompressed_response_len(&self, question_len: usize, with_opt: bool) -> usize {
        HEADER_LEN
            + question_len
            + usize::from(self.uncompressed_len)
            + if with_opt { OPT_RECORD_LEN } else { 0 }
    }

    /// Decodes the records back, given the owner name and type the answer
    /// was encoded for (any letter case: only the layout matters).
    pub fn decode(
        &self,
        qname: &Name,
        qtype: RecordType,
    ) -> Result<(Vec<Record>, Vec<Record>), ProtoError> {
        let mut bytes = encode(qname, qtype, &[], &[]);
        bytes[6..8].copy_from_slice(&self.answer_count.to_be_bytes());
        bytes[10..12].copy_from_slice(&self.additional_count.to_be_bytes());
        bytes.extend_from_slice(&self.tail);
        let message = Message::from_vec(&bytes).map_err(|e| ProtoError::from(e.to_string()))?;
        Ok((message.answers, message.additionals))
    }

    /// Total response size for a question of `question_len` bytes, with or
    /// without the additional section and the OPT record.
    pub fn response_len(
        &self,
        question_len: usize,
        with_additionals: bool,
        with_opt: bool,
    ) -> usize {
        let body = if with_additionals {
            self.tail.len()
        } else {
            self.answers_end
        };
        HEADER_LEN + question_len + body + if with_opt { OPT_RECORD_LEN } else { 0 }
    }
}

/// One encoding pass: a zeroed header, the question, the answers, the
/// additionals; returns the bytes and where the question and the answers
/// end.
fn encode_once(
    qname: &Name,
    qtype: RecordType,
    answers: &[Record],
    additionals: &[Record],
    names: NameEncoding,
) -> (Vec<u8>, usize, usize) {
    let mut bytes = Vec::with_capacity(512);
    let mut encoder = BinEncoder::new(&mut bytes);
    encoder.set_name_encoding(names);
    encoder.emit_vec(&[0; HEADER_LEN]).expect("header encodes");
    Query::query(qname.clone(), qtype)
        .emit(&mut encoder)
        .expect("a valid name encodes");
    let question_end = encoder.offset();
    for record in answers {
        record
            .emit(&mut encoder)
            .expect("in-memory records always encode");
    }
    let answers_end = encoder.offset();
    for record in additionals {
        record
            .emit(&mut encoder)
            .expect("in-memory records always encode");
    }
    (bytes, question_end, answers_end)
}

/// Header and question only (the frame [`WireAnswer::decode`] puts the tail in).
fn encode(qname: &Name, qtype: RecordType, answers: &[Record], additionals: &[Record]) -> Vec<u8> {
    let mut message = Message::new(0, MessageType::Response, OpCode::Query);
    message.add_query(Query::query(qname.clone(), qtype));
    message.insert_answers(answers.to_vec());
    message.insert_additionals(additionals.to_vec());
    // Encoding our own well-formed records into an unbounded buffer cannot fail.
    message.to_vec().expect("in-memory records always encode")
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::RData;
    use hickory_proto::rr::rdata::A;

    #[test]
    fn decode_returns_the_encoded_records() {
        let name = Name::from_ascii("_http._tcp.web.prod.svc.clusterset.local.").unwrap();
        let target = Name::from_ascii("web.prod.svc.clusterset.local.").unwrap();
        let srv = Record::from_rdata(
            name.clone(),
            5,
            RData::SRV(hickory_proto::rr::rdata::SRV::new(
                0,
                100,
                80,
                target.clone(),
            )),
        );
        let glue = Record::from_rdata(target, 5, RData::A(A::new(10, 0, 0, 1)));
        let wire = WireAnswer::encode(
            &name,
            RecordType::SRV,
            std::slice::from_ref(&srv),
            std::slice::from_ref(&glue),
        );
        let upper = Name::from_ascii("_HTTP._tcp.Web.prod.svc.clusterset.local.").unwrap();
        assert_eq!(
            wire.decode(&upper, RecordType::SRV).unwrap(),
            (vec![srv], vec![glue])
        );
    }

    #[test]
    fn tail_decodes_after_any_casing_of_the_question() {
        let name = Name::from_ascii("web.prod.svc.clusterset.local.").unwrap();
        let rec = Record::from_rdata(name.clone(), 5, RData::A(A::new(10, 0, 0, 1)));
        let wire = WireAnswer::encode(&name, RecordType::A, std::slice::from_ref(&rec), &[]);
        // Rebuild a response with an upper-case question and parse it back.
        let upper = Name::from_ascii("WEB.Prod.SVC.clusterset.LOCAL.").unwrap();
        let mut head = encode(&upper, RecordType::A, &[], &[]);
        head[7] = 1; // ANCOUNT = 1
        head.extend_from_slice(&wire.tail);
        let msg = Message::from_vec(&head).unwrap();
        assert_eq!(msg.answers, vec![rec]);
    }
}
