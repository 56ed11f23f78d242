//! A software reference collector: records DEP exactly as the DynamoRIO client must, for a
//! given path through real code with synthetic register values, plus the truth stream of
//! the same run. It is the executable specification that recovery is tested against, and
//! the source of profiles for benchmarks that must run without DynamoRIO.

use crate::blocks::BlockPlan;
use crate::container::{BlockEntry, ChunkData, EndInfo, Metadata, ProfileError, ProfileWriter, ThreadEvent, VERSION};
use crate::regs::{Reg, RegSet, NUM_REGS};
use crate::semantics::{Access, RegEffect, Semantics, Special};
use crate::tags::{Escape, TagEncoder};
use crate::truth::{TruthKind, TruthRecord};
use crate::values::ValueWriter;
use crate::{Machine, Width};
use std::io::Write;

/// A small deterministic generator (xorshift64*), so simulations are reproducible by seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// What happens at one point of a simulated thread's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathStep {
    /// Execute block `i` of the code set.
    Block(usize),
    /// Execute block `i` up to instruction `k`, which faults; a signal handler follows.
    Interrupt(usize, u16),
    /// An asynchronous signal is delivered between blocks.
    Signal(u16),
    /// The handler returns.
    SignalReturn,
    /// The collector hands off its buffers: a new chunk starts.
    Flush,
}

/// One simulated thread's output.
#[derive(Default)]
struct ThreadOut {
    chunks: Vec<(u64, u32, [u64; NUM_REGS], Vec<u8>, Vec<u8>, Vec<u8>)>,
}

/// A simulated collector for one thread.
struct SimThread<'a> {
    width: Width,
    plans: &'a [BlockPlan],
    decisions: &'a [crate::blocks::Decisions],
    rng: Rng,
    /// Write the collector's records of blocks' instructions (sync, call, return), at random.
    records: bool,
    vals: [u64; NUM_REGS],
    /// The collector's shadow: bit n set = RECORDED.
    recorded: u32,
    tags: TagEncoder,
    values: ValueWriter,
    truth: Vec<u8>,
    chunk_start: (u64, u32, [u64; NUM_REGS]),
    seq: u32,
    /// This thread's index and the number of threads, which make its sync record numbers.
    thread: (u64, u64),
    /// The last sync record's number, over the thread count.
    sync: u64,
    /// The numbers of the sync records written.
    syncs: Vec<u64>,
    out: ThreadOut,
}

