"""Vector memory (global/flat/buffer loads and stores, loads into LDS) and LDS (DS) semantics.

Data moves when the instruction issues; the hazard checker (hazards.py) tracks the instruction as
outstanding until an s_waitcnt retires it and reports any register read, overwrite, or LDS access
that depends on it before then. Only lanes active in EXEC access memory.
"""

from __future__ import annotations

import numpy as np

from .asm import Instruction, Operand
from .core import LANES, M0, MASK32, Ctx, Op, Wave, check_no_mods, handler, reg_of, vdst_ref
from .errors import UnsupportedOperand

U32 = np.uint32
U64 = np.uint64

# mnemonic suffix -> (bytes, kind). kind: 'u' zero-extend, 's' sign-extend, 'd16' low half keep
# high, 'd16_hi' high half keep low, 'raw' full dwords.
_LOAD_FORMS = {
    "dword": (4, "raw"),
    "dwordx2": (8, "raw"),
    "dwordx3": (12, "raw"),
    "dwordx4": (16, "raw"),
    "ubyte": (1, "u"),
    "sbyte": (1, "s"),
    "ushort": (2, "u"),
    "sshort": (2, "s"),
    "short_d16": (2, "d16"),
    "short_d16_hi": (2, "d16_hi"),
    "ubyte_d16": (1, "d16u8"),
    "ubyte_d16_hi": (1, "d16u8_hi"),
    "sbyte_d16": (1, "d16s8"),
    "sbyte_d16_hi": (1, "d16s8_hi"),
}
_STORE_FORMS = {
    "dword": (4, 0),
    "dwordx2": (8, 0),
    "dwordx3": (12, 0),
    "dwordx4": (16, 0),
    "byte": (1, 0),
    "short": (2, 0),
    "byte_d16_hi": (1, 16),
    "short_d16_hi": (2, 16),
}
_CACHE_MODS = {"glc", "slc", "sc0", "sc1", "nt", "dlc"}


def _bytes_to_regs(data: np.ndarray) -> np.ndarray:
    """(lanes, 4*n) uint8 -> (n, lanes) uint32."""
    n = data.shape[1] // 4
    return np.ascontiguousarray(data).view("<u4").reshape(data.shape[0], n).T


def _regs_to_bytes(regs: np.ndarray, nbytes: int) -> np.ndarray:
    """(n, lanes) uint32 -> (lanes, nbytes) uint8 (little-endian, truncated to nbytes)."""
    return np.ascontiguousarray(regs.T.astype("<u4")).view(np.uint8)[:, :nbytes]


def _merge_load(w: Wave, arr: np.ndarray, idx: int, data: np.ndarray, kind: str, lanes: np.ndarray) -> None:
    """Write loaded bytes (active lanes only) into registers per the load form."""
    nb = data.shape[1]
    if kind == "raw":
        regs = _bytes_to_regs(data)
        for i in range(regs.shape[0]):
            arr[idx + i, lanes] = regs[i]
        return
    raw = np.zeros(data.shape[0], dtype=U32)
    for b in range(nb):
        raw |= data[:, b].astype(U32) << U32(8 * b)
    if kind == "u":
        arr[idx, lanes] = raw
    elif kind == "s":
        bits = 8 * nb
        sign = raw >> U32(bits - 1)
        arr[idx, lanes] = np.where(sign == 1, raw | U32(MASK32 ^ ((1 << bits) - 1)), raw)
    elif kind in ("d16", "d16u8", "d16s8"):
        v = raw
        if kind == "d16s8":
            v = np.where(raw >> U32(7) == 1, raw | U32(0xFF00), raw)
        arr[idx, lanes] = (arr[idx, lanes] & U32(0xFFFF0000)) | (v & U32(0xFFFF))
    else:  # *_hi
        v = raw
        if kind == "d16s8_hi":
            v = np.where(raw >> U32(7) == 1, raw | U32(0xFF00), raw)
        arr[idx, lanes] = (arr[idx, lanes] & U32(0xFFFF)) | ((v & U32(0xFFFF)) << U32(16))


