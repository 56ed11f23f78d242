//! The two WET text formats.

use super::statics::Statics;
use super::store::Reader;
use std::io::{self, Write};

/// Appends `v` in decimal.
#[inline]
fn dec(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// Appends `v` in lowercase hexadecimal, no prefix.
#[inline]
fn hex(out: &mut Vec<u8>, v: u64) {
    let digits = (64 - v.leading_zeros()).div_ceil(4).max(1);
    for k in (0..digits).rev() {
        out.push(b"0123456789abcdef"[(v >> (k * 4) & 15) as usize]);
    }
}

/// A field of the static line: no spaces (a space in a demangled name or a path becomes
/// `_`), `??` when absent.
pub fn field(s: Option<&str>) -> String {
    match s {
        Some(s) if !s.is_empty() => s.chars().map(|c| if c.is_whitespace() { '_' } else { c }).collect(),
        _ => "??".to_string(),
    }
}

/// Writes the comprehensive format: `N`, then each executed instruction's block in id
/// order. `place(id)` gives the static line's `file_name function_name line_num`.
pub fn comprehensive(
    st: &Statics,
    counts: &[u64],
    totals: &dyn Fn(u32) -> u64,
    reader: &mut Reader,
    place: &dyn Fn(u32) -> String,
    out: &mut dyn Write,
) -> io::Result<()> {
    let executed = counts.iter().filter(|&&c| c > 0).count();
    let mut buf = Vec::with_capacity(1 << 16);
    dec(&mut buf, executed as u64);
    buf.push(b'\n');
    let mut values = Vec::new();
    for (id, s) in st.insns.iter().enumerate() {
        if counts[id] == 0 {
            continue;
        }
        dec(&mut buf, id as u64);
        buf.push(b' ');
        dec(&mut buf, s.ports as u64);
        buf.push(b' ');
        hex(&mut buf, s.pc);
        buf.push(b' ');
        buf.extend_from_slice(place(id as u32).as_bytes());
        buf.push(b'\n');
        for port in 0..s.ports as u32 {
            let seg = s.first_seg + port;
            buf.extend_from_slice(b"SIZE ");
            dec(&mut buf, totals(seg));
            buf.push(b'\n');
            reader.deps(seg, &mut |d| {
                buf.extend_from_slice(b"    ");
                dec(&mut buf, d.inst);
                buf.push(b':');
                dec(&mut buf, d.dep_id as u64);
                buf.push(b' ');
                dec(&mut buf, d.dep_inst);
                buf.push(b'\n');
                if buf.len() >= 1 << 16 {
                    out.write_all(&buf)?;
                    buf.clear();
                }
                Ok(())
            })?;
        }
        reader.values(s.first_seg + s.ports as u32, &mut values)?;
        if values.is_empty() {
            buf.extend_from_slice(b"NO VALUES\n");
        } else {
            buf.extend_from_slice(b"VALUES ");
            dec(&mut buf, values.len() as u64);
            buf.push(b'\n');
            for &(inst, v) in &values {
                buf.extend_from_slice(b"    ");
                dec(&mut buf, inst);
                buf.push(b':');
                hex(&mut buf, v);
                buf.push(b'\n');
            }
        }
        if buf.len() >= 1 << 16 {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    out.write_all(&buf)
}

/// Writes the limited-history format: `a#b --> x#y`, oldest first.
pub fn history<'a>(ring: impl Iterator<Item = &'a [u64; 4]>, out: &mut dyn Write) -> io::Result<()> {
    let mut buf = Vec::with_capacity(1 << 16);
    for &[pc, inst, dpc, dinst] in ring {
        buf.extend_from_slice(b"0x");
        hex(&mut buf, pc);
        buf.push(b'#');
        dec(&mut buf, inst);
        buf.extend_from_slice(b" --> 0x");
        hex(&mut buf, dpc);
        buf.push(b'#');
        dec(&mut buf, dinst);
        buf.push(b'\n');
        if buf.len() >= 1 << 16 {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    out.write_all(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_fields() {
        let mut b = vec![];
        hex(&mut b, 0x8048242);
        b.push(b' ');
        hex(&mut b, 0);
        b.push(b' ');
        dec(&mut b, 18446744073709551615);
        assert_eq!(String::from_utf8(b).unwrap(), "8048242 0 18446744073709551615");
        assert_eq!(field(Some("f(int, char)")), "f(int,_char)");
        assert_eq!(field(None), "??");
    }
}
