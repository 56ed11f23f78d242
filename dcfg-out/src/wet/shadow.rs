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
/// register whole. Most writes define a register whole, so each register also keeps the one
/// definition of all its bytes while it has one: a read then takes it without visiting the
/// bytes, and a write of the whole register only sets it.
pub struct Registers {
    /// Each byte's definition, valid for registers whose `uni` is [`MIXED`].
    slots: Vec<Def>,
    /// Per register: the definition of all its bytes, or [`MIXED`]. Indexed by a `u8`, so
    /// the engine's every read and definition goes without a bounds check.
    uni: Box<[Def; 256]>,
}

// (A register's index fits the `u8` a [`RegSpan`] holds it in.)
const _: () = assert!(dep_profile::archregs::NUM_ARCH_REGS <= 256);

/// Bytes of one register with different definitions. Never a [`Def`]: its instance field
/// is the largest, which the engine never hands out (it stops below `MAX_INSTANCES - 1`).
const MIXED: Def = NONE - 1;

const GPR_SLOTS: usize = 16 * 8;
const VEC_SLOTS: usize = 32 * 64;

/// Bytes of one register, as a register's state holds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegSpan {
    /// The register's index.
    reg: u8,
    /// Its bytes' slots.
    start: u16,
    len: u16,
    /// The span is the whole register.
    full: bool,
}

impl RegSpan {
    /// What the span holds, as keys a block's template tells bytes apart by: its bytes'
    /// slots, or for a register held whole one key of its own; none for a span of no byte
    /// (which no read depends through and no definition changes).
    pub fn keys(&self) -> std::ops::Range<u32> {
        if self.len > 0 {
            self.start as u32..self.start as u32 + self.len as u32
        } else if self.full {
            let k = (GPR_SLOTS + VEC_SLOTS) as u32 + self.reg as u32;
            k..k + 1
        } else {
            0..0
        }
    }
}

impl Default for Registers {
    fn default() -> Self {
        Registers { slots: vec![NONE; GPR_SLOTS + VEC_SLOTS], uni: Box::new([NONE; 256]) }
    }
}

impl Registers {
    /// The slots of all of register `reg` (empty for the registers held whole).
    #[inline]
    fn all(reg: usize) -> std::ops::Range<usize> {
        if reg < 16 {
            reg * 8..reg * 8 + 8
        } else if reg < 48 {
            GPR_SLOTS + (reg - 16) * 64..GPR_SLOTS + (reg - 15) * 64
        } else {
            0..0
        }
    }

    /// Where the bytes `r` names are held.
    pub fn span(r: &ByteRange) -> RegSpan {
        let reg = r.reg.index();
        let all = Self::all(reg);
        if all.is_empty() {
            return RegSpan { reg: reg as u8, start: 0, len: 0, full: true };
        }
        let lo = (r.lo as usize).min(all.len());
        let hi = (r.hi as usize).clamp(lo, all.len());
        RegSpan { reg: reg as u8, start: (all.start + lo) as u16, len: (hi - lo) as u16, full: r.lo == 0 && r.hi as usize == all.len() }
    }

    /// The definitions of the bytes `r` reads, appended to `out`.
    #[inline]
    pub fn read(&self, r: &RegSpan, out: &mut Vec<Def>) {
        let u = self.uni[r.reg as usize];
        if u != MIXED {
            if u != NONE && (r.full || r.len > 0) && !out.contains(&u) {
                out.push(u);
            }
        } else {
            distinct(&self.slots[r.start as usize..r.start as usize + r.len as usize], out);
        }
    }

    /// The one definition the bytes `r` reads depend on, where one instance defined the
    /// whole register ([`NONE`] where none did, or where `r` reads no byte); None where its
    /// bytes are held one by one ([`read`](Self::read) then tells them apart). The common
    /// case, taken without a list to gather and compare definitions in.
    #[inline]
    pub fn single(&self, r: &RegSpan) -> Option<Def> {
        let u = self.uni[r.reg as usize];
        if u == MIXED {
            return None;
        }
        Some(if r.full || r.len > 0 { u } else { NONE })
    }

