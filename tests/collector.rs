//! End to end: programs run under `dep record` behave exactly as natively, and the
//! references recovered from DEP equal the ones observed at run time (`--truth`), byte for
//! byte, in the `text` and `blocks` formats. Needs the DynamoRIO build (`cargo build
//! --release --workspace`) and gcc.

use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;
use common::{corpus, dep};

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("spawn")
}

/// Streams `dep ARGS`' stdout into a hash: traces too large for a file still compare.
fn hash_stdout(args: &[&str]) -> (u64, u64) {
    hash_command(Command::new(dep()).args(args))
}

/// [`hash_stdout`] of any command; it must succeed. Returns (hash, lines).
fn hash_command(cmd: &mut Command) -> (u64, u64) {
    let mut h = DefaultHasher::new();
    let lines = hash_into(cmd, &mut h, false);
    (h.finish(), lines)
}

/// Streams `cmd`'s stdout into `h`, each line less its first field where `drop_field`; it
/// must succeed (its stderr is shown where not). Returns the lines.
fn hash_into(cmd: &mut Command, h: &mut DefaultHasher, drop_field: bool) -> u64 {
    let args = format!("{cmd:?}");
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut out = BufReader::with_capacity(1 << 20, child.stdout.take().unwrap());
    let mut lines = 0u64;
    if drop_field {
        let mut line = Vec::new();
        loop {
            line.clear();
            if out.read_until(b'\n', &mut line).unwrap() == 0 {
                break;
            }
            let Some(i) = line.iter().position(|&b| b == b' ') else {
                panic!("{args}: a line without fields: {:?}", String::from_utf8_lossy(&line))
            };
            h.write(&line[i + 1..]);
            lines += 1;
        }
    } else {
        // Whole buffers, not lines: text traces run to billions of lines.
        loop {
            let buf = out.fill_buf().unwrap();
            if buf.is_empty() {
                break;
            }
            h.write(buf);
            lines += buf.iter().filter(|&&b| b == b'\n').count() as u64;
            let n = buf.len();
            out.consume(n);
        }
    }
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{args} failed: {}", String::from_utf8_lossy(&o.stderr));
    lines
}

