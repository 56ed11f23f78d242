//! Reads and checks a UMT indexed binary trace in place: each file mapped read-only, every
//! field read with bounds-checked little-endian loads (nothing is aligned), nothing used
//! before it is checked. Layouts are the spec's (/work/shared/specs/umt-binary-trace-format.md)
//! with the digest's errata (Mem1BaseSlot at 67, context_map.itable without a generic
//! header); [`check`] validates a whole trace and counts what it holds.

use memmap2::Mmap;
use std::fmt;
use std::fs::File;
use std::io::{self, ErrorKind};
use std::ops::{Deref, Range};
use std::path::Path;

const EXEC_VTABLE: &str = "exec.vtable";
const EXEC_OFFSETS: &str = "exec.offsets";
const PREV_NEXT: &str = "exec.prev_next.column";
const INS: &str = "ins.itable";
const THREAD: &str = "thread.itable";
const MODULE: &str = "module.itable";
const CONTEXT_MAP: &str = "context_map.itable";
const ADDRESS_SPACE: &str = "address_space.itable";
const SYSCALL_VTABLE: &str = "syscall.vtable";
const SYSCALL_OFFSETS: &str = "syscall.offsets";

/// Bytes of the exec.vtable and syscall.vtable headers.
const VTABLE_HEADER: u64 = 16;
/// Size of context_map.itable.
pub const CONTEXT_MAP_SIZE: usize = 17424;
/// Registers per context-map array.
pub const CONTEXT_REGS: u16 = 512;
/// Special slot indices (spec 7.3.3).
pub const SLOT_IMM0: u8 = 0xfd;
pub const SLOT_IMM1: u8 = 0xfe;
pub const SLOT_NA: u8 = 0xff;
/// Special operand names (spec 7.3.3).
pub const REG_MEM0: u16 = 0xffff;
pub const REG_MEM1: u16 = 0xfffe;
pub const REG_AGEN: u16 = 0xfffd;
/// execRec.Flags bit: a conditional instruction that did not execute.
pub const FLAG_NOT_EXECUTED: u8 = 0x04;
/// Record type names, by execRec.Type (7 is undefined).
const TYPE_NAMES: [&str; 12] = [
    "instruction",
    "thread begin",
    "thread end",
    "application end",
    "syscall entry",
    "syscall exit",
    "skipped syscall exit",
    "",
    "apc context change",
    "exception context change",
    "callback context change",
    "unknown context change",
];

/// What is wrong with a trace, naming the file (and record or row) and the problem.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A file could not be opened or mapped.
    #[error("{path}: {err}")]
    Open { path: String, err: io::Error },
    /// A file is shorter than its header or index needs.
    #[error("{file}: {len} bytes, {need} needed")]
    TooShort { file: &'static str, need: u64, len: u64 },
    /// A file's length is not the one its header implies.
    #[error("{file}: {len} bytes, {want} expected")]
    Size { file: &'static str, want: u64, len: u64 },
    /// A header field holds a value the format does not define.
    #[error("{file}: header: {what}")]
    Header { file: &'static str, what: String },
    /// A count, index or file pointer lies outside what it must lie in.
    #[error("{file}: {what} {value} out of range")]
    OutOfRange { file: &'static str, what: String, value: i128 },
    /// An execution record is malformed.
    #[error("exec.vtable: record {eid}: {what}")]
    Record { eid: u64, what: String },
    /// A record's thread links are wrong.
    #[error("exec.prev_next.column: record {eid}: {what}")]
    Link { eid: u64, what: String },
    /// A thread's chain of records disagrees with its row.
    #[error("thread.itable: thread {thread}: {what}")]
    Thread { thread: u32, what: String },
    /// A row of a fixed table is malformed.
    #[error("{file}: row {row}: {what}")]
    Row { file: &'static str, row: u64, what: String },
    /// An instruction's decodedIns is malformed.
    #[error("ins.itable: row {ins}: decodedIns: {what}")]
    Decoded { ins: u64, what: String },
}

type Result<T> = std::result::Result<T, ReadError>;

/// `N` bytes at `at`, or None past the end.
fn le<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// `len` bytes at `from` (a file value, maybe negative), or None outside `b`.
fn span(b: &[u8], from: i64, len: u64) -> Option<&[u8]> {
    let from = usize::try_from(from).ok()?;
    b.get(from..from.checked_add(usize::try_from(len).ok()?)?)
}

/// Fields of one file's bytes; a field past the end is `TooShort` naming the file.
#[derive(Clone, Copy)]
struct Fields<'a> {
    b: &'a [u8],
    file: &'static str,
}

macro_rules! field {
    ($name:ident, $t:ty) => {
        fn $name(&self, at: usize) -> Result<$t> {
            le(self.b, at).map(<$t>::from_le_bytes).ok_or(ReadError::TooShort {
                file: self.file,
                need: (at as u64).saturating_add(std::mem::size_of::<$t>() as u64),
                len: self.b.len() as u64,
            })
        }
    };
}

impl Fields<'_> {
    field!(u8, u8);
    field!(u16, u16);
    field!(i16, i16);
    field!(u32, u32);
    field!(i32, i32);
    field!(u64, u64);
    field!(i64, i64);
}

/// A file's bytes: its read-only map, or nothing for an empty file (which cannot be mapped).
enum Bytes {
    Map(Mmap),
    Empty,
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Map(m) => m,
            Bytes::Empty => &[],
        }
    }
}

/// Maps `dir/file`; None when it does not exist and `optional`.
fn map_file(dir: &Path, file: &'static str, optional: bool) -> Result<Option<Bytes>> {
    let path = dir.join(file);
    let open = |err| ReadError::Open { path: path.display().to_string(), err };
    let meta = match std::fs::metadata(&path) {
        Err(e) if optional && e.kind() == ErrorKind::NotFound => return Ok(None),
        m => m.map_err(open)?,
    };
    // Refused before opening: opening a FIFO would block.
    if !meta.is_file() {
        return Err(open(io::Error::new(ErrorKind::InvalidInput, "not a regular file")));
    }
    let f = File::open(&path).map_err(open)?;
    if f.metadata().map_err(open)?.len() == 0 {
        return Ok(Some(Bytes::Empty));
    }
    // SAFETY: the map is only read, through checked slices within its length. A trace is
    // written once and then only read; another process truncating it while mapped would
    // make a read raise SIGBUS, as for every mapped reader in dep.
    let map = unsafe { Mmap::map(&f) }.map_err(open)?;
    Ok(Some(Bytes::Map(map)))
}

fn must_map(dir: &Path, file: &'static str) -> Result<Bytes> {
    map_file(dir, file, false)?
        .ok_or_else(|| ReadError::Open { path: dir.join(file).display().to_string(), err: io::Error::from(ErrorKind::NotFound) })
}

/// A fixed-size table (spec 4.2.1): its rows in place, and its extra area when it has one.
struct Table {
    file: &'static str,
    bytes: Bytes,
    rows: u64,
    row_size: usize,
    start: usize,
    extra: Range<usize>,
}

impl Table {
    /// Maps and checks the header: HeaderVer 0, a known RecordVer, RowSize `row_size`, the
    /// rows (and the extra area after them) inside the file.
    fn open(dir: &Path, file: &'static str, row_size: usize, versions: &[u32], has_extra: bool) -> Result<Table> {
        let bytes = must_map(dir, file)?;
        let len = bytes.len() as u64;
        let header: u64 = if has_extra { 48 } else { 32 };
        if len < header {
            return Err(ReadError::TooShort { file, need: header, len });
        }
        let f = Fields { b: &bytes, file };
        let header_err = |what: String| ReadError::Header { file, what };
        let out = |what: &str, value: i64| ReadError::OutOfRange { file, what: what.to_string(), value: value.into() };
        let hv = f.u32(0)?;
        if hv != 0 {
            return Err(header_err(format!("HeaderVer {hv}, only 0 is defined")));
        }
        let rv = f.u32(4)?;
        if !versions.contains(&rv) {
            return Err(header_err(format!("RecordVer {rv}, known: {versions:?}")));
        }
        let rows = f.i64(8)?;
        let rs = f.i64(16)?;
        if rs != row_size as i64 {
            return Err(header_err(format!("RowSize {rs}, the rows are {row_size} bytes")));
        }
        let table = f.i64(24)?;
        if table < header as i64 {
            return Err(out("TableFP", table));
        }
        let rows_u = u64::try_from(rows).map_err(|_| out("RowCount", rows))?;
        let end = rows_u.checked_mul(row_size as u64).and_then(|n| n.checked_add(table as u64)).ok_or_else(|| out("RowCount", rows))?;
        if end > len {
            return Err(ReadError::TooShort { file, need: end, len });
        }
        let mut extra = 0..0;
        if has_extra {
            let efp = f.i64(32)?;
            let esize = f.i64(40)?;
            if efp < 0 || (efp as u64) < end {
                return Err(out("ExtraFP", efp));
            }
            let esize_u = u64::try_from(esize).map_err(|_| out("ExtraSize", esize))?;
            let eend = (efp as u64).checked_add(esize_u).ok_or_else(|| out("ExtraSize", esize))?;
            if eend > len {
                return Err(ReadError::TooShort { file, need: eend, len });
            }
            // Both ≤ len, a usize.
            extra = efp as usize..eend as usize;
        }
        Ok(Table { file, bytes, rows: rows_u, row_size, start: table as usize, extra })
    }

    /// Row `i`'s bytes.
    fn row(&self, i: u64) -> Result<&[u8]> {
        let out = || ReadError::OutOfRange { file: self.file, what: "row".into(), value: i.into() };
        if i >= self.rows {
            return Err(out());
        }
        let at =
            usize::try_from(i).ok().and_then(|i| i.checked_mul(self.row_size)).and_then(|o| o.checked_add(self.start)).ok_or_else(out)?;
        self.bytes.get(at..at.checked_add(self.row_size).ok_or_else(out)?).ok_or_else(out)
    }

    fn extra(&self) -> &[u8] {
        self.bytes.get(self.extra.clone()).unwrap_or(&[])
    }
}

