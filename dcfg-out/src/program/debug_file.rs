//! A module's separate debug file, found where gdb looks for it ("Debugging Information in
//! Separate Files"): distributions strip their libraries and ship the symbols and DWARF in
//! files of their own (Debian's `libc6-dbg`, Fedora's debuginfo packages, debuginfod).
//!
//! In order: `DIR/.build-id/xx/rest.debug` under each debug directory, for the module's GNU
//! build id; the file `.gnu_debuglink` names, beside the module, in its `.debug/`
//! subdirectory and under each debug directory by the module's directory, with the link's
//! CRC checked; the debuginfod client's cache. A `.gnu_debugaltlink` (dwz's supplementary
//! file holding what several debug files share) is found by its path and by its build id.
//! Every candidate is opened as [`ModuleFile`] opens a module (a regular file, mapped, of
//! bounded size) and must carry the build id it is looked up by, so a stale debug file of
//! another build never names anything.

use crate::program::module_file::{hex, ModuleFile};
use object::Object;
use std::path::{Path, PathBuf};

/// gdb's default `debug-file-directory`.
pub const DEFAULT_DEBUG_DIR: &str = "/usr/lib/debug";

/// The directories searched for debug files: the ones a user names, then the default.
#[derive(Clone, Debug)]
pub struct DebugDirs(Vec<PathBuf>);

impl Default for DebugDirs {
    fn default() -> Self {
        DebugDirs(vec![PathBuf::from(DEFAULT_DEBUG_DIR)])
    }
}

impl DebugDirs {
    /// The default directory, after `extra` (searched first, in order).
    pub fn with(extra: &[PathBuf]) -> DebugDirs {
        let mut dirs = extra.to_vec();
        dirs.push(PathBuf::from(DEFAULT_DEBUG_DIR));
        DebugDirs(dirs)
    }

    /// The directories, in search order.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.0
    }
}

/// A debug file found for a module.
pub struct DebugFile {
    pub path: PathBuf,
    pub file: ModuleFile,
    /// Its dwz supplementary file, where it names one that could be found.
    pub sup: Option<PathBuf>,
}

/// The debug file of the module at `module_path` (parsed as `module`), if any is found.
pub fn find(module_path: &Path, module: &object::File, dirs: &DebugDirs) -> Option<DebugFile> {
    let build_id = module.build_id().ok().flatten().filter(|id| id.len() >= 2).map(hex);
    let found = build_id
        .as_deref()
        .and_then(|id| by_build_id(id, dirs))
        .or_else(|| by_debuglink(module_path, module, build_id.as_deref(), dirs))
        .or_else(|| build_id.as_deref().and_then(debuginfod_cache));
    let (path, file) = found?;
    let sup = supplementary(&path, &file, dirs);
    Some(DebugFile { path, file, sup })
}

/// `DIR/.build-id/xx/rest.debug` under each directory, carrying build id `id`.
fn by_build_id(id: &str, dirs: &DebugDirs) -> Option<(PathBuf, ModuleFile)> {
    dirs.dirs().iter().find_map(|d| open_with_id(&build_id_path(d, id), id))
}

/// Where debug directory `dir` keeps the file of build id `id` (hex, at least 2 digits).
fn build_id_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(".build-id").join(&id[..2]).join(format!("{}.debug", &id[2..]))
}

/// The file `.gnu_debuglink` names whose contents have the CRC it records (and, if both
/// have a build id, the module's).
fn by_debuglink(module_path: &Path, module: &object::File, build_id: Option<&str>, dirs: &DebugDirs) -> Option<(PathBuf, ModuleFile)> {
    let (name, crc) = module.gnu_debuglink().ok().flatten()?;
    let name = std::str::from_utf8(name).ok().filter(|n| !n.is_empty())?;
    let dir = module_path.parent()?;
    let mut candidates = vec![dir.join(name), dir.join(".debug").join(name)];
    if dir.is_absolute() {
        let rel = dir.strip_prefix("/").ok()?;
        candidates.extend(dirs.dirs().iter().map(|d| d.join(rel).join(name)));
    }
    let module_real = std::fs::canonicalize(module_path).ok();
    candidates.into_iter().find_map(|path| {
        // A link naming the module itself (it was never split) is no debug file.
        if module_real.is_some() && std::fs::canonicalize(&path).ok() == module_real {
            return None;
        }
        let file = ModuleFile::open(path.to_str()?, None).ok()?;
        if crc32fast::hash(file.bytes()) != crc {
            return None;
        }
        let have = object::File::parse(file.bytes()).ok()?.build_id().ok().flatten().map(hex);
        if let (Some(want), Some(have)) = (build_id, have) {
            if want != have {
                return None;
            }
        }
        Some((path, file))
    })
}

/// The debuginfod client's cache: `$DEBUGINFOD_CACHE_PATH`, else
/// `$XDG_CACHE_HOME/debuginfod_client`, else `~/.cache/debuginfod_client`, then
/// `BUILDID/debuginfo`.
fn debuginfod_cache(id: &str) -> Option<(PathBuf, ModuleFile)> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let cache = var("DEBUGINFOD_CACHE_PATH")
        .or_else(|| var("XDG_CACHE_HOME").map(|c| c.join("debuginfod_client")))
        .or_else(|| var("HOME").map(|h| h.join(".cache/debuginfod_client")))?;
    open_with_id(&cache.join(id).join("debuginfo"), id)
}

/// The dwz supplementary file `debug` names in `.gnu_debugaltlink`: at its path (relative
/// to the debug file's directory), else by its build id under each debug directory.
fn supplementary(debug_path: &Path, debug: &ModuleFile, dirs: &DebugDirs) -> Option<PathBuf> {
    let obj = object::File::parse(debug.bytes()).ok()?;
    let (name, id) = obj.gnu_debugaltlink().ok().flatten()?;
    let id = hex(id);
    if id.len() < 2 {
        return None;
    }
    let name = std::str::from_utf8(name).ok().filter(|n| !n.is_empty());
    let beside = name.and_then(|n| Some(debug_path.parent()?.join(n)));
    let by_id = dirs.dirs().iter().map(|d| build_id_path(d, &id));
    beside.into_iter().chain(by_id).find(|p| open_with_id(p, &id).is_some())
}

fn open_with_id(path: &Path, id: &str) -> Option<(PathBuf, ModuleFile)> {
    ModuleFile::open(path.to_str()?, Some(id)).ok().map(|f| (path.to_path_buf(), f))
}
