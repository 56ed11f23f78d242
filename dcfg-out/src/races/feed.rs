//! One thread's recovered stream turned into what the race analysis reads: accesses
//! classified, each sync record placed between the references of the instructions it
//! separates, and each atomic instruction bracketed by the release before it and the
//! acquire after it.

use dep_profile::semantics::{Access, Insn};
use dep_profile::Reg;
use dep_recover::events::{BlockEvent, Marker, MemEvent, Sink, SinkResult};
use dep_recover::plans::Plans;

/// What an access is to the analysis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// An ordinary access: checked.
    Plain,
    /// A locked instruction's: synchronisation, never a race.
    Atomic,
    /// Through the FS or GS segment: thread-local storage, private to its thread.
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
    /// A block begins; `call_ret` is the return address if it ends with a call, else 0.
    Block {
        addr: u64,
        call_ret: u64,
    },
    Access {
        pc: u64,
        addr: u64,
        size: u32,
        write: bool,
        class: Class,
    },
    /// A sync record: the thread's point number `seq` in the process-wide order.
    Sync(u64),
    /// An atomic instruction on the location at `addr` is about to run (its release side).
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
    /// Per block id: flags per instruction, and the return address if it ends with a call.
    blocks: Vec<(Box<[u8]>, u64)>,
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
    /// The facts of every block `plans` can decode; `code` says whose code is at an address.
    pub fn new(plans: &Plans, blocks: usize, code: &dyn Fn(u64) -> Code) -> Facts {
        use dep_profile::semantics::Flow;
        let blocks = (0..blocks as u32)
            .map(|id| match plans.get_plan(id) {
                Some(p) => {
                    let extra = match p.insns.first().map(|i| code(i.pc)) {
                        Some(Code::Linker) => LINKER,
                        Some(Code::Runtime) => RUNTIME,
                        _ => 0,
                    };
                    let flags: Box<[u8]> = p.insns.iter().map(|i| insn_flags(i) | extra).collect();
                    let ret = match p.insns.last() {
                        Some(l) if matches!(l.flow, Flow::Call { .. } | Flow::IndirectCall) => l.pc + l.len as u64,
                        _ => 0,
                    };
                    (flags, ret)
                }
                None => (Box::default(), 0),
            })
            .collect();
        Facts { blocks }
    }

    fn flags(&self, id: Option<u32>) -> (&[u8], u64) {
        id.and_then(|id| self.blocks.get(id as usize)).map_or((&[], 0), |(f, r)| (&f[..], *r))
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

/// A sink for one thread's recovery that hands [`Ev`]s to `out` in batches.
pub struct Feed<'f, F: FnMut(Vec<Ev>) -> SinkResult> {
    facts: &'f Facts,
    out: F,
    batch: Vec<Ev>,
    /// The block being gathered: its flags, references and the records of its instructions.
    flags: &'f [u8],
    refs: Vec<MemEvent>,
    marks: Vec<Marker>,
    open: bool,
}

const BATCH: usize = 4096;

impl<'f, F: FnMut(Vec<Ev>) -> SinkResult> Feed<'f, F> {
    /// A feed sending batches to `out`.
    pub fn new(facts: &'f Facts, out: F) -> Self {
        Feed { facts, out, batch: Vec::with_capacity(BATCH), flags: &[], refs: Vec::new(), marks: Vec::new(), open: false }
    }

    fn push(&mut self, e: Ev) -> SinkResult {
        self.batch.push(e);
        if self.batch.len() >= BATCH {
            let b = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
            (self.out)(b)?;
        }
        Ok(())
    }

    fn marker_ev(m: Marker) -> Option<Ev> {
        match m {
            Marker::Sync { seq, .. } => Some(Ev::Sync(seq)),
            Marker::Call { func, args, ret } => Some(Ev::Call { func, args, ret }),
            Marker::Return { func, value } => Some(Ev::Return { func, value }),
            Marker::ThreadStart => Some(Ev::Start),
            Marker::ThreadEnd => Some(Ev::End),
            Marker::Signal(_) | Marker::SignalReturn | Marker::ChunkStart(_) => None,
        }
    }

