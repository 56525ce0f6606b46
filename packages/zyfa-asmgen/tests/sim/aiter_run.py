"""Run one of AITER's fmha_v3_fwd BF16 code objects in the simulator as AITER's host code launches it.

The launch follows `fmha_fwd_v3_dispatcher` and `fmha_fwd_v3_kernel::launch_kernel` in the pinned
wheel's aiter_meta/hsa/gfx950/fmha_v3_fwd/codegen.py: 512 threads (256 for d=192), grid
(ceil(ceil(s / ts_qo) / (2 if causal else 1)), heads, batch) with ts_qo 256 (d=128) or 128
(d=192/128); strides in bytes, s_Ts = ts_qo rows, s_gqa = hq / hkv, tune option 5 (3 for a
causal launch whose head count is not a multiple of 8 or whose seqlen_q exceeds 16384), LSE on.
A uniquely named module: see asmgen_testlib.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zyfa_asmgen.sim import GlobalMemory, Simulator
from zyfa_asmgen.sim.codeobject import load_code_object

from .aiter_inputs import fmha_fwd_v3_kernarg
from .test_kernels import BF16

TILES = {128: (256, 64, 512), 192: (128, 128, 256)}  # d_qk: (ts_qo, ts_kv, threads), codegen.py


@dataclass
class AiterRun:
    """Inputs, outputs and the launch result of one run."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    out: np.ndarray
    lse: np.ndarray
    res: object
    threads: int


def aiter_name(d_qk: int, causal: bool) -> str:
    """The code object file of a (head dim, mask) pair (batch mode)."""
    hd = "hd128" if d_qk == 128 else "hd192_hd128"
    return f"fwd_{hd}_bf16{'_causal' if causal else ''}.co"


def tune_option(causal: bool, hq: int, s: int) -> int:
    """AITER's s_opt: 5, less 2 for a causal launch with hq % 8 != 0 or seqlen_q > 16384."""
    return 3 if causal and (hq % 8 != 0 or s > 16384) else 5


def run_aiter(
    co_path,
    causal: bool,
    s: int,
    hq: int,
    rng: np.random.Generator,
    *,
    d_qk: int = 128,
    hkv: int | None = None,
    sk: int | None = None,
    wave_order: str = "interleaved",
    workgroups=None,
    trace: bool = False,
) -> AiterRun:
    """Run one batch-mode fmha_v3_fwd kernel on batch 1 with fresh N(0,1) bf16 inputs."""
    hkv = hkv or hq
    sk = sk or s
    d_v = 128
    ts_qo, _ts_kv, threads = TILES[d_qk]
    co = load_code_object(co_path)
    (name, _kernel), = co.kernels.items()  # fmt: skip
    q = rng.standard_normal((1, s, hq, d_qk)).astype(BF16)
    k = rng.standard_normal((1, sk, hkv, d_qk)).astype(BF16)
    v = rng.standard_normal((1, sk, hkv, d_v)).astype(BF16)
    out = np.full((1, s, hq, d_v), np.nan, dtype=BF16)
    lse = np.full((1, hq, s), np.nan, dtype=np.float32)
    mem = GlobalMemory()
    ptr_o, ptr_q, ptr_lse = mem.map(out.view(np.uint16)), mem.map(q.view(np.uint16)), mem.map(lse)
    ptr_k, ptr_v = mem.map(k.view(np.uint16)), mem.map(v.view(np.uint16))  # unpadded, as on a GPU

    def strides(h: int, d: int, rows: int) -> tuple[int, int, int]:
        return h * d * 2, d * 2, rows * h * d * 2  # row, head, batch strides in bytes (BSHD)

    args = {"ptr_o": ptr_o, "ptr_q": ptr_q, "ptr_k": ptr_k, "ptr_v": ptr_v, "ptr_lse": ptr_lse,
            "scalar": 1.0 / np.sqrt(d_qk), "s_seq_len": s, "s_gqa": hq // hkv,
            "s_opt": tune_option(causal, hq, s), "s_lse": 1, "s_kv_seq_len": sk, "s_qk_head_dim": d_qk,
            "s_v_head_dim": d_v, "s_q_head_num": hq, "s_lse_Hs": s * 4}  # fmt: skip
    for prefix, (h, d, rows) in {"s_": (hq, d_qk, s), "s_k_": (hkv, d_qk, sk), "s_v_": (hkv, d_v, sk),
                                 "s_o_": (hq, d_v, s)}.items():  # fmt: skip
        args[f"{prefix}Seqs"], args[f"{prefix}Hs"], args[f"{prefix}Bs"] = strides(h, d, rows)
    args["s_Ts"] = ts_qo * args["s_Seqs"]
    tiles, per_group = -(-s // ts_qo), 2 if causal else 1  # causal: a workgroup runs two tiles
    grid = (-(-tiles // per_group), hq, 1)
    res = Simulator(co.program, name).launch(
        grid, (threads, 1, 1), fmha_fwd_v3_kernarg(args), mem, workgroups=workgroups,
        wave_order=wave_order, trace=trace,
    )  # fmt: skip
    return AiterRun(q, k, v, out, lse, res, threads)
