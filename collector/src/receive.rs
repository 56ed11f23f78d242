//! Receives what client processes send and writes one profile per process image.
//!
//! Chunks arrive uncompressed, in slots of memory shared with the client thread that filled
//! them ([`crate::slab`]) or, where a thread has none, in the frame itself; a pool of
//! threads compresses them while the connection's reader goes on. A client waits (rather
//! than lose data) when compression falls behind: for a slot the pool has not given back,
//! or on the bounded queue.

use crate::launch::Compression;
use crate::sink::{ProfileSink, SinkError};
use crate::slab::{Conn, Slab, SlabError};
use crate::wire::{self, ChunkHeader};
use dep_profile::container::{ChunkData, ChunkEncoder, Metadata, RecordKind, ValuesZstd};
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
    #[error(transparent)]
    Slab(#[from] SlabError),
    #[error("a slab chunk frame from thread {0}, which has no slab, or names no slot of it")]
    SlabChunk(u32),
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

/// A compression job: the chunk and where to send the encoded record.
struct Job {
    thread: u32,
    width: Width,
    /// Where DEP_m gets zstd on top of packing.
    values: ValuesZstd,
    chunk: Chunk,
    done: crossbeam::channel::Sender<std::io::Result<Vec<u8>>>,
}

/// Where a chunk's bytes are.
enum Chunk {
    /// A chunk frame's payload: its header, then the streams.
    Frame(Vec<u8>),
    /// A slot of a thread's slab, given back once encoded; `ahead`: truth records sent
    /// before it, which go in front of the slot's own.
    Slot { slab: Arc<Slab>, slot: u32, header: ChunkHeader, ahead: Option<Vec<u8>> },
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
    let f = File::open(path).ok()?;
    // SAFETY: read-only map of a file the program itself has mapped.
    let map = unsafe { memmap2::Mmap::map(&f) }.ok()?;
    build_id_of(&map)
}

/// The GNU build id of an ELF image, in hex.
fn build_id_of(image: &[u8]) -> Option<String> {
    use object::Object;
    let obj = object::File::parse(image).ok()?;
    let id = obj.build_id().ok()??;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

/// The build id a loaded module gets in the profile: its file's, and for the vDSO of a 64-bit
/// program (`wide`), which has no file, the launcher's own vDSO's where it is as large as the
/// program's (the same kernel's 64-bit vDSO; a 32-bit program's is another image), so that
/// readers on this kernel can name its functions (`dep_profile::vdso`).
fn module_build_id(path: &str, size: u64, wide: bool) -> Option<String> {
    if path == dep_profile::vdso::PATH {
        let own = dep_profile::vdso::own_image().filter(|_| wide)?;
        return (own.len() as u64 == size).then(|| build_id_of(own)).flatten();
    }
    path.starts_with('/').then(|| build_id(path)).flatten()
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
                        Ok(enc) => encode_chunk(enc, job.thread, job.width, job.values, &job.chunk),
                        Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
                    };
                    let _ = job.done.send(r);
                    match job.chunk {
                        Chunk::Frame(payload) => {
                            let _ = spare.try_send(payload);
                        }
                        Chunk::Slot { slab, slot, .. } => slab.release(slot),
                    }
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

    /// Processes that have connected.
    pub fn connected(&self) -> usize {
        self.pids.lock().unwrap().len()
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

    fn handle(&self, s: UnixStream) {
        let mut res = ConnResult::default();
        let mut writer = None;
        let mut conn = Conn::new(s);
        let mut slabs = std::collections::HashMap::new();
        let r = self.read_conn(&mut conn, &mut slabs, &mut res, &mut writer);
        // Whatever ended the stream, no thread waits any more for a slot.
        for slab in slabs.values() {
            slab.close();
        }
        if let Err(e) = r {
            res.errors.push(e.to_string());
            // The program goes on; its sends now fail at once (it ignores that), and its
            // threads stop waiting for slots, whose frames would never be read.
            let _ = conn.stream.shutdown(std::net::Shutdown::Both);
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

    fn read_conn(
        &self,
        s: &mut Conn,
        slabs: &mut std::collections::HashMap<u32, Arc<Slab>>,
        res: &mut ConnResult,
        writer: &mut Option<Writer>,
    ) -> Result<(), ReceiveError> {
        let mut hdr = [0u8; wire::FRAME_HEADER];
        // Truth sent ahead of its chunk, per thread.
        let mut truth_ahead: std::collections::HashMap<u32, Vec<u8>> = std::collections::HashMap::new();
        // Whether the program is a 64-bit process, as the launcher is (from its hello).
        let mut wide = false;
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
                    wide = meta.width == 64;
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
                    if m.build_id.is_none() && m.event == dep_profile::container::ModuleEventKind::Load {
                        m.build_id = module_build_id(&m.path, m.size, wide);
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
                    self.compress(writer, thread, Chunk::Frame(payload), false)?;
                }
                wire::SLAB => {
                    let fd = s.take_fd().ok_or(SlabError::NoDescriptor)?;
                    // A thread sends one; a second replaces the first (whose jobs keep it).
                    slabs.insert(thread, Arc::new(Slab::map(fd, &payload)?));
                }
                wire::SLAB_CHUNK => {
                    let slab = slabs.get(&thread).ok_or(ReceiveError::SlabChunk(thread))?;
                    let (slot, header) = wire::parse_slab_chunk(&payload, slab.layout()).ok_or(ReceiveError::SlabChunk(thread))?;
                    let ahead = truth_ahead.remove(&thread);
                    if ahead
                        .as_ref()
                        .is_some_and(|a| a.len() as u64 + header.truth_len > dep_profile::container::Section::Truth.max_raw_len())
                    {
                        return Err(ReceiveError::Chunk);
                    }
                    // Behind: the launcher still holds another of this thread's slots.
                    let behind = slab.held_besides(slot) >= 1;
                    self.compress(writer, thread, Chunk::Slot { slab: slab.clone(), slot, header, ahead }, behind)?;
                }
                wire::COUNTS if payload.len() == 32 => {
                    for (i, c) in res.counts.iter_mut().enumerate() {
                        *c += u64::from_le_bytes(payload[8 * i..8 * i + 8].try_into().unwrap());
                    }
                }
                wire::EXIT if payload.len() == 4 => res.exit = Some(i32::from_le_bytes(payload[..4].try_into().unwrap())),
                wire::MESSAGE => {
                    // Not eprintln!, which panics where standard error is closed: the stream goes on.
                    use std::io::Write as _;
                    let _ = writeln!(std::io::stderr(), "dep: {}", String::from_utf8_lossy(&payload));
                }
                other => return Err(ReceiveError::UnknownFrame(other)),
            }
        }
        Ok(())
    }

    /// Hands `chunk` to the compression pool, its record to go into the profile in arrival
    /// order; without a profile (no hello yet) it is dropped, its slot given back.
    fn compress(&self, writer: &Option<Writer>, thread: u32, chunk: Chunk, behind: bool) -> Result<(), ReceiveError> {
        let Some(w) = writer else {
            if let Chunk::Slot { slab, slot, .. } = chunk {
                slab.release(slot);
            }
            return Ok(());
        };
        let (done, r) = crossbeam::channel::bounded(1);
        // Behind: as many chunks wait as there are threads to compress them, or (`behind`)
        // the chunk's thread has another slot waiting.
        let values = match self.compression {
            Compression::Small => ValuesZstd::Always,
            Compression::Fast => ValuesZstd::CHEAP,
            Compression::Auto if behind || self.jobs.len() >= self.workers => ValuesZstd::CHEAP,
            Compression::Auto => ValuesZstd::PAYS,
        };
        self.jobs.send(Job { thread, width: w.width, values, chunk, done }).map_err(|_| ReceiveError::PoolStopped)?;
        // Chunks are written in the order they came, so that a thread's chunks in any
        // prefix of the file are consecutive (a full disk cuts the file anywhere).
        let _ = w.items.send(Item::Chunk(r));
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

fn encode_chunk(enc: &mut ChunkEncoder, thread: u32, width: Width, zstd: ValuesZstd, chunk: &Chunk) -> std::io::Result<Vec<u8>> {
    let encode = |enc: &mut ChunkEncoder, h: &ChunkHeader, tags, values, truth| {
        enc.encode(
            &ChunkData { thread, seq: h.seq, hi: h.hi, status: h.status, last: h.last, regs: h.regs, tags, values, truth },
            width,
            zstd,
        )
    };
    match chunk {
        Chunk::Frame(payload) => {
            let h = ChunkHeader::decode(payload).ok_or_else(|| std::io::Error::other("malformed chunk frame"))?;
            let body = &payload[wire::CHUNK_HEADER..];
            let (tags, rest) = body.split_at(h.tags_len as usize);
            let (values, truth) = rest.split_at(h.values_len as usize);
            encode(enc, &h, tags, values, truth)
        }
        Chunk::Slot { slab, slot, header: h, ahead } => {
            let l = *slab.layout();
            // SAFETY: the slot was handed over with this chunk and is released by the pool
            // only after the encoding; the lengths were checked against the layout.
            let (tags, values, truth) = unsafe {
                (
                    slab.region(*slot, 0, h.tags_len),
                    slab.region(*slot, l.tags, h.values_len),
                    slab.region(*slot, l.tags + l.values, h.truth_len),
                )
            };
            match ahead {
                Some(a) => encode(enc, h, tags, values, &[a.as_slice(), truth].concat()),
                None => encode(enc, h, tags, values, truth),
            }
        }
    }
}

/// Reads exactly `buf.len()` bytes; `false` at a clean end of stream before the first byte.
fn read_full(s: &mut impl Read, buf: &mut [u8]) -> Result<bool, ReceiveError> {
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
    use crate::sink::tests::meta;
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

    /// A first chunk's header with these stream lengths (no truth).
    fn header(last: bool, tags_len: u64, values_len: u64) -> ChunkHeader {
        ChunkHeader { seq: 0, last, hi: 0, status: 0, regs: [0; dep_profile::NUM_REGS], tags_len, values_len, truth_len: 0 }
    }

    fn frame(kind: u32, thread: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = wire::frame_header(kind, thread, payload.len() as u64).to_vec();
        f.extend_from_slice(payload);
        f
    }

    /// A chunk left in a slab's slot reaches the profile with the bytes the client wrote
    /// there, the slot comes back free once encoded, and the slab is closed when the
    /// stream ends.
    #[test]
    fn slab_chunks_reach_the_profile_and_free_their_slots() {
        use std::os::fd::AsRawFd;
        use std::sync::atomic::{AtomicU32, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("s.dep");
        let rx = Receiver::new(&base, false, 1, Compression::Small, 1);
        let (mut client, server) = UnixStream::pair().unwrap();
        let l = wire::SlabLayout { slots: 2, tags: 4096, values: 8192, truth: 0 };
        let fd = crate::slab::tests::memfd(&l);
        let view = memmap2::MmapOptions::new().len(l.len() as usize).map_raw(&File::from(fd.try_clone().unwrap())).unwrap();
        let word = |o: u64| {
            // SAFETY: a word of the test's view of the control page.
            unsafe { &*(view.as_ptr().add(o as usize) as *const AtomicU32) }
        };
        let tags: Vec<u8> = (0..64u8).collect();
        let values: Vec<u8> = (0..16u64).flat_map(|v| (v * 0x1234_5678).to_le_bytes()).collect();
        // SAFETY: slot 1's regions, inside the view.
        unsafe {
            let s = view.as_mut_ptr().add(l.slot_offset(1) as usize);
            s.copy_from_nonoverlapping(tags.as_ptr(), tags.len());
            s.add(l.tags as usize).copy_from_nonoverlapping(values.as_ptr(), values.len());
        }
        word(4).store(wire::SLOT_FULL, Ordering::Release);
        let h = header(true, 64, 128);
        client.write_all(&frame(wire::HELLO, 0, &serde_json::to_vec(&meta()).unwrap())).unwrap();
        crate::slab::tests::send_fd(&client, &frame(wire::SLAB, 0, &l.encode()), fd.as_raw_fd());
        client.write_all(&frame(wire::SLAB_CHUNK, 0, &wire::slab_chunk(1, &h))).unwrap();
        drop(client);
        rx.handle(server);
        assert_eq!(word(4).load(Ordering::Acquire), wire::SLOT_FREE, "slot 1 given back");
        assert_eq!(word(wire::SlabLayout::CLOSED).load(Ordering::Acquire), 1, "closed at the end");
        let r = rx.results.lock().unwrap()[0].clone();
        assert!(r.complete && r.errors.is_empty(), "{:?}", r.errors);
        assert!(rx.finish(0).is_empty());
        let p = dep_profile::container::Profile::open(&base).unwrap();
        let c = p.chunk(&p.threads[0].chunks[0]).unwrap();
        assert_eq!(c.decompress(dep_profile::container::Section::Tags).unwrap(), tags);
        assert_eq!(c.decompress(dep_profile::container::Section::Values).unwrap(), values);
    }

    /// A slab chunk from a thread with no slab, or for a slot it does not have, ends the
    /// connection with an error naming the thread, and the client's next send fails (so it
    /// never waits for a slot).
    #[test]
    fn slab_chunks_without_their_slab_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let l = wire::SlabLayout { slots: 2, tags: 4096, values: 8192, truth: 0 };
        let h = header(false, 2, 0);
        for (with_slab, slot) in [(false, 0), (true, 2)] {
            let rx = Receiver::new(&dir.path().join("r.dep"), false, 1, Compression::Small, 1);
            let (mut client, server) = UnixStream::pair().unwrap();
            client.write_all(&frame(wire::HELLO, 0, &serde_json::to_vec(&meta()).unwrap())).unwrap();
            if with_slab {
                let fd = crate::slab::tests::memfd(&l);
                crate::slab::tests::send_fd(&client, &frame(wire::SLAB, 3, &l.encode()), std::os::fd::AsRawFd::as_raw_fd(&fd));
            }
            client.write_all(&frame(wire::SLAB_CHUNK, 3, &wire::slab_chunk(slot, &h))).unwrap();
            rx.handle(server);
            let r = rx.results.lock().unwrap()[0].clone();
            assert!(!r.complete);
            assert_eq!(r.errors, vec!["a slab chunk frame from thread 3, which has no slab, or names no slot of it".to_string()]);
            let sent = (0..64).try_for_each(|_| client.write_all(&[0; 4096]));
            assert_eq!(sent.unwrap_err().kind(), std::io::ErrorKind::BrokenPipe);
        }
    }

    /// A profile that cannot be created is named with its path and the OS's reason.
    #[test]
    fn an_uncreatable_profile_is_named() {
        let path = std::env::temp_dir().join(format!("dep-no-such-dir-{}", std::process::id())).join("p.dep");
        match ProfileSink::create(&path, Width::W64, 1, &meta()) {
            Err(SinkError::Create { path: p, err }) => {
                assert_eq!(p, path);
                assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
            }
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("created a profile in a missing directory"),
        }
    }
}
