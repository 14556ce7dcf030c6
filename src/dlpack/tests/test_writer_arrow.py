"""Writer: the Arrow PyCapsule interface out (spec §13): the structs a DLPackObject hands
out, and real Arrow consumers (PyArrow, Polars, nanoarrow, arro3) reading them zero-copy."""

from __future__ import annotations

import ctypes
import importlib.util
import struct
import threading
import weakref

import pytest

from dlpack import asdlpack
from dlpack.tests import arrow_producers as ap
from dlpack.tests.helpers import collected, lib
from dlpack.tools.check_arrow import (
    ArrowArray,
    ArrowDeviceArray,
    ArrowDeviceArrayStream,
    ArrowSchema,
    struct_of,
)

_RENAMES = (b"arrow_array", b"arrow_schema", b"arrow_array_stream", b"renamed")  # kept alive


# -- no export sees a blank object (docs/spec.md §7) --------------------------------------------

EXPORT_PREFIXES = ("__dlpack", "__arrow_c_", "__array_", "__cuda_array_", "__reduce_ex__")
EXPORT_ARGS = {"__reduce_ex__": (5,)}


def exports() -> list[str]:
    """Every export DLPackObject defines, found by name: a new one is covered unasked."""
    from dlpack import DLPackObject

    return sorted(n for n in dir(DLPackObject) if n.startswith(EXPORT_PREFIXES)
                  and n != "__dlpack_c_exchange_api__")       # a capsule: the API's own test


def _try_every_export(obj) -> dict[str, str]:
    """Each export's outcome on obj (the buffer protocol, a slot, as "buffer")."""
    outcomes = {}
    for name in [*exports(), "buffer"]:
        try:
            if name == "buffer":
                memoryview(obj).release()
            else:
                value = getattr(obj, name)
                if callable(value):
                    value(*EXPORT_ARGS.get(name, ()))
            outcomes[name] = "exported"
        except Exception as e:
            outcomes[name] = f"{type(e).__name__}: {e}"
    return outcomes


def test_no_export_reaches_a_blank_object():
    """Python code that runs while asdlpack reads (a producer's release callback) finds no
    half-made DLPackObject through the collector, and cannot make one: every object it can
    reach was validated, and every export of it works as on any other."""
    import gc

    from dlpack import DLPackObject
    from dlpack.tools.check_arrow import SchemaRelease

    assert {"__arrow_c_array__", "__arrow_c_schema__", "__arrow_c_stream__",
            "__arrow_c_device_array__", "__dlpack__", "__array_interface__"} <= set(exports())
    found: list = []

    def release(p) -> None:
        found.extend(o for o in gc.get_objects() if type(o) is DLPackObject)
        with pytest.raises(TypeError, match="asdlpack"):
            DLPackObject.__new__(DLPackObject)
        p.contents.release = SchemaRelease()

    callback = SchemaRelease(release)
    obj = ap.ArrayProducer(ap.primitive("f", [1, 2, 3], b"f"))
    obj.schema.release = callback
    keep = asdlpack(bytearray(b"abcd"))
    dl = asdlpack(obj)
    assert keep in found and not any(o is dl for o in found)
    cpu = {name: "exported" for name in [*exports(), "buffer"]}
    cpu["__cuda_array_interface__"] = ("AttributeError: __cuda_array_interface__: the data is "
                                       "on kDLCPU:0, not a CUDA device")
    if importlib.util.find_spec("numpy") is None:   # __array__ makes a NumPy array
        cpu["__array__"] = "ModuleNotFoundError: No module named 'numpy'"
    for o in [*found, dl]:
        assert o.itemsize > 0 and _try_every_export(o) == cpu


