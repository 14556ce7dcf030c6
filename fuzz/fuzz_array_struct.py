"""__array_struct__ (docs/spec.md §3.3, §7): a PyArrayInterface built from the fuzzer's bytes
(two, nd, typekind, itemsize, flags, shape, strides), its data in memory the harness owns, in
a capsule. The description is fuzzed, not the data address.

Checks: only TypeError/BufferError escape; a view lies inside the span the struct describes
(shape, byte strides or C-contiguous, itemsize, from data), and is read in full when that is
the harness's memory.
"""

from __future__ import annotations

import ctypes

from _common import (
    Memory,
    Reader,
    agree_with_numpy,
    check_inside,
    check_readonly,
    extent,
    imported,
    main,
    seed,
    touch,
)

MEMORY = Memory(4096)
INT32 = (-(1 << 31), (1 << 31) - 1)
KINDS = list(b"biufcV?OMmSUx")
FLAGS = 0x701                       # C_CONTIGUOUS | ALIGNED | NOTSWAPPED | WRITEABLE
ARR_HAS_DESCR = 0x800


class PyArrayInterface(ctypes.Structure):
    _fields_ = [("two", ctypes.c_int), ("nd", ctypes.c_int), ("typekind", ctypes.c_char),
                ("itemsize", ctypes.c_int), ("flags", ctypes.c_int),
                ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
                ("strides", ctypes.POINTER(ctypes.c_ssize_t)),
                ("data", ctypes.c_void_p), ("descr", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class Provider:
    """Speaks only __array_struct__; keeps the struct and its arrays alive."""

    def __init__(self, s, keep) -> None:
        self.s, self.keep = s, keep

    @property
    def __array_struct__(self):
        return _capsule_new(ctypes.addressof(self.s), None, None)


def num32(r: Reader, low: int, high: int) -> int:
    """Mostly in [low, high], else any int32."""
    return r.int_in(low, high) if r.int_in(0, 15) else r.int_in(*INT32)


def describe(r: Reader) -> dict:
    d = dict(two=2 if r.int_in(0, 15) else r.int_in(*INT32))
    d["nd"] = num32(r, -1, 4) if r.int_in(0, 7) else r.int_in(0, 80)
    d["kind"] = r.choice(KINDS) if r.int_in(0, 7) else r.int_in(0, 255)
    d["itemsize"] = num32(r, -1, 40)
    d["flags"] = FLAGS ^ r.int_in(0, 0xFFF) if r.flag() else FLAGS
    count = d["nd"] if 0 <= d["nd"] <= 80 else 0
    d["shape"] = None if r.int_in(0, 15) == 0 else [r.num(-1, 6) for _ in range(count)]
    d["strides"] = [r.num(-64, 64) for _ in range(count)] if r.flag() else None
    d["at"] = r.int_in(0, 1024)
    return d


def test_one_input(data: bytes) -> None:
    d = describe(Reader(data))
    s = PyArrayInterface(d["two"], d["nd"], bytes([d["kind"]]), d["itemsize"], d["flags"])
    keep = []
    for name in ("shape", "strides"):
        if d[name] is not None:
            arr = (ctypes.c_ssize_t * max(len(d[name]), 1))(*d[name])
            keep.append(arr)
            setattr(s, name, ctypes.cast(arr, ctypes.POINTER(ctypes.c_ssize_t)))
    s.data = MEMORY.address + d["at"]
    dl = imported(lambda: Provider(s, keep))
    if dl is None:
        return
    lo, hi = extent(s.data, d["itemsize"], d["shape"] or [], d["strides"])
    check_inside(dl, lo, hi, "the span the struct described")
    check_readonly(dl, not d["flags"] & 0x400, "the struct's flags lack WRITEABLE")
    if not d["flags"] & ARR_HAS_DESCR:   # NumPy would read the NULL descr as an object
        agree_with_numpy(dl, Provider(s, keep))
    if MEMORY.holds(lo, hi):
        touch(dl)


def seeds() -> dict[str, bytes]:
    """(two, nd sel, nd, kind sel, kind, itemsize, flags?, shape?, shape..., strides?, ...,
    at); nd and itemsize as [1, value] (in range), shape and strides as values."""
    f, i, b, c, u, v = (ord(k) for k in "fibcuV")
    return {
        "f4": seed(describe, 1, 1, 1, 2, 1, f, 1, 4, False, 1, 2, 3, False, 0),
        "strided": seed(describe, 1, 1, 1, 2, 1, i, 1, 2, False, 1, 3, 2, True, -4, 2, 64),
        "readonly-bool": seed(describe, 1, 1, 1, 1, 1, b, 1, 1, True, 0x400, 1, 5, False, 0),
        "complex": seed(describe, 1, 1, 1, 1, 1, c, 1, 16, False, 1, 2, False, 0),
        "zero-dim": seed(describe, 1, 1, 1, 0, 1, u, 1, 8, False, 1, False, 0),
        "no-shape": seed(describe, 1, 1, 1, 1, 1, f, 1, 8, False, 0, False, 0),
        "swapped": seed(describe, 1, 1, 1, 1, 1, f, 1, 8, True, 0x200, 1, 2, False, 0),
        "void": seed(describe, 1, 1, 1, 1, 1, v, 1, 2, False, 1, 2, False, 0),
    }


if __name__ == "__main__":
    main(test_one_input)
