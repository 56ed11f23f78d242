//! Finds DynamoRIO and the client, runs the program under them, and waits for its profiles.

use crate::receive::Receiver;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Errors before the program runs, or while collecting its profiles.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{0}: program not found (looked in PATH)")]
    NotFound(String),
    #[error("cannot find DynamoRIO (lib64/release/libdynamorio.so) in {0}: run scripts/install.sh (or `cargo build --release --workspace` in the checkout), or set DEP_DYNAMORIO to a DynamoRIO tree")]
    NoDynamoRio(String),
    #[error("cannot find the DEP client (libdep_client.so) in {0}: run scripts/install.sh (or `cargo build --release --workspace` in the checkout), or set DEP_CLIENT to the file")]
    NoClient(String),
    #[error("cannot write {}: {err}", path.display())]
    Output { path: PathBuf, err: std::io::Error },
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
    #[error("no program given")]
    NoProgram,
    #[error("no process {0} to attach to")]
    NoProcess(u32),
    #[error("cannot attach to process {pid}: {why}")]
    Attach { pid: u32, why: String },
}

/// How to record.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub output: PathBuf,
    pub truth: bool,
    pub discard: bool,
    /// Stamp synchronisation points with the process-wide order (sync records).
    pub sync: bool,
    /// zstd level for chunks.
    pub level: i32,
    /// How DEP_m is compressed.
    pub compression: Compression,
    /// Record only these windows of each thread's instructions (the whole run if None).
    pub windows: Option<dep_profile::container::WindowPlan>,
    /// Record each thread from the first entry of this function (symbol or `0x` address)...
    pub start_at: Option<String>,
    /// ...to the return of this one.
    pub stop_at: Option<String>,
    /// Attach to this running process instead of starting `program`.
    pub attach: Option<u32>,
    pub program: Vec<String>,
}

/// How the launcher stores DEP_m.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Compression {
    /// Packed, and zstd-compressed where that pays for its time (it quarters the packed
    /// words) while the compression pool keeps up with the program; while it is behind,
    /// only where zstd is cheap (shrinks them to a sixteenth or less), so that compressing
    /// does not slow the program down further.
    #[default]
    Auto,
    /// Always packed and zstd-compressed: the smallest profile.
    Small,
    /// Packed only, unless zstd is cheap on the chunk (shrinks it to a sixteenth or less).
    Fast,
}

/// What a recording produced.
#[derive(Debug)]
pub struct RecordOutcome {
    /// The program's exit status as a shell reports it (128+N after signal N).
    pub status: i32,
    /// Profiles written, the main process's first.
    pub profiles: Vec<PathBuf>,
    /// `--discard` totals over all processes: tag bytes, value bytes, truth bytes, chunks.
    pub counts: [u64; 4],
    /// Problems that did not stop the program (the profile may be incomplete).
    pub warnings: Vec<String>,
}

/// Where DynamoRIO and the client live.
#[derive(Clone, Debug)]
pub struct Install {
    pub dynamorio: PathBuf,
    pub client: PathBuf,
    /// The helper behind `--attach` (`dep-attach`, built and installed with the client):
    /// beside the client, else where the client would be found without DEP_CLIENT.
    pub attach_helper: Option<PathBuf>,
}

