//! One output written in chunk order while chunks are rendered in parallel, in bounded
//! memory: the chunk at the head of the order writes straight to the output; a chunk ahead
//! of it keeps what it writes in memory up to [`HELD_IN_MEMORY`] and the rest in an unnamed
//! temporary file (in `TMPDIR`), handed to the output when the head reaches it.
//!
//! A chunk's rendering is unbounded (one rep string can move gigabytes, and matrix's
//! chunks render to 400 MB of text each), so holding finished chunks whole, as a plain
//! ordered map would, makes memory grow with the profile.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Bytes a chunk ahead of the head keeps in memory before it writes to a temporary file.
pub const HELD_IN_MEMORY: usize = 16 << 20;

/// The output and the index of the chunk whose bytes it takes now.
pub(crate) struct Gate<'o> {
    head: AtomicUsize,
    out: Mutex<&'o mut (dyn Write + Send)>,
}

impl<'o> Gate<'o> {
    /// A gate whose head is chunk 0.
    pub(crate) fn new(out: &'o mut (dyn Write + Send)) -> Self {
        Gate { head: AtomicUsize::new(0), out: Mutex::new(out) }
    }

    fn out(&self) -> io::Result<std::sync::MutexGuard<'_, &'o mut (dyn Write + Send)>> {
        // A writer that panicked mid-write leaves the output unusable: an error, not a panic.
        self.out.lock().map_err(|_| io::Error::other("a chunk's writer panicked"))
    }

    /// Hands chunk `k`'s held bytes to the output and makes chunk `k + 1` the head. Called
    /// once per chunk, in chunk order.
    pub(crate) fn finish(&self, k: usize, mut w: ChunkWriter<'_, 'o>) -> io::Result<()> {
        debug_assert_eq!(self.head.load(Ordering::Acquire), k);
        let mut out = self.out()?;
        let r = w.held.write_to(&mut **out);
        // The next chunk may go straight to the output from now on (and does after this
        // guard is dropped), even after a failure, which its own writes then report.
        self.head.store(k + 1, Ordering::Release);
        r
    }
}

/// Bytes kept for later in order: the first [`HELD_IN_MEMORY`] in memory, the rest in an
/// unnamed temporary file.
#[derive(Default)]
pub struct Held {
    mem: Vec<u8>,
    file: Option<File>,
    /// Bytes in the file.
    spilled: u64,
}

impl Held {
    /// Appends `buf`.
    pub fn push(&mut self, buf: &[u8]) -> io::Result<()> {
        if self.file.is_none() && self.mem.len() + buf.len() <= HELD_IN_MEMORY {
            self.mem.extend_from_slice(buf);
            return Ok(());
        }
        let f = match &mut self.file {
            Some(f) => f,
            None => self.file.insert(tempfile_in_tmpdir()?),
        };
        f.write_all(buf)?;
        self.spilled += buf.len() as u64;
        Ok(())
    }

    /// Bytes held in memory.
    pub fn in_memory(&self) -> usize {
        self.mem.len()
    }

    /// Bytes held in all.
    pub fn len(&self) -> u64 {
        self.mem.len() as u64 + self.spilled
    }

    /// Nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes everything held to `out`, in order, and forgets it.
    pub fn write_to(&mut self, out: &mut dyn Write) -> io::Result<()> {
        self.pour(&mut |b| out.write_all(b))
    }

    /// Hands everything held to `f` in order, a piece of at most 1 MiB at a time from the
    /// file, and forgets it.
    pub fn pour(&mut self, f: &mut dyn FnMut(&[u8]) -> io::Result<()>) -> io::Result<()> {
        f(&self.mem)?;
        self.mem = Vec::new();
        self.spilled = 0;
        if let Some(mut file) = self.file.take() {
            file.seek(SeekFrom::Start(0))?;
            let mut buf = vec![0u8; 1 << 20];
            loop {
                match file.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => f(&buf[..n])?,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }
}

/// An unnamed file in the temporary directory (O_TMPFILE where it can), gone when closed.
fn tempfile_in_tmpdir() -> io::Result<File> {
    tempfile::tempfile().map_err(|e| {
        io::Error::new(e.kind(), format!("a temporary file in {} for output held in order: {e}", std::env::temp_dir().display()))
    })
}

/// The output of chunk `k`: straight to the output while `k` is the head, held otherwise.
pub struct ChunkWriter<'g, 'o> {
    k: usize,
    gate: &'g Gate<'o>,
    held: Held,
    /// Chunk `k` became the head and its held bytes went out: it writes straight through.
    direct: bool,
}

impl<'g, 'o> ChunkWriter<'g, 'o> {
    pub(crate) fn new(k: usize, gate: &'g Gate<'o>) -> Self {
        ChunkWriter { k, gate, held: Held::default(), direct: false }
    }

    /// Bytes this chunk holds in memory.
    pub(crate) fn held_bytes(&self) -> usize {
        self.held.in_memory()
    }
}

impl Write for ChunkWriter<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if !self.direct && self.gate.head.load(Ordering::Acquire) != self.k {
            return self.held.push(buf);
        }
        let mut out = self.gate.out()?;
        if !self.direct {
            self.held.write_to(&mut **out)?;
            self.direct = true;
        }
        out.write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(tag: u8, n: usize) -> Vec<u8> {
        (0..n).map(|i| tag.wrapping_add(i as u8)).collect()
    }

    #[test]
    fn chunks_ahead_hold_then_spill_and_reach_the_output_in_order() {
        let mut out = Vec::new();
        let gate = Gate::new(&mut out);
        let (a, b, c) = (bytes(1, 1000), bytes(2, HELD_IN_MEMORY + 5000), bytes(3, 7000));
        let mut w0 = ChunkWriter::new(0, &gate);
        let mut w1 = ChunkWriter::new(1, &gate);
        let mut w2 = ChunkWriter::new(2, &gate);
        // Chunk 2 finishes first: in memory. Chunk 1 runs past the memory bound: the rest in a file.
        w2.write_all(&c).unwrap();
        w1.write_all(&b[..100]).unwrap();
        w1.write_all(&b[100..]).unwrap();
        assert_eq!(w1.held_bytes(), 100, "past the bound, bytes go to the file");
        assert!(w1.held.file.is_some());
        assert_eq!(w1.held.len(), b.len() as u64);
        // The head writes straight through.
        w0.write_all(&a[..10]).unwrap();
        assert_eq!(w0.held_bytes(), 0);
        w0.write_all(&a[10..]).unwrap();
        gate.finish(0, w0).unwrap();
        // Chunk 1 is the head now: what it held goes first, then it writes straight through.
        w1.write_all(b"tail").unwrap();
        assert!(w1.direct && w1.held_bytes() == 0 && w1.held.file.is_none());
        gate.finish(1, w1).unwrap();
        gate.finish(2, w2).unwrap();
        drop(gate);
        let want: Vec<u8> = [&a[..], &b[..], b"tail", &c[..]].concat();
        assert!(out == want, "{} bytes out, {} wanted", out.len(), want.len());
    }
}
