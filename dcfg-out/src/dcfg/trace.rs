//! Writing the DCFG-trace: chunk-parallel, each chunk's node sequence turned into edge ids
//! encoded with the process's transition table, rows written in order as they come.

use super::flow::{node, ChunkStart, Node};
use super::*;

impl Process<'_> {
    /// Writes the process's row of the DCFG-trace's PROCESSES table, streaming the thread
    /// data chunk by chunk as recovery delivers it.
    pub fn write_trace_row(&self, out: &mut dyn Write, progress: &(dyn Fn(u64) + Sync)) -> Result<(), DcfgError> {
        let g = self.edge_graph();
        let enc = Encoder::new(&g);
        let starts: Vec<&[ChunkStart]> = self.flows.iter().map(|f| f.chunk_starts.as_slice()).collect();
        // Each chunk's thread (its position in the thread table, which THREAD_ID and the
        // DCFG's per-thread counts use: a profile's thread indices need not be 0..n-1), its
        // place among the thread's chunks, and whether it is the thread's last; built once.
        let mut place: FxHashMap<(u32, u32), (u32, usize, bool)> = FxHashMap::default();
        for t in 0..self.rec.profile.threads.len() {
            let chunks = self.rec.thread_chunks(t as u32);
            for (k, c) in chunks.iter().enumerate() {
                place.entry((c.thread, c.seq)).or_insert((t as u32, k, k + 1 == chunks.len()));
            }
        }
        // The first chunks' rows wait until the dictionary, chosen from them, is written.
        let mut sample: Vec<(u32, ChunkText)> = Vec::new();
        let mut sampled = 0usize;
        let mut w = RowWriter { out, current: None, preceding: 0 };
        let mut started = false;
        // Once chosen, the workers substitute as they finish chunks.
        let chosen: std::sync::OnceLock<Dictionary> = std::sync::OnceLock::new();
        let start = |w: &mut RowWriter, sample: &mut Vec<(u32, ChunkText)>| -> io::Result<()> {
            let d = chosen.get_or_init(|| Dictionary::choose(sample.iter().map(|(_, c)| c.text.as_str()), DICTIONARY_ENTRIES));
            let mut entries: Vec<(&str, &str)> = d.entries().collect();
            entries.sort_unstable();
            let dict: serde_json::Map<String, Value> = entries.into_iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
            write!(w.out, "[{}, {}, [[\"CURRENT_EDGE_ID\", \"TRANSITION_CODE\", \"NEXT_EDGE_IDS\"]", self.pid, Value::Object(dict))?;
            for r in enc.rows(&g) {
                write!(w.out, ",\n  [{}, \"{}\", {}]", r.current, code_text(r.code, r.len), json!(r.next))?;
            }
            write!(w.out, "],\n [[\"THREAD_ID\", \"TRACE_DATA\"]")?;
            for (t, mut c) in sample.drain(..) {
                c.text = d.substitute(&c.text);
                w.row(t, &c)?;
            }
            Ok(())
        };
        let thread_of = |c: &dep_profile::container::ChunkRef| place.get(&(c.thread, c.seq)).map_or(c.thread, |p| p.0);
        self.rec.events(Source::Blocks).progress(progress).ordered(
            |c| {
                let (t, k, last) = place.get(&(c.thread, c.seq)).copied().unwrap_or((c.thread, 0, true));
                let start = starts.get(t as usize).and_then(|s| s.get(k)).copied().unwrap_or(ChunkStart { prev: None, how: How::Flow });
                TraceChunk::new(self, &enc, start, last)
            },
            |t| {
                let mut c = t.finish_chunk();
                if let Some(d) = chosen.get() {
                    c.text = d.substitute(&c.text);
                    c.substituted = true;
                }
                Ok(c)
            },
            |c: &ChunkText| c.text.len(),
            |c, mut chunk| {
                let r = if started {
                    if !chunk.substituted {
                        chunk.text = chosen.get().expect("chosen when started").substitute(&chunk.text);
                    }
                    w.row(thread_of(c), &chunk)
                } else {
                    sampled += chunk.text.len();
                    sample.push((thread_of(c), chunk));
                    if sampled >= DICTIONARY_SAMPLE {
                        started = true;
                        start(&mut w, &mut sample)
                    } else {
                        Ok(())
                    }
                };
                Ok(r?)
            },
        )?;
        if !started {
            start(&mut w, &mut sample)?;
        }
        if w.current.is_some() {
            write!(w.out, "]]")?;
        }
        write!(w.out, "]]")?;
        Ok(())
    }
}

