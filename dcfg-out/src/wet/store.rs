//! Dependences and values kept until the trace can be written in the comprehensive
//! format's order (static instruction, then use port, then instance), spilled to
//! temporary files in runs when they exceed a memory budget, and merged back in one
//! sequential pass over every run.
//!
//! Each use port (and each instruction's values) is a segment: a byte buffer of records,
//! delta-encoded as LEB128 varints. A dependence record is `2 * Δinstance + 1`, then the
//! dependence's static id and instance as zigzag deltas from the previous record's; a
//! record whose three deltas repeat the previous record's (a loop's register dependence on
//! its previous iteration, a load from the same store's next instance) joins a run, written
//! once as `2 * length`. A value record is the instance (zigzag delta) and the value.
//! A spilled run is the segments that had records, in segment order, each with its index,
//! record count and length; every run starts its deltas afresh.

use super::handoff::{self, Batcher, Gone};
use super::shadow::{id_of, inst_of, Def};
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};

#[derive(Default)]
struct Seg {
    buf: Vec<u8>,
    last: u64,
    last_dep: u64,
    last_id: u32,
    /// The previous record's deltas, and how many records since repeated them unwritten.
    d_inst: u64,
    d_dep: u64,
    run: u32,
    /// Records since the last spill (a run of repeats holds billions in a few bytes).
    count: u64,
    /// Records over all runs.
    total: u64,
}

impl Seg {
    /// Appends a dependence record.
    #[inline]
    fn dep(&mut self, d: DepRecord) {
        let (di, dd) = (d.inst - self.last, d.dep_inst.wrapping_sub(self.last_dep));
        if self.count > 0 && di == self.d_inst && d.dep_id == self.last_id && dd == self.d_dep && self.run < u32::MAX {
            self.run += 1;
        } else {
            self.flush_run();
            put(&mut self.buf, di << 1 | 1);
            put(&mut self.buf, zig(d.dep_id.wrapping_sub(self.last_id) as i32 as i64));
            put(&mut self.buf, zig(dd as i64));
            (self.d_inst, self.d_dep, self.last_id) = (di, dd, d.dep_id);
        }
        self.last = d.inst;
        self.last_dep = d.dep_inst;
        self.count += 1;
        self.total += 1;
    }

    #[inline]
    fn flush_run(&mut self) {
        if self.run > 0 {
            put(&mut self.buf, (self.run as u64) << 1);
            self.run = 0;
        }
    }
}

/// Dependences and values of a whole trace, by segment.
pub struct Store {
    segs: Vec<Seg>,
    /// Spilled runs, oldest first, each with its level: a run of level l+1 is [`FAN_IN`]
    /// consecutive runs of level l merged.
    runs: Vec<(File, u32)>,
    /// Runs spilled in all (before merging).
    spilled: usize,
    held: usize,
    budget: usize,
}

/// Runs of one level merged into one when there are this many: the reader keeps a file
/// and a buffer per run, so their number stays below `FAN_IN` per level (a few levels for
/// any run), and each record is rewritten once per level.
const FAN_IN: usize = 32;

/// Merges the last [`FAN_IN`] runs of `runs` (each with its level) into one of the next
/// level while they share one, so that few files are held at any time. They are
/// consecutive, so the merged run keeps their records' order.
fn merge_levels(runs: &mut Vec<(File, u32)>, mut merge: impl FnMut(Vec<File>) -> io::Result<File>) -> io::Result<()> {
    while runs.len() >= FAN_IN {
        let level = runs[runs.len() - 1].1;
        let at = runs.len() - FAN_IN;
        if runs[at..].iter().any(|r| r.1 != level) {
            break;
        }
        let group: Vec<File> = runs.drain(at..).map(|r| r.0).collect();
        runs.push((merge(group)?, level + 1));
    }
    Ok(())
}

/// An error of a temporary file `what` was written to, naming the directory.
fn temp_error(what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what} to a temporary file in {}: {e}", std::env::temp_dir().display()))
}

#[inline]
fn put(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

#[inline]
fn zig(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
fn unzig(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

/// Reads a varint from a byte slice at `*at`.
#[inline]
fn get(buf: &[u8], at: &mut usize) -> io::Result<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*at).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "truncated WET spill record"))?;
        *at += 1;
        v |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(io::Error::new(io::ErrorKind::InvalidData, "overlong varint in WET spill"))
}

