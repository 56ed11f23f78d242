//! Calls and returns: how control passing from one block to the next moves the call stack
//! ([`BlockExits`], [`CallFlow`]), and the stack itself ([`CallStack`]), one definition for
//! every output that follows calls (Callgrind's costs, WET's control dependence, the race
//! detector's callers), so that the same return closes the same frames in all of them.
//!
//! The rules are Callgrind's: a call pushes a frame; a return pops to the innermost frame
//! whose return address it reaches (a return that skips frames, after a longjmp or an
//! exception, closes them all), and one that reaches none pops nothing; a jump into
//! another function's entry is a call (a tail call) returning where the frame it leaves
//! returns, so the return that ends the chain closes both; PLT code belongs to the call
//! (or jump) that entered it, so a call through a stub is one call, to where the stub
//! leads, and the dynamic linker's lazy binder (`_dl_runtime_resolve*`, which a stub's
//! first call reaches) is a call of its own that closes as it jumps to the function it
//! bound, which the frame's caller then calls from the same site; a signal handler runs in a frame of its own, returns inside it reach only the
//! frames above it, and sigreturn closes it with everything above it. A stack holding
//! only part of a thread's frames (a chunk's, recovered in parallel) says where a
//! transition reaches below it, for the thread's stack to finish.

use dep_profile::semantics::Flow;
use dep_recover::plans::Plans;
use rustc_hash::FxHashMap;

use super::symbols::Symbolizer;

/// The return address of frames no return reaches (a signal handler's, a tail call's above
/// one): no code address is all ones.
pub const NO_RETURN: u64 = u64::MAX;

/// Frames a stack keeps at most: a program that leaves calls by longjmp forever must not
/// grow it without bound. The outer half goes when it is full.
pub const MAX_FRAMES: usize = 1 << 20;

/// How a block leaves when it runs whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// A call at `site` that returns to `ret`.
    Call {
        site: u64,
        ret: u64,
    },
    Return,
    /// A jump at `site`: conditional (with its target), unconditional or indirect.
    Jump {
        site: u64,
        conditional: Option<u64>,
    },
    Other,
}

/// What control passing from a block run whole into the next does to the call stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// A call at `site`, returning to `ret`, entered block `to`.
    Call { site: u64, ret: u64, to: u32 },
    /// A return reached address `to`.
    Return { to: u64 },
    /// A jump at `site` into another function's entry, block `to`.
    TailCall { site: u64, to: u32 },
    /// The lazy binder jumped to the function it bound, block `to`: its frame closes and
    /// one calling `to` from the same site takes its place (made only with PLT code
    /// folded into calls, as Callgrind does).
    Bound { to: u32 },
}

/// Per block id of a profile's block table: how it leaves, whether a function starts at it,
/// its function, and whether it is PLT code or the lazy binder.
#[derive(Default)]
pub struct BlockExits {
    pub exit: Vec<Exit>,
    pub entry: Vec<bool>,
    /// The function's index (blocks of the same function share one: one name and one
    /// start, so two static functions of one name are two), `u32::MAX` for blocks with no
    /// plan.
    pub func: Vec<u32>,
    pub plt: Vec<bool>,
    /// Whether the block is the dynamic linker's lazy binder (`_dl_runtime_resolve*`).
    pub binder: Vec<bool>,
    /// The address of each block's first instruction.
    pub addr: Vec<u64>,
    /// Function names by index.
    pub names: Vec<String>,
    /// Per block, the `KIND_*` bits of the above that tell a step with no transition
    /// ([`CallFlow::plain_step`]): one byte a block, where most steps look no further.
    pub kind: Vec<u8>,
}

/// The block leaves by a call or a return.
const KIND_CALL_RET: u8 = 1;
/// The block leaves by a jump (a tail call where it reaches another function's entry).
const KIND_JUMP: u8 = 2;
/// A function starts at the block.
const KIND_ENTRY: u8 = 4;
/// The block is PLT code or the lazy binder.
const KIND_LINK: u8 = 8;

impl BlockExits {
    /// The tables with [`kind`](Self::kind) made from the others (as `build` makes it; for
    /// tables assembled by hand).
    pub fn with_kinds(mut self) -> BlockExits {
        self.kind = (0..self.exit.len())
            .map(|b| {
                let k = match self.exit[b] {
                    Exit::Call { .. } | Exit::Return => KIND_CALL_RET,
                    Exit::Jump { .. } => KIND_JUMP,
                    Exit::Other => 0,
                };
                let flag = |v: &[bool], bit: u8| if v.get(b).copied().unwrap_or(false) { bit } else { 0 };
                k | flag(&self.entry, KIND_ENTRY) | flag(&self.plt, KIND_LINK) | flag(&self.binder, KIND_LINK)
            })
            .collect();
        self
    }

