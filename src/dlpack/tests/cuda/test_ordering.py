"""CUDA stream ordering (docs/spec.md §4, §10) and the findings of an earlier hostile pass,
each pinned on the strict fake driver (tests/fake_cuda.py), where each test failed before its
fix; and the fake's own rules, so that it stays as strict as libcuda."""

import ctypes
import functools
import threading

import pytest

import dlpack.ctypes as dlc
from dlpack import DLDeviceType, _core, asdlpack, todict
from dlpack.tests import fake_cuda, helpers
from dlpack.tests.fake_cuda import (
    CUDA_ERROR_INVALID_CONTEXT,
    CUDA_ERROR_INVALID_HANDLE,
    EVENT,
    LEAVE,
    POISON,
    alloc,
    ctx,
    enter,
    primary,
    query,
    synchronize,
    wait,
)
from dlpack.tests.helpers import lib

CUDA, CUDA_HOST = DLDeviceType.kDLCUDA, DLDeviceType.kDLCUDAHost


def floats(*values):
    return bytes((ctypes.c_float * len(values))(*values))


CAI = functools.partial(helpers.CAI, shape=(6,))     # the strict tests' arrays: 6 floats


def on_thread(fn):
    """fn() on a new thread (which has no CUDA context), its result or exception returned."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:              # handed back to the test
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    assert not t.is_alive()
    if "error" in out:
        raise out["error"]
    return out["value"]


def refused(fake):
    """Calls the fake refused or choked on (a strict rule pydlpack broke)."""
    return [c for c in fake.calls if c[1:2] in (("error",), ("no context",), ("raised",))]


# -- 1: cuPointerGetAttributes needs a context --------------------------------------------------


def test_1_cai_import_on_a_thread_without_a_context(fake):
    """Worker threads and JAX-only processes have no current context: the pointer query
    borrows an active primary one (before: CUDA_ERROR_INVALID_CONTEXT, the import refused)."""
    ptr = fake.device_array(floats(*range(6)), device=1)
    dl = on_thread(lambda: asdlpack(CAI(ptr)))
    assert dl.device == (CUDA, 1)
    assert fake.calls == query(ptr, borrowed=1) and refused(fake) == []


def test_1_a_current_context_is_used_as_it_is(fake):
    ptr = fake.device_array(floats(*range(6)), device=1)
    push = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(
        fake.symbols()["cuCtxPushCurrent_v2"])
    pop = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))(
        fake.symbols()["cuCtxPopCurrent_v2"])
    other = fake.context(1)                 # another library's context, current on the thread

    def work():
        assert push(other) == 0
        try:
            return asdlpack(CAI(ptr))
        finally:
            pop(ctypes.byref(ctypes.c_void_p()))

    assert on_thread(work).device == (CUDA, 1)
    # the memory is GPU 1's primary context's (checked: not another context's)
    assert fake.calls == [("cuCtxPushCurrent", other), ("cuCtxGetCurrent",),
                          ("cuPointerGetAttributes", ptr), ("cuDeviceGet", 1),
                          ("cuDevicePrimaryCtxGetState", 1), *primary(1, True),
                          ("cuCtxPopCurrent",)]


# -- 2: host consumers of pinned or managed data -----------------------------------------------


@pytest.mark.parametrize("kind", ["pinned", "managed"])
def test_2_numpy_reads_pinned_or_managed_data_after_the_producer(fake, kind):
    """np.from_dlpack(x) passes no stream and reads on the host at once: the export waits for
    the producer (before: an event wait queued on the legacy stream, NumPy saw old values)."""
    np = lib("numpy")
    memory = (ctypes.c_float * 6)(*range(6))
    ptr = getattr(fake, kind)(memory)
    side = fake.stream()
    dl = asdlpack(CAI(ptr, stream=side))
    fake.kernel(side, ptr, floats(*range(10, 16)))      # the producer's kernel, not run yet
    fake.calls.clear()
    assert np.from_dlpack(dl).tolist() == list(range(10, 16))
    # managed memory: the device is asked once whether the host may read it while kernels run
    managed = [*enter(0), ("cuDeviceGetAttribute", 89, 0), *LEAVE] if kind == "managed" else []
    assert fake.calls == synchronize(0, side) + managed


def test_2_a_gpu_consumer_of_pinned_data_still_gets_an_event(fake):
    ptr = fake.pinned((ctypes.c_float * 6)())
    side, consumer = fake.stream(), fake.stream()
    dl = asdlpack(CAI(ptr, stream=side))
    fake.calls.clear()
    dl.__dlpack__(stream=consumer, max_version=(1, 0))
    assert fake.calls == wait(0, side, consumer, first=False)


# -- 3: the GIL is released around every call that can block ------------------------------------


_USED = b"used_dltensor_versioned"      # a capsule keeps the pointer: this bytes never dies


def _consumed(capsule):
    """Take a capsule's managed tensor as a C consumer does (renaming the capsule used)."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    rename = ctypes.pythonapi.PyCapsule_SetName
    rename.argtypes = [ctypes.py_object, ctypes.c_char_p]
    m = ctypes.cast(get(capsule, b"dltensor_versioned"),
                    ctypes.POINTER(dlc.DLManagedTensorVersioned))
    rename(capsule, _USED)
    return m


