//! A second oracle that shares nothing with dep: Valgrind's lackey (`--trace-mem=yes`)
//! runs corpora/bare.c (static, libc-free, so Valgrind and DynamoRIO execute the same
//! instructions on the same addresses) and its trace is compared, reference by reference
//! (pc, kind, address, size), with `dep recover --format text` of a plain `dep record` run.
//!
//! How lackey's trace is read, each difference of representation and why:
//! - `I addr,len` starts an instruction; ` L`/` S` are a load/store of that instruction;
//!   ` M` (modify) is one load and one store of the same bytes: dep writes a read, then a
//!   write.
//! - `cmps`: lackey lists its two reads `[rdi]` first; dep (and DynamoRIO) list them in
//!   Intel's operand order, `[rsi]` first. The order of two reads within one instruction is
//!   not architectural; an instruction with exactly two reads and no write (only `cmps`) has
//!   lackey's pair swapped. Were lackey to list `[rsi]` first, the comparison would fail.
//! - `xchg` with memory: lackey shows a load and then a modify of the same bytes (VEX does it
//!   with a compare-and-swap); dep shows one read and one write. A load followed by a modify
//!   of the same bytes within one instruction is read as one read and one write.
//! - The signal handler's `ret` reads its return address from the signal frame, which
//!   Valgrind builds elsewhere than the kernel: references of the handler (between the
//!   symbols `handler` and `restorer`, from nm) that lie on the program's stack are
//!   compared without their address.
//! - Left out of the program under Valgrind (`-DLACKEY`), because Valgrind 3.19 does not
//!   run them as the CPU does: `xlat` (lackey aborts on it, addEvent_Ir's size assertion)
//!   and `rep lodsb` (run as a single `lodsb`, so its result differs from the CPU's).
//!   Both are in the `bare` program the other tests record.
//! - Valgrind deletes loads whose value is dead (`pop %rsi; pop %rsi`); the program uses
//!   every loaded value, so none is deleted.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn corpus() -> PathBuf {
    let out = Path::new(env!("CARGO_BIN_EXE_dep")).parent().unwrap().join("corpora-lackey");
    let st = Command::new("make")
        .args(["-s", "-C", concat!(env!("CARGO_MANIFEST_DIR"), "/corpora")])
        .arg(format!("OUT={}", out.display()))
        .arg(format!("{}/bare_lackey", out.display()))
        .status();
    assert!(st.is_ok_and(|s| s.success()), "building corpora/bare.c failed");
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ref {
    pc: u64,
    write: bool,
    addr: u64,
    size: u32,
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("not hex: {s}"))
}

/// Lackey's trace as references, with the reading rules of the module comment.
fn lackey_refs(log: &str) -> Vec<Ref> {
    let mut out = Vec::new();
    let mut inst: Vec<(char, u64, u32)> = Vec::new();
    let mut pc = 0;
    let flush = |pc: u64, inst: &mut Vec<(char, u64, u32)>, out: &mut Vec<Ref>| {
        let mut refs: Vec<Ref> = Vec::new();
        let mut i = 0;
        while i < inst.len() {
            let (k, addr, size) = inst[i];
            // xchg: a load, then a modify of the same bytes.
            let xchg = k == 'L' && inst.get(i + 1) == Some(&('M', addr, size));
            if k == 'L' || k == 'M' || xchg {
                refs.push(Ref { pc, write: false, addr, size });
            }
            if k == 'S' || k == 'M' || xchg {
                refs.push(Ref { pc, write: true, addr, size });
            }
            i += 1 + xchg as usize;
        }
        if refs.len() == 2 && refs.iter().all(|r| !r.write) {
            refs.swap(0, 1); // cmps
        }
        out.extend(refs);
        inst.clear();
    };
    for line in log.lines() {
        if let Some(rest) = line.strip_prefix("I  ") {
            flush(pc, &mut inst, &mut out);
            pc = hex(rest.split(',').next().unwrap());
        } else if let Some(kind) = ["L", "S", "M"].iter().find(|k| line.starts_with(&format!(" {k} "))) {
            let (a, s) = line[3..].trim().split_once(',').unwrap();
            inst.push((kind.chars().next().unwrap(), hex(a), s.parse().unwrap()));
        }
    }
    flush(pc, &mut inst, &mut out);
    out
}

