//! The recovery loop: DEP_c drives a walk over pre-decoded blocks, DEP_m supplies register
//! values exactly when a block plan says so (paper section 6.2).

use crate::events::{BlockEvent, Marker, MemEvent, RepRun, Run, RunBlock};
use crate::flat::{step_status, SLOTS};
use crate::plans::{PlanCache, PlanMiss, Plans};
use crate::sink::Sink;
use dep_profile::blocks::RegOp;
use dep_profile::container::{ChunkView, Decompression, Section, SectionError};
use dep_profile::packing::PackError;
use dep_profile::semantics::{Insn, Special};
use dep_profile::tags::{Escape, TagDecoder, TagItem, CTL_INTERRUPTED, CTL_SYNC, ESC, MAX_SHORT_H};
use dep_profile::values::{ValueError, ValueReader};
use dep_profile::{Width, NUM_REGS};

pub use crate::error::ChunkFault;

/// Why a chunk's walk ended before its end: the chunk is damaged, the sink failed, or the
/// sink wants nothing more.
#[derive(Debug)]
pub enum Halt<E> {
    Fault(ChunkFault),
    Sink(E),
    Stop,
}

impl<E> From<ChunkFault> for Halt<E> {
    fn from(f: ChunkFault) -> Self {
        Halt::Fault(f)
    }
}

/// A sink's answer as the walk's: go on, or halt.
#[inline(always)]
pub(crate) fn go<E>(r: Result<bool, E>) -> Result<(), Halt<E>> {
    match r {
        Ok(true) => Ok(()),
        Ok(false) => Err(Halt::Stop),
        Err(e) => Err(Halt::Sink(e)),
    }
}

/// Reusable buffers for decompressing chunks.
#[derive(Default)]
pub struct Scratch {
    tags: Vec<u8>,
    values: Vec<u8>,
    /// Where packed DEP_m is unpacked, a piece at a time.
    piece: Vec<u8>,
    dec: Decompression,
    batch: Vec<MemEvent>,
    #[cfg(target_arch = "x86_64")]
    jit: JitBuffers,
}

/// What compiled blocks write.
#[cfg(target_arch = "x86_64")]
#[derive(Default)]
struct JitBuffers {
    refs: Vec<MemEvent>,
    blocks: Vec<crate::jit::BlockRec>,
}

/// Blocks compiled code runs before their events go to the sink.
#[cfg(target_arch = "x86_64")]
const JIT_BLOCKS: usize = 1024;

/// Values at hand under which compiled code that left for the general walk goes on after
/// unpacking more of a packed DEP_m: above it, it left for something else (a block reads
/// far fewer).
#[cfg(target_arch = "x86_64")]
const REFILL_BELOW: usize = 16 << 10;

/// Recovers one chunk, sending its events to `sink`.
pub fn recover_chunk<S: Sink>(
    width: Width,
    plans: &Plans,
    chunk: &ChunkView,
    scratch: &mut Scratch,
    sink: &mut S,
) -> Result<(), Halt<S::Error>> {
    chunk.decompress_into(Section::Tags, &mut scratch.tags, &mut scratch.dec).map_err(ChunkFault::from)?;
    let values = chunk.values(&mut scratch.values, std::mem::take(&mut scratch.piece), &mut scratch.dec).map_err(ChunkFault::from)?;
    let mut vals = [0u64; SLOTS];
    vals[..NUM_REGS].copy_from_slice(&chunk.regs());
    let mut w = Walker {
        thread: chunk.thread(),
        vals,
        status: chunk.status(),
        values,
        mask: if width == Width::W32 { 0xffff_ffff } else { u64::MAX },
        batch: std::mem::take(&mut scratch.batch),
    };
    let mut tags = TagDecoder::new(width, &scratch.tags, chunk.hi()).map_err(|err| ChunkFault::Tags { word: 0, err })?;
    let mut version = 0u32;
    let mut pending: Option<TagItem> = None;
    let mut cache = PlanCache::new();
    let mut records = Vec::new();
    let fast = width == Width::W64;
    w.batch.reserve(plans.flat.max_refs as usize);
    #[cfg(target_arch = "x86_64")]
    let jit = if fast { plans.jit.as_ref() } else { None };
    loop {
        if fast && pending.is_none() && version == 0 {
            #[cfg(target_arch = "x86_64")]
            match jit {
                Some(j) => w.run_jit(plans, j, &mut scratch.jit, &mut tags, sink)?,
                None => w.run_plain(plans, &cache, &mut tags, sink)?,
            }
            #[cfg(not(target_arch = "x86_64"))]
            w.run_plain(plans, &cache, &mut tags, sink)?;
        }
        let word = tags.word_offset();
        // A fault names the item's own word, not an H-tag change it took before it.
        let (word, item) = match pending.take() {
            Some(i) => (word, i),
            None => match tags.next_item() {
                Ok(Some(i)) => (tags.item_word(), i),
                Ok(None) => break,
                Err(err) => return Err(ChunkFault::Tags { word, err }.into()),
            },
        };
        match item {
            TagItem::Block(addr) => {
                let (id, stop) = block_at(plans, &mut cache, &mut tags, addr, version, word, &mut pending, &mut records)?;
                w.block(plans, id, version, stop, &records, sink).map_err(|f| f.halt(word, addr))?;
                version = 0;
            }
            TagItem::Escape(e) => match control(e, chunk, word)? {
                Control::Version(v) => version = v,
                Control::ExpireAll => w.status = 0,
                Control::Marker(m) => {
                    if matches!(m, Marker::Signal(_) | Marker::SignalReturn) {
                        w.status = 0;
                    }
                    go(sink.marker(w.thread, m))?;
                }
            },
        }
    }
    scratch.batch = std::mem::take(&mut w.batch);
    let left = w.values.remaining();
    scratch.piece = w.values.into_piece();
    if left != 0 {
        return Err(ChunkFault::ValuesLeftOver { left }.into());
    }
    Ok(())
}

