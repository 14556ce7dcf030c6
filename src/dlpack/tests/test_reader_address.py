"""dlpack.from_address (spec §2): memory described by address, shape and dtype, e.g. a C buffer.

Values, zero-copy, read-only-ness through real consumers, and the owner's lifetime; its
refusals are in the hostile corpus (group "address").
"""

import ctypes
import gc
import weakref

import pytest

from dlpack import (
    FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
    FLAG_BITMASK_READ_ONLY,
    DLDataTypeCode,
    DType,
    asdlpack,
    from_address,
    todict,
)
from dlpack.tests.helpers import lib


class Owner:
    """A C buffer's owner, as a binding would have one: frees the memory when it dies."""

    def __init__(self, ctype, values):
        self.buf = (ctype * len(values))(*values)
        self.address = ctypes.addressof(self.buf)


def test_readme_example():
    np = lib("numpy")
    buf = (ctypes.c_float * 6)(*range(6))
    dl = from_address(ctypes.addressof(buf), (2, 3), "float32", owner=buf)
    a = np.from_dlpack(dl)
    assert a.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert a.ctypes.data == ctypes.addressof(buf) and a.flags.writeable
    a[1, 2] = 50
    assert buf[5] == 50


def test_values_zero_copy_and_strides():
    np = lib("numpy")
    o = Owner(ctypes.c_int32, range(12))
    dl = from_address(o.address, (3, 2), "int32", owner=o, strides=(4, 2))
    assert dl.shape == (3, 2) and dl.strides == (4, 2) and dl.base is o
    a = np.from_dlpack(dl)
    assert a.tolist() == [[0, 2], [4, 6], [8, 10]]
    assert a.ctypes.data == o.address
    rev = np.from_dlpack(from_address(o.address + 11 * 4, (12,), "int32", owner=o,
                                      strides=(-1,)))
    assert rev.tolist() == list(range(11, -1, -1))


def test_dtype_spellings():
    np = lib("numpy")
    o = Owner(ctypes.c_uint8, range(16))
    for spelling in ("float32", DType(DLDataTypeCode.kDLFloat, 32), np.float32,
                     np.dtype("float32")):
        assert from_address(o.address, (4,), spelling, owner=o).dtype == "float32"
    vec = from_address(o.address, (2,), "float32x2", owner=o)
    assert (vec.dtype.lanes, vec.nbytes) == (2, 16)
    packed = from_address(o.address, (32,), "int4", owner=o)
    assert packed.nbytes == 16 and not packed.flags & FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED


def test_ml_dtypes():
    np = lib("numpy")
    ml_dtypes = lib("ml_dtypes")
    x = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
    dl = from_address(x.ctypes.data, x.shape, x.dtype, owner=x)
    assert dl.dtype == "bfloat16"
    assert np.asarray(dl).view(ml_dtypes.bfloat16).tolist() == [1.5, -2.0]
    i4 = np.array([1, -2, 3], dtype=ml_dtypes.int4)          # one element a byte
    dl = from_address(i4.ctypes.data, i4.shape, i4.dtype, owner=i4)
    assert dl.flags & FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED and dl.nbytes == 3


def test_readonly_through_memoryview_numpy_and_torch():
    np = lib("numpy")
    o = Owner(ctypes.c_double, [1.0, 2.0, 3.0])
    dl = from_address(o.address, (3,), "float64", owner=o, readonly=True)
    m = memoryview(dl)
    assert m.readonly and m.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(TypeError):
        m[0] = 5.0
    a = np.from_dlpack(dl)
    assert not a.flags.writeable and a.ctypes.data == o.address
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 5.0
    assert not np.asarray(dl).flags.writeable
    # Versioned consumers see READ_ONLY; legacy ones get a private copy.
    assert todict(dl.__dlpack__(max_version=(1, 0)))["flags"] & FLAG_BITMASK_READ_ONLY
    assert todict(dl.__dlpack__())["data"] != o.address
    with pytest.raises(BufferError, match="read-only"):
        dl.__dlpack__(copy=False)
    torch = lib("torch")
    t = torch.from_dlpack(dl)      # torch has no read-only tensors: the flag travels, it shares
    assert t.tolist() == [1.0, 2.0, 3.0] and t.data_ptr() == o.address
    assert o.buf[0] == 1.0


def test_a_consumer_uses_the_data():
    jnp = lib("jax.numpy")
    o = Owner(ctypes.c_float, [1.0, 2.0, 3.0, 4.0])
    x = jnp.from_dlpack(asdlpack(from_address(o.address, (2, 2), "float32", owner=o)))
    assert float((x @ x).sum()) == 54.0


