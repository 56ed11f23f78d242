//! The two WET text formats.

use super::chunk::{dec, Text, DEC, LINE};
use super::statics::Statics;
use super::store::{Cursor, DepRecord, Part, Reader, Values};
use std::io::{self, Write};
use std::ops::Range;
use std::sync::Arc;

/// A field of the static line: no spaces (a space in a demangled name or a path becomes
/// `_`), `??` when absent.
pub fn field(s: Option<&str>) -> String {
    match s {
        Some(s) if !s.is_empty() => s.chars().map(|c| if c.is_whitespace() { '_' } else { c }).collect(),
        _ => "??".to_string(),
    }
}

/// One piece of the comprehensive format, as the reader hands it to the formatters: the
/// dependences still encoded as the store keeps them (decoding them is most of the
/// reading, so it is done beside the reader, not by it).
enum Piece {
    Count(u64),
    Head(u32),
    Size(u64),
    /// A part of a use port's records, in the job's bytes.
    Deps(Range<usize>),
    /// `n` records of a part from `from` on: the part held in memory (whole, not copied),
    /// or one too long for one job, read in stretches by several formatters at once, so
    /// that none waits on another's long one.
    Stretch {
        part: Arc<Vec<u8>>,
        from: Cursor,
        n: u64,
    },
    Values(u64),
    Value(u64, u64),
    NoValues,
}

/// Pieces handed to one formatter: their encoded dependences in `bytes`.
#[derive(Default)]
struct Job {
    pieces: Vec<Piece>,
    bytes: Vec<u8>,
    /// Lines the pieces make.
    lines: u64,
}

/// Chunks of text each formatter fills in turn.
const BUFFERS: usize = 6;
/// Lines a job holds before it is handed over (one part of a use port may make more).
const JOB_LINES: u64 = 1 << 13;
/// Encoded bytes a job holds before it is handed over.
const JOB_BYTES: usize = 1 << 20;

/// Dependence lines written at once: decoded into an array first, then formatted in a
/// loop of their own, where the chunk and the position stay in registers.
const DEPS_AT_ONCE: usize = 64;

/// The lines of the next `n` records of `part` from `c` on.
#[inline(always)]
fn dep_lines(t: &mut Text, c: &mut Cursor, part: &[u8], mut n: u64) -> io::Result<()> {
    let mut ds = [DepRecord::default(); DEPS_AT_ONCE];
    while n > 0 {
        let mut k = 0;
        c.each(part, n.min(DEPS_AT_ONCE as u64), |d| {
            ds[k] = d;
            k += 1;
            Ok(())
        })?;
        if k == 0 {
            break;
        }
        n -= k as u64;
        let room = t.lines(k)?;
        let mut at = 0;
        for &d in &ds[..k] {
            at += dep_line((&mut room[at..at + LINE]).try_into().expect("room for the lines"), d);
        }
        t.n += at;
    }
    Ok(())
}

/// Writes a dependence line at the start of `line`; answers its length.
#[inline(always)]
fn dep_line(line: &mut [u8; LINE], d: DepRecord) -> usize {
    line[..4].copy_from_slice(b"    ");
    let mut k = 4;
    k += dec((&mut line[k..k + DEC]).try_into().expect("in the line"), d.inst);
    line[k] = b':';
    k += 1;
    k += dec((&mut line[k..k + DEC]).try_into().expect("in the line"), d.dep_id as u64);
    line[k] = b' ';
    k += 1;
    k += dec((&mut line[k..k + DEC]).try_into().expect("in the line"), d.dep_inst);
    line[k] = b'\n';
    k + 1
}

