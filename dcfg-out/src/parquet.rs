//! Parquet traces (`dep recover --format parquet -o DIR`), for pandas, polars, DuckDB or
//! Spark: per thread, its memory references in `DIR/references/thread-NNNN.parquet` (with
//! the kernel's for its system calls, `kernel` true), its
//! executed blocks in `DIR/blocks/thread-NNNN.parquet`, its synchronisation points in
//! `DIR/syncs/thread-NNNN.parquet` and its entries to and returns from watched library
//! functions in `DIR/calls/thread-NNNN.parquet` (NNNN the thread index, from 0000), zstd-compressed, in
//! row groups of at most [`ROW_GROUP`] rows; the thread table, who created each thread and
//! where, in `DIR/threads.parquet`; the module table, where each image was loaded, in
//! `DIR/modules.parquet`; and the place of every instruction the run executed (function,
//! source file and line, as every other output names them) in `DIR/places.parquet`, to
//! join with references and blocks on `pc`.
//! Threads are written in parallel, each streamed through a buffer of about [`BATCH`] rows.
//!
//! Every row carries `order`: the number of the last synchronisation point its thread
//! passed before it (null before the first). Recovery gives a sync record that names an
//! instruction where it stands among its block's references, so a reference's order is
//! final when it arrives; only a block's own row waits for a record before its first
//! instruction.

use crate::program::symbols::Symbolizer;
use crate::program::watched::{Ended, Pending, Watched};
use ::parquet::arrow::ArrowWriter;
use ::parquet::basic::{Compression, Encoding, ZstdLevel};
use ::parquet::file::properties::WriterProperties;
use ::parquet::schema::types::ColumnPath;
use arrow_array::types::Int8Type;
use arrow_array::{ArrayRef, BooleanArray, DictionaryArray, Int8Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use dep_profile::container::{ModuleEvent, ThreadInfo};
use dep_profile::semantics::Access;
use dep_recover::{Begin, BlockEvent, Marker, MemEvent, Part, RecoverError, Recovery, Sink, Source};
use std::fs::File;
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Rows buffered per table before they go to the Parquet writer.
pub const BATCH: usize = 1 << 16;
/// Rows of a row group.
pub const ROW_GROUP: usize = 1 << 20;
/// The subdirectory of the references' files.
pub const REFERENCES: &str = "references";
/// The subdirectory of the blocks' files.
pub const BLOCKS: &str = "blocks";
/// The subdirectory of the synchronisation points' files.
pub const SYNCS: &str = "syncs";
/// The subdirectory of the watched calls' files.
pub const CALLS: &str = "calls";
/// The module table's file.
pub const MODULES: &str = "modules.parquet";
/// The thread table's file.
pub const THREADS: &str = "threads.parquet";
/// The places table's file.
pub const PLACES: &str = "places.parquet";

/// Why a trace could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Recover(#[from] RecoverError),
    #[error("cannot create {path}: {err}")]
    Create { path: String, err: io::Error },
    #[error("writing {path}: {err}")]
    Write { path: String, err: ::parquet::errors::ParquetError },
    /// A thread's writer was run over something other than its thread.
    #[error("parquet: a thread's writer given {0:?}")]
    WrongPart(Part),
    /// A thread's writer was given events before `begin`.
    #[error("parquet: events before begin")]
    NotBegun,
}

/// Rows written per thread, in thread order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Written {
    pub references: Vec<u64>,
    pub blocks: Vec<u64>,
    pub syncs: Vec<u64>,
    pub calls: Vec<u64>,
}

/// Writes `rec`'s trace from `source` as Parquet tables under `dir` (created if missing;
/// thread files of an earlier export are replaced, those of threads this profile lacks
/// removed), its code named by `symbols`; `progress` sees each chunk done.
pub fn write(
    rec: &Recovery,
    source: Source,
    dir: &Path,
    symbols: &Symbolizer,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Written, ExportError> {
    let threads = rec.profile.threads.len();
    for sub in [REFERENCES, BLOCKS, SYNCS, CALLS] {
        let d = dir.join(sub);
        let err = |err| ExportError::Create { path: d.display().to_string(), err };
        std::fs::create_dir_all(&d).map_err(err)?;
        remove_stale(&d, threads).map_err(err)?;
    }
    write_modules(&dir.join(MODULES), &rec.profile.modules)?;
    write_threads(&dir.join(THREADS), &rec.profile.threads)?;
    write_places(&dir.join(PLACES), rec, symbols)?;
    let sinks = rec.events(source).progress(progress).per_thread(|t| ThreadWriter::new(dir, t, BATCH))?;
    Ok(Written {
        references: sinks.iter().map(|s| s.refs.next).collect(),
        blocks: sinks.iter().map(|s| s.blocks.next).collect(),
        syncs: sinks.iter().map(|s| s.syncs.next).collect(),
        calls: sinks.iter().map(|s| s.calls.next).collect(),
    })
}

/// The file of thread `t` in a table's directory.
fn thread_file(dir: &Path, t: u32) -> PathBuf {
    dir.join(format!("thread-{t:04}.parquet"))
}

/// Removes the thread files of `dir` numbered `threads` or more: a glob over the directory
/// must not read another profile's threads.
fn remove_stale(dir: &Path, threads: usize) -> io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let name = e?.file_name();
        let n = name.to_str().and_then(|s| s.strip_prefix("thread-")?.strip_suffix(".parquet")?.parse::<usize>().ok());
        if n.is_some_and(|n| n >= threads) {
            std::fs::remove_file(dir.join(&name))?;
        }
    }
    Ok(())
}

