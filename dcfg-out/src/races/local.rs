//! What one thread's own events decide, worked out on the core that recovers the thread
//! rather than on the [engine](super::engine)'s, which every thread's events pass through:
//! the thread's call stack and watched calls under way, so whose each access is and
//! whether it is checked; its sites, numbered per thread; its stack's extent; and which
//! accesses touch a location locked instructions use. The engine is left what needs the
//! order between threads.

use super::engine::Site;
use super::feed::{Class, Ev};
use super::shadow::{access_end, byte_mask, granules};
use crate::program::calls::{CallStack, Step, Transition, NO_RETURN};
use crate::program::watched::{Ended, Pending, Watched};
use dep_profile::syscalls;
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
}

impl Known {
    /// `atomic` granules, the C runtime's modules at `runtime`.
    pub fn new(atomic: AtomicBytes, mut runtime: Vec<(u64, u64)>) -> Known {
        runtime.sort_unstable();
        Known { atomic_pages: atomic.keys().map(|g| g >> 12).collect(), atomic, runtime }
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
    cache: Box<[Cached]>,
    /// Pages asked about (direct-mapped by page number), and whether locked instructions
    /// use granules of each: an access mostly goes to one of a few pages (the stack, the
    /// data being walked), which one entry alone would keep missing.
    atomic_pages: Box<[(u64, bool)]>,
    skipped: u64,
}

/// Entries of a thread's cache of pages with atomic locations (a power of two).
const PAGE_CACHE: usize = 64;

/// Entries of a thread's site cache (a power of two).
const SITE_CACHE: usize = 2048;

/// A site in the cache: its pc and caller, the rest of it packed (size, then whether it
/// writes, is atomic, is the kernel's; all ones for an empty entry), and its number.
#[derive(Clone, Copy)]
struct Cached {
    pc: u64,
    caller: u64,
    rest: u64,
    id: u32,
}

impl<'k> Local<'k> {
    /// A thread's view, with nothing seen yet.
    pub fn new(known: &'k Known) -> Local<'k> {
        Local {
            known,
            frames: CallStack::with_limit(MAX_FRAMES),
            calls: Watched::default(),
            stack: (u64::MAX, 0),
            sites: FxHashMap::default(),
            cache: vec![Cached { pc: 0, caller: 0, rest: u64::MAX, id: 0 }; SITE_CACHE].into_boxed_slice(),
            atomic_pages: vec![(u64::MAX, false); PAGE_CACHE].into_boxed_slice(),
            skipped: 0,
        }
    }

    /// Whether `[addr, addr + size)` touches a location locked instructions use.
    #[inline]
    pub fn is_atomic(&mut self, addr: u64, size: u32) -> bool {
        if self.known.atomic.is_empty() {
            return false;
        }
        let end = access_end(addr, size.max(1));
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

    /// Whether locked instructions use bytes `mask` of the granule at `g`.
    #[inline]
    fn atomic_in(&mut self, g: u64, mask: u8) -> bool {
        let page = g >> 12;
        let c = &mut self.atomic_pages[page as usize & (PAGE_CACHE - 1)];
        if c.0 != page {
            *c = (page, self.known.atomic_pages.contains(&page));
        }
        c.1 && self.known.atomic.get(&g).is_some_and(|&m| m & mask != 0)
    }

    /// The thread's number for `s`, naming it first where it is new.
    #[inline]
    fn site(&mut self, s: Site, out: &mut Vec<Act>) -> u32 {
        // Most accesses repeat a recent site: a direct-mapped cache before the table, by pc
        // (and whether it writes), so that a loop's sites sit together in it.
        let h = ((s.pc << 1) | s.write as u64) as usize & (SITE_CACHE - 1);
        let rest = s.size as u64 | (s.write as u64) << 32 | (s.atomic as u64) << 33 | (s.kernel as u64) << 34;
        let c = &self.cache[h];
        if c.pc == s.pc && c.caller == s.caller && c.rest == rest {
            return c.id;
        }
        let next = self.sites.len() as u32;
        let id = *self.sites.entry(s).or_insert(next);
        if id == next {
            out.push(Act::Site(s));
        }
        self.cache[h] = Cached { pc: s.pc, caller: s.caller, rest, id };
        id
    }

    /// Adds to `out` what `ev` comes to.
    pub fn lower(&mut self, ev: Ev, out: &mut Vec<Act>) {
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
    }

    /// Adds the count of accesses skipped since the last to `out`.
    pub fn flush(&mut self, out: &mut Vec<Act>) {
        if self.skipped > 0 {
            out.push(Act::Skipped(std::mem::take(&mut self.skipped)));
        }
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

    /// An access (the kernel's for a system call, `kernel`): checked, or counted as skipped.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn access(&mut self, pc: u64, addr: u64, size: u32, write: bool, class: Class, kernel: bool, out: &mut Vec<Act>) {
        if class == Class::Stack {
            let stack = (self.stack.0.min(addr), self.stack.1.max(access_end(addr, size)));
            if stack != self.stack {
                self.stack = stack;
                out.push(Act::Stack(stack.0, stack.1));
            }
        }
        // A handler's frame (or a tail call's above one) returns nowhere: no caller to name.
        let (caller, caller_runtime) = self.frames.top().map_or((0, true), |f| (if f.ret == NO_RETURN { 0 } else { f.ret }, f.data));
        // The runtime's code called by the runtime: its own internals, ordered by its own
        // locks (which make no happens-before here).
        let internal = class == Class::Runtime && caller_runtime;
        let in_library = self.calls.pending().iter().any(|p| !p.func.runs_program_code());
        let skip = matches!(class, Class::RuntimeAtomic | Class::Linker) || internal || in_library || size == 0;
        let read = !write && !kernel && matches!(class, Class::Plain | Class::Stack);
        if skip && !read {
            self.skipped += 1;
            return;
        }
        let atomic = class == Class::Atomic;
        let shared = !atomic && self.is_atomic(addr, size);
        if shared && read {
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
        let site = self.site(Site { pc, caller, write, size, atomic, kernel }, out);
        out.push(Act::Access { addr, site, flags });
    }
}
