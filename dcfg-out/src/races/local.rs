//! What one thread's own events decide, worked out on the core that recovers the thread
//! rather than on the [engine](super::engine)'s, which every thread's events pass through:
//! the thread's call stack and watched calls under way, so whose each access is and
//! whether it is checked; its sites, numbered per thread; its stack's extent; and which
//! accesses touch a location locked instructions use; and which accesses cannot find or
//! change anything in the shadow memory (to pages only this thread touches, or repeating
//! its last access of a granule), which go to the engine as a count alone. The engine is
//! left what needs the order between threads.

use super::engine::Site;
use super::feed::{Class, Ev, InsnFacts};
use super::shadow::{access_end, byte_mask, granules};
use crate::program::calls::{CallStack, Step, Transition, NO_RETURN};
use crate::program::watched::{Ended, Pending, Watched};
use dep_profile::semantics::Access;
use dep_profile::syscalls;
use dep_recover::events::MemEvent;
use rustc_hash::{FxHashMap, FxHashSet};

/// Frames kept per thread (only the innermost is looked at); deeper recursion forgets the
/// outer half.
const MAX_FRAMES: usize = 4096;

/// Bytes of each 8-byte granule that locked instructions use, by granule address.
pub type AtomicBytes = FxHashMap<u64, u8>;

/// What every thread's view reads: the granules locked instructions use (from the first
/// pass) and the address ranges of the C runtime's modules.
#[derive(Default)]
pub struct Known {
    atomic: AtomicBytes,
    /// Pages holding such granules.
    atomic_pages: FxHashSet<u64>,
    runtime: Vec<(u64, u64)>,
    /// Whose accesses to each page need no check, by page number: pages absent are
    /// written and touched by several threads, or by none (see [`Owners`]).
    owners: FxHashMap<u64, Owner>,
    /// The region whose every access is counted (`--region`): its accesses always go to
    /// the engine.
    region: Option<(u64, u64)>,
}

impl Known {
    /// `atomic` granules, the C runtime's modules at `runtime`.
    pub fn new(atomic: AtomicBytes, mut runtime: Vec<(u64, u64)>) -> Known {
        runtime.sort_unstable();
        Known { atomic_pages: atomic.keys().map(|g| g >> 12).collect(), atomic, runtime, owners: FxHashMap::default(), region: None }
    }

    /// The pages whose accesses need no check, from [`Owners::owners`].
    pub fn with_owners(mut self, owners: FxHashMap<u64, Owner>) -> Known {
        self.owners = owners;
        self
    }

    /// Every access to `[start, end)` goes to the engine, repeats too: the region check
    /// counts them all.
    pub fn with_region(mut self, start: u64, end: u64) -> Known {
        self.region = Some((start, end));
        self
    }

    /// Whether `addr` is in the C runtime's code.
    pub fn in_runtime(&self, addr: u64) -> bool {
        let i = self.runtime.partition_point(|&(s, _)| s <= addr);
        i > 0 && addr < self.runtime[i - 1].1
    }
}

/// An access flag: it touches a location locked instructions use, and is not a locked
/// instruction's own (a plain load of it acquires, a plain store releases).
pub const SHARED_ATOMIC: u8 = 1;
/// An access flag: the kernel's, for the system call under way.
pub const KERNEL: u8 = 2;

/// What the engine takes from one thread, in the thread's order.
#[derive(Clone, Debug)]
pub enum Act {
    /// A checked access to `addr`, at the thread's site `site` ([`Act::Site`] named it),
    /// with [`SHARED_ATOMIC`] and [`KERNEL`] flags.
    Access {
        addr: u64,
        site: u32,
        flags: u8,
    },
    /// A plain or stack read of a location locked instructions use comes next (checked or
    /// not): the interleaving may hold the thread back here until the other threads'
    /// stores it may read are seen.
    Hold,
    /// The thread's next site number names this site.
    Site(Site),
    /// The thread's stack now spans `[lo, hi)`.
    Stack(u64, u64),
    /// Accesses not checked (thread-local business, inside library calls, the runtime's
    /// internals), since the last count.
    Skipped(u64),
    /// Accesses with nothing to find or change in the shadow memory, since the last count:
    /// to pages no other thread touches, or repeating the thread's last access of their
    /// granule since its last event of another kind (see [`Repeats`]). The engine counts
    /// them as checked, in order.
    Quiet(u64),
    Sync(u64),
    Release(u64),
    Acquire(u64),
    /// A watched call starts, made at (pc, caller) where that is the program's.
    Call(Box<(Pending, Option<(u64, u64)>)>),
    /// A watched call ended.
    Ended(Box<Ended>),
    Syscall(Box<(u16, [u64; 3])>),
    SyscallReturn(u64),
    Descriptors([u32; 2]),
    End,
}

