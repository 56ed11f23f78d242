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
use crate::events::{BlockEvent, Marker, MemEvent, Run};
use crate::sink::Sink;
use dep_profile::semantics::Access;
use std::io::{self, Write};

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

fn push_hex(out: &mut Vec<u8>, v: u64) {
    const D: &[u8; 16] = b"0123456789abcdef";
    out.extend_from_slice(b"0x");
    if v == 0 {
        out.push(b'0');
        return;
    }
    let n = 16 - (v.leading_zeros() as usize / 4);
    for i in (0..n).rev() {
        out.push(D[((v >> (i * 4)) & 0xf) as usize]);
    }
}

/// The decimal digits of `v`, at the end of `tmp`.
fn dec(tmp: &mut [u8; 20], mut v: u64) -> &[u8] {
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &tmp[i..]
}

fn push_dec(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(dec(&mut [0; 20], v));
}

/// A text line's `<pc> <R|W> <addr> <size>`.
#[inline]
fn push_reference(out: &mut Vec<u8>, pc: u64, access: Access, addr: u64, size: u32) {
    push_hex(out, pc);
    out.extend_from_slice(if access == Access::Read { b" R " } else { b" W " });
    push_hex(out, addr);
    out.push(b' ');
    push_dec(out, size as u64);
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
            push_dec(&mut self.buf, b.thread as u64);
            self.buf.push(b' ');
            push_hex(&mut self.buf, b.addr);
            self.buf.push(b' ');
            push_dec(&mut self.buf, b.executed as u64);
            self.buf.push(b'\n');
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

    fn marker(&mut self, thread: u32, m: Marker) -> Result<bool, Self::Error> {
        if let (Format::TextKernel, Marker::Kernel { pc, addr, size, write, .. }) = (self.format, m) {
            push_dec(&mut self.buf, thread as u64);
            self.buf.push(b' ');
            push_reference(&mut self.buf, pc, if write { Access::Write } else { Access::Read }, addr, size);
            self.buf.extend_from_slice(b" kernel\n");
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
                let mut tmp = [b' '; 20];
                let digits = dec(&mut tmp, thread as u64).len();
                let mut prefix = [b' '; 11];
                prefix[10 - digits..10].copy_from_slice(&tmp[20 - digits..]);
                let prefix = &prefix[10 - digits..];
                for m in refs {
                    self.buf.extend_from_slice(prefix);
                    push_reference(&mut self.buf, m.pc, m.access, m.addr, m.size);
                    self.buf.push(b'\n');
                    self.spill()?;
                }
            }
            Format::Binary => {
                for m in refs {
                    let mut rec = [0u8; BINARY_RECORD];
                    rec[0..8].copy_from_slice(&m.pc.to_le_bytes());
                    rec[8..16].copy_from_slice(&m.addr.to_le_bytes());
                    rec[16..20].copy_from_slice(&thread.to_le_bytes());
                    rec[20..22].copy_from_slice(&(m.size.min(u16::MAX as u32) as u16).to_le_bytes());
                    rec[22] = if m.access == Access::Read { 0 } else { 1 };
                    rec[23] = m.conditional as u8;
                    self.buf.extend_from_slice(&rec);
                    self.spill()?;
                }
            }
        }
        Ok(())
    }
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
}
