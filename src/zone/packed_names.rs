//! The names of one service and their RRsets, packed into three heap
//! blocks: every name's labels and every RRset's wire bytes end to end in
//! one, a table of names in another, a table of RRsets in the third.
//!
//! A service used to hold a block per name key, per name's RRset list and
//! per RRset's bytes: some 15 blocks a service, 153,073 for a zone of
//! 10,000 services, each with the allocator's header and rounding, and
//! scattered among the load's transient blocks. Lookups read the packed
//! form in place through the borrowed [`Node`] and [`RrSet`] views; the
//! builders work on [`BuiltNode`]s and pack them once, when a service is
//! done.

use hickory_proto::rr::{Name, Record, RecordType};

use super::query_name::{LabelKey, Labels};
use super::tier::Tier;
use super::wire::{Wire, WireAnswer};

/// One RRset as a builder makes it, before it is packed.
#[derive(Debug, Clone)]
pub(super) struct BuiltRrSet {
    /// The record type of the answers.
    pub rtype: RecordType,
    /// The precompiled answer and additional sections.
    pub wire: WireAnswer,
    /// The endpoints the answer was taken from (see [`RrSet::tier`]).
    pub tier: Option<Tier>,
}

impl BuiltRrSet {
    /// Builds an RRset and precompiles it.
    pub(super) fn new(
        owner: &Name,
        rtype: RecordType,
        records: Vec<Record>,
        additionals: Vec<Record>,
    ) -> Self {
        Self {
            rtype,
            wire: WireAnswer::encode(owner, rtype, &records, &additionals),
            tier: None,
        }
    }

    /// The same RRset, counted as answering from `tier`.
    pub(super) fn with_tier(mut self, tier: Option<Tier>) -> Self {
        self.tier = tier;
        self
    }
}

/// The RRsets of one name while it is built. None means an empty
/// non-terminal.
#[derive(Debug, Clone, Default)]
pub(super) struct BuiltNode {
    /// The RRsets, in the order lookups try them.
    pub rrsets: Vec<BuiltRrSet>,
}

impl BuiltNode {
    /// Adds a built RRset.
    pub(super) fn push_rrset(&mut self, rrset: BuiltRrSet) {
        self.rrsets.push(rrset);
    }

    /// Precompiles and adds the RRset of `records` (nothing when there are
    /// none), saying so when the answer had to be cut to one DNS message.
    pub(super) fn push(
        &mut self,
        owner: &Name,
        rtype: RecordType,
        records: Vec<Record>,
        additionals: Vec<Record>,
    ) {
        if records.is_empty() {
            return;
        }
        let count = records.len();
        let rrset = BuiltRrSet::new(owner, rtype, records, additionals);
        if usize::from(rrset.wire.answer_count) < count {
            tracing::warn!(
                name = %owner,
                %rtype,
                kept = rrset.wire.answer_count,
                records = count,
                "answer cut to fit one DNS message (64 KiB); lower max_records to choose the subset size yourself"
            );
        }
        self.rrsets.push(rrset);
    }
}

/// Names and their RRsets, packed.
#[derive(Debug, Clone, Default)]
pub(super) struct Names {
    /// The labels of every name (wire form, see [`LabelKey`]), then the
    /// answer bytes of every RRset.
    bytes: Box<[u8]>,
    /// One entry a name, in [`node_order`].
    nodes: Box<[NodeEntry]>,
    /// The RRsets of every name, a name's together.
    rrsets: Box<[RrSetEntry]>,
}

/// Where one name's labels and RRsets are.
#[derive(Debug, Clone, Copy)]
struct NodeEntry {
    key_start: u32,
    /// Relative names are at most 255 bytes ([`LabelKey`]).
    key_len: u8,
    /// A name has at most one RRset per type, a handful.
    rrset_count: u8,
    rrsets_start: u32,
}

/// Where one RRset's bytes are, and what they hold. A precompiled answer is
/// shorter than a DNS message ([`super::wire::MAX_PRECOMPILED_LEN`]), so
/// its lengths fit 16 bits.
#[derive(Debug, Clone, Copy)]
struct RrSetEntry {
    rtype: RecordType,
    tier: Option<Tier>,
    start: u32,
    len: u16,
    answers_end: u16,
    answer_count: u16,
    additional_count: u16,
}

impl RrSetEntry {
    fn view<'z>(&self, bytes: &'z [u8]) -> RrSet<'z> {
        let start = self.start as usize;
        RrSet {
            rtype: self.rtype,
            tier: self.tier,
            wire: Wire {
                tail: &bytes[start..start + usize::from(self.len)],
                answers_end: usize::from(self.answers_end),
                answer_count: self.answer_count,
                additional_count: self.additional_count,
            },
        }
    }
}

