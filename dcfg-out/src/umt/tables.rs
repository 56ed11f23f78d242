//! The fixed-size tables (§4.2.1: instructions, modules, threads, address space), the
//! context map, the empty system-call table and trace.xml.

use super::decoded::{ins_rec, Row, INS_REC};
use super::registers;
use super::UmtError;
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `dir/name`.
pub fn write(dir: &Path, name: &str, parts: &[&[u8]]) -> Result<(), UmtError> {
    let path = dir.join(name);
    let f = std::fs::File::create(&path).map_err(|err| UmtError::Create { path: path.clone(), err })?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
    for p in parts {
        w.write_all(p).map_err(|err| UmtError::Write { path: path.clone(), err })?;
    }
    w.flush().map_err(|err| UmtError::Write { path, err })
}

/// The generic header: versions, row count and size, the table right after the header,
/// and (for tables with strings) where the extra area is and its size.
fn header(record_ver: u32, rows: u64, row_size: u64, extra: Option<u64>) -> Vec<u8> {
    let len = if extra.is_some() { 48 } else { 32 };
    let mut h = Vec::with_capacity(len);
    h.extend_from_slice(&0u32.to_le_bytes());
    h.extend_from_slice(&record_ver.to_le_bytes());
    h.extend_from_slice(&rows.to_le_bytes());
    h.extend_from_slice(&row_size.to_le_bytes());
    h.extend_from_slice(&(len as u64).to_le_bytes());
    if let Some(size) = extra {
        h.extend_from_slice(&(len as u64 + rows * row_size).to_le_bytes());
        h.extend_from_slice(&size.to_le_bytes());
    }
    h
}

/// A cStr (§5): length, bytes, NUL.
fn c_str(out: &mut Vec<u8>, s: &str) {
    let b = &s.as_bytes()[..s.len().min(i16::MAX as usize)];
    out.extend_from_slice(&(b.len() as u16).to_le_bytes());
    out.extend_from_slice(b);
    out.push(0);
}

/// A uStr (§5): length in UTF-16 units, the units, NUL.
fn u_str(out: &mut Vec<u8>, s: &str) {
    let units: Vec<u16> = s.encode_utf16().take(i16::MAX as usize).collect();
    out.extend_from_slice(&(units.len() as u16).to_le_bytes());
    for u in units {
        out.extend_from_slice(&u.to_le_bytes());
    }
    out.extend_from_slice(&0u16.to_le_bytes());
}

/// ins.itable: a row per instruction and variant; decoded instructions and disassembly
/// strings in the extra area, each identical one once.
pub fn instructions(dir: &Path, rows: &[Row]) -> Result<(), UmtError> {
    let mut extra = Vec::new();
    let mut strings: HashMap<&str, u64> = HashMap::new();
    let mut decoded: HashMap<&[u8], u64> = HashMap::new();
    let mut table = Vec::with_capacity(rows.len() * INS_REC);
    for (id, r) in rows.iter().enumerate() {
        let s = *strings.entry(&r.disasm).or_insert_with(|| {
            let at = extra.len() as u64;
            c_str(&mut extra, &r.disasm);
            at
        });
        let d = *decoded.entry(&r.decoded).or_insert_with(|| {
            let at = extra.len() as u64;
            extra.extend_from_slice(&r.decoded);
            at
        });
        table.extend_from_slice(&ins_rec(id as u64, r, s, d));
    }
    let h = header(1, rows.len() as u64, INS_REC as u64, Some(extra.len() as u64));
    write(dir, "ins.itable", &[&h, &table, &extra])
}

/// A module row: its span and path.
pub struct ModuleRow<'a> {
    pub load: u64,
    pub unload: Option<u64>,
    pub start: u64,
    pub end: u64,
    pub path: &'a str,
}

