//! Control transitions between consecutive blocks of a thread, classified from the source
//! block's last instruction (its flow in the shared semantics, which iced-x86 gives), with
//! signal handlers nested: what DCFG, Callgrind and the statistics' CF_bit are made of.

use dep_profile::semantics::{Flow, Special};
use dep_profile::BlockPlan;

/// Signal handlers nested deeper than this give up the oldest interrupted block's exit.
pub const MAX_SIGNAL_DEPTH: usize = 256;

/// How control left a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EdgeKind {
    /// The block ended without a control transfer (a size limit, or before a rep string).
    Fallthrough,
    DirectJump,
    IndirectJump,
    /// A conditional branch (jcc, loop, jrcxz) went to its target.
    Taken,
    /// It went on to the next instruction, or the thread ended before it was known.
    NotTaken,
    DirectCall,
    IndirectCall,
    Return,
    /// syscall, sysenter or int: the kernel returns to the next instruction.
    Syscall,
    /// A rep string block ran again: it was interrupted inside the string and resumed.
    RepLoop,
    /// Anything else that leaves a block (ud2, int3, hlt, an undecodable instruction).
    Other,
    /// A signal interrupted the block at an instruction (a fault): the handler runs next.
    Interrupted,
    /// A signal was delivered after the block: the handler's first block is next.
    Signal,
    /// The handler returned (sigreturn): the interrupted code resumes.
    SignalReturn,
    /// The thread's first block.
    ThreadStart,
    /// After the thread's last block (`to` is None); reported besides that block's own exit.
    ThreadEnd,
}

impl EdgeKind {
    /// Every kind, in declaration order.
    pub const ALL: [EdgeKind; 16] = [
        EdgeKind::Fallthrough,
        EdgeKind::DirectJump,
        EdgeKind::IndirectJump,
        EdgeKind::Taken,
        EdgeKind::NotTaken,
        EdgeKind::DirectCall,
        EdgeKind::IndirectCall,
        EdgeKind::Return,
        EdgeKind::Syscall,
        EdgeKind::RepLoop,
        EdgeKind::Other,
        EdgeKind::Interrupted,
        EdgeKind::Signal,
        EdgeKind::SignalReturn,
        EdgeKind::ThreadStart,
        EdgeKind::ThreadEnd,
    ];

    /// The kind's name in outputs (snake case).
    pub fn name(self) -> &'static str {
        match self {
            EdgeKind::Fallthrough => "fallthrough",
            EdgeKind::DirectJump => "direct_jump",
            EdgeKind::IndirectJump => "indirect_jump",
            EdgeKind::Taken => "taken",
            EdgeKind::NotTaken => "not_taken",
            EdgeKind::DirectCall => "direct_call",
            EdgeKind::IndirectCall => "indirect_call",
            EdgeKind::Return => "return",
            EdgeKind::Syscall => "syscall",
            EdgeKind::RepLoop => "rep_loop",
            EdgeKind::Other => "other",
            EdgeKind::Interrupted => "interrupted",
            EdgeKind::Signal => "signal",
            EdgeKind::SignalReturn => "signal_return",
            EdgeKind::ThreadStart => "thread_start",
            EdgeKind::ThreadEnd => "thread_end",
        }
    }
}

/// How a block leaves, as far as the tracker needs it: its last instruction's flow and
/// whether that is a rep string; `None` where the block's instructions are unknown.
pub type BlockExit = Option<(Flow, bool)>;

/// The [`BlockExit`] of a block with this plan.
pub fn exit_of(plan: Option<&BlockPlan>) -> BlockExit {
    plan.and_then(|p| p.insns.last()).map(|i| (i.flow, matches!(i.special, Special::Rep(_))))
}

/// One transition. `from` is None for [`EdgeKind::ThreadStart`]; `to` is None where the
/// successor is unknown: the thread ended, or a handler returned through sigreturn (its
/// own exit, typically a `ret` into the restorer, is then unresolved).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Edge {
    pub from: Option<u64>,
    pub to: Option<u64>,
    pub kind: EdgeKind,
}

impl Edge {
    /// A conditional or indirect exit whose outcome was never seen.
    pub fn unresolved(&self) -> bool {
        self.to.is_none()
            && matches!(
                self.kind,
                EdgeKind::Taken | EdgeKind::NotTaken | EdgeKind::IndirectJump | EdgeKind::IndirectCall | EdgeKind::Return
            )
    }
}

