//! The container: exact layout, round trips, and every kind of bad input named precisely.

use dep_profile::container::*;
use dep_profile::packing::PackError;
use dep_profile::tags::{Escape, TagEncoder};
use dep_profile::values::ValueWriter;
use dep_profile::{Width, NUM_REGS};
use std::io::Write;

fn meta() -> Metadata {
    Metadata {
        format_version: VERSION,
        width: 64,
        command: vec!["/bin/true".into()],
        program: "/bin/true".into(),
        pid: 42,
        start_time_ns: 1,
        xsave_size: 2696,
        truth: false,
        tool: "test".into(),
        parent: None,
        windows: None,
        start_at: None,
        stop_at: None,
        attached: false,
    }
}

/// A two-thread profile with two chunks on thread 0.
fn write_sample(path: &std::path::Path) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = ProfileWriter::new(f, Width::W64, 3).unwrap();
    w.meta(&meta()).unwrap();
    w.module(&ModuleEvent {
        event: dep_profile::container::ModuleEventKind::Load,
        path: "/bin/true".into(),
        base: 0x40_0000,
        size: 0x1000,
        build_id: Some("abcd".into()),
        entry: Some(0x40_0100),
    })
    .unwrap();
    w.block(&BlockEntry { addr: 0x40_0100, version: 0, insn_count: 2, code: vec![0x50, 0xc3] }).unwrap();
    w.block(&BlockEntry { addr: 0x40_0100, version: 1, insn_count: 1, code: vec![0xc3] }).unwrap();
    for t in 0..2u32 {
        w.thread(&ThreadEvent {
            event: dep_profile::container::ThreadEventKind::Start,
            index: t,
            tid: 100 + t,
            time_ns: 5,
            ..Default::default()
        })
        .unwrap();
    }
    for seq in 0..2u32 {
        let mut tags = TagEncoder::new(Width::W64, 0);
        tags.escape(Escape::ChunkStart { seq });
        tags.block(0x40_0100);
        let mut vals = ValueWriter::new(Width::W64);
        vals.push(0x7ffc_0000_1000 + seq as u64);
        let regs: [u64; NUM_REGS] = std::array::from_fn(|i| i as u64 * 3);
        w.chunk(&ChunkData {
            thread: 0,
            seq,
            hi: 0x40,
            status: 0b10000,
            last: seq == 1,
            regs,
            tags: &tags.to_bytes(),
            values: vals.as_bytes(),
            truth: &[],
        })
        .unwrap();
    }
    w.chunk(&ChunkData {
        thread: 1,
        seq: 0,
        hi: 0,
        status: 0,
        last: true,
        regs: [0; NUM_REGS],
        tags: &[0, 0, 0xf3, 0xff],
        values: &[],
        truth: &[],
    })
    .unwrap();
    w.thread(&ThreadEvent { event: dep_profile::container::ThreadEventKind::End, index: 1, tid: 101, time_ns: 9, ..Default::default() })
        .unwrap();
    // Thread 0 created thread 1 (kernel id 101) at its sync record 7.
    let spawn = ThreadEvent {
        event: dep_profile::container::ThreadEventKind::Spawn,
        index: 0,
        tid: 100,
        time_ns: 6,
        child_tid: Some(101),
        seq: Some(7),
        tls: Some(0x7f00),
        ..Default::default()
    };
    w.thread(&spawn).unwrap();
    w.end(&EndInfo { exit_status: 0, end_time_ns: 10, lost_bytes: 0 }).unwrap();
    w.flush().unwrap();
}

