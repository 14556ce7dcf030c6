"""Reader, a fast path: an exact numpy.ndarray read from its C struct (spec §3.2) gives what
NumPy's own __dlpack__ gives, and anything unusual takes the protocol order."""

import pytest

from dlpack import asdlpack
from dlpack.tests.helpers import lib

np = lib("numpy")


def test_unaligned_numpy_array_falls_back_to_dlpack():
    raw = np.zeros(33, dtype=np.uint8)
    a = raw[1:].view(np.float64)          # NumPy marks it unaligned
    assert not a.flags.aligned
    dl = asdlpack(a)
    assert dl.data_ptr == a.ctypes.data and dl.dtype == "float64"


@pytest.mark.parametrize("dtype", ["?", "i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "l",
                                   "L", "e", "f4", "f8", "c8", "c16"])
def test_ndarray_fast_path_matches_numpys_own_dlpack(dtype):
    from dlpack import _core, todict

    base = np.arange(24).astype(dtype).reshape(4, 6)
    for a in (base, base[::2, ::-3], base.T, base[1:2], base[0, 0, ...]):
        mine = todict(asdlpack(a))
        theirs = todict(a.__dlpack__(max_version=(1, 0)))
        for key in ("data", "device", "ndim", "dtype", "shape"):
            assert mine[key] == theirs[key], key
        if a.size > 1:           # NumPy < 2.3 exports NULL strides (C-contiguous) when it can
            assert mine["strides"] == (theirs["strides"] or _c_strides(a.shape))
    assert _core._ndarray_fast_path()     # the struct layout matched this NumPy


def _c_strides(shape):
    """C-contiguous element strides of shape, as DLPack's NULL strides mean."""
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))
