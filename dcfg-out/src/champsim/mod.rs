//! `dep export champsim`: ChampSim traces, one record of 64 bytes per executed instruction
//! (a rep string one per iteration, as ChampSim's Pin tracer writes them), one file per
//! thread, plain or compressed by the name's extension (`.xz`, `.gz`).
//!
//! Chunks are turned into records in parallel ([`Events::ordered`](dep_recover::Events::ordered))
//! and written in order, in bounded memory: the chunk whose turn it is writes its records
//! as they come, a chunk ahead of it holds them (in memory, then in a temporary file, then
//! it waits). A conditional branch at a chunk's end waits for the next chunk's first block
//! to say whether it was taken. What the records hold is in [`record`].

pub mod chunk;
pub mod record;

use chunk::{ChunkRecords, ChunkTrace, Losses, Open, Templates, PIECE};
use dep_recover::ordered::Held;
use dep_recover::{RecoverError, Recovery, Source};
use std::collections::HashMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};

/// What can go wrong writing a trace.
#[derive(Debug, thiserror::Error)]
pub enum ChampsimError {
    #[error(transparent)]
    Recover(#[from] RecoverError),
    #[error("cannot create {path}: {err}")]
    Create { path: PathBuf, err: io::Error },
    #[error("writing {path}: {err}")]
    Write { path: PathBuf, err: io::Error },
    #[error("thread {thread} is not in the profile (it has {threads})")]
    NoThread { thread: u32, threads: usize },
    #[error("records held for their turn: {0}")]
    Held(io::Error),
    #[error("an earlier chunk failed")]
    Aborted,
}

/// A trace file written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub thread: u32,
    pub path: PathBuf,
    pub records: u64,
}

/// What an export wrote, and what the records could not hold.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub files: Vec<Written>,
    pub losses: Losses,
}

/// How a file is compressed, from its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Xz,
    Gzip,
}

impl Compression {
    /// By the name's extension: `.xz`, `.gz`, else none.
    pub fn of(path: &Path) -> Compression {
        match path.extension().and_then(|e| e.to_str()) {
            Some("xz") => Compression::Xz,
            Some("gz") => Compression::Gzip,
            _ => Compression::None,
        }
    }
}

/// The file of thread `t` when each thread has its own: the thread's index before the
/// compression extension (`out.champsim.xz` → `out.champsim.1.xz`), else at the end.
pub fn thread_path(path: &Path, t: u32) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let named = match Compression::of(path) {
        Compression::None => format!("{name}.{t}"),
        _ => match name.rsplit_once('.') {
            Some((stem, ext)) => format!("{stem}.{t}.{ext}"),
            None => format!("{name}.{t}"),
        },
    };
    path.with_file_name(named)
}

/// Bytes of records a thread's file (or a chunk) holds back for branches still waiting for
/// their next block (a signal handler that runs long): beyond it the oldest is written as
/// not taken.
const HOLD_LIMIT: usize = 256 << 20;

/// Bytes a chunk ahead of its turn holds (beyond [`dep_recover::ordered::HELD_IN_MEMORY`]
/// in a temporary file) before it waits for its turn.
const AHEAD_LIMIT: u64 = 256 << 20;

/// A branch waiting in a thread's file: its record's offset in the file, and the address
/// after it.
type Waiting = Option<(u64, u64)>;

/// A file, plain or through a compressor.
enum Encoder {
    Plain(io::BufWriter<std::fs::File>),
    Xz(xz2::write::XzEncoder<io::BufWriter<std::fs::File>>),
    Gzip(flate2::write::GzEncoder<io::BufWriter<std::fs::File>>),
}

impl Encoder {
    fn write_all(&mut self, b: &[u8]) -> io::Result<()> {
        match self {
            Encoder::Plain(w) => w.write_all(b),
            Encoder::Xz(w) => w.write_all(b),
            Encoder::Gzip(w) => w.write_all(b),
        }
    }

    /// Ends the compressed stream and flushes the file, reporting what goes wrong.
    fn finish(self) -> io::Result<()> {
        let mut file = match self {
            Encoder::Plain(w) => w,
            Encoder::Xz(w) => w.finish()?,
            Encoder::Gzip(w) => w.finish()?,
        };
        file.flush()
    }
}

