//! This process's vDSO: the shared object the kernel maps into every process (`clock_gettime`,
//! `gettimeofday`, `time`, `getcpu`), which has no file. A profile names it `[vdso]`; the
//! launcher records the build id of its own vDSO there, which is the program's when both are
//! 64-bit processes of the same kernel, and a reader whose own vDSO has that build id reads the
//! module's symbols from its own image.

use std::sync::OnceLock;

/// The module path DynamoRIO, and so the profile, give the vDSO (as /proc/PID/maps does).
pub const PATH: &str = "[vdso]";

/// This process's vDSO image, where the kernel mapped one.
pub fn own_image() -> Option<&'static [u8]> {
    static RANGE: OnceLock<Option<(usize, usize)>> = OnceLock::new();
    let &(start, end) = RANGE.get_or_init(own_range).as_ref()?;
    // SAFETY: the range is the vDSO's mapping as /proc/self/maps gives it, and its start is
    // where the kernel's auxiliary vector says the vDSO's ELF header is (checked in
    // `own_range`): the kernel maps it readable before the process starts and nothing unmaps
    // it, so it stays valid for the life of the process. Exercised by
    // `own_image_is_the_vdso_the_auxiliary_vector_names` below and tests/callgrind.rs.
    Some(unsafe { std::slice::from_raw_parts(start as *const u8, end - start) })
}

/// The vDSO's mapping, from /proc/self/maps, where its start is `AT_SYSINFO_EHDR`.
fn own_range() -> Option<(usize, usize)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let (start, end) = range_in_maps(&maps)?;
    // SAFETY: getauxval reads the auxiliary vector the kernel gave the process; it has no
    // preconditions.
    let ehdr = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) } as usize;
    (ehdr == start).then_some((start, end))
}

/// The `[vdso]` line's address range in the text of a /proc/PID/maps.
fn range_in_maps(maps: &str) -> Option<(usize, usize)> {
    let line = maps.lines().find(|l| l.split_whitespace().nth(5) == Some(PATH))?;
    let (start, end) = line.split_whitespace().next()?.split_once('-')?;
    let (start, end) = (usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?);
    (start < end).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vdso_line_gives_its_range() {
        let maps = "7ffd1e5f0000-7ffd1e611000 rw-p 00000000 00:00 0                          [stack]\n\
                    7ffd1e7d2000-7ffd1e7d6000 r--p 00000000 00:00 0                          [vvar]\n\
                    7ffd1e7d6000-7ffd1e7d8000 r-xp 00000000 00:00 0                          [vdso]\n";
        assert_eq!(range_in_maps(maps), Some((0x7ffd1e7d6000, 0x7ffd1e7d8000)));
        assert_eq!(range_in_maps("7ffd1e7d2000-7ffd1e7d6000 r--p 00000000 00:00 0 [vvar]\n"), None);
        assert_eq!(range_in_maps("7ffd1e7d8000-7ffd1e7d6000 r-xp 00000000 00:00 0 [vdso]\n"), None);
        assert_eq!(range_in_maps("zz-7ffd1e7d6000 r-xp 00000000 00:00 0 [vdso]\n"), None);
    }

    /// The image read in place is the vDSO: it starts where the auxiliary vector says, with an
    /// ELF header, and equals what /proc/self/mem gives for the same range.
    #[test]
    fn own_image_is_the_vdso_the_auxiliary_vector_names() {
        // SAFETY: as in own_range.
        let ehdr = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) } as usize;
        let Some(image) = own_image() else {
            // A kernel booted with vdso=0 maps none, and then the auxiliary vector names none.
            assert_eq!(ehdr, 0, "the auxiliary vector names a vDSO that /proc/self/maps does not");
            return;
        };
        assert_eq!(image.as_ptr() as usize, ehdr);
        assert_eq!(&image[..4], b"\x7fELF");
        use std::io::{Read, Seek, SeekFrom};
        let mut mem = std::fs::File::open("/proc/self/mem").unwrap();
        mem.seek(SeekFrom::Start(ehdr as u64)).unwrap();
        let mut copy = vec![0; image.len()];
        mem.read_exact(&mut copy).unwrap();
        assert_eq!(copy, image);
    }
}