/// Recovery equals the truth stream for one profile, in both formats.
fn check_profile(p: &Path) -> (u64, u64) {
    let p = p.to_str().unwrap();
    let mut counts = (0, 0);
    for fmt in ["text", "blocks"] {
        let (rec, n) = hash_stdout(&["recover", p, "--format", fmt]);
        let (tru, m) = hash_stdout(&["recover", p, "--truth", "--format", fmt]);
        assert_eq!((rec, n), (tru, m), "{p}: recovered {fmt} ({n} lines) differs from the truth ({m} lines)");
        assert!(n > 0, "{p}: empty {fmt} trace");
        if fmt == "text" {
            counts.0 = n;
        } else {
            counts.1 = n;
        }
    }
    // The interpreted walk alone (DEP_JIT=0) recovers the same trace.
    let walk = |fmt: &str| hash_command(Command::new(dep()).args(["recover", p, "--format", fmt]).env("DEP_JIT", "0"));
    assert_eq!(walk("text"), hash_stdout(&["recover", p, "--truth", "--format", "text"]), "{p}: DEP_JIT=0 differs from the truth");
    // The null sink's counts and reference checksum: recovered on one thread, replayed on all.
    let null = |extra: &[&str], jit: &str| {
        let o = run(Command::new(dep()).args(["recover", p, "--format", "null"]).args(extra).env("DEP_JIT", jit));
        assert!(o.status.success(), "{p}: recover null failed: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let (rec, walked, tru) = (null(&["--jobs", "1"], "1"), null(&[], "0"), null(&["--truth"], "1"));
    let (first, compiled) = rec.split_once('\n').unwrap();
    assert!(first.contains("checksum"), "{p}: {rec}");
    assert_eq!(format!("{first}\n"), tru, "{p}: null-sink counts differ from the truth's");
    assert!(walked.starts_with(first), "{p}: the walk's null-sink counts differ: {walked}");
    // Compiled code really ran (x86-64 host), and never where it was turned off.
    let by_code = |s: &str| -> u64 {
        s.lines().find_map(|l| l.strip_prefix("dep: ")?.split(" of the blocks by compiled code").next()?.parse().ok()).expect(s)
    };
    assert!(by_code(compiled) > 0, "{p}: no block was recovered by compiled code: {rec}");
    assert_eq!(by_code(&walked), 0, "{p}: DEP_JIT=0 still ran compiled code: {walked}");
    check_edges(Path::new(p));
    check_register_semantics(Path::new(p));
    counts
}

/// Every instruction of the profile's block table: the shared semantics' register sets
/// against iced-x86's own operand information (read here independently, with the rules the
/// semantics document), and consistent with DEP's address semantics (address registers are
/// read, expired and adjusted registers are written).
fn check_register_semantics(p: &Path) {
    use dep_profile::semantics::RegEffect;
    use iced_x86::{Decoder, DecoderOptions, EncodingKind, InstructionInfoFactory, Mnemonic, OpAccess, OpKind, Register};
    let prof = dep_profile::container::Profile::open(p).unwrap();
    let mut sem = dep_profile::Semantics::new(prof.machine());
    let mut factory = InstructionInfoFactory::new();
    let name = |r: Register| -> Option<String> {
        if r == Register::None || r.is_ip() {
            return None;
        }
        let full = if r.is_gpr() || r.is_vector_register() { r.full_register() } else { r };
        let full =
            if (Register::MM0..=Register::MM7).contains(&full) { Register::ST0 + (full as u32 - Register::MM0 as u32) } else { full };
        Some(format!("{full:?}").to_lowercase())
    };
    let mut forms = std::collections::HashSet::new();
    let mut bad = Vec::new();
    for b in prof.blocks() {
        let code = prof.code(b);
        for i in Decoder::with_ip(prof.width.bits() as u32, code, b.addr, DecoderOptions::NONE).into_iter().take(b.insn_count as usize) {
            if i.is_invalid() {
                continue;
            }
            let insn = sem.insn(&i);
            let info = factory.info(&i);
            let (mut reads, mut writes) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
            let merge = i.op_mask() != Register::None && !i.zeroing_masking();
            for u in info.used_registers() {
                let Some(n) = name(u.register()) else { continue };
                let (r, w) = match u.access() {
                    OpAccess::Read | OpAccess::CondRead => (true, false),
                    OpAccess::Write => (false, true),
                    OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite => (true, true),
                    _ => (false, false),
                };
                let reg = u.register();
                let keeps = w
                    && (reg.is_gpr8()
                        || reg.is_gpr16()
                        || reg.is_xmm() && i.encoding() == EncodingKind::Legacy
                        // Merge-masking keeps a vector destination's masked elements; a compare
                        // into an opmask register zeroes them (SDM vol. 1, 15.6.1).
                        || merge && reg.is_vector_register() && i.op0_kind() == OpKind::Register && i.op0_register() == reg);
                if r || keeps {
                    reads.insert(n.clone());
                }
                if w {
                    writes.insert(n);
                }
            }
            if matches!(i.mnemonic(), Mnemonic::Syscall | Mnemonic::Sysenter) || i.mnemonic() == Mnemonic::Int && i.immediate8() == 0x80 {
                reads.extend(["rax", "rdi", "rsi", "rdx", "r10", "r8", "r9"].map(String::from));
                writes.insert("rax".into());
            }
            let ours = |s: dep_profile::ArchSet| s.iter().map(|a| a.name()).collect::<std::collections::BTreeSet<_>>();
            let (our_reads, our_writes) = (ours(insn.regs.reads), ours(insn.regs.writes));
            if (&our_reads, &our_writes) != (&reads, &writes)
                || insn.regs.flags_read != i.rflags_read()
                || insn.regs.flags_written != i.rflags_modified()
            {
                bad.push(format!("{:#x} {i}: ours {our_reads:?} -> {our_writes:?}, iced {reads:?} -> {writes:?}", i.ip()));
            }
            let gpr = |r: dep_profile::Reg| (r.index() < 16).then(|| dep_profile::ArchReg(r.0).name());
            for r in insn.used.iter().filter_map(gpr) {
                if !our_reads.contains(&r) {
                    bad.push(format!("{:#x} {i}: address register {r} is not read", i.ip()));
                }
            }
            for e in &insn.effects {
                let r = match *e {
                    RegEffect::Expire(r) | RegEffect::Add(r, _) => r,
                    RegEffect::Derive(d) => d.dst,
                };
                if let Some(r) = gpr(r).filter(|r| !our_writes.contains(r)) {
                    bad.push(format!("{:#x} {i}: {r} changes but is not written", i.ip()));
                }
            }
            forms.insert(i.code());
        }
    }
    assert!(bad.is_empty(), "{}: {} instructions disagree:\n{}", p.display(), bad.len(), bad[..bad.len().min(20)].join("\n"));
    assert!(forms.len() > 20, "{}: only {} instruction forms", p.display(), forms.len());
}

/// The drivers for stateful analyses agree with the one-threaded run on a recorded profile:
/// edge counts, per-thread block and instruction totals and call depth, on 1-3 workers.
fn check_edges(p: &Path) {
    use dep_dcfg_out::edges::EdgeCounts;
    use dep_recover::{ByThread, Recovery, Source};
    let prof = dep_profile::container::Profile::open(p).unwrap();
    let summary = |t: &[EdgeCounts]| -> Vec<_> { t.iter().map(|t| (t.sorted(), t.blocks, t.instructions, t.depth)).collect() };
    let one = Recovery::new(&prof, 1);
    let mut by = ByThread::new(|_| EdgeCounts::new(&one.plans));
    one.events(Source::Dep).run(&mut by).unwrap();
    let base = summary(&by.into_threads());
    let mut counts = dep_recover::Counts::default();
    Recovery::new(&prof, 1).events(Source::Dep).run(&mut counts).unwrap();
    assert_eq!(base.iter().map(|t| t.2).sum::<u64>(), counts.instructions, "{}: instruction totals", p.display());
    for workers in 1..=3 {
        let rec = Recovery::new(&prof, workers);
        let merged = rec.events(Source::Dep).merged(|_| EdgeCounts::new(&rec.plans)).unwrap();
        assert!(summary(&merged) == base, "{}: merged on {workers} workers differs from the one-threaded run", p.display());
        let threads = rec.events(Source::Dep).per_thread(|_| EdgeCounts::new(&rec.plans)).unwrap();
        assert!(summary(&threads) == base, "{}: per_thread on {workers} workers differs from the one-threaded run", p.display());
    }
}

/// What a profile says of a run that went wrong: `dep stats`' account of how it ended and
/// of each thread (signals, chunks), the modules, and the last blocks each thread ran by the
/// truth, module-relative.
fn postmortem(profile: &Path) -> String {
    let mut out = String::new();
    let stats = run(Command::new(dep()).arg("stats").arg(profile));
    out += &String::from_utf8_lossy(&stats.stderr);
    for l in String::from_utf8_lossy(&stats.stdout).lines().filter(|l| l.starts_with("thread ") || l.contains("chunks")) {
        out += l;
        out.push('\n');
    }
    // The modules the profile loads; none where it cannot be opened.
    let modules: Vec<(u64, u64, String)> = dep_profile::container::Profile::open(profile)
        .map(|p| {
            p.modules
                .iter()
                .filter(|m| matches!(m.event, dep_profile::container::ModuleEventKind::Load))
                .map(|m| (m.base, m.base + m.size, m.path.clone()))
                .collect()
        })
        .unwrap_or_default();
    let mut child = Command::new(dep())
        .arg("recover")
        .arg(profile)
        .args(["--truth", "--format", "blocks"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut last: std::collections::BTreeMap<u32, std::collections::VecDeque<String>> = Default::default();
    for l in BufReader::new(child.stdout.take().unwrap()).lines().map_while(Result::ok) {
        let f: Vec<&str> = l.split(' ').collect();
        let (Some(t), Some(pc)) =
            (f.first().and_then(|t| t.parse().ok()), f.get(1).and_then(|p| u64::from_str_radix(p.trim_start_matches("0x"), 16).ok()))
        else {
            continue;
        };
        let at = match modules.iter().find(|m| m.0 <= pc && pc < m.1) {
            Some((a, _, path)) => format!("{path}+{:#x}", pc - a),
            None => format!("{pc:#x} (no module)"),
        };
        let q = last.entry(t).or_default();
        q.push_back(format!("{l}  {at}"));
        if q.len() > 4 {
            q.pop_front();
        }
    }
    let _ = child.wait();
    out += "last blocks of each thread (truth):\n";
    for q in last.values() {
        for l in q {
            out += l;
            out.push('\n');
        }
    }
    out
}

/// Runs `prog args` natively and under `dep record --truth`; compares behaviour and traces.
fn check(name: &str, prog: &Path, args: &[&str]) -> Vec<(u64, u64)> {
    let native = run(Command::new(prog).args(args));
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join(format!("{name}.dep"));
    let recorded = run(Command::new(dep()).arg("record").arg("--truth").arg("-o").arg(&profile).arg("--").arg(prog).args(args));
    // On a mismatch, what the recorded run said and how it ended, and where its profile
    // says each thread was: a program that died under the collector prints less, and a rare
    // death (the JVM killed by SIGBUS, once in CI) must say where it happened.
    if recorded.stdout != native.stdout || recorded.status.code() != native.status.code() {
        panic!(
            "{name}: stdout or status differs (recorded run's status {:?}, native {:?})\nrecorded stdout:\n{}\nnative stdout:\n{}\nrecorded stderr:\n{}\n{}",
            recorded.status,
            native.status,
            String::from_utf8_lossy(&recorded.stdout),
            String::from_utf8_lossy(&native.stdout),
            String::from_utf8_lossy(&recorded.stderr),
            postmortem(&profile)
        );
    }
    assert_eq!(String::from_utf8_lossy(&recorded.stderr), String::from_utf8_lossy(&native.stderr), "{name}: stderr differs");
    // The main profile and those of forked children and exec'd images.
    let mut profiles: Vec<PathBuf> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
    profiles.sort();
    assert!(!profiles.is_empty());
    check_dcfg(&profile, &profiles);
    profiles.iter().map(|p| check_profile(p)).collect()
}

/// `dep dcfg` writes a DCFG and trace of every process (the profile, its children and
/// exec'd images), `dep dcfg --check` accepts them (every count, dominator tree and loop),
/// and the decoded trace is exactly the block sequence `dep recover --format blocks` gives.
fn check_dcfg(main: &Path, profiles: &[PathBuf]) {
    let dir = tempfile::tempdir().unwrap();
    let (d, t) = (dir.path().join("p.dcfg.json"), dir.path().join("p.trace.json"));
    let o = run(Command::new(dep()).arg("dcfg").arg(main).arg("-o").arg(&d).arg("--trace").arg(&t));
    assert!(o.status.success(), "{}: dep dcfg failed: {}", main.display(), String::from_utf8_lossy(&o.stderr));
    // Processes in the file's order: the profile, then PROFILE.1, PROFILE.2, ...
    let mut order = vec![main.to_path_buf()];
    order.extend((1..).map(|n| PathBuf::from(format!("{}.{n}", main.display()))).take_while(|p| p.exists()));
    assert_eq!(order.len(), profiles.len(), "{}: processes {order:?}, profiles {profiles:?}", main.display());
    // Both sides stream into hashes: a JVM's blocks are hundreds of megabytes of text.
    let (mut want, mut n) = (DefaultHasher::new(), 0);
    for p in &order {
        n += hash_into(Command::new(dep()).arg("recover").arg(p).args(["--format", "blocks"]), &mut want, false);
    }
    // `<pid> <thread> <pc> <count>` less the pid is the blocks format.
    let mut got = DefaultHasher::new();
    let m = hash_into(Command::new(dep()).arg("dcfg").arg("--check").arg(&d).arg(&t).arg("--blocks"), &mut got, true);
    assert!(
        (got.finish(), m) == (want.finish(), n),
        "{}: the decoded DCFG-trace differs from the recovered blocks ({m} and {n} lines)",
        main.display()
    );
}

fn corpus_check(name: &str, args: &[&str]) -> Vec<(u64, u64)> {
    check(name, &corpus().join(name), args)
}

/// Like [`corpus_check`], and also `dep record` and `dep record --discard` behave as the
/// native run does, and the plain profile recovers; returns the native stdout.
fn corpus_check_all_modes(name: &str) -> String {
    let prog = corpus().join(name);
    let native = run(&mut Command::new(&prog));
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("plain.dep");
    for mode in [&["-o", profile.to_str().unwrap()][..], &["--discard"][..]] {
        let o = run(Command::new(dep()).arg("record").args(mode).arg("--").arg(&prog));
        assert_eq!(String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&native.stdout), "{name} {mode:?}: stdout differs");
        assert_eq!(o.status.code(), native.status.code(), "{name} {mode:?}: exit status differs");
    }
    let (_, refs) = hash_stdout(&["recover", profile.to_str().unwrap(), "--format", "text"]);
    assert!(refs > 0, "{name}: the plain profile recovered no reference");
    corpus_check(name, &[]);
    String::from_utf8_lossy(&native.stdout).into_owned()
}

#[test]
fn hello() {
    corpus_check("hello", &[]);
}

/// Valgrind client requests (DynamoRIO drops them from their blocks and answers them
/// itself) run as they do natively: the program is told it is not under Valgrind, and the
/// blocks around them recover; pops to rsp-relative memory are recorded at the address
/// after the pop's increment in the truth too.
#[test]
fn valgrind_requests_and_stack_pops() {
    let out = corpus_check_all_modes("vgrequests");
    assert!(out.contains("running on valgrind: 0 of 1000"), "{out}");
}

#[test]
fn exit_status_is_the_programs() {
    corpus_check("exit_code", &[]);
}

#[test]
fn eight_threads_with_mutexes() {
    let c = corpus_check("threads", &[]);
    assert!(c[0].0 > 1_000_000);
}

/// Threads computing when main exits: DynamoRIO suspends each and asks where it is, at the
/// exit and when it synchronises with all threads before. An answer to that question is no
/// interruption (the thread ran on, storing its block's later values: the chunk was refused,
/// "value stream has N bytes left over"); the last one is where the exit stopped the thread
/// (without it the last block ran short of its values).
#[test]
fn threads_running_when_another_exits() {
    corpus_check("busy_exit", &["2", "200000"]);
}

#[test]
fn signal_handler_interrupting_a_hot_loop() {
    corpus_check("signal_loop", &["300"]);
}

/// A trace longer than one buffer-check group, whose blocks all read through one register:
/// the trace optimizer turns their shadow tests into constants, and a hand-off in the
/// middle of the trace expires the register again.
#[test]
fn shadows_known_along_a_long_trace() {
    corpus_check("longtrace", &[]);
}

/// Faults in every copy of a hot loop of one block, which the trace repeats four times with
/// its checks made in the first (collector/client/src/traces.rs, `end_trace`): each cuts
/// the block where it faulted, as the observed trace does, and the program sees each
/// fault at its own address.
#[test]
fn faults_in_a_repeated_loop() {
    let out = corpus_check_all_modes("fault_loop");
    assert!(out.contains("600 faults, 0 at another address"), "{out}");
}

#[test]
fn siglongjmp_out_of_faults() {
    corpus_check("siglongjmp", &[]);
}

#[test]
fn rep_strings_with_large_counts() {
    corpus_check("repstring", &[]);
}

#[test]
fn avx_and_gathers() {
    corpus_check("avx", &[]);
}

/// Registers only AVX-512 has survive the client (corpora/evexstr.c): glibc's EVEX string
/// functions keep state in ymm16-31, which DynamoRIO saved across the client's code only
/// after the first zmm or opmask write; the program's short name (strrchr) came out as an
/// environment string under `dep record` until the client turned that saving on from the
/// first block (`avx512_state_kept` in collector/client/src/lib.rs). Where the CPU lacks
/// AVX-512 the string functions checked are AVX2's.
#[test]
fn avx512_registers_survive_the_client() {
    let out = corpus_check_all_modes("evexstr");
    assert!(out.contains("evexstr: 0 wrong string results"), "{out}");
    if out.contains("lacks AVX-512VL") {
        println!("evexstr: the ymm16 check NOT RUN on this CPU (no AVX-512VL)");
    }
}

/// Every AVX-512 memory form (corpora/avx512.c). Where the CPU lacks AVX-512 the program
/// runs only its scalar reference and says so; `avx512_forms_encode` in the client crate
/// covers the instrumentation of those forms on any CPU.
#[test]
fn avx512_gathers_scatters_compress_and_masks() {
    let out = corpus_check_all_modes("avx512");
    if out.contains("lacks AVX-512") {
        println!("avx512: NOT RUN on this CPU (no AVX-512F/VL): only the scalar reference ran under dep record");
    } else {
        assert!(out.contains("avx512: gather"), "{out}");
        println!("avx512: the AVX-512 forms ran under dep record on this CPU");
    }
}

/// Code rewritten on read-write-execute pages, also inside its own running block, on
/// five threads (corpora/rwx.c); the program checks every call's result itself.
#[test]
fn code_rewritten_on_a_writable_executable_page() {
    let out = corpus_check_all_modes("rwx");
    assert_eq!(out.matches(", 0 wrong").count(), 5, "{out}");
}

#[test]
fn cpp_exceptions() {
    corpus_check("exceptions", &[]);
}

#[test]
fn fork_and_exec() {
    let c = corpus_check("forkexec", &[]);
    assert!(c.len() >= 4, "expected profiles for the parent, forked children and exec'd images, got {}", c.len());
}

#[test]
fn code_rewritten_at_the_same_address() {
    corpus_check("jit", &[]);
}

#[test]
fn thread_local_storage_and_syscalls() {
    corpus_check("syscalls", &[]);
}

#[test]
fn deep_recursion_and_longjmp() {
    corpus_check("stack", &[]);
}

#[test]
fn gzip_from_the_system() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.txt");
    let text: String = (0..60_000).map(|i| format!("line {i} of some text to compress {}\n", i * 7919 % 1000)).collect();
    std::fs::write(&input, text).unwrap();
    let gzip = Path::new("/bin/gzip");
    check("gzip", gzip, &["-c", input.to_str().unwrap()]);
}

#[test]
fn python3_from_the_system() {
    check("python3", &system_python3(), &["-c", "print(sum(i * i for i in range(20000)))"]);
}

/// The system's python3 interpreter itself, not a wrapper script around it.
fn system_python3() -> PathBuf {
    let exe = run(Command::new("python3").args(["-c", "import sys; print(sys.executable)"]));
    String::from_utf8(exe.stdout).unwrap().trim().into()
}

/// Where the shell finds program `name`; it must be installed (scripts/setup.sh does).
fn on_path(name: &str) -> std::path::PathBuf {
    let o = run(Command::new("sh").args(["-c", &format!("command -v {name}")]));
    let path = String::from_utf8(o.stdout).unwrap();
    assert!(!path.trim().is_empty(), "{name} is not installed (scripts/setup.sh installs it)");
    path.trim().into()
}

/// A JIT runtime from the system: node (V8) issues Valgrind client requests and pops to
/// rsp-based memory in its builtins, and writes and runs its own code.
#[test]
fn node_from_the_system() {
    check(
        "node",
        &on_path("node"),
        &["-e", "let a=[];for(let i=0;i<5000;i++)a.push((i*7919)%1000);a.sort((x,y)=>x-y);console.log(a[2500])"],
    );
}

/// Java (HotSpot, its JIT and a dozen threads) raises its descriptor limit to the hard one
/// at start-up, which under DynamoRIO's report of 0 killed it.
#[test]
fn java_from_the_system() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("T.java");
    std::fs::write(
        &src,
        "public class T { public static void main(String[] a) { int[] x = new int[20000]; long s = 0;\n\
         for (int i = 0; i < x.length; i++) x[i] = (i * 7919) % 1000; java.util.Arrays.sort(x);\n\
         for (int v : x) s += v; System.out.println(s); } }\n",
    )
    .unwrap();
    let javac = run(Command::new("javac").arg("-d").arg(dir.path()).arg(&src));
    assert!(javac.status.success(), "javac failed (scripts/setup.sh installs a JDK): {}", String::from_utf8_lossy(&javac.stderr));
    check("java", &on_path("java"), &["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", dir.path().to_str().unwrap(), "T"]);
}

#[test]
fn missing_program_is_a_one_line_error() {
    let o = run(Command::new(dep()).args(["record", "-o", "/tmp/never.dep", "--", "no-such-program-xyz"]));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no-such-program-xyz: program not found"), "{err}");
}

#[test]
fn unwritable_profile_is_a_one_line_error() {
    let o = run(Command::new(dep()).args(["record", "-o", "/nonexistent-dir/x.dep", "--", "true"]));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("cannot write /nonexistent-dir/x.dep"), "{err}");
}

