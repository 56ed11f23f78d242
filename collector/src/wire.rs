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
        let total = h.tags_len.checked_add(h.values_len)?.checked_add(h.truth_len)?;
        (total == (payload.len() - CHUNK_HEADER) as u64).then_some(h)
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
