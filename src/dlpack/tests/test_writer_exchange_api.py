"""DLPack 1.3's C exchange API, both directions (spec §3.1): our five functions, tvm-ffi, torch."""

import ctypes
import gc
import weakref

import pytest

import dlpack.ctypes as dlc
from dlpack import DLPackObject, asdlpack
from dlpack.tests.helpers import capsule, lib

np = lib("numpy")

SetError = dlc.DLPackSetError
P_MTV = ctypes.POINTER(dlc.DLManagedTensorVersioned)


@pytest.fixture(scope="module")
def api():
    return dlc.exchange_api(DLPackObject)


def test_header(api):
    assert (api.header.version.major, api.header.version.minor) == (1, 3)
    assert not api.header.prev_api


def test_from_py_object_and_deleter(api):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    dl = asdlpack(a)
    alive = weakref.ref(dl)
    out = P_MTV()
    assert api.managed_tensor_from_py_object_no_sync(dl, ctypes.byref(out)) == 0
    t = out.contents.dl_tensor
    assert t.data == a.ctypes.data and t.ndim == 2 and [t.shape[0], t.shape[1]] == [2, 3]
    del dl
    gc.collect()
    assert alive() is not None
    out.contents.deleter(out)
    gc.collect()
    assert alive() is None


def test_from_py_object_wrong_type_sets_error(api):
    out = P_MTV()
    with pytest.raises(TypeError, match="not a DLPackObject"):
        api.managed_tensor_from_py_object_no_sync(b"abc", ctypes.byref(out))


def test_dltensor_non_owning(api):
    dl = asdlpack(np.arange(4, dtype=np.int16))
    t = dlc.DLTensor()
    assert api.dltensor_from_py_object_no_sync(dl, ctypes.byref(t)) == 0
    assert t.data == dl.data_ptr and t.dtype.bits == 16 and t.strides[0] == 1


def test_to_py_object_takes_ownership(api):
    a = np.arange(3.0)
    out = P_MTV()
    api.managed_tensor_from_py_object_no_sync(asdlpack(a), ctypes.byref(out))
    obj = ctypes.py_object()
    assert api.managed_tensor_to_py_object_no_sync(out, ctypes.byref(obj)) == 0
    wrapped = obj.value
    assert type(wrapped) is DLPackObject and wrapped.data_ptr == a.ctypes.data
    assert np.from_dlpack(wrapped).tolist() == [0, 1, 2]


def test_allocator(api):
    errors = []

    @SetError
    def set_error(ctx, kind, message):
        errors.append((kind, message))

    shape = (ctypes.c_int64 * 2)(3, 4)
    proto = dlc.DLTensor(None, dlc.DLDevice(1, 0), 2, dlc.DLDataType(2, 32, 1), shape, None, 0)
    out = P_MTV()
    assert api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out), None,
                                        set_error) == 0
    dl = asdlpack(out)
    a = np.from_dlpack(dl)
    a[:] = 1.5
    assert a.shape == (3, 4) and a.sum() == 18.0 and a.flags.c_contiguous
    assert dl.data_ptr % 256 == 0
    proto.device = dlc.DLDevice(2, 0)
    assert api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(P_MTV()), None,
                                        set_error) == -1
    assert errors and errors[0][0] == b"BufferError"


def test_current_work_stream(api):
    stream = ctypes.c_void_p(123)
    assert api.current_work_stream(1, 0, ctypes.byref(stream)) == 0
    assert not stream.value


def test_tvm_ffi_consumes_through_the_c_api():
    tvm_ffi = lib("tvm_ffi")
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    x = tvm_ffi.from_dlpack(asdlpack(a))
    assert x.data_ptr() == a.ctypes.data and tuple(x.shape) == (2, 3)
    assert np.from_dlpack(asdlpack(x)).tolist() == a.tolist()


def test_torch_provider_through_its_c_api():
    torch = lib("torch")
    t = torch.arange(5, dtype=torch.int32)
    dl = asdlpack(t)
    assert dl.base is t and dl.data_ptr == t.data_ptr()
    assert np.from_dlpack(dl).tolist() == [0, 1, 2, 3, 4]


# -- any producer's C exchange API (spec §3.1): a producer of our own, built with ctypes ---------

_FROM_PY = dict(dlc.DLPackExchangeAPI._fields_)["managed_tensor_from_py_object_no_sync"]


