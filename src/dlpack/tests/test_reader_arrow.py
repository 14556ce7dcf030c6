"""Reader: the Arrow PyCapsule interface (docs/spec.md §13): real Arrow libraries into
DLPack — values, addresses, read-only-ness, the release callback run once after the last view
— and ctypes-built structs (tests/arrow_producers.py) where every field must be under control;
the checker's Arrow rules. The way out is test_writer_arrow; the refusals are the hostile
corpus's groups ``arrow`` and ``arrow-out``."""

from __future__ import annotations

import ctypes
import gc
import itertools
import json
import struct

import pytest

from dlpack import DLDeviceType, asdlpack, todict
from dlpack.tests import arrow_producers as ap
from dlpack.tests.fake_cuda import EVENT, LEAVE, ctx, enter
from dlpack.tests.helpers import lib
from dlpack.tools.check_arrow import (
    ArrowDeviceArray,
    struct_of,
)

PRIMITIVES = [  # (name, Arrow format, struct code)
    ("int8", b"c", "b"), ("uint8", b"C", "B"), ("int16", b"s", "h"), ("uint16", b"S", "H"),
    ("int32", b"i", "i"), ("uint32", b"I", "I"), ("int64", b"l", "q"), ("uint64", b"L", "Q"),
    ("float16", b"e", "e"), ("float32", b"f", "f"), ("float64", b"g", "d")]


def only(obj, method: str):
    """An object speaking only ``method`` of obj (so one reader path is tested)."""
    cls = type(f"Only_{method.strip('_')}", (), {
        method: lambda self, *a, **k: getattr(obj, method)(*a, **k)})
    return cls()


# -- in: ctypes producers -----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "fmt", "code"), PRIMITIVES)
def test_primitive_zero_copy_read_only(name, fmt, code):
    col = ap.primitive(code, [0, 1, 2, 3, 4], fmt, offset=1)
    col.length = 4
    dl = asdlpack(ap.ArrayProducer(col))
    size = dl.itemsize
    assert (dl.dtype.name, dl.shape, dl.strides, dl.readonly) == (name, (4,), (1,), True)
    assert dl.data_ptr == col.buffers[1].value + size          # offset applied
    assert list(struct.unpack(f"=4{code}", bytes(dl))) == [1, 2, 3, 4]
    assert todict(dl.__dlpack__(max_version=(1, 0)))["flags"] & 1     # READ_ONLY travels


def test_struct_unwrapped_with_both_offsets():
    values = ap.primitive("d", [float(i) for i in range(8)], b"g", offset=2)
    values.length = 6
    col = ap.Col(b"+s", 3, offset=1, buffers=[None], children=[values])
    dl = asdlpack(ap.ArrayProducer(col))
    assert memoryview(dl).tolist() == [3.0, 4.0, 5.0]


def test_release_exactly_once_after_every_view():
    np = lib("numpy")
    obj = ap.ArrayProducer(ap.primitive("f", [1, 2, 3], b"f"))
    dl = asdlpack(obj)
    assert obj.released == {"schema": 1}                  # the schema at once, after reading
    a = np.from_dlpack(dl)
    m = memoryview(dl)
    del dl
    gc.collect()
    assert obj.released == {"schema": 1}
    assert not a.flags.writeable and a.tolist() == [1, 2, 3]
    del a
    gc.collect()
    assert obj.released == {"schema": 1}
    del m
    gc.collect()
    assert obj.released == {"schema": 1, "array": 1}


def test_release_exactly_once_through_torch():
    torch = lib("torch")
    obj = ap.ArrayProducer(ap.primitive("i", [5, 6, 7], b"i"))
    t = torch.from_dlpack(asdlpack(obj))
    gc.collect()
    assert obj.released == {"schema": 1} and t.tolist() == [5, 6, 7]
    del t
    gc.collect()
    assert obj.released == {"schema": 1, "array": 1}


def test_stream_chunks_and_stream_released_once():
    empty = ap.Col(b"i", 0, buffers=[None, None])
    obj = ap.StreamProducer(ap.Col(b"i"), [empty, ap.primitive("i", [7, 8], b"i"), empty])
    dl = asdlpack(obj)
    assert memoryview(dl).tolist() == [7, 8]
    assert obj.released == {"schema": 1, "chunk0": 1, "chunk2": 1}
    del dl
    gc.collect()
    assert obj.released == {"schema": 1, "chunk0": 1, "chunk1": 1, "chunk2": 1, "stream": 1}


def test_cpu_device_ids():
    for did in (-1, 0):
        dl = asdlpack(ap.DeviceProducer(ap.primitive("f", [1, 2], b"f"), 1, did))
        assert dl.device == (DLDeviceType.kDLCPU, 0)


def _refused_with(col: ap.Col, schema: ap.Col | None = None) -> None:
    """Refused with Python-code release callbacks and capsule destructors (ctypes: a pending
    error breaks them) run while the refusal is raised: a proper BufferError, each struct
    released exactly once (docs/spec.md §7)."""
    obj = ap.ArrayProducer(col, schema, destructor=True)
    with pytest.raises(BufferError, match="__arrow_c_array__"):
        asdlpack(obj)
    gc.collect()
    assert obj.released == {"schema": 1, "array": 1}


