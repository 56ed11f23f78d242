//! One thread's recovered stream turned into what the race analysis reads: accesses
//! classified, each sync record placed between the references of the instructions it
//! separates, and each atomic instruction bracketed by the release before it and the
//! acquire after it.

use dep_profile::semantics::{Access, Insn};
use dep_profile::{BlockPlan, Reg};
use dep_recover::events::{BlockEvent, Marker, MemEvent, Run};
use dep_recover::plans::Plans;
use dep_recover::{RecoverError, Sink};

use super::local::{Act, Local};
use crate::program::calls::{BlockExits, CallFlow, Transition};

/// What an access is to the analysis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// An ordinary access: checked.
    Plain,
    /// A locked instruction of the program's: synchronisation, and checked against the
    /// plain writes of its location.
    Atomic,
    /// A locked instruction of the C runtime or the dynamic linker: their own
    /// synchronisation, never checked.
    RuntimeAtomic,
    /// Through the FS or GS segment: thread-local storage, checked by address like any
    /// other memory (another thread may be handed its address).
    Tls,
    /// Through rsp (push, pop, call, ret, locals): checked, and it marks the thread's stack.
    Stack,
    /// By the dynamic linker or a PLT stub: symbol binding, not the program's sharing.
    Linker,
    /// By the C runtime's code (the C library and its kin): the program's if called from
    /// the program (a `strcpy`), the runtime's own business otherwise.
    Runtime,
}

/// Whose code a block is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Program,
    /// The C runtime's libraries ([`is_runtime`]).
    Runtime,
    /// The dynamic linker, or a PLT stub.
    Linker,
}

/// One event of a thread, in its execution order.
#[derive(Clone, Copy, Debug)]
pub enum Ev {
    /// A block begins.
    Block {
        addr: u64,
    },
    /// Control passed from the block before as a call, a return or a tail call.
    Flow(Transition),
    /// A signal handler starts.
    Signal,
    /// A signal handler returned (through sigreturn).
    SignalReturn,
    Access {
        pc: u64,
        addr: u64,
        size: u32,
        write: bool,
        class: Class,
    },
    /// A sync record: the thread's point number `seq` in the process-wide order.
    Sync(u64),
    /// An atomic instruction on the location at `addr` ran (its release side, after its
    /// references).
    Release(u64),
    /// The atomic instruction on `addr` ran (its acquire side).
    Acquire(u64),
    /// A watched library function was entered.
    Call {
        func: u16,
        args: [u64; 2],
        ret: u64,
    },
    /// A watched library function returned `value`.
    Return {
        func: u16,
        value: u64,
    },
    /// A recorded system call is made ([`dep_profile::syscalls`]).
    Syscall {
        nr: u16,
        args: [u64; 3],
    },
    /// It returned `value`.
    SyscallReturn {
        value: u64,
    },
    /// The descriptors it made through memory (a pipe's, a socket pair's).
    Descriptors([u32; 2]),
    /// Memory the kernel accessed for it, as an access of its instruction.
    Kernel {
        pc: u64,
        addr: u64,
        size: u32,
        write: bool,
        class: Class,
    },
    Start,
    End,
}

const ATOMIC: u8 = 1;
const TLS: u8 = 2;
const STACK: u8 = 4;
const LINKER: u8 = 8;
const RUNTIME: u8 = 16;

/// Per-instruction facts of every block of the table, computed once.
pub struct Facts {
    /// Per block id.
    blocks: Vec<BlockFacts>,
    /// Every block's instructions, block after block (one array: a block's entry costs
    /// fewer cache misses than with one of its own).
    insns: Vec<InsnFacts>,
    /// How each block leaves: calls and returns.
    exits: BlockExits,
}

/// What the analysis needs of one block of the table.
#[derive(Clone, Copy, Default)]
struct BlockFacts {
    /// Its instructions' place in [`Facts::insns`].
    start: usize,
    len: u32,
    /// It has a plan (its bytes decode).
    planned: bool,
    /// None of its instructions is locked, and it is neither the C runtime's code nor the
    /// linker's, so each access is its instruction's plain, stack or TLS one.
    plain: bool,
    /// None of its instructions is locked, and it is the C runtime's code, so each access
    /// is a runtime one: the program's business where the program called the runtime,
    /// skipped where the runtime called itself (memcpy and memset, whose rep strings and
    /// vector loops are most of some programs' accesses).
    runtime: bool,
}

/// What the analysis needs of one instruction of a block (16 bytes).
#[derive(Clone, Copy, Debug, Default)]
pub struct InsnFacts {
    pub pc: u64,
    /// Bytes each of its reads, and each of its writes, accesses (0 where it has none),
    /// where `sized`.
    pub read: u16,
    pub write: u16,
    /// It accesses memory, all its reads of one size and all its writes of one, each
    /// below 64 KiB.
    pub sized: bool,
    /// Its accesses are stack accesses ([`Class::Stack`]).
    pub stack: bool,
    flags: u8,
}