def exchange_api_type(*, major=1, minor=3, prev=None, entry=True, returns=0, dlpack=False,
                      base=object, device=None):
    """A producer class whose only protocol (with dlpack=True, also __dlpack__) is a
    ctypes-built DLPackExchangeAPI; instances hold .array, and .calls counts API calls."""
    api = dlc.DLPackExchangeAPI()
    api.header.version.major, api.header.version.minor = major, minor
    api.header.prev_api = ctypes.addressof(prev) if prev is not None else None

    def from_py(obj, out):
        obj.calls += 1
        if returns == 0 and obj.array is not None:
            out[0] = dlc.to_pointer(obj.array)
            if device is not None:
                out[0].contents.dl_tensor.device.device_type = device
        return returns

    if entry:
        api.managed_tensor_from_py_object_no_sync = _FROM_PY(from_py)
    namespace = {"__dlpack_c_exchange_api__": capsule(ctypes.addressof(api),
                                                      b"dlpack_exchange_api"),
                 "_api": api,       # the struct and its callback live as long as the class
                 "__init__": lambda self, array: setattr(self, "array", array)
                 or setattr(self, "calls", 0)}
    if dlpack:
        namespace["__dlpack__"] = lambda self, **kw: np.asarray(self.array).__dlpack__(**kw)
    return type("APIProducer", (base,), namespace)


def test_a_producer_speaking_only_the_exchange_api():
    Producer = exchange_api_type()
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    p = Producer(a)
    dl = asdlpack(p)
    assert p.calls == 1 and dl.base is p and dl.data_ptr == a.ctypes.data
    assert np.from_dlpack(dl).tolist() == a.tolist() and not dl.readonly
    a.flags.writeable = False
    ro = asdlpack(Producer(a))
    assert ro.readonly and not np.from_dlpack(ro).flags.writeable


def test_exchange_api_comes_before_arrow():
    """A type with the exchange API and an Arrow method (no __dlpack__) is read through the
    API: §3 puts every tensor protocol before Arrow's columns."""
    from dlpack.tests import arrow_producers as ap

    other = ap.ArrayProducer(ap.primitive("f", [7, 8], b"f"))
    Producer = exchange_api_type()
    Both = type("Both", (Producer,), {"__arrow_c_array__": lambda self, requested_schema=None:
                                      other.__arrow_c_array__()})
    a = np.arange(3, dtype=np.float32)
    p = Both(a)
    dl = asdlpack(p)
    assert p.calls == 1 and dl.data_ptr == a.ctypes.data and other.released == {}


def test_exchange_api_of_another_major_is_not_used():
    Producer = exchange_api_type(major=2, minor=0)
    p = Producer(np.arange(3.0))
    with pytest.raises(BufferError, match=r"version 2\.0 with no 1\.x API in its prev_api"):
        asdlpack(p)
    assert p.calls == 0
    q = exchange_api_type(major=2, dlpack=True)(np.arange(3.0))
    assert np.from_dlpack(asdlpack(q)).tolist() == [0, 1, 2] and q.calls == 0


def test_exchange_api_prev_api_chain_gives_the_1x_api():
    older = exchange_api_type(major=1, minor=3)
    Producer = exchange_api_type(major=2, minor=0, prev=older._api, entry=False)
    p = Producer(np.arange(4, dtype=np.int8))
    assert np.from_dlpack(asdlpack(p)).tolist() == [0, 1, 2, 3] and p.calls == 1


def test_an_unusable_exchange_api_types_nothing_but_a_failed_one_does():
    """An API that is not used (no entry point) is listed with the refusals but said nothing of
    the elements: the untyped buffer after it is read. One whose call failed refused as a typed
    protocol: untyped bytes may not stand in for it (spec §3)."""
    unused = exchange_api_type(entry=False, base=bytearray)(None)
    dl = asdlpack(unused)
    assert (dl.shape, dl.dtype.name, unused.calls) == ((0,), "uint8", 0)
    failed = exchange_api_type(returns=-1, base=bytearray)(None)
    with pytest.raises(BufferError) as e:
        asdlpack(failed)
    assert "failed without setting an error" in str(e.value) and "untyped" in str(e.value)
    assert failed.calls == 1


def test_exchange_api_null_entry_falls_back_to_dlpack():
    p = exchange_api_type(entry=False, dlpack=True)(np.arange(3.0))
    assert np.from_dlpack(asdlpack(p)).tolist() == [0, 1, 2]
    with pytest.raises(BufferError, match="managed_tensor_from_py_object_no_sync is NULL"):
        asdlpack(exchange_api_type(entry=False)(np.arange(3.0)))