impl SimThread<'_> {
    fn mask(&self) -> u64 {
        if self.width == Width::W32 {
            0xffff_ffff
        } else {
            u64::MAX
        }
    }

    fn random_value(&mut self) -> u64 {
        // Mostly plausible pointers, sometimes anything.
        let v = match self.rng.below(4) {
            0 => self.rng.next(),
            1 => 0x7ffc_0000_0000 + self.rng.below(1 << 20) * 8,
            _ => 0x5555_0000_0000 + self.rng.below(1 << 24),
        };
        v & self.mask()
    }

    fn flush(&mut self) {
        let (hi, status, regs) = self.chunk_start;
        let tags = std::mem::replace(&mut self.tags, TagEncoder::new(self.width, 0));
        self.out.chunks.push((
            hi,
            status,
            regs,
            tags.to_bytes(),
            std::mem::replace(&mut self.values, ValueWriter::new(self.width)).into_bytes(),
            std::mem::take(&mut self.truth),
        ));
        self.seq += 1;
        // The next chunk starts with the current shadow state and register context.
        self.chunk_start = (tags.hi(), self.recorded, self.vals);
        self.tags = TagEncoder::new(self.width, tags.hi());
        self.tags.escape(Escape::ChunkStart { seq: self.seq });
    }

    /// The number of a new sync record: increasing along the thread and distinct across
    /// threads, as the collector's global counter gives them, so that threads interleave.
    fn sync_seq(&mut self) -> u64 {
        self.sync += 1 + self.rng.below(16);
        let seq = self.sync * self.thread.1 + self.thread.0;
        self.syncs.push(seq);
        seq
    }

    fn truth(&mut self, kind: TruthKind, size: u32, pc: u64, addr: u64) {
        TruthRecord { kind, size, pc, addr }.write(&mut self.truth);
    }

    fn expire_all(&mut self) {
        self.recorded = 0;
        for r in Reg::all() {
            self.vals[r.index()] = self.random_value();
        }
    }

    /// Runs block `b`, or its first `stop + 1` instructions when a fault interrupts it.
    fn block(&mut self, b: usize, stop: Option<u16>) {
        let plan = &self.plans[b];
        let decisions = &self.decisions[b];
        self.tags.block(plan.addr);
        self.truth(TruthKind::Block, plan.insns.len() as u32, plan.addr, 0);
        let mask = self.mask();
        let mut step_i = 0;
        for (k, insn) in plan.insns.iter().enumerate() {
            if stop.is_some_and(|s| k > s as usize) {
                break;
            }
            if step_i < plan.steps.len() && plan.steps[step_i].insn as usize == k {
                let d = decisions.steps[step_i];
                // The collector's inline code: unconditional records, then shadow checks,
                // together in ascending register order.
                let step = &plan.steps[step_i];
                let unrecorded = |r: Reg| self.recorded & (1 << step.shadow_of(r).index()) == 0;
                let record: RegSet = d.always.union(d.check.iter().filter(|&r| unrecorded(r)).collect());
                for r in step.used.iter() {
                    if record.contains(r) {
                        self.values.push(self.vals[r.index()]);
                    }
                }
                step_i += 1;
                match insn.special {
                    Special::None => {
                        for m in &insn.refs {
                            let a = m.addr.eval(&self.vals) & mask;
                            let kind = if m.access == Access::Read { TruthKind::Read } else { TruthKind::Write };
                            self.truth(kind, m.size, insn.pc, a);
                        }
                    }
                    Special::Rep(rep) => {
                        // Mostly a few iterations; one in eight a string long enough that
                        // recovery gives it to sinks as one run (a `memcpy` of a row).
                        let n = if self.rng.below(8) == 0 { 60 + self.rng.below(200) } else { self.rng.below(5) };
                        let dir: i64 = if self.rng.below(4) == 0 { -1 } else { 1 };
                        let faulting = stop == Some(k as u16);
                        let done = if faulting { n.saturating_sub(1) } else { n };
                        let iters = if faulting { done + 1 } else { n };
                        for it in 0..iters {
                            let mut regs = self.vals;
                            for m in &insn.refs {
                                let p = m.addr.base.unwrap().reg;
                                regs[p.index()] = self.vals[p.index()].wrapping_add((it as i64 * dir * rep.elem as i64) as u64);
                                let a = m.addr.eval(&regs) & mask;
                                let kind = if m.access == Access::Read { TruthKind::Read } else { TruthKind::Write };
                                self.truth(kind, m.size, insn.pc, a);
                            }
                        }
                        let delta = (done as i64 * dir * rep.elem as i64) as u64;
                        let post = self.vals[rep.post.index()].wrapping_add(delta) & mask;
                        self.values.push(post);
                        self.vals[rep.post.index()] = post;
                        if let Some(o) = rep.other {
                            self.vals[o.index()] = self.vals[o.index()].wrapping_add(delta) & mask;
                        }
                    }
                    Special::Gather(g) => {
                        let idx: Vec<u8> = (0..g.index_bytes).map(|_| self.rng.next() as u8).collect();
                        let m: Vec<u8> = (0..g.mask_bytes()).map(|_| self.rng.next() as u8).collect();
                        self.values.push_raw(&idx);
                        self.values.push_raw(&m);
                        for r in &insn.refs {
                            for e in 0..g.count() {
                                if g.active(&m, e, r.size) {
                                    let a = r.addr.eval(&self.vals).wrapping_add(g.index_value(&idx, e).wrapping_mul(r.addr.scale as u64))
                                        & mask;
                                    let kind = if r.access == Access::Read { TruthKind::Read } else { TruthKind::Write };
                                    self.truth(kind, r.size, insn.pc, a);
                                }
                            }
                        }
                    }
                }
            }
            if stop == Some(k as u16) {
                // The collector's records of the block's instructions come before the
                // interruption record: a sync record before the faulting instruction, a
                // watched call's entry.
                if self.records && self.rng.below(2) == 0 {
                    let seq = self.sync_seq();
                    self.tags.escape(Escape::Sync { at: k as u16, seq });
                }
                if self.records && self.rng.below(3) == 0 {
                    self.tags.escape(Escape::Call { func: 1, args: [self.rng.next(), 0], ret: self.rng.next() });
                }
                self.tags.escape(Escape::Interrupted { insn: k as u16 });
                self.truth(TruthKind::Interrupted, k as u32, insn.pc, 0);
                return;
            }
            for e in &insn.effects {
                match *e {
                    RegEffect::Expire(r) => self.vals[r.index()] = self.random_value(),
                    RegEffect::Add(r, d) => self.vals[r.index()] = self.vals[r.index()].wrapping_add(d as u64) & mask,
                    RegEffect::Derive(d) => self.vals[d.dst.index()] = d.eval(&self.vals),
                }
            }
        }
        self.recorded = (self.recorded & !decisions.exit_updated.bits()) | decisions.exit_recorded.bits();
        // Records of a block's instructions after an uninterrupted block.
        if self.records {
            match self.rng.below(16) {
                0 => {
                    // Before one of its instructions, as an atomic's or a system call's
                    // record is: the thread's segment ends in the middle of the block.
                    // (Placed by the number, drawing nothing more from the generator.)
                    let seq = self.sync_seq();
                    let at = (seq / self.thread.1.max(1)) % self.plans[b].insns.len().max(1) as u64;
                    self.tags.escape(Escape::Sync { at: at as u16, seq });
                }
                1 => self.tags.escape(Escape::Return { func: 2, value: 16 }),
                _ => {}
            }
        }
    }
}

