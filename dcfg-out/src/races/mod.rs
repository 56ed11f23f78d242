//! Data races (`dep races`), from the profile's order between threads and the lock state
//! its call records give (paper section 6.3, and a hybrid detector beyond it): see
//! [`engine`] for what counts as a race, [`report`] for what is said of one.
//!
//! Two passes over the profile. The first, on all cores, finds the locations locked
//! instructions use (atomics), each thread's sync record numbers, and the pages only one
//! thread touches (an access there cannot race, [`local::Owners`]). The second recovers
//! each thread on a producer of its own, which also works out what needs no other thread
//! ([`local`]: call stacks, watched calls, sites, which accesses are checked), and
//! interleaves the threads' events by their sync records: a thread's events between two records are taken in the order of the record
//! that begins them, so a release is seen before every acquire that follows it in the
//! run. A plain load of an atomic location (an acquire with no record of its own) waits,
//! with what follows it, for the record that ends its stretch (known from the first pass,
//! so nothing is held back in memory), so that every store it may have read is seen first.

pub mod checker;
pub mod clock;
pub mod declared;
pub mod engine;
pub mod feed;
pub mod local;
pub mod report;
pub mod shadow;

use crate::program::calls::BlockExits;
use dep_recover::events::{BlockEvent, Marker, MemEvent};
use dep_recover::{Merge, Run, Sink};
use dep_recover::{RecoverError, Recovery, Source, Turn};
use engine::{Engine, Region};
use feed::{Code, Facts, Feed};
use local::{Act, AtomicBytes, Known, Local, Owners};
use rustc_hash::FxHashMap;

/// Why the analysis could not run.
#[derive(Debug, thiserror::Error)]
pub enum RacesError {
    #[error(transparent)]
    Recover(#[from] RecoverError),
    #[error("the profile has no order between its threads or no lock calls (recorded with --no-sync, or by a dep before format 4): record it again")]
    NoOrder,
    #[error("the profile has {0} threads; the analysis tells at most 65536 apart")]
    TooManyThreads(usize),
    #[error("thread {0} passed 2^32 - 1 synchronisation operations; the analysis numbers them in 32 bits")]
    EpochsExhausted(u32),
    #[error("no variable named {0:?} in the program's modules (a sized data symbol is needed; give ADDR:LEN instead)")]
    NoSuchVariable(String),
}

/// The memory a region check watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegionSpec {
    Range { start: u64, len: u64 },
    Variable(String),
}

impl std::str::FromStr for RegionSpec {
    type Err = String;
    /// `ADDR:LEN` (hexadecimal with 0x, or decimal) or a variable's name.
    fn from_str(s: &str) -> Result<Self, String> {
        let num = |x: &str| match x.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => x.parse().ok(),
        };
        match s.split_once(':') {
            Some((a, l)) if num(a).is_some() => match (num(a), num(l)) {
                (Some(start), Some(len)) if len > 0 => Ok(RegionSpec::Range { start, len }),
                _ => Err(format!("{s:?} is not ADDR:LEN with a length above 0")),
            },
            _ if !s.is_empty() => Ok(RegionSpec::Variable(s.to_string())),
            _ => Err("an empty region".into()),
        }
    }
}

/// What was found.
pub struct Analysis {
    pub races: Vec<engine::Race>,
    pub sites: Vec<engine::Site>,
    pub locksets: Vec<Vec<(u64, bool)>>,
    /// The region checked: (start, end, its name), with its accesses by (thread, site id,
    /// lockset id).
    pub region: Option<(u64, u64, String, engine::RegionAccesses)>,
    pub stats: engine::Stats,
    pub threads: usize,
    pub shadow_bytes: usize,
    /// Seconds the first pass took (atomic locations, sync records, pages' owners).
    pub first_pass_secs: f64,
}

