//! `dep races` on corpora/races.c: each program with a known race reports exactly the
//! pairs of source lines marked `race:NAME` in its source (read from the file, not from
//! dep), each access's line agrees with addr2line on its pc, and the correctly synchronised
//! variants report nothing. The region check names the lock `nm` puts in the structure and
//! the overflowing copy. Needs the DynamoRIO build, gcc and binutils.

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

mod common;
use common::{corpus, dep};

/// Corpus program `prog`'s source (C, or C++).
fn source(prog: &str) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpora");
    std::fs::read_to_string(dir.join(format!("{prog}.c"))).or_else(|_| std::fs::read_to_string(dir.join(format!("{prog}.cpp")))).unwrap()
}

/// The line of races.c carrying the marker `race:NAME` (exactly that name).
fn marked(name: &str) -> u64 {
    marked_in("races", name)
}

/// The line of `prog`'s source carrying the marker `race:NAME` (a space or the line's end
/// after it).
fn marked_in(prog: &str, name: &str) -> u64 {
    let tag = format!("race:{name}");
    let lines: Vec<usize> =
        source(prog).lines().enumerate().filter(|(_, l)| l.split_whitespace().any(|w| w == tag)).map(|(i, _)| i + 1).collect();
    assert_eq!(lines.len(), 1, "marker {tag:?} in {prog}: {lines:?}");
    lines[0] as u64
}

fn record(dir: &Path, args: &[&str]) -> std::path::PathBuf {
    record_in(dir, "races", args)
}

fn record_in(dir: &Path, prog: &str, args: &[&str]) -> std::path::PathBuf {
    let p = dir.join(format!("{prog}-{}.dep", args.join("_")));
    let o = Command::new(dep())
        .arg("record")
        .arg("-o")
        .arg(&p)
        .arg("--")
        .arg(corpus().join(prog))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    p
}

fn races_json(p: &Path, extra: &[&str]) -> Vec<Value> {
    let o = Command::new(dep()).arg("races").arg(p).arg("--json").args(extra).output().unwrap();
    assert!(o.status.success(), "dep races: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap().lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

/// (load base, path) of each module the profile recorded, from `dep dump`.
fn modules(p: &Path) -> Vec<(u64, String)> {
    let o = Command::new(dep()).arg("dump").arg(p).arg("--max").arg("0").output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let l = l.trim().strip_prefix("load ")?.trim();
            let (range, path) = l.split_once(' ')?;
            let base = u64::from_str_radix(range.split('-').next()?.trim_start_matches("0x"), 16).ok()?;
            Some((base, path.split(" build-id").next()?.trim().to_string()))
        })
        .collect()
}

fn hex(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// addr2line's line for a run-time pc of corpus program `prog`.
fn addr2line(p: &Path, prog: &str, pc: u64) -> u64 {
    let (base, _) = modules(p).into_iter().find(|(_, path)| path.ends_with(&format!("/{prog}"))).expect("the program's module");
    let o = Command::new("addr2line").arg("-e").arg(corpus().join(prog)).arg(format!("{:#x}", pc - base)).output().unwrap();
    let s = String::from_utf8_lossy(&o.stdout);
    s.trim().rsplit(':').next().unwrap().split(' ').next().unwrap().parse().unwrap_or(0)
}

/// An access's source line in the program: its own, or its caller's (for library code).
fn line_of(p: &Path, prog: &str, access: &Value) -> u64 {
    // Library code (libc has lines too where its debug file is installed) counts at the
    // program's call into it.
    let own = access["module"].as_str().is_some_and(|m| m.ends_with(&format!("/{prog}")));
    let (pc, line) = match access["line"].as_u64().filter(|_| own) {
        Some(l) => (hex(&access["pc"]), l),
        None => {
            let c = &access["called_from"];
            assert!(c.is_object(), "no line and no caller: {access}");
            (hex(&c["pc"]) - 1, c["line"].as_u64().expect("the caller's line"))
        }
    };
    assert_eq!(addr2line(p, prog, pc), line, "dep's line for {pc:#x} is not addr2line's");
    line
}

/// The pairs of lines each reported race joins.
fn pairs(p: &Path) -> BTreeSet<(u64, u64)> {
    pairs_in(p, "races")
}

/// The pairs of lines of `prog` each reported race joins.
fn pairs_in(p: &Path, prog: &str) -> BTreeSet<(u64, u64)> {
    races_json(p, &[])
        .iter()
        .filter(|r| r["kind"] == "race")
        .map(|r| {
            let a = r["accesses"].as_array().unwrap();
            assert_eq!(a.len(), 2);
            assert_ne!(a[0]["thread"], a[1]["thread"], "a race within one thread: {r}");
            assert!(a[0]["access"] == "W" || a[1]["access"] == "W", "two reads: {r}");
            assert!(r["count"].as_u64().unwrap() >= 1);
            let (x, y) = (line_of(p, prog, &a[0]), line_of(p, prog, &a[1]));
            (x.min(y), x.max(y))
        })
        .collect()
}

fn pair(a: &str, b: &str) -> (u64, u64) {
    let (x, y) = (marked(a), marked(b));
    (x.min(y), x.max(y))
}

#[test]
fn known_races_are_reported_at_their_lines() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&[&str], Vec<(u64, u64)>)] = &[
        (&["counter"], vec![pair("counter", "counter")]),
        // Ordered in the run only by the C library's internal locks (its thread stack
        // cache), which are not the program's synchronisation.
        (&["counter_serial"], vec![pair("counter", "counter")]),
        (&["overflow"], vec![pair("overflow", "overflow-copy")]),
        (&["trylock"], vec![pair("trylock-holder", "trylock")]),
        (&["flag"], vec![pair("flag", "flag-wait"), pair("flag-data", "flag-read")]),
    ];
    for (args, want) in cases {
        let p = record(dir.path(), args);
        let got = pairs(&p);
        assert_eq!(got, want.iter().copied().collect::<BTreeSet<_>>(), "{args:?}");
    }
}

