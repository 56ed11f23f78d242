//! One shard of the shadow memory: the granules of its pages, checked against the accesses
//! the [engine](super::engine) sends it. The engine keeps the happens-before order (clocks,
//! locks, calls, the threads' interleaving), which is small and sequential; the checks,
//! which are most of the work, split by page over the shards, each on a core of its own.
//!
//! A shard sees its granules' accesses in the run's order, with what it needs to judge them
//! as it was at that point (the accessing thread's clock and locks, the sites and locksets
//! named so far, the heap blocks and thread stacks that describe an address): so each
//! granule's slots go through the same states as in one shadow memory, and the races found
//! merge into those one shadow memory finds ([`merge`]).

use super::clock::Clocks;
use super::engine::{Block, Site};
use super::shadow::{access_end, byte_mask, Shadow, Slot, SLOTS};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// What a shard is told between accesses, in the run's order.
#[derive(Clone, Debug)]
pub enum Op {
    /// The accesses that follow are thread `thread`'s, remembered at `epoch` of it (its own
    /// clock component `own`, or an earlier one for what the kernel read for a send), under
    /// lockset `locks`; their numbers in the run start at `base`.
    Context { thread: u16, own: u32, epoch: u32, locks: u32, base: u64 },
    /// Thread `t`'s clock took in another's (its own component is the context's).
    Clock(u16, Clocks),
    /// The next site id names this site.
    Site(Site),
    /// The next lockset id names these locks.
    Lockset(Vec<(u64, bool)>),
    /// Memory given back: every access to `[start, end)` is forgotten.
    Forget(u64, u64),
    /// A heap block was allocated at the address (its memory forgotten first).
    Alloc(u64, Block),
    /// The heap block at the address was freed (its memory forgotten).
    Free(u64),
    /// Thread `t`'s stack now spans `[lo, hi)`.
    Stack(u16, u64, u64),
    /// Thread `t` ended.
    Ended(u16),
}

/// An access to check: its address, its interned site (which holds its size and kind), and
/// its number in the run less the context's base.
#[derive(Clone, Copy, Debug)]
pub struct Check {
    pub addr: u64,
    pub site: u32,
    pub delta: u32,
}

/// What a shard is sent at once: accesses, and the ops that go before each (by the index of
/// the access they precede).
#[derive(Debug, Default)]
pub struct Batch {
    pub checks: Vec<Check>,
    pub ops: Vec<(u32, Op)>,
    /// Bytes the ops hold (a clock of thousands of threads is tens of KiB).
    pub op_bytes: usize,
}

impl Batch {
    /// Room for `n` accesses.
    pub fn with_capacity(n: usize) -> Batch {
        Batch { checks: Vec::with_capacity(n), ops: Vec::new(), op_bytes: 0 }
    }

    /// Neither accesses nor ops.
    pub fn is_empty(&self) -> bool {
        self.checks.is_empty() && self.ops.is_empty()
    }

    /// Empties it, keeping its memory.
    pub fn clear(&mut self) {
        self.checks.clear();
        self.ops.clear();
        self.op_bytes = 0;
    }

    /// Adds `op`, to go before the next access.
    pub fn push_op(&mut self, op: Op) {
        self.op_bytes += std::mem::size_of::<(u32, Op)>()
            + match &op {
                Op::Clock(_, c) => 4 * c.len(),
                Op::Lockset(l) => std::mem::size_of_val(l.as_slice()),
                _ => 0,
            };
        self.ops.push((self.checks.len() as u32, op));
    }
}

/// A race as a shard found it: the two slots, where, and when first seen (the access's
/// number in the run, then the granule: an access checks its granules in address order).
#[derive(Clone, Debug)]
pub struct Found {
    pub prev: Slot,
    pub cur: Slot,
    pub addr: u64,
    pub block: Option<(u64, Block)>,
    pub stack_of: Option<u32>,
    pub count: u64,
    pub potential: bool,
    pub first: (u64, u64),
}

/// Races by (site id, site id), the smaller first.
pub type Races = FxHashMap<(u32, u32), Found>;

/// Adds the races one shard found to those of others: the first sighting describes it,
/// sightings add up, and it is potential only if every sighting was.
pub fn merge(into: &mut Races, from: Races) {
    for (k, f) in from {
        match into.get_mut(&k) {
            None => drop(into.insert(k, f)),
            Some(r) => {
                r.count += f.count;
                r.potential &= f.potential;
                if f.first < r.first {
                    (r.prev, r.cur, r.addr, r.block, r.stack_of, r.first) = (f.prev, f.cur, f.addr, f.block, f.stack_of, f.first);
                }
            }
        }
    }
}

