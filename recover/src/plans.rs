//! The block table pre-decoded once into plans (paper section 6.2's pre-decoding).

use dep_profile::container::Profile;
use dep_profile::{BlockPlan, Semantics};
use rustc_hash::FxHashMap;

/// Every block of a profile, decoded, looked up by address and version.
pub struct Plans {
    plans: Vec<Result<BlockPlan, String>>,
    index: FxHashMap<(u64, u32), u32>,
}

impl Plans {
    /// Decodes the whole block table, on `workers` threads.
    pub fn build(p: &Profile, workers: usize) -> Plans {
        let blocks = p.blocks();
        let machine = p.machine();
        let per = blocks.len().div_ceil(workers.max(1)).max(1);
        let mut plans: Vec<Result<BlockPlan, String>> = Vec::with_capacity(blocks.len());
        let parts: Vec<Vec<Result<BlockPlan, String>>> = crossbeam::thread::scope(|s| {
            let handles: Vec<_> = blocks
                .chunks(per)
                .map(|part| {
                    s.spawn(move |_| {
                        let mut sem = Semantics::new(machine);
                        part.iter()
                            .map(|b| BlockPlan::build(&mut sem, b.addr, p.code(b), Some(b.insn_count as usize)).map_err(|e| e.to_string()))
                            .collect()
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
        Plans { plans, index }
    }

    /// The plan for a block, or why there is none.
    #[inline]
    pub fn get(&self, addr: u64, version: u32) -> Result<&BlockPlan, PlanMiss<'_>> {
        match self.index.get(&(addr, version)) {
            Some(&i) => self.plans[i as usize].as_ref().map_err(|e| PlanMiss::Undecodable(e)),
            None => Err(PlanMiss::NotInTable),
        }
    }

    pub fn len(&self) -> usize {
        self.plans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.plans.is_empty()
    }
}

/// A small direct-mapped cache in front of [`Plans::get`], one per recovering thread.
pub struct PlanCache<'a> {
    slots: Vec<(u64, u32, Option<&'a BlockPlan>)>,
}

const CACHE_SLOTS: usize = 4096;

impl<'a> PlanCache<'a> {
    pub fn new() -> Self {
        PlanCache { slots: vec![(u64::MAX, 0, None); CACHE_SLOTS] }
    }

    /// Looks up a block, first in the cache.
    #[inline(always)]
    pub fn get(&mut self, plans: &'a Plans, addr: u64, version: u32) -> Result<&'a BlockPlan, PlanMiss<'a>> {
        let i = ((addr ^ (addr >> 12)) as usize) & (CACHE_SLOTS - 1);
        let s = &mut self.slots[i];
        if s.0 == addr && s.1 == version {
            if let Some(p) = s.2 {
                return Ok(p);
            }
        }
        let p = plans.get(addr, version)?;
        *s = (addr, version, Some(p));
        Ok(p)
    }
}

impl Default for PlanCache<'_> {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a block has no plan.
#[derive(Debug)]
pub enum PlanMiss<'a> {
    NotInTable,
    Undecodable(&'a str),
}
