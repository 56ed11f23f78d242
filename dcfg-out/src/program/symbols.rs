//! Names for code addresses: the function (demangled) and the source line, from each
//! module's ELF symbol tables, its PLT and its DWARF (through addr2line), and from its
//! separate debug file where the module is stripped (debug_file.rs), checked against the
//! build id the profile recorded. A name comes only from a symbol that covers the address;
//! code no symbol covers is named after the DWARF subprogram holding it, else after the
//! `.eh_frame` extent (one name per function, `module+0xstart`), else by its own offset. A
//! module that cannot be read, or whose build id differs, gives `module+0xoffset` names and
//! one warning, never a wrong name; code outside every module (JIT code) is `[jit]`. Each
//! module is read once, on first use.

use crate::program::debug_file::{self, DebugDirs};
use crate::program::module_file::ModuleFile;
use dep_profile::container::ModuleEvent;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, ObjectSymbolTable};
use std::borrow::Cow;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Where an address is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// The module's path, or None outside every module.
    pub module: Option<String>,
    /// The symbol (the routine, as `nm` names it): a demangled name, `name@plt`,
    /// `module+0xoffset` where the module gives none, or `[jit]`.
    pub symbol: String,
    /// Where the symbol's function starts (run-time address; see [`Symbolizer::function`]).
    pub start: u64,
    /// The innermost function, an inlined one where DWARF says so (as `addr2line -f` names
    /// it); the symbol where DWARF has none.
    pub function: String,
    /// Source file and line, where DWARF has them.
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// Symbols of the modules of one process.
pub struct Symbolizer {
    /// Sorted by base; later loads at the same base replace earlier ones.
    modules: Vec<Module>,
    warnings: Mutex<Vec<String>>,
    debug_dirs: DebugDirs,
    /// CPU time spent answering, in nanoseconds, summed over the threads that asked.
    busy: AtomicU64,
}

/// Adds the time from its making to its drop to a counter.
struct Clock<'a>(&'a AtomicU64, Instant);

impl Drop for Clock<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(self.1.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }
}

struct Module {
    path: String,
    base: u64,
    size: u64,
    build_id: Option<String>,
    file: OnceLock<Option<File>>,
}

/// What was read of a module's file.
struct File {
    /// The file, mapped and checked against the recorded build id.
    module: ModuleFile,
    /// Subtracted from a run-time address to give the file's virtual address.
    bias: u64,
    /// None for an image in memory without a debug file (the vDSO).
    dwarf: Option<Mutex<addr2line::Loader>>,
    /// PLT stubs: (start, end, name@plt), file addresses, sorted.
    plt: Vec<(u64, u64, String)>,
    /// Function symbols of the module and its debug file (static and dynamic).
    functions: Functions,
    /// The `.eh_frame` FDEs' address ranges: (start, end), file addresses, sorted. Present
    /// in stripped files, they give the extent of functions no symbol names.
    extents: Vec<(u64, u64)>,
    /// Data symbols (variables) with a size: (address, size, demangled name), sorted.
    objects: Vec<(u64, u64, String)>,
    /// Executable sections' bytes: (file address, bytes), sorted.
    text: Vec<(u64, Vec<u8>)>,
    /// The PLT sections (.plt, .plt.sec, .plt.got): file address ranges.
    plt_sections: Vec<(u64, u64)>,
}

impl Symbolizer {
    /// The modules a profile recorded (load events; an unload is ignored, since a later
    /// load at the same place replaces it).
    pub fn new(events: &[ModuleEvent]) -> Symbolizer {
        // The last load at each base (a sort and one pass, however many events a profile holds).
        let mut loads: Vec<(usize, &ModuleEvent)> =
            events.iter().filter(|e| e.event == dep_profile::container::ModuleEventKind::Load && e.size > 0).enumerate().collect();
        loads.sort_by_key(|&(i, e)| (e.base, std::cmp::Reverse(i)));
        loads.dedup_by_key(|(_, e)| e.base);
        let modules: Vec<Module> = loads
            .into_iter()
            .map(|(_, e)| Module { path: e.path.clone(), base: e.base, size: e.size, build_id: e.build_id.clone(), file: OnceLock::new() })
            .collect();
        Symbolizer { modules, warnings: Mutex::new(Vec::new()), debug_dirs: DebugDirs::default(), busy: AtomicU64::new(0) }
    }

