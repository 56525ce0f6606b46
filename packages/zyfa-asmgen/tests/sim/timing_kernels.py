"""Small gfx950 loops for the timing model's tests and calibration (tests/sim/calibration.py).

Every kernel is a counted loop `.Lloop` around a body; the functional simulator runs it (so the
model replays what executed) and `sim.timing` models it. The synthetic FP8 attention loop
(`fa_fp8_body`) has the instruction mix of one wave's iteration of a plain FlashAttention FP8
forward at d=128 (32 query rows, 64 keys per block): 4 QK and 4 PV `v_mfma_f32_32x32x64_f8f6f4`,
K and V read from LDS, and the softmax VALU work of an exact-exp2 (or lean-P) row update. It runs
on garbage data: only its timing means anything, so it is launched without the hazard checker.
"""

from __future__ import annotations

import numpy as np

from zyfa_asmgen.sim import GlobalMemory, Simulator
from zyfa_asmgen.sim.timing import MI355X, CuTiming, MachineModel, model_cu, model_launch, traces_of

TEMPLATE = """
.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
.text
k:
{prologue}
  s_mov_b32 s20, {iters}
.Lloop:
{body}
  s_sub_u32 s20, s20, 1
  s_cmp_lg_u32 s20, 0
  s_cbranch_scc1 .Lloop
  s_endpgm
.rodata
.amdhsa_kernel k
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_next_free_vgpr {nv}
  .amdhsa_accum_offset {acc}
  .amdhsa_next_free_sgpr 24
  .amdhsa_group_segment_fixed_size {lds}
.end_amdhsa_kernel
"""


def kernel(
    body: str, iters: int = 8, nv: int = 64, acc: int | None = None, lds: int = 0, prologue: str = ""
) -> str:
    """A one-kernel assembly file: `prologue`, then `body` repeated `iters` times in a loop."""
    return TEMPLATE.format(body=body, iters=iters, nv=nv, acc=acc or min(nv, 256), lds=lds, prologue=prologue)


def timed(
    asm: str,
    threads: int = 64,
    waves_per_simd: int | None = None,
    kernarg: bytes = b"",
    mem: GlobalMemory | None = None,
    spec: MachineModel = MI355X,
) -> tuple[Simulator, CuTiming]:
    """Run one workgroup functionally (trace on, checker off) and model a CU full of it."""
    sim = Simulator(asm, "k", check=False)
    with np.errstate(invalid="ignore"):  # garbage operands: NaN bf16 inputs of the MFMAs are expected
        res = sim.launch((1, 1, 1), (threads, 1, 1), kernarg, mem or GlobalMemory(), trace=True)
    return sim, model_cu(sim, traces_of(res), threads, spec, waves_per_simd=waves_per_simd)


def per_simd_cycles(cu: CuTiming, ops: int) -> float:
    """Modelled SIMD cycles per instruction when every workgroup executes `ops` of them (throughput)."""
    wgs_per_simd = cu.slots * cu.occupancy.waves_per_wg / MI355X.simds
    return cu.wg_cycles[0] / ops / wgs_per_simd


def chip_tflops(cu: CuTiming, waves: int = 64, spec: MachineModel = MI355X) -> float:
    """Modelled MFMA TFLOP/s of a launch of `waves` x (CUs x slots) copies of the traced workgroup."""
    lt = model_launch([cu.wg_cycles[0]] * (waves * spec.cus * cu.slots), cu.slots, spec)
    return lt.tflops(cu.mfma_flops[0] * lt.workgroups)


# ---- the synthetic FP8 attention iteration ---------------------------------------------------------------
# Registers: S^T tiles v[0:15], v[16:31]; O^T 4 tiles v[40:103]; K v[104:135]; V v[136:167];
# Q v[168:183]; P v[184:191]; row state and temporaries v[192:199]; lane LDS address v200.

FA_NV = 208
FA_LDS = 16384


def _mfma(d: str, a: str, b: str, c: str) -> str:
    return f"  v_mfma_f32_32x32x64_f8f6f4 {d}, {a}, {b}, {c}"


def fa_fp8_body(p_mode: str = "exact", lds: bool = True) -> str:
    """One iteration: K from LDS, S^T = K Q^T, softmax of 32 scores per lane, V from LDS, O^T += V^T P^T."""
    out: list[str] = []
    if lds:
        out += [f"  ds_read_b128 v[{104 + 4 * i}:{107 + 4 * i}], v200 offset:{256 * i}" for i in range(8)]
        out.append("  s_waitcnt lgkmcnt(0)")
    for t in range(2):  # two 32-key tiles, two 64-dim k-steps each
        s = f"v[{16 * t}:{16 * t + 15}]"
        out.append(_mfma(s, f"v[{104 + 16 * t}:{111 + 16 * t}]", "v[168:175]", "0"))
        out.append(_mfma(s, f"v[{112 + 16 * t}:{119 + 16 * t}]", "v[176:183]", s))
    if lds:
        out += [
            f"  ds_read_b128 v[{136 + 4 * i}:{139 + 4 * i}], v200 offset:{8192 + 256 * i}" for i in range(8)
        ]
    out.append("  s_nop 15")  # the S results: 16 passes + 4 wait states before a VALU reads them
    out += _softmax(p_mode)
    if lds:
        out.append("  s_waitcnt lgkmcnt(0)")
    for t in range(4):  # O^T[32 dv x 32 rows] per tile += V^T (32 dv x 64 keys) P^T (64 keys x 32 rows)
        o = f"v[{40 + 16 * t}:{55 + 16 * t}]"
        out.append(_mfma(o, f"v[{136 + 8 * t}:{143 + 8 * t}]", "v[184:191]", o))
    return "\n".join(out)


