//! The launcher behind `dep record`: finds DynamoRIO and the DEP client, runs the program
//! under them, and turns what the client sends into profiles.

pub mod launch;
pub mod receive;
pub mod sink;
pub mod slab;
pub mod wire;

pub use launch::{record, Compression, Install, RecordOptions, RecordOutcome};
