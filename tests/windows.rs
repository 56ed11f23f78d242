//! Recording windows of a run (`dep record --skip-instrs N --instrs M [--windows K --every
//! P]`, `--start-at F --stop-at G`), end to end. Each program runs twice with address randomisation off (`setarch -R`):
//! once whole (`--skip-instrs 0`: one window of everything, so that both runs carry options
//! of the same length in their environment, which the loader and the C library read), and
//! once in windows. The oracle is the whole run as DuckDB numbers it from its Parquet
//! export: each window must hold exactly the blocks whose first instruction is numbered N
//! to N+M-1 in their thread, module-relative, recovered and as its own truth stream says;
//! a function's bounds, exactly its blocks from its first entry to its return (its extent
//! from `nm -S`).
//! Needs the DynamoRIO build, gcc, setarch and the duckdb Python package (scripts/setup.sh).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;
use common::numbering::{cut, numbered};
use common::{corpus, dep};

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("spawn")
}

fn ok(cmd: &mut Command) -> String {
    let o = run(cmd);
    assert!(o.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// `dep record` of corpus program `prog` with `args`, address randomisation off, into
/// `dir/name.dep`, with `--truth` and the window options `opts`.
fn record(dir: &Path, name: &str, opts: &[&str], prog: &str, args: &[&str]) -> PathBuf {
    record_with(None, dir, name, opts, prog, args)
}

/// [`record`], with every counting block's check in `form` (`DEP_CHECK_FORM`: `load` or
/// `flags`) where given, instead of each block's by whether its flags are live.
fn record_with(form: Option<&str>, dir: &Path, name: &str, opts: &[&str], prog: &str, args: &[&str]) -> PathBuf {
    let p = dir.join(format!("{name}.dep"));
    let mut cmd = Command::new("setarch");
    if let Some(f) = form {
        cmd.env("DEP_CHECK_FORM", f);
    }
    cmd.args(["-R", dep(), "record", "--truth", "-o"]).arg(&p).args(opts).arg("--").arg(corpus().join(prog)).args(args);
    let o = run(&mut cmd);
    assert!(o.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&o.stderr));
    p
}

/// The profile's modules as (base, end, name), from `dep dump`.
fn modules(p: &Path) -> Vec<(u64, u64, String)> {
    let text = ok(Command::new(dep()).args(["dump", "--max", "0"]).arg(p));
    text.lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("load ")?.trim_start();
            let (range, path) = rest.split_once(' ')?;
            let (a, b) = range.split_once('-')?;
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
            let name = path.split(" build-id").next()?.rsplit('/').next()?.to_string();
            Some((hex(a)?, hex(b)?, name))
        })
        .collect()
}

/// `text` with every address inside a module written as `name+offset`: libraries may load
/// at other addresses in another run.
fn relative(text: &str, mods: &[(u64, u64, String)]) -> String {
    let word = |w: &str| -> String {
        let Some(v) = w.strip_prefix("0x").and_then(|h| u64::from_str_radix(h, 16).ok()) else { return w.to_string() };
        match mods.iter().find(|(a, b, _)| (*a..*b).contains(&v)) {
            Some((a, _, n)) => format!("{n}+{:#x}", v - a),
            None => w.to_string(),
        }
    };
    text.lines().map(|l| l.split(' ').map(word).collect::<Vec<_>>().join(" ") + "\n").collect()
}

/// `dep recover P --format F [ARGS]`, module-relative.
fn recover(p: &Path, format: &str, args: &[&str]) -> String {
    let out = ok(Command::new(dep()).arg("recover").arg(p).args(["--format", format]).args(args));
    relative(&out, &modules(p))
}

/// Each thread's recorded windows, as `dep stats --json` lists them, and its unrecorded
/// instructions.
fn windows(p: &Path) -> Vec<(Vec<(u64, u64)>, u64)> {
    let v: serde_json::Value = serde_json::from_str(&ok(Command::new(dep()).args(["stats", "--json"]).arg(p))).unwrap();
    v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let w =
                t["windows"].as_array().map_or(vec![], |w| w.iter().map(|x| (x[0].as_u64().unwrap(), x[1].as_u64().unwrap())).collect());
            (w, t["unrecorded"].as_u64().unwrap())
        })
        .collect()
}