    /// The exits of every block `plans` can decode; functions are named by `symbols`.
    pub fn build(plans: &Plans, symbols: &Symbolizer) -> BlockExits {
        let n = plans.len();
        let mut ids: FxHashMap<(String, u64), u32> = FxHashMap::default();
        let mut names = Vec::new();
        let mut e = BlockExits {
            exit: Vec::with_capacity(n),
            entry: Vec::with_capacity(n),
            func: Vec::with_capacity(n),
            plt: Vec::with_capacity(n),
            binder: Vec::with_capacity(n),
            addr: Vec::with_capacity(n),
            names: Vec::new(),
            kind: Vec::new(),
        };
        for b in 0..n as u32 {
            let Some(p) = plans.get_plan(b) else {
                e.exit.push(Exit::Other);
                e.entry.push(false);
                e.func.push(u32::MAX);
                e.plt.push(false);
                e.binder.push(false);
                e.addr.push(0);
                continue;
            };
            // The flow is the block's exit as recover::edges classifies every edge.
            let last = p.insns.last().map_or((p.addr, p.addr), |i| (i.pc, i.pc + i.len as u64));
            e.exit.push(match plans.exit(b) {
                Some((Flow::Call { .. } | Flow::IndirectCall, _)) => Exit::Call { site: last.0, ret: last.1 },
                Some((Flow::Return, _)) => Exit::Return,
                Some((Flow::Jump { target, conditional }, _)) => Exit::Jump { site: last.0, conditional: conditional.then_some(target) },
                Some((Flow::IndirectJump, _)) => Exit::Jump { site: last.0, conditional: None },
                _ => Exit::Other,
            });
            e.entry.push(symbols.is_function_start(p.addr));
            let function = symbols.function(p.addr);
            e.binder.push(function.0.starts_with(LAZY_BINDER));
            let next = ids.len() as u32;
            let id = *ids.entry(function).or_insert_with_key(|(name, _)| {
                names.push(name.clone());
                next
            });
            e.func.push(id);
            e.plt.push(symbols.in_plt(p.addr));
            e.addr.push(p.addr);
        }
        e.names = names;
        e.with_kinds()
    }

    /// Blocks in the table.
    pub fn len(&self) -> usize {
        self.exit.len()
    }

    /// Whether the table has no blocks.
    pub fn is_empty(&self) -> bool {
        self.exit.is_empty()
    }

    /// [`Transition::Bound`] where block `p`, run whole, is the lazy binder jumping into
    /// block `b`, the function it bound (Callgrind's `pop_on_jump`): the one test of it for
    /// flows within a chunk and across chunks.
    #[inline]
    pub fn bound(&self, p: u32, b: u32) -> Option<Transition> {
        let binder = |k: u32| self.binder.get(k as usize).copied().unwrap_or(false);
        (binder(p) && !binder(b) && matches!(self.exit.get(p as usize), Some(Exit::Jump { .. }))).then_some(Transition::Bound { to: b })
    }

    /// What control going from block `p`, run whole, into block `b` does to the stack.
    #[inline]
    pub fn transition(&self, p: u32, b: u32) -> Option<Transition> {
        let (p, b) = (p as usize, b as usize);
        match *self.exit.get(p)? {
            Exit::Call { site, ret } => Some(Transition::Call { site, ret, to: b as u32 }),
            Exit::Return => Some(Transition::Return { to: *self.addr.get(b)? }),
            Exit::Jump { site, .. } if *self.entry.get(b)? && self.func[b] != self.func[p] => {
                Some(Transition::TailCall { site, to: b as u32 })
            }
            Exit::Jump { .. } | Exit::Other => None,
        }
    }
}

/// The name glibc's lazy binders start with (`_dl_runtime_resolve_xsavec`, `_xsave`,
/// `_fxsave`), as Callgrind recognises them.
pub const LAZY_BINDER: &str = "_dl_runtime_resolve";

/// One thread's flow between blocks: the last block, if it ran whole and nothing broke the
/// flow since, and the PLT code under way.
#[derive(Clone, Copy, Debug, Default)]
pub struct CallFlow {
    /// The last block, when it ran whole and no marker came after it.
    pub last: Option<u32>,
    /// In PLT code entered by the call (with its return address) or jump at this site.
    pub plt: Option<(u64, Option<u64>)>,
    /// Whether PLT code is part of the call that entered it (Callgrind's `--skip-plt`,
    /// which charges its cost to the call site): the call is made when the stub is left,
    /// to where it leads. Otherwise a call through a stub is a call to the stub and a tail
    /// call from it, both closed by the same return.
    skip_plt: bool,
}

