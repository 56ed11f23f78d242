//! Profile statistics: what a run executed, and how large DEP is next to the paper's
//! baseline encodings of the same run (paper section 7, Table 2 and Figures 4-5).
//!
//! [`StatsSink`] consumes the recovered event stream and encodes, per thread, the three
//! baselines the paper compares DEP against, counting their bytes raw and through a
//! streaming zstd (level [`ZSTD_LEVEL`]; past its first megabyte a stream is compressed by
//! zstd's workers on every core, and the size is the same for any number of them) that
//! keeps only its window and jobs in memory:
//!
//! - **BB_pc**: the start address of every executed block, one address each (8 bytes on
//!   64-bit, 4 on 32-bit);
//! - **CF_bit**: one bit per executed conditional branch (1 = taken: the thread's next
//!   block starts at the branch target), packed least significant bit first into bytes,
//!   plus one full address per executed indirect jump, indirect call or return (the
//!   thread's next block). A byte of bits enters the stream when it is full, addresses as
//!   they happen; the raw size is `ceil(bits / 8) + addresses * width`;
//! - **Mem_addr**: the address of every memory reference, one address each.
//!
//! [`profile_sizes`] sums per thread the raw and compressed sizes of DEP_c, DEP_m and the
//! truth stream from the chunk headers, and [`Stats::add_profile_sizes`] puts the two side
//! by side with the ratios the paper reports. Each DEP section is compressed per chunk by
//! the collector, each baseline as one stream per thread here.
//!
//! [`compute`], behind `dep stats`, takes the counts chunk-parallel from [`Tally`], whose
//! branch counts come from the edge tracker `dep edges` uses, and only the compressed sizes
//! from a [`StatsSink`] per thread (threads in parallel), which must give the same raw
//! sizes.
//!
//! Branch outcomes need the block's last instruction: recovered events carry the block
//! plan; truth replay does not, so give the sink the profile's plans
//! ([`StatsSink::with_plans`]). A branch is resolved by the next block of its thread at the
//! same signal depth: a signal saves the pending branch, its return restores it. A branch
//! never followed by a block (the thread ended, a handler returned right after it) still
//! costs its bit or address, written as not taken or address 0, and is counted as
//! unresolved. Truth replay has no signal markers, so there a handler's first block
//! resolves the branch it interrupted.

mod tally;

pub use tally::Tally;

use crate::driver::Recovery;
use crate::edges::{Edge, EdgeKind, Edges};
use crate::error::RecoverError;
use crate::events::{BlockEvent, Marker, MemEvent, Source};
use crate::plans::Plans;
use crate::sink::Sink;
use dep_profile::container::{Profile, ProfileError, Section};
use dep_profile::semantics::Access;
use dep_profile::Width;
use serde::Serialize;
use std::io::{self, Write};

/// The zstd level the baselines are compressed with.
pub const ZSTD_LEVEL: i32 = 3;

/// The paper's Table 2 averages (SPECint 2000, uncompressed).
pub const PAPER_DEP_C_TO_BB_PC: f64 = 0.6033;
pub const PAPER_CF_BIT_TO_BB_PC: f64 = 0.2323;
pub const PAPER_DEP_M_TO_MEM_ADDR: f64 = 0.4779;

/// Bytes staged before they are handed to the compressor.
const STAGE: usize = 1 << 16;
/// Bytes staged before the compressor is made: a stream that ends shorter is compressed on
/// the calling thread, one that grows longer by zstd's workers. Starting workers costs
/// more than compressing a short stream (3,000 threads' streams took 2.7 times as long).
/// Which way a stream goes depends on its length alone, so its size is still the same on
/// any machine.
const FIRST_STAGE: usize = 1 << 20;

/// A writer that only counts what it is given.
#[derive(Debug, Default)]
struct CountingWriter(u64);

impl Write for CountingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One baseline stream of one thread: counted raw, compressed on the fly.
struct Stream {
    raw: u64,
    compressed: u64,
    compress: bool,
    /// zstd's worker threads: at least one, so the size is the same for any number (zstd's
    /// multithreaded format depends on its job size, not on its workers).
    workers: u32,
    stage: Vec<u8>,
    enc: Option<zstd::stream::Encoder<'static, CountingWriter>>,
    keep: Option<Vec<u8>>,
}

