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
    /// Instructions the threads ran unrecorded ([`Marker::Unrecorded`]).
    pub unrecorded: u64,
    /// Four running hashes of the references (address, pc, size, kind), the one at position
    /// `p` of this sink's stream into lane `p % 4`: four chains instead of one, so the hash
    /// does not cost a latency-bound chain step per reference (it was a third of timing
    /// recovery on rep-string-heavy profiles). Counts added together add their lanes.
    lanes: [u64; 4],
}

impl Counts {
    /// Adds another count into this one.
    pub fn add(&mut self, o: &Counts) {
        self.blocks += o.blocks;
        self.instructions += o.instructions;
        self.reads += o.reads;
        self.writes += o.writes;
        self.signals += o.signals;
        self.unrecorded = self.unrecorded.saturating_add(o.unrecorded);
        for (l, o) in self.lanes.iter_mut().zip(o.lanes) {
            *l = l.wrapping_add(o);
        }
    }

    /// A checksum of the references in order (of each chunk's, summed over chunks), equal
    /// wherever the same references were counted in the same chunks.
    pub fn checksum(&self) -> u64 {
        let [a, b, c, d] = self.lanes;
        a ^ b.rotate_left(16) ^ c.rotate_left(32) ^ d.rotate_left(48)
    }

    fn count_refs(&mut self, refs: &[MemEvent]) {
        // A reference's lane step, and 1 for a write (Access is 0 or 1 in memory).
        #[inline(always)]
        fn step(lane: u64, m: &MemEvent) -> (u64, u64) {
            let w = (m.access == Access::Write) as u64;
            (lane.rotate_left(5) ^ m.addr.wrapping_add(m.pc.wrapping_mul(0x9e37_79b9)).wrapping_add(((m.size as u64) << 1) | w), w)
        }
        // Lanes turned so that lane 0 is the next position's, four at a time, turned back.
        let turn = (self.reads + self.writes) as usize % 4;
        self.lanes.rotate_left(turn);
        let mut writes = 0;
        let [mut a, mut b, mut c, mut d] = self.lanes;
        let quads = refs.chunks_exact(4);
        let tail = quads.remainder();
        for q in quads {
            let (wa, wb, wc, wd);
            ((a, wa), (b, wb), (c, wc), (d, wd)) = (step(a, &q[0]), step(b, &q[1]), step(c, &q[2]), step(d, &q[3]));
            writes += (wa + wb) + (wc + wd);
        }
        self.lanes = [a, b, c, d];
        for (i, m) in tail.iter().enumerate() {
            let (l, w) = step(self.lanes[i], m);
            (self.lanes[i], writes) = (l, writes + w);
        }
        self.lanes.rotate_right(turn);
        self.writes += writes;
        self.reads += refs.len() as u64 - writes;
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
        match m {
            Marker::Signal(_) => self.signals += 1,
            Marker::Unrecorded(n) => self.unrecorded = self.unrecorded.saturating_add(n),
            _ => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(n: u64) -> Vec<MemEvent> {
        (0..n)
            .map(|i| MemEvent {
                pc: 0x40_1000 + 4 * (i % 7),
                addr: 0x7fff_0000 + i * 8,
                size: 1 << (i % 4),
                access: if i % 3 == 0 { Access::Write } else { Access::Read },
                conditional: false,
                insn: 0,
            })
            .collect()
    }

    fn counted(slices: &[&[MemEvent]]) -> Counts {
        let mut c = Counts::default();
        for s in slices {
            c.count_refs(s);
        }
        c
    }

    #[test]
    fn checksum_does_not_depend_on_how_references_arrive() {
        let r = refs(23);
        let whole = counted(&[&r]);
        for a in 0..r.len() {
            for b in a..r.len() {
                let c = counted(&[&r[..a], &r[a..b], &r[b..]]);
                assert_eq!((c.checksum(), c.reads, c.writes), (whole.checksum(), whole.reads, whole.writes), "split at {a}, {b}");
            }
        }
    }

    #[test]
    fn checksum_sees_order_and_every_field() {
        let r = refs(9);
        let whole = counted(&[&r]).checksum();
        let mut swapped = r.clone();
        swapped.swap(2, 6); // lanes 2 and 2: the same lane, another order
        assert_ne!(counted(&[&swapped]).checksum(), whole);
        let mut swapped = r.clone();
        swapped.swap(1, 2); // different lanes
        assert_ne!(counted(&[&swapped]).checksum(), whole);
        for f in 0..4 {
            let mut m = r.clone();
            match f {
                0 => m[4].pc += 1,
                1 => m[4].addr += 1,
                2 => m[4].size += 1,
                _ => m[4].access = Access::Write,
            }
            assert_ne!(counted(&[&m]).checksum(), whole, "field {f}");
        }
    }
}
