"""Mocked peer libraries (cudnn frontend, FlashAttention-3 and -4, FlashInfer, AITER, AITER's Triton MHA).

Each mock follows the documented call shape of the real API and computes real attention (float64, via
`fake_zyfa.dense`) from exactly what it is given, so the adapters' layouts, scale conventions and
arguments are checked numerically, not only by inspection.  Every mock records its calls.
"""

from __future__ import annotations

import math
import types

import torch
from fake_zyfa import dense


def _typed(t: torch.Tensor, attr: object) -> torch.Tensor:
    """cuDNN reads only the pointer: bytes are interpreted as the graph's declared data type."""
    if attr.data_type == "e4m3" and t.dtype != torch.float8_e4m3fn:
        assert t.element_size() == 1, "an FP8 tensor must be handed over as 1-byte elements"
        return t.view(torch.float8_e4m3fn)
    return t


def _dequant_bhsd(t: torch.Tensor, attr: object) -> torch.Tensor:
    """The [b, h, s, d] tensor cuDNN would read: `t`'s storage with the dims/strides the graph declared."""
    return torch.as_strided(_typed(t, attr), attr.dim, attr.stride).double()


def _sequence(buf: torch.Tensor, attr: object, offsets: torch.Tensor, b: int, length: int) -> torch.Tensor:
    """Sequence b of a THD tensor, [length, heads, d]: element (b, h, s, d) of the declared [B, H, S, D]
    sits at offsets[b] + h·stride[1] + s·stride[2] + d·stride[3] (the batch stride is not used)."""
    assert offsets.dtype in (torch.int32, torch.int64) and tuple(offsets.shape) == (attr.dim[0] + 1, 1, 1, 1)
    assert length <= attr.dim[2], "a sequence longer than the declared maximum"
    _, h, _, d = attr.dim
    start = buf.storage_offset() + int(offsets.reshape(-1)[b])
    view = torch.as_strided(buf, (h, length, d), attr.stride[1:], start)
    return view.transpose(0, 1)


