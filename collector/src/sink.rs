//! One process image's profile file, to which records go whole or not at all.
//!
//! Records are staged in memory and written to the file in batches that end at a record's
//! end, each at the offset where the file's last whole record ends. When a write fails (a
//! full disk), the file is cut back to that offset and nothing more is written but the end
//! record, which says how many bytes of records were lost: a reader then finds a profile
//! that ends cleanly instead of one with a torn record followed by whatever later writes
//! managed to add (once, a block record that failed its checksum while `dep record` exited 0).
//!
//! The file is written with O_DIRECT where the file system takes it, in whole 4 KiB blocks
//! (the bytes after the last whole block wait for the next batch; the end goes out through
//! an ordinary handle): the page cache gains nothing from a profile written once and read
//! later, and filling it costs the launcher the program's other core. On the 2-core VMs
//! measured, buffered writing of a new file cost 2-3 s of system time per GB (`dd` of 3 GB:
//! 8.9 s buffered, 0.33 s with O_DIRECT), more than compressing it had.

use dep_profile::container::{EndInfo, Metadata, ProfileWriter, RecordKind};
use dep_profile::Width;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Bytes staged before they are written to the file.
const BATCH: usize = 1 << 20;
/// The unit of O_DIRECT writes: their offsets, lengths and memory are multiples of it.
const BLOCK: usize = 4096;

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
    /// Whether `file` was opened with O_DIRECT (and so takes only whole blocks).
    direct: bool,
    /// Bytes in the file.
    written: u64,
    /// Where the file's last whole record ends (the file may hold the start of the next).
    durable: u64,
    /// Staged bytes held back after the last whole block, and where records end in them.
    carry: Vec<u8>,
    carry_ends: Vec<usize>,
    /// Room for a batch at a block-aligned address within it.
    aligned: Vec<u8>,
    /// The buffer of the last batch staged, emptied: the next batch's.
    spare: Vec<u8>,
    /// The first write error; after it, only the end record is tried.
    failed: Option<std::io::Error>,
    /// Bytes of records not written because of `failed`.
    lost: u64,
    /// Where each record staged ends in the staging buffer.
    ends: Vec<usize>,
}

