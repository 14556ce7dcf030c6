"""Hostile tests of the C-level CUDA driver bridge (fake driver, no GPU).

Each test names what it pins. Tests marked FINDING in their docstring failed when written
(commit cf3be77); the others pin behaviour worth keeping.
"""

import ctypes
import gc
import threading

import pytest

import dlpack.ctypes as dlc
from dlpack import DLPackObject, _core, asdlpack, todict
from dlpack.tests import fake_cuda
from dlpack.tests.fake_cuda import CU_MEMORYTYPE_DEVICE, ctx
from dlpack.tests.helpers import CAI, NOWHERE


def _memory(fake, n=6, kind="device", stream=7, device=0):
    """n float32 values (0, 1, ...) in memory of the given kind on a GPU, and the stream (made
    if new) its producer's work is on."""
    if stream is not None and stream not in fake.streams:
        fake.stream(stream, device=device)
    values = (ctypes.c_float * n)(*range(n))
    if kind == "device":
        return fake.device_array(values, device=device)
    return getattr(fake, kind)(values, device=device)


# -- device ordinals the driver reports ------------------------------------------------------


@pytest.mark.parametrize("managed", [False, True])
@pytest.mark.parametrize("ordinal", [-1, -2])
def test_negative_device_ordinal_is_not_a_device(fake, managed, ordinal):
    """FINDING: cuPointerGetAttributes answering a negative ordinal for device (or managed)
    memory gives a DLPackObject on kDLCUDA:-1 (kDLCUDAManaged:-1); only host memory clamps it.
    Expected: refused at import (BufferError naming __cuda_array_interface__) or a real id."""
    fake.attributes[0x1000] = (CU_MEMORYTYPE_DEVICE, ordinal, managed)
    try:
        dl = asdlpack(CAI(0x1000))
    except BufferError as e:
        assert "__cuda_array_interface__" in str(e)
    else:
        assert dl.device[1] >= 0, dl.device
    assert fake.current == []


def test_unknown_memory_type_names_the_field(fake):
    with pytest.raises(BufferError, match=r"__cuda_array_interface__: field 'data': pointer "
                                          r"0x700000000000 has CUDA memory type 0"):
        asdlpack(CAI(NOWHERE))                      # libcuda does not know it: type 0
    with pytest.raises(BufferError, match="memory type 0"):
        asdlpack(CAI(fake.device_array(bytes(256)) + 256))  # one past the end: the same
    fake.attributes[0x3000] = (3, 0, False)         # CU_MEMORYTYPE_ARRAY
    with pytest.raises(BufferError, match="memory type 3"):
        asdlpack(CAI(0x3000))


def test_null_data_for_a_non_empty_cai_is_refused_before_the_driver(fake):
    with pytest.raises(BufferError, match="'data' is NULL"):
        asdlpack(CAI(0))
    assert fake.calls == []


# -- stream values ---------------------------------------------------------------------------


@pytest.mark.parametrize("driver", ["fake", "fake_sync"])
def test_device_copy_is_ordered_before_the_consumers_stream(request, driver):
    """FINDING: a host -> GPU copy for a consumer stream (here 0xABC) is one cuMemcpyHtoD on
    the legacy default stream and nothing else. From pageable memory that call returns once
    the bytes are staged, "but the DMA to final destination may not have completed" (CUDA
    driver API, API synchronization behavior), and a non-blocking consumer stream does not wait
    for the legacy stream. Expected: after the copy, an event on stream 1 that 0xABC waits for
    (or a synchronize of stream 1); with stream-ordered allocation, the copy queued on 0xABC."""
    fake = request.getfixturevalue(driver)
    fake.stream(0xABC, nonblocking=True)
    capsule = asdlpack(b"abcdefgh").__dlpack__(max_version=(1, 0), dl_device=(2, 0),
                                               stream=0xABC)
    names = [c[0] for c in fake.calls]
    if driver == "fake":                # queued on the consumer's stream itself
        ordered = fake.calls[names.index("cuMemcpyHtoDAsync")][-1] == 0xABC
    else:
        after = fake.calls[names.index("cuMemcpyHtoD") + 1:]
        ordered = ("cuStreamSynchronize", 1) in after or (
            ("cuEventRecord", fake_cuda.EVENT, 1) in after
            and ("cuStreamWaitEvent", 0xABC, fake_cuda.EVENT, 0) in after)
    assert ordered, fake.calls
    seen = fake.consume(0xABC, todict(capsule)["data"], 8)
    fake.synchronize(0xABC)
    assert seen.value == b"abcdefgh"            # the consumer's stream reads the copy, landed
    del capsule
    assert not fake.allocated() and fake.current == []


