//! Chunks: independently decodable pieces of one thread's streams.
//!
//! A chunk starts at a block boundary and carries what recovery needs to start there: the
//! current H-tag, which registers are current and the register context. Layout (216-byte
//! header, little-endian), then the zstd frames of the sections back to back:
//!
//! ```text
//!   0 thread u32        4 seq u32          8 hi u64
//!  16 status u32 (bit n: register n current at the start)
//!  20 flags u32 (bit 0: last chunk; bits 8.., 16.., 24..: codec of tags, values, truth)
//!  24 regs [u64; 18]   (rax..r15, fs_base, gs_base)
//! 168 tags   raw_len u64, comp_len u64
//! 184 values raw_len u64, comp_len u64
//! 200 truth  raw_len u64, comp_len u64
//! ```

use crate::regs::NUM_REGS;
use crate::values::ValueReader;
use crate::Width;
use crate::{packing, tags};
use thiserror::Error;

/// Bytes in a chunk header.
pub const CHUNK_HEADER_LEN: usize = 216;
/// Flag: the thread's last chunk (it ended normally).
pub const FLAG_LAST: u32 = 1;

/// How a section's bytes are stored (a byte of the chunk flags per section).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// One zstd frame of the raw bytes.
    Zstd = 0,
    /// Words packed by [`packing`], then one zstd frame.
    PackedZstd = 1,
    /// Words packed by [`packing`], stored so (format 5): a fifth of the time of
    /// [`Codec::PackedZstd`] to write, for the launcher when compression falls behind.
    Packed = 2,
}

impl Codec {
    fn from_u8(b: u8) -> Option<Codec> {
        match b {
            0 => Some(Codec::Zstd),
            1 => Some(Codec::PackedZstd),
            2 => Some(Codec::Packed),
            _ => None,
        }
    }
}

/// zstd's largest expansion: a block holds at most 128 KiB and the smallest block that
/// can produce that many bytes takes 4 (a 3-byte header and one RLE byte).
pub const ZSTD_MAX_RATIO: u64 = 32 << 10;

/// Why a chunk payload's layout is refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ChunkError {
    #[error("chunk of {0} bytes is shorter than its {CHUNK_HEADER_LEN}-byte header")]
    Short(usize),
    #[error("unknown chunk flags {0:#x}")]
    Flags(u32),
    #[error("{} section has unknown codec {codec}", section.name())]
    Codec { section: Section, codec: u8 },
    #[error("{} section sizes are inconsistent (raw {raw}, compressed {comp})", section.name())]
    Inconsistent { section: Section, raw: u64, comp: u64 },
    #[error("sections need {need} bytes but the chunk has {have}")]
    Length { need: u64, have: usize },
    #[error("{} section claims {raw} bytes; at most {max} fit (its frame and the format's bound)", section.name())]
    TooLarge { section: Section, raw: u64, max: u64 },
    #[error("H-tag {hi:#x} does not fit a {bits}-bit address")]
    Hi { hi: u64, bits: u8 },
}

/// Why a section of a chunk does not decompress.
#[derive(Debug, Error)]
pub enum SectionError {
    /// The chunk's header names no codec this reader knows for the section.
    #[error(transparent)]
    Layout(#[from] ChunkError),
    #[error("starting a zstd decompressor: {0}")]
    Context(std::io::Error),
    #[error("{} section does not decompress: {err}", section.name())]
    Zstd { section: Section, err: std::io::Error },
    #[error("{} section decompresses to {got} bytes, header says {raw}", section.name())]
    Size { section: Section, got: usize, raw: u64 },
    #[error("{} section: {err}", section.name())]
    Unpack { section: Section, err: packing::PackError },
}

/// zstd level of packed DEP_m: packing leaves little for a stronger level to find, and a
/// fast level decompresses about twice as fast (FORMAT.md has the measurement).
pub const PACKED_VALUES_LEVEL: i32 = -3;

fn flag_shift(s: Section) -> u32 {
    8 + 8 * s as u32
}

/// The three streams of a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Section {
    /// DEP_c.
    Tags = 0,
    /// DEP_m.
    Values = 1,
    /// The truth stream.
    Truth = 2,
}

