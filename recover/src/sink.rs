//! The [`Sink`] every exporter and analysis is, the [`Merge`] that lets a sink run chunk
//! by chunk in parallel, and the impls that let a sink be borrowed or boxed.

use crate::error::RecoverError;
use crate::events::{Begin, BlockEvent, Marker, MemEvent, RepRun, Run};
use std::mem::MaybeUninit;

/// Receives recovered events in each thread's execution order.
///
/// Every method but [`finish`](Self::finish) answers whether the sink wants more events:
/// `Ok(false)` stops its stream without an error. `Self::Error` is the sink's own error;
/// recovery's errors convert into it, so a run returns one error type.
pub trait Sink {
    /// The sink's own error, into which recovery's errors convert.
    type Error: From<RecoverError>;

    /// Before any event.
    fn begin(&mut self, _b: &Begin) -> Result<bool, Self::Error> {
        Ok(true)
    }

    /// A block is entered; its references follow.
    fn block(&mut self, b: &BlockEvent) -> Result<bool, Self::Error>;

    /// References of `b`, the block last entered, in program order (an instruction's reads
    /// before its writes, rep-string iterations in order). A block's references may arrive
    /// in several calls, with markers between them where those stand ([`Marker::place`]),
    /// or in none.
    fn refs(&mut self, _b: &BlockEvent, _refs: &[MemEvent]) -> Result<bool, Self::Error> {
        Ok(true)
    }

    /// References of `b` that are iterations of one rep string, in order, as
    /// [`refs`](Self::refs) would receive them: which is what this does, a few hundred at a
    /// time, unless a sink has a faster way (a count, a checksum or an address range need
    /// not see each byte of a `memcpy` written out). Where they stand, and how they may be
    /// split, is as for `refs`.
    fn rep(&mut self, b: &BlockEvent, run: &RepRun) -> Result<bool, Self::Error> {
        let mut room = [MaybeUninit::<MemEvent>::uninit(); REP_PIECE];
        let per = (REP_PIECE / run.width()) as u64;
        let mut k = 0;
        while k < run.iterations() {
            let n = per.min(run.iterations() - k);
            if !self.refs(b, run.part(k, n).fill(&mut room))? {
                return Ok(false);
            }
            k += n;
        }
        Ok(true)
    }

    /// A marker in the stream of thread `thread`.
    fn marker(&mut self, _thread: u32, _m: Marker) -> Result<bool, Self::Error> {
        Ok(true)
    }

    /// Several blocks with their references, as [`block`](Self::block) and
    /// [`refs`](Self::refs) would receive them one by one (which is what this does unless a
    /// sink has a faster way).
    fn run(&mut self, run: &Run) -> Result<bool, Self::Error> {
        for (b, refs) in run.iter() {
            if !self.block(&b)? || (!refs.is_empty() && !self.refs(&b, refs)?) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// After the last event of the part the sink was given (or after it stopped).
    fn finish(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// References [`Sink::rep`] writes out at a time where a sink takes them one by one: 12 KiB,
/// read again by the sink while in the first-level cache.
const REP_PIECE: usize = 512;

/// A sink whose state at a chunk boundary can be summarised, so that the chunk-parallel
/// driver ([`Events::merged`](crate::Events::merged)) can give each chunk a fresh sink and
/// fold them, in order, into the thread's.
pub trait Merge: Sink + Sized {
    /// Appends `later`, the sink of the chunk whose events follow this one's in the same
    /// thread. `self` holds the thread from its start: a fresh sink (which saw `begin` with
    /// [`Part::Thread`](crate::Part::Thread) and no event) is the empty start. Answers
    /// whether the thread's sink wants more.
    fn merge(&mut self, later: Self) -> Result<bool, Self::Error>;
}

/// Forwards every method, so a sink can be lent to a run and used afterwards.
macro_rules! forward {
    () => {
        type Error = S::Error;
        #[inline]
        fn begin(&mut self, b: &Begin) -> Result<bool, Self::Error> {
            (**self).begin(b)
        }
        #[inline]
        fn block(&mut self, b: &BlockEvent) -> Result<bool, Self::Error> {
            (**self).block(b)
        }
        #[inline]
        fn refs(&mut self, b: &BlockEvent, refs: &[MemEvent]) -> Result<bool, Self::Error> {
            (**self).refs(b, refs)
        }
        #[inline]
        fn rep(&mut self, b: &BlockEvent, run: &RepRun) -> Result<bool, Self::Error> {
            (**self).rep(b, run)
        }
        #[inline]
        fn marker(&mut self, thread: u32, m: Marker) -> Result<bool, Self::Error> {
            (**self).marker(thread, m)
        }
        #[inline]
        fn run(&mut self, run: &Run) -> Result<bool, Self::Error> {
            (**self).run(run)
        }
        #[inline]
        fn finish(&mut self) -> Result<(), Self::Error> {
            (**self).finish()
        }
    };
}

impl<S: Sink + ?Sized> Sink for &mut S {
    forward!();
}

impl<S: Sink + ?Sized> Sink for Box<S> {
    forward!();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::Tee;
    use crate::Counts;
    use dep_profile::semantics::Access;

    /// Keeps each `refs` call's references; stops after `calls` calls.
    struct Pieces {
        got: Vec<Vec<MemEvent>>,
        calls: usize,
    }

    impl Sink for Pieces {
        type Error = RecoverError;
        fn block(&mut self, _: &BlockEvent) -> Result<bool, RecoverError> {
            Ok(true)
        }
        fn refs(&mut self, _: &BlockEvent, refs: &[MemEvent]) -> Result<bool, RecoverError> {
            self.got.push(refs.to_vec());
            Ok(self.got.len() < self.calls)
        }
    }

    fn movs(iterations: u64) -> RepRun {
        let m = |addr, access| MemEvent { pc: 0x40_1000, addr, size: 1, access, conditional: false, insn: 2 };
        RepRun::new(&[m(0x1000, Access::Read), m(0x9000, Access::Write)], iterations, 1, u64::MAX).unwrap()
    }

    fn block() -> BlockEvent<'static> {
        BlockEvent { thread: 0, addr: 0x40_1000, version: 0, id: None, plan: None, executed: 3, interrupted: false }
    }

    /// A sink without its own `rep` gets the run's references written out, in order, in
    /// pieces of whole iterations that each fit the room; a sink that stops gets no more.
    #[test]
    fn rep_runs_reach_a_plain_sink_as_their_references() {
        let run = movs(700);
        let mut want = Vec::new();
        run.write_to(&mut want);
        let mut s = Pieces { got: Vec::new(), calls: usize::MAX };
        assert!(s.rep(&block(), &run).unwrap());
        assert_eq!(s.got.iter().map(Vec::len).collect::<Vec<_>>(), [512, 512, 376]);
        assert_eq!(s.got.concat(), want);

        let mut s = Pieces { got: Vec::new(), calls: 1 };
        assert!(!s.rep(&block(), &run).unwrap());
        assert_eq!(s.got.len(), 1);
    }

    /// A tee gives the run to both sinks, each its own way.
    #[test]
    fn a_tee_gives_rep_runs_to_both() {
        let run = movs(300);
        let mut want = Vec::new();
        run.write_to(&mut want);
        let mut counted = Counts::default();
        counted.refs(&block(), &want).unwrap();
        let mut t = Tee::new(Counts::default(), Pieces { got: Vec::new(), calls: usize::MAX });
        assert!(t.rep(&block(), &run).unwrap());
        let (c, p) = t.into_inner();
        assert_eq!((c, c.checksum()), (counted, counted.checksum()));
        assert_eq!(p.got.concat(), want);
    }
}
