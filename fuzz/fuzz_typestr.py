"""typestr and descr (docs/spec.md §3.2, §3.7): any typestr, and a descr list of any shape,
in an __array_interface__ over memory the harness owns (a 1-D array of up to 8 items).

Checks: only TypeError/BufferError escape; a view's item is as wide as the typestr says
(a typestr is never read as another width) and the view lies inside the memory described.
"""

from __future__ import annotations

from _common import (
    Finding,
    Iface,
    Memory,
    Reader,
    agree_with_numpy,
    check_inside,
    check_readonly,
    imported,
    main,
    seed,
    touch,
    typestr_size,
)

MEMORY = Memory(8 * 64)


def text(r: Reader, most: int) -> str:
    return r.blob(most).decode("latin-1")


def entry(r: Reader):
    """One descr item: (name, typestr), (name, typestr, shape), or something else."""
    kind = r.int_in(0, 5)
    if kind == 0:
        return (text(r, 8), text(r, 12))
    if kind == 1:
        return (text(r, 8), text(r, 12), tuple(r.num(-1, 4) for _ in range(r.int_in(0, 2))))
    if kind == 2:
        return ((text(r, 8), text(r, 8)), text(r, 12))      # (title, name) pair
    if kind == 3:
        return (text(r, 8), [entry(r) for _ in range(r.int_in(0, 2))])     # nested
    if kind == 4:
        return [text(r, 8), text(r, 12)]
    return r.num(-1, 8)


def describe(r: Reader) -> dict:
    typestr = text(r, 16)
    descr = None
    if r.flag():
        descr = [entry(r) for _ in range(r.int_in(0, 3))]
    return dict(typestr=typestr, descr=descr, n=r.int_in(0, 8), readonly=r.flag())


def test_one_input(data: bytes) -> None:
    d = describe(Reader(data))
    ai = dict(shape=(d["n"],), typestr=d["typestr"], data=(MEMORY.address, d["readonly"]),
              version=3)
    if d["descr"] is not None:
        ai["descr"] = d["descr"]
    dl = imported(lambda: Iface(ai))
    if dl is None:
        return
    size = typestr_size(d["typestr"])
    if size is None:
        raise Finding(f"typestr {d['typestr']!r} states no item size, yet was imported")
    if dl.itemsize != size and dl.dtype.bits * dl.dtype.lanes != 8 * size:
        raise Finding(f"typestr {d['typestr']!r} ({size} bytes) read as {dl.dtype.name}")
    check_readonly(dl, d["readonly"], "data = (address, True)")
    check_inside(dl, MEMORY.address, MEMORY.address + d["n"] * size, "the memory described")
    agree_with_numpy(dl, Iface(ai))
    touch(dl)


def seeds() -> dict[str, bytes]:
    """(typestr, descr?, [entries], n, readonly)."""
    return {
        "f4": seed(describe, b"<f4", False, 3, False),
        "b1": seed(describe, b"|b1", False, 8, True),
        "c16": seed(describe, b"<c16", False, 2, False),
        "f04": seed(describe, b"<f04", False, 2, False),
        "V2-descr": seed(describe, b"|V2", True, 1, 0, b"bfloat16", b"<V2", 4, False),
        "f8-descr": seed(describe, b"<f8", True, 1, 0, b"", b"<f8", 4, False),
        "struct": seed(describe, b"|V8", True, 2, 0, b"a", b"<i4", 0, b"b", b"<f4", 1, False),
        "subarray": seed(describe, b"|V8", True, 1, 1, b"a", b"<i4", 1, 2, 1, False),
        "datetime": seed(describe, b"<M8[s]", False, 1, False),
        "swapped": seed(describe, b">i4", False, 1, False),
        "f16": seed(describe, b"<f16", False, 1, False),
        "unicode": seed(describe, b"<U4", False, 1, False),
    }


if __name__ == "__main__":
    main(test_one_input)