/// One thread's view of its own run.
pub struct Local<'k> {
    known: &'k Known,
    /// The program's call stack: each frame with whether it returns into the runtime.
    frames: CallStack<bool>,
    calls: Watched,
    /// Lowest and highest address reached through rsp.
    stack: (u64, u64),
    /// The thread's sites by number, and the last few found.
    sites: FxHashMap<Site, u32>,
    cache: Box<[Cached; SITE_CACHE]>,
    /// Sites marked [`SENT`] so far.
    sent: u32,
    /// Blocks asked about with a caller, each with its instructions whose sites are all
    /// sent ([`BlockSites`]).
    blocks: Box<[BlockSites; BLOCK_CACHE]>,
    /// Pages asked about (direct-mapped by page number), each as its number shifted left
    /// by two over its [`OWN`] and [`ATOMIC`] bits: an access mostly goes to one of a few
    /// pages (the stack, the data being walked), which one entry alone would keep missing.
    pages: Box<[u64; PAGE_CACHE]>,
    skipped: u64,
    /// Quiet accesses (to the thread's own pages, and repeats) since the last
    /// [`Act::Quiet`].
    quiet: u64,
    repeats: Repeats,
    /// The thread's number.
    thread: u32,
    /// What the quiet path asks of the call stack and watched calls on every block,
    /// worked out only when they change: the innermost frame's return address and whether
    /// it returns into the runtime ([`caller`](Self::caller)), or None where a watched
    /// library call that runs no program code is under way ([`in_library`](Self::in_library)).
    context: Option<(u64, bool)>,
}

/// A site number's flag, in the site table and cache: an access of it was sent. The engine
/// numbers sites in the order their first accesses are checked, so the first is always
/// sent, never quiet. (Sites are numbered below it: each takes a table entry of tens of
/// bytes.)
const SENT: u32 = 1 << 31;

/// The pages each thread touches and writes, gathered by the first pass: an access to a
/// page that only its own thread touches in the whole run cannot race (a race needs
/// another thread's access to a common byte), nor can one to a page no thread writes (a
/// race needs a write), so neither needs a check.
pub struct Owners {
    pages: FxHashSet<u64>,
    written: FxHashSet<u64>,
    /// Pages some other thread may touch too: the engine checks a synchronisation object's
    /// and a freed block's memory as the caller's accesses.
    shared: FxHashSet<u64>,
    /// Pages noted lately, direct-mapped by page number (accesses go to a few pages at a
    /// time: the stack, the data being walked), and pages noted as written lately.
    recent: Box<[u64; 256]>,
    recent_written: Box<[u64; 256]>,
}

/// Whose accesses to a page need no check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// The one thread that touches it.
    Thread(u32),
    /// Any thread's: no thread writes it (nor does the kernel, for a system call, nor the
    /// analysis, for a watched call).
    Unwritten,
}

/// The numbers of the pages `[addr, end)` touches (the first alone for an empty range).
#[inline]
fn page_numbers(addr: u64, end: u64) -> std::ops::RangeInclusive<u64> {
    addr >> 12..=end.saturating_sub(1).max(addr) >> 12
}

impl Default for Owners {
    fn default() -> Self {
        Owners {
            pages: FxHashSet::default(),
            written: FxHashSet::default(),
            shared: FxHashSet::default(),
            recent: Box::new([u64::MAX; 256]),
            recent_written: Box::new([u64::MAX; 256]),
        }
    }
}

impl Owners {
    /// Notes `[addr, end)`, as written where `write`.
    #[inline]
    pub fn touch(&mut self, addr: u64, end: u64, write: bool) {
        let p = addr >> 12;
        // Most accesses lie in one page noted lately.
        let one = end.saturating_sub(1) >> 12 <= p;
        if !(one && self.recent[p as usize & 255] == p) {
            Self::note_pages(&mut self.recent, &mut self.pages, addr, end);
        }
        if write && !(one && self.recent_written[p as usize & 255] == p) {
            Self::note_pages(&mut self.recent_written, &mut self.written, addr, end);
        }
    }

    /// Notes every reference of `refs` as [`touch`](Self::touch) does. Consecutive
    /// references mostly stay in one page (a stack frame, a buffer being walked): one
    /// already noted in this call, as read or as written, is passed over on a comparison of
    /// registers, without the look into `recent`.
    pub fn touch_refs(&mut self, refs: &[MemEvent]) {
        // The page last noted, and the page last noted as written (u64::MAX: none; no
        // page number reaches it).
        let (mut read, mut written) = (u64::MAX, u64::MAX);
        for r in refs {
            let end = access_end(r.addr, r.size.max(1));
            let p = r.addr >> 12;
            let write = r.access == Access::Write;
            let one = (end - 1) >> 12 == p;
            if one && p == read && (!write || p == written) {
                continue;
            }
            self.touch(r.addr, end, write);
            if one {
                read = p;
                if write {
                    written = p;
                }
            }
        }
    }

