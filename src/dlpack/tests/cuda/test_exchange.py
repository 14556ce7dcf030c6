"""CUDA without a GPU (spec §3.4, §4 stream, §5, §10): a fake driver as strict as libcuda,
installed where libcuda's entry points go, checks the exact driver calls."""

import ctypes

import pytest

import dlpack.ctypes as dlc
from dlpack import DLDeviceType, _core, asdlpack, todict
from dlpack.tests.fake_cuda import (
    CU_MEMORYTYPE_HOST,
    EVENT,
    LEAVE,
    alloc,
    capture_check,
    ctx,
    enter,
    free,
    query,
    synchronize,
    wait,
)
from dlpack.tests.helpers import (
    CAI,
    NOWHERE,
    c_library,
    capsule,
    cuda_array,
    cuda_floats,
    run_clean,
)


def test_cai_in_device_from_pointer(fake):
    ptr = cuda_floats(fake)
    dl = asdlpack(CAI(ptr))
    assert dl.device == (DLDeviceType.kDLCUDA, 1)
    assert dl.__dlpack_device__() == (DLDeviceType.kDLCUDA, 1)
    assert fake.calls == query(ptr, borrowed=1)  # no context here: GPU 1's active one is borrowed
    managed = fake.managed((ctypes.c_float * 6)())
    assert asdlpack(CAI(managed)).device == (DLDeviceType.kDLCUDAManaged, 0)
    pinned = fake.pinned((ctypes.c_float * 6)())
    assert asdlpack(CAI(pinned)).device == (DLDeviceType.kDLCUDAHost, 0)
    assert asdlpack(CAI(ptr, version=2)).dtype == "float32"


def test_cai_zero_size_null_pointer(fake):
    class Empty:
        __cuda_array_interface__ = property(lambda self: {
            "shape": (0,), "typestr": "<f4", "data": (0, False), "version": 3})

    dl = asdlpack(Empty())
    assert dl.size == 0 and dl.device == (DLDeviceType.kDLCUDA, 0) and fake.calls == []


@pytest.mark.parametrize(("consumer", "expected"), [
    (None, wait(1, 7, 1, first=False)),       # GPU 1's context retained by the import
    (1, wait(1, 7, 1, first=False)),
    (2, wait(1, 7, 2, first=False)),
    (0xABC, wait(1, 7, 0xABC, first=False)),
    (-1, []),
    (7, []),
])
def test_stream_cases_driver_calls(fake, consumer, expected):
    fake.stream(0xABC, device=1)
    dl = asdlpack(CAI(cuda_floats(fake), stream=7))
    fake.calls.clear()
    capsule = dl.__dlpack__(stream=consumer, max_version=(1, 0))
    assert fake.calls == expected
    assert todict(capsule)["device"] == (DLDeviceType.kDLCUDA, 1)


def test_no_producer_stream_means_no_sync(fake):
    dl = asdlpack(CAI(cuda_floats(fake), stream=None))
    fake.calls.clear()
    dl.__dlpack__(stream=5, max_version=(1, 0))
    assert fake.calls == []


def test_cai_out_and_cpu_protocols_absent(fake):
    ptr = cuda_floats(fake)
    dl = asdlpack(CAI(ptr, stream=7, readonly=True))
    cai = dl.__cuda_array_interface__
    assert cai["data"] == (ptr, True) and cai["stream"] == 7 and cai["version"] == 3
    assert cai["shape"] == (2, 3) and cai["typestr"] == "<f4" and cai["strides"] is None
    assert not hasattr(dl, "__array_interface__")
    with pytest.raises(BufferError, match="kDLCUDA:1"):
        memoryview(dl)
    with pytest.raises(BufferError, match="between GPUs"):
        dl.__dlpack__(max_version=(1, 0), dl_device=(2, 0))
    with pytest.raises(BufferError, match="copy=False"):
        dl.__dlpack__(max_version=(1, 0), dl_device=(1, 0), copy=False)


