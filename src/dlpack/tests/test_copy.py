"""The copy routine (spec §8) against NumPy's: every copy pydlpack makes (copy=True, the private
copy of read-only data for a legacy consumer, the copy a sparse view pickles as) holds the same
bytes as np.ascontiguousarray of the same view, for every layout and item size 1-16 (lanes > 1
included), C-contiguous, on a 256-byte boundary, writable; large copies let other threads run
and stop at a signal handler's error."""

import ctypes
import functools
import operator
import pickle
import signal
import threading
import time

import pytest

from dlpack import (
    FLAG_BITMASK_IS_COPIED,
    FLAG_BITMASK_READ_ONLY,
    DLDataTypeCode,
    DType,
    asdlpack,
    from_address,
    todict,
)
from dlpack.tests.helpers import lib

np = lib("numpy")
hypothesis = lib("hypothesis")
st = hypothesis.strategies

# Views of a (5, 7, 9) array of items; the item is the last axis of a uint8 array, so every
# item size has the same layouts.
LAYOUTS = {
    "contiguous": lambda v: v,
    "every other": lambda v: v[:, :, ::2],
    "transposed": lambda v: v.transpose(2, 1, 0, 3),
    "2-d .T": lambda v: v[1].transpose(1, 0, 2),
    "middle axes swapped": lambda v: v.transpose(0, 2, 1, 3),
    "negative": lambda v: v[::-1, :, ::-2],
    "negative transposed": lambda v: v[:, ::-1].transpose(1, 0, 2, 3),
    "sliced": lambda v: v[1:4, 2:6, 3:8],
    "0-d": lambda v: v[1, 2, 3],
    "extent 0": lambda v: v[:, 0:0],
    "broadcast": lambda v: np.broadcast_to(v[:, :1], (5, 4, 9, v.shape[-1])),
    "one column": lambda v: v[:, 3, 4:5],
}


def _items(shape, isz, seed=0):
    """A C-contiguous array of shape + (isz,) bytes, all different where possible."""
    n = int(np.prod(shape)) * isz
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).reshape(*shape, isz)


def _dtype(isz):
    """A DLPack type of isz bytes: a scalar where one exists, else isz lanes of uint8."""
    if isz in (1, 2, 4, 8):
        return DType(DLDataTypeCode.kDLUInt, 8 * isz)
    return DType(DLDataTypeCode.kDLUInt, 8, isz)


