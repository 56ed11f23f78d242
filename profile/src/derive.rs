//! Register values computed from other register values (format 6): `mov rdx, rax`,
//! `movsxd rdx, ecx`, `add ecx, 1`, `lea r11, [rdx+rdx*8]`, `xor eax, eax`, `mov esi, 5`.
//!
//! An instruction whose result depends only on registers and constants (no memory, no
//! flags) is a [`Derive`]. Where its sources are current, the recoverer computes its result
//! with [`Derive::eval`] instead of reading it from DEP_m, so the collector need not record
//! it: an interpreter's `pc` and `sp`, kept in 32-bit registers and sign-extended into
//! indices, stay current from block to block instead of being recorded at every use. Block
//! plans decide where a derived register is current (`blocks.rs`).

use crate::regs::{Reg, RegSet};
use iced_x86::{Instruction, Mnemonic, OpKind, Register};

/// A source operand: the low `bits` of a general register, or a constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Src {
    Reg(Reg, u8),
    Imm(u64),
}

impl Src {
    #[inline(always)]
    fn read(self, vals: &[u64]) -> u64 {
        match self {
            Src::Reg(r, bits) => vals[r.index()] & mask(bits),
            Src::Imm(v) => v,
        }
    }

    /// The register read, if any.
    pub fn reg(self) -> Option<Reg> {
        match self {
            Src::Reg(r, _) => Some(r),
            Src::Imm(_) => None,
        }
    }
}

/// What a [`Derive`] computes from its sources `a` and `b`, in `bits`-bit arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeriveOp {
    /// `a` (mov, movzx: the source is read at its own width).
    Mov,
    /// `a` sign-extended from its own width (movsx, movsxd, cdqe, cwde).
    Sext,
    Add,
    Sub,
    And,
    Or,
    Xor,
    /// The low bits of `a * b` (the same for signed and unsigned operands).
    Imul,
    /// `a << b`, the count masked to 5 or 6 bits as the hardware does.
    Shl,
    Shr,
    Sar,
    Neg,
    Not,
    /// `a + b * scale + disp` truncated to `addr_bits` (lea; `a`, `b` are base and index).
    Lea {
        scale: u8,
        disp: u64,
        addr_bits: u8,
    },
}

/// A register set to a function of registers and constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Derive {
    pub dst: Reg,
    /// Operation size: 32 (the result is zero-extended, as x86-64 does) or 64.
    pub bits: u8,
    pub op: DeriveOp,
    pub a: Src,
    pub b: Src,
}

/// The low `bits` bits (all 64 from 64 on).
#[inline(always)]
pub(crate) fn mask(bits: u8) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

#[inline(always)]
fn sext(v: u64, bits: u8) -> u64 {
    let s = 64 - bits as u32;
    (((v << s) as i64) >> s) as u64
}

impl Derive {
    /// The registers the result depends on.
    pub fn sources(&self) -> RegSet {
        [self.a.reg(), self.b.reg()].into_iter().flatten().collect()
    }

    /// The destination's new value, from register values indexed by [`Reg::index`].
    #[inline]
    pub fn eval(&self, vals: &[u64]) -> u64 {
        let x = self.a.read(vals);
        let y = self.b.read(vals);
        let count = (y & (self.bits as u64 - 1)) as u32;
        let r = match self.op {
            DeriveOp::Mov => x,
            DeriveOp::Sext => match self.a {
                Src::Reg(_, from) => sext(x, from),
                Src::Imm(v) => v,
            },
            DeriveOp::Add => x.wrapping_add(y),
            DeriveOp::Sub => x.wrapping_sub(y),
            DeriveOp::And => x & y,
            DeriveOp::Or => x | y,
            DeriveOp::Xor => x ^ y,
            DeriveOp::Imul => x.wrapping_mul(y),
            DeriveOp::Shl => x << count,
            DeriveOp::Shr => (x & mask(self.bits)) >> count,
            DeriveOp::Sar => ((sext(x, self.bits) as i64) >> count) as u64,
            DeriveOp::Neg => x.wrapping_neg(),
            DeriveOp::Not => !x,
            DeriveOp::Lea { scale, disp, addr_bits } => x.wrapping_add(y.wrapping_mul(scale as u64)).wrapping_add(disp) & mask(addr_bits),
        };
        r & mask(self.bits)
    }