/// Runs the analysis over `rec`'s profile; `region` is resolved against `symbols`.
pub fn analyse(rec: &Recovery, symbols: &crate::program::symbols::Symbolizer, region: Option<&RegionSpec>) -> Result<Analysis, RacesError> {
    let threads = &rec.profile.threads;
    let region = match region {
        None => None,
        Some(RegionSpec::Range { start, len }) => Some((*start, start.saturating_add(*len), format!("{start:#x}:{len}"))),
        Some(RegionSpec::Variable(name)) => {
            let (a, size) = symbols.find_variable(name).ok_or_else(|| RacesError::NoSuchVariable(name.clone()))?;
            Some((a, a + size, name.clone()))
        }
    };
    if threads.len() > 1 << 16 {
        return Err(RacesError::TooManyThreads(threads.len()));
    }
    // Threads with no creator recorded: no sync records (--no-sync), or an older format.
    if threads.len() > 1 && (rec.profile.meta.format_version < 4 || threads[1..].iter().all(|t| t.spawn.is_none())) {
        return Err(RacesError::NoOrder);
    }
    let code = |a: u64| match symbols.object(a) {
        _ if symbols.in_plt(a) => Code::Linker,
        Some((path, _)) if feed::is_dynamic_linker(path) => Code::Linker,
        Some((path, _)) if feed::is_runtime(path) => Code::Runtime,
        _ => Code::Program,
    };
    let started = std::time::Instant::now();
    // One thread has no other to race with: the profile is read whole (and so checked),
    // counting its references, and nothing more is done unless a region's accesses are to
    // be listed.
    if threads.len() == 1 && region.is_none() {
        let refs: u64 = rec.events(Source::Dep).merged(|_| dep_recover::Counts::default())?.iter().map(|c| c.reads + c.writes).sum();
        let first_pass_secs = started.elapsed().as_secs_f64();
        return Ok(Analysis {
            races: Vec::new(),
            sites: Vec::new(),
            locksets: Vec::new(),
            region: None,
            stats: engine::Stats { skipped: refs, ..Default::default() },
            threads: 1,
            shadow_bytes: 0,
            first_pass_secs,
        });
    }
    let FirstPass { atomic, syncs, owners } = first_pass(rec)?;
    let first_pass_secs = started.elapsed().as_secs_f64();
    let facts = Facts::new(&rec.plans, rec.profile.blocks().len(), &code, BlockExits::build(&rec.plans, symbols));
    let spawns: Vec<Option<(u32, u64, u64)>> = threads.iter().map(|t| t.spawn.map(|s| (s.parent, s.seq, s.tls))).collect();
    let runtime: Vec<(u64, u64)> = rec
        .profile
        .modules
        .iter()
        .filter(|m| m.event == dep_profile::container::ModuleEventKind::Load && feed::is_runtime(&m.path))
        .map(|m| (m.base, m.base + m.size))
        .collect();
    // The shadow's checks split by cache line over a shard per core, each on its own thread,
    // beside this one (the order between threads) and the threads' producers.
    let shards = rec.workers().max(1);
    let (engine, found, shadow_bytes) = std::thread::scope(|s| -> Result<_, RacesError> {
        let mut txs = Vec::with_capacity(shards);
        let mut handles = Vec::with_capacity(shards);
        let (spare_tx, spare) = crossbeam::channel::bounded::<checker::Batch>(6 * shards);
        for k in 0..shards {
            let (tx, rx) = crossbeam::channel::bounded::<checker::Batch>(4);
            txs.push(tx);
            let (n, spare_tx) = (threads.len(), spare_tx.clone());
            handles.push(std::thread::Builder::new().name(format!("dep-shard-{k}")).spawn_scoped(s, move || {
                let mut c = checker::Checker::new(k, shards, n);
                for mut b in rx {
                    c.apply(&b);
                    b.clear();
                    let _ = spare_tx.try_send(b);
                }
                c
            }));
        }
        let mut known = Known::new(atomic, runtime).with_owners(owners);
        let mut engine = Engine::new(&spawns).sharded(txs, spare);
        if let Some((start, end, _)) = &region {
            known = known.with_region(*start, *end);
            engine.region = Some(Region { start: *start, end: *end, seen: FxHashMap::default() });
        }
        let run = interleave(rec, &facts, &known, syncs, &mut engine);
        engine.finish();
        let mut found = checker::Races::default();
        let mut bytes = 0;
        for h in handles {
            let c = h.expect("a shard thread starts").join().expect("a race shard panicked");
            bytes += c.shadow_bytes();
            checker::merge(&mut found, c.races);
        }
        run?;
        Ok((engine, found, bytes))
    })?;
    if let Some(thread) = engine.exhausted {
        return Err(RacesError::EpochsExhausted(thread));
    }
    // Most frequent first. Among as frequent, the order is the table's of one shadow
    // memory, which took each race when first seen: the report's grouping keeps the first
    // race of a group, so the table is made again in that order.
    let mut first: Vec<((u32, u32), checker::Found)> = found.into_iter().collect();
    first.sort_by_key(|(_, f)| f.first);
    let table: FxHashMap<(u32, u32), checker::Found> = first.into_iter().collect();
    let mut races: Vec<engine::Race> = table.into_values().map(|f| engine.race_of(f)).collect();
    races.sort_by_key(|r| std::cmp::Reverse(r.count));
    Ok(Analysis {
        races,
        sites: engine.sites,
        locksets: engine.locksets,
        region: region.map(|(s, e, n)| (s, e, n, engine.region.map(|r| r.seen).unwrap_or_default())),
        stats: engine.stats,
        threads: threads.len(),
        shadow_bytes,
        first_pass_secs,
    })
}

