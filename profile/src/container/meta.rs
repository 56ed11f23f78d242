//! The profile's tables: metadata, modules, threads, blocks and the end record.

use serde::{Deserialize, Serialize};

/// Facts about the profiled run, the first record of every profile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    pub format_version: u16,
    /// 32 or 64.
    pub width: u8,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// The resolved path of the program.
    pub program: String,
    pub pid: u32,
    /// Wall-clock start, nanoseconds since the Unix epoch.
    pub start_time_ns: u64,
    /// Size of the XSAVE area (CPUID 0xD.0 EBX), the access size of xsave/xrstor.
    pub xsave_size: u32,
    /// Whether chunks carry a truth stream.
    pub truth: bool,
    /// The dep version that wrote the profile.
    pub tool: String,
    /// Profile of the parent process for a forked child or an exec'd image.
    #[serde(default)]
    pub parent: Option<ParentLink>,
    /// (Format 8.) The windows of each thread's instructions `dep record` was asked to
    /// record; absent when the whole run was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows: Option<WindowPlan>,
    /// (Format 8.) Each thread was recorded from the first entry of this function (a
    /// symbol, or an address as `0x...`)...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    /// ...to the return of this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_at: Option<String>,
    /// (Format 8.) `dep record --attach`: the process was running before DynamoRIO took
    /// it over, and each thread is recorded from then on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attached: bool,
}

/// Which of each thread's instructions are recorded: `count` windows of `instrs`
/// instructions, the first starting at instruction `skip`, each `every` after the last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowPlan {
    pub skip: u64,
    pub instrs: u64,
    pub count: u64,
    pub every: u64,
}

impl WindowPlan {
    /// The window holding instruction `at`, or else the first after it, as its first
    /// instruction and the one past its last; None past the last window.
    pub fn around(&self, at: u64) -> Option<(u64, u64)> {
        let every = self.every.max(self.instrs).max(1);
        let k = if at < self.skip { 0 } else { (at - self.skip) / every };
        for k in [k, k.saturating_add(1)] {
            if k >= self.count {
                return None;
            }
            let start = self.skip.saturating_add(k.saturating_mul(every));
            let end = start.saturating_add(self.instrs);
            if end > at {
                return Some((start, end));
            }
        }
        None
    }
}

/// The largest XSAVE area a profile may declare: 64 KiB, six times the largest any x86 CPU
/// reports (11,008 bytes with AMX tile data); each xsave reference is this long.
pub const MAX_XSAVE_SIZE: u32 = 64 << 10;

/// How a profile relates to the one it was split from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    /// "fork" or "exec".
    pub how: String,
    pub parent_pid: u32,
}

/// What happened to a module; written as "load" or "unload".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModuleEventKind {
    Load,
    Unload,
}

impl ModuleEventKind {
    /// The name the profile's JSON gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            ModuleEventKind::Load => "load",
            ModuleEventKind::Unload => "unload",
        }
    }
}

impl std::fmt::Display for ModuleEventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // (pad: widths and alignment apply, as to the string it was.)
        f.pad(self.as_str())
    }
}

/// What happened to a thread; written as "start", "end" or "spawn".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThreadEventKind {
    #[default]
    Start,
    End,
    /// (Format 4.) The thread created a thread.
    Spawn,
    /// (Format 8.) The thread ran `instructions` instructions that were not recorded,
    /// right before its chunk `chunk` (a window of `dep record` starts there).
    Unrecorded,
}

/// A module (executable or shared library) mapped or unmapped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleEvent {
    pub event: ModuleEventKind,
    pub path: String,
    pub base: u64,
    pub size: u64,
    /// GNU build id in hex, when the module has one.
    #[serde(default)]
    pub build_id: Option<String>,
    /// Entry point, for the executable.
    #[serde(default)]
    pub entry: Option<u64>,
}

/// A thread started or ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadEvent {
    /// Started or ended; or (spawn) thread `index` created a thread.
    pub event: ThreadEventKind,
    /// Index in creation order, 0 for the first thread.
    pub index: u32,
    /// The kernel's thread id.
    pub tid: u32,
    /// Nanoseconds since the Unix epoch.
    pub time_ns: u64,
    /// "spawn": the new thread's kernel id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_tid: Option<u32>,
    /// "spawn": the sequence number of the sync record before the creating system call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// "spawn": the new thread's TLS pointer (its `pthread_t` under glibc), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<u64>,
    /// "unrecorded": the chunk the unrecorded instructions come right before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk: Option<u32>,
    /// "unrecorded": how many instructions the thread ran unrecorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<u64>,
}

/// The end of the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndInfo {
    /// Exit status as a shell reports it (128+N after signal N).
    pub exit_status: i32,
    pub end_time_ns: u64,
    /// Bytes the collector could not deliver (0 when the profile is complete).
    #[serde(default)]
    pub lost_bytes: u64,
}

/// One block of the block table: its code, so recovery never needs the binaries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockEntry {
    pub addr: u64,
    /// 0 for the first code seen at `addr`, then 1, 2, ... each time it changes.
    pub version: u32,
    pub insn_count: u32,
    pub code: Vec<u8>,
}

/// Bytes before the code in a block record.
pub const BLOCK_HEADER_LEN: usize = 24;

impl BlockEntry {
    /// The record payload: addr u64, version u32, insn_count u32, code_len u32, flags u32, code.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(BLOCK_HEADER_LEN + self.code.len());
        b.extend_from_slice(&self.addr.to_le_bytes());
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&self.insn_count.to_le_bytes());
        b.extend_from_slice(&(self.code.len() as u32).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&self.code);
        b
    }
}
