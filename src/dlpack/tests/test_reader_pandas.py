"""pandas columns (spec §3, §13.1): a NaN in a NumPy-backed column is a value and comes through
zero-copy; real missing values (pd.NA, nullable and Arrow-backed dtypes) are refused as nulls,
the message naming both cases. Runs against pandas 2 (whose Series speak no Arrow protocol)
and pandas 3."""

import math

import pytest

from dlpack import asdlpack
from dlpack.tests.helpers import lib

np = lib("numpy")
pd = lib("pandas")
ARROW_SERIES = hasattr(pd.Series, "__arrow_c_stream__")       # pandas 3


def both_cases(message):
    """The null refusal names the NaN case and the way out for missing values."""
    for words in ("NaN is a value", "NumPy-backed column", "pd.NA", "fill_null", "fillna",
                  "astype('float64')", "df[name]"):
        assert words in message, (words, message)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("column", [False, True])
def test_nan_in_a_numpy_backed_column_comes_through(dtype, column):
    values = np.array([1.0, np.nan, 3.0], dtype=dtype)
    s = pd.DataFrame({"a": values, "b": [1, 2, 3]})["a"] if column else pd.Series(values)
    own = s.to_numpy()
    if not ARROW_SERIES:                # pandas 2: the Series speaks no protocol (§3)
        with pytest.raises(TypeError, match=r"x\.to_numpy\(\)"):
            asdlpack(s)
    dl = asdlpack(s if ARROW_SERIES else own)
    assert dl.data_ptr == own.ctypes.data                        # zero-copy
    assert dl.readonly == (not own.flags.writeable)              # pandas 3: read-only
    assert dl.dtype.name == dtype and dl.shape == (3,)
    got = np.from_dlpack(dl)
    assert got[0] == 1.0 and math.isnan(got[1]) and got[2] == 3.0
    assert np.nansum(got) == 4.0
    torch = pytest.importorskip("torch")
    assert torch.nansum(torch.from_dlpack(dl)).item() == 4.0


@pytest.mark.skipif(not ARROW_SERIES, reason="pandas 2: a Series speaks no Arrow protocol")
@pytest.mark.parametrize("dtype, kind", [("int64", "int64"), ("bool", "bool"),
                                         ("float16", "float16"), ("complex64", "complex64")])
def test_other_numpy_dtypes_come_through_numpy(dtype, kind):
    """bool, integer, float and complex columns are read as NumPy views them: a bool column is
    bytes, where Arrow's export would be bit-packed (refused)."""
    s = pd.Series(np.array([1, 0, 1]).astype(dtype))
    dl = asdlpack(s)
    assert dl.dtype.name == kind and dl.data_ptr == s.to_numpy().ctypes.data
    assert np.from_dlpack(dl).tolist() == s.tolist()


@pytest.mark.parametrize("values, dtype", [
    ([1.0, pd.NA, 3.0], "Float32"),
    ([1, pd.NA, 3], "Int64"),
    ([1.0, None, 3.0], "float32[pyarrow]"),
])
def test_missing_values_are_refused_naming_both_cases(values, dtype):
    s = pd.Series(values, dtype=dtype)
    if not ARROW_SERIES:                # pandas 2: no protocol, and no NaN taken for a null
        with pytest.raises(TypeError, match=r"x\.to_numpy\(\)"):
            asdlpack(s)
        s = s.to_numpy(dtype="float64", na_value=np.nan)
        assert math.isnan(np.from_dlpack(asdlpack(s))[1])
        return
    with pytest.raises(BufferError, match=r"1 null\(s\) among its 3 values") as e:
        asdlpack(s)
    both_cases(str(e.value))
    fixed = asdlpack(s.astype("float64"))              # the way out the message names
    got = np.from_dlpack(fixed)
    assert math.isnan(got[1]) and np.nansum(got) == 4.0
    assert np.from_dlpack(asdlpack(s.fillna(0))).tolist() == [1, 0, 3]


@pytest.mark.skipif(not ARROW_SERIES, reason="pandas 2: a Series speaks no Arrow protocol")
@pytest.mark.parametrize("dtype", ["Float32", "Int64", "float32[pyarrow]"])
def test_nullable_and_arrow_columns_without_missing_values_come_through_arrow(dtype):
    s = pd.Series([1, 2, 3], dtype=dtype)
    dl = asdlpack(s)
    assert dl.readonly and np.from_dlpack(dl).tolist() == [1, 2, 3]


