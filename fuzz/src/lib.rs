//! Structure-aware inputs for the fuzz targets: an [`Input`] describes a run (blocks of real
//! x86 code, threads' paths with signals, faults and chunk hand-offs), which the project's
//! own simulator records, then edits of the profile's records (metadata fields, block table
//! entries, tag and value streams, chunk headers, module and thread events) written back
//! with the project's writer, so checksums stay valid and the damage reaches the decoders.

use arbitrary::Arbitrary;
use dep_profile::container::{
    BlockEntry, ChunkData, ChunkView, EndInfo, Metadata, ModuleEvent, ProfileWriter, RecordKind, Section, ThreadEvent, ThreadEventKind,
};
use dep_profile::container::{FILE_HEADER_LEN, RECORD_HEADER_LEN};
use dep_profile::simulate::{random_path, write_profile_with, PathStep, Rng, INSN_POOL};
use dep_profile::tags::{push_escape, push_hi_change, Escape, TagDecoder, TagEncoder, TagItem};
use dep_profile::{BlockPlan, Machine, Semantics, Width, NUM_REGS};
use std::path::PathBuf;

/// At most this many blocks, threads, steps per thread and edits: small profiles keep the
/// fuzzer fast, and every bug seen so far needs only a few of each.
const MAX_BLOCKS: usize = 12;
const MAX_THREADS: usize = 3;
const MAX_STEPS: usize = 64;
const MAX_EDITS: usize = 8;

/// Where a block lies: the same regions as the simulator's random code (H-tag boundaries).
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Addr {
    Low(u16),
    LowTag0(u8),
    Control(u32),
    Any(u64),
    /// The top of the address space, where sentinels live.
    Top(u16),
}

impl Addr {
    fn get(self) -> u64 {
        match self {
            Addr::Low(a) => 0x40_0000 + a as u64 * 4,
            Addr::LowTag0(a) => 0x7f12_3456_0000 + (a as u64 % 3) * 0x1_0000,
            Addr::Control(a) => 0x5555_fff0_0000 + (a as u64 & 0xf_ffff),
            Addr::Any(a) => a & 0xffff_ffff_ffff,
            Addr::Top(a) => u64::MAX - a as u64,
        }
    }
}

/// A block: instructions drawn from the simulator's pool (every kind of reference), then `ret`.
#[derive(Arbitrary, Debug, Clone)]
pub struct Block {
    pub addr: Addr,
    pub insns: Vec<u8>,
}

/// One step of a thread's path, block and instruction numbers taken modulo what exists.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Step {
    Block(u8),
    Interrupt(u8, u8),
    Signal,
    SignalReturn,
    Flush,
}

/// A DEP_c record to insert, mirroring [`Escape`] plus H-tag changes and raw words.
#[derive(Arbitrary, Debug, Clone)]
pub enum TagInsert {
    ChunkStart(u32),
    ThreadStart,
    ThreadEnd,
    Signal(u16),
    SignalReturn,
    Interrupted(u16),
    CodeVersion(u32),
    ExpireAll,
    Sync(u16, u64),
    Call(u16, u64, u64, u64),
    Return(u16, u64),
    Hi(u64),
    Words(Vec<u16>),
}

impl TagInsert {
    fn words(&self, width: Width) -> Vec<u16> {
        let mut w = Vec::new();
        match *self {
            TagInsert::Hi(hi) => push_hi_change(width, 0, hi, &mut w), // from any H-tag
            TagInsert::Words(ref words) => w.clone_from(words),
            _ => push_escape(self.escape().expect("an escape"), &mut w),
        }
        w
    }

    /// The escape record this is, if it is one.
    fn escape(&self) -> Option<Escape> {
        Some(match *self {
            TagInsert::ChunkStart(seq) => Escape::ChunkStart { seq },
            TagInsert::ThreadStart => Escape::ThreadStart,
            TagInsert::ThreadEnd => Escape::ThreadEnd,
            TagInsert::Signal(signo) => Escape::Signal { signo },
            TagInsert::SignalReturn => Escape::SignalReturn,
            TagInsert::Interrupted(insn) => Escape::Interrupted { insn },
            TagInsert::CodeVersion(version) => Escape::CodeVersion { version },
            TagInsert::ExpireAll => Escape::ExpireAll,
            TagInsert::Sync(at, seq) => Escape::Sync { at, seq },
            TagInsert::Call(func, a, b, ret) => Escape::Call { func, args: [a, b], ret },
            TagInsert::Return(func, value) => Escape::Return { func, value },
            TagInsert::Hi(_) | TagInsert::Words(_) => return None,
        })
    }
}