def test_python_code_callbacks_run_while_a_refusal_is_raised():
    nulls = ap.primitive("f", [1, 2, 3], b"f", null_count=1)
    nulls.buffers[0] = ap.bitmap("101")
    _refused_with(nulls)                                    # a refused value
    _refused_with(ap.primitive("f", [1, 2], b"f", n_buffers=3))     # a refused layout
    _refused_with(ap.Col(b"u", 0, buffers=[None, None, None]))      # a refused type


def test_an_error_a_release_callback_leaves_is_reported_not_passed_on(monkeypatch):
    """A C release callback that returns with a Python error set (here PyErr_NoMemory itself)
    cannot fail the read: its error is reported as unraisable (docs/spec.md §7)."""
    import sys

    from dlpack.tools.check_arrow import SchemaRelease

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_type))
    obj = ap.ArrayProducer(ap.primitive("f", [1, 2], b"f"))
    obj.schema.release = SchemaRelease(ctypes.cast(ctypes.pythonapi.PyErr_NoMemory,
                                                   ctypes.c_void_p).value)
    assert memoryview(asdlpack(obj)).tolist() == [1, 2]
    assert reported == [MemoryError]


# -- in: CUDA device arrays (the strict fake driver) ----------------------------------------------


def _floats(*values) -> bytes:
    return struct.pack(f"={len(values)}f", *values)


def _cuda(fake, kind=2, device_id=1, event=True, data=None):
    """An Arrow device array of three float32 (device memory unless kind is pinned or managed)
    whose values a producer's kernel writes on a stream of its own; with event, its
    sync_event is recorded after that kernel. Returns (dl, pointer, producer stream, event)."""
    device = max(device_id, 0)
    if kind == 2:
        ptr = fake.device_array(_floats(0, 0, 0), device=device)
    else:
        data = data if data is not None else (ctypes.c_float * 3)()
        ptr = (fake.pinned if kind == 3 else fake.managed)(data, device=device)
    producer = fake.stream(device=device)
    fake.kernel(producer, ptr, _floats(1, 2, 3), device=device)
    ev = fake.record(producer, device=device) if event else None
    col = ap.primitive("f", [0, 0, 0], b"f")
    col.buffers[1] = ap.Address(ptr)
    dl = asdlpack(ap.DeviceProducer(col, kind, device_id, ev))
    return dl, ptr, producer, ev


def test_cuda_sync_event_waited_on_consumer_stream(fake):
    """The consumer's stream waits for the producer's event: a consumer kernel reads what the
    producer wrote, however late the producer runs (held shut until after the export)."""
    dl, ptr, producer, ev = _cuda(fake)
    assert dl.device == (DLDeviceType.kDLCUDA, 1) and fake.calls == []
    consumer = fake.stream(device=1)
    fake.hold(producer, device=1)
    dl.__dlpack__(stream=consumer, max_version=(1, 0))
    assert fake.calls == [("cuStreamGetCtx", consumer), ("cuCtxPushCurrent", ctx(1)),
                          ("cuStreamIsCapturing", consumer),    # not a graph capture (§10)
                          ("cuStreamWaitEvent", consumer, ev, 0), *LEAVE]
    seen = fake.consume(consumer, ptr, 12, device=1)
    fake.run()
    assert seen.value is None                           # the producer has not run: nor has it
    fake.release(producer, device=1)
    fake.run()
    assert seen.value == _floats(1, 2, 3)
    fake.calls.clear()
    dl.__dlpack__(stream=-1, max_version=(1, 0))
    assert fake.calls == []
    dl.__dlpack__(max_version=(1, 0))                   # None: the legacy default stream
    assert fake.calls == [*enter(1, True), ("cuStreamWaitEvent", 1, ev, 0), *LEAVE]


def test_cuda_sync_event_synchronised_before_host_reads(fake):
    """Host reads (buffer protocol, host copies) wait for the event first: the values the
    producer's queued kernel writes, never the old ones."""
    dl, _, _, ev = _cuda(fake, kind=3, device_id=-1)    # pinned host memory: device 0
    assert dl.device == (DLDeviceType.kDLCUDAHost, 0)
    assert memoryview(dl).tolist() == [1, 2, 3]
    assert fake.calls == [*enter(0, True), ("cuEventSynchronize", ev), *LEAVE]
    dl, _, _, ev = _cuda(fake)
    fake.calls.clear()
    host = todict(cap := dl.__dlpack__(dl_device=(1, 0), max_version=(1, 0)))
    assert fake.calls[:4] == [*enter(1, True), ("cuEventSynchronize", ev)]
    assert ctypes.string_at(host["data"], 12) == _floats(1, 2, 3)
    del cap
    fake.calls.clear()
    assert dl.__cuda_array_interface__["stream"] is None
    assert ("cuEventSynchronize", ev) in fake.calls