    /// Adds the pages of `[addr, end)` not in `recent` to `set`, and to `recent`.
    #[cold]
    #[inline(never)]
    fn note_pages(recent: &mut [u64; 256], set: &mut FxHashSet<u64>, addr: u64, end: u64) {
        // A huge range (the kernel's side of a large read) costs a page each, as the
        // shadow memory it is checked in does.
        for p in page_numbers(addr, end) {
            let r = &mut recent[p as usize & 255];
            if *r != p {
                *r = p;
                set.insert(p);
            }
        }
    }

    /// Notes `[addr, end)` as touched by some other thread too.
    pub fn share(&mut self, addr: u64, end: u64) {
        self.shared.extend(page_numbers(addr, end));
    }

    /// Adds what `later` noted (of the same thread).
    pub fn merge(&mut self, later: Owners) {
        self.pages.extend(later.pages);
        self.written.extend(later.written);
        self.shared.extend(later.shared);
    }

    /// Whose accesses to each page need no check, from each thread's notes: pages no
    /// thread writes, and pages one thread alone touches; never a page some thread shares
    /// (the analysis writes it for a watched call).
    pub fn owners(threads: Vec<Owners>) -> FxHashMap<u64, Owner> {
        // (None: several threads touch it.)
        let mut owner: FxHashMap<u64, Option<u32>> = FxHashMap::default();
        let mut shared = FxHashSet::default();
        let mut written = FxHashSet::default();
        for (t, o) in threads.into_iter().enumerate() {
            for p in o.pages {
                let e = owner.entry(p).or_insert(Some(t as u32));
                if *e != Some(t as u32) {
                    *e = None;
                }
            }
            shared.extend(o.shared);
            written.extend(o.written);
        }
        owner
            .into_iter()
            .filter(|(p, _)| !shared.contains(p))
            .filter_map(|(p, t)| match t {
                _ if !written.contains(&p) => Some((p, Owner::Unwritten)),
                Some(t) => Some((p, Owner::Thread(t))),
                None => None,
            })
            .collect()
    }
}

/// Entries of a thread's table of last accesses (a power of two).
const REPEAT_TABLE: usize = 256;

/// The thread's last access of each granule since its last event other than an access,
/// direct-mapped by granule, so that an access repeating it exactly is counted here
/// instead of sent.
///
/// Such an access needs no check: the shadow memory keeps an access's own slot (thread,
/// epoch, lockset, site, bytes) in its granule until an access of the granule or an event
/// changes it, and its checker returns at once on an access whose slot is there. Between
/// the two accesses the thread made no other access of the granule (each access sets or
/// clears its granules' entries), and no event of any kind: each one (a sync record, a
/// release or acquire, a watched call's start or end, which change the epoch and lockset
/// or free memory; a hold, after which other threads run) starts a new generation. Within
/// a stretch between sync records no other thread's access comes in between (the
/// interleaving takes a stretch whole, up to a hold), so no other thread's access moved
/// the slot either.
struct Repeats {
    table: Box<[Last]>,
    generation: u32,
}

/// An entry of [`Repeats`]: the access to `addr` at `site` (of the thread's numbers),
/// valid in generation `generation`.
#[derive(Clone, Copy)]
struct Last {
    granule: u64,
    addr: u64,
    site: u32,
    generation: u32,
}

impl Repeats {
    fn new() -> Repeats {
        Repeats { table: vec![Last { granule: 0, addr: 0, site: 0, generation: 0 }; REPEAT_TABLE].into_boxed_slice(), generation: 1 }
    }

    #[inline]
    fn slot(&mut self, granule: u64) -> &mut Last {
        &mut self.table[(granule >> 3) as usize & (REPEAT_TABLE - 1)]
    }

    /// Whether the access to `[addr, end)` at `site` repeats the last one of its granule,
    /// noting it as the last of its granules where it does not.
    #[inline]
    fn repeats(&mut self, addr: u64, end: u64, site: u32) -> bool {
        let (g, generation) = (addr & !7, self.generation);
        if end - g <= 8 {
            let e = self.slot(g);
            if e.generation == generation && e.granule == g && e.addr == addr && e.site == site {
                return true;
            }
            *e = Last { granule: g, addr, site, generation };
            return false;
        }
        // Across granules: not taken as a repeat.
        self.forget(addr, end);
        false
    }

    /// Forgets the entries of the granules of `[addr, end)`, whose slots an access sent
    /// may have changed.
    #[cold]
    #[inline(never)]
    fn forget(&mut self, addr: u64, end: u64) {
        if (end - (addr & !7)) / 8 > REPEAT_TABLE as u64 {
            self.renew();
            return;
        }
        for (g, _) in granules(addr, end) {
            let e = self.slot(g);
            if e.granule == g {
                e.generation = 0;
            }
        }
    }

    /// Forgets every entry: an event other than an access came.
    #[inline]
    fn renew(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            // (Entries made 2^32 generations ago must not look current.)
            self.table.iter_mut().for_each(|e| e.generation = 0);
            self.generation = 1;
        }
    }
}

/// Entries of a thread's cache of pages (a power of two).
const PAGE_CACHE: usize = 1024;