/// Writes the module loads and unloads, in the order the collector saw them.
fn write_modules(path: &Path, modules: &[ModuleEvent]) -> Result<(), ExportError> {
    use DataType::*;
    let schema = schema(&[
        ("event", Utf8, false),
        ("path", Utf8, false),
        ("base", UInt64, false),
        ("size", UInt64, false),
        ("build_id", Utf8, true),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(modules.iter().map(|m| m.event.as_str()))),
        Arc::new(StringArray::from_iter_values(modules.iter().map(|m| &m.path))),
        Arc::new(UInt64Array::from_iter_values(modules.iter().map(|m| m.base))),
        Arc::new(UInt64Array::from_iter_values(modules.iter().map(|m| m.size))),
        Arc::new(StringArray::from_iter(modules.iter().map(|m| m.build_id.as_deref()))),
    ];
    write_one(path, schema, columns)
}

/// Writes the threads in creation order: kernel id, and the creating thread with its sync
/// point before the creating system call and the new thread's TLS pointer (its `pthread_t`
/// under glibc), where the profile says.
fn write_threads(path: &Path, threads: &[ThreadInfo]) -> Result<(), ExportError> {
    use DataType::*;
    let schema = schema(&[
        ("thread", UInt32, false),
        ("tid", UInt32, false),
        ("parent", UInt32, true),
        ("spawn", UInt64, true),
        ("tls", UInt64, true),
        ("start_ns", UInt64, true),
        ("end_ns", UInt64, true),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from_iter_values(threads.iter().map(|t| t.index))),
        Arc::new(UInt32Array::from_iter_values(threads.iter().map(|t| t.tid))),
        Arc::new(UInt32Array::from_iter(threads.iter().map(|t| t.spawn.map(|s| s.parent)))),
        Arc::new(UInt64Array::from_iter(threads.iter().map(|t| t.spawn.map(|s| s.seq)))),
        Arc::new(UInt64Array::from_iter(threads.iter().map(|t| t.spawn.map(|s| s.tls).filter(|&p| p != 0)))),
        Arc::new(UInt64Array::from_iter(threads.iter().map(|t| t.start_ns))),
        Arc::new(UInt64Array::from_iter(threads.iter().map(|t| t.end_ns))),
    ];
    write_one(path, schema, columns)
}

/// Writes where each instruction of the block table is (the blocks the run executed):
/// `pc`, `function` (the routine, as Callgrind's `fn=` names it), `inlined` (the innermost
/// function there, an inlined one where DWARF says so), `file`, `line` and `module`, one
/// row per address, sorted.
fn write_places(path: &Path, rec: &Recovery, symbols: &Symbolizer) -> Result<(), ExportError> {
    use DataType::*;
    let mut pcs: Vec<u64> =
        (0..rec.plans.len() as u32).filter_map(|b| rec.plans.get_plan(b)).flat_map(|p| p.insns.iter().map(|i| i.pc)).collect();
    pcs.sort_unstable();
    pcs.dedup();
    let places = symbols.places(&pcs);
    let schema = schema(&[
        ("pc", UInt64, false),
        ("function", Utf8, false),
        ("inlined", Utf8, false),
        ("file", Utf8, true),
        ("line", UInt32, true),
        ("module", Utf8, true),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from(pcs)),
        Arc::new(StringArray::from_iter_values(places.iter().map(|p| &p.symbol))),
        Arc::new(StringArray::from_iter_values(places.iter().map(|p| &p.function))),
        Arc::new(StringArray::from_iter(places.iter().map(|p| p.file.as_deref()))),
        Arc::new(UInt32Array::from_iter(places.iter().map(|p| p.line))),
        Arc::new(StringArray::from_iter(places.iter().map(|p| p.module.as_deref()))),
    ];
    write_one(path, schema, columns)
}

