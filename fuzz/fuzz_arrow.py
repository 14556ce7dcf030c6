"""Arrow format strings and extension metadata (docs/spec.md §13.1, §7): an ArrowSchema and
ArrowArray tree built from the fuzzer's bytes with ctypes (dlpack.tests.arrow_producers):
an optional one-field struct wrapper, up to 3 fixed-size list levels, a leaf format of any
bytes, extension metadata (arrow.bool8, arrow.fixed_shape_tensor with any JSON, others,
extra pairs), lengths, offsets, null counts, buffer and child counts; handed over as
__arrow_c_array__, __arrow_c_device_array__ (any device type) or __arrow_c_stream__.

Metadata strings are well-formed (lengths that match their bytes: the format has no total
length, so a consumer must trust them), and every buffer covers what its level's offset and
length describe (or is a pointer never read, for lengths beyond the harness's memory): the
description is fuzzed, not the addresses.

Checks: only TypeError/BufferError escape; every struct is released at most once, and the
array exactly once when an imported view is gone; a view lies inside its leaf's values
(offset to offset + length items) and is read in full.
"""

from __future__ import annotations

import gc

from _common import (
    Finding,
    Memory,
    Reader,
    check_inside,
    check_readonly,
    imported,
    main,
    seed,
    touch,
)

import dlpack.tests.arrow_producers as ap

LEAVES = [b"f", b"g", b"e", b"c", b"C", b"s", b"S", b"i", b"I", b"l", b"L", b"b", b"n", b"u",
          b"w:4", b"d:10,2", b"tss:", b"+l", b"tdD", b"vu", b"+s"]
EXTENSIONS = [None, b"arrow.bool8", b"arrow.fixed_shape_tensor", b"other.ext", "blob"]
TENSOR_META = [b'{"shape": [2, 2]}', b'{"shape": [2, 2], "permutation": [1, 0]}',
               b'{"shape": [4], "dim_names": ["x"]}', b'{"shape": [1, 4, 1]}', b"{}",
               b'{"shape": [2, 2], "permutation": [0, 0]}', "blob"]
SMALL = 16                          # lengths and offsets up to this get real buffers
NOWHERE = 1 << 20                   # the values of longer leaves: an address never read


def _release_child(s) -> None:
    """The producers' release of children, for the trees built here (one child at most): the
    producer knows its children and does not trust n_children, which the harness fuzzes."""
    if s.children and s.n_children:
        child = s.children[0]
        if child and child.contents.release:
            child.contents.release(child)


ap._release_children = _release_child


def metadata(r: Reader) -> bytes | None:
    name = r.choice(EXTENSIONS)
    if name is None and r.int_in(0, 3):
        return None
    pairs = {}
    for _ in range(r.int_in(0, 2)):
        pairs[r.blob(24)] = r.blob(24)
    if name is not None:
        pairs[b"ARROW:extension:name"] = r.blob(32) if name == "blob" else name
        meta = r.choice(TENSOR_META)
        pairs[b"ARROW:extension:metadata"] = r.blob(64) if meta == "blob" else meta
    return ap.metadata(pairs)


def level(r: Reader, leaf: bool) -> dict:
    """One level's schema and array fields (its length and offset mostly small)."""
    d = dict(length=r.num(0, SMALL), offset=r.num(0, 4))
    d["null_count"] = r.choice([0, -1, 1, "any"])
    if d["null_count"] == "any":
        d["null_count"] = r.num(-2, 4)
    d["bitmap"] = r.choice(["none", "all-valid", "some-null"])
    d["n_buffers"] = r.choice([None, "any"])
    if d["n_buffers"] == "any":
        d["n_buffers"] = r.num(0, 3)
    d["n_children"] = r.choice([None, "any"])
    if d["n_children"] == "any":
        d["n_children"] = r.num(0, 2)
    d["metadata"] = metadata(r)
    d["dictionary"] = r.int_in(0, 31) == 0
    if leaf:
        d["format"] = r.choice([*LEAVES, "blob"])
        if d["format"] == "blob":
            d["format"] = r.blob(12)
    else:
        d["size"] = r.num(0, 4)
        d["format"] = b"+w:%d" % d["size"] if r.int_in(0, 7) else r.blob(8)
    return d


def describe(r: Reader) -> dict:
    d = dict(wrap=r.choice([False, True]))
    d["nlists"] = r.int_in(0, 3)
    d["levels"] = [level(r, i == d["nlists"]) for i in range(d["nlists"] + 1)]
    d["via"] = r.choice(["array", "device", "stream"])
    d["device"] = r.choice([1, 2, 3, 13, "any"])
    if d["device"] == "any":
        d["device"] = r.int_in(-(1 << 31), (1 << 31) - 1)
    return d