/// cStr (spec 5) at `fp` in `b`: length, text, NUL; the text must be UTF-8.
fn cstr(b: &[u8], fp: i64) -> std::result::Result<&str, String> {
    let len = span(b, fp, 2).and_then(|s| le(s, 0)).map(i16::from_le_bytes).ok_or(format!("cStr at {fp} past the area"))?;
    let body = u64::try_from(len)
        .ok()
        .and_then(|n| span(b, fp.checked_add(2)?, n + 1))
        .ok_or(format!("cStr at {fp} of length {len} past the area"))?;
    match body.split_last() {
        Some((0, text)) => std::str::from_utf8(text).map_err(|_| format!("cStr at {fp} is not UTF-8")),
        _ => Err(format!("cStr at {fp} has no NUL terminator")),
    }
}

/// uStr (spec 5) at `fp` in `b`, decoded leniently (unpaired surrogates replaced).
fn ustr(b: &[u8], fp: i64) -> std::result::Result<String, String> {
    let len = span(b, fp, 2).and_then(|s| le(s, 0)).map(i16::from_le_bytes).ok_or(format!("uStr at {fp} past the area"))?;
    let body = u64::try_from(len)
        .ok()
        .and_then(|n| span(b, fp.checked_add(2)?, (n + 1) * 2))
        .ok_or(format!("uStr at {fp} of length {len} past the area"))?;
    let units = body.chunks_exact(2).map(|c| le(c, 0).map_or(0, u16::from_le_bytes));
    let mut text: Vec<u16> = units.collect();
    if text.pop() != Some(0) {
        return Err(format!("uStr at {fp} has no NUL terminator"));
    }
    Ok(char::decode_utf16(text).map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER)).collect())
}

/// A local context slot (spec 7.3.3 lcSlot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub reg_name: u16,
    pub common_reg_name: u16,
    pub value_size: u16,
    pub offset: u16,
    pub addr_width: u8,
}

impl Slot {
    fn parse(c: &[u8]) -> Option<Slot> {
        let u16_at = |at| le(c, at).map(u16::from_le_bytes);
        Some(Slot { reg_name: u16_at(0)?, common_reg_name: u16_at(2)?, value_size: u16_at(4)?, offset: u16_at(6)?, addr_width: *c.get(8)? })
    }

    /// A memory operand's slot: an 8-byte address, then the value (an AGEN slot holds only
    /// its address, like a register).
    pub fn is_memory(&self) -> bool {
        self.addr_width > 0 && self.reg_name != REG_AGEN
    }

    /// Bytes the slot takes in the LC buffer.
    pub fn extent(&self) -> u32 {
        u32::from(self.value_size) + if self.is_memory() { 8 } else { 0 }
    }
}

/// An explicit operand (spec 7.3.3 expOper).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpOper {
    pub reg_name: u16,
    pub size: u16,
    pub flags: u8,
    pub before_slot: u8,
    pub after_slot: u8,
    pub before_offset: u8,
    pub after_offset: u8,
}

impl ExpOper {
    fn parse(c: &[u8]) -> Option<ExpOper> {
        let u16_at = |at| le(c, at).map(u16::from_le_bytes);
        Some(ExpOper {
            reg_name: u16_at(0)?,
            size: u16_at(2)?,
            flags: *c.get(4)?,
            before_slot: *c.get(5)?,
            after_slot: *c.get(6)?,
            before_offset: *c.get(7)?,
            after_offset: *c.get(8)?,
        })
    }
}

/// An instruction's decoded form (spec 7.3.3 decodedIns), checked.
#[derive(Clone, Copy, Debug)]
pub struct Decoded<'a> {
    pub category: u16,
    pub mnemonic: u16,
    pub form: u16,
    pub flags: u8,
    pub eff_oper_size: u8,
    pub eff_addr_size: u8,
    pub lc_size: u16,
    pub first_out_slot: u8,
    pub first_after_slot: u8,
    pub lc_count: u8,
    pub mem0_seg_slot: u8,
    pub mem0_base_slot: u8,
    pub mem0_scale: u8,
    pub mem0_index_slot: u8,
    pub mem1_base_slot: u8,
    pub const_slots: [u64; 2],
    exps: &'a [u8],
    slots: &'a [u8],
}

impl<'a> Decoded<'a> {
    /// Parses and checks the decodedIns at `fp` in the extra area, for ins row `ins`.
    fn parse(ins: u64, extra: &'a [u8], fp: i64) -> Result<Decoded<'a>> {
        let bad = |what: String| ReadError::Decoded { ins, what };
        let head = span(extra, fp, 88).ok_or_else(|| bad(format!("DecodedFP {fp}: 88 bytes past the extra area")))?;
        let f = Fields { b: head, file: INS };
        let exp_count = f.u8(7)?;
        if exp_count > 4 {
            return Err(bad(format!("ExpCount {exp_count} above 4")));
        }
        let lc_size = u16::try_from(f.i16(58)?).map_err(|_| bad("negative LCSize".into()))?;
        let (first_out, first_after, lc_count) = (f.u8(60)?, f.u8(61)?, f.u8(62)?);
        if !(first_out <= first_after && first_after <= lc_count) {
            return Err(bad(format!("FirstOutSlot {first_out}, FirstAfterSlot {first_after}, LCCount {lc_count} out of order")));
        }
        if lc_count > SLOT_IMM0 {
            return Err(bad(format!("LCCount {lc_count} overlaps the special slot numbers")));
        }
        let slots = fp
            .checked_add(88)
            .and_then(|at| span(extra, at, 12 * u64::from(lc_count)))
            .ok_or_else(|| bad(format!("88 + 12 * LCCount {lc_count} bytes at {fp} past the extra area")))?;
        let valid = |s: u8| s < lc_count || s >= SLOT_IMM0;
        let d = Decoded {
            category: f.u16(0)?,
            mnemonic: f.u16(2)?,
            form: f.u16(4)?,
            flags: f.u8(6)?,
            eff_oper_size: f.u8(56)?,
            eff_addr_size: f.u8(57)?,
            lc_size,
            first_out_slot: first_out,
            first_after_slot: first_after,
            lc_count,
            mem0_seg_slot: f.u8(63)?,
            mem0_base_slot: f.u8(64)?,
            mem0_scale: f.u8(65)?,
            mem0_index_slot: f.u8(66)?,
            mem1_base_slot: f.u8(67)?,
            const_slots: [f.u64(72)?, f.u64(80)?],
            exps: head.get(8..8 + 12 * usize::from(exp_count)).unwrap_or(&[]),
            slots,
        };
        for (name, s) in [
            ("Mem0SegSlot", d.mem0_seg_slot),
            ("Mem0BaseSlot", d.mem0_base_slot),
            ("Mem0IndexSlot", d.mem0_index_slot),
            ("Mem1BaseSlot", d.mem1_base_slot),
        ] {
            if !valid(s) {
                return Err(bad(format!("{name} {s} is no slot")));
            }
        }
        if !matches!(d.mem0_scale, 0 | 1 | 2 | 4 | 8) {
            return Err(bad(format!("Mem0Scale {}", d.mem0_scale)));
        }
        for (i, c) in slots.chunks_exact(12).enumerate() {
            let s = Slot::parse(c).ok_or_else(|| bad(format!("slot {i} cut short")))?;
            if s.value_size > i16::MAX as u16 || s.offset > i16::MAX as u16 || s.addr_width > 8 {
                return Err(bad(format!(
                    "slot {i}: ValueSize {}, Offset {}, AddrWidth {}",
                    s.value_size as i16, s.offset as i16, s.addr_width
                )));
            }
            if u32::from(s.offset) + s.extent() > u32::from(lc_size) {
                return Err(bad(format!("slot {i}: Offset {} + {} bytes past LCSize {lc_size}", s.offset, s.extent())));
            }
        }
        for (i, o) in d.explicit().enumerate() {
            if o.before_slot == SLOT_NA {
                return Err(bad(format!("operand {i}: BeforeSlot is SLOT_NA")));
            }
            for (which, s, off) in [("before", o.before_slot, o.before_offset), ("after", o.after_slot, o.after_offset)] {
                if !valid(s) {
                    return Err(bad(format!("operand {i}: {which} slot {s} is no slot")));
                }
                let room = match d.slot(s) {
                    Some(slot) => slot.extent(),
                    None if s == SLOT_NA => continue,
                    None => 8,
                };
                if u32::from(off) + u32::from(o.size) > room {
                    return Err(bad(format!("operand {i}: {which} offset {off} + size {} past its slot's {room} bytes", o.size)));
                }
            }
        }
        Ok(d)
    }

    /// Slot `i` (None for the special indices and past LCCount).
    pub fn slot(&self, i: u8) -> Option<Slot> {
        let at = 12 * usize::from(i);
        self.slots.get(at..at + 12).and_then(Slot::parse)
    }

    /// The LCCount slots in order.
    pub fn slots(&self) -> impl Iterator<Item = Slot> + 'a {
        self.slots.chunks_exact(12).filter_map(Slot::parse)
    }

    /// The ExpCount explicit operands in order.
    pub fn explicit(&self) -> impl Iterator<Item = ExpOper> + 'a {
        self.exps.chunks_exact(12).filter_map(ExpOper::parse)
    }
}

/// A row of ins.itable (spec 7.3.3 insRec), checked, with its decodedIns and disassembly.
#[derive(Clone, Copy, Debug)]
pub struct InsRow<'a> {
    pub id: u64,
    /// insRec.Type: 0 normal, 1 software interrupt, 2–6 system calls, 8 NOP, 9 prefetch.
    pub kind: u8,
    pub cs64: bool,
    /// ModuleID, None for floating code (-1).
    pub module: Option<u32>,
    pub address: u64,
    /// The CodeSize valid code bytes.
    pub code: &'a [u8],
    pub disasm: &'a str,
    pub decoded: Decoded<'a>,
}

/// A row of thread.itable (spec 10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadRow {
    pub id: u32,
    /// WinTID: the Linux tid in dep's traces.
    pub tid: u32,
    pub tib: u64,
    pub first_eid: Option<u64>,
    pub last_eid: Option<u64>,
    pub rec_count: u64,
}