/// One thread's file being written.
struct Output {
    thread: u32,
    path: PathBuf,
    w: Encoder,
    records: u64,
    /// Records not yet written, from offset `held_at` of the file: those from the oldest
    /// waiting branch's on.
    held: Vec<u8>,
    held_at: u64,
    /// The branch waiting for the next block, and those interrupted by signal handlers.
    pending: Waiting,
    stack: Vec<Waiting>,
    /// [`HOLD_LIMIT`] (smaller in tests).
    hold_limit: usize,
    /// The file offset of the first record of the chunk being written.
    base: u64,
}

impl Output {
    fn create(path: PathBuf, thread: u32, workers: usize) -> Result<Output, ChampsimError> {
        let file = std::fs::File::create(&path).map_err(|err| ChampsimError::Create { path: path.clone(), err })?;
        let file = io::BufWriter::with_capacity(1 << 20, file);
        let w = match Compression::of(&path) {
            Compression::None => Encoder::Plain(file),
            Compression::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(file, flate2::Compression::fast())),
            Compression::Xz => {
                // liblzma's own threads, so that compression keeps up with recovery.
                let stream = xz2::stream::MtStreamBuilder::new()
                    .threads(workers.max(1) as u32)
                    .preset(3)
                    .check(xz2::stream::Check::Crc64)
                    .encoder()
                    .map_err(|e| ChampsimError::Create { path: path.clone(), err: io::Error::other(e) })?;
                Encoder::Xz(xz2::write::XzEncoder::new_stream(file, stream))
            }
        };
        Ok(Output {
            thread,
            path,
            w,
            records: 0,
            held: Vec::new(),
            held_at: 0,
            pending: None,
            stack: Vec::new(),
            hold_limit: HOLD_LIMIT,
            base: 0,
        })
    }

    /// Decides the waiting branch `g` by the next block (`Some(addr)`), or as not known.
    fn decide(&mut self, g: Waiting, next: Option<u64>, losses: &mut Losses) {
        let Some((at, fallthrough)) = g else { return };
        match next {
            Some(addr) => record::set_taken(&mut self.held[(at - self.held_at) as usize..], addr != fallthrough),
            None => losses.undirected += 1,
        }
    }

    /// Begins a chunk (its turn, [`State::begin`]): its records follow those written and
    /// held.
    fn start(&mut self) {
        self.base = self.held_at + self.held.len() as u64;
    }

    /// The branch waiting from before the chunk that `o` names.
    fn waiting(&mut self, o: Open) -> Option<&mut Waiting> {
        match o {
            Open::Pending => Some(&mut self.pending),
            Open::Outer(k) => {
                let n = self.stack.len();
                n.checked_sub(k + 1).map(|i| &mut self.stack[i])
            }
            Open::Local { .. } => None,
        }
    }

    /// Decides branches earlier chunks left waiting (each is decided once).
    fn decided(&mut self, decided: &[(Open, Option<u64>)], losses: &mut Losses) {
        for &(o, next) in decided {
            let g = self.waiting(o).and_then(|g| g.take());
            self.decide(g, next, losses);
        }
    }

    /// Appends records of the chunk being written: straight to the file unless a branch
    /// before them waits.
    fn append(&mut self, b: &[u8], losses: &mut Losses) -> Result<(), ChampsimError> {
        if b.is_empty() {
            return Ok(());
        }
        let end = self.held_at + self.held.len() as u64;
        match self.oldest() {
            Some(o) if o < end => self.held.extend_from_slice(b),
            o => {
                self.write_to(end)?;
                let n = o.map_or(b.len(), |o| ((o - end) as usize).min(b.len()));
                self.put(&b[..n])?;
                self.held.extend_from_slice(&b[n..]);
                self.held_at = end + n as u64;
            }
        }
        self.drain(losses)
    }

    /// Appends what a chunk held for its turn.
    fn pour(&mut self, held: &mut Held, losses: &mut Losses) -> Result<(), ChampsimError> {
        let mut failed = None;
        held.pour(&mut |b| {
            self.append(b, losses).map_err(|e| {
                failed = Some(e);
                io::Error::other("appending held records")
            })
        })
        .map_err(|e| failed.take().unwrap_or(ChampsimError::Held(e)))
    }

    /// The branches a chunk leaves waiting replace those it took from the stack, before its
    /// last records are appended (they may wait on the chunk's own branches).
    fn leave(&mut self, c: &ChunkRecords) {
        let base = self.base;
        let map = |o: Option<Open>, me: &mut Self| -> Waiting {
            match o? {
                Open::Local { offset, fallthrough } => Some((base + offset as u64, fallthrough)),
                o => me.waiting(o).and_then(|g| *g),
            }
        };
        let pending = map(c.pending, self);
        let mine: Vec<Waiting> = c.stack.iter().map(|&o| map(o, self)).collect();
        self.stack.truncate(self.stack.len().saturating_sub(c.popped));
        self.stack.extend(mine);
        self.pending = pending;
    }

    /// Writes the rest of a chunk begun with [`start`](Self::start): decides the branches
    /// it saw the next block of, and writes everything before the oldest branch still
    /// waiting. Returns the chunk's buffer.
    fn chunk(&mut self, mut c: ChunkRecords, losses: &mut Losses) -> Result<Vec<u8>, ChampsimError> {
        self.records += c.records;
        self.decided(&c.decided, losses);
        self.leave(&c);
        self.pour(&mut c.released.held, losses)?;
        self.append(&c.bytes, losses)?;
        Ok(std::mem::take(&mut c.bytes))
    }

    fn put(&mut self, b: &[u8]) -> Result<(), ChampsimError> {
        self.w.write_all(b).map_err(|err| ChampsimError::Write { path: self.path.clone(), err })
    }

    /// The oldest branch waiting.
    fn oldest(&self) -> Option<u64> {
        self.pending.iter().chain(self.stack.iter().flatten()).map(|g| g.0).min()
    }

    /// Writes the records before the oldest branch waiting, deciding the oldest as not
    /// known while more than [`HOLD_LIMIT`] bytes would stay held.
    fn drain(&mut self, losses: &mut Losses) -> Result<(), ChampsimError> {
        loop {
            let end = self.held_at + self.held.len() as u64;
            self.write_to(self.oldest().map_or(end, |o| o.min(end)))?;
            if self.held.len() <= self.hold_limit {
                return Ok(());
            }
            let o = self.oldest().expect("records are held only for a waiting branch");
            losses.undirected += 1;
            for g in std::iter::once(&mut self.pending).chain(self.stack.iter_mut()) {
                if g.is_some_and(|g| g.0 == o) {
                    *g = None;
                }
            }
        }
    }

    /// Writes the held records before file offset `to`.
    fn write_to(&mut self, to: u64) -> Result<(), ChampsimError> {
        let n = (to - self.held_at) as usize;
        if n == 0 {
            return Ok(());
        }
        let held = std::mem::take(&mut self.held);
        self.put(&held[..n])?;
        self.held = held;
        self.held.drain(..n);
        self.held_at = to;
        Ok(())
    }

    /// Ends the file: the branches still waiting have no next block.
    fn finish(mut self, losses: &mut Losses) -> Result<Written, ChampsimError> {
        losses.undirected += self.pending.iter().chain(self.stack.iter().flatten()).count() as u64;
        self.pending = None;
        self.stack.clear();
        self.drain(losses)?;
        self.w.finish().map_err(|err| ChampsimError::Write { path: self.path.clone(), err })?;
        Ok(Written { thread: self.thread, path: self.path, records: self.records })
    }
}