#[test]
fn discard_writes_nothing_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("none.dep");
    let o = run(Command::new(dep()).arg("record").arg("--discard").arg("-o").arg(&p).arg("--").arg(corpus().join("hello")));
    assert!(o.status.success());
    assert!(!p.exists(), "--discard wrote a profile");
    let err = String::from_utf8_lossy(&o.stderr);
    let line = err.lines().find(|l| l.starts_with("dep: discarded")).expect("a discard summary");
    let dep_c: u64 = line.split("DEP_c ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(dep_c > 10_000, "{line}");
}

#[test]
fn killed_program_status_and_readable_profile() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("k.dep");
    let o = run(Command::new(dep()).arg("record").arg("-o").arg(&p).arg("--").args(["sh", "-c", "kill -TERM $$"]));
    assert_eq!(o.status.code(), Some(128 + 15));
    let d = run(Command::new(dep()).arg("dump").arg("--max").arg("1").arg(&p));
    assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stderr));
}

/// At least `bytes` of text for gzip: lines of twelve words `wN`, N below `vocabulary`
/// (pseudo-random, the same every run).
fn words(bytes: usize, vocabulary: u64) -> String {
    let mut text = String::with_capacity(bytes + 128);
    let mut x: u64 = 7;
    while text.len() < bytes {
        for _ in 0..12 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            text.push_str(&format!("w{} ", x % vocabulary));
        }
        text.push('\n');
    }
    text
}

