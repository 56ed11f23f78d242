//! `dep wet` end to end: dependences of corpora/wet.c checked against what its source says
//! (instructions found through `nm`, not through dep), the two formats against each other,
//! and the memory dependences of whole programs against an independent script over `dep
//! recover --format text` (tests/scripts/memdeps.py). Needs the DynamoRIO build and gcc.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;
use common::{corpus, dep};

fn ok(cmd: &mut Command) -> Vec<u8> {
    let o = cmd.stdin(Stdio::null()).output().expect("spawn");
    assert!(o.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&o.stderr));
    o.stdout
}

/// Records `prog` into `dir` and returns the profile's path.
fn record(dir: &Path, prog: &str) -> PathBuf {
    let p = dir.join(format!("{prog}.dep"));
    ok(Command::new(dep()).arg("record").arg("-o").arg(&p).arg("--").arg(corpus().join(prog)));
    p
}

/// One instruction block of the comprehensive format.
#[derive(Debug, Default)]
struct Block {
    pc: u64,
    /// Per use port: (instance, dep id, dep instance) lines.
    ports: Vec<Vec<(u64, u32, u64)>>,
    values: Vec<(u64, u64)>,
}

/// Parses the comprehensive format strictly; returns blocks by id.
fn parse_wet(text: &str) -> BTreeMap<u32, Block> {
    let mut lines = text.lines();
    let n: usize = lines.next().expect("N").parse().expect("N is a number");
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let head: Vec<&str> = lines.next().expect("static line").split(' ').collect();
        assert_eq!(head.len(), 6, "static line has 6 fields: {head:?}");
        let id: u32 = head[0].parse().unwrap();
        let nports: usize = head[1].parse().unwrap();
        let mut b = Block { pc: u64::from_str_radix(head[2], 16).unwrap(), ..Default::default() };
        head[5].parse::<u32>().expect("line number");
        for _ in 0..nports {
            let size = lines.next().unwrap();
            let k: usize = size.strip_prefix("SIZE ").expect("SIZE line").parse().unwrap();
            let mut port = Vec::with_capacity(k);
            for _ in 0..k {
                let l = lines.next().unwrap().trim_start();
                let (x, rest) = l.split_once(':').unwrap();
                let (y, z) = rest.split_once(' ').unwrap();
                port.push((x.parse().unwrap(), y.parse().unwrap(), z.parse().unwrap()));
            }
            b.ports.push(port);
        }
        let v = lines.next().unwrap();
        if v != "NO VALUES" {
            let k: usize = v.strip_prefix("VALUES ").expect("VALUES line").parse().unwrap();
            for _ in 0..k {
                let (x, y) = lines.next().unwrap().trim_start().split_once(':').unwrap();
                b.values.push((x.parse().unwrap(), u64::from_str_radix(y, 16).unwrap()));
            }
        }
        assert!(out.insert(id, b).is_none(), "id {id} twice");
    }
    assert_eq!(lines.next(), None, "text after the last block");
    out
}

/// `--ports` file: id -> port names.
fn parse_ports(text: &str) -> HashMap<u32, Vec<String>> {
    text.lines()
        .map(|l| {
            let mut f = l.split(' ');
            let id = f.next().unwrap().parse().unwrap();
            f.next();
            (id, f.map(str::to_string).collect())
        })
        .collect()
}

fn symbols(prog: &Path) -> HashMap<String, u64> {
    let out = String::from_utf8(ok(Command::new("nm").arg(prog))).unwrap();
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3).then(|| (f[2].to_string(), u64::from_str_radix(f[0], 16).unwrap()))
        })
        .collect()
}

struct Trace {
    blocks: BTreeMap<u32, Block>,
    ports: HashMap<u32, Vec<String>>,
    by_pc: HashMap<u64, u32>,
}

impl Trace {
    fn read(profile: &Path, dir: &Path) -> Trace {
        let (w, p) = (dir.join("wet.txt"), dir.join("ports.txt"));
        ok(Command::new(dep()).arg("wet").arg(profile).arg("-o").arg(&w).arg("--ports").arg(&p));
        let blocks = parse_wet(&std::fs::read_to_string(&w).unwrap());
        let ports = parse_ports(&std::fs::read_to_string(&p).unwrap());
        let by_pc = blocks.iter().map(|(&id, b)| (b.pc, id)).collect();
        for (id, b) in &blocks {
            assert_eq!(ports[id].len(), b.ports.len(), "port names of id {id}");
        }
        Trace { blocks, ports, by_pc }
    }

