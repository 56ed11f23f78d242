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

/// Records corpus program `prog` into `dir` (its exit status may be its own) and returns
/// its profiles: the program's and those of the processes it started (`prog.dep.1`, ...).
#[allow(dead_code)] // not every test binary records the corpus so
pub fn record_processes(dir: &Path, prog: &str) -> Vec<PathBuf> {
    let p = dir.join(format!("{prog}.dep"));
    let o = Command::new(dep())
        .arg("record")
        .arg("-o")
        .arg(&p)
        .arg("--")
        .arg(corpus().join(prog))
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
