"""pydlpack's paths on threads with small C stacks (spec §7: stack use per call is bounded).

Each path runs on a thread with a STACK-byte stack (threading.stack_size's minimum), where
NumPy's same work runs. ``python -m dlpack.tests.small_stacks NAME`` runs one path in a
child interpreter (so a stack overflow fails the test that started it, not pytest): first on
the main thread, then on a small-stack thread, and prints ``ok`` when both gave the expected
value; ``signals DEPTH`` nests copies in signal handlers on a main thread limited to LIMIT.
"""

from __future__ import annotations

import array
import ctypes
import itertools
import pickle
import resource
import signal
import sys
import threading

from dlpack import DLPackObject, asdlpack, from_address

STACK = 32 * 1024           # threading.stack_size's minimum
GUARD = 1 << 20             # the guard below it: more than any frame
LIMIT = 128 * 1024          # the main thread's stack for the signal-handler case (RLIMIT_STACK)

_START = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
_BUF = array.array("d", range(1 << 13))
_AT = _BUF.buffer_info()[0]


def in_small_stack(fn, size: int = STACK):
    """fn() on a thread whose stack is size bytes; its value, or its exception raised here.

    On glibc the thread is made with pthread_create and a GUARD-byte guard below its stack, so
    an overflow faults whatever the frame's size (threading's one-page guard is jumped by a
    frame larger than a page, which then writes into whatever memory lies below); elsewhere it
    is a threading.Thread started after threading.stack_size(size)."""
    out: dict = {}

    def run(arg=None) -> None:
        try:
            out["value"] = fn()
        except BaseException as e:          # handed to the caller
            out["error"] = e

    libc = ctypes.CDLL(None)
    if sys.platform.startswith("linux") and hasattr(libc, "pthread_attr_setguardsize"):
        attr = ctypes.create_string_buffer(256)         # pthread_attr_t: 56 bytes on glibc
        start = _START(run)
        thread = ctypes.c_ulong()
        assert libc.pthread_attr_init(attr) == 0
        assert libc.pthread_attr_setstacksize(attr, ctypes.c_size_t(size)) == 0
        assert libc.pthread_attr_setguardsize(attr, ctypes.c_size_t(GUARD)) == 0
        assert libc.pthread_create(ctypes.byref(thread), attr, start, None) == 0
        libc.pthread_join(thread, None)                 # without the GIL: run() takes it
        libc.pthread_attr_destroy(attr)
    else:
        previous = threading.stack_size(size)
        try:
            t = threading.Thread(target=run)
            t.start()
        finally:
            threading.stack_size(previous)
        t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _view(shape, strides) -> DLPackObject:
    """A float64 view of _BUF: element strides; values are their offsets into _BUF."""
    return from_address(_AT, shape, "float64", strides=strides, owner=_BUF)


def _expected(shape, strides) -> bytes:
    """The bytes of the view's values in C order."""
    return array.array("d", [float(sum(i * s for i, s in zip(index, strides, strict=True)))
                             for index in itertools.product(*[range(n) for n in shape])]).tobytes()


def c_bytes(dl) -> bytes:
    """A C-contiguous host object's bytes (any ndim: a buffer carries at most 64)."""
    return ctypes.string_at(dl.data_ptr, dl.nbytes)


# Each path makes its input on the calling thread and returns the work to run on a small stack:
# True when it gave the right values.

def transpose():
    """copy=True of a 4x6 transpose (the tiled copy)."""
    view = _view((4, 6), (1, 4))
    return lambda: c_bytes(asdlpack(view.__dlpack__(copy=True))) == _expected((4, 6), (1, 4))


def sparse_pickle():
    """A pickle of a view with large gaps (sent as a C-contiguous copy)."""
    view = _view((4, 6), (100, 2))
    return lambda: c_bytes(pickle.loads(pickle.dumps(view, protocol=5))) == _expected(
        (4, 6), (100, 2))


def many_dims():
    """Validation, copy=True and a pickle copy of a 64-dimensional view (per-dimension state on
    the heap), Fortran-ordered so that the copy moves every dimension."""
    shape = (1,) * 52 + (2,) * 12
    steps = (1,) * 52 + tuple(1 << i for i in range(12))
    wide = tuple(2 * s for s in steps)

    def work() -> bool:
        copy = asdlpack(_view(shape, steps).__dlpack__(copy=True))
        back = pickle.loads(pickle.dumps(_view(shape, wide), protocol=5))
        return c_bytes(copy) == _expected(shape, steps) and c_bytes(back) == _expected(
            shape, wide)
    return work