def test_cuda_without_event_needs_no_sync(fake):
    dl, *_ = _cuda(fake, kind=13, event=False)
    assert dl.device == (DLDeviceType.kDLCUDAManaged, 1)
    dl.__dlpack__(stream=fake.stream(device=1), max_version=(1, 0))
    assert fake.calls == []


def _cai_on(fake, stream, device=1):
    ptr = fake.device_array(_floats(0, 0, 0), device=device)

    class CAI:
        def __init__(self) -> None:
            self.__cuda_array_interface__ = {"shape": (3,), "typestr": "<f4", "version": 3,
                                             "data": (ptr, False), "stream": stream}

    return CAI(), ptr


def test_cuda_export_records_an_event(fake):
    """A DLPackObject exporting CUDA data to Arrow records an event on the producer's stream,
    in that stream's context, and destroys it there after the last struct is released."""
    producer = fake.stream(device=1)
    obj, ptr = _cai_on(fake, producer)
    dl = asdlpack(obj)
    fake.calls.clear()
    with pytest.raises(BufferError, match="__arrow_c_device_array__"):
        dl.__arrow_c_array__()
    fake.hold(producer, device=1)
    fake.kernel(producer, ptr, _floats(4, 5, 6), device=1)
    schema, array = dl.__arrow_c_device_array__()
    d = struct_of(array, b"arrow_device_array")
    assert (d.device_type, d.device_id) == (2, 1)
    assert ctypes.c_void_p.from_address(d.sync_event).value == EVENT
    assert d.array.buffers[1] == ptr
    assert fake.calls == [("cuStreamGetCtx", producer), ("cuCtxPushCurrent", ctx(1)),
                          ("cuEventCreate", 2), ("cuEventRecord", EVENT, producer), *LEAVE]
    consumer = fake.stream(device=1)        # an Arrow consumer waiting on the sync_event
    fake.wait_event(consumer, EVENT, device=1)
    seen = fake.consume(consumer, ptr, 12, device=1)
    fake.release(producer, device=1)
    fake.run()
    assert seen.value == _floats(4, 5, 6)
    fake.calls.clear()
    del schema, array, d
    gc.collect()
    assert fake.calls == [("cuCtxPushCurrent", ctx(1)), ("cuEventDestroy", EVENT), *LEAVE]


def test_cuda_device_stream_event_outlives_the_stream(fake):
    obj, _ = _cai_on(fake, fake.stream(device=1))
    cap = asdlpack(obj).__arrow_c_device_stream__()
    st = struct_of(cap, b"arrow_device_array_stream")
    assert st.device_type == 2
    chunk = ArrowDeviceArray()
    assert st.get_next(st, chunk) == 0
    assert ctypes.c_void_p.from_address(chunk.sync_event).value == EVENT
    ap.callback(st.release)(st)
    del cap
    gc.collect()
    assert ("cuEventDestroy", EVENT) not in fake.calls      # the chunk still waits on it
    ap.callback(chunk.array.release)(chunk.array)
    assert ("cuEventDestroy", EVENT) in fake.calls


def test_cuda_pinned_data_to_a_cpu_arrow_consumer_synchronises(fake):
    data = (ctypes.c_float * 3)()
    dl, _, _, ev = _cuda(fake, kind=3, device_id=0, data=data)
    _, array = dl.__arrow_c_array__()
    assert struct_of(array, b"arrow_array").buffers[1] == dl.data_ptr
    assert ("cuEventSynchronize", ev) in fake.calls
    assert list(data) == [1, 2, 3]                      # the producer's kernel has run


def test_cuda_round_trip_hands_the_producers_event_on(fake):
    dl, _, _, ev = _cuda(fake)
    _, array = dl.__arrow_c_device_array__()
    d = struct_of(array, b"arrow_device_array")
    assert ctypes.c_void_p.from_address(d.sync_event).value == ev
    assert fake.calls == []


def _bitmap_on(fake, kind, bits: str, device=1):
    """A validity bitmap (ap.bitmap) in device memory (kind 2) or pinned host memory (3)."""
    raw = ap.bitmap(bits)
    if kind == 2:
        return fake.device_array(raw, device=device), None
    host = (ctypes.c_ubyte * len(raw)).from_buffer_copy(raw)
    return fake.pinned(host, device=device), host


def _cuda_nullable(fake, kind, bits, null_count=-1, written=None):
    """Three float32 on CUDA device 1 (kind 2: device memory; 3: pinned) with a validity
    bitmap of the same kind; with ``written``, a producer's kernel queued on its own stream
    writes that bitmap later, and the sync_event is recorded after it. Returns (producer,
    bitmap pointer, event)."""
    values = (ctypes.c_float * 3)(1, 2, 3)
    ptr = (fake.device_array(bytes(values), device=1) if kind == 2
           else fake.pinned(values, device=1))
    bitmap, _ = _bitmap_on(fake, kind, bits)
    stream = fake.stream(device=1)
    if written is not None:
        fake.kernel(stream, bitmap, ap.bitmap(written), device=1)
    ev = fake.record(stream, device=1)
    col = ap.primitive("f", [0, 0, 0], b"f", null_count=null_count)
    col.buffers = [ap.Address(bitmap), ap.Address(ptr)]
    return ap.DeviceProducer(col, kind, 1, ev), bitmap, ev


