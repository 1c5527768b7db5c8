//! Change notification for the manifest file: inotify on the directory that
//! holds the path and on the directory of the file it resolves to, so the
//! watcher learns at once of a rename over the file (an atomic update), a
//! ConfigMap volume swapping its `..data` symlink, and whether a writer is
//! in the middle of an in-place write (`IN_MODIFY` seen, no `IN_CLOSE_WRITE`
//! yet). Owns the inotify descriptor; doesn't decide when to load (see
//! the sibling module `settle`). Where inotify is unavailable,
//! [`Notifier::new`] fails and the source polls alone.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use tokio::io::unix::AsyncFd;

/// The events that can concern the file: writes and their end, and every
/// way a name in the directory can come to point at another file.
const MASK: u32 = libc::IN_MODIFY
    | libc::IN_CLOSE_WRITE
    | libc::IN_MOVED_TO
    | libc::IN_MOVED_FROM
    | libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_ATTRIB;

/// Size of `struct inotify_event` without its name.
const EVENT_HEADER: usize = 16;

/// What a batch of events said.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Batch {
    /// The writer state of the file, by its last event in the batch:
    /// `Some(true)` a write without a close after it, `Some(false)` closed
    /// after writing, `None` neither.
    pub(super) writing: Option<bool>,
}

/// An inotify instance watching the directories of one file.
#[derive(Debug)]
pub(super) struct Notifier {
    fd: AsyncFd<File>,
    /// `(watch descriptor, name in that directory)` of the path and of the
    /// file it resolves to.
    names: Vec<(i32, OsString)>,
    buffer: Vec<u8>,
}

impl Notifier {
    /// Watches the directories of `path` and of the file it resolves to.
    pub(super) fn new(path: &Path) -> io::Result<Self> {
        #[allow(unsafe_code)]
        // SAFETY: inotify_init1 takes no pointers; a non-negative result is
        // a new descriptor that nothing else owns.
        let fd = unsafe {
            let fd = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            OwnedFd::from_raw_fd(fd)
        };
        #[allow(unsafe_code)]
        // SAFETY: the `File` owns the descriptor and keeps it open, the
        // same one, for as long as the `AsyncFd` holds the `File`.
        let fd = unsafe {
            AsyncFd::register_with_interest(File::from(fd), tokio::io::Interest::READABLE)
        }
        .map_err(io::Error::from)?;
        let mut notifier = Self {
            fd,
            names: Vec::new(),
            buffer: vec![0; 64 * 1024],
        };
        notifier.follow(path)?;
        Ok(notifier)
    }

    /// (Re)watches the directories of `path` and of its target: after a
    /// ConfigMap update the target lives in a new directory.
    pub(super) fn follow(&mut self, path: &Path) -> io::Result<()> {
        let mut names = Vec::with_capacity(2);
        let mut places = vec![path.to_path_buf()];
        if let Ok(target) = std::fs::canonicalize(path)
            && target != path
        {
            places.push(target);
        }
        for place in places {
            let (Some(dir), Some(name)) = (place.parent(), place.file_name()) else {
                continue;
            };
            let dir = if dir.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                dir.to_path_buf()
            };
            let wd = self.add_watch(&dir)?;
            names.push((wd, name.to_os_string()));
        }
        self.names = names;
        Ok(())
    }

    fn add_watch(&self, dir: &Path) -> io::Result<i32> {
        let dir = CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
        #[allow(unsafe_code)]
        // SAFETY: the descriptor is ours and open; `dir` is a valid
        // NUL-terminated string that outlives the call.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), dir.as_ptr(), MASK) };
        if wd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(wd)
    }

    /// Waits for the next batch of events.
    pub(super) async fn next(&mut self) -> io::Result<Batch> {
        loop {
            let mut guard = self.fd.readable().await?;
            let buffer = &mut self.buffer;
            match guard.try_io(|fd| fd.get_ref().read(buffer)) {
                Ok(read) => {
                    let n = read?;
                    return Ok(parse(&self.buffer[..n], &self.names));
                }
                Err(_would_block) => continue,
            }
        }
    }

    /// The events already queued, without waiting: read just before a
    /// load, so that a write that has begun is known about.
    pub(super) fn drain(&mut self) -> Batch {
        let mut batch = Batch::default();
        loop {
            match self.fd.get_ref().read(&mut self.buffer) {
                Ok(n) if n > 0 => {
                    let more = parse(&self.buffer[..n], &self.names);
                    batch.writing = more.writing.or(batch.writing);
                }
                _ => return batch,
            }
        }
    }
}