impl Stream {
    fn new(compress: bool, keep: bool, workers: u32) -> Stream {
        Stream { raw: 0, compressed: 0, compress, workers: workers.max(1), stage: Vec::new(), enc: None, keep: keep.then(Vec::new) }
    }

    #[inline]
    fn push(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.raw += bytes.len() as u64;
        if let Some(k) = &mut self.keep {
            k.extend_from_slice(bytes);
        }
        if self.compress {
            self.stage.extend_from_slice(bytes);
            if self.stage.len() >= if self.enc.is_some() { STAGE } else { FIRST_STAGE } {
                self.drain()?;
            }
        }
        Ok(())
    }

    fn drain(&mut self) -> io::Result<()> {
        if self.stage.is_empty() {
            return Ok(());
        }
        if self.enc.is_none() {
            let mut enc = zstd::stream::Encoder::new(CountingWriter::default(), ZSTD_LEVEL)?;
            if self.stage.len() >= FIRST_STAGE {
                enc.multithread(self.workers)?;
            }
            self.enc = Some(enc);
        }
        self.enc.as_mut().unwrap().write_all(&self.stage)?;
        self.stage.clear();
        Ok(())
    }

    /// Ends the zstd frame and frees the compressor; later bytes start a new frame.
    fn finish(&mut self) -> io::Result<()> {
        self.drain()?;
        if let Some(e) = self.enc.take() {
            self.compressed += e.finish()?.0;
        }
        self.stage = Vec::new();
        Ok(())
    }

    fn size(&self) -> Size {
        Size { raw: self.raw, compressed: self.compress.then_some(self.compressed) }
    }
}

/// What the sink knows about one thread.
struct ThreadState {
    thread: u32,
    counts: ThreadStats,
    bb_pc: Stream,
    cf_bit: Stream,
    mem_addr: Stream,
    bits: u8,
    nbits: u8,
    edges: Edges,
    /// Edges reported by `edges`, waiting to be counted.
    pending: Vec<Edge>,
    /// The number of the thread's next instruction, unrecorded ones counted.
    at: u64,
    /// Where the recorded stretch under way started, once a block of it was seen.
    open: Option<u64>,
}

impl ThreadState {
    fn new(thread: u32, compress: bool, keep: bool, workers: u32) -> ThreadState {
        ThreadState {
            thread,
            counts: ThreadStats { thread: Some(thread), ..Default::default() },
            bb_pc: Stream::new(compress, keep, workers),
            cf_bit: Stream::new(compress, keep, workers),
            mem_addr: Stream::new(compress, keep, workers),
            bits: 0,
            nbits: 0,
            edges: Edges::default(),
            pending: Vec::new(),
            at: 0,
            open: None,
        }
    }

    #[inline]
    fn bit(&mut self, taken: bool) -> io::Result<()> {
        self.counts.conditional_branches += 1;
        self.counts.taken_branches += taken as u64;
        self.bits |= (taken as u8) << self.nbits;
        self.nbits += 1;
        if self.nbits == 8 {
            self.cf_bit.push(&[self.bits])?;
            self.bits = 0;
            self.nbits = 0;
        }
        Ok(())
    }

    #[inline]
    fn target(&mut self, addr: u64, wb: usize) -> io::Result<()> {
        self.counts.indirect_branches += 1;
        self.cf_bit.push(&addr.to_le_bytes()[..wb])
    }

    /// CF_bit's share of the edges reported since the last call: a bit per conditional
    /// branch, a target per indirect one (0 where it was never seen).
    fn count_edges(&mut self, wb: usize) -> io::Result<()> {
        let mut edges = std::mem::take(&mut self.pending);
        for e in edges.drain(..) {
            self.counts.unresolved_branches += e.unresolved() as u64;
            match e.kind {
                EdgeKind::Taken => self.bit(true)?,
                EdgeKind::NotTaken => self.bit(false)?,
                EdgeKind::IndirectJump | EdgeKind::IndirectCall | EdgeKind::Return => self.target(e.to.unwrap_or(0), wb)?,
                _ => {}
            }
        }
        self.pending = edges;
        Ok(())
    }

    /// Gives up every exit still waiting and closes the streams (the thread ended).
    fn close(&mut self, wb: usize) -> io::Result<()> {
        let pending = &mut self.pending;
        self.edges.end(|e| pending.push(e));
        self.count_edges(wb)?;
        if self.nbits > 0 {
            self.cf_bit.push(&[self.bits])?;
            self.bits = 0;
            self.nbits = 0;
        }
        self.bb_pc.finish()?;
        self.cf_bit.finish()?;
        self.mem_addr.finish()
    }

