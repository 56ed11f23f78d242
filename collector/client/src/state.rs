//! Per-thread buffers reached from inline code through raw TLS, the connection to the
//! launcher, and the hand-off of full buffers as chunks.

use core::ffi::{c_int, c_void};
use dep_collector::wire;
use dep_profile::tags::{self, Escape};
use dep_profile::NUM_REGS;
use dynamorio_sys::*;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};

// Raw TLS slots (8 bytes each), relative to the offset DynamoRIO gave us.
pub const S_TAGPTR: u32 = 0;
pub const S_TAGLIM: u32 = 1;
pub const S_PREVHI: u32 = 2;
pub const S_VALPTR: u32 = 3;
pub const S_VALLIM: u32 = 4;
pub const S_TRUPTR: u32 = 5;
pub const S_TRULIM: u32 = 6;
/// Where the current rep string's post value goes (its DEP_m slot).
pub const S_REPPOST: u32 = 7;
/// 24 shadow bytes, one per value register: [`UPDATED`] or 0 (RECORDED).
pub const S_SHADOW: u32 = 8;
/// A shadow's UPDATED value: the bytes a record advances the value pointer by.
pub const UPDATED: u8 = 8;
/// Where the buffer hand-off stub returns to (after the shadow's three slots).
pub const S_RETURN: u32 = 11;
/// With windows: the first of [`COUNT_SLOTS`] slots whose sum is the instructions left
/// (signed) before the thread's next window check ([`crate::window`]); every block
/// subtracts its own from the slot its address picks and checks at zero or below.
pub const S_LEFT: u32 = 12;
/// The slots the count is spread over: consecutive blocks mostly update different ones, so
/// their read-modify-writes are not one chain through memory.
pub const COUNT_SLOTS: u32 = 8;
/// A cold block's entry hands the block-entry stub its facts here ([`crate::stub::entry_arg`]).
pub const S_ARG: u32 = S_LEFT + COUNT_SLOTS;
/// Where the block-entry stub returns to.
pub const S_ERET: u32 = S_ARG + 1;
/// The block-entry stub's own two scratch registers and the flags, kept while it runs.
pub const S_SPILL: u32 = S_ERET + 1;
pub const NUM_SLOTS: u32 = S_SPILL + 3;

pub const TAG_BUF: usize = 2 << 20;
/// Room a block's entry code, the sync records of its instructions (in blocks of at most
/// `MAX_SYNC_INSNS` instructions that have them), a system call's records and the escapes
/// a signal adds may use past the limit.
pub const TAG_SLACK: usize = tag_room(MAX_SYNC_INSNS, true);

/// Tag bytes one block may write: 128 of entry code and a signal's escapes, two sync
/// records (14 bytes each) per instruction with `syncs` of them, one call record and, for a
/// block that makes a system call, its records.
pub const fn tag_room(syncs: usize, syscall: bool) -> usize {
    128 + 2 * 14 * syncs + CALL_SLACK + if syscall { SYSCALL_SLACK } else { 0 }
}
/// A system call's records: the call (34 bytes), its return (14), the descriptors it made
/// (12) and at most [`MAX_REFS`](dep_profile::syscalls::MAX_REFS) kernel accesses (18 bytes
/// each).
pub const SYSCALL_SLACK: usize = 34 + 14 + 12 + 18 * dep_profile::syscalls::MAX_REFS;
/// A watched function's call record with its sync record (44 bytes) and a return record
/// (14 bytes): a block holds at most one entry and one `ret`.
pub const CALL_SLACK: usize = 64;
/// Instructions with sync records a block may have (DynamoRIO's blocks are far shorter).
pub const MAX_SYNC_INSNS: usize = 512;
pub const VAL_BUF: usize = 8 << 20;
/// Room one block's values may use past the limit (blocks needing more are refused).
pub const VAL_SLACK: usize = 64 << 10;
pub const TRU_BUF: usize = 16 << 20;
pub const TRU_SLACK: usize = 256 << 10;

pub static mut TLS_SEG: reg_id_t = 0;
pub static mut TLS_OFFS: u32 = 0;
pub static mut TLS_IDX: c_int = -1;

/// Client options.
#[derive(Default, Clone)]
pub struct Opts {
    pub socket: String,
    pub truth: bool,
    pub discard: bool,
    /// No sync records (measuring their cost).
    pub no_sync: bool,
    /// Record only these windows of each thread's instructions.
    pub windows: Option<dep_profile::container::WindowPlan>,
    /// Record each thread from the first entry of this function...
    pub start_at: Option<String>,
    /// DynamoRIO attached to the running process (`dep record --attach`).
    pub attached: bool,
    /// ...to the return of this one.
    pub stop_at: Option<String>,
}