@pytest.mark.parametrize("kind", ["pinned", "managed"])
@pytest.mark.parametrize("read", ["memoryview", "bytes", "array_interface", "numpy"])
def test_host_reads_of_pinned_or_managed_data_wait_for_the_producer(fake, kind, read):
    """FINDING: pinned and managed CAI data with a producer stream (7) is handed to host
    readers (buffer protocol, __array_interface__, np.asarray) with no driver call at all,
    while a host copy (__dlpack__ dl_device=CPU) and pickle both synchronise stream 7 first
    (spec 3.4: work on that stream must complete before a consumer reads). Expected: the
    same cuStreamSynchronize(7) before the host sees the pointer."""
    np = pytest.importorskip("numpy")
    ptr = _memory(fake, kind=kind)
    dl = asdlpack(CAI(ptr, stream=7))
    fake.kernel(7, ptr, (ctypes.c_float * 6)(*range(10, 16)))      # the producer's pending work
    fake.calls.clear()
    if read == "memoryview":
        assert memoryview(dl).tolist() == [[10, 11, 12], [13, 14, 15]]
    elif read == "bytes":
        assert bytes(dl) == bytes((ctypes.c_float * 6)(*range(10, 16)))
    elif read == "array_interface":
        assert dl.__array_interface__["data"][0] == ptr
        assert list((ctypes.c_float * 6).from_address(ptr)) == list(range(10, 16))
    else:
        assert np.asarray(dl).sum() == sum(range(10, 16))
    assert ("cuStreamSynchronize", 7) in fake.calls, fake.calls
    assert fake.current == []


def test_pickle_of_pinned_data_waits_for_the_producer(fake):
    import pickle

    ptr = _memory(fake, kind="pinned")
    dl = asdlpack(CAI(ptr, stream=7))
    fake.kernel(7, ptr, (ctypes.c_float * 6)(*range(10, 16)))
    fake.calls.clear()
    back = pickle.loads(pickle.dumps(dl, protocol=5))
    assert memoryview(back).tolist() == [[10, 11, 12], [13, 14, 15]]
    assert ("cuStreamSynchronize", 7) in fake.calls


# -- dl_device values --------------------------------------------------------------------------


@pytest.mark.parametrize("dl_device", [(2.0, 0), (2, True), (True, 0), (2, 0.0)])
def test_dl_device_of_floats_or_bools_is_a_type_error(fake, dl_device):
    """FINDING: dl_device=(2.0, 0) and (2, True) allocate and fill GPU memory (GPU 0, GPU 1),
    (True, 0) is read as the CPU. Expected: TypeError naming dl_device, no driver call."""
    with pytest.raises(TypeError, match="dl_device"):
        asdlpack(b"abcd").__dlpack__(max_version=(1, 0), dl_device=dl_device)
    gc.collect()
    assert fake.current == [] and not fake.allocated()


# -- every entry point failing in turn ---------------------------------------------------------


_ENTRY_POINTS = ["cuCtxGetCurrent", "cuPointerGetAttributes", "cuDeviceGet",
                 "cuDeviceGetAttribute", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxGetState",
                 "cuCtxPushCurrent", "cuStreamGetCtx", "cuEventCreate", "cuEventRecord",
                 "cuStreamWaitEvent", "cuEventDestroy", "cuStreamSynchronize", "cuMemAlloc",
                 "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpy2D", "cuMemcpyDtoDAsync"]


