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
    let mut child = Command::new("addr2line")
        .args(["-f", "-C", "-e"])
        .arg(bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("addr2line");
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap();
    writer.join().unwrap().unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2 * addrs.len());
    let mut lined = 0;
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
            // function to compare.
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
