//! The DEP DynamoRIO client. It records, per thread, the DEP_c block tags and the DEP_m
//! register values inline (no clean call in the steady state), hands full buffers to the
//! launcher over a Unix socket, and reports blocks, modules, threads and signals.
//!
//! Options (from `dep record`): `-socket PATH`, `-truth`, `-discard`, `-no_sync`,
//! `-windows SKIP INSTRS COUNT EVERY`, `-start_at FUNCTION`, `-stop_at FUNCTION`.
#![allow(clippy::missing_safety_doc, static_mut_refs)]

mod codegen;
mod encodings;
mod handoff;
mod instrument;
mod observe;
mod rlimit;
mod slab;
#[cfg(test)]
mod standalone;
mod state;
mod stub;
mod table;
mod traces;
mod watch;
mod window;

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};
use dep_collector::wire;
use dep_profile::container::{Metadata, ModuleEvent, ModuleEventKind, ParentLink, ThreadEvent, ThreadEventKind, VERSION};
use dep_profile::syscalls;
use dep_profile::tags::Escape;
use dynamorio_sys::*;
use state::*;

#[no_mangle]
pub static _USES_DR_VERSION_: c_int = 1190;

pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// Bytes of the XSAVE area for the enabled state components.
fn xsave_size() -> u32 {
    core::arch::x86_64::__cpuid_count(0xd, 0).ebx
}

/// # Safety
/// Called in dr_client_main, after DynamoRIO has loaded the main module; exercised by
/// tests/collector.rs hello.
unsafe fn main_module_path() -> String {
    let m = dr_get_main_module();
    if m.is_null() {
        return String::new();
    }
    let s = if (*m).full_path.is_null() { String::new() } else { std::ffi::CStr::from_ptr((*m).full_path).to_string_lossy().into_owned() };
    dr_free_module_data(m);
    s
}

fn command_line() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .map(|b| b.split(|&c| c == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect())
        .unwrap_or_default()
}

static mut PARENT: Option<ParentLink> = None;
static mut MODULES: Vec<ModuleEvent> = Vec::new();
static MODULES_LOCK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// # Safety
/// Called once in dr_client_main after the options are parsed; exercised by tests/collector.rs
/// hello.
unsafe fn hello() {
    let meta = Metadata {
        format_version: VERSION,
        width: 64,
        command: command_line(),
        program: main_module_path(),
        pid: dr_get_process_id() as u32,
        start_time_ns: now_ns(),
        xsave_size: xsave_size(),
        truth: opts().truth,
        tool: concat!("dep ", env!("CARGO_PKG_VERSION")).into(),
        // A new image not forked under the client (the first, or one a vfork child exec'd)
        // names its parent process; the launcher keeps the link if that process is recorded.
        // An attached process's parent was not recorded with it.
        parent: PARENT
            .clone()
            .or_else(|| (!opts().attached).then(|| ParentLink { how: "fork".into(), parent_pid: libc::getppid() as u32 })),
        windows: opts().windows,
        start_at: opts().start_at.clone(),
        stop_at: opts().stop_at.clone(),
        // A process forked or exec'd under the client is recorded from its start.
        attached: opts().attached && PARENT.is_none(),
    };
    send(wire::HELLO, 0, &[&serde_json::to_vec(&meta).unwrap()]);
}

fn json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

/// # Safety
/// `pt` is the calling thread's own set-up PerThread; exercised by tests/collector.rs hello and
/// eight_threads_with_mutexes.
unsafe fn thread_event(pt: &PerThread, event: ThreadEventKind) {
    let e = ThreadEvent { event, index: pt.index, tid: pt.tid, time_ns: now_ns(), ..Default::default() };
    send(wire::THREAD, pt.index, &[&json(&e)]);
}

/// # Safety
/// DynamoRIO calls it on each new application thread with its drcontext, with valid pointers for
/// the duration of the call; exercised by tests/collector.rs hello and eight_threads_with_mutexes.
unsafe extern "C" fn thread_init(dc: *mut c_void) {
    let pt = new_thread(dc);
    drmgr_set_tls_field(dc, TLS_IDX, pt as *mut c_void);
    handoff::register(&*pt);
    thread_event(&*pt, ThreadEventKind::Start);
}

/// # Safety
/// `dc` is the calling thread's live drcontext, inside a DynamoRIO event or clean call; exercised
/// by tests/collector.rs hello and eight_threads_with_mutexes.
unsafe fn thread_done(dc: *mut c_void) {
    let pt = get(dc);
    if pt.is_null() {
        return;
    }
    // A thread another one's exit stopped in the code cache: DynamoRIO found it there
    // (restore_event) and it ran no further, so its last block ends where it stood.
    if let Some((mc, tags, values)) = (*pt).queried.take() {
        let p = &mut *pt;
        if p.recording && *slot(p, S_TAGPTR) as *mut u8 == tags && *slot(p, S_VALPTR) == values {
            mark_interrupted(p, &mc);
        }
    }
    window::thread_ends(&mut *pt);
    push_sync_point(&mut *pt);
    push_escape(&mut *pt, Escape::ThreadEnd);
    flush(&mut *pt, true);
    if opts().discard {
        let c = (*pt).counts;
        let b: Vec<u8> = c.iter().flat_map(|v| v.to_le_bytes()).collect();
        send(wire::COUNTS, (*pt).index, &[&b]);
    }
    thread_event(&*pt, ThreadEventKind::End);
    handoff::unregister(&*pt);
    drmgr_set_tls_field(dc, TLS_IDX, core::ptr::null_mut());
    let mut b = Box::from_raw(pt);
    free_buffers(&mut b);
}

