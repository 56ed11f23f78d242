//! Block templates: a run of a whole block worked out once per block instead of once per
//! instance, for the dependence engine's common case.
//!
//! Within one run of a block, where each register read finds its definition is fixed by
//! the block: a read whose bytes an earlier instruction of the block last defined depends
//! on that instruction's instance in this run; one whose bytes no earlier instruction
//! defined depends on what the thread's registers held before the block. So a run can
//! leave the thread's registers alone until its end and then set only the definitions
//! that last (each in order, but for those wholly defined again later in the block):
//! the state is then what defining one instruction after another would have left.
//!
//! A template holds, per instruction, what its instance does itself (its id, control
//! port, the graph node it enters, whether it may branch or has value rules), and its
//! reads in three lists by source: the run's own instances ([`Local`]), the registers
//! before the block ([`Reg`]) and the flags before it ([`Flag`]). A stretch of a run
//! then takes its instances in one loop and each list's reads in another, loops whose
//! branches a processor predicts, where a mixed list of steps costs an indirect jump a
//! step. The lists keep each use port's dependences in instance order, as the store
//! keeps them; only the limited history, which keeps every dependence in the order
//! found, goes instruction by instruction.
//!
//! A block gets no template where a run is not always the same: a rep string (an
//! instance per iteration) or a read whose bytes have different definers (some defined
//! in the block and some before, or by two instructions). Runs of it, and runs that stop
//! early (a fault, a signal), go instruction by instruction.

use super::ops::{Ops, BRANCH, REP};
use super::shadow::RegSpan;
use rustc_hash::FxHashMap;

/// An instruction's instance in a templated run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inst {
    /// Its static id and its control port's store segment.
    pub id: u32,
    pub seg: u32,
    /// The graph node it enters as it starts, or [`super::statics::NO_NODE`].
    pub node: u32,
    /// [`BRANCH`] (it may open a control-dependence region as it ends) and [`VALUES`].
    pub kind: u8,
}

/// The instruction has value rules, applied as it ends (only the comprehensive format
/// keeps values).
pub const VALUES: u8 = 8;

/// Use port `seg` of the block's instruction `k` depends on the run's instance of its
/// instruction `j` (defined earlier in the run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Local {
    pub seg: u32,
    pub k: u32,
    pub j: u32,
}

/// Use port `seg` of instruction `k` reads `span` as the registers held it before the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reg {
    pub seg: u32,
    pub k: u32,
    pub span: RegSpan,
}

/// Use port `seg` of instruction `k` reads flags `bits` as they were before the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flag {
    pub seg: u32,
    pub k: u32,
    pub bits: u32,
}

/// A definition a run leaves at its end: by the block's instruction `j`, of `what` (a
/// register span, or flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Final<T> {
    pub j: u32,
    pub what: T,
}

/// A run's final definitions: of registers, then of flags (each in the block's order).
pub struct Finals<'t> {
    pub regs: &'t [Final<RegSpan>],
    pub flags: &'t [Final<u32>],
}

/// One block's template, as places in [`Templates`]' shared lists.
#[derive(Clone, Copy, Debug)]
struct Place {
    /// Where its instructions start in `insts`, and in `at` (which has one entry more for
    /// each block: the ends), and how many it has.
    insts: u32,
    at: u32,
    n: u32,
    /// Where its final definitions start and end in `final_regs` and `final_flags`.
    finals: [u32; 4],
}

/// Every templated block's template.
pub struct Templates {
    blocks: Vec<Option<Place>>,
    insts: Vec<Inst>,
    /// Per instruction (and one after each block's last): where its reads start in
    /// `locals`, `regs` and `flags`.
    at: Vec<[u32; 3]>,
    locals: Vec<Local>,
    regs: Vec<Reg>,
    flags: Vec<Flag>,
    final_regs: Vec<Final<RegSpan>>,
    final_flags: Vec<Final<u32>>,
}

/// A stretch of a templated run: instructions `insts` (their instances start), and the
/// reads of each list that they make.
pub struct Stretch<'t> {
    pub insts: &'t [Inst],
    pub locals: &'t [Local],
    pub regs: &'t [Reg],
    pub flags: &'t [Flag],
}

/// The definer of a read's every key: `Some(None)` the state before the block,
/// `Some(Some(j))` the block's instruction `j`, None where they differ.
fn one(mut keys: impl Iterator<Item = Option<u32>>) -> Option<Option<u32>> {
    let first = keys.next().unwrap_or(None);
    keys.all(|k| k == first).then_some(first)
}

impl Templates {
    /// The templates of `ops`' blocks, where they can have one.
    pub fn build(ops: &Ops) -> Templates {
        let mut t = Templates {
            blocks: Vec::with_capacity(ops.blocks() as usize),
            insts: Vec::new(),
            at: Vec::new(),
            locals: Vec::new(),
            regs: Vec::new(),
            flags: Vec::new(),
            final_regs: Vec::new(),
            final_flags: Vec::new(),
        };
        let mut last = FxHashMap::default();
        for b in 0..ops.blocks() {
            let place = ops.len(b).and_then(|n| t.add(ops, ops.first(b), n, &mut last));
            t.blocks.push(place);
        }
        t
    }