def _wrap(view, readonly=False):
    """A DLPackObject over a NumPy byte view whose last axis is the item."""
    isz = view.shape[-1]
    assert view.strides[-1] == 1 or isz == 1
    return from_address(view.ctypes.data if view.size else None, view.shape[:-1], _dtype(isz),
                        owner=view, strides=[s // isz for s in view.strides[:-1]],
                        readonly=readonly)


def _check_copy(capsule, view):
    """The capsule holds a C-contiguous, aligned, writable copy equal to NumPy's."""
    info = todict(capsule)
    shape = view.shape[:-1]
    expected = np.ascontiguousarray(view)
    assert info["shape"] == shape
    if expected.size:
        assert info["strides"] == tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
        assert info["data"] % 256 == 0
        assert info["data"] != view.ctypes.data
        assert ctypes.string_at(info["data"], expected.nbytes) == expected.tobytes()
    if info.get("version"):
        assert info["flags"] & FLAG_BITMASK_IS_COPIED
        assert not info["flags"] & FLAG_BITMASK_READ_ONLY


def _elements(dl):
    """dl's elements as a NumPy byte view whose last axis is the item (read in place)."""
    isz, shape, strides = dl.itemsize, dl.shape, dl.strides
    if not all(shape):
        return np.empty((*shape, isz), np.uint8)
    low = sum(min(0, (e - 1) * s) for e, s in zip(shape, strides, strict=True)) * isz
    reach = sum(abs((e - 1) * s) for e, s in zip(shape, strides, strict=True)) * isz + isz
    flat = np.frombuffer((ctypes.c_uint8 * reach).from_address(dl.data_ptr + low), np.uint8)
    return np.lib.stride_tricks.as_strided(flat[-low:], (*shape, isz),
                                           (*(s * isz for s in strides), 1))


@pytest.mark.parametrize("isz", range(1, 17))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_copies_match_numpy(layout, isz):
    view = LAYOUTS[layout](_items((5, 7, 9), isz))
    dl = _wrap(view)
    _check_copy(dl.__dlpack__(copy=True, max_version=(1, 3)), view)
    _check_copy(_wrap(view, readonly=True).__dlpack__(), view)     # the private legacy copy
    back = pickle.loads(pickle.dumps(dl, 5))
    assert back.shape == dl.shape and back.readonly == dl.readonly
    assert np.array_equal(_elements(back), view)


@pytest.mark.parametrize("isz", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("shape", [(257, 1031), (3, 2049), (1500, 1)])
def test_tiled_transpose_edges(shape, isz):
    """Transposes move tiles: extents that are no multiple of the tile, and copies large enough
    to run without the GIL (1 MiB and more), agree with NumPy."""
    base = _items(shape, isz, seed=1)
    for view in (base.transpose(1, 0, 2), base[::-1].transpose(1, 0, 2), base[:, ::2]):
        _check_copy(_wrap(view).__dlpack__(copy=True, max_version=(1, 3)), view)


@hypothesis.settings(deadline=None, max_examples=150)
@hypothesis.given(
    shape=st.lists(st.integers(0, 6), min_size=0, max_size=4),
    isz=st.integers(1, 16),
    data=st.data(),
)
def test_any_view_copies_like_numpy(shape, isz, data):
    base = _items(tuple(shape), isz, seed=2)
    index = tuple(slice(None, None, data.draw(st.sampled_from([1, 2, 3, -1, -2]))) for _ in shape)
    view = base[index]
    order = data.draw(st.permutations(range(len(shape))))
    view = view.transpose(*order, len(shape))
    _check_copy(_wrap(view).__dlpack__(copy=True, max_version=(1, 3)), view)
    _check_copy(_wrap(view, readonly=True).__dlpack__(), view)


def test_sparse_view_pickles_as_an_aligned_copy():
    a = np.arange(4000, dtype=np.float64).reshape(40, 100)[::3, ::4]
    dl = asdlpack(a)
    buffers = []
    pickle.dumps(dl, 5, buffer_callback=buffers.append)
    (buf,) = buffers
    view = buf.raw()
    assert view.nbytes == a.nbytes
    assert np.frombuffer(view, np.uint8).ctypes.data % 256 == 0
    assert np.array_equal(np.frombuffer(view, np.float64).reshape(a.shape), a)


def _big_transpose():
    """A 64 MiB transposed view: its copy takes several signal-check intervals."""
    return asdlpack(np.ones((2048, 4096), np.float64).T)


def test_large_copy_lets_other_threads_run():
    """A large copy runs without the GIL: a thread that only counts keeps counting through it."""
    dl = _big_transpose()
    stamps, stop = [], threading.Event()

    def count():
        stamps.append(time.perf_counter())
        while not stop.is_set():
            now = time.perf_counter()
            if now - stamps[-1] > 1e-4:     # a stamp per 0.1 ms while it holds the GIL
                stamps.append(now)

    worker = threading.Thread(target=count)
    worker.start()
    while not stamps:
        time.sleep(0.001)
    try:
        best = None
        for _ in range(3):          # the thread must get the GIL in the middle of the copy
            start = time.perf_counter()
            dl.__dlpack__(copy=True, max_version=(1, 3))
            end = time.perf_counter()
            lo, hi = start + (end - start) / 4, end - (end - start) / 4
            best = sum(lo < t < hi for t in stamps)
            if best:
                break
    finally:
        stop.set()
        worker.join()
    assert best


def test_large_copies_on_other_threads():
    """Threads other than the main one run no signal handlers: their copies never stop."""
    base = _items((700, 900), 8, seed=3)
    views = [base.transpose(1, 0, 2), base[:, ::2], base[::-1]]
    got = {}

    def copy(i):
        got[i] = _wrap(views[i]).__dlpack__(copy=True, max_version=(1, 3))

    workers = [threading.Thread(target=copy, args=(i,)) for i in range(len(views))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for i, view in enumerate(views):
        _check_copy(got[i], view)


def test_signal_handler_error_stops_a_large_copy():
    """Ctrl-C (any signal handler that raises) stops a large copy with its error, and frees it.

    The copy and a list.append run from C (map, partial), with no bytecode between them: the
    append is reached only if the handler could not run until the copy ended.
    """
    dl = _big_transpose()
    reached = []

    class Stop(Exception):
        pass

    def handler(signum, frame):
        raise Stop

    calls = [functools.partial(dl.__dlpack__, copy=True, max_version=(1, 3)),
             functools.partial(reached.append, "copy finished")]
    call = operator.methodcaller("__call__")
    old = signal.signal(signal.SIGALRM, handler)
    try:
        with pytest.raises(Stop):       # under load the handler may run before the copy starts
            signal.setitimer(signal.ITIMER_REAL, 0.002)
            list(map(call, calls))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert reached == []
    view = np.ones((2048, 4096), np.float64).T
    _check_copy(dl.__dlpack__(copy=True, max_version=(1, 3)), _elements(asdlpack(view)))
