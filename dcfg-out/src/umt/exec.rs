//! The execution table's records, made from one chunk of recovered events: a sink that
//! turns each executed instruction into its record (a rep string one per iteration) and
//! each thread event into its own, and hands them to an [`Out`]: the counting pass notes
//! how many records and bytes each turn of the thread holds, the writing pass puts them at
//! the places the layout gave them.

use super::decoded::{Builder, Origin, Row, Shape};
use super::UmtError;
use dep_recover::{BlockEvent, Marker, MemEvent, Run, Sink};
use std::collections::HashMap;
use std::sync::OnceLock;

/// Flags of every record: 64-bit code.
pub const WIDE: u8 = 0x01;
/// Instructions before this record were left out.
pub const GAP: u8 = 0x02;
/// A rep string that made no iteration.
pub const NOT_RUN: u8 = 0x04;
/// The first iteration of a rep string.
pub const FIRST_ITERATION: u8 = 0x08;
/// Version 1: inputs and outputs are not reliable (values are unknown).
pub const NO_VALUES: u8 = 0x30;

/// Record types.
pub const INSTRUCTION: u8 = 0;
pub const THREAD_BEGIN: u8 = 1;
pub const THREAD_END: u8 = 2;
pub const APP_END: u8 = 3;
pub const SIGNAL_ASYNC: u8 = 8;
pub const SIGNAL_FAULT: u8 = 9;
pub const CONTEXT_RETURN: u8 = 11;

/// Bytes of a context record (header and an empty rmContext) and of an end record.
pub const CONTEXT_LEN: usize = 22;
pub const END_LEN: usize = 10;

/// The instruction table's rows and which row each block's instruction has.
pub struct Rows {
    pub rows: Vec<Row>,
    /// Each row's full reference shape.
    pub shapes: Vec<Shape>,
    /// Per block id: where its instructions' rows start in `of_block` and how many (None:
    /// no code).
    pub block_rows: Vec<Option<(u32, u32)>>,
    pub of_block: Vec<u32>,
    /// Rows for executions whose references differ from the instruction's (filled after
    /// the counting pass).
    pub variants: HashMap<(u32, Shape), u32>,
    /// Per block id, made on first use: its records when it runs through.
    pub blocks: Vec<OnceLock<Option<BlockRecords>>>,
}

/// A block's records as they are written when it runs through making its instructions'
/// references (thread 0's, with the flags every instruction record has): what most blocks
/// write, as one copy with the addresses put in.
pub struct BlockRecords {
    pub bytes: Box<[u8]>,
    /// Where each record starts in `bytes`, and the end.
    pub starts: Box<[u32]>,
    /// Per reference, in order: where its address goes in `bytes` (u32::MAX: nowhere).
    pub addr_at: Box<[[u32; 2]]>,
}

impl BlockRecords {
    /// Hands its records to `out` one at a time, for thread `t` with `refs`' addresses.
    pub fn each<O: Out + ?Sized>(&self, out: &mut O, t: u32, gap: bool, refs: &[MemEvent]) -> Result<(), UmtError> {
        let mut j = 0;
        for k in 0..self.records() {
            let len = (self.starts[k + 1] - self.starts[k]) as usize;
            out.record(len, &mut |rec| self.fill(k, t, gap && k == 0, refs, &mut j, rec))?;
        }
        Ok(())
    }

    /// Its records.
    pub fn records(&self) -> usize {
        self.starts.len() - 1
    }

    /// Writes record `k` for thread `t` into `b`, with the addresses of references
    /// `addr_at[*j]..` that fall in it (advancing `j`).
    pub fn fill(&self, k: usize, t: u32, gap: bool, refs: &[MemEvent], j: &mut usize, b: &mut [u8]) {
        let (from, to) = (self.starts[k] as usize, self.starts[k + 1] as usize);
        b.copy_from_slice(&self.bytes[from..to]);
        b[..4].copy_from_slice(&t.to_le_bytes());
        if gap {
            b[5] |= GAP;
        }
        while let Some(at) = self.addr_at.get(*j).filter(|a| (a[0] as usize) < to) {
            for &o in at.iter().filter(|&&o| o != u32::MAX) {
                let o = o as usize - from;
                b[o..o + 8].copy_from_slice(&refs[*j].addr.to_le_bytes());
            }
            *j += 1;
        }
    }
}