    fn id(&self, pc: u64) -> u32 {
        *self.by_pc.get(&pc).unwrap_or_else(|| panic!("no instruction block at {pc:#x}"))
    }

    /// The dependences of port `name` of the instruction at `pc`.
    fn port(&self, pc: u64, name: &str) -> &[(u64, u32, u64)] {
        let id = self.id(pc);
        let k =
            self.ports[&id].iter().position(|n| n == name).unwrap_or_else(|| panic!("{pc:#x} has no port {name}: {:?}", self.ports[&id]));
        &self.blocks[&id].ports[k]
    }
}

/// corpora/wet.c, pattern by pattern: what each labelled instruction must depend on.
#[test]
fn dependences_of_the_wet_corpus_program() {
    let dir = tempfile::tempdir().unwrap();
    let prog = corpus().join("wet");
    let sym = symbols(&prog);
    let at = |s: &str| *sym.get(s).unwrap_or_else(|| panic!("nm has no {s}"));
    let profile = record(dir.path(), "wet");
    let t = Trace::read(&profile, dir.path());
    let id = |s: &str| t.id(at(s));
    // wet_patterns(flag) runs 5 times, flags 1 0 1 1 0.
    let runs = 0..5u64;

    // A store, then a load of the same 8 bytes: exactly that instance.
    let want: Vec<_> = runs.clone().map(|k| (k, id("wet_store"), k)).collect();
    assert_eq!(t.port(at("wet_load"), "mem0"), want);
    // An 8-byte store, a byte store into it, then the whole word: both writers.
    let got = t.port(at("wet_wload"), "mem0");
    for k in runs.clone() {
        let mut mine: Vec<_> = got.iter().filter(|d| d.0 == k).map(|d| (d.1, d.2)).collect();
        mine.sort();
        let mut want = vec![(id("wet_wstore"), k), (id("wet_bstore"), k)];
        want.sort();
        assert_eq!(mine, want, "instance {k} of wet_wload");
    }
    // The if-body ran in calls 0, 2 and 3: it depends on those branch instances.
    let branch = id("wet_branch");
    assert_eq!(t.port(at("wet_body"), "control"), [(0, branch, 0), (1, branch, 2), (2, branch, 3)]);
    // ... and so does the callee it calls.
    assert_eq!(t.port(at("wet_callee"), "control"), [(0, branch, 0), (1, branch, 2), (2, branch, 3)]);
    // After the if, nothing depends on the branch any more.
    assert!(t.port(at("wet_join"), "control").iter().all(|d| d.1 != branch), "wet_join is past the branch's region");
    assert_eq!(t.port(at("wet_join"), "control").len(), 5);
    // A branch whose other side never ran (its code is read from the file): the join is
    // not in its region either.
    let rare = id("wet_rare");
    assert_eq!(t.port(at("wet_rare"), "control").len(), 5);
    let join = t.port(at("wet_rare_join"), "control");
    assert!(join.len() == 5 && join.iter().all(|d| d.1 != rare), "wet_rare_join depends on wet_rare: {join:?}");
    // The loop: 5 iterations a call; the accumulator (rax) of the first comes from wet_init,
    // of every other from the previous iteration.
    let (looped, init) = (id("wet_loop"), id("wet_init"));
    let want: Vec<_> = (0..25u64).map(|i| if i % 5 == 0 { (i, init, i / 5) } else { (i, looped, i - 1) }).collect();
    assert_eq!(t.port(at("wet_loop"), "rax"), want);
    // The loop's own branch: iterations 1-4 of each call depend on the previous one's jnz.
    let ctl = t.port(at("wet_loop"), "control");
    assert_eq!(ctl.len(), 25);
    let jnz = ctl[1].1;
    for i in 0..25u64 {
        if i % 5 != 0 {
            assert_eq!(ctl[i as usize], (i, jnz, i - 1), "iteration {i}");
        } else {
            assert_ne!(ctl[i as usize].1, jnz);
        }
    }
    // A byte written into rax: reading all of rax depends on both writers.
    for k in runs.clone() {
        let mut mine: Vec<_> = t.port(at("wet_merge"), "rax").iter().filter(|d| d.0 == k).map(|d| (d.1, d.2)).collect();
        mine.sort();
        let mut want = vec![(id("wet_full"), k), (id("wet_low"), k)];
        want.sort();
        assert_eq!(mine, want);
    }
    // lea's result is the address the next load reads through: the profile determines it.
    let lea = &t.blocks[&id("wet_lea")];
    assert_eq!(lea.values, runs.clone().map(|k| (k, at("slot"))).collect::<Vec<_>>());
    assert_eq!(t.port(at("wet_vload"), "rbx"), runs.clone().map(|k| (k, id("wet_lea"), k)).collect::<Vec<_>>());

    // Each iteration of rep movsb is an instance; the load of bytes 8-15 of the copy
    // depends on iterations 8-15 of its call.
    for k in runs.clone() {
        let mut mine: Vec<_> = t.port(at("wet_repload"), "mem0").iter().filter(|d| d.0 == k).map(|d| (d.1, d.2)).collect();
        mine.sort();
        let want: Vec<_> = (8..16).map(|j| (id("wet_rep"), 16 * k + j)).collect();
        assert_eq!(mine, want, "instance {k} of wet_repload");
    }

    // The limited history with room for everything holds every dependence of the
    // comprehensive format, with the same instance numbers; a small one holds its tail.
    let all = history_holds_the_trace(&profile, dir.path(), &t);
    let tail = dir.path().join("tail.txt");
    ok(Command::new(dep()).arg("wet").arg(&profile).arg("-o").arg(&tail).args(["--history", "10"]));
    let tail = std::fs::read_to_string(&tail).unwrap();
    let last10: Vec<&str> = all.lines().skip(all.lines().count() - 10).collect();
    assert_eq!(tail.lines().collect::<Vec<_>>(), last10);
}