    fn stats(&self) -> ThreadStats {
        let mut s = self.counts.clone();
        if let Some(start) = self.open.filter(|_| s.unrecorded > 0) {
            s.windows.push([start, self.at]);
        }
        s.bb_pc = self.bb_pc.size();
        s.cf_bit = self.cf_bit.size();
        s.mem_addr = self.mem_addr.size();
        s.refs = s.reads + s.writes;
        s.compute_ratios();
        s
    }
}

/// The raw baseline streams of one thread, kept when [`StatsSink::keep_streams`] asks.
#[derive(Clone, Copy, Debug)]
pub struct RawStreams<'a> {
    pub bb_pc: &'a [u8],
    pub cf_bit: &'a [u8],
    pub mem_addr: &'a [u8],
}

/// A [`Sink`] computing [`Stats`] from the recovered (or replayed) event stream.
pub struct StatsSink<'p> {
    width: Width,
    compress: bool,
    /// zstd's worker threads per stream.
    workers: u32,
    keep: bool,
    plans: Option<&'p Plans>,
    threads: Vec<ThreadState>,
    /// Index in `threads` of the thread of the last event.
    last: usize,
}

impl<'p> StatsSink<'p> {
    /// A sink for a program of this address width, compressing the baselines.
    pub fn new(width: Width) -> StatsSink<'p> {
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        StatsSink { width, compress: true, workers, keep: false, plans: None, threads: Vec::new(), last: 0 }
    }

    /// zstd's worker threads for each stream (at least one; the sizes are the same for
    /// any number): all cores by default.
    pub fn compress_workers(mut self, n: u32) -> Self {
        self.workers = n.max(1);
        self
    }

    /// Whether to compress the baselines (without, only raw sizes are known, much faster).
    pub fn compress(mut self, on: bool) -> Self {
        self.compress = on;
        self
    }

    /// Also keeps the raw baseline streams in memory (for tests and small runs).
    pub fn keep_streams(mut self, on: bool) -> Self {
        self.keep = on;
        self
    }

    /// Looks up blocks that arrive without a plan (truth replay), by address and version.
    pub fn with_plans(mut self, plans: &'p Plans) -> Self {
        self.plans = Some(plans);
        self
    }

    /// The kept raw streams of a thread, if [`keep_streams`](Self::keep_streams) was on.
    /// The last partial byte of CF_bit appears once the thread has ended.
    pub fn streams(&self, thread: u32) -> Option<RawStreams<'_>> {
        let t = self.threads.iter().find(|t| t.thread == thread)?;
        Some(RawStreams { bb_pc: t.bb_pc.keep.as_deref()?, cf_bit: t.cf_bit.keep.as_deref()?, mem_addr: t.mem_addr.keep.as_deref()? })
    }

    #[inline]
    fn state(&mut self, thread: u32) -> &mut ThreadState {
        if self.threads.get(self.last).is_none_or(|t| t.thread != thread) {
            self.last = match self.threads.iter().position(|t| t.thread == thread) {
                Some(i) => i,
                None => {
                    self.threads.push(ThreadState::new(thread, self.compress, self.keep, self.workers));
                    self.threads.len() - 1
                }
            };
        }
        &mut self.threads[self.last]
    }

    /// Closes thread `thread`'s streams and gives their sizes (BB_pc, CF_bit, Mem_addr):
    /// nothing for a thread that had no event.
    fn sizes(&mut self, thread: u32) -> io::Result<(Size, Size, Size)> {
        let wb = self.width.bytes();
        match self.threads.iter_mut().find(|t| t.thread == thread) {
            Some(t) => {
                t.close(wb)?;
                Ok((t.bb_pc.size(), t.cf_bit.size(), t.mem_addr.size()))
            }
            None => {
                let none = Size { raw: 0, compressed: self.compress.then_some(0) };
                Ok((none, none, none))
            }
        }
    }

    /// Closes every thread's streams and returns the statistics, threads in index order.
    /// DEP sizes are absent until [`Stats::add_profile_sizes`].
    pub fn into_stats(mut self) -> io::Result<Stats> {
        let wb = self.width.bytes();
        for t in &mut self.threads {
            t.close(wb)?;
        }
        self.threads.sort_by_key(|t| t.thread);
        let threads: Vec<ThreadStats> = self.threads.iter().map(ThreadState::stats).collect();
        let mut s = Stats {
            width: self.width.bits(),
            zstd_level: ZSTD_LEVEL,
            threads,
            total: ThreadStats::default(),
            paper: PaperAverages::default(),
        };
        s.compute_total();
        Ok(s)
    }
}

