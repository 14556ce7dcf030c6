"""Property tests: generated interface dicts, buffers and round trips never escape the buffer."""

import array
import struct

import pytest

pytest.importorskip("hypothesis")
np = pytest.importorskip("numpy")

from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import dlpack  # noqa: E402

FAST = settings(max_examples=150, deadline=None)
GOOD = ["|u1", "|i1", "<u2", "<i2", "<u4", "<i4", "<f4", "<u8", "<i8", "<f8", "<c8", "<c16", "|b1"]
BAD = ["<f3", "|V3", "<M8", "|O8", "<U4", "", "<x4", ">q9", "|S0"]
BUFLEN = 64


def _some_indices(shape, n, limit=4096):
    """Every index of a small array; the first and last limit/2 (C order) of a huge one, which
    broadcast (stride 0) views may be. np.ndindex would build range tuples of 2**40 items."""
    for k in (range(n) if n <= limit else [*range(limit // 2), *range(n - limit // 2, n)]):
        idx = []
        for extent in reversed(shape):
            k, r = divmod(k, extent)
            idx.append(r)
        yield tuple(reversed(idx))


def _extent(shape, strides, itemsize, offset):
    """Lowest and highest byte (exclusive) a view reaches, in Python ints."""
    lo = hi = offset
    for n, s in zip(shape, strides, strict=True):
        if n == 0:
            return offset, offset
        if s < 0:
            lo += s * (n - 1)
        else:
            hi += s * (n - 1)
    return lo, hi + itemsize


@FAST
@given(
    typestr=st.sampled_from(GOOD + BAD),
    shape=st.lists(st.sampled_from([0, 1, 2, 3, 7, 2**31, 2**62]), max_size=3),
    strides=st.none() | st.lists(st.sampled_from([0, 1, 3, 8, -8, -1, 2**62, -(2**62)]),
                                 min_size=3, max_size=3),
    offset=st.sampled_from([0, 1, 8, 63, 64, 2**62, 2**63 + 8]),
)
def test_array_interface_pointer_refused_or_described(typestr, shape, strides, offset):
    """An interface dict over a raw pointer is refused with BufferError or described as given."""
    buf = bytearray(range(BUFLEN))
    base = np.frombuffer(buf, dtype="u1")
    ai = {"shape": tuple(shape), "typestr": typestr, "version": 3,
          "data": (base.ctypes.data + offset, False)}
    if strides is not None:
        ai["strides"] = tuple(strides[: len(shape)])

    class Source:
        __array_interface__ = ai

    try:
        dl = dlpack.asdlpack(Source())
    except BufferError:
        return
    # A bare pointer carries no length to check against: only the description must survive.
    d = dlpack.todict(dl)
    assert d["shape"] == tuple(shape)
    assert d["dtype"][1] * d["dtype"][2] == 8 * np.dtype(typestr).itemsize


@FAST
@given(
    typestr=st.sampled_from(GOOD + BAD),
    shape=st.lists(st.sampled_from([0, 1, 2, 3, 5, 2**40, 2**62]), max_size=3),
    strides=st.none() | st.lists(st.sampled_from([0, 1, 2, 4, 8, 16, -8, -16, 2**62, -(2**62)]),
                                 min_size=3, max_size=3),
    offset=st.sampled_from([0, 1, 4, 8, 32, 63, 64, 65, 2**62, 2**63 + 8]),
)
@example(typestr="|u1", shape=[2**40], strides=[0, 0, 0], offset=0)     # a 2**40 broadcast
def test_array_interface_over_bytes_object(typestr, shape, strides, offset):
    """With `data` a buffer object, acceptance means every element lies in it and values match."""
    raw = bytes(range(BUFLEN))
    ai = {"shape": tuple(shape), "typestr": typestr, "version": 3, "data": raw,
          "offset": offset}
    if strides is not None:
        ai["strides"] = tuple(strides[: len(shape)])

    class Source:
        __array_interface__ = ai

    try:
        dl = dlpack.asdlpack(Source())
    except BufferError:
        return
    dt = np.dtype(typestr)
    st_ = ai.get("strides") or tuple(
        int(np.prod(shape[i + 1:], dtype=object)) * dt.itemsize for i in range(len(shape))
    )
    lo, hi = _extent(shape, st_, dt.itemsize, offset)
    n = int(np.prod(shape, dtype=object))
    if n:
        assert 0 <= lo and hi <= BUFLEN, (lo, hi)
    assert dlpack.todict(dl)["flags"] & dlpack.FLAG_BITMASK_READ_ONLY
    if not n:
        return
    got = np.asarray(dl)
    assert got.shape == tuple(shape) and got.dtype == dt
    for idx in _some_indices(shape, n):
        pos = offset + sum(i * s for i, s in zip(idx, st_, strict=True))
        want = np.frombuffer(raw[pos:pos + dt.itemsize], dtype=dt)[0]
        assert got[idx] == want or (want != want and got[idx] != got[idx])


FORMATS = "bBhHiIlLqQfd?"


@FAST
@given(fmt=st.sampled_from(FORMATS), n=st.integers(0, 12), kind=st.sampled_from("ab"),
       readonly=st.booleans())
def test_buffer_formats_agree_with_memoryview(fmt, n, kind, readonly):
    """A PEP 3118 buffer's dtype, shape, strides and read-only flag match its memoryview."""
    size = struct.calcsize(fmt)
    raw = bytes((i * 37) & 0xFF for i in range(n * size))
    if fmt == "?":
        raw = bytes(b & 1 for b in raw)
    if kind == "a" and fmt != "?":
        src = array.array(fmt, raw) if n else array.array(fmt)
        mv = memoryview(src)
    else:
        src = bytes(raw) if readonly else bytearray(raw)
        mv = memoryview(src).cast(fmt)
    dl = dlpack.asdlpack(src if kind == "a" or fmt == "B" else mv)
    d = dlpack.todict(dl)
    assert d["shape"] == mv.shape
    assert d["dtype"][1] == 8 * mv.itemsize
    assert bool(d["flags"] & dlpack.FLAG_BITMASK_READ_ONLY) == mv.readonly
    if n:
        assert d["data"] + d["byte_offset"] == np.frombuffer(mv, dtype="u1").ctypes.data
    out = memoryview(dl)
    assert out.tobytes() == mv.tobytes()
    assert np.asarray(dl).tolist() == mv.tolist()


@FAST
@given(dtype=st.sampled_from(["u1", "i2", "<f4", "<f8", "<c8", "?", "<i8"]),
       shape=st.lists(st.integers(0, 4), max_size=3),
       step=st.sampled_from([1, 2, -1]), transpose=st.booleans(), writeable=st.booleans())
def test_export_round_trips_agree(dtype, shape, step, transpose, writeable):
    """memoryview, __array_interface__, a versioned capsule and a copy describe the same data."""
    full = [*shape[:-1], 2 * shape[-1]] if shape else [2]
    a = (np.arange(int(np.prod(full))) % 7).astype(dtype).reshape(full)
    a = a[..., ::step] if a.ndim else a
    if transpose:
        a = a.T
    a.flags.writeable = writeable
    dl = dlpack.asdlpack(a)
    np.testing.assert_array_equal(np.asarray(dl), a)
    assert np.asarray(dl).ctypes.data == a.ctypes.data or a.size == 0
    ai = dl.__array_interface__
    assert ai["shape"] == a.shape
    assert ai["data"][1] == (not writeable)
    d = dlpack.todict(dl.__dlpack__(max_version=(1, 0)))
    assert d["shape"] == a.shape
    assert bool(d["flags"] & dlpack.FLAG_BITMASK_READ_ONLY) == (not writeable)
    if a.size:
        assert d["data"] + d["byte_offset"] == a.ctypes.data
    copied = np.asarray(dlpack.asdlpack(dl.__dlpack__(max_version=(1, 0), copy=True)))
    np.testing.assert_array_equal(copied, a)
    if a.size:
        assert copied.ctypes.data != a.ctypes.data
    if a.flags.c_contiguous or a.size == 0:
        assert memoryview(dl).tobytes() == a.tobytes()


@FAST
@given(
    code=st.sampled_from([0, 1, 2, 4, 5, 6, 17]),
    bits=st.sampled_from([1, 4, 8, 12, 16, 32, 64, 128]),
    shape=st.lists(st.integers(-2, 4), max_size=3),
    strided=st.booleans(),
    flags=st.sampled_from([0, 1, 2, 4, 5]),
    major=st.sampled_from([0, 1, 2]),
)
def test_versioned_struct_refused_or_described_and_deleted_once(code, bits, shape, strided, flags,
                                                                major):
    """A generated DLManagedTensorVersioned is refused (BufferError) or described as built;
    its deleter runs exactly once either way."""
    import ctypes

    from dlpack import ctypes as dc

    buf = (ctypes.c_uint8 * 4096)()
    nd = len(shape)
    shp = (ctypes.c_int64 * max(nd, 1))(*shape)
    strides = (ctypes.c_int64 * max(nd, 1))(*([1] * nd)) if strided else None
    calls = []
    deleter = dc.DLManagedTensorVersionedDeleter(lambda p: calls.append(1))
    mt = dc.DLManagedTensorVersioned()
    mt.version = dc.DLPackVersion(major, 0)
    mt.deleter = deleter
    mt.flags = flags
    mt.dl_tensor = dc.DLTensor(ctypes.addressof(buf), dc.DLDevice(1, 0), nd,
                               dc.DLDataType(code, bits, 1),
                               ctypes.cast(shp, ctypes.POINTER(ctypes.c_int64)),
                               ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
                               if strides else None, 0)
    try:
        dl = dlpack.asdlpack(ctypes.pointer(mt))
    except BufferError:
        assert calls == [1]  # ownership was taken, so a refusal releases the producer's memory
        return
    assert major <= 1
    assert min(shape, default=0) >= 0
    assert bits % 8 == 0 or bits < 8
    d = dlpack.todict(dl)
    assert d["shape"] == tuple(shape)
    assert d["dtype"][:2] == (code, bits)
    assert bool(d["flags"] & dlpack.FLAG_BITMASK_READ_ONLY) == bool(flags & 1)
    assert calls == []
    del dl, d
    import gc

    gc.collect()
    assert calls == [1]