/// Checks that the limited history with room for everything (the engine's shadow in its
/// turn) holds every dependence of the comprehensive trace `t` (the shadow on a thread of
/// its own), with the same instance numbers; answers the history's text.
fn history_holds_the_trace(profile: &Path, dir: &Path, t: &Trace) -> String {
    let all = dir.join("all.txt");
    ok(Command::new(dep()).arg("wet").arg(profile).arg("-o").arg(&all).args(["--history", "100000000"]));
    let all = std::fs::read_to_string(&all).unwrap();
    let mut from_history: Vec<(u64, u64, u64, u64)> = all
        .lines()
        .map(|l| {
            let (a, x) = l.split_once(" --> ").expect("a#b --> x#y");
            let p = |s: &str| {
                let (pc, i) = s.split_once('#').unwrap();
                (u64::from_str_radix(pc.strip_prefix("0x").unwrap(), 16).unwrap(), i.parse::<u64>().unwrap())
            };
            let ((a, b), (x, y)) = (p(a), p(x));
            (a, b, x, y)
        })
        .collect();
    let mut from_full: Vec<(u64, u64, u64, u64)> =
        t.blocks.values().flat_map(|b| b.ports.iter().flatten().map(|&(i, d, di)| (b.pc, i, t.blocks[&d].pc, di))).collect();
    from_history.sort();
    from_full.sort();
    assert_eq!(from_history.len(), from_full.len());
    assert!(from_history == from_full, "the two formats disagree");
    all
}

/// Memory dependences of whole (single-threaded) programs equal the independent script's,
/// pair for pair, the kernel's writes for system calls included. (With threads, dep also follows the sync order between them, which the
/// text format does not carry: `dependences_between_threads` checks that.)
#[test]
fn memory_dependences_agree_with_an_independent_script() {
    for prog in ["wet", "hello", "exceptions", "siglongjmp", "stack"] {
        let dir = tempfile::tempdir().unwrap();
        let profile = record(dir.path(), prog);
        let t = Trace::read(&profile, dir.path());
        let mut ours: BTreeMap<(u64, u64), u64> = BTreeMap::new();
        for (id, b) in &t.blocks {
            for (k, port) in b.ports.iter().enumerate() {
                if t.ports[id][k].starts_with("mem") {
                    for &(_, d, _) in port {
                        *ours.entry((b.pc, t.blocks[&d].pc)).or_default() += 1;
                    }
                }
            }
        }
        let text = dir.path().join("refs.txt");
        ok(Command::new(dep()).arg("recover").arg(&profile).args(["--format", "text", "--kernel-refs", "-o"]).arg(&text));
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/scripts/memdeps.py");
        let out = ok(Command::new("python3").arg(script).arg(&text));
        let theirs: BTreeMap<(u64, u64), u64> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                let h = |s: &str| u64::from_str_radix(s.strip_prefix("0x").unwrap(), 16).unwrap();
                ((h(f[0]), h(f[1])), f[2].parse().unwrap())
            })
            .collect();
        assert!(theirs.len() > 100, "{prog}: only {} pairs", theirs.len());
        let differ: Vec<_> = ours.iter().filter(|(k, v)| theirs.get(k) != Some(v)).take(5).collect();
        let missing: Vec<_> = theirs.iter().filter(|(k, _)| !ours.contains_key(k)).take(5).collect();
        assert!(differ.is_empty() && missing.is_empty(), "{prog}: differ {differ:x?}, missing {missing:x?}");
    }
}

