"""__array_interface__ dicts (docs/spec.md §3.2, §7): every key present or not, of any type
(ints of any size, bools, floats, strings, tuple and list subclasses that lie), data as an
address, a buffer object, None or junk, in a dict or a dict subclass that lies.

Checks: only TypeError/BufferError escape; a view over a buffer object lies inside that
object's memory (read in full); a view over an address lies inside the span its shape,
strides, typestr and address describe, and is read in full when that is the harness's memory.
"""

from __future__ import annotations

import operator

from _common import (
    Finding,
    Iface,
    Memory,
    Reader,
    agree_with_numpy,
    check_inside,
    check_readonly,
    extent,
    fuzzbuf,
    imported,
    main,
    seed,
    touch,
    typestr_size,
)

MEMORY = Memory(4096)
TYPESTRS = ["<f4", "<i8", "|u1", "|b1", "<f2", "<c8", "<u2", "<f8", "|i1", "<V4", ">f4", "<f3"]


class LyingTuple(tuple):
    def __iter__(self):
        return iter((1 << 40,) * 3)

    def __len__(self):
        return 3

    def __getitem__(self, i):
        return 1 << 40


class LyingDict(dict):
    def __getitem__(self, key):
        return 7

    def get(self, key, default=None):
        return 7


def value(r: Reader, small: tuple[int, int]):
    """An int mostly in range small, or a value of another type."""
    kind = r.int_in(0, 15)
    if kind <= 9:
        return r.num(*small)
    return [True, 2.0, "3", None, 1 << 70, -(1 << 70)][kind - 10]


def sequence(r: Reader, small: tuple[int, int], n: int):
    kind = r.choice([tuple, list, LyingTuple, "int", "str"])
    return kind, [value(r, small) for _ in range(n)]


def build(kind, items):
    if kind == "int":
        return items[0] if items else 0
    if kind == "str":
        return "(2, 3)"
    return kind(items)


def own(seq):
    """A tuple's or list's items from its own storage (a subclass's methods do not run)."""
    if isinstance(seq, tuple):
        return tuple.__getitem__(seq, slice(None))
    if isinstance(seq, list):
        return list.__getitem__(seq, slice(None))
    raise TypeError(f"{type(seq).__name__} is not a tuple or list")


def describe(r: Reader) -> dict:
    ndim = r.int_in(0, 4) if r.int_in(0, 7) else r.int_in(0, 40)
    d = dict(container=r.choice([dict, LyingDict]), shape=sequence(r, (-1, 6), ndim))
    d["strides"] = sequence(r, (-64, 64), ndim) if r.flag() else None
    d["typestr"] = r.choice([*TYPESTRS, "blob"])
    if d["typestr"] == "blob":
        d["typestr"] = r.blob(8).decode("latin-1")
    kind = r.choice(["address", "bytes", "bytearray", "memoryview", "none", "junk", "absent"])
    d["data"] = kind
    if kind == "address":
        d["address"] = r.choice(["ours", "null", "any", "str"])
        d["at"] = r.int_in(0, 1024)
        d["readonly"] = r.choice([False, True, None, "yes", 2])
        d["any"] = r.num(0, 1 << 20)
    elif kind in ("bytes", "bytearray", "memoryview"):
        d["length"] = r.int_in(0, 96)
        d["skip"] = r.int_in(0, 8)
    d["offset"] = value(r, (-16, 64)) if r.flag() else "absent"
    d["version"] = value(r, (0, 4)) if r.flag() else "absent"
    d["mask"] = r.flag()
    d["descr"] = r.choice(["absent", "match", "other", "junk"])
    return d