impl Section {
    pub const ALL: [Section; 3] = [Section::Tags, Section::Values, Section::Truth];

    /// The most raw bytes a section may hold (FORMAT.md): DEP_c and DEP_m 64 MiB, eight
    /// times the collector's buffers; the truth stream, which a long rep string grows past
    /// its buffer, 1 GiB.
    pub fn max_raw_len(self) -> u64 {
        match self {
            Section::Tags | Section::Values => 64 << 20,
            Section::Truth => 1 << 30,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Section::Tags => "DEP_c",
            Section::Values => "DEP_m",
            Section::Truth => "truth",
        }
    }
}

/// A chunk's contents before compression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkData<'a> {
    pub thread: u32,
    pub seq: u32,
    pub hi: u64,
    pub status: u32,
    pub last: bool,
    pub regs: [u64; NUM_REGS],
    pub tags: &'a [u8],
    pub values: &'a [u8],
    pub truth: &'a [u8],
}

impl ChunkData<'_> {
    /// The record payload: DEP_m packed into `width`-sized words then compressed with zstd at
    /// [`PACKED_VALUES_LEVEL`], the other sections with zstd at `level`; a section longer
    /// than readers take ([`Section::max_raw_len`]) is an error.
    pub fn encode(&self, width: Width, level: i32) -> std::io::Result<Vec<u8>> {
        Encoder::new(level)?.encode(self, width, ValuesZstd::Always)
    }
}

/// What encoding chunks needs, kept from chunk to chunk: the zstd contexts and the packing
/// buffer (made anew for each chunk of megabytes, they cost page faults and zeroing).
pub struct Encoder {
    zstd: zstd::bulk::Compressor<'static>,
    packed_zstd: zstd::bulk::Compressor<'static>,
    packed: Vec<u8>,
    /// Output room for [`Encoder::cheap_to_compress`].
    probe: Vec<u8>,
}

/// Bytes of packed DEP_m compressed to judge whether zstd pays on the rest.
const PROBE: usize = 64 << 10;

/// Whether packed DEP_m gets zstd on top: always, or only where zstd shrinks the chunk's
/// first [`PROBE`] bytes of packed words to `1/n` of them or less. Packed words are read
/// straight from the map; zstd on them decompresses at 0.5-0.9 GB/s where it only halves
/// them (compress, sort, strings, xz: a tenth to a quarter of one-core recovery), at 3-6
/// GB/s where it shrinks them to a fifth or less (matrix, an interpreter's repeating
/// values), and costs the collection 3.6 ns a byte either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValuesZstd {
    /// Always: the smallest profile.
    Always,
    /// Where the probe shrinks to `1/n` or less.
    ShrinksTo(u32),
}

impl ValuesZstd {
    /// Where zstd pays for its time: it quarters the packed words.
    pub const PAYS: ValuesZstd = ValuesZstd::ShrinksTo(4);
    /// Where zstd is cheap, for compression that has fallen behind the program: zstd's
    /// time grows with what it cannot match (an interpreter's values compressed at 25 GB/s
    /// to 0.7% of their size, a sort's at 0.9 GB/s to 26%).
    pub const CHEAP: ValuesZstd = ValuesZstd::ShrinksTo(16);
}

impl Encoder {
    /// An encoder compressing DEP_c and the truth stream at zstd `level`.
    pub fn new(level: i32) -> std::io::Result<Encoder> {
        Ok(Encoder {
            zstd: zstd::bulk::Compressor::new(level)?,
            packed_zstd: zstd::bulk::Compressor::new(PACKED_VALUES_LEVEL)?,
            packed: Vec::new(),
            probe: Vec::new(),
        })
    }