    /// `d` defines the bytes of `r`.
    #[inline(always)]
    pub fn define(&mut self, r: &RegSpan, d: Def) {
        let u = &mut self.uni[r.reg as usize];
        if r.full {
            *u = d;
            return;
        }
        if *u != MIXED {
            // The register's bytes part ways: from now on they are held one by one.
            self.slots[Self::all(r.reg as usize)].fill(*u);
            *u = MIXED;
        }
        self.slots[r.start as usize..r.start as usize + r.len as usize].fill(d);
    }

    /// The one instance that defined all 8 bytes of general register `reg`, if one did.
    pub fn whole(&self, reg: ArchReg) -> Option<Def> {
        let u = self.uni[reg.index()];
        if u != MIXED {
            return (u != NONE).then_some(u);
        }
        let s = &self.slots[Self::all(reg.index())];
        (s[0] != NONE && s.iter().all(|&d| d == s[0])).then_some(s[0])
    }
}

/// RFLAGS bit by bit (iced-x86's `RflagsBits`). Most instructions that write a flag write
/// all six arithmetic ones (its low six bits), so those are also held as one definition
/// while one instance defined them all: a write of all six is one store, and a read of
/// some of them one load.
pub struct Flags {
    /// Each flag's definition; the arithmetic ones' only while `arith` is [`MIXED`].
    slots: [Def; 32],
    /// The definition of all six arithmetic flags, or [`MIXED`].
    arith: Def,
}

/// The arithmetic flags OF, SF, ZF, AF, CF and PF in `RflagsBits`.
const ARITH: u32 = 0x3f;

impl Default for Flags {
    fn default() -> Self {
        Flags { slots: [NONE; 32], arith: NONE }
    }
}

impl Flags {
    /// The definitions of the flags in `bits`, appended to `out` in bit order.
    #[inline]
    pub fn read(&self, mut bits: u32, out: &mut Vec<Def>) {
        let arith = self.arith;
        if arith != MIXED && bits & !ARITH == 0 {
            if bits != 0 && arith != NONE && !out.contains(&arith) {
                out.push(arith);
            }
            return;
        }
        let mut last = NONE;
        while bits != 0 {
            let k = bits.trailing_zeros();
            let d = if arith != MIXED && (1 << k) & ARITH != 0 { arith } else { self.slots[k as usize] };
            if d != last && d != NONE && !out.contains(&d) {
                out.push(d);
            }
            last = d;
            bits &= bits - 1;
        }
    }

    /// The one definition a read of the flags in `bits` depends on, where one instance
    /// defined all the arithmetic flags and `bits` holds no other ([`NONE`] where none did);
    /// None otherwise ([`read`](Self::read) then tells them apart).
    #[inline]
    pub fn single(&self, bits: u32) -> Option<Def> {
        (self.arith != MIXED && bits & !ARITH == 0).then_some(if bits != 0 { self.arith } else { NONE })
    }

    /// `d` defines the flags in `bits`.
    #[inline]
    pub fn define(&mut self, mut bits: u32, d: Def) {
        if bits & ARITH == ARITH {
            self.arith = d;
            bits &= !ARITH;
        } else if bits & ARITH != 0 && self.arith != MIXED {
            // The arithmetic flags part ways: from now on they are held one by one.
            self.slots[..ARITH.count_ones() as usize].fill(self.arith);
            self.arith = MIXED;
        }
        while bits != 0 {
            self.slots[bits.trailing_zeros() as usize] = d;
            bits &= bits - 1;
        }
    }
}

const PAGE_BITS: u32 = 12;
const PAGE: usize = 1 << PAGE_BITS;

/// The stretch of one thread's execution between two of its sync points: which thread,
/// and the sequence number that ends it (`u64::MAX` while it runs).
#[derive(Clone, Copy, Debug)]
pub struct Segment {
    pub thread: u32,
    pub end: u64,
}

/// Marks a byte whose last write is not ordered after an earlier write to it by another
/// thread: which of them was last is unknown, so a read of it depends on neither.
const AMBIGUOUS: u32 = 1 << 31;

/// Where an access happens: its thread, its segment and the sequence number that began it.
#[derive(Clone, Copy, Debug)]
pub struct At {
    pub thread: u32,
    pub seg: u32,
    pub start: u64,
}