/// # Safety
/// DynamoRIO calls it on each exiting application thread with its drcontext, with valid pointers
/// for the duration of the call; exercised by tests/collector.rs hello and
/// eight_threads_with_mutexes.
unsafe extern "C" fn thread_exit(dc: *mut c_void) {
    thread_done(dc);
}

/// # Safety
/// DynamoRIO calls it once at process exit, after the other threads' exit events, with valid
/// pointers for the duration of the call; exercised by tests/collector.rs hello and
/// eight_threads_with_mutexes.
unsafe extern "C" fn event_exit() {
    window::unresolved_bounds();
    let dc = dr_get_current_drcontext();
    if !dc.is_null() {
        thread_done(dc);
    }
    disconnect();
    drutil_exit();
    drmgr_unregister_tls_field(TLS_IDX);
    drreg_exit();
    drx_exit();
    drmgr_exit();
}

/// # Safety
/// `info` is the module data DynamoRIO passed to the current module event; exercised by
/// tests/collector.rs hello and python3_from_the_system.
unsafe fn module_event(info: *const module_data_t, event: ModuleEventKind) {
    let m = &*info;
    let path = if m.full_path.is_null() { String::new() } else { std::ffi::CStr::from_ptr(m.full_path).to_string_lossy().into_owned() };
    let base = m.__bindgen_anon_1.start as u64;
    let e = ModuleEvent {
        event,
        path,
        base,
        size: m.end as u64 - base,
        build_id: None,
        entry: (event == ModuleEventKind::Load).then_some(m.entry_point as u64),
    };
    send(wire::MODULE, 0, &[&json(&e)]);
    if event == ModuleEventKind::Load {
        watch::module_loaded(&e.path, base);
    } else {
        watch::module_unloaded(base, m.end as u64);
    }
    let _g = Spin::lock(&MODULES_LOCK);
    if event == ModuleEventKind::Load {
        MODULES.push(e);
    } else {
        MODULES.retain(|x| x.base != e.base);
    }
}

/// DynamoRIO and this client are in the process but are not the program's.
///
/// # Safety
/// `info` is the module data of the current module event; exercised by tests/collector.rs hello.
unsafe fn is_ours(info: *const module_data_t) -> bool {
    let m = &*info;
    if m.full_path.is_null() {
        return false;
    }
    let p = std::ffi::CStr::from_ptr(m.full_path).to_string_lossy();
    p.ends_with("/libdynamorio.so") || p.ends_with("/libdep_client.so")
}

/// # Safety
/// DynamoRIO calls it when a module is loaded, with valid pointers for the duration of the call;
/// exercised by tests/collector.rs hello and python3_from_the_system.
unsafe extern "C" fn module_load(_dc: *mut c_void, info: *const module_data_t, _loaded: bool_) {
    if !is_ours(info) {
        module_event(info, ModuleEventKind::Load);
    }
}

/// # Safety
/// DynamoRIO calls it when a module is unloaded, with valid pointers for the duration of the call;
/// exercised by tests/collector.rs python3_from_the_system.
unsafe extern "C" fn module_unload(_dc: *mut c_void, info: *const module_data_t) {
    if !is_ours(info) {
        module_event(info, ModuleEventKind::Unload);
    }
}

/// The block whose tag was written last in this chunk, if any (before the sync records
/// its instructions wrote after it).
///
/// # Safety
/// `pt` is the calling thread's own set-up PerThread; exercised by tests/collector.rs
/// signal_handler_interrupting_a_hot_loop and siglongjmp_out_of_faults.
unsafe fn current_block(pt: &PerThread) -> Option<u64> {
    let mut tp = *slot(pt, S_TAGPTR) as *mut u8;
    if tp == pt.sync_span.1 {
        tp = pt.sync_span.0;
    }
    if tp <= pt.c_mark {
        return None;
    }
    let l = (tp.sub(2) as *const u16).read_unaligned();
    Some((*slot(pt, S_PREVHI) << 16) | l as u64)
}

