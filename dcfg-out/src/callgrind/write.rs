//! The Callgrind format (shared/specs/callgrind-format.xml), as callgrind's dump.c and its
//! readers have it: header up to `events:` (callgrind_annotate stops reading the header
//! there), `summary:` after it and `totals:` at the end; `ob=`/`fl=`/`fn=` per function
//! with name compression (`(id) name` once, `(id)` after; files share one id space for
//! fl/fi/fe/cfi, objects for ob/cob, functions for fn/cfn); `fi=`/`fe=` where a line of a
//! function comes from another file (inlined code); cost lines by instruction address
//! (the file's virtual address, so that objdump annotation works) and line, relative to
//! the previous cost line (`+n`, `-n`, `*`); `calls=` with the callee's entry and the
//! inclusive cost at the call site; `jump=` and `jcnd=followed/executed` for jumps within
//! a function.

use super::calls::Totals;
use super::costs::{Cost, Tables};
use crate::program::calls::Exit;
use crate::program::symbols::Symbolizer;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::io::{self, Write};

/// What the header says.
pub struct Header<'a> {
    pub pid: u32,
    pub cmd: &'a str,
    /// `thread: N` for a file of one thread.
    pub thread: Option<u32>,
    pub dump_instr: bool,
}

/// Where an instruction is, as the file names it.
#[derive(Clone, Debug)]
struct Where {
    object: String,
    /// Run-time address minus this is the file's address.
    bias: u64,
    file: String,
    function: String,
    /// Where the function starts: functions of one name are told apart by it.
    start: u64,
    line: u32,
}

/// Name compression: `(id) name` the first time, `(id)` after. Ids are per thing named
/// (`key`): two functions of one name get two ids, as callgrind gives them.
#[derive(Default)]
struct Names<K> {
    ids: FxHashMap<K, usize>,
}

impl<K: std::hash::Hash + Eq> Names<K> {
    fn get(&mut self, key: K, name: &str) -> String {
        if let Some(id) = self.ids.get(&key) {
            return format!("({id})");
        }
        let id = self.ids.len() + 1;
        self.ids.insert(key, id);
        format!("({id}) {name}")
    }
}

/// Relative subpositions against the previous cost line.
struct Positions {
    instr: bool,
    last: Option<(u64, u32)>,
}

impl Positions {
    fn sub(out: &mut String, last: Option<u64>, v: u64, hex: bool) {
        use std::fmt::Write;
        match last {
            Some(l) if l == v => out.push('*'),
            Some(l) if v > l && v - l < 1 << 20 => write!(out, "+{}", v - l).unwrap(),
            Some(l) if l > v && l - v < 1 << 20 => write!(out, "-{}", l - v).unwrap(),
            _ if hex => write!(out, "{v:#x}").unwrap(),
            _ => write!(out, "{v}").unwrap(),
        }
    }

    /// The subpositions of a cost line at (`instr`, `line`), updating the state.
    fn next(&mut self, instr: u64, line: u32) -> String {
        let mut s = String::new();
        if self.instr {
            Self::sub(&mut s, self.last.map(|l| l.0), instr, true);
            s.push(' ');
        }
        Self::sub(&mut s, self.last.map(|l| l.1 as u64), line as u64, false);
        self.last = Some((instr, line));
        s
    }

    /// Absolute subpositions of a target (calls=, jump=): they do not move the state.
    fn target(&self, instr: u64, line: u32) -> String {
        if self.instr {
            format!("{instr:#x} {line}")
        } else {
            format!("{line}")
        }
    }
}

fn costs(c: &Cost) -> String {
    format!("{} {} {}", c[0], c[1], c[2])
}

