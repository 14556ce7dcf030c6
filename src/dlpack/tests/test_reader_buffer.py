"""Reader: the buffer protocol (spec §3.5) — stdlib objects, ctypes, NumPy through PEP 3118."""

import array
import ctypes
import mmap
import struct
import warnings

import pytest

from dlpack import DLDeviceType, asdlpack, todict
from dlpack.tests.helpers import CONSUMERS, check_exchange, lib

np = lib("numpy")


def test_seed_example_bytes_to_torch():
    torch = lib("torch")
    t = torch.from_dlpack(asdlpack(b"Hello!"))
    assert t.tolist() == [72, 101, 108, 108, 111, 33]
    assert t.dtype == torch.uint8


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_bytes_every_consumer(consumer):
    data = b"Hello, DLPack!" * 3
    check_exchange(consumer, data, np.frombuffer(data, np.uint8), readonly=True)


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_bytearray_every_consumer(consumer):
    data = bytearray(range(40))
    check_exchange(consumer, data, np.arange(40, dtype=np.uint8), readonly=False)


def test_bytes_is_readonly_for_numpy_and_same_address():
    b = b"abcdef"
    dl = asdlpack(b)
    a = np.from_dlpack(dl)
    assert dl.readonly and not a.flags.writeable
    assert a.ctypes.data == dl.data_ptr == np.frombuffer(b, np.uint8).ctypes.data


def test_legacy_export_of_bytes_is_a_private_copy():
    """A legacy consumer cannot see READ_ONLY: copy=None copies, copy=False refuses (§4)."""
    b = b"abc"
    private = todict(asdlpack(b).__dlpack__())
    assert private["data"] != asdlpack(b).data_ptr
    with pytest.raises(BufferError, match="read-only"):
        asdlpack(b).__dlpack__(copy=False)
    shared = todict(asdlpack(b, allow_legacy_readonly=True).__dlpack__(copy=False))
    assert shared["data"] == asdlpack(b).data_ptr


@pytest.mark.parametrize("code", array.typecodes)
def test_array_array_every_typecode(code):
    if code in "uw":
        with warnings.catch_warnings():     # 'u' is deprecated (Python 3.13), not our subject
            warnings.simplefilter("ignore", DeprecationWarning)
            a = array.array(code, "ab")
        with pytest.raises(BufferError, match="format"):
            asdlpack(a)
        return
    a = array.array(code, [0, 1, 1, 0] if code in "bBhHiIlLqQ" else [0.5, 1.5, 2.5])
    dl = asdlpack(a)
    assert dl.itemsize == a.itemsize
    n = np.from_dlpack(dl)
    assert n.ctypes.data == a.buffer_info()[0]
    np.testing.assert_array_equal(n, list(a))
    assert n.flags.writeable


def test_array_array_doubles_numpy_zero_copy():
    a = array.array("d", [1, 2, 3])
    n = np.from_dlpack(asdlpack(a))
    assert n.ctypes.data == a.buffer_info()[0]
    n[0] = 42
    assert a[0] == 42


@pytest.mark.parametrize(
    ("fmt", "shape", "dtype"),
    [("b", (24,), np.int8), ("h", (3, 4), np.int16), ("i", (2, 3), np.int32),
     ("l", (3,), np.int64), ("q", (3,), np.int64), ("f", (2, 3), np.float32),
     ("d", (3,), np.float64), ("?", (24,), np.bool_),
     ("Q", (3,), np.uint64), ("c", (24,), np.uint8)],
)
def test_memoryview_casts(fmt, shape, dtype):
    raw = bytearray(24)
    m = memoryview(raw).cast("B").cast(fmt, shape) if fmt != "c" else memoryview(raw).cast("c")
    dl = asdlpack(m)
    assert dl.shape == shape
    a = np.from_dlpack(dl)
    assert a.dtype == dtype and a.shape == shape
    assert a.ctypes.data == dl.data_ptr == np.frombuffer(raw, np.uint8).ctypes.data


def test_memoryview_sliced_with_steps_and_negative():
    base = np.arange(20, dtype=np.int32)
    m = memoryview(base)[::3]
    dl = asdlpack(m)
    assert dl.strides == (3,)
    a = np.from_dlpack(dl)
    np.testing.assert_array_equal(a, base[::3])
    assert a.ctypes.data == base.ctypes.data
    r = asdlpack(memoryview(base)[::-2])
    assert r.strides == (-2,)
    np.testing.assert_array_equal(np.from_dlpack(r), base[::-2])


