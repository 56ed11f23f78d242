//! Dynamic control dependence: the stack algorithm of Xin and Zhang ("Efficient online
//! detection of dynamic control dependence", ISSTA 2007) over each routine's
//! post-dominator tree, with one frame per call and per signal handler.
//!
//! A branch instance with two or more successors opens a region that ends when execution
//! reaches the branch node's immediate post-dominator in the same frame; every instance in
//! between depends on the innermost open region's branch. A newer branch with the same
//! post-dominator replaces the top entry (its region ends at the same point, so it is the
//! innermost one for everything up to there): a loop's header depends on its previous
//! iteration's instance, and the stack does not grow with iterations. An instance with no
//! open region in its frame depends on what the frame's call (or interrupted instruction,
//! for a handler) depended on. Frames open and close as the call stack every output
//! shares says ([`crate::program::calls`]).

use super::shadow::{Def, NONE};
use crate::program::calls::{CallStack, Step, Transition};

/// What a frame keeps.
#[derive(Clone, Copy, Debug)]
struct Frame {
    /// What the call (or the interrupted instruction) depended on.
    base: Def,
    /// Stack entries below this frame's.
    floor: u32,
}

/// One thread's control-dependence state.
pub struct Control {
    /// Open regions: the branch instance and the node that closes it.
    stack: Vec<(Def, u32)>,
    frames: CallStack<Frame>,
    /// What [`current`](Self::current) answers, worked out again after every change (every
    /// instance asks; a change comes at most once a block).
    now: Def,
}

impl Default for Control {
    fn default() -> Self {
        Control { stack: Vec::new(), frames: CallStack::default(), now: NONE }
    }
}

impl Control {
    #[inline]
    fn floor(&self) -> usize {
        self.frames.top().map_or(0, |f| f.data.floor as usize)
    }

    /// Execution enters node `node`: the regions it closes end.
    #[inline]
    pub fn enter(&mut self, node: u32) {
        let (floor, open) = (self.floor(), self.stack.len());
        while self.stack.len() > floor && self.stack.last().is_some_and(|e| e.1 == node) {
            self.stack.pop();
        }
        if self.stack.len() != open {
            self.refresh();
        }
    }

    /// The branch instance the next instance depends on, or [`NONE`].
    #[inline(always)]
    pub fn current(&self) -> Def {
        debug_assert_eq!(self.now, self.innermost());
        self.now
    }

    /// The innermost open region's branch in the current frame, or what the frame's call
    /// depended on.
    fn innermost(&self) -> Def {
        if self.stack.len() > self.floor() {
            self.stack.last().map_or(NONE, |e| e.0)
        } else {
            self.frames.top().map_or(NONE, |f| f.data.base)
        }
    }

    /// Works out [`current`](Self::current) again after a change.
    #[inline]
    fn refresh(&mut self) {
        self.now = self.innermost();
    }

    /// Branch instance `d` opens a region closed by node `ipdom`.
    #[inline]
    pub fn branch(&mut self, d: Def, ipdom: u32) {
        // (Either way the new region is the innermost: the next instance depends on `d`.)
        self.now = d;
        if self.stack.len() > self.floor() {
            if let Some(top) = self.stack.last_mut() {
                if top.1 == ipdom {
                    top.0 = d;
                    return;
                }
            }
        }
        self.stack.push((d, ipdom));
    }

    /// Control passed between blocks as `tr` says; the call or jump depended on `base`.
    pub fn flow(&mut self, tr: Transition, base: Def) {
        let frame = Frame { base, floor: self.stack.len() as u32 };
        match self.frames.apply(tr, |_, _, _| frame) {
            Step::Pushed(dropped) => self.dropped(!dropped.is_empty()),
            Step::Close(k) => self.pop_to(k),
            // Only Callgrind's PLT folding makes it: the frame stays as it was.
            Step::Rebind { old, .. } => drop(self.frames.push(old)),
            // A tail call from the thread's outermost code: its regions stay as they are.
            Step::Beyond(_) | Step::Confined => {}
        }
        self.refresh();
    }

    /// A signal handler starts; what was interrupted depended on `base`.
    pub fn signal(&mut self, base: Def) {
        let dropped = self.frames.signal(Frame { base, floor: self.stack.len() as u32 });
        self.dropped(!dropped.is_empty());
        self.refresh();
    }

    /// A signal handler returned (through sigreturn).
    pub fn sigreturn(&mut self) {
        if let Some(k) = self.frames.handler() {
            self.pop_to(k);
        }
        self.refresh();
    }

    /// The stack dropped its outer frames: their regions go too.
    fn dropped(&mut self, any: bool) {
        if !any {
            return;
        }
        let cut = self.frames.frames()[0].data.floor;
        self.stack.drain(..cut as usize);
        for f in self.frames.data_mut() {
            f.floor -= cut;
        }
    }

    fn pop_to(&mut self, k: usize) {
        if let Some(floor) = self.frames.frames().get(k).map(|f| f.data.floor) {
            self.stack.truncate(floor as usize);
        }
        self.frames.truncate(k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_frames_and_replacement() {
        let mut c = Control::default();
        assert_eq!(c.current(), NONE);
        c.branch(1, 10); // if, closed by node 10
        assert_eq!(c.current(), 1);
        c.flow(Transition::Call { site: 0x3fb, ret: 0x400, to: 7 }, c.current());
        assert_eq!(c.current(), 1, "a callee depends on what its call did");
        c.branch(2, 20);
        c.branch(3, 20); // next iteration of a loop: replaces
        assert_eq!(c.current(), 3);
        c.enter(10); // node 10 of another frame closes nothing here
        assert_eq!(c.current(), 3);
        c.flow(Transition::Return { to: 0x400 }, NONE);
        assert_eq!(c.current(), 1);
        c.enter(10);
        assert_eq!(c.current(), NONE);
        c.signal(NONE);
        c.branch(4, 30);
        c.sigreturn();
        assert_eq!(c.current(), NONE);
    }

    /// A tail call's code depends on what the jump depended on, and the return that ends the
    /// chain closes its regions with the caller's call; inside a signal handler a return
    /// reaches only the handler's frames.
    #[test]
    fn tail_calls_and_handlers_follow_the_shared_stack() {
        let mut c = Control::default();
        c.branch(1, 10);
        c.flow(Transition::Call { site: 0x3fb, ret: 0x400, to: 7 }, c.current());
        c.branch(2, 20);
        c.flow(Transition::TailCall { site: 0x500, to: 8 }, c.current());
        assert_eq!(c.current(), 2, "the tail-called code depends on the jump's region");
        c.branch(3, 30);
        assert_eq!(c.current(), 3);
        c.flow(Transition::Return { to: 0x400 }, NONE);
        assert_eq!(c.current(), 1, "the return closed the tail call and the call");
        c.signal(c.current());
        c.branch(4, 40);
        c.flow(Transition::Return { to: 0x999 }, NONE);
        assert_eq!(c.current(), 4, "a return matching no handler frame closes nothing");
        c.sigreturn();
        assert_eq!(c.current(), 1);
    }
}