impl Sink for StatsSink<'_> {
    type Error = RecoverError;

    #[inline]
    fn block(&mut self, b: &BlockEvent) -> Result<bool, Self::Error> {
        let width = self.width;
        let wb = width.bytes();
        let plans = self.plans;
        let plan = b.plan.or_else(|| plans.and_then(|p| p.get(b.addr, b.version).ok()));
        let t = self.state(b.thread);
        let pending = &mut t.pending;
        t.edges.block(b.addr, plan, b.interrupted, |e| pending.push(e));
        t.count_edges(wb)?;
        t.counts.blocks += 1;
        t.counts.instructions += b.executed as u64;
        t.open.get_or_insert(t.at);
        t.at = t.at.saturating_add(b.executed as u64);
        t.counts.interrupted_blocks += b.interrupted as u64;
        t.counts.blocks_without_plan += plan.is_none() as u64;
        t.bb_pc.push(&b.addr.to_le_bytes()[..wb])?;
        Ok(true)
    }

    #[inline]
    fn refs(&mut self, b: &BlockEvent, refs: &[MemEvent]) -> Result<bool, Self::Error> {
        let wb = self.width.bytes();
        let t = self.state(b.thread);
        for m in refs {
            match m.access {
                Access::Read => t.counts.reads += 1,
                Access::Write => t.counts.writes += 1,
            }
            t.mem_addr.push(&m.addr.to_le_bytes()[..wb])?;
        }
        Ok(true)
    }

    fn marker(&mut self, thread: u32, m: Marker) -> Result<bool, Self::Error> {
        let wb = self.width.bytes();
        let t = self.state(thread);
        let pending = &mut t.pending;
        match m {
            Marker::Signal(_) => {
                t.counts.signals += 1;
                t.edges.signal(|e| pending.push(e));
                t.count_edges(wb)?;
            }
            Marker::SignalReturn => {
                t.edges.signal_return(|e| pending.push(e));
                t.count_edges(wb)?;
            }
            Marker::ThreadEnd => t.close(wb)?,
            Marker::Unrecorded(n) => {
                t.edges.gap(|e| pending.push(e));
                t.count_edges(wb)?;
                if let Some(start) = t.open.take() {
                    t.counts.windows.push([start, t.at]);
                }
                t.at = t.at.saturating_add(n);
                t.counts.unrecorded = t.counts.unrecorded.saturating_add(n);
            }
            // Records about synchronisation, calls and system calls change no counts here.
            _ => {}
        }
        Ok(true)
    }
}

/// A size in bytes, raw and zstd-compressed (`None` when not compressed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Size {
    pub raw: u64,
    pub compressed: Option<u64>,
}

impl Size {
    fn add(self, o: Size) -> Size {
        Size { raw: self.raw + o.raw, compressed: self.compressed.zip(o.compressed).map(|(a, b)| a + b) }
    }
}

/// How one encoding compares with another.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Ratio {
    /// Raw size over raw size (the paper's Table 2 percentages).
    pub raw: f64,
    /// Compressed size over compressed size.
    pub compressed: Option<f64>,
    /// Compressed size over the baseline's raw size (the paper's Figures 4 and 5).
    pub compressed_to_raw_baseline: Option<f64>,
}

impl Ratio {
    fn of(a: Size, b: Size) -> Option<Ratio> {
        if b.raw == 0 {
            return None;
        }
        let div = |x: u64, y: u64| (y != 0).then(|| x as f64 / y as f64);
        Some(Ratio {
            raw: a.raw as f64 / b.raw as f64,
            compressed: a.compressed.zip(b.compressed).and_then(|(x, y)| div(x, y)),
            compressed_to_raw_baseline: a.compressed.map(|x| x as f64 / b.raw as f64),
        })
    }
}

/// The ratios of paper section 7.2.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Ratios {
    /// DEP_c / BB_pc.
    pub dep_c_to_bb_pc: Option<Ratio>,
    /// CF_bit / BB_pc.
    pub cf_bit_to_bb_pc: Option<Ratio>,
    /// DEP_m / Mem_addr.
    pub dep_m_to_mem_addr: Option<Ratio>,
}

