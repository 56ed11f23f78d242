//! DEP_c: the control-flow stream of 2-byte block tags (paper sections 2.1 and 4.1).
//!
//! A block at address `a` has H-tag `a >> 16` and L-tag `a & 0xffff`. While the H-tag is
//! unchanged a block costs one word, its L-tag. The word `0x0000` introduces everything
//! else; what follows it decides:
//!
//! | words after `0x0000`         | meaning                                                  |
//! |------------------------------|----------------------------------------------------------|
//! | `0x0000`                     | block whose L-tag is 0 (paper)                           |
//! | `H` in `0x0001..=0xffef`     | bits 16..31 of the H-tag become `H` (paper's H change)   |
//! | `0xfff0` + 1 or 3 words      | the whole H-tag (32-bit: 1 word; 64-bit: 3 words)        |
//! | `0xfff1..=0xffff` + payload  | escape records, see [`Escape`]                           |
//!
//! For 32-bit programs this is exactly the paper's scheme for every H-tag below `0xfff0`.
//! `profile/FORMAT.md` documents the layout byte by byte.

use crate::Width;
use thiserror::Error;

/// Word introducing an H change, an L-tag of 0 or an escape.
pub const ESC: u16 = 0x0000;
/// The largest H-tag (bits 16..31) that the short `0x0000, H` form can carry.
pub const MAX_SHORT_H: u16 = 0xffef;
/// Control word: the full H-tag follows.
pub const CTL_SET_HI: u16 = 0xfff0;
/// Control word: chunk start, 2-word sequence number follows.
pub const CTL_CHUNK_START: u16 = 0xfff1;
/// Control word: the thread starts.
pub const CTL_THREAD_START: u16 = 0xfff2;
/// Control word: the thread ends.
pub const CTL_THREAD_END: u16 = 0xfff3;
/// Control word: a signal handler is entered, 1-word signal number follows.
pub const CTL_SIGNAL: u16 = 0xfff4;
/// Control word: a signal handler returned (sigreturn).
pub const CTL_SIGNAL_RETURN: u16 = 0xfff5;
/// Control word: the previous block stopped at an instruction, 1-word index follows.
pub const CTL_INTERRUPTED: u16 = 0xfff6;
/// Control word: the next block is a later code version, 2-word version follows.
pub const CTL_CODE_VERSION: u16 = 0xfff7;
/// Control word: every register value expires (the collector lost track of them).
pub const CTL_EXPIRE_ALL: u16 = 0xfff8;
/// Control word: a synchronisation point, 1-word place and 4-word global sequence follow.
pub const CTL_SYNC: u16 = 0xfff9;

/// Control word: a watched function was entered, 1-word function and 3 values follow.
pub const CTL_CALL: u16 = 0xfffa;
/// Control word: a watched function returns, 1-word function and a value follow.
pub const CTL_RETURN: u16 = 0xfffb;
/// Control word: a recorded system call is made, 1-word place, 1-word number and 3 values
/// follow.
pub const CTL_SYSCALL: u16 = 0xfffc;
/// Control word: the system call returned, 1-word place and a value follow.
pub const CTL_SYSCALL_RETURN: u16 = 0xfffd;
/// Control word: the descriptors a pipe or socket pair made, 2 two-word numbers follow.
pub const CTL_DESCRIPTORS: u16 = 0xfffe;
/// Control word: memory the kernel accessed for the system call, 1-word flags, a value
/// (the address) and a two-word size follow.
pub const CTL_KERNEL: u16 = 0xffff;
/// [`Escape::Kernel`] flags: the kernel wrote the memory (else read it).
pub const KERNEL_WRITE: u16 = 1;

/// [`Escape::Sync`] place: the point is not an instruction (thread start or end, signal
/// delivery, chunk hand-off).
pub const SYNC_NO_INSN: u16 = 0xffff;
/// [`Escape::Sync`] place flag: after the instruction (a system call's return), not before.
pub const SYNC_AFTER: u16 = 0x8000;