/// Writes thread `thread`'s trace to `path`, or every thread's to its own file
/// ([`thread_path`]) when `thread` is None.
pub fn export(rec: &Recovery, path: &Path, thread: Option<u32>, progress: &(dyn Fn(u64) + Sync)) -> Result<Summary, ChampsimError> {
    export_bounded(rec, path, thread, progress, Bounds::default())
}

/// How many bytes of records a chunk gathers before it hands them on, and holds while
/// waiting for its turn (tests make both small, so that every way is taken).
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub piece: usize,
    pub ahead: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds { piece: PIECE, ahead: AHEAD_LIMIT }
    }
}

/// [`export`] within `bounds`.
pub fn export_bounded(
    rec: &Recovery,
    path: &Path,
    thread: Option<u32>,
    progress: &(dyn Fn(u64) + Sync),
    bounds: Bounds,
) -> Result<Summary, ChampsimError> {
    let threads = rec.profile.threads.len();
    if let Some(t) = thread {
        if t as usize >= threads {
            return Err(ChampsimError::NoThread { thread: t, threads });
        }
    }
    // A device (/dev/null) takes every thread's trace in turn rather than naming files
    // beside it.
    let device = std::fs::metadata(path).is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_char_device(&m.file_type()));
    let files = Files {
        path: path.to_path_buf(),
        single: thread.is_some() || device,
        end: thread.map_or(threads as u32, |t| t + 1),
        workers: rec.workers(),
    };
    // Fail on an unwritable output before the work.
    let first = thread.unwrap_or(0);
    let out = if first < files.end { Some(files.create(first)?) } else { None };
    let templates = Templates::new(rec.plans.len());
    let order: HashMap<u64, usize> = rec.chunks().iter().enumerate().map(|(k, c)| (c.offset, k)).collect();
    let writing = Writing {
        files,
        state: Mutex::new(State { head: 0, aborted: false, out, summary: Summary::default() }),
        turn: Condvar::new(),
        ahead_limit: bounds.ahead,
    };
    rec.events(Source::Dep).progress(progress).ordered(
        |c| ChunkTrace::new(&templates, thread, &writing, order[&c.offset], bounds.piece),
        |s| Ok(s.into_records()),
        // What a finished chunk holds in memory and on disk, both bounded by the driver.
        |c: &ChunkRecords| c.bytes.capacity() + c.released.held.len() as usize,
        |c, records| {
            let k = order[&c.offset];
            let mut st = writing.lock()?;
            let r = (|| {
                if thread.is_some_and(|t| t != c.thread) {
                    return Ok(());
                }
                let st = &mut *st;
                if !records.released.direct {
                    st.begin(&writing.files, c.thread)?;
                }
                st.summary.losses.add(&records.losses);
                if let Some(o) = st.out.as_mut() {
                    templates.recycle(o.chunk(records, &mut st.summary.losses)?);
                }
                Ok(())
            })();
            st.head = k + 1;
            st.aborted |= r.is_err();
            writing.turn.notify_all();
            r
        },
    )?;
    let mut st = writing.lock()?;
    let st = &mut *st;
    // The last file, and those of threads after the last chunk seen.
    writing.files.advance(&mut st.out, writing.files.end, &mut st.summary)?;
    Ok(std::mem::take(&mut st.summary))
}

