//! Reading a DCFG-trace (spec section 3) in one pass: each process's dictionary and
//! transition table are read, then its threads' chunks are sent to the workers as they come
//! and dropped once decoded. The checks that need only what was read so far (threads known
//! and traced once, chunks' instruction counts adding up and their edge counts within the
//! DCFG's) are made here; what they find goes to the judge in its place among the chunks,
//! so the first problem in the trace is the one named.
//!
//! The spec orders the trace's columns so that it can be read so (3.3, 3.6): a row of
//! PROCESSES must give THREAD_DATA after what decodes it, a row of THREAD_DATA its
//! THREAD_ID before its TRACE_DATA. A chunk's row, read whole, may order its cells freely.

use super::decode::{Edge, Item, Job, Process, UNKNOWN};
use super::json::{col, fail, have, put, table_cell, Cell, Fields, Int, Json, Object, Rows, StrOr, Table, Take};
use super::{add, disagree, id32, shape, CheckError, ProcessData};
use crate::dcfg::transitions;
use crossbeam::channel::{Receiver, Sender};
use rustc_hash::FxHashMap;
use serde::de::{self, MapAccess, SeqAccess};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

/// Reads the trace from `input`, sending chunks to the workers (`jobs`) and everything to be
/// judged, in order, to `order`, until the end, a problem, or `stop`.
pub fn read<'p>(input: impl std::io::Read, procs: &'p [ProcessData], jobs: Sender<Job<'p>>, order: Sender<Item<'p>>, stop: &Receiver<()>) {
    // An exec'd image keeps its process id: the k-th row of a pid pairs with the k-th.
    let mut by_pid: HashMap<u64, VecDeque<&ProcessData>> = HashMap::new();
    for p in procs {
        by_pid.entry(p.pid).or_default().push_back(p);
    }
    let mut out = Out { by_pid, jobs, order, stop };
    let read = super::json::read(input, Json(Object(Doc { out: &mut out, processes: false })));
    let problem = match read {
        Ok(doc) if doc.processes => return,
        Ok(_) => shape("the trace", "has no PROCESSES"),
        Err(e) => e,
    };
    out.send(Item::Fail(problem));
}

/// Where the reader sends what it read.
struct Out<'p, 's> {
    by_pid: HashMap<u64, VecDeque<&'p ProcessData>>,
    jobs: Sender<Job<'p>>,
    order: Sender<Item<'p>>,
    stop: &'s Receiver<()>,
}

impl<'p> Out<'p, '_> {
    /// Sends an item to be judged; false if the judging has ended.
    fn send(&self, item: Item<'p>) -> bool {
        super::decode::send(&self.order, item, self.stop)
    }

    /// Sends an item to be judged, or stops the reading if the judging has ended.
    fn judge(&self, item: Item<'p>) -> Result<(), CheckError> {
        if self.send(item) {
            Ok(())
        } else {
            Err(stopped())
        }
    }

    /// Sends a chunk to the workers and its place to the judge, or stops the reading.
    fn chunk(&self, job: Job<'p>, item: Item<'p>) -> Result<(), CheckError> {
        if super::decode::send(&self.jobs, job, self.stop) {
            self.judge(item)
        } else {
            Err(stopped())
        }
    }
}

/// What stops the reading when the judging has ended: the judge has named the problem it
/// found first, so this is never shown.
fn stopped() -> CheckError {
    shape("the trace", "is left unread: the check stopped")
}

/// The document: whether it had PROCESSES.
struct Doc<'a, 'p, 's> {
    out: &'a mut Out<'p, 's>,
    processes: bool,
}

impl Fields for Doc<'_, '_, '_> {
    const KEYS: &'static [&'static str] = &["PROCESSES"];
    fn field<'de, A: MapAccess<'de>>(&mut self, _: usize, a: &mut A) -> Result<(), A::Error> {
        // Read as they come, the first would be judged before a second could replace it.
        if std::mem::replace(&mut self.processes, true) {
            return Err(fail(shape("the trace", "has PROCESSES twice")));
        }
        let mut rows = Processes { out: &mut *self.out, pid: None, dict: None, table: None, process: None };
        a.next_value_seed(Json(Table { what: "trace PROCESSES", rows: &mut rows }))
    }
}

/// A process being read: its context, and the threads traced so far.
struct Begun<'p> {
    process: Arc<Process<'p>>,
    /// Each thread's edge executions, which bound its chunks' EDGE_COUNTs.
    thread_edges: Vec<u64>,
    traced: HashSet<u64>,
}

struct Processes<'a, 'p, 's> {
    out: &'a mut Out<'p, 's>,
    pid: Cell<u64>,
    dict: Option<HashMap<String, String>>,
    table: Option<Transitions>,
    process: Option<Begun<'p>>,
}

