//! Reading a DCFG document (spec section 2) into its tables' rows as they come, without the
//! document: the checks that relate rows run once it is read, since the spec leaves the
//! order of an object's keys free (EDGE_TYPES may follow the PROCESSES that use them).

use super::json::{col, fail, have, put, table_cell, table_value, Cell, Fields, Int, Ints, Json, Object, Rows, Take};
use super::{CheckError, PerThread};
use serde::de::{self, MapAccess, SeqAccess};
use std::collections::HashMap;

/// A DCFG as read.
#[derive(Default)]
pub struct Doc {
    pub types: HashMap<u64, String>,
    pub special: HashMap<u64, String>,
    /// (PROCESS_ID, PROCESS_DATA); None if the document has no PROCESSES.
    pub processes: Option<Vec<(u64, Process)>>,
}

/// A process's PROCESS_DATA as read.
#[derive(Default)]
pub struct Process {
    /// INSTR_COUNT_PER_THREAD (empty if it is not an array).
    pub per_thread: Vec<u64>,
    pub instr_count: Option<u64>,
    /// (LOAD_ADDR, IMAGE_DATA).
    pub images: Vec<(u64, Image)>,
    pub edges: Vec<Edge>,
}

/// An image's blocks and routines.
#[derive(Default)]
pub struct Image {
    pub blocks: Vec<Block>,
    pub routines: Vec<Routine>,
}

/// A BASIC_BLOCKS row.
pub struct Block {
    pub id: u64,
    pub offset: u64,
    pub instrs: u64,
    pub count: u64,
}

/// A ROUTINES row: its entry, (node, IDOM) pairs and (loop head, members) pairs.
pub struct Routine {
    pub entry: u64,
    pub idoms: Vec<(u64, u64)>,
    pub loops: Vec<(u64, Vec<u64>)>,
}

/// An EDGES row.
pub struct Edge {
    pub id: u64,
    pub ty: u64,
    pub per_thread: PerThread,
    pub src: u64,
    pub dst: u64,
}

/// Reads a DCFG document.
pub fn read(input: impl std::io::Read) -> Result<Doc, CheckError> {
    // Anything but an object has no PROCESSES, which the checks say.
    super::json::read(input, Json(Object(Doc::default())))
}

/// A key given twice counts its last value, as a map of the object would have it.
impl Fields for Doc {
    const KEYS: &'static [&'static str] = &["EDGE_TYPES", "SPECIAL_NODES", "PROCESSES"];
    fn field<'de, A: MapAccess<'de>>(&mut self, k: usize, a: &mut A) -> Result<(), A::Error> {
        match k {
            0 => self.types = table_value::<_, Names<true>>(a, "EDGE_TYPES")?.names,
            1 => self.special = table_value::<_, Names<false>>(a, "SPECIAL_NODES")?.names,
            _ => {
                let rows = table_value::<_, Keyed<ProcessData>>(a, "PROCESSES")?;
                self.processes = Some(rows.done.into_iter().map(|(pid, d)| (pid, d.p)).collect());
            }
        }
        Ok(())
    }
}

/// A table of ids and names: EDGE_TYPES (EDGE_TYPE_ID, EDGE_TYPE) if `TYPES`, else
/// SPECIAL_NODES (NODE_ID, NODE_NAME).
#[derive(Default)]
struct Names<const TYPES: bool> {
    id: Cell<u64>,
    /// The name cell, if a string.
    name: Option<Option<String>>,
    names: HashMap<u64, String>,
}

impl<const TYPES: bool> Rows for Names<TYPES> {
    const COLUMNS: &'static [&'static str] = if TYPES { &["EDGE_TYPE_ID", "EDGE_TYPE"] } else { &["NODE_ID", "NODE_NAME"] };
    fn cell<'de, A: SeqAccess<'de>>(&mut self, c: usize, row: &mut A) -> Result<bool, A::Error> {
        match c {
            0 => put(row, Int, &mut self.id),
            _ => put(row, Json(Named), &mut self.name),
        }
    }
    fn end_row(&mut self) -> Result<(), CheckError> {
        let table = if TYPES { "EDGE_TYPES" } else { "SPECIAL_NODES" };
        // An edge type must be named; a special node's name is only shown.
        let name = match have(self.name.take(), table, Self::COLUMNS[1])? {
            Some(name) => name,
            None if TYPES => return Err(super::shape("EDGE_TYPE", "is not a string")),
            None => String::new(),
        };
        self.names.insert(col(self.id.take(), table, Self::COLUMNS[0])?, name);
        Ok(())
    }
}

/// A string, or None for a value of another kind.
struct Named;

impl Take for Named {
    type Value = Option<String>;
    fn other<E: de::Error>(self) -> Result<Option<String>, E> {
        Ok(None)
    }
    fn str<E: de::Error>(self, s: &str) -> Result<Option<String>, E> {
        Ok(Some(s.to_string()))
    }
}

