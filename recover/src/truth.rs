//! Replays a chunk's truth stream as events, so recovered and observed traces render alike.

use crate::events::{BlockEvent, MemEvent, Sink};
use crate::traverse::ChunkFault;
use dep_profile::container::{ChunkView, Decompression, Section};
use dep_profile::semantics::Access;
use dep_profile::truth::{self, TruthKind, TruthRecord};

/// Sends the truth records of one chunk to `sink`.
pub fn replay_chunk<S: Sink>(chunk: &ChunkView, buf: &mut Vec<u8>, sink: &mut S) -> Result<(), ChunkFault> {
    chunk.decompress_into(Section::Truth, buf, &mut Decompression::default()).map_err(ChunkFault::Stream)?;
    let recs: Vec<TruthRecord> = truth::records(buf)
        .map_err(|e| ChunkFault::Stream(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| ChunkFault::Stream(e.to_string()))?;
    let thread = chunk.thread();
    let mut batch: Vec<MemEvent> = Vec::new();
    // Where each block's run of references ends: at the next block or interruption record.
    let mut next_mark = 0usize;
    for (i, r) in recs.iter().enumerate() {
        match r.kind {
            TruthKind::Block => {
                next_mark = next_mark.max(i + 1);
                while next_mark < recs.len() && matches!(recs[next_mark].kind, TruthKind::Read | TruthKind::Write) {
                    next_mark += 1;
                }
                let interrupted = recs.get(next_mark).filter(|n| n.kind == TruthKind::Interrupted);
                let executed = interrupted.map_or(r.size, |n| n.size + 1);
                if !batch.is_empty() {
                    sink.refs(&batch)?;
                    batch.clear();
                }
                sink.block(&BlockEvent { thread, addr: r.pc, version: 0, plan: None, executed, interrupted: interrupted.is_some() })?;
            }
            TruthKind::Read | TruthKind::Write => {
                let access = if r.kind == TruthKind::Read { Access::Read } else { Access::Write };
                batch.push(MemEvent { pc: r.pc, addr: r.addr, size: r.size, access, conditional: false });
            }
            TruthKind::Interrupted => {}
        }
    }
    if !batch.is_empty() {
        sink.refs(&batch)?;
    }
    Ok(())
}