/// Writes a small table in one batch.
fn write_one(path: &Path, schema: SchemaRef, columns: Vec<ArrayRef>) -> Result<(), ExportError> {
    let mut table = Table::create(path.to_path_buf(), schema.clone(), &[])?;
    table.write(RecordBatch::try_new(schema, columns))?;
    table.close()
}

/// A schema of (name, type, nullable) columns.
fn schema(columns: &[(&str, DataType, bool)]) -> SchemaRef {
    Arc::new(Schema::new(columns.iter().map(|(name, t, null)| Field::new(*name, t.clone(), *null)).collect::<Vec<_>>()))
}

/// The references' columns.
fn references_schema() -> SchemaRef {
    use DataType::*;
    let kind = Dictionary(Box::new(Int8), Box::new(Utf8));
    schema(&[
        ("thread", UInt32, false),
        ("seq", UInt64, false),
        ("order", UInt64, true),
        ("pc", UInt64, false),
        ("addr", UInt64, false),
        ("size", UInt32, false),
        ("kind", kind, false),
        ("conditional", Boolean, false),
        ("block", UInt64, false),
        ("kernel", Boolean, false),
    ])
}

/// The blocks' columns.
fn blocks_schema() -> SchemaRef {
    use DataType::*;
    schema(&[
        ("thread", UInt32, false),
        ("seq", UInt64, false),
        ("order", UInt64, true),
        ("addr", UInt64, false),
        ("id", UInt32, true),
        ("instructions", UInt32, false),
    ])
}

/// The synchronisation points' columns.
fn syncs_schema() -> SchemaRef {
    use DataType::*;
    schema(&[
        ("thread", UInt32, false),
        ("order", UInt64, false),
        ("block", UInt64, true),
        ("insn", UInt32, true),
        ("after", Boolean, false),
    ])
}

/// The watched calls' columns.
fn calls_schema() -> SchemaRef {
    use DataType::*;
    schema(&[
        ("thread", UInt32, false),
        ("seq", UInt64, false),
        ("order", UInt64, true),
        ("block", UInt64, true),
        ("refs", UInt64, false),
        ("event", Utf8, false),
        ("func", Utf8, false),
        ("arg0", UInt64, false),
        ("arg1", UInt64, false),
        ("caller", UInt64, false),
        ("value", UInt64, true),
    ])
}

/// One Parquet file being written.
struct Table {
    path: PathBuf,
    writer: ArrowWriter<BufWriter<File>>,
}

impl Table {
    /// Creates `path` with `schema`; `counters` are columns that count up (delta-encoded).
    fn create(path: PathBuf, schema: SchemaRef, counters: &[&str]) -> Result<Table, ExportError> {
        let file = File::create(&path).map_err(|err| ExportError::Create { path: path.display().to_string(), err })?;
        let mut props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_max_row_group_row_count(Some(ROW_GROUP));
        for c in counters {
            let col = ColumnPath::from(*c);
            props = props.set_column_dictionary_enabled(col.clone(), false).set_column_encoding(col, Encoding::DELTA_BINARY_PACKED);
        }
        let writer = ArrowWriter::try_new(BufWriter::with_capacity(1 << 20, file), schema, Some(props.build()));
        let writer = writer.map_err(|err| ExportError::Write { path: path.display().to_string(), err })?;
        Ok(Table { path, writer })
    }

    fn err(&self, err: ::parquet::errors::ParquetError) -> ExportError {
        ExportError::Write { path: self.path.display().to_string(), err }
    }

    fn write(&mut self, batch: Result<RecordBatch, arrow_schema::ArrowError>) -> Result<(), ExportError> {
        let batch = batch.map_err(|e| self.err(e.into()))?;
        self.writer.write(&batch).map_err(|e| self.err(e))
    }

    fn close(self) -> Result<(), ExportError> {
        let path = self.path;
        self.writer.close().map(|_| ()).map_err(|err| ExportError::Write { path: path.display().to_string(), err })
    }
}

/// Buffered references, column by column.
#[derive(Default)]
struct RefRows {
    /// The thread's references before the first buffered one (its `seq`), then all of them.
    next: u64,
    order: Vec<Option<u64>>,
    pc: Vec<u64>,
    addr: Vec<u64>,
    size: Vec<u32>,
    write: Vec<bool>,
    conditional: Vec<bool>,
    block: Vec<u64>,
    /// The kernel's, for a system call of the instruction.
    kernel: Vec<bool>,
    /// Each reference's instruction in its block (not written: for placing sync points).
    insn: Vec<u16>,
}

impl RefRows {
    fn push(&mut self, m: &MemEvent, order: Option<u64>, block: u64) {
        self.order.push(order);
        self.pc.push(m.pc);
        self.addr.push(m.addr);
        self.size.push(m.size);
        self.write.push(m.access == Access::Write);
        self.conditional.push(m.conditional);
        self.block.push(block);
        self.insn.push(m.insn);
        self.kernel.push(false);
        self.next += 1;
    }

