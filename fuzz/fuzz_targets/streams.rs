//! Each chunk decoder on raw bytes: DEP_c tags, DEP_m values, packed words, the truth
//! stream and a chunk payload's sections; and the packer on any words.
#![no_main]

use arbitrary::Arbitrary;
use dep_profile::container::{ChunkView, Section};
use dep_profile::tags::TagDecoder;
use dep_profile::values::ValueReader;
use dep_profile::{packing, truth, Width};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Stream<'a> {
    Tags { wide: bool, hi: u64, bytes: &'a [u8] },
    Values { wide: bool, raw: Vec<u8>, bytes: &'a [u8] },
    Unpack { wide: bool, raw_len: u32, bytes: &'a [u8] },
    /// Packed values read a piece at a time (pieces of `piece` words), as recovery reads them.
    Pieces { wide: bool, raw_len: u16, piece: u8, ops: Vec<u8>, bytes: &'a [u8] },
    Truth(&'a [u8]),
    Chunk { wide: bool, bytes: &'a [u8] },
    /// Any words packed after bytes already in the output, and unpacked again (the packer's
    /// unaligned stores past each payload stay in its room: the sanitizer sees them).
    Pack { wide: bool, bytes: &'a [u8] },
}

fn width(wide: bool) -> Width {
    if wide {
        Width::W64
    } else {
        Width::W32
    }
}

fuzz_target!(|s: Stream| match s {
    Stream::Tags { wide, hi, bytes } => {
        if let Ok(mut d) = TagDecoder::new(width(wide), bytes, hi) {
            // Every item consumes at least one word: the loop ends.
            for _ in 0..=bytes.len() {
                match d.next_item() {
                    Ok(Some(_)) => {}
                    _ => break,
                }
            }
        }
    }
    Stream::Values { wide, raw, bytes } => {
        let mut r = ValueReader::new(width(wide), bytes);
        for n in raw {
            let ok = if n & 0x80 == 0 { r.next().is_ok() } else { r.raw((n & 0x7f) as usize).is_ok() };
            if !ok {
                break;
            }
        }
    }
    Stream::Unpack { wide, raw_len, bytes } => {
        let mut out = Vec::new();
        let _ = packing::unpack(bytes, width(wide).bytes(), raw_len as usize, &mut out);
    }
    Stream::Pieces { wide, raw_len, piece, ops, bytes } => {
        let w = width(wide);
        let Ok(words) = packing::Unpacker::new(bytes, w.bytes(), raw_len as usize) else { return };
        // Unpacked whole, where it unpacks: the reader over pieces must give what the
        // reader over the whole gives, read for read (errors where the whole ends short).
        let mut whole = Vec::new();
        let whole = packing::unpack(bytes, w.bytes(), raw_len as usize, &mut whole).is_ok().then_some(whole);
        let mut plain = whole.as_deref().map(|b| ValueReader::new(w, b));
        let mut pieces = ValueReader::packed(w, words, Vec::new()).with_piece_words(piece as usize);
        // Op bits 6-7: a word, or raw bytes, or two runs of them; bits 0-5: the length.
        let read = |r: &mut ValueReader, op: u8| {
            let n = (op & 0x3f) as usize;
            match op >> 6 {
                0 | 1 => r.next().map(|v| v.to_le_bytes().to_vec()),
                2 => r.raw(n).map(|b| b.to_vec()),
                _ => r.raw2(n, n / 2 + 1).map(|(a, b)| [a, b].concat()),
            }
        };
        for op in ops {
            let got = read(&mut pieces, op);
            if let Some(plain) = plain.as_mut() {
                let want = read(plain, op);
                assert_eq!(got.as_ref().ok(), want.as_ref().ok(), "op {op:#x}");
                assert_eq!(pieces.remaining(), plain.remaining());
            }
            if got.is_err() {
                break;
            }
        }
    }
    Stream::Truth(bytes) => {
        if let Ok(it) = truth::records(bytes) {
            for r in it {
                if r.is_err() {
                    break;
                }
            }
        }
    }
    Stream::Chunk { wide, bytes } => {
        if let Ok(v) = ChunkView::parse(bytes, width(wide)) {
            for s in Section::ALL {
                let _ = v.decompress(s);
            }
        }
    }
    Stream::Pack { wide, bytes } => {
        let w = width(wide).bytes();
        let raw = &bytes[..bytes.len() / w * w];
        let mut packed = vec![0xa5; 3];
        packing::pack(raw, w, &mut packed).expect("whole words pack");
        assert_eq!(packed[..3], [0xa5; 3]);
        let mut back = Vec::new();
        packing::unpack(&packed[3..], w, raw.len(), &mut back).expect("packed words unpack");
        assert_eq!(back, raw);
    }
});
