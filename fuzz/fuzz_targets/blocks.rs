//! The block table: any code bytes, instruction count, address, width and XSAVE size give
//! a block plan or an error.
#![no_main]

use arbitrary::Arbitrary;
use dep_profile::{BlockPlan, Machine, Semantics, Width};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Entry<'a> {
    addr: u64,
    count: Option<u32>,
    wide: bool,
    xsave_size: u32,
    code: &'a [u8],
}

fuzz_target!(|e: Entry| {
    let width = if e.wide { Width::W64 } else { Width::W32 };
    let mut sem = Semantics::new(Machine { width, xsave_size: e.xsave_size, derive: true, roots: true });
    if let Ok(p) = BlockPlan::build(&mut sem, e.addr, e.code, e.count.map(|c| c as usize)) {
        let _ = p.decisions();
    }
});