    /// Looks for separate debug files in `dirs` (in order, then the default directory).
    pub fn with_debug_dirs(mut self, dirs: &[std::path::PathBuf]) -> Symbolizer {
        self.debug_dirs = DebugDirs::with(dirs);
        self
    }

    /// The time spent naming so far (reading modules and debug files included), summed
    /// over the threads that asked: what naming costs an output.
    pub fn busy(&self) -> Duration {
        Duration::from_nanos(self.busy.load(Ordering::Relaxed))
    }

    fn clock(&self) -> Clock<'_> {
        Clock(&self.busy, Instant::now())
    }

    /// One line for each module that could not be read or is not the one recorded.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.lock().map(|w| w.clone()).unwrap_or_default()
    }

    fn module(&self, addr: u64) -> Option<&Module> {
        let i = self.modules.partition_point(|m| m.base <= addr);
        let m = self.modules.get(i.checked_sub(1)?)?;
        (addr - m.base < m.size).then_some(m)
    }

    /// The function symbols of the module loaded at `base`, as (name, offset from the base,
    /// size), sorted by offset; empty where the module cannot be read.
    pub fn module_symbols(&self, base: u64) -> Vec<(String, u64, u64)> {
        let _clock = self.clock();
        let Ok(i) = self.modules.binary_search_by_key(&base, |m| m.base) else { return Vec::new() };
        let m = &self.modules[i];
        let Some(file) = m.file.get_or_init(|| self.open(m)) else { return Vec::new() };
        file.functions
            .entries
            .iter()
            .map(|f| (f.name.clone(), f.start.wrapping_add(file.bias).wrapping_sub(m.base), f.size))
            .filter(|(_, off, _)| *off < m.size)
            .collect()
    }

    /// The symbol (routine) `addr` is in, from the symbol tables alone: cheaper than
    /// [`place`](Self::place), which also reads DWARF.
    pub fn symbol(&self, addr: u64) -> String {
        let _clock = self.clock();
        self.symbol_in(addr).2
    }

    /// The symbol `addr` is in and where that function starts (run-time address): two
    /// static functions of one name (in two source files) are two functions. Code no
    /// symbol covers starts at its extent, or at `addr` itself.
    pub fn function(&self, addr: u64) -> (String, u64) {
        let _clock = self.clock();
        let (_, _, name, _, start) = self.symbol_in(addr);
        (name, start)
    }

    /// The module holding `addr`, its file if readable, the symbol naming `addr`, whether
    /// a symbol (or a PLT stub) names it rather than its module and offset, and where the
    /// named function (or extent) starts.
    fn symbol_in(&self, addr: u64) -> (Option<&Module>, Option<&File>, String, bool, u64) {
        let Some(m) = self.module(addr) else { return (None, None, "[jit]".into(), false, 0) };
        let fallback = || format!("{}+{:#x}", short(&m.path), addr - m.base);
        let Some(file) = m.file.get_or_init(|| self.open(m)) else { return (Some(m), None, fallback(), false, addr) };
        let probe = addr.wrapping_sub(file.bias);
        if let Some((start, name)) = file.plt_stub(probe) {
            return (Some(m), Some(file), name.to_string(), true, start.wrapping_add(file.bias));
        }
        if let Some(f) = file.functions.covering(probe) {
            return (Some(m), Some(file), f.name.clone(), true, f.start.wrapping_add(file.bias));
        }
        // No symbol: the function DWARF says holds it, else its extent, else itself.
        let extent = file.extent(probe).map(|(start, _)| start.wrapping_add(file.bias));
        if let Some(name) = file.subprogram(probe) {
            return (Some(m), Some(file), name, false, extent.unwrap_or(0));
        }
        match extent {
            Some(start) => (Some(m), Some(file), format!("{}+{:#x}", short(&m.path), start.wrapping_sub(m.base)), false, start),
            None => (Some(m), Some(file), fallback(), false, addr),
        }
    }

    /// The readable module file holding `addr`, and `addr` as that file's address.
    fn file_at(&self, addr: u64) -> Option<(&File, u64)> {
        let m = self.module(addr)?;
        let file = m.file.get_or_init(|| self.open(m)).as_ref()?;
        Some((file, addr.wrapping_sub(file.bias)))
    }

    /// The variable (data symbol) holding `addr` and the offset into it, as `nm -S` lists
    /// them; None outside every sized data symbol.
    pub fn variable(&self, addr: u64) -> Option<(String, u64)> {
        let _clock = self.clock();
        let (file, probe) = self.file_at(addr)?;
        let i = file.objects.partition_point(|(a, _, _)| *a <= probe).checked_sub(1)?;
        let (a, size, name) = &file.objects[i];
        (probe < a + size).then(|| (name.clone(), probe - a))
    }

    /// The run-time address and size of the variable named `name`, in the first module
    /// (by load address) that defines it.
    pub fn find_variable(&self, name: &str) -> Option<(u64, u64)> {
        self.modules.iter().find_map(|m| {
            let file = m.file.get_or_init(|| self.open(m)).as_ref()?;
            let (a, size, _) = file.objects.iter().find(|(_, _, n)| n == name)?;
            Some((a.wrapping_add(file.bias), *size))
        })
    }

    /// The module holding `addr`: its path, and what to subtract from a run-time address to
    /// get the file's virtual address (the load base where the file cannot be read).
    pub fn object(&self, addr: u64) -> Option<(&str, u64)> {
        let m = self.module(addr)?;
        let bias = m.file.get_or_init(|| self.open(m)).as_ref().map_or(m.base, |f| f.bias);
        Some((m.path.as_str(), bias))
    }

    /// The module holding `addr`: its path and its file's bytes, where the file could be
    /// read and is the build recorded.
    pub fn module_file(&self, addr: u64) -> Option<(&str, &[u8])> {
        let m = self.module(addr)?;
        let file = m.file.get_or_init(|| self.open(m)).as_ref()?;
        Some((m.path.as_str(), file.module.bytes()))
    }

    /// Whether a symbol (or a PLT stub) names `addr`, rather than DWARF, its extent or its
    /// module and offset.
    pub fn covered(&self, addr: u64) -> bool {
        let _clock = self.clock();
        self.symbol_in(addr).3
    }

    /// Whether `addr` is in a PLT section (stubs, and the lazy binder's first entry).
    pub fn in_plt(&self, addr: u64) -> bool {
        let _clock = self.clock();
        self.file_at(addr).is_some_and(|(file, probe)| file.plt_sections.iter().any(|&(a, b)| (a..b).contains(&probe)))
    }

    /// Whether a function symbol (or a PLT stub) starts exactly at `addr`, or, where no
    /// symbol covers it, an `.eh_frame` extent does.
    pub fn is_function_start(&self, addr: u64) -> bool {
        let _clock = self.clock();
        self.file_at(addr).is_some_and(|(file, probe)| {
            file.functions.starts_at(probe)
                || file.plt.binary_search_by_key(&probe, |p| p.0).is_ok()
                || (file.functions.covering(probe).is_none() && file.extents.binary_search_by_key(&probe, |e| e.0).is_ok())
        })
    }

    /// The module file's code from run-time address `addr` to the end of its executable
    /// section: for decoding code the run never reached (what ran is in the profile).
    pub fn code(&self, addr: u64) -> Option<&[u8]> {
        let (file, probe) = self.file_at(addr)?;
        let i = file.text.partition_point(|(a, _)| *a <= probe).checked_sub(1)?;
        let (start, bytes) = &file.text[i];
        bytes.get((probe - start) as usize..).filter(|b| !b.is_empty())
    }

    /// Where each of `addrs` is ([`place`](Self::place)), looked up on all cores.
    pub fn places(&self, addrs: &[u64]) -> Vec<Place> {
        on_all_cores(addrs, |a| self.place(a))
    }

    /// Where `addr` is: function and, with DWARF, file and line.
    pub fn place(&self, addr: u64) -> Place {
        let _clock = self.clock();
        let (m, file, symbol, _, start) = self.symbol_in(addr);
        let mut place =
            Place { module: m.map(|m| m.path.clone()), symbol: symbol.clone(), start, function: symbol, file: None, line: None };
        let Some(file) = file else { return place };
        let probe = addr.wrapping_sub(file.bias);
        if file.plt_stub(probe).is_some() {
            return place;
        }
        let Some(Ok(dwarf)) = file.dwarf.as_ref().map(Mutex::lock) else { return place };
        place.function = String::new();
        // The innermost frame, as `addr2line -f` names it: the inlined function if any.
        if let Ok(mut frames) = dwarf.find_frames(probe) {
            if let Ok(Some(frame)) = frames.next() {
                if let Some(f) = frame.function.as_ref().and_then(|f| f.demangle().ok()) {
                    place.function = f.into_owned();
                }
                if let Some(loc) = frame.location {
                    place.file = loc.file.map(str::to_string);
                    place.line = loc.line;
                }
            }
        }
        if place.file.is_none() {
            if let Ok(Some(loc)) = dwarf.find_location(probe) {
                place.file = loc.file.map(str::to_string);
                place.line = loc.line;
            }
        }
        if place.function.is_empty() {
            place.function = place.symbol.clone();
        }
        place
    }

    fn warn(&self, msg: String) {
        if let Ok(mut w) = self.warnings.lock() {
            w.push(msg);
        }
    }

    /// Reads a module's file, or says why not (once).
    fn open(&self, m: &Module) -> Option<File> {
        match read(m, &self.debug_dirs) {
            Ok(f) => {
                if f.module.unchecked {
                    self.warn(format!("{}: the profile recorded no build id, so its names may come from another build", m.path));
                }
                Some(f)
            }
            Err(why) => {
                self.warn(format!("{}: {why}; its code is named by offset", m.path));
                None
            }
        }
    }
}

