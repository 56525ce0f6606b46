"""Operand bytes of real attention wgmmas, for tools/device/wgmma_data_probe.cu's "file:" patterns.

Does the tensor pipe take more cycles on model-like operands than on Gaussian ones? The probe answers that for
synthetic value patterns; this script cuts the operands the d=128 kernels actually feed it from one workload's
inputs (zyfa_bench.workloads, 16K tokens, 32 q / 8 kv heads, head 0), so the probe can replay them:

    python3 tools/device/operand_tiles.py /tmp/tiles gaussian model-like
    /tmp/probe 1.0 /tmp/tiles gaussian model-like

Per workload and dtype (bf16, e4m3 from zyfa.fp8_quantize) four files of raw bytes, the probe's tile sizes:
    W-DT-ss.a.bin  two warpgroups' A of S = Q K^T: 128 query rows x 128 bytes of q
    W-DT-ss.b.bin  B: 128 key rows x 128 bytes of k
    W-DT-rs.a.bin  A of O += P V: the same 128 query rows x 128 bytes of P over one mid-sequence key block,
                   P as the kernels make it: bf16 exp2(t - m), e4m3 e4m3(exp2(t - m + 8)) (the FP8 shift),
                   m the row's max over every key it sees (an attention sink holds it from block 0 on)
    W-DT-rs.b.bin  B: that key block's v rows, 16 KiB
The probe reads them through its own descriptors, so the bytes keep their rows and values but not every
(row, k) pairing of the kernel; cycles depend on the values, which is the question.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from zyfa_bench.inputs import make_inputs, quantize_inputs
from zyfa_bench.spec import specs_for_tokens
from zyfa_bench.workloads import parse_workload

SEQLEN = 16384
QUERY0 = 8192  # first query row of the tiles: mid-sequence
KEY0 = 4096  # first key of the P / V block: an ordinary block, far from the sink and the diagonal
ROWS = 128  # two warpgroups of 64 rows
ROW_BYTES = 128
SHIFT = 8  # zyfa.reference.FP8_SHIFT


def row_bytes(x: torch.Tensor) -> torch.Tensor:
    """[rows, n] bf16 or e4m3 -> [rows, 128] bytes (the first 128 bytes of each row)."""
    raw = x.contiguous().view(torch.uint8)
    return raw[:, :ROW_BYTES]


def scores_log2(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """t = q k^T * scale * log2(e) in float64, causal: rows QUERY0.. see keys 0..row."""
    t = (q.double() @ k.double().T) * scale / math.log(2.0)
    rows = torch.arange(QUERY0, QUERY0 + ROWS, device=q.device)[:, None]
    keys = torch.arange(k.shape[0], device=q.device)[None, :]
    return t.masked_fill(keys > rows, -math.inf)


def tiles(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: torch.Tensor, fp8: bool
) -> dict[str, torch.Tensor]:
    """The four operand tiles of one dtype (q, k, v of head 0 / its kv head, [tokens, d])."""
    m = t.max(dim=1, keepdim=True).values
    keys_per_row = ROW_BYTES // (1 if fp8 else 2)
    block = t[:, KEY0 : KEY0 + keys_per_row]
    if fp8:
        p = torch.exp2(block - m + SHIFT).float().clamp(max=448.0).to(torch.float8_e4m3fn)
        v_rows = v[KEY0 : KEY0 + 128]  # e4m3 Vt: 128 d x 128 keys = 16 KiB; V's own bytes
    else:
        p = torch.exp2(block - m).to(torch.bfloat16)
        v_rows = v[KEY0 : KEY0 + 64]  # bf16 V: 64 keys x 128 d x 2 bytes = 16 KiB
    return {
        "ss.a": row_bytes(q[QUERY0 : QUERY0 + ROWS]),
        "ss.b": row_bytes(k[KEY0 : KEY0 + 128]),
        "rs.a": row_bytes(p),
        "rs.b": v_rows.contiguous().view(torch.uint8).reshape(-1),
    }


def write_workload(out: Path, name: str, device: torch.device) -> None:
    """Write the eight tile files of one workload."""
    spec = specs_for_tokens((32, 8, 128, 128), [SEQLEN], tokens=SEQLEN, batch=None)[0]
    inputs = make_inputs(spec, parse_workload(name)[0], device=device, seed=0)
    quantize_inputs(inputs, seed=0)
    keys = slice(0, QUERY0 + ROWS)
    for dt, (q, k, v, scale) in {
        "bf16": (inputs.q, inputs.k, inputs.v, inputs.softmax_scale),
        "e4m3": (inputs.q8, inputs.k8, inputs.v8, inputs.softmax_scale * inputs.q_descale * inputs.k_descale),
    }.items():
        q0, k0, v0 = q[0, :, 0], k[0, keys, 0], v[0, keys, 0]
        t = scores_log2(q0[QUERY0 : QUERY0 + ROWS].float(), k0.float(), scale)
        for part, data in tiles(q0, k0, v0, t, dt == "e4m3").items():
            path = out / f"{name}-{dt}-{part}.bin"
            path.write_bytes(data.cpu().numpy().tobytes())
        width = ROW_BYTES // (1 if dt == "e4m3" else 2)  # keys in the P tile
        rel = (t[:, KEY0 : KEY0 + width] - t.max(dim=1, keepdim=True).values).flatten()
        print(f"{name} {dt}: t - m over the P block: median {rel.median():.1f}, max {rel.max():.1f} (log2)")


def main() -> None:
    """Write the tiles of each named workload into the output directory."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("workloads", nargs="+", help="zyfa_bench workload names, e.g. gaussian model-like")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    for name in a.workloads:
        write_workload(a.out, name, device)


if __name__ == "__main__":
    main()
