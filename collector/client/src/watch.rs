//! The library functions whose calls are recorded ([`dep_profile::calls`]): found by name
//! in each module's ELF symbol tables as it loads, with their extent, so that the entry
//! gets a call record and each `ret` inside the symbol a return record.

use crate::state::Spin;
use dep_profile::calls::Func;
use object::{Object, ObjectSegment, ObjectSymbol};
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;

struct Watched {
    /// Entry address → function.
    entries: HashMap<u64, Func>,
    /// (start, end, function), the symbols' extents.
    extents: Vec<(u64, u64, Func)>,
}

static mut WATCHED: Option<Watched> = None;
static LOCK: AtomicBool = AtomicBool::new(false);

fn with<R>(f: impl FnOnce(&mut Watched) -> R) -> R {
    let _g = Spin::lock(&LOCK);
    // SAFETY: WATCHED is only touched under LOCK.
    let w = unsafe { (*core::ptr::addr_of_mut!(WATCHED)).get_or_insert_with(|| Watched { entries: HashMap::new(), extents: Vec::new() }) };
    f(w)
}

/// Calls `f(name, address, size, local)` for each function an ELF file defines (dynamic
/// symbols first), its name without a symbol version.
pub fn each_function(data: &[u8], mut f: impl FnMut(&str, u64, u64, bool)) {
    let Ok(file) = object::File::parse(data) else { return };
    for sym in file.dynamic_symbols().chain(file.symbols()) {
        if sym.is_undefined() || sym.kind() != object::SymbolKind::Text || sym.address() == 0 {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        f(name.split('@').next().unwrap_or(name), sym.address(), sym.size(), sym.is_local());
    }
}

/// The watched functions an ELF file defines, as (offset from the load bias, size, function).
pub fn functions_in(data: &[u8]) -> Vec<(u64, u64, Func)> {
    let mut out: Vec<(u64, u64, Func)> = Vec::new();
    each_function(data, |name, address, size, local| {
        if local {
            return;
        }
        if let Some(f) = Func::by_name(name) {
            // One function under two watched names (glibc's pthread_spin_init is its
            // pthread_spin_unlock: both store 0): the call cannot say which was meant, so
            // the lower number, the synchronising one, is kept.
            match out.iter_mut().find(|(a, _, _)| *a == address) {
                Some(e) if (f as u16) < (e.2 as u16) => *e = (address, size, f),
                Some(_) => {}
                None => out.push((address, size, f)),
            }
        }
    });
    out
}

/// The difference between a module's load address and its ELF addresses.
fn load_bias(data: &[u8], base: u64) -> Option<u64> {
    let file = object::File::parse(data).ok()?;
    let low = file.segments().map(|s| s.address()).min()?;
    Some(base.wrapping_sub(low & !0xfff))
}

/// Registers the watched functions of the module loaded at `base` from `path`.
pub fn module_loaded(path: &str, base: u64) {
    let Ok(data) = std::fs::read(path) else { return };
    let Some(bias) = load_bias(&data, base) else { return };
    crate::window::module_loaded(&data, bias);
    let found = functions_in(&data);
    if found.is_empty() {
        return;
    }
    with(|w| {
        for (addr, size, f) in found {
            let a = addr.wrapping_add(bias);
            w.entries.insert(a, f);
            w.extents.push((a, a + size.max(1), f));
        }
    });
}

/// Forgets the functions of a module that was unloaded from `[start, end)`.
pub fn module_unloaded(start: u64, end: u64) {
    with(|w| {
        w.entries.retain(|&a, _| !(start..end).contains(&a));
        w.extents.retain(|&(a, _, _)| !(start..end).contains(&a));
    });
}

/// The watched function whose entry is `pc`.
pub fn entry_at(pc: u64) -> Option<Func> {
    with(|w| w.entries.get(&pc).copied())
}

/// The watched function whose symbol holds `pc`.
pub fn function_holding(pc: u64) -> Option<Func> {
    with(|w| w.extents.iter().find(|&&(a, e, _)| a <= pc && pc < e).map(|&(_, _, f)| f))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C library's own symbol table (read with nm) against what the module scan finds.
    #[test]
    fn finds_the_c_library_functions_nm_lists() {
        let out = std::process::Command::new("sh").args(["-c", "ldd /bin/sh | awk '/libc.so/ {print $3}'"]).output().unwrap();
        let libc = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(!libc.is_empty(), "no C library found through ldd /bin/sh");
        let nm = std::process::Command::new("nm").args(["-D", "-S", "--defined-only", &libc]).output().unwrap();
        let nm = String::from_utf8_lossy(&nm.stdout);
        let found = functions_in(&std::fs::read(&libc).unwrap());
        for name in [
            "pthread_mutex_lock",
            "pthread_mutex_trylock",
            "pthread_spin_unlock",
            "malloc",
            "pthread_join",
            "pthread_mutex_destroy",
            "flockfile",
        ] {
            // "ADDR SIZE T name@@VERSION"
            let line = nm.lines().find(|l| l.split_whitespace().nth(3).is_some_and(|n| n.split('@').next() == Some(name))).unwrap();
            let f: Vec<&str> = line.split_whitespace().collect();
            let (addr, size) = (u64::from_str_radix(f[0], 16).unwrap(), u64::from_str_radix(f[1], 16).unwrap());
            let func = Func::by_name(name).unwrap();
            assert!(found.contains(&(addr, size, func)), "{name} at {addr:#x} size {size} not found: {found:x?}");
            assert_eq!(found.iter().filter(|e| e.0 == addr).count(), 1, "{name}: one function per address");
        }
    }
}