/// A row of module.itable (spec 9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleRow {
    pub load_eid: u64,
    pub unload_eid: Option<u64>,
    pub start: u64,
    /// The last byte (inclusive).
    pub end: u64,
    pub name: String,
    pub device: String,
}

/// A row of address_space.itable (spec 12): pages `first..=last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressRange {
    pub first: u64,
    pub last: u64,
}

impl AddressRange {
    /// Its 4 KiB pages.
    pub fn pages(&self) -> u64 {
        self.last.saturating_sub(self.first) / 4096 + 1
    }
}

/// A register's place in a context dump (spec 11.2 regInfo).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegInfo {
    /// 0xffff when absent.
    pub offset: u16,
    /// 0 when absent.
    pub size: u8,
    pub eff_largest: u16,
}

/// context_map.itable (spec 11.2), checked.
#[derive(Clone, Copy)]
pub struct ContextMap<'a> {
    b: &'a [u8],
}

impl<'a> ContextMap<'a> {
    fn check(b: &'a [u8]) -> Result<ContextMap<'a>> {
        if b.len() != CONTEXT_MAP_SIZE {
            return Err(ReadError::Size { file: CONTEXT_MAP, want: CONTEXT_MAP_SIZE as u64, len: b.len() as u64 });
        }
        let m = ContextMap { b };
        if m.elem_count() > CONTEXT_REGS {
            return Err(ReadError::Header { file: CONTEXT_MAP, what: format!("ElemCount {} above 512", m.elem_count()) });
        }
        let bad = |reg: u16, what: String| ReadError::Row { file: CONTEXT_MAP, row: reg.into(), what };
        for reg in 0..m.elem_count() {
            m.name(reg).ok_or_else(|| bad(reg, "name not NUL-terminated UTF-8 within 16 bytes".into()))?;
            if m.common_name(reg).is_none_or(|c| c >= CONTEXT_REGS) {
                return Err(bad(reg, "CommonName is no register".into()));
            }
            for (mode, info) in [("32", m.reg32(reg)), ("64", m.reg64(reg))] {
                let info = info.ok_or_else(|| bad(reg, format!("RegMap{mode} cut short")))?;
                if info.eff_largest >= CONTEXT_REGS {
                    return Err(bad(reg, format!("RegMap{mode} EffLargest {} is no register", info.eff_largest as i16)));
                }
                let present = info.offset != 0xffff;
                if present && u32::from(info.offset) + u32::from(info.size) > u32::from(m.dump_size()) {
                    return Err(bad(
                        reg,
                        format!("RegMap{mode} Offset {} + Size {} past DumpSize {}", info.offset, info.size, m.dump_size()),
                    ));
                }
                if !present && info.size != 0 {
                    return Err(bad(reg, format!("RegMap{mode} absent with Size {}", info.size)));
                }
            }
        }
        Ok(m)
    }

    fn u16_at(&self, at: usize) -> Option<u16> {
        le(self.b, at).map(u16::from_le_bytes)
    }

    /// Size of a register dump.
    pub fn dump_size(&self) -> u16 {
        self.u16_at(0).unwrap_or(0)
    }

    /// Meaningful elements of each array.
    pub fn elem_count(&self) -> u16 {
        self.u16_at(2).unwrap_or(0)
    }

    /// The common register name of `reg`.
    pub fn common_name(&self, reg: u16) -> Option<u16> {
        (reg < CONTEXT_REGS).then(|| self.u16_at(16 + 2 * usize::from(reg)))?
    }

    /// The textual name of `reg`.
    pub fn name(&self, reg: u16) -> Option<&'a str> {
        let at = 1040 + 16 * usize::from(reg);
        let raw = self.b.get(at..at + 16).filter(|_| reg < CONTEXT_REGS)?;
        let len = raw.iter().position(|&c| c == 0)?;
        std::str::from_utf8(raw.get(..len)?).ok()
    }

    fn reg_info(&self, base: usize, reg: u16) -> Option<RegInfo> {
        let at = base + 8 * usize::from(reg);
        let r = self.b.get(at..at + 8).filter(|_| reg < CONTEXT_REGS)?;
        Some(RegInfo { offset: le(r, 0).map(u16::from_le_bytes)?, size: *r.get(2)?, eff_largest: le(r, 4).map(u16::from_le_bytes)? })
    }

    /// Where `reg` is in a 32-bit mode dump.
    pub fn reg32(&self, reg: u16) -> Option<RegInfo> {
        self.reg_info(9232, reg)
    }

    /// Where `reg` is in a 64-bit mode dump.
    pub fn reg64(&self, reg: u16) -> Option<RegInfo> {
        self.reg_info(13328, reg)
    }
}

/// A checked rmContext (spec 6.4): the register dump and memory blocks of a record.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    bytes: &'a [u8],
    mem_count: u32,
    regs: &'a [u8],
}

/// One memory block of an rmContext.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextMem<'a> {
    pub address: u64,
    pub data: &'a [u8],
}

impl<'a> Context<'a> {
    /// Checks the rmContext starting `c` (which runs to the record's end) for record `eid`.
    fn parse(eid: u64, c: &'a [u8], dump_size: u16) -> Result<Context<'a>> {
        let bad = |what: String| ReadError::Record { eid, what };
        if c.len() < 16 {
            return Err(bad(format!("rmContext of {} bytes, 16 needed", c.len())));
        }
        let f = Fields { b: c, file: EXEC_VTABLE };
        let count = f.i32(0)?;
        let mem_count = u32::try_from(count).map_err(|_| bad(format!("MemCount {count}")))?;
        if 16 + 24 * u64::from(mem_count) > c.len() as u64 {
            return Err(bad(format!("MemCount {mem_count} entries past the record's end")));
        }
        let regs_fp = f.i64(8)?;
        let regs = span(c, regs_fp, dump_size.into())
            .ok_or_else(|| bad(format!("RegsFP {regs_fp} + DumpSize {dump_size} past the record's end")))?;
        let ctx = Context { bytes: c, mem_count, regs };
        for i in 0..mem_count {
            let at = 16 + 24 * i as usize;
            let (size, fp) = (f.i64(at + 8)?, f.i64(at + 16)?);
            let ok = u64::try_from(size).ok().and_then(|n| span(c, fp, n));
            ok.ok_or_else(|| bad(format!("context memory {i}: DataFP {fp} + Size {size} past the record's end")))?;
        }
        Ok(ctx)
    }

    /// The register dump (context_map DumpSize bytes).
    pub fn regs(&self) -> &'a [u8] {
        self.regs
    }

    /// Number of memory blocks.
    pub fn mem_count(&self) -> u32 {
        self.mem_count
    }

    /// Memory block `i`.
    pub fn mem(&self, i: u32) -> Option<ContextMem<'a>> {
        let at = 16 + 24 * usize::try_from(i).ok().filter(|_| i < self.mem_count)?;
        let e = self.bytes.get(at..at + 24)?;
        let size = u64::try_from(i64::from_le_bytes(le(e, 8)?)).ok()?;
        Some(ContextMem { address: u64::from_le_bytes(le(e, 0)?), data: span(self.bytes, i64::from_le_bytes(le(e, 16)?), size)? })
    }
}

/// Why a context-change record (types 8–11) was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextChange {
    Apc,
    Exception,
    Callback,
    Unknown,
}

/// An execution record's type and type-dependent data (spec 6.4).
#[derive(Clone, Copy, Debug)]
pub enum RecordKind<'a> {
    /// Type 0: the executed instruction's row and its LC buffer.
    Instruction {
        ins_id: u64,
        lc: &'a [u8],
    },
    ThreadBegin {
        context: Context<'a>,
    },
    ThreadEnd {
        exit: i32,
    },
    AppEnd {
        exit: i32,
    },
    SyscallEntry {
        syscall: u64,
        context: Context<'a>,
    },
    /// Type 5; `syscall` None when no entry matches (-1).
    SyscallExit {
        syscall: Option<u64>,
        context: Context<'a>,
    },
    SkippedSyscallExit {
        syscall: u64,
    },
    ContextChange {
        kind: ContextChange,
        context: Context<'a>,
    },
}

impl RecordKind<'_> {
    /// execRec.Type.
    pub fn code(&self) -> u8 {
        match self {
            RecordKind::Instruction { .. } => 0,
            RecordKind::ThreadBegin { .. } => 1,
            RecordKind::ThreadEnd { .. } => 2,
            RecordKind::AppEnd { .. } => 3,
            RecordKind::SyscallEntry { .. } => 4,
            RecordKind::SyscallExit { .. } => 5,
            RecordKind::SkippedSyscallExit { .. } => 6,
            RecordKind::ContextChange { kind, .. } => 8 + *kind as u8,
        }
    }
}

/// A checked execution record.
#[derive(Clone, Copy, Debug)]
pub struct Record<'a> {
    pub eid: u64,
    pub thread: u32,
    pub flags: u8,
    pub kind: RecordKind<'a>,
    /// The whole record.
    pub bytes: &'a [u8],
    ins: Option<InsRow<'a>>,
}

impl<'a> Record<'a> {
    /// The instruction row of an instruction record.
    pub fn ins(&self) -> Option<&InsRow<'a>> {
        self.ins.as_ref()
    }

    /// The memory references of an instruction record, as dep's writer puts them: the memory
    /// slots of the before group `[0, FirstOutSlot)` as reads, then those of the after group
    /// `[FirstAfterSlot, LCCount)` as writes, each in slot order; none for other records and
    /// for a conditional that did not execute (flag 0x04).
    pub fn references(&self) -> Refs<'a> {
        match (self.kind, self.ins) {
            (RecordKind::Instruction { lc, .. }, Some(ins)) if self.flags & FLAG_NOT_EXECUTED == 0 => {
                let d = ins.decoded;
                Refs { lc, decoded: Some(d), pc: ins.address, slots: (0..d.first_out_slot).chain(d.first_after_slot..d.lc_count) }
            }
            _ => Refs { lc: &[], decoded: None, pc: 0, slots: (0..0).chain(0..0) },
        }
    }
}