/// Reads a varint from a reader; None at a clean end of file.
fn read_varint(r: &mut impl Read) -> io::Result<Option<u64>> {
    let mut v = 0u64;
    let mut b = [0u8];
    for (k, shift) in (0..64).step_by(7).enumerate() {
        if r.read(&mut b)? == 0 {
            return if k == 0 { Ok(None) } else { Err(io::ErrorKind::UnexpectedEof.into()) };
        }
        v |= ((b[0] & 0x7f) as u64) << shift;
        if b[0] & 0x80 == 0 {
            return Ok(Some(v));
        }
    }
    Err(io::Error::new(io::ErrorKind::InvalidData, "overlong varint in WET spill"))
}

/// A dependence record: the use's instance, and the instance it depends on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DepRecord {
    pub inst: u64,
    pub dep_id: u32,
    pub dep_inst: u64,
}

impl Store {
    /// A store of `n` segments, spilling past `budget` bytes.
    pub fn new(n: usize, budget: usize) -> Store {
        let mut segs = Vec::with_capacity(n);
        segs.resize_with(n, Seg::default);
        Store { segs, runs: Vec::new(), spilled: 0, held: 0, budget }
    }

    /// In use-port segment `seg`, instance `inst` depends on `dep`.
    #[inline]
    pub fn dep(&mut self, seg: u32, inst: u64, dep: Def) -> io::Result<()> {
        let s = &mut self.segs[seg as usize];
        let before = s.buf.capacity();
        s.dep(DepRecord { inst, dep_id: id_of(dep), dep_inst: inst_of(dep) });
        self.held += s.buf.capacity() - before;
        self.check()
    }

    /// In value segment `seg`, instance `inst` computed `value`.
    #[inline]
    pub fn value(&mut self, seg: u32, inst: u64, value: u64) -> io::Result<()> {
        let k = seg as usize;
        let s = &mut self.segs[k];
        let before = s.buf.capacity();
        put(&mut s.buf, zig(inst.wrapping_sub(s.last) as i64));
        put(&mut s.buf, value);
        s.last = inst;
        s.count += 1;
        s.total += 1;
        self.held += s.buf.capacity() - before;
        self.check()
    }

    #[inline]
    fn check(&mut self) -> io::Result<()> {
        if self.held > self.budget {
            self.spill()?;
        }
        Ok(())
    }

    /// Writes every segment held to a new run and frees them; an error names the directory.
    fn spill(&mut self) -> io::Result<()> {
        self.spill_run().map_err(|e| temp_error("spilling dependences", e))
    }

    fn spill_run(&mut self) -> io::Result<()> {
        let mut w = BufWriter::with_capacity(1 << 20, tempfile::tempfile()?);
        let mut prev = 0u64;
        let mut head = Vec::with_capacity(32);
        for (k, s) in self.segs.iter_mut().enumerate() {
            if s.count == 0 {
                continue;
            }
            s.flush_run();
            head.clear();
            put(&mut head, k as u64 - prev);
            put(&mut head, s.count);
            put(&mut head, s.buf.len() as u64);
            w.write_all(&head)?;
            w.write_all(&s.buf)?;
            prev = k as u64;
            *s = Seg { total: s.total, ..Seg::default() };
        }
        let mut f = w.into_inner().map_err(|e| e.into_error())?;
        io::Seek::rewind(&mut f)?;
        self.runs.push((f, 0));
        self.spilled += 1;
        self.held = 0;
        merge_levels(&mut self.runs, merge)
    }

    /// Runs spilled so far (before merging).
    pub fn runs(&self) -> usize {
        self.spilled
    }

    /// Run files held now.
    pub fn files(&self) -> usize {
        self.runs.len()
    }

    /// Records of a segment over the whole trace.
    pub fn total(&self, seg: u32) -> u64 {
        self.segs[seg as usize].total
    }

    /// A reader that yields every segment's records in order, runs first, memory last.
    pub fn into_reader(self) -> Reader {
        let runs = self.runs.into_iter().map(|(f, _)| RunReader::new(f)).collect();
        Reader { runs, segs: self.segs, buf: Vec::new(), started: false, values_held: VALUES_HELD, values: Vec::new(), values_files: 0 }
    }
}

/// A [`Store`] filled on a thread of its own: the engine hands it records in batches, so
/// that encoding them runs beside the engine instead of in its turn.
pub struct Background {
    feeder: Feeder,
    thread: Option<std::thread::JoinHandle<io::Result<Store>>>,
}

/// Hands a [`Background`] store records in batches, from the thread it is on. Each
/// feeder's records arrive in its order; a store segment is fed by one feeder only (the
/// engine's memory half has the memory reads' use ports, the engine the others).
pub struct Feeder(Batcher<Record>);