impl Names {
    /// Packs `nodes`, sorted in [`node_order`] (what [`Names::find`]
    /// searches by).
    pub(super) fn pack(mut nodes: Vec<(LabelKey, BuiltNode)>) -> Self {
        nodes.sort_unstable_by(|a, b| node_order(a.0.as_labels().wire(), b.0.as_labels().wire()));
        let size: usize = nodes
            .iter()
            .map(|(key, node)| {
                key.as_labels().wire().len()
                    + node.rrsets.iter().map(|r| r.wire.tail.len()).sum::<usize>()
            })
            .sum();
        let rrset_count = nodes.iter().map(|(_, node)| node.rrsets.len()).sum();
        let mut bytes = Vec::with_capacity(size);
        let mut entries = Vec::with_capacity(nodes.len());
        let mut rrsets = Vec::with_capacity(rrset_count);
        let mut rrsets_start = 0;
        for (key, node) in &nodes {
            let key = key.as_labels().wire();
            entries.push(NodeEntry {
                key_start: offset(bytes.len()),
                key_len: u8::try_from(key.len()).expect("a relative name is at most 255 bytes"),
                rrset_count: u8::try_from(node.rrsets.len()).expect("a handful of RRsets a name"),
                rrsets_start: offset(rrsets_start),
            });
            rrsets_start += node.rrsets.len();
            bytes.extend_from_slice(key);
        }
        // The keys first, then every RRset's bytes in the order of the
        // entries: each name's RRsets start where `rrsets_start` said.
        for (_, node) in &nodes {
            for rrset in &node.rrsets {
                let wire = &rrset.wire;
                rrsets.push(RrSetEntry {
                    rtype: rrset.rtype,
                    tier: rrset.tier,
                    start: offset(bytes.len()),
                    len: short(wire.tail.len()),
                    answers_end: short(wire.answers_end),
                    answer_count: wire.answer_count,
                    additional_count: wire.additional_count,
                });
                bytes.extend_from_slice(&wire.tail);
            }
        }
        Self {
            bytes: bytes.into_boxed_slice(),
            nodes: entries.into_boxed_slice(),
            rrsets: rrsets.into_boxed_slice(),
        }
    }

    /// One name, the relative empty one.
    pub(super) fn single(node: BuiltNode) -> Self {
        Self::pack(vec![(LabelKey::root(), node)])
    }

    /// True without any name.
    pub(super) fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The first name's node; an empty node without any name.
    pub(super) fn first(&self) -> Node<'_> {
        self.nodes
            .first()
            .map_or(Node::EMPTY, |entry| self.node(entry))
    }

    /// Every name with its node, in [`node_order`].
    pub(super) fn iter(&self) -> impl ExactSizeIterator<Item = (Labels<'_>, Node<'_>)> {
        self.nodes
            .iter()
            .map(|entry| (self.key(entry), self.node(entry)))
    }

    /// The node of `relative` (wire-form labels), by binary search.
    #[inline]
    pub(super) fn find(&self, relative: &[u8]) -> Option<Node<'_>> {
        let at = self
            .nodes
            .binary_search_by(|entry| node_order(self.key(entry).wire(), relative))
            .ok()?;
        Some(self.node(&self.nodes[at]))
    }

    #[inline]
    fn key(&self, entry: &NodeEntry) -> Labels<'_> {
        let start = entry.key_start as usize;
        Labels::from_wire(&self.bytes[start..start + usize::from(entry.key_len)])
    }

    #[inline]
    fn node(&self, entry: &NodeEntry) -> Node<'_> {
        let start = entry.rrsets_start as usize;
        Node {
            bytes: &self.bytes,
            rrsets: &self.rrsets[start..start + usize::from(entry.rrset_count)],
        }
    }
}

/// The order of a service's names: by length, then by bytes. Most keys of
/// a service differ in length, so the binary search of a lookup compares
/// bytes only at the end, and the service name itself (the empty key, the
/// most asked) comes first; a plain byte order called `memcmp` at every
/// step and cost the fast path 9 % more CPU per query.
fn node_order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// An offset into a service's packed tables.
fn offset(at: usize) -> u32 {
    u32::try_from(at).expect("a service's names take less than 4 GiB")
}

/// A length inside one precompiled answer.
fn short(len: usize) -> u16 {
    u16::try_from(len).expect("a precompiled answer fits one DNS message")
}

/// The RRsets at one name, read in place. No RRsets means an empty
/// non-terminal: the name exists (NODATA), but only because names below it
/// do.
#[derive(Debug, Clone, Copy)]
pub struct Node<'z> {
    bytes: &'z [u8],
    rrsets: &'z [RrSetEntry],
}