impl Opts {
    /// Whether only part of each thread is recorded (windows, or a function's bounds):
    /// then every block counts its instructions.
    pub fn partial(&self) -> bool {
        self.windows.is_some() || self.start_at.is_some() || self.stop_at.is_some()
    }
}

pub static mut OPTS: Opts = Opts {
    socket: String::new(),
    truth: false,
    discard: false,
    no_sync: false,
    windows: None,
    start_at: None,
    stop_at: None,
    attached: false,
};

pub fn opts() -> &'static Opts {
    // SAFETY: OPTS is written only in dr_client_main before any thread or event runs, read-only
    // after; exercised by tests/collector.rs hello and eight_threads_with_mutexes.
    unsafe { &*core::ptr::addr_of!(OPTS) }
}

/// A TLS slot as a memory operand of `size` (`byte` bytes into the slot).
pub fn tls(slot: u32, byte: u32, size: u32) -> opnd_t {
    // SAFETY: TLS_SEG and TLS_OFFS are written once in dr_client_main, before any block event
    // builds an operand from them; opnd_create_far_base_disp only builds a value. Exercised by
    // tests/collector.rs hello, eight_threads_with_mutexes and standalone::avx512_forms_encode.
    unsafe {
        opnd_create_far_base_disp(
            TLS_SEG,
            DR_REG_NULL as reg_id_t,
            DR_REG_NULL as reg_id_t,
            0,
            (TLS_OFFS + 8 * slot + byte) as c_int,
            size as opnd_size_t,
        )
    }
}

// ---------------------------------------------------------------- the connection

static SOCK_FD: AtomicI32 = AtomicI32::new(-1);
static SOCK_LOCK: AtomicBool = AtomicBool::new(false);

/// A spin lock that fork can reset (a std Mutex held by another thread at fork stays held).
pub struct Spin(pub &'static AtomicBool);

impl Spin {
    pub fn lock(l: &'static AtomicBool) -> Spin {
        while l.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            // SAFETY: dr_thread_yield has no preconditions inside a client.
            unsafe { dr_thread_yield() };
        }
        Spin(l)
    }
}

impl Drop for Spin {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Sends all of `b` on the launcher's socket. MSG_NOSIGNAL: a launcher that has gone away
/// makes the send fail rather than raise SIGPIPE, which would kill the program.
fn write_all(fd: c_int, mut b: &[u8]) -> bool {
    while !b.is_empty() {
        // SAFETY: `b` is a live slice of `b.len()` bytes; exercised by tests/collector.rs hello and
        // eight_threads_with_mutexes and full_disk_keeps_a_readable_prefix.
        let r = unsafe { libc::send(fd, b.as_ptr() as *const c_void, b.len(), libc::MSG_NOSIGNAL) };
        if r < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            LOST.store(true, Ordering::Relaxed);
            return false;
        }
        b = &b[r as usize..];
    }
    true
}

/// Set once a send to the launcher failed: it is gone or stopped reading, and no slot handed
/// to it will come back.
pub static LOST: AtomicBool = AtomicBool::new(false);

/// Whether the launcher's end of the connection is closed (it was killed, or gave up on the
/// stream), asked while a thread waits for a slot: a launcher that died between taking a
/// slot and giving it back leaves no failed send to set [`LOST`] and no closed word, and the
/// thread would wait for it for ever. (The launcher closes its end only when it reads no
/// more: a half-closed or hung-up end means no slot comes back.) Sets [`LOST`] when so.
pub fn launcher_gone() -> bool {
    let fd = SOCK_FD.load(Ordering::Relaxed);
    if fd < 0 {
        return false;
    }
    let mut p = libc::pollfd { fd, events: libc::POLLRDHUP, revents: 0 };
    // SAFETY: one live pollfd, a zero timeout: poll only reads the descriptor's state;
    // exercised by tests/collector.rs a_killed_launcher_leaves_the_program_running.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    let gone = r > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0;
    if gone {
        LOST.store(true, Ordering::Relaxed);
    }
    gone
}

/// Sends one frame whose first byte carries the descriptor `fd` (SCM_RIGHTS), after any
/// queued frames; false if it could not be sent whole.
pub fn send_with_fd(kind: u32, thread: u32, payload: &[u8], fd: c_int) -> bool {
    let sock = SOCK_FD.load(Ordering::Relaxed);
    if sock < 0 {
        return false;
    }
    let frame = [&wire::frame_header(kind, thread, payload.len() as u64)[..], payload].concat();
    let g = Spin::lock(&SOCK_LOCK);
    if !write_queued(sock, &g) {
        return false;
    }
    match dep_collector::slab::send_with_descriptor(sock, &frame, fd) {
        // The descriptor went with the first byte; the rest of a short send follows plainly.
        Ok(sent) => write_all(sock, &frame[sent..]),
        Err(_) => {
            LOST.store(true, Ordering::Relaxed);
            false
        }
    }
}

