"""Real-GPU exchanges among PyTorch CUDA, CuPy, Numba and JAX; skipped cleanly without a GPU.

Ordering is checked deterministically: the producer's stream is held shut by
``cuStreamWaitValue32`` on a host flag, so its work cannot run before the test opens the flag,
after the consumer was queued (or, for host readers, from another thread once the reader
blocks, which it can only do with the GIL released).
"""

import ctypes
import functools
import gc
import subprocess
import sys
import textwrap
import threading
import weakref

import pytest

from dlpack import DLDeviceType, asdlpack, todict

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU on this machine", allow_module_level=True)

CUDA, CUDA_HOST, CUDA_MANAGED = (DLDeviceType.kDLCUDA, DLDeviceType.kDLCUDAHost,
                                 DLDeviceType.kDLCUDAManaged)
_cu = ctypes.CDLL("libcuda.so.1")


def _entry(*names):
    for name in names:
        fn = getattr(_cu, name, None)
        if fn is not None:
            fn.restype = ctypes.c_int
            return fn
    raise AttributeError(names[0])


def _check(rc, what):
    if rc == 801:                       # CUDA_ERROR_NOT_SUPPORTED
        pytest.skip(f"{what} is not supported on this GPU or driver")
    assert rc == 0, f"{what} failed with CUDA error {rc}"


class Gate:
    """A host flag that holds streams shut (cuStreamWaitValue32 >= 1) until ``open``: pinned,
    portable and device-mapped, so a stream of any context can wait on it."""

    def __init__(self):
        torch.zeros(1, device="cuda")           # torch's context is current on this thread
        alloc = _entry("cuMemHostAlloc")
        alloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint]
        device_pointer = _entry("cuMemHostGetDevicePointer_v2")
        device_pointer.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p,
                                   ctypes.c_uint]
        host, device = ctypes.c_void_p(), ctypes.c_uint64()
        _check(alloc(ctypes.byref(host), 4, 3), "cuMemHostAlloc")     # PORTABLE | DEVICEMAP
        _check(device_pointer(ctypes.byref(device), host, 0), "cuMemHostGetDevicePointer")
        self.flag = ctypes.c_int32.from_address(host.value)
        self.flag.value = 0
        self.device_address = device.value
        free = _entry("cuMemFreeHost")
        free.argtypes = [ctypes.c_void_p]
        weakref.finalize(self, free, host.value)
        self._wait = _entry("cuStreamWaitValue32_v2", "cuStreamWaitValue32")
        self._wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]

    def hold(self, stream):
        """stream (a torch stream or a CUstream handle) waits for the flag from here on."""
        handle = getattr(stream, "cuda_stream", stream)
        _check(self._wait(handle, self.device_address, 1, 0), "cuStreamWaitValue32")  # GEQ

    def open(self):
        self.flag.value = 1


def _side(gate):
    """A side stream held shut by gate, for the producer's work."""
    side = torch.cuda.Stream()
    gate.hold(side)
    return side


class _CAIView:
    """Speaks only the CUDA array interface, reporting the stream its data is on."""

    def __init__(self, t, stream):
        self.t = t
        cai = dict(t.__cuda_array_interface__)
        cai["stream"] = getattr(stream, "cuda_stream", stream)
        self.__cuda_array_interface__ = cai


def _cai(ptr, n, stream, readonly=False):
    return type("CAIOnly", (), {"__cuda_array_interface__": {
        "shape": (n,), "typestr": "<f4", "data": (ptr, readonly), "version": 3,
        "stream": getattr(stream, "cuda_stream", stream)}})()


def _run_clean(code, timeout=120):
    """code in a fresh interpreter (a GIL-holding hang there fails the test, not the suite)."""
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=timeout)
    assert run.returncode == 0, run.stdout + run.stderr


# -- the main thread, in order ------------------------------------------------------------------

def test_torch_cuda_round_trip_same_memory():
    t = torch.arange(1000, device="cuda", dtype=torch.float32)
    dl = asdlpack(t)
    assert dl.device == (CUDA, t.device.index or 0)
    back = torch.from_dlpack(dl)
    assert back.data_ptr() == t.data_ptr() and torch.equal(back, t)
    cai = dl.__cuda_array_interface__
    assert cai["data"][0] == t.data_ptr()
    assert not hasattr(dl, "__array_interface__")


