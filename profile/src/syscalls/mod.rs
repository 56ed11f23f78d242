//! System calls as the profile records them (format version 7): which the collector
//! records, the user memory each one's kernel side reads and writes ([`memory`]), and what
//! each does to file descriptors ([`FdOp`]). One definition, so that the collector that
//! writes the records and the analyses that read them agree on every call.
//!
//! Before a recorded call the collector writes its number and first three arguments
//! ([`Escape::Syscall`](crate::tags::Escape::Syscall)); after it returns, the result
//! ([`Escape::SyscallReturn`](crate::tags::Escape::SyscallReturn)), the descriptors a pipe
//! or socket pair made ([`Escape::Descriptors`](crate::tags::Escape::Descriptors)) and the
//! memory the kernel accessed ([`Escape::Kernel`](crate::tags::Escape::Kernel)).
//! Numbers are x86-64 Linux's.

mod memory;

pub use memory::{memory, KernelRef, MAX_REFS};

use libc::c_long;

/// What a system call does to descriptors and the order between threads they carry, as
/// ThreadSanitizer models it: data sent on a descriptor is ordered before what receives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FdOp {
    /// Makes a descriptor (or, for a pipe or socket pair, two) with a channel of its own:
    /// pipes, socket pairs, eventfd, epoll, timerfd, signalfd, memfd.
    Channel,
    /// Makes a socket: every socket shares one channel (their peers are not known).
    Socket,
    /// Accepts a connection on `listener`: ordered after what was sent to it; the new
    /// descriptor is a socket.
    Accept { listener: u64 },
    /// Opens a file: every file shares one channel.
    File,
    /// Makes the result a copy of `old` (dup, dup2, dup3, fcntl's F_DUPFD).
    Dup { old: u64 },
    /// Closes `fd`.
    Close { fd: u64 },
    /// Sends through `fd` (write, send and their kin): releases its channel.
    Send { fd: u64 },
    /// Receives through `fd` (read, recv and their kin): acquires its channel when it
    /// succeeds.
    Receive { fd: u64 },
    /// Adds, changes or removes (`op`: EPOLL_CTL_ADD, _MOD, _DEL) `fd` in epoll `epfd`:
    /// releases `epfd`, and what is sent to `fd` from then on is also sent to `epfd`.
    EpollCtl { epfd: u64, op: u64, fd: u64 },
    /// Waits on epoll `epfd`: acquires it.
    EpollWait { epfd: u64 },
    /// Nothing to descriptors.
    None,
}

/// The most bytes of one kernel access that analyses keeping shadow memory per byte (`dep
/// races`, `dep wet`) follow: a range is taken as its first MiB, so that a damaged
/// profile's claim of a gigabyte transfer cannot make gigabytes of shadow. (I/O buffers
/// are rarely larger; ThreadSanitizer checks a freed block's first KiB for the same
/// reason.)
pub const SHADOWED: u32 = 1 << 20;

/// `epoll_ctl`'s operation that removes a descriptor.
pub const EPOLL_CTL_DEL: u64 = 2;
/// `fcntl` commands that duplicate a descriptor.
const F_DUPFD: u64 = libc::F_DUPFD as u64;
const F_DUPFD_CLOEXEC: u64 = libc::F_DUPFD_CLOEXEC as u64;

/// What system call `nr` with first arguments `args` does to descriptors.
#[allow(non_upper_case_globals)] // libc's names for the numbers
pub fn fd_op(nr: u64, args: [u64; 3]) -> FdOp {
    use libc::{
        SYS_accept, SYS_accept4, SYS_close, SYS_creat, SYS_dup, SYS_dup2, SYS_dup3, SYS_epoll_create, SYS_epoll_create1, SYS_epoll_ctl,
        SYS_epoll_pwait, SYS_epoll_pwait2, SYS_epoll_wait, SYS_eventfd, SYS_eventfd2, SYS_fcntl, SYS_memfd_create, SYS_open, SYS_openat,
        SYS_openat2, SYS_pipe, SYS_pipe2, SYS_pread64, SYS_preadv, SYS_preadv2, SYS_pwrite64, SYS_pwritev, SYS_pwritev2, SYS_read,
        SYS_readv, SYS_recvfrom, SYS_recvmmsg, SYS_recvmsg, SYS_sendmmsg, SYS_sendmsg, SYS_sendto, SYS_signalfd, SYS_signalfd4, SYS_socket,
        SYS_socketpair, SYS_timerfd_create, SYS_write, SYS_writev,
    };
    let Ok(n) = c_long::try_from(nr) else { return FdOp::None };
    match n {
        SYS_pipe | SYS_pipe2 | SYS_socketpair | SYS_eventfd | SYS_eventfd2 | SYS_epoll_create | SYS_epoll_create1 | SYS_timerfd_create
        | SYS_signalfd | SYS_signalfd4 | SYS_memfd_create => FdOp::Channel,
        SYS_socket => FdOp::Socket,
        SYS_accept | SYS_accept4 => FdOp::Accept { listener: args[0] },
        SYS_open | SYS_openat | SYS_creat | SYS_openat2 => FdOp::File,
        SYS_dup | SYS_dup2 | SYS_dup3 => FdOp::Dup { old: args[0] },
        SYS_fcntl if args[1] == F_DUPFD || args[1] == F_DUPFD_CLOEXEC => FdOp::Dup { old: args[0] },
        SYS_close => FdOp::Close { fd: args[0] },
        SYS_write | SYS_pwrite64 | SYS_writev | SYS_pwritev | SYS_pwritev2 | SYS_sendto | SYS_sendmsg | SYS_sendmmsg => {
            FdOp::Send { fd: args[0] }
        }
        SYS_read | SYS_pread64 | SYS_readv | SYS_preadv | SYS_preadv2 | SYS_recvfrom | SYS_recvmsg | SYS_recvmmsg => {
            FdOp::Receive { fd: args[0] }
        }
        SYS_epoll_ctl => FdOp::EpollCtl { epfd: args[0], op: args[1], fd: args[2] },
        SYS_epoll_wait | SYS_epoll_pwait | SYS_epoll_pwait2 => FdOp::EpollWait { epfd: args[0] },
        _ => FdOp::None,
    }
}