impl InsnFacts {
    fn new(i: &Insn, extra: u8) -> InsnFacts {
        let flags = insn_flags(i) | extra;
        let size = |access: Access| {
            let mut sizes = i.refs.iter().filter(|r| r.access == access).map(|r| r.size);
            let first = sizes.next().unwrap_or(0);
            sizes.all(|s| s == first).then(|| u16::try_from(first).ok()).flatten()
        };
        let (read, write) = (size(Access::Read), size(Access::Write));
        let sized = !i.refs.is_empty() && read.is_some() && write.is_some();
        InsnFacts { pc: i.pc, read: read.unwrap_or(0), write: write.unwrap_or(0), sized, stack: class_of(flags) == Class::Stack, flags }
    }
}

fn insn_flags(i: &Insn) -> u8 {
    let mut f = 0;
    if i.atomic {
        f |= ATOMIC;
    }
    if !i.refs.is_empty() && i.refs.iter().all(|r| r.addr.seg.is_some()) {
        f |= TLS;
    }
    if !i.refs.is_empty() && i.refs.iter().all(|r| r.addr.base.is_some_and(|b| b.reg == Reg::RSP) && r.addr.seg.is_none()) {
        f |= STACK;
    }
    f
}

impl Facts {
    /// The facts of every block `plans` can decode; `code` says whose code is at an address,
    /// `exits` how each block leaves.
    pub fn new(plans: &Plans, blocks: usize, code: &dyn Fn(u64) -> Code, exits: BlockExits) -> Facts {
        Facts::of((0..blocks as u32).map(|id| plans.get_plan(id).map(|p| Facts::of_plan(p, code))), exits)
    }

    /// The facts of `p`'s instructions, whose code `code` says whose it is.
    fn of_plan(p: &BlockPlan, code: &dyn Fn(u64) -> Code) -> Vec<InsnFacts> {
        let extra = match p.insns.first().map(|i| code(i.pc)) {
            Some(Code::Linker) => LINKER,
            Some(Code::Runtime) => RUNTIME,
            _ => 0,
        };
        p.insns.iter().map(|i| InsnFacts::new(i, extra)).collect()
    }

    /// From each block's instructions' facts, by id (None where it has no plan).
    fn of(blocks: impl Iterator<Item = Option<Vec<InsnFacts>>>, exits: BlockExits) -> Facts {
        let mut f = Facts { blocks: Vec::new(), insns: Vec::new(), exits };
        for b in blocks {
            let (start, planned) = (f.insns.len(), b.is_some());
            f.insns.extend(b.into_iter().flatten());
            let insns = &f.insns[start..];
            let plain = planned && insns.iter().all(|f| f.flags & (ATOMIC | RUNTIME | LINKER) == 0);
            let runtime = planned && !insns.is_empty() && insns.iter().all(|f| f.flags & (ATOMIC | RUNTIME | LINKER) == RUNTIME);
            // (A plan has at most 65,535 instructions.)
            f.blocks.push(BlockFacts { start, len: insns.len() as u32, planned, plain, runtime });
        }
        f
    }

    /// Block `id`'s facts, and its instructions'.
    #[inline]
    fn block(&self, id: Option<u32>) -> Option<(BlockFacts, &[InsnFacts])> {
        let b = *self.blocks.get(id? as usize)?;
        Some((b, self.insns.get(b.start..b.start + b.len as usize)?))
    }
}

/// What an access of an instruction with `flags` is.
fn class_of(flags: u8) -> Class {
    if flags & ATOMIC != 0 && flags & (RUNTIME | LINKER) != 0 {
        Class::RuntimeAtomic
    } else if flags & ATOMIC != 0 {
        Class::Atomic
    } else if flags & LINKER != 0 {
        Class::Linker
    } else if flags & RUNTIME != 0 {
        Class::Runtime
    } else if flags & TLS != 0 {
        Class::Tls
    } else if flags & STACK != 0 {
        Class::Stack
    } else {
        Class::Plain
    }
}

/// Whether a module is part of the C runtime (C and C++ standard libraries, threads,
/// math, the dynamic linker), by its file name.
pub fn is_runtime(path: &str) -> bool {
    let name = std::path::Path::new(path).file_name().and_then(|n| n.to_str()).unwrap_or("");
    ["libc.so", "libc-", "libpthread", "libstdc++", "libgcc_s", "libm.so", "libm-", "libdl", "librt", "ld-linux", "ld-musl", "ld64.so"]
        .iter()
        .any(|p| name.starts_with(p))
}

/// Whether a module is the dynamic linker (whose lazy binding writes GOT slots that every
/// thread's PLT stubs read: synchronised by design, not the program's).
pub fn is_dynamic_linker(path: &str) -> bool {
    let name = std::path::Path::new(path).file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.starts_with("ld-linux") || name.starts_with("ld-musl") || name.starts_with("ld64.so") || name == "ld.so"
}