/// Records that the current block stopped at `pc` (a fault, or DynamoRIO moving the thread):
/// the instruction there was attempted and execution resumes there in a new block. Every
/// register expires, since the block's shadow updates did not run.
///
/// # Safety
/// `pt` is the calling thread's own set-up PerThread and `mc` its machine state; exercised by
/// tests/collector.rs signal_handler_interrupting_a_hot_loop and siglongjmp_out_of_faults.
unsafe fn mark_interrupted(pt: &mut PerThread, mc: &dr_mcontext_t) {
    let tp = *slot(pt, S_TAGPTR) as *mut u8;
    if pt.interrupted_at == tp {
        return;
    }
    let pc = mc.__bindgen_anon_10.xip as u64;
    let Some(block) = current_block(pt).and_then(table::latest) else { return };
    let mut sem = dep_profile::Semantics::new(instrument::MACHINE);
    let Ok(plan) = dep_profile::BlockPlan::build(&mut sem, block.addr, &block.code, Some(block.insn_count as usize)) else { return };
    let Some(k) = plan.insns.iter().position(|i| i.pc == pc) else { return };
    if let dep_profile::semantics::Special::Rep(r) = plan.insns[k].special {
        // Where the rep string stopped goes in its slot.
        let slot_ptr = *slot(pt, S_REPPOST) as *mut u64;
        if !slot_ptr.is_null() {
            slot_ptr.write_unaligned(mcontext_regs(mc)[r.post.index()]);
        }
    }
    push_escape(pt, Escape::Interrupted { insn: k as u16 });
    // The block counted all its instructions at its entry; recovery numbers it as run up
    // to and including instruction k.
    crate::window::give_back(pt, plan.insns.len().saturating_sub(k + 1) as u64);
    push_escape(pt, Escape::ExpireAll);
    expire_all(pt);
    if opts().truth {
        use dep_profile::truth::{TruthKind, TruthRecord};
        if let Some(rep) = pt.rep_pending.take() {
            // Stopped inside the rep string (which then counts the iteration it was
            // attempting, as recovery does), or before the instruction after it.
            let done = rep.count_reg.wrapping_sub(mcontext_regs(mc)[1]) & rep.mask;
            let count = done + (pc == rep.pc) as u64;
            push_truth(pt, TruthRecord { kind: TruthKind::RepEnd, size: 0, pc: rep.pc, addr: count });
        }
        push_truth(pt, TruthRecord { kind: TruthKind::Interrupted, size: k as u32, pc, addr: 0 });
    }
    pt.interrupted_at = *slot(pt, S_TAGPTR) as *mut u8;
}

/// DynamoRIO translates a thread's state for a fault or to move the thread.
///
/// # Safety
/// DynamoRIO calls it when it translates a thread's state out of the code cache, with valid
/// pointers for the duration of the call; exercised by tests/collector.rs
/// signal_handler_interrupting_a_hot_loop, siglongjmp_out_of_faults and
/// threads_running_when_another_exits.
unsafe extern "C" fn restore_event(dc: *mut c_void, restore_memory: bool_, info: *mut dr_restore_state_info_t) -> bool_ {
    // Without `restore_memory` DynamoRIO only asks where the thread is (whether a thread it
    // suspended to synchronise with all of them is at a safe spot): the thread then runs
    // on in its block, which is no interruption. Every move of a thread out of the code
    // cache (a fault, a relocation, detaching) translates with it (core/synch.c,
    // core/unix/signal.c). Recording a query as an interruption cut the block short in the
    // tags while its later steps went on storing values: `dep recover` then refused the
    // chunk ("value stream has N bytes left over"), on threads that were running when
    // DynamoRIO synchronised with all threads (another thread's exit among other times).
    let pt = get(dc);
    if restore_memory == 0 {
        // Kept, for the thread that never runs on: [`thread_done`] takes it as the point
        // where the process's exit stopped the thread.
        if !pt.is_null() && (*pt).recording && !info.is_null() && !(*info).mcontext.is_null() {
            let p = &mut *pt;
            p.queried = Some((*(*info).mcontext, *slot(p, S_TAGPTR) as *mut u8, *slot(p, S_VALPTR)));
        }
        return 1;
    }
    // (Outside a window the last block recorded is not the one running.)
    if !pt.is_null() && !info.is_null() && !(*info).mcontext.is_null() && !crate::window::translating_check(dc, &*info) {
        if (*pt).recording {
            mark_interrupted(&mut *pt, &*(*info).mcontext);
        } else {
            crate::window::interrupted_outside(&mut *pt, &*info);
        }
    }
    1
}

/// # Safety
/// DynamoRIO calls it before delivering a signal to the application thread, with valid pointers for
/// the duration of the call; exercised by tests/collector.rs signal_handler_interrupting_a_hot_loop
/// and siglongjmp_out_of_faults.
unsafe extern "C" fn signal_event(dc: *mut c_void, si: *mut dr_siginfo_t) -> dr_signal_action_t {
    let si = &mut *si;
    let pt = get(dc);
    if pt.is_null() {
        return dr_signal_action_t_DR_SIGNAL_DELIVER;
    }
    let pt = &mut *pt;
    // A window check come due faults; it is no signal of the program's.
    if let Some(action) = crate::window::due_signal(dc, pt, si) {
        return action;
    }
    if !pt.recording {
        // Outside the windows: nothing is recorded, and a signal that ends the process
        // finds nothing buffered but the thread's start.
        if matches!(
            si.sig,
            libc::SIGSEGV | libc::SIGBUS | libc::SIGFPE | libc::SIGILL | libc::SIGABRT | libc::SIGTERM | libc::SIGINT | libc::SIGQUIT
        ) {
            flush(pt, false);
        }
        return dr_signal_action_t_DR_SIGNAL_DELIVER;
    }
    // A fault in the code cache stops the current block at the faulting instruction;
    // other signals arrive between blocks.
    if !si.fault_fragment_info.cache_start_pc.is_null() && !si.mcontext.is_null() {
        mark_interrupted(pt, &*si.mcontext);
    }
    push_escape(pt, Escape::Signal { signo: si.sig as u16 });
    push_sync_point(pt);
    // A system call the signal interrupted gets no record of its return: the handler's
    // blocks now come between.
    pt.sync_syscall = None;
    pt.syscall = None;
    expire_all(pt);
    // A signal may end the process: hand off what is buffered (a chunk may end here, as
    // every register has just expired).
    if matches!(
        si.sig,
        libc::SIGSEGV | libc::SIGBUS | libc::SIGFPE | libc::SIGILL | libc::SIGABRT | libc::SIGTERM | libc::SIGINT | libc::SIGQUIT
    ) {
        flush(pt, false);
    }
    dr_signal_action_t_DR_SIGNAL_DELIVER
}

