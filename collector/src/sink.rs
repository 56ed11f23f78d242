//! One process image's profile file, to which records go whole or not at all.
//!
//! Records are staged in memory and written to the file in batches that end at a record's
//! end, each at the offset where the file's last whole record ends. When a write fails (a
//! full disk), the file is cut back to that offset and nothing more is written but the end
//! record, which says how many bytes of records were lost: a reader then finds a profile
//! that ends cleanly instead of one with a torn record followed by whatever later writes
//! managed to add (once, a block record that failed its checksum while `dep record` exited 0).

use dep_profile::container::{EndInfo, Metadata, ProfileWriter, RecordKind};
use dep_profile::Width;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Bytes staged before they are written to the file.
const BATCH: usize = 1 << 20;

/// Collects what the [`ProfileWriter`] writes; it cannot fail, so a record is staged whole.
#[derive(Clone, Default)]
struct Staging(Arc<Mutex<Vec<u8>>>);

impl Write for Staging {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A profile being written; see the module's comment.
pub struct ProfileSink {
    path: PathBuf,
    file: File,
    writer: ProfileWriter<Staging>,
    staged: Staging,
    /// Bytes in the file: whole records only.
    durable: u64,
    /// The first write error; after it, only the end record is tried.
    failed: Option<std::io::Error>,
    /// Bytes of records not written because of `failed`.
    lost: u64,
    /// Where each record staged ends in the staging buffer.
    ends: Vec<usize>,
}

/// Why a profile file could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("cannot create {}: {err}", path.display())]
    Create { path: std::path::PathBuf, err: std::io::Error },
    #[error("cannot write {}: {err}", path.display())]
    Write { path: std::path::PathBuf, err: std::io::Error },
    /// The header or metadata record could not be encoded.
    #[error(transparent)]
    Format(#[from] dep_profile::container::ProfileError),
}

impl ProfileSink {
    /// Creates the file and stages its header and metadata record.
    pub fn create(path: &Path, width: Width, level: i32, meta: &Metadata) -> Result<ProfileSink, SinkError> {
        let file = File::create(path).map_err(|err| SinkError::Create { path: path.to_path_buf(), err })?;
        let staged = Staging::default();
        let mut writer = ProfileWriter::new(staged.clone(), width, level)?;
        writer.meta(meta)?;
        let mut sink = ProfileSink { path: path.to_path_buf(), file, writer, staged, durable: 0, failed: None, lost: 0, ends: Vec::new() };
        // The file header and metadata go out at once, as one record: without them the file
        // is no profile, and a later end record must not be written where they belong.
        let header = sink.staged.0.lock().unwrap().len();
        sink.ends.push(header);
        sink.write_staged();
        if let Some(e) = sink.failed.take() {
            return Err(SinkError::Write { path: path.to_path_buf(), err: e });
        }
        Ok(sink)
    }

    /// The profile's address width.
    pub fn width(&self) -> Width {
        self.writer.width()
    }

    /// Appends one record; a write error is kept for [`ProfileSink::finish`] to report.
    pub fn record(&mut self, kind: RecordKind, payload: &[u8]) {
        // Staging cannot fail, so the record is staged whole.
        let _ = self.writer.record(kind, payload);
        let staged = self.staged.0.lock().unwrap().len();
        self.ends.push(staged);
        if staged >= BATCH {
            self.write_staged();
        }
    }

    /// Writes what is staged after the file's whole records; on an error, cuts the file back
    /// to the end of the last record written whole.
    fn write_staged(&mut self) {
        let buf = std::mem::take(&mut *self.staged.0.lock().unwrap());
        let ends = std::mem::take(&mut self.ends);
        if self.failed.is_some() || buf.is_empty() {
            self.lost += buf.len() as u64;
            return;
        }
        let mut done = 0;
        while done < buf.len() {
            match self.file.write_at(&buf[done..], self.durable + done as u64) {
                Ok(0) => {
                    self.fail(std::io::ErrorKind::WriteZero.into(), &buf, &ends, done);
                    return;
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.fail(e, &buf, &ends, done);
                    return;
                }
            }
        }
        self.durable += buf.len() as u64;
    }

    /// `done` bytes of `buf` reached the file: keep its whole records, cut the rest.
    fn fail(&mut self, e: std::io::Error, buf: &[u8], ends: &[usize], done: usize) {
        let keep = ends.iter().copied().take_while(|&end| end <= done).last().unwrap_or(0);
        self.durable += keep as u64;
        // A torn record must not stay in the file. Cutting back only frees space.
        let _ = self.file.set_len(self.durable);
        self.lost += (buf.len() - keep) as u64;
        self.failed.get_or_insert(e);
    }

    /// Writes the end record (with the bytes lost, if any) and everything staged; returns the
    /// one line to report if the profile is incomplete.
    pub fn finish(mut self, exit_status: i32, end_time_ns: u64) -> Option<String> {
        self.write_staged();
        let failed = self.failed.take();
        let end = EndInfo { exit_status, end_time_ns, lost_bytes: self.lost };
        let _ = self.writer.end(&end);
        let staged = self.staged.0.lock().unwrap().len();
        self.ends.push(staged);
        // After a failure the end record is tried once more: cutting back may have freed room.
        self.write_staged();
        let end = if self.failed.is_none() { "with an end record" } else { "without an end record" };
        let e = failed.or(self.failed)?;
        Some(format!(
            "writing {}: {e}: the profile is cut at byte {} {end} ({} bytes of records not written)",
            self.path.display(),
            self.durable,
            self.lost
        ))
    }
}
