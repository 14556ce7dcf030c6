"""Writer: the buffer protocol (spec §5) — memoryview, file.write, array.array, struct —
and round trips through each output."""

import array
import io
import struct

import pytest

from dlpack import asdlpack, from_address
from dlpack.tests.helpers import Iface, lib

np = lib("numpy")


def test_memoryview_of_torch_without_numpy_in_the_middle():
    torch = lib("torch")
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    m = memoryview(asdlpack(t))
    assert (m.format, m.shape, m.strides, m.readonly) == ("f", (2, 3), (12, 4), False)
    assert m.tolist() == [[0, 1, 2], [3, 4, 5]]
    m[0, 0] = 9.0
    assert t[0, 0].item() == 9.0


def test_file_write_array_struct_of_jax_and_tf():
    jnp = lib("jax.numpy")
    tf = lib("tensorflow")
    x = jnp.arange(4, dtype=jnp.float32)
    f = io.BytesIO()
    f.write(asdlpack(x))
    assert f.getvalue() == np.arange(4, dtype=np.float32).tobytes()
    t = tf.constant([1.5, 2.5], dtype=tf.float64)
    assert array.array("d", asdlpack(t)).tolist() == [1.5, 2.5]
    assert struct.unpack_from("<2d", asdlpack(t)) == (1.5, 2.5)
    assert bytes(asdlpack(t)) == np.array([1.5, 2.5]).tobytes()


def test_buffer_readonly_and_writable_requests():
    import ctypes

    dl = asdlpack(b"abc")
    m = memoryview(dl)
    assert m.readonly and m.obj is dl
    with pytest.raises(TypeError, match="not writable"):
        (ctypes.c_char * 3).from_buffer(dl)      # ctypes asks for a writable buffer
    with pytest.raises(TypeError, match="read-write"):
        io.BytesIO(b"xyz").readinto(dl)
    ba = bytearray(b"abc")
    (ctypes.c_char * 3).from_buffer(asdlpack(ba))[0] = b"z"
    assert io.BytesIO(b"xy").readinto(asdlpack(ba)) == 2 and ba == bytearray(b"xyc")


def test_buffer_strided_and_contiguity_requests():
    a = np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2]
    dl = asdlpack(a)
    m = memoryview(dl)
    assert m.strides == (8, 4) and m.tolist() == a.tolist()
    assert bytes(dl) == a.tobytes()             # bytes() copies strided buffers itself
    with pytest.raises(BufferError, match="C-contiguous"):
        io.BytesIO().write(dl)                   # a simple (contiguous) request
    assert bytes(asdlpack(np.arange(3, dtype=np.uint8))) == b"\x00\x01\x02"
    f = io.BytesIO()
    assert f.write(asdlpack(np.arange(3, dtype=np.int16).reshape(3, 1))) == 6   # PyBUF_SIMPLE
    assert f.getvalue() == np.arange(3, dtype=np.int16).tobytes()


def test_buffer_zero_dim_and_empty():
    m = memoryview(asdlpack(np.array(2.5)))
    assert m.shape == () and m.tolist() == 2.5
    assert memoryview(asdlpack(np.zeros((0, 2)))).shape == (0, 2)


def test_buffer_types_without_format():
    ml = lib("ml_dtypes")
    with pytest.raises(BufferError, match="bfloat16"):
        memoryview(asdlpack(np.zeros(2, dtype=ml.bfloat16)))


@pytest.mark.parametrize("make", [
    lambda: b"round trip",
    lambda: np.arange(12, dtype=np.float32).reshape(3, 4)[::2, ::-1],
    lambda: np.array(5, dtype=np.int64),
    lambda: np.zeros((2, 0), dtype=np.int8),
    lambda: array.array("h", [1, 2, 3]),
])
def test_round_trips_through_each_output(make):
    obj = make()
    dl = asdlpack(obj)
    again = [asdlpack(memoryview(dl)), asdlpack(Iface(dl.__array_interface__, dl)),
             asdlpack(dl.__dlpack__(max_version=(1, 0)))]
    for other in again:
        assert (other.shape, other.dtype, other.readonly) == (dl.shape, dl.dtype, dl.readonly)
        if dl.size:
            assert (other.strides, other.data_ptr) == (dl.strides, dl.data_ptr)


def test_formats_written_are_read_back_as_the_same_type():
    """Every type of _types' width table that has a PEP 3118 format: the writer's format has
    the item's size and the buffer reader makes the same type of it (both tables derive from
    _types); the others (complex32, long double) are refused by name."""
    from dlpack import _types
    from dlpack.tests.hostile import dl_capsule

    written = set()
    for kind, code in _types._KIND_CODE.items():
        for size in _types._KIND_WIDTHS[kind]:
            dl = asdlpack(dl_capsule(code=int(code), bits=8 * size, shape=(3,)))
            try:
                m = memoryview(dl)
            except BufferError as e:
                assert dl.dtype.name in str(e)
                continue
            assert struct.calcsize(m.format.lstrip("Z")) * (1 + m.format.startswith("Z")) == size
            assert asdlpack(m).dtype == dl.dtype
            written.add(dl.dtype.name)
    assert written == {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                       "uint64", "float16", "float32", "float64", "complex64", "complex128"}


def test_buffer_carries_at_most_64_dimensions():
    """PyBUF_MAX_NDIM (64) binds exporters: more is a BufferError naming it and the ways out,
    not memoryview's ValueError after an export it cannot hold (found by fuzz/fuzz_buffer.py);
    the other outputs carry every dimension."""
    raw = bytearray(8)
    address = asdlpack(raw).data_ptr
    assert memoryview(from_address(address, (1,) * 64, "uint8", owner=raw)).ndim == 64
    wide = from_address(address, (1,) * 65, "uint8", owner=raw)
    with pytest.raises(BufferError, match="65 dimensions; it carries at most 64"):
        memoryview(wide)
    assert asdlpack(wide.__dlpack__()).ndim == 65


def test_empty_array_byte_strides_do_not_overflow():
    """An empty array's normalised C strides may exceed what bytes can count (shape (0, 2**62)
    of complex128: 2**62 elements); the buffer export writes them without signed overflow
    (the sanitizer job's UBSan checks it; found by fuzz/fuzz_array_struct.py)."""
    raw = bytearray(16)
    dl = from_address(asdlpack(raw).data_ptr, (0, 2**62), "complex128", owner=raw)
    m = memoryview(dl)
    assert (m.shape, m.nbytes, m.strides[1]) == ((0, 2**62), 0, 16)
