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
//! `DEP_JIT=0` in the environment turns it off ([`Plans::build`](crate::plans::Plans::build)).

mod emit;

use crate::flat::{FlatPlans, SLOTS};
use crate::records::MemEvent;
use iced_x86::code_asm::CodeAssembler;
use iced_x86::BlockEncoderOptions;

/// The multiplier of the dispatch table's hash (Fibonacci hashing).
const TABLE_HASH: u64 = 0x9e37_79b9_7f4a_7c15;
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
    /// The last position of `tags` with two words to read there (so at least 4 bytes).
    pub tags_last: *const u8,
    /// In and out: the next DEP_m word.
    pub values: *const u8,
    pub values_end: *const u8,
    /// In and out: where the next reference goes.
    pub refs: *mut MemEvent,
    /// The code leaves before a block when `refs` is past this.
    pub refs_limit: *mut MemEvent,
    /// In and out: where the next block record goes.
    pub blocks: *mut BlockRec,
    pub blocks_limit: *mut BlockRec,
    /// In and out: bit n set when register n is CURRENT.
    pub status: u64,
    /// The dispatch table.
    pub table: *const Slot,
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
}

/// Blocks compiled by one assembler run.
const GROUP: usize = 512;

/// A group's code, and each block's address and offset in it.
type Group = (Vec<u8>, Vec<(u64, u64)>);

impl Jit {
    /// Compiles the blocks without special steps for which `addr` gives an address (those
    /// decodable at code version 0), on `workers` threads, using `popcnt` if told to (the
    /// CPU must have it). `None` if code could not be built.
    pub fn build(flat: &FlatPlans, addr: &(dyn Fn(usize) -> Option<u64> + Sync), workers: usize, popcnt: bool) -> Option<Jit> {
        match Self::try_build(flat, addr, workers, popcnt) {
            Ok(j) => Some(j),
            Err(e) => {
                eprintln!("dep: compiling block plans failed ({e}); recovering without compiled blocks");
                None
            }
        }
    }

    fn try_build(flat: &FlatPlans, addr: &(dyn Fn(usize) -> Option<u64> + Sync), workers: usize, popcnt: bool) -> Result<Jit, String> {
        let err = |e: iced_x86::IcedError| e.to_string();
        let small = |b: &crate::flat::FlatBlock| b.insns <= u16::MAX as u32 && b.refs <= u16::MAX as u32;
        // (index, address) of each block to compile.
        let ids: Vec<(usize, u64)> = (0..flat.blocks.len())
            .filter(|&i| !flat.blocks[i].special && small(&flat.blocks[i]))
            .filter_map(|i| addr(i).map(|a| (i, a)))
            .collect();
        // At most half full, so a lookup mostly hits at its first slot.
        let bits = (2 * ids.len()).next_power_of_two().trailing_zeros().max(4);
        let hash = emit::Hash { mul: TABLE_HASH, shift: 64 - bits };

        let mut a = CodeAssembler::new(64).map_err(err)?;
        let labels = emit::trampoline(&mut a, hash).map_err(err)?;
        let t = a.assemble_options(0, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS).map_err(err)?;
        let ip = |l| t.label_ip(l).map(|ip| ip as usize).map_err(err);
        let (exit_off, set_hi_off) = (ip(&labels.exit)?, ip(&labels.set_hi)?);
        let mut bytes = t.inner.code_buffer;

        let groups: Vec<&[(usize, u64)]> = ids.chunks(GROUP).collect();
        let per = groups.len().div_ceil(workers.max(1)).max(1);
        type Part = Result<Vec<Group>, String>;
        let parts: Vec<Part> = crossbeam::thread::scope(|s| {
            let handles: Vec<_> = groups
                .chunks(per)
                .map(|gs| s.spawn(move |_| gs.iter().map(|g| Self::group(flat, g, hash, popcnt)).collect::<Result<Vec<_>, _>>()))
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
        Ok(Jit { _code: code, entry, exit, set_hi, table: table.into_boxed_slice() })
    }

    /// Compiles a group of blocks (index, address) into position-independent code, with each
    /// block's address and offset.
    fn group(flat: &FlatPlans, ids: &[(usize, u64)], hash: emit::Hash, popcnt: bool) -> Result<Group, String> {
        let err = |e: iced_x86::IcedError| e.to_string();
        let mut a = CodeAssembler::new(64).map_err(err)?;
        let mut labels = Vec::with_capacity(ids.len());
        for &(id, addr) in ids {
            let mut l = a.create_label();
            a.set_label(&mut l).map_err(err)?;
            emit::block(&mut a, flat, id as u32, addr, hash, popcnt).map_err(err)?;
            labels.push((addr, l));
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
    /// `blocks..=blocks_limit`), and `exit` and `table` must be this `Jit`'s.
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
}