/// The issue's full-size case: gzip -c of 40 MB behaves exactly as natively under dep record
/// (the profile is recovered to a null sink: 1.7e9 blocks are too many to compare as text here).
#[test]
fn gzip_40_mb_matches_native() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("big.txt");
    std::fs::write(&input, words(40 << 20, 5000)).unwrap();
    let native = run(Command::new("gzip").arg("-c").arg(&input));
    let profile = dir.path().join("gzip.dep");
    let recorded = run(Command::new(dep()).arg("record").arg("-o").arg(&profile).args(["--", "gzip", "-c"]).arg(&input));
    assert_eq!(recorded.status.code(), native.status.code());
    assert!(recorded.stdout == native.stdout, "gzip output differs under dep record");
    assert_eq!(recorded.stderr, native.stderr);
    let o = run(Command::new(dep()).arg("recover").arg(&profile).args(["--format", "null"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let line = String::from_utf8_lossy(&o.stderr);
    let blocks: u64 = line.split("recovered ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(blocks > 100_000_000, "{line}");
}

#[test]
fn program_closing_every_descriptor() {
    let c = corpus_check("closefds", &[]);
    assert!(c[0].0 > 100_000);
    // Truth and DEP would be lost alike: the thread's end must be in the profile.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.dep");
    let o = run(Command::new(dep()).arg("record").arg("-o").arg(&p).arg("--").arg(corpus().join("closefds")));
    assert!(o.status.success());
    let d = run(Command::new(dep()).arg("dump").arg("--max").arg("0").arg(&p));
    let text = String::from_utf8_lossy(&d.stdout);
    let line = text.lines().find(|l| l.starts_with("  thread 0 ")).expect("thread 0 in the table");
    assert!(!line.contains(" end - "), "the thread's stream was cut short: {line}");
}

/// scripts/install.sh puts a working dep into a prefix that keeps working when moved: the
/// installed dep records and recovers a corpus program from a directory outside the
/// checkout, with nothing of the build on PATH.
#[test]
fn installed_dep_works_outside_the_checkout() {
    let root = tempfile::tempdir().unwrap();
    let prefix = root.path().join("prefix");
    let o = run(Command::new("bash").arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/install.sh")).arg(&prefix).env("DEP_NO_BUILD", "1"));
    assert!(o.status.success(), "install.sh failed: {}", String::from_utf8_lossy(&o.stderr));
    let moved = root.path().join("moved");
    std::fs::rename(&prefix, &moved).unwrap();
    let dep = moved.join("bin/dep");
    let work = root.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let installed = |args: &[&str]| run(Command::new(&dep).args(args).current_dir(&work).env_clear().env("PATH", "/usr/bin:/bin"));
    let v = installed(&["--version"]);
    let v = String::from_utf8_lossy(&v.stdout);
    assert!(v.contains(&format!("({})", moved.join("lib/dep/dynamorio").display())), "{v}");
    assert!(v.lines().nth(1).is_some_and(|l| l.starts_with("DynamoRIO 1")), "{v}");
    let hello = corpus().join("hello");
    let native = run(&mut Command::new(&hello));
    let rec = installed(&["record", "--truth", "-o", "h.dep", "--", hello.to_str().unwrap()]);
    assert!(rec.status.success(), "{}", String::from_utf8_lossy(&rec.stderr));
    assert_eq!(rec.stdout, native.stdout);
    let text = installed(&["recover", "h.dep", "--format", "text"]);
    let truth = installed(&["recover", "h.dep", "--truth", "--format", "text"]);
    assert!(text.status.success() && text.stdout.len() > 1000);
    assert!(text.stdout == truth.stdout, "the installed dep recovers another trace than the truth");
}

/// A dep that finds no DynamoRIO says where it looked and how to fix it, in one line.
#[test]
fn missing_dynamorio_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let lonely = dir.path().join("bin/dep");
    std::fs::create_dir(dir.path().join("bin")).unwrap();
    std::fs::copy(dep(), &lonely).unwrap();
    let o = run(Command::new(&lonely).args(["record", "--", "true"]).env_remove("DEP_DYNAMORIO").env_remove("DEP_CLIENT"));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&dir.path().join("lib/dep/dynamorio").display().to_string()), "{err}");
    assert!(err.contains("scripts/install.sh") && err.contains("DEP_DYNAMORIO"), "{err}");
    let o = run(Command::new(dep()).args(["record", "--", "true"]).env("DEP_DYNAMORIO", "/no/such/tree"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.lines().count() == 1 && err.contains("/no/such/tree (DEP_DYNAMORIO)"), "{err}");
}

/// A truth run records exactly what a plain run records. corpora/bare.c is static and
/// libc-free (no loader, no environment read), so two runs execute the same instructions on
/// the same addresses: a plain run's recovered blocks and references equal a truth run's
/// observed ones, rep strings (both directions, cmps, scas, lods), xlat and a signal
/// handler included.
#[test]
fn truth_run_records_what_a_plain_run_records() {
    corpus_check_all_modes("bare");
    let dir = tempfile::tempdir().unwrap();
    let bare = corpus().join("bare");
    let (plain, truth) = (dir.path().join("plain.dep"), dir.path().join("truth.dep"));
    for (p, extra) in [(&plain, None), (&truth, Some("--truth"))] {
        let o = run(Command::new(dep()).arg("record").args(extra).arg("-o").arg(p).arg("--").arg(&bare));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let (plain, truth) = (plain.to_str().unwrap(), truth.to_str().unwrap());
    for fmt in ["blocks", "text"] {
        let recovered = hash_stdout(&["recover", plain, "--format", fmt]);
        let observed = hash_stdout(&["recover", truth, "--truth", "--format", fmt]);
        assert_eq!(recovered, observed, "bare: a plain run's recovered {fmt} differ from a truth run's observed {fmt}");
        assert!(recovered.1 > 1000);
    }
}

/// Mounts a tmpfs of `size` at a fresh directory (root only); `None` with the reason printed
/// when mounting is not permitted here.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let o = run(Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(dir.path()));
        if !o.status.success() {
            println!("skipped: cannot mount a tmpfs: {}", String::from_utf8_lossy(&o.stderr).trim());
            return None;
        }
        Some(Tmpfs(dir))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = run(Command::new("umount").arg(self.0.path()));
    }
}

/// A full disk while recording: the program runs to its end with its own status and output,
/// dep says so in one line, and what was written is a readable prefix whose recovery equals
/// its truth (records are written whole or not at all).
#[test]
fn full_disk_keeps_a_readable_prefix() {
    let Some(fs) = Tmpfs::mount("8m") else { return };
    let work = tempfile::tempdir().unwrap();
    let input = work.path().join("in.txt");
    let text = words(2 << 20, 50_000);
    std::fs::write(&input, &text).unwrap();
    let native = run(Command::new("gzip").arg("-c").arg(&input));
    let profile = fs.0.path().join("full.dep");
    let o = run(Command::new(dep()).arg("record").arg("--truth").arg("-o").arg(&profile).args(["--", "gzip", "-c"]).arg(&input));
    assert_eq!(o.status.code(), native.status.code(), "exit status differs from the native run's");
    assert!(o.stdout == native.stdout, "gzip's output differs under dep record");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(std::fs::metadata(&profile).unwrap().len() > 100_000);
    let p = profile.to_str().unwrap();
    for fmt in ["text", "blocks"] {
        let (rec, n) = hash_stdout(&["recover", p, "--format", fmt]);
        let (tru, m) = hash_stdout(&["recover", p, "--truth", "--format", fmt]);
        assert_eq!((rec, n), (tru, m), "recovered {fmt} differs from the truth");
        assert!(n > 1000, "{n} lines of {fmt}");
    }
}

/// Every signal blocked, on the main thread and on a thread inheriting the mask; a blocked
/// signal stays pending until unblocked.
#[test]
fn signals_blocked_throughout() {
    corpus_check("sigblock", &[]);
}

/// vfork children that exit and that exec.
#[test]
fn vfork_children() {
    corpus_check("vfork", &[]);
}

/// clone with CLONE_VM but no CLONE_THREAD, with CLONE_VFORK, with only SIGCHLD, and with
/// CLONE_FILES.
#[test]
fn clone_with_unusual_flags() {
    corpus_check("clone", &[]);
}

/// execve of a missing file, a directory and a path through a file fail as natively.
#[test]
fn execve_that_fails() {
    let c = corpus_check("execmissing", &[]);
    assert!(c[0].0 > 1000);
}

/// A program reads its descriptor limit as the kernel has it (DynamoRIO reports 0 with
/// none reserved), raises and lowers it, and opening files until EMFILE gets the same count
/// as natively (DynamoRIO's reserved descriptors do not lift the program's limit); its work
/// recovers to the truth. A child forked with no descriptor free cannot connect
/// to dep: dep says so in one line and the child runs unrecorded.
#[test]
fn descriptors_exhausted() {
    let prog = corpus().join("fdexhaust");
    let native = run(&mut Command::new(&prog));
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("fd.dep");
    let o = run(Command::new(dep()).arg("record").arg("--truth").arg("-o").arg(&profile).arg("--").arg(&prog));
    assert_eq!(String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&native.stdout), "stdout differs");
    assert_eq!(o.status.code(), native.status.code(), "exit status differs");
    let err = String::from_utf8_lossy(&o.stderr);
    let extra: Vec<&str> = err.lines().filter(|l| !String::from_utf8_lossy(&native.stderr).contains(l)).collect();
    assert!(extra.len() <= 1 && extra.iter().all(|l| l.contains("Too many open files")), "{err}");
    check_profile(&profile);
}

