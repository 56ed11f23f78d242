//! The recovery loop: DEP_c drives a walk over pre-decoded blocks, DEP_m supplies register
//! values exactly when a block plan says so (paper section 6.2).

use crate::events::{BlockEvent, Marker, MemEvent, Sink};
use crate::plans::{PlanMiss, Plans};
use dep_profile::container::{ChunkView, Section};
use dep_profile::semantics::Special;
use dep_profile::tags::{Escape, TagDecoder, TagItem};
use dep_profile::values::ValueReader;
use dep_profile::{BlockPlan, Width, NUM_REGS};
use std::io;

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
    #[error("output: {0}")]
    Sink(#[from] io::Error),
}

/// Reusable buffers for decompressing chunks.
#[derive(Default)]
pub struct Scratch {
    tags: Vec<u8>,
    values: Vec<u8>,
}

/// Recovers one chunk, sending its events to `sink`.
pub fn recover_chunk<S: Sink>(
    width: Width,
    plans: &Plans,
    chunk: &ChunkView,
    scratch: &mut Scratch,
    sink: &mut S,
) -> Result<(), ChunkFault> {
    chunk.decompress_into(Section::Tags, &mut scratch.tags).map_err(ChunkFault::Stream)?;
    chunk.decompress_into(Section::Values, &mut scratch.values).map_err(ChunkFault::Stream)?;
    let mut w = Walker {
        thread: chunk.thread(),
        vals: chunk.regs(),
        status: chunk.status(),
        values: ValueReader::new(width, &scratch.values),
        mask: if width == Width::W32 { 0xffff_ffff } else { u64::MAX },
    };
    let mut tags = TagDecoder::new(width, &scratch.tags, chunk.hi()).map_err(|e| ChunkFault::Stream(e.to_string()))?;
    let mut version = 0u32;
    let mut pending: Option<TagItem> = None;
    let mut cache = crate::plans::PlanCache::new();
    loop {
        let word = tags.word_offset();
        let item = match pending.take() {
            Some(i) => i,
            None => match tags.next_item() {
                Ok(Some(i)) => i,
                Ok(None) => break,
                Err(e) => return Err(ChunkFault::Malformed { word, what: e.to_string() }),
            },
        };
        match item {
            TagItem::Block(addr) => {
                let plan = match cache.get(plans, addr, version) {
                    Ok(p) => p,
                    Err(PlanMiss::NotInTable) => return Err(ChunkFault::UnknownBlock { word, addr, version }),
                    Err(PlanMiss::Undecodable(why)) => return Err(ChunkFault::BadBlock { word, addr, why: why.to_string() }),
                };
                // An interrupted block is followed by the record saying where it stopped.
                let mut stop = None;
                match tags.next_item() {
                    Ok(Some(TagItem::Escape(Escape::Interrupted { insn }))) => {
                        if insn as usize >= plan.insns.len() {
                            return Err(ChunkFault::Malformed {
                                word,
                                what: format!("block {addr:#x} has {} instructions, interrupted at {insn}", plan.insns.len()),
                            });
                        }
                        stop = Some(insn);
                    }
                    Ok(next) => pending = next,
                    Err(e) => return Err(ChunkFault::Malformed { word: tags.word_offset(), what: e.to_string() }),
                }
                w.block(plan, version, stop, sink).map_err(|f| match f {
                    StepFault::Exhausted(offset) => ChunkFault::ValuesExhausted { word, offset, addr },
                    StepFault::Sink(e) => ChunkFault::Sink(e),
                    StepFault::Implausible(what) => ChunkFault::Malformed { word, what },
                })?;
                version = 0;
            }
            TagItem::Escape(e) => {
                let marker = match e {
                    Escape::CodeVersion { version: v } => {
                        version = v;
                        continue;
                    }
                    Escape::Interrupted { .. } => {
                        return Err(ChunkFault::Malformed { word, what: "interruption record without a block before it".into() })
                    }
                    Escape::ChunkStart { seq } => {
                        if seq != chunk.seq() {
                            return Err(ChunkFault::Malformed {
                                word,
                                what: format!("chunk start record says {seq}, header says {}", chunk.seq()),
                            });
                        }
                        Marker::ChunkStart(seq)
                    }
                    Escape::ThreadStart => Marker::ThreadStart,
                    Escape::ThreadEnd => Marker::ThreadEnd,
                    Escape::Signal { signo } => {
                        w.status = 0;
                        Marker::Signal(signo)
                    }
                    Escape::SignalReturn => {
                        w.status = 0;
                        Marker::SignalReturn
                    }
                    Escape::ExpireAll => {
                        w.status = 0;
                        continue;
                    }
                };
                sink.marker(w.thread, marker)?;
            }
        }
    }
    if w.values.remaining() != 0 {
        return Err(ChunkFault::ValuesLeftOver { left: w.values.remaining() });
    }
    Ok(())
}

enum StepFault {
    Exhausted(usize),
    Sink(io::Error),
    Implausible(String),
}

/// More bytes than any rep string can move in a run: beyond this the stream is corrupt.
const MAX_REP_BYTES: u64 = 1 << 40;

impl From<io::Error> for StepFault {
    fn from(e: io::Error) -> Self {
        StepFault::Sink(e)
    }
}