impl CallFlow {
    /// A flow that folds PLT code into the call that entered it.
    pub fn skipping_plt() -> CallFlow {
        CallFlow { skip_plt: true, ..CallFlow::default() }
    }

    /// Block `b` begins (and runs whole or not): the transition into it, if any.
    #[inline]
    pub fn block(&mut self, exits: &BlockExits, b: u32, whole: bool) -> Option<Transition> {
        let t = match self.last {
            Some(p) if self.plain_step(exits, p, b) => None,
            Some(p) => self.step(exits, p, b),
            None => {
                self.plt = None;
                None
            }
        };
        self.last = whole.then_some(b);
        t
    }

    /// Whether control passing from block `p` into block `b` is surely no transition and
    /// leaves the flow as it is, from the blocks' [`kind`](BlockExits::kind) bits alone: `p`
    /// leaves by neither a call nor a return, nor by a jump into a function's entry, and
    /// where PLT code is folded into calls, no stub is under way and neither block is PLT
    /// code or the binder. (Where it says no, [`step`](Self::step) decides.)
    #[inline]
    pub fn plain_step(&self, exits: &BlockExits, p: u32, b: u32) -> bool {
        let (Some(&kp), Some(&kb)) = (exits.kind.get(p as usize), exits.kind.get(b as usize)) else {
            return false;
        };
        if kp & KIND_CALL_RET != 0 || (kp & KIND_JUMP != 0 && kb & KIND_ENTRY != 0) {
            return false;
        }
        !self.skip_plt || (self.plt.is_none() && (kp | kb) & KIND_LINK == 0)
    }

    #[inline(never)]
    fn step(&mut self, exits: &BlockExits, p: u32, b: u32) -> Option<Transition> {
        if !self.skip_plt {
            return exits.transition(p, b);
        }
        // The binder jumps to the function it bound: its frame closes, and its caller calls
        // (or jumps to) the function from the same site, even where that is a PLT stub (a
        // non-PIE program's canonical PLT entry).
        if let Some(bound) = exits.bound(p, b) {
            return Some(bound);
        }
        let plt = exits.plt.get(b as usize).copied().unwrap_or(false);
        match (self.plt, exits.exit.get(p as usize).copied().unwrap_or(Exit::Other)) {
            // Leaving PLT code: the call (or jump) that entered it goes here.
            (Some((site, ret)), _) if !plt => {
                self.plt = None;
                Some(match ret {
                    Some(ret) => Transition::Call { site, ret, to: b },
                    None => Transition::TailCall { site, to: b },
                })
            }
            (Some(_), _) => None,
            (None, Exit::Call { site, ret }) if plt => {
                self.plt = Some((site, Some(ret)));
                None
            }
            (None, Exit::Jump { site, .. }) if plt => {
                self.plt = Some((site, None));
                None
            }
            (None, _) => exits.transition(p, b),
        }
    }

    /// A block with no plan, or a marker that breaks the flow (a signal, sigreturn, a
    /// thread's start or end): no transition into what comes next.
    #[inline]
    pub fn break_flow(&mut self) {
        self.last = None;
    }

    /// The site whose cost PLT block `b` is, if it is PLT code entered by a call or jump.
    #[inline]
    pub fn plt_site(&self, exits: &BlockExits, b: u32) -> Option<u64> {
        self.plt.filter(|_| exits.plt.get(b as usize).copied().unwrap_or(false)).map(|(site, _)| site)
    }
}

/// What kind of frame a stack entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    Call,
    TailCall,
    Signal,
}

/// A frame: the address that returns from it, its kind, and what its owner keeps in it.
#[derive(Clone, Copy, Debug)]
pub struct Frame<T> {
    pub ret: u64,
    pub kind: FrameKind,
    pub data: T,
}

/// What a return reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// The frames from this index up close.
    Frame(usize),
    /// No frame above the innermost signal handler's: nothing closes.
    Confined,
    /// No frame and no handler: nothing here closes, and a stack holding only part of the
    /// thread's frames hands the return on.
    Beyond,
}

