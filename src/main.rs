//! `dep`: record, recover and export Detailed Execution Profiles.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use dep_profile::container::WindowPlan;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// `eprintln!` that cannot panic: with standard error closed (`dep ... 2>&1 | head`),
/// dep's messages are lost, not its work or its exit status.
macro_rules! say {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

#[derive(Parser)]
#[command(name = "dep", version, about = "Detailed Execution Profiles: cheap whole-program memory traces of x86-64 Linux programs")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Also look for separate debug files (`.build-id/xx/rest.debug`, `.gnu_debuglink`
    /// targets) under DIR, before /usr/lib/debug; repeatable.
    #[arg(long = "debug-dir", value_name = "DIR", global = true)]
    debug_dirs: Vec<PathBuf>,
}

/// `--debug-dir`, set once from the command line before any symbolizer is made.
static DEBUG_DIRS: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();

/// The symbolizer of a profile's modules, looking for debug files where the user said.
fn symbolizer(modules: &[dep_profile::container::ModuleEvent]) -> dep_dcfg_out::program::symbols::Symbolizer {
    let dirs = DEBUG_DIRS.get().map_or(&[][..], Vec::as_slice);
    dep_dcfg_out::program::symbols::Symbolizer::new(modules).with_debug_dirs(dirs)
}

/// `dep record --compression`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum CompressionArg {
    Auto,
    Small,
    Fast,
}

