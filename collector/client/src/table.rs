//! The process's block table: each distinct code seen at a block address gets a version,
//! and each new one is sent to the launcher once.

use crate::state::{queue, Spin};
use dep_collector::wire;
use dep_profile::container::BlockEntry;
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;

static LOCK: AtomicBool = AtomicBool::new(false);
static mut TABLE: Option<HashMap<u64, Vec<BlockEntry>>> = None;

#[allow(static_mut_refs)]
fn table() -> &'static mut HashMap<u64, Vec<BlockEntry>> {
    // SAFETY: TABLE is only touched under LOCK, held by every caller of table(); exercised by
    // tests/collector.rs hello and eight_threads_with_mutexes.
    unsafe { TABLE.get_or_insert_with(HashMap::new) }
}

/// The version of `code` at `addr`, adding (and sending) it if it is new.
pub fn version_of(addr: u64, code: &[u8], insn_count: u32) -> u32 {
    let _g = Spin::lock(&LOCK);
    let versions = table().entry(addr).or_default();
    if let Some(v) = versions.iter().position(|b| b.code == code && b.insn_count == insn_count) {
        return v as u32;
    }
    let e = BlockEntry { addr, version: versions.len() as u32, insn_count, code: code.to_vec() };
    queue(wire::BLOCK, 0, &[&e.encode()]);
    versions.push(e);
    versions.len() as u32 - 1
}

/// The newest code at `addr`: what a thread interrupted there was running.
pub fn latest(addr: u64) -> Option<BlockEntry> {
    let _g = Spin::lock(&LOCK);
    table().get(&addr).and_then(|v| v.last().cloned())
}

/// Sends the whole table again (a forked child's new profile needs it).
pub fn resend_all() {
    LOCK.store(false, std::sync::atomic::Ordering::Relaxed);
    let _g = Spin::lock(&LOCK);
    for versions in table().values() {
        for e in versions {
            queue(wire::BLOCK, 0, &[&e.encode()]);
        }
    }
}
