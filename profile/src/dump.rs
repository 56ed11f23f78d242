//! Human-readable rendering of a whole profile (`dep dump`).

use crate::container::{ChunkView, Profile, ProfileError, Section};
use crate::regs::{Reg, RegSet};
use crate::tags::{TagDecoder, TagItem};
use crate::truth::{self, TruthKind};
use crate::values::ValueReader;
use crate::{BlockPlan, Semantics, Width};
use iced_x86::{Decoder, DecoderOptions, Formatter, IntelFormatter};
use std::io::{self, Write};

/// How much `dump` prints.
#[derive(Clone, Copy, Debug)]
pub struct DumpOptions {
    /// Items printed per stream per chunk (`None`: all).
    pub max_items: Option<usize>,
    /// Disassemble the block table with each instruction's semantics.
    pub disassemble: bool,
}

/// Errors while dumping: the profile's, or the output's.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error(transparent)]
    Profile(#[from] ProfileError),
    #[error("writing the dump: {0}")]
    Io(#[from] io::Error),
}

/// Writes the metadata, tables and decoded per-thread streams.
pub fn dump(p: &Profile, out: &mut dyn Write, opts: DumpOptions) -> Result<(), DumpError> {
    let m = &p.meta;
    writeln!(out, "profile {}", p.path())?;
    writeln!(out, "format version {}, {}-bit, written by {}", m.format_version, p.width.bits(), m.tool)?;
    writeln!(out, "command {}", shell_words(&m.command))?;
    writeln!(out, "program {} pid {} started {} ns", m.program, m.pid, m.start_time_ns)?;
    writeln!(out, "xsave area {} bytes, truth stream {}", m.xsave_size, if m.truth { "recorded" } else { "absent" })?;
    if let Some(w) = &m.windows {
        let instrs = if w.instrs == u64::MAX { "the rest".to_string() } else { w.instrs.to_string() };
        writeln!(
            out,
            "recorded in windows: from each thread's instruction {}, {instrs} instructions, {} windows, every {}",
            w.skip, w.count, w.every
        )?;
    }
    if m.start_at.is_some() || m.stop_at.is_some() {
        let f = |x: &Option<String>| x.clone().unwrap_or_else(|| "-".into());
        writeln!(out, "recorded between functions: from the first entry of {} to the return of {}", f(&m.start_at), f(&m.stop_at))?;
    }
    if m.attached {
        writeln!(out, "attached to the running process: each thread recorded from then on")?;
    }
    if let Some(link) = &m.parent {
        writeln!(out, "split from pid {} by {}", link.parent_pid, link.how)?;
    }
    match &p.end {
        Some(e) => writeln!(out, "ended: exit status {}, at {} ns, {} bytes lost", e.exit_status, e.end_time_ns, e.lost_bytes)?,
        None => writeln!(out, "ended: no end record (the writer stopped early)")?,
    }
    if let Some(t) = p.truncated_at {
        writeln!(out, "truncated: a torn record starts at byte {t}; everything before it is shown")?;
    }

    writeln!(out, "\nmodules ({})", p.modules.len())?;
    for md in &p.modules {
        writeln!(
            out,
            "  {:6} {:#014x}-{:#014x} {}{}",
            md.event,
            md.base,
            md.base + md.size,
            md.path,
            md.build_id.as_ref().map(|b| format!(" build-id {b}")).unwrap_or_default()
        )?;
    }

    writeln!(out, "\nblocks ({})", p.blocks().len())?;
    let mut sem = Semantics::new(p.machine());
    let mut fmt = IntelFormatter::new();
    for b in p.blocks() {
        let code = p.code(b);
        writeln!(out, "  {:#x} v{} {} insns {} bytes", b.addr, b.version, b.insn_count, code.len())?;
        if !opts.disassemble {
            continue;
        }
        let mut dec = Decoder::with_ip(p.width.bits() as u32, code, b.addr, DecoderOptions::NONE);
        for _ in 0..b.insn_count {
            if !dec.can_decode() {
                break;
            }
            let i = dec.decode();
            let mut text = String::new();
            fmt.format(&i, &mut text);
            let s = sem.insn(&i).describe(p.width);
            writeln!(out, "    {:#x}  {:32} {}", i.ip(), text, s)?;
        }
        if let Err(e) = BlockPlan::build(&mut sem, b.addr, code, Some(b.insn_count as usize)) {
            writeln!(out, "    error: {e}")?;
        }
    }

    writeln!(out, "\nthreads ({})", p.threads.len())?;
    for t in &p.threads {
        let mut sizes = [(0u64, 0u64); 3];
        for c in &t.chunks {
            let v = p.chunk(c)?;
            for s in Section::ALL {
                let (raw, comp) = v.lens(s);
                sizes[s as usize].0 += raw;
                sizes[s as usize].1 += comp;
            }
        }
        let fmt_t = |x: Option<u64>| x.map(|v| format!("{v} ns")).unwrap_or_else(|| "-".into());
        writeln!(out, "  thread {} tid {} start {} end {} chunks {}", t.index, t.tid, fmt_t(t.start_ns), fmt_t(t.end_ns), t.chunks.len())?;
        if let Some(s) = t.spawn {
            writeln!(out, "    created by thread {} after sync {}, TLS {:#x}", s.parent, s.seq, s.tls)?;
        }
        for s in Section::ALL {
            let (raw, comp) = sizes[s as usize];
            writeln!(out, "    {:6} {raw} bytes raw, {comp} bytes compressed", s.name())?;
        }
    }

    for t in &p.threads {
        writeln!(out, "\nthread {}", t.index)?;
        for c in &t.chunks {
            let v = p.chunk(c)?;
            dump_chunk(p, &v, out, opts)?;
        }
    }
    Ok(())
}

fn dump_chunk(p: &Profile, v: &ChunkView, out: &mut dyn Write, opts: DumpOptions) -> Result<(), DumpError> {
    let width = p.width;
    let cref = p.threads.iter().find(|t| t.index == v.thread()).and_then(|t| t.chunks.get(v.seq() as usize)).copied();
    let err = |why: String| match cref {
        Some(c) => DumpError::Profile(p.chunk_error(&c, why)),
        None => DumpError::Io(io::Error::other(why)),
    };
    let status = RegSet::from_bits(v.status());
    let regs = v.regs();
    writeln!(out, "  chunk {}{}: hi {:#x}", v.seq(), if v.is_last() { " (last)" } else { "" }, v.hi())?;
    if let Some(c) = cref.filter(|c| c.unrecorded > 0) {
        writeln!(out, "  after {} unrecorded instructions", c.unrecorded)?;
    }
    let ctx: Vec<String> =
        Reg::all().map(|r| format!("{}{}={:#x}", r.name(width), if status.contains(r) { "*" } else { "" }, regs[r.index()])).collect();
    writeln!(out, "    context (* = current): {}", ctx.join(" "))?;
    let limit = opts.max_items.unwrap_or(usize::MAX);

    let tags = v.decompress(Section::Tags).map_err(|e| err(e.to_string()))?;
    writeln!(out, "    DEP_c: {} bytes", tags.len())?;
    let mut dec = TagDecoder::new(width, &tags, v.hi()).map_err(|e| err(e.to_string()))?;
    let mut n = 0usize;
    loop {
        let off = dec.word_offset();
        let item = match dec.next_item() {
            Ok(Some(i)) => i,
            Ok(None) => break,
            Err(e) => {
                writeln!(out, "      error: {e}")?;
                break;
            }
        };
        if n < limit {
            match item {
                TagItem::Block(a) => writeln!(out, "      {off:8}  block {a:#x}")?,
                TagItem::Escape(e) => writeln!(out, "      {off:8}  {e:?}")?,
            }
        }
        n += 1;
    }
    if n > limit {
        writeln!(out, "      ... {} more items", n - limit)?;
    }

    let vals = v.decompress(Section::Values).map_err(|e| err(e.to_string()))?;
    writeln!(out, "    DEP_m: {} bytes", vals.len())?;
    let mut r = ValueReader::new(width, &vals);
    let total = vals.len() / width.bytes();
    for k in 0..total.min(limit) {
        let x = r.next().map_err(|e| err(e.to_string()))?;
        match width {
            Width::W64 => writeln!(out, "      {k:8}  {x:#018x}")?,
            Width::W32 => writeln!(out, "      {k:8}  {x:#010x}")?,
        }
    }
    if total > limit {
        writeln!(out, "      ... {} more values", total - limit)?;
    }

    let tr = v.decompress(Section::Truth).map_err(|e| err(e.to_string()))?;
    if !tr.is_empty() {
        writeln!(out, "    truth: {} bytes", tr.len())?;
        let recs = truth::records(&tr).map_err(|e| err(e.to_string()))?;
        let mut n = 0usize;
        for rec in recs {
            let rec = rec.map_err(|e| err(e.to_string()))?;
            if n < limit {
                match rec.kind {
                    TruthKind::Block => writeln!(out, "      block {:#x} {} insns", rec.pc, rec.size)?,
                    TruthKind::Read => writeln!(out, "      {:#x} R {:#x} {}", rec.pc, rec.addr, rec.size)?,
                    TruthKind::Write => writeln!(out, "      {:#x} W {:#x} {}", rec.pc, rec.addr, rec.size)?,
                    TruthKind::Interrupted => writeln!(out, "      interrupted at instruction {}", rec.size)?,
                    TruthKind::Rep => writeln!(out, "      {:#x} rep string, {}-byte elements", rec.pc, rec.size)?,
                    TruthKind::RepRead => writeln!(out, "        R from {:#x} by {}", rec.pc, rec.addr as i64)?,
                    TruthKind::RepWrite => writeln!(out, "        W from {:#x} by {}", rec.pc, rec.addr as i64)?,
                    TruthKind::RepEnd => writeln!(out, "        {} iterations", rec.addr)?,
                    TruthKind::SyscallReturn => writeln!(out, "      {:#x} system call returned {}", rec.pc, rec.addr as i64)?,
                    TruthKind::KernelRead => writeln!(out, "        kernel R {:#x} {}", rec.addr, rec.size)?,
                    TruthKind::KernelWrite => writeln!(out, "        kernel W {:#x} {}", rec.addr, rec.size)?,
                }
            }
            n += 1;
        }
        if n > limit {
            writeln!(out, "      ... {} more records", n - limit)?;
        }
    }
    Ok(())
}

fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c)) {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