/// Frames queued by [`queue`], sent ahead of the next frame [`send`] writes; under SOCK_LOCK.
static mut QUEUED: Vec<u8> = Vec::new();

/// Queued bytes that are sent at once rather than waiting for the next frame.
const QUEUE_LIMIT: usize = 64 << 10;

/// The queue, under SOCK_LOCK (held by the caller through `_g`).
#[allow(static_mut_refs)]
fn queued(_g: &Spin) -> &'static mut Vec<u8> {
    // SAFETY: QUEUED is touched only through this function, whose caller holds SOCK_LOCK (the
    // guard proves it); exercised by tests/collector.rs hello and eight_threads_with_mutexes.
    unsafe { &mut QUEUED }
}

/// Writes the queued frames (with SOCK_LOCK held); false if the connection failed.
fn write_queued(fd: c_int, g: &Spin) -> bool {
    let q = queued(g);
    let ok = q.is_empty() || write_all(fd, q);
    q.clear();
    ok
}

/// Sends one frame made of `parts`, after any queued ones (so the launcher sees frames in the
/// order they were made); false if it was not sent whole.
pub fn send(kind: u32, thread: u32, parts: &[&[u8]]) -> bool {
    let fd = SOCK_FD.load(Ordering::Relaxed);
    if fd < 0 {
        return false;
    }
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let h = wire::frame_header(kind, thread, len as u64);
    let g = Spin::lock(&SOCK_LOCK);
    write_queued(fd, &g) && write_all(fd, &h) && parts.iter().all(|p| write_all(fd, p))
}

/// Queues one small frame to go out with the next [`send`] (or once 64 KiB are queued): a
/// program starting up builds tens of thousands of blocks, and a system call for each of
/// their block records, waking the launcher each time, cost python3 a fifth of its start-up.
pub fn queue(kind: u32, thread: u32, parts: &[&[u8]]) {
    let fd = SOCK_FD.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let g = Spin::lock(&SOCK_LOCK);
    let q = queued(&g);
    q.extend_from_slice(&wire::frame_header(kind, thread, len as u64));
    for p in parts {
        q.extend_from_slice(p);
    }
    if q.len() >= QUEUE_LIMIT {
        write_queued(fd, &g);
    }
}

/// Sends the queued frames now (before the program's image is replaced or the connection closed).
pub fn send_queued() {
    let fd = SOCK_FD.load(Ordering::Relaxed);
    let g = Spin::lock(&SOCK_LOCK);
    if fd >= 0 {
        write_queued(fd, &g);
    }
}

/// Prints a line on the user's terminal.
pub fn say(msg: &str) {
    let line = format!("dep: {msg}\n");
    // SAFETY: writes `line`, a live buffer of `line.len()` bytes, to DynamoRIO's stderr handle.
    unsafe { dr_write_file(dr_stderr(), line.as_ptr() as *const c_void, line.len()) };
}

/// Connects to the launcher; the descriptor is close-on-exec, so an exec'd image connects anew.
pub fn connect() {
    let o = opts();
    if o.socket.is_empty() {
        return;
    }
    match std::os::unix::net::UnixStream::connect(&o.socket) {
        Ok(s) => {
            use std::os::unix::io::IntoRawFd;
            // Keep the descriptor out of the way of programs that reuse low numbers.
            let fd = s.into_raw_fd();
            // SAFETY: fcntl on a descriptor this client owns; exercised by tests/collector.rs
            // program_closing_every_descriptor.
            let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 900) };
            if high >= 0 {
                // SAFETY: closes the low copy this client opened, never the program's; exercised by
                // tests/collector.rs program_closing_every_descriptor.
                unsafe { libc::close(fd) };
                SOCK_FD.store(high, Ordering::Relaxed);
            } else {
                SOCK_FD.store(fd, Ordering::Relaxed);
            }
        }
        Err(e) => say(&format!("cannot reach the launcher at {}: {e}", o.socket)),
    }
}

/// After fork: the child drops the parent's connection and lock state.
pub fn reconnect_after_fork() {
    SOCK_LOCK.store(false, Ordering::Relaxed);
    LOST.store(false, Ordering::Relaxed);
    // The parent's queued frames are the parent's to send.
    queued(&Spin::lock(&SOCK_LOCK)).clear();
    let fd = SOCK_FD.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: the parent's connection, inherited by this child and taken out of SOCK_FD so
        // nothing else closes it; exercised by tests/collector.rs fork_and_exec.
        unsafe { libc::close(fd) };
    }
    connect();
}

