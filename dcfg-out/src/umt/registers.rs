//! Register numbers in the trace: iced-x86's [`Register`] values, the pseudo registers the
//! format names after them, the relations §11.1 of the format defines (common name, largest
//! enclosing register), and the context map file that states them.

use iced_x86::Register;

/// iced-x86's register count: the pseudo registers are numbered from here.
pub const ICED_REGISTERS: u16 = 256;
/// An output on the stack below the stack pointer (push, call).
pub const STACKPUSH: u16 = ICED_REGISTERS;
/// An input on the stack at the stack pointer (pop, ret).
pub const STACKPOP: u16 = ICED_REGISTERS + 1;
/// FS's base address, for a memory phrase with an FS override.
pub const FS_BASE: u16 = ICED_REGISTERS + 2;
/// GS's base address.
pub const GS_BASE: u16 = ICED_REGISTERS + 3;
/// Register names the context map describes.
pub const COUNT: u16 = ICED_REGISTERS + 4;
/// The format's first memory operand.
pub const MEM0: u16 = 0xffff;
/// The format's second memory operand.
pub const MEM1: u16 = 0xfffe;
/// An address computed and not accessed (lea).
pub const AGEN: u16 = 0xfffd;
/// Bytes of context_map.itable.
pub const CONTEXT_MAP_SIZE: usize = 17424;

// iced's numbering must stay what the trace names (its count is checked in the tests).
const _: () = assert!(COUNT as usize <= 512);

/// A register's number.
pub fn number(r: Register) -> u16 {
    r as u16
}

/// The register numbered `n`, if iced has one.
fn register(n: u16) -> Option<Register> {
    Register::try_from(n as usize).ok()
}

/// Lower-case name of register number `n` (pseudo registers included).
pub fn name(n: u16) -> String {
    match n {
        STACKPUSH => "stackpush".into(),
        STACKPOP => "stackpop".into(),
        FS_BASE => "fsbase".into(),
        GS_BASE => "gsbase".into(),
        _ => match register(n) {
            Some(Register::None) => "invalid".into(),
            Some(r) => format!("{r:?}").to_lowercase(),
            None => format!("reg{n}"),
        },
    }
}

/// The common name of §11.1: legacy general registers by their 16-bit name (rip by eip, the
/// narrowest iced has), r8-r15 by their 64-bit one, mmN by st(7-N), vector registers by
/// their xmm, everything else by itself.
pub fn common(n: u16) -> u16 {
    let Some(r) = register(n) else { return n };
    if r.is_gpr() {
        let full = r.full_register();
        let i = full as u16 - Register::RAX as u16;
        return if i < 8 { Register::AX as u16 + i } else { full as u16 };
    }
    if r == Register::RIP {
        return Register::EIP as u16;
    }
    if r.is_mm() {
        return Register::ST0 as u16 + (7 - (r as u16 - Register::MM0 as u16));
    }
    if r.is_xmm() || r.is_ymm() || r.is_zmm() {
        return Register::XMM0 as u16 + r.number() as u16;
    }
    n
}

/// The largest register enclosing `n` in 64-bit code (`wide`) or 32-bit code.
pub fn largest(n: u16, wide: bool) -> u16 {
    let Some(r) = register(n) else { return n };
    if r.is_mm() {
        return Register::ST0 as u16 + (7 - (r as u16 - Register::MM0 as u16));
    }
    let full = if wide { r.full_register() } else { r.full_register32() };
    full as u16
}

/// context_map.itable (§11.2): names, common names and largest enclosing registers of every
/// register number; no register is in the context dumps (DumpSize 0), as the profile holds
/// no register values.
pub fn context_map() -> Vec<u8> {
    let mut b = vec![0u8; CONTEXT_MAP_SIZE];
    b[2..4].copy_from_slice(&COUNT.to_le_bytes());
    for n in 0..512u16 {
        let common = if n < COUNT { common(n) } else { 0 };
        let at = 16 + 2 * n as usize;
        b[at..at + 2].copy_from_slice(&common.to_le_bytes());
        if n < COUNT {
            let nm = name(n);
            let bytes = &nm.as_bytes()[..nm.len().min(15)];
            let at = 1040 + 16 * n as usize;
            b[at..at + bytes.len()].copy_from_slice(bytes);
        }
        for (base, wide) in [(9232, false), (13328, true)] {
            let at = base + 8 * n as usize;
            b[at..at + 2].copy_from_slice(&0xffffu16.to_le_bytes());
            let eff = if n < COUNT { largest(n, wide) } else { 0 };
            b[at + 4..at + 6].copy_from_slice(&eff.to_le_bytes());
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iced_numbers_registers_as_the_trace_says() {
        assert_eq!(Register::values().len(), ICED_REGISTERS as usize);
        assert_eq!(number(Register::None), 0);
        assert_eq!(name(number(Register::RAX)), "rax");
        assert_eq!(name(STACKPUSH), "stackpush");
    }

    #[test]
    fn common_names_follow_the_format() {
        let c = |r: Register| name(common(number(r)));
        // §11.1's own examples.
        for r in [Register::AL, Register::AH, Register::AX, Register::EAX, Register::RAX] {
            assert_eq!(c(r), "ax");
        }
        assert_eq!(c(Register::SIL), "si");
        assert_eq!(c(Register::BPL), "bp");
        for r in [Register::R8L, Register::R8W, Register::R8D, Register::R8] {
            assert_eq!(c(r), "r8");
        }
        assert_eq!(c(Register::MM7), "st0");
        assert_eq!(c(Register::MM0), "st7");
        assert_eq!(c(Register::ZMM3), "xmm3");
        assert_eq!(c(Register::YMM3), "xmm3");
        assert_eq!(c(Register::K1), "k1");
        assert_eq!(name(largest(number(Register::AL), true)), "rax");
        assert_eq!(name(largest(number(Register::AL), false)), "eax");
    }

    #[test]
    fn the_context_map_has_its_size_and_no_dumped_register() {
        let m = context_map();
        assert_eq!(m.len(), CONTEXT_MAP_SIZE);
        assert_eq!(u16::from_le_bytes([m[0], m[1]]), 0, "DumpSize");
        let rax = number(Register::RAX) as usize;
        assert_eq!(&m[1040 + 16 * rax..1040 + 16 * rax + 4], b"rax\0");
        let at = 13328 + 8 * number(Register::EAX) as usize;
        assert_eq!(u16::from_le_bytes([m[at], m[at + 1]]), 0xffff);
        assert_eq!(m[at + 2], 0);
        assert_eq!(u16::from_le_bytes([m[at + 4], m[at + 5]]), number(Register::RAX));
    }
}