impl Rows {
    /// What row `base` was built from, to build its variants.
    pub fn origin(&self, base: u32) -> Origin<'_> {
        let r = &self.rows[base as usize];
        Origin { pc: r.pc, code: &r.code, module: r.module, full: &self.shapes[base as usize], rep: r.rep, fixed: r.fixed }
    }

    /// Block `id`'s records, if every execution of it that runs through writes them (no
    /// rep string, gather or scatter in it).
    pub fn block_records(&self, id: u32) -> Option<&BlockRecords> {
        let cell = self.blocks.get(id as usize)?;
        cell.get_or_init(|| {
            let (s, n) = (*self.block_rows.get(id as usize)?)?;
            let n = n as usize;
            let (mut bytes, mut starts, mut addr_at) = (Vec::new(), Vec::with_capacity(n + 1), Vec::new());
            for &r in &self.of_block[s as usize..s as usize + n] {
                let row = &self.rows[r as usize];
                if !row.fixed {
                    return None;
                }
                let at = bytes.len();
                starts.push(at as u32);
                bytes.resize(at + 14 + row.lc_size as usize, 0);
                bytes[at + 4] = INSTRUCTION;
                bytes[at + 5] = WIDE | NO_VALUES;
                bytes[at + 6..at + 14].copy_from_slice(&(r as u64).to_le_bytes());
                for a in &row.addr_at {
                    addr_at.push(a.map(|o| if o == u16::MAX { u32::MAX } else { (at + 14 + o as usize) as u32 }));
                }
            }
            starts.push(bytes.len() as u32);
            Some(BlockRecords { bytes: bytes.into(), starts: starts.into(), addr_at: addr_at.into() })
        })
        .as_ref()
    }

    fn row_of(&self, block: u32, insn: usize) -> Option<u32> {
        let (s, n) = (*self.block_rows.get(block as usize)?)?;
        if insn >= n as usize {
            return None;
        }
        self.of_block.get(s as usize + insn).copied()
    }
}

/// Where records go.
pub trait Out {
    /// A record of `len` bytes that `fill` writes (into zeroed bytes).
    fn record(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), UmtError>;
    /// The thread's turn numbered `key` starts at the next record.
    fn cut(&mut self, key: u64);

    /// The records of a block that ran through with references `refs`, for thread `t`
    /// (the first after a gap if `gap`).
    fn block(&mut self, t: u32, gap: bool, b: &BlockRecords, refs: &[MemEvent]) -> Result<(), UmtError> {
        b.each(self, t, gap, refs)
    }
}

/// The block whose instructions are being turned into records.
struct Open {
    id: u32,
    executed: usize,
    /// The first instruction without its records yet.
    next: usize,
    /// Whether the rep string at `next` has written an iteration.
    iterated: bool,
}

/// Pages touched, with a cache of the last ones seen before the set (256 entries: with
/// 16, gzip's hash tables missed it often enough for the set's lookups to show).
pub struct Pages {
    pub set: rustc_hash::FxHashSet<u64>,
    recent: Box<[u64; 256]>,
}

impl Default for Pages {
    fn default() -> Self {
        Pages { set: Default::default(), recent: Box::new([0; 256]) }
    }
}

impl Pages {
    fn add(&mut self, addr: u64, size: u32) {
        let (first, last) = (addr >> 12, addr.saturating_add(size.max(1) as u64 - 1) >> 12);
        for p in first..=last {
            let slot = (p as usize) & 255;
            if self.recent[slot] != p.wrapping_add(1) {
                self.recent[slot] = p.wrapping_add(1);
                self.set.insert(p);
            }
        }
    }
}

