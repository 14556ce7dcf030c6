"""C libraries bound with ctypes (spec §3.6): pointers in, owned pointers out, deleters once."""

import ctypes
import gc
import sys
import weakref

import pytest

import dlpack.ctypes as dlc
from dlpack import asdlpack
from dlpack.tests.helpers import c_library, lib

np = lib("numpy")


@pytest.fixture(scope="module")
def clib(tmp_path_factory):
    c, _ = c_library("clib.c", tmp_path_factory.mktemp("clib"))
    c.make_tensor.restype = ctypes.POINTER(dlc.DLManagedTensorVersioned)
    c.make_tensor.argtypes = [ctypes.c_int, ctypes.c_uint32, ctypes.c_uint64]
    c.make_legacy.restype = ctypes.POINTER(dlc.DLManagedTensor)
    c.sum_and_free.restype = ctypes.c_double
    c.sum_and_free.argtypes = [ctypes.POINTER(dlc.DLManagedTensorVersioned)]
    c.sum_and_free_legacy.restype = ctypes.c_double
    c.sum_and_free_legacy.argtypes = [ctypes.POINTER(dlc.DLManagedTensor)]
    return c


def test_structures_match_the_abi():
    assert ctypes.sizeof(dlc.DLTensor) == 48
    assert ctypes.sizeof(dlc.DLManagedTensor) == 64
    assert ctypes.sizeof(dlc.DLManagedTensorVersioned) == 80
    assert dlc.DLManagedTensorVersioned.dl_tensor.offset == 32
    assert dlc.DLDeviceType.kDLTrn == 18 and dlc.DLDataTypeCode.kDLFloat4_e2m1fn == 17


def test_pointer_from_c_is_owned_and_deleted_once(clib):
    torch = lib("torch")                 # skip before making anything a traceback could keep
    before = clib.deleted_count()
    ptr = clib.make_tensor(5, 1, 0)
    address = ptr.contents.dl_tensor.data
    dl = asdlpack(ptr)
    assert not ptr                                   # we NULLed it: nobody frees twice
    t = torch.from_dlpack(dl)
    assert t.tolist() == [0, 1, 2, 3, 4] and t.data_ptr() == address
    with pytest.raises(BufferError, match="NULL"):
        asdlpack(ptr)
    del dl
    gc.collect()
    assert clib.deleted_count() == before            # torch still holds the data
    del t
    gc.collect()
    assert clib.deleted_count() == before + 1


def test_legacy_pointer_and_readonly_flag(clib):
    gc.collect()                 # an earlier test's tensor, collected late, is not counted here
    before = clib.deleted_count()
    dl = asdlpack(clib.make_legacy(3))
    assert np.from_dlpack(dl).tolist() == [0, 1, 2]
    ro = asdlpack(clib.make_tensor(2, 1, 1))
    assert ro.readonly and not np.from_dlpack(ro).flags.writeable
    del dl, ro
    gc.collect()
    assert clib.deleted_count() == before + 2


def test_newer_major_version_deleted_and_refused(clib):
    before = clib.deleted_count()
    with pytest.raises(BufferError, match="newer major"):
        asdlpack(clib.make_tensor(3, 2, 0))
    assert clib.deleted_count() == before + 1


def test_wrong_pointer_type(clib):
    with pytest.raises(TypeError, match="c_int"):
        asdlpack(ctypes.pointer(ctypes.c_int(3)))


def test_to_pointer_c_takes_ownership(clib):
    a = np.arange(10, dtype=np.float64)
    dl = asdlpack(a)
    alive = weakref.ref(dl)
    refs = sys.getrefcount(a)
    ptr = dlc.to_pointer(dl)
    assert ptr.contents.dl_tensor.data == a.ctypes.data
    assert ptr.contents.version.major == 1
    del dl
    gc.collect()
    assert alive() is not None                       # the C side's tensor holds it
    assert clib.sum_and_free(ptr) == 45.0
    gc.collect()
    assert alive() is None and sys.getrefcount(a) < refs
    assert clib.sum_and_free_legacy(dlc.to_pointer(a, versioned=False)) == 45.0


def test_to_pointer_readonly_legacy_is_a_private_copy():
    """An unversioned struct cannot carry READ_ONLY: the C receiver gets its own copy."""
    b = b"abc"
    legacy = dlc.to_pointer(b, versioned=False)
    assert legacy.contents.dl_tensor.data != asdlpack(b).data_ptr
    assert ctypes.string_at(legacy.contents.dl_tensor.data, 3) == b
    legacy.contents.deleter(legacy)
    p = dlc.to_pointer(b)
    assert p.contents.flags & dlc.FLAG_BITMASK_READ_ONLY
    assert p.contents.dl_tensor.data == asdlpack(b).data_ptr
    p.contents.deleter(p)


def test_python_producer_deleter_count():
    """A producer written in Python with ctypes: its deleter runs exactly once."""
    calls = []
    data = (ctypes.c_float * 4)(1, 2, 3, 4)
    shape = (ctypes.c_int64 * 1)(4)

    @dlc.DLManagedTensorVersionedDeleter
    def deleter(_m):
        calls.append(1)

    m = dlc.DLManagedTensorVersioned()
    m.version.major, m.version.minor = 1, 3
    m.deleter = deleter
    t = m.dl_tensor
    t.data = ctypes.addressof(data)
    t.device = dlc.DLDevice(1, 0)
    t.ndim = 1
    t.dtype = dlc.DLDataType(2, 32, 1)
    t.shape = shape
    dl = asdlpack(ctypes.pointer(m))
    assert np.from_dlpack(dl).tolist() == [1, 2, 3, 4]
    del dl
    gc.collect()
    assert calls == [1]


def test_many_rounds_no_leak(clib, no_leak):
    before = clib.deleted_count()
    for _ in range(100_000):
        np.from_dlpack(asdlpack(clib.make_tensor(8, 1, 0)))
    gc.collect()
    assert clib.deleted_count() == before + 100_000


def test_from_pointer_is_a_deprecated_alias_of_asdlpack():
    """dlpack.ctypes.from_pointer(ptr) warns and does what asdlpack(ptr) does (spec §3.6)."""
    import warnings

    p = dlc.to_pointer(bytearray(b"abcd"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        dl = dlc.from_pointer(p)
    assert [w.category for w in seen] == [DeprecationWarning]
    assert "asdlpack(ptr)" in str(seen[0].message) and not p
    assert bytes(dl) == b"abcd"
