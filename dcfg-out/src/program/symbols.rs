//! Names for code addresses: the function (demangled) and the source line, from each
//! module's ELF symbol tables, its PLT and its DWARF (through addr2line), checked against
//! the build id the profile recorded. A module that cannot be read, or whose build id
//! differs, gives `module+0xoffset` names and one warning, never a wrong name; code outside
//! every module (JIT code) is `[jit]`. Each module is read once, on first use.

use crate::program::module_file::ModuleFile;
use dep_profile::container::ModuleEvent;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, ObjectSymbolTable};
use std::borrow::Cow;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

/// Where an address is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// The module's path, or None outside every module.
    pub module: Option<String>,
    /// The symbol (the routine, as `nm` names it): a demangled name, `name@plt`,
    /// `module+0xoffset` where the module gives none, or `[jit]`.
    pub symbol: String,
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
    dwarf: Mutex<addr2line::Loader>,
    /// PLT stubs: (start, end, name@plt), file addresses, sorted.
    plt: Vec<(u64, u64, String)>,
    /// Function symbols (static and dynamic): (address, size, demangled name), sorted. An
    /// address is named after the nearest symbol at or before it, as binutils does (padding
    /// after a function is named after it), unless it lies past that symbol's size and its
    /// alignment padding: then the symbol tables do not cover it (a stripped module whose
    /// static functions are gone) and it is named by offset rather than wrongly.
    functions: Vec<(u64, u64, String)>,
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
        Symbolizer { modules, warnings: Mutex::new(Vec::new()) }
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
        let Ok(i) = self.modules.binary_search_by_key(&base, |m| m.base) else { return Vec::new() };
        let m = &self.modules[i];
        let Some(file) = m.file.get_or_init(|| self.open(m)) else { return Vec::new() };
        file.functions
            .iter()
            .map(|(a, size, name)| (name.clone(), a.wrapping_add(file.bias).wrapping_sub(m.base), *size))
            .filter(|(_, off, _)| *off < m.size)
            .collect()
    }

    /// The symbol (routine) `addr` is in, from the symbol tables alone: cheaper than
    /// [`place`](Self::place), which also reads DWARF.
    pub fn symbol(&self, addr: u64) -> String {
        self.symbol_in(addr).2
    }

    /// The module holding `addr`, its file if readable, the symbol naming `addr`, and
    /// whether a symbol (or a PLT stub) names it rather than its module and offset.
    fn symbol_in(&self, addr: u64) -> (Option<&Module>, Option<&File>, String, bool) {
        let Some(m) = self.module(addr) else { return (None, None, "[jit]".into(), false) };
        let fallback = || format!("{}+{:#x}", short(&m.path), addr - m.base);
        let Some(file) = m.file.get_or_init(|| self.open(m)) else { return (Some(m), None, fallback(), false) };
        let probe = addr.wrapping_sub(file.bias);
        if let Some(name) = file.plt_stub(probe) {
            return (Some(m), Some(file), name.to_string(), true);
        }
        let i = file.functions.partition_point(|(a, _, _)| *a <= probe);
        let covers = |&(a, size, _): &(u64, u64, String)| size == 0 || probe < (a + size).next_multiple_of(FUNCTION_ALIGN);
        match i.checked_sub(1).map(|i| &file.functions[i]).filter(|f| covers(f)) {
            Some(f) => (Some(m), Some(file), f.2.clone(), true),
            None => (Some(m), Some(file), fallback(), false),
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

    /// Whether a symbol (or a PLT stub) names `addr`, rather than its module and offset.
    pub fn covered(&self, addr: u64) -> bool {
        self.symbol_in(addr).3
    }

    /// Whether `addr` is in a PLT section (stubs, and the lazy binder's first entry).
    pub fn in_plt(&self, addr: u64) -> bool {
        self.file_at(addr).is_some_and(|(file, probe)| file.plt_sections.iter().any(|&(a, b)| (a..b).contains(&probe)))
    }

    /// Whether a function symbol (or a PLT stub) starts exactly at `addr`.
    pub fn is_function_start(&self, addr: u64) -> bool {
        self.file_at(addr).is_some_and(|(file, probe)| {
            file.functions.binary_search_by_key(&probe, |f| f.0).is_ok() || file.plt.binary_search_by_key(&probe, |p| p.0).is_ok()
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
        let (m, file, symbol, _) = self.symbol_in(addr);
        let mut place = Place { module: m.map(|m| m.path.clone()), symbol: symbol.clone(), function: symbol, file: None, line: None };
        let Some(file) = file else { return place };
        let probe = addr.wrapping_sub(file.bias);
        if file.plt_stub(probe).is_some() {
            return place;
        }
        let Ok(dwarf) = file.dwarf.lock() else { return place };
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
        match read(m) {
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

/// Functions start at most this far apart in padding (compilers align to 16 or 64 bytes).
const FUNCTION_ALIGN: u64 = 64;

impl File {
    /// The PLT stub holding file address `probe`.
    fn plt_stub(&self, probe: u64) -> Option<&str> {
        let i = self.plt.partition_point(|(s, _, _)| *s <= probe).checked_sub(1)?;
        let (_, end, name) = &self.plt[i];
        (probe < *end).then_some(name.as_str())
    }
}

fn short(path: &str) -> &str {
    Path::new(path).file_name().and_then(|n| n.to_str()).unwrap_or(path)
}

fn read(m: &Module) -> Result<File, String> {
    let module = ModuleFile::open(&m.path, m.build_id.as_deref()).map_err(|e| e.to_string())?;
    let obj = object::File::parse(module.bytes()).map_err(|e| format!("not an object file ({e})"))?;
    // The lowest loadable segment is mapped at the module's base.
    let first = obj.segments().map(|s| s.address()).min().ok_or("no loadable segment")? & !0xfff;
    let bias = m.base.wrapping_sub(first);
    let plt = plt_stubs(&obj);
    let mut functions: Vec<(u64, u64, String)> = obj
        .symbols()
        .chain(obj.dynamic_symbols())
        .filter(|s| s.kind() == object::SymbolKind::Text && s.is_definition() && s.address() != 0)
        .filter_map(|s| Some((s.address(), s.size(), addr2line::demangle_auto(Cow::Borrowed(s.name().ok()?), None).into_owned())))
        .collect();
    // At one address, the symbol `nm` lists first among equals (sorted by name), sized.
    functions.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
    functions.dedup_by_key(|(a, _, _)| *a);
    let mut objects: Vec<(u64, u64, String)> = obj
        .symbols()
        .chain(obj.dynamic_symbols())
        .filter(|s| matches!(s.kind(), object::SymbolKind::Data) && s.is_definition() && s.size() > 0)
        .filter_map(|s| Some((s.address(), s.size(), addr2line::demangle_auto(Cow::Borrowed(s.name().ok()?), None).into_owned())))
        .collect();
    objects.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
    objects.dedup_by_key(|(a, _, _)| *a);
    let dwarf = addr2line::Loader::new(&m.path).map_err(|e| format!("cannot read its debugging information ({e})"))?;
    let mut text: Vec<(u64, Vec<u8>)> = obj
        .sections()
        .filter(|s| s.kind() == object::SectionKind::Text)
        .filter_map(|s| Some((s.address(), s.data().ok()?.to_vec())))
        .collect();
    text.sort_by_key(|t| t.0);
    let plt_sections = obj
        .sections()
        .filter(|s| matches!(s.name(), Ok(".plt" | ".plt.sec" | ".plt.got")))
        .map(|s| (s.address(), s.address() + s.size()))
        .collect();
    drop(obj);
    Ok(File { module, bias, dwarf: Mutex::new(dwarf), plt, functions, objects, text, plt_sections })
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
                stubs.push((at, at + entsize, format!("{}@plt", addr2line::demangle_auto(Cow::Borrowed(name), None))));
            }
        }
    }
    stubs.sort();
    stubs
}

#[cfg(test)]
mod tests {
    use super::*;

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