def test_host_copy_of_pinned_memory_synchronises_first(fake):
    np = pytest.importorskip("numpy")
    host = (ctypes.c_float * 6)(*range(6))

    pinned = CAI(ctypes.addressof(host), stream=7)
    pinned.__cuda_array_interface__["shape"] = (6,)

    fake.attributes[ctypes.addressof(host)] = (CU_MEMORYTYPE_HOST, -1, False)
    fake.stream(7, device=0)
    dl = asdlpack(pinned)
    assert dl.device == (DLDeviceType.kDLCUDAHost, 0)
    fake.calls.clear()
    a = np.from_dlpack(dl, device="cpu", copy=True)
    assert fake.calls == synchronize(0, 7)
    assert a.tolist() == list(range(6)) and a.ctypes.data != ctypes.addressof(host)
    assert memoryview(dl).tolist() == list(range(6))   # pinned memory is host-addressable


def test_cai_mask_and_bad_fields(fake):
    with pytest.raises(BufferError, match="mask"):
        asdlpack(CAI(NOWHERE, mask=object()))
    with pytest.raises(BufferError, match="version"):
        asdlpack(CAI(NOWHERE, version=1))
    assert fake.calls == []


def _cuda_capsule():
    """A versioned capsule describing device memory, built with ctypes (kept alive here)."""
    shape = (ctypes.c_int64 * 1)(4)
    m = dlc.DLManagedTensorVersioned()
    m.version.major = 1
    m.dl_tensor.data = NOWHERE
    m.dl_tensor.device = dlc.DLDevice(2, 0)
    m.dl_tensor.ndim = 1
    m.dl_tensor.dtype = dlc.DLDataType(2, 32, 1)
    m.dl_tensor.shape = shape
    _keep.append((m, shape))
    return capsule(ctypes.addressof(m), b"dltensor_versioned")


_keep = []


class CudaProducer:
    """A DLPack producer of device memory that records the streams it is asked for."""

    def __init__(self):
        self.streams = []

    def __dlpack__(self, stream=None, max_version=None, **kwargs):
        self.streams.append(stream)
        return _cuda_capsule()

    def __dlpack_device__(self):
        return (2, 0)


def test_dlpack_cuda_provider_gets_the_consumers_stream(fake):
    p = CudaProducer()
    dl = asdlpack(p)
    # asked with the legacy default stream (its __dlpack_device__ says CUDA): None would make
    # JAX block the host until its buffers are ready, for an import that orders nothing
    assert dl.device == (DLDeviceType.kDLCUDA, 0) and p.streams == [1]
    dl.__dlpack__(stream=42, max_version=(1, 0))
    assert p.streams == [1, 42]                # the provider syncs for the real consumer
    dl.__dlpack__(stream=-1, max_version=(1, 0))
    assert p.streams == [1, 42]
    assert dl.__cuda_array_interface__["stream"] == 1
    assert p.streams == [1, 42, 1]             # asked again, for the legacy default stream
    assert fake.calls == []


def test_cuda_host_and_rocm_device_types_carried(fake):
    for device_type in (DLDeviceType.kDLCUDAHost, DLDeviceType.kDLROCM, DLDeviceType.kDLROCMHost):
        shape = (ctypes.c_int64 * 1)(2)
        data = (ctypes.c_float * 2)(1, 2)
        m = dlc.DLManagedTensorVersioned()
        m.version.major = 1
        m.dl_tensor.data = ctypes.addressof(data)
        m.dl_tensor.device = dlc.DLDevice(device_type, 0)
        m.dl_tensor.ndim = 1
        m.dl_tensor.dtype = dlc.DLDataType(2, 32, 1)
        m.dl_tensor.shape = shape
        dl = asdlpack(ctypes.pointer(m))
        assert dl.device == (device_type, 0)
        assert todict(dl.__dlpack__(max_version=(1, 0), stream=-1 if device_type == 3 else None)
                      )["device"] == (device_type, 0)
        assert hasattr(dl, "__cuda_array_interface__") is (device_type == 3)
        assert hasattr(dl, "__array_interface__") is (device_type in (3, 11))


def test_missing_driver_is_a_clear_error():
    try:
        _core._cuda_driver(None, path="libcuda-not-here.so.1")
        with pytest.raises(_core.CudaError,
                           match=r"CUDA driver: libcuda-not-here\.so\.1 cannot be loaded"):
            asdlpack(CAI(NOWHERE))
        assert _core._cuda_state() == "unloaded"
    finally:
        _core._cuda_driver(None)