    /// Writes the derivation in assembly-like form (`rdx = sext(ecx)`), for `dep dump`.
    pub fn describe(&self) -> String {
        let src = |s: Src| match s {
            Src::Reg(r, bits) => format!("{}:{bits}", r.name(crate::Width::W64)),
            Src::Imm(v) => format!("{v:#x}"),
        };
        let (a, b) = (src(self.a), src(self.b));
        let e = match self.op {
            DeriveOp::Mov => a,
            DeriveOp::Sext => format!("sext({a})"),
            DeriveOp::Add => format!("{a} + {b}"),
            DeriveOp::Sub => format!("{a} - {b}"),
            DeriveOp::And => format!("{a} & {b}"),
            DeriveOp::Or => format!("{a} | {b}"),
            DeriveOp::Xor => format!("{a} ^ {b}"),
            DeriveOp::Imul => format!("{a} * {b}"),
            DeriveOp::Shl => format!("{a} << {b}"),
            DeriveOp::Shr => format!("{a} >> {b}"),
            DeriveOp::Sar => format!("{a} >>s {b}"),
            DeriveOp::Neg => format!("-{a}"),
            DeriveOp::Not => format!("!{a}"),
            DeriveOp::Lea { scale, disp, addr_bits } => {
                let mut t: Vec<String> = Vec::new();
                if self.a != Src::Imm(0) {
                    t.push(a);
                }
                if self.b != Src::Imm(0) {
                    t.push(format!("{b}*{scale}"));
                }
                if disp != 0 || t.is_empty() {
                    t.push(format!("{disp:#x}"));
                }
                format!("({}):{addr_bits}", t.join(" + "))
            }
        };
        format!("{}:{} = {e}", self.dst.name(crate::Width::W64), self.bits)
    }
}

/// A general register operand as a source: its low byte, word, dword or all of it. The
/// high-byte registers (ah, ...) are not sources.
fn reg_src(r: Register) -> Option<Src> {
    if !r.is_gpr() || matches!(r, Register::AH | Register::CH | Register::DH | Register::BH) {
        return None;
    }
    let reg = Reg::from_iced(r)?;
    (reg.index() < 16).then_some(Src::Reg(reg, (r.size() * 8) as u8))
}

/// An immediate operand of any size (the value `Instruction::immediate` gives).
pub(crate) fn is_imm(k: OpKind) -> bool {
    matches!(
        k,
        OpKind::Immediate8
            | OpKind::Immediate8to16
            | OpKind::Immediate8to32
            | OpKind::Immediate8to64
            | OpKind::Immediate16
            | OpKind::Immediate32
            | OpKind::Immediate32to64
            | OpKind::Immediate64
    )
}

/// Operand `n` as a source: a register or an immediate; memory is not.
fn operand(i: &Instruction, n: u32) -> Option<Src> {
    match i.op_kind(n) {
        OpKind::Register => reg_src(i.op_register(n)),
        k if is_imm(k) => Some(Src::Imm(i.immediate(n))),
        _ => None,
    }
}

