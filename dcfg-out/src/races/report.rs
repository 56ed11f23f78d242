//! What `dep races` says: each race once per pair of source locations, with both accesses
//! (thread, pc, function, file:line, read or write, size, locks held, and for code without
//! line information the call site it was called from), the address and the variable, heap
//! block or stack it lies in, and how often it was seen; as text, or as JSON lines.

use super::engine::{Race, Side, Site};
use super::Analysis;
use crate::program::symbols::{Place, Symbolizer};
use rustc_hash::FxHashMap;
use serde_json::{json, Value};
use std::io::{self, Write};

/// Places of every code address the report names.
struct Places(FxHashMap<u64, Place>);

impl Places {
    fn new(symbols: &Symbolizer, mut addrs: Vec<u64>) -> Places {
        addrs.sort_unstable();
        addrs.dedup();
        let places = symbols.places(&addrs);
        Places(addrs.into_iter().zip(places).collect())
    }

    fn get(&self, a: u64) -> &Place {
        &self.0[&a]
    }
}

/// Where an access is in the source: its own line, or its caller's where its code has no
/// line information (a C library routine called with bad arguments).
struct Loc<'p> {
    place: &'p Place,
    via: Option<&'p Place>,
}

impl Loc<'_> {
    /// The source location the report groups by: for library code, the call into it (the
    /// library's own line, where its debug file gives one, is in the report).
    fn key(&self) -> String {
        let line = |p: &Place| p.file.as_ref().zip(p.line).map(|(f, l)| format!("{f}:{l}"));
        match (self.via, line(self.place)) {
            (Some(v), _) => match line(v) {
                Some(l) => format!("{} via {l}", self.place.function),
                None => format!("{} via {}", self.place.function, v.function),
            },
            (None, Some(l)) => l,
            (None, None) => self.place.function.clone(),
        }
    }
}

fn place_text(p: &Place) -> String {
    match (&p.file, p.line) {
        (Some(f), Some(l)) => format!("{} {}:{l}", p.function, short(f)),
        _ => match &p.module {
            Some(m) => format!("{} ({})", p.function, short(m)),
            None => p.function.clone(),
        },
    }
}

fn place_json(pc: u64, p: &Place) -> Value {
    json!({"pc": format!("{pc:#x}"), "function": p.function, "file": p.file, "line": p.line, "module": p.module})
}

fn short(path: &str) -> &str {
    std::path::Path::new(path).file_name().and_then(|n| n.to_str()).unwrap_or(path)
}

fn locks_text(locks: &[(u64, bool)]) -> String {
    if locks.is_empty() {
        return "no locks".into();
    }
    let l: Vec<String> = locks.iter().map(|&(a, shared)| format!("{a:#x}{}", if shared { " (shared)" } else { "" })).collect();
    format!("locks {}", l.join(", "))
}

fn kind(s: &Site) -> &'static str {
    match (s.kernel, s.atomic, s.write) {
        (true, _, true) => "kernel's write (system call)",
        (true, _, false) => "kernel's read (system call)",
        (false, false, true) => "write",
        (false, false, false) => "read",
        (false, true, true) => "atomic write",
        (false, true, false) => "atomic read",
    }
}

/// The report's view of a finished analysis.
pub struct Report<'a> {
    a: &'a Analysis,
    symbols: &'a Symbolizer,
    places: Places,
    /// Also report races this run's lock order happened to prevent.
    pub potential: bool,
    /// Per race: its address lies in an object declared atomic (left out).
    declared_atomic: Vec<bool>,
}