/// A field of a chunk's header.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum ChunkField {
    Thread(u32),
    Seq(u32),
    Hi(u64),
    Status(u32),
    Last(bool),
    Reg(u8, u64),
}

/// A thread table event.
#[derive(Arbitrary, Debug, Clone)]
pub struct ThreadRec {
    pub kind: u8,
    pub index: u32,
    pub tid: u32,
    pub child_tid: Option<u32>,
    pub seq: Option<u64>,
    pub tls: Option<u64>,
}

/// A DEP_c item to insert.
#[derive(Arbitrary, Debug, Clone)]
pub enum Item {
    Record(TagInsert),
    /// A block of the table.
    TableBlock(u8),
    /// A block anywhere, in the table or not.
    Block(Addr),
}

/// One change to the simulated profile. Record, chunk and block numbers are taken modulo
/// how many there are; positions modulo the stream's length.
#[derive(Arbitrary, Debug, Clone)]
pub enum Edit {
    XsaveSize(u32),
    MetaWidth(u8),
    MetaVersion(u16),
    MetaTruth(bool),
    HeaderVersion(u16),
    HeaderWidth(u8),
    BlockCode(u8, Vec<u8>),
    BlockInsnCount(u8, u32),
    BlockAddr(u8, u64),
    BlockVersion(u8, u32),
    BlockDup(u8),
    Module {
        load: bool,
        base: u64,
        size: u64,
        entry: Option<u64>,
    },
    Thread(ThreadRec),
    TagFlip(u8, u16, u16),
    TagInsert(u8, u16, TagInsert),
    TagDelete(u8, u16, u8),
    /// Moves block `i` of the table to a new address, and every tag naming it.
    MoveBlock(u8, Addr),
    /// Inserts an item before item `pos` of a chunk's DEP_c, re-encoding the stream
    /// (H-tag changes stay consistent).
    ItemInsert {
        chunk: u8,
        pos: u16,
        what: Item,
    },
    /// Deletes `n` items of a chunk's DEP_c from item `pos`, re-encoding the stream.
    ItemDelete(u8, u16, u8),
    /// Makes block `i` `2n` copies of pool instruction `insn` then `ret`.
    LongBlock(u8, u8, u16),
    ValueFlip(u8, u16, u8),
    ValueTruncate(u8, u16),
    ValueInsert(u8, u16, u64),
    TruthFlip(u8, u16, u8),
    Chunk(u8, ChunkField),
    DropRecord(u8),
    DupRecord(u8),
    SwapRecords(u8, u8),
    /// A byte of an encoded record payload (a chunk header's section lengths, a block
    /// entry's header), with the checksum recomputed.
    PayloadFlip(u8, u16, u8),
    /// A byte of the file, checksums left as they are.
    RawFlip(u32, u8),
    Truncate(u32),
}

/// A whole fuzz input: the run to simulate and the edits to make to its profile.
#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    pub blocks: Vec<Block>,
    pub threads: Vec<Vec<Step>>,
    pub seed: u64,
    /// Random steps (blocks, signals, faults, hand-offs) appended to each thread's path,
    /// drawn from `seed` as the simulator's tests draw them.
    pub random_steps: u8,
    /// The collector's records of blocks' instructions (sync, call, return).
    pub records: bool,
    pub edits: Vec<Edit>,
}

/// A record of the profile, decoded where edits need it.
#[derive(Clone, Debug)]
enum Rec {
    Meta(Metadata),
    Module(ModuleEvent),
    Thread(ThreadEvent),
    Block(BlockEntry),
    Chunk(Chunk),
    End(EndInfo),
    /// Anything else, kept as it is.
    Other(u16, Vec<u8>),
}