/// The object of a table of an integer and an object: PROCESSES (PROCESS_ID,
/// PROCESS_DATA) and IMAGES (LOAD_ADDR, IMAGE_DATA).
trait Pair: Fields + Sized {
    /// The table, for messages.
    const TABLE: &'static str;
    /// The integer's column and the object's.
    const COLUMNS: &'static [&'static str];
    /// Whether a row must give its object (else it reads as `keyed(None)`).
    const REQUIRED: bool;
    /// The object to read, in a row that gave `key` before it, if it did.
    fn keyed(key: Option<u64>) -> Self;
}

/// The rows of a [`Pair`] table, as (integer, object).
struct Keyed<T> {
    key: Cell<u64>,
    data: Option<T>,
    done: Vec<(u64, T)>,
}

impl<T> Default for Keyed<T> {
    fn default() -> Self {
        Keyed { key: None, data: None, done: Vec::new() }
    }
}

impl<T: Pair> Rows for Keyed<T> {
    const COLUMNS: &'static [&'static str] = T::COLUMNS;
    fn cell<'de, A: SeqAccess<'de>>(&mut self, c: usize, row: &mut A) -> Result<bool, A::Error> {
        match c {
            0 => put(row, Int, &mut self.key),
            _ => {
                let key = match self.key {
                    Some(Ok(key)) => Some(key),
                    _ => None,
                };
                put(row, Json(Object(T::keyed(key))), &mut self.data)
            }
        }
    }
    fn end_row(&mut self) -> Result<(), CheckError> {
        let key = col(self.key.take(), T::TABLE, T::COLUMNS[0])?;
        let data = match self.data.take() {
            Some(data) => data,
            None if T::REQUIRED => return have(None, T::TABLE, T::COLUMNS[1]),
            None => T::keyed(None),
        };
        self.done.push((key, data));
        Ok(())
    }
}

/// A PROCESS_DATA object, of the process `pid` if its row gave it first.
struct ProcessData {
    pid: Option<u64>,
    p: Process,
}

impl Pair for ProcessData {
    const TABLE: &'static str = "PROCESSES";
    const COLUMNS: &'static [&'static str] = &["PROCESS_ID", "PROCESS_DATA"];
    const REQUIRED: bool = true;
    fn keyed(pid: Option<u64>) -> Self {
        ProcessData { pid, p: Process::default() }
    }
}

impl Fields for ProcessData {
    const KEYS: &'static [&'static str] = &["INSTR_COUNT_PER_THREAD", "INSTR_COUNT", "IMAGES", "EDGES"];
    fn field<'de, A: MapAccess<'de>>(&mut self, k: usize, a: &mut A) -> Result<(), A::Error> {
        let p = &mut self.p;
        match k {
            0 => p.per_thread = a.next_value_seed(Json(Ints(None)))?.unwrap_or_default(),
            1 => p.instr_count = Some(a.next_value_seed(Int)?.map_err(fail)?),
            2 => {
                let what = self.pid.map_or_else(|| "a process's IMAGES".to_string(), |pid| format!("process {pid} IMAGES"));
                p.images = table_value::<_, Keyed<Image>>(a, &what)?.done;
            }
            _ => p.edges = table_value::<_, Edges>(a, "EDGES")?.done,
        }
        Ok(())
    }
}

impl Pair for Image {
    const TABLE: &'static str = "IMAGES";
    const COLUMNS: &'static [&'static str] = &["LOAD_ADDR", "IMAGE_DATA"];
    const REQUIRED: bool = false;
    fn keyed(_: Option<u64>) -> Self {
        Image::default()
    }
}

/// An IMAGE_DATA object: its blocks and routines.
impl Fields for Image {
    const KEYS: &'static [&'static str] = &["BASIC_BLOCKS", "ROUTINES"];
    fn field<'de, A: MapAccess<'de>>(&mut self, k: usize, a: &mut A) -> Result<(), A::Error> {
        if k == 0 {
            self.blocks = table_value::<_, Blocks>(a, "BASIC_BLOCKS")?.done;
        } else {
            self.routines = table_value::<_, Routines>(a, "ROUTINES")?.done;
        }
        Ok(())
    }
}

#[derive(Default)]
struct Blocks {
    cells: [Cell<u64>; 4],
    done: Vec<Block>,
}

impl Rows for Blocks {
    const COLUMNS: &'static [&'static str] = &["NODE_ID", "ADDR_OFFSET", "NUM_INSTRS", "COUNT"];
    fn cell<'de, A: SeqAccess<'de>>(&mut self, c: usize, row: &mut A) -> Result<bool, A::Error> {
        put(row, Int, &mut self.cells[c])
    }
    fn end_row(&mut self) -> Result<(), CheckError> {
        let [id, offset, instrs, count] = std::mem::take(&mut self.cells);
        self.done.push(Block {
            id: col(id, "BASIC_BLOCKS", "NODE_ID")?,
            offset: col(offset, "BASIC_BLOCKS", "ADDR_OFFSET")?,
            instrs: col(instrs, "BASIC_BLOCKS", "NUM_INSTRS")?,
            count: count.transpose()?.unwrap_or(0),
        });
        Ok(())
    }
}