const SYS_CLOSE: c_int = 3;
const SYS_DUP2: c_int = 33;
const SYS_DUP3: c_int = 292;
const SYS_CLOSE_RANGE: c_int = 436;
const SYS_RT_SIGRETURN: c_int = 15;
const SYS_EXECVE: c_int = 59;
const SYS_EXIT_GROUP: c_int = 231;
const SYS_EXECVEAT: c_int = 322;

/// The syscalls that change which memory is mapped and how (instrument::forget_regions).
const SYS_MAPPING: [c_int; 8] = [
    9,   /* mmap */
    10,  /* mprotect */
    11,  /* munmap */
    12,  /* brk */
    25,  /* mremap */
    30,  /* shmat */
    67,  /* shmdt */
    329, /* pkey_mprotect */
];

/// # Safety
/// DynamoRIO calls it to ask which system calls to intercept, with valid pointers for the duration
/// of the call; exercised by tests/collector.rs hello and eight_threads_with_mutexes.
unsafe extern "C" fn syscall_filter(_dc: *mut c_void, sysnum: c_int) -> bool_ {
    (matches!(
        sysnum,
        SYS_RT_SIGRETURN
            | SYS_EXECVE
            | SYS_EXECVEAT
            | SYS_EXIT_GROUP
            | SYS_CLOSE
            | SYS_DUP2
            | SYS_DUP3
            | SYS_CLOSE_RANGE
            | rlimit::SYS_GETRLIMIT
            | rlimit::SYS_PRLIMIT64
    ) || SYS_MAPPING.contains(&sysnum)
        || SYS_SYNC.contains(&sysnum)
        || (sysnum >= 0 && syscalls::recorded(sysnum as u64))) as bool_
}

/// After a mapping change too: a block built while the call ran may have seen the old one.
///
/// # Safety
/// DynamoRIO calls it after an intercepted system call, on the calling thread, with valid pointers
/// for the duration of the call; exercised by tests/collector.rs thread_local_storage_and_syscalls
/// and fork_and_exec.
unsafe extern "C" fn post_syscall(dc: *mut c_void, sysnum: c_int) {
    if SYS_MAPPING.contains(&sysnum) {
        instrument::forget_regions();
    }
    if sysnum == SYS_EXECVE || sysnum == SYS_EXECVEAT {
        // Only a failed execve returns: its image goes on, with its timer again.
        handoff::start();
    }
    let pt = get(dc);
    if !pt.is_null() {
        if let Some((_, p)) = (*pt).rlimit.take().filter(|r| r.0 == sysnum) {
            rlimit::after(dc, p);
        }
        if let Some(k) = (*pt).sync_syscall.take() {
            push_sync(&mut *pt, dep_profile::tags::SYNC_AFTER | k);
        }
        if let Some(call) = (*pt).syscall.take().filter(|c| c.nr == sysnum as u64) {
            syscall_returned(dc, &mut *pt, call);
        }
        if let Some((seq, tls)) = (*pt).cloning.take() {
            let child = dr_syscall_get_result(dc) as i64;
            if child > 0 {
                let e = ThreadEvent {
                    event: ThreadEventKind::Spawn,
                    index: (*pt).index,
                    tid: (*pt).tid,
                    time_ns: now_ns(),
                    child_tid: Some(child as u32),
                    seq: Some(seq),
                    tls: (tls != 0).then_some(tls),
                    ..Default::default()
                };
                send(wire::THREAD, (*pt).index, &[&json(&e)]);
            }
        }
    }
}

const SYS_CLONE: c_int = 56;
const SYS_CLONE3: c_int = 435;
const CLONE_SETTLS: u64 = 0x0008_0000;

/// A thread-creating call's TLS pointer (0 if it sets none): clone's fifth argument, or
/// the `tls` field (offset 56) of clone3's `struct clone_args`.
///
/// # Safety
/// `dc` is the calling thread's live drcontext, inside a DynamoRIO event or clean call; exercised
/// by tests/collector.rs hello and eight_threads_with_mutexes. Only from the clone system-call
/// events.
unsafe fn clone_tls(dc: *mut c_void, sysnum: c_int) -> u64 {
    if sysnum == SYS_CLONE {
        let flags = dr_syscall_get_param(dc, 0) as u64;
        return if flags & CLONE_SETTLS != 0 { dr_syscall_get_param(dc, 4) as u64 } else { 0 };
    }
    let mut args = [0u64; 8];
    let mut got = 0usize;
    let p = dr_syscall_get_param(dc, 0) as *const c_void;
    if dr_safe_read(p, 64, args.as_mut_ptr() as *mut c_void, &mut got) == 0 || got != 64 {
        return 0;
    }
    if args[0] & CLONE_SETTLS != 0 {
        args[7]
    } else {
        0
    }
}

