//! Mangled manifests, as an editor in mid-save or a bad merge leaves them,
//! through the whole reload path (cached parser, index, zone): every one is
//! accepted or rejected with an error, never a panic.

use super::*;
use crate::index::Index;
use crate::zone::ZoneSettings;

const EXAMPLE: &str = include_str!("../../../config/example-clusterset.yaml");
/// Bytes that mean something to YAML or to our fields.
const NASTY: &[u8] = b":-[]{}\"'&*!|>#%@,.?\n\t 0123456789abcdefxyz:-";

/// xorshift64: deterministic, so a failure reproduces.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mangle(text: &str, rng: &mut Rng) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for _ in 0..1 + rng.below(4) {
        // A truncation to nothing leaves nothing to mangle further.
        if bytes.is_empty() {
            break;
        }
        let at = rng.below(bytes.len());
        match rng.below(5) {
            0 => bytes[at] = NASTY[rng.below(NASTY.len())],
            1 => {
                let end = (at + rng.below(40)).min(bytes.len());
                bytes.drain(at..end);
            }
            2 => bytes.insert(at, NASTY[rng.below(NASTY.len())]),
            3 => {
                // Repeat a stretch: duplicated keys, documents, items.
                let end = (at + rng.below(200)).min(bytes.len());
                let stretch = bytes[at..end].to_vec();
                bytes.splice(at..at, stretch);
            }
            _ => bytes.truncate(at),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Over a sequence of accepted and rejected manifests (mangled,
/// documents reordered, some parsed whole for a directive), the deltas
/// of `parse_update` leave the index exactly where replacing it with
/// each whole manifest does.
#[test]
fn deltas_leave_the_index_where_whole_manifests_do() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut parser = Parser::default();
    let settings =
        ZoneSettings::new(hickory_proto::rr::Name::from_ascii("clusterset.local.").unwrap());
    let mut index = Index::new(settings);
    let (mut deltas, mut wholes, mut rejected) = (0, 0, 0);
    for step in 0..600 {
        let mut text = mangle(EXAMPLE, &mut rng);
        if step % 7 == 3 {
            // Documents in another order: no change at all.
            let mut docs: Vec<&str> = EXAMPLE.split("\n---\n").collect();
            let n = docs.len();
            docs.rotate_left(1 + rng.below(n - 1));
            text = docs.join("\n---\n");
        } else if step % 11 == 5 {
            text = format!("%YAML 1.2\n---\n{text}");
        } else if step % 5 == 0 {
            text = EXAMPLE.to_string();
        }
        let update = match parser.parse_update(&text) {
            Ok(update) => update,
            Err(error) => {
                // The whole parse rejects it too.
                assert!(parse(&text).is_err(), "{error}");
                rejected += 1;
                continue;
            }
        };
        match &update {
            Update::Whole(_) => wholes += 1,
            Update::Delta(_) => deltas += 1,
        }
        update.apply_to(&mut index);
        let whole = parse(&text).expect("the whole parse accepts it too");
        assert_eq!(index.import_count(), whole.imports.len(), "{text}");
        assert_eq!(index.slice_count(), whole.slices.len(), "{text}");
        for import in &whole.imports {
            assert_eq!(index.import(&import.service), Some(import), "{text}");
        }
        for (key, slice) in &whole.slices {
            // The index keeps serving endpoints only with the fallback on.
            let mut kept = slice.clone();
            kept.drop_serving();
            assert_eq!(index.slice(key), Some(&kept), "{text}");
        }
        assert_eq!(
            index.own_cluster().id(),
            whole.cluster_id.as_deref(),
            "{text}"
        );
    }
    assert!(
        deltas > 100 && wholes > 20 && rejected > 100,
        "{deltas} deltas, {wholes} whole, {rejected} rejected"
    );
}

#[test]
fn mangled_manifests_are_accepted_or_rejected_never_a_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut parser = Parser::default();
    let mut index = Index::new(ZoneSettings::new(
        hickory_proto::rr::Name::from_ascii("clusterset.local.").unwrap(),
    ));
    let (mut accepted, mut rejected) = (0, 0);
    for _ in 0..800 {
        let text = mangle(EXAMPLE, &mut rng);
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match parser.parse(&text) {
                Ok(manifest) => {
                    index.reset_imports(manifest.imports);
                    index.reset_slices(manifest.slices);
                    index.publish();
                    true
                }
                Err(_) => false,
            }));
        match result {
            Ok(true) => accepted += 1,
            Ok(false) => rejected += 1,
            Err(_) => panic!("panicked on this manifest:\n{text}"),
        }
    }
    // Both outcomes occur, or the mutations test nothing.
    assert!(
        accepted > 100 && rejected > 100,
        "{accepted} accepted, {rejected} rejected"
    );
}
