//! The manifest-file source: loads a YAML manifest, then watches it and
//! reloads on change. A file that fails to load leaves the last good zone in
//! place, logs the error once, and says the source is failing (the
//! `source_stale` metric, `/explain`) until a good version appears.
//! Publishing goes through the shared [`Publisher`].
//!
//! Nothing a file does can stall the server: every read and parse runs on
//! a thread of its own, off the async runtime that serves TCP, the admin
//! endpoint and signals; only regular files are opened for reading (a FIFO
//! or a device is refused from its metadata, and opened, if at all, without
//! blocking); the file's size is capped and the YAML parser's budget is
//! proportional to it (see `manifest`).
//!
//! A change is loaded once its writer is done: after an atomic rename, or
//! after the writer closes the file (inotify `IN_CLOSE_WRITE`), and only
//! once the file has kept the same size, modification time and inode for
//! [`SETTLE`]. Where inotify is unavailable the file is polled, and the
//! settle interval alone guards against a writer caught mid-file.

mod notify;
mod settle;

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{oneshot, watch};

use self::settle::Settle;
use super::manifest::{self, ManifestError};
use crate::index::{Index, PublishStats};
use crate::inquiry::SourceReport;
use crate::publish::Publisher;
use crate::zone::ZoneSettings;

/// How often the file's metadata is checked, inotify or not (inotify wakes
/// the watcher sooner; polling covers file systems it does not see, such as
/// NFS, and a symlink's target moving elsewhere).
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// How long a changed file must stay unchanged (size, modification time,
/// inode) before it is parsed.
pub const SETTLE: Duration = Duration::from_millis(100);

/// How long a writer may keep the file open after its last write before
/// the file is loaded anyway (a process that writes and never closes).
pub const WRITER_TIMEOUT: Duration = Duration::from_secs(10);

/// The default largest manifest read, bytes (64 MiB: three times the
/// 10,000-service benchmark manifest).
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;

/// Why a load failed.
#[derive(Debug, thiserror::Error)]
pub enum FileSourceError {
    /// The file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The path (after following symlinks) is not a regular file.
    #[error(
        "{path} is {kind}, not a regular file; only a regular file (or a symlink to one) is read"
    )]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is: "a directory", "a FIFO", ...
        kind: &'static str,
    },
    /// The file is larger than the configured limit.
    #[error("{path}: {len} bytes, more than the limit of {max} bytes (file_max_bytes)")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size, or how much was read before giving up.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// The file is empty: a writer truncated it and has not written yet,
    /// far more often than someone means "no services at all".
    #[error(
        "{path}: the file is empty (0 bytes); to serve no services, write a comment or `---` into it"
    )]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The file is not a valid manifest.
    #[error("{path}")]
    Manifest {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: ManifestError,
    },
}

/// Identity of one version of the file: if none of these changed, the
/// content did not either (a ConfigMap update swaps a symlink, which changes
/// the inode; an in-place edit changes mtime or size). The inode change time
/// also moves on `chmod` and rename, so a file made readable again, or put
/// back under its name, is looked at again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    modified: Option<SystemTime>,
    changed: (i64, i64),
    len: u64,
    inode: u64,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            modified: meta.modified().ok(),
            changed: (meta.ctime(), meta.ctime_nsec()),
            len: meta.len(),
            inode: meta.ino(),
        }
    }
}

/// The stamp of the file `path` resolves to; `stat` never blocks on what
/// it finds (a FIFO, a device).
fn stamp(path: &Path) -> io::Result<Stamp> {
    std::fs::metadata(path).map(|meta| Stamp::of(&meta))
}

/// What a file type is, for an error, if it is not a regular file.
fn irregular(file_type: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    Some(match file_type {
        t if t.is_file() => return None,
        t if t.is_dir() => "a directory",
        t if t.is_fifo() => "a FIFO (named pipe)",
        t if t.is_char_device() => "a character device",
        t if t.is_block_device() => "a block device",
        t if t.is_socket() => "a socket",
        _ => "not a regular file",
    })
}