/// Formats one job's pieces.
fn format(job: &Job, st: &Statics, place: &(dyn Fn(u32) -> String + Sync), t: &mut Text) -> io::Result<()> {
    for piece in &job.pieces {
        t.line()?;
        match *piece {
            Piece::Count(n) => {
                t.dec(n);
                t.bytes(b"\n");
            }
            Piece::Head(id) => {
                let s = &st.insns[id as usize];
                t.dec(id as u64);
                t.bytes(b" ");
                t.dec(s.ports as u64);
                t.bytes(b" ");
                t.hex(s.pc);
                t.bytes(b" ");
                t.text(place(id).as_bytes())?;
                t.text(b"\n")?;
            }
            Piece::Size(n) => {
                t.bytes(b"SIZE ");
                t.dec(n);
                t.bytes(b"\n");
            }
            Piece::Deps(ref at) => dep_lines(t, &mut Cursor::default(), &job.bytes[at.clone()], u64::MAX)?,
            Piece::Stretch { ref part, mut from, n } => dep_lines(t, &mut from, part, n)?,
            Piece::Values(n) => {
                t.bytes(b"VALUES ");
                t.dec(n);
                t.bytes(b"\n");
            }
            Piece::Value(inst, v) => {
                t.bytes(b"    ");
                t.dec(inst);
                t.bytes(b":");
                t.hex(v);
                t.bytes(b"\n");
            }
            Piece::NoValues => t.bytes(b"NO VALUES\n"),
        }
    }
    Ok(())
}

/// What a formatter hands the writer: a chunk of text and its length, or the end of a job.
enum Done {
    Text(Vec<u8>, usize),
    End,
}