def test_every_reader_publishes_what_it_made():
    """Each reader's object is tracked by the collector once made (untracked only while
    blank): a cycle through one is collected."""
    import array
    import gc
    import pickle

    from dlpack import from_address

    src = array.array("f", [1, 2])
    made = [asdlpack(b"ab"), asdlpack(bytearray(2)), asdlpack(memoryview(src)),
            asdlpack(ap.ArrayProducer(ap.primitive("f", [1, 2], b"f"))),
            from_address(src.buffer_info()[0], (2,), "float32", owner=src)]
    made += [asdlpack(made[0], allow_legacy_readonly=True), pickle.loads(pickle.dumps(made[1])),
             asdlpack(asdlpack(src).__dlpack__(max_version=(1, 0)))]
    assert all(gc.is_tracked(o) for o in made)


# -- the structs a DLPackObject hands out ------------------------------------------------------

def _array(dl, method="__arrow_c_array__"):
    schema, array = getattr(dl, method)()
    s = struct_of(schema, b"arrow_schema")
    a = struct_of(array, b"arrow_array" if method == "__arrow_c_array__" else
                  b"arrow_device_array")
    return (schema, array), s, a if method == "__arrow_c_array__" else a.array


def test_export_primitive_fields():
    import array as stdlib_array

    src = stdlib_array.array("f", [1, 2, 3])
    dl = asdlpack(src)
    _keep, s, a = _array(dl)
    assert (s.format, s.name, s.metadata, s.n_children) == (b"f", b"", None, 0)
    assert (a.length, a.null_count, a.offset, a.n_buffers, a.n_children) == (3, 0, 0, 2, 0)
    assert (a.buffers[0], a.buffers[1]) == (None, dl.data_ptr)
    (_, device), _, _ = _array(dl, "__arrow_c_device_array__")
    d = struct_of(device, b"arrow_device_array")
    assert (d.device_type, d.device_id, d.sync_event) == (1, -1, None)


def _metadata(address: int) -> dict[bytes, bytes]:
    """Arrow's binary metadata read field by field (never past its end)."""
    def int32(at: int) -> int:
        return struct.unpack("=i", ctypes.string_at(at, 4))[0]

    pairs, at = {}, address + 4
    for _ in range(int32(address)):
        klen = int32(at)
        key = ctypes.string_at(at + 4, klen)
        at += 4 + klen
        vlen = int32(at)
        pairs[key] = ctypes.string_at(at + 4, vlen)
        at += 4 + vlen
    return pairs


def test_export_tensor_and_bool8_fields():
    _keep, s, a = _array(asdlpack(memoryview(bytearray(24)).cast("B", (2, 3, 4))))
    assert s.format == b"+w:12" and s.children[0].contents.format == b"C"
    assert s.children[0].contents.name == b"item"
    assert _metadata(s.metadata) == {b"ARROW:extension:name": b"arrow.fixed_shape_tensor",
                                     b"ARROW:extension:metadata": b'{"shape":[3,4]}'}
    assert (a.length, a.n_buffers, a.n_children) == (2, 1, 1)
    child = a.children[0].contents
    assert (child.length, child.n_buffers, child.buffers[0]) == (24, 2, None)
    _keep, s, a = _array(asdlpack(memoryview(b"\x01\x00\x01").cast("?")))
    assert s.format == b"c" and _metadata(s.metadata) == {
        b"ARROW:extension:name": b"arrow.bool8", b"ARROW:extension:metadata": b""}


def test_export_release_callbacks_idempotent_and_hold_the_data():
    dl = asdlpack(bytearray(b"abcd"))
    ref = weakref.ref(dl)
    schema, array = dl.__arrow_c_array__()
    moved = ArrowArray()                    # a consumer moves the struct out of the capsule
    src = struct_of(array, b"arrow_array")
    ctypes.memmove(ctypes.addressof(moved), ctypes.addressof(src), ctypes.sizeof(ArrowArray))
    src.release = type(src.release)()
    del dl, array, src
    assert not collected(ref)               # the moved struct holds the DLPackObject
    release = ap.callback(moved.release)      # a copy: the field is set to NULL by the call
    release(moved)
    assert not moved.release and collected(ref)
    release(moved)                          # a second call finds release NULL: nothing
    s = struct_of(schema, b"arrow_schema")
    release = ap.callback(s.release)
    release(s)
    release(s)
    assert not s.release


