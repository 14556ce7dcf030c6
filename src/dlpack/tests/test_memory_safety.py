"""Memory safety with real consumers (the hostile corpus has the refusals): copies
aligned for the kernels that use them, what providers keep alive kept alive, deleters safe on
any thread and at shutdown, interfaces that cannot be given absent (docs/spec.md §4–§7)."""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import dlpack.ctypes as dlc
from dlpack import asdlpack, todict
from dlpack.tests import small_stacks
from dlpack.tests.helpers import c_library, lib, run_clean


def _child(code: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter that imports this pydlpack."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.dirname(__file__)))]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=env)


# -- alignment: every copy starts on a 256-byte boundary -------------------------------------------

def test_tensorflow_computes_on_bridge_copies():
    """TensorFlow aborts (SIGABRT, IsAligned) on a tensor that is not 64-byte aligned: a
    legacy export of read-only data is a copy, and TF's kernels run on it."""
    lib("tensorflow")
    run = _child("""
        import os
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        import tensorflow as tf
        from dlpack import asdlpack, todict
        for i in range(150):
            cap = asdlpack(tf.ones((3, 4)) * i).__dlpack__()
            assert todict(cap)["data"] % 256 == 0
            t = tf.experimental.dlpack.from_dlpack(cap)
            assert ((t + 1).numpy() == i + 1).all(), i
            assert float(tf.reduce_sum(t)) == 12 * i, i
        print("ok")
    """)
    assert run.returncode == 0 and run.stdout.strip() == "ok", (run.returncode, run.stderr[-3000:])


def test_jax_alignment():
    """JAX copies CPU data that is not 64-byte aligned; a bridge copy it takes as it is."""
    np = lib("numpy")
    jnp = lib("jax.numpy")
    a = np.arange(12.0, dtype=np.float32).reshape(3, 4)[:, ::-1]
    dl = asdlpack(a)
    copies = []

    class Copying:
        """Hands JAX a copy=True export of dl, noting where the copy lives."""

        def __dlpack_device__(self):
            return dl.__dlpack_device__()

        def __dlpack__(self, **kwargs):
            capsule = dl.__dlpack__(**{**kwargs, "copy": True})
            copies.append(todict(capsule)["data"])
            return capsule

    for _ in range(20):
        x = jnp.from_dlpack(Copying())
        assert copies[-1] % 256 == 0
        assert x.unsafe_buffer_pointer() == copies[-1]          # JAX made no second copy
        np.testing.assert_array_equal(np.asarray(x * 2 + 1), a * 2 + 1)


def test_every_kind_of_copy_is_aligned(fake):
    """Host copies of CUDA data (a fake driver), copy=True, legacy read-only exports, copies
    for C receivers and the exchange API's allocator: data % 256 == 0, byte_offset 0."""
    from dlpack.tests.helpers import cuda_array

    obj, _ = cuda_array(fake, range(6), (2, 3))
    strided, _ = cuda_array(fake, range(12), (3, 2), strides=(8, 4))
    capsules = [asdlpack(obj).__dlpack__(max_version=(1, 3), dl_device=(1, 0)),
                asdlpack(strided).__dlpack__(dl_device=(1, 0), copy=True),
                asdlpack(bytes(10)).__dlpack__(),
                asdlpack(bytearray(10)).__dlpack__(max_version=(1, 0), copy=True)]
    for capsule in capsules:
        info = todict(capsule)
        assert info["data"] % 256 == 0 and info["byte_offset"] == 0, info
    p = dlc.to_pointer(b"abc", versioned=False)
    assert p.contents.dl_tensor.data % 256 == 0
    p.contents.deleter(p)


# -- keep-alive: what the interface dict owns, the view owns --------------------------------------

def test_numpy_scalars_survive_gc_pressure():
    """NumPy (< 2.5) gives a scalar's __array_interface__ a temporary array that only the
    dict's '__ref' entry owns; the view keeps it, through GC and heap churn."""
    np = lib("numpy")
    values = [np.float64(2.5), np.int16(-3), np.complex128(1 - 1j), np.float32(0.125)]
    dls = [asdlpack(v) for v in values]
    del values
    gc.collect()
    junk = [np.full(1, -1.0) for _ in range(10_000)]
    del junk
    got = [np.from_dlpack(dl) for dl in dls]
    assert [g.item() for g in got] == [2.5, -3, 1 - 1j, 0.125]
    assert float((got[0] + got[3]) * 4) == 10.5                 # NumPy computing on them


# -- deleters: any thread, GIL or not, during and after shutdown ----------------------------------

@pytest.fixture(scope="module")
def late(tmp_path_factory):
    return c_library("late_deleters.c", tmp_path_factory.mktemp("late"))[1]


def test_deleter_on_a_c_thread_after_a_subinterpreter(late):
    """PyGILState_Check answers 1 once a subinterpreter has existed; a thread Python never
    saw calls the deleter, which frees the view and its provider."""
    name = "_interpreters" if sys.version_info >= (3, 13) else "_xxsubinterpreters"
    lib(name)
    run_clean(f"""
import ctypes, gc, importlib, weakref
import dlpack.ctypes as dlc
from dlpack import asdlpack
interpreters = importlib.import_module({name!r})
interpreters.destroy(interpreters.create())
c = ctypes.CDLL({late!r})
for versioned in (True, False):
    for _ in range(50):
        dl = asdlpack(bytearray(b"abcd"), allow_legacy_readonly=True)
        gone = weakref.ref(dl)
        p = dlc.to_pointer(dl, versioned=versioned)
        del dl
        if versioned:
            assert c.delete_in_c_thread(ctypes.cast(p, ctypes.c_void_p)) == 0
        else:
            p.contents.deleter(p)        # ctypes drops the GIL around the call
        assert gone() is None
print("ok")
""")


_SUBINTERPRETER_RELEASES = r"""
import ctypes, weakref
import dlpack.ctypes as dlc
from dlpack import asdlpack
from dlpack.tests import subinterpreters
get = ctypes.pythonapi.PyCapsule_GetPointer
get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


def run_in_subinterpreter(code, threads):
    # in the first kind of subinterpreter that can import ctypes (and start a thread, when
    # asked); an error there is raised here, on every Python
    interpreters, interp = subinterpreters.create("import ctypes, threading\n" + (
        "t = threading.Thread(target=int)\nt.start()\nt.join()\n" if threads else ""))
    try:
        subinterpreters.run(interpreters, interp, code)
    finally:
        interpreters.destroy(interp)


for kind in ("versioned", "legacy", "arrow"):
    for holds_gil in (True, False):
        for threads in (False, True):
            dl = asdlpack(bytearray(b"abcdefgh"))
            gone = weakref.ref(dl)
            if kind == "arrow":             # an exported ArrowArray: release at offset 64
                schema, array = dl.__arrow_c_array__()
                address = get(array, b"arrow_array")
                release = ctypes.c_void_p.from_address(address + 64).value
            else:
                p = dlc.to_pointer(dl, versioned=kind == "versioned")
                address = ctypes.cast(p, ctypes.c_void_p).value
                release = ctypes.cast(p.contents.deleter, ctypes.c_void_p).value
            del dl
            call = (f"ctypes.{'PYFUNCTYPE' if holds_gil else 'CFUNCTYPE'}(None, "
                    f"ctypes.c_void_p)({release})({address})")
            code = ("import ctypes, threading\n"
                    + (f"t = threading.Thread(target=lambda: {call})\nt.start()\nt.join()\n"
                       if threads else call + "\n"))
            run_in_subinterpreter(code, threads)
            assert gone() is None, (kind, holds_gil, threads)
# The exchange API reports a NULL output in the caller's interpreter, holding its GIL.
from dlpack import DLPackObject
stream = ctypes.cast(dlc.exchange_api(DLPackObject).current_work_stream, ctypes.c_void_p).value
run_in_subinterpreter(f'''if True:
    import ctypes
    try:
        ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p)(
            {stream})(1, 0, None)
    except TypeError as e:
        assert "output pointer is NULL" in str(e), e
    else:
        raise AssertionError("no error reported")
''', False)
print("ok")
"""


def test_deleters_and_arrow_releases_called_from_a_subinterpreter():
    """§4: a subinterpreter (holding its GIL, or not; its main thread or one of its own) calls
    a main-interpreter export's deleter or Arrow release: the view is released, no deadlock;
    the exchange API's error report reaches the subinterpreter's caller
    (the "holds the GIL" test once compared with the main interpreter's thread state). In a
    child with a timeout, so a deadlock fails the test instead of hanging it."""
    name = next((m for m in ("_interpreters", "_xxsubinterpreters")
                 if importlib.util.find_spec(m) is not None), None)
    if name is None:
        pytest.skip("no subinterpreter module (_interpreters, _xxsubinterpreters) here")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.dirname(__file__)))]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    try:
        run = subprocess.run([sys.executable, "-c", _SUBINTERPRETER_RELEASES, name],
                             capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("a deleter, release or exchange-API call from a subinterpreter deadlocked")
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]