/// Simulates threads following `paths` through `code` (address, bytes) and writes a profile.
pub fn write_profile<W: Write>(
    out: W,
    machine: Machine,
    code: &[(u64, Vec<u8>)],
    paths: &[Vec<PathStep>],
    seed: u64,
) -> Result<W, ProfileError> {
    write_profile_with(out, machine, code, paths, seed, false)
}

/// [`write_profile`]; with `records`, also the collector's records of blocks' instructions
/// (sync, call and return records) after random blocks and before interruption records, as
/// the collector writes them: recovery must give the same references and blocks with them.
pub fn write_profile_with<W: Write>(
    out: W,
    machine: Machine,
    code: &[(u64, Vec<u8>)],
    paths: &[Vec<PathStep>],
    seed: u64,
    records: bool,
) -> Result<W, ProfileError> {
    let mut sem = Semantics::new(machine);
    let plans: Vec<BlockPlan> =
        code.iter().map(|(a, b)| BlockPlan::build(&mut sem, *a, b, None).expect("simulated blocks must decode")).collect();
    let decisions: Vec<_> = plans.iter().map(BlockPlan::decisions).collect();
    let mut w = ProfileWriter::new(out, machine.width, 3)?;
    w.meta(&Metadata {
        format_version: VERSION,
        width: machine.width.bits(),
        command: vec!["(simulated)".into()],
        program: "(simulated)".into(),
        pid: 0,
        start_time_ns: 0,
        xsave_size: machine.xsave_size,
        truth: true,
        tool: concat!("dep-profile ", env!("CARGO_PKG_VERSION"), " simulator").into(),
        parent: None,
        windows: None,
        start_at: None,
        stop_at: None,
        attached: false,
    })?;
    for p in &plans {
        let bytes = &code.iter().find(|(a, _)| *a == p.addr).unwrap().1;
        w.block(&BlockEntry { addr: p.addr, version: 0, insn_count: p.insns.len() as u32, code: bytes[..p.len()].to_vec() })?;
    }
    // Threads after the first are created by the first, after one of its sync records (as
    // the collector numbers them before the creating system call), and number their own
    // sync records above it.
    let mut first_syncs: Vec<u64> = Vec::new();
    for (t, path) in paths.iter().enumerate() {
        let spawn = (t > 0 && !first_syncs.is_empty()).then(|| first_syncs[(t * 7919) % first_syncs.len()]);
        if let Some(seq) = spawn {
            w.thread(&ThreadEvent {
                event: crate::container::ThreadEventKind::Spawn,
                index: 0,
                tid: 1000,
                time_ns: 0,
                child_tid: Some(1000 + t as u32),
                seq: Some(seq),
                ..Default::default()
            })?;
        }
        w.thread(&ThreadEvent {
            event: crate::container::ThreadEventKind::Start,
            index: t as u32,
            tid: 1000 + t as u32,
            time_ns: 0,
            ..Default::default()
        })?;
        let mut th = SimThread {
            width: machine.width,
            plans: &plans,
            decisions: &decisions,
            rng: Rng::new(seed ^ (t as u64) << 32),
            records,
            vals: [0; NUM_REGS],
            recorded: 0,
            tags: TagEncoder::new(machine.width, 0),
            values: ValueWriter::new(machine.width),
            truth: Vec::new(),
            chunk_start: (0, 0, [0; NUM_REGS]),
            seq: 0,
            thread: (t as u64, paths.len() as u64),
            sync: spawn.map_or(0, |s| s / paths.len() as u64),
            syncs: Vec::new(),
            out: ThreadOut::default(),
        };
        th.expire_all();
        th.chunk_start = (0, 0, th.vals);
        th.tags.escape(Escape::ChunkStart { seq: 0 });
        th.tags.escape(Escape::ThreadStart);
        for step in path {
            match *step {
                PathStep::Block(b) => th.block(b, None),
                PathStep::Interrupt(b, k) => {
                    th.block(b, Some(k));
                    th.tags.escape(Escape::Signal { signo: 11 });
                    th.expire_all();
                }
                PathStep::Signal(s) => {
                    th.tags.escape(Escape::Signal { signo: s });
                    th.expire_all();
                }
                PathStep::SignalReturn => {
                    th.tags.escape(Escape::SignalReturn);
                    th.expire_all();
                }
                PathStep::Flush => th.flush(),
            }
        }
        th.tags.escape(Escape::ThreadEnd);
        th.flush();
        if t == 0 {
            first_syncs = std::mem::take(&mut th.syncs);
        }
        let n = th.out.chunks.len();
        for (seq, (hi, status, regs, tags, values, truth)) in th.out.chunks.into_iter().enumerate() {
            w.chunk(&ChunkData {
                thread: t as u32,
                seq: seq as u32,
                hi,
                status,
                last: seq + 1 == n,
                regs,
                tags: &tags,
                values: &values,
                truth: &truth,
            })?;
        }
        w.thread(&ThreadEvent {
            event: crate::container::ThreadEventKind::End,
            index: t as u32,
            tid: 1000 + t as u32,
            time_ns: 1,
            ..Default::default()
        })?;
    }
    w.end(&EndInfo { exit_status: 0, end_time_ns: 1, lost_bytes: 0 })?;
    w.flush()?;
    Ok(w.into_inner())
}