def test_owner_lives_as_long_as_any_view():
    np = lib("numpy")
    o = Owner(ctypes.c_int16, [7, 8, 9])
    alive = weakref.ref(o)
    dl = from_address(o.address, (3,), "int16", owner=o)
    del o
    gc.collect()
    assert alive() is not None
    a = np.from_dlpack(dl)
    capsule = dl.__dlpack__(max_version=(1, 0))
    del dl
    gc.collect()
    assert alive() is not None and a.tolist() == [7, 8, 9]
    del a
    gc.collect()
    assert alive() is not None            # the unconsumed capsule still holds the view
    del capsule
    gc.collect()
    assert alive() is None


def test_zero_size_null():
    dl = from_address(None, (0, 3), "float32", owner=None)
    assert dl.size == 0 and dl.data_ptr == 0 and dl.strides == (3, 1)
    assert bytes(memoryview(dl)) == b""


def test_cuda_device_asks_the_driver():
    """A CUDA address is checked by the driver: without one, a CudaError (a BufferError)."""
    with pytest.raises(BufferError):
        from_address(1 << 20, (4,), "float32", owner=None, device=(2, 0))


def _liar_class(claims):
    """A str subclass equal to everything and hashing as ``claims`` does."""

    class Liar(str):
        def __hash__(self):
            return hash(claims)

        def __eq__(self, other):
            return True

    return Liar


def test_a_lying_str_subclass_names_its_own_characters_and_poisons_no_cache():
    """§7: dtype names are looked up as exact str; caches keep no user class alive."""
    buf = (ctypes.c_char * 256)()
    liar = _liar_class("int8")
    gone = weakref.ref(liar)
    dl = from_address(ctypes.addressof(buf), (4,), liar("float32x4"), owner=buf)
    assert (dl.dtype.name, dl.nbytes) == ("float32x4", 64)
    del dl, liar
    gc.collect()
    assert gone() is None
    dl = from_address(ctypes.addressof(buf), (4,), "int8", owner=buf)
    assert (dl.dtype.name, dl.nbytes) == ("int8", 4)


def test_a_dtype_with_lying_fields_is_read_as_ints():
    class Lying(int):
        def __lt__(self, other):
            return True

        def __ge__(self, other):
            return True

    buf = (ctypes.c_char * 64)()
    d = DType(2, 32)
    object.__setattr__(d, "bits", Lying(4096))
    with pytest.raises(BufferError, match="bits below 256"):
        from_address(ctypes.addressof(buf), (1,), d, owner=buf)
    object.__setattr__(d, "bits", "32")
    with pytest.raises(TypeError, match="not an int"):
        from_address(ctypes.addressof(buf), (1,), d, owner=buf)


@pytest.mark.parametrize("dtype", ["tuple", "raising"])
def test_a_dtype_numpy_cannot_make_is_a_type_error(dtype):
    """§2: what NumPy's dtype() raises (ValueError here) comes back as TypeError."""
    np = lib("numpy")

    class Raising:
        @property
        def dtype(self):
            raise RuntimeError("no dtype today")

    value = (np.int32, -1) if dtype == "tuple" else Raising()
    buf = (ctypes.c_char * 64)()
    with pytest.raises(TypeError, match="from_address: dtype") as e:
        from_address(ctypes.addressof(buf), (1,), value, owner=buf)
    # NumPy 2.2 reports a raising .dtype as its own TypeError ("not a type name" here); newer
    # NumPy passes the error on, which the message then names
    assert ("ValueError" in str(e.value) if dtype == "tuple" else
            "no dtype today" in str(e.value) or "is not a type name" in str(e.value))


@pytest.mark.parametrize("shape, strides, words", [
    ((600,), None, ["2376 bytes past the end", "bytearray, 24 bytes"]),
    ((3,), (8,), ["44 bytes past the end", "strides are in elements, not bytes"]),
    ((2,), (-1,), ["4 bytes before the start"]),
])
def test_the_span_must_fit_in_what_the_owner_exposes(shape, strides, words):
    """§2: an owner with the buffer protocol bounds a view that starts in its memory."""
    buf = bytearray(24)
    address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    with pytest.raises(BufferError, match="from_address: the array") as e:
        from_address(address, shape, "float32", owner=buf, strides=strides)
    for word in words:
        assert word in str(e.value), str(e.value)