/// The whole run `whole`, numbered by DuckDB: lines of `format` with their thread and
/// their block's first instruction, module-relative.
fn numbered_whole(whole: &Path, dir: &Path, format: &str) -> Vec<(String, u64, String)> {
    let pq = dir.join("whole.parquet");
    if !pq.exists() {
        ok(Command::new(dep()).arg("recover").arg(whole).args(["--format", "parquet", "-o"]).arg(&pq));
    }
    let mods = modules(whole);
    numbered(&pq, format).into_iter().map(|(t, s, l)| (t, s, relative(&l, &mods).trim_end().to_string())).collect()
}

/// The first block start at or after `n` in `thread` of the numbered whole run.
fn first_start(whole: &[(String, u64, String)], thread: &str, n: u64) -> u64 {
    whole.iter().filter(|(t, s, _)| t == thread && *s >= n).map(|(_, s, _)| *s).min().expect("a block starts there")
}

#[test]
fn windows_hold_exactly_the_whole_runs_instructions_there() {
    windows_hold_exactly(None);
}

/// The same with every counting block checking by a load (SIGSEGV in the guard pages when
/// due) and with every one checking by `sub`/`jnle` (SIGILL): each form alone keeps the
/// windows exact, whichever blocks the bounds fall in.
#[test]
fn both_forms_of_check_hold_windows_exactly() {
    windows_hold_exactly(Some("load"));
    windows_hold_exactly(Some("flags"));
}

fn windows_hold_exactly(form: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // With the same environment as the windows (its size moves the stack, and what libc's
    // start-up runs).
    let whole = record_with(form, d, "whole", &["--skip-instrs", "0"], "longtrace", &["2000"]);
    let blocks = numbered_whole(&whole, d, "blocks");
    let text = numbered_whole(&whole, d, "text");
    let total: u64 = blocks.last().map(|(_, s, l)| s + l.rsplit(' ').next().unwrap().parse::<u64>().unwrap()).unwrap();

    // One window from the middle, and three with a period.
    for (name, opts, starts) in [
        ("middle", vec!["--skip-instrs", "1000000", "--instrs", "300000"], vec![(1_000_000u64, 300_000u64)]),
        (
            "three",
            vec!["--skip-instrs", "200000", "--instrs", "100000", "--windows", "3", "--every", "500000"],
            vec![(200_000, 100_000), (700_000, 100_000), (1_200_000, 100_000)],
        ),
    ] {
        let p = record_with(form, d, name, &opts, "longtrace", &["2000"]);
        let w = windows(&p);
        assert_eq!(w.len(), 1, "{name}: one thread");
        let (got, unrecorded) = &w[0];
        // Each window starts at the first block starting at or after N and ends before
        // the first block starting at or after N+M, as the whole run numbers them.
        let want: Vec<(u64, u64)> = starts.iter().map(|&(n, m)| (first_start(&blocks, "0", n), first_start(&blocks, "0", n + m))).collect();
        assert_eq!(got, &want, "{name} ({form:?}): windows");
        let recorded: u64 = want.iter().map(|(a, b)| b - a).sum();
        assert_eq!(recorded + unrecorded, total, "{name}: recorded and unrecorded instructions are the whole run's");

        let expect = |lines: &[(String, u64, String)]| -> String { want.iter().map(|&(a, b)| cut(lines, a, b, None)).collect() };
        let (b, t) = (recover(&p, "blocks", &[]), recover(&p, "text", &[]));
        assert!(b == expect(&blocks), "{name}: the windows' blocks are the whole run's there");
        assert!(t == expect(&text), "{name}: the windows' references are the whole run's there");
        assert!(b == recover(&p, "blocks", &["--truth"]) && t == recover(&p, "text", &["--truth"]), "{name}: and the truth's");
        // Seeking: the whole run's cut by `--from-instr` is the same, and so is a window of
        // the windowed profile itself (instructions are numbered on across the gaps).
        let (a, z) = want[want.len() - 1];
        let from = ["--from-instr", &a.to_string(), "--to-instr", &z.to_string()].map(String::from);
        let from: Vec<&str> = from.iter().map(String::as_str).collect();
        assert_eq!(recover(&whole, "text", &from), cut(&text, a, z, None), "{name}: the whole run cut by --from-instr");
        assert_eq!(recover(&p, "text", &from), cut(&text, a, z, None), "{name}: the windowed profile cut by --from-instr");
    }
}

