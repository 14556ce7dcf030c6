"""CUDA as torch, CuPy, Numba and JAX drive it (spec §3.4, §10): whose context memory belongs
to, which context a pointer query borrows, what a CAI's stream says when it says nothing, copies
the driver refuses for one row, and memory that is pydlpack's to free. Each test fails on the
fake driver when its rule is broken, as it would on libcuda."""

import ctypes

import pytest

import dlpack.ctypes as dlc
from dlpack import _core, asdlpack, todict
from dlpack.tests import arrow_producers as ap
from dlpack.tests import fake_cuda
from dlpack.tests.fake_cuda import CUDA_ERROR_ILLEGAL_ADDRESS, EVENT
from dlpack.tests.helpers import CAI, capsule, cuda_floats
from dlpack.tools.check_arrow import struct_of


def floats(*values):
    return bytes((ctypes.c_float * len(values))(*values))


def on_thread(fn):
    """fn's result on a new thread (which has no current CUDA context)."""
    import threading

    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(30)
    return out[0]


# -- whose memory -------------------------------------------------------------------------------


def test_memory_of_a_non_primary_context_is_refused(fake):
    """cuCtxCreate or PyCUDA memory is not mapped in the primary context where consumers run: a
    kernel there reading it faults (the fake says CUDA_ERROR_ILLEGAL_ADDRESS, as libcuda does)."""
    other = fake.context(1)
    ptr = fake.device_array(floats(*range(6)), context=other)
    fake.stream(7, device=1)
    assert fake.consume(1, ptr, 24, device=1).error == CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(BufferError, match=rf"context {other:#x}, not of GPU 1's primary "
                                          r"context.*autoprimaryctx"):
        asdlpack(CAI(ptr, stream=7))
    assert fake.current == []


def test_memory_of_the_primary_context_and_of_no_context_is_accepted(fake):
    """Pool (cudaMallocAsync) and VMM memory report no context (NULL): they are usable from
    every context of the device."""
    ptr = cuda_floats(fake)
    assert asdlpack(CAI(ptr)).device == (2, 1)
    data = (ctypes.c_float * 6)(*range(6))
    fake.attributes[ctypes.addressof(data)] = (fake_cuda.CU_MEMORYTYPE_DEVICE, 1, False)
    assert asdlpack(CAI(ctypes.addressof(data))).device == (2, 1)


# -- which context a query borrows ---------------------------------------------------------------


def test_a_query_borrows_the_active_primary_context_and_creates_none(fake):
    """Only GPU 3 has an active primary context (torch ran there): a thread without a context
    borrows it, and GPU 0 gets no context of ours (hundreds of MiB; refused where GPU 0 is
    EXCLUSIVE_PROCESS)."""
    ptr = fake.device_array(floats(*range(6)), device=3)
    dl = on_thread(lambda: asdlpack(CAI(ptr)))
    assert dl.device == (2, 3)
    assert fake.calls == fake_cuda.query(ptr, borrowed=3)
    assert ("cuDevicePrimaryCtxRetain", 0) not in fake.calls
    assert not fake.primary(0).active


def test_a_query_retains_gpu_0_only_when_no_context_is_active(fake):
    data = (ctypes.c_float * 6)(*range(6))
    fake.attributes[ctypes.addressof(data)] = (fake_cuda.CU_MEMORYTYPE_DEVICE, 0, False)
    assert fake.calls == [] and not any(fake.primary(d).active for d in range(8))
    assert on_thread(lambda: asdlpack(CAI(ctypes.addressof(data)))).device == (2, 0)
    assert ("cuDevicePrimaryCtxRetain", 0) in fake.calls


# -- what a CAI's stream says -------------------------------------------------------------------


@pytest.mark.parametrize("cai", [{"version": 2}, {"version": 3}],
                         ids=["version-2", "version-3-without-stream"])