impl<'a> Report<'a> {
    /// Names every place the analysis found (on all cores).
    pub fn new(a: &'a Analysis, symbols: &'a Symbolizer) -> Report<'a> {
        let mut addrs = Vec::new();
        let site = |s: &Site, addrs: &mut Vec<u64>| {
            addrs.push(s.pc);
            if s.caller != 0 {
                addrs.push(s.caller - 1);
            }
        };
        for r in &a.races {
            site(&r.first.site, &mut addrs);
            site(&r.second.site, &mut addrs);
            if let Some((_, b)) = r.block {
                if b.caller != 0 {
                    addrs.push(b.caller - 1);
                }
            }
        }
        if let Some((_, _, _, seen)) = &a.region {
            for &(_, s, _) in seen.keys() {
                site(&a.sites[s as usize], &mut addrs);
            }
        }
        let mut declared = super::declared::Declared::default();
        let declared_atomic = a
            .races
            .iter()
            .map(|r| match (symbols.variable(r.addr), symbols.module_file(r.addr)) {
                (Some((name, off)), Some((path, file))) => declared.is_atomic(path, file, &name, off),
                _ => false,
            })
            .collect();
        Report { a, symbols, places: Places::new(symbols, addrs), potential: false, declared_atomic }
    }

    fn loc(&self, s: &Site) -> Loc<'_> {
        let place = self.places.get(s.pc);
        // Code with no line, and library code (which has lines where its debug file is
        // installed), is also named at the call into it.
        let library = place.module.as_deref().is_some_and(|m| super::feed::is_runtime(m) || super::feed::is_dynamic_linker(m));
        let via = ((place.line.is_none() || library) && s.caller != 0).then(|| self.places.get(s.caller - 1));
        Loc { place, via }
    }

    /// Races merged by their pair of source locations, most frequent first.
    pub fn grouped(&self) -> Vec<(&'a Race, u64)> {
        let mut by: FxHashMap<(String, String), (usize, u64)> = FxHashMap::default();
        let shown = |(i, r): &(usize, &Race)| (self.potential || !r.potential) && !self.declared_atomic[*i];
        for (i, r) in self.a.races.iter().enumerate().filter(shown) {
            let (x, y) = (self.loc(&r.first.site).key(), self.loc(&r.second.site).key());
            let key = if x <= y { (x, y) } else { (y, x) };
            let e = by.entry(key).or_insert((i, 0));
            e.1 += r.count;
            // A group is potential only if all of it is.
            if self.a.races[e.0].potential && !r.potential {
                e.0 = i;
            }
        }
        let mut out: Vec<(&Race, u64)> = by.into_values().map(|(i, n)| (&self.a.races[i], n)).collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.addr.cmp(&b.0.addr)));
        out
    }

    fn what_text(&self, r: &Race) -> String {
        if let Some((name, off)) = self.symbols.variable(r.addr) {
            return if off == 0 { format!("{name} ({:#x})", r.addr) } else { format!("{name}+{off} ({:#x})", r.addr) };
        }
        if let Some((base, b)) = r.block {
            let at = if b.caller != 0 { format!(" allocated at {}", place_text(self.places.get(b.caller - 1))) } else { String::new() };
            return format!("{:#x}, {} bytes into a {}-byte heap block{at} by thread {}", r.addr, r.addr - base, b.size, b.thread);
        }
        if let Some(t) = r.stack_of {
            return format!("{:#x}, on the stack of thread {t}", r.addr);
        }
        format!("{:#x}", r.addr)
    }

    fn side_text(&self, s: &Side) -> String {
        let loc = self.loc(&s.site);
        let via = loc.via.map(|v| format!(", called from {}", place_text(v))).unwrap_or_default();
        format!(
            "{} of {} bytes by thread {} at {:#x}: {}{via}; {}",
            kind(&s.site),
            s.site.size,
            s.thread,
            s.site.pc,
            place_text(loc.place),
            locks_text(&s.locks)
        )
    }

    fn side_json(&self, s: &Side) -> Value {
        let loc = self.loc(&s.site);
        let mut v = place_json(s.site.pc, loc.place);
        let o = v.as_object_mut().expect("object");
        o.insert("thread".into(), json!(s.thread));
        o.insert("access".into(), json!(if s.site.write { "W" } else { "R" }));
        o.insert("size".into(), json!(s.site.size));
        o.insert("atomic".into(), json!(s.site.atomic));
        o.insert("kernel".into(), json!(s.site.kernel));
        o.insert(
            "locks".into(),
            json!(s.locks.iter().map(|&(a, sh)| json!({"lock": format!("{a:#x}"), "shared": sh})).collect::<Vec<_>>()),
        );
        o.insert("called_from".into(), loc.via.map_or(Value::Null, |p| place_json(s.site.caller, p)));
        v
    }

    fn race_json(&self, r: &Race, count: u64) -> Value {
        let var = self.symbols.variable(r.addr);
        let block = r.block.map(|(base, b)| {
            json!({
                "base": format!("{base:#x}"),
                "size": b.size,
                "offset": r.addr - base,
                "thread": b.thread,
                "allocated_at": (b.caller != 0).then(|| place_json(b.caller, self.places.get(b.caller - 1))),
            })
        });
        json!({
            "kind": "race",
            "address": format!("{:#x}", r.addr),
            "variable": var.as_ref().map(|v| &v.0),
            "offset": var.as_ref().map(|v| v.1),
            "heap_block": block,
            "stack_of_thread": r.stack_of,
            "count": count,
            "potential": r.potential,
            "accesses": [self.side_json(&r.first), self.side_json(&r.second)],
        })
    }

    /// The region check: the lock held in most of the region's accesses guards it; every
    /// site that accessed it without that lock, with how often. None without a region.
    pub fn region(&self) -> Option<RegionCheck> {
        let (start, end, name, seen) = self.a.region.as_ref()?;
        let mut held: FxHashMap<u64, u64> = FxHashMap::default();
        let mut total = 0;
        for (&(_, _, l), &n) in seen {
            total += n;
            for &(lock, _) in &self.a.locksets[l as usize] {
                *held.entry(lock).or_insert(0) += n;
            }
        }
        let guard = held.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0))).map(|(&l, &n)| (l, n));
        let mut unguarded: FxHashMap<(u32, u32), u64> = FxHashMap::default();
        for (&(t, s, l), &n) in seen {
            if guard.is_none_or(|(g, _)| !self.a.locksets[l as usize].iter().any(|&(x, _)| x == g)) {
                *unguarded.entry((t, s)).or_insert(0) += n;
            }
        }
        let mut unguarded: Vec<((u32, u32), u64)> = unguarded.into_iter().collect();
        unguarded.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        Some(RegionCheck { start: *start, end: *end, name: name.clone(), total, guard, unguarded })
    }

    /// Writes the races (and the region check), as text or JSON lines; returns the number
    /// of races.
    pub fn write(&self, json_lines: bool, out: &mut dyn Write) -> io::Result<usize> {
        let groups = self.grouped();
        for (r, count) in &groups {
            if json_lines {
                serde_json::to_writer(&mut *out, &self.race_json(r, *count))?;
                writeln!(out)?;
            } else {
                if r.potential {
                    writeln!(
                        out,
                        "potential race on {}, seen {count} times (ordered in this run only by lock hand-offs; no lock held by both)",
                        self.what_text(r)
                    )?;
                } else {
                    writeln!(out, "race on {}, seen {count} times", self.what_text(r))?;
                }
                writeln!(out, "  {}", self.side_text(&r.first))?;
                writeln!(out, "  {}", self.side_text(&r.second))?;
            }
        }
        if let Some(c) = self.region() {
            self.write_region(&c, json_lines, out)?;
        }
        if !json_lines {
            let atomic = self.declared_atomic.iter().filter(|&&a| a).count();
            if atomic > 0 {
                writeln!(out, "({atomic} pairs of accesses to objects declared atomic left out: relaxed and acquire/release atomics are plain moves in x86 code)")?;
            }
            let threads = match self.a.threads {
                1 => "1 thread".to_string(),
                n => format!("{n} threads"),
            };
            match groups.len() {
                0 => writeln!(out, "no data races found ({threads})")?,
                n => writeln!(out, "{n} data race{} ({threads})", if n == 1 { "" } else { "s" })?,
            }
        }
        Ok(groups.len())
    }

    fn write_region(&self, c: &RegionCheck, json_lines: bool, out: &mut dyn Write) -> io::Result<()> {
        let site = |s: u32| &self.a.sites[s as usize];
        if json_lines {
            let un: Vec<Value> = c
                .unguarded
                .iter()
                .map(|&((t, s), n)| {
                    let side = Side { thread: t, site: *site(s), locks: Vec::new() };
                    let mut v = self.side_json(&side);
                    let o = v.as_object_mut().expect("object");
                    o.remove("locks");
                    o.insert("count".into(), json!(n));
                    v
                })
                .collect();
            let v = json!({
                "kind": "region",
                "region": c.name,
                "start": format!("{:#x}", c.start),
                "end": format!("{:#x}", c.end),
                "accesses": c.total,
                "guard": c.guard.map(|(l, _)| format!("{l:#x}")),
                "guarded_accesses": c.guard.map_or(0, |(_, n)| n),
                "unguarded": un,
            });
            serde_json::to_writer(&mut *out, &v)?;
            return writeln!(out);
        }
        let guard = match c.guard {
            Some((l, n)) => format!("guarded by lock {l:#x} in {n} of them"),
            None => "no lock held in any of them".into(),
        };
        writeln!(out, "region {} ({:#x}..{:#x}): {} accesses, {guard}", c.name, c.start, c.end, c.total)?;
        for &((t, s), n) in &c.unguarded {
            let s = site(s);
            let loc = self.loc(s);
            let via = loc.via.map(|v| format!(", called from {}", place_text(v))).unwrap_or_default();
            writeln!(
                out,
                "  without it: {} of {} bytes by thread {t} at {:#x}: {}{via}, {n} times",
                kind(s),
                s.size,
                s.pc,
                place_text(loc.place)
            )?;
        }
        Ok(())
    }
}

/// The result of the paper's region check.
pub struct RegionCheck {
    pub start: u64,
    pub end: u64,
    pub name: String,
    /// Accesses to the region.
    pub total: u64,
    /// The lock that guards it and the accesses made holding it.
    pub guard: Option<(u64, u64)>,
    /// (thread, site id) of accesses made without it, with their counts.
    pub unguarded: Vec<((u32, u32), u64)>,
}