/// corpora/siglongjmp faults 13 times late in its run, each time in the middle of a block
/// that counted all its instructions on entry. Windows from 60% of the run on, each about
/// a thirtieth of it long, have faults before them (in the unrecorded stretch) and inside
/// them: each must still hold exactly the whole run's blocks there, as DuckDB numbers
/// them (an interrupted block up to and including the instruction it stopped at).
#[test]
fn faults_do_not_move_windows() {
    faults_keep_windows(None);
}

/// The program's own SIGSEGVs and SIGILLs reach it past load-form checks, which fault with
/// SIGSEGV themselves, and windows stay exact.
#[test]
fn faults_do_not_move_windows_of_load_checks() {
    faults_keep_windows(Some("load"));
}

fn faults_keep_windows(form: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let whole = record_with(form, d, "whole", &["--skip-instrs", "0"], "siglongjmp", &[]);
    let blocks = numbered_whole(&whole, d, "blocks");
    let text = numbered_whole(&whole, d, "text");
    let total: u64 = blocks.last().map(|(_, s, l)| s + l.rsplit(' ').next().unwrap().parse::<u64>().unwrap()).unwrap();
    let len = total / 30;
    for k in 0..12 {
        let n = total * 60 / 100 + k * total / 35;
        let name = format!("at{n}");
        let p = record_with(form, d, &name, &["--skip-instrs", &n.to_string(), "--instrs", &len.to_string()], "siglongjmp", &[]);
        let want = (first_start(&blocks, "0", n), first_start(&blocks, "0", (n + len).min(total)));
        let w = windows(&p);
        assert_eq!(w[0].0, vec![want], "{name}: the window");
        let b = recover(&p, "blocks", &[]);
        assert!(b == cut(&blocks, want.0, want.1, None), "{name}: the window's blocks are the whole run's there");
        assert!(recover(&p, "text", &[]) == cut(&text, want.0, want.1, None), "{name}: and its references");
    }
}

/// Recordings with other options run the same instructions: corpora/siglongjmp (whose
/// libc string functions take paths by their arguments' alignment) recorded whole, with a
/// window and with none counts as many instructions each time, recorded or not.
#[test]
fn options_do_not_change_what_the_program_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let runs: [&[&str]; 4] = [&[], &["--skip-instrs", "0"], &["--skip-instrs", "1"], &["--skip-instrs", "100000", "--instrs", "4000"]];
    let totals: Vec<u64> = runs
        .iter()
        .enumerate()
        .map(|(k, opts)| {
            let p = record(d, &format!("run{k}"), opts, "siglongjmp", &[]);
            let v: serde_json::Value = serde_json::from_str(&ok(Command::new(dep()).args(["stats", "--json"]).arg(p))).unwrap();
            let t = &v["threads"][0];
            t["instructions"].as_u64().unwrap() + t["unrecorded"].as_u64().unwrap()
        })
        .collect();
    assert!(totals.iter().all(|&t| t == totals[0] && t > 100_000), "instructions run by options {runs:?}: {totals:?}");
}

#[test]
fn a_window_past_the_end_counts_every_instruction() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let whole = record(d, "whole", &["--skip-instrs", "0"], "longtrace", &["300"]);
    let blocks = numbered_whole(&whole, d, "blocks");
    let total: u64 = blocks.iter().map(|(_, _, l)| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap()).sum();
    let p = record(d, "none", &["--skip-instrs", "1000000000000000"], "longtrace", &["300"]);
    assert_eq!(windows(&p), vec![(vec![], total)], "nothing recorded, every instruction counted");
    assert_eq!(recover(&p, "blocks", &[]), "");
}

