//! Text written straight into fixed-size chunks, each handed on when full, and the
//! numbers in it: decimal eight digits at a time, hexadecimal.

use std::io;

/// Text written straight into a fixed-size chunk, handed on when full: one copy of each
/// byte, into the chunk, before it is written out.
pub struct Text<'o> {
    /// The chunk: always [`CHUNK`] bytes long.
    pub buf: Vec<u8>,
    /// Bytes of the chunk written.
    pub n: usize,
    /// Takes a chunk and the bytes of it written, and gives the next one to fill.
    full: &'o mut dyn FnMut(Vec<u8>, usize) -> io::Result<Vec<u8>>,
}

/// Bytes of text handed on at once.
pub const CHUNK: usize = 1 << 18;
/// Room the lines written into a chunk need at most: three 20-digit numbers and their text.
pub const LINE: usize = 96;

impl<'o> Text<'o> {
    /// Text handing each full chunk to `full`.
    pub fn new(full: &'o mut dyn FnMut(Vec<u8>, usize) -> io::Result<Vec<u8>>) -> Text<'o> {
        Text { buf: vec![0; CHUNK], n: 0, full }
    }

    /// Makes room for one more line.
    #[inline]
    pub fn line(&mut self) -> io::Result<()> {
        self.lines(1).map(|_| ())
    }

    /// Makes room for `k` more lines (at most [`CHUNK`] / [`LINE`]), and answers the chunk
    /// from where its text ends on.
    #[inline]
    pub fn lines(&mut self, k: usize) -> io::Result<&mut [u8]> {
        if self.n + k * LINE > CHUNK {
            self.hand_on()?;
        }
        Ok(&mut self.buf[self.n..])
    }

    #[cold]
    fn hand_on(&mut self) -> io::Result<()> {
        let buf = std::mem::take(&mut self.buf);
        self.buf = (self.full)(buf, self.n)?;
        self.buf.resize(CHUNK, 0);
        self.n = 0;
        Ok(())
    }

    /// Hands on what is written, if anything.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.n > 0 {
            self.hand_on()?;
        }
        Ok(())
    }

    /// Hands on what is written, at the end.
    pub fn finish(mut self) -> io::Result<()> {
        self.flush()
    }

    /// Bytes of a line, as many as [`LINE`] leaves room for.
    #[inline]
    pub fn bytes<const N: usize>(&mut self, b: &[u8; N]) {
        self.buf[self.n..self.n + N].copy_from_slice(b);
        self.n += N;
    }

    /// Text of any length (a static line's place may be longer than a chunk).
    pub fn text(&mut self, mut s: &[u8]) -> io::Result<()> {
        while !s.is_empty() {
            let k = s.len().min(CHUNK - self.n);
            self.buf[self.n..self.n + k].copy_from_slice(&s[..k]);
            self.n += k;
            s = &s[k..];
            if self.n == CHUNK {
                self.hand_on()?;
            }
        }
        Ok(())
    }

    /// `v` in decimal.
    #[inline(always)]
    pub fn dec(&mut self, v: u64) {
        let at: &mut [u8; DEC] = (&mut self.buf[self.n..self.n + DEC]).try_into().expect("room for a number");
        self.n += dec(at, v);
    }

    /// `v` in lowercase hexadecimal, no prefix.
    #[inline]
    pub fn hex(&mut self, v: u64) {
        let digits = (64 - v.leading_zeros()).div_ceil(4).max(1) as usize;
        for k in 0..digits {
            self.buf[self.n + digits - 1 - k] = b"0123456789abcdef"[(v >> (k * 4) & 15) as usize];
        }
        self.n += digits;
    }
}

/// Bytes [`dec`] may write: 20 digits, rounded up to whole 8-byte groups.
pub const DEC: usize = 24;

