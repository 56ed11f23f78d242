//! The UMT trace reader (`dep export umt --check`) on any set of files: counts or an error
//! naming the problem, never a panic, a hang or an allocation sized by the files.
#![no_main]

use libfuzzer_sys::fuzz_target;

/// The files a trace directory holds, as the input's records name them.
const FILES: [&str; 10] = [
    "exec.vtable",
    "exec.offsets",
    "exec.prev_next.column",
    "ins.itable",
    "module.itable",
    "thread.itable",
    "context_map.itable",
    "address_space.itable",
    "syscall.vtable",
    "syscall.offsets",
];

fuzz_target!(|data: &[u8]| {
    // Records of (file index u8, length u32 little-endian, bytes) make the directory.
    let dir = std::env::temp_dir().join(format!("dep-fuzz-umt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut rest = data;
    while rest.len() >= 5 {
        let file = FILES[rest[0] as usize % FILES.len()];
        let len = (u32::from_le_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize).min(rest.len() - 5);
        std::fs::write(dir.join(file), &rest[5..5 + len]).unwrap();
        rest = &rest[5 + len..];
    }
    let _ = dep_dcfg_out::umt::reader::check(&dir);
});