/// How the last block left, waiting for the next block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exit {
    /// No block yet in this thread.
    Start,
    /// Nothing waits: the thread ended, or the block was interrupted (reported already).
    Nothing,
    /// The last block's last instruction, and whether it is a rep string.
    Flow { from: u64, flow: Flow, rep: bool },
    /// The block was interrupted at an instruction; a signal follows.
    Interrupted { from: u64 },
    /// A signal was delivered after `from`: the next block is its handler's first.
    Handler { from: Option<u64>, kind: EdgeKind },
    /// A handler whose last block was `from` returned: the next block resumes the code it
    /// interrupted (whose exit is [`Edges::resumed`]).
    Resume { from: Option<u64> },
}

/// The transitions of one thread: tell it each block and signal, it reports each edge.
#[derive(Clone, Debug)]
pub struct Edges {
    exit: Exit,
    /// Exits of the blocks signal handlers interrupted, innermost last.
    saved: Vec<Exit>,
    /// The exit of the block a returning handler interrupted, resolved by the next block.
    resumed: Exit,
}

impl Default for Edges {
    fn default() -> Self {
        Edges { exit: Exit::Start, saved: Vec::new(), resumed: Exit::Nothing }
    }
}

impl Edges {
    /// A block at `addr` runs (with its plan where known, interrupted or not): reports the
    /// edges that led to it.
    pub fn block(&mut self, addr: u64, plan: Option<&BlockPlan>, interrupted: bool, edge: impl FnMut(Edge)) {
        self.block_exit(addr, exit_of(plan), interrupted, edge)
    }

    /// [`block`](Self::block), given how the block leaves rather than its plan.
    pub fn block_exit(&mut self, addr: u64, exit: BlockExit, interrupted: bool, mut edge: impl FnMut(Edge)) {
        match self.exit {
            Exit::Handler { from, kind } => edge(Edge { from, to: Some(addr), kind }),
            Exit::Resume { from } => {
                edge(Edge { from, to: Some(addr), kind: EdgeKind::SignalReturn });
                // The interrupted block's own exit resolves here, as if no handler had run.
                resolve(std::mem::replace(&mut self.resumed, Exit::Nothing), Some(addr), &mut edge);
            }
            exit => resolve(exit, Some(addr), &mut edge),
        }
        self.exit = match (interrupted, exit) {
            (true, _) => Exit::Interrupted { from: addr },
            (false, Some((flow, rep))) => Exit::Flow { from: addr, flow, rep },
            // Without a plan (a truth replay) the exit is not known.
            (false, None) => Exit::Flow { from: addr, flow: Flow::Other, rep: false },
        };
    }

    /// A tracker for a stream that starts inside a thread, at a block: nothing before that
    /// block is known, so the block reports no edge. See [`then`](Self::then).
    pub fn mid_thread() -> Edges {
        Edges { exit: Exit::Nothing, saved: Vec::new(), resumed: Exit::Nothing }
    }

    /// Whether the tracker waits only for the next block after an ordinary exit (no signal
    /// delivery or handler return pending), so that the edge to it is [`flow_kind`]'s.
    pub fn plain(&self) -> bool {
        matches!(self.exit, Exit::Flow { .. }) && self.resumed == Exit::Nothing
    }

    /// Moves a [`plain`](Self::plain) tracker on to a block whose incoming edge the caller
    /// has accounted for itself; the block left as `exit` says.
    pub fn entered(&mut self, addr: u64, exit: (Flow, bool)) {
        debug_assert!(self.plain());
        self.exit = Exit::Flow { from: addr, flow: exit.0, rep: exit.1 };
    }

    /// Signal handlers entered and not yet returned from.
    pub fn nested(&self) -> usize {
        self.saved.len()
    }

    /// Continues this tracker, which has seen the thread up to and including a block, with
    /// `later`: a [`mid_thread`](Self::mid_thread) tracker started at that same block which
    /// neither returned from a handler it did not enter itself ([`nested`](Self::nested) never
    /// went below zero) nor [`end`](Self::end)ed. The result is the tracker that would have seen both; exits given up
    /// to the nesting limit are reported.
    pub fn then(&mut self, later: Edges, mut edge: impl FnMut(Edge)) {
        self.exit = later.exit;
        self.resumed = later.resumed;
        self.saved.extend(later.saved);
        if self.saved.len() > MAX_SIGNAL_DEPTH {
            let excess = self.saved.len() - MAX_SIGNAL_DEPTH;
            for oldest in self.saved.drain(..excess) {
                resolve(oldest, None, &mut edge);
            }
        }
    }