/// Writes the comprehensive format: `N`, then each executed instruction's block in id
/// order. `place(id)` gives the static line's `file_name function_name line_num`. One
/// thread reads the store in order and hands jobs to `workers` formatters in turn, and
/// this one writes their text in the same turn: each formatter's text waits in a short
/// queue of its own, so memory stays bounded however many lines one job makes.
pub fn comprehensive(
    st: &Statics,
    counts: &[u64],
    totals: &(dyn Fn(u32) -> u64 + Sync),
    reader: Reader,
    place: &(dyn Fn(u32) -> String + Sync),
    workers: usize,
    out: &mut dyn Write,
) -> io::Result<()> {
    use crossbeam::channel::{bounded, Receiver, Sender};
    let workers = workers.max(1);
    let gone = || io::Error::other("the WET formatters stopped");
    let mut jobs: Vec<Sender<Job>> = Vec::new();
    let mut texts: Vec<Receiver<Done>> = Vec::new();
    let mut frees: Vec<Sender<Vec<u8>>> = Vec::new();
    // Jobs go back emptied to be filled again, as chunks of text do: fresh ones would cost
    // a page fault every 4 KiB they are first written.
    let (jobs_back, jobs_free) = bounded::<Job>(workers * 4);
    std::thread::scope(|s| {
        let mut formatters = Vec::with_capacity(workers);
        for _ in 0..workers {
            let (job_tx, job_rx) = bounded::<Job>(2);
            let (done_tx, done_rx) = bounded::<Done>(BUFFERS + 1);
            let (free_tx, free_rx) = bounded::<Vec<u8>>(BUFFERS);
            jobs.push(job_tx);
            texts.push(done_rx);
            frees.push(free_tx);
            let jobs_back = jobs_back.clone();
            formatters.push(s.spawn(move || -> io::Result<()> {
                // A formatter fills its own few chunks over and over: it waits for one to
                // come back once all are made, which bounds how far ahead of the writer
                // it runs.
                let mut made = 1;
                let mut full = |buf: Vec<u8>, n: usize| -> io::Result<Vec<u8>> {
                    done_tx.send(Done::Text(buf, n)).map_err(|_| gone())?;
                    if made < BUFFERS {
                        made += 1;
                        return Ok(Vec::new());
                    }
                    free_rx.recv().map_err(|_| gone())
                };
                let mut t = Text::new(&mut full);
                for mut job in job_rx {
                    format(&job, st, place, &mut t)?;
                    t.flush()?;
                    done_tx.send(Done::End).map_err(|_| gone())?;
                    job.pieces.clear();
                    job.bytes.clear();
                    job.lines = 0;
                    let _ = jobs_back.try_send(job);
                }
                Ok(())
            }));
        }
        drop(jobs_back);
        let producer = s.spawn(move || -> io::Result<()> {
            let mut reader = reader;
            let mut job = Job::default();
            let mut turn = 0usize;
            let mut send = |job: &mut Job| -> io::Result<()> {
                let next = jobs_free.try_recv().unwrap_or_default();
                let full = std::mem::replace(job, next);
                jobs[turn % workers].send(full).map_err(|_| gone())?;
                turn += 1;
                Ok(())
            };
            job.pieces.push(Piece::Count(counts.iter().filter(|&&c| c > 0).count() as u64));
            for (id, s) in st.insns.iter().enumerate() {
                if counts[id] == 0 {
                    continue;
                }
                job.pieces.push(Piece::Head(id as u32));
                job.lines += 1;
                for port in 0..s.ports as u32 {
                    let seg = s.first_seg + port;
                    job.pieces.push(Piece::Size(totals(seg)));
                    reader.dep_parts(seg, &mut |part, count| {
                        if count <= JOB_LINES {
                            job.pieces.push(match part {
                                Part::Read(buf) => {
                                    let at = job.bytes.len();
                                    job.bytes.extend_from_slice(buf);
                                    Piece::Deps(at..job.bytes.len())
                                }
                                Part::Held(held) => Piece::Stretch { part: Arc::new(held), from: Cursor::default(), n: u64::MAX },
                            });
                            job.lines += count;
                            if job.lines >= JOB_LINES || job.bytes.len() >= JOB_BYTES {
                                send(&mut job)?;
                            }
                            return Ok(());
                        }
                        let part = Arc::new(match part {
                            Part::Read(buf) => buf.to_vec(),
                            Part::Held(held) => held,
                        });
                        let mut c = Cursor::default();
                        while !c.done(&part) {
                            let from = c;
                            let n = c.skip(&part, JOB_LINES)?;
                            job.pieces.push(Piece::Stretch { part: part.clone(), from, n });
                            job.lines += n;
                            send(&mut job)?;
                        }
                        Ok(())
                    })?;
                    job.lines += 1;
                    if job.lines >= JOB_LINES || job.bytes.len() >= JOB_BYTES {
                        send(&mut job)?;
                    }
                }
                reader.values(s.value_seg(), &mut |v| {
                    job.pieces.push(match v {
                        Values::Count(0) => Piece::NoValues,
                        Values::Count(n) => Piece::Values(n),
                        Values::Value(inst, v) => Piece::Value(inst, v),
                    });
                    job.lines += 1;
                    if job.lines >= JOB_LINES {
                        send(&mut job)?;
                    }
                    Ok(())
                })?;
                if job.lines >= JOB_LINES {
                    send(&mut job)?;
                }
            }
            send(&mut job)
        });
        // Write in the turn the jobs were handed out; on a write error, stop taking text
        // (which stops the others). A formatter that ends has no job left: the last one's
        // end was its turn's.
        let mut written: io::Result<()> = Ok(());
        'jobs: for turn in 0.. {
            let k = turn % workers;
            loop {
                match texts[k].recv() {
                    Ok(Done::Text(buf, n)) => {
                        written = out.write_all(&buf[..n]);
                        // (Never full: it holds at most the formatter's chunks.)
                        let _ = frees[k].send(buf);
                        if written.is_err() {
                            break 'jobs;
                        }
                    }
                    Ok(Done::End) => break,
                    Err(_) => break 'jobs,
                }
            }
        }
        drop((texts, frees));
        let produced = producer.join().expect("WET reader panicked");
        // Joined here, as the reader is, not left to the scope's end, which waits for the
        // closures only: nothing of a joined thread (its thread-locals) outlives the call.
        let mut formatted = Ok(());
        for f in formatters {
            let r = f.join().expect("WET formatter panicked");
            if formatted.is_ok() {
                formatted = r;
            }
        }
        written?;
        // A formatter's own error (a spilled part that does not decode) before the reader's
        // failure to hand it more, which that error caused.
        formatted?;
        produced
    })
}

