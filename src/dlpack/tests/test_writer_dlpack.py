"""DLPackObject.__dlpack__ (spec §4) and lifetime (§6): versions, flags, copy, device, leaks."""

import gc
import weakref

import pytest

from dlpack import FLAG_BITMASK_IS_COPIED, FLAG_BITMASK_READ_ONLY, asdlpack, todict
from dlpack.tests.helpers import lib, rss_kib, run_clean

np = lib("numpy")


def test_versioned_and_legacy_capsules():
    dl = asdlpack(bytearray(b"abcd"))
    v = dl.__dlpack__(max_version=(1, 2))
    assert "dltensor_versioned" in repr(v)
    info = todict(v)
    assert info["version"] == (1, 3) and info["flags"] == 0 and info["byte_offset"] == 0
    assert info["data"] == dl.data_ptr and info["shape"] == (4,) and info["strides"] == (1,)
    for mv in (None, (0, 8)):
        assert '"dltensor"' in repr(dl.__dlpack__(max_version=mv))


def test_bad_max_version():
    with pytest.raises(TypeError, match="max_version"):
        asdlpack(bytearray(1)).__dlpack__(max_version=3)


def test_dlpack_takes_the_array_api_keywords_and_nothing_else():
    """__dlpack__ is a fast-call method: keywords matched by identity, then by value."""
    import inspect

    dl = asdlpack(bytearray(b"abcd"))
    assert str(inspect.signature(type(dl).__dlpack__)) == (
        "(self, /, *, stream=None, max_version=None, dl_device=None, copy=None)")
    assert "DLPack capsule" in type(dl).__dlpack__.__doc__
    built = {"".join(["max_", "version"]): (1, 0), "".join(["co", "py"]): None,
             "".join(["dl_", "device"]): (1, 0), "".join(["str", "eam"]): None}
    assert '"dltensor_versioned"' in repr(dl.__dlpack__(**built))      # not interned: by value
    assert '"dltensor_versioned"' in repr(dl.__dlpack__(max_version=(2**80, 0)))
    with pytest.raises(TypeError, match="no positional arguments"):
        dl.__dlpack__(None)
    with pytest.raises(TypeError, match="unexpected keyword argument 'maxversion'"):
        dl.__dlpack__(maxversion=(1, 0))
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        dl.__dlpack__(**{"max_version\0": (1, 0)})
    with pytest.raises(TypeError, match="doesn't apply"):
        type(dl).__dlpack__(bytearray(1))


def test_readonly_travels_and_legacy_consumers_get_a_copy():
    tf = lib("tensorflow")
    b = b"abc"
    dl = asdlpack(b)
    assert todict(dl.__dlpack__(max_version=(1, 0)))["flags"] & FLAG_BITMASK_READ_ONLY
    with pytest.raises(BufferError, match="allow_legacy_readonly"):
        dl.__dlpack__(copy=False)
    t = tf.experimental.dlpack.from_dlpack(dl.__dlpack__())
    assert bytes(t.numpy()) == b
    assert todict(tf.experimental.dlpack.to_dlpack(t))["data"] != dl.data_ptr


def test_copy_true_is_a_real_copy_of_strided_data():
    a = np.arange(24, dtype=np.int32).reshape(4, 6)[::2, ::-2]
    dl = asdlpack(a)
    capsule = dl.__dlpack__(max_version=(1, 0), copy=True)
    info = todict(capsule)
    assert info["flags"] & FLAG_BITMASK_IS_COPIED
    assert info["data"] != a.ctypes.data and info["strides"] == (3, 1)
    b = np.from_dlpack(capsule_holder(capsule))
    np.testing.assert_array_equal(b, a)
    b[0, 0] = -1
    assert a[0, 0] != -1


def capsule_holder(capsule):
    class Holder:
        def __dlpack__(self, **kwargs):
            return capsule

        def __dlpack_device__(self):
            return (1, 0)

    return Holder()


def test_copy_via_consumer_and_readonly_copy_is_writable():
    torch = lib("torch")
    b = b"xyz"
    a = np.from_dlpack(asdlpack(b), copy=True)
    assert a.flags.writeable and a.ctypes.data != asdlpack(b).data_ptr
    assert asdlpack(b).__dlpack__(copy=True) is not None   # a copy may go to legacy consumers
    src = np.arange(3.0)
    t = torch.from_dlpack(asdlpack(src), copy=False)
    assert t.tolist() == [0, 1, 2] and t.data_ptr() == src.ctypes.data


def test_copy_false_and_dl_device():
    dl = asdlpack(bytearray(4))
    assert dl.__dlpack__(copy=False, dl_device=(1, 0)) is not None
    with pytest.raises(BufferError, match="cannot move"):
        dl.__dlpack__(dl_device=(10, 0))
    with pytest.raises(BufferError, match="copy=False"):
        dl.__dlpack__(dl_device=(2, 0), copy=False)
    with pytest.raises(TypeError, match="dl_device"):
        dl.__dlpack__(dl_device="cpu")


def _spellings(np, value):
    """copy=value as a consumer may spell it: the bool, NumPy's bool_, the int."""
    return [value, np.bool_(value), int(value)]


def test_copy_is_parsed_once_whatever_its_spelling():
    """§4: False, numpy.False_ and 0 refuse alike (a move to a GPU too, before any driver
    call); True, numpy.True_ and 1 copy; anything else is a TypeError naming it."""
    np = lib("numpy")
    for never in _spellings(np, False):
        with pytest.raises(BufferError, match="but copy=False"):
            asdlpack(bytearray(4)).__dlpack__(dl_device=(2, 0), copy=never)
        with pytest.raises(BufferError, match="with copy=False"):
            asdlpack(b"abcd").__dlpack__(copy=never)          # legacy + read-only
        info = todict(asdlpack(bytearray(4)).__dlpack__(max_version=(1, 0), copy=never))
        assert not info["flags"] & FLAG_BITMASK_IS_COPIED
    for always in _spellings(np, True):
        info = todict(asdlpack(bytearray(4)).__dlpack__(max_version=(1, 0), copy=always))
        assert info["flags"] & FLAG_BITMASK_IS_COPIED
    for bad in (2, -1, 1.0, "yes", np.int64(1), [True]):
        with pytest.raises(TypeError, match="copy = "):
            asdlpack(bytearray(4)).__dlpack__(copy=bad)


