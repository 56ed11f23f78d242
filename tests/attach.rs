//! `dep record --attach PID`, end to end: corpora/attach runs natively until its threads
//! all sit in system calls (two in `read` on a pipe, main in `read` on stdin), dep attaches,
//! and a line on the program's stdin lets it go. The oracles: the program's own output,
//! which must be what a native run prints; its truth stream; and its source, which has each
//! worker write a 50,000-element array of 8-byte values.
//! Needs the DynamoRIO build and ptrace rights over the test's own children.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

mod common;
use common::{corpus, dep};

fn ok(cmd: &mut Command) -> String {
    let o = cmd.stdin(Stdio::null()).output().expect("spawn");
    assert!(o.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// Starts `cmd`, which runs corpora/attach, and waits until the program is ready: the process
/// and its output.
fn start(cmd: &mut Command) -> (Child, BufReader<ChildStdout>) {
    let mut prog = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut out = BufReader::new(prog.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    (prog, out)
}

/// Lets a started corpora/attach go: the rest of what it printed, and `prog`'s exit status.
fn finish(mut prog: Child, mut out: BufReader<ChildStdout>) -> (String, i32) {
    prog.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut printed = String::new();
    std::io::Read::read_to_string(&mut out, &mut printed).unwrap();
    (printed, prog.wait().unwrap().code().unwrap())
}

/// The text recovery of profile `p`, checked equal to its truth stream's.
fn recovers_to_truth(p: &Path) -> String {
    let recovered = ok(Command::new(dep()).args(["recover", "--format", "text"]).arg(p));
    let truth = ok(Command::new(dep()).args(["recover", "--truth", "--format", "text"]).arg(p));
    assert!(recovered == truth, "recovery differs from the truth stream");
    recovered
}

/// corpora/attach with `args`.
fn program(args: &[&str]) -> Command {
    let mut cmd = Command::new(corpus().join("attach"));
    cmd.args(args);
    cmd
}

/// Runs corpora/attach with `args`, attaches `dep record --truth` (with `client` as
/// DEP_CLIENT, if given) to it into `p` once it is ready, lets it go and returns (what it
/// printed, its exit status, dep's exit status, dep's stderr).
fn attach_and_run(p: &Path, client: Option<&Path>, args: &[&str]) -> (String, i32, i32, String) {
    let (mut prog, out) = start(&mut program(args));
    let mut rec = Command::new(dep());
    if let Some(c) = client {
        rec.env("DEP_CLIENT", c);
    }
    let mut rec = rec
        .args(["record", "--truth", "-o"])
        .arg(p)
        .arg("--attach")
        .arg(prog.id().to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(rec.stderr.take().unwrap());
    let mut said = String::new();
    loop {
        let mut l = String::new();
        if err.read_line(&mut l).unwrap() == 0 {
            break;
        }
        said.push_str(&l);
        if l.contains("attached to process") {
            break;
        }
    }
    assert!(said.contains(&format!("attached to process {}", prog.id())), "dep said: {said}");
    // Its threads sit in the system calls they were in, waiting for `go`.
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(prog.try_wait().unwrap().is_none(), "the program went on before it was let go");
    let (printed, status) = finish(prog, out);
    std::io::Read::read_to_string(&mut err, &mut said).unwrap();
    let dep_status = rec.wait().unwrap().code().unwrap();
    (printed, status, dep_status, said)
}

#[test]
fn attached_process_recovers_to_its_truth_and_runs_as_natively() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("attach.dep");
    let (printed, status, dep_status, said) = attach_and_run(&p, None, &[]);
    let native = Command::new(corpus().join("attach")).stdin(Stdio::null()).output().unwrap();
    let native_out = String::from_utf8_lossy(&native.stdout);
    assert_eq!(native.status.code(), Some(5));
    assert_eq!(format!("ready\n{printed}"), native_out, "the attached run computed what a native run does");
    assert_eq!(status, 5);
    assert_eq!(dep_status, 5, "dep exits with the status the process passed to exit_group; it said: {said}");

    let dump = ok(Command::new(dep()).args(["dump", "--max", "0"]).arg(&p));
    assert!(dump.contains("attached to the running process"), "{dump}");
    assert!(dump.contains("ended: exit status 5"), "{dump}");

    let recovered = recovers_to_truth(&p);

    // Each worker fills its own 50,000-element array of longs after the attach.
    let mut writes: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); 3];
    for l in recovered.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        let thread: usize = f[0].parse().unwrap();
        assert!(thread < 3, "a thread the program does not have: {l}");
        if f[2] == "W" && f[4] == "8" {
            writes[thread].insert(u64::from_str_radix(&f[3][2..], 16).unwrap());
        }
    }
    let mut filled = 0;
    for set in &writes {
        // The longest run of consecutive 8-byte slots written.
        let (mut best, mut run, mut last) = (0, 0, None);
        for &a in set {
            run = if last == Some(a.wrapping_sub(8)) { run + 1 } else { 1 };
            best = best.max(run);
            last = Some(a);
        }
        if best >= 50_000 {
            filled += 1;
        }
    }
    assert_eq!(filled, 2, "two threads each wrote a whole array");
}

