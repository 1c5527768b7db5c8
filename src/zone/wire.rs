//! Wire-format precompilation of positive answers.
//!
//! Each RRset in the zone carries the bytes that follow the question section
//! of its response, encoded once at build time with full name compression
//! ([`super::compress`]) against a lower-case question. Name compression
//! pointers in those bytes point at offsets inside the question, and a
//! question asked in any letter case has the same length and label layout,
//! so the bytes stay valid for every casing of the name. Both writers copy
//! them after the echoed question: the UDP fast path and the hickory path
//! (TCP, unusual UDP queries). Master files and `/explain` decode them back
//! into records.

use hickory_proto::ProtoError;
use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, Record, RecordType};
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder};

use super::compress::MessageWriter;

/// Bytes of a fixed DNS header.
pub const HEADER_LEN: usize = 12;

/// Bytes of our response OPT record: root name, type, class (payload), TTL
/// (extended rcode, version, flags) and an empty RDATA.
pub const OPT_RECORD_LEN: usize = 11;

/// Largest precompiled response (header, question, answers, additionals):
/// the 64 KiB DNS message limit, less the OPT record a response to an EDNS
/// query adds. Every writer sends the precompiled bytes as they are, so a
/// response is never larger than this plus its OPT record.
pub const MAX_PRECOMPILED_LEN: usize = u16::MAX as usize - OPT_RECORD_LEN;

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
}

impl WireAnswer {
    /// Encodes `answers` and `additionals` as the response to `qname`/`qtype`.
    ///
    /// The response must fit one DNS message (64 KiB, see
    /// [`MAX_PRECOMPILED_LEN`]): answer records that do not fit are left out
    /// (a headless answer may be any subset of its endpoints), and the
    /// additional records, which are optional, are kept all or none. The
    /// counts say what was kept.
    pub fn encode(
        qname: &Name,
        qtype: RecordType,
        answers: &[Record],
        additionals: &[Record],
    ) -> Self {
        let mut writer = MessageWriter::new(&[0; HEADER_LEN], MAX_PRECOMPILED_LEN);
        writer.question(qname, qtype);
        let question_end = writer.offset();
        let answer_count = answers
            .iter()
            .take_while(|record| writer.record(record).is_ok())
            .count();
        let answers_end = writer.offset();
        let mut additional_count = 0;
        if answer_count == answers.len() {
            additional_count = additionals
                .iter()
                .take_while(|record| writer.record(record).is_ok())
                .count();
            if additional_count < additionals.len() {
                additional_count = 0;
                writer.truncate(answers_end);
            }
        }
        let bytes = writer.into_bytes();
        Self {
            tail: bytes[question_end..].into(),
            answers_end: answers_end - question_end,
            answer_count: answer_count as u16,
            additional_count: additional_count as u16,
        }
    }

    /// The same bytes, borrowed.
    pub fn as_wire(&self) -> Wire<'_> {
        Wire {
            tail: &self.tail,
            answers_end: self.answers_end,
            answer_count: self.answer_count,
            additional_count: self.additional_count,
        }
    }

    /// Decodes the records back (see [`Wire::decode`]).
    pub fn decode(
        &self,
        qname: &Name,
        qtype: RecordType,
    ) -> Result<(Vec<Record>, Vec<Record>), ProtoError> {
        self.as_wire().decode(qname, qtype)
    }
}

/// The precompiled sections of one positive answer where they are stored
/// (a service's packed names, [`super::packed_names`]): what the writers copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wire<'z> {
    /// Answer records followed by additional records, encoded as they follow
    /// the question of a response to the owner name.
    pub tail: &'z [u8],
    /// Where the additional records start in `tail`.
    pub answers_end: usize,
    /// Number of answer records.
    pub answer_count: u16,
    /// Number of additional records (before any OPT).
    pub additional_count: u16,
}

impl Wire<'_> {
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
        bytes.extend_from_slice(self.tail);
        let message = Message::from_vec(&bytes).map_err(|e| ProtoError::from(e.to_string()))?;
        Ok((message.answers, message.additionals))
    }
}

/// The zone's SOA record precompiled for the authority section of negative
/// answers. Its names point into the question's copy of the zone origin,
/// which sits at a different offset for every question, so the record is
/// kept with the places of its compression pointers and
/// [`SoaWire::write`] aims them at the question being answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoaWire {
    /// The record as encoded after a question for the origin itself.
    bytes: Box<[u8]>,
    /// Offsets in `bytes` of compression pointers, with the offset they
    /// point at relative to the start of the origin in the question.
    pointers: Box<[(usize, u16)]>,
}

impl SoaWire {
    /// Precompiles `soa` (owner: the zone origin) with hickory's encoder.
    pub fn encode(soa: &Record) -> Self {
        let mut bytes = Vec::with_capacity(128);
        let mut encoder = BinEncoder::new(&mut bytes);
        // Header, then the origin's question: SOA names compress against it.
        encoder.emit_vec(&[0; HEADER_LEN]).expect("header fits");
        Query::query(soa.name.clone(), RecordType::SOA)
            .emit(&mut encoder)
            .expect("the origin is a valid name");
        let record_start = encoder.offset();
        // One record of at most three 255-byte names is far below any limit.
        soa.emit(&mut encoder).expect("the SOA record encodes");
        drop(encoder);
        let record = &bytes[record_start..];
        let pointers = pointer_offsets(record)
            .into_iter()
            .map(|at| {
                let target = u16::from_be_bytes([record[at], record[at + 1]]) & 0x3fff;
                (at, target - HEADER_LEN as u16)
            })
            .collect();
        Self {
            bytes: record.into(),
            pointers,
        }
    }

    /// Bytes of the record.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Never true: a record has at least a name and a type.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Writes the record into `out` (at least [`SoaWire::len`] bytes),
    /// with its names pointing at the zone origin found at message offset
    /// `origin_at`.
    pub fn write(&self, origin_at: u16, out: &mut [u8]) -> usize {
        let out = &mut out[..self.bytes.len()];
        out.copy_from_slice(&self.bytes);
        for &(at, relative) in &*self.pointers {
            let pointer = 0xC000 | (origin_at + relative);
            out[at..at + 2].copy_from_slice(&pointer.to_be_bytes());
        }
        self.bytes.len()
    }
}

/// Offsets of the compression pointers in one encoded SOA record: in the
/// owner name and in the two names of its RDATA.
fn pointer_offsets(record: &[u8]) -> Vec<usize> {
    // Skips one name starting at `at`; returns where it ends and the
    // pointer it ends in, if any.
    let name_end = |mut at: usize| -> (usize, Option<usize>) {
        loop {
            match record[at] {
                0 => return (at + 1, None),
                len if len & 0xC0 == 0xC0 => return (at + 2, Some(at)),
                len => at += 1 + usize::from(len),
            }
        }
    };
    let mut pointers = Vec::new();
    let (owner_end, pointer) = name_end(0);
    pointers.extend(pointer);
    // Type, class, TTL and RDLENGTH: 10 bytes; then MNAME and RNAME.
    let (mname_end, pointer) = name_end(owner_end + 10);
    pointers.extend(pointer);
    let (_, pointer) = name_end(mname_end);
    pointers.extend(pointer);
    pointers
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
