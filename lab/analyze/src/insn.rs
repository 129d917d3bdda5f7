//! x86-64 instruction analysis: classes, registers, dependent pairs and fusion rules.
//!
//! Seed 003 §3.1 (Figure 2) classifies the dynamic instruction mix, §4.1 (Table 1) ranks
//! frequent *dependent* pairs (the first's destination is a source of the second) and §4.2
//! (Table 2) fuses integer/logic + branch pairs into one instruction. This module decodes the
//! workload's code with `iced-x86` once per static instruction and records what the dynamic
//! analysis needs.
//!
//! Decisions, for x86 rather than the seed's MIPS-like ISA:
//! - **Class**: control flow first (conditional branch, unconditional branch, call/return);
//!   then an instruction that writes memory is a *store* (read-modify-write included, push
//!   included), one that reads memory is a *load* (`add rax, [rbx]` counts as a load: the
//!   seed's RISC would need a load for it, and the ALU half is not counted again); then integer
//!   ALU (moves, LEA and flag-only compares included); everything else (SIMD, x87, system,
//!   NOP) is *other*. Instructions outside the decoded images are *unknown*.
//! - **Dependence**: the first writes a general-purpose or vector register (full register
//!   compared, so `eax` → `rax`) or flags (bit-exact: the flags modified by the first and read
//!   by the second) that the second reads. The stack pointer is ignored: push/pop/call chains
//!   would otherwise dominate every ranking while telling nothing about the protocol code.
//! - **Fusion** categories of a static pair (first, next instruction), [`FuseCat`]:
//!   seed type 1 = integer/logic op with a register destination (x86 two-operand forms always
//!   have rd1 == rs1) followed by a Jcc reading its flags; seed type 2 = a compare (`cmp` /
//!   `test`, whose result feeds only the branch, like MIPS `slt`/`sltiu` + `bne $0`) followed by a
//!   Jcc; *R-type* if the first's source is a register, *I-type* if an immediate (inc/dec
//!   count as I-type). No memory operand in either seed type (the seed's first instructions
//!   are register-register or register-immediate). Intel macro-fusion (Sandy Bridge to
//!   Skylake, Intel optimization manual §3.4.2.2): CMP/TEST/ADD/SUB/AND/INC/DEC + Jcc; TEST and
//!   AND with every Jcc; CMP, ADD, SUB not with JO/JNO/JS/JNS/JP/JNP; INC, DEC only with
//!   JE/JNE/JL/JGE/JLE/JG; never memory + immediate; ADD/SUB/AND/INC/DEC only with a register
//!   destination. AMD Zen 1/2: CMP/TEST + Jcc, never memory + immediate.
//! - **Repeated string instructions** (`rep stosb`, `rep movsq`, `repe cmpsb`, `repne scasb`,
//!   ...): one static instruction whose [`Insn::rep`] records the prefix and the element size.
//!   valgrind reports one instruction fetch per *iteration* of such an instruction; the analysis
//!   ([`crate::analysis`]) folds them into one dynamic instruction per execution and reports the
//!   iterations and bytes apart ([`crate::analysis::RepStats`]).

use iced_x86::{
    Code, ConditionCode, Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory,
    Mnemonic, OpAccess, OpKind, Register,
};

/// Dynamic instruction-mix classes of seed 003 Figure 2 (plus `Unknown`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// Integer ALU (moves, LEA, compares included).
    IntAlu,
    /// Memory read.
    Load,
    /// Memory write (read-modify-write included).
    Store,
    /// Conditional branch.
    CondBranch,
    /// Unconditional branch (direct or indirect jump).
    UncondBranch,
    /// Call or return.
    CallRet,
    /// SIMD, floating point, system, NOP.
    Other,
    /// Not decoded (outside the workload's images).
    Unknown,
}

impl Class {
    /// All classes, in report order.
    pub const ALL: [Class; 8] = [
        Class::IntAlu,
        Class::Load,
        Class::Store,
        Class::CondBranch,
        Class::UncondBranch,
        Class::CallRet,
        Class::Other,
        Class::Unknown,
    ];

    /// Short name used in tables.
    pub fn name(self) -> &'static str {
        match self {
            Class::IntAlu => "integer ALU",
            Class::Load => "load",
            Class::Store => "store",
            Class::CondBranch => "conditional branch",
            Class::UncondBranch => "unconditional branch",
            Class::CallRet => "call/return",
            Class::Other => "other",
            Class::Unknown => "unknown (not decoded)",
        }
    }
}