def test_zero_dim_and_zero_size():
    torch = lib("torch")
    zd = asdlpack(memoryview(struct.pack("d", 2.5)).cast("d", ()))
    assert zd.shape == () and zd.ndim == 0 and zd.size == 1
    assert np.from_dlpack(zd)[()] == 2.5
    empty = asdlpack(b"")
    assert empty.shape == (0,) and empty.size == 0 and empty.nbytes == 0
    assert np.from_dlpack(empty).shape == (0,)
    assert torch.from_dlpack(asdlpack(bytearray())).shape == (0,)


def test_mmap_held_while_exported():
    jnp = lib("jax.numpy")
    mm = mmap.mmap(-1, 4096)
    mm[:5] = b"hello"
    dl = asdlpack(mm)
    x = jnp.from_dlpack(dl)
    assert x.unsafe_buffer_pointer() == dl.data_ptr  # page-aligned: JAX keeps it zero-copy
    assert bytes(np.asarray(x[:5])) == b"hello"
    with pytest.raises(BufferError):
        mm.close()
    del x, dl
    import gc

    gc.collect()
    mm.close()


def test_bytearray_cannot_resize_while_exported():
    ba = bytearray(b"abc")
    dl = asdlpack(ba)
    with pytest.raises(BufferError):
        ba.append(1)
    del dl
    ba.append(1)


def test_readonly_mmap():
    import tempfile

    with tempfile.TemporaryFile() as f:
        f.write(b"x" * 100)
        f.flush()
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        a = np.from_dlpack(asdlpack(mm))
        assert not a.flags.writeable and bytes(a[:3]) == b"xxx"
        del a


def test_ctypes_scalars_and_nested_arrays():
    v = ctypes.c_double(1.25)
    dl = asdlpack(v)
    assert dl.shape == () and dl.dtype == "float64"
    assert np.from_dlpack(dl)[()] == 1.25
    grid = ((ctypes.c_int16 * 3) * 2)()
    grid[1][2] = 7
    g = asdlpack(grid)
    assert g.shape == (2, 3) and g.strides == (3, 1) and g.dtype == "int16"
    a = np.from_dlpack(g)
    assert a[1, 2] == 7 and a.ctypes.data == ctypes.addressof(grid)
    longs = (ctypes.c_long * 3)(1, 2, 3)
    assert np.from_dlpack(asdlpack(longs)).tolist() == [1, 2, 3]
    chars = (ctypes.c_char * 3)(b"a", b"b", b"c")
    assert asdlpack(chars).dtype == "uint8"
    flags = (ctypes.c_bool * 2)(True, False)
    assert np.from_dlpack(asdlpack(flags)).tolist() == [True, False]


@pytest.mark.parametrize(
    ("maker", "match"),
    [(lambda: (ctypes.c_longdouble * 2)(), "long double"),
     (lambda: (ctypes.c_void_p * 2)(), "pointer"),
     (lambda: np.zeros(2, dtype="i4,f8"), "'T\\{"),
     (lambda: memoryview(bytearray(8)).cast("B").cast("d").cast("B")[1:5].cast("i"), None)],
)
def test_buffer_formats_rejected_with_format_in_message(maker, match):
    obj = maker()
    if match is None:   # an unaligned but valid cast still works: it is plain int32 data
        assert asdlpack(obj).dtype == "int32"
        return
    with pytest.raises(BufferError, match=match):
        asdlpack(obj)


def test_structure_rejected():
    class S(ctypes.Structure):
        _fields_ = [("a", ctypes.c_int), ("b", ctypes.c_double)]

    with pytest.raises(BufferError, match="struct"):
        asdlpack(S())


def test_non_native_byte_order_buffer_rejected():
    be = (ctypes.c_int32.__ctype_be__ * 2)()
    with pytest.raises(BufferError, match="byte order"):
        asdlpack(be)


def test_pyarrow_buffer():
    pa = lib("pyarrow")
    buf = pa.py_buffer(b"0123456789")
    dl = asdlpack(buf)
    assert dl.readonly and dl.data_ptr == buf.address
    a = np.from_dlpack(dl)
    assert bytes(a) == b"0123456789" and a.ctypes.data == buf.address


def test_device_is_cpu():
    assert asdlpack(b"x").device == (DLDeviceType.kDLCPU, 0)
    assert asdlpack(b"x").__dlpack_device__() == (DLDeviceType.kDLCPU, 0)


def test_a_protocol_set_to_none_is_absent():
    """§3: None switches a protocol off (as __hash__ = None does); the buffer is then read."""

    class Plain(bytes):
        __array_interface__ = None
        __arrow_c_array__ = None
        __dlpack__ = None

    data = Plain(b"\x01\x02\x03")
    dl = asdlpack(data)
    assert dl.dtype.name == "uint8" and dl.shape == (3,) and dl.readonly
    assert memoryview(dl).tobytes() == b"\x01\x02\x03"
