//! Appends records to a profile.

use super::chunk::ChunkData;
use super::index::Index;
use super::meta::{BlockEntry, EndInfo, Metadata, ModuleEvent, ThreadEvent};
use super::reader::{Profile, ThreadInfo};
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

    /// A writer that appends records to a profile already `written` bytes long (its file
    /// header among them).
    pub fn appending(out: W, width: Width, level: i32, written: u64) -> Self {
        ProfileWriter { out, width, level, written }
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

    /// Appends the seek index of a profile whose threads are `threads`.
    pub fn index(&mut self, index: &Index, threads: &[ThreadInfo]) -> Result<(), ProfileError> {
        self.record(RecordKind::Index, &index.encode(threads))
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

/// Whether a seek index can be appended to `profile`: it is complete (a reader stops at a
/// torn record, before an index after it) and has none yet.
pub fn indexable(profile: &Profile) -> Result<(), ProfileError> {
    let refuse = |why: String| ProfileError::NotIndexable { path: profile.path().to_string(), why };
    if let Some(at) = profile.truncated_at {
        return Err(refuse(format!("its last record, at byte {at}, is torn (the recording was killed); a reader stops there")));
    }
    if profile.index.is_some() {
        return Err(refuse("it has a seek index already".into()));
    }
    Ok(())
}

/// Appends `index` to the file `profile` was opened from, which must still be as it was
/// read, complete (no torn record, which a reader would stop at before the index) and
/// without an index.
pub fn append_index(profile: &Profile, index: &Index) -> Result<(), ProfileError> {
    indexable(profile)?;
    let path = profile.path().to_string();
    let refuse = |why: String| ProfileError::NotIndexable { path: path.clone(), why };
    let io = |err| ProfileError::Io { path: path.clone(), err };
    let mut f = std::fs::OpenOptions::new().write(true).open(&path).map_err(io)?;
    let len = profile.bytes().len() as u64;
    if f.metadata().map_err(io)?.len() != len {
        return Err(refuse("the file changed since it was read".into()));
    }
    // The record is built in memory and written at once; if that fails the file is cut
    // back, so a failed append leaves no torn record for readers to stop at.
    let mut w = ProfileWriter::appending(Vec::new(), profile.width, 0, len);
    w.index(index, &profile.threads)?;
    let bytes = w.into_inner();
    let r = std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(len)).and_then(|_| f.write_all(&bytes)).and_then(|_| f.sync_all());
    if let Err(err) = r {
        let _ = f.set_len(len);
        return Err(io(err));
    }
    Ok(())
}