impl<'p> Processes<'_, 'p, '_> {
    /// Pairs the row with its DCFG process and reads its table: what its threads need.
    fn begin(&mut self) -> Result<Begun<'p>, CheckError> {
        let pid = col(self.pid.take(), "trace PROCESSES", "PROCESS_ID")?;
        let what = format!("trace of process {pid}");
        let Some(p) = self.out.by_pid.get_mut(&pid).and_then(|q| q.pop_front()) else {
            return Err(CheckError::UnknownProcess { what });
        };
        let threads = p.instr_per_thread.len();
        let mut thread_edges = vec![0u64; threads];
        let ovf = format!("{what}: edge counts");
        for e in p.edges.values() {
            for (t, c) in e.per_thread.iter().take_while(|&(t, _)| t < threads) {
                thread_edges[t] = add(thread_edges[t], c, &ovf)?;
            }
        }
        let table = self.table.take().unwrap_or_default().table(&what)?;
        let dict = self.dict.take().unwrap_or_default();
        Ok(Begun { process: Arc::new(process(pid, what, p, &table, dict)), thread_edges, traced: HashSet::new() })
    }
}

impl Rows for Processes<'_, '_, '_> {
    const COLUMNS: &'static [&'static str] = &["PROCESS_ID", "STRING_DICTIONARY", "TRANSITION_TABLE", "THREAD_DATA"];
    fn header(&mut self, at: &[Option<usize>]) -> Result<(), CheckError> {
        match at[3] {
            Some(t) if at[..3].iter().flatten().any(|&i| i > t) => {
                Err(shape("trace PROCESSES", "has THREAD_DATA before a column that decodes it (spec 3.3 orders them)"))
            }
            _ => Ok(()),
        }
    }
    fn cell<'de, A: SeqAccess<'de>>(&mut self, c: usize, row: &mut A) -> Result<bool, A::Error> {
        match c {
            0 => put(row, Int, &mut self.pid),
            1 => put(row, Json(Dictionary), &mut self.dict),
            2 => {
                self.table = table_cell(row, "TRANSITION_TABLE")?;
                Ok(self.table.is_some())
            }
            _ => {
                let mut p = self.begin().map_err(fail)?;
                let mut rows = Threads { out: &*self.out, p: &mut p, tid: None, thread: None };
                let more = row.next_element_seed(Json(Table { what: "THREAD_DATA", rows: &mut rows }))?.is_some();
                self.process = Some(p);
                Ok(more)
            }
        }
    }
    fn end_row(&mut self) -> Result<(), CheckError> {
        let p = match self.process.take() {
            Some(p) => p,
            None => self.begin()?,
        };
        // A thread the DCFG saw run but the trace leaves out would pass unchecked.
        if let Some(t) = p.thread_edges.iter().enumerate().position(|(t, &n)| n > 0 && !p.traced.contains(&(t as u64))) {
            return Err(CheckError::Thread {
                what: p.process.what.clone(),
                thread: t as u64,
                why: "has edge counts in the DCFG but no trace",
            });
        }
        Ok(())
    }
}

/// The context the workers decode a process's chunks in.
fn process<'p>(pid: u64, what: String, data: &'p ProcessData, table: &transitions::Table, dict: HashMap<String, String>) -> Process<'p> {
    let mut ids: Vec<u64> = data.edges.keys().copied().collect();
    ids.sort_unstable();
    // (A graph of 2^32 edges does not fit in memory.)
    let index: FxHashMap<u64, u32> = ids.iter().enumerate().map(|(i, &id)| (id, i as u32)).collect();
    let edges = ids
        .iter()
        .map(|id| {
            let e = &data.edges[id];
            let dst = data.nodes.get(&e.dst);
            Edge {
                src: e.src,
                dst: e.dst,
                src_instrs: data.nodes.get(&e.src).map_or(0, |n| n.instrs),
                block: dst.is_some(),
                addr: dst.map_or(0, |n| n.addr),
                instrs: dst.map_or(0, |n| n.instrs),
            }
        })
        .collect();
    let dense = |e: u32| index.get(&(e as u64)).copied();
    let decoder = table.compile(ids.len(), |e| dense(e).map(|i| i as usize), |e| (dense(e).unwrap_or(UNKNOWN), e));
    Process { pid, data, edges, decoder, dict, index, ids, what }
}

/// A STRING_DICTIONARY: an object of strings (anything else reads as no entries, a value
/// not a string as an empty one, which decoding refuses where it is used).
struct Dictionary;

