//! Word packing of the DEP_m stream: a lossless transform applied before compression.
//!
//! DEP_m words are mostly small integers (indices loaded from memory) or pointers that share
//! their upper bytes with the pointer recorded before them. Packing stores each word in 1, 2,
//! 3 or `W` bytes, which makes the stream about a third of its size before zstd, and lets
//! zstd run at a fast level: recovery then spends a quarter of the time it did decompressing
//! 8-byte words (measurements in FORMAT.md).
//!
//! Layout, for words of `W` bytes (4 or 8): groups of four words, each a control byte then
//! the payloads of its words in order. Bits `2i..2i+1` of the control byte give word i's class:
//!
//! | class | payload | word |
//! |---|---|---|
//! | 0 | 1 byte `b` | `b` |
//! | 1 | 2 bytes `h` | `h` |
//! | 2 | 3 bytes `x` | `last ^ x`; becomes `last` |
//! | 3 | `W` bytes `v` | `v`; becomes `last` |
//!
//! `last` starts at 0 in every chunk. The last group may hold fewer than four words (the
//! count comes from the section's raw length); its unused classes are 0.

use std::hint::select_unpredictable;
use thiserror::Error;

/// Why a packed stream could not be unpacked.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PackError {
    #[error("packed DEP_m ends at byte {at} before word {word} of {words}")]
    Truncated { at: usize, word: usize, words: usize },
    #[error("packed DEP_m has {extra} bytes after its last word")]
    Trailing { extra: usize },
    #[error("raw length {0} is not a whole number of {1}-byte words")]
    Ragged(usize, usize),
}

/// For each control byte: the offsets of its four payloads after the control byte, and
/// their total length.
const fn offsets(word: u8) -> [[u8; 5]; 256] {
    let lens = [1, 2, 3, word];
    let mut t = [[0u8; 5]; 256];
    let mut ctl = 0;
    while ctl < 256 {
        let mut off = 0;
        let mut i = 0;
        while i < 4 {
            t[ctl][i] = off;
            off += lens[(ctl >> (2 * i)) & 3];
            i += 1;
        }
        t[ctl][4] = off;
        ctl += 1;
    }
    t
}

static OFFSETS_8: [[u8; 5]; 256] = offsets(8);
static OFFSETS_4: [[u8; 5]; 256] = offsets(4);

/// A word's class (see the module's table), without branches: for words of every size
/// mixed at random, a branch per word mispredicts about half the time.
#[inline(always)]
fn class_of(v: u64, last: u64) -> usize {
    let byte = (v >= 1 << 8) as usize;
    let half = (v >= 1 << 16) as usize;
    let far = ((v ^ last) >= 1 << 24) as usize;
    byte + half + (half & far)
}

/// Packs `raw` (a whole number of `word`-byte little-endian words) into `out` (appended).
pub fn pack(raw: &[u8], word: usize, out: &mut Vec<u8>) -> Result<(), PackError> {
    if !raw.len().is_multiple_of(word) {
        return Err(PackError::Ragged(raw.len(), word));
    }
    match word {
        8 => pack_words::<8>(raw, out),
        4 => pack_words::<4>(raw, out),
        _ => return Err(PackError::Ragged(raw.len(), word)),
    }
    Ok(())
}

