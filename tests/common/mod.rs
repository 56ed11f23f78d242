//! What the end-to-end tests share: the `dep` binary and the corpus built for it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The `dep` binary under test.
pub fn dep() -> &'static str {
    env!("CARGO_BIN_EXE_dep")
}

/// Builds corpora/ once into the target directory.
pub fn corpus() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = Path::new(dep()).parent().unwrap().join("corpora-test");
        let st = Command::new("make")
            .args(["-s", "-C", concat!(env!("CARGO_MANIFEST_DIR"), "/corpora")])
            .arg(format!("OUT={}", out.display()))
            .status();
        assert!(st.is_ok_and(|s| s.success()), "building corpora/ failed (is gcc installed?)");
        out
    })
}
