//! The registers whose values DEP_m records: the general registers plus the FS and GS bases.

use bitvec::prelude::*;
use std::fmt;

/// Number of value registers (16 GPRs, FS base, GS base).
pub const NUM_REGS: usize = 18;

/// A register whose value can appear in DEP_m, numbered in hardware encoding order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reg(pub u8);

impl Reg {
    pub const RAX: Reg = Reg(0);
    pub const RCX: Reg = Reg(1);
    pub const RDX: Reg = Reg(2);
    pub const RBX: Reg = Reg(3);
    pub const RSP: Reg = Reg(4);
    pub const RBP: Reg = Reg(5);
    pub const RSI: Reg = Reg(6);
    pub const RDI: Reg = Reg(7);
    pub const R11: Reg = Reg(11);
    /// The FS segment base, recorded lazily like a general register.
    pub const FS_BASE: Reg = Reg(16);
    /// The GS segment base.
    pub const GS_BASE: Reg = Reg(17);

    /// Index into register arrays and bit vectors.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// Iterates over every value register in DEP_m order.
    pub fn all() -> impl Iterator<Item = Reg> {
        (0..NUM_REGS as u8).map(Reg)
    }

    /// The register's name in 64-bit (`rax`) or 32-bit (`eax`) mode.
    pub fn name(self, width: crate::Width) -> &'static str {
        const N64: [&str; NUM_REGS] = [
            "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "fs_base",
            "gs_base",
        ];
        const N32: [&str; NUM_REGS] = [
            "eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi", "r8d", "r9d", "r10d", "r11d", "r12d", "r13d", "r14d", "r15d",
            "fs_base", "gs_base",
        ];
        match width {
            crate::Width::W64 => N64[self.index()],
            crate::Width::W32 => N32[self.index()],
        }
    }

    /// Maps an iced register of any size (al, ax, eax, rax, fs) to its value register.
    pub fn from_iced(r: iced_x86::Register) -> Option<Reg> {
        use iced_x86::Register as R;
        match r {
            R::FS => return Some(Reg::FS_BASE),
            R::GS => return Some(Reg::GS_BASE),
            _ => {}
        }
        if !r.is_gpr() {
            return None;
        }
        let full = r.full_register();
        let n = full as u32 - R::RAX as u32;
        (n < 16).then_some(Reg(n as u8))
    }
}

/// A set of value registers: the used/expired/status bit vectors of paper section 6.2.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RegSet(pub BitArr!(for NUM_REGS, in u32, Lsb0));

impl RegSet {
    /// The empty set.
    pub const EMPTY: RegSet = RegSet(BitArray::ZERO);

    /// Every value register.
    pub fn all() -> RegSet {
        RegSet::from_bits(u32::MAX)
    }

    /// Builds a set from its bit representation (bit n = register n).
    pub fn from_bits(bits: u32) -> RegSet {
        RegSet(BitArray::new([bits & ((1 << NUM_REGS) - 1)]))
    }

    /// The bit representation (bit n = register n); the recovery loop's hot path.
    #[inline]
    pub fn bits(self) -> u32 {
        // Lsb0 over one u32: bit n of the word is register n.
        self.0.into_inner()[0]
    }

    pub fn contains(self, r: Reg) -> bool {
        self.bits() >> r.index() & 1 != 0
    }

    pub fn insert(&mut self, r: Reg) {
        *self = RegSet::from_bits(self.bits() | 1 << r.index());
    }

    pub fn remove(&mut self, r: Reg) {
        *self = RegSet::from_bits(self.bits() & !(1 << r.index()));
    }

    // The set operations work on the one storage word: bitvec's general slice operations
    // walk bit by bit here, and they were 40% of the collector's per-block analysis.

    pub fn is_empty(self) -> bool {
        self.bits() == 0
    }

    pub fn union(self, o: RegSet) -> RegSet {
        RegSet::from_bits(self.bits() | o.bits())
    }

