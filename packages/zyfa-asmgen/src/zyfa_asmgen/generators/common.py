"""Pieces every gfx950 generator needs: kernel-argument loads at the ABI's offsets, 64-bit scalar
address arithmetic, raw buffer resources and float literals."""

from __future__ import annotations

import struct

from ..abi import AbiLayout
from ..kernel import Kernel
from ..regs import R
from ..variant import VariantError

# Word 3 of a raw buffer resource on gfx9 (DATA_FORMAT 32, no swizzle, no index stride): the value
# the ROCm libraries use for byte-addressed raw buffers on gfx90a/gfx94x/gfx950.
BUFFER_RSRC_WORD3 = 0x00020000


def f32_hex(x: float) -> str:
    """The IEEE single bit pattern of x as an assembler literal."""
    return f"0x{struct.unpack('<I', struct.pack('<f', x))[0]:08x}"


def s_load_bytes(k: Kernel, dst: R, base: str, offset: int, nbytes: int, what: str) -> None:
    """Scalar-load nbytes (multiple of 4) from s[base pair] + offset into dst.., widest first."""
    if nbytes % 4 or nbytes // 4 > dst.count:
        raise VariantError(f"{what}: {nbytes} bytes do not fit {dst.count} SGPRs as whole dwords")
    dwords, done = nbytes // 4, 0
    while done < dwords:
        left = dwords - done
        n = next(w for w in (16, 8, 4, 2, 1) if w <= left and (dst.first + done) % min(w, 4) == 0)
        suffix = "" if n == 1 else f"x{n}"
        k.emit(f"s_load_dword{suffix} {dst.sub(done, n)}, {base}, 0x{offset + 4 * done:x}", what)
        done += n


class KernArgs:
    """The whole zyfa_fwd_args struct in SGPRs; fields by name at the offsets of the parsed ABI."""

    def __init__(self, k: Kernel, abi: AbiLayout, dst: R, karg: str) -> None:
        self.abi, self.dst = abi, dst
        k.comment("kernel arguments: the struct's fields at the offsets of kernels/abi/zyfa_abi.h")
        last = abi.fields[-1]
        s_load_bytes(k, dst, karg, 0, (last.offset + last.size + 3) // 4 * 4, "kernarg")
        k.emit("s_waitcnt lgkmcnt(0)")

    def reg(self, name: str, dword: int = 0) -> R:
        """SGPR holding dword `dword` of field `name` (0 = low half of a 64-bit field)."""
        return self.dst[self.abi.offset(name) // 4 + dword]

    def pair(self, name: str) -> R:
        """SGPR pair of a 64-bit field."""
        return self.dst.sub(self.abi.offset(name) // 4, 2)


def s_mad64(k: Kernel, acc: R, x: R, stride: R, tmp: R) -> None:
    """acc (pair) += x (unsigned 32) * stride (pair, 64-bit), modulo 2^64; tmp: 3 scratch SGPRs."""
    lo, hi, cross = tmp[0], tmp[1], tmp[2]
    k.emit(f"s_mul_i32 {lo}, {x}, {stride[0]}")
    k.emit(f"s_mul_hi_u32 {hi}, {x}, {stride[0]}")
    k.emit(f"s_mul_i32 {cross}, {x}, {stride[1]}")
    k.emit(f"s_add_u32 {hi}, {hi}, {cross}")
    k.emit(f"s_add_u32 {acc[0]}, {acc[0]}, {lo}")
    k.emit(f"s_addc_u32 {acc[1]}, {acc[1]}, {hi}")


def buffer_rsrc(k: Kernel, rsrc: R, base: R, num_records: str) -> None:
    """A raw (stride 0) buffer resource over [base, base + num_records) bytes; reads past it give 0
    and writes past it are dropped, which is how the kernels mask ragged tails."""
    k.emit(f"s_mov_b32 {rsrc[0]}, {base[0]}")
    k.emit(f"s_and_b32 {rsrc[1]}, 0xffff, {base[1]}", "base[47:32], stride 0")
    k.emit(f"s_mov_b32 {rsrc[2]}, {num_records}", "num_records (bytes)")
    k.emit(f"s_mov_b32 {rsrc[3]}, 0x{BUFFER_RSRC_WORD3:x}")


def s_reciprocals(k: Kernel, jobs: list[tuple[R, R, R]]) -> None:
    """For each (z, d, vtmp): z = an estimate of 2^32 / d from below, for s_udivmod (d >= 1, an
    unsigned SGPR value; vtmp a scratch VGPR, free again once z is written).

    There is no scalar divide or float unit: the VALU's reciprocal, scaled by 2^32 - 512 so that the
    estimate never exceeds the true value. The jobs' instructions are interleaved step by step, so
    that their latencies overlap."""
    steps = (
        ("v_cvt_f32_u32_e32 {v}, {d}", ""),
        ("v_rcp_iflag_f32_e32 {v}, {v}", ""),
        ("v_mul_f32_e32 {v}, 0x4f7ffffe, {v}", "x (2^32 - 512)"),
        ("v_cvt_u32_f32_e32 {v}, {v}", ""),
        ("v_readfirstlane_b32 {z}, {v}", ""),
    )
    for text, comment in steps:
        for z, d, v in jobs:
            k.emit(text.format(z=z, d=d, v=v), comment)


def s_refine_reciprocal(k: Kernel, z: R, d: R, t: R) -> None:
    """z (from s_reciprocals for d) += one integer Newton step: then mul_hi(n, z) is n / d or at most two
    below it for every 32-bit n (s_udivmod's corrections). t: a scratch SGPR."""
    k.emit(f"s_sub_u32 {t}, 0, {d}")
    k.emit(f"s_mul_i32 {t}, {t}, {z}", "2^32 - d z: how far d z falls short of 2^32")
    k.emit(f"s_mul_hi_u32 {t}, {z}, {t}")
    k.emit(f"s_add_u32 {z}, {z}, {t}", "one Newton step")


def s_udivmod(k: Kernel, quo: R, rem: R, n: R, d: R, z: R, tmp: R) -> None:
    """quo = n / d, rem = n % d for unsigned 32-bit SGPR values, d >= 1 (wave-uniform), given z from
    s_reciprocals for d (overwritten); quo and rem must not alias n, d or z. tmp: 2 scratch SGPRs.

    One Newton step in integers brings z within the quotient's last units, and at most two
    corrections make quo and rem exact for every n and d."""
    t, one = tmp[0], tmp[1]
    s_refine_reciprocal(k, z, d, t)
    k.emit(f"s_mul_hi_u32 {quo}, {n}, {z}", "quo is n / d or at most two below it")
    k.emit(f"s_mul_i32 {t}, {quo}, {d}")
    k.emit(f"s_sub_u32 {rem}, {n}, {t}")
    for _ in range(2):
        k.emit(f"s_sub_u32 {t}, {rem}, {d}")
        k.emit(f"s_add_u32 {one}, {quo}, 1")
        k.emit(f"s_cmp_ge_u32 {rem}, {d}")
        k.emit(f"s_cselect_b32 {rem}, {t}, {rem}")
        k.emit(f"s_cselect_b32 {quo}, {one}, {quo}")