/// The address of the next plain L-tag in a 64-bit chunk's tag bytes at `*p`, after any
/// short H-tag changes (a jump to another 64 KiB region, taken into `*hi` and consumed).
/// None, with `*p` at it, at anything the general walk must take: another control record,
/// a block an interruption record may follow, the chunk's last block. The tag itself is
/// not consumed.
#[inline(always)]
fn plain_tag(bytes: &[u8], p: &mut usize, hi: &mut u64) -> Option<u64> {
    while *p + 4 <= bytes.len() {
        // SAFETY: `*p + 4 <= bytes.len()`.
        let two = u32::from_le(unsafe { (bytes.as_ptr().add(*p) as *const u32).read_unaligned() });
        let w = two as u16;
        if w == ESC {
            let c = (two >> 16) as u16;
            if !(1..=MAX_SHORT_H).contains(&c) {
                return None;
            }
            *hi = (*hi & !0xffff_0000) | (c as u64) << 16;
            *p += 4;
            continue;
        }
        // An escape after this block may say where the block was interrupted, or be a
        // record of its instructions that such a record may follow (sync, call, return).
        if two >> 16 == ESC as u32
            && bytes.get(*p + 4..*p + 6).is_none_or(|c| {
                let c = u16::from_le_bytes([c[0], c[1]]);
                c == CTL_INTERRUPTED || c >= CTL_SYNC
            })
        {
            return None;
        }
        return Some(*hi | w as u64);
    }
    None
}

/// Blocks the control-flow walk hands a sink at once.
const RUN_BLOCKS: usize = 1024;

/// The control-flow walk's fast path: consecutive plain L-tags of a 64-bit chunk already in
/// `cache`, handed to the sink as runs without references.
fn run_blocks<S: Sink>(
    plans: &Plans,
    cache: &PlanCache,
    tags: &mut TagDecoder,
    thread: u32,
    buf: &mut Vec<RunBlock>,
    sink: &mut S,
) -> Result<(), Halt<S::Error>> {
    let (bytes, mut p) = tags.raw();
    let mut hi = tags.hi() << 16;
    buf.clear();
    let r = (|| {
        while let Some(addr) = plain_tag(bytes, &mut p, &mut hi) {
            let Some(id) = cache.peek_plain(addr) else { break };
            // (A block too long for a run record takes the general walk.)
            let Ok(executed) = u16::try_from(plans.flat.blocks[id as usize].insns) else { break };
            p += 2;
            buf.push(RunBlock { addr, id, executed, refs: 0 });
            if buf.len() == RUN_BLOCKS {
                go(sink.run(&Run::new(thread, buf, &[], plans)))?;
                buf.clear();
            }
        }
        if !buf.is_empty() {
            go(sink.run(&Run::new(thread, buf, &[], plans)))?;
        }
        Ok(())
    })();
    tags.seek(p);
    tags.set_hi(hi >> 16);
    r
}

/// What a control record means to a walk.
enum Control {
    /// The next block is at this code version.
    Version(u32),
    /// Every register value is unknown from here.
    ExpireAll,
    Marker(Marker),
}

/// Reads a control record at tag word `word` of `chunk`.
fn control(e: Escape, chunk: &ChunkView, word: usize) -> Result<Control, ChunkFault> {
    Ok(match e {
        Escape::CodeVersion { version } => Control::Version(version),
        Escape::Interrupted { .. } => return Err(ChunkFault::StrayInterruption { word }),
        Escape::ChunkStart { seq } => {
            if seq != chunk.seq() {
                return Err(ChunkFault::ChunkStart { word, record: seq, header: chunk.seq() });
            }
            Control::Marker(Marker::ChunkStart(seq))
        }
        Escape::ThreadStart => Control::Marker(Marker::ThreadStart),
        Escape::ThreadEnd => Control::Marker(Marker::ThreadEnd),
        Escape::Signal { signo } => Control::Marker(Marker::Signal(signo)),
        Escape::SignalReturn => Control::Marker(Marker::SignalReturn),
        Escape::ExpireAll => Control::ExpireAll,
        Escape::Sync { at, seq } => Control::Marker(sync_marker(at, seq)),
        Escape::Call { func, args, ret } => Control::Marker(Marker::Call { func, args, ret }),
        Escape::Return { func, value } => Control::Marker(Marker::Return { func, value }),
        // Records of a block's instructions, found elsewhere than right after the block.
        Escape::Syscall { .. } | Escape::SyscallReturn { .. } => return Err(ChunkFault::StraySyscall { word }),
        Escape::Descriptors { .. } | Escape::Kernel { .. } => return Err(ChunkFault::StraySyscall { word }),
    })
}