/// A chunk's decompressed contents.
#[derive(Clone, Debug)]
struct Chunk {
    thread: u32,
    seq: u32,
    hi: u64,
    status: u32,
    last: bool,
    regs: [u64; NUM_REGS],
    tags: Vec<u8>,
    values: Vec<u8>,
    truth: Vec<u8>,
}

fn at(i: impl Into<usize>, n: usize) -> Option<usize> {
    (n > 0).then(|| i.into() % n)
}

impl Input {
    /// The blocks' code: unique addresses, each block at least a `ret`.
    fn code(&self) -> Vec<(u64, Vec<u8>)> {
        let mut code: Vec<(u64, Vec<u8>)> = Vec::new();
        for b in self.blocks.iter().take(MAX_BLOCKS) {
            let addr = b.addr.get();
            if code.iter().any(|(a, _)| *a == addr) {
                continue;
            }
            let mut bytes: Vec<u8> =
                b.insns.iter().take(8).flat_map(|&i| INSN_POOL[i as usize % INSN_POOL.len()].iter().copied()).collect();
            bytes.push(0xc3);
            // The simulator runs only code below the top of the address space (edits move
            // blocks anywhere).
            if addr.checked_add(bytes.len() as u64).is_some() {
                code.push((addr, bytes));
            }
        }
        if code.is_empty() {
            code.push((0x40_0000, vec![0x50, 0xc3]));
        }
        code
    }

    fn paths(&self, code: &[(u64, Vec<u8>)]) -> Vec<Vec<PathStep>> {
        let mut sem = Semantics::new(Machine::x86_64(2696));
        let counts: Vec<usize> = code.iter().map(|(a, b)| BlockPlan::build(&mut sem, *a, b, None).map_or(1, |p| p.insns.len())).collect();
        let n = code.len();
        let mut rng = Rng::new(self.seed);
        let none = [Vec::new()];
        let threads = if self.threads.is_empty() { &none[..] } else { &self.threads[..] };
        threads
            .iter()
            .take(MAX_THREADS)
            .map(|t| {
                let mut path: Vec<PathStep> = t
                    .iter()
                    .take(MAX_STEPS)
                    .map(|s| match *s {
                        Step::Block(b) => PathStep::Block(b as usize % n),
                        Step::Interrupt(b, k) => {
                            let b = b as usize % n;
                            PathStep::Interrupt(b, (k as usize % counts[b]) as u16)
                        }
                        Step::Signal => PathStep::Signal(10),
                        Step::SignalReturn => PathStep::SignalReturn,
                        Step::Flush => PathStep::Flush,
                    })
                    .collect();
                path.extend(random_path(&mut rng, code, self.random_steps as usize, true));
                path
            })
            .collect()
    }

    /// The profile's bytes: simulated, then edited.
    pub fn build(&self) -> Vec<u8> {
        let code = self.code();
        let paths = self.paths(&code);
        let sim = write_profile_with(Vec::new(), Machine::x86_64(2696), &code, &paths, self.seed, self.records).expect("writing to memory");
        let mut recs = parse(&sim);
        let (mut header_version, mut header_width) = (None, None);
        let mut payload_flips = Vec::new();
        let mut raw = Vec::new();
        for e in self.edits.iter().take(MAX_EDITS) {
            match e {
                Edit::HeaderVersion(v) => header_version = Some(*v),
                Edit::HeaderWidth(w) => header_width = Some(*w),
                Edit::PayloadFlip(r, pos, x) => payload_flips.push((*r, *pos, *x)),
                Edit::RawFlip(..) | Edit::Truncate(_) => raw.push(e.clone()),
                e => edit(&mut recs, e),
            }
        }
        let mut w = ProfileWriter::new(Vec::new(), Width::W64, 1).expect("writing to memory");
        let n = recs.len();
        for (i, r) in recs.iter().enumerate() {
            let (kind, mut payload) = encode(r);
            for &(fr, pos, x) in &payload_flips {
                if at(fr, n) == Some(i) && !payload.is_empty() {
                    let p = pos as usize % payload.len();
                    payload[p] ^= x;
                }
            }
            write_record(&mut w, kind, &payload);
        }
        let mut out = w.into_inner();
        if let Some(v) = header_version {
            out[8..10].copy_from_slice(&v.to_le_bytes());
        }
        if let Some(wd) = header_width {
            out[10] = wd;
        }
        for e in raw {
            match e {
                Edit::RawFlip(pos, x) => {
                    let p = pos as usize % out.len();
                    out[p] ^= x;
                }
                Edit::Truncate(len) => out.truncate(len as usize % (out.len() + 1)),
                _ => unreachable!(),
            }
        }
        out
    }
}