def test_a_cai_without_a_stream_is_ordered_after_the_legacy_stream(fake, cai):
    """torch's CAI (version 2, no 'stream'): its work is on the legacy default stream, so a
    consumer on another stream waits for that, and the re-exported CAI says 1, not None."""
    ptr = cuda_floats(fake, stream=None)
    obj = CAI(ptr, version=cai["version"])
    obj.__cuda_array_interface__.pop("stream", None)
    dl = asdlpack(obj)
    assert dl.__cuda_array_interface__["stream"] == 1
    side = fake.stream(device=1, nonblocking=True)
    fake.kernel(1, ptr, floats(*range(10, 16)), device=1)     # still queued on the legacy one
    fake.calls.clear()
    dl.__dlpack__(stream=side, max_version=(1, 0))
    assert ("cuEventRecord", EVENT, 1) in fake.calls
    seen = fake.consume(side, ptr, 24, device=1)
    fake.synchronize(side, device=1)
    assert seen.value == floats(*range(10, 16))
    fake.calls.clear()
    _, array = dl.__arrow_c_device_array__()            # Arrow: a sync_event, not NULL
    assert struct_of(array, b"arrow_device_array").sync_event
    assert [c[2] for c in fake.calls if c[0] == "cuEventRecord"] == [1]


def test_a_cai_stream_none_still_means_no_synchronisation(fake):
    dl = asdlpack(CAI(cuda_floats(fake, stream=None), stream=None))
    assert dl.__cuda_array_interface__["stream"] is None
    fake.calls.clear()
    dl.__dlpack__(stream=1, max_version=(1, 0))
    assert fake.calls == []


def test_data_on_the_legacy_stream_is_reported_as_stream_1(fake):
    """CAI v3: None means "no synchronisation needed"; a producer with work queued on the
    default stream must name it, or a CuPy non-blocking stream would not wait."""
    dl = asdlpack(CAI(cuda_floats(fake, stream=1), stream=1))
    assert dl.__cuda_array_interface__["stream"] == 1


def _default_stream_tensor_type():
    """A type speaking only a C exchange API, as torch.Tensor does, for six float32 on GPU 1;
    its current_work_stream names the default stream NULL, as torch's does."""
    api = dlc.DLPackExchangeAPI()
    api.header.version = dlc.DLPackVersion(1, 3)
    tensors = []

    def from_py(obj, out):
        shape = (ctypes.c_int64 * 1)(6)
        m = dlc.DLManagedTensorVersioned()
        m.version.major = 1
        m.dl_tensor.data = obj.ptr
        m.dl_tensor.device = dlc.DLDevice(2, 1)
        m.dl_tensor.ndim = 1
        m.dl_tensor.dtype = dlc.DLDataType(2, 32, 1)
        m.dl_tensor.shape = shape
        tensors.append((m, shape))
        out[0] = ctypes.pointer(m)
        return 0

    def default_stream(device_type, device_id, out):
        out[0] = None
        return 0

    api.managed_tensor_from_py_object_no_sync = type(
        api.managed_tensor_from_py_object_no_sync)(from_py)
    api.current_work_stream = type(api.current_work_stream)(default_stream)
    return type("DefaultStreamTensor", (), {
        "__dlpack_c_exchange_api__": capsule(ctypes.addressof(api), b"dlpack_exchange_api"),
        "_keep": (api, tensors), "__init__": lambda self, ptr: setattr(self, "ptr", ptr)})


def test_an_exchange_apis_default_stream_is_reported_as_stream_1(fake):
    """torch's current_work_stream names its default stream NULL: the CAI says 1 (before: None,
    "no synchronisation", so a CuPy non-blocking stream read before torch's kernel ran)."""
    ptr = cuda_floats(fake, stream=None)
    dl = asdlpack(_default_stream_tensor_type()(ptr))
    assert dl.device == (2, 1)
    assert dl.__cuda_array_interface__["stream"] == 1
    side = fake.stream(device=1, nonblocking=True)
    fake.kernel(1, ptr, floats(*range(10, 16)), device=1)     # torch's work, still queued
    dl.__dlpack__(stream=side, max_version=(1, 0))
    seen = fake.consume(side, ptr, 24, device=1)
    fake.synchronize(side, device=1)
    assert seen.value == floats(*range(10, 16))


# -- copies the driver refuses -----------------------------------------------------------------


