//! The launcher's side of the buffers a client thread shares with it ([`SlabLayout`]), and
//! the socket reader that takes the descriptors coming with frames.

use crate::wire::{SlabLayout, SLOT_FREE};
use std::collections::VecDeque;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU32, Ordering};

/// Why a slab could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum SlabError {
    #[error("malformed slab layout from the client")]
    Layout,
    #[error("a slab frame came without its descriptor")]
    NoDescriptor,
    #[error("the client's slab is {have} bytes, its layout needs {need}")]
    Short { have: u64, need: u64 },
    #[error("mapping the client's slab: {0}")]
    Map(std::io::Error),
}

/// A thread's slab, mapped shared and writable (the launcher writes the control page).
pub struct Slab {
    map: memmap2::MmapRaw,
    layout: SlabLayout,
}

impl Slab {
    /// Maps the memfd `fd` the client sent with a slab frame whose payload is `layout`.
    pub fn map(fd: OwnedFd, layout: &[u8]) -> Result<Slab, SlabError> {
        let layout = SlabLayout::decode(layout).ok_or(SlabError::Layout)?;
        let file = File::from(fd);
        let have = file.metadata().map_err(SlabError::Map)?.len();
        if have < layout.len() {
            return Err(SlabError::Short { have, need: layout.len() });
        }
        let map = memmap2::MmapOptions::new().len(layout.len() as usize).map_raw(&file).map_err(SlabError::Map)?;
        Ok(Slab { map, layout })
    }

    pub fn layout(&self) -> &SlabLayout {
        &self.layout
    }

    fn word(&self, offset: u64) -> &AtomicU32 {
        // SAFETY: the control page is the mapping's first 4096 bytes (layout.len() exceeds
        // them) and every offset used is a 4-byte aligned word in it: a state word below
        // CLOSED, or CLOSED. A page-aligned mapping makes the word aligned.
        unsafe { &*(self.map.as_mut_ptr().add(offset as usize) as *const AtomicU32) }
    }

    /// The first `len` bytes of slot `slot`'s region at `offset` within the slot (0, tags,
    /// tags + values), which `parse_slab_chunk` checked fit it.
    ///
    /// # Safety
    /// The slot is handed to the launcher (the client sent its chunk and leaves it alone
    /// until [`Slab::release`]), and the caller does not release it while the slice lives.
    /// A client breaking that can only change the bytes read, never their extent.
    pub unsafe fn region(&self, slot: u32, offset: u64, len: u64) -> &[u8] {
        debug_assert!(slot < self.layout.slots && offset + len <= self.layout.slot_len());
        let at = self.layout.slot_offset(slot) + offset;
        // SAFETY: at + len is within the mapping (the checks above, made where the chunk
        // frame was parsed), which lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(at as usize), len as usize) }
    }

    /// How many slots other than `slot` the launcher holds (handed over, not yet given
    /// back): how far compression is behind this thread.
    pub fn held_besides(&self, slot: u32) -> u32 {
        (0..self.layout.slots).filter(|&i| i != slot && self.word(4 * i as u64).load(Ordering::Acquire) != SLOT_FREE).count() as u32
    }

    /// Gives slot `slot` back to the client and wakes it if it waits for it.
    pub fn release(&self, slot: u32) {
        let w = self.word(4 * slot as u64);
        w.store(SLOT_FREE, Ordering::Release);
        wake(w);
    }

    /// Tells the client that no more chunks will be read: it stops waiting for slots.
    pub fn close(&self) {
        self.word(SlabLayout::CLOSED).store(1, Ordering::Release);
        for slot in 0..self.layout.slots {
            wake(self.word(4 * slot as u64));
        }
    }
}

/// Wakes whoever waits on `w` (the client's FUTEX_WAIT is not private: it is another
/// process's mapping of the same memory).
fn wake(w: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only reads the address of a live, aligned word of the mapping.
    unsafe { libc::syscall(libc::SYS_futex, w.as_ptr(), libc::FUTEX_WAKE, i32::MAX, 0usize, 0usize, 0u32) };
}