/// `f` of each of `addrs`, in order, computed on all cores (symbol lookups read DWARF
/// and are worth spreading).
pub fn on_all_cores<T: Send>(addrs: &[u64], f: impl Fn(u64) -> T + Sync) -> Vec<T> {
    let workers = std::thread::available_parallelism().map_or(1, |w| w.get());
    let per = addrs.len().div_ceil(workers).max(1);
    let f = &f;
    std::thread::scope(|s| {
        let parts: Vec<_> = addrs.chunks(per).map(|part| s.spawn(move || part.iter().map(|&a| f(a)).collect::<Vec<T>>())).collect();
        parts.into_iter().flat_map(|h| h.join().expect("symbolizer thread panicked")).collect()
    })
}

/// A function symbol: where it starts, its size as the symbol table gives it, and the end
/// of what it covers (its size; for a symbol of size 0, up to the next symbol within the
/// `.eh_frame` extent holding it).
pub struct Function {
    pub start: u64,
    pub size: u64,
    end: u64,
    pub name: String,
}

/// Function symbols by address, with what each covers.
#[derive(Default)]
struct Functions {
    /// Sorted by start; one per address.
    entries: Vec<Function>,
    /// The largest end of the entries up to each index: a lookup looks back no further
    /// than an entry that could still cover the address (symbols may nest).
    reach: Vec<u64>,
}

