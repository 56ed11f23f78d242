//! Throughput of recovery, in memory references per second, on simulated profiles: the
//! recovery loop alone (the null `Counts` sink), with text rendering to `io::sink()`, the
//! statistics sink, and chunk-parallel `ordered`/`rendered` with 1 and 2 workers; and on profiles
//! recorded from real programs (gzip compressing 4 MB of text, a Python loop) when the
//! workspace's release `dep` and its collector are built (`cargo build --release
//! --workspace`): the null sink, and edge counts merged chunk-parallel on 1 and 2 workers;
//! beside them, the alternative a user would otherwise keep, the full trace: BB_pc and
//! Mem_addr (each block's and each reference's address, 8 bytes, as `dep stats` sizes them)
//! in zstd frames, read back on one core. `DEP_BENCH_PROFILES=a.dep:b.dep` adds profiles
//! recorded elsewhere to the recorded group.
//!
//! Run with `cargo bench -p dep-recover --bench recovery` (add `-- --quick` for a fast pass).

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dep_profile::container::Profile;
use dep_profile::simulate::{random_code, write_profile, PathStep, Rng};
use dep_profile::Machine;
use dep_recover::events::{BlockEvent, MemEvent};
use dep_recover::stats::StatsSink;
use dep_recover::{Counts, Format, Recovery, Renderer, Source};
use dep_recover::{RecoverError, Sink};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Writes a profile of `threads` threads, each `blocks` blocks long over `n_code` random
/// blocks, with a chunk hand-off every `chunk` blocks.
fn simulated(path: &Path, seed: u64, n_code: usize, threads: usize, blocks: usize, chunk: usize) -> Profile {
    let mut rng = Rng::new(seed);
    let code = random_code(&mut rng, n_code);
    let paths: Vec<Vec<PathStep>> = (0..threads)
        .map(|_| {
            let mut p = Vec::with_capacity(blocks + blocks / chunk);
            for i in 0..blocks {
                if i > 0 && i % chunk == 0 {
                    p.push(PathStep::Flush);
                }
                p.push(PathStep::Block(rng.below(n_code as u64) as usize));
            }
            p
        })
        .collect();
    write_profile(std::fs::File::create(path).unwrap(), Machine::x86_64(2696), &code, &paths, seed).unwrap();
    Profile::open(path).unwrap()
}

fn counts(rec: &Recovery) -> Counts {
    let mut c = Counts::default();
    rec.events(Source::Dep).run(&mut c).unwrap();
    c
}

fn sequential(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let p = simulated(&dir.path().join("seq.dep"), 11, 500, 1, 800_000, 50_000);
    let rec = Recovery::new(&p, 1);
    let n = counts(&rec);
    let refs = n.reads + n.writes;
    eprintln!("sequential profile: {} blocks, {} references, {} chunks", n.blocks, refs, p.threads[0].chunks.len());
    let mut g = c.benchmark_group("recover");
    g.throughput(Throughput::Elements(refs));
    g.sample_size(10).measurement_time(Duration::from_secs(8)).warm_up_time(Duration::from_secs(1));
    g.bench_function("null_sink", |b| b.iter(|| black_box(counts(&rec))));
    g.bench_function("text_to_io_sink", |b| {
        b.iter(|| {
            let mut r = Renderer::new(Format::Text, std::io::sink());
            rec.events(Source::Dep).run(&mut r).unwrap();
            r.into_inner().unwrap();
        })
    });
    g.bench_function("truth_replay_null_sink", |b| {
        b.iter(|| {
            let mut c = Counts::default();
            rec.events(Source::Truth).run(&mut c).unwrap();
            black_box(c)
        })
    });
    g.bench_function("stats_sink_zstd", |b| {
        b.iter(|| {
            let mut s = StatsSink::new(p.width);
            rec.events(Source::Dep).run(&mut s).unwrap();
            black_box(s.into_stats().unwrap())
        })
    });
    g.finish();
}