def test_a_data_frame_is_read_through_arrow():
    """A DataFrame has no dtype: its one column is read through Arrow (pandas 2.2 and 3), whose
    null for a NaN is refused, the message naming df[name]."""
    if not hasattr(pd.DataFrame, "__arrow_c_stream__"):
        pytest.skip("pandas < 2.2: a DataFrame speaks no Arrow protocol")
    df = pd.DataFrame({"a": np.array([1.0, np.nan, 3.0], np.float32)})
    with pytest.raises(BufferError, match="null") as e:
        asdlpack(df)
    both_cases(str(e.value))
    assert np.from_dlpack(asdlpack(pd.DataFrame({"a": [1.0, 2.0]}))).tolist() == [1.0, 2.0]


class Column:
    """A column speaking __array__ and Arrow with the given dtype; its Arrow export is made a
    refusal naming itself, so the test sees which one was read."""

    def __init__(self, values, dtype=None, array_raises=None):
        self.values = values
        self._dtype = values.dtype if dtype is None else dtype
        self.array_raises = array_raises
        self.asked = []

    @property
    def dtype(self):
        return self._dtype

    def __array__(self, dtype=None, copy=None):
        self.asked.append(("__array__", copy))
        if self.array_raises is not None:
            raise self.array_raises
        return self.values

    def __arrow_c_stream__(self, requested_schema=None):
        self.asked.append(("arrow", None))
        raise ValueError("the Arrow export")


def test_the_rule_is_the_dtype_not_the_type():
    """Any object with __array__, a NumPy dtype and an Arrow method that Arrow refuses is read
    as NumPy sees it, asked with copy=False; another dtype keeps Arrow's refusal, and a column
    whose __array__ refuses too lists both."""
    values = np.array([1.0, np.nan], np.float32)
    col = Column(values)
    dl = asdlpack(col)
    assert col.asked == [("arrow", None), ("__array__", False)]
    assert dl.data_ptr == values.ctypes.data
    assert dl.base is values

    other = Column(values, dtype="float32")             # a dtype that is not NumPy's
    with pytest.raises(BufferError, match="the Arrow export"):
        asdlpack(other)
    assert other.asked == [("arrow", None)]

    for kind in ("M", "O", "U"):                        # kinds DLPack cannot carry: not asked
        odd = Column(np.array([0], dtype={"M": "datetime64[s]", "O": object, "U": "U1"}[kind]))
        with pytest.raises(BufferError):
            asdlpack(odd)
        assert odd.asked == [("arrow", None)]

    refuses = Column(values, array_raises=ValueError("Unable to avoid copy"))
    with pytest.raises(BufferError) as e:
        asdlpack(refuses)
    assert refuses.asked == [("arrow", None), ("__array__", False)]
    assert "Unable to avoid copy" in str(e.value) and "the Arrow export" in str(e.value)


def test_only_beside_arrow():
    """An object with only __array__ (pandas 2's Series, dask: __array__ may compute) is not
    read through it: its error names numpy.asarray(x)."""

    class OnlyArray:
        dtype = np.dtype("float32")

        def __array__(self, dtype=None, copy=None):
            raise AssertionError("asked")

    with pytest.raises(TypeError, match=r"numpy\.asarray\(x\)"):
        asdlpack(OnlyArray())


def test_array_giving_no_ndarray_is_refused():
    col = Column([1.0, 2.0], dtype=np.dtype("float64"))
    with pytest.raises(BufferError, match=r"__array__\(copy=False\) of Column gave a list"):
        asdlpack(col)


def test_a_column_whose_values_are_an_ndarray_subclass_is_refused():
    """§3: the NumPy-backed column row reads a plain ndarray only: a MaskedArray's mask (or any
    subclass's meaning) is not in its memory, so its masked values never come out as data."""
    np = lib("numpy")
    pa = lib("pyarrow")

    class Column:
        dtype = np.dtype("float64")

        def __arrow_c_array__(self, requested_schema=None):
            return pa.array([1.0, None]).__arrow_c_array__()

        def __array__(self, dtype=None, copy=None):
            return np.ma.masked_array([1.0, 99.0], mask=[False, True])

    with pytest.raises((BufferError, TypeError), match="MaskedArray"):
        asdlpack(Column())
