//! A ChampSim trace reader written from ChampSim's published record layout (`input_instr`
//! in inc/trace_instruction.h) and its branch deduction (`ooo_model_instr`'s constructor in
//! inc/instruction.h), not from dep's writer; and what the trace of a profile should hold,
//! from the recovered stream and iced-x86's decoding of the profile's block table. Included
//! by path (`#[path = ...] mod champsim;`) in the tests that read exports.

#![allow(dead_code)]

use dep_profile::container::Profile;
use dep_recover::{BlockEvent, Marker, MemEvent, RecoverError, Recovery, Sink, Source};
use iced_x86::{Decoder, DecoderOptions, FlowControl, InstructionInfoFactory};
use std::path::Path;

/// ChampSim's branch types (its names).
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Branch {
    NotBranch,
    DirectJump,
    Indirect,
    Conditional,
    DirectCall,
    IndirectCall,
    Return,
    Other,
}

/// One `input_instr` as ChampSim reads it (zero slots left out).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rec {
    pub ip: u64,
    pub is_branch: bool,
    pub taken: bool,
    pub dst_regs: Vec<u8>,
    pub src_regs: Vec<u8>,
    pub dst_mem: Vec<u64>,
    pub src_mem: Vec<u64>,
}

const REG_STACK_POINTER: u8 = 6;
const REG_FLAGS: u8 = 25;
const REG_INSTRUCTION_POINTER: u8 = 26;

impl Rec {
    /// The branch type ChampSim deduces from the registers, and whether it takes the
    /// branch (its own rule for each type; the record's flag for conditional and other).
    pub fn deduce(&self) -> (Branch, bool) {
        let has = |v: &[u8], r: u8| v.contains(&r);
        let writes_sp = has(&self.dst_regs, REG_STACK_POINTER);
        let writes_ip = has(&self.dst_regs, REG_INSTRUCTION_POINTER);
        let reads_sp = has(&self.src_regs, REG_STACK_POINTER);
        let reads_flags = has(&self.src_regs, REG_FLAGS);
        let reads_ip = has(&self.src_regs, REG_INSTRUCTION_POINTER);
        let reads_other = self.src_regs.iter().any(|&r| r != REG_STACK_POINTER && r != REG_FLAGS && r != REG_INSTRUCTION_POINTER);
        if !reads_sp && !reads_flags && writes_ip && !reads_other {
            (Branch::DirectJump, true)
        } else if !reads_sp && !reads_ip && !reads_flags && writes_ip && reads_other {
            (Branch::Indirect, true)
        } else if !reads_sp && reads_ip && !writes_sp && writes_ip && (reads_flags || reads_other) {
            (Branch::Conditional, self.taken)
        } else if reads_sp && reads_ip && writes_sp && writes_ip && !reads_flags && !reads_other {
            (Branch::DirectCall, true)
        } else if reads_sp && reads_ip && writes_sp && writes_ip && !reads_flags && reads_other {
            (Branch::IndirectCall, true)
        } else if reads_sp && !reads_ip && writes_sp && writes_ip {
            (Branch::Return, true)
        } else if writes_ip {
            (Branch::Other, self.taken)
        } else {
            (Branch::NotBranch, false)
        }
    }
}

/// A trace file's records, read as they are needed: through `xz -dc` or `gzip -dc` for
/// those names, as ChampSim reads them.
pub struct Reader {
    input: Box<dyn std::io::Read + Send>,
    child: Option<std::process::Child>,
    name: String,
}

impl Reader {
    pub fn open(path: &Path) -> Reader {
        let name = path.to_string_lossy().into_owned();
        if name.ends_with(".xz") || name.ends_with(".gz") {
            let tool = if name.ends_with(".xz") { "xz" } else { "gzip" };
            let mut child = std::process::Command::new(tool)
                .arg("-dc")
                .arg(path)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("run the decompressor");
            let out = child.stdout.take().unwrap();
            Reader { input: Box::new(std::io::BufReader::with_capacity(1 << 20, out)), child: Some(child), name }
        } else {
            let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{name}: {e}"));
            Reader { input: Box::new(std::io::BufReader::with_capacity(1 << 20, f)), child: None, name }
        }
    }

