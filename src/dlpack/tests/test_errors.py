"""An object that speaks no array-exchange protocol: the TypeError names its type and the step
that makes an array of its kind (docs/spec.md §3, §7)."""

import pytest

from dlpack import asdlpack
from dlpack.tests.helpers import lib


@pytest.mark.parametrize("obj, way", [
    ([1, 2, 3], "numpy.asarray(x), or array.array('d', x)"),
    ((1.0, 2.0), "numpy.asarray(x)"),
    (range(3), "numpy.asarray(x)"),
    ("str", "s.encode()"),
    (3, "numpy.asarray(x) (0-d)"),
    (2.5, "numpy.asarray(x)"),
])
def test_builtin_kinds_get_their_step(obj, way):
    with pytest.raises(TypeError, match="speaks no array-exchange protocol") as e:
        asdlpack(obj)
    assert way in str(e.value) and type(obj).__qualname__ in str(e.value)


def test_pandas_index_gets_to_numpy():
    pd = lib("pandas")
    with pytest.raises(TypeError) as e:
        asdlpack(pd.Index([1, 2, 3]))
    assert "x.to_numpy()" in str(e.value) and "pandas" in str(e.value)


def test_tf_variable_gets_convert_to_tensor():
    tf = lib("tensorflow")
    v = tf.Variable([1.0, 2.0])
    with pytest.raises(TypeError) as e:
        asdlpack(v)
    assert "tf.convert_to_tensor(v)" in str(e.value)
    assert asdlpack(tf.convert_to_tensor(v)).shape == (2,)       # and the step works


def test_anything_with_array_gets_numpy_asarray():
    class Converts:
        def __array__(self, dtype=None, copy=None):
            raise AssertionError("not called")

    with pytest.raises(TypeError, match=r"__array__\): pass numpy.asarray\(x\)"):
        asdlpack(Converts())


def test_no_step_for_what_has_none():
    with pytest.raises(TypeError) as e:
        asdlpack({1: 2})
    assert str(e.value).endswith("or ctypes pointer)")      # no step follows the list


class _Hostile(str):
    """A str whose methods a refusal must not call: they raise."""

    def __format__(self, spec):
        raise RuntimeError("__format__")

    def partition(self, sep):
        raise RuntimeError("partition")

    def __contains__(self, item):
        raise RuntimeError("__contains__")


def test_a_hostile_class_still_gets_the_type_error():
    """The message names the type whatever its class set __module__ to (an int, a str
    subclass whose methods raise), and an __array__ lookup that raises means no step: the
    TypeError is raised, not the class's error."""
    class Numbered:
        pass

    class Lookup:
        def __getattr__(self, name):
            if name == "__array__":
                raise RuntimeError(name)
            raise AttributeError(name)

    class Named:
        pass

    Numbered.__module__ = 5
    Named.__module__ = _Hostile("tensorflow.x")
    Named.__name__ = _Hostile("Variable")
    for obj in (Numbered(), Lookup(), Named()):
        with pytest.raises(TypeError, match="speaks no array-exchange protocol") as e:
            asdlpack(obj)
        assert type(obj).__qualname__ in str(e.value)