def test_deleters_at_and_after_shutdown(late):
    """A deleter called while the interpreter finalizes (by the finalizing thread: the
    provider is released; by another thread: the reference is left) or after it has (from
    an atexit handler) neither crashes nor touches Python."""
    lib("numpy")
    run = _child(f"""
        import ctypes, os, time
        import numpy as np
        import dlpack.ctypes as dlc
        from dlpack import asdlpack

        # defined apart from this module's globals: a cycle through them would keep it alive
        ns = {{"write": os.write}}
        exec("class Provider(bytearray):\\n def __del__(self, write=write):\\n"
             "  write(1, b'provider released\\\\n')", ns)
        Provider = ns.pop("Provider")

        class Slow:
            def __del__(self, sleep=time.sleep):
                sleep(0.2)         # finalization waits here, the GIL released

        c = ctypes.CDLL({late!r})
        is_initialized = ctypes.cast(ctypes.pythonapi.Py_IsInitialized, ctypes.c_void_p)
        kept = np.from_dlpack(asdlpack(Provider(b"abcd")))      # freed at module teardown
        c.delete_at_exit(ctypes.cast(dlc.to_pointer(bytearray(8)), ctypes.c_void_p))
        c.delete_during_shutdown(ctypes.cast(dlc.to_pointer(bytearray(8)), ctypes.c_void_p),
                                 is_initialized)
        slow = Slow()
        print("exiting", flush=True)
    """)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["exiting", "provider", "released"], run.stdout
    assert "Fatal" not in run.stderr and "Exception ignored" not in run.stderr, run.stderr


