//! The user memory each recorded system call's kernel side reads and writes, as Valgrind's
//! syscall wrappers (coregrind/m_syswrap) describe them and as the x86-64 Linux kernel
//! behaves.
//!
//! Everything is computed from the call's arguments, its result and the program's memory as
//! the call left it, all of which are untrusted: lengths are capped by what the kernel
//! accepts, counts beyond sane limits leave their ranges out, and arithmetic that overflows
//! leaves its range out. Nothing here panics.

use libc::c_long;

/// A range of user memory the kernel read or wrote for a system call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelRef {
    pub addr: u64,
    pub size: u32,
    pub write: bool,
}

/// At most this many ranges per call (readv's IOV_MAX is 1024); the rest are left out.
pub const MAX_REFS: usize = 1024;

// Sizes of the x86-64 structures the kernel copies to and from user memory.
const STAT: u64 = 144;
const STATX: u64 = 256;
const TIMESPEC: u64 = 16;
const TIMEVAL: u64 = 16;
const TIMEZONE: u64 = 8;
const TIME_T: u64 = 8;
const UTSNAME: u64 = 390;
const SYSINFO: u64 = 112;
const RUSAGE: u64 = 144;
const TMS: u64 = 32;
const RLIMIT: u64 = 16;
const INT: u64 = 4;
const FD_PAIR: u64 = 8;
const POLLFD: u64 = 8;
/// `struct epoll_event` is packed on x86-64.
const EPOLL_EVENT: u64 = 12;
/// The most events epoll_wait takes (INT_MAX / sizeof(struct epoll_event)).
const EP_MAX_EVENTS: u64 = INT_MAX / EPOLL_EVENT;
const IOVEC: u64 = 16;
/// The kernel's `sigset_t`: calls taking a sigset size reject any other with EINVAL
/// before touching user memory.
const SIGSET: u64 = 8;
/// The kernel's `struct sigaction`: handler, flags, restorer, then the mask.
const SIGACTION: u64 = 24 + SIGSET;
/// pselect6's sixth argument: `{ const sigset_t *ss; size_t ss_len; }`.
const SIGSET_ARG: u64 = 16;
/// `sizeof(struct sockaddr_storage)`: the kernel never copies a longer address.
const SOCKADDR_MAX: u64 = 128;
/// `struct open_how` sizes openat2 accepts (OPEN_HOW_SIZE_VER0 to a page).
const OPEN_HOW_MIN: u64 = 24;
const OPEN_HOW_MAX: u64 = 4096;

/// `struct msghdr` and the offsets of the fields the kernel reads or writes back.
const MSGHDR: u64 = 56;
const MSG_NAME: usize = 0;
const MSG_NAMELEN: usize = 8;
const MSG_IOV: usize = 16;
const MSG_IOVLEN: usize = 24;
const MSG_CONTROL: usize = 32;
const MSG_CONTROLLEN: usize = 40;
const MSG_FLAGS: usize = 48;
/// `struct mmsghdr`: a msghdr, then `unsigned msg_len` and padding.
const MMSGHDR: u64 = 64;
const MSG_LEN: u64 = 56;

/// UIO_MAXIOV: the most iovecs (and, for sendmmsg/recvmmsg, messages) the kernel takes.
const IOV_MAX: u64 = 1024;
/// PATH_MAX, the terminating NUL included.
const PATH_MAX: u64 = 4096;
/// Strings are read in aligned pieces of this size, so that a string ending just before
/// unreadable memory is still found.
const STRING_PIECE: u64 = 256;
/// The most descriptors poll and select are taken to watch (fs.nr_open's default):
/// their arrays are single ranges, so this only bounds nonsense.
const MAX_FDS: u64 = 1 << 20;
/// msg_controllen above this is rejected by sendmsg.
const INT_MAX: u64 = i32::MAX as u64;

const EINTR: i64 = libc::EINTR as i64;
const TIMER_ABSTIME: u64 = libc::TIMER_ABSTIME as u64;
const EPOLL_CTL_DEL: u64 = libc::EPOLL_CTL_DEL as u64;

/// Whether system call `nr` has memory effects [`memory`] knows.
pub(super) fn touches_memory(nr: u64) -> bool {
    handler(nr).is_some()
}

/// Appends to `out` the user memory system call `nr` read and wrote: `args` are its
/// arguments at entry, `result` its return value, `read` a safe read of the program's
/// memory after the call (false where unreadable). Reads come first, then writes; writes
/// only when the call succeeded (but nanosleep's remaining time on EINTR).
pub fn memory(nr: u64, args: &[u64; 6], result: i64, read: &mut dyn FnMut(u64, &mut [u8]) -> bool, out: &mut Vec<KernelRef>) {
    let Some(handle) = handler(nr) else { return };
    let mut refs = Refs { mem: read, out, writes: Vec::new(), pushed: 0, succeeded: result >= 0 };
    handle(&mut refs, &Call { a: *args, result });
    refs.finish();
}

/// A system call as it returned: arguments at entry and result.
struct Call {
    a: [u64; 6],
    result: i64,
}

impl Call {
    /// The result when the call succeeded.
    fn ok(&self) -> Option<u64> {
        u64::try_from(self.result).ok()
    }

    /// How many bytes the call says it transferred, at most `limit` (the buffer's length:
    /// e.g. recv with MSG_TRUNC returns more than it wrote); 0 when it failed.
    fn count(&self, limit: u64) -> u64 {
        self.ok().map_or(0, |n| n.min(limit))
    }
}

/// An `int` argument: the kernel ignores the register's upper half and rejects negatives.
fn int(arg: u64) -> Option<u64> {
    // Truncation is the point: only the low 32 bits are the argument.
    u64::try_from(arg as u32 as i32).ok()
}

/// An `unsigned int` argument: the register's low half.
fn uint(arg: u64) -> u64 {
    u64::from(arg as u32)
}

/// The address `off` bytes into the object at `base`, or null (left out) if it overflows.
fn field(base: u64, off: u64) -> u64 {
    // A null base stays null, so that a field of a left-out object is left out too.
    if base == 0 {
        return 0;
    }
    base.checked_add(off).unwrap_or(0)
}

/// The little-endian u64 at `at` in `bytes` (0 if out of bounds, which callers never are).
fn le64(bytes: &[u8], at: usize) -> u64 {
    bytes.get(at..at + 8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes)
}

/// The little-endian u32 at `at` in `bytes` (0 if out of bounds).
fn le32(bytes: &[u8], at: usize) -> u32 {
    bytes.get(at..at + 4).and_then(|b| b.try_into().ok()).map_or(0, u32::from_le_bytes)
}

/// What records one call's ranges: `mem` to read the program, the reads straight into
/// `out`, the writes held back so that they follow every read.
struct Refs<'m> {
    mem: &'m mut dyn FnMut(u64, &mut [u8]) -> bool,
    out: &'m mut Vec<KernelRef>,
    writes: Vec<KernelRef>,
    /// Ranges pushed for this call, reads and writes, against [`MAX_REFS`].
    pushed: usize,
    succeeded: bool,
}

