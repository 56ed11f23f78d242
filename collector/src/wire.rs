//! Frames the client sends to the launcher over a Unix socket, one connection per process
//! image: `kind u32, thread u32, len u64` (little-endian), then `len` bytes.

/// Bytes in a frame header.
pub const FRAME_HEADER: usize = 16;
/// Largest payload a frame may carry (guards the reader against a corrupt header).
pub const MAX_FRAME: u64 = 1 << 31;

/// JSON [`dep_profile::container::Metadata`]; the first frame of a connection.
pub const HELLO: u32 = 1;
/// JSON [`dep_profile::container::ModuleEvent`].
pub const MODULE: u32 = 2;
/// JSON [`dep_profile::container::ThreadEvent`].
pub const THREAD: u32 = 3;
/// A block record payload ([`dep_profile::container::BlockEntry::encode`]).
pub const BLOCK: u32 = 4;
/// A chunk, uncompressed: [`ChunkHeader`] then the three streams.
pub const CHUNK: u32 = 5;
/// `--discard` totals: u64 tag bytes, value bytes, truth bytes, chunks.
pub const COUNTS: u32 = 6;
/// The status the process passed to exit_group: i32.
pub const EXIT: u32 = 7;
/// A diagnostic line for the user's terminal.
pub const MESSAGE: u32 = 8;
/// Truth records sent ahead of the chunk they belong to (a long rep string filled the buffer).
pub const TRUTH_PART: u32 = 9;
/// A thread's shared buffers: a [`SlabLayout`]; the memfd holding them travels with the
/// frame as SCM_RIGHTS ancillary data.
pub const SLAB: u32 = 10;
/// A chunk left in a slot of the thread's slab: `slot u32, pad u32`, then a [`ChunkHeader`]
/// (whose lengths say how much of each of the slot's regions it fills). The launcher hands
/// the slot back by storing [`SLOT_FREE`] in its state word and waking it (a futex).
pub const SLAB_CHUNK: u32 = 11;

/// A slot's state word: the client may fill it.
pub const SLOT_FREE: u32 = 0;
/// A slot's state word: handed to the launcher, which has not finished with it.
pub const SLOT_FULL: u32 = 1;

/// How a thread's slab is laid out: a control page, then `slots` slots, each its DEP_c,
/// DEP_m and truth regions in that order. The control page holds one u32 state word per
/// slot ([`SLOT_FREE`] or [`SLOT_FULL`]) from offset 0, and at [`SlabLayout::CLOSED`] a word
/// the launcher sets to 1 when it reads no more chunks from the connection (the client then
/// stops waiting for slots).
///
/// Chunks go through shared memory so that neither side copies them: sent through the
/// socket, each byte was copied into the kernel by the program's thread and out of it by the
/// launcher (on bench/interp, 33 GB each way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlabLayout {
    pub slots: u32,
    pub tags: u64,
    pub values: u64,
    pub truth: u64,
}

impl SlabLayout {
    /// Bytes of the control page.
    pub const CONTROL: u64 = 4096;
    /// The most slots a slab may have.
    pub const MAX_SLOTS: u32 = 64;
    /// Offset of the closed word in the control page.
    pub const CLOSED: u64 = 4 * Self::MAX_SLOTS as u64;
    /// Bytes of the encoded layout.
    pub const ENCODED: usize = 32;
    /// The most bytes of DEP_c or DEP_m a region may hold (the profile's section limit).
    pub const MAX_REGION: u64 = 64 << 20;
    /// The most bytes of truth records a region may hold.
    pub const MAX_TRUTH: u64 = 1 << 30;

    /// Bytes of one slot.
    pub fn slot_len(&self) -> u64 {
        self.tags + self.values + self.truth
    }

    /// Offset of slot `i`'s first region in the slab.
    pub fn slot_offset(&self, i: u32) -> u64 {
        Self::CONTROL + i as u64 * self.slot_len()
    }

    /// Bytes of the whole slab.
    pub fn len(&self) -> u64 {
        self.slot_offset(self.slots)
    }

    /// `slots u32, pad u32, tags u64, values u64, truth u64`.
    pub fn encode(&self) -> [u8; Self::ENCODED] {
        let mut b = [0u8; Self::ENCODED];
        b[0..4].copy_from_slice(&self.slots.to_le_bytes());
        b[8..16].copy_from_slice(&self.tags.to_le_bytes());
        b[16..24].copy_from_slice(&self.values.to_le_bytes());
        b[24..32].copy_from_slice(&self.truth.to_le_bytes());
        b
    }

    /// Parses a layout, refusing one with no slot or too many, or regions past the limits
    /// or not whole pages (so every region is aligned for the words written into it).
    pub fn decode(b: &[u8]) -> Option<SlabLayout> {
        if b.len() != Self::ENCODED {
            return None;
        }
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let l =
            SlabLayout { slots: u32::from_le_bytes(b[0..4].try_into().unwrap()), tags: u64_at(8), values: u64_at(16), truth: u64_at(24) };
        let page = |n: u64| n.is_multiple_of(Self::CONTROL);
        let ok = (1..=Self::MAX_SLOTS).contains(&l.slots)
            && (1..=Self::MAX_REGION).contains(&l.tags)
            && (1..=Self::MAX_REGION).contains(&l.values)
            && l.truth <= Self::MAX_TRUTH
            && page(l.tags)
            && page(l.values)
            && page(l.truth);
        ok.then_some(l)
    }
}

