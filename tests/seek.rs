//! Seeking in recorded profiles end to end: `dep recover --from-instr N --to-instr M` gives
//! what DuckDB cuts out of the whole run's Parquet export (the blocks whose first
//! instruction is numbered N..M-1 in their thread, and their references), for the
//! recovered and the truth stream alike; windows side by side add up to the whole run;
//! with the index `dep index` adds, a window reads only the chunks that hold it; every
//! exporter's reader takes a window's output (dcfg --check, export umt --check,
//! callgrind_annotate, ChampSim's record count). Needs the DynamoRIO build, gcc, Valgrind's
//! callgrind_annotate and the duckdb Python package (scripts/setup.sh installs them).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;
use common::numbering::{cut, numbered};
use common::{corpus, dep};

fn ok(cmd: &mut Command) -> Output {
    let o = cmd.stdin(Stdio::null()).output().expect("spawn");
    assert!(o.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&o.stderr));
    o
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// The rows of a DuckDB query, each as its values printed with spaces between, a line each.
fn duck(sql: &str) -> String {
    let script = "import sys, duckdb\ndb = duckdb.connect()\ndb.execute('SET enable_progress_bar = false')\nfor r in db.sql(sys.argv[1]).fetchall(): print(*r)";
    stdout(&ok(Command::new("python3").args(["-c", script, sql])))
}

/// `dep recover PROFILE ARGS...`: its output and what it said on stderr.
fn recover(p: &Path, args: &[&str]) -> (String, String) {
    let o = ok(Command::new(dep()).arg("recover").arg(p).args(args));
    (stdout(&o), stderr(&o))
}

