//! What the end-to-end tests share: the `dep` binary and the corpus built for it.

pub mod numbering;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The `dep` binary under test.
pub fn dep() -> &'static str {
    env!("CARGO_BIN_EXE_dep")
}

/// Builds corpora/ once into the target directory.
pub fn corpus() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = Path::new(dep()).parent().unwrap().join("corpora-test");
        let st = Command::new("make")
            .args(["-s", "-C", concat!(env!("CARGO_MANIFEST_DIR"), "/corpora")])
            .arg(format!("OUT={}", out.display()))
            .status();
        assert!(st.is_ok_and(|s| s.success()), "building corpora/ failed (is gcc installed?)");
        out
    })
}

/// Records corpus program `prog` with `args` into `dir` (its exit status may be its own) and returns
/// its profiles: the program's and those of the processes it started (`prog.dep.1`, ...).
#[allow(dead_code)] // not every test binary records the corpus so
pub fn record_processes(dir: &Path, prog: &str, args: &[&str]) -> Vec<PathBuf> {
    let p = dir.join(format!("{prog}.dep"));
    let o = Command::new(dep())
        .arg("record")
        .arg("-o")
        .arg(&p)
        .arg("--")
        .arg(corpus().join(prog))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(p.exists(), "{prog}: no profile: {}", String::from_utf8_lossy(&o.stderr));
    let mut all = vec![p.clone()];
    for n in 1.. {
        let child = dir.join(format!("{prog}.dep.{n}"));
        if !child.exists() {
            break;
        }
        all.push(child);
    }
    all
}

/// The arguments the exporters' round trips (tests/umt.rs, tests/champsim.rs) run corpus
/// programs with: their traces hold a record per instruction and per rep-string iteration,
/// which at the default sizes is 12 GB for repstring and 4 GB each for longtrace and
/// selfkill (a UMT walk of them took most of 13 minutes). Smaller, repstring still moves
/// hundreds of thousands of bytes by rep strings, longtrace still hands its buffer off
/// inside its long trace, and selfkill's stores still come only by the timer's hand-off.
#[allow(dead_code)]
pub fn export_args(prog: &str) -> &'static [&'static str] {
    match prog {
        "repstring" => &["64"],
        "longtrace" => &["10000"],
        "selfkill" => &["30000"],
        _ => &[],
    }
}

/// [`record_processes`] of `prog` with its [`export_args`], once for every test binary of
/// this build: the profiles are kept in the target directory under a key of the `dep`
/// binary and the client it loads (sizes and modification times), so tests that only read
/// a corpus recording share one. Callers must not change the files.
#[allow(dead_code)] // not every test binary records the corpus so
pub fn shared_recording(prog: &str) -> Vec<PathBuf> {
    let stamp = |p: &Path| {
        std::fs::metadata(p).ok().map_or((0, 0), |m| {
            let t = m.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
            (m.len(), t.map_or(0, |t| t.as_nanos()))
        })
    };
    let bin = Path::new(dep());
    let ((a, b), (c, d)) = (stamp(bin), stamp(&bin.parent().unwrap().join("libdep_client.so")));
    let key = format!("{a:x}-{b:x}-{c:x}-{d:x}");
    let root = corpus().parent().unwrap().join("corpus-recordings");
    // The program's build and arguments name its recording.
    let (e, f) = stamp(&corpus().join(prog));
    let args: String = export_args(prog).iter().map(|a| format!("-{a}")).collect();
    let dir = root.join(&key).join(format!("{prog}{args}-{e:x}-{f:x}"));
    if !dir.join("done").exists() {
        // Recordings of earlier builds go.
        for e in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy() != key {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let tmp = root.join(&key).join(format!("{prog}.{}.{:?}", std::process::id(), std::thread::current().id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        record_processes(&tmp, prog, export_args(prog));
        std::fs::write(tmp.join("done"), b"").unwrap();
        // The first recording in place wins; one made beside it at the same time goes.
        if std::fs::rename(&tmp, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
    let mut all = vec![dir.join(format!("{prog}.dep"))];
    all.extend((1..).map(|n| dir.join(format!("{prog}.dep.{n}"))).take_while(|p| p.exists()));
    all
}

/// The corpus programs, by name, sorted.
#[allow(dead_code)] // not every test binary runs the whole corpus
pub fn corpus_programs() -> Vec<String> {
    let mut progs: Vec<String> = std::fs::read_dir(corpus())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.contains('.'))
        .collect();
    progs.sort();
    assert!(progs.len() >= 20, "corpus programs: {progs:?}");
    progs
}