def arrow_levels():
    """Fixed-size lists 12 deep (the list sizes on the heap past 8 levels) as an array, and as
    a requested_schema (refused: a tensor exports one level)."""
    from dlpack.tests import arrow_producers as ap

    def col(levels: int, rows: int):
        if levels == 0:
            return ap.primitive("f", range(rows), b"f")
        return ap.Col(b"+w:2", rows, buffers=[None], children=[col(levels - 1, 2 * rows)])

    producer = ap.ArrayProducer(col(12, 1))
    wanted = ap.capsule(ap.build_schema(col(12, 1)), b"arrow_schema")

    def work() -> bool:
        got = asdlpack(producer)
        try:
            got.__arrow_c_array__(wanted)
            return False
        except BufferError as e:
            return "does not cast" in str(e) and got.shape == (1,) + (2,) * 12 and c_bytes(
                got) == array.array("f", range(4096)).tobytes()
    return work


def allocator():
    """The C exchange API's allocator (foreign threads call it) for 12 dimensions."""
    import dlpack.ctypes as dlc

    api = dlc.exchange_api(DLPackObject)
    shape = (ctypes.c_int64 * 12)(*[2] * 12)
    proto = dlc.DLTensor(None, dlc.DLDevice(1, 0), 12, dlc.DLDataType(2, 32, 1), shape, None, 0)
    out = ctypes.POINTER(dlc.DLManagedTensorVersioned)()

    def work() -> bool:
        rc = api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out), None,
                                          dlc.DLPackSetError())
        return rc == 0 and asdlpack(out).shape == (2,) * 12
    return work


def device():
    """Host copies of strided views of (fake) CUDA memory: rows, covering span, gather."""
    from dlpack.tests import fake_cuda
    from dlpack.tests.helpers import CAI

    fake = fake_cuda.installed() or fake_cuda.install()
    ptr = fake.device_array(array.array("d", range(1024)).tobytes(), device=1)
    views = [(shape, steps, asdlpack(CAI(ptr, shape=shape, strides=tuple(8 * s for s in steps),
                                         typestr="<f8")))
             for shape, steps in [((4, 6), (1, 4)), ((3, 2, 5), (100, 1, 20)),
                                  ((2,) * 10, tuple(1 << i for i in range(10)))]]
    return lambda: all(
        c_bytes(asdlpack(view.__dlpack__(dl_device=(1, 0), copy=True))) == _expected(
            shape, steps) for shape, steps, view in views)


PATHS = {f.__name__: f for f in (transpose, sparse_pickle, many_dims, arrow_levels, allocator,
                                   device)}


def nested_signal_copies(depth: int) -> int:
    """Copies of 32 MiB and more take the GIL back to run signal handlers (spec §8): a handler
    that starts another such copy, depth deep, on a main thread whose stack is LIMIT bytes.
    A timer fires during each copy; returns the depth reached."""
    n = (32 << 20) // 8 + 4096
    src = array.array("d", bytes(8 * n))
    big = from_address(src.buffer_info()[0], (n // 2, 2), "float64", strides=(1, n // 2),
                       owner=src)
    held: list = []
    reached = 0

    def handler(sig, frame) -> None:
        nonlocal reached
        if reached < depth:
            reached += 1
            signal.setitimer(signal.ITIMER_REAL, 1e-4)
            held.append(big.__dlpack__(copy=True))

    signal.signal(signal.SIGALRM, handler)
    hard = resource.getrlimit(resource.RLIMIT_STACK)[1]
    resource.setrlimit(resource.RLIMIT_STACK, (LIMIT, hard))
    handler(signal.SIGALRM, None)
    return reached


def main(argv: list[str]) -> None:
    if argv[0] == "signals":
        print("ok" if nested_signal_copies(int(argv[1])) == int(argv[1]) else "shallow")
        return
    make = PATHS[argv[0]]
    print("ok" if make()() and in_small_stack(make()) else "wrong values", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