// Never inlined, nor `Unpacker::fill_words`: inlined into `pack` (`unpack`), the two word sizes'
// loops could be merged into one with the size a run-time value, as one build of the
// workspace did to the unpacking loop (the stores' offsets scaled by a register, the masks
// read from the stack, and no branch for four one-byte words, whose groups took the
// general path): one-core recovery of interp took 16.1 s against 13.5 s. Which happened
// depended on how the crate was split into codegen units, so it changed with the
// features the build unified (`cargo build` against `cargo test`).
#[inline(never)]
fn pack_words<const W: usize>(raw: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    let words = raw.len() / W;
    // The most the output can take: a control byte per four words and `W` bytes per word.
    // Every payload is stored as 8 bytes and the next one starts where it ends, so 8 bytes
    // of room past that.
    out.reserve(words.div_ceil(4) + words * W + 8);
    let offsets = if W == 8 { &OFFSETS_8 } else { &OFFSETS_4 };
    let mut last = 0u64;
    let mut p = 0usize;
    let read = |w: &[u8]| {
        let mut b = [0u8; 8];
        b[..W].copy_from_slice(w);
        u64::from_le_bytes(b)
    };
    let mut groups = raw.chunks_exact(4 * W);
    // SAFETY: every store is below `start + p + 8`, and `p` stays at most the control bytes
    // and payloads of the words so far, below the room reserved above less 8; `set_len`
    // covers `p` bytes, each stored (control bytes and payloads are contiguous; a payload's
    // store writes past its end only bytes that a later store or the length leaves out).
    // Exercised by the property tests below, with both word sizes, every class and lengths
    // that are and are not a whole number of groups.
    unsafe {
        let dst = out.as_mut_ptr().add(start);
        // Whole groups: the four payloads' places come from the control byte's table entry,
        // so the only values carried from word to word are `last` and, per group, `p`. (A
        // word at a time, each word's store waited on the length of the one before: 3.5 ns a
        // word, the launcher's largest cost when recording interp.)
        for g in &mut groups {
            let v = [read(&g[..W]), read(&g[W..2 * W]), read(&g[2 * W..3 * W]), read(&g[3 * W..])];
            if (v[0] | v[1] | v[2] | v[3]) < 1 << 8 {
                // Four one-byte words (control byte 0), the commonest group where a program
                // reloads small values (interp: 89% of its groups), in one store: interp's
                // DEP_m packed 2.5 times as fast, other programs' 5-10% slower for the test.
                let x = v[0] << 8 | v[1] << 16 | v[2] << 24 | v[3] << 32;
                dst.add(p).cast::<[u8; 8]>().write_unaligned(x.to_le_bytes());
                p += 5;
                continue;
            }
            // `last` before each word: classes 2 and 3 are the words of 2^16 and over.
            // (Selects the compiler must not turn into branches: classes mix at random.)
            let mut l = [last; 4];
            for i in 0..3 {
                l[i + 1] = select_unpredictable(v[i] >= 1 << 16, v[i], l[i]);
            }
            last = select_unpredictable(v[3] >= 1 << 16, v[3], l[3]);
            let mut ctl = 0usize;
            let mut x = [0u64; 4];
            for i in 0..4 {
                let c = class_of(v[i], l[i]);
                ctl |= c << (2 * i);
                x[i] = select_unpredictable(c == 2, v[i] ^ l[i], v[i]);
            }
            let o = &offsets[ctl];
            *dst.add(p) = ctl as u8;
            // In order: each store's bytes past its payload are overwritten by the next.
            for i in 0..4 {
                dst.add(p + 1 + o[i] as usize).cast::<[u8; 8]>().write_unaligned(x[i].to_le_bytes());
            }
            p += 1 + o[4] as usize;
        }
        let rest = groups.remainder();
        if !rest.is_empty() {
            let ctl_at = p;
            p += 1;
            let mut ctl = 0u8;
            for (i, w) in rest.chunks_exact(W).enumerate() {
                let v = read(w);
                let c = class_of(v, last);
                ctl |= (c as u8) << (2 * i);
                let x = if c == 2 { v ^ last } else { v };
                dst.add(p).cast::<[u8; 8]>().write_unaligned(x.to_le_bytes());
                p += [1, 2, 3, W][c];
                last = if v >= 1 << 16 { v } else { last };
            }
            *dst.add(ctl_at) = ctl;
        }
        out.set_len(start + p);
    }
}

/// Unpacks `packed` into `raw_len` bytes of words, appended to `out`.
pub fn unpack(packed: &[u8], word: usize, raw_len: usize, out: &mut Vec<u8>) -> Result<(), PackError> {
    let mut u = Unpacker::new(packed, word, raw_len)?;
    u.fill(out, usize::MAX)?;
    Ok(())
}