/// Statistics of one thread, or of all (`thread: None`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ThreadStats {
    pub thread: Option<u32>,
    pub instructions: u64,
    pub blocks: u64,
    /// Blocks a signal interrupted (they count their executed instructions only).
    pub interrupted_blocks: u64,
    /// Memory references: reads plus writes.
    pub refs: u64,
    pub reads: u64,
    pub writes: u64,
    pub signals: u64,
    /// Instructions the thread ran that were not recorded (`dep record` windows).
    pub unrecorded: u64,
    /// The recorded windows of the thread's instructions (first, one past the last), when
    /// some were not recorded.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<[u64; 2]>,
    /// Executed conditional branches (CF_bit's bits).
    pub conditional_branches: u64,
    pub taken_branches: u64,
    /// Executed indirect jumps, indirect calls and returns (CF_bit's addresses).
    pub indirect_branches: u64,
    /// Branches with no following block to tell their outcome (still counted above).
    pub unresolved_branches: u64,
    /// Blocks whose instructions were unknown: CF_bit does not cover their branches.
    pub blocks_without_plan: u64,
    pub bb_pc: Size,
    pub cf_bit: Size,
    pub mem_addr: Size,
    /// DEP_c as stored in the profile, summed over the thread's chunks.
    pub dep_c: Option<Size>,
    /// DEP_m as stored in the profile.
    pub dep_m: Option<Size>,
    /// The truth stream as stored in the profile (absent or empty without `--truth`).
    pub truth: Option<Size>,
    pub chunks: Option<u64>,
    pub ratios: Ratios,
}

impl ThreadStats {
    fn compute_ratios(&mut self) {
        self.ratios = Ratios {
            dep_c_to_bb_pc: self.dep_c.and_then(|d| Ratio::of(d, self.bb_pc)),
            cf_bit_to_bb_pc: Ratio::of(self.cf_bit, self.bb_pc),
            dep_m_to_mem_addr: self.dep_m.and_then(|d| Ratio::of(d, self.mem_addr)),
        };
    }

    fn add(&mut self, o: &ThreadStats) {
        self.instructions += o.instructions;
        self.blocks += o.blocks;
        self.interrupted_blocks += o.interrupted_blocks;
        self.refs += o.refs;
        self.reads += o.reads;
        self.writes += o.writes;
        self.signals += o.signals;
        self.unrecorded = self.unrecorded.saturating_add(o.unrecorded);
        self.conditional_branches += o.conditional_branches;
        self.taken_branches += o.taken_branches;
        self.indirect_branches += o.indirect_branches;
        self.unresolved_branches += o.unresolved_branches;
        self.blocks_without_plan += o.blocks_without_plan;
        self.bb_pc = self.bb_pc.add(o.bb_pc);
        self.cf_bit = self.cf_bit.add(o.cf_bit);
        self.mem_addr = self.mem_addr.add(o.mem_addr);
        let opt = |a: Option<Size>, b: Option<Size>| match (a, b) {
            (Some(a), Some(b)) => Some(a.add(b)),
            (a, b) => a.or(b),
        };
        self.dep_c = opt(self.dep_c, o.dep_c);
        self.dep_m = opt(self.dep_m, o.dep_m);
        self.truth = opt(self.truth, o.truth);
        self.chunks = match (self.chunks, o.chunks) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }
}

/// The paper's averages, for reference beside the measured ratios.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PaperAverages {
    pub dep_c_to_bb_pc: f64,
    pub cf_bit_to_bb_pc: f64,
    pub dep_m_to_mem_addr: f64,
}

impl Default for PaperAverages {
    fn default() -> Self {
        PaperAverages {
            dep_c_to_bb_pc: PAPER_DEP_C_TO_BB_PC,
            cf_bit_to_bb_pc: PAPER_CF_BIT_TO_BB_PC,
            dep_m_to_mem_addr: PAPER_DEP_M_TO_MEM_ADDR,
        }
    }
}

/// Statistics of a run: per thread and in total.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stats {
    /// Address width in bits.
    pub width: u8,
    pub zstd_level: i32,
    pub threads: Vec<ThreadStats>,
    pub total: ThreadStats,
    pub paper: PaperAverages,
}