#[test]
fn round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.dep");
    write_sample(&p);
    let prof = Profile::open(&p).unwrap();
    assert_eq!(prof.width, Width::W64);
    assert_eq!(prof.meta, meta());
    assert_eq!(prof.modules.len(), 1);
    assert_eq!(prof.modules[0].build_id.as_deref(), Some("abcd"));
    assert_eq!(prof.blocks().len(), 2);
    let b = prof.block(0x40_0100, 1).unwrap();
    assert_eq!(prof.code(b), &[0xc3]);
    assert_eq!(prof.threads.len(), 2);
    assert_eq!(prof.threads[0].chunks.len(), 2);
    assert_eq!(prof.threads[1].tid, 101);
    assert_eq!(prof.threads[1].end_ns, Some(9));
    assert_eq!(prof.threads[1].spawn, Some(dep_profile::container::Spawn { parent: 0, seq: 7, tls: 0x7f00 }));
    assert_eq!(prof.threads[0].spawn, None);
    assert_eq!(prof.end.as_ref().unwrap().exit_status, 0);
    assert_eq!(prof.truncated_at, None);
    let c = prof.chunk(&prof.threads[0].chunks[1]).unwrap();
    assert_eq!((c.thread(), c.seq(), c.hi(), c.status(), c.is_last()), (0, 1, 0x40, 0b10000, true));
    assert_eq!(c.regs()[5], 15);
    assert_eq!(c.decompress(Section::Values).unwrap(), (0x7ffc_0000_1001u64).to_le_bytes());
    assert_eq!(c.decompress(Section::Truth).unwrap(), Vec::<u8>::new());
    let tags = c.decompress(Section::Tags).unwrap();
    // chunk start 1, then H change to 0x40 (short form: upper bits unchanged), then L-tag 0x0100
    assert_eq!(tags, [0, 0, 0xf1, 0xff, 1, 0, 0, 0, 0, 0, 0x40, 0, 0, 0x01]);
}

#[test]
fn exact_header_bytes() {
    let mut out = Vec::new();
    let mut w = ProfileWriter::new(&mut out, Width::W64, 1).unwrap();
    w.record(RecordKind::End, b"{}").unwrap();
    assert_eq!(&out[..16], b"DEPPROF\0\x09\x00\x40\x00\x00\x00\x00\x00");
    assert_eq!(&out[16..20], &[0x9f, 0xde, 6, 0]);
    assert_eq!(&out[20..24], &crc32fast::hash(b"{}").to_le_bytes());
    assert_eq!(&out[24..32], &2u64.to_le_bytes());
    assert_eq!(&out[32..], b"{}\0\0\0\0\0\0");
}

fn open_err(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.dep");
    std::fs::write(&p, bytes).unwrap();
    match Profile::open(&p) {
        Ok(_) => panic!("opened a bad profile"),
        Err(e) => e.to_string().replace(&p.display().to_string(), "P"),
    }
}

#[test]
fn bad_inputs_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.dep");
    write_sample(&p);
    let good = std::fs::read(&p).unwrap();

    assert_eq!(open_err(b""), "P: not a DEP profile (empty file)");
    assert_eq!(open_err(b"DEPPROF"), "P: not a DEP profile (shorter than the file header)");
    assert_eq!(open_err(b"#!/bin/sh\necho hello world\n"), "P: not a DEP profile (bad magic)");
    let mut v = good.clone();
    v[8] = 10;
    assert_eq!(open_err(&v), "P: unknown format version 10 (this dep reads versions 1 to 9)");
    // A format 5 profile is read with the semantics it was recorded with: no derivations.
    assert!(Profile::open(&p).unwrap().machine().derive);
    let mut v = good.clone();
    v[8] = 5;
    let old = dir.path().join("old.dep");
    std::fs::write(&old, &v).unwrap();
    assert!(!Profile::open(&old).unwrap().machine().derive);
    // Format 8 derives, but passes no shadow's status on.
    assert!(Profile::open(&p).unwrap().machine().roots);
    v[8] = 8;
    std::fs::write(&old, &v).unwrap();
    let m = Profile::open(&old).unwrap().machine();
    assert!(m.derive && !m.roots);
    // the metadata record's payload flipped: its checksum catches it
    let mut v = good.clone();
    v[40] ^= 0x20;
    assert_eq!(open_err(&v), "P: record at byte 16: Meta record checksum mismatch");
    // garbage where a record header should be
    let mut v = good.clone();
    v[16] = 0x11;
    assert_eq!(open_err(&v), "P: record at byte 16: bad record magic 0xde11");
    let e = Profile::open(dir.path().join("missing.dep")).err().unwrap().to_string();
    assert!(e.ends_with("missing.dep: No such file or directory (os error 2)"), "{e}");
}