/// One record for the store: a dependence (`seg` a use port) or a value (`seg` with
/// [`VALUE`] set).
#[derive(Clone, Copy)]
struct Record {
    seg: u32,
    inst: u64,
    x: u64,
}

/// Marks a value record's segment.
const VALUE: u32 = 1 << 31;
/// Records a batch holds.
const RECORDS: usize = 1 << 16;

impl Background {
    /// Starts filling `store`.
    pub fn new(mut store: Store) -> io::Result<Background> {
        if store.segs.len() > VALUE as usize {
            return Err(io::Error::other(format!("{} WET store segments, more than {VALUE}", store.segs.len())));
        }
        let (feeder, records) = handoff::channel::<Record>(RECORDS, 4);
        let thread = std::thread::Builder::new().name("wet-store".into()).spawn(move || -> io::Result<Store> {
            #[cfg(test)]
            let _running = tests::Running::start();
            records.each(|r| if r.seg & VALUE == 0 { store.dep(r.seg, r.inst, r.x) } else { store.value(r.seg & !VALUE, r.inst, r.x) })?;
            Ok(store)
        })?;
        Ok(Background { feeder: Feeder(feeder), thread: Some(thread) })
    }

    /// Another feeder of the same store, for another thread.
    pub fn feeder(&self) -> Feeder {
        Feeder(self.feeder.0.clone())
    }

    /// In use-port segment `seg`, instance `inst` depends on `dep` (see [`Store::dep`]).
    #[inline]
    pub fn dep(&mut self, seg: u32, inst: u64, dep: Def) -> io::Result<()> {
        let sent = self.feeder.dep(seg, inst, dep);
        sent.map_err(|e| self.cause(e))
    }

    /// In value segment `seg`, instance `inst` computed `value` (see [`Store::value`]).
    #[inline]
    pub fn value(&mut self, seg: u32, inst: u64, value: u64) -> io::Result<()> {
        let sent = self.feeder.value(seg, inst, value);
        sent.map_err(|e| self.cause(e))
    }

    /// What to report for `e`, another feeder's failure to hand records over: the store's
    /// own error, which stopped it. (The store is done with.)
    pub fn cause(&mut self, e: io::Error) -> io::Error {
        self.stop().err().unwrap_or(e)
    }

    /// Waits for the thread and takes back its store (or its error).
    fn stop(&mut self) -> io::Result<Store> {
        self.feeder.0.disconnect();
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| io::Error::other("the WET store's thread panicked"))?,
            None => Err(io::Error::other("the WET store stopped")),
        }
    }

    /// Hands over the last records and returns the filled store, once every other feeder
    /// has finished too.
    pub fn finish(mut self) -> io::Result<Store> {
        let sent = self.feeder.0.close();
        settled(sent, self.stop())
    }
}

/// What a finished store answers: the store thread's own error (a spill that failed) before
/// the feeder's failure to hand the last records over, which that error caused. (A store
/// thread that fails after the engine's last full batch is seen only here, and only as
/// gone from the feeder's side: a loaded machine made `dep wet` say "the WET store
/// stopped" instead of naming the spill.)
fn settled(sent: Result<(), Gone>, store: io::Result<Store>) -> io::Result<Store> {
    let store = store?;
    sent.map_err(stopped)?;
    Ok(store)
}

impl Drop for Background {
    /// Stops feeding and waits for the thread (where `finish` was not reached: an error
    /// elsewhere), so that none is left running, holding the store, after its owner is
    /// gone. The thread ends once every other feeder has too: an owner drops those first
    /// (the engine drops its memory half, which holds one, before its output).
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

impl Feeder {
    /// In use-port segment `seg`, instance `inst` depends on `dep` (see [`Store::dep`]).
    #[inline]
    pub fn dep(&mut self, seg: u32, inst: u64, dep: Def) -> io::Result<()> {
        self.push(Record { seg, inst, x: dep })
    }

    /// In value segment `seg`, instance `inst` computed `value` (see [`Store::value`]).
    #[inline]
    pub fn value(&mut self, seg: u32, inst: u64, value: u64) -> io::Result<()> {
        self.push(Record { seg: seg | VALUE, inst, x: value })
    }

    #[inline]
    fn push(&mut self, r: Record) -> io::Result<()> {
        self.0.push(r).map_err(stopped)
    }