impl Refs<'_> {
    /// Whether this call's [`MAX_REFS`] ranges are all used.
    fn full(&self) -> bool {
        self.pushed >= MAX_REFS
    }

    /// Records `len` bytes at `addr`, in u32-sized pieces; null, empty and overflowing
    /// ranges are left out.
    fn push(&mut self, addr: u64, len: u64, write: bool) {
        if addr == 0 || addr.checked_add(len).is_none() {
            return;
        }
        let (mut at, mut left) = (addr, len);
        while left > 0 && !self.full() {
            let size = u32::try_from(left).unwrap_or(u32::MAX);
            let r = KernelRef { addr: at, size, write };
            if write {
                self.writes.push(r);
            } else {
                self.out.push(r);
            }
            self.pushed += 1;
            // Cannot overflow: addr + len was checked.
            at += u64::from(size);
            left -= u64::from(size);
        }
    }

    /// Records that the kernel read `len` bytes at `addr`.
    fn read(&mut self, addr: u64, len: u64) {
        self.push(addr, len, false);
    }

    /// Records that the kernel wrote `len` bytes at `addr`, if the call succeeded.
    fn write(&mut self, addr: u64, len: u64) {
        if self.succeeded {
            self.push(addr, len, true);
        }
    }

    /// Records a write the kernel makes even though the call failed.
    fn write_anyway(&mut self, addr: u64, len: u64) {
        self.push(addr, len, true);
    }

    /// Appends the writes after the reads.
    fn finish(self) {
        self.out.extend(self.writes);
    }

    /// Reads the program's memory at `addr` into `buf`; false if null, overflowing or
    /// unreadable.
    fn load(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        let fits = u64::try_from(buf.len()).ok().and_then(|n| addr.checked_add(n)).is_some();
        addr != 0 && fits && (self.mem)(addr, buf)
    }

    /// The u32 at `addr` as the call left it.
    fn u32_at(&mut self, addr: u64) -> Option<u32> {
        let mut b = [0; 4];
        self.load(addr, &mut b).then(|| u32::from_le_bytes(b))
    }

    /// The u64 at `addr` as the call left it.
    fn u64_at(&mut self, addr: u64) -> Option<u64> {
        let mut b = [0; 8];
        self.load(addr, &mut b).then(|| u64::from_le_bytes(b))
    }

    /// Records the read of the NUL-terminated path at `addr`, NUL included; left out if
    /// null, unreadable or longer than PATH_MAX.
    fn path(&mut self, addr: u64) {
        if let Some(len) = self.strlen(addr) {
            self.read(addr, len + 1);
        }
    }

    /// The length of the string at `addr` if it ends within PATH_MAX bytes.
    fn strlen(&mut self, addr: u64) -> Option<u64> {
        let mut piece = [0; STRING_PIECE as usize];
        let mut len = 0;
        while len < PATH_MAX {
            let at = addr.checked_add(len)?;
            // Aligned pieces never cross a page, so readable bytes are never lost to an
            // unreadable neighbour.
            let n = (STRING_PIECE - at % STRING_PIECE).min(PATH_MAX - len);
            let buf = piece.get_mut(..usize::try_from(n).ok()?)?;
            if !self.load(at, buf) {
                return None;
            }
            if let Some(nul) = buf.iter().position(|&b| b == 0) {
                return u64::try_from(nul).ok().map(|nul| len + nul);
            }
            len += n;
        }
        None
    }

    /// Records the read of `count` iovecs at `addr` and returns them (base, length), or
    /// None if the count is beyond IOV_MAX (the kernel's EINVAL), zero or unreadable.
    fn iovecs(&mut self, addr: u64, count: u64) -> Option<Vec<(u64, u64)>> {
        if count == 0 || count > IOV_MAX {
            return None;
        }
        self.read(addr, count * IOVEC);
        let mut raw = vec![0; usize::try_from(count * IOVEC).ok()?];
        if !self.load(addr, &mut raw) {
            return None;
        }
        Some(raw.chunks_exact(IOVEC as usize).map(|e| (le64(e, 0), le64(e, 8))).collect())
    }

    /// Records the buffers of `iovs` in order, filled up to `total` bytes.
    fn buffers(&mut self, iovs: &[(u64, u64)], total: u64, write: bool) {
        let mut left = total;
        for &(base, len) in iovs {
            if left == 0 || self.full() {
                break;
            }
            let n = len.min(left);
            if write {
                self.write(base, n);
            } else {
                self.read(base, n);
            }
            left -= n;
        }
    }

    /// Records an address the kernel fills (accept, getsockname, recvfrom, ...): it reads
    /// the length at `lenp`, writes back the address's full length there, and copies the
    /// address truncated to the length passed in.
    fn sockaddr_out(&mut self, addr: u64, lenp: u64) {
        self.read(lenp, INT);
        if !self.succeeded {
            return;
        }
        self.write(lenp, INT);
        // The length passed in is overwritten by now; the kernel's addresses are never
        // longer than sockaddr_storage, so that bounds the copy instead.
        if let Some(len) = self.u32_at(lenp) {
            self.write(addr, u64::from(len).min(SOCKADDR_MAX));
        }
    }

    /// Records the read of a signal mask of `size` bytes at `set`.
    fn sigmask(&mut self, set: u64, size: u64) {
        if size == SIGSET {
            self.read(set, SIGSET);
        }
    }
}

