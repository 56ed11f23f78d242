//! `dep dcfg` on thousands of short threads: the DCFG holds a count for each edge and each
//! thread that took it, and writes the rest of its edges-by-threads table as zeros as it
//! goes, so its memory grows with the edges taken, not with edges times threads. Chunks
//! recovered ahead of a slow one wait for their turn to merge holding what they counted.

use dep_dcfg_out::dcfg::{write_dcfg, Ids, Process};
use dep_dcfg_out::program::symbols::Symbolizer;
use dep_profile::container::Profile;
use dep_profile::simulate::{random_code, random_path, write_profile, Rng};
use dep_profile::Machine;
use dep_recover::Recovery;
use std::io::Write;

#[path = "../../tests/common/peak_alloc.rs"]
mod peak_alloc;

/// Counts the bytes written.
#[derive(Default)]
struct Count {
    bytes: usize,
}

impl Write for Count {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn chunks_waiting_to_merge_hold_what_they_counted() {
    let _turn = peak_alloc::turn();
    let (alone, few, both) = peak_alloc::long_and_short_threads(|p| {
        let rec = Recovery::new(p, 2);
        peak_alloc::measure(|| Process::build(&rec, &mut Ids::default(), &|_| {}).unwrap()).1
    });
    // Held as they were made, the waiting chunks' direct-mapped tables took 192 KiB each
    // (tens of MiB over the sum here); held compacted, a few hundred bytes.
    assert!(both < alone + few + (2 << 20), "{} KiB at the peak, {} KiB and {} KiB apart", both >> 10, alone >> 10, few >> 10);
}

#[test]
fn edges_by_threads_are_not_held() {
    let _turn = peak_alloc::turn();
    let threads = 3000;
    let mut rng = Rng::new(11);
    // 30 blocks, each thread a short random walk among them: most of the 900 possible
    // edges are taken by some thread, each thread takes few.
    let code = random_code(&mut rng, 30);
    let paths: Vec<_> = (0..threads).map(|_| random_path(&mut rng, &code, 12, false)).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("many.dep");
    write_profile(std::fs::File::create(&path).unwrap(), Machine::x86_64(2696), &code, &paths, 11).unwrap();
    let p = Profile::open(&path).unwrap();
    assert_eq!(p.threads.len(), threads);
    let rec = Recovery::new(&p, 2);
    let sym = Symbolizer::new(&p.modules);
    let (out, peak) = peak_alloc::measure(|| {
        let procs = vec![Process::build(&rec, &mut Ids::default(), &|_| {}).unwrap()];
        let mut out = Count::default();
        write_dcfg(&mut out, &procs, &[sym]).unwrap();
        out
    });
    // Every edge's row has a number for each thread: the table written is edges x threads.
    assert!(out.bytes > 2 * threads * 50, "{} bytes written", out.bytes);
    eprintln!("{} bytes written, {} KiB allocated at the peak", out.bytes, peak >> 10);
    assert!(peak < out.bytes, "{} KiB allocated at the peak, for {} KiB written", peak >> 10, out.bytes >> 10);
}

/// A DCFG-trace made as it is read, never held: one block (node 3, one instruction) looping on
/// itself, in `chunks` chunks of two edges each, every chunk's EDGE_ID_SEQUENCE padded to
/// `text` characters (bits past the chunk's edges are never read, spec 3.7.1).
struct Generated {
    chunks: u64,
    text: usize,
    next: u64,
    buf: Vec<u8>,
    at: usize,
}

impl Generated {
    /// The DCFG it pairs with: START -1-> 3, 3 -2-> 3 (2 chunks - 2 times), 3 -3-> END.
    fn dcfg(&self) -> Vec<u8> {
        let loops = 2 * self.chunks - 2;
        serde_json::to_vec(&serde_json::json!({
            "EDGE_TYPES": [["EDGE_TYPE_ID", "EDGE_TYPE"], [1, "ENTRY"], [2, "DIRECT_UNCONDITIONAL_BRANCH"], [3, "EXIT"]],
            "SPECIAL_NODES": [["NODE_ID", "NODE_NAME"], [1, "START"], [2, "END"]],
            "PROCESSES": [["PROCESS_ID", "PROCESS_DATA"], [7, {
                "INSTR_COUNT": loops + 1,
                "INSTR_COUNT_PER_THREAD": [loops + 1],
                "IMAGES": [["IMAGE_ID", "LOAD_ADDR", "SIZE", "IMAGE_DATA"], [1, "0x1000", 16, {
                    "BASIC_BLOCKS": [["NODE_ID", "ADDR_OFFSET", "SIZE", "NUM_INSTRS", "LAST_INSTR_OFFSET", "COUNT"], [3, "0x0", 2, 1, 0, loops + 1]]
                }]],
                "EDGES": [["EDGE_ID", "SOURCE_NODE_ID", "TARGET_NODE_ID", "EDGE_TYPE_ID", "COUNT_PER_THREAD"],
                    [1, 1, 3, 1, [1]], [2, 3, 3, 2, [loops]], [3, 3, 2, 3, [1]]]
            }]]
        }))
        .unwrap()
    }