fn write_record(w: &mut ProfileWriter<Vec<u8>>, kind: u16, payload: &[u8]) {
    match RecordKind::from_u16(kind) {
        Some(k) => w.record(k, payload).expect("writing to memory"),
        None => unreachable!("only known kinds are parsed"),
    }
}

/// The records of a profile the simulator wrote (so well formed).
fn parse(bytes: &[u8]) -> Vec<Rec> {
    let mut recs = Vec::new();
    let mut off = FILE_HEADER_LEN;
    while off + RECORD_HEADER_LEN <= bytes.len() {
        let kind = u16::from_le_bytes([bytes[off + 2], bytes[off + 3]]);
        let len = u64::from_le_bytes(bytes[off + 8..off + 16].try_into().unwrap()) as usize;
        let payload = &bytes[off + RECORD_HEADER_LEN..off + RECORD_HEADER_LEN + len];
        off += RECORD_HEADER_LEN + len + dep_profile::container::padding(len as u64);
        recs.push(match RecordKind::from_u16(kind) {
            Some(RecordKind::Meta) => Rec::Meta(serde_json::from_slice(payload).unwrap()),
            Some(RecordKind::Module) => Rec::Module(serde_json::from_slice(payload).unwrap()),
            Some(RecordKind::Thread) => Rec::Thread(serde_json::from_slice(payload).unwrap()),
            Some(RecordKind::End) => Rec::End(serde_json::from_slice(payload).unwrap()),
            Some(RecordKind::Block) => {
                let u32_at = |o: usize| u32::from_le_bytes(payload[o..o + 4].try_into().unwrap());
                Rec::Block(BlockEntry {
                    addr: u64::from_le_bytes(payload[..8].try_into().unwrap()),
                    version: u32_at(8),
                    insn_count: u32_at(12),
                    code: payload[dep_profile::container::meta::BLOCK_HEADER_LEN..].to_vec(),
                })
            }
            Some(RecordKind::Chunk) => {
                let v = ChunkView::parse(payload, Width::W64).unwrap();
                Rec::Chunk(Chunk {
                    thread: v.thread(),
                    seq: v.seq(),
                    hi: v.hi(),
                    status: v.status(),
                    last: v.is_last(),
                    regs: v.regs(),
                    tags: v.decompress(Section::Tags).unwrap(),
                    values: v.decompress(Section::Values).unwrap(),
                    truth: v.decompress(Section::Truth).unwrap(),
                })
            }
            Some(RecordKind::Index) | None => Rec::Other(kind, payload.to_vec()),
        });
    }
    recs
}

fn encode(r: &Rec) -> (u16, Vec<u8>) {
    match r {
        Rec::Meta(m) => (RecordKind::Meta as u16, json(m)),
        Rec::Module(m) => (RecordKind::Module as u16, json(m)),
        Rec::Thread(t) => (RecordKind::Thread as u16, json(t)),
        Rec::End(e) => (RecordKind::End as u16, json(e)),
        Rec::Block(b) => (RecordKind::Block as u16, b.encode()),
        Rec::Chunk(c) => {
            let d = ChunkData {
                thread: c.thread,
                seq: c.seq,
                hi: c.hi,
                status: c.status,
                last: c.last,
                regs: c.regs,
                tags: &c.tags,
                values: &c.values,
                truth: &c.truth,
            };
            (RecordKind::Chunk as u16, d.encode(Width::W64, 1).expect("compressing in memory"))
        }
        Rec::Other(k, p) => (*k, p.clone()),
    }
}

/// A JSON record's payload.
fn json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("serialising a record")
}

/// The `i`-th record matching `f`, modulo how many do.
fn nth(recs: &mut [Rec], i: u8, f: impl Fn(&Rec) -> bool) -> Option<&mut Rec> {
    let n = recs.iter().filter(|r| f(r)).count();
    let k = at(i, n)?;
    recs.iter_mut().filter(|r| f(r)).nth(k)
}