def test_3_device_copy_freed_on_another_thread_while_the_device_waits_on_python(fake):
    """A library frees its tensor (a device copy we made) on its own thread while the GPU waits
    for a host flag that Python code sets: cuMemFree waits for the device, so made with the GIL
    held it hangs (before: the fake hung for its timeout and cuMemFree failed)."""
    capsule = asdlpack(b"abcdefgh").__dlpack__(dl_device=(2, 0), max_version=(1, 0))
    ptr = todict(capsule)["data"]
    m = _consumed(capsule)
    scratch = fake.device_array(bytes(8))
    side = fake.stream()
    fake.hold(side)                                  # cuStreamWaitValue32 on a host flag
    fake.kernel(side, scratch, b"released")
    fake.waiting.clear()
    opener = threading.Thread(target=lambda: (fake.waiting.wait(30), fake.release(side)))
    opener.start()
    freer = threading.Thread(target=lambda: m.contents.deleter(m))   # ctypes drops the GIL
    freer.start()
    freer.join(30)
    opener.join(30)
    assert not freer.is_alive() and not opener.is_alive()
    assert refused(fake) == [] and ("cuMemFree", ptr) in fake.calls
    assert fake.read(scratch, 8) == b"released" and not fake.allocated()


def test_3_blocking_calls_are_made_without_the_gil(fake):
    np = lib("numpy")
    ptr = fake.device_array(floats(*range(64)), device=1)
    side = fake.stream(device=1)
    dl = asdlpack(CAI(ptr, stream=side, shape=(2, 3), strides=(64, 4)))
    np.from_dlpack(dl, device="cpu")                                 # sync, a 2-D copy
    np.from_dlpack(asdlpack(CAI(ptr, stream=side)), device="cpu")    # cuMemcpyDtoH
    np.from_dlpack(asdlpack(CAI(ptr, stream=side, shape=(2, 2, 2), strides=(128, 32, 4))),
                   device="cpu")                                     # a 3-D copy
    copy = asdlpack(b"abcd").__dlpack__(dl_device=(2, 2), max_version=(1, 0))
    del copy                                                         # alloc, HtoD, free
    names = {c[0] for c in fake.calls}
    # cuEventSynchronize (an Arrow sync_event) is exercised by test_reader_arrow's host reads and
    # cuCtxSynchronize by test_driver_rules' managed-memory reads, under the same fixture check;
    # the IPC and restoring ones by test_ipc's children, which check the same
    assert fake_cuda.BLOCKING - {"cuInit", "cuEventSynchronize", "cuCtxSynchronize",
                                 "cuIpcOpenMemHandle", "cuIpcCloseMemHandle", "cuMemHostAlloc",
                                 "cuMemFreeHost", "cuMemAllocManaged"} <= names, \
        names
    assert fake.gil_held == []


# -- 4: the producer's stream's own context -----------------------------------------------------


def _written_in_another_context(fake):
    """A CAI view of data a kernel is writing on a stream of a non-primary context (PyCUDA,
    cuCtxCreate, green contexts), with the fake's call log cleared."""
    other = fake.context(1)
    side = fake.stream(context=other)
    ptr = fake.device_array(floats(*range(6)), device=1)       # the primary context's memory
    dl = asdlpack(CAI(ptr, stream=side))
    fake.kernel(side, ptr, floats(*range(10, 16)))
    fake.calls.clear()
    return other, side, ptr, dl


