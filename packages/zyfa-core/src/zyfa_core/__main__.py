"""`python -m zyfa_core`: where the kernels are, what the manifest holds, which GPU backend loads."""

from __future__ import annotations

import sys

import zyfa_core
from zyfa_core.errors import ZyfaError
from zyfa_core.manifest import Manifest


def _print_manifest(manifest: Manifest) -> None:
    print(f"manifest:    {manifest.path} (ABI {manifest.abi_version})")
    if manifest.toolchains:
        tools = ", ".join(f"{name} {version}" for name, version in sorted(manifest.toolchains.items()))
        print(f"toolchains:  {tools}")
    print(f"kernels:     {len(manifest.kernels)}")
    for spec in manifest.kernels:
        missing = "" if spec.path.is_file() else "  [FILE MISSING]"
        print(
            f"  {spec.name:<48} {spec.kind:<6} tile {spec.tile_m}x{spec.tile_n} {spec.threads:>4} thr "
            f"smem {spec.smem_bytes:>6} regs {spec.registers:>3} spill {spec.spill_bytes}{missing}"
        )
    for item in manifest.skipped:
        print(f"  skipped {item.name}: {item.reason}")


def _print_devices() -> None:
    report = zyfa_core.backend_report()
    library = f" ({report['library']})" if report["library"] else ""
    print(f"backend:     {report['backend'] or 'none'}{library}")
    for attempt in report["attempts"]:
        print(f"  not used: {attempt}")
    if report["backend"] is None:
        return
    for device in range(zyfa_core.device_count()):
        props = zyfa_core.device_properties(device)
        print(f"  device {device}: {props.get('name')} arch {zyfa_core.device_arch(device)}")


def main() -> int:
    """Print the report; return 1 if the kernel directory or manifest is unusable, else 0."""
    print(f"zyfa_core {zyfa_core.__version__}, ABI version {zyfa_core.ABI_VERSION}")
    status = 0
    try:
        directory = zyfa_core.find_kernel_dir()
        print(f"kernel dir:  {directory}")
        _print_manifest(Manifest.load(directory))
    except ZyfaError as exc:
        print(f"kernels:     unavailable: {exc}")
        status = 1
    try:
        _print_devices()
    except ZyfaError as exc:
        print(f"devices:     error: {exc}")
    return status


if __name__ == "__main__":
    sys.exit(main())
