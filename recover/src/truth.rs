//! Replays a chunk's truth stream as events, so recovered and observed traces render alike.

use crate::error::RepProblem;
use crate::events::{BlockEvent, Marker, MemEvent};
use crate::plans::Plans;
use crate::sink::Sink;
use crate::traverse::{go, ChunkFault, Halt};
use dep_profile::container::{ChunkView, Decompression, Section};
use dep_profile::semantics::Access;
use dep_profile::truth::{self, TruthKind, TruthRecord};
use dep_profile::BlockPlan;

/// Sends the truth records of one chunk to `sink`. Blocks carry their id and plan where the
/// block table has the block (at code version 0, which is all the truth stream names) with
/// the same instruction count; references carry their instruction's index in that plan, or
/// 0 where the block has none.
pub fn replay_chunk<S: Sink>(plans: &Plans, chunk: &ChunkView, buf: &mut Vec<u8>, sink: &mut S) -> Result<(), Halt<S::Error>> {
    chunk.decompress_into(Section::Truth, buf, &mut Decompression::default()).map_err(ChunkFault::from)?;
    let recs: Vec<TruthRecord> = truth::records(buf).map_err(ChunkFault::from)?.collect::<Result<_, _>>().map_err(ChunkFault::from)?;
    let thread = chunk.thread();
    let mut batch: Vec<MemEvent> = Vec::new();
    // Where each block's run of references ends: at the next block or interruption record.
    let mut next_mark = 0usize;
    let mut rep = RepReplay::default();
    let mut plan: Option<&BlockPlan> = None;
    // The block the references batched belong to.
    let mut block = BlockEvent { thread, addr: 0, version: 0, id: None, plan: None, executed: 0, interrupted: false };
    for (i, r) in recs.iter().enumerate() {
        match r.kind {
            TruthKind::Block => {
                next_mark = next_mark.max(i + 1);
                while next_mark < recs.len() && !matches!(recs[next_mark].kind, TruthKind::Block | TruthKind::Interrupted) {
                    next_mark += 1;
                }
                let interrupted = recs.get(next_mark).filter(|n| n.kind == TruthKind::Interrupted);
                let executed = interrupted.map_or(r.size, |n| n.size + 1);
                if !batch.is_empty() {
                    go(sink.refs(&block, &batch))?;
                    batch.clear();
                }
                let id = plans.find(r.pc, 0).ok().filter(|&id| plans.plan(id).insns.len() == r.size as usize);
                plan = id.map(|id| plans.plan(id));
                block = BlockEvent { thread, addr: r.pc, version: 0, id, plan, executed, interrupted: interrupted.is_some() };
                go(sink.block(&block))?;
            }
            TruthKind::Read | TruthKind::Write => {
                let access = if r.kind == TruthKind::Read { Access::Read } else { Access::Write };
                batch.push(MemEvent { pc: r.pc, addr: r.addr, size: r.size, access, conditional: false, insn: index(plan, r.pc) });
            }
            TruthKind::Interrupted => {}
            // A system call's return and the kernel's accesses, after its references.
            TruthKind::SyscallReturn | TruthKind::KernelRead | TruthKind::KernelWrite => {
                if !batch.is_empty() {
                    go(sink.refs(&block, &batch))?;
                    batch.clear();
                }
                let m = match r.kind {
                    TruthKind::SyscallReturn => Marker::SyscallReturn { insn: index(plan, r.pc), value: r.addr },
                    kind => Marker::Kernel {
                        insn: index(plan, r.pc),
                        pc: r.pc,
                        addr: r.addr,
                        size: r.size,
                        write: kind == TruthKind::KernelWrite,
                    },
                };
                go(sink.marker(thread, m))?;
            }
            TruthKind::Rep | TruthKind::RepRead | TruthKind::RepWrite | TruthKind::RepEnd => {
                let ended = rep.record(r, index(plan, r.pc)).map_err(|problem| ChunkFault::TruthRep { record: i, problem })?;
                if let Some((count, operands)) = ended {
                    // Expanded in batches: a rep string can make billions of references.
                    for k in 0..count {
                        batch.extend(operands.iter().map(|o| o.at(k)));
                        if batch.len() >= BATCH {
                            go(sink.refs(&block, &batch))?;
                            batch.clear();
                        }
                    }
                }
            }
        }
    }
    if !batch.is_empty() {
        go(sink.refs(&block, &batch))?;
    }
    Ok(())
}

/// The index of the instruction at `pc` in `plan`, or 0.
fn index(plan: Option<&BlockPlan>, pc: u64) -> u16 {
    plan.and_then(|p| p.insns.binary_search_by_key(&pc, |i| i.pc).ok()).map_or(0, |i| i as u16)
}

/// A rep string's truth: its operands' first addresses and strides as observed before it
/// ran, then its iteration count observed after; expanded here into one reference per
/// operand and iteration, reads before writes as DynamoRIO lists the operands.
#[derive(Default)]
struct RepReplay {
    open: Option<(u64, u32, u16)>,
    operands: Vec<RepOperand>,
}

/// One operand of a rep string: its reference at the first iteration and its stride.
#[derive(Clone, Copy)]
struct RepOperand {
    first: MemEvent,
    stride: i64,
}

impl RepOperand {
    /// The operand's reference at iteration `k`.
    #[inline]
    fn at(&self, k: u64) -> MemEvent {
        MemEvent { addr: self.first.addr.wrapping_add((k as i64).wrapping_mul(self.stride) as u64), ..self.first }
    }
}

/// References a replayed rep string hands the sink at a time.
const BATCH: usize = 4096;

/// More iterations than any real rep string makes (2^40 bytes at one byte each).
const MAX_REP_ITERATIONS: u64 = 1 << 40;

impl RepReplay {
    /// Takes a rep record; at the string's end, its iteration count and operands.
    fn record(&mut self, r: &TruthRecord, insn: u16) -> Result<Option<(u64, Vec<RepOperand>)>, RepProblem> {
        match r.kind {
            TruthKind::Rep => {
                if self.open.is_some() {
                    return Err(RepProblem::StartInside);
                }
                self.open = Some((r.pc, r.size, insn));
                self.operands.clear();
            }
            TruthKind::RepRead | TruthKind::RepWrite => {
                if self.open.is_none() || self.operands.len() >= 2 {
                    return Err(RepProblem::OperandOutside);
                }
                let access = if r.kind == TruthKind::RepRead { Access::Read } else { Access::Write };
                let (pc, size, insn) = self.open.expect("checked above");
                let first = MemEvent { pc, addr: r.pc, size, access, conditional: false, insn };
                self.operands.push(RepOperand { first, stride: r.addr as i64 });
            }
            TruthKind::RepEnd => {
                let (pc, _, _) = self.open.take().ok_or(RepProblem::EndWithoutStart)?;
                if r.addr > MAX_REP_ITERATIONS {
                    return Err(RepProblem::TooMany { pc, iterations: r.addr });
                }
                return Ok(Some((r.addr, std::mem::take(&mut self.operands))));
            }
            _ => unreachable!("only rep records come here"),
        }
        Ok(None)
    }
}