/// Fusion categories of a static pair, as bits of [`Insn::fuse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FuseCat {
    /// Seed type 1, R-type.
    T1R = 0,
    /// Seed type 1, I-type.
    T1I = 1,
    /// Seed type 2, R-type.
    T2R = 2,
    /// Seed type 2, I-type.
    T2I = 3,
    /// Intel macro-fusion.
    Intel = 4,
    /// AMD Zen macro-fusion.
    Zen = 5,
}

/// A fusion alternative: a name and the set of [`FuseCat`] bits it fuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FusionAlt {
    /// Seed 003 §4.3 naming (`--`, `i-`, `rb`, ...) or `intel`, `zen`.
    pub name: String,
    /// Bit mask over [`FuseCat`].
    pub mask: u8,
}

/// The sixteen alternatives of seed 003 §4.3 (type 1 × type 2 ∈ {-, i, r, b}) then Intel and Zen.
pub fn fusion_alternatives() -> Vec<FusionAlt> {
    let part = [('-', 0u8), ('i', 1), ('r', 2), ('b', 3)];
    let mut v = Vec::new();
    for (c1, m1) in part {
        for (c2, m2) in part {
            // m bit 0 = I, bit 1 = R; type 1 bits: T1I (1), T1R (0); type 2: T2I (3), T2R (2).
            let mut mask = 0u8;
            if m1 & 1 != 0 {
                mask |= 1 << FuseCat::T1I as u8;
            }
            if m1 & 2 != 0 {
                mask |= 1 << FuseCat::T1R as u8;
            }
            if m2 & 1 != 0 {
                mask |= 1 << FuseCat::T2I as u8;
            }
            if m2 & 2 != 0 {
                mask |= 1 << FuseCat::T2R as u8;
            }
            v.push(FusionAlt {
                name: format!("{c1}{c2}"),
                mask,
            });
        }
    }
    v.push(FusionAlt {
        name: "intel".into(),
        mask: 1 << FuseCat::Intel as u8,
    });
    v.push(FusionAlt {
        name: "zen".into(),
        mask: 1 << FuseCat::Zen as u8,
    });
    v
}

/// The repeat prefix and element size of a `rep`/`repe`/`repne`-prefixed string instruction
/// (`movs`, `stos`, `lods`, `cmps`, `scas`, `ins`, `outs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rep {
    /// `true` for an F2 prefix (`repne`/`repnz`), `false` for F3 (`rep`, `repe`/`repz`).
    pub ne: bool,
    /// Bytes per iteration and string: 1 for `stosb`, 2 for `stosw`, 4 for `stosd`, 8 for
    /// `stosq`, the same for `movs`, `lods`, `cmps`, `scas`, `ins` and `outs`.
    pub elem: u8,
}

impl Rep {
    /// The prefix and element size of `i`, if it is a repeat-prefixed string instruction
    /// (`rep ret`, `pause` = `rep nop`, `tzcnt` = `rep bsf` and SSE `movsd`/`cmpsd` are not).
    pub fn of(i: &Instruction) -> Option<Rep> {
        if !i.is_string_instruction()
            || !(i.has_rep_prefix() || i.has_repe_prefix() || i.has_repne_prefix())
        {
            return None;
        }
        Some(Rep {
            ne: i.has_repne_prefix(),
            elem: i.memory_size().size().clamp(1, 64) as u8,
        })
    }

    /// Whether the instruction compares (`cmps`, `scas`): it ends on a condition as well as on
    /// the count.
    pub fn compares(mnemonic: Mnemonic) -> bool {
        matches!(
            mnemonic,
            Mnemonic::Cmpsb
                | Mnemonic::Cmpsw
                | Mnemonic::Cmpsd
                | Mnemonic::Cmpsq
                | Mnemonic::Scasb
                | Mnemonic::Scasw
                | Mnemonic::Scasd
                | Mnemonic::Scasq
        )
    }

    /// Assembly-style name with the prefix, as `REP STOSB`, `REPE CMPSB` or `REPNE SCASB`.
    pub fn name(self, mnemonic: Mnemonic) -> String {
        let prefix = match (Rep::compares(mnemonic), self.ne) {
            (true, false) => "REPE",
            (true, true) => "REPNE",
            (false, _) => "REP",
        };
        format!("{prefix} {}", format!("{mnemonic:?}").to_ascii_uppercase())
    }
}

