//! The hybrid race detector: Eraser's locksets refined by happens-before (vector clocks).
//! Two accesses race when they are made by different threads to a common byte, at least
//! one writes, no lock is held by both (exclusively by one of them), and neither happens
//! before the other. Happens-before comes from the profile's order between threads: thread
//! creation and join, lock release to acquire, condition variables, semaphores and
//! barriers, once routines, and the program's atomics: a locked instruction releases
//! before it and acquires after it, and plain loads and stores of a location that locked
//! instructions use are acquires and releases (the memory order cannot be seen in x86
//! code, so it is taken as the strongest). The C runtime's own atomics (its internal locks:
//! the thread stack cache, stdio, malloc's arenas) order only its internals: they make no
//! happens-before, else a thread that ended before another began would look ordered with
//! it through the stack cache; and the runtime's code called by the runtime is not checked.
//! Code the program calls (a `strcpy`) is the program's.

use super::checker::{self, Batch, Check, Checker, Found, Op, Races};
use super::clock::Clocks;
use super::local::{Act, KERNEL, SHARED_ATOMIC};
use super::shadow::{access_end, Slot};
use crate::program::watched::Pending;
use dep_profile::calls::{Func, LockOp, ObjectAccess};
use dep_profile::syscalls::{self, FdOp};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// An access's place: its pc and the return address of its function's frame (the call
/// site one level up, 0 if unknown), whether it writes, and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Site {
    pub pc: u64,
    pub caller: u64,
    pub write: bool,
    pub size: u32,
    /// An atomic access: a locked instruction of the program's, or a use of a
    /// synchronisation object by a library call. Two atomic accesses never race.
    pub atomic: bool,
    /// The kernel's, for a system call made at `pc`.
    pub kernel: bool,
}

/// One side of a race.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Side {
    pub thread: u32,
    pub site: Site,
    /// Locks held (address, shared).
    pub locks: Vec<(u64, bool)>,
}

/// A heap block from the C library's allocator: its size, and the caller and thread that
/// allocated it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub size: u64,
    pub caller: u64,
    pub thread: u32,
}

/// A race between two sites, as first seen, and how often it was seen (an access repeated
/// within one epoch of its thread, between two of its synchronisation operations, once).
#[derive(Clone, Debug)]
pub struct Race {
    /// The earlier access (in the analysis's order) and the later one.
    pub first: Side,
    pub second: Side,
    pub addr: u64,
    /// The heap block holding `addr` when first seen: (base, block).
    pub block: Option<(u64, Block)>,
    /// The thread whose stack holds `addr`, if one's does.
    pub stack_of: Option<u32>,
    pub count: u64,
    /// Every time it was seen, only lock hand-offs (of locks not held by both) ordered the
    /// two: a race in a run that takes the locks in another order.
    pub potential: bool,
}

/// Accesses to a region by (thread, site id, lockset id).
pub type RegionAccesses = FxHashMap<(u32, u32, u32), u64>;

/// A region the paper's check watches, with the accesses to it by site and lockset.
pub struct Region {
    pub start: u64,
    pub end: u64,
    pub seen: RegionAccesses,
}

/// What the analysis counted.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Accesses checked against the shadow memory.
    pub checked: u64,
    /// Of those, the accesses their thread's view found quiet (to pages only it touches or
    /// none writes, or repeating its last access of the granule): counted, not sent to the
    /// shadow.
    pub quiet: u64,
    /// Accesses not checked: thread-local storage, inside watched library calls, atomics.
    pub skipped: u64,
    /// Synchronisation operations applied.
    pub syncs: u64,
    /// Calls of watched functions.
    pub calls: u64,
}

struct Thread {
    clock: Clocks,
    started: bool,
    held: Vec<(u64, bool)>,
    locks: u32,
    /// The thread's sites by its own numbers ([`Act::Site`]), each with its id here once
    /// an access of it was checked (0 before).
    sites: Vec<(Site, u32)>,
    /// Lowest and highest address reached through rsp.
    stack: (u64, u64),
    ended: bool,
    /// The recorded system call under way or returned last.
    syscall: Option<Syscall>,
}

/// A thread's recorded system call.
#[derive(Clone, Copy, Debug)]
struct Syscall {
    nr: u16,
    args: [u64; 3],
    /// The thread's epoch before the call's release, for a send.
    sent: Option<u32>,
    returned: bool,
}

/// Descriptor channels every socket, and every file, shares (as ThreadSanitizer's).
const SOCKETS: u64 = 1;
const FILES: u64 = 2;

/// The sync object of descriptor channel `c`: outside the user half of the address space,
/// where no program object is.
fn channel_object(c: u64) -> u64 {
    (1 << 63) | c << 3
}

/// Bytes of a freed block checked as written by the free.
pub const FREE_CHECKED: u64 = 1024;

/// The analysis state of all threads.
pub struct Engine {
    threads: Vec<Thread>,
    /// Sync objects (atomic locations, locks, condition variables, semaphores, barriers),
    /// by 8-aligned address: the clock their releases left.
    objects: FxHashMap<u64, Clocks>,
    /// Each open descriptor's channel (a pipe's two ends share one).
    fds: FxHashMap<u64, u64>,
    /// The epoll channel a descriptor's channel was added to: what is sent to it is sent
    /// to the epoll too.
    epoll_of: FxHashMap<u64, u64>,
    next_channel: u64,
    /// Reader locks by address: the clock their read-unlocks left, which only writers
    /// acquire (readers are not ordered with each other).
    read_objects: FxHashMap<u64, Clocks>,
    /// Parent's sync record number → the thread it created.
    spawned_at: FxHashMap<u64, u32>,
    spawn_clock: Vec<Option<Clocks>>,
    /// The clocks of threads that ended and were not joined yet.
    end_clock: Vec<Option<Clocks>>,
    /// Every ended thread's end clock joined: what a join of a thread not known joins.
    ended_all: Clocks,
    /// TLS pointer (pthread_t) → the threads created with it (a finished thread's TLS is
    /// given to a later one).
    by_tls: FxHashMap<u64, Vec<u32>>,
    joined: Vec<bool>,
    tls: Vec<u64>,
    /// Where the checks go, and what each shard has not been sent yet.
    out: Out,
    pending: Vec<Batch>,
    /// Threads whose clock took in another's since their last access was sent.
    joined_since: Vec<bool>,
    /// The context the shards were last told of: (thread, own component, epoch, locks,
    /// base of the access numbers).
    context: Option<(u16, u32, u32, u32, u64)>,
    site_ids: FxHashMap<Site, u32>,
    /// Interned sites, by id (id 0 unused).
    pub sites: Vec<Site>,
    lockset_ids: FxHashMap<Vec<(u64, bool)>, u32>,
    /// Interned locksets, by id (0: none).
    pub locksets: Vec<Vec<(u64, bool)>>,
    blocks: BTreeMap<u64, Block>,
    pub region: Option<Region>,
    pub stats: Stats,
    /// The first thread whose epochs ran out (2^32 - 1 of them): what follows in it
    /// cannot be ordered, so the analysis has no result.
    pub exhausted: Option<u32>,
}

