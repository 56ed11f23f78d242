//! DEP_m: the stream of recorded register values (paper sections 2.2 and 4.2).
//!
//! Values are little-endian words of the program's width (8 bytes on 64-bit, 4 on 32-bit),
//! in exactly the order [`crate::blocks`] prescribes; the stream itself carries no tags.
//! Vector payloads (gather indices and masks) are raw bytes padded to a whole word.

use crate::packing::{PackError, Unpacker};
use crate::Width;
use thiserror::Error;

/// Errors reading DEP_m; offsets count bytes from the stream's start.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ValueError {
    #[error("value stream exhausted at byte {offset}: {wanted} more bytes needed")]
    Exhausted { offset: usize, wanted: usize },
    /// A packed stream's piece could not be unpacked.
    #[error(transparent)]
    Unpack(PackError),
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

/// Reads a DEP_m stream front to back: words in memory, or packed words unpacked a piece
/// at a time as they are read.
#[derive(Clone, Debug)]
pub struct ValueReader<'a> {
    width: Width,
    /// The words at hand: the whole stream, or the unpacked piece in `piece`.
    src: Source<'a>,
    /// The next word's offset in the words at hand, and the stream offset of their first.
    pos: usize,
    base: usize,
}

#[derive(Clone, Debug)]
enum Source<'a> {
    Plain(&'a [u8]),
    /// `piece` holds the words unpacked so far, a piece of `piece_words` at a time.
    Packed {
        words: Unpacker<'a>,
        piece: Vec<u8>,
        piece_words: usize,
    },
}

/// Words a piece of a packed stream unpacks to (256 KiB of 8-byte words): the piece is
/// read while it is in the second-level cache.
pub const PIECE_WORDS: usize = 32 << 10;

impl<'a> ValueReader<'a> {
    /// Reads a stream held in memory.
    pub fn new(width: Width, bytes: &'a [u8]) -> Self {
        ValueReader { width, src: Source::Plain(bytes), pos: 0, base: 0 }
    }

    /// Reads a packed stream, unpacking it into `piece` (its allocation kept from an
    /// earlier reader's [`into_piece`](Self::into_piece)) a piece at a time.
    pub fn packed(width: Width, words: Unpacker<'a>, mut piece: Vec<u8>) -> Self {
        piece.clear();
        ValueReader { width, src: Source::Packed { words, piece, piece_words: PIECE_WORDS }, pos: 0, base: 0 }
    }

    /// Unpacks pieces of `n` words (at least 4) rather than [`PIECE_WORDS`].
    pub fn with_piece_words(mut self, n: usize) -> Self {
        if let Source::Packed { piece_words, .. } = &mut self.src {
            *piece_words = n.max(4);
        }
        self
    }

    /// The piece buffer, for the next reader.
    pub fn into_piece(self) -> Vec<u8> {
        match self.src {
            Source::Plain(_) => Vec::new(),
            Source::Packed { piece, .. } => piece,
        }
    }

    /// Reads one register value.
    #[inline]
    pub fn next(&mut self) -> Result<u64, ValueError> {
        let w = self.width.bytes();
        if self.pos + w > self.bytes().len() {
            self.refill(w)?;
        }
        let b = &self.bytes()[self.pos..self.pos + w];
        let v = match self.width {
            Width::W64 => u64::from_le_bytes(b.try_into().unwrap()),
            Width::W32 => u32::from_le_bytes(b.try_into().unwrap()) as u64,
        };
        self.pos += w;
        Ok(v)
    }

    /// Reads `n` raw bytes and skips their padding.
    pub fn raw(&mut self, n: usize) -> Result<&[u8], ValueError> {
        let at = self.take(padded_len(self.width, n))?;
        Ok(&self.bytes()[at..at + n])
    }

    /// Reads `a` raw bytes, then `b`, each padded: both at once, since the second read may
    /// move the words the first one's bytes are in.
    pub fn raw2(&mut self, a: usize, b: usize) -> Result<(&[u8], &[u8]), ValueError> {
        let (pa, pb) = (padded_len(self.width, a), padded_len(self.width, b));
        let at = self.take(pa + pb)?;
        let bytes = self.bytes();
        Ok((&bytes[at..at + a], &bytes[at + pa..at + pa + b]))
    }

    /// Moves past `n` bytes, at hand once this returns; gives where they start.
    fn take(&mut self, n: usize) -> Result<usize, ValueError> {
        if self.pos + n > self.bytes().len() {
            self.refill(n)?;
        }
        self.pos += n;
        Ok(self.pos - n)
    }

