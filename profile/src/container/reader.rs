//! Reads a profile in place from a memory map.

use super::chunk::ChunkView;
use super::index::{Index, IndexError};
use super::meta::{BlockEntry, EndInfo, Metadata, ModuleEvent, ThreadEvent, ThreadEventKind, BLOCK_HEADER_LEN, MAX_XSAVE_SIZE};
use super::{
    padding, ProfileError, RecordKind, DERIVE_VERSION, FILE_HEADER_LEN, MAGIC, OLDEST_VERSION, RECORD_HEADER_LEN, RECORD_MAGIC,
    ROOTS_VERSION, VERSION,
};
use crate::blocks::MAX_BLOCK_INSNS;
use crate::Width;
use memmap2::Mmap;
use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a chunk's payload lies in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkRef {
    pub thread: u32,
    pub seq: u32,
    /// Offset of the record header.
    pub offset: u64,
    /// Instructions the thread ran unrecorded right before this chunk (format 8: a window
    /// of `dep record` starts here).
    pub unrecorded: u64,
    payload: (usize, usize),
    crc: u32,
}

/// A block of the block table, its code in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockRef {
    pub addr: u64,
    pub version: u32,
    pub insn_count: u32,
    code: Range<usize>,
}

/// One thread's entry in the thread table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadInfo {
    pub index: u32,
    pub tid: u32,
    pub start_ns: Option<u64>,
    pub end_ns: Option<u64>,
    /// The thread's chunks in sequence order.
    pub chunks: Vec<ChunkRef>,
    /// Who created it and where, when the profile says (format 4).
    pub spawn: Option<Spawn>,
}

/// Where a thread was created: by thread `parent`, at its sync record `seq` (the one
/// before the creating system call), with TLS pointer `tls` (0 if none was set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spawn {
    pub parent: u32,
    pub seq: u64,
    pub tls: u64,
}

/// An open profile.
pub struct Profile {
    path: String,
    map: Mmap,
    pub width: Width,
    /// The format version it was written in.
    pub version: u16,
    pub meta: Metadata,
    pub modules: Vec<ModuleEvent>,
    pub threads: Vec<ThreadInfo>,
    blocks: Vec<BlockRef>,
    block_index: HashMap<(u64, u32), usize>,
    pub end: Option<EndInfo>,
    /// The seek index, when the profile carries one ([`Index`]).
    pub index: Option<Index>,
    /// Offset where a torn last record starts, when the writer was killed mid-record.
    pub truncated_at: Option<u64>,
    /// Chunks handed out by [`chunk`](Self::chunk) so far: what a seek read.
    chunks_read: AtomicU64,
}

/// The thread table indexed by thread index (readers look threads up as `threads[index]`):
/// `sorted` (by index) with the threads whose records were all lost filled in empty. An
/// index of twice `records` (the thread and chunk records naming threads) or more is
/// returned as the error: a genuine profile lost far fewer threads than it kept, and
/// filling up to any index would take memory the file does not account for.
fn dense(sorted: Vec<ThreadInfo>, records: usize) -> Result<Vec<ThreadInfo>, u32> {
    if let Some(t) = sorted.last().filter(|t| t.index as usize >= records.saturating_mul(2)) {
        return Err(t.index);
    }
    let mut out = Vec::with_capacity(sorted.last().map_or(0, |t| t.index as usize + 1));
    for t in sorted {
        while out.len() < t.index as usize {
            out.push(ThreadInfo { index: out.len() as u32, ..Default::default() });
        }
        out.push(t);
    }
    Ok(out)
}

impl Profile {
    /// Opens and indexes a profile; chunk payloads are checked when read.
    pub fn open(path: impl AsRef<Path>) -> Result<Profile, ProfileError> {
        let path_s = path.as_ref().display().to_string();
        let file = File::open(path.as_ref()).map_err(|err| ProfileError::Io { path: path_s.clone(), err })?;
        // SAFETY: the map is only read, through slices within its length; a writer appending
        // concurrently only adds bytes past that length. Another process truncating the file
        // makes a read past its new end raise SIGBUS, which the `dep` command's
        // `truncation::guard` turns into a one-line error (profile/tests/truncation.rs).
        let map = unsafe { Mmap::map(&file) }.map_err(|err| ProfileError::Io { path: path_s.clone(), err })?;
        Self::index(path_s, map)
    }

