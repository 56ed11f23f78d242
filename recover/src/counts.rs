//! [`Counts`], the null sink for timing recovery itself.

use crate::error::RecoverError;
use crate::events::{BlockEvent, Marker, MemEvent, RepRun, Run};
use crate::sink::{Merge, Sink};
use dep_profile::semantics::Access;

/// A sink that keeps only counts: the null sink for timing recovery itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    pub blocks: u64,
    pub instructions: u64,
    pub reads: u64,
    pub writes: u64,
    pub signals: u64,
    /// Instructions the threads ran unrecorded ([`Marker::Unrecorded`]).
    pub unrecorded: u64,
    /// Forty-eight running hashes of the references: eight references' six 32-bit words
    /// (pc, address, size, kind), reference `p` of this sink's stream going to lanes
    /// `6 * (p % 8)..6 * (p % 8) + 6`. Lane-wise, so that eight references are a few vector
    /// instructions on six independent chains ([`hash_groups`]) instead of a latency-bound
    /// chain step each (the hash was 42% of matrix's one-core recovery as one
    /// multiply-and-rotate per reference; in 24 lanes it still waited on its chains).
    /// Counts added together add their lanes.
    lanes: [u32; LANES],
}

/// References in a group the hash takes at once.
const GROUP: usize = 8;

/// Lanes of the reference hash: one per 32-bit word of a group's references.
const LANES: usize = 6 * GROUP;

/// The lanes of the words that hold a reference's kind.
const KIND_LANES: [usize; GROUP] = {
    let mut k = [0; GROUP];
    let mut r = 0;
    while r < GROUP {
        k[r] = 6 * r + 5;
        r += 1;
    }
    k
};

/// Each lane's mask of its word: of a reference's last word only the kind (its low byte),
/// not `conditional` and `insn`, which the text format does not show.
const WORD_MASK: [u32; LANES] = {
    let mut m = [u32::MAX; LANES];
    let mut r = 0;
    while r < GROUP {
        m[KIND_LANES[r]] = 0xff;
        r += 1;
    }
    m
};

// Each reference is six initialised words: `MemEvent` is `repr(C)`, 24 bytes, no padding.
const _: () = assert!(std::mem::size_of::<MemEvent>() == 24 && std::mem::align_of::<MemEvent>() == 8);
const _: () = assert!(std::mem::offset_of!(MemEvent, size) == 16 && std::mem::offset_of!(MemEvent, access) == 20);

/// One lane's step: FNV-1a's, then a constant, so that a lane at zero does not stay there.
#[inline(always)]
fn step_lane(lane: u32, word: u32) -> u32 {
    (lane ^ word).wrapping_mul(0x0100_0193) ^ 0x9e37_79b9
}

/// Hashes whole groups of [`GROUP`] references into `lanes`, returning the writes among them.
/// Lane-wise over arrays, so the compiler makes vector code of it; compiled twice, for AVX2
/// where the CPU has it ([`hash_groups_avx2`]) and for the baseline, from this one source, which
/// the tests run in both builds where the CPU allows and in the baseline's everywhere.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // one index over four arrays, as the vectoriser wants it
fn hash_groups(lanes: &mut [u32; LANES], groups: &[[u32; LANES]]) -> u64 {
    // The masked words summed per lane: the kind lanes' sums count the writes (kind 1).
    // At most 2^20 groups a call, two kinds a sum each, so no sum wraps. (Summed in half as
    // many lanes, where the kinds of references `r` and `r + 4` meet: state and sums in 48
    // lanes each did not fit AVX2's sixteen registers.)
    let mut sums = [0u32; LANES / 2];
    for q in groups {
        for half in 0..2 {
            for j in 0..LANES / 2 {
                let k = half * LANES / 2 + j;
                let w = q[k] & WORD_MASK[k];
                lanes[k] = step_lane(lanes[k], w);
                sums[j] = sums[j].wrapping_add(w);
            }
        }
    }
    KIND_LANES[..GROUP / 2].iter().map(|&j| sums[j] as u64).sum()
}

