//! The two WET text formats.

use super::statics::Statics;
use super::store::{DepRecord, Reader, Values};
use std::io::{self, Write};

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

/// Two decimal digits of every number below 100.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Text built in a fixed block and moved to the output a block at a time: one copy for
/// a few hundred lines, where appending each number to the output was a copy per number.
struct Block<'o> {
    buf: [u8; BLOCK],
    n: usize,
    out: &'o mut Vec<u8>,
}

const BLOCK: usize = 4096;
/// Room the lines written into a block need at most: three 20-digit numbers and their text.
const LINE: usize = 96;

impl Block<'_> {
    /// Makes room for one more line.
    #[inline]
    fn line(&mut self) {
        if self.n > BLOCK - LINE {
            self.flush();
        }
    }

    fn flush(&mut self) {
        self.out.extend_from_slice(&self.buf[..self.n]);
        self.n = 0;
    }

    #[inline]
    fn bytes<const N: usize>(&mut self, b: &[u8; N]) {
        self.buf[self.n..self.n + N].copy_from_slice(b);
        self.n += N;
    }

    /// `v` in decimal.
    #[inline(always)]
    fn dec(&mut self, mut v: u64) {
        let end = self.n + v.checked_ilog10().map_or(1, |l| l as usize + 1);
        let mut i = end;
        while v >= 100 {
            let r = (v % 100) as usize * 2;
            v /= 100;
            i -= 2;
            self.buf[i..i + 2].copy_from_slice(&PAIRS[r..r + 2]);
        }
        if v >= 10 {
            let r = v as usize * 2;
            self.buf[i - 2..i].copy_from_slice(&PAIRS[r..r + 2]);
        } else {
            self.buf[i - 1] = b'0' + v as u8;
        }
        self.n = end;
    }

    /// `v` in lowercase hexadecimal, no prefix.
    #[inline]
    fn hex(&mut self, v: u64) {
        let digits = (64 - v.leading_zeros()).div_ceil(4).max(1) as usize;
        for k in 0..digits {
            self.buf[self.n + digits - 1 - k] = b"0123456789abcdef"[(v >> (k * 4) & 15) as usize];
        }
        self.n += digits;
    }
}