    fn index(path: String, map: Mmap) -> Result<Profile, ProfileError> {
        let not = |why: &str| ProfileError::NotAProfile { path: path.clone(), why: why.to_string() };
        if map.len() < FILE_HEADER_LEN {
            return Err(not(if map.is_empty() { "empty file" } else { "shorter than the file header" }));
        }
        if &map[..8] != MAGIC {
            return Err(not("bad magic"));
        }
        let version = u16::from_le_bytes([map[8], map[9]]);
        if !(OLDEST_VERSION..=VERSION).contains(&version) {
            return Err(ProfileError::Version { path, version });
        }
        let width = Width::from_bits(map[10]).ok_or_else(|| not(&format!("address width {} is neither 32 nor 64", map[10])))?;

        let mut meta = None;
        let mut modules = Vec::new();
        let mut threads: Vec<ThreadInfo> = Vec::new();
        let mut spawns: Vec<(u32, Spawn)> = Vec::new();
        let mut gaps: Vec<(usize, u32, u32, u64)> = Vec::new();
        let mut blocks = Vec::new();
        let mut block_index = HashMap::new();
        let mut end = None;
        // The index record's payload and offset, read once the chunks are all known.
        let mut index_at: Option<(usize, std::ops::Range<usize>)> = None;
        let mut truncated_at = None;
        // Thread and chunk records: a thread index beyond their count cannot be genuine.
        let mut thread_records = 0usize;
        let mut off = FILE_HEADER_LEN;
        let rec_err = |offset: usize, why: String| ProfileError::Record { path: path.clone(), offset: offset as u64, why };
        // Where each thread index is in `threads`: a lookup per record, not a scan (a
        // profile of n thread and chunk records must not take n^2 steps to open).
        let mut thread_at: HashMap<u32, usize> = HashMap::new();
        let mut thread_mut = |threads: &mut Vec<ThreadInfo>, index: u32| -> usize {
            *thread_at.entry(index).or_insert_with(|| {
                threads.push(ThreadInfo { index, ..Default::default() });
                threads.len() - 1
            })
        };
        while off < map.len() {
            if map.len() - off < RECORD_HEADER_LEN {
                truncated_at = Some(off as u64);
                break;
            }
            let h = &map[off..off + RECORD_HEADER_LEN];
            let magic = u16::from_le_bytes([h[0], h[1]]);
            if magic != RECORD_MAGIC {
                if map[off..].iter().all(|&b| b == 0) {
                    truncated_at = Some(off as u64);
                    break;
                }
                return Err(rec_err(off, format!("bad record magic {magic:#06x}")));
            }
            let kind_raw = u16::from_le_bytes([h[2], h[3]]);
            let crc = u32::from_le_bytes(h[4..8].try_into().unwrap());
            let len = u64::from_le_bytes(h[8..16].try_into().unwrap());
            let start = off + RECORD_HEADER_LEN;
            let avail = (map.len() - start) as u64;
            if len > avail {
                truncated_at = Some(off as u64);
                break;
            }
            let end_payload = start + len as usize;
            let payload = &map[start..end_payload];
            let kind = RecordKind::from_u16(kind_raw).ok_or_else(|| rec_err(off, format!("unknown record kind {kind_raw}")))?;
            if kind != RecordKind::Chunk && crc32fast::hash(payload) != crc {
                return Err(rec_err(off, format!("{kind:?} record checksum mismatch")));
            }
            let json_err = |e: serde_json::Error| rec_err(off, format!("{kind:?} record is not valid: {e}"));
            match kind {
                RecordKind::Meta => {
                    let m = serde_json::from_slice::<Metadata>(payload).map_err(json_err)?;
                    if m.xsave_size > MAX_XSAVE_SIZE {
                        return Err(ProfileError::XsaveSize { path: path.clone(), size: m.xsave_size });
                    }
                    meta = Some(m);
                }
                RecordKind::Module => {
                    let m = serde_json::from_slice::<ModuleEvent>(payload).map_err(json_err)?;
                    if m.base.checked_add(m.size).is_none() {
                        return Err(ProfileError::ModuleRange { path: path.clone(), offset: off as u64, base: m.base, size: m.size });
                    }
                    modules.push(m);
                }
                RecordKind::Thread => {
                    thread_records += 1;
                    let t: ThreadEvent = serde_json::from_slice(payload).map_err(json_err)?;
                    match t.event {
                        ThreadEventKind::Spawn => {
                            let (Some(child), Some(seq)) = (t.child_tid, t.seq) else {
                                return Err(rec_err(off, "spawn event without the new thread's id or sequence number".into()));
                            };
                            spawns.push((child, Spawn { parent: t.index, seq, tls: t.tls.unwrap_or(0) }));
                        }
                        ThreadEventKind::Unrecorded => {
                            let (Some(chunk), Some(n)) = (t.chunk, t.instructions) else {
                                return Err(rec_err(off, "unrecorded event without its chunk or instruction count".into()));
                            };
                            gaps.push((off, t.index, chunk, n));
                        }
                        ThreadEventKind::Start | ThreadEventKind::End => {
                            let i = thread_mut(&mut threads, t.index);
                            threads[i].tid = t.tid;
                            if t.event == ThreadEventKind::Start {
                                threads[i].start_ns = Some(t.time_ns);
                            } else {
                                threads[i].end_ns = Some(t.time_ns);
                            }
                        }
                    }
                }
                RecordKind::End => end = Some(serde_json::from_slice::<EndInfo>(payload).map_err(json_err)?),
                RecordKind::Index => {
                    if index_at.is_some() {
                        return Err(ProfileError::Index { path: path.clone(), offset: off as u64, err: IndexError::Twice });
                    }
                    index_at = Some((off, start..end_payload));
                }
                RecordKind::Block => {
                    if payload.len() < BLOCK_HEADER_LEN {
                        return Err(rec_err(off, "block record shorter than its header".into()));
                    }
                    let addr = u64::from_le_bytes(payload[0..8].try_into().unwrap());
                    let version = u32::from_le_bytes(payload[8..12].try_into().unwrap());
                    let insn_count = u32::from_le_bytes(payload[12..16].try_into().unwrap());
                    let code_len = u32::from_le_bytes(payload[16..20].try_into().unwrap()) as usize;
                    if BLOCK_HEADER_LEN + code_len != payload.len() {
                        return Err(rec_err(
                            off,
                            format!("block {addr:#x} claims {code_len} code bytes in a {}-byte record", payload.len()),
                        ));
                    }
                    if insn_count as usize > MAX_BLOCK_INSNS {
                        let (offset, max) = (off as u64, MAX_BLOCK_INSNS);
                        return Err(ProfileError::BlockTooLong { path: path.clone(), offset, addr, version, insns: insn_count, max });
                    }
                    if block_index.insert((addr, version), blocks.len()).is_some() {
                        return Err(rec_err(off, format!("block {addr:#x} version {version} appears twice")));
                    }
                    let code = start + BLOCK_HEADER_LEN..end_payload;
                    blocks.push(BlockRef { addr, version, insn_count, code });
                }
                RecordKind::Chunk => {
                    if payload.len() < 8 {
                        return Err(rec_err(off, "chunk record shorter than its header".into()));
                    }
                    thread_records += 1;
                    let thread = u32::from_le_bytes(payload[0..4].try_into().unwrap());
                    let seq = u32::from_le_bytes(payload[4..8].try_into().unwrap());
                    let i = thread_mut(&mut threads, thread);
                    threads[i].chunks.push(ChunkRef { thread, seq, offset: off as u64, unrecorded: 0, payload: (start, end_payload), crc });
                }
            }
            off = end_payload + padding(len);
        }
        let meta = meta.ok_or_else(|| ProfileError::NoMetadata { path: path.clone() })?;
        threads.sort_by_key(|t| t.index);
        let mut threads = dense(threads, thread_records).map_err(|index| ProfileError::ThreadIndex {
            path: path.clone(),
            index,
            records: thread_records,
        })?;
        // Kernel ids are reused once a thread is gone: a spawn names the first thread after
        // its parent with that id and no creator yet.
        for (child, s) in spawns {
            if let Some(t) = threads.iter_mut().find(|t| t.tid == child && t.index > s.parent && t.spawn.is_none()) {
                t.spawn = Some(s);
            }
        }
        for t in &mut threads {
            t.chunks.sort_by_key(|c| c.seq);
            for (i, c) in t.chunks.iter().enumerate() {
                if c.seq != i as u32 {
                    return Err(ProfileError::Chunk {
                        path: path.clone(),
                        thread: t.index,
                        seq: i as u32,
                        offset: c.offset,
                        why: format!("missing (found chunk {} instead)", c.seq),
                    });
                }
            }
        }
        // A gap names the chunk after it. One naming a chunk past the thread's last is the
        // start of a window the run did not live to hand off, and goes with it.
        for (off, thread, seq, n) in gaps {
            let Some(c) = threads.get_mut(thread as usize).and_then(|t| t.chunks.get_mut(seq as usize)) else { continue };
            if c.unrecorded != 0 {
                return Err(rec_err(off, format!("a second unrecorded event for chunk {seq} of thread {thread}")));
            }
            c.unrecorded = n;
        }
        let index = match index_at {
            None => None,
            Some((at, range)) => {
                let index = Index::parse(&map[range], &threads);
                Some(index.map_err(|err| ProfileError::Index { path: path.clone(), offset: at as u64, err })?)
            }
        };
        Ok(Profile {
            path,
            map,
            width,
            version,
            meta,
            modules,
            threads,
            blocks,
            block_index,
            end,
            index,
            truncated_at,
            chunks_read: AtomicU64::new(0),
        })
    }