fn chunk(recs: &mut [Rec], i: u8) -> Option<&mut Chunk> {
    match nth(recs, i, |r| matches!(r, Rec::Chunk(_)))? {
        Rec::Chunk(c) => Some(c),
        _ => None,
    }
}

fn block(recs: &mut [Rec], i: u8) -> Option<&mut BlockEntry> {
    match nth(recs, i, |r| matches!(r, Rec::Block(_)))? {
        Rec::Block(b) => Some(b),
        _ => None,
    }
}

fn meta(recs: &mut [Rec]) -> Option<&mut Metadata> {
    recs.iter_mut().find_map(|r| if let Rec::Meta(m) = r { Some(m) } else { None })
}

/// Words of a DEP_c stream: splice `words` in at word `pos`, removing `del` words there.
fn splice_words(bytes: &mut Vec<u8>, pos: u16, del: usize, words: &[u16]) {
    let n = bytes.len() / 2;
    let p = if n == 0 { 0 } else { pos as usize % (n + 1) };
    let end = (p + del).min(n);
    let new: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    bytes.splice(p * 2..end * 2, new);
}

/// Edits a chunk's DEP_c as a list of items, when it decodes.
fn edit_items(c: &mut Chunk, f: impl FnOnce(&mut Vec<TagItem>)) {
    let Ok(mut d) = TagDecoder::new(Width::W64, &c.tags, c.hi) else { return };
    let mut items = Vec::new();
    while let Ok(Some(it)) = d.next_item() {
        items.push(it);
    }
    f(&mut items);
    let mut e = TagEncoder::new(Width::W64, c.hi);
    for it in items {
        e.item(it);
    }
    c.tags = e.to_bytes();
}

fn flip(bytes: &mut [u8], pos: u16, x: u8) {
    if !bytes.is_empty() {
        let p = pos as usize % bytes.len();
        bytes[p] ^= x;
    }
}