    /// The next piece of the trace: its head, a chunk's row, or its tail; None at the end.
    fn piece(&mut self) -> Option<Vec<u8>> {
        let k = self.next;
        self.next += 1;
        let row = |preceding: u64, instrs: u64, first: u64, bits: char| {
            let pad = "A".repeat(self.text - 1);
            format!(",\n[{preceding}, {instrs}, 2, {first}, \"{bits}{pad}\"]").into_bytes()
        };
        Some(match k {
            0 => br#"{"PROCESSES": [["PROCESS_ID", "STRING_DICTIONARY", "TRANSITION_TABLE", "THREAD_DATA"], [7, {},
                [["CURRENT_EDGE_ID", "TRANSITION_CODE", "NEXT_EDGE_IDS"], [1, "", [2]], [2, "0", [2]], [2, "1", [3]]],
                [["THREAD_ID", "TRACE_DATA"], [0, [["PRECEDING_INSTR_COUNT", "INSTR_COUNT", "EDGE_COUNT", "FIRST_EDGE_ID", "EDGE_ID_SEQUENCE"]"#
                .to_vec(),
            // Edges 1 and 2 (a row of the empty code).
            1 => row(0, 1, 1, 'A'),
            // Edge 2 twice (bit 0), then edges 2 and 3 (bit 1: 'g' is 100000).
            k if k < self.chunks => row(1 + 2 * (k - 2), 2, 2, 'A'),
            k if k == self.chunks => row(1 + 2 * (k - 2), 2, 2, 'g'),
            k if k == self.chunks + 1 => b"]]]]]}".to_vec(),
            _ => return None,
        })
    }
}

impl std::io::Read for Generated {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.buf.len() {
            match self.piece() {
                Some(p) => (self.buf, self.at) = (p, 0),
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// `dep dcfg --check` reads a trace as it comes: 64 MiB of chunks decode holding a few of
/// them (those in flight to and from the workers), not the document.
#[test]
fn a_trace_is_checked_without_holding_it() {
    use dep_dcfg_out::dcfg::check::{read_dcfg, read_trace, Report};
    let _turn = peak_alloc::turn();
    let trace = Generated { chunks: 256, text: 256 << 10, next: 0, buf: Vec::new(), at: 0 };
    let mut r = Report::default();
    let procs = read_dcfg(&trace.dcfg()[..], &mut r).unwrap();
    let (checked, peak) = peak_alloc::measure(|| read_trace(trace, &procs, 2, &mut r, None));
    checked.unwrap();
    assert_eq!(r.decoded_edges, 2 * 256, "every chunk decoded");
    eprintln!("{} KiB allocated at the peak for a trace of {} MiB", peak >> 10, (256 * (256 << 10)) >> 20);
    assert!(peak < 8 << 20, "{} KiB allocated at the peak", peak >> 10);
}

/// `dep dcfg --check` holds a DCFG's edges-by-threads table as the executions there are:
/// 2,001 edges of 3,000 threads each, one thread taking each edge, in under 4 MiB (the table
/// whole is 46 MiB of counts).
#[test]
fn a_dcfg_of_many_threads_is_held_as_its_executions() {
    use dep_dcfg_out::dcfg::check::{read_dcfg, Report};
    let _turn = peak_alloc::turn();
    let (nodes, threads) = (2000u64, 3000usize);
    // START -> 3 -> 4 -> ... -> END, node n (one instruction) run once, by thread n % threads.
    let per = |t: usize| {
        let mut v = vec![0u64; threads];
        v[t] = 1;
        serde_json::json!(v)
    };
    let blocks: Vec<_> = (3..3 + nodes).map(|n| serde_json::json!([n, n, 1, 1, 0, 1])).collect();
    let edges: Vec<_> = (2..3 + nodes)
        .map(|n| serde_json::json!([n, if n == 2 { 1 } else { n }, if n == 2 + nodes { 2 } else { n + 1 }, 1, per(n as usize % threads)]))
        .collect();
    let mut instrs = vec![0u64; threads];
    for n in 3..3 + nodes {
        instrs[n as usize % threads] += 1;
    }
    let d = serde_json::to_vec(&serde_json::json!({
        "EDGE_TYPES": [["EDGE_TYPE_ID", "EDGE_TYPE"], [1, "DIRECT_UNCONDITIONAL_BRANCH"]],
        "SPECIAL_NODES": [["NODE_ID", "NODE_NAME"], [1, "START"], [2, "END"]],
        "PROCESSES": [["PROCESS_ID", "PROCESS_DATA"], [7, {
            "INSTR_COUNT": nodes, "INSTR_COUNT_PER_THREAD": instrs,
            "IMAGES": [["IMAGE_ID", "LOAD_ADDR", "SIZE", "IMAGE_DATA"], [1, 0, 0, {
                "BASIC_BLOCKS": std::iter::once(serde_json::json!(["NODE_ID", "ADDR_OFFSET", "SIZE", "NUM_INSTRS", "LAST_INSTR_OFFSET", "COUNT"])).chain(blocks).collect::<Vec<_>>()
            }]],
            "EDGES": std::iter::once(serde_json::json!(["EDGE_ID", "SOURCE_NODE_ID", "TARGET_NODE_ID", "EDGE_TYPE_ID", "COUNT_PER_THREAD"])).chain(edges).collect::<Vec<_>>()
        }]]
    }))
    .unwrap();
    let (procs, peak) = peak_alloc::measure(|| read_dcfg(&d[..], &mut Report::default()).unwrap());
    assert_eq!(procs[0].edges.len() as u64, nodes + 1);
    eprintln!("{} KiB allocated at the peak for a DCFG of {} MiB", peak >> 10, d.len() >> 20);
    assert!(peak < 4 << 20, "{} KiB allocated at the peak", peak >> 10);
}