/// Text of the first chunks from which a process's STRING_DICTIONARY is chosen.
const DICTIONARY_SAMPLE: usize = 4 << 20;
/// Entries at most (two-character keys).
const DICTIONARY_ENTRIES: usize = 64 * 64;

/// Writes THREAD_DATA rows in order, with the preceding instruction counts.
struct RowWriter<'o> {
    out: &'o mut dyn Write,
    current: Option<u32>,
    preceding: u64,
}

impl RowWriter<'_> {
    fn row(&mut self, thread: u32, c: &ChunkText) -> io::Result<()> {
        if self.current != Some(thread) {
            if self.current.is_some() {
                write!(self.out, "]]")?;
            }
            let header = "[\"PRECEDING_INSTR_COUNT\", \"INSTR_COUNT\", \"EDGE_COUNT\", \"FIRST_EDGE_ID\", \"EDGE_ID_SEQUENCE\"]";
            write!(self.out, ",\n  [{thread}, [{header}")?;
            self.current = Some(thread);
            self.preceding = 0;
        }
        if c.edges > 0 {
            write!(self.out, ",\n    [{}, {}, {}, {}, \"{}\"]", self.preceding, c.instrs, c.edges, c.first, c.text)?;
        }
        self.preceding += c.instrs;
        Ok(())
    }
}

/// Writes the DCFG-trace of `processes`.
pub fn write_trace(out: &mut dyn Write, processes: &[Process], progress: &(dyn Fn(u64) + Sync)) -> Result<(), DcfgError> {
    write!(out, "{{\"MAJOR_VERSION\": 1, \"MINOR_VERSION\": 0, \"PROCESSES\": [[\"PROCESS_ID\", \"STRING_DICTIONARY\", \"TRANSITION_TABLE\", \"THREAD_DATA\"]")?;
    for p in processes {
        write!(out, ",\n ")?;
        p.write_trace_row(out, progress)?;
    }
    writeln!(out, "]}}")?;
    Ok(())
}

/// One chunk's trace row, before its preceding count is known.
pub struct ChunkText {
    /// Whether `text` has the dictionary's references already.
    substituted: bool,
    instrs: u64,
    edges: u64,
    first: u32,
    text: String,
}

/// Front cache of transition -> edge id, in front of the process's map.
const CACHE: usize = 4096;

/// Turns one chunk's blocks into edge ids.
struct TraceChunk<'a, 'r> {
    p: &'a Process<'r>,
    enc: &'a Encoder,
    prev: Option<Node>,
    how: How,
    last_chunk: bool,
    /// The chunk's first edge, and how many it has.
    first: Option<u32>,
    edges: u64,
    /// Edges the last row named beyond its first, still to come.
    skip: u32,
    bits: BitWriter,
    instrs: u64,
    cache: Vec<(u128, u32)>,
    /// Plain transitions between whole blocks, by (from id, to id): the edge id and its code.
    plain: Vec<(u64, u32, (u32, u8, u8))>,
    prev_whole: bool,
    /// Unrecorded instructions since the last node: (thread, how many).
    gap: Option<(u32, u64)>,
}

impl<'a, 'r> TraceChunk<'a, 'r> {
    fn new(p: &'a Process<'r>, enc: &'a Encoder, start: ChunkStart, last_chunk: bool) -> Self {
        TraceChunk {
            p,
            enc,
            prev: start.prev,
            how: start.how,
            last_chunk,
            first: None,
            edges: 0,
            skip: 0,
            bits: BitWriter::default(),
            instrs: 0,
            cache: vec![(u128::MAX, 0); CACHE],
            plain: vec![(u64::MAX, 0, (0, 0, 0)); CACHE],
            // (A chunk's first block takes the general path.)
            prev_whole: false,
            gap: None,
        }
    }