impl Functions {
    /// The table of `symbols` (address, size, demangled name), any order, several names at
    /// one address allowed; `extents` (sorted FDE ranges) bound symbols of size 0.
    /// `sections` (sorted executable section ranges) bound the last of them.
    fn new(mut symbols: Vec<(u64, u64, String)>, extents: &[(u64, u64)], sections: &[(u64, u64)]) -> Functions {
        // One name per address, as Valgrind picks it: a sized symbol, then the fewest
        // leading underscores, the shortest name, the default version, the first in order
        // (so `malloc` over `__libc_malloc`); the address covers as far as its largest
        // alias does.
        symbols.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| preferred(a, b)));
        let mut entries: Vec<Function> = Vec::with_capacity(symbols.len());
        for (start, size, name) in symbols {
            match entries.last_mut() {
                Some(last) if last.start == start => last.size = last.size.max(size),
                _ => entries.push(Function { start, size, end: 0, name }),
            }
        }
        for k in 0..entries.len() {
            let f = &entries[k];
            let section_end = within(sections, f.start).map_or(f.start.saturating_add(1), |s| s.1);
            let next = entries.get(k + 1).map_or(section_end, |g| g.start.min(section_end));
            let f = &mut entries[k];
            f.end = if f.size > 0 {
                f.start.saturating_add(f.size)
            } else {
                match within(extents, f.start) {
                    Some((_, end)) => end.min(next),
                    None => next,
                }
            };
        }
        let mut reach = Vec::with_capacity(entries.len());
        let mut far = 0;
        for f in &entries {
            far = far.max(f.end);
            reach.push(far);
        }
        Functions { entries, reach }
    }

    /// The innermost symbol covering file address `probe`.
    fn covering(&self, probe: u64) -> Option<&Function> {
        let mut i = self.entries.partition_point(|f| f.start <= probe);
        while i > 0 && self.reach[i - 1] > probe {
            i -= 1;
            if self.entries[i].end > probe {
                return Some(&self.entries[i]);
            }
        }
        None
    }

    /// Whether a symbol starts at `probe`.
    fn starts_at(&self, probe: u64) -> bool {
        self.entries.binary_search_by_key(&probe, |f| f.start).is_ok()
    }
}