    /// Whether zstd on the `packed` DEP_m is worth it, as `when` says.
    fn zstd_pays(&mut self, packed: &[u8], when: ValuesZstd) -> std::io::Result<bool> {
        let ValuesZstd::ShrinksTo(n) = when else { return Ok(true) };
        let probe = &packed[..packed.len().min(PROBE)];
        self.probe.resize(zstd::zstd_safe::compress_bound(probe.len()), 0);
        let got = self.packed_zstd.compress_to_buffer(probe, &mut self.probe[..])?;
        Ok(got as u64 * n as u64 <= probe.len() as u64)
    }

    /// The record payload of `c`, as [`ChunkData::encode`] gives it, except that DEP_m is
    /// packed and stored without zstd ([`Codec::Packed`]) where `values` says zstd does
    /// not pay.
    pub fn encode(&mut self, c: &ChunkData, width: Width, values: ValuesZstd) -> std::io::Result<Vec<u8>> {
        let sections = [c.tags, c.values, c.truth];
        // Each section goes straight into the record after the header, which is filled in
        // last: copying megabytes of frames into the record once more cost the launcher
        // a tenth of its time beside zstd and packing (bench/compress).
        // Room for each section's zstd frame, or its packed words (a control byte per four
        // words of at least 4 bytes, and 8 bytes of room past them).
        let bound: usize = sections.iter().map(|s| zstd::zstd_safe::compress_bound(s.len()) + s.len() / 16 + 8).sum();
        let mut b = Vec::with_capacity(CHUNK_HEADER_LEN + bound + 8);
        b.resize(CHUNK_HEADER_LEN, 0);
        let mut lens = [(0u64, 0u64); 3];
        let mut flags = if c.last { FLAG_LAST } else { 0 };
        for ((s, bytes), len) in Section::ALL.into_iter().zip(sections).zip(&mut lens) {
            if bytes.len() as u64 > s.max_raw_len() {
                let e = ChunkError::TooLarge { section: s, raw: bytes.len() as u64, max: s.max_raw_len() };
                return Err(std::io::Error::other(e));
            }
            let at = b.len();
            if bytes.is_empty() {
                // Both lengths 0.
            } else if s == Section::Values && bytes.len().is_multiple_of(width.bytes()) {
                // (A stream of partial words, which no collector writes, is stored plain.)
                // Packed in place; where zstd pays, the packed words move out of the way
                // of its frame (a copy, beside zstd's time).
                packing::pack(bytes, width.bytes(), &mut b).map_err(std::io::Error::other)?;
                let codec = if self.zstd_pays(&b[at..], values)? {
                    self.packed.clear();
                    self.packed.extend_from_slice(&b[at..]);
                    b.truncate(at);
                    append_zstd(&mut self.packed_zstd, &self.packed, &mut b)?;
                    Codec::PackedZstd
                } else {
                    Codec::Packed
                };
                flags |= (codec as u32) << flag_shift(s);
            } else {
                append_zstd(&mut self.zstd, bytes, &mut b)?;
            }
            *len = (bytes.len() as u64, (b.len() - at) as u64);
        }
        let mut h = Vec::with_capacity(CHUNK_HEADER_LEN);
        h.extend_from_slice(&c.thread.to_le_bytes());
        h.extend_from_slice(&c.seq.to_le_bytes());
        h.extend_from_slice(&c.hi.to_le_bytes());
        h.extend_from_slice(&c.status.to_le_bytes());
        h.extend_from_slice(&flags.to_le_bytes());
        for r in c.regs {
            h.extend_from_slice(&r.to_le_bytes());
        }
        for (raw, comp) in lens {
            h.extend_from_slice(&raw.to_le_bytes());
            h.extend_from_slice(&comp.to_le_bytes());
        }
        debug_assert_eq!(h.len(), CHUNK_HEADER_LEN);
        b[..CHUNK_HEADER_LEN].copy_from_slice(&h);
        Ok(b)
    }
}

/// Appends one zstd frame of `src` to `out`.
fn append_zstd(z: &mut zstd::bulk::Compressor<'static>, src: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
    out.reserve(zstd::zstd_safe::compress_bound(src.len()));
    let mut end = std::io::Cursor::new(out);
    end.set_position(end.get_ref().len() as u64);
    z.compress_to_buffer(src, &mut end)?;
    Ok(())
}