/// What a transition did to a [`CallStack`] ([`CallStack::apply`]).
#[derive(Debug)]
pub enum Step<T> {
    /// A frame was pushed (a call, or a tail call replacing the innermost frame's
    /// function); the stack, full, dropped these outer frames first (outermost first;
    /// empty, without allocating, otherwise).
    Pushed(Vec<Frame<T>>),
    /// A return closes the frames from this index up; the owner pops them
    /// ([`CallStack::pop_above`], [`CallStack::truncate`]) doing what closing means to it.
    Close(usize),
    /// The lazy binder's frame was popped: the owner closes it and pushes in its place a
    /// frame of the same return address and kind, for the same call site, calling `to`.
    Rebind { old: Frame<T>, to: u32 },
    /// A return above the innermost signal handler's frame that reaches none: nothing
    /// changes.
    Confined,
    /// The transition concerns frames below this stack: a return that reaches no frame,
    /// or a tail call with no frame to replace (with the frame's data, made). A stack that
    /// holds the whole thread ignores it or opens a frame of its own; one that holds part
    /// of it hands the transition on.
    Beyond(Option<T>),
}

/// A call stack under Callgrind's rules (see the module's comment).
#[derive(Clone, Debug)]
pub struct CallStack<T> {
    frames: Vec<Frame<T>>,
    limit: usize,
    /// Signal handlers' frames among `frames`: with none, every return (which looks for the
    /// innermost) is spared a walk over the whole stack, whose frames an exception or a
    /// longjmp leaves behind by the thousand.
    signals: usize,
}

impl<T> Default for CallStack<T> {
    fn default() -> Self {
        CallStack { frames: Vec::new(), limit: MAX_FRAMES, signals: 0 }
    }
}

/// Signal handlers' frames among `frames`.
fn signals<T>(frames: &[Frame<T>]) -> usize {
    frames.iter().filter(|f| f.kind == FrameKind::Signal).count()
}

impl<T> CallStack<T> {
    /// A stack that keeps at most `limit` frames (at least 2).
    pub fn with_limit(limit: usize) -> CallStack<T> {
        CallStack { frames: Vec::new(), limit: limit.max(2), signals: 0 }
    }

    /// The frames, outermost first.
    pub fn frames(&self) -> &[Frame<T>] {
        &self.frames
    }