/// The launcher connection's descriptor (-1 when none).
pub fn sock_fd() -> c_int {
    SOCK_FD.load(Ordering::Relaxed)
}

/// Moves the connection to another descriptor above `above` (the program is about to reuse
/// its number); senders are held off meanwhile.
pub fn move_sock_above(above: c_int) {
    let _g = Spin::lock(&SOCK_LOCK);
    let fd = SOCK_FD.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    // SAFETY: fcntl on a descriptor this client owns; exercised by tests/collector.rs
    // program_closing_every_descriptor.
    let n = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, above + 1) };
    if n >= 0 {
        SOCK_FD.store(n, Ordering::Relaxed);
        // The old number is the program's to take over.
        // SAFETY: `fd` is the connection's old number, now copied to `n`, under SOCK_LOCK;
        // exercised by tests/collector.rs program_closing_every_descriptor.
        unsafe { libc::close(fd) };
    }
}

pub fn disconnect() {
    send_queued();
    let fd = SOCK_FD.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: the connection's descriptor, taken out of SOCK_FD so nothing else closes it;
        // exercised at the end of every run, e.g. tests/collector.rs hello.
        unsafe { libc::close(fd) };
    }
}

// ---------------------------------------------------------------- per-thread state

/// Next thread index, in creation order.
pub static NEXT_THREAD: AtomicU32 = AtomicU32::new(0);

pub struct PerThread {
    pub index: u32,
    pub tid: u32,
    pub tls: *mut u8,
    pub tag_base: *mut u8,
    pub val_base: *mut u8,
    pub tru_base: *mut u8,
    /// The buffers shared with the launcher, when they are (otherwise the three bases are
    /// private and chunks are sent through the socket).
    pub slab: Option<crate::slab::Slab>,
    pub seq: u32,
    /// H-tag and register context at the current chunk's start.
    pub chunk_hi: u64,
    pub chunk_regs: [u64; NUM_REGS],
    /// The tag pointer after the last words C code wrote: no block tag lies before it.
    pub c_mark: *mut u8,
    /// `--discard` totals.
    pub counts: [u64; 4],
    /// The tag pointer right after the last interruption record (no double marking).
    pub interrupted_at: *mut u8,
    /// Where DynamoRIO last found this thread in the code cache when it only asked (a thread
    /// suspended to synchronise with all of them), with the tag and value pointers then: the
    /// thread ran on from there unless it ends with both pointers where they were (another
    /// thread's exit ended it there).
    pub queried: Option<(dr_mcontext_t, *mut u8, u64)>,
    /// Outside the windows: the interruption whose block's rest went back off the count
    /// last, as the cache address and the count then (no double giving back).
    pub gave_back_at: (u64, u64),
    /// Truth: the rep string whose start was observed and whose end was not yet.
    pub rep_pending: Option<RepPending>,
    /// Sync records written inside the current block: the tag pointer before the first
    /// (right after the block's tag) and after the last.
    pub sync_span: (*mut u8, *mut u8),
    /// The synchronising system call under way: its instruction in the current block.
    pub sync_syscall: Option<u16>,
    /// The sync record number before the system call under way.
    pub syscall_seq: Option<u64>,
    /// A clone under way: the sync record before it and the new thread's TLS pointer.
    pub cloning: Option<(u64, u64)>,
    /// A call reporting the descriptor limit under way: its number, and what to report.
    pub rlimit: Option<(core::ffi::c_int, crate::rlimit::Pending)>,
    /// The recorded system call under way ([`dep_profile::syscalls::recorded`]).
    pub syscall: Option<PendingSyscall>,
    /// The tag pointer right after the current chunk's start record.
    pub chunk_open: *mut u8,
    /// Windows ([`crate::window`]): the thread's instruction count is `win_base` minus the
    /// sum of the count slots from [`S_LEFT`].
    pub win_base: i64,
    /// Whether the blocks the thread runs are recorded now (its last window check found a
    /// recorded block and no unrecorded one since).
    pub recording: bool,
    /// Whether blocks built for the thread now are the recorded kind.
    pub build_recorded: bool,
    /// The instruction the current unrecorded stretch started at.
    pub gap_from: u64,
    /// `--start-at`: the thread entered the function (recording started, once).
    pub started: bool,
    /// `--stop-at`: the function was entered while recording; it returns to this address
    /// with the stack pointer at this value.
    pub stop_armed: Option<(u64, u64)>,
    /// `--stop-at`: the function returned (recording stopped, for good).
    pub stopped: bool,
    /// The trace this thread is building ([`crate::traces`]): its head's tag, its blocks so
    /// far, and its loop body's length once it came back to its head (0 before).
    pub trace_building: (u64, u32, u32),
}