/// module.itable: the path stands for both names (Windows and device).
pub fn modules(dir: &Path, mods: &[ModuleRow]) -> Result<(), UmtError> {
    let extra_at = 48 + 48 * mods.len() as u64;
    let mut extra = Vec::new();
    let mut table = Vec::with_capacity(48 * mods.len());
    for m in mods {
        let name = extra_at + extra.len() as u64;
        u_str(&mut extra, m.path);
        table.extend_from_slice(&m.load.to_le_bytes());
        table.extend_from_slice(&m.unload.unwrap_or(u64::MAX).to_le_bytes());
        table.extend_from_slice(&m.start.to_le_bytes());
        table.extend_from_slice(&m.end.to_le_bytes());
        table.extend_from_slice(&name.to_le_bytes());
        table.extend_from_slice(&name.to_le_bytes());
    }
    let h = header(0, mods.len() as u64, 48, Some(extra.len() as u64));
    write(dir, "module.itable", &[&h, &table, &extra])
}

/// A thread row.
pub struct ThreadRow {
    pub tid: u32,
    pub tls: u64,
    pub first: Option<u64>,
    pub last: Option<u64>,
    pub records: u64,
}

/// thread.itable.
pub fn threads(dir: &Path, threads: &[ThreadRow]) -> Result<(), UmtError> {
    let mut table = Vec::with_capacity(48 * threads.len());
    for (i, t) in threads.iter().enumerate() {
        table.extend_from_slice(&(i as u32).to_le_bytes());
        table.extend_from_slice(&t.tid.to_le_bytes());
        table.extend_from_slice(&t.tls.to_le_bytes());
        table.extend_from_slice(&t.first.unwrap_or(u64::MAX).to_le_bytes());
        table.extend_from_slice(&t.last.unwrap_or(u64::MAX).to_le_bytes());
        table.extend_from_slice(&t.records.to_le_bytes());
        table.extend_from_slice(&[0u8; 8]);
    }
    write(dir, "thread.itable", &[&header(0, threads.len() as u64, 48, None), &table])
}

/// address_space.itable from the sorted page numbers touched: runs of pages as ranges.
pub fn address_space(dir: &Path, pages: &[u64]) -> Result<u64, UmtError> {
    let mut table = Vec::new();
    let mut rows = 0u64;
    let mut k = 0;
    while k < pages.len() {
        let first = pages[k];
        let mut last = first;
        while k + 1 < pages.len() && pages[k + 1] == last + 1 {
            k += 1;
            last = pages[k];
        }
        k += 1;
        table.extend_from_slice(&(first << 12).to_le_bytes());
        table.extend_from_slice(&((last << 12) | 0xfff).to_le_bytes());
        rows += 1;
    }
    write(dir, "address_space.itable", &[&header(0, rows, 16, None), &table])?;
    Ok(rows)
}

/// context_map.itable, and the system-call table, which holds no call: the profile has
/// no system-call arguments or results.
pub fn fixed(dir: &Path) -> Result<(), UmtError> {
    write(dir, "context_map.itable", &[&registers::context_map()])?;
    let mut h = [0u8; 16];
    h[4..8].copy_from_slice(&1u32.to_le_bytes());
    write(dir, "syscall.vtable", &[&h])?;
    write(dir, "syscall.offsets", &[])
}

/// Escapes text for XML.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => o.push_str("&#xFFFD;"),
            c => o.push(c),
        }
    }
    o
}

/// What trace.xml says of the run.
pub struct About<'a> {
    pub profile: &'a dep_profile::container::Profile,
    pub records: u64,
}

