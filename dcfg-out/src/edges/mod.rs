//! `dep edges`: every thread's control-flow edges with how often each was taken, its kind
//! and the routines it joins, plus the thread's totals and call depth; as text or JSON.
//! Counted chunk-parallel ([`Events::merged`](dep_recover::Events::merged)), so it uses every core.

pub use dep_recover::edge_counts::{Depth, EdgeCounts};

use crate::program::symbols::Symbolizer;
use dep_recover::edges::Edge;
use dep_recover::{RecoverError, Recovery, Source};
use serde_json::json;
use std::io::{self, Write};

/// Each thread's edge counts, in thread order. A thread whose stream stops without its
/// end marker (a profile cut short, a killed recording) ends where it stops: its last
/// block's exit is given up and the thread's end follows it, as `dep stats` and the DCFG
/// count it.
pub fn count<'r>(rec: &'r Recovery, source: Source, progress: &(dyn Fn(u64) + Sync)) -> Result<Vec<EdgeCounts<'r>>, RecoverError> {
    rec.events(source).progress(progress).merged(|_| EdgeCounts::new(&rec.plans))
}

fn addr(a: Option<u64>) -> String {
    a.map_or_else(|| "-".to_string(), |a| format!("{a:#x}"))
}

fn name(sym: &Symbolizer, a: Option<u64>) -> String {
    a.map_or_else(|| "-".to_string(), |a| sym.symbol(a))
}

/// Edges most taken first (then by source, target and kind).
fn ordered(t: &EdgeCounts) -> Vec<(Edge, u64)> {
    let mut v = t.sorted();
    v.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
    v
}

/// Text: per thread a `# thread` summary line, then one line per edge:
/// `<thread> <count> <kind> <from> <to> <from-routine> <to-routine>` (`-` where unknown).
pub fn write_text(out: &mut dyn Write, threads: &[EdgeCounts], sym: &Symbolizer) -> io::Result<()> {
    for (i, t) in threads.iter().enumerate() {
        writeln!(
            out,
            "# thread {i}: {} blocks, {} instructions, {} edges, call depth {}..{} (ends at {})",
            t.blocks,
            t.instructions,
            t.edges().len(),
            t.depth.min,
            t.depth.max,
            t.depth.delta
        )?;
        for (e, n) in ordered(t) {
            writeln!(
                out,
                "{i} {n} {} {} {} {} {}",
                e.kind.name(),
                addr(e.from),
                addr(e.to),
                name(sym, e.from).replace(' ', "_"),
                name(sym, e.to).replace(' ', "_")
            )?;
        }
    }
    Ok(())
}

/// JSON: `{"threads": [{"thread", "blocks", "instructions", "depth": {"min", "max", "end"},
/// "edges": [{"from", "to", "kind", "count", "from_routine", "to_routine"}]}]}`, addresses as
/// `0x` hex strings or null.
pub fn to_json(threads: &[EdgeCounts], sym: &Symbolizer) -> serde_json::Value {
    let hex = |a: Option<u64>| a.map(|a| format!("{a:#x}"));
    let routine = |a: Option<u64>| a.map(|a| sym.symbol(a));
    json!({
        "threads": threads.iter().enumerate().map(|(i, t)| json!({
            "thread": i,
            "blocks": t.blocks,
            "instructions": t.instructions,
            "depth": {"min": t.depth.min, "max": t.depth.max, "end": t.depth.delta},
            "edges": ordered(t).iter().map(|(e, n)| json!({
                "from": hex(e.from),
                "to": hex(e.to),
                "kind": e.kind.name(),
                "count": n,
                "from_routine": routine(e.from),
                "to_routine": routine(e.to),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}