/// Bytes of memory a shard takes at a time: cache lines go round the shards, so that no
/// shard waits on another's hot page (a stack, a table the program walks).
pub const LINE: u64 = 64;

/// The shard of `n` that checks the line holding `addr`.
#[inline]
pub fn shard_of(addr: u64, n: usize) -> usize {
    if n.is_power_of_two() {
        // (No division where none is needed: it was a tenth of a shard's time.)
        ((addr / LINE) & (n as u64 - 1)) as usize
    } else {
        ((addr / LINE) % n as u64) as usize
    }
}

/// Where a shard keeps `addr` of one of its lines: its lines packed together, so that its
/// shadow holds no other shard's granules.
#[inline]
fn local(addr: u64, n: usize) -> u64 {
    if n.is_power_of_two() {
        return ((addr / LINE) >> n.trailing_zeros()) * LINE + addr % LINE;
    }
    (addr / LINE / n as u64) * LINE + addr % LINE
}

/// One shard's state.
pub struct Checker {
    shard: usize,
    shards: usize,
    shadow: Shadow,
    sites: Vec<Site>,
    locksets: Vec<Vec<(u64, bool)>>,
    disjoint: FxHashMap<(u32, u32), bool>,
    clocks: Vec<Clocks>,
    /// The current context: thread, its epoch for the slots, its locks, the run's access
    /// number base.
    thread: u16,
    epoch: u32,
    locks: u32,
    base: u64,
    blocks: BTreeMap<u64, Block>,
    /// Each thread's stack, and whether it ended.
    stacks: Vec<(u64, u64, bool)>,
    pub races: Races,
}

impl Checker {
    /// Shard `shard` of `shards`, for `threads` threads.
    pub fn new(shard: usize, shards: usize, threads: usize) -> Checker {
        let none = Site { pc: 0, caller: 0, write: false, size: 0, atomic: false, kernel: false };
        Checker {
            shard,
            shards,
            shadow: Shadow::default(),
            sites: vec![none],
            locksets: vec![Vec::new()],
            disjoint: FxHashMap::default(),
            clocks: vec![Clocks::new(); threads],
            thread: 0,
            epoch: 0,
            locks: 0,
            base: 0,
            blocks: BTreeMap::new(),
            stacks: vec![(u64::MAX, 0, false); threads],
            races: FxHashMap::default(),
        }
    }

    /// Bytes of shadow memory held.
    pub fn shadow_bytes(&self) -> usize {
        self.shadow.bytes()
    }

    /// Takes a batch: each access after the ops before it.
    pub fn apply(&mut self, b: &Batch) {
        let mut ops = b.ops.iter().peekable();
        for (i, c) in b.checks.iter().enumerate() {
            while let Some((_, op)) = ops.next_if(|(at, _)| *at as usize <= i) {
                self.op(op);
            }
            self.check_access(c);
        }
        for (_, op) in ops {
            self.op(op);
        }
    }

    fn op(&mut self, op: &Op) {
        match op {
            &Op::Context { thread, own, epoch, locks, base } => {
                (self.thread, self.epoch, self.locks, self.base) = (thread, epoch, locks, base);
                self.clocks[thread as usize].raise(thread as usize, own);
            }
            Op::Clock(t, c) => self.clocks[*t as usize] = c.clone(),
            Op::Site(s) => self.sites.push(*s),
            Op::Lockset(l) => self.locksets.push(l.clone()),
            &Op::Forget(lo, hi) => self.forget(lo, hi),
            &Op::Alloc(base, b) => {
                self.forget(base, base.saturating_add(b.size));
                self.blocks.insert(base, b);
            }
            &Op::Free(base) => {
                if let Some(b) = self.blocks.remove(&base) {
                    self.forget(base, base.saturating_add(b.size));
                }
            }
            &Op::Stack(t, lo, hi) => (self.stacks[t as usize].0, self.stacks[t as usize].1) = (lo, hi),
            &Op::Ended(t) => {
                self.stacks[t as usize].2 = true;
                self.clocks[t as usize] = Clocks::new();
            }
        }
    }

