//! Architectural registers as a dependence analysis sees them: each sub-register folded into
//! the full register it is part of (al, ah, ax, eax → rax; xmm3, ymm3 → zmm3; mm2 → st2), so
//! that two instructions touching any parts of one register are seen to share it.

use bitvec::prelude::*;
use iced_x86::Register as R;
use std::fmt;

/// A full architectural register, numbered as [`ArchReg::name`] lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ArchReg(pub u8);

/// Where each register class starts, and how many it has.
const GPR: (u8, u8) = (0, 16);
const VEC: (u8, u8) = (16, 32);
const MASK: (u8, u8) = (48, 8);
const SEG: (u8, u8) = (56, 6);
const X87: (u8, u8) = (62, 8);
const BND: (u8, u8) = (70, 4);
const TMM: (u8, u8) = (74, 8);
const CR: (u8, u8) = (82, 16);
const DR: (u8, u8) = (98, 16);
const TR: (u8, u8) = (114, 8);
/// Registers numbered.
pub const NUM_ARCH_REGS: usize = 122;

const GPR_NAMES: [&str; 16] =
    ["rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"];
const SEG_NAMES: [&str; 6] = ["es", "cs", "ss", "ds", "fs", "gs"];

impl ArchReg {
    pub const RAX: ArchReg = ArchReg(0);
    pub const RCX: ArchReg = ArchReg(1);
    pub const RDX: ArchReg = ArchReg(2);
    pub const RSP: ArchReg = ArchReg(4);
    pub const RSI: ArchReg = ArchReg(6);
    pub const RDI: ArchReg = ArchReg(7);
    pub const R8: ArchReg = ArchReg(8);
    pub const R9: ArchReg = ArchReg(9);
    pub const R10: ArchReg = ArchReg(10);
    pub const R11: ArchReg = ArchReg(11);

    /// The full register `r` is part of; None for the instruction pointer and registers
    /// that name none (`Register::None`).
    pub fn from_iced(r: R) -> Option<ArchReg> {
        let at = |(start, n): (u8, u8), first: R| {
            let k = (r as u32).wrapping_sub(first as u32);
            (k < n as u32).then(|| ArchReg(start + k as u8))
        };
        if r.is_gpr() {
            let k = (r.full_register() as u32).wrapping_sub(R::RAX as u32);
            return (k < GPR.1 as u32).then(|| ArchReg(GPR.0 + k as u8));
        }
        if r.is_vector_register() {
            let k = (r.full_register() as u32).wrapping_sub(R::ZMM0 as u32);
            return (k < VEC.1 as u32).then(|| ArchReg(VEC.0 + k as u8));
        }
        at(MASK, R::K0)
            .or_else(|| at(SEG, R::ES))
            .or_else(|| at(X87, R::ST0))
            .or_else(|| at(X87, R::MM0))
            .or_else(|| at(BND, R::BND0))
            .or_else(|| at(TMM, R::TMM0))
            .or_else(|| at(CR, R::CR0))
            .or_else(|| at(DR, R::DR0))
            .or_else(|| at(TR, R::TR0))
    }

    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The register's name: rax…r15, zmm0…zmm31, k0…k7, es…gs, st0…st7 (which the mmx
    /// registers alias), bnd0…3, tmm0…7, cr0…15, dr0…15, tr0…7.
    pub fn name(self) -> String {
        let n = self.0;
        let class = |(start, len): (u8, u8)| (n >= start && n < start + len).then(|| n - start);
        if let Some(k) = class(GPR) {
            return GPR_NAMES[k as usize].to_string();
        }
        if let Some(k) = class(SEG) {
            return SEG_NAMES[k as usize].to_string();
        }
        for (c, p) in [(VEC, "zmm"), (MASK, "k"), (X87, "st"), (BND, "bnd"), (TMM, "tmm"), (CR, "cr"), (DR, "dr"), (TR, "tr")] {
            if let Some(k) = class(c) {
                return format!("{p}{k}");
            }
        }
        format!("reg{n}")
    }

    /// Whether this is a general-purpose register.
    pub fn is_gpr(self) -> bool {
        self.0 < GPR.1
    }
}

/// A set of [`ArchReg`]s.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ArchSet(pub BitArr!(for NUM_ARCH_REGS, in u64, Lsb0));

impl ArchSet {
    pub const EMPTY: ArchSet = ArchSet(BitArray::ZERO);

    pub fn contains(&self, r: ArchReg) -> bool {
        self.0.get(r.index()).is_some_and(|b| *b)
    }

    pub fn insert(&mut self, r: ArchReg) {
        self.0.set(r.index(), true);
    }

    pub fn union(self, o: ArchSet) -> ArchSet {
        ArchSet(self.0 | o.0)
    }

    pub fn is_empty(&self) -> bool {
        self.0.not_any()
    }

    pub fn len(&self) -> usize {
        self.0.count_ones()
    }

    /// Members in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = ArchReg> + '_ {
        self.0.iter_ones().map(|i| ArchReg(i as u8))
    }
}

impl FromIterator<ArchReg> for ArchSet {
    fn from_iter<T: IntoIterator<Item = ArchReg>>(iter: T) -> Self {
        let mut s = ArchSet::EMPTY;
        for r in iter {
            s.insert(r);
        }
        s
    }
}

impl fmt::Debug for ArchSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter().map(|r| r.name())).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every iced register of a class lands on its full register, by name.
    #[test]
    fn sub_registers_fold_into_full_registers() {
        let name = |r: R| ArchReg::from_iced(r).map(|a| a.name());
        for (r, want) in [
            (R::AL, "rax"),
            (R::AH, "rax"),
            (R::AX, "rax"),
            (R::EAX, "rax"),
            (R::RAX, "rax"),
            (R::SIL, "rsi"),
            (R::R11D, "r11"),
            (R::R15W, "r15"),
            (R::XMM3, "zmm3"),
            (R::YMM17, "zmm17"),
            (R::ZMM31, "zmm31"),
            (R::K7, "k7"),
            (R::FS, "fs"),
            (R::MM2, "st2"),
            (R::ST2, "st2"),
            (R::TMM7, "tmm7"),
            (R::CR8, "cr8"),
            (R::DR7, "dr7"),
            (R::BND3, "bnd3"),
        ] {
            assert_eq!(name(r).as_deref(), Some(want), "{r:?}");
        }
        assert_eq!(ArchReg::from_iced(R::RIP), None);
        assert_eq!(ArchReg::from_iced(R::None), None);
        // Numbers are unique and within range over every iced register.
        let mut seen = std::collections::HashMap::new();
        for r in R::values() {
            if let Some(a) = ArchReg::from_iced(r) {
                assert!(a.index() < NUM_ARCH_REGS);
                let full = if r.is_gpr() || r.is_vector_register() { r.full_register() } else { r };
                let full = if (R::MM0..=R::MM7).contains(&full) { R::ST0 + (full as u32 - R::MM0 as u32) } else { full };
                assert_eq!(*seen.entry(a).or_insert(full), full, "{r:?} shares {} with another register", a.name());
            }
        }
    }
}