/// A record of the control-flow stream other than a plain block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Escape {
    /// First record of every chunk; `seq` is the chunk's number within its thread.
    ChunkStart { seq: u32 },
    /// The thread begins executing application code.
    ThreadStart,
    /// The thread exits.
    ThreadEnd,
    /// Signal `signo` is delivered: the handler's blocks follow; all registers expire.
    Signal { signo: u16 },
    /// The handler returned through sigreturn; all registers expire.
    SignalReturn,
    /// The previous block ran only up to instruction `insn` (0-based), which was attempted:
    /// its memory references count, its register effects do not. A `Signal` follows.
    Interrupted { insn: u16 },
    /// The next block is version `version` of the code at its address (version 0 needs no record).
    CodeVersion { version: u32 },
    /// All register values expire (e.g. after a state the collector cannot model).
    ExpireAll,
    /// A synchronisation point: `seq` is the process-wide sequence number the collector
    /// took there (one atomic counter for all threads, so it orders them). `at` is the
    /// instruction of the block last named (0-based) the point is before, or after with
    /// [`SYNC_AFTER`] (a system call's return); [`SYNC_NO_INSN`] for points that are no
    /// instruction. Format version 3.
    Sync { at: u16, seq: u64 },
    /// The block last named is the entry of watched function `func` (a
    /// [`calls::Func`](crate::calls::Func) number): `args` are rdi and rsi there, `ret` the
    /// return address on the stack. Format version 4.
    Call { func: u16, args: [u64; 2], ret: u64 },
    /// The block last named ends with a `ret` of watched function `func`, which returns
    /// `value` (rax). Format version 4.
    Return { func: u16, value: u64 },
    /// Instruction `at` of the block last named makes system call `nr` (one the collector
    /// records: [`syscalls::recorded`](crate::syscalls::recorded)) with these first three
    /// arguments (rdi, rsi, rdx). Written before the call. Format version 7.
    Syscall { at: u16, nr: u16, args: [u64; 3] },
    /// The system call of instruction `at` returned `value` (rax). Format version 7.
    SyscallReturn { at: u16, value: u64 },
    /// The descriptors the system call that returned last wrote to memory (pipe, pipe2,
    /// socketpair). Format version 7.
    Descriptors { fds: [u32; 2] },
    /// The system call that returned last read (or, `write`, wrote) `size` bytes of user
    /// memory at `addr`. Format version 7.
    Kernel { write: bool, addr: u64, size: u32 },
}

/// One decoded item of DEP_c.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TagItem {
    /// A block executed, starting at this address.
    Block(u64),
    /// An escape record.
    Escape(Escape),
}

/// Errors in a DEP_c word stream; offsets count 16-bit words from the stream's start.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TagError {
    #[error("tag stream ends inside a record that starts at word {0}")]
    Truncated(usize),
    #[error("kernel memory record at word {offset} has unknown flags {flags:#06x}")]
    KernelFlags { flags: u16, offset: usize },
    #[error("tag stream has an odd number of bytes ({0})")]
    OddLength(usize),
}

/// The bits an H-tag has: 16 on 32-bit, 48 on 64-bit.
pub fn hi_mask(width: Width) -> u64 {
    match width {
        Width::W32 => 0xffff,
        Width::W64 => 0xffff_ffff_ffff,
    }
}

/// Encodes blocks and escapes into DEP_c words, tracking the current H-tag.
#[derive(Clone, Debug)]
pub struct TagEncoder {
    width: Width,
    hi: u64,
    words: Vec<u16>,
}

impl TagEncoder {
    /// A new encoder whose current H-tag is `hi` (0 at a thread's start).
    pub fn new(width: Width, hi: u64) -> Self {
        TagEncoder { width, hi, words: Vec::new() }
    }

    /// The current H-tag.
    pub fn hi(&self) -> u64 {
        self.hi
    }

    /// Appends the words for a block at `addr`.
    pub fn block(&mut self, addr: u64) {
        let hi = (addr >> 16) & hi_mask(self.width);
        push_hi_change(self.width, self.hi, hi, &mut self.words);
        self.hi = hi;
        push_l_tag(addr as u16, &mut self.words);
    }