def test_a_row_longer_than_max_pitch_is_copied_without_a_pitch(fake):
    """cuMemcpy2D refuses a pitch above CU_DEVICE_ATTRIBUTE_MAX_PITCH even for one row (the fake
    too): a contiguous run that long (over 2 GiB on a real GPU) is one cuMemcpyDtoH. The rows
    lie far enough apart that copying the bytes between them would cost more than the calls."""
    np = pytest.importorskip("numpy")
    fake.max_pitch = 64
    ptr = cuda_floats(fake, range(70_032), stream=None)
    dl = asdlpack(CAI(ptr, stream=None, shape=(2, 32), strides=(280_000, 4)))  # rows: 128 bytes
    fake.calls.clear()
    got = np.from_dlpack(dl, device="cpu", copy=True)
    assert got.tolist() == [list(range(32)), list(range(70_000, 70_032))]
    assert [c for c in fake.calls if c[0].startswith("cuMemcpy")] == [
        ("cuMemcpyDtoH", ptr, 128), ("cuMemcpyDtoH", ptr + 280_000, 128)]


def test_a_device_copy_with_stream_minus_1_waits_for_the_arrow_sync_event(fake):
    """Read-only Arrow data for a legacy consumer passing stream -1 is a private copy queued on
    the legacy stream: it must wait for the producer's sync_event (before: it copied the bytes
    the producer's queued kernel had not written yet)."""
    ptr = fake.device_array(floats(0, 0, 0), device=1)
    producer = fake.stream(device=1, nonblocking=True)
    fake.hold(producer, device=1)
    fake.kernel(producer, ptr, floats(1, 2, 3), device=1)
    event = fake.record(producer, device=1)
    col = ap.primitive("f", [0, 0, 0], b"f")
    col.buffers[1] = ap.Address(ptr)
    dl = asdlpack(ap.DeviceProducer(col, 2, 1, event))
    fake.calls.clear()
    import threading

    threading.Timer(0.2, lambda: fake.release(producer, device=1)).start()
    capsule = dl.__dlpack__(stream=-1)                  # a legacy consumer: a private copy
    copy = todict(capsule)["data"]
    assert copy != ptr and ("cuStreamWaitEvent", 1, event, 0) in fake.calls
    assert fake.read(copy, 12) == floats(1, 2, 3)


class _Index:
    """_Index()[...] is the index itself (numpy.s_ without NumPy at collection)."""

    def __getitem__(self, index):
        return index


S = _Index()
VIEWS = [  # (shape of the base array, index): views whose host copy takes 2-D or 3-D copies
    ((6, 8, 10), S[::2, 1::3, ::2]),
    ((6, 8, 10), S[:, ::2, :5]),
    ((6, 8, 10), S[::-1, ::-2, 1:9:3]),
    ((4, 5, 6, 7), S[::2, :, ::2, ::3]),
    ((4, 5, 6, 7), S[1:3, ::-1, 2:4, :]),
    ((3, 4, 5), S[:, :, ::-1]),
    ((40, 3), S[::3, ::2]),
]


@pytest.fixture
def copy_costs():
    """Set the covering-span copy's costs for one test (spec §10), restored afterwards."""
    previous = _core._cuda_copy_costs()
    yield _core._cuda_copy_costs
    _core._cuda_copy_costs(*previous)


def _device_view(np, fake, shape, index):
    """(NumPy view of a float32 arange, a CAI provider of the same view in fake device memory)."""
    base = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    view = base[index]
    ptr = fake.device_array(base.tobytes(), device=1)
    offset = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return view, CAI(ptr + offset, stream=None, shape=view.shape, strides=view.strides)


def _span(view):
    """Bytes from a view's lowest element to the end of its highest."""
    low = sum((n - 1) * s for n, s in zip(view.shape, view.strides, strict=True) if s < 0)
    high = sum((n - 1) * s for n, s in zip(view.shape, view.strides, strict=True) if s > 0)
    return high - low + view.itemsize


def _row_bytes(view):
    """Bytes of the contiguous runs a view's elements lie in (its copies' rows)."""
    width = view.itemsize
    for step, n in sorted((abs(s), n) for n, s in zip(view.shape, view.strides, strict=True)
                          if n > 1 and s):
        if step != width:
            break
        width *= n
    return width