fn format(items: &[Item], st: &Statics, place: &(dyn Fn(u32) -> String + Sync), out: &mut Vec<u8>) {
    let mut b = Block { buf: [0; BLOCK], n: 0, out };
    for item in items {
        b.line();
        match *item {
            Item::Count(n) => {
                b.dec(n);
                b.bytes(b"\n");
            }
            Item::Head(id) => {
                // The place may be longer than a block's line: it goes on its own.
                let s = &st.insns[id as usize];
                b.dec(id as u64);
                b.bytes(b" ");
                b.dec(s.ports as u64);
                b.bytes(b" ");
                b.hex(s.pc);
                b.bytes(b" ");
                b.flush();
                b.out.extend_from_slice(place(id).as_bytes());
                b.out.push(b'\n');
            }
            Item::Size(n) => {
                b.bytes(b"SIZE ");
                b.dec(n);
                b.bytes(b"\n");
            }
            Item::Dep(d) => {
                b.bytes(b"    ");
                b.dec(d.inst);
                b.bytes(b":");
                b.dec(d.dep_id as u64);
                b.bytes(b" ");
                b.dec(d.dep_inst);
                b.bytes(b"\n");
            }
            Item::Values(n) => {
                b.bytes(b"VALUES ");
                b.dec(n);
                b.bytes(b"\n");
            }
            Item::Value(inst, v) => {
                b.bytes(b"    ");
                b.dec(inst);
                b.bytes(b":");
                b.hex(v);
                b.bytes(b"\n");
            }
            Item::NoValues => b.bytes(b"NO VALUES\n"),
        }
    }
    b.flush();
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
    // Batches and text buffers go back to be filled again: fresh ones would cost a page
    // fault every 4 KiB they are first written.
    let (items_back, items_free) = bounded::<Vec<Item>>(workers * 4);
    let (text_back, text_free) = bounded::<Vec<u8>>(workers * 4);
    std::thread::scope(|s| {
        let producer = s.spawn(move || -> io::Result<()> {
            let mut reader = reader;
            let mut seq = 0u64;
            let mut batch = Vec::with_capacity(BATCH);
            let send = |batch: &mut Vec<Item>, seq: &mut u64| -> io::Result<()> {
                let next = items_free.try_recv().unwrap_or_else(|_| Vec::with_capacity(BATCH));
                let full = std::mem::replace(batch, next);
                job_tx.send((*seq, full)).map_err(|_| io::Error::other("the WET formatters stopped"))?;
                *seq += 1;
                Ok(())
            };
            batch.push(Item::Count(counts.iter().filter(|&&c| c > 0).count() as u64));
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
                reader.values(s.value_seg(), &mut |v| {
                    match v {
                        Values::Count(0) => batch.push(Item::NoValues),
                        Values::Count(n) => batch.push(Item::Values(n)),
                        Values::Value(inst, v) => batch.push(Item::Value(inst, v)),
                    }
                    if batch.len() >= BATCH {
                        send(&mut batch, &mut seq)?;
                    }
                    Ok(())
                })?;
                if batch.len() >= BATCH {
                    send(&mut batch, &mut seq)?;
                }
            }
            send(&mut batch, &mut seq)
        });
        let mut formatters = Vec::with_capacity(workers);
        for _ in 0..workers {
            let (job_rx, done_tx) = (job_rx.clone(), done_tx.clone());
            let (items_back, text_free) = (items_back.clone(), text_free.clone());
            formatters.push(s.spawn(move || {
                for (seq, mut items) in job_rx {
                    let mut buf = text_free.try_recv().unwrap_or_else(|_| Vec::with_capacity(items.len() * 20));
                    format(&items, st, place, &mut buf);
                    items.clear();
                    let _ = items_back.try_send(items);
                    if done_tx.send((seq, buf)).is_err() {
                        break;
                    }
                }
            }));
        }
        drop((items_back, text_free));
        drop((job_rx, done_tx));
        // Write in order; on a write error, stop taking results (which stops the others).
        let mut ready = std::collections::BTreeMap::new();
        let mut next = 0u64;
        let mut written: io::Result<()> = Ok(());
        for (seq, buf) in done_rx.iter() {
            ready.insert(seq, buf);
            while let Some(mut buf) = ready.remove(&next) {
                written = out.write_all(&buf);
                buf.clear();
                let _ = text_back.try_send(buf);
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
        // Joined here, as the reader is, not left to the scope's end, which waits for the
        // closures only: nothing of a joined thread (its thread-locals) outlives the call.
        for f in formatters {
            f.join().expect("WET formatter panicked");
        }
        written?;
        produced
    })
}

/// Writes the limited-history format: `a#b --> x#y`, oldest first.
pub fn history<'a>(ring: impl Iterator<Item = &'a [u64; 4]>, out: &mut dyn Write) -> io::Result<()> {
    let mut buf = Vec::with_capacity(1 << 16);
    let mut b = Block { buf: [0; BLOCK], n: 0, out: &mut buf };
    for &[pc, inst, dpc, dinst] in ring {
        b.line();
        b.bytes(b"0x");
        b.hex(pc);
        b.bytes(b"#");
        b.dec(inst);
        b.bytes(b" --> 0x");
        b.hex(dpc);
        b.bytes(b"#");
        b.dec(dinst);
        b.bytes(b"\n");
        if b.out.len() >= 1 << 16 {
            out.write_all(b.out)?;
            b.out.clear();
        }
    }
    b.flush();
    out.write_all(b.out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_fields() {
        let mut b = vec![];
        let mut blk = Block { buf: [0; BLOCK], n: 0, out: &mut b };
        blk.hex(0x8048242);
        blk.bytes(b" ");
        blk.hex(0);
        blk.bytes(b" ");
        blk.dec(18446744073709551615);
        blk.flush();
        assert_eq!(String::from_utf8(b).unwrap(), "8048242 0 18446744073709551615");
        assert_eq!(field(Some("f(int, char)")), "f(int,_char)");
        // The block writer gives the same digits, at every length and across its flushes.
        let mut out = vec![];
        let mut want = vec![];
        let mut blk = Block { buf: [0; BLOCK], n: 0, out: &mut out };
        for k in 0..2000u64 {
            let v = [0, 9, 10, 99, 100, 12345, u64::MAX, k.wrapping_mul(0x9e3779b97f4a7c15) >> (k % 64)][k as usize % 8];
            blk.line();
            blk.dec(v);
            blk.bytes(b" ");
            blk.hex(v);
            blk.bytes(b"\n");
            want.extend_from_slice(format!("{v} {v:x}\n").as_bytes());
        }
        blk.flush();
        assert_eq!(String::from_utf8(out).unwrap(), String::from_utf8(want).unwrap());
        assert_eq!(field(None), "??");
    }

    /// The comprehensive format's lines as Rust's own formatting writes them, at every
    /// number's length.
    #[test]
    fn comprehensive_lines() {
        use crate::wet::statics::StaticInsn;
        let nums = |k: u64| [0, 9, 10, 99, 100, 12345, (1 << 40) - 1, u64::MAX, k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (k % 64)];
        let insns: Vec<StaticInsn> = (0..9u64)
            .map(|k| StaticInsn { pc: nums(k)[k as usize], version: 0, block: 0, index: 0, ports: k as u16 * 7000, first_seg: 0 })
            .collect();
        let st = Statics::of_insns(insns.clone());
        let place = |id: u32| if id.is_multiple_of(2) { format!("file{id}.c f_{id} {}", id * 17) } else { "?? ?? 0".repeat(30) };
        let (mut items, mut want) = (Vec::new(), String::new());
        for k in 0..4000u64 {
            let v = nums(k);
            let (a, b, c) = (v[k as usize % 9], v[(k as usize + 4) % 9], v[(k as usize + 7) % 9]);
            let id = (k % 9) as u32;
            let (item, line) = match k % 7 {
                0 => (Item::Count(a), format!("{a}\n")),
                1 => (Item::Head(id), format!("{id} {} {:x} {}\n", insns[id as usize].ports, insns[id as usize].pc, place(id))),
                2 => (Item::Size(a), format!("SIZE {a}\n")),
                3 => (Item::Dep(DepRecord { inst: a, dep_id: b as u32, dep_inst: c }), format!("    {a}:{} {c}\n", b as u32)),
                4 => (Item::Values(a), format!("VALUES {a}\n")),
                5 => (Item::Value(a, b), format!("    {a}:{b:x}\n")),
                _ => (Item::NoValues, "NO VALUES\n".to_string()),
            };
            items.push(item);
            want.push_str(&line);
        }
        let mut out = Vec::new();
        format(&items, &st, &place, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), want);
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