/// A recorded system call under way: what its return's records need.
#[derive(Clone, Copy, Debug)]
pub struct PendingSyscall {
    /// Its instruction in the current block, and that instruction's pc.
    pub at: u16,
    pub pc: u64,
    pub nr: u64,
    /// rdi, rsi, rdx, r10, r8, r9 at entry (the kernel may change them).
    pub args: [u64; 6],
}

/// The process-wide sequence every sync record takes its number from: one counter for all
/// threads, so that the numbers order their synchronisation points.
pub static SYNC_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Writes a sync record for the current block's instruction place `at` (see
/// [`tags::Escape::Sync`]) and returns its number.
///
/// # Safety
/// `pt` is the calling thread's own PerThread from [`get`], set up by [`new_thread`] and not yet
/// freed; exercised by tests/collector.rs hello and eight_threads_with_mutexes.
pub unsafe fn push_sync(pt: &mut PerThread, at: u16) -> Option<u64> {
    if opts().no_sync {
        return None;
    }
    let seq = SYNC_SEQ.fetch_add(1, Ordering::SeqCst);
    push_in_block(pt, Escape::Sync { at, seq });
    Some(seq)
}

/// Writes a record about the current block's instructions after its tag. The block's tag
/// stays the last one C code can find (`sync_span`), so a fault later in the block is
/// still marked on it.
///
/// # Safety
/// `pt` is the calling thread's own PerThread from [`get`], set up by [`new_thread`] and not yet
/// freed; exercised by tests/collector.rs hello and eight_threads_with_mutexes.
pub unsafe fn push_in_block(pt: &mut PerThread, e: Escape) {
    let mut p = *slot(pt, S_TAGPTR) as *mut u8;
    if pt.sync_span.1 != p {
        pt.sync_span.0 = p;
    }
    let mut w = Vec::with_capacity(16);
    tags::push_escape(e, &mut w);
    for x in w {
        (p as *mut u16).write_unaligned(x);
        p = p.add(2);
    }
    *slot(pt, S_TAGPTR) = p as u64;
    pt.sync_span.1 = p;
}

/// Writes a sync record at no instruction (thread start or end, signal, chunk hand-off).
///
/// # Safety
/// `pt` is the calling thread's own PerThread from [`get`], set up by [`new_thread`] and not yet
/// freed; exercised by tests/collector.rs hello and eight_threads_with_mutexes.
pub unsafe fn push_sync_point(pt: &mut PerThread) {
    if opts().no_sync {
        return;
    }
    let seq = SYNC_SEQ.fetch_add(1, Ordering::SeqCst);
    push_escape(pt, Escape::Sync { at: tags::SYNC_NO_INSN, seq });
}

/// Truth: what a rep string's end needs from its start.
#[derive(Clone, Copy, Debug)]
pub struct RepPending {
    pub pc: u64,
    /// rcx before the instruction.
    pub count_reg: u64,
    /// The count register's width: all ones, or the low 32 bits under an address-size prefix.
    pub mask: u64,
}

/// Appends one truth record. The block-entry check leaves room for every record a block
/// writes (TRU_SLACK bytes); the records of one block are counted in its analysis.
///
/// # Safety
/// `pt` is the calling thread's own PerThread from [`get`], set up by [`new_thread`] and not yet
/// freed; exercised by tests/collector.rs hello and eight_threads_with_mutexes. Also
/// truth_run_records_what_a_plain_run_records.
pub unsafe fn push_truth(pt: &PerThread, rec: dep_profile::truth::TruthRecord) {
    let mut bytes = Vec::with_capacity(dep_profile::truth::RECORD_SIZE);
    rec.write(&mut bytes);
    let p = *slot(pt, S_TRUPTR) as *mut u8;
    core::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
    *slot(pt, S_TRUPTR) = p.add(bytes.len()) as u64;
}

/// # Safety
/// `pt` is the calling thread's own PerThread from [`get`], set up by [`new_thread`] and not yet
/// freed; exercised by tests/collector.rs hello and eight_threads_with_mutexes.
pub unsafe fn slot(pt: &PerThread, s: u32) -> *mut u64 {
    pt.tls.add(8 * s as usize) as *mut u64
}

/// # Safety
/// Called where DynamoRIO's global allocator may be used (any event); exercised by
/// tests/collector.rs hello and eight_threads_with_mutexes.
pub unsafe fn alloc(size: usize) -> *mut u8 {
    let p = dr_raw_mem_alloc(size, DR_MEMPROT_READ | DR_MEMPROT_WRITE, core::ptr::null_mut());
    if p.is_null() {
        say("out of memory for trace buffers");
        dr_abort();
    }
    p as *mut u8
}