def test_4_event_recorded_in_the_context_of_the_producers_stream(fake):
    """PyCUDA, cuCtxCreate or a green context: the producer's stream is not in the primary
    context (before: the event, made in the primary one, could not be recorded there: 400)."""
    other, side, ptr, dl = _written_in_another_context(fake)
    dl.__dlpack__(stream=1, max_version=(1, 0))     # a consumer on GPU 1's legacy stream
    assert fake.calls == [("cuStreamGetCtx", side), *primary(1),
                          ("cuCtxPushCurrent", other), ("cuEventCreate", 2),
                          ("cuEventRecord", EVENT, side), ("cuCtxPushCurrent", ctx(1)),
                          ("cuStreamWaitEvent", 1, EVENT, 0), ("cuCtxPopCurrent",),
                          ("cuEventDestroy", EVENT), ("cuCtxPopCurrent",)]
    seen = fake.consume(1, ptr, 24, device=1)
    fake.synchronize(1, device=1)
    assert seen.value == floats(*range(10, 16))


def test_4_host_copy_synchronises_the_stream_in_its_context(fake):
    np = lib("numpy")
    other, side, _, dl = _written_in_another_context(fake)
    assert np.from_dlpack(dl, device="cpu").tolist() == list(range(10, 16))
    assert fake.calls[:4] == synchronize(1, side, context=other)


# -- 5: host-to-device copies are ordered for every consumer -------------------------------------


@pytest.mark.parametrize("stream", [None, -1])
def test_5_host_to_device_copy_lands_before_an_unordered_consumer(fake, stream):
    """torch passes dl_device without a stream and reads on its current stream, which does not
    wait for the legacy one: the copy must have landed (before: it was still queued)."""
    side = fake.stream(nonblocking=True)
    capsule = asdlpack(b"abcdefgh").__dlpack__(dl_device=(2, 0), max_version=(1, 0),
                                               stream=stream)
    ptr = todict(capsule)["data"]
    seen = fake.consume(side, ptr, 8)
    fake.synchronize(side)
    assert seen.value == b"abcdefgh"
    assert fake.calls == [*enter(0, True), *alloc(8, ptr), *LEAVE, *enter(0),
                          ("cuMemcpyHtoD", ptr, 8), ("cuStreamSynchronize", 1), *LEAVE]


def test_5_an_explicit_stream_waits_without_blocking_the_host(fake):
    side = fake.stream(nonblocking=True)
    capsule = asdlpack(b"abcdefgh").__dlpack__(dl_device=(2, 0), max_version=(1, 0),
                                               stream=side)
    ptr = todict(capsule)["data"]
    assert fake.read(ptr, 8) == bytes([POISON]) * 8       # staged; lands on the legacy stream
    seen = fake.consume(side, ptr, 8)
    fake.synchronize(side)
    assert seen.value == b"abcdefgh"


# -- 6: host-NUMA VMM memory is not host-readable ----------------------------------------------


def test_6_host_numa_vmm_memory_is_device_memory_to_readers(fake):
    """CU_MEMORYTYPE_HOST without a host mapping (before: kDLCUDAHost, read by the host)."""
    np = lib("numpy")
    ptr = fake.vmm_host(floats(*range(6)))
    dl = asdlpack(CAI(ptr))
    assert dl.device == (CUDA, 0)
    assert not hasattr(dl, "__array_interface__")
    with pytest.raises(BufferError, match="kDLCUDA:0"):
        memoryview(dl)
    assert np.from_dlpack(dl, device="cpu").tolist() == list(range(6))  # through the driver


def test_6_pinned_memory_is_host_memory_at_its_own_address(fake):
    host, registered = (ctypes.c_float * 6)(*range(6)), (ctypes.c_float * 6)(*range(6))
    fake.attributes[ctypes.addressof(host)] = (1, 0, False, ctypes.addressof(host) + 4096)
    assert asdlpack(CAI(ctypes.addressof(host))).device == (CUDA, 0)  # a disjoint mapping
    assert asdlpack(CAI(fake.pinned(registered))).device == (CUDA_HOST, 0)


# -- 7: strided device-to-host copies move the elements -----------------------------------------


def _moved(calls):
    """Bytes the driver copied device to host."""
    return sum(c[2] * c[3] if c[0] == "cuMemcpy2D" else c[2] for c in calls
               if c[0] in ("cuMemcpy2D", "cuMemcpyDtoH") and isinstance(c[1], int))