    /// Memory the kernel accessed for the system call of instruction `insn` at `pc`.
    #[allow(clippy::too_many_arguments)]
    fn push_kernel(&mut self, pc: u64, insn: u16, addr: u64, size: u32, write: bool, order: Option<u64>, block: u64) {
        let m = MemEvent { pc, addr, size, access: if write { Access::Write } else { Access::Read }, conditional: false, insn };
        self.push(&m, order, block);
        *self.kernel.last_mut().expect("pushed") = true;
    }

    /// The first `n` rows, as thread `thread`'s.
    fn batch(&self, thread: u32, n: usize) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let first = self.next - self.pc.len() as u64;
        // As `dep recover --format text` writes them.
        let kinds = Arc::new(StringArray::from(vec!["R", "W"]));
        let kind = DictionaryArray::<Int8Type>::try_new(Int8Array::from_iter_values(self.write[..n].iter().map(|&w| w as i8)), kinds)?;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(UInt32Array::from(vec![thread; n])),
            Arc::new(UInt64Array::from_iter_values(first..first + n as u64)),
            Arc::new(UInt64Array::from(self.order[..n].to_vec())),
            Arc::new(UInt64Array::from(self.pc[..n].to_vec())),
            Arc::new(UInt64Array::from(self.addr[..n].to_vec())),
            Arc::new(UInt32Array::from(self.size[..n].to_vec())),
            Arc::new(kind),
            Arc::new(BooleanArray::from(self.conditional[..n].to_vec())),
            Arc::new(UInt64Array::from(self.block[..n].to_vec())),
            Arc::new(BooleanArray::from(self.kernel[..n].to_vec())),
        ];
        RecordBatch::try_new(references_schema(), columns)
    }

    /// Drops the first `n` rows (written).
    fn drain(&mut self, n: usize) {
        self.order.drain(..n);
        self.pc.drain(..n);
        self.addr.drain(..n);
        self.size.drain(..n);
        self.write.drain(..n);
        self.conditional.drain(..n);
        self.block.drain(..n);
        self.insn.drain(..n);
        self.kernel.drain(..n);
    }
}

/// Buffered blocks, column by column.
#[derive(Default)]
struct BlockRows {
    /// The thread's blocks before the first buffered one (its `seq`), then all of them.
    next: u64,
    order: Vec<Option<u64>>,
    addr: Vec<u64>,
    id: Vec<Option<u32>>,
    instructions: Vec<u32>,
}

impl BlockRows {
    fn batch(&self, thread: u32) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let n = self.addr.len();
        let first = self.next - n as u64;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(UInt32Array::from(vec![thread; n])),
            Arc::new(UInt64Array::from_iter_values(first..first + n as u64)),
            Arc::new(UInt64Array::from(self.order.clone())),
            Arc::new(UInt64Array::from(self.addr.clone())),
            Arc::new(UInt32Array::from(self.id.clone())),
            Arc::new(UInt32Array::from(self.instructions.clone())),
        ];
        RecordBatch::try_new(blocks_schema(), columns)
    }

    fn clear(&mut self) {
        self.order.clear();
        self.addr.clear();
        self.id.clear();
        self.instructions.clear();
    }
}

/// Buffered synchronisation points, column by column.
#[derive(Default)]
struct SyncRows {
    /// The thread's points before the first buffered one, then all of them.
    next: u64,
    order: Vec<u64>,
    block: Vec<Option<u64>>,
    insn: Vec<Option<u32>>,
    after: Vec<bool>,
}

impl SyncRows {
    fn batch(&self, thread: u32) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(UInt32Array::from(vec![thread; self.order.len()])),
            Arc::new(UInt64Array::from(self.order.clone())),
            Arc::new(UInt64Array::from(self.block.clone())),
            Arc::new(UInt32Array::from(self.insn.clone())),
            Arc::new(BooleanArray::from(self.after.clone())),
        ];
        RecordBatch::try_new(syncs_schema(), columns)
    }

    fn clear(&mut self) {
        self.order.clear();
        self.block.clear();
        self.insn.clear();
        self.after.clear();
    }
}

/// Buffered entries to and returns from watched functions, column by column.
#[derive(Default)]
struct CallRows {
    /// The thread's rows before the first buffered one, then all of them.
    next: u64,
    order: Vec<Option<u64>>,
    block: Vec<Option<u64>>,
    refs: Vec<u64>,
    /// Entry (true) or return.
    call: Vec<bool>,
    func: Vec<&'static str>,
    arg0: Vec<u64>,
    arg1: Vec<u64>,
    caller: Vec<u64>,
    value: Vec<Option<u64>>,
}