    /// Appends an escape record.
    pub fn escape(&mut self, e: Escape) {
        push_escape(e, &mut self.words);
    }

    /// Appends a decoded item.
    pub fn item(&mut self, item: TagItem) {
        match item {
            TagItem::Block(a) => self.block(a),
            TagItem::Escape(e) => self.escape(e),
        }
    }

    /// The words written so far.
    pub fn words(&self) -> &[u16] {
        &self.words
    }

    /// The stream as little-endian bytes, as stored in a chunk.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }
}

/// Appends the words that change the H-tag from `cur` to `new` (nothing if equal).
pub fn push_hi_change(width: Width, cur: u64, new: u64, out: &mut Vec<u16>) {
    if cur == new {
        return;
    }
    let short = new as u16;
    if (cur >> 16) == (new >> 16) && (1..=MAX_SHORT_H).contains(&short) {
        out.extend([ESC, short]);
        return;
    }
    out.extend([ESC, CTL_SET_HI, new as u16]);
    if width == Width::W64 {
        out.extend([(new >> 16) as u16, (new >> 32) as u16]);
    }
}

/// Appends a block's L-tag: one word, or `0x0000 0x0000` for L-tag 0.
pub fn push_l_tag(l: u16, out: &mut Vec<u16>) {
    if l == 0 {
        out.extend([ESC, ESC]);
    } else {
        out.push(l);
    }
}

/// Appends an escape record's words.
pub fn push_escape(e: Escape, out: &mut Vec<u16>) {
    match e {
        Escape::ChunkStart { seq } => out.extend([ESC, CTL_CHUNK_START, seq as u16, (seq >> 16) as u16]),
        Escape::ThreadStart => out.extend([ESC, CTL_THREAD_START]),
        Escape::ThreadEnd => out.extend([ESC, CTL_THREAD_END]),
        Escape::Signal { signo } => out.extend([ESC, CTL_SIGNAL, signo]),
        Escape::SignalReturn => out.extend([ESC, CTL_SIGNAL_RETURN]),
        Escape::Interrupted { insn } => out.extend([ESC, CTL_INTERRUPTED, insn]),
        Escape::CodeVersion { version } => out.extend([ESC, CTL_CODE_VERSION, version as u16, (version >> 16) as u16]),
        Escape::ExpireAll => out.extend([ESC, CTL_EXPIRE_ALL]),
        Escape::Sync { at, seq } => {
            out.extend([ESC, CTL_SYNC, at]);
            push_u64(seq, out);
        }
        Escape::Call { func, args, ret } => {
            out.extend([ESC, CTL_CALL, func]);
            for v in [args[0], args[1], ret] {
                push_u64(v, out);
            }
        }
        Escape::Return { func, value } => {
            out.extend([ESC, CTL_RETURN, func]);
            push_u64(value, out);
        }
        Escape::Syscall { at, nr, args } => {
            out.extend([ESC, CTL_SYSCALL, at, nr]);
            for v in args {
                push_u64(v, out);
            }
        }
        Escape::SyscallReturn { at, value } => {
            out.extend([ESC, CTL_SYSCALL_RETURN, at]);
            push_u64(value, out);
        }
        Escape::Descriptors { fds } => {
            out.extend([ESC, CTL_DESCRIPTORS, fds[0] as u16, (fds[0] >> 16) as u16, fds[1] as u16, (fds[1] >> 16) as u16])
        }
        Escape::Kernel { write, addr, size } => {
            out.extend([ESC, CTL_KERNEL, if write { KERNEL_WRITE } else { 0 }]);
            push_u64(addr, out);
            out.extend([size as u16, (size >> 16) as u16]);
        }
    }
}

/// Four words, the least significant first.
fn push_u64(v: u64, out: &mut Vec<u16>) {
    out.extend([v as u16, (v >> 16) as u16, (v >> 32) as u16, (v >> 48) as u16]);
}

/// Decodes DEP_c bytes (little-endian words) into items, tracking the H-tag.
#[derive(Clone, Debug)]
pub struct TagDecoder<'a> {
    bytes: &'a [u8],
    pos: usize,
    width: Width,
    hi: u64,
    /// The byte where the last item given began ([`item_word`](Self::item_word)).
    item: usize,
}