/// A packed stream unpacked a piece at a time, so that its words can be read while they
/// are still in cache rather than written out whole first (a chunk's DEP_m unpacks to
/// megabytes).
#[derive(Clone, Debug)]
pub struct Unpacker<'a> {
    packed: &'a [u8],
    /// The word size, 4 or 8.
    word: usize,
    /// Words in the stream, and those unpacked so far.
    words: usize,
    done: usize,
    /// The next control byte's offset in `packed`.
    at: usize,
    /// The module table's `last`.
    last: u64,
}

impl<'a> Unpacker<'a> {
    /// A stream of `raw_len` bytes of `word`-byte words packed in `packed`; refused when the
    /// packed bytes cannot hold that many.
    pub fn new(packed: &'a [u8], word: usize, raw_len: usize) -> Result<Self, PackError> {
        if !raw_len.is_multiple_of(word) || (word != 4 && word != 8) {
            return Err(PackError::Ragged(raw_len, word));
        }
        let words = raw_len / word;
        // Every word takes at least one payload byte and every four a control byte, so the
        // packed bytes bound what can be unpacked: a claimed length beyond that is refused
        // before anything is reserved for it.
        let most = packed.len() / 5 * 4 + (packed.len() % 5).saturating_sub(1);
        if words > most {
            return Err(PackError::Truncated { at: packed.len(), word: most, words });
        }
        // (The last piece checks what follows the last word; with no word there is none.)
        if words == 0 && !packed.is_empty() {
            return Err(PackError::Trailing { extra: packed.len() });
        }
        Ok(Unpacker { packed, word, words, done: 0, at: 0, last: 0 })
    }

    /// Words not yet unpacked.
    pub fn words_left(&self) -> usize {
        self.words - self.done
    }

    /// Appends the next `most` words to `out` (rounded down to a whole number of groups of
    /// four, short of the stream's end), or all that are left; returns how many. The last
    /// word's piece checks that nothing follows it.
    pub fn fill(&mut self, out: &mut Vec<u8>, most: usize) -> Result<usize, PackError> {
        let left = self.words_left();
        let n = if most >= left { left } else { most & !3 };
        let before = self.done;
        match self.word {
            8 => self.fill_words::<8>(out, before + n)?,
            _ => self.fill_words::<4>(out, before + n)?,
        }
        if self.done == self.words && self.at != self.packed.len() {
            return Err(PackError::Trailing { extra: self.packed.len() - self.at });
        }
        Ok(self.done - before)
    }