/// Every value a trace states, checked independently where the instruction tells what it
/// must be: push and call leave rsp at the address they wrote (the k-th write of that pc in
/// `dep recover --format text`), ret at the address it read plus 8, and lea of a
/// rip-relative address the address objdump computes. Static and non-PIE programs, so
/// objdump's addresses are the run's.
#[test]
fn values_agree_with_the_references_and_objdump() {
    for prog in ["wet", "bare"] {
        let dir = tempfile::tempdir().unwrap();
        let profile = record(dir.path(), prog);
        let t = Trace::read(&profile, dir.path());
        let dis = String::from_utf8(ok(Command::new("objdump").args(["-d", "--no-show-raw-insn"]).arg(corpus().join(prog)))).unwrap();
        // pc -> (mnemonic, objdump's computed target for rip-relative operands)
        let mut code: HashMap<u64, (String, Option<u64>)> = HashMap::new();
        for l in dis.lines() {
            let Some((addr, rest)) = l.trim_start().split_once(":\t") else { continue };
            let Ok(addr) = u64::from_str_radix(addr, 16) else { continue };
            let mnemonic = rest.split_whitespace().next().unwrap_or("").to_string();
            let target = rest.split_once("# ").and_then(|(_, c)| u64::from_str_radix(c.split_whitespace().next()?, 16).ok());
            code.insert(addr, (mnemonic, target.filter(|_| rest.contains("(%rip)"))));
        }
        let text = String::from_utf8(ok(Command::new(dep()).arg("recover").arg(&profile).args(["--format", "text"]))).unwrap();
        let mut refs: HashMap<(u64, char), Vec<u64>> = HashMap::new();
        for l in text.lines() {
            let f: Vec<&str> = l.split(' ').collect();
            let h = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
            refs.entry((h(f[1]), f[2].chars().next().unwrap())).or_default().push(h(f[3]));
        }
        let mut checked = 0;
        for b in t.blocks.values() {
            let Some((m, target)) = code.get(&b.pc) else { continue };
            for &(k, v) in &b.values {
                let want = match m.as_str() {
                    "push" | "call" => refs[&(b.pc, 'W')][k as usize],
                    "ret" => refs[&(b.pc, 'R')][k as usize] + 8,
                    "lea" if target.is_some() => target.unwrap(),
                    _ => continue,
                };
                assert_eq!(v, want, "{prog}: value of instance {k} of {m} at {:#x}", b.pc);
                checked += 1;
            }
        }
        assert!(checked >= 10, "{prog}: only {checked} values checked");
    }
}

/// corpora/wet_threads.c: a word stored before a thread is created and loaded by the
/// thread depends on that store; a word the thread stores before handing a flag over with
/// xchg, loaded by main after taking the flag with lock cmpxchg, depends on that store
/// (the xchg's stamp before it precedes the cmpxchg's stamp after it, which saw its value).
#[test]
fn dependences_between_threads() {
    let dir = tempfile::tempdir().unwrap();
    let sym = symbols(&corpus().join("wet_threads"));
    let at = |s: &str| *sym.get(s).unwrap_or_else(|| panic!("nm has no {s}"));
    let profile = record(dir.path(), "wet_threads");
    let t = Trace::read(&profile, dir.path());
    let id = |s: &str| t.id(at(s));
    assert_eq!(t.port(at("wet_xload"), "mem0"), [(0, id("wet_xstore"), 0)]);
    assert_eq!(t.port(at("wet_yload"), "mem0"), [(0, id("wet_ystore"), 0)]);
    // Threads interleaved with the shadow in the engine's turn and on its own thread alike.
    history_holds_the_trace(&profile, dir.path(), &t);
    // (The compare-exchange's own read of the flag gets no dependence on the xchg: each
    // atomic's access lies between its two stamps, and the two pairs may overlap.)
}