    /// Makes at least `n` bytes from the next one at hand, unpacking more of a packed
    /// stream; short of them the stream is exhausted, or damaged.
    #[cold]
    pub fn refill(&mut self, n: usize) -> Result<(), ValueError> {
        self.unpack_more(n).map_err(ValueError::Unpack)?;
        if self.pos + n > self.bytes().len() {
            return Err(self.exhausted(n));
        }
        Ok(())
    }

    /// Unpacks the next piece of a packed stream, enough for `n` bytes where as many are
    /// left (the words not yet read move to the front); nothing for a stream in memory.
    #[cold]
    pub fn unpack_more(&mut self, n: usize) -> Result<(), PackError> {
        let w = self.width.bytes();
        if let Source::Packed { words, piece, piece_words } = &mut self.src {
            if words.words_left() > 0 {
                piece.drain(..self.pos);
                self.base += self.pos;
                self.pos = 0;
                let want = n.div_ceil(w).max(*piece_words).saturating_sub(piece.len() / w);
                words.fill(piece, want.div_ceil(4) * 4)?;
            }
        }
        Ok(())
    }

    fn exhausted(&self, wanted: usize) -> ValueError {
        ValueError::Exhausted { offset: self.offset(), wanted: wanted - self.remaining().min(wanted) }
    }

    /// The words at hand (the stream, or its piece unpacked so far), for a caller that
    /// reads words itself from [`at`](Self::at) and hands back with [`seek`](Self::seek).
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        match &self.src {
            Source::Plain(b) => b,
            Source::Packed { piece, .. } => piece,
        }
    }

    /// The next word's offset in [`bytes`](Self::bytes).
    #[inline]
    pub fn at(&self) -> usize {
        self.pos
    }

    /// Moves to offset `pos` of [`bytes`](Self::bytes) (at most their length).
    #[inline]
    pub fn seek(&mut self, pos: usize) {
        self.pos = pos.min(self.bytes().len());
    }

    /// Byte offset of the next value in the stream.
    pub fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// Bytes not yet read, at hand or still packed.
    pub fn remaining(&self) -> usize {
        let packed = match &self.src {
            Source::Plain(_) => 0,
            Source::Packed { words, .. } => words.words_left() * self.width.bytes(),
        };
        self.bytes().len() - self.pos + packed
    }

    /// Whether words not at hand remain to unpack.
    pub fn more(&self) -> bool {
        matches!(&self.src, Source::Packed { words, .. } if words.words_left() > 0)
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

    /// What one read gave: a word, raw bytes, or an error; and where the reader is after.
    #[derive(Debug, PartialEq)]
    enum Got {
        Word(Result<u64, ValueError>),
        Raw(Result<Vec<u8>, ValueError>),
        Raw2(Result<(Vec<u8>, Vec<u8>), ValueError>),
    }

    /// Read 0: a word; 1, n: `n` raw bytes; 2, n: `n` then `n / 2 + 1` raw bytes.
    fn read(r: &mut ValueReader, op: (u8, usize)) -> (Got, usize, usize) {
        let got = match op {
            (0, _) => Got::Word(r.next()),
            (1, n) => Got::Raw(r.raw(n).map(|b| b.to_vec())),
            (_, n) => Got::Raw2(r.raw2(n, n / 2 + 1).map(|(a, b)| (a.to_vec(), b.to_vec()))),
        };
        (got, r.offset(), r.remaining())
    }

    proptest! {
        /// Read from its packed form a piece at a time, a stream gives what it gives read
        /// whole, exhaustion included (the same offsets and shortfalls).
        #[test]
        fn packed_reads_as_plain(
            vals in proptest::collection::vec(prop_oneof![any::<u8>().prop_map(u64::from), any::<u64>()], 0..300),
            ops in proptest::collection::vec((0u8..3, 0usize..40), 0..400),
            wide in any::<bool>(),
            piece in 1usize..40,
        ) {
            let width = if wide { Width::W64 } else { Width::W32 };
            let mut w = ValueWriter::new(width);
            for v in &vals {
                w.push(*v);
            }
            let bytes = w.into_bytes();
            let mut packed = Vec::new();
            crate::packing::pack(&bytes, width.bytes(), &mut packed).unwrap();
            let mut plain = ValueReader::new(width, &bytes);
            let words = Unpacker::new(&packed, width.bytes(), bytes.len()).unwrap();
            let mut pieces = ValueReader::packed(width, words, vec![5; 9]).with_piece_words(piece);
            prop_assert_eq!(pieces.remaining(), bytes.len());
            for &op in &ops {
                prop_assert_eq!(read(&mut pieces, op), read(&mut plain, op), "{:?}", op);
            }
            prop_assert_eq!(pieces.more(), pieces.remaining() > pieces.bytes().len() - pieces.at());
        }

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
