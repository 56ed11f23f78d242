//! Naming every block of a recorded profile (function, file and line of each block's first
//! instruction), from a cold symbolizer: the modules are read anew each iteration. On the
//! profile of a Python loop (python3, libc, ld.so and the interpreter's extension modules)
//! when the workspace's release `dep` and its collector are built (`cargo build --release
//! --workspace`).
//!
//! Run with `cargo bench -p dep-dcfg-out --bench symbols`.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use dep_dcfg_out::program::symbols::Symbolizer;
use dep_profile::container::Profile;
use std::path::Path;
use std::time::Duration;

fn python_profile(dir: &Path) -> Result<Profile, String> {
    let dep = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/dep");
    if !dep.exists() {
        return Err(format!("{} is not built", dep.display()));
    }
    // The interpreter itself, not a launcher script that would exec it into a second profile.
    let python = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .map_err(|e| format!("python3: {e}"))?;
    let out = dir.join("python3.dep");
    let st = std::process::Command::new(&dep)
        .args(["record", "-o"])
        .arg(&out)
        .args(["--", &python, "-c", "import json, re\nd={}\nfor i in range(100000): d[i%1000]=d.get(i%1000,0)+i*i\nprint(len(d))"])
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| e.to_string())?;
    if !st.success() {
        return Err(format!("dep record failed: {st}"));
    }
    Profile::open(&out).map_err(|e| e.to_string())
}

fn name_blocks(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let p = match python_profile(dir.path()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("symbols: skipped: {e}");
            return;
        }
    };
    let blocks: Vec<u64> = p.blocks().iter().map(|b| b.addr).collect();
    eprintln!("symbols: {} blocks in {} modules", blocks.len(), p.modules.len());
    let mut g = c.benchmark_group("symbols");
    g.sample_size(10).measurement_time(Duration::from_secs(10)).warm_up_time(Duration::from_secs(1));
    g.throughput(Throughput::Elements(blocks.len() as u64));
    g.bench_function("python3_every_block_place_cold", |b| {
        b.iter(|| {
            let s = Symbolizer::new(&p.modules);
            black_box(blocks.iter().map(|&a| s.place(a).line.unwrap_or(0) as u64).sum::<u64>())
        })
    });
    g.bench_function("python3_every_block_symbol_cold", |b| {
        b.iter(|| {
            let s = Symbolizer::new(&p.modules);
            black_box(blocks.iter().map(|&a| s.symbol(a).len()).sum::<usize>())
        })
    });
    g.finish();
}

criterion_group!(benches, name_blocks);
criterion_main!(benches);
