//! The encoder of precompiled answers: full name compression (RFC 1035
//! §4.1.4), every name against every earlier one.
//!
//! hickory's encoder compresses at most 120 names per message and keeps at
//! most 64 suffixes to point at, so past the first hundred records each
//! owner name goes out in full: a 1,000-record A answer took 42 KB where
//! 16 KB carry the same records. Encoding happens once per RRset when the
//! zone is built, never per query, so this encoder can afford a hash table
//! of every suffix written.
//!
//! Rules:
//! - every name suffix written in plain labels is remembered at its first
//!   offset, if a pointer can reach it (offsets up to 0x3FFF; a name first
//!   written further on is written again in full, or against an earlier
//!   shorter suffix);
//! - owner names and the names in the RDATA of the types RFC 1035 defines
//!   (NS, CNAME, PTR, MX, SOA) are written as their longest remembered
//!   suffix's pointer after the labels in front of it;
//! - SRV targets are written in full (RFC 2782 forbids compressing them, as
//!   Knot and BIND do) but remembered, so the owner names of the address
//!   records that follow them become two-byte pointers;
//! - suffixes compare in lower case (DNS names are case-insensitive); the
//!   labels are written as given.

use std::collections::HashMap;

use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder, NameEncoding};

/// The highest message offset a compression pointer can hold (14 bits).
pub const MAX_POINTER_TARGET: usize = 0x3FFF;

/// Marks a two-byte compression pointer.
const POINTER: u16 = 0xC000;

/// A record that would take the message past its size limit; nothing of
/// it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge;

/// One DNS message being written, with full name compression.
#[derive(Debug)]
pub struct MessageWriter {
    bytes: Vec<u8>,
    limit: usize,
    /// Lower-case wire form of each name suffix written in plain labels at
    /// an offset a pointer can reach, with its first such offset.
    suffixes: HashMap<Box<[u8]>, u16>,
}

impl MessageWriter {
    /// A message of at most `limit` bytes, starting with `header` (written
    /// as is; the caller fills in the counts).
    pub fn new(header: &[u8], limit: usize) -> Self {
        let mut bytes = Vec::with_capacity(512);
        bytes.extend_from_slice(header);
        Self {
            bytes,
            limit,
            suffixes: HashMap::new(),
        }
    }

    /// Writes a question: the name in plain labels (never a pointer: the
    /// response echoes the question as asked), type, class IN.
    pub fn question(&mut self, name: &Name, qtype: RecordType) {
        self.name(name, false);
        self.bytes
            .extend_from_slice(&u16::from(qtype).to_be_bytes());
        self.bytes.extend_from_slice(&1u16.to_be_bytes());
    }

    /// Bytes written so far: the offset of what comes next.
    pub fn offset(&self) -> usize {
        self.bytes.len()
    }

    /// Appends `record`, or leaves the message as it was if the record
    /// takes it past the limit.
    pub fn record(&mut self, record: &Record) -> Result<(), TooLarge> {
        let start = self.bytes.len();
        self.name(&record.name, true);
        self.bytes
            .extend_from_slice(&u16::from(record.record_type()).to_be_bytes());
        self.bytes
            .extend_from_slice(&u16::from(record.dns_class).to_be_bytes());
        self.bytes.extend_from_slice(&record.ttl.to_be_bytes());
        let rdlength_at = self.bytes.len();
        self.bytes.extend_from_slice(&[0, 0]);
        self.rdata(&record.data);
        let rdlength = u16::try_from(self.bytes.len() - rdlength_at - 2);
        match rdlength {
            Ok(rdlength) if self.bytes.len() <= self.limit => {
                self.bytes[rdlength_at..rdlength_at + 2].copy_from_slice(&rdlength.to_be_bytes());
                Ok(())
            }
            _ => {
                self.truncate(start);
                Err(TooLarge)
            }
        }
    }

    /// Drops everything from `offset` on, and the suffixes written there:
    /// no later name may point into bytes that are gone.
    pub fn truncate(&mut self, offset: usize) {
        if offset < self.bytes.len() {
            self.bytes.truncate(offset);
            self.suffixes.retain(|_, at| usize::from(*at) < offset);
        }
    }