/// The sink of one chunk.
pub struct ChunkExec<'a, O: Out> {
    rows: &'a Rows,
    thread: u32,
    pub out: O,
    open: Option<Open>,
    /// References of instruction `open.next` not yet written.
    refs: Vec<MemEvent>,
    /// Instructions were left out before the next record.
    gap: bool,
    /// The thread's end is the application's (thread 0 of a profile with its end).
    app_end: bool,
    /// Variants met (counting pass): their local-context size.
    pub variants: HashMap<(u32, Shape), u16>,
    builder: Option<Builder>,
    /// Pages referenced (writing pass).
    pub pages: Option<Pages>,
    pub unknown_blocks: u64,
}

impl<'a, O: Out> ChunkExec<'a, O> {
    /// A chunk's sink of thread `thread`; `counting` gathers variants, writing gathers pages.
    pub fn new(rows: &'a Rows, thread: u32, app_end: bool, out: O, counting: bool) -> Self {
        ChunkExec {
            rows,
            thread,
            out,
            open: None,
            refs: Vec::new(),
            gap: false,
            app_end: app_end && thread == 0,
            variants: HashMap::new(),
            builder: counting.then(Builder::default),
            pages: (!counting).then(Pages::default),
            unknown_blocks: 0,
        }
    }

    fn flags(&mut self) -> u8 {
        WIDE | if std::mem::take(&mut self.gap) { GAP } else { 0 }
    }

    /// A record of a thread event.
    fn event(&mut self, kind: u8, len: usize, value: Option<i32>) -> Result<(), UmtError> {
        let (t, flags) = (self.thread, self.flags());
        self.out.record(len, &mut |b| {
            b[..4].copy_from_slice(&t.to_le_bytes());
            b[4] = kind;
            b[5] = flags;
            match value {
                Some(v) => b[6..10].copy_from_slice(&v.to_le_bytes()),
                // An rmContext: no memory, the register dump (of 0 bytes) right after it.
                None => b[14..22].copy_from_slice(&16u64.to_le_bytes()),
            }
        })
    }

    /// The row and local-context size of an execution of row `base` making `made`.
    fn variant(&mut self, base: u32, made: &[MemEvent]) -> Result<(u32, u16, Option<&'a Row>), UmtError> {
        let key: (u32, Shape) = (base, made.iter().map(|r| (r.access, r.size)).collect());
        if let Some(&v) = self.rows.variants.get(&key) {
            let row = &self.rows.rows[v as usize];
            return Ok((v, row.lc_size, Some(row)));
        }
        // The counting pass: its size, from the row it will have.
        if let Some(&lc) = self.variants.get(&key) {
            return Ok((u32::MAX, lc, None));
        }
        let Some(b) = self.builder.as_mut() else {
            return Err(UmtError::Internal("an execution's references have no row"));
        };
        let lc = b.row(&self.rows.origin(base), Some(&key.1)).lc_size;
        self.variants.insert(key, lc);
        Ok((u32::MAX, lc, None))
    }

    /// An instruction record of row `id` (local context `lc` bytes) with `made`'s addresses.
    fn instruction(&mut self, id: u32, lc: u16, row: Option<&Row>, made: &[MemEvent], extra: u8) -> Result<(), UmtError> {
        if let Some(p) = self.pages.as_mut() {
            for r in made {
                p.add(r.addr, r.size);
            }
        }
        let (t, flags) = (self.thread, self.flags() | NO_VALUES | extra);
        self.out.record(14 + lc as usize, &mut |b| {
            b[..4].copy_from_slice(&t.to_le_bytes());
            b[4] = INSTRUCTION;
            b[5] = flags;
            b[6..14].copy_from_slice(&(id as u64).to_le_bytes());
            if let Some(row) = row {
                for (r, at) in made.iter().zip(&row.addr_at) {
                    for &o in at.iter().filter(|&&o| o != u16::MAX) {
                        let o = 14 + o as usize;
                        if let Some(slot) = b.get_mut(o..o + 8) {
                            slot.copy_from_slice(&r.addr.to_le_bytes());
                        }
                    }
                }
            }
        })
    }

