//! The `text`, `blocks` and `binary` renderings of `dep recover`.
//!
//! - text: `<thread> <pc> <R|W> <addr> <size>` per reference (pc, addr in `0x` lowercase hex);
//!   with the kernel's references (`--kernel-refs`), also the memory each recorded system
//!   call's kernel side read and wrote, as `<thread> <pc> <R|W> <addr> <size> kernel` lines of
//!   the system call instruction, after its own references;
//! - blocks: `<thread> <start-pc> <instruction-count>` per executed block;
//! - binary: a 16-byte header (`DEPREFS\0`, version u16 = 1, record size u16 = 24, 4 zero
//!   bytes), then 24-byte little-endian records `pc u64, addr u64, thread u32, size u16,
//!   kind u8 (0 read, 1 write), flags u8 (bit 0 conditional)`; sizes above 65535 saturate.

use crate::error::RecoverError;
use crate::events::{BlockEvent, Marker, MemEvent, RepRun, Run};
use crate::sink::Sink;
use dep_profile::semantics::Access;
use std::io::{self, Write};
use std::mem::MaybeUninit;

/// Output formats of `dep recover`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    /// Text with the kernel's references of system calls.
    TextKernel,
    Blocks,
    Binary,
}

impl Format {
    pub fn parse(s: &str) -> Option<Format> {
        Some(match s {
            "text" => Format::Text,
            "blocks" => Format::Blocks,
            "binary" => Format::Binary,
            _ => return None,
        })
    }

    /// Bytes written once before all records.
    pub fn header(self) -> &'static [u8] {
        match self {
            Format::Binary => b"DEPREFS\0\x01\x00\x18\x00\x00\x00\x00\x00",
            _ => b"",
        }
    }
}

/// Bytes per binary record.
pub const BINARY_RECORD: usize = 24;

/// The eight hex digits of `x` (lowercase, leading zeros kept) as a big-endian word, made
/// in a register: each nibble spread to a byte of its own, then the bytes above 9 moved
/// from after `9` to `a`.
#[inline(always)]
fn hex_digits(x: u32) -> u64 {
    let x = x as u64;
    let x = (x | x << 16) & 0x0000_ffff_0000_ffff;
    let x = (x | x << 8) & 0x00ff_00ff_00ff_00ff;
    let x = (x | x << 4) & 0x0f0f_0f0f_0f0f_0f0f;
    let letters = ((x + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
    x + 0x3030_3030_3030_3030 + letters * (b'a' - b'0' - 10) as u64
}

/// A text line written straight into the output's spare room: each field is stored as 16
/// fixed bytes (one store, where its length varies) and the line's end moved past the
/// field's own bytes. (Built on the stack and copied out, a line's copy waited on the
/// stores it spanned: text rendering took a quarter longer than pushing byte by byte.)
struct Line<'a> {
    room: &'a mut [MaybeUninit<u8>],
    n: usize,
}

/// Room for the longest line (`<thread u32> 0x<16> R 0x<16> <size u32> kernel\n`: 69
/// bytes; before its last field at most 61), plus the 16 a field is stored with.
const LINE: usize = 96;

impl Line<'_> {
    /// Appends a line to `out`, made by `make`.
    #[inline(always)]
    fn push(out: &mut Vec<u8>, make: impl FnOnce(&mut Line)) {
        out.reserve(LINE);
        let len = out.len();
        let mut l = Line { room: &mut out.spare_capacity_mut()[..LINE], n: 0 };
        make(&mut l);
        let n = l.n;
        // SAFETY: `reserve` made room for `LINE` bytes past `len`, and `put` initialised
        // the first `n <= LINE` of them: every field's bytes from where the one before
        // ended. Exercised by `lines_are_as_format_writes_them`.
        unsafe { out.set_len(len + n) };
    }

    /// Appends the first `len` of `field`'s 16 bytes.
    #[inline(always)]
    fn put(&mut self, field: [u8; 16], len: usize) {
        let to = &mut self.room[self.n..self.n + 16];
        // SAFETY: `to` is 16 bytes (sliced just above, with its bounds checked), written
        // whole, unaligned. (Copied as an array of `MaybeUninit` bytes, the field went a byte
        // at a time.) Exercised by `lines_are_as_format_writes_them`.
        unsafe { to.as_mut_ptr().cast::<[u8; 16]>().write_unaligned(field) };
        self.n += len;
    }

    /// Appends `v` as `0x` and lowercase hex digits, no leading zeros (`0x0` for zero).
    #[inline(always)]
    fn hex(&mut self, v: u64) {
        let d = (hex_digits((v >> 32) as u32) as u128) << 64 | hex_digits(v as u32) as u128;
        let len = (16 - v.leading_zeros() as usize / 4).max(1);
        self.put(*b"0x              ", 2);
        // The significant digits moved to the front.
        self.put((d << (8 * (16 - len))).to_be_bytes(), len);
    }

    /// Appends `v` in decimal.
    #[inline(always)]
    fn dec(&mut self, v: u32) {
        let t = decimal(v);
        self.text(&t);
    }

    /// Appends `t`: `t.len()` of its 16 bytes.
    #[inline(always)]
    fn text(&mut self, t: &Text) {
        self.put(t.0, t.1 as usize);
    }
}

