//! The values a WET trace can state: only ones the profile determines.
//!
//! DEP learns a general register's value where a memory reference's address needs it: the
//! recovered address minus the displacement is the base register's value (when it is the
//! address's only register, 64 bits wide, with no segment base). That value is the one the
//! register's last definer left, if that instance defined all 8 bytes. Instructions that
//! add a constant (push, pop, call, ret, `add rsp, 8`, `lea r, [r + d]`) keep a known value
//! known; before it is known, they keep the earlier definers waiting, each with the
//! constant it is away from the value to come. Nothing else is inferred.

use super::shadow::{Def, NONE};
use dep_profile::semantics::{Address, Insn, RegEffect};

/// Definers waiting for a register's value, at most (older ones are dropped).
const MAX_WAITING: usize = 64;

/// Instances waiting for one register's value, oldest first, at most [`MAX_WAITING`]: a
/// push when it is full drops the oldest, overwriting it in place (the list is then a
/// ring starting at `start`). Each is held with [`Reg::added`] as it stood when the
/// instance defined the register. Its room grows with use, as a thread's registers seldom
/// have more than a few waiting (a run of 3,000 threads keeps each thread's).
#[derive(Clone, Default)]
struct Waiting {
    items: Vec<(Def, u64)>,
    /// The oldest's place; 0 until the list is full.
    start: usize,
}

impl Waiting {
    #[inline]
    fn push(&mut self, w: (Def, u64)) {
        if self.items.len() < MAX_WAITING {
            self.items.push(w);
        } else {
            self.items[self.start] = w;
            self.start = (self.start + 1) % MAX_WAITING;
        }
    }

    #[inline]
    fn clear(&mut self) {
        self.items.clear();
        self.start = 0;
    }

    /// Hands each to `f`, oldest first, and clears.
    #[inline]
    fn drain(&mut self, mut f: impl FnMut((Def, u64))) {
        let (newer, older) = self.items.split_at(self.start);
        older.iter().chain(newer).for_each(|&w| f(w));
        self.clear();
    }
}

#[derive(Default, Clone)]
struct Reg {
    value: Option<u64>,
    /// Instances whose result is the value to come less what was added after them, once
    /// the value is known.
    waiting: Waiting,
    /// The constants added to the register while its value is unknown, summed: a constant
    /// added is one addition here, not one for every instance waiting (a loop stepping a
    /// pointer whose value no address shows kept 64 waiting and added to each, every
    /// iteration, and dropped the oldest by moving the rest).
    added: u64,
}

/// One thread's knowledge of its general registers' values.
#[derive(Default)]
pub struct Values {
    regs: [Reg; 16],
}

/// The register an address reveals, if it is the address's only one.
#[inline]
pub fn revealed(a: &Address) -> Option<u8> {
    if a.seg.is_some() || a.index.is_some() || a.addr_bits != 64 {
        return None;
    }
    let b = a.base?;
    (b.bits == 64 && b.reg.index() < 16).then_some(b.reg.index() as u8)
}

impl Values {
    /// Register `reg` holds `v` (as an address showed); `emit` gets the values of the
    /// instances that were waiting for it.
    #[inline]
    pub fn learn(&mut self, reg: u8, v: u64, emit: &mut impl FnMut(Def, u64)) {
        let r = &mut self.regs[reg as usize];
        let added = r.added;
        r.waiting.drain(|(d, at)| emit(d, v.wrapping_sub(added.wrapping_sub(at))));
        r.value = Some(v);
    }

    /// After instance `d` of an instruction with value steps `steps` ([`steps`]): `emit`
    /// gets `d`'s result when it is known now.
    #[inline(always)]
    pub fn after(&mut self, steps: &[Step], d: Def, emit: &mut impl FnMut(Def, u64)) {
        for s in steps {
            let r = &mut self.regs[s.reg as usize];
            let mine = s.mine && d != NONE;
            match s.add {
                Some(c) => match r.value {
                    Some(v) => {
                        r.value = Some(v.wrapping_add(c));
                        if mine {
                            emit(d, v.wrapping_add(c));
                        }
                    }
                    None => {
                        r.added = r.added.wrapping_add(c);
                        if mine {
                            r.waiting.push((d, r.added));
                        }
                    }
                },
                None => {
                    r.value = None;
                    r.waiting.clear();
                    if mine {
                        r.waiting.push((d, r.added));
                    }
                }
            }
        }
    }
}