/// A memory reference of an instruction record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ref {
    pub pc: u64,
    pub write: bool,
    pub addr: u64,
    pub size: u32,
}

/// The memory references of a record (see [`Record::references`]).
pub struct Refs<'a> {
    lc: &'a [u8],
    decoded: Option<Decoded<'a>>,
    pc: u64,
    slots: std::iter::Chain<Range<u8>, Range<u8>>,
}

impl Iterator for Refs<'_> {
    type Item = Ref;
    fn next(&mut self) -> Option<Ref> {
        let d = self.decoded?;
        loop {
            let i = self.slots.next()?;
            let Some(s) = d.slot(i).filter(Slot::is_memory) else { continue };
            if let Some(addr) = le(self.lc, s.offset.into()).map(u64::from_le_bytes) {
                return Some(Ref { pc: self.pc, write: i >= d.first_after_slot, addr, size: s.value_size.into() });
            }
        }
    }
}

/// An open trace: every file mapped and its header and bounds checked; records, rows and
/// links are checked as they are read.
pub struct Trace {
    vtable: Bytes,
    offsets: Bytes,
    prev_next: Bytes,
    records: u64,
    version: u32,
    ins: Table,
    threads: Table,
    modules: Table,
    ranges: Table,
    context: Bytes,
    dump_size: u16,
    syscalls: Option<(Bytes, Bytes)>,
    syscall_count: u64,
}

impl Trace {
    /// Maps the trace's files in `dir` and checks their headers and table bounds.
    pub fn open(dir: &Path) -> Result<Trace> {
        let vtable = must_map(dir, EXEC_VTABLE)?;
        let vlen = vtable.len() as u64;
        if vlen < VTABLE_HEADER {
            return Err(ReadError::TooShort { file: EXEC_VTABLE, need: VTABLE_HEADER, len: vlen });
        }
        let f = Fields { b: &vtable, file: EXEC_VTABLE };
        let version = f.u32(0)?;
        if version > 1 {
            return Err(ReadError::Header { file: EXEC_VTABLE, what: format!("Version {version}, known: 0, 1") });
        }
        let count = f.i64(8)?;
        let bad_count = || ReadError::OutOfRange { file: EXEC_VTABLE, what: "RecordCount".into(), value: count.into() };
        let records = u64::try_from(count).map_err(|_| bad_count())?;
        let offsets = must_map(dir, EXEC_OFFSETS)?;
        let want = records.checked_add(1).and_then(|n| n.checked_mul(8)).ok_or_else(bad_count)?;
        if offsets.len() as u64 != want {
            return Err(ReadError::Size { file: EXEC_OFFSETS, want, len: offsets.len() as u64 });
        }
        let prev_next = must_map(dir, PREV_NEXT)?;
        let want = records.checked_mul(16).ok_or_else(bad_count)?;
        if prev_next.len() as u64 != want {
            return Err(ReadError::Size { file: PREV_NEXT, want, len: prev_next.len() as u64 });
        }
        let o = Fields { b: &offsets, file: EXEC_OFFSETS };
        let (first, last) = (o.i64(0)?, o.i64(offsets.len() - 8)?);
        if first < VTABLE_HEADER as i64 {
            return Err(ReadError::OutOfRange { file: EXEC_OFFSETS, what: "Offset[0]".into(), value: first.into() });
        }
        if last < first {
            return Err(ReadError::OutOfRange { file: EXEC_OFFSETS, what: format!("Offset[{records}]"), value: last.into() });
        }
        if last as u64 > vlen {
            return Err(ReadError::TooShort { file: EXEC_VTABLE, need: last as u64, len: vlen });
        }

        let ins = Table::open(dir, INS, 64, &[0, 1], true)?;
        let threads = Table::open(dir, THREAD, 48, &[0], false)?;
        let modules = Table::open(dir, MODULE, 48, &[0], true)?;
        let ranges = Table::open(dir, ADDRESS_SPACE, 16, &[0], false)?;
        let context = must_map(dir, CONTEXT_MAP)?;
        let dump_size = ContextMap::check(&context)?.dump_size();

        let mut syscall_count = 0;
        let syscalls = match map_file(dir, SYSCALL_VTABLE, true)? {
            None => None,
            Some(sv) => {
                let len = sv.len() as u64;
                if len < VTABLE_HEADER {
                    return Err(ReadError::TooShort { file: SYSCALL_VTABLE, need: VTABLE_HEADER, len });
                }
                let f = Fields { b: &sv, file: SYSCALL_VTABLE };
                let (v, ids, n) = (f.u32(0)?, f.u32(4)?, f.i64(8)?);
                if v != 0 || ids > 1 {
                    return Err(ReadError::Header {
                        file: SYSCALL_VTABLE,
                        what: format!("Version {v}, UnifiedIDsVer {ids}; known: 0, and 0 or 1"),
                    });
                }
                let out = || ReadError::OutOfRange { file: SYSCALL_VTABLE, what: "RecordCount".into(), value: n.into() };
                syscall_count = u64::try_from(n).map_err(|_| out())?;
                let so = must_map(dir, SYSCALL_OFFSETS)?;
                let want = syscall_count.checked_mul(16).ok_or_else(out)?;
                if so.len() as u64 != want {
                    return Err(ReadError::Size { file: SYSCALL_OFFSETS, want, len: so.len() as u64 });
                }
                Some((sv, so))
            }
        };
        Ok(Trace {
            vtable,
            offsets,
            prev_next,
            records,
            version,
            ins,
            threads,
            modules,
            ranges,
            context,
            dump_size,
            syscalls,
            syscall_count,
        })
    }

    /// RecordCount.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// exec.vtable's Version (0 or 1: the meaning of flags 0x10–0x80).
    pub fn version(&self) -> u32 {
        self.version
    }

    fn eid_in_range(&self, eid: u64) -> Result<usize> {
        usize::try_from(eid).ok().filter(|_| eid < self.records).ok_or(ReadError::OutOfRange {
            file: EXEC_VTABLE,
            what: "EID".into(),
            value: eid.into(),
        })
    }

    /// Record `eid`'s bytes, `[Offset[eid], Offset[eid+1])`, at least 6 of them.
    fn record_bytes(&self, eid: u64) -> Result<&[u8]> {
        let i = self.eid_in_range(eid)?;
        let o = Fields { b: &self.offsets, file: EXEC_OFFSETS };
        let (a, b) = (o.i64(i * 8)?, o.i64(i * 8 + 8)?);
        if a < VTABLE_HEADER as i64 {
            return Err(ReadError::OutOfRange { file: EXEC_OFFSETS, what: format!("Offset[{eid}] (in the header)"), value: a.into() });
        }
        if b < 0 || b as u64 > self.vtable.len() as u64 {
            return Err(ReadError::OutOfRange {
                file: EXEC_OFFSETS,
                what: format!("Offset[{}] (past exec.vtable)", eid + 1),
                value: b.into(),
            });
        }
        if b <= a {
            return Err(ReadError::Record { eid, what: format!("Offset {a} not below the next record's {b}") });
        }
        if b - a < 6 {
            return Err(ReadError::Record { eid, what: format!("{} bytes, at least 6 needed", b - a) });
        }
        span(&self.vtable, a, (b - a) as u64).ok_or(ReadError::Record { eid, what: "past exec.vtable".into() })
    }

    /// Record `eid`'s ThreadID and Type, unchecked beyond its bounds.
    fn header(&self, eid: u64) -> Result<(u32, u8)> {
        let f = Fields { b: self.record_bytes(eid)?, file: EXEC_VTABLE };
        Ok((f.u32(0)?, f.u8(4)?))
    }

