//! Who last defined each register byte, flag and memory byte of one thread: the state
//! def-use dependences are read from.

use dep_profile::archregs::ArchReg;
use dep_profile::semantics::ByteRange;
use rustc_hash::FxHashMap;

/// A dynamic instruction instance: static id in the low 24 bits, instance above.
pub type Def = u64;
/// No definition seen (never a packed instance: ids stop below 2^24 - 1).
pub const NONE: Def = u64::MAX;
/// Bits of a [`Def`] that hold the static id.
pub const ID_BITS: u32 = 24;
/// Static ids a trace may have.
pub const MAX_IDS: usize = (1 << ID_BITS) - 1;
/// Instances one static instruction may have.
pub const MAX_INSTANCES: u64 = 1 << (64 - ID_BITS);

/// The instance `inst` of static instruction `id`.
#[inline]
pub fn pack(id: u32, inst: u64) -> Def {
    debug_assert!((id as usize) < MAX_IDS && inst < MAX_INSTANCES);
    inst << ID_BITS | id as u64
}

/// The static id of a definition.
#[inline]
pub fn id_of(d: Def) -> u32 {
    (d & ((1 << ID_BITS) - 1)) as u32
}

/// The instance number of a definition.
#[inline]
pub fn inst_of(d: Def) -> u64 {
    d >> ID_BITS
}

/// Appends the distinct definitions among `slots` to `out`, in slot order.
#[inline]
fn distinct(slots: &[Def], out: &mut Vec<Def>) {
    let mut last = NONE;
    for &d in slots {
        if d != last && d != NONE && !out.contains(&d) {
            out.push(d);
        }
        last = d;
    }
}

/// General registers by byte (8 each), vector registers by byte (64 each), every other
/// register whole.
pub struct Registers {
    slots: Vec<Def>,
}

const GPR_SLOTS: usize = 16 * 8;
const VEC_SLOTS: usize = 32 * 64;

impl Default for Registers {
    fn default() -> Self {
        Registers { slots: vec![NONE; GPR_SLOTS + VEC_SLOTS + dep_profile::archregs::NUM_ARCH_REGS] }
    }
}

impl Registers {
    #[inline]
    fn range(r: &ByteRange) -> std::ops::Range<usize> {
        let (reg, lo, hi) = (r.reg.index(), r.lo as usize, r.hi as usize);
        let base = if reg < 16 {
            reg * 8
        } else if reg < 48 {
            GPR_SLOTS + (reg - 16) * 64
        } else {
            return GPR_SLOTS + VEC_SLOTS + reg..GPR_SLOTS + VEC_SLOTS + reg + 1;
        };
        base + lo..base + hi
    }

    /// The definitions of the bytes `r` reads, appended to `out`.
    #[inline]
    pub fn read(&self, r: &ByteRange, out: &mut Vec<Def>) {
        distinct(&self.slots[Self::range(r)], out);
    }

    /// `d` defines the bytes of `r`.
    #[inline]
    pub fn define(&mut self, r: &ByteRange, d: Def) {
        self.slots[Self::range(r)].fill(d);
    }

    /// The one instance that defined all 8 bytes of general register `reg`, if one did.
    #[inline]
    pub fn whole(&self, reg: ArchReg) -> Option<Def> {
        let s = &self.slots[reg.index() * 8..reg.index() * 8 + 8];
        (s[0] != NONE && s.iter().all(|&d| d == s[0])).then_some(s[0])
    }
}

/// RFLAGS bit by bit.
pub struct Flags {
    slots: [Def; 32],
}

impl Default for Flags {
    fn default() -> Self {
        Flags { slots: [NONE; 32] }
    }
}

impl Flags {
    /// The definitions of the flags in `bits`, appended to `out`.
    #[inline]
    pub fn read(&self, mut bits: u32, out: &mut Vec<Def>) {
        let mut last = NONE;
        while bits != 0 {
            let d = self.slots[bits.trailing_zeros() as usize];
            if d != last && d != NONE && !out.contains(&d) {
                out.push(d);
            }
            last = d;
            bits &= bits - 1;
        }
    }