/// Writes the limited-history format: `a#b --> x#y`, oldest first.
pub fn history<'a>(ring: impl Iterator<Item = &'a [u64; 4]>, out: &mut dyn Write) -> io::Result<()> {
    let mut full = |buf: Vec<u8>, n: usize| -> io::Result<Vec<u8>> {
        out.write_all(&buf[..n])?;
        Ok(buf)
    };
    let mut t = Text::new(&mut full);
    for &[pc, inst, dpc, dinst] in ring {
        t.line()?;
        t.bytes(b"0x");
        t.hex(pc);
        t.bytes(b"#");
        t.dec(inst);
        t.bytes(b" --> 0x");
        t.hex(dpc);
        t.bytes(b"#");
        t.dec(dinst);
        t.bytes(b"\n");
    }
    t.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wet::chunk::tests::written;
    use crate::wet::chunk::CHUNK;

    #[test]
    fn fields() {
        assert_eq!(field(Some("f(int, char)")), "f(int,_char)");
        assert_eq!(field(None), "??");
        assert_eq!(field(Some("")), "??");
    }

    /// The comprehensive format's lines as Rust's own formatting writes them, at every
    /// number's length, dependences in runs of repeats among them.
    #[test]
    fn comprehensive_lines() {
        use crate::wet::statics::StaticInsn;
        use crate::wet::store::encoded;
        let nums = |k: u64| [0, 9, 10, 99, 100, 12345, (1 << 40) - 1, u64::MAX, k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (k % 64)];
        let insns: Vec<StaticInsn> = (0..9u64)
            .map(|k| StaticInsn { pc: nums(k)[k as usize], version: 0, block: 0, index: 0, ports: k as u16 * 7000, first_seg: 0 })
            .collect();
        let st = Statics::of_insns(insns.clone());
        let place = |id: u32| if id.is_multiple_of(2) { format!("file{id}.c f_{id} {}", id * 17) } else { "?? ?? 0".repeat(30) };
        let (mut job, mut want) = (Job::default(), String::new());
        for k in 0..40_000u64 {
            let v = nums(k);
            let (a, b, c) = (v[k as usize % 9], v[(k as usize + 4) % 9], v[(k as usize + 7) % 9]);
            let id = (k % 9) as u32;
            let line = |s: &mut String, d: &DepRecord| s.push_str(&format!("    {}:{} {}\n", d.inst, d.dep_id, d.dep_inst));
            let piece = match k % 8 {
                0 => {
                    want.push_str(&format!("{a}\n"));
                    Piece::Count(a)
                }
                1 => {
                    want.push_str(&format!("{id} {} {:x} {}\n", insns[id as usize].ports, insns[id as usize].pc, place(id)));
                    Piece::Head(id)
                }
                2 => {
                    want.push_str(&format!("SIZE {a}\n"));
                    Piece::Size(a)
                }
                3 | 7 => {
                    // Increasing instances; a run of repeated steps, then others.
                    let (start, step) = (a % (1 << 40), 1 + b % 5);
                    let recs: Vec<DepRecord> = (0..1 + k % 13)
                        .map(|j| DepRecord {
                            inst: start + j * step,
                            dep_id: if j < 6 { c as u32 } else { (c as u32).wrapping_add(j as u32) },
                            dep_inst: c.wrapping_add(j * 3),
                        })
                        .collect();
                    recs.iter().for_each(|d| line(&mut want, d));
                    let bytes = encoded(&recs);
                    if k % 8 == 3 {
                        let at = job.bytes.len();
                        job.bytes.extend_from_slice(&bytes);
                        Piece::Deps(at..job.bytes.len())
                    } else if k % 16 == 7 {
                        Piece::Stretch { part: Arc::new(bytes), from: Cursor::default(), n: u64::MAX }
                    } else {
                        // In stretches of a few records, the last one the rest.
                        let (part, mut c) = (Arc::new(bytes), Cursor::default());
                        let from = c;
                        let n = c.skip(&part, k % 5).unwrap();
                        job.pieces.push(Piece::Stretch { part: part.clone(), from, n });
                        Piece::Stretch { part, from: c, n: u64::MAX }
                    }
                }
                4 => {
                    want.push_str(&format!("VALUES {a}\n"));
                    Piece::Values(a)
                }
                5 => {
                    want.push_str(&format!("    {a}:{b:x}\n"));
                    Piece::Value(a, b)
                }
                _ => {
                    want.push_str("NO VALUES\n");
                    Piece::NoValues
                }
            };
            job.pieces.push(piece);
        }
        let got = written(|t| format(&job, &st, &place, t));
        assert!(got.len() > 4 * CHUNK);
        assert_eq!(got, want);
    }

    /// The whole comprehensive trace is the same from a store held in memory, spilled in
    /// runs, or both, with any number of formatters; each port's records are Rust's own
    /// formatting of what went in.
    #[test]
    fn comprehensive_trace_from_any_store() {
        use crate::wet::shadow::pack;
        use crate::wet::statics::StaticInsn;
        use crate::wet::store::Store;
        // Six instructions of 0-2 ports; instruction 3 never runs.
        let ports = [1u16, 2, 0, 1, 2, 1];
        let mut first = 0;
        let insns: Vec<StaticInsn> = ports
            .iter()
            .enumerate()
            .map(|(k, &p)| {
                let s = StaticInsn { pc: 0x1000 + k as u64 * 4, version: 0, block: 0, index: 0, ports: p, first_seg: first };
                first += p as u32 + 1;
                s
            })
            .collect();
        let st = Statics::of_insns(insns.clone());
        let counts = [5u64, 9, 1, 0, 200_000, 3];
        let place = |id: u32| format!("f.c f{id} {id}");
        let fill = |budget: usize| {
            let mut s = Store::new(first as usize, budget);
            for inst in 0..200_000u64 {
                // Instruction 4's first port depends on instruction 1's instances in a run of
                // repeats, its second on instruction 0 without; instruction 5 has values.
                s.dep(insns[4].first_seg, inst, pack(1, inst * 2)).unwrap();
                if inst % 3 == 0 {
                    s.dep(insns[4].first_seg + 1, inst, pack(0, inst * inst % 977)).unwrap();
                }
                if inst < 3 {
                    s.value(insns[5].value_seg(), 2 - inst, inst * 0x10).unwrap();
                    s.dep(insns[5].first_seg, inst, pack(4, inst)).unwrap();
                }
                if inst < 9 {
                    s.dep(insns[1].first_seg + 1, inst, pack(1, inst)).unwrap();
                }
            }
            s
        };
        // What each instruction's lines are, from the records that went in.
        let mut want = String::from("5\n");
        for (id, s) in insns.iter().enumerate() {
            if counts[id] == 0 {
                continue;
            }
            want.push_str(&format!("{id} {} {:x} {}\n", s.ports, s.pc, place(id as u32)));
            let deps: Vec<Vec<(u64, u32, u64)>> = match id {
                1 => vec![vec![], (0..9).map(|i| (i, 1, i)).collect()],
                4 => vec![
                    (0..200_000).map(|i| (i, 1, i * 2)).collect(),
                    (0..200_000).filter(|i| i % 3 == 0).map(|i| (i, 0, i * i % 977)).collect(),
                ],
                5 => vec![(0..3).map(|i| (i, 4, i)).collect()],
                _ => vec![vec![]; s.ports as usize],
            };
            for port in deps {
                want.push_str(&format!("SIZE {}\n", port.len()));
                for (i, d, di) in port {
                    want.push_str(&format!("    {i}:{d} {di}\n"));
                }
            }
            if id == 5 {
                want.push_str("VALUES 3\n    0:20\n    1:10\n    2:0\n");
            } else {
                want.push_str("NO VALUES\n");
            }
        }
        for budget in [1 << 30, 1 << 16, 256] {
            for workers in [1, 2, 3] {
                let store = fill(budget);
                assert_eq!(budget == 256, store.runs() > 1000, "budget {budget}: {} runs", store.runs());
                let totals: Vec<u64> = (0..first).map(|s| store.total(s)).collect();
                let mut out = Vec::new();
                comprehensive(&st, &counts, &|s| totals[s as usize], store.into_reader(), &place, workers, &mut out).unwrap();
                assert!(String::from_utf8(out).unwrap() == want, "budget {budget}, {workers} formatters");
            }
        }
    }

    /// The history format as Rust's own formatting writes it, at every number's length.
    #[test]
    fn history_lines() {
        let ring: Vec<[u64; 4]> = (0..3000u64)
            .map(|k| {
                let v = [0, 9, 10, 99, 100, 12345, u64::MAX, k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (k % 64)];
                [v[k as usize % 8], v[(k as usize + 3) % 8], v[(k as usize + 5) % 8], v[(k as usize + 6) % 8]]
            })
            .collect();
        let want: String = ring.iter().map(|[a, b, x, y]| format!("{a:#x}#{b} --> {x:#x}#{y}\n")).collect();
        let mut out = Vec::new();
        history(ring.iter(), &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }
}
