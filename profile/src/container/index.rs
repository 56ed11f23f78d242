//! The seek index: for every chunk, in thread order and each thread's in sequence, what
//! recovering it gives (instructions, blocks, reads, writes). A reader that wants
//! instructions N..M of a thread sums the counts before each chunk and reads only the
//! chunks that hold them. Record kind 7, after the end record (`dep index`, or
//! `dep record --index`):
//!
//! ```text
//! 0 entries u64, then per entry (40 bytes):
//!   0 thread u32   4 seq u32   8 instructions u64   16 blocks u64   24 reads u64   32 writes u64
//! ```

use super::reader::ThreadInfo;

/// Bytes of the entry count before the entries.
pub const INDEX_HEADER_LEN: usize = 8;
/// Bytes per entry.
pub const INDEX_ENTRY_LEN: usize = 40;

/// What recovering one chunk gives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkCounts {
    pub instructions: u64,
    pub blocks: u64,
    pub reads: u64,
    pub writes: u64,
}

/// One chunk's place in its thread: the number of its first instruction (instructions
/// are numbered per thread from 0) and its counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexEntry {
    pub first: u64,
    pub counts: ChunkCounts,
}

/// The seek index of a profile: per thread (by index), per chunk (by sequence number).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Index {
    pub threads: Vec<Vec<IndexEntry>>,
}

/// Why an index record is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    #[error("index record of {0} bytes is not an entry count and whole {INDEX_ENTRY_LEN}-byte entries")]
    Length(usize),
    #[error("index record says {claimed} entries but holds {held}")]
    Count { claimed: u64, held: usize },
    #[error("index has {entries} entries for a profile of {chunks} chunks")]
    Chunks { entries: usize, chunks: usize },
    #[error("index entry {entry} names thread {thread} chunk {seq}, where thread {want_thread} chunk {want_seq} comes")]
    Order { entry: usize, thread: u32, seq: u32, want_thread: u32, want_seq: u32 },
    #[error("index entry {entry}: thread {thread}'s instruction numbers pass 2^64")]
    Overflow { entry: usize, thread: u32 },
    #[error("a second index record")]
    Twice,
}

impl Index {
    /// Builds the index from each chunk's counts, given thread by thread in sequence.
    pub fn from_counts(threads: &[ThreadInfo], mut counts: impl FnMut(u32, u32) -> ChunkCounts) -> Result<Index, IndexError> {
        let mut out = Vec::with_capacity(threads.len());
        let mut entry = 0;
        for t in threads {
            let mut first = 0u64;
            let mut mine = Vec::with_capacity(t.chunks.len());
            for c in &t.chunks {
                let counts = counts(c.thread, c.seq);
                mine.push(IndexEntry { first, counts });
                first = first.checked_add(counts.instructions).ok_or(IndexError::Overflow { entry, thread: t.index })?;
                entry += 1;
            }
            out.push(mine);
        }
        Ok(Index { threads: out })
    }

    /// Reads an index record's payload against the profile's threads and their chunks:
    /// one entry per chunk, in thread order, each thread's in sequence.
    pub fn parse(payload: &[u8], threads: &[ThreadInfo]) -> Result<Index, IndexError> {
        if payload.len() < INDEX_HEADER_LEN || !(payload.len() - INDEX_HEADER_LEN).is_multiple_of(INDEX_ENTRY_LEN) {
            return Err(IndexError::Length(payload.len()));
        }
        let claimed = u64::from_le_bytes(payload[..8].try_into().expect("8 bytes"));
        let entries = &payload[INDEX_HEADER_LEN..];
        let held = entries.len() / INDEX_ENTRY_LEN;
        if claimed != held as u64 {
            return Err(IndexError::Count { claimed, held });
        }
        let chunks: usize = threads.iter().map(|t| t.chunks.len()).sum();
        if held != chunks {
            return Err(IndexError::Chunks { entries: held, chunks });
        }
        let mut raw = entries.chunks_exact(INDEX_ENTRY_LEN).enumerate();
        let u32_at = |e: &[u8], at: usize| u32::from_le_bytes(e[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |e: &[u8], at: usize| u64::from_le_bytes(e[at..at + 8].try_into().expect("8 bytes"));
        let by_chunk = |entry: usize, e: &[u8], want_thread: u32, want_seq: u32| -> Result<ChunkCounts, IndexError> {
            let (thread, seq) = (u32_at(e, 0), u32_at(e, 4));
            if (thread, seq) != (want_thread, want_seq) {
                return Err(IndexError::Order { entry, thread, seq, want_thread, want_seq });
            }
            Ok(ChunkCounts { instructions: u64_at(e, 8), blocks: u64_at(e, 16), reads: u64_at(e, 24), writes: u64_at(e, 32) })
        };
        let mut counts = Vec::with_capacity(held);
        for t in threads {
            for c in &t.chunks {
                let (entry, e) = raw.next().expect("as many entries as chunks");
                counts.push(by_chunk(entry, e, c.thread, c.seq)?);
            }
        }
        let mut it = counts.into_iter();
        Index::from_counts(threads, |_, _| it.next().expect("one count per chunk"))
    }

    /// The record's payload.
    pub fn encode(&self, threads: &[ThreadInfo]) -> Vec<u8> {
        let n: usize = self.threads.iter().map(Vec::len).sum();
        let mut out = Vec::with_capacity(INDEX_HEADER_LEN + n * INDEX_ENTRY_LEN);
        out.extend_from_slice(&(n as u64).to_le_bytes());
        for (t, entries) in threads.iter().zip(&self.threads) {
            for (c, e) in t.chunks.iter().zip(entries) {
                out.extend_from_slice(&c.thread.to_le_bytes());
                out.extend_from_slice(&c.seq.to_le_bytes());
                for v in [e.counts.instructions, e.counts.blocks, e.counts.reads, e.counts.writes] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        out
    }

    /// Thread `thread`'s entries, one per chunk in sequence (empty for a thread unknown).
    pub fn thread(&self, thread: u32) -> &[IndexEntry] {
        self.threads.get(thread as usize).map_or(&[], Vec::as_slice)
    }

    /// Instructions thread `thread` executed in the profile.
    pub fn instructions(&self, thread: u32) -> u64 {
        self.thread(thread).last().map_or(0, |e| e.first + e.counts.instructions)
    }
}
