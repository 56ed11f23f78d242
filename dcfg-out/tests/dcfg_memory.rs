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