/// Writes one profile file from `tot`.
pub fn write(tables: &Tables, tot: &Totals, symbols: &Symbolizer, h: &Header, out: &mut dyn Write) -> io::Result<()> {
    // Self cost per instruction address.
    let mut selfc: FxHashMap<u64, Cost> = FxHashMap::default();
    let whole = tot.whole.iter().enumerate().filter(|(_, &n)| n > 0).map(|(b, &n)| ((b as u64) << 16 | tables.len(b as u32) as u64, n));
    let runs: Vec<(u64, u64)> = whole.chain(tot.runs.iter().map(|(&k, &n)| (k, n))).collect();
    for &(key, n) in &runs {
        let (b, executed) = ((key >> 16) as u32, (key & 0xffff) as u32);
        let first = tables.first[b as usize] as usize;
        for k in first..first + executed as usize {
            let (r, w) = tables.insn_refs(k);
            let c = selfc.entry(tables.pc[k]).or_default();
            c[0] += n;
            c[1] += r as u64 * n;
            c[2] += w as u64 * n;
        }
    }
    for (&k, &(r, w)) in &tot.dyn_refs {
        let c = selfc.entry(tables.pc[k as usize]).or_default();
        c[1] += r;
        c[2] += w;
    }
    for (&site, c) in &tot.plt_cost {
        let s = selfc.entry(site).or_default();
        for k in 0..3 {
            s[k] += c[k];
        }
    }
    let entry = |b: u32| tables.pc[tables.first[b as usize] as usize];
    // Calls and jumps by site.
    let mut calls: BTreeMap<u64, Vec<(u64, super::calls::Arc)>> = BTreeMap::new();
    for (&(site, callee), arc) in &tot.arcs {
        calls.entry(site).or_default().push((entry(callee), *arc));
    }
    let mut jumps: BTreeMap<u64, Vec<(u64, u64, Option<u64>)>> = BTreeMap::new();
    let whole = |b: u32| tot.whole.get(b as usize).copied().unwrap_or(0);
    for (&(from, to), &n) in &tot.trans {
        if let Exit::Jump { site, conditional } = tables.exits.exit[from as usize] {
            if tables.exits.func[from as usize] != tables.exits.func[to as usize] {
                continue;
            }
            let target = entry(to);
            match conditional {
                Some(t) if t == target => jumps.entry(site).or_default().push((target, n, Some(whole(from)))),
                Some(_) => {}
                None => jumps.entry(site).or_default().push((target, n, None)),
            }
        }
    }
    // Where every address is, on all cores.
    let mut addrs: Vec<u64> = selfc.keys().copied().collect();
    addrs.extend(calls.keys());
    addrs.extend(calls.values().flatten().map(|c| c.0));
    addrs.extend(jumps.keys());
    addrs.extend(jumps.values().flatten().map(|j| j.0));
    addrs.sort_unstable();
    addrs.dedup();
    // Code no symbol covers is named after the start of its block, as Callgrind names a
    // block it finds no symbol for: per block, not per instruction.
    let mut block_start: FxHashMap<u64, u64> = FxHashMap::default();
    for &(key, _) in &runs {
        let b = (key >> 16) as u32;
        let first = tables.first[b as usize] as usize;
        // The nearest block start at or before it, whatever the order blocks come in.
        for k in first..tables.first[b as usize + 1] as usize {
            let start = tables.pc[first];
            block_start.entry(tables.pc[k]).and_modify(|s| *s = (*s).max(start)).or_insert(start);
        }
    }
    let places = locate(&addrs, &block_start, symbols);
    let at = |a: u64| &places[addrs.binary_search(&a).expect("located")];

    // Functions: (object, function, start) -> addresses, in order.
    let mut funcs: BTreeMap<(&str, &str, u64), Vec<u64>> = BTreeMap::new();
    for a in selfc.keys().chain(calls.keys()).chain(jumps.keys()) {
        let w = at(*a);
        funcs.entry((w.object.as_str(), w.function.as_str(), w.start)).or_default().push(*a);
    }
    for v in funcs.values_mut() {
        v.sort_unstable();
        v.dedup();
    }

    let mut w = io::BufWriter::with_capacity(1 << 20, out);
    writeln!(w, "# callgrind format")?;
    writeln!(w, "version: 1")?;
    writeln!(w, "creator: dep {}", env!("CARGO_PKG_VERSION"))?;
    writeln!(w, "pid: {}", h.pid)?;
    writeln!(w, "cmd: {}", h.cmd)?;
    if let Some(t) = h.thread {
        writeln!(w, "thread: {t}")?;
    }
    writeln!(w, "part: 1")?;
    writeln!(w)?;
    writeln!(w, "positions: {}", if h.dump_instr { "instr line" } else { "line" })?;
    writeln!(w, "events: Ir Dr Dw")?;
    writeln!(w, "summary: {}", costs(&tot.total))?;
    writeln!(w)?;
    let (mut obs, mut files) = (Names::<&str>::default(), Names::<&str>::default());
    let mut fns = Names::<(&str, &str, u64)>::default();
    let mut pos = Positions { instr: h.dump_instr, last: None };
    for (&(object, function, start), addrs) in &funcs {
        let home = &at(addrs[0]).file;
        writeln!(w, "ob={}", obs.get(object, object))?;
        writeln!(w, "fl={}", files.get(home, home))?;
        writeln!(w, "fn={}", fns.get((object, function, start), function))?;
        let mut cur_file = home.clone();
        for &a in addrs {
            let p = at(a);
            if p.file != cur_file {
                if &p.file == home {
                    writeln!(w, "fe={}", files.get(home, home))?;
                } else {
                    writeln!(w, "fi={}", files.get(&p.file, &p.file))?;
                }
                cur_file = p.file.clone();
            }
            let fa = a.wrapping_sub(p.bias);
            if let Some(c) = selfc.get(&a) {
                writeln!(w, "{} {}", pos.next(fa, p.line), costs(c))?;
            }
            if let Some(cs) = calls.get(&a) {
                let mut cs = cs.clone();
                cs.sort_by_key(|c| (c.0, c.1.count, c.1.cost));
                for (target, arc) in cs {
                    let t = at(target);
                    writeln!(w, "cob={}", obs.get(&t.object, &t.object))?;
                    writeln!(w, "cfi={}", files.get(&t.file, &t.file))?;
                    writeln!(w, "cfn={}", fns.get((&t.object, &t.function, t.start), &t.function))?;
                    writeln!(w, "calls={} {}", arc.count, pos.target(target.wrapping_sub(t.bias), t.line))?;
                    writeln!(w, "{} {}", pos.next(fa, p.line), costs(&arc.cost))?;
                }
            }
            if let Some(js) = jumps.get(&a) {
                let mut js = js.clone();
                js.sort_unstable();
                for (target, n, executed) in js {
                    let t = at(target);
                    let tp = pos.target(target.wrapping_sub(t.bias), t.line);
                    match executed {
                        Some(e) => writeln!(w, "jcnd={n}/{} {tp}", e.max(n))?,
                        None => writeln!(w, "jump={n} {tp}")?,
                    }
                    writeln!(w, "{}", pos.next(fa, p.line))?;
                }
            }
        }
        writeln!(w)?;
    }
    writeln!(w, "totals: {}", costs(&tot.total))?;
    w.flush()
}

/// Object, file, function and line of each address, on all cores.
fn locate(addrs: &[u64], block_start: &FxHashMap<u64, u64>, symbols: &Symbolizer) -> Vec<Where> {
    crate::program::symbols::on_all_cores(addrs, |a| {
        let p = symbols.place(a);
        let (object, bias) = symbols.object(a).map_or(("???".to_string(), 0), |(o, b)| (o.to_string(), b));
        let (function, start) = match block_start.get(&a) {
            Some(&b) if !symbols.covered(a) => symbols.function(b),
            _ => (p.symbol, p.start),
        };
        Where { object, bias, file: p.file.unwrap_or_else(|| "???".into()), function, start, line: p.line.unwrap_or(0) }
    })
}
