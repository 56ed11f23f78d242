//! Where every execution record goes. A thread's records fall into turns at its sync
//! records; the turns of all threads are taken in the interleaver's order
//! ([`dep_recover::Turns`]), which gives each record its ID (EID) and its place in
//! exec.vtable. The writing pass then puts each chunk's records at their places, in
//! parallel, with positional writes: the three execution files never pass through one
//! writer.

use super::exec::{BlockRecords, Out, GAP};
use super::UmtError;
use dep_recover::MemEvent;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// Bytes before the first record of exec.vtable.
pub const VTABLE_HEADER: u64 = 16;

/// A run of a thread's records that take consecutive EIDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The thread's record index and byte offset (among its records) where it starts.
    pub rec: u64,
    pub byte: u64,
    /// Its first EID and that record's offset in exec.vtable.
    pub eid: u64,
    pub at: u64,
}

/// A thread's turns as the counting pass found them: where each starts, and its number.
#[derive(Clone, Debug, Default)]
pub struct ThreadTurns {
    /// (record index, byte offset, turn number), the first at 0.
    pub starts: Vec<(u64, u64, u64)>,
    pub records: u64,
    pub bytes: u64,
}

/// Every thread's segments, EIDs given; and the totals.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    pub threads: Vec<Vec<Segment>>,
    pub records: u64,
    pub bytes: u64,
    /// Per thread: its record count.
    pub counts: Vec<u64>,
}

impl Layout {
    /// Takes the turns in the interleaver's order; empty turns are dropped.
    pub fn new(turns: &[ThreadTurns], first: &[u64]) -> Layout {
        let mut order = dep_recover::Turns::new(first.iter().copied());
        let mut cursor = vec![0usize; turns.len()];
        let mut threads: Vec<Vec<Segment>> = vec![Vec::new(); turns.len()];
        let (mut eid, mut at) = (0u64, VTABLE_HEADER);
        while let Some((_, t)) = order.next() {
            let t = t as usize;
            let tt = &turns[t];
            let k = cursor[t];
            let Some(&(rec, byte, _)) = tt.starts.get(k) else { continue };
            let (end, end_byte) = tt.starts.get(k + 1).map_or((tt.records, tt.bytes), |s| (s.0, s.1));
            if end > rec {
                threads[t].push(Segment { rec, byte, eid, at });
                eid += end - rec;
                at += end_byte - byte;
            }
            cursor[t] += 1;
            if let Some(&(_, _, key)) = tt.starts.get(k + 1) {
                order.later(t as u32, key);
            }
        }
        Layout { threads, records: eid, bytes: at - VTABLE_HEADER, counts: turns.iter().map(|t| t.records).collect() }
    }

    /// The EID of thread `t`'s record `r`.
    pub fn eid(&self, t: usize, r: u64) -> Option<u64> {
        let segs = &self.threads[t];
        let k = segs.partition_point(|s| s.rec <= r).checked_sub(1)?;
        (r < self.counts[t]).then(|| segs[k].eid + (r - segs[k].rec))
    }
}

/// The three files of the execution table, written at positions.
pub struct ExecFiles {
    pub vtable: (PathBuf, File),
    pub offsets: (PathBuf, File),
    pub prev_next: (PathBuf, File),
}

fn put(f: &(PathBuf, File), at: u64, b: &[u8]) -> Result<(), UmtError> {
    f.1.write_all_at(b, at).map_err(|err| UmtError::Write { path: f.0.clone(), err })
}

impl ExecFiles {
    /// Writes the vtable's header and the offset past the last record.
    pub fn close(&self, layout: &Layout) -> Result<(), UmtError> {
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&1u32.to_le_bytes());
        h[8..16].copy_from_slice(&layout.records.to_le_bytes());
        put(&self.vtable, 0, &h)?;
        put(&self.offsets, 8 * layout.records, &(VTABLE_HEADER + layout.bytes).to_le_bytes())
    }
}

/// Bytes a chunk gathers before it writes them.
const RUN_BYTES: usize = 1 << 18;