/// Instruction encodings the random code generator draws from: every kind of reference.
pub const INSN_POOL: &[&[u8]] = &[
    &[0x50],                                        // push rax
    &[0x55],                                        // push rbp
    &[0x5d],                                        // pop rbp
    &[0x58],                                        // pop rax
    &[0x48, 0x89, 0xe5],                            // mov rbp, rsp
    &[0x48, 0x83, 0xec, 0x20],                      // sub rsp, 0x20
    &[0x48, 0x83, 0xc4, 0x10],                      // add rsp, 0x10
    &[0x48, 0x8b, 0x03],                            // mov rax, [rbx]
    &[0x48, 0x8b, 0x08],                            // mov rcx, [rax]
    &[0x48, 0x8b, 0x50, 0x08],                      // mov rdx, [rax+8]
    &[0x8b, 0x5c, 0x88, 0x10],                      // mov ebx, [rax+rcx*4+0x10]
    &[0x48, 0x89, 0x44, 0x24, 0x08],                // mov [rsp+8], rax
    &[0xc7, 0x44, 0x24, 0x04, 1, 0, 0, 0],          // mov dword [rsp+4], 1
    &[0x48, 0x83, 0x00, 0x01],                      // add qword [rax], 1
    &[0x48, 0x8b, 0x05, 0x10, 0, 0, 0],             // mov rax, [rip+0x10]
    &[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0], // mov rax, fs:[0x28]
    &[0x65, 0x89, 0x4b, 0x08],                      // mov gs:[rbx+8], ecx
    &[0x48, 0xff, 0xc7],                            // inc rdi
    &[0x48, 0x8d, 0x76, 0x10],                      // lea rsi, [rsi+0x10]
    &[0x48, 0x8d, 0x43, 0x08],                      // lea rax, [rbx+8]
    &[0xb0, 0x01],                                  // mov al, 1
    &[0xd7],                                        // xlat
    &[0xa4],                                        // movsb
    &[0xf3, 0x48, 0xa5],                            // rep movsq
    &[0xf3, 0xaa],                                  // rep stosb
    &[0xf3, 0xa6],                                  // repe cmpsb
    &[0xf3, 0xad],                                  // rep lodsd
    &[0x0f, 0x05],                                  // syscall
    &[0x48, 0x0f, 0x44, 0x03],                      // cmove rax, [rbx]
    &[0x48, 0x0f, 0xb1, 0x0b],                      // cmpxchg [rbx], rcx
    &[0xc4, 0xe2, 0x65, 0x90, 0x0c, 0x90],          // vpgatherdd ymm1, [rax+ymm2*4], ymm3
    &[0xc4, 0xe2, 0xe5, 0x93, 0x0c, 0xd0],          // vgatherqpd ymm1, [rax+ymm2*8], ymm3
    &[0x62, 0xf2, 0x7d, 0x49, 0xa0, 0x0c, 0x90],    // vpscatterdd [rax+zmm2*4]{k1}, zmm1
    &[0x0f, 0xae, 0x20],                            // xsave [rax]
    &[0xff, 0x74, 0x24, 0x08],                      // push qword [rsp+8]
    &[0x8f, 0x44, 0x24, 0x08],                      // pop qword [rsp+8]
    &[0xc9],                                        // leave
    &[0x48, 0x93],                                  // xchg rax, rbx
    &[0x0f, 0x18, 0x08],                            // prefetcht0 [rax]
    &[0x67, 0x8b, 0x03],                            // mov eax, [ebx]
    &[0x48, 0x89, 0xc2],                            // mov rdx, rax
    &[0x48, 0x63, 0xd1],                            // movsxd rdx, ecx
    &[0x83, 0xc1, 0x01],                            // add ecx, 1
    &[0x48, 0x8d, 0x14, 0xc9],                      // lea rdx, [rcx+rcx*8]
    &[0x8d, 0x50, 0xff],                            // lea edx, [rax-1]
    &[0x31, 0xc0],                                  // xor eax, eax
    &[0xbe, 0x40, 0, 0, 0],                         // mov esi, 0x40
    &[0x48, 0xc1, 0xe2, 0x03],                      // shl rdx, 3
    &[0x48, 0x98],                                  // cdqe
    &[0x48, 0x6b, 0xca, 0x03],                      // imul rcx, rdx, 3
    &[0x48, 0x8b, 0x04, 0xca],                      // mov rax, [rdx+rcx*8]
    &[0x89, 0xd0],                                  // mov eax, edx
    &[0x48, 0x8b, 0x0c, 0xd4],                      // mov rcx, [rsp+rdx*8]
    // Derivations of every operation, with constant and register sources in either order
    // (the recovery's compiled code keeps values in registers and reads constants as
    // immediates where they fit).
    &[0x48, 0xc1, 0xea, 0x05],             // shr rdx, 5
    &[0xc1, 0xf8, 0x03],                   // sar eax, 3
    &[0x48, 0xd3, 0xe0],                   // shl rax, cl
    &[0x48, 0x01, 0xd1],                   // add rcx, rdx
    &[0x48, 0x01, 0xca],                   // add rdx, rcx
    &[0x48, 0x29, 0xc8],                   // sub rax, rcx
    &[0x48, 0x31, 0xd1],                   // xor rcx, rdx
    &[0x48, 0x83, 0xe1, 0xf0],             // and rcx, -16
    &[0x25, 0xff, 0x00, 0x00, 0x80],       // and eax, 0x800000ff
    &[0x48, 0x0d, 0x00, 0x10, 0x00, 0x00], // or rax, 0x1000
    &[0x48, 0xf7, 0xda],                   // neg rdx
    &[0x48, 0xf7, 0xd1],                   // not rcx
    &[0x48, 0xba, 8, 7, 6, 5, 4, 3, 2, 1], // mov rdx, 0x0102030405060708
    &[0x48, 0x0f, 0xaf, 0xca],             // imul rcx, rdx
    &[0x48, 0x8d, 0x0c, 0x4a],             // lea rcx, [rdx+rcx*2]
];

