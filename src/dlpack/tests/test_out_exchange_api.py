"""DLPack 1.3's C exchange API, both directions (spec §3.1): our five functions, tvm-ffi, torch."""

import ctypes
import gc
import weakref

import pytest

import dlpack.ctypes as dlc
from dlpack import DLPackObject, asdlpack
from dlpack.tests.helpers import lib

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
