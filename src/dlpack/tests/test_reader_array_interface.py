"""Readers: __array_interface__ v3 (spec §3.2) and __array_struct__ (§3.3), with hostile dicts."""

import pytest

from dlpack import asdlpack
from dlpack.tests.helpers import CONSUMERS, Iface, Struct, check_exchange, lib

np = lib("numpy")


def iface_of(a, **changes):
    ai = dict(a.__array_interface__)
    ai.update(changes)
    return Iface(ai, a)


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_pointer_form_every_consumer(consumer):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    check_exchange(consumer, iface_of(a), a, readonly=False)


@pytest.mark.parametrize(
    "dtype", ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
              "float16", "float32", "float64", "complex64", "complex128"])
def test_every_numpy_dtype_both_interfaces(dtype):
    a = (np.arange(6) % 2 if dtype == "bool" else np.arange(6)).astype(dtype).reshape(2, 3)
    for provider in (iface_of(a), Struct(a)):
        dl = asdlpack(provider)
        assert dl.dtype == dtype and dl.shape == (2, 3)
        b = np.from_dlpack(dl)
        np.testing.assert_array_equal(b, a)
        assert b.ctypes.data == a.ctypes.data


@pytest.mark.parametrize("make", [
    lambda: np.arange(24, dtype=np.int32).reshape(4, 6)[::2, 1::2],
    lambda: np.arange(24, dtype=np.float64).reshape(4, 6).T,
    lambda: np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    lambda: np.arange(10, dtype=np.int16)[::-1],
    lambda: np.array(3.5),
    lambda: np.zeros((0, 3), dtype=np.float32),
])
def test_layouts_both_interfaces(make):
    a = make()
    for provider in (a, iface_of(a), Struct(a)):
        dl = asdlpack(provider)
        assert dl.shape == a.shape
        assert dl.strides == tuple(s // a.itemsize for s in a.strides) or a.size == 0
        b = np.from_dlpack(dl)
        np.testing.assert_array_equal(b, a)
        if a.size:
            assert b.ctypes.data == a.ctypes.data


def test_readonly_both_interfaces():
    a = np.arange(4.0)
    a.flags.writeable = False
    for provider in (a, iface_of(a), Struct(a)):
        dl = asdlpack(provider)
        assert dl.readonly
        assert not np.from_dlpack(dl).flags.writeable


def test_data_as_buffer_object_with_offset():
    raw = bytearray(range(16))
    dl = asdlpack(Iface({"shape": (3,), "typestr": "|u1", "data": raw, "offset": 4, "version": 3}))
    a = np.from_dlpack(dl)
    assert a.tolist() == [4, 5, 6]
    assert a.ctypes.data == np.frombuffer(raw, np.uint8).ctypes.data + 4
    with pytest.raises(BufferError):
        raw.append(0)     # the buffer is held while the view lives


def test_data_none_means_own_buffer():
    class Own(bytearray):
        @property
        def __array_interface__(self):
            return {"shape": (2, 2), "typestr": "<u2", "data": None, "version": 3}

    obj = Own(b"\x01\x00\x02\x00\x03\x00\x04\x00")
    a = np.from_dlpack(asdlpack(obj))
    assert a.tolist() == [[1, 2], [3, 4]] and a.flags.writeable
    assert a.ctypes.data == np.frombuffer(obj, np.uint8).ctypes.data


def test_data_bytes_is_readonly_pillow():
    xp = lib("array_api_strict")
    image = lib("PIL.Image")
    im = image.frombytes("RGB", (4, 3), bytes(range(36)))
    dl = asdlpack(im)
    assert dl.shape == (3, 4, 3) and dl.readonly and dl.dtype == "uint8"
    x = xp.from_dlpack(dl)
    assert x._array.ravel().tolist() == list(range(36))
    assert x._array.ctypes.data == dl.data_ptr


def test_buffer_too_small_rejected():
    ai = {"shape": (10,), "typestr": "<f4", "data": bytearray(8), "version": 3}
    with pytest.raises(BufferError, match="outside"):
        asdlpack(Iface(ai))


@pytest.mark.parametrize(("change", "match"), [
    ({"typestr": ">f4"}, "non-native byte order"),
    ({"typestr": "<M8[s]"}, "typestr"),
    ({"typestr": "|O8"}, "object"),
    ({"typestr": "<U3"}, "unicode"),
    ({"typestr": "|S3"}, "string"),
    ({"typestr": "<f16"}, "long double"),
    ({"typestr": "|V12"}, "structured"),
    ({"typestr": 42}, "typestr"),
    ({"shape": "abc"}, "shape"),
    ({"shape": (2, -3)}, "negative"),
    ({"shape": (2**40, 2**40)}, "more elements"),
    ({"shape": (1.5,)}, "shape"),
    ({"strides": (6,)}, "not a multiple"),
    ({"strides": (4, 4)}, "strides"),
    ({"mask": object()}, "mask"),
    ({"version": 2}, "version"),
    ({"data": (0, False)}, "NULL"),
    ({"data": ("x", False)}, "address"),
    ({"data": (1, 2, 3)}, "data"),
    ({"data": 7}, "data"),
])
def test_hostile_array_interface(change, match):
    a = np.arange(3, dtype=np.float32)
    with pytest.raises(BufferError, match=match) as info:
        asdlpack(iface_of(a, **change))
    assert "__array_interface__" in str(info.value)


def test_array_interface_not_a_dict():
    with pytest.raises(BufferError, match="not a dict"):
        asdlpack(Iface([1, 2]))


def test_array_interface_property_raising():
    class Broken:
        @property
        def __array_interface__(self):
            raise RuntimeError("boom")

    with pytest.raises(BufferError, match="__array_interface__: RuntimeError: boom"):
        asdlpack(Broken())


def test_structured_array_and_field_rejected():
    s = np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")])
    with pytest.raises(BufferError, match="refused"):
        asdlpack(s)
    field = s["b"]           # strides 12 bytes for 8-byte items
    with pytest.raises(BufferError, match="not a multiple"):
        asdlpack(iface_of(field))


def test_a_refused_stride_names_the_strides_as_given():
    """The refusal quotes the provider's byte strides, not ones already divided by the item
    size (spec §3.2: errors name the field and its value)."""
    a = np.zeros(16, np.float32)
    view = iface_of(a, shape=(2, 3), strides=(12, 3))
    with pytest.raises(BufferError, match=r"'strides' = \(12, 3\) bytes: 3 is not a multiple"):
        asdlpack(view)


def test_big_endian_numpy_rejected_everywhere():
    a = np.arange(3, dtype=">i4")
    with pytest.raises(BufferError) as info:
        asdlpack(a)
    assert "byte order" in str(info.value)
    with pytest.raises(BufferError, match=r"NOTSWAPPED|byte order"):
        asdlpack(Struct(a))


def test_numpy_memmap(tmp_path):
    path = tmp_path / "m.bin"
    m = np.memmap(path, dtype=np.float32, mode="w+", shape=(8,))
    m[:] = np.arange(8)
    dl = asdlpack(m)
    b = np.from_dlpack(dl)
    assert b.ctypes.data == m.ctypes.data and b.tolist() == list(range(8))


def test_ml_dtypes_via_array_interface():
    ml = lib("ml_dtypes")
    torch = lib("torch")
    for name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        a = np.arange(6).astype(getattr(ml, name))
        dl = asdlpack(a)         # NumPy's own __dlpack__ refuses these; the interface does not
        assert dl.dtype.name == name
        t = torch.from_dlpack(dl)
        assert t.dtype == getattr(torch, name)
        assert t.data_ptr() == a.ctypes.data
        assert t.float().tolist() == list(range(6))


def test_ml_subbyte_padded():
    ml = lib("ml_dtypes")
    a = np.arange(4).astype(ml.int4)
    dl = asdlpack(a)
    assert dl.dtype.bits == 4 and dl.itemsize == 1
    assert dl.flags & 4   # IS_SUBBYTE_TYPE_PADDED