/// [`hash_groups`] compiled for AVX2.
///
/// # Safety
/// The CPU has AVX2 (checked by the caller with `is_x86_feature_detected!`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn hash_groups_avx2(lanes: &mut [u32; LANES], groups: &[[u32; LANES]]) -> u64 {
    hash_groups(lanes, groups)
}

/// [`hash_groups`] compiled for the baseline.
fn hash_groups_base(lanes: &mut [u32; LANES], groups: &[[u32; LANES]]) -> u64 {
    hash_groups(lanes, groups)
}

/// Hashes groups with the widest code the CPU runs.
fn hash_groups_best(lanes: &mut [u32; LANES], groups: &[[u32; LANES]]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { hash_groups_avx2(lanes, groups) };
    }
    hash_groups_base(lanes, groups)
}

/// A group of references made, not read: for each of its [`GROUP`] references, its pc, its
/// address, and its size with its kind in the upper half, as little-endian pairs of the
/// lanes' words.
type Template = [u64; LANES / 2];

/// Hashes `groups` groups of references into `lanes` as [`hash_groups`] does, the first
/// group `t` and each next one `t + step`, masked with `mask`: a rep string's iterations,
/// whose words are made in registers rather than written out and read back (matrix's
/// memcpy: two byte references an iteration, most of the program's references).
#[inline(always)]
#[allow(clippy::needless_range_loop)] // one index over four arrays, as the vectoriser wants it
fn hash_run(lanes: &mut [u32; LANES], t: &Template, step: &Template, mask: &Template, groups: u64) {
    let mut t = *t;
    for _ in 0..groups {
        let w = as_words(t);
        for k in 0..LANES {
            lanes[k] = step_lane(lanes[k], w[k]);
        }
        for j in 0..LANES / 2 {
            t[j] = t[j].wrapping_add(step[j]) & mask[j];
        }
    }
}

/// A template's words, in the lanes' order (each pair's low half first).
#[inline(always)]
fn as_words(t: Template) -> [u32; LANES] {
    // SAFETY: both are plain integers of the same size, every bit pattern valid in each;
    // on a little-endian target (checked below) each `u64`'s low half comes first, as the
    // lanes want (`runs_hash_as_their_references_do` compares with the fields).
    unsafe { std::mem::transmute::<Template, [u32; LANES]>(t) }
}

// The lanes' words are the little-endian halves of pc and address.
const _: () = assert!(cfg!(target_endian = "little"));

/// [`hash_run`] compiled for AVX2.
///
/// # Safety
/// The CPU has AVX2 (checked by the caller with `is_x86_feature_detected!`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn hash_run_avx2(lanes: &mut [u32; LANES], t: &Template, step: &Template, mask: &Template, groups: u64) {
    hash_run(lanes, t, step, mask, groups)
}

/// [`hash_run`] compiled for the baseline.
fn hash_run_base(lanes: &mut [u32; LANES], t: &Template, step: &Template, mask: &Template, groups: u64) {
    hash_run(lanes, t, step, mask, groups)
}

/// Hashes a run's groups with the widest code the CPU runs.
fn hash_run_best(lanes: &mut [u32; LANES], t: &Template, step: &Template, mask: &Template, groups: u64) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { hash_run_avx2(lanes, t, step, mask, groups) };
    }
    hash_run_base(lanes, t, step, mask, groups)
}

/// `refs` as their groups of [`GROUP`], as words, and the references after the last whole one.
fn as_groups(refs: &[MemEvent]) -> (&[[u32; LANES]], &[MemEvent]) {
    let whole = refs.len() / GROUP;
    // SAFETY: `MemEvent` is `repr(C)`, 24 bytes with no padding and 8-byte aligned (asserted
    // above), so each run of `GROUP` is `4 * LANES` initialised bytes, `LANES` aligned `u32` words, within
    // `refs`; the view borrows `refs`. The tests hash the same references through this view
    // and one field at a time (`groups_hash_as_the_fields_do`).
    let groups = unsafe { std::slice::from_raw_parts(refs.as_ptr().cast::<[u32; LANES]>(), whole) };
    (groups, &refs[GROUP * whole..])
}