def test_cpu_work_never_loads_the_driver():
    code = ("import array, dlpack, dlpack._core as c\n"
            "dlpack.asdlpack(b'abc').__dlpack__(max_version=(1, 0))\n"
            "memoryview(dlpack.asdlpack(array.array('d', [1, 2])))\n"
            "assert c._cuda_state() == 'unloaded', c._cuda_state()\n"
            "assert 'libcuda' not in open('/proc/self/maps').read(), 'libcuda mapped'\n")
    run_clean(code)


def test_device_to_host_copy_is_ordered_owned_and_flagged(fake):
    np = pytest.importorskip("numpy")
    obj, ptr = cuda_array(fake, range(6), (2, 3))
    dl = asdlpack(obj)
    fake.calls.clear()
    capsule = dl.__dlpack__(max_version=(1, 0), dl_device=(1, 0))
    info = todict(capsule)
    assert fake.calls == [*synchronize(1, 7, first=False), *enter(1), ("cuMemcpyDtoH", ptr, 24),
                          *LEAVE]
    assert info["device"] == (DLDeviceType.kDLCPU, 0) and info["flags"] & 2     # IS_COPIED
    assert info["data"] != ptr and info["strides"] == (3, 1)
    assert list((ctypes.c_float * 6).from_address(info["data"])) == list(range(6))
    assert np.from_dlpack(dl, device="cpu").tolist() == [[0, 1, 2], [3, 4, 5]]


def test_device_to_host_copy_of_strided_data_copies_the_elements(fake):
    obj, ptr = cuda_array(fake, range(12), (3, 2), strides=(4, -8))
    obj.__cuda_array_interface__["data"] = (ptr + 8, False)     # element [i, j] at 8 + 4i - 8j
    dl = asdlpack(obj)
    fake.calls.clear()
    capsule = dl.__dlpack__(max_version=(1, 0), dl_device=(1, 0))
    info = todict(capsule)       # the capsule, unconsumed, owns the copy: kept while it is read
    # rows of 3 elements (i) at 4-byte steps, one row per j, lowest first; they overlap (an
    # 8-byte pitch under 12-byte rows), so each is its own copy
    # (one row each: a cuMemcpyDtoH, which has no pitch to exceed MAX_PITCH)
    assert fake.calls == [*synchronize(1, 7, first=False), *enter(1),
                          ("cuDeviceGetAttribute", 11, 1), ("cuMemcpyDtoH", ptr, 12),
                          ("cuMemcpyDtoH", ptr + 8, 12), *LEAVE]
    got = list((ctypes.c_float * 6).from_address(info["data"]))
    assert got == [2 + i - 2 * j for i in range(3) for j in range(2)]


def test_host_to_device_copy_in_its_context_freed_by_the_deleter(fake_sync):
    """Without stream-ordered allocation: cuMemAlloc, cuMemcpyHtoD, an event, cuMemFree."""
    fake = fake_sync
    b = bytes(range(8))
    fake.stream(5, device=1)
    capsule = asdlpack(b).__dlpack__(max_version=(1, 0), dl_device=(2, 1), stream=5)
    info = todict(capsule)
    ptr = info["data"]
    assert fake.calls == [*capture_check(5, ctx(1)), *enter(1, True), *alloc(8, ptr), *LEAVE,
                          *enter(1), ("cuMemcpyHtoD", ptr, 8), *LEAVE,
                          *wait(1, 1, 5, first=False)]     # stream 5 waits for the copy
    assert info["device"] == (DLDeviceType.kDLCUDA, 1) and info["flags"] == 2   # copied
    assert fake.read(ptr, 8) != b                # staged: it lands on the legacy stream later,
    fake.synchronize(5)                          # before stream 5's next work
    assert fake.read(ptr, 8) == b
    del capsule                                  # never consumed: the destructor frees it
    assert fake.calls[-5:] == [*enter(1), *free(ptr), *LEAVE]
    assert not fake.allocated()


def test_host_to_device_copy_of_strided_data(fake):
    np = pytest.importorskip("numpy")
    a = np.arange(12, dtype=np.int16).reshape(3, 4)[::2, ::-1]
    capsule = asdlpack(a).__dlpack__(max_version=(1, 0), dl_device=(2, 0))
    info = todict(capsule)       # the capsule, unconsumed, owns the copy: kept while it is read
    assert info["strides"] == (4, 1) and fake.calls[3] == ("cuMemAlloc", 16)
    got = np.frombuffer(fake.read(info["data"], 16), np.int16).reshape(2, 4)
    assert got.tolist() == a.tolist()