    /// A signal is delivered: the current exit waits until the handler returns.
    pub fn signal(&mut self, mut edge: impl FnMut(Edge)) {
        let (from, kind, keep) = match self.exit {
            Exit::Interrupted { from } => (Some(from), EdgeKind::Interrupted, Exit::Nothing),
            Exit::Flow { from, .. } => (Some(from), EdgeKind::Signal, self.exit),
            // Another signal before the resumed code ran: its exit stays unseen.
            Exit::Resume { from } => {
                resolve(std::mem::replace(&mut self.resumed, Exit::Nothing), None, &mut edge);
                (from, EdgeKind::Signal, Exit::Nothing)
            }
            Exit::Start | Exit::Nothing | Exit::Handler { .. } => (None, EdgeKind::Signal, self.exit),
        };
        self.saved.push(keep);
        if self.saved.len() > MAX_SIGNAL_DEPTH {
            let oldest = self.saved.remove(0);
            resolve(oldest, None, &mut edge);
        }
        self.exit = Exit::Handler { from, kind };
    }

    /// The current handler returns (sigreturn): its own exit is never seen.
    pub fn signal_return(&mut self, mut edge: impl FnMut(Edge)) {
        let from = match self.exit {
            Exit::Flow { from, .. } | Exit::Interrupted { from } => Some(from),
            _ => None,
        };
        resolve(std::mem::replace(&mut self.exit, Exit::Nothing), None, &mut edge);
        // Another return before the resumed code ran: that code's exit stays unseen.
        resolve(std::mem::replace(&mut self.resumed, Exit::Nothing), None, &mut edge);
        if let Some(resumed) = self.saved.pop() {
            self.resumed = resumed;
            self.exit = Exit::Resume { from };
        }
    }

    /// The thread ends: every exit still waiting is given up, and the last block (if one
    /// is known) has the thread's end after it.
    pub fn end(&mut self, mut edge: impl FnMut(Edge)) {
        let last = match self.exit {
            Exit::Flow { from, .. } | Exit::Interrupted { from } => Some(from),
            _ => None,
        };
        resolve(std::mem::replace(&mut self.exit, Exit::Nothing), None, &mut edge);
        if last.is_some() {
            edge(Edge { from: last, to: None, kind: EdgeKind::ThreadEnd });
        }
        // The rest is given up as at a gap.
        self.gap(&mut edge);
    }

    /// The thread ran instructions that were not recorded (between windows of `dep
    /// record`): every exit still waiting is given up, with no edge to the thread's end,
    /// and the next block has no edge into it (nothing before it is known).
    pub fn gap(&mut self, mut edge: impl FnMut(Edge)) {
        resolve(std::mem::replace(&mut self.exit, Exit::Nothing), None, &mut edge);
        resolve(std::mem::replace(&mut self.resumed, Exit::Nothing), None, &mut edge);
        while let Some(e) = self.saved.pop() {
            resolve(e, None, &mut edge);
        }
    }
}

/// The edge by which `exit` reached `to` (None: never seen).
fn resolve(exit: Exit, to: Option<u64>, edge: &mut impl FnMut(Edge)) {
    let (from, kind) = match exit {
        Exit::Start if to.is_some() => (None, EdgeKind::ThreadStart),
        Exit::Start | Exit::Nothing | Exit::Interrupted { .. } | Exit::Handler { .. } | Exit::Resume { .. } => return,
        Exit::Flow { from, flow, rep } => (Some(from), flow_kind(from, flow, rep, to)),
    };
    edge(Edge { from, to, kind });
}

