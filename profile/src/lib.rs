//! The DEP profile: the DEP_c tag codec, the DEP_m value stream, the truth stream, the
//! profile container with its block, module and thread tables, and the block semantics
//! shared by the collector and the recoverer. `FORMAT.md` beside this crate documents
//! every byte.

pub mod archregs;
pub mod blocks;
pub mod calls;
pub mod container;
pub mod derive;
pub mod dump;
pub mod packing;
pub mod regs;
pub mod semantics;
pub mod simulate;
pub mod syscalls;
pub mod tags;
pub mod truth;
pub mod values;
pub mod vdso;

pub use archregs::{ArchReg, ArchSet};
pub use blocks::{BlockPlan, Step};
pub use regs::{Reg, RegSet, NUM_REGS};
pub use semantics::{Machine, Semantics};

/// Address width of the profiled program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Width {
    W32,
    W64,
}

impl Width {
    /// Bits per address.
    pub fn bits(self) -> u8 {
        match self {
            Width::W32 => 32,
            Width::W64 => 64,
        }
    }

    /// Bytes per address and per DEP_m value.
    pub fn bytes(self) -> usize {
        self.bits() as usize / 8
    }

    /// From the bit count stored in a profile.
    pub fn from_bits(b: u8) -> Option<Width> {
        match b {
            32 => Some(Width::W32),
            64 => Some(Width::W64),
            _ => None,
        }
    }
}
