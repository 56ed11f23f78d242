//! `dep callgrind` end to end: the readers people use (callgrind_annotate, gprof2dot) read
//! every corpus program's profile cleanly and agree on its total, and the costs agree with
//! Valgrind's own callgrind on the same programs, function by function, where the only
//! differences are the ones documented (rep strings). Needs the DynamoRIO build, gcc,
//! valgrind and gprof2dot (scripts/setup.sh installs it).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;
use common::{corpus, dep};

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("spawn")
}

fn ok(cmd: &mut Command) -> Output {
    let o = run(cmd);
    assert!(o.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&o.stderr));
    o
}

/// Records `prog` (whose exit status may be its own) and returns the profile.
fn record(dir: &Path, prog: &str) -> PathBuf {
    let p = dir.join(format!("{prog}.dep"));
    let o = run(Command::new(dep()).arg("record").arg("-o").arg(&p).arg("--").arg(corpus().join(prog)));
    assert!(p.exists(), "{prog}: no profile: {}", String::from_utf8_lossy(&o.stderr));
    p
}

/// Instructions `dep recover` counts in a profile.
fn recovered_instructions(profile: &Path) -> u64 {
    let o = ok(Command::new(dep()).arg("recover").arg(profile).args(["--format", "null"]));
    let err = String::from_utf8_lossy(&o.stderr);
    let line = err.lines().find(|l| l.contains("recovered")).expect("a summary line");
    let f: Vec<&str> = line.split_whitespace().collect();
    let k = f.iter().position(|w| w.starts_with("instructions")).expect("instructions") - 1;
    f[k].trim_end_matches(',').parse().unwrap()
}

/// What a Callgrind file says, read independently of dep's writer.
#[derive(Debug, Default)]
struct Profile {
    /// (object, function) -> self cost (Ir, Dr, Dw).
    selfc: HashMap<(String, String), [u64; 3]>,
    /// (object, caller, callee) -> inclusive Ir of the calls.
    calls: HashMap<(String, String, String), u64>,
    /// File address -> (Ir, Dr, Dw), with `positions: instr line`.
    by_instr: HashMap<u64, [u64; 3]>,
    totals: Vec<u64>,
}

/// A name as a Callgrind file gives it, compressed (`(id) name` the first time, `(id)`
/// after, ids kept in `map`) or not.
fn compressed(map: &mut HashMap<String, String>, v: &str) -> String {
    let v = v.trim();
    if let Some(rest) = v.strip_prefix('(') {
        let (id, tail) = rest.split_once(')').unwrap();
        let tail = tail.trim();
        if !tail.is_empty() {
            map.insert(id.to_string(), tail.to_string());
        }
        return map.get(id).cloned().unwrap_or_else(|| format!("?{id}"));
    }
    v.to_string()
}

/// Callgrind's recursion levels (`f'2`) are the function `f`.
fn base(name: &str) -> String {
    match name.rfind('\'') {
        Some(k) if name[k + 1..].chars().all(|c| c.is_ascii_digit()) && k + 1 < name.len() => name[..k].to_string(),
        _ => name.to_string(),
    }
}

