//! Block plans compiled to x86-64 machine code, for 64-bit profiles recovered on x86-64.
//!
//! Each plain block (no rep string or gather) becomes straight-line code: it reads from
//! DEP_m the values its plan says (testing a CURRENT bit only where the block itself does not
//! know it), writes its references with their constant fields as immediates, and reads the
//! next tag and jumps to that block's code itself. So a block costs no loop over steps or
//! references, its plan is never loaded as data, and each block's jump to its successor is
//! predicted apart, as the program's own branches were. Anything else (control records,
//! interruptions, blocks not yet in the dispatch cache, the last values of a chunk) leaves the
//! code for the general walk in `traverse.rs`, which stays the definition.
//!
//! `DEP_JIT=0` in the environment turns it off ([`Plans::build`](crate::plans::Plans::build));
//! `DEP_JIT_DUMP=PATH` writes the code to PATH and its address to PATH.base.

mod emit;

use crate::flat::{FlatPlans, SLOTS};
use crate::records::MemEvent;
use iced_x86::code_asm::{CodeAssembler, CodeLabel};
use iced_x86::BlockEncoderOptions;
use std::collections::HashMap;

/// An empty dispatch table slot's address, where linear probing stops. A profile can name
/// this address too (a block there is refused when the table is decoded, but tags are free
/// to say anything): so an empty slot's code is the exit routine, and matching one leaves
/// compiled code exactly as a miss does, for the general walk to report the block.
const EMPTY: u64 = u64::MAX;

/// Everything compiled code reads and updates, at offsets the code is built with.
#[repr(C)]
pub struct JitState {
    /// Register values by index, then the zero slot.
    pub vals: [u64; SLOTS],
    /// The address bits above the L-tag (bits 16 and up).
    pub hi: u64,
    /// In and out: the next tag word.
    pub tags: *const u8,
    /// The last position of `tags` with two words to read there (so at least 4 bytes), and
    /// where the code leaves: a block reads at least one word, so a limit `2 * (n - 1)`
    /// bytes past the first tag also bounds the blocks run to `n`.
    pub tags_last: *const u8,
    /// In and out: the next DEP_m word.
    pub values: *const u8,
    pub values_end: *const u8,
    /// In and out: where the next reference goes.
    pub refs: *mut MemEvent,
    /// The code leaves before a block when `refs` is past this.
    pub refs_limit: *mut MemEvent,
    /// In and out: where the next block record goes (room for as many as `tags_last`
    /// allows).
    pub blocks: *mut BlockRec,
    /// In and out: bit n set when register n is CURRENT.
    pub status: u64,
    /// The dispatch table.
    pub table: *const Slot,
    /// The successor table: the code of each compiled block's known successors.
    pub succ: *const usize,
    /// Addresses of the exit routine and of the shared dispatch's long H-tag change.
    pub exit: usize,
    pub set_hi: usize,
}

/// A block the compiled code ran (compiled blocks have at most 65535 instructions and
/// references, to fit it).
pub use crate::records::RunBlock as BlockRec;

/// One dispatch table entry: a block address and its code.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Slot {
    addr: u64,
    code: usize,
}

/// The compiled blocks of one profile.
pub struct Jit {
    /// The code's memory, which `entry`, `exit`, `set_hi` and `table` point into.
    _code: memmap2::Mmap,
    // SAFETY: a type, not a call: the code is only entered through `Jit::enter`, whose
    // contract the recovery loop meets (recover/tests/simulated.rs, hostile.rs).
    entry: unsafe extern "sysv64" fn(*mut JitState),
    exit: usize,
    set_hi: usize,
    /// Every compiled block's address and code, hashed by address, probed linearly and
    /// never past the end (the last slot is empty), read by the compiled code itself.
    table: Box<[Slot]>,
    /// For each compiled block, in compile order, the code of its two known successors
    /// ([`Successors`]): what the dispatch table gives for their addresses (the exit
    /// routine where it has none), so a block jumps to them without a lookup.
    succ: Box<[usize]>,
}

/// The blocks a block's last instruction can go to that compiled code knows without
/// looking: for each block index, up to two addresses (a conditional branch's fall-through
/// and target, a jump's or call's target, the next instruction after a block cut short).
/// Only those in the block's own 64 KiB (same H-tag) are used.
pub type Successors<'a> = &'a (dyn Fn(usize) -> [Option<u64>; 2] + Sync);