impl Engine {
    /// An engine for `spawns.len()` threads; `spawns[t]` is (parent, parent's sync record
    /// number, TLS pointer) where the profile says who created thread `t`.
    pub fn new(spawns: &[Option<(u32, u64, u64)>]) -> Engine {
        let n = spawns.len();
        let threads = (0..n)
            .map(|_| {
                Thread {
                    // Component t becomes 1 at the thread's first event (`own`): a thread
                    // not started yet holds nothing.
                    clock: Clocks::new(),
                    started: false,
                    held: Vec::new(),
                    locks: 0,
                    sites: Vec::new(),
                    stack: (u64::MAX, 0),
                    ended: false,
                    syscall: None,
                }
            })
            .collect();
        let mut spawned_at = FxHashMap::default();
        let mut by_tls = FxHashMap::default();
        let mut tls = vec![0; n];
        for (t, s) in spawns.iter().enumerate() {
            if let Some((_, seq, p)) = *s {
                spawned_at.insert(seq, t as u32);
                if p != 0 {
                    by_tls.entry(p).or_insert_with(Vec::new).push(t as u32);
                    tls[t] = p;
                }
            }
        }
        let mut lockset_ids = FxHashMap::default();
        lockset_ids.insert(Vec::new(), 0);
        Engine {
            threads,
            objects: FxHashMap::default(),
            read_objects: FxHashMap::default(),
            fds: FxHashMap::default(),
            epoll_of: FxHashMap::default(),
            next_channel: FILES + 1,
            spawned_at,
            spawn_clock: vec![None; n],
            end_clock: vec![None; n],
            ended_all: Clocks::new(),
            by_tls,
            joined: vec![false; n],
            tls,
            out: Out::Direct((0..1).map(|k| Checker::new(k, 1, n)).collect()),
            pending: vec![Batch::default()],
            joined_since: vec![false; n],
            context: None,
            site_ids: FxHashMap::default(),
            sites: vec![Site { pc: 0, caller: 0, write: false, size: 0, atomic: false, kernel: false }],
            lockset_ids,
            locksets: vec![Vec::new()],
            blocks: BTreeMap::new(),
            region: None,
            stats: Stats::default(),
            exhausted: None,
        }
    }

    /// Sends the shadow's checks to `shards` (each taking batches on a thread of its own)
    /// instead of checking them on this thread; the shards give their batches back, emptied,
    /// through `spare`.
    pub fn sharded(mut self, shards: Vec<crossbeam::channel::Sender<Batch>>, spare: crossbeam::channel::Receiver<Batch>) -> Self {
        self.pending = (0..shards.len()).map(|_| Batch::default()).collect();
        self.out = Out::Sharded(shards, spare);
        self
    }

    /// Bytes the shadow memory holds (of the shards on this thread).
    pub fn shadow_bytes(&self) -> usize {
        match &self.out {
            Out::Direct(cs) => cs.iter().map(Checker::shadow_bytes).sum(),
            Out::Sharded(..) => 0,
        }
    }

    /// Sends what is pending to every shard, and closes them: the races found are the
    /// shards' (and, checked on this thread, [`races`](Self::races)).
    pub fn finish(&mut self) {
        for k in 0..self.pending.len() {
            self.deliver(k);
        }
        if let Out::Sharded(tx, _) = &mut self.out {
            tx.clear();
        }
    }

    /// The races found by the shards on this thread.
    pub fn races(&mut self) -> FxHashMap<(u32, u32), Race> {
        for k in 0..self.pending.len() {
            self.deliver(k);
        }
        let mut all = Races::default();
        if let Out::Direct(cs) = &self.out {
            for c in cs {
                checker::merge(&mut all, c.races.clone());
            }
        }
        all.into_iter().map(|(k, f)| (k, self.race_of(f))).collect()
    }

    /// A race as reported, from what a shard found.
    pub fn race_of(&self, f: Found) -> Race {
        let side =
            |s: &Slot| Side { thread: s.thread as u32, site: self.sites[s.site as usize], locks: self.locksets[s.locks as usize].clone() };
        Race {
            first: side(&f.prev),
            second: side(&f.cur),
            addr: f.addr,
            block: f.block,
            stack_of: f.stack_of,
            count: f.count,
            potential: f.potential,
        }
    }

    /// Hands shard `k` its pending batch.
    fn deliver(&mut self, k: usize) {
        if self.pending[k].is_empty() {
            return;
        }
        match &mut self.out {
            Out::Direct(cs) => {
                cs[k].apply(&self.pending[k]);
                self.pending[k].clear();
            }
            Out::Sharded(tx, spare) => {
                // A batch given back, else a new one (its memory is then made once, not grown).
                let next = spare.try_recv().unwrap_or_else(|_| Batch::with_capacity(BATCH));
                let b = std::mem::replace(&mut self.pending[k], next);
                // A shard gone has stopped on a panic of its own, which the join reports.
                drop(tx[k].send(b));
            }
        }
    }

    /// Tells every shard `op`, before the accesses that follow.
    fn broadcast(&mut self, op: Op) {
        for k in 0..self.pending.len() {
            let b = &mut self.pending[k];
            b.push_op(op.clone());
            // A batch's memory stays bounded however large the clocks it carries.
            if b.ops.len() >= BATCH || b.op_bytes >= OP_BYTES {
                self.deliver(k);
            }
        }
    }

    /// Sends thread `t`'s access at `site` (interned) to `[addr, addr + size)`, remembered at
    /// `epoch`, to the shards of its pages.
    fn send(&mut self, t: usize, site: u32, addr: u64, size: u32, epoch: u32) {
        let seq = self.stats.checked;
        self.stats.checked += 1;
        if std::mem::take(&mut self.joined_since[t]) {
            let c = self.threads[t].clock.clone();
            self.broadcast(Op::Clock(t as u16, c));
        }
        let (own, locks) = (self.threads[t].clock.get(t), self.threads[t].locks);
        let same = matches!(self.context, Some((ct, co, ce, cl, base)) if ct as usize == t && co == own && ce == epoch && cl == locks && seq - base <= u32::MAX as u64);
        if !same {
            self.context = Some((t as u16, own, epoch, locks, seq));
            self.broadcast(Op::Context { thread: t as u16, own, epoch, locks, base: seq });
        }
        let delta = (seq - self.context.map_or(seq, |c| c.4)) as u32;
        let n = self.pending.len();
        let line = checker::LINE;
        let (first, last) = (addr / line, access_end(addr, size).saturating_sub(1).max(addr) / line);
        let check = Check { addr, site, delta };
        if n == 1 || last - first >= n as u64 - 1 {
            for k in 0..n {
                self.push(k, check);
            }
        } else {
            // Fewer lines than shards: each line's shard (consecutive lines, other shards).
            for l in first..=last {
                self.push(checker::shard_of(l * line, n), check);
            }
        }
    }

    #[inline]
    fn push(&mut self, k: usize, c: Check) {
        self.pending[k].checks.push(c);
        if self.pending[k].checks.len() >= BATCH {
            self.deliver(k);
        }
    }

