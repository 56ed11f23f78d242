//! The symbolizer names functions and lines exactly as binutils does: `nm -C` for the
//! symbols, `addr2line -f -C` for the innermost function and file:line at every
//! instruction, objdump's `<name@plt>` for PLT stubs; on corpus programs built with -g.

use dep_dcfg_out::program::symbols::Symbolizer;
use dep_profile::container::ModuleEvent;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where the test pretends the program was loaded (a PIE's usual place).
const BASE: u64 = 0x5555_5555_4000;

fn build(dir: &Path, src: &str, compiler: &str) -> PathBuf {
    let out = dir.join(Path::new(src).file_stem().unwrap());
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpora").join(src);
    let st = Command::new(compiler).args(["-O2", "-g", "-o"]).arg(&out).arg(&src).status().expect("a C compiler");
    assert!(st.success(), "building {}", src.display());
    out
}

fn load(path: &Path, build_id: Option<String>) -> ModuleEvent {
    ModuleEvent {
        event: dep_profile::container::ModuleEventKind::Load,
        path: path.display().to_string(),
        base: BASE,
        size: 1 << 24,
        build_id,
        entry: None,
    }
}

fn output(cmd: &mut Command) -> String {
    let o = cmd.output().expect("binutils");
    assert!(o.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

/// Every instruction address of the text and PLT sections, and objdump's PLT stub names.
fn instructions(bin: &Path) -> (Vec<u64>, HashMap<u64, String>) {
    let text = output(Command::new("objdump").args(["-d", "-C", "--no-show-raw-insn"]).arg(bin));
    let (mut addrs, mut plt) = (Vec::new(), HashMap::new());
    let mut label: Option<String> = None;
    for line in text.lines() {
        if let Some((a, rest)) = line.split_once(" <") {
            if let Some(name) = rest.strip_suffix(">:") {
                label = Some(name.to_string());
                if name.ends_with("@plt") {
                    plt.insert(hex(a), name.to_string());
                }
                continue;
            }
        }
        if let Some((a, _)) = line.trim_start().split_once(':') {
            if line.starts_with("  ") && u64::from_str_radix(a, 16).is_ok() && label.is_some() {
                addrs.push(hex(a));
            }
        }
    }
    (addrs, plt)
}

/// `addr2line -f -C -e FILE` at each of `addrs`, in one process: two lines per address.
fn addr2line(file: &Path, addrs: &[u64]) -> String {
    let mut child = Command::new("addr2line")
        .args(["-f", "-C", "-e"])
        .arg(file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("addr2line");
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap();
    writer.join().unwrap().unwrap();
    assert_eq!(out.lines().count(), 2 * addrs.len());
    out
}

/// Compares with binutils; `inner_names`: also the innermost (inlined) function names at
/// every instruction. For C++ these differ where GNU addr2line names a split `.cold` part
/// by its symbol and where the demanglers differ (addr2line's cpp_demangle drops the first
/// parameter of some template constructors); files and lines are compared everywhere.
fn check(bin: &Path, inner_names: bool) {
    let syms = Symbolizer::new(&[load(bin, Some(readelf_build_id(bin)))]);
    let (addrs, plt) = instructions(bin);
    let text: std::collections::HashSet<u64> = addrs.iter().copied().collect();
    // nm -C: every defined text symbol.
    let nm = output(Command::new("nm").args(["-C", "--defined-only"]).arg(bin));
    let mut named = 0;
    let mut bad = Vec::new();
    for line in nm.lines() {
        let mut f = line.splitn(3, ' ');
        let (Some(a), Some(kind), Some(name)) = (f.next(), f.next(), f.next()) else { continue };
        // Functions: text symbols, and weak ones in the text (template instantiations).
        if !(matches!(kind, "T" | "t") || matches!(kind, "W" | "w") && text.contains(&hex(a))) {
            continue;
        }
        let got = syms.place(BASE + hex(a)).symbol;
        // Aliases at one address (nm lists each): any of them is the symbol's name.
        let aliases: Vec<&str> = nm
            .lines()
            .filter(|l| l.starts_with(a) && matches!(l.split(' ').nth(1), Some("T" | "t" | "W" | "w")))
            .map(|l| l.splitn(3, ' ').nth(2).unwrap())
            .collect();
        if !aliases.contains(&got.as_str()) {
            bad.push(format!("{a}: nm says {name:?}, we say {got:?}"));
        }
        named += 1;
    }
    assert!(named > 5, "{}: nm listed {named} functions", bin.display());

    // addr2line -f -C at every instruction, in one process.
    let out = addr2line(bin, &addrs);
    let lines: Vec<&str> = out.lines().collect();
    let (mut lined, mut padding) = (0, 0);
    for (a, pair) in addrs.iter().zip(lines.chunks(2)) {
        let p = syms.place(BASE + a);
        if let Some(name) = plt.get(a) {
            if &p.symbol != name {
                bad.push(format!("{a:#x}: objdump says {name}, we say {:?}", p.symbol));
            }
            continue;
        }
        let (func, loc) = (pair[0], pair[1].split(" (discriminator").next().unwrap());
        let (file, line) = loc.rsplit_once(':').unwrap();
        let want_line = line.parse::<u32>().ok().filter(|&l| l != 0);
        if want_line.is_none() {
            // No line (addr2line may still name the compilation unit's file): only the
            // function to compare. Alignment padding after a function's end (never run)
            // is named by offset, where binutils names it after the function before it:
            // a name comes only from a symbol covering the address.
            if !syms.covered(BASE + a) && p.symbol.contains('+') {
                padding += 1;
                continue;
            }
            if inner_names && func != "??" && p.function != func {
                bad.push(format!("{a:#x}: addr2line says {func}, we say {}", p.function));
            }
            continue;
        }
        lined += 1;
        if inner_names && func != "??" && p.function != func || p.file.as_deref() != Some(file) || p.line != want_line {
            bad.push(format!("{a:#x}: addr2line says {func} {loc}, we say {} {:?}:{:?}", p.function, p.file, p.line));
        }
    }
    assert!(lined > 50, "{}: only {lined} instructions with lines", bin.display());
    assert!(padding * 20 < addrs.len(), "{}: {padding} of {} instructions taken for padding", bin.display(), addrs.len());
    assert!(bad.is_empty(), "{}: {} differences, first:\n{}", bin.display(), bad.len(), bad[..bad.len().min(15)].join("\n"));
    assert!(syms.warnings().is_empty(), "{:?}", syms.warnings());
}

#[test]
fn names_and_lines_as_binutils_gives_them() {
    let dir = tempfile::tempdir().unwrap();
    check(&build(dir.path(), "hello.c", "gcc"), true);
    check(&build(dir.path(), "exceptions.cpp", "g++"), false);
}

#[test]
fn plt_stubs_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let bin = build(dir.path(), "hello.c", "gcc");
    let (_, plt) = instructions(&bin);
    assert!(plt.len() > 3, "objdump shows {} PLT stubs", plt.len());
    let syms = Symbolizer::new(&[load(&bin, None)]);
    for (a, name) in &plt {
        assert_eq!(&syms.place(BASE + a + 4).symbol, name);
    }
}

/// A missing file or another build gives offsets and one warning, never a wrong name.
#[test]
fn unreadable_or_different_modules_are_named_by_offset() {
    let dir = tempfile::tempdir().unwrap();
    let bin = build(dir.path(), "hello.c", "gcc");
    let other = load(&bin, Some("00112233".into()));
    let missing = ModuleEvent { base: BASE + (1 << 24), path: "/no/such/libx.so".into(), ..load(&bin, None) };
    let syms = Symbolizer::new(&[other, missing]);
    for _ in 0..3 {
        assert_eq!(syms.place(BASE + 0x1234).symbol, "hello+0x1234");
        assert_eq!(syms.place(BASE + (1 << 24) + 0x10).symbol, "libx.so+0x10");
    }
    let w = syms.warnings();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w[0].contains("build id") && w[1].contains("/no/such/libx.so"), "{w:?}");
    let jit = syms.place(0x7000_0000_0000);
    assert_eq!((jit.symbol.as_str(), jit.module), ("[jit]", None));
}

/// `f` on another thread, failing (not hanging) if it takes longer than a minute.
fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(60)).expect("hung on a file the profile named")
}

