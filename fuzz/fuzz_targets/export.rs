//! Each exporter on the stream recovered from a simulated, damaged profile: an output or
//! an error, never a panic, a hang or unbounded memory. A DCFG and trace the writer
//! produced must pass the checker.
#![no_main]

use arbitrary::Arbitrary;
use dep_dcfg_out::program::symbols::Symbolizer;
use dep_dcfg_out::{callgrind, dcfg, dcfg::check as dcfg_check, edges as edge_list, parquet, races, wet};
use dep_recover::{stats, Recovery, Source};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Exporter {
    Callgrind { separate_threads: bool, dump_instr: bool },
    Wet { history: Option<u8>, spill: bool },
    Races { potential: bool, json: bool },
    Dcfg,
    Parquet,
    Edges { json: bool, truth: bool },
    Stats { compress: bool },
}

#[derive(Arbitrary, Debug)]
struct Input {
    exporter: Exporter,
    workers: u8,
    profile: dep_fuzz::Input,
}

fuzz_target!(|input: Input| {
    let Some(mut p) = dep_fuzz::open(&input.profile.build()) else { return };
    // Module paths never name real files (a damaged record could).
    for m in &mut p.modules {
        m.path = format!("/nonexistent/dep-fuzz/{:x}", m.base);
    }
    let rec = Recovery::new(&p, 1 + input.workers as usize % 3);
    let syms = Symbolizer::new(&p.modules);
    match input.exporter {
        Exporter::Callgrind { separate_threads, dump_instr } => {
            let out = dep_fuzz::scratch("callgrind.out");
            let _ = callgrind::write_profile(&rec, &syms, &callgrind::Options { separate_threads, dump_instr }, &out);
        }
        Exporter::Wet { history, spill } => {
            let opts = wet::Options { history: history.map(|h| h as usize), memory: if spill { 256 } else { 1 << 24 } };
            let _ = wet::write(&rec, &syms, &opts, &mut std::io::sink(), Some(&mut std::io::sink()));
        }
        Exporter::Races { potential, json } => {
            if let Ok(a) = races::analyse(&rec, &syms, None) {
                let mut r = races::report::Report::new(&a, &syms);
                r.potential = potential;
                let _ = r.write(json, &mut std::io::sink());
            }
        }
        Exporter::Dcfg => {
            let mut ids = dcfg::Ids::default();
            let Ok(proc_) = dcfg::Process::build(&rec, &mut ids, &|_| {}) else { return };
            let procs = [proc_];
            let (mut d, mut t) = (Vec::new(), Vec::new());
            if dcfg::write_dcfg(&mut d, &procs, std::slice::from_ref(&syms)).is_err() || dcfg::write_trace(&mut t, &procs, &|_| {}).is_err()
            {
                return;
            }
            let mut report = dcfg_check::Report::default();
            let read = dcfg_check::read_dcfg(&d[..], &mut report).expect("the DCFG written passes the check");
            dcfg_check::read_trace(&t[..], &read, 2, &mut report, None).expect("the trace written passes the check");
        }
        Exporter::Parquet => {
            let dir = dep_fuzz::scratch("parquet");
            let _ = std::fs::remove_dir_all(&dir);
            let _ = parquet::write(&rec, Source::Dep, &dir, &syms, &|_| {});
            let _ = std::fs::remove_dir_all(&dir);
        }
        Exporter::Edges { json, truth } => {
            let source = if truth { Source::Truth } else { Source::Blocks };
            if let Ok(threads) = edge_list::count(&rec, source, &|_| {}) {
                if json {
                    let _ = edge_list::to_json(&threads, &syms);
                } else {
                    let _ = edge_list::write_text(&mut std::io::sink(), &threads, &syms);
                }
            }
        }
        Exporter::Stats { compress } => {
            if let Ok(s) = stats::compute(&rec, Source::Dep, compress) {
                let _ = stats::render_text(&s);
                let _ = s.to_json();
            }
        }
    }
});
