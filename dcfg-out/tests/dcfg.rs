//! `dep dcfg` on simulated profiles (real control flow, signals, faults, many chunks,
//! several threads), without DynamoRIO: the DCFG and trace pass the checker, the trace
//! decodes to exactly the recovered block sequence, and the checker rejects damaged files.

use dep_dcfg_out::dcfg::check::{read_dcfg, read_trace, Blocks, Report};
use dep_dcfg_out::dcfg::{write_dcfg, write_trace, Ids, Process};
use dep_dcfg_out::program::symbols::Symbolizer;
use dep_profile::container::Profile;
use dep_profile::simulate::{program_path, random_program, write_profile, Rng};
use dep_profile::Machine;
use dep_recover::{Format, Recovery, Renderer, Source};
use serde_json::Value;

fn profile(seed: u64, threads: usize) -> (tempfile::TempDir, Profile) {
    let mut rng = Rng::new(seed);
    let functions = 4 + rng.below(6) as usize;
    let mut prog = random_program(&mut rng, functions);
    let paths: Vec<_> = (0..threads).map(|_| program_path(&mut rng, &mut prog, 4000, true)).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sim.dep");
    write_profile(std::fs::File::create(&path).unwrap(), Machine::x86_64(2696), &prog.code, &paths, seed).unwrap();
    let p = Profile::open(&path).unwrap();
    (dir, p)
}

/// The DCFG and trace of a profile, as JSON.
fn files(p: &Profile, workers: usize) -> (Value, Value) {
    let rec = Recovery::new(p, workers);
    let mut ids = Ids::default();
    let procs = vec![Process::build(&rec, &mut ids, &|_| {}).unwrap()];
    let (mut d, mut t) = (Vec::new(), Vec::new());
    write_dcfg(&mut d, &procs, &[Symbolizer::new(&p.modules)]).unwrap();
    write_trace(&mut t, &procs, &|_| {}).unwrap();
    (serde_json::from_slice(&d).unwrap(), serde_json::from_slice(&t).unwrap())
}

/// The blocks the pair decodes to, by `workers` workers, as `<thread> <pc> <count>` lines.
fn check_with(d: &Value, t: &Value, workers: usize) -> Result<String, String> {
    let mut r = Report::default();
    let procs = read_dcfg(&serde_json::to_vec(d).unwrap()[..], &mut r).map_err(|e| e.to_string())?;
    let mut blocks = Vec::new();
    let render = |out: &mut Vec<u8>, _pid: u64, thread: u64, addr: u64, n: u64| out.extend(format!("{thread} {addr:#x} {n}\n").bytes());
    let sink = Blocks { render: &render, emit: &mut |text: &[u8]| blocks.extend_from_slice(text) };
    read_trace(&serde_json::to_vec(t).unwrap()[..], &procs, workers, &mut r, Some(sink)).map_err(|e| e.to_string())?;
    Ok(String::from_utf8(blocks).unwrap())
}

fn check(d: &Value, t: &Value) -> Result<String, String> {
    check_with(d, t, 2)
}

/// `v` as another producer could write it: every integer a hex string, and the columns of
/// each table reversed (in a trace, of the chunks' and transitions' tables only: the others
/// must give what decodes a thread before its chunks).
fn as_another_producer(v: &Value, trace: bool) -> Value {
    match v {
        Value::Number(n) => n.as_u64().map_or_else(|| v.clone(), |n| Value::from(format!("{n:#x}"))),
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), as_another_producer(v, trace))).collect()),
        Value::Array(rows) => {
            let mut rows: Vec<Value> = rows.iter().map(|r| as_another_producer(r, trace)).collect();
            let header = rows.first().and_then(Value::as_array).filter(|h| {
                !h.is_empty() && h.iter().all(|c| c.as_str().is_some_and(|c| c.chars().all(|c| c.is_ascii_uppercase() || c == '_')))
            });
            let free = |h: &Vec<Value>| !trace || h.iter().any(|c| c == "EDGE_ID_SEQUENCE" || c == "TRANSITION_CODE");
            if let Some(width) = header.filter(|h| free(h)).map(Vec::len) {
                if rows.iter().all(|r| r.as_array().is_some_and(|r| r.len() == width)) {
                    for r in &mut rows {
                        r.as_array_mut().unwrap().reverse();
                    }
                }
            }
            Value::Array(rows)
        }
        _ => v.clone(),
    }
}

