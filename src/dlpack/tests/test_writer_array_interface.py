"""Writer: __array_interface__ out (spec §5), zero-copy into NumPy and Pillow, and
ml_dtypes views of opaque items."""

import ctypes
import gc
import subprocess
import sys

import pytest

from dlpack import asdlpack, from_address
from dlpack.tests.helpers import CAI, Iface, cuda_floats, lib

np = lib("numpy")


def test_array_interface_out():
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    ai = asdlpack(a).__array_interface__
    assert ai["shape"] == (2, 3) and ai["typestr"] == "<f8" and ai["strides"] is None
    assert ai["data"] == (a.ctypes.data, False) and ai["version"] == 3
    assert asdlpack(b"abc").__array_interface__["data"][1] is True
    ai = asdlpack(a.T).__array_interface__
    assert ai["strides"] == (8, 24)
    assert not hasattr(asdlpack(a), "__cuda_array_interface__")


def test_numpy_asarray_zero_copy_and_readonly():
    torch = lib("torch")
    t = torch.arange(5, dtype=torch.int32)
    n = np.asarray(asdlpack(t))
    assert n.ctypes.data == t.data_ptr() and n.flags.writeable
    r = np.asarray(asdlpack(b"hello"))
    assert not r.flags.writeable and bytes(r) == b"hello"


def test_bfloat16_array_interface_view():
    ml = lib("ml_dtypes")
    torch = lib("torch")
    t = torch.arange(4, dtype=torch.bfloat16)
    dl = asdlpack(t)
    ai = dl.__array_interface__
    assert ai["typestr"] == "|V2" and ai["descr"] == [("bfloat16", "|V2")]
    raw = np.asarray(dl)
    assert raw.ctypes.data == t.data_ptr()
    assert raw.view(ml.bfloat16).astype(float).ravel().tolist() == [0, 1, 2, 3]
    # descr's name is for people: only a real ml_dtypes dtype makes the item bfloat16 (§3.7)
    with pytest.raises(BufferError, match=r"'bfloat16'.*a\.view\(ml_dtypes\.bfloat16\)"):
        asdlpack(Iface(ai, t))
    with pytest.raises(BufferError, match="view"):
        asdlpack(raw)                       # a structured array with one field named bfloat16
    again = asdlpack(raw.view(ml.bfloat16))
    assert again.dtype.name == "bfloat16" and again.data_ptr == t.data_ptr()


def test_pillow_fromarray():
    image = lib("PIL.Image")
    torch = lib("torch")
    t = torch.arange(2 * 3 * 3, dtype=torch.uint8).reshape(2, 3, 3)
    im = image.fromarray(asdlpack(t))
    assert im.size == (3, 2) and im.mode == "RGB"
    assert im.tobytes() == bytes(range(18))


def test_array_method_zero_copy_readonly_and_copy_keyword():
    """``__array__(dtype=None, copy=None)`` (spec §5): the zero-copy ndarray, read-only when
    the source is; NumPy 2's ``copy``: False where a copy is needed raises ValueError."""
    torch = lib("torch")
    t = torch.arange(6, dtype=torch.float32)
    dl = asdlpack(t)
    a = dl.__array__()
    assert a.dtype == np.float32 and a.ctypes.data == t.data_ptr() and a.flags.writeable
    assert dl.__array__(copy=False).ctypes.data == t.data_ptr()
    assert dl.__array__(np.float32, copy=False).ctypes.data == t.data_ptr()
    copied = dl.__array__(copy=True)
    assert copied.ctypes.data != t.data_ptr() and copied.tolist() == list(range(6))
    assert dl.__array__(np.float64).tolist() == list(range(6))
    with pytest.raises(ValueError, match=r"float64, copy=False.*needs a copy"):
        dl.__array__(np.float64, copy=False)
    ro = asdlpack(b"hello").__array__()
    assert not ro.flags.writeable and bytes(ro) == b"hello"
    kept = asdlpack(bytearray(b"xyz")).__array__()     # the view and its provider live on
    gc.collect()
    assert bytes(kept) == b"xyz"
    raw = bytearray(1)
    int4 = from_address(ctypes.addressof(ctypes.c_char.from_buffer(raw)), (2,), "int4",
                        owner=raw)
    with pytest.raises(BufferError, match="__array__"):      # no typestr for a sub-byte type
        int4.__array__()


