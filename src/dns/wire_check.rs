//! The structural check every query passes before a decoder reads it, on
//! UDP (both paths) and TCP alike, so that the paths agree on what is
//! malformed: the header, every name's label lengths, every record's
//! fixed fields and RDATA length, the options of an OPT record (RFC 6891
//! §6.1.2: each option's length within the RDATA, which they fill exactly;
//! a client subnet option as RFC 7871 §6 requires), no compression pointer
//! into the header, and no bytes after the last record.
//!
//! A pointer into the header names whatever the ID, flags and counts spell:
//! hickory decodes it, and the response echoes the question's bytes after
//! a header of other flags and counts, where the same pointer reads as
//! something else or as nothing a client can decode (found by fuzzing,
//! docs/robustness.md).
//!
//! What it does not check (compression pointers pointing forward or in a
//! loop, names over 255 bytes through pointers) hickory's decoder rejects,
//! and the fast path never accepts a compressed question.

use super::wire::{self, HEADER_LEN, TYPE_OPT};

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Well-formed as far as this check goes: decode it.
    Query,
    /// QR set, or shorter than a header: never answered (no reflection).
    NotAQuery,
    /// Answer FORMERR (header only, ID, opcode and RD kept).
    Malformed,
}

const OPTION_CLIENT_SUBNET: u16 = 8;

/// Checks `message` (see the module docs).
pub(super) fn check(message: &[u8]) -> Verdict {
    if !wire::is_query(message) {
        return Verdict::NotAQuery;
    }
    match records_end(message) {
        Some(end) if end == message.len() => Verdict::Query,
        _ => Verdict::Malformed,
    }
}

/// Where the last record ends, if every section reads.
fn records_end(message: &[u8]) -> Option<usize> {
    let [questions, answers, authorities, additionals] = wire::counts(message).map(usize::from);
    let mut at = HEADER_LEN;
    for _ in 0..questions {
        at = skip_name(message, at)? + 4;
    }
    for _ in 0..answers + authorities + additionals {
        at = skip_name(message, at)?;
        let fixed = message.get(at..at + 10)?;
        let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
        let rdlen = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
        let rdata = message.get(at + 10..at + 10 + rdlen)?;
        if rtype == TYPE_OPT && !options_well_formed(rdata) {
            return None;
        }
        at += 10 + rdlen;
    }
    (at <= message.len()).then_some(at)
}

/// The end of the name starting at `at`: plain labels of at most 63 bytes
/// up to the root label, or up to a compression pointer past the header.
fn skip_name(message: &[u8], mut at: usize) -> Option<usize> {
    let start = at;
    loop {
        let len = *message.get(at)?;
        match len & 0xc0 {
            0 if len == 0 => return Some(at + 1),
            0 => {
                at += 1 + usize::from(len);
                if at - start > 254 {
                    return None;
                }
            }
            0xc0 => {
                let low = *message.get(at + 1)?;
                let target = usize::from(u16::from_be_bytes([len & 0x3f, low]));
                return (target >= HEADER_LEN).then_some(at + 2);
            }
            // 0x40 and 0x80: extended label types (RFC 6891 §5), unused.
            _ => return None,
        }
    }
}

/// Whether an OPT record's RDATA is a sequence of options that fills it
/// exactly, each client subnet option well-formed.
pub(super) fn options_well_formed(rdata: &[u8]) -> bool {
    let mut at = 0;
    while at < rdata.len() {
        let Some(head) = rdata.get(at..at + 4) else {
            return false;
        };
        let code = u16::from_be_bytes([head[0], head[1]]);
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        let Some(data) = rdata.get(at + 4..at + 4 + len) else {
            return false;
        };
        if code == OPTION_CLIENT_SUBNET && !client_subnet_well_formed(data) {
            return false;
        }
        at += 4 + len;
    }
    true
}

