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
//! for a handler) depended on. A return pops to the frame whose return address it reaches,
//! skipping frames a longjmp or an exception left behind; a return that matches no frame
//! pops nothing.

use super::shadow::{Def, NONE};

/// The return address of a signal handler's frame (no code address is all ones).
const SIGNAL: u64 = u64::MAX;
/// Frames kept at most; deeper ones drop the outermost (a program that leaves calls
/// through longjmp forever must not grow this without bound).
const MAX_FRAMES: usize = 1 << 20;

struct Frame {
    ret: u64,
    base: Def,
    /// Stack entries below this frame's.
    floor: u32,
}

/// One thread's control-dependence state.
#[derive(Default)]
pub struct Control {
    /// Open regions: the branch instance and the node that closes it.
    stack: Vec<(Def, u32)>,
    frames: Vec<Frame>,
}

impl Control {
    #[inline]
    fn floor(&self) -> usize {
        self.frames.last().map_or(0, |f| f.floor as usize)
    }

    /// Execution enters node `node`: the regions it closes end.
    #[inline]
    pub fn enter(&mut self, node: u32) {
        let floor = self.floor();
        while self.stack.len() > floor && self.stack.last().is_some_and(|e| e.1 == node) {
            self.stack.pop();
        }
    }

    /// The branch instance the next instance depends on, or [`NONE`].
    #[inline]
    pub fn current(&self) -> Def {
        if self.stack.len() > self.floor() {
            self.stack.last().map_or(NONE, |e| e.0)
        } else {
            self.frames.last().map_or(NONE, |f| f.base)
        }
    }

    /// Branch instance `d` opens a region closed by node `ipdom`.
    #[inline]
    pub fn branch(&mut self, d: Def, ipdom: u32) {
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

    /// A call whose instance depended on `base` returns to `ret`.
    pub fn call(&mut self, ret: u64, base: Def) {
        if self.frames.len() >= MAX_FRAMES {
            let drop = self.frames.len() / 2;
            let cut = self.frames[drop].floor as usize;
            self.frames.drain(..drop);
            self.stack.drain(..cut);
            for f in &mut self.frames {
                f.floor -= cut as u32;
            }
        }
        self.frames.push(Frame { ret, base, floor: self.stack.len() as u32 });
    }

    /// A return reached `to`.
    pub fn ret(&mut self, to: u64) {
        if let Some(k) = self.frames.iter().rposition(|f| f.ret == to) {
            self.pop_to(k);
        }
    }

    /// A signal handler starts; what was interrupted depended on `base`.
    pub fn signal(&mut self, base: Def) {
        self.call(SIGNAL, base);
    }

    /// A signal handler returned (through sigreturn).
    pub fn sigreturn(&mut self) {
        if let Some(k) = self.frames.iter().rposition(|f| f.ret == SIGNAL) {
            self.pop_to(k);
        }
    }

    fn pop_to(&mut self, k: usize) {
        self.stack.truncate(self.frames[k].floor as usize);
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
        c.call(0x400, c.current());
        assert_eq!(c.current(), 1, "a callee depends on what its call did");
        c.branch(2, 20);
        c.branch(3, 20); // next iteration of a loop: replaces
        assert_eq!(c.current(), 3);
        c.enter(10); // node 10 of another frame closes nothing here
        assert_eq!(c.current(), 3);
        c.ret(0x400);
        assert_eq!(c.current(), 1);
        c.enter(10);
        assert_eq!(c.current(), NONE);
        c.signal(NONE);
        c.branch(4, 30);
        c.sigreturn();
        assert_eq!(c.current(), NONE);
    }
}