/// System calls that order threads or processes: futexes (every lock, condition variable
/// and join that waits), thread and process creation and waiting, signals sent, and
/// messages through pipes, sockets and System V IPC. Each is stamped before it runs and
/// after it returns.
pub const SYS_SYNC: &[c_int] = &[
    0,   /* read */
    1,   /* write */
    7,   /* poll */
    23,  /* select */
    44,  /* sendto */
    45,  /* recvfrom */
    46,  /* sendmsg */
    47,  /* recvmsg */
    56,  /* clone */
    57,  /* fork */
    58,  /* vfork */
    61,  /* wait4 */
    62,  /* kill */
    64,  /* semget */
    65,  /* semop */
    69,  /* msgsnd */
    70,  /* msgrcv */
    200, /* tkill */
    202, /* futex */
    220, /* semtimedop */
    232, /* epoll_wait */
    234, /* tgkill */
    247, /* waitid */
    270, /* pselect6 */
    271, /* ppoll */
    281, /* epoll_pwait */
    435, /* clone3 */
    449, /* futex_waitv */
];

/// The application's registers in a clean call (which must read the app context), if the
/// thread is recorded.
///
/// # Safety
/// `dc` is the calling thread's live drcontext, inside a DynamoRIO event or clean call; exercised
/// by tests/collector.rs hello and eight_threads_with_mutexes. `pt` is that thread's PerThread.
unsafe fn app_regs(dc: *mut c_void, pt: *mut PerThread, flags: dr_mcontext_flags_t) -> Option<[u64; dep_profile::NUM_REGS]> {
    if pt.is_null() {
        return None;
    }
    let mut mc: dr_mcontext_t = core::mem::zeroed();
    mc.size = core::mem::size_of::<dr_mcontext_t>();
    mc.flags = flags;
    (dr_get_mcontext(dc, &mut mc) != 0).then(|| mcontext_regs(&mc))
}

/// Clean-call target before every system call instruction `k` of its block: stamps the
/// synchronising ones (the number is in rax).
///
/// # Safety
/// Only called from a clean call inserted by this client, on an application thread whose PerThread
/// is set up; exercised by tests/collector.rs thread_local_storage_and_syscalls.
pub unsafe extern "C" fn syscall_cc(k: u32, pc: u64) {
    let dc = dr_get_current_drcontext();
    let pt = get(dc);
    let Some(r) = app_regs(dc, pt, dr_mcontext_flags_t::DR_MC_INTEGER) else { return };
    let nr = r[0] as i64;
    let pt = &mut *pt;
    if (0..1024).contains(&nr) && (SYS_SYNC.contains(&(nr as c_int)) || syscalls::orders_threads(nr as u64)) {
        pt.syscall_seq = push_sync(pt, k as u16);
        pt.sync_syscall = Some(k as u16);
    }
    pt.syscall = None;
    if (0..1024).contains(&nr) && syscalls::recorded(nr as u64) {
        // rdi, rsi, rdx, r10, r8, r9: the kernel's argument registers.
        let args = [r[7], r[6], r[2], r[10], r[8], r[9]];
        push_in_block(pt, Escape::Syscall { at: k as u16, nr: nr as u16, args: [args[0], args[1], args[2]] });
        pt.syscall = Some(PendingSyscall { at: k as u16, pc, nr: nr as u64, args });
    }
}

/// The records of a recorded system call's return: its result, the descriptors a pipe or
/// socket pair wrote to memory, and the memory the kernel accessed ([`syscalls::memory`]),
/// in DEP_c and, with `--truth`, in the truth.
///
/// # Safety
/// `dc` is the calling thread's live drcontext in its post-syscall event, and `pt` its
/// PerThread; exercised by tests/kernel_refs.rs and tests/races.rs
/// synchronisation_objects_kernel_tls_reader_locks_atomics_and_guards.
unsafe fn syscall_returned(dc: *mut c_void, pt: &mut PerThread, call: PendingSyscall) {
    let value = dr_syscall_get_result(dc) as u64;
    push_in_block(pt, Escape::SyscallReturn { at: call.at, value });
    let truth = opts().truth;
    if truth {
        push_truth(
            pt,
            dep_profile::truth::TruthRecord { kind: dep_profile::truth::TruthKind::SyscallReturn, size: 0, pc: call.pc, addr: value },
        );
    }
    let mut read = |addr: u64, buf: &mut [u8]| {
        let mut got = 0usize;
        dr_safe_read(addr as *const c_void, buf.len(), buf.as_mut_ptr() as *mut c_void, &mut got) != 0 && got == buf.len()
    };
    if let (Some(at), 0) = (syscalls::pair_at(call.nr, &call.args), value) {
        let mut b = [0u8; 8];
        if read(at, &mut b) {
            let fd = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
            push_in_block(pt, Escape::Descriptors { fds: [fd(0), fd(4)] });
        }
    }
    let mut refs = Vec::new();
    syscalls::memory(call.nr, &call.args, value as i64, &mut read, &mut refs);
    for r in refs.iter().take(syscalls::MAX_REFS) {
        push_in_block(pt, Escape::Kernel { write: r.write, addr: r.addr, size: r.size });
        if truth {
            let kind = if r.write { dep_profile::truth::TruthKind::KernelWrite } else { dep_profile::truth::TruthKind::KernelRead };
            push_truth(pt, dep_profile::truth::TruthRecord { kind, size: r.size, pc: call.pc, addr: r.addr });
        }
    }
}