/// A page's flag: only this thread touches it in the whole run, or no thread writes it;
/// and it is not in the region counted.
const OWN: u8 = 1;
/// A page's flag: locked instructions use granules of it.
const ATOMIC: u8 = 2;

/// Entries of a thread's site cache (a power of two).
const SITE_CACHE: usize = 2048;

/// Entries of a thread's cache of blocks' sent sites (a power of two).
const BLOCK_CACHE: usize = 1024;

/// A block run from a caller, in the cache of blocks: bit `i` of `mask` is set where
/// instruction `i` (below 64) is [`sized`](InsnFacts::sized) and the sites of
/// both already sent, so that its accesses to the thread's own pages are quiet without
/// their sites being looked up. Valid while no other site was sent since (`sent_at`), or
/// for good once no bit is left to set (`whole`).
#[derive(Clone, Copy)]
struct BlockSites {
    block: u32,
    sent_at: u32,
    caller: u64,
    mask: u64,
    whole: bool,
}

/// A site in the cache: its pc and caller, the rest of it packed (size, then whether it
/// writes, is atomic, is the kernel's: [`packed`]; all ones for an empty entry), and its
/// number. (24 bytes: the cache is most of what a thread's view keeps hot.)
#[derive(Clone, Copy)]
struct Cached {
    pc: u64,
    caller: u64,
    rest: u32,
    id: u32,
}

/// A site's entry in the site cache: most accesses repeat a recent site, and by pc (and
/// whether it writes) a loop's sites sit together in it.
#[inline]
fn cache_slot(s: &Site) -> usize {
    ((s.pc << 1) | s.write as u64) as usize & (SITE_CACHE - 1)
}

/// A site's size and kinds in 32 bits, for the cache: all ones (never cached) for a size
/// of 2^21 bytes or more, which no instruction has (the kernel's accesses are cut at
/// [`syscalls::SHADOWED`]).
#[inline]
fn packed(s: &Site) -> u32 {
    if s.size >= 1 << 21 {
        return u32::MAX;
    }
    s.size | (s.write as u32) << 29 | (s.atomic as u32) << 30 | (s.kernel as u32) << 31
}