/// # Safety
/// `dc` is the calling thread's live drcontext, inside a DynamoRIO event or clean call; exercised
/// by tests/collector.rs hello and eight_threads_with_mutexes.
pub unsafe fn get(dc: *mut c_void) -> *mut PerThread {
    drmgr_get_tls_field(dc, TLS_IDX) as *mut PerThread
}

/// Marks every register UPDATED: each is recorded again at its next use.
///
/// # Safety
/// `pt` is the calling thread's own PerThread from [`get`], set up by [`new_thread`] and not yet
/// freed; exercised by tests/collector.rs hello and eight_threads_with_mutexes.
pub unsafe fn expire_all(pt: &PerThread) {
    core::ptr::write_bytes(slot(pt, S_SHADOW) as *mut u8, UPDATED, 24);
}

/// Appends tag words from C code (escapes).
///
/// # Safety
/// `pt` is the calling thread's own PerThread from [`get`], set up by [`new_thread`] and not yet
/// freed; exercised by tests/collector.rs hello and eight_threads_with_mutexes.
pub unsafe fn push_words(pt: &mut PerThread, words: &[u16]) {
    let mut p = *slot(pt, S_TAGPTR) as *mut u8;
    for w in words {
        (p as *mut u16).write_unaligned(*w);
        p = p.add(2);
    }
    *slot(pt, S_TAGPTR) = p as u64;
    pt.c_mark = p;
}

/// # Safety
/// `pt` is the calling thread's own PerThread from [`get`], set up by [`new_thread`] and not yet
/// freed; exercised by tests/collector.rs hello and eight_threads_with_mutexes.
pub unsafe fn push_escape(pt: &mut PerThread, e: Escape) {
    let mut w = Vec::with_capacity(4);
    tags::push_escape(e, &mut w);
    push_words(pt, &w);
}

/// Starts a fresh chunk in the (empty) buffers.
///
/// # Safety
/// `pt` is the calling thread's own PerThread from [`get`], set up by [`new_thread`] and not yet
/// freed; exercised by tests/collector.rs hello and eight_threads_with_mutexes.
unsafe fn begin_chunk(pt: &mut PerThread) {
    *slot(pt, S_TAGPTR) = pt.tag_base as u64;
    *slot(pt, S_TAGLIM) = pt.tag_base as u64 + (TAG_BUF - TAG_SLACK) as u64;
    *slot(pt, S_VALPTR) = pt.val_base as u64;
    *slot(pt, S_VALLIM) = pt.val_base as u64 + (VAL_BUF - VAL_SLACK) as u64;
    *slot(pt, S_TRUPTR) = pt.tru_base as u64;
    *slot(pt, S_TRULIM) = if pt.tru_base.is_null() { 0 } else { pt.tru_base as u64 + (TRU_BUF - TRU_SLACK) as u64 };
    pt.chunk_hi = *slot(pt, S_PREVHI);
    // Chunks start with every register expired, so recovery needs nothing from before.
    expire_all(pt);
    push_escape(pt, Escape::ChunkStart { seq: pt.seq });
    pt.chunk_open = *slot(pt, S_TAGPTR) as *mut u8;
}

/// # Safety
/// `dc` is the calling thread's live drcontext, inside a DynamoRIO event or clean call; exercised
/// by tests/collector.rs hello and eight_threads_with_mutexes. Once per thread, from its
/// thread-init event.
pub unsafe fn new_thread(dc: *mut c_void) -> *mut PerThread {
    let tls = (dr_get_dr_segment_base(TLS_SEG) as *mut u8).add(TLS_OFFS as usize);
    let index = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
    let (tag_base, val_base, tru_base, slab) = buffers(index);
    let pt = Box::into_raw(Box::new(PerThread {
        index,
        tid: dr_get_thread_id(dc) as u32,
        tls,
        tag_base,
        val_base,
        tru_base,
        slab,
        seq: 0,
        chunk_hi: 0,
        chunk_regs: [0; NUM_REGS],
        c_mark: core::ptr::null_mut(),
        counts: [0; 4],
        interrupted_at: core::ptr::null_mut(),
        queried: None,
        gave_back_at: (0, 0),
        rep_pending: None,
        sync_span: (core::ptr::null_mut(), core::ptr::null_mut()),
        sync_syscall: None,
        syscall_seq: None,
        cloning: None,
        rlimit: None,
        syscall: None,
        chunk_open: core::ptr::null_mut(),
        win_base: 0,
        // Without windows every block is recorded, from the thread's start.
        recording: crate::window::recorded_from_start(),
        build_recorded: crate::window::recorded_from_start(),
        gap_from: 0,
        started: false,
        stop_armed: None,
        stopped: false,
        trace_building: (0, 0, 0),
    }));
    *slot(&*pt, S_PREVHI) = 0;
    // The first block checks the windows.
    for k in 0..COUNT_SLOTS {
        *slot(&*pt, S_LEFT + k) = 0;
    }
    begin_chunk(&mut *pt);
    push_escape(&mut *pt, Escape::ThreadStart);
    push_sync_point(&mut *pt);
    pt
}