/// What decompressing sections needs, kept from chunk to chunk: a zstd context (making one
/// per section cost page faults) and the packed bytes of DEP_m.
#[derive(Default)]
pub struct Decompression {
    zstd: Option<zstd::bulk::Decompressor<'static>>,
    packed: Vec<u8>,
}

/// The zstd context, made once, when a compressed section first needs one (one per section
/// cost page faults).
fn context<'z>(zstd: &'z mut Option<zstd::bulk::Decompressor<'static>>) -> Result<&'z mut zstd::bulk::Decompressor<'static>, SectionError> {
    match zstd {
        Some(d) => Ok(d),
        none => Ok(none.insert(zstd::bulk::Decompressor::new().map_err(SectionError::Context)?)),
    }
}

/// A chunk read in place from the memory-mapped profile.
#[derive(Clone, Copy, Debug)]
pub struct ChunkView<'a> {
    payload: &'a [u8],
    /// The profile's width: the word size of packed sections.
    width: Width,
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

impl<'a> ChunkView<'a> {
    /// Checks the layout of a chunk payload; the error says what is wrong.
    pub fn parse(payload: &'a [u8], width: Width) -> Result<Self, ChunkError> {
        if payload.len() < CHUNK_HEADER_LEN {
            return Err(ChunkError::Short(payload.len()));
        }
        let v = ChunkView { payload, width };
        let mut need = CHUNK_HEADER_LEN as u64;
        let flags = u32_at(payload, 20);
        if flags & !(FLAG_LAST | 0xff_ff_ff_00) != 0 {
            return Err(ChunkError::Flags(flags));
        }
        if v.hi() & !tags::hi_mask(width) != 0 {
            return Err(ChunkError::Hi { hi: v.hi(), bits: width.bits() });
        }
        for s in Section::ALL {
            let codec = v.codec(s)?;
            let (raw, comp) = v.lens(s);
            if (raw == 0) != (comp == 0) {
                return Err(ChunkError::Inconsistent { section: s, raw, comp });
            }
            // Decompression reserves `raw` bytes: no more than the frame can produce (a
            // packed word takes at least a byte) and the format allows.
            let max = s.max_raw_len().min(match codec {
                Codec::Zstd => comp.saturating_mul(ZSTD_MAX_RATIO),
                Codec::PackedZstd => comp.saturating_mul(ZSTD_MAX_RATIO).saturating_mul(width.bytes() as u64),
                Codec::Packed => comp.saturating_mul(width.bytes() as u64),
            });
            if raw > max {
                return Err(ChunkError::TooLarge { section: s, raw, max });
            }
            need = need.saturating_add(comp);
        }
        if need != payload.len() as u64 {
            return Err(ChunkError::Length { need, have: payload.len() });
        }
        Ok(v)
    }

    pub fn thread(&self) -> u32 {
        u32_at(self.payload, 0)
    }

    pub fn seq(&self) -> u32 {
        u32_at(self.payload, 4)
    }

    /// The H-tag current at the chunk's start.
    pub fn hi(&self) -> u64 {
        u64_at(self.payload, 8)
    }

    /// Bit n set: register n is current at the chunk's start, with value `regs()[n]`.
    pub fn status(&self) -> u32 {
        u32_at(self.payload, 16)
    }

    pub fn is_last(&self) -> bool {
        u32_at(self.payload, 20) & FLAG_LAST != 0
    }

    /// The register context at the chunk's start.
    pub fn regs(&self) -> [u64; NUM_REGS] {
        std::array::from_fn(|i| u64_at(self.payload, 24 + 8 * i))
    }

    /// How a section is stored.
    pub fn codec(&self, s: Section) -> Result<Codec, ChunkError> {
        let b = (u32_at(self.payload, 20) >> flag_shift(s)) as u8;
        Codec::from_u8(b).ok_or(ChunkError::Codec { section: s, codec: b })
    }

    /// Raw and compressed length of a section.
    pub fn lens(&self, s: Section) -> (u64, u64) {
        let o = 168 + 16 * s as usize;
        (u64_at(self.payload, o), u64_at(self.payload, o + 8))
    }