/// Sends the start of `bytes` on the socket `sock` with the descriptor `fd` attached to its
/// first byte (SCM_RIGHTS), retrying an interrupted send; returns how many bytes went (a
/// stream socket may take fewer: the rest follows plainly). MSG_NOSIGNAL: a peer that has
/// gone makes the send fail rather than raise SIGPIPE. The client's side of [`Conn`].
pub fn send_with_descriptor(sock: libc::c_int, bytes: &[u8], fd: libc::c_int) -> std::io::Result<usize> {
    // Room for one descriptor's control message, 8-byte aligned as cmsghdr wants.
    let mut control = [0u64; 4];
    let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
    // SAFETY: msghdr is plain data; every pointer set below is to a live local (`iov` over
    // `bytes`, which sendmsg only reads, and `control`) of the length given, and the CMSG_*
    // helpers stay within `control`, which CMSG_SPACE of one descriptor fits (checked).
    // Exercised by the tests below, the receive.rs slab tests and tests/collector.rs (every
    // recording thread's slab).
    unsafe {
        let space = libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as usize;
        if space > std::mem::size_of_val(&control) {
            return Err(std::io::Error::other("no room for a control message"));
        }
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as usize;
        (libc::CMSG_DATA(cmsg) as *mut libc::c_int).write_unaligned(fd);
        loop {
            let r = libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL);
            if r >= 0 {
                return Ok(r as usize);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Reads a client's stream, keeping the descriptors that arrive with it (SCM_RIGHTS) in
/// arrival order for the frames that announce them. Small reads are served from a buffer:
/// a client sends one frame per block it builds (python3's start-up: 41,000 of some 40
/// bytes), which read one by one took a header's and a payload's system call each.
pub struct Conn {
    pub stream: UnixStream,
    fds: VecDeque<OwnedFd>,
    buf: Box<[u8]>,
    /// The bytes of `buf` received and not yet read.
    pos: usize,
    len: usize,
}

/// Bytes a [`Conn`] receives at once for small reads.
const CONN_BUFFER: usize = 64 << 10;

/// Descriptors one read takes at most (a client sends one per slab frame).
const MAX_FDS: usize = 8;

impl Conn {
    pub fn new(stream: UnixStream) -> Conn {
        Conn { stream, fds: VecDeque::new(), buf: vec![0; CONN_BUFFER].into_boxed_slice(), pos: 0, len: 0 }
    }

    /// The oldest descriptor received and not yet taken.
    pub fn take_fd(&mut self) -> Option<OwnedFd> {
        self.fds.pop_front()
    }

    /// Reads into `buf` from `stream`, as `read` does, adding any descriptors sent with
    /// those bytes to `fds`.
    fn recv(stream: &UnixStream, fds: &mut VecDeque<OwnedFd>, buf: &mut [u8]) -> std::io::Result<usize> {
        // 8-byte aligned room for a control message of MAX_FDS descriptors.
        let mut control = [0u64; 2 + MAX_FDS / 2 + 1];
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
        // SAFETY: msghdr is plain data; its pointers are to live locals of the lengths given
        // (`iov` over `buf`, `control`); the CMSG_* walk stays within the `msg_controllen`
        // bytes the kernel filled, and each SCM_RIGHTS payload holds the descriptors it
        // counts, which this process now owns (each taken once, into an OwnedFd). Exercised
        // by the slab tests below and tests/collector.rs.
        unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = std::mem::size_of_val(&control);
            let n = libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(c) as *const libc::c_int;
                    let count = ((*c).cmsg_len - (data as usize - c as usize)) / std::mem::size_of::<libc::c_int>();
                    for i in 0..count {
                        fds.push_back(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
            if msg.msg_flags & libc::MSG_CTRUNC != 0 {
                return Err(std::io::Error::other("descriptors sent by the client were lost (too many at once)"));
            }
            Ok(n as usize)
        }
    }
}

impl Read for Conn {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.len {
            // (A read as large as the buffer gains nothing from it: a chunk's payload.)
            if out.len() >= self.buf.len() {
                return Self::recv(&self.stream, &mut self.fds, out);
            }
            self.len = Self::recv(&self.stream, &mut self.fds, &mut self.buf)?;
            self.pos = 0;
        }
        let n = out.len().min(self.len - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wire::SLOT_FULL;

    /// A memfd of `layout`, as the client makes it.
    pub(crate) fn memfd(layout: &SlabLayout) -> OwnedFd {
        // SAFETY: a NUL-terminated name; the descriptor returned is ours.
        let fd = unsafe { libc::memfd_create(c"test-slab".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: `fd` is a descriptor this test owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        File::from(fd.try_clone().unwrap()).set_len(layout.len()).unwrap();
        fd
    }

    fn layout() -> SlabLayout {
        SlabLayout { slots: 2, tags: 4096, values: 8192, truth: 0 }
    }

    /// A slab shorter than its layout says, or a layout out of bounds, is refused by name.
    #[test]
    fn bad_slabs_are_refused() {
        let l = layout();
        let fd = memfd(&l);
        File::from(fd.try_clone().unwrap()).set_len(l.len() - 1).unwrap();
        assert!(matches!(Slab::map(fd, &l.encode()), Err(SlabError::Short { need, .. }) if need == l.len()));
        for bad in [
            SlabLayout { slots: 0, ..l },
            SlabLayout { slots: SlabLayout::MAX_SLOTS + 1, ..l },
            SlabLayout { tags: 100, ..l },
            SlabLayout { values: SlabLayout::MAX_REGION + 4096, ..l },
            SlabLayout { truth: 1, ..l },
        ] {
            assert!(matches!(Slab::map(memfd(&l), &bad.encode()), Err(SlabError::Layout)), "{bad:?}");
        }
        assert!(matches!(Slab::map(memfd(&l), &l.encode()[..31]), Err(SlabError::Layout)));
    }

    /// What the client writes into a slot is what the launcher reads; releasing and closing
    /// change the words the client waits on.
    #[test]
    fn slots_are_shared_and_released() {
        let l = layout();
        let fd = memfd(&l);
        let client = memmap2::MmapOptions::new().len(l.len() as usize).map_raw(&File::from(fd.try_clone().unwrap())).unwrap();
        let slab = Slab::map(fd, &l.encode()).unwrap();
        let state = |slot: u64| {
            // SAFETY: a word of the client's view of the control page.
            unsafe { (*(client.as_ptr().add(4 * slot as usize) as *const AtomicU32)).load(Ordering::Acquire) }
        };
        // SAFETY: slot 1's DEP_m region, inside the client's view of the slab.
        unsafe {
            let p = client.as_mut_ptr().add((l.slot_offset(1) + l.tags) as usize);
            p.copy_from_nonoverlapping([1u8, 2, 3].as_ptr(), 3);
            (*(client.as_ptr().add(4) as *const AtomicU32)).store(SLOT_FULL, Ordering::Release);
        }
        // SAFETY: slot 1 is handed over and not released while the slice lives.
        assert_eq!(unsafe { slab.region(1, l.tags, 3) }, &[1, 2, 3]);
        assert_eq!(state(1), SLOT_FULL);
        assert_eq!((slab.held_besides(0), slab.held_besides(1)), (1, 0), "slot 1 held: behind for slot 0's chunk");
        slab.release(1);
        assert_eq!(slab.held_besides(0), 0);
        assert_eq!(state(1), SLOT_FREE);
        assert_eq!(state(SlabLayout::CLOSED / 4), 0);
        slab.close();
        assert_eq!(state(SlabLayout::CLOSED / 4), 1);
    }

    /// Descriptors sent with bytes come out of the reader in order, whatever the reads' sizes.
    #[test]
    fn descriptors_arrive_with_their_bytes() {
        let (a, b) = UnixStream::pair().unwrap();
        let l = layout();
        let fds = [memfd(&l), memfd(&l)];
        for (i, fd) in fds.iter().enumerate() {
            send_fd(&a, &[i as u8; 5], fd.as_raw_fd());
        }
        drop(a);
        let mut conn = Conn::new(b);
        let mut got = Vec::new();
        conn.read_to_end(&mut got).unwrap();
        assert_eq!(got, [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]);
        for fd in &fds {
            let mine = conn.take_fd().expect("a descriptor per send");
            let same = |f: &OwnedFd| File::from(f.try_clone().unwrap()).metadata().unwrap().ino();
            use std::os::unix::fs::MetadataExt;
            assert_eq!(same(&mine), same(fd));
        }
        assert!(conn.take_fd().is_none());
    }

    /// Sends all of `bytes` with `fd` attached, as the client does.
    pub(crate) fn send_fd(s: &UnixStream, bytes: &[u8], fd: libc::c_int) {
        assert_eq!(send_with_descriptor(s.as_raw_fd(), bytes, fd).unwrap(), bytes.len());
    }
}