/// Bytes of a [`SLAB_CHUNK`] frame's payload.
pub const SLAB_CHUNK_LEN: usize = 8 + CHUNK_HEADER;

/// A [`SLAB_CHUNK`] frame's payload.
pub fn slab_chunk(slot: u32, h: &ChunkHeader) -> [u8; SLAB_CHUNK_LEN] {
    let mut b = [0u8; SLAB_CHUNK_LEN];
    b[0..4].copy_from_slice(&slot.to_le_bytes());
    b[8..].copy_from_slice(&h.encode());
    b
}

/// Parses a [`SLAB_CHUNK`] payload: the slot and the header, whose streams must fit the
/// slot's regions of `layout`.
pub fn parse_slab_chunk(b: &[u8], layout: &SlabLayout) -> Option<(u32, ChunkHeader)> {
    if b.len() != SLAB_CHUNK_LEN {
        return None;
    }
    let slot = u32::from_le_bytes(b[0..4].try_into().unwrap());
    let h = ChunkHeader::parse(&b[8..])?;
    let fits = slot < layout.slots && h.tags_len <= layout.tags && h.values_len <= layout.values && h.truth_len <= layout.truth;
    fits.then_some((slot, h))
}

/// Bytes in a chunk frame's header.
pub const CHUNK_HEADER: usize = 24 + 8 * dep_profile::NUM_REGS + 24;

/// The fixed part of a chunk frame (the thread is in the frame header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    pub seq: u32,
    pub last: bool,
    pub hi: u64,
    pub status: u32,
    pub regs: [u64; dep_profile::NUM_REGS],
    pub tags_len: u64,
    pub values_len: u64,
    pub truth_len: u64,
}

impl ChunkHeader {
    /// `seq u32, flags u32, hi u64, status u32, pad u32, regs, tags_len, values_len, truth_len`.
    pub fn encode(&self) -> [u8; CHUNK_HEADER] {
        let mut b = [0u8; CHUNK_HEADER];
        b[0..4].copy_from_slice(&self.seq.to_le_bytes());
        b[4..8].copy_from_slice(&(self.last as u32).to_le_bytes());
        b[8..16].copy_from_slice(&self.hi.to_le_bytes());
        b[16..20].copy_from_slice(&self.status.to_le_bytes());
        for (i, r) in self.regs.iter().enumerate() {
            b[24 + 8 * i..32 + 8 * i].copy_from_slice(&r.to_le_bytes());
        }
        let o = 24 + 8 * dep_profile::NUM_REGS;
        b[o..o + 8].copy_from_slice(&self.tags_len.to_le_bytes());
        b[o + 8..o + 16].copy_from_slice(&self.values_len.to_le_bytes());
        b[o + 16..o + 24].copy_from_slice(&self.truth_len.to_le_bytes());
        b
    }

    /// Parses the header and checks the streams fit in `payload`.
    pub fn decode(payload: &[u8]) -> Option<ChunkHeader> {
        let h = Self::parse(payload)?;
        let total = h.tags_len.checked_add(h.values_len)?.checked_add(h.truth_len)?;
        (total == (payload.len() - CHUNK_HEADER) as u64).then_some(h)
    }

    /// Parses the header at the start of `payload`, whatever follows it.
    fn parse(payload: &[u8]) -> Option<ChunkHeader> {
        if payload.len() < CHUNK_HEADER {
            return None;
        }
        let u32_at = |o: usize| u32::from_le_bytes(payload[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(payload[o..o + 8].try_into().unwrap());
        let o = 24 + 8 * dep_profile::NUM_REGS;
        let h = ChunkHeader {
            seq: u32_at(0),
            last: u32_at(4) & 1 != 0,
            hi: u64_at(8),
            status: u32_at(16),
            regs: std::array::from_fn(|i| u64_at(24 + 8 * i)),
            tags_len: u64_at(o),
            values_len: u64_at(o + 8),
            truth_len: u64_at(o + 16),
        };
        Some(h)
    }
}

/// Encodes a frame header.
pub fn frame_header(kind: u32, thread: u32, len: u64) -> [u8; FRAME_HEADER] {
    let mut h = [0u8; FRAME_HEADER];
    h[0..4].copy_from_slice(&kind.to_le_bytes());
    h[4..8].copy_from_slice(&thread.to_le_bytes());
    h[8..16].copy_from_slice(&len.to_le_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_header_round_trip() {
        let h = ChunkHeader {
            seq: 7,
            last: true,
            hi: 0x5555,
            status: 0b101,
            regs: std::array::from_fn(|i| i as u64),
            tags_len: 4,
            values_len: 8,
            truth_len: 0,
        };
        let mut p = h.encode().to_vec();
        p.extend_from_slice(&[0; 12]);
        assert_eq!(ChunkHeader::decode(&p), Some(h));
        p.push(0);
        assert_eq!(ChunkHeader::decode(&p), None);
    }
}