    /// The message.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// Writes `name`: with `compress`, the labels in front of its longest
    /// suffix written before, then a pointer to that suffix; else all its
    /// labels. The suffixes written in labels are remembered either way.
    fn name(&mut self, name: &Name, compress: bool) {
        // The name's lower-case wire form (without the root label) and
        // where each label starts in it; suffix i is `lower[starts[i]..]`.
        let mut lower = [0u8; 256];
        let mut starts = [0usize; 128];
        let mut len = 0;
        let mut labels = 0;
        for label in name.iter() {
            starts[labels] = len;
            labels += 1;
            lower[len] = label.len() as u8;
            for (dst, src) in lower[len + 1..len + 1 + label.len()].iter_mut().zip(label) {
                *dst = src.to_ascii_lowercase();
            }
            len += 1 + label.len();
        }
        let matched = match compress {
            true => (0..labels)
                .find_map(|i| self.suffixes.get(&lower[starts[i]..len]).map(|&at| (i, at))),
            false => None,
        };
        let written = matched.map_or(labels, |(i, _)| i);
        for (i, label) in name.iter().take(written).enumerate() {
            let at = self.bytes.len();
            let suffix = &lower[starts[i]..len];
            // The first offset stays: allocate a key only for a new suffix.
            if at <= MAX_POINTER_TARGET && !self.suffixes.contains_key(suffix) {
                self.suffixes.insert(suffix.into(), at as u16);
            }
            self.bytes.push(label.len() as u8);
            self.bytes.extend_from_slice(label);
        }
        match matched {
            Some((_, at)) => self.bytes.extend_from_slice(&(POINTER | at).to_be_bytes()),
            None => self.bytes.push(0),
        }
    }