    /// The record of one execution of row `base` making `made`: the row's own when its
    /// references are the instruction's, else its variant's.
    fn execution(&mut self, base: u32, made: &[MemEvent], extra: u8) -> Result<(), UmtError> {
        let (row, shape) = (&self.rows.rows[base as usize], &self.rows.shapes[base as usize]);
        if made.len() == shape.len() && made.iter().zip(shape.iter()).all(|(r, s)| (r.access, r.size) == *s) {
            return self.instruction(base, row.lc_size, Some(row), made, extra);
        }
        let (v, lc, vrow) = self.variant(base, made)?;
        self.instruction(v, lc, vrow, made, extra)
    }

    /// The records of instruction `i` of the open block, with its references `made` (all
    /// of them, or for a rep string those so far when `last` is false).
    fn insn(&mut self, block: u32, i: usize, made: &[MemEvent], last: bool) -> Result<usize, UmtError> {
        let Some(base) = self.rows.row_of(block, i) else { return Ok(made.len()) };
        if !self.rows.rows[base as usize].rep {
            self.execution(base, made, 0)?;
            return Ok(made.len());
        }
        // A rep string: one record per iteration.
        let per = self.rows.shapes[base as usize].len();
        let mut used = 0;
        if per > 0 {
            while made.len() - used >= per {
                let first = !std::mem::replace(&mut self.open.as_mut().expect("open").iterated, true);
                self.execution(base, &made[used..used + per], if first { FIRST_ITERATION } else { 0 })?;
                used += per;
            }
        }
        if last {
            let rest = &made[used..];
            let iterated = self.open.as_ref().is_some_and(|o| o.iterated);
            if !rest.is_empty() || !iterated {
                let extra = if iterated { 0 } else { FIRST_ITERATION } | if rest.is_empty() && per > 0 { NOT_RUN } else { 0 };
                self.execution(base, rest, extra)?;
            }
            used = made.len();
        }
        Ok(used)
    }

    /// Writes the open block's instructions before `limit` (all its executed ones when
    /// None), the one being gathered with its references.
    fn advance(&mut self, limit: Option<usize>) -> Result<(), UmtError> {
        let Some(o) = self.open.as_ref() else { return Ok(()) };
        let (id, executed) = (o.id, o.executed);
        let limit = limit.unwrap_or(executed).min(executed);
        while let Some(next) = self.open.as_ref().map(|o| o.next).filter(|&n| n < limit) {
            let refs = std::mem::take(&mut self.refs);
            let mine_end = refs.iter().position(|r| r.insn as usize != next).unwrap_or(refs.len());
            self.insn(id, next, &refs[..mine_end], true)?;
            self.refs = refs;
            self.refs.drain(..mine_end);
            let o = self.open.as_mut().expect("open");
            o.next += 1;
            o.iterated = false;
        }
        if limit >= executed {
            self.open = None;
            self.refs.clear();
        }
        Ok(())
    }
}