def test_7_a_column_copies_its_elements_not_the_tensor(fake):
    """A 4 KiB column of a 1 MiB tensor: 4 KiB cross (before: the whole span, ~1 MiB)."""
    np = lib("numpy")
    big = np.arange(1024 * 256, dtype=np.float32).reshape(1024, 256)
    ptr = fake.device_array(big.tobytes())
    dl = asdlpack(CAI(ptr + 5 * 4, shape=(1024,), strides=(1024,)))
    fake.calls.clear()
    assert np.from_dlpack(dl, device="cpu").tolist() == big[:, 5].tolist()
    assert _moved(fake.calls) == 4096
    assert [c for c in fake.calls if c[0] == "cuMemcpy2D"] == [("cuMemcpy2D", ptr + 20, 4,
                                                                 1024, 1024)]


_VIEWS = {        # of a (40, 48) and b (8, 12, 20), both over the same 1920 float32
    "a[:, 5]": lambda np, a, b: a[:, 5],
    "a[::-1]": lambda np, a, b: a[::-1],
    "a.T": lambda np, a, b: a.T,
    "a[::3, 1::2]": lambda np, a, b: a[::3, 1::2],
    "a[::-2, ::-3]": lambda np, a, b: a[::-2, ::-3],
    "b[1, ::-1, ::2]": lambda np, a, b: b[1, ::-1, ::2],
    "b.transpose(2, 0, 1)[:, ::2]": lambda np, a, b: b.transpose(2, 0, 1)[:, ::2],
    "broadcast_to(a[3:4, 2:5], (4, 3))": lambda np, a, b: np.broadcast_to(a[3:4, 2:5], (4, 3)),
    "b[:, :, 1:2]": lambda np, a, b: b[:, :, 1:2],
    "a[5:, 7:][::7, ::-5]": lambda np, a, b: a[5:, 7:][::7, ::-5],
}


@pytest.mark.parametrize("max_pitch", [2**31 - 1, 64], ids=["2-D", "row by row"])
@pytest.mark.parametrize("view", list(_VIEWS))
def test_7_strided_layouts_against_numpy(fake, view, max_pitch):
    np = lib("numpy")
    fake.max_pitch = max_pitch
    base = np.arange(40 * 48, dtype=np.float32)
    ptr = fake.device_array(base.tobytes())
    v = _VIEWS[view](np, base.reshape(40, 48), base.reshape(8, 12, 20))
    offset = v.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    dl = asdlpack(CAI(ptr + offset, shape=v.shape, strides=v.strides))
    fake.calls.clear()
    assert np.from_dlpack(dl, device="cpu").tolist() == v.tolist()
    span = sum((n - 1) * abs(s) for n, s in zip(v.shape, v.strides, strict=True)) + v.itemsize
    assert _moved(fake.calls) <= v.nbytes or _moved(fake.calls) == span  # elements, or the span


# -- 8: the private copy of read-only data for legacy consumers is on the device ----------------


def test_8_legacy_consumer_of_read_only_cuda_data_gets_a_device_copy(fake_sync):
    """JAX on GPU calls __dlpack__() without max_version (before: BufferError, no host copy
    possible). The copy waits for the producer and lands on the consumer's stream (a driver
    without stream-ordered allocation: cuMemAlloc and cuMemFree)."""
    fake = fake_sync
    ptr = fake.device_array(floats(*range(6)), device=1)
    side = fake.stream(device=1)
    dl = asdlpack(CAI(ptr, stream=side, readonly=True))
    fake.kernel(side, ptr, floats(*range(10, 16)))
    fake.calls.clear()
    capsule = dl.__dlpack__()
    info = todict(capsule)
    assert info["version"] is None and info["device"] == (CUDA, 1) and info["data"] != ptr
    copy = info["data"]
    assert fake.calls == [*wait(1, side, 1, first=False), *enter(1), *alloc(24, copy), *LEAVE,
                          *primary(1), ("cuCtxPushCurrent", ctx(1)),
                          ("cuMemcpyDtoDAsync", copy, ptr, 24, 1), *LEAVE]
    seen = fake.consume(1, copy, 24, device=1)
    fake.synchronize(1, device=1)
    assert seen.value == floats(*range(10, 16))
    with pytest.raises(BufferError, match="copy=False"):
        dl.__dlpack__(copy=False)
    del capsule
    assert ("cuMemFree", copy) in fake.calls and not fake.allocated()


