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

#[inline(always)]
fn class_of(v: u64, last: u64) -> u8 {
    if v < 1 << 8 {
        0
    } else if v < 1 << 16 {
        1
    } else if (v ^ last) < 1 << 24 {
        2
    } else {
        3
    }
}

/// Packs `raw` (a whole number of `word`-byte little-endian words) into `out` (appended).
pub fn pack(raw: &[u8], word: usize, out: &mut Vec<u8>) -> Result<(), PackError> {
    if !raw.len().is_multiple_of(word) {
        return Err(PackError::Ragged(raw.len(), word));
    }
    out.reserve(raw.len() / 2 + raw.len() / (4 * word) + 1);
    let mut last = 0u64;
    for group in raw.chunks(4 * word) {
        let ctl_at = out.len();
        out.push(0);
        let mut ctl = 0u8;
        for (i, w) in group.chunks_exact(word).enumerate() {
            let v = if word == 8 { u64::from_le_bytes(w.try_into().unwrap()) } else { u32::from_le_bytes(w.try_into().unwrap()) as u64 };
            let c = class_of(v, last);
            ctl |= c << (2 * i);
            match c {
                0 => out.push(v as u8),
                1 => out.extend_from_slice(&(v as u16).to_le_bytes()),
                2 => {
                    out.extend_from_slice(&(v ^ last).to_le_bytes()[..3]);
                    last = v;
                }
                _ => {
                    out.extend_from_slice(w);
                    last = v;
                }
            }
        }
        out[ctl_at] = ctl;
    }
    Ok(())
}

/// Unpacks `packed` into `raw_len` bytes of words, appended to `out`.
pub fn unpack(packed: &[u8], word: usize, raw_len: usize, out: &mut Vec<u8>) -> Result<(), PackError> {
    if !raw_len.is_multiple_of(word) {
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
    let start = out.len();
    // Room for whole 8-byte stores past the end, trimmed below.
    out.reserve(words * word + 8);
    let lens: [usize; 4] = [1, 2, 3, word];
    let masks: [u64; 4] = [0xff, 0xffff, 0xff_ffff, if word == 8 { u64::MAX } else { 0xffff_ffff }];
    let mut last = 0u64;
    let mut p = 0usize;
    let mut k = 0usize;
    // Fast path: a whole group (at most 1 + 4 * 8 bytes) plus an 8-byte read past its end.
    // SAFETY: reads stay below `p + 41 <= packed.len()`; writes stay below
    // `start + (k + 4) * word + 8 <= capacity`, since `k + 4 <= words`.
    unsafe {
        let src = packed.as_ptr();
        let dst = out.as_mut_ptr().add(start);
        let offsets = if word == 8 { &OFFSETS_8 } else { &OFFSETS_4 };
        while k + 4 <= words && p + 1 + 4 * 8 + 8 <= packed.len() {
            let ctl = *src.add(p) as usize;
            // The four payloads' offsets come from a table, so their loads do not wait on
            // one another; only `last` is carried from word to word.
            let o = offsets[ctl];
            let g = src.add(p + 1);
            for (i, &off) in o[..4].iter().enumerate() {
                let c = (ctl >> (2 * i)) & 3;
                let x = (g.add(off as usize) as *const u64).read_unaligned() & masks[c];
                let v = x ^ (last & (((c == 2) as u64).wrapping_neg()));
                last = if c >= 2 { v } else { last };
                (dst.add((k + i) * word) as *mut u64).write_unaligned(v);
            }
            p += 1 + o[4] as usize;
            k += 4;
        }
        out.set_len(start + k * word);
    }
    // The tail, with every read checked.
    while k < words {
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
    if p != packed.len() {
        return Err(PackError::Trailing { extra: packed.len() - p });
    }
    Ok(())
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

    fn word_strategy() -> impl Strategy<Value = u64> {
        prop_oneof![
            any::<u8>().prop_map(u64::from),
            any::<u16>().prop_map(u64::from),
            (0u64..1 << 20).prop_map(|x| 0x7ffd_1234_0000 + x),
            (0u64..1 << 30).prop_map(|x| 0x5555_0000_0000 + x * 8),
            any::<u64>(),
        ]
    }

    proptest! {
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

        #[test]
        fn arbitrary_bytes_never_panic(p in prop::collection::vec(any::<u8>(), 0..300), words in 0usize..100) {
            let mut out = Vec::new();
            let _ = unpack(&p, 8, words * 8, &mut out);
            let _ = unpack(&p, 4, words * 4, &mut out);
        }
    }
}
