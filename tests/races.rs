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

fn source() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/corpora/races.c")).unwrap()
}

/// The line carrying the marker `race:NAME` (exactly that name).
fn marked(name: &str) -> u64 {
    let tag = format!("race:{name} ");
    let lines: Vec<usize> = source().lines().enumerate().filter(|(_, l)| l.contains(&tag)).map(|(i, _)| i + 1).collect();
    assert_eq!(lines.len(), 1, "marker {tag:?} in races.c: {lines:?}");
    lines[0] as u64
}

fn record(dir: &Path, args: &[&str]) -> std::path::PathBuf {
    let p = dir.join(format!("{}.dep", args.join("_")));
    let o = Command::new(dep())
        .arg("record")
        .arg("-o")
        .arg(&p)
        .arg("--")
        .arg(corpus().join("races"))
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

/// addr2line's line for a run-time pc of the races program.
fn addr2line(p: &Path, pc: u64) -> u64 {
    let (base, _) = modules(p).into_iter().find(|(_, path)| path.ends_with("/races")).expect("races module");
    let o = Command::new("addr2line").arg("-e").arg(corpus().join("races")).arg(format!("{:#x}", pc - base)).output().unwrap();
    let s = String::from_utf8_lossy(&o.stdout);
    s.trim().rsplit(':').next().unwrap().split(' ').next().unwrap().parse().unwrap_or(0)
}

/// An access's source line in the program: its own, or its caller's (for library code).
fn line_of(p: &Path, access: &Value) -> u64 {
    // Library code (libc has lines too where its debug file is installed) counts at the
    // program's call into it.
    let own = access["module"].as_str().is_some_and(|m| m.ends_with("/races"));
    let (pc, line) = match access["line"].as_u64().filter(|_| own) {
        Some(l) => (hex(&access["pc"]), l),
        None => {
            let c = &access["called_from"];
            assert!(c.is_object(), "no line and no caller: {access}");
            (hex(&c["pc"]) - 1, c["line"].as_u64().expect("the caller's line"))
        }
    };
    assert_eq!(addr2line(p, pc), line, "dep's line for {pc:#x} is not addr2line's");
    line
}

/// The pairs of lines each reported race joins.
fn pairs(p: &Path) -> BTreeSet<(u64, u64)> {
    races_json(p, &[])
        .iter()
        .filter(|r| r["kind"] == "race")
        .map(|r| {
            let a = r["accesses"].as_array().unwrap();
            assert_eq!(a.len(), 2);
            assert_ne!(a[0]["thread"], a[1]["thread"], "a race within one thread: {r}");
            assert!(a[0]["access"] == "W" || a[1]["access"] == "W", "two reads: {r}");
            assert!(r["count"].as_u64().unwrap() >= 1);
            let (x, y) = (line_of(p, &a[0]), line_of(p, &a[1]));
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
            let (x, y) = (line_of(&p, &a[0]), line_of(&p, &a[1]));
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
        let lines: BTreeSet<u64> = region["unguarded"].as_array().unwrap().iter().map(|a| line_of(&p, a)).collect();
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
