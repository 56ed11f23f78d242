//! Hostile profiles: tags naming addresses no block can have (the top of the address space,
//! which recovery's tables once used to mean "empty"), on every engine, are an error naming
//! the block, never a crash or a block the table does not hold.

use dep_profile::container::{BlockEntry, ChunkData, Profile, ProfileWriter, Section};
use dep_profile::simulate::{random_code, random_path, write_profile, Rng};
use dep_profile::tags::{CTL_SET_HI, ESC};
use dep_profile::Machine;
use dep_recover::plans::Plans;
use dep_recover::traverse::{recover_chunk, ChunkFault, Halt, Scratch};
use dep_recover::{Counts, Engine};

const ENGINES: [Engine; 3] = [Engine::Walk, Engine::Compiled, Engine::CompiledWithoutPopcnt];

fn sample(seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let code = random_code(&mut rng, 12);
    let paths = vec![random_path(&mut rng, &code, 150, false)];
    write_profile(Vec::new(), Machine::x86_64(2696), &code, &paths, seed).unwrap()
}

/// Rewrites `src` with its first chunk's tags and H-tag replaced, keeping its blocks if told.
fn hostile(src: &[u8], dir: &std::path::Path, hi: u64, tags: &[u16], blocks: bool) -> Profile {
    hostile_with(src, dir, hi, tags, blocks, &[])
}

/// [`hostile`] with `extra` blocks added to the table.
fn hostile_with(src: &[u8], dir: &std::path::Path, hi: u64, tags: &[u16], blocks: bool, extra: &[BlockEntry]) -> Profile {
    hostile_values(src, dir, hi, tags, blocks, extra, true)
}

/// [`hostile_with`], keeping the first chunk's DEP_m words or leaving none.
fn hostile_values(src: &[u8], dir: &std::path::Path, hi: u64, tags: &[u16], blocks: bool, extra: &[BlockEntry], values: bool) -> Profile {
    let path = dir.join("src.dep");
    std::fs::write(&path, src).unwrap();
    let p = Profile::open(&path).unwrap();
    let out = dir.join("hostile.dep");
    let mut w = ProfileWriter::new(std::fs::File::create(&out).unwrap(), p.width, 1).unwrap();
    w.meta(&p.meta).unwrap();
    if blocks {
        for b in p.blocks() {
            w.block(&p.block_entry(b)).unwrap();
        }
    }
    for b in extra {
        w.block(b).unwrap();
    }
    let t = &p.threads[0];
    let view = p.chunk(&t.chunks[0]).unwrap();
    let bytes: Vec<u8> = tags.iter().flat_map(|w| w.to_le_bytes()).collect();
    let values = if values { view.decompress(Section::Values).unwrap() } else { Vec::new() };
    w.chunk(&ChunkData {
        thread: t.index,
        seq: 0,
        hi,
        status: view.status(),
        last: true,
        regs: view.regs(),
        tags: &bytes,
        values: &values,
        truth: &[],
    })
    .unwrap();
    drop(w);
    Profile::open(&out).unwrap()
}

/// Recovers the profile's first chunk with `engine`; it must fail naming block u64::MAX.
fn assert_unknown_top_block(p: &Profile, engine: Engine) {
    let plans = Plans::build_with(p, 1, engine);
    let view = p.chunk(&p.threads[0].chunks[0]).unwrap();
    let r = recover_chunk(p.width, &plans, &view, &mut Scratch::default(), &mut Counts::default());
    match r {
        Err(Halt::Fault(ChunkFault::UnknownBlock { addr: u64::MAX, version: 0, .. })) => {}
        other => panic!("{engine:?}: expected block {:#x} not in the table, got {other:?}", u64::MAX),
    }
}

/// A long H-tag change to ffff_ffff_ffff, then L-tags ffff (not the chunk's last block,
/// so the plain loops and compiled code see them).
const LONG_CHANGE_TO_TOP: [u16; 8] = [ESC, CTL_SET_HI, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff];

#[test]
fn top_address_from_an_h_tag_change_is_not_in_the_table() {
    let dir = tempfile::tempdir().unwrap();
    for blocks in [true, false] {
        let p = hostile(&sample(1), dir.path(), 0, &LONG_CHANGE_TO_TOP, blocks);
        for e in ENGINES {
            assert_unknown_top_block(&p, e);
        }
    }
}

#[test]
fn top_address_from_a_chunk_header_is_not_in_the_table() {
    let dir = tempfile::tempdir().unwrap();
    for blocks in [true, false] {
        let p = hostile(&sample(2), dir.path(), 0xffff_ffff_ffff, &[0xffff, 0xffff, 0xffff], blocks);
        for e in ENGINES {
            assert_unknown_top_block(&p, e);
        }
    }
}