/// Generates `n` random blocks at addresses spread over H-tag boundaries, ending in `ret`.
pub fn random_code(rng: &mut Rng, n: usize) -> Vec<(u64, Vec<u8>)> {
    let mut code = Vec::new();
    let mut used = std::collections::HashSet::new();
    while code.len() < n {
        let addr = match rng.below(4) {
            0 => 0x40_0000 + rng.below(0x4_0000),
            1 => 0x7f12_3456_0000 + rng.below(0x3) * 0x1_0000, // L-tag 0
            2 => 0x5555_fff0_0000 + rng.below(0x10_0000),      // H in the control range
            _ => rng.next() & 0xffff_ffff_ffff,
        };
        if !used.insert(addr) {
            continue;
        }
        let len = 1 + rng.below(7) as usize;
        let mut bytes = Vec::new();
        for _ in 0..len {
            bytes.extend_from_slice(INSN_POOL[rng.below(INSN_POOL.len() as u64) as usize]);
        }
        bytes.push(0xc3); // ret
        code.push((addr, bytes));
    }
    code
}

/// A random path of `len` steps through `n_blocks` blocks, with signals and flushes.
pub fn random_path(rng: &mut Rng, code: &[(u64, Vec<u8>)], len: usize, events: bool) -> Vec<PathStep> {
    let mut sem = Semantics::new(Machine::x86_64(2696));
    let counts: Vec<usize> = code.iter().map(|(a, b)| BlockPlan::build(&mut sem, *a, b, None).unwrap().insns.len()).collect();
    let mut p = Vec::with_capacity(len);
    for _ in 0..len {
        let b = rng.below(code.len() as u64) as usize;
        p.push(match rng.below(if events { 40 } else { 1 }) {
            1 => PathStep::Flush,
            2 => PathStep::Signal(10),
            3 => PathStep::SignalReturn,
            4 => PathStep::Interrupt(b, rng.below(counts[b] as u64) as u16),
            _ => PathStep::Block(b),
        });
    }
    p
}