#[test]
fn threads_have_windows_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let p = record(d, "win", &["--skip-instrs", "20000", "--instrs", "30000"], "threads", &[]);
    let w = windows(&p);
    assert_eq!(w.len(), 10, "the threads corpus program has ten threads");
    // How many instructions a thread spends waiting for a lock differs between runs, so
    // no whole run numbers them the same: each thread's window is checked against its own
    // count and the truth. It starts at the first block at or after 20000 (a block has at
    // most a few hundred instructions) and ends at the first at or after 50000.
    let blocks = recover(&p, "blocks", &[]);
    for (t, (got, unrecorded)) in w.iter().enumerate() {
        let [(a, b)] = got[..] else { panic!("thread {t}: {got:?}") };
        assert!((20_000..20_400).contains(&a) && (50_000..50_400).contains(&b), "thread {t}'s window {a}..{b}");
        assert!(*unrecorded > 0, "thread {t} ran unrecorded instructions");
        let mine: u64 = blocks
            .lines()
            .filter(|l| l.split(' ').next() == Some(&t.to_string()))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(mine, b - a, "thread {t}'s blocks add up to its window");
    }
    assert_eq!(blocks, recover(&p, "blocks", &["--truth"]));
    assert_eq!(recover(&p, "text", &[]), recover(&p, "text", &["--truth"]));

    // The exporters take it: one window per thread is a DCFG's flow.
    let dcfg = d.join("w.dcfg.json");
    let trace = d.join("w.trace.json");
    ok(Command::new(dep()).arg("dcfg").arg(&p).arg("-o").arg(&dcfg).arg("--trace").arg(&trace));
    let decoded = ok(Command::new(dep()).args(["dcfg", "--check"]).arg(&dcfg).arg(&trace).arg("--blocks"));
    let n: u64 = decoded.lines().map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap()).sum();
    assert_eq!(n, w.iter().map(|(x, _)| x[0].1 - x[0].0).sum::<u64>(), "dcfg --check decodes the windows' instructions");
    let umt = d.join("w.umt");
    ok(Command::new(dep()).args(["export", "umt"]).arg(&p).arg("-o").arg(&umt));
    ok(Command::new(dep()).args(["export", "umt", "--check"]).arg(&umt));
    let o = run(Command::new(dep()).arg("races").arg(&p));
    assert!(String::from_utf8_lossy(&o.stderr).contains("recorded in windows"), "races says what windows leave out");
}

#[test]
fn gaps_between_windows_are_breaks_in_every_output() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let p =
        record(d, "two", &["--skip-instrs", "100000", "--instrs", "50000", "--windows", "2", "--every", "400000"], "longtrace", &["1000"]);
    let w = windows(&p);
    assert_eq!(w[0].0.len(), 2);
    // A DCFG has no edge across a gap: refused whole, one line naming it; each window alone
    // is fine.
    let o = run(Command::new(dep()).arg("dcfg").arg(&p).arg("-o").arg(d.join("x.json")));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("unrecorded instructions between two of its recorded windows"), "{err}");
    let (a, b) = w[0].0[1];
    ok(Command::new(dep()).arg("dcfg").arg(&p).arg("-o").arg(d.join("y.json")).args([
        "--from-instr",
        &a.to_string(),
        "--to-instr",
        &b.to_string(),
    ]));
    // The UMT trace marks the gap as a context change; its reader checks it.
    let umt = d.join("t.umt");
    ok(Command::new(dep()).args(["export", "umt"]).arg(&p).arg("-o").arg(&umt));
    ok(Command::new(dep()).args(["export", "umt", "--check"]).arg(&umt));
    // callgrind_annotate totals the windows' instructions.
    let cg = d.join("cg.out");
    ok(Command::new(dep()).arg("callgrind").arg(&p).arg("-o").arg(&cg));
    let ann = ok(Command::new("callgrind_annotate").arg(&cg));
    let line = ann.lines().find(|l| l.contains("PROGRAM TOTALS")).unwrap();
    let ir: u64 = line.split_whitespace().next().unwrap().replace(',', "").parse().unwrap();
    assert_eq!(ir, w[0].0.iter().map(|(a, b)| b - a).sum::<u64>());
    // The seek index numbers instructions across the gaps and agrees with recovery.
    ok(Command::new(dep()).arg("index").arg(&p));
    ok(Command::new(dep()).arg("stats").arg(&p));
}

#[test]
fn window_options_are_checked() {
    for (args, why) in [
        (vec!["--instrs", "0"], "at least 1"),
        (vec!["--instrs", "100", "--windows", "2", "--every", "50"], "overlap"),
        (vec!["--windows", "2"], "--every"),
    ] {
        let o = run(Command::new(dep()).arg("record").args(&args).args(["--", "true"]));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(why), "{args:?}: {err}");
    }
}

/// `nm -S` of corpus program `prog`: the function `name`'s ELF address and size.
fn symbol(prog: &str, name: &str) -> (u64, u64) {
    let out = ok(Command::new("nm").arg("-S").arg(corpus().join(prog)));
    let line = out.lines().find(|l| l.split_whitespace().nth(3) == Some(name)).unwrap_or_else(|| panic!("nm: no {name}"));
    let f: Vec<u64> = line.split_whitespace().take(2).map(|x| u64::from_str_radix(x, 16).unwrap()).collect();
    (f[0], f[1])
}

