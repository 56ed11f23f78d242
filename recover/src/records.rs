//! The fixed-layout records the recovery loop and the compiled blocks write, and sinks
//! read: kept apart from the event API, which needs the plans, so that the plans and the
//! compiled code, which write these, do not depend on the event API.

use dep_profile::semantics::Access;
use std::mem::MaybeUninit;

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

/// Iterations of a rep string with 64-bit addressing (`rep movs`, `stos`, `lods`, `cmps`,
/// `scas`), given as one event: each reference of the first iteration, its address then
/// stepping by `stride` each iteration within `mask`. A `memcpy` of a page is 8192 byte
/// references; a sink that can take them as a run ([`Sink::rep`](crate::Sink::rep)) need
/// not have each written out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepRun {
    /// The first iteration's references, in order; `width` of them are used.
    first: [MemEvent; 2],
    width: u8,
    iterations: u64,
    stride: u64,
    mask: u64,
}

impl RepRun {
    /// A run of `iterations` from `first` (one reference an iteration, or two that
    /// alternate: movs's read and write, cmps's two reads), each address stepping by
    /// `stride` (two's complement: a descending string's is negative) within `mask`.
    /// `None` unless `first` holds one or two references.
    pub fn new(first: &[MemEvent], iterations: u64, stride: u64, mask: u64) -> Option<RepRun> {
        let (a, b) = match *first {
            [a] => (a, a),
            [a, b] => (a, b),
            _ => return None,
        };
        Some(RepRun { first: [a, b], width: first.len() as u8, iterations, stride, mask })
    }

    /// The first iteration's references.
    pub fn first(&self) -> &[MemEvent] {
        &self.first[..self.width as usize]
    }

    /// References an iteration: one, or two.
    pub fn width(&self) -> usize {
        self.width as usize
    }

    /// The iterations the run holds.
    pub fn iterations(&self) -> u64 {
        self.iterations
    }

    /// How far each address moves from one iteration to the next (two's complement).
    pub fn stride(&self) -> u64 {
        self.stride
    }

    /// The mask every address is taken within (all ones for a 64-bit program).
    pub fn mask(&self) -> u64 {
        self.mask
    }

    /// The references the run holds: its iterations times its width (at most `u64::MAX`).
    pub fn len(&self) -> u64 {
        self.iterations.saturating_mul(self.width as u64)
    }

    /// Whether the run holds no reference.
    pub fn is_empty(&self) -> bool {
        self.iterations == 0
    }

    /// Reference `i` of the run (`i < len()`).
    pub fn get(&self, i: u64) -> MemEvent {
        let w = self.width as u64;
        let e = self.first[(i % w) as usize];
        MemEvent { addr: self.addr_at(i / w, &e), ..e }
    }

    /// The address of `e` (one of [`first`](Self::first)) in iteration `k`.
    #[inline]
    pub fn addr_at(&self, k: u64, e: &MemEvent) -> u64 {
        e.addr.wrapping_add(k.wrapping_mul(self.stride)) & self.mask
    }

    /// Iterations `from..from + n` of the run (`from + n <= iterations()`), as a run.
    pub fn part(&self, from: u64, n: u64) -> RepRun {
        let mut first = self.first;
        for e in &mut first {
            e.addr = self.addr_at(from, e);
        }
        RepRun { first, iterations: n, ..*self }
    }

