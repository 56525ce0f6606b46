"""AITER's gfx950 BF16 attention kernels (fmha_v3_fwd code objects): their kernel-argument ABI and
their launch geometry, so the simulator and the timing model can run them as AITER's host does.

Authority: the `amd-aiter` wheel (0.1.7.post2.dev18). The kernel arguments are the packed
`fmha_fwd_v3_args` of aiter_meta/csrc/include/mha_fwd.h: 16-byte slots, an 8-byte pointer or a
4-byte value each (the code objects' metadata note lists the same 32 slots, 512 bytes). The host
fills them in `fmha_fwd_v3_dispatcher` and launches in `fmha_fwd_v3_kernel::launch_kernel`
(aiter_meta/hsa/gfx950/fmha_v3_fwd/codegen.py): strides in bytes; s_Ts = ts_qo rows; s_gqa =
hq / hkv; tune option 5, or 3 for a causal launch whose head count is not a multiple of 8 or whose
seqlen_q exceeds 16384; LSE on; 512 threads (256 for d=192); grid (ceil(ceil(s / ts_qo) / (2 if
causal else 1)), heads, batch). The `_group` code objects are AITER's group (variable-length) mode
(`fmha_fwd_v3_group_dispatcher`, `launch_kernel_group`): the same arguments with Q, K, V and O
packed as (total tokens, heads, dim), batch strides 0, int32 sequence starts (batch + 1) in
ptr_qseq / ptr_kseq (and the padding pointers, which default to them), seqlens the longest
sequence, LSE as (heads, total tokens); grid (heads, batch, tiles of the longest sequence).
No AITER code or binary is part of this package: the code objects are the caller's files.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from .codeobject import load_code_object
from .machine import LaunchResult, Simulator
from .memory import GlobalMemory

BF16 = ml_dtypes.bfloat16
V3_FIELDS = (
    "ptr_o", "ptr_q", "ptr_k", "ptr_v", "ptr_lse", "scalar", "s_seq_len", "s_Seqs", "s_Ts", "s_Hs",
    "s_Bs", "s_gqa", "s_k_Seqs", "s_k_Hs", "s_k_Bs", "s_opt", "s_lse", "s_kv_seq_len", "s_qk_head_dim",
    "s_v_head_dim", "s_q_head_num", "s_v_Seqs", "s_v_Hs", "s_v_Bs", "s_o_Seqs", "s_o_Hs", "s_o_Bs",
    "ptr_qseq", "ptr_kseq", "s_lse_Hs", "ptr_qseq_padding", "ptr_kseq_padding",
)  # fmt: skip
V3_KERNARG_BYTES = 16 * len(V3_FIELDS)
D_V = 128
_NAME = re.compile(r"fwd_hd(128|192)(?:_hd128)?_bf16(_causal)?(_group)?")


@dataclass(frozen=True)
class AiterKernel:
    """One batch-mode fmha_v3_fwd BF16 kernel: head dims, mask and tiles (codegen.py FmhaFwdV3Ts)."""

    d_qk: int
    causal: bool
    group: bool = False

    @property
    def ts_qo(self) -> int:
        """Query rows per tile."""
        return 256 if self.d_qk == 128 else 128

    @property
    def ts_kv(self) -> int:
        """Key rows per loop iteration (a key block)."""
        return 64 if self.d_qk == 128 else 128

    @property
    def threads(self) -> int:
        """Workgroup size."""
        return 512 if self.d_qk == 128 else 256

    @property
    def file_name(self) -> str:
        """The code object's file name in the wheel."""
        hd = "hd128" if self.d_qk == 128 else "hd192_hd128"
        return f"fwd_{hd}_bf16{'_causal' if self.causal else ''}{'_group' if self.group else ''}.co"

    def grid(self, batch: int, heads_q: int, seqlen_q: int) -> tuple[int, int, int]:
        """AITER's launch grid (seqlen_q: the longest sequence in group mode)."""
        tiles = -(-seqlen_q // self.ts_qo)
        wgs = -(-tiles // (2 if self.causal else 1))
        return (heads_q, batch, wgs) if self.group else (wgs, heads_q, batch)

    def tiles_of(self, x: int, seqlen_q: int) -> tuple[int, ...]:
        """Query tiles workgroup x runs: one, or for causal kernels x and T-1-x (balanced pairs)."""
        ntiles = -(-seqlen_q // self.ts_qo)
        if not self.causal:
            return (x,)
        return (x,) if ntiles - 1 - x == x else (x, ntiles - 1 - x)

    def key_blocks(self, x: int, seqlen_q: int, seqlen_k: int) -> int:
        """Key blocks workgroup x visits (causal: bottom-right aligned)."""
        total = 0
        for t in self.tiles_of(x, seqlen_q):
            keys = seqlen_k
            if self.causal:
                last = min((t + 1) * self.ts_qo, seqlen_q) - 1
                keys = max(0, min(seqlen_k, last + seqlen_k - seqlen_q + 1))
            total += -(-keys // self.ts_kv)
        return total


def kernel_of(path: str | Path) -> AiterKernel:
    """The AiterKernel of a code object file named as in the wheel (BF16, batch or group mode)."""
    m = _NAME.search(Path(path).name)
    if m is None:
        known = "fwd_hd128_bf16[_causal][_group].co, fwd_hd192_hd128_bf16[_causal][_group].co"
        raise ValueError(f"{path}: not an fmha_v3_fwd BF16 code object name ({known})")
    return AiterKernel(int(m.group(1)), bool(m.group(2)), bool(m.group(3)))


def tune_option(causal: bool, heads_q: int, seqlen_q: int) -> int:
    """AITER's s_opt for a launch."""
    return 3 if causal and (heads_q % 8 != 0 or seqlen_q > 16384) else 5


def pack_kernarg(values: dict[str, int | float]) -> bytes:
    """Pack `fmha_fwd_v3_args`: pointers as u64, `scalar` as f32, the rest as u32, one 16-byte slot each."""
    unknown = set(values) - set(V3_FIELDS)
    if unknown:
        raise ValueError(f"not fields of fmha_fwd_v3_args: {sorted(unknown)}")
    out = bytearray()
    for name in V3_FIELDS:
        v = values.get(name, 0)
        if name.startswith("ptr_"):
            out += struct.pack("<Q8x", v)
        elif name == "scalar":
            out += struct.pack("<f12x", v)
        else:
            out += struct.pack("<I12x", v)
    return bytes(out)


@dataclass
class AiterRun:
    """Inputs, outputs and the launch result of one simulated launch."""

    kernel: AiterKernel
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    out: np.ndarray
    lse: np.ndarray
    res: LaunchResult
    sim: Simulator


def _common_args(kern: AiterKernel, heads_q: int, hkv: int, sq: int, sk: int, tune: int | None) -> dict:
    """The fields batch and group mode fill alike; row and head strides of a (rows, heads, dim) layout."""
    d = kern.d_qk
    args: dict[str, int | float] = {
        "scalar": 1.0 / np.sqrt(d), "s_seq_len": sq, "s_gqa": heads_q // hkv, "s_lse": 1,
        "s_opt": tune_option(kern.causal, heads_q, sq) if tune is None else tune, "s_kv_seq_len": sk,
        "s_qk_head_dim": d, "s_v_head_dim": D_V, "s_q_head_num": heads_q,
    }  # fmt: skip
    for prefix, (h, dim) in {
        "s_": (heads_q, d),
        "s_k_": (hkv, d),
        "s_v_": (hkv, D_V),
        "s_o_": (heads_q, D_V),
    }.items():
        args[f"{prefix}Seqs"], args[f"{prefix}Hs"] = h * dim * 2, dim * 2
    args["s_Ts"] = kern.ts_qo * int(args["s_Seqs"])
    return args


def _inputs(rng: np.random.Generator, lead: tuple, sq: int, sk: int, hq: int, hkv: int, d: int):
    """Fresh N(0,1) bf16 Q, K, V and a NaN-filled output, shaped lead + (rows, heads, dim)."""
    q = rng.standard_normal((*lead, sq, hq, d)).astype(BF16)
    k = rng.standard_normal((*lead, sk, hkv, d)).astype(BF16)
    v = rng.standard_normal((*lead, sk, hkv, D_V)).astype(BF16)
    return q, k, v, np.full((*lead, sq, hq, D_V), np.nan, dtype=BF16)


def _launch(
    path, kern: AiterKernel, grid, args: dict, mem: GlobalMemory, **kw
) -> tuple[Simulator, LaunchResult]:
    co = load_code_object(path)
    sim = Simulator(co.program, next(iter(co.kernels)))
    return sim, sim.launch(grid, (kern.threads, 1, 1), pack_kernarg(args), mem, **kw)


def run_aiter(
    path: str | Path,
    seqlen_q: int,
    heads_q: int,
    rng: np.random.Generator,
    *,
    heads_kv: int | None = None,
    seqlen_k: int | None = None,
    tune: int | None = None,
    wave_order: str = "interleaved",
    workgroups=None,
    trace: bool = False,
) -> AiterRun:
    """Run a batch-mode fmha_v3_fwd kernel on batch 1 with fresh N(0,1) bf16 inputs (BSHD, unpadded).

    tune overrides s_opt (default: what AITER's host picks for this launch).
    """
    kern = kernel_of(path)
    if kern.group:
        raise ValueError(f"{path}: a group-mode kernel; use run_aiter_group")
    hkv, sk = heads_kv or heads_q, seqlen_k or seqlen_q
    if heads_q % hkv:
        raise ValueError(f"heads_q {heads_q} is not a multiple of heads_kv {hkv}")
    q, k, v, out = _inputs(rng, (1,), seqlen_q, sk, heads_q, hkv, kern.d_qk)
    lse = np.full((1, heads_q, seqlen_q), np.nan, dtype=np.float32)
    mem = GlobalMemory()
    ptrs = [mem.map(x.view(np.uint16)) for x in (out, q, k, v)] + [mem.map(lse)]
    args = _common_args(kern, heads_q, hkv, seqlen_q, sk, tune)
    args |= dict(zip(("ptr_o", "ptr_q", "ptr_k", "ptr_v", "ptr_lse"), ptrs, strict=True))
    args["s_lse_Hs"] = seqlen_q * 4
    for prefix, rows in (("s_", seqlen_q), ("s_k_", sk), ("s_v_", sk), ("s_o_", seqlen_q)):
        args[f"{prefix}Bs"] = rows * int(args[f"{prefix}Seqs"])
    grid = kern.grid(1, heads_q, seqlen_q)
    sim, res = _launch(path, kern, grid, args, mem, workgroups=workgroups, wave_order=wave_order, trace=trace)
    return AiterRun(kern, q, k, v, out, lse, res, sim)


def run_aiter_group(
    path: str | Path,
    seqlens: list[int],
    heads_q: int,
    rng: np.random.Generator,
    *,
    heads_kv: int | None = None,
    wave_order: str = "interleaved",
) -> AiterRun:
    """Run a group-mode (variable-length) kernel: sequences of `seqlens` packed as (tokens, heads, dim).

    Queries and keys have the same lengths (causal: bottom-right aligned). The run's q/k/v/out are
    the packed arrays; lse is (heads, total tokens).
    """
    kern = kernel_of(path)
    if not kern.group:
        raise ValueError(f"{path}: a batch-mode kernel; use run_aiter")
    hkv = heads_kv or heads_q
    if heads_q % hkv or not seqlens or min(seqlens) < 1:
        raise ValueError(f"heads {heads_q}/{hkv}, seqlens {seqlens}: want hq a multiple of hkv, lengths >= 1")
    total, longest = sum(seqlens), max(seqlens)
    q, k, v, out = _inputs(rng, (), total, total, heads_q, hkv, kern.d_qk)
    lse = np.full((heads_q, total), np.nan, dtype=np.float32)
    starts = np.concatenate([[0], np.cumsum(seqlens)]).astype(np.int32)
    mem = GlobalMemory()
    ptrs = [mem.map(x.view(np.uint16)) for x in (out, q, k, v)] + [mem.map(lse)]
    ps = mem.map(starts)
    args = _common_args(kern, heads_q, hkv, longest, longest, None)
    args |= dict(zip(("ptr_o", "ptr_q", "ptr_k", "ptr_v", "ptr_lse"), ptrs, strict=True))
    args |= {
        "s_lse_Hs": total * 4,
        "ptr_qseq": ps,
        "ptr_kseq": ps,
        "ptr_qseq_padding": ps,
        "ptr_kseq_padding": ps,
    }
    grid = kern.grid(len(seqlens), heads_q, longest)
    sim, res = _launch(path, kern, grid, args, mem, wave_order=wave_order)
    return AiterRun(kern, q, k, v, out, lse, res, sim)
