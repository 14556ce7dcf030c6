"""Consumer side: __array_interface__ out (spec §5), zero-copy into NumPy and Pillow, and
ml_dtypes views of opaque items."""


import pytest

from dlpack import asdlpack
from dlpack.tests.helpers import Iface, lib

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