#[test]
fn corrupt_chunk_is_named_when_read() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.dep");
    write_sample(&p);
    let prof = Profile::open(&p).unwrap();
    let c = prof.threads[0].chunks[1];
    drop(prof);
    let mut v = std::fs::read(&p).unwrap();
    let last = (c.offset as usize) + 16 + 216 + 3; // inside the compressed DEP_c frame
    v[last] ^= 0xff;
    std::fs::write(&p, &v).unwrap();
    let prof = Profile::open(&p).unwrap();
    let e = prof.chunk(&prof.threads[0].chunks[1]).unwrap_err().to_string();
    assert_eq!(e, format!("{}: thread 0 chunk 1 (byte {}): checksum mismatch", p.display(), c.offset));
}

#[test]
fn killed_writer_leaves_a_readable_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.dep");
    write_sample(&p);
    let good = std::fs::read(&p).unwrap();
    let prof = Profile::open(&p).unwrap();
    let second = prof.threads[0].chunks[1].offset as usize;
    drop(prof);
    // Cut anywhere inside the second chunk: the first chunk and the tables before it survive.
    for cut in [second + 1, second + 16, second + 100, second + 250] {
        let t = dir.path().join("t.dep");
        std::fs::write(&t, &good[..cut]).unwrap();
        let prof = Profile::open(&t).unwrap();
        assert_eq!(prof.truncated_at, Some(second as u64), "cut at {cut}");
        assert_eq!(prof.threads[0].chunks.len(), 1);
        assert!(prof.end.is_none());
        prof.chunk(&prof.threads[0].chunks[0]).unwrap().decompress(Section::Tags).unwrap();
    }
    // A writer that pre-extended the file with zeros.
    let t = dir.path().join("z.dep");
    let mut f = std::fs::File::create(&t).unwrap();
    f.write_all(&good).unwrap();
    f.write_all(&[0u8; 100]).unwrap();
    drop(f);
    assert_eq!(Profile::open(&t).unwrap().truncated_at, Some(good.len() as u64));
}

#[test]
fn missing_chunk_in_sequence_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("gap.dep");
    let mut w = ProfileWriter::new(std::fs::File::create(&p).unwrap(), Width::W64, 1).unwrap();
    w.meta(&meta()).unwrap();
    w.chunk(&ChunkData { thread: 0, seq: 1, hi: 0, status: 0, last: false, regs: [0; NUM_REGS], tags: &[], values: &[], truth: &[] })
        .unwrap();
    drop(w);
    let e = Profile::open(&p).err().unwrap().to_string();
    let meta_len = serde_json::to_vec(&meta()).unwrap().len();
    let chunk_at = 16 + 16 + meta_len + padding(meta_len as u64);
    assert!(e.ends_with(&format!("thread 0 chunk 0 (byte {chunk_at}): missing (found chunk 1 instead)")), "{e}");
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        /// Flipping or cutting bytes anywhere gives a profile or an error, never a panic.
        #[test]
        fn damaged_profiles_never_panic(flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6), cut in any::<prop::sample::Index>()) {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("a.dep");
            write_sample(&p);
            let mut v = std::fs::read(&p).unwrap();
            for (i, x) in flips { let i = i.index(v.len()); v[i] ^= x; }
            let n = cut.index(v.len() + 1);
            v.truncate(n.max(v.len() / 2));
            std::fs::write(&p, &v).unwrap();
            if let Ok(prof) = Profile::open(&p) {
                for t in &prof.threads {
                    for c in &t.chunks {
                        if let Ok(view) = prof.chunk(c) {
                            for s in Section::ALL { let _ = view.decompress(s); }
                        }
                    }
                }
            }
        }
    }
}