/// The marker of a sync record.
fn sync_marker(at: u16, seq: u64) -> Marker {
    use dep_profile::tags::{SYNC_AFTER, SYNC_NO_INSN};
    if at == SYNC_NO_INSN {
        Marker::Sync { seq, insn: None, after: false }
    } else {
        Marker::Sync { seq, insn: Some(at & !SYNC_AFTER), after: at & SYNC_AFTER != 0 }
    }
}

/// The table index of the block a tag names, and the instruction it was interrupted at if
/// an interruption record follows it; any other item read after it goes to `pending`.
/// `records` receives the records of its instructions, each with its place among the
/// block's references ([`Marker::place`]), in the order they are given: a sync record
/// where its instruction is, a call record with the record before it (at the block's start
/// if none), a return record after all of them; records of one place in profile order.
fn block_at(
    plans: &Plans,
    cache: &mut PlanCache,
    tags: &mut TagDecoder,
    addr: u64,
    version: u32,
    word: usize,
    pending: &mut Option<TagItem>,
    records: &mut Vec<(u32, Marker)>,
) -> Result<(u32, Option<u16>), ChunkFault> {
    let id = match cache.find(plans, addr, version) {
        Ok(p) => p,
        Err(PlanMiss::NotInTable) => return Err(ChunkFault::UnknownBlock { word, addr, version }),
        Err(PlanMiss::Undecodable(why)) => return Err(ChunkFault::BadBlock { word, addr, why: why.clone() }),
    };
    // An interrupted block is followed by the record saying where it stopped, and by the
    // sync and call records of its instructions, before or after that record.
    let mut stop = None;
    records.clear();
    let mut last = 0u32;
    // The instruction whose system call returned last, for its results' records.
    let mut returned: Option<u16> = None;
    let n = plans.flat.blocks[id as usize].insns;
    loop {
        match if tags.at_escape() { tags.next_item() } else { Ok(None) } {
            Ok(Some(TagItem::Escape(Escape::Interrupted { insn }))) if stop.is_none() => {
                if insn as u32 >= n {
                    return Err(ChunkFault::BeyondBlock { word, addr, insns: n, record: "interrupted", at: insn as u32 });
                }
                stop = Some(insn);
            }
            Ok(Some(TagItem::Escape(Escape::Sync { at, seq }))) if at != dep_profile::tags::SYNC_NO_INSN => {
                let m = sync_marker(at, seq);
                if let Marker::Sync { insn: Some(k), .. } = m {
                    if k as u32 >= n {
                        return Err(ChunkFault::BeyondBlock { word, addr, insns: n, record: "sync record", at: k as u32 });
                    }
                }
                last = m.place().unwrap_or(u32::MAX);
                records.push((last, m));
            }
            Ok(Some(TagItem::Escape(Escape::Call { func, args, ret }))) => records.push((last, Marker::Call { func, args, ret })),
            Ok(Some(TagItem::Escape(Escape::Syscall { at, nr, args }))) => {
                if at as u32 >= n {
                    return Err(ChunkFault::BeyondBlock { word, addr, insns: n, record: "system call record", at: at as u32 });
                }
                let m = Marker::Syscall { insn: at, nr, args };
                last = m.place().unwrap_or(u32::MAX);
                records.push((last, m));
            }
            Ok(Some(TagItem::Escape(Escape::SyscallReturn { at, value }))) => {
                if at as u32 >= n {
                    return Err(ChunkFault::BeyondBlock { word, addr, insns: n, record: "system call return", at: at as u32 });
                }
                let m = Marker::SyscallReturn { insn: at, value };
                last = m.place().unwrap_or(u32::MAX);
                records.push((last, m));
                returned = Some(at);
            }
            // The return's results, where the return stands; the kernel's accesses as
            // references of its instruction.
            Ok(Some(TagItem::Escape(Escape::Descriptors { fds }))) if returned.is_some() => records.push((last, Marker::Descriptors(fds))),
            Ok(Some(TagItem::Escape(Escape::Kernel { write, addr: at, size }))) if returned.is_some() => {
                let insn = returned.expect("checked");
                // (A block in the table always has its plan; its first address otherwise.)
                let pc = plans.get_plan(id).and_then(|p| p.insns.get(insn as usize)).map_or(addr, |i| i.pc);
                records.push((last, Marker::Kernel { insn, pc, addr: at, size, write }))
            }
            Ok(Some(TagItem::Escape(Escape::Descriptors { .. } | Escape::Kernel { .. }))) => {
                return Err(ChunkFault::StraySyscall { word: tags.word_offset() })
            }
            Ok(Some(TagItem::Escape(Escape::Return { func, value }))) => {
                last = u32::MAX;
                records.push((last, Marker::Return { func, value }))
            }
            Ok(next) => {
                *pending = next;
                break;
            }
            Err(err) => return Err(ChunkFault::Tags { word: tags.word_offset(), err }),
        }
    }
    // Stable: records of one place keep their order.
    records.sort_by_key(|&(p, _)| p);
    Ok((id, stop))
}