/// The derivation an instruction of 64-bit code performs, if it is one: it writes a whole
/// 32- or 64-bit general register (a 32-bit write zero-extends it) from registers and
/// constants only. Flag-reading forms (adc, sbb, cmov, setcc), memory sources, 8- and 16-bit
/// destinations (which keep the register's other bytes) and two-result instructions are not.
pub fn derive_of(i: &Instruction) -> Option<Derive> {
    use DeriveOp::*;
    let m = i.mnemonic();
    // The implicit forms first: cdqe, cwde, cqo, cdq.
    let implicit = match m {
        Mnemonic::Cdqe => Some((Register::RAX, Sext, Register::EAX, None)),
        Mnemonic::Cwde => Some((Register::EAX, Sext, Register::AX, None)),
        Mnemonic::Cqo => Some((Register::RDX, Sar, Register::RAX, Some(63))),
        Mnemonic::Cdq => Some((Register::EDX, Sar, Register::EAX, Some(31))),
        _ => None,
    };
    if let Some((dst, op, a, count)) = implicit {
        let bits = (dst.size() * 8) as u8;
        let b = Src::Imm(count.unwrap_or(0));
        return Some(Derive { dst: Reg::from_iced(dst)?, bits, op, a: reg_src(a)?, b });
    }
    if i.op_count() == 0 || i.op0_kind() != OpKind::Register {
        return None;
    }
    let d = i.op0_register();
    if !d.is_gpr() || !(d.size() == 4 || d.size() == 8) {
        return None;
    }
    let dst = Reg::from_iced(d)?;
    let bits = (d.size() * 8) as u8;
    let whole = Src::Reg(dst, bits);
    let imm0 = Src::Imm(0);
    let two = |op: DeriveOp| -> Option<(DeriveOp, Src, Src)> {
        if i.op_count() != 2 {
            return None;
        }
        let b = operand(i, 1)?;
        // xor r, r and sub r, r: zero whatever r held.
        if matches!(op, Xor | Sub) && i.op1_kind() == OpKind::Register && i.op1_register() == d {
            return Some((Mov, imm0, imm0));
        }
        Some((op, whole, b))
    };
    let (op, a, b) = match m {
        Mnemonic::Mov if i.op_count() == 2 => (Mov, operand(i, 1)?, imm0),
        Mnemonic::Movzx => (Mov, operand(i, 1)?, imm0),
        Mnemonic::Movsx | Mnemonic::Movsxd => (Sext, operand(i, 1)?, imm0),
        Mnemonic::Add => two(Add)?,
        Mnemonic::Sub => two(Sub)?,
        Mnemonic::And => two(And)?,
        Mnemonic::Or => two(Or)?,
        Mnemonic::Xor => two(Xor)?,
        Mnemonic::Shl | Mnemonic::Sal => two(Shl)?,
        Mnemonic::Shr => two(Shr)?,
        Mnemonic::Sar => two(Sar)?,
        Mnemonic::Inc if i.op_count() == 1 => (Add, whole, Src::Imm(1)),
        Mnemonic::Dec if i.op_count() == 1 => (Sub, whole, Src::Imm(1)),
        Mnemonic::Neg if i.op_count() == 1 => (Neg, whole, imm0),
        Mnemonic::Not if i.op_count() == 1 => (Not, whole, imm0),
        Mnemonic::Imul => match i.op_count() {
            2 => two(Imul)?,
            3 => (Imul, operand(i, 1)?, operand(i, 2)?),
            _ => return None,
        },
        Mnemonic::Lea => {
            if i.op1_kind() != OpKind::Memory {
                return None;
            }
            let addr_bits = match i.memory_base().size().max(i.memory_index().size()) {
                0 | 8 => 64,
                4 => 32,
                _ => return None,
            };
            let part = |r: Register| -> Option<Src> {
                match r {
                    Register::None => Some(imm0),
                    r if r.is_ip() => Some(imm0),
                    r => reg_src(r),
                }
            };
            let (a, b) = (part(i.memory_base())?, part(i.memory_index())?);
            // For rip-relative operands iced gives the absolute target as the displacement.
            let disp = i.memory_displacement64();
            let scale = if i.memory_index() == Register::None { 1 } else { i.memory_index_scale() as u8 };
            (Lea { scale, disp, addr_bits }, a, b)
        }
        _ => return None,
    };
    Some(Derive { dst, bits, op, a, b })
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions};

    fn one(bytes: &[u8]) -> Option<Derive> {
        derive_of(&Decoder::with_ip(64, bytes, 0x1000, DecoderOptions::NONE).decode())
    }

    /// Values the SDM's definitions give (worked by hand), for each form.
    #[test]
    fn forms_compute_what_the_sdm_says() {
        let mut v = [0u64; 18];
        v[0] = 0xffff_ffff_8000_0005; // rax
        v[1] = 0x1_0000_0003; // rcx
        v[2] = 0x10; // rdx
        let cases: &[(&[u8], u64)] = &[
            (&[0x48, 0x63, 0xd0], 0xffff_ffff_8000_0005), // movsxd rdx, eax
            (&[0x48, 0x89, 0xc2], 0xffff_ffff_8000_0005), // mov rdx, rax
            (&[0x89, 0xc2], 0x8000_0005),                 // mov edx, eax
            (&[0x83, 0xc2, 0xff], 0x0f),                  // add edx, -1
            (&[0x83, 0xc0, 0x01], 0x8000_0006),           // add eax, 1 (zero-extends)
            (&[0x48, 0x98], 0xffff_ffff_8000_0005),       // cdqe
            (&[0x48, 0x99], u64::MAX),                    // cqo
            (&[0x31, 0xc0], 0),                           // xor eax, eax
            (&[0xba, 0x05, 0, 0, 0], 5),                  // mov edx, 5
            (&[0x48, 0x8d, 0x14, 0xc9], 0x9_0000_001b),   // lea rdx, [rcx+rcx*8]
            (&[0x8d, 0x50, 0xff], 0x8000_0004),           // lea edx, [rax-1]
            (&[0x48, 0xd3, 0xe2], 0x80),                  // shl rdx, cl (count 3)
            (&[0xc1, 0xf8, 0x04], 0xf800_0000),           // sar eax, 4
            (&[0xc1, 0xe8, 0x04], 0x0800_0000),           // shr eax, 4
            (&[0x48, 0x6b, 0xd1, 0x03], 0x3_0000_0009),   // imul rdx, rcx, 3
            (&[0x0f, 0xb6, 0xd1], 0x03),                  // movzx edx, cl
            (&[0x48, 0x0f, 0xbe, 0xd0], 0x05),            // movsx rdx, al
            (&[0x48, 0xf7, 0xda], 0xffff_ffff_ffff_fff0), // neg rdx
            (&[0x67, 0x8d, 0x14, 0x08], 0x8000_0008),     // lea edx, [eax+ecx]
        ];
        for (bytes, want) in cases {
            let d = one(bytes).unwrap_or_else(|| panic!("{bytes:x?} is not a derivation"));
            assert_eq!(d.eval(&v), *want, "{bytes:x?}: {}", d.describe());
        }
    }

    #[test]
    fn flags_memory_and_partial_writes_are_not_derivations() {
        for bytes in [
            &[0x48, 0x11, 0xc2][..],   // adc rdx, rax
            &[0x48, 0x0f, 0x44, 0xd0], // cmove rdx, rax
            &[0x48, 0x8b, 0x10],       // mov rdx, [rax]
            &[0x88, 0xc2],             // mov dl, al
            &[0x66, 0x89, 0xc2],       // mov dx, ax
            &[0x0f, 0xb6, 0xd4],       // movzx edx, ah
            &[0x48, 0xf7, 0xe9],       // imul rcx (rdx:rax)
            &[0x48, 0x01, 0x10],       // add [rax], rdx
        ] {
            assert_eq!(one(bytes), None, "{bytes:x?}");
        }
    }
}