/// What a chunk has handed on of its records before its end.
#[derive(Default)]
pub struct Released {
    /// Held while chunks before it are not written.
    held: Held,
    /// Its turn came: it began writing to its file, and wrote what it held.
    direct: bool,
}

/// The files being written, shared by the consumer of finished chunks and the chunk whose
/// turn it is.
pub struct Writing {
    files: Files,
    state: Mutex<State>,
    /// Signalled when the turn passes to the next chunk or the export fails.
    turn: Condvar,
    /// [`AHEAD_LIMIT`] (smaller in tests).
    ahead_limit: u64,
}

struct State {
    /// The chunk whose turn it is: every chunk before it written.
    head: usize,
    aborted: bool,
    out: Option<Output>,
    summary: Summary,
}

impl State {
    /// Begins a chunk of thread `thread` on its turn: in the thread's file (finishing the
    /// files before it), after what that file holds.
    fn begin(&mut self, files: &Files, thread: u32) -> Result<(), ChampsimError> {
        files.advance(&mut self.out, thread, &mut self.summary)?;
        if let Some(o) = self.out.as_mut() {
            o.start();
        }
        Ok(())
    }
}

impl Writing {
    fn lock(&self) -> Result<MutexGuard<'_, State>, ChampsimError> {
        // A writer that panicked leaves the files unusable: an error, not a panic.
        self.state.lock().map_err(|_| ChampsimError::Aborted)
    }

    /// Chunk `k` of thread `thread` hands on `bytes`, its records before its oldest branch
    /// waiting, and the branches it decided so far: written on its turn, else held (up to
    /// the limit, then it waits for its turn).
    pub(crate) fn release(
        &self,
        k: usize,
        thread: u32,
        r: &mut Released,
        decided: &mut Vec<(Open, Option<u64>)>,
        bytes: &[u8],
    ) -> Result<(), ChampsimError> {
        let mut st = self.lock()?;
        if !r.direct {
            if st.head != k && r.held.len() + bytes.len() as u64 <= self.ahead_limit {
                drop(st);
                return r.held.push(bytes).map_err(ChampsimError::Held);
            }
            while st.head != k && !st.aborted {
                st = self.turn.wait(st).map_err(|_| ChampsimError::Aborted)?;
            }
            if st.aborted {
                return Err(ChampsimError::Aborted);
            }
            r.direct = true;
            st.begin(&self.files, thread)?;
        }
        let st = &mut *st;
        if let Some(o) = st.out.as_mut() {
            // The decisions first: the branch the last chunk left waiting holds back
            // everything after it until it is decided.
            o.decided(decided, &mut st.summary.losses);
            o.pour(&mut r.held, &mut st.summary.losses)?;
            o.append(bytes, &mut st.summary.losses)?;
        }
        decided.clear();
        Ok(())
    }

    /// A chunk failed: no chunk waits for its turn any more.
    pub(crate) fn abort(&self) {
        if let Ok(mut st) = self.state.lock() {
            st.aborted = true;
        }
        self.turn.notify_all();
    }
}