impl CallRows {
    /// A row for the entry to `p` (`value` None) or its return, after `refs` references
    /// of the thread and in its block `block`.
    fn push(&mut self, p: &Pending, call: bool, value: Option<u64>, order: Option<u64>, block: Option<u64>, refs: u64) {
        self.order.push(order);
        self.block.push(block);
        self.refs.push(refs);
        self.call.push(call);
        self.func.push(p.func.name());
        self.arg0.push(p.args[0]);
        self.arg1.push(p.args[1]);
        self.caller.push(p.ret);
        self.value.push(value);
        self.next += 1;
    }

    fn batch(&self, thread: u32) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let n = self.order.len();
        let first = self.next - n as u64;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(UInt32Array::from(vec![thread; n])),
            Arc::new(UInt64Array::from_iter_values(first..first + n as u64)),
            Arc::new(UInt64Array::from(self.order.clone())),
            Arc::new(UInt64Array::from(self.block.clone())),
            Arc::new(UInt64Array::from(self.refs.clone())),
            Arc::new(StringArray::from_iter_values(self.call.iter().map(|&c| if c { "call" } else { "return" }))),
            Arc::new(StringArray::from(self.func.clone())),
            Arc::new(UInt64Array::from(self.arg0.clone())),
            Arc::new(UInt64Array::from(self.arg1.clone())),
            Arc::new(UInt64Array::from(self.caller.clone())),
            Arc::new(UInt64Array::from(self.value.clone())),
        ];
        RecordBatch::try_new(calls_schema(), columns)
    }

    fn clear(&mut self) {
        self.order.clear();
        self.block.clear();
        self.refs.clear();
        self.call.clear();
        self.func.clear();
        self.arg0.clear();
        self.arg1.clear();
        self.caller.clear();
        self.value.clear();
    }
}

/// One thread's four files.
struct Files {
    refs: Table,
    blocks: Table,
    syncs: Table,
    calls: Table,
}

impl Files {
    fn create(dir: &Path, thread: u32) -> Result<Files, ExportError> {
        Ok(Files {
            refs: Table::create(thread_file(&dir.join(REFERENCES), thread), references_schema(), &["seq", "block"])?,
            blocks: Table::create(thread_file(&dir.join(BLOCKS), thread), blocks_schema(), &["seq"])?,
            syncs: Table::create(thread_file(&dir.join(SYNCS), thread), syncs_schema(), &["order"])?,
            calls: Table::create(thread_file(&dir.join(CALLS), thread), calls_schema(), &["seq"])?,
        })
    }

    fn close(self) -> Result<(), ExportError> {
        self.refs.close()?;
        self.blocks.close()?;
        self.syncs.close()?;
        self.calls.close()
    }
}

/// One thread's sink: its tables, their buffered rows and the thread's last sync point.
struct ThreadWriter {
    dir: PathBuf,
    thread: u32,
    /// Rows buffered before a write, [`BATCH`] but in tests.
    batch: usize,
    /// The files, from `begin`.
    files: Option<Files>,
    refs: RefRows,
    blocks: BlockRows,
    syncs: SyncRows,
    calls: CallRows,
    /// The watched calls under way.
    watched: Watched,
    /// The last sync point's number.
    order: Option<u64>,
}

impl ThreadWriter {
    fn new(dir: &Path, thread: u32, batch: usize) -> Self {
        ThreadWriter {
            dir: dir.to_path_buf(),
            thread,
            batch,
            files: None,
            refs: RefRows::default(),
            blocks: BlockRows::default(),
            syncs: SyncRows::default(),
            calls: CallRows::default(),
            watched: Watched::default(),
            order: None,
        }
    }

    fn files(&mut self) -> Result<&mut Files, ExportError> {
        self.files.as_mut().ok_or(ExportError::NotBegun)
    }

    /// Writes the first `n` buffered references.
    fn flush_refs(&mut self, n: usize) -> Result<(), ExportError> {
        let batch = self.refs.batch(self.thread, n);
        self.files()?.refs.write(batch)?;
        self.refs.drain(n);
        Ok(())
    }

    fn flush_blocks(&mut self) -> Result<(), ExportError> {
        let batch = self.blocks.batch(self.thread);
        self.files()?.blocks.write(batch)?;
        self.blocks.clear();
        Ok(())
    }

    fn flush_syncs(&mut self) -> Result<(), ExportError> {
        let batch = self.syncs.batch(self.thread);
        self.files()?.syncs.write(batch)?;
        self.syncs.clear();
        Ok(())
    }

    fn flush_calls(&mut self) -> Result<(), ExportError> {
        let batch = self.calls.batch(self.thread);
        self.files()?.calls.write(batch)?;
        self.calls.clear();
        Ok(())
    }