#[derive(Default)]
struct Routines {
    entry: Cell<u64>,
    idoms: Option<Vec<(u64, u64)>>,
    loops: Option<Vec<(u64, Vec<u64>)>>,
    done: Vec<Routine>,
}

impl Rows for Routines {
    const COLUMNS: &'static [&'static str] = &["ENTRY_NODE_ID", "NODES", "LOOPS"];
    fn cell<'de, A: SeqAccess<'de>>(&mut self, c: usize, row: &mut A) -> Result<bool, A::Error> {
        match c {
            0 => put(row, Int, &mut self.entry),
            1 => {
                self.idoms = table_cell::<_, Idoms>(row, "NODES")?.map(|t| t.done);
                Ok(self.idoms.is_some())
            }
            _ => {
                self.loops = table_cell::<_, Loops>(row, "LOOPS")?.map(|t| t.done);
                Ok(self.loops.is_some())
            }
        }
    }
    fn end_row(&mut self) -> Result<(), CheckError> {
        let entry = col(self.entry.take(), "ROUTINES", "ENTRY_NODE_ID")?;
        let idoms = have(self.idoms.take(), "ROUTINES", "NODES")?;
        self.done.push(Routine { entry, idoms, loops: self.loops.take().unwrap_or_default() });
        Ok(())
    }
}

#[derive(Default)]
struct Idoms {
    cells: [Cell<u64>; 2],
    done: Vec<(u64, u64)>,
}

impl Rows for Idoms {
    const COLUMNS: &'static [&'static str] = &["NODE_ID", "IDOM_NODE_ID"];
    fn cell<'de, A: SeqAccess<'de>>(&mut self, c: usize, row: &mut A) -> Result<bool, A::Error> {
        put(row, Int, &mut self.cells[c])
    }
    fn end_row(&mut self) -> Result<(), CheckError> {
        let [node, idom] = std::mem::take(&mut self.cells);
        self.done.push((col(node, "NODES", "NODE_ID")?, col(idom, "NODES", "IDOM_NODE_ID")?));
        Ok(())
    }
}

#[derive(Default)]
struct Loops {
    head: Cell<u64>,
    members: Option<Vec<u64>>,
    done: Vec<(u64, Vec<u64>)>,
}

impl Rows for Loops {
    const COLUMNS: &'static [&'static str] = &["LOOP_HEAD_NODE_ID", "LOOP_NODE_IDS"];
    fn cell<'de, A: SeqAccess<'de>>(&mut self, c: usize, row: &mut A) -> Result<bool, A::Error> {
        match c {
            0 => put(row, Int, &mut self.head),
            _ => {
                let mut members = None;
                let more = put(row, Json(Ints(Some("LOOP_NODE_IDS"))), &mut members)?;
                self.members = members.flatten();
                Ok(more)
            }
        }
    }
    fn end_row(&mut self) -> Result<(), CheckError> {
        let head = col(self.head.take(), "LOOPS", "LOOP_HEAD_NODE_ID")?;
        let members = have(self.members.take(), "LOOPS", "LOOP_NODE_IDS")?;
        self.done.push((head, members));
        Ok(())
    }
}

#[derive(Default)]
struct Edges {
    cells: [Cell<u64>; 4],
    per_thread: Option<Option<Vec<u64>>>,
    done: Vec<Edge>,
}

impl Rows for Edges {
    const COLUMNS: &'static [&'static str] = &["EDGE_ID", "EDGE_TYPE_ID", "SOURCE_NODE_ID", "TARGET_NODE_ID", "COUNT_PER_THREAD"];
    fn cell<'de, A: SeqAccess<'de>>(&mut self, c: usize, row: &mut A) -> Result<bool, A::Error> {
        match self.cells.get_mut(c) {
            Some(cell) => put(row, Int, cell),
            None => put(row, Json(Ints(None)), &mut self.per_thread),
        }
    }
    fn end_row(&mut self) -> Result<(), CheckError> {
        let [id, ty, src, dst] = std::mem::take(&mut self.cells);
        let (id, ty) = (col(id, "EDGES", "EDGE_ID")?, col(ty, "EDGES", "EDGE_TYPE_ID")?);
        let per_thread = PerThread::new(&self.per_thread.take().flatten().unwrap_or_default());
        self.done.push(Edge { id, ty, per_thread, src: col(src, "EDGES", "SOURCE_NODE_ID")?, dst: col(dst, "EDGES", "TARGET_NODE_ID")? });
        Ok(())
    }
}
