//! The DNS wire format as every path of the server reads and writes it, in
//! one place: the header's flags and counts, what is not a query, the walk
//! over a name in plain labels, and the OPT record with its DO bit. The
//! fast path, the structural check, RRL, the renderer and the handler use
//! these and spell no flag, type number or name limit of their own.

pub use crate::zone::wire::{HEADER_LEN, OPT_RECORD_LEN};

/// Class IN.
pub const CLASS_IN: u16 = 1;
/// The type of an OPT record (RFC 6891 §6.1.1).
pub const TYPE_OPT: u16 = 41;
/// The DO flag in the high byte of an OPT record's flags (RFC 3225 §3).
pub const DO_BIT: u8 = 0x80;

// The header's third byte: QR, the opcode, AA, TC and RD.
const QR: u8 = 0x80;
const OPCODE: u8 = 0x78;
const AA: u8 = 0x04;
const TC: u8 = 0x02;
const RD: u8 = 0x01;
// The fourth byte: CD, and the low four bits of the rcode (RA is never set:
// the server is not recursive).
const CD: u8 = 0x10;
const RCODE_LOW: u8 = 0x0f;

/// The longest label (RFC 1035 §2.3.4).
const MAX_LABEL_LEN: usize = 63;
/// The longest name before its root label: 255 octets in all (RFC 1035
/// §2.3.4).
const MAX_NAME_LEN_BEFORE_ROOT: usize = 254;

/// Whether `message` may get a response: at least a header long with QR
/// clear. Anything else is never answered, so that the server reflects
/// nothing.
pub fn is_query(message: &[u8]) -> bool {
    message.len() >= HEADER_LEN && message[2] & QR == 0
}

/// The header's opcode (0 is QUERY). `message` is a query ([`is_query`]).
pub fn opcode(message: &[u8]) -> u8 {
    (message[2] & OPCODE) >> 3
}

/// The header's four section counts: questions, answers, authority and
/// additional records. `message` is a query ([`is_query`]).
pub fn counts(message: &[u8]) -> [u16; 4] {
    let count = |i: usize| u16::from_be_bytes([message[i], message[i + 1]]);
    [count(4), count(6), count(8), count(10)]
}

/// The flag bytes of a response to a query with the flag bytes `asked`:
/// QR set; the opcode, RD and CD as asked; AA and TC as given; RA never;
/// the low four bits of `rcode`.
pub fn response_flags(asked: [u8; 2], authoritative: bool, truncated: bool, rcode: u16) -> [u8; 2] {
    [
        QR | (asked[0] & (OPCODE | RD))
            | if authoritative { AA } else { 0 }
            | if truncated { TC } else { 0 },
        (asked[1] & CD) | (rcode as u8 & RCODE_LOW),
    ]
}

/// Walks the name that starts at `start` in plain labels and returns the
/// offset just past its root label; `label(at, len)` sees each label's
/// bytes at `message[at..at + len]`, leftmost first. `None` for a
/// compression pointer or an extended label type, a label over 63 bytes, a
/// name over 255, or a name cut short.
pub fn plain_name_end(
    message: &[u8],
    start: usize,
    mut label: impl FnMut(usize, usize),
) -> Option<usize> {
    let mut at = start;
    loop {
        let len = usize::from(*message.get(at)?);
        if len == 0 {
            return Some(at + 1);
        }
        if len > MAX_LABEL_LEN
            || at + 1 + len - start > MAX_NAME_LEN_BEFORE_ROOT
            || at + 1 + len > message.len()
        {
            return None;
        }
        label(at + 1, len);
        at += 1 + len;
    }
}

/// The end of the first question of a query, when its name is in plain
/// labels: its name, type and class read.
pub fn plain_question_end(query: &[u8]) -> Option<usize> {
    let end = plain_name_end(query, HEADER_LEN, |_, _| {})? + 4;
    (end <= query.len()).then_some(end)
}

/// The fixed part of an OPT record: what a query's OPT asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptHeader {
    /// The UDP payload size offered (the record's class).
    pub payload: u16,
    /// EDNS version.
    pub version: u8,
    /// Whether the DO bit is set.
    pub dnssec_ok: bool,
    /// RDATA length: the options that follow the fixed part.
    pub rdata_len: usize,
}

/// Reads the OPT record at the start of `bytes`: a root owner, type OPT
/// and the fixed part. `None` for any other record or too few bytes.
pub fn read_opt(bytes: &[u8]) -> Option<OptHeader> {
    let fixed = bytes.get(..OPT_RECORD_LEN)?;
    (fixed[0] == 0 && u16::from_be_bytes([fixed[1], fixed[2]]) == TYPE_OPT).then(|| OptHeader {
        payload: u16::from_be_bytes([fixed[3], fixed[4]]),
        version: fixed[6],
        dnssec_ok: fixed[7] & DO_BIT != 0,
        rdata_len: usize::from(u16::from_be_bytes([fixed[9], fixed[10]])),
    })
}