def test_cuda_bitmap_of_unknown_null_count_is_counted_by_the_driver(fake):
    """Device memory is never read by the CPU (§13): a bitmap whose null_count is -1 is
    copied to the host by the driver, after the sync_event, and counted there."""
    obj, bitmap, ev = _cuda_nullable(fake, 2, "111")
    dl = asdlpack(obj)
    assert (dl.shape, dl.device) == ((3,), (DLDeviceType.kDLCUDA, 1))
    assert fake.calls == [*enter(1, True), ("cuEventSynchronize", ev), *LEAVE,
                          ("cuDevicePrimaryCtxGetState", 1), ("cuCtxPushCurrent", ctx(1)),
                          ("cuMemcpyDtoH", bitmap, 1), *LEAVE]
    obj, *_ = _cuda_nullable(fake, 2, "101")
    with pytest.raises(BufferError, match=r"has 1 null\(s\) among its 3 values"):
        asdlpack(obj)


def test_cuda_sliced_list_child_bitmap_is_counted_by_the_driver(fake):
    """A fixed-size list's sliced child: its null_count (1, in the rows outside the slice)
    cannot answer, and its device bitmap is copied, not read."""
    values = fake.device_array(_floats(9, 9, 1, 2), device=1)
    bitmap, _ = _bitmap_on(fake, 2, "0011")
    child = ap.Col(b"f", 4, null_count=1, buffers=[ap.Address(bitmap), ap.Address(values)])
    col = ap.Col(b"+w:2", 1, offset=1, buffers=[None], children=[child])
    dl = asdlpack(ap.DeviceProducer(col, 2, 1))
    assert (dl.shape, dl.data_ptr) == ((1, 2), values + 8)
    assert ("cuMemcpyDtoH", bitmap, 1) in fake.calls