/// The build id `readelf -n` gives for `bin`.
fn readelf_build_id(bin: &Path) -> String {
    let notes = output(Command::new("readelf").arg("-n").arg(bin));
    let line = notes.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).expect("a build id note");
    line.trim().to_string()
}

/// A profile is untrusted: a module event naming a device, a FIFO or a directory gives
/// offsets and one warning naming the module and what it is, without blocking or reading
/// without end.
#[test]
fn devices_fifos_and_directories_are_refused_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("libfifo.so");
    let st = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(st.success());
    let cases = [
        ("/dev/zero".to_string(), "character device"),
        (fifo.display().to_string(), "FIFO"),
        (dir.path().display().to_string(), "directory"),
    ];
    for (path, kind) in cases {
        let got = within_a_minute({
            let path = path.clone();
            move || {
                let syms = Symbolizer::new(&[ModuleEvent { path, ..load(Path::new("/"), Some("00".into())) }]);
                (syms.place(BASE + 0x10).symbol, syms.variable(BASE + 0x10), syms.warnings())
            }
        });
        let short = Path::new(&path).file_name().unwrap().to_str().unwrap().to_string();
        assert_eq!(got.0, format!("{short}+0x10"), "{path}");
        assert_eq!(got.1, None);
        assert_eq!(got.2.len(), 1, "{:?}", got.2);
        assert!(got.2[0].contains(&path) && got.2[0].contains(kind), "{:?}", got.2);
    }
}