    fn rdata(&mut self, data: &RData) {
        match data {
            RData::A(a) => self.bytes.extend_from_slice(&a.0.octets()),
            RData::AAAA(aaaa) => self.bytes.extend_from_slice(&aaaa.0.octets()),
            RData::SRV(srv) => {
                for field in [srv.priority, srv.weight, srv.port] {
                    self.bytes.extend_from_slice(&field.to_be_bytes());
                }
                self.name(&srv.target, false);
            }
            RData::NS(name) => self.name(&name.0, true),
            RData::CNAME(name) => self.name(&name.0, true),
            RData::PTR(name) => self.name(&name.0, true),
            RData::MX(mx) => {
                self.bytes.extend_from_slice(&mx.preference.to_be_bytes());
                self.name(&mx.exchange, true);
            }
            RData::SOA(soa) => {
                self.name(&soa.mname, true);
                self.name(&soa.rname, true);
                self.bytes.extend_from_slice(&soa.serial.to_be_bytes());
                for field in [soa.refresh, soa.retry, soa.expire] {
                    self.bytes.extend_from_slice(&field.to_be_bytes());
                }
                self.bytes.extend_from_slice(&soa.minimum.to_be_bytes());
            }
            // Other types (TXT here) carry no name we may compress: hickory
            // writes them, names (if any) in full.
            other => {
                let mut scratch = Vec::new();
                let mut encoder = BinEncoder::new(&mut scratch);
                encoder.set_name_encoding(NameEncoding::Uncompressed);
                other
                    .emit(&mut encoder)
                    .expect("RDATA of our own records encodes");
                self.bytes.extend_from_slice(&scratch);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::Message;
    use hickory_proto::rr::rdata::{A, AAAA, NS, SRV, TXT};

    use super::*;

    const HEADER: [u8; 12] = [0, 0, 0x84, 0, 0, 1, 0, 0, 0, 0, 0, 0];

    fn name(text: &str) -> Name {
        Name::from_ascii(text).unwrap()
    }

    fn a(owner: &str, i: u32) -> Record {
        Record::from_rdata(
            name(owner),
            5,
            RData::A(A::from(std::net::Ipv4Addr::from(i))),
        )
    }

    /// A message of `records` as answers after a question for `qname`.
    fn message(qname: &str, qtype: RecordType, records: &[Record]) -> Vec<u8> {
        let mut writer = MessageWriter::new(&HEADER, u16::MAX as usize);
        writer.question(&name(qname), qtype);
        for record in records {
            writer.record(record).unwrap();
        }
        let mut bytes = writer.into_bytes();
        bytes[6..8].copy_from_slice(&(records.len() as u16).to_be_bytes());
        bytes
    }

    /// Where one name starting at `at` ends, and the pointer it ends in.
    fn name_end(bytes: &[u8], mut at: usize) -> (usize, Option<(usize, usize)>) {
        loop {
            match bytes[at] {
                0 => return (at + 1, None),
                len if len & 0xC0 == 0xC0 => {
                    let target = usize::from(u16::from_be_bytes([len, bytes[at + 1]]) & 0x3FFF);
                    return (at + 2, Some((at, target)));
                }
                len => at += 1 + usize::from(len),
            }
        }
    }

    /// Every compression pointer in the owner names and SRV targets of an
    /// answer-only message: (where, target).
    fn pointers(bytes: &[u8]) -> Vec<(usize, usize)> {
        let (mut at, _) = name_end(bytes, 12);
        at += 4;
        let count = u16::from_be_bytes([bytes[6], bytes[7]]);
        let mut found = Vec::new();
        for _ in 0..count {
            let (end, pointer) = name_end(bytes, at);
            found.extend(pointer);
            let rtype = u16::from_be_bytes([bytes[end], bytes[end + 1]]);
            let rdlength = usize::from(u16::from_be_bytes([bytes[end + 8], bytes[end + 9]]));
            if rtype == u16::from(RecordType::SRV) {
                let (_, pointer) = name_end(bytes, end + 16);
                assert_eq!(pointer, None, "SRV target compressed at {end}");
            }
            at = end + 10 + rdlength;
        }
        assert_eq!(at, bytes.len());
        found
    }

    #[test]
    fn an_owner_repeated_a_thousand_times_is_a_pointer_each_time() {
        let owner = "huge.shop.svc.clusterset.local.";
        let records: Vec<Record> = (0..1000).map(|i| a(owner, i)).collect();
        let bytes = message(owner, RecordType::A, &records);
        let question_end = 12 + 32 + 4;
        assert_eq!(bytes.len(), question_end + 1000 * (2 + 10 + 4));
        assert!(pointers(&bytes).iter().all(|&(_, target)| target == 12));
        assert_eq!(Message::from_vec(&bytes).unwrap().answers, records);
    }

    /// Names first written past offset 0x3FFF cannot be pointed at: a later
    /// copy points at the earliest suffix a pointer reaches, and the whole
    /// message decodes to the same records.
    #[test]
    fn pointers_only_target_offsets_a_pointer_can_hold() {
        // 1000 distinct owners, 26 bytes a record (`host-NNNN` and a
        // pointer): the later ones are first written beyond 0x3FFF; then
        // each owner once more.
        let owners: Vec<String> = (0..1000)
            .map(|i| format!("host-{i:04}.cluster-a.db.shop.svc.clusterset.local."))
            .collect();
        let mut records: Vec<Record> = owners.iter().map(|o| a(o, 1)).collect();
        records.extend(owners.iter().map(|o| a(o, 2)));
        let bytes = message("db.shop.svc.clusterset.local.", RecordType::A, &records);
        assert!(bytes.len() > 0x4000 + 1000 * 16, "{} bytes", bytes.len());
        let found = pointers(&bytes);
        assert!(
            found
                .iter()
                .all(|&(_, target)| target <= MAX_POINTER_TARGET)
        );
        // Every pointer lands on a label written before it.
        for &(at, target) in &found {
            assert!(target < at && bytes[target] & 0xC0 == 0, "{at} -> {target}");
        }
        // The second copy of an owner first written before 0x3FFF is a
        // bare pointer; of one first written after, its first two labels
        // and a pointer to `db.shop...` (or `cluster-a.db...`).
        assert_eq!(Message::from_vec(&bytes).unwrap().answers, records);
        let second_copies_start = {
            let mut writer = MessageWriter::new(&HEADER, u16::MAX as usize);
            writer.question(&name("db.shop.svc.clusterset.local."), RecordType::A);
            for record in &records[..1000] {
                writer.record(record).unwrap();
            }
            writer.offset()
        };
        assert!(second_copies_start > MAX_POINTER_TARGET);
        // The second copy of `host-0000` (first written at the start) is a
        // bare pointer.
        assert_eq!(bytes[second_copies_start] & 0xC0, 0xC0);
        // `host-0999` was first written far past 0x3FFF: its second copy
        // (the last record) has its first label again, then a pointer to
        // `cluster-a.db...` as `host-0000` wrote it.
        let last = &bytes[bytes.len() - (10 + 2 + 10 + 4)..];
        assert_eq!(&last[..10], b"\x09host-0999");
        assert_eq!(last[10] & 0xC0, 0xC0);
    }

    #[test]
    fn srv_targets_stay_in_labels_and_their_addresses_point_at_them() {
        let owner = "_http._tcp.db.shop.svc.clusterset.local.";
        let targets: Vec<String> = (0..100)
            .map(|i| format!("h-{i:03}.cluster-a.db.shop.svc.clusterset.local."))
            .collect();
        let mut records: Vec<Record> = targets
            .iter()
            .map(|t| Record::from_rdata(name(owner), 5, RData::SRV(SRV::new(0, 1, 80, name(t)))))
            .collect();
        for (i, target) in targets.iter().enumerate() {
            records.push(a(target, i as u32));
            records.push(Record::from_rdata(
                name(target),
                5,
                RData::AAAA(AAAA::from(std::net::Ipv6Addr::from(i as u128))),
            ));
        }
        let bytes = message(owner, RecordType::SRV, &records);
        // SRV: owner pointer, fixed fields, the target in full (46
        // bytes); address records: a pointer to the target as owner.
        let question_end = 12 + 41 + 4;
        let srv = 2 + 10 + 6 + 46;
        assert_eq!(
            bytes.len(),
            question_end + 100 * srv + 100 * (2 + 10 + 4) + 100 * (2 + 10 + 16)
        );
        pointers(&bytes);
        assert_eq!(Message::from_vec(&bytes).unwrap().answers, records);
    }

    #[test]
    fn the_names_of_ns_records_are_compressed_and_txt_is_written_as_is() {
        let origin = "clusterset.local.";
        let records = [
            Record::from_rdata(
                name(origin),
                5,
                RData::NS(NS(name("ns.dns.clusterset.local."))),
            ),
            Record::from_rdata(
                name("dns-version.clusterset.local."),
                5,
                RData::TXT(TXT::new(vec!["1.0.0".into()])),
            ),
        ];
        let bytes = message(origin, RecordType::NS, &records);
        let question_end = 12 + 18 + 4;
        let ns = 2 + 10 + (3 + 4 + 2);
        let txt = (12 + 2) + 10 + 6;
        assert_eq!(bytes.len(), question_end + ns + txt);
        assert_eq!(Message::from_vec(&bytes).unwrap().answers, records);
    }

    #[test]
    fn a_record_past_the_limit_leaves_nothing_behind() {
        let owner = "db.shop.svc.clusterset.local.";
        let mut writer = MessageWriter::new(&HEADER, 12 + 30 + 4 + 16 + 10);
        writer.question(&name(owner), RecordType::A);
        writer.record(&a(owner, 1)).unwrap();
        let before = writer.offset();
        let other = a("x.y.z.db.shop.svc.clusterset.local.", 2);
        assert_eq!(writer.record(&other), Err(TooLarge));
        assert_eq!(writer.offset(), before);
        // Its labels were forgotten with it: after a truncation the same
        // name is written in labels again, not as a pointer into bytes
        // that are gone.
        writer.limit = usize::MAX;
        writer.record(&other).unwrap();
        assert_eq!(writer.into_bytes()[before], 1);
    }

    /// Owners compressed against the question come back in the letter case
    /// of the question they are sent after.
    #[test]
    fn owners_take_the_letter_case_of_the_question() {
        let owner = "web.shop.svc.clusterset.local.";
        let lower = message(owner, RecordType::A, &[a(owner, 1)]);
        let mut upper = lower.clone();
        let asked = b"\x03WEB\x04Shop\x03SVC\x0aclusterset\x05LOCAL\x00";
        upper[12..12 + asked.len()].copy_from_slice(asked);
        let decoded = Message::from_vec(&upper).unwrap();
        assert_eq!(
            decoded.answers[0].name.to_ascii(),
            "WEB.Shop.SVC.clusterset.LOCAL."
        );
        assert_eq!(
            decoded.answers[0].name.to_ascii(),
            decoded.queries[0].name().to_ascii()
        );
    }
}