/// Blocks compiled by one assembler run.
const GROUP: usize = 512;

/// A group's code, and each block's address and offset in it.
type Group = (Vec<u8>, Vec<(u64, u64)>);

impl Jit {
    /// Compiles the blocks without special steps for which `addr` gives an address (those
    /// decodable at code version 0), on `workers` threads, using `popcnt` if told to (the
    /// CPU must have it). `None` if code could not be built.
    pub fn build(
        flat: &FlatPlans,
        addr: &(dyn Fn(usize) -> Option<u64> + Sync),
        succ: Successors,
        workers: usize,
        popcnt: bool,
    ) -> Option<Jit> {
        match Self::try_build(flat, addr, succ, workers, popcnt) {
            Ok(j) => Some(j),
            Err(e) => {
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "dep: compiling block plans failed ({e}); recovering without compiled blocks");
                None
            }
        }
    }

    fn try_build(
        flat: &FlatPlans,
        addr: &(dyn Fn(usize) -> Option<u64> + Sync),
        succ: Successors,
        workers: usize,
        popcnt: bool,
    ) -> Result<Jit, String> {
        let err = |e: iced_x86::IcedError| e.to_string();
        let small = |b: &crate::flat::FlatBlock| b.insns <= u16::MAX as u32 && b.refs <= u16::MAX as u32;
        // (index, address) of each block to compile.
        let ids: Vec<(usize, u64)> = (0..flat.blocks.len())
            .filter(|&i| !flat.blocks[i].special && small(&flat.blocks[i]))
            .filter_map(|i| addr(i).map(|a| (i, a)))
            .collect();
        // At most half full, so a lookup mostly hits at its first slot.
        let bits = (2 * ids.len()).next_power_of_two().trailing_zeros().max(4);
        let hash = emit::Hash { mask: (1u32 << bits.min(28)) - 1 };

        let mut a = CodeAssembler::new(64).map_err(err)?;
        let labels = emit::trampoline(&mut a, hash).map_err(err)?;
        let t = a.assemble_options(0, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS).map_err(err)?;
        let ip = |l| t.label_ip(l).map(|ip| ip as usize).map_err(err);
        let (exit_off, set_hi_off) = (ip(&labels.exit)?, ip(&labels.set_hi)?);
        let mut bytes = t.inner.code_buffer;

        // Each block's successors that the code can test for: in its own 64 KiB, so the
        // H-tag it runs under is theirs too, and with a nonzero L-tag (zero is an escape).
        // (The code addresses its entries as r10 + 16 * block: an i32 displacement.)
        let room = ids.len() < (i32::MAX / 16) as usize;
        let near = |(i, a): (usize, u64)| succ(i).map(|s| s.filter(|&s| room && s >> 16 == a >> 16 && s & 0xffff != 0));
        let succs: Vec<[Option<u64>; 2]> = ids.iter().map(|&b| near(b)).collect();
        let groups: Vec<(usize, &[(usize, u64)])> = ids.chunks(GROUP).enumerate().map(|(g, ids)| (g * GROUP, ids)).collect();
        let per = groups.len().div_ceil(workers.max(1)).max(1);
        type Part = Result<Vec<Group>, String>;
        let succs_ref = &succs;
        let parts: Vec<Part> = crossbeam::thread::scope(|s| {
            let handles: Vec<_> = groups
                .chunks(per)
                .map(|gs| {
                    s.spawn(move |_| {
                        gs.iter()
                            .map(|&(first, g)| Self::group(flat, g, &succs_ref[first..first + g.len()], first, hash, popcnt))
                            .collect::<Result<Vec<_>, _>>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("compiler thread panicked".into()))).collect()
        })
        .map_err(|_| "compiler scope panicked".to_string())?;
        let mut offsets = Vec::with_capacity(ids.len());
        for part in parts {
            for (code, starts) in part? {
                let base = bytes.len();
                offsets.extend(starts.into_iter().map(|(a, at)| (a, base + at as usize)));
                bytes.extend_from_slice(&code);
            }
        }
        let mut map = memmap2::MmapMut::map_anon(bytes.len()).map_err(|e| format!("code memory: {e}"))?;
        map.copy_from_slice(&bytes);
        let code = map.make_exec().map_err(|e| format!("code memory: {e}"))?;
        // For profiling the code: perf's sample addresses in it, disassembled from the dump
        // at its base (`objdump -D -b binary -m i386:x86-64 --adjust-vma=BASE`).
        if let Some(path) = std::env::var_os("DEP_JIT_DUMP") {
            let _ = std::fs::write(&path, &code[..]);
            let _ = std::fs::write(format!("{}.base", path.to_string_lossy()), format!("{:#x}\n", code.as_ptr() as usize));
        }
        // SAFETY: offset 0 holds the entry routine, built for this signature; every recovery
        // test on x86-64 enters it. SAFETY: the second `unsafe` is the pointer's type.
        let entry = unsafe { std::mem::transmute::<*const u8, unsafe extern "sysv64" fn(*mut JitState)>(code.as_ptr()) };
        let at = |o: usize| code.as_ptr() as usize + o;
        let (exit, set_hi) = (at(exit_off), at(set_hi_off));
        let empty = Slot { addr: EMPTY, code: exit };
        let mut table = vec![empty; 1 << bits];
        for (a, at) in offsets {
            let mut i = hash.slot(a);
            while table[i].addr != EMPTY {
                i += 1;
                if i == table.len() {
                    table.push(empty);
                }
            }
            table[i] = Slot { addr: a, code: code.as_ptr() as usize + at };
        }
        table.push(empty);
        let code_of = |a: u64| {
            let mut i = hash.slot(a);
            while table[i].addr != a && table[i].addr != EMPTY {
                i += 1;
            }
            table[i].code
        };
        let succ = succs.iter().flat_map(|s| s.map(|s| s.map_or(exit, code_of))).collect();
        Ok(Jit { _code: code, entry, exit, set_hi, table: table.into_boxed_slice(), succ })
    }

    /// Compiles a group of blocks (index, address) into position-independent code, with each
    /// block's address and offset. `succs` are the blocks' successors to test for, and
    /// `first` the first block's place in compile order (its entries in the successor table).
    fn group(
        flat: &FlatPlans,
        ids: &[(usize, u64)],
        succs: &[[Option<u64>; 2]],
        first: usize,
        hash: emit::Hash,
        popcnt: bool,
    ) -> Result<Group, String> {
        let err = |e: iced_x86::IcedError| e.to_string();
        let mut a = CodeAssembler::new(64).map_err(err)?;
        let mut labels: Vec<(u64, CodeLabel)> = ids.iter().map(|&(_, addr)| (addr, a.create_label())).collect();
        // The group's blocks by address (one each: they are all of code version 0, and the
        // profile reader refuses a block twice), so that a successor compiled here is jumped
        // to directly.
        let here: HashMap<u64, CodeLabel> = labels.iter().copied().collect();
        for (k, (&(id, addr), s)) in ids.iter().zip(succs).enumerate() {
            a.set_label(&mut labels[k].1).map_err(err)?;
            let direct = s.map(|s| s.and_then(|s| here.get(&s).copied()));
            emit::block(&mut a, flat, id as u32, addr, *s, direct, first + k, hash, popcnt).map_err(err)?;
        }
        let r = a.assemble_options(0, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS).map_err(err)?;
        let starts = labels.iter().map(|(addr, l)| r.label_ip(l).map(|ip| (*addr, ip))).collect::<Result<Vec<_>, _>>().map_err(err)?;
        Ok((r.inner.code_buffer, starts))
    }

    /// Runs compiled blocks from `st` until the code leaves; `st` then says where it stopped.
    ///
    /// # Safety
    /// Every pointer in `st` must be valid for the range it describes (`tags..tags_last + 4`,
    /// `values..values_end`, `refs..refs_limit` plus room for the largest block's references,
    /// `blocks` for one record per two bytes of `tags..=tags_last`), and `exit`, `table` and
    /// `succ` must be this `Jit`'s.
    #[inline]
    pub unsafe fn enter(&self, st: &mut JitState) {
        (self.entry)(st)
    }

    /// Addresses of the exit routine and the shared long H-tag change, for [`JitState`].
    pub fn routines(&self) -> (usize, usize) {
        (self.exit, self.set_hi)
    }

    /// The dispatch table, for [`JitState::table`].
    pub fn table(&self) -> *const Slot {
        self.table.as_ptr()
    }

    /// The successor table, for [`JitState::succ`].
    pub fn successors(&self) -> *const usize {
        self.succ.as_ptr()
    }
}