@pytest.mark.parametrize(("shape", "index"), VIEWS)
def test_host_copies_of_strided_views_match_numpy(fake, copy_costs, shape, index):
    """With calls costing nothing (no covering span), each view's host copy equals NumPy's copy
    of the same view of the same bytes, with one driver call per index of the dimensions outside
    the 3-D copies (never one per row)."""
    np = pytest.importorskip("numpy")
    copy_costs(call_bytes=0)
    view, cai = _device_view(np, fake, shape, index)
    dl = asdlpack(cai)
    fake.calls.clear()
    got = np.from_dlpack(dl, device="cpu", copy=True)
    assert got.tolist() == view.tolist()
    copies = [c for c in fake.calls if c[0].startswith("cuMemcpy")]
    moving = [n for _, n in sorted(zip(np.abs(view.strides), view.shape, strict=True))
              if n > 1]
    assert len(copies) <= max(1, int(np.prod(moving[1:]))), copies      # never one per row
    assert sum(c[2] * c[3] * (c[4] if c[0] == "cuMemcpy3D" else 1) if c[0] != "cuMemcpyDtoH"
               else c[2] for c in copies) == view.nbytes                # elements, not spans


def test_covering_span_copies_match_numpy(fake, copy_costs):
    """Where calls cost more than the bytes between rows, the span covering a view crosses in
    windows of at most the chunk (or one row, where a row is longer) and each row is taken from
    its window: the same values as the driver's 2-D and 3-D copies, windows in memory order,
    never past the view's last byte. Every chunk size takes windows for some views."""
    np = pytest.importorskip("numpy")
    for chunk in (64, 100, 200, 1 << 20):
        windowed = 0
        copy_costs(call_bytes=1 << 62, chunk=chunk)
        for shape, index in VIEWS:
            view, cai = _device_view(np, fake, shape, index)
            dl = asdlpack(cai)
            fake.calls.clear()
            assert np.from_dlpack(dl, device="cpu", copy=True).tolist() == view.tolist(), (
                chunk, shape, index)
            copies = [c for c in fake.calls if c[0].startswith("cuMemcpy")]
            if {c[0] for c in copies} == {"cuMemcpyDtoH"} and max(c[2] for c in copies) > 16:
                windowed += 1
                low = min(c[1] for c in copies)
                assert [c[1] for c in copies] == sorted(c[1] for c in copies)
                assert max(c[1] + c[2] for c in copies) - low == _span(view)
                assert all(c[2] <= max(chunk, _row_bytes(view)) for c in copies)
        assert windowed >= 2, chunk


def _host_copy_of_strided(fake, n, shape, strides):
    """as_strided(shape, strides) over n float32 in fake device memory, copied to the host and
    compared with NumPy's: (the view, its device address, the driver's copy calls)."""
    np = pytest.importorskip("numpy")
    base = np.arange(n, dtype=np.float32)
    view = np.lib.stride_tricks.as_strided(base, shape=shape, strides=strides)
    ptr = fake.device_array(base.tobytes(), device=1)
    dl = asdlpack(CAI(ptr, stream=None, shape=view.shape, strides=view.strides))
    fake.calls.clear()
    assert np.from_dlpack(dl, device="cpu", copy=True).tolist() == view.tolist()
    return view, ptr, [c for c in fake.calls if c[0].startswith("cuMemcpy")]


def test_a_row_straddling_a_window_starts_the_next_one(fake, copy_costs):
    """Rows of 12 bytes 20 apart (groups of four, 84 apart: no 3-D copy describes them) in
    windows of 110 bytes: a row that begins inside a window and ends past it is copied from
    the next window, which starts at that row (before the row's end was read from beyond the
    window); windows in memory order, never past the view's last byte."""
    copy_costs(call_bytes=1 << 62, chunk=110)
    view, ptr, copies = _host_copy_of_strided(fake, 500, (20, 4, 3), (84, 20, 4))
    starts = [c[1] - ptr for c in copies]
    assert {c[0] for c in copies} == {"cuMemcpyDtoH"} and starts == sorted(starts)
    assert starts[:2] == [0, 104]           # the row at 104 straddled the first window
    assert max(c[1] + c[2] for c in copies) - ptr == _span(view)


