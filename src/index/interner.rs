//! One shared copy of each string and port list the index holds many
//! times: namespaces (in every key), service names (in the import, each
//! of its slices, its zone and every change set), cluster ids and the
//! port lists of slices (the same for nearly every slice of a service).
//! At 10,000 services and 28,788 slices, separate copies were 17 heap
//! blocks per slice (`cargo bench --bench heap`).

use std::collections::HashSet;
use std::sync::Arc;

use crate::model::{Port, ServiceRef};

/// Interned strings and port lists. Entries nothing else holds any more
/// are dropped by [`Interner::sweep`].
#[derive(Debug, Default)]
pub(super) struct Interner {
    strings: HashSet<Arc<str>>,
    ports: HashSet<Arc<[Port]>>,
    /// Entries added since the last sweep.
    added: usize,
}

impl Interner {
    /// The shared copy of `value`.
    pub(super) fn string(&mut self, value: &Arc<str>) -> Arc<str> {
        if let Some(shared) = self.strings.get(value) {
            return shared.clone();
        }
        self.added += 1;
        self.strings.insert(value.clone());
        value.clone()
    }

    /// `service` made of shared strings.
    pub(super) fn service(&mut self, service: &ServiceRef) -> ServiceRef {
        ServiceRef {
            namespace: self.string(&service.namespace),
            name: self.string(&service.name),
        }
    }

    /// The shared copy of a port list.
    pub(super) fn ports(&mut self, ports: &Arc<[Port]>) -> Arc<[Port]> {
        if let Some(shared) = self.ports.get(ports) {
            return shared.clone();
        }
        self.added += 1;
        self.ports.insert(ports.clone());
        ports.clone()
    }

    /// Forgets the entries only the interner holds, once at least as many
    /// were added since the last sweep as it holds (so sweeping costs a
    /// constant per entry added).
    pub(super) fn sweep(&mut self) {
        if self.added == 0 || self.added < self.strings.len() + self.ports.len() {
            return;
        }
        self.strings.retain(|s| Arc::strong_count(s) > 1);
        self.ports.retain(|p| Arc::strong_count(p) > 1);
        self.added = 0;
    }

    /// How many entries it holds.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.strings.len() + self.ports.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PortProtocol;

    #[test]
    fn equal_values_share_one_copy() {
        let mut interner = Interner::default();
        let a = interner.string(&Arc::from("shop"));
        let b = interner.string(&Arc::from("shop"));
        assert!(Arc::ptr_eq(&a, &b));
        let port = |name: &str| Port {
            name: Some(name.into()),
            protocol: PortProtocol::Tcp,
            port: 80,
        };
        let p = interner.ports(&Arc::from(vec![port("http")]));
        let q = interner.ports(&Arc::from(vec![port("http")]));
        let r = interner.ports(&Arc::from(vec![port("web")]));
        assert!(Arc::ptr_eq(&p, &q));
        assert!(!Arc::ptr_eq(&p, &r));
        let s = interner.service(&ServiceRef::new("shop", "cart"));
        let t = interner.service(&ServiceRef::new("Shop", "cart"));
        assert!(Arc::ptr_eq(&s.namespace, &a) && Arc::ptr_eq(&s.name, &t.name));
    }

    #[test]
    fn a_sweep_forgets_what_nothing_else_holds() {
        let mut interner = Interner::default();
        let kept = interner.string(&Arc::from("kept"));
        for i in 0..10 {
            interner.string(&Arc::from(format!("gone-{i}")));
        }
        assert_eq!(interner.len(), 11);
        interner.sweep();
        assert_eq!(interner.len(), 1);
        assert!(Arc::ptr_eq(&kept, &interner.string(&Arc::from("kept"))));
    }
}