@pytest.mark.parametrize("returns, array, message", [
    (-1, np.arange(2.0), "failed without setting an error"),
    (0, None, "managed tensor pointer is NULL"),
])
def test_exchange_api_failures_fall_back_or_are_named(returns, array, message):
    p = exchange_api_type(returns=returns)(array)
    with pytest.raises(BufferError, match=message):
        asdlpack(p)
    q = exchange_api_type(returns=returns, dlpack=True)(np.arange(2.0) if array is None else array)
    assert np.from_dlpack(asdlpack(q)).tolist() == [0.0, 1.0] and q.calls == 1


def test_exchange_api_does_not_bypass_a_subclass_dlpack():
    Base = exchange_api_type()

    class Sub(Base):
        def __dlpack__(self, **kw):
            return np.full(2, 5.0).__dlpack__(**kw)

    s = Sub(np.arange(2.0))
    assert np.from_dlpack(asdlpack(s)).tolist() == [5.0, 5.0] and s.calls == 0
    inherited = type("Inherited", (Base,), {})(np.arange(2.0))
    assert np.from_dlpack(asdlpack(inherited)).tolist() == [0.0, 1.0] and inherited.calls == 1


def test_exchange_api_on_the_instance_is_not_read():
    class Plain:
        def __init__(self):
            self.__dlpack_c_exchange_api__ = exchange_api_type().__dlpack_c_exchange_api__

    with pytest.raises(TypeError, match="speaks no array-exchange protocol"):
        asdlpack(Plain())


def test_exchange_api_device_data_it_cannot_order_goes_to_dlpack():
    """CUDA data from an API without current_work_stream: no stream to order after (§3.1)."""
    p = exchange_api_type(device=2)(np.arange(2.0))
    with pytest.raises(BufferError, match="cannot be ordered through this API"):
        asdlpack(p)
    q = exchange_api_type(device=2, dlpack=True)(np.arange(2.0))
    dl = asdlpack(q)
    assert q.calls == 1 and dl.device == (1, 0) and np.from_dlpack(dl).tolist() == [0.0, 1.0]


def test_exchange_api_error_left_on_success_is_a_failure(tmp_path):
    """An entry point that returns 0 with a Python error set failed: its error is passed on
    (or __dlpack__ asked), and the tensor it gave is handed back, not leaked (spec §3.1)."""
    from dlpack.tests.helpers import c_library

    liar, _ = c_library("exchange_api_liar.c", tmp_path)
    stashed = ctypes.c_void_p.in_dll(liar, "stashed")

    class Owner(np.ndarray):
        pass

    for with_dlpack in (False, True):
        Producer = exchange_api_type(dlpack=with_dlpack)
        Producer._api.managed_tensor_from_py_object_no_sync = ctypes.cast(
            liar.error_left_on_success, _FROM_PY)
        owner = np.arange(3.0).view(Owner)
        gone = weakref.ref(owner)
        stashed.value = ctypes.cast(dlc.to_pointer(owner), ctypes.c_void_p).value
        del owner
        p = Producer(np.arange(2.0))
        if with_dlpack:
            assert np.from_dlpack(asdlpack(p)).tolist() == [0.0, 1.0]
        else:
            with pytest.raises(BufferError, match="RuntimeError: an error left set by a call"):
                asdlpack(p)
        assert gone() is None


def test_exchange_api_type_lookup_runs_no_metaclass_code():
    """The API is found through the type's own MRO and dicts: a metaclass __mro__ or
    __dict__ property neither runs nor hides a subclass's __dlpack__ override."""
    Base = exchange_api_type()

    class Meta(type):
        @property
        def __dict__(cls):
            raise RuntimeError("a metaclass __dict__ ran")

        @property
        def __mro__(cls):
            return (Base, object)

    class Plain(Base, metaclass=Meta):
        pass

    class Override(Base, metaclass=Meta):
        def __dlpack__(self, **kw):
            return np.full(2, 5.0).__dlpack__(**kw)

    p = Plain(np.arange(2.0))
    assert np.from_dlpack(asdlpack(p)).tolist() == [0.0, 1.0] and p.calls == 1
    o = Override(np.arange(2.0))
    assert np.from_dlpack(asdlpack(o)).tolist() == [5.0, 5.0] and o.calls == 0
