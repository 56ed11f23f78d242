//! Hostile profiles: counts, lengths and ids that would wrap, allocate without bound or
//! index out of range are refused where they enter, each by its own error variant.

use dep_profile::blocks::MAX_BLOCK_INSNS;
use dep_profile::container::*;
use dep_profile::{Width, NUM_REGS};

fn meta(xsave_size: u32) -> Metadata {
    Metadata {
        format_version: VERSION,
        width: 64,
        command: vec!["/bin/true".into()],
        program: "/bin/true".into(),
        pid: 42,
        start_time_ns: 1,
        xsave_size,
        truth: false,
        tool: "test".into(),
        parent: None,
        windows: None,
        start_at: None,
        stop_at: None,
        attached: false,
    }
}

/// Writes a profile with `meta`, then whatever `more` adds, and opens it.
fn open_with(xsave_size: u32, more: impl FnOnce(&mut ProfileWriter<std::fs::File>)) -> (tempfile::TempDir, Result<Profile, ProfileError>) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("h.dep");
    let mut w = ProfileWriter::new(std::fs::File::create(&p).unwrap(), Width::W64, 1).unwrap();
    w.meta(&meta(xsave_size)).unwrap();
    more(&mut w);
    w.flush().unwrap();
    drop(w);
    let r = Profile::open(&p);
    (dir, r)
}

fn thread(event: ThreadEventKind, index: u32) -> ThreadEvent {
    ThreadEvent { event, index, tid: 100 + index, time_ns: 5, ..Default::default() }
}

#[test]
fn block_table_refuses_a_70000_instruction_block() {
    // 70,000 nops: instruction indices and counts are 16-bit downstream.
    let (_d, r) = open_with(2696, |w| {
        w.block(&BlockEntry { addr: 0x40_1000, version: 0, insn_count: 70_000, code: vec![0x90; 70_000] }).unwrap();
    });
    assert!(matches!(r, Err(ProfileError::BlockTooLong { addr: 0x40_1000, version: 0, insns: 70_000, .. })), "{:?}", r.as_ref().err());
    // The longest block that fits is kept.
    let n = MAX_BLOCK_INSNS as u32;
    let (_d, r) = open_with(2696, |w| {
        w.block(&BlockEntry { addr: 0x40_1000, version: 0, insn_count: n, code: vec![0x90; n as usize] }).unwrap();
    });
    assert_eq!(r.unwrap().blocks()[0].insn_count, n);
}

#[test]
fn xsave_size_beyond_the_architectural_bound_is_refused() {
    let (_d, r) = open_with(u32::MAX, |_| {});
    assert!(matches!(r, Err(ProfileError::XsaveSize { size: u32::MAX, .. })), "{:?}", r.as_ref().err());
    let (_d, r) = open_with(MAX_XSAVE_SIZE, |_| {});
    assert_eq!(r.unwrap().machine().xsave_size, MAX_XSAVE_SIZE);
}

