//! What happens when a mapped input shrinks under its reader.
//!
//! Profiles (and the binaries the symbolizer reads) are memory-mapped. When another process
//! truncates such a file while dep reads it, touching a page past the new end raises
//! SIGBUS, which would kill dep with no word of why. [`guard`] turns that into dep's usual
//! one-line error and exit status 2. Output written until then stays as written.

use std::sync::Once;

/// The line written to stderr when a mapped file shrinks under dep.
pub const MESSAGE: &str = "dep: error: a file being read was truncated by another process while mapped (SIGBUS); output is incomplete\n";

/// The exit status then, the same as any other error's.
pub const EXIT_STATUS: i32 = 2;

/// Installs the SIGBUS handler, once per process. Only for programs (the `dep` command and
/// tests of it): a library must not take over a process's signals.
pub fn guard() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: `on_sigbus` is an `extern "C"` handler of the SA_SIGINFO signature and calls
        // only async-signal-safe functions (write, _exit, signal, raise); the sigaction
        // structure is zeroed then filled, as sigaction(2) requires. Exercised by
        // profile/tests/truncation.rs, which truncates a mapped profile under a reader.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigbus as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
        }
    });
}

/// BUS_ADRERR ("nonexistent physical address") is what a read past a truncated file's end
/// raises; any other SIGBUS is not ours to explain and takes its default action.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler; write and _exit
    // are async-signal-safe; resetting the disposition then re-raising ends the process
    // with the signal's default action.
    unsafe {
        if (*info).si_code == libc::BUS_ADRERR {
            libc::write(2, MESSAGE.as_ptr().cast(), MESSAGE.len());
            libc::_exit(EXIT_STATUS);
        }
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}