    /// Record `eid`, checked: bounds, ThreadID, Type, size for its type, InsID and its row,
    /// SyscallID, rmContext.
    pub fn record(&self, eid: u64) -> Result<Record<'_>> {
        let b = self.record_bytes(eid)?;
        let bad = |what: String| ReadError::Record { eid, what };
        let f = Fields { b, file: EXEC_VTABLE };
        let (thread, ty, flags) = (f.u32(0)?, f.u8(4)?, f.u8(5)?);
        if u64::from(thread) >= self.threads.rows {
            return Err(bad(format!("ThreadID {thread}, thread.itable has {} rows", self.threads.rows)));
        }
        let size =
            |want: usize| if b.len() == want { Ok(()) } else { Err(bad(format!("type {ty} of {} bytes, {want} expected", b.len()))) };
        let at_least =
            |want: usize| if b.len() >= want { Ok(()) } else { Err(bad(format!("type {ty} of {} bytes, {want} needed", b.len()))) };
        let syscall = |id: i64, none_ok: bool| -> Result<Option<u64>> {
            match u64::try_from(id) {
                Ok(id) if id < self.syscall_count => Ok(Some(id)),
                _ if id == -1 && none_ok => Ok(None),
                _ => Err(bad(format!("SyscallID {id}, syscall.vtable has {} records", self.syscall_count))),
            }
        };
        let tail = |from: usize| b.get(from..).unwrap_or(&[]);
        let ctx = |from: usize| Context::parse(eid, tail(from), self.dump_size);
        let mut ins = None;
        let kind = match ty {
            0 => {
                at_least(14)?;
                let ins_id = f.u64(6)?;
                if ins_id >= self.ins.rows {
                    return Err(bad(format!("InsID {ins_id}, ins.itable has {} rows", self.ins.rows)));
                }
                let row = self.ins(ins_id)?;
                size(14 + usize::from(row.decoded.lc_size))?;
                ins = Some(row);
                RecordKind::Instruction { ins_id, lc: tail(14) }
            }
            1 => RecordKind::ThreadBegin { context: ctx(6)? },
            2 | 3 => {
                size(10)?;
                let exit = f.i32(6)?;
                if ty == 2 {
                    RecordKind::ThreadEnd { exit }
                } else {
                    RecordKind::AppEnd { exit }
                }
            }
            4 => {
                at_least(14)?;
                let syscall = syscall(f.i64(6)?, false)?.unwrap_or(0);
                RecordKind::SyscallEntry { syscall, context: ctx(14)? }
            }
            5 => {
                at_least(14)?;
                RecordKind::SyscallExit { syscall: syscall(f.i64(6)?, true)?, context: ctx(14)? }
            }
            6 => {
                size(14)?;
                RecordKind::SkippedSyscallExit { syscall: syscall(f.i64(6)?, false)?.unwrap_or(0) }
            }
            8..=11 => {
                let kind =
                    [ContextChange::Apc, ContextChange::Exception, ContextChange::Callback, ContextChange::Unknown][usize::from(ty - 8)];
                RecordKind::ContextChange { kind, context: ctx(6)? }
            }
            _ => return Err(bad(format!("unknown Type {ty}"))),
        };
        Ok(Record { eid, thread, flags, kind, bytes: b, ins })
    }

    /// The memory references of record `rec` (see [`Record::references`]).
    pub fn references<'a>(&'a self, rec: &Record<'a>) -> Refs<'a> {
        rec.references()
    }

    /// Record `eid`'s previous and next records in its thread (None for -1), each checked to
    /// be an EID before (after) it.
    pub fn prev_next(&self, eid: u64) -> Result<(Option<u64>, Option<u64>)> {
        let i = self.eid_in_range(eid)?;
        let f = Fields { b: &self.prev_next, file: PREV_NEXT };
        let link = |v: i64, after: bool| -> Result<Option<u64>> {
            if v == -1 {
                return Ok(None);
            }
            let ok = u64::try_from(v).ok().filter(|&v| v < self.records && if after { v > eid } else { v < eid });
            ok.map(Some).ok_or_else(|| ReadError::Link {
                eid,
                what: format!(
                    "{} {v} is neither -1 nor an EID {} it",
                    if after { "next" } else { "prev" },
                    if after { "after" } else { "before" }
                ),
            })
        };
        Ok((link(f.i64(i * 16)?, false)?, link(f.i64(i * 16 + 8)?, true)?))
    }

    /// Rows of thread.itable.
    pub fn thread_count(&self) -> u64 {
        self.threads.rows
    }

    /// Thread `id`'s row, checked: ID, EIDs and RecCount in range, both ends -1 exactly when
    /// it has no record (LastEID may be -1 alone, for a thread still running).
    pub fn thread(&self, id: u32) -> Result<ThreadRow> {
        let row = id.into();
        let f = Fields { b: self.threads.row(row)?, file: THREAD };
        let bad = |what: String| ReadError::Row { file: THREAD, row, what };
        let eid = |at: usize, name: &str| -> Result<Option<u64>> {
            match f.i64(at)? {
                -1 => Ok(None),
                e => u64::try_from(e).ok().filter(|&e| e < self.records).map(Some).ok_or_else(|| bad(format!("{name} {e} is no EID"))),
            }
        };
        let t = ThreadRow {
            id: f.u32(0)?,
            tid: f.u32(4)?,
            tib: f.u64(8)?,
            first_eid: eid(16, "FirstEID")?,
            last_eid: eid(24, "LastEID")?,
            rec_count: u64::try_from(f.i64(32)?).ok().filter(|&n| n <= self.records).ok_or_else(|| bad("RecCount out of range".into()))?,
        };
        if t.id != id {
            return Err(bad(format!("ID {}", t.id)));
        }
        if t.first_eid.is_none() != (t.rec_count == 0) || (t.rec_count == 0 && t.last_eid.is_some()) {
            return Err(bad(format!("FirstEID {:?}, LastEID {:?} with RecCount {}", t.first_eid, t.last_eid, t.rec_count)));
        }
        Ok(t)
    }

    /// All thread rows.
    pub fn threads(&self) -> impl Iterator<Item = Result<ThreadRow>> + '_ {
        (0..self.threads.rows).map(|i| {
            let id = u32::try_from(i).map_err(|_| ReadError::OutOfRange { file: THREAD, what: "row".into(), value: i.into() })?;
            self.thread(id)
        })
    }

    /// Rows of ins.itable.
    pub fn ins_count(&self) -> u64 {
        self.ins.rows
    }

    /// Instruction row `id`, checked with its decodedIns and disassembly.
    pub fn ins(&self, id: u64) -> Result<InsRow<'_>> {
        let r = self.ins.row(id)?;
        let f = Fields { b: r, file: INS };
        let bad = |what: String| ReadError::Row { file: INS, row: id, what };
        let self_id = f.i64(0)?;
        if u64::try_from(self_id) != Ok(id) {
            return Err(bad(format!("ID {self_id}")));
        }
        let (kind, cs, code_size) = (f.u8(8)?, f.u8(9)?, f.u8(10)?);
        if !matches!(kind, 0..=6 | 8 | 9) {
            return Err(bad(format!("unknown Type {kind}")));
        }
        if cs > 1 {
            return Err(bad(format!("CSis64Bits {cs}")));
        }
        let code = r
            .get(24..24 + usize::from(code_size))
            .filter(|_| code_size <= 15)
            .ok_or_else(|| bad(format!("CodeSize {code_size} above 15")))?;
        let module = match f.i32(12)? {
            -1 => None,
            m => Some(
                u32::try_from(m)
                    .ok()
                    .filter(|&m| u64::from(m) < self.modules.rows)
                    .ok_or_else(|| bad(format!("ModuleID {m} is no module")))?,
            ),
        };
        let extra = self.ins.extra();
        let disasm = cstr(extra, f.i64(40)?).map_err(|e| bad(format!("DisasmFP: {e}")))?;
        let decoded = Decoded::parse(id, extra, f.i64(48)?)?;
        Ok(InsRow { id, kind, cs64: cs == 1, module, address: f.u64(16)?, code, disasm, decoded })
    }

    /// Rows of module.itable.
    pub fn module_count(&self) -> u64 {
        self.modules.rows
    }

    /// Module `id`, checked: StartAddr ≤ EndAddr, LoadEID ≤ UnloadEID (or -1), names in
    /// the extra area.
    pub fn module(&self, id: u64) -> Result<ModuleRow> {
        let f = Fields { b: self.modules.row(id)?, file: MODULE };
        let bad = |what: String| ReadError::Row { file: MODULE, row: id, what };
        let load = f.i64(0)?;
        let load_eid = u64::try_from(load).map_err(|_| bad(format!("LoadEID {load}")))?;
        let unload_eid = match f.i64(8)? {
            -1 => None,
            u => Some(u64::try_from(u).ok().filter(|&u| u >= load_eid).ok_or_else(|| bad(format!("UnloadEID {u} before LoadEID {load}")))?),
        };
        let (start, end) = (f.u64(16)?, f.u64(24)?);
        if start > end {
            return Err(bad(format!("StartAddr {start:#x} above EndAddr {end:#x}")));
        }
        let extra_start = self.modules.extra.start as i64;
        let name = |at: usize, what: &str| -> Result<String> {
            let fp = f.i64(at)?;
            let rel = fp.checked_sub(extra_start).filter(|&r| r >= 0).ok_or_else(|| bad(format!("{what} {fp} before the extra area")))?;
            ustr(self.modules.extra(), rel).map_err(|e| bad(format!("{what}: {e}")))
        };
        Ok(ModuleRow { load_eid, unload_eid, start, end, name: name(32, "WinNameFP")?, device: name(40, "DeviceNameFP")? })
    }

    /// All module rows.
    pub fn modules(&self) -> impl Iterator<Item = Result<ModuleRow>> + '_ {
        (0..self.modules.rows).map(|i| self.module(i))
    }

    /// Rows of address_space.itable.
    pub fn address_range_count(&self) -> u64 {
        self.ranges.rows
    }

    /// Address range `id`, checked: whole 4 KiB pages, First < Last.
    pub fn address_range(&self, id: u64) -> Result<AddressRange> {
        let f = Fields { b: self.ranges.row(id)?, file: ADDRESS_SPACE };
        let r = AddressRange { first: f.u64(0)?, last: f.u64(8)? };
        if !r.first.is_multiple_of(4096) || !r.last.wrapping_add(1).is_multiple_of(4096) || r.first >= r.last {
            return Err(ReadError::Row { file: ADDRESS_SPACE, row: id, what: format!("{:#x}..={:#x} is no page range", r.first, r.last) });
        }
        Ok(r)
    }

    /// All address ranges.
    pub fn address_ranges(&self) -> impl Iterator<Item = Result<AddressRange>> + '_ {
        (0..self.ranges.rows).map(|i| self.address_range(i))
    }

    /// The context map (checked on open).
    pub fn context_map(&self) -> ContextMap<'_> {
        ContextMap { b: &self.context }
    }

    /// Records of syscall.vtable (0 when it is absent).
    pub fn syscalls(&self) -> u64 {
        self.syscall_count
    }

    /// Checks syscall record `i`: inside syscall.vtable, at least 64 bytes, its arguments
    /// inside it, BeginEID and EndEID EIDs (EndEID may be -1).
    fn check_syscall(&self, i: u64) -> Result<()> {
        let Some((sv, so)) = &self.syscalls else { return Ok(()) };
        let bad = |what: String| ReadError::Row { file: SYSCALL_VTABLE, row: i, what };
        let at = usize::try_from(i).ok().and_then(|i| i.checked_mul(16)).ok_or_else(|| bad("past syscall.offsets".into()))?;
        let o = Fields { b: so, file: SYSCALL_OFFSETS };
        let (off, size) = (o.i64(at)?, o.i64(at + 8)?);
        let rec = u64::try_from(size)
            .ok()
            .filter(|&n| n >= 64 && off >= VTABLE_HEADER as i64)
            .and_then(|n| span(sv, off, n))
            .ok_or_else(|| bad(format!("Offset {off}, Size {size}: not a record inside syscall.vtable")))?;
        let f = Fields { b: rec, file: SYSCALL_VTABLE };
        let (args, args_fp) = (f.u8(6)?, f.i64(40)?);
        if args > 0 && span(rec, args_fp, 8 * u64::from(args)).is_none() {
            return Err(bad(format!("ArgsFP {args_fp} + {args} arguments past Size {size}")));
        }
        let (begin, end) = (f.i64(8)?, f.i64(16)?);
        let eid = |e: i64| u64::try_from(e).is_ok_and(|e| e < self.records);
        if !eid(begin) || !(end == -1 || eid(end)) {
            return Err(bad(format!("BeginEID {begin}, EndEID {end}")));
        }
        Ok(())
    }

    /// Thread `thread`'s records from FirstEID along the next links (see [`Walk`]).
    pub fn walk_forward(&self, thread: u32) -> Result<Walk<'_>> {
        let t = self.thread(thread)?;
        Ok(Walk {
            trace: self,
            thread,
            forward: true,
            at: t.first_eid,
            from: None,
            seen: 0,
            want: t.rec_count,
            end: t.last_eid,
            done: false,
        })
    }

    /// Thread `thread`'s records from LastEID along the prev links (see [`Walk`]); for a
    /// thread whose LastEID is -1, from the tail a forward walk finds.
    pub fn walk_backward(&self, thread: u32) -> Result<Walk<'_>> {
        let t = self.thread(thread)?;
        let start = match t.last_eid {
            None if t.rec_count > 0 => self.walk_forward(thread)?.try_fold(None, |_, e| e.map(Some))?,
            last => last,
        };
        Ok(Walk { trace: self, thread, forward: false, at: start, from: None, seen: 0, want: t.rec_count, end: t.first_eid, done: false })
    }
}

