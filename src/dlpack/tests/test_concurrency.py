"""Concurrency properties of every entry point foreign code may call (spec §6, §7): deleters,
Arrow releases, capsule destructors and the C exchange API's functions, called by several
threads at once through ctypes (which releases the GIL around a CFUNCTYPE call, as a C consumer
on another thread would) while other threads hold the GIL and allocate (collector churn), with
a switch interval of a microsecond. The object's reference count and its provider's lifetime
come out exact; nothing crashes, no error lands in another thread.

Each property runs in a child interpreter (a crash fails the test instead of ending the run),
on every Python CI runs and in the sanitizer job. Python 3.10 and 3.11 have one current
thread state per process: a deleter that took it for its own thread's dropped references
without the GIL there (two threads were enough to crash it)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_CHILD = r'''
import ctypes, gc, sys, threading, time, weakref
import dlpack.ctypes as dlc
from dlpack import DLPackObject, asdlpack

KIND, SECONDS, CALLERS = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
HELD = CALLERS == 0     # one caller, and a thread that holds the GIL in one long C call
capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
capsule_pointer.restype = ctypes.c_void_p
capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
capsule_name = ctypes.pythonapi.PyCapsule_GetName
capsule_name.restype = ctypes.c_char_p
capsule_name.argtypes = [ctypes.py_object]
decref = ctypes.pythonapi.Py_DecRef
decref.argtypes = [ctypes.py_object]
P = ctypes.c_void_p
RELEASE = ctypes.CFUNCTYPE(None, P)                  # the GIL is released around the call
libc = ctypes.CDLL(None)
libc.pthread_create.argtypes = [ctypes.POINTER(ctypes.c_ulong), P, P, P]
libc.pthread_join.argtypes = [ctypes.c_ulong, P]
turn = threading.local()


def foreign(function, argument):
    """Call a one-argument callback as C code would: by turns, from this thread with the GIL
    released, and from a new C thread Python never saw, which then finds another thread
    holding the GIL most of the time (the callback's ABI is a thread start routine's)."""
    function, argument = ctypes.cast(function, P).value, ctypes.cast(argument, P).value
    turn.c_thread = HELD or not getattr(turn, "c_thread", False)
    if not turn.c_thread:
        RELEASE(function)(argument)
        return
    tid = ctypes.c_ulong()
    assert libc.pthread_create(ctypes.byref(tid), None, function, argument) == 0
    assert libc.pthread_join(tid, None) == 0


class ArrowSchema(ctypes.Structure):
    _fields_ = [("format", P), ("name", P), ("metadata", P), ("flags", ctypes.c_int64),
                ("n_children", ctypes.c_int64), ("children", P), ("dictionary", P),
                ("release", RELEASE), ("private_data", P)]


class ArrowArray(ctypes.Structure):
    _fields_ = [("length", ctypes.c_int64), ("null_count", ctypes.c_int64),
                ("offset", ctypes.c_int64), ("n_buffers", ctypes.c_int64),
                ("n_children", ctypes.c_int64), ("buffers", P), ("children", P),
                ("dictionary", P), ("release", RELEASE), ("private_data", P)]


class ArrowDeviceArray(ctypes.Structure):
    _fields_ = [("array", ArrowArray), ("device_id", ctypes.c_int64),
                ("device_type", ctypes.c_int32), ("sync_event", P),
                ("reserved", ctypes.c_int64 * 3)]


GET = ctypes.CFUNCTYPE(ctypes.c_int, P, P)
LAST_ERROR = ctypes.CFUNCTYPE(P, P)


class ArrowArrayStream(ctypes.Structure):
    _fields_ = [("get_schema", GET), ("get_next", GET), ("get_last_error", LAST_ERROR),
                ("release", RELEASE), ("private_data", P)]


class ArrowDeviceArrayStream(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("get_schema", GET), ("get_next", GET),
                ("get_last_error", LAST_ERROR), ("release", RELEASE), ("private_data", P)]


def struct_of(capsule, kind):
    return kind.from_address(capsule_pointer(capsule, capsule_name(capsule)))


def release(s):
    """Call s's release callback, the GIL released (it NULLs release: the capsule then only
    frees the struct)."""
    if s.release:
        foreign(s.release, ctypes.addressof(s))


class Provider(bytearray):
    """A provider whose death is observable."""


local = threading.local()           # per thread state: what a thread set is what it reads
wrong = []


class Witness(bytearray):
    """A provider whose destructor notes a thread state that is not its OS thread's: a
    reference dropped without the GIL while another thread held it."""

    def __del__(self):
        if getattr(local, "ident", threading.get_ident()) != threading.get_ident():
            wrong.append(KIND)


provider = Provider(range(256))
gone = weakref.ref(provider)
dl = asdlpack(provider)
api = dlc.exchange_api(DLPackObject)
refs = sys.getrefcount(dl), sys.getrefcount(provider)


def deleter_call(make, versioned):
    p = dlc.to_pointer(make(), versioned=versioned)
    foreign(p.contents.deleter, p)


def from_py_then_delete(make):
    out = ctypes.POINTER(dlc.DLManagedTensorVersioned)()
    assert api.managed_tensor_from_py_object_no_sync(make(), ctypes.byref(out)) == 0
    if threading.get_ident() % 2:               # by the consumer, without the GIL
        foreign(out.contents.deleter, out)
    else:                                       # or handed back: the new object owns it
        back = ctypes.py_object()
        assert api.managed_tensor_to_py_object_no_sync(out, ctypes.byref(back)) == 0
        assert type(back.value) is DLPackObject and back.value.shape[0] > 0
        decref(back)                            # the reference the API handed over


def allocate_then_delete():
    proto = dlc.DLTensor()
    shape = (ctypes.c_int64 * 2)(3, 5)
    proto.ndim, proto.shape = 2, shape
    proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = 2, 32, 1       # float32
    proto.device.device_type = 1
    out = ctypes.POINTER(dlc.DLManagedTensorVersioned)()
    assert api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out), None,
                                        dlc.DLPackSetError()) == 0
    assert ctypes.c_void_p.from_buffer(out.contents.dl_tensor, 0).value % 256 == 0
    foreign(out.contents.deleter, out)


def work_stream():
    stream = ctypes.c_void_p(7)
    assert api.current_work_stream(1, 0, ctypes.byref(stream)) == 0 and not stream.value
    try:                        # a NULL output: the error lands in this thread, not another
        api.current_work_stream(1, 0, None)
    except SystemError as e:    # ctypes: "returned a result with an exception set"
        assert "output pointer is NULL" in str(e.__cause__), repr(e.__cause__)
    else:
        raise AssertionError("current_work_stream(NULL) set no error in its caller's thread")


def arrow_stream(make, device):
    kind, item = ((ArrowDeviceArrayStream, ArrowDeviceArray) if device else
                  (ArrowArrayStream, ArrowArray))
    capsule = make().__arrow_c_device_stream__() if device else make().__arrow_c_stream__()
    stream = struct_of(capsule, kind)
    schema, array = ArrowSchema(), item()
    at = ctypes.addressof(stream)
    assert stream.get_schema(at, ctypes.addressof(schema)) == 0
    assert stream.get_next(at, ctypes.addressof(array)) == 0
    release(schema)
    release(stream)                 # the array it gave outlives it
    release(array.array if device else array)
    del capsule


def unconsumed_capsules(make):
    """Capsule destructors (called with the GIL, by whichever thread drops the capsule)."""
    dl = make()
    a = dl.__dlpack__(max_version=(1, 0))
    b = dl.__dlpack__()
    c = dl.__arrow_c_array__()
    d = dl.__arrow_c_device_array__()
    e = dl.__arrow_c_stream__()
    del dl, a, b, c, d, e


# Each entry point is called (make gives its object, which nothing else references) on the
# shared view, whose reference count other threads change meanwhile, on a new view of its
# provider, which the callback's drop destroys, and on a new view of a Witness, whose
# destructor then runs in the callback.
CALLS = {
    "versioned deleter": lambda make: deleter_call(make, True),
    "legacy deleter": lambda make: deleter_call(make, False),
    "ArrowSchema release": lambda make: release(
        struct_of(make().__arrow_c_schema__(), ArrowSchema)),
    "ArrowArray release": lambda make: [release(struct_of(c, k)) for c, k in zip(
        make().__arrow_c_array__(), (ArrowSchema, ArrowArray))],
    "ArrowDeviceArray release": lambda make: [release(struct_of(c, k)) for c, k in zip(
        make().__arrow_c_device_array__(), (ArrowSchema, ArrowArray))],
    "ArrowArrayStream release": lambda make: arrow_stream(make, False),
    "ArrowDeviceArrayStream release": lambda make: arrow_stream(make, True),
    "capsule destructors": unconsumed_capsules,
    "exchange API": lambda make: (from_py_then_delete(make), allocate_then_delete(),
                                  work_stream()),
}
call = CALLS[KIND]
stop = time.monotonic() + SECONDS
errors, counts = [], []


def caller():
    local.ident = threading.get_ident()
    n = 0
    try:
        while time.monotonic() < stop:
            call(lambda: dl)
            call(lambda: asdlpack(provider))
            call(lambda: asdlpack(Witness(b"abcd")))
            n += 1
    except BaseException as e:
        errors.append(e)
    counts.append(n)


def churn():
    """Holds the GIL, takes and drops references to the view and its provider, and allocates
    cycles for the collector, which runs often."""
    local.ident = threading.get_ident()
    try:
        while time.monotonic() < stop:
            held = [dl, provider] * 100
            del held
            junk = [[] for _ in range(200)]
            for a, b in zip(junk, junk[1:]):
                a.append(b)
                b.append(a)
            del junk
    except BaseException as e:
        errors.append(e)


def hold():
    """Holds the GIL through one long C call at a time (sum over a range checks for no
    switch): a C thread started meanwhile finds the GIL held by this thread, every time."""
    local.ident = threading.get_ident()
    while time.monotonic() < stop:
        sum(range(50_000))


if HELD:
    threads = [threading.Thread(target=caller), threading.Thread(target=hold)]
else:
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50, 5, 5)
    threads = ([threading.Thread(target=caller) for _ in range(CALLERS)]
               + [threading.Thread(target=churn) for _ in range(2)])
for t in threads:
    t.start()
for t in threads:
    t.join()
gc.collect()
if errors:
    raise errors[0]
assert min(counts) > 0, counts
assert not wrong, f"{len(wrong)} destructors ran on another thread's state"
assert (sys.getrefcount(dl), sys.getrefcount(provider)) == refs, (
    KIND, (sys.getrefcount(dl), sys.getrefcount(provider)), refs)
del provider
assert gone() is not None, "the provider died while its view lived"
del dl
gc.collect()
assert gone() is None, "the provider outlived its last view"
print("ok", sum(counts))
'''

ENTRY_POINTS = ["versioned deleter", "legacy deleter", "ArrowSchema release",
                "ArrowArray release", "ArrowDeviceArray release", "ArrowArrayStream release",
                "ArrowDeviceArrayStream release", "capsule destructors", "exchange API"]


def _run(entry_point: str, seconds: float, callers: int) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.dirname(__file__)))]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    run = subprocess.run([sys.executable, "-c", _CHILD, entry_point, str(seconds), str(callers)],
                         capture_output=True, text=True, timeout=180, env=env)
    assert run.returncode == 0, (run.returncode, run.stderr[-3000:])
    assert run.stdout.startswith("ok"), run.stdout
    assert "Exception ignored" not in run.stderr and "Fatal" not in run.stderr, run.stderr


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_entry_point_under_concurrency(entry_point):
    """Four threads call the entry point without the GIL (by turns from a new C thread;
    capsule destructors: with it, as Python calls them) for a second, while two others take
    and drop references to the same objects and allocate, holding it."""
    _run(entry_point, 1.0, 4)


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_entry_point_from_a_c_thread_while_another_holds_the_gil(entry_point):
    """A C thread calls the entry point while a Python thread holds the GIL in a long C call:
    the callback waits for the GIL and drops its references in its own thread state (it
    dropped them at once in the holder's, on Python 3.10 and 3.11, and crashed)."""
    _run(entry_point, 0.5, 0)
