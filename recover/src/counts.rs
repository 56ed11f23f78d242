//! [`Counts`], the null sink for timing recovery itself.

use crate::error::RecoverError;
use crate::events::{BlockEvent, Marker, MemEvent, Run};
use crate::sink::{Merge, Sink};
use dep_profile::semantics::Access;

/// A sink that keeps only counts: the null sink for timing recovery itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub blocks: u64,
    pub instructions: u64,
    pub reads: u64,
    pub writes: u64,
    pub signals: u64,
    /// A checksum of the references (address, pc, size, kind, in order); counts added together
    /// add their checksums, so a profile's is the sum of its chunks'.
    pub checksum: u64,
}

impl Counts {
    /// Adds another count into this one.
    pub fn add(&mut self, o: &Counts) {
        self.blocks += o.blocks;
        self.instructions += o.instructions;
        self.reads += o.reads;
        self.writes += o.writes;
        self.signals += o.signals;
        self.checksum = self.checksum.wrapping_add(o.checksum);
    }

    fn count_refs(&mut self, refs: &[MemEvent]) {
        let mut writes = 0;
        let mut sum = self.checksum;
        for m in refs {
            let w = (m.access == Access::Write) as u64;
            writes += w;
            sum = sum.rotate_left(5) ^ m.addr.wrapping_add(m.pc.wrapping_mul(0x9e37_79b9)).wrapping_add(((m.size as u64) << 1) | w);
        }
        self.writes += writes;
        self.reads += refs.len() as u64 - writes;
        self.checksum = sum;
    }
}

impl Sink for Counts {
    type Error = RecoverError;

    fn block(&mut self, b: &BlockEvent) -> Result<bool, RecoverError> {
        self.blocks += 1;
        self.instructions += b.executed as u64;
        Ok(true)
    }

    fn refs(&mut self, _: &BlockEvent, refs: &[MemEvent]) -> Result<bool, RecoverError> {
        self.count_refs(refs);
        Ok(true)
    }

    fn marker(&mut self, _: u32, m: Marker) -> Result<bool, RecoverError> {
        if let Marker::Signal(_) = m {
            self.signals += 1;
        }
        Ok(true)
    }

    fn run(&mut self, run: &Run) -> Result<bool, RecoverError> {
        self.blocks += run.blocks().len() as u64;
        self.instructions += run.blocks().iter().map(|b| b.executed as u64).sum::<u64>();
        self.count_refs(run.refs());
        Ok(true)
    }
}

impl Merge for Counts {
    fn merge(&mut self, later: Self) -> Result<bool, RecoverError> {
        self.add(&later);
        Ok(true)
    }
}