#[test]
fn synchronised_variants_report_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for mode in [
        "counter_mutex",
        "counter_atomic",
        "counter_relaxed",
        "overflow_ok",
        "trylock_ok",
        "flag_atomic",
        "flag_condvar",
        "join",
        "rwlock",
        "spin",
    ] {
        let p = record(dir.path(), &[mode]);
        let r = races_json(&p, &[]);
        assert!(r.is_empty(), "{mode}: {r:?}");
        // Where every shared access holds a common lock, or is ordered by more than lock
        // hand-offs, no run could race either. (flag_condvar's reader reads after its
        // critical section: ordered by the mutex hand-off alone when it did not wait.)
        if mode != "flag_condvar" {
            let r = races_json(&p, &["--potential"]);
            assert!(r.is_empty(), "{mode} --potential: {r:?}");
        }
    }
}

/// Updates beside another lock's critical sections: whether this run's lock hand-offs
/// ordered them depends on the interleaving; --potential reports them in every run.
#[test]
fn potential_races_beside_other_locks() {
    let dir = tempfile::tempdir().unwrap();
    let p = record(dir.path(), &["counter_beside"]);
    let r = races_json(&p, &["--potential"]);
    let lines: BTreeSet<(u64, u64)> = r
        .iter()
        .map(|r| {
            let a = r["accesses"].as_array().unwrap();
            let (x, y) = (line_of(&p, "races", &a[0]), line_of(&p, "races", &a[1]));
            (x.min(y), x.max(y))
        })
        .collect();
    assert_eq!(lines, [pair("counter-beside", "counter-beside")].into_iter().collect::<BTreeSet<_>>());
    // Without --potential only what this run left unordered, as races (never as potential).
    assert!(races_json(&p, &[]).iter().all(|r| r["potential"] == false));
}

/// The overflow's variable from nm: the region check finds the structure's own lock (at
/// offset 24, after `char name[16]; long balance;`) guarding it, and the copy without it.
#[test]
fn region_check_names_the_guard_and_the_unguarded_copy() {
    let dir = tempfile::tempdir().unwrap();
    let p = record(dir.path(), &["overflow"]);
    let nm = Command::new("nm").arg("-S").arg(corpus().join("races")).output().unwrap();
    let nm = String::from_utf8_lossy(&nm.stdout);
    let f: Vec<&str> = nm.lines().find(|l| l.ends_with(" account")).expect("nm lists account").split_whitespace().collect();
    let (off, size) = (u64::from_str_radix(f[0], 16).unwrap(), u64::from_str_radix(f[1], 16).unwrap());
    let (base, _) = modules(&p).into_iter().find(|(_, path)| path.ends_with("/races")).unwrap();
    for spec in ["account".to_string(), format!("{:#x}:{size}", base + off)] {
        let r = races_json(&p, &["--region", &spec]);
        let region = r.iter().find(|r| r["kind"] == "region").expect("a region line");
        assert_eq!(hex(&region["start"]), base + off, "{spec}");
        assert_eq!(hex(&region["end"]), base + off + size, "{spec}");
        assert_eq!(hex(&region["guard"]), base + off + 24, "{spec}: the guard is account.lock");
        let lines: BTreeSet<u64> = region["unguarded"].as_array().unwrap().iter().map(|a| line_of(&p, "races", a)).collect();
        assert!(lines.contains(&marked("overflow-copy")), "{spec}: {lines:?}");
        assert!(!lines.contains(&marked("overflow")), "{spec}: the guarded update is not unguarded");
    }
    let o = Command::new(dep()).args(["races"]).arg(&p).args(["--region", "no_such_variable"]).output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no_such_variable"));
}