impl<'k> Local<'k> {
    /// Thread `thread`'s view, with nothing seen yet.
    pub fn new(known: &'k Known, thread: u32) -> Local<'k> {
        Local {
            known,
            frames: CallStack::with_limit(MAX_FRAMES),
            calls: Watched::default(),
            stack: (u64::MAX, 0),
            sites: FxHashMap::default(),
            cache: Box::new([Cached { pc: 0, caller: 0, rest: u32::MAX, id: 0 }; SITE_CACHE]),
            sent: 0,
            blocks: Box::new([BlockSites { block: u32::MAX, sent_at: 0, caller: 0, mask: 0, whole: false }; BLOCK_CACHE]),
            pages: Box::new([u64::MAX; PAGE_CACHE]),
            skipped: 0,
            quiet: 0,
            repeats: Repeats::new(),
            thread,
            context: Some((0, true)),
        }
    }

    /// Whether `[addr, addr + size)` touches a location locked instructions use.
    #[inline]
    pub fn is_atomic(&mut self, addr: u64, size: u32) -> bool {
        self.atomic_range(addr, access_end(addr, size.max(1)))
    }

    /// Whether `[addr, end)` (not empty) touches a location locked instructions use.
    #[inline]
    fn atomic_range(&mut self, addr: u64, end: u64) -> bool {
        if self.known.atomic.is_empty() {
            return false;
        }
        // One granule (most accesses): without the general walk.
        if end - (addr & !7) <= 8 {
            return self.atomic_in(addr & !7, byte_mask(addr & !7, addr, end));
        }
        for (g, mask) in granules(addr, end) {
            if self.atomic_in(g, mask) {
                return true;
            }
        }
        false
    }

    /// The [`OWN`] and [`ATOMIC`] flags of page `p`.
    #[inline(always)]
    fn page(&mut self, p: u64) -> u8 {
        let c = self.pages[p as usize & (PAGE_CACHE - 1)];
        if c >> 2 == p {
            return c as u8 & 3;
        }
        self.page_missed(p)
    }

    /// [`page`](Self::page) where the cache does not hold it.
    #[cold]
    #[inline(never)]
    fn page_missed(&mut self, p: u64) -> u8 {
        let k = self.known;
        let atomic = k.atomic_pages.contains(&p);
        let region = k.region.is_some_and(|(lo, hi)| lo >> 12 <= p && p <= hi.saturating_sub(1) >> 12);
        // (A page of the thread's own may hold atomic locations: [`own`](Self::own) tells
        // its accesses to them from the others.)
        let own = match k.owners.get(&p) {
            Some(Owner::Unwritten) => true,
            Some(&Owner::Thread(t)) => t == self.thread,
            None => false,
        } && !region;
        let flags = if own { OWN } else { 0 } | if atomic { ATOMIC } else { 0 };
        self.pages[p as usize & (PAGE_CACHE - 1)] = p << 2 | flags as u64;
        flags
    }

    /// How many of `refs`, from the start, [`access`](Self::access) would take as quiet
    /// or skipped at once, taken so: references of block `block` (whose instructions are
    /// `insns`), which holds no locked instruction and is not the linker's; the C
    /// runtime's code where `runtime`, else the program's. Each such one is made outside a
    /// library call, and is either the runtime's called by the runtime (skipped, all of
    /// them), or to the thread's own pages, not a stack access that grows the stack, of a
    /// site already sent (quiet).
    #[inline(always)]
    pub fn quiet(&mut self, block: u32, runtime: bool, insns: &[InsnFacts], refs: &[MemEvent]) -> usize {
        let Some((caller, caller_runtime)) = self.context else {
            return 0;
        };
        debug_assert_eq!(self.context, (!self.in_library()).then(|| self.caller()));
        if runtime && caller_runtime {
            // The runtime's internals: `access` skips each, whatever its page, size or site
            // (a runtime instruction's accesses are of its own class, never a stack one).
            self.skipped += refs.len() as u64;
            return refs.len();
        }
        let mask = self.sent_sites(block, caller, insns);
        let (low, high) = self.stack;
        let mut n = 0;
        for r in refs {
            let i = r.insn as usize;
            if i >= 64 || mask >> i & 1 == 0 {
                break;
            }
            // (The bit is set for instructions of the block only.)
            let Some(f) = insns.get(i) else { break };
            let write = r.access == Access::Write;
            // Of the size (and pc) whose site was found sent; a size of 0 is skipped.
            if r.size == 0 || r.size != if write { f.write } else { f.read } as u32 || r.pc != f.pc {
                break;
            }
            let end = access_end(r.addr, r.size);
            if f.stack && (r.addr < low || end > high) {
                break;
            }
            if !self.own(r.addr, end) {
                break;
            }
            n += 1;
        }
        self.quiet += n as u64;
        n
    }

    /// The instructions of block `block` run from `caller` whose sites are all sent, as a
    /// [`BlockSites`] mask.
    #[inline]
    fn sent_sites(&mut self, block: u32, caller: u64, insns: &[InsnFacts]) -> u64 {
        let h = (block as usize ^ (caller as usize).wrapping_mul(0x9e37_79b9) >> 20) & (BLOCK_CACHE - 1);
        let e = &self.blocks[h];
        if e.block == block && e.caller == caller && (e.whole || e.sent_at == self.sent) {
            return e.mask;
        }
        self.sent_sites_missed(h, block, caller, insns)
    }

    /// [`sent_sites`](Self::sent_sites) where the cache does not hold it.
    #[cold]
    #[inline(never)]
    fn sent_sites_missed(&mut self, h: usize, block: u32, caller: u64, insns: &[InsnFacts]) -> u64 {
        // (A plain or runtime block's accesses are neither atomic nor the kernel's.)
        let sent = |pc: u64, write: bool, size: u16| {
            let s = Site { pc, caller, write, size: size as u32, atomic: false, kernel: false };
            size == 0 || self.sites.get(&s).is_some_and(|id| id & SENT != 0)
        };
        let (mut mask, mut whole) = (0u64, true);
        for (i, f) in insns.iter().enumerate().take(64) {
            if !f.sized {
                continue;
            }
            if sent(f.pc, false, f.read) && sent(f.pc, true, f.write) {
                mask |= 1 << i;
            } else {
                whole = false;
            }
        }
        self.blocks[h] = BlockSites { block, sent_at: self.sent, caller, mask, whole };
        mask
    }

    /// Whether `[addr, end)` lies in [`OWN`] pages and holds no atomic location.
    #[inline]
    fn own(&mut self, addr: u64, end: u64) -> bool {
        let p = addr >> 12;
        // Most accesses lie in one page, and one without atomic locations: one comparison
        // with its cache entry.
        if end.saturating_sub(1) >> 12 <= p {
            if self.pages[p as usize & (PAGE_CACHE - 1)] == p << 2 | OWN as u64 {
                return true;
            }
            let f = self.page(p);
            return f & OWN != 0 && (f & ATOMIC == 0 || self.no_atomic(addr, end));
        }
        self.own_pages(addr, end)
    }

    /// [`own`](Self::own) of a range across pages.
    #[cold]
    #[inline(never)]
    fn own_pages(&mut self, addr: u64, end: u64) -> bool {
        let mut atomic = false;
        for p in page_numbers(addr, end) {
            let f = self.page(p);
            if f & OWN == 0 {
                return false;
            }
            atomic |= f & ATOMIC != 0;
        }
        !atomic || self.no_atomic(addr, end)
    }

    /// Whether `[addr, end)` holds no atomic location. (An atomic location's accesses
    /// release or acquire, which is not the thread's business alone even where no other
    /// thread touches its page.)
    #[inline(never)]
    fn no_atomic(&mut self, addr: u64, end: u64) -> bool {
        // (An empty access is taken as its first byte's, as `is_atomic` takes it.)
        !self.atomic_range(addr, end.max(access_end(addr, 1)))
    }

    /// Whether locked instructions use bytes `mask` of the granule at `g`.
    #[inline]
    fn atomic_in(&mut self, g: u64, mask: u8) -> bool {
        self.page(g >> 12) & ATOMIC != 0 && self.known.atomic.get(&g).is_some_and(|&m| m & mask != 0)
    }

    /// The thread's number for `s`, naming it first where it is new, with [`SENT`] where
    /// an access of it was sent.
    #[inline]
    fn site(&mut self, s: Site, out: &mut Vec<Act>) -> u32 {
        let h = cache_slot(&s);
        let rest = packed(&s);
        let c = &self.cache[h];
        if c.pc == s.pc && c.caller == s.caller && c.rest == rest && rest != u32::MAX {
            return c.id;
        }
        self.site_missed(s, h, rest, out)
    }

    /// [`site`](Self::site) where the cache does not hold it.
    #[cold]
    #[inline(never)]
    fn site_missed(&mut self, s: Site, h: usize, rest: u32, out: &mut Vec<Act>) -> u32 {
        let next = self.sites.len() as u32;
        let id = *self.sites.entry(s).or_insert(next);
        if id == next {
            out.push(Act::Site(s));
        }
        self.cache[h] = Cached { pc: s.pc, caller: s.caller, rest, id };
        id
    }

    /// Notes that an access of site `s` was sent.
    #[cold]
    #[inline(never)]
    fn sent(&mut self, s: Site) {
        if let Some(id) = self.sites.get_mut(&s) {
            *id |= SENT;
        }
        self.sent = self.sent.wrapping_add(1);
        let c = &mut self.cache[cache_slot(&s)];
        if c.pc == s.pc && c.caller == s.caller && c.rest == packed(&s) {
            c.id |= SENT;
        }
    }

    /// Adds to `out` what `ev` comes to.
    pub fn lower(&mut self, ev: Ev, out: &mut Vec<Act>) {
        let before = out.len();
        let access = matches!(ev, Ev::Access { .. } | Ev::Kernel { .. });
        // (The events that move the call stack or the watched calls under way.)
        let moves = matches!(ev, Ev::Block { .. } | Ev::Flow(_) | Ev::Signal | Ev::SignalReturn | Ev::Call { .. } | Ev::Return { .. });
        match ev {
            Ev::Block { addr } => {
                for e in self.calls.block(addr) {
                    out.push(Act::Ended(Box::new(e)));
                }
            }
            Ev::Flow(tr) => self.flow(tr),
            Ev::Signal => {
                // A handler is the kernel's call, not the runtime's.
                let _ = self.frames.signal(false);
            }
            Ev::SignalReturn => {
                if let Some(k) = self.frames.handler() {
                    self.frames.truncate(k);
                }
            }
            Ev::Access { pc, addr, size, write, class } => self.access(pc, addr, size, write, class, false, out),
            Ev::Kernel { pc, addr, size, write, class } => self.access(pc, addr, size.min(syscalls::SHADOWED), write, class, true, out),
            Ev::Sync(seq) => out.push(Act::Sync(seq)),
            Ev::Release(a) => out.push(Act::Release(a)),
            Ev::Acquire(a) => out.push(Act::Acquire(a)),
            Ev::Call { func, args, ret } => {
                if let Some(p) = self.calls.call(func, args, ret) {
                    let site = self.call_site(ret);
                    out.push(Act::Call(Box::new((p, site))));
                }
            }
            Ev::Return { func, value } => {
                for e in self.calls.ret(func, value) {
                    out.push(Act::Ended(Box::new(e)));
                }
            }
            Ev::Syscall { nr, args } => out.push(Act::Syscall(Box::new((nr, args)))),
            Ev::SyscallReturn { value } => out.push(Act::SyscallReturn(value)),
            Ev::Descriptors(fds) => out.push(Act::Descriptors(fds)),
            Ev::Start => {}
            Ev::End => out.push(Act::End),
        }
        if moves {
            self.context = (!self.in_library()).then(|| self.caller());
        }
        // An event that reaches the engine may change what the thread's next accesses are
        // checked as: its repeats so far are counted before it, and none after it.
        if !access && out.len() > before {
            if self.quiet > 0 {
                out.insert(before, Act::Quiet(std::mem::take(&mut self.quiet)));
            }
            self.repeats.renew();
        }
    }

    /// Adds to `out` what entering the block at `addr` comes to: [`lower`](Self::lower) of
    /// its [`Ev::Block`], which ends the watched calls returning there (if any are under
    /// way).
    #[inline]
    pub fn enter(&mut self, addr: u64, out: &mut Vec<Act>) {
        if !self.calls.pending().is_empty() {
            self.lower(Ev::Block { addr }, out);
        }
    }

    /// Adds the counts of accesses skipped and quiet since the last to `out`.
    pub fn flush(&mut self, out: &mut Vec<Act>) {
        if self.skipped > 0 {
            out.push(Act::Skipped(std::mem::take(&mut self.skipped)));
        }
        self.flush_quiet(out);
    }

    /// Adds the count of quiet accesses since the last to `out`.
    #[inline]
    fn flush_quiet(&mut self, out: &mut Vec<Act>) {
        if self.quiet > 0 {
            out.push(Act::Quiet(std::mem::take(&mut self.quiet)));
        }
    }

    /// Other threads' events came since this thread's last: its repeats start anew. (The
    /// analysis's interleaving takes a thread's stretch whole, resuming it only after a
    /// sync record or a hold, which start them anew already; the engine's tests switch
    /// threads anywhere.)
    #[cfg(test)]
    pub fn resume(&mut self, out: &mut Vec<Act>) {
        self.renew(out);
    }

    /// Starts a new generation of repeats, counting those so far first.
    #[cold]
    #[inline(never)]
    fn renew(&mut self, out: &mut Vec<Act>) {
        self.flush_quiet(out);
        self.repeats.renew();
    }

    fn flow(&mut self, tr: Transition) {
        // A frame is the runtime's where its call returns into the runtime; a tail call
        // stays where the frame it replaces was.
        let runtime = match tr {
            Transition::Call { ret, .. } => Some(self.known.in_runtime(ret)),
            _ => None,
        };
        match self.frames.apply(tr, |_, _, top| runtime.unwrap_or_else(|| top.is_some_and(|f| f.data))) {
            Step::Close(k) => self.frames.truncate(k),
            // Only Callgrind's PLT folding makes it: the frame stays as it was.
            Step::Rebind { old, .. } => drop(self.frames.push(old)),
            Step::Pushed(_) | Step::Confined | Step::Beyond(_) => {}
        }
    }

    /// Where the thread's call returning to `ret` was made, as (pc, caller), if it is the
    /// program's: not the C runtime's, nor made inside another watched call.
    fn call_site(&self, ret: u64) -> Option<(u64, u64)> {
        let pending = self.calls.pending();
        if ret == 0 || self.known.in_runtime(ret) || pending[..pending.len().saturating_sub(1)].iter().any(|p| !p.func.runs_program_code())
        {
            return None;
        }
        // The frame below the call's own (if the call was seen as one) names the caller.
        let frames = self.frames.frames();
        let caller = match frames.iter().rposition(|f| f.ret == ret) {
            Some(k) => frames[..k].last().map_or(0, |f| f.ret),
            None => frames.last().map_or(0, |f| f.ret),
        };
        // The call instruction's last byte: its line, as a debugger's backtrace gives it.
        Some((ret - 1, if caller == NO_RETURN { 0 } else { caller }))
    }

    /// The return address of the thread's innermost frame (0 where there is none, or it
    /// returns nowhere: a handler's, or a tail call's above one), and whether it returns
    /// into the C runtime (true with no frame).
    #[inline]
    fn caller(&self) -> (u64, bool) {
        self.frames.top().map_or((0, true), |f| (if f.ret == NO_RETURN { 0 } else { f.ret }, f.data))
    }

    /// Whether a watched library call that runs no program code is under way: the
    /// thread's accesses now are the library's.
    #[inline]
    fn in_library(&self) -> bool {
        self.calls.pending().iter().any(|p| !p.func.runs_program_code())
    }

    /// An access (the kernel's for a system call, `kernel`): checked, or counted as skipped.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn access(&mut self, pc: u64, addr: u64, size: u32, write: bool, class: Class, kernel: bool, out: &mut Vec<Act>) {
        if class == Class::Stack {
            let stack = (self.stack.0.min(addr), self.stack.1.max(access_end(addr, size)));
            if stack != self.stack {
                self.stack = stack;
                self.renew(out);
                out.push(Act::Stack(stack.0, stack.1));
            }
        }
        let (caller, caller_runtime) = self.caller();
        // The runtime's code called by the runtime: its own internals, ordered by its own
        // locks (which make no happens-before here).
        let internal = class == Class::Runtime && caller_runtime;
        let skip = matches!(class, Class::RuntimeAtomic | Class::Linker) || internal || self.in_library() || size == 0;
        let read = !write && !kernel && matches!(class, Class::Plain | Class::Stack);
        if skip && !read {
            self.skipped += 1;
            return;
        }
        let atomic = class == Class::Atomic;
        let end = access_end(addr, size);
        // Memory only this thread touches, holding no atomic location and outside the
        // region: nothing to hold for, nothing to find or change once the site is named.
        if !kernel && self.own(addr, end) {
            if skip {
                self.skipped += 1;
                return;
            }
            let s = Site { pc, caller, write, size, atomic, kernel };
            let site = self.site(s, out);
            if site & SENT != 0 {
                self.quiet += 1;
                return;
            }
            self.send(addr, site, 0, s, out);
            return;
        }
        self.access_unowned(addr, end, read, skip, Site { pc, caller, write, size, atomic, kernel }, out);
    }