/// The eight decimal digits of `x` (below 10^8), most significant in the low byte, as
/// values 0-9: the number's halves, quarters and then digits split in every lane at once.
#[inline(always)]
fn digits8(x: u64) -> u64 {
    let v = (x / 10_000) | ((x % 10_000) << 32);
    // Each 32-bit lane (below 10^4) by 100: 10486 / 2^20 is 1/100 closely enough there.
    let h = ((v * 10_486) >> 20) & 0x0000_007f_0000_007f;
    let v = h | ((v - h * 100) << 16);
    // Each 16-bit lane (below 100) by 10: 103 / 2^10 is 1/10 closely enough there.
    let h = ((v * 103) >> 10) & 0x000f_000f_000f_000f;
    h | ((v - h * 10) << 8)
}

/// ASCII `0` in every byte.
const ZEROS: u64 = 0x3030_3030_3030_3030;

/// Writes `x` (below 10^8) in decimal with no leading zeros at the start of `at`, 8 bytes
/// written in all; returns its length.
#[inline(always)]
fn dec8(at: &mut [u8], x: u64) -> usize {
    let d = digits8(x);
    // The leading zero digits are the low zero bytes (zero itself keeps its last digit).
    let skip = (d.trailing_zeros() / 8).min(7);
    at[..8].copy_from_slice(&((d + ZEROS) >> (skip * 8)).to_le_bytes());
    8 - skip as usize
}

const E8: u64 = 100_000_000;

/// Writes `v` in decimal at the start of `at` (bytes past the number may be written too);
/// returns its length.
#[inline(always)]
pub fn dec(at: &mut [u8; DEC], v: u64) -> usize {
    if v < E8 {
        return dec8(at, v);
    }
    let (top, low) = (v / E8, v % E8);
    let k = if top < E8 {
        dec8(at, top)
    } else {
        let k = dec8(at, top / E8);
        at[k..k + 8].copy_from_slice(&(digits8(top % E8) + ZEROS).to_le_bytes());
        k + 8
    };
    at[k..k + 8].copy_from_slice(&(digits8(low) + ZEROS).to_le_bytes());
    k + 8
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Text written through a [`Text`] with `f`, across as many chunks as it takes.
    pub fn written(f: impl FnOnce(&mut Text) -> io::Result<()>) -> String {
        let mut out = Vec::new();
        let mut full = |buf: Vec<u8>, n: usize| -> io::Result<Vec<u8>> {
            out.extend_from_slice(&buf[..n]);
            Ok(Vec::new())
        };
        let mut t = Text::new(&mut full);
        f(&mut t).unwrap();
        t.finish().unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn numbers_across_chunks() {
        let got = written(|t| {
            t.hex(0x8048242);
            t.bytes(b" ");
            t.hex(0);
            t.bytes(b" ");
            t.dec(18446744073709551615);
            Ok(())
        });
        assert_eq!(got, "8048242 0 18446744073709551615");
        // The same digits, at every length and across chunks.
        let mut want = String::new();
        let got = written(|t| {
            for k in 0..40_000u64 {
                let v = [0, 9, 10, 99, 100, 12345, u64::MAX, k.wrapping_mul(0x9e3779b97f4a7c15) >> (k % 64)][k as usize % 8];
                t.line()?;
                t.dec(v);
                t.bytes(b" ");
                t.hex(v);
                t.bytes(b"\n");
                want.push_str(&format!("{v} {v:x}\n"));
                if k % 1000 == 0 {
                    // Text longer than a chunk, from wherever the chunk stands.
                    let long = "x".repeat(CHUNK + k as usize);
                    t.text(long.as_bytes())?;
                    want.push_str(&long);
                }
            }
            Ok(())
        });
        assert!(got.len() > 20 * CHUNK);
        assert_eq!(got, want);
    }

    /// Decimal as Rust's own formatting writes it: at each side of every power of ten,
    /// and a million numbers of every bit length.
    #[test]
    fn decimal_at_every_length() {
        let mut vs = vec![0, u64::MAX, u64::MAX - 1];
        for k in 0..20 {
            let p = 10u64.pow(k);
            vs.extend([p - 1, p, p + 1, p.wrapping_mul(9).wrapping_add(p - 1)]);
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for k in 0..1_000_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            vs.push(x >> (k % 64));
        }
        for v in vs {
            let mut at = [b'#'; DEC];
            let n = dec(&mut at, v);
            assert_eq!(std::str::from_utf8(&at[..n]).unwrap(), v.to_string());
        }
    }
}