/// A sink for one thread's recovery that hands its [`Ev`]s, through `lower` (the
/// thread's [`Local`] view in the analysis), to `out` in batches, as they come:
/// recovery gives the records of a block's instructions where they stand among its
/// references, so nothing is held but the instruction under way.
pub struct Feed<'f, L: Lower, F: FnMut(Vec<L::Item>) -> Sent> {
    facts: &'f Facts,
    lower: L,
    out: F,
    batch: Vec<L::Item>,
    /// The open block's instructions.
    insns: &'f [InsnFacts],
    /// The open block's id and whether it is the runtime's, where it is plain or the
    /// runtime's ([`BlockFacts::plain`], [`BlockFacts::runtime`]): its references may take
    /// the quiet path.
    quick: Option<(u32, bool)>,
    open: bool,
    /// The instruction whose references are coming: its index, and the address of its
    /// first reference when it is an atomic (whose release follows its references, and
    /// whose acquire follows the records right after it).
    cur: Option<(u16, Option<u64>)>,
    /// The atomic under way was released.
    released: bool,
    /// Where the block's last record stood ([`Marker::place`]; a call record stands with
    /// the record before it).
    last_place: u32,
    /// The flow between the thread's blocks, for calls and returns.
    flow: CallFlow,
}

/// How a feed puts its events into the batches it sends.
pub trait Lower {
    type Item;
    /// Adds what `e` comes to.
    fn lower(&mut self, e: Ev, out: &mut Vec<Self::Item>);
    /// Adds what is owed before a batch goes.
    fn flush(&mut self, _out: &mut Vec<Self::Item>) {}
    /// Adds what an access comes to: [`lower`](Self::lower) of its [`Ev::Access`], for
    /// the one event of every reference to take without building it.
    #[inline]
    fn access(&mut self, pc: u64, addr: u64, size: u32, write: bool, class: Class, out: &mut Vec<Self::Item>) {
        self.lower(Ev::Access { pc, addr, size, write, class }, out)
    }
    /// Adds what entering the block at `addr` comes to: [`lower`](Self::lower) of its
    /// [`Ev::Block`], for the one event of every block to take without building it.
    #[inline]
    fn enter(&mut self, addr: u64, out: &mut Vec<Self::Item>) {
        self.lower(Ev::Block { addr }, out)
    }
    /// Takes the longest prefix of `refs` that adds nothing to the batch, as
    /// [`access`](Self::access) of each would take it, and answers its length: references
    /// of block `block`, whose instructions are `insns`, a block with no locked
    /// instruction that is not the linker's: the C runtime's code where `runtime`, else
    /// the program's. (None unless a lowering has a faster way.)
    #[inline]
    fn quiet(&mut self, _block: u32, _runtime: bool, _insns: &[InsnFacts], _refs: &[MemEvent]) -> usize {
        0
    }
}

/// The events as they are.
pub struct AsIs;

impl Lower for AsIs {
    type Item = Ev;
    fn lower(&mut self, e: Ev, out: &mut Vec<Ev>) {
        out.push(e);
    }
}

/// Through the thread's own view: what the engine takes.
impl Lower for Local<'_> {
    type Item = Act;
    #[inline]
    fn lower(&mut self, e: Ev, out: &mut Vec<Act>) {
        Local::lower(self, e, out)
    }
    fn flush(&mut self, out: &mut Vec<Act>) {
        Local::flush(self, out)
    }
    #[inline]
    fn access(&mut self, pc: u64, addr: u64, size: u32, write: bool, class: Class, out: &mut Vec<Act>) {
        Local::access(self, pc, addr, size, write, class, false, out)
    }
    #[inline(always)]
    fn quiet(&mut self, block: u32, runtime: bool, insns: &[InsnFacts], refs: &[MemEvent]) -> usize {
        Local::quiet(self, block, runtime, insns, refs)
    }
    #[inline]
    fn enter(&mut self, addr: u64, out: &mut Vec<Act>) {
        Local::enter(self, addr, out)
    }
}

/// What handing events on comes to: `Err(Gone)` when the receiver is gone (it failed, and
/// reports why).
pub type Sent = Result<(), Gone>;

/// The receiver of a feed's batches is gone.
#[derive(Debug)]
pub struct Gone;

/// Events a batch holds (when sent full; a thread's last one holds fewer).
pub const BATCH: usize = 4096;

impl<'f, L: Lower, F: FnMut(Vec<L::Item>) -> Sent> Feed<'f, L, F> {
    /// A feed putting its events into batches through `lower`, and sending them to `out`.
    pub fn new(facts: &'f Facts, lower: L, out: F) -> Self {
        Feed {
            facts,
            lower,
            out,
            batch: Vec::with_capacity(BATCH),
            insns: &[],
            quick: None,
            open: false,
            cur: None,
            released: false,
            last_place: 0,
            flow: CallFlow::default(),
        }
    }