/// The stored sizes of one thread's DEP sections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProfileSizes {
    pub thread: u32,
    pub chunks: u64,
    pub dep_c: Size,
    pub dep_m: Size,
    pub truth: Size,
}

/// Sums per thread the raw and compressed sizes of DEP_c, DEP_m and truth from the chunk
/// headers (chunk checksums are verified).
pub fn profile_sizes(p: &Profile) -> Result<Vec<ProfileSizes>, ProfileError> {
    let mut out = Vec::with_capacity(p.threads.len());
    for t in &p.threads {
        let zero = Size { raw: 0, compressed: Some(0) };
        let mut s = ProfileSizes { thread: t.index, chunks: 0, dep_c: zero, dep_m: zero, truth: zero };
        for c in &t.chunks {
            let v = p.chunk(c)?;
            let size = |sec| {
                let (raw, comp) = v.lens(sec);
                Size { raw, compressed: Some(comp) }
            };
            s.chunks += 1;
            s.dep_c = s.dep_c.add(size(Section::Tags));
            s.dep_m = s.dep_m.add(size(Section::Values));
            s.truth = s.truth.add(size(Section::Truth));
        }
        out.push(s);
    }
    Ok(out)
}

impl Stats {
    /// Puts the stored DEP sizes beside the baselines; threads without events are added.
    pub fn add_profile_sizes(&mut self, sizes: &[ProfileSizes]) {
        for s in sizes {
            let i = match self.threads.iter().position(|t| t.thread == Some(s.thread)) {
                Some(i) => i,
                None => {
                    let compressed = self.threads.first().map_or(Some(0), |t| t.bb_pc.compressed.map(|_| 0));
                    let empty = Size { raw: 0, compressed };
                    self.threads.push(ThreadStats {
                        thread: Some(s.thread),
                        bb_pc: empty,
                        cf_bit: empty,
                        mem_addr: empty,
                        ..Default::default()
                    });
                    self.threads.len() - 1
                }
            };
            let t = &mut self.threads[i];
            t.dep_c = Some(s.dep_c);
            t.dep_m = Some(s.dep_m);
            t.truth = Some(s.truth);
            t.chunks = Some(s.chunks);
            t.compute_ratios();
        }
        self.threads.sort_by_key(|t| t.thread);
        self.compute_total();
    }

    fn compute_total(&mut self) {
        let mut total = ThreadStats::default();
        match self.threads.first() {
            Some(first) => {
                total.bb_pc.compressed = first.bb_pc.compressed.map(|_| 0);
                total.cf_bit.compressed = total.bb_pc.compressed;
                total.mem_addr.compressed = total.bb_pc.compressed;
            }
            None => {
                total.bb_pc.compressed = Some(0);
                total.cf_bit.compressed = Some(0);
                total.mem_addr.compressed = Some(0);
            }
        }
        for t in &self.threads {
            total.add(t);
        }
        total.thread = None;
        // One thread's windows are the run's.
        if let [only] = &self.threads[..] {
            total.windows = only.windows.clone();
        }
        total.compute_ratios();
        self.total = total;
    }

    /// The statistics as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("statistics serialize")
    }
}