/// The module-relative address `prog+0x...` of a recovered line's second field.
fn place(line: &str) -> (String, u64) {
    let w = line.split(' ').nth(1).unwrap();
    let (m, off) = w.split_once("+0x").unwrap_or_else(|| panic!("{line}: not in a module"));
    (m.to_string(), u64::from_str_radix(off, 16).unwrap())
}

#[test]
fn a_function_is_recorded_from_its_first_entry_to_its_return() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // longtrace's `pass` calls nothing: from its entry to its return, every block is its
    // own, and the next block of the whole run is outside it.
    let (lo, size) = symbol("longtrace", "pass");
    let inside = |l: &str| place(l).0 == "longtrace" && (lo..lo + size).contains(&place(l).1);
    let whole = record(d, "whole", &["--skip-instrs", "0"], "longtrace", &["20"]);
    let blocks = numbered_whole(&whole, d, "blocks");
    let text = numbered_whole(&whole, d, "text");
    let first = blocks.iter().position(|(_, _, l)| place(l) == ("longtrace".into(), lo)).expect("pass runs");
    let last = first + blocks[first..].iter().position(|(_, _, l)| !inside(l)).expect("pass returns");
    let (from, to) = (blocks[first].1, blocks[last].1);
    let p = record(d, "pass", &["--start-at", "pass", "--stop-at", "pass"], "longtrace", &["20"]);
    let got = recover(&p, "blocks", &[]);
    let want: String = blocks[first..last].iter().map(|(_, _, l)| format!("{l}\n")).collect();
    assert!(got == want, "the function's blocks:\n{got}\nwant:\n{want}");
    assert!(recover(&p, "text", &[]) == cut(&text, from, to, None), "the function's references");
    assert_eq!(recover(&p, "text", &[]), recover(&p, "text", &["--truth"]));
    // Numbered as the whole run numbers them: the launcher pads the options of windows
    // and bounds to one length, so both runs have the same environment.
    let w = windows(&p);
    assert_eq!(w[0].0, vec![(from, to)], "the function's window");

    // Either bound alone: from the thread's start to the return; from the entry to the end.
    let p = record(d, "stop", &["--stop-at", "pass"], "longtrace", &["20"]);
    let w = windows(&p);
    assert_eq!(w[0].0[0].0, 0, "--stop-at alone records from the start: {w:?}");
    assert!(inside(recover(&p, "blocks", &[]).lines().last().unwrap()), "and ends in the function");
    let p = record(d, "start", &["--start-at", "pass"], "longtrace", &["20"]);
    let b = recover(&p, "blocks", &[]);
    assert_eq!(place(b.lines().next().unwrap()), ("longtrace".into(), lo), "--start-at alone starts at the entry");
    assert!(!inside(b.lines().last().unwrap()), "and goes on to the thread's end");
    // A name no module defines records nothing, and says so.
    let o = run(Command::new(dep())
        .args(["record", "-o"])
        .arg(d.join("none.dep"))
        .args(["--start-at", "no_such_function", "--"])
        .arg(corpus().join("hello")));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--start-at no_such_function: no module"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(recover(&d.join("none.dep"), "blocks", &[]), "");
}

#[test]
fn each_thread_records_its_own_call_of_the_function() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (lo, size) = symbol("threads", "worker");
    let p = record(d, "worker", &["--start-at", "worker", "--stop-at", "worker"], "threads", &[]);
    let b = recover(&p, "blocks", &[]);
    assert_eq!(b, recover(&p, "blocks", &["--truth"]));
    assert_eq!(recover(&p, "text", &[]), recover(&p, "text", &["--truth"]));
    let w = windows(&p);
    assert!(w[0].0.is_empty() && w[0].1 > 0, "the main thread never runs worker: {:?}", w[0]);
    let mut workers = 0;
    for t in 1..w.len() {
        let mine: Vec<&str> = b.lines().filter(|l| l.split(' ').next() == Some(&t.to_string())).collect();
        if mine.is_empty() {
            continue; // the nested thread runs another function
        }
        workers += 1;
        assert_eq!(place(mine[0]), ("threads".into(), lo), "thread {t} starts at worker's entry");
        let (m, off) = place(mine[mine.len() - 1]);
        assert!(m == "threads" && (lo..lo + size).contains(&off), "thread {t} ends in worker, at its return");
        assert_eq!(w[t].0.len(), 1, "thread {t}: one window");
    }
    assert_eq!(workers, 8, "eight workers");
}