impl<O: Out> Sink for ChunkExec<'_, O> {
    type Error = UmtError;

    fn block(&mut self, b: &BlockEvent) -> Result<bool, UmtError> {
        self.advance(None)?;
        match b.id.filter(|&id| b.plan.is_some() && self.rows.row_of(id, 0).is_some()) {
            Some(id) => {
                let n = b.plan.map_or(0, |p| p.insns.len());
                self.open = Some(Open { id, executed: (b.executed as usize).min(n), next: 0, iterated: false });
            }
            None => {
                self.unknown_blocks += 1;
                self.gap = true;
            }
        }
        Ok(true)
    }

    fn run(&mut self, run: &Run) -> Result<bool, UmtError> {
        for (b, refs) in run.iter() {
            let whole =
                b.id.and_then(|id| self.rows.block_records(id))
                    .filter(|t| t.records() == b.executed as usize && t.addr_at.len() == refs.len());
            match whole {
                Some(t) => {
                    self.advance(None)?;
                    if let Some(p) = self.pages.as_mut() {
                        for r in refs {
                            p.add(r.addr, r.size);
                        }
                    }
                    let gap = std::mem::take(&mut self.gap);
                    self.out.block(self.thread, gap, t, refs)?;
                }
                None => {
                    if !self.block(&b)? || (!refs.is_empty() && !self.refs(&b, refs)?) {
                        return Ok(false);
                    }
                }
            }
        }
        Ok(true)
    }

    fn refs(&mut self, _b: &BlockEvent, refs: &[MemEvent]) -> Result<bool, UmtError> {
        for r in refs {
            let Some(o) = self.open.as_ref() else { break };
            let i = r.insn as usize;
            if i >= o.executed || i < o.next {
                continue;
            }
            if i != o.next {
                self.advance(Some(i))?;
            }
            self.refs.push(*r);
            // A long rep string: its whole iterations are written as they fill.
            let (id, next) = self.open.as_ref().map_or((0, 0), |o| (o.id, o.next));
            if self.refs.len() >= 1 << 16 && self.rows.row_of(id, next).is_some_and(|r| self.rows.rows[r as usize].rep) {
                let refs = std::mem::take(&mut self.refs);
                let used = self.insn(id, next, &refs, false)?;
                self.refs = refs;
                self.refs.drain(..used);
            }
        }
        Ok(true)
    }

    fn marker(&mut self, _thread: u32, m: Marker) -> Result<bool, UmtError> {
        match m {
            // A window of the thread is a thread of the trace: it begins and ends there.
            Marker::ThreadStart | Marker::WindowStart => {
                self.advance(None)?;
                self.event(THREAD_BEGIN, CONTEXT_LEN, None)?;
            }
            Marker::ThreadEnd | Marker::WindowEnd => {
                self.advance(None)?;
                if !self.app_end {
                    self.event(THREAD_END, END_LEN, Some(0))?;
                }
            }
            // Between two recorded windows of the thread (a thread begins once): the
            // context changed for a reason the trace does not hold.
            Marker::Unrecorded(_) => {
                self.advance(None)?;
                self.event(CONTEXT_RETURN, CONTEXT_LEN, None)?;
            }
            Marker::Signal(n) => {
                self.advance(None)?;
                // Faults are the exceptions of the format; other signals arrive as an
                // asynchronous procedure call would.
                let kind = if matches!(n, 4 | 5 | 7 | 8 | 11) { SIGNAL_FAULT } else { SIGNAL_ASYNC };
                self.event(kind, CONTEXT_LEN, None)?;
            }
            Marker::SignalReturn => {
                self.advance(None)?;
                self.event(CONTEXT_RETURN, CONTEXT_LEN, None)?;
            }
            Marker::Sync { seq, insn, after } => {
                // The record opens the turn numbered by it: the instruction it stands before
                // (or the system call it follows) is the turn's.
                self.advance(insn.map(|k| k as usize + after as usize))?;
                self.out.cut(seq);
            }
            _ => {}
        }
        Ok(true)
    }

    fn finish(&mut self) -> Result<(), UmtError> {
        self.advance(None)
    }
}

/// The counting pass's out: records and bytes, and where turns start.
#[derive(Default)]
pub struct Count {
    pub records: u64,
    pub bytes: u64,
    /// (records before, bytes before, turn number) of each turn the chunk starts.
    pub cuts: Vec<(u64, u64, u64)>,
}

impl Out for Count {
    fn record(&mut self, len: usize, _fill: &mut dyn FnMut(&mut [u8])) -> Result<(), UmtError> {
        self.records += 1;
        self.bytes += len as u64;
        Ok(())
    }

    fn cut(&mut self, key: u64) {
        self.cuts.push((self.records, self.bytes, key));
    }

    fn block(&mut self, _t: u32, _gap: bool, b: &BlockRecords, _refs: &[MemEvent]) -> Result<(), UmtError> {
        self.records += b.records() as u64;
        self.bytes += b.bytes.len() as u64;
        Ok(())
    }
}