/// A module whose recorded build id is missing is still read, with one warning naming it
/// (nothing says the file is the one that ran); the right build id gives no warning.
#[test]
fn a_missing_build_id_is_one_warning() {
    let dir = tempfile::tempdir().unwrap();
    let bin = build(dir.path(), "hello.c", "gcc");
    let syms = Symbolizer::new(&[load(&bin, None)]);
    let main = output(Command::new("nm").arg(&bin)).lines().find_map(|l| l.strip_suffix(" T main").map(hex)).expect("main");
    assert_eq!(syms.symbol(BASE + main), "main");
    assert_eq!(syms.symbol(BASE + main), "main");
    let w = syms.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains(&bin.display().to_string()) && w[0].contains("no build id"), "{w:?}");
    let syms = Symbolizer::new(&[load(&bin, Some(readelf_build_id(&bin)))]);
    assert_eq!(syms.symbol(BASE + main), "main");
    assert!(syms.warnings().is_empty(), "{:?}", syms.warnings());
}

/// Where `nm -S` says symbol `name` of `bin` starts, and its size.
fn nm_sized(bin: &Path, name: &str) -> (u64, u64) {
    let nm = output(Command::new("nm").args(["-S", "--defined-only"]).arg(bin));
    nm.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() == 4 && f[3] == name).then(|| (hex(f[0]), hex(f[1])))
        })
        .unwrap_or_else(|| panic!("{name} in nm"))
}

/// `symbol` at every address from `from` up to `to` (file addresses), one name each.
fn names(syms: &Symbolizer, from: u64, to: u64) -> std::collections::BTreeSet<String> {
    (from..to).map(|a| syms.symbol(BASE + a)).collect()
}