impl Install {
    /// Where `dep` finds DynamoRIO and the client, first match wins: DEP_DYNAMORIO and
    /// DEP_CLIENT; the installed layout `<prefix>/lib/dep/{dynamorio,libdep_client.so}` for
    /// `dep` in `<prefix>/bin` (scripts/install.sh); cargo's target directory next to the
    /// executable. So an installed `dep` keeps working when the checkout moves or is cleaned.
    pub fn find() -> Result<Install, RecordError> {
        let exe = std::fs::read_link("/proc/self/exe").map_err(|err| RecordError::Io { what: "/proc/self/exe".into(), err })?;
        let dir = exe.parent().unwrap_or(Path::new("/")).to_path_buf();
        let installed = dir.parent().map(|p| p.join("lib/dep"));
        let cargo: Vec<PathBuf> = [Some(dir.clone()), dir.parent().map(Path::to_path_buf)].into_iter().flatten().collect();
        let looked = |what: &str| {
            let mut places: Vec<String> = installed.iter().map(|p| p.join(what).display().to_string()).collect();
            places.push(format!("cargo's target directory at {}", dir.display()));
            places.join(", ")
        };
        let dynamorio = match std::env::var_os("DEP_DYNAMORIO") {
            Some(p) => {
                let p = PathBuf::from(p);
                if !has_dynamorio(&p) {
                    return Err(RecordError::NoDynamoRio(format!("{} (DEP_DYNAMORIO)", p.display())));
                }
                p
            }
            None => installed
                .as_ref()
                .map(|p| p.join("dynamorio"))
                .filter(|p| has_dynamorio(p))
                .or_else(|| find_dynamorio(&cargo))
                .ok_or_else(|| RecordError::NoDynamoRio(looked("dynamorio")))?,
        };
        let client = match std::env::var_os("DEP_CLIENT") {
            Some(p) => {
                let p = PathBuf::from(p);
                if !p.is_file() {
                    return Err(RecordError::NoClient(format!("{} (DEP_CLIENT)", p.display())));
                }
                p
            }
            None => installed
                .iter()
                .chain(cargo.iter())
                .map(|d| d.join("libdep_client.so"))
                .find(|p| p.is_file())
                .ok_or_else(|| RecordError::NoClient(looked("libdep_client.so")))?,
        };
        let attach_helper = std::iter::once(client.with_file_name("dep-attach"))
            .chain(installed.iter().chain(cargo.iter()).map(|d| d.join("dep-attach")))
            .find(|p| p.is_file());
        Ok(Install { dynamorio, client, attach_helper })
    }

    /// DynamoRIO's version, from the CMake package file of its tree.
    pub fn dynamorio_version(&self) -> Option<String> {
        let text = std::fs::read_to_string(self.dynamorio.join("cmake/DynamoRIOConfigVersion.cmake")).ok()?;
        let rest = text.split("set(PACKAGE_VERSION ").nth(1)?;
        Some(rest.split(')').next()?.trim().trim_matches('"').to_string())
    }
}

fn has_dynamorio(tree: &Path) -> bool {
    tree.join("lib64/release/libdynamorio.so").is_file()
}

/// The newest `dynamorio-sys-*/out/build` tree that holds libdynamorio.so.
fn find_dynamorio(dirs: &[PathBuf]) -> Option<PathBuf> {
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(d.join("build")) else { continue };
        for e in rd.flatten() {
            if !e.file_name().to_string_lossy().starts_with("dynamorio-sys-") {
                continue;
            }
            let b = e.path().join("out/build");
            if let Ok(md) = std::fs::metadata(b.join("lib64/release/libdynamorio.so")) {
                let t = md.modified().unwrap_or(std::time::UNIX_EPOCH);
                if best.as_ref().is_none_or(|(bt, _)| t > *bt) {
                    best = Some((t, b));
                }
            }
        }
    }
    best.map(|(_, p)| p)
}