/// What an instruction does to one general register's value.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub reg: u8,
    /// It adds this constant (the register was defined whole, not by a rep string).
    pub add: Option<u64>,
    /// Its new value is the instruction's result.
    pub mine: bool,
}

/// The steps of `insn`, which defines all of the general registers in `whole` and part of
/// those in `partial`, in register order. The result is `insn`'s result register, or else
/// the one register it adds a constant to.
pub fn steps(insn: &Insn, whole: u16, partial: u16) -> Vec<Step> {
    let result = insn.bytes.result.map(|r| r.index()).or_else(|| {
        let mut adds = insn.effects.iter().filter_map(|e| match e {
            RegEffect::Add(r, _) if r.index() < 16 => Some(r.index()),
            _ => None,
        });
        match (adds.next(), adds.next()) {
            (Some(r), None) => Some(r),
            _ => None,
        }
    });
    let rep = matches!(insn.special, dep_profile::semantics::Special::Rep(_));
    let mut out = Vec::new();
    let mut bits = whole | partial;
    while bits != 0 {
        let k = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        let bit = 1u16 << k;
        let add = (!rep && whole & bit != 0)
            .then(|| {
                insn.effects.iter().find_map(|e| match *e {
                    RegEffect::Add(reg, c) if reg.index() == k => Some(c as u64),
                    _ => None,
                })
            })
            .flatten();
        out.push(Step { reg: k as u8, add, mine: result == Some(k) && whole & bit != 0 });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule as first written: every waiting instance holds its own distance from the
    /// value to come, each added constant is added to each, and the oldest is dropped from
    /// the front of a list when it is full.
    /// A register's value, if known, and its waiting instances with their distances.
    type ModelReg = (Option<u64>, Vec<(Def, u64)>);

    #[derive(Default)]
    struct Model {
        regs: [ModelReg; 16],
    }

    impl Model {
        fn learn(&mut self, reg: u8, v: u64, out: &mut Vec<(Def, u64)>) {
            let r = &mut self.regs[reg as usize];
            for (d, off) in r.1.drain(..) {
                out.push((d, v.wrapping_sub(off)));
            }
            r.0 = Some(v);
        }

        fn after(&mut self, steps: &[Step], d: Def, out: &mut Vec<(Def, u64)>) {
            for s in steps {
                let r = &mut self.regs[s.reg as usize];
                let mine = s.mine && d != NONE;
                match (s.add, r.0) {
                    (Some(c), Some(v)) => {
                        r.0 = Some(v.wrapping_add(c));
                        if mine {
                            out.push((d, v.wrapping_add(c)));
                        }
                    }
                    (Some(c), None) => {
                        for w in &mut r.1 {
                            w.1 = w.1.wrapping_add(c);
                        }
                        if mine {
                            if r.1.len() >= MAX_WAITING {
                                r.1.remove(0);
                            }
                            r.1.push((d, 0));
                        }
                    }
                    (None, _) => {
                        r.0 = None;
                        r.1.clear();
                        if mine {
                            r.1.push((d, 0));
                        }
                    }
                }
            }
        }
    }

    /// Long runs of constant steps with no value known (a pointer stepped in a loop whose
    /// addresses never show it), past the ring's size, then learned, on three registers:
    /// the values stated and their order are the first rule's.
    #[test]
    fn waiting_instances_get_what_the_first_rule_gave_them() {
        let (mut new, mut old) = (Values::default(), Model::default());
        let (mut got, mut want) = (Vec::new(), Vec::new());
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..200_000u64 {
            let r = next();
            let reg = (r % 3) as u8;
            let d = if r >> 60 == 0 { NONE } else { i };
            match (r >> 8) % 1000 {
                0..=1 => {
                    let v = next();
                    new.learn(reg, v, &mut |d, v| got.push((d, v)));
                    old.learn(reg, v, &mut want);
                }
                2..=4 => {
                    let s = [Step { reg, add: None, mine: r & 1 == 0 }];
                    new.after(&s, d, &mut |d, v| got.push((d, v)));
                    old.after(&s, d, &mut want);
                }
                _ => {
                    let c = if r & 2 == 0 { 8 } else { (next() as i64 >> 40) as u64 };
                    let s = [Step { reg, add: Some(c), mine: r & 4 != 0 }];
                    new.after(&s, d, &mut |d, v| got.push((d, v)));
                    old.after(&s, d, &mut want);
                }
            }
        }
        assert!(want.len() > 10_000 && want.iter().any(|&(_, v)| v > 1 << 32), "the run states values");
        assert_eq!(got, want);
    }
}