/// Where an export's files go, and which threads get one.
struct Files {
    path: PathBuf,
    /// Every thread's trace into `path` itself (one thread's, or a device's).
    single: bool,
    /// The thread after the last one written.
    end: u32,
    workers: usize,
}

impl Files {
    fn create(&self, t: u32) -> Result<Output, ChampsimError> {
        let path = if self.single { self.path.clone() } else { thread_path(&self.path, t) };
        Output::create(path, t, self.workers)
    }

    /// Threads come one after another: finishes the open file and those of the threads
    /// before `to`, each replaced by the next thread's (none from `end` on).
    fn advance(&self, out: &mut Option<Output>, to: u32, summary: &mut Summary) -> Result<(), ChampsimError> {
        while let Some(o) = out.take_if(|o| o.thread < to) {
            let next = o.thread + 1;
            summary.files.push(o.finish(&mut summary.losses)?);
            if next < self.end {
                *out = Some(self.create(next)?);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::chunk::{ChunkRecords, Losses, Open};
    use super::*;

    /// `n` records of conditional branches at 0x1000 + 16 k, not taken, falling through to
    /// 0x1000 + 16 k + 2.
    fn chunk(first: u64, n: u64) -> Vec<u8> {
        let mut b = Vec::new();
        for k in first..first + n {
            let mut r = [0u8; record::RECORD];
            r[..8].copy_from_slice(&(0x1000 + 16 * k).to_le_bytes());
            b.extend_from_slice(&r);
        }
        b
    }

    fn records(bytes: Vec<u8>) -> ChunkRecords {
        let records = (bytes.len() / record::RECORD) as u64;
        ChunkRecords { bytes, records, ..Default::default() }
    }

    fn taken(path: &Path) -> Vec<u8> {
        std::fs::read(path).unwrap().chunks(record::RECORD).map(|r| r[9]).collect()
    }

    #[test]
    fn branches_wait_across_chunks_and_handlers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let mut o = Output::create(path.clone(), 0, 1).unwrap();
        let mut losses = Losses::default();
        // Chunk 1: record 2 waits for the next block; then a handler starts (it waits on
        // the stack) and record 3, in the handler, waits.
        let mut c = records(chunk(0, 4));
        c.stack = vec![Some(Open::Local { offset: 128, fallthrough: 0x1022 })];
        c.pending = Some(Open::Local { offset: 192, fallthrough: 0x1032 });
        o.start();
        o.chunk(c, &mut losses).unwrap();
        assert_eq!(o.held.len(), 128, "records 2 and 3 held");
        // Chunk 2: the handler's next block (record 3 taken), its return to the block
        // after record 2 (not taken: the fallthrough).
        let mut c = records(chunk(4, 2));
        c.decided = vec![(Open::Pending, Some(0x5000)), (Open::Outer(0), Some(0x1022))];
        c.popped = 1;
        o.start();
        o.chunk(c, &mut losses).unwrap();
        assert!(o.held.is_empty() && o.pending.is_none() && o.stack.is_empty());
        let w = o.finish(&mut losses).unwrap();
        assert_eq!(w.records, 6);
        assert_eq!(taken(&path), vec![0, 0, 0, 1, 0, 0]);
        assert_eq!(losses.undirected, 0);
    }

    /// A chunk whose turn comes after it held records decides the branch the chunk before
    /// left waiting before its records are appended, so that none is held back for it.
    #[test]
    fn a_chunk_taking_its_turn_decides_before_it_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let files = Files { path: path.clone(), single: true, end: 1, workers: 2 };
        let mut out = files.create(0).unwrap();
        // Holding chunk 1's records behind the branch would give the branch up.
        out.hold_limit = 2 * record::RECORD;
        let state = Mutex::new(State { head: 0, aborted: false, out: Some(out), summary: Summary::default() });
        let writing = Writing { files, state, turn: Condvar::new(), ahead_limit: u64::MAX };
        // Chunk 1 hands on two records and decides the branch chunk 0 will leave waiting
        // before chunk 0 is written: held.
        let mut r1 = Released::default();
        let mut decided = vec![(Open::Pending, Some(0x1012))];
        writing.release(1, 0, &mut r1, &mut decided, &chunk(1, 2)).unwrap();
        assert!(!r1.direct && r1.held.len() == 2 * record::RECORD as u64);
        assert_eq!(decided.len(), 1, "decisions wait with the records");
        // Chunk 0 is written; its last record waits for the next block.
        {
            let mut st = writing.lock().unwrap();
            let st = &mut *st;
            let mut c = records(chunk(0, 1));
            c.pending = Some(Open::Local { offset: 0, fallthrough: 0x1002 });
            st.begin(&writing.files, 0).unwrap();
            st.out.as_mut().unwrap().chunk(c, &mut st.summary.losses).unwrap();
            assert_eq!(st.out.as_ref().unwrap().held.len(), record::RECORD);
            st.head = 1;
        }
        // Chunk 1's turn: the branch is decided (taken), then its records go straight out.
        writing.release(1, 0, &mut r1, &mut decided, &chunk(3, 1)).unwrap();
        assert!(r1.direct && decided.is_empty() && r1.held.is_empty());
        let mut st = writing.lock().unwrap();
        let st = &mut *st;
        let o = st.out.as_mut().unwrap();
        assert!(o.held.is_empty() && o.pending.is_none(), "{} bytes held", o.held.len());
        let c = ChunkRecords { released: r1, ..records(chunk(4, 1)) };
        o.chunk(c, &mut st.summary.losses).unwrap();
        let w = st.out.take().unwrap().finish(&mut st.summary.losses).unwrap();
        assert_eq!(w.records, 1 + 1, "records are counted as each chunk says");
        assert_eq!(taken(&path), vec![1, 0, 0, 0, 0]);
        assert_eq!(st.summary.losses, Losses::default());
    }

    #[test]
    fn a_branch_waiting_too_long_is_written_undecided() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let mut o = Output::create(path.clone(), 0, 1).unwrap();
        o.hold_limit = 3 * record::RECORD;
        let mut losses = Losses::default();
        let mut c = records(chunk(0, 2));
        c.stack = vec![Some(Open::Local { offset: 0, fallthrough: 0x1002 })];
        o.start();
        o.chunk(c, &mut losses).unwrap();
        assert_eq!(o.held.len(), 2 * record::RECORD);
        // Two more records of a handler that does not return: the branch gives up.
        o.start();
        o.chunk(records(chunk(2, 2)), &mut losses).unwrap();
        assert_eq!(losses.undirected, 1);
        assert!(o.held.is_empty() && o.stack == vec![None]);
        // Its return later decides nothing; the file is whole.
        let mut c = records(chunk(4, 1));
        c.decided = vec![(Open::Outer(0), Some(0x9999))];
        c.popped = 1;
        o.start();
        o.chunk(c, &mut losses).unwrap();
        assert_eq!(o.finish(&mut losses).unwrap().records, 5);
        assert_eq!(taken(&path), vec![0; 5]);
        assert_eq!(losses.undirected, 1);
    }
}
