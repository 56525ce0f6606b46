"""zyfa-bench: ZYFA's benchmark and accuracy harness (the `zyfa-bench` command).

Modules, one concept each: `spec` (a problem's shape), `flops` (THE FLOP formula), `timing` (THE timer),
`workloads` (where q, k, v come from), `inputs` (the BF16/FP8 inputs all peers share), `peers` (one
adapter per implementation), `accuracy` (float64 references and errors), `clocks` (GPU clock sampling),
`throughput` (the sweep), `ceilings` (the GEMM rates), `results` (the JSON schema), `tables` (targets and
the table pieces every report shares), `headline` (a run's three headline tables), `report` (markdown and
PNGs), `index` (the benchmark index page's generated blocks), `capture` (q, k, v from Hugging Face
models), `cli` (the command line).
"""

from __future__ import annotations

from zyfa_bench.flops import attention_flops
from zyfa_bench.spec import PRESETS, Spec

__version__ = "0.3.13"

__all__ = ["PRESETS", "Spec", "__version__", "attention_flops"]
