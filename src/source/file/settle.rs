//! When a changed manifest may be parsed: the decision, apart from the
//! clock and the file system so that it can be tested on its own. Owns the
//! settle and writer rules; doesn't read files or events.

use std::time::Instant;

use super::{SETTLE, Stamp, WRITER_TIMEOUT};

/// When a changed file may be parsed: once it has stayed the same version
/// for [`SETTLE`], and no writer is at work on it (a write seen without its
/// close, for at most [`WRITER_TIMEOUT`]).
#[derive(Debug, Default)]
pub(super) struct Settle {
    /// The changed version seen, and since when.
    seen: Option<(Stamp, Instant)>,
    /// When a write without a close after it was last seen.
    writing: Option<Instant>,
}

impl Settle {
    /// Notes what inotify said of the writer.
    pub(super) fn writer(&mut self, writing: Option<bool>, now: Instant) {
        match writing {
            Some(true) => self.writing = Some(now),
            Some(false) => self.writing = None,
            None => {}
        }
    }

    /// Whether `current`, a version not loaded yet, may be parsed `now`.
    pub(super) fn ready(&mut self, current: Stamp, now: Instant) -> bool {
        match self.seen {
            Some((stamp, since)) if stamp == current => {
                now >= since + SETTLE
                    && self.writing.is_none_or(|last| now >= last + WRITER_TIMEOUT)
            }
            _ => {
                self.seen = Some((current, now));
                false
            }
        }
    }

    /// Whether a writer is still known to have the file open, for longer
    /// than [`WRITER_TIMEOUT`].
    pub(super) fn writer_timed_out(&self, now: Instant) -> bool {
        self.writing
            .is_some_and(|last| now >= last + WRITER_TIMEOUT)
    }

    /// When the version waiting was first seen.
    pub(super) fn since(&self) -> Option<Instant> {
        self.seen.map(|(_, since)| since)
    }

    /// When to look again: the end of the settle interval of the version
    /// waiting (the writer's close wakes the watcher through inotify).
    pub(super) fn wake_at(&self) -> Option<Instant> {
        self.seen.map(|(_, since)| since + SETTLE)
    }

    /// Nothing waits any more (loaded, or the served version is back).
    pub(super) fn forget(&mut self) {
        self.seen = None;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn version(len: u64) -> Stamp {
        Stamp {
            modified: None,
            changed: (0, 0),
            len,
            inode: 1,
        }
    }

    #[test]
    fn a_change_is_parsed_once_it_has_settled_and_its_writer_is_done() {
        let t0 = Instant::now();
        let mut settle = Settle::default();
        // Seen first: wait the settle interval.
        assert!(!settle.ready(version(1), t0));
        assert_eq!(settle.wake_at(), Some(t0 + SETTLE));
        assert!(!settle.ready(version(1), t0 + SETTLE / 2));
        // Changed again: the interval starts over.
        assert!(!settle.ready(version(2), t0 + SETTLE));
        assert!(!settle.ready(version(2), t0 + SETTLE + SETTLE / 2));
        assert!(settle.ready(version(2), t0 + 2 * SETTLE));
        assert_eq!(settle.since(), Some(t0 + SETTLE));

        // A writer at work (a write seen, no close): not even a long pause
        // makes the file ready, until it closes or times out.
        let mut settle = Settle::default();
        settle.writer(Some(true), t0);
        assert!(!settle.ready(version(3), t0));
        assert!(!settle.ready(version(3), t0 + Duration::from_secs(5)));
        settle.writer(None, t0 + Duration::from_secs(5));
        assert!(!settle.ready(version(3), t0 + Duration::from_secs(5)));
        assert!(!settle.writer_timed_out(t0 + Duration::from_secs(5)));
        assert!(settle.ready(version(3), t0 + WRITER_TIMEOUT));
        assert!(settle.writer_timed_out(t0 + WRITER_TIMEOUT));
        settle.writer(Some(false), t0 + WRITER_TIMEOUT);
        assert!(settle.ready(version(3), t0 + WRITER_TIMEOUT));
        settle.forget();
        assert_eq!(settle.wake_at(), None);
    }
}
