//! Appends records to a profile.

use super::chunk::ChunkData;
use super::meta::{BlockEntry, EndInfo, Metadata, ModuleEvent, ThreadEvent};
use super::{padding, ProfileError, RecordKind, MAGIC, RECORD_MAGIC, VERSION};
use crate::Width;
use std::io::Write;

/// Writes a profile record by record; every record is complete once its call returns.
pub struct ProfileWriter<W: Write> {
    out: W,
    width: Width,
    level: i32,
    written: u64,
}

impl<W: Write> ProfileWriter<W> {
    /// Writes the file header; chunk sections other than DEP_m are compressed with zstd at `level`.
    pub fn new(mut out: W, width: Width, level: i32) -> Result<Self, ProfileError> {
        let mut h = Vec::with_capacity(16);
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&VERSION.to_le_bytes());
        h.push(width.bits());
        h.push(0);
        h.extend_from_slice(&0u32.to_le_bytes());
        out.write_all(&h)?;
        Ok(ProfileWriter { out, width, level, written: h.len() as u64 })
    }

    /// Appends one record with an already-encoded payload.
    pub fn record(&mut self, kind: RecordKind, payload: &[u8]) -> Result<(), ProfileError> {
        let mut h = [0u8; 16];
        h[0..2].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
        h[2..4].copy_from_slice(&(kind as u16).to_le_bytes());
        h[4..8].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
        h[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(payload)?;
        let pad = padding(payload.len() as u64);
        self.out.write_all(&[0u8; 8][..pad])?;
        self.written += 16 + payload.len() as u64 + pad as u64;
        Ok(())
    }

    fn json<T: serde::Serialize>(&mut self, kind: RecordKind, v: &T) -> Result<(), ProfileError> {
        let b = serde_json::to_vec(v).map_err(std::io::Error::other)?;
        self.record(kind, &b)
    }

    pub fn meta(&mut self, m: &Metadata) -> Result<(), ProfileError> {
        self.json(RecordKind::Meta, m)
    }

    pub fn module(&mut self, m: &ModuleEvent) -> Result<(), ProfileError> {
        self.json(RecordKind::Module, m)
    }

    pub fn thread(&mut self, t: &ThreadEvent) -> Result<(), ProfileError> {
        self.json(RecordKind::Thread, t)
    }

    pub fn end(&mut self, e: &EndInfo) -> Result<(), ProfileError> {
        self.json(RecordKind::End, e)
    }

    pub fn block(&mut self, b: &BlockEntry) -> Result<(), ProfileError> {
        self.record(RecordKind::Block, &b.encode())
    }

    /// Compresses and appends a chunk.
    pub fn chunk(&mut self, c: &ChunkData) -> Result<(), ProfileError> {
        let payload = c.encode(self.width, self.level)?;
        self.record(RecordKind::Chunk, &payload)
    }

    /// Bytes written so far.
    /// Address width of the profile being written.
    pub fn width(&self) -> Width {
        self.width
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    pub fn flush(&mut self) -> Result<(), ProfileError> {
        Ok(self.out.flush()?)
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}