/// The writing pass's out: a chunk's records, at their places.
pub struct Place<'a> {
    files: &'a ExecFiles,
    segs: &'a [Segment],
    /// The thread's record count.
    count: u64,
    /// The segment of the next record, and the next record's index and byte offset.
    seg: usize,
    rec: u64,
    byte: u64,
    /// The run being gathered: its first EID and vtable offset, and its bytes.
    run: Option<(u64, u64)>,
    vt: Vec<u8>,
    offs: Cells,
    links: Cells,
}

/// A column's bytes gathered for one write. The buffer keeps its size between runs, so
/// adding a cell is a store at a cursor; a Vec's length, updated in memory at every
/// 8-byte push, was a third of the writing pass's own time (a chain of loads and stores).
#[derive(Default)]
struct Cells {
    buf: Vec<u8>,
    len: usize,
}

impl Cells {
    /// The next `n` bytes, to be filled.
    fn take(&mut self, n: usize) -> &mut [u8] {
        let (from, to) = (self.len, self.len + n);
        if to > self.buf.len() {
            self.buf.resize(to.max(2 * self.buf.len()), 0);
        }
        self.len = to;
        &mut self.buf[from..to]
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Empties it for the next run, keeping the buffer.
    fn clear(&mut self) {
        self.len = 0;
    }
}

impl<'a> Place<'a> {
    /// The out of a chunk whose first record is the thread's `rec`-th, at `byte`.
    pub fn new(files: &'a ExecFiles, layout: &'a Layout, thread: usize, rec: u64, byte: u64) -> Self {
        let segs = &layout.threads[thread][..];
        let seg = segs.partition_point(|s| s.rec <= rec).saturating_sub(1);
        Place {
            files,
            segs,
            count: layout.counts[thread],
            seg,
            rec,
            byte,
            run: None,
            vt: Vec::new(),
            offs: Cells::default(),
            links: Cells::default(),
        }
    }

    /// The thread's index of the next record.
    pub fn next(&self) -> u64 {
        self.rec
    }

    /// Writes the run gathered.
    pub fn flush(&mut self) -> Result<(), UmtError> {
        if let Some((eid, at)) = self.run.take() {
            put(&self.files.vtable, at, &self.vt)?;
            put(&self.files.offsets, 8 * eid, self.offs.bytes())?;
            put(&self.files.prev_next, 16 * eid, self.links.bytes())?;
            self.vt.clear();
            self.offs.clear();
            self.links.clear();
        }
        Ok(())
    }

    /// The segment's end (record index).
    fn end(&self, s: usize) -> u64 {
        self.segs.get(s + 1).map_or(self.count, |n| n.rec)
    }
}

impl Place<'_> {
    /// The segment of the next record (segments before it written out).
    fn segment(&mut self) -> Result<Segment, UmtError> {
        while self.seg + 1 < self.segs.len() && self.segs[self.seg + 1].rec <= self.rec {
            self.flush()?;
            self.seg += 1;
        }
        match self.segs.get(self.seg) {
            Some(s) if s.rec <= self.rec && self.rec < self.end(self.seg) => Ok(*s),
            _ => Err(UmtError::Internal("a record beyond those counted")),
        }
    }

    /// The links of record `rec` (EID `eid`) of segment `s`.
    fn links(&self, s: &Segment, rec: u64, eid: u64) -> (u64, u64) {
        let prev = if rec > s.rec {
            eid - 1
        } else {
            match self.seg.checked_sub(1) {
                Some(p) => self.segs[p].eid + (self.end(p) - 1 - self.segs[p].rec),
                None => u64::MAX,
            }
        };
        let next = if rec + 1 < self.end(self.seg) { eid + 1 } else { self.segs.get(self.seg + 1).map_or(u64::MAX, |n| n.eid) };
        (prev, next)
    }

    /// Starts the run at the next record if none is being gathered: its EID and offset.
    fn place(&mut self, s: &Segment) -> (u64, u64) {
        let eid = s.eid + (self.rec - s.rec);
        let at = s.at + (self.byte - s.byte);
        if self.run.is_none() {
            self.run = Some((eid, at));
        }
        (eid, at)
    }