impl At {
    /// Whether a write in segment `w` comes before this point: in the same thread (program
    /// order), or in a segment that ended before this one began (the sequence numbers order
    /// the two threads' sync points).
    #[inline]
    fn after(&self, w: u32, segs: &[Segment]) -> bool {
        w == self.seg || {
            let s = segs[w as usize];
            s.thread == self.thread || s.end < self.start
        }
    }
}

/// Bytes of a granule: most accesses are aligned words, so memory is held a granule at a
/// time while one write defined all its bytes, and byte by byte only where they part.
const GRAIN: usize = 8;
const GRAINS: usize = PAGE / GRAIN;

/// A granule whose bytes are held one by one, in its page's [`Bytes`]. Never a [`Def`]: its
/// instance field is the largest, which the engine never hands out.
const SPLIT: Def = NONE - 1;

/// One page's shadow: per granule, the one definition of all its bytes and the segment it
/// was written in, or [`SPLIT`]. A whole granule's segment is never [`AMBIGUOUS`] (an
/// ambiguous byte has a horizon of its own), so a whole granule reads and writes as any of
/// its bytes would, once. (Byte by byte everywhere, the shadow was 12 bytes per byte and
/// its reads waited on cache misses for most of their time.)
struct Page {
    defs: [Def; GRAINS],
    segs: [u32; GRAINS],
    /// The bytes of split granules (valid there only), made at the page's first split.
    bytes: Option<Box<Bytes>>,
}

/// Each byte's last writer and its segment.
struct Bytes {
    defs: [Def; PAGE],
    segs: [u32; PAGE],
}

/// Memory for all threads, in pages allocated on first write: each byte's last writer and
/// the segment it wrote in, held a granule at a time where one write defined all of it
/// ([`Page`]).
pub struct Memory {
    index: FxHashMap<u64, u32>,
    pages: Vec<Box<Page>>,
    /// Pages looked up lately and their indices, direct-mapped by page number (a run's
    /// accesses go to a few pages at a time: the stack, the data being walked, a table).
    recent: [(u64, u32); RECENT],
    /// For ambiguous bytes: the latest end of the segments whose writes made them so; a
    /// write ordered after it (and after the last writer) settles the byte again.
    horizon: FxHashMap<u64, u64>,
}

/// Pages [`Memory`] keeps at hand.
const RECENT: usize = 16;

impl Default for Memory {
    fn default() -> Self {
        // (No page number reaches u64::MAX: pages are 4 KiB.)
        Memory { index: FxHashMap::default(), pages: Vec::new(), recent: [(u64::MAX, 0); RECENT], horizon: FxHashMap::default() }
    }
}

/// The granules of bytes `off..off + n` of a page, each with the bytes of it in that range.
/// (races' `granules` gives addresses and byte masks; the shadow here indexes its page.)
#[inline(always)]
fn grains(off: usize, n: usize) -> impl Iterator<Item = (usize, std::ops::Range<usize>)> {
    (off / GRAIN..(off + n).div_ceil(GRAIN)).map(move |g| (g, (g * GRAIN).max(off)..((g + 1) * GRAIN).min(off + n)))
}

/// Takes byte definition `d`, written in segment `w` (with its [`AMBIGUOUS`] bit), into a
/// read's `out`: the last writer of each byte, where that write is ordered before the read,
/// each once. `last` is the previous byte's pair: a byte with the same writer and the same
/// segment and ambiguity gets the same answer, so it is passed over. (The ambiguity is part
/// of it: one write can leave some of its bytes ambiguous and not others, and the others
/// still depend on it.)
#[inline(always)]
fn take(d: Def, w: u32, last: &mut (Def, u32), at: &At, segs: &[Segment], out: &mut Vec<Def>) {
    if d == NONE || (d, w) == *last {
        return;
    }
    if w & AMBIGUOUS == 0 && at.after(w, segs) && !out.contains(&d) {
        out.push(d);
    }
    *last = (d, w);
}

