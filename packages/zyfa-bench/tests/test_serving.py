"""zyfa_bench.serving on the CPU: the step's lengths, the paged cache with a shared prefix, the FLOP count,
and the rows (zyfa's calls run the reference; FlashAttention-3 is a skipped row without a Hopper GPU)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from zyfa_bench.cli import main
from zyfa_bench.flops import attention_flops, packed_flops
from zyfa_bench.serving import (
    BASELINE,
    ServingStep,
    build_step,
    dense_spec,
    long_tailed_lengths,
    measure,
    prepare,
)
from zyfa_bench.spec import Spec


def test_long_tailed_lengths():
    lens = long_tailed_lengths(64, 32768, seed=0)
    assert len(lens) == 64 and sum(lens) == 32768 and min(lens) >= 1
    ordered = sorted(lens)
    # Long-tailed: the longest prompt holds several times the mean, the median sits below the mean.
    assert ordered[-1] > 3 * 512 and ordered[32] < 512
    assert lens != long_tailed_lengths(64, 32768, seed=1)
    with pytest.raises(ValueError, match="total >= minimum"):
        long_tailed_lengths(10, 5, seed=0)


def test_packed_flops_is_the_dense_formula_per_sequence():
    spec = Spec(3, 100, 100, 8, 2, 128, 128)
    assert packed_flops([100] * 3, [100] * 3, 8, 128, 128, True) == attention_flops(spec)
    # Chunked prefill: 10 queries over 50 keys see the 10 x 40 rectangle and the 10 x 10 triangle's half.
    assert packed_flops([10], [50], 1, 128, 128, True) == 2 * (10 * 40 + 50) * 256


def test_shared_prefix_pages_hold_every_prompts_keys():
    import zyfa.reference as R

    step = ServingStep((5, 17, 1), 32, 16, 4, 2, 128, 128)
    x = build_step(step, device=torch.device("cpu"), precision="bf16", seed=3)
    assert x.page_table is not None and x.k.shape[1] == 16
    # Every row of the table starts with the same two prefix pages.
    assert torch.equal(x.page_table[:, :2], x.page_table[:1, :2].expand(3, 2))
    keys = [
        R.gather_kv(x.k, seq, None, x.page_table) for seq in R.sequences(x.cu_seqlens_q, None, x.seqused_k)
    ]
    assert [kb.shape[1] for kb in keys] == [37, 49, 33]
    assert torch.equal(keys[0][0, :32], keys[2][0, :32])  # the shared prefix
    assert not torch.equal(keys[0][0, 32:37], keys[1][0, 32:37])  # each prompt's own tokens


@pytest.mark.parametrize("prefix", [0, 32])
def test_zyfa_varlen_on_the_step_matches_the_reference(prefix):
    import zyfa.reference as R

    step = ServingStep((5, 17, 1), prefix, 16, 4, 2, 128, 128)
    x = build_step(step, device=torch.device("cpu"), precision="bf16", seed=4)
    call, flops = prepare("zyfa-varlen", step, x)
    out = call()
    cu_k = None if prefix else x.cu_seqlens_k
    want, _ = R.attention_varlen(
        x.q, x.k, x.v, x.cu_seqlens_q, cu_k, seqused_k=x.seqused_k, page_table=x.page_table
    )
    assert torch.equal(out, want) and flops == packed_flops([5, 17, 1], step.lens_k, 4, 128, 128, True)
    _, dense_flops = prepare("zyfa-dense", step, x)
    assert dense_flops == attention_flops(dense_spec(step)) and dense_spec(step).seqlen_q == 8


def test_measure_rows_on_cpu():
    step = ServingStep((3, 9), 16, 16, 2, 1, 192, 128)
    rows = measure(
        step,
        ["zyfa-varlen", "fa3-varlen", "fa4-varlen", "zyfa-dense"],
        device=torch.device("cpu"),
        precision="fp8",
        warmup=1,
        repeats=1,
    )
    status = {row["impl"]: row["status"] for row in rows}
    assert status == {
        "zyfa-varlen": "ok",
        "fa3-varlen": "skipped",
        "fa4-varlen": "skipped",
        "zyfa-dense": "ok",
    }
    ok = [row for row in rows if row["status"] == "ok"]
    assert all(row["tflops"] > 0 and row["timing"]["median_ms"] > 0 for row in ok)
    with pytest.raises(ValueError, match="unknown serving implementation"):
        prepare("nope", step, build_step(step, device=torch.device("cpu"), precision="bf16", seed=0))


def test_baseline_kernels_time_zyfa_varlen_on_the_other_build(tmp_path, monkeypatch):
    """Each zyfa-varlen call of the baseline row runs with $ZYFA_KERNEL_DIR at the baseline build, the row
    right after zyfa-varlen's, the two timed in interleaved rounds; the plain row runs without it, and the
    environment is restored."""
    import zyfa

    base = tmp_path / "before"
    base.mkdir()
    (base / "manifest.json").write_text("{}")
    monkeypatch.delenv("ZYFA_KERNEL_DIR", raising=False)
    seen: list[str | None] = []
    real = zyfa.flash_attn_varlen_func

    def spy(*args, **kwargs):
        seen.append(os.environ.get("ZYFA_KERNEL_DIR"))
        return real(*args, **kwargs)

    monkeypatch.setattr(zyfa, "flash_attn_varlen_func", spy)
    step = ServingStep((3, 9), 0, 16, 2, 1, 128, 128)
    cpu = torch.device("cpu")
    impls = ["zyfa-varlen", "zyfa-dense"]
    rows = measure(
        step, impls, device=cpu, precision="bf16", warmup=1, repeats=2, rounds=2, baseline_kernels=str(base)
    )
    assert [row["impl"] for row in rows] == ["zyfa-varlen", BASELINE, "zyfa-dense"]
    assert all(row["status"] == "ok" for row in rows) and rows[1]["kernels"] == str(base.resolve())
    assert [row["timing"]["rounds"] for row in rows] == [2, 2, 2]
    # Preparation (plain), round 0 (plain, baseline, dense), round 1 (baseline, dense, plain).
    runs = [value for i, value in enumerate(seen) if i == 0 or seen[i - 1] != value]
    assert runs == [None, str(base.resolve()), None]
    assert "ZYFA_KERNEL_DIR" not in os.environ
    with pytest.raises(ValueError, match="holds no manifest.json"):
        measure(step, ["zyfa-varlen"], device=cpu, precision="bf16", baseline_kernels=str(tmp_path))


def test_serving_command_writes_rows(tmp_path, capsys):
    out = tmp_path / "s.json"
    rc = main(
        [
            "serving",
            "--device",
            "cpu",
            "--prompts",
            "3",
            "--tokens",
            "40",
            "--prefix",
            "0,16",
            "--page-size",
            "16",
            "--shape",
            "2x1x128x128",
            "--precision",
            "bf16",
            "--impl",
            "zyfa-varlen,fa3-varlen",
            "--repeats",
            "1",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["kind"] == "serving" and len(doc["rows"]) == 4
    assert [row["step"]["prefix"] for row in doc["rows"]] == [0, 0, 16, 16]
    assert "zyfa-varlen" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--prompts", "0", "argument --prompts"),
        ("--tokens", "-4", "argument --tokens"),
        ("--prefix", "16,-1", "argument --prefix"),
        ("--page-size", "0", "argument --page-size"),
        ("--precision", "fp16", "argument --precision"),
        ("--impl", "zyfa-nope", "argument --impl"),
        ("--repeats", "0", "argument --repeats"),
        ("--baseline-kernels", "/nonexistent", "holds no manifest.json"),
    ],
)
def test_serving_command_refuses_bad_options_up_front(capsys, option, value, message):
    with pytest.raises(SystemExit) as exc:
        main(["serving", "--device", "cpu", option, value])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_serving_command_exits_1_when_nothing_was_measured(tmp_path, capsys):
    """fa3-varlen alone on a CPU measures nothing: the rows say why and the exit status says so."""
    args = ["serving", "--device", "cpu", "--prefix", "0", "--shape", "2x1x128x128", "--precision", "bf16"]
    rc = main([*args, "--prompts", "2", "--tokens", "20", "--impl", "fa3-varlen", "--repeats", "1"])
    assert rc == 1 and "nothing was measured" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="--prompts 30 exceeds --tokens 20"):
        main([*args, "--prompts", "30", "--tokens", "20"])
