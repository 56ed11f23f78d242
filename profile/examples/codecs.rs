//! Which compressor the writer should use: replays a real profile's DEP_c and DEP_m
//! through zstd at several levels and lz4, and prints throughput and ratio.
//!
//! `cargo run --release -p dep-profile --example codecs -- PROFILE [MAX_CHUNKS]`

use dep_profile::container::{Profile, Section};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: codecs PROFILE [MAX_CHUNKS]");
        std::process::exit(2);
    };
    let max: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(40);
    let p = Profile::open(path).unwrap_or_else(|e| {
        eprintln!("codecs: {e}");
        std::process::exit(1)
    });
    for s in [Section::Tags, Section::Values] {
        let chunks: Vec<Vec<u8>> =
            p.threads.iter().flat_map(|t| t.chunks.iter()).take(max).map(|c| p.chunk(c).unwrap().decompress(s).unwrap()).collect();
        let raw: usize = chunks.iter().map(Vec::len).sum();
        println!("{} ({} chunks, {:.1} MB raw)", s.name(), chunks.len(), raw as f64 / 1e6);
        println!("  {:10} {:>9} {:>12} {:>12}", "codec", "ratio", "compress", "decompress");
        let run = |name: &str, comp: &dyn Fn(&[u8]) -> Vec<u8>, decomp: &dyn Fn(&[u8], usize) -> Vec<u8>| {
            let t = Instant::now();
            let packed: Vec<Vec<u8>> = chunks.iter().map(|c| comp(c)).collect();
            let ct = t.elapsed().as_secs_f64();
            let t = Instant::now();
            for (pk, c) in packed.iter().zip(&chunks) {
                assert_eq!(decomp(pk, c.len()).len(), c.len());
            }
            let dt = t.elapsed().as_secs_f64();
            let size: usize = packed.iter().map(Vec::len).sum();
            println!(
                "  {name:10} {:>8.2}% {:>9.0} MB/s {:>9.0} MB/s",
                100.0 * size as f64 / raw as f64,
                raw as f64 / 1e6 / ct,
                raw as f64 / 1e6 / dt
            );
        };
        for level in [-5, -1, 1, 3, 6] {
            run(&format!("zstd {level}"), &|c| zstd::bulk::compress(c, level).unwrap(), &|pk, n| zstd::bulk::decompress(pk, n).unwrap());
        }
        run("lz4", &|c| lz4_flex::compress(c), &|pk, n| lz4_flex::decompress(pk, n).unwrap());
        if s == Section::Values {
            let pack = |c: &[u8]| {
                let mut v = Vec::new();
                dep_profile::packing::pack(c, 8, &mut v).unwrap();
                v
            };
            let unpack = |pk: &[u8], n: usize| {
                let mut v = Vec::new();
                dep_profile::packing::unpack(pk, 8, n, &mut v).unwrap();
                v
            };
            run("packed", &pack, &unpack);
            for level in [-5, -3, -1, 1, 3] {
                run(&format!("pk+zstd {level}"), &|c| zstd::bulk::compress(&pack(c), level).unwrap(), &|pk, n| {
                    let mut d = zstd::bulk::Decompressor::new().unwrap();
                    let mut mid = Vec::with_capacity(n);
                    d.decompress_to_buffer(pk, &mut mid).unwrap();
                    unpack(&mid, n)
                });
            }
            run("pk+lz4", &|c| lz4_flex::compress(&pack(c)), &|pk, n| unpack(&lz4_flex::decompress(pk, n).unwrap(), n));
        }
    }
}