    /// Adds the template of the `n` instructions at `first` in `ops`, if they can have
    /// one (`last` is scratch).
    fn add(&mut self, ops: &Ops, first: u32, n: u32, last: &mut FxHashMap<u32, u32>) -> Option<Place> {
        let at = |j: u32| ops.op(first + j);
        if (0..n).any(|j| at(j).kind & REP != 0) {
            return None;
        }
        let lens = (self.insts.len(), self.at.len(), self.locals.len(), self.regs.len(), self.flags.len());
        let place = Place { insts: lens.0 as u32, at: lens.1 as u32, n, finals: [0; 4] };
        last.clear();
        let mut flags_last = [None; 32];
        let mut ok = true;
        'insts: for k in 0..n {
            let op = at(k);
            let values = if ops.steps(op).is_empty() { 0 } else { VALUES };
            self.insts.push(Inst { id: op.id, seg: op.seg0, node: op.node, kind: op.kind & BRANCH | values });
            self.at.push([self.locals.len() as u32, self.regs.len() as u32, self.flags.len() as u32]);
            let mut seg = op.seg0 + 1;
            for span in ops.reads(op) {
                match one(span.keys().map(|key| last.get(&key).copied())) {
                    Some(Some(j)) => self.locals.push(Local { seg, k, j }),
                    Some(None) => self.regs.push(Reg { seg, k, span: *span }),
                    None => {
                        ok = false;
                        break 'insts;
                    }
                }
                seg += 1;
            }
            if op.flags_read != 0 {
                let bits = (0..32).filter(|b| op.flags_read & (1 << b) != 0);
                match one(bits.map(|b| flags_last[b])) {
                    Some(Some(j)) => self.locals.push(Local { seg, k, j }),
                    Some(None) => self.flags.push(Flag { seg, k, bits: op.flags_read }),
                    None => {
                        ok = false;
                        break 'insts;
                    }
                }
            }
            for span in ops.defs(op) {
                for key in span.keys() {
                    last.insert(key, k);
                }
            }
            for (b, l) in flags_last.iter_mut().enumerate() {
                if op.flags_written & (1 << b) != 0 {
                    *l = Some(k);
                }
            }
        }
        if !ok {
            self.insts.truncate(lens.0);
            self.at.truncate(lens.1);
            self.locals.truncate(lens.2);
            self.regs.truncate(lens.3);
            self.flags.truncate(lens.4);
            return None;
        }
        self.at.push([self.locals.len() as u32, self.regs.len() as u32, self.flags.len() as u32]);
        let finals = (self.final_regs.len() as u32, self.final_flags.len() as u32);
        for j in 0..n {
            let op = at(j);
            for span in ops.defs(op) {
                // (A span of no byte defines nothing; one wholly defined again later is
                // overwritten by that later definition.)
                if span.keys().any(|key| last.get(&key) == Some(&j)) {
                    self.final_regs.push(Final { j, what: *span });
                }
            }
            let flags = (0..32).filter(|&b| flags_last[b] == Some(j)).fold(0u32, |f, b| f | 1 << b);
            if flags != 0 {
                self.final_flags.push(Final { j, what: flags });
            }
        }
        let finals = [finals.0, self.final_regs.len() as u32, finals.1, self.final_flags.len() as u32];
        Some(Place { finals, ..place })
    }

    /// Whether block `b` has a template.
    #[inline]
    pub fn has(&self, b: u32) -> bool {
        matches!(self.blocks.get(b as usize), Some(Some(_)))
    }

    /// The stretch of block `b`'s template whose instances start from its instruction
    /// `from` up to `to` (exclusive). The block must have a template.
    #[inline(always)]
    pub fn stretch(&self, b: u32, from: u32, to: u32) -> Stretch<'_> {
        let p = self.place(b);
        let to = to.min(p.n);
        let from = from.min(to);
        let (a, z) = (self.at[(p.at + from) as usize], self.at[(p.at + to) as usize]);
        Stretch {
            insts: &self.insts[(p.insts + from) as usize..(p.insts + to) as usize],
            locals: &self.locals[a[0] as usize..z[0] as usize],
            regs: &self.regs[a[1] as usize..z[1] as usize],
            flags: &self.flags[a[2] as usize..z[2] as usize],
        }
    }

    /// Block `b`'s place (an empty one where it has no template).
    #[inline]
    fn place(&self, b: u32) -> Place {
        self.blocks.get(b as usize).copied().flatten().unwrap_or(Place { insts: 0, at: 0, n: 0, finals: [0; 4] })
    }

    /// Instruction `j` of templated block `b`.
    #[inline]
    pub fn inst(&self, b: u32, j: u32) -> Inst {
        self.insts[(self.place(b).insts + j) as usize]
    }

    /// The definitions a run of block `b` leaves at its end, in order (none where it has
    /// no template).
    #[inline]
    pub fn finals(&self, b: u32) -> Finals<'_> {
        let f = self.place(b).finals;
        Finals { regs: &self.final_regs[f[0] as usize..f[1] as usize], flags: &self.final_flags[f[2] as usize..f[3] as usize] }
    }
}