/// Which of two symbols at one address names it (Less: `a`).
fn preferred(a: &(u64, u64, String), b: &(u64, u64, String)) -> std::cmp::Ordering {
    let underscores = |n: &str| n.len() - n.trim_start_matches('_').len();
    let unversioned = |n: &str| n.split('@').next().map_or(0, str::len);
    // The default version (`name@@V`) first, then no version, then another (`name@V`).
    let version = |n: &str| {
        if n.contains("@@") {
            0
        } else if n.contains('@') {
            2
        } else {
            1
        }
    };
    (a.1 == 0)
        .cmp(&(b.1 == 0))
        .then_with(|| underscores(&a.2).cmp(&underscores(&b.2)))
        .then_with(|| unversioned(&a.2).cmp(&unversioned(&b.2)))
        .then_with(|| version(&a.2).cmp(&version(&b.2)))
        .then_with(|| a.2.cmp(&b.2))
}

/// The range of sorted, disjoint `ranges` holding `a`.
fn within(ranges: &[(u64, u64)], a: u64) -> Option<(u64, u64)> {
    let i = ranges.partition_point(|r| r.0 <= a).checked_sub(1)?;
    let r = ranges[i];
    (a < r.1).then_some(r)
}

impl File {
    /// The `.eh_frame` extent holding file address `probe`.
    fn extent(&self, probe: u64) -> Option<(u64, u64)> {
        within(&self.extents, probe)
    }

    /// The (outermost, not inlined) function DWARF says holds file address `probe`.
    fn subprogram(&self, probe: u64) -> Option<String> {
        let dwarf = self.dwarf.as_ref()?.lock().ok()?;
        let mut frames = dwarf.find_frames(probe).ok()?;
        let mut outer = None;
        while let Ok(Some(frame)) = frames.next() {
            if let Some(f) = frame.function.as_ref().and_then(|f| f.demangle().ok()) {
                outer = Some(f.into_owned());
            }
        }
        outer
    }

    /// The PLT stub holding file address `probe`: its start and name.
    fn plt_stub(&self, probe: u64) -> Option<(u64, &str)> {
        let i = self.plt.partition_point(|(s, _, _)| *s <= probe).checked_sub(1)?;
        let (start, end, name) = &self.plt[i];
        (probe < *end).then_some((*start, name.as_str()))
    }
}

/// A symbol's name as a user reads it: C++ (`_Z`) and Rust (`_R`, and legacy `_ZN`) names
/// demangled, every other name as it is. (The demanglers also take a bare type encoding:
/// C's `x` and `g` would read `long long` and `__float128`.)
pub fn demangle(name: &str) -> String {
    if name.starts_with("_Z") || name.starts_with("_R") {
        addr2line::demangle_auto(Cow::Borrowed(name), None).into_owned()
    } else {
        name.to_string()
    }
}

fn short(path: &str) -> &str {
    Path::new(path).file_name().and_then(|n| n.to_str()).unwrap_or(path)
}