fn edit(recs: &mut Vec<Rec>, e: &Edit) {
    match e {
        Edit::XsaveSize(s) => meta(recs).into_iter().for_each(|m| m.xsave_size = *s),
        Edit::MetaWidth(w) => meta(recs).into_iter().for_each(|m| m.width = *w),
        Edit::MetaVersion(v) => meta(recs).into_iter().for_each(|m| m.format_version = *v),
        Edit::MetaTruth(t) => meta(recs).into_iter().for_each(|m| m.truth = *t),
        Edit::BlockCode(i, code) => block(recs, *i).into_iter().for_each(|b| b.code = code.clone()),
        Edit::BlockInsnCount(i, n) => block(recs, *i).into_iter().for_each(|b| b.insn_count = *n),
        Edit::BlockAddr(i, a) => block(recs, *i).into_iter().for_each(|b| b.addr = *a),
        Edit::BlockVersion(i, v) => block(recs, *i).into_iter().for_each(|b| b.version = *v),
        Edit::BlockDup(i) => {
            if let Some(b) = block(recs, *i).cloned() {
                recs.insert(1.min(recs.len()), Rec::Block(b));
            }
        }
        Edit::Module { load, base, size, entry } => recs.insert(
            1.min(recs.len()),
            Rec::Module(ModuleEvent {
                event: if *load { dep_profile::container::ModuleEventKind::Load } else { dep_profile::container::ModuleEventKind::Unload },
                // Never a real file: the symbolizer would open it.
                path: format!("/nonexistent/dep-fuzz/module-{base:x}"),
                base: *base,
                size: *size,
                build_id: None,
                entry: *entry,
            }),
        ),
        Edit::Thread(t) => recs.insert(
            1.min(recs.len()),
            Rec::Thread(ThreadEvent {
                event: [ThreadEventKind::Start, ThreadEventKind::End, ThreadEventKind::Spawn, ThreadEventKind::Unrecorded]
                    [t.kind as usize % 4],
                index: t.index,
                tid: t.tid,
                time_ns: 0,
                child_tid: t.child_tid,
                seq: t.seq,
                tls: t.tls,
                // An unrecorded stretch: before the chunk numbered like the sync record,
                // as long as the TLS pointer.
                chunk: t.seq.map(|s| s as u32),
                instructions: t.tls,
            }),
        ),
        Edit::TagFlip(c, pos, x) => {
            if let Some(c) = chunk(recs, *c) {
                let n = c.tags.len() / 2;
                if n > 0 {
                    let p = *pos as usize % n;
                    let w = u16::from_le_bytes([c.tags[2 * p], c.tags[2 * p + 1]]) ^ x;
                    c.tags[2 * p..2 * p + 2].copy_from_slice(&w.to_le_bytes());
                }
            }
        }
        Edit::TagInsert(c, pos, t) => {
            if let Some(c) = chunk(recs, *c) {
                splice_words(&mut c.tags, *pos, 0, &t.words(Width::W64));
            }
        }
        Edit::TagDelete(c, pos, n) => chunk(recs, *c).into_iter().for_each(|c| splice_words(&mut c.tags, *pos, *n as usize, &[])),
        Edit::MoveBlock(i, a) => {
            let new = a.get();
            let Some(b) = block(recs, *i) else { return };
            let old = std::mem::replace(&mut b.addr, new);
            for r in recs.iter_mut() {
                if let Rec::Chunk(c) = r {
                    edit_items(c, |items| {
                        for it in items.iter_mut() {
                            if *it == TagItem::Block(old) {
                                *it = TagItem::Block(new);
                            }
                        }
                    });
                }
            }
        }
        Edit::ItemInsert { chunk: c, pos, what } => {
            let item = match what {
                Item::TableBlock(b) => block(recs, *b).map(|b| TagItem::Block(b.addr)),
                Item::Block(a) => Some(TagItem::Block(a.get())),
                Item::Record(r) => r.escape().map(TagItem::Escape),
            };
            let (Some(item), Some(c)) = (item, chunk(recs, *c)) else { return };
            edit_items(c, |items| {
                let p = *pos as usize % (items.len() + 1);
                items.insert(p, item);
            });
        }
        Edit::ItemDelete(c, pos, n) => {
            if let Some(c) = chunk(recs, *c) {
                edit_items(c, |items| {
                    let p = *pos as usize % (items.len() + 1);
                    items.drain(p..(p + *n as usize).min(items.len()));
                });
            }
        }
        Edit::LongBlock(i, insn, n) => {
            if let Some(b) = block(recs, *i) {
                let insn = INSN_POOL[*insn as usize % INSN_POOL.len()];
                b.code = insn.repeat(2 * *n as usize);
                b.code.push(0xc3);
                b.insn_count = 2 * *n as u32 + 1;
            }
        }
        Edit::ValueFlip(c, pos, x) => chunk(recs, *c).into_iter().for_each(|c| flip(&mut c.values, *pos, *x)),
        Edit::ValueTruncate(c, len) => chunk(recs, *c).into_iter().for_each(|c| c.values.truncate(*len as usize % (c.values.len() + 1))),
        Edit::ValueInsert(c, pos, v) => {
            if let Some(c) = chunk(recs, *c) {
                let words = c.values.len() / 8;
                let p = 8 * (*pos as usize % (words + 1));
                c.values.splice(p..p, v.to_le_bytes());
            }
        }
        Edit::TruthFlip(c, pos, x) => chunk(recs, *c).into_iter().for_each(|c| flip(&mut c.truth, *pos, *x)),
        Edit::Chunk(c, f) => {
            if let Some(c) = chunk(recs, *c) {
                match *f {
                    ChunkField::Thread(t) => c.thread = t,
                    ChunkField::Seq(s) => c.seq = s,
                    ChunkField::Hi(h) => c.hi = h,
                    ChunkField::Status(s) => c.status = s,
                    ChunkField::Last(l) => c.last = l,
                    ChunkField::Reg(r, v) => c.regs[r as usize % NUM_REGS] = v,
                }
            }
        }
        Edit::DropRecord(i) => {
            if let Some(i) = at(*i, recs.len()) {
                recs.remove(i);
            }
        }
        Edit::DupRecord(i) => {
            if let Some(i) = at(*i, recs.len()) {
                recs.insert(i, recs[i].clone());
            }
        }
        Edit::SwapRecords(a, b) => {
            if let (Some(a), Some(b)) = (at(*a, recs.len()), at(*b, recs.len())) {
                recs.swap(a, b);
            }
        }
        Edit::HeaderVersion(_) | Edit::HeaderWidth(_) | Edit::PayloadFlip(..) | Edit::RawFlip(..) | Edit::Truncate(_) => {}
    }
}