def test_the_span_is_not_taken_where_straddling_rows_make_as_many_windows_as_calls(
        fake, copy_costs):
    """Pairs of rows of 60 bytes 64 apart, pairs 132 apart (one cuMemcpy2D per pair), windows
    of 150 bytes: the second pair's first row straddles each window, so the span would take
    one window per pair, as many calls as the driver's copies and more bytes. The count of
    windows bounds straddling rows (before: span / window, which took the span here)."""
    copy_costs(call_bytes=1 << 62, chunk=150)
    _, _, copies = _host_copy_of_strided(fake, 1000, (20, 2, 15), (132, 64, 4))
    assert [c[0] for c in copies] == ["cuMemcpy2D"] * 20


def test_a_view_of_odd_rows_is_one_copy_of_its_span(fake):
    """Every other element of rows 1001 floats long: the rows of one slice are not a whole
    number of rows apart, so the driver's copies take one call per row (1 000 here, 10⁶ for
    realistic sizes, each synchronous); the span is 2x the elements, one cuMemcpyDtoH."""
    np = pytest.importorskip("numpy")
    view, cai = _device_view(np, fake, (1000, 1001), S[:, ::2])
    dl = asdlpack(cai)
    fake.calls.clear()
    assert np.from_dlpack(dl, device="cpu", copy=True).tolist() == view.tolist()
    assert [c[0::2] for c in fake.calls if c[0].startswith("cuMemcpy")] == [
        ("cuMemcpyDtoH", _span(view))]


def test_a_span_longer_than_its_window_crosses_in_windows(fake):
    """5 000 rows of 1 001 floats (20 MB): two windows of at most 16 MiB, the second starting
    at the first element the first window cut; host memory is the elements and one window."""
    np = pytest.importorskip("numpy")
    view, cai = _device_view(np, fake, (5000, 1001), S[:, 1::2])
    dl = asdlpack(cai)
    fake.calls.clear()
    assert np.array_equal(np.from_dlpack(dl, device="cpu", copy=True), view)
    copies = [c for c in fake.calls if c[0].startswith("cuMemcpy")]
    start = copies[0][1]
    assert [c[0] for c in copies] == ["cuMemcpyDtoH"] * 2
    assert copies[0][2] == 16 << 20
    second = copies[1][1] - start           # at the first element the first window cut
    assert (second % 4004) % 8 == 0 and (16 << 20) - 8 < second <= 16 << 20
    assert copies[1][1] + copies[1][2] - start == _span(view)


def test_rows_far_apart_keep_the_drivers_copies(fake):
    """Where the bytes between rows outweigh the calls saved (4 KiB of elements in a 4 MB
    span, four calls), the span is not copied: four cuMemcpy2D of the elements."""
    np = pytest.importorskip("numpy")
    view, cai = _device_view(np, fake, (4, 250_001), S[:, ::70_000])
    dl = asdlpack(cai)
    fake.calls.clear()
    assert np.from_dlpack(dl, device="cpu", copy=True).tolist() == view.tolist()
    assert [c[0] for c in fake.calls if c[0].startswith("cuMemcpy")] == ["cuMemcpy2D"] * 4


def test_overlapping_rows_are_never_copied_as_a_span(fake):
    """Rows that overlap in memory (as_strided) would cost a window for every row: the span is
    copied only where the rows lie in memory in order, so these go row by row."""
    np = pytest.importorskip("numpy")
    base = np.arange(1004, dtype=np.float32)
    view = np.lib.stride_tricks.as_strided(base, shape=(1000, 4), strides=(4, 4))
    ptr = fake.device_array(base.tobytes(), device=1)
    dl = asdlpack(CAI(ptr, stream=None, shape=view.shape, strides=view.strides))
    fake.calls.clear()
    assert np.from_dlpack(dl, device="cpu", copy=True).tolist() == view.tolist()
    copies = [c for c in fake.calls if c[0].startswith("cuMemcpy")]
    assert len(copies) == 1000 and {c[2] for c in copies} == {16}


