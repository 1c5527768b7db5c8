//! The hand-off between the index (one writer) and the DNS server (many
//! readers): an `ArcSwapOption<Zone>`. Readers never take a lock; `None`
//! means no source has finished its first load yet, and the server answers
//! SERVFAIL rather than a false NXDOMAIN.

use std::sync::Arc;

use arc_swap::{ArcSwapOption, Guard};

use crate::zone::Zone;

/// Shared handle to the currently published zone.
#[derive(Debug, Clone, Default)]
pub struct ZoneHandle {
    current: Arc<ArcSwapOption<Zone>>,
}

impl ZoneHandle {
    /// A handle with no zone published yet (not ready).
    pub fn new() -> Self {
        Self::default()
    }

    /// Publishes `zone`; the next query sees it.
    pub fn store(&self, zone: Zone) {
        self.current.store(Some(Arc::new(zone)));
    }

    /// The current zone, if any. Lock-free and allocation-free.
    pub fn load(&self) -> Guard<Option<Arc<Zone>>> {
        self.current.load()
    }

    /// The current zone as an owned `Arc`.
    pub fn load_full(&self) -> Option<Arc<Zone>> {
        self.current.load_full()
    }

    /// True once a zone has been published.
    pub fn is_ready(&self) -> bool {
        self.current.load().is_some()
    }
}