/// What the first pass finds.
struct FirstPass {
    /// The granules locked instructions touch, with their bytes.
    atomic: AtomicBytes,
    /// Each thread's sync record numbers, in order.
    syncs: Vec<Vec<u64>>,
    /// The pages whose accesses need no check ([`Owners::owners`]).
    owners: FxHashMap<u64, local::Owner>,
}

/// The first pass: chunks on all cores.
fn first_pass(rec: &Recovery) -> Result<FirstPass, RecoverError> {
    struct Atomics<'a> {
        /// Per block id, which of its instructions are locked, for blocks with any.
        locked: &'a [Option<Box<[bool]>>],
        /// The current block's.
        flags: &'a [bool],
        locs: FxHashMap<u64, u8>,
        syncs: Vec<u64>,
        pages: Owners,
    }
    impl<'a> Atomics<'a> {
        fn new(locked: &'a [Option<Box<[bool]>>]) -> Self {
            Atomics { locked, flags: &[], locs: FxHashMap::default(), syncs: Vec::new(), pages: Owners::default() }
        }
        #[inline]
        fn enter(&mut self, id: Option<u32>) {
            self.flags = id.and_then(|id| self.locked.get(id as usize)).and_then(|f| f.as_deref()).unwrap_or(&[]);
        }
        /// Notes the pages of `refs`, and the granules the current block's locked
        /// instructions touch among them.
        #[inline]
        fn note(&mut self, refs: &[MemEvent]) {
            self.pages.touch_refs(refs);
            self.locks(self.flags, refs);
        }
        /// Notes the granules touched by the references of `refs` whose instruction
        /// `flags` marks locked.
        #[inline]
        fn locks(&mut self, flags: &[bool], refs: &[MemEvent]) {
            if flags.is_empty() {
                return;
            }
            for r in refs {
                if flags.get(r.insn as usize).copied().unwrap_or(false) {
                    for (g, mask) in shadow::granules(r.addr, shadow::access_end(r.addr, r.size.max(1))) {
                        *self.locs.entry(g).or_insert(0) |= mask;
                    }
                }
            }
        }
    }
    impl Sink for Atomics<'_> {
        type Error = RecoverError;

        fn block(&mut self, b: &BlockEvent) -> Result<bool, RecoverError> {
            self.enter(b.id);
            Ok(true)
        }
        fn refs(&mut self, _: &BlockEvent, refs: &[MemEvent]) -> Result<bool, RecoverError> {
            self.note(refs);
            Ok(true)
        }
        fn run(&mut self, run: &Run) -> Result<bool, RecoverError> {
            // Pages are sets, noted in any order: the run's all at once, then the locked
            // accesses of the blocks that have any (few).
            self.pages.touch_refs(run.refs());
            let locked = self.locked;
            for (b, refs) in run.records() {
                if let Some(Some(flags)) = locked.get(b.id as usize) {
                    self.locks(flags, refs);
                }
            }
            // As after each block's own entry: the last block's flags are the current ones.
            if let Some(b) = run.blocks().last() {
                self.enter(Some(b.id));
            }
            Ok(true)
        }
        fn marker(&mut self, _: u32, m: Marker) -> Result<bool, RecoverError> {
            match m {
                Marker::Sync { seq, .. } => self.syncs.push(seq),
                // As much as the second pass checks of it.
                Marker::Kernel { addr, size, write, .. } => {
                    self.pages.touch(addr, shadow::access_end(addr, size.clamp(1, dep_profile::syscalls::SHADOWED)), write)
                }
                // Any argument may be an object the engine checks: the first KiB of a block
                // freed, a lock or condition variable.
                Marker::Call { args, .. } => {
                    for a in [args[0], args[1]] {
                        self.pages.share(a, a.saturating_add(engine::FREE_CHECKED));
                    }
                }
                _ => {}
            }
            Ok(true)
        }
    }
    impl Merge for Atomics<'_> {
        fn merge(&mut self, later: Self) -> Result<bool, RecoverError> {
            for (g, m) in later.locs {
                *self.locs.entry(g).or_insert(0) |= m;
            }
            self.syncs.extend(later.syncs);
            self.pages.merge(later.pages);
            Ok(true)
        }
    }
    let locked: Vec<Option<Box<[bool]>>> = (0..rec.profile.blocks().len() as u32)
        .map(|id| rec.plans.get_plan(id).filter(|p| p.insns.iter().any(|i| i.atomic)).map(|p| p.insns.iter().map(|i| i.atomic).collect()))
        .collect();
    let parts = rec.events(Source::Dep).merged(|_| Atomics::new(&locked))?;
    let mut all = FxHashMap::default();
    let mut syncs = Vec::with_capacity(parts.len());
    let mut pages = Vec::with_capacity(parts.len());
    for p in parts {
        for (g, m) in p.locs {
            *all.entry(g).or_insert(0) |= m;
        }
        syncs.push(p.syncs);
        pages.push(p.pages);
    }
    Ok(FirstPass { atomic: all, syncs, owners: Owners::owners(pages) })
}