/// What records one system call's ranges.
type Handler = fn(&mut Refs<'_>, &Call);

/// The handler of system call `nr`, if its memory effects are known.
#[allow(non_upper_case_globals)] // libc's names for the numbers
fn handler(nr: u64) -> Option<Handler> {
    use libc::{
        SYS_accept, SYS_accept4, SYS_access, SYS_bind, SYS_chdir, SYS_chmod, SYS_chown, SYS_clock_getres, SYS_clock_gettime,
        SYS_clock_nanosleep, SYS_connect, SYS_creat, SYS_epoll_ctl, SYS_epoll_pwait, SYS_epoll_pwait2, SYS_epoll_wait, SYS_faccessat,
        SYS_faccessat2, SYS_fchmodat, SYS_fchownat, SYS_fstat, SYS_getcwd, SYS_getdents, SYS_getdents64, SYS_getpeername, SYS_getrandom,
        SYS_getrlimit, SYS_getrusage, SYS_getsockname, SYS_getsockopt, SYS_gettimeofday, SYS_lstat, SYS_mkdir, SYS_mkdirat, SYS_nanosleep,
        SYS_newfstatat, SYS_open, SYS_openat, SYS_openat2, SYS_pipe, SYS_pipe2, SYS_poll, SYS_ppoll, SYS_pread64, SYS_preadv, SYS_preadv2,
        SYS_prlimit64, SYS_pselect6, SYS_pwrite64, SYS_pwritev, SYS_pwritev2, SYS_read, SYS_readlink, SYS_readlinkat, SYS_readv,
        SYS_recvfrom, SYS_recvmmsg, SYS_recvmsg, SYS_rename, SYS_renameat, SYS_renameat2, SYS_rmdir, SYS_rt_sigaction, SYS_rt_sigprocmask,
        SYS_sched_getaffinity, SYS_select, SYS_sendmmsg, SYS_sendmsg, SYS_sendto, SYS_setrlimit, SYS_setsockopt, SYS_socketpair, SYS_stat,
        SYS_statx, SYS_sysinfo, SYS_time, SYS_times, SYS_truncate, SYS_uname, SYS_unlink, SYS_unlinkat, SYS_utimensat, SYS_wait4,
        SYS_write, SYS_writev,
    };
    let n = c_long::try_from(nr).ok()?;
    let h: Handler = match n {
        SYS_open | SYS_creat | SYS_access | SYS_unlink | SYS_mkdir | SYS_rmdir | SYS_chdir | SYS_truncate | SYS_chmod | SYS_chown => {
            |r, c| r.path(c.a[0])
        }
        SYS_openat | SYS_faccessat | SYS_faccessat2 | SYS_unlinkat | SYS_mkdirat | SYS_fchmodat | SYS_fchownat => |r, c| r.path(c.a[1]),
        SYS_openat2 => openat2,
        SYS_rename => |r, c| {
            r.path(c.a[0]);
            r.path(c.a[1]);
        },
        SYS_renameat | SYS_renameat2 => |r, c| {
            r.path(c.a[1]);
            r.path(c.a[3]);
        },
        SYS_stat | SYS_lstat => |r, c| {
            r.path(c.a[0]);
            r.write(c.a[1], STAT);
        },
        SYS_newfstatat => |r, c| {
            r.path(c.a[1]);
            r.write(c.a[2], STAT);
        },
        SYS_statx => |r, c| {
            r.path(c.a[1]);
            r.write(c.a[4], STATX);
        },
        SYS_fstat => |r, c| r.write(c.a[1], STAT),
        SYS_readlink => |r, c| {
            r.path(c.a[0]);
            r.write(c.a[1], c.count(c.a[2]));
        },
        SYS_readlinkat => |r, c| {
            r.path(c.a[1]);
            r.write(c.a[2], c.count(c.a[3]));
        },
        SYS_utimensat => |r, c| {
            r.path(c.a[1]);
            r.read(c.a[2], 2 * TIMESPEC);
        },
        SYS_read | SYS_pread64 | SYS_getdents | SYS_getdents64 => |r, c| r.write(c.a[1], c.count(c.a[2])),
        SYS_write | SYS_pwrite64 => |r, c| r.read(c.a[1], c.count(c.a[2])),
        SYS_readv | SYS_preadv | SYS_preadv2 => |r, c| vectored(r, c, true),
        SYS_writev | SYS_pwritev | SYS_pwritev2 => |r, c| vectored(r, c, false),
        SYS_getrandom | SYS_getcwd => |r, c| r.write(c.a[0], c.count(c.a[1])),
        SYS_sched_getaffinity => |r, c| r.write(c.a[2], c.count(c.a[1])),
        SYS_recvfrom => recvfrom,
        SYS_sendto => sendto,
        SYS_sendmsg => |r, c| send_msg(r, c.a[1], c.ok()),
        SYS_recvmsg => |r, c| recv_msg(r, c.a[1], c.ok()),
        SYS_sendmmsg => sendmmsg,
        SYS_recvmmsg => recvmmsg,
        SYS_connect | SYS_bind => |r, c| r.read(c.a[1], sockaddr_len(c.a[2])),
        SYS_accept | SYS_accept4 => |r, c| {
            // accept leaves the length alone when not asked for the address.
            if c.a[1] != 0 {
                r.sockaddr_out(c.a[1], c.a[2]);
            }
        },
        SYS_getsockname | SYS_getpeername => |r, c| r.sockaddr_out(c.a[1], c.a[2]),
        SYS_getsockopt => getsockopt,
        SYS_setsockopt => |r, c| r.read(c.a[3], int(c.a[4]).unwrap_or(0)),
        SYS_clock_gettime | SYS_clock_getres => |r, c| r.write(c.a[1], TIMESPEC),
        SYS_gettimeofday => |r, c| {
            r.write(c.a[0], TIMEVAL);
            r.write(c.a[1], TIMEZONE);
        },
        SYS_time => |r, c| r.write(c.a[0], TIME_T),
        SYS_nanosleep => |r, c| sleep(r, c, c.a[0], c.a[1]),
        SYS_clock_nanosleep => |r, c| {
            // An absolute sleep has no remaining time to report.
            let rem = if uint(c.a[1]) & TIMER_ABSTIME == 0 { c.a[3] } else { 0 };
            sleep(r, c, c.a[2], rem);
        },
        SYS_pipe | SYS_pipe2 => |r, c| r.write(c.a[0], FD_PAIR),
        SYS_socketpair => |r, c| r.write(c.a[3], FD_PAIR),
        SYS_poll => |r, c| poll(r, c),
        SYS_ppoll => |r, c| {
            poll(r, c);
            r.read(c.a[2], TIMESPEC);
            r.sigmask(c.a[3], c.a[4]);
            // The kernel writes the time left back (glibc hands it a copy).
            r.write(c.a[2], TIMESPEC);
        },
        SYS_select => |r, c| {
            fd_sets(r, c);
            r.read(c.a[4], TIMEVAL);
            r.write(c.a[4], TIMEVAL);
        },
        SYS_pselect6 => pselect6,
        SYS_epoll_ctl => |r, c| {
            // Only DEL takes no event.
            if uint(c.a[1]) != EPOLL_CTL_DEL {
                r.read(c.a[3], EPOLL_EVENT);
            }
        },
        SYS_epoll_wait => |r, c| epoll_events(r, c),
        SYS_epoll_pwait => |r, c| {
            r.sigmask(c.a[4], c.a[5]);
            epoll_events(r, c);
        },
        SYS_epoll_pwait2 => |r, c| {
            r.read(c.a[3], TIMESPEC);
            r.sigmask(c.a[4], c.a[5]);
            epoll_events(r, c);
        },
        SYS_uname => |r, c| r.write(c.a[0], UTSNAME),
        SYS_sysinfo => |r, c| r.write(c.a[0], SYSINFO),
        SYS_getrusage => |r, c| r.write(c.a[1], RUSAGE),
        SYS_times => |r, c| r.write(c.a[0], TMS),
        SYS_getrlimit => |r, c| r.write(c.a[1], RLIMIT),
        SYS_setrlimit => |r, c| r.read(c.a[1], RLIMIT),
        SYS_prlimit64 => |r, c| {
            r.read(c.a[2], RLIMIT);
            r.write(c.a[3], RLIMIT);
        },
        SYS_rt_sigaction => |r, c| {
            if c.a[3] == SIGSET {
                r.read(c.a[1], SIGACTION);
                r.write(c.a[2], SIGACTION);
            }
        },
        SYS_rt_sigprocmask => |r, c| {
            if c.a[3] == SIGSET {
                r.read(c.a[1], SIGSET);
                r.write(c.a[2], SIGSET);
            }
        },
        SYS_wait4 => |r, c| {
            // Nothing is written when no child changed state (WNOHANG's 0).
            if c.result > 0 {
                r.write(c.a[1], INT);
                r.write(c.a[3], RUSAGE);
            }
        },
        _ => return None,
    };
    Some(h)
}

/// The length of a socket address passed in: the kernel rejects negative ones and ones
/// longer than sockaddr_storage.
fn sockaddr_len(arg: u64) -> u64 {
    int(arg).filter(|&n| n <= SOCKADDR_MAX).unwrap_or(0)
}

/// openat2: the path and the `struct open_how` of the size given.
fn openat2(r: &mut Refs<'_>, c: &Call) {
    r.path(c.a[1]);
    if (OPEN_HOW_MIN..=OPEN_HOW_MAX).contains(&c.a[3]) {
        r.read(c.a[2], c.a[3]);
    }
}

/// readv and writev and their kin: the iovec array, then the buffers up to the result
/// (`into_user`: written, as readv does; else read).
fn vectored(r: &mut Refs<'_>, c: &Call, into_user: bool) {
    let iovs = r.iovecs(c.a[1], c.a[2]);
    if let (Some(iovs), Some(n)) = (iovs, c.ok()) {
        r.buffers(&iovs, n, into_user);
    }
}

/// nanosleep and clock_nanosleep: the request, and the time left when a signal cut the
/// sleep short (then the call fails with EINTR).
fn sleep(r: &mut Refs<'_>, c: &Call, req: u64, rem: u64) {
    r.read(req, TIMESPEC);
    if c.result == -EINTR {
        r.write_anyway(rem, TIMESPEC);
    }
}

/// recvfrom: the bytes received, and the sender's address if asked for.
fn recvfrom(r: &mut Refs<'_>, c: &Call) {
    r.write(c.a[1], c.count(c.a[2]));
    if c.a[4] != 0 {
        r.sockaddr_out(c.a[4], c.a[5]);
    }
}

/// sendto: the bytes sent and the destination address.
fn sendto(r: &mut Refs<'_>, c: &Call) {
    r.read(c.a[1], c.count(c.a[2]));
    if c.a[4] != 0 {
        r.read(c.a[4], sockaddr_len(c.a[5]));
    }
}

/// getsockopt: the option's length in and out, and the value as long as the kernel left it.
fn getsockopt(r: &mut Refs<'_>, c: &Call) {
    let (optval, optlen) = (c.a[3], c.a[4]);
    r.read(optlen, INT);
    if !r.succeeded {
        return;
    }
    r.write(optlen, INT);
    if let Some(len) = r.u32_at(optlen) {
        r.write(optval, int(u64::from(len)).unwrap_or(0));
    }
}

/// The fields of a `struct msghdr` the kernel uses.
struct Msg {
    name: u64,
    namelen: u64,
    iov: u64,
    iovlen: u64,
    control: u64,
    controllen: u64,
}

/// The msghdr at `addr` as the call left it.
fn msghdr(r: &mut Refs<'_>, addr: u64) -> Option<Msg> {
    let mut b = [0; MSGHDR as usize];
    r.load(addr, &mut b).then(|| Msg {
        name: le64(&b, MSG_NAME),
        namelen: u64::from(le32(&b, MSG_NAMELEN)),
        iov: le64(&b, MSG_IOV),
        iovlen: le64(&b, MSG_IOVLEN),
        control: le64(&b, MSG_CONTROL),
        controllen: le64(&b, MSG_CONTROLLEN),
    })
}

/// sendmsg's message at `hdr`: the header, the destination, the iovecs, the `sent` bytes
/// (None: the call failed) and the control data.
fn send_msg(r: &mut Refs<'_>, hdr: u64, sent: Option<u64>) {
    r.read(hdr, MSGHDR);
    let Some(m) = msghdr(r, hdr) else { return };
    // The kernel rejects a negative name length and cuts a long one to sockaddr_storage.
    let namelen = int(m.namelen).map_or(0, |n| n.min(SOCKADDR_MAX));
    r.read(m.name, namelen);
    let iovs = r.iovecs(m.iov, m.iovlen);
    if let (Some(iovs), Some(n)) = (iovs, sent) {
        r.buffers(&iovs, n, false);
    }
    if m.controllen <= INT_MAX {
        r.read(m.control, m.controllen);
    }
}

/// recvmsg's message at `hdr`: the header and iovecs read; the `received` bytes (None: the
/// call failed), the sender's address, the control data and the header's msg_namelen,
/// msg_controllen and msg_flags written back, as long as the kernel left them.
fn recv_msg(r: &mut Refs<'_>, hdr: u64, received: Option<u64>) {
    r.read(hdr, MSGHDR);
    let Some(m) = msghdr(r, hdr) else { return };
    let iovs = r.iovecs(m.iov, m.iovlen);
    let Some(n) = received else { return };
    if let Some(iovs) = iovs {
        r.buffers(&iovs, n, true);
    }
    // The kernel writes the address and its length only when given somewhere to put it.
    if m.name != 0 {
        r.write(m.name, m.namelen.min(SOCKADDR_MAX));
        r.write(field(hdr, MSG_NAMELEN as u64), INT);
    }
    r.write(m.control, m.controllen);
    r.write(field(hdr, MSG_CONTROLLEN as u64), 8);
    r.write(field(hdr, MSG_FLAGS as u64), INT);
}

/// How many of sendmmsg's or recvmmsg's messages went through: the result, within the
/// vector's length (which the kernel cuts to UIO_MAXIOV).
fn messages(c: &Call) -> u64 {
    c.count(uint(c.a[2]).min(IOV_MAX))
}

/// Each message sendmmsg or recvmmsg passed, as `msg` (sendmsg's or recvmsg's) takes its
/// header and byte count, then its msg_len written.
fn each_message(r: &mut Refs<'_>, c: &Call, msg: fn(&mut Refs<'_>, u64, Option<u64>)) {
    for i in 0..messages(c) {
        let hdr = field(c.a[1], i * MMSGHDR);
        let len = field(hdr, MSG_LEN);
        let bytes = r.u32_at(len).map(u64::from);
        msg(r, hdr, bytes);
        r.write(len, INT);
        if r.full() {
            break;
        }
    }
}