/// Writes all of `b` at `offset`; on an error, the error and the bytes written before it.
fn write_at(file: &File, b: &[u8], offset: u64) -> Result<(), (std::io::Error, usize)> {
    let mut done = 0;
    while done < b.len() {
        match file.write_at(&b[done..], offset + done as u64) {
            Ok(0) => return Err((std::io::ErrorKind::WriteZero.into(), done)),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err((e, done)),
        }
    }
    Ok(())
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
        let create = |flags| File::options().write(true).create(true).truncate(true).custom_flags(flags).open(path);
        let (file, direct) = match create(libc::O_DIRECT) {
            Ok(f) => (f, true),
            // A file system without O_DIRECT refuses it with EINVAL.
            Err(_) => (create(0).map_err(|err| SinkError::Create { path: path.to_path_buf(), err })?, false),
        };
        let staged = Staging::default();
        let mut writer = ProfileWriter::new(staged.clone(), width, level)?;
        writer.meta(meta)?;
        let mut sink = ProfileSink {
            path: path.to_path_buf(),
            file,
            writer,
            staged,
            direct,
            written: 0,
            durable: 0,
            carry: Vec::new(),
            carry_ends: Vec::new(),
            aligned: Vec::new(),
            spare: Vec::new(),
            failed: None,
            lost: 0,
            ends: Vec::new(),
        };
        // The file header and metadata go out at once, as one record: without them the file
        // is no profile, and a later end record must not be written where they belong.
        let header = sink.staged.0.lock().unwrap().len();
        sink.ends.push(header);
        sink.write_staged(false);
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
            self.write_staged(false);
        }
    }

    /// Writes what is staged after the bytes held back, all of it if `last`, else (with
    /// O_DIRECT) up to the last whole block; on an error, cuts the file back to the end of
    /// the last record written whole.
    fn write_staged(&mut self, last: bool) {
        // The staging buffer changes places with the last batch's, emptied: a chunk is
        // megabytes, and staging each in a new buffer cost its growth, page faults and
        // zeroing.
        let mut buf = std::mem::take(&mut self.spare);
        std::mem::swap(&mut buf, &mut *self.staged.0.lock().unwrap());
        self.write_batch(&buf, last);
        buf.clear();
        self.spare = buf;
    }

    /// [`write_staged`](Self::write_staged) with the staged bytes `buf`.
    fn write_batch(&mut self, buf: &[u8], last: bool) {
        let ends = std::mem::take(&mut self.ends);
        if self.failed.is_some() {
            self.lost += (self.carry.len() + buf.len()) as u64;
            self.carry.clear();
            self.carry_ends.clear();
            return;
        }
        // The pending bytes: those held back, then the new ones; record ends among them.
        let held = self.carry.len();
        let mut pending_ends = std::mem::take(&mut self.carry_ends);
        pending_ends.extend(ends.iter().map(|e| e + held));
        let total = held + buf.len();
        if self.direct && !(last && total % BLOCK != 0) {
            let mut aligned = std::mem::take(&mut self.aligned);
            if aligned.len() < total + BLOCK {
                aligned = vec![0; total + BLOCK];
            }
            let at = aligned.as_ptr().align_offset(BLOCK);
            aligned[at..at + held].copy_from_slice(&self.carry);
            aligned[at + held..at + total].copy_from_slice(buf);
            let whole = total / BLOCK * BLOCK;
            let a = &aligned[at..at + total];
            let r = write_at(&self.file, &a[..whole], self.written).or_else(|(e, done)| {
                // A short write can leave the offset off a block (a file size limit), and
                // some file systems refuse some direct writes (EINVAL): the rest goes
                // through an ordinary handle, which fails again if the disk is full.
                self.buffered().map_err(|_| (e, done))?;
                write_at(&self.file, &a[done..whole], self.written + done as u64).map_err(|(e, more)| (e, done + more))
            });
            match r {
                Ok(()) => {
                    self.carry = a[whole..].to_vec();
                    self.settle(&pending_ends, whole);
                }
                Err((e, done)) => self.fail(e, total, &pending_ends, done),
            }
            self.aligned = aligned;
            return;
        }
        // The end is not a whole block: an ordinary handle writes it.
        if let Err(e) = self.buffered() {
            return self.fail(e, total, &pending_ends, 0);
        }
        let mut pending = std::mem::take(&mut self.carry);
        pending.extend_from_slice(buf);
        match write_at(&self.file, &pending, self.written) {
            Ok(()) => self.settle(&pending_ends, total),
            Err((e, done)) => self.fail(e, total, &pending_ends, done),
        }
    }

    /// `done` of the pending bytes reached the file: the records ending there are durable,
    /// the ends after it move to the bytes held back.
    fn settle(&mut self, ends: &[usize], done: usize) {
        self.keep_whole(ends, done);
        self.written += done as u64;
        self.carry_ends = ends.iter().filter(|&&e| e > done).map(|e| e - done).collect();
    }

    /// The pending bytes, which start at `written`, reached the file up to `done`: the last
    /// record ending there is the file's last whole one.
    fn keep_whole(&mut self, ends: &[usize], done: usize) {
        if let Some(&end) = ends.iter().take_while(|&&e| e <= done).last() {
            self.durable = self.written + end as u64;
        }
    }

    /// `done` of `total` pending bytes reached the file: keep its whole records, cut the
    /// rest; later writes go through an ordinary handle (the end record's offset is no
    /// block's).
    fn fail(&mut self, e: std::io::Error, total: usize, ends: &[usize], done: usize) {
        self.keep_whole(ends, done);
        // A torn record must not stay in the file. Cutting back only frees space.
        let _ = self.file.set_len(self.durable);
        self.lost += self.written + total as u64 - self.durable;
        self.written = self.durable;
        self.carry.clear();
        self.carry_ends.clear();
        let _ = self.buffered();
        self.failed.get_or_insert(e);
    }

    /// Goes on through an ordinary handle (for writes that are not whole blocks).
    fn buffered(&mut self) -> std::io::Result<()> {
        if self.direct {
            self.file = File::options().write(true).open(&self.path)?;
            self.direct = false;
        }
        Ok(())
    }

    /// Writes the end record (with the bytes lost, if any) and everything staged; returns the
    /// one line to report if the profile is incomplete.
    pub fn finish(mut self, exit_status: i32, end_time_ns: u64) -> Option<String> {
        // Every record first, so that the end record counts what they lost.
        self.write_staged(true);
        let failed = self.failed.take();
        let end = EndInfo { exit_status, end_time_ns, lost_bytes: self.lost };
        let _ = self.writer.end(&end);
        let staged = self.staged.0.lock().unwrap().len();
        self.ends.push(staged);
        // After a failure the end record is tried once more: cutting back may have freed room.
        self.write_staged(true);
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use dep_profile::container::VERSION;

    /// Metadata of a made-up process, for profiles written in tests.
    pub(crate) fn meta() -> Metadata {
        Metadata {
            format_version: VERSION,
            width: 64,
            command: vec!["t".into()],
            program: "t".into(),
            pid: 1,
            start_time_ns: 0,
            xsave_size: 0,
            truth: false,
            tool: "test".into(),
            parent: None,
            windows: None,
            start_at: None,
            stop_at: None,
            attached: false,
        }
    }

    /// Block records of sizes that put record ends everywhere in a block, some longer than
    /// a batch, and a last block that is not whole.
    fn payloads() -> Vec<Vec<u8>> {
        let mut x = 12345u64;
        (0..300)
            .map(|i| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let len = match i % 50 {
                    0 => (3 << 20) + (x >> 40) as usize % 5000,
                    _ => (x >> 33) as usize % 20000,
                };
                let code = (0..len).map(|k| (k as u64 ^ x) as u8).collect();
                dep_profile::container::BlockEntry { addr: (i as u64 + 1) << 24, version: 0, insn_count: 1, code }.encode()
            })
            .collect()
    }

    /// The bytes the profile writer makes of `payloads` and an end record: what the file
    /// must hold, however it was written.
    fn expected(payloads: &[Vec<u8>], lost: u64) -> Vec<u8> {
        let mut w = ProfileWriter::new(Vec::new(), Width::W64, 1).unwrap();
        w.meta(&meta()).unwrap();
        for p in payloads {
            w.record(RecordKind::Block, p).unwrap();
        }
        w.end(&EndInfo { exit_status: 3, end_time_ns: 9, lost_bytes: lost }).unwrap();
        w.into_inner()
    }

    /// Bytes of the file header and metadata record.
    fn header_len() -> usize {
        let mut w = ProfileWriter::new(Vec::new(), Width::W64, 1).unwrap();
        w.meta(&meta()).unwrap();
        w.into_inner().len()
    }

    /// Written in whole blocks with O_DIRECT (the test's file system takes it), the file
    /// holds exactly the writer's bytes.
    #[test]
    fn direct_writes_make_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.dep");
        let mut sink = ProfileSink::create(&path, Width::W64, 1, &meta()).unwrap();
        assert!(sink.direct, "the temporary directory's file system refused O_DIRECT");
        let ps = payloads();
        for p in &ps {
            sink.record(RecordKind::Block, p);
            assert_eq!(sink.written % BLOCK as u64, 0);
        }
        assert!(sink.finish(3, 9).is_none());
        assert!(std::fs::read(&path).unwrap() == expected(&ps, 0));
    }

    /// Run alone in a child process (see `a_full_file_keeps_whole_records`): writes under a
    /// file size limit, which fails like a full disk (EFBIG), and prints what the sink said.
    #[test]
    fn file_size_limit_child() {
        let Ok(path) = std::env::var("DEP_SINK_CHILD") else { return };
        let limit: u64 = std::env::var("DEP_SINK_LIMIT").unwrap().parse().unwrap();
        // SAFETY: plain system calls on this process: ignore SIGXFSZ so the write fails
        // with EFBIG instead of killing it, then set the limit.
        unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let r = libc::rlimit { rlim_cur: limit, rlim_max: limit };
            assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &r), 0);
        }
        let mut sink = ProfileSink::create(Path::new(&path), Width::W64, 1, &meta()).unwrap();
        assert!(sink.direct);
        for p in &payloads() {
            sink.record(RecordKind::Block, p);
        }
        println!("sink: {}", sink.finish(3, 9).unwrap_or_default());
    }

    /// A write that fails midway (the file size limit, as a full disk would) leaves the
    /// records written whole, cut at a record's end, then the end record, counting what was
    /// lost; whether the limit falls in the direct writes' blocks or in the final tail.
    #[test]
    fn a_full_file_keeps_whole_records() {
        let dir = tempfile::tempdir().unwrap();
        let all = expected(&payloads(), 0);
        for limit in [3 << 20, (20 << 20) + 777, all.len() as u64 - 100] {
            let path = dir.path().join(format!("f{limit}.dep"));
            let o = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "sink::tests::file_size_limit_child", "--nocapture", "--test-threads=1"])
                .env("DEP_SINK_CHILD", &path)
                .env("DEP_SINK_LIMIT", limit.to_string())
                .output()
                .unwrap();
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
            // (The harness prints the test's name on the same line.)
            let said = out.split("sink: ").nth(1).and_then(|r| r.lines().next()).expect("the child's report");
            assert!(said.contains("File too large") && said.contains("with an end record"), "{said}");
            let file = std::fs::read(&path).unwrap();
            assert!(file.len() as u64 <= limit);
            let p = dep_profile::container::Profile::open(&path).unwrap();
            assert!(p.truncated_at.is_none(), "the file ends with a whole end record");
            let end = p.end.as_ref().expect("an end record");
            // The file is the writer's bytes up to a record's end, then the end record.
            let end_len = |lost| expected(&[], lost).len() - header_len();
            let kept = file.len() - end_len(end.lost_bytes);
            assert!(said.contains(&format!("cut at byte {} ", file.len())), "{said}");
            assert!(file[..kept] == all[..kept], "limit {limit}");
            assert_eq!(end.lost_bytes, (all.len() - end_len(0) - kept) as u64, "limit {limit}: lost bytes");
        }
    }
}