fn read(m: &Module, dirs: &DebugDirs) -> Result<File, String> {
    let module = ModuleFile::open(&m.path, m.build_id.as_deref()).map_err(|e| e.to_string())?;
    let obj = object::File::parse(module.bytes()).map_err(|e| format!("not an object file ({e})"))?;
    // The lowest loadable segment is mapped at the module's base.
    let first = obj.segments().map(|s| s.address()).min().ok_or("no loadable segment")? & !0xfff;
    let bias = m.base.wrapping_sub(first);
    let plt = plt_stubs(&obj);
    // A stripped module's symbols and DWARF are in its debug file, at the same addresses.
    let debug = debug_file::find(Path::new(&m.path), &obj, dirs);
    let debug_obj = debug.as_ref().and_then(|d| object::File::parse(d.file.bytes()).ok());
    let symbols = |kind: fn(object::SymbolKind, u64) -> bool| -> Vec<(u64, u64, String)> {
        obj.symbols()
            .chain(obj.dynamic_symbols())
            .chain(debug_obj.iter().flat_map(|d| d.symbols()))
            .filter(|s| kind(s.kind(), s.size()) && s.is_definition() && s.address() != 0)
            .filter_map(|s| Some((s.address(), s.size(), demangle(s.name().ok()?))))
            .collect()
    };
    let mut text: Vec<(u64, Vec<u8>)> = obj
        .sections()
        .filter(|s| s.kind() == object::SectionKind::Text)
        .filter_map(|s| Some((s.address(), s.data().ok()?.to_vec())))
        .collect();
    text.sort_by_key(|t| t.0);
    let sections: Vec<(u64, u64)> = text.iter().map(|(a, bytes)| (*a, a + bytes.len() as u64)).collect();
    let extents = fde_extents(&obj);
    let functions = Functions::new(symbols(|k, _| k == object::SymbolKind::Text), &extents, &sections);
    let mut objects = symbols(|k, size| k == object::SymbolKind::Data && size > 0);
    objects.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
    objects.dedup_by_key(|(a, _, _)| *a);
    drop(debug_obj);
    let loader = |path: &Path, sup: Option<&Path>| addr2line::Loader::new_with_sup(path, sup);
    let dwarf = match &debug {
        Some(d) if module.in_memory() => loader(&d.path, d.sup.as_deref()).ok().map(Ok),
        None if module.in_memory() => None,
        Some(d) => Some(loader(&d.path, d.sup.as_deref()).or_else(|_| loader(Path::new(&m.path), None))),
        None => Some(loader(Path::new(&m.path), None)),
    }
    .transpose()
    .map_err(|e| format!("cannot read its debugging information ({e})"))?;
    let plt_sections = obj
        .sections()
        .filter(|s| matches!(s.name(), Ok(".plt" | ".plt.sec" | ".plt.got")))
        .map(|s| (s.address(), s.address() + s.size()))
        .collect();
    drop(obj);
    Ok(File { module, bias, dwarf: dwarf.map(Mutex::new), plt, functions, extents, objects, text, plt_sections })
}

/// The address ranges of `obj`'s `.eh_frame` FDEs, sorted and disjoint: a range that
/// starts inside the one before cuts it short there, and a malformed entry is skipped (a bad
/// table costs names, never a wrong one).
fn fde_extents(obj: &object::File) -> Vec<(u64, u64)> {
    use gimli::UnwindSection;
    let Some(section) = obj.section_by_name(".eh_frame") else { return Vec::new() };
    let Ok(data) = section.data() else { return Vec::new() };
    let eh = gimli::EhFrame::new(data, gimli::LittleEndian);
    let mut bases = gimli::BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = obj.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    if let Some(got) = obj.section_by_name(".got") {
        bases = bases.set_got(got.address());
    }
    let mut out = Vec::new();
    let mut entries = eh.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let gimli::CieOrFde::Fde(partial) = entry else { continue };
        let Ok(fde) = partial.parse(gimli::EhFrame::cie_from_offset) else { continue };
        let (start, len) = (fde.initial_address(), fde.len());
        if len > 0 {
            if let Some(end) = start.checked_add(len) {
                out.push((start, end));
            }
        }
    }
    out.sort_unstable();
    // Disjoint, so a lookup finds at most one: a range overlapping the one before is cut.
    let mut disjoint: Vec<(u64, u64)> = Vec::with_capacity(out.len());
    for (s, e) in out {
        match disjoint.last_mut() {
            Some(last) if s == last.0 => last.1 = last.1.max(e),
            Some(last) if s < last.1 => {
                last.1 = s;
                disjoint.push((s, e));
            }
            _ => disjoint.push((s, e)),
        }
    }
    disjoint
}