    /// `d` defines the flags in `bits`.
    #[inline]
    pub fn define(&mut self, mut bits: u32, d: Def) {
        while bits != 0 {
            self.slots[bits.trailing_zeros() as usize] = d;
            bits &= bits - 1;
        }
    }
}

const PAGE_BITS: u32 = 12;
const PAGE: usize = 1 << PAGE_BITS;

/// Memory byte by byte, in pages allocated on first write.
#[derive(Default)]
pub struct Memory {
    index: FxHashMap<u64, u32>,
    pages: Vec<Box<[Def; PAGE]>>,
    /// The page looked up last, and its index.
    last: Option<(u64, u32)>,
}

impl Memory {
    #[inline]
    fn page(&mut self, p: u64, create: bool) -> Option<u32> {
        if let Some((lp, k)) = self.last {
            if lp == p {
                return Some(k);
            }
        }
        let k = match self.index.get(&p) {
            Some(&k) => k,
            None if create => {
                let k = self.pages.len() as u32;
                self.pages.push(Box::new([NONE; PAGE]));
                self.index.insert(p, k);
                k
            }
            None => return None,
        };
        self.last = Some((p, k));
        Some(k)
    }

    /// The definitions of bytes `addr..addr + size`, appended to `out`.
    #[inline]
    pub fn read(&mut self, addr: u64, size: u32, out: &mut Vec<Def>) {
        let mut a = addr;
        let end = addr.wrapping_add(size as u64);
        let mut left = size as u64;
        while left > 0 {
            let off = (a & (PAGE as u64 - 1)) as usize;
            let n = (left as usize).min(PAGE - off);
            if let Some(k) = self.page(a >> PAGE_BITS, false) {
                distinct(&self.pages[k as usize][off..off + n], out);
            }
            a = a.wrapping_add(n as u64);
            left -= n as u64;
        }
        debug_assert_eq!(a, end);
    }

    /// `d` defines bytes `addr..addr + size`.
    #[inline]
    pub fn write(&mut self, addr: u64, size: u32, d: Def) {
        let mut a = addr;
        let mut left = size as u64;
        while left > 0 {
            let off = (a & (PAGE as u64 - 1)) as usize;
            let n = (left as usize).min(PAGE - off);
            let k = self.page(a >> PAGE_BITS, true).expect("created");
            self.pages[k as usize][off..off + n].fill(d);
            a = a.wrapping_add(n as u64);
            left -= n as u64;
        }
    }

    /// Bytes of shadow held.
    pub fn bytes(&self) -> usize {
        self.pages.len() * PAGE * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_register_writes_keep_the_other_bytes() {
        let mut r = Registers::default();
        let rax = |lo, hi| ByteRange { reg: ArchReg::RAX, lo, hi };
        r.define(&rax(0, 8), pack(1, 0));
        r.define(&rax(0, 1), pack(2, 0));
        let mut out = vec![];
        r.read(&rax(0, 8), &mut out);
        assert_eq!(out, vec![pack(2, 0), pack(1, 0)]);
        out.clear();
        r.read(&rax(1, 2), &mut out);
        assert_eq!(out, vec![pack(1, 0)]);
        assert_eq!(r.whole(ArchReg::RAX), None);
        r.define(&rax(0, 8), pack(3, 7));
        assert_eq!(r.whole(ArchReg::RAX), Some(pack(3, 7)));
    }

    #[test]
    fn memory_bytes_across_a_page_boundary() {
        let mut m = Memory::default();
        m.write(0xfff, 2, pack(1, 0));
        m.write(0x1000, 1, pack(2, 5));
        let mut out = vec![];
        m.read(0xffe, 4, &mut out);
        assert_eq!(out, vec![pack(1, 0), pack(2, 5)]);
        out.clear();
        m.read(0x5000, 8, &mut out);
        assert!(out.is_empty());
        let mut f = Flags::default();
        f.define(0b11, pack(4, 1));
        f.define(0b10, pack(5, 1));
        out.clear();
        f.read(0b111, &mut out);
        assert_eq!(out, vec![pack(4, 1), pack(5, 1)]);
        assert_eq!((id_of(pack(5, 9)), inst_of(pack(5, 9))), (5, 9));
    }
}