#[test]
fn sixty_four_threads() {
    let dir = tempfile::tempdir().unwrap();
    let p = record(dir.path(), &["many", "64"]);
    assert_eq!(pairs(&p), [pair("many", "many")].into_iter().collect::<BTreeSet<_>>());
}

/// Pairs of marked lines of `prog`.
fn marked_pairs(prog: &str, names: &[(&str, &str)]) -> BTreeSet<(u64, u64)> {
    names
        .iter()
        .map(|(a, b)| {
            let (x, y) = (marked_in(prog, a), marked_in(prog, b));
            (x.min(y), x.max(y))
        })
        .collect()
}

/// What a detector sees only by modelling synchronisation objects as memory, the kernel's
/// accesses and hand-overs, thread-local storage, reader locks, atomics beside plain
/// accesses, stdio locks and C++ guards (corpora/sync_races.c, corpora/guards.cpp): each
/// racy program reports exactly the pairs of lines its source marks, each race-free one
/// nothing (the verdicts ThreadSanitizer gives).
#[test]
fn synchronisation_objects_kernel_tls_reader_locks_atomics_and_guards() {
    let dir = tempfile::tempdir().unwrap();
    let racy: &[(&str, &str, &[(&str, &str)])] = &[
        ("sync_races", "destroy", &[("obj-lock", "obj-destroy"), ("obj-unlock", "obj-destroy")]),
        ("sync_races", "free_barrier", &[("barrier-wait", "barrier-free")]),
        ("sync_races", "read_buf", &[("kernel-read", "kernel-use")]),
        ("sync_races", "pipe", &[("pipe-give", "pipe-take")]),
        ("sync_races", "tls", &[("tls-own", "tls-other")]),
        ("sync_races", "rdlock", &[("rdlock", "rdlock")]),
        ("sync_races", "atomic_plain", &[("atomic-add", "plain-store")]),
        ("sync_races", "stdio", &[("stdio", "stdio")]),
        ("guards", "static", &[("static-write", "static-read")]),
        ("guards", "shared", &[("shared", "shared"), ("shared", "static-read")]),
    ];
    let mut failures = Vec::new();
    for &(prog, mode, want) in racy {
        let p = record_in(dir.path(), prog, &[mode]);
        let got = pairs_in(&p, prog);
        if got != marked_pairs(prog, want) {
            failures.push(format!("{prog} {mode}: got {got:?}, want {:?}", marked_pairs(prog, want)));
        }
    }
    let clean: &[(&str, &str)] = &[
        ("sync_races", "destroy_ok"),
        ("sync_races", "free_barrier_ok"),
        ("sync_races", "read_buf_ok"),
        ("sync_races", "pipe_ok"),
        ("sync_races", "eventfd_ok"),
        ("sync_races", "socket_ok"),
        ("sync_races", "tls_ok"),
        ("sync_races", "rdlock_ok"),
        ("sync_races", "atomic_ok"),
        ("sync_races", "stdio_ok"),
        ("guards", "static_ok"),
        ("guards", "once_ok"),
        ("guards", "shared_ok"),
    ];
    for &(prog, mode) in clean {
        let p = record_in(dir.path(), prog, &[mode]);
        let r = races_json(&p, &[]);
        if !r.is_empty() {
            failures.push(format!("{prog} {mode}: {r:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Races are named by the program's own variable names: C's `x` and `g` are not read as
/// mangled type names (`long long`, `__float128`); the kernel's side of a race is marked.
#[test]
fn variables_keep_their_names_and_the_kernel_is_marked() {
    let dir = tempfile::tempdir().unwrap();
    for (mode, var) in [("atomic_plain", "x"), ("stdio", "g")] {
        let p = record_in(dir.path(), "sync_races", &[mode]);
        let r = races_json(&p, &[]);
        assert!(!r.is_empty() && r.iter().all(|r| r["variable"] == var), "{mode}: {r:?}");
    }
    let p = record_in(dir.path(), "sync_races", &["read_buf"]);
    let r = races_json(&p, &[]);
    let sides: Vec<&Value> = r.iter().flat_map(|r| r["accesses"].as_array().unwrap()).collect();
    assert!(sides.iter().any(|a| a["kernel"] == true && a["access"] == "W"), "{r:?}");
    assert!(sides.iter().any(|a| a["kernel"] == false && a["access"] == "R"), "{r:?}");
}

/// A program of one thread has no other to race with: the profile is still read whole (a
/// damaged one is refused as `dep recover` refuses it), and nothing is reported.
#[test]
fn one_thread_is_read_whole_and_has_nothing_to_race_with() {
    let dir = tempfile::tempdir().unwrap();
    let p = record_in(dir.path(), "hello", &[]);
    let o = Command::new(dep()).arg("races").arg(&p).arg("--summary").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "no data races found (1 thread)\n");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("1 threads, 0 accesses checked") && err.contains("one thread: none to race with"), "{err}");
    // Damage a byte after the middle of the file until recovery refuses the profile; the
    // race analysis must refuse it too.
    let good = std::fs::read(&p).unwrap();
    let bad = dir.path().join("bad.dep");
    let refused = (0..64).map(|k| good.len() / 2 + k * 997).find(|&at| {
        let mut b = good.clone();
        b[at] ^= 0x5a;
        std::fs::write(&bad, &b).unwrap();
        !Command::new(dep()).args(["recover", "--format", "null"]).arg(&bad).output().unwrap().status.success()
    });
    assert!(refused.is_some(), "no damaged byte made recovery fail");
    let o = Command::new(dep()).arg("races").arg(&bad).output().unwrap();
    assert!(!o.status.success(), "a damaged profile: {}", String::from_utf8_lossy(&o.stdout));
    assert_eq!(String::from_utf8_lossy(&o.stderr).trim().lines().count(), 1, "{}", String::from_utf8_lossy(&o.stderr));
}

/// helgrind's pairs of races.c lines for `races MODE`: of each race it reports, the first
/// frame in races.c of the access and of the earlier access it conflicts with (the
/// program's call into library code where the access is the library's, as dep names it).
fn helgrind_pairs(mode: &str) -> BTreeSet<(u64, u64)> {
    let o = Command::new("valgrind")
        .args(["--tool=helgrind", "--history-level=full"])
        .arg(corpus().join("races"))
        .arg(mode)
        .stdin(Stdio::null())
        .output()
        .expect("valgrind (installed by scripts/setup.sh)");
    assert!(o.status.success(), "helgrind on {mode}: {}", String::from_utf8_lossy(&o.stderr));
    let log = String::from_utf8_lossy(&o.stderr);
    let line = |s: &str| -> Option<u64> { s.split("(races.c:").nth(1)?.split(')').next()?.parse().ok() };
    log.split("Possible data race")
        .skip(1)
        .map(|r| {
            let (this, earlier) =
                r.split_once("This conflicts with").unwrap_or_else(|| panic!("{mode}: helgrind kept no earlier access: {r}"));
            let (x, y) = (line(this).expect("a frame in races.c"), line(earlier).expect("a frame in races.c"));
            (x.min(y), x.max(y))
        })
        .collect()
}

/// Valgrind's helgrind, a detector sharing no code with dep, finds the same pairs of source
/// lines racing on races.c, modes with races and without. Left out: counter_relaxed and
/// flag_atomic (helgrind does not take C11 atomics as synchronisation: it reports the
/// relaxed counter and the data behind the atomic flag, where dep reads the `_Atomic`
/// declaration and the locked store), counter_beside (whether its lock hand-offs order the
/// updates depends on the interleaving, and helgrind runs the threads one at a time) and
/// many (64 threads, minutes under helgrind).
#[test]
fn helgrind_finds_the_same_races() {
    let dir = tempfile::tempdir().unwrap();
    let mut raced = 0;
    for mode in [
        "counter",
        "counter_mutex",
        "counter_atomic",
        "counter_serial",
        "overflow",
        "overflow_ok",
        "trylock",
        "trylock_ok",
        "flag",
        "flag_condvar",
        "join",
        "rwlock",
        "spin",
    ] {
        let want = helgrind_pairs(mode);
        raced += !want.is_empty() as usize;
        let p = record(dir.path(), &[mode]);
        assert_eq!(pairs(&p), want, "{mode}: dep's pairs of lines (left) against helgrind's (right)");
    }
    // (Races in five modes, none in the others: an agreement on nothing would prove nothing.)
    assert_eq!(raced, 5);
}