impl Take for Dictionary {
    type Value = HashMap<String, String>;
    fn other<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(HashMap::new())
    }
    fn map<'de, A: MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
        let mut d = HashMap::new();
        while let Some(k) = a.next_key::<String>()? {
            d.insert(k, a.next_value_seed(Json(StrOr("")))?);
        }
        Ok(d)
    }
}

/// A TRANSITION_TABLE as read: the rows up to the first with a problem, which is kept to be
/// judged in its turn (the rows after it are never reached). Its messages name the process,
/// which its row may give later.
#[derive(Default)]
struct Transitions {
    current: Cell<u64>,
    code: Option<String>,
    next: Option<NextIds>,
    rows: Vec<(u64, String, Vec<u64>)>,
    bad: Option<(Cell<u64>, Option<String>, Option<NextIds>)>,
}

/// A NEXT_EDGE_IDS cell: its integers up to the first that is not one, and what is wrong
/// with that one (or with the cell, if it is not an array).
type NextIds = (Vec<u64>, Option<CheckError>);

impl Transitions {
    /// The table, each row judged in order as its reading of the whole document would.
    fn table(self, what: &str) -> Result<transitions::Table, CheckError> {
        let mut t = transitions::Table::default();
        let (current, next) = (format!("{what} CURRENT_EDGE_ID"), format!("{what} NEXT_EDGE_IDS"));
        let rows = self.rows.into_iter().map(|(c, code, ids)| (Some(Ok(c)), Some(code), Some((ids, None))));
        for (c, code, ids) in rows.chain(self.bad) {
            let c = id32(col(c, "TRANSITION_TABLE", "CURRENT_EDGE_ID")?, &current)?;
            let code = have(code, "TRANSITION_TABLE", "TRANSITION_CODE")?;
            let (ids, bad) = have(ids, "TRANSITION_TABLE", "NEXT_EDGE_IDS")?;
            let ids = ids.into_iter().map(|id| id32(id, &next)).collect::<Result<Vec<_>, _>>()?;
            if let Some(e) = bad {
                return Err(e);
            }
            t.add(c, &code, ids).map_err(|source| CheckError::Decode { what: what.to_string(), source })?;
        }
        Ok(t)
    }
}

impl Rows for Transitions {
    const COLUMNS: &'static [&'static str] = &["CURRENT_EDGE_ID", "TRANSITION_CODE", "NEXT_EDGE_IDS"];
    fn cell<'de, A: SeqAccess<'de>>(&mut self, c: usize, row: &mut A) -> Result<bool, A::Error> {
        match c {
            0 => put(row, Int, &mut self.current),
            // A code that is not a string is no code of '0' and '1'.
            1 => put(row, Json(StrOr("\u{0}")), &mut self.code),
            _ => put(row, Json(Next), &mut self.next),
        }
    }
    fn end_row(&mut self) -> Result<(), CheckError> {
        let (current, code, next) = (self.current.take(), self.code.take(), self.next.take());
        if self.bad.is_some() {
            return Ok(());
        }
        match (current, code, next) {
            (Some(Ok(c)), Some(code), Some((ids, None))) => self.rows.push((c, code, ids)),
            row => self.bad = Some(row),
        }
        Ok(())
    }
}

/// Reads a [`NextIds`] cell.
struct Next;

impl Take for Next {
    type Value = NextIds;
    fn other<E: de::Error>(self) -> Result<NextIds, E> {
        Ok((Vec::new(), Some(shape("NEXT_EDGE_IDS", "is not an array"))))
    }
    fn seq<'de, A: SeqAccess<'de>>(self, mut a: A) -> Result<NextIds, A::Error> {
        let (mut ids, mut bad) = (Vec::new(), None);
        while let Some(id) = a.next_element_seed(Int)? {
            match id {
                Ok(id) if bad.is_none() => ids.push(id),
                Err(e) if bad.is_none() => bad = Some(e),
                _ => {}
            }
        }
        Ok((ids, bad))
    }
}

/// A thread being read: what its chunks are checked against and the sums they make.
struct Thread {
    tid: u64,
    /// The thread's edge executions in the DCFG, and those its chunks claimed so far.
    edges: u64,
    decoded: u64,
    /// The instructions its chunks claimed so far.
    instrs: u64,
}

struct Threads<'a, 'p, 's> {
    out: &'a Out<'p, 's>,
    p: &'a mut Begun<'p>,
    tid: Cell<u64>,
    thread: Option<Thread>,
}