/// Reads the manifest at `path`: a regular file (symlinks followed) of at
/// most `max` bytes, in UTF-8. The type is checked before opening, so a
/// FIFO or a device is never opened, and again on the opened descriptor
/// (`fstat`), opened with `O_NONBLOCK`, so a FIFO swapped in between cannot
/// block the read either. Returns the text and the stamp of what was read.
pub fn read_manifest(path: &Path, max: u64) -> Result<(String, Stamp), FileSourceError> {
    let read_error = |source| FileSourceError::Read {
        path: path.to_path_buf(),
        source,
    };
    let (file, meta) = open_manifest(path, max)?;
    // The file may grow while it is read: never read more than the limit.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > max {
        return Err(FileSourceError::TooLarge {
            path: path.to_path_buf(),
            len: bytes.len() as u64,
            max,
        });
    }
    if bytes.is_empty() {
        return Err(FileSourceError::Empty {
            path: path.to_path_buf(),
        });
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        let message = format!("not UTF-8: {}", e.utf8_error());
        read_error(io::Error::new(io::ErrorKind::InvalidData, message))
    })?;
    Ok((text, Stamp::of(&meta)))
}

/// Opens the manifest at `path` for reading, with its metadata: a regular
/// file (after symlinks) of at most `max` bytes, opened without blocking
/// and without becoming a controlling terminal, checked again once open.
fn open_manifest(
    path: &Path,
    max: u64,
) -> Result<(std::fs::File, std::fs::Metadata), FileSourceError> {
    use std::os::unix::fs::OpenOptionsExt;
    let read_error = |source| FileSourceError::Read {
        path: path.to_path_buf(),
        source,
    };
    let check = |meta: &std::fs::Metadata| {
        if let Some(kind) = irregular(meta.file_type()) {
            return Err(FileSourceError::NotRegular {
                path: path.to_path_buf(),
                kind,
            });
        }
        if meta.len() > max {
            return Err(FileSourceError::TooLarge {
                path: path.to_path_buf(),
                len: meta.len(),
                max,
            });
        }
        Ok(())
    };
    check(&std::fs::metadata(path).map_err(read_error)?)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(read_error)?;
    let meta = file.metadata().map_err(read_error)?;
    check(&meta)?;
    Ok((file, meta))
}

/// Runs `job` on a thread of its own and waits for it without blocking the
/// runtime. Not `spawn_blocking`: the runtime waits for its blocking tasks
/// when it shuts down, so a read that never returns (a hung network file
/// system) would hold the process at exit; an own thread is left behind.
async fn off_runtime<T: Send + 'static>(job: impl FnOnce() -> T + Send + 'static) -> T {
    let (sender, receiver) = oneshot::channel();
    std::thread::Builder::new()
        .name("manifest-load".into())
        .spawn(move || {
            let _ = sender.send(job());
        })
        .expect("a thread can be started to load the manifest");
    match receiver.await {
        Ok(value) => value,
        Err(_) => panic!("the manifest load panicked"),
    }
}

/// A manifest file feeding an index.
#[derive(Debug)]
pub struct FileSource {
    path: PathBuf,
    max_bytes: u64,
    index: Index,
    publisher: Publisher,
    /// When the change being loaded was seen, for the publish latency.
    changed: Option<Instant>,
    loaded: Option<Stamp>,
    /// Keeps the last good manifest's documents, so a reload parses only
    /// the documents that changed.
    parser: manifest::Parser,
}

impl FileSource {
    /// A source for `path` publishing through `publisher`, reading files of
    /// at most [`DEFAULT_MAX_BYTES`].
    pub fn new(path: impl Into<PathBuf>, settings: ZoneSettings, publisher: Publisher) -> Self {
        Self {
            path: path.into(),
            max_bytes: DEFAULT_MAX_BYTES,
            index: Index::new(settings),
            publisher,
            changed: None,
            loaded: None,
            parser: manifest::Parser::default(),
        }
    }

    /// Sets the largest file read, in bytes.
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// Reads, parses and publishes the file on the calling thread. On error
    /// nothing changes but the `reloads_total{result="error"}` count. The
    /// server calls [`Self::load_off_runtime`] instead.
    pub fn load(&mut self) -> Result<PublishStats, FileSourceError> {
        let result = self.read_and_load();
        if result.is_err() {
            self.publisher
                .metrics()
                .reloads
                .with_label_values(&["error"])
                .inc();
        }
        result
    }

    /// [`Self::load`] on a thread of its own: the runtime goes on serving
    /// while a large file parses, and whatever the file does.
    pub async fn load_off_runtime(mut self) -> (Self, Result<PublishStats, FileSourceError>) {
        off_runtime(move || {
            let result = self.load();
            (self, result)
        })
        .await
    }