    /// Hands over the last records: the store is whole once every feeder has finished.
    pub fn finish(mut self) -> io::Result<()> {
        self.0.close().map_err(stopped)
    }
}

/// A feeder's error where the store's thread stopped (its owner's `finish` says why).
fn stopped(_: Gone) -> io::Error {
    io::Error::other("the WET store stopped")
}

struct RunReader {
    r: BufReader<File>,
    /// The next segment's index, records and length.
    next: Option<(u64, u64, usize)>,
    pos: u64,
}

/// Consecutive runs as one: each segment's parts from every run, in run order, in
/// increasing segment order (a segment may have several parts, each starting its deltas
/// afresh).
fn merge(group: Vec<File>) -> io::Result<File> {
    let mut runs: Vec<RunReader> = group.into_iter().map(RunReader::new).collect();
    for r in &mut runs {
        r.advance()?;
    }
    let mut w = BufWriter::with_capacity(1 << 20, tempfile::tempfile()?);
    let (mut prev, mut head, mut buf) = (0u64, Vec::with_capacity(32), Vec::new());
    while let Some(k) = runs.iter().filter_map(|r| r.next.map(|n| n.0)).min() {
        for r in &mut runs {
            while let Some((rk, count, len)) = r.next {
                if rk != k {
                    break;
                }
                buf.resize(len, 0);
                r.r.read_exact(&mut buf)?;
                head.clear();
                put(&mut head, k - prev);
                put(&mut head, count);
                put(&mut head, len as u64);
                w.write_all(&head)?;
                w.write_all(&buf)?;
                prev = k;
                r.advance()?;
            }
        }
    }
    let mut f = w.into_inner().map_err(|e| e.into_error())?;
    io::Seek::rewind(&mut f)?;
    Ok(f)
}

impl RunReader {
    fn new(f: File) -> RunReader {
        RunReader { r: BufReader::with_capacity(1 << 20, f), next: None, pos: 0 }
    }

    fn advance(&mut self) -> io::Result<()> {
        self.next = match read_varint(&mut self.r)? {
            None => None,
            Some(delta) => {
                let count = read_varint(&mut self.r)?.ok_or(io::ErrorKind::UnexpectedEof)?;
                let len = read_varint(&mut self.r)?.ok_or(io::ErrorKind::UnexpectedEof)? as usize;
                self.pos += delta;
                Some((self.pos, count, len))
            }
        };
        Ok(())
    }
}

/// Segment by segment, in increasing order, the records of every run.
pub struct Reader {
    runs: Vec<RunReader>,
    segs: Vec<Seg>,
    buf: Vec<u8>,
    started: bool,
    /// One instruction's values sorted in memory at most; more go through sorted runs in
    /// temporary files (an instruction may run billions of times).
    values_held: usize,
    values: Vec<(u64, u64)>,
    /// Most sorted runs of values held at once.
    values_files: usize,
}

/// Values of one instruction [`Reader::values`] sorts in memory, by default (64 MiB).
const VALUES_HELD: usize = 1 << 22;

/// What [`Reader::values`] gives: the number of values, then each (instance, value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Values {
    Count(u64),
    Value(u64, u64),
}

/// A temporary file, its errors naming the directory.
fn temp_file(what: &str) -> io::Result<File> {
    tempfile::tempfile().map_err(|e| temp_error(what, e))
}

/// Sorts `held` by instance and writes it to a temporary file as (instance, value) pairs.
fn sorted_values(held: &mut Vec<(u64, u64)>) -> io::Result<File> {
    held.sort_unstable_by_key(|v| v.0);
    held.dedup_by_key(|v| v.0);
    let mut w = BufWriter::with_capacity(1 << 20, temp_file("sorting values")?);
    for &(i, v) in held.iter() {
        w.write_all(&i.to_le_bytes())?;
        w.write_all(&v.to_le_bytes())?;
    }
    held.clear();
    let mut f = w.into_inner().map_err(|e| e.into_error())?;
    io::Seek::rewind(&mut f)?;
    Ok(f)
}

/// Sorted runs of values merged into one, one value per instance (the earliest run's), and
/// how many it holds.
fn merge_values(sorted: Vec<File>) -> io::Result<(File, u64)> {
    let mut runs: Vec<BufReader<File>> = sorted.into_iter().map(|f| BufReader::with_capacity(1 << 16, f)).collect();
    let mut heap = std::collections::BinaryHeap::new();
    for (k, r) in runs.iter_mut().enumerate() {
        if let Some((i, v)) = next_value(r)? {
            heap.push(std::cmp::Reverse((i, k, v)));
        }
    }
    let mut w = BufWriter::with_capacity(1 << 20, temp_file("sorting values")?);
    let (mut n, mut last) = (0u64, None);
    while let Some(std::cmp::Reverse((i, k, v))) = heap.pop() {
        if last != Some(i) {
            w.write_all(&i.to_le_bytes())?;
            w.write_all(&v.to_le_bytes())?;
            n += 1;
            last = Some(i);
        }
        if let Some((i, v)) = next_value(&mut runs[k])? {
            heap.push(std::cmp::Reverse((i, k, v)));
        }
    }
    let mut merged = w.into_inner().map_err(|e| e.into_error())?;
    io::Seek::rewind(&mut merged)?;
    Ok((merged, n))
}