/// The statistics of a whole profile, with the stored DEP sizes: the counts chunk-parallel
/// ([`Tally`]); with `compress`, the baselines' compressed sizes from each thread's streams
/// in order ([`StatsSink`]), threads in parallel and each stream compressed on all cores.
pub fn compute(rec: &Recovery, source: Source, compress: bool) -> Result<Stats, RecoverError> {
    let width = rec.profile.width;
    let wb = width.bytes() as u64;
    let tallies = rec.events(source).merged(|_| Tally::new(&rec.plans))?;
    let mut streams = match compress {
        true => Some(rec.events(source).per_thread(|_| StatsSink::new(width).with_plans(&rec.plans))?),
        false => None,
    };
    let mut threads = Vec::new();
    for (t, tally) in tallies.iter().enumerate() {
        // As a sequential count lists them: the threads with any event.
        if !tally.seen {
            continue;
        }
        let (blocks, instructions) = tally.blocks();
        let (unrecorded, windows) = tally.windows();
        let (conditional_branches, taken_branches, indirect_branches, unresolved_branches) = tally.branches();
        let refs = tally.reads + tally.writes;
        let raw = |n: u64| Size { raw: n, compressed: None };
        let mut s = ThreadStats {
            thread: Some(t as u32),
            instructions,
            blocks,
            interrupted_blocks: tally.interrupted_blocks,
            refs,
            reads: tally.reads,
            writes: tally.writes,
            signals: tally.signals,
            unrecorded,
            windows,
            conditional_branches,
            taken_branches,
            indirect_branches,
            unresolved_branches,
            blocks_without_plan: tally.blocks_without_plan,
            // A bit per conditional branch (bytes filled in turn, the last one partly) and an
            // address per indirect one.
            bb_pc: raw(blocks * wb),
            cf_bit: raw(conditional_branches.div_ceil(8) + indirect_branches * wb),
            mem_addr: raw(refs * wb),
            ..Default::default()
        };
        if let Some(streams) = &mut streams {
            let sizes = streams[t].sizes(t as u32).map_err(RecoverError::Output)?;
            if [sizes.0.raw, sizes.1.raw, sizes.2.raw] != [s.bb_pc.raw, s.cf_bit.raw, s.mem_addr.raw] {
                return Err(RecoverError::Output(io::Error::other(format!(
                    "thread {t}: the baseline streams hold {:?} raw bytes, the counts make {:?}",
                    [sizes.0.raw, sizes.1.raw, sizes.2.raw],
                    [s.bb_pc.raw, s.cf_bit.raw, s.mem_addr.raw]
                ))));
            }
            (s.bb_pc, s.cf_bit, s.mem_addr) = sizes;
        }
        s.compute_ratios();
        threads.push(s);
    }
    let mut stats =
        Stats { width: width.bits(), zstd_level: ZSTD_LEVEL, threads, total: ThreadStats::default(), paper: PaperAverages::default() };
    stats.compute_total();
    stats.add_profile_sizes(&profile_sizes(rec.profile)?);
    Ok(stats)
}

/// `1234567` as `1,234,567`.
fn grouped(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn pct(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), |r| format!("{:.2}%", r * 100.0))
}

fn render_thread(out: &mut String, t: &ThreadStats, paper: &PaperAverages) {
    use std::fmt::Write as _;
    let title = match t.thread {
        Some(i) => format!("thread {i}"),
        None => "total".into(),
    };
    let _ = writeln!(
        out,
        "{title}: {} instructions, {} blocks, {} references ({} reads, {} writes)",
        grouped(t.instructions),
        grouped(t.blocks),
        grouped(t.refs),
        grouped(t.reads),
        grouped(t.writes)
    );
    let mut notes = vec![
        format!("{} conditional branches ({} taken)", grouped(t.conditional_branches), grouped(t.taken_branches)),
        format!("{} indirect branches", grouped(t.indirect_branches)),
    ];
    if t.signals > 0 || t.interrupted_blocks > 0 {
        notes.push(format!("{} signals, {} interrupted blocks", grouped(t.signals), grouped(t.interrupted_blocks)));
    }
    if t.unresolved_branches > 0 {
        notes.push(format!("{} unresolved", grouped(t.unresolved_branches)));
    }
    if t.blocks_without_plan > 0 {
        notes.push(format!("{} blocks without code: CF_bit incomplete", grouped(t.blocks_without_plan)));
    }
    if let Some(c) = t.chunks {
        notes.push(format!("{} chunks", grouped(c)));
    }
    let _ = writeln!(out, "  {}", notes.join(", "));
    if t.unrecorded > 0 {
        const SHOWN: usize = 8;
        let mut w: Vec<String> = t.windows.iter().take(SHOWN).map(|[a, b]| format!("{a}..{b}")).collect();
        if t.windows.len() > SHOWN {
            w.push(format!("and {} more (--json lists them)", t.windows.len() - SHOWN));
        }
        let shown = if w.is_empty() { String::new() } else { format!("; recorded instructions {}", w.join(", ")) };
        let _ = writeln!(out, "  {} instructions not recorded (dep record windows){shown}", grouped(t.unrecorded));
    }
    let _ = writeln!(
        out,
        "  {:<9} {:>16} {:>16}  {:>12} {:>12} {:>12}  {:>8}",
        "profile", "raw bytes", "zstd bytes", "raw ratio", "zstd ratio", "zstd/raw", "paper"
    );
    let row = |out: &mut String, name: &str, s: Option<Size>, r: Option<Ratio>, base: &str, paper: Option<f64>| {
        let Some(s) = s else { return };
        let ratio = |v: Option<f64>| if r.is_some() { pct(v) } else { String::new() };
        let line = format!(
            "  {:<9} {:>16} {:>16}  {:>12} {:>12} {:>12}  {:>8}{}",
            name,
            grouped(s.raw),
            s.compressed.map_or_else(|| "-".into(), grouped),
            ratio(r.map(|r| r.raw)),
            ratio(r.and_then(|r| r.compressed)),
            ratio(r.and_then(|r| r.compressed_to_raw_baseline)),
            paper.map_or_else(String::new, |p| format!("{:.2}%", p * 100.0)),
            if r.is_some() { format!("  of {base}") } else { String::new() },
        );
        let _ = writeln!(out, "{}", line.trim_end());
    };
    row(out, "BB_pc", Some(t.bb_pc), None, "", None);
    row(out, "DEP_c", t.dep_c, t.ratios.dep_c_to_bb_pc, "BB_pc", Some(paper.dep_c_to_bb_pc));
    row(out, "CF_bit", Some(t.cf_bit), t.ratios.cf_bit_to_bb_pc, "BB_pc", Some(paper.cf_bit_to_bb_pc));
    row(out, "Mem_addr", Some(t.mem_addr), None, "", None);
    row(out, "DEP_m", t.dep_m, t.ratios.dep_m_to_mem_addr, "Mem_addr", Some(paper.dep_m_to_mem_addr));
    if let Some(tr) = t.truth.filter(|s| s.raw > 0) {
        row(out, "truth", Some(tr), None, "", None);
    }
}

