"""DLPack structs (docs/spec.md §3.1, §3.6, §7): a DLManagedTensor or DLManagedTensorVersioned
built from the fuzzer's bytes (version, flags, dtype, ndim, shape, strides, byte_offset,
device), its data in memory the harness owns (or NULL), handed over as a capsule (its name,
a used name or none) or as a ctypes pointer; todict reads the capsule first. The description
is fuzzed, not the data address.

Checks: only TypeError/BufferError escape (todict too); the deleter runs at most once, and
exactly once when an imported view is gone; a view lies inside the span the struct describes
(data + byte_offset, element strides or C-contiguous, the dtype's width, a byte an element
for sub-byte types) and is read in full when that is the harness's memory.
"""

from __future__ import annotations

import ctypes
import gc

from _common import (
    ALLOWED,
    Finding,
    Memory,
    Reader,
    capsule,
    check_inside,
    check_readonly,
    extent,
    imported,
    main,
    seed,
    touch,
)

import dlpack
import dlpack.ctypes as dc

MEMORY = Memory(4096)
INT32 = (-(1 << 31), (1 << 31) - 1)
UINT64 = (0, (1 << 64) - 1)
CALLS = [0]


def _deleter(p) -> None:
    CALLS[0] += 1


DELETER = dc.DLManagedTensorDeleter(_deleter)
DELETER_V = dc.DLManagedTensorVersionedDeleter(_deleter)


def describe(r: Reader) -> dict:
    d = dict(versioned=r.flag())
    d["major"] = r.choice([1, 0, 2, "any"])
    d["minor"] = r.int_in(0, 5) if d["major"] != "any" else r.int_in(0, (1 << 32) - 1)
    if d["major"] == "any":
        d["major"] = r.int_in(0, (1 << 32) - 1)
    d["flags"] = r.choice([0, 1, 2, 4, 5, "any"])
    if d["flags"] == "any":
        d["flags"] = r.int_in(*UINT64)
    d["code"] = r.int_in(0, 20) if r.int_in(0, 7) else r.int_in(0, 255)
    d["bits"] = r.choice([8, 16, 32, 64, 128, 1, 2, 4, 6, 0, "any"])
    if d["bits"] == "any":
        d["bits"] = r.int_in(0, 255)
    d["lanes"] = r.choice([1, 2, 4, 0, "any"])
    if d["lanes"] == "any":
        d["lanes"] = r.int_in(0, 65535)
    d["ndim"] = (r.int_in(-1, 4) if r.int_in(0, 15) else r.int_in(*INT32)) if r.int_in(0, 7) \
        else r.int_in(0, 80)
    count = d["ndim"] if 0 <= d["ndim"] <= 80 else 0
    d["shape"] = None if r.int_in(0, 15) == 0 else [r.num(-1, 6) for _ in range(count)]
    d["strides"] = [r.num(-8, 8) for _ in range(count)] if r.flag() else None
    d["byte_offset"] = r.int_in(0, 256) if r.int_in(0, 15) else r.int_in(*UINT64)
    d["device"] = r.choice([1, 3, 2, 13, "any"])
    if d["device"] == "any":
        d["device"] = r.int_in(*INT32)
    d["device_id"] = 0 if r.int_in(0, 7) else r.int_in(*INT32)
    d["null"] = r.int_in(0, 15) == 0
    d["at"] = r.int_in(0, 1024)
    d["via"] = r.choice(["capsule", "pointer", "used-name", "no-name"])
    return d


def build(d: dict):
    """The managed tensor and what its pointers point into."""
    keep = []
    m = dc.DLManagedTensorVersioned() if d["versioned"] else dc.DLManagedTensor()
    if d["versioned"]:
        m.version.major, m.version.minor, m.flags = d["major"], d["minor"], d["flags"]
        m.deleter = DELETER_V
    else:
        m.deleter = DELETER
    t = m.dl_tensor
    t.data = None if d["null"] else MEMORY.address + d["at"]
    t.device.device_type, t.device.device_id = d["device"], d["device_id"]
    t.ndim = d["ndim"]
    t.dtype.code, t.dtype.bits, t.dtype.lanes = d["code"], d["bits"], d["lanes"]
    for name in ("shape", "strides"):
        if d[name] is not None:
            arr = (ctypes.c_int64 * max(len(d[name]), 1))(*d[name])
            keep.append(arr)
            setattr(t, name, ctypes.cast(arr, ctypes.POINTER(ctypes.c_int64)))
    t.byte_offset = d["byte_offset"]
    return m, keep


