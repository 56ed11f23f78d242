//! A profile truncated by another process while dep has it mapped: the reader's guard
//! turns the SIGBUS into dep's one-line error and exit status 2 (the reader's SAFETY
//! comment on its memory map relies on it).
//!
//! The test runs itself again as a child (the signal ends the process it happens in).

use dep_profile::container::truncation::{EXIT_STATUS, MESSAGE};
use dep_profile::container::*;
use dep_profile::Width;
use std::process::Command;

const CHILD: &str = "DEP_TRUNCATION_CHILD";

/// A valid profile of a few hundred KB: large blocks' code (the pages truncated away).
fn write_large(path: &std::path::Path) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = ProfileWriter::new(f, Width::W64, 3).unwrap();
    w.meta(&Metadata {
        format_version: VERSION,
        width: 64,
        command: vec!["/bin/true".into()],
        program: "/bin/true".into(),
        pid: 1,
        start_time_ns: 1,
        xsave_size: 2696,
        truth: false,
        tool: "test".into(),
        parent: None,
        windows: None,
        start_at: None,
        stop_at: None,
        attached: false,
    })
    .unwrap();
    // Blocks hold at most 65,535 instructions: five of 60,000 one-byte nops.
    for i in 0..5u64 {
        let code = vec![0x90u8; 60_000];
        w.block(&BlockEntry { addr: 0x40_0000 + i * 0x10_0000, version: 0, insn_count: code.len() as u32, code }).unwrap();
    }
    w.flush().unwrap();
}

/// The child: open and index the profile, truncate it under the map, read its last byte.
fn child(path: &str) {
    truncation::guard();
    let p = Profile::open(path).unwrap();
    let len = p.bytes().len();
    std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(4096).unwrap();
    let last = std::hint::black_box(p.bytes()[len - 1]);
    // Only reached if the truncation did not take: the parent then fails on the status.
    println!("read {last} past the end");
}

#[test]
fn truncated_under_the_map_is_one_line_and_status_2() {
    if let Ok(path) = std::env::var(CHILD) {
        child(&path);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.dep");
    write_large(&path);
    assert!(std::fs::metadata(&path).unwrap().len() > 64 * 1024);
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "truncated_under_the_map_is_one_line_and_status_2", "--nocapture", "--test-threads=1"])
        .env(CHILD, &path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(EXIT_STATUS), "stderr: {stderr}");
    assert!(stderr.ends_with(MESSAGE), "stderr: {stderr}");
    assert_eq!(stderr.matches('\n').count(), 1, "one line: {stderr}");
}