def _global_addr(inst: Instruction, vaddr: Operand, saddr: Operand):
    """Per-lane 64-bit address function for global/flat forms (vaddr pair + off, or saddr + vaddr)."""
    off = inst.mods.get("offset", 0)
    if not -4096 <= off <= 4095:
        raise UnsupportedOperand(f"offset {off} out of the 13-bit signed range")
    vf, vi, vc = vdst_ref(vaddr)
    if saddr is None or saddr.kind == "off":
        if vc != 2:
            raise UnsupportedOperand("global address without saddr needs a 64-bit vaddr pair")

        def addr(w: Wave) -> np.ndarray:
            a = w.v[vi].astype(U64) | (w.v[vi + 1].astype(U64) << U64(32))
            return a + U64(off & ((1 << 64) - 1)) if off >= 0 else a - U64(-off)

        return addr, ((vf, vi, 2),)
    si = saddr.reg.index

    def addr_s(w: Wave) -> np.ndarray:
        base = w.sget(si, 2)
        a = U64(base) + w.v[vi].astype(U64)
        return a + U64(off) if off >= 0 else a - U64(-off)

    return addr_s, ((vf, vi, 1), ("s", si, 2))


def _form(op: str, prefixes: tuple[str, ...]) -> str:
    for p in prefixes:
        if op.startswith(p):
            return op[len(p) :]
    raise UnsupportedOperand(op)


def _mem_info(nbytes: int, counter: str = "vm", **kw) -> dict:
    return {"counter": counter, "bytes": nbytes, **kw}


