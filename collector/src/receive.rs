//! Receives what client processes send and writes one profile per process image.
//!
//! Chunks arrive uncompressed; a pool of threads compresses them while the connection's
//! reader goes on, and a bounded queue makes a client wait (rather than lose data) when
//! compression falls behind.

use crate::launch::Compression;
use crate::sink::{ProfileSink, SinkError};
use crate::wire::{self, ChunkHeader};
use dep_profile::container::{ChunkData, ChunkEncoder, Metadata, RecordKind};
use dep_profile::Width;
use std::fs::File;
use std::io::Read;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Why the launcher stopped reading a process's stream.
#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    #[error("malformed frame from the client (kind {kind}, {len} bytes)")]
    FrameTooLong { kind: u32, len: u64 },
    #[error("the client's stream ends inside a frame")]
    Truncated,
    #[error("reading from the client: {0}")]
    Read(std::io::Error),
    #[error("bad hello: {0}")]
    Hello(serde_json::Error),
    #[error("bad width {0} in hello")]
    Width(u8),
    #[error("bad module record: {0}")]
    Module(serde_json::Error),
    #[error("malformed chunk frame from the client")]
    Chunk,
    #[error("compression pool stopped")]
    PoolStopped,
    #[error("unknown frame kind {0} from the client")]
    UnknownFrame(u32),
    /// The process's profile file could not be started.
    #[error(transparent)]
    Profile(#[from] SinkError),
}
/// What one connection (one process image) produced.
#[derive(Debug, Default, Clone)]
pub struct ConnResult {
    /// The profile written, if any (none in discard mode).
    pub path: Option<PathBuf>,
    pub pid: u32,
    /// exit_group's status if the client saw it.
    pub exit: Option<i32>,
    /// `--discard` totals: tag bytes, value bytes, truth bytes, chunks.
    pub counts: [u64; 4],
    /// Problems met (I/O errors, malformed frames).
    pub errors: Vec<String>,
    /// Whether the stream ended cleanly.
    pub complete: bool,
}

/// A compression job: the chunk's raw frame payload and where to send the encoded record.
struct Job {
    thread: u32,
    width: Width,
    /// DEP_m packed only.
    fast: bool,
    payload: Vec<u8>,
    done: crossbeam::channel::Sender<std::io::Result<Vec<u8>>>,
}

/// Where a chunk's compressed record comes back from the pool.
type Done = crossbeam::channel::Receiver<std::io::Result<Vec<u8>>>;

/// Shared state of a recording session.
pub struct Receiver {
    base: PathBuf,
    discard: bool,
    level: i32,
    next_index: Mutex<u32>,
    compression: Compression,
    /// Compression threads.
    workers: usize,
    jobs: crossbeam::channel::Sender<Job>,
    /// Frame buffers the compression pool is done with.
    spare: crossbeam::channel::Receiver<Vec<u8>>,
    pub results: Mutex<Vec<ConnResult>>,
    /// Open writers, finished with an end record once the launcher knows exit statuses.
    writers: Mutex<Vec<(usize, ProfileSink)>>,
    /// Pids that have connected: a second connection from one is an exec'd image.
    pids: Mutex<Vec<u32>>,
}

