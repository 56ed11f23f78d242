//! Scale runs, slow and so ignored by default:
//!
//!     cargo test --release --test scale -- --ignored --nocapture --test-threads 1
//!
//! `many_threads`: corpora/many_threads.c's 3,000 threads (64 alive at once) recorded with
//! the truth, recovered byte for byte equal to it, and put through races (exactly its marked
//! race), wet, callgrind, dcfg and stats. `ten_billion_instructions`: gzip -9 on 80 MB of
//! generated text (over 10^10 instructions) recorded, recovered, and put through dcfg and
//! callgrind. Each command's wall time and every process's peak resident memory (VmHWM,
//! sampled from /proc while it runs) are printed as a table and checked against the bounds
//! stated here. Profiles go under DEP_SCALE_DIR (default: the target directory).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{corpus, dep};

const MIB: u64 = 1024 * 1024;

/// One measured command.
struct Run {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: String,
    wall: Duration,
    /// Peak resident bytes of the command's own process (VmHWM: with the file pages it maps).
    root_peak: u64,
    /// The largest anonymous resident memory (RssAnon) seen in the command's own process:
    /// what it allocated, without the pages of a profile it maps.
    root_anon: u64,
    /// Peak resident bytes of each descendant process, by pid, with its name.
    child_peaks: BTreeMap<u32, (String, u64)>,
}

impl Run {
    /// The largest peak among the descendants (the recorded program for `dep record`).
    fn child_peak(&self) -> u64 {
        self.child_peaks.values().map(|v| v.1).max().unwrap_or(0)
    }
}

/// The parent pid field of /proc/PID/stat (after the parenthesised name, which may hold spaces).
fn ppid(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s[s.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()
}

/// A field of /proc/PID/status in bytes.
fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let l = s.lines().find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))?;
    Some(l.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// VmHWM of a process in bytes: the kernel's own peak, so sampling only has to catch it alive.
fn hwm(pid: u32) -> Option<u64> {
    status_bytes(pid, "VmHWM")
}

/// Every live process descending from `root` (not `root` itself).
fn descendants(root: u32) -> Vec<u32> {
    let parent: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|p| Some((p, ppid(p)?)))
        .collect();
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parent.iter().filter(|&&(_, pp)| pp == p).map(|&(c, _)| c));
        i += 1;
    }
    out.remove(0);
    out
}

/// Runs `cmd` to its end, sampling its processes' peak memory every 10 ms.
fn measured(name: &str, cmd: &mut Command) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let t0 = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("{name}: {cmd:?}: {e}"));
    let root = child.id();
    let (mut root_peak, mut root_anon, mut child_peaks) = (0u64, 0u64, BTreeMap::new());
    let status = loop {
        if let Some(h) = hwm(root) {
            root_peak = root_peak.max(h);
        }
        if let Some(a) = status_bytes(root, "RssAnon") {
            root_anon = root_anon.max(a);
        }
        for p in descendants(root) {
            if let Some(h) = hwm(p) {
                let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default().trim().to_string();
                let e = child_peaks.entry(p).or_insert((comm, 0));
                e.1 = e.1.max(h);
            }
        }
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let wall = t0.elapsed();
    let run = Run {
        status,
        stdout: std::fs::read(&out).unwrap(),
        stderr: std::fs::read_to_string(&err).unwrap(),
        wall,
        root_peak,
        root_anon,
        child_peaks,
    };
    let (wall, peak, anon, child) = (run.wall.as_secs_f64(), run.root_peak / MIB, run.root_anon / MIB, run.child_peak() / MIB);
    eprintln!("| {name:<28} | {wall:>8.1} s | {peak:>7} MiB | {anon:>7} MiB | {child:>7} MiB |");
    assert!(run.status.success(), "{name}: {cmd:?} failed ({}): {}", run.status, run.stderr);
    run
}

/// Asserts a peak below its bound, naming both.
fn below(what: &str, peak: u64, bound_mib: u64) {
    assert!(peak < bound_mib * MIB, "{what}: peak {} MiB, bound {bound_mib} MiB", peak / MIB);
}

/// Where the profiles of these runs go.
fn scale_dir() -> tempfile::TempDir {
    let base = std::env::var_os("DEP_SCALE_DIR").map(PathBuf::from).unwrap_or_else(|| Path::new(dep()).parent().unwrap().to_path_buf());
    tempfile::tempdir_in(base).unwrap()
}

