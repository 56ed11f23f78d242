//! `dep recover --format parquet` end to end, read back with DuckDB: the tables hold the
//! references and blocks the text renderings list, row for row, per thread as many
//! references as `dep stats` counts, the calls table has the joins races.c makes, and
//! examples/find_race.py finds the racing counter of corpora/races.c at the address `nm` and
//! the profile's module table give it, also where the threads do not overlap, and no race of
//! the program's in its race-free variants. Needs the DynamoRIO build,
//! gcc and the duckdb Python package (scripts/setup.sh installs it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;
use common::{corpus, dep};

fn ok(cmd: &mut Command) -> Output {
    let o = cmd.stdin(Stdio::null()).output().expect("spawn");
    assert!(o.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&o.stderr));
    o
}

/// What `dep recover PROFILE --format FORMAT` writes, line by line.
fn recovered(profile: &Path, format: &str) -> Vec<String> {
    let o = ok(Command::new(dep()).arg("recover").arg(profile).args(["--format", format]));
    String::from_utf8(o.stdout).unwrap().lines().map(str::to_string).collect()
}

/// The rows of a DuckDB query, each as its values printed with spaces between.
fn duck(sql: &str) -> Vec<String> {
    // (DuckDB draws a progress bar on stdout during a long query unless told not to.)
    let script = "import sys, duckdb\ndb = duckdb.connect()\ndb.execute('SET enable_progress_bar = false')\nfor r in db.sql(sys.argv[1]).fetchall(): print(*r)";
    let o = ok(Command::new("python3").args(["-c", script, sql]));
    String::from_utf8(o.stdout).unwrap().lines().map(str::to_string).collect()
}

fn one_number(sql: &str) -> u64 {
    duck(sql)[0].parse().unwrap()
}

/// Records corpus program `prog` with `args` and exports it to DIR/`prog`.pq.
fn record_and_export(dir: &Path, prog: &str, args: &[&str]) -> (PathBuf, PathBuf) {
    let (p, out) = (dir.join(format!("{prog}.dep")), dir.join(format!("{prog}.pq")));
    ok(Command::new(dep()).arg("record").arg("-o").arg(&p).arg("--").arg(corpus().join(prog)).args(args));
    ok(Command::new(dep()).arg("recover").arg(&p).args(["--format", "parquet", "-o"]).arg(&out));
    (p, out)
}