/// Resolves a program name through PATH, as a shell would.
pub fn resolve_program(prog: &str) -> Option<PathBuf> {
    let is_exec = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if prog.contains('/') {
        let p = PathBuf::from(prog);
        return is_exec(&p).then(|| std::fs::canonicalize(&p).unwrap_or(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path).map(|d| d.join(prog)).find(|c| is_exec(c)).map(|c| std::fs::canonicalize(&c).unwrap_or(c))
}

/// DynamoRIO cannot start a `#!` script: run its interpreter with the script as the kernel would.
fn unwrap_scripts(mut app: PathBuf, mut args: Vec<String>) -> Result<(PathBuf, Vec<String>), RecordError> {
    for _ in 0..4 {
        let head = match std::fs::read(&app) {
            Ok(b) => b[..b.len().min(256)].to_vec(),
            Err(_) => break,
        };
        if !head.starts_with(b"#!") {
            break;
        }
        let line = String::from_utf8_lossy(&head[2..]).lines().next().unwrap_or("").trim().to_string();
        let mut it = line.splitn(2, [' ', '\t']);
        let interp = it.next().unwrap_or("").to_string();
        let mut new_args = Vec::new();
        if let Some(a) = it.next().map(str::trim).filter(|s| !s.is_empty()) {
            new_args.push(a.to_string());
        }
        new_args.push(app.display().to_string());
        new_args.append(&mut args);
        args = new_args;
        app = resolve_program(&interp).ok_or(RecordError::NotFound(interp))?;
    }
    Ok((app, args))
}

/// Runs the program under DynamoRIO with the DEP client and collects its profiles.
pub fn record(opts: &RecordOptions) -> Result<RecordOutcome, RecordError> {
    let (app, args) = match opts.attach {
        Some(pid) => {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map_err(|_| RecordError::NoProcess(pid))?;
            (exe, Vec::new())
        }
        None => {
            let prog = opts.program.first().ok_or(RecordError::NoProgram)?;
            let app = resolve_program(prog).ok_or_else(|| RecordError::NotFound(prog.clone()))?;
            unwrap_scripts(app, opts.program[1..].to_vec())?
        }
    };
    let install = Install::find()?;
    if !opts.discard {
        // Fail before running anything if the profile cannot be written.
        std::fs::File::create(&opts.output).map_err(|err| RecordError::Output { path: opts.output.clone(), err })?;
    }

    // One length whatever the pid and the time: the name is in the program's environment
    // (the client's options), whose length moves the program's stack (see OPTIONS_LEN).
    let sock = std::env::temp_dir().join(format!("dep-{:07}-{:06}.sock", std::process::id(), crate::receive::now_ns() % 1_000_000));
    let _ = std::fs::remove_file(&sock);
    let listener = std::os::unix::net::UnixListener::bind(&sock)
        .map_err(|err| RecordError::Io { what: format!("cannot listen on {}", sock.display()), err })?;
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let receiver = Receiver::new(&opts.output, opts.discard, opts.level, opts.compression, workers);
    let stop = Arc::new(AtomicBool::new(false));
    let server = receiver.serve(listener, stop.clone());

    let mut client_opts = format!("-socket {}", sock.display());
    if opts.truth {
        client_opts.push_str(" -truth");
    }
    if opts.discard {
        client_opts.push_str(" -discard");
    }
    if !opts.sync {
        client_opts.push_str(" -no_sync");
    }
    if opts.attach.is_some() {
        client_opts.push_str(" -attached");
    }
    // Windows and a function's bounds rebuild a thread's blocks where recording starts and
    // stops, so each thread needs its own code cache (`-thread_private`) to hold the kind
    // its own count wants.
    let mut part = String::new();
    if let Some(w) = opts.windows {
        part.push_str(&format!(" -windows {} {} {} {}", w.skip, w.instrs, w.count, w.every));
    }
    for (opt, v) in [("-start_at", &opts.start_at), ("-stop_at", &opts.stop_at)] {
        if let Some(v) = v {
            part.push_str(&format!(" {opt} {v}"));
        }
    }
    let window_opts = if part.is_empty() { "" } else { "-thread_private " };
    // (Their length does not move the program's stack: all of DynamoRIO's options are
    // padded to one length, OPTIONS_LEN.)
    client_opts.push_str(&part);
    // Code on writable pages is sandboxed from the start and stays so
    // (`-sandbox_writable -sandbox2ro_threshold 0`): otherwise DynamoRIO makes such pages
    // read-only and, when the program writes one, resumes at the write with only the pc
    // translated (core/unix/signal.c, check_for_modified_code), leaving drreg's scratch
    // registers holding the client's values: corpora/rwx computed wrong results that way.
    // `-steal_fds 0`: by default DynamoRIO reserves the top descriptors by raising the soft
    // limit to the hard one and only pretends to lower it when the program does, so a
    // program that lowered RLIMIT_NOFILE could open far more files than natively
    // (corpora/fdexhaust overran its array). With none reserved the kernel enforces the
    // program's own limit.
    // DEP_DR_OPTIONS adds DynamoRIO options (for diagnosis).
    let extra = std::env::var("DEP_DR_OPTIONS").unwrap_or_default();
    let dr_common = format!(
        "-code_api -stack_size 56K -signal_stack_size 32K -max_elide_jmp 0 -max_elide_call 0 \
         -no_inline_ignored_syscalls -sandbox_writable -sandbox2ro_threshold 0 -steal_fds 0 {window_opts}{extra}"
    );
    let status = match opts.attach {
        Some(pid) => attach(&install, pid, &dr_common, &client_opts, &receiver).map(|()| None),
        None => {
            // The program starts under DynamoRIO: its loader and brk heap are DynamoRIO's
            // from the first instruction on.
            let dr_opts =
                format!("{dr_common} -early_inject -emulate_brk -client_lib64 \"{};0;{}\"", install.client.display(), client_opts);
            launch(&install, &app, &args, &dr_opts).map(Some)
        }
    };
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            stop.store(true, Ordering::Release);
            let _ = std::fs::remove_file(&sock);
            return Err(e);
        }
    };

    // Processes that outlive the program (forked children) still deliver their profiles.
    let mut warnings = Vec::new();
    let grace = Duration::from_millis(50);
    let drain = Duration::from_secs(std::env::var("DEP_DRAIN_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60));
    std::thread::sleep(grace);
    stop.store(true, Ordering::Release);
    let handles = server.join().expect("accept thread panicked");
    let _ = std::fs::remove_file(&sock);
    let started = Instant::now();
    let total = handles.len();
    for h in handles {
        while !h.is_finished() && started.elapsed() < drain {
            std::thread::sleep(Duration::from_millis(5));
        }
        if h.is_finished() {
            let _ = h.join();
        }
    }
    if receiver.finished() < total {
        warnings.push(format!(
            "{} process(es) still running after {}s: their profiles end where they stood",
            total - receiver.finished(),
            drain.as_secs()
        ));
    }
    // An attached process is not dep's child: its status is the one it passed to exit_group
    // (its last image's, if it exec'd), if the client saw it.
    let status = status.unwrap_or_else(|| {
        let results = receiver.results.lock().unwrap();
        results.iter().rev().filter(|r| Some(r.pid) == opts.attach).find_map(|r| r.exit).unwrap_or(0)
    });
    warnings.extend(receiver.finish(status));
    let results = receiver.results.lock().unwrap().clone();
    let mut counts = [0u64; 4];
    let mut profiles = Vec::new();
    for r in &results {
        for (c, v) in counts.iter_mut().zip(r.counts) {
            *c += v;
        }
        if let Some(p) = &r.path {
            profiles.push(p.clone());
        }
        for e in &r.errors {
            warnings.push(format!("pid {}: {e}", r.pid));
        }
    }
    profiles.sort_by_key(|p| (p != &opts.output, p.clone()));
    if results.is_empty() {
        warnings.push("no process connected: nothing was recorded (did DynamoRIO fail to start the program?)".into());
    }
    Ok(RecordOutcome { status, profiles, counts, warnings })
}

/// The length DYNAMORIO_OPTIONS is padded to, with spaces (which DynamoRIO's option parser
/// skips), below its limit of 2048 bytes ([`launch`]).
const OPTIONS_LEN: usize = 1536;

/// Starts the program under DynamoRIO (`dr_opts` with the client) and waits for it: its
/// exit status as a shell reports it.
fn launch(install: &Install, app: &Path, args: &[String], dr_opts: &str) -> Result<i32, RecordError> {
    let ext = install.dynamorio.join("ext/lib64/release");
    let ld = match std::env::var_os("LD_LIBRARY_PATH") {
        Some(old) if !old.is_empty() => format!("{}:{}", ext.display(), old.to_string_lossy()),
        _ => ext.display().to_string(),
    };
    // The program finds DYNAMORIO_OPTIONS among its environment strings, which the kernel
    // puts at the top of its stack: options of another length (a window's `--skip-instrs
    // N`, the connection's name) would move its argv and stack by as much, and code whose
    // path depends on alignment (libc's vector string functions) would run other
    // instructions (corpora/siglongjmp ran 130,426 instructions with no options, 130,445
    // with `--skip-instrs`). Padded to one length, two recordings of a deterministic program run the same
    // instructions, which comparing a window with a whole run needs.
    let padded = format!("{dr_opts:<OPTIONS_LEN$}");
    let mut cmd = Command::new(install.dynamorio.join("lib64/release/libdynamorio.so"));
    cmd.arg0(app).args(args).env("DYNAMORIO_EXE_PATH", app).env("DYNAMORIO_OPTIONS", padded).env("LD_LIBRARY_PATH", ld);
    // The terminal's interrupt goes to the program; dep waits for it and reports its status.
    // SAFETY: the pre_exec closure only calls signal(2), async-signal-safe, in the forked child;
    // exercised by tests/collector.rs killed_program_status_and_readable_profile.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        });
    }
    // SAFETY: signal(2) with a valid signal number and SIG_IGN; the old handler is restored below;
    // exercised by tests/collector.rs hello.
    let old_int = unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
    // SAFETY: as for SIGINT above.
    let old_quit = unsafe { libc::signal(libc::SIGQUIT, libc::SIG_IGN) };
    // A SIGTERM or SIGHUP for dep (`timeout`, `kill`, a closed terminal) is the program's:
    // dep passes it on and stays to write the profile's end when the program has handed off
    // its buffers and ended, rather than dying with the profile cut and the program orphaned.
    // (exec gives the program the default handlers back.)
    // SAFETY: signal(2) with valid signal numbers and a handler that only makes
    // async-signal-safe calls (atomics, kill(2)); the old handlers are restored below;
    // exercised by tests/collector.rs terminating_dep_ends_the_program_and_keeps_the_profile.
    let old_fwd =
        unsafe { [libc::SIGTERM, libc::SIGHUP].map(|sig| libc::signal(sig, forward as extern "C" fn(libc::c_int) as libc::sighandler_t)) };
    let child = cmd.spawn();
    let status = child.and_then(|mut c| {
        CHILD.store(c.id() as i32, Ordering::SeqCst);
        let early = EARLY.swap(0, Ordering::SeqCst);
        if early != 0 {
            // SAFETY: kill(2) of our own child, not yet waited for, with a signal number the
            // handler was given.
            unsafe { libc::kill(c.id() as i32, early) };
        }
        let s = c.wait();
        CHILD.store(0, Ordering::SeqCst);
        s
    });
    // SAFETY: restores the handlers signal(2) returned above; exercised by tests/collector.rs
    // hello.
    unsafe {
        libc::signal(libc::SIGINT, old_int);
        libc::signal(libc::SIGQUIT, old_quit);
        libc::signal(libc::SIGTERM, old_fwd[0]);
        libc::signal(libc::SIGHUP, old_fwd[1]);
    }
    match status {
        Ok(s) => Ok(s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))),
        Err(e) => Err(RecordError::Io { what: "cannot start DynamoRIO".into(), err: e }),
    }
}