@pytest.mark.parametrize("null_at", [None, 0, 2**23 - 4, 2**23 - 3, 2**23 + 8])
def test_cuda_bitmap_counted_a_chunk_at_a_time(fake, null_at):
    """A device bitmap longer than one copy (1 MiB) from an unaligned offset: each chunk
    counted, a null found at either end of either (the first value, the last bits of the
    first chunk and the first of the second, the last value), no bit outside the slice read."""
    n, offset = 2**23 + 9, 3                    # bits 3 … 2**23 + 11: two chunks
    raw = bytearray(b"\xff" * ((offset + n + 7) // 8 + 8))
    raw[0] = 0b11111000                         # bits 0-2, before the offset: nulls outside
    if null_at is not None:
        bit = offset + null_at
        raw[bit >> 3] &= ~(1 << (bit & 7))
    bitmap = fake.device_array(raw, device=1)
    values = fake.device_array(bytes(offset + n), device=1)
    col = ap.Col(b"C", n, offset=offset, null_count=-1,
                 buffers=[ap.Address(bitmap), ap.Address(values)])
    obj = ap.DeviceProducer(col, 2, 1)
    if null_at is None:
        assert asdlpack(obj).shape == (n,)
    else:
        with pytest.raises(BufferError, match=rf"has 1 null\(s\) among its {n} values"):
            asdlpack(obj)
    copies = [c for c in fake.calls if c[0] == "cuMemcpyDtoH"]
    assert copies == [("cuMemcpyDtoH", bitmap, 2**20), ("cuMemcpyDtoH", bitmap + 2**20, 2)]


@pytest.mark.parametrize(("before", "after", "nulls"), [("000", "111", 0), ("111", "101", 1)])
def test_cuda_pinned_bitmap_read_after_the_sync_event(fake, before, after, nulls):
    """A pinned bitmap a queued kernel is still writing is read once the producer's event has
    happened: the values it writes decide, never the old ones."""
    obj, _, ev = _cuda_nullable(fake, 3, before, written=after)
    if nulls:
        with pytest.raises(BufferError, match=r"has 1 null\(s\)"):
            asdlpack(obj)
    else:
        assert asdlpack(obj).shape == (3,)
    assert fake.calls == [*enter(1, True), ("cuEventSynchronize", ev), *LEAVE]


def test_cuda_known_null_count_reads_no_bitmap(fake):
    obj, *_ = _cuda_nullable(fake, 2, "101", null_count=1)
    with pytest.raises(BufferError, match=r"has 1 null\(s\)"):
        asdlpack(obj)
    obj, *_ = _cuda_nullable(fake, 2, "101", null_count=0)
    assert asdlpack(obj).shape == (3,)
    assert fake.calls == []


# -- in: real producers --------------------------------------------------------------------------

def test_pyarrow_every_primitive_matches_its_own_dlpack():
    pa = lib("pyarrow")
    np = lib("numpy")
    for name, _, _ in PRIMITIVES:
        arr = pa.array(np.arange(7).astype(name)).slice(2, 4)
        ours = asdlpack(only(arr, "__arrow_c_array__"))
        theirs = todict(arr)
        assert (ours.data_ptr, ours.shape, ours.dtype.name) == (
            theirs["data"] + theirs["byte_offset"], theirs["shape"], name)
        assert np.from_dlpack(ours).tolist() == [2, 3, 4, 5]


def test_pyarrow_refusals_name_the_way_out():
    pa = lib("pyarrow")
    with pytest.raises(BufferError, match="fill_null") as e:
        asdlpack(pa.array([1.0, None, 3.0]))
    assert type(e.value.__cause__).__name__ == "ArrowTypeError"     # PyArrow's __dlpack__
    with pytest.raises(BufferError, match=r"pc\.cast\(arr, pa\.uint8\(\)\).*bool8"):
        asdlpack(pa.array([True, False]))
    with pytest.raises(BufferError, match=r"tsu.*int64"):
        asdlpack(pa.array([1], pa.timestamp("us")))
    with pytest.raises(BufferError, match="indices"):
        asdlpack(pa.array([1, 2, 1]).dictionary_encode())


@pytest.mark.parametrize("name", ["string", "large_string", "string_view", "binary",
                                  "large_binary", "binary_view", "list_view",
                                  "large_list_view", "list", "large_list"])
def test_variable_size_types_refused_by_their_arrow_names(name):
    """A refusal names the type as Arrow (and pa.<name>()) does: string_view, not "a string
    type" only."""
    pa = lib("pyarrow")
    if "list" in name:
        arr = pa.array([[1], [2, 3]], getattr(pa, "list_" if name == "list" else name)(
            pa.int32()))
    else:
        arr = pa.array([b"a", b"bc"] if "binary" in name else ["a", "bc"], getattr(pa, name)())
    with pytest.raises(BufferError, match=rf"'format' = '\S+' of the array is {name}, a "):
        asdlpack(arr)


def test_pyarrow_nulls_outside_a_slice_are_fine():
    pa = lib("pyarrow")
    np = lib("numpy")
    arr = pa.array([None, 1.0, 2.0, None]).slice(1, 2)
    assert np.from_dlpack(asdlpack(arr)).tolist() == [1.0, 2.0]


def test_pyarrow_bool8_is_dlpack_bool():
    pa = lib("pyarrow")
    torch = lib("torch")
    storage = pa.array([1, 0, 1], pa.int8())
    arr = pa.ExtensionArray.from_storage(pa.bool8(), storage)
    dl = asdlpack(arr)
    assert dl.dtype.name == "bool" and dl.data_ptr == storage.buffers()[1].address
    assert torch.from_dlpack(dl).tolist() == [True, False, True]


def test_pyarrow_nested_fixed_size_lists_both_offsets():
    pa = lib("pyarrow")
    np = lib("numpy")
    values = pa.array(np.arange(40, dtype=np.int16)).slice(1)
    inner = pa.FixedSizeListArray.from_arrays(values, 3).slice(1)
    outer = pa.FixedSizeListArray.from_arrays(inner, 2).slice(1, 3)
    dl = asdlpack(outer)
    got = np.from_dlpack(dl)
    assert got.shape == (3, 2, 3) and got.tolist() == outer.to_pylist()
    assert dl.data_ptr == values.buffers()[1].address + 2 * (1 + 3 * (1 + 2 * 1))


def _applied(shape, strides):
    """The strides that reach an element: those of extents above 1 (the others are normalised
    at import, docs/spec.md §7)."""
    return tuple(s for n, s in zip(shape, strides, strict=True) if n > 1)


@pytest.mark.parametrize("shape", [[2, 3], [3, 4, 5], [2, 1, 3, 2]])
def test_pyarrow_fixed_shape_tensor_strides_as_pyarrow_gives_them(shape):
    """Every permutation: the view PyArrow's to_numpy_ndarray() and __dlpack__ give, or the
    refusal PyArrow gives (its strides overrun the rows for some permutations)."""
    pa = lib("pyarrow")
    np = lib("numpy")
    torch = lib("torch")
    cells = int(np.prod(shape))
    storage = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(3 * cells, dtype=np.int32)),
                                                cells)
    for perm in itertools.permutations(range(len(shape))):
        arr = pa.ExtensionArray.from_storage(
            pa.fixed_shape_tensor(pa.int32(), shape, permutation=list(perm)), storage)
        try:
            ref = arr.to_numpy_ndarray()
        except pa.ArrowInvalid:
            with pytest.raises(BufferError, match="permutation"):
                asdlpack(only(arr, "__arrow_c_array__"))
            continue
        got = np.from_dlpack(asdlpack(only(arr, "__arrow_c_array__")))
        assert (got.shape, _applied(got.shape, got.strides), got.ctypes.data) == (
            ref.shape, _applied(ref.shape, ref.strides), ref.ctypes.data), perm
        theirs = torch.from_dlpack(arr)
        assert _applied(got.shape, [4 * s for s in theirs.stride()]) == _applied(
            got.shape, got.strides)


