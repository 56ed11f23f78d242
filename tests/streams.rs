//! dep's own output streams: a reader that goes away (`dep ... | head`, `dep ... 2>&1 |
//! head`) ends what dep writes there, not dep: no panic, and the status the command has.
//! Runs on a simulated profile, without the collector.

use dep_profile::simulate::{random_code, random_path, write_profile, Rng};
use std::process::{Command, Stdio};

mod common;
use common::dep;

/// Standard output and standard error both closed before dep writes a byte: every command
/// still finishes with status 0 (a panic writing a message was 101).
#[test]
fn closed_output_and_error_streams_are_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.dep");
    let mut rng = Rng::new(67);
    let code = random_code(&mut rng, 40);
    let paths = vec![random_path(&mut rng, &code, 50_000, true)];
    write_profile(std::fs::File::create(&path).unwrap(), dep_profile::Machine::x86_64(2696), &code, &paths, 67).unwrap();
    let p = path.to_str().unwrap();
    for args in [
        &["recover", p, "--format", "null"][..],
        &["recover", p, "--format", "text"],
        &["stats", p],
        &["edges", p],
        &["dump", p, "--max", "100"],
    ] {
        let mut c = Command::new(dep()).args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        drop(c.stdout.take());
        drop(c.stderr.take());
        let status = c.wait().unwrap();
        assert_eq!(status.code(), Some(0), "dep {args:?} with its output and error streams closed");
    }
}
