//! `dep recover`'s renderings in bounded memory: two chunks whose text is 120 MiB each
//! (one rep string each, as one 8-byte value in a profile can make), rendered on two
//! workers, reach the output in order, byte for byte as the format defines them, while the
//! process never holds more than a fraction of one chunk's rendering.

use dep_profile::container::{BlockEntry, ChunkData, Profile, ProfileWriter};
use dep_profile::simulate::{random_code, random_path, write_profile, Rng};
use dep_profile::{Machine, Reg, NUM_REGS};
use dep_recover::{Format, Recovery, Source};
use std::io::Write;

// (Not every test that includes it uses all of it.)
#[allow(dead_code)]
#[path = "../../tests/common/peak_alloc.rs"]
mod peak_alloc;

const BLOCK: u64 = 0x40_1000;
const START: u64 = 0x7f00_0000_0000;

/// A profile of `threads` threads, each one chunk running `rep stosb` once over `bytes`
/// bytes from `START`.
fn rep_profile(dir: &std::path::Path, threads: u32, bytes: u64) -> Profile {
    // Metadata of a simulated x86-64 profile.
    let mut rng = Rng::new(1);
    let code = random_code(&mut rng, 4);
    let paths = vec![random_path(&mut rng, &code, 10, false)];
    let src = dir.join("src.dep");
    std::fs::write(&src, write_profile(Vec::new(), Machine::x86_64(2696), &code, &paths, 1).unwrap()).unwrap();
    let meta = Profile::open(&src).unwrap().meta.clone();

    let path = dir.join("rep.dep");
    let mut w = ProfileWriter::new(std::fs::File::create(&path).unwrap(), dep_profile::Width::W64, 1).unwrap();
    w.meta(&meta).unwrap();
    w.block(&BlockEntry { addr: BLOCK, version: 0, insn_count: 1, code: vec![0xf3, 0xaa] }).unwrap();
    let mut regs = [0u64; NUM_REGS];
    regs[Reg::RDI.index()] = START;
    // The block's L-tag; its H-tag is the chunk's; DEP_m: rdi after the string.
    let tags = (BLOCK as u16).to_le_bytes();
    let values = (START + bytes).to_le_bytes();
    for thread in 0..threads {
        w.chunk(&ChunkData {
            thread,
            seq: 0,
            hi: BLOCK >> 16,
            status: (1 << NUM_REGS) - 1,
            last: true,
            regs,
            tags: &tags,
            values: &values,
            truth: &[],
        })
        .unwrap();
    }
    drop(w);
    Profile::open(&path).unwrap()
}

/// Compares what is written with the text rendering the format defines, line by line as
/// it comes, holding one line.
struct Expect {
    threads: u32,
    bytes: u64,
    thread: u32,
    i: u64,
    line: Vec<u8>,
    at: usize,
    written: u64,
    wrong: Option<String>,
}

impl Expect {
    fn next_line(&mut self) -> bool {
        if self.i == self.bytes {
            self.thread += 1;
            self.i = 0;
        }
        if self.thread == self.threads {
            return false;
        }
        self.line.clear();
        write!(self.line, "{} {BLOCK:#x} W {:#x} 1\n", self.thread, START + self.i).unwrap();
        self.i += 1;
        self.at = 0;
        true
    }

    fn done(&self) -> bool {
        self.thread == self.threads || (self.thread + 1 == self.threads && self.i == self.bytes && self.at == self.line.len())
    }
}

impl Write for Expect {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for &b in buf {
            if self.wrong.is_some() {
                break;
            }
            if self.at == self.line.len() && !self.next_line() {
                self.wrong = Some(format!("output goes on past the last reference at byte {}", self.written));
                break;
            }
            if self.line[self.at] != b {
                self.wrong =
                    Some(format!("byte {}: {:?} where the line is {:?}", self.written, b as char, String::from_utf8_lossy(&self.line)));
            }
            self.at += 1;
            self.written += 1;
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn renderings_larger_than_memory_allows_stream_in_order() {
    let _turn = peak_alloc::turn();
    // 4 Mi references a thread: 120 MiB of text each.
    let (threads, bytes) = (2u32, 4u64 << 20);
    let dir = tempfile::tempdir().unwrap();
    let p = rep_profile(dir.path(), threads, bytes);
    for workers in [2, 1] {
        let rec = Recovery::new(&p, workers);
        assert_eq!(rec.workers(), workers, "one chunk a thread");
        let mut out = Expect { threads, bytes, thread: 0, i: 0, line: Vec::new(), at: 0, written: 0, wrong: None };
        let ((), peak) = peak_alloc::measure(|| rec.events(Source::Dep).rendered(Format::Text, &mut out).unwrap());
        assert_eq!(out.wrong, None, "{workers} workers");
        assert!(out.done(), "{workers} workers: output ends early, at byte {}", out.written);
        assert!(out.written > 200 << 20, "{} bytes", out.written);
        // Each chunk alone renders to 120 MiB; a worker holds at most 16 MiB in memory.
        assert!(peak < 64 << 20, "{workers} workers: {} MiB allocated at the peak", peak >> 20);
    }
}