def test_pyarrow_fixed_shape_tensor_permuted():
    pa = lib("pyarrow")
    np = lib("numpy")
    storage = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(120, dtype=np.float32)), 60)
    arr = pa.ExtensionArray.from_storage(
        pa.fixed_shape_tensor(pa.float32(), [3, 4, 5], permutation=[2, 0, 1]), storage)
    dl = asdlpack(only(arr, "__arrow_c_array__"))
    assert (dl.shape, dl.strides) == ((2, 5, 3, 4), (60, 1, 15, 3))


def test_pyarrow_streams_tables_and_batches():
    pa = lib("pyarrow")
    np = lib("numpy")
    chunk = pa.array(np.arange(4, dtype=np.float32))
    dl = asdlpack(pa.chunked_array([chunk[:0], chunk, chunk[:0]]))
    assert dl.data_ptr == chunk.buffers()[1].address
    assert asdlpack(pa.chunked_array([], pa.int16())).shape == (0,)
    assert asdlpack(pa.chunked_array([], pa.list_(pa.int16(), 3))).shape == (0, 3)
    with pytest.raises(BufferError, match="combine_chunks"):
        asdlpack(pa.chunked_array([chunk, chunk]))
    assert asdlpack(pa.table({"x": chunk})).data_ptr == chunk.buffers()[1].address
    assert asdlpack(pa.record_batch({"x": chunk})).data_ptr == chunk.buffers()[1].address
    with pytest.raises(BufferError, match=r"2 columns \('x', 'y'\)"):
        asdlpack(pa.record_batch({"x": chunk, "y": chunk}))


def test_polars():
    pl = lib("polars")
    np = lib("numpy")
    torch = lib("torch")
    s = pl.Series("x", np.arange(6, dtype=np.float32))
    dl = asdlpack(s)
    assert dl.data_ptr == s.to_arrow().buffers()[1].address and dl.readonly
    t = torch.from_dlpack(dl)
    assert t.data_ptr() == dl.data_ptr and float(t.sum()) == 15.0
    assert asdlpack(pl.DataFrame({"x": s})).data_ptr == dl.data_ptr
    with pytest.raises(BufferError, match=r"rechunk\(\)"):
        asdlpack(pl.concat([s, s], rechunk=False))
    with pytest.raises(BufferError, match=r"select"):
        asdlpack(pl.DataFrame({"x": s, "y": s}))
    with pytest.raises(BufferError, match="fill_null"):
        asdlpack(pl.Series([1.0, None]))
    with pytest.raises(BufferError, match="bool8"):
        asdlpack(pl.Series([True, False]))
    arr = pl.Series([[1, 2], [3, 4], [5, 6]], dtype=pl.Array(pl.Int32, 2))
    assert np.from_dlpack(asdlpack(arr)).tolist() == [[1, 2], [3, 4], [5, 6]]
    assert np.from_dlpack(asdlpack(s.slice(2, 3))).tolist() == [2.0, 3.0, 4.0]


def test_polars_series_release_after_last_view():
    pl = lib("polars")
    np = lib("numpy")
    s = pl.Series(np.arange(1000, dtype=np.float64))
    a = np.from_dlpack(asdlpack(s))
    address = a.ctypes.data
    del s
    gc.collect()
    assert a.ctypes.data == address and a[-1] == 999.0 and not a.flags.writeable


def test_nanoarrow_arro3_pandas_duckdb():
    pa = lib("pyarrow")
    np = lib("numpy")
    src = pa.array(np.arange(5, dtype=np.int64))
    address = src.buffers()[1].address
    na = pytest.importorskip("nanoarrow")
    assert asdlpack(na.c_array(src)).data_ptr == address
    assert asdlpack(na.Array(src)).data_ptr == address
    a3 = pytest.importorskip("arro3.core")
    assert asdlpack(a3.Array.from_arrow(src)).data_ptr == address
    pd = pytest.importorskip("pandas")
    s = pd.Series(pd.arrays.ArrowExtensionArray(src))
    if hasattr(s, "__arrow_c_stream__"):       # pandas 3 (2.x Series speak no Arrow protocol)
        assert asdlpack(s).data_ptr == address
    duckdb = pytest.importorskip("duckdb")
    rel = duckdb.sql("select (i * 2)::float as x from range(5) t(i)")
    dl = asdlpack(rel)
    assert np.from_dlpack(dl).tolist() == [0, 2, 4, 6, 8] and dl.readonly
    with pytest.raises(BufferError, match=r"relation\.select"):
        asdlpack(duckdb.sql("select 1 as a, 2 as b"))


def test_jax_computes_on_arrow_data():
    pl = lib("polars")
    np = lib("numpy")
    jnp = lib("jax.numpy")
    s = pl.Series(np.arange(64, dtype=np.float32))
    x = jnp.from_dlpack(asdlpack(s, allow_legacy_readonly=True))
    assert float(jnp.sum(x * 2)) == 2 * 2016.0


