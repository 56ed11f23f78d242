//! The block table pre-decoded once into plans (paper section 6.2's pre-decoding).

use crate::flat::FlatPlans;
use dep_profile::blocks::BlockError;
use dep_profile::container::Profile;
use dep_profile::{BlockPlan, Semantics};
use rustc_hash::FxHashMap;

/// How recovery runs plain blocks (those without a rep string or gather).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// The interpreted walk (traverse.rs), which defines recovery.
    Walk,
    /// Compiled to x86-64 code (64-bit profiles on x86-64 hosts), with `popcnt` where the
    /// CPU has it.
    Compiled,
    /// Compiled, never using `popcnt`: the code a CPU without it runs, testable on any.
    CompiledWithoutPopcnt,
}

impl Engine {
    /// Compiled where `compiled` is true, the walk otherwise.
    pub fn of(compiled: bool) -> Engine {
        if compiled {
            Engine::Compiled
        } else {
            Engine::Walk
        }
    }
}

/// Every block of a profile, decoded, looked up by address and version. (The default has
/// no blocks: for runs made by hand, whose sinks know their blocks otherwise.)
#[derive(Default)]
pub struct Plans {
    plans: Vec<Result<BlockPlan, BlockError>>,
    index: FxHashMap<(u64, u32), u32>,
    /// The same plans laid out for the recovery loop, indexed alike.
    pub flat: FlatPlans,
    /// How each block leaves, indexed alike: what control-flow analyses look up per block.
    exits: Vec<crate::edges::BlockExit>,
    /// The plain blocks compiled to machine code (64-bit profiles on x86-64 hosts).
    #[cfg(target_arch = "x86_64")]
    pub jit: Option<crate::jit::Jit>,
    /// Blocks that compiled code has recovered so far, over all runs and workers.
    compiled_blocks: std::sync::atomic::AtomicU64,
}

impl Plans {
    /// Decodes the whole block table, on `workers` threads, and compiles its plain blocks
    /// unless `DEP_JIT=0` is set.
    pub fn build(p: &Profile, workers: usize) -> Plans {
        Self::build_with(p, workers, Engine::of(std::env::var_os("DEP_JIT").is_none_or(|v| v != "0")))
    }