/// Reads the events in `bytes` (whole `struct inotify_event`s, as one
/// `read` returns them).
fn parse(bytes: &[u8], names: &[(i32, OsString)]) -> Batch {
    let mut batch = Batch::default();
    let mut at = 0;
    while at + EVENT_HEADER <= bytes.len() {
        let field = |i: usize| {
            let start = at + 4 * i;
            u32::from_ne_bytes(bytes[start..start + 4].try_into().expect("4 bytes"))
        };
        let (wd, mask, len) = (field(0) as i32, field(1), field(3) as usize);
        let end = (at + EVENT_HEADER + len).min(bytes.len());
        let name = &bytes[at + EVENT_HEADER..end];
        // The name is padded with NULs to an alignment boundary.
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        let ours = names.iter().any(|(w, n)| *w == wd && n.as_bytes() == name);
        if ours && mask & libc::IN_MODIFY != 0 {
            batch.writing = Some(true);
        }
        if ours && mask & libc::IN_CLOSE_WRITE != 0 {
            batch.writing = Some(false);
        }
        at = end;
    }
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(wd: i32, mask: u32, name: &str) -> Vec<u8> {
        let mut padded = name.as_bytes().to_vec();
        padded.resize(name.len().div_ceil(16) * 16, 0);
        let mut bytes = Vec::new();
        for field in [wd as u32, mask, 0, padded.len() as u32] {
            bytes.extend_from_slice(&field.to_ne_bytes());
        }
        bytes.extend_from_slice(&padded);
        bytes
    }

    #[test]
    fn the_last_event_of_the_file_says_whether_a_writer_is_at_work() {
        let names = [(1, OsString::from("m.yaml"))];
        let batch = |events: &[Vec<u8>]| parse(&events.concat(), &names);
        assert_eq!(batch(&[]).writing, None);
        assert_eq!(
            batch(&[event(1, libc::IN_MODIFY, "m.yaml")]).writing,
            Some(true)
        );
        assert_eq!(
            batch(&[
                event(1, libc::IN_MODIFY, "m.yaml"),
                event(1, libc::IN_CLOSE_WRITE, "m.yaml"),
            ])
            .writing,
            Some(false)
        );
        // Another file, or the same name in another directory, is not ours.
        assert_eq!(
            batch(&[event(1, libc::IN_MODIFY, "m.yaml.tmp")]).writing,
            None
        );
        assert_eq!(batch(&[event(2, libc::IN_MODIFY, "m.yaml")]).writing, None);
    }

    #[tokio::test]
    async fn an_in_place_write_is_seen_until_the_writer_closes() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.yaml");
        std::fs::write(&path, "a: 1\n").unwrap();
        let mut notifier = Notifier::new(&path).unwrap();
        let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all(b"b: 2\n").unwrap();
        let next = tokio::time::timeout(std::time::Duration::from_secs(2), notifier.next());
        assert_eq!(next.await.unwrap().unwrap().writing, Some(true));
        drop(file);
        let next = tokio::time::timeout(std::time::Duration::from_secs(2), notifier.next());
        assert_eq!(next.await.unwrap().unwrap().writing, Some(false));
        assert_eq!(notifier.drain(), Batch::default());
    }
}