    /// Rows for the entries to (`call`) or returns from `ended`'s calls, here.
    fn call_rows(&mut self, ended: &[Ended], call: bool) -> Result<(), ExportError> {
        for e in ended {
            if self.calls.order.len() >= self.batch {
                self.flush_calls()?;
            }
            self.calls.push(&e.call, call, e.value, self.order, self.blocks.next.checked_sub(1), self.refs.next);
        }
        Ok(())
    }

    /// Sync point `seq` before instruction `from` of the current block: that instruction's
    /// references and those after it (still to come), and the block itself when `from` is
    /// 0, follow it.
    fn sync_in_block(&mut self, seq: u64, from: u16) {
        if from == 0 {
            if let Some(o) = self.blocks.order.last_mut() {
                *o = Some(seq);
            }
        }
        self.order = Some(seq);
    }
}

impl Sink for ThreadWriter {
    type Error = ExportError;

    fn begin(&mut self, b: &Begin) -> Result<bool, Self::Error> {
        if b.part != Part::Thread(self.thread) {
            return Err(ExportError::WrongPart(b.part));
        }
        self.files = Some(Files::create(&self.dir, self.thread)?);
        Ok(true)
    }

    fn block(&mut self, b: &BlockEvent) -> Result<bool, Self::Error> {
        // The block rows buffered are final now: no sync record reaches back past a block.
        if self.blocks.addr.len() >= self.batch {
            self.flush_blocks()?;
        }
        self.blocks.order.push(self.order);
        self.blocks.addr.push(b.addr);
        self.blocks.id.push(b.id);
        self.blocks.instructions.push(b.executed);
        self.blocks.next += 1;
        let ended = self.watched.block(b.addr);
        self.call_rows(&ended, false)?;
        Ok(true)
    }

    fn refs(&mut self, _b: &BlockEvent, refs: &[MemEvent]) -> Result<bool, Self::Error> {
        let block = self.blocks.next.wrapping_sub(1);
        for m in refs {
            self.refs.push(m, self.order, block);
        }
        if self.refs.pc.len() >= self.batch {
            self.flush_refs(self.refs.pc.len())?;
        }
        Ok(true)
    }

    fn marker(&mut self, _: u32, m: Marker) -> Result<bool, Self::Error> {
        match m {
            Marker::Call { func, args, ret } => {
                if let Some(p) = self.watched.call(func, args, ret) {
                    self.call_rows(&[Ended { call: p, value: None }], true)?;
                }
            }
            Marker::Return { func, value } => {
                let ended = self.watched.ret(func, value);
                self.call_rows(&ended, false)?;
            }
            Marker::Sync { seq, insn, after } => {
                match insn {
                    Some(k) => self.sync_in_block(seq, k.saturating_add(after as u16)),
                    None => self.order = Some(seq),
                }
                if self.syncs.order.len() >= self.batch {
                    self.flush_syncs()?;
                }
                self.syncs.order.push(seq);
                self.syncs.block.push(self.blocks.next.checked_sub(1));
                self.syncs.insn.push(insn.map(u32::from));
                self.syncs.after.push(after);
                self.syncs.next += 1;
            }
            Marker::Kernel { insn, pc, addr, size, write } => {
                let block = self.blocks.next.wrapping_sub(1);
                self.refs.push_kernel(pc, insn, addr, size, write, self.order, block);
                if self.refs.pc.len() >= self.batch {
                    self.flush_refs(self.refs.pc.len())?;
                }
            }
            _ => {}
        }
        Ok(true)
    }