    /// The compressed bytes of a section, in place.
    pub fn compressed(&self, s: Section) -> &'a [u8] {
        let mut o = CHUNK_HEADER_LEN;
        for t in Section::ALL {
            let (_, comp) = self.lens(t);
            if t == s {
                return &self.payload[o..o + comp as usize];
            }
            o += comp as usize;
        }
        unreachable!()
    }

    /// Decompresses a section into `out` (cleared first), unpacking it if it is packed;
    /// `dec.packed` is scratch space for that. `parse` bounded the raw length reserved here.
    pub fn decompress_into(&self, s: Section, out: &mut Vec<u8>, dec: &mut Decompression) -> Result<(), SectionError> {
        let width = self.width;
        out.clear();
        let (raw, _) = self.lens(s);
        if raw == 0 {
            return Ok(());
        }
        let Decompression { zstd, packed: mid } = dec;
        let unpack = |packed: &[u8], out: &mut Vec<u8>| {
            packing::unpack(packed, width.bytes(), raw as usize, out).map_err(|err| SectionError::Unpack { section: s, err })
        };
        match self.codec(s)? {
            Codec::Zstd => {
                out.reserve(raw as usize);
                let n =
                    context(zstd)?.decompress_to_buffer(self.compressed(s), out).map_err(|err| SectionError::Zstd { section: s, err })?;
                if n as u64 != raw {
                    return Err(SectionError::Size { section: s, got: n, raw });
                }
            }
            Codec::PackedZstd => unpack(self.packed_words(s, zstd, mid)?, out)?,
            // Unpacked straight from the map.
            Codec::Packed => unpack(self.compressed(s), out)?,
        }
        Ok(())
    }

    /// Decompresses the packed words of a [`Codec::PackedZstd`] section into `packed`.
    fn packed_words<'p>(
        &self,
        s: Section,
        zstd: &mut Option<zstd::bulk::Decompressor<'static>>,
        packed: &'p mut Vec<u8>,
    ) -> Result<&'p [u8], SectionError> {
        let raw = self.lens(s).0 as usize;
        // Packed words are at most one byte longer per four words than the words.
        packed.clear();
        packed.reserve(raw + raw.div_ceil(4 * self.width.bytes()) + 8);
        context(zstd)?.decompress_to_buffer(self.compressed(s), packed).map_err(|err| SectionError::Zstd { section: s, err })?;
        Ok(packed)
    }

    /// A reader of the chunk's DEP_m. Packed words are unpacked a piece at a time as they
    /// are read, into `piece` (an allocation to reuse; [`ValueReader::into_piece`] gives it
    /// back); others are decompressed whole into `plain`.
    pub fn values<'s>(&self, plain: &'s mut Vec<u8>, piece: Vec<u8>, dec: &'s mut Decompression) -> Result<ValueReader<'s>, SectionError>
    where
        'a: 's,
    {
        let s = Section::Values;
        let width = self.width;
        let (raw, _) = self.lens(s);
        let unpacker = |packed: &'s [u8]| {
            packing::Unpacker::new(packed, width.bytes(), raw as usize).map_err(|err| SectionError::Unpack { section: s, err })
        };
        if raw == 0 {
            plain.clear();
            return Ok(ValueReader::new(width, plain));
        }
        match self.codec(s)? {
            Codec::Zstd => {
                self.decompress_into(s, plain, dec)?;
                Ok(ValueReader::new(width, plain))
            }
            Codec::PackedZstd => {
                let Decompression { zstd, packed } = dec;
                Ok(ValueReader::packed(width, unpacker(self.packed_words(s, zstd, packed)?)?, piece))
            }
            Codec::Packed => Ok(ValueReader::packed(width, unpacker(self.compressed(s))?, piece)),
        }
    }

    /// Decompresses a section.
    pub fn decompress(&self, s: Section) -> Result<Vec<u8>, SectionError> {
        let mut v = Vec::new();
        self.decompress_into(s, &mut v, &mut Decompression::default())?;
        Ok(v)
    }
}