#[test]
fn thread_indices_name_their_place_in_the_table() {
    // One record naming thread 4,000,000,000: readers index threads by their index.
    let (_d, r) = open_with(2696, |w| w.thread(&thread(ThreadEventKind::Start, 4_000_000_000)).unwrap());
    assert!(matches!(r, Err(ProfileError::ThreadIndex { index: 4_000_000_000, .. })), "{:?}", r.as_ref().err());
    // A thread whose records were lost leaves a gap: it is filled, so threads[i] is thread i.
    let (_d, r) = open_with(2696, |w| {
        for i in [0, 2, 3] {
            w.thread(&thread(ThreadEventKind::Start, i)).unwrap();
        }
    });
    let p = r.unwrap();
    assert_eq!(p.threads.iter().map(|t| t.index).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert_eq!((p.threads[1].start_ns, p.threads[1].chunks.len()), (None, 0));
    assert_eq!(p.threads[2].tid, 102);
}

#[test]
fn module_past_the_address_space_is_refused() {
    let (_d, r) = open_with(2696, |w| {
        let m =
            ModuleEvent { event: ModuleEventKind::Load, path: "/x".into(), base: u64::MAX - 10, size: 100, build_id: None, entry: None };
        w.module(&m).unwrap();
    });
    assert!(matches!(r, Err(ProfileError::ModuleRange { size: 100, .. })), "{:?}", r.as_ref().err());
}

/// Event kinds are read as the names the collector writes; any other is refused where it
/// enters, naming the record, and the known ones round-trip as their names.
#[test]
fn unknown_event_kinds_are_refused() {
    for (kind, json) in [
        (RecordKind::Thread, r#"{"event":"other","index":0,"tid":1,"time_ns":0}"#),
        (RecordKind::Module, r#"{"event":"mapped","path":"/x","base":4096,"size":4096}"#),
    ] {
        let (_d, r) = open_with(2696, |w| w.record(kind, json.as_bytes()).unwrap());
        match r {
            Err(ProfileError::Record { why, .. }) => assert!(why.contains("unknown variant"), "{why}"),
            other => panic!("{kind:?} {json}: {:?}", other.err()),
        }
    }
    let t = serde_json::to_string(&thread(ThreadEventKind::Spawn, 0)).unwrap();
    assert!(t.contains(r#""event":"spawn""#), "{t}");
    let (_d, r) = open_with(2696, |w| {
        w.record(RecordKind::Module, br#"{"event":"load","path":"/x","base":4096,"size":4096}"#).unwrap();
        w.record(RecordKind::Module, br#"{"event":"unload","path":"/x","base":4096,"size":4096}"#).unwrap();
    });
    let kinds: Vec<ModuleEventKind> = r.unwrap().modules.iter().map(|m| m.event).collect();
    assert_eq!(kinds, [ModuleEventKind::Load, ModuleEventKind::Unload]);
}

fn chunk(tags: &[u8], values: &[u8]) -> Vec<u8> {
    ChunkData { thread: 0, seq: 0, hi: 0x40, status: 0, last: true, regs: [0; NUM_REGS], tags, values, truth: &[] }
        .encode(Width::W64, 1)
        .unwrap()
}

#[test]
fn section_lengths_are_bounded_by_what_their_frames_can_hold() {
    let values: Vec<u8> = (0..64u64).flat_map(|v| v.to_le_bytes()).collect();
    let good = chunk(&[1, 0, 2, 0], &values);
    assert!(ChunkView::parse(&good, Width::W64).is_ok());
    // A raw length of a terabyte for a frame of a few bytes, and one just past each bound.
    for (s, at) in [(Section::Tags, 168), (Section::Values, 184)] {
        let comp = u64::from_le_bytes(good[at + 8..at + 16].try_into().unwrap());
        let ratio = ZSTD_MAX_RATIO * if s == Section::Values { 8 } else { 1 };
        for raw in [1u64 << 40, comp * ratio + 1, s.max_raw_len() + 1] {
            let mut bad = good.clone();
            bad[at..at + 8].copy_from_slice(&raw.to_le_bytes());
            let r = ChunkView::parse(&bad, Width::W64);
            assert!(matches!(r, Err(ChunkError::TooLarge { section, raw: r2, .. }) if section == s && r2 == raw), "{s:?} {raw}: {r:?}");
        }
    }
}

#[test]
fn zstd_ratio_bound_holds_for_the_most_compressible_input() {
    // Zeros compress best; the bound must still admit them at every level the writer uses.
    for level in [-3, 1, 19] {
        let zeros = vec![0u8; 16 << 20];
        let f = zstd::bulk::compress(&zeros, level).unwrap();
        assert!(zeros.len() as u64 <= f.len() as u64 * ZSTD_MAX_RATIO, "level {level}: {} bytes from {}", zeros.len(), f.len());
    }
}

#[test]
fn chunk_h_tag_beyond_the_address_width_is_refused() {
    let mut bad = chunk(&[1, 0], &[]);
    bad[8..16].copy_from_slice(&(1u64 << 48).to_le_bytes());
    assert!(matches!(ChunkView::parse(&bad, Width::W64), Err(ChunkError::Hi { hi, .. }) if hi == 1 << 48));
    // On 32-bit the H-tag has 16 bits.
    let mut bad = chunk(&[1, 0], &[]);
    bad[8..16].copy_from_slice(&0x1_0000u64.to_le_bytes());
    assert!(matches!(ChunkView::parse(&bad, Width::W32), Err(ChunkError::Hi { hi: 0x1_0000, .. })));
    bad[8..16].copy_from_slice(&0xffffu64.to_le_bytes());
    assert!(ChunkView::parse(&bad, Width::W32).is_ok());
}

#[test]
fn writer_refuses_sections_readers_would_refuse() {
    let tags = vec![1u8; Section::Tags.max_raw_len() as usize + 2];
    let e = ChunkData { thread: 0, seq: 0, hi: 0, status: 0, last: true, regs: [0; NUM_REGS], tags: &tags, values: &[], truth: &[] }
        .encode(Width::W64, 1)
        .map(|b| b.len())
        .unwrap_err();
    assert!(e.to_string().contains("DEP_c section"), "{e}");
}

/// A profile's family is its forked and exec'd children's profiles, PROFILE.1, ...; one
/// whose parent is none of the processes before it (a file left from another run) is left
/// out and named, and the numbering ends at the first missing file.
#[test]
fn a_family_keeps_its_children_and_names_strays() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("f.dep");
    let write = |path: &std::path::Path, pid: u32, parent: Option<u32>| {
        let mut w = ProfileWriter::new(std::fs::File::create(path).unwrap(), Width::W64, 1).unwrap();
        let parent = parent.map(|parent_pid| ParentLink { how: "fork".into(), parent_pid });
        w.meta(&Metadata { pid, parent, ..meta(2696) }).unwrap();
        w.flush().unwrap();
    };
    let numbered = |n: u32| std::path::PathBuf::from(format!("{}.{n}", base.display()));
    write(&base, 10, None);
    write(&numbered(1), 11, Some(10));
    write(&numbered(2), 12, Some(99));
    write(&numbered(3), 13, Some(11));
    write(&numbered(5), 15, Some(10));
    let (kept, strays) = open_family(&base).unwrap();
    assert_eq!(kept.iter().map(|p| p.meta.pid).collect::<Vec<_>>(), [10, 11, 13]);
    assert_eq!(strays, [numbered(2)]);
    assert_eq!(family_paths(&base).len(), 4, "the numbering ends at .4, missing");
}

/// A chunk record of thread `thread`, number `seq` (its streams do not matter here).
fn chunk_of(thread: u32, seq: u32) -> ChunkData<'static> {
    ChunkData { thread, seq, hi: 0x40, status: 0, last: false, regs: [0; NUM_REGS], tags: &[1, 0], values: &[], truth: &[] }
}

/// An index record's payload: the entry count `claimed`, then the entries.
fn index_bytes(claimed: u64, entries: &[(u32, u32, u64)]) -> Vec<u8> {
    let mut b = claimed.to_le_bytes().to_vec();
    for &(thread, seq, insns) in entries {
        b.extend_from_slice(&thread.to_le_bytes());
        b.extend_from_slice(&seq.to_le_bytes());
        for v in [insns, 1, 2, 3] {
            b.extend_from_slice(&v.to_le_bytes());
        }
    }
    b
}

/// Thread 0 with chunks 0 and 1, thread 1 with chunk 0, then index records of `payloads`.
fn indexed(payloads: &[Vec<u8>]) -> (tempfile::TempDir, Result<Profile, ProfileError>) {
    open_with(2696, |w| {
        w.thread(&thread(ThreadEventKind::Start, 0)).unwrap();
        w.thread(&thread(ThreadEventKind::Start, 1)).unwrap();
        for (t, s) in [(0, 0), (1, 0), (0, 1)] {
            w.chunk(&chunk_of(t, s)).unwrap();
        }
        for p in payloads {
            w.record(RecordKind::Index, p).unwrap();
        }
    })
}

#[test]
fn seek_index_is_read_against_the_chunks_it_counts() {
    let good = [(0, 0, 10), (0, 1, 5), (1, 0, 7)];
    let (_d, r) = indexed(&[index_bytes(3, &good)]);
    let index = r.unwrap().index.unwrap();
    let firsts: Vec<Vec<(u64, u64)>> = index.threads.iter().map(|t| t.iter().map(|e| (e.first, e.counts.instructions)).collect()).collect();
    assert_eq!(firsts, [vec![(0, 10), (10, 5)], vec![(0, 7)]]);
    assert_eq!((index.instructions(0), index.instructions(1), index.instructions(9)), (15, 7, 0));

    let refused = |payloads: &[Vec<u8>]| {
        indexed(payloads).1.err().map(|e| match e {
            ProfileError::Index { err, .. } => err,
            e => panic!("not an index error: {e}"),
        })
    };
    let mut torn = index_bytes(3, &good);
    torn.pop();
    assert_eq!(refused(&[torn]), Some(IndexError::Length(127)));
    assert_eq!(refused(&[index_bytes(4, &good)]), Some(IndexError::Count { claimed: 4, held: 3 }));
    assert_eq!(refused(&[index_bytes(u64::MAX, &good)]), Some(IndexError::Count { claimed: u64::MAX, held: 3 }));
    assert_eq!(refused(&[index_bytes(2, &good[..2])]), Some(IndexError::Chunks { entries: 2, chunks: 3 }));
    let swapped = [(0, 1, 5), (0, 0, 10), (1, 0, 7)];
    assert_eq!(refused(&[index_bytes(3, &swapped)]), Some(IndexError::Order { entry: 0, thread: 0, seq: 1, want_thread: 0, want_seq: 0 }));
    let wrapping = [(0, 0, u64::MAX), (0, 1, 1), (1, 0, 7)];
    assert_eq!(refused(&[index_bytes(3, &wrapping)]), Some(IndexError::Overflow { entry: 1, thread: 0 }));
    assert_eq!(refused(&[index_bytes(3, &good), index_bytes(3, &good)]), Some(IndexError::Twice));
}

#[test]
fn a_seek_index_is_appended_only_to_a_whole_profile_without_one() {
    let (d, r) = indexed(&[]);
    let p = r.unwrap();
    assert!(p.index.is_none());
    let idx = Index::from_counts(&p.threads, |t, s| ChunkCounts { instructions: 3 + t as u64 + s as u64, ..Default::default() }).unwrap();
    append_index(&p, &idx).unwrap();
    let again = Profile::open(d.path().join("h.dep")).unwrap();
    assert_eq!(again.index.as_ref(), Some(&idx));
    assert!(again.truncated_at.is_none());
    // Not twice.
    assert!(matches!(append_index(&again, &idx), Err(ProfileError::NotIndexable { .. })));
    // Not after a torn record, where readers stop.
    let (d, r) = indexed(&[]);
    drop(r);
    let path = d.path().join("h.dep");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&[0x9f, 0xde, 5, 0, 0, 0, 0, 0, 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 2]);
    std::fs::write(&path, &bytes).unwrap();
    let torn = Profile::open(&path).unwrap();
    assert!(torn.truncated_at.is_some());
    let e = append_index(&torn, &idx).unwrap_err();
    assert!(matches!(e, ProfileError::NotIndexable { .. }) && e.to_string().contains("torn"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "the refused profile changed");
}

/// An "unrecorded" thread event: `n` instructions before chunk `seq` of thread `index`.
fn gap(index: u32, seq: Option<u32>, n: Option<u64>) -> ThreadEvent {
    ThreadEvent { chunk: seq, instructions: n, ..thread(ThreadEventKind::Unrecorded, index) }
}

/// Gaps between recorded windows name the chunk after them: each is read into that chunk,
/// one naming a chunk the run did not live to write goes with it, and one without its
/// numbers or a second for the same chunk is refused.
#[test]
fn unrecorded_instructions_go_before_the_chunk_they_name() {
    let with = |events: Vec<ThreadEvent>| {
        open_with(2696, move |w| {
            w.thread(&thread(ThreadEventKind::Start, 0)).unwrap();
            for (t, s) in [(0, 0), (0, 1)] {
                w.chunk(&chunk_of(t, s)).unwrap();
            }
            for e in &events {
                w.thread(e).unwrap();
            }
        })
    };
    let (_d, r) = with(vec![gap(0, Some(1), Some(u64::MAX)), gap(0, Some(7), Some(5)), gap(9, Some(0), Some(5))]);
    let p = r.unwrap();
    let gaps: Vec<u64> = p.threads[0].chunks.iter().map(|c| c.unrecorded).collect();
    assert_eq!(gaps, [0, u64::MAX]);
    for (events, why) in [
        (vec![gap(0, None, Some(5))], "without its chunk"),
        (vec![gap(0, Some(1), None)], "without its chunk or instruction count"),
        (vec![gap(0, Some(1), Some(5)), gap(0, Some(1), Some(6))], "a second unrecorded event for chunk 1 of thread 0"),
    ] {
        match with(events).1 {
            Err(ProfileError::Record { why: w, .. }) => assert!(w.contains(why), "{w}"),
            other => panic!("{why}: {:?}", other.err()),
        }
    }
}