    /// Vector clock components held, of threads, sync objects and thread ends.
    pub fn clock_components(&self) -> usize {
        let threads: usize = self.threads.iter().map(|t| t.clock.len()).sum();
        let objects: usize = self.objects.values().chain(self.read_objects.values()).map(Clocks::len).sum();
        let kept: usize = self.spawn_clock.iter().chain(&self.end_clock).flatten().map(Clocks::len).sum();
        threads + objects + kept + self.ended_all.len()
    }

    /// Gives thread `t` its own first tick if it has none yet (its events are at 1 and
    /// later; 0 means "never" in the shadow memory).
    #[inline]
    fn own(&mut self, t: usize) {
        if self.threads[t].clock.get(t) == 0 {
            self.tick(t);
        }
    }

    /// Advances thread `t`'s epoch, noting a thread that has run out of them.
    #[inline]
    fn tick(&mut self, t: usize) {
        if !self.threads[t].clock.tick(t) {
            self.exhausted.get_or_insert(t as u32);
        }
    }

    /// Thread `t` reached its sync record `seq`.
    pub fn sync(&mut self, t: usize, seq: u64) {
        self.own(t);
        self.stats.syncs += 1;
        if !self.threads[t].started {
            self.threads[t].started = true;
            if let Some(c) = self.spawn_clock[t].take() {
                self.threads[t].clock.join(&c, false);
                self.joined_since[t] = true;
            }
        }
        if let Some(&child) = self.spawned_at.get(&seq) {
            self.spawn_clock[child as usize] = Some(self.threads[t].clock.clone());
            self.tick(t);
        }
    }

    /// Thread `t` releases sync object `obj`; `lock`: a lock hand-off.
    fn release_as(&mut self, t: usize, obj: u64, lock: bool) {
        let c = &self.threads[t].clock;
        self.objects.entry(obj & !7).or_default().join(c, lock);
        self.tick(t);
    }

    /// Thread `t` acquires sync object `obj`; `lock`: a lock hand-off.
    fn acquire_as(&mut self, t: usize, obj: u64, lock: bool) {
        if let Some(o) = self.objects.get(&(obj & !7)) {
            self.threads[t].clock.join(o, lock);
            self.joined_since[t] = true;
        }
    }

    fn release(&mut self, t: usize, obj: u64) {
        self.release_as(t, obj, false)
    }

    fn acquire(&mut self, t: usize, obj: u64) {
        self.acquire_as(t, obj, false)
    }

    fn set_locks(&mut self, t: usize) {
        let mut held = self.threads[t].held.clone();
        held.sort_unstable();
        let next = self.locksets.len() as u32;
        let id = *self.lockset_ids.entry(held.clone()).or_insert(next);
        if id == next {
            self.locksets.push(held.clone());
            self.broadcast(Op::Lockset(held));
        }
        self.threads[t].locks = id;
    }

    /// Thread `t` takes lock `l`: a reader acquires what writers released, a writer also
    /// what readers released.
    fn lock(&mut self, t: usize, l: u64, shared: bool) {
        self.acquire_as(t, l, true);
        if !shared {
            if let Some(o) = self.read_objects.get(&(l & !7)) {
                self.threads[t].clock.join(o, true);
                self.joined_since[t] = true;
            }
        }
        self.threads[t].held.push((l, shared));
        self.set_locks(t);
    }

    /// Thread `t` gives lock `l` up: a reader's release reaches only later writers.
    fn unlock(&mut self, t: usize, l: u64) {
        let held = &mut self.threads[t].held;
        let shared = match held.iter().position(|&(a, _)| a == l) {
            Some(i) => held.remove(i).1,
            None => false,
        };
        if shared {
            let c = &self.threads[t].clock;
            self.read_objects.entry(l & !7).or_default().join(c, true);
            self.tick(t);
        } else {
            self.release_as(t, l, true);
        }
        self.set_locks(t);
    }

    fn intern_site(&mut self, s: Site) -> u32 {
        let next = self.sites.len() as u32;
        let id = *self.site_ids.entry(s).or_insert(next);
        if id == next {
            self.sites.push(s);
            self.broadcast(Op::Site(s));
        }
        id
    }

    /// The next event of thread `t`.
    pub fn event(&mut self, t: usize, act: Act) {
        self.own(t);
        match act {
            Act::Access { addr, site, flags } => self.access(t, addr, site, flags),
            Act::Site(s) => self.threads[t].sites.push((s, 0)),
            Act::Stack(lo, hi) => {
                self.threads[t].stack = (lo, hi);
                self.broadcast(Op::Stack(t as u16, lo, hi));
            }
            Act::Skipped(n) => self.stats.skipped += n,
            // Counted as checked, and numbered in the run as they were.
            Act::Quiet(n) => {
                self.stats.checked += n;
                self.stats.quiet += n;
            }
            Act::Hold => {}
            Act::Sync(seq) => self.sync(t, seq),
            Act::Release(a) => {
                self.stats.syncs += 1;
                self.release(t, a)
            }
            Act::Acquire(a) => {
                self.stats.syncs += 1;
                self.acquire(t, a)
            }
            Act::Call(c) => self.call(t, c.0, c.1),
            Act::Ended(e) => self.complete(t, e.call, e.value),
            Act::Syscall(c) => self.syscall(t, c.0, c.1),
            Act::SyscallReturn(value) => self.syscall_return(t, value),
            Act::Descriptors(fds) => self.descriptors(t, fds),
            Act::End => self.end(t),
        }
    }

    /// Thread `t` called a watched function, at `site` (pc, caller) if the program did.
    fn call(&mut self, t: usize, p: Pending, site: Option<(u64, u64)>) {
        self.stats.calls += 1;
        let args = p.args;
        if let (Some(how), Some((pc, caller))) = (p.func.object_access(), site) {
            // The object as memory: a use races with its creation, destruction or freeing
            // in another thread, unless ordered with them.
            let write = how == ObjectAccess::Write;
            self.checked(t, Site { pc, caller, write, size: 1, atomic: !write, kernel: false }, args[0]);
            if p.func.lock_op() == Some(LockOp::Wait) {
                self.checked(t, Site { pc, caller, write: false, size: 1, atomic: true, kernel: false }, args[1]);
            }
        }
        match p.func.lock_op() {
            Some(LockOp::Release) => self.unlock(t, args[0]),
            Some(LockOp::Wait) => self.unlock(t, args[1]),
            _ => {}
        }
        match p.func {
            Func::CondSignal | Func::CondBroadcast | Func::SemPost | Func::BarrierWait | Func::GuardRelease => self.release(t, args[0]),
            Func::Free => {
                // Freeing writes the block (its first KiB, as ThreadSanitizer checks it): an
                // access of another thread not ordered before it races with it.
                if let (Some((pc, caller)), Some(b)) = (site, self.blocks.get(&args[0])) {
                    let size = b.size.clamp(1, FREE_CHECKED) as u32;
                    self.checked(t, Site { pc, caller, write: true, size, atomic: false, kernel: false }, args[0]);
                }
                self.free(args[0])
            }
            _ => {}
        }
    }