def test_one_input(data: bytes) -> None:
    d = describe(Reader(data))
    m, _keep = build(d)     # the shape and strides arrays, alive until the end
    CALLS[0] = 0
    name = b"dltensor_versioned" if d["versioned"] else b"dltensor"
    if d["via"] == "pointer":
        obj = ctypes.pointer(m)
    else:
        obj = capsule(ctypes.addressof(m), {
            "capsule": name, "used-name": b"used_" + name, "no-name": None}[d["via"]])
        try:
            dlpack.todict(obj)
        except ALLOWED:
            pass
    dl = imported(lambda: obj)
    if dl is None:
        if CALLS[0] > 1:
            raise Finding(f"refused, and the deleter ran {CALLS[0]} times")
        return
    t = m.dl_tensor
    width = d["bits"] * d["lanes"]
    size = max(1, (width + 7) // 8)
    if d["bits"] < 8 and d["versioned"] and d["flags"] & dlpack.FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED:
        size = max(1, d["lanes"])          # padded: a byte a lane
    start = (t.data or 0) + d["byte_offset"]
    strides = None if d["strides"] is None else [s * size for s in d["strides"]]
    lo, hi = extent(start, size, (d["shape"] or [])[:max(d["ndim"], 0)], strides)
    check_inside(dl, lo, hi, "the span the struct described")
    check_readonly(dl, not d["versioned"] or d["flags"] & dlpack.FLAG_BITMASK_READ_ONLY,
                   "the tensor is legacy or flagged READ_ONLY")
    if MEMORY.holds(lo, hi):
        touch(dl)
    del dl
    if CALLS[0] == 0:
        gc.collect()
    if CALLS[0] != 1:
        raise Finding(f"view gone; the deleter ran {CALLS[0]} times")


def seeds() -> dict[str, bytes]:
    """(versioned, major, minor, flags, code sel, code, bits, lanes, ndim sels, ndim, shape?,
    shape..., strides?, ..., byte_offset sel, byte_offset, device, id sel, null, at, via)."""
    def tensor(versioned, flags, code, bits, ndim, shape, strides=None, offset=0, at=0,
               via="capsule", device=1, lanes=1):
        head = [versioned, 1, 1, flags, 1, code, bits, lanes, 1, 1, ndim, 1, *shape]
        tail = [True, *strides] if strides is not None else [False]
        return seed(describe, *head, *tail, 1, offset, device, 1, 1, at, via)

    return {
        "f32": tensor(True, 0, 2, 32, 2, [2, 3]),
        "legacy-i64": tensor(False, 0, 0, 64, 1, [4]),
        "strided": tensor(True, 1, 1, 16, 2, [3, 2], [-1, 3], offset=8, at=64),
        "bool": tensor(True, 0, 6, 8, 1, [5]),
        "int4-packed": tensor(True, 0, 0, 4, 1, [7]),
        "int4-padded": tensor(True, 4, 0, 4, 1, [7]),
        "bf16x2": tensor(True, 0, 4, 16, 1, [3], lanes=2),
        "complex": tensor(True, 0, 5, 64, 1, [2]),
        "pointer": tensor(True, 0, 2, 64, 1, [2], via="pointer"),
        "legacy-pointer": tensor(False, 0, 2, 64, 1, [2], via="pointer"),
        "cuda": tensor(True, 0, 2, 32, 1, [2], device=2),
        "zero-dim": tensor(True, 0, 2, 64, 0, []),
    }


if __name__ == "__main__":
    main(test_one_input)