def _softmax(p_mode: str) -> list[str]:
    """The per-lane softmax of 32 scores (one query row per lane, two halves of keys)."""
    out = [f"  v_max3_f32 v192, v192, v{2 * i}, v{2 * i + 1}" for i in range(16)]  # row max
    out += ["  v_mov_b32 v193, v192", "  v_permlane32_swap_b32 v193, v192", "  v_max_f32 v192, v192, v193",
            "  v_sub_f32 v194, v195, v192", "  v_exp_f32 v194, v194", "  v_mov_b32 v195, v192"]  # fmt: skip
    if p_mode == "exact":
        out += [f"  v_pk_fma_f32 v[{2 * i}:{2 * i + 1}], v[{2 * i}:{2 * i + 1}], v[196:197], v[198:199]"
                for i in range(16)]  # t = S * C - m  # fmt: skip
        out += [f"  v_exp_f32 v{i}, v{i}" for i in range(32)]
        out += [
            f"  v_pk_add_f32 v[196:197], v[196:197], v[{2 * i}:{2 * i + 1}]" for i in range(16)
        ]  # row sum
        out += [f"  v_cvt_pk_fp8_f32 v{184 + i // 4}, v{2 * i}, v{2 * i + 1}" for i in range(16)]
    else:  # lean P: one FMA to the e4m3 code, a saturating byte convert, codes back to values for l
        out += [f"  v_pk_fma_f32 v[{2 * i}:{2 * i + 1}], v[{2 * i}:{2 * i + 1}], v[196:197], v[198:199]"
                for i in range(16)]  # fmt: skip
        out += [f"  v_cvt_pk_u8_f32 v{184 + i // 4}, v{i}, {i % 4}, v{184 + i // 4}" for i in range(32)]
        out += [f"  v_cvt_pk_f32_fp8 v[{2 * i}:{2 * i + 1}], v{184 + i // 2}" for i in range(16)]
        out += [f"  v_pk_add_f32 v[196:197], v[196:197], v[{2 * i}:{2 * i + 1}]" for i in range(16)]
    out += [f"  v_pk_mul_f32 v[{40 + 2 * i}:{41 + 2 * i}], v[{40 + 2 * i}:{41 + 2 * i}], v[194:195]"
            for i in range(32)]  # O *= alpha  # fmt: skip
    out += ["  v_fma_f32 v197, v197, v194, v196"]  # l = l * alpha + sum
    return out


FA_PROLOGUE = "  v_lshlrev_b32 v200, 4, v0\n" + "\n".join(f"  v_mov_b32 v{192 + i}, 0" for i in range(8))


def fa_fp8_kernel(p_mode: str = "exact", lds: bool = True, iters: int = 8) -> str:
    """The synthetic FP8 attention loop as a kernel (2 waves per SIMD by its VGPR count)."""
    return kernel(fa_fp8_body(p_mode, lds), iters=iters, nv=FA_NV, lds=FA_LDS, prologue=FA_PROLOGUE)


def fa_fp8_utilisation(p_mode: str = "exact", lds: bool = True, waves_per_simd: int | None = None,
                       spec: MachineModel = MI355X) -> float:  # fmt: skip
    """Modelled fraction of the FP8 MFMA peak of the synthetic FP8 attention loop on the whole chip."""
    _, cu = timed(fa_fp8_kernel(p_mode, lds), waves_per_simd=waves_per_simd, spec=spec)
    peak = spec.mfma_peak_tflops("v_mfma_f32_32x32x64_f8f6f4", 32, 32, 64)
    return chip_tflops(cu, spec=spec) / peak


def load_kernel(iters: int = 8, valu: int = 4) -> tuple[str, bytes, GlobalMemory]:
    """A latency-bound loop: one global load, wait for it, `valu` dependent adds."""
    pro = "\n".join(["  s_load_dwordx2 s[4:5], s[0:1], 0x0", "  v_lshlrev_b32 v1, 2, v0", "  v_mov_b32 v3, 0",
                     "  s_waitcnt lgkmcnt(0)"])  # fmt: skip
    body = "  global_load_dword v2, v1, s[4:5]\n  s_waitcnt vmcnt(0)\n" + "\n".join(
        ["  v_add_f32 v3, v3, v2"] * valu
    )
    mem = GlobalMemory()
    addr = mem.map(np.ones(64, np.float32))
    return kernel(body, iters=iters, nv=8, prologue=pro), np.array([addr], "<u8").tobytes(), mem