    fn link(&mut self, s: &Segment, at: u64, eid: u64, len: usize) {
        self.offs.take(8).copy_from_slice(&at.to_le_bytes());
        let (prev, next) = self.links(s, self.rec, eid);
        let l = self.links.take(16);
        l[..8].copy_from_slice(&prev.to_le_bytes());
        l[8..].copy_from_slice(&next.to_le_bytes());
        self.rec += 1;
        self.byte += len as u64;
    }
}

impl Out for Place<'_> {
    fn record(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), UmtError> {
        let s = self.segment()?;
        let (eid, at) = self.place(&s);
        let from = self.vt.len();
        self.vt.resize(from + len, 0);
        fill(&mut self.vt[from..]);
        self.link(&s, at, eid, len);
        if self.vt.len() >= RUN_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn cut(&mut self, _key: u64) {}

    fn block(&mut self, t: u32, gap: bool, b: &BlockRecords, refs: &[MemEvent]) -> Result<(), UmtError> {
        let n = b.records();
        let s = self.segment()?;
        if self.rec + n as u64 > self.end(self.seg) {
            // The block's records are in two turns (a sync record in it): one at a time.
            return b.each(self, t, gap, refs);
        }
        // One copy of the block's records, then the thread, the gap and the addresses.
        let (eid, at) = self.place(&s);
        let from = self.vt.len();
        self.vt.extend_from_slice(&b.bytes);
        let v = &mut self.vt[from..];
        if t != 0 {
            for &st in &b.starts[..n] {
                v[st as usize..st as usize + 4].copy_from_slice(&t.to_le_bytes());
            }
        }
        if gap {
            v[5] |= GAP;
        }
        for (r, a) in refs.iter().zip(b.addr_at.iter()) {
            for &o in a.iter().filter(|&&o| o != u32::MAX) {
                v[o as usize..o as usize + 8].copy_from_slice(&r.addr.to_le_bytes());
            }
        }
        // Offsets and links: inside the block each record's neighbours are the EIDs
        // beside it; the first's previous and the last's next come from the turns.
        let (first, _) = self.links(&s, self.rec, eid);
        let (_, after) = self.links(&s, self.rec + n as u64 - 1, eid + n as u64 - 1);
        for (o, &st) in self.offs.take(8 * n).chunks_exact_mut(8).zip(&b.starts[..n]) {
            o.copy_from_slice(&(at + st as u64).to_le_bytes());
        }
        for (k, l) in self.links.take(16 * n).chunks_exact_mut(16).enumerate() {
            let e = eid + k as u64;
            let prev = if k == 0 { first } else { e - 1 };
            let next = if k + 1 == n { after } else { e + 1 };
            l[..8].copy_from_slice(&prev.to_le_bytes());
            l[8..].copy_from_slice(&next.to_le_bytes());
        }
        self.rec += n as u64;
        self.byte += b.bytes.len() as u64;
        if self.vt.len() >= RUN_BYTES {
            self.flush()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The format's worked example (§6.1.2): thread 1 has records 0, 1, 3, 6 and thread 2
    /// has 2, 4, 5, 7, when their turns alternate so.
    #[test]
    fn turns_give_the_examples_ids() {
        let turns = vec![
            ThreadTurns { starts: vec![(0, 0, 0), (2, 20, 2), (3, 30, 5)], records: 4, bytes: 40 },
            ThreadTurns { starts: vec![(0, 0, 1), (1, 10, 3), (3, 30, 6)], records: 4, bytes: 40 },
        ];
        let l = Layout::new(&turns, &[0, 1]);
        let ids = |t: usize| (0..4).map(|r| l.eid(t, r).unwrap()).collect::<Vec<_>>();
        assert_eq!(ids(0), vec![0, 1, 3, 6]);
        assert_eq!(ids(1), vec![2, 4, 5, 7]);
        assert_eq!(l.records, 8);
        assert_eq!(l.eid(0, 4), None);
    }
}