/// The next (instance, value) pair of a sorted run; None at its end.
fn next_value(r: &mut impl Read) -> io::Result<Option<(u64, u64)>> {
    let mut b = [0u8; 16];
    match r.read_exact(&mut b) {
        Ok(()) => Ok(Some((u64::from_le_bytes(b[..8].try_into().expect("8")), u64::from_le_bytes(b[8..].try_into().expect("8"))))),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}

/// A part of a segment, as [`Reader::dep_parts`] gives it.
#[derive(Debug)]
pub enum Part<'a> {
    /// Read from a spilled run, into the reader's buffer.
    Read(&'a [u8]),
    /// The segment's records held in memory, whole.
    Held(Vec<u8>),
}

/// Where reading one part of a segment stands (each part starts its deltas afresh): the
/// next byte, the last record given, its deltas from the one before, and how many records
/// repeating those deltas are still to come. A part can be read in stretches from several
/// of these, each taken where the one before stopped.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cursor {
    at: usize,
    d: DepRecord,
    di: u64,
    dd: u64,
    run: u64,
}

impl Cursor {
    /// Gives the next `n` records of part `buf` (fewer at its end) to `f`, in order.
    #[inline]
    pub fn each(&mut self, buf: &[u8], n: u64, mut f: impl FnMut(DepRecord) -> io::Result<()>) -> io::Result<()> {
        // (In locals, not through `self`, so that they stay in registers.)
        let Cursor { mut at, mut d, mut di, mut dd, mut run } = *self;
        let mut left = n;
        while left > 0 {
            if run > 0 {
                let k = run.min(left);
                for _ in 0..k {
                    d.inst = d.inst.wrapping_add(di);
                    d.dep_inst = d.dep_inst.wrapping_add(dd);
                    f(d)?;
                }
                (run, left) = (run - k, left - k);
                continue;
            }
            if at >= buf.len() {
                break;
            }
            let v = get(buf, &mut at)?;
            if v & 1 == 1 {
                di = v >> 1;
                d.dep_id = d.dep_id.wrapping_add(unzig(get(buf, &mut at)?) as u32);
                dd = unzig(get(buf, &mut at)?) as u64;
                d.inst = d.inst.wrapping_add(di);
                d.dep_inst = d.dep_inst.wrapping_add(dd);
                f(d)?;
                left -= 1;
            } else {
                run = v >> 1;
            }
        }
        *self = Cursor { at, d, di, dd, run };
        Ok(())
    }

    /// Steps over the next `n` records of part `buf` (fewer at its end) without giving
    /// them, a run of repeats at once; answers how many it stepped over.
    pub fn skip(&mut self, buf: &[u8], n: u64) -> io::Result<u64> {
        let mut left = n;
        while left > 0 {
            if self.run > 0 {
                let k = self.run.min(left);
                self.d.inst = self.d.inst.wrapping_add(self.di.wrapping_mul(k));
                self.d.dep_inst = self.d.dep_inst.wrapping_add(self.dd.wrapping_mul(k));
                (self.run, left) = (self.run - k, left - k);
            } else if self.at >= buf.len() {
                break;
            } else {
                self.each(buf, 1, |_| Ok(()))?;
                left -= 1;
            }
        }
        Ok(n - left)
    }

    /// Whether part `buf` is read through.
    pub fn done(&self, buf: &[u8]) -> bool {
        self.run == 0 && self.at >= buf.len()
    }
}

/// Each dependence record of one part of a segment, in order.
#[cfg(test)]
pub(super) fn each_dep(buf: &[u8], f: impl FnMut(DepRecord) -> io::Result<()>) -> io::Result<()> {
    Cursor::default().each(buf, u64::MAX, f)
}

/// One part encoding `records` (in instance order), as the store writes them.
#[cfg(test)]
pub(super) fn encoded(records: &[DepRecord]) -> Vec<u8> {
    let mut s = Seg::default();
    for &d in records {
        s.dep(d);
    }
    s.flush_run();
    s.buf
}