fn dep_refs(text: &str) -> Vec<Ref> {
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 5, "{l}");
            assert_eq!(f[0], "0", "bare.c has one thread: {l}");
            Ref { pc: hex(f[1]), write: f[2] == "W", addr: hex(f[3]), size: f[4].parse().unwrap() }
        })
        .collect()
}

/// Symbol addresses from nm.
fn symbols(bin: &Path) -> std::collections::HashMap<String, u64> {
    let o = Command::new("nm").arg(bin).output().expect("nm");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3).then(|| (f[2].to_string(), hex(f[0])))
        })
        .collect()
}

#[test]
fn lackey_agrees_with_recovery() {
    let bin = corpus().join("bare_lackey");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("lackey.txt");
    let native = Command::new(&bin).output().unwrap();
    let vg = Command::new("valgrind")
        .args(["--tool=lackey", "--trace-mem=yes"])
        .arg(format!("--log-file={}", log.display()))
        .arg(&bin)
        .stdin(Stdio::null())
        .output()
        .expect("valgrind (installed by scripts/setup.sh)");
    assert!(vg.status.success(), "valgrind failed: {}", String::from_utf8_lossy(&vg.stderr));
    assert_eq!(vg.stdout, native.stdout, "the program computes otherwise under Valgrind");
    let profile = dir.path().join("bare.dep");
    let rec = Command::new(env!("CARGO_BIN_EXE_dep")).arg("record").arg("-o").arg(&profile).arg("--").arg(&bin).output().unwrap();
    assert!(rec.status.success(), "{}", String::from_utf8_lossy(&rec.stderr));
    assert_eq!(rec.stdout, native.stdout, "the program computes otherwise under dep record");
    let text = Command::new(env!("CARGO_BIN_EXE_dep")).arg("recover").arg(&profile).args(["--format", "text"]).output().unwrap();
    assert!(text.status.success(), "{}", String::from_utf8_lossy(&text.stderr));

    let lk = lackey_refs(&std::fs::read_to_string(&log).unwrap());
    let dp = dep_refs(&String::from_utf8_lossy(&text.stdout));
    let sym = symbols(&bin);
    let (handler, restorer) = (sym["handler"], sym["restorer"]);
    let stack = sym["bare_stack"]..sym["bare_stack"] + (1 << 16);
    assert!(lk.len() > 5_000, "lackey traced only {} references", lk.len());
    let mut frame = 0;
    let mut bad = Vec::new();
    for (i, (l, d)) in lk.iter().zip(&dp).enumerate() {
        let on_frame = (handler..restorer).contains(&l.pc) && stack.contains(&l.addr) && stack.contains(&d.addr);
        let same = if on_frame { (l.pc, l.write, l.size) == (d.pc, d.write, d.size) } else { l == d };
        frame += on_frame as usize;
        if !same && bad.len() < 10 {
            bad.push(format!("reference {i}: lackey {l:x?}, dep {d:x?}"));
        }
    }
    assert!(bad.is_empty(), "{} references, first differences:\n{}", lk.len(), bad.join("\n"));
    assert_eq!(lk.len(), dp.len(), "lackey traced {} references, dep recovered {}", lk.len(), dp.len());
    assert_eq!(frame, 3, "the handler ran three times, each reading one return address from its frame");
    // The program's rep strings, cmps and AVX accesses are in the compared trace.
    let kinds = |size: u32| dp.iter().filter(|r| r.size == size).count();
    assert!(kinds(32) >= 128 && kinds(16) >= 128, "the vector loads and stores are missing");
}
