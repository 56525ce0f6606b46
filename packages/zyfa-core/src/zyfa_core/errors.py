"""Exceptions raised by zyfa_core.

Every failure of the runtime is one of these, so callers can catch `ZyfaError` for all of them or a
specific class. Each also derives from the closest builtin (LookupError, RuntimeError, ...) so code
that does not know zyfa_core still handles them sensibly.
"""

from __future__ import annotations

__all__ = [
    "KernelDirNotFoundError",
    "KernelNotFoundError",
    "ManifestError",
    "ZyfaDriverError",
    "ZyfaError",
]


class ZyfaError(Exception):
    """Base class of every zyfa_core error."""


class KernelDirNotFoundError(ZyfaError, FileNotFoundError):
    """No directory with a manifest.json was found; the message names every place looked at."""


class ManifestError(ZyfaError, ValueError):
    """manifest.json is unreadable, malformed, or built for another ABI version."""


class KernelNotFoundError(ZyfaError, LookupError):
    """No kernel in the manifest serves a request; the message lists what exists."""


class ZyfaDriverError(ZyfaError, RuntimeError):
    """A GPU driver call failed (or no driver could be loaded).

    Raised from the C++ extension `zyfa_core._driver` as well as from Python. The message names the
    kernel, the driver call and the driver's error name and text; the same facts are attributes.

    Attributes:
        kernel: kernel key the call was made for ("" when none, e.g. during device queries).
        call: driver entry point that failed, e.g. "cuModuleLoadData" ("" when not a driver call).
        code: the driver's numeric error code (0 when not from a driver call).
        error_name: the driver's name for the code, e.g. "CUDA_ERROR_INVALID_IMAGE".
    """

    def __init__(
        self, message: str, *, kernel: str = "", call: str = "", code: int = 0, error_name: str = ""
    ) -> None:
        super().__init__(message)
        self.kernel = kernel
        self.call = call
        self.code = code
        self.error_name = error_name
