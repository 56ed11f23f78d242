//! The memory half of the dependence engine: the shadow memory and the segments it orders
//! writes by, fed the engine's memory operations in the engine's order, either in the
//! engine's own turn or on a thread of its own beside it.
//!
//! The engine's two halves share nothing but that order: a read's dependences are its
//! bytes' last writers, which only earlier writes decide, and the register and control
//! half never looks at memory. So where no output needs every dependence in the order the
//! engine finds them (the comprehensive trace is kept per use port, and memory reads have
//! ports of their own; `--count` keeps only a number), the shadow works on another core
//! (a third of the engine's time on gzip and `xz -T2` profiles).

use super::handoff::{self, Batcher, Gone};
use super::shadow::{At, Def, Memory, Segment};
use super::store::Feeder;
use std::io;

/// One operation on memory, in the engine's order.
#[derive(Clone, Copy, Debug)]
pub enum MemOp {
    /// Instance `inst` of static instruction `id` reads bytes `addr..addr + size`, at use
    /// port (store segment) `port`.
    Read { addr: u64, size: u32, port: u32, id: u32, inst: u64, at: At },
    /// Instance `def` writes bytes `addr..addr + size`.
    Write { addr: u64, size: u32, def: Def, at: At },
    /// The next segment begins, in thread `thread`.
    Begin { thread: u32 },
    /// Segment `seg` ends at sync record `seq`.
    End { seg: u32, seq: u64 },
}

/// The shadow memory and the segments so far.
pub struct MemHalf {
    mem: Memory,
    segs: Vec<Segment>,
    scratch: Vec<Def>,
}

impl Default for MemHalf {
    fn default() -> Self {
        // Segment 0 is the engine's placeholder before any thread runs.
        MemHalf { mem: Memory::default(), segs: vec![Segment { thread: u32::MAX, end: u64::MAX }], scratch: Vec::with_capacity(64) }
    }
}

impl MemHalf {
    /// Carries out `op`, handing each dependence a read finds to `dep` as (use port,
    /// instance, static id, definition).
    #[inline(always)]
    pub fn apply(&mut self, op: MemOp, dep: &mut impl FnMut(u32, u64, u32, Def) -> io::Result<()>) -> io::Result<()> {
        match op {
            MemOp::Read { addr, size, port, id, inst, at } => {
                self.scratch.clear();
                self.mem.read(addr, size, at, &self.segs, &mut self.scratch);
                for &d in &self.scratch {
                    dep(port, inst, id, d)?;
                }
            }
            MemOp::Write { addr, size, def, at } => self.mem.write(addr, size, def, at, &self.segs),
            MemOp::Begin { thread } => self.segs.push(Segment { thread, end: u64::MAX }),
            MemOp::End { seg, seq } => {
                if let Some(s) = self.segs.get_mut(seg as usize) {
                    s.end = seq;
                }
            }
        }
        Ok(())
    }

    /// Bytes of shadow held.
    pub fn bytes(&self) -> usize {
        self.mem.bytes()
    }
}

/// Operations a batch to the thread holds.
const BATCH: usize = 1 << 12;

/// A [`MemHalf`] on a thread of its own, handed operations in batches: its dependences go
/// to a store's [`Feeder`] (the comprehensive trace), or are only counted.
pub struct Apart {
    ops: Batcher<MemOp>,
    thread: Option<std::thread::JoinHandle<io::Result<Done>>>,
}

/// What the thread leaves: the dependences it found and its peak shadow.
pub struct Done {
    pub deps: u64,
    pub shadow: usize,
}

impl Apart {
    /// Starts the thread, its dependences going to `store` (None: counted only).
    pub fn start(mut store: Option<Feeder>) -> io::Result<Apart> {
        let (ops, batches) = handoff::channel::<MemOp>(BATCH, 8);
        let thread = std::thread::Builder::new().name("wet-memory".into()).spawn(move || -> io::Result<Done> {
            let mut half = MemHalf::default();
            let mut deps = 0u64;
            let mut dep = |port: u32, inst: u64, _id: u32, d: Def| {
                deps += 1;
                match &mut store {
                    Some(s) => s.dep(port, inst, d),
                    None => Ok(()),
                }
            };
            batches.each(|&op| half.apply(op, &mut dep))?;
            if let Some(s) = store {
                s.finish()?;
            }
            Ok(Done { deps, shadow: half.bytes() })
        })?;
        Ok(Apart { ops, thread: Some(thread) })
    }

    /// Hands `op` over.
    #[inline]
    pub fn push(&mut self, op: MemOp) -> io::Result<()> {
        self.ops.push(op).map_err(|Gone| self.failure())
    }

    /// Why the thread stopped taking operations: its error.
    #[cold]
    fn failure(&mut self) -> io::Error {
        self.stop().err().unwrap_or_else(|| io::Error::other("the WET memory thread stopped"))
    }

    fn stop(&mut self) -> io::Result<Done> {
        self.ops.disconnect();
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| io::Error::other("the WET memory thread panicked"))?,
            None => Err(io::Error::other("the WET memory thread stopped")),
        }
    }

    /// Hands over the last operations and waits for the thread's findings (once).
    pub fn finish(&mut self) -> io::Result<Done> {
        match self.ops.close() {
            Ok(()) => self.stop(),
            Err(Gone) => Err(self.failure()),
        }
    }
}

impl Drop for Apart {
    /// Lets the thread end (dropping its store feeder) if `finish` was not reached: the
    /// store's own thread ends only once every feeder has.
    fn drop(&mut self) {
        let _ = self.stop();
    }
}