def test_8_stream_minus_1_settles_the_copy_on_the_producers_stream(fake):
    ptr = fake.device_array(floats(*range(6)), device=1)
    side = fake.stream(device=1)
    dl = asdlpack(CAI(ptr, stream=side, readonly=True))
    fake.kernel(side, ptr, floats(*range(10, 16)))
    capsule = dl.__dlpack__(stream=-1)
    assert fake.read(todict(capsule)["data"], 24) == floats(*range(10, 16))


def test_8_the_copy_keeps_the_layout_and_copy_true_is_served(fake):
    np = lib("numpy")
    base = np.arange(24, dtype=np.float32)
    ptr = fake.device_array(base.tobytes())
    v = base.reshape(4, 6)[::-1, ::2]
    offset = v.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    dl = asdlpack(CAI(ptr + offset, shape=v.shape, strides=v.strides, readonly=True))
    for capsule in (dl.__dlpack__(), dl.__dlpack__(max_version=(1, 0), copy=True)):
        info = todict(capsule)
        assert info["strides"] == dl.strides and info["device"] == (CUDA, 0)
        back = asdlpack(capsule)                 # read back through a host copy
        assert np.from_dlpack(back, device="cpu").tolist() == v.tolist()
    assert todict(dl.__dlpack__(max_version=(1, 0), copy=True))["flags"] == 2    # IS_COPIED


# -- 9: the CAI of a __dlpack__ provider names its stream at each export -------------------------


_keep = []


def _capsule(ptr, device_id, n=6):
    """A versioned capsule of n float32 on CUDA device device_id (kept alive here)."""
    shape = (ctypes.c_int64 * 1)(n)
    m = dlc.DLManagedTensorVersioned()
    m.version.major = 1
    m.dl_tensor.data = ptr
    m.dl_tensor.device = dlc.DLDevice(2, device_id)
    m.dl_tensor.ndim = 1
    m.dl_tensor.dtype = dlc.DLDataType(2, 32, 1)
    m.dl_tensor.shape = shape
    _keep.append((m, shape))
    return helpers.capsule(ctypes.addressof(m), b"dltensor_versioned")


class CurrentStreamProducer:
    """A __dlpack__ producer whose CUDA array interface names its current stream, as CuPy's
    does; the stream changes as the user switches streams."""

    def __init__(self, ptr, stream):
        self.ptr, self.stream, self.asked = ptr, stream, []

    def __dlpack__(self, stream=None, max_version=None, **kwargs):
        self.asked.append(stream)
        return _capsule(self.ptr, 1)

    def __dlpack_device__(self):
        return (2, 1)

    @property
    def __cuda_array_interface__(self):
        return {"shape": (6,), "typestr": "<f4", "data": (self.ptr, False), "version": 3,
                "stream": self.stream}


def test_9_cai_of_a_dlpack_provider_names_its_current_stream(fake):
    """Before: stream 1, fixed when the provider was imported."""
    producer = CurrentStreamProducer(fake.device_array(bytes(24), device=1), 7)
    dl = asdlpack(producer)
    assert dl.__cuda_array_interface__["stream"] == 7
    producer.stream = 9
    assert dl.__cuda_array_interface__["stream"] == 9
    producer.stream = None
    assert dl.__cuda_array_interface__["stream"] is None
    assert fake.calls == []


# -- 10: zero-size CAI ---------------------------------------------------------------------------


def test_10_zero_size_cai_needs_no_pointer_query(fake):
    """A pool's pointer one past the end of an allocation (before: memory type 0, refused)."""
    end = fake.device_array(bytes(256), device=1) + 256
    dl = asdlpack(CAI(end, shape=(0, 3)))
    assert dl.size == 0 and dl.device == (CUDA, 0) and fake.calls == []
    assert todict(dl.__dlpack__(max_version=(1, 0)))["data"] == end


# -- 11: primary contexts reset by another library -----------------------------------------------


def test_11_a_primary_context_reset_by_another_library_is_retained_again(fake):
    """Numba's cuda.close() resets the primary context (cuDevicePrimaryCtxReset) and with it
    frees every allocation (before: the cached context was pushed, inactive: 709)."""
    old = asdlpack(b"abcd").__dlpack__(dl_device=(2, 1), max_version=(1, 0))
    old_ptr = todict(old)["data"]
    fake.reset_primary(1)
    fake.calls.clear()
    new = asdlpack(b"wxyz").__dlpack__(dl_device=(2, 1), max_version=(1, 0))
    assert fake.calls[:4] == [*primary(1), *primary(1),       # inactive, and still under lock
                              ("cuDeviceGet", 1), ("cuDevicePrimaryCtxRetain", 1)]
    assert fake.read(todict(new)["data"], 4) == b"wxyz"
    del old                       # its memory went with the reset; the address may be reused
    assert ("cuMemFree", old_ptr) not in fake.calls and refused(fake) == []
    del new
    assert not fake.allocated()