fn parse(path: &Path) -> Profile {
    let text = std::fs::read_to_string(path).unwrap();
    let mut p = Profile::default();
    let (mut obs, mut fns): (HashMap<String, String>, HashMap<String, String>) = (HashMap::new(), HashMap::new());
    let (mut npos, mut ob, mut func, mut cfn) = (1usize, String::new(), String::new(), String::new());
    let (mut in_call, mut in_jump) = (false, false);
    let mut last = [0u64; 2];
    for l in text.lines() {
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if let Some(v) = l.strip_prefix("positions:") {
            npos = v.split_whitespace().count();
            continue;
        }
        if let Some(v) = l.strip_prefix("totals:") {
            p.totals = v.split_whitespace().map(|x| x.parse().unwrap()).collect();
            continue;
        }
        if let Some((k, v)) = l.split_once('=') {
            if !k.contains(' ') && !k.chars().next().unwrap().is_ascii_digit() {
                match k {
                    "ob" => ob = compressed(&mut obs, v),
                    "cob" => {
                        compressed(&mut obs, v);
                    }
                    "fn" => func = base(&compressed(&mut fns, v)),
                    "cfn" => cfn = base(&compressed(&mut fns, v)),
                    "calls" => in_call = true,
                    "jump" | "jcnd" => in_jump = true,
                    _ => {}
                }
                continue;
            }
        }
        if l.contains(':') {
            continue; // header lines
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        let mut pos = [0u64; 2];
        for k in 0..npos {
            let s = f[k];
            let prev = last[k];
            pos[k] = if s == "*" {
                prev
            } else if let Some(d) = s.strip_prefix('+') {
                prev + d.parse::<u64>().unwrap()
            } else if let Some(d) = s.strip_prefix('-') {
                prev - d.parse::<u64>().unwrap()
            } else if let Some(h) = s.strip_prefix("0x") {
                u64::from_str_radix(h, 16).unwrap()
            } else {
                s.parse().unwrap()
            };
        }
        last = pos;
        let mut c = [0u64; 3];
        for (k, v) in f[npos..].iter().enumerate().take(3) {
            c[k] = v.parse().unwrap();
        }
        if in_jump {
            in_jump = false;
        } else if in_call {
            in_call = false;
            *p.calls.entry((ob.clone(), func.clone(), cfn.clone())).or_default() += c[0];
        } else {
            let s = p.selfc.entry((ob.clone(), func.clone())).or_default();
            for k in 0..3 {
                s[k] += c[k];
            }
            if npos == 2 {
                let s = p.by_instr.entry(pos[0]).or_default();
                for k in 0..3 {
                    s[k] += c[k];
                }
            }
        }
    }
    p
}

/// Every corpus program: dep's profiles read cleanly by callgrind_annotate (as is, with
/// `--inclusive=yes` and with `--tree=caller`) and gprof2dot, and the total Ir that
/// callgrind_annotate prints is the number of instructions `dep recover` counts.
#[test]
fn readers_take_every_corpus_profile() {
    let dir = tempfile::tempdir().unwrap();
    let progs = [
        "hello",
        "exit_code",
        "threads",
        "signal_loop",
        "siglongjmp",
        "repstring",
        "avx",
        "avx512",
        "forkexec",
        "jit",
        "rwx",
        "syscalls",
        "stack",
        "closefds",
        "exceptions",
        "bare",
        "wet",
    ];
    let mut written = Vec::new();
    for prog in progs {
        if prog == "avx512" && !std::arch::is_x86_feature_detected!("avx512vl") {
            continue; // runs only where the CPU has it (tests/collector.rs instruments it anyway)
        }
        let profile = record(dir.path(), prog);
        let want = recovered_instructions(&profile);
        for instr in [false, true] {
            let out = dir.path().join(format!("{prog}{}.cg", if instr { ".instr" } else { "" }));
            let mut cmd = Command::new(dep());
            cmd.arg("callgrind").arg(&profile).arg("-o").arg(&out);
            if instr {
                cmd.arg("--dump-instr");
            }
            ok(&mut cmd);
            for extra in [&[][..], &["--inclusive=yes"][..], &["--tree=caller"][..]] {
                let o = ok(Command::new("callgrind_annotate").args(extra).arg(&out));
                assert!(o.stderr.is_empty(), "{prog} {extra:?}: callgrind_annotate says {}", String::from_utf8_lossy(&o.stderr));
                let text = String::from_utf8_lossy(&o.stdout);
                let totals = text.lines().find(|l| l.contains("PROGRAM TOTALS")).expect("PROGRAM TOTALS");
                let ir: u64 = totals.split_whitespace().next().unwrap().replace(',', "").parse().unwrap();
                assert_eq!(ir, want, "{prog}: callgrind_annotate's total Ir against dep recover's instructions");
            }
            let o = ok(Command::new("gprof2dot").args(["-f", "callgrind", "-o"]).arg(dir.path().join("g.dot")).arg(&out));
            assert!(o.stderr.is_empty(), "{prog}: gprof2dot says {}", String::from_utf8_lossy(&o.stderr));
            let p = parse(&out);
            assert_eq!(p.totals.first().copied(), Some(want), "{prog}: totals:");
            let sum: u64 = p.selfc.values().map(|c| c[0]).sum();
            assert_eq!(sum, want, "{prog}: the self costs add up to the total");
            written.push(out);
        }
    }
    // KCachegrind (on a virtual display) loads each without a complaint, a few at a time.
    let config = dir.path().join("kcachegrind-config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("kcachegrindrc"), "[TipOfDay]\nRunOnStart=false\n").unwrap();
    for batch in written.chunks(4) {
        std::thread::scope(|s| {
            for out in batch {
                let config = &config;
                s.spawn(move || {
                    let complaints = kcachegrind_complaints(out, config);
                    assert!(complaints.is_empty(), "{}: KCachegrind says\n{}", out.display(), complaints.join("\n"));
                });
            }
        });
    }
    // Threads apart: one file per thread, adding up to the whole.
    let profile = record(dir.path(), "threads");
    let out = dir.path().join("threads.sep");
    ok(Command::new(dep()).arg("callgrind").arg(&profile).arg("-o").arg(&out).arg("--separate-threads"));
    let mut sum = 0;
    for k in 1.. {
        let f = PathBuf::from(format!("{}-{k}", out.display()));
        if !f.exists() {
            assert!(k > 9, "threads: only {} files", k - 1);
            break;
        }
        let o = ok(Command::new("callgrind_annotate").arg(&f));
        assert!(o.stderr.is_empty());
        sum += parse(&f).totals[0];
    }
    assert_eq!(sum, recovered_instructions(&profile));
}

/// What KCachegrind's loader says of a Callgrind file (`Loading "FILE" : LINE : what`),
/// read from its stderr until it selects `main` (`Selected "main"`, once the file is
/// loaded), or for 15 s where the program has no `main` (bare), KCachegrind still running
/// then; it runs under xvfb-run in a process group of its own, killed after.
fn kcachegrind_complaints(file: &Path, config: &Path) -> Vec<String> {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let mut child = Command::new("xvfb-run")
        .args(["-a", "dbus-run-session", "--", "kcachegrind"])
        .arg(file)
        .env("XDG_CONFIG_HOME", config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("xvfb-run and kcachegrind (scripts/setup.sh installs them)");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let (mut complaints, mut selected) = (Vec::new(), false);
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) if line.starts_with("Loading ") => complaints.push(line),
            Ok(line) if line.starts_with("Selected ") => {
                selected = true;
                break;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let running = matches!(child.try_wait(), Ok(None));
    let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).status();
    let _ = child.wait();
    assert!(selected || running, "{}: KCachegrind ended without loading the file", file.display());
    complaints
}

/// Rep-prefixed string instructions of a program: how many references one iteration makes,
/// and whether the flags can end it (repe/repne cmps and scas), from objdump.
fn rep_instructions(prog: &Path) -> HashMap<u64, (u64, bool)> {
    let o = ok(Command::new("objdump").args(["-d", "--no-show-raw-insn"]).arg(prog));
    let mut reps = HashMap::new();
    for l in String::from_utf8_lossy(&o.stdout).lines() {
        let Some((addr, rest)) = l.trim_start().split_once(":\t") else { continue };
        let Ok(addr) = u64::from_str_radix(addr, 16) else { continue };
        let mut w = rest.split_whitespace();
        let (Some(prefix), Some(op)) = (w.next(), w.next()) else { continue };
        if matches!(prefix, "rep" | "repz" | "repnz" | "repe" | "repne") {
            let per = if op.starts_with("movs") || op.starts_with("cmps") { 2 } else { 1 };
            reps.insert(addr, (per, op.starts_with("cmps") || op.starts_with("scas")));
        }
    }
    reps
}

/// Function by function, dep's self Ir equals Valgrind callgrind's for the program's own
/// code, but for one documented difference: callgrind counts a rep string instruction once
/// per iteration plus once more for the check that ends it when the count runs out (a
/// repe/repne compare that the flags end has no such check), dep once per execution (the
/// instruction count `dep recover` and DEP's paper count). So callgrind's Ir is dep's plus
/// the iterations, which dep's own references give (each iteration makes one or two),
/// less at most one per execution of a repe/repne compare. And callgrind leaves out the
/// block whose system call ends the process (it charges a block's instructions as the block
/// is left, which that one never is): its instructions are in dep's count, not callgrind's.
/// The inclusive cost of the calls the program makes into its own code agrees the same way.
#[test]
fn costs_agree_with_valgrind_callgrind() {
    let dir = tempfile::tempdir().unwrap();
    // (program, its own functions that must be there, the caller whose calls into the
    // program's own code are compared inclusively)
    let cases: [(&str, &[&str], &str); 4] = [
        ("wet", &["main", "wet_patterns", "wet_callee"], "main"),
        ("hello", &["main", "cmp_item"], "main"),
        ("bare_lackey", &["bare_main", "mix", "depth"], "bare_main"),
        ("repstring", &["main"], "main"),
    ];
    for (prog, must, caller) in cases {
        let exe = corpus().join(prog);
        let object = exe.display().to_string();
        let profile = record(dir.path(), prog);
        let (ours, theirs, _) = both_callgrinds(dir.path(), prog, &profile, &exe, None);
        let (d, v) = (parse(&ours), parse(&theirs));
        // Iterations of each rep instruction, from dep's own references at it.
        let reps = rep_instructions(&exe);
        // (least, most) Ir callgrind adds over dep in function `f`.
        let iterations = |f: &str| -> (u64, u64) {
            let mut r = (0, 0);
            for (pc, &(per, conditional)) in &reps {
                if function_of(&ours, *pc).as_deref() != Some(f) {
                    continue;
                }
                let Some(c) = d.by_instr.get(pc) else { continue };
                let iters = (c[1] + c[2]) / per;
                r.1 += iters;
                r.0 += if conditional { iters.saturating_sub(c[0]) } else { iters };
            }
            r
        };
        // The process's last block, from the recovered block stream: `<thread> <pc> <count>`.
        let blocks = ok(Command::new(dep()).arg("recover").arg(&profile).args(["--format", "blocks"]));
        let blocks = String::from_utf8_lossy(&blocks.stdout);
        let last = blocks.lines().filter(|l| l.starts_with("0 ")).last().expect("thread 0 ran");
        let f: Vec<&str> = last.split(' ').collect();
        let (last_pc, last_n): (u64, u64) = (u64::from_str_radix(f[1].trim_start_matches("0x"), 16).unwrap(), f[2].parse().unwrap());
        let last_fn = function_of(&ours, last_pc);
        for f in must {
            let key = (object.clone(), f.to_string());
            let (ds, vs) = (d.selfc.get(&key).map_or(0, |c| c[0]), v.selfc.get(&key).map_or(0, |c| c[0]));
            assert!(ds > 0, "{prog}: dep has no cost for {f}");
            let ds = if last_fn.as_deref() == Some(*f) { ds - last_n } else { ds };
            let (lo, hi) = iterations(f);
            assert!(vs >= ds + lo && vs <= ds + hi, "{prog}: self Ir of {f}: valgrind {vs}, dep {ds} + rep iterations {lo}..={hi}");
        }
        // Calls from `caller` into the program's own functions, inclusive: the callee's
        // rep iterations and those of everything it calls in turn make the difference.
        let own: Vec<String> = d.selfc.keys().filter(|k| k.0 == object).map(|k| k.1.clone()).collect();
        let mut compared = 0;
        for callee in &own {
            let key = (object.clone(), caller.to_string(), callee.clone());
            let (Some(&di), Some(&vi)) = (d.calls.get(&key), v.calls.get(&key)) else { continue };
            let mut below = vec![callee.clone()];
            let mut k = 0;
            while k < below.len() {
                let f = below[k].clone();
                for (o, from, to) in d.calls.keys() {
                    if *o == object && *from == f && !below.contains(to) {
                        below.push(to.clone());
                    }
                }
                k += 1;
            }
            let (lo, hi) = below.iter().map(|g| iterations(g)).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
            assert!(
                vi >= di + lo && vi <= di + hi,
                "{prog}: inclusive Ir of {caller}'s calls to {callee}: valgrind {vi}, dep {di} + {lo}..={hi}"
            );
            compared += 1;
        }
        if prog != "hello" && prog != "repstring" {
            assert!(compared > 0, "{prog}: no call of {caller} into its own code compared");
        }
    }
}

/// `dep callgrind --dump-instr` of `profile` and `valgrind --tool=callgrind --dump-instr=yes`
/// of `exe` (whose exit status may be its own) into DIR/`prog`.dep.cg and DIR/`prog`.vg.cg,
/// with valgrind's run.
fn both_callgrinds(dir: &Path, prog: &str, profile: &Path, exe: &Path, tunables: Option<&str>) -> (PathBuf, PathBuf, Output) {
    let ours = dir.join(format!("{prog}.dep.cg"));
    ok(Command::new(dep()).arg("callgrind").arg(profile).arg("-o").arg(&ours).arg("--dump-instr"));
    let theirs = dir.join(format!("{prog}.vg.cg"));
    let mut valgrind = Command::new("valgrind");
    if let Some(t) = tunables {
        valgrind.env("GLIBC_TUNABLES", t);
    }
    let valgrind = run(valgrind
        .args(["--tool=callgrind", "--dump-instr=yes"])
        .arg(format!("--callgrind-out-file={}", theirs.display()))
        .arg(exe)
        .stdout(Stdio::null()));
    (ours, theirs, valgrind)
}

/// The function a Callgrind file puts address `pc` in (positions: instr line).
fn function_of(path: &Path, pc: u64) -> Option<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut fns: HashMap<String, String> = HashMap::new();
    let (mut func, mut last, mut skip) = (String::new(), 0u64, false);
    for l in text.lines() {
        if let Some(v) = l.strip_prefix("fn=").or_else(|| l.strip_prefix("cfn=")) {
            let (id, tail) = v.trim_start_matches('(').split_once(')').unwrap_or(("", v));
            if !tail.trim().is_empty() {
                fns.insert(id.to_string(), tail.trim().to_string());
            }
            if l.starts_with("fn=") {
                func = fns.get(id).cloned().unwrap_or_default();
            }
            continue;
        }
        if l.starts_with("calls=") || l.starts_with("jump=") || l.starts_with("jcnd=") {
            skip = true;
            continue;
        }
        let Some(s) = l.split_whitespace().next() else { continue };
        let v = if s == "*" {
            last
        } else if let Some(d) = s.strip_prefix('+') {
            match d.parse::<u64>() {
                Ok(d) => last + d,
                Err(_) => continue,
            }
        } else if let Some(d) = s.strip_prefix('-') {
            match d.parse::<u64>() {
                Ok(d) => last - d,
                Err(_) => continue,
            }
        } else if let Some(h) = s.strip_prefix("0x") {
            u64::from_str_radix(h, 16).unwrap()
        } else {
            continue;
        };
        last = v;
        if skip {
            skip = false;
            continue;
        }
        if v == pc {
            return Some(func);
        }
    }
    None
}

/// What the name comparison reads from a Callgrind file: functions with their object,
/// source file and self Ir, and call counts between functions (recursion levels `f'2`
/// as `f`, a cold part `f.cold` as `f`), with each callee's entry (file address, with
/// `--dump-instr`) and object.
#[derive(Default)]
struct Graph {
    /// (object, function) -> (the files named for it, self Ir). Static functions of one
    /// name in several files (ld.so's two `check_match`) are one function by name.
    funcs: HashMap<(String, String), (Vec<String>, u64)>,
    /// (caller, callee) -> calls.
    calls: HashMap<(String, String), u64>,
    /// (callee object, callee, entry file address).
    entries: Vec<(String, String, u64)>,
    total: u64,
}

fn graph(path: &Path) -> Graph {
    let text = std::fs::read_to_string(path).unwrap();
    let mut g = Graph::default();
    let mut names: [HashMap<String, String>; 3] = Default::default(); // ob, fl, fn
    let merge = |f: String| base(f.strip_suffix(".cold").unwrap_or(&f));
    let (mut ob, mut fl, mut func, mut cob, mut cfn) = Default::default();
    let (mut call, mut jump, mut npos) = (None::<u64>, false, 1);
    for l in text.lines() {
        if let Some(v) = l.strip_prefix("positions:") {
            npos = v.split_whitespace().count();
            continue;
        }
        if let Some((k, v)) = l.split_once('=') {
            match k {
                "ob" => ob = compressed(&mut names[0], v),
                "fl" => fl = compressed(&mut names[1], v),
                "fi" | "fe" | "cfi" | "cfl" => {
                    compressed(&mut names[1], v);
                }
                "fn" => {
                    func = merge(compressed(&mut names[2], v));
                    let files = &mut g.funcs.entry((ob.clone(), func.clone())).or_default().0;
                    if !files.contains(&fl) {
                        files.push(fl.clone());
                    }
                    cob = ob.clone();
                }
                "cob" => cob = compressed(&mut names[0], v),
                "cfn" => cfn = merge(compressed(&mut names[2], v)),
                "calls" => {
                    let f: Vec<&str> = v.split_whitespace().collect();
                    call = Some(f[0].parse().unwrap());
                    if npos == 2 {
                        if let Some(h) = f.get(1).and_then(|a| a.strip_prefix("0x")) {
                            g.entries.push((cob.clone(), cfn.clone(), u64::from_str_radix(h, 16).unwrap()));
                        }
                    }
                }
                "jump" | "jcnd" => jump = true,
                _ => {}
            }
            continue;
        }
        if l.is_empty() || l.starts_with('#') || l.contains(':') {
            continue;
        }
        if std::mem::take(&mut jump) {
            continue;
        }
        if let Some(n) = call.take() {
            *g.calls.entry((func.clone(), cfn.clone())).or_default() += n;
            continue;
        }
        let ir: u64 = l.split_whitespace().nth(npos).map_or(0, |c| c.parse().unwrap());
        g.funcs.entry((ob.clone(), func.clone())).or_default().1 += ir;
        g.total += ir;
    }
    g
}

/// Whether dep's source file for a function is Valgrind's. Valgrind 3.19, like binutils,
/// joins a DWARF 5 line table's directory 0 to the compilation directory it already is
/// (`./stdlib/./stdlib/msort.c`); dep reads it as the standard says, as gdb does.
fn same_file(valgrind: &str, dep: &str) -> bool {
    valgrind == dep || valgrind.strip_suffix(dep).and_then(|d| d.strip_suffix('/')).is_some_and(|d| dep.starts_with(&format!("{d}/")))
}

/// The function symbols of an object and of its separate debug file (found by build id),
/// as `nm -C --defined-only -S` lists them: (address, size, name).
fn nm_symbols(object: &str) -> Vec<(u64, u64, String)> {
    let mut files = vec![PathBuf::from(object)];
    let notes = ok(Command::new("readelf").args(["-n", object]));
    let notes = String::from_utf8_lossy(&notes.stdout);
    if let Some(id) = notes.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")) {
        let debug = PathBuf::from(format!("/usr/lib/debug/.build-id/{}/{}.debug", &id[..2], &id[2..]));
        if debug.exists() {
            files.push(debug);
        }
    }
    let mut out = Vec::new();
    for f in files {
        for dynamic in [false, true] {
            let mut cmd = Command::new("nm");
            cmd.args(["-C", "--defined-only", "-S"]);
            if dynamic {
                cmd.arg("-D");
            }
            let o = run(cmd.arg(&f));
            for l in String::from_utf8_lossy(&o.stdout).lines() {
                let w: Vec<&str> = l.splitn(4, ' ').collect();
                let (addr, size, kind, name) = match w.len() {
                    4 => (w[0], w[1], w[2], w[3]),
                    3 => (w[0], "0", w[1], w[2]),
                    _ => continue,
                };
                if matches!(kind, "t" | "T" | "i" | "W" | "w") {
                    out.push((u64::from_str_radix(addr, 16).unwrap(), u64::from_str_radix(size, 16).unwrap_or(0), name.to_string()));
                }
            }
        }
    }
    out
}