impl Memory {
    #[inline]
    fn page(&mut self, p: u64, create: bool) -> Option<u32> {
        let slot = p as usize % RECENT;
        if self.recent[slot].0 == p {
            return Some(self.recent[slot].1);
        }
        let k = match self.index.get(&p) {
            Some(&k) => k,
            None if create => {
                let k = self.pages.len() as u32;
                self.pages.push(Box::new(Page { defs: [NONE; GRAINS], segs: [0; GRAINS], bytes: None }));
                self.index.insert(p, k);
                k
            }
            None => return None,
        };
        self.recent[slot] = (p, k);
        Some(k)
    }

    /// The definitions of bytes `addr..addr + size` that a read `at` depends on: the last
    /// writer of each byte, where that write is ordered before the read.
    #[inline]
    pub fn read(&mut self, addr: u64, size: u32, at: At, segs: &[Segment], out: &mut Vec<Def>) {
        let mut a = addr;
        let mut left = size as u64;
        let mut last = (NONE, 0);
        while left > 0 {
            let off = (a & (PAGE as u64 - 1)) as usize;
            let n = (left as usize).min(PAGE - off);
            if let Some(k) = self.page(a >> PAGE_BITS, false) {
                let page = &self.pages[k as usize];
                for (g, bytes) in grains(off, n) {
                    let d = page.defs[g];
                    if d != SPLIT {
                        // Every byte of it alike: as its first byte, the rest the same.
                        take(d, page.segs[g], &mut last, &at, segs, out);
                    } else {
                        let b = page.bytes.as_deref().expect("a split granule's page has its bytes");
                        for i in bytes {
                            take(b.defs[i], b.segs[i], &mut last, &at, segs, out);
                        }
                    }
                }
            }
            a = a.wrapping_add(n as u64);
            left -= n as u64;
        }
    }

    /// `d` (at `at`) defines bytes `addr..addr + size`.
    #[inline]
    pub fn write(&mut self, addr: u64, size: u32, d: Def, at: At, segs: &[Segment]) {
        let mut a = addr;
        let mut left = size as u64;
        while left > 0 {
            let off = (a & (PAGE as u64 - 1)) as usize;
            let n = (left as usize).min(PAGE - off);
            let k = self.page(a >> PAGE_BITS, true).expect("created");
            let base = a & !(PAGE as u64 - 1);
            for (g, bytes) in grains(off, n) {
                let page = &mut self.pages[k as usize];
                let (old, w) = (page.defs[g], page.segs[g]);
                let whole = bytes.len() == GRAIN;
                // (`after` takes the granule's own segment as ordered.)
                if whole && old != SPLIT && (old == NONE || at.after(w, segs)) {
                    // Ordered after the granule's last write (or the first): it stays whole.
                    page.defs[g] = d;
                    page.segs[g] = at.seg;
                } else {
                    if old != SPLIT {
                        self.split(k, g);
                    }
                    let settled = self.write_bytes(k, base, bytes, d, at, segs);
                    if whole && settled {
                        // Every byte now the same write's, none ambiguous: whole again.
                        let page = &mut self.pages[k as usize];
                        page.defs[g] = d;
                        page.segs[g] = at.seg;
                    }
                }
            }
            a = a.wrapping_add(n as u64);
            left -= n as u64;
        }
    }

    /// Holds granule `g` of page `k` byte by byte from now on.
    #[cold]
    fn split(&mut self, k: u32, g: usize) {
        let page = &mut self.pages[k as usize];
        let (d, w) = (page.defs[g], page.segs[g]);
        let b = page.bytes.get_or_insert_with(|| Box::new(Bytes { defs: [NONE; PAGE], segs: [0; PAGE] }));
        b.defs[g * GRAIN..(g + 1) * GRAIN].fill(d);
        b.segs[g * GRAIN..(g + 1) * GRAIN].fill(w);
        page.defs[g] = SPLIT;
    }