/// The statistics for humans: a table per thread (when there are several) and the total.
pub fn render_text(s: &Stats) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{}-bit program; baselines per paper section 7 ({}-byte addresses), zstd level {}; \
         paper column: Table 2 averages (SPECint 2000, raw)\n",
        s.width,
        s.width / 8,
        s.zstd_level
    ));
    if s.threads.len() > 1 {
        for t in &s.threads {
            out.push('\n');
            render_thread(&mut out, t, &s.paper);
        }
    }
    out.push('\n');
    render_thread(&mut out, &s.total, &s.paper);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouping_and_percentages() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(1234567), "1,234,567");
        assert_eq!(pct(Some(0.6033)), "60.33%");
        assert_eq!(pct(None), "-");
    }

    #[test]
    fn stream_counts_raw_and_compresses_repetition() {
        let mut s = Stream::new(true, false, 1);
        for i in 0..100_000u64 {
            s.push(&(0x40_0000 + (i % 16) * 8).to_le_bytes()).unwrap();
        }
        s.finish().unwrap();
        assert_eq!(s.raw, 800_000);
        assert!(s.compressed > 0 && s.compressed < s.raw / 10, "{}", s.compressed);
        // An empty stream has no frame at all.
        let mut e = Stream::new(true, false, 1);
        e.finish().unwrap();
        assert_eq!(e.size(), Size { raw: 0, compressed: Some(0) });
        assert_eq!(Stream::new(false, false, 1).size(), Size { raw: 0, compressed: None });
    }

    /// The compressed size does not depend on how many workers zstd has: `dep stats` gives
    /// the same figures on any machine. 24 MB is several of zstd's jobs at this level.
    #[test]
    fn compressed_size_is_the_same_for_any_number_of_workers() {
        let sizes: Vec<u64> = [1, 2, 3, 8]
            .iter()
            .map(|&workers| {
                let mut s = Stream::new(true, false, workers);
                let mut x = 0x9e37_79b9_7f4a_7c15u64;
                for _ in 0..3 << 20 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Addresses in a few pages: compressible, but not trivially.
                    s.push(&(0x7f00_0000_0000 + (x & 0x3fff8)).to_le_bytes()).unwrap();
                }
                s.finish().unwrap();
                assert_eq!(s.raw, 24 << 20);
                s.compressed
            })
            .collect();
        assert!(sizes.windows(2).all(|w| w[0] == w[1]), "{sizes:?}");
        assert!(sizes[0] < 24 << 20);
    }

    #[test]
    fn ratios() {
        let a = Size { raw: 60, compressed: Some(10) };
        let b = Size { raw: 100, compressed: Some(20) };
        let r = Ratio::of(a, b).unwrap();
        assert_eq!((r.raw, r.compressed, r.compressed_to_raw_baseline), (0.6, Some(0.5), Some(0.1)));
        assert!(Ratio::of(a, Size::default()).is_none());
    }
}