/// "are in K of T chunks; R chunk reads" from a run's stderr: (K, T, R).
fn chunks_read(err: &str) -> (u64, u64, u64) {
    let line = err.lines().find(|l| l.contains(" chunk reads")).unwrap_or_else(|| panic!("no chunk count in {err}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "in").unwrap();
    let n = |w: &str| w.trim_end_matches(';').parse::<u64>().unwrap();
    (n(words[at + 1]), n(words[at + 3]), n(words[at + 5]))
}

fn record(dir: &Path, prog: &str, extra: &[&str]) -> PathBuf {
    let p = dir.join(format!("{prog}.dep"));
    ok(Command::new(dep()).arg("record").args(extra).arg("-o").arg(&p).arg("--").arg(corpus().join(prog)));
    p
}

/// The seek index as `dep stats --json` lists it: a row per chunk.
fn index_of(p: &Path) -> serde_json::Value {
    let o = ok(Command::new(dep()).arg("stats").arg(p).args(["--json", "--no-compress"]));
    serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["index"].clone()
}

#[test]
fn windows_give_what_the_whole_run_holds_there() {
    let has_duckdb = Command::new("python3").args(["-c", "import duckdb"]).status().is_ok_and(|s| s.success());
    assert!(has_duckdb, "the duckdb Python package is not importable: run scripts/setup.sh");
    let dir = tempfile::tempdir().unwrap();
    // siglongjmp: one thread, signals, sixteen chunks; threads: ten threads.
    for prog in ["siglongjmp", "threads"] {
        let p = record(dir.path(), prog, &["--truth"]);
        let pq = dir.path().join(format!("{prog}.pq"));
        ok(Command::new(dep()).arg("recover").arg(&p).args(["--format", "parquet", "-o"]).arg(&pq));
        let (whole, _) = recover(&p, &[]);
        let lines = [numbered(&pq, "text"), numbered(&pq, "blocks")];
        let instructions: u64 = duck(&format!(
            "SELECT max(n) FROM (SELECT sum(instructions) AS n FROM read_parquet('{}/blocks/*.parquet') GROUP BY thread)",
            pq.display()
        ))
        .trim()
        .parse()
        .unwrap();
        let (a, b) = (instructions / 3, instructions / 3 * 2);
        // Without an index: counted first, with a note.
        let (got, err) = recover(&p, &["--from-instr", &a.to_string(), "--to-instr", &b.to_string()]);
        assert!(err.contains("no seek index"), "{prog}: {err}");
        assert!(got == cut(&lines[0], a, b, None), "{prog}: instructions {a}..{b} differ from the whole run's");
        // With the index, the same.
        ok(Command::new(dep()).arg("index").arg(&p));
        let (again, err) = recover(&p, &["--from-instr", &a.to_string(), "--to-instr", &b.to_string()]);
        assert!(again == got && !err.contains("no seek index"), "{prog}: {err}");
        let windows = [(0, 1000), (a, a + 1), (a, b), (a + 12345, a + 300_000), (b, u64::MAX)];
        for (from, to) in windows {
            let mut args = vec!["--from-instr".to_string(), from.to_string()];
            if to != u64::MAX {
                args.extend(["--to-instr".to_string(), to.to_string()]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            for (format, lines) in ["text", "blocks"].into_iter().zip(&lines) {
                let want = cut(lines, from, to, None);
                let mut with = args.clone();
                with.extend(["--format", format]);
                let (got, _) = recover(&p, &with);
                assert!(
                    got == want,
                    "{prog} {from}..{to} --format {format}: {} lines against {}",
                    got.lines().count(),
                    want.lines().count()
                );
                with.push("--truth");
                let (truth, _) = recover(&p, &with);
                assert!(truth == want, "{prog} {from}..{to} --format {format} --truth differs");
            }
        }
        // Windows side by side make each thread's whole run.
        let part = |from: u64, to: u64| recover(&p, &["--from-instr", &from.to_string(), "--to-instr", &to.to_string()]).0;
        let parts = [part(0, a), part(a, b), part(b, u64::MAX)];
        let of = |text: &str, t: usize| -> String {
            text.lines().filter(|l| l.starts_with(&format!("{t} "))).map(|l| format!("{l}\n")).collect()
        };
        for t in 0..10 {
            let joined: String = parts.iter().map(|x| of(x, t)).collect();
            assert!(joined == of(&whole, t), "{prog}: thread {t}'s 0..{a}, {a}..{b} and {b}.. do not make its whole run");
        }
        // One thread's part: the last thread's (threads' first thread runs little).
        let last = duck(&format!("SELECT max(thread) FROM read_parquet('{}/blocks/*.parquet')", pq.display())).trim().to_string();
        let (got, _) = recover(&p, &["--from-instr", &(a / 4).to_string(), "--to-instr", &b.to_string(), "--thread", &last]);
        let want = cut(&lines[0], a / 4, b, Some(&last));
        assert!(!want.is_empty() && got == want, "{prog}: thread {last}'s window");
    }
}

#[test]
fn an_indexed_profile_reads_only_the_chunks_a_window_needs() {
    let dir = tempfile::tempdir().unwrap();
    let p = record(dir.path(), "longtrace", &["--index"]);
    let index = index_of(&p);
    let entries = index.as_array().expect("dep record --index wrote an index");
    let chunks = entries.len() as u64;
    assert!(chunks >= 8, "longtrace has {chunks} chunks");
    // Each chunk's first instruction is the sum of those before (the index says so, and
    // recovery checks each chunk it reads against it).
    let mut first = 0;
    for e in entries {
        assert_eq!(e["first"].as_u64(), Some(first));
        first += e["instructions"].as_u64().unwrap();
    }
    let (_, whole) = recover(&p, &["--format", "null"]);
    assert!(whole.contains(&format!(" {first} instructions")), "{whole}");
    // A window of one block in the middle: one chunk read, or two where that block's
    // first instruction is in one chunk and the next block starting in the window is not.
    let mid = entries[entries.len() / 2]["first"].as_u64().unwrap() + 1000;
    let (_, err) = recover(&p, &["--from-instr", &mid.to_string(), "--to-instr", &(mid + 1).to_string(), "--format", "null"]);
    let (held, total, reads) = chunks_read(&err);
    assert_eq!(total, chunks);
    assert!(held <= 2 && reads == held, "{err}");
    assert!(!err.contains("no seek index"), "{err}");
    // Whole chunks k..k+2 are in three chunks, read once each.
    let k = entries.len() / 3;
    let (from, to) = (entries[k]["first"].as_u64().unwrap(), entries[k + 3]["first"].as_u64().unwrap());
    let (_, err) = recover(&p, &["--from-instr", &from.to_string(), "--to-instr", &to.to_string(), "--format", "null"]);
    assert_eq!(chunks_read(&err), (3, chunks, 3), "{err}");
    // `dep index` on an indexed profile leaves it be; past the end is an error that says
    // how far the thread ran.
    let before = std::fs::read(&p).unwrap();
    let o = ok(Command::new(dep()).arg("index").arg(&p));
    assert!(stderr(&o).contains("has a seek index already"));
    assert!(std::fs::read(&p).unwrap() == before);
    let o = Command::new(dep()).arg("recover").arg(&p).args(["--from-instr", &(first + 5).to_string()]).output().unwrap();
    let e = stderr(&o);
    assert!(!o.status.success() && e.lines().count() == 1 && e.contains(&format!("thread 0 ran {first} instructions")), "{e}");
    let o = Command::new(dep()).arg("recover").arg(&p).args(["--from-instr", "9", "--to-instr", "9"]).output().unwrap();
    assert!(!o.status.success() && stderr(&o).contains("is empty"), "{}", stderr(&o));
}

#[test]
fn exporters_take_a_window() {
    let dir = tempfile::tempdir().unwrap();
    let p = record(dir.path(), "threads", &[]);
    ok(Command::new(dep()).arg("index").arg(&p));
    let (from, to) = ("100000", "300000");
    let w = ["--from-instr", from, "--to-instr", to];
    let (blocks, _) = recover(&p, &["--format", "blocks", "--from-instr", from, "--to-instr", to]);
    let instructions: u64 = blocks.lines().map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap()).sum();
    let threads = blocks.lines().map(|l| l.split(' ').next().unwrap()).collect::<std::collections::BTreeSet<_>>().len();
    assert!(threads > 1 && instructions > 0);

    // DCFG and its trace: the check decodes the window's blocks.
    let (dcfg, trace) = (dir.path().join("w.dcfg.json"), dir.path().join("w.trace.json"));
    ok(Command::new(dep()).arg("dcfg").arg(&p).arg("-o").arg(&dcfg).arg("--trace").arg(&trace).args(w));
    let o = ok(Command::new(dep()).args(["dcfg", "--check"]).arg(&dcfg).arg(&trace).arg("--blocks"));
    let decoded: u64 = stdout(&o).lines().map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap()).sum();
    assert_eq!(decoded, instructions, "dcfg --check decodes the window's instructions");

    // UMT: each thread of the window begins once; the reader checks every record.
    let umt = dir.path().join("w.umt");
    ok(Command::new(dep()).args(["export", "umt"]).arg(&p).arg("-o").arg(&umt).args(w));
    let o = ok(Command::new(dep()).args(["export", "umt", "--check"]).arg(&umt));
    let counts = stdout(&o);
    let count = |name: &str| counts.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse::<u64>().ok()).unwrap();
    assert_eq!(count("thread begin records"), threads as u64, "{counts}");
    // (A rep string's iterations can be records of their own.)
    assert!(count("instruction records") >= instructions, "{counts}");

    // Callgrind: callgrind_annotate reads it and totals the window's instructions.
    let cg = dir.path().join("w.callgrind");
    ok(Command::new(dep()).arg("callgrind").arg(&p).arg("-o").arg(&cg).args(w));
    let o = ok(Command::new("callgrind_annotate").arg(&cg));
    let total = stdout(&o).lines().find(|l| l.contains("PROGRAM TOTALS")).unwrap().split_whitespace().next().unwrap().replace(',', "");
    assert_eq!(total.parse::<u64>().unwrap(), instructions);

    // ChampSim: a record per instruction, per thread.
    let cs = dir.path().join("w.champsim");
    let o = ok(Command::new(dep()).args(["export", "champsim"]).arg(&p).arg("-o").arg(&cs).args(w));
    let records: u64 = stderr(&o)
        .lines()
        .filter_map(|l| l.strip_suffix(" records").and_then(|l| l.rsplit(' ').next()).map(|n| n.parse::<u64>().unwrap()))
        .sum();
    // (A rep string's iterations can be records of their own, as in UMT.)
    assert!(records >= instructions, "{}", stderr(&o));
}