def test_export_unconsumed_capsules_free_everything():
    dl = asdlpack(bytearray(8))
    ref = weakref.ref(dl)
    caps = [dl.__arrow_c_array__(), dl.__arrow_c_stream__(), dl.__arrow_c_device_array__(),
            dl.__arrow_c_device_stream__(), dl.__arrow_c_schema__()]
    del dl
    assert not collected(ref)
    del caps
    assert collected(ref)


def test_export_stream_protocol():
    dl = asdlpack(memoryview(bytearray(range(12))).cast("B", (3, 4)))
    ref = weakref.ref(dl)
    cap = dl.__arrow_c_stream__()
    st = struct_of(cap, b"arrow_array_stream")
    s1, s2, a, end = ArrowSchema(), ArrowSchema(), ArrowArray(), ArrowArray()
    assert st.get_schema(st, s1) == 0 and st.get_schema(st, s2) == 0
    assert s1.format == s2.format == b"+w:4" and ctypes.addressof(s1) != ctypes.addressof(s2)
    assert st.get_next(st, a) == 0 and a.release and a.length == 3
    assert st.get_next(st, end) == 0 and not end.release
    st.release(st)                          # the chunk outlives the stream
    assert not st.release
    del dl
    assert not collected(ref)
    assert a.children[0].contents.buffers[1] == ctypes.addressof(ctypes.c_char.from_buffer(
        ref().base))
    for x in (s1, s2, a):
        x.release(x)
    assert collected(ref)


def test_export_device_stream_protocol():
    dl = asdlpack(bytearray(4))
    cap = dl.__arrow_c_device_stream__()
    st = struct_of(cap, b"arrow_device_array_stream")
    assert st.device_type == 1
    a, end = ArrowDeviceArray(), ArrowDeviceArray()
    assert st.get_next(st, a) == 0 and (a.device_type, a.device_id, a.sync_event) == (1, -1, None)
    assert st.get_next(st, end) == 0 and not end.array.release
    a.array.release(a.array)
    st.release(st)
    assert isinstance(st, ArrowDeviceArrayStream) and isinstance(end, ArrowDeviceArray)


def test_export_capsules_renamed_are_freed_as_what_they_were_made():
    """A capsule renamed before it is dropped is still freed as the struct it holds (one
    destructor per struct kind, as for DLPack capsules: spec §4)."""
    set_name = ctypes.pythonapi.PyCapsule_SetName
    set_name.restype, set_name.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
    dl = asdlpack(bytearray(16))
    ref = weakref.ref(dl)
    schema, array = dl.__arrow_c_array__()
    stream = dl.__arrow_c_stream__()
    del dl
    for capsule, name in zip((schema, array, stream), _RENAMES[:3], strict=True):
        assert set_name(capsule, name) == 0
    dl_schema = asdlpack(b"ab").__arrow_c_schema__()
    assert set_name(dl_schema, _RENAMES[3]) == 0
    del schema, array, stream, dl_schema, capsule
    assert collected(ref)                   # the array and the stream released their holds


def test_export_released_on_another_thread_without_the_gil():
    dl = asdlpack(bytearray(64))
    ref = weakref.ref(dl)
    _, array = dl.__arrow_c_array__()
    moved = ArrowArray()
    src = struct_of(array, b"arrow_array")
    ctypes.memmove(ctypes.addressof(moved), ctypes.addressof(src), ctypes.sizeof(ArrowArray))
    src.release = type(src.release)()
    del dl, array, src
    # a CFUNCTYPE call releases the GIL: the callback takes it to drop the DLPackObject
    t = threading.Thread(target=ap.callback(moved.release), args=(moved,))
    t.start()
    t.join()
    assert collected(ref)


