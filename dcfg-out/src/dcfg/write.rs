//! Writing the DCFG: the IMAGES table with its routines, the EDGES table streamed, and
//! the file's other tables.

use super::*;

impl Process<'_> {
    /// The process's IMAGES table; file names are added to `files`.
    pub(super) fn images_table(&self, sym: &Symbolizer, files: &mut FileNames) -> Value {
        let plans = &self.rec.plans;
        let mut images_table = vec![json!(["IMAGE_ID", "LOAD_ADDR", "SIZE", "IMAGE_DATA"])];
        // Each image's edges (those with an end in it), gathered once for its routines.
        let mut image_edges: Vec<Vec<u32>> = vec![Vec::new(); self.images.len()];
        for (k, e) in self.edges.iter().enumerate() {
            let image = |end: End| if let End::Node(n) = end { Some(self.nodes[n as usize].image) } else { None };
            let (a, b) = (image(e.src), image(e.dst));
            for i in [a, b.filter(|&b| Some(b) != a)].into_iter().flatten() {
                image_edges[i].push(k as u32);
            }
        }
        for (k, im) in self.images.iter().enumerate() {
            let mut data = serde_json::Map::new();
            if let Some(p) = &im.path {
                data.insert("FILE_NAME_ID".into(), json!(files.id(p)));
            }
            let symbols = if im.path.is_some() { sym.module_symbols(im.base) } else { Vec::new() };
            if !symbols.is_empty() {
                let mut t = vec![json!(["NAME", "ADDR_OFFSET", "SIZE"])];
                t.extend(symbols.iter().map(|(n, off, size)| json!([n, format!("{off:#x}"), size])));
                data.insert("SYMBOLS".into(), Value::Array(t));
            }
            let starts: std::collections::HashSet<u64> = symbols.iter().map(|s| s.1).collect();
            // Source lines of every instruction the image's blocks hold, merged into runs.
            let mut pcs: BTreeMap<u64, u8> = BTreeMap::new();
            for &n in &im.nodes {
                let (id, executed) = parts(self.nodes[n as usize].key);
                for i in plans.plan(id).insns.iter().take(executed as usize) {
                    pcs.insert(i.pc, i.len);
                }
            }
            let mut source: Vec<Value> = Vec::new();
            let mut run: Option<(String, u32, u64, u64, u32)> = None; // file, line, start, end, instrs
            if im.path.is_some() {
                for (&pc, &len) in &pcs {
                    let place = sym.place(pc);
                    let here = place.file.zip(place.line);
                    match (&mut run, &here) {
                        (Some(r), Some((f, l))) if r.0 == *f && r.1 == *l && r.3 == pc => {
                            r.3 = pc + len as u64;
                            r.4 += 1;
                        }
                        _ => {
                            if let Some(r) = run.take() {
                                source.push(json!([files.id(&r.0), r.1, format!("{:#x}", r.2 - im.base), r.3 - r.2, r.4]));
                            }
                            if let Some((f, l)) = here {
                                run = Some((f, l, pc, pc + len as u64, 1));
                            }
                        }
                    }
                }
                if let Some(r) = run.take() {
                    source.push(json!([files.id(&r.0), r.1, format!("{:#x}", r.2 - im.base), r.3 - r.2, r.4]));
                }
            }
            if !source.is_empty() {
                let mut t = vec![json!(["FILE_NAME_ID", "LINE_NUM", "ADDR_OFFSET", "SIZE", "NUM_INSTRS"])];
                t.extend(source);
                data.insert("SOURCE_DATA".into(), Value::Array(t));
            }
            let mut blocks = vec![json!(["NODE_ID", "ADDR_OFFSET", "SIZE", "NUM_INSTRS", "LAST_INSTR_OFFSET", "COUNT"])];
            let mut sorted = im.nodes.clone();
            sorted.sort_by_key(|&n| (self.nodes[n as usize].addr, self.nodes[n as usize].key));
            for &n in &sorted {
                let x = &self.nodes[n as usize];
                blocks.push(json!([self.node_id(n), format!("{:#x}", x.addr - im.base), x.size, x.instrs, x.last_offset, x.count]));
            }
            data.insert("BASIC_BLOCKS".into(), Value::Array(blocks));
            let mut routines = vec![json!(["ENTRY_NODE_ID", "EXIT_NODE_IDS", "NODES", "LOOPS"])];
            routines.extend(self.routines(k, &image_edges[k], &starts));
            data.insert("ROUTINES".into(), Value::Array(routines));
            images_table.push(json!([k + 1, format!("{:#x}", im.base), im.size, Value::Object(data)]));
        }
        Value::Array(images_table)
    }

    /// Writes the process's row of the DCFG's PROCESSES table, `[pid, {EDGES, IMAGES,
    /// INSTR_COUNT, INSTR_COUNT_PER_THREAD}]` as serde_json writes a map (keys sorted, no
    /// spaces), with the EDGES table streamed: a count for every thread of every edge is
    /// the format's, but only the threads that took an edge are held.
    pub(super) fn write_dcfg_row(&self, images: &Value, out: &mut dyn Write) -> io::Result<()> {
        write!(
            out,
            "[{},{{\"EDGES\":[[\"EDGE_ID\",\"SOURCE_NODE_ID\",\"TARGET_NODE_ID\",\"EDGE_TYPE_ID\",\"COUNT_PER_THREAD\"]",
            self.pid
        )?;
        let threads = self.instr_per_thread.len();
        for (k, e) in self.edges.iter().enumerate() {
            write!(out, ",[{},{},{},{},[", self.edge_base + k as u32, self.end_id(e.src), self.end_id(e.dst), e.ty.id())?;
            let mut taken = e.per_thread.iter().peekable();
            for t in 0..threads {
                let c = taken.next_if(|&&(u, _)| u as usize == t).map_or(0, |&(_, c)| c);
                write!(out, "{}{c}", if t > 0 { "," } else { "" })?;
            }
            out.write_all(b"]]")?;
        }
        out.write_all(b"],\"IMAGES\":")?;
        serde_json::to_writer(&mut *out, images)?;
        write!(out, ",\"INSTR_COUNT\":{},\"INSTR_COUNT_PER_THREAD\":", self.instr_per_thread.iter().sum::<u64>())?;
        serde_json::to_writer(&mut *out, &self.instr_per_thread)?;
        out.write_all(b"}]")
    }
}

