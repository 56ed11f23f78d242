//! Numbering a recorded run's blocks and references by DuckDB, from the Parquet export:
//! the oracle the window tests cut their expected output from.
#![allow(dead_code)] // not every test binary cuts

use std::path::Path;
use std::process::{Command, Stdio};

fn run(cmd: &mut Command) -> String {
    let o = cmd.stdin(Stdio::null()).output().expect("spawn");
    assert!(o.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// The whole run as DuckDB numbers it from the Parquet export `pq`: per line of
/// `--format blocks` or `--format text`, its thread and the number of its block's first
/// instruction in that thread (the sum of the instructions of the blocks before).
pub fn numbered(pq: &Path, format: &str) -> Vec<(String, u64, String)> {
    let blocks = format!(
        "(SELECT thread, seq, addr, instructions, sum(instructions) OVER (PARTITION BY thread ORDER BY seq) - instructions AS start \
         FROM read_parquet('{}/blocks/*.parquet'))",
        pq.display()
    );
    let sql = if format == "blocks" {
        format!("SELECT thread, start, printf('%d 0x%x %d', thread, addr, instructions) FROM {blocks} ORDER BY thread, seq")
    } else {
        format!(
            "SELECT r.thread, b.start, printf('%d 0x%x %s 0x%x %d', r.thread, r.pc, r.kind, r.addr, r.size) \
             FROM read_parquet('{}/references/*.parquet') r JOIN {blocks} b ON r.thread = b.thread AND r.block = b.seq \
             WHERE NOT r.kernel ORDER BY r.thread, r.seq",
            pq.display()
        )
    };
    // COPY writes the rows itself: handing millions to Python row by row takes seconds.
    let out = pq.with_extension(format!("{format}.tsv"));
    let script = "import sys, duckdb\ndb = duckdb.connect()\ndb.execute('SET enable_progress_bar = false')\n\
                  db.execute(f\"COPY ({sys.argv[1]}) TO '{sys.argv[2]}' (FORMAT csv, HEADER false, QUOTE '', ESCAPE '', DELIMITER '\\t')\")";
    run(Command::new("python3").args(["-c", script, &sql]).arg(&out));
    let text = std::fs::read_to_string(&out).unwrap();
    text.lines()
        .map(|l| {
            let mut f = l.splitn(3, '\t');
            let (t, start, line) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
            (t.to_string(), start.parse().unwrap(), line.to_string())
        })
        .collect()
}

/// The lines of `whole` whose block starts at instructions `from..to` (of `thread`, or of all).
pub fn cut(whole: &[(String, u64, String)], from: u64, to: u64, thread: Option<&str>) -> String {
    whole
        .iter()
        .filter(|(t, start, _)| (from..to).contains(start) && thread.is_none_or(|x| x == t))
        .map(|(_, _, l)| format!("{l}\n"))
        .collect()
}