def test_stream_must_be_none_on_cpu():
    with pytest.raises(BufferError, match="stream"):
        asdlpack(bytearray(4)).__dlpack__(stream=1)


def test_unconsumed_capsules_free_and_release_the_object():
    ba = bytearray(8)
    dl = asdlpack(ba)
    alive = weakref.ref(dl)
    capsules = [dl.__dlpack__(max_version=(1, 0)) for _ in range(3)]
    del dl
    gc.collect()
    assert alive() is not None          # the capsules hold it
    with pytest.raises(BufferError):
        ba.append(0)                    # …and so its buffer stays exported
    del capsules
    gc.collect()
    assert alive() is None
    ba.append(0)


def test_consumed_many_times_by_different_libraries():
    torch = lib("torch")
    xp = lib("array_api_strict")
    a = np.arange(8, dtype=np.float32)
    dl = asdlpack(a)
    outs = [np.from_dlpack(dl), torch.from_dlpack(dl), xp.from_dlpack(dl), memoryview(dl)]
    del a, dl
    gc.collect()
    assert outs[1].data_ptr() == outs[0].ctypes.data
    assert outs[3].tolist() == list(range(8))


def test_repr_and_attributes():
    dl = asdlpack(np.zeros((2, 3), dtype=np.float32)[:, ::2])
    text = repr(dl)
    assert "shape=(2, 2)" in text and "float32" in text and "kDLCPU:0" in text
    assert "readonly" in repr(asdlpack(b"a"))
    assert (dl.ndim, dl.size, dl.itemsize, dl.nbytes) == (2, 4, 4, 16)
    assert dl.strides == (3, 2) and not dl.c_contiguous
    assert dl.dtype.code == 2 and dl.dtype.bits == 32 and dl.dtype.lanes == 1
    with pytest.raises(AttributeError):
        dl.shape = (1,)


def test_no_growth_over_many_exchanges(no_leak):
    torch = lib("torch")
    b = b"x" * 4096
    a = np.arange(16.0)
    for _ in range(30_000):
        np.from_dlpack(asdlpack(b))
        torch.from_dlpack(asdlpack(a))
        asdlpack(a).__dlpack__(max_version=(1, 0))       # never consumed
        memoryview(asdlpack(bytearray(16)))
    before = rss_kib()
    for _ in range(70_000):
        np.from_dlpack(asdlpack(b))
        torch.from_dlpack(asdlpack(a))
        asdlpack(a).__dlpack__(max_version=(1, 0))
        memoryview(asdlpack(bytearray(16)))
    gc.collect()
    assert rss_kib() - before < 4096


def test_capsule_alive_at_interpreter_shutdown():
    code = ("from dlpack import asdlpack\nimport numpy as np\n"
            "keep = asdlpack(np.arange(3.0)).__dlpack__(max_version=(1, 0))\n"
            "import builtins\nbuiltins.cycle = [keep]\nbuiltins.cycle.append(builtins.cycle)\n"
            "a = np.from_dlpack(asdlpack(b'abc'))\n")
    run_clean(code)


def test_copy_of_strided_tensor_beyond_64_dimensions():
    import ctypes

    import dlpack.ctypes as dlc

    ndim = 66
    data = (ctypes.c_float * 4)(0, 1, 2, 3)
    shape = (ctypes.c_int64 * ndim)(*([1] * 64 + [2, 2]))
    strides = (ctypes.c_int64 * ndim)(*([1] * 64 + [1, 2]))      # last two dims transposed
    m = dlc.DLManagedTensorVersioned()
    m.version.major = 1
    m.dl_tensor.data = ctypes.addressof(data)
    m.dl_tensor.device = dlc.DLDevice(1, 0)
    m.dl_tensor.ndim = ndim
    m.dl_tensor.dtype = dlc.DLDataType(2, 32, 1)
    m.dl_tensor.shape = shape
    m.dl_tensor.strides = strides
    dl = asdlpack(ctypes.pointer(m))
    capsule = dl.__dlpack__(max_version=(1, 0), copy=True)     # owns the copy: keep it
    info = todict(capsule)
    assert info["strides"][-2:] == (2, 1) and info["data"] != ctypes.addressof(data)
    copied = (ctypes.c_float * 4).from_address(info["data"])
    assert list(copied) == [0, 2, 1, 3]


def test_copies_start_on_256_byte_boundaries():
    """Buffers pydlpack allocates are 256-byte aligned; TensorFlow's kernels abort on data that
    is not 64-byte aligned, and a private copy for a legacy consumer used to be 16-aligned."""
    for n in range(1, 40):
        dl = asdlpack(bytes(n))
        for capsule in (dl.__dlpack__(), dl.__dlpack__(max_version=(1, 0), copy=True)):
            assert todict(capsule)["data"] % 256 == 0
    lib("tensorflow")
    run_clean("import tensorflow as tf\n"
              "from dlpack import asdlpack\n"
              "for n in range(1, 40):\n"
              "    t = tf.experimental.dlpack.from_dlpack(asdlpack(bytes(range(n))).__dlpack__())\n"
              "    assert bool(tf.reduce_all(t == tf.constant(list(range(n)), tf.uint8)))\n")