@handler(*(f"{p}_load_{f}" for p in ("global", "flat") for f in _LOAD_FORMS))
def _global_load(inst: Instruction, ctx: Ctx) -> Op:
    check_no_mods(inst, _CACHE_MODS | {"offset"})
    form = _form(inst.op, ("global_load_", "flat_load_"))
    nbytes, kind = _LOAD_FORMS[form]
    ops = inst.operands
    vdst, vaddr = ops[0], ops[1]
    saddr = ops[2] if len(ops) > 2 else None
    addr, areads = _global_addr(inst, vaddr, saddr)
    file, didx, cnt = vdst_ref(vdst)
    nregs = max(1, nbytes // 4)

    def fn(w: Wave) -> None:
        lanes = w.exec_mask
        if not lanes.any():
            return
        a = addr(w)[lanes]
        data = w.wg.mem.read(a, nbytes, inst.text)
        _merge_load(w, w.vfile(file), didx, data, kind, lanes)

    partial = kind not in ("raw", "u", "s")
    reads = areads + (((file, didx, 1),) if partial else ())
    return Op(fn, "vmem_load", inst, reads, ((file, didx, nregs),), info=_mem_info(nbytes))


@handler(*(f"{p}_store_{f}" for p in ("global", "flat") for f in _STORE_FORMS))
def _global_store(inst: Instruction, ctx: Ctx) -> Op:
    check_no_mods(inst, _CACHE_MODS | {"offset"})
    form = _form(inst.op, ("global_store_", "flat_store_"))
    nbytes, shift = _STORE_FORMS[form]
    ops = inst.operands
    vaddr, vdata = ops[0], ops[1]
    saddr = ops[2] if len(ops) > 2 else None
    addr, areads = _global_addr(inst, vaddr, saddr)
    file, didx, _ = vdst_ref(vdata)
    nregs = max(1, nbytes // 4)

    def fn(w: Wave) -> None:
        lanes = w.exec_mask
        if not lanes.any():
            return
        regs = w.vfile(file)[didx : didx + nregs][:, lanes]
        if shift:
            regs = regs >> U32(shift)
        w.wg.mem.write(addr(w)[lanes], _regs_to_bytes(regs, nbytes), inst.text)

    return Op(fn, "vmem_store", inst, areads + ((file, didx, nregs),), (), info=_mem_info(nbytes))


_LDS_DMA = {"global_load_lds_dword": 4, "global_load_lds_dwordx3": 12, "global_load_lds_dwordx4": 16,
            "global_load_lds_ubyte": 1, "global_load_lds_sbyte": 1, "global_load_lds_ushort": 2,
            "global_load_lds_sshort": 2}  # fmt: skip


@handler(*_LDS_DMA)
def _global_load_lds(inst: Instruction, ctx: Ctx) -> Op:
    """Global -> LDS without VGPRs (gfx950 adds dwordx3/x4).

    LDS address per lane = M0 + inst_offset + lane * size (lanes packed contiguously), the layout
    the compiler's intrinsic documents ("imm offset applied to both global and LDS address").
    Sub-dword forms are not modelled (extension rules unverified).
    """
    check_no_mods(inst, _CACHE_MODS | {"offset"})
    nbytes = _LDS_DMA[inst.op]
    if nbytes < 4:
        raise UnsupportedOperand(f"{inst.op}: sub-dword LDS DMA not modelled")
    ops = inst.operands
    vaddr = ops[0]
    saddr = ops[1] if len(ops) > 1 else None
    addr, areads = _global_addr(inst, vaddr, saddr)
    off = inst.mods.get("offset", 0)
    lane_ids = np.arange(LANES, dtype=np.int64)

    def fn(w: Wave) -> None:
        lanes = w.exec_mask
        if not lanes.any():
            return
        data = w.wg.mem.read(addr(w)[lanes], nbytes, inst.text)
        lds_addr = (w.s[M0] & 0x3FFFF) + off + lane_ids[lanes] * nbytes
        w.wg.lds_dma_issue(w, lds_addr, data, inst)

    return Op(fn, "lds_dma", inst, areads + (("s", M0, 1),), (), info=_mem_info(nbytes, lds_dma=True))


# ---- buffer (MUBUF) ------------------------------------------------------------------------------


# Whether a raw buffer's range check counts the SGPR offset (soffset): out of range iff
# soffset + VGPR offset + instruction offset + size > num_records. True on the evidence of AITER's
# gfx950 kernels, which step K/V tiles with soffset past the end of unpadded tensors and are correct
# only if those loads read 0 (docs/simulator.md, "Buffer range checks").
RANGE_CHECK_SOFFSET = True


def _buffer_addr(inst: Instruction, ops: list[Operand]):
    """Per-lane (address, in_range) for raw buffers (V# stride 0 or idxen/offen forms)."""
    check_no_mods(inst, _CACHE_MODS | {"offset", "offen", "idxen", "lds"})
    vaddr, srsrc, soff = ops
    offen, idxen = bool(inst.mods.get("offen")), bool(inst.mods.get("idxen"))
    inst_off = inst.mods.get("offset", 0)
    ri = srsrc.reg.index
    if srsrc.reg.count != 4:
        raise UnsupportedOperand("buffer resource must be 4 SGPRs")
    vi = vaddr.reg.index if vaddr.kind == "reg" else None
    soff_get = (lambda w: 0) if soff.kind == "int" and soff.value == 0 else None
    if soff_get is None:
        from .core import scalar_src

        soff_get = scalar_src(soff)

    def addr(w: Wave, nbytes: int) -> tuple[np.ndarray, np.ndarray]:
        d0, d1, d2, d3 = (w.s[ri + k] for k in range(4))
        base = d0 | ((d1 & 0xFFFF) << 32)
        stride = (d1 >> 16) & 0x3FFF
        swizzle = (d3 >> 23) & 1 if False else (d1 >> 31) & 1
        if swizzle:
            raise UnsupportedOperand("swizzled buffer resources are not modelled")
        num_records = d2
        voff = np.zeros(LANES, dtype=np.int64)
        vidx = np.zeros(LANES, dtype=np.int64)
        if idxen and offen:
            vidx, voff = w.v[vi].astype(np.int64), w.v[vi + 1].astype(np.int64)
        elif idxen:
            vidx = w.v[vi].astype(np.int64)
        elif offen:
            voff = w.v[vi].astype(np.int64)
        offset = voff + inst_off
        so = soff_get(w)
        if stride == 0:
            # Raw buffer: out of range iff offset + size > num_records; whether soffset counts
            # is RANGE_CHECK_SOFFSET (see its comment).
            in_range = offset + (so if RANGE_CHECK_SOFFSET else 0) + nbytes <= num_records
            a = base + so + offset
        else:
            in_range = (vidx < num_records) & (offset + nbytes <= stride)
            a = base + so + vidx * stride + offset
        return a.astype(np.uint64), in_range

    reads = (("s", ri, 4),) + (
        ((vaddr.reg.file, vi, 2 if idxen and offen else 1),) if (offen or idxen) else ()
    )
    r = reg_of(soff)
    if r:
        reads += (r,)
    return addr, reads


_BUF_LOAD = {f"buffer_load_{f}": v for f, v in _LOAD_FORMS.items()}
_BUF_STORE = {f"buffer_store_{f}": v for f, v in _STORE_FORMS.items()}


@handler(*_BUF_LOAD)
def _buffer_load(inst: Instruction, ctx: Ctx) -> Op:
    nbytes, kind = _BUF_LOAD[inst.op]
    ops = inst.operands
    to_lds = bool(inst.mods.get("lds"))
    if to_lds:
        addr, reads = _buffer_addr(inst, ops)
        if nbytes not in (4, 12, 16):
            raise UnsupportedOperand(f"{inst.op} lds: only dword/dwordx3/dwordx4 modelled")
        lane_ids = np.arange(LANES, dtype=np.int64)
        off = inst.mods.get("offset", 0)

        def fn_lds(w: Wave) -> None:
            lanes = w.exec_mask
            a, ok = addr(w, nbytes)
            data = np.zeros((LANES, nbytes), dtype=np.uint8)
            sel = lanes & ok
            if sel.any():
                data[sel] = w.wg.mem.read(a[sel], nbytes, inst.text)
            lds_addr = (w.s[M0] & 0x3FFFF) + off + lane_ids[lanes] * nbytes
            w.wg.lds_dma_issue(w, lds_addr, data[lanes], inst)

        return Op(fn_lds, "lds_dma", inst, reads + (("s", M0, 1),), (), info=_mem_info(nbytes, lds_dma=True))
    vdst, rest = ops[0], ops[1:]
    addr, reads = _buffer_addr(inst, rest)
    file, didx, _ = vdst_ref(vdst)
    nregs = max(1, nbytes // 4)

    def fn(w: Wave) -> None:
        lanes = w.exec_mask
        if not lanes.any():
            return
        a, ok = addr(w, nbytes)
        data = np.zeros((LANES, nbytes), dtype=np.uint8)  # out-of-range lanes read 0
        sel = lanes & ok
        if sel.any():
            data[sel] = w.wg.mem.read(a[sel], nbytes, inst.text)
        _merge_load(w, w.vfile(file), didx, data[lanes], kind, lanes)

    return Op(fn, "vmem_load", inst, reads, ((file, didx, nregs),), info=_mem_info(nbytes))


@handler(*_BUF_STORE)
def _buffer_store(inst: Instruction, ctx: Ctx) -> Op:
    nbytes, shift = _BUF_STORE[inst.op]
    vdata, rest = inst.operands[0], inst.operands[1:]
    addr, reads = _buffer_addr(inst, rest)
    file, didx, _ = vdst_ref(vdata)
    nregs = max(1, nbytes // 4)

    def fn(w: Wave) -> None:
        lanes = w.exec_mask
        a, ok = addr(w, nbytes)
        sel = lanes & ok  # out-of-range lanes drop the write
        if not sel.any():
            return
        regs = w.vfile(file)[didx : didx + nregs][:, sel]
        if shift:
            regs = regs >> U32(shift)
        w.wg.mem.write(a[sel], _regs_to_bytes(regs, nbytes), inst.text)

    return Op(fn, "vmem_store", inst, reads + ((file, didx, nregs),), (), info=_mem_info(nbytes))


# ---- LDS (DS) ------------------------------------------------------------------------------------

_DS_READ = {"ds_read_b32": (4, "raw"), "ds_read_b64": (8, "raw"), "ds_read_b96": (12, "raw"),
            "ds_read_b128": (16, "raw"), "ds_read_u8": (1, "u"), "ds_read_i8": (1, "s"),
            "ds_read_u16": (2, "u"), "ds_read_i16": (2, "s"), "ds_read_u16_d16": (2, "d16"),
            "ds_read_u16_d16_hi": (2, "d16_hi"), "ds_read_u8_d16": (1, "d16u8"),
            "ds_read_u8_d16_hi": (1, "d16u8_hi")}  # fmt: skip
_DS_WRITE = {"ds_write_b32": (4, 0), "ds_write_b64": (8, 0), "ds_write_b96": (12, 0),
             "ds_write_b128": (16, 0), "ds_write_b8": (1, 0), "ds_write_b16": (2, 0),
             "ds_write_b8_d16_hi": (1, 16), "ds_write_b16_d16_hi": (2, 16)}  # fmt: skip


def _ds_addr(inst: Instruction, aop: Operand):
    if aop.kind != "reg" or aop.reg.file != "v":
        raise UnsupportedOperand(f"DS address must be a VGPR, got {aop.text!r}")
    ai = aop.reg.index
    off = inst.mods.get("offset", 0)
    return (lambda w: w.v[ai].astype(np.int64) + off), (("v", ai, 1),)


@handler(*_DS_READ)
def _ds_read(inst: Instruction, ctx: Ctx) -> Op:
    check_no_mods(inst, {"offset", "gds"} - {"gds"})
    nbytes, kind = _DS_READ[inst.op]
    vdst, aop = inst.operands
    addr, reads = _ds_addr(inst, aop)
    file, didx, _ = vdst_ref(vdst)
    nregs = max(1, nbytes // 4)

    def fn(w: Wave) -> None:
        lanes = w.exec_mask
        if not lanes.any():
            return
        data = w.wg.lds_read(w, addr(w)[lanes], nbytes, inst)
        _merge_load(w, w.vfile(file), didx, data, kind, lanes)

    partial = kind not in ("raw", "u", "s")
    reads = reads + (((file, didx, 1),) if partial else ())
    return Op(fn, "ds", inst, reads, ((file, didx, nregs),), info=_mem_info(nbytes, "lgkm", lds=True))


@handler(*_DS_WRITE)
def _ds_write(inst: Instruction, ctx: Ctx) -> Op:
    check_no_mods(inst, {"offset"})
    nbytes, shift = _DS_WRITE[inst.op]
    aop, vdata = inst.operands
    addr, reads = _ds_addr(inst, aop)
    file, didx, _ = vdst_ref(vdata)
    nregs = max(1, nbytes // 4)

    def fn(w: Wave) -> None:
        lanes = w.exec_mask
        if not lanes.any():
            return
        regs = w.vfile(file)[didx : didx + nregs][:, lanes]
        if shift:
            regs = regs >> U32(shift)
        w.wg.lds_write(w, addr(w)[lanes], _regs_to_bytes(regs, nbytes), inst)

    return Op(fn, "ds", inst, reads + ((file, didx, nregs),), (), info=_mem_info(nbytes, "lgkm", lds=True))


@handler("ds_read2_b32", "ds_read2_b64", "ds_read2st64_b32", "ds_read2st64_b64")
def _ds_read2(inst: Instruction, ctx: Ctx) -> Op:
    check_no_mods(inst, {"offset0", "offset1"})
    size = 8 if inst.op.endswith("b64") else 4
    unit = size * (64 if "st64" in inst.op else 1)
    vdst, aop = inst.operands
    ai = aop.reg.index
    o0, o1 = inst.mods.get("offset0", 0) * unit, inst.mods.get("offset1", 0) * unit
    file, didx, _ = vdst_ref(vdst)

    def fn(w: Wave) -> None:
        lanes = w.exec_mask
        if not lanes.any():
            return
        base = w.v[ai].astype(np.int64)[lanes]
        d0 = w.wg.lds_read(w, base + o0, size, inst)
        d1 = w.wg.lds_read(w, base + o1, size, inst)
        _merge_load(w, w.vfile(file), didx, np.concatenate([d0, d1], axis=1), "raw", lanes)

    n = 2 * size // 4
    return Op(fn, "ds", inst, (("v", ai, 1),), ((file, didx, n),), info=_mem_info(2 * size, "lgkm", lds=True))


@handler("ds_write2_b32", "ds_write2_b64", "ds_write2st64_b32", "ds_write2st64_b64")
def _ds_write2(inst: Instruction, ctx: Ctx) -> Op:
    check_no_mods(inst, {"offset0", "offset1"})
    size = 8 if inst.op.endswith("b64") else 4
    unit = size * (64 if "st64" in inst.op else 1)
    aop, d0op, d1op = inst.operands
    ai = aop.reg.index
    o0, o1 = inst.mods.get("offset0", 0) * unit, inst.mods.get("offset1", 0) * unit
    f0, i0, _ = vdst_ref(d0op)
    f1, i1, _ = vdst_ref(d1op)
    nr = size // 4

    def fn(w: Wave) -> None:
        lanes = w.exec_mask
        if not lanes.any():
            return
        base = w.v[ai].astype(np.int64)[lanes]
        w.wg.lds_write(w, base + o0, _regs_to_bytes(w.vfile(f0)[i0 : i0 + nr][:, lanes], size), inst)
        w.wg.lds_write(w, base + o1, _regs_to_bytes(w.vfile(f1)[i1 : i1 + nr][:, lanes], size), inst)

    reads = (("v", ai, 1), (f0, i0, nr), (f1, i1, nr))
    return Op(fn, "ds", inst, reads, (), info=_mem_info(2 * size, "lgkm", lds=True))


_DS_ATOMIC = {
    "ds_add_u32": lambda m, d: m + d,
    "ds_sub_u32": lambda m, d: m - d,
    "ds_max_u32": np.maximum,
    "ds_min_u32": np.minimum,
    "ds_max_i32": lambda m, d: np.maximum(m.view(np.int32), d.view(np.int32)).view(U32),
    "ds_min_i32": lambda m, d: np.minimum(m.view(np.int32), d.view(np.int32)).view(U32),
    "ds_and_b32": lambda m, d: m & d,
    "ds_or_b32": lambda m, d: m | d,
    "ds_xor_b32": lambda m, d: m ^ d,
    "ds_max_f32": lambda m, d: np.fmax(m.view(np.float32), d.view(np.float32)).view(U32),
    "ds_min_f32": lambda m, d: np.fmin(m.view(np.float32), d.view(np.float32)).view(U32),
    "ds_add_f32": lambda m, d: (m.view(np.float32) + d.view(np.float32)).astype(np.float32).view(U32),
}


@handler(*_DS_ATOMIC, *(k.replace("ds_", "ds_") + "_rtn" for k in ()))
def _ds_atomic(inst: Instruction, ctx: Ctx) -> Op:
    check_no_mods(inst, {"offset"})
    f = _DS_ATOMIC[inst.op]
    aop, dop = inst.operands
    addr, reads = _ds_addr(inst, aop)
    fd, di, _ = vdst_ref(dop)

    def fn(w: Wave) -> None:
        lanes = np.flatnonzero(w.exec_mask)
        a = addr(w)
        d = w.vfile(fd)[di]
        # Lanes apply in lane order (each sees the previous lanes' updates), as the LDS serialises
        # conflicting atomics.
        for ln in lanes:
            cur = _bytes_to_regs(w.wg.lds_read(w, a[ln : ln + 1], 4, inst))[0]
            with np.errstate(over="ignore"):
                new = np.asarray(f(cur, d[ln : ln + 1])).astype(U32)
            w.wg.lds_write(w, a[ln : ln + 1], _regs_to_bytes(new[None, :], 4), inst)

    return Op(fn, "ds", inst, reads + ((fd, di, 1),), (), info=_mem_info(4, "lgkm", lds=True))


@handler("ds_bpermute_b32", "ds_permute_b32")
def _ds_permute(inst: Instruction, ctx: Ctx) -> Op:
    check_no_mods(inst, {"offset"})
    vdst, aop, dop = inst.operands
    off = inst.mods.get("offset", 0)
    ai, di = aop.reg.index, dop.reg.index
    file, vi, _ = vdst_ref(vdst)
    back = inst.op == "ds_bpermute_b32"

    def fn(w: Wave) -> None:
        ex = w.exec_mask
        lane = ((w.v[ai].astype(np.int64) + off) // 4) % LANES
        data = w.v[di]
        tmp = np.zeros(LANES, dtype=U32)
        if back:
            # Pull: lane i reads lane src; an inactive source lane gives 0.
            tmp = np.where(ex[lane], data[lane], U32(0))
        else:
            # Push: active lane i sends to lane dst; the highest-numbered sender wins.
            for i in np.flatnonzero(ex):
                tmp[lane[i]] = data[i]
        w.vwrite(w.vfile(file), vi, tmp)

    # No LDS memory access, but it travels through the LDS unit and counts on lgkmcnt.
    return Op(fn, "ds", inst, (("v", ai, 1), ("v", di, 1)), ((file, vi, 1),), info=_mem_info(4, "lgkm"))


def _swizzle_lanes(text: str | int) -> np.ndarray:
    """Source lane per lane for ds_swizzle offset:swizzle(...) or a raw 16-bit offset."""
    lanes = np.arange(LANES)
    if isinstance(text, int):
        off = text
    else:
        t = str(text)
        inner = t[t.index("(") + 1 : t.rindex(")")]
        parts = [p.strip() for p in inner.split(",")]
        mode = parts[0].upper()
        args = [int(p, 0) for p in parts[1:]]
        if mode == "SWAP":
            return lanes ^ args[0]
        if mode == "REVERSE":
            n = args[0]
            return (lanes & ~(n - 1)) | ((n - 1) - (lanes & (n - 1)))
        if mode == "BROADCAST":
            n, sel = args
            return (lanes & ~(n - 1)) | sel
        if mode == "QUAD_PERM":
            return (lanes & ~3) + np.array(args)[lanes & 3]
        raise UnsupportedOperand(f"ds_swizzle mode {mode}")
    if off & 0x8000:
        sel = [(off >> (2 * k)) & 3 for k in range(4)]
        return (lanes & ~3) + np.array(sel)[lanes & 3]
    and_mask, or_mask, xor_mask = off & 0x1F, (off >> 5) & 0x1F, (off >> 10) & 0x1F
    within = lanes & 31
    src = ((within & and_mask) | or_mask) ^ xor_mask
    return (lanes & ~31) | src


@handler("ds_swizzle_b32")
def _ds_swizzle(inst: Instruction, ctx: Ctx) -> Op:
    vdst, aop = inst.operands
    src = _swizzle_lanes(inst.mods.get("offset", 0))
    ai = aop.reg.index
    file, vi, _ = vdst_ref(vdst)

    def fn(w: Wave) -> None:
        ex = w.exec_mask
        data = w.v[ai]
        w.vwrite(w.vfile(file), vi, np.where(ex[src], data[src], U32(0)))

    return Op(fn, "ds", inst, (("v", ai, 1),), ((file, vi, 1),), info=_mem_info(4, "lgkm"))


# gfx950 transposing LDS reads: mnemonic -> (element bits, bits read per lane).
_DS_READ_TR = {"ds_read_b64_tr_b4": (4, 64), "ds_read_b64_tr_b8": (8, 64),
               "ds_read_b64_tr_b16": (16, 64), "ds_read_b96_tr_b6": (6, 96)}  # fmt: skip


def tr_source(elem_bits: int, read_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Where each result element of a ds_read_*_tr_* comes from: (source lane, source element).

    Both arrays are (64 lanes, n), n = read_bits // elem_bits elements per lane. Every lane reads n
    elements at its own LDS address. Within each group of 16 lanes the n x 16 block is transposed:
    row r is the 16 elements read by lanes r*p .. r*p+p-1 (p = 16 // n), and result lane l gets
    column l, so its element j is element l % n of source lane j*p + l // n of the same group.
    Authority: the GPU tests of ROCm rocRoller's TransposeLoadsTest (docs/simulator.md).
    """
    n = read_bits // elem_bits
    p = 16 // n
    lane = np.arange(LANES)[:, None]
    j = np.arange(n)[None, :]
    group, l16 = lane & ~15, lane & 15
    return group + j * p + l16 // n, np.broadcast_to(l16 % n, (LANES, n))


def _tr_permute(data: np.ndarray, elem_bits: int, read_bits: int) -> np.ndarray:
    """(64, nbytes) source bytes -> (64, nbytes) result bytes of a transposing read."""
    n = read_bits // elem_bits
    bits = np.unpackbits(data, axis=1, bitorder="little").reshape(LANES, n, elem_bits)
    src_lane, src_elem = tr_source(elem_bits, read_bits)
    out = bits[src_lane, src_elem].reshape(LANES, read_bits)
    return np.packbits(out, axis=1, bitorder="little")


@handler(*_DS_READ_TR)
def _ds_read_tr(inst: Instruction, ctx: Ctx) -> Op:
    check_no_mods(inst, {"offset"})
    elem_bits, read_bits = _DS_READ_TR[inst.op]
    nbytes = read_bits // 8
    # The ISA requires the LDS address aligned to the data size; rocRoller pads b96_tr_b6 rows to
    # 128 bits because that form needs 16-byte alignment.
    align = 16 if read_bits == 96 else nbytes
    vdst, aop = inst.operands
    addr, reads = _ds_addr(inst, aop)
    file, didx, _ = vdst_ref(vdst)
    nregs = nbytes // 4

    def fn(w: Wave) -> None:
        lanes = w.exec_mask
        if not lanes.all():
            # CDNA4 ISA 11.4: EXEC must be all 1's; the result is then undefined. Inactive source
            # lanes contribute zeros here and only active lanes are written.
            w.wg.report(w, "exec", f"{inst.op} executed with a partial EXEC mask (ISA: must be all 1's)")
            if not lanes.any():
                return
        a = addr(w)[lanes]
        if (a % align).any():
            w.wg.report(w, "lds_align", f"{inst.op} LDS address not {align}-byte aligned")
        data = np.zeros((LANES, nbytes), dtype=np.uint8)
        data[lanes] = w.wg.lds_read(w, a, nbytes, inst)
        out = _tr_permute(data, elem_bits, read_bits)
        _merge_load(w, w.vfile(file), didx, out[lanes], "raw", lanes)

    return Op(fn, "ds", inst, reads, ((file, didx, nregs),), info=_mem_info(nbytes, "lgkm", lds=True))