def test_copy_costs_refuse_nonsense():
    with pytest.raises(ValueError, match="call_bytes=-1"):
        _core._cuda_copy_costs(call_bytes=-1)
    with pytest.raises(ValueError, match="chunk=0"):
        _core._cuda_copy_costs(chunk=0)


def test_a_3d_view_is_one_cumemcpy3d(fake, copy_costs):
    """Slices a whole number of rows apart (a[:, ::2, :5] of a C array): one call, where rows
    of 2-D copies took one per slice (10⁶ calls for realistic sizes)."""
    np = pytest.importorskip("numpy")
    copy_costs(call_bytes=1 << 62)          # one call: nothing to save by copying the span
    base = np.arange(6 * 8 * 10, dtype=np.float32).reshape(6, 8, 10)
    view = base[:, ::2, :5]
    ptr = fake.device_array(base.tobytes(), device=1)
    dl = asdlpack(CAI(ptr, stream=None, shape=view.shape, strides=view.strides))
    fake.calls.clear()
    assert np.from_dlpack(dl, device="cpu", copy=True).tolist() == view.tolist()
    assert [c for c in fake.calls if c[0].startswith("cuMemcpy")] == [
        ("cuMemcpy3D", ptr, 20, 4, 6, 80, 4)]


# -- memory that is ours to free ----------------------------------------------------------------


def test_a_copy_outliving_a_context_reset_never_frees_another_librarys_memory(fake):
    """Numba's cuda.close() resets GPU 1's primary context, freeing our device copy; another
    library retains the context again and cuMemAlloc hands it the same address. Our deleter
    must not free that (before: the epoch check passed, as nobody saw the reset)."""
    capsule = asdlpack(b"abcdefgh").__dlpack__(dl_device=(2, 1), max_version=(1, 0))
    ptr = todict(capsule)["data"]
    fake.reset_primary(1)
    theirs = fake.library_alloc(8, device=1)
    assert theirs == ptr                    # the freed address, reused
    fake.calls.clear()
    del capsule
    assert ("cuMemFree", ptr) not in fake.calls
    assert fake.allocated() == [theirs]
    assert fake.current == []


def test_our_own_copy_is_freed_by_its_deleter(fake):
    capsule = asdlpack(b"abcdefgh").__dlpack__(dl_device=(2, 1), max_version=(1, 0))
    ptr = todict(capsule)["data"]
    del capsule
    assert fake.calls[-5:] == [*fake_cuda.enter(1), *fake_cuda.free(ptr), *fake_cuda.LEAVE]
    assert not fake.allocated()


# -- managed memory on devices without concurrent access ------------------------------------------


@pytest.mark.parametrize("concurrent", [1, 0])
def test_host_reads_of_managed_memory_wait_as_the_device_requires(fake, concurrent):
    """Without CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS (WSL2, Windows, older GPUs) the CPU
    may not touch managed memory while any kernel runs on the device, not only the producer's:
    the context is synchronised before a host read (asked once per device)."""
    fake.concurrent_managed = concurrent
    data = (ctypes.c_float * 6)(*range(6))
    ptr = fake.managed(data, device=1)
    side = fake.stream(device=1)
    dl = asdlpack(CAI(ptr, stream=side))
    assert dl.device == (13, 1)
    other = fake.stream(device=1)
    fake.kernel(other, fake.device_array(bytes(4), device=1), b"busy", device=1)
    fake.calls.clear()
    with memoryview(dl) as m:
        assert m.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert dl.__array_interface__["shape"] == (2, 3)
    synced = [c for c in fake.calls if c[0] == "cuCtxSynchronize"]
    assert synced == ([] if concurrent else [("cuCtxSynchronize",)] * 2)
    assert bool(fake.pending()) == bool(concurrent)     # the other stream's kernel: done or not
    asked = [c for c in fake.calls if c[:2] == ("cuDeviceGetAttribute", 89)]
    assert len(asked) == 1


# -- pinned and managed memory for consumers that refuse it ---------------------------------------