/// A window of each thread's instructions (numbered per thread from 0): the blocks that
/// start at instructions N..M, read from only the chunks that hold them.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
struct SeekArgs {
    /// Begin at the first block starting at or after the thread's instruction N.
    #[arg(long, value_name = "N")]
    from_instr: Option<u64>,
    /// End before the first block starting at or after instruction M.
    #[arg(long, value_name = "M")]
    to_instr: Option<u64>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run PROGRAM under DynamoRIO and record its DEP profile; exits with the program's status.
    Record {
        /// Profile to write.
        #[arg(short, long, default_value = "dep.out")]
        output: PathBuf,
        /// Also record every reference's address as computed at run time.
        #[arg(long)]
        truth: bool,
        /// Record into the buffers and count what would be written, writing nothing.
        #[arg(long)]
        discard: bool,
        /// Leave out the order between threads (the sync records): for measuring what it
        /// costs; race analysis and cross-thread dependences need it.
        #[arg(long)]
        no_sync: bool,
        /// How DEP_m is compressed: auto (zstd where it shrinks a chunk's packed words to a
        /// quarter or less, which pays for its time in recording and recovery; to a
        /// sixteenth while compression is behind the program), small (always zstd: the
        /// smallest profile), fast (zstd only where it shrinks a chunk to a sixteenth or
        /// less: the least work).
        #[arg(long, value_enum, default_value = "auto")]
        compression: CompressionArg,
        /// After the program ends, add the seek index (`dep index`): one recovery of the
        /// whole profile, on every core.
        #[arg(long, conflicts_with = "discard")]
        index: bool,
        /// Record each thread from its instruction N on (the instructions before run
        /// counted, not recorded); windows are whole blocks.
        #[arg(long, value_name = "N")]
        skip_instrs: Option<u64>,
        /// Record M instructions of each thread (to the end of the block, or of the
        /// DynamoRIO trace, where the count passes M).
        #[arg(long, value_name = "M")]
        instrs: Option<u64>,
        /// Record K windows of M instructions, each starting P after the last (--every).
        #[arg(long = "windows", value_name = "K", requires = "every")]
        window_count: Option<u64>,
        /// Instructions from one window's start to the next one's.
        #[arg(long, value_name = "P", requires = "window_count")]
        every: Option<u64>,
        /// Record each thread from its first entry to this function (a symbol of the
        /// program or a library, or an address as 0x...).
        #[arg(long, value_name = "FUNCTION", conflicts_with_all = ["skip_instrs", "instrs", "window_count"])]
        start_at: Option<String>,
        /// Record each thread until this function, entered while recording, returns.
        #[arg(long, value_name = "FUNCTION", conflicts_with_all = ["skip_instrs", "instrs", "window_count"])]
        stop_at: Option<String>,
        /// Record the running process PID from now to its end (DynamoRIO attaches with
        /// ptrace), instead of starting a program. dep then exits with the status the process
        /// passed to exit_group (0 if it was killed: its parent gets that status).
        #[arg(long, value_name = "PID", conflicts_with = "program")]
        attach: Option<u32>,
        /// The program and its arguments.
        #[arg(required_unless_present = "attach", trailing_var_arg = true, allow_hyphen_values = true)]
        program: Vec<String>,
    },
    /// Rebuild every memory reference (or block) from a profile.
    Recover {
        profile: PathBuf,
        /// Write the truth stream recorded alongside instead of recovering.
        #[arg(long)]
        truth: bool,
        /// text, blocks, binary, parquet (a directory of Parquet tables: per thread its
        /// references, blocks and sync points; needs -o DIR), or null (recover and count,
        /// write nothing).
        #[arg(long, default_value = "text")]
        format: String,
        /// The file to write (stdout when none), or with --format parquet the directory.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Recovery threads (0: one per core). Chunks recover in parallel; output keeps its order.
        #[arg(short, long, default_value_t = 0)]
        jobs: usize,
        /// Also write the memory each recorded system call's kernel side read and wrote,
        /// as lines of the system call instruction ending in `kernel` (text only; Parquet
        /// always has them, marked in its `kernel` column).
        #[arg(long)]
        kernel_refs: bool,
        #[command(flatten)]
        seek: SeekArgs,
        /// Only this thread (index in creation order).
        #[arg(long, value_name = "T")]
        thread: Option<u32>,
    },
    /// Add the seek index to a profile: what each chunk holds, so that --from-instr and
    /// --to-instr read only the chunks they need. Recovers the whole profile once.
    Index {
        profile: PathBuf,
        /// Recovery threads (0: one per core).
        #[arg(short, long, default_value_t = 0)]
        jobs: usize,
    },
    /// Instruction, block and reference counts and stream sizes against the paper's baselines.
    Stats {
        profile: PathBuf,
        #[arg(long)]
        json: bool,
        /// Skip compressing the baseline streams (much faster on large profiles).
        #[arg(long)]
        no_compress: bool,
    },
    /// Control-flow edges per thread with their counts and kinds, totals and call depth.
    Edges {
        profile: PathBuf,
        #[arg(long)]
        json: bool,
        /// Use the truth stream recorded alongside (it has no signal markers).
        #[arg(long)]
        truth: bool,
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Threads (0: one per core).
        #[arg(short, long, default_value_t = 0)]
        jobs: usize,
    },
    /// Write Intel DCFG JSON (and optionally the DCFG-trace); or check a pair of them.
    Dcfg {
        /// The profile (its forked children and exec'd images, PROFILE.1, PROFILE.2, ...,
        /// are further processes of the same file).
        #[arg(required_unless_present = "check")]
        profile: Option<PathBuf>,
        /// The DCFG to write (- for standard output).
        #[arg(short, long, required_unless_present = "check")]
        output: Option<PathBuf>,
        /// Also write the DCFG-trace here (- for standard output).
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Decode and check a DCFG and its DCFG-trace (from any producer) instead.
        #[arg(long, num_args = 2, value_names = ["DCFG", "TRACE"], conflicts_with_all = ["profile", "output", "trace"])]
        check: Option<Vec<PathBuf>>,
        /// With --check: print the decoded blocks, `<pid> <thread> <start-pc> <instruction-count>`.
        #[arg(long, requires = "check")]
        blocks: bool,
        #[command(flatten)]
        seek: SeekArgs,
    },
    /// Write a WET dependence trace: the comprehensive format, or with --history the last
    /// N dependences (default 100000).
    Wet {
        profile: PathBuf,
        /// The trace to write (- for standard output).
        #[arg(short, long, required_unless_present = "count")]
        output: Option<PathBuf>,
        #[arg(long, num_args = 0..=1, default_missing_value = "100000", value_name = "N")]
        history: Option<usize>,
        /// Find every dependence and print how many (as --summary does), writing no trace.
        #[arg(long, conflicts_with_all = ["output", "history", "ports"])]
        count: bool,
        /// Megabytes of dependences held in memory before spilling to temporary files (at
        /// least 1: each spill walks every use port).
        #[arg(long, default_value_t = 1024, value_name = "MB", value_parser = clap::value_parser!(u64).range(1..=1 << 40))]
        spill_mb: u64,
        /// Print instances, dependences, spilled runs and peak shadow memory to stderr.
        #[arg(long)]
        summary: bool,
        /// Also write the names of each instruction's use ports: `id instr_addr control rax ... flags mem0 ...`.
        #[arg(long, value_name = "FILE")]
        ports: Option<PathBuf>,
    },
    /// Write a Callgrind profile (callgrind_annotate, KCachegrind, gprof2dot read it).
    Callgrind {
        profile: PathBuf,
        #[arg(short, long)]
        output: PathBuf,
        /// One file per thread, OUTPUT-1, OUTPUT-2, ..., instead of threads merged.
        #[arg(long)]
        separate_threads: bool,
        /// Cost lines per instruction address (positions: instr line), not per line.
        #[arg(long)]
        dump_instr: bool,
        #[command(flatten)]
        seek: SeekArgs,
    },
    /// Report data races between threads: each pair of source locations once, with both
    /// accesses, the address and what it belongs to, and a count.
    Races {
        profile: PathBuf,
        /// One JSON object per line, for scripts.
        #[arg(long)]
        json: bool,
        /// Also check that every access to this memory is made holding the lock that
        /// guards it (the paper's check): ADDR:LEN, or a variable's name.
        #[arg(long, value_name = "ADDR:LEN|VARIABLE")]
        region: Option<dep_dcfg_out::races::RegionSpec>,
        /// Write the report here instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Print what the analysis did (accesses checked, sync operations, time) to stderr.
        #[arg(long)]
        summary: bool,
        /// Also report potential races: accesses no common lock protects that this run
        /// ordered only by handing other locks between the threads (another run may not).
        #[arg(long)]
        potential: bool,
    },
    /// Export the recovered trace in another tool's format.
    Export {
        #[command(subcommand)]
        what: Export,
    },
    /// Print the metadata, tables and decoded per-thread streams.
    Dump {
        profile: PathBuf,
        /// Items printed per stream per chunk.
        #[arg(long, default_value_t = 200)]
        max: usize,
        /// Print every item.
        #[arg(long)]
        all: bool,
        /// Disassemble the block table with each instruction's DEP semantics.
        #[arg(long)]
        disasm: bool,
    },
}

#[derive(Subcommand)]
enum Export {
    /// The indexed binary trace (UMT): exec.vtable, exec.offsets, exec.prev_next.column and
    /// its tables, into directory OUTPUT; or, with --check DIR, read a trace back, check it
    /// and print its counts
    Umt {
        #[arg(required_unless_present = "check")]
        profile: Option<PathBuf>,
        #[arg(short, long, required_unless_present = "check")]
        output: Option<PathBuf>,
        /// Check the trace in DIR: every offset and size, every record, each thread walked
        /// forward and backward
        #[arg(long, value_name = "DIR", conflicts_with_all = ["profile", "output"])]
        check: Option<PathBuf>,
        /// Worker threads (0: all cores)
        #[arg(short, long, default_value_t = 0)]
        jobs: usize,
        #[command(flatten)]
        seek: SeekArgs,
    },
    /// ChampSim traces: 64-byte `input_instr` records, one per executed instruction
    /// (compressed when OUTPUT ends in .xz or .gz)
    Champsim {
        profile: PathBuf,
        /// The trace of --thread, or each thread's as OUTPUT with its index before the
        /// compression extension (out.xz: out.0.xz, out.1.xz, ...)
        #[arg(short, long)]
        output: PathBuf,
        /// Only this thread (index in creation order), into OUTPUT itself
        #[arg(long)]
        thread: Option<u32>,
        /// Worker threads (0: all cores)
        #[arg(short, long, default_value_t = 0)]
        jobs: usize,
        #[command(flatten)]
        seek: SeekArgs,
    },
}