/// Up to 16 bytes of a line, stored whole: its bytes, and how many of them are its.
#[derive(Clone, Copy)]
struct Text([u8; 16], u8);

impl Text {
    const fn new(t: &[u8]) -> Text {
        let mut b = [0u8; 16];
        let mut i = 0;
        while i < t.len() {
            b[i] = t[i];
            i += 1;
        }
        Text(b, t.len() as u8)
    }
}

const READ: Text = Text::new(b" R ");
const WRITE: Text = Text::new(b" W ");
const SPACE: Text = Text::new(b" ");
const NEWLINE: Text = Text::new(b"\n");
const KERNEL: Text = Text::new(b" kernel\n");

/// `"<thread> "`.
#[inline]
fn thread_prefix(thread: u32) -> Text {
    let mut t = decimal(thread);
    t.0[t.1 as usize] = b' ';
    t.1 += 1;
    t
}

/// `v`'s decimal digits, made in a register (made in memory byte by byte, the field's one
/// load waited on their stores).
#[inline(always)]
fn decimal(mut v: u32) -> Text {
    let (mut d, mut len) = (0u128, 0);
    loop {
        d = d >> 8 | ((b'0' + (v % 10) as u8) as u128) << 120;
        len += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    Text(d.to_be_bytes(), len)
}

/// A text line: `prefix` (`<thread> `), then `<pc> <R|W> <addr> <size>`, then `suffix`.
#[inline]
fn push_reference(out: &mut Vec<u8>, prefix: &Text, pc: u64, access: Access, addr: u64, size: u32, suffix: &Text) {
    Line::push(out, |l| {
        l.text(prefix);
        l.hex(pc);
        l.text(if access == Access::Read { &READ } else { &WRITE });
        l.hex(addr);
        l.text(&SPACE);
        l.dec(size);
        l.text(suffix);
    });
}

/// Renders events in one format into a byte buffer, flushed to `W` in large pieces.
pub struct Renderer<W: Write> {
    format: Format,
    buf: Vec<u8>,
    out: W,
}

impl<W: Write> Renderer<W> {
    pub fn new(format: Format, out: W) -> Self {
        Renderer { format, buf: Vec::with_capacity(1 << 16), out }
    }

    #[inline]
    fn spill(&mut self) -> io::Result<()> {
        if self.buf.len() >= 1 << 16 {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Writes what is buffered and returns the output.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.write_all(&self.buf)?;
        Ok(self.out)
    }
}

impl<W: Write> Sink for Renderer<W> {
    type Error = RecoverError;

    #[inline]
    fn block(&mut self, b: &BlockEvent) -> Result<bool, Self::Error> {
        if self.format == Format::Blocks {
            let prefix = thread_prefix(b.thread);
            Line::push(&mut self.buf, |l| {
                l.text(&prefix);
                l.hex(b.addr);
                l.text(&SPACE);
                l.dec(b.executed);
                l.text(&NEWLINE);
            });
            self.spill()?;
        }
        Ok(true)
    }

    #[inline]
    fn refs(&mut self, b: &BlockEvent, refs: &[MemEvent]) -> Result<bool, Self::Error> {
        self.references(b.thread, refs)?;
        Ok(true)
    }

    fn run(&mut self, run: &Run) -> Result<bool, Self::Error> {
        if self.format == Format::Blocks {
            for (b, _) in run.iter() {
                self.block(&b)?;
            }
        } else {
            self.references(run.thread, run.refs())?;
        }
        Ok(true)
    }

    /// A rep string's references made as they are written, not written out first and read
    /// back (matrix's memcpy rows: most of its references).
    fn rep(&mut self, b: &BlockEvent, run: &RepRun) -> Result<bool, Self::Error> {
        let first = run.first();
        match self.format {
            Format::Blocks => {}
            Format::Text | Format::TextKernel => {
                let prefix = thread_prefix(b.thread);
                for k in 0..run.iterations() {
                    for m in first {
                        push_reference(&mut self.buf, &prefix, m.pc, m.access, run.addr_at(k, m), m.size, &NEWLINE);
                    }
                    self.spill()?;
                }
            }
            Format::Binary => {
                // Each record as three words, its pc and the word after its address fixed:
                // a record patched in memory and copied whole waited on the patch's store.
                let mut tails = [0u64; 2];
                for (t, m) in tails.iter_mut().zip(first) {
                    *t = u64::from_le_bytes(binary_record(b.thread, m)[16..].try_into().expect("8 bytes"));
                }
                for k in 0..run.iterations() {
                    for (m, t) in first.iter().zip(tails) {
                        self.buf.extend_from_slice(&m.pc.to_le_bytes());
                        self.buf.extend_from_slice(&run.addr_at(k, m).to_le_bytes());
                        self.buf.extend_from_slice(&t.to_le_bytes());
                    }
                    self.spill()?;
                }
            }
        }
        Ok(true)
    }

    fn marker(&mut self, thread: u32, m: Marker) -> Result<bool, Self::Error> {
        if let (Format::TextKernel, Marker::Kernel { pc, addr, size, write, .. }) = (self.format, m) {
            let access = if write { Access::Write } else { Access::Read };
            push_reference(&mut self.buf, &thread_prefix(thread), pc, access, addr, size, &KERNEL);
            self.spill()?;
        }
        Ok(true)
    }
}

impl<W: Write> Renderer<W> {
    /// Renders thread `thread`'s references.
    #[inline]
    fn references(&mut self, thread: u32, refs: &[MemEvent]) -> io::Result<()> {
        match self.format {
            Format::Blocks => {}
            Format::Text | Format::TextKernel => {
                // "<thread> " once per block, not per reference.
                let prefix = thread_prefix(thread);
                for m in refs {
                    push_reference(&mut self.buf, &prefix, m.pc, m.access, m.addr, m.size, &NEWLINE);
                    self.spill()?;
                }
            }
            Format::Binary => {
                for m in refs {
                    self.buf.extend_from_slice(&binary_record(thread, m));
                    self.spill()?;
                }
            }
        }
        Ok(())
    }
}

/// A reference's binary record.
#[inline]
fn binary_record(thread: u32, m: &MemEvent) -> [u8; BINARY_RECORD] {
    let mut rec = [0u8; BINARY_RECORD];
    rec[0..8].copy_from_slice(&m.pc.to_le_bytes());
    rec[8..16].copy_from_slice(&m.addr.to_le_bytes());
    rec[16..20].copy_from_slice(&thread.to_le_bytes());
    rec[20..22].copy_from_slice(&(m.size.min(u16::MAX as u32) as u16).to_le_bytes());
    rec[22] = if m.access == Access::Read { 0 } else { 1 };
    rec[23] = m.conditional as u8;
    rec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_lines() {
        let block = |thread| BlockEvent { thread, addr: 0x401000, version: 0, id: None, plan: None, executed: 1, interrupted: false };
        let mut r = Renderer::new(Format::Text, Vec::new());
        r.block(&block(3)).unwrap();
        r.refs(&block(3), &[MemEvent { pc: 0x401000, addr: 0, size: 8, access: Access::Write, conditional: false, insn: 0 }]).unwrap();
        r.block(&block(0)).unwrap();
        r.refs(
            &block(0),
            &[MemEvent { pc: 0xffff_ffff_ffff_ffff, addr: 0x7ffc_dead_beef, size: 4096, access: Access::Read, conditional: true, insn: 0 }],
        )
        .unwrap();
        assert_eq!(String::from_utf8(r.into_inner().unwrap()).unwrap(), "3 0x401000 W 0x0 8\n0 0xffffffffffffffff R 0x7ffcdeadbeef 4096\n");
        let mut r = Renderer::new(Format::Binary, Vec::new());
        r.block(&block(1)).unwrap();
        r.refs(&block(1), &[MemEvent { pc: 2, addr: 3, size: 4, access: Access::Write, conditional: true, insn: 0 }]).unwrap();
        let b = r.into_inner().unwrap();
        assert_eq!(b.len(), BINARY_RECORD);
        assert_eq!(&b[16..], &[1, 0, 0, 0, 4, 0, 1, 1]);
        assert_eq!(Format::Binary.header().len(), 16);
    }

    use proptest::prelude::*;

    proptest! {
        /// Lines as Rust's own formatting writes them, for every field's every length.
        #[test]
        fn lines_are_as_format_writes_them(
            thread in prop_oneof![0u32..10, any::<u32>()],
            pc in any::<u64>().prop_map(|v| v >> (v % 64)),
            addr in prop_oneof![Just(0u64), any::<u64>().prop_map(|v| v >> (v % 64))],
            size in prop_oneof![0u32..17, any::<u32>()],
            write in any::<bool>(),
        ) {
            let kind = if write { "W" } else { "R" };
            let access = if write { Access::Write } else { Access::Read };
            let block = BlockEvent { thread, addr, version: 0, id: None, plan: None, executed: size, interrupted: false };
            let m = MemEvent { pc, addr, size, access, conditional: false, insn: 0 };
            let render = |format| {
                let mut r = Renderer::new(format, Vec::new());
                r.block(&block).unwrap();
                r.refs(&block, &[m]).unwrap();
                r.marker(thread, Marker::Kernel { insn: 0, pc, addr, size, write }).unwrap();
                String::from_utf8(r.into_inner().unwrap()).unwrap()
            };
            let line = format!("{thread} {pc:#x} {kind} {addr:#x} {size}");
            prop_assert_eq!(render(Format::Text), format!("{line}\n"));
            prop_assert_eq!(render(Format::TextKernel), format!("{line}\n{line} kernel\n"));
            prop_assert_eq!(render(Format::Blocks), format!("{thread} {addr:#x} {size}\n"));
        }
    }

    /// A rep run renders as its references do, one by one, in every format: one and two
    /// references an iteration, up and down, wrapping at 32 bits, past the 64 KiB a
    /// renderer holds.
    #[test]
    fn rep_runs_render_as_their_references() {
        let block = BlockEvent { thread: 12, addr: 0x401000, version: 0, id: None, plan: None, executed: 1, interrupted: false };
        let read = MemEvent { pc: 0x401003, addr: 0xffff_fff0, size: 1, access: Access::Read, conditional: false, insn: 1 };
        let write = MemEvent { pc: 0x401003, addr: 0x7000, size: 1, access: Access::Write, ..read };
        for (first, stride, mask) in
            [(vec![read, write], 1u64, u64::MAX), (vec![read], (-8i64) as u64, u64::MAX), (vec![write, read], 4, 0xffff_ffff)]
        {
            for iterations in [0u64, 1, 2, 3000] {
                let run = RepRun::new(&first, iterations, stride, mask).unwrap();
                let refs: Vec<MemEvent> = (0..iterations)
                    .flat_map(|k| first.iter().map(move |m| MemEvent { addr: m.addr.wrapping_add(k.wrapping_mul(stride)) & mask, ..*m }))
                    .collect();
                for format in [Format::Text, Format::Binary, Format::Blocks] {
                    let mut by_run = Renderer::new(format, Vec::new());
                    by_run.rep(&block, &run).unwrap();
                    let mut by_refs = Renderer::new(format, Vec::new());
                    by_refs.refs(&block, &refs).unwrap();
                    let (a, b) = (by_run.into_inner().unwrap(), by_refs.into_inner().unwrap());
                    assert!(a == b, "{format:?}, {iterations} iterations of {first:?}");
                }
            }
        }
    }
}
