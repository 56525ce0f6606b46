"""Result files: one JSON schema for every command, with all that is needed to reproduce a figure.

    {
      "schema": "zyfa-bench/1",
      "kind": "throughput" | "accuracy" | "clocks",
      "created": ISO-8601 UTC time,
      "command": argv of the run, "cwd": working directory,
      "host": {hostname, platform, python, cpu_count},
      "device": {backend, name, capability / gcn_arch, multiprocessors, l2_bytes, memory_bytes,
                 driver, cuda_runtime / hip_runtime, cudnn},
      "clocks": {source, idle sample, max_sm_mhz},
      "versions": {zyfa-bench, zyfa-torch, zyfa-core, zyfa-asmgen, torch, triton, numpy,
                   nvidia-cudnn-frontend, fa3-fwd, flash-attn-4, nvidia-cutlass-dsl, flashinfer-python,
                   amd-aiter, transformers, safetensors, rich, matplotlib, ...: version or null},
      "packages": {every installed distribution: version},
      "kernels": {"zyfa": the ZYFA kernel build named by $ZYFA_KERNEL_DIR, or null (the installed
                  zyfa-core's), "baseline": the --baseline-kernels build or null}; a build is {dir,
                  abi_version, code_objects: {kernel name: sha256 from its manifest}},
      "seeds": {base seed and how each problem's seed derives from it},
      "settings": the command's options,
      "peers": [{name, family, precision, vendor, note, available, reason}],
      "ceilings": {bf16_gemm_tflops, fp8_gemm_tflops, ...} (throughput runs),
      "rows": [one dict per measurement; see the command]
    }

`ResultWriter` rewrites the file after every row (write to a temporary file, then rename), so a run that
is stopped part-way still leaves a valid JSON file with the rows measured so far.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from zyfa_bench.argtypes import MANIFEST_NAME

__all__ = [
    "SCHEMA",
    "ResultWriter",
    "device_info",
    "environment",
    "failure_reason",
    "kernel_build",
    "load_results",
    "versions",
]

SCHEMA = "zyfa-bench/1"

# Distributions whose versions every result names (null when absent).
TRACKED = (
    "zyfa-bench",
    "zyfa-torch",
    "zyfa-core",
    "zyfa-asmgen",
    "torch",
    "triton",
    "numpy",
    "nvidia-cudnn-frontend",
    "nvidia-cudnn-cu12",
    "nvidia-cudnn-cu13",
    "fa3-fwd",
    "flash-attn-4",
    "nvidia-cutlass-dsl",
    "flashinfer-python",
    "amd-aiter",
    "nvidia-ml-py",
    "transformers",
    "safetensors",
    "rich",
    "matplotlib",
)


def failure_reason(exc: BaseException) -> str:
    """A failed measurement's "reason": the exception's type and its first 400 characters."""
    return f"{type(exc).__name__}: {str(exc).strip()[:400]}"


def versions() -> dict[str, str | None]:
    """Version of each tracked distribution (None when not installed), plus the cuDNN library's."""
    out: dict[str, str | None] = {}
    for name in TRACKED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    try:
        out["cudnn-library"] = str(torch.backends.cudnn.version())
    except Exception:  # no cuDNN in this torch build
        out["cudnn-library"] = None
    return out


def all_packages() -> dict[str, str]:
    """Every installed distribution and its version."""
    pkgs = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            pkgs[name] = dist.version
    return dict(sorted(pkgs.items(), key=lambda kv: kv[0].lower()))


def _driver_version() -> str | None:
    for cmd in (
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        ["amd-smi", "version"],
        ["rocm-smi", "--showdriverversion"],
    ):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0][:200]
    return None


def device_info(device: torch.device) -> dict[str, Any]:
    """What the device is: name, architecture, SMs/CUs, L2, memory, driver and runtime versions."""
    if device.type != "cuda":
        return {"backend": "cpu", "name": platform.processor() or platform.machine()}
    props = torch.cuda.get_device_properties(device)
    hip = getattr(torch.version, "hip", None)
    info: dict[str, Any] = {
        "backend": "hip" if hip else "cuda",
        "index": device.index if device.index is not None else torch.cuda.current_device(),
        "name": props.name,
        "multiprocessors": props.multi_processor_count,
        "l2_bytes": int(getattr(props, "L2_cache_size", 0) or 0),
        "memory_bytes": int(props.total_memory),
        "driver": _driver_version(),
    }
    if hip:
        info["gcn_arch"] = getattr(props, "gcnArchName", None)
        info["hip_runtime"] = hip
    else:
        info["capability"] = f"{props.major}.{props.minor}"
        info["cuda_runtime"] = torch.version.cuda
    return info


