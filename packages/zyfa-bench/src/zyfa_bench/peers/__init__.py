"""The implementations zyfa-bench runs side by side, one adapter module per peer family.

`all_peers()` lists every adapter in a fixed order (ZYFA first, then NVIDIA peers, then AMD peers);
`select(names)` picks by name or family ("all", "available", "zyfa", "cudnn", "cudnn-fp8", ...).
"""

from __future__ import annotations

from zyfa_bench.peers.aiter import AiterBF16, AiterFP8
from zyfa_bench.peers.base import Peer, Prepared, Unsupported
from zyfa_bench.peers.cudnn import CudnnBF16, CudnnFP8
from zyfa_bench.peers.fa3 import FA3BF16, FA3FP8
from zyfa_bench.peers.fa4 import FA4BF16
from zyfa_bench.peers.flashinfer import FlashInferBF16, FlashInferFP8
from zyfa_bench.peers.torch_sdpa import TorchSDPA
from zyfa_bench.peers.triton_amd import TritonAmdBF16, TritonAmdFP8
from zyfa_bench.peers.zyfa import ZyfaBaseline, ZyfaBF16, ZyfaFP8, ZyfaVarlen

__all__ = ["Peer", "Prepared", "Unsupported", "all_peers", "select"]


def all_peers() -> list[Peer]:
    """Every adapter, in report order."""
    return [
        ZyfaBF16(),
        ZyfaFP8("exact"),
        ZyfaFP8("lean"),
        ZyfaFP8("f16"),
        ZyfaVarlen("bf16"),
        ZyfaVarlen("fp8"),
        FA3BF16(),
        FA3FP8(),
        FA4BF16(),
        CudnnBF16(),
        CudnnFP8(),
        TorchSDPA("flash"),
        TorchSDPA("cudnn"),
        TorchSDPA("efficient"),
        TorchSDPA("math"),
        FlashInferBF16(),
        FlashInferFP8(),
        AiterBF16(),
        AiterFP8(),
        TritonAmdBF16(),
        TritonAmdFP8(),
    ]


def select(
    names: list[str], *, precisions: tuple[str, ...] = ("bf16", "fp8"), baseline_kernels: str | None = None
) -> list[Peer]:
    """Peers matching any of `names` (a peer name, a family, "all" or "available"), in report order.

    "available" keeps the peers whose `available()` is true right now.  Unknown names raise ValueError
    listing the known ones.  With `baseline_kernels` (a kernel build's directory), each chosen ZYFA
    implementation (dense or varlen) is followed by its `ZyfaBaseline` on that build.
    """
    peers = [p for p in all_peers() if p.precision in precisions]
    known = {p.name for p in all_peers()} | {p.family for p in all_peers()} | {"all", "available"}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown implementation(s) {unknown}; known: {sorted(known)}")
    chosen = []
    for p in peers:
        wanted = "all" in names or p.name in names or p.family in names
        if wanted or ("available" in names and p.available()[0]):
            chosen.append(p)
            if baseline_kernels is not None and p.family in ("zyfa", "zyfa-varlen"):
                chosen.append(ZyfaBaseline(p, baseline_kernels))
    return chosen