def _paged(container: torch.Tensor, attr: object, table: torch.Tensor, b: int, length: int) -> torch.Tensor:
    """The first `length` keys of sequence b from a container of declared dims [pages, H, page_size, D]:
    key j in page table[b, 0, j // page_size, 0], slot j % page_size.  Returns [length, heads, d]."""
    pages = torch.as_strided(container, attr.dim, attr.stride, container.storage_offset())
    page = attr.dim[2]
    rows = [pages[int(table[b, 0, j // page, 0]), :, j % page] for j in range(length)]
    return torch.stack(rows) if rows else pages.new_zeros(0, attr.dim[1], attr.dim[3])


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, diagonal: int | None):
    """Softmax attention of one sequence, [len, heads, d] (GQA); key j is masked for query i when
    j > i + diagonal (None: no mask).  float64."""
    group = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
    s = torch.einsum("ihd,jhd->hij", q.double(), k) * scale
    if diagonal is not None:
        i = torch.arange(q.shape[0])[:, None]
        s = s.masked_fill(torch.arange(k.shape[0])[None, :] > i + diagonal, -math.inf)
    return torch.einsum("hij,jhd->ihd", torch.softmax(s, dim=-1).nan_to_num(0.0), v)


def _execute_varlen(op: dict, pack: dict, o_attr: object, scales: dict) -> None:
    """A padding-masked SDPA: ragged q/o (and k/v, or a paged cache), per-sequence causal alignment."""
    lens_q, lens_kv = (pack[op[n]] for n in ("seq_len_q", "seq_len_kv"))
    for lens in (lens_q, lens_kv):
        assert lens.dtype == torch.int32 and tuple(lens.shape) == (op["q"].dim[0], 1, 1, 1)
    if op["table"] is not None:
        table = pack[op["table"]]
        assert table.dtype == torch.int32 and torch.equal(pack[op["v_table"]], table)
        page = op["k"].dim[2]
        assert table.shape[2] == -(-op["max_seq_len_kv"] // page), (
            "cuDNN: pages == ceil(max_seq_len_kv / page)"
        )
    for b, (n_q, n_kv) in enumerate(
        zip(lens_q.reshape(-1).tolist(), lens_kv.reshape(-1).tolist(), strict=True)
    ):
        q = _sequence(_typed(pack[op["q"]], op["q"]), op["q"], pack[op["q"].ragged], b, n_q)
        if op["table"] is None:
            k, v = (_sequence(_typed(pack[op[n]], op[n]), op[n], pack[op[n].ragged], b, n_kv) for n in "kv")
        else:
            assert n_kv <= op["max_seq_len_kv"]
            k, v = (_paged(_typed(pack[op[n]], op[n]), op[n], table, b, n_kv) for n in "kv")
        q, k, v = (
            q.double() * scales["descale_q"],
            k.double() * scales["descale_k"],
            v.double() * scales["descale_v"],
        )
        diagonal = {None: None, "top_left": 0, "bottom_right": n_kv - n_q}[op["align"]]
        o = _attend(q, k, v, op["scale"], diagonal) * scales["scale_o"]
        out = _typed(pack[o_attr], o_attr)
        _sequence(out, o_attr, pack[o_attr.ragged], b, n_q).copy_(o.to(out.dtype))


def cudnn_module(*, refuse: str | None = None) -> types.ModuleType:
    """A fake `cudnn` (nvidia-cudnn-frontend) pygraph API; refuse="gqa" or "all" makes check_support fail.

    It takes the dense form and the THD form of the SDPA (ragged offsets with the padding mask and
    sequence lengths, a paged cache through page tables) and computes each from exactly what it is given.
    """
    mod = types.ModuleType("cudnn")
    mod.__version__ = "fake"
    mod.calls = []
    mod.data_type = types.SimpleNamespace(
        BFLOAT16="bf16", FLOAT="f32", FP8_E4M3="e4m3", INT32="i32", INT64="i64"
    )
    mod.heur_mode = types.SimpleNamespace(A="A", FALLBACK="FALLBACK")
    mod.backend_version = lambda: 91000
    mod.create_handle = lambda: "handle"
    mod.set_stream = lambda handle, stream: mod.calls.append(("set_stream", handle, stream))

    class Attr:
        def __init__(self, name, dim=None, stride=None, data_type=None):
            self.name, self.dim, self.stride, self.data_type, self.output = (
                name,
                dim,
                stride,
                data_type,
                False,
            )
            self.ragged = None

        def set_ragged_offset(self, offsets):
            self.ragged = offsets
            return self

        def set_output(self, flag):
            self.output = flag
            return self

        def set_dim(self, dim):
            self.dim = list(dim)
            return self

        def set_stride(self, stride):
            self.stride = list(stride)
            return self

        def set_data_type(self, dt):
            self.data_type = dt
            return self

    class Graph:
        def __init__(self, io_data_type, intermediate_data_type, compute_data_type, handle=None):
            self.io = io_data_type
            self.op = None
            mod.calls.append(("pygraph", io_data_type, intermediate_data_type, compute_data_type))

        def tensor(self, name, dim, stride, data_type):
            return Attr(name, list(dim), list(stride), data_type)

        def _op(self, kind, q, k, v, attn_scale, generate_stats, masks, varlen):
            causal, bottom_right = masks
            assert not (causal and bottom_right), "use_causal_mask and use_causal_mask_bottom_right both set"
            align = "bottom_right" if bottom_right else "top_left" if causal else None
            self.op = dict(
                kind=kind, q=q, k=k, v=v, scale=attn_scale, stats=generate_stats, causal=bool(align)
            )
            self.op.update(
                align=align, varlen=varlen["use_padding_mask"], table=varlen["paged_attention_k_table"]
            )
            self.op.update(seq_len_q=varlen["seq_len_q"], seq_len_kv=varlen["seq_len_kv"])
            self.op.update(v_table=varlen["paged_attention_v_table"])
            self.op["max_seq_len_kv"] = varlen["paged_attention_max_seq_len_kv"]
            if self.op["varlen"]:
                assert varlen["seq_len_q"] is not None and varlen["seq_len_kv"] is not None
            else:
                assert q.ragged is None and self.op["table"] is None, (
                    "cuDNN: ragged/paged need the padding mask"
                )
            if self.op["table"] is not None:
                assert self.op["v_table"] is not None and self.op["max_seq_len_kv"] is not None

        def sdpa(
            self,
            name,
            q,
            k,
            v,
            generate_stats,
            attn_scale,
            use_causal_mask=False,
            use_causal_mask_bottom_right=False,
            use_padding_mask=False,
            seq_len_q=None,
            seq_len_kv=None,
            paged_attention_k_table=None,
            paged_attention_v_table=None,
            paged_attention_max_seq_len_kv=None,
        ):
            varlen = {n: x for n, x in locals().items() if n.startswith(("use_padding", "seq_len", "paged"))}
            masks = (use_causal_mask, use_causal_mask_bottom_right)
            self._op("sdpa", q, k, v, attn_scale, generate_stats, masks, varlen)
            self.o = Attr("o")
            return self.o, None

        def sdpa_fp8(
            self,
            q,
            k,
            v,
            descale_q,
            descale_k,
            descale_v,
            descale_s,
            scale_s,
            scale_o,
            generate_stats,
            attn_scale,
            name,
            use_causal_mask=False,
            use_causal_mask_bottom_right=False,
            use_padding_mask=False,
            seq_len_q=None,
            seq_len_kv=None,
            paged_attention_k_table=None,
            paged_attention_v_table=None,
            paged_attention_max_seq_len_kv=None,
        ):
            varlen = {n: x for n, x in locals().items() if n.startswith(("use_padding", "seq_len", "paged"))}
            masks = (use_causal_mask, use_causal_mask_bottom_right)
            self._op("sdpa_fp8", q, k, v, attn_scale, generate_stats, masks, varlen)
            self.op["scalars"] = dict(
                descale_q=descale_q,
                descale_k=descale_k,
                descale_v=descale_v,
                descale_s=descale_s,
                scale_s=scale_s,
                scale_o=scale_o,
            )
            self.o, self.amax_s, self.amax_o = Attr("o"), Attr("amax_s"), Attr("amax_o")
            return self.o, None, self.amax_s, self.amax_o

        def validate(self):
            pass

        def build_operation_graph(self):
            pass

        def create_execution_plans(self, modes):
            assert modes == ["A", "FALLBACK"]

        def check_support(self):
            gqa = self.op["q"].dim[1] != self.op["k"].dim[1]
            if refuse == "all" or (refuse == "gqa" and gqa):
                raise RuntimeError("[cudnn_frontend] Error: not supported by this fake")

        def build_plans(self):
            pass

        def get_workspace_size(self):
            return 64

        def execute(self, pack, workspace, handle=None):
            op = self.op
            mod.calls.append(("execute", op["kind"]))
            if op["varlen"]:
                scales = {n: 1.0 for n in ("descale_q", "descale_k", "descale_v", "scale_o")}
                if op["kind"] == "sdpa_fp8":
                    scales = {n: float(pack[a].reshape(-1)[0]) for n, a in op["scalars"].items()}
                _execute_varlen(op, pack, self.o, scales)
                return
            q = _dequant_bhsd(pack[op["q"]], op["q"])
            k = _dequant_bhsd(pack[op["k"]], op["k"])
            v = _dequant_bhsd(pack[op["v"]], op["v"])
            if op["kind"] == "sdpa_fp8":
                sc = {n: float(pack[a].reshape(-1)[0]) for n, a in op["scalars"].items()}
                q, k, v = q * sc["descale_q"], k * sc["descale_k"], v * sc["descale_v"]
            o = dense(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), op["scale"], op["causal"])
            o = o.transpose(1, 2)  # back to [b, h, s, d]
            if op["kind"] == "sdpa_fp8":
                o = o * sc["scale_o"]
                assert float(o.abs().max()) <= 448.0, "scale_o lets the FP8 output overflow"
            out = _typed(pack[self.o], self.o)
            torch.as_strided(out, self.o.dim, self.o.stride).copy_(o.float().to(out.dtype))

    mod.pygraph = Graph
    return mod


def fa3_module() -> types.ModuleType:
    """Fake `fa3_fwd_interface` (FlashAttention-3's forward, PyPI fa3-fwd): FP8 takes float32 descales of
    shape (batch, heads_kv), each applied to its own (batch, kv head) slice, and returns BF16."""
    mod = types.ModuleType("fa3_fwd_interface")
    mod.calls = []

    def _dequant(x, descale, group):
        b, hkv = x.shape[0], x.shape[2] // group
        assert descale.dtype == torch.float32 and tuple(descale.shape) == (b, hkv), (
            "descale must be (b, h_kv)"
        )
        assert descale.device == x.device
        per_head = descale.double().repeat_interleave(group, dim=1)  # [b, heads of x]
        return x.double() * per_head[:, None, :, None]

    def flash_attn_func(
        q,
        k,
        v,
        softmax_scale=None,
        causal=False,
        qv=None,
        q_descale=None,
        k_descale=None,
        v_descale=None,
        window_size=(-1, -1),
        attention_chunk=0,
        softcap=0.0,
        num_splits=1,
        pack_gqa=None,
        deterministic=False,
        sm_margin=0,
        return_attn_probs=False,
    ):
        assert q.shape[2] % k.shape[2] == 0, (
            "Number of heads in key/value must divide number of heads in query"
        )
        scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
        fp8 = q.dtype == torch.float8_e4m3fn
        mod.calls.append(dict(softmax_scale=softmax_scale, causal=causal, dtype=q.dtype, fp8=fp8))
        if fp8:
            assert k.dtype == v.dtype == torch.float8_e4m3fn
            group = q.shape[2] // k.shape[2]
            qd = _dequant(q, q_descale, group)
            kd, vd = _dequant(k, k_descale, 1), _dequant(v, v_descale, 1)
            return dense(qd, kd, vd, scale, causal).bfloat16()
        assert q_descale is None and k_descale is None and v_descale is None
        return dense(q.double(), k.double(), v.double(), scale, causal).to(q.dtype)

    mod.flash_attn_func = flash_attn_func
    return mod


def fa4_modules() -> dict[str, types.ModuleType]:
    """Fake `flash_attn` and `flash_attn.cute` (FlashAttention-4's interface)."""
    pkg = types.ModuleType("flash_attn")
    cute = types.ModuleType("flash_attn.cute")
    cute.__version__ = "fake"
    cute.calls = []

    def flash_attn_func(
        q,
        k,
        v,
        softmax_scale=None,
        causal=False,
        window_size=(None, None),
        learnable_sink=None,
        softcap=0.0,
        num_splits=1,
        pack_gqa=None,
        deterministic=False,
        return_lse=False,
    ):
        cute.calls.append(dict(softmax_scale=softmax_scale, causal=causal, dtype=q.dtype))
        scale = softmax_scale if softmax_scale is not None else 1 / math.sqrt(q.shape[-1])
        return dense(q.double(), k.double(), v.double(), scale, causal).to(q.dtype), None

    cute.flash_attn_func = flash_attn_func
    pkg.cute = cute
    return {"flash_attn": pkg, "flash_attn.cute": cute}


def flashinfer_module() -> types.ModuleType:
    """Fake `flashinfer` with BatchPrefillWithRaggedKVCacheWrapper (NHD layout, ragged indptr)."""
    mod = types.ModuleType("flashinfer")
    mod.__version__ = "fake"
    mod.calls = []

    class Wrapper:
        def __init__(self, workspace, kv_layout="NHD"):
            assert kv_layout == "NHD"
            self.plan_args = None

        def plan(
            self,
            qo_indptr,
            kv_indptr,
            num_qo_heads,
            num_kv_heads,
            head_dim_qk,
            head_dim_vo=None,
            causal=False,
            sm_scale=None,
            q_data_type=None,
            kv_data_type=None,
        ):
            self.plan_args = dict(
                qo=qo_indptr.tolist(),
                kv=kv_indptr.tolist(),
                hq=num_qo_heads,
                hkv=num_kv_heads,
                dqk=head_dim_qk,
                dv=head_dim_vo,
                causal=causal,
                scale=sm_scale,
            )
            mod.calls.append(self.plan_args)

        def run(self, q, k, v):
            a = self.plan_args
            outs = []
            for i in range(len(a["qo"]) - 1):
                qs, ks = q[a["qo"][i] : a["qo"][i + 1]], k[a["kv"][i] : a["kv"][i + 1]]
                vs = v[a["kv"][i] : a["kv"][i + 1]]
                o = dense(qs[None].double(), ks[None].double(), vs[None].double(), a["scale"], a["causal"])[0]
                outs.append(o)
            return torch.cat(outs).to(q.dtype)

    mod.BatchPrefillWithRaggedKVCacheWrapper = Wrapper
    return mod


def aiter_modules() -> dict[str, types.ModuleType]:
    """Fake `aiter` (flash_attn_func, flash_attn_fp8_pertensor_func) and `aiter.ops.triton.mha`."""
    aiter = types.ModuleType("aiter")
    ops = types.ModuleType("aiter.ops")
    triton = types.ModuleType("aiter.ops.triton")
    mha = types.ModuleType("aiter.ops.triton.mha")
    aiter.calls, mha.calls = [], []

    def _scale(q, softmax_scale):
        return softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5

    def flash_attn_func(
        q,
        k,
        v,
        dropout_p=0.0,
        softmax_scale=None,
        causal=False,
        window_size=(-1, -1, 0),
        bias=None,
        alibi_slopes=None,
        deterministic=True,
        return_lse=False,
        return_attn_probs=False,
    ):
        aiter.calls.append(
            dict(
                fn="flash_attn_func",
                dtype=q.dtype,
                dropout_p=dropout_p,
                causal=causal,
                softmax_scale=softmax_scale,
            )
        )
        return dense(q.double(), k.double(), v.double(), _scale(q, softmax_scale), causal).to(q.dtype)

    def flash_attn_fp8_pertensor_func(
        q, k, v, q_descale, k_descale, v_descale, causal=False, window_size=(-1, -1, 0), softmax_scale=None
    ):
        for d in (q_descale, k_descale, v_descale):
            assert isinstance(d, torch.Tensor) and d.dtype == torch.float32 and d.shape == (1,)
        assert q.dtype == k.dtype == v.dtype == torch.float8_e4m3fn
        aiter.calls.append(
            dict(
                fn="fp8",
                causal=causal,
                softmax_scale=softmax_scale,
                descales=[float(d) for d in (q_descale, k_descale, v_descale)],
            )
        )
        qd, kd, vd = (x.double() * float(d) for x, d in ((q, q_descale), (k, k_descale), (v, v_descale)))
        return dense(qd, kd, vd, _scale(q, softmax_scale), causal).bfloat16()

    def triton_func(
        q,
        k,
        v,
        dropout_p=0.0,
        softmax_scale=None,
        causal=False,
        window_size=(-1, -1),
        bias=None,
        alibi_slopes=None,
        deterministic=True,
        return_lse=False,
        return_attn_probs=False,
    ):
        mha.calls.append(
            dict(fn="flash_attn_func", dtype=q.dtype, causal=causal, softmax_scale=softmax_scale)
        )
        return dense(q.double(), k.double(), v.double(), _scale(q, softmax_scale), causal).to(q.dtype)

    def triton_fp8(
        q,
        k,
        v,
        dropout_p=0.0,
        softmax_scale=None,
        causal=False,
        window_size=(-1, -1),
        alibi_slopes=None,
        deterministic=False,
        return_lse=False,
        return_attn_probs=False,
    ):
        assert q.dtype == torch.bfloat16  # high-precision inputs: it quantises internally
        mha.calls.append(
            dict(fn="flash_attn_fp8_func", dtype=q.dtype, causal=causal, softmax_scale=softmax_scale)
        )
        return dense(q.double(), k.double(), v.double(), _scale(q, softmax_scale), causal).to(q.dtype)

    aiter.flash_attn_func = flash_attn_func
    aiter.flash_attn_fp8_pertensor_func = flash_attn_fp8_pertensor_func
    mha.flash_attn_func = triton_func
    mha.flash_attn_fp8_func = triton_fp8
    aiter.ops, ops.triton, triton.mha = ops, triton, mha
    return {"aiter": aiter, "aiter.ops": ops, "aiter.ops.triton": triton, "aiter.ops.triton.mha": mha}