    /// [`access`](Self::access) of memory not the thread's own (or the kernel's access):
    /// apart, so that the common case, an access to the thread's own pages, saves and
    /// restores fewer registers.
    #[inline(never)]
    fn access_unowned(&mut self, addr: u64, end: u64, read: bool, skip: bool, s: Site, out: &mut Vec<Act>) {
        let Site { size, atomic, kernel, .. } = s;
        let shared = !atomic && self.is_atomic(addr, size);
        if shared && read {
            self.renew(out);
            out.push(Act::Hold);
        }
        if skip {
            self.skipped += 1;
            return;
        }
        let mut flags = if kernel { KERNEL } else { 0 };
        if shared {
            flags |= SHARED_ATOMIC;
        }
        let site = self.site(s, out);
        let counted = self.known.region.is_some_and(|(lo, hi)| addr < hi && end > lo);
        if flags != 0 {
            // An acquire or release, or the kernel's (checked at another epoch for a send):
            // not a plain access to take repeats of.
            self.renew(out);
        } else if counted {
            self.repeats.forget(addr, end);
        } else if self.repeats.repeats(addr, end, site & !SENT) {
            self.quiet += 1;
            return;
        }
        self.send(addr, site, flags, s, out);
    }

    /// Sends an access at site `s` (numbered `site`, with [`SENT`] where one was) to the
    /// engine, after the count of those quiet before it.
    #[inline]
    fn send(&mut self, addr: u64, site: u32, flags: u8, s: Site, out: &mut Vec<Act>) {
        self.flush_quiet(out);
        // (A plain load of an atomic location is an acquire, not checked: its site is not
        // numbered by it.)
        if site & SENT == 0 && (flags & SHARED_ATOMIC == 0 || s.write) {
            self.sent(s);
        }
        out.push(Act::Access { addr, site: site & !SENT, flags });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page is a thread's own when no other thread touches it and no watched call names
    /// it, and every thread's when no thread writes it and no watched call names it: a
    /// range across pages notes each of them.
    #[test]
    fn owners_are_the_only_thread_touching_a_page() {
        let mut a = Owners::default();
        let mut b = Owners::default();
        a.touch(0x1000, 0x1008, true);
        a.touch(0x2ffc, 0x3004, true); // pages 2 and 3
        a.touch(0x5000, 0x5001, true);
        a.touch(0x6000, 0x6001, false);
        a.touch(0x8000, 0x8001, false);
        a.touch(0x9000, 0x9001, false);
        b.touch(0x3000, 0x3001, false);
        b.touch(0x4000, 0x4000 + 3 * 4096, false); // pages 4, 5, 6
        b.touch(0x4ff0, 0x5010, true); // pages 4 and 5
        b.touch(0x7000, 0x7001, true);
        b.touch(0x8000, 0x8004, false);
        b.touch(0x9000, 0x9004, false);
        b.share(0x1ff0, 0x2010); // pages 1 and 2
        b.share(0x9000, 0x9001);
        let owners = Owners::owners(vec![a, b]);
        let mut got: Vec<(u64, Owner)> = owners.into_iter().collect();
        got.sort_by_key(|x| x.0);
        assert_eq!(got, vec![(4, Owner::Thread(1)), (6, Owner::Unwritten), (7, Owner::Thread(1)), (8, Owner::Unwritten)]);
    }

    /// References noted together note the pages and written pages that noting each one
    /// alone does: runs in one page, reads then writes of a page, writes then reads,
    /// ranges across pages, empty and huge sizes, and more pages than `recent` holds.
    #[test]
    fn touch_refs_notes_what_touch_notes() {
        for seed in 1..=200u64 {
            let mut rand = crate::races::xorshift(seed);
            let refs: Vec<MemEvent> = (0..rand(400) + 1)
                .map(|_| {
                    let page = match rand(4) {
                        0 => rand(4),
                        1 => rand(600),
                        _ => 7,
                    };
                    let size = match rand(8) {
                        0 => 0,
                        1 => 1 + rand(3 * 4096) as u32,
                        _ => 1 << rand(4),
                    };
                    let access = if rand(3) == 0 { Access::Write } else { Access::Read };
                    let addr = if rand(50) == 0 { u64::MAX - rand(8) } else { (page << 12) + rand(4096) };
                    MemEvent { pc: 0x401000, addr, size, access, conditional: false, insn: 0 }
                })
                .collect();
            let mut one = Owners::default();
            for r in &refs {
                one.touch(r.addr, access_end(r.addr, r.size.max(1)), r.access == Access::Write);
            }
            let mut all = Owners::default();
            let cut = rand(refs.len() as u64 + 1) as usize;
            all.touch_refs(&refs[..cut]);
            all.touch_refs(&refs[cut..]);
            assert_eq!((all.pages, all.written), (one.pages, one.written), "seed {seed}");
        }
    }
}
