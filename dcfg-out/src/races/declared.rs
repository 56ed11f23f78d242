//! Whether a variable's byte is declared `_Atomic` (C11; `std::atomic` is a class around
//! one), from the module's DWARF: x86 compiles relaxed and acquire/release atomics to plain
//! moves, so the code cannot show them, but the declaration can. Every access to an atomic
//! object is atomic, so accesses to such a byte never form a data race.

use addr2line::gimli;
use object::{Object, ObjectSection};
use std::collections::HashMap;

type Reader<'a> = gimli::EndianSlice<'a, gimli::RunTimeEndian>;

/// The DWARF of the modules asked about, each read once.
#[derive(Default)]
pub struct Declared {
    modules: HashMap<String, Option<Module>>,
}

struct Module {
    /// The DWARF sections' bytes, uncompressed, by name.
    sections: HashMap<&'static str, Vec<u8>>,
    endian: gimli::RunTimeEndian,
    /// Variable name → (its unit's offset, its type's offset in that unit).
    variables: HashMap<String, (gimli::DebugInfoOffset, gimli::UnitOffset)>,
}

/// The DWARF sections read.
const SECTIONS: &[gimli::SectionId] = &[
    gimli::SectionId::DebugAbbrev,
    gimli::SectionId::DebugAddr,
    gimli::SectionId::DebugInfo,
    gimli::SectionId::DebugLine,
    gimli::SectionId::DebugLineStr,
    gimli::SectionId::DebugRanges,
    gimli::SectionId::DebugRngLists,
    gimli::SectionId::DebugStr,
    gimli::SectionId::DebugStrOffsets,
];

/// How deep type chains are followed (typedefs, qualifiers, nested members).
const MAX_DEPTH: usize = 32;

impl Declared {
    /// Whether byte `offset` of the variable `name` in the module file `path` (whose bytes
    /// are `file`, as the symbolizer checked and mapped them) lies in an object declared
    /// atomic; false where the DWARF does not say.
    pub fn is_atomic(&mut self, path: &str, file: &[u8], name: &str, offset: u64) -> bool {
        let m = self.modules.entry(path.to_string()).or_insert_with(|| Module::read(file));
        let Some(m) = m else { return false };
        let Some(&(unit_at, ty)) = m.variables.get(name) else { return false };
        let dwarf = m.dwarf();
        let Ok(header) = dwarf.debug_info.header_from_offset(unit_at) else { return false };
        let Ok(unit) = dwarf.unit(header) else { return false };
        atomic_at(&dwarf, &unit, ty, offset, 0)
    }
}

impl Module {
    fn read(data: &[u8]) -> Option<Module> {
        let obj = object::File::parse(data).ok()?;
        let endian = if obj.is_little_endian() { gimli::RunTimeEndian::Little } else { gimli::RunTimeEndian::Big };
        // Every DWARF section a unit may refer to (line programs, string offsets, ranges).
        let mut sections = HashMap::new();
        for s in obj.sections() {
            let Ok(name) = s.name() else { continue };
            let Some(id) = SECTIONS.iter().find(|id| id.name() == name) else { continue };
            // A compressed section names its own uncompressed size: bounded before allocating.
            if s.compressed_data().map_or(true, |c| c.uncompressed_size > crate::program::module_file::MAX_MODULE_BYTES) {
                continue;
            }
            if let Ok(bytes) = s.uncompressed_data() {
                sections.insert(id.name(), bytes.into_owned());
            }
        }
        let mut m = Module { sections, endian, variables: HashMap::new() };
        let mut variables = HashMap::new();
        {
            let dwarf = m.dwarf();
            let mut units = dwarf.units();
            while let Ok(Some(header)) = units.next() {
                let Some(unit_at) = header.offset().to_debug_info_offset(&header) else { continue };
                let Ok(unit) = dwarf.unit(header) else { continue };
                let mut entries = unit.entries();
                while let Ok(Some(e)) = entries.next_dfs() {
                    if e.tag() != gimli::DW_TAG_variable {
                        continue;
                    }
                    let (Some(name), Some(gimli::AttributeValue::UnitRef(ty))) =
                        (e.attr_value(gimli::DW_AT_name).and_then(|n| dwarf.attr_string(&unit, n).ok()), e.attr_value(gimli::DW_AT_type))
                    else {
                        continue;
                    };
                    variables.entry(name.to_string_lossy().into_owned()).or_insert((unit_at, ty));
                }
            }
        }
        m.variables = variables;
        Some(m)
    }

    fn dwarf(&self) -> gimli::Dwarf<Reader<'_>> {
        let load = |id: gimli::SectionId| -> Result<Reader<'_>, gimli::Error> {
            Ok(gimli::EndianSlice::new(self.sections.get(id.name()).map_or(&[][..], |v| &v[..]), self.endian))
        };
        gimli::Dwarf::load(load).expect("loading from memory cannot fail")
    }
}

