//! The two WET text formats.

use super::statics::Statics;
use super::store::{DepRecord, Reader};
use std::io::{self, Write};

/// Appends `v` in decimal.
#[inline]
fn dec(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// Appends `v` in lowercase hexadecimal, no prefix.
#[inline]
fn hex(out: &mut Vec<u8>, v: u64) {
    let digits = (64 - v.leading_zeros()).div_ceil(4).max(1);
    for k in (0..digits).rev() {
        out.push(b"0123456789abcdef"[(v >> (k * 4) & 15) as usize]);
    }
}

/// A field of the static line: no spaces (a space in a demangled name or a path becomes
/// `_`), `??` when absent.
pub fn field(s: Option<&str>) -> String {
    match s {
        Some(s) if !s.is_empty() => s.chars().map(|c| if c.is_whitespace() { '_' } else { c }).collect(),
        _ => "??".to_string(),
    }
}

/// One piece of the comprehensive format, as the reader hands it to the formatters.
enum Item {
    Count(u64),
    Head(u32),
    Size(u64),
    Dep(DepRecord),
    Values(u64),
    Value(u64, u64),
    NoValues,
}

/// Items a formatter takes at once.
const BATCH: usize = 1 << 15;

fn format(items: &[Item], st: &Statics, place: &(dyn Fn(u32) -> String + Sync), buf: &mut Vec<u8>) {
    for item in items {
        match *item {
            Item::Count(n) => {
                dec(buf, n);
                buf.push(b'\n');
            }
            Item::Head(id) => {
                let s = &st.insns[id as usize];
                dec(buf, id as u64);
                buf.push(b' ');
                dec(buf, s.ports as u64);
                buf.push(b' ');
                hex(buf, s.pc);
                buf.push(b' ');
                buf.extend_from_slice(place(id).as_bytes());
                buf.push(b'\n');
            }
            Item::Size(n) => {
                buf.extend_from_slice(b"SIZE ");
                dec(buf, n);
                buf.push(b'\n');
            }
            Item::Dep(d) => {
                buf.extend_from_slice(b"    ");
                dec(buf, d.inst);
                buf.push(b':');
                dec(buf, d.dep_id as u64);
                buf.push(b' ');
                dec(buf, d.dep_inst);
                buf.push(b'\n');
            }
            Item::Values(n) => {
                buf.extend_from_slice(b"VALUES ");
                dec(buf, n);
                buf.push(b'\n');
            }
            Item::Value(inst, v) => {
                buf.extend_from_slice(b"    ");
                dec(buf, inst);
                buf.push(b':');
                hex(buf, v);
                buf.push(b'\n');
            }
            Item::NoValues => buf.extend_from_slice(b"NO VALUES\n"),
        }
    }
}

/// Writes the comprehensive format: `N`, then each executed instruction's block in id
/// order. `place(id)` gives the static line's `file_name function_name line_num`. One
/// thread reads the store in order, `workers` format batches of it, and this one writes
/// them in order.
pub fn comprehensive(
    st: &Statics,
    counts: &[u64],
    totals: &(dyn Fn(u32) -> u64 + Sync),
    reader: Reader,
    place: &(dyn Fn(u32) -> String + Sync),
    workers: usize,
    out: &mut dyn Write,
) -> io::Result<()> {
    use crossbeam::channel::bounded;
    let workers = workers.max(1);
    let (job_tx, job_rx) = bounded::<(u64, Vec<Item>)>(workers * 2);
    let (done_tx, done_rx) = bounded::<(u64, Vec<u8>)>(workers * 2);
    std::thread::scope(|s| {
        let producer = s.spawn(move || -> io::Result<()> {
            let mut reader = reader;
            let mut seq = 0u64;
            let mut batch = Vec::with_capacity(BATCH);
            let send = |batch: &mut Vec<Item>, seq: &mut u64| -> io::Result<()> {
                let full = std::mem::replace(batch, Vec::with_capacity(BATCH));
                job_tx.send((*seq, full)).map_err(|_| io::Error::other("the WET formatters stopped"))?;
                *seq += 1;
                Ok(())
            };
            batch.push(Item::Count(counts.iter().filter(|&&c| c > 0).count() as u64));
            let mut values = Vec::new();
            for (id, s) in st.insns.iter().enumerate() {
                if counts[id] == 0 {
                    continue;
                }
                batch.push(Item::Head(id as u32));
                for port in 0..s.ports as u32 {
                    let seg = s.first_seg + port;
                    batch.push(Item::Size(totals(seg)));
                    reader.deps(seg, &mut |d| {
                        batch.push(Item::Dep(d));
                        if batch.len() >= BATCH {
                            send(&mut batch, &mut seq)?;
                        }
                        Ok(())
                    })?;
                }
                reader.values(s.value_seg(), &mut values)?;
                if values.is_empty() {
                    batch.push(Item::NoValues);
                } else {
                    batch.push(Item::Values(values.len() as u64));
                    for &(inst, v) in &values {
                        batch.push(Item::Value(inst, v));
                        if batch.len() >= BATCH {
                            send(&mut batch, &mut seq)?;
                        }
                    }
                }
                if batch.len() >= BATCH {
                    send(&mut batch, &mut seq)?;
                }
            }
            send(&mut batch, &mut seq)
        });
        for _ in 0..workers {
            let (job_rx, done_tx) = (job_rx.clone(), done_tx.clone());
            s.spawn(move || {
                for (seq, items) in job_rx {
                    let mut buf = Vec::with_capacity(items.len() * 20);
                    format(&items, st, place, &mut buf);
                    if done_tx.send((seq, buf)).is_err() {
                        break;
                    }
                }
            });
        }
        drop((job_rx, done_tx));
        // Write in order; on a write error, stop taking results (which stops the others).
        let mut ready = std::collections::BTreeMap::new();
        let mut next = 0u64;
        let mut written: io::Result<()> = Ok(());
        for (seq, buf) in done_rx.iter() {
            ready.insert(seq, buf);
            while let Some(buf) = ready.remove(&next) {
                written = out.write_all(&buf);
                next += 1;
                if written.is_err() {
                    break;
                }
            }
            if written.is_err() {
                break;
            }
        }
        drop(done_rx);
        let produced = producer.join().expect("WET reader panicked");
        written?;
        produced
    })
}

/// Writes the limited-history format: `a#b --> x#y`, oldest first.
pub fn history<'a>(ring: impl Iterator<Item = &'a [u64; 4]>, out: &mut dyn Write) -> io::Result<()> {
    let mut buf = Vec::with_capacity(1 << 16);
    for &[pc, inst, dpc, dinst] in ring {
        buf.extend_from_slice(b"0x");
        hex(&mut buf, pc);
        buf.push(b'#');
        dec(&mut buf, inst);
        buf.extend_from_slice(b" --> 0x");
        hex(&mut buf, dpc);
        buf.push(b'#');
        dec(&mut buf, dinst);
        buf.push(b'\n');
        if buf.len() >= 1 << 16 {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    out.write_all(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_fields() {
        let mut b = vec![];
        hex(&mut b, 0x8048242);
        b.push(b' ');
        hex(&mut b, 0);
        b.push(b' ');
        dec(&mut b, 18446744073709551615);
        assert_eq!(String::from_utf8(b).unwrap(), "8048242 0 18446744073709551615");
        assert_eq!(field(Some("f(int, char)")), "f(int,_char)");
        assert_eq!(field(None), "??");
    }
}