/// The GNU build id of an ELF file on disk, in hex.
fn build_id(path: &str) -> Option<String> {
    use object::Object;
    let f = File::open(path).ok()?;
    // SAFETY: read-only map of a file the program itself has mapped.
    let map = unsafe { memmap2::Mmap::map(&f) }.ok()?;
    let obj = object::File::parse(&*map).ok()?;
    let id = obj.build_id().ok()??;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

impl Receiver {
    /// Starts the compression pool.
    pub fn new(base: &Path, discard: bool, level: i32, compression: Compression, workers: usize) -> Arc<Receiver> {
        let (tx, rx) = crossbeam::channel::bounded::<Job>(workers * 2);
        // Frame buffers go back to the readers once their chunk is encoded: a chunk is
        // megabytes, and a new buffer each time costs its zeroing and page faults (on
        // bench/interp, which sends 36 GB, seconds of the launcher's time).
        let (spare_tx, spare_rx) = crossbeam::channel::bounded::<Vec<u8>>(workers * 2 + 2);
        for _ in 0..workers {
            let (rx, spare) = (rx.clone(), spare_tx.clone());
            std::thread::spawn(move || {
                let mut enc = ChunkEncoder::new(level);
                for job in rx {
                    let r = match &mut enc {
                        Ok(enc) => encode_chunk(enc, job.thread, job.width, job.fast, &job.payload),
                        Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
                    };
                    let _ = job.done.send(r);
                    let _ = spare.try_send(job.payload);
                }
            });
        }
        Arc::new(Receiver {
            base: base.to_path_buf(),
            discard,
            level,
            next_index: Mutex::new(0),
            compression,
            workers,
            jobs: tx,
            spare: spare_rx,
            results: Mutex::new(Vec::new()),
            writers: Mutex::new(Vec::new()),
            pids: Mutex::new(Vec::new()),
        })
    }

    /// Accepts connections, one reader thread each, until `stop` is set.
    pub fn serve(
        self: &Arc<Self>,
        listener: UnixListener,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) -> std::thread::JoinHandle<Vec<std::thread::JoinHandle<()>>> {
        let me = self.clone();
        listener.set_nonblocking(true).expect("nonblocking listener");
        std::thread::spawn(move || {
            let mut handles = Vec::new();
            loop {
                match listener.accept() {
                    Ok((s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let me = me.clone();
                        handles.push(std::thread::spawn(move || me.handle(s)));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if stop.load(std::sync::atomic::Ordering::Acquire) {
                            break;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(2));
                    }
                    Err(_) => break,
                }
            }
            handles
        })
    }

    /// Connections whose reader has finished.
    pub fn finished(&self) -> usize {
        self.results.lock().unwrap().len()
    }

    fn profile_path(&self, index: u32) -> PathBuf {
        if index == 0 {
            self.base.clone()
        } else {
            let mut s = self.base.as_os_str().to_owned();
            s.push(format!(".{index}"));
            PathBuf::from(s)
        }
    }

    fn handle(&self, mut s: UnixStream) {
        let mut res = ConnResult::default();
        let mut writer = None;
        let r = self.read_conn(&mut s, &mut res, &mut writer);
        if let Err(e) = r {
            res.errors.push(e.to_string());
            // The program goes on sending: reading on keeps its writes from failing.
            drain(&mut s);
        } else {
            res.complete = true;
        }
        // Chunks compressed already belong in the profile, whatever stopped the stream: the
        // writer takes everything sent to it before it ends.
        let sink = writer.map(|w: Writer| {
            drop(w.items);
            let (sink, errors) = w.thread.join().expect("profile writer panicked");
            res.errors.extend(errors);
            sink
        });
        let mut results = self.results.lock().unwrap();
        if let Some(sink) = sink {
            self.writers.lock().unwrap().push((results.len(), sink));
        }
        results.push(res);
    }

    fn read_conn(&self, s: &mut UnixStream, res: &mut ConnResult, writer: &mut Option<Writer>) -> Result<(), ReceiveError> {
        let mut hdr = [0u8; wire::FRAME_HEADER];
        // Truth sent ahead of its chunk, per thread.
        let mut truth_ahead: std::collections::HashMap<u32, Vec<u8>> = std::collections::HashMap::new();
        loop {
            if !read_full(s, &mut hdr)? {
                break;
            }
            let kind = u32::from_le_bytes(hdr[0..4].try_into().unwrap());
            let thread = u32::from_le_bytes(hdr[4..8].try_into().unwrap());
            let len = u64::from_le_bytes(hdr[8..16].try_into().unwrap());
            if len > wire::MAX_FRAME {
                return Err(ReceiveError::FrameTooLong { kind, len });
            }
            // A chunk's frame reuses a spare buffer: only bytes beyond what it held before
            // are zeroed. (Small frames, which are not given back, take none.)
            let mut payload = if len >= 1 << 16 { self.spare.try_recv().unwrap_or_default() } else { Vec::new() };
            payload.resize(len as usize, 0);
            if !read_full(s, &mut payload)? && len > 0 {
                return Err(ReceiveError::Truncated);
            }
            let w = |writer: &Option<Writer>, kind: RecordKind, p: &[u8]| {
                if let Some(w) = writer {
                    let _ = w.items.send(Item::Record(kind, p.to_vec()));
                }
            };
            match kind {
                wire::HELLO => {
                    let mut meta: Metadata = serde_json::from_slice(&payload).map_err(ReceiveError::Hello)?;
                    res.pid = meta.pid;
                    {
                        let mut pids = self.pids.lock().unwrap();
                        if pids.contains(&meta.pid) {
                            meta.parent = Some(dep_profile::container::ParentLink { how: "exec".into(), parent_pid: meta.pid });
                        } else if meta.parent.as_ref().is_some_and(|l| !pids.contains(&l.parent_pid)) {
                            // The recorded program's own parent (dep) is no process of the recording.
                            meta.parent = None;
                        }
                        pids.push(meta.pid);
                    }
                    if !self.discard {
                        let index = {
                            let mut n = self.next_index.lock().unwrap();
                            *n += 1;
                            *n - 1
                        };
                        let path = self.profile_path(index);
                        let width = Width::from_bits(meta.width).ok_or(ReceiveError::Width(meta.width))?;
                        *writer = Some(Writer::start(ProfileSink::create(&path, width, self.level, &meta)?));
                        res.path = Some(path);
                    }
                }
                wire::MODULE => {
                    let mut m: dep_profile::container::ModuleEvent = serde_json::from_slice(&payload).map_err(ReceiveError::Module)?;
                    if m.build_id.is_none() && m.event == dep_profile::container::ModuleEventKind::Load && m.path.starts_with('/') {
                        m.build_id = build_id(&m.path);
                    }
                    w(writer, RecordKind::Module, &serde_json::to_vec(&m).unwrap_or(payload))
                }
                wire::THREAD => w(writer, RecordKind::Thread, &payload),
                wire::BLOCK => w(writer, RecordKind::Block, &payload),
                wire::TRUTH_PART => truth_ahead.entry(thread).or_default().extend_from_slice(&payload),
                wire::CHUNK => {
                    let payload = match truth_ahead.remove(&thread) {
                        Some(ahead) => prepend_truth(&payload, &ahead).ok_or(ReceiveError::Chunk)?,
                        None => payload,
                    };
                    if let Some(w) = writer {
                        let (done, r) = crossbeam::channel::bounded(1);
                        // Behind: as many chunks wait as there are threads to compress them.
                        let fast = match self.compression {
                            Compression::Small => false,
                            Compression::Fast => true,
                            Compression::Auto => self.jobs.len() >= self.workers,
                        };
                        self.jobs.send(Job { thread, width: w.width, fast, payload, done }).map_err(|_| ReceiveError::PoolStopped)?;
                        // Chunks are written in the order they came, so that a thread's
                        // chunks in any prefix of the file are consecutive (a full disk
                        // cuts the file anywhere).
                        let _ = w.items.send(Item::Chunk(r));
                    }
                }
                wire::COUNTS if payload.len() == 32 => {
                    for (i, c) in res.counts.iter_mut().enumerate() {
                        *c += u64::from_le_bytes(payload[8 * i..8 * i + 8].try_into().unwrap());
                    }
                }
                wire::EXIT if payload.len() == 4 => res.exit = Some(i32::from_le_bytes(payload[..4].try_into().unwrap())),
                wire::MESSAGE => eprintln!("dep: {}", String::from_utf8_lossy(&payload)),
                other => return Err(ReceiveError::UnknownFrame(other)),
            }
        }
        Ok(())
    }

    /// Appends the end record to every profile: `main_status` for the first process image;
    /// returns one line per profile that could not be written whole.
    pub fn finish(&self, main_status: i32) -> Vec<String> {
        let results = self.results.lock().unwrap();
        let now = now_ns();
        let mut errors = Vec::new();
        for (idx, sink) in self.writers.lock().unwrap().drain(..) {
            let r = &results[idx];
            let is_main = r.path.as_deref() == Some(self.base.as_path());
            let exit_status = if is_main { main_status } else { r.exit.unwrap_or(-1) };
            errors.extend(sink.finish(exit_status, now).map(|e| format!("pid {}: {e}", r.pid)));
        }
        errors
    }
}

/// What a connection's reader hands its profile's writer, in arrival order.
enum Item {
    Record(RecordKind, Vec<u8>),
    /// A chunk, once the compression pool has encoded it.
    Chunk(Done),
}

/// The thread writing one profile: the connection's reader goes on reading while records
/// are written (writing a record into the page cache costs as much as reading it did).
struct Writer {
    width: Width,
    items: crossbeam::channel::Sender<Item>,
    /// Returns the profile for its end record, and the errors met.
    thread: std::thread::JoinHandle<(ProfileSink, Vec<String>)>,
}

impl Writer {
    fn start(mut sink: ProfileSink) -> Writer {
        // A few chunks' records: the reader waits beyond that, and so the client.
        let (items, rx) = crossbeam::channel::bounded::<Item>(16);
        let width = sink.width();
        let thread = std::thread::spawn(move || {
            let mut errors = Vec::new();
            for item in rx {
                match item {
                    Item::Record(kind, payload) => sink.record(kind, &payload),
                    Item::Chunk(done) => match done.recv() {
                        Ok(Ok(rec)) => sink.record(RecordKind::Chunk, &rec),
                        Ok(Err(e)) => errors.push(format!("compressing a chunk: {e}")),
                        Err(_) => errors.push("compressing a chunk: the compression pool stopped".into()),
                    },
                }
            }
            (sink, errors)
        });
        Writer { width, items, thread }
    }
}

/// Reads and drops the rest of a stream.
fn drain(s: &mut UnixStream) {
    let mut buf = vec![0u8; 1 << 16];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
    }
}

/// Puts truth records sent ahead in front of a chunk frame's own truth.
fn prepend_truth(payload: &[u8], ahead: &[u8]) -> Option<Vec<u8>> {
    let mut h = ChunkHeader::decode(payload)?;
    let body = &payload[wire::CHUNK_HEADER..];
    let split = (h.tags_len + h.values_len) as usize;
    h.truth_len += ahead.len() as u64;
    let mut out = Vec::with_capacity(payload.len() + ahead.len());
    out.extend_from_slice(&h.encode());
    out.extend_from_slice(&body[..split]);
    out.extend_from_slice(ahead);
    out.extend_from_slice(&body[split..]);
    Some(out)
}

fn encode_chunk(enc: &mut ChunkEncoder, thread: u32, width: Width, fast: bool, payload: &[u8]) -> std::io::Result<Vec<u8>> {
    let h = ChunkHeader::decode(payload).ok_or_else(|| std::io::Error::other("malformed chunk frame"))?;
    let body = &payload[wire::CHUNK_HEADER..];
    let (tags, rest) = body.split_at(h.tags_len as usize);
    let (values, truth) = rest.split_at(h.values_len as usize);
    enc.encode(&ChunkData { thread, seq: h.seq, hi: h.hi, status: h.status, last: h.last, regs: h.regs, tags, values, truth }, width, fast)
}

/// Reads exactly `buf.len()` bytes; `false` at a clean end of stream before the first byte.
fn read_full(s: &mut UnixStream, buf: &mut [u8]) -> Result<bool, ReceiveError> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(ReceiveError::Truncated),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ReceiveError::Read(e)),
        }
    }
    Ok(true)
}

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A stream that ends between frames is a clean end; one that ends inside a frame is
    /// `Truncated`, whatever was read of it.
    #[test]
    fn streams_end_cleanly_only_between_frames() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        a.write_all(&[1, 2, 3]).unwrap();
        drop(a);
        let mut buf = [0u8; 3];
        assert!(read_full(&mut b, &mut buf).unwrap());
        assert_eq!(buf, [1, 2, 3]);
        assert!(!read_full(&mut b, &mut buf).unwrap(), "nothing more: a clean end");

        let (mut a, mut b) = UnixStream::pair().unwrap();
        a.write_all(&[1, 2]).unwrap();
        drop(a);
        assert!(matches!(read_full(&mut b, &mut [0u8; 8]), Err(ReceiveError::Truncated)));
    }

    /// A profile that cannot be created is named with its path and the OS's reason.
    #[test]
    fn an_uncreatable_profile_is_named() {
        let path = std::env::temp_dir().join(format!("dep-no-such-dir-{}", std::process::id())).join("p.dep");
        let meta = Metadata {
            format_version: dep_profile::container::VERSION,
            width: 64,
            command: vec!["t".into()],
            program: "t".into(),
            pid: 1,
            start_time_ns: 0,
            xsave_size: 0,
            truth: false,
            tool: "test".into(),
            parent: None,
        };
        match ProfileSink::create(&path, Width::W64, 1, &meta) {
            Err(SinkError::Create { path: p, err }) => {
                assert_eq!(p, path);
                assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
            }
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("created a profile in a missing directory"),
        }
    }
}