/// A program killed with SIGKILL keeps what it recorded up to the hand-off period (100 ms
/// of CPU time) before the kill: selfkill's 4096 stores, followed by some 0.3 s of CPU in
/// too few blocks to fill a buffer before it kills itself, are all in the profile, which
/// recovers to its truth.
#[test]
fn sigkill_loses_at_most_the_last_period() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("k.dep");
    let o = run(Command::new(dep()).arg("record").arg("--truth").arg("-o").arg(&profile).arg("--").arg(corpus().join("selfkill")));
    assert_eq!(o.status.code(), Some(128 + 9));
    let out = String::from_utf8_lossy(&o.stdout);
    let mut w = out.split_whitespace().skip(1);
    let base = u64::from_str_radix(w.next().unwrap().trim_start_matches("0x"), 16).unwrap();
    let size: u64 = w.next().unwrap().parse().unwrap();
    let p = profile.to_str().unwrap();
    let text = run(Command::new(dep()).args(["recover", p, "--format", "text"]));
    assert!(text.status.success(), "{}", String::from_utf8_lossy(&text.stderr));
    // Where the profile ends is said, in one line.
    let err = String::from_utf8_lossy(&text.stderr);
    assert!(err.lines().count() == 1 && err.starts_with("dep: warning: ") && err.contains("have no end (killed)"), "{err}");
    let stores = String::from_utf8_lossy(&text.stdout)
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            f.len() == 5
                && f[2] == "W"
                && u64::from_str_radix(f[3].trim_start_matches("0x"), 16).is_ok_and(|a| a >= base && a < base + size)
        })
        .count();
    assert_eq!(stores, 4096, "stores to the array recovered from the killed program's profile");
    assert_eq!(hash_stdout(&["recover", p, "--format", "text"]), hash_stdout(&["recover", p, "--truth", "--format", "text"]));
}