/// RFC 7871 §6: family 1 or 2, a source prefix within the family's
/// length, and exactly the address bytes the prefix needs.
fn client_subnet_well_formed(data: &[u8]) -> bool {
    let Some(&[family_high, family_low, source, _scope]) = data.get(..4) else {
        return false;
    };
    let bits = match u16::from_be_bytes([family_high, family_low]) {
        1 => 32,
        2 => 128,
        _ => return false,
    };
    source <= bits && data.len() == 4 + usize::from(source).div_ceil(8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(qd: u16, ar: u16) -> Vec<u8> {
        let mut h = vec![0x12, 0x34, 0x01, 0x00];
        for count in [qd, 0, 0, ar] {
            h.extend_from_slice(&count.to_be_bytes());
        }
        h
    }

    const QUESTION: &[u8] = b"\x03web\x00\x00\x01\x00\x01";

    fn opt(options: &[u8]) -> Vec<u8> {
        let mut r = vec![0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0];
        r.extend_from_slice(&(options.len() as u16).to_be_bytes());
        r.extend_from_slice(options);
        r
    }

    #[test]
    fn well_formed_queries_pass() {
        assert_eq!(
            check(&[header(1, 0), QUESTION.to_vec()].concat()),
            Verdict::Query
        );
        let cookie = b"\x00\x0a\x00\x08abcdefgh";
        let with_opt = [header(1, 1), QUESTION.to_vec(), opt(cookie)].concat();
        assert_eq!(check(&with_opt), Verdict::Query);
        let subnet = b"\x00\x08\x00\x07\x00\x01\x18\x00\x0a\x01\x02";
        let with_subnet = [header(1, 1), QUESTION.to_vec(), opt(subnet)].concat();
        assert_eq!(check(&with_subnet), Verdict::Query);
    }

    #[test]
    fn responses_and_short_messages_are_not_queries() {
        let mut response = [header(1, 0), QUESTION.to_vec()].concat();
        response[2] |= 0x80;
        assert_eq!(check(&response), Verdict::NotAQuery);
        assert_eq!(check(&response[..11]), Verdict::NotAQuery);
        // Also when the rest is garbage.
        response.truncate(13);
        assert_eq!(check(&response), Verdict::NotAQuery);
    }

    /// Fuzzing finding 1 (docs/robustness.md): the second question points
    /// at offset 2, which reads as a name in the query (flags 0x0100: a
    /// one-byte label, then the root) but not in the response (flags
    /// 0x8101), so the FORMERR echoing it did not decode.
    #[test]
    fn a_compression_pointer_into_the_header_is_malformed() {
        let into_header = [
            header(2, 0),
            QUESTION.to_vec(),
            b"\x03www\xc0\x02\x00\x01\x00\x01".to_vec(),
        ]
        .concat();
        assert_eq!(check(&into_header), Verdict::Malformed);
        let into_first_question = [
            header(2, 0),
            QUESTION.to_vec(),
            b"\x03www\xc0\x0c\x00\x01\x00\x01".to_vec(),
        ]
        .concat();
        assert_eq!(check(&into_first_question), Verdict::Query);
        // The fuzzer's input as it was found.
        let found = [
            0, 41, 1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 3, 104, 111, 112, 3, 115, 16, 0, 5, 147, 111, 99,
            97, 108, 0, 0, 52, 0, 1, 3, 119, 119, 119, 192, 2, 0, 0, 0, 1,
        ];
        assert_eq!(check(&found), Verdict::Malformed);
    }

    #[test]
    fn broken_options_trailing_bytes_and_cut_records_are_malformed() {
        let cases: [(&str, Vec<u8>); 7] = [
            (
                "option longer than the RDATA",
                [
                    header(1, 1),
                    QUESTION.to_vec(),
                    opt(b"\x00\x0a\x00\x09abcdefgh"),
                ]
                .concat(),
            ),
            (
                "option header cut",
                [header(1, 1), QUESTION.to_vec(), opt(b"\x00\x0a\x00")].concat(),
            ),
            (
                "client subnet of family 3",
                [
                    header(1, 1),
                    QUESTION.to_vec(),
                    opt(b"\x00\x08\x00\x05\x00\x03\x08\x00\x0a"),
                ]
                .concat(),
            ),
            (
                "client subnet with more address bytes than its prefix",
                [
                    header(1, 1),
                    QUESTION.to_vec(),
                    opt(b"\x00\x08\x00\x06\x00\x01\x08\x00\x0a\x01"),
                ]
                .concat(),
            ),
            (
                "trailing byte",
                [header(1, 0), QUESTION.to_vec(), vec![0]].concat(),
            ),
            (
                "trailing byte after OPT",
                [header(1, 1), QUESTION.to_vec(), opt(b""), vec![0]].concat(),
            ),
            (
                "announced OPT missing",
                [header(1, 1), QUESTION.to_vec()].concat(),
            ),
        ];
        for (what, bytes) in cases {
            assert_eq!(check(&bytes), Verdict::Malformed, "{what}");
        }
    }
}
