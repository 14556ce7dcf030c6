"""Reader: __array_struct__ (spec §3.3), NumPy's PyArrayInterface in a capsule. The reader's
refusals are the hostile corpus's group ``array_struct``; the layouts it shares with
__array_interface__ are pinned in test_reader_array_interface."""

import ctypes

import pytest

from dlpack import _types, asdlpack
from dlpack.tests.hostile import ALIGNED, NOTSWAPPED, WRITEABLE, array_struct


@pytest.mark.parametrize("kind", "biufcVOSUmMxz")
def test_typekinds_and_widths_are_the_typestr_table(kind):
    """The struct reader's C table is made from _types' one table of kinds and widths: every
    item size of every typekind reads as the typestr '|<kind><size>' does, or is refused."""
    for size in range(1, 33):
        try:
            code, bits, _ = _types.parse_typestr("__array_struct__", f"|{kind}{size}", None)
        except BufferError:
            with pytest.raises(BufferError):
                asdlpack(array_struct(typekind=kind.encode(), itemsize=size, strides=(size,)))
            continue
        dl = asdlpack(array_struct(typekind=kind.encode(), itemsize=size, strides=(size,)))
        assert (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) == (code, bits, 1), (kind, size)


def test_flags_are_numpys():
    """NOTSWAPPED, ALIGNED and WRITEABLE are NumPy's array flags (one enum with ndarray's)."""
    assert asdlpack(array_struct()).readonly is False
    assert asdlpack(array_struct(flags=ALIGNED | NOTSWAPPED)).readonly is True
    with pytest.raises(BufferError, match="NOTSWAPPED"):
        asdlpack(array_struct(flags=ALIGNED | WRITEABLE))
    with pytest.raises(BufferError, match="ALIGNED"):
        asdlpack(array_struct(flags=NOTSWAPPED | WRITEABLE))


F_CONTIGUOUS = 0x2                  # NPY_ARRAY_F_CONTIGUOUS


@pytest.mark.parametrize("order", ["C", "F", "CF"])
def test_no_strides_is_read_as_numpy_reads_it(order):
    """A struct without strides is C-contiguous, or Fortran-contiguous when its flags say
    F_CONTIGUOUS and not C_CONTIGUOUS: NumPy, the protocol's reference, reads it so (found by
    fuzz/fuzz_array_struct.py)."""
    np = pytest.importorskip("numpy")
    flags = ALIGNED | NOTSWAPPED | WRITEABLE | {"C": 0x1, "F": F_CONTIGUOUS, "CF": 0x3}[order]
    provider = array_struct(nd=3, typekind=b"u", itemsize=1, shape=(2, 3, 4), strides=None,
                            flags=flags)
    ctypes.memmove(provider.s.data, bytes(range(24)), 24)
    expected = np.asarray(provider)
    dl = asdlpack(provider)
    assert dl.strides == tuple(s // expected.itemsize for s in expected.strides)
    got = np.from_dlpack(dl)
    np.testing.assert_array_equal(got, expected)
    assert got.__array_interface__["data"][0] == expected.__array_interface__["data"][0]
