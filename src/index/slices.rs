//! The index's EndpointSlices: each in a slot of one vector, found by key
//! through a table of slot numbers.
//!
//! A map from key to slice keeps the key and a pointer in every bucket,
//! and its buckets come in powers of two, most of them empty: 28,788
//! slices took 65,536 buckets of 40 bytes. Here a bucket is a 4-byte slot
//! number, the key lives with its slice, and a service lists its slices by
//! slot number too (4 bytes where a key took 32).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::SliceKey;
use crate::model::SliceEndpoints;

/// The number of a slice's slot: stable while the slice is held, reused
/// once it is removed.
pub(super) type SliceId = u32;

/// A slice and the key it is held under.
#[derive(Debug)]
pub(super) struct HeldSlice {
    pub key: SliceKey,
    pub slice: SliceEndpoints,
}

/// The slices by key and by slot.
#[derive(Debug, Default)]
pub(super) struct Slices {
    /// Boxed: a slot left empty by a removal costs a pointer, not a slice.
    slots: Vec<Option<Box<HeldSlice>>>,
    /// Empty slots, reused before the vector grows.
    free: Vec<SliceId>,
    by_key: HashTable<SliceId>,
    /// SipHash with a random key, as the standard maps use: slice names
    /// come from outside.
    hasher: RandomState,
}

impl Slices {
    /// Number of slices held.
    pub(super) fn len(&self) -> usize {
        self.by_key.len()
    }

    /// The slot of `key`, if held.
    pub(super) fn find(&self, key: &SliceKey) -> Option<SliceId> {
        let hash = self.hasher.hash_one(key);
        self.by_key
            .find(hash, |id| self.at(*id).key == *key)
            .copied()
    }

    /// The slice held under `key`.
    pub(super) fn get(&self, key: &SliceKey) -> Option<&HeldSlice> {
        self.find(key).map(|id| self.at(id))
    }

    /// The slice in slot `id`, which must be held.
    pub(super) fn at(&self, id: SliceId) -> &HeldSlice {
        slot(&self.slots, id)
    }

    /// Holds `slice` under `key`: in the slot it had, or a new one.
    /// Returns the slot and the slice it replaced.
    pub(super) fn insert(
        &mut self,
        key: SliceKey,
        slice: SliceEndpoints,
    ) -> (SliceId, Option<HeldSlice>) {
        let held = Box::new(HeldSlice { key, slice });
        if let Some(id) = self.find(&held.key) {
            let old = self.slots[id as usize].replace(held);
            return (id, old.map(|old| *old));
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = Some(held);
                id
            }
            None => {
                let id =
                    SliceId::try_from(self.slots.len()).expect("fewer than 2^32 EndpointSlices");
                self.slots.push(Some(held));
                id
            }
        };
        let Self {
            slots,
            by_key,
            hasher,
            ..
        } = self;
        let hash = hasher.hash_one(&slot(slots, id).key);
        by_key.insert_unique(hash, id, |id| hasher.hash_one(&slot(slots, *id).key));
        (id, None)
    }

    /// Removes the slice held under `key`, returning its slot and it.
    pub(super) fn remove(&mut self, key: &SliceKey) -> Option<(SliceId, HeldSlice)> {
        let hash = self.hasher.hash_one(key);
        let slots = &mut self.slots;
        let entry = self
            .by_key
            .find_entry(hash, |id| slot(slots, *id).key == *key)
            .ok()?;
        let (id, _) = entry.remove();
        let held = slots[id as usize]
            .take()
            .expect("a slot in the table holds a slice");
        self.free.push(id);
        Some((id, *held))
    }

    /// The keys of every slice held.
    pub(super) fn keys(&self) -> impl Iterator<Item = &SliceKey> {
        self.slots.iter().flatten().map(|held| &held.key)
    }
}

/// The slice in slot `id` of `slots`, which must be held.
fn slot(slots: &[Option<Box<HeldSlice>>], id: SliceId) -> &HeldSlice {
    slots[id as usize]
        .as_deref()
        .expect("a slot in the table holds a slice")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ServiceRef;

    fn slice(service: &str, endpoints: u32) -> SliceEndpoints {
        SliceEndpoints {
            service: ServiceRef::new("prod", service),
            cluster: "a".into(),
            ports: Vec::new().into(),
            endpoints: Default::default(),
            serving: Default::default(),
            not_ready: endpoints,
            serving_count: 0,
        }
    }

    #[test]
    fn a_slice_is_found_by_its_key_in_the_slot_it_was_given() {
        let mut slices = Slices::default();
        let (a, old) = slices.insert(SliceKey::new("prod", "a"), slice("db", 1));
        assert!(old.is_none());
        let (b, _) = slices.insert(SliceKey::new("prod", "b"), slice("db", 2));
        assert_ne!(a, b);
        assert_eq!(slices.find(&SliceKey::new("prod", "a")), Some(a));
        assert_eq!(slices.at(b).slice.not_ready, 2);
        assert_eq!(slices.find(&SliceKey::new("other", "a")), None);
        assert_eq!(slices.len(), 2);
    }

    #[test]
    fn a_replaced_slice_keeps_its_slot_and_is_returned() {
        let mut slices = Slices::default();
        let (id, _) = slices.insert(SliceKey::new("prod", "a"), slice("db", 1));
        let (again, old) = slices.insert(SliceKey::new("prod", "a"), slice("web", 3));
        assert_eq!(again, id);
        assert_eq!(old.map(|old| old.slice.not_ready), Some(1));
        assert_eq!(slices.at(id).slice.service, ServiceRef::new("prod", "web"));
        assert_eq!(slices.len(), 1);
    }

    #[test]
    fn a_removed_slice_frees_its_slot_for_the_next() {
        let mut slices = Slices::default();
        let (a, _) = slices.insert(SliceKey::new("prod", "a"), slice("db", 1));
        slices.insert(SliceKey::new("prod", "b"), slice("db", 2));
        let (removed, held) = slices.remove(&SliceKey::new("prod", "a")).expect("held");
        assert_eq!((removed, held.key), (a, SliceKey::new("prod", "a")));
        assert!(slices.remove(&SliceKey::new("prod", "a")).is_none());
        assert_eq!(
            slices
                .get(&SliceKey::new("prod", "a"))
                .map(|h| h.slice.not_ready),
            None
        );
        let (c, _) = slices.insert(SliceKey::new("prod", "c"), slice("db", 3));
        assert_eq!(c, a, "the freed slot is reused");
        let mut keys: Vec<_> = slices.keys().map(|key| key.name.to_string()).collect();
        keys.sort();
        assert_eq!(keys, ["b", "c"]);
    }

    #[test]
    fn a_held_slice_takes_at_most_152_bytes() {
        // Each of 10^5 slices pays it (docs/benchmarks.md, "The index's
        // slices in slots").
        assert!(
            std::mem::size_of::<HeldSlice>() <= 152,
            "{}",
            std::mem::size_of::<HeldSlice>()
        );
    }

    #[test]
    fn thousands_of_slices_stay_found_as_the_table_grows_and_shrinks() {
        let mut slices = Slices::default();
        let key = |n: u32| SliceKey::new("prod", &format!("s-{n}"));
        for n in 0..5000 {
            slices.insert(key(n), slice("db", n));
        }
        for n in (0..5000).step_by(2) {
            assert!(slices.remove(&key(n)).is_some());
        }
        for n in 0..5000 {
            let found = slices.get(&key(n)).map(|held| held.slice.not_ready);
            assert_eq!(found, (n % 2 == 1).then_some(n), "slice {n}");
        }
        assert_eq!(slices.len(), 2500);
    }
}