    /// What their owner keeps in the frames, outermost first, to update (their return
    /// addresses and kinds are the stack's).
    pub fn data_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.frames.iter_mut().map(|f| &mut f.data)
    }

    /// The innermost frame.
    pub fn top(&self) -> Option<&Frame<T>> {
        self.frames.last()
    }

    /// Frames on the stack.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether no frame is open.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Pushes a frame; when the stack is full, its outer half goes first and is returned,
    /// outermost first (empty, without allocating, otherwise).
    #[must_use]
    pub fn push(&mut self, f: Frame<T>) -> Vec<Frame<T>> {
        let dropped: Vec<Frame<T>> =
            if self.frames.len() >= self.limit { self.frames.drain(..self.frames.len() / 2).collect() } else { Vec::new() };
        self.signals -= signals(&dropped);
        self.signals += (f.kind == FrameKind::Signal) as usize;
        self.frames.push(f);
        dropped
    }

    /// A call that returns to `ret`.
    #[must_use]
    pub fn call(&mut self, ret: u64, data: T) -> Vec<Frame<T>> {
        self.push(Frame { ret, kind: FrameKind::Call, data })
    }

    /// A tail call: a frame returning where the innermost one does (nowhere above a signal
    /// handler's). None, pushing nothing, where the stack is empty: the frame it leaves is
    /// below this stack.
    #[must_use]
    pub fn tail_call(&mut self, data: T) -> Option<Vec<Frame<T>>> {
        let top = self.frames.last()?;
        let ret = if top.kind == FrameKind::Signal { NO_RETURN } else { top.ret };
        Some(self.push(Frame { ret, kind: FrameKind::TailCall, data }))
    }

    /// Applies a transition: a call pushes a frame, a tail call replaces the innermost
    /// frame's function with a frame of its own, a return says which frames it closes.
    /// `data(site, to, top)` makes a new frame's data from the call's site, the block it
    /// enters and the innermost frame before it.
    #[must_use]
    pub fn apply(&mut self, tr: Transition, data: impl FnOnce(u64, u32, Option<&Frame<T>>) -> T) -> Step<T> {
        match tr {
            Transition::Call { site, ret, to } => {
                let d = data(site, to, self.top());
                Step::Pushed(self.call(ret, d))
            }
            Transition::TailCall { site, to } => {
                let d = data(site, to, self.top());
                if self.frames.is_empty() {
                    Step::Beyond(Some(d))
                } else {
                    Step::Pushed(self.tail_call(d).expect("a frame to replace"))
                }
            }
            Transition::Return { to } => match self.return_to(to) {
                Reach::Frame(k) => Step::Close(k),
                Reach::Confined => Step::Confined,
                Reach::Beyond => Step::Beyond(None),
            },
            Transition::Bound { to } => match self.frames.last() {
                Some(f) if f.kind == FrameKind::Signal => Step::Confined,
                // (Not a handler's frame, just seen: the count stays.)
                Some(_) => Step::Rebind { old: self.frames.pop().expect("a frame"), to },
                None => Step::Beyond(None),
            },
        }
    }

    /// A signal handler starts.
    #[must_use]
    pub fn signal(&mut self, data: T) -> Vec<Frame<T>> {
        self.push(Frame { ret: NO_RETURN, kind: FrameKind::Signal, data })
    }

    /// The innermost signal handler's frame.
    pub fn handler(&self) -> Option<usize> {
        if self.signals == 0 {
            return None;
        }
        self.frames.iter().rposition(|f| f.kind == FrameKind::Signal)
    }

    /// What a return to `to` closes: the innermost frame above the innermost handler's
    /// whose return address it is, with the frames its tail calls replaced (whose return
    /// address they took). A recursive call from the same site has the same return
    /// address, but only the innermost activation returns.
    pub fn return_to(&self, to: u64) -> Reach {
        let floor = self.handler().map(|k| k + 1);
        let lo = floor.unwrap_or(0);
        match self.frames[lo..].iter().rposition(|f| f.ret == to) {
            Some(k) => {
                let mut k = k + lo;
                while k > lo && self.frames[k].kind == FrameKind::TailCall {
                    k -= 1;
                }
                Reach::Frame(k)
            }
            None if floor.is_some() => Reach::Confined,
            None => Reach::Beyond,
        }
    }

    /// Takes every frame, outermost first, leaving the stack empty.
    pub fn take(&mut self) -> Vec<Frame<T>> {
        self.signals = 0;
        std::mem::take(&mut self.frames)
    }

    /// Drops every frame from `k` up, for an owner that has nothing to do as they close.
    pub fn truncate(&mut self, k: usize) {
        self.signals -= signals(self.frames.get(k..).unwrap_or_default());
        self.frames.truncate(k);
    }

    /// Pops the innermost frame if the stack holds more than `k`: closing everything from
    /// frame `k` up is `while let Some(f) = stack.pop_above(k) { ... }`, innermost first.
    #[inline]
    pub fn pop_above(&mut self, k: usize) -> Option<Frame<T>> {
        if self.frames.len() > k {
            let f = self.frames.pop()?;
            self.signals -= (f.kind == FrameKind::Signal) as usize;
            Some(f)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed<T: Copy>(s: &mut CallStack<T>, k: usize) -> Vec<T> {
        std::iter::from_fn(|| s.pop_above(k)).map(|f| f.data).collect()
    }

    #[test]
    fn return_closes_the_innermost_matching_frame_and_what_a_longjmp_left() {
        let mut s = CallStack::default();
        assert!(s.call(0x10, 'a').is_empty());
        assert!(s.call(0x20, 'b').is_empty());
        assert!(s.call(0x30, 'c').is_empty());
        assert_eq!(s.return_to(0x99), Reach::Beyond);
        // A return to a's return address, from c (b and c were left by a longjmp).
        let Reach::Frame(k) = s.return_to(0x10) else { panic!("reaches a") };
        assert_eq!(closed(&mut s, k), vec!['c', 'b', 'a']);
        assert!(s.is_empty());
    }

    #[test]
    fn transitions_apply_as_calls_tail_calls_and_returns() {
        let mut s = CallStack::with_limit(4);
        let call = |ret| Transition::Call { site: ret - 5, ret, to: 1 };
        let tail = Transition::TailCall { site: 0x77, to: 2 };
        // A tail call with nothing to replace is below the stack; its frame comes back.
        assert!(matches!(s.apply(tail, |_, _, top| top.map_or('x', |f| f.data)), Step::Beyond(Some('x'))));
        assert!(s.is_empty());
        assert!(matches!(s.apply(call(0x10), |_, _, _| 'a'), Step::Pushed(d) if d.is_empty()));
        // The tail call's data is made seeing the frame it replaces.
        assert!(matches!(s.apply(tail, |_, _, top| top.map_or('x', |f| f.data.to_ascii_uppercase())), Step::Pushed(d) if d.is_empty()));
        assert_eq!(s.top().map(|f| (f.data, f.ret, f.kind)), Some(('A', 0x10, FrameKind::TailCall)));
        assert!(matches!(s.apply(Transition::Return { to: 0x99 }, |_, _, _| unreachable!()), Step::Beyond(None)));
        assert!(matches!(s.apply(Transition::Return { to: 0x10 }, |_, _, _| unreachable!()), Step::Close(0)));
        assert_eq!(s.len(), 2, "the owner closes the frames");
        s.truncate(0);
        // Full: the outer half is dropped and handed back.
        for (i, c) in ['b', 'c', 'd', 'e', 'f'].into_iter().enumerate() {
            let step = s.apply(call(0x100 + i as u64), |_, _, _| c);
            let dropped = match step {
                Step::Pushed(d) => d.iter().map(|f| f.data).collect::<String>(),
                _ => panic!("a call pushes"),
            };
            assert_eq!(dropped, if c == 'f' { "bc" } else { "" });
        }
        assert!(s.signal('s').is_empty());
        assert!(matches!(s.apply(Transition::Return { to: 0x10 }, |_, _, _| unreachable!()), Step::Confined));
    }

    #[test]
    fn recursion_closes_the_innermost_activation() {
        let mut s = CallStack::default();
        for d in 0..3 {
            assert!(s.call(0x40, d).is_empty());
        }
        assert_eq!(s.return_to(0x40), Reach::Frame(2));
        // A recursive activation that tail-calls: the return closes it and the tail call.
        assert!(s.tail_call(3).is_some());
        assert_eq!(s.return_to(0x40), Reach::Frame(2));
    }

    #[test]
    fn tail_calls_return_with_the_frame_they_leave() {
        let mut s = CallStack::default();
        assert!(s.tail_call('x').is_none(), "no frame to leave: it is below this stack");
        assert!(s.call(0x10, 'a').is_empty());
        assert!(s.tail_call('t').is_some());
        assert!(s.tail_call('u').is_some());
        assert_eq!(s.frames()[2].ret, 0x10);
        assert_eq!(s.return_to(0x10), Reach::Frame(0));
    }

    #[test]
    fn handlers_confine_returns_and_sigreturn_closes_them() {
        let mut s = CallStack::default();
        assert!(s.call(0x10, 'a').is_empty());
        assert!(s.signal('s').is_empty());
        assert_eq!(s.return_to(0x10), Reach::Confined, "a return in the handler does not reach the interrupted frames");
        let t = s.tail_call('t').expect("a frame is open");
        assert!(t.is_empty());
        assert_eq!(s.top().map(|f| f.ret), Some(NO_RETURN), "a tail call from a handler returns nowhere");
        assert!(s.call(0x50, 'h').is_empty());
        assert_eq!(s.return_to(0x50), Reach::Frame(3));
        let k = s.handler().expect("a handler is open");
        assert_eq!(closed(&mut s, k), vec!['h', 't', 's']);
        assert_eq!(s.return_to(0x10), Reach::Frame(0));
    }

    /// The innermost handler, and so what every return reaches, is the one a walk over
    /// the frames finds, through random calls, tail calls, handlers, returns, rebinds,
    /// truncations, pops and a small stack's dropped halves: the count of handlers' frames
    /// the stack keeps to spare that walk stays true.
    #[test]
    fn the_innermost_handler_is_the_one_a_walk_finds() {
        for seed in 1..=300u64 {
            let mut rand = crate::races::xorshift(seed);
            let mut s: CallStack<u32> = CallStack::with_limit(2 + rand(12) as usize);
            let mut handlers = 0;
            for step in 0..300u32 {
                let ret = 0x1000 + rand(6);
                match rand(10) {
                    0 | 1 => drop(s.call(ret, step)),
                    2 => drop(s.tail_call(step)),
                    3 => {
                        handlers += 1;
                        drop(s.signal(step))
                    }
                    4 | 5 => {
                        if let Step::Close(k) = s.apply(Transition::Return { to: ret }, |_, _, _| step) {
                            s.truncate(k)
                        }
                    }
                    6 => drop(s.apply(Transition::Bound { to: 7 }, |_, _, _| step)),
                    7 => drop(s.pop_above(rand(s.len() as u64 + 1) as usize)),
                    8 => s.truncate(rand(s.len() as u64 + 2) as usize),
                    _ if rand(10) == 0 => drop(s.take()),
                    _ => {}
                }
                let walk = s.frames().iter().rposition(|f| f.kind == FrameKind::Signal);
                assert_eq!(s.handler(), walk, "seed {seed} step {step}");
                assert_eq!(s.return_to(ret), CallStack { frames: s.frames.clone(), limit: s.limit, signals: usize::MAX }.return_to(ret));
            }
            assert!(handlers > 0);
        }
    }

    #[test]
    fn a_full_stack_drops_its_outer_half() {
        let mut s = CallStack::with_limit(4);
        for d in 0..4u64 {
            assert!(s.call(d, d).is_empty());
        }
        let dropped: Vec<u64> = s.call(4, 4).into_iter().map(|f| f.data).collect();
        assert_eq!(dropped, vec![0, 1]);
        assert_eq!(s.frames().iter().map(|f| f.data).collect::<Vec<_>>(), vec![2, 3, 4]);
        assert_eq!(s.return_to(0), Reach::Beyond);
    }

    fn exits() -> BlockExits {
        // 0: main, calls the PLT stub 1; 1: the stub, jumps to 2; 2: f's entry, jumps to g
        // (3, a tail call); 3: g, returns; 4: main again; 5: main, jumps within main (4).
        BlockExits {
            exit: vec![
                Exit::Call { site: 0x100, ret: 0x105 },
                Exit::Jump { site: 0x200, conditional: None },
                Exit::Jump { site: 0x300, conditional: None },
                Exit::Return,
                Exit::Jump { site: 0x105, conditional: Some(0x120) },
                Exit::Jump { site: 0x130, conditional: None },
            ],
            entry: vec![true, true, true, true, false, false],
            func: vec![0, 1, 2, 3, 0, 0],
            plt: vec![false, true, false, false, false, false],
            binder: vec![false; 6],
            addr: vec![0x100, 0x200, 0x300, 0x400, 0x105, 0x120],
            names: vec!["main".into(), "f@plt".into(), "f".into(), "g".into()],
            kind: Vec::new(),
        }
        .with_kinds()
    }

    #[test]
    fn flow_through_plt_stubs_is_a_call_and_a_tail_call() {
        let e = exits();
        let mut f = CallFlow::default();
        assert_eq!(f.block(&e, 0, true), None);
        assert_eq!(f.block(&e, 1, true), Some(Transition::Call { site: 0x100, ret: 0x105, to: 1 }));
        assert_eq!(f.plt_site(&e, 1), None);
        assert_eq!(f.block(&e, 2, true), Some(Transition::TailCall { site: 0x200, to: 2 }));
        assert_eq!(f.block(&e, 3, true), Some(Transition::TailCall { site: 0x300, to: 3 }));
        assert_eq!(f.block(&e, 4, true), Some(Transition::Return { to: 0x105 }));
    }

    #[test]
    fn flow_folds_plt_stubs_into_the_call_and_finds_tail_calls() {
        let e = exits();
        let mut f = CallFlow::skipping_plt();
        assert_eq!(f.block(&e, 0, true), None);
        assert_eq!(f.block(&e, 1, true), None, "entering the stub");
        assert_eq!(f.plt_site(&e, 1), Some(0x100));
        assert_eq!(f.block(&e, 2, true), Some(Transition::Call { site: 0x100, ret: 0x105, to: 2 }));
        assert_eq!(f.plt_site(&e, 2), None);
        assert_eq!(f.block(&e, 3, true), Some(Transition::TailCall { site: 0x300, to: 3 }));
        assert_eq!(f.block(&e, 4, true), Some(Transition::Return { to: 0x105 }));
        assert_eq!(f.block(&e, 5, true), None, "a jump within a function");
        assert_eq!(f.block(&e, 4, false), None);
        assert_eq!(f.block(&e, 5, true), None, "the block before was cut short");
        f.break_flow();
        assert_eq!(f.block(&e, 0, true), None);
    }

    /// Where the kinds alone say a step makes no transition, the full step agrees and
    /// leaves the flow as it was: every pair of 32 blocks, one of each way of leaving (a
    /// call, a return, a jump, falling through) with and without a function's entry, PLT
    /// code and the binder, with PLT code folded into calls or not, and a stub under way
    /// or not.
    #[test]
    fn plain_steps_are_steps_with_no_transition() {
        let ways = [Exit::Call { site: 0x10, ret: 0x15 }, Exit::Return, Exit::Jump { site: 0x20, conditional: Some(0x30) }, Exit::Other];
        let bit = |b: usize, k: u32| b >> k & 1 == 1;
        let e = BlockExits {
            exit: (0..32).map(|b| ways[b & 3]).collect(),
            entry: (0..32).map(|b| bit(b, 2)).collect(),
            func: (0..32).map(|b| (b % 3) as u32).collect(),
            plt: (0..32).map(|b| bit(b, 3)).collect(),
            binder: (0..32).map(|b| bit(b, 4)).collect(),
            addr: (0..32).map(|b| 0x1000 * b as u64).collect(),
            names: vec!["a".into(), "b".into(), "c".into()],
            kind: Vec::new(),
        }
        .with_kinds();
        let (mut plain, mut not) = (0, 0);
        for p in 0..32 {
            for b in 0..32 {
                for folded in [false, true] {
                    for stub in [None, Some((0x10, Some(0x15)))] {
                        let mut f = if folded { CallFlow::skipping_plt() } else { CallFlow::default() };
                        f.plt = stub;
                        f.last = Some(p);
                        if !f.plain_step(&e, p, b) {
                            not += 1;
                            continue;
                        }
                        plain += 1;
                        assert_eq!(f.step(&e, p, b), None, "{p} -> {b}, folded {folded}, stub {stub:?}");
                        assert_eq!((f.last, f.plt), (Some(p), stub), "{p} -> {b}");
                    }
                }
            }
        }
        assert!(plain > 0 && not > 0, "{plain} plain, {not} not");
        // A table without kinds takes the full step every time.
        let bare = BlockExits { kind: Vec::new(), ..e };
        assert!(!CallFlow::default().plain_step(&bare, 3, 3));
    }

    #[test]
    fn the_lazy_binder_closes_and_its_caller_calls_what_it_bound() {
        // 0: main, calls the stub 1 (or jumps to it: 6); 1: the stub, jumps to the binder
        // 2; 2: the binder, calls _dl_fixup 3; 3: returns to 4, the binder's last block,
        // which jumps to f (5), which returns to main.
        let e = BlockExits {
            exit: vec![
                Exit::Call { site: 0x100, ret: 0x105 },
                Exit::Jump { site: 0x200, conditional: None },
                Exit::Call { site: 0x300, ret: 0x305 },
                Exit::Return,
                Exit::Jump { site: 0x305, conditional: None },
                Exit::Return,
                Exit::Jump { site: 0x110, conditional: None },
            ],
            entry: vec![true, true, true, true, false, true, false],
            func: vec![0, 1, 2, 3, 2, 4, 0],
            plt: vec![false, true, false, false, false, false, false],
            binder: vec![false, false, true, false, true, false, false],
            addr: vec![0x100, 0x200, 0x300, 0x400, 0x305, 0x500, 0x10c],
            names: ["main", "f@plt", "_dl_runtime_resolve_xsavec", "_dl_fixup", "f"].map(String::from).to_vec(),
            kind: Vec::new(),
        }
        .with_kinds();
        let mut f = CallFlow::skipping_plt();
        assert_eq!(f.block(&e, 0, true), None);
        assert_eq!(f.block(&e, 1, true), None);
        assert_eq!(f.block(&e, 2, true), Some(Transition::Call { site: 0x100, ret: 0x105, to: 2 }), "main calls the binder");
        assert_eq!(f.block(&e, 3, true), Some(Transition::Call { site: 0x300, ret: 0x305, to: 3 }));
        assert_eq!(f.block(&e, 4, true), Some(Transition::Return { to: 0x305 }));
        assert_eq!(f.block(&e, 5, true), Some(Transition::Bound { to: 5 }));
        // Without PLT folding the binder is code like any other: a tail call to f.
        let mut f = CallFlow::default();
        f.block(&e, 4, true);
        assert_eq!(f.block(&e, 5, true), Some(Transition::TailCall { site: 0x305, to: 5 }));
        assert_eq!(e.bound(4, 5), Some(Transition::Bound { to: 5 }));
        assert!(e.bound(2, 3).is_none() && e.bound(4, 4).is_none() && e.bound(3, 5).is_none());

        // On a stack: the binder's frame goes, handed back to be closed and replaced.
        let mut s = CallStack::default();
        assert!(s.call(0x105, 'm').is_empty());
        assert!(s.call(0x999, 'b').is_empty());
        match s.apply(Transition::Bound { to: 5 }, |_, _, _| unreachable!()) {
            Step::Rebind { old, to } => assert_eq!((old.data, old.ret, old.kind, to), ('b', 0x999, FrameKind::Call, 5)),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.len(), 1);
        assert!(s.signal('s').is_empty());
        assert!(matches!(s.apply(Transition::Bound { to: 5 }, |_, _, _| unreachable!()), Step::Confined));
        let mut empty: CallStack<char> = CallStack::default();
        assert!(matches!(empty.apply(Transition::Bound { to: 5 }, |_, _, _| unreachable!()), Step::Beyond(None)));
    }
}
