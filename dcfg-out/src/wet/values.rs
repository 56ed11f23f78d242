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

#[derive(Default, Clone)]
struct Reg {
    value: Option<u64>,
    /// Instances whose result is `value - offset`, once `value` is known.
    waiting: Vec<(Def, u64)>,
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
        for (d, off) in r.waiting.drain(..) {
            emit(d, v.wrapping_sub(off));
        }
        r.value = Some(v);
    }

    /// After instance `d` of an instruction with value steps `steps` ([`steps`]): `emit`
    /// gets `d`'s result when it is known now.
    #[inline]
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
                        for w in &mut r.waiting {
                            w.1 = w.1.wrapping_add(c);
                        }
                        if mine {
                            if r.waiting.len() >= MAX_WAITING {
                                r.waiting.remove(0);
                            }
                            r.waiting.push((d, 0));
                        }
                    }
                },
                None => {
                    r.value = None;
                    r.waiting.clear();
                    if mine {
                        r.waiting.push((d, 0));
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
