//! One thread's recovered stream turned into what the race analysis reads: accesses
//! classified, each sync record placed between the references of the instructions it
//! separates, and each atomic instruction bracketed by the release before it and the
//! acquire after it.

use dep_profile::semantics::{Access, Insn};
use dep_profile::Reg;
use dep_recover::events::{BlockEvent, Marker, MemEvent};
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
    /// Per block id: flags per instruction.
    blocks: Vec<Box<[u8]>>,
    /// How each block leaves: calls and returns.
    exits: BlockExits,
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
        let blocks = (0..blocks as u32)
            .map(|id| match plans.get_plan(id) {
                Some(p) => {
                    let extra = match p.insns.first().map(|i| code(i.pc)) {
                        Some(Code::Linker) => LINKER,
                        Some(Code::Runtime) => RUNTIME,
                        _ => 0,
                    };
                    p.insns.iter().map(|i| insn_flags(i) | extra).collect()
                }
                None => Box::default(),
            })
            .collect();
        Facts { blocks, exits }
    }

    fn flags(&self, id: Option<u32>) -> &[u8] {
        id.and_then(|id| self.blocks.get(id as usize)).map_or(&[], |f| &f[..])
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
    /// The open block's instruction flags.
    flags: &'f [u8],
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
}

/// What handing events on comes to: `Err(Gone)` when the receiver is gone (it failed, and
/// reports why).
pub type Sent = Result<(), Gone>;

/// The receiver of a feed's batches is gone.
#[derive(Debug)]
pub struct Gone;

const BATCH: usize = 4096;

impl<'f, L: Lower, F: FnMut(Vec<L::Item>) -> Sent> Feed<'f, L, F> {
    /// A feed putting its events into batches through `lower`, and sending them to `out`.
    pub fn new(facts: &'f Facts, lower: L, out: F) -> Self {
        Feed {
            facts,
            lower,
            out,
            batch: Vec::with_capacity(BATCH),
            flags: &[],
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
    #[inline]
    fn sent(&mut self) -> Sent {
        if self.batch.len() >= BATCH {
            self.lower.flush(&mut self.batch);
            let b = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
            (self.out)(b)?;
        }
        Ok(())
    }

    fn marker_ev(&mut self, m: Marker) -> Option<Ev> {
        match m {
            Marker::Syscall { nr, args, .. } => Some(Ev::Syscall { nr, args }),
            Marker::SyscallReturn { value, .. } => Some(Ev::SyscallReturn { value }),
            Marker::Descriptors(fds) => Some(Ev::Descriptors(fds)),
            // The kernel's accesses, of the system call instruction's class.
            Marker::Kernel { insn, pc, addr, size, write } => {
                let flags = self.flags.get(insn as usize).copied().unwrap_or(0);
                Some(Ev::Kernel { pc, addr, size, write, class: Self::class(flags) })
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

    /// What an access of an instruction with `flags` is.
    fn class(flags: u8) -> Class {
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

    #[inline]
    fn access(&mut self, r: &MemEvent, flags: u8) -> Sent {
        let class = Self::class(flags);
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

impl<L: Lower, F: FnMut(Vec<L::Item>) -> Sent> Feed<'_, L, F> {
    fn on_block(&mut self, b: &BlockEvent) -> Sent {
        self.close_block()?;
        let flags = self.facts.flags(b.id);
        let planned = b.plan.map(|p| (b.id, p.insns.len() as u32));
        match planned {
            Some((Some(id), n)) => {
                if let Some(tr) = self.flow.block(&self.facts.exits, id, !b.interrupted && b.executed >= n) {
                    self.push(Ev::Flow(tr))?;
                }
            }
            _ => self.flow.break_flow(),
        }
        self.push(Ev::Block { addr: b.addr })?;
        self.flags = flags;
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
        for r in refs {
            let f = self.flags.get(r.insn as usize).copied().unwrap_or(0);
            if self.cur.map(|c| c.0) != Some(r.insn) {
                self.end_insn()?;
                // The runtime's own atomics (its internal locks) order its internals, not
                // the program: they make no release or acquire.
                let atomic = Self::class(f) == Class::Atomic;
                self.cur = Some((r.insn, atomic.then_some(r.addr)));
                self.released = false;
            }
            self.access(r, f)?;
        }
        Ok(())
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
        Ok(self.on_block(b).is_ok())
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

    fn mem(insn: u16, addr: u64) -> MemEvent {
        MemEvent { pc: 0x1000 + insn as u64, addr, size: 1, access: Access::Write, conditional: false, insn }
    }

    /// A block's events go out as they come (a rep string of a million references is never
    /// held whole), in the order the analysis needs: an atomic's release right after its
    /// references, its acquire after the record right after it.
    #[test]
    fn a_block_streams_in_order() {
        // Block 0: instruction 0 a rep string, 1 an atomic, 2 a plain store.
        let facts = Facts { blocks: vec![vec![0, ATOMIC, 0].into_boxed_slice()], exits: BlockExits::default() };
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
