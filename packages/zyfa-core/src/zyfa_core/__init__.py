"""zyfa_core: the ZYFA runtime — kernel ABI, manifest, loader and launcher. No torch.

- `zyfa_core.abi`: ctypes mirror of `kernels/abi/zyfa_abi.h` (`ZyfaFwdArgs`, `ZyfaVarlenArgs` of packed
  batches, flags, ABI_VERSION).
- `zyfa_core.manifest`: find the built code objects (`find_kernel_dir`), read `manifest.json`
  (`Manifest`), pick a kernel (`select`).
- `zyfa_core.launcher`: detect the GPU backend (`available_backend`, `device_arch`) and `launch`
  a kernel on a caller-given stream through the C++ launch plan of `zyfa_core._driver` (checks, grid,
  V pre-pass, TMA maps `tma_maps_bytes`), which dlopens libcuda.so.1 or libamdhip64.so at run time.

`python -m zyfa_core` prints where the kernels are, what the manifest holds and which backend loads.
"""

from __future__ import annotations

from zyfa_core.abi import (
    ABI_VERSION,
    ARGS_SIZE,
    FLAG_CAUSAL,
    FLAG_DESCALE_TABLE,
    FLAG_LSE,
    FLAG_PAGED,
    FLAG_VARLEN,
    TMA_MAPS_BYTES,
    VARLEN_ARGS_SIZE,
    ZyfaFwdArgs,
    ZyfaVarlenArgs,
    args_bytes,
    make_fwd_args,
    make_varlen_args,
)
from zyfa_core.errors import (
    KernelDirNotFoundError,
    KernelNotFoundError,
    ManifestError,
    ZyfaDriverError,
    ZyfaError,
)
from zyfa_core.launcher import (
    available_backend,
    backend_report,
    check_args,
    device_arch,
    device_count,
    device_properties,
    launch,
    launch_grid,
    tma_maps_bytes,
)
from zyfa_core.manifest import (
    KernelSpec,
    Manifest,
    SkippedKernel,
    canonical_dtype,
    default_manifest,
    find_kernel_dir,
    select,
)

__version__ = "0.6.5"

__all__ = [
    "ABI_VERSION",
    "ARGS_SIZE",
    "FLAG_CAUSAL",
    "FLAG_DESCALE_TABLE",
    "FLAG_LSE",
    "FLAG_PAGED",
    "FLAG_VARLEN",
    "KernelDirNotFoundError",
    "KernelNotFoundError",
    "KernelSpec",
    "Manifest",
    "ManifestError",
    "SkippedKernel",
    "TMA_MAPS_BYTES",
    "VARLEN_ARGS_SIZE",
    "ZyfaDriverError",
    "ZyfaError",
    "ZyfaFwdArgs",
    "ZyfaVarlenArgs",
    "__version__",
    "args_bytes",
    "available_backend",
    "backend_report",
    "canonical_dtype",
    "check_args",
    "default_manifest",
    "device_arch",
    "device_count",
    "device_properties",
    "find_kernel_dir",
    "launch",
    "launch_grid",
    "make_fwd_args",
    "make_varlen_args",
    "select",
    "tma_maps_bytes",
]