def test_export_stream_used_from_another_thread():
    dl = asdlpack(bytearray(range(4)))
    cap = dl.__arrow_c_stream__()
    st = struct_of(cap, b"arrow_array_stream")
    out = ArrowArray()
    t = threading.Thread(target=ap.callback(st.get_next), args=(st, out))
    t.start()
    t.join()
    assert out.length == 4
    out.release(out)
    st.release(st)


# -- real consumers -----------------------------------------------------------------------------

def _consumers():
    out = {}
    pa = pytest.importorskip("pyarrow")
    out["pyarrow"] = (pa.array, lambda r: r.buffers()[1].address)
    for name, mod, make in [
            ("polars", "polars", lambda m: m.Series), ("pl.from_arrow", "polars",
                                                         lambda m: m.from_arrow),
            ("nanoarrow", "nanoarrow", lambda m: m.Array),
            ("na.c_array", "nanoarrow", lambda m: m.c_array),
            ("arro3", "arro3.core", lambda m: m.Array.from_arrow)]:
        try:
            m = __import__(mod, fromlist=["_"])
        except ImportError:
            continue
        out[name] = (make(m), lambda r: asdlpack(r).data_ptr)
    out["pyarrow.chunked"] = (pa.chunked_array, lambda r: r.chunk(0).buffers()[1].address)
    return out


@pytest.mark.parametrize("name", ["int8", "uint16", "int32", "int64", "float16", "float32",
                                  "float64", "bool"])
def test_torch_to_arrow_consumers_zero_copy(name):
    torch = lib("torch")
    t = torch.arange(6).to(getattr(torch, name)) if name != "bool" else torch.tensor(
        [True, False, True])
    for consumer, (make, address) in _consumers().items():
        dl = asdlpack(t)
        got = make(dl)
        assert address(got) == t.data_ptr(), consumer          # the Arrow path, not iteration
        back = torch.from_dlpack(asdlpack(got))
        assert torch.equal(back, t), consumer


def test_numpy_tensor_to_pyarrow_fixed_shape_tensor():
    np = lib("numpy")
    pa = lib("pyarrow")
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    arr = pa.array(asdlpack(x))
    assert arr.type.shape == [3, 4]
    back = arr.to_numpy_ndarray()
    assert np.array_equal(back, x) and back.ctypes.data == x.ctypes.data
    assert pa.array(asdlpack(np.float32(2.5))).to_pylist() == [2.5]     # 0-d: one value


def test_writes_through_the_tensor_show_in_arrow():
    torch = lib("torch")
    pa = lib("pyarrow")
    t = torch.zeros(4)
    arr = pa.array(asdlpack(t))
    t[2] = 7
    assert arr.to_pylist() == [0, 0, 7, 0]


def test_arrow_consumer_keeps_the_tensor_alive():
    torch = lib("torch")
    pa = lib("pyarrow")
    t = torch.arange(1000.0)
    dl = asdlpack(t)
    ref = weakref.ref(dl)
    arr = pa.array(dl)
    del dl, t
    assert not collected(ref)
    assert arr[999].as_py() == 999.0
    del arr
    assert collected(ref)


def test_requested_schema_negotiation():
    pa = lib("pyarrow")
    np = lib("numpy")
    dl = asdlpack(np.ones((2, 3), np.float32))
    assert pa.array(dl, type=pa.list_(pa.float32(), 3)).type == pa.list_(pa.float32(), 3)
    with pytest.raises(BufferError, match="does not cast"):
        pa.array(dl, type=pa.list_(pa.float64(), 3))
    b = asdlpack(np.array([True, False]))
    assert pa.array(b, type=pa.int8()).to_pylist() == [1, 0]
    with pytest.raises(BufferError, match="does not cast"):
        pa.array(asdlpack(np.arange(3.0)), type=pa.float32())


