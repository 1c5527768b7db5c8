//! The hand-off between the index (one writer) and the DNS server (many
//! readers): an `ArcSwapOption<Zone>`. Readers never take a lock; `None`
//! means no source has finished its first load yet, and the server answers
//! SERVFAIL rather than a false NXDOMAIN. The [`Publisher`] is what every
//! source publishes through.

use std::sync::Arc;
use std::time::Instant;

use arc_swap::{ArcSwapOption, Guard};

use crate::index::{Index, PublishStats};
use crate::inquiry::{Inquiries, Inquiry};
use crate::metrics::Metrics;
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

/// What every source does with what it indexed: publishes zones to the
/// [`ZoneHandle`], records the publish metrics, hands memory freed by a
/// large list back, says whether the source is failing (the
/// `source_stale` metric and `/explain`), and receives `/explain`
/// inquiries for the source to answer from its state.
#[derive(Debug)]
pub struct Publisher {
    zone: ZoneHandle,
    metrics: Arc<Metrics>,
    inquiries: Inquiries,
    failing: bool,
}

impl Publisher {
    /// A publisher into `zone`, answering `inquiries`.
    pub fn new(zone: ZoneHandle, metrics: Arc<Metrics>, inquiries: Inquiries) -> Self {
        Self {
            zone,
            metrics,
            inquiries,
            failing: false,
        }
    }

    /// The process metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// True once a zone has been published.
    pub fn is_ready(&self) -> bool {
        self.zone.is_ready()
    }

    /// Serves `zone`, built from `index` as `stats` says, and returns
    /// whether it was the first. `changed` is when the first change it
    /// holds was seen: the publish latency is observed from there, except
    /// for the first zone (an initial load is not a change). The publish
    /// duration (index update, rebuild and swap) is observed likewise.
    /// `after_list`: the zone follows a list or a whole load, so freed
    /// memory is released once it is served.
    pub fn publish(
        &mut self,
        index: &Index,
        zone: Zone,
        stats: PublishStats,
        changed: Option<Instant>,
        after_list: bool,
    ) -> bool {
        let swap = Instant::now();
        self.metrics.record_publish(index, &zone, stats.rebuilt);
        let first = !self.zone.is_ready();
        self.zone.store(zone);
        if !first {
            let duration = stats.applied + stats.elapsed + swap.elapsed();
            self.metrics
                .publish_duration
                .observe(duration.as_secs_f64());
        }
        if !first && let Some(changed) = changed {
            self.metrics
                .publish_latency
                .observe(changed.elapsed().as_secs_f64());
        }
        if after_list {
            crate::ops::memory::release_freed_memory();
        }
        first
    }

    /// Says whether the source is failing: answers come from the last good
    /// index (`source_stale`, and the note `/explain` writes).
    pub fn set_failing(&mut self, failing: bool) {
        self.failing = failing;
        self.metrics.source_stale.set(i64::from(failing));
        self.inquiries.set_source_failing(failing);
    }

    /// Whether the source last said it was failing.
    pub fn failing(&self) -> bool {
        self.failing
    }

    /// The next `/explain` inquiry; pending forever once the admin endpoint
    /// is gone.
    pub async fn inquiry(&mut self) -> Inquiry {
        match self.inquiries.recv().await {
            Some(inquiry) => inquiry,
            None => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zone::ZoneSettings;

    #[test]
    fn the_publisher_serves_zones_and_says_whether_the_source_is_failing() {
        let metrics = Arc::new(Metrics::new());
        let zone = ZoneHandle::new();
        let (explainer, inquiries) = crate::inquiry::channel();
        let mut publisher = Publisher::new(zone.clone(), metrics.clone(), inquiries);
        let mut index = Index::new(ZoneSettings::new(
            hickory_proto::rr::Name::from_ascii("clusterset.local.").unwrap(),
        ));
        let (first, stats) = index.publish();
        assert!(publisher.publish(&index, first, stats, Some(Instant::now()), true));
        assert!(zone.is_ready() && publisher.is_ready());
        // The first zone is no change: no latency or duration observed.
        assert_eq!(metrics.publish_latency.get_sample_count(), 0);
        assert_eq!(metrics.publish_duration.get_sample_count(), 0);
        let (second, mut stats) = index.publish();
        // The source's own index update counts in the publish duration.
        stats.applied = std::time::Duration::from_millis(40);
        assert!(!publisher.publish(&index, second, stats, Some(Instant::now()), false));
        assert_eq!(metrics.publish_latency.get_sample_count(), 1);
        assert_eq!(metrics.publish_duration.get_sample_count(), 1);
        let observed = metrics.publish_duration.get_sample_sum();
        assert!((0.04..1.0).contains(&observed), "{observed}");
        // A change seen by no source (no `changed`) still has a duration.
        let (third, stats) = index.publish();
        assert!(!publisher.publish(&index, third, stats, None, false));
        assert_eq!(metrics.publish_latency.get_sample_count(), 1);
        assert_eq!(metrics.publish_duration.get_sample_count(), 2);

        publisher.set_failing(true);
        assert!(publisher.failing() && explainer.source_failing());
        assert_eq!(metrics.source_stale.get(), 1);
        publisher.set_failing(false);
        assert!(!explainer.source_failing());
        assert_eq!(metrics.source_stale.get(), 0);
    }
}