fn header() {
    eprintln!("| {:<28} | {:>10} | {:>11} | {:>11} | {:>11} |", "command", "wall", "peak RSS", "peak anon", "child peak");
    eprintln!("|{:-<30}|{:->12}|{:->13}|{:->13}|{:->13}|", "", "", "", "", "");
}

/// Whether two files hold the same bytes, read in blocks (they may be larger than memory).
fn same_bytes(a: &Path, b: &Path) -> bool {
    let (mut fa, mut fb) = (std::fs::File::open(a).unwrap(), std::fs::File::open(b).unwrap());
    if fa.metadata().unwrap().len() != fb.metadata().unwrap().len() {
        return false;
    }
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = fa.read(&mut ba).unwrap();
        if n == 0 {
            return true;
        }
        fb.read_exact(&mut bb[..n]).unwrap();
        if ba[..n] != bb[..n] {
            return false;
        }
    }
}

/// The line of many_threads.c carrying the marker `race:NAME`.
fn marked(name: &str) -> u64 {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/corpora/many_threads.c")).unwrap();
    let tag = format!("race:{name} ");
    let lines: Vec<usize> = src.lines().enumerate().filter(|(_, l)| l.contains(&tag)).map(|(i, _)| i + 1).collect();
    assert_eq!(lines.len(), 1, "marker {tag:?}: {lines:?}");
    lines[0] as u64
}

