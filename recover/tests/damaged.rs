//! Damaged profiles (flipped bytes anywhere, cut anywhere) make recovery fail with an error
//! naming the problem, or succeed; it never panics and never hangs.

use dep_profile::container::Profile;
use dep_profile::simulate::{random_code, random_path, write_profile, Rng};
use dep_profile::Machine;
use dep_recover::{ChunkFault, Counts, Format, RecoverError, Recovery, Source};
use proptest::prelude::*;

fn sample(seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let code = random_code(&mut rng, 12);
    let paths: Vec<_> = (0..2).map(|_| random_path(&mut rng, &code, 150, true)).collect();
    write_profile(Vec::new(), Machine::x86_64(2696), &code, &paths, seed).unwrap()
}

fn recover_all(bytes: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.dep");
    std::fs::write(&path, bytes).unwrap();
    let Ok(p) = Profile::open(&path) else { return };
    let rec = Recovery::new(&p, 1);
    for source in [Source::Dep, Source::Truth] {
        let _ = rec.events(source).run(&mut Counts::default());
        let mut out = Vec::new();
        let _ = rec.events(source).rendered(Format::Text, &mut out);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn damaged_profiles_never_panic(seed in 0u64..20, flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..), 1..8), cut in any::<prop::sample::Index>()) {
        let mut v = sample(seed);
        for (i, x) in flips { let i = i.index(v.len()); v[i] ^= x; }
        recover_all(&v);
        let n = cut.index(v.len());
        recover_all(&v[..n]);
    }
}

/// Payload damage past the checksums: one value missing is named with its thread and chunk.
#[test]
fn inconsistent_streams_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.dep");
    std::fs::write(&path, sample(3)).unwrap();
    let p = Profile::open(&path).unwrap();
    let out = dir.path().join("bad.dep");
    rewrite(&p, &out, |t, seq, _, values, _| {
        if t == 0 && seq == 0 && values.len() >= 8 {
            values.truncate(values.len() - 8);
        }
    });
    let bad = Profile::open(&out).unwrap();
    let err = Recovery::new(&bad, 1).events(Source::Dep).run(&mut Counts::default()).unwrap_err();
    assert!(
        matches!(
            err,
            RecoverError::Chunk { thread: 0, seq: 0, fault: ChunkFault::ValuesExhausted { .. } | ChunkFault::ValuesLeftOver { .. }, .. }
        ),
        "{err:?}"
    );
    let err = err.to_string();
    assert!(err.contains("thread 0 chunk 0") && (err.contains("exhausted") || err.contains("left over")), "{err}");
}

/// A truth stream whose rep string records are out of order is refused naming the record
/// and what is wrong with it.
#[test]
fn rep_records_out_of_order_are_named() {
    use dep_profile::truth::{TruthKind, TruthRecord};
    use dep_recover::RepProblem;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.dep");
    std::fs::write(&path, sample(4)).unwrap();
    let p = Profile::open(&path).unwrap();
    let out = dir.path().join("bad.dep");
    rewrite(&p, &out, |t, seq, _, _, truth| {
        if t == 0 && seq == 0 {
            let mut end = Vec::new();
            TruthRecord { kind: TruthKind::RepEnd, size: 1, pc: 0x1000, addr: 3 }.write(&mut end);
            truth.splice(0..0, end);
        }
    });
    let bad = Profile::open(&out).unwrap();
    let err = Recovery::new(&bad, 1).events(Source::Truth).run(&mut Counts::default()).unwrap_err();
    assert!(
        matches!(
            err,
            RecoverError::Chunk { thread: 0, seq: 0, fault: ChunkFault::TruthRep { record: 0, problem: RepProblem::EndWithoutStart }, .. }
        ),
        "{err:?}"
    );
}

/// `view`'s chunk with these tags, values and truth.
fn chunk_data<'a>(view: &dep_profile::container::ChunkView, [tags, values, truth]: [&'a [u8]; 3]) -> dep_profile::container::ChunkData<'a> {
    dep_profile::container::ChunkData {
        thread: view.thread(),
        seq: view.seq(),
        hi: view.hi(),
        status: view.status(),
        last: view.is_last(),
        regs: view.regs(),
        tags,
        values,
        truth,
    }
}