    /// [`build`](Self::build) with the given engine (compiled code only for 64-bit
    /// profiles on x86-64 hosts; elsewhere the walk).
    pub fn build_with(p: &Profile, workers: usize, engine: Engine) -> Plans {
        let blocks = p.blocks();
        let machine = p.machine();
        let per = blocks.len().div_ceil(workers.max(1)).max(1);
        let mut plans: Vec<Result<BlockPlan, BlockError>> = Vec::with_capacity(blocks.len());
        let parts: Vec<Vec<Result<BlockPlan, BlockError>>> = crossbeam::thread::scope(|s| {
            let handles: Vec<_> = blocks
                .chunks(per)
                .map(|part| {
                    s.spawn(move |_| {
                        let mut sem = Semantics::new(machine);
                        part.iter().map(|b| BlockPlan::build(&mut sem, b.addr, p.code(b), Some(b.insn_count as usize))).collect()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("decoder thread panicked")).collect()
        })
        .expect("decoder scope panicked");
        for part in parts {
            plans.extend(part);
        }
        let index = blocks.iter().enumerate().map(|(i, b)| ((b.addr, b.version), i as u32)).collect();
        let mut flat = FlatPlans::default();
        for p in &plans {
            flat.push(p.as_ref().ok());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = engine;
        #[cfg(target_arch = "x86_64")]
        let jit = (engine != Engine::Walk && p.width == dep_profile::Width::W64)
            .then(|| {
                let addr = |i: usize| (plans[i].is_ok() && blocks[i].version == 0).then_some(blocks[i].addr);
                let popcnt = engine == Engine::Compiled && std::arch::is_x86_feature_detected!("popcnt");
                let succ = |i: usize| successors(plans[i].as_ref().ok());
                crate::jit::Jit::build(&flat, &addr, &succ, workers, popcnt)
            })
            .flatten();
        let exits = plans.iter().map(|p| crate::edges::exit_of(p.as_ref().ok())).collect();
        Plans {
            plans,
            index,
            flat,
            exits,
            #[cfg(target_arch = "x86_64")]
            jit,
            compiled_blocks: Default::default(),
        }
    }

    /// Blocks that compiled code has recovered so far.
    pub fn compiled_blocks(&self) -> u64 {
        self.compiled_blocks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Counts blocks recovered by compiled code.
    pub(crate) fn count_compiled(&self, n: usize) {
        self.compiled_blocks.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// The index of a block's plan, or why there is none.
    #[inline]
    pub fn find(&self, addr: u64, version: u32) -> Result<u32, PlanMiss<'_>> {
        match self.index.get(&(addr, version)) {
            Some(&i) => match &self.plans[i as usize] {
                Ok(_) => Ok(i),
                Err(e) => Err(PlanMiss::Undecodable(e)),
            },
            None => Err(PlanMiss::NotInTable),
        }
    }

    /// The plan for a block, or why there is none.
    pub fn get(&self, addr: u64, version: u32) -> Result<&BlockPlan, PlanMiss<'_>> {
        self.find(addr, version).map(|i| self.plan(i))
    }

    /// The plan at an index, if there is a decodable one.
    #[inline]
    pub fn get_plan(&self, i: u32) -> Option<&BlockPlan> {
        self.plans.get(i as usize).and_then(|p| p.as_ref().ok())
    }

    /// The plan at an index [`find`](Self::find) returned.
    #[inline]
    pub fn plan(&self, i: u32) -> &BlockPlan {
        self.get_plan(i).expect("find returns decodable blocks only")
    }

    /// How the block at an index leaves (None where it does not decode, or out of range).
    #[inline]
    pub fn exit(&self, i: u32) -> crate::edges::BlockExit {
        self.exits.get(i as usize).copied().flatten()
    }

    pub fn len(&self) -> usize {
        self.plans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.plans.is_empty()
    }
}

/// A small direct-mapped cache in front of [`Plans::get`], one per recovering thread.
pub struct PlanCache {
    slots: Box<[Slot; CACHE_SLOTS]>,
}

/// A cached block: address, code version, index, and whether the plain-block loop may run it.
#[derive(Clone, Copy)]
struct Slot {
    addr: u64,
    version: u32,
    /// The index, or [`NOT_PLAIN`] set in it when the block is at a code version other
    /// than 0 or has a special step.
    id: u32,
}

const CACHE_SLOTS: usize = 4096;
const NOT_PLAIN: u32 = 1 << 31;

impl PlanCache {
    pub fn new() -> Self {
        // No address is out of a profile's reach, so an empty slot holds a key that cannot be
        // found in it: slot i holds address i ^ 1, whose lookups go to slot i ^ 1 (below 4096,
        // an address is its own slot). A hit is therefore always an entry `find` made.
        let mut slots = Box::new([Slot { addr: 0, version: 0, id: 0 }; CACHE_SLOTS]);
        for (i, s) in slots.iter_mut().enumerate() {
            s.addr = (i ^ 1) as u64;
            debug_assert_ne!(Self::slot(s.addr), i);
        }
        PlanCache { slots }
    }

    /// A cached block at code version 0 without special steps.
    #[inline(always)]
    pub fn peek_plain(&self, addr: u64) -> Option<u32> {
        let s = &self.slots[Self::slot(addr)];
        (s.addr == addr && s.id & NOT_PLAIN == 0).then_some(s.id)
    }

    #[inline(always)]
    fn slot(addr: u64) -> usize {
        ((addr ^ (addr >> 12)) as usize) & (CACHE_SLOTS - 1)
    }

    /// Looks up a block's index, first in the cache.
    #[inline(always)]
    pub fn find<'a>(&mut self, plans: &'a Plans, addr: u64, version: u32) -> Result<u32, PlanMiss<'a>> {
        let s = &mut self.slots[Self::slot(addr)];
        if s.addr == addr && s.version == version {
            return Ok(s.id & !NOT_PLAIN);
        }
        let id = plans.find(addr, version)?;
        if id & NOT_PLAIN != 0 {
            // Beyond 2^31 blocks the flag bit is taken: such blocks are looked up every time.
            return Ok(id);
        }
        let plain = version == 0 && !plans.flat.blocks[id as usize].special;
        *s = Slot { addr, version, id: if plain { id } else { id | NOT_PLAIN } };
        Ok(id)
    }
}

impl Default for PlanCache {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a block has no plan.
#[derive(Debug)]
pub enum PlanMiss<'a> {
    NotInTable,
    Undecodable(&'a BlockError),
}

/// Where a block's last instruction can go without a lookup: a conditional branch's
/// fall-through and target, a direct jump's or call's target, the next instruction after
/// a block cut short or a system call (compiled code tests for these first).
#[cfg(target_arch = "x86_64")]
fn successors(plan: Option<&BlockPlan>) -> [Option<u64>; 2] {
    use dep_profile::semantics::Flow;
    let Some(last) = plan.and_then(|p| p.insns.last()) else { return [None, None] };
    let next = last.pc.wrapping_add(last.len as u64);
    match last.flow {
        Flow::Jump { target, conditional: true } => [Some(next), Some(target)],
        Flow::Jump { target, conditional: false } | Flow::Call { target } => [Some(target), None],
        Flow::Next | Flow::Syscall => [Some(next), None],
        _ => [None, None],
    }
}