def test_one_input(data: bytes) -> None:
    d = describe(Reader(data))
    ai = d["container"]()
    dict.__setitem__(ai, "shape", build(*d["shape"]))
    dict.__setitem__(ai, "typestr", d["typestr"])
    if d["strides"] is not None:
        dict.__setitem__(ai, "strides", build(*d["strides"]))
    buffer = None
    if d["data"] == "address":
        address = {"ours": MEMORY.address + d["at"], "null": 0, "any": d["any"],
                   "str": str(MEMORY.address)}[d["address"]]
        dict.__setitem__(ai, "data", (address, d["readonly"]))
    elif d["data"] in ("bytes", "bytearray", "memoryview"):
        raw = bytearray(range(d["length"]))
        buffer = {"bytes": bytes, "bytearray": bytearray,
                  "memoryview": lambda b: memoryview(b)[d["skip"]:]}[d["data"]](raw)
        dict.__setitem__(ai, "data", buffer)
    elif d["data"] != "absent":
        dict.__setitem__(ai, "data", None if d["data"] == "none" else 12.5)
    for key in ("offset", "version"):
        if d[key] != "absent":
            dict.__setitem__(ai, key, d[key])
    if d["mask"]:
        dict.__setitem__(ai, "mask", bytes(8))
    if d["descr"] != "absent":
        dict.__setitem__(ai, "descr", {"match": [("", d["typestr"])], "other": [("", "<i2")],
                                       "junk": [("a",)]}[d["descr"]])
    dl = imported(lambda: Iface(ai, buffer))
    if dl is None:
        return
    if buffer is not None:
        lo, n = fuzzbuf().address_of(buffer)
        check_inside(dl, lo, lo + n, "the buffer object given as data")
        check_readonly(dl, d["data"] == "bytes", "data is a bytes object")
        if d["container"] is dict:
            agree_with_numpy(dl, Iface(ai, buffer))
        touch(dl)
        return
    try:                                # read as NumPy does: the containers' own storage
        shape = [operator.index(x) for x in own(dict.__getitem__(ai, "shape"))]
        strides = dict.get(ai, "strides")
        strides = None if strides is None else [operator.index(x) for x in own(strides)]
        address = operator.index(dict.__getitem__(ai, "data")[0])
    except (TypeError, KeyError, IndexError) as e:
        raise Finding(f"imported a dict without an int shape, strides and address: "
                      f"{type(e).__name__}: {e}") from None
    size = typestr_size(d["typestr"])
    if size is None:
        raise Finding(f"typestr {d['typestr']!r} states no item size, yet was imported")
    lo, hi = extent(address, size, shape, strides)
    check_inside(dl, lo, hi, "the span the dict described")
    check_readonly(dl, bool(d.get("readonly")), f"data = (address, {d.get('readonly')!r})")
    if d["container"] is dict:          # NumPy reads what a dict subclass's methods say
        agree_with_numpy(dl, Iface(ai))
    if MEMORY.holds(lo, hi):
        touch(dl)


def seeds() -> dict[str, bytes]:
    """(ndim sel, ndim, container, shape kind, shape values..., strides?, ..., typestr, data,
    ...)."""
    def num(v):                             # a value(): an int in range
        return [0, v]

    return {
        "address": seed(describe, 1, 2, dict, tuple, *num(2), *num(3), False, "<f4",
                        "address", "ours", 0, False, 0, False, False, False, "absent"),
        "strided": seed(describe, 1, 2, dict, list, *num(2), *num(3), True, tuple, *num(24),
                        *num(-4), "<f4", "address", "ours", 64, True, 0, True, *num(0), True,
                        *num(3), False, "match"),
        "bytes": seed(describe, 1, 1, dict, tuple, *num(6), False, "|u1", "bytes", 8, 2,
                      True, *num(2), False, False, "absent"),
        "bytearray": seed(describe, 1, 1, dict, tuple, *num(3), False, "<u2", "bytearray", 8,
                          0, False, False, False, "absent"),
        "memoryview": seed(describe, 1, 1, dict, tuple, *num(3), False, "|u1", "memoryview",
                           8, 5, False, False, False, "absent"),
        "none": seed(describe, 1, 0, dict, tuple, False, "<f8", "none", False, False, False,
                     "absent"),
        "lying": seed(describe, 1, 1, LyingDict, LyingTuple, *num(2), False, "<f4",
                      "address", "ours", 0, False, 0, False, False, False, "absent"),
        "mask": seed(describe, 1, 1, dict, tuple, *num(2), False, "<f4", "address", "ours", 0,
                     False, 0, False, False, True, "other"),
    }


if __name__ == "__main__":
    main(test_one_input)