/// Walks one chunk's control flow alone (DEP_c): blocks and markers, no references, and
/// DEP_m left unread (so a profile whose values are damaged still gives its control flow).
pub fn walk_blocks<S: Sink>(
    width: Width,
    plans: &Plans,
    chunk: &ChunkView,
    scratch: &mut Scratch,
    sink: &mut S,
) -> Result<(), Halt<S::Error>> {
    chunk.decompress_into(Section::Tags, &mut scratch.tags, &mut scratch.dec).map_err(ChunkFault::from)?;
    let mut tags = TagDecoder::new(width, &scratch.tags, chunk.hi()).map_err(|err| ChunkFault::Tags { word: 0, err })?;
    let thread = chunk.thread();
    let (mut version, mut pending, mut cache) = (0u32, None, PlanCache::new());
    let mut records = Vec::new();
    let fast = width == Width::W64;
    let mut run = Vec::with_capacity(RUN_BLOCKS);
    loop {
        if fast && pending.is_none() && version == 0 {
            run_blocks(plans, &cache, &mut tags, thread, &mut run, sink)?;
        }
        let word = tags.word_offset();
        let (word, item) = match pending.take() {
            Some(i) => (word, i),
            None => match tags.next_item() {
                Ok(Some(i)) => (tags.item_word(), i),
                Ok(None) => return Ok(()),
                Err(err) => return Err(ChunkFault::Tags { word, err }.into()),
            },
        };
        match item {
            TagItem::Block(addr) => {
                let (id, stop) = block_at(plans, &mut cache, &mut tags, addr, version, word, &mut pending, &mut records)?;
                let executed = stop.map_or(plans.flat.blocks[id as usize].insns, |s| s as u32 + 1);
                let plan = plans.get_plan(id);
                go(sink.block(&BlockEvent { thread, addr, version, id: Some(id), plan, executed, interrupted: stop.is_some() }))?;
                for &(_, m) in &records {
                    go(sink.marker(thread, m))?;
                }
                version = 0;
            }
            TagItem::Escape(e) => match control(e, chunk, word)? {
                Control::Version(v) => version = v,
                Control::ExpireAll => {}
                Control::Marker(m) => go(sink.marker(thread, m))?,
            },
        }
    }
}

enum StepFault<E> {
    Exhausted(usize),
    /// A rep string moved more bytes than any can.
    RepTooLong {
        pc: u64,
        bytes: u64,
        pre: u64,
        post: u64,
    },
    Halt(Halt<E>),
}

/// More bytes than any rep string can move in a run: beyond this the stream is corrupt.
const MAX_REP_BYTES: u64 = 1 << 40;

impl<E> StepFault<E> {
    /// The walk's halt for this fault in the block at `addr`, from tag word `word`.
    fn halt(self, word: usize, addr: u64) -> Halt<E> {
        match self {
            StepFault::Exhausted(offset) => Halt::Fault(ChunkFault::ValuesExhausted { word, offset, addr }),
            StepFault::RepTooLong { pc, bytes, pre, post } => Halt::Fault(ChunkFault::RepTooLong { word, pc, bytes, pre, post }),
            StepFault::Halt(h) => h,
        }
    }
}

impl<E> From<Halt<E>> for StepFault<E> {
    fn from(h: Halt<E>) -> Self {
        StepFault::Halt(h)
    }
}

/// A packed DEP_m that could not be unpacked (met as it is read), as the chunk's fault.
fn unpack_fault(err: PackError) -> ChunkFault {
    ChunkFault::Section(SectionError::Unpack { section: Section::Values, err })
}

impl<E> From<ValueError> for StepFault<E> {
    fn from(e: ValueError) -> Self {
        match e {
            ValueError::Exhausted { offset, .. } => StepFault::Exhausted(offset),
            ValueError::Unpack(err) => StepFault::Halt(Halt::Fault(unpack_fault(err))),
        }
    }
}

/// One thread's register state during the walk.
struct Walker<'v> {
    thread: u32,
    /// Register values by [`Reg::index`](dep_profile::Reg::index), then the zero slot.
    vals: [u64; SLOTS],
    /// Bit n: register n is CURRENT.
    status: u32,
    values: ValueReader<'v>,
    /// Address mask of the program's width.
    mask: u64,
    /// References of the block being walked, handed to the sink in one call.
    batch: Vec<MemEvent>,
}