fn parallel(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let p = simulated(&dir.path().join("par.dep"), 12, 500, 4, 200_000, 20_000);
    let n = counts(&Recovery::new(&p, 1));
    let refs = n.reads + n.writes;
    let chunks: usize = p.threads.iter().map(|t| t.chunks.len()).sum();
    eprintln!("parallel profile: 4 threads, {} blocks, {} references, {chunks} chunks", n.blocks, refs);
    let mut g = c.benchmark_group("run_ordered");
    g.throughput(Throughput::Elements(refs));
    g.sample_size(10).measurement_time(Duration::from_secs(8)).warm_up_time(Duration::from_secs(1));
    for workers in [1, 2] {
        let rec = Recovery::new(&p, workers);
        g.bench_with_input(BenchmarkId::new("null_sink", workers), &rec, |b, rec| {
            b.iter(|| rec.events(Source::Dep).ordered(|_| Counts::default(), Ok, |_| 0, |_, _| Ok(())).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("text", workers), &rec, |b, rec| {
            b.iter(|| rec.events(Source::Dep).rendered(Format::Text, &mut std::io::sink()).unwrap())
        });
    }
    g.finish();
}

/// Text that compresses like prose: words drawn from a small skewed vocabulary.
fn prose(bytes: usize) -> Vec<u8> {
    let words = ["the", "profile", "of", "a", "memory", "reference", "and", "block", "register", "value", "is", "recovered", "x86"];
    let mut rng = Rng::new(7);
    let mut out = Vec::with_capacity(bytes + 16);
    while out.len() < bytes {
        let w = words[(rng.below(words.len() as u64) * rng.below(words.len() as u64) / words.len() as u64) as usize];
        out.extend_from_slice(w.as_bytes());
        out.push(if rng.below(12) == 0 { b'\n' } else { b' ' });
    }
    out
}

/// Records `argv` with the workspace's `dep record`, or says why it cannot.
fn record(dep: &Path, out: &Path, argv: &[&str]) -> Result<Profile, String> {
    let st = std::process::Command::new(dep)
        .arg("record")
        .arg("-o")
        .arg(out)
        .arg("--")
        .args(argv)
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("running {}: {e}", dep.display()))?;
    if !st.success() {
        return Err(format!("dep record {argv:?} failed: {st}"));
    }
    Profile::open(out).map_err(|e| e.to_string())
}

/// The full trace of a profile: per thread, its BB_pc and Mem_addr streams, each one zstd
/// frame at `dep stats`'s level, as a tracer writing addresses to files would keep them.
#[derive(Default)]
struct FullTrace {
    frames: Vec<Vec<u8>>,
    raw: u64,
}

/// One stream being written: bytes staged for zstd, and its encoder once it has some.
type Staged = (Vec<u8>, Option<zstd::stream::Encoder<'static, Vec<u8>>>);

/// Writes [`FullTrace`]'s streams as the events come: staged a megabyte at a time, so zstd
/// sees large writes.
#[derive(Default)]
struct TraceWriter {
    /// Per thread: (BB_pc, Mem_addr), each its stage and its encoder.
    threads: Vec<[Staged; 2]>,
    raw: u64,
}

/// A stream's encoder, at `dep stats`'s level.
fn encoder() -> zstd::stream::Encoder<'static, Vec<u8>> {
    zstd::stream::Encoder::new(Vec::new(), dep_recover::stats::ZSTD_LEVEL).unwrap()
}

impl TraceWriter {
    fn push(&mut self, thread: u32, which: usize, addr: u64) {
        let t = thread as usize;
        if self.threads.len() <= t {
            self.threads.resize_with(t + 1, Default::default);
        }
        let (stage, enc) = &mut self.threads[t][which];
        stage.extend_from_slice(&addr.to_le_bytes());
        self.raw += 8;
        if stage.len() >= 1 << 20 {
            let e = enc.get_or_insert_with(encoder);
            e.write_all(stage).unwrap();
            stage.clear();
        }
    }

    fn finish(self) -> FullTrace {
        let mut frames = Vec::new();
        for streams in self.threads {
            for (stage, enc) in streams {
                let mut e = enc.unwrap_or_else(encoder);
                e.write_all(&stage).unwrap();
                frames.push(e.finish().unwrap());
            }
        }
        FullTrace { frames, raw: self.raw }
    }
}

impl Sink for TraceWriter {
    type Error = RecoverError;
    fn block(&mut self, b: &BlockEvent) -> Result<bool, RecoverError> {
        self.push(b.thread, 0, b.addr);
        Ok(true)
    }
    fn refs(&mut self, b: &BlockEvent, refs: &[MemEvent]) -> Result<bool, RecoverError> {
        for r in refs {
            self.push(b.thread, 1, r.addr);
        }
        Ok(true)
    }
}

/// Reads every address of `t` back, streaming through a megabyte buffer (the whole trace
/// would not fit in memory for long runs), and sums them so none is skipped.
fn read_full_trace(t: &FullTrace, buf: &mut [u8]) -> u64 {
    let mut sum = 0u64;
    for f in &t.frames {
        let mut d = zstd::stream::Decoder::new(&f[..]).unwrap();
        let mut have = 0usize;
        loop {
            let n = d.read(&mut buf[have..]).unwrap();
            if n == 0 {
                break;
            }
            have += n;
            let whole = have / 8 * 8;
            for w in buf[..whole].chunks_exact(8) {
                sum = sum.wrapping_add(u64::from_le_bytes(w.try_into().unwrap()));
            }
            buf.copy_within(whole..have, 0);
            have -= whole;
        }
    }
    sum
}

fn recorded(c: &mut Criterion) {
    let dep = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/dep");
    if !dep.exists() {
        eprintln!("recorded profiles: skipped, {} is not built (cargo build --release)", dep.display());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text");
    std::fs::write(&text, prose(4 << 20)).unwrap();
    // The interpreter itself, not a launcher script that would exec it into a second profile.
    let python = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let programs: [(&str, Vec<&str>); 2] = [
        ("gzip", vec!["gzip", "-c", text.to_str().unwrap()]),
        ("python3", vec![&python, "-c", "d={}\nfor i in range(300000): d[i%1000]=d.get(i%1000,0)+i*i\nprint(len(d))"]),
    ];
    let mut g = c.benchmark_group("recorded");
    g.sample_size(10).measurement_time(Duration::from_secs(10)).warm_up_time(Duration::from_secs(1));
    let mut profiles: Vec<(String, Profile)> = Vec::new();
    for (name, argv) in programs {
        match record(&dep, &dir.path().join(format!("{name}.dep")), &argv) {
            Ok(p) => profiles.push((name.to_string(), p)),
            Err(e) => eprintln!("recorded profiles: {name} skipped: {e}"),
        }
    }
    for path in std::env::var_os("DEP_BENCH_PROFILES").map(|v| std::env::split_paths(&v).collect::<Vec<PathBuf>>()).unwrap_or_default() {
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        match Profile::open(&path) {
            Ok(p) => profiles.push((name, p)),
            Err(e) => eprintln!("recorded profiles: {} skipped: {e}", path.display()),
        }
    }
    for (name, p) in &profiles {
        let n = counts(&Recovery::new(p, 1));
        let chunks: usize = p.threads.iter().map(|t| t.chunks.len()).sum();
        eprintln!("recorded {name}: {} blocks, {} references, {chunks} chunks", n.blocks, n.reads + n.writes);
        g.throughput(Throughput::Elements(n.reads + n.writes));
        // The interpreted walk on one core, for comparison, then compiled blocks on one and two.
        for (workers, compiled) in [(1, false), (1, true), (2, true)] {
            let rec = Recovery::with_compiled(p, workers, compiled);
            let id = format!("{name}_null_sink{}", if compiled { "" } else { "_interpreted" });
            g.bench_with_input(BenchmarkId::new(id, workers), &rec, |b, rec| {
                b.iter(|| rec.events(Source::Dep).ordered(|_| Counts::default(), Ok, |_| 0, |_, _| Ok(())).unwrap())
            });
        }
        // The full trace a user would keep instead, read back on one core: recovery on one
        // core should be faster.
        let trace = {
            let mut w = TraceWriter::default();
            Recovery::new(p, 1).events(Source::Dep).run(&mut w).unwrap();
            w.finish()
        };
        let zst: usize = trace.frames.iter().map(Vec::len).sum();
        eprintln!(
            "recorded {name}: full trace (BB_pc + Mem_addr) {} MB raw, {} MB in zstd {}",
            trace.raw >> 20,
            zst >> 20,
            dep_recover::stats::ZSTD_LEVEL
        );
        let mut buf = vec![0u8; 1 << 20];
        g.bench_function(BenchmarkId::new(format!("{name}_full_trace_zstd_read"), 1), |b| {
            b.iter(|| black_box(read_full_trace(&trace, &mut buf)))
        });
        // Chunk summaries merged in order per thread, on one and two cores (`dep edges`, a
        // stateful summary on this driver, is measured by the suite).
        for workers in [1, 2] {
            let rec = Recovery::new(p, workers);
            g.bench_with_input(BenchmarkId::new(format!("{name}_merged"), workers), &rec, |b, rec| {
                b.iter(|| black_box(rec.events(Source::Dep).merged(|_| Counts::default()).unwrap().len()))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, sequential, parallel, recorded);
criterion_main!(benches);