impl<'a> TagDecoder<'a> {
    /// A decoder over `bytes` whose H-tag starts as `hi`.
    pub fn new(width: Width, bytes: &'a [u8], hi: u64) -> Result<Self, TagError> {
        if bytes.len() % 2 != 0 {
            return Err(TagError::OddLength(bytes.len()));
        }
        Ok(TagDecoder { bytes, pos: 0, width, hi, item: 0 })
    }

    /// The current H-tag.
    pub fn hi(&self) -> u64 {
        self.hi
    }

    /// Whether the next word is an escape (or the stream has ended): a block's plain
    /// successor is decoded without looking further.
    #[inline]
    pub fn at_escape(&self) -> bool {
        self.bytes.get(self.pos..self.pos + 2).is_none_or(|b| b == [0, 0])
    }

    /// The stream and the byte position of the next item, for a caller that decodes plain
    /// L-tags itself and hands back with [`seek`](Self::seek).
    #[inline]
    pub fn raw(&self) -> (&'a [u8], usize) {
        (self.bytes, self.pos)
    }

    /// Sets the H-tag, for a caller that decoded H changes itself.
    #[inline]
    pub fn set_hi(&mut self, hi: u64) {
        self.hi = hi;
    }

    /// Moves to byte `pos`, which must follow whole items.
    #[inline]
    pub fn seek(&mut self, pos: usize) {
        debug_assert!(pos.is_multiple_of(2) && pos <= self.bytes.len());
        self.pos = pos;
    }

    /// Position of the next item, in words.
    pub fn word_offset(&self) -> usize {
        self.pos / 2
    }

    /// Where the last item [`next_item`](Self::next_item) gave began, in words: its own
    /// first word, after the H-tag changes it took on the way (a fault in a block is named
    /// there, as compiled code, which takes those changes itself, leaves there).
    pub fn item_word(&self) -> usize {
        self.item / 2
    }

    #[inline]
    fn word(&mut self, start: usize) -> Result<u16, TagError> {
        match self.bytes.get(self.pos..self.pos + 2) {
            Some(b) => {
                self.pos += 2;
                Ok(u16::from_le_bytes([b[0], b[1]]))
            }
            None => Err(TagError::Truncated(start / 2)),
        }
    }

    fn u32(&mut self, start: usize) -> Result<u32, TagError> {
        Ok(self.word(start)? as u32 | (self.word(start)? as u32) << 16)
    }

    fn u64(&mut self, start: usize) -> Result<u64, TagError> {
        let mut v = 0u64;
        for k in 0..4 {
            v |= (self.word(start)? as u64) << (16 * k);
        }
        Ok(v)
    }

    /// The next item, `None` at the end of the stream; the one-word block is decoded inline.
    #[inline(always)]
    pub fn next_item(&mut self) -> Result<Option<TagItem>, TagError> {
        if let Some(b) = self.bytes.get(self.pos..self.pos + 2) {
            let w = u16::from_le_bytes([b[0], b[1]]);
            if w != ESC {
                self.item = self.pos;
                self.pos += 2;
                return Ok(Some(TagItem::Block((self.hi << 16) | w as u64)));
            }
        }
        self.next_item_slow()
    }

