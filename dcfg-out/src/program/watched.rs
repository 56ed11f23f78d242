//! The watched library calls under way in one thread, and when each ends. The collector
//! records a return only at a `ret` inside the function's own symbol, so a function that
//! leaves through a tail call into another symbol (glibc's `pthread_join`, `calloc`,
//! `pthread_mutex_unlock`) has none: it ends when the thread enters the block at its return
//! address. The race analysis and the Parquet export both read calls through this, so they
//! agree on when every call ended.

use dep_profile::calls::Func;

/// A call under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending {
    pub func: Func,
    /// rdi and rsi at the entry.
    pub args: [u64; 2],
    /// The return address.
    pub ret: u64,
}

/// A call that ended, with rax if its return was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    pub call: Pending,
    pub value: Option<u64>,
}

/// One thread's calls under way, innermost last.
#[derive(Debug, Default)]
pub struct Watched {
    calls: Vec<Pending>,
}

impl Watched {
    /// The calls under way, outermost first.
    pub fn pending(&self) -> &[Pending] {
        &self.calls
    }

    /// A call record: the call it starts, or None for a function this build does not know
    /// (a newer collector's number) and for a jump back to the entry of the innermost call
    /// (a spin loop inside it), which starts nothing.
    pub fn call(&mut self, func: u16, args: [u64; 2], ret: u64) -> Option<Pending> {
        let func = Func::from_u16(func)?;
        let call = Pending { func, args, ret };
        if self.calls.last() == Some(&call) {
            return None;
        }
        self.calls.push(call);
        Some(call)
    }

    /// A return record of `func`: its innermost call ends with `value`, after the calls made
    /// inside it that ended without a record (innermost first). Nothing for a return with
    /// no call of `func` under way.
    pub fn ret(&mut self, func: u16, value: u64) -> Vec<Ended> {
        let Some(i) = self.calls.iter().rposition(|p| p.func as u16 == func) else { return Vec::new() };
        let mut ended: Vec<Ended> = self.calls.drain(i..).rev().map(|call| Ended { call, value: None }).collect();
        ended.last_mut().expect("drained one at least").value = Some(value);
        ended
    }

    /// A block entered at `addr`: the calls returning there end without a value, innermost
    /// first, with the calls made inside them.
    pub fn block(&mut self, addr: u64) -> Vec<Ended> {
        match self.calls.iter().rposition(|p| p.ret == addr) {
            Some(i) => self.calls.drain(i..).rev().map(|call| Ended { call, value: None }).collect(),
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(func: Func, ret: u64, value: Option<u64>) -> Ended {
        Ended { call: Pending { func, args: [1, 2], ret }, value }
    }

    #[test]
    fn calls_end_by_record_or_at_their_return_address() {
        let mut w = Watched::default();
        assert!(w.call(Func::Join as u16, [1, 2], 0x100).is_some());
        // A spin back to the entry is the same call; an unknown number is none.
        assert!(w.call(Func::Join as u16, [1, 2], 0x100).is_none());
        assert!(w.call(999, [1, 2], 0x100).is_none());
        assert_eq!(w.pending().len(), 1);
        assert!(w.block(0x104).is_empty());
        // pthread_join tail-called out of its symbol: it ends at 0x100.
        assert_eq!(w.block(0x100), vec![ended(Func::Join, 0x100, None)]);
        assert!(w.pending().is_empty());

        // malloc calls mutex_lock, which returns with no record; malloc's record ends both.
        w.call(Func::Malloc as u16, [1, 2], 0x200);
        w.call(Func::MutexLock as u16, [1, 2], 0x300);
        assert_eq!(w.ret(Func::Malloc as u16, 7), vec![ended(Func::MutexLock, 0x300, None), ended(Func::Malloc, 0x200, Some(7))]);
        assert!(w.ret(Func::Malloc as u16, 7).is_empty());

        // A block at an outer call's return address ends the inner one with it.
        w.call(Func::Malloc as u16, [1, 2], 0x200);
        w.call(Func::MutexLock as u16, [1, 2], 0x300);
        assert_eq!(w.block(0x200), vec![ended(Func::MutexLock, 0x300, None), ended(Func::Malloc, 0x200, None)]);
    }
}