@pytest.mark.parametrize("kind", ["pinned", "managed"])
def test_dl_device_cpu_of_memory_the_host_reads_in_place_is_a_view(fake, kind):
    """dl_device=(kDLCPU, 0) of pinned or managed memory: the same memory as a CPU tensor, after
    the producer's stream (before: a copy); copy=False is honoured, copy=True still copies."""
    memory = (ctypes.c_float * 6)(*range(6))
    ptr = getattr(fake, kind)(memory, device=1)
    side = fake.stream(device=1)
    dl = asdlpack(CAI(ptr, stream=side))
    fake.kernel(side, ptr, floats(*range(10, 16)), device=1)
    fake.calls.clear()
    for copy in (None, False):
        info = todict(dl.__dlpack__(dl_device=(1, 0), copy=copy, max_version=(1, 3)))
        assert info["data"] == ptr and info["device"] == (1, 0) and not info["flags"] & 2
    assert fake.calls[:4] == fake_cuda.synchronize(1, side, first=False)    # waited first
    assert list(memory) == list(range(10, 16))
    info = todict(dl.__dlpack__(dl_device=(1, 0), copy=True, max_version=(1, 3)))
    assert info["data"] != ptr and info["flags"] & 2


def test_dl_device_cpu_of_read_only_pinned_memory_for_a_legacy_consumer_is_a_copy(fake):
    memory = (ctypes.c_float * 6)(*range(6))
    ptr = fake.pinned(memory, device=1)
    dl = asdlpack(CAI(ptr, stream=None, readonly=True))
    info = todict(dl.__dlpack__(dl_device=(1, 0)))          # unversioned: cannot say READ_ONLY
    assert info["data"] != ptr and info["device"] == (1, 0)


@pytest.mark.parametrize("consumer", ["numpy", "torch", "jax"])
def test_on_host_hands_pinned_memory_to_consumers_that_refuse_cuda_host(fake, consumer):
    """JAX, CuPy and torch refuse kDLCUDAHost tensors; dl.on_host() is the same memory as a CPU
    object, after the producer's work (the wait logged before any read)."""
    from dlpack.tests.helpers import consume

    memory = (ctypes.c_float * 6)(*range(6))
    ptr = fake.pinned(memory, device=1)
    side = fake.stream(device=1)
    dl = asdlpack(CAI(ptr, stream=side, shape=(6,)))
    fake.kernel(side, ptr, floats(*range(10, 16)), device=1)
    fake.calls.clear()
    host = dl.on_host()
    assert host.device == (1, 0) and fake.calls[:4] == fake_cuda.synchronize(1, side, first=False)
    result, address, _ = consume(consumer, host)
    assert [float(v) for v in result.tolist()] == list(range(10, 16))
    if consumer != "jax":                   # JAX copies host memory it does not own
        assert address == ptr
    assert host.on_host() is host


def test_on_host_refuses_device_memory(fake):
    dl = asdlpack(CAI(cuda_floats(fake)))
    with pytest.raises(BufferError, match=r"on_host: .*cannot read in place.*dl_device=\(1, 0\)"):
        dl.on_host()
    assert fake.touched() == []


def _random_view(np, rng):
    """A random view (up to 4-D, slices with negative steps, transposes, broadcast dimensions,
    or any strides: overlapping and interleaved) of a random array, and the base it views."""
    dtype = rng.choice([np.uint8, np.int16, np.float32, np.float64])
    ndim = int(rng.integers(1, 5))
    if rng.random() < 0.2:                                  # strides of no slicing
        base = rng.integers(0, 100, size=4096).astype(dtype)
        shape = tuple(int(rng.integers(1, 7)) for _ in range(ndim))
        strides = tuple(int(rng.integers(-40, 41)) * base.itemsize for _ in range(ndim))
        low = sum((n - 1) * st for n, st in zip(shape, strides, strict=True) if st < 0)
        return base, np.ndarray(shape, dtype, buffer=base, offset=-low, strides=strides)
    shape = tuple(int(rng.integers(1, 12 if ndim > 2 else 40)) for _ in range(ndim))
    base = rng.integers(0, 100, size=shape).astype(dtype)
    index = []
    for n in shape:
        if rng.random() < 0.2:
            index.append(int(rng.integers(0, n)))          # an integer drops the dimension
            continue
        step = int(rng.choice([1, 1, 2, 3, -1, -2, 5]))
        start, stop = sorted(int(i) for i in rng.integers(0, n + 1, size=2))
        index.append(slice(start, stop, step) if step > 0 else slice(
            stop - 1 if stop else None, start - 1 if start else None, step))
    view = base[(*index, ...)]                             # a view, 0-D too
    if view.ndim > 1 and rng.random() < 0.3:
        view = view.transpose(rng.permutation(view.ndim))
    if view.ndim < 4 and rng.random() < 0.2:                # a broadcast (stride 0) dimension
        at = int(rng.integers(0, view.ndim + 1))
        view = np.lib.stride_tricks.as_strided(
            view, shape=(*view.shape[:at], int(rng.integers(1, 4)), *view.shape[at:]),
            strides=(*view.strides[:at], 0, *view.strides[at:]))
    return base, view