# zyfa_core.manifest.ENV_KERNEL_DIR (zyfa-bench does not import zyfa_core).
KERNEL_DIR_ENV = "ZYFA_KERNEL_DIR"


def kernel_build(directory: str | os.PathLike[str] | None) -> dict[str, Any] | None:
    """The ZYFA kernel build in `directory` (manifest.json beside its code objects): the directory, the ABI
    version and each code object's sha256 as the manifest lists it, so a result names the exact code objects
    it timed. None without a directory; {"dir", "error"} when the manifest cannot be read."""
    if directory is None:
        return None
    path = Path(directory).resolve()
    try:
        manifest = json.loads((path / MANIFEST_NAME).read_text())
        rows = manifest["kernels"]
        code_objects = {str(row["name"]): row.get("sha256") for row in rows}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return {"dir": str(path), "error": failure_reason(exc)}
    return {"dir": str(path), "abi_version": manifest.get("abi_version"), "code_objects": code_objects}


def environment(device: torch.device, baseline_kernels: str | None = None) -> dict[str, Any]:
    """Host, device, versions, installed packages and the ZYFA kernel builds in use (`baseline_kernels`: a
    second build timed beside them), for the header of a result file."""
    return {
        "host": {
            "hostname": socket.gethostname(),
            "platform": platform.platform(),
            "python": sys.version.split()[0],
            "cpu_count": os.cpu_count(),
        },
        "device": device_info(device),
        "versions": versions(),
        "packages": all_packages(),
        "kernels": {
            "zyfa": kernel_build(os.environ.get(KERNEL_DIR_ENV) or None),
            "baseline": kernel_build(baseline_kernels),
        },
    }


def _command() -> list[str]:
    """argv of this run, with the entry point spelled `zyfa-bench` (also under `python -m zyfa_bench.cli`)."""
    argv = list(sys.argv)
    if argv and Path(argv[0]).name in ("zyfa-bench", "cli.py", "__main__.py"):
        argv[0] = "zyfa-bench"
    return argv


def _jsonable(x: Any) -> Any:
    """Replace NaN/inf (not valid JSON) with strings, tuples with lists, tensors with lists."""
    if isinstance(x, float):
        return x if math.isfinite(x) else str(x)
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, torch.Tensor):
        return _jsonable(x.tolist())
    if isinstance(x, Path):
        return str(x)
    return x


class ResultWriter:
    """Collects rows and rewrites `path` atomically after each one (no path: keep in memory only)."""

    def __init__(self, path: str | Path | None, kind: str, header: dict[str, Any]) -> None:
        self.path = Path(path) if path else None
        self.doc: dict[str, Any] = {
            "schema": SCHEMA,
            "kind": kind,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": _command(),
            "cwd": os.getcwd(),
            **header,
            "rows": [],
        }
        self.flush()

    @property
    def rows(self) -> list[dict[str, Any]]:
        """Rows so far."""
        return self.doc["rows"]

    def add(self, row: dict[str, Any]) -> None:
        """Append a row and rewrite the file."""
        self.doc["rows"].append(row)
        self.flush()

    def set(self, key: str, value: Any) -> None:
        """Set a top-level field (e.g. ceilings) and rewrite the file."""
        self.doc[key] = value
        self.flush()

    def flush(self) -> None:
        """Write the document (temporary file + rename, so readers never see half a file)."""
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(_jsonable(self.doc), indent=1, allow_nan=False) + "\n")
        os.replace(tmp, self.path)


def load_results(path: str | Path) -> dict[str, Any]:
    """Read a result file and check its schema."""
    doc = json.loads(Path(path).read_text())
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {doc.get('schema')!r}, expected {SCHEMA!r}")
    if doc.get("kind") not in ("throughput", "accuracy", "clocks", "serving"):
        raise ValueError(f"{path}: unknown kind {doc.get('kind')!r}")
    return doc