/// A file for this process's profile, in memory where /dev/shm exists.
pub fn scratch(name: &str) -> PathBuf {
    let dir = if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    dir.join(format!("dep-fuzz-{}-{name}", std::process::id()))
}

/// Writes `bytes` to this process's scratch profile and opens it.
pub fn open(bytes: &[u8]) -> Option<dep_profile::container::Profile> {
    let path = scratch("profile.dep");
    std::fs::write(&path, bytes).expect("writing the scratch profile");
    dep_profile::container::Profile::open(&path).ok()
}

/// Seeds for the raw-bytes targets: `cargo +nightly test --release -- --ignored write_seeds`
/// in fuzz/ writes simulated profiles to corpus/container and DCFG pairs to
/// corpus/dcfg_check (then minimise with `cargo fuzz cmin`).
#[cfg(test)]
mod seeds {
    use super::*;
    use dep_profile::simulate::{program_path, random_program};

    fn simulated(seed: u64, events: bool, records: bool) -> Vec<u8> {
        let mut rng = Rng::new(seed);
        let mut prog = random_program(&mut rng, 3);
        let paths: Vec<_> = (0..1 + seed as usize % 2).map(|_| program_path(&mut rng, &mut prog, 40, events)).collect();
        write_profile_with(Vec::new(), Machine::x86_64(2696), &prog.code, &paths, seed, records).unwrap()
    }

    /// The generator is worth fuzzing with: inputs without edits are profiles whose
    /// recovery equals their truth, and they have blocks, threads and references.
    #[test]
    fn unedited_inputs_recover_to_their_truth() {
        use arbitrary::{Arbitrary, Unstructured};
        use dep_recover::{Format, Recovery, Renderer, Source};
        let mut refs = 0;
        for seed in 0..200u64 {
            let mut rng = Rng::new(seed);
            let bytes: Vec<u8> = (0..2000).map(|_| rng.next() as u8).collect();
            let mut input = Input::arbitrary(&mut Unstructured::new(&bytes)).unwrap();
            input.edits.clear();
            let p = open(&input.build()).unwrap();
            let rec = Recovery::new(&p, 1);
            let render = |source| {
                let mut out = Vec::new();
                let mut r = Renderer::new(Format::Text, &mut out);
                rec.events(source).run(&mut r).unwrap();
                r.into_inner().unwrap();
                out
            };
            let got = render(Source::Dep);
            assert!(got == render(Source::Truth), "seed {seed}: recovery differs from the truth");
            refs += got.split(|&b| b == b'\n').count();
        }
        assert!(refs > 10_000, "only {refs} lines recovered");
    }

    #[test]
    #[ignore]
    fn write_seeds() {
        use dep_dcfg_out::{dcfg, program::symbols::Symbolizer};
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
        let (c, d) = (root.join("container"), root.join("dcfg_check"));
        std::fs::create_dir_all(&c).unwrap();
        std::fs::create_dir_all(&d).unwrap();
        for seed in 0..24u64 {
            let bytes = simulated(seed, seed % 3 != 0, seed % 2 == 1);
            std::fs::write(c.join(format!("sim-{seed}.dep")), &bytes).unwrap();
            let p = open(&bytes).unwrap();
            let rec = dep_recover::Recovery::new(&p, 1);
            let mut ids = dcfg::Ids::default();
            let procs = [dcfg::Process::build(&rec, &mut ids, &|_| {}).unwrap()];
            let mut out = Vec::new();
            dcfg::write_dcfg(&mut out, &procs, &[Symbolizer::new(&p.modules)]).unwrap();
            out.push(0);
            dcfg::write_trace(&mut out, &procs, &|_| {}).unwrap();
            std::fs::write(d.join(format!("sim-{seed}.json")), out).unwrap();
        }
    }
}