    fn read_and_load(&mut self) -> Result<PublishStats, FileSourceError> {
        let (update, stamp) = match self.read_streamed()? {
            Some(read) => read,
            // Read whole where the stream cannot be parsed a document at a
            // time, or fails: the whole text places an error in the file.
            None => {
                let (text, stamp) = read_manifest(&self.path, self.max_bytes)?;
                let update = self.parse_text(&text);
                // The text goes before the index and the zone are built.
                drop(text);
                (update?, stamp)
            }
        };
        let stats = self.apply_update(update);
        crate::ops::memory::release_freed_memory();
        self.loaded = Some(stamp);
        Ok(stats)
    }

    /// The update read from the file a document at a time, so that its
    /// text (20 MB at 10,000 services) is never in memory whole beside the
    /// objects parsed from it. `None` where it has to be read whole: a
    /// stream with directives, a read error (text that is not UTF-8), an
    /// invalid manifest (whose error the whole text places), a file that is
    /// empty or grew past the limit while it was read.
    fn read_streamed(&mut self) -> Result<Option<(manifest::Update, Stamp)>, FileSourceError> {
        let (file, meta) = open_manifest(&self.path, self.max_bytes)?;
        // The file may grow while it is read: never read more than the limit.
        let mut reader = io::BufReader::new(file.take(self.max_bytes + 1));
        let Ok(update) = self.parser.parse_update_from(&mut reader) else {
            return Ok(None);
        };
        let read = self.max_bytes + 1 - reader.get_ref().limit();
        if read == 0 || read > self.max_bytes {
            // The parser took what it read as the manifest; the whole read
            // reports the error, and the next load starts from nothing.
            self.parser.forget();
            return Ok(None);
        }
        Ok(Some((update, Stamp::of(&meta))))
    }

    /// Parses and publishes `text` as the new content of the source. After
    /// the first load, only the documents that changed reach the index, so
    /// the publish step costs the same whatever the size of the file.
    pub fn load_text(&mut self, text: &str) -> Result<PublishStats, FileSourceError> {
        let update = self.parse_text(text)?;
        Ok(self.apply_update(update))
    }

    /// Parses `text` into what changed since the last load.
    fn parse_text(&mut self, text: &str) -> Result<manifest::Update, FileSourceError> {
        self.parser
            .parse_update(text)
            .map_err(|source| FileSourceError::Manifest {
                path: self.path.clone(),
                source,
            })
    }

    /// Applies a parsed update to the index and publishes the zone.
    fn apply_update(&mut self, update: manifest::Update) -> PublishStats {
        let applying = Instant::now();
        let skipped = update.apply_to(&mut self.index);
        let applied = applying.elapsed();
        for skipped in &skipped {
            tracing::debug!(file = %self.path.display(), "skipped {skipped}");
        }
        let (zone, mut stats) = self.index.publish();
        stats.applied = applied;
        self.publisher
            .publish(&self.index, zone, stats, self.changed, false);
        self.publisher
            .metrics()
            .reloads
            .with_label_values(&["ok"])
            .inc();
        self.publisher.set_failing(false);
        stats
    }