/// A stripped program's debug file is found where gdb looks: beside it through
/// `.gnu_debuglink`, in `.debug/`, under a debug directory by the program's directory and
/// by build id, and in the debuginfod cache; one with another CRC or build id is not used.
/// With none, a static function's code gets one name, from its `.eh_frame` extent.
#[test]
fn separate_debug_files_are_found_as_gdb_finds_them() {
    let dir = tempfile::tempdir().unwrap();
    let full = build(dir.path(), "hello.c", "gcc");
    // cmp_item: static, so only the symbol table (stripped away) and DWARF name it.
    let (start, size) = nm_sized(&full, "cmp_item");
    let id = readelf_build_id(&full);
    let split = |at: &Path, debug_name: &str| -> PathBuf {
        std::fs::create_dir_all(at).unwrap();
        let debug = dir.path().join(debug_name);
        output(Command::new("objcopy").arg("--only-keep-debug").arg(&full).arg(&debug));
        let stripped = at.join("hello");
        output(Command::new("strip").arg("--strip-all").arg("-o").arg(&stripped).arg(&full));
        output(Command::new("objcopy").arg(format!("--add-gnu-debuglink={}", debug.display())).arg(&stripped));
        stripped
    };
    let named = |bin: &Path, dirs: &[PathBuf]| -> (std::collections::BTreeSet<String>, Option<String>) {
        let syms = Symbolizer::new(&[load(bin, Some(id.clone()))]).with_debug_dirs(dirs);
        (names(&syms, start, start + size), syms.place(BASE + start + 4).file)
    };
    let want: std::collections::BTreeSet<String> = ["cmp_item".to_string()].into();
    let has_line = |f: Option<String>| f.is_some_and(|f| f.ends_with("hello.c"));

    // Nothing to find: one name for the function, from its FDE (it starts at cmp_item).
    let bin = split(&dir.path().join("bare"), "hello.debug");
    std::fs::remove_file(dir.path().join("hello.debug")).unwrap();
    let (got, file) = named(&bin, &[]);
    assert_eq!(got, [format!("hello+{start:#x}")].into(), "named by its extent");
    assert!(file.is_none());
    let syms = Symbolizer::new(&[load(&bin, Some(id.clone()))]);
    assert!(syms.is_function_start(BASE + start) && !syms.is_function_start(BASE + start + 1));

    // Beside the program (the link's own name), and in its .debug/ directory.
    let beside = dir.path().join("beside");
    let bin = split(&beside, "hello.debug");
    std::fs::rename(dir.path().join("hello.debug"), beside.join("hello.debug")).unwrap();
    let (got, file) = named(&bin, &[]);
    assert_eq!(got, want, "beside");
    assert!(has_line(file));
    let dotdebug = dir.path().join("dotdebug");
    let bin = split(&dotdebug, "hello.debug");
    std::fs::create_dir_all(dotdebug.join(".debug")).unwrap();
    std::fs::rename(dir.path().join("hello.debug"), dotdebug.join(".debug/hello.debug")).unwrap();
    assert_eq!(named(&bin, &[]).0, want, ".debug/");

    // Under a debug directory, by the program's directory, and by build id.
    let global = dir.path().join("global");
    let bin = split(&global, "hello.debug");
    let under = dir.path().join("dbg").join(global.strip_prefix("/").unwrap());
    std::fs::create_dir_all(&under).unwrap();
    std::fs::rename(dir.path().join("hello.debug"), under.join("hello.debug")).unwrap();
    assert_eq!(named(&bin, &[]).0.len(), 1);
    assert_ne!(named(&bin, &[]).0, want, "not searched without --debug-dir");
    assert_eq!(named(&bin, &[dir.path().join("dbg")]).0, want, "debug dir by path");
    let byid = dir.path().join("byid");
    let bin = split(&byid, "other-name.debug");
    let idpath = dir.path().join("ids/.build-id").join(&id[..2]);
    std::fs::create_dir_all(&idpath).unwrap();
    std::fs::rename(dir.path().join("other-name.debug"), idpath.join(format!("{}.debug", &id[2..]))).unwrap();
    let (got, file) = named(&bin, &[dir.path().join("ids")]);
    assert_eq!(got, want, "by build id");
    assert!(has_line(file));

    // The debuginfod client's cache (only this test sets the variable).
    let cached = dir.path().join("cached");
    let bin = split(&cached, "x.debug");
    std::fs::create_dir_all(dir.path().join("cache").join(&id)).unwrap();
    std::fs::rename(dir.path().join("x.debug"), dir.path().join("cache").join(&id).join("debuginfo")).unwrap();
    std::env::set_var("DEBUGINFOD_CACHE_PATH", dir.path().join("cache"));
    assert_eq!(named(&bin, &[]).0, want, "debuginfod cache");
    std::env::remove_var("DEBUGINFOD_CACHE_PATH");

    // Another build's debug file where the link points: its CRC differs, so it is not used.
    let stale = dir.path().join("stale");
    let bin = split(&stale, "hello.debug");
    std::fs::remove_file(dir.path().join("hello.debug")).unwrap();
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let st = Command::new("gcc")
        .args(["-O1", "-g", "-o"])
        .arg(other.join("hello"))
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpora/hello.c"))
        .status()
        .unwrap();
    assert!(st.success());
    output(Command::new("objcopy").arg("--only-keep-debug").arg(other.join("hello")).arg(stale.join("hello.debug")));
    let (got, file) = named(&bin, &[]);
    assert_ne!(got, want, "another build's debug file named it");
    assert!(file.is_none());
}

