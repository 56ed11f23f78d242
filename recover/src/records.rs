//! The fixed-layout records the recovery loop and the compiled blocks write, and sinks
//! read: kept apart from the event API, which needs the plans, so that the plans and the
//! compiled code, which write these, do not depend on the event API.

use dep_profile::semantics::Access;

/// One memory reference `<pc, addr, size, type>`; its thread is that of the block it follows.
/// (A fixed layout: compiled recovery code writes it.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct MemEvent {
    pub pc: u64,
    pub addr: u64,
    pub size: u32,
    pub access: Access,
    /// Masked or conditional access that may not have touched memory.
    pub conditional: bool,
    /// Index of the instruction in its block (0 for the first).
    pub insn: u16,
}

/// A block of a [`Run`](crate::events::Run): its address, index in the block table, instructions and references.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RunBlock {
    pub addr: u64,
    /// Index of the block's plan in [`Plans`](crate::plans::Plans).
    pub id: u32,
    pub executed: u16,
    /// How many of the run's references are this block's.
    pub refs: u16,
}