/// A reference's six hashed words, from its fields (little-endian halves of pc and address).
#[inline(always)]
fn words(m: &MemEvent) -> [u32; 6] {
    [m.pc as u32, (m.pc >> 32) as u32, m.addr as u32, (m.addr >> 32) as u32, m.size, m.access as u32]
}

impl Default for Counts {
    fn default() -> Self {
        Counts { blocks: 0, instructions: 0, reads: 0, writes: 0, signals: 0, unrecorded: 0, lanes: [0; LANES] }
    }
}

impl Counts {
    /// Adds another count into this one.
    pub fn add(&mut self, o: &Counts) {
        self.blocks += o.blocks;
        self.instructions += o.instructions;
        self.reads += o.reads;
        self.writes += o.writes;
        self.signals += o.signals;
        self.unrecorded = self.unrecorded.saturating_add(o.unrecorded);
        for (l, o) in self.lanes.iter_mut().zip(o.lanes) {
            *l = l.wrapping_add(o);
        }
    }

    /// A checksum of the references in order (of each chunk's, summed over chunks), equal
    /// wherever the same references were counted in the same chunks.
    pub fn checksum(&self) -> u64 {
        self.lanes.iter().fold(0u64, |h, &l| h.rotate_left(19) ^ l as u64)
    }

    fn count_refs(&mut self, refs: &[MemEvent]) {
        self.count_refs_with(refs, hash_groups_best);
    }

    /// Counts and hashes `refs`, their whole groups with `hash`.
    fn count_refs_with(&mut self, refs: &[MemEvent], hash: fn(&mut [u32; LANES], &[[u32; LANES]]) -> u64) {
        // The stream position of `refs[0]` within its group of lanes.
        let at = ((self.reads + self.writes) % GROUP as u64) as usize;
        let (groups, tail) = as_groups(refs);
        let mut writes = 0;
        if !groups.is_empty() {
            // Lanes turned so that the first six are `refs[0]`'s, turned back after. (Only
            // here: the interpreted walk hands over a block's few references at a time.)
            self.lanes.rotate_left(6 * at);
            for part in groups.chunks(1 << 20) {
                writes += hash(&mut self.lanes, part);
            }
            self.lanes.rotate_right(6 * at);
        }
        // Whole groups leave the position where it was: tail reference `i` is at `at + i`.
        for (i, m) in tail.iter().enumerate() {
            self.hash_one(at + i, m);
            writes += (m.access == Access::Write) as u64;
        }
        self.writes += writes;
        self.reads += refs.len() as u64 - writes;
    }

    /// Hashes one reference at stream position `at` (modulo [`GROUP`]).
    #[inline(always)]
    fn hash_one(&mut self, at: usize, m: &MemEvent) {
        let lane = 6 * (at % GROUP);
        for (j, w) in words(m).into_iter().enumerate() {
            self.lanes[lane + j] = step_lane(self.lanes[lane + j], w);
        }
    }

    /// Counts and hashes a rep string's references as [`count_refs`](Self::count_refs)
    /// would them written out, its whole groups with `hash`.
    fn count_rep_with(&mut self, run: &RepRun, hash: fn(&mut [u32; LANES], &Template, &Template, &Template, u64)) {
        let total = run.len();
        let at = ((self.reads + self.writes) % GROUP as u64) as usize;
        // The references before the first whole group of lanes, one at a time.
        let head = (((GROUP - at) % GROUP) as u64).min(total);
        for i in 0..head {
            self.hash_one(at + i as usize, &run.get(i));
        }
        let groups = (total - head) / GROUP as u64;
        if groups > 0 {
            // Each reference of a group is the same one of the string's (movs's read or
            // write) as in the group before, `GROUP / width` iterations on.
            let per = (GROUP / run.width()) as u64;
            let (mut t, mut step, mut mask) = ([0u64; LANES / 2], [0u64; LANES / 2], [u64::MAX; LANES / 2]);
            for r in 0..GROUP {
                let m = run.get(head + r as u64);
                t[3 * r] = m.pc;
                t[3 * r + 1] = m.addr;
                t[3 * r + 2] = m.size as u64 | (m.access as u64) << 32;
                step[3 * r + 1] = per.wrapping_mul(run.stride());
                mask[3 * r + 1] = run.mask();
            }
            hash(&mut self.lanes, &t, &step, &mask, groups);
        }
        for i in head + groups * GROUP as u64..total {
            self.hash_one(at + i as usize, &run.get(i));
        }
        let writes = run.first().iter().filter(|m| m.access == Access::Write).count() as u64 * run.iterations();
        self.writes += writes;
        self.reads += total - writes;
    }
}