/// A thread's buffers: a slab shared with the launcher when one can be made (not with
/// `--discard`, which sends no chunks), else private ones.
///
/// # Safety
/// Called from a DynamoRIO event on the thread the buffers are for; exercised by
/// tests/collector.rs hello and eight_threads_with_mutexes.
unsafe fn buffers(index: u32) -> (*mut u8, *mut u8, *mut u8, Option<crate::slab::Slab>) {
    let truth = opts().truth;
    if !opts().discard && SOCK_FD.load(Ordering::Relaxed) >= 0 {
        if let Some(slab) = crate::slab::Slab::create(index, truth) {
            let (t, v, r) = slab.regions();
            return (t, v, r, Some(slab));
        }
    }
    (alloc(TAG_BUF), alloc(VAL_BUF), if truth { alloc(TRU_BUF) } else { core::ptr::null_mut() }, None)
}

/// Gives back a thread's buffers (after its last hand-off).
///
/// # Safety
/// `pt`'s buffers are not used afterwards; exercised by tests/collector.rs hello and
/// eight_threads_with_mutexes.
pub unsafe fn free_buffers(pt: &mut PerThread) {
    match pt.slab.take() {
        Some(slab) => slab.unmap(),
        None => {
            dr_raw_mem_free(pt.tag_base as *mut c_void, TAG_BUF);
            dr_raw_mem_free(pt.val_base as *mut c_void, VAL_BUF);
            if !pt.tru_base.is_null() {
                dr_raw_mem_free(pt.tru_base as *mut c_void, TRU_BUF);
            }
        }
    }
    pt.tag_base = core::ptr::null_mut();
    pt.val_base = core::ptr::null_mut();
    pt.tru_base = core::ptr::null_mut();
}

/// Restarts a thread's streams in a forked child: the parent hands off what was buffered.
///
/// # Safety
/// `pt` is the calling thread's own PerThread from [`get`], set up by [`new_thread`] and not yet
/// freed; exercised by tests/collector.rs hello and eight_threads_with_mutexes. Only in the fork
/// child's event, with its `dc`; also fork_and_exec.
pub unsafe fn restart_in_child(pt: &mut PerThread, dc: *mut c_void) {
    pt.index = 0;
    pt.tid = dr_get_thread_id(dc) as u32;
    pt.seq = 0;
    pt.counts = [0; 4];
    NEXT_THREAD.store(1, Ordering::Relaxed);
    // A slab is the parent's memory, which its thread goes on filling: the child unmaps its
    // view and makes its own. (Private buffers were copied by fork and are the child's.)
    if let Some(parent) = pt.slab.take() {
        parent.unmap();
        (pt.tag_base, pt.val_base, pt.tru_base, pt.slab) = buffers(0);
    }
    begin_chunk(pt);
    push_escape(pt, Escape::ThreadStart);
    push_sync_point(pt);
}

/// Hands off the buffers as one chunk and starts the next one.
///
/// # Safety
/// `pt` is the calling thread's own PerThread from [`get`], set up by [`new_thread`] and not yet
/// freed; exercised by tests/collector.rs hello and eight_threads_with_mutexes. Also
/// full_disk_keeps_a_readable_prefix.
pub unsafe fn flush(pt: &mut PerThread, last: bool) {
    // The hand-off is a point in the order too, the chunk's last record.
    push_sync_point(pt);
    let tp = *slot(pt, S_TAGPTR) as *mut u8;
    let vp = *slot(pt, S_VALPTR) as *mut u8;
    let rp = *slot(pt, S_TRUPTR) as *mut u8;
    let tn = tp.offset_from(pt.tag_base) as usize;
    let vn = vp.offset_from(pt.val_base) as usize;
    let rn = if pt.tru_base.is_null() { 0 } else { rp.offset_from(pt.tru_base) as usize };
    if opts().discard {
        pt.counts[0] += tn as u64;
        pt.counts[1] += vn as u64;
        pt.counts[2] += rn as u64;
        pt.counts[3] += 1;
    } else {
        let h = wire::ChunkHeader {
            seq: pt.seq,
            last,
            hi: pt.chunk_hi,
            status: 0,
            regs: pt.chunk_regs,
            tags_len: tn as u64,
            values_len: vn as u64,
            truth_len: rn as u64,
        };
        match &mut pt.slab {
            Some(slab) => {
                slab.hand_off(pt.index, &h);
                (pt.tag_base, pt.val_base, pt.tru_base) = slab.regions();
            }
            None => {
                let hb = h.encode();
                let parts: [&[u8]; 4] = [
                    &hb,
                    core::slice::from_raw_parts(pt.tag_base, tn),
                    core::slice::from_raw_parts(pt.val_base, vn),
                    if rn == 0 { &[] } else { core::slice::from_raw_parts(pt.tru_base, rn) },
                ];
                send(wire::CHUNK, pt.index, &parts);
            }
        }
    }
    pt.seq += 1;
    begin_chunk(pt);
}

