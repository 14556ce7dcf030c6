"""PEP 3118 buffers (docs/spec.md §3.5): a format string, item size, shape, strides and
suboffsets of any value, handed out by an exporter over memory it owns (fuzzbuf.Exporter).

Checks: only TypeError/BufferError escape; a view has the exporter's item size, lies inside
the span the exporter described, and every byte of it is readable when that span lies inside
the exporter's memory; the Py_buffer is released with the view, or at once on a refusal.
"""

from __future__ import annotations

from _common import (
    Finding,
    Reader,
    agree_with_numpy,
    check_inside,
    check_readonly,
    clip,
    extent,
    fuzzbuf,
    imported,
    main,
    seed,
    touch,
)

SIZE = 4096


def describe(r: Reader) -> dict:
    fmt = r.blob(16) if r.int_in(0, 15) else None
    itemsize = r.num(-1, 40)
    ndim = r.int_in(0, 70) if r.int_in(0, 7) == 7 else r.int_in(0, 3)
    shape = tuple(r.num(-1, 6) for _ in range(ndim))
    strides = None
    if r.flag():
        strides = tuple(clip(r.num(-3, 3) * (itemsize if r.flag() else 1)) for _ in range(ndim))
    suboffsets = None
    if r.int_in(0, 15) == 15:
        suboffsets = tuple(r.int_in(-1, 8) for _ in range(ndim))
    return dict(fmt=fmt, itemsize=itemsize, shape=shape, strides=strides,
                suboffsets=suboffsets, offset=r.int_in(0, 256), readonly=r.flag())


def test_one_input(data: bytes) -> None:
    d = describe(Reader(data))
    exporter = fuzzbuf().Exporter(SIZE, d["offset"], d["fmt"], d["itemsize"], d["shape"],
                                  d["strides"], d["suboffsets"], d["readonly"])
    dl = imported(lambda: exporter)
    if dl is None:
        if exporter.exports:
            raise Finding(f"refused, but holds {exporter.exports} Py_buffer(s)")
        return
    buf = exporter.address + d["offset"]
    lo, hi = extent(buf, d["itemsize"], d["shape"], d["strides"])
    if dl.size and dl.itemsize != d["itemsize"]:
        raise Finding(f"view of item size {dl.itemsize} from items of {d['itemsize']} bytes")
    check_inside(dl, lo, hi, "the span the exporter described")
    check_readonly(dl, d["readonly"], "the exporter's buffer is read-only")
    agree_with_numpy(dl, exporter)
    if exporter.address <= lo and hi <= exporter.address + SIZE:
        touch(dl)
    del dl
    if exporter.exports:
        raise Finding(f"view gone, but {exporter.exports} Py_buffer(s) still held")


def seeds() -> dict[str, bytes]:
    """(format, itemsize, ndim selector, ndim, shape..., strides?, ..., suboffsets?, offset)."""
    return {
        "int32": seed(describe, 1, b"<i", 4, 0, 1, 3, False, 0, 0, False),
        "double-2d-strided": seed(describe, 1, b"d", 8, 0, 2, 2, 3, True, 3, True, 1, True,
                                  0, 8, False),
        "negative-stride": seed(describe, 1, b"=h", 2, 0, 1, 4, True, -1, True, 0, 64, True),
        "bool": seed(describe, 1, b"?", 1, 0, 1, 5, False, 0, 1, False),
        "complex": seed(describe, 1, b"Zf", 8, 0, 1, 2, False, 0, 0, False),
        "long-4": seed(describe, 1, b"l", 4, 0, 1, 2, False, 0, 0, False),
        "struct": seed(describe, 1, b"T{i:a:d:b:}", 12, 0, 1, 2, False, 0, 0, False),
        "zero-dim": seed(describe, 1, b"q", 8, 0, 0, False, 0, 0, False),
        "no-format": seed(describe, 0, 1, 0, 1, 7, False, 0, 0, False),
        "suboffsets": seed(describe, 1, b"B", 1, 0, 1, 4, False, 15, 0, 0, False),
    }


if __name__ == "__main__":
    main(test_one_input)