def test_per_thread_default_stream_served_for_providers_that_refuse_it(fake):
    p = CudaProducer()
    dl = asdlpack(p)
    dl.__dlpack__(stream=2, max_version=(1, 0))
    assert p.streams == [1, 1]             # the legacy default stream orders stream 2 too


@pytest.mark.parametrize("device", [(1, 0), "lies", None, (2.0, 0)])
def test_import_stream_is_none_unless_the_provider_says_cuda(fake, device):
    """CPU providers and ones whose __dlpack_device__ fails or lies are asked as before."""
    p = CudaProducer()
    p.__dlpack_device__ = (lambda: device) if device != "lies" else (lambda: 1 / 0)
    asdlpack(p)
    assert p.streams == [None]


def test_exchange_api_cuda_work_stream_and_ordering(fake):
    """C consumers launch on current_work_stream; our CUDA exports are ready on it."""
    from dlpack import DLPackObject

    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    base = get(DLPackObject.__dlpack_c_exchange_api__, b"dlpack_exchange_api")
    slot = ctypes.c_void_p.from_address(base + 16 + 4 * ctypes.sizeof(ctypes.c_void_p))
    stream_fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32,
                                 ctypes.POINTER(ctypes.c_void_p))(slot.value)
    out = ctypes.c_void_p(99)
    assert stream_fn(2, 0, ctypes.byref(out)) == 0 and out.value == 1     # CU_STREAM_LEGACY
    assert stream_fn(1, 0, ctypes.byref(out)) == 0 and out.value is None
    from_py = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(
        ctypes.POINTER(dlc.DLManagedTensorVersioned)))(
        ctypes.c_void_p.from_address(base + 16 + ctypes.sizeof(ctypes.c_void_p)).value)
    dl = asdlpack(CAI(cuda_floats(fake), stream=7))
    fake.calls.clear()
    m = ctypes.POINTER(dlc.DLManagedTensorVersioned)()
    assert from_py(dl, ctypes.byref(m)) == 0
    assert fake.calls == wait(1, 7, 1, first=False)
    m.contents.deleter(m)


def test_primary_context_retained_once_per_device(fake):
    dl = asdlpack(CAI(cuda_floats(fake), stream=7))
    fake.calls.clear()
    dl.__dlpack__(stream=1, max_version=(1, 0))
    dl.__dlpack__(stream=2, max_version=(1, 0))
    assert fake.calls == wait(1, 7, 1, first=False) + wait(1, 7, 2, first=False)
    assert fake.current == []                       # every push was popped


def test_a_failing_driver_call_names_itself_and_cleans_up(fake):
    fake.stream(5, device=1)
    dl = asdlpack(CAI(cuda_floats(fake), stream=7))
    fake.calls.clear()
    fake.fail["cuEventRecord"] = 700
    with pytest.raises(_core.CudaError, match=r"cuEventRecord failed with "
                                              r"CUDA_ERROR_ILLEGAL_ADDRESS \(700\)"):
        dl.__dlpack__(stream=5, max_version=(1, 0))
    # the event is destroyed and the context popped even so
    assert fake.calls == [*wait(1, 7, 5)[:-4], ("cuEventRecord", "failed"),
                          ("cuEventDestroy", EVENT), *LEAVE]
    assert fake.current == []
    fake.fail.clear()
    fake.fail["cuStreamSynchronize"] = 12345        # a code with no name
    with pytest.raises(BufferError, match=r"cuStreamSynchronize failed with an unknown error"):
        dl.__dlpack__(max_version=(1, 0), dl_device=(1, 0))
    assert fake.current == []


def test_failed_device_allocation_leaves_nothing(fake):
    fake.fail["cuMemAlloc"] = 2
    with pytest.raises(BufferError, match=r"cuMemAlloc\(4\) failed with CUDA_ERROR_OUT_OF_MEMORY"):
        asdlpack(b"abcd").__dlpack__(max_version=(1, 0), dl_device=(2, 0))
    assert fake.calls == [*enter(0, True), ("cuMemAlloc", "failed"), *LEAVE]
    assert fake.current == [] and not fake.allocated()