/// A process's state letter and parent, from /proc (None once it is gone).
fn proc_state(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`: the name may hold spaces and parentheses.
    let mut f = stat[stat.rfind(')')? + 1..].split_whitespace();
    Some((f.next()?.chars().next()?, f.next()?.parse().ok()?))
}

/// Whether `done` holds within `secs` seconds, asked every 10 ms.
fn within(secs: u64, mut done: impl FnMut() -> bool) -> bool {
    let started = std::time::Instant::now();
    while !done() {
        if started.elapsed().as_secs() >= secs {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    true
}

/// The first child of process `pid` (the program `dep record` started), waited for.
fn child_of(pid: u32) -> u32 {
    let mut child = None;
    let started = within(30, || {
        child = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .find(|&p| proc_state(p).is_some_and(|(_, ppid)| ppid == pid));
        child.is_some()
    });
    assert!(started, "the program did not start");
    child.unwrap()
}

/// Waits until process `pid` has been asleep for half a second on end (a program reading
/// its input or starting up sleeps far less at a time): it waits for something.
fn asleep(pid: u32) {
    let mut since = std::time::Instant::now();
    let waited = within(60, || {
        if proc_state(pid).map(|s| s.0) != Some('S') {
            since = std::time::Instant::now();
        }
        since.elapsed().as_millis() >= 500
    });
    assert!(waited, "process {pid} never waited: {:?}", proc_state(pid));
}

/// Sends signal `sig` (`-TERM`, ...) to process `pid`.
fn signal(sig: &str, pid: u32) {
    assert!(run(Command::new("kill").arg(sig).arg(pid.to_string())).status.success());
}

/// `timeout`, `kill` or a closed terminal signals dep, not the program: dep passes SIGTERM
/// (and SIGHUP) on to the program and stays to end the profile, whose status is the
/// program's and which recovers to its truth. dep used to die at once, leaving the profile
/// cut mid-record and the program running on, unrecorded.
#[test]
fn terminating_dep_ends_the_program_and_keeps_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("t.dep");
    let mut launcher = Command::new(dep())
        .arg("record")
        .arg("--truth")
        .arg("-o")
        .arg(&profile)
        .args(["--", "sleep", "60"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let prog = child_of(launcher.id());
    // Under way (the client has its connection to dep: a socket among the program's
    // descriptors) and asleep.
    let connected = || {
        std::fs::read_dir(format!("/proc/{prog}/fd"))
            .map(|d| d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok()).any(|l| l.to_string_lossy().starts_with("socket:")))
            .unwrap_or(false)
    };
    assert!(within(60, connected), "the client never connected");
    asleep(prog);
    signal("-TERM", launcher.id());
    if !within(30, || launcher.try_wait().unwrap().is_some()) {
        signal("-KILL", prog);
        panic!("dep was still running 30 s after its SIGTERM");
    }
    let o = launcher.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(128 + 15), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(proc_state(prog).is_none_or(|(state, _)| state == 'Z'), "the program outlived dep");
    let p = profile.to_str().unwrap();
    let d = run(Command::new(dep()).args(["dump", "--max", "1", p]));
    assert!(String::from_utf8_lossy(&d.stdout).contains("ended: exit status 143"), "{}", String::from_utf8_lossy(&d.stdout));
    let text = run(Command::new(dep()).args(["recover", p, "--format", "text"]));
    assert!(text.status.success() && text.stderr.is_empty(), "{}", String::from_utf8_lossy(&text.stderr));
    assert_eq!(hash_stdout(&["recover", p, "--format", "text"]), hash_stdout(&["recover", p, "--truth", "--format", "text"]));
}

/// A launcher that dies while it holds a thread's slots (killed here, as the OOM killer or
/// a user's `kill -9` would) leaves the program running to its end: the thread waiting for
/// a slot sees the connection closed and goes on, losing only what it records from then on.
/// It used to wait for ever, deaf even to SIGTERM (DynamoRIO holds the signal until the
/// thread is back in the code cache).
#[test]
fn a_killed_launcher_leaves_the_program_running() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    let text = words(3 << 20, 3000);
    std::fs::write(&input, &text).unwrap();
    let out = dir.path().join("out.gz");
    // --truth: 16 MiB more a slot, which gzip fills in a fraction of a second.
    let mut launcher = Command::new(dep())
        .arg("record")
        .arg("--truth")
        .arg("-o")
        .arg(dir.path().join("k.dep"))
        .args(["--", "gzip", "-c"])
        .arg(&input)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let prog = child_of(launcher.id());
    // The launcher stopped takes no more chunks: the program fills its slots and waits.
    signal("-STOP", launcher.id());
    asleep(prog);
    signal("-KILL", launcher.id());
    launcher.wait().unwrap();
    if !within(60, || proc_state(prog).is_none_or(|(state, _)| state == 'Z')) {
        signal("-KILL", prog);
        panic!("the program still waited for its slots 60 s after its launcher died");
    }
    let unzipped = run(Command::new("gzip").arg("-dc").arg(&out));
    assert!(unzipped.stdout == text.as_bytes(), "the program's output is not whole");
}

/// A profile cut mid-record (a copy stopped short, or a length damaged) has no end record
/// either; every reader refuses it in one line, the truncation's, not a warning about the
/// missing end beside it (races printed both when a damaged length read as a cut).
#[test]
fn a_profile_cut_mid_record_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("h.dep");
    let o = run(Command::new(dep()).arg("record").arg("-o").arg(&whole).arg("--").arg(corpus().join("hello")));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let b = std::fs::read(&whole).unwrap();
    let cut = dir.path().join("cut.dep");
    // Half the file, or the first byte after it that is not between two records: a cut
    // there is a killed recording's prefix, read with a warning (the run's sizes decide
    // where the half falls; the tail's records are tens of bytes each).
    let inside = (b.len() / 2..b.len() / 2 + 256).find(|&n| {
        std::fs::write(&cut, &b[..n]).unwrap();
        let o = run(Command::new(dep()).arg("stats").arg(&cut));
        !(o.status.success() && String::from_utf8_lossy(&o.stderr).contains("without an end record"))
    });
    assert!(inside.is_some(), "every cut of 256 bytes after the half read as a killed recording");
    for cmd in [&["stats"][..], &["edges"], &["races"], &["dump"]] {
        let o = run(Command::new(dep()).args(cmd).arg(&cut));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{cmd:?} accepted a cut profile");
        assert!(err.lines().count() == 1 && err.contains("truncated at byte"), "{cmd:?}: {err}");
    }
}

/// A process's interval timers survive execve, and the hand-off timer's SIGPROF ended a new
/// image that DynamoRIO had not yet set up (exit status 155; pyenv's `python3` shim, bash
/// exec'ing bash exec'ing python, always died so). Here a shell spends well over one
/// period of CPU time, then execs a chain of three shells: before the timer was stopped at
/// execve, every run ended by SIGPROF.
#[test]
fn exec_after_the_period_is_not_killed() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("e.dep");
    let script = r#"i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; exec bash -c "exec bash -c \"exec bash -c 'exit 7'\"""#;
    for _ in 0..2 {
        let o = run(Command::new(dep()).arg("record").arg("-o").arg(&profile).args(["--", "bash", "-c", script]));
        assert_eq!(o.status.code(), Some(7), "{}", String::from_utf8_lossy(&o.stderr));
        // One profile per image, each readable to its end.
        for name in ["e.dep", "e.dep.1", "e.dep.2", "e.dep.3"] {
            let p = dir.path().join(name);
            let s = run(Command::new(dep()).arg("recover").arg(&p).args(["--format", "null"]));
            let err = String::from_utf8_lossy(&s.stderr);
            assert!(s.status.success() && !err.contains("warning"), "{name}: {err}");
            std::fs::remove_file(&p).unwrap();
        }
    }
}

/// `dep dcfg --check` reads only regular files: a FIFO (which would wait for a writer) and
/// a device (which never ends) are refused in one line, without hanging.
#[test]
fn dcfg_check_refuses_what_is_not_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let trace = dir.path().join("t.json");
    std::fs::write(&trace, "{}").unwrap();
    for (a, b, what) in [(fifo.as_path(), trace.as_path(), "a FIFO"), (Path::new("/dev/zero"), trace.as_path(), "a character device")] {
        let mut child = Command::new(dep()).arg("dcfg").arg("--check").arg(a).arg(b).stderr(Stdio::piped()).spawn().unwrap();
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if started.elapsed() > std::time::Duration::from_secs(60) {
                child.kill().unwrap();
                panic!("dep dcfg --check {} {} hangs", a.display(), b.display());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(2), "{err}");
        assert!(err.lines().count() == 1 && err.contains(what), "{err}");
    }
}

/// `dep record --compression fast` stores DEP_m packed without zstd (codec 2) and `small`
/// always compresses it; both profiles recover exactly their truth, and a 256 KiB gzip run
/// makes enough chunks that each mode's codec shows in every chunk.
#[test]
fn compression_modes_recover_exactly() {
    use dep_profile::container::{Codec, Profile, Section};
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let text: Vec<u8> = (0..256 << 10)
        .map(|_| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            b"abcdefgh ij\n"[(rng % 12) as usize]
        })
        .collect();
    std::fs::write(&input, text).unwrap();
    for (mode, want) in [("fast", Codec::Packed), ("small", Codec::PackedZstd)] {
        let p = dir.path().join(format!("{mode}.dep"));
        let o = run(Command::new(dep())
            .args(["record", "--truth", "--compression", mode, "-o"])
            .arg(&p)
            .args(["--", "gzip", "-c"])
            .arg(&input));
        assert!(o.status.success(), "{mode}: {}", String::from_utf8_lossy(&o.stderr));
        check_profile(&p);
        let profile = Profile::open(&p).unwrap();
        let mut chunks = 0;
        for c in profile.threads.iter().flat_map(|t| &t.chunks) {
            let v = profile.chunk(c).unwrap();
            if v.lens(Section::Values).0 > 0 {
                assert_eq!(v.codec(Section::Values), Ok(want), "{mode}");
                chunks += 1;
            }
        }
        assert!(chunks > 1, "{mode}: {chunks} chunks with DEP_m");
    }
}

/// The trace optimizer (collector/client/src/traces.rs) deletes the buffer and H-tag checks
/// of a trace's later blocks; `DEP_NO_TRACE_OPT` keeps them. Both ways the profile recovers
/// exactly its truth, on a hot loop that DynamoRIO turns into traces and that a 1 ms timer's
/// signals interrupt at arbitrary points (DynamoRIO rebuilds the optimized trace to
/// translate each).
#[test]
fn trace_optimizer_on_and_off_recover_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let prog = corpus().join("signal_loop");
    for off in [false, true] {
        let p = dir.path().join(format!("{off}.dep"));
        let mut cmd = Command::new(dep());
        cmd.args(["record", "--truth", "-o"]).arg(&p).args(["--"]).arg(&prog).arg("300");
        if off {
            cmd.env("DEP_NO_TRACE_OPT", "1");
        }
        let o = run(&mut cmd);
        assert!(o.status.success(), "off={off}: {}", String::from_utf8_lossy(&o.stderr));
        let (refs, blocks) = check_profile(&p);
        assert!(blocks > 100_000 && refs > 100_000, "off={off}: {blocks} blocks, {refs} references");
    }
}

/// A shadow-checked register's value is stored behind a jump where the flags are dead and
/// branchless elsewhere (collector/client/src/instrument.rs `step_values`); the trace
/// optimizer drops the jump's test, or the test and the store, where a trace knows the
/// shadow. `DEP_SHADOW_FORM` puts one form everywhere: `branch` also where drreg must save
/// live flags around it. Each way the profile recovers exactly its truth, on programs with
/// traces, a register recorded with one computed from it, signals inside traces, threads,
/// writable code, rep strings and vector registers.
#[test]
fn shadow_forms_recover_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let progs: [(&str, &[&str]); 8] = [
        ("longtrace", &[]),
        ("shadowroot", &[]),
        ("signal_loop", &["300"]),
        ("threads", &[]),
        ("rwx", &[]),
        ("repstring", &[]),
        ("avx", &[]),
        ("stack", &[]),
    ];
    for form in ["branch", "advance"] {
        for (name, args) in progs {
            recovers_exactly_with(dir.path(), name, args, ("DEP_SHADOW_FORM", form));
        }
    }
}

/// Records corpus program `name` with `--truth` and the environment variable `env` into
/// `dir`, and checks that it ran as natively and that its profile recovers exactly.
fn recovers_exactly_with(dir: &Path, name: &str, args: &[&str], env: (&str, &str)) {
    let p = dir.join(format!("{name}-{}.dep", env.1));
    let prog = corpus().join(name);
    let native = run(Command::new(&prog).args(args));
    let o = run(Command::new(dep()).args(["record", "--truth", "-o"]).arg(&p).arg("--").arg(&prog).args(args).env(env.0, env.1));
    let what = format!("{name} with {}={}", env.0, env.1);
    assert_eq!(o.status.code(), native.status.code(), "{what}: {}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&native.stdout), "{what}: stdout differs");
    let (refs, blocks) = check_profile(&p);
    assert!(blocks > 0 && refs > 0, "{what}: {blocks} blocks, {refs} references");
}

/// A block DynamoRIO builds outside a trace enters through one shared stub
/// (collector/client/src/stub.rs), a trace's blocks inline (as every other test records).
/// `DEP_ENTRY_FORM=inline` puts the inline entry everywhere, and the profile then recovers
/// exactly its truth too, on programs with signals, threads, writable code and rep strings.
/// Then python3 under a 0.5 ms interval timer: start-up runs about 900,000 cold blocks'
/// entries, so timer signals land inside the stub (outside the code cache, where DynamoRIO
/// delays them); the program must see 200 of them within two minutes and recover exactly.
#[test]
fn entry_forms_recover_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let progs: [(&str, &[&str]); 5] = [("signal_loop", &["300"]), ("threads", &[]), ("rwx", &[]), ("repstring", &[]), ("longtrace", &[])];
    for (name, args) in progs {
        recovers_exactly_with(dir.path(), name, args, ("DEP_ENTRY_FORM", "inline"));
    }
    // Counts its signals until it has had 200 (or two minutes passed: a lost signal fails
    // the test rather than hanging it), importing modules (new code) meanwhile.
    let script = "import signal, time\nn = 0\ndef on(s, f):\n    global n\n    n += 1\nsignal.signal(signal.SIGALRM, on)\n\
                  signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)\nimport json, decimal, fractions, email.parser, argparse\n\
                  end = time.monotonic() + 120\nwhile n < 200 and time.monotonic() < end:\n    sum(i * i for i in range(1000))\n\
                  signal.setitimer(signal.ITIMER_REAL, 0)\nprint('signals', n >= 200)\n";
    let p = dir.path().join("python3-timer.dep");
    let o = run(Command::new(dep()).args(["record", "--truth", "-o"]).arg(&p).arg("--").arg(system_python3()).args(["-c", script]));
    assert!(o.status.success(), "python3 under a timer: {}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "signals True\n");
    check_profile(&p);
}

/// A step that records a register and another computed from it in its block, through the
/// first one's shadow (corpora/shadowroot.c, the pattern of liblzma's that xz -T2 ran): the
/// path recording the first must leave its shadow as the step's later test reads it.
#[test]
fn a_register_and_one_computed_from_it_recorded_in_one_step() {
    corpus_check("shadowroot", &[]);
}