    #[inline]
    fn edge(&mut self, e: u32) {
        if self.first.is_none() {
            self.first = Some(e);
        } else {
            self.enc.push(e, &mut self.skip, &mut self.bits);
        }
        self.edges += 1;
    }

    #[inline]
    fn enter(&mut self, n: Node) {
        let p = self.p;
        let e = match self.prev {
            None => p.entry_edge[&n],
            Some(prev) => {
                let k = (prev as u128) << 64 | (n as u128) << 2 | self.how as u128;
                let h = ((prev ^ n.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) as usize & (CACHE - 1);
                if self.cache[h].0 == k {
                    self.cache[h].1
                } else {
                    let e = p.by_transition[&(prev, n, self.how)];
                    self.cache[h] = (k, e);
                    e
                }
            }
        };
        if let Some(prev) = self.prev {
            self.instrs += parts(prev).1 as u64;
        }
        self.edge(p.edge_base + e);
        self.prev = Some(n);
        self.how = How::Flow;
    }

    fn finish_chunk(mut self) -> ChunkText {
        if self.last_chunk {
            if let Some(last) = self.prev {
                self.instrs += parts(last).1 as u64;
                self.edge(self.p.edge_base + self.p.exit_edge[&last]);
            }
        }
        ChunkText {
            substituted: false,
            instrs: self.instrs,
            edges: self.edges,
            first: self.first.unwrap_or(0),
            text: compress_repeats(&self.bits.finish()),
        }
    }
}

impl Sink for TraceChunk<'_, '_> {
    type Error = DcfgError;

    #[inline]
    fn block(&mut self, b: &BlockEvent) -> Result<bool, Self::Error> {
        if let Some((thread, instructions)) = self.gap.take() {
            return Err(DcfgError::Unrecorded { thread, instructions });
        }
        let (n, whole) = node_of(b)?;
        self.enter(n);
        self.prev_whole = whole;
        Ok(true)
    }

    fn marker(&mut self, thread: u32, m: Marker) -> Result<bool, Self::Error> {
        if let Marker::Unrecorded(instructions) = m {
            // The graph was built from the same chunks, and refused a node after a gap
            // that followed one; kept here for a trace read on its own.
            if self.prev.is_some() {
                self.gap = Some((thread, instructions));
            }
            return Ok(true);
        }
        self.how = self.how.after(m);
        Ok(true)
    }

    fn run(&mut self, run: &Run) -> Result<bool, Self::Error> {
        if let Some((thread, instructions)) = self.gap.take() {
            return Err(DcfgError::Unrecorded { thread, instructions });
        }
        // Run blocks are whole, with no marker between them. Until the chunk has its first
        // edge and a whole block before, the general path; then the loop below, which keeps
        // its state in locals.
        let blocks = run.blocks();
        let mut k = 0;
        while k < blocks.len() && !(self.first.is_some() && self.prev.is_some() && self.prev_whole && self.how == How::Flow) {
            self.enter(node(blocks[k].id, blocks[k].executed as u32));
            self.prev_whole = true;
            k += 1;
        }
        let Some(mut prev) = self.prev.filter(|_| k < blocks.len()) else { return Ok(true) };
        let mut bits = std::mem::take(&mut self.bits);
        let (mut skip, mut instrs, mut edges) = (self.skip, self.instrs, self.edges);
        let (p, enc, plain) = (self.p, self.enc, &mut self.plain);
        for b in &blocks[k..] {
            let n = node(b.id, b.executed as u32);
            let key = (prev >> 16) << 32 | b.id as u64;
            let h = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) as usize & (CACHE - 1);
            let slot = plain[h];
            let code = if slot.0 == key {
                slot.2
            } else {
                let e = p.edge_base + p.by_transition[&(prev, n, How::Flow)];
                let code = enc.code(e);
                plain[h] = (key, e, code);
                code
            };
            instrs += parts(prev).1 as u64;
            Encoder::push_code(code, &mut skip, &mut bits);
            edges += 1;
            prev = n;
        }
        (self.skip, self.instrs, self.edges, self.bits, self.prev) = (skip, instrs, edges, bits, Some(prev));
        Ok(true)
    }
}
