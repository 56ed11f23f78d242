//! DEP_m: the stream of recorded register values (paper sections 2.2 and 4.2).
//!
//! Values are little-endian words of the program's width (8 bytes on 64-bit, 4 on 32-bit),
//! in exactly the order [`crate::blocks`] prescribes; the stream itself carries no tags.
//! Vector payloads (gather indices and masks) are raw bytes padded to a whole word.

use crate::Width;
use thiserror::Error;

/// Errors reading DEP_m; offsets count bytes from the stream's start.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ValueError {
    #[error("value stream exhausted at byte {offset}: {wanted} more bytes needed")]
    Exhausted { offset: usize, wanted: usize },
}

/// Appends values to a DEP_m stream.
#[derive(Clone, Debug)]
pub struct ValueWriter {
    width: Width,
    bytes: Vec<u8>,
}

impl ValueWriter {
    pub fn new(width: Width) -> Self {
        ValueWriter { width, bytes: Vec::new() }
    }

    /// Appends one register value (truncated to the width).
    pub fn push(&mut self, v: u64) {
        match self.width {
            Width::W64 => self.bytes.extend_from_slice(&v.to_le_bytes()),
            Width::W32 => self.bytes.extend_from_slice(&(v as u32).to_le_bytes()),
        }
    }

    /// Appends raw bytes padded with zeros to a whole number of words.
    pub fn push_raw(&mut self, raw: &[u8]) {
        self.bytes.extend_from_slice(raw);
        let pad = padded_len(self.width, raw.len()) - raw.len();
        self.bytes.extend(std::iter::repeat_n(0, pad));
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

/// `n` rounded up to a whole number of value words.
pub fn padded_len(width: Width, n: usize) -> usize {
    let w = width.bytes();
    n.div_ceil(w) * w
}

/// Reads a DEP_m stream front to back.
#[derive(Clone, Debug)]
pub struct ValueReader<'a> {
    width: Width,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> ValueReader<'a> {
    pub fn new(width: Width, bytes: &'a [u8]) -> Self {
        ValueReader { width, bytes, pos: 0 }
    }

    /// Reads one register value.
    #[inline]
    pub fn next(&mut self) -> Result<u64, ValueError> {
        match self.width {
            Width::W64 => match self.bytes.get(self.pos..self.pos + 8) {
                Some(b) => {
                    self.pos += 8;
                    Ok(u64::from_le_bytes(b.try_into().unwrap()))
                }
                None => Err(self.exhausted(8)),
            },
            Width::W32 => match self.bytes.get(self.pos..self.pos + 4) {
                Some(b) => {
                    self.pos += 4;
                    Ok(u32::from_le_bytes(b.try_into().unwrap()) as u64)
                }
                None => Err(self.exhausted(4)),
            },
        }
    }

    /// Reads `n` raw bytes and skips their padding.
    pub fn raw(&mut self, n: usize) -> Result<&'a [u8], ValueError> {
        let padded = padded_len(self.width, n);
        if self.pos + padded > self.bytes.len() {
            return Err(self.exhausted(padded));
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += padded;
        Ok(out)
    }

    fn exhausted(&self, wanted: usize) -> ValueError {
        ValueError::Exhausted { offset: self.pos, wanted: wanted - (self.bytes.len() - self.pos).min(wanted) }
    }

    /// Byte offset of the next value.
    /// The stream, for a caller that reads words itself and hands back with [`seek`](Self::seek).
    #[inline]
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Moves to byte `pos` (at most the stream's length).
    #[inline]
    pub fn seek(&mut self, pos: usize) {
        self.pos = pos.min(self.bytes.len());
    }

    pub fn offset(&self) -> usize {
        self.pos
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout_is_little_endian_words() {
        let mut w = ValueWriter::new(Width::W64);
        w.push(0x1122_3344_5566_7788);
        w.push_raw(&[1, 2, 3]);
        assert_eq!(w.as_bytes(), &[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 1, 2, 3, 0, 0, 0, 0, 0]);
        let mut w32 = ValueWriter::new(Width::W32);
        w32.push(0x1_2345_6789);
        assert_eq!(w32.as_bytes(), &[0x89, 0x67, 0x45, 0x23]);
    }

    #[test]
    fn exhaustion_names_the_offset() {
        let bytes = [0u8; 12];
        let mut r = ValueReader::new(Width::W64, &bytes);
        assert_eq!(r.next(), Ok(0));
        assert_eq!(r.next(), Err(ValueError::Exhausted { offset: 8, wanted: 4 }));
    }

    proptest! {
        #[test]
        fn round_trip(vals in proptest::collection::vec(any::<u64>(), 0..100), raw in proptest::collection::vec(any::<u8>(), 0..70)) {
            for width in [Width::W32, Width::W64] {
                let mut w = ValueWriter::new(width);
                for v in &vals { w.push(*v); }
                w.push_raw(&raw);
                let bytes = w.into_bytes();
                let mut r = ValueReader::new(width, &bytes);
                for v in &vals {
                    let want = if width == Width::W32 { *v as u32 as u64 } else { *v };
                    prop_assert_eq!(r.next().unwrap(), want);
                }
                prop_assert_eq!(r.raw(raw.len()).unwrap(), &raw[..]);
                prop_assert_eq!(r.remaining(), 0);
            }
        }
    }
}