/// Whether system call `nr` makes two descriptors it writes to memory (pipe, pipe2,
/// socketpair): the record of its return is followed by theirs.
pub fn makes_pair(nr: u64) -> bool {
    [libc::SYS_pipe, libc::SYS_pipe2, libc::SYS_socketpair].iter().any(|&n| n as u64 == nr)
}

/// Where such a call wrote its pair: the first argument (pipe, pipe2), or the fourth
/// (socketpair).
pub fn pair_at(nr: u64, args: &[u64; 6]) -> Option<u64> {
    match nr {
        _ if !makes_pair(nr) => None,
        _ if nr == libc::SYS_socketpair as u64 => Some(args[3]),
        _ => Some(args[0]),
    }
}

/// Whether the collector records system call `nr`: it touches user memory the kernel's
/// side is known for ([`memory`]), or descriptors ([`fd_op`]).
pub fn recorded(nr: u64) -> bool {
    fd_op(nr, [0, 0, 0]) != FdOp::None || fd_op(nr, [0, F_DUPFD, 0]) != FdOp::None || memory::touches_memory(nr)
}

/// Whether system call `nr` orders threads through descriptors, so that the collector
/// stamps it with sync records before and after (the order the analysis interleaves by).
/// Every such call is [`recorded`].
pub fn orders_threads(nr: u64) -> bool {
    matches!(
        fd_op(nr, [0, 0, 0]),
        FdOp::Send { .. } | FdOp::Receive { .. } | FdOp::Accept { .. } | FdOp::EpollCtl { .. } | FdOp::EpollWait { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_operations() {
        let nr = |n: c_long| n as u64;
        assert_eq!(fd_op(nr(libc::SYS_write), [5, 0, 0]), FdOp::Send { fd: 5 });
        assert_eq!(fd_op(nr(libc::SYS_recvmsg), [6, 0, 0]), FdOp::Receive { fd: 6 });
        assert_eq!(fd_op(nr(libc::SYS_fcntl), [3, F_DUPFD_CLOEXEC, 10]), FdOp::Dup { old: 3 });
        assert_eq!(fd_op(nr(libc::SYS_fcntl), [3, 4 /* F_SETFL */, 0]), FdOp::None);
        assert_eq!(fd_op(nr(libc::SYS_epoll_ctl), [7, 1, 8]), FdOp::EpollCtl { epfd: 7, op: 1, fd: 8 });
        assert_eq!(fd_op(u64::MAX, [0, 0, 0]), FdOp::None);
        assert!(recorded(nr(libc::SYS_fcntl)) && recorded(nr(libc::SYS_read)) && recorded(nr(libc::SYS_pipe2)));
        assert!(!recorded(nr(libc::SYS_getpid)) && !recorded(nr(libc::SYS_futex)));
        assert!(orders_threads(nr(libc::SYS_writev)) && !orders_threads(nr(libc::SYS_pipe2)));
        assert!((0..1024).filter(|&n| orders_threads(n)).all(recorded), "what orders threads is recorded");
        assert_eq!(pair_at(nr(libc::SYS_pipe2), &[7, 0, 0, 9, 0, 0]), Some(7));
        assert_eq!(pair_at(nr(libc::SYS_socketpair), &[1, 1, 0, 9, 0, 0]), Some(9));
        assert_eq!(pair_at(nr(libc::SYS_eventfd2), &[1, 1, 0, 9, 0, 0]), None);
    }
}