    /// A watched call returned, with `value` if the return was recorded.
    fn complete(&mut self, t: usize, p: Pending, value: Option<u64>) {
        let ok = value.is_none_or(|v| v == 0);
        match p.func.lock_op() {
            Some(LockOp::Acquire { shared, may_fail }) if ok || !may_fail => self.lock(t, p.args[0], shared),
            Some(LockOp::Wait) => {
                self.acquire(t, p.args[0]);
                self.lock(t, p.args[1], false);
            }
            _ => {}
        }
        match p.func {
            Func::SemWait | Func::SemTrywait | Func::SemTimedwait if ok => self.acquire(t, p.args[0]),
            // Returns 0 where another ran the initialiser (and released the guard), 1 to
            // the caller that runs it now: either way, acquiring is right.
            Func::GuardAcquire => self.acquire(t, p.args[0]),
            Func::BarrierWait => self.acquire(t, p.args[0]),
            // Whoever ran the initialiser released it; every caller acquires it.
            Func::Once => {
                self.acquire(t, p.args[0]);
                self.release(t, p.args[0]);
            }
            Func::Join if ok => {
                // The thread with that pthread_t that ended and was not joined yet.
                let j = self
                    .by_tls
                    .get(&p.args[0])
                    .and_then(|ts| ts.iter().rev().find(|&&j| self.end_clock[j as usize].is_some() && !self.joined[j as usize]))
                    .copied();
                match j {
                    Some(j) => {
                        self.joined[j as usize] = true;
                        // Joined: nothing else can join it, so its clock goes.
                        let end = self.end_clock[j as usize].take().expect("ended");
                        self.threads[t].clock.join(&end, false);
                    }
                    // Not known which thread: every thread that ended may be the one.
                    None => self.threads[t].clock.join(&self.ended_all, false),
                }
                self.joined_since[t] = true;
            }
            Func::Malloc => self.alloc(t, value, p.args[0], p.ret),
            Func::Calloc => self.alloc(t, value, p.args[0].saturating_mul(p.args[1]), p.ret),
            Func::Realloc => {
                if value.is_some_and(|v| v != 0) && p.args[0] != 0 {
                    self.free(p.args[0]);
                }
                self.alloc(t, value, p.args[1], p.ret);
            }
            _ => {}
        }
    }

    /// The channel descriptor `fd` is open on, if known.
    fn channel(&self, fd: u64) -> Option<u64> {
        self.fds.get(&fd).copied()
    }

    /// Thread `t` makes a recorded system call: a send releases its descriptor's channel
    /// (and the epoll's it was added to) before the kernel takes the data.
    fn syscall(&mut self, t: usize, nr: u16, args: [u64; 3]) {
        let mut call = Syscall { nr, args, sent: None, returned: false };
        match syscalls::fd_op(nr as u64, args) {
            FdOp::Send { fd } => {
                if let Some(c) = self.channel(fd) {
                    call.sent = Some(self.threads[t].clock.get(t));
                    self.stats.syncs += 1;
                    self.release(t, channel_object(c));
                    if let Some(&e) = self.epoll_of.get(&c) {
                        self.release(t, channel_object(e));
                    }
                }
            }
            FdOp::EpollCtl { epfd, op, fd } => {
                if let Some(e) = self.channel(epfd) {
                    self.stats.syncs += 1;
                    self.release(t, channel_object(e));
                    if let Some(c) = self.channel(fd) {
                        if op == syscalls::EPOLL_CTL_DEL {
                            self.epoll_of.remove(&c);
                        } else {
                            self.epoll_of.insert(c, e);
                        }
                    }
                }
            }
            _ => {}
        }
        self.threads[t].syscall = Some(call);
    }

    /// Thread `t`'s system call returned `value`: a receive acquires its channel; calls
    /// that make, copy or close descriptors change the table.
    fn syscall_return(&mut self, t: usize, value: u64) {
        let Some(call) = self.threads[t].syscall.as_mut() else { return };
        if call.returned {
            return;
        }
        call.returned = true;
        let (nr, args) = (call.nr as u64, call.args);
        let result = value as i64;
        if result < 0 {
            return;
        }
        let open = |fds: &mut FxHashMap<u64, u64>, c: u64| {
            fds.insert(value, c);
        };
        match syscalls::fd_op(nr, args) {
            // A pipe or socket pair names its descriptors in memory (their own record).
            FdOp::Channel if syscalls::makes_pair(nr) => {}
            FdOp::Channel => {
                let c = self.next_channel;
                self.next_channel += 1;
                open(&mut self.fds, c);
            }
            FdOp::Socket => open(&mut self.fds, SOCKETS),
            FdOp::File => open(&mut self.fds, FILES),
            FdOp::Accept { listener } => {
                if let Some(c) = self.channel(listener) {
                    self.stats.syncs += 1;
                    self.acquire(t, channel_object(c));
                }
                open(&mut self.fds, SOCKETS);
            }
            FdOp::Dup { old } => match self.channel(old) {
                Some(c) => open(&mut self.fds, c),
                None => drop(self.fds.remove(&value)),
            },
            FdOp::Close { fd } => drop(self.fds.remove(&fd)),
            FdOp::Receive { fd } | FdOp::EpollWait { epfd: fd } => {
                if let Some(c) = self.channel(fd) {
                    self.stats.syncs += 1;
                    self.acquire(t, channel_object(c));
                }
            }
            FdOp::Send { .. } | FdOp::EpollCtl { .. } | FdOp::None => {}
        }
    }

    /// The descriptors thread `t`'s pipe or socket pair made: one new channel for both.
    fn descriptors(&mut self, t: usize, fds: [u32; 2]) {
        if self.threads[t].syscall.is_some_and(|s| s.returned && syscalls::makes_pair(s.nr as u64)) {
            let c = self.next_channel;
            self.next_channel += 1;
            for fd in fds {
                self.fds.insert(fd as u64, c);
            }
        }
    }

    fn alloc(&mut self, t: usize, value: Option<u64>, size: u64, caller: u64) {
        if let Some(base) = value.filter(|&v| v != 0) {
            // Memory handed out again: what was done to it before is another object's.
            let b = Block { size, caller, thread: t as u32 };
            self.blocks.insert(base, b);
            self.broadcast(Op::Alloc(base, b));
        }
    }

    fn free(&mut self, base: u64) {
        if self.blocks.remove(&base).is_some() {
            self.broadcast(Op::Free(base));
        }
    }

    fn end(&mut self, t: usize) {
        // The thread's clock now lives on only for whoever joins it (a thread that ended
        // makes no more accesses to check).
        let end = std::mem::take(&mut self.threads[t].clock);
        self.ended_all.join(&end, false);
        self.end_clock[t] = Some(end);
        let th = &mut self.threads[t];
        th.ended = true;
        self.broadcast(Op::Ended(t as u16));
        let th = &mut self.threads[t];
        // A thread's stack and TLS are reused for threads created later: forget them. The
        // TLS block and the thread descriptor sit just above the stack (glibc).
        if t > 0 && th.stack.0 <= th.stack.1 {
            let lo = th.stack.0.saturating_sub(4096);
            let mut hi = th.stack.1 + 4096;
            let p = self.tls[t];
            if p >= th.stack.0 && p - th.stack.0 < 1 << 26 {
                hi = hi.max(p + 4096);
            }
            self.broadcast(Op::Forget(lo, hi));
        }
    }

