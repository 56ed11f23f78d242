//! A module's file, as a profile names it: the profile is untrusted, so the path may name
//! a device (`/dev/zero`), a FIFO, a directory, a huge file or another build of the
//! module. Only a regular file of at most [`MAX_MODULE_BYTES`] is mapped (never read
//! whole), and its GNU build id must be the one the profile recorded.

use memmap2::Mmap;
use object::Object;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;

/// The largest module file read (and the largest DWARF section uncompressed from one):
/// beyond any shared library or executable in practice (libxul.so with DWARF is ~2 GiB).
pub const MAX_MODULE_BYTES: u64 = 4 << 30;

/// Why a module's file is not used.
#[derive(Debug, thiserror::Error)]
pub enum ModuleFileError {
    #[error("no file")]
    NoFile,
    #[error("cannot open it ({0})")]
    Open(std::io::Error),
    #[error("not a regular file ({0})")]
    NotRegular(&'static str),
    #[error("{size} bytes, beyond the {max} read of a module")]
    TooLarge { size: u64, max: u64 },
    #[error("cannot map it ({0})")]
    Map(std::io::Error),
    #[error("not an object file ({0})")]
    NotObject(object::Error),
    #[error("build id {have} is not the recorded {want}")]
    OtherBuild { have: String, want: String },
    #[error("the kernel's, with no build id recorded (a profile from before the launcher recorded one, or of a 32-bit program)")]
    NoVdsoId,
    #[error("the kernel's, and this process has none to compare")]
    NoVdso,
    #[error("the kernel's: recorded with build id {want}, this kernel's is {have} (recorded on another kernel)")]
    OtherKernel { have: String, want: String },
}

/// Opens `path` for reading if it is a regular file, without waiting on a FIFO or a
/// device; the file's metadata comes from the open descriptor, so the file checked is the
/// file read.
pub fn open_regular(path: impl AsRef<std::path::Path>) -> Result<(std::fs::File, std::fs::Metadata), ModuleFileError> {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    let f = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(ModuleFileError::Open)?;
    let meta = f.metadata().map_err(ModuleFileError::Open)?;
    let kind = meta.file_type();
    if !kind.is_file() {
        return Err(ModuleFileError::NotRegular(kind_name(&kind)));
    }
    Ok((f, meta))
}

/// A module's file, mapped read-only and checked against the recorded build id; or, for the
/// vDSO, which has no file, this process's own vDSO where its build id is the recorded one.
pub struct ModuleFile {
    map: Bytes,
    /// Whether the profile recorded no build id, so nothing said this is the file that ran.
    pub unchecked: bool,
}

impl ModuleFile {
    /// Opens `path` if it is a regular file of bounded size whose build id is `build_id`
    /// (the profile's record of it; None checks nothing and sets `unchecked`).
    pub fn open(path: &str, build_id: Option<&str>) -> Result<ModuleFile, ModuleFileError> {
        if path == dep_profile::vdso::PATH {
            return Self::own_vdso(build_id);
        }
        if path.is_empty() || path.starts_with('[') {
            return Err(ModuleFileError::NoFile);
        }
        let (f, meta) = open_regular(path)?;
        if meta.len() > MAX_MODULE_BYTES {
            return Err(ModuleFileError::TooLarge { size: meta.len(), max: MAX_MODULE_BYTES });
        }
        // SAFETY: a read-only private map of a regular file (checked above on this very
        // descriptor, so not a device whose map could be unbounded); the bytes are only
        // parsed, never trusted. Another process truncating the file meanwhile would make
        // later reads fault, as for every reader of a mapped module (the collector's own
        // build-id read and addr2line do the same); the tests map regular files and refuse
        // devices, FIFOs and directories before this point.
        let map = unsafe { Mmap::map(&f) }.map_err(ModuleFileError::Map)?;
        let obj = object::File::parse(&*map).map_err(ModuleFileError::NotObject)?;
        if let Some(want) = build_id {
            if let Some(have) = other_build(&obj, want) {
                return Err(ModuleFileError::OtherBuild { have, want: want.to_string() });
            }
        }
        Ok(ModuleFile { map: Bytes::Mapped(map), unchecked: build_id.is_none() })
    }

    /// The vDSO a profile recorded, if this process's own is the same image: the same build
    /// id (the launcher records its own vDSO's, `dep_profile::vdso`), so the profile was
    /// recorded on this kernel.
    fn own_vdso(build_id: Option<&str>) -> Result<ModuleFile, ModuleFileError> {
        let want = build_id.ok_or(ModuleFileError::NoVdsoId)?;
        let image = dep_profile::vdso::own_image().ok_or(ModuleFileError::NoVdso)?;
        let obj = object::File::parse(image).map_err(ModuleFileError::NotObject)?;
        if let Some(have) = other_build(&obj, want) {
            return Err(ModuleFileError::OtherKernel { have, want: want.to_string() });
        }
        Ok(ModuleFile { map: Bytes::Static(image), unchecked: false })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.map {
            Bytes::Mapped(m) => m,
            Bytes::Static(b) => b,
        }
    }

    /// Whether this is an image in memory rather than a file (the vDSO): there is no path to
    /// read its debugging information from.
    pub fn in_memory(&self) -> bool {
        matches!(self.map, Bytes::Static(_))
    }
}

/// The build id `obj` has (`(none)` where it has none) if it is not `want`.
fn other_build(obj: &object::File, want: &str) -> Option<String> {
    let have = obj.build_id().ok().flatten().map(hex);
    (have.as_deref() != Some(want)).then(|| have.unwrap_or_else(|| "(none)".into()))
}

/// Where a [`ModuleFile`]'s bytes are.
enum Bytes {
    Mapped(Mmap),
    Static(&'static [u8]),
}

fn kind_name(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    match () {
        _ if kind.is_dir() => "a directory",
        _ if kind.is_fifo() => "a FIFO",
        _ if kind.is_char_device() => "a character device",
        _ if kind.is_block_device() => "a block device",
        _ if kind.is_socket() => "a socket",
        _ => "not a file",
    }
}

/// Bytes in lower-case hex, as build ids are written.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