/// The launched program's pid while dep waits for it (0 otherwise), and a signal that came
/// before it was known.
static CHILD: AtomicI32 = AtomicI32::new(0);
static EARLY: AtomicI32 = AtomicI32::new(0);

/// dep's SIGTERM and SIGHUP handler: the signal goes to the program.
extern "C" fn forward(sig: libc::c_int) {
    let child = CHILD.load(Ordering::SeqCst);
    if child > 0 {
        // SAFETY: kill(2) is async-signal-safe and has no memory to get wrong; `child` is
        // dep's child, cleared from CHILD as soon as it has been waited for.
        unsafe { libc::kill(child, sig) };
    } else {
        EARLY.store(sig, Ordering::SeqCst);
    }
}

/// Injects DynamoRIO and the client into running process `pid` (through the `dep-attach`
/// helper beside the client, which drives DynamoRIO's injector) and waits for the process
/// to end.
fn attach(install: &Install, pid: u32, dr_opts: &str, client_opts: &str, receiver: &Receiver) -> Result<(), RecordError> {
    use std::io::{BufRead, Write};
    let Some(helper) = &install.attach_helper else {
        let why = format!(
            "its helper dep-attach is missing: not beside {}, nor where dep looks for the client (it is built and installed with the client)",
            install.client.display()
        );
        return Err(RecordError::Attach { pid, why });
    };
    // A second DynamoRIO in one process would take over from the first one's code cache.
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    if maps.lines().any(|l| l.ends_with("/libdynamorio.so")) {
        return Err(RecordError::Attach { pid, why: "it already runs under DynamoRIO".into() });
    }
    if let Some(tid) = keeps_takeover_blocked(pid, Duration::from_millis(250)) {
        return Err(RecordError::Attach {
            pid,
            why: format!(
                "its thread {tid} blocks SIGILL, the signal DynamoRIO takes threads over with: \
                 DynamoRIO would give up and end the process"
            ),
        });
    }
    // Opened before injecting: the process's end is seen even if it ends at once.
    let exited = Exit::watch(pid)?;
    let mut child = Command::new(helper)
        .arg(pid.to_string())
        .arg(&install.dynamorio)
        .arg(&install.client)
        .arg(dr_opts)
        .arg(client_opts)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|err| RecordError::Io { what: format!("cannot run {}", helper.display()), err })?;
    let mut line = String::new();
    let _ = std::io::BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line);
    if line.trim() != "attached" {
        let _ = child.wait();
        let mut why = String::new();
        let _ = std::io::Read::read_to_string(&mut child.stderr.take().expect("piped"), &mut why);
        let why = why.lines().last().unwrap_or("the helper failed").trim_start_matches("dep-attach: ").to_string();
        return Err(RecordError::Attach { pid, why });
    }
    // DynamoRIO reads its per-process config file as it starts in the process; the helper
    // removes it once the client has connected (or the process has ended, or 30 s passed).
    let started = Instant::now();
    while receiver.connected() == 0 && !exited.done(Duration::from_millis(10)) && started.elapsed() < Duration::from_secs(30) {}
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(b"done\n");
    }
    let _ = child.wait();
    if receiver.connected() > 0 {
        let _ = writeln!(std::io::stderr(), "dep: attached to process {pid}: recording until it ends");
    }
    while !exited.done(Duration::from_secs(1)) {}
    Ok(())
}