/// How a generated block ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exit {
    /// `je rel32`: to block `taken`, or on to `fall`.
    Cond { taken: usize, fall: usize },
    /// `jmp rel32`.
    Jump(usize),
    /// `call rel32` to a function's first block; returns to `ret`.
    Call { callee: usize, ret: usize },
    /// `ret`.
    Ret,
}

/// Generated code with real control flow: functions of contiguous blocks ending in a
/// conditional branch (forward, or backward: a loop), a jump, a call (any function, itself
/// included: recursion) or a return, their targets encoded from the layout.
pub struct Program {
    /// Every block: (address, bytes), then tail blocks added by [`program_path`].
    pub code: Vec<(u64, Vec<u8>)>,
    exits: Vec<Exit>,
    /// Each function's first block.
    entries: Vec<usize>,
    /// Instruction lengths of each block, for tail blocks.
    lens: Vec<Vec<usize>>,
}

/// Generates `functions` functions of 2 to 8 blocks, at addresses spread over H-tag
/// boundaries as [`random_code`]'s are.
pub fn random_program(rng: &mut Rng, functions: usize) -> Program {
    let functions = functions.max(1);
    let mut bodies: Vec<(usize, Vec<u8>, Vec<usize>)> = Vec::new(); // (function, body, insn lengths)
    let mut entries = Vec::new();
    for f in 0..functions {
        entries.push(bodies.len());
        for _ in 0..2 + rng.below(7) {
            let (mut body, mut lens) = (Vec::new(), Vec::new());
            for _ in 0..rng.below(5) {
                let insn = INSN_POOL[rng.below(INSN_POOL.len() as u64) as usize];
                body.extend_from_slice(insn);
                lens.push(insn.len());
            }
            bodies.push((f, body, lens));
        }
    }
    let fn_range = |f: usize| entries[f]..entries.get(f + 1).copied().unwrap_or(bodies.len());
    let mut exits = Vec::with_capacity(bodies.len());
    for (i, (f, _, _)) in bodies.iter().enumerate() {
        let r = fn_range(*f);
        let exit = if i + 1 == r.end {
            Exit::Ret
        } else {
            match rng.below(4) {
                0 => Exit::Cond { taken: r.start + rng.below((r.end - r.start) as u64) as usize, fall: i + 1 },
                1 => Exit::Jump(i + 1 + rng.below((r.end - i - 1) as u64) as usize),
                2 => Exit::Call { callee: entries[rng.below(functions as u64) as usize], ret: i + 1 },
                _ => Exit::Ret,
            }
        };
        exits.push(exit);
    }
    // Each function somewhere in a region, one per page (a function spans less than 4 KiB:
    // 8 blocks of at most 66 bytes).
    let mut used = std::collections::HashSet::new();
    let bases: Vec<u64> = (0..functions)
        .map(|_| loop {
            let a = match rng.below(4) {
                0 => 0x40_0000 + rng.below(0x400) * 0x1000,
                1 => 0x7f12_3456_0000 + rng.below(0x3) * 0x1_0000 + rng.below(16) * 0x1000,
                2 => 0x5555_fff0_0000 + rng.below(0x100) * 0x1000,
                _ => rng.next() & 0xffff_ffff_f000,
            };
            if used.insert(a >> 12) {
                break a;
            }
        })
        .collect();
    let func_of: Vec<usize> = bodies.iter().map(|(f, _, _)| *f).collect();
    // A call beyond rel32's reach goes through memory, as calls between modules do.
    let near = |i: usize, callee: usize| bases[func_of[i]].abs_diff(bases[func_of[callee]]) < 1 << 30;
    let term_len = |i: usize| match exits[i] {
        Exit::Cond { .. } => 6,
        Exit::Call { callee, .. } if !near(i, callee) => 6,
        Exit::Jump(_) | Exit::Call { .. } => 5,
        Exit::Ret => 1,
    };
    let mut addrs = vec![0u64; bodies.len()];
    for (f, &base) in bases.iter().enumerate() {
        let mut a = base;
        for i in fn_range(f) {
            addrs[i] = a;
            a += (bodies[i].1.len() + term_len(i)) as u64;
        }
    }
    let mut code = Vec::with_capacity(bodies.len());
    let mut lens = Vec::with_capacity(bodies.len());
    for (i, (_, body, insn_lens)) in bodies.into_iter().enumerate() {
        let mut bytes = body;
        let end = addrs[i] + (bytes.len() + term_len(i)) as u64;
        let rel = |t: usize| (addrs[t].wrapping_sub(end) as i64 as i32).to_le_bytes();
        match exits[i] {
            Exit::Cond { taken, .. } => {
                bytes.extend_from_slice(&[0x0f, 0x84]);
                bytes.extend_from_slice(&rel(taken));
            }
            Exit::Jump(t) => {
                bytes.push(0xe9);
                bytes.extend_from_slice(&rel(t));
            }
            Exit::Call { callee, .. } if near(i, callee) => {
                bytes.push(0xe8);
                bytes.extend_from_slice(&rel(callee));
            }
            Exit::Call { .. } => bytes.extend_from_slice(&[0xff, 0x15, 0, 0, 0, 0]), // call [rip+0]
            Exit::Ret => bytes.push(0xc3),
        }
        let mut l = insn_lens;
        l.push(term_len(i));
        code.push((addrs[i], bytes));
        lens.push(l);
    }
    Program { code, exits, entries, lens }
}