    /// Thread `t`'s access to `addr` at its site `site`: an acquire where it reads a
    /// location locked instructions use, else checked (and then a release where it writes
    /// one).
    fn access(&mut self, t: usize, addr: u64, site: u32, flags: u8) {
        let Some(&(s, id)) = self.threads[t].sites.get(site as usize) else { return };
        // A plain access of a location locked instructions use. A load may be an atomic
        // load (a plain move on x86, as the program's atomic loads compile): an acquire,
        // never a race. A store is checked (against the locked accesses too), then
        // releases what the thread did, its own store included.
        let shared_atomic = flags & SHARED_ATOMIC != 0;
        if shared_atomic && !s.write {
            self.stats.skipped += 1;
            self.stats.syncs += 1;
            self.acquire(t, addr);
            return;
        }
        // What the kernel read for a send, it read before the send's release.
        let epoch = if flags & KERNEL != 0 && !s.write { self.threads[t].syscall.and_then(|c| c.sent) } else { None };
        let id = if id != 0 {
            id
        } else {
            let id = self.intern_site(s);
            self.threads[t].sites[site as usize].1 = id;
            id
        };
        self.checked_id(t, id, s.size, addr, epoch);
        if shared_atomic {
            self.stats.syncs += 1;
            self.release(t, addr);
        }
    }

    /// Checks thread `t`'s access at `site` to `[addr, addr + site.size)` against those
    /// remembered, and remembers it.
    fn checked(&mut self, t: usize, site: Site, addr: u64) {
        let id = self.intern_site(site);
        self.checked_id(t, id, site.size, addr, None)
    }

    /// [`checked`](Self::checked) of the site with id `site`, remembered at `epoch` of the
    /// thread if given.
    fn checked_id(&mut self, t: usize, site: u32, size: u32, addr: u64, epoch: Option<u32>) {
        let locks = self.threads[t].locks;
        let clock = epoch.unwrap_or_else(|| self.threads[t].clock.get(t));
        if let Some(r) = &mut self.region {
            if addr < r.end && access_end(addr, size) > r.start {
                *r.seen.entry((t as u32, site, locks)).or_insert(0) += 1;
            }
        }
        self.send(t, site, addr, size, clock);
    }
}

/// Where the engine's checks go.
enum Out {
    /// Shards checked on the engine's thread (one, unless tests say otherwise).
    Direct(Vec<Checker>),
    /// Shards on threads of their own, each taking its batches from a channel, and the
    /// batches they gave back.
    Sharded(Vec<crossbeam::channel::Sender<Batch>>, crossbeam::channel::Receiver<Batch>),
}

/// Accesses (or ops) sent to a shard at once.
const BATCH: usize = 1 << 14;