    /// Unpacks words up to number `end` (a group boundary, or the stream's end).
    /// (Never inlined: see `pack_words`.)
    #[inline(never)]
    fn fill_words<const W: usize>(&mut self, out: &mut Vec<u8>, end: usize) -> Result<(), PackError> {
        let (packed, words, word) = (self.packed, self.words, W);
        let start = out.len();
        let base = self.done;
        // Room for whole 8-byte stores past the end, trimmed below.
        out.reserve((end - base) * word + 8);
        let lens: [usize; 4] = [1, 2, 3, word];
        let masks: [u64; 4] = [0xff, 0xffff, 0xff_ffff, if W == 8 { u64::MAX } else { 0xffff_ffff }];
        let mut last = self.last;
        let mut p = self.at;
        let mut k = base;
        // Fast path: a whole group (at most 1 + 4 * 8 bytes) plus an 8-byte read past its end.
        // SAFETY: reads stay below `p + 41 <= packed.len()`; writes stay below
        // `start + (k - base + 4) * word + 8 <= capacity`, since `k + 4 <= end`.
        unsafe {
            let src = packed.as_ptr();
            let dst = out.as_mut_ptr().add(start);
            let offsets = if W == 8 { &OFFSETS_8 } else { &OFFSETS_4 };
            while k + 4 <= end && p + 1 + 4 * 8 + 8 <= packed.len() {
                let ctl = *src.add(p) as usize;
                if ctl == 0 {
                    // Four one-byte words, the commonest group where a program reloads small
                    // values (interp's DEP_m: 97% of its words): no table and no masks, and
                    // `last` stays. A branch, not a select: the general group's loads wait on
                    // its control byte and table entry, this one's next group does not.
                    let x = (src.add(p + 1) as *const u32).read_unaligned();
                    for i in 0..4 {
                        (dst.add((k - base + i) * word) as *mut u64).write_unaligned(((x >> (8 * i)) & 0xff) as u64);
                    }
                    p += 5;
                    k += 4;
                    continue;
                }
                // The four payloads' offsets come from a table, so their loads do not wait on
                // one another; only `last` is carried from word to word.
                let o = offsets[ctl];
                let g = src.add(p + 1);
                for (i, &off) in o[..4].iter().enumerate() {
                    let c = (ctl >> (2 * i)) & 3;
                    let x = (g.add(off as usize) as *const u64).read_unaligned() & masks[c];
                    let v = x ^ (last & (((c == 2) as u64).wrapping_neg()));
                    last = if c >= 2 { v } else { last };
                    (dst.add((k - base + i) * word) as *mut u64).write_unaligned(v);
                }
                p += 1 + o[4] as usize;
                k += 4;
            }
            out.set_len(start + (k - base) * word);
        }
        // The rest, with every read checked: whole groups up to `end`, where the stream's
        // last group may be short.
        let r = (|| {
            while k < end {
                let ctl = *packed.get(p).ok_or(PackError::Truncated { at: p, word: k, words })?;
                p += 1;
                for i in 0..4.min(words - k) {
                    let c = ((ctl >> (2 * i)) & 3) as usize;
                    let b = packed.get(p..p + lens[c]).ok_or(PackError::Truncated { at: packed.len(), word: k, words })?;
                    let mut eight = [0u8; 8];
                    eight[..b.len()].copy_from_slice(b);
                    let x = u64::from_le_bytes(eight);
                    let v = if c == 2 { x ^ last } else { x };
                    if c >= 2 {
                        last = v;
                    }
                    out.extend_from_slice(&v.to_le_bytes()[..word]);
                    p += lens[c];
                    k += 1;
                }
            }
            Ok(())
        })();
        (self.last, self.at, self.done) = (last, p, k);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn words8(vals: &[u64]) -> Vec<u8> {
        vals.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn classes_and_layout() {
        let raw = words8(&[7, 0x1234, 0x7ffd_0000_1000, 0x7ffd_0000_2008, 0x1_0000]);
        let mut p = Vec::new();
        pack(&raw, 8, &mut p).unwrap();
        // Group 1: 0, 1, 3 (far from last = 0), 2 (xor 0x3008 with the pointer before it).
        // Group 2: 3 (0x10000 ^ last has high bits).
        let want: Vec<u8> = [
            vec![0b10_11_01_00, 7, 0x34, 0x12],
            0x7ffd_0000_1000u64.to_le_bytes().to_vec(),
            vec![0x08, 0x30, 0x00, 0b11],
            0x1_0000u64.to_le_bytes().to_vec(),
        ]
        .concat();
        assert_eq!(p, want);
        let mut back = Vec::new();
        unpack(&p, 8, raw.len(), &mut back).unwrap();
        assert_eq!(back, raw);
    }

    #[test]
    fn damaged_streams_are_errors() {
        let raw = words8(&[1, 2, 3, 0xdead_beef_0000, 5, 6]);
        let mut p = Vec::new();
        pack(&raw, 8, &mut p).unwrap();
        let mut out = Vec::new();
        assert!(matches!(unpack(&p[..p.len() - 1], 8, raw.len(), &mut out), Err(PackError::Truncated { .. })));
        let mut longer = p.clone();
        longer.push(0);
        assert!(matches!(unpack(&longer, 8, raw.len(), &mut out), Err(PackError::Trailing { extra: 1 })));
        assert!(matches!(unpack(&p, 8, 12, &mut out), Err(PackError::Ragged(12, 8))));
        // A length the packed bytes cannot hold is refused without reserving it.
        let cap = out.capacity();
        assert!(matches!(unpack(&p, 8, 1 << 40, &mut out), Err(PackError::Truncated { .. })));
        assert_eq!(out.capacity(), cap);
        assert!(matches!(pack(&raw[..5], 8, &mut out), Err(PackError::Ragged(5, 8))));
    }

    /// A stream of mostly one-byte words with pointers between them round-trips, and its
    /// packing has groups of four one-byte words (control byte 0) well before its end,
    /// where unpacking takes them on their own path.
    #[test]
    fn small_word_groups_round_trip() {
        let mut vals = Vec::new();
        for i in 0..500u64 {
            vals.push(if i % 11 == 10 { 0x7ffd_1234_0000 + i * 8 } else { i * 37 % 251 });
        }
        let raw = words8(&vals);
        let mut p = Vec::new();
        pack(&raw, 8, &mut p).unwrap();
        // The first groups: (11 words a period, so) the first two hold one-byte words only.
        assert_eq!((p[0], p[5]), (0, 0));
        let mut back = Vec::new();
        unpack(&p, 8, raw.len(), &mut back).unwrap();
        assert_eq!(back, raw);
    }

    fn word_strategy() -> impl Strategy<Value = u64> {
        prop_oneof![
            any::<u8>().prop_map(u64::from),
            any::<u16>().prop_map(u64::from),
            (0u64..1 << 20).prop_map(|x| 0x7ffd_1234_0000 + x),
            (0u64..1 << 30).prop_map(|x| 0x5555_0000_0000 + x * 8),
            any::<u64>(),
        ]
    }

    /// The module table's class of `v`, written from the table (not from `class_of`).
    fn table_class(v: u64, last: u64) -> usize {
        if v <= 0xff {
            0
        } else if v <= 0xffff {
            1
        } else if (v ^ last) >> 24 == 0 {
            2
        } else {
            3
        }
    }

    /// `n` one-byte words before each word of `runs`.
    fn small_runs(runs: &[(usize, u64)]) -> Vec<u64> {
        let mut vals = Vec::new();
        for (i, &(n, v)) in runs.iter().enumerate() {
            vals.extend((0..n).map(|j| ((i * 31 + j * 7) & 0xff) as u64));
            vals.push(v);
        }
        vals
    }

    /// Packs `vals` (cut to `word` bytes) after 5 bytes already in the output and walks the
    /// output with the module's table: control bytes, then each payload's bytes.
    fn table_walk(vals: &[u64], word: usize) -> Result<(), TestCaseError> {
        let vals: Vec<u64> = vals.iter().map(|&v| if word == 4 { v as u32 as u64 } else { v }).collect();
        let raw: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()[..word].to_vec()).collect();
        let mut p = vec![0xaa; 5];
        pack(&raw, word, &mut p).unwrap();
        prop_assert_eq!(&p[..5], &[0xaa; 5]);
        let (mut at, mut last) = (5usize, 0u64);
        for group in vals.chunks(4) {
            let ctl = p[at];
            at += 1;
            for (i, &v) in group.iter().enumerate() {
                let c = table_class(v, last);
                prop_assert_eq!(((ctl >> (2 * i)) & 3) as usize, c);
                let len = [1, 2, 3, word][c];
                let mut b = [0u8; 8];
                b[..len].copy_from_slice(&p[at..at + len]);
                let want = if c == 2 { v ^ last } else { v };
                prop_assert_eq!(u64::from_le_bytes(b), want & (u64::MAX >> (64 - 8 * len)));
                if c >= 2 {
                    last = v;
                }
                at += len;
            }
            if group.len() < 4 {
                prop_assert_eq!(ctl >> (2 * group.len()), 0, "unused classes are 0");
            }
        }
        prop_assert_eq!(at, p.len());
        Ok(())
    }

    proptest! {
        #[test]
        fn appends_each_word_as_the_table_says(vals in prop::collection::vec(word_strategy(), 0..200), word in prop::sample::select(vec![4usize, 8])) {
            table_walk(&vals, word)?;
        }

        /// Runs of one-byte words between others, so that whole groups of them (packed on a
        /// path of their own) fall at every place in a group's cycle.
        #[test]
        fn small_groups_are_packed_as_the_table_says(
            runs in prop::collection::vec((0usize..14, word_strategy()), 0..60),
            word in prop::sample::select(vec![4usize, 8]),
        ) {
            table_walk(&small_runs(&runs), word)?;
        }

        #[test]
        fn round_trip_64(vals in prop::collection::vec(word_strategy(), 0..200)) {
            let raw = words8(&vals);
            let mut p = Vec::new();
            pack(&raw, 8, &mut p).unwrap();
            let mut back = vec![9u8; 3];
            unpack(&p, 8, raw.len(), &mut back).unwrap();
            prop_assert_eq!(&back[3..], &raw[..]);
        }

        #[test]
        fn round_trip_32(vals in prop::collection::vec(word_strategy(), 0..200)) {
            let raw: Vec<u8> = vals.iter().flat_map(|v| (*v as u32).to_le_bytes()).collect();
            let mut p = Vec::new();
            pack(&raw, 4, &mut p).unwrap();
            let mut back = Vec::new();
            unpack(&p, 4, raw.len(), &mut back).unwrap();
            prop_assert_eq!(back, raw);
        }

        /// Groups of four one-byte words (unpacked on a path of their own) between others,
        /// a word that depends on `last` after them: `last` crosses those groups unchanged.
        #[test]
        fn round_trip_small_runs(
            runs in prop::collection::vec((0usize..14, word_strategy()), 0..60),
            word in prop::sample::select(vec![4usize, 8]),
        ) {
            let vals = small_runs(&runs);
            let raw: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()[..word].to_vec()).collect();
            let mut p = Vec::new();
            pack(&raw, word, &mut p).unwrap();
            let mut back = vec![7u8; 5];
            unpack(&p, word, raw.len(), &mut back).unwrap();
            prop_assert_eq!(&back[5..], &raw[..]);
        }

        /// Unpacked a piece at a time, of any sizes, a stream gives the words it gives whole,
        /// and a damaged one the same error (at its last piece at the latest).
        #[test]
        fn pieces_unpack_as_the_whole(
            vals in prop::collection::vec(word_strategy(), 0..200),
            word in prop::sample::select(vec![4usize, 8]),
            pieces in prop::collection::vec(0usize..23, 1..8),
            damage in 0usize..3,
        ) {
            let raw: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()[..word].to_vec()).collect();
            let mut p = Vec::new();
            pack(&raw, word, &mut p).unwrap();
            match damage {
                1 => { p.pop(); }
                2 => p.push(0),
                _ => {}
            }
            let mut whole = Vec::new();
            let want = unpack(&p, word, raw.len(), &mut whole);
            let mut got = vec![1u8; 3];
            let mut takes = Vec::new();
            let r = (|| {
                let mut u = Unpacker::new(&p, word, raw.len())?;
                for &n in pieces.iter().cycle() {
                    let left = u.words_left();
                    if left == 0 {
                        return Ok(());
                    }
                    let took = u.fill(&mut got, n)?;
                    takes.push((n, left, took, u.words_left()));
                    if took == 0 {
                        // A piece under a group takes nothing; the rest goes whole.
                        u.fill(&mut got, usize::MAX)?;
                    }
                }
                Ok(())
            })();
            for (n, left, took, after) in takes {
                prop_assert_eq!(took, if n >= left { left } else { n & !3 });
                prop_assert_eq!(after, left - took);
            }
            match (want, r) {
                (Ok(()), Ok(())) => prop_assert_eq!(&got[3..], &raw[..]),
                (want, r) => prop_assert_eq!(want, r),
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(p in prop::collection::vec(any::<u8>(), 0..300), words in 0usize..100) {
            let mut out = Vec::new();
            let _ = unpack(&p, 8, words * 8, &mut out);
            let _ = unpack(&p, 4, words * 4, &mut out);
        }
    }
}