def test_tensorflow_kernel_on_arrow_data():
    pa = lib("pyarrow")
    np = lib("numpy")
    tf = lib("tensorflow")
    # Arrow's allocator aligns to 64 bytes; TensorFlow aborts the process on less
    values = pa.array([float(i) for i in range(12)], pa.float32())
    arr = pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(pa.float32(), [2, 2]),
                                         pa.FixedSizeListArray.from_arrays(values, 4))
    dl = asdlpack(arr, allow_legacy_readonly=True)
    assert dl.data_ptr % 64 == 0
    t = tf.experimental.dlpack.from_dlpack(dl.__dlpack__())
    assert tf.reduce_sum(tf.linalg.matmul(t, t)).numpy() == float(
        np.sum(np.arange(12, dtype=np.float32).reshape(3, 2, 2) @ np.arange(
            12, dtype=np.float32).reshape(3, 2, 2)))


# -- the checker's Arrow rules (dlpack.tools.check_arrow) ------------------------------------

def _verdicts(factory) -> dict[str, str]:
    """The Arrow rules' verdicts of dlpack.tools.check (which grades every rule)."""
    from dlpack.tools.check import check
    from dlpack.tools.check_arrow import RULES

    return {r.rule: r.status for r in check(factory) if r.rule in RULES}


def _good():
    return ap.ArrayProducer(ap.primitive("f", [0, 1, 2, 3, 4, 5], b"f"), destructor=True)


def test_checker_passes_a_conforming_producer():
    from dlpack.tools.check_arrow import RULES

    got = _verdicts(_good)
    assert list(got) == list(RULES) and set(got.values()) == {"pass"}, got


def test_checker_leaves_the_shared_capsule_prototypes_alone():
    """The Arrow rules make their capsules with the prototypes every module shares
    (dlpack._capsule_api, NULL destructor as Destructor()): importing them changes none, so
    another user of PyCapsule_New in the process is not handed a c_void_p destructor."""
    import dlpack._capsule_api as capi
    from dlpack.tools import check_arrow

    assert check_arrow.RULES and capi.New.argtypes[2] is capi.Destructor
    with pytest.raises(ctypes.ArgumentError):           # None is no destructor
        capi.New(ctypes.addressof(ctypes.c_int()), b"x", None)


def test_checker_flags_leaks_and_double_releases():
    assert _verdicts(lambda: ap.ArrayProducer(ap.primitive("f", [1, 2], b"f")))[
        "arrow-release-unconsumed"] == "fail"                 # no destructor: a leak
    ap.RELEASES_ON_DROP[0] = 2
    try:
        got = _verdicts(_good)
    finally:
        ap.RELEASES_ON_DROP[0] = 1
    assert got["arrow-release-unconsumed"] == "fail"


def test_checker_flags_a_null_count_the_bitmap_contradicts():
    def lying():
        col = ap.primitive("f", [1, 2, 3, 4], b"f")
        col.buffers[0] = ap.bitmap("1011")          # one null, null_count 0
        return ap.ArrayProducer(col, destructor=True)

    assert _verdicts(lying)["arrow-nulls"] == "fail"


_BITMAP_LIES = """
import json
from dlpack.tools.check import check
from dlpack.tests import arrow_producers as ap

def lying(length):
    col = ap.primitive("f", [1, 2, 3, 4], b"f", null_count=-1)
    col.buffers[0] = ap.bitmap("1111")          # 2 bytes, then unmapped memory far before 2**59
    col.length = length
    return lambda: ap.ArrayProducer(col, destructor=True)

print(json.dumps({str(n): [r.status, r.evidence] for n in (2**62, -8)
                  for r in check(lying(n)) if r.rule == "arrow-nulls"}))
"""


def test_checker_does_not_read_a_bitmap_past_the_memory_there():
    """A length of 2**62 over a 2-byte bitmap, and a negative length: arrow-nulls fails naming
    the field; the checker asks the kernel before it reads the bitmap (a child process: before
    the fix it crashed)."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _BITMAP_LIES], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.splitlines()[-1])
    assert got[str(2**62)][0] == "fail" and "not readable" in got[str(2**62)][1], got
    assert got["-8"][0] == "fail" and "length = -8" in got["-8"][1], got


_ENDLESS = """
import ctypes, signal, sys
from dlpack import asdlpack
from dlpack.tools.check_arrow import ArrowArrayStream
from dlpack.tests import arrow_producers as ap

# Ctrl-C as in a terminal: a process started in the background by a shell without job control
# (as a CI runner may start the suite) inherits SIGINT ignored, and Python keeps it so
signal.signal(signal.SIGINT, signal.default_int_handler)

lib = ctypes.CDLL(sys.argv[1])
stream = ArrowArrayStream()
lib.endless_stream(ctypes.byref(stream))

class Endless:
    def __arrow_c_stream__(self, requested_schema=None):
        return ap.capsule(stream, b"arrow_array_stream")

print("reading", flush=True)
try:
    asdlpack(Endless())
except KeyboardInterrupt:
    print("interrupted", bool(stream.release))