def _scenarios(ptr, pinned):
    np = pytest.importorskip("numpy")

    def readonly(**kwargs):
        obj = CAI(ptr, 7)
        obj.__cuda_array_interface__["data"] = (ptr, True)
        return asdlpack(obj).__dlpack__(**kwargs)

    return {
        "cai import": lambda: asdlpack(CAI(ptr, 7)),
        "cai export": lambda: asdlpack(CAI(ptr, 7)).__cuda_array_interface__,
        "export with stream": lambda: asdlpack(CAI(ptr, 7)).__dlpack__(stream=5,
                                                                       max_version=(1, 0)),
        "host copy": lambda: asdlpack(CAI(ptr, 7)).__dlpack__(dl_device=(1, 0),
                                                              max_version=(1, 0)),
        "host copy strided": lambda: asdlpack(CAI(ptr, 7, (3, 2), (4, 8))).__dlpack__(
            dl_device=(1, 0), max_version=(1, 0)),
        "host copy empty": lambda: asdlpack(CAI(ptr, 7, (0, 3))).__dlpack__(
            dl_device=(1, 0), max_version=(1, 0)),
        "device copy": lambda: asdlpack(b"abcdefgh").__dlpack__(
            dl_device=(2, 0), max_version=(1, 0), stream=5),
        "device copy strided": lambda: asdlpack(
            np.arange(12, dtype=np.int16).reshape(3, 4)[::2, ::-1]).__dlpack__(
            dl_device=(2, 3), max_version=(1, 0)),
        "device copy empty": lambda: asdlpack(np.zeros((0, 3))).__dlpack__(
            dl_device=(2, 0), max_version=(1, 0)),
        "device copy of pinned": lambda: asdlpack(CAI(pinned, 7)).__dlpack__(
            dl_device=(2, 0), max_version=(1, 0)),
        "private device copy": lambda: readonly(stream=5),
        "private device copy, stream -1": lambda: readonly(stream=-1),
        "device copy=True": lambda: asdlpack(CAI(ptr, 7)).__dlpack__(copy=True,
                                                                    max_version=(1, 0)),
        "host copy twice": lambda: [asdlpack(CAI(ptr, 7)).__dlpack__(
            dl_device=(1, 0), max_version=(1, 0)) for _ in range(2)],
    }


@pytest.mark.parametrize("entry", [None, *_ENTRY_POINTS])
def test_each_entry_point_failing_leaves_nothing_behind(fake, entry):
    """Every scenario, with one entry point failing (as libcuda fails: no effect), raises
    CudaError naming that call or succeeds, with no context left pushed and no device memory
    left allocated once results are dropped."""
    host = (ctypes.c_float * 12)(*range(12))
    for name in _scenarios(0, 0):
        driver = fake_cuda.install()
        ptr = driver.device_array((ctypes.c_float * 12)(*range(12)))
        pinned = driver.pinned(host)
        driver.stream(7)
        driver.stream(5)
        if entry:
            driver.fail[entry] = 2
        try:
            result = _scenarios(ptr, pinned)[name]()
        except _core.CudaError as e:
            assert entry and entry in str(e), (name, str(e))
        else:
            del result
        gc.collect()
        assert driver.stacks_empty(), (name, driver.calls)
        assert not driver.allocated(), (name, driver.calls)
        assert not [c for c in driver.calls if c[1:2] in (("raised",), ("no context",),
                                                          ("error",))], (name, driver.calls)
        assert driver.touched() == [] and driver.gil_held == [], name


def test_exchange_api_driver_failure_is_an_error_not_a_tensor(fake):
    strict = fake
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    base = get(DLPackObject.__dlpack_c_exchange_api__, b"dlpack_exchange_api")
    size = ctypes.sizeof(ctypes.c_void_p)
    from_py = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(
        ctypes.POINTER(dlc.DLManagedTensorVersioned)))(
        ctypes.c_void_p.from_address(base + 16 + size).value)
    as_dltensor = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(
        dlc.DLTensor))(ctypes.c_void_p.from_address(base + 16 + 3 * size).value)
    dl = asdlpack(CAI(_memory(fake, device=1), stream=7))
    for entry in ("cuDevicePrimaryCtxGetState", "cuCtxPushCurrent", "cuEventRecord",
                  "cuStreamWaitEvent"):
        strict.fail = {entry: 700}
        m = ctypes.POINTER(dlc.DLManagedTensorVersioned)()
        with pytest.raises(_core.CudaError, match=entry):
            from_py(dl, ctypes.byref(m))
        assert not m
        with pytest.raises(_core.CudaError, match=entry):
            as_dltensor(dl, ctypes.byref(dlc.DLTensor()))
        assert strict.current == []