/// Bytes of ops past which a batch is sent.
const OP_BYTES: usize = 4 << 20;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::races::feed::{Class, Ev};
    use crate::races::local::{self, Known, Local};

    /// The engine with each thread's view before it, as the analysis runs them (the views
    /// on the threads' producers): events go through the thread's view first.
    struct Run<'k> {
        e: Engine,
        locals: Vec<Local<'k>>,
        last: usize,
    }

    impl<'k> Run<'k> {
        fn new(spawns: &[Option<(u32, u64, u64)>], known: &'k Known) -> Run<'k> {
            Run { e: Engine::new(spawns), locals: (0..spawns.len()).map(|t| Local::new(known, t as u32)).collect(), last: 0 }
        }

        fn event(&mut self, t: usize, ev: Ev) {
            let mut acts = Vec::new();
            if std::mem::replace(&mut self.last, t) != t {
                self.locals[t].resume(&mut acts);
            }
            self.locals[t].lower(ev, &mut acts);
            self.locals[t].flush(&mut acts);
            for a in acts {
                self.e.event(t, a);
            }
        }

        fn is_atomic(&mut self, addr: u64, size: u32) -> bool {
            self.locals[0].is_atomic(addr, size)
        }
    }

    impl std::ops::Deref for Run<'_> {
        type Target = Engine;
        fn deref(&self) -> &Engine {
            &self.e
        }
    }

    impl std::ops::DerefMut for Run<'_> {
        fn deref_mut(&mut self) -> &mut Engine {
            &mut self.e
        }
    }

    /// Known atomic granules (address, bytes), no runtime modules.
    fn atomics(granules: &[(u64, u8)]) -> Known {
        Known::new(granules.iter().copied().collect(), Vec::new())
    }

    fn write(addr: u64, pc: u64) -> Ev {
        Ev::Access { pc, addr, size: 8, write: true, class: Class::Plain }
    }

    fn read(addr: u64, pc: u64) -> Ev {
        Ev::Access { pc, addr, size: 8, write: false, class: Class::Plain }
    }

    /// Two threads created by thread 0 at its sync records 1 and 2.
    fn two(known: &Known) -> Run<'_> {
        let mut e = Run::new(&[None, Some((0, 1, 0x7000)), Some((0, 2, 0x8000))], known);
        e.sync(0, 0);
        e.sync(0, 1);
        e.sync(0, 2);
        e.sync(1, 3);
        e.sync(2, 4);
        e
    }

    fn call(func: Func, lock: u64, ret: u64) -> Ev {
        Ev::Call { func: func as u16, args: [lock, 0], ret }
    }

    fn ret(func: Func, value: u64) -> Ev {
        Ev::Return { func: func as u16, value }
    }

    /// What a run found, for comparing two: its races in full, the sites in the order
    /// numbered, the counts.
    fn outcome(e: &mut Run) -> String {
        let mut races: Vec<_> = e.races().into_iter().map(|(k, r)| format!("{k:?} {r:?}")).collect();
        races.sort();
        // (How many were quiet is what differs.)
        let stats = Stats { quiet: 0, ..e.stats };
        format!("{races:#?}\n{:?}\n{stats:?}", e.sites)
    }

    /// Accesses sent on as quiet (to pages only their thread touches or no thread writes,
    /// and repeats of the thread's last access of a granule since its last other event)
    /// leave every race, count, first sighting, site number and statistic as checking
    /// every access gives: random runs of three threads over private, shared and read-only
    /// pages, with locks, atomics (one on a thread's private page) and multi-granule
    /// accesses, against the same runs with every access counted (a region over all
    /// memory, which no access is quiet in).
    #[test]
    fn quiet_accesses_change_nothing_found() {
        let mut races = 0;
        for seed in 1..=300u64 {
            let mut rand = crate::races::xorshift(seed);
            // Thread t's private page 0x1000 * (t + 1), shared pages 0x10000 and 0x11000,
            // and 0x12000, which every thread reads and none writes; an atomic granule on
            // the shared page and one on thread 1's.
            let mut evs: Vec<(usize, Ev)> = Vec::new();
            let mut pages = vec![local::Owners::default(), local::Owners::default(), local::Owners::default()];
            for _ in 0..rand(40) + 10 {
                let t = rand(3) as usize;
                // A stretch of the thread: it starts with an event other than an access,
                // as the interleaving takes a thread's stretch whole from a sync record.
                match rand(4) {
                    0 => evs.push((t, Ev::Release(0x9000 + rand(2) * 8))),
                    1 => evs.push((t, Ev::Acquire(0x9000 + rand(2) * 8))),
                    k => {
                        // A lock taken or given back: the thread's lockset changes.
                        let f = if k == 2 { Func::MutexLock } else { Func::MutexUnlock };
                        evs.push((t, call(f, 0x9100, 0x500)));
                        evs.push((t, ret(f, 0)));
                    }
                }
                for _ in 0..rand(30) {
                    let page = match rand(4) {
                        0 => 0x1000 * (t as u64 + 1),
                        1 => 0x10000,
                        2 => 0x11000,
                        _ => 0x12000,
                    };
                    let size = [1, 2, 4, 8, 8, 8, 16][rand(7) as usize];
                    let addr = page + rand(6) * 4 + if rand(8) == 0 { 0xff8 } else { 0 };
                    let class = if rand(12) == 0 { Class::Atomic } else { Class::Plain };
                    let write = page != 0x12000 && rand(2) == 0;
                    let ev = Ev::Access { pc: 0x100 + rand(4) * 4, addr, size, write, class };
                    let n = if rand(3) == 0 { rand(4) + 1 } else { 1 };
                    for _ in 0..n {
                        pages[t].touch(addr, addr + size as u64, write);
                        evs.push((t, ev.clone()));
                    }
                }
            }
            let atomic: Vec<(u64, u8)> = vec![(0x10008, 0xff), (0x2010, 0x0f)];
            let run = |known: &Known| {
                let mut e = two(known);
                for (t, ev) in &evs {
                    e.event(*t, ev.clone());
                }
                e.event(0, Ev::End);
                outcome(&mut e)
            };
            let all = atomics(&atomic).with_region(0, u64::MAX);
            let owners = local::Owners::owners(pages);
            let filtered = atomics(&atomic).with_owners(owners);
            let (want, got) = (run(&all), run(&filtered));
            assert_eq!(got, want, "seed {seed}");
            races += want.matches("Race {").count();
        }
        assert!(races > 1000, "{races} races");
    }

    #[test]
    fn unordered_writes_race_once_per_pair_of_sites() {
        let none = Known::default();
        let mut e = two(&none);
        for _ in 0..3 {
            e.event(1, write(0x1000, 0x10));
            e.event(2, write(0x1004, 0x20));
        }
        assert_eq!(e.races().len(), 1);
        let all = e.races();
        let r = all.values().next().unwrap();
        assert_eq!((r.first.thread, r.second.thread, r.addr), (1, 2, 0x1004));
        assert_eq!(r.count, 1, "the same access again in one epoch is not checked again");
        e.event(2, Ev::Release(0x5000));
        e.event(2, write(0x1004, 0x20));
        assert_eq!(e.races().values().next().unwrap().count, 2, "a new epoch checks it again");
        // Two reads, or bytes apart, are no race.
        let mut e = two(&none);
        e.event(1, read(0x2000, 0x10));
        e.event(2, read(0x2000, 0x20));
        e.event(1, Ev::Access { pc: 0x11, addr: 0x3000, size: 4, write: true, class: Class::Plain });
        e.event(2, Ev::Access { pc: 0x21, addr: 0x3004, size: 4, write: true, class: Class::Plain });
        assert!(e.races().is_empty());
    }

    /// An access repeated in one epoch is skipped only while its slot holds it: once the
    /// thread's own write or a reallocation took the slot, the repeat is checked again
    /// (and counted), as the shadow alone would say.
    #[test]
    fn repeats_are_checked_again_once_their_slot_is_gone() {
        let none = Known::default();
        let mut e = two(&none);
        let count =
            |e: &mut Run, a: u64, b: u64| e.races().values().find(|r| r.first.site.pc == a && r.second.site.pc == b).map_or(0, |r| r.count);
        e.event(1, write(0x1000, 0x10));
        e.event(2, read(0x1000, 0x20));
        e.event(2, read(0x1000, 0x20));
        assert_eq!(count(&mut e, 0x10, 0x20), 1, "the repeat is in the slot");
        // The thread's write supersedes its read's slot: the read again is checked again.
        e.event(2, write(0x1000, 0x30));
        e.event(2, read(0x1000, 0x20));
        assert_eq!(count(&mut e, 0x10, 0x20), 2);
        assert_eq!(count(&mut e, 0x10, 0x30), 1);
        // Memory handed out again forgets every slot of it: thread 2's read, repeated in
        // the same epoch, is remembered anew and races with thread 1's write after it.
        let mut e = two(&none);
        e.event(1, write(0x20000, 0x10));
        e.event(2, read(0x20000, 0x20));
        e.event(2, call(Func::Malloc, 64, 0x51));
        e.event(2, ret(Func::Malloc, 0x20000));
        e.event(2, read(0x20000, 0x20));
        e.event(1, write(0x20000, 0x10));
        assert_eq!(count(&mut e, 0x10, 0x20) + count(&mut e, 0x20, 0x10), 2, "{:?}", e.races());
    }

    #[test]
    fn creation_and_join_order_threads() {
        let none = Known::default();
        let mut e = Run::new(&[None, Some((0, 1, 0x7000))], &none);
        e.sync(0, 0);
        e.event(0, write(0x1000, 0x10));
        e.sync(0, 1); // pthread_create's clone
        e.sync(1, 2); // the thread starts
        e.event(1, read(0x1000, 0x20));
        e.event(1, write(0x1000, 0x21));
        e.event(1, Ev::End);
        e.sync(0, 3);
        e.event(0, call(Func::Join, 0x7000, 0x99));
        e.event(0, Ev::Block { addr: 0x99 });
        e.event(0, read(0x1000, 0x30));
        assert!(e.races().is_empty(), "{:?}", e.races());
    }

    #[test]
    fn locks_order_and_a_failed_trylock_does_not() {
        let none = Known::default();
        let l = 0x9000;
        for (result, races) in [(0, 0), (16, 1)] {
            let mut e = two(&none);
            e.event(1, call(Func::MutexLock, l, 0x50));
            e.event(1, ret(Func::MutexLock, 0));
            e.event(1, write(0x1000, 0x10));
            e.event(1, call(Func::MutexUnlock, l, 0x51));
            e.event(1, Ev::Block { addr: 0x51 });
            e.event(2, call(Func::MutexTrylock, l, 0x60));
            e.event(2, ret(Func::MutexTrylock, result));
            e.event(2, write(0x1000, 0x20));
            assert_eq!(e.races().len(), races, "trylock returned {result}");
            if races == 1 {
                let all = e.races();
                let r = all.values().next().unwrap();
                assert_eq!(r.first.locks, vec![(l, false)]);
                assert!(r.second.locks.is_empty());
            }
        }
    }

    #[test]
    fn ordered_only_by_another_locks_hand_off_is_a_potential_race() {
        let none = Known::default();
        let mut e = two(&none);
        let l = 0x9000;
        e.event(1, write(0x1000, 0x10));
        e.event(1, call(Func::MutexLock, l, 0x50));
        e.event(1, ret(Func::MutexLock, 0));
        e.event(1, call(Func::MutexUnlock, l, 0x51));
        e.event(2, call(Func::MutexLock, l, 0x60));
        e.event(2, ret(Func::MutexLock, 0));
        e.event(2, call(Func::MutexUnlock, l, 0x61));
        e.event(2, Ev::Block { addr: 0x61 });
        e.event(2, write(0x1000, 0x20));
        let all = e.races();
        let r: Vec<&Race> = all.values().collect();
        assert_eq!(r.len(), 1);
        assert!(r[0].potential);
        // Ordered by a semaphore instead: no race in any run.
        let mut e = two(&none);
        e.event(1, write(0x1000, 0x10));
        e.event(1, call(Func::SemPost, 0xa000, 0x50));
        e.event(2, call(Func::SemWait, 0xa000, 0x60));
        e.event(2, ret(Func::SemWait, 0));
        e.event(2, write(0x1000, 0x20));
        assert!(e.races().is_empty());
    }

    #[test]
    fn atomics_release_and_acquire_and_plain_loads_of_them_acquire() {
        let atomic = atomics(&[(0x4000, 0x0f)]);
        let mut e = two(&atomic);
        e.event(1, write(0x1000, 0x10));
        e.event(1, Ev::Release(0x4000));
        e.event(1, Ev::Access { pc: 0x11, addr: 0x4000, size: 4, write: true, class: Class::Atomic });
        e.event(1, Ev::Acquire(0x4000));
        // A plain load of the flag: an acquire, and no race with the locked store.
        e.event(2, Ev::Access { pc: 0x20, addr: 0x4000, size: 4, write: false, class: Class::Plain });
        e.event(2, read(0x1000, 0x21));
        assert!(e.races().is_empty(), "{:?}", e.races());
        assert!(e.is_atomic(0x4002, 1) && !e.is_atomic(0x4004, 4));
    }

    #[test]
    fn inside_watched_calls_and_thread_local_storage_nothing_is_checked() {
        let none = Known::default();
        let mut e = two(&none);
        e.event(1, call(Func::Malloc, 16, 0x50));
        e.event(1, write(0x1000, 0x10));
        e.event(1, ret(Func::Malloc, 0x1000));
        e.event(2, Ev::Access { pc: 0x20, addr: 0x1000, size: 8, write: true, class: Class::Tls });
        e.event(2, write(0x1000, 0x21));
        assert!(e.races().is_empty());
        // The block malloc returned is named in a race on it.
        e.event(1, write(0x1008, 0x12));
        e.event(2, write(0x1008, 0x22));
        let all = e.races();
        let r = all.values().next().unwrap();
        assert_eq!(r.block.map(|(b, blk)| (b, blk.size, blk.thread)), Some((0x1000, 16, 1)));
    }

    /// A write under a reader lock races with another reader's: readers acquire only what
    /// writers released. A writer after them is ordered with both.
    #[test]
    fn reader_locks_order_readers_only_after_writers() {
        let none = Known::default();
        let l = 0x9000;
        let mut e = two(&none);
        for (t, pc) in [(1, 0x10), (2, 0x20)] {
            e.event(t, call(Func::RwRdlock, l, 0x50));
            e.event(t, ret(Func::RwRdlock, 0));
            e.event(t, write(0x1000, pc));
            e.event(t, call(Func::RwUnlock, l, 0x51));
            e.event(t, Ev::Block { addr: 0x51 });
        }
        assert_eq!(e.races().len(), 1, "{:?}", e.races());
        // Thread 1 takes the write side after both readers: ordered after their writes.
        e.event(1, call(Func::RwWrlock, l, 0x52));
        e.event(1, ret(Func::RwWrlock, 0));
        e.event(1, Ev::Block { addr: 0x52 });
        e.event(1, write(0x1000, 0x11));
        assert_eq!(e.races().len(), 1, "the writer is ordered after both readers: {:?}", e.races());
    }

    /// A plain store to a location locked instructions use races with another thread's
    /// locked access; two locked accesses never do; a plain load of it is an atomic load.
    #[test]
    fn plain_stores_race_with_atomics_and_atomics_do_not_race() {
        let atomic = atomics(&[(0x4000, 0xff)]);
        let locked = |pc| Ev::Access { pc, addr: 0x4000, size: 8, write: true, class: Class::Atomic };
        let mut e = two(&atomic);
        e.event(1, locked(0x10));
        e.event(1, Ev::Release(0x4000));
        e.event(2, locked(0x20));
        e.event(2, Ev::Release(0x4000));
        assert!(e.races().is_empty(), "{:?}", e.races());
        e.event(2, write(0x4000, 0x22));
        let all = e.races();
        let r: Vec<&Race> = all.values().collect();
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].first.site.atomic && !r[0].second.site.atomic && r[0].second.site.pc == 0x22);
        // A plain load is an atomic load (an acquire): thread 2's store after it is ordered
        // after thread 1's locked access, and no load races.
        let mut e = two(&atomic);
        e.event(1, locked(0x10));
        e.event(1, Ev::Release(0x4000));
        e.event(2, read(0x4000, 0x21));
        e.event(2, write(0x4000, 0x22));
        assert!(e.races().is_empty(), "{:?}", e.races());
        // The atomic's release covers its own access: a thread acquiring it is ordered
        // after it, and its plain store is no race.
        let mut e = two(&atomic);
        e.event(1, locked(0x10));
        e.event(1, Ev::Release(0x4000));
        e.event(2, Ev::Acquire(0x4000));
        e.event(2, write(0x4000, 0x22));
        assert!(e.races().is_empty(), "{:?}", e.races());
    }

    /// Destroying a mutex races with another thread's unordered use of it; freeing a block
    /// writes it; calls from the C runtime are its own business.
    #[test]
    fn synchronisation_objects_are_memory() {
        let none = Known::default();
        let m = 0x9000;
        let mut e = two(&none);
        e.event(1, call(Func::MutexLock, m, 0x51));
        e.event(1, ret(Func::MutexLock, 0));
        e.event(2, call(Func::MutexDestroy, m, 0x61));
        let all = e.races();
        let r: Vec<&Race> = all.values().collect();
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!((r[0].first.site.pc, r[0].second.site.pc), (0x50, 0x60), "at the calls' last bytes");
        assert!(r[0].first.site.atomic && r[0].second.site.write);
        // Freed while another thread still reads it.
        let mut e = two(&none);
        e.event(1, call(Func::Malloc, 64, 0x51));
        e.event(1, ret(Func::Malloc, 0x20000));
        e.event(2, read(0x20010, 0x20));
        e.event(1, call(Func::Free, 0x20000, 0x52));
        assert_eq!(e.races().len(), 1, "{:?}", e.races());
        // The runtime's own calls (returning into it) are not checked.
        let runtime = Known::new(FxHashMap::default(), vec![(0x7f00_0000, 0x7f10_0000)]);
        let mut e = Run::new(&[None, Some((0, 1, 0x7000)), Some((0, 2, 0x8000))], &runtime);
        for (t, s) in [(0, 0), (0, 1), (0, 2), (1, 3), (2, 4)] {
            e.sync(t, s);
        }
        e.event(1, call(Func::MutexLock, m, 0x7f00_1000));
        e.event(2, call(Func::MutexDestroy, m, 0x7f00_2000));
        assert!(e.races().is_empty(), "{:?}", e.races());
    }

    /// A pipe orders what is written before a send with what follows a receive on its
    /// other end; another pipe, or a receive before the send, does not.
    #[test]
    fn descriptors_hand_over() {
        let none = Known::default();
        let (pipe2, write_nr, read_nr) = (libc::SYS_pipe2 as u16, libc::SYS_write as u16, libc::SYS_read as u16);
        for (other_pipe, races) in [(false, 0), (true, 1)] {
            let mut e = two(&none);
            e.event(0, Ev::Syscall { nr: pipe2, args: [0x7000, 0, 0] });
            e.event(0, Ev::SyscallReturn { value: 0 });
            e.event(0, Ev::Descriptors([3, 4]));
            e.event(0, Ev::Syscall { nr: pipe2, args: [0x7000, 0, 0] });
            e.event(0, Ev::SyscallReturn { value: 0 });
            e.event(0, Ev::Descriptors([5, 6]));
            e.event(1, write(0x1000, 0x10));
            e.event(1, Ev::Syscall { nr: write_nr, args: [4, 0x2000, 1] });
            e.event(1, Ev::SyscallReturn { value: 1 });
            e.event(2, Ev::Syscall { nr: read_nr, args: [if other_pipe { 5 } else { 3 }, 0x3000, 1] });
            e.event(2, Ev::SyscallReturn { value: 1 });
            e.event(2, read(0x1000, 0x20));
            assert_eq!(e.races().len(), races, "other pipe: {other_pipe}: {:?}", e.races());
        }
        // What the kernel read for the send, it read before the release: the receiver may
        // write the buffer then.
        let mut e = two(&none);
        e.event(0, Ev::Syscall { nr: pipe2, args: [0x7000, 0, 0] });
        e.event(0, Ev::SyscallReturn { value: 0 });
        e.event(0, Ev::Descriptors([3, 4]));
        e.event(1, Ev::Syscall { nr: write_nr, args: [4, 0x2000, 8] });
        e.event(1, Ev::SyscallReturn { value: 8 });
        e.event(1, Ev::Kernel { pc: 0x10, addr: 0x2000, size: 8, write: false, class: Class::Plain });
        e.event(2, Ev::Syscall { nr: read_nr, args: [3, 0x3000, 8] });
        e.event(2, Ev::SyscallReturn { value: 8 });
        e.event(2, write(0x2000, 0x20));
        assert!(e.races().is_empty(), "{:?}", e.races());
    }

    /// Accesses at the top of the address space (a damaged profile's addresses) end there:
    /// no granule loop wraps to address 0 and walks the address space making shadow pages.
    #[test]
    fn accesses_at_the_top_of_the_address_space_do_not_wrap() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let atomic: &'static Known = Box::leak(Box::new(atomics(&[(0x4000, 0x0f)])));
            let mut e = two(atomic);
            e.event(1, write(u64::MAX - 7, 0x10));
            e.event(2, Ev::Access { pc: 0x20, addr: u64::MAX - 3, size: 16, write: true, class: Class::Plain });
            let _ = tx.send((e.races().len(), e.is_atomic(u64::MAX, 8), e.shadow_bytes()));
        });
        let (races, atomic, bytes) =
            rx.recv_timeout(std::time::Duration::from_secs(30)).expect("an access at the top of memory never ended");
        assert_eq!((races, atomic), (1, false));
        assert!(bytes < 1 << 20, "{bytes} bytes of shadow for two accesses");
    }

    /// A kernel access claiming 4 GiB (a damaged profile's) is followed in its first MiB:
    /// the shadow memory stays that size.
    #[test]
    fn a_huge_kernel_access_makes_bounded_shadow() {
        let none = Known::default();
        let mut e = two(&none);
        e.event(1, Ev::Kernel { pc: 0x10, addr: 0x1000_0000, size: u32::MAX, write: true, class: Class::Plain });
        e.event(2, read(0x1000_0000 + (1 << 20) - 8, 0x20));
        e.event(2, read(0x1000_0000 + (1 << 20), 0x21));
        assert_eq!(e.races().len(), 1, "the first MiB is checked, no more: {:?}", e.races());
        let page = std::mem::size_of::<crate::races::shadow::Page>();
        assert!(e.shadow_bytes() <= ((1 << 20) / 4096 + 2) * page, "{} bytes of shadow", e.shadow_bytes());
    }

    /// Thousands of threads over a run, 64 alive at once, each created and joined by
    /// thread 0: the clocks held grow with the threads alive times those of the run, not
    /// with the square of the run's threads.
    #[test]
    fn clocks_grow_with_the_threads_alive() {
        let (n, alive) = (2000usize, 64usize);
        let none = Known::default();
        // Thread k (1..=n) created at thread 0's sync record 2k - 1; its pthread_t is that of
        // the slot it takes among those alive (glibc reuses a joined thread's).
        let tls = |k: usize| 0x7000_0000 + ((k - 1) % alive) as u64 * 0x1000;
        let spawns: Vec<Option<(u32, u64, u64)>> =
            std::iter::once(None).chain((1..=n).map(|k| Some((0, 2 * k as u64 - 1, tls(k))))).collect();
        let mut e = Run::new(&spawns, &none);
        let mut seq = 1_000_000u64;
        let mut peak = 0;
        e.sync(0, 0);
        for wave in (1..=n).step_by(alive) {
            let kids: Vec<usize> = (wave..(wave + alive).min(n + 1)).collect();
            for &k in &kids {
                e.sync(0, 2 * k as u64 - 1);
            }
            for &k in &kids {
                seq += 1;
                e.sync(k, seq);
                e.event(k, write(0x10_0000 + 8 * k as u64, 0x10));
                e.event(k, Ev::Release(0x9000));
                e.event(k, Ev::End);
            }
            peak = peak.max(e.clock_components());
            for &k in &kids {
                e.event(0, call(Func::Join, tls(k), 0x99));
                e.event(0, Ev::Block { addr: 0x99 });
            }
            e.event(0, Ev::Acquire(0x9000));
            e.event(0, read(0x10_0000 + 8 * kids[0] as u64, 0x20));
        }
        assert!(e.races().is_empty(), "{:?}", e.races());
        // Both clocks (full, weak) of thread 0, of the threads alive, of their ends and the
        // sync object, each at most n + 1 long.
        let bound = 2 * (2 * alive + 4) * (n + 1);
        assert!(peak <= bound, "{peak} clock components held at the peak, over {bound}");
    }

    /// A thread whose epochs run out (2^32 - 1 releases) is noted, so that the analysis
    /// reports no result rather than one from wrapped clocks.
    #[test]
    fn exhausted_epochs_are_noted() {
        let none = Known::default();
        let mut e = two(&none);
        e.event(1, Ev::Release(0x5000));
        assert_eq!(e.exhausted, None);
        let last = crate::races::clock::Clock::with(1, u32::MAX);
        e.threads[1].clock = Clocks { full: last.clone(), weak: last };
        e.event(2, Ev::Release(0x5000));
        assert_eq!(e.exhausted, None, "another thread's epochs are its own");
        e.event(1, Ev::Release(0x5000));
        assert_eq!(e.exhausted, Some(1));
        assert_eq!(e.threads[1].clock.get(1), u32::MAX, "not wrapped to 0");
    }
}
