//! The kernel's side of system calls (`dep recover --kernel-refs`): corpora/kernel.c makes
//! calls whose user memory the man pages describe and prints, for each, the ranges the
//! kernel read and wrote, from its own buffers' addresses (an oracle that shares nothing
//! with dep). Every one is among dep's kernel references; the recovered lines equal the
//! truth's, with and without sync records; without `--kernel-refs` the output is what it
//! always was. Needs the DynamoRIO
//! build and gcc.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

mod common;
use common::{corpus, dep};

fn recover(p: &Path, args: &[&str]) -> String {
    let o = Command::new(dep()).arg("recover").arg(p).args(args).output().unwrap();
    assert!(o.status.success(), "dep recover {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn the_kernels_accesses_are_what_the_program_says_it_handed_over() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("kernel.dep");
    let o = Command::new(dep())
        .arg("record")
        .arg("--truth")
        .arg("-o")
        .arg(&p)
        .arg("--")
        .arg(corpus().join("kernel"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // "expect W 0x7f...580 8"
    let want: Vec<(String, u64, u64)> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("expect "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_string(), u64::from_str_radix(f[1].trim_start_matches("0x"), 16).unwrap(), f[2].parse().unwrap())
        })
        .collect();
    assert!(want.len() >= 20, "the program printed {} expectations", want.len());

    let with = recover(&p, &["--kernel-refs"]);
    // "0 0x7f..9e5 R 0x7f..2a0 19 kernel"
    let got: BTreeSet<(String, u64, u64)> = with
        .lines()
        .filter_map(|l| l.strip_suffix(" kernel"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 5, "{l}");
            (f[2].to_string(), u64::from_str_radix(f[3].trim_start_matches("0x"), 16).unwrap(), f[4].parse().unwrap())
        })
        .collect();
    let missing: Vec<_> = want.iter().filter(|w| !got.contains(w)).collect();
    assert!(missing.is_empty(), "kernel accesses dep does not list: {missing:x?}");

    // The truth records the same accesses at the same places.
    assert!(with == recover(&p, &["--truth", "--kernel-refs"]), "--kernel-refs differs from the truth's");
    // Without sync records the system calls still have theirs (their clean call is the
    // block's own, which keeps the value pointer in memory), and recovery stays exact.
    let q = dir.path().join("nosync.dep");
    let o =
        Command::new(dep()).args(["record", "--truth", "--no-sync", "-o"]).arg(&q).arg("--").arg(corpus().join("kernel")).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let nosync = recover(&q, &["--kernel-refs"]);
    assert!(nosync.lines().filter(|l| l.ends_with(" kernel")).count() >= want.len(), "--no-sync: kernel references missing");
    assert!(nosync == recover(&q, &["--truth", "--kernel-refs"]), "--no-sync: recovery differs from the truth");
    // Without the flag: the same references, no kernel lines.
    let plain = recover(&p, &[]);
    let stripped: String = with.lines().filter(|l| !l.ends_with(" kernel")).flat_map(|l| [l, "\n"]).collect();
    assert!(plain == stripped, "the text without --kernel-refs changed");

    // Only text takes the flag: one line naming the problem.
    let o = Command::new(dep()).arg("recover").arg(&p).args(["--kernel-refs", "--format", "binary"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.trim().lines().count() == 1 && err.contains("--kernel-refs"), "{err}");
}