    /// The next record; None at the end (which must fall between records).
    pub fn next(&mut self) -> Option<Rec> {
        let mut r = [0u8; 64];
        let mut got = 0;
        while got < 64 {
            match self.input.read(&mut r[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) => panic!("{}: {e}", self.name),
            }
        }
        if got == 0 {
            if let Some(mut c) = self.child.take() {
                assert!(c.wait().unwrap().success(), "{}: the decompressor failed", self.name);
            }
            return None;
        }
        assert_eq!(got, 64, "{}: a partial record at the end", self.name);
        let u64_at = |o: usize| u64::from_le_bytes(r[o..o + 8].try_into().unwrap());
        let nz8 = |v: &[u8]| v.iter().copied().filter(|&x| x != 0).collect::<Vec<u8>>();
        let nz64 = |o: usize, n: usize| (0..n).map(|k| u64_at(o + 8 * k)).filter(|&a| a != 0).collect::<Vec<u64>>();
        Some(Rec {
            ip: u64_at(0),
            is_branch: r[8] != 0,
            taken: r[9] != 0,
            dst_regs: nz8(&r[10..12]),
            src_regs: nz8(&r[12..16]),
            dst_mem: nz64(16, 2),
            src_mem: nz64(32, 4),
        })
    }
}

/// Every record of a trace file.
pub fn read(path: &Path) -> Vec<Rec> {
    let mut r = Reader::open(path);
    std::iter::from_fn(|| r.next()).collect()
}

/// What a record should say: from the recovery and iced-x86's decoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expect {
    pub ip: u64,
    pub branch: Branch,
    /// For a conditional branch: taken (None where no next block is known).
    pub taken: Option<bool>,
    /// Distinct addresses in order met, zero left out (then cut to the record's slots).
    pub reads: Vec<u64>,
    pub writes: Vec<u64>,
}

/// The branch type of iced-x86's flow control. iced calls `syscall` and `sysenter` calls;
/// in a thread's trace execution goes on after them, so they are no branch (as the
/// interrupts, which iced classes apart).
fn branch_of(i: &iced_x86::Instruction) -> Branch {
    if matches!(i.mnemonic(), iced_x86::Mnemonic::Syscall | iced_x86::Mnemonic::Sysenter) {
        return Branch::NotBranch;
    }
    match i.flow_control() {
        FlowControl::UnconditionalBranch => Branch::DirectJump,
        FlowControl::IndirectBranch => Branch::Indirect,
        FlowControl::ConditionalBranch => Branch::Conditional,
        FlowControl::Call => Branch::DirectCall,
        FlowControl::IndirectCall => Branch::IndirectCall,
        FlowControl::Return => Branch::Return,
        _ => Branch::NotBranch,
    }
}

/// One thread's expected records, checked against its trace as they are made (records
/// wait only while a conditional branch among them has no direction yet).
pub struct Model<'p> {
    profile: &'p Profile,
    what: String,
    reader: Reader,
    /// Records made and not yet checked, from record number `base`.
    waiting: std::collections::VecDeque<Expect>,
    base: usize,
    /// The block being gathered: its decoded instructions run, and its references.
    open: Vec<iced_x86::Instruction>,
    interrupted: bool,
    refs: Vec<MemEvent>,
    /// The conditional branch waiting for the next block: record number, address after it.
    pending: Option<(usize, u64)>,
    signals: Vec<Option<(usize, u64)>>,
    /// Records checked, and conditional branches without a direction among them.
    pub checked: usize,
    pub undirected: usize,
}

impl<'p> Model<'p> {
    pub fn new(profile: &'p Profile, trace: &Path, what: String) -> Self {
        Model {
            profile,
            what,
            reader: Reader::open(trace),
            waiting: Default::default(),
            base: 0,
            open: Vec::new(),
            interrupted: false,
            refs: Vec::new(),
            pending: None,
            signals: Vec::new(),
            checked: 0,
            undirected: 0,
        }
    }

    fn decide(&mut self, k: usize, taken: Option<bool>) {
        self.waiting[k - self.base].taken = taken;
    }

    /// Checks the records no branch waits on.
    fn check_ready(&mut self, all: bool) {
        let oldest = self.pending.iter().chain(self.signals.iter().flatten()).map(|p| p.0).min();
        while let Some(w) = self.waiting.front() {
            if !all && oldest.is_some_and(|o| o <= self.base) {
                break;
            }
            let g = self.reader.next().unwrap_or_else(|| panic!("{}: the trace ends at record {}", self.what, self.base));
            self.undirected += check(&self.what, self.base, &g, w);
            self.waiting.pop_front();
            self.base += 1;
            self.checked += 1;
        }
    }