    /// The file's path as given.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The whole file, for readers that want to look in place.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Checks a chunk's checksum and layout and returns a view of it.
    pub fn chunk(&self, c: &ChunkRef) -> Result<ChunkView<'_>, ProfileError> {
        self.chunks_read.fetch_add(1, Ordering::Relaxed);
        let err = |why: String| ProfileError::Chunk { path: self.path.clone(), thread: c.thread, seq: c.seq, offset: c.offset, why };
        let payload = &self.map[c.payload.0..c.payload.1];
        if crc32fast::hash(payload) != c.crc {
            return Err(err("checksum mismatch".into()));
        }
        ChunkView::parse(payload, self.width).map_err(|e| err(e.to_string()))
    }

    /// Chunks in the profile, of every thread.
    pub fn chunk_count(&self) -> usize {
        self.threads.iter().map(|t| t.chunks.len()).sum()
    }

    /// How many chunks [`chunk`](Self::chunk) has handed out (each call counts).
    pub fn chunks_read(&self) -> u64 {
        self.chunks_read.load(Ordering::Relaxed)
    }

    /// Builds the chunk error for a problem found while decoding it.
    pub fn chunk_error(&self, c: &ChunkRef, why: String) -> ProfileError {
        ProfileError::Chunk { path: self.path.clone(), thread: c.thread, seq: c.seq, offset: c.offset, why }
    }

    /// The block table, in file order.
    pub fn blocks(&self) -> &[BlockRef] {
        &self.blocks
    }

    /// Looks up a block by address and version.
    pub fn block(&self, addr: u64, version: u32) -> Option<&BlockRef> {
        self.block_index.get(&(addr, version)).map(|&i| &self.blocks[i])
    }

    /// A block's code bytes, in place.
    pub fn code(&self, b: &BlockRef) -> &[u8] {
        &self.map[b.code.clone()]
    }

    /// A block as an owned entry.
    pub fn block_entry(&self, b: &BlockRef) -> BlockEntry {
        BlockEntry { addr: b.addr, version: b.version, insn_count: b.insn_count, code: self.code(b).to_vec() }
    }

    /// The semantics machine this profile was recorded on.
    pub fn machine(&self) -> crate::Machine {
        crate::Machine {
            width: self.width,
            xsave_size: self.meta.xsave_size,
            derive: self.version >= DERIVE_VERSION,
            roots: self.version >= ROOTS_VERSION,
        }
    }
}