    /// Writes the run's references into the start of `room` (which has room for
    /// [`len`](Self::len) of them, or this panics) and gives them.
    pub fn fill<'r>(&self, room: &'r mut [MaybeUninit<MemEvent>]) -> &'r mut [MemEvent] {
        let total = usize::try_from(self.len()).ok().filter(|&n| n <= room.len()).expect("room for the rep run");
        let room = &mut room[..total];
        // Each event is its template copied whole, then its address: field by field, the
        // compiler stored the small fields one by one, and stores bound the loop. (Built
        // one `extend` item at a time, flat_map having no exact length, a memcpy of a row
        // cost a quarter of matrix's recovery.)
        let (stride, mask) = (self.stride, self.mask);
        let mut step = 0u64;
        match *self.first() {
            [e] => {
                for slot in room.iter_mut() {
                    let t = slot.write(e);
                    t.addr = e.addr.wrapping_add(step) & mask;
                    step = step.wrapping_add(stride);
                }
            }
            [a, b] => {
                for pair in room.chunks_exact_mut(2) {
                    let t = pair[0].write(a);
                    t.addr = a.addr.wrapping_add(step) & mask;
                    let t = pair[1].write(b);
                    t.addr = b.addr.wrapping_add(step) & mask;
                    step = step.wrapping_add(stride);
                }
            }
            _ => unreachable!("a run has one or two references an iteration"),
        }
        // SAFETY: every one of the `total` slots of `room` was written just above (one a
        // reference, or two an iteration, `total` being even there). The tests compare
        // each with `get` (`rep_runs_write_what_get_gives`).
        unsafe { std::slice::from_raw_parts_mut(room.as_mut_ptr().cast::<MemEvent>(), total) }
    }

    /// Appends the run's references to `out`, in order (a run too long for memory panics,
    /// as `Vec` does).
    pub fn write_to(&self, out: &mut Vec<MemEvent>) {
        let total = usize::try_from(self.len()).expect("a rep run fits in memory");
        out.reserve(total);
        let len = out.len();
        self.fill(out.spare_capacity_mut());
        // SAFETY: `fill` wrote the `total` slots after `len`, reserved just above
        // (`rep_runs_write_what_get_gives`).
        unsafe { out.set_len(len + total) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(pc: u64, addr: u64, access: Access) -> MemEvent {
        MemEvent { pc, addr, size: 1, access, conditional: false, insn: 3 }
    }

    /// What `fill` and `write_to` write, reference by reference, is what `get` gives, which
    /// is the definition: movs's read and write alternate, each stepping from its own start;
    /// a part starts where its iterations do; a descending string wraps within the mask.
    #[test]
    fn rep_runs_write_what_get_gives() {
        let (src, dst) = (ev(0x400, 0x1000, Access::Read), ev(0x400, 0x2000, Access::Write));
        let run = RepRun::new(&[src, dst], 5, 1, u64::MAX).unwrap();
        assert_eq!(run.len(), 10);
        let mut out = vec![ev(1, 1, Access::Read)];
        run.part(0, 3).write_to(&mut out);
        run.part(3, 2).write_to(&mut out);
        let addrs: Vec<(u64, Access)> = out[1..].iter().map(|e| (e.addr, e.access)).collect();
        let want: Vec<(u64, Access)> = (0..5u64).flat_map(|i| [(0x1000 + i, Access::Read), (0x2000 + i, Access::Write)]).collect();
        assert_eq!(addrs, want);
        assert!(out[1..].iter().all(|e| e.pc == 0x400 && e.insn == 3 && e.size == 1));
        assert!(out[1..].iter().enumerate().all(|(i, e)| *e == run.get(i as u64)));

        // stos down from 2 with 4-byte elements under a 32-bit mask: 2, 0xffff_fffe, ...
        let run = RepRun::new(&[ev(0x500, 2, Access::Write)], 3, (-4i64) as u64, 0xffff_ffff).unwrap();
        let mut room = [MaybeUninit::uninit(); 4];
        let got: Vec<u64> = run.fill(&mut room).iter().map(|e| e.addr).collect();
        assert_eq!(got, [2, 0xffff_fffe, 0xffff_fffa]);
        assert_eq!(run.part(1, 2).get(1).addr, 0xffff_fffa);

        // Anything but one or two references is no run.
        assert!(RepRun::new(&[], 5, 1, u64::MAX).is_none());
        assert!(RepRun::new(&[src, dst, src], 5, 1, u64::MAX).is_none());
    }

    #[test]
    #[should_panic(expected = "room for the rep run")]
    fn a_rep_run_is_never_written_past_its_room() {
        let run = RepRun::new(&[ev(0x500, 2, Access::Write)], 5, 1, u64::MAX).unwrap();
        run.fill(&mut [MaybeUninit::uninit(); 4]);
    }
}