def bitmap(kind: str, bits: int, keep: list):
    if kind == "none":
        return None
    m = Memory((bits + 7) // 8 + 8)
    keep.append(m)
    for i in range(bits):
        if kind == "all-valid" or i % 3:
            ap.ctypes.c_uint8.from_address(m.address + i // 8).value |= 1 << (i % 8)
    return ap.Address(m.address)


def column(d: dict, keep: list) -> tuple[ap.Col, tuple[int, int, int]]:
    """The Col tree, and the leaf's (values address, offset, length)."""
    levels, leaf = d["levels"], None
    child = None
    for i, lv in reversed(list(enumerate(levels))):
        small = 0 <= lv["length"] <= SMALL and 0 <= lv["offset"] <= SMALL
        bits = lv["offset"] + lv["length"] if small else 0
        buffers = [bitmap(lv["bitmap"] if small else "none", bits, keep)]
        if i == len(levels) - 1:
            address = NOWHERE
            if small:
                m = Memory(bits * 16 + 16)
                keep.append(m)
                address = m.address
            buffers.append(ap.Address(address))
            leaf = (address, lv["offset"], lv["length"])
        col = ap.Col(lv["format"], lv["length"], lv["offset"], lv["null_count"], buffers,
                     [child] if child is not None else [], lv["metadata"],
                     dictionary=lv["dictionary"], n_buffers=lv["n_buffers"],
                     n_children=lv["n_children"])
        child = col
    if d["wrap"]:
        child = ap.Col(b"+s", child.length, 0, 0, [None], [child])
    return child, leaf


def test_one_input(data: bytes) -> None:
    d = describe(Reader(data))
    keep: list = []
    col, leaf = column(d, keep)
    if d["via"] == "array":
        producer = ap.ArrayProducer(col)
    elif d["via"] == "device":
        producer = ap.DeviceProducer(col, device_type=d["device"], device_id=0)
    else:
        producer = ap.StreamProducer(col, [col])
    try:
        dl = imported(lambda: producer)
        if dl is not None:
            address, offset, length = leaf
            check_inside(dl, address + offset * dl.itemsize,
                         address + (offset + length) * dl.itemsize, "the leaf's values")
            check_readonly(dl, True, "Arrow memory is immutable")
            if address != NOWHERE:
                touch(dl)
            del dl
            gc.collect()
            released = producer.released
            arrays = [k for k in released if k in ("array", "chunk0")]
            if not arrays or any(released[k] != 1 for k in arrays):
                raise Finding(f"view gone; releases {released}")
        if any(n > 1 for n in producer.released.values()):
            raise Finding(f"released more than once: {producer.released}")
    finally:
        ap.KEEP.clear()


def seeds() -> dict[str, bytes]:
    """Levels as (length, offset, null_count, bitmap, n_buffers, n_children, extension, ...,
    dictionary, format[, size])."""
    def lv(length, fmt=b"f", offset=0, nulls=0, bits="none", ext=None, meta=None, size=None):
        out = [length, offset, nulls, bits, None, None, ext]
        if ext is None:
            out.append(1)                   # no metadata
        else:
            out += [0] + ([meta] if meta in TENSOR_META else ["blob", meta])
        out.append(1)                       # not dictionary-encoded
        if size is not None:
            out += [size, 1]
        else:
            out.append(fmt)
        return out

    def col(*levels, wrap=False, via="array", device=1):
        return seed(describe, wrap, len(levels) - 1, *[v for x in levels for v in x], via,
                    device)

    tensor = b"arrow.fixed_shape_tensor"
    return {
        "float": col(lv(5)),
        "int64-offset": col(lv(4, b"l", offset=2)),
        "nulls-unknown": col(lv(6, b"i", nulls=-1, bits="all-valid")),
        "with-nulls": col(lv(6, b"i", nulls=-1, bits="some-null")),
        "fixed-size-list": col(lv(2, size=3), lv(6, b"e")),
        "nested-lists": col(lv(1, size=2), lv(2, size=2), lv(4, b"C")),
        "tensor": col(lv(2, size=4, ext=tensor, meta=TENSOR_META[1]), lv(8, b"g")),
        "bool8": col(lv(3, b"c", ext=b"arrow.bool8", meta=b"")),
        "record-batch": col(lv(3, b"s"), wrap=True),
        "device-cuda": col(lv(3), via="device", device=2),
        "stream": col(lv(3, b"L"), via="stream"),
        "bitpacked": col(lv(9, b"b")),
    }


if __name__ == "__main__":
    main(test_one_input, ap)