/// sendmmsg: each message sent like sendmsg's, and its msg_len written.
fn sendmmsg(r: &mut Refs<'_>, c: &Call) {
    each_message(r, c, send_msg);
}

/// recvmmsg: the timeout, each message received like recvmsg's and its msg_len written.
fn recvmmsg(r: &mut Refs<'_>, c: &Call) {
    let timeout = c.a[4];
    r.read(timeout, TIMESPEC);
    each_message(r, c, recv_msg);
    // The kernel writes the time left back once something was received.
    if c.result > 0 {
        r.write(timeout, TIMESPEC);
    }
}

/// poll and ppoll: the pollfd array read, and written back (revents).
fn poll(r: &mut Refs<'_>, c: &Call) {
    let nfds = uint(c.a[1]);
    if nfds <= MAX_FDS {
        r.read(c.a[0], nfds * POLLFD);
        r.write(c.a[0], nfds * POLLFD);
    }
}

/// select and pselect6: each descriptor set given, read and written back.
fn fd_sets(r: &mut Refs<'_>, c: &Call) {
    let Some(nfds) = int(c.a[0]).filter(|&n| n <= MAX_FDS) else { return };
    let bytes = nfds.div_ceil(64) * 8;
    for &set in &c.a[1..4] {
        r.read(set, bytes);
        r.write(set, bytes);
    }
}

/// pselect6: the sets, the timeout (read, and the time left written back) and the
/// `{ sigset pointer, size }` argument with the mask it points to.
fn pselect6(r: &mut Refs<'_>, c: &Call) {
    fd_sets(r, c);
    r.read(c.a[4], TIMESPEC);
    let arg = c.a[5];
    r.read(arg, SIGSET_ARG);
    if let (Some(set), Some(size)) = (r.u64_at(arg), r.u64_at(field(arg, 8))) {
        r.sigmask(set, size);
    }
    r.write(c.a[4], TIMESPEC);
}