    fn finish(&mut self) -> Result<(), Self::Error> {
        if self.files.is_none() {
            return Ok(());
        }
        self.flush_refs(self.refs.pc.len())?;
        self.flush_blocks()?;
        self.flush_syncs()?;
        self.flush_calls()?;
        self.files.take().expect("checked").close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{UInt32Type, UInt64Type};
    use dep_profile::calls::Func;
    use dep_profile::semantics::{Machine, Semantics};
    use dep_profile::BlockPlan;

    /// Thread 2's writer into `dir`, writing every `batch` rows. (`begin` needs a profile:
    /// the files are opened directly.)
    fn writer(dir: &Path, batch: usize) -> ThreadWriter {
        for sub in [REFERENCES, BLOCKS, SYNCS, CALLS] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let mut w = ThreadWriter::new(dir, 2, batch);
        w.files = Some(Files::create(dir, 2).unwrap());
        w
    }

    /// Every batch of thread 2's file of `table`.
    fn read(dir: &Path, table: &str) -> Vec<RecordBatch> {
        let f = File::open(thread_file(&dir.join(table), 2)).unwrap();
        ParquetRecordBatchReaderBuilder::try_new(f).unwrap().build().unwrap().map(|b| b.unwrap()).collect()
    }

    fn u64s(batches: &[RecordBatch], col: &str) -> Vec<Option<u64>> {
        batches.iter().flat_map(|b| b.column_by_name(col).unwrap().as_primitive::<UInt64Type>().iter().collect::<Vec<_>>()).collect()
    }

    fn u32s(batches: &[RecordBatch], col: &str) -> Vec<Option<u32>> {
        batches.iter().flat_map(|b| b.column_by_name(col).unwrap().as_primitive::<UInt32Type>().iter().collect::<Vec<_>>()).collect()
    }

    fn strings(batches: &[RecordBatch], col: &str) -> Vec<Option<String>> {
        batches
            .iter()
            .flat_map(|b| b.column_by_name(col).unwrap().as_string::<i32>().iter().map(|s| s.map(String::from)).collect::<Vec<_>>())
            .collect()
    }

    fn mem(pc: u64, insn: u16, access: Access) -> MemEvent {
        MemEvent { pc, addr: 0x1000 + pc, size: 8, access, conditional: false, insn }
    }

    fn sync(seq: u64, insn: Option<u16>, after: bool) -> Marker {
        Marker::Sync { seq, insn, after }
    }

    /// Blocks without plans, references before and after sync points (given where they
    /// stand, as recovery gives them), a batch of 4 rows so that writes happen between and
    /// within blocks.
    #[test]
    fn rows_orders_and_batches() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = writer(dir.path(), 4);
        let planless = BlockEvent { thread: 2, addr: 0x400000, version: 0, id: Some(7), plan: None, executed: 3, interrupted: false };
        // Block 0: two references, no sync point yet.
        w.block(&planless).unwrap();
        w.refs(&planless, &[mem(1, 0, Access::Read), mem(2, 1, Access::Write)]).unwrap();
        // Block 1: a sync point before instruction 1 and one after it.
        w.block(&BlockEvent { id: None, ..planless }).unwrap();
        w.refs(&planless, &[mem(3, 0, Access::Read)]).unwrap();
        w.marker(2, sync(10, Some(1), false)).unwrap();
        w.refs(&planless, &[mem(4, 1, Access::Read), mem(5, 1, Access::Write)]).unwrap();
        w.marker(2, sync(11, Some(1), true)).unwrap();
        w.refs(&planless, &[mem(6, 2, Access::Read)]).unwrap();
        // A sync point between blocks, then block 2 with one before its first instruction.
        w.marker(2, sync(12, None, false)).unwrap();
        w.block(&planless).unwrap();
        w.marker(2, sync(13, Some(0), false)).unwrap();
        // Block 2 is pthread_join's entry, called to return to 0x400000: block 3 (a tail
        // call out of the function left no return record). A number this build does not
        // know, and a jump back to the entry, start no call.
        w.marker(2, Marker::Call { func: Func::Join as u16, args: [0x7700, 0], ret: 0x400000 }).unwrap();
        w.marker(2, Marker::Call { func: 999, args: [1, 2], ret: 3 }).unwrap();
        w.marker(2, Marker::Call { func: Func::Join as u16, args: [0x7700, 0], ret: 0x400000 }).unwrap();
        w.refs(&planless, &[mem(7, 0, Access::Write)]).unwrap();
        // Block 3: ten references, written in batches as they come.
        w.block(&planless).unwrap();
        for pc in 8..18 {
            w.refs(&planless, &[mem(pc, 2, Access::Read)]).unwrap();
        }
        // malloc(16), its return recorded; a return record of no call under way.
        w.marker(2, Marker::Call { func: Func::Malloc as u16, args: [16, 9], ret: 0x401234 }).unwrap();
        w.marker(2, Marker::Return { func: Func::Malloc as u16, value: 0x5000 }).unwrap();
        w.marker(2, Marker::Return { func: Func::Free as u16, value: 0 }).unwrap();
        w.marker(2, Marker::ThreadEnd).unwrap();
        w.finish().unwrap();

        let refs = read(dir.path(), REFERENCES);
        assert_eq!(u64s(&refs, "seq"), (0..17).map(Some).collect::<Vec<_>>());
        assert_eq!(u64s(&refs, "pc"), (1..18).map(Some).collect::<Vec<_>>());
        let mut order = vec![None, None, None, Some(10), Some(10), Some(11), Some(13)];
        order.extend([Some(13); 10]);
        assert_eq!(u64s(&refs, "order"), order);
        let mut block = vec![Some(0), Some(0), Some(1), Some(1), Some(1), Some(1), Some(2)];
        block.extend([Some(3); 10]);
        assert_eq!(u64s(&refs, "block"), block);
        let kinds: Vec<String> = refs
            .iter()
            .flat_map(|b| {
                let d = b.column_by_name("kind").unwrap().as_dictionary::<Int8Type>();
                let values = d.values().as_string::<i32>().clone();
                d.keys().iter().map(move |k| values.value(k.unwrap() as usize).to_string()).collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(&kinds[..3], ["R", "W", "R"]);
        assert!(u32s(&refs, "thread").iter().all(|&t| t == Some(2)));

        let blocks = read(dir.path(), BLOCKS);
        assert_eq!(u64s(&blocks, "seq"), (0..4).map(Some).collect::<Vec<_>>());
        assert_eq!(u64s(&blocks, "order"), vec![None, None, Some(13), Some(13)]);
        assert_eq!(u32s(&blocks, "id"), vec![Some(7), None, Some(7), Some(7)]);
        assert_eq!(u32s(&blocks, "instructions"), vec![Some(3); 4]);

        let syncs = read(dir.path(), SYNCS);
        assert_eq!(u64s(&syncs, "order"), vec![Some(10), Some(11), Some(12), Some(13)]);
        assert_eq!(u64s(&syncs, "block"), vec![Some(1), Some(1), Some(1), Some(2)]);
        assert_eq!(u32s(&syncs, "insn"), vec![Some(1), Some(1), None, Some(0)]);

        let calls = read(dir.path(), CALLS);
        assert_eq!(u64s(&calls, "seq"), (0..4).map(Some).collect::<Vec<_>>());
        assert_eq!(u64s(&calls, "order"), vec![Some(13); 4]);
        assert_eq!(u64s(&calls, "block"), vec![Some(2), Some(3), Some(3), Some(3)]);
        assert_eq!(u64s(&calls, "refs"), vec![Some(6), Some(7), Some(17), Some(17)]);
        let s = |v: &[&str]| v.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
        assert_eq!(strings(&calls, "event"), s(&["call", "return", "call", "return"]));
        assert_eq!(strings(&calls, "func"), s(&["pthread_join", "pthread_join", "malloc", "malloc"]));
        assert_eq!(u64s(&calls, "arg0"), vec![Some(0x7700), Some(0x7700), Some(16), Some(16)]);
        assert_eq!(u64s(&calls, "arg1"), vec![Some(0), Some(0), Some(9), Some(9)]);
        assert_eq!(u64s(&calls, "caller"), vec![Some(0x400000), Some(0x400000), Some(0x401234), Some(0x401234)]);
        assert_eq!(u64s(&calls, "value"), vec![None, None, None, Some(0x5000)]);
    }

    /// A block whose rep string runs long before its atomic: its references are written as
    /// they come, in a buffer bounded by the batch, and the atomic's sync points order the
    /// references after them.
    #[test]
    fn long_block_before_an_atomic() {
        // mov rax, [rbx]; rep movsb; lock xadd [rcx], eax; mov [rdx], rax
        let code = [0x48, 0x8b, 0x03, 0xf3, 0xa4, 0xf0, 0x0f, 0xc1, 0x01, 0x48, 0x89, 0x02];
        let plan = BlockPlan::build(&mut Semantics::new(Machine::x86_64(0)), 0x401000, &code, None).unwrap();
        assert!(plan.insns[2].atomic);
        let dir = tempfile::tempdir().unwrap();
        let mut w = writer(dir.path(), 4);
        let planned = BlockEvent { thread: 2, addr: 0x401000, version: 0, id: Some(0), plan: Some(&plan), executed: 4, interrupted: false };
        w.block(&planned).unwrap();
        w.refs(&planned, &[mem(0, 0, Access::Read)]).unwrap();
        for k in 0..20 {
            w.refs(&planned, &[mem(1, 1, Access::Read), mem(1, 1, if k == 19 { Access::Read } else { Access::Write })]).unwrap();
        }
        assert!(w.refs.pc.len() < 4, "the rep string's references were not written as they came");
        w.marker(2, sync(5, Some(2), false)).unwrap();
        w.refs(&planned, &[mem(2, 2, Access::Read), mem(2, 2, Access::Write)]).unwrap();
        w.marker(2, sync(6, Some(2), true)).unwrap();
        w.refs(&planned, &[mem(3, 3, Access::Write)]).unwrap();
        w.finish().unwrap();
        let refs = read(dir.path(), REFERENCES);
        assert_eq!(u64s(&refs, "seq"), (0..44).map(Some).collect::<Vec<_>>());
        let mut order = vec![None; 41];
        order.extend([Some(5), Some(5), Some(6)]);
        assert_eq!(u64s(&refs, "order"), order);
        assert_eq!(u64s(&read(dir.path(), BLOCKS), "order"), vec![None]);
    }
}