    /// Forgets this shard's part of `[lo, hi)`: the ends' partial lines, and the whole lines
    /// between, which are one range where the shard keeps them.
    fn forget(&mut self, lo: u64, hi: u64) {
        if hi <= lo {
            return;
        }
        let (n, k) = (self.shards as u64, self.shard as u64);
        let mine = |a: u64| shard_of(a, self.shards) == self.shard;
        let (first, last) = (lo / LINE, (hi - 1) / LINE);
        let whole = |a: u64, b: u64| (local(a, n as usize), local(b - 1, n as usize) + 1);
        let mut ranges = Vec::with_capacity(3);
        if first == last {
            if mine(lo) {
                ranges.push(whole(lo, hi));
            }
        } else {
            if mine(lo) {
                ranges.push(whole(lo, (first + 1) * LINE));
            }
            if mine(hi - 1) {
                ranges.push(whole(last * LINE, hi));
            }
            // The shard's whole lines among first + 1 .. last: consecutive where it keeps them.
            let start = first + 1 + (k + n - (first + 1) % n) % n;
            if start < last {
                let end = last - 1 - ((last - 1) % n + n - k) % n;
                ranges.push(whole(start * LINE, (end + 1) * LINE));
            }
        }
        for (a, b) in ranges {
            self.shadow.forget(a, b);
        }
    }

    fn check_access(&mut self, c: &Check) {
        let s = self.sites[c.site as usize];
        let seq = self.base + c.delta as u64;
        let end = access_end(c.addr, s.size);
        let cur = Slot { clock: self.epoch, site: c.site, locks: self.locks, thread: self.thread, mask: 0, write: s.write };
        // This shard's granules of the access, in address order, a line at a time.
        let mut line = c.addr & !7;
        while line < end {
            let line_end = (line / LINE + 1).checked_mul(LINE).map_or(end, |e| e.min(end));
            if shard_of(line, self.shards) == self.shard {
                let mut g = line;
                while g < line_end {
                    let mask = byte_mask(g, c.addr, end);
                    self.check(g, Slot { mask, ..cur }, c.addr, seq);
                    match g.checked_add(8) {
                        Some(next) => g = next,
                        None => break,
                    }
                }
            }
            if line_end >= end {
                break;
            }
            line = line_end;
        }
    }

    /// Whether no lock protects an access under lockset `a` from one under `b`.
    fn disjoint(&mut self, a: u32, b: u32) -> bool {
        if a == 0 || b == 0 {
            return true;
        }
        let key = (a.min(b), a.max(b));
        if let Some(&d) = self.disjoint.get(&key) {
            return d;
        }
        let (x, y) = (&self.locksets[a as usize], &self.locksets[b as usize]);
        let d = !x.iter().any(|&(l, xs)| y.iter().any(|&(m, ys)| l == m && !(xs && ys)));
        self.disjoint.insert(key, d);
        d
    }

    /// Checks an access to one granule against those remembered, then remembers it.
    fn check(&mut self, g: u64, cur: Slot, addr: u64, seq: u64) {
        let t = cur.thread as usize;
        let at = self.shadow.at(local(g, self.shards));
        let slots = *self.shadow.slots(at);
        // The same access again (a loop) in the same epoch: anything it could race with was
        // checked when it was stored, or checked it when that was stored.
        if slots.contains(&cur) {
            return;
        }
        let cur_atomic = self.sites[cur.site as usize].atomic;
        for s in slots.iter() {
            if s.clock == 0 || s.mask & cur.mask == 0 || s.thread as usize == t || !(s.write || cur.write) {
                continue;
            }
            if cur_atomic && self.sites[s.site as usize].atomic {
                continue;
            }
            let c = &self.clocks[t];
            let (ordered, ordered_weak) = (c.full.saw(s.thread as usize, s.clock), c.weak.saw(s.thread as usize, s.clock));
            if ordered_weak || !self.disjoint(s.locks, cur.locks) {
                continue;
            }
            // Ordered only by lock hand-offs, and no lock held by both: another run taking
            // the locks in another order would race.
            self.race(*s, cur, addr.max(g), ordered, (seq, g));
        }
        let clock = &self.clocks[t];
        let mut next = slots;
        let mut free = None;
        let mut same = None;
        for (i, s) in next.iter_mut().enumerate() {
            if s.clock != 0 && s.thread == cur.thread && s.write == cur.write && s.mask == cur.mask {
                same = Some(i);
                break;
            }
            // Superseded: covered by this access and ordered before it (a write), or the
            // same thread's read (a read).
            let covered = s.mask & !cur.mask == 0;
            let ordered = clock.full.saw(s.thread as usize, s.clock);
            if s.clock != 0 && covered && ((cur.write && ordered) || (!cur.write && !s.write && s.thread == cur.thread)) {
                *s = Slot::default();
            }
            if s.clock == 0 && free.is_none() {
                free = Some(i);
            }
        }
        let i = same.or(free).unwrap_or_else(|| {
            // Full: forget one of this thread's first, else one by turns.
            next.iter().position(|s| s.thread == cur.thread).unwrap_or((cur.clock as usize + cur.site as usize) % SLOTS)
        });
        next[i] = cur;
        *self.shadow.slots(at) = next;
    }