/// `dep --version`: dep's version, and the DynamoRIO that `dep record` would use.
fn print_version() {
    println!("dep {}", env!("CARGO_PKG_VERSION"));
    match dep_collector::Install::find() {
        Ok(i) => println!(
            "DynamoRIO {} ({}), client {}",
            i.dynamorio_version().unwrap_or_else(|| "of unknown version".into()),
            i.dynamorio.display(),
            i.client.display()
        ),
        Err(e) => println!("DynamoRIO: not found: {e}"),
    }
}

fn main() -> ExitCode {
    // Before clap, whose own version flag cannot say which DynamoRIO is found at run time.
    if matches!(std::env::args().nth(1).as_deref(), Some("--version" | "-V")) && std::env::args().len() == 2 {
        print_version();
        return ExitCode::SUCCESS;
    }
    let cli = Cli::parse();
    dep_profile::container::truncation::guard();
    match run(cli) {
        Ok(code) => code,
        // Whichever command wrote it, output whose reader went away (`dep stats P | head`)
        // ends there, as the commands that check each write say (`reader_gone`).
        Err(e) if e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(reader_gone)) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the causes joined, most general first; a cause an error already
            // quotes at its end (`#[error("...: {0}")]` over its source) is not repeated.
            let mut causes: Vec<String> = Vec::new();
            for c in e.chain().map(|c| c.to_string()) {
                if !causes.last().is_some_and(|last| last.ends_with(&c)) {
                    causes.push(c);
                }
            }
            let msg = causes.join(": ");
            say!("dep: error: {msg}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    let _ = DEBUG_DIRS.set(cli.debug_dirs);
    match cli.cmd {
        Cmd::Dump { profile, max, all, disasm } => {
            let p = dep_profile::container::Profile::open(&profile)?;
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            let opts = dep_profile::dump::DumpOptions { max_items: (!all).then_some(max), disassemble: disasm };
            match dep_profile::dump::dump(&p, &mut out, opts) {
                Err(dep_profile::dump::DumpError::Io(e)) if reader_gone(&e) => return Ok(ExitCode::SUCCESS),
                r => r?,
            }
            out.flush().context("writing the dump")?;
            check_truncated(&p)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Record {
            output,
            truth,
            discard,
            no_sync,
            compression,
            index,
            skip_instrs,
            instrs,
            window_count,
            every,
            start_at,
            stop_at,
            attach,
            program,
        } => {
            let part = Part { windows: window_plan(skip_instrs, instrs, window_count, every)?, start_at, stop_at };
            for f in [&part.start_at, &part.stop_at].into_iter().flatten() {
                if f.is_empty() || f.chars().any(|c| c.is_whitespace() || matches!(c, '"' | ';')) {
                    bail!("function {f:?}: give a symbol's name or an address (0x...), with no spaces, quotes or semicolons");
                }
            }
            record(output, truth, discard, no_sync, compression, index, part, attach, program)
        }
        Cmd::Recover { profile, truth, format, output, jobs, kernel_refs, seek, thread } => {
            recover(&profile, truth, &format, output.as_deref(), jobs, kernel_refs, (seek, thread))
        }
        Cmd::Index { profile, jobs } => index(&profile, jobs),
        Cmd::Stats { profile, json, no_compress } => stats(&profile, json, !no_compress),
        Cmd::Edges { profile, json, truth, output, jobs } => edges(&profile, json, truth, output.as_deref(), jobs),
        Cmd::Dcfg { check: Some(_), seek, .. } if seek.given() => {
            bail!("--from-instr and --to-instr choose what a profile gives, not what --check reads")
        }
        Cmd::Dcfg { check: Some(pair), blocks, .. } => dcfg_check(&pair[0], &pair[1], blocks),
        Cmd::Dcfg { profile: Some(profile), output: Some(output), trace, seek, .. } => dcfg(&profile, &output, trace.as_deref(), seek),
        Cmd::Dcfg { .. } => bail!("dep dcfg needs PROFILE -o FILE, or --check DCFG TRACE"),
        Cmd::Wet { profile, output, history, count, spill_mb, summary, ports } => {
            wet(&profile, output.as_deref(), if count { Some(0) } else { history }, spill_mb, summary || count, ports.as_deref())
        }
        Cmd::Callgrind { profile, output, separate_threads, dump_instr, seek } => {
            callgrind(&profile, &output, separate_threads, dump_instr, seek)
        }
        Cmd::Races { profile, json, region, output, summary, potential } => {
            races(&profile, json, region.as_ref(), output.as_deref(), summary, potential)
        }
        Cmd::Export { what: Export::Umt { check: Some(dir), .. } } => umt_check(&dir),
        Cmd::Export { what: Export::Umt { profile: Some(profile), output: Some(output), jobs, seek, .. } } => {
            umt(&profile, &output, jobs, seek)
        }
        Cmd::Export { what: Export::Umt { .. } } => bail!("dep export umt needs PROFILE -o DIR, or --check DIR"),
        Cmd::Export { what: Export::Champsim { profile, output, thread, jobs, seek } } => champsim(&profile, &output, thread, jobs, seek),
    }
}

impl SeekArgs {
    fn given(&self) -> bool {
        self.from_instr.is_some() || self.to_instr.is_some()
    }
}

/// Sets the window of `seek` and `thread` on `rec`, counting every chunk first when the
/// profile has no seek index. Answers whether any block is in it; with `require`, none is
/// an error saying what the threads ran.
fn seek(rec: &mut dep_recover::Recovery, seek: SeekArgs, thread: Option<u32>, require: bool) -> Result<bool> {
    if !seek.given() && thread.is_none() {
        return Ok(true);
    }
    let window = dep_recover::Window { from: seek.from_instr.unwrap_or(0), to: seek.to_instr.unwrap_or(u64::MAX), thread };
    let p = rec.profile;
    let counted;
    let index = match &p.index {
        Some(i) => Some(i),
        None if window.whole() => None,
        None => {
            say!("dep: {}: no seek index; counting every chunk first (`dep index` adds one to the profile)", p.path());
            let pb = progress_bar(rec.chunks().len() as u64, "indexing");
            counted = dep_recover::seek::count(rec, &|n| pb.inc(n))?;
            pb.finish_and_clear();
            Some(&counted)
        }
    };
    let any = rec.seek(window, index)?;
    if require && !any {
        rec.window_empty(index)?;
    }
    Ok(any)
}

/// After the runs of a window: the chunks that hold it, and how many chunk reads the runs
/// made (a command of two passes reads each twice).
fn report_window(rec: &dep_recover::Recovery) {
    if let Some(w) = rec.window().filter(|w| !w.whole()) {
        let total = rec.profile.chunk_count();
        let to = if w.to == u64::MAX { String::new() } else { w.to.to_string() };
        let reads = rec.window_reads();
        say!(
            "dep: {}: instructions {}..{to} are in {} of {total} chunks; {reads} chunk reads",
            rec.profile.path(),
            w.from,
            rec.chunks().len()
        );
    }
}

fn index(profile: &std::path::Path, jobs: usize) -> Result<ExitCode> {
    let p = dep_profile::container::Profile::open(profile)?;
    if p.index.is_some() {
        say!("dep: {}: has a seek index already", profile.display());
        return Ok(ExitCode::SUCCESS);
    }
    add_index(&p, jobs)?;
    let n = p.chunk_count();
    say!("dep: {}: indexed {n} chunks of {} threads", profile.display(), p.threads.len());
    Ok(ExitCode::SUCCESS)
}

/// Counts every chunk of `p` and appends the seek index.
fn add_index(p: &dep_profile::container::Profile, jobs: usize) -> Result<()> {
    dep_profile::container::indexable(p)?;
    let rec = dep_recover::Recovery::new(p, jobs);
    let pb = progress_bar(rec.chunks().len() as u64, "indexing");
    let idx = dep_recover::seek::count(&rec, &|n| pb.inc(n))?;
    pb.finish_and_clear();
    dep_profile::container::append_index(p, &idx)?;
    Ok(())
}

/// Whether a write failed because the reader of the output went away (`dep ... | head`):
/// the output stops there and the command succeeds.
fn reader_gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::BrokenPipe
}

/// A write's result: its value, None when the reader went away ([`reader_gone`]), or the
/// error with `what` was being written.
fn written<T>(r: std::io::Result<T>, what: &'static str) -> Result<Option<T>> {
    match r {
        Err(e) if reader_gone(&e) => Ok(None),
        r => r.map(Some).context(what),
    }
}

/// Prints the symbolizers' warnings (a module missing or of another build, say), once each.
fn warn_symbols<'a>(syms: impl IntoIterator<Item = &'a dep_dcfg_out::program::symbols::Symbolizer>) {
    for w in syms.into_iter().flat_map(|s| s.warnings()) {
        say!("dep: warning: {w}");
    }
}