def test_11_memory_of_a_reset_context_is_not_freed_again(fake):
    old = asdlpack(b"abcd").__dlpack__(dl_device=(2, 1), max_version=(1, 0))
    fake.reset_primary(1)
    fake.calls.clear()
    del old
    assert fake.calls == [("cuDevicePrimaryCtxGetState", 1)] and refused(fake) == []


# -- findings of the earlier hostile pass --------------------------------------------------------


@pytest.mark.parametrize("kind", ["pinned", "device"])
def test_finding_to_pointer_orders_like_dlpack(fake, kind):
    """dlpack.ctypes.to_pointer hands a C function what __dlpack__() would, ordered the same
    way (before: no driver call at all)."""
    side = fake.stream()
    if kind == "pinned":
        memory = (ctypes.c_float * 6)(*range(6))
        ptr = fake.pinned(memory)
    else:
        ptr = fake.device_array(floats(*range(6)))
    dl = asdlpack(CAI(ptr, stream=side))
    fake.kernel(side, ptr, floats(*range(10, 16)))
    fake.calls.clear()
    m = dlc.to_pointer(dl)
    try:
        if kind == "pinned":        # a C function may read it on the host at once
            assert fake.calls == synchronize(0, side, first=False)
            assert list(memory) == list(range(10, 16))
        else:                       # it runs on the legacy stream, which now waits
            assert fake.calls == wait(0, side, 1, first=False)
    finally:
        m.contents.deleter(m)


# -- the fake's rules: it must stay as strict as libcuda ------------------------------------------


def _entry(fake, name, *argtypes):
    return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(fake.symbols()[name])


def test_fake_rule_no_context_no_query(fake):
    query_fn = _entry(fake, "cuPointerGetAttributes", ctypes.c_uint,
                      ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_void_p),
                      ctypes.c_uint64)
    mem = ctypes.c_uint(9)
    attrs = (ctypes.c_int * 1)(2)
    values = (ctypes.c_void_p * 1)(ctypes.addressof(mem))
    assert query_fn(1, attrs, values, 0x1234) == CUDA_ERROR_INVALID_CONTEXT
    push = _entry(fake, "cuCtxPushCurrent_v2", ctypes.c_void_p)
    assert push(fake.context(0)) == 0
    assert query_fn(1, attrs, values, 0x1234) == 0 and mem.value == 0    # unknown: type 0
    assert on_thread(lambda: query_fn(1, attrs, values, 0x1234)) == CUDA_ERROR_INVALID_CONTEXT
    _entry(fake, "cuCtxPopCurrent_v2", ctypes.POINTER(ctypes.c_void_p))(
        ctypes.byref(ctypes.c_void_p()))