# -- interfaces that cannot be given are absent --------------------------------------------------

def _int4():
    """A packed int4 view (no typestr, no PEP 3118 format) over 3 bytes."""
    from dlpack.tests.hostile import dl_capsule

    return asdlpack(dl_capsule(code=0, bits=4, shape=(5,)))


def test_unavailable_array_interface_lets_numpy_fall_back():
    np = lib("numpy")
    dl = _int4()
    assert not hasattr(dl, "__array_interface__")
    assert not hasattr(dl, "__cuda_array_interface__")
    with pytest.raises(BufferError, match="int4"):
        memoryview(dl)
    # No interface, no buffer: NumPy goes on to __array__, which refuses naming the dtype (spec
    # §5) rather than let NumPy wrap the object in a 0-d object array.
    with pytest.raises(BufferError, match="__array__: dtype int4"):
        np.asarray(dl)


def test_unavailable_cuda_array_interface_is_absent(fake):
    lanes = asdlpack(_cuda_lanes(fake.device_array(bytes(32), device=1)))
    assert not hasattr(lanes, "__cuda_array_interface__")
    with pytest.raises(AttributeError, match="__cuda_array_interface__: dtype float32x4"):
        lanes.__cuda_array_interface__          # noqa: B018


def _cuda_lanes(ptr):
    """A DLPack capsule of float32x4 data at ptr, on CUDA:1 (the fake driver's device memory)."""
    from dlpack.tests.hostile import KEEP, capsule, managed

    m = managed(code=2, bits=32, lanes=4, shape=(2,), device=(2, 1))
    m.dl_tensor.data = ptr
    KEEP.append(m)
    return capsule(ctypes.addressof(m), b"dltensor_versioned")