def test_device_copy_of_managed_memory_waits_for_its_producer(fake):
    data = (ctypes.c_float * 4)(1, 2, 3, 4)
    fake.stream(9)
    obj = CAI(fake.managed(data), stream=9)                     # managed, GPU 0
    obj.__cuda_array_interface__["shape"] = (4,)
    dl = asdlpack(obj)
    assert dl.device == (DLDeviceType.kDLCUDAManaged, 0)
    fake.kernel(9, ctypes.addressof(data), (ctypes.c_float * 4)(5, 6, 7, 8))   # pending work
    fake.calls.clear()
    capsule = dl.__dlpack__(max_version=(1, 0), dl_device=(2, 0), stream=1)
    info = todict(capsule)          # the capsule owns the device copy: kept while it is read
    assert fake.calls[:4] == synchronize(0, 9)       # read on the host once the GPU is done
    fake.synchronize(1, device=0)
    assert list((ctypes.c_float * 4).from_buffer_copy(fake.read(info["data"], 16))) == [
        5, 6, 7, 8]


def test_device_ids_beyond_the_table_are_refused(fake):
    data = (ctypes.c_float * 4)(1, 2, 3, 4)
    fake.attributes[ctypes.addressof(data)] = (2, 4096, False)
    fake.stream(9)
    obj = CAI(ctypes.addressof(data), stream=9)
    with pytest.raises(BufferError, match="device ordinal 4096, which is not a device"):
        asdlpack(obj)
    with pytest.raises(BufferError, match="device 4096 is out of range"):
        asdlpack(b"ab").__dlpack__(max_version=(1, 0), dl_device=(2, 4096))


def test_the_loader_resolves_a_driver_library(tmp_path):
    """dlopen + dlsym on a stand-in libcuda (tests/libcuda_stub.c): the path a GPU takes."""
    stub, path = c_library("libcuda_stub.c", tmp_path)

    def count(name):
        return ctypes.c_int.in_dll(stub, "stub_" + name).value

    data = (ctypes.c_float * 6)(*range(6))
    try:
        _core._cuda_driver(None, path=path)
        dl = asdlpack(CAI(ctypes.addressof(data), stream=7))
        assert dl.device == (DLDeviceType.kDLCUDA, 0) and _core._cuda_state() == "loaded"
        assert (count("inits"), count("queries")) == (1, 1)
        dl.__dlpack__(stream=5, max_version=(1, 0))
        assert [count(n) for n in ("retains", "events", "records", "waits", "destroys")] == [
            1, 1, 1, 1, 1]
        host = dl.__dlpack__(max_version=(1, 0), dl_device=(1, 0))
        info = todict(host)
        assert count("syncs") == 1 and count("copies") == 1
        assert info["data"] != ctypes.addressof(data)
        assert list((ctypes.c_float * 6).from_address(info["data"])) == list(range(6))
        del host
        device = asdlpack(b"stub!").__dlpack__(max_version=(1, 0), dl_device=(2, 0))
        assert ctypes.string_at(todict(device)["data"], 5) == b"stub!"   # stub "device" memory
        assert count("allocs") == 1 and count("frees") == 0              # is host memory
        del device
        assert count("frees") == 1 and count("depth") == 0 and count("retains") == 1
        column = CAI(ctypes.addressof(data) + 4, stream=7, readonly=True)   # 2-D copies
        column.__cuda_array_interface__.update(shape=(3,), strides=(8,))
        dl = asdlpack(column)
        host = todict(dl.__dlpack__(max_version=(1, 0), dl_device=(1, 0)))
        assert list((ctypes.c_float * 3).from_address(host["data"])) == [1, 3, 5]
        assert count("copies") == 3                          # one cuMemcpy2D of three rows
        capsule = dl.__dlpack__()                           # read-only, legacy: a device copy
        private = todict(capsule)
        assert count("allocs") == 2 and count("copies") == 4
        assert list((ctypes.c_float * 5).from_address(private["data"]))[::2] == [1, 3, 5]
        del capsule
        assert count("frees") == 2 and count("lookups") == 5 and count("depth") == 0
    finally:
        _core._cuda_driver(None)


def test_a_library_without_the_entry_points_is_refused():
    try:
        _core._cuda_driver(None, path="libc.so.6")
        with pytest.raises(_core.CudaError, match=r"libc\.so\.6 has no cuInit"):
            asdlpack(CAI(NOWHERE))
        assert _core._cuda_state() == "unloaded"
    finally:
        _core._cuda_driver(None)
