//! Reading a DCFG document (spec section 2) into its tables' rows as they come, without the
//! document: the checks that relate rows run once it is read, since the spec leaves the
//! order of an object's keys free (EDGE_TYPES may follow the PROCESSES that use them).

use super::json::{col, fail, have, put, table_cell, table_value, Cell, Fields, Int, Ints, Json, Object, Rows, StrOr, Take};
use super::{CheckError, PerThread};
use serde::de::{self, MapAccess, SeqAccess};
use std::collections::HashMap;

/// A DCFG as read.
#[derive(Default)]
pub struct Doc {
    pub types: HashMap<u64, String>,
    pub special: HashMap<u64, String>,
    /// None if the document has no PROCESSES.
    pub processes: Option<Vec<Process>>,
}

/// A process's PROCESS_DATA as read.
#[derive(Default)]
pub struct Process {
    pub pid: u64,
    /// INSTR_COUNT_PER_THREAD (empty if it is not an array).
    pub per_thread: Vec<u64>,
    pub instr_count: Option<u64>,
    pub images: Vec<Image>,
    pub edges: Vec<Edge>,
}

/// An image: its load address, blocks and routines.
#[derive(Default)]
pub struct Image {
    pub base: u64,
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
            0 => self.types = table_value::<_, EdgeTypes>(a, "EDGE_TYPES")?.types,
            1 => self.special = table_value::<_, SpecialNodes>(a, "SPECIAL_NODES")?.special,
            _ => self.processes = Some(table_value::<_, Processes>(a, "PROCESSES")?.done),
        }
        Ok(())
    }
}

#[derive(Default)]
struct EdgeTypes {
    id: Cell<u64>,
    /// The EDGE_TYPE cell, if a string.
    name: Option<Option<String>>,
    types: HashMap<u64, String>,
}

impl Rows for EdgeTypes {
    const COLUMNS: &'static [&'static str] = &["EDGE_TYPE_ID", "EDGE_TYPE"];
    fn cell<'de, A: SeqAccess<'de>>(&mut self, c: usize, row: &mut A) -> Result<bool, A::Error> {
        match c {
            0 => put(row, Int, &mut self.id),
            _ => put(row, Json(Named), &mut self.name),
        }
    }
    fn end_row(&mut self) -> Result<(), CheckError> {
        let name = have(self.name.take(), "EDGE_TYPES", "EDGE_TYPE")?;
        let name = name.ok_or_else(|| super::shape("EDGE_TYPE", "is not a string"))?;
        self.types.insert(col(self.id.take(), "EDGE_TYPES", "EDGE_TYPE_ID")?, name);
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

#[derive(Default)]
struct SpecialNodes {
    id: Cell<u64>,
    name: Option<String>,
    special: HashMap<u64, String>,
}

impl Rows for SpecialNodes {
    const COLUMNS: &'static [&'static str] = &["NODE_ID", "NODE_NAME"];
    fn cell<'de, A: SeqAccess<'de>>(&mut self, c: usize, row: &mut A) -> Result<bool, A::Error> {
        match c {
            0 => put(row, Int, &mut self.id),
            _ => put(row, Json(StrOr("")), &mut self.name),
        }
    }
    fn end_row(&mut self) -> Result<(), CheckError> {
        let name = have(self.name.take(), "SPECIAL_NODES", "NODE_NAME")?;
        self.special.insert(col(self.id.take(), "SPECIAL_NODES", "NODE_ID")?, name);
        Ok(())
    }
}

#[derive(Default)]
struct Processes {
    pid: Cell<u64>,
    data: Option<Process>,
    done: Vec<Process>,
}

impl Rows for Processes {
    const COLUMNS: &'static [&'static str] = &["PROCESS_ID", "PROCESS_DATA"];
    fn cell<'de, A: SeqAccess<'de>>(&mut self, c: usize, row: &mut A) -> Result<bool, A::Error> {
        match c {
            0 => put(row, Int, &mut self.pid),
            _ => {
                let pid = match self.pid {
                    Some(Ok(pid)) => Some(pid),
                    _ => None,
                };
                let mut data = None;
                let more = put(row, Json(Object(ProcessData { pid, p: Process::default() })), &mut data)?;
                self.data = data.map(|d| d.p);
                Ok(more)
            }
        }
    }
    fn end_row(&mut self) -> Result<(), CheckError> {
        let pid = col(self.pid.take(), "PROCESSES", "PROCESS_ID")?;
        let data = have(self.data.take(), "PROCESSES", "PROCESS_DATA")?;
        self.done.push(Process { pid, ..data });
        Ok(())
    }
}

/// A PROCESS_DATA object, of the process `pid` if its row gave it first.
struct ProcessData {
    pid: Option<u64>,
    p: Process,
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
                p.images = table_value::<_, Images>(a, &what)?.done;
            }
            _ => p.edges = table_value::<_, Edges>(a, "EDGES")?.done,
        }
        Ok(())
    }
}

#[derive(Default)]
struct Images {
    base: Cell<u64>,
    data: Option<Image>,
    done: Vec<Image>,
}

impl Rows for Images {
    const COLUMNS: &'static [&'static str] = &["LOAD_ADDR", "IMAGE_DATA"];
    fn cell<'de, A: SeqAccess<'de>>(&mut self, c: usize, row: &mut A) -> Result<bool, A::Error> {
        match c {
            0 => put(row, Int, &mut self.base),
            _ => put(row, Json(Object(Image::default())), &mut self.data),
        }
    }
    fn end_row(&mut self) -> Result<(), CheckError> {
        let base = col(self.base.take(), "IMAGES", "LOAD_ADDR")?;
        self.done.push(Image { base, ..self.data.take().unwrap_or_default() });
        Ok(())
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