impl Sink for Counts {
    type Error = RecoverError;

    fn block(&mut self, b: &BlockEvent) -> Result<bool, RecoverError> {
        self.blocks += 1;
        self.instructions += b.executed as u64;
        Ok(true)
    }

    fn refs(&mut self, _: &BlockEvent, refs: &[MemEvent]) -> Result<bool, RecoverError> {
        self.count_refs(refs);
        Ok(true)
    }

    fn rep(&mut self, _: &BlockEvent, run: &RepRun) -> Result<bool, RecoverError> {
        self.count_rep_with(run, hash_run_best);
        Ok(true)
    }

    fn marker(&mut self, _: u32, m: Marker) -> Result<bool, RecoverError> {
        match m {
            Marker::Signal(_) => self.signals += 1,
            Marker::Unrecorded(n) => self.unrecorded = self.unrecorded.saturating_add(n),
            _ => {}
        }
        Ok(true)
    }

    fn run(&mut self, run: &Run) -> Result<bool, RecoverError> {
        self.blocks += run.blocks().len() as u64;
        self.instructions += run.blocks().iter().map(|b| b.executed as u64).sum::<u64>();
        self.count_refs(run.refs());
        Ok(true)
    }
}

impl Merge for Counts {
    fn merge(&mut self, later: Self) -> Result<bool, RecoverError> {
        self.add(&later);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(n: u64) -> Vec<MemEvent> {
        (0..n)
            .map(|i| MemEvent {
                pc: 0x40_1000 + 4 * (i % 7),
                addr: 0x7fff_0000 + i * 8,
                size: 1 << (i % 4),
                access: if i % 3 == 0 { Access::Write } else { Access::Read },
                conditional: false,
                insn: 0,
            })
            .collect()
    }

    fn counted(slices: &[&[MemEvent]]) -> Counts {
        let mut c = Counts::default();
        for s in slices {
            c.count_refs(s);
        }
        c
    }

    #[test]
    fn checksum_does_not_depend_on_how_references_arrive() {
        let r = refs(23);
        let whole = counted(&[&r]);
        for a in 0..r.len() {
            for b in a..r.len() {
                let c = counted(&[&r[..a], &r[a..b], &r[b..]]);
                assert_eq!((c.checksum(), c.reads, c.writes), (whole.checksum(), whole.reads, whole.writes), "split at {a}, {b}");
            }
        }
    }

    /// The lanes as their definition says, one field at a time: reference `p`'s pc, address,
    /// size and kind into lanes `6 * (p % GROUP)` on.
    fn by_fields(r: &[MemEvent]) -> [u32; LANES] {
        let mut lanes = [0u32; LANES];
        for (p, m) in r.iter().enumerate() {
            let kind = if m.access == Access::Write { 1 } else { 0 };
            let w = [m.pc as u32, (m.pc >> 32) as u32, m.addr as u32, (m.addr >> 32) as u32, m.size, kind];
            for j in 0..6 {
                let l = &mut lanes[6 * (p % GROUP) + j];
                *l = (*l ^ w[j]).wrapping_mul(16777619) ^ 0x9e37_79b9;
            }
        }
        lanes
    }

    /// Whole groups hashed as words (by the baseline build and by the CPU's best, the same
    /// source) hash as the fields do, whatever `conditional` and `insn` hold.
    #[test]
    fn groups_hash_as_the_fields_do() {
        let mut r = refs(203);
        for (i, m) in r.iter_mut().enumerate() {
            m.conditional = i % 5 == 0;
            m.insn = (i * 7919) as u16;
            m.size = (i * 2654435761) as u32;
        }
        let want = by_fields(&r);
        for split in [0, 1, 2, 3, 4, 5, 101, 202, 203] {
            for hash in [hash_groups_base as fn(&mut [u32; LANES], &[[u32; LANES]]) -> u64, hash_groups_best] {
                let mut c = Counts::default();
                c.count_refs_with(&r[..split], hash);
                c.count_refs_with(&r[split..], hash);
                assert_eq!(c.lanes, want, "split at {split}");
                assert_eq!(c.writes, r.iter().filter(|m| m.access == Access::Write).count() as u64);
                assert_eq!(c.reads + c.writes, r.len() as u64);
            }
        }
    }

    /// A rep run hashes and counts as its references written out do, from any stream
    /// position, in both builds of the run hash: one reference an iteration or two, up or
    /// down, within a 64- or 32-bit mask (a string wrapping at 2^32), shorter than a group
    /// or many groups long.
    #[test]
    fn runs_hash_as_their_references_do() {
        let m = |pc, addr, size, access| MemEvent { pc, addr, size, access, conditional: false, insn: 7 };
        let cases = [
            (vec![m(0x40_1000, 0x7fff_1000, 1, Access::Read), m(0x40_1000, 0x7fff_9000, 1, Access::Write)], 1u64, u64::MAX),
            (vec![m(0x7f00_0000_2000, 0x5555_0000_0010, 8, Access::Write)], 8u64, u64::MAX),
            (vec![m(0x40_2000, 0x7fff_8000, 4, Access::Read)], (-4i64) as u64, u64::MAX),
            (vec![m(0x40_3000, 0x10, 2, Access::Read), m(0x40_3000, 0xffff_fff0, 2, Access::Read)], (-2i64) as u64, 0xffff_ffff),
            (vec![m(0x40_4000, 0xffff_ffe0, 1, Access::Write)], 1, 0xffff_ffff),
        ];
        let before = refs(13);
        for (first, stride, mask) in &cases {
            for iterations in [0u64, 1, 3, 4, 5, 8, 9, 31, 64, 200] {
                let run = RepRun::new(first, iterations, *stride, *mask).unwrap();
                let mut written = Vec::new();
                run.write_to(&mut written);
                for at in 0..=8 {
                    let mut want = Counts::default();
                    want.count_refs(&before[..at]);
                    want.count_refs(&written);
                    for hash in [hash_run_base as fn(&mut [u32; LANES], &Template, &Template, &Template, u64), hash_run_best] {
                        let mut got = Counts::default();
                        got.count_refs(&before[..at]);
                        got.count_rep_with(&run, hash);
                        assert_eq!(
                            (got.lanes, got.reads, got.writes),
                            (want.lanes, want.reads, want.writes),
                            "{first:?} x{iterations} after {at}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn checksum_sees_order_and_every_field() {
        let r = refs(9);
        let whole = counted(&[&r]).checksum();
        let mut swapped = r.clone();
        swapped.swap(2, 6); // lanes 2 and 2: the same lane, another order
        assert_ne!(counted(&[&swapped]).checksum(), whole);
        let mut swapped = r.clone();
        swapped.swap(1, 2); // different lanes
        assert_ne!(counted(&[&swapped]).checksum(), whole);
        for f in 0..4 {
            let mut m = r.clone();
            match f {
                0 => m[4].pc += 1,
                1 => m[4].addr += 1,
                2 => m[4].size += 1,
                _ => m[4].access = Access::Write,
            }
            assert_ne!(counted(&[&m]).checksum(), whole, "field {f}");
        }
    }
}
