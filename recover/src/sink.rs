//! The [`Sink`] every exporter and analysis is, the [`Merge`] that lets a sink run chunk
//! by chunk in parallel, and the impls that let a sink be borrowed or boxed.

use crate::error::RecoverError;
use crate::events::{Begin, BlockEvent, Marker, MemEvent, Run};

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