/// x86-64 PLT stubs as binutils names them: each entry of `.plt`, `.plt.sec` and `.plt.got`
/// (entries of the section's `sh_entsize`) that jumps through a GOT slot, named after the
/// dynamic relocation of that slot (a jump slot, or a GLOB_DAT for `.plt.got`).
fn plt_stubs(obj: &object::File) -> Vec<(u64, u64, String)> {
    use iced_x86::{Decoder, DecoderOptions, FlowControl, Register};
    let object::File::Elf64(elf) = obj else { return Vec::new() };
    let (Some(relocs), Some(dynsyms)) = (obj.dynamic_relocations(), obj.dynamic_symbol_table()) else { return Vec::new() };
    // GOT slot -> symbol name.
    let mut slots = std::collections::HashMap::new();
    for (offset, r) in relocs {
        let object::RelocationTarget::Symbol(idx) = r.target() else { continue };
        if let Some(name) = dynsyms.symbol_by_index(idx).ok().and_then(|s| s.name().ok()).filter(|n| !n.is_empty()) {
            slots.insert(offset, name);
        }
    }
    let mut stubs = Vec::new();
    for section in elf.sections() {
        if !matches!(section.name(), Ok(".plt" | ".plt.sec" | ".plt.got")) {
            continue;
        }
        let entsize = section.elf_section_header().sh_entsize.get(elf.endian());
        let Ok(data) = section.data() else { continue };
        if entsize == 0 || data.is_empty() {
            continue;
        }
        for (k, entry) in data.chunks(entsize as usize).enumerate() {
            let at = section.address() + k as u64 * entsize;
            let jump = Decoder::with_ip(64, entry, at, DecoderOptions::NONE)
                .into_iter()
                .take_while(|i| !i.is_invalid())
                .find(|i| i.flow_control() == FlowControl::IndirectBranch && i.memory_base() == Register::RIP);
            if let Some(name) = jump.and_then(|j| slots.get(&j.memory_displacement64())) {
                stubs.push((at, at + entsize, format!("{}@plt", demangle(name))));
            }
        }
    }
    stubs.sort();
    stubs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain C names stay as they are (c++filt, the oracle, demangles only `_Z` names);
    /// C++ names read as c++filt reads them.
    #[test]
    fn only_mangled_names_are_demangled() {
        let names = ["x", "g", "d", "i", "counter", "main", "_Z3fooi", "_ZN3bar3bazEv", "_ZL5countv"];
        let Ok(out) = std::process::Command::new("c++filt").args(names).output() else {
            panic!("c++filt (binutils) is needed as the oracle");
        };
        let want: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
        let got: Vec<String> = names.iter().map(|n| demangle(n)).collect();
        assert_eq!(got, want);
    }

    fn load(path: &str, base: u64) -> ModuleEvent {
        ModuleEvent {
            event: dep_profile::container::ModuleEventKind::Load,
            path: path.into(),
            base,
            size: 0x1000,
            build_id: None,
            entry: None,
        }
    }

    #[test]
    fn the_last_load_at_a_base_names_it() {
        let mut events = vec![load("/a", 0x3000), load("/b", 0x1000), load("/c", 0x3000)];
        events.push(ModuleEvent { event: dep_profile::container::ModuleEventKind::Unload, ..load("/c", 0x3000) });
        events.push(load("/d", 0x2000));
        events.push(load("/e", 0x1000));
        let s = Symbolizer::new(&events);
        let got: Vec<(&str, u64)> = s.modules.iter().map(|m| (m.path.as_str(), m.base)).collect();
        assert_eq!(got, [("/e", 0x1000), ("/d", 0x2000), ("/c", 0x3000)]);
        assert!(s.module_symbols(0x2500).is_empty(), "not a module's base");
    }
}
