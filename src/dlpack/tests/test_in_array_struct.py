"""Provider: __array_struct__ (spec §3.3), NumPy's PyArrayInterface in a capsule. The reader's
refusals are the hostile corpus's group ``array_struct``; the layouts it shares with
__array_interface__ are pinned in test_in_array_interface."""

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