/// Plain blocks run without a lookup in the table, a special step or an interruption.
impl Walker<'_> {
    /// Recovers consecutive plain L-tags of a 64-bit profile: blocks already in `cache`, at
    /// code version 0, not interrupted, without rep strings or gathers. Returns at the first
    /// tag that is anything else, which the general walk then takes. This is
    /// [`block`](Self::block) with everything it checks hoisted out.
    #[inline(never)]
    fn run_plain<S: Sink>(&mut self, plans: &Plans, cache: &PlanCache, tags: &mut TagDecoder, sink: &mut S) -> Result<(), Halt<S::Error>> {
        let flat = &plans.flat;
        let (bytes, mut p) = tags.raw();
        let mut hi = tags.hi() << 16;
        // The values at hand, as a pointer and length so that a refill can move them.
        let (mut values, mut vlen) = (self.values.bytes().as_ptr(), self.values.bytes().len());
        let mut vp = self.values.at();
        let reader = &mut self.values;
        let mut status = self.status;
        let vals = &mut self.vals;
        debug_assert!(self.batch.capacity() >= flat.max_refs as usize);
        let out = self.batch.as_mut_ptr();
        let r = (|| {
            // Two words at a time: the block's L-tag and the word after it. The chunk's last
            // block (no word after it) is left to the general walk.
            while let Some(addr) = plain_tag(bytes, &mut p, &mut hi) {
                let Some(id) = cache.peek_plain(addr) else { break };
                // SAFETY: (this and the unchecked indexing below) `FlatPlans::push` builds every range
                // inside its arrays, and the cache hits only indices `Plans::find` returned (its
                // empty slots hold keys no lookup reaches them with: `PlanCache::new`; exercised
                // by recover/tests/hostile.rs on an empty table and on blocks at the top address).
                let fb = unsafe { flat.blocks.get_unchecked(id as usize) };
                let word = p / 2;
                p += 2;
                // (Without a panic path, so a sink that ignores the plan does not pay for it.)
                let plan = plans.get_plan(id);
                let ev = BlockEvent { thread: self.thread, addr, version: 0, id: Some(id), plan, executed: fb.insns, interrupted: false };
                go(sink.block(&ev))?;
                let mut k = 0usize;
                // SAFETY: `fb.steps` is a range `FlatPlans::push` built inside `flat.steps`.
                for step in unsafe { flat.steps.get_unchecked(fb.steps.0 as usize..fb.steps.1 as usize) } {
                    status = if step.copies.0 == step.copies.1 {
                        (status & !step.expired) | step.derived
                    } else {
                        step_status(status, step.expired, step.derived, flat.copies_in(step.copies))
                    };
                    if step.adjust.0 != step.adjust.1 {
                        // SAFETY: `step.adjust` is a range `FlatPlans::push` built inside `flat.adjust`.
                        add_constants(vals, unsafe { flat.adjust.get_unchecked(step.adjust.0 as usize..step.adjust.1 as usize) }, u64::MAX);
                    }
                    if step.ops.0 != step.ops.1 {
                        apply_ops(vals, &flat.ops[step.ops.0 as usize..step.ops.1 as usize], u64::MAX);
                    }
                    let mut need = step.used & !status;
                    while need != 0 {
                        let r = need.trailing_zeros() as usize;
                        need &= need - 1;
                        if vp + 8 > vlen {
                            reader.seek(vp);
                            reader.refill(8).map_err(|e| StepFault::from(e).halt(word, addr))?;
                            (values, vlen, vp) = (reader.bytes().as_ptr(), reader.bytes().len(), reader.at());
                        }
                        // SAFETY: `values..values + vlen` are the reader's bytes at hand
                        // (taken again after each refill, the only change to them here), and
                        // `vp + 8 <= vlen`, checked just above.
                        vals[r & (SLOTS - 1)] = unsafe { (values.add(vp) as *const u64).read_unaligned() };
                        vp += 8;
                    }
                    status |= step.used;
                    // SAFETY: `step.refs` is a range `FlatPlans::push` built inside `flat.refs`.
                    let refs = unsafe { flat.refs.get_unchecked(step.refs.0 as usize..step.refs.1 as usize) };
                    // SAFETY: at most `fb.refs <= max_refs` writes, within the capacity.
                    if step.simple {
                        for r in refs {
                            unsafe { out.add(k).write(MemEvent { addr: r.eval_simple(vals), ..r.event }) };
                            k += 1;
                        }
                    } else {
                        for r in refs {
                            // SAFETY: as for the simple form above: `k < fb.refs <= max_refs <= capacity`.
                            unsafe { out.add(k).write(MemEvent { addr: r.eval(vals), ..r.event }) };
                            k += 1;
                        }
                    }
                }
                status = step_status(status, fb.tail_expired, fb.tail_derived, flat.copies_in(fb.tail_copies));
                if fb.tail_adjust.0 != fb.tail_adjust.1 {
                    add_constants(
                        vals,
                        // SAFETY: `fb.tail_adjust` is a range `FlatPlans::push` built inside `flat.adjust`.
                        unsafe { flat.adjust.get_unchecked(fb.tail_adjust.0 as usize..fb.tail_adjust.1 as usize) },
                        u64::MAX,
                    );
                }
                if fb.tail_ops.0 != fb.tail_ops.1 {
                    apply_ops(vals, &flat.ops[fb.tail_ops.0 as usize..fb.tail_ops.1 as usize], u64::MAX);
                }
                if k != 0 {
                    // SAFETY: the first `k` elements were written above.
                    go(sink.refs(&ev, unsafe { std::slice::from_raw_parts(out, k) }))?;
                }
            }
            Ok(())
        })();
        tags.seek(p);
        tags.set_hi(hi >> 16);
        reader.seek(vp);
        self.status = status;
        r
    }
}