/// Hands off the buffers if escapes written outside blocks (a burst of signals during a
/// system call) reached the limit; callers have just expired every register, so a chunk
/// may begin here.
///
/// # Safety
/// `pt` is the calling thread's own PerThread from [`get`], set up by [`new_thread`] and not yet
/// freed; exercised by tests/collector.rs hello and eight_threads_with_mutexes.
pub unsafe fn ensure_room(pt: &mut PerThread) {
    if *slot(pt, S_TAGPTR) >= *slot(pt, S_TAGLIM) {
        flush(pt, false);
    }
}

/// Sends the truth gathered so far ahead of its chunk (a long rep string filled the buffer).
///
/// # Safety
/// `pt` is the calling thread's own PerThread from [`get`], set up by [`new_thread`] and not yet
/// freed; exercised by tests/collector.rs hello and eight_threads_with_mutexes. Also
/// truth_run_records_what_a_plain_run_records.
pub unsafe fn flush_truth(pt: &mut PerThread) {
    let rp = *slot(pt, S_TRUPTR) as *mut u8;
    let rn = rp.offset_from(pt.tru_base) as usize;
    if opts().discard {
        pt.counts[2] += rn as u64;
    } else if rn > 0 {
        send(wire::TRUTH_PART, pt.index, &[core::slice::from_raw_parts(pt.tru_base, rn)]);
    }
    *slot(pt, S_TRUPTR) = pt.tru_base as u64;
}

/// Clean-call target of the block-entry check (made by the stub of stub.rs).
///
/// # Safety
/// Only called from a clean call inserted by this client, on an application thread whose PerThread
/// is set up; exercised by tests/collector.rs hello, eight_threads_with_mutexes and
/// python3_from_the_system.
pub unsafe extern "C" fn flush_cc() {
    let dc = dr_get_current_drcontext();
    let pt = get(dc);
    if !pt.is_null() {
        let mut mc: dr_mcontext_t = core::mem::zeroed();
        mc.size = core::mem::size_of::<dr_mcontext_t>();
        mc.flags = dr_mcontext_flags_t::DR_MC_INTEGER;
        let regs = if dr_get_mcontext(dc, &mut mc) != 0 { mcontext_regs(&mc) } else { [0; NUM_REGS] };
        flush(&mut *pt, false);
        (*pt).chunk_regs = regs;
    }
}

/// Clean-call target inside long rep strings in truth mode.
///
/// # Safety
/// Only called from a clean call inserted by this client, on an application thread whose PerThread
/// is set up; exercised by tests/collector.rs truth_run_records_what_a_plain_run_records.
pub unsafe extern "C" fn flush_truth_cc() {
    let pt = get(dr_get_current_drcontext());
    if !pt.is_null() {
        flush_truth(&mut *pt);
    }
}

/// The value registers from a machine context (segment bases are not in it).
///
/// # Safety
/// `mc` was filled by DynamoRIO with at least the integer registers; exercised by
/// tests/collector.rs signal_handler_interrupting_a_hot_loop and siglongjmp_out_of_faults.
pub unsafe fn mcontext_regs(mc: &dr_mcontext_t) -> [u64; NUM_REGS] {
    let mut r = [0u64; NUM_REGS];
    r[0] = mc.__bindgen_anon_8.xax as u64;
    r[1] = mc.__bindgen_anon_7.xcx as u64;
    r[2] = mc.__bindgen_anon_6.xdx as u64;
    r[3] = mc.__bindgen_anon_5.xbx as u64;
    r[4] = mc.__bindgen_anon_4.xsp as u64;
    r[5] = mc.__bindgen_anon_3.xbp as u64;
    r[6] = mc.__bindgen_anon_2.xsi as u64;
    r[7] = mc.__bindgen_anon_1.xdi as u64;
    r[8] = mc.r8 as u64;
    r[9] = mc.r9 as u64;
    r[10] = mc.r10 as u64;
    r[11] = mc.r11 as u64;
    r[12] = mc.r12 as u64;
    r[13] = mc.r13 as u64;
    r[14] = mc.r14 as u64;
    r[15] = mc.r15 as u64;
    r
}