    #[inline(never)]
    fn next_item_slow(&mut self) -> Result<Option<TagItem>, TagError> {
        loop {
            let start = self.pos;
            if start >= self.bytes.len() {
                return Ok(None);
            }
            let w = self.word(start)?;
            if w != ESC {
                self.item = start;
                return Ok(Some(TagItem::Block((self.hi << 16) | w as u64)));
            }
            let c = self.word(start)?;
            let item = match c {
                ESC => TagItem::Block(self.hi << 16),
                1..=MAX_SHORT_H => {
                    self.hi = (self.hi & !0xffff) | c as u64;
                    continue;
                }
                CTL_SET_HI => {
                    let mut hi = self.word(start)? as u64;
                    if self.width == Width::W64 {
                        hi |= (self.word(start)? as u64) << 16;
                        hi |= (self.word(start)? as u64) << 32;
                    }
                    self.hi = hi;
                    continue;
                }
                CTL_CHUNK_START => {
                    let lo = self.word(start)? as u32;
                    let hi = self.word(start)? as u32;
                    TagItem::Escape(Escape::ChunkStart { seq: lo | (hi << 16) })
                }
                CTL_THREAD_START => TagItem::Escape(Escape::ThreadStart),
                CTL_THREAD_END => TagItem::Escape(Escape::ThreadEnd),
                CTL_SIGNAL => TagItem::Escape(Escape::Signal { signo: self.word(start)? }),
                CTL_SIGNAL_RETURN => TagItem::Escape(Escape::SignalReturn),
                CTL_INTERRUPTED => TagItem::Escape(Escape::Interrupted { insn: self.word(start)? }),
                CTL_CODE_VERSION => {
                    let lo = self.word(start)? as u32;
                    let hi = self.word(start)? as u32;
                    TagItem::Escape(Escape::CodeVersion { version: lo | (hi << 16) })
                }
                CTL_EXPIRE_ALL => TagItem::Escape(Escape::ExpireAll),
                CTL_SYNC => {
                    let at = self.word(start)?;
                    TagItem::Escape(Escape::Sync { at, seq: self.u64(start)? })
                }
                CTL_CALL => {
                    let func = self.word(start)?;
                    let args = [self.u64(start)?, self.u64(start)?];
                    TagItem::Escape(Escape::Call { func, args, ret: self.u64(start)? })
                }
                CTL_RETURN => {
                    let func = self.word(start)?;
                    TagItem::Escape(Escape::Return { func, value: self.u64(start)? })
                }
                CTL_SYSCALL => {
                    let (at, nr) = (self.word(start)?, self.word(start)?);
                    let args = [self.u64(start)?, self.u64(start)?, self.u64(start)?];
                    TagItem::Escape(Escape::Syscall { at, nr, args })
                }
                CTL_SYSCALL_RETURN => {
                    let at = self.word(start)?;
                    TagItem::Escape(Escape::SyscallReturn { at, value: self.u64(start)? })
                }
                CTL_DESCRIPTORS => {
                    let mut fds = [0u32; 2];
                    for fd in &mut fds {
                        *fd = self.u32(start)?;
                    }
                    TagItem::Escape(Escape::Descriptors { fds })
                }
                CTL_KERNEL => {
                    let flags = self.word(start)?;
                    if flags & !KERNEL_WRITE != 0 {
                        return Err(TagError::KernelFlags { flags, offset: start / 2 });
                    }
                    let addr = self.u64(start)?;
                    TagItem::Escape(Escape::Kernel { write: flags & KERNEL_WRITE != 0, addr, size: self.u32(start)? })
                }
            };
            self.item = start;
            return Ok(Some(item));
        }
    }
}