#[cfg(target_arch = "x86_64")]
impl Walker<'_> {
    /// Runs compiled blocks from the next tag (a 64-bit profile at code version 0) until the
    /// code leaves for the general walk, handing their events to the sink every
    /// [`JIT_BLOCKS`] blocks.
    #[inline(never)]
    fn run_jit<S: Sink>(
        &mut self,
        plans: &Plans,
        jit: &crate::jit::Jit,
        buf: &mut JitBuffers,
        tags: &mut TagDecoder,
        sink: &mut S,
    ) -> Result<(), Halt<S::Error>> {
        use crate::jit::JitState;
        let flat = &plans.flat;
        let max_refs = flat.max_refs as usize;
        let cap = (4 * max_refs).max(4096);
        buf.refs.clear();
        buf.refs.reserve(cap);
        buf.blocks.clear();
        buf.blocks.reserve(JIT_BLOCKS);
        let (bytes, p) = tags.raw();
        if bytes.len() < p + 4 {
            // The compiled code reads two words at a time; the last block is the walk's.
            return Ok(());
        }
        let refs0 = buf.refs.as_mut_ptr();
        let blocks0 = buf.blocks.as_mut_ptr();
        let tags_range = bytes.as_ptr_range();
        let (exit, set_hi) = jit.routines();
        let mut values_range = self.values.bytes().as_ptr_range();
        // SAFETY: the tags are at least 4 bytes long (checked above).
        let tags_last = unsafe { tags_range.end.sub(4) };
        // Where the code leaves from `at` to hand over at most `JIT_BLOCKS` blocks: each
        // block reads at least one tag word, so block n starts `2 * n` bytes on or more.
        let bound = |at: *const u8| {
            if (tags_last as usize).saturating_sub(at as usize) / 2 < JIT_BLOCKS {
                tags_last
            } else {
                at.wrapping_add(2 * (JIT_BLOCKS - 1))
            }
        };
        // SAFETY (the pointers): each is within, or one past, the slice or capacity it
        // comes from; `Jit::enter` needs no more.
        let mut st = JitState {
            vals: self.vals,
            hi: tags.hi() << 16,
            // SAFETY: `p + 4 <= bytes.len()`, checked above.
            tags: unsafe { tags_range.start.add(p) },
            tags_last,
            // SAFETY: the value reader's offset is within its bytes.
            values: unsafe { values_range.start.add(self.values.at()) },
            values_end: values_range.end,
            refs: refs0,
            // SAFETY: `cap >= 4 * max_refs`, reserved above; the room past the limit holds
            // the largest compiled block's references (compiled blocks have at most `max_refs`).
            refs_limit: unsafe { refs0.add(cap - max_refs) },
            // `JIT_BLOCKS` records are reserved above, and `tags_last` is set before each
            // entry to allow at most that many.
            blocks: blocks0,
            status: self.status as u64,
            table: jit.table(),
            succ: jit.successors(),
            exit,
            set_hi,
        };
        let r = (|| loop {
            st.refs = refs0;
            st.blocks = blocks0;
            st.tags_last = bound(st.tags);
            // SAFETY: the state was built above for this code.
            unsafe { jit.enter(&mut st) };
            // SAFETY: the code wrote this many records and references, in order.
            let (recs, refs) = unsafe {
                (
                    std::slice::from_raw_parts(blocks0, st.blocks.offset_from(blocks0) as usize),
                    std::slice::from_raw_parts(refs0, st.refs.offset_from(refs0) as usize),
                )
            };
            if !recs.is_empty() {
                plans.count_compiled(recs.len());
                go(sink.run(&Run::new(self.thread, recs, refs, plans)))?;
            }
            // Left for the general walk, not for a full buffer or the blocks' bound.
            if st.refs <= st.refs_limit && (st.tags <= st.tags_last || st.tags_last == tags_last) {
                // Perhaps for the values at hand, short of the next block's: with more to
                // unpack, the code goes on after a refill (a few words move to the front).
                if !self.values.more() || st.values_end as usize - st.values as usize >= REFILL_BELOW {
                    return Ok(());
                }
                // SAFETY: the code moves the pointer forward within the values at hand.
                self.values.seek(unsafe { st.values.offset_from(values_range.start) } as usize);
                self.values.unpack_more(0).map_err(|err| Halt::Fault(unpack_fault(err)))?;
                values_range = self.values.bytes().as_ptr_range();
                // SAFETY: the reader's offset is within its bytes.
                st.values = unsafe { values_range.start.add(self.values.at()) };
                st.values_end = values_range.end;
            }
        })();
        self.vals = st.vals;
        self.status = st.status as u32;
        // SAFETY: the code moves both pointers forward within their slices (the values'
        // range is taken again after each refill).
        unsafe {
            tags.seek(st.tags.offset_from(tags_range.start) as usize);
            self.values.seek(st.values.offset_from(values_range.start) as usize);
        }
        tags.set_hi(st.hi >> 16);
        r
    }
}

/// Adds a plan's constants to the registers they move, within the address `mask`.
#[inline(always)]
fn add_constants(vals: &mut [u64; SLOTS], adjust: &[(u8, u64)], mask: u64) {
    for &(r, d) in adjust {
        let v = &mut vals[r as usize & (SLOTS - 1)];
        *v = v.wrapping_add(d) & mask;
    }
}

