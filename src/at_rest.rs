//! How objects are held at rest, the same for the DNS index and the
//! controller's stores: one interner for what repeats across objects, and
//! one list type for what is nearly always one item. (The DNS index packs
//! each slice's endpoints whole instead: `crate::model::Endpoints`.)

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Arc;

/// One shared copy of each value held many times (namespaces, service
/// names, cluster ids, label keys and values, port lists).
///
/// Entries nothing else holds any more are forgotten by a sweep, which
/// runs when a new entry arrives once the entries added since the last
/// sweep are at least as many as it kept (and at least
/// [`Interner::FIRST_SWEEP`] in all): sweeping costs a constant per entry
/// added, and values of deleted objects do not pile up.
#[derive(Debug)]
pub struct Interner<T: ?Sized> {
    values: HashSet<Arc<T>>,
    sweep_at: usize,
}

impl<T: ?Sized> Default for Interner<T> {
    fn default() -> Self {
        Self {
            values: HashSet::new(),
            sweep_at: Self::FIRST_SWEEP,
        }
    }
}

impl<T: ?Sized> Interner<T> {
    /// How many entries it holds before its first sweep.
    pub const FIRST_SWEEP: usize = 1024;
}

impl<T: ?Sized + Eq + Hash> Interner<T> {
    /// The shared copy of `value`, made from it when there is none.
    pub fn intern(&mut self, value: &T) -> Arc<T>
    where
        Arc<T>: for<'a> From<&'a T>,
    {
        if let Some(shared) = self.values.get(value) {
            return shared.clone();
        }
        self.insert(Arc::from(value))
    }

    /// The shared copy of `value`, which becomes it when there is none.
    pub fn share(&mut self, value: &Arc<T>) -> Arc<T> {
        if let Some(shared) = self.values.get(value) {
            return shared.clone();
        }
        self.insert(value.clone())
    }

    fn insert(&mut self, value: Arc<T>) -> Arc<T> {
        if self.values.len() >= self.sweep_at {
            self.values.retain(|v| Arc::strong_count(v) > 1);
            self.sweep_at = (self.values.len() * 2).max(Self::FIRST_SWEEP);
        }
        self.values.insert(value.clone());
        value
    }

    /// Number of entries held (some may be unused until the next sweep).
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// A list that is nearly always one item (the addresses of an endpoint in
/// the controller's stores): the one held inline, several in a heap block of their own. Reads as a
/// slice. For an endpoint's one address that is no allocation, where a
/// boxed slice of one costs a heap block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OneOrMany<T> {
    /// The one item.
    One(T),
    /// Two or more (or none, which the callers' validation refuses).
    Many(Box<[T]>),
}

impl<T> std::ops::Deref for OneOrMany<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            Self::One(item) => std::slice::from_ref(item),
            Self::Many(items) => items,
        }
    }
}

impl<T> From<Vec<T>> for OneOrMany<T> {
    fn from(mut items: Vec<T>) -> Self {
        if items.len() == 1
            && let Some(one) = items.pop()
        {
            return Self::One(one);
        }
        Self::Many(items.into_boxed_slice())
    }
}

impl<T> FromIterator<T> for OneOrMany<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        iter.into_iter().collect::<Vec<_>>().into()
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    #[test]
    fn equal_values_share_one_copy_however_they_arrive() {
        let mut strings: Interner<str> = Interner::default();
        let a = strings.intern("shop");
        let b = strings.share(&Arc::from("shop"));
        assert!(Arc::ptr_eq(&a, &b));
        let mut lists: Interner<[u16]> = Interner::default();
        let p = lists.share(&Arc::from(vec![80, 443]));
        let q = lists.intern(&[80, 443][..]);
        assert!(Arc::ptr_eq(&p, &q));
        assert!(!Arc::ptr_eq(&p, &lists.intern(&[80][..])));
    }

    #[test]
    fn a_sweep_forgets_what_nothing_else_holds_once_enough_was_added() {
        let mut strings: Interner<str> = Interner::default();
        let kept = strings.intern("kept");
        let first = Interner::<str>::FIRST_SWEEP;
        for i in 0..first - 1 {
            strings.intern(&format!("gone-{i}"));
        }
        assert_eq!(strings.len(), first, "nothing swept before the first sweep");
        strings.intern("next");
        assert_eq!(
            strings.len(),
            2,
            "only what something holds, and the new one"
        );
        assert!(Arc::ptr_eq(&kept, &strings.intern("kept")));
        // Sweeping costs a constant per entry added, whatever the size.
        for i in 0..3 * first {
            strings.intern(&format!("again-{i}"));
            assert!(strings.len() <= 2 * first + 2, "{i}: {}", strings.len());
        }
    }

    #[test]
    fn one_item_is_held_inline_and_any_other_count_in_a_block() {
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        let one: OneOrMany<IpAddr> = vec![ip("10.0.0.1")].into();
        assert!(matches!(one, OneOrMany::One(_)));
        assert_eq!(&one[..], &[ip("10.0.0.1")]);
        let two: OneOrMany<IpAddr> = ["10.0.0.1", "fd00::1"].into_iter().map(ip).collect();
        assert!(matches!(two, OneOrMany::Many(_)));
        assert_eq!(two.len(), 2);
        let none: OneOrMany<IpAddr> = Vec::new().into();
        assert!(none.is_empty());
        // Inline, an address costs no more than the block's pointer and length.
        assert_eq!(std::mem::size_of::<OneOrMany<IpAddr>>(), 24);
    }
}