/// epoll_wait and its kin: the events returned, within maxevents (an int the kernel
/// rejects when not positive or above EP_MAX_EVENTS).
fn epoll_events(r: &mut Refs<'_>, c: &Call) {
    let max = int(c.a[2]).filter(|&m| m <= EP_MAX_EVENTS).unwrap_or(0);
    let n = c.count(max);
    r.write(c.a[1], n.checked_mul(EPOLL_EVENT).unwrap_or(0));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    /// Where the fake memory is mapped.
    const BASE: u64 = 0x10_0000;

    /// A program's memory: `bytes` at `BASE`, unreadable elsewhere.
    struct Fake {
        bytes: Vec<u8>,
    }

    impl Fake {
        /// `size` bytes, none of them NUL (so strings are unterminated unless put).
        fn new(size: usize) -> Self {
            Fake { bytes: vec![0xaa; size] }
        }

        fn put(&mut self, addr: u64, data: &[u8]) {
            let off = usize::try_from(addr - BASE).unwrap();
            self.bytes[off..off + data.len()].copy_from_slice(data);
        }

        fn put_u64(&mut self, addr: u64, v: u64) {
            self.put(addr, &v.to_le_bytes());
        }

        fn put_u32(&mut self, addr: u64, v: u32) {
            self.put(addr, &v.to_le_bytes());
        }

        fn put_iovecs(&mut self, addr: u64, iovs: &[(u64, u64)]) {
            for (i, &(base, len)) in iovs.iter().enumerate() {
                self.put_u64(addr + 16 * i as u64, base);
                self.put_u64(addr + 16 * i as u64 + 8, len);
            }
        }

        /// A msghdr at `hdr` with these fields.
        fn put_msghdr(&mut self, hdr: u64, name: (u64, u32), iov: (u64, u64), control: (u64, u64)) {
            self.put_u64(hdr, name.0);
            self.put_u32(hdr + 8, name.1);
            self.put_u64(hdr + 16, iov.0);
            self.put_u64(hdr + 24, iov.1);
            self.put_u64(hdr + 32, control.0);
            self.put_u64(hdr + 40, control.1);
            self.put_u32(hdr + 48, 0);
        }

        fn reader(&self) -> impl FnMut(u64, &mut [u8]) -> bool + '_ {
            move |addr, buf| {
                let Some(off) = addr.checked_sub(BASE).and_then(|o| usize::try_from(o).ok()) else { return false };
                match self.bytes.get(off..off.saturating_add(buf.len())) {
                    Some(src) if src.len() == buf.len() => {
                        buf.copy_from_slice(src);
                        true
                    }
                    _ => false,
                }
            }
        }
    }

    /// The ranges of call `nr` over `mem`.
    fn run(mem: &Fake, nr: c_long, args: [u64; 6], result: i64) -> Vec<KernelRef> {
        let mut out = Vec::new();
        memory(nr as u64, &args, result, &mut mem.reader(), &mut out);
        out
    }

    fn r(addr: u64, size: u32) -> KernelRef {
        KernelRef { addr, size, write: false }
    }

    fn w(addr: u64, size: u32) -> KernelRef {
        KernelRef { addr, size, write: true }
    }

    const EBADF: i64 = -(libc::EBADF as i64);

    #[test]
    fn read_and_write() {
        let mem = Fake::new(0x1000);
        assert_eq!(run(&mem, libc::SYS_read, [3, BASE, 100, 0, 0, 0], 40), [w(BASE, 40)]);
        assert_eq!(run(&mem, libc::SYS_read, [3, BASE, 100, 0, 0, 0], EBADF), []);
        assert_eq!(run(&mem, libc::SYS_read, [3, BASE, 100, 0, 0, 0], 0), []);
        // A result beyond the buffer (it never is) is capped by the buffer.
        assert_eq!(run(&mem, libc::SYS_pread64, [3, BASE, 10, 0, 0, 0], 40), [w(BASE, 10)]);
        assert_eq!(run(&mem, libc::SYS_write, [3, BASE, 100, 0, 0, 0], 30), [r(BASE, 30)]);
        assert_eq!(run(&mem, libc::SYS_write, [3, BASE, 100, 0, 0, 0], EBADF), []);
        assert_eq!(run(&mem, libc::SYS_read, [3, 0, 100, 0, 0, 0], 40), [], "null buffer");
    }

    #[test]
    fn readv_fills_iovecs_in_order() {
        let mut mem = Fake::new(0x1000);
        let (a, b) = (BASE + 0x100, BASE + 0x200);
        mem.put_iovecs(BASE, &[(a, 10), (b, 20)]);
        assert_eq!(run(&mem, libc::SYS_readv, [3, BASE, 2, 0, 0, 0], 15), [r(BASE, 32), w(a, 10), w(b, 5)]);
        assert_eq!(run(&mem, libc::SYS_preadv2, [3, BASE, 2, 0, 0, 0], 30), [r(BASE, 32), w(a, 10), w(b, 20)]);
        // The array is read even when the call fails.
        assert_eq!(run(&mem, libc::SYS_readv, [3, BASE, 2, 0, 0, 0], EBADF), [r(BASE, 32)]);
        assert_eq!(run(&mem, libc::SYS_writev, [3, BASE, 2, 0, 0, 0], 12), [r(BASE, 32), r(a, 10), r(b, 2)]);
        // An unreadable array: only its read is known.
        assert_eq!(run(&mem, libc::SYS_readv, [3, BASE + 0xff8, 2, 0, 0, 0], 15), [r(BASE + 0xff8, 32)]);
    }

    #[test]
    fn iovec_count_over_the_limit() {
        let mut mem = Fake::new(0x10000);
        mem.put_iovecs(BASE, &[(BASE + 0x8000, 1); 1025]);
        assert_eq!(run(&mem, libc::SYS_readv, [3, BASE, 1025, 0, 0, 0], 1025), []);
        assert_eq!(run(&mem, libc::SYS_writev, [3, BASE, u64::MAX, 0, 0, 0], 1), []);
        assert_eq!(run(&mem, libc::SYS_readv, [3, BASE, 0, 0, 0, 0], 0), []);
    }

    #[test]
    fn recvmsg_writes_back_name_control_and_fields() {
        let mut mem = Fake::new(0x1000);
        let (hdr, name, iov, buf, control) = (BASE, BASE + 0x100, BASE + 0x200, BASE + 0x300, BASE + 0x400);
        // As the call left it: a 16-byte address and 24 bytes of control data.
        mem.put_msghdr(hdr, (name, 16), (iov, 1), (control, 24));
        mem.put_iovecs(iov, &[(buf, 100)]);
        let args = [3, hdr, 0, 0, 0, 0];
        let reads = [r(hdr, 56), r(iov, 16)];
        let writes = [w(buf, 50), w(name, 16), w(hdr + 8, 4), w(control, 24), w(hdr + 40, 8), w(hdr + 48, 4)];
        assert_eq!(run(&mem, libc::SYS_recvmsg, args, 50), [&reads[..], &writes[..]].concat());
        assert_eq!(run(&mem, libc::SYS_recvmsg, args, -(libc::EAGAIN as i64)), reads);
        // No name asked for: neither it nor its length is written.
        mem.put_msghdr(hdr, (0, 0), (iov, 1), (control, 0));
        assert_eq!(run(&mem, libc::SYS_recvmsg, args, 7), [r(hdr, 56), r(iov, 16), w(buf, 7), w(hdr + 40, 8), w(hdr + 48, 4)]);
    }

    #[test]
    fn sendmsg_reads_everything() {
        let mut mem = Fake::new(0x1000);
        let (hdr, name, iov, buf, control) = (BASE, BASE + 0x100, BASE + 0x200, BASE + 0x300, BASE + 0x400);
        mem.put_msghdr(hdr, (name, 110), (iov, 2), (control, 20));
        mem.put_iovecs(iov, &[(buf, 4), (buf + 0x10, 8)]);
        let sent = [r(hdr, 56), r(name, 110), r(iov, 32), r(buf, 4), r(buf + 0x10, 2), r(control, 20)];
        assert_eq!(run(&mem, libc::SYS_sendmsg, [3, hdr, 0, 0, 0, 0], 6), sent);
        assert_eq!(run(&mem, libc::SYS_sendmsg, [3, hdr, 0, 0, 0, 0], EBADF), [r(hdr, 56), r(name, 110), r(iov, 32), r(control, 20)]);
        // A name longer than sockaddr_storage is cut to it.
        mem.put_msghdr(hdr, (name, 4000), (iov, 2), (0, 0));
        assert_eq!(run(&mem, libc::SYS_sendmsg, [3, hdr, 0, 0, 0, 0], EBADF), [r(hdr, 56), r(name, 128), r(iov, 32)]);
    }

    #[test]
    fn mmsg_treats_each_message_sent() {
        let mut mem = Fake::new(0x1000);
        let (vec, iov, buf) = (BASE, BASE + 0x200, BASE + 0x300);
        for i in 0..3 {
            mem.put_msghdr(vec + 64 * i, (0, 0), (iov + 16 * i, 1), (0, 0));
            mem.put_u32(vec + 64 * i + 56, 5 + i as u32);
            mem.put_iovecs(iov + 16 * i, &[(buf + 0x10 * i, 16)]);
        }
        let timeout = BASE + 0x800;
        let out = run(&mem, libc::SYS_recvmmsg, [3, vec, 3, 0, timeout, 0], 2);
        let reads = [r(timeout, 16), r(vec, 56), r(iov, 16), r(vec + 64, 56), r(iov + 16, 16)];
        let first = [w(buf, 5), w(vec + 40, 8), w(vec + 48, 4), w(vec + 56, 4)];
        let second = [w(buf + 0x10, 6), w(vec + 64 + 40, 8), w(vec + 64 + 48, 4), w(vec + 64 + 56, 4)];
        assert_eq!(out, [&reads[..], &first[..], &second[..], &[w(timeout, 16)]].concat());
        let out = run(&mem, libc::SYS_sendmmsg, [3, vec, 3, 0, 0, 0], 1);
        assert_eq!(out, [r(vec, 56), r(iov, 16), r(buf, 5), w(vec + 56, 4)]);
        assert_eq!(run(&mem, libc::SYS_sendmmsg, [3, vec, 3, 0, 0, 0], EBADF), []);
    }

    #[test]
    fn socket_addresses() {
        let mut mem = Fake::new(0x1000);
        let (buf, addr, lenp) = (BASE, BASE + 0x100, BASE + 0x200);
        mem.put_u32(lenp, 16);
        let out = run(&mem, libc::SYS_recvfrom, [3, buf, 64, 0, addr, lenp], 10);
        assert_eq!(out, [r(lenp, 4), w(buf, 10), w(lenp, 4), w(addr, 16)]);
        assert_eq!(run(&mem, libc::SYS_recvfrom, [3, buf, 64, 0, 0, 0], 10), [w(buf, 10)]);
        assert_eq!(run(&mem, libc::SYS_accept4, [3, addr, lenp, 0, 0, 0], 4), [r(lenp, 4), w(lenp, 4), w(addr, 16)]);
        assert_eq!(run(&mem, libc::SYS_accept, [3, 0, 0, 0, 0, 0], 4), []);
        assert_eq!(run(&mem, libc::SYS_getsockname, [3, addr, lenp, 0, 0, 0], EBADF), [r(lenp, 4)]);
        // A length beyond any address the kernel has is cut to sockaddr_storage.
        mem.put_u32(lenp, 1 << 30);
        assert_eq!(run(&mem, libc::SYS_getpeername, [3, addr, lenp, 0, 0, 0], 0), [r(lenp, 4), w(lenp, 4), w(addr, 128)]);
        assert_eq!(run(&mem, libc::SYS_connect, [3, addr, 16, 0, 0, 0], EBADF), [r(addr, 16)]);
        assert_eq!(run(&mem, libc::SYS_bind, [3, addr, 129, 0, 0, 0], 0), [], "EINVAL: longer than sockaddr_storage");
        assert_eq!(run(&mem, libc::SYS_sendto, [3, buf, 64, 0, addr, 16], 20), [r(buf, 20), r(addr, 16)]);
        mem.put_u32(lenp, 4);
        assert_eq!(run(&mem, libc::SYS_getsockopt, [3, 1, 2, addr, lenp, 0], 0), [r(lenp, 4), w(lenp, 4), w(addr, 4)]);
        assert_eq!(run(&mem, libc::SYS_setsockopt, [3, 1, 2, addr, 4, 0], 0), [r(addr, 4)]);
        assert_eq!(run(&mem, libc::SYS_setsockopt, [3, 1, 2, addr, u64::from(u32::MAX), 0], 0), [], "negative length");
    }

    #[test]
    fn path_strings() {
        let mut mem = Fake::new(0x2000);
        let path = b"/etc/passwd\0";
        // Ending at the last readable byte, read in pieces that cross no piece boundary.
        let at = BASE + 0x2000 - path.len() as u64;
        mem.put(at, path);
        assert_eq!(run(&mem, libc::SYS_open, [at, 0, 0, 0, 0, 0], 3), [r(at, 12)]);
        assert_eq!(run(&mem, libc::SYS_openat, [0, at, 0, 0, 0, 0], -2), [r(at, 12)], "read even when the call fails");
        let stat = BASE + 0x100;
        assert_eq!(run(&mem, libc::SYS_newfstatat, [0, at, stat, 0, 0, 0], 0), [r(at, 12), w(stat, 144)]);
        assert_eq!(run(&mem, libc::SYS_statx, [0, at, 0, 0, stat, 0], 0), [r(at, 12), w(stat, 256)]);
        assert_eq!(run(&mem, libc::SYS_renameat2, [0, at, 0, at, 0, 0], 0), [r(at, 12), r(at, 12)]);
        assert_eq!(run(&mem, libc::SYS_readlink, [at, stat, 64, 0, 0, 0], 9), [r(at, 12), w(stat, 9)]);
        assert_eq!(run(&mem, libc::SYS_utimensat, [0, 0, stat, 0, 0, 0], 0), [r(stat, 32)], "null path");
        assert_eq!(run(&mem, libc::SYS_openat2, [0, at, stat, 24, 0, 0], 3), [r(at, 12), r(stat, 24)]);
        // The longest path the kernel takes: 4095 bytes and the NUL.
        let mut long = vec![b'a'; 4095];
        long.push(0);
        mem.put(BASE + 0x10, &long);
        assert_eq!(run(&mem, libc::SYS_mkdir, [BASE + 0x10, 0, 0, 0, 0, 0], 0), [r(BASE + 0x10, 4096)]);
    }

    #[test]
    fn unterminated_strings_are_left_out() {
        let mut mem = Fake::new(0x3000);
        assert_eq!(run(&mem, libc::SYS_unlink, [BASE + 0x2f00, 0, 0, 0, 0, 0], 0), [], "runs into unreadable memory");
        mem.put(BASE + 0x10 + 4096, b"\0");
        assert_eq!(run(&mem, libc::SYS_unlink, [BASE + 0x10, 0, 0, 0, 0, 0], 0), [], "longer than PATH_MAX");
        assert_eq!(run(&mem, libc::SYS_unlink, [0, 0, 0, 0, 0, 0], 0), [], "null");
        assert_eq!(run(&mem, libc::SYS_unlink, [u64::MAX - 3, 0, 0, 0, 0, 0], 0), [], "top of the address space");
    }

    #[test]
    fn epoll_and_poll() {
        let mem = Fake::new(0x1000);
        assert_eq!(run(&mem, libc::SYS_epoll_wait, [4, BASE, 8, 0, 0, 0], 3), [w(BASE, 36)]);
        assert_eq!(run(&mem, libc::SYS_epoll_wait, [4, BASE, 2, 0, 0, 0], 5), [w(BASE, 24)]);
        assert_eq!(run(&mem, libc::SYS_epoll_wait, [4, BASE, 8, 0, 0, 0], 0), []);
        assert_eq!(run(&mem, libc::SYS_epoll_pwait, [4, BASE, 8, 0, BASE + 0x100, 8], 1), [r(BASE + 0x100, 8), w(BASE, 12)]);
        let pwait2 = run(&mem, libc::SYS_epoll_pwait2, [4, BASE, 8, BASE + 0x200, 0, 8], 1);
        assert_eq!(pwait2, [r(BASE + 0x200, 16), w(BASE, 12)]);
        assert_eq!(run(&mem, libc::SYS_epoll_ctl, [4, 1, 5, BASE, 0, 0], 0), [r(BASE, 12)]);
        assert_eq!(run(&mem, libc::SYS_epoll_ctl, [4, 2, 5, BASE, 0, 0], 0), [], "EPOLL_CTL_DEL");
        assert_eq!(run(&mem, libc::SYS_poll, [BASE, 3, 0, 0, 0, 0], 1), [r(BASE, 24), w(BASE, 24)]);
        assert_eq!(run(&mem, libc::SYS_poll, [BASE, 3, 0, 0, 0, 0], EBADF), [r(BASE, 24)]);
        let ppoll = run(&mem, libc::SYS_ppoll, [BASE, 1, BASE + 0x100, BASE + 0x200, 8, 0], 0);
        assert_eq!(ppoll, [r(BASE, 8), r(BASE + 0x100, 16), r(BASE + 0x200, 8), w(BASE, 8), w(BASE + 0x100, 16)]);
    }

    #[test]
    fn select_sets() {
        let mut mem = Fake::new(0x1000);
        let (rd, ex, tv) = (BASE, BASE + 0x100, BASE + 0x200);
        let out = run(&mem, libc::SYS_select, [65, rd, 0, ex, tv, 0], 1);
        assert_eq!(out, [r(rd, 16), r(ex, 16), r(tv, 16), w(rd, 16), w(ex, 16), w(tv, 16)]);
        let (arg, set) = (BASE + 0x300, BASE + 0x400);
        mem.put_u64(arg, set);
        mem.put_u64(arg + 8, 8);
        let out = run(&mem, libc::SYS_pselect6, [3, rd, 0, 0, tv, arg], 0);
        assert_eq!(out, [r(rd, 8), r(tv, 16), r(arg, 16), r(set, 8), w(rd, 8), w(tv, 16)]);
        assert_eq!(run(&mem, libc::SYS_select, [u64::from(u32::MAX), rd, 0, 0, 0, 0], 0), [], "negative nfds");
    }

    #[test]
    fn fixed_size_results() {
        let mem = Fake::new(0x1000);
        assert_eq!(run(&mem, libc::SYS_pipe2, [BASE, 0, 0, 0, 0, 0], 0), [w(BASE, 8)]);
        assert_eq!(run(&mem, libc::SYS_pipe2, [BASE, 0, 0, 0, 0, 0], -24), []);
        assert_eq!(run(&mem, libc::SYS_socketpair, [1, 1, 0, BASE, 0, 0], 0), [w(BASE, 8)]);
        assert_eq!(run(&mem, libc::SYS_fstat, [3, BASE, 0, 0, 0, 0], 0), [w(BASE, 144)]);
        assert_eq!(run(&mem, libc::SYS_clock_gettime, [1, BASE, 0, 0, 0, 0], 0), [w(BASE, 16)]);
        assert_eq!(run(&mem, libc::SYS_gettimeofday, [BASE, BASE + 0x20, 0, 0, 0, 0], 0), [w(BASE, 16), w(BASE + 0x20, 8)]);
        assert_eq!(run(&mem, libc::SYS_time, [0, 0, 0, 0, 0, 0], 1_700_000_000), []);
        assert_eq!(run(&mem, libc::SYS_uname, [BASE, 0, 0, 0, 0, 0], 0), [w(BASE, 390)]);
        assert_eq!(run(&mem, libc::SYS_prlimit64, [0, 7, BASE, BASE + 0x20, 0, 0], 0), [r(BASE, 16), w(BASE + 0x20, 16)]);
        assert_eq!(run(&mem, libc::SYS_rt_sigaction, [2, BASE, BASE + 0x40, 8, 0, 0], 0), [r(BASE, 32), w(BASE + 0x40, 32)]);
        assert_eq!(run(&mem, libc::SYS_rt_sigaction, [2, BASE, BASE + 0x40, 128, 0, 0], -22), [], "EINVAL: bad sigsetsize");
        assert_eq!(run(&mem, libc::SYS_rt_sigprocmask, [0, BASE, BASE + 0x40, 8, 0, 0], 0), [r(BASE, 8), w(BASE + 0x40, 8)]);
        assert_eq!(run(&mem, libc::SYS_wait4, [u64::MAX, BASE, 0, BASE + 0x40, 0, 0], 1234), [w(BASE, 4), w(BASE + 0x40, 144)]);
        assert_eq!(run(&mem, libc::SYS_wait4, [u64::MAX, BASE, 1, BASE + 0x40, 0, 0], 0), [], "WNOHANG, no child");
        assert_eq!(run(&mem, libc::SYS_getcwd, [BASE, 4096, 0, 0, 0, 0], 6), [w(BASE, 6)]);
        assert_eq!(run(&mem, libc::SYS_sched_getaffinity, [0, 128, BASE, 0, 0, 0], 8), [w(BASE, 8)]);
    }

    #[test]
    fn sleeps_report_the_time_left_only_when_interrupted() {
        let mem = Fake::new(0x1000);
        let (req, rem) = (BASE, BASE + 0x10);
        let eintr = -(libc::EINTR as i64);
        assert_eq!(run(&mem, libc::SYS_nanosleep, [req, rem, 0, 0, 0, 0], 0), [r(req, 16)]);
        assert_eq!(run(&mem, libc::SYS_nanosleep, [req, rem, 0, 0, 0, 0], eintr), [r(req, 16), w(rem, 16)]);
        assert_eq!(run(&mem, libc::SYS_clock_nanosleep, [1, 0, req, rem, 0, 0], eintr), [r(req, 16), w(rem, 16)]);
        assert_eq!(run(&mem, libc::SYS_clock_nanosleep, [1, 1, req, rem, 0, 0], eintr), [r(req, 16)], "TIMER_ABSTIME");
    }

    #[test]
    fn huge_lengths_are_split_into_u32_pieces() {
        let mem = Fake::new(0);
        let len = 10u64 << 30;
        let out = run(&mem, libc::SYS_read, [3, BASE, len, 0, 0, 0], len as i64);
        let max = u64::from(u32::MAX);
        let rest = (len - 2 * max) as u32;
        assert_eq!(out, [w(BASE, u32::MAX), w(BASE + max, u32::MAX), w(BASE + 2 * max, rest)]);
        assert_eq!(out.iter().map(|k| u64::from(k.size)).sum::<u64>(), len);
    }

    #[test]
    fn overflowing_ranges_are_left_out() {
        let mem = Fake::new(0x1000);
        assert_eq!(run(&mem, libc::SYS_read, [3, u64::MAX - 10, 100, 0, 0, 0], 100), []);
        assert_eq!(run(&mem, libc::SYS_read, [3, u64::MAX - 99, 100, 0, 0, 0], 100), [], "ends at 2^64");
        assert_eq!(run(&mem, libc::SYS_read, [3, u64::MAX - 100, 100, 0, 0, 0], 100), [w(u64::MAX - 100, 100)]);
        assert_eq!(run(&mem, libc::SYS_recvmsg, [3, u64::MAX - 20, 0, 0, 0, 0], 10), []);
        assert_eq!(run(&mem, libc::SYS_readv, [3, u64::MAX - 20, 2, 0, 0, 0], 10), []);
        // The first header fits (but is unreadable); the rest wrap around.
        let top = u64::MAX - 100;
        assert_eq!(run(&mem, libc::SYS_recvmmsg, [3, top, 3, 0, 0, 0], 3), [r(top, 56), w(top + 56, 4)]);
        let huge = run(&mem, libc::SYS_epoll_wait, [4, BASE, u64::MAX, 0, 0, 0], i64::MAX);
        assert_eq!(huge, [], "negative maxevents: EINVAL");
        let huge = run(&mem, libc::SYS_epoll_wait, [4, BASE, EP_MAX_EVENTS + 1, 0, 0, 0], i64::MAX);
        assert_eq!(huge, [], "maxevents above EP_MAX_EVENTS: EINVAL");
    }

    #[test]
    fn at_most_max_refs_per_call() {
        let mut mem = Fake::new(0x10000);
        mem.put_iovecs(BASE, &[(BASE + 0x8000, 1); 1024]);
        let mut out = vec![r(1, 1); 3];
        memory(libc::SYS_writev as u64, &[3, BASE, 1024, 0, 0, 0], 1024, &mut mem.reader(), &mut out);
        // Three were there before; this call adds the array and 1023 of the 1024 buffers.
        assert_eq!(out.len(), 3 + MAX_REFS);
        assert_eq!(out[3], r(BASE, 16 * 1024));
        // A range split into more than MAX_REFS pieces.
        let len = u64::from(u32::MAX) * 2000;
        let out = run(&mem, libc::SYS_read, [3, BASE, len, 0, 0, 0], len as i64);
        assert_eq!(out.len(), MAX_REFS);
        // Reads still come first when writes are cut.
        let mut out = Vec::new();
        memory(libc::SYS_readv as u64, &[3, BASE, 1024, 0, 0, 0], 1024, &mut mem.reader(), &mut out);
        assert_eq!(out.len(), MAX_REFS);
        assert!(!out[0].write && out[1..].iter().all(|k| k.write));
    }

    #[test]
    fn unknown_calls_touch_nothing() {
        let mem = Fake::new(0x1000);
        for nr in [libc::SYS_getpid as u64, libc::SYS_futex as u64, libc::SYS_execve as u64, 99_999, u64::MAX] {
            let mut out = Vec::new();
            memory(nr, &[BASE; 6], 0, &mut mem.reader(), &mut out);
            assert_eq!(out, [], "{nr}");
            assert!(!touches_memory(nr), "{nr}");
        }
        for nr in [libc::SYS_read, libc::SYS_recvmmsg, libc::SYS_openat2, libc::SYS_epoll_pwait2, libc::SYS_wait4] {
            assert!(touches_memory(nr as u64), "{nr}");
        }
    }

    #[test]
    fn sizes_match_the_c_structures() {
        assert_eq!(size_of::<libc::stat>() as u64, STAT);
        assert_eq!(size_of::<libc::statx>() as u64, STATX);
        assert_eq!(size_of::<libc::timespec>() as u64, TIMESPEC);
        assert_eq!(size_of::<libc::timeval>() as u64, TIMEVAL);
        assert_eq!(size_of::<libc::utsname>() as u64, UTSNAME);
        assert_eq!(size_of::<libc::sysinfo>() as u64, SYSINFO);
        assert_eq!(size_of::<libc::rusage>() as u64, RUSAGE);
        assert_eq!(size_of::<libc::tms>() as u64, TMS);
        assert_eq!(size_of::<libc::rlimit>() as u64, RLIMIT);
        assert_eq!(size_of::<libc::epoll_event>() as u64, EPOLL_EVENT);
        assert_eq!(size_of::<libc::pollfd>() as u64, POLLFD);
        assert_eq!(size_of::<libc::iovec>() as u64, IOVEC);
        assert_eq!(size_of::<libc::msghdr>() as u64, MSGHDR);
        assert_eq!(size_of::<libc::mmsghdr>() as u64, MMSGHDR);
        assert_eq!(size_of::<libc::sockaddr_storage>() as u64, SOCKADDR_MAX);
    }

    /// Reads the test's own memory, but only inside `ranges` (objects the test keeps alive).
    fn guarded(ranges: Vec<(u64, usize)>) -> impl FnMut(u64, &mut [u8]) -> bool {
        move |addr, buf| {
            let inside = |&(start, len): &(u64, usize)| addr >= start && addr + buf.len() as u64 <= start + len as u64;
            let ok = ranges.iter().any(inside);
            if ok {
                // SAFETY: [addr, addr + buf.len()) lies inside one of `ranges`, each a live,
                // initialized object of the calling test, and `buf` is a distinct buffer.
                unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) };
            }
            ok
        }
    }

    fn addr_of<T>(x: &T) -> u64 {
        x as *const T as u64
    }

    /// The ranges of a real call, read through `guarded(ranges)`.
    fn real(nr: c_long, args: [u64; 6], result: i64, ranges: Vec<(u64, usize)>) -> Vec<KernelRef> {
        let mut out = Vec::new();
        memory(nr as u64, &args, result, &mut guarded(ranges), &mut out);
        out
    }

    #[test]
    fn real_system_calls() {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two ints into `fds`.
        let rc = unsafe { libc::syscall(libc::SYS_pipe2, fds.as_mut_ptr(), libc::O_CLOEXEC) };
        assert_eq!(rc, 0);
        let at = fds.as_ptr() as u64;
        assert_eq!(real(libc::SYS_pipe2, [at, libc::O_CLOEXEC as u64, 0, 0, 0, 0], rc, vec![]), [w(at, 8)]);
        let (rd, wr) = (fds[0] as u64, fds[1] as u64);

        let msg = *b"hello";
        // SAFETY: `msg` is 5 readable bytes.
        let n = unsafe { libc::write(fds[1], msg.as_ptr().cast(), msg.len()) };
        assert_eq!(n, 5);
        let at = msg.as_ptr() as u64;
        assert_eq!(real(libc::SYS_write, [wr, at, 5, 0, 0, 0], n as i64, vec![]), [r(at, 5)]);

        let mut buf = [0u8; 64];
        // SAFETY: `buf` is 64 writable bytes.
        let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
        assert_eq!((n, &buf[..5]), (5, &msg[..]));
        let at = buf.as_ptr() as u64;
        assert_eq!(real(libc::SYS_read, [rd, at, 64, 0, 0, 0], n as i64, vec![]), [w(at, 5)]);

        // SAFETY: an all-zero stat is a valid value, which fstat overwrites.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is a writable struct stat.
        let rc = unsafe { libc::fstat(fds[0], &mut st) };
        assert_eq!(rc, 0);
        let at = addr_of(&st);
        assert_eq!(real(libc::SYS_fstat, [rd, at, 0, 0, 0, 0], 0, vec![]), [w(at, size_of::<libc::stat>() as u32)]);

        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: the raw system call (not the vDSO) writes a timespec into `ts`.
        let rc = unsafe { libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_MONOTONIC, &mut ts) };
        assert_eq!(rc, 0);
        assert!(ts.tv_sec != 0 || ts.tv_nsec != 0);
        let at = addr_of(&ts);
        let clock = libc::CLOCK_MONOTONIC as u64;
        assert_eq!(real(libc::SYS_clock_gettime, [clock, at, 0, 0, 0, 0], 0, vec![]), [w(at, 16)]);

        // Strings are read in aligned 256-byte pieces: the path fills one, so that the
        // guarded reader lets the whole piece be read.
        #[repr(C, align(256))]
        struct Piece([u8; 256]);
        let mut path = Piece([0; 256]);
        path.0[0] = b'/';
        let at = path.0.as_ptr() as u64;
        // SAFETY: `path` holds a NUL-terminated string.
        let dir = unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path.0.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
        assert!(dir >= 0);
        let args = [libc::AT_FDCWD as u64, at, 0, 0, 0, 0];
        assert_eq!(real(libc::SYS_openat, args, dir, vec![(at, 256)]), [r(at, 2)]);
        assert_eq!(real(libc::SYS_openat, args, dir, vec![]), [], "unreadable: left out");

        // SAFETY: closing descriptors this test opened.
        unsafe {
            libc::close(dir as libc::c_int);
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }

    #[test]
    fn real_sendmsg_and_recvmsg() {
        let mut sv = [0 as libc::c_int; 2];
        // SAFETY: socketpair writes two ints into `sv`.
        let rc = unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_DGRAM, 0, sv.as_mut_ptr()) };
        assert_eq!(rc, 0);

        let ping = *b"ping";
        let iov = [libc::iovec { iov_base: ping.as_ptr() as *mut libc::c_void, iov_len: ping.len() }];
        // SAFETY: an all-zero msghdr is valid (null pointers, zero lengths).
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_iov = iov.as_ptr() as *mut libc::iovec;
        hdr.msg_iovlen = 1;
        // SAFETY: `hdr` describes `ping`, live for the call.
        let sent = unsafe { libc::sendmsg(sv[0], &hdr, 0) };
        assert_eq!(sent, 4);
        let ranges = vec![(addr_of(&hdr), size_of::<libc::msghdr>()), (addr_of(&iov), size_of::<libc::iovec>())];
        let out = real(libc::SYS_sendmsg, [sv[0] as u64, addr_of(&hdr), 0, 0, 0, 0], sent as i64, ranges);
        assert_eq!(out, [r(addr_of(&hdr), 56), r(addr_of(&iov), 16), r(ping.as_ptr() as u64, 4)]);

        let mut buf = [0u8; 16];
        let mut name = [0u8; 128];
        let mut control = [0u8; 64];
        let iov = [libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() }];
        // SAFETY: as above.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_name = name.as_mut_ptr().cast();
        hdr.msg_namelen = name.len() as u32;
        hdr.msg_iov = iov.as_ptr() as *mut libc::iovec;
        hdr.msg_iovlen = 1;
        hdr.msg_control = control.as_mut_ptr().cast();
        hdr.msg_controllen = control.len();
        // SAFETY: `hdr` describes `name`, `buf` and `control`, live and writable for the call.
        let received = unsafe { libc::recvmsg(sv[1], &mut hdr, 0) };
        assert_eq!((received, &buf[..4]), (4, &ping[..]));
        let ranges = vec![(addr_of(&hdr), size_of::<libc::msghdr>()), (addr_of(&iov), size_of::<libc::iovec>())];
        let out = real(libc::SYS_recvmsg, [sv[1] as u64, addr_of(&hdr), 0, 0, 0, 0], received as i64, ranges);
        let mut expected = vec![r(addr_of(&hdr), 56), r(addr_of(&iov), 16), w(buf.as_ptr() as u64, 4)];
        // The peer of a socket pair has no name (namelen 0), nor any control data: only the
        // header's fields are written back.
        assert_eq!((hdr.msg_namelen, hdr.msg_controllen), (0, 0));
        expected.extend([w(addr_of(&hdr.msg_namelen), 4), w(addr_of(&hdr.msg_controllen), 8), w(addr_of(&hdr.msg_flags), 4)]);
        assert_eq!(out, expected);

        // SAFETY: closing descriptors this test opened.
        unsafe {
            libc::close(sv[0]);
            libc::close(sv[1]);
        }
    }
}