/// A path of about `len` steps that executes `prog`: branches taken at random, calls and
/// returns through a stack (a return with none starts function 0 again). With `events`,
/// also chunk hand-offs, asynchronous signals (a handler function runs, then the signal
/// returns) and faults at any instruction (a handler runs, then execution resumes at the
/// faulting instruction in a block starting there, added to `prog.code`).
pub fn program_path(rng: &mut Rng, prog: &mut Program, len: usize, events: bool) -> Vec<PathStep> {
    /// A frame: where a return goes, or the end of a signal handler.
    enum Frame {
        Return(usize),
        Handler(usize),
    }
    let mut stack: Vec<Frame> = Vec::new();
    let mut path = Vec::with_capacity(len);
    let mut cur = prog.entries[0];
    let handler = |rng: &mut Rng, prog: &Program| prog.entries[rng.below(prog.entries.len() as u64) as usize];
    while path.len() < len {
        if events {
            match rng.below(40) {
                0 => path.push(PathStep::Flush),
                1 => {
                    path.push(PathStep::Signal(10));
                    stack.push(Frame::Handler(cur));
                    cur = handler(rng, prog);
                    continue;
                }
                2 => {
                    let k = rng.below(prog.lens[cur].len() as u64) as usize;
                    path.push(PathStep::Interrupt(cur, k as u16));
                    stack.push(Frame::Handler(tail_block(prog, cur, k)));
                    cur = handler(rng, prog);
                    continue;
                }
                _ => {}
            }
        }
        path.push(PathStep::Block(cur));
        cur = match prog.exits[cur] {
            Exit::Cond { taken, fall } => {
                if rng.below(3) == 0 {
                    fall
                } else {
                    taken
                }
            }
            Exit::Jump(t) => t,
            Exit::Call { callee, ret } => {
                stack.push(Frame::Return(ret));
                callee
            }
            Exit::Ret => match stack.pop() {
                Some(Frame::Return(r)) => r,
                Some(Frame::Handler(r)) => {
                    path.push(PathStep::SignalReturn);
                    r
                }
                None => prog.entries[0],
            },
        };
    }
    path
}