    #[inline]
    fn push(&mut self, e: Ev) -> Sent {
        self.lower.lower(e, &mut self.batch);
        self.sent()
    }

    /// Sends the batch if it is full.
    #[inline(always)]
    fn sent(&mut self) -> Sent {
        if self.batch.len() >= BATCH {
            return self.send();
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn send(&mut self) -> Sent {
        self.lower.flush(&mut self.batch);
        let b = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        (self.out)(b)
    }

    fn marker_ev(&mut self, m: Marker) -> Option<Ev> {
        match m {
            Marker::Syscall { nr, args, .. } => Some(Ev::Syscall { nr, args }),
            Marker::SyscallReturn { value, .. } => Some(Ev::SyscallReturn { value }),
            Marker::Descriptors(fds) => Some(Ev::Descriptors(fds)),
            // The kernel's accesses, of the system call instruction's class.
            Marker::Kernel { insn, pc, addr, size, write } => {
                let flags = self.insns.get(insn as usize).map_or(0, |f| f.flags);
                Some(Ev::Kernel { pc, addr, size, write, class: class_of(flags) })
            }
            Marker::Sync { seq, .. } => Some(Ev::Sync(seq)),
            Marker::Call { func, args, ret } => Some(Ev::Call { func, args, ret }),
            Marker::Return { func, value } => Some(Ev::Return { func, value }),
            Marker::ThreadStart => Some(Ev::Start),
            Marker::ThreadEnd => Some(Ev::End),
            Marker::Signal(_) => Some(Ev::Signal),
            Marker::SignalReturn => Some(Ev::SignalReturn),
            // `dep races` reads whole threads: no window marks reach it. A gap between
            // recorded windows is program order still (the command warns that what
            // synchronised other threads in it is missing).
            Marker::ChunkStart(_) | Marker::WindowStart | Marker::WindowEnd | Marker::Unrecorded(_) => None,
        }
    }

    #[inline]
    fn access(&mut self, r: &MemEvent, flags: u8) -> Sent {
        let class = class_of(flags);
        self.lower.access(r.pc, r.addr, r.size, r.access == Access::Write, class, &mut self.batch);
        self.sent()
    }

    /// An atomic's release once its references are all out: the release covers the
    /// atomic's own access, as an atomic read-modify-write publishes what it wrote.
    #[inline]
    fn release_insn(&mut self) -> Sent {
        if let (Some((_, Some(addr))), false) = (self.cur, self.released) {
            self.released = true;
            self.push(Ev::Release(addr))?;
        }
        Ok(())
    }

    /// Ends the instruction under way: an atomic's acquire after its references and the
    /// records right after it.
    #[inline]
    fn end_insn(&mut self) -> Sent {
        // Most instructions are not atomics: nothing to release or acquire.
        if !matches!(self.cur, Some((_, Some(_)))) {
            self.cur = None;
            return Ok(());
        }
        self.release_insn()?;
        if let Some((_, Some(addr))) = self.cur.take() {
            self.push(Ev::Acquire(addr))?;
        }
        Ok(())
    }

    /// Ends the open block.
    fn close_block(&mut self) -> Sent {
        self.end_insn()?;
        self.open = false;
        Ok(())
    }

    /// Sends what is left.
    pub fn finish_feed(&mut self) -> Sent {
        self.close_block()?;
        self.lower.flush(&mut self.batch);
        let b = std::mem::take(&mut self.batch);
        if !b.is_empty() {
            (self.out)(b)?;
        }
        Ok(())
    }
}

impl<'f, L: Lower, F: FnMut(Vec<L::Item>) -> Sent> Feed<'f, L, F> {
    /// Block `id` at `addr` is entered, to run `executed` instructions (`interrupted`: a
    /// signal stops it at the last). Inlined into the run's loop: as a call, saving and
    /// restoring its registers was nearly a third of its instructions.
    #[inline(always)]
    fn on_block(&mut self, id: Option<u32>, addr: u64, executed: u32, interrupted: bool) -> Sent {
        self.close_block()?;
        let facts: &'f Facts = self.facts;
        match (id, facts.block(id)) {
            (Some(id), Some((b, insns))) if b.planned => {
                if let Some(tr) = self.flow.block(&facts.exits, id, !interrupted && executed >= b.len) {
                    self.push(Ev::Flow(tr))?;
                }
                self.insns = insns;
                self.quick = (b.plain || b.runtime).then_some((id, b.runtime));
            }
            _ => {
                self.flow.break_flow();
                self.insns = &[];
                self.quick = None;
            }
        }
        self.lower.enter(addr, &mut self.batch);
        self.sent()?;
        self.open = true;
        self.last_place = 0;
        Ok(())
    }

    fn on_refs(&mut self, refs: &[MemEvent]) -> Sent {
        if !self.open {
            for r in refs {
                self.access(r, 0)?;
            }
            return Ok(());
        }
        let Some((id, runtime)) = self.quick else {
            return refs.iter().try_for_each(|r| self.one_ref(r));
        };
        // A plain or runtime block's references that add nothing to the batch are taken
        // together, each of the others as it comes. (No instruction of the block is an
        // atomic, so the one under way has nothing to release or acquire.)
        let mut rest = refs;
        while !rest.is_empty() {
            let n = self.take_quiet(id, runtime, rest);
            let Some((r, tail)) = rest[n..].split_first() else { break };
            self.one_ref(r)?;
            rest = tail;
        }
        Ok(())
    }

    /// Takes the longest prefix of `refs` (of plain or runtime block `id`) that adds
    /// nothing to the batch ([`Lower::quiet`]), its last instruction becoming the one under
    /// way, and answers its length.
    #[inline(always)]
    fn take_quiet(&mut self, id: u32, runtime: bool, refs: &[MemEvent]) -> usize {
        let n = self.lower.quiet(id, runtime, self.insns, refs);
        if let Some(last) = refs[..n].last() {
            self.cur = Some((last.insn, None));
            self.released = false;
        }
        n
    }

    /// [`on_refs`](Self::on_refs) of the references of a block just entered: those of a
    /// plain or runtime block that add nothing to the batch (nearly all) are taken here,
    /// in the run's loop, and only the rest go through the call.
    #[inline(always)]
    fn run_refs(&mut self, refs: &[MemEvent]) -> Sent {
        let Some((id, runtime)) = self.quick else {
            return self.on_refs(refs);
        };
        // (The rest begins with a reference the quiet path does not take, which `on_refs`
        // asks it about again: a few blocks in a hundred.)
        let n = self.take_quiet(id, runtime, refs);
        match refs.get(n..) {
            Some([]) | None => Ok(()),
            Some(rest) => self.on_refs(rest),
        }
    }

    #[inline]
    fn one_ref(&mut self, r: &MemEvent) -> Sent {
        let f = self.insns.get(r.insn as usize).map_or(0, |f| f.flags);
        if self.cur.map(|c| c.0) != Some(r.insn) {
            self.end_insn()?;
            // The runtime's own atomics (its internal locks) order its internals, not
            // the program: they make no release or acquire.
            let atomic = class_of(f) == Class::Atomic;
            self.cur = Some((r.insn, atomic.then_some(r.addr)));
            self.released = false;
        }
        self.access(r, f)
    }

    fn on_marker(&mut self, m: Marker) -> Sent {
        let place = match m {
            Marker::Sync { insn: Some(_), .. } | Marker::Syscall { .. } | Marker::SyscallReturn { .. } => m.place(),
            Marker::Descriptors(_) | Marker::Kernel { .. } => Some(self.last_place),
            Marker::Call { .. } => Some(self.last_place),
            Marker::Return { .. } => Some(u32::MAX),
            _ => None,
        };
        self.release_insn()?;
        match place {
            Some(p) if self.open => {
                self.last_place = p;
                // Right after the instruction under way (a system call's return, an
                // atomic's second stamp): before its acquire; anywhere later: after it.
                if self.cur.is_some_and(|(k, _)| p != 2 * k as u32 + 1) {
                    self.end_insn()?;
                }
            }
            _ => self.close_block()?,
        }
        if matches!(m, Marker::Signal(_) | Marker::SignalReturn | Marker::ThreadStart | Marker::ThreadEnd) {
            self.flow.break_flow();
        }
        match self.marker_ev(m) {
            Some(e) => self.push(e),
            None => Ok(()),
        }
    }
}

impl<L: Lower, F: FnMut(Vec<L::Item>) -> Sent> Sink for Feed<'_, L, F> {
    type Error = RecoverError;

    fn block(&mut self, b: &BlockEvent) -> Result<bool, RecoverError> {
        Ok(self.on_block(b.id, b.addr, b.executed, b.interrupted).is_ok())
    }

    fn run(&mut self, run: &Run) -> Result<bool, RecoverError> {
        // (Without the plan each block's event would look up: the facts hold what is used.)
        for (b, refs) in run.records() {
            if self.on_block(Some(b.id), b.addr, b.executed as u32, false).is_err() || (!refs.is_empty() && self.run_refs(refs).is_err()) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn refs(&mut self, _: &BlockEvent, refs: &[MemEvent]) -> Result<bool, RecoverError> {
        Ok(self.on_refs(refs).is_ok())
    }

    fn marker(&mut self, _: u32, m: Marker) -> Result<bool, RecoverError> {
        Ok(self.on_marker(m).is_ok())
    }

    fn finish(&mut self) -> Result<(), RecoverError> {
        // (A receiver gone has failed, and reports why.)
        let _ = self.finish_feed();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::races::local::{Known, Owner};
    use dep_profile::calls::Func;

    fn mem(insn: u16, addr: u64) -> MemEvent {
        MemEvent { pc: 0x1000 + insn as u64, addr, size: 1, access: Access::Write, conditional: false, insn }
    }

    /// The thread's view, with its quiet path and its way of entering blocks (`quick`), or
    /// with every event through [`Lower::lower`]; counts the references the quiet path
    /// takes.
    struct Lowering<'k> {
        local: Local<'k>,
        quick: bool,
        taken: usize,
        /// Of them, in the runtime's blocks, and of those, to pages not the thread's own
        /// (0x20, 0x40): skipped, the runtime's called by the runtime.
        taken_runtime: usize,
        taken_skipped: usize,
    }

    impl<'k> Lowering<'k> {
        /// Thread 0's view, with its quick paths where `quick`.
        fn new(known: &'k Known, quick: bool) -> Self {
            Lowering { local: Local::new(known, 0), quick, taken: 0, taken_runtime: 0, taken_skipped: 0 }
        }
    }

    impl Lower for Lowering<'_> {
        type Item = Act;
        fn lower(&mut self, e: Ev, out: &mut Vec<Act>) {
            self.local.lower(e, out)
        }
        fn flush(&mut self, out: &mut Vec<Act>) {
            self.local.flush(out)
        }
        fn enter(&mut self, addr: u64, out: &mut Vec<Act>) {
            match self.quick {
                true => self.local.enter(addr, out),
                false => self.local.lower(Ev::Block { addr }, out),
            }
        }
        fn quiet(&mut self, block: u32, runtime: bool, insns: &[InsnFacts], refs: &[MemEvent]) -> usize {
            let n = if self.quick { self.local.quiet(block, runtime, insns, refs) } else { 0 };
            self.taken += n;
            if runtime {
                self.taken_runtime += n;
                self.taken_skipped += refs[..n].iter().filter(|r| matches!(r.addr >> 12, 0x20 | 0x40)).count();
            }
            n
        }
    }

    /// The references a plain or runtime block's quiet path takes together are exactly
    /// those the thread's view would take as quiet or skipped one by one: random runs of
    /// one thread through calls and returns (callers change, the runtime's code is called
    /// by the program and by the runtime), watched library calls, the kernel's accesses,
    /// sync records, stack growth, and pages of its own, shared, another thread's or
    /// holding an atomic location, with accesses across pages, give the engine the same
    /// events with the quiet path and without it.
    #[test]
    fn quiet_path_gives_the_events_of_one_by_one() {
        use crate::program::calls::Exit;
        use dep_profile::{Machine, Semantics};
        use dep_recover::events::RunBlock;
        let mut sem = Semantics::new(Machine::x86_64(0));
        let code: [(u64, &[u8]); 7] = [
            // mov rax,[rbx]; mov [rcx],rax; push rax; pop rax; mov eax,[rbx+8];
            // add [rcx+16],al; rep movsb; call
            (0x1000, &[0x48, 0x8b, 0x03, 0x48, 0x89, 0x01, 0x50, 0x58, 0x8b, 0x43, 0x08, 0x00, 0x41, 0x10, 0xf3, 0xa4, 0xe8, 0, 0, 0, 0]),
            // mov rax,[rbx]; mov [rcx],rax; mov rax,fs:[0x10]; ret
            (0x2000, &[0x48, 0x8b, 0x03, 0x48, 0x89, 0x01, 0x64, 0x48, 0x8b, 0x04, 0x25, 0x10, 0, 0, 0, 0xc3]),
            // lock xadd [rbx],eax; mov [rcx],rax
            (0x3000, &[0xf0, 0x0f, 0xc1, 0x03, 0x48, 0x89, 0x01]),
            // (where the call returns) mov rax,[rbx]; mov [rcx],rax
            (0x1015, &[0x48, 0x8b, 0x03, 0x48, 0x89, 0x01]),
            // The C runtime's code: mov rax,[rbx]; mov [rcx],rax; push rax; pop rax;
            // rep movsb; call
            (0x5000, &[0x48, 0x8b, 0x03, 0x48, 0x89, 0x01, 0x50, 0x58, 0xf3, 0xa4, 0xe8, 0, 0, 0, 0]),
            // mov rax,[rbx]; mov [rcx],rax; ret
            (0x6000, &[0x48, 0x8b, 0x03, 0x48, 0x89, 0x01, 0xc3]),
            // (where its call returns) mov rax,[rbx]; mov [rcx],rax
            (0x500f, &[0x48, 0x8b, 0x03, 0x48, 0x89, 0x01]),
        ];
        let plans: Vec<BlockPlan> = code.iter().map(|&(pc, bytes)| BlockPlan::build(&mut sem, pc, bytes, None).unwrap()).collect();
        let exits = BlockExits {
            exit: vec![
                Exit::Call { site: 0x1010, ret: 0x1015 },
                Exit::Return,
                Exit::Other,
                Exit::Other,
                Exit::Call { site: 0x500a, ret: 0x500f },
                Exit::Return,
                Exit::Other,
            ],
            entry: vec![true, true, false, false, true, true, false],
            func: vec![0, 1, 0, 0, 2, 3, 2],
            plt: vec![false; 7],
            binder: vec![false; 7],
            addr: code.iter().map(|c| c.0).collect(),
            names: Vec::new(),
            kind: Vec::new(),
        }
        .with_kinds();
        let runtime = 0x5000..0x7000;
        let code_at = |pc: u64| if runtime.contains(&pc) { Code::Runtime } else { Code::Program };
        let facts = Facts::of(plans.iter().map(|p| Some(Facts::of_plan(p, &code_at))), exits);
        assert_eq!(facts.blocks.iter().map(|b| b.plain).collect::<Vec<_>>(), [true, true, false, true, false, false, false]);
        assert_eq!(facts.blocks.iter().map(|b| b.runtime).collect::<Vec<_>>(), [false, false, false, false, true, true, true]);
        // Pages 0x10, 0x11 and the stack's 0x7f are thread 0's own; 0x30 is its too but
        // holds an atomic location; 0x20 is shared, 0x40 thread 1's.
        let owners = [(0x10, 0), (0x11, 0), (0x30, 0), (0x7f, 0), (0x40, 1)].into_iter().map(|(p, t)| (p, Owner::Thread(t))).collect();
        let known = Known::new([(0x30040, 0xff)].into_iter().collect(), vec![(runtime.start, runtime.end)]).with_owners(owners);
        let (mut fast, mut all, mut fast_runtime, mut fast_skipped) = (0, 0, 0, 0);
        for seed in 1..=200u64 {
            let mut rand = crate::races::xorshift(seed);
            let mut one = Vec::new();
            let mut quick = Vec::new();
            let mut a = Feed::new(&facts, Lowering::new(&known, false), |b| {
                one.extend(b.into_iter().map(|e| format!("{e:?}")));
                Ok(())
            });
            let mut b = Feed::new(&facts, Lowering::new(&known, true), |b| {
                quick.extend(b.into_iter().map(|e| format!("{e:?}")));
                Ok(())
            });
            // Blocks taken together as a run (recovery's compiled blocks), given to both
            // feeds at once before the next block taken alone.
            let (mut run, mut run_refs) = (Vec::new(), Vec::new());
            let no_plans = Plans::default();
            let flush = |a: &mut Feed<_, _>, b: &mut Feed<_, _>, run: &mut Vec<RunBlock>, refs: &mut Vec<MemEvent>| {
                if !run.is_empty() {
                    assert!(a.run(&Run::new(0, run, refs, &no_plans)).unwrap());
                    assert!(b.run(&Run::new(0, run, refs, &no_plans)).unwrap());
                    run.clear();
                    refs.clear();
                }
            };
            for step in 0..200 {
                // (The runtime's blocks called by the program or by the runtime.)
                let id = [0, 0, 1, 1, 2, 3, 3, 4, 4, 5, 5, 6][rand(12) as usize];
                let plan = &plans[id];
                let block = BlockEvent {
                    thread: 0,
                    addr: plan.addr,
                    version: 0,
                    id: Some(id as u32),
                    plan: Some(plan),
                    executed: plan.insns.len() as u32,
                    interrupted: false,
                };
                let in_run = rand(2) == 0;
                if !in_run {
                    flush(&mut a, &mut b, &mut run, &mut run_refs);
                    a.block(&block).unwrap();
                    b.block(&block).unwrap();
                }
                let mut refs = Vec::new();
                for (k, insn) in plan.insns.iter().enumerate() {
                    let times = if insn.refs.len() == 2
                        && insn.refs[0].size == 1
                        && insn.refs[1].size == 1
                        && [0x100e, 0x5008].contains(&insn.pc)
                    {
                        rand(3)
                    } else {
                        1
                    };
                    for _ in 0..times {
                        for r in &insn.refs {
                            // The stack deepens as the run goes on.
                            let addr = if facts.block(Some(id as u32)).unwrap().1[k].stack {
                                0x7f800 - 8 * (1 + rand(step / 4 + 1))
                            } else {
                                let page = [0x10, 0x10, 0x11, 0x11, 0x20, 0x30, 0x40, 0x7f][rand(8) as usize];
                                let off = if rand(8) == 0 { 0xffc } else { rand(0x80) * 4 };
                                page << 12 | off
                            };
                            // Now and then of another size or pc than the instruction's
                            // (the site is another).
                            let size = if rand(16) == 0 { r.size * 2 } else { r.size };
                            let pc = if rand(32) == 0 { insn.pc + 1 } else { insn.pc };
                            refs.push(MemEvent { pc, addr, size, access: r.access, conditional: false, insn: k as u16 });
                        }
                    }
                }
                if in_run {
                    run.push(RunBlock { addr: plan.addr, id: id as u32, executed: plan.insns.len() as u16, refs: refs.len() as u16 });
                    run_refs.extend(refs);
                    continue;
                }
                // In up to three parts, with markers between.
                let cut = [rand(refs.len() as u64 + 1) as usize, rand(refs.len() as u64 + 1) as usize];
                let (lo, hi) = (cut[0].min(cut[1]), cut[0].max(cut[1]));
                for (i, part) in [&refs[..lo], &refs[lo..hi], &refs[hi..]].into_iter().enumerate() {
                    a.refs(&block, part).unwrap();
                    b.refs(&block, part).unwrap();
                    let last = part.last().map_or(0, |r| r.insn);
                    let m = match rand(12) {
                        // A library call returning to the atomic block, and its return.
                        0 => Some(Marker::Call { func: Func::Malloc as u16, args: [64, 0], ret: 0x3000 }),
                        1 => Some(Marker::Return { func: Func::Malloc as u16, value: 0x10100 }),
                        2 => Some(Marker::Kernel {
                            insn: last,
                            pc: plan.insns[last as usize].pc,
                            addr: 0x10ff0 + rand(2) * 0x10000,
                            size: 32,
                            write: rand(2) == 0,
                        }),
                        3 if i == 2 => Some(Marker::Sync { seq: seed, insn: None, after: false }),
                        _ => None,
                    };
                    if let Some(m) = m {
                        a.marker(0, m).unwrap();
                        b.marker(0, m).unwrap();
                    }
                }
            }
            flush(&mut a, &mut b, &mut run, &mut run_refs);
            a.finish_feed().unwrap();
            b.finish_feed().unwrap();
            fast += b.lower.taken;
            fast_runtime += b.lower.taken_runtime;
            fast_skipped += b.lower.taken_skipped;
            drop((a, b));
            all += one.iter().filter(|e| e.starts_with("Access")).count()
                + one
                    .iter()
                    .filter_map(|e| e.strip_prefix("Quiet("))
                    .map(|n| n.trim_end_matches(')').parse::<usize>().unwrap())
                    .sum::<usize>();
            assert_eq!(one, quick, "seed {seed}");
        }
        // The quiet path took a good share of what the thread's view took as quiet or sent.
        assert!(fast * 5 > all, "{fast} of {all} references taken together");
        assert!(fast_runtime * 20 > fast, "{fast_runtime} of the runtime's references taken together, of {fast}");
        assert!(fast_skipped * 20 > fast_runtime, "{fast_skipped} of the runtime's {fast_runtime} references taken together skipped");
    }

    /// A block's events go out as they come (a rep string of a million references is never
    /// held whole), in the order the analysis needs: an atomic's release right after its
    /// references, its acquire after the record right after it.
    #[test]
    fn a_block_streams_in_order() {
        // Block 0: instruction 0 a rep string, 1 an atomic, 2 a plain store.
        let insn = |flags| InsnFacts { flags, ..Default::default() };
        let facts = Facts::of([Some(vec![insn(0), insn(ATOMIC), insn(0)])].into_iter(), BlockExits::default());
        let mut sent: Vec<Vec<Ev>> = Vec::new();
        let out = std::cell::Cell::new(0usize);
        let mut feed = Feed::new(&facts, AsIs, |b| {
            out.set(out.get() + b.len());
            sent.push(b);
            Ok(())
        });
        let block = BlockEvent { thread: 0, addr: 0x1000, version: 0, id: Some(0), plan: None, executed: 3, interrupted: false };
        assert!(feed.block(&block).unwrap());
        let rep: Vec<MemEvent> = (0..4096).map(|i| mem(0, 0x10_0000 + i)).collect();
        for _ in 0..256 {
            assert!(feed.refs(&block, &rep).unwrap());
        }
        // Sent while the block is still open: all but the last batch.
        let streamed = out.get();
        feed.marker(0, Marker::Sync { seq: 7, insn: Some(1), after: false }).unwrap();
        feed.refs(&block, &[mem(1, 0x9000)]).unwrap();
        feed.marker(0, Marker::Sync { seq: 8, insn: Some(1), after: true }).unwrap();
        feed.refs(&block, &[mem(2, 0x9100)]).unwrap();
        feed.finish_feed().unwrap();
        drop(feed);
        assert!(streamed + BATCH > 1 << 20, "{streamed} of the block's 2^20 events sent while it was open");
        let evs: Vec<Ev> = sent.into_iter().flatten().collect();
        assert_eq!(evs.len(), 1 + (1 << 20) + 6);
        let tail: Vec<String> = evs[evs.len() - 7..].iter().map(|e| format!("{e:?}")).collect();
        let want = [
            "Sync(7)",
            "Access { pc: 4097, addr: 36864, size: 1, write: true, class: Atomic }",
            "Release(36864)",
            "Sync(8)",
            "Acquire(36864)",
            "Access { pc: 4098, addr: 37120, size: 1, write: true, class: Plain }",
        ];
        assert_eq!(tail[1..], want, "{tail:?}");
    }
}
