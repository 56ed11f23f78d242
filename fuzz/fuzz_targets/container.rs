//! Raw bytes as a profile: the container reader, every chunk's sections and the block
//! table give a profile or an error, never a panic, a hang or unbounded memory.
#![no_main]

use dep_profile::container::{Decompression, Section};
use dep_profile::{BlockPlan, Semantics};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(p) = dep_fuzz::open(data) else { return };
    let mut dec = Decompression::default();
    let mut buf = Vec::new();
    for t in &p.threads {
        for c in &t.chunks {
            let Ok(v) = p.chunk(c) else { continue };
            for s in Section::ALL {
                buf.clear();
                let _ = v.decompress_into(s, &mut buf, &mut dec);
            }
        }
    }
    let mut sem = Semantics::new(p.machine());
    for b in p.blocks() {
        let _ = BlockPlan::build(&mut sem, b.addr, p.code(b), Some(b.insn_count as usize));
    }
});