/// Whether byte `offset` of an object of type `ty` lies in an atomic object.
fn atomic_at(dwarf: &gimli::Dwarf<Reader<'_>>, unit: &gimli::Unit<Reader<'_>>, ty: gimli::UnitOffset, offset: u64, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    let Ok(e) = unit.entry(ty) else { return false };
    let inner = || match e.attr_value(gimli::DW_AT_type) {
        Some(gimli::AttributeValue::UnitRef(t)) => Some(t),
        _ => None,
    };
    match e.tag() {
        gimli::DW_TAG_atomic_type => true,
        gimli::DW_TAG_typedef | gimli::DW_TAG_const_type | gimli::DW_TAG_volatile_type | gimli::DW_TAG_restrict_type => {
            inner().is_some_and(|t| atomic_at(dwarf, unit, t, offset, depth + 1))
        }
        gimli::DW_TAG_array_type => {
            let Some(t) = inner() else { return false };
            match byte_size(unit, t, depth + 1) {
                Some(size) if size > 0 => atomic_at(dwarf, unit, t, offset % size, depth + 1),
                _ => false,
            }
        }
        // C++'s std::atomic keeps a plain member inside a class of that name.
        gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type if cxx_atomic(dwarf, unit, &e) => true,
        gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type | gimli::DW_TAG_class_type => {
            // The member at the greatest offset not past `offset`.
            let Ok(mut tree) = unit.entries_tree(Some(ty)) else { return false };
            let Ok(root) = tree.root() else { return false };
            let mut children = root.children();
            let mut best: Option<(u64, gimli::UnitOffset)> = None;
            while let Ok(Some(child)) = children.next() {
                let m = child.entry();
                if m.tag() != gimli::DW_TAG_member && m.tag() != gimli::DW_TAG_inheritance {
                    continue;
                }
                let at = match m.attr_value(gimli::DW_AT_data_member_location) {
                    Some(gimli::AttributeValue::Udata(v)) => v,
                    Some(gimli::AttributeValue::Data1(v)) => v as u64,
                    Some(gimli::AttributeValue::Data2(v)) => v as u64,
                    Some(gimli::AttributeValue::Data4(v)) => v as u64,
                    Some(gimli::AttributeValue::Data8(v)) => v,
                    None => 0, // union members
                    _ => continue,
                };
                let Some(gimli::AttributeValue::UnitRef(t)) = m.attr_value(gimli::DW_AT_type) else { continue };
                if at <= offset && best.is_none_or(|(b, _)| at >= b) {
                    // Past the member's end is padding, not the member.
                    if byte_size(unit, t, depth + 1).is_none_or(|s| offset < at + s) {
                        best = Some((at, t));
                    }
                }
            }
            best.is_some_and(|(at, t)| atomic_at(dwarf, unit, t, offset - at, depth + 1))
        }
        _ => false,
    }
}

/// Whether a class is one of C++'s atomics (`std::atomic<T>` and its bases, `atomic_flag`).
fn cxx_atomic(dwarf: &gimli::Dwarf<Reader<'_>>, unit: &gimli::Unit<Reader<'_>>, e: &gimli::DebuggingInformationEntry<Reader<'_>>) -> bool {
    let Some(name) = e.attr_value(gimli::DW_AT_name).and_then(|n| dwarf.attr_string(unit, n).ok()) else { return false };
    let n = name.to_string_lossy();
    ["atomic<", "__atomic_base<", "__atomic_float<", "__atomic_ref<", "atomic_flag"].iter().any(|p| n.starts_with(p))
}

/// The size of type `ty`, following typedefs and qualifiers.
fn byte_size(unit: &gimli::Unit<Reader<'_>>, ty: gimli::UnitOffset, depth: usize) -> Option<u64> {
    if depth > MAX_DEPTH {
        return None;
    }
    let e = unit.entry(ty).ok()?;
    if let Some(v) = e.attr_value(gimli::DW_AT_byte_size) {
        return v.udata_value();
    }
    match e.attr_value(gimli::DW_AT_type)? {
        gimli::AttributeValue::UnitRef(t) if e.tag() != gimli::DW_TAG_array_type => byte_size(unit, t, depth + 1),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// gcc's own DWARF for a small program: members and whole variables, atomic or not.
    #[test]
    fn finds_atomic_members_and_variables_in_gccs_dwarf() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("a.c");
        std::fs::write(
            &src,
            "#include <stdatomic.h>\n\
             struct s { long plain; _Atomic long counted; int tail[4]; } st;\n\
             typedef struct { atomic_int flags[2]; volatile int v; } pair_t;\n\
             pair_t pairs[3];\n\
             atomic_long whole;\n\
             long ordinary;\n\
             int main(void) { atomic_store_explicit(&whole, 1, memory_order_relaxed); return (int)st.plain + pairs[1].v + (int)ordinary; }\n",
        )
        .unwrap();
        let exe = dir.path().join("a");
        let st = std::process::Command::new("gcc").args(["-O2", "-g", "-o"]).arg(&exe).arg(&src).status().unwrap();
        assert!(st.success(), "gcc");
        let file = crate::program::module_file::ModuleFile::open(exe.to_str().unwrap(), None).unwrap();
        let mut d = Declared::default();
        let is_atomic = |d: &mut Declared, name: &str, off: u64| d.is_atomic("a", file.bytes(), name, off);
        assert!(!is_atomic(&mut d, "st", 0));
        assert!(is_atomic(&mut d, "st", 8) && is_atomic(&mut d, "st", 15));
        assert!(!is_atomic(&mut d, "st", 16));
        // pair_t is 12 bytes: flags at 0..8, v at 8.
        assert!(is_atomic(&mut d, "pairs", 12 + 4));
        assert!(!is_atomic(&mut d, "pairs", 12 + 8), "volatile is not atomic");
        assert!(is_atomic(&mut d, "whole", 0));
        assert!(!is_atomic(&mut d, "ordinary", 0));
        assert!(!is_atomic(&mut d, "no_such", 0));
        assert!(!Declared::default().is_atomic("b", b"not an object", "st", 8));
    }
}