/// Clean-call target after atomic instruction `k` (at the block's next instruction).
///
/// # Safety
/// Only called from a clean call inserted by this client, on an application thread whose PerThread
/// is set up; exercised by tests/collector.rs eight_threads_with_mutexes.
pub unsafe extern "C" fn atomic_after_cc(k: u32) {
    let pt = get(dr_get_current_drcontext());
    if !pt.is_null() {
        push_sync(&mut *pt, dep_profile::tags::SYNC_AFTER | k as u16);
    }
}

/// Clean-call target before every atomic instruction `k` of its block.
///
/// # Safety
/// Only called from a clean call inserted by this client, on an application thread whose PerThread
/// is set up; exercised by tests/collector.rs eight_threads_with_mutexes.
pub unsafe extern "C" fn atomic_cc(k: u32) {
    let pt = get(dr_get_current_drcontext());
    if !pt.is_null() {
        push_sync(&mut *pt, k as u16);
    }
}

/// Clean-call target at the entry of watched function `func` (instruction `k` of its
/// block): a sync record, then the call with rdi, rsi and the return address. A jump back
/// to the entry within the same call (a spin loop) is recorded again: analyses tell it
/// from a new call by its return address and the blocks between.
///
/// # Safety
/// Only called from a clean call inserted by this client, on an application thread whose PerThread
/// is set up; exercised by tests/collector.rs hello, eight_threads_with_mutexes and
/// python3_from_the_system.
pub unsafe extern "C" fn call_cc(func: u32, k: u32) {
    let dc = dr_get_current_drcontext();
    let pt = get(dc);
    let Some(r) = app_regs(dc, pt, dr_mcontext_flags_t::DR_MC_INTEGER | dr_mcontext_flags_t::DR_MC_CONTROL) else { return };
    // rax..r15 in the machine's order: rsp is 4, rsi 6, rdi 7.
    let (rsp, rsi, rdi) = (r[4], r[6], r[7]);
    let pt = &mut *pt;
    let mut ret = 0u64;
    let mut got = 0usize;
    dr_safe_read(rsp as *const c_void, 8, &mut ret as *mut u64 as *mut c_void, &mut got);
    push_sync(pt, k as u16);
    push_in_block(pt, Escape::Call { func: func as u16, args: [rdi, rsi], ret });
}

/// Clean-call target before a `ret` inside watched function `func`: its return value.
///
/// # Safety
/// Only called from a clean call inserted by this client, on an application thread whose PerThread
/// is set up; exercised by tests/collector.rs hello, eight_threads_with_mutexes and
/// python3_from_the_system.
pub unsafe extern "C" fn return_cc(func: u32) {
    let dc = dr_get_current_drcontext();
    let pt = get(dc);
    let Some(r) = app_regs(dc, pt, dr_mcontext_flags_t::DR_MC_INTEGER) else { return };
    let pt = &mut *pt;
    push_in_block(pt, Escape::Return { func: func as u16, value: r[0] });
}

/// Keeps the launcher connection alive when the program closes or reuses descriptors
/// (daemons and `closefrom` close everything above 2). Returns false to skip the call.
///
/// # Safety
/// `dc` is the calling thread's live drcontext, inside a DynamoRIO event or clean call; exercised
/// by tests/collector.rs hello and eight_threads_with_mutexes. Only from the pre-syscall event;
/// exercised also by tests/collector.rs program_closing_every_descriptor.
unsafe fn protect_connection(dc: *mut c_void, sysnum: c_int) -> bool {
    let ours = sock_fd();
    if ours < 0 {
        return true;
    }
    let param = |i: c_int| dr_syscall_get_param(dc, i) as u64;
    match sysnum {
        SYS_CLOSE if param(0) as c_int == ours => {
            dr_syscall_set_result(dc, 0);
            return false;
        }
        SYS_DUP2 | SYS_DUP3 if param(1) as c_int == ours => move_sock_above(ours),
        SYS_CLOSE_RANGE => {
            let (first, last, flags) = (param(0) as u32, param(1) as u32, param(2) as u32);
            let o = ours as u32;
            if first <= o && o <= last {
                // Close the part above our descriptor ourselves, let the program's call
                // cover the part below, or nothing if none is left.
                if o < last {
                    libc::syscall(libc::SYS_close_range, o + 1, last, flags);
                }
                if first == o {
                    dr_syscall_set_result(dc, 0);
                    return false;
                }
                dr_syscall_set_param(dc, 1, (o - 1) as reg_t);
            }
        }
        _ => {}
    }
    true
}