/// The file-name table, filled as names are used.
#[derive(Default)]
pub struct FileNames {
    ids: BTreeMap<String, u32>,
}

impl FileNames {
    pub fn id(&mut self, name: &str) -> u32 {
        let n = self.ids.len() as u32 + 1;
        *self.ids.entry(name.to_string()).or_insert(n)
    }

    fn table(&self) -> Value {
        let mut rows: Vec<(u32, &String)> = self.ids.iter().map(|(k, v)| (*v, k)).collect();
        rows.sort();
        let mut t = vec![json!(["FILE_NAME_ID", "FILE_NAME"])];
        t.extend(rows.into_iter().map(|(id, n)| json!([id, n])));
        Value::Array(t)
    }
}

/// Writes the DCFG of `processes`.
pub fn write_dcfg(out: &mut dyn Write, processes: &[Process], sym: &[Symbolizer]) -> Result<(), DcfgError> {
    // The images first: FILE_NAMES, which they fill, comes before PROCESSES.
    let mut files = FileNames::default();
    let images: Vec<Value> = processes.iter().zip(sym).map(|(p, s)| p.images_table(s, &mut files)).collect();
    let mut types = vec![json!(["EDGE_TYPE_ID", "EDGE_TYPE"])];
    types.extend(EdgeType::ALL.iter().map(|t| json!([t.id(), t.name()])));
    // The document's keys in the order serde_json writes a map's (sorted), the processes
    // streamed one by one.
    out.write_all(b"{\"EDGE_TYPES\":")?;
    serde_json::to_writer(&mut *out, &types).map_err(io::Error::from)?;
    out.write_all(b",\"FILE_NAMES\":")?;
    serde_json::to_writer(&mut *out, &files.table()).map_err(io::Error::from)?;
    out.write_all(b",\"MAJOR_VERSION\":1,\"MINOR_VERSION\":0,\"PROCESSES\":[[\"PROCESS_ID\",\"PROCESS_DATA\"]")?;
    for (p, im) in processes.iter().zip(&images) {
        out.write_all(b",")?;
        p.write_dcfg_row(im, out)?;
    }
    out.write_all(b"],\"SPECIAL_NODES\":")?;
    serde_json::to_writer(&mut *out, &json!([["NODE_ID", "NODE_NAME"], [START, "START"], [END, "END"]])).map_err(io::Error::from)?;
    out.write_all(b"}\n")?;
    Ok(())
}
