//! Receives what client processes send and writes one profile per process image.
//!
//! Chunks arrive uncompressed; a pool of threads compresses them while the connection's
//! reader goes on, and a bounded queue makes a client wait (rather than lose data) when
//! compression falls behind.

use crate::wire::{self, ChunkHeader};
use dep_profile::container::{ChunkData, EndInfo, Metadata, ProfileWriter, RecordKind};
use dep_profile::Width;
use std::fs::File;
use std::io::{BufWriter, Read};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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

type Writer = ProfileWriter<BufWriter<File>>;

/// A compression job: the chunk's raw frame payload and where to send the encoded record.
struct Job {
    thread: u32,
    width: Width,
    payload: Vec<u8>,
    done: crossbeam::channel::Sender<std::io::Result<Vec<u8>>>,
}

/// Shared state of a recording session.
pub struct Receiver {
    base: PathBuf,
    discard: bool,
    level: i32,
    next_index: Mutex<u32>,
    jobs: crossbeam::channel::Sender<Job>,
    pub results: Mutex<Vec<ConnResult>>,
    /// Open writers, finished with an end record once the launcher knows exit statuses.
    writers: Mutex<Vec<(usize, Writer)>>,
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
    pub fn new(base: &Path, discard: bool, level: i32, workers: usize) -> Arc<Receiver> {
        let (tx, rx) = crossbeam::channel::bounded::<Job>(workers * 2);
        for _ in 0..workers {
            let rx = rx.clone();
            std::thread::spawn(move || {
                for job in rx {
                    let r = encode_chunk(job.thread, job.width, &job.payload, level);
                    let _ = job.done.send(r);
                }
            });
        }
        Arc::new(Receiver {
            base: base.to_path_buf(),
            discard,
            level,
            next_index: Mutex::new(0),
            jobs: tx,
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
        let r = self.read_conn(&mut s, &mut res);
        if let Err(e) = r {
            res.errors.push(e);
        }
        self.results.lock().unwrap().push(res);
    }

    fn read_conn(&self, s: &mut UnixStream, res: &mut ConnResult) -> Result<(), String> {
        let mut hdr = [0u8; wire::FRAME_HEADER];
        let mut writer: Option<Writer> = None;
        let (done_tx, done_rx) = crossbeam::channel::unbounded::<std::io::Result<Vec<u8>>>();
        let mut pending = 0usize;
        // Truth sent ahead of its chunk, per thread.
        let mut truth_ahead: std::collections::HashMap<u32, Vec<u8>> = std::collections::HashMap::new();
        let write_done = |writer: &mut Option<Writer>, r: std::io::Result<Vec<u8>>, res: &mut ConnResult| match (writer.as_mut(), r) {
            (Some(w), Ok(rec)) => {
                if let Err(e) = w.record(RecordKind::Chunk, &rec) {
                    res.errors.push(format!("writing a chunk: {e}"));
                }
            }
            (_, Err(e)) => res.errors.push(format!("compressing a chunk: {e}")),
            (None, _) => {}
        };
        loop {
            if !read_full(s, &mut hdr)? {
                break;
            }
            let kind = u32::from_le_bytes(hdr[0..4].try_into().unwrap());
            let thread = u32::from_le_bytes(hdr[4..8].try_into().unwrap());
            let len = u64::from_le_bytes(hdr[8..16].try_into().unwrap());
            if len > wire::MAX_FRAME {
                return Err(format!("malformed frame from the client (kind {kind}, {len} bytes)"));
            }
            let mut payload = vec![0u8; len as usize];
            if !read_full(s, &mut payload)? && len > 0 {
                return Err("the client's stream ends inside a frame".into());
            }
            let w = |writer: &mut Option<Writer>, res: &mut ConnResult, kind: RecordKind, p: &[u8]| {
                if let Some(w) = writer.as_mut() {
                    if let Err(e) = w.record(kind, p) {
                        res.errors.push(format!("writing the profile: {e}"));
                    }
                }
            };
            match kind {
                wire::HELLO => {
                    let mut meta: Metadata = serde_json::from_slice(&payload).map_err(|e| format!("bad hello: {e}"))?;
                    res.pid = meta.pid;
                    {
                        let mut pids = self.pids.lock().unwrap();
                        if meta.parent.is_none() && pids.contains(&meta.pid) {
                            meta.parent = Some(dep_profile::container::ParentLink { how: "exec".into(), parent_pid: meta.pid });
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
                        let f = File::create(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
                        let width = Width::from_bits(meta.width).ok_or("bad width in hello")?;
                        let mut pw =
                            ProfileWriter::new(BufWriter::with_capacity(1 << 20, f), width, self.level).map_err(|e| e.to_string())?;
                        pw.meta(&meta).map_err(|e| e.to_string())?;
                        res.path = Some(path);
                        writer = Some(pw);
                    }
                }
                wire::MODULE => {
                    let mut m: dep_profile::container::ModuleEvent =
                        serde_json::from_slice(&payload).map_err(|e| format!("bad module record: {e}"))?;
                    if m.build_id.is_none() && m.event == "load" && m.path.starts_with('/') {
                        m.build_id = build_id(&m.path);
                    }
                    w(&mut writer, res, RecordKind::Module, &serde_json::to_vec(&m).unwrap_or(payload))
                }
                wire::THREAD => w(&mut writer, res, RecordKind::Thread, &payload),
                wire::BLOCK => w(&mut writer, res, RecordKind::Block, &payload),
                wire::TRUTH_PART => truth_ahead.entry(thread).or_default().extend_from_slice(&payload),
                wire::CHUNK => {
                    let payload = match truth_ahead.remove(&thread) {
                        Some(ahead) => prepend_truth(&payload, &ahead).ok_or("malformed chunk frame from the client")?,
                        None => payload,
                    };
                    if let Some(width) = writer.as_ref().map(|w| w.width()) {
                        self.jobs.send(Job { thread, width, payload, done: done_tx.clone() }).map_err(|_| "compression pool stopped")?;
                        pending += 1;
                        while let Ok(r) = done_rx.try_recv() {
                            pending -= 1;
                            write_done(&mut writer, r, res);
                        }
                    }
                }
                wire::COUNTS if payload.len() == 32 => {
                    for (i, c) in res.counts.iter_mut().enumerate() {
                        *c += u64::from_le_bytes(payload[8 * i..8 * i + 8].try_into().unwrap());
                    }
                }
                wire::EXIT if payload.len() == 4 => res.exit = Some(i32::from_le_bytes(payload[..4].try_into().unwrap())),
                wire::MESSAGE => eprintln!("dep: {}", String::from_utf8_lossy(&payload)),
                other => return Err(format!("unknown frame kind {other} from the client")),
            }
        }
        while pending > 0 {
            let r = done_rx.recv().map_err(|_| "compression pool stopped")?;
            pending -= 1;
            write_done(&mut writer, r, res);
        }
        res.complete = true;
        if let Some(mut w) = writer {
            if let Err(e) = w.flush() {
                res.errors.push(format!("writing the profile: {e}"));
            }
            let idx = self.results.lock().unwrap().len();
            self.writers.lock().unwrap().push((idx, w));
        }
        Ok(())
    }

    /// Appends the end record to every profile: `main_status` for the first process image.
    pub fn finish(&self, main_status: i32) -> Vec<String> {
        let mut errors = Vec::new();
        let results = self.results.lock().unwrap();
        let now = now_ns();
        for (idx, mut w) in self.writers.lock().unwrap().drain(..) {
            let r = &results[idx];
            let is_main = r.path.as_deref() == Some(self.base.as_path());
            let exit_status = if is_main { main_status } else { r.exit.unwrap_or(-1) };
            let end = EndInfo { exit_status, end_time_ns: now, lost_bytes: 0 };
            if let Err(e) = w.end(&end).and_then(|_| w.flush()) {
                errors.push(format!("writing the profile: {e}"));
            }
        }
        errors
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

fn encode_chunk(thread: u32, width: Width, payload: &[u8], level: i32) -> std::io::Result<Vec<u8>> {
    let h = ChunkHeader::decode(payload).ok_or_else(|| std::io::Error::other("malformed chunk frame"))?;
    let body = &payload[wire::CHUNK_HEADER..];
    let (tags, rest) = body.split_at(h.tags_len as usize);
    let (values, truth) = rest.split_at(h.values_len as usize);
    ChunkData { thread, seq: h.seq, hi: h.hi, status: h.status, last: h.last, regs: h.regs, tags, values, truth }.encode(width, level)
}

/// Reads exactly `buf.len()` bytes; `false` at a clean end of stream before the first byte.
fn read_full(s: &mut UnixStream, buf: &mut [u8]) -> Result<bool, String> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err("the client's stream ends inside a frame".into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading from the client: {e}")),
        }
    }
    Ok(true)
}

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}