impl Reader {
    /// Positions every run at its first segment, once.
    fn open(&mut self) -> io::Result<()> {
        if !self.started {
            for r in &mut self.runs {
                r.advance()?;
            }
            self.started = true;
        }
        Ok(())
    }

    /// Calls `f` with each part of segment `seg` (raw bytes and record count), in run order.
    /// Segments must be asked for in increasing order.
    fn parts(&mut self, seg: u32, f: &mut dyn FnMut(&[u8], u64) -> io::Result<()>) -> io::Result<()> {
        self.dep_parts(seg, &mut |part, count| match part {
            Part::Read(buf) => f(buf, count),
            Part::Held(buf) => f(&buf, count),
        })
    }

    /// Each dependence record of use-port segment `seg`, in instance order. (The trace's
    /// formatters decode [`dep_parts`](Self::dep_parts) themselves.)
    #[cfg(test)]
    pub fn deps(&mut self, seg: u32, f: &mut dyn FnMut(DepRecord) -> io::Result<()>) -> io::Result<()> {
        self.parts(seg, &mut |buf, _| each_dep(buf, &mut *f))
    }

    /// Calls `f` with each part of segment `seg` and its record count, in run order, for a
    /// [`Cursor`] to decode where the caller likes (the formatters, beside this reader).
    /// The part held in memory is handed over whole, not copied (it may be most of the
    /// memory budget). Segments must be asked for in increasing order.
    pub fn dep_parts(&mut self, seg: u32, f: &mut dyn FnMut(Part, u64) -> io::Result<()>) -> io::Result<()> {
        self.open()?;
        for r in &mut self.runs {
            while let Some((k, count, len)) = r.next {
                if k > seg as u64 {
                    break;
                }
                self.buf.resize(len, 0);
                r.r.read_exact(&mut self.buf)?;
                r.advance()?;
                if k == seg as u64 {
                    f(Part::Read(&self.buf), count)?;
                }
            }
        }
        let mut s = std::mem::take(&mut self.segs[seg as usize]);
        s.flush_run();
        if s.count > 0 {
            f(Part::Held(s.buf), s.count)?;
        }
        Ok(())
    }

