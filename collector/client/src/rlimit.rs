//! The descriptor limit as the kernel reports it.
//!
//! dep runs DynamoRIO with `-steal_fds 0`, so the program's RLIMIT_NOFILE is the kernel's
//! own (launch.rs says why). But DynamoRIO still rewrites what `getrlimit` and `prlimit64`
//! report for it with the limit it would have kept for the program had it reserved
//! descriptors, which with none reserved is 0 for both soft and hard (core/unix/os.c,
//! post_system_call): a program that raises its soft limit to the hard one, as Java does
//! at start-up, set it to 0 and could open nothing. So the limit is read before such a call
//! and written back over DynamoRIO's answer after it.

use core::ffi::{c_int, c_void};
use dynamorio_sys::*;

/// `getrlimit(resource, limit)`.
pub const SYS_GETRLIMIT: c_int = 97;
/// `prlimit64(pid, resource, new, old)`.
pub const SYS_PRLIMIT64: c_int = 302;

/// Where a call reports the limit, and the limit before it ran.
#[derive(Clone, Copy, Debug)]
pub struct Pending {
    report: u64,
    limit: [u64; 2],
}

/// Before `sysnum`: what [`after`] restores, if the call reports this process's descriptor
/// limit.
///
/// # Safety
/// `dc` is the calling thread's drcontext in DynamoRIO's pre-syscall event; exercised by
/// tests/collector.rs descriptors_exhausted.
pub unsafe fn before(dc: *mut c_void, sysnum: c_int) -> Option<Pending> {
    let (resource, report) = match sysnum {
        SYS_GETRLIMIT => (dr_syscall_get_param(dc, 0), dr_syscall_get_param(dc, 1)),
        SYS_PRLIMIT64 => {
            // DynamoRIO rewrites only its own process's limit.
            let pid = dr_syscall_get_param(dc, 0) as u32;
            if pid != 0 && pid != dr_get_process_id() as u32 {
                return None;
            }
            (dr_syscall_get_param(dc, 1), dr_syscall_get_param(dc, 3))
        }
        _ => return None,
    };
    if resource as u32 != libc::RLIMIT_NOFILE || report == 0 {
        return None;
    }
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // The client's own call: DynamoRIO neither sees nor rewrites it.
    if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
        return None;
    }
    Some(Pending { report, limit: [r.rlim_cur, r.rlim_max] })
}

/// After the call: writes the limit it found over DynamoRIO's report, if the call succeeded.
///
/// # Safety
/// `dc` is the calling thread's drcontext in DynamoRIO's post-syscall event, for the call
/// `p` was made before; exercised by tests/collector.rs descriptors_exhausted.
pub unsafe fn after(dc: *mut c_void, p: Pending) {
    if dr_syscall_get_result(dc) != 0 {
        return;
    }
    let mut written = 0usize;
    // A report the program made unwritable since stays as DynamoRIO left it.
    dr_safe_write(p.report as *mut c_void, 16, p.limit.as_ptr() as *const c_void, &mut written);
}