/// What the analysis needs of one static instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Encoded length in bytes.
    pub len: u8,
    /// Mix class.
    pub class: Class,
    /// Mnemonic (iced-x86).
    pub mnemonic: Mnemonic,
    /// Registers read (bit per full register, see [`reg_bit`]).
    pub reads: u64,
    /// Registers written.
    pub writes: u64,
    /// Flags read (iced-x86 `RflagsBits`).
    pub flags_read: u32,
    /// Flags modified.
    pub flags_written: u32,
    /// Fusion categories of the pair (this, next sequential instruction), bits of [`FuseCat`].
    pub fuse: u8,
    /// Latency class for the timing model: 1 simple, or more (mul, div).
    pub latency: u8,
    /// Repeat prefix and element size of a repeated string instruction (`rep stosb`, ...);
    /// `None` for every other instruction.
    pub rep: Option<Rep>,
}

impl Insn {
    /// An instruction that could not be decoded (outside any image), `len` bytes long.
    pub fn unknown(len: u8) -> Insn {
        Insn {
            len,
            class: Class::Unknown,
            mnemonic: Mnemonic::INVALID,
            reads: 0,
            writes: 0,
            flags_read: 0,
            flags_written: 0,
            fuse: 0,
            latency: 1,
            rep: None,
        }
    }

    /// Whether `self` followed by `next` is a dependent pair.
    #[inline]
    pub fn feeds(&self, next: &Insn) -> bool {
        self.writes & next.reads != 0 || self.flags_written & next.flags_read != 0
    }
}

/// Bit of a register in [`Insn::reads`]/[`Insn::writes`], or `None` (RSP, RIP, segment...).
pub fn reg_bit(r: Register) -> Option<u32> {
    if r == Register::None {
        return None;
    }
    let f = r.full_register();
    if f.is_gpr64() {
        let n = f as u32 - Register::RAX as u32;
        return (f != Register::RSP).then_some(n);
    }
    if f.is_zmm() {
        return Some(16 + (f as u32 - Register::ZMM0 as u32) % 32);
    }
    None
}

fn is_vec_or_fp(r: Register) -> bool {
    r.is_xmm() || r.is_ymm() || r.is_zmm() || r.is_st() || r.is_mm() || r.is_k()
}

/// Decodes and describes one instruction; `next` is the following instruction (for fusion).
pub fn describe(
    i: &Instruction,
    next: Option<&Instruction>,
    f: &mut InstructionInfoFactory,
) -> Insn {
    let info = f.info(i);
    let mut reads = 0u64;
    let mut writes = 0u64;
    let mut vec = false;
    for u in info.used_registers() {
        vec |= is_vec_or_fp(u.register());
        if let Some(b) = reg_bit(u.register()) {
            match u.access() {
                OpAccess::Read | OpAccess::CondRead => reads |= 1 << b,
                OpAccess::Write | OpAccess::CondWrite => writes |= 1 << b,
                OpAccess::ReadWrite | OpAccess::ReadCondWrite => {
                    reads |= 1 << b;
                    writes |= 1 << b
                }
                _ => {}
            }
        }
    }
    let (mut mread, mut mwrite) = (false, false);
    for m in info.used_memory() {
        match m.access() {
            OpAccess::Read | OpAccess::CondRead => mread = true,
            OpAccess::Write | OpAccess::CondWrite => mwrite = true,
            OpAccess::ReadWrite | OpAccess::ReadCondWrite => {
                mread = true;
                mwrite = true
            }
            _ => {}
        }
    }
    let mn = i.mnemonic();
    let class = match i.flow_control() {
        FlowControl::ConditionalBranch => Class::CondBranch,
        FlowControl::UnconditionalBranch | FlowControl::IndirectBranch => Class::UncondBranch,
        FlowControl::Call | FlowControl::IndirectCall | FlowControl::Return => Class::CallRet,
        FlowControl::Interrupt | FlowControl::Exception | FlowControl::XbeginXabortXend => {
            Class::Other
        }
        FlowControl::Next => {
            if mwrite {
                Class::Store
            } else if mread {
                Class::Load
            } else if vec
                || matches!(
                    mn,
                    Mnemonic::Nop
                        | Mnemonic::Cpuid
                        | Mnemonic::Rdtsc
                        | Mnemonic::Pause
                        | Mnemonic::Lfence
                        | Mnemonic::Mfence
                        | Mnemonic::Sfence
                        | Mnemonic::Endbr64
                )
            {
                Class::Other
            } else {
                Class::IntAlu
            }
        }
    };
    let latency = match mn {
        Mnemonic::Imul | Mnemonic::Mul | Mnemonic::Mulx => 3,
        Mnemonic::Div | Mnemonic::Idiv => 20,
        _ => 1,
    };
    let fuse = next
        .map(|n| fuse_categories(i, n, mread || mwrite))
        .unwrap_or(0);
    Insn {
        len: i.len() as u8,
        class,
        mnemonic: mn,
        reads,
        writes,
        flags_read: i.rflags_read(),
        flags_written: i.rflags_modified(),
        fuse,
        latency,
        rep: Rep::of(i),
    }
}