/// Our OPT record: root owner, our payload size, the extended rcode,
/// version 0, the DO bit as asked (RFC 3225 §3), no options.
pub fn opt_record(payload: u16, rcode_high: u8, dnssec_ok: bool) -> [u8; OPT_RECORD_LEN] {
    let [payload_high, payload_low] = payload.to_be_bytes();
    let [type_high, type_low] = TYPE_OPT.to_be_bytes();
    let flags = if dnssec_ok { DO_BIT } else { 0 };
    [
        0,
        type_high,
        type_low,
        payload_high,
        payload_low,
        rcode_high,
        0,
        flags,
        0,
        0,
        0,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `www.example.` in plain labels, type A, class IN.
    const QUESTION: &[u8] = b"\x03www\x07example\x00\x00\x01\x00\x01";

    fn query(flags: [u8; 2], tail: &[u8]) -> Vec<u8> {
        [
            &[0xab, 0xcd, flags[0], flags[1], 0, 1, 0, 0, 0, 0, 0, 0][..],
            tail,
        ]
        .concat()
    }

    #[test]
    fn a_response_or_a_short_message_is_not_a_query() {
        assert!(is_query(&query([0x01, 0], QUESTION)));
        assert!(!is_query(&query([0x81, 0], QUESTION)));
        assert!(!is_query(&[0; HEADER_LEN - 1]));
    }

    #[test]
    fn response_flags_keep_what_was_asked_and_set_what_is_given() {
        // Opcode 2, RD and CD asked, and bits a response never copies (AA,
        // TC, RA, Z).
        let asked = [(2 << 3) | AA | TC | RD, 0x80 | 0x40 | CD | 0x05];
        assert_eq!(
            response_flags(asked, false, false, 0),
            [QR | (2 << 3) | RD, CD]
        );
        assert_eq!(
            response_flags([0, 0], true, true, 0x13),
            [QR | AA | TC, 0x03],
            "only the rcode's low four bits"
        );
    }

    #[test]
    fn a_plain_name_is_walked_label_by_label() {
        let message = query([0, 0], QUESTION);
        let mut labels = Vec::new();
        let end = plain_name_end(&message, HEADER_LEN, |at, len| {
            labels.push(message[at..at + len].to_vec())
        });
        assert_eq!(end, Some(HEADER_LEN + 13));
        assert_eq!(labels, [b"www".to_vec(), b"example".to_vec()]);
        assert_eq!(plain_question_end(&message), Some(message.len()));
        assert_eq!(plain_question_end(&message[..message.len() - 1]), None);
    }

    #[test]
    fn compressed_long_and_cut_names_are_not_plain() {
        let walk = |name: &[u8]| plain_name_end(&query([0, 0], name), HEADER_LEN, |_, _| {});
        assert_eq!(walk(b"\xc0\x0c"), None, "a pointer");
        assert_eq!(walk(b"\x40"), None, "an extended label type");
        assert_eq!(
            walk(&[&[64][..], &[b'a'; 64], &[0]].concat()),
            None,
            "a 64-byte label"
        );
        assert_eq!(walk(b"\x03ww"), None, "cut short");
        // 254 bytes before the root label is the longest name: 255 in all.
        let label = [&[62][..], &[b'a'; 62]].concat();
        let longest = [&label[..], &label, &label, &label, &[1, b'a'], &[0]].concat();
        assert_eq!(longest.len(), 255);
        assert_eq!(walk(&longest), Some(HEADER_LEN + 255));
        let too_long = [&label[..], &label, &label, &label, &[2, b'a', b'a'], &[0]].concat();
        assert_eq!(walk(&too_long), None);
    }

    #[test]
    fn our_opt_record_reads_back() {
        let record = opt_record(1232, 1, true);
        assert_eq!(
            read_opt(&record),
            Some(OptHeader {
                payload: 1232,
                version: 0,
                dnssec_ok: true,
                rdata_len: 0
            })
        );
        assert_eq!(record[5], 1, "extended rcode");
        assert_eq!(
            read_opt(&opt_record(512, 0, false)).map(|o| o.dnssec_ok),
            Some(false)
        );
        let mut not_root = record;
        not_root[0] = 1;
        assert_eq!(read_opt(&not_root), None);
        assert_eq!(read_opt(&record[..OPT_RECORD_LEN - 1]), None);
    }
}