/// A thread of process `pid` that blocks SIGILL. DynamoRIO's attach takes each thread over
/// by sending it SIGILL (core/unix/os.c, suspend_signum) and ends the process when one does
/// not answer within its timeout, as threads that block every signal (xz's workers) cannot.
fn blocks_takeover(pid: u32) -> Option<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for t in tasks.flatten() {
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        let blocked = status.lines().find_map(|l| l.strip_prefix("SigBlk:")).and_then(|h| u64::from_str_radix(h.trim(), 16).ok());
        if blocked.is_some_and(|m| m & (1 << (libc::SIGILL - 1)) != 0) {
            return t.file_name().to_str()?.parse().ok();
        }
    }
    None
}

/// A thread of process `pid` that blocks SIGILL still after `settle`, checked every 10 ms
/// until none does. A thread starting up blocks every signal for a moment (glibc, from its
/// clone until its start routine runs): only one that keeps SIGILL blocked is refused.
fn keeps_takeover_blocked(pid: u32, settle: Duration) -> Option<u32> {
    let started = Instant::now();
    loop {
        let tid = blocks_takeover(pid)?;
        if started.elapsed() >= settle {
            return Some(tid);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The end of a process that is not dep's child, through a pidfd.
struct Exit(std::os::fd::OwnedFd);

impl Exit {
    fn watch(pid: u32) -> Result<Exit, RecordError> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            return Err(RecordError::NoProcess(pid));
        }
        // SAFETY: `fd` is the new descriptor pidfd_open returned, owned by nothing else.
        Ok(Exit(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) }))
    }

    /// Whether the process has ended, waiting at most `wait` for it.
    fn done(&self, wait: Duration) -> bool {
        let mut p = libc::pollfd { fd: std::os::fd::AsRawFd::as_raw_fd(&self.0), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd for the call's duration.
        let n = unsafe { libc::poll(&mut p, 1, wait.as_millis().min(i32::MAX as u128) as i32) };
        n > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(program: &[&str], output: &Path) -> RecordOptions {
        RecordOptions {
            output: output.to_path_buf(),
            truth: false,
            discard: false,
            sync: true,
            level: 1,
            compression: Compression::default(),
            windows: None,
            start_at: None,
            stop_at: None,
            attach: None,
            program: program.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// What cannot start is refused by variant before anything runs.
    #[test]
    fn what_cannot_start_is_named_by_variant() {
        let out = std::env::temp_dir().join(format!("dep-launch-test-{}.dep", std::process::id()));
        assert!(matches!(record(&opts(&[], &out)), Err(RecordError::NoProgram)));
        let missing = format!("dep-no-such-program-{}", std::process::id());
        assert!(matches!(record(&opts(&[&missing], &out)), Err(RecordError::NotFound(p)) if p == missing));
        assert!(!out.exists(), "nothing was written");
    }
}