class _BufferInterface:
    """An __array_interface__ over a buffer object that holds fewer bytes than it describes."""

    def __init__(self, data: bytearray) -> None:
        self.__array_interface__ = {"version": 3, "typestr": "|u1", "shape": (100,),
                                    "data": data}


def _refused_after_the_buffer_was_taken(reader: str, data: bytearray) -> None:
    from dlpack._core import _rebuild

    if reader == "buffer protocol":       # the format is refused once the buffer is held
        view = memoryview(data).cast("P")
        with pytest.raises(BufferError, match="format 'P'"):
            asdlpack(view)
        view.release()                    # raises BufferError while an export is held
    elif reader == "__array_interface__":
        with pytest.raises(BufferError, match="outside the 8-byte buffer"):
            asdlpack(_BufferInterface(data))
    else:
        with pytest.raises(BufferError, match="outside the 8-byte buffer"):
            _rebuild(data, 1, 8, 1, (100,), (1,), 0, 0)


@pytest.mark.parametrize("reader", ["buffer protocol", "__array_interface__", "pickle"])
def test_a_reader_that_refuses_gives_the_buffer_back_at_once(reader):
    """Each reader that holds a buffer (DLPackObject._hold_buffer) and then refuses what it
    describes has released it by the time the refusal arrives: the exporter can resize."""
    data = bytearray(8)
    _refused_after_the_buffer_was_taken(reader, data)
    data.extend(bytes(4096))              # BufferError while an export is held
    assert len(data) == 4104


def test_gc_of_a_cycle_releases_the_held_buffer_before_its_exporter_dies():
    """A view in a garbage cycle (a traceback's frame holding it and its bytearray) gives the
    buffer back before the bytearray can die: clearing the cycle must not drop the export's
    reference without releasing it ("deallocated bytearray object has exported buffers")."""
    code = textwrap.dedent("""
        import gc, sys
        from dlpack import asdlpack
        def make():
            data = bytearray(range(40))
            views = [asdlpack(data), asdlpack(memoryview(data)),
                     asdlpack(data, allow_legacy_readonly=True)]
            raise RuntimeError
        for _ in range(3):
            try:
                make()
            except RuntimeError as e:
                e.cycle = e
            gc.collect()
        sys.stderr.flush()
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "exported buffers" not in run.stderr, run.stderr


# -- stack use: bounded per call, whatever ndim (spec §7) -----------------------------------------

@pytest.mark.parametrize("path", sorted(small_stacks.PATHS))
def test_every_path_runs_on_a_thread_with_a_small_stack(path):
    """Copies (a transpose), pickles (a sparse view's copy), validation and copies of 64
    dimensions, Arrow lists 12 deep, the exchange API's allocator and host copies of (fake)
    CUDA memory, each on a thread with a 32 KiB stack and a guard no frame can jump: they
    faulted where per-dimension state was 1024 entries on the stack (37 KiB for a copy)."""
    if path == "device" and not shutil.which("gcc") and not shutil.which("cc"):
        pytest.skip("the fake CUDA driver needs a C compiler")
    run = _child(f"from dlpack.tests.small_stacks import main; main([{path!r}])", timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", (run.returncode,
                                                                 run.stderr[-3000:])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_STACK limits the "
                    "main thread's growth on Linux only")
def test_copies_nested_in_signal_handlers_on_a_small_main_stack():
    """A handler that starts a copy of 32 MiB runs inside the copy it interrupted (spec §8),
    8 deep on a main thread limited to 128 KiB: 37 KiB a copy faulted at the fifth."""
    run = _child("from dlpack.tests.small_stacks import main; main(['signals', '8'])",
                 timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", (run.returncode,
                                                                 run.stderr[-3000:])