fn has_imm(i: &Instruction) -> bool {
    (0..i.op_count()).any(|k| {
        matches!(
            i.op_kind(k),
            OpKind::Immediate8
                | OpKind::Immediate16
                | OpKind::Immediate32
                | OpKind::Immediate64
                | OpKind::Immediate8to16
                | OpKind::Immediate8to32
                | OpKind::Immediate8to64
                | OpKind::Immediate32to64
        )
    })
}

/// Fusion categories of the static pair (`a`, `b`).
pub fn fuse_categories(a: &Instruction, b: &Instruction, a_mem: bool) -> u8 {
    if b.flow_control() != FlowControl::ConditionalBranch
        || b.condition_code() == ConditionCode::None
    {
        return 0;
    }
    // JRCXZ/LOOP read RCX, not flags.
    if matches!(
        b.code(),
        Code::Jrcxz_rel8_64
            | Code::Jecxz_rel8_64
            | Code::Jrcxz_rel8_16
            | Code::Jecxz_rel8_32
            | Code::Jcxz_rel8_16
            | Code::Jcxz_rel8_32
    ) {
        return 0;
    }
    if a.rflags_modified() & b.rflags_read() == 0 {
        return 0;
    }
    let mn = a.mnemonic();
    let imm = has_imm(a);
    let reg_dest = a.op_count() >= 1 && a.op0_kind() == OpKind::Register;
    let mut m = 0u8;
    // Seed types: no memory operand.
    if !a_mem && reg_dest {
        let is_cmp = matches!(mn, Mnemonic::Cmp | Mnemonic::Test);
        let is_alu = matches!(
            mn,
            Mnemonic::Add
                | Mnemonic::Sub
                | Mnemonic::And
                | Mnemonic::Or
                | Mnemonic::Xor
                | Mnemonic::Inc
                | Mnemonic::Dec
                | Mnemonic::Neg
                | Mnemonic::Shl
                | Mnemonic::Shr
                | Mnemonic::Sar
                | Mnemonic::Adc
                | Mnemonic::Sbb
        );
        let itype = imm || matches!(mn, Mnemonic::Inc | Mnemonic::Dec);
        if is_alu {
            m |= 1
                << if itype {
                    FuseCat::T1I as u8
                } else {
                    FuseCat::T1R as u8
                };
        } else if is_cmp {
            m |= 1
                << if itype {
                    FuseCat::T2I as u8
                } else {
                    FuseCat::T2R as u8
                };
        }
    }
    use ConditionCode as C;
    let cc = b.condition_code();
    let mem_imm = a_mem && imm;
    if !mem_imm {
        let intel = match mn {
            Mnemonic::Test => true,
            Mnemonic::And => reg_dest,
            Mnemonic::Cmp => !matches!(cc, C::o | C::no | C::s | C::ns | C::p | C::np),
            Mnemonic::Add | Mnemonic::Sub => {
                reg_dest && !matches!(cc, C::o | C::no | C::s | C::ns | C::p | C::np)
            }
            Mnemonic::Inc | Mnemonic::Dec => {
                reg_dest && matches!(cc, C::e | C::ne | C::l | C::ge | C::le | C::g)
            }
            _ => false,
        };
        if intel {
            m |= 1 << FuseCat::Intel as u8;
        }
        if matches!(mn, Mnemonic::Cmp | Mnemonic::Test) {
            m |= 1 << FuseCat::Zen as u8;
        }
    }
    m
}

/// Decodes the instruction at `ip` from `bytes` (which start at `ip`).
pub fn decode_one(bytes: &[u8], ip: u64) -> Option<Instruction> {
    let mut d = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let i = d.decode();
    (!i.is_invalid()).then_some(i)
}