#[test]
fn traces_decode_to_the_recovered_blocks() {
    let mut used = std::collections::HashSet::new();
    for seed in 0..8u64 {
        let (_dir, p) = profile(seed, 1 + (seed % 3) as usize);
        let mut want = Renderer::new(Format::Blocks, Vec::new());
        Recovery::new(&p, 1).events(Source::Dep).run(&mut want).unwrap();
        let want = String::from_utf8(want.into_inner().unwrap()).unwrap();
        // The files do not depend on how many workers made them.
        let (d, t) = files(&p, 2);
        assert_eq!(files(&p, 1), (d.clone(), t.clone()), "seed {seed}: one worker and two differ");
        let got = check(&d, &t).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(got, want, "seed {seed}: decoded trace differs from the recovered blocks");
        // Chunks decoded in parallel are judged and written in order, however many decode.
        for workers in [1, 3] {
            assert!(check_with(&d, &t, workers).as_ref() == Ok(&want), "seed {seed}: {workers} workers decode otherwise");
        }
        // Tables are read by their headers, integers as numbers or strings.
        let (d2, t2) = (as_another_producer(&d, false), as_another_producer(&t, true));
        assert!(d2["PROCESSES"][0][0] == "PROCESS_DATA" && t2["PROCESSES"][1][3][1][1][0][0] == "EDGE_ID_SEQUENCE");
        assert!(check(&d2, &t2).as_ref() == Ok(&want), "seed {seed}: the pair written otherwise decodes otherwise");
        // Signals and faults are in there (context changes), calls and returns.
        let types: Vec<&str> = d["EDGE_TYPES"].as_array().unwrap()[1..].iter().map(|r| r[1].as_str().unwrap()).collect();
        used.extend(
            d["PROCESSES"][1][1]["EDGES"].as_array().unwrap()[1..].iter().map(|e| types[e[3].as_u64().unwrap() as usize - 1].to_string()),
        );
    }
    for ty in
        ["ENTRY", "EXIT", "CONTEXT_CHANGE", "CONTEXT_CHANGE_RETURN", "RETURN", "DIRECT_CALL", "CALL_BYPASS", "DIRECT_CONDITIONAL_BRANCH"]
    {
        assert!(used.contains(ty), "no {ty} edge in {used:?}");
    }
}

#[test]
fn damaged_files_are_rejected() {
    let (_dir, p) = profile(3, 2);
    let (d, t) = files(&p, 2);
    check(&d, &t).unwrap();
    // A node count one off.
    let mut bad = d.clone();
    let blocks = &mut bad["PROCESSES"][1][1]["IMAGES"][1][3]["BASIC_BLOCKS"][1][5];
    *blocks = Value::from(blocks.as_u64().unwrap() + 1);
    assert!(check(&bad, &t).unwrap_err().contains("has COUNT"), "a wrong COUNT passed");
    // An edge count one off.
    let mut bad = d.clone();
    let c = &mut bad["PROCESSES"][1][1]["EDGES"][1][4][0];
    *c = Value::from(c.as_u64().unwrap() + 1);
    assert!(check(&bad, &t).is_err(), "a wrong edge count passed");
    // A dominator that is not the entry's.
    let mut bad = d.clone();
    let routines = bad["PROCESSES"][1][1]["IMAGES"][1][3]["ROUTINES"].as_array_mut().unwrap();
    let r = routines.iter_mut().skip(1).find(|r| r[2].as_array().unwrap().len() > 2).expect("a routine of two nodes");
    let entry = r[0].clone();
    let nodes = r[2].as_array_mut().unwrap();
    let other = nodes.iter().skip(1).find(|n| n[0] != entry).unwrap()[0].clone();
    for n in nodes.iter_mut().skip(1) {
        if n[0] == entry {
            n[1] = other.clone();
        }
    }
    assert!(check(&bad, &t).is_err(), "an entry dominated by another node passed");
    // A trace character changed: the decoded edges no longer fit the graph or the counts.
    let mut bad = t.clone();
    let rows = bad["PROCESSES"][1][3][1][1].as_array_mut().unwrap();
    let seq = rows.iter_mut().skip(1).find(|r| r[4].as_str().unwrap().len() > 4).unwrap();
    let s: String = seq[4]
        .as_str()
        .unwrap()
        .chars()
        .map(|c| {
            if c == 'A' {
                'B'
            } else if c == 'B' {
                'A'
            } else {
                c
            }
        })
        .collect();
    seq[4] = Value::from(s);
    assert!(check(&d, &bad).is_err(), "a damaged edge sequence passed");
}