/// Bad input: a missing profile and an unwritable output fail with one line.
#[test]
fn bad_input_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(dep()).args(["wet", "/nonexistent.dep", "-o"]).arg(dir.path().join("x")).output().unwrap();
    assert!(!o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stderr).trim().lines().count(), 1, "{}", String::from_utf8_lossy(&o.stderr));
    let profile = record(dir.path(), "hello");
    let o = Command::new(dep()).arg("wet").arg(&profile).args(["-o", "/nonexistent/dir/x"]).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("/nonexistent/dir/x") && err.trim().lines().count() == 1, "{err}");
    // A full device: said once, in one line (the error quotes its cause, not twice).
    let o = Command::new(dep()).arg("wet").arg(&profile).args(["-o", "/dev/full"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.trim().lines().count() == 1 && err.matches("No space left on device").count() == 1, "{err}");
    // Runs spilled (hello holds more than 1 MiB) where no directory is: the spill is named, not the output the trace was
    // going to (the store's own thread reports it to the engine).
    let o = Command::new(dep())
        .env("TMPDIR", "/nonexistent/tmp")
        .arg("wet")
        .arg(&profile)
        .args(["--spill-mb", "1", "-o"])
        .arg(dir.path().join("y"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.trim().lines().count() == 1
            && err.contains("spilling dependences")
            && err.contains("/nonexistent/tmp")
            && !err.contains("writing"),
        "{err}"
    );
}

/// `--count` finds the dependences the comprehensive trace lists, and writes none: its
/// count is the number of dependence lines of the written trace.
#[test]
fn count_finds_what_the_trace_lists() {
    let dir = tempfile::tempdir().unwrap();
    let p = record(dir.path(), "wet");
    let out = dir.path().join("wet.txt");
    ok(Command::new(dep()).args(["wet", "-o"]).arg(&out).arg(&p));
    let text = std::fs::read_to_string(&out).unwrap();
    let listed: usize = parse_wet(&text).values().map(|b| b.ports.iter().map(Vec::len).sum::<usize>()).sum();
    assert!(listed > 1000, "{listed} dependences");
    let o = Command::new(dep()).args(["wet", "--count"]).arg(&p).output().unwrap();
    assert!(o.status.success() && o.stdout.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    let counted: usize = err
        .split(" dependences,")
        .next()
        .and_then(|h| h.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no dependence count in {err:?}"));
    assert_eq!(counted, listed);
    let both = Command::new(dep()).args(["wet", "--count", "-o"]).arg(&out).arg(&p).output().unwrap();
    assert!(!both.status.success(), "--count writes no trace: -o is refused");
}

/// `-o -` writes to standard output what `-o FILE` writes to the file, for `dep wet` and
/// `dep dcfg`; two outputs both `-` are refused in one line naming them.
#[test]
fn dash_is_standard_output() {
    let dir = tempfile::tempdir().unwrap();
    let profile = record(dir.path(), "hello");
    for (cmd, second) in [("wet", "--ports"), ("dcfg", "--trace")] {
        let file = dir.path().join(format!("{cmd}.out"));
        ok(Command::new(dep()).arg(cmd).arg(&profile).arg("-o").arg(&file));
        let stdout = ok(Command::new(dep()).arg(cmd).arg(&profile).args(["-o", "-"]));
        assert!(!stdout.is_empty() && stdout == std::fs::read(&file).unwrap(), "dep {cmd} -o - differs from -o FILE");
        assert!(!Path::new("-").exists() && !dir.path().join("-").exists(), "no file named -");
        let o = Command::new(dep()).arg(cmd).arg(&profile).args(["-o", "-", second, "-"]).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && o.stdout.is_empty(), "dep {cmd}: {err}");
        assert!(err.trim().lines().count() == 1 && err.contains(second) && err.contains("standard output"), "{err}");
    }
}