/// A walk through one thread's records along prev_next. Each step checks the link back
/// to the record it came from, that the record is the thread's, and that the walk stays
/// within RecCount; at the end, that it saw RecCount records and ended at the thread's
/// other end. Yields the EIDs, or one error and then nothing.
pub struct Walk<'a> {
    trace: &'a Trace,
    thread: u32,
    forward: bool,
    at: Option<u64>,
    from: Option<u64>,
    seen: u64,
    want: u64,
    end: Option<u64>,
    done: bool,
}

impl Walk<'_> {
    fn step(&mut self) -> Result<Option<u64>> {
        let bad = |what: String| ReadError::Thread { thread: self.thread, what };
        let dir = if self.forward { "forward" } else { "backward" };
        let Some(eid) = self.at else {
            if self.seen != self.want {
                return Err(bad(format!("{dir} walk of {} records, RecCount {}", self.seen, self.want)));
            }
            if self.end.is_some() && self.from != self.end {
                return Err(bad(format!("{dir} walk ends at {:?}, not {:?}", self.from, self.end)));
            }
            return Ok(None);
        };
        if self.seen >= self.want {
            return Err(bad(format!("{dir} walk longer than RecCount {}", self.want)));
        }
        let (prev, next) = self.trace.prev_next(eid)?;
        let (back, on) = if self.forward { (prev, next) } else { (next, prev) };
        if back != self.from {
            return Err(ReadError::Link { eid, what: format!("links back to {back:?}, the {dir} walk came from {:?}", self.from) });
        }
        let (owner, _) = self.trace.header(eid)?;
        if owner != self.thread {
            return Err(ReadError::Link { eid, what: format!("record of thread {owner} in thread {}'s chain", self.thread) });
        }
        self.seen += 1;
        self.from = Some(eid);
        self.at = on;
        Ok(Some(eid))
    }
}

impl Iterator for Walk<'_> {
    type Item = Result<u64>;
    fn next(&mut self) -> Option<Result<u64>> {
        if self.done {
            return None;
        }
        let r = self.step();
        self.done = !matches!(r, Ok(Some(_)));
        r.transpose()
    }
}

/// What a checked trace holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckSummary {
    pub records: u64,
    /// Records by execRec.Type (index 7 stays 0).
    pub by_type: [u64; 12],
    pub instructions: u64,
    pub reads: u64,
    pub writes: u64,
    pub threads: u64,
    pub ins_rows: u64,
    pub modules: u64,
    pub address_ranges: u64,
    pub pages: u64,
    pub syscalls: u64,
}

impl fmt::Display for CheckSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "records {}", self.records)?;
        writeln!(f, "instruction records {}", self.instructions)?;
        for (ty, name) in TYPE_NAMES.iter().enumerate().skip(1).filter(|(ty, _)| *ty != 7) {
            writeln!(f, "{name} records {}", self.by_type[ty])?;
        }
        writeln!(f, "references read {}", self.reads)?;
        writeln!(f, "references written {}", self.writes)?;
        writeln!(f, "threads {}", self.threads)?;
        writeln!(f, "ins rows {}", self.ins_rows)?;
        writeln!(f, "modules {}", self.modules)?;
        writeln!(f, "address ranges {}", self.address_ranges)?;
        writeln!(f, "pages {}", self.pages)?;
        writeln!(f, "syscalls {}", self.syscalls)
    }
}