/// The block that starts at instruction `k` of block `b` (where execution resumes after a
/// fault there), added to the program if new.
fn tail_block(prog: &mut Program, b: usize, k: usize) -> usize {
    if k == 0 {
        return b;
    }
    let skip: usize = prog.lens[b][..k].iter().sum();
    let addr = prog.code[b].0 + skip as u64;
    if let Some(i) = prog.code.iter().position(|(a, _)| *a == addr) {
        return i;
    }
    let bytes = prog.code[b].1[skip..].to_vec();
    prog.code.push((addr, bytes));
    prog.exits.push(prog.exits[b]);
    prog.lens.push(prog.lens[b][k..].to_vec());
    prog.code.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions, FlowControl};

    /// Each step of a generated path follows the control flow of the block before it, as
    /// iced-x86 decodes that block's last instruction, and the code has loops, calls and
    /// returns.
    #[test]
    fn program_paths_follow_the_decoded_control_flow() {
        let (mut loops, mut calls, mut rets) = (0, 0, 0);
        for seed in 0..40 {
            let mut rng = Rng::new(seed);
            let mut prog = random_program(&mut rng, 4);
            let path = program_path(&mut rng, &mut prog, 500, false);
            let last = |b: usize| {
                let (addr, bytes) = &prog.code[b];
                let mut d = Decoder::with_ip(64, bytes, *addr, DecoderOptions::NONE);
                d.iter().last().unwrap()
            };
            let blocks: Vec<usize> = path.iter().map(|s| if let PathStep::Block(b) = s { *b } else { unreachable!() }).collect();
            for w in blocks.windows(2) {
                let (i, next) = (last(w[0]), prog.code[w[1]].0);
                match i.flow_control() {
                    FlowControl::ConditionalBranch => {
                        assert!(next == i.near_branch_target() || next == i.next_ip(), "seed {seed}: {i} to {next:#x}");
                        loops += (i.near_branch_target() <= i.ip()) as usize;
                    }
                    FlowControl::UnconditionalBranch => assert_eq!(next, i.near_branch_target(), "seed {seed}: {i}"),
                    FlowControl::Call => {
                        assert_eq!(next, i.near_branch_target(), "seed {seed}: {i}");
                        calls += 1;
                    }
                    FlowControl::IndirectCall => calls += 1,
                    FlowControl::Return => rets += 1,
                    f => panic!("seed {seed}: block ends in {i} ({f:?})"),
                }
            }
        }
        assert!(loops > 100 && calls > 100 && rets > 100, "loops {loops}, calls {calls}, returns {rets}");
    }
}