/// DEP_m is stored packed (codec 1); a chunk whose DEP_m is plain zstd (codec 0, all that
/// format version 1 wrote) reads the same.
#[test]
fn packed_and_plain_values_read_alike() {
    use dep_profile::container::{ChunkData, ChunkError, ChunkView, Codec, CHUNK_HEADER_LEN};
    let values: Vec<u8> = [7u64, 0x7ffc_0000_1000, 0x7ffc_0000_1010, 65535, 1 << 40].iter().flat_map(|v| v.to_le_bytes()).collect();
    let data = ChunkData { thread: 2, seq: 5, hi: 0x40, status: 0, last: true, regs: [0; 18], tags: &[1, 0], values: &values, truth: &[] };
    let packed = data.encode(Width::W64, 1).unwrap();
    let v = ChunkView::parse(&packed, Width::W64).unwrap();
    assert_eq!(v.codec(Section::Values), Ok(Codec::PackedZstd));
    assert_eq!(v.codec(Section::Tags), Ok(Codec::Zstd));
    assert_eq!(v.decompress(Section::Values).unwrap(), values);
    assert!(v.is_last());

    // The same chunk as version 1 wrote it: flags 1 (last), DEP_m one zstd frame of the words.
    let tags = zstd::bulk::compress(&[1, 0], 1).unwrap();
    let vals = zstd::bulk::compress(&values, 1).unwrap();
    let mut plain = packed[..CHUNK_HEADER_LEN].to_vec();
    plain[20..24].copy_from_slice(&1u32.to_le_bytes());
    plain[176..184].copy_from_slice(&(tags.len() as u64).to_le_bytes());
    plain[192..200].copy_from_slice(&(vals.len() as u64).to_le_bytes());
    plain.extend_from_slice(&tags);
    plain.extend_from_slice(&vals);
    let v = ChunkView::parse(&plain, Width::W64).unwrap();
    assert_eq!(v.codec(Section::Values), Ok(Codec::Zstd));
    assert_eq!(v.decompress(Section::Values).unwrap(), values);
    assert_eq!(v.decompress(Section::Tags).unwrap(), [1, 0]);

    // An unknown codec is named.
    let mut bad = packed.clone();
    bad[22] = 9;
    assert_eq!(ChunkView::parse(&bad, Width::W64).unwrap_err(), ChunkError::Codec { section: Section::Values, codec: 9 });
}

/// A packed DEP_m that decompresses but does not unpack to its stated length is an error
/// naming the section, not a panic or a short stream.
#[test]
fn damaged_packed_values_are_named() {
    use dep_profile::container::{ChunkData, ChunkView, CHUNK_HEADER_LEN};
    let values: Vec<u8> = (0..40u64).map(|i| i * 0x1_0000_0001).flat_map(|v| v.to_le_bytes()).collect();
    let data = ChunkData { thread: 0, seq: 0, hi: 0, status: 0, last: false, regs: [0; 18], tags: &[], values: &values, truth: &[] };
    let good = data.encode(Width::W64, 1).unwrap();
    let v = ChunkView::parse(&good, Width::W64).unwrap();
    let frame = v.compressed(Section::Values);
    let packed = zstd::bulk::decompress(frame, 1 << 20).unwrap();
    for (cut, extra) in [(1usize, &[][..]), (9, &[][..]), (0, &[7u8][..])] {
        let bad_packed = [&packed[..packed.len() - cut], extra].concat();
        let bad_frame = zstd::bulk::compress(&bad_packed, 1).unwrap();
        let mut bad = good[..CHUNK_HEADER_LEN].to_vec();
        bad[192..200].copy_from_slice(&(bad_frame.len() as u64).to_le_bytes());
        bad.extend_from_slice(&bad_frame);
        let v = ChunkView::parse(&bad, Width::W64).unwrap();
        let e = v.decompress(Section::Values).unwrap_err();
        assert!(matches!(e, SectionError::Unpack { section: Section::Values, .. }), "{e}");
        assert!(e.to_string().starts_with("DEP_m section: packed DEP_m"), "{e}");
    }
}

