//! `dep export umt`: the indexed binary trace of ../shared/specs/umt-binary-trace-format.md,
//! adapted to Linux and to what a profile holds (the README's "UMT traces" section lists
//! what is exact, unknown and left out; trace.xml repeats it for the reader of a trace).
//!
//! Two passes over the chunks, each in parallel: the first counts each thread's records
//! and bytes per turn (the turns the sync records cut, [`layout`]), which fixes every
//! record's ID and place; the second writes each chunk's records at their places. Then the
//! small tables. [`reader`] maps a trace back and checks it.

pub mod decoded;
pub mod exec;
pub mod layout;
pub mod reader;
pub mod registers;
mod tables;

use decoded::{Builder, Origin, Row, Shape};
use dep_profile::container::ModuleEventKind;
use dep_recover::{RecoverError, Recovery, Source, Turns};
use exec::{ChunkExec, Count, Rows};
use layout::{ExecFiles, Layout, Place, ThreadTurns};
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

/// What can go wrong writing a trace.
#[derive(Debug, thiserror::Error)]
pub enum UmtError {
    #[error(transparent)]
    Recover(#[from] RecoverError),
    #[error("cannot create {path}: {err}")]
    Create { path: PathBuf, err: io::Error },
    #[error("writing {path}: {err}")]
    Write { path: PathBuf, err: io::Error },
    /// The two passes disagree (a bug, reported rather than written).
    #[error("internal error: {0}")]
    Internal(&'static str),
}

/// What an export wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub records: u64,
    pub threads: usize,
    /// Instruction rows, and those of them for executions with fewer or other references.
    pub rows: usize,
    pub variants: usize,
    pub address_ranges: u64,
    /// Blocks whose code the profile's block table lacks: left out (flag 0x02 after them).
    pub unknown_blocks: u64,
}

/// What the counting pass learns from a chunk.
struct Counted {
    count: Count,
    variants: HashMap<(u32, Shape), u16>,
    unknown_blocks: u64,
}

/// The row of every instruction in the block table (one per distinct address and bytes).
fn rows(rec: &Recovery) -> Rows {
    let p = rec.profile;
    let mut loads: Vec<(u64, u64, i32)> = Vec::new();
    for m in p.modules.iter().filter(|m| m.event == ModuleEventKind::Load) {
        loads.push((m.base, m.base.saturating_add(m.size), loads.len() as i32));
    }
    let module_of = |pc: u64| loads.iter().rev().find(|&&(b, e, _)| b <= pc && pc < e).map_or(-1, |m| m.2);
    // Each distinct instruction once (by address and bytes), then their rows built on
    // every worker.
    let mut unique: Vec<(&dep_profile::semantics::Insn, Vec<u8>)> = Vec::new();
    let mut index: rustc_hash::FxHashMap<(u64, Vec<u8>), u32> = Default::default();
    let mut block_rows = Vec::with_capacity(rec.plans.len());
    let mut of_block = Vec::new();
    for (id, br) in p.blocks().iter().enumerate() {
        let Some(plan) = rec.plans.get_plan(id as u32) else {
            block_rows.push(None);
            continue;
        };
        let code = p.block_entry(br).code;
        block_rows.push(Some((of_block.len() as u32, plan.insns.len() as u32)));
        for insn in &plan.insns {
            let from = insn.pc.wrapping_sub(plan.addr) as usize;
            let bytes = code.get(from..from.saturating_add(insn.len as usize)).unwrap_or(&[]).to_vec();
            let next = unique.len() as u32;
            let row = *index.entry((insn.pc, bytes)).or_insert_with_key(|k| {
                unique.push((insn, k.1.clone()));
                next
            });
            of_block.push(row);
        }
    }
    drop(index);
    let shapes: Vec<Shape> = unique.iter().map(|(insn, _)| decoded::shape(insn)).collect();
    let per = unique.len().div_ceil(rec.workers().max(1)).max(1);
    let built: Vec<Vec<Row>> = std::thread::scope(|s| {
        let parts: Vec<_> = unique
            .chunks(per)
            .zip(shapes.chunks(per))
            .map(|(part, full)| {
                s.spawn(move || {
                    let mut b = Builder::default();
                    part.iter()
                        .zip(full)
                        .map(|((insn, code), full)| b.row(&Origin::of(insn, code, module_of(insn.pc), full), None))
                        .collect::<Vec<Row>>()
                })
            })
            .collect();
        parts.into_iter().map(|h| h.join().expect("a row builder panicked")).collect()
    });
    let rows: Vec<Row> = built.into_iter().flatten().collect();
    let blocks = (0..block_rows.len()).map(|_| Default::default()).collect();
    Rows { rows, shapes, block_rows, of_block, variants: HashMap::new(), blocks }
}

/// Writes the trace of `rec` into directory `dir` (created if missing).
pub fn export(rec: &Recovery, dir: &Path, progress: &(dyn Fn(u64) + Sync)) -> Result<Summary, UmtError> {
    std::fs::create_dir_all(dir).map_err(|err| UmtError::Create { path: dir.to_path_buf(), err })?;
    let open = |name: &str| -> Result<(PathBuf, std::fs::File), UmtError> {
        let path = dir.join(name);
        let f = std::fs::File::create(&path).map_err(|err| UmtError::Create { path: path.clone(), err })?;
        Ok((path, f))
    };
    let files = ExecFiles { vtable: open("exec.vtable")?, offsets: open("exec.offsets")?, prev_next: open("exec.prev_next.column")? };
    let p = rec.profile;
    let threads = &p.threads;
    let app_end = p.end.is_some() && !threads.is_empty();
    let mut rows = rows(rec);

    // Pass 1: records and bytes per chunk, and where turns start.
    let position = |t: u32, seq: u32| threads[t as usize].chunks.binary_search_by_key(&seq, |c| c.seq).unwrap_or(0);
    let mut counted: Vec<Vec<Option<Count>>> = threads.iter().map(|t| (0..t.chunks.len()).map(|_| None).collect()).collect();
    let mut variants: HashMap<(u32, Shape), u16> = HashMap::new();
    let mut pages: rustc_hash::FxHashSet<u64> = Default::default();
    let mut unknown_blocks = 0;
    let rows_ref = &rows;
    rec.events(Source::Dep).progress(progress).unordered(
        |c| ChunkExec::new(rows_ref, c.thread, app_end, Count::default(), true),
        |s| Ok(Counted { count: s.out, variants: s.variants, unknown_blocks: s.unknown_blocks }),
        |c, k: Counted| {
            counted[c.thread as usize][position(c.thread, c.seq)] = Some(k.count);
            variants.extend(k.variants);
            unknown_blocks += k.unknown_blocks;
            Ok(())
        },
    )?;

    // Rows for the executions that made other references than their instruction's.
    let mut keys: Vec<(u32, Shape)> = variants.into_keys().collect();
    keys.sort_by(|a, b| {
        (a.0, a.1.iter().map(|s| (s.0 as u8, s.1)).collect::<Vec<_>>()).cmp(&(b.0, b.1.iter().map(|s| (s.0 as u8, s.1)).collect()))
    });
    let mut builder = Builder::default();
    let nvariants = keys.len();
    for (base, shape) in keys {
        let row = builder.row(&rows.origin(base), Some(&shape));
        let id = rows.rows.len() as u32;
        rows.rows.push(row);
        rows.shapes.push(shape.clone());
        rows.variants.insert((base, shape), id);
    }

    // Each thread's turns, and from them every record's place.
    let mut turns = Vec::with_capacity(threads.len());
    let mut starts: Vec<Vec<(u64, u64)>> = Vec::with_capacity(threads.len());
    for (t, info) in threads.iter().enumerate() {
        let mut tt = ThreadTurns { starts: vec![(0, 0, Turns::first_turn(info))], records: 0, bytes: 0 };
        let mut mine = Vec::with_capacity(info.chunks.len());
        for c in counted[t].iter() {
            mine.push((tt.records, tt.bytes));
            if let Some(c) = c {
                tt.starts.extend(c.cuts.iter().map(|&(r, b, key)| (tt.records + r, tt.bytes + b, key)));
                tt.records += c.records;
                tt.bytes += c.bytes;
            }
        }
        if app_end && t == 0 {
            tt.starts.push((tt.records, tt.bytes, u64::MAX));
            tt.records += 1;
            tt.bytes += exec::END_LEN as u64;
        }
        starts.push(mine);
        turns.push(tt);
    }
    drop(counted);
    let firsts: Vec<u64> = turns.iter().map(|t| t.starts[0].2).collect();
    let layout = Layout::new(&turns, &firsts);

    // Pass 2: every chunk's records at their places.
    let rows_ref = &rows;
    let (files_ref, layout_ref, starts_ref) = (&files, &layout, &starts);
    rec.events(Source::Dep).progress(progress).unordered(
        |c| {
            let k = position(c.thread, c.seq);
            let (r, b) = starts_ref[c.thread as usize].get(k).copied().unwrap_or((0, 0));
            let place = Place::new(files_ref, layout_ref, c.thread as usize, r, b);
            ChunkExec::new(rows_ref, c.thread, app_end, place, false)
        },
        |mut s| {
            s.out.flush()?;
            Ok((s.out.next(), s.pages.map(|p| p.set.into_iter().collect::<Vec<u64>>()).unwrap_or_default()))
        },
        |c, (end, mine)| {
            // Each chunk ends where the next begins: the passes saw the same records.
            let (t, k) = (c.thread as usize, position(c.thread, c.seq));
            let want = starts[t].get(k + 1).map_or(turns[t].records - (app_end && t == 0) as u64, |s| s.0);
            if end != want {
                return Err(UmtError::Internal("the writing pass made other records than the counting pass"));
            }
            pages.extend(mine);
            Ok(())
        },
    )?;
    if app_end {
        let (r, b) = (turns[0].records - 1, turns[0].bytes - exec::END_LEN as u64);
        let mut place = Place::new(&files, &layout, 0, r, b);
        let status = p.end.as_ref().map_or(0, |e| e.exit_status);
        exec::Out::record(&mut place, exec::END_LEN, &mut |b| {
            b[4] = exec::APP_END;
            b[5] = exec::WIDE;
            b[6..10].copy_from_slice(&status.to_le_bytes());
        })?;
        place.flush()?;
    }
    files.close(&layout)?;

    // The tables.
    tables::instructions(dir, &rows.rows)?;
    let mut mods = Vec::new();
    for m in p.modules.iter() {
        match m.event {
            ModuleEventKind::Load => mods.push(tables::ModuleRow {
                load: 0,
                unload: None,
                start: m.base,
                end: m.base.saturating_add(m.size.max(1) - 1),
                path: &m.path,
            }),
            ModuleEventKind::Unload => {
                if let Some(r) = mods.iter_mut().rev().find(|r| r.start == m.base && r.unload.is_none()) {
                    r.unload = Some(layout.records);
                }
            }
        }
    }
    tables::modules(dir, &mods)?;
    let trows: Vec<tables::ThreadRow> = threads
        .iter()
        .enumerate()
        .map(|(t, info)| {
            let n = layout.counts[t];
            tables::ThreadRow {
                tid: info.tid,
                tls: info.spawn.map_or(0, |s| s.tls),
                first: layout.eid(t, 0),
                last: n.checked_sub(1).and_then(|l| layout.eid(t, l)),
                records: n,
            }
        })
        .collect();
    tables::threads(dir, &trows)?;
    let mut pages: Vec<u64> = pages.into_iter().collect();
    pages.sort_unstable();
    let address_ranges = tables::address_space(dir, &pages)?;
    tables::fixed(dir)?;
    tables::trace_xml(dir, &tables::About { profile: p, records: layout.records })?;
    Ok(Summary {
        records: layout.records,
        threads: threads.len(),
        rows: rows.rows.len(),
        variants: nvariants,
        address_ranges,
        unknown_blocks,
    })
}