    pub fn minus(self, o: RegSet) -> RegSet {
        RegSet::from_bits(self.bits() & !o.bits())
    }

    pub fn intersect(self, o: RegSet) -> RegSet {
        RegSet::from_bits(self.bits() & o.bits())
    }

    /// Members in ascending register order, which is the order values appear in DEP_m.
    pub fn iter(self) -> impl Iterator<Item = Reg> {
        let mut bits = self.bits();
        std::iter::from_fn(move || {
            (bits != 0).then(|| {
                let r = bits.trailing_zeros();
                bits &= bits - 1;
                Reg(r as u8)
            })
        })
    }

    pub fn len(self) -> usize {
        self.bits().count_ones() as usize
    }
}

impl FromIterator<Reg> for RegSet {
    fn from_iter<T: IntoIterator<Item = Reg>>(iter: T) -> Self {
        let mut s = RegSet::EMPTY;
        for r in iter {
            s.insert(r);
        }
        s
    }
}

impl fmt::Debug for RegSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter().map(|r| r.name(crate::Width::W64))).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_round_trip_and_order() {
        let s: RegSet = [Reg::RDI, Reg::RAX, Reg::FS_BASE].into_iter().collect();
        assert_eq!(s.bits(), 1 | (1 << 7) | (1 << 16));
        assert_eq!(RegSet::from_bits(s.bits()), s);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![Reg::RAX, Reg::RDI, Reg::FS_BASE]);
        assert_eq!(RegSet::all().len(), NUM_REGS);
    }

    proptest::proptest! {
        /// The word operations agree with a set of register numbers.
        #[test]
        fn set_operations_agree_with_a_model(a in 0u32..1 << NUM_REGS, b in 0u32..1 << NUM_REGS, r in 0u8..NUM_REGS as u8) {
            use std::collections::BTreeSet;
            let model = |bits: u32| (0..NUM_REGS as u8).filter(|i| bits >> i & 1 != 0).collect::<BTreeSet<u8>>();
            let (x, y) = (RegSet::from_bits(a), RegSet::from_bits(b));
            let (mx, my) = (model(a), model(b));
            let of = |s: RegSet| s.iter().map(|r| r.0).collect::<BTreeSet<u8>>();
            proptest::prop_assert_eq!(of(x.union(y)), &mx | &my);
            proptest::prop_assert_eq!(of(x.minus(y)), &mx - &my);
            proptest::prop_assert_eq!(of(x.intersect(y)), &mx & &my);
            proptest::prop_assert_eq!(x.len(), mx.len());
            proptest::prop_assert_eq!(x.is_empty(), mx.is_empty());
            proptest::prop_assert_eq!(x.contains(Reg(r)), mx.contains(&r));
            let (mut ins, mut rem) = (x, x);
            ins.insert(Reg(r));
            rem.remove(Reg(r));
            proptest::prop_assert!(ins.contains(Reg(r)) && ins.len() == mx.len() + !mx.contains(&r) as usize);
            proptest::prop_assert!(!rem.contains(Reg(r)) && rem.len() == mx.len() - mx.contains(&r) as usize);
            proptest::prop_assert!(x.iter().zip(x.iter().skip(1)).all(|(p, q)| p.0 < q.0));
        }
    }

    #[test]
    fn iced_mapping_covers_partial_registers() {
        use iced_x86::Register as R;
        assert_eq!(Reg::from_iced(R::AL), Some(Reg::RAX));
        assert_eq!(Reg::from_iced(R::AH), Some(Reg::RAX));
        assert_eq!(Reg::from_iced(R::R11D), Some(Reg::R11));
        assert_eq!(Reg::from_iced(R::SPL), Some(Reg::RSP));
        assert_eq!(Reg::from_iced(R::FS), Some(Reg::FS_BASE));
        assert_eq!(Reg::from_iced(R::XMM0), None);
        assert_eq!(Reg::from_iced(R::RIP), None);
    }
}