# -- drivers swapped or gone while device copies live -----------------------------------------


def test_swapped_driver_never_frees_another_drivers_memory(fake):
    """FINDING: a device copy made under driver A is freed, after driver B is installed and
    has retained the same device's primary context, by B's cuMemFree (B never allocated it:
    the fake logs KeyError). Primary contexts are forgotten on a swap, but _DeviceMemory only
    checks that *a* context exists for its device. Expected: memory is only ever handed back
    to the driver that allocated it (with A gone, left alone)."""
    capsule = asdlpack(b"abcdefgh").__dlpack__(dl_device=(2, 0), max_version=(1, 0))
    ptr = todict(capsule)["data"]
    other = fake_cuda.install()
    asdlpack(b"xy").__dlpack__(dl_device=(2, 0), max_version=(1, 0))   # B retains GPU 0
    gc.collect()
    other.calls.clear()
    del capsule
    gc.collect()
    assert ("cuMemFree", ptr) not in other.calls
    assert not [c for c in other.calls if c[1:2] == ("raised",)], other.calls
    assert other.current == []


def test_capsule_deleted_after_the_driver_is_gone_is_harmless(fake):
    capsule = asdlpack(b"abcdefgh").__dlpack__(dl_device=(2, 0), max_version=(1, 0))
    held = asdlpack(asdlpack(b"wxyz").__dlpack__(dl_device=(2, 1), max_version=(1, 0)))
    fake_cuda.uninstall()
    fake.calls.clear()
    del capsule, held
    gc.collect()
    assert fake.calls == []                  # no driver: nothing is called (the memory leaks)


def test_libraries_that_are_not_a_cuda_driver(fake):
    try:
        for path, message in [("libc.so.6", r"libc\.so\.6 has no cuInit"),
                              ("/nonexistent/libcuda.so.1", "cannot be loaded")]:
            _core._cuda_driver(None, path=path)
            for _ in range(2):                         # a failed load is retried, not cached
                with pytest.raises(_core.CudaError, match=message):
                    asdlpack(CAI(NOWHERE))
                assert _core._cuda_state() == "unloaded"
            with pytest.raises(_core.CudaError, match=message):
                asdlpack(b"ab").__dlpack__(dl_device=(2, 0), max_version=(1, 0))
    finally:
        _core._cuda_driver(None)


# -- threads -----------------------------------------------------------------------------------


def test_threads_exporting_concurrently(fake):
    np = pytest.importorskip("numpy")
    ptr = _memory(fake)
    fake.stream(5)
    errors = []

    def work(i):
        try:
            for k in range(100):
                a = np.from_dlpack(asdlpack(CAI(ptr, 7)), device="cpu", copy=True)
                assert a.ravel().tolist() == list(range(6))
                capsule = asdlpack(np.arange(4, dtype=np.int32) + k).__dlpack__(
                    dl_device=(2, i % 3), max_version=(1, 0), stream=5)
                seen = fake.consume(5, todict(capsule)["data"], 16)
                fake.synchronize(5)
                assert list((ctypes.c_int32 * 4).from_buffer_copy(seen.value)) == [
                    k, k + 1, k + 2, k + 3]
                del capsule
        except Exception as e:                      # reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.collect()
    assert errors == [] and fake.stacks_empty() and not fake.allocated()
    retained = [c for c in fake.calls if c[0] == "cuDevicePrimaryCtxRetain"]
    assert sorted(retained) == [("cuDevicePrimaryCtxRetain", d) for d in range(3)]
    assert ("cuCtxPushCurrent", ctx(5)) not in fake.calls


def test_device_copy_consumed_and_re_exported_frees_once(fake):
    capsule = asdlpack(b"abcdefgh").__dlpack__(dl_device=(2, 0), max_version=(1, 0))
    first = asdlpack(capsule)
    del capsule
    again = first.__dlpack__(max_version=(1, 0))
    del first
    gc.collect()
    assert len(fake.allocated()) == 1
    host = asdlpack(again).__dlpack__(dl_device=(1, 0), max_version=(1, 0))
    assert ctypes.string_at(todict(host)["data"], 8) == b"abcdefgh"
    del again, host
    gc.collect()
    assert not fake.allocated() and fake.current == []