    fn race(&mut self, prev: Slot, cur: Slot, addr: u64, potential: bool, first: (u64, u64)) {
        let key = (prev.site.min(cur.site), prev.site.max(cur.site));
        if let Some(r) = self.races.get_mut(&key) {
            r.count += 1;
            r.potential &= potential;
            return;
        }
        let block = self.blocks.range(..=addr).next_back().filter(|(&b, blk)| addr < b + blk.size.max(1)).map(|(&b, &blk)| (b, blk));
        let stack_of = self.stacks.iter().position(|&(lo, hi, ended)| lo <= addr && addr < hi && !ended).map(|t| t as u32);
        self.races.insert(key, Found { prev, cur, addr, block, stack_of, count: 1, potential, first });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(write: bool, size: u32) -> Site {
        Site { pc: 0x10, caller: 0, write, size, atomic: false, kernel: false }
    }

    /// A batch of one thread's accesses under context `t`.
    fn batch(t: u16, own: u32, base: u64, accesses: &[(u64, u32)]) -> Batch {
        let mut b = Batch::default();
        b.ops.push((0, Op::Context { thread: t, own, epoch: own, locks: 0, base }));
        b.checks.extend(accesses.iter().enumerate().map(|(k, &(addr, site))| Check { addr, site, delta: k as u32 }));
        b
    }

    /// Two shards together find what one finds: the granules of an access that crosses a
    /// page go to each page's shard, and the first sighting describes a race.
    #[test]
    fn shards_find_what_one_shadow_finds() {
        let run = |shards: usize| {
            let mut cs: Vec<Checker> = (0..shards).map(|k| Checker::new(k, shards, 2)).collect();
            let mut setup = Batch::default();
            setup.ops.push((0, Op::Site(site(true, 16))));
            setup.ops.push((0, Op::Site(site(true, 8))));
            // Thread 0 writes 16 bytes across the page boundary at 0x2000, then thread 1
            // writes the second page's first granule, then the first page's last.
            let t0 = batch(0, 1, 0, &[(0x1ff8, 1)]);
            let t1 = batch(1, 1, 1, &[(0x2000, 2), (0x1ff8, 2)]);
            for c in cs.iter_mut() {
                c.apply(&setup);
                c.apply(&t0);
                c.apply(&t1);
            }
            let mut all = Races::default();
            for c in cs {
                merge(&mut all, c.races);
            }
            all
        };
        let (one, two) = (run(1), run(2));
        assert_eq!(one.len(), 1);
        let (a, b) = (&one[&(1, 2)], &two[&(1, 2)]);
        assert_eq!((a.count, a.addr, a.first), (2, 0x2000, (1, 0x2000)), "first seen at the second page");
        assert_eq!((b.count, b.addr, b.first), (a.count, a.addr, a.first));
    }

    /// Forgetting a range clears exactly its bytes, whichever shard keeps them: the ends'
    /// partial lines and the whole lines between, for one shard and for three.
    #[test]
    fn forgetting_reaches_every_shard_and_no_more() {
        for shards in [1usize, 2, 3] {
            let mut cs: Vec<Checker> = (0..shards).map(|k| Checker::new(k, shards, 1)).collect();
            let mut b = Batch::default();
            b.ops.push((0, Op::Site(site(true, 8))));
            b.ops.push((0, Op::Context { thread: 0, own: 1, epoch: 1, locks: 0, base: 0 }));
            let addrs: Vec<u64> = (0x1000..0x1400).step_by(8).collect();
            b.checks.extend(addrs.iter().map(|&addr| Check { addr, site: 1, delta: 0 }));
            // Forget 0x1044..0x12c4: part of line 0x1040, lines 0x1080..0x1280, part of
            // line 0x12c0.
            b.ops.push((b.checks.len() as u32, Op::Forget(0x1044, 0x12c4)));
            for c in cs.iter_mut() {
                c.apply(&b);
            }
            for &a in &addrs {
                let c = &mut cs[shard_of(a, shards)];
                let at = c.shadow.at(local(a, shards));
                let mask = c.shadow.slots(at).iter().fold(0u8, |m, s| m | s.mask);
                let want = if a + 8 <= 0x1044 || a >= 0x12c4 {
                    0xff
                } else if a == 0x1040 {
                    0x0f
                } else if a == 0x12c0 {
                    0xf0
                } else {
                    0
                };
                assert_eq!(mask, want, "{shards} shards, granule {a:#x}");
            }
        }
    }
}