    fn flush(&mut self) {
        let insns = std::mem::take(&mut self.open);
        let refs = std::mem::take(&mut self.refs);
        let mut factory = InstructionInfoFactory::new();
        for (k, i) in insns.iter().enumerate() {
            let mine: Vec<&MemEvent> = refs.iter().filter(|r| r.insn as usize == k).collect();
            let rep = (i.has_rep_prefix() || i.has_repne_prefix()) && i.is_string_instruction();
            let per = factory.info(i).used_memory().len().max(1);
            let groups: Vec<&[&MemEvent]> = if rep && !mine.is_empty() { mine.chunks(per).collect() } else { vec![&mine[..]] };
            for g in groups {
                let mut reads: Vec<u64> = Vec::new();
                let mut writes: Vec<u64> = Vec::new();
                for r in g {
                    let set = if r.access == dep_profile::semantics::Access::Read { &mut reads } else { &mut writes };
                    if r.addr != 0 && !set.contains(&r.addr) {
                        set.push(r.addr);
                    }
                }
                self.waiting.push_back(Expect { ip: i.ip(), branch: branch_of(i), taken: None, reads, writes });
            }
            if k + 1 == insns.len() && i.flow_control() == FlowControl::ConditionalBranch {
                let last = self.base + self.waiting.len() - 1;
                if self.interrupted {
                    // It did not complete (a fault, a signal): not taken.
                    self.decide(last, Some(false));
                } else {
                    self.pending = Some((last, i.next_ip()));
                }
            }
        }
    }
}

impl Sink for Model<'_> {
    type Error = RecoverError;

    fn block(&mut self, b: &BlockEvent) -> Result<bool, RecoverError> {
        self.flush();
        if let Some((k, fall)) = self.pending.take() {
            self.decide(k, Some(b.addr != fall));
        }
        self.check_ready(false);
        let entry = &self.profile.blocks()[b.id.expect("a block of the table") as usize];
        let code = self.profile.code(entry);
        let mut d = Decoder::with_ip(64, code, b.addr, DecoderOptions::NONE);
        self.open = (0..b.executed).map(|_| d.decode()).collect();
        self.interrupted = b.interrupted;
        Ok(true)
    }

    fn refs(&mut self, _b: &BlockEvent, refs: &[MemEvent]) -> Result<bool, RecoverError> {
        self.refs.extend_from_slice(refs);
        Ok(true)
    }

    fn marker(&mut self, _t: u32, m: Marker) -> Result<bool, RecoverError> {
        match m {
            Marker::Signal(_) => {
                self.flush();
                let p = self.pending.take();
                self.signals.push(p);
            }
            Marker::SignalReturn => {
                self.flush();
                self.pending = self.signals.pop().flatten();
            }
            Marker::ThreadEnd => {
                self.flush();
                self.pending = None;
            }
            _ => {}
        }
        Ok(true)
    }

    fn finish(&mut self) -> Result<(), RecoverError> {
        self.flush();
        self.pending = None;
        self.signals.clear();
        self.check_ready(true);
        assert!(self.reader.next().is_none(), "{}: records after the {} expected", self.what, self.checked);
        Ok(())
    }
}

/// Checks every thread's trace (`trace(t)`) against the profile's recovery: returns the
/// records checked and the conditional branches among them with no known direction.
pub fn check_all(profile: &Profile, trace: impl Fn(usize) -> std::path::PathBuf + Sync, what: &str) -> (usize, usize) {
    let rec = Recovery::new(profile, 2);
    let models = rec.events(Source::Dep).per_thread(|t| Model::new(profile, &trace(t as usize), format!("{what} thread {t}"))).unwrap();
    models.iter().fold((0, 0), |(a, b), m| (a + m.checked, b + m.undirected))
}

/// Checks record `k` against what it should be: instruction address, the branch type
/// ChampSim deduces against iced-x86's flow control, direction of a conditional branch,
/// memory addresses (the first 4 distinct read and 2 distinct written). Returns 1 for a
/// conditional branch with no known direction.
fn check(what: &str, k: usize, g: &Rec, w: &Expect) -> usize {
    assert_eq!(g.ip, w.ip, "{what}: record {k}'s instruction");
    let (branch, taken) = g.deduce();
    assert_eq!(branch, w.branch, "{what}: record {k} at {:#x}: {g:?}", w.ip);
    assert_eq!(g.is_branch, w.branch != Branch::NotBranch, "{what}: record {k} at {:#x}: is_branch", w.ip);
    let mut undirected = 0;
    match (w.branch, w.taken) {
        (Branch::Conditional, Some(t)) => assert_eq!(taken, t, "{what}: record {k} at {:#x}: taken", w.ip),
        (Branch::Conditional, None) => undirected = 1,
        (Branch::NotBranch, _) => assert!(!g.taken, "{what}: record {k}: not a branch but taken"),
        _ => assert!(taken, "{what}: record {k}: an unconditional branch not taken"),
    }
    let cut = |v: &[u64], n: usize| v[..v.len().min(n)].to_vec();
    assert_eq!(g.src_mem, cut(&w.reads, 4), "{what}: record {k} at {:#x}: reads", w.ip);
    assert_eq!(g.dst_mem, cut(&w.writes, 2), "{what}: record {k} at {:#x}: writes", w.ip);
    undirected
}