impl From<dep_profile::values::ValueError> for StepFault {
    fn from(e: dep_profile::values::ValueError) -> Self {
        let dep_profile::values::ValueError::Exhausted { offset, .. } = e;
        StepFault::Exhausted(offset)
    }
}

/// One thread's register state during the walk.
struct Walker<'v> {
    thread: u32,
    vals: [u64; NUM_REGS],
    /// Bit n: register n is CURRENT.
    status: u32,
    values: ValueReader<'v>,
    /// Address mask of the program's width.
    mask: u64,
}

impl Walker<'_> {
    /// Adds the plan's constants to the registers they move (push, pop, add rsp, ...).
    #[inline(always)]
    fn adjust(&mut self, adjust: &[(dep_profile::Reg, i64)]) {
        for &(r, d) in adjust {
            let v = &mut self.vals[r.index()];
            *v = v.wrapping_add(d as u64) & self.mask;
        }
    }

    #[inline]
    fn block<S: Sink>(&mut self, plan: &BlockPlan, version: u32, stop: Option<u16>, sink: &mut S) -> Result<(), StepFault> {
        let executed = stop.map_or(plan.insns.len() as u32, |s| s as u32 + 1);
        sink.block(&BlockEvent { thread: self.thread, addr: plan.addr, version, plan: Some(plan), executed, interrupted: stop.is_some() })?;
        let mask = self.mask;
        let steps = match stop {
            None => &plan.steps[..],
            Some(s) => &plan.steps[..plan.steps.partition_point(|st| st.insn <= s)],
        };
        for step in steps {
            self.status &= !step.expired.bits();
            self.adjust(&step.adjust);
            let used = step.used.bits();
            let mut need = used & !self.status;
            while need != 0 {
                let r = need.trailing_zeros() as usize;
                need &= need - 1;
                self.vals[r] = self.values.next()?;
            }
            self.status |= used;
            let insn = &plan.insns[step.insn as usize];
            let interrupted_here = stop == Some(step.insn);
            match insn.special {
                Special::None => {
                    for r in &insn.refs {
                        sink.mem(&MemEvent {
                            thread: self.thread,
                            pc: insn.pc,
                            addr: r.addr.eval(&self.vals) & mask,
                            size: r.size,
                            access: r.access,
                            conditional: r.conditional,
                        })?;
                    }
                }
                Special::Rep(rep) => {
                    let pre = self.vals[rep.post.index()];
                    let post = self.values.next()?;
                    let delta = post.wrapping_sub(pre) & mask;
                    let (dir, bytes) = if delta == 0 || delta <= mask / 2 {
                        (1i64, delta)
                    } else {
                        (-1i64, mask.wrapping_sub(delta).wrapping_add(1) & mask)
                    };
                    if bytes > MAX_REP_BYTES {
                        return Err(StepFault::Implausible(format!(
                            "rep string at {:#x} would move {bytes} bytes (pointer {pre:#x} -> {post:#x})",
                            insn.pc
                        )));
                    }
                    let count = bytes / rep.elem as u64 + interrupted_here as u64;
                    // Each reference advances linearly from its start address; only a
                    // 32-bit address size needs the wrap recomputed per iteration.
                    // String instructions have at most two references (movs, cmps).
                    let mut starts = [(0u64, false); 2];
                    for (s, r) in starts.iter_mut().zip(&insn.refs) {
                        *s = (r.addr.eval(&self.vals), r.addr.addr_bits == 64);
                    }
                    let base = self.vals;
                    for k in 0..count {
                        let step_bytes = (k as i64 * dir * rep.elem as i64) as u64;
                        for (r, &(start, linear)) in insn.refs.iter().zip(&starts) {
                            let addr = if linear {
                                start.wrapping_add(step_bytes)
                            } else {
                                let mut regs = base;
                                if let Some(p) = r.addr.base.map(|b| b.reg) {
                                    regs[p.index()] = regs[p.index()].wrapping_add(step_bytes);
                                }
                                r.addr.eval(&regs)
                            };
                            sink.mem(&MemEvent {
                                thread: self.thread,
                                pc: insn.pc,
                                addr: addr & mask,
                                size: r.size,
                                access: r.access,
                                conditional: false,
                            })?;
                        }
                    }
                    self.vals[rep.post.index()] = post;
                    self.status |= 1 << rep.post.index();
                    if let Some(o) = rep.other {
                        self.vals[o.index()] = self.vals[o.index()].wrapping_add(post.wrapping_sub(pre)) & mask;
                    }
                }
                Special::Gather(g) => {
                    let idx = self.values.raw(g.index_bytes as usize)?;
                    let m = self.values.raw(g.mask_bytes())?;
                    for r in &insn.refs {
                        for e in 0..g.count() {
                            if !g.active(m, e, r.size) {
                                continue;
                            }
                            let off = g.index_value(idx, e).wrapping_mul(r.addr.scale as u64);
                            sink.mem(&MemEvent {
                                thread: self.thread,
                                pc: insn.pc,
                                addr: r.addr.eval(&self.vals).wrapping_add(off) & mask,
                                size: r.size,
                                access: r.access,
                                conditional: false,
                            })?;
                        }
                    }
                }
            }
        }
        if stop.is_none() {
            self.status &= !plan.tail_expired.bits();
            self.adjust(&plan.tail_adjust);
        }
        Ok(())
    }
}