/// # Safety
/// DynamoRIO calls it before an intercepted system call, on the calling thread, with valid pointers
/// for the duration of the call; exercised by tests/collector.rs program_closing_every_descriptor
/// and fork_and_exec.
unsafe extern "C" fn pre_syscall(dc: *mut c_void, sysnum: c_int) -> bool_ {
    if !protect_connection(dc, sysnum) {
        return 0;
    }
    if SYS_MAPPING.contains(&sysnum) {
        instrument::forget_regions();
    }
    let pt = get(dc);
    if pt.is_null() {
        return 1;
    }
    let pt = &mut *pt;
    match sysnum {
        SYS_RT_SIGRETURN if pt.recording => {
            push_escape(pt, Escape::SignalReturn);
            expire_all(pt);
            ensure_room(pt);
        }
        SYS_EXECVE | SYS_EXECVEAT => {
            flush(pt, false);
            send_queued();
            handoff::stop();
        }
        SYS_CLONE | SYS_CLONE3 => {
            if let Some(seq) = pt.syscall_seq.take() {
                pt.cloning = Some((seq, clone_tls(dc, sysnum)));
            }
        }
        SYS_EXIT_GROUP => {
            let status = dr_syscall_get_param(dc, 0) as i32;
            send(wire::EXIT, 0, &[&status.to_le_bytes()]);
        }
        rlimit::SYS_GETRLIMIT | rlimit::SYS_PRLIMIT64 => pt.rlimit = rlimit::before(dc, sysnum).map(|p| (sysnum, p)),
        _ => {}
    }
    1
}

/// # Safety
/// DynamoRIO calls it in the child after fork, single-threaded, with valid pointers for the
/// duration of the call; exercised by tests/collector.rs fork_and_exec and
/// sigkill_loses_at_most_the_last_period.
unsafe extern "C" fn fork_init(dc: *mut c_void) {
    PARENT = Some(ParentLink { how: "fork".into(), parent_pid: libc::getppid() as u32 });
    reconnect_after_fork();
    hello();
    MODULES_LOCK.store(false, std::sync::atomic::Ordering::Relaxed);
    for m in MODULES.iter() {
        send(wire::MODULE, 0, &[&json(m)]);
    }
    table::resend_all();
    let pt = get(dc);
    if !pt.is_null() {
        restart_in_child(&mut *pt, dc);
        handoff::reset_after_fork(&*pt);
        thread_event(&*pt, ThreadEventKind::Start);
    }
}

/// # Safety
/// DynamoRIO calls it once at start-up, before any application code runs, with valid pointers for
/// the duration of the call; exercised by every test in tests/collector.rs, e.g. hello.
#[no_mangle]
pub unsafe extern "C" fn dr_client_main(id: client_id_t, _argc: c_int, _argv: *const *const c_char) {
    let mut argc: c_int = 0;
    let mut argv: *mut *const c_char = core::ptr::null_mut();
    dr_get_option_array(id, &mut argc, &mut argv);
    let mut o = Opts::default();
    let mut k = 1;
    while k < argc as usize {
        let a = std::ffi::CStr::from_ptr(*argv.add(k)).to_string_lossy().into_owned();
        match a.as_str() {
            "-socket" if k + 1 < argc as usize => {
                k += 1;
                o.socket = std::ffi::CStr::from_ptr(*argv.add(k)).to_string_lossy().into_owned();
            }
            "-truth" => o.truth = true,
            "-discard" => o.discard = true,
            "-no_sync" => o.no_sync = true,
            "-attached" => o.attached = true,
            "-windows" if k + 4 < argc as usize => {
                let mut n = [0u64; 4];
                for v in n.iter_mut() {
                    k += 1;
                    *v = std::ffi::CStr::from_ptr(*argv.add(k)).to_string_lossy().parse().unwrap_or(0);
                }
                o.windows = Some(dep_profile::container::WindowPlan { skip: n[0], instrs: n[1], count: n[2], every: n[3] });
            }
            "-start_at" | "-stop_at" if k + 1 < argc as usize => {
                k += 1;
                let v = Some(std::ffi::CStr::from_ptr(*argv.add(k)).to_string_lossy().into_owned());
                if a == "-start_at" {
                    o.start_at = v;
                } else {
                    o.stop_at = v;
                }
            }
            _ => say(&format!("unknown client option {a}")),
        }
        k += 1;
    }
    OPTS = o;
    instrument::MACHINE = dep_profile::Machine::x86_64(xsave_size());

    if drmgr_init() == 0 || drx_init() == 0 || drutil_init() == 0 {
        say("cannot initialise DynamoRIO extensions");
        dr_abort();
    }
    let mut ro = drreg_options_t {
        struct_size: core::mem::size_of::<drreg_options_t>(),
        num_spill_slots: 6,
        conservative: 0,
        error_callback: None,
        do_not_sum_slots: 0,
    };
    if drreg_init(&mut ro) != drreg_status_t_DRREG_SUCCESS {
        say("cannot initialise drreg");
        dr_abort();
    }
    let mut seg: reg_id_t = 0;
    let mut offs: uint = 0;
    if dr_raw_tls_calloc(&mut seg, &mut offs, NUM_SLOTS, 0) == 0 {
        say("cannot allocate thread-local slots");
        dr_abort();
    }
    TLS_SEG = seg;
    TLS_OFFS = offs;
    TLS_IDX = drmgr_register_tls_field();

    connect();
    hello();

    dr_register_exit_event(Some(event_exit));
    dr_register_fork_init_event(Some(fork_init));
    dr_register_filter_syscall_event(Some(syscall_filter));
    drmgr_register_pre_syscall_event(Some(pre_syscall));
    drmgr_register_post_syscall_event(Some(post_syscall));
    drmgr_register_thread_init_event(Some(thread_init));
    drmgr_register_thread_exit_event(Some(thread_exit));
    drmgr_register_module_load_event(Some(module_load));
    drmgr_register_module_unload_event(Some(module_unload));
    drmgr_register_signal_event(Some(signal_event));
    drmgr_register_restore_state_ex_event(Some(restore_event));
    drmgr_register_bb_app2app_event(Some(instrument::app2app), core::ptr::null_mut());
    drmgr_register_bb_instrumentation_event(Some(instrument::analysis), Some(instrument::insertion), core::ptr::null_mut());
    // Last of all: machine code for what drreg and clean calls inserted.
    drmgr_register_bb_instru2instru_event(Some(attach_event), core::ptr::null_mut());
    traces::init();
    window::init();
    instrument::init();
    handoff::start();
    // Debugging aid: DEP_DISASM=ADDR prints the instrumented code of blocks whose start
    // has the same low 12 bits as ADDR.
    if let Ok(a) = std::env::var("DEP_DISASM") {
        DISASM = u64::from_str_radix(a.trim_start_matches("0x"), 16).unwrap_or(0);
        drmgr_register_bb_instru2instru_event(Some(disasm_event), core::ptr::null_mut());
    }
}