    /// Watches the file until `shutdown` turns true, reloading each change
    /// once its writer is done (module docs) and answering `/explain`
    /// inquiries in between. Loads run off the runtime; shutdown does not
    /// wait for one in progress.
    pub async fn watch(self, mut shutdown: watch::Receiver<bool>) {
        let mut source = self;
        let mut notifier = match notify::Notifier::new(&source.path) {
            Ok(notifier) => Some(notifier),
            Err(error) => {
                tracing::warn!(file = %source.path.display(), %error, "inotify unavailable; polling the manifest every {POLL_INTERVAL:?}");
                None
            }
        };
        let mut ticker = tokio::time::interval(POLL_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut settle = Settle::default();
        let mut last_error: Option<String> = None;
        let mut failed_stamp: Option<Stamp> = None;
        loop {
            let wake = settle.wake_at();
            tokio::select! {
                biased;
                _ = shutdown.changed() => return,
                batch = next_batch(&mut notifier) => match batch {
                    Ok(batch) => settle.writer(batch.writing, Instant::now()),
                    Err(error) => {
                        tracing::warn!(file = %source.path.display(), %error, "inotify failed; polling the manifest every {POLL_INTERVAL:?}");
                        notifier = None;
                    }
                },
                _ = sleep_until(wake) => {}
                _ = ticker.tick() => {}
                inquiry = source.publisher.inquiry() => {
                    let mut report = SourceReport::from_index(&source.index, inquiry.service());
                    report.source_problem = last_error.clone();
                    inquiry.answer(report);
                    continue;
                }
            }
            let current = match stamp(&source.path) {
                Ok(s) => s,
                Err(e) => {
                    source.report_error(
                        &mut last_error,
                        &FileSourceError::Read {
                            path: source.path.clone(),
                            source: e,
                        },
                    );
                    continue;
                }
            };
            if Some(current) == source.loaded {
                // The version being served is back (a broken or missing
                // file was replaced by the old one): nothing to load, but
                // the source is no longer failing.
                failed_stamp = None;
                settle.forget();
                if last_error.take().is_some() {
                    source.publisher.set_failing(false);
                    tracing::info!(file = %source.path.display(), "manifest is the served version again");
                }
                continue;
            }
            // After a failure, retry only once the file changes again.
            if Some(current) == failed_stamp {
                settle.forget();
                continue;
            }
            let now = Instant::now();
            if let Some(notifier) = &mut notifier {
                settle.writer(notifier.drain().writing, now);
            }
            if !settle.ready(current, now) {
                continue;
            }
            if settle.writer_timed_out(now) {
                tracing::warn!(file = %source.path.display(), "the manifest has been open for writing without a close for {WRITER_TIMEOUT:?}; loading it as it is");
            }
            if let Some(notifier) = &mut notifier
                && let Err(error) = notifier.follow(&source.path)
            {
                tracing::debug!(file = %source.path.display(), %error, "cannot watch the manifest's directories");
            }
            source.changed = Some(settle.since().unwrap_or(now));
            let load = source.load_off_runtime();
            let (loaded, result) = tokio::select! {
                out = load => out,
                // The load thread is left to finish on its own.
                _ = shutdown.changed() => return,
            };
            source = loaded;
            source.changed = None;
            settle.forget();
            match result {
                Ok(stats) => {
                    failed_stamp = None;
                    if last_error.take().is_some() {
                        tracing::info!(file = %source.path.display(), "manifest is valid again");
                    }
                    tracing::info!(
                        file = %source.path.display(),
                        services_rebuilt = stats.rebuilt,
                        build_ms = stats.elapsed.as_millis() as u64,
                        imports = source.index.import_count(),
                        slices = source.index.slice_count(),
                        "manifest reloaded"
                    );
                }
                Err(e) => {
                    // The file as it was before the read: if it changed
                    // while being read, that change is looked at again.
                    failed_stamp = Some(current);
                    source.report_error(&mut last_error, &e);
                }
            }
        }
    }

    fn report_error(&mut self, last_error: &mut Option<String>, error: &FileSourceError) {
        self.publisher.set_failing(true);
        let message = crate::error::Chain(error).to_string();
        if last_error.as_deref() != Some(message.as_str()) {
            tracing::error!(error = %message, "manifest not loaded; still serving the last good index");
            *last_error = Some(message);
        }
    }
}

/// The next inotify batch; pending forever without inotify.
async fn next_batch(notifier: &mut Option<notify::Notifier>) -> io::Result<notify::Batch> {
    match notifier {
        Some(notifier) => notifier.next().await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `at`; pending forever for `None`.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_within_the_limit_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.yaml");
        std::fs::write(&path, "a: 1\n").unwrap();
        let (text, stamp) = read_manifest(&path, 5).unwrap();
        assert_eq!((text.as_str(), stamp.len), ("a: 1\n", 5));
        let error = read_manifest(&path, 4).unwrap_err();
        assert!(
            matches!(error, FileSourceError::TooLarge { len: 5, max: 4, .. }),
            "{error}"
        );
        let error = read_manifest(dir.path(), 1 << 20).unwrap_err();
        assert!(error.to_string().contains("is a directory"), "{error}");
        let link = dir.path().join("zero.yaml");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let error = read_manifest(&link, 1 << 20).unwrap_err();
        assert!(error.to_string().contains("a character device"), "{error}");
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        let error = crate::error::Chain(&read_manifest(&path, 5).unwrap_err()).to_string();
        assert!(error.contains("UTF-8"), "{error}");
        std::fs::write(&path, "").unwrap();
        assert!(matches!(
            read_manifest(&path, 5),
            Err(FileSourceError::Empty { .. })
        ));
    }
}
