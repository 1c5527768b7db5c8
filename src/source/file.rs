//! The manifest-file source: loads a YAML manifest, then polls it and
//! reloads on change. A file that fails to load leaves the last good zone in
//! place, logs the error once, and says the source is failing (the
//! `source_stale` metric, `/explain`) until a good version appears.
//! Publishing goes through the shared [`Publisher`].

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use super::manifest::{self, ManifestError};
use crate::explain::SourceReport;
use crate::index::{Index, PublishStats};
use crate::publish::Publisher;
use crate::zone::ZoneSettings;

/// How often the file's metadata is checked.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

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
struct Stamp {
    modified: Option<SystemTime>,
    changed: (i64, i64),
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> io::Result<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path)?;
    Ok(Stamp {
        modified: meta.modified().ok(),
        changed: (meta.ctime(), meta.ctime_nsec()),
        len: meta.len(),
        inode: meta.ino(),
    })
}

/// A manifest file feeding an index.
#[derive(Debug)]
pub struct FileSource {
    path: PathBuf,
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
    /// A source for `path` publishing through `publisher`.
    pub fn new(path: impl Into<PathBuf>, settings: ZoneSettings, publisher: Publisher) -> Self {
        Self {
            path: path.into(),
            index: Index::new(settings),
            publisher,
            changed: None,
            loaded: None,
            parser: manifest::Parser::default(),
        }
    }

    /// Reads, parses and publishes the file. On error nothing changes but
    /// the `reloads_total{result="error"}` count.
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

    fn read_and_load(&mut self) -> Result<PublishStats, FileSourceError> {
        let read_error = |source| FileSourceError::Read {
            path: self.path.clone(),
            source,
        };
        let before = stamp(&self.path).map_err(read_error)?;
        let text = std::fs::read_to_string(&self.path).map_err(read_error)?;
        if text.is_empty() {
            return Err(FileSourceError::Empty {
                path: self.path.clone(),
            });
        }
        let result = self.load_text(&text);
        drop(text);
        super::release_freed_memory();
        if result.is_ok() {
            self.loaded = Some(before);
        }
        result
    }

    /// Parses and publishes `text` as the new content of the source.
    pub fn load_text(&mut self, text: &str) -> Result<PublishStats, FileSourceError> {
        let manifest = self
            .parser
            .parse(text)
            .map_err(|source| FileSourceError::Manifest {
                path: self.path.clone(),
                source,
            })?;
        for skipped in &manifest.skipped {
            tracing::debug!(file = %self.path.display(), "skipped {skipped}");
        }
        self.index.reset_imports(manifest.imports);
        self.index.reset_slices(manifest.slices);
        let (zone, stats) = self.index.publish();
        // The caller releases the memory of the text once it is dropped.
        self.publisher
            .publish(&self.index, zone, stats.rebuilt, self.changed, false);
        self.publisher
            .metrics()
            .reloads
            .with_label_values(&["ok"])
            .inc();
        self.publisher.set_failing(false);
        Ok(stats)
    }

    /// Polls the file until `shutdown` turns true, reloading on change and
    /// answering `/explain` inquiries in between.
    pub async fn watch(mut self, mut shutdown: watch::Receiver<bool>) {
        let mut ticker = tokio::time::interval(POLL_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_error: Option<String> = None;
        let mut failed_stamp: Option<Stamp> = None;
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                inquiry = self.publisher.inquiry() => {
                    let mut report = SourceReport::from_index(&self.index, inquiry.service());
                    report.source_problem = last_error.clone();
                    inquiry.answer(report);
                    continue;
                }
                _ = shutdown.changed() => return,
            }
            let current = match stamp(&self.path) {
                Ok(s) => Some(s),
                Err(e) => {
                    self.report_error(
                        &mut last_error,
                        &FileSourceError::Read {
                            path: self.path.clone(),
                            source: e,
                        },
                    );
                    None
                }
            };
            // Reload on change; after a failure, retry only once the file changes again.
            let Some(current) = current else { continue };
            if Some(current) == self.loaded {
                // The version being served is back (a broken or missing
                // file was replaced by the old one): nothing to load, but
                // the source is no longer failing.
                failed_stamp = None;
                if last_error.take().is_some() {
                    self.publisher.set_failing(false);
                    tracing::info!(file = %self.path.display(), "manifest is the served version again");
                }
                continue;
            }
            if Some(current) == failed_stamp {
                continue;
            }
            self.changed = Some(Instant::now());
            let result = self.load();
            self.changed = None;
            match result {
                Ok(stats) => {
                    failed_stamp = None;
                    if last_error.take().is_some() {
                        tracing::info!(file = %self.path.display(), "manifest is valid again");
                    }
                    tracing::info!(
                        file = %self.path.display(),
                        services_rebuilt = stats.rebuilt,
                        build_ms = stats.elapsed.as_millis() as u64,
                        imports = self.index.import_count(),
                        slices = self.index.slice_count(),
                        "manifest reloaded"
                    );
                }
                Err(e) => {
                    failed_stamp = Some(current);
                    self.report_error(&mut last_error, &e);
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