static mut DISASM: u64 = 0;

/// # Safety
/// DynamoRIO calls it as a basic-block event after every insertion, with valid pointers for
/// the duration of the call; exercised by tests/collector.rs hello and tests/windows.rs.
unsafe extern "C" fn attach_event(dc: *mut c_void, tag: *mut c_void, bb: *mut instrlist_t, _ft: bool_, _tr: bool_) -> dr_emit_flags_t {
    avx512_state_kept(dc, tag, bb);
    encodings::attach_all(dc, bb);
    dr_emit_flags_t::DR_EMIT_DEFAULT
}

/// The tag of the first block built, where [`avx512_state_kept`] turns AVX-512 state
/// saving on (0 before it; `usize::MAX` on a CPU without AVX-512).
static FIRST_TAG: AtomicUsize = AtomicUsize::new(0);

/// DynamoRIO saves the AVX-512 state (zmm16-31, the opmask registers) across its own code
/// only once it has seen an application instruction write a zmm or opmask register, and
/// writes to xmm16-31 and ymm16-31 do not count (its issue #7511, fixed after the version
/// the dynamorio-sys crate bundles). glibc's EVEX string functions write ymm16+ before any
/// opmask, and the client's code (its private libc's memcpy) ran between two of their
/// blocks and overwrote them: programs computed wrong results under `dep record` (strrchr
/// ran past the end of its string: `program_invocation_short_name` was an environment
/// string). So the process's first block gets an application instruction that copies an
/// opmask register to itself, a no-op (all 64 bits with AVX512BW, else the 16 there are),
/// and DynamoRIO saves that state from the start. Built again (to translate a fault), the
/// first block gets it again: the block is a function of its tag.
///
/// # Safety
/// `dc`, `tag` and `bb` are those of the current basic-block event; exercised by
/// tests/collector.rs avx512_registers_survive_the_client.
unsafe fn avx512_state_kept(dc: *mut c_void, tag: *mut c_void, bb: *mut instrlist_t) {
    let first = match FIRST_TAG.compare_exchange(0, tag as usize, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => tag as usize,
        Err(t) => t,
    };
    if first != tag as usize {
        return;
    }
    let Some(op) = avx512_marker_op(std::arch::is_x86_feature_detected!("avx512bw"), std::arch::is_x86_feature_detected!("avx512f")) else {
        FIRST_TAG.store(usize::MAX, Ordering::Release);
        return;
    };
    let mut at = instrlist_first(bb);
    while !at.is_null() && instr_is_app(at) == 0 {
        at = instr_get_next(at);
    }
    if at.is_null() {
        return;
    }
    let i = avx512_marker(dc, op);
    instr_set_translation(i, instr_get_app_pc(at));
    instrlist_preinsert(bb, at, i);
}

/// The opcode of [`avx512_state_kept`]'s no-op on a CPU with AVX512BW (64-bit opmask
/// registers) and AVX512F: none without AVX-512.
pub(crate) fn avx512_marker_op(bw: bool, f: bool) -> Option<u32> {
    match (bw, f) {
        (true, _) => Some(OP_kmovq),
        (false, true) => Some(OP_kmovw),
        _ => None,
    }
}

/// `op k7, k7`, not inserted.
///
/// # Safety
/// `dc` is a live drcontext; exercised by standalone::avx512_marker_is_a_kmov_of_k7 on any CPU.
pub(crate) unsafe fn avx512_marker(dc: *mut c_void, op: u32) -> *mut instr_t {
    let k7 = opnd_create_reg(DR_REG_K7 as reg_id_t);
    instr_create_1dst_1src(dc, op as c_int, k7, k7)
}

/// # Safety
/// DynamoRIO calls it as a basic-block event (disassembly debugging only), with valid pointers for
/// the duration of the call; exercised by tests/collector.rs hello, eight_threads_with_mutexes and
/// standalone::avx512_forms_encode.
unsafe extern "C" fn disasm_event(dc: *mut c_void, tag: *mut c_void, bb: *mut instrlist_t, _ft: bool_, _tr: bool_) -> dr_emit_flags_t {
    if dr_fragment_app_pc(tag) as u64 & 0xfff == DISASM & 0xfff {
        instrlist_disassemble(dc, tag as app_pc, bb, dr_stderr());
    }
    dr_emit_flags_t::DR_EMIT_DEFAULT
}