    /// `d` (at `at`) defines bytes `range` of page `k` (at `base`), of one split granule, one
    /// by one; answers whether none of them is left ambiguous.
    fn write_bytes(&mut self, k: u32, base: u64, range: std::ops::Range<usize>, d: Def, at: At, segs: &[Segment]) -> bool {
        let b = self.pages[k as usize].bytes.as_deref_mut().expect("a split granule's page has its bytes");
        let mut settled = true;
        for j in range {
            let (old, w) = (b.defs[j], b.segs[j]);
            let mut seg = at.seg;
            if old != NONE && w != at.seg {
                let byte = base + j as u64;
                let ordered = at.after(w & !AMBIGUOUS, segs);
                let unordered_end = if ordered { 0 } else { segs[(w & !AMBIGUOUS) as usize].end };
                if w & AMBIGUOUS != 0 {
                    let h = self.horizon.get(&byte).copied().unwrap_or(u64::MAX).max(unordered_end);
                    if ordered && at.start > h {
                        self.horizon.remove(&byte);
                    } else {
                        self.horizon.insert(byte, h);
                        seg |= AMBIGUOUS;
                    }
                } else if !ordered {
                    self.horizon.insert(byte, unordered_end);
                    seg |= AMBIGUOUS;
                }
            }
            settled &= seg & AMBIGUOUS == 0;
            b.defs[j] = d;
            b.segs[j] = seg;
        }
        settled
    }

    /// Bytes of shadow held.
    pub fn bytes(&self) -> usize {
        self.pages.len() * std::mem::size_of::<Page>() + self.split_pages() * std::mem::size_of::<Bytes>() + self.horizon.len() * 16
    }