def _extension(s) -> bytes | None:
    """The ARROW:extension:name in an ArrowSchema's metadata, or None."""
    if not s.metadata:
        return None
    p = s.metadata
    pairs = struct.unpack("=i", ctypes.string_at(p, 4))[0]
    p += 4
    found = {}
    for _ in range(pairs):
        k = struct.unpack("=i", ctypes.string_at(p, 4))[0]
        key = ctypes.string_at(p + 4, k)
        p += 4 + k
        v = struct.unpack("=i", ctypes.string_at(p, 4))[0]
        found[key] = ctypes.string_at(p + 4, v)
        p += 4 + v
    return found.get(b"ARROW:extension:name")


def test_requested_schema_decides_each_level():
    """An N-D bool tensor asked as fixed_size_list<bool8> keeps bool8 for the values (only the
    list level is plain); asked as fixed_size_list<int8>, both levels are storage."""
    np = lib("numpy")
    b = asdlpack(np.array([[True, False, True], [True, True, False]]))
    for values, name in [(ap.Col(b"c", metadata=ap.extension(b"arrow.bool8")), b"arrow.bool8"),
                         (ap.Col(b"c"), None)]:
        wanted = ap.capsule(ap.build_schema(ap.Col(b"+w:3", children=[values])),
                            b"arrow_schema")
        schema, array = b.__arrow_c_array__(wanted)
        s = struct_of(schema, b"arrow_schema")
        assert (s.format, _extension(s)) == (b"+w:3", None)
        child = s.children[0].contents
        assert (child.format, _extension(child)) == (b"c", name)
        assert struct_of(array, b"arrow_array").children[0].contents.buffers[1] == b.data_ptr
    pa = lib("pyarrow")
    got = pa.array(b, type=pa.list_(pa.bool8(), 3))
    assert got.type == pa.list_(pa.bool8(), 3)
    assert got.flatten().storage.to_pylist() == [1, 0, 1, 1, 1, 0]


def test_jax_to_polars_values():
    jnp = lib("jax.numpy")
    pl = lib("polars")
    x = jnp.arange(8, dtype=jnp.float32) * 3
    s = pl.Series(asdlpack(x))
    assert s.to_list() == [3.0 * i for i in range(8)]
    assert s.dtype == pl.Float32




# -- one table of device kinds (docs/spec.md §3.1, §13) ------------------------------------------

ARROW_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDA_HOST", 4: "OPENCL", 7: "VULKAN", 8: "METAL",
               9: "VPI", 10: "ROCM", 11: "ROCM_HOST", 12: "EXT_DEV", 13: "CUDA_MANAGED",
               14: "ONEAPI", 15: "WEBGPU", 16: "HEXAGON"}      # Arrow's abi.h, spelled out


@pytest.mark.parametrize("kind", [*range(-1, 34), 2**31 - 1, -(2**31)])
def test_device_kinds_one_table(kind):
    """The reader accepts exactly DLDeviceType's members; the Arrow writer exports the kinds
    Arrow numbers as DLPack does (no CUDA work: 2, 3 and 13 are left to the CUDA tests), the
    Arrow reader names the ones it refuses as Arrow does."""
    from dlpack import DLDeviceType
    from dlpack.tests.hostile import dl_capsule

    known = kind in {int(d) for d in DLDeviceType}
    if not known:
        with pytest.raises(BufferError, match="is not a device type DLPack"):
            asdlpack(dl_capsule(device=(kind, 0)))
    else:
        obj = asdlpack(dl_capsule(device=(kind, 0)))
        assert obj.__dlpack_device__() == (kind, 0)
        if kind not in ARROW_NAMES:
            with pytest.raises(BufferError, match="Arrow has no device type"):
                obj.__arrow_c_device_array__()
        elif kind not in (2, 3, 13):
            _schema, array = obj.__arrow_c_device_array__()
            assert struct_of(array, b"arrow_device_array").device_type == kind
    if kind in ARROW_NAMES and kind not in (1, 2, 3, 13):
        with pytest.raises(BufferError, match=f"ARROW_DEVICE_{ARROW_NAMES[kind]}\\)"):
            asdlpack(ap.DeviceProducer(ap.primitive("f", [1.0], b"f"), device_type=kind))