"""


def test_an_endless_stream_of_empty_chunks_can_be_interrupted(tmp_path):
    """A stream that never ends (every chunk empty) keeps asdlpack reading, as it keeps any
    consumer; Ctrl-C stops it, and the stream is released (a child process: before the fix
    it ignored the signal and hung)."""
    import signal
    import subprocess
    import sys
    import time

    from dlpack.tests.helpers import c_library

    _, path = c_library("arrow_endless.c", tmp_path)
    child = subprocess.Popen([sys.executable, "-c", _ENDLESS, path], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "reading\n"
        time.sleep(0.5)                         # asdlpack is in the stream by now
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        pytest.fail("asdlpack of an endless stream ignored SIGINT for 60 s")
    assert out.split() == ["interrupted", "False"], (out, err[-2000:])


def test_checker_flags_a_slice_that_loses_its_offset():
    class Sliceable(ap.ArrayProducer):
        def slice(self, start, length):
            col = ap.primitive("f", [0, 1, 2, 3, 4, 5], b"f")
            col.buffers[1] = self.col.buffers[1]    # the same memory, offset dropped
            col.length = length
            return ap.ArrayProducer(col, destructor=True)

    got = _verdicts(lambda: Sliceable(ap.primitive("f", [0, 1, 2, 3, 4, 5], b"f"),
                                      destructor=True))
    assert got["arrow-offsets"] == "fail", got


@pytest.mark.parametrize("factory", ["pyarrow", "pyarrow_chunked", "polars", "polars_nulls",
                                     "nanoarrow", "arro3", "pandas", "duckdb"])
def test_checker_real_arrow_producers(factory):
    from dlpack.tools import producers as f

    modules = {"pyarrow_chunked": "pyarrow", "polars_nulls": "polars", "arro3": "arro3.core"}
    lib(modules.get(factory, factory))
    got = _verdicts(getattr(f, factory))
    assert "fail" not in got.values(), got


# -- where the Arrow step sits in asdlpack's order (docs/spec.md §3) ------------------------------


def test_order_dlpack_then_array_interfaces_then_arrow():
    import array as stdlib_array

    data = stdlib_array.array("d", [1.0, 2.0, 3.0, 4.0])
    arrow = ap.ArrayProducer(ap.primitive("f", [9, 9], b"f"))

    class Both:
        """A tensor protocol on the type (as Pillow 13's images have) and an Arrow one."""

        @property
        def __array_interface__(self):
            return {"shape": (2, 2), "typestr": "<f8", "data": data, "version": 3}

        def __arrow_c_array__(self, requested_schema=None):
            return arrow.__arrow_c_array__()

    assert asdlpack(Both()).shape == (2, 2)

    class RefusingDLPack:
        def __dlpack__(self, **kwargs):
            raise BufferError("__dlpack__: not this one")

        def __arrow_c_array__(self, requested_schema=None):
            return arrow.__arrow_c_array__()

    assert asdlpack(RefusingDLPack()).shape == (2,)


_INT32_COLUMN = ap.ArrayProducer(ap.primitive("i", [1, 2], b"i"), destructor=True)
# What a masked float32 array says: __array_interface__ refuses it (the mask), naming its type.
_MASKED_FLOAT32 = {"shape": (2,), "typestr": "<f4", "data": (0, False), "version": 3,
                   "mask": object()}


class _TypedThenArrow:
    """An __array_interface__ that says float32 and refuses, then an Arrow column of int32: the
    Arrow reading disagrees with the refused protocol's type (spec §3)."""

    __array_interface__ = _MASKED_FLOAT32

    def __arrow_c_array__(self, requested_schema=None):
        return _INT32_COLUMN.__arrow_c_array__()


def test_an_arrow_reading_that_disagrees_is_a_refusal_listed_with_the_others():
    with pytest.raises(BufferError) as e:
        asdlpack(_TypedThenArrow())
    text = str(e.value)
    assert text.startswith("asdlpack: every protocol that _TypedThenArrow speaks refused:")
    assert "__array_interface__: DLPackError: __array_interface__: field 'mask'" in text
    assert ("Arrow PyCapsule interface: DLPackError: Arrow PyCapsule interface: would give "
            "the elements as int32, but __array_interface__ typed them as 'typestr' = '<f4'"
            in text)


def test_after_an_arrow_reading_that_disagrees_a_protocol_that_agrees_is_read():
    """As after any refused step, the walk goes on: the buffer's float32 elements are what the
    refused __array_interface__ said (no fallback changes the elements)."""
    import array as stdlib_array

    class TypedThenArrowThenBuffer(stdlib_array.array):
        __array_interface__ = _MASKED_FLOAT32

        def __arrow_c_array__(self, requested_schema=None):
            return _INT32_COLUMN.__arrow_c_array__()

    floats = TypedThenArrowThenBuffer("f", [1.5, 2.5])
    dl = asdlpack(floats)
    assert (dl.dtype.name, dl.shape, dl.readonly) == ("float32", (2,), False)
    assert dl.data_ptr == floats.buffer_info()[0]           # zero-copy: the buffer itself
    assert memoryview(dl).tolist() == [1.5, 2.5]


def test_pillow_image_keeps_its_array_interface():
    image = lib("PIL.Image")
    im = image.new("RGB", (4, 3))
    assert asdlpack(im).shape == (3, 4, 3)          # not Pillow's Arrow export of pixels
