//! [`RecoverError`]: why a recovery run failed. Every sink's error type converts from it.

use dep_profile::container::ProfileError;

/// Errors of a recovery run.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    /// Opening or reading the profile failed.
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// A chunk's streams do not recover: where, and why.
    #[error("{path}: thread {thread} chunk {seq} (byte {offset}): {fault}")]
    Chunk { path: String, thread: u32, seq: u32, offset: u64, fault: ChunkFault },
    /// Writing a sink's output failed.
    #[error("writing output: {0}")]
    Output(#[from] std::io::Error),
    /// The truth stream was asked for where none was recorded.
    #[error("{0}: the profile has no truth stream (record with --truth)")]
    NoTruth(String),
    /// A [`Merge`](crate::Merge) sink was given a chunk's sink that does not follow it.
    #[error("{0} merge a chunk's onto its thread's, in order")]
    MergeOrder(&'static str),
    /// An OS thread for recovery could not be started.
    #[error("starting a recovery thread: {0}")]
    Spawn(std::io::Error),
}

/// Where and why recovery failed, inside one chunk.
#[derive(Debug, thiserror::Error)]
pub enum ChunkFault {
    #[error("{0}")]
    Stream(String),
    #[error("tag word {word}: block {addr:#x} version {version} is not in the block table")]
    UnknownBlock { word: usize, addr: u64, version: u32 },
    #[error("tag word {word}: block {addr:#x} cannot be decoded: {why}")]
    BadBlock { word: usize, addr: u64, why: String },
    #[error("tag word {word}: value stream exhausted at byte {offset} (block {addr:#x})")]
    ValuesExhausted { word: usize, offset: usize, addr: u64 },
    #[error("value stream has {left} bytes left over after the last block")]
    ValuesLeftOver { left: usize },
    #[error("tag word {word}: {what}")]
    Malformed { word: usize, what: String },
}