/// Programs calling into libc and libstdc++ (qsort calling back, printf, malloc/free,
/// large memcpy/memset, C++ std::sort and exceptions), under `dep record` and Valgrind's
/// callgrind: every function with at least 0.5% of callgrind's self Ir has the same name,
/// object and source file in dep's profile; the calls into and out of the program's own
/// functions are the same, with the same counts, the lazy binder included; and every
/// function dep names at a call's entry is a symbol of `nm` (the object's or its debug
/// file's) that covers the entry. Valgrind's virtual CPU has no AVX-512 and no XSAVEC,
/// and has ERMS where the host may not (AMD's Zen 1 has none), so both runs hide those
/// from glibc (GLIBC_TUNABLES) for the same ifunc variants (`__memcpy_avx_unaligned`, not
/// `..._erms`, whatever the host); the dynamic linker's CPU probing at start-up differs
/// all the same (Valgrind's CPU is an Intel model), so a function of ld.so only
/// callgrind's profile has is not required.
#[test]
fn names_and_calls_agree_with_valgrind_on_libc_programs() {
    let dir = tempfile::tempdir().unwrap();
    let hide = "glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD,-XSAVEC,-ERMS";
    for prog in ["libcalls", "hello", "exceptions"] {
        let exe = corpus().join(prog);
        let object = exe.display().to_string();
        let profile = dir.path().join(format!("{prog}.dep"));
        ok(Command::new(dep()).env("GLIBC_TUNABLES", hide).arg("record").arg("-o").arg(&profile).arg("--").arg(&exe).stdout(Stdio::null()));
        let (ours, theirs, valgrind) = both_callgrinds(dir.path(), prog, &profile, &exe, Some(hide));
        assert!(valgrind.status.success(), "{prog}: valgrind: {}", String::from_utf8_lossy(&valgrind.stderr));
        let (d, v) = (graph(&ours), graph(&theirs));
        // Code Valgrind leaves unnamed (`0x…`) and the frames below main it folds into one.
        let named = |f: &str| !f.starts_with("0x") && f != "(below main)";
        let mut heavy = 0;
        for ((ob, f), (files, ir)) in &v.funcs {
            if *ir * 200 < v.total || !named(f) {
                continue;
            }
            let Some((dfiles, dir_)) = d.funcs.get(&(ob.clone(), f.clone())) else {
                // The dynamic linker's start-up probes the CPU, which Valgrind presents as
                // a model of its own (an Intel one): its cache probing runs only there.
                if ob.contains("/ld-linux") {
                    continue;
                }
                panic!("{prog}: callgrind's {f} in {ob} ({ir} Ir of {}) is not in dep's profile", v.total)
            };
            assert!(*dir_ > 0, "{prog}: {f} has no cost in dep's profile");
            for file in files {
                assert!(dfiles.iter().any(|d| same_file(file, d)), "{prog}: {f}: callgrind's file {file}, dep's {dfiles:?}");
            }
            heavy += 1;
        }
        assert!(heavy >= 3, "{prog}: only {heavy} functions compared");
        // Calls into and out of the program's own functions, between functions both name.
        let own: Vec<&String> = v.funcs.keys().filter(|(ob, f)| *ob == object && named(f)).map(|(_, f)| f).collect();
        let vnames: std::collections::HashSet<&String> = v.funcs.keys().map(|(_, f)| f).collect();
        let arcs = |g: &Graph| -> HashMap<(String, String), u64> {
            g.calls
                .iter()
                .filter(|((a, b), _)| (own.contains(&a) || own.contains(&b)) && named(a) && named(b))
                .filter(|((a, b), _)| vnames.contains(a) && vnames.contains(b))
                .map(|(k, n)| (k.clone(), *n))
                .collect()
        };
        let (va, da) = (arcs(&v), arcs(&d));
        assert!(va.keys().any(|(a, b)| a == "main" && b.starts_with("_dl_runtime_resolve")), "{prog}: no lazy binding seen");
        for (k, n) in &va {
            assert_eq!(da.get(k), Some(n), "{prog}: calls {} -> {}: callgrind {n}", k.0, k.1);
        }
        for (k, n) in &da {
            assert_eq!(va.get(k), Some(n), "{prog}: calls {} -> {}: dep {n}", k.0, k.1);
        }
        // Every name dep gives a callee's entry comes from a symbol covering it.
        let mut checked = 0;
        let mut symbols: HashMap<String, Vec<(u64, u64, String)>> = HashMap::new();
        for (ob, f, entry) in &d.entries {
            if f.contains('+') || f.ends_with("@plt") || ob == "???" {
                continue; // named by offset, or a PLT stub (no symbol of its own)
            }
            let syms = symbols.entry(ob.clone()).or_insert_with(|| nm_symbols(ob));
            // Versions aside (`nm` and the debug file spell them differently); a cold part
            // (`f.cold`) is read as its function, as above; a C++ name up to its parameters
            // (cpp_demangle, dep's demangler, spells a few parameter types unlike c++filt:
            // see the README's limits).
            let bare = |n: &str| {
                let n = n.split('@').next().unwrap_or(n).trim_end_matches(".cold");
                n.split_once('(').map_or(n, |(f, _)| f).to_string()
            };
            let covers = syms.iter().any(|(a, size, name)| bare(name) == bare(f) && (*a == *entry || (*a < *entry && *entry < a + size)));
            assert!(covers, "{prog}: dep names {f} at {entry:#x} in {ob}, and no symbol of that name covers it");
            checked += 1;
        }
        assert!(checked > 10, "{prog}: only {checked} entries checked");
    }
}