/// Format 5: DEP_m stored packed without zstd (codec 2), as the launcher writes chunks that
/// arrive while compression is behind, reads as the zstd-compressed form does; its bytes are
/// those that the compressed form's frame holds; a length it cannot hold or a cut stream is
/// refused, naming the section.
#[test]
fn values_packed_without_zstd_read_alike() {
    use dep_profile::container::{ChunkData, ChunkEncoder, ChunkError, ChunkView, Codec, CHUNK_HEADER_LEN};
    let values: Vec<u8> = [7u64, 0x7ffc_0000_1000, 0x7ffc_0000_1010, 65535, 1 << 40, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
    let data = ChunkData { thread: 1, seq: 0, hi: 0x40, status: 0, last: false, regs: [0; 18], tags: &[1, 0], values: &values, truth: &[] };
    let mut enc = ChunkEncoder::new(1).unwrap();
    let small = enc.encode(&data, Width::W64, ValuesZstd::Always).unwrap();
    let fast = enc.encode(&data, Width::W64, ValuesZstd::CHEAP).unwrap();
    assert_eq!(small, data.encode(Width::W64, 1).unwrap(), "a kept encoder writes what a new one does");
    let (s, f) = (ChunkView::parse(&small, Width::W64).unwrap(), ChunkView::parse(&fast, Width::W64).unwrap());
    assert_eq!(f.codec(Section::Values), Ok(Codec::Packed));
    assert_eq!(f.codec(Section::Tags), Ok(Codec::Zstd));
    let packed = zstd::bulk::decompress(s.compressed(Section::Values), 1 << 20).unwrap();
    assert_eq!(f.compressed(Section::Values), &packed[..]);
    assert_eq!(f.decompress(Section::Values).unwrap(), values);
    assert_eq!(f.decompress(Section::Tags).unwrap(), [1, 0]);

    // Packed words take at least a byte each: more raw bytes than 8 per stored byte is no
    // genuine section, refused before anything is reserved.
    let mut long = fast.clone();
    let comp = packed.len() as u64;
    long[184..192].copy_from_slice(&(comp * 8 + 8).to_le_bytes());
    assert_eq!(
        ChunkView::parse(&long, Width::W64).unwrap_err(),
        ChunkError::TooLarge { section: Section::Values, raw: comp * 8 + 8, max: comp * 8 }
    );

    // One byte cut from the stored words.
    let tags = f.compressed(Section::Tags).to_vec();
    let mut cut = fast[..CHUNK_HEADER_LEN].to_vec();
    cut[192..200].copy_from_slice(&(comp - 1).to_le_bytes());
    cut.extend_from_slice(&tags);
    cut.extend_from_slice(&packed[..packed.len() - 1]);
    let v = ChunkView::parse(&cut, Width::W64).unwrap();
    let e = v.decompress(Section::Values).unwrap_err();
    assert!(matches!(e, SectionError::Unpack { section: Section::Values, err: PackError::Truncated { .. } }), "{e}");
}

/// With `fast`, DEP_m stays packed only where zstd would be dear: values zstd shrinks to a
/// sixteenth or less (an interpreter's, repeating) are compressed anyway, values it cannot
/// shrink (random pointers) are stored packed; either way they read back the same.
#[test]
fn fast_encoding_compresses_values_zstd_is_cheap_on() {
    use dep_profile::container::{ChunkData, ChunkEncoder, ChunkView, Codec};
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let random: Vec<u8> = (0..100_000)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (0x7f00_0000_0000 | (x & 0xff_ffff_fff8)).to_le_bytes()
        })
        .collect();
    let repeating: Vec<u8> =
        (0..100_000u64).flat_map(|i| [0x5555_0000_1000u64, 17, 0x5555_0000_2040, 300][i as usize % 4].to_le_bytes()).collect();
    let mut enc = ChunkEncoder::new(1).unwrap();
    for (values, codec) in [(&random, Codec::Packed), (&repeating, Codec::PackedZstd)] {
        let data = ChunkData { thread: 0, seq: 0, hi: 0, status: 0, last: false, regs: [0; 18], tags: &[1, 0], values, truth: &[] };
        let fast = enc.encode(&data, Width::W64, ValuesZstd::CHEAP).unwrap();
        let v = ChunkView::parse(&fast, Width::W64).unwrap();
        assert_eq!(v.codec(Section::Values), Ok(codec));
        assert!(v.decompress(Section::Values).unwrap() == *values);
    }
}