#[test]
fn attach_refuses_what_it_cannot_attach_to() {
    // Above the kernel's largest pid (2^22).
    let o = Command::new(dep()).args(["record", "--discard", "--attach", "999999999"]).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no process 999999999"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    let o = Command::new(dep()).args(["record", "--attach", "1", "--", "true"]).output().unwrap();
    assert!(!o.status.success(), "--attach and a program conflict");

    // Threads that block every signal cannot be taken over: dep refuses before DynamoRIO
    // would end the process, which then runs on untouched.
    let (prog, out) = start(&mut program(&["--block-signals"]));
    let o = Command::new(dep()).args(["record", "--discard", "--attach"]).arg(prog.id().to_string()).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("blocks SIGILL"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    let (printed, status) = finish(prog, out);
    assert_eq!(status, 5);
    assert!(printed.contains("shared 150 total"), "{printed}");

    // A process dep already records runs under DynamoRIO: a second one is refused.
    let (rec, out) = start(Command::new(dep()).args(["record", "--discard", "--"]).arg(corpus().join("attach")).stderr(Stdio::null()));
    let children = std::fs::read_to_string(format!("/proc/{}/task/{}/children", rec.id(), rec.id())).unwrap();
    let app = children.split_whitespace().next().expect("dep's child, the program");
    let o = Command::new(dep()).args(["record", "--discard", "--attach", app]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("already runs under DynamoRIO"), "{err}");
    let (printed, status) = finish(rec, out);
    assert_eq!(status, 5, "the recorded program ran on: {printed}");
}

/// DEP_CLIENT may name a client away from its helper: dep-attach is then found where the
/// client would have been.
#[test]
fn attach_finds_its_helper_when_the_client_is_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let built = Path::new(dep()).with_file_name("libdep_client.so");
    let client = dir.path().join("libdep_client.so");
    std::fs::copy(&built, &client).unwrap();
    assert!(!dir.path().join("dep-attach").exists());
    let p = dir.path().join("moved.dep");
    let (printed, status, dep_status, said) = attach_and_run(&p, Some(&client), &[]);
    assert_eq!((status, dep_status), (5, 5), "{said}");
    assert!(printed.contains("shared 150 total"), "{printed}");
    assert!(!recovers_to_truth(&p).is_empty());
}

/// Every thread blocks all signals for a moment as it starts (glibc, from its clone until its
/// start routine runs): one that blocks SIGILL is waited for, and refused only if it keeps
/// it blocked (corpora/attach's workers unblock 100 ms after starting, after `ready`).
#[test]
fn attach_waits_for_a_thread_that_blocks_signals_for_a_moment() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("briefly.dep");
    let (printed, status, dep_status, said) = attach_and_run(&p, None, &["--block-briefly"]);
    assert_eq!((status, dep_status), (5, 5), "{said}");
    assert!(printed.contains("shared 150 total"), "{printed}");
    assert!(!recovers_to_truth(&p).is_empty());
}