/// Whether an output path names standard output: `-`, as most Unix tools take it.
fn is_stdout(path: &std::path::Path) -> bool {
    path.as_os_str() == "-"
}

/// Refuses two outputs that both name standard output (`-`): their text would interleave.
fn one_stdout(what: [(&str, Option<&std::path::Path>); 2]) -> Result<()> {
    if what.iter().all(|(_, p)| p.is_some_and(is_stdout)) {
        bail!("{} and {} cannot both be - (standard output)", what[0].0, what[1].0);
    }
    Ok(())
}

/// A buffered writer to `path`, or to standard output when it is none or `-`.
fn create_output(path: Option<&std::path::Path>) -> Result<Box<dyn Write + Send>> {
    Ok(match path.filter(|p| !is_stdout(p)) {
        Some(p) => Box::new(std::io::BufWriter::with_capacity(
            1 << 20,
            std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => Box::new(std::io::BufWriter::with_capacity(1 << 20, std::io::stdout())),
    })
}

/// A progress bar over `len` units on stderr, hidden unless stderr is a terminal.
fn progress_bar(len: u64, what: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() || len < 2 {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(len);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} chunks, {elapsed} elapsed, {eta} left")
            .unwrap()
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

/// Fails after the output is complete when the profile was cut short, so nothing goes unnoticed;
/// says in one line where a profile of a killed recording ends. A profile cut mid-record has
/// no end record either: its error is its one line, not a warning about the end beside it.
fn check_truncated(p: &dep_profile::container::Profile) -> Result<()> {
    if let Some(t) = p.truncated_at {
        bail!("{}: truncated at byte {t} (the writer stopped mid-record): output covers the complete chunks before it", p.path());
    }
    if let Some(why) = incomplete(p) {
        say!("dep: warning: {}: {why}", p.path());
    }
    Ok(())
}

/// Why a whole-record profile holds less than the run did, if it does: no end record (dep
/// record itself was killed), bytes the collector could not write, or threads that never
/// ended in a program killed by a signal (each keeps what it handed off before).
fn incomplete(p: &dep_profile::container::Profile) -> Option<String> {
    let ended = p.threads.iter().filter(|t| t.end_ns.is_some()).count();
    let unfinished = match p.threads.len() - ended {
        0 => String::new(),
        n => format!("; {n} of {} threads have no end (killed), each covering what it handed off before", p.threads.len()),
    };
    let chunks = p.chunk_count();
    let size = p.bytes().len();
    match &p.end {
        None => Some(format!("ends at byte {size} without an end record (the recording was killed): {chunks} chunks{unfinished}")),
        Some(e) if e.lost_bytes > 0 => {
            Some(format!("the collector could not write {} bytes (disk full?): the profile ends at byte {size}{unfinished}", e.lost_bytes))
        }
        // 128+N: killed by signal N (an exec'd-away image's threads never end either, status -1).
        Some(e) if e.exit_status > 128 && !unfinished.is_empty() => {
            Some(format!("the program was killed by signal {}{unfinished}", e.exit_status - 128))
        }
        Some(_) => None,
    }
}

fn recover(
    profile: &std::path::Path,
    truth: bool,
    format: &str,
    output: Option<&std::path::Path>,
    jobs: usize,
    kernel_refs: bool,
    (window, thread): (SeekArgs, Option<u32>),
) -> Result<ExitCode> {
    use dep_recover::{Format, Recovery, Renderer, Source};
    if kernel_refs && format != "text" {
        bail!("--kernel-refs writes text lines: it needs --format text (Parquet has the kernel's references in its `kernel` column)");
    }
    let p = dep_profile::container::Profile::open(profile)?;
    let mut rec = Recovery::new(&p, jobs);
    seek(&mut rec, window, thread, true)?;
    let source = if truth { Source::Truth } else { Source::Dep };
    if format == "null" {
        // Recovery alone, for timing it: per-chunk counts summed (in any order: the checksum
        // is a sum of lanes), nothing written.
        let mut c = dep_recover::Counts::default();
        rec.events(source).unordered(
            |_| dep_recover::Counts::default(),
            Ok,
            |_, chunk| {
                c.add(&chunk);
                Ok(())
            },
        )?;
        say!(
            "dep: recovered {} blocks, {} instructions, {} reads, {} writes, checksum {:016x}",
            c.blocks,
            c.instructions,
            c.reads,
            c.writes,
            c.checksum()
        );
        if !truth {
            say!("dep: {} of the blocks by compiled code", rec.plans.compiled_blocks());
        }
        report_window(&rec);
        check_truncated(&p)?;
        return Ok(ExitCode::SUCCESS);
    }
    let pb = progress_bar(rec.chunks().len() as u64, if truth { "replaying truth" } else { "recovering" });
    if format == "parquet" {
        let dir = output.filter(|o| !is_stdout(o)).context("--format parquet writes a directory: give it with -o DIR")?;
        let syms = symbolizer(&p.modules);
        dep_dcfg_out::parquet::write(&rec, source, dir, &syms, &|n| pb.inc(n))?;
        pb.finish_and_clear();
        warn_symbols([&syms]);
        report_window(&rec);
        check_truncated(&p)?;
        return Ok(ExitCode::SUCCESS);
    }
    let fmt = Format::parse(format).with_context(|| format!("unknown format {format:?} (text, blocks, binary, parquet or null)"))?;
    let fmt = if kernel_refs { Format::TextKernel } else { fmt };
    let mut out = create_output(output)?;
    out.write_all(fmt.header()).context("writing output")?;
    let r = if rec.workers() == 1 {
        // One thread: render straight into the output, no chunk-sized buffers.
        let mut r = Renderer::new(fmt, &mut out);
        let progress = |n| pb.inc(n);
        rec.events(source).progress(&progress).run(&mut r).and_then(|_| Ok(r.into_inner().map(|_| ())?))
    } else {
        let progress = |n| pb.inc(n);
        rec.events(source).progress(&progress).rendered(fmt, &mut out)
    };
    pb.finish_and_clear();
    match r {
        Err(dep_recover::RecoverError::Output(e)) if reader_gone(&e) => return Ok(ExitCode::SUCCESS),
        r => r?,
    }
    if written(out.flush(), "writing output")?.is_none() {
        return Ok(ExitCode::SUCCESS);
    }
    report_window(&rec);
    check_truncated(&p)?;
    Ok(ExitCode::SUCCESS)
}

/// The windows `dep record` was asked for, checked.
fn window_plan(skip: Option<u64>, instrs: Option<u64>, count: Option<u64>, every: Option<u64>) -> Result<Option<WindowPlan>> {
    if skip.is_none() && instrs.is_none() && count.is_none() {
        return Ok(None);
    }
    let (skip, instrs, count) = (skip.unwrap_or(0), instrs.unwrap_or(u64::MAX), count.unwrap_or(1));
    let every = every.unwrap_or(instrs);
    if instrs == 0 || count == 0 {
        bail!("--instrs and --windows must be at least 1");
    }
    if count > 1 && every < instrs {
        bail!("--every {every} is shorter than a window (--instrs {instrs}): windows would overlap");
    }
    Ok(Some(WindowPlan { skip, instrs, count, every }))
}

/// Which part of each thread `dep record` records (all when every field is None).
struct Part {
    windows: Option<WindowPlan>,
    start_at: Option<String>,
    stop_at: Option<String>,
}

#[allow(clippy::too_many_arguments)]
fn record(
    output: PathBuf,
    truth: bool,
    discard: bool,
    no_sync: bool,
    compression: CompressionArg,
    index: bool,
    part: Part,
    attach: Option<u32>,
    program: Vec<String>,
) -> Result<ExitCode> {
    let level = std::env::var("DEP_ZSTD_LEVEL").ok().and_then(|l| l.parse().ok()).unwrap_or(1);
    let compression = match compression {
        CompressionArg::Auto => dep_collector::Compression::Auto,
        CompressionArg::Small => dep_collector::Compression::Small,
        CompressionArg::Fast => dep_collector::Compression::Fast,
    };
    let Part { windows, start_at, stop_at } = part;
    let opts = dep_collector::RecordOptions {
        output: output.clone(),
        truth,
        discard,
        sync: !no_sync,
        level,
        compression,
        windows,
        start_at,
        stop_at,
        attach,
        program,
    };
    let out = dep_collector::record(&opts)?;
    if index {
        for path in dep_profile::container::family_paths(&output) {
            let p = dep_profile::container::Profile::open(&path)?;
            if p.index.is_some() {
                continue;
            }
            add_index(&p, 0).with_context(|| format!("indexing {}", path.display()))?;
        }
    }
    for w in &out.warnings {
        say!("dep: warning: {w}");
    }
    if discard {
        let [tags, values, truth, chunks] = out.counts;
        say!("dep: discarded {chunks} chunks: DEP_c {tags} bytes, DEP_m {values} bytes, truth {truth} bytes");
    }
    Ok(ExitCode::from((out.status & 0xff) as u8))
}

fn stats(profile: &std::path::Path, json: bool, compress: bool) -> Result<ExitCode> {
    let p = dep_profile::container::Profile::open(profile)?;
    let rec = dep_recover::Recovery::new(&p, 0);
    let s = dep_recover::stats::compute(&rec, dep_recover::Source::Dep, compress)?;
    let mut out = std::io::stdout().lock();
    // The seek index's entries, each chunk with the number of its first instruction.
    let entries: Vec<(u32, u32, dep_profile::container::IndexEntry)> = match &p.index {
        Some(i) => p.threads.iter().flat_map(|t| t.chunks.iter().zip(i.thread(t.index)).map(|(c, e)| (c.thread, c.seq, *e))).collect(),
        None => Vec::new(),
    };
    if json {
        let mut v: serde_json::Value = serde_json::from_str(&s.to_json()).context("statistics as JSON")?;
        let index: Option<Vec<serde_json::Value>> = p.index.as_ref().map(|_| {
            let row = |&(thread, seq, e): &(u32, u32, dep_profile::container::IndexEntry)| {
                let c = e.counts;
                serde_json::json!({"thread": thread, "seq": seq, "first": e.first, "instructions": c.instructions,
                    "blocks": c.blocks, "reads": c.reads, "writes": c.writes})
            };
            entries.iter().map(row).collect()
        });
        v["index"] = serde_json::json!(index);
        writeln!(out, "{}", serde_json::to_string_pretty(&v).context("statistics as JSON")?)?;
    } else {
        write!(out, "{}", dep_recover::stats::render_text(&s))?;
        match &p.index {
            Some(_) => writeln!(out, "  seek index of {} chunks (dep stats --json lists them)", entries.len())?,
            None => writeln!(out, "  no seek index (dep index adds one)")?,
        }
    }
    out.flush()?;
    if p.index.is_some() {
        // The index must say what recovery found.
        let sum = entries.iter().fold([0u64; 4], |a, (_, _, e)| {
            let c = e.counts;
            [a[0] + c.instructions, a[1] + c.blocks, a[2] + c.reads, a[3] + c.writes]
        });
        let t = &s.total;
        // The index numbers unrecorded instructions too (they count in the chunk after).
        if sum != [t.instructions.saturating_add(t.unrecorded), t.blocks, t.reads, t.writes] {
            bail!(
                "{}: the seek index counts {} instructions, {} blocks, {} reads and {} writes; recovery found {}, {}, {} and {}",
                p.path(),
                sum[0],
                sum[1],
                sum[2],
                sum[3],
                t.instructions,
                t.blocks,
                t.reads,
                t.writes
            );
        }
    }
    check_truncated(&p)?;
    Ok(ExitCode::SUCCESS)
}

fn edges(profile: &std::path::Path, json: bool, truth: bool, output: Option<&std::path::Path>, jobs: usize) -> Result<ExitCode> {
    use dep_dcfg_out::edges;
    let p = dep_profile::container::Profile::open(profile)?;
    let rec = dep_recover::Recovery::new(&p, jobs);
    let source = if truth { dep_recover::Source::Truth } else { dep_recover::Source::Blocks };
    let mut out = create_output(output)?;
    let pb = progress_bar(rec.chunks().len() as u64, "counting edges");
    let threads = edges::count(&rec, source, &|n| pb.inc(n))?;
    pb.finish_and_clear();
    let sym = symbolizer(&p.modules);
    let r = if json {
        serde_json::to_writer_pretty(&mut out, &edges::to_json(&threads, &sym)).map_err(std::io::Error::from).and_then(|_| writeln!(out))
    } else {
        edges::write_text(&mut out, &threads, &sym)
    };
    if written(r.and_then(|_| out.flush()), "writing output")?.is_none() {
        return Ok(ExitCode::SUCCESS);
    }
    warn_symbols([&sym]);
    check_truncated(&p)?;
    Ok(ExitCode::SUCCESS)
}

fn champsim(profile: &std::path::Path, output: &std::path::Path, thread: Option<u32>, jobs: usize, window: SeekArgs) -> Result<ExitCode> {
    let p = dep_profile::container::Profile::open(profile)?;
    let mut rec = dep_recover::Recovery::new(&p, jobs);
    seek(&mut rec, window, thread, true)?;
    let pb = progress_bar(rec.chunks().len() as u64, "writing ChampSim records");
    let s = dep_dcfg_out::champsim::export(&rec, output, thread, &|n| pb.inc(n))?;
    pb.finish_and_clear();
    for f in &s.files {
        say!("dep: {}: thread {}, {} records", f.path.display(), f.thread, f.records);
    }
    let l = &s.losses;
    if l.addresses > 0 {
        say!("dep: warning: {} memory addresses beyond a record's slots (4 read, 2 written) left out", l.addresses);
    }
    if l.undirected > 0 {
        say!("dep: warning: {} conditional branches with no next block known written as not taken", l.undirected);
    }
    if l.unknown_blocks > 0 {
        say!("dep: warning: {} blocks had no decodable code in the block table; their instructions are not in the trace", l.unknown_blocks);
    }
    report_window(&rec);
    check_truncated(&p)?;
    Ok(ExitCode::SUCCESS)
}

fn umt(profile: &std::path::Path, output: &std::path::Path, jobs: usize, window: SeekArgs) -> Result<ExitCode> {
    let p = dep_profile::container::Profile::open(profile)?;
    let mut rec = dep_recover::Recovery::new(&p, jobs);
    seek(&mut rec, window, None, true)?;
    // Two passes over the chunks: one to place every record, one to write it.
    let pb = progress_bar(2 * rec.chunks().len() as u64, "writing the UMT trace");
    let s = dep_dcfg_out::umt::export(&rec, output, &|n| pb.inc(n))?;
    pb.finish_and_clear();
    say!(
        "dep: {}: {} records of {} threads, {} instruction rows ({} for partial executions), {} address ranges",
        output.display(),
        s.records,
        s.threads,
        s.rows,
        s.variants,
        s.address_ranges
    );
    if s.unknown_blocks > 0 {
        say!(
            "dep: warning: {} blocks had no decodable code in the block table; their instructions are not in the trace (the record after each gap has flag 0x02)",
            s.unknown_blocks
        );
    }
    report_window(&rec);
    check_truncated(&p)?;
    Ok(ExitCode::SUCCESS)
}

fn umt_check(dir: &std::path::Path) -> Result<ExitCode> {
    let s = dep_dcfg_out::umt::reader::check(dir)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if written(write!(out, "{s}"), "writing the counts")?.is_some() {
        written(out.flush(), "writing the counts")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn dcfg(profile: &std::path::Path, output: &std::path::Path, trace: Option<&std::path::Path>, window: SeekArgs) -> Result<ExitCode> {
    use dep_dcfg_out::dcfg::{write_dcfg, write_trace, Ids, Process};
    use dep_dcfg_out::program::symbols::Symbolizer;
    one_stdout([("-o", Some(output)), ("--trace", trace)])?;
    let (profiles, strays) = dep_profile::container::open_family(profile)?;
    for p in strays {
        say!("dep: warning: {}: not a child of {}; left out", p.display(), profile.display());
    }
    let mut recs: Vec<dep_recover::Recovery> = profiles.iter().map(|p| dep_recover::Recovery::new(p, 0)).collect();
    // A window applies to every process, each numbering its threads' instructions; it must
    // hold a block of one of them.
    let mut any = false;
    for r in &mut recs {
        any |= seek(r, window, None, false)?;
    }
    if !any {
        let (from, to) = (window.from_instr.unwrap_or(0), window.to_instr.map_or(String::new(), |t| t.to_string()));
        bail!("no block starts in instructions {from}..{to} of any thread of {} processes", recs.len());
    }
    let chunks: u64 = recs.iter().map(|r| r.chunks().len() as u64).sum();
    let pb = progress_bar(chunks * if trace.is_some() { 2 } else { 1 }, "dcfg");
    let mut ids = Ids::default();
    let mut procs = Vec::new();
    for r in &recs {
        procs.push(Process::build(r, &mut ids, &|n| pb.inc(n))?);
    }
    let syms: Vec<Symbolizer> = profiles.iter().map(|p| symbolizer(&p.modules)).collect();
    let mut out = create_output(Some(output))?;
    write_dcfg(&mut out, &procs, &syms)?;
    out.flush().with_context(|| format!("writing {}", output.display()))?;
    if let Some(t) = trace {
        let mut out = create_output(Some(t))?;
        write_trace(&mut out, &procs, &|n| pb.inc(n))?;
        out.flush().with_context(|| format!("writing {}", t.display()))?;
    }
    pb.finish_and_clear();
    warn_symbols(&syms);
    for r in &recs {
        report_window(r);
    }
    for p in &profiles {
        check_truncated(p)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `output` None: no trace written (`--count`, which keeps no dependence: a history of 0).
fn wet(
    profile: &std::path::Path,
    output: Option<&std::path::Path>,
    history: Option<usize>,
    spill_mb: u64,
    summary: bool,
    ports: Option<&std::path::Path>,
) -> Result<ExitCode> {
    use dep_dcfg_out::wet;
    one_stdout([("-o", output), ("--ports", ports)])?;
    let p = dep_profile::container::Profile::open(profile)?;
    let mut out: Box<dyn Write> = match output {
        Some(o) => Box::new(create_output(Some(o))?),
        None => Box::new(std::io::sink()),
    };
    let mut ports_out = ports.map(|p| create_output(Some(p))).transpose()?;
    let rec = dep_recover::Recovery::new(&p, 0);
    let syms = symbolizer(&p.modules);
    let opts = wet::Options { history, memory: usize::try_from(spill_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX) };
    let start = std::time::Instant::now();
    let s = wet::write(&rec, &syms, &opts, &mut out, ports_out.as_mut().map(|w| w as &mut dyn Write)).map_err(|e| match (&e, output) {
        // Only an output error is the output's; the others say what they are.
        (wet::WetError::Io(_), Some(o)) => anyhow::Error::new(e).context(format!("writing {}", o.display())),
        _ => anyhow::Error::new(e),
    })?;
    if summary {
        let secs = start.elapsed().as_secs_f64();
        say!(
            "dep wet: {} instances, {} dependences, {} static instructions, {} runs spilled, peak memory shadow {} MiB, {:.1} s ({:.1} M instances/s; dependences {:.1} s, writing {:.1} s)",
            s.instances,
            s.deps,
            s.executed,
            s.runs,
            s.shadow_peak >> 20,
            secs,
            s.instances as f64 / secs / 1e6,
            s.engine_secs,
            s.write_secs
        );
    }
    if s.unplanned > 0 {
        say!("dep: warning: {} blocks had no decodable code in the block table; their instructions are not in the trace", s.unplanned);
    }
    warn_symbols([&syms]);
    check_truncated(&p)?;
    Ok(ExitCode::SUCCESS)
}

fn callgrind(
    profile: &std::path::Path,
    output: &std::path::Path,
    separate_threads: bool,
    dump_instr: bool,
    window: SeekArgs,
) -> Result<ExitCode> {
    use dep_dcfg_out::callgrind::{write_profile, Options};
    let p = dep_profile::container::Profile::open(profile)?;
    // Fail on an unwritable output before the work.
    if !separate_threads {
        std::fs::File::create(output).with_context(|| format!("cannot create {}", output.display()))?;
    }
    let mut rec = dep_recover::Recovery::new(&p, 0);
    seek(&mut rec, window, None, true)?;
    let syms = symbolizer(&p.modules);
    write_profile(&rec, &syms, &Options { separate_threads, dump_instr }, output)?;
    warn_symbols([&syms]);
    report_window(&rec);
    say!("dep callgrind: naming code took {:.3} s of CPU", syms.busy().as_secs_f64());
    check_truncated(&p)?;
    Ok(ExitCode::SUCCESS)
}

fn races(
    profile: &std::path::Path,
    json: bool,
    region: Option<&dep_dcfg_out::races::RegionSpec>,
    output: Option<&std::path::Path>,
    summary: bool,
    potential: bool,
) -> Result<ExitCode> {
    use dep_dcfg_out::races::{analyse, report::Report};
    let p = dep_profile::container::Profile::open(profile)?;
    let mut out: Box<dyn Write> = match output {
        Some(o) => Box::new(std::io::BufWriter::new(std::fs::File::create(o).with_context(|| format!("cannot create {}", o.display()))?)),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    if p.meta.windows.is_some() {
        say!(
            "dep: note: {}: recorded in windows of instructions; what ordered the threads outside them (locks, thread \
             creation and joins) is not in the profile, so races are reported as if it never happened",
            profile.display()
        );
    }
    let started = std::time::Instant::now();
    let rec = dep_recover::Recovery::new(&p, 0);
    let syms = symbolizer(&p.modules);
    let a = analyse(&rec, &syms, region)?;
    let analysed = started.elapsed().as_secs_f64();
    let mut report = Report::new(&a, &syms);
    report.potential = potential;
    let Some(n) = written(report.write(json, &mut out), "writing the race report")? else { return Ok(ExitCode::SUCCESS) };
    out.flush().context("writing the race report")?;
    if summary {
        let s = a.stats;
        let why = if a.threads == 1 && s.checked == 0 {
            "one thread: none to race with"
        } else {
            "thread-local, atomic, inside watched library calls"
        };
        say!(
            "dep races: {} threads, {} accesses checked ({} of them quiet: on pages one thread touches or none writes, or repeats), {} not ({why}), {} sync operations, {} watched calls, {} races; shadow {} MiB; {analysed:.2} s analysis ({:.2} s the first pass), {:.2} s in all",
            a.threads,
            s.checked,
            s.quiet,
            s.skipped,
            s.syncs,
            s.calls,
            n,
            a.shadow_bytes >> 20,
            a.first_pass_secs,
            started.elapsed().as_secs_f64()
        );
    }
    warn_symbols([&syms]);
    check_truncated(&p)?;
    Ok(ExitCode::SUCCESS)
}

fn dcfg_check(dcfg: &std::path::Path, trace: &std::path::Path, blocks: bool) -> Result<ExitCode> {
    use dep_dcfg_out::dcfg::check::{block_line, read_dcfg, read_trace, Blocks, Report};
    let open = |p: &std::path::Path| -> Result<std::io::BufReader<std::fs::File>> {
        // Only a regular file: a FIFO or a device would hang the check or never end.
        let (f, _) = dep_dcfg_out::program::module_file::open_regular(p).with_context(|| format!("cannot read {}", p.display()))?;
        Ok(std::io::BufReader::with_capacity(1 << 20, f))
    };
    let mut report = Report::default();
    let procs = read_dcfg(open(dcfg)?, &mut report).with_context(|| format!("{}", dcfg.display()))?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut werr: Option<std::io::Error> = None;
    let mut emit = |text: &[u8]| {
        if werr.is_none() {
            if let Err(e) = out.write_all(text) {
                werr = Some(e);
            }
        }
    };
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let sink = blocks.then_some(Blocks { render: &block_line, emit: &mut emit });
    read_trace(open(trace)?, &procs, workers, &mut report, sink).with_context(|| format!("{}", trace.display()))?;
    if written(werr.map_or(Ok(()), Err), "writing output")?.is_none() {
        return Ok(ExitCode::SUCCESS);
    }
    out.flush().context("writing output")?;
    say!(
        "dep: dcfg check passed: {} processes, {} nodes, {} edges, {} routines, {} loops, {} edges decoded",
        report.processes,
        report.nodes,
        report.edges,
        report.routines,
        report.loops,
        report.decoded_edges
    );
    Ok(ExitCode::SUCCESS)
}