    /// Pages with split granules.
    fn split_pages(&self) -> usize {
        self.pages.iter().filter(|p| p.bytes.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_register_writes_keep_the_other_bytes() {
        let mut r = Registers::default();
        let rax = |lo, hi| Registers::span(&ByteRange { reg: ArchReg::RAX, lo, hi });
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
        out.clear();
        r.read(&rax(2, 4), &mut out);
        assert_eq!(out, vec![pack(3, 7)], "a whole write covers the bytes written one by one before");
        // Bytes parting again start from the whole write, not the older byte definitions.
        r.define(&rax(4, 8), pack(4, 0));
        out.clear();
        r.read(&rax(0, 8), &mut out);
        assert_eq!(out, vec![pack(3, 7), pack(4, 0)]);
        assert_eq!(r.whole(ArchReg::RAX), None);
    }

    /// Flags against one slot per flag, written and read in random masks (mostly all six
    /// arithmetic flags, as most instructions write them, or some, or some with others): the
    /// same definitions in the same order.
    #[test]
    fn flags_read_as_one_slot_per_flag_would() {
        let mut rand = crate::races::xorshift(40);
        for _ in 0..200 {
            let (mut f, mut model) = (Flags::default(), [NONE; 32]);
            for step in 0..200u64 {
                let some = rand(1 << 11) as u32;
                let bits = match rand(4) {
                    0 => ARITH,
                    1 => some & ARITH,
                    2 => some,
                    _ => ARITH | some & 0x3c0,
                };
                if rand(2) == 0 {
                    let d = pack(rand(5) as u32, step);
                    f.define(bits, d);
                    let mut b = bits;
                    while b != 0 {
                        model[b.trailing_zeros() as usize] = d;
                        b &= b - 1;
                    }
                } else {
                    let (mut got, mut want) = (vec![], vec![]);
                    f.read(bits, &mut got);
                    let mut b = bits;
                    while b != 0 {
                        let d = model[b.trailing_zeros() as usize];
                        if d != NONE && !want.contains(&d) {
                            want.push(d);
                        }
                        b &= b - 1;
                    }
                    assert_eq!(got, want, "step {step}, bits {bits:#x}");
                }
            }
        }
    }

    #[test]
    fn memory_bytes_across_a_page_boundary() {
        let mut m = Memory::default();
        let segs = [Segment { thread: 0, end: u64::MAX }];
        let at = At { thread: 0, seg: 0, start: 0 };
        m.write(0xfff, 2, pack(1, 0), at, &segs);
        m.write(0x1000, 1, pack(2, 5), at, &segs);
        let mut out = vec![];
        m.read(0xffe, 4, at, &segs, &mut out);
        assert_eq!(out, vec![pack(1, 0), pack(2, 5)]);
        out.clear();
        m.read(0x5000, 8, at, &segs, &mut out);
        assert!(out.is_empty());
        let mut f = Flags::default();
        let mut out = vec![];
        f.define(0b11, pack(4, 1));
        f.define(0b10, pack(5, 1));
        f.read(0b111, &mut out);
        assert_eq!(out, vec![pack(4, 1), pack(5, 1)]);
        assert_eq!((id_of(pack(5, 9)), inst_of(pack(5, 9))), (5, 9));
    }

    /// Byte by byte, as the shadow's definition reads: each byte's last writer and segment,
    /// and the horizon of ambiguous ones.
    #[derive(Default)]
    struct ByteModel {
        bytes: FxHashMap<u64, (Def, u32)>,
        horizon: FxHashMap<u64, u64>,
    }

    impl ByteModel {
        fn read(&self, addr: u64, size: u32, at: At, segs: &[Segment], out: &mut Vec<Def>) {
            for byte in addr..addr + size as u64 {
                let (d, w) = self.bytes.get(&byte).copied().unwrap_or((NONE, 0));
                if d != NONE && w & AMBIGUOUS == 0 && at.after(w, segs) && !out.contains(&d) {
                    out.push(d);
                }
            }
        }

        fn write(&mut self, addr: u64, size: u32, d: Def, at: At, segs: &[Segment]) {
            for byte in addr..addr + size as u64 {
                let (old, w) = self.bytes.get(&byte).copied().unwrap_or((NONE, 0));
                let writer = w & !AMBIGUOUS;
                let ordered = at.after(writer, segs);
                // The byte's horizon where it stays ambiguous (None: it is settled).
                let horizon = if old == NONE || w == at.seg {
                    None
                } else {
                    match (w & AMBIGUOUS != 0, ordered) {
                        (false, true) => None,
                        (false, false) => Some(segs[writer as usize].end),
                        (true, true) => {
                            let h = self.horizon[&byte];
                            (at.start <= h).then_some(h)
                        }
                        (true, false) => Some(self.horizon[&byte].max(segs[writer as usize].end)),
                    }
                };
                match horizon {
                    Some(h) => self.horizon.insert(byte, h),
                    None => self.horizon.remove(&byte),
                };
                self.bytes.insert(byte, (d, at.seg | if horizon.is_some() { AMBIGUOUS } else { 0 }));
            }
        }
    }

    /// Memory held a granule at a time reads as memory held byte by byte: random writes
    /// and reads, aligned and not, of 1 to 64 bytes, across granules and pages, by three
    /// threads to bytes of their own and shared ones, in segments the sync order orders or
    /// not (races make bytes ambiguous, later ordered writes settle them), give the same
    /// definitions in the same order.
    #[test]
    fn granules_read_as_bytes_would() {
        let (mut splits, mut raced, mut whole) = (0, 0, 0);
        for seed in 1..=100u64 {
            let mut rand = crate::races::xorshift(seed);
            // Segments: thread t's k-th runs from 10 * (3k + t) to 10 * (3k + t) + 25, so
            // some pairs of other threads' segments are ordered and some overlap.
            let mut segs = Vec::new();
            let mut ats = Vec::new();
            for k in 0..20u64 {
                for t in 0..3u32 {
                    let start = 10 * (3 * k + t as u64);
                    ats.push(At { thread: t, seg: segs.len() as u32, start });
                    segs.push(Segment { thread: t, end: start + 25 });
                }
            }
            let (mut m, mut model) = (Memory::default(), ByteModel::default());
            let mut at = 0usize;
            for step in 0..3000u64 {
                // A walk over the segments, back to the first after the last: threads'
                // segments ordered one way, the other, or not at all.
                at = (at + [0, 0, 0, 0, 0, 0, 1, 2, 3, 4][rand(10) as usize]) % ats.len();
                let now = ats[at];
                let size = [1, 2, 4, 8, 8, 8, 16, 32, 64, 3][rand(10) as usize];
                // Mostly the thread's own bytes, else bytes all threads share (the
                // regions cross a page boundary).
                let region = if rand(4) == 0 { 0x1000 } else { 0x10000 * (now.thread as u64 + 1) };
                let addr = region - 64 + if rand(2) == 0 { rand(160) & !7 } else { rand(160) };
                if rand(2) == 0 {
                    let d = pack(rand(40) as u32, step);
                    m.write(addr, size, d, now, &segs);
                    model.write(addr, size, d, now, &segs);
                } else {
                    let (mut got, mut want) = (vec![], vec![]);
                    m.read(addr, size, now, &segs, &mut got);
                    model.read(addr, size, now, &segs, &mut want);
                    assert_eq!(got, want, "seed {seed} step {step}: read {addr:#x} {size}");
                }
            }
            splits += m.split_pages();
            raced += model.horizon.len();
            whole += m.pages.iter().flat_map(|p| p.defs).filter(|&d| d != NONE && d != SPLIT).count();
        }
        // Granules split, ambiguous bytes, and granules whole at the end: each path ran.
        assert!(splits > 100 && raced > 100 && whole > 100, "{splits} pages split, {raced} bytes ambiguous, {whole} granules whole");
    }

    /// One write that leaves some of its bytes ambiguous (another thread wrote them in an
    /// unordered segment) and not others: a read of them all depends on it through the
    /// others, wherever they lie (before or after the ambiguous ones, across a page
    /// boundary), as a read of the others alone does.
    #[test]
    fn a_write_partly_ambiguous_is_read_through_its_settled_bytes() {
        let segs = [Segment { thread: 0, end: u64::MAX }, Segment { thread: 1, end: u64::MAX }];
        let (t0, t1) = (At { thread: 0, seg: 0, start: 0 }, At { thread: 1, seg: 1, start: 1 });
        // (The byte raced on, and the first of the two written: the raced one first or
        // second, in one page or on either side of a page boundary.)
        for (raced, write) in [(0x100, 0x100), (0x101, 0x100), (0xfff, 0xfff), (0x1000, 0xfff)] {
            let mut m = Memory::default();
            // Thread 0 writes one byte; thread 1, unordered with it, writes two bytes over
            // it and the one beside it.
            m.write(raced, 1, pack(1, 0), t0, &segs);
            m.write(write, 2, pack(2, 0), t1, &segs);
            let (mut all, mut settled) = (vec![], vec![]);
            m.read(write, 2, t1, &segs, &mut all);
            let other = if raced == write { write + 1 } else { write };
            m.read(other, 1, t1, &segs, &mut settled);
            assert_eq!(settled, vec![pack(2, 0)], "raced byte {raced:#x}");
            assert_eq!(all, settled, "raced byte {raced:#x}");
        }
    }

    /// Across threads, a read depends on a write only when the sync order puts the write's
    /// segment before the read's; two unordered writes leave the byte ambiguous until a
    /// write ordered after both.
    #[test]
    fn writes_of_other_threads_count_only_when_ordered() {
        let mut m = Memory::default();
        // Thread 0's segment 0 ends at sequence 10; thread 1's segment 1 runs from 5 to 20;
        // thread 1's segment 2 starts at 11; thread 2's segment 3 starts at 30.
        let segs = [
            Segment { thread: 0, end: 10 },
            Segment { thread: 1, end: 20 },
            Segment { thread: 1, end: u64::MAX },
            Segment { thread: 2, end: u64::MAX },
        ];
        let (t0, t1a, t1b, t2) = (
            At { thread: 0, seg: 0, start: 0 },
            At { thread: 1, seg: 1, start: 5 },
            At { thread: 1, seg: 2, start: 21 },
            At { thread: 2, seg: 3, start: 30 },
        );
        let mut out = vec![];
        m.write(0x100, 8, pack(1, 0), t0, &segs);
        m.read(0x100, 8, t1a, &segs, &mut out);
        assert!(out.is_empty(), "segment 1 began at 5, before thread 0's write was ordered (10)");
        m.read(0x100, 8, t1b, &segs, &mut out);
        assert_eq!(out, vec![pack(1, 0)], "segment 2 began at 21, after 10");
        // A write by thread 1 unordered with thread 0's: ambiguous for everyone after.
        m.write(0x200, 1, pack(1, 1), t0, &segs);
        m.write(0x200, 1, pack(2, 0), t1a, &segs);
        out.clear();
        m.read(0x200, 1, t2, &segs, &mut out);
        assert!(out.is_empty(), "two unordered writers: neither is the known last");
        // Thread 2 writes after both segments ended (30 > 20): settled again.
        m.write(0x200, 1, pack(3, 0), t2, &segs);
        m.read(0x200, 1, t2, &segs, &mut out);
        assert_eq!(out, vec![pack(3, 0)]);
    }
}
