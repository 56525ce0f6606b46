"""zyfa.flash_attn_varlen_func on a GPU: the "varlen" and "paged" kernels against zyfa.reference of the same
numerics and the float64 truth, bitwise repeatability, CUDA-graph capture, agreement with the dense kernel.

Skipped without a GPU, and per case where the GPU's manifest has no kernel of that layout. Tolerances are
test_zyfa_gpu.py's (derived there): against the reference with the kernel's own numerics (block_n = its
tile_n, its stale_tau, its p_mode) 5e-3 BF16 and 2e-2 FP8 relative L2, against float64 5e-3 BF16 and 0.06
lean FP8. Outputs are poisoned (NaN blocks of the output sizes freed just before each call) so that a row a
kernel fails to write shows up; rows of q outside every sequence are not compared (the kernels leave them).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
from zyfa_testutil import lse_err, rel_err
from zyfa_varlen_testutil import make_packed, page_cache

import zyfa
from zyfa import _ops
from zyfa import reference as R
from zyfa_bench.serving import long_tailed_lengths

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU")

TOOLS = Path(__file__).resolve().parents[3] / "kernels" / "tools"

SAME_NUMERICS_TOL = {"bf16": 5e-3, "fp8": 2e-2}
F64_TOL = {"bf16": 5e-3, "fp8": 0.06}
# lse against the same-numerics reference: BF16 1e-3; FP8 8e-2, the default kernels' S on Hopper's FP8 tensor
# cores (test_zyfa_gpu.py gives the measured reason).
LSE_TOL = {"bf16": 1e-3, "fp8": 8e-2}

# (lens_q, lens_k, heads_q, heads_kv, d_qk): length 1, no queries, no keys, chunked prefill, len_q > len_k,
# lengths that cross tiles unevenly, one long sequence among short ones.
CASES = [
    ([1, 37, 0, 130, 64, 300], [1, 37, 5, 200, 64, 300], 8, 2, 128),
    ([7, 1, 90, 129], [0, 300, 90, 400], 4, 4, 192),
    ([2000, 3, 17, 256], [2100, 3, 17, 256], 8, 1, 128),
]


@pytest.fixture(autouse=True)
def _need_core():
    pytest.importorskip("zyfa_core")


def _ids(case) -> str:
    lens_q, lens_k, hq, hkv, d = case
    return f"q{sum(lens_q)}-k{sum(lens_k)}-h{hq}x{hkv}-d{d}"


def _spec(q, k, v, layout: str):
    from zyfa_core.errors import KernelNotFoundError

    try:
        return _ops.select_kernel(q, k, v, True, None, layout=layout)
    except KernelNotFoundError as exc:
        pytest.skip(str(exc).splitlines()[0])


def _poison(total_q: int, heads_q: int, device: torch.device) -> None:
    out = torch.full((total_q, heads_q, 128), math.nan, dtype=torch.bfloat16, device=device)
    lse = torch.full((heads_q, total_q), math.nan, dtype=torch.float32, device=device)
    torch.cuda.synchronize()
    del out, lse


def _inputs(case, precision: str, paged: bool, page_size: int = 64):
    """(kwargs of the call on the GPU, the CPU tensors of the reference, descales)."""
    lens_q, lens_k, hq, hkv, d = case
    p = make_packed(lens_q, lens_k, hq, hkv, d, seed=hash((tuple(lens_q), precision, paged)) % 2**31)
    q, k, v = p.q, p.k, p.v
    descales = (1.0, 1.0, 1.0)
    if precision == "fp8":
        (q, dq), (k, dk), (v, dv) = (zyfa.fp8_quantize(x, as_float=True) for x in (q, k, v))
        descales = (dq, dk, dv)
    cpu = dict(
        q=q,
        k=k,
        v=v,
        cu_seqlens_q=p.cu_seqlens_q,
        cu_seqlens_k=p.cu_seqlens_k,
        seqused_k=None,
        page_table=None,
    )
    if paged:
        k_cache, v_cache, table = page_cache(k, v, lens_k, page_size, seed=page_size)
        cpu.update(k=k_cache, v=v_cache, page_table=table, seqused_k=torch.tensor(lens_k, dtype=torch.int32))
    gpu = {name: (x.cuda() if isinstance(x, torch.Tensor) else x) for name, x in cpu.items()}
    return gpu, cpu, descales, p


def _call(gpu, p, descales, precision, **kw):
    fp8 = (
        dict(q_descale=descales[0], k_descale=descales[1], v_descale=descales[2])
        if precision == "fp8"
        else {}
    )
    return zyfa.flash_attn_varlen_func(
        gpu["q"],
        gpu["k"],
        gpu["v"],
        gpu["cu_seqlens_q"],
        gpu["cu_seqlens_k"],
        p.max_seqlen_q,
        p.max_seqlen_k,
        seqused_k=gpu["seqused_k"],
        page_table=gpu["page_table"],
        causal=True,
        **fp8,
        **kw,
    )


@pytest.mark.parametrize("paged", [False, True], ids=["varlen", "paged"])
@pytest.mark.parametrize("precision", ["bf16", "fp8"])
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_kernel_matches_the_reference(case, precision, paged):
    _check_against_the_reference(case, precision, paged)


# A step of 48 long-tailed prompts (6144 new tokens after a 96-key cached prefix each) at 16 q heads: 78 query
# tiles x 16 heads = 1248 work items, ~10 per CTA of a persistent grid on 132 SMs, so each CTA carries its
# K / V ring, Q barrier and ping-pong state across items of different sequences.
MANY_ITEMS = (long_tailed_lengths(48, 6144, seed=11), 96, 16, 2, 128)
# The same step at 192/128 (8 heads: 720 items), whose packed rows claim their items (grid "dynamic").
MANY_ITEMS_192 = (MANY_ITEMS[0], 96, 8, 8, 192)


@pytest.mark.parametrize("many", [MANY_ITEMS, MANY_ITEMS_192], ids=["d128", "d192"])
@pytest.mark.parametrize("paged", [False, True], ids=["varlen", "paged"])
@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_many_items_per_persistent_cta(precision, paged, many):
    lens, prefix, hq, hkv, d = many
    items = sum(-(-n // 128) for n in lens) * hq
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert items >= 4 * sms, f"{items} work items do not give each of {sms} persistent CTAs several"
    _check_against_the_reference((lens, [prefix + n for n in lens], hq, hkv, d), precision, paged)


@pytest.mark.parametrize("page_size", [16, 48, 100, 256])
@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_page_sizes(precision, page_size):
    """The paged kernels split a key index into (page, slot) by a multiply-high: engines' page sizes and
    sizes that are no power of two (48, 100), over a batch whose rows cross many pages."""
    _check_against_the_reference(CASES[1], precision, True, page_size)


def _check_against_the_reference(case, precision: str, paged: bool, page_size: int = 64) -> None:
    """One packed batch through the kernel, against the reference of its numerics and the float64 truth."""
    gpu, cpu, descales, p = _inputs(case, precision, paged, page_size)
    spec = _spec(gpu["q"], gpu["k"], gpu["v"], "paged" if paged else "varlen")
    _poison(p.q.shape[0], p.q.shape[1], gpu["q"].device)
    out, lse = _call(gpu, p, descales, precision, return_attn_probs=True)
    torch.cuda.synchronize()
    # The same packed batch for the reference of the kernel's numerics and for the float64 truth.
    packed = [cpu[name] for name in ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k")]
    index = {"seqused_k": cpu["seqused_k"], "page_table": cpu["page_table"]}
    scales = {"q_descale": descales[0], "k_descale": descales[1], "v_descale": descales[2]}
    numerics = {"p_mode": spec.p_mode or "exact", "block_n": spec.tile_n, "stale_tau": spec.stale_tau}
    want, want_lse = R.attention_varlen(*packed, **index, **scales, **numerics)
    truth, truth_lse = R.attention_varlen_dense_f64(*packed, **index, **scales)
    assert not torch.isnan(out.float()).any() and not torch.isnan(lse).any(), "a row was not written"
    assert rel_err(out, want) < SAME_NUMERICS_TOL[precision]
    assert rel_err(out, truth) < F64_TOL[precision]
    assert lse_err(lse, want_lse) <= LSE_TOL[precision]
    if precision == "bf16":
        assert lse_err(lse, truth_lse) <= LSE_TOL["bf16"]


def _rebuilt_kernels(directory: Path, names: list[str], change) -> Path:
    """A kernel directory with the rows `names` of kernels/variants.bzl rebuilt with `change(row)`'s fields by
    the repository's kernel build; skips without the repository's tools or nvcc."""
    if not (TOOLS / "zyfa_kernel_build.py").is_file():
        pytest.skip(f"the rebuilt kernels need the repository's {TOOLS}")
    sys.path.insert(0, str(TOOLS))
    try:
        import zyfa_kernel_build as kb
    finally:
        sys.path.remove(str(TOOLS))
    root = TOOLS.parents[1]
    try:
        toolchain = kb.ToolchainCache(root).get("cuda")
    except kb.ToolchainError as exc:
        pytest.skip(f"the rebuilt kernels need nvcc: {exc}")
    variants = kb.load_variants(root)
    metas = []
    for name in names:
        row = kb.find_variant(variants, name)
        metas.append(
            {
                "kernel": kb.compile_variant(
                    {**row, **change(row)}, root, toolchain, directory / f"{name}.cubin"
                )
            }
        )
    kb.write_json(directory / "manifest.json", kb.merge_manifest(metas, kb.abi_version(root), directory))
    return directory


def _tile_grid_kernels(directory: Path, names: list[str]) -> Path:
    """The rows `names` built for grid "tiles" (one CTA per work item)."""
    return _rebuilt_kernels(directory, names, lambda row: {"grid": "tiles"})


def _bits_against(directory: Path, monkeypatch, precision: str, layouts, wanted, rebuild) -> None:
    """The shipped kernels of `layouts` for which wanted(spec) holds against the same rows rebuilt by
    `rebuild(directory, names)`, bit for bit in out and lse: steps of many items per CTA at both head shapes,
    and CASES[0]'s and CASES[1]'s empty and one-row sequences. Skips when no shipped row qualifies."""
    steps = (MANY_ITEMS, MANY_ITEMS_192)
    batches = [(lens, [prefix + n for n in lens], hq, hkv, d) for lens, prefix, hq, hkv, d in steps]
    batches += [CASES[0], CASES[1]]
    runs, names, results = [], set(), []
    for batch, paged in [(batch, paged) for batch in batches for paged in layouts]:
        gpu, _, descales, p = _inputs(batch, precision, paged)
        spec = _spec(gpu["q"], gpu["k"], gpu["v"], "paged" if paged else "varlen")
        if not wanted(spec):
            continue
        runs.append((batch, paged, spec.name))
        names.add(spec.name)
        results.append(_call(gpu, p, descales, precision, return_attn_probs=True))
    if not runs:
        pytest.skip(f"no packed {precision} kernel of this build qualifies")
    monkeypatch.setenv("ZYFA_KERNEL_DIR", str(rebuild(directory, sorted(names))))
    for (batch, paged, name), (out, lse) in zip(runs, results, strict=True):
        gpu, _, descales, p = _inputs(batch, precision, paged)
        assert _spec(gpu["q"], gpu["k"], gpu["v"], "paged" if paged else "varlen").name == name
        other_out, other_lse = _call(gpu, p, descales, precision, return_attn_probs=True)
        where = f"{_ids(batch)} {'paged' if paged else 'varlen'}"
        assert torch.equal(out, other_out), f"{where}: out differs from the rebuilt kernel's"
        assert torch.equal(lse, other_lse), f"{where}: lse differs from the rebuilt kernel's"


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_persistent_grid_gives_the_tile_grids_bits(precision, tmp_path, monkeypatch):
    """The shipped persistent and dynamic packed kernels against the same rows built for the tile grid:
    every tile is computed the same way whichever CTA takes it, so out and lse agree bit for bit (each
    layout shipped on such a grid)."""
    _bits_against(
        tmp_path, monkeypatch, precision, (False, True), lambda spec: spec.grid in ("persistent", "dynamic"),
        _tile_grid_kernels,
    )  # fmt: skip


def _plain_loads(row: dict) -> dict:
    """The row with cp.async loads and the in-kernel V transpose: no TMA, no V pre-pass (whose build has no
    V staging buffers, two KV blocks of 128-byte rows). Where the staging leaves no room for a row's second Q
    tile (q_tiles), the rebuild keeps one."""
    if row.get("v_prep"):
        from zyfa_core.manifest import MAX_SMEM_BYTES

        smem = row["smem_bytes"] + 2 * row["tile_n"] * 128
        if smem > MAX_SMEM_BYTES["cuda"] and row.get("q_tiles", 1) == 2:
            smem -= row["tile_m"] * math.ceil(row["d_qk"] / 128) * 128  # an e4m3 Q tile of 128-byte regions
            return {"loads": "cp.async", "v_prep": False, "smem_bytes": smem, "q_tiles": 1}
        return {"loads": "cp.async", "v_prep": False, "smem_bytes": smem}
    return {"loads": "cp.async"}


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_tma_and_v_prep_give_the_plain_loads_bits(precision, tmp_path, monkeypatch):
    """The shipped varlen kernels that load Q / K by TMA over the packed tensors or read V from the packed V
    pre-pass against the same rows with cp.async loads and the in-kernel V transpose: the tiles in shared
    memory are the same bytes (rows of the next sequence or zeros past a sequence's end are masked or never
    stored), so out and lse agree bit for bit."""
    _bits_against(
        tmp_path, monkeypatch, precision, (False,), lambda spec: spec.loads == "tma" or bool(spec.v_prep),
        lambda directory, names: _rebuilt_kernels(directory, names, _plain_loads),
    )  # fmt: skip


@pytest.mark.parametrize("page_size", [16, 64, 128, 256])
def test_page_sizes_and_unaligned_offsets(page_size):
    """Every page size engines use, with q rows before and after the sequences (cu_seqlens_q[0] > 0)."""
    lens = [1, 70, 300, 0, 129]
    p = make_packed([1, 30, 300, 0, 5], lens, 8, 2, seed=page_size, q_pad=(3, 5))
    k_cache, v_cache, table = page_cache(p.k, p.v, lens, page_size, seed=page_size)
    seqused = torch.tensor(lens, dtype=torch.int32)
    _spec(p.q.cuda(), k_cache.cuda(), v_cache.cuda(), "paged")
    out = zyfa.flash_attn_varlen_func(
        p.q.cuda(),
        k_cache.cuda(),
        v_cache.cuda(),
        p.cu_seqlens_q.cuda(),
        None,
        300,
        300,
        seqused_k=seqused.cuda(),
        page_table=table.cuda(),
        causal=True,
    )
    truth, _ = R.attention_varlen_dense_f64(p.q, p.k, p.v, p.cu_seqlens_q, p.cu_seqlens_k)
    rows = slice(3, 3 + 336)
    assert rel_err(out[rows], truth[rows]) < F64_TOL["bf16"]


def test_serving_step_bitwise_repeatable_and_graph_capturable():
    """A long-tailed step (64 prompts, up to ~4K each, paged with a shared prefix): 20 calls give the same
    bits, and a CUDA graph replay gives them too after new values are copied into the static inputs."""
    lens = long_tailed_lengths(64, 16384, seed=3)
    prefix = 512
    lens_k = [prefix + n for n in lens]
    p = make_packed(lens, lens_k, 8, 2, seed=4)
    k_cache, v_cache, table = page_cache(p.k, p.v, lens_k, 64, seed=5)
    args = [p.q.cuda(), k_cache.cuda(), v_cache.cuda(), p.cu_seqlens_q.cuda(), None, max(lens), max(lens_k)]
    kw = dict(seqused_k=torch.tensor(lens_k, dtype=torch.int32).cuda(), page_table=table.cuda(), causal=True)
    _spec(args[0], args[1], args[2], "paged")
    first = zyfa.flash_attn_varlen_func(*args, **kw)
    for _ in range(20):
        assert torch.equal(zyfa.flash_attn_varlen_func(*args, **kw), first)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        zyfa.flash_attn_varlen_func(*args, **kw)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = zyfa.flash_attn_varlen_func(*args, **kw)
    new_q = torch.randn_like(args[0], dtype=torch.float32).bfloat16()
    args[0].copy_(new_q)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, zyfa.flash_attn_varlen_func(*args, **kw))


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_dynamic_grid_repeatable_and_graph_capturable(precision):
    """A grid "dynamic" kernel (its CTAs claim items from a counter that each launch clears first): 10 calls
    give the same bits, and a CUDA graph that captured the clear and the kernel gives them on every replay,
    also after new values are copied into the static inputs (a counter left from the last replay would
    leave items uncomputed)."""
    batch = (MANY_ITEMS_192[0], [96 + n for n in MANY_ITEMS_192[0]], *MANY_ITEMS_192[2:])
    gpu, _, descales, p = _inputs(batch, precision, False)
    if _spec(gpu["q"], gpu["k"], gpu["v"], "varlen").grid != "dynamic":
        pytest.skip(f"the packed {precision} 192/128 kernel of this build does not take grid 'dynamic'")
    first = _call(gpu, p, descales, precision)
    for _ in range(10):
        assert torch.equal(_call(gpu, p, descales, precision), first)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _call(gpu, p, descales, precision)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _call(gpu, p, descales, precision)
    for replay in range(3):
        if replay == 2:
            raw = gpu["q"].view(torch.uint8)  # bytes: flip exists for every dtype
            raw.copy_(raw.flip(0))
        captured.fill_(math.nan)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, _call(gpu, p, descales, precision)), f"replay {replay}"


def test_one_sequence_matches_the_dense_kernel():
    """A single full sequence through the varlen kernel and the dense kernel: the same numerics (tile_n,
    stale_tau), so the outputs agree to the reference tolerance (their load paths differ: TMA or cp.async)."""
    q, k, v = (torch.randn(1, 1000, h, 128, device="cuda").bfloat16() for h in (8, 2, 2))
    cu = torch.tensor([0, 1000], dtype=torch.int32, device="cuda")
    _spec(q[0], k[0], v[0], "varlen")
    packed = zyfa.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 1000, 1000, causal=True)
    dense = zyfa.flash_attn_func(q, k, v, causal=True)
    assert rel_err(packed, dense[0]) < 1e-3


def test_non_causal_dense_kernel_on_the_gpu():
    """causal=False on the dense kernels (the flag clear): against float64."""
    q, k, v = (torch.randn(2, n, h, 128, device="cuda").bfloat16() for n, h in ((300, 8), (500, 2), (500, 2)))
    out = zyfa.flash_attn_func(q, k, v, causal=False)
    truth, _ = R.attention_dense_f64(q.cpu(), k.cpu(), v.cpu(), causal=False)
    assert rel_err(out, truth) < F64_TOL["bf16"]