/// Damaged control records are refused with the variant naming them, on every engine: a
/// chunk start record that is not the chunk's, an interruption with no block before it, a
/// kernel memory record with unknown flags or with no system call to belong to, a tag
/// stream cut inside a record.
#[test]
fn damaged_records_are_named_by_their_variant() {
    use dep_profile::tags::{CTL_CHUNK_START, CTL_INTERRUPTED};
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[u16], fn(&ChunkFault) -> bool); 5] = [
        (&[ESC, CTL_CHUNK_START, 5, 0], |f| matches!(f, ChunkFault::ChunkStart { word: 0, record: 5, header: 0 })),
        (&[ESC, CTL_INTERRUPTED, 0], |f| matches!(f, ChunkFault::StrayInterruption { word: 0 })),
        (&[ESC, 0xffff, 4, 0, 0, 0, 0, 0, 0], |f| {
            matches!(f, ChunkFault::Tags { err: dep_profile::tags::TagError::KernelFlags { flags: 4, .. }, .. })
        }),
        (&[ESC, CTL_CHUNK_START, 0], |f| matches!(f, ChunkFault::Tags { err: dep_profile::tags::TagError::Truncated(0), .. })),
        // The kernel's access with no system call return before it to belong to.
        (&[ESC, 0xffff, 1, 0, 0, 0, 0, 8, 0], |f| matches!(f, ChunkFault::StraySyscall { word: 0 })),
    ];
    for (tags, named) in cases {
        let p = hostile(&sample(3), dir.path(), 0, tags, true);
        for e in ENGINES {
            let plans = Plans::build_with(&p, 1, e);
            let view = p.chunk(&p.threads[0].chunks[0]).unwrap();
            match recover_chunk(p.width, &plans, &view, &mut Scratch::default(), &mut Counts::default()) {
                Err(Halt::Fault(f)) if named(&f) => {}
                other => panic!("{e:?} {tags:x?}: got {other:?}"),
            }
        }
    }
}

/// A block whose table entry does not decode (two nops the table says are five
/// instructions) is refused where a tag names it, with the decoder's reason.
#[test]
fn a_block_that_does_not_decode_is_named() {
    use dep_profile::blocks::BlockError;
    let dir = tempfile::tempdir().unwrap();
    let bad = BlockEntry { addr: 0x1234, version: 0, insn_count: 5, code: vec![0x90, 0x90] };
    let p = hostile_with(&sample(5), dir.path(), 0, &[0x1234], true, &[bad]);
    for e in ENGINES {
        let plans = Plans::build_with(&p, 1, e);
        let view = p.chunk(&p.threads[0].chunks[0]).unwrap();
        match recover_chunk(p.width, &plans, &view, &mut Scratch::default(), &mut Counts::default()) {
            Err(Halt::Fault(ChunkFault::BadBlock { addr: 0x1234, why: BlockError::Count { found: 2, expected: 5, .. }, .. })) => {}
            other => panic!("{e:?}: got {other:?}"),
        }
    }
}

/// A fault in a block reached by an H-tag change names the block's own tag word on every
/// engine: compiled code takes the change itself and leaves at the L-tag, and the walk once
/// named the change's first word instead (fuzzing found the two messages differing).
#[test]
fn a_fault_after_an_h_tag_change_names_the_same_word_on_every_engine() {
    use dep_profile::blocks::BlockError;
    let dir = tempfile::tempdir().unwrap();
    // The long change (three words of H-tag), then the short one (its low 16 bits).
    let cases: [(u64, &[u16], usize); 2] =
        [(0x0005_0000_1234, &[ESC, CTL_SET_HI, 0x0000, 0x0005, 0x0000, 0x1234], 5), (0x0003_1234, &[ESC, 0x0003, 0x1234], 2)];
    for (addr, tags, word) in cases {
        let bad = BlockEntry { addr, version: 0, insn_count: 5, code: vec![0x90, 0x90] };
        let p = hostile_with(&sample(5), dir.path(), 0, tags, true, &[bad]);
        for e in ENGINES {
            let plans = Plans::build_with(&p, 1, e);
            let view = p.chunk(&p.threads[0].chunks[0]).unwrap();
            match recover_chunk(p.width, &plans, &view, &mut Scratch::default(), &mut Counts::default()) {
                Err(Halt::Fault(ChunkFault::BadBlock { word: w, addr: a, why: BlockError::Count { .. } })) if (w, a) == (word, addr) => {}
                other => panic!("{e:?} {tags:x?}: got {other:?}"),
            }
        }
    }
}

/// A block's known successors are tested by L-tag alone, which says the successor's address
/// only under the block's own H-tag: after an H-tag change the same L-tag names a block in
/// another 64 KiB, which every engine must run (here a jump's target has one instruction and
/// the block at its L-tag under the next H-tag two).
#[test]
fn a_known_successors_l_tag_under_another_h_tag_is_another_block() {
    let dir = tempfile::tempdir().unwrap();
    let jump = BlockEntry { addr: 0x40_1000, version: 0, insn_count: 1, code: vec![0xeb, 0x10] }; // jmp 0x40_1012
    let near = BlockEntry { addr: 0x40_1012, version: 0, insn_count: 1, code: vec![0x90] };
    let far = BlockEntry { addr: 0x41_1012, version: 0, insn_count: 2, code: vec![0x90, 0x90] };
    // The jump, then under H 0x41 the block at L-tag 0x1012 twice; back under H 0x40, and
    // again (a chunk's last block is the walk's, and a control record after a block sends
    // compiled code past its known successors).
    let tags = [0x1000, ESC, 0x41, 0x1012, 0x1012, ESC, 0x40, 0x1000, ESC, 0x41, 0x1012, 0x1012, 0x1012];
    let p = hostile_values(&sample(6), dir.path(), 0x40, &tags, false, &[jump, near, far], false);
    let mut want = None;
    for e in ENGINES {
        let plans = Plans::build_with(&p, 1, e);
        let view = p.chunk(&p.threads[0].chunks[0]).unwrap();
        let mut counts = Counts::default();
        recover_chunk(p.width, &plans, &view, &mut Scratch::default(), &mut counts).unwrap();
        // Two jumps (one instruction each) and five far blocks (two each).
        assert_eq!((counts.blocks, counts.instructions), (7, 2 + 5 * 2), "{e:?}");
        if e != Engine::Walk && cfg!(target_arch = "x86_64") {
            assert!(plans.compiled_blocks() > 0, "{e:?}: nothing ran compiled");
        }
        assert_eq!(*want.get_or_insert(counts), counts, "{e:?}");
    }
}