/// libc, stripped as distributions ship it, named from its debug file (libc6-dbg, which
/// scripts/setup.sh installs) as gdb's `info symbol` and `addr2line -f -C` on the debug
/// file name it, at the middle of every 25th function.
#[test]
fn libc_is_named_as_gdb_and_addr2line_name_it() {
    let libc = Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6");
    let id = readelf_build_id(libc);
    let debug = PathBuf::from(format!("/usr/lib/debug/.build-id/{}/{}.debug", &id[..2], &id[2..]));
    assert!(debug.exists(), "{} missing: install libc6-dbg (scripts/setup.sh does)", debug.display());
    let nm = output(Command::new("nm").args(["-S", "--defined-only"]).arg(&debug));
    let addrs: Vec<u64> = nm
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() == 4 && matches!(f[2], "t" | "T") && hex(f[1]) > 1).then(|| hex(f[0]) + hex(f[1]) / 2)
        })
        .step_by(25)
        .collect();
    assert!(addrs.len() > 100, "{} functions", addrs.len());
    let syms = Symbolizer::new(&[ModuleEvent { size: 1 << 30, ..load(libc, Some(id)) }]);

    // Names at each address (aliases: `open` and `open64`), versions aside: gdb and
    // Valgrind choose among them differently, and dep chooses as Valgrind does.
    let mut aliases: HashMap<u64, Vec<String>> = HashMap::new();
    let dynamic = output(Command::new("nm").args(["-D", "--defined-only"]).arg(libc));
    for l in nm.lines().chain(dynamic.lines()) {
        let f: Vec<&str> = l.split(' ').collect();
        if f.len() >= 3 {
            let name = f[f.len() - 1].split('@').next().unwrap().to_string();
            aliases.entry(hex(f[0])).or_default().push(name);
        }
    }
    let starts: Vec<u64> = {
        let mut s: Vec<u64> = aliases.keys().copied().collect();
        s.sort_unstable();
        s
    };
    // gdb: `NAME + OFFSET in section .text of FILE`; gdb drops a clone's `.N` suffix
    // (`msort_with_tmp.part.0` is `msort_with_tmp.part`).
    let mut gdb = Command::new("gdb");
    gdb.args(["-batch", "-nx"]);
    for a in &addrs {
        gdb.arg("-ex").arg(format!("info symbol {a:#x}"));
    }
    let said = output(gdb.arg(libc));
    let said: Vec<&str> = said.lines().filter(|l| l.contains(" in section ")).collect();
    assert_eq!(said.len(), addrs.len(), "gdb answered {} of {}", said.len(), addrs.len());
    let mut bad = Vec::new();
    for (a, line) in addrs.iter().zip(&said) {
        let name = line.split(" in section ").next().unwrap();
        let name = name.rsplit_once(" + ").map_or(name, |(n, _)| n);
        let cold = name.strip_suffix("[cold]").map(|n| format!("{n}.cold"));
        let name = cold.as_deref().unwrap_or(name);
        let ours = syms.symbol(BASE + a);
        let ours = ours.split('@').next().unwrap();
        let clone = ours.rsplit_once('.').is_some_and(|(stem, n)| stem == name && n.chars().all(|c| c.is_ascii_digit()));
        let start = starts[starts.partition_point(|s| s <= a) - 1];
        let alias = aliases[&start].iter().any(|n| n == name) && aliases[&start].iter().any(|n| n == ours);
        if ours != name && !clone && !alias {
            bad.push(format!("{a:#x}: gdb says {name}, we say {ours}"));
        }
    }

    // addr2line on the debug file: the innermost function and file:line. binutils joins a
    // DWARF 5 line table's directory 0 to the compilation directory it already is
    // (`./stdlib/./stdlib/msort.c`); dep reads it as the standard and gdb do. Where the
    // line comes from a file the unit includes (`#include "XXX-lookup.c"`), binutils 2.40
    // names the unit's own file: there gdb's `info line` is asked instead.
    let out = addr2line(&debug, &addrs);
    let lines: Vec<&str> = out.lines().collect();
    let (mut lined, mut ask_gdb) = (0, Vec::new());
    for (a, pair) in addrs.iter().zip(lines.chunks(2)) {
        let p = syms.place(BASE + a);
        let loc = pair[1].split(" (discriminator").next().unwrap();
        let (file, line) = loc.rsplit_once(':').unwrap();
        let Some(line) = line.parse::<u32>().ok().filter(|&l| l != 0) else { continue };
        lined += 1;
        let ours = p.file.clone().unwrap_or_default();
        let same = file == ours
            || file.strip_suffix(ours.as_str()).and_then(|d| d.strip_suffix('/')).is_some_and(|d| ours.starts_with(&format!("{d}/")));
        if !same && pair[0] == p.function && p.line == Some(line) {
            ask_gdb.push((*a, ours));
            continue;
        }
        if pair[0] != "??" && p.function != pair[0] || !same || p.line != Some(line) {
            bad.push(format!("{a:#x}: addr2line says {} {loc}, we say {} {:?}:{:?}", pair[0], p.function, p.file, p.line));
        }
    }
    assert!(lined * 2 > addrs.len(), "only {lined} of {} addresses have lines", addrs.len());
    assert!(ask_gdb.len() * 10 < lined, "{} of {lined} files differ from addr2line's", ask_gdb.len());
    if !ask_gdb.is_empty() {
        let mut gdb = Command::new("gdb");
        gdb.args(["-batch", "-nx"]);
        for (a, _) in &ask_gdb {
            gdb.arg("-ex").arg(format!("info line *{a:#x}"));
        }
        let said = output(gdb.arg(libc));
        let files: Vec<&str> = said.lines().filter_map(|l| l.split('"').nth(1)).collect();
        assert_eq!(files.len(), ask_gdb.len(), "gdb: {said}");
        for ((a, ours), gdb) in ask_gdb.iter().zip(files) {
            if ours != gdb && !ours.ends_with(&format!("/{gdb}")) {
                bad.push(format!("{a:#x}: gdb says {gdb}, we say {ours}"));
            }
        }
    }
    assert!(bad.is_empty(), "{} differences, first:\n{}", bad.len(), bad[..bad.len().min(15)].join("\n"));
}