@pytest.mark.parametrize("max_pitch", [2**31 - 1, 24, 100])
def test_random_strided_views_match_numpy_in_every_copy_mode(fake, copy_costs, max_pitch):
    """Seeded differential test (spec §10): random views copied to the host equal NumPy's,
    whatever the span's window and the cost of a call (driver copies, covering span, or both
    in one run), with the view alone in its allocation (a byte before or after it read is
    refused by the fake) and every copy inside the view's span."""
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(max_pitch)
    fake.max_pitch = max_pitch
    spans = 0
    for case in range(1500):
        base, view = _random_view(np, rng)
        if view.size == 0:
            continue
        raw = base.tobytes() if base.flags.c_contiguous else None
        low = sum((n - 1) * s for n, s in zip(view.shape, view.strides, strict=True) if s < 0)
        first = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        span = _span(view)
        ptr = fake.device_array(raw[first + low:first + low + span], device=1)
        call_bytes = int(rng.choice([0, 1, 64, 4096, 1 << 62, 1 << 62, 1 << 62]))
        chunk = int(rng.choice([1, 3, span // 5 + 1, span // 3 + 1, span // 2 + 1, span - 1 or 1,
                                 span, 1 << 20]))
        copy_costs(call_bytes=call_bytes, chunk=chunk)
        cai = CAI(ptr - low, stream=None, shape=view.shape, strides=view.strides,
                  typestr=view.dtype.str)
        fake.calls.clear()
        got = np.from_dlpack(asdlpack(cai), device="cpu", copy=True)
        assert got.dtype == view.dtype and got.shape == view.shape, case
        assert np.array_equal(got, view), (case, view.shape, view.strides, call_bytes, chunk)
        copies = [c for c in fake.calls if c[0] == "cuMemcpyDtoH"]
        assert all(ptr <= c[1] and c[1] + c[2] <= ptr + span for c in copies), case
        spans += any(c[2] > _row_bytes(view) for c in copies)
    assert spans >= 15                      # the covering span was taken often enough


def test_a_driver_error_mid_span_leaves_no_context_and_raises(fake, copy_costs, monkeypatch):
    """A window's cuMemcpyDtoH failing after others crossed: the error names the call, the
    context is popped, and the next copy of the same view succeeds (spec §10)."""
    np = pytest.importorskip("numpy")
    copy_costs(call_bytes=1 << 62, chunk=4096)
    view, cai = _device_view(np, fake, (64, 101), S[:, ::2])
    dl = asdlpack(cai)
    get, reads = fake._get, []

    def failing_get(ptr, nbytes):
        reads.append(ptr)
        if len(reads) == 3:
            raise fake_cuda.DriverError(CUDA_ERROR_ILLEGAL_ADDRESS, "a kernel faulted")
        return get(ptr, nbytes)

    monkeypatch.setattr(fake, "_get", failing_get)
    with pytest.raises(BufferError, match=r"cuMemcpyDtoH.*CUDA_ERROR_ILLEGAL_ADDRESS"):
        np.from_dlpack(dl, device="cpu", copy=True)
    assert len(reads) == 3 and fake.current == []
    monkeypatch.setattr(fake, "_get", get)
    assert np.from_dlpack(dl, device="cpu", copy=True).tolist() == view.tolist()