#[test]
fn parquet_tables_match_the_recovered_trace() {
    let has_duckdb = Command::new("python3").args(["-c", "import duckdb"]).status().is_ok_and(|s| s.success());
    assert!(has_duckdb, "the duckdb Python package is not importable: run scripts/setup.sh");
    let dir = tempfile::tempdir().unwrap();
    for (prog, args) in [("races", &["counter"][..]), ("threads", &[])] {
        let (p, out) = record_and_export(dir.path(), prog, args);
        let refs = format!("read_parquet('{}/references/*.parquet')", out.display());
        let blocks = format!("read_parquet('{}/blocks/*.parquet')", out.display());
        // Row for row what the text renderings list, thread by thread in execution order:
        // the program's references, and with the kernel's those of --kernel-refs.
        let text = recovered(&p, "text");
        let rows = duck(&format!(
            "SELECT printf('%d 0x%x %s 0x%x %d', thread, pc, kind, addr, size) FROM {refs} WHERE NOT kernel ORDER BY thread, seq"
        ));
        assert_eq!(rows.len(), text.len(), "{prog}: references");
        assert!(rows == text, "{prog}: the references differ from --format text");
        let o = ok(Command::new(dep()).arg("recover").arg(&p).arg("--kernel-refs"));
        let text: Vec<String> = String::from_utf8(o.stdout).unwrap().lines().map(str::to_string).collect();
        let rows = duck(&format!(
            "SELECT printf('%d 0x%x %s 0x%x %d%s', thread, pc, kind, addr, size, CASE WHEN kernel THEN ' kernel' ELSE '' END) \
             FROM {refs} ORDER BY thread, seq"
        ));
        assert!(text.iter().any(|l| l.ends_with(" kernel")), "{prog}: no kernel references");
        assert!(rows == text, "{prog}: the references differ from --format text --kernel-refs");
        let text = recovered(&p, "blocks");
        let rows = duck(&format!("SELECT printf('%d 0x%x %d', thread, addr, instructions) FROM {blocks} ORDER BY thread, seq"));
        assert_eq!(rows.len(), text.len(), "{prog}: blocks");
        assert!(rows == text, "{prog}: the blocks differ from --format blocks");

        // Per thread: the references `dep stats` counts, numbered from 0 without a gap, each
        // in a block of its own thread's table.
        let stats = ok(Command::new(dep()).arg("stats").arg(&p).args(["--json", "--no-compress"]));
        let stats: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
        let want: Vec<String> = stats["threads"].as_array().unwrap().iter().map(|t| format!("{} {}", t["thread"], t["refs"])).collect();
        assert!(want.len() >= if prog == "races" { 3 } else { 9 }, "{prog}: {} threads", want.len());
        let got = duck(&format!(
            "SELECT t.thread, count(r.seq) FILTER (WHERE NOT r.kernel) FROM (SELECT DISTINCT thread FROM {blocks}) t \
             LEFT JOIN {refs} r USING (thread) GROUP BY ALL ORDER BY 1"
        ));
        assert_eq!(got, want, "{prog}: per thread references (thread, count)");
        let gaps = format!("SELECT count(*) FROM (SELECT count(*) AS n, max(seq) AS last FROM {refs} GROUP BY thread) WHERE n != last + 1");
        assert_eq!(one_number(&gaps), 0, "{prog}: references numbered with gaps");
        let orphans = format!("SELECT count(*) FROM {refs} r ANTI JOIN {blocks} b ON r.thread = b.thread AND r.block = b.seq");
        assert_eq!(one_number(&orphans), 0, "{prog}: references without their block");
        // Orders rise with seq in each thread.
        let falling = format!(
            "SELECT count(*) FROM (SELECT \"order\" < lag(\"order\") OVER (PARTITION BY thread ORDER BY seq) AS f FROM {refs}) WHERE f"
        );
        assert_eq!(one_number(&falling), 0, "{prog}: orders fall");
        assert_eq!(one_number(&format!("SELECT count(*) FROM {refs} WHERE \"order\" IS NULL")), 0, "{prog}: references before any sync");

        // places.parquet names every instruction executed: each reference and block joins
        // it on pc, and the program's own instructions have addr2line's function and line.
        let places = format!("read_parquet('{}/places.parquet')", out.display());
        let unplaced = format!("SELECT count(*) FROM {refs} r ANTI JOIN {places} p USING (pc)");
        assert_eq!(one_number(&unplaced), 0, "{prog}: references with no place");
        let unplaced = format!("SELECT count(*) FROM {blocks} b ANTI JOIN {places} p ON b.addr = p.pc");
        assert_eq!(one_number(&unplaced), 0, "{prog}: blocks with no place");
        let profile = dep_profile::container::Profile::open(&p).unwrap();
        let base = profile.modules.iter().find(|m| m.path.ends_with(&format!("/{prog}"))).expect("the binary's load").base;
        let own = duck(&format!(
            "SELECT printf('0x%x %s %d', pc - {base}, inlined, line) FROM {places} WHERE module LIKE '%/{prog}' AND line IS NOT NULL ORDER BY pc"
        ));
        assert!(own.len() > 20, "{prog}: {} of its own instructions placed", own.len());
        let input: String = own.iter().map(|l| format!("{}\n", l.split(' ').next().unwrap())).collect();
        let a2l = String::from_utf8(
            ok(Command::new("sh").arg("-c").arg(format!("addr2line -f -e {} <<'EOF'\n{input}EOF", corpus().join(prog).display()))).stdout,
        )
        .unwrap();
        let a2l: Vec<&str> = a2l.lines().collect();
        for (row, pair) in own.iter().zip(a2l.chunks(2)) {
            let want_line = pair[1].split(" (").next().unwrap().rsplit(':').next().unwrap();
            let want = format!("{} {} {want_line}", row.split(' ').next().unwrap(), pair[0]);
            assert_eq!(row, &want, "{prog}: a place against addr2line");
        }
    }

    // The race: both workers' increments of `counter`, at the binary's load address plus
    // nm's offset (the binary is position-independent).
    let races = corpus().join("races");
    let nm = String::from_utf8(ok(Command::new("nm").arg(&races)).stdout).unwrap();
    let offset =
        nm.lines().find_map(|l| l.strip_suffix(" b counter").map(|a| u64::from_str_radix(a, 16).unwrap())).expect("nm has counter");
    let profile = dep_profile::container::Profile::open(dir.path().join("races.dep")).unwrap();
    let base = profile
        .modules
        .iter()
        .find(|m| m.event == dep_profile::container::ModuleEventKind::Load && m.path.ends_with("/races"))
        .expect("the binary's load")
        .base;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/find_race.py");
    let o = ok(Command::new("python3").arg(script).arg(dir.path().join("races.pq")).arg(&races));
    let report = String::from_utf8(o.stdout).unwrap();
    let line = report.lines().find(|l| l.starts_with(&format!("{:#x} ", base + offset)));
    let line = line.unwrap_or_else(|| panic!("counter at {:#x} not reported:\n{report}", base + offset));
    assert!(line.starts_with(&format!("{:#x} counter 1,2 ", base + offset)), "{line}");

    // A second export into the same directory replaces the first's files, the threads this
    // profile lacks included.
    let pq = dir.path().join("threads.pq");
    ok(Command::new(dep()).arg("recover").arg(dir.path().join("races.dep")).args(["--format", "parquet", "-o"]).arg(&pq));
    for table in ["references", "blocks", "syncs"] {
        assert_eq!(std::fs::read_dir(pq.join(table)).unwrap().count(), 3, "{table}");
    }
}