/// Decodes the code of one function linearly: (address, instruction) pairs.
pub fn decode_function(bytes: &[u8], ip: u64) -> Vec<Instruction> {
    let mut d = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let mut v = Vec::new();
    while d.can_decode() {
        let i = d.decode();
        if i.is_invalid() {
            break;
        }
        v.push(i);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(code: &[u8]) -> Vec<Insn> {
        let v = decode_function(code, 0x1000);
        let mut f = InstructionInfoFactory::new();
        (0..v.len())
            .map(|k| describe(&v[k], v.get(k + 1), &mut f))
            .collect()
    }

    #[test]
    fn classes_and_dependence() {
        // mov rax,[rbx]; add rax,rcx; mov [rdx],rax; cmp rax,5; jne +0; call +0; ret; jmp +0
        let code = [
            0x48, 0x8b, 0x03, 0x48, 0x01, 0xc8, 0x48, 0x89, 0x02, 0x48, 0x83, 0xf8, 0x05, 0x75,
            0x00, 0xe8, 0, 0, 0, 0, 0xc3, 0xeb, 0x00,
        ];
        let v = desc(&code);
        let classes: Vec<Class> = v.iter().map(|i| i.class).collect();
        assert_eq!(
            classes,
            [
                Class::Load,
                Class::IntAlu,
                Class::Store,
                Class::IntAlu,
                Class::CondBranch,
                Class::CallRet,
                Class::CallRet,
                Class::UncondBranch
            ]
        );
        assert!(v[0].feeds(&v[1])); // rax
        assert!(v[1].feeds(&v[2]));
        assert!(v[3].feeds(&v[4])); // flags
        assert!(!v[2].feeds(&v[3]));
        // cmp rax,5 + jne: seed type 2 I-type, Intel and Zen.
        assert_eq!(
            v[3].fuse,
            (1 << FuseCat::T2I as u8) | (1 << FuseCat::Intel as u8) | (1 << FuseCat::Zen as u8)
        );
    }

    #[test]
    fn repeated_string_instructions() {
        let rep = |code: &[u8]| desc(code)[0].rep;
        // rep stosb, rep stosq, rep movsd, rep stosw (66 prefix), repe cmpsb, repne scasb.
        assert_eq!(rep(&[0xf3, 0xaa]), Some(Rep { ne: false, elem: 1 }));
        assert_eq!(rep(&[0xf3, 0x48, 0xab]), Some(Rep { ne: false, elem: 8 }));
        assert_eq!(rep(&[0xf3, 0xa5]), Some(Rep { ne: false, elem: 4 }));
        assert_eq!(rep(&[0x66, 0xf3, 0xab]), Some(Rep { ne: false, elem: 2 }));
        assert_eq!(rep(&[0xf3, 0xa6]), Some(Rep { ne: false, elem: 1 }));
        assert_eq!(rep(&[0xf2, 0xae]), Some(Rep { ne: true, elem: 1 }));
        // Not repeated string instructions: plain stosb, rep ret, pause, tzcnt, SSE movsd.
        assert_eq!(rep(&[0xaa]), None);
        assert_eq!(rep(&[0xf3, 0xc3]), None);
        assert_eq!(rep(&[0xf3, 0x90]), None);
        assert_eq!(rep(&[0xf3, 0x48, 0x0f, 0xbc, 0xc1]), None);
        assert_eq!(rep(&[0xf2, 0x0f, 0x10, 0xc1]), None);
        let v = desc(&[0xf3, 0xaa, 0xf3, 0xa6, 0xf2, 0xae, 0xf3, 0x48, 0xa5]);
        let names: Vec<String> = v.iter().map(|i| i.rep.unwrap().name(i.mnemonic)).collect();
        assert_eq!(
            names,
            ["REP STOSB", "REPE CMPSB", "REPNE SCASB", "REP MOVSQ"]
        );
        // rep stosb writes memory: a store; repe cmpsb only reads: a load.
        assert_eq!((v[0].class, v[1].class), (Class::Store, Class::Load));
    }

    #[test]
    fn fusion_rules() {
        // add rax,rcx; js (Intel: no for ADD+JS); seed T1R yes.
        let v = desc(&[0x48, 0x01, 0xc8, 0x78, 0x00]);
        assert_eq!(v[0].fuse, 1 << FuseCat::T1R as u8);
        // dec ecx; jne: T1I + Intel.
        let v = desc(&[0xff, 0xc9, 0x75, 0x00]);
        assert_eq!(
            v[0].fuse,
            (1 << FuseCat::T1I as u8) | (1 << FuseCat::Intel as u8)
        );
        // cmp dword [rax], 5; je: memory + immediate never fuses.
        let v = desc(&[0x83, 0x38, 0x05, 0x74, 0x00]);
        assert_eq!(v[0].fuse, 0);
        // mov rax, rcx; je: mov writes no flags.
        let v = desc(&[0x48, 0x89, 0xc8, 0x74, 0x00]);
        assert_eq!(v[0].fuse, 0);
        assert_eq!(fusion_alternatives().len(), 18);
        assert_eq!(fusion_alternatives()[0].mask, 0);
        assert_eq!(fusion_alternatives()[15].name, "bb");
    }
}