def test_array_method_reads_copy_as_numpy_does():
    """``copy`` of other types as NumPy reads it (spec §5): its truth value (``np.False_`` and 0
    never copy, so another dtype raises), a string refused with ValueError."""
    a = np.arange(6, dtype=np.float32)
    dl = asdlpack(a)
    for never in (np.False_, 0):
        assert dl.__array__(copy=never).ctypes.data == a.ctypes.data
        with pytest.raises(ValueError, match="needs a copy"):
            dl.__array__(np.float64, copy=never)
    assert dl.__array__(copy=np.True_).ctypes.data != a.ctypes.data
    with pytest.raises(ValueError, match="copy = 'yes' is a string"):
        dl.__array__(copy="yes")


def test_array_method_reads_numpys_copy_modes_as_numpy_array_does():
    """numpy._CopyMode (spec §5): ALWAYS copies, NEVER never does, IF_NEEDED is None (its
    truth value raises ValueError, which __array__ must not pass on)."""
    modes = getattr(np, "_CopyMode", None)
    if modes is None:
        pytest.skip("this NumPy has no _CopyMode")
    a = np.arange(6, dtype=np.float32)
    dl = asdlpack(a)
    assert dl.__array__(copy=modes.IF_NEEDED).ctypes.data == a.ctypes.data
    assert dl.__array__(np.float64, copy=modes.IF_NEEDED).tolist() == a.tolist()
    assert dl.__array__(copy=modes.NEVER).ctypes.data == a.ctypes.data
    with pytest.raises(ValueError, match="needs a copy"):
        dl.__array__(np.float64, copy=modes.NEVER)
    assert dl.__array__(copy=modes.ALWAYS).ctypes.data != a.ctypes.data


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_array_method_gives_ml_types_as_ml_dtypes(name):
    """With ml_dtypes importable, __array__ of bfloat16/float8 data is that ml_dtypes dtype,
    zero-copy (as the matrix reads them), so its dtype is no cast and others cast (spec §5)."""
    ml = lib("ml_dtypes")
    t = getattr(ml, name)
    a = np.arange(4).astype(t)
    dl = asdlpack(a)
    got = dl.__array__()
    assert got.dtype == np.dtype(t) and got.ctypes.data == a.ctypes.data
    assert dl.__array__(dtype=t).ctypes.data == a.ctypes.data
    assert dl.__array__(dtype=np.float32).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_array_method_feeds_pandas_zero_copy():
    """pandas asks ``len`` and ``__array__`` (else it iterates into float64 objects): a float32
    tensor stays float32 at the same address, read-only memory stays read-only."""
    pd = lib("pandas")
    torch = lib("torch")
    t = torch.arange(6, dtype=torch.float32)
    s = pd.Series(asdlpack(t))
    assert s.dtype == np.float32 and s.to_numpy().ctypes.data == t.data_ptr()
    assert pd.DataFrame({"x": asdlpack(t)})["x"].dtype == np.float32
    ro = np.arange(4.0)
    ro.flags.writeable = False
    col = pd.Series(asdlpack(ro)).to_numpy()
    assert col.ctypes.data == ro.ctypes.data and not col.flags.writeable
    assert len(asdlpack(t)) == 6 and bool(asdlpack(t[:0]))
    with pytest.raises(TypeError, match="0-d"):
        len(asdlpack(np.float64(1.0)))


def test_array_method_of_device_data_copies_unless_forbidden(fake):
    """CUDA data has no zero-copy ndarray: ``copy=False`` raises ValueError naming the device;
    otherwise a host copy (spec §10)."""
    ptr = cuda_floats(fake)
    dl = asdlpack(CAI(ptr, stream=7, shape=(6,)))
    with pytest.raises(ValueError, match=r"copy=False.*kDLCUDA:1.*host memory"):
        dl.__array__(copy=False)
    host = dl.__array__()
    assert host.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] and host.ctypes.data != ptr


def test_array_method_imports_numpy_only_when_called():
    """NumPy stays optional: nothing imports it until ``__array__`` is called."""
    code = ("import sys, dlpack\n"
            "dl = dlpack.asdlpack(bytearray(b'abc'))\n"
            "assert len(dl) == 3 and 'numpy' not in sys.modules\n"
            "assert dl.__array__().tobytes() == b'abc' and 'numpy' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
