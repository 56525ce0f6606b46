"""Resources of built ZYFA kernels: registers, spills and shared memory, read from the tools' own output.

sm90a: `ptxas -v` lines. gfx950: the `.amdhsa_kernel` descriptor and the `.amdgpu_metadata` block of
the .s that was assembled (what the simulator runs, too). Standard library only.
"""

from __future__ import annotations

import re

from zyfa_toolchains import BuildError


def parse_ptxas(output: str, name: str) -> dict[str, int]:
    """Registers, spill and static smem bytes of entry `name` from `ptxas -v` output."""
    entries: dict[str, dict[str, int]] = {}
    current = None
    for line in output.splitlines():
        if m := re.search(r"(?:Compiling entry function|Function properties for) '?([\w$.]+)'?", line):
            current = entries.setdefault(m.group(1), {})
        elif current is None:
            continue
        elif m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line):
            current["spill_bytes"] = int(m.group(1))
        elif m := re.search(r"Used (\d+) registers", line):
            current["registers"] = int(m.group(1))
            smem = re.search(r"(\d+) bytes smem", line)
            current["static_smem"] = int(smem.group(1)) if smem else 0
    if name not in entries or "registers" not in entries[name]:
        raise BuildError(
            f"ptxas -v reported no entry {name!r} (entries: {sorted(entries)}); the kernel must be "
            f'`extern "C" __global__` and named ZYFA_KERNEL_NAME'
        )
    return {"spill_bytes": 0, **entries[name]}


def serialized_wgmma(output: str, name: str) -> list[str]:
    """ptxas's reasons for serialising the wgmmas of entry `name` (its notes "Potential Performance Loss:
    wgmma.mma_async instructions are serialized ...", C75xx): a wait after every wgmma, the pipeline gone."""
    pattern = re.compile(
        r"\((C75\d\d)\) Potential Performance Loss: wgmma\.mma_async instructions are serialized (.*?)"
        r"\s+in the function '([\w$.]+)'"
    )
    return [f"{m.group(1)} {m.group(2)}" for m in pattern.finditer(output) if m.group(3) == name]


# ---------------------------------------------------------------------------------------------
# gfx950 resources from the .s: the kernel descriptor and the .amdgpu_metadata block.


def _descriptor(text: str, name: str, where: str) -> dict[str, int | None]:
    """`.amdhsa_*` directives of `.amdhsa_kernel name`; values that are expressions map to None."""
    m = re.search(
        rf"^\s*\.amdhsa_kernel\s+{re.escape(name)}\s*$(.*?)^\s*\.end_amdhsa_kernel", text, re.M | re.S
    )
    if not m:
        found = re.findall(r"^\s*\.amdhsa_kernel\s+(\S+)", text, re.M)
        raise BuildError(
            f"{where}: no `.amdhsa_kernel {name}` (found {found}); the symbol must be the kernel key"
        )
    out: dict[str, int | None] = {}
    for line in m.group(1).splitlines():
        if d := re.match(r"\s*\.amdhsa_(\w+)\s+(.+?)\s*(?://.*|;.*)?$", line):
            out[d.group(1)] = int(d.group(2), 0) if re.fullmatch(r"(0x)?\d+", d.group(2)) else None
    return out


def _metadata(text: str, name: str) -> dict[str, str]:
    """Scalar keys of kernel `name` in the `.amdgpu_metadata` YAML (block or flow style); {} if absent."""
    m = re.search(r"^\s*\.amdgpu_metadata\s*$(.*?)^\s*\.end_amdgpu_metadata", text, re.M | re.S)
    if not m:
        return {}
    entries: list[dict[str, str]] = []
    key_indent = None
    for line in m.group(1).splitlines():
        start = re.match(r"^(\s*)- (\.[\w]+):\s*(.*)$", line)
        if start and (key_indent is None or len(start.group(1)) + 2 == key_indent):
            key_indent = len(start.group(1)) + 2
            entries.append({start.group(2): start.group(3).strip()})
            continue
        if entries and (kv := re.match(rf"^\s{{{key_indent}}}(\.[\w]+):\s*(\S.*)?$", line)):
            entries[-1][kv.group(1)] = (kv.group(2) or "").strip()
    return next((e for e in entries if e.get(".name") == name), {})


def read_gfx950_resources(text: str, name: str, where: str = "<asm>") -> dict[str, int]:
    """LDS bytes, unified registers (VGPR+AGPR), VGPRs, AGPRs, SGPRs and scratch bytes of kernel `name`.

    The descriptor is what the hardware uses, the metadata what the runtime reads: where both give
    a value they must agree.
    """
    desc, meta = _descriptor(text, name, where), _metadata(text, name)

    def pick(desc_key: str | None, meta_key: str | None, derived: int | None = None) -> int:
        d = desc.get(desc_key) if desc_key else None
        mv = int(meta[meta_key], 0) if meta_key and meta_key in meta else None
        d = derived if d is None else d
        if d is not None and mv is not None and d != mv:
            raise BuildError(
                f"{where}: {name}: descriptor {desc_key or 'derived'} = {d} but metadata {meta_key} = {mv}"
            )
        if d is None and mv is None:
            raise BuildError(f"{where}: {name}: neither .amdhsa_{desc_key} nor {meta_key} gives a number")
        return d if d is not None else mv  # type: ignore[return-value]

    registers = pick("next_free_vgpr", ".vgpr_count")
    accum = desc.get("accum_offset")
    agprs = pick(None, ".agpr_count", max(0, registers - accum) if accum is not None else None)
    sgprs = int(meta[".sgpr_count"]) if ".sgpr_count" in meta else pick("next_free_sgpr", None)
    return {
        "lds_bytes": pick("group_segment_fixed_size", ".group_segment_fixed_size"),
        "registers": registers,
        "vgprs": registers - agprs,
        "agprs": agprs,
        "sgprs": sgprs,
        "scratch_bytes": pick("private_segment_fixed_size", ".private_segment_fixed_size"),
    }