/// Opens the trace in `dir` and checks all of it: every ins row, record, thread chain (both
/// ways: a thread begin first, nothing after a thread end), module, address range (also
/// sorted and disjoint) and syscall record; RecCounts summing to RecordCount; an
/// application end only last.
pub fn check(dir: &Path) -> Result<CheckSummary> {
    let t = Trace::open(dir)?;
    let mut s = CheckSummary { records: t.records, ..Default::default() };
    for id in 0..t.ins_count() {
        t.ins(id)?;
    }
    s.ins_rows = t.ins_count();
    for eid in 0..t.records {
        let rec = t.record(eid)?;
        let ty = rec.kind.code();
        if ty == 3 && eid + 1 != t.records {
            return Err(ReadError::Record { eid, what: "application end before the last record".into() });
        }
        if let Some(n) = s.by_type.get_mut(usize::from(ty)) {
            *n += 1;
        }
        for r in rec.references() {
            if r.write {
                s.writes += 1;
            } else {
                s.reads += 1;
            }
        }
    }
    s.instructions = s.by_type[0];
    let mut total: u64 = 0;
    for row in t.threads() {
        let row = row?;
        let bad = |what: String| ReadError::Thread { thread: row.id, what };
        let mut ended = None;
        for (n, eid) in t.walk_forward(row.id)?.enumerate() {
            let eid = eid?;
            let (_, ty) = t.header(eid)?;
            if (n == 0) != (ty == 1) {
                return Err(bad(format!("record {eid} (type {ty}) at place {n} of the chain: a thread begin comes first, once")));
            }
            if let Some(end) = ended {
                return Err(bad(format!("record {eid} after the thread end {end}")));
            }
            ended = (ty == 2).then_some(eid);
        }
        for eid in t.walk_backward(row.id)? {
            eid?;
        }
        total = total.checked_add(row.rec_count).ok_or_else(|| bad("RecCount sum overflows".into()))?;
        s.threads += 1;
    }
    if total != t.records {
        return Err(ReadError::Header { file: THREAD, what: format!("RecCounts sum to {total}, RecordCount is {}", t.records) });
    }
    for m in t.modules() {
        m?;
        s.modules += 1;
    }
    let mut last: Option<u64> = None;
    for id in 0..t.address_range_count() {
        let r = t.address_range(id)?;
        if last.is_some_and(|l| r.first <= l) {
            return Err(ReadError::Row { file: ADDRESS_SPACE, row: id, what: "not after the previous range".into() });
        }
        last = Some(r.last);
        s.address_ranges += 1;
        s.pages = s.pages.saturating_add(r.pages());
    }
    for i in 0..t.syscalls() {
        t.check_syscall(i)?;
    }
    s.syscalls = t.syscalls();
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    type Files = BTreeMap<&'static str, Vec<u8>>;

    const PC: u64 = 0x401000;
    const RAX: u16 = 53;
    const RDI: u16 = 60;
    /// (thread, type) of each record, in EID order: spec 6.1.2's linkage, thread 0 being
    /// 0→1→3→6 and thread 1 2→4→5→7.
    const RECORDS: [(u32, u8); 8] = [(0, 1), (0, 0), (1, 1), (0, 0), (1, 0), (1, 0), (0, 2), (1, 2)];
    const PREV_NEXT_LINKS: [(i64, i64); 8] = [(-1, 1), (0, 3), (-1, 4), (1, 6), (2, 5), (4, 7), (3, -1), (5, -1)];
    /// The address each instruction record reads and writes.
    const ADDRS: [(u64, u64); 4] = [(1, 0x7008), (3, 0x7010), (4, 0x10000), (5, 0x11ff8)];
    /// Where the decodedIns lies in ins.itable's extra area (after the 26-byte cStr).
    const DECODED_AT: usize = 26;

    fn i32s(v: &mut Vec<u8>, x: i32) {
        v.extend_from_slice(&x.to_le_bytes());
    }
    fn i64s(v: &mut Vec<u8>, x: i64) {
        v.extend_from_slice(&x.to_le_bytes());
    }
    fn u16s(v: &mut Vec<u8>, x: u16) {
        v.extend_from_slice(&x.to_le_bytes());
    }

    /// The generic header of a fixed table (spec 4.2.1), TableFP right after it.
    fn fixed_header(record_ver: i32, rows: i64, row_size: i64, extra: Option<(i64, i64)>) -> Vec<u8> {
        let mut v = Vec::new();
        i32s(&mut v, 0);
        i32s(&mut v, record_ver);
        i64s(&mut v, rows);
        i64s(&mut v, row_size);
        i64s(&mut v, if extra.is_some() { 48 } else { 32 });
        if let Some((fp, size)) = extra {
            i64s(&mut v, fp);
            i64s(&mut v, size);
        }
        v
    }

    /// `add qword ptr [rdi], rax`'s decodedIns: before group MEM0 (read), rax, rdi; after
    /// group MEM0 (written); LCSize 48.
    fn decoded() -> Vec<u8> {
        let mut d = Vec::new();
        u16s(&mut d, 0);
        u16s(&mut d, 7);
        u16s(&mut d, 1);
        d.extend_from_slice(&[0x30, 2]);
        // Explicit operands: [rdi] read and written (slots 0 and 3), rax read (slot 1).
        u16s(&mut d, REG_MEM0);
        u16s(&mut d, 8);
        d.extend_from_slice(&[3, 0, 3, 8, 8, 0, 0, 0]);
        u16s(&mut d, RAX);
        u16s(&mut d, 8);
        d.extend_from_slice(&[1, 1, SLOT_NA, 0, 0, 0, 0, 0]);
        d.resize(56, 0);
        d.extend_from_slice(&[8, 8]);
        u16s(&mut d, 48);
        d.extend_from_slice(&[3, 3, 4, SLOT_NA, 2, 0, SLOT_NA, SLOT_NA, 0, 0, 0, 0]);
        i64s(&mut d, 0);
        i64s(&mut d, 0);
        assert_eq!(d.len(), 88);
        for (reg, offset, width) in [(REG_MEM0, 0u16, 8u8), (RAX, 16, 0), (RDI, 24, 0), (REG_MEM0, 32, 8)] {
            u16s(&mut d, reg);
            u16s(&mut d, reg);
            u16s(&mut d, 8);
            u16s(&mut d, offset);
            d.extend_from_slice(&[width, 0, 0, 0]);
        }
        d
    }

    /// A valid trace written byte by byte from the spec's layouts.
    fn fixture() -> Files {
        let mut files = Files::new();
        // exec.vtable, exec.offsets, exec.prev_next.column.
        let mut vt = Vec::new();
        i32s(&mut vt, 1);
        i32s(&mut vt, 0);
        i64s(&mut vt, RECORDS.len() as i64);
        let mut offsets = Vec::new();
        for (eid, &(thread, ty)) in RECORDS.iter().enumerate() {
            i64s(&mut offsets, vt.len() as i64);
            i32s(&mut vt, thread as i32);
            vt.extend_from_slice(&[ty, 0x01]);
            match ty {
                1 => {
                    // rmContext: MemCount 0, RegsFP 16, the empty dump.
                    i32s(&mut vt, 0);
                    i32s(&mut vt, 0);
                    i64s(&mut vt, 16);
                }
                0 => {
                    *vt.last_mut().unwrap() |= 0x30;
                    i64s(&mut vt, 0);
                    let addr = ADDRS.iter().find(|a| a.0 == eid as u64).unwrap().1;
                    let mut lc = vec![0u8; 48];
                    lc[0..8].copy_from_slice(&addr.to_le_bytes());
                    lc[32..40].copy_from_slice(&addr.to_le_bytes());
                    vt.extend_from_slice(&lc);
                }
                _ => i32s(&mut vt, 0),
            }
        }
        i64s(&mut offsets, vt.len() as i64);
        let mut pn = Vec::new();
        for (p, n) in PREV_NEXT_LINKS {
            i64s(&mut pn, p);
            i64s(&mut pn, n);
        }
        files.insert(EXEC_VTABLE, vt);
        files.insert(EXEC_OFFSETS, offsets);
        files.insert(PREV_NEXT, pn);

        // ins.itable: one row, then the cStr and the decodedIns in the extra area.
        let disasm = b"add qword ptr [rdi],rax";
        let mut extra = Vec::new();
        u16s(&mut extra, disasm.len() as u16);
        extra.extend_from_slice(disasm);
        extra.push(0);
        assert_eq!(extra.len(), DECODED_AT);
        extra.extend_from_slice(&decoded());
        let mut ins = fixed_header(1, 1, 64, Some((112, extra.len() as i64)));
        i64s(&mut ins, 0);
        ins.extend_from_slice(&[0, 1, 3, 0]);
        i32s(&mut ins, 0);
        i64s(&mut ins, PC as i64);
        let mut code = [0u8; 16];
        code[..3].copy_from_slice(&[0x48, 0x01, 0x07]);
        ins.extend_from_slice(&code);
        i64s(&mut ins, 0);
        i64s(&mut ins, DECODED_AT as i64);
        i64s(&mut ins, 0);
        ins.extend_from_slice(&extra);
        files.insert(INS, ins);

        // thread.itable.
        let mut th = fixed_header(0, 2, 48, None);
        for (id, first, last) in [(0, 0, 6), (1, 2, 7)] {
            i32s(&mut th, id);
            i32s(&mut th, 100 + id);
            i64s(&mut th, 0);
            i64s(&mut th, first);
            i64s(&mut th, last);
            i64s(&mut th, 4);
            i64s(&mut th, 0);
        }
        files.insert(THREAD, th);

        // module.itable: one module whose two names share one uStr.
        let mut names = Vec::new();
        let name: Vec<u16> = "/bin/true".encode_utf16().collect();
        u16s(&mut names, name.len() as u16);
        name.iter().chain([0].iter()).for_each(|&u| u16s(&mut names, u));
        let mut m = fixed_header(0, 1, 48, Some((96, names.len() as i64)));
        for v in [0, -1, 0x400000, 0x401fff, 96, 96] {
            i64s(&mut m, v);
        }
        m.extend_from_slice(&names);
        files.insert(MODULE, m);

        // context_map.itable: DumpSize 0, two registers, all absent.
        let mut c = vec![0u8; CONTEXT_MAP_SIZE];
        c[2..4].copy_from_slice(&2u16.to_le_bytes());
        c[1040 + 16..1040 + 19].copy_from_slice(b"rax");
        for base in [9232, 13328] {
            for reg in 0..512 {
                c[base + 8 * reg..base + 8 * reg + 2].copy_from_slice(&0xffffu16.to_le_bytes());
            }
        }
        files.insert(CONTEXT_MAP, c);

        // address_space.itable: one page, then two.
        let mut a = fixed_header(0, 2, 16, None);
        for v in [0x7000, 0x7fff, 0x10000, 0x11fff] {
            i64s(&mut a, v);
        }
        files.insert(ADDRESS_SPACE, a);

        // No syscalls: a header, and an empty offsets file.
        let mut sv = Vec::new();
        i32s(&mut sv, 0);
        i32s(&mut sv, 1);
        i64s(&mut sv, 0);
        files.insert(SYSCALL_VTABLE, sv);
        files.insert(SYSCALL_OFFSETS, Vec::new());
        files
    }

    fn write(dir: &Path, files: &Files) {
        for (name, bytes) in files {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }

    fn put(files: &mut Files, file: &str, at: usize, bytes: &[u8]) {
        files.get_mut(file).unwrap()[at..at + bytes.len()].copy_from_slice(bytes);
    }

    /// Offset of record `eid` in exec.vtable.
    fn offset(files: &Files, eid: usize) -> usize {
        i64::from_le_bytes(files[EXEC_OFFSETS][eid * 8..eid * 8 + 8].try_into().unwrap()) as usize
    }

    /// check() of the fixture changed by `change`.
    fn check_changed(change: impl FnOnce(&mut Files)) -> Result<CheckSummary> {
        let dir = tempfile::tempdir().unwrap();
        let mut files = fixture();
        change(&mut files);
        write(dir.path(), &files);
        check(dir.path())
    }

    #[test]
    fn the_fixture_checks_and_counts() {
        let s = check_changed(|_| {}).unwrap();
        let mut by_type = [0; 12];
        (by_type[0], by_type[1], by_type[2]) = (4, 2, 2);
        let want = CheckSummary {
            records: 8,
            by_type,
            instructions: 4,
            reads: 4,
            writes: 4,
            threads: 2,
            ins_rows: 1,
            modules: 1,
            address_ranges: 2,
            pages: 3,
            syscalls: 0,
        };
        assert_eq!(s, want);
        let text = s.to_string();
        assert!(text.starts_with("records 8\ninstruction records 4\nthread begin records 2\nthread end records 2\n"), "{text}");
        assert!(text.contains("\nreferences read 4\nreferences written 4\n") && text.ends_with("pages 3\nsyscalls 0\n"), "{text}");
    }

    #[test]
    fn rows_and_records_read_back() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &fixture());
        let t = Trace::open(dir.path()).unwrap();
        assert_eq!((t.records(), t.version(), t.syscalls()), (8, 1, 0));
        let ins = t.ins(0).unwrap();
        assert_eq!(
            (ins.address, ins.code, ins.disasm, ins.module, ins.cs64),
            (PC, &[0x48, 0x01, 0x07][..], "add qword ptr [rdi],rax", Some(0), true)
        );
        let d = ins.decoded;
        assert_eq!((d.lc_count, d.lc_size, d.first_out_slot, d.first_after_slot, d.mem0_base_slot), (4, 48, 3, 3, 2));
        assert_eq!(d.slots().filter(Slot::is_memory).count(), 2);
        assert_eq!(d.slot(1), Some(Slot { reg_name: RAX, common_reg_name: RAX, value_size: 8, offset: 16, addr_width: 0 }));
        let ops: Vec<_> = d.explicit().collect();
        assert_eq!((ops.len(), ops[0].reg_name, ops[0].after_slot, ops[1].after_slot), (2, REG_MEM0, 3, SLOT_NA));
        let threads: Vec<_> = t.threads().map(|r| r.unwrap()).collect();
        assert_eq!(threads[1], ThreadRow { id: 1, tid: 101, tib: 0, first_eid: Some(2), last_eid: Some(7), rec_count: 4 });
        let m = t.module(0).unwrap();
        assert_eq!(
            (m.name.as_str(), m.device.as_str(), m.start, m.end, m.unload_eid),
            ("/bin/true", "/bin/true", 0x400000, 0x401fff, None)
        );
        let ranges: Vec<_> = t.address_ranges().map(|r| r.unwrap()).collect();
        assert_eq!(ranges, [AddressRange { first: 0x7000, last: 0x7fff }, AddressRange { first: 0x10000, last: 0x11fff }]);
        let cm = t.context_map();
        assert_eq!((cm.dump_size(), cm.elem_count(), cm.name(1), cm.reg64(1).map(|r| r.offset)), (0, 2, Some("rax"), Some(0xffff)));

        let begin = t.record(2).unwrap();
        assert!(matches!(begin.kind, RecordKind::ThreadBegin { context } if context.mem_count() == 0 && context.regs().is_empty()));
        assert_eq!((begin.thread, begin.references().count()), (1, 0));
        assert!(matches!(t.record(6).unwrap().kind, RecordKind::ThreadEnd { exit: 0 }));
        let rec = t.record(3).unwrap();
        assert!(matches!(rec.kind, RecordKind::Instruction { ins_id: 0, lc } if lc.len() == 48));
        assert_eq!(rec.flags, 0x31);
        let refs: Vec<Ref> = t.references(&rec).collect();
        assert_eq!(refs, [Ref { pc: PC, write: false, addr: 0x7010, size: 8 }, Ref { pc: PC, write: true, addr: 0x7010, size: 8 }]);
        assert_eq!(t.prev_next(3).unwrap(), (Some(1), Some(6)));
        assert_eq!(t.prev_next(2).unwrap(), (None, Some(4)));
        assert!(matches!(t.prev_next(8), Err(ReadError::OutOfRange { .. })));
        assert!(matches!(t.record(8), Err(ReadError::OutOfRange { .. })));
    }

    #[test]
    fn a_not_executed_conditional_makes_no_reference() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = fixture();
        let at = offset(&files, 1) + 5;
        put(&mut files, EXEC_VTABLE, at, &[0x35]);
        write(dir.path(), &files);
        let t = Trace::open(dir.path()).unwrap();
        assert_eq!(t.record(1).unwrap().references().count(), 0);
        assert_eq!(t.record(3).unwrap().references().count(), 2);
    }

    #[test]
    fn walks_follow_each_thread_both_ways() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &fixture());
        let t = Trace::open(dir.path()).unwrap();
        let walk = |w: Walk<'_>| w.collect::<Result<Vec<u64>>>().unwrap();
        assert_eq!(walk(t.walk_forward(0).unwrap()), [0, 1, 3, 6]);
        assert_eq!(walk(t.walk_backward(0).unwrap()), [6, 3, 1, 0]);
        assert_eq!(walk(t.walk_forward(1).unwrap()), [2, 4, 5, 7]);
        assert_eq!(walk(t.walk_backward(1).unwrap()), [7, 5, 4, 2]);
        assert!(matches!(t.walk_forward(2), Err(ReadError::OutOfRange { .. })));
    }

    #[test]
    fn a_running_thread_is_walked_back_from_its_tail() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = fixture();
        // Thread 1's LastEID -1: still running when the trace stopped.
        put(&mut files, THREAD, 32 + 48 + 24, &(-1i64).to_le_bytes());
        write(dir.path(), &files);
        let t = Trace::open(dir.path()).unwrap();
        assert_eq!(t.walk_backward(1).unwrap().collect::<Result<Vec<u64>>>().unwrap(), [7, 5, 4, 2]);
        assert!(check(dir.path()).is_ok());
    }

    #[test]
    fn missing_syscall_files_are_no_syscalls_but_a_missing_table_is_an_error() {
        assert_eq!(
            check_changed(|f| {
                f.remove(SYSCALL_VTABLE);
                f.remove(SYSCALL_OFFSETS);
            })
            .unwrap()
            .syscalls,
            0
        );
        let e = check_changed(|f| {
            f.remove(MODULE);
        })
        .unwrap_err();
        assert!(matches!(e, ReadError::Open { ref path, .. } if path.ends_with(MODULE)), "{e}");
    }

    #[test]
    fn a_truncated_exec_vtable_is_too_short() {
        let e = check_changed(|f| {
            f.get_mut(EXEC_VTABLE).unwrap().truncate(300);
        })
        .unwrap_err();
        assert!(matches!(e, ReadError::TooShort { file: EXEC_VTABLE, len: 300, .. }), "{e}");
        let e = check_changed(|f| {
            f.get_mut(EXEC_VTABLE).unwrap().truncate(10);
        })
        .unwrap_err();
        assert!(matches!(e, ReadError::TooShort { file: EXEC_VTABLE, need: 16, len: 10 }), "{e}");
    }

    #[test]
    fn an_offset_past_the_vtable_is_out_of_range() {
        let e = check_changed(|f| put(f, EXEC_OFFSETS, 3 * 8, &10_000i64.to_le_bytes())).unwrap_err();
        assert!(matches!(e, ReadError::OutOfRange { file: EXEC_OFFSETS, value: 10_000, .. }), "{e}");
    }

    #[test]
    fn offsets_not_increasing_are_refused() {
        let e = check_changed(|f| {
            let o2 = offset(f, 2) as i64;
            put(f, EXEC_OFFSETS, 3 * 8, &o2.to_le_bytes());
        })
        .unwrap_err();
        assert!(matches!(e, ReadError::Record { eid: 2, .. }), "{e}");
    }

    #[test]
    fn a_link_not_reciprocal_is_refused() {
        // Record 3 says it follows 0, but 1 says 3 follows it.
        let e = check_changed(|f| put(f, PREV_NEXT, 3 * 16, &0i64.to_le_bytes())).unwrap_err();
        assert!(matches!(e, ReadError::Link { eid: 3, .. }), "{e}");
    }

    #[test]
    fn a_cycle_is_refused() {
        // 6 → 1 closes thread 0's chain into a loop.
        let e = check_changed(|f| put(f, PREV_NEXT, 6 * 16 + 8, &1i64.to_le_bytes())).unwrap_err();
        assert!(matches!(e, ReadError::Link { eid: 6, .. }), "{e}");
    }

    #[test]
    fn a_chain_longer_or_shorter_than_rec_count_is_refused() {
        for n in [3i64, 5] {
            let e = check_changed(|f| put(f, THREAD, 32 + 32, &n.to_le_bytes())).unwrap_err();
            assert!(matches!(e, ReadError::Thread { thread: 0, .. }), "{e}");
        }
    }

    #[test]
    fn a_record_of_another_thread_in_a_chain_is_refused() {
        // Thread 0's chain runs 1 → 4 (thread 1's), with 4 agreeing.
        let e = check_changed(|f| {
            put(f, PREV_NEXT, 16 + 8, &4i64.to_le_bytes());
            put(f, PREV_NEXT, 4 * 16, &1i64.to_le_bytes());
        })
        .unwrap_err();
        assert!(matches!(e, ReadError::Link { eid: 4, .. }), "{e}");
    }

    #[test]
    fn a_slot_past_lc_size_is_refused() {
        // Slot 3's Offset 40: its address and value end at 56, past LCSize 48.
        let e = check_changed(|f| put(f, INS, 112 + DECODED_AT + 88 + 3 * 12 + 6, &40u16.to_le_bytes())).unwrap_err();
        assert!(matches!(e, ReadError::Decoded { ins: 0, .. }), "{e}");
    }

    #[test]
    fn bad_decoded_fields_are_refused() {
        let at = 112 + DECODED_AT;
        for (field, value) in [(7, 5u8), (60, 4), (62, 2), (65, 3), (64, 9), (8 + 5, SLOT_NA), (8 + 3, 1)] {
            let e = check_changed(|f| put(f, INS, at + field, &[value])).unwrap_err();
            assert!(matches!(e, ReadError::Decoded { ins: 0, .. }), "field {field}: {e}");
        }
    }

    #[test]
    fn a_thread_id_out_of_range_is_refused() {
        let e = check_changed(|f| {
            let at = offset(f, 4);
            put(f, EXEC_VTABLE, at, &2u32.to_le_bytes());
        })
        .unwrap_err();
        assert!(matches!(e, ReadError::Record { eid: 4, .. }), "{e}");
    }

    #[test]
    fn unknown_record_type_7_is_refused() {
        let e = check_changed(|f| {
            let at = offset(f, 5) + 4;
            put(f, EXEC_VTABLE, at, &[7]);
        })
        .unwrap_err();
        assert!(matches!(e, ReadError::Record { eid: 5, .. }), "{e}");
    }

    #[test]
    fn a_context_map_of_the_wrong_size_is_refused() {
        let e = check_changed(|f| {
            f.get_mut(CONTEXT_MAP).unwrap().pop();
        })
        .unwrap_err();
        assert!(matches!(e, ReadError::Size { file: CONTEXT_MAP, want: 17424, len: 17423 }), "{e}");
    }

    #[test]
    fn an_ins_row_count_beyond_the_file_is_too_short() {
        let e = check_changed(|f| put(f, INS, 8, &1000i64.to_le_bytes())).unwrap_err();
        assert!(matches!(e, ReadError::TooShort { file: INS, .. }), "{e}");
        let e = check_changed(|f| put(f, INS, 8, &i64::MAX.to_le_bytes())).unwrap_err();
        assert!(matches!(e, ReadError::OutOfRange { file: INS, .. }), "{e}");
    }

    #[test]
    fn overlapping_address_ranges_are_refused() {
        let e = check_changed(|f| put(f, ADDRESS_SPACE, 32 + 16, &0x7000i64.to_le_bytes())).unwrap_err();
        assert!(matches!(e, ReadError::Row { file: ADDRESS_SPACE, row: 1, .. }), "{e}");
    }

    #[test]
    fn errors_are_one_line_naming_the_file() {
        let e = check_changed(|f| put(f, INS, 0, &[1])).unwrap_err();
        assert_eq!(e.to_string(), "ins.itable: header: HeaderVer 1, only 0 is defined");
        let e = ReadError::Record { eid: 5, what: "unknown Type 7".into() };
        assert_eq!(e.to_string(), "exec.vtable: record 5: unknown Type 7");
    }

    /// Every byte flipped three ways, and every truncation, of every file (the context map
    /// sampled): check() answers without panicking.
    #[test]
    fn damaged_traces_never_panic() {
        let dir = tempfile::tempdir().unwrap();
        let files = fixture();
        write(dir.path(), &files);
        let mut refused = 0;
        let mut run = |name: &str, bytes: &[u8]| {
            std::fs::write(dir.path().join(name), bytes).unwrap();
            refused += check(dir.path()).is_err() as u32;
        };
        for (&name, bytes) in &files {
            let step = if bytes.len() > 1000 { 61 } else { 1 };
            for at in (0..bytes.len()).step_by(step) {
                for x in [0x01, 0x80, 0xff] {
                    let mut b = bytes.clone();
                    b[at] ^= x;
                    run(name, &b);
                }
            }
            for len in (0..bytes.len()).step_by(step) {
                run(name, &bytes[..len]);
            }
            run(name, bytes);
        }
        assert!(refused > 1000, "{refused}");
        assert!(check(dir.path()).is_ok());
    }
}