/// This process's vDSO, copied out of /proc/self/mem into `path` (the range /proc/self/maps
/// gives it), for nm to read.
fn copy_own_vdso(path: &Path) {
    use std::io::{Read, Seek, SeekFrom};
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let line = maps.lines().find(|l| l.ends_with("[vdso]")).expect("this kernel maps a vDSO");
    let (start, end) = line.split_whitespace().next().unwrap().split_once('-').unwrap();
    let (start, end) = (u64::from_str_radix(start, 16).unwrap(), u64::from_str_radix(end, 16).unwrap());
    let mut mem = std::fs::File::open("/proc/self/mem").unwrap();
    mem.seek(SeekFrom::Start(start)).unwrap();
    let mut image = vec![0; (end - start) as usize];
    mem.read_exact(&mut image).unwrap();
    std::fs::write(path, image).unwrap();
}

/// The kernel's vDSO has no file, so its functions were named by offset (`[vdso]+0xb10`,
/// with a warning on every profile). The launcher records the build id of its own vDSO, and
/// readers on the same kernel read their own image: `dep callgrind` names corpora/vdso's
/// calls into it as the vDSO's symbol table does (nm on a copy of this process's vDSO, the
/// same kernel's), with no warning and no function named by offset.
#[test]
fn vdso_functions_are_named_as_its_symbol_table_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("vdso.so");
    copy_own_vdso(&image);
    let p = record(dir.path(), "vdso");
    let out = dir.path().join("vdso.callgrind");
    let o = ok(Command::new(dep()).arg("callgrind").arg(&p).arg("-o").arg(&out));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("[vdso]"), "a warning about the vDSO: {err}");
    // nm's names by address, without their version (`clock_gettime@@LINUX_2.6`).
    let mut by_addr: HashMap<u64, Vec<String>> = HashMap::new();
    for (addr, _, name) in nm_symbols(image.to_str().unwrap()) {
        by_addr.entry(addr).or_default().push(name.split('@').next().unwrap().to_string());
    }
    let addr_of = |name: &str| *by_addr.iter().find(|(_, ns)| ns.iter().any(|n| n == name)).expect(name).0;
    let prof = parse(&out);
    let in_vdso: Vec<&String> = prof.selfc.iter().filter(|((ob, _), c)| ob == "[vdso]" && c[0] > 0).map(|((_, f), _)| f).collect();
    assert!(!in_vdso.is_empty(), "no cost in [vdso]: {:?}", prof.selfc.keys().collect::<Vec<_>>());
    for f in &in_vdso {
        assert!(!f.contains("[vdso]"), "a vDSO function named by offset: {f} (all: {in_vdso:?})");
        assert!(by_addr.values().any(|ns| ns.contains(f)), "{f} is no symbol of the vDSO: {by_addr:?}");
    }
    // Each entry point the program called is among the functions, under one of its names.
    for entry in ["__vdso_clock_gettime", "__vdso_gettimeofday", "__vdso_time"] {
        let names = &by_addr[&addr_of(entry)];
        assert!(in_vdso.iter().any(|f| names.contains(f)), "{entry} ({names:?}) not among {in_vdso:?}");
    }
}
