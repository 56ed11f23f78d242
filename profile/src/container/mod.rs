//! The profile file: a header, then a sequence of checksummed records (metadata, modules,
//! threads, blocks, chunks, end). Records are appended as the program runs, so a profile
//! whose writer was killed is readable up to its last complete record.
//!
//! ```text
//! file header, 16 bytes: magic "DEPPROF\0", version u16, width u8 (32|64), flags u8, reserved u32
//! record header, 16 bytes: magic u16 0xde9f, kind u16, crc32 u32 (of the payload), len u64
//! payload: len bytes, then zero padding to a multiple of 8
//! ```

pub mod chunk;
pub mod family;
pub mod index;
pub mod meta;
pub mod reader;
pub mod truncation;
pub mod writer;

pub use chunk::{
    ChunkData, ChunkError, ChunkView, Codec, Decompression, Encoder as ChunkEncoder, Section, SectionError, ValuesZstd, CHUNK_HEADER_LEN,
    PACKED_VALUES_LEVEL, ZSTD_MAX_RATIO,
};
pub use family::{family_paths, open_family};
pub use index::{ChunkCounts, Index, IndexEntry, IndexError};
pub use meta::{
    BlockEntry, EndInfo, Metadata, ModuleEvent, ModuleEventKind, ParentLink, ThreadEvent, ThreadEventKind, WindowPlan, MAX_XSAVE_SIZE,
};
pub use reader::{ChunkRef, Profile, Spawn, ThreadInfo};
pub use writer::{append_index, indexable, ProfileWriter};

use thiserror::Error;

/// First 8 bytes of every profile.
pub const MAGIC: &[u8; 8] = b"DEPPROF\0";
/// The format version this library writes (3: DEP_c sync records; 4: call records and
/// thread spawn events; 5: DEP_m packed without zstd, codec 2; 6: derived registers; 7:
/// system call records; 8: windows of instructions, "unrecorded" thread events; 9: a
/// register computed from one whose status is its shadow's takes that status).
pub const VERSION: u16 = 9;
/// The first format version whose plans keep derived registers current
/// ([`crate::derive`]); older profiles are read with the semantics they were recorded with.
pub const DERIVE_VERSION: u16 = 6;
/// The first format version whose plans pass a shadow's status on through derivations
/// ([`crate::blocks::Step::copies`]).
pub const ROOTS_VERSION: u16 = 9;
/// The oldest format version this library reads (version 1 has no packed DEP_m).
pub const OLDEST_VERSION: u16 = 1;
/// Bytes in the file header.
pub const FILE_HEADER_LEN: usize = 16;
/// Bytes in a record header.
pub const RECORD_HEADER_LEN: usize = 16;
/// First two bytes of every record header.
pub const RECORD_MAGIC: u16 = 0xde9f;

/// What a record holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum RecordKind {
    /// JSON [`Metadata`].
    Meta = 1,
    /// JSON [`ModuleEvent`].
    Module = 2,
    /// JSON [`ThreadEvent`].
    Thread = 3,
    /// Binary [`BlockEntry`].
    Block = 4,
    /// Binary chunk, see [`chunk`].
    Chunk = 5,
    /// JSON [`EndInfo`].
    End = 6,
    /// Binary [`Index`]: what each chunk holds, for seeking; after the end record.
    Index = 7,
}

impl RecordKind {
    pub fn from_u16(k: u16) -> Option<Self> {
        Some(match k {
            1 => RecordKind::Meta,
            2 => RecordKind::Module,
            3 => RecordKind::Thread,
            4 => RecordKind::Block,
            5 => RecordKind::Chunk,
            6 => RecordKind::End,
            7 => RecordKind::Index,
            _ => return None,
        })
    }
}

/// Errors reading or writing a profile; each names where the problem is.
#[derive(Debug, Error)]
pub enum ProfileError {
    #[error("{path}: {err}")]
    Io { path: String, err: std::io::Error },
    #[error("{path}: not a DEP profile ({why})")]
    NotAProfile { path: String, why: String },
    #[error("{path}: unknown format version {version} (this dep reads versions {OLDEST_VERSION} to {VERSION})")]
    Version { path: String, version: u16 },
    #[error("{path}: record at byte {offset}: {why}")]
    Record { path: String, offset: u64, why: String },
    #[error("{path}: thread {thread} chunk {seq} (byte {offset}): {why}")]
    Chunk { path: String, thread: u32, seq: u32, offset: u64, why: String },
    #[error("{path}: block {addr:#x} version {version}: {why}")]
    Block { path: String, addr: u64, version: u32, why: String },
    #[error(
        "{path}: record at byte {offset}: block {addr:#x} version {version} has {insns} instructions, more than the {max} a block may have"
    )]
    BlockTooLong { path: String, offset: u64, addr: u64, version: u32, insns: u32, max: usize },
    #[error("{path}: the metadata's XSAVE area of {size} bytes exceeds the {MAX_XSAVE_SIZE}-byte bound")]
    XsaveSize { path: String, size: u32 },
    #[error("{path}: thread index {index} with only {records} records naming threads (indices count threads in creation order)")]
    ThreadIndex { path: String, index: u32, records: usize },
    #[error("{path}: record at byte {offset}: module at {base:#x} of {size} bytes runs past the address space")]
    ModuleRange { path: String, offset: u64, base: u64, size: u64 },
    #[error("{path}: record at byte {offset}: {err}")]
    Index { path: String, offset: u64, err: IndexError },
    #[error("{path}: cannot add a seek index: {why}")]
    NotIndexable { path: String, why: String },
    #[error("{path}: no metadata record")]
    NoMetadata { path: String },
    #[error("write error: {0}")]
    Write(#[from] std::io::Error),
}

/// Bytes of padding after a payload of `len` bytes.
pub fn padding(len: u64) -> usize {
    ((8 - len % 8) % 8) as usize
}