impl Threads<'_, '_, '_> {
    /// Checks the row's THREAD_ID: a thread the DCFG counts, once (what bounds its work is the
    /// DCFG's counts).
    fn begin(&mut self) -> Result<Thread, CheckError> {
        let tid = col(self.tid.take(), "THREAD_DATA", "THREAD_ID")?;
        let what = &self.p.process.what;
        let Some(&edges) = usize::try_from(tid).ok().and_then(|t| self.p.thread_edges.get(t)) else {
            return Err(CheckError::Thread { what: what.clone(), thread: tid, why: "is not among the DCFG's threads" });
        };
        if !self.p.traced.insert(tid) {
            return Err(CheckError::Thread { what: what.clone(), thread: tid, why: "is traced twice" });
        }
        self.out.judge(Item::Thread { process: self.p.process.clone(), tid })?;
        Ok(Thread { tid, edges, decoded: 0, instrs: 0 })
    }
}

impl Rows for Threads<'_, '_, '_> {
    const COLUMNS: &'static [&'static str] = &["THREAD_ID", "TRACE_DATA"];
    fn header(&mut self, at: &[Option<usize>]) -> Result<(), CheckError> {
        match (at[0], at[1]) {
            (Some(id), Some(data)) if data < id => Err(shape("THREAD_DATA", "has TRACE_DATA before THREAD_ID (spec 3.6 orders them)")),
            _ => Ok(()),
        }
    }
    fn cell<'de, A: SeqAccess<'de>>(&mut self, c: usize, row: &mut A) -> Result<bool, A::Error> {
        if c == 0 {
            return put(row, Int, &mut self.tid);
        }
        let mut thread = self.begin().map_err(fail)?;
        let mut rows = Chunks { out: self.out, process: &self.p.process, thread: &mut thread, cells: Default::default(), seq: None };
        let more = row.next_element_seed(Json(Table { what: "TRACE_DATA", rows: &mut rows }))?.is_some();
        self.thread = Some(thread);
        Ok(more)
    }
    fn end_row(&mut self) -> Result<(), CheckError> {
        let Some(t) = self.thread.take() else {
            self.begin()?;
            return have(None, "THREAD_DATA", "TRACE_DATA");
        };
        self.out.judge(Item::ThreadEnd { claimed: t.decoded, edges: t.edges, instrs: t.instrs })
    }
}

struct Chunks<'a, 'p, 's> {
    out: &'a Out<'p, 's>,
    process: &'a Arc<Process<'p>>,
    thread: &'a mut Thread,
    cells: [Cell<u64>; 4],
    seq: Option<String>,
}

impl Rows for Chunks<'_, '_, '_> {
    const COLUMNS: &'static [&'static str] = &["PRECEDING_INSTR_COUNT", "INSTR_COUNT", "EDGE_COUNT", "FIRST_EDGE_ID", "EDGE_ID_SEQUENCE"];
    fn cell<'de, A: SeqAccess<'de>>(&mut self, c: usize, row: &mut A) -> Result<bool, A::Error> {
        match self.cells.get_mut(c) {
            Some(cell) => put(row, Int, cell),
            None => put(row, Json(StrOr("")), &mut self.seq),
        }
    }
    fn end_row(&mut self) -> Result<(), CheckError> {
        let [preceding, instrs, n, first] = std::mem::take(&mut self.cells);
        let seq = self.seq.take();
        let preceding = col(preceding, "TRACE_DATA", "PRECEDING_INSTR_COUNT")?;
        let instrs = col(instrs, "TRACE_DATA", "INSTR_COUNT")?;
        let n = col(n, "TRACE_DATA", "EDGE_COUNT")?;
        if n == 0 {
            return Ok(());
        }
        let (p, t) = (self.process, &mut *self.thread);
        let what = &p.what;
        if preceding != t.instrs {
            return disagree(
                &format!("{what} thread {}", t.tid),
                format!("PRECEDING_INSTR_COUNT {preceding}, the chunks before hold {}", t.instrs),
            );
        }
        // Decoding reads no bits through rows of empty codes: only the DCFG's counts bound a
        // chunk's edges.
        let left = t.edges - t.decoded;
        if n > left {
            return Err(CheckError::EdgeCount { what: what.clone(), thread: t.tid, count: n, left });
        }
        t.decoded += n;
        let first = id32(col(first, "TRACE_DATA", "FIRST_EDGE_ID")?, &format!("{what} FIRST_EDGE_ID"))?;
        let seq = have(seq, "TRACE_DATA", "EDGE_ID_SEQUENCE")?;
        let (tx, rx) = crossbeam::channel::bounded(super::decode::PIECES);
        let job = Job { process: p.clone(), tid: t.tid, first, count: n, instrs, seq, pieces: tx };
        self.out.chunk(job, Item::Chunk { pieces: rx, first, count: n })?;
        // Judged after the chunk, as its sum would be.
        t.instrs = add(t.instrs, instrs, &format!("{what} thread {} INSTR_COUNT", t.tid))?;
        Ok(())
    }
}