def test_fake_rule_events_and_streams_belong_to_contexts(fake):
    a, b = fake.context(0), fake.context(0)
    stream_b = fake.stream(context=b)
    push = _entry(fake, "cuCtxPushCurrent_v2", ctypes.c_void_p)
    create = _entry(fake, "cuEventCreate", ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint)
    record = _entry(fake, "cuEventRecord", ctypes.c_void_p, ctypes.c_void_p)
    get_ctx = _entry(fake, "cuStreamGetCtx", ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
    event, found = ctypes.c_void_p(), ctypes.c_void_p()
    push(a)
    assert create(ctypes.byref(event), 2) == 0
    assert record(event, stream_b) == CUDA_ERROR_INVALID_HANDLE      # a stream of context b
    assert record(event, 1) == 0                                      # a's legacy stream
    assert get_ctx(stream_b, ctypes.byref(found)) == 0 and found.value == b
    # undefined in libcuda: answered, and listed for the fixture to fail the test on
    assert get_ctx(0xBAD, ctypes.byref(found)) == CUDA_ERROR_INVALID_HANDLE
    assert fake.undefined == [("cuStreamGetCtx", 0xBAD)]
    fake.undefined.clear()
    fake.current.clear()


def test_fake_rule_managed_memory_is_fenced_while_work_runs_without_concurrent_access(fake):
    """Without CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS the host sees managed memory as
    POISON while any work is queued on its device (libcuda: SIGSEGV), kernels see its bytes;
    with it, the host reads it at any time."""
    memory = (ctypes.c_ubyte * 4)(*b"old!")
    ptr = fake.managed(memory, device=1)
    side = fake.stream(device=1)
    fake.kernel(side, ptr, b"new!", device=1)
    assert bytes(memory) == b"old!"                 # concurrent access: the host may look
    fake.run()
    fake.concurrent_managed = 0
    fake.kernel(side, fake.device_array(bytes(4), device=1), b"busy", device=1)
    assert bytes(memory) == bytes([POISON]) * 4     # another kernel runs: fenced
    fake.kernel(side, ptr, b"kern", device=1)
    seen = fake.consume(side, ptr, 4, device=1)
    fake.run()
    assert bytes(memory) == b"kern" and seen.value == b"kern"


def test_fake_rule_streams_are_queues(fake):
    ptr = fake.device_array(b"old!")
    blocking, free = fake.stream(), fake.stream(nonblocking=True)
    fake.kernel(blocking, ptr, b"new!")
    early = fake.consume(free, ptr, 4)         # not ordered against the producer
    late = fake.consume(1, ptr, 4)             # the legacy stream waits for blocking streams
    assert fake.read(ptr, 4) == b"old!"        # nothing has run yet
    fake.synchronize(free)
    assert early.value == b"old!"              # deterministically stale
    fake.synchronize(1)
    assert late.value == b"new!"
    fake.hold(blocking)
    fake.kernel(blocking, ptr, b"held")
    fake.run()
    assert fake.read(ptr, 4) == b"new!" and fake.pending() == ["kernel " + hex(ptr)]
    fake.release(blocking)
    fake.run()
    assert fake.read(ptr, 4) == b"held"


def test_fake_rule_a_wait_with_the_gil_held_hangs(fake):
    if fake_cuda._load_shim() is None:
        pytest.skip("no C compiler for the fake's shim")
    fake.hang_timeout = 0.3
    side = fake.stream()
    fake.hold(side)
    fake.kernel(side, fake.device_array(bytes(4)), b"late")
    push = _entry(fake, "cuCtxPushCurrent_v2", ctypes.c_void_p)
    sync = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(fake.symbols()["cuStreamSynchronize"])
    push(ctx(0))                                 # PYFUNCTYPE: called with the GIL held
    threading.Thread(target=lambda: (fake.waiting.wait(5), fake.release(side))).start()
    assert sync(side) == fake_cuda.CUDA_ERROR_LAUNCH_TIMEOUT
    assert fake.calls[-1][:3] == ("cuStreamSynchronize", "error", 702)
    assert fake.gil_held == ["cuStreamSynchronize"]
    fake.gil_held.clear()
    fake.current.clear()


def test_fake_rule_device_memory_has_no_host_mapping(fake):
    ptr = fake.device_array(b"secret")
    assert fake.touched() == []
    assert ctypes.string_at(ptr, 6) == bytes(6)      # a host read: zeros, not the bytes
    assert fake.touched() != []
    fake_cuda._forget_reads()                        # (for the fixture's check)
    assert fake.read(ptr, 6) == b"secret"


def test_fake_rule_pageable_copies_land_later(fake):
    push = _entry(fake, "cuCtxPushCurrent_v2", ctypes.c_void_p)
    copy = _entry(fake, "cuMemcpyHtoD_v2", ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t)
    ptr = fake.device_array(b"....")
    push(ctx(0))
    assert copy(ptr, ctypes.c_char_p(b"data"), 4) == 0
    assert fake.read(ptr, 4) == b"...." and fake.pending() == [f"HtoD {ptr:#x}"]
    fake.synchronize(1)
    assert fake.read(ptr, 4) == b"data"
    fake.current.clear()


def test_the_error_names_of_the_fake_reach_the_message(fake):
    fake.fail["cuMemAlloc"] = fake_cuda.CUDA_ERROR_INVALID_CONTEXT
    with pytest.raises(_core.CudaError, match=r"CUDA_ERROR_INVALID_CONTEXT \(201\)"):
        asdlpack(b"ab").__dlpack__(dl_device=(2, 0), max_version=(1, 0))