/// Repeats a plan's ordered value changes (constant additions and derivations).
#[inline]
fn apply_ops(vals: &mut [u64; SLOTS], ops: &[RegOp], mask: u64) {
    for op in ops {
        op.apply(vals);
        vals[op.dst().index()] &= mask;
    }
}

/// References a block's special steps (short rep strings, gathers) buffer before handing
/// them to the sink: 24 KiB, so the sink reads them while they are still in the
/// first-level cache (4096, 96 KiB, made matrix's one-core recovery take 10% longer when
/// its memcpy rows were written out here).
const BATCH: usize = 1024;

/// References of a rep string at least, that go to the sink as one [`RepRun`]; shorter
/// ones go with the block's other references, in the same call. (Not tuned: the strings
/// that cost, a `memcpy` of a row or a page, are thousands of references.)
const REP_RUN_MIN: u64 = 64;

impl Walker<'_> {
    /// Adds a plan's constants to the registers they move (push, pop, add rsp, ...).
    #[inline(always)]
    fn adjust(&mut self, adjust: &[(u8, u64)]) {
        add_constants(&mut self.vals, adjust, self.mask);
    }

    #[inline(always)]
    fn block<S: Sink>(
        &mut self,
        plans: &Plans,
        id: u32,
        version: u32,
        stop: Option<u16>,
        records: &[(u32, Marker)],
        sink: &mut S,
    ) -> Result<(), StepFault<S::Error>> {
        let flat = &plans.flat;
        let fb = flat.blocks[id as usize];
        let executed = stop.map_or(fb.insns, |s| s as u32 + 1);
        let plan_ref = plans.plan(id);
        let ev = BlockEvent {
            thread: self.thread,
            addr: plan_ref.addr,
            version,
            id: Some(id),
            plan: Some(plan_ref),
            executed,
            interrupted: stop.is_some(),
        };
        go(sink.block(&ev))?;
        let mut steps = &flat.steps[fb.steps.0 as usize..fb.steps.1 as usize];
        if let Some(s) = stop {
            steps = &steps[..steps.partition_point(|st| st.insn <= s)];
        }
        self.batch.clear();
        self.batch.reserve(fb.refs as usize);
        let mask = self.mask;
        let mut status = self.status;
        // The block's records (placed by `block_at`) not yet given.
        let mut records = records;
        for step in steps {
            if let Some(&(p, _)) = records.first() {
                if p <= 2 * step.insn as u32 {
                    self.records_before(&ev, 2 * step.insn as u32, &mut records, sink)?;
                }
            }
            status = step_status(status, step.expired, step.derived, flat.copies_in(step.copies));
            if step.adjust.0 != step.adjust.1 {
                self.adjust(&flat.adjust[step.adjust.0 as usize..step.adjust.1 as usize]);
            }
            if step.ops.0 != step.ops.1 {
                apply_ops(&mut self.vals, &flat.ops[step.ops.0 as usize..step.ops.1 as usize], mask);
            }
            let mut need = step.used & !status;
            while need != 0 {
                let r = need.trailing_zeros() as usize;
                need &= need - 1;
                self.vals[r & (SLOTS - 1)] = self.values.next()?;
            }
            status |= step.used;
            if !step.special {
                let refs = &flat.refs[step.refs.0 as usize..step.refs.1 as usize];
                let n = self.batch.len();
                debug_assert!(n + refs.len() <= self.batch.capacity());
                // SAFETY: the batch has room for the block's references (reserved above, and
                // again after a special step), of which these are a part.
                unsafe {
                    let out = self.batch.as_mut_ptr().add(n);
                    for (k, r) in refs.iter().enumerate() {
                        out.add(k).write(MemEvent { addr: r.eval(&self.vals) & mask, ..r.event });
                    }
                    self.batch.set_len(n + refs.len());
                }
            } else {
                self.status = status;
                self.special(&ev, &plan_ref.insns[step.insn as usize], step.insn, stop == Some(step.insn), sink)?;
                status = self.status;
                self.batch.reserve(fb.refs as usize);
            }
        }
        if stop.is_none() {
            status = step_status(status, fb.tail_expired, fb.tail_derived, flat.copies_in(fb.tail_copies));
            if fb.tail_adjust.0 != fb.tail_adjust.1 {
                self.adjust(&flat.adjust[fb.tail_adjust.0 as usize..fb.tail_adjust.1 as usize]);
            }
            if fb.tail_ops.0 != fb.tail_ops.1 {
                apply_ops(&mut self.vals, &flat.ops[fb.tail_ops.0 as usize..fb.tail_ops.1 as usize], mask);
            }
        }
        self.status = status;
        if !self.batch.is_empty() {
            go(sink.refs(&ev, &self.batch))?;
        }
        for &(_, m) in records {
            go(sink.marker(self.thread, m))?;
        }
        Ok(())
    }

    /// Gives the references batched so far and then the records placed at or before
    /// `place` (the next instruction's references come after them).
    #[cold]
    fn records_before<S: Sink>(
        &mut self,
        ev: &BlockEvent,
        place: u32,
        records: &mut &[(u32, Marker)],
        sink: &mut S,
    ) -> Result<(), StepFault<S::Error>> {
        if !self.batch.is_empty() {
            go(sink.refs(ev, &self.batch))?;
            self.batch.clear();
        }
        while let Some((&(p, m), rest)) = records.split_first() {
            if p > place {
                break;
            }
            go(sink.marker(self.thread, m))?;
            *records = rest;
        }
        Ok(())
    }

    /// A rep string or a gather, whose references depend on values beyond the registers.
    #[inline(never)]
    fn special<S: Sink>(
        &mut self,
        ev: &BlockEvent,
        insn: &Insn,
        index: u16,
        interrupted_here: bool,
        sink: &mut S,
    ) -> Result<(), StepFault<S::Error>> {
        let mask = self.mask;
        match insn.special {
            Special::None => unreachable!("flat plans mark only special instructions"),
            Special::Rep(rep) => {
                let pre = self.vals[rep.post.index()];
                let post = self.values.next()?;
                let delta = post.wrapping_sub(pre) & mask;
                let (dir, bytes) =
                    if delta == 0 || delta <= mask / 2 { (1i64, delta) } else { (-1i64, mask.wrapping_sub(delta).wrapping_add(1) & mask) };
                if bytes > MAX_REP_BYTES {
                    return Err(StepFault::RepTooLong { pc: insn.pc, bytes, pre, post });
                }
                let count = bytes / rep.elem as u64 + interrupted_here as u64;
                // Each reference advances linearly from its start address; only a
                // 32-bit address size needs the wrap recomputed per iteration.
                // String instructions have at most two references (movs, cmps).
                let regs = &self.vals[..NUM_REGS];
                let mut starts = [(0u64, false); 2];
                for (s, r) in starts.iter_mut().zip(&insn.refs) {
                    *s = (r.addr.eval(regs), r.addr.addr_bits == 64);
                }
                let base: [u64; NUM_REGS] = regs.try_into().unwrap();
                let stride = (dir * rep.elem as i64) as u64;
                if starts[..insn.refs.len()].iter().all(|s| s.1) {
                    // 64-bit addressing: every reference steps by `stride`, written in runs.
                    let first = |r: &dep_profile::semantics::MemRef, s: &(u64, bool)| MemEvent {
                        pc: insn.pc,
                        addr: s.0,
                        size: r.size,
                        access: r.access,
                        conditional: false,
                        insn: index,
                    };
                    let mut all =
                        [MemEvent { pc: 0, addr: 0, size: 0, access: dep_profile::semantics::Access::Read, conditional: false, insn: 0 };
                            2];
                    for ((e, r), st) in all.iter_mut().zip(&insn.refs).zip(&starts) {
                        *e = first(r, st);
                    }
                    // (A string instruction has one or two references; `None` has none.)
                    if let Some(run) = RepRun::new(&all[..insn.refs.len().min(2)], count, stride, mask) {
                        if run.len() >= REP_RUN_MIN {
                            if !self.batch.is_empty() {
                                go(sink.refs(ev, &self.batch))?;
                                self.batch.clear();
                            }
                            go(sink.rep(ev, &run))?;
                        } else {
                            run.write_to(&mut self.batch);
                            if self.batch.len() >= BATCH {
                                go(sink.refs(ev, &self.batch))?;
                                self.batch.clear();
                            }
                        }
                    }
                } else {
                    for k in 0..count {
                        let step_bytes = k.wrapping_mul(stride);
                        for r in &insn.refs {
                            let mut regs = base;
                            if let Some(p) = r.addr.base.map(|b| b.reg) {
                                regs[p.index()] = regs[p.index()].wrapping_add(step_bytes);
                            }
                            let addr = r.addr.eval(&regs);
                            self.batch.push(MemEvent {
                                pc: insn.pc,
                                addr: addr & mask,
                                size: r.size,
                                access: r.access,
                                conditional: false,
                                insn: index,
                            });
                        }
                        if self.batch.len() >= BATCH {
                            go(sink.refs(ev, &self.batch))?;
                            self.batch.clear();
                        }
                    }
                }
                self.vals[rep.post.index()] = post;
                self.status |= 1 << rep.post.index();
                if let Some(o) = rep.other {
                    self.vals[o.index()] = self.vals[o.index()].wrapping_add(post.wrapping_sub(pre)) & mask;
                }
            }
            Special::Gather(g) => {
                let (idx, m) = self.values.raw2(g.index_bytes as usize, g.mask_bytes())?;
                for r in &insn.refs {
                    for e in 0..g.count() {
                        if !g.active(m, e, r.size) {
                            continue;
                        }
                        let off = g.index_value(idx, e).wrapping_mul(r.addr.scale as u64);
                        self.batch.push(MemEvent {
                            pc: insn.pc,
                            addr: r.addr.eval(&self.vals[..NUM_REGS]).wrapping_add(off) & mask,
                            size: r.size,
                            access: r.access,
                            conditional: false,
                            insn: index,
                        });
                    }
                }
            }
        }
        Ok(())
    }
}