def test_side_stream_work_is_waited_for():
    gate = Gate()
    side = _side(gate)
    t = torch.zeros(1 << 20, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        t.fill_(3.0)                            # queued behind the closed gate
    total = torch.from_dlpack(asdlpack(_CAIView(t, side))).sum()   # default stream: an event
    gate.open()
    assert total.item() == 3.0 * t.numel()


def test_torch_side_stream_is_ordered_through_its_exchange_api():
    cupy = pytest.importorskip("cupy")
    gate = Gate()
    side = _side(gate)
    t = torch.zeros(1 << 20, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        t.fill_(3.0)
        dl = asdlpack(t)
        assert dl.__cuda_array_interface__["stream"] == side.cuda_stream
    total = cupy.from_dlpack(dl).sum()      # CuPy's stream waits for torch's side stream
    gate.open()
    assert float(total) == 3.0 * t.numel()
    assert dl.__cuda_array_interface__["stream"] == 1      # torch's default stream: the legacy


def test_per_thread_default_stream_consumer_of_a_side_stream_tensor():
    gate = Gate()
    side = _side(gate)
    t = torch.zeros(1 << 20, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        t.fill_(5.0)
        capsule = asdlpack(t).__dlpack__(max_version=(1, 0), stream=2)
    y = torch.from_dlpack(capsule)
    total = y.sum()
    gate.open()
    assert y.data_ptr() == t.data_ptr() and total.item() == 5.0 * t.numel()


def test_cupy_per_thread_default_stream():
    cupy = pytest.importorskip("cupy")
    gate = Gate()
    side = _side(gate)
    t = torch.zeros(1 << 16, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        t.fill_(7.0)
        dl = asdlpack(t)
    with cupy.cuda.Stream.ptds:                 # CuPy passes stream=2 to __dlpack__
        total = cupy.from_dlpack(dl).sum()
    gate.open()
    assert float(total) == 7.0 * t.numel()


def test_cupy_and_numba_consumers():
    cupy = pytest.importorskip("cupy")
    numba_cuda = pytest.importorskip("numba.cuda")
    t = torch.arange(16, device="cuda", dtype=torch.float32)
    c = cupy.from_dlpack(asdlpack(t))
    assert c.data.ptr == t.data_ptr()
    n = numba_cuda.as_cuda_array(asdlpack(t))
    assert n.copy_to_host().tolist() == list(range(16))
    x = torch.from_dlpack(asdlpack(numba_cuda.to_device(t.cpu().numpy())))
    assert x.is_cuda and x.tolist() == list(range(16))


def test_cupy_array_interface_names_its_current_stream():
    cupy = pytest.importorskip("cupy")
    a = cupy.arange(8, dtype=cupy.float32)
    dl = asdlpack(a)
    with cupy.cuda.Stream(non_blocking=True) as s:
        assert dl.__cuda_array_interface__["stream"] == s.ptr
    assert dl.__cuda_array_interface__["stream"] in (None, 1)


def test_numba_consumer_waits_for_the_reported_side_stream():
    numba_cuda = pytest.importorskip("numba.cuda")
    gate = Gate()
    side = _side(gate)
    t = torch.zeros(1 << 16, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        t.fill_(2.0)
        arr = numba_cuda.as_cuda_array(asdlpack(t))
    assert arr.__cuda_array_interface__["data"][0] == t.data_ptr()
    gate.open()
    assert float(arr.copy_to_host().sum()) == 2.0 * t.numel()


def test_device_ordinal_of_second_gpu():
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU only")
    t = torch.ones(4, device="cuda:1")
    view = _CAIView(t, torch.cuda.current_stream(1))
    assert asdlpack(view).device == (CUDA, 1)


def test_torch_tensor_off_the_current_device_is_refused_as_torch_refuses_it():
    """torch's __dlpack__ refuses a tensor off the current device; its exchange API (the fast
    path) does not: pydlpack refuses as torch does, at import (the CUDA array interface, next in
    the protocol order, then serves) and at each export of a tensor taken through the API."""
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU only")
    t = torch.ones(4, device="cuda:0")
    taken = asdlpack(t)                          # on its own device: torch's exchange API
    with torch.cuda.device(1):
        with pytest.raises(BufferError, match="different CUDA device"):
            t.__dlpack__()
        with pytest.raises(BufferError, match="different CUDA device"):
            taken.__dlpack__(max_version=(1, 0))
        through_cai = asdlpack(t)                # __dlpack__ refused; the CAI has no such rule
        assert todict(through_cai.__dlpack__(max_version=(1, 0)))["data"] == t.data_ptr()
    assert todict(taken.__dlpack__(max_version=(1, 0)))["data"] == t.data_ptr()


def test_no_leak_on_gpu():
    t = torch.ones(1024, device="cuda")
    before = torch.cuda.memory_allocated()
    for _ in range(10_000):
        torch.from_dlpack(asdlpack(t))
    gc.collect()
    assert torch.cuda.memory_allocated() == before


# -- host copies and host readers ---------------------------------------------------------------

def test_device_to_host_copies_for_dlpack_and_cai_only_providers():
    np = pytest.importorskip("numpy")
    t = torch.arange(12, device="cuda", dtype=torch.float32).reshape(3, 4)
    for provider in (t, _CAIView(t, torch.cuda.current_stream())):
        host = np.from_dlpack(asdlpack(provider), device="cpu")
        assert host.tolist() == t.cpu().tolist()
    for strided in (t[:, ::-2], t.T, t[::2, 1:3]):
        host = np.from_dlpack(asdlpack(_CAIView(strided, torch.cuda.current_stream())),
                              device="cpu")
        assert host.tolist() == strided.cpu().tolist()


def test_a_column_of_a_large_tensor_copies_the_column():
    np = pytest.importorskip("numpy")
    big = torch.arange(4096 * 4096, device="cuda", dtype=torch.float32).reshape(4096, 4096)
    column = big[:, 7]
    host = np.from_dlpack(asdlpack(_CAIView(column, torch.cuda.current_stream())),
                          device="cpu")
    assert host.tolist() == column.cpu().tolist()


def _reader_opens_the_gate(gate, read):
    """read() on the host while the producer is held: a thread opens the gate once the reader
    is about to wait (it can only run if the reader released the GIL)."""
    about = threading.Event()
    opener = threading.Thread(target=lambda: (about.wait(60), gate.open()))
    opener.start()
    about.set()
    try:
        return read()
    finally:
        gate.open()
        opener.join(60)


def test_pinned_host_data_is_read_after_its_producer():
    np = pytest.importorskip("numpy")
    gate = Gate()
    side = _side(gate)
    pinned = torch.zeros(1 << 16, dtype=torch.float32, pin_memory=True)
    source = torch.full((1 << 16,), 4.0, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        pinned.copy_(source, non_blocking=True)     # lands only once the gate opens
    dl = asdlpack(_cai(pinned.data_ptr(), pinned.numel(), side))
    assert dl.device[0] == CUDA_HOST
    host = _reader_opens_the_gate(gate, lambda: np.from_dlpack(dl))    # no stream: synchronised
    assert float(host.sum()) == 4.0 * pinned.numel()


def test_managed_data_is_read_after_its_producer():
    np = pytest.importorskip("numpy")
    alloc = _entry("cuMemAllocManaged")
    alloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ctypes.c_uint]
    memset = _entry("cuMemsetD32Async")
    memset.argtypes = [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p]
    free = _entry("cuMemFree_v2")
    free.argtypes = [ctypes.c_uint64]
    torch.zeros(1, device="cuda")               # torch's context is current on this thread
    n = 1 << 16
    ptr = ctypes.c_uint64()
    _check(alloc(ctypes.byref(ptr), 4 * n, 1), "cuMemAllocManaged")     # CU_MEM_ATTACH_GLOBAL
    try:
        gate = Gate()
        side = _side(gate)
        _check(memset(ptr.value, 0x40400000, n, side.cuda_stream), "cuMemsetD32Async")  # 3.0
        dl = asdlpack(_cai(ptr.value, n, side))
        assert dl.device[0] == CUDA_MANAGED
        host = _reader_opens_the_gate(gate, functools.partial(np.from_dlpack, dl))
        assert float(host.sum()) == 3.0 * n
        del host, dl
    finally:
        torch.cuda.synchronize()
        free(ptr.value)


def test_managed_data_is_read_as_the_device_allows_while_another_stream_runs():
    """Without CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS (WSL2, Windows, older GPUs) the
    CPU may not touch managed memory while any kernel runs: the host read synchronises the
    context first, waiting for an unrelated stream held shut; with it (spec §10), the read
    does not wait for that stream."""
    np = pytest.importorskip("numpy")
    attribute = _entry("cuDeviceGetAttribute")
    attribute.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int]
    alloc = _entry("cuMemAllocManaged")
    alloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ctypes.c_uint]
    free = _entry("cuMemFree_v2")
    free.argtypes = [ctypes.c_uint64]
    torch.zeros(1, device="cuda")               # torch's context is current on this thread
    concurrent = ctypes.c_int()
    _check(attribute(ctypes.byref(concurrent), 89, torch.cuda.current_device()),
           "cuDeviceGetAttribute(CONCURRENT_MANAGED_ACCESS)")
    n = 1 << 12
    ptr = ctypes.c_uint64()
    _check(alloc(ctypes.byref(ptr), 4 * n, 1), "cuMemAllocManaged")     # CU_MEM_ATTACH_GLOBAL
    try:
        torch.cuda.synchronize()                # no kernel runs while the host writes
        (ctypes.c_float * n).from_address(ptr.value)[:] = [2.0] * n
        dl = asdlpack(_cai(ptr.value, n, None))      # no producer's work to wait for
        gate = Gate()
        busy = _side(gate)
        with torch.cuda.stream(busy):
            torch.ones(1 << 20, device="cuda").mul_(2.0)    # runs once the gate opens
        if concurrent.value:
            host = np.from_dlpack(dl)
            assert gate.flag.value == 0             # read while the other stream still waits
        else:
            host = _reader_opens_the_gate(gate, functools.partial(np.from_dlpack, dl))
        assert float(host.sum()) == 2.0 * n
        gate.open()
        del host, dl
    finally:
        torch.cuda.synchronize()
        free(ptr.value)


# -- threads, contexts, GIL ---------------------------------------------------------------------

def test_threads_without_a_context():
    np = pytest.importorskip("numpy")
    t = torch.arange(64, device="cuda", dtype=torch.float32)
    view = _CAIView(t, torch.cuda.current_stream())
    out = {}

    def work():             # a new thread: no CUDA context is current on it
        try:
            dl = asdlpack(view)
            out["device"] = dl.device
            out["host"] = np.from_dlpack(dl, device="cpu").tolist()
        except BaseException as e:
            out["error"] = e

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(60)
    assert "error" not in out, out.get("error")
    assert out["device"] == (CUDA, t.device.index or 0) and out["host"] == list(range(64))


def test_memory_of_another_context_is_refused():
    """Memory of a context made with cuCtxCreate (PyCUDA does so) is not mapped in the primary
    context where torch runs: refused, naming the context, instead of an illegal address."""
    create = _entry("cuCtxCreate_v2")
    create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint, ctypes.c_int]
    destroy = _entry("cuCtxDestroy_v2")
    destroy.argtypes = [ctypes.c_void_p]
    pop = _entry("cuCtxPopCurrent_v2")
    pop.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    alloc = _entry("cuMemAlloc_v2")
    alloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    torch.zeros(1, device="cuda")
    context, ptr = ctypes.c_void_p(), ctypes.c_uint64()
    _check(create(ctypes.byref(context), 0, torch.cuda.current_device()), "cuCtxCreate")
    try:
        _check(alloc(ctypes.byref(ptr), 4 * 64), "cuMemAlloc")
        pop(ctypes.byref(ctypes.c_void_p()))         # the thread's context is torch's again
        with pytest.raises(BufferError, match="primary context"):
            asdlpack(_cai(ptr.value, 64, None))
    finally:
        destroy(context)                             # frees ptr with it


def _run_or_skip(code, timeout=120):
    """_run_clean, where exit status 3 means the scene could not be set up: a skip, with what
    the child printed."""
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=timeout)
    if run.returncode == 3:
        pytest.skip(run.stdout.strip())
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_copy_outliving_a_primary_context_reset_never_frees_another_librarys_memory():
    """Numba's cuda.close() resets the primary context (freeing pydlpack's device copy); another
    library re-activates it and its cuMemAlloc gets the same address. pydlpack's deleter must
    leave that allocation alone (its buffer ID differs; spec §10). A fresh process without
    torch: the reset would break torch's context."""
    _run_or_skip("""
        import ctypes, sys
        from dlpack import asdlpack, todict
        cu = ctypes.CDLL("libcuda.so.1")
        u64, ref = ctypes.c_uint64, ctypes.byref
        capsule = asdlpack(bytes(range(256))).__dlpack__(dl_device=(2, 0), max_version=(1, 0))
        ptr = todict(capsule)["data"]
        dev, ctx, theirs = ctypes.c_int(), ctypes.c_void_p(), u64()
        assert cu.cuDeviceGet(ref(dev), 0) == 0
        reset = getattr(cu, "cuDevicePrimaryCtxReset_v2", None) or cu.cuDevicePrimaryCtxReset
        assert reset(dev) == 0                          # Numba's cuda.close()
        assert cu.cuDevicePrimaryCtxRetain(ref(ctx), dev) == 0
        assert cu.cuCtxPushCurrent_v2(ctx) == 0
        assert cu.cuMemAlloc_v2(ref(theirs), u64(256)) == 0
        if theirs.value != ptr:
            print("the allocator did not hand the freed address out again")
            sys.exit(3)
        del capsule                                     # pydlpack's deleter runs
        assert cu.cuMemsetD8_v2(theirs, ctypes.c_ubyte(7), ctypes.c_size_t(256)) == 0
        assert cu.cuCtxSynchronize() == 0
        assert cu.cuMemFree_v2(theirs) == 0             # still theirs: not freed by pydlpack
    """)


def test_a_thread_without_a_context_borrows_the_active_one_and_makes_none_on_gpu_0():
    """torch runs on the last GPU only: a worker thread's import of its memory borrows that
    primary context, and GPU 0 gets none (hundreds of MiB; refused where GPU 0 is
    EXCLUSIVE_PROCESS; spec §10). A fresh process, in which GPU 0 has no context yet."""
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU only")
    _run_or_skip("""
        import ctypes, sys, threading
        import torch
        from dlpack import asdlpack
        cu = ctypes.CDLL("libcuda.so.1")
        last = torch.cuda.device_count() - 1
        torch.cuda.set_device(last)
        t = torch.arange(8, device=f"cuda:{last}", dtype=torch.float32)
        dev, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
        assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0

        def gpu_0_active():
            assert cu.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags),
                                                 ctypes.byref(active)) == 0
            return active.value

        if gpu_0_active():
            print("torch made a context on GPU 0 too")
            sys.exit(3)
        cai = dict(t.__cuda_array_interface__, version=3, stream=None)
        view = type("CAIOnly", (), {"__cuda_array_interface__": cai})()
        out = []
        worker = threading.Thread(target=lambda: out.append(asdlpack(view).device))
        worker.start()
        worker.join(60)
        assert out == [(2, last)], out
        assert not gpu_0_active()
    """)


def test_numba_default_stream_zero_is_the_legacy_stream():
    """numba-cuda names cuda.default_stream() 0 in its CAI; CuPy reads that as the legacy
    stream, and so does pydlpack (before: refused as ambiguous)."""
    numba_cuda = pytest.importorskip("numba.cuda")
    a = numba_cuda.to_device(np_arange(16), stream=numba_cuda.default_stream())
    dl = asdlpack(a)
    assert dl.__cuda_array_interface__["stream"] in (1, None)
    assert torch.from_dlpack(dl).tolist() == list(range(16))


def test_torch_cai_without_a_stream_is_ordered_after_the_legacy_stream():
    """torch's own CAI is version 2 with no 'stream': the producer's stream is unknown, so the
    re-export names the legacy default stream (1), never None ("no synchronisation")."""
    t = torch.arange(16, device="cuda", dtype=torch.float32)
    view = type("TorchCAI", (), {"__cuda_array_interface__": t.__cuda_array_interface__})()
    dl = asdlpack(view)
    assert dl.__cuda_array_interface__["stream"] == 1
    assert torch.from_dlpack(dl).tolist() == list(range(16))


def test_a_host_copy_of_rows_longer_than_max_pitch():
    """One row longer than CU_DEVICE_ATTRIBUTE_MAX_PITCH (2 GiB on current GPUs) is one
    cuMemcpyDtoH: cuMemcpy2D refuses such a pitch even for one row."""
    np = pytest.importorskip("numpy")
    n = (1 << 29) + 64                               # 2 GiB + 256 bytes of float32 per row
    free_bytes, _ = torch.cuda.mem_get_info()
    if free_bytes < 8 * n + (1 << 30):
        pytest.skip("needs about 5 GiB of free GPU memory")
    t = torch.ones((2, n), device="cuda", dtype=torch.float32)[:, :n - 1]
    got = np.from_dlpack(asdlpack(t), device="cpu", copy=True)
    assert got.shape == (2, n - 1) and float(got[1, -1]) == 1.0
    del t, got
    torch.cuda.empty_cache()


@pytest.mark.parametrize("rows", [1024, 8192])
def test_a_host_copy_of_a_view_through_its_covering_span(rows):
    """Every other float of rows 1001 floats long (no 3-D copy describes it): the span crosses
    in windows of 16 MiB (two or more for 8 192 rows), rows taken from their windows on the
    host, the same values as torch's own copy."""
    np = pytest.importorskip("numpy")
    t = torch.arange(rows * 1001, device="cuda", dtype=torch.float32).reshape(rows, 1001)
    view = t[:, 1::2]
    got = np.from_dlpack(asdlpack(view), device="cpu", copy=True)
    assert np.array_equal(got, view.cpu().numpy())


def test_a_host_copy_of_a_3d_view_in_one_call_per_outer_index():
    """Slices a whole number of rows apart (t[:, ::2, :50] of a C tensor): cuMemcpy3D (spec
    §10), the same values as torch's own copy."""
    np = pytest.importorskip("numpy")
    t = torch.arange(64 * 128 * 100, device="cuda", dtype=torch.float32).reshape(64, 128, 100)
    for view in (t[:, ::2, :50], t[1::2, 1::3, 7:93:2], t.reshape(8, 8, 128, 100)[:, ::3, ::2]):
        got = np.from_dlpack(asdlpack(view), device="cpu", copy=True)
        assert np.array_equal(got, view.cpu().numpy())


def np_arange(n):
    np = pytest.importorskip("numpy")
    return np.arange(n, dtype=np.float32)


def test_device_copies_freed_on_other_threads_under_load():
    """cuMemFree waits for the device; freed from another library's thread while the device
    waits on a host flag that Python opens, it must not hold the GIL (a subprocess: a hang
    there fails this test instead of freezing the suite)."""
    _run_clean("""
        import ctypes, threading
        import torch
        from dlpack import asdlpack
        from dlpack.tests.cuda.test_real_gpu import Gate

        gate = Gate()
        side = torch.cuda.Stream()
        gate.hold(side)
        busy = torch.zeros(1 << 20, device="cuda")
        with torch.cuda.stream(side):
            busy.fill_(1.0)                              # the device is busy until the gate opens
        copies = [torch.from_dlpack(asdlpack(bytes(range(256)) * 64).__dlpack__(
            dl_device=(2, 0), max_version=(1, 0))) for _ in range(32)]
        done = []

        def drop():                                      # another library frees them
            copies.clear()
            done.append(True)

        opener = threading.Timer(0.5, gate.open)         # Python code the device waits on
        opener.start()
        dropper = threading.Thread(target=drop)
        dropper.start()
        dropper.join(30)
        opener.join(30)
        assert done and not dropper.is_alive()
        torch.cuda.synchronize()
        assert float(busy.sum()) == busy.numel()
    """)


# -- copies between host and device --------------------------------------------------------------

def test_host_to_device_copy_and_per_thread_stream():
    b = bytes(range(16))
    capsule = asdlpack(b).__dlpack__(max_version=(1, 0), dl_device=(2, 0), stream=1)
    x = torch.from_dlpack(capsule)
    assert x.is_cuda and x.cpu().tolist() == list(b)
    t = torch.ones(8, device="cuda")
    y = torch.utils.dlpack.from_dlpack(asdlpack(t).__dlpack__(stream=2))
    assert y.data_ptr() == t.data_ptr()


def test_host_to_device_copy_read_on_torchs_side_stream():
    """torch passes dl_device without a stream and reads on its current (non-blocking) stream:
    the copy has landed when __dlpack__ returns."""
    np = pytest.importorskip("numpy")
    data = np.arange(1 << 20, dtype=np.float32)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.utils.dlpack.from_dlpack(asdlpack(data).__dlpack__(
            dl_device=(2, torch.cuda.current_device()), max_version=(1, 0)))
        total = x.sum()
    side.synchronize()
    assert total.item() == float(data.sum())


def test_read_only_cuda_data_for_a_legacy_consumer_is_a_device_copy():
    t = torch.arange(32, device="cuda", dtype=torch.float32)
    dl = asdlpack(_cai(t.data_ptr(), 32, torch.cuda.current_stream(), readonly=True))
    capsule = dl.__dlpack__()                       # no max_version: legacy
    info = todict(capsule)
    assert info["device"] == (CUDA, t.device.index or 0) and info["data"] != t.data_ptr()
    y = torch.utils.dlpack.from_dlpack(capsule)
    assert torch.equal(y, t)
    y.fill_(0)                                      # the private copy: the source is intact
    assert t.sum().item() == sum(range(32))


def test_a_device_copy_for_stream_minus_1_waits_for_the_arrow_sync_event():
    """Read-only Arrow data for a legacy consumer passing stream -1 is a private copy on the
    GPU, queued on the legacy stream: it waits for the producer's sync_event first (spec §10;
    before, it copied what the held side stream had not written yet)."""
    from dlpack.tests import arrow_producers as ap

    n = 1 << 16
    gate = Gate()
    side = _side(gate)
    t = torch.zeros(n, device="cuda")
    torch.cuda.synchronize()
    event = torch.cuda.Event()
    with torch.cuda.stream(side):
        t.fill_(6.0)                                 # runs once the gate opens
        event.record(side)
    col = ap.primitive("f", [0.0] * n, b"f")
    col.buffers[1] = ap.Address(t.data_ptr())
    dl = asdlpack(ap.DeviceProducer(col, 2, t.device.index or 0, event.cuda_event))
    capsule = _reader_opens_the_gate(gate, lambda: dl.__dlpack__(stream=-1))
    assert todict(capsule)["data"] != t.data_ptr()  # the private copy
    copy = torch.utils.dlpack.from_dlpack(capsule)
    assert copy.sum().item() == 6.0 * n


# -- JAX on GPU ---------------------------------------------------------------------------------

def _jax_gpu():
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    return jax


def test_cupy_and_jax_host_copies():
    cupy = pytest.importorskip("cupy")
    np = pytest.importorskip("numpy")
    c = cupy.arange(10, dtype=cupy.float32)[::-3]
    back = np.from_dlpack(asdlpack(c), device="cpu")
    assert back.tolist() == c.get().tolist()
    jax = _jax_gpu()
    j = jax.numpy.arange(6, dtype=jax.numpy.float32)
    assert np.from_dlpack(asdlpack(j), device="cpu").tolist() == list(range(6))
    assert torch.from_dlpack(asdlpack(j)).cpu().tolist() == list(range(6))


def test_jax_gpu_round_trips():
    """JAX calls __dlpack__ without max_version: its read-only arrays come back as a private
    copy on the GPU, torch's writable tensors as the same memory."""
    jax = _jax_gpu()
    j = jax.numpy.arange(1024, dtype=jax.numpy.float32) * 2
    dl = asdlpack(j)
    assert dl.device[0] == CUDA
    back = jax.dlpack.from_dlpack(dl)
    assert back.devices() == j.devices() and bool((back == j).all())
    t = torch.arange(1024, device="cuda", dtype=torch.float32)
    k = jax.dlpack.from_dlpack(asdlpack(t))
    assert float(k.sum()) == float(t.sum()) and k.unsafe_buffer_pointer() == t.data_ptr()
    assert torch.from_dlpack(asdlpack(k)).data_ptr() == t.data_ptr()


def test_jax_is_asked_for_the_legacy_stream_at_import():
    """asdlpack asks __dlpack_device__ first and passes stream=1 for CUDA data, so JAX orders
    its work before the legacy stream instead of blocking the host (spec §10); the view is
    JAX's memory."""
    jax = _jax_gpu()
    j = jax.numpy.arange(16, dtype=jax.numpy.float32) * 3
    asked = []

    class Recorder:
        def __dlpack__(self, **kwargs):
            asked.append(kwargs.get("stream"))
            return j.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return j.__dlpack_device__()

    dl = asdlpack(Recorder())
    assert asked[0] == 1 and dl.device[0] == CUDA
    assert dl.data_ptr == j.unsafe_buffer_pointer()
    assert torch.from_dlpack(dl).cpu().tolist() == [3.0 * i for i in range(16)]


def test_pinned_memory_to_consumers_that_refuse_cuda_host():
    """torch's pin_memory() through __cuda_array_interface__-less paths is kDLCUDAHost only when
    read through the driver; a CAI view of it is, and on_host() hands it to NumPy, torch and
    JAX as CPU memory without a copy (NumPy and torch at the same address)."""
    np = pytest.importorskip("numpy")
    t = torch.arange(16, dtype=torch.float32).pin_memory()
    view = _cai(t.data_ptr(), 16, None)
    dl = asdlpack(view)
    assert dl.device == (CUDA_HOST, 0)
    assert todict(dl.__dlpack__(dl_device=(1, 0), max_version=(1, 0)))["data"] == t.data_ptr()
    host = dl.on_host()
    a = np.from_dlpack(host)
    assert a.__array_interface__["data"][0] == t.data_ptr() and a.tolist() == list(range(16))
    assert torch.from_dlpack(host).data_ptr() == t.data_ptr()
    jnp = pytest.importorskip("jax.numpy")
    assert jnp.from_dlpack(host).tolist() == list(range(16))


def test_exchanges_inside_a_torch_cuda_graph_capture():
    """Inside torch.cuda.graph a view on the capture stream makes no call and replays; a copy,
    or a producer on the legacy stream, is refused and leaves the capture intact (spec §10)."""
    x = torch.arange(16, device="cuda", dtype=torch.float32)
    dl = asdlpack(x)
    legacy = asdlpack(_cai(x.data_ptr(), 16, 1))
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        y = torch.from_dlpack(dl) * 2
        with pytest.raises(BufferError, match="capturing a CUDA graph"):
            dl.__dlpack__(stream=torch.cuda.current_stream().cuda_stream, copy=True)
        with pytest.raises(BufferError, match="capturing a CUDA graph"):
            legacy.__dlpack__(stream=torch.cuda.current_stream().cuda_stream)
    x.fill_(1.0)
    graph.replay()
    torch.cuda.synchronize()
    assert y.tolist() == [2.0] * 16


def test_a_copy_to_the_gpu_for_a_side_stream_is_stream_ordered():
    """dl_device=(kDLCUDA, 0) with a side stream: allocated, copied and freed on that stream
    (cuMemAllocAsync, cuMemcpyHtoDAsync, cuMemFreeAsync; spec §10), read there by torch."""
    np = pytest.importorskip("numpy")
    a = np.arange(1 << 16, dtype=np.float32)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        capsule = asdlpack(a).__dlpack__(dl_device=(CUDA, 0), stream=side.cuda_stream)
        t = torch.from_dlpack(capsule)
        total = t.sum()
        del t, capsule
    side.synchronize()
    assert total.item() == float(a.sum())


def test_a_private_copy_for_a_side_stream_is_stream_ordered():
    """copy=True of torch data for a side stream: allocated, filled and freed on that stream
    after torch's work there (cuMemAllocAsync, cuMemcpyDtoDAsync, cuMemFreeAsync; spec §10),
    with no host wait while that work is held."""
    gate = Gate()
    side = _side(gate)
    t = torch.zeros(1 << 16, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        t.fill_(9.0)                                 # runs once the gate opens
        capsule = asdlpack(t).__dlpack__(stream=side.cuda_stream, copy=True)
        c = torch.from_dlpack(capsule)
        total = c.sum()
    assert gate.flag.value == 0 and c.data_ptr() != t.data_ptr()    # the host never waited
    gate.open()
    side.synchronize()
    assert total.item() == 9.0 * t.numel()
    del c, capsule
