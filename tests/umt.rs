//! `dep export umt` end to end on every corpus program (and every process of those that
//! fork or exec): `dep export umt --check` accepts the trace; the reader walks each thread
//! forward and backward through exec.prev_next.column, and the walk gives back the
//! references `dep recover --format text` prints, in its order, and the blocks
//! `dep recover --format blocks` prints (each block's instructions one after another, a rep
//! string's iterations as one execution). A damaged trace is refused in one line. Needs
//! the DynamoRIO build and gcc.

use dep_dcfg_out::umt::reader::{RecordKind, Trace};
use std::path::Path;
use std::process::Command;

mod common;
use common::{corpus_programs, dep, shared_recording};

fn run(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(dep()).args(args).output().unwrap()
}

fn export(profile: &Path, out: &Path) {
    let o = run(&["export".as_ref(), "umt".as_ref(), profile.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    assert!(o.status.success(), "export {}: {}", profile.display(), String::from_utf8_lossy(&o.stderr));
}

/// `dep recover PROFILE --format FORMAT`'s output as it comes, and a check that recovery
/// succeeded, for the end.
fn recover(profile: &Path, format: &str) -> (impl std::io::BufRead, impl FnOnce()) {
    let mut child = Command::new(dep())
        .args(["recover".as_ref(), profile.as_os_str(), "--format".as_ref(), format.as_ref()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::with_capacity(1 << 20, child.stdout.take().unwrap());
    (out, move || assert!(child.wait().unwrap().success(), "dep recover failed"))
}

/// The references of `dep recover --format binary`, one 24-byte record at a time: (thread,
/// pc, write, address, size).
struct Refs<R> {
    out: R,
}

impl<R: std::io::BufRead> Refs<R> {
    fn new(mut out: R) -> Self {
        let mut header = [0u8; 16];
        out.read_exact(&mut header).unwrap();
        assert_eq!(&header[..8], b"DEPREFS\0", "dep recover --format binary's header");
        Refs { out }
    }

    fn next(&mut self) -> Option<(u32, u64, bool, u64, u16)> {
        let mut r = [0u8; 24];
        match self.out.read_exact(&mut r) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return None,
            Err(e) => panic!("reading recovery: {e}"),
        }
        let u64_at = |o: usize| u64::from_le_bytes(r[o..o + 8].try_into().unwrap());
        let thread = u32::from_le_bytes(r[16..20].try_into().unwrap());
        Some((thread, u64_at(0), r[22] == 1, u64_at(8), u16::from_le_bytes([r[20], r[21]])))
    }
}

/// Whether `code` is a string instruction with a repeat prefix (one record per iteration).
fn rep_string(code: &[u8], pc: u64) -> bool {
    use iced_x86::Mnemonic::*;
    let i = iced_x86::Decoder::with_ip(64, code, pc, iced_x86::DecoderOptions::NONE).decode();
    (i.has_rep_prefix() || i.has_repe_prefix() || i.has_repne_prefix())
        && matches!(
            i.mnemonic(),
            Movsb
                | Movsw
                | Movsd
                | Movsq
                | Stosb
                | Stosw
                | Stosd
                | Stosq
                | Lodsb
                | Lodsw
                | Lodsd
                | Lodsq
                | Cmpsb
                | Cmpsw
                | Cmpsd
                | Cmpsq
                | Scasb
                | Scasw
                | Scasd
                | Scasq
                | Insb
                | Insw
                | Insd
                | Outsb
                | Outsw
                | Outsd
        )
}

/// The instructions of the blocks `dep recover --format blocks` prints, one after another:
/// each block's first at its start, each next after the one before, whose length is known
/// once it is met.
struct Blocks<I> {
    lines: I,
    /// The block being walked: its thread, next instruction's address, instructions left.
    at: Option<(u32, u64, u64)>,
    line: String,
}

impl<I: Iterator<Item = String>> Blocks<I> {
    /// The next instruction's thread and address, if any: `len` is the one before's length.
    fn next(&mut self, len_before: u64) -> Option<(u32, u64)> {
        if let Some((t, pc, left)) = self.at.as_mut() {
            *pc += len_before;
            if *left > 0 {
                *left -= 1;
                return Some((*t, *pc));
            }
        }
        self.line = self.lines.next()?;
        let f: Vec<&str> = self.line.split(' ').collect();
        let (t, start, n): (u32, u64, u64) = (f[0].parse().unwrap(), u64::from_str_radix(&f[1][2..], 16).unwrap(), f[2].parse().unwrap());
        assert!(n > 0, "a block of no instruction: {}", self.line);
        self.at = Some((t, start, n - 1));
        Some((t, start))
    }
}

/// Walks every thread of the trace in `dir` and checks it against `profile`'s recovery:
/// the references in order (against `--format binary`, whose fields are `--format text`'s),
/// and each execution at the address the blocks give. Streams: nothing of the trace or the
/// recovery is held.
fn walk_matches_recovery(dir: &Path, profile: &Path, what: &str) -> u64 {
    let o = run(&["export".as_ref(), "umt".as_ref(), "--check".as_ref(), dir.as_os_str()]);
    assert!(o.status.success(), "{what}: --check: {}", String::from_utf8_lossy(&o.stderr));
    let t = Trace::open(dir).unwrap();
    let (out, refs_ok) = recover(profile, "binary");
    let mut want_refs = Refs::new(out);
    let (out, blocks_ok) = recover(profile, "blocks");
    let mut blocks = Blocks { lines: std::io::BufRead::lines(out).map(|l| l.unwrap()), at: None, line: String::new() };
    let (mut execs, mut refs, mut len_before) = (0u64, 0u64, 0u64);
    // Each instruction's length and whether it is a rep string, by address and bytes: the
    // corpus runs a few thousand instructions many times over.
    let mut decoded: std::collections::HashMap<(u64, Vec<u8>), (usize, bool)> = Default::default();
    for th in 0..t.thread_count() as u32 {
        // The backward walk must be the forward one reversed: both fold their EIDs into a
        // count and a hash that weighs the k-th EID from the thread's start by 31^k.
        let mut back = (0u64, 0u64);
        for e in t.walk_backward(th).unwrap() {
            back = (back.0 + 1, back.1.wrapping_mul(31).wrapping_add(e.unwrap()));
        }
        let (mut forward, mut weight) = ((0u64, 0u64), 1u64);
        let mut last = None;
        for eid in t.walk_forward(th).unwrap() {
            let eid = eid.unwrap();
            assert!(last < Some(eid), "{what}: thread {th}: EIDs not increasing along the thread at {eid}");
            last = Some(eid);
            forward = (forward.0 + 1, forward.1.wrapping_add(eid.wrapping_mul(weight)));
            weight = weight.wrapping_mul(31);
            let r = t.record(eid).unwrap();
            assert_eq!(r.thread, th);
            if let RecordKind::Instruction { .. } = r.kind {
                let ins = r.ins().unwrap();
                for m in r.references() {
                    let got = (th, m.pc, m.write, m.addr, m.size.min(u16::MAX as u32) as u16);
                    let want = want_refs.next();
                    assert_eq!(Some(got), want, "{what}: reference {refs} (EID {eid})");
                    refs += 1;
                }
                let code = ins.code;
                let &mut (len, rep) = decoded.entry((ins.address, code.to_vec())).or_insert_with(|| {
                    let len = iced_x86::Decoder::with_ip(64, code, ins.address, iced_x86::DecoderOptions::NONE).decode().len();
                    (len, rep_string(code, ins.address))
                });
                assert_eq!(len, code.len(), "{what}: EID {eid}: code bytes are not one instruction");
                // A rep string's later iterations are the same execution.
                if !(rep && r.flags & 0x08 == 0) {
                    let want = blocks.next(len_before);
                    assert_eq!(Some((th, ins.address)), want, "{what}: execution {execs} (EID {eid}), in block {}", blocks.line);
                    len_before = len as u64;
                    execs += 1;
                }
            }
        }
        assert_eq!(forward, back, "{what}: thread {th}: the backward walk is not the forward one reversed");
    }
    assert_eq!(want_refs.next(), None, "{what}: recovery has references beyond the trace's {refs}");
    assert_eq!(blocks.next(len_before), None, "{what}: recovery has blocks beyond the trace's {execs} executions");
    refs_ok();
    blocks_ok();
    execs
}

#[test]
fn every_corpus_program_walks_back_to_its_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let progs = corpus_programs();
    let mut execs = 0;
    for prog in &progs {
        if prog == "avx512" && !std::arch::is_x86_feature_detected!("avx512vl") {
            continue; // runs only where the CPU has it
        }
        if prog == "signal_loop" {
            // 2.4 G instructions: a 170 GB trace. Handlers are walked on sigblock,
            // siglongjmp and selfkill.
            continue;
        }
        for (k, profile) in shared_recording(prog).iter().enumerate() {
            let out = dir.path().join(format!("{prog}.{k}.umt"));
            export(profile, &out);
            execs += walk_matches_recovery(&out, profile, &format!("{prog} process {k}"));
            std::fs::remove_dir_all(&out).unwrap();
        }
    }
    assert!(execs > 1_000_000, "{execs} instructions walked");
}

/// Copies the trace in `from` to `to` and applies `damage` to one of its files.
fn damaged(from: &Path, to: &Path, file: &str, damage: impl FnOnce(&mut Vec<u8>)) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
    let p = to.join(file);
    let mut b = std::fs::read(&p).unwrap();
    damage(&mut b);
    std::fs::write(&p, b).unwrap();
}

#[test]
fn a_damaged_trace_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let profile = &shared_recording("hello")[0];
    let good = dir.path().join("good");
    export(profile, &good);
    let put = |b: &mut Vec<u8>, at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    let cases: Vec<(&str, &str, Box<dyn FnOnce(&mut Vec<u8>)>)> = vec![
        ("exec.vtable", "truncated", Box::new(|b: &mut Vec<u8>| b.truncate(b.len() - 3))),
        ("exec.offsets", "offset past the file", Box::new(move |b: &mut Vec<u8>| put(b, 8 * 5, 1 << 40))),
        ("exec.offsets", "offsets out of order", Box::new(move |b: &mut Vec<u8>| put(b, 8 * 5, 16))),
        ("exec.offsets", "truncated", Box::new(|b: &mut Vec<u8>| b.truncate(b.len() - 8))),
        ("exec.prev_next.column", "a link elsewhere", Box::new(move |b: &mut Vec<u8>| put(b, 16 * 7 + 8, 3))),
        ("exec.prev_next.column", "a link out of range", Box::new(move |b: &mut Vec<u8>| put(b, 16 * 7 + 8, u64::MAX - 5))),
        ("ins.itable", "row count beyond the file", Box::new(move |b: &mut Vec<u8>| put(b, 8, 1 << 50))),
        ("ins.itable", "truncated", Box::new(|b: &mut Vec<u8>| b.truncate(b.len() / 2))),
        ("thread.itable", "first record out of range", Box::new(move |b: &mut Vec<u8>| put(b, 32 + 16, 1 << 33))),
        ("context_map.itable", "truncated", Box::new(|b: &mut Vec<u8>| b.truncate(100))),
        ("exec.vtable", "a record of type 7", Box::new(|b: &mut Vec<u8>| b[16 + 4] = 7)),
    ];
    for (k, (file, what, damage)) in cases.into_iter().enumerate() {
        let bad = dir.path().join(format!("bad{k}"));
        damaged(&good, &bad, file, damage);
        let o = run(&["export".as_ref(), "umt".as_ref(), "--check".as_ref(), bad.as_os_str()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{file} {what}: accepted: {}", String::from_utf8_lossy(&o.stdout));
        assert_eq!(err.lines().count(), 1, "{file} {what}: {err}");
        assert!(err.starts_with("dep: error: "), "{file} {what}: {err}");
        assert!(!err.contains("panicked"), "{file} {what}: {err}");
    }
}