/// trace.xml: the run, what is not known, and the name of every number the tables use
/// (iced-x86's enumerations stand where the format names XED's).
pub fn trace_xml(dir: &Path, a: &About) -> Result<(), UmtError> {
    use iced_x86::{Code, FlowControl, Mnemonic};
    use std::fmt::Write as _;
    let p = a.profile;
    let mut x = String::new();
    let _ = writeln!(x, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>");
    let _ = writeln!(x, "<Trace>");
    let _ = writeln!(x, "  <Xed><Version>none</Version><Note>Category, Mnemonic, Form and register numbers are iced-x86's FlowControl, Mnemonic, Code and Register values, named in Enums below; not XED's.</Note></Xed>");
    let _ = writeln!(x, "  <App>");
    let _ = writeln!(x, "    <ProcessID>{}</ProcessID>", p.meta.pid);
    let _ = writeln!(x, "    <Program>{}</Program>", esc(&p.meta.program));
    let _ = writeln!(x, "    <CommandLine>{}</CommandLine>", esc(&p.meta.command.join(" ")));
    for arg in &p.meta.command {
        let _ = writeln!(x, "    <Arg>{}</Arg>", esc(arg));
    }
    match &p.end {
        Some(e) => {
            let _ = writeln!(x, "    <ExitStatus>{}</ExitStatus>", e.exit_status);
        }
        None => {
            let _ = writeln!(x, "    <ExitStatus>unknown</ExitStatus>");
        }
    }
    let _ = writeln!(x, "    <StartTimeNs>{}</StartTimeNs>", p.meta.start_time_ns);
    let _ = writeln!(x, "  </App>");
    let _ = writeln!(
        x,
        "  <Tool><Name>dep</Name><Version>{}</Version><ProfileTool>{}</ProfileTool></Tool>",
        env!("CARGO_PKG_VERSION"),
        esc(&p.meta.tool)
    );
    let _ = writeln!(x, "  <Records>{}</Records>", a.records);
    let _ = writeln!(x, "  <Modules>");
    for (i, m) in p.modules.iter().filter(|m| m.event == dep_profile::container::ModuleEventKind::Load).enumerate() {
        let _ = writeln!(
            x,
            "    <Module ID=\"{i}\" Path=\"{}\" Base=\"0x{:x}\" Size=\"{}\" BuildID=\"{}\"/>",
            esc(&m.path),
            m.base,
            m.size,
            m.build_id.as_deref().unwrap_or("")
        );
    }
    let _ = writeln!(x, "  </Modules>");
    let _ = writeln!(x, "  <Unknown>");
    for (what, why) in [
        ("OperandValues", "Register and memory values in instruction records are zero: the profile holds addresses, not values. Every instruction record has flags 0x10 and 0x20 (inputs and outputs not reliable). Memory slots' addresses are exact."),
        ("RegisterContexts", "Context records (thread begin, signal delivery and return) carry no register dump: context_map DumpSize is 0."),
        ("ThreadExitCode", "Thread end records hold exit code 0: the profile does not record a thread's."),
        ("ModuleLoadEID", "Module LoadEID is 0 and an unloaded module's UnloadEID is the record count: the profile keeps the order of module events, not their place among records."),
        ("SystemCalls", "The system-call table is empty: the profile records no system-call numbers, arguments or results. The syscall instruction's insRec.Type is 3."),
        ("Flags", "The register flags are not in local contexts: iced-x86 reports them apart from registers."),
        ("ConditionalNotExecuted", "Flag 0x04 marks only rep strings that made no iteration; conditional branches and moves are not marked."),
        ("TIBAddr", "A thread's TIBAddr is the thread pointer given when it was created (0 for the first thread)."),
    ] {
        let _ = writeln!(x, "    <{what}>{}</{what}>", esc(why));
    }
    let _ = writeln!(x, "  </Unknown>");
    let _ = writeln!(x, "  <Enums source=\"iced-x86\">");
    let _ = writeln!(x, "    <Registers>");
    for n in 0..registers::COUNT {
        let _ = writeln!(x, "      <R ID=\"{n}\">{}</R>", registers::name(n));
    }
    for (n, name) in [(registers::MEM0, "mem0"), (registers::MEM1, "mem1"), (registers::AGEN, "agen")] {
        let _ = writeln!(x, "      <R ID=\"{n}\">{name}</R>");
    }
    let _ = writeln!(x, "    </Registers>");
    let _ = writeln!(x, "    <Categories>");
    for f in FlowControl::values() {
        let _ = writeln!(x, "      <C ID=\"{}\">{f:?}</C>", f as u16);
    }
    let _ = writeln!(x, "    </Categories>");
    let _ = writeln!(x, "    <Mnemonics>");
    for m in Mnemonic::values() {
        let _ = writeln!(x, "      <M ID=\"{}\">{}</M>", m as u16, format!("{m:?}").to_lowercase());
    }
    let _ = writeln!(x, "    </Mnemonics>");
    let _ = writeln!(x, "    <Forms>");
    for c in Code::values() {
        let _ = writeln!(x, "      <F ID=\"{}\">{c:?}</F>", c as u16);
    }
    let _ = writeln!(x, "    </Forms>");
    let _ = writeln!(x, "  </Enums>");
    let _ = writeln!(x, "</Trace>");
    write(dir, "trace.xml", &[x.as_bytes()])
}