/// The kind of the edge from a block at `from` whose last instruction has `flow` (a rep
/// string if `rep`) to `to`, when no signal came between them.
pub fn flow_kind(from: u64, flow: Flow, rep: bool, to: Option<u64>) -> EdgeKind {
    match flow {
        Flow::Next if rep && to == Some(from) => EdgeKind::RepLoop,
        Flow::Next => EdgeKind::Fallthrough,
        Flow::Jump { conditional: false, .. } => EdgeKind::DirectJump,
        Flow::Jump { conditional: true, target } if to == Some(target) => EdgeKind::Taken,
        Flow::Jump { conditional: true, .. } => EdgeKind::NotTaken,
        Flow::IndirectJump => EdgeKind::IndirectJump,
        Flow::Call { .. } => EdgeKind::DirectCall,
        Flow::IndirectCall => EdgeKind::IndirectCall,
        Flow::Return => EdgeKind::Return,
        Flow::Syscall => EdgeKind::Syscall,
        Flow::Other => EdgeKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dep_profile::{Machine, Semantics};

    fn plan(addr: u64, code: &[u8]) -> BlockPlan {
        BlockPlan::build(&mut Semantics::new(Machine::x86_64(2696)), addr, code, None).unwrap()
    }

    /// Every kind of edge, on blocks whose last instructions are known, with the outcomes
    /// worked out by hand.
    #[test]
    fn each_transition_is_classified() {
        let je = plan(0x1000, &[0x85, 0xc0, 0x74, 0x0e]); // test eax,eax; je 0x1012
        let jmp_rax = plan(0x1004, &[0xff, 0xe0]);
        let ret = plan(0x1012, &[0xc3]);
        let call = plan(0x1100, &[0xe8, 0, 0, 0, 0]); // call 0x1105
        let call_rax = plan(0x1200, &[0xff, 0xd0]);
        let nop = plan(0x1300, &[0x90]);
        let syscall = plan(0x1400, &[0x0f, 0x05]);
        let rep = plan(0x1500, &[0xf3, 0xa4]); // rep movsb
        let jmp = plan(0x1600, &[0xeb, 0xfe]); // jmp 0x1600
        let mut e = Edges::default();
        let mut got = Vec::new();
        let run =
            |e: &mut Edges, p: &BlockPlan, interrupted: bool, got: &mut Vec<Edge>| e.block(p.addr, Some(p), interrupted, |x| got.push(x));
        run(&mut e, &je, false, &mut got); // start
        run(&mut e, &ret, false, &mut got); // je taken
        run(&mut e, &je, false, &mut got); // ret
        run(&mut e, &jmp_rax, false, &mut got); // je not taken
        run(&mut e, &call, false, &mut got); // indirect jump
        run(&mut e, &call_rax, false, &mut got); // direct call (to 0x1105 in truth; any next)
        run(&mut e, &nop, false, &mut got); // indirect call
        run(&mut e, &syscall, false, &mut got); // fallthrough
        run(&mut e, &rep, false, &mut got); // syscall
        run(&mut e, &rep, false, &mut got); // rep loop
        run(&mut e, &jmp, false, &mut got); // fallthrough after the rep string
        e.signal(|x| got.push(x)); // asynchronous, after jmp: its exit waits
        run(&mut e, &ret, false, &mut got); // handler entered
        e.signal_return(|x| got.push(x)); // the handler's ret is never seen
        run(&mut e, &je, false, &mut got); // sigreturn, and jmp's exit resolves: direct jump
        run(&mut e, &je, true, &mut got); // je not taken, then a fault in this block
        e.signal(|x| got.push(x));
        run(&mut e, &ret, false, &mut got); // handler entered from the fault
        e.signal_return(|x| got.push(x));
        run(&mut e, &ret, false, &mut got); // resumes: nothing of the faulted block waits
        e.end(|x| got.push(x)); // the last ret is never seen
        use EdgeKind::*;
        let want = [
            (None, Some(0x1000), ThreadStart),
            (Some(0x1000), Some(0x1012), Taken),
            (Some(0x1012), Some(0x1000), Return),
            (Some(0x1000), Some(0x1004), NotTaken),
            (Some(0x1004), Some(0x1100), IndirectJump),
            (Some(0x1100), Some(0x1200), DirectCall),
            (Some(0x1200), Some(0x1300), IndirectCall),
            (Some(0x1300), Some(0x1400), Fallthrough),
            (Some(0x1400), Some(0x1500), Syscall),
            (Some(0x1500), Some(0x1500), RepLoop),
            (Some(0x1500), Some(0x1600), Fallthrough),
            (Some(0x1600), Some(0x1012), Signal),
            (Some(0x1012), None, Return),
            (Some(0x1012), Some(0x1000), SignalReturn),
            (Some(0x1600), Some(0x1000), DirectJump),
            (Some(0x1000), Some(0x1000), NotTaken),
            (Some(0x1000), Some(0x1012), Interrupted),
            (Some(0x1012), None, Return),
            (Some(0x1012), Some(0x1012), SignalReturn),
            (Some(0x1012), None, Return),
            (Some(0x1012), None, ThreadEnd),
        ];
        let got: Vec<_> = got.iter().map(|x| (x.from, x.to, x.kind)).collect();
        assert_eq!(got, want);
        let unresolved = want.iter().filter(|w| Edge { from: w.0, to: w.1, kind: w.2 }.unresolved()).count();
        assert_eq!(unresolved, 3);
    }
}