/// `dep stats --json`'s thread count and total instructions.
fn stats(p: &Path) -> (usize, u64) {
    let o = Command::new(dep()).args(["stats", "--json", "--no-compress"]).arg(p).output().unwrap();
    assert!(o.status.success(), "dep stats: {}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let threads = v["threads"].as_array().unwrap();
    (threads.len(), threads.iter().map(|t| t["instructions"].as_u64().unwrap()).sum())
}

fn record(name: &str, out: &Path, truth: bool, prog: &[&std::ffi::OsStr]) -> Run {
    let mut c = Command::new(dep());
    c.arg("record").arg("-o").arg(out);
    if truth {
        c.arg("--truth");
    }
    measured(name, c.arg("--").args(prog))
}

#[test]
#[ignore = "slow: 3,000 threads through every analysis (run with --ignored)"]
fn many_threads() {
    let dir = scale_dir();
    let d = dir.path();
    let prog = corpus().join("many_threads");
    let native = Command::new(&prog).args(["3000", "64"]).output().unwrap();
    assert!(native.status.success());
    header();
    // The collector's memory per live thread: the same work with one thread alive at a time
    // and with 64.
    let one = record("record (1 alive)", &d.join("one.dep"), false, &[prog.as_os_str(), "3000".as_ref(), "1".as_ref()]);
    let many = record("record (64 alive)", &d.join("many.dep"), false, &[prog.as_os_str(), "3000".as_ref(), "64".as_ref()]);
    assert_eq!(many.stdout, native.stdout, "the recorded run's output differs from the native run's");
    let per_thread = many.child_peak().saturating_sub(one.child_peak()) / 63;
    let p = d.join("mt.dep");
    let rec = record("record --truth (64 alive)", &p, true, &[prog.as_os_str(), "3000".as_ref(), "64".as_ref()]);
    assert_eq!(rec.stdout, native.stdout, "the recorded run's output differs from the native run's");
    eprintln!("collector: {} KiB more per live thread", per_thread / 1024);
    let (threads, _) = stats(&p);
    assert_eq!(threads, 3001, "main and 3,000 threads");

    let (refs, truth) = (d.join("refs"), d.join("truth"));
    let r = measured("recover", Command::new(dep()).arg("recover").arg(&p).arg("-o").arg(&refs));
    let t = measured("recover --truth", Command::new(dep()).args(["recover", "--truth"]).arg(&p).arg("-o").arg(&truth));
    assert!(std::fs::metadata(&refs).unwrap().len() > 0);
    assert!(same_bytes(&refs, &truth), "the recovered references differ from the recorded truth");

    let races = measured("races", Command::new(dep()).args(["races", "--json"]).arg(&p));
    let reports: Vec<serde_json::Value> =
        String::from_utf8(races.stdout.clone()).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(reports.len(), 1, "exactly the marked race: {reports:?}");
    let line = marked("hits");
    for a in reports[0]["accesses"].as_array().unwrap() {
        assert_eq!(a["line"].as_u64(), Some(line), "{}", reports[0]);
    }
    assert_eq!(reports[0]["variable"], "hits");

    let wet = measured("wet", Command::new(dep()).arg("wet").arg(&p).arg("-o").arg(d.join("wet")));
    let cg = measured("callgrind", Command::new(dep()).arg("callgrind").arg(&p).arg("-o").arg(d.join("cg")));
    let dcfg = measured(
        "dcfg --trace",
        Command::new(dep()).arg("dcfg").arg(&p).arg("-o").arg(d.join("dcfg")).arg("--trace").arg(d.join("dcfg.trace")),
    );
    let st = measured("stats", Command::new(dep()).arg("stats").arg(&p));
    eprintln!("profile: {} MiB", std::fs::metadata(&p).unwrap().len() / MIB);

    // Bounds: about twice what was measured (README), so that a regression shows. The
    // analyses map the profile, so their bounds are on anonymous memory; the collector's on
    // the peak.
    below("record: launcher", rec.root_peak, 256);
    below("record: program", rec.child_peak(), 1024);
    below("record: per live thread", per_thread, 2);
    below("recover", r.root_anon, 512);
    below("recover --truth", t.root_anon, 512);
    below("races", races.root_anon, 256);
    below("wet", wet.root_anon, 512);
    below("callgrind", cg.root_anon, 512);
    // The edges each thread took, not edges x threads (1.4 GB before that).
    below("dcfg", dcfg.root_anon, 256);
    below("stats", st.root_anon, 512);
}

/// 80 MB of text from a fixed pseudo-random sequence over a 5,000-word vocabulary: gzip
/// -9 runs about 1.25e9 instructions per 8 MB of it.
fn text(path: &Path, bytes: usize) {
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let words: Vec<Vec<u8>> = (0..5000).map(|_| (0..2 + next() % 8).map(|_| b'a' + (next() % 26) as u8).collect()).collect();
    let mut out = Vec::with_capacity(bytes + 128);
    while out.len() < bytes {
        for k in 0..12 {
            if k > 0 {
                out.push(b' ');
            }
            out.extend_from_slice(&words[(next() % 5000) as usize]);
        }
        out.push(b'\n');
    }
    std::fs::write(path, out).unwrap();
}

#[test]
#[ignore = "slow: 10^10 instructions recorded and put through recover, dcfg, callgrind (run with --ignored)"]
fn ten_billion_instructions() {
    let dir = scale_dir();
    let d = dir.path();
    let input = d.join("input.txt");
    text(&input, 80 << 20);
    let native = Command::new("gzip").arg("-9").arg("-c").arg(&input).output().expect("gzip");
    assert!(native.status.success());
    header();
    let p = d.join("gzip.dep");
    let gzip = std::process::Command::new("sh").args(["-c", "command -v gzip"]).output().unwrap();
    let gzip = String::from_utf8(gzip.stdout).unwrap().trim().to_string();
    let rec = record("record gzip -9 (80 MB)", &p, false, &[gzip.as_ref(), "-9".as_ref(), "-c".as_ref(), input.as_os_str()]);
    assert!(rec.stdout == native.stdout, "the recorded gzip's output differs from the native one's");
    eprintln!("profile: {} MiB", std::fs::metadata(&p).unwrap().len() / MIB);

    let r = measured("recover --format null", Command::new(dep()).args(["recover", "--format", "null"]).arg(&p));
    // "dep: recovered B blocks, I instructions, ..."
    let instructions: u64 = r
        .stderr
        .split(", ")
        .find_map(|f| f.strip_suffix(" instructions")?.parse().ok())
        .unwrap_or_else(|| panic!("no instruction count in {:?}", r.stderr));
    eprintln!("instructions: {instructions}");
    assert!(instructions >= 10_000_000_000, "only {instructions} instructions");
    let dcfg = measured(
        "dcfg --trace",
        Command::new(dep()).arg("dcfg").arg(&p).arg("-o").arg(d.join("dcfg")).arg("--trace").arg(d.join("dcfg.trace")),
    );
    let cg = measured("callgrind", Command::new(dep()).arg("callgrind").arg(&p).arg("-o").arg(d.join("cg")));
    for f in ["dcfg", "dcfg.trace", "cg"] {
        eprintln!("{f}: {} MiB", std::fs::metadata(d.join(f)).unwrap().len() / MIB);
    }

    // As above: the collector's peaks, the analyses' anonymous memory (the 3 GB profile's
    // mapped pages come and go with the page cache).
    below("record: launcher", rec.root_peak, 512);
    below("record: program", rec.child_peak(), 512);
    below("recover", r.root_anon, 1024);
    below("dcfg", dcfg.root_anon, 1024);
    below("callgrind", cg.root_anon, 1024);
}
