//! [`RecoverError`]: why a recovery run failed. Every sink's error type converts from it.

use dep_profile::blocks::BlockError;
use dep_profile::container::{ProfileError, SectionError};
use dep_profile::tags::TagError;
use dep_profile::truth::TruthError;

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
    /// The seek index cannot be built.
    #[error("{path}: {why}")]
    Index { path: String, why: String },
    /// A chunk read for a window holds a different number of instructions than the
    /// profile's seek index says.
    #[error("{path}: thread {thread} chunk {seq}: the seek index says {index} instructions, recovery found {found}")]
    IndexCount { path: String, thread: u32, seq: u32, index: u64, found: u64 },
    /// A window of instructions that cannot be read.
    #[error(transparent)]
    Window(#[from] crate::seek::WindowError),
    /// An OS thread for recovery could not be started.
    #[error("starting a recovery thread: {0}")]
    Spawn(std::io::Error),
}

/// Where and why recovery failed, inside one chunk.
#[derive(Debug, thiserror::Error)]
pub enum ChunkFault {
    /// A section does not decompress.
    #[error(transparent)]
    Section(#[from] SectionError),
    /// The tag stream does not decode.
    #[error("tag word {word}: {err}")]
    Tags { word: usize, err: TagError },
    /// The truth stream does not parse.
    #[error(transparent)]
    Truth(#[from] TruthError),
    /// The truth stream's rep string records are out of order or implausible.
    #[error("truth record {record}: {problem}")]
    TruthRep { record: usize, problem: RepProblem },
    #[error("tag word {word}: block {addr:#x} version {version} is not in the block table")]
    UnknownBlock { word: usize, addr: u64, version: u32 },
    #[error("tag word {word}: block {addr:#x} cannot be decoded: {why}")]
    BadBlock { word: usize, addr: u64, why: BlockError },
    #[error("tag word {word}: value stream exhausted at byte {offset} (block {addr:#x})")]
    ValuesExhausted { word: usize, offset: usize, addr: u64 },
    #[error("value stream has {left} bytes left over after the last block")]
    ValuesLeftOver { left: usize },
    /// An interruption record with no block before it.
    #[error("tag word {word}: interruption record without a block before it")]
    StrayInterruption { word: usize },
    /// A system call record with nothing before it to belong to: its call or return with
    /// no block, its results with no return.
    #[error("tag word {word}: system call record without the block or return it belongs to")]
    StraySyscall { word: usize },
    /// A chunk start record whose number is not the chunk's.
    #[error("tag word {word}: chunk start record says {record}, header says {header}")]
    ChunkStart { word: usize, record: u32, header: u32 },
    /// A record naming an instruction past its block's end.
    #[error("tag word {word}: block {addr:#x} has {insns} instructions, {record} at {at}")]
    BeyondBlock { word: usize, addr: u64, insns: u32, record: &'static str, at: u32 },
    /// A rep string whose pointer moved further than any rep string can.
    #[error("tag word {word}: rep string at {pc:#x} would move {bytes} bytes (pointer {pre:#x} -> {post:#x})")]
    RepTooLong { word: usize, pc: u64, bytes: u64, pre: u64, post: u64 },
}

/// What is wrong with a truth stream's rep string records.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RepProblem {
    #[error("a rep string starts before the last one ended")]
    StartInside,
    #[error("a rep string operand outside a rep string")]
    OperandOutside,
    #[error("a rep string end without its start")]
    EndWithoutStart,
    #[error("rep string at {pc:#x} made {iterations} iterations")]
    TooMany { pc: u64, iterations: u64 },
}
