//! The truth stream: blocks and references observed directly at run time (`--truth`).
//!
//! It is the paper's BB_pc+Mem_addr baseline and the oracle recovery is checked against.
//! Each record is 24 bytes, little-endian: `kind: u32, size: u32, pc: u64, addr: u64`.

use thiserror::Error;

/// Bytes per truth record.
pub const RECORD_SIZE: usize = 24;

/// What a truth record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TruthKind {
    /// A block starts at `pc`; `size` is its instruction count.
    Block,
    /// A read of `size` bytes at `addr` by the instruction at `pc`.
    Read,
    /// A write of `size` bytes at `addr` by the instruction at `pc`.
    Write,
    /// The last block stopped at instruction index `size` (that instruction was attempted).
    Interrupted,
    /// A rep string instruction at `pc` starts: `size` bytes per element; its operands follow
    /// as [`TruthKind::RepRead`]/[`TruthKind::RepWrite`], then [`TruthKind::RepEnd`].
    Rep,
    /// A rep string's read operand: first address `pc`, then `addr` (a signed stride) apart.
    RepRead,
    /// A rep string's write operand, as [`TruthKind::RepRead`].
    RepWrite,
    /// The rep string that started last made `addr` iterations (an interrupted one counts
    /// the iteration it was attempting).
    RepEnd,
    /// The system call instruction at `pc` returned `addr` (rax). Format version 7.
    SyscallReturn,
    /// The kernel read `size` bytes at `addr` for the system call that returned last.
    KernelRead,
    /// The kernel wrote `size` bytes at `addr` for it.
    KernelWrite,
}

impl TruthKind {
    /// The kind's code in the stream.
    pub fn code(self) -> u32 {
        match self {
            TruthKind::Block => 0,
            TruthKind::Read => 1,
            TruthKind::Write => 2,
            TruthKind::Interrupted => 3,
            TruthKind::Rep => 4,
            TruthKind::RepRead => 5,
            TruthKind::RepWrite => 6,
            TruthKind::RepEnd => 7,
            TruthKind::SyscallReturn => 8,
            TruthKind::KernelRead => 9,
            TruthKind::KernelWrite => 10,
        }
    }

    fn from_code(c: u32) -> Option<Self> {
        Some(match c {
            0 => TruthKind::Block,
            1 => TruthKind::Read,
            2 => TruthKind::Write,
            3 => TruthKind::Interrupted,
            4 => TruthKind::Rep,
            5 => TruthKind::RepRead,
            6 => TruthKind::RepWrite,
            7 => TruthKind::RepEnd,
            8 => TruthKind::SyscallReturn,
            9 => TruthKind::KernelRead,
            10 => TruthKind::KernelWrite,
            _ => return None,
        })
    }
}

/// One truth record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TruthRecord {
    pub kind: TruthKind,
    pub size: u32,
    pub pc: u64,
    pub addr: u64,
}

/// Errors in a truth stream; offsets are in bytes.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TruthError {
    #[error("truth stream length {0} is not a multiple of 24")]
    Length(usize),
    #[error("unknown truth record kind {kind} at byte {offset}")]
    Kind { kind: u32, offset: usize },
}

impl TruthRecord {
    /// Appends the record's 24 bytes.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.kind.code().to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.pc.to_le_bytes());
        out.extend_from_slice(&self.addr.to_le_bytes());
    }
}

/// Iterates over the records of a truth stream.
pub fn records(bytes: &[u8]) -> Result<impl Iterator<Item = Result<TruthRecord, TruthError>> + '_, TruthError> {
    if bytes.len() % RECORD_SIZE != 0 {
        return Err(TruthError::Length(bytes.len()));
    }
    Ok(bytes.chunks_exact(RECORD_SIZE).enumerate().map(|(i, b)| {
        let code = u32::from_le_bytes(b[0..4].try_into().unwrap());
        let kind = TruthKind::from_code(code).ok_or(TruthError::Kind { kind: code, offset: i * RECORD_SIZE })?;
        Ok(TruthRecord {
            kind,
            size: u32::from_le_bytes(b[4..8].try_into().unwrap()),
            pc: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            addr: u64::from_le_bytes(b[16..24].try_into().unwrap()),
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_layout_and_round_trip() {
        let r = TruthRecord { kind: TruthKind::Write, size: 8, pc: 0x401000, addr: 0x7ffd_0000_0010 };
        let mut b = Vec::new();
        r.write(&mut b);
        assert_eq!(&b[..8], &[2, 0, 0, 0, 8, 0, 0, 0]);
        assert_eq!(&b[8..16], &0x401000u64.to_le_bytes());
        let back: Vec<_> = records(&b).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(back, vec![r]);
        assert_eq!(records(&b[..23]).err(), Some(TruthError::Length(23)));
        b[0] = 11;
        assert!(matches!(records(&b).unwrap().next(), Some(Err(TruthError::Kind { kind: 11, offset: 0 }))));
        for kind in [TruthKind::SyscallReturn, TruthKind::KernelRead, TruthKind::KernelWrite] {
            b[0] = kind.code() as u8;
            assert_eq!(records(&b).unwrap().next().unwrap().unwrap().kind, kind);
        }
    }
}