    fn access(&mut self, r: &MemEvent, flags: u8) -> SinkResult {
        let class = if flags & ATOMIC != 0 {
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
        };
        self.push(Ev::Access { pc: r.pc, addr: r.addr, size: r.size, write: r.access == Access::Write, class })
    }

    /// Sends the gathered block: each instruction's records before its references (or
    /// after them, for a system call's return and an atomic's second stamp), and an atomic
    /// instruction's references between its release and its acquire.
    fn close_block(&mut self) -> SinkResult {
        if !std::mem::take(&mut self.open) {
            return Ok(());
        }
        let refs = std::mem::take(&mut self.refs);
        let mut marks = std::mem::take(&mut self.marks);
        // Where each record goes (Marker::place); a call record right after the sync
        // record it follows; a return, and records at no instruction, at the end.
        let mut placed: Vec<(u32, Marker)> = Vec::with_capacity(marks.len());
        let mut last = 0u32;
        for m in marks.drain(..) {
            let p = match m {
                Marker::Call { .. } => last,
                _ => m.place().unwrap_or(u32::MAX),
            };
            last = p;
            placed.push((p, m));
        }
        placed.sort_by_key(|&(p, _)| p);
        let flags = self.flags;
        let (mut i, mut j) = (0usize, 0usize);
        while i < refs.len() {
            let k = refs[i].insn as u32;
            while j < placed.len() && placed[j].0 <= 2 * k {
                if let Some(e) = Self::marker_ev(placed[j].1) {
                    self.push(e)?;
                }
                j += 1;
            }
            let end = i + refs[i..].iter().take_while(|r| r.insn as u32 == k).count();
            let f = flags.get(k as usize).copied().unwrap_or(0);
            // The runtime's own atomics (its internal locks) order its internals, not the
            // program: they make no release or acquire.
            let atomic = f & ATOMIC != 0 && f & (RUNTIME | LINKER) == 0;
            if atomic {
                self.push(Ev::Release(refs[i].addr))?;
            }
            for r in &refs[i..end] {
                self.access(r, f)?;
            }
            while j < placed.len() && placed[j].0 == 2 * k + 1 {
                if let Some(e) = Self::marker_ev(placed[j].1) {
                    self.push(e)?;
                }
                j += 1;
            }
            if atomic {
                self.push(Ev::Acquire(refs[i].addr))?;
            }
            i = end;
        }
        for &(_, m) in &placed[j..] {
            if let Some(e) = Self::marker_ev(m) {
                self.push(e)?;
            }
        }
        self.refs = refs;
        self.marks = marks;
        self.refs.clear();
        Ok(())
    }

    /// Sends what is left.
    pub fn finish_feed(&mut self) -> SinkResult {
        self.close_block()?;
        let b = std::mem::take(&mut self.batch);
        if !b.is_empty() {
            (self.out)(b)?;
        }
        Ok(())
    }
}

impl<F: FnMut(Vec<Ev>) -> SinkResult> Sink for Feed<'_, F> {
    fn block(&mut self, b: &BlockEvent) -> SinkResult {
        self.close_block()?;
        let (flags, call_ret) = self.facts.flags(b.id);
        self.push(Ev::Block { addr: b.addr, call_ret: if b.interrupted { 0 } else { call_ret } })?;
        self.flags = flags;
        self.open = true;
        Ok(())
    }

    fn refs(&mut self, refs: &[MemEvent]) -> SinkResult {
        if self.open {
            self.refs.extend_from_slice(refs);
            return Ok(());
        }
        for r in refs {
            self.access(r, 0)?;
        }
        Ok(())
    }

    fn marker(&mut self, _: u32, m: Marker) -> SinkResult {
        match m {
            Marker::Sync { insn: Some(_), .. } | Marker::Call { .. } | Marker::Return { .. } if self.open => {
                self.marks.push(m);
                Ok(())
            }
            _ => {
                self.close_block()?;
                match Self::marker_ev(m) {
                    Some(e) => self.push(e),
                    None => Ok(()),
                }
            }
        }
    }
}