/// `ValuesZstd`: DEP_m gets zstd where it shrinks the packed words to `1/n` or less, judged
/// on the chunk's first 64 KiB. Streams that zstd shrinks (as the `Always` frames show) to
/// about a half, a fifth and a hundredth: halved words stay packed under `PAYS` (a quarter)
/// and `CHEAP` (a sixteenth), a fifth gets zstd under `PAYS` only, a hundredth under both.
#[test]
fn values_get_zstd_where_it_shrinks_them_enough() {
    use dep_profile::container::{ChunkData, ChunkEncoder, ChunkView, Codec};
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut random = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    // One word in `every` is a far pointer with random low bits, the others repeat a
    // short pattern.
    let mut stream = |every: u64| -> Vec<u8> {
        (0..100_000u64)
            .flat_map(|i| {
                let v = if i % every == 0 {
                    0x7f00_0000_0000 | (random() & 0xff_ffff_fff8)
                } else {
                    [17u64, 0x5555_0000_2040, 300][i as usize % 3]
                };
                v.to_le_bytes()
            })
            .collect()
    };
    let (half, fifth, hundredth) = (stream(2), stream(12), stream(400));
    let mut enc = ChunkEncoder::new(1).unwrap();
    let mut encode = |values: &[u8], zstd: ValuesZstd| {
        let data = ChunkData { thread: 0, seq: 0, hi: 0, status: 0, last: false, regs: [0; 18], tags: &[1, 0], values, truth: &[] };
        let bytes = enc.encode(&data, Width::W64, zstd).unwrap();
        let v = ChunkView::parse(&bytes, Width::W64).unwrap();
        assert!(v.decompress(Section::Values).unwrap() == values);
        let codec = v.codec(Section::Values).unwrap();
        let size = v.lens(Section::Values).1 as f64;
        (codec, size)
    };
    for (values, shrinks, pays, cheap) in [
        (&half, (0.3, 0.9), Codec::Packed, Codec::Packed),
        (&fifth, (0.08, 0.22), Codec::PackedZstd, Codec::Packed),
        (&hundredth, (0.0, 0.05), Codec::PackedZstd, Codec::PackedZstd),
    ] {
        let (always, zstd) = encode(values, ValuesZstd::Always);
        let mut packed = Vec::new();
        dep_profile::packing::pack(values, 8, &mut packed).unwrap();
        let ratio = zstd / packed.len() as f64;
        assert_eq!(always, Codec::PackedZstd);
        assert!(shrinks.0 <= ratio && ratio <= shrinks.1, "the fixture: zstd makes {ratio:.3} of the packed words, want {shrinks:?}");
        assert_eq!(encode(values, ValuesZstd::PAYS).0, pays, "{ratio:.3}");
        assert_eq!(encode(values, ValuesZstd::CHEAP).0, cheap, "{ratio:.3}");
    }
}