impl<'z> Node<'z> {
    /// A node without RRsets.
    const EMPTY: Node<'static> = Node {
        bytes: &[],
        rrsets: &[],
    };

    /// The RRset of `rtype`, if the node has one.
    #[inline]
    pub fn get(self, rtype: RecordType) -> Option<RrSet<'z>> {
        self.rrsets
            .iter()
            .find(|r| r.rtype == rtype)
            .map(|r| r.view(self.bytes))
    }

    /// All RRsets of this node.
    pub fn rrsets(self) -> impl ExactSizeIterator<Item = RrSet<'z>> {
        self.rrsets.iter().map(move |r| r.view(self.bytes))
    }

    /// True for an empty non-terminal.
    pub fn is_empty(self) -> bool {
        self.rrsets.is_empty()
    }
}

/// One RRset at one owner name, in its precompiled wire form (answer
/// records, then the address records of SRV targets for the additional
/// section): compressed wire data is several times smaller than hickory
/// `Record`s, and neither DNS path needs anything else. Writers that need
/// records (`/explain`, master files) decode them with [`RrSet::records`]
/// each time: both are rare.
#[derive(Debug, Clone, Copy)]
pub struct RrSet<'z> {
    /// The record type of the answers.
    pub rtype: RecordType,
    /// The precompiled answer and additional sections.
    pub wire: Wire<'z>,
    /// The endpoints the answer was taken from, when a local-first import
    /// or the serving fallback chose them ([`super::tier`]); `None` for
    /// every other answer. Answers with a tier are counted by it.
    pub tier: Option<Tier>,
}

/// An RRset as hickory records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Records {
    /// The answer section.
    pub answers: Vec<Record>,
    /// The additional section: addresses of SRV targets.
    pub additionals: Vec<Record>,
}

impl RrSet<'_> {
    /// The answer and additional records, decoded from the wire form.
    /// `owner` is the owner name (any letter case). `None` only if the
    /// precompiled bytes do not decode, which would be a bug; it is logged.
    pub fn records(&self, owner: &Name) -> Option<Records> {
        match self.wire.decode(&owner.to_lowercase(), self.rtype) {
            Ok((answers, additionals)) => Some(Records {
                answers,
                additionals,
            }),
            Err(error) => {
                tracing::error!(name = %owner, rtype = %self.rtype, %error, "precompiled answer does not decode");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::RData;
    use hickory_proto::rr::rdata::A;

    fn a_node(owner: &Name, last: u8) -> BuiltNode {
        let mut node = BuiltNode::default();
        let record = Record::from_rdata(owner.clone(), 5, RData::A(A::new(10, 0, 0, last)));
        node.push(owner, RecordType::A, vec![record], vec![]);
        node
    }

    /// Per name, its wire labels and its RRsets' types and bytes.
    type Layout = Vec<(Vec<u8>, Vec<(RecordType, Vec<u8>)>)>;

    #[test]
    fn packed_names_read_back_as_built() {
        let base = Name::from_ascii("db.ns.svc.clusterset.local.").unwrap();
        let web = Name::from_ascii("web-0.c1.db.ns.svc.clusterset.local.").unwrap();
        let built = vec![
            (LabelKey::root(), a_node(&base, 1)),
            (LabelKey::new(&["c1"]).unwrap(), BuiltNode::default()),
            (LabelKey::new(&["web-0", "c1"]).unwrap(), a_node(&web, 2)),
        ];
        let expected: Layout = built
            .iter()
            .map(|(key, node)| {
                let rrsets = node
                    .rrsets
                    .iter()
                    .map(|r| (r.rtype, r.wire.tail.to_vec()))
                    .collect();
                (key.as_labels().wire().to_vec(), rrsets)
            })
            .collect();
        let names = Names::pack(built);
        assert_eq!(names.iter().len(), 3);
        let read: Layout = names
            .iter()
            .map(|(key, node)| {
                let rrsets = node
                    .rrsets()
                    .map(|r| (r.rtype, r.wire.tail.to_vec()))
                    .collect();
                (key.wire().to_vec(), rrsets)
            })
            .collect();
        assert_eq!(read, expected);

        let found = names.find(b"\x05web-0\x02c1").expect("web-0.c1");
        let records = found.get(RecordType::A).unwrap().records(&web).unwrap();
        assert_eq!(records.answers[0].data, RData::A(A::new(10, 0, 0, 2)));
        assert!(found.get(RecordType::AAAA).is_none());
        assert!(names.find(b"\x02c1").unwrap().is_empty());
        assert!(names.find(b"\x02c2").is_none());
        assert_eq!(
            names.first().get(RecordType::A).unwrap().wire.answer_count,
            1
        );
    }

    /// The tables' entries stay as small as docs/benchmarks.md says: one
    /// of each per name and per RRset of the zone.
    #[test]
    fn entries_are_12_and_20_bytes() {
        assert_eq!(std::mem::size_of::<NodeEntry>(), 12);
        assert_eq!(std::mem::size_of::<RrSetEntry>(), 20);
    }

    #[test]
    fn no_names_is_an_empty_first_node() {
        let names = Names::default();
        assert!(names.is_empty());
        assert!(names.first().is_empty());
        assert_eq!(names.iter().len(), 0);
    }
}