/// find_race.py on a trace written by hand in the layout `dep recover --format parquet`
/// writes: thread 1 takes a write lock (its return at point 3), writes X and gives the lock
/// up (its call at point 6); thread 2's read lock returns after its point 4 and it reads X.
/// By the points alone thread 2 took the lock inside thread 1's section, which the lock
/// rules out: a reader polls with plain loads and sees the writer's plain release store,
/// neither of which makes a point. So thread 2 took it after point 6 and there is no race
/// (the `rwlock` run of corpora/races.c was reported racing about one run in ten under
/// load); with the reader's lock left out, the same accesses race.
#[test]
fn find_race_orders_a_lock_taken_between_points() {
    let dir = tempfile::tempdir().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/find_race.py");
    for (locked, want) in [(true, 0), (false, 1)] {
        let d = dir.path().join(format!("hand-{locked}.pq"));
        for sub in ["references", "calls", "syncs"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        let copy = |what: &str, sql: &str| {
            duck(&format!("COPY ({sql}) TO '{}' (FORMAT parquet)", d.join(what).display()));
        };
        copy("threads.parquet", "SELECT * FROM (VALUES (0::UINTEGER, NULL::UINTEGER, NULL::UBIGINT, 100::UBIGINT), (1, 0, 1, 101), (2, 0, 2, 102)) t(thread, parent, spawn, tls)");
        copy(
            "syncs/thread-0000.parquet",
            "SELECT * FROM (VALUES (0::UINTEGER, 1::UBIGINT, false, NULL::UINTEGER, NULL::UBIGINT), (0, 2, false, NULL, NULL), (1, 3, false, NULL, NULL),              (1, 6, false, NULL, NULL), (1, 9, false, NULL, NULL), (2, 4, false, NULL, NULL), (2, 10, false, NULL, NULL)) t(thread, \"order\", after, insn, block)",
        );
        let reader_lock = if locked {
            "(2, 0, 4, 0, 'call', 'pthread_rwlock_rdlock', 200, 0, NULL), (2, 1, 4, 0, 'return', 'pthread_rwlock_rdlock', 200, 0, 0),              (2, 2, 4, 1, 'call', 'pthread_rwlock_unlock', 200, 0, NULL), (2, 3, 4, 1, 'return', 'pthread_rwlock_unlock', 200, 0, 0)"
        } else {
            "(2, 0, 4, 1, 'call', 'free', 0, 0, NULL), (2, 1, 4, 1, 'return', 'free', 0, 0, NULL)"
        };
        copy(
            "calls/thread-0000.parquet",
            &format!(
                "SELECT * FROM (VALUES (1::UINTEGER, 0::UBIGINT, 3::UBIGINT, 0::UBIGINT, 'call', 'pthread_rwlock_wrlock', 200::UBIGINT, 0::UBIGINT, NULL::UBIGINT),                  (1, 1, 3, 0, 'return', 'pthread_rwlock_wrlock', 200, 0, 0), (1, 2, 6, 1, 'call', 'pthread_rwlock_unlock', 200, 0, NULL),                  (1, 3, 6, 1, 'return', 'pthread_rwlock_unlock', 200, 0, 0), {reader_lock}) t(thread, seq, \"order\", refs, event, func, arg0, arg1, value)"
            ),
        );
        copy(
            "references/thread-0000.parquet",
            "SELECT * FROM (VALUES (1::UINTEGER, 0::UBIGINT, 3::UBIGINT, 4096::UBIGINT, 300::UBIGINT, 'W'), (2, 0, 4, 8192, 300, 'R')) t(thread, seq, \"order\", pc, addr, kind)",
        );
        let o = ok(Command::new("python3").arg(script).arg(&d));
        let report = String::from_utf8(o.stdout).unwrap();
        let lines: Vec<&str> = report.lines().skip(1).collect();
        assert_eq!(lines.len(), want, "locked: {locked}: {report}");
        if want == 1 {
            assert!(lines[0].starts_with("0x12c - 1,2 1 1 "), "{report}");
        }
    }
}

/// The races corpus run in `mode`, exported to DIR/races-`mode`.pq; find_race.py's report on
/// it, line by line without the header; and ld.so's address range in the run.
fn find_race(dir: &Path, mode: &str) -> (PathBuf, Vec<String>, std::ops::Range<u64>) {
    let (p, out) = (dir.join(format!("races-{mode}.dep")), dir.join(format!("races-{mode}.pq")));
    let races = corpus().join("races");
    ok(Command::new(dep()).arg("record").arg("-o").arg(&p).arg("--").arg(&races).arg(mode));
    ok(Command::new(dep()).arg("recover").arg(&p).args(["--format", "parquet", "-o"]).arg(&out));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/find_race.py");
    let o = ok(Command::new("python3").arg(script).arg(&out).arg(&races));
    let report: Vec<String> = String::from_utf8(o.stdout).unwrap().lines().skip(1).map(str::to_string).collect();
    let profile = dep_profile::container::Profile::open(&p).unwrap();
    let ld = profile.modules.iter().find(|m| m.path.contains("/ld-linux")).expect("ld.so loaded");
    (out, report, ld.base..ld.base + ld.size)
}

#[test]
fn find_race_follows_the_pthread_calls() {
    let dir = tempfile::tempdir().unwrap();
    // The first thread ends before the second starts, and nothing orders them: glibc's own
    // synchronisation between them (its stack cache, inside pthread_create) does not count.
    let (_, report, _) = find_race(dir.path(), "counter_serial");
    assert!(report.iter().any(|l| l.split(' ').nth(1) == Some("counter")), "counter_serial: {report:?}");

    // Race-free: whatever is reported is lazy binding's business, written by ld.so alone
    // (a GOT slot the PLT reads, a relocation counter).
    for mode in ["join", "counter_mutex", "flag_condvar", "rwlock", "spin"] {
        let (out, report, ld) = find_race(dir.path(), mode);
        for line in &report {
            let pcs = line.split(' ').nth(5).unwrap();
            let by_ld = pcs
                .split(',')
                .filter(|pc| pc.contains(":W"))
                .all(|pc| ld.contains(&u64::from_str_radix(&pc[2..pc.find(':').unwrap()], 16).unwrap()));
            assert!(by_ld, "{mode}: {line}");
        }
        if mode != "join" {
            continue;
        }
        // main joins each thread it made by its pthread_t (what clone was given as the
        // thread pointer); each join returns after the thread's last point. Threads are
        // paired with joins by pthread_t, in order among those sharing one (a thread that
        // starts after another ended reuses its stack): two threads made back to back may
        // start under DynamoRIO, and so be numbered, in either order.
        let calls = format!("read_parquet('{}/calls/*.parquet')", out.display());
        let joins = duck(&format!(
            "SELECT printf('%x', arg0), \"order\" FROM {calls}
             WHERE func = 'pthread_join' AND event = 'return' AND thread = 0 ORDER BY seq"
        ));
        let threads = duck(&format!(
            "SELECT printf('%x', t.tls), max(s.\"order\") FROM read_parquet('{0}/threads.parquet') t
             JOIN read_parquet('{0}/syncs/*.parquet') s USING (thread) WHERE thread > 0 GROUP BY t.thread, t.tls ORDER BY t.thread",
            out.display()
        ));
        assert_eq!(joins.len(), 5, "{joins:?}");
        assert_eq!(threads.len(), 5, "{threads:?}");
        let by_tls = |rows: &[String]| {
            let mut m: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
            for r in rows {
                let (tls, order) = r.split_once(' ').unwrap();
                m.entry(tls.to_string()).or_default().push(order.parse().unwrap());
            }
            m.values_mut().for_each(|v| v.sort());
            m
        };
        let (joined, made) = (by_tls(&joins), by_tls(&threads));
        assert_eq!(joined.keys().collect::<Vec<_>>(), made.keys().collect::<Vec<_>>(), "joined {joins:?}, made {threads:?}");
        for (tls, js) in &joined {
            assert_eq!(js.len(), made[tls].len(), "joined {joins:?}, made {threads:?}");
            for (j, last) in js.iter().zip(&made[tls]) {
                assert!(j > last, "joined {joins:?}, made {threads:?}");
            }
        }
    }
}

#[test]
fn parquet_errors_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("hello.dep");
    ok(Command::new(dep()).arg("record").arg("-o").arg(&p).arg("--").arg(corpus().join("hello")));
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    for extra in [vec![], vec!["-o".to_string(), file.join("out").display().to_string()]] {
        let o = Command::new(dep()).arg("recover").arg(&p).args(["--format", "parquet"]).args(&extra).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.starts_with("dep: error: ") && err.lines().count() == 1, "{extra:?}: {err}");
    }
}
