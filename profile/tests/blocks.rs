//! The block table's entries where they enter: code that cannot be where the table says is
//! refused with an error naming the block.

use dep_profile::blocks::BlockError;
use dep_profile::{BlockPlan, Machine, Semantics};

/// A block whose code would run past the end of the address space (found by the `export`
/// fuzz target: callgrind's return address `pc + len` overflowed) is refused, so every
/// instruction's end address downstream is a real address.
#[test]
fn code_past_the_end_of_the_address_space_is_refused() {
    let mut sem = Semantics::new(Machine::x86_64(2696));
    // push rax; ret: 2 bytes.
    for addr in [u64::MAX, u64::MAX - 1] {
        let e = BlockPlan::build(&mut sem, addr, &[0x50, 0xc3], None).unwrap_err();
        assert!(matches!(e, BlockError::PastEnd { addr: a, len: 2 } if a == addr), "{addr:#x}: {e}");
    }
    // Ending at the last byte is fine.
    let p = BlockPlan::build(&mut sem, u64::MAX - 2, &[0x50, 0xc3], None).unwrap();
    assert_eq!(p.insns.last().unwrap().pc + p.insns.last().unwrap().len as u64, u64::MAX);
}