/// A small deterministic generator for the analyses' randomised tests (races, WET): each
/// call gives a number below its argument.
#[cfg(test)]
pub(crate) fn xorshift(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    move |n| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    }
}

/// A batch of one thread's events, and how far the interleaving has read it.
struct Stretch {
    acts: Vec<Act>,
    at: usize,
}

/// What the interleaving knows of one thread.
#[derive(Default)]
struct Input {
    /// The thread's sync record numbers, and how many of them were taken.
    syncs: Vec<u64>,
    taken: usize,
    /// The current stretch (between two sync records) was held back already.
    held: bool,
}

impl Input {
    /// The number of the sync record that ends the current stretch (u64::MAX if none does).
    fn next_sync(&self) -> u64 {
        self.syncs.get(self.taken).copied().unwrap_or(u64::MAX)
    }
}

/// Feeds the engine every thread's events, interleaved by their sync records
/// ([`Events::interleaved`](dep_recover::Events::interleaved)): a thread's stretch begins
/// at one of its sync records and runs to its next. A plain read of a location atomics use, where a stretch has not been held back
/// yet, holds the rest of the stretch back to just before the sync record that ends it, so
/// a flag's reader reads after the other threads' stores of that stretch.
fn interleave(rec: &Recovery, facts: &Facts, known: &Known, syncs: Vec<Vec<u64>>, engine: &mut Engine) -> Result<(), RacesError> {
    let mut inputs: Vec<Input> = syncs.into_iter().map(|syncs| Input { syncs, ..Default::default() }).collect();
    // Producers run ahead of the merge on 128 MiB of batches among them: the producers'
    // work is most of the analysis, and a thread's turn is often longer than a few batches
    // (xz's compressing threads' run to 500,000 events), while which the other threads'
    // producers would otherwise wait.
    let shared = (128 << 20) / (feed::BATCH * std::mem::size_of::<Act>());
    // A busy thread's recovery (a quarter of its producer's time) on a core of its own:
    // xz -T2 of 256 KiB, one compressing thread, on 2 cores 1.9-2.2 s against 2.2-2.7 s.
    rec.events(Source::Dep).apart(rec.workers()).interleaved(
        shared,
        |t, tx| Feed::new(facts, Local::new(known, t), move |acts| if tx.send(Stretch { acts, at: 0 }) { Ok(()) } else { Err(feed::Gone) }),
        |t, key, batch: &mut Stretch| {
            let input = &mut inputs[t as usize];
            while let Some(act) = batch.acts.get_mut(batch.at) {
                match *act {
                    Act::Sync(seq) if seq != key => return Ok(Turn::Yield(seq)),
                    Act::Sync(seq) => {
                        input.held = false;
                        input.taken += 1;
                        engine.sync(t as usize, seq);
                    }
                    Act::Hold if !input.held => {
                        input.held = true;
                        batch.at += 1;
                        return Ok(Turn::Yield(input.next_sync()));
                    }
                    // (Taken out: each is read once, and the boxed ones need not be copied.)
                    _ => engine.event(t as usize, std::mem::replace(act, Act::Hold)),
                }
                batch.at += 1;
            }
            Ok(Turn::Next)
        },
    )?;
    Ok(())
}