impl Iterator for TagDecoder<'_> {
    type Item = Result<TagItem, TagError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_item().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn words_to_bytes(w: &[u16]) -> Vec<u8> {
        w.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn paper_figure1() {
        let blocks = [0x0804ff48u64, 0x0804ffa4, 0x08050000, 0x08050026, 0x08050048];
        let mut enc = TagEncoder::new(Width::W32, 0x0804);
        for b in blocks {
            enc.block(b);
        }
        assert_eq!(enc.words(), &[0xff48, 0xffa4, 0x0000, 0x0805, 0x0000, 0x0000, 0x0026, 0x0048]);
        let bytes = enc.to_bytes();
        assert_eq!(bytes.len(), 16);
        assert_eq!(bytes, [0x48, 0xff, 0xa4, 0xff, 0, 0, 0x05, 0x08, 0, 0, 0, 0, 0x26, 0, 0x48, 0]);
        let dec: Vec<_> = TagDecoder::new(Width::W32, &bytes, 0x0804).unwrap().map(Result::unwrap).collect();
        assert_eq!(dec, blocks.map(TagItem::Block));
    }

    #[test]
    fn sixty_four_bit_forms() {
        let mut enc = TagEncoder::new(Width::W64, 0);
        enc.block(0x5555_5555_1234); // upper bits change: long form
        enc.block(0x5555_5556_0000); // bits 16..31 change: short form, then L-tag 0
        enc.block(0x5555_fff5_0010); // H16 in the control range: long form
        enc.block(0x5555_fff5_0020);
        assert_eq!(
            enc.words(),
            &[
                0, 0xfff0, 0x5555, 0x5555, 0, 0x1234, //
                0, 0x5556, 0, 0, //
                0, 0xfff0, 0xfff5, 0x5555, 0, 0x0010, //
                0x0020,
            ]
        );
    }

    #[test]
    fn escape_layouts() {
        let mut w = Vec::new();
        push_escape(Escape::ChunkStart { seq: 0x0001_0002 }, &mut w);
        push_escape(Escape::Signal { signo: 11 }, &mut w);
        push_escape(Escape::Interrupted { insn: 3 }, &mut w);
        push_escape(Escape::CodeVersion { version: 7 }, &mut w);
        assert_eq!(w, [0, 0xfff1, 2, 1, 0, 0xfff4, 11, 0, 0xfff6, 3, 0, 0xfff7, 7, 0]);
        // FORMAT.md: `0000 fff9 p q0 q1 q2 q3`, the sequence number little-end first.
        w.clear();
        push_escape(Escape::Sync { at: SYNC_AFTER | 5, seq: 0x0004_0003_0002_0001 }, &mut w);
        assert_eq!(w, [0, 0xfff9, 0x8005, 1, 2, 3, 4]);
        let d: Vec<_> = TagDecoder::new(Width::W64, &words_to_bytes(&w), 0).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(d, [TagItem::Escape(Escape::Sync { at: 0x8005, seq: 0x0004_0003_0002_0001 })]);
        // FORMAT.md: `0000 fffa f a0 a1 ret` and `0000 fffb f v`, each value in 4 words.
        let mut w = Vec::new();
        push_escape(Escape::Call { func: 4, args: [0x0004_0003_0002_0001, 5], ret: 0x7f00_0000_1234 }, &mut w);
        push_escape(Escape::Return { func: 6, value: 0x10 }, &mut w);
        assert_eq!(w, [0, 0xfffa, 4, 1, 2, 3, 4, 5, 0, 0, 0, 0x1234, 0, 0x7f00, 0, 0, 0xfffb, 6, 0x10, 0, 0, 0]);
        let d: Vec<_> = TagDecoder::new(Width::W64, &words_to_bytes(&w), 0).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(
            d,
            [
                TagItem::Escape(Escape::Call { func: 4, args: [0x0004_0003_0002_0001, 5], ret: 0x7f00_0000_1234 }),
                TagItem::Escape(Escape::Return { func: 6, value: 0x10 })
            ]
        );
    }

    #[test]
    fn malformed_streams_are_errors() {
        let e = TagDecoder::new(Width::W64, &words_to_bytes(&[0x10, 0]), 0).unwrap().collect::<Result<Vec<_>, _>>();
        assert_eq!(e, Err(TagError::Truncated(1)));
        let e = TagDecoder::new(Width::W64, &words_to_bytes(&[0, 0xfffe]), 0).unwrap().collect::<Result<Vec<_>, _>>();
        assert_eq!(e, Err(TagError::Truncated(0)));
        let e =
            TagDecoder::new(Width::W64, &words_to_bytes(&[0, CTL_KERNEL, 2, 0, 0, 0, 0, 0, 0]), 0).unwrap().collect::<Result<Vec<_>, _>>();
        assert_eq!(e, Err(TagError::KernelFlags { flags: 2, offset: 0 }));
        let e = TagDecoder::new(Width::W64, &words_to_bytes(&[0, 0xfff0, 1]), 0).unwrap().collect::<Result<Vec<_>, _>>();
        assert_eq!(e, Err(TagError::Truncated(0)));
        assert!(matches!(TagDecoder::new(Width::W64, &[1, 2, 3], 0), Err(TagError::OddLength(3))));
    }

    fn escape_strategy() -> impl Strategy<Value = Escape> {
        prop_oneof![
            any::<u32>().prop_map(|seq| Escape::ChunkStart { seq }),
            Just(Escape::ThreadStart),
            Just(Escape::ThreadEnd),
            any::<u16>().prop_map(|signo| Escape::Signal { signo }),
            Just(Escape::SignalReturn),
            any::<u16>().prop_map(|insn| Escape::Interrupted { insn }),
            any::<u32>().prop_map(|version| Escape::CodeVersion { version }),
            Just(Escape::ExpireAll),
            (any::<u16>(), any::<u64>()).prop_map(|(at, seq)| Escape::Sync { at, seq }),
            (any::<u16>(), any::<[u64; 2]>(), any::<u64>()).prop_map(|(func, args, ret)| Escape::Call { func, args, ret }),
            (any::<u16>(), any::<u64>()).prop_map(|(func, value)| Escape::Return { func, value }),
            (any::<u16>(), any::<u16>(), any::<[u64; 3]>()).prop_map(|(at, nr, args)| Escape::Syscall { at, nr, args }),
            (any::<u16>(), any::<u64>()).prop_map(|(at, value)| Escape::SyscallReturn { at, value }),
            any::<[u32; 2]>().prop_map(|fds| Escape::Descriptors { fds }),
            (any::<bool>(), any::<u64>(), any::<u32>()).prop_map(|(write, addr, size)| Escape::Kernel { write, addr, size }),
        ]
    }

    /// Addresses biased towards the hard cases: zero 16-bit pieces, control-range H-tags, repeats.
    fn addr_strategy(width: Width) -> impl Strategy<Value = u64> {
        let mask = match width {
            Width::W32 => 0xffff_ffffu64,
            Width::W64 => u64::MAX,
        };
        prop_oneof![
            any::<u64>(),
            (any::<u16>(), any::<u16>(), any::<u16>(), any::<u16>()).prop_map(|(a, b, c, d)| {
                let pick = |x: u16| match x % 4 {
                    0 => 0,
                    1 => 0xfff0 | (x >> 12),
                    2 => 0x5555,
                    _ => x,
                };
                pick(a) as u64 | (pick(b) as u64) << 16 | (pick(c) as u64) << 32 | (pick(d) as u64) << 48
            }),
        ]
        .prop_map(move |a| a & mask)
    }

    fn items(width: Width) -> impl Strategy<Value = Vec<TagItem>> {
        proptest::collection::vec(
            prop_oneof![
                4 => addr_strategy(width).prop_map(TagItem::Block),
                1 => escape_strategy().prop_map(TagItem::Escape),
            ],
            0..200,
        )
    }

    fn round_trip(width: Width, start_hi: u64, items: &[TagItem]) {
        let mut enc = TagEncoder::new(width, start_hi);
        for &i in items {
            enc.item(i);
        }
        let bytes = enc.to_bytes();
        let mut dec = TagDecoder::new(width, &bytes, start_hi).unwrap();
        let got: Vec<_> = dec.by_ref().collect::<Result<_, _>>().unwrap();
        assert_eq!(got, items);
        assert_eq!(dec.hi(), enc.hi());
    }

    proptest! {
        #[test]
        fn round_trip_64(items in items(Width::W64), hi in any::<u64>()) {
            round_trip(Width::W64, hi & 0xffff_ffff_ffff, &items);
        }

        #[test]
        fn round_trip_32(items in items(Width::W32), hi in any::<u16>()) {
            round_trip(Width::W32, hi as u64, &items);
        }

        #[test]
        fn one_word_per_block_while_hi_is_unchanged(hi in 1u64..0xffff_ffff_ffff, lows in proptest::collection::vec(1u16.., 1..50)) {
            let mut enc = TagEncoder::new(Width::W64, hi);
            for l in &lows { enc.block(hi << 16 | *l as u64); }
            prop_assert_eq!(enc.words().len(), lows.len());
        }

        #[test]
        fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(d) = TagDecoder::new(Width::W64, &bytes, 0) {
                for _ in d {}
            }
        }
    }
}