/// Rewrites a profile with each chunk's decompressed streams passed through `f` (valid checksums).
fn rewrite(p: &Profile, out: &std::path::Path, mut f: impl FnMut(u32, u32, &mut Vec<u8>, &mut Vec<u8>, &mut Vec<u8>)) {
    use dep_profile::container::{ProfileWriter, Section};
    let mut w = ProfileWriter::new(std::fs::File::create(out).unwrap(), p.width, 1).unwrap();
    w.meta(&p.meta).unwrap();
    for b in p.blocks() {
        w.block(&p.block_entry(b)).unwrap();
    }
    for t in &p.threads {
        for c in &t.chunks {
            let view = p.chunk(c).unwrap();
            let mut tags = view.decompress(Section::Tags).unwrap();
            let mut values = view.decompress(Section::Values).unwrap();
            let mut truth = view.decompress(Section::Truth).unwrap();
            f(t.index, c.seq, &mut tags, &mut values, &mut truth);
            w.chunk(&chunk_data(&view, [&tags, &values, &truth])).unwrap();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]
    /// Streams damaged behind valid checksums: recovery reports an error or finishes.
    /// Tags are flipped, values cut short; a flipped value is only a different address
    /// (values carry no redundancy), and checksums catch it in a real profile.
    #[test]
    fn damaged_streams_never_panic(seed in 0u64..10, edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6), cut in proptest::option::of(any::<prop::sample::Index>())) {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("s.dep");
        std::fs::write(&src, sample(seed)).unwrap();
        let p = Profile::open(&src).unwrap();
        let out = dir.path().join("x.dep");
        rewrite(&p, &out, |_, _, tags, values, _| {
            for (i, x) in &edits {
                if !tags.is_empty() { let i = i.index(tags.len()); tags[i] ^= x | 1; }
            }
            if let Some(c) = cut { let n = c.index(values.len() + 1); values.truncate(n); }
        });
        recover_all(&std::fs::read(&out).unwrap());
    }
}

/// Packed DEP_m is unpacked a piece at a time as the walk reads it, so a packed stream
/// short of the words its chunk claims fails where the walk reaches its end: named as the
/// section that cannot be unpacked, after the pieces before it were recovered.
#[test]
fn packed_values_short_of_their_length_are_named_where_met() {
    use dep_profile::container::{ChunkEncoder, ProfileWriter, RecordKind, Section, SectionError, ValuesZstd};
    use dep_profile::packing::PackError;
    let mut rng = Rng::new(7);
    let code = random_code(&mut rng, 40);
    let paths = vec![random_path(&mut rng, &code, 100_000, false)];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.dep");
    write_profile(std::fs::File::create(&path).unwrap(), Machine::x86_64(2696), &code, &paths, 7).unwrap();
    let p = Profile::open(&path).unwrap();
    let view = p.chunk(&p.threads[0].chunks[0]).unwrap();
    let (tags, values, truth) =
        (view.decompress(Section::Tags).unwrap(), view.decompress(Section::Values).unwrap(), view.decompress(Section::Truth).unwrap());
    assert!(values.len() > 4 * 8 * dep_profile::values::PIECE_WORDS, "several pieces of values");
    let data = chunk_data(&view, [&tags, &values, &truth]);
    // Stored packed without zstd (zstd never pays at 1/2^32), the raw length then claiming
    // four words more than were packed.
    let mut payload = ChunkEncoder::new(1).unwrap().encode(&data, p.width, ValuesZstd::ShrinksTo(u32::MAX)).unwrap();
    let at = 168 + 16 * Section::Values as usize;
    let raw = u64::from_le_bytes(payload[at..at + 8].try_into().unwrap());
    assert_eq!(raw, values.len() as u64);
    payload[at..at + 8].copy_from_slice(&(raw + 32).to_le_bytes());
    let out = dir.path().join("bad.dep");
    let mut w = ProfileWriter::new(std::fs::File::create(&out).unwrap(), p.width, 1).unwrap();
    w.meta(&p.meta).unwrap();
    for b in p.blocks() {
        w.block(&p.block_entry(b)).unwrap();
    }
    w.record(RecordKind::Chunk, &payload).unwrap();
    drop(w);
    let bad = Profile::open(&out).unwrap();
    assert_eq!(bad.chunk(&bad.threads[0].chunks[0]).unwrap().codec(Section::Values).unwrap(), dep_profile::container::Codec::Packed);
    let mut counts = Counts::default();
    let err = Recovery::new(&bad, 1).events(Source::Dep).run(&mut counts).unwrap_err();
    assert!(
        matches!(
            err,
            RecoverError::Chunk {
                thread: 0,
                seq: 0,
                fault: ChunkFault::Section(SectionError::Unpack { section: Section::Values, err: PackError::Truncated { .. } }),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(counts.reads + counts.writes > 0, "references before the damage were recovered");
}