    /// The values of value segment `seg`: their number, then each, sorted by instance
    /// (one value per instance). Past [`VALUES_HELD`] they are sorted in runs on disk and
    /// merged, so memory stays bounded however often the instruction ran.
    pub fn values(&mut self, seg: u32, f: &mut dyn FnMut(Values) -> io::Result<()>) -> io::Result<()> {
        let mut held = std::mem::take(&mut self.values);
        held.clear();
        // Sorted runs, each with its level, merged as the store's runs are.
        let mut sorted: Vec<(File, u32)> = Vec::new();
        let cap = self.values_held.max(1);
        let mut most = self.values_files;
        self.parts(seg, &mut |buf, count| {
            let (mut at, mut last) = (0usize, 0u64);
            for _ in 0..count {
                last = last.wrapping_add(unzig(get(buf, &mut at)?) as u64);
                held.push((last, get(buf, &mut at)?));
                if held.len() >= cap {
                    sorted.push((sorted_values(&mut held)?, 0));
                    merge_levels(&mut sorted, |group| Ok(merge_values(group)?.0))?;
                    most = most.max(sorted.len());
                }
            }
            Ok(())
        })?;
        self.values_files = most;
        if sorted.is_empty() {
            held.sort_unstable_by_key(|v| v.0);
            held.dedup_by_key(|v| v.0);
            f(Values::Count(held.len() as u64))?;
            for &(i, v) in &held {
                f(Values::Value(i, v))?;
            }
        } else {
            if !held.is_empty() {
                sorted.push((sorted_values(&mut held)?, 0));
            }
            let (merged, n) = merge_values(sorted.into_iter().map(|r| r.0).collect())?;
            f(Values::Count(n))?;
            let mut r = BufReader::with_capacity(1 << 20, merged);
            for _ in 0..n {
                let (i, v) =
                    next_value(&mut r)?.ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "sorted WET values cut short"))?;
                f(Values::Value(i, v))?;
            }
        }
        held.clear();
        self.values = held;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::shadow::pack;
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    /// Store threads whose closure has not returned. Exact where the kernel's list of
    /// threads is not: a joined thread stays in /proc/self/task until the kernel reaps it,
    /// after `join` has returned (CI saw it there).
    static RUNNING: AtomicUsize = AtomicUsize::new(0);

    /// Counted in [`RUNNING`] while a store thread holds it.
    pub(super) struct Running;

    impl Running {
        pub(super) fn start() -> Running {
            RUNNING.fetch_add(1, SeqCst);
            Running
        }
    }

    impl Drop for Running {
        fn drop(&mut self) {
            RUNNING.fetch_sub(1, SeqCst);
        }
    }

    /// A store dropped without `finish` (its owner failed) has stopped its thread by the
    /// time the drop returns, rather than leaving it to encode on alone: the fuzzer's leak
    /// check saw such a thread's allocations. (No other test here starts a store.)
    #[test]
    fn a_dropped_store_leaves_no_thread() {
        let mut bg = Background::new(Store::new(2, 1 << 30)).unwrap();
        let mut other = bg.feeder();
        // Eight batches, past the channel's four: the thread has started (it took some),
        // and it is busy for milliseconds after them.
        for i in 0..4 * RECORDS as u64 {
            bg.dep(0, i, pack(1, i)).unwrap();
            other.dep(1, i, pack(2, i)).unwrap();
        }
        assert_eq!(RUNNING.load(SeqCst), 1);
        drop(other);
        drop(bg);
        assert_eq!(RUNNING.load(SeqCst), 0, "the store thread runs on");
    }

    /// At the end, a store that failed says why, not that it stopped taking records.
    #[test]
    fn a_failed_store_names_its_own_error_at_the_end() {
        let spill = || Err(io::Error::other("spilling dependences to a temporary file in /x: gone"));
        for sent in [Err(Gone), Ok(())] {
            let e = settled(sent, spill()).err().expect("the store failed");
            assert!(e.to_string().starts_with("spilling dependences"), "{e}");
        }
        let e = settled(Err(Gone), Ok(Store::new(1, 0))).err().expect("records were lost");
        assert_eq!(e.to_string(), "the WET store stopped");
        assert!(settled(Ok(()), Ok(Store::new(1, 0))).is_ok());
    }

    /// Records come back in order whether they stayed in memory or went through runs.
    #[test]
    fn spilled_and_held_records_read_back_in_order() {
        for budget in [0usize, 64, 1 << 30] {
            let mut s = Store::new(5, budget);
            let mut want: Vec<Vec<DepRecord>> = vec![vec![]; 3];
            for inst in 0..200u64 {
                for port in 0..3u32 {
                    if (inst + port as u64) % 3 != 0 {
                        let dep = pack(port * 7, inst * 2 + 3 - port as u64);
                        s.dep(port, inst, dep).unwrap();
                        want[port as usize].push(DepRecord { inst, dep_id: port * 7, dep_inst: inst * 2 + 3 - port as u64 });
                    }
                }
                s.value(4, 199 - inst, inst).unwrap();
            }
            assert_eq!(budget == 0, s.runs() > 100, "budget {budget}: {} runs", s.runs());
            // Merged as they come: a few levels of fewer than FAN_IN files each.
            assert!(s.files() < 3 * FAN_IN, "budget {budget}: {} files held for {} runs", s.files(), s.runs());
            let totals: Vec<u64> = (0..3).map(|p| s.total(p)).collect();
            let vseg = 4;
            let mut r = s.into_reader();
            for port in 0..3u32 {
                let mut got = vec![];
                r.deps(port, &mut |d| {
                    got.push(d);
                    Ok(())
                })
                .unwrap();
                assert_eq!(got, want[port as usize]);
                assert_eq!(totals[port as usize], got.len() as u64);
            }
            assert_eq!(values(&mut r, vseg), (0..200).map(|i| (i, 199 - i)).collect::<Vec<_>>());
        }
    }

    /// A part read in stretches of any length, each from where the last stopped (a run
    /// of repeats stepped over at once, or cut anywhere), gives the records read whole.
    #[test]
    fn a_part_reads_the_same_in_stretches() {
        // Runs of repeats of several lengths between records that are not, and steps back.
        let mut recs = vec![];
        let (mut inst, mut dep) = (3u64, 1000u64);
        for k in 0..400u64 {
            let (di, dd, id) = match k % 40 {
                0..=24 => (1, 1, 7),
                25..=29 => (2 + k % 3, k.wrapping_mul(31) % 9, 7 + (k % 2) as u32),
                30..=38 => (1, 0, 9),
                _ => (5, u64::MAX - 40, 2),
            };
            inst += di;
            dep = dep.wrapping_add(dd);
            recs.push(DepRecord { inst, dep_id: id, dep_inst: dep });
        }
        let part = encoded(&recs);
        assert!(part.len() < recs.len(), "{} bytes: the runs were not kept as runs", part.len());
        let mut whole = vec![];
        each_dep(&part, |d| {
            whole.push(d);
            Ok(())
        })
        .unwrap();
        assert_eq!(whole, recs);
        for n in [1u64, 2, 3, 7, 24, 25, 26, 64, 399, 400, 1000] {
            // Read in stretches of n, and stepped over in stretches of n then read.
            let (mut c, mut got) = (Cursor::default(), vec![]);
            while !c.done(&part) {
                let before = got.len();
                c.each(&part, n, |d| {
                    got.push(d);
                    Ok(())
                })
                .unwrap();
                assert_eq!((got.len() - before) as u64, n.min((recs.len() - before) as u64));
            }
            assert_eq!(got, recs, "read {n} at a time");
            let (mut c, mut got) = (Cursor::default(), vec![]);
            while !c.done(&part) {
                let from = c;
                let stepped = c.skip(&part, n).unwrap();
                let mut again = from;
                again
                    .each(&part, stepped, |d| {
                        got.push(d);
                        Ok(())
                    })
                    .unwrap();
                assert_eq!((again.at, again.run, again.d), (c.at, c.run, c.d), "stepped {n} at a time");
            }
            assert_eq!(got, recs, "stepped {n} at a time");
        }
    }

    /// Thousands of runs (a spill per record) merge level by level: the files held stay a
    /// few per level, and every record still reads back in order.
    #[test]
    fn many_runs_merge_in_levels() {
        let mut s = Store::new(3, 0);
        let n = 5000u64;
        for inst in 0..n {
            s.dep(0, inst, pack(7, inst * 3)).unwrap();
            if inst % 2 == 0 {
                s.dep(1, inst, pack(9, inst)).unwrap();
            }
            s.value(2, n - 1 - inst, inst).unwrap();
        }
        assert!(s.runs() > 2 * (FAN_IN * FAN_IN) && s.files() < 3 * FAN_IN, "{} runs, {} files", s.runs(), s.files());
        let mut r = s.into_reader();
        for (seg, step, id, mul) in [(0u32, 1u64, 7u32, 3u64), (1, 2, 9, 1)] {
            let mut got = vec![];
            r.deps(seg, &mut |d| {
                got.push(d);
                Ok(())
            })
            .unwrap();
            let want: Vec<DepRecord> =
                (0..n).step_by(step as usize).map(|i| DepRecord { inst: i, dep_id: id, dep_inst: i * mul }).collect();
            assert!(got == want, "segment {seg}: {} records read, {} written", got.len(), want.len());
        }
        assert_eq!(values(&mut r, 2), (0..n).map(|i| (i, n - 1 - i)).collect::<Vec<_>>());
    }

    /// A segment's values through the reader, checking the count comes first and is right.
    fn values(r: &mut Reader, seg: u32) -> Vec<(u64, u64)> {
        let (mut count, mut got) = (None, vec![]);
        r.values(seg, &mut |v| {
            match v {
                Values::Count(n) => {
                    assert!(count.is_none() && got.is_empty(), "one count, before the values");
                    count = Some(n);
                }
                Values::Value(i, v) => got.push((i, v)),
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(count, Some(got.len() as u64));
        got
    }

    /// More values than a reader sorts in memory go through sorted runs: the same values
    /// come back, sorted, one per instance, whether held, spilled by the store or both.
    #[test]
    fn values_past_the_memory_bound_are_sorted_on_disk() {
        for (budget, held) in [(1 << 30, 1usize), (1 << 30, 7), (64, 5), (1 << 30, 1 << 20)] {
            let mut s = Store::new(1, budget);
            // With one value per sorted run, 3000 runs: merged in levels as they come.
            let n = 3000u64;
            let mut want = vec![];
            for k in 0..n {
                // Out of order as values learned late arrive: blocks of 10 reversed.
                let inst = (k / 10) * 10 + 9 - k % 10;
                s.value(0, inst, inst * 3 + 1).unwrap();
                want.push((k, k * 3 + 1));
            }
            // A value given twice (as no engine does, but a reader must not list it twice).
            s.value(0, 1500, 1500 * 3 + 1).unwrap();
            let mut r = s.into_reader();
            r.values_held = held;
            assert_eq!(values(&mut r, 0), want, "budget {budget}, {held} held");
            assert!(r.values_files < 3 * FAN_IN, "{} sorted runs open at once", r.values_files);
        }
    }
}