/// A debug file that dwz split (`dwz -m`: what several debug files share moved to a
/// supplementary file their `.gnu_debugaltlink` names, by path and build id) gives the
/// functions and lines addr2line gives on the program before dwz: with the supplementary
/// file at its path, and, that path gone, found by its build id under a debug directory.
#[test]
fn dwz_supplementary_files_are_read() {
    let dir = tempfile::tempdir().unwrap();
    // Two builds of one source (the second with a macro nothing reads): dwz moves what they
    // share, the functions' DIEs included, to the supplementary file.
    let a = build(dir.path(), "hello.c", "gcc");
    let b = dir.path().join("hello2");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpora/hello.c");
    output(Command::new("gcc").args(["-O2", "-g", "-DSECOND_BUILD", "-o"]).arg(&b).arg(&src));
    // The oracle: addr2line on the program before dwz (dwz changes no code, and binutils
    // 2.40 does not follow all that dwz refers to the supplementary file).
    let full = dir.path().join("hello.full");
    std::fs::copy(&a, &full).unwrap();
    let common = dir.path().join("common.debug");
    let o = Command::new("dwz")
        .arg("-m")
        .arg(&common)
        .arg("-M")
        .arg(&common)
        .arg(&a)
        .arg(&b)
        .output()
        .expect("dwz (scripts/setup.sh installs it)");
    assert!(o.status.success(), "dwz: {}", String::from_utf8_lossy(&o.stderr));
    assert!(output(Command::new("readelf").arg("-S").arg(&a)).contains(".gnu_debugaltlink"), "dwz left a whole");
    let id = readelf_build_id(&a);
    let ids = dir.path().join("ids/.build-id");
    std::fs::create_dir_all(ids.join(&id[..2])).unwrap();
    output(Command::new("objcopy").arg("--only-keep-debug").arg(&a).arg(ids.join(&id[..2]).join(format!("{}.debug", &id[2..]))));
    output(Command::new("strip").arg("--strip-all").arg(&a));
    // Lines of main's instructions, as addr2line reads the program before dwz.
    let (addrs, _) = instructions(&full);
    let (start, size) = nm_sized(&full, "main");
    let main: Vec<u64> = addrs.into_iter().filter(|a| (start..start + size).contains(a)).collect();
    let want = addr2line(&full, &main);
    // (function, line) per instruction: the functions inlined into main are named by DIEs
    // dwz moved to the supplementary file.
    let want: Vec<(String, Option<u32>)> = want
        .lines()
        .collect::<Vec<_>>()
        .chunks(2)
        .map(|p| (p[0].to_string(), p[1].split(" (").next().unwrap().rsplit(':').next().unwrap().parse().ok().filter(|&l| l != 0)))
        .collect();
    assert!(want.iter().filter(|l| l.1.is_some()).count() > 10, "addr2line found few lines in main");
    assert!(want.iter().any(|l| l.0 == "fnv"), "fnv not inlined into main");
    let lines = |dirs: &[PathBuf]| -> Vec<(String, Option<u32>)> {
        let syms = Symbolizer::new(&[load(&a, Some(id.clone()))]).with_debug_dirs(dirs);
        assert_eq!(syms.symbol(BASE + start), "main");
        main.iter().map(|&pc| syms.place(BASE + pc)).map(|p| (p.function, p.line)).collect()
    };
    // Where addr2line names no function (`??`), only the line is compared.
    let agree = |got: Vec<(String, Option<u32>)>| -> bool {
        got.iter().zip(&want).all(|(g, w)| g.1 == w.1 && (w.0 == "??" || g.0 == w.0)) && got.len() == want.len()
    };
    let dirs = [dir.path().join("ids")];
    assert!(agree(lines(&dirs)), "the supplementary file at its path: {:?}", lines(&dirs));
    // The path gone: the supplementary file by its build id.
    let alt = readelf_build_id(&common);
    std::fs::rename(&common, ids.join(&alt[..2]).join(format!("{}.debug", &alt[2..]))).unwrap_or_else(|_| {
        std::fs::create_dir_all(ids.join(&alt[..2])).unwrap();
        std::fs::rename(&common, ids.join(&alt[..2]).join(format!("{}.debug", &alt[2..]))).unwrap()
    });
    assert!(agree(lines(&dirs)), "the supplementary file by build id: {:?}", lines(&dirs));
}