def test_views_inside_the_owner_are_accepted_and_other_owners_unchecked():
    np = lib("numpy")
    x = np.arange(10.0)[::-2]                   # a strided owner: its memory runs backwards
    dl = from_address(x.ctypes.data, (5,), "float64", strides=(-2,), owner=x)
    assert np.from_dlpack(dl).tolist() == [9.0, 7.0, 5.0, 3.0, 1.0]
    with pytest.raises(BufferError, match="16 bytes before the start"):
        from_address(x.ctypes.data, (6,), "float64", strides=(-2,), owner=x)
    buf = (ctypes.c_float * 6)()
    assert from_address(ctypes.addressof(buf) + 8, (2, 2), "float32", owner=buf).nbytes == 16
    assert from_address(ctypes.addressof(buf), (0, 600), "float32", owner=buf).size == 0
    # an owner that exposes no memory (or other memory): the address is the caller's promise
    other = bytearray(4)
    assert from_address(ctypes.addressof(buf), (6,), "float32", owner=(buf, other)).size == 6
    assert from_address(ctypes.addressof(buf), (6,), "float32", owner=other).size == 6


def test_device_is_read_by_the_one_pair_reader_of_dl_device():
    """§2, §4: device, like __dlpack__'s dl_device, is a tuple or list read from its own
    storage (a subclass's __iter__ does not run); other iterables are a TypeError."""
    lying = type("LyingTuple", (tuple,), {"__iter__": lambda self: iter((2, 0)),
                                          "__len__": lambda self: 2})
    buf = (ctypes.c_float * 2)()
    dl = from_address(ctypes.addressof(buf), (2,), "float32", owner=buf, device=lying((1, 0)))
    assert dl.device == (1, 0)
    for bad in (iter((1, 0)), (1, 0, 0), (True, 0), "cpu"):
        with pytest.raises(TypeError, match=r"from_address: device = .* tuple or list"):
            from_address(ctypes.addressof(buf), (2,), "float32", owner=buf, device=bad)
    with pytest.raises(TypeError, match=r"__dlpack__: dl_device = .* tuple or list"):
        dl.__dlpack__(dl_device=iter((1, 0)))
    with pytest.raises(BufferError, match="names no device"):
        dl.__dlpack__(dl_device=(1, 2**40))


def test_the_owners_buffer_is_held_while_the_view_lives():
    """§2: an owner exposing the memory the view spans has that export held for the view's
    life, as the buffer reader holds it: a bytearray cannot resize (its memory would move
    under the view), an mmap cannot close (a read would fault); both can once the view dies.
    Memory the owner does not expose holds nothing of it."""
    import mmap

    ba = bytearray(b"abcd" * 25)
    dl = from_address(ctypes.addressof(ctypes.c_char.from_buffer(ba)), (100,), "uint8",
                      owner=ba)
    with pytest.raises(BufferError):
        ba.extend(b"x" * 2**20)
    assert bytes(memoryview(dl)[:4]) == b"abcd"
    del dl
    gc.collect()
    ba.extend(b"x" * 2**20)
    mm = mmap.mmap(-1, 4096)
    mm[:4] = b"wxyz"
    dl = from_address(ctypes.addressof(ctypes.c_char.from_buffer(mm)), (4,), "uint8", owner=mm)
    with pytest.raises(BufferError):
        mm.close()
    assert bytes(memoryview(dl)) == b"wxyz"
    del dl
    gc.collect()
    mm.close()
    buf = (ctypes.c_float * 2)()
    other = bytearray(4)
    dl = from_address(ctypes.addressof(buf), (2,), "float32", owner=other)
    other.extend(b"x" * 64)            # not the view's memory: not held
    assert dl.base is other


def test_read_only_owner_memory_makes_the_view_read_only(tmp_path):
    """§2: memory the owner exposes read-only (bytes, an mmap opened for reading) gives a
    read-only view whatever readonly says: a consumer neither writes into bytes nor faults
    writing to a read-only mapping."""
    import mmap

    np = lib("numpy")
    data = b"immutable!"
    addr = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value
    dl = from_address(addr, (10,), "uint8", owner=data)
    assert dl.readonly and not np.from_dlpack(dl).flags.writeable
    path = tmp_path / "ro"
    path.write_bytes(b"\0" * 4096)
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 4096, access=mmap.ACCESS_READ)
    addr = np.frombuffer(mm, np.uint8).ctypes.data
    view = np.from_dlpack(from_address(addr, (4096,), "uint8", owner=mm))
    assert not view.flags.writeable
    writable = from_address(ctypes.addressof(ctypes.c_char.from_buffer(bytearray(4))), (4,),
                            "uint8", owner=bytearray(4))       # not the owner's memory
    assert not writable.readonly


def test_a_span_reaching_into_the_owner_from_before_it_is_bounded():
    """§2: elements that start before the owner's memory and reach into it must fit in it, as
    those starting inside it must; the span is refused, naming the bytes before the start."""
    ba = bytearray(16)
    base = ctypes.addressof(ctypes.c_char.from_buffer(ba))
    with pytest.raises(BufferError, match="8 bytes before the start"):
        from_address(base, (16,), "uint8", owner=memoryview(ba)[8:16])
