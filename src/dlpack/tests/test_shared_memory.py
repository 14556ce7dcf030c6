"""Shared host memory (spec §11, dlpack.share): a handle in every pickle protocol, carried by real
processes (multiprocessing with spawn and fork, ProcessPoolExecutor, Dask, Ray); writes seen both
ways, read-only data mapped copy-on-write, handles forwarded as handles, segments gone with their
last holder (SIGKILL included), forged handles refused naming the field."""

import concurrent.futures
import gc
import multiprocessing as mp
import os
import pickle
import signal
import sys

import pytest

from dlpack import asdlpack, from_address, share
from dlpack._core import _rebuild_shared
from dlpack.tests import shm_children as kids
from dlpack.tests.helpers import lib

np = lib("numpy")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="shared segments are memfds: Linux only")

FIELDS = ("pid", "fd", "device", "inode", "token", "serial", "offset", "code", "bits", "lanes",
          "shape", "strides", "flags")


def _fields(x, protocol=5):
    _fn, args = pickle.loads(pickle.dumps(_Peek(x), protocol))
    return dict(zip(FIELDS, args, strict=True))


class _Peek:
    """Pickles as what x's reduce gives, unpickles as (function, arguments): the handle."""
    def __init__(self, x):
        self.x = x

    def __reduce__(self):
        fn, args = self.x.__reduce_ex__(5)
        return tuple, ((fn, args),)


def _dev_shm_ours():
    """Entries of /dev/shm a pydlpack segment could have left (this suite names none there);
    only those, never other users' (a CI run shares /dev/shm)."""
    return [n for n in os.listdir("/dev/shm") if n.startswith(("pydlpack", "memfd"))]


# -- in one process ------------------------------------------------------------------------------

def test_share_copies_once_and_consumers_read_in_place():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]      # strided: gathered in C order
    x = share(a)
    assert x.shape == (3, 2) and x.strides == (2, 1) and not x.readonly
    assert kids.mapping_perms(x.data_ptr).startswith("rw-s /memfd:pydlpack-shm")
    n = np.from_dlpack(x)
    assert n.__array_interface__["data"][0] == x.data_ptr
    np.testing.assert_array_equal(n, a)
    torch = lib("torch")
    t = torch.from_dlpack(x)
    assert t.data_ptr() == x.data_ptr
    t[0, 0] = 5.0
    assert n[0, 0] == 5.0 and a[0, 0] == 0.0          # a copy of a, shared by its consumers
    pa = lib("pyarrow")
    arr = pa.array(share(np.arange(4, dtype=np.int64)))
    assert arr.to_pylist() == [0, 1, 2, 3]
    assert share(x) is x                                # already shared: used where it lies
    again = share(n[1:])                                # NumPy's view of it: found by address
    assert again.data_ptr == n[1:].__array_interface__["data"][0] and again.base is x.base
    assert pickle.loads(pickle.dumps(again)).data_ptr == again.data_ptr
    assert share(np.from_dlpack(x).copy()).base is not x.base      # a copy is not shared


@pytest.mark.parametrize("a", [np.zeros((0, 5)), np.array(3.5), np.arange(10)[::-3],
                               np.arange(6, dtype=np.int16).reshape(2, 3).T, np.array([True])],
                         ids=["empty", "0-d", "negative", "fortran", "bool"])
def test_shapes_and_dtypes(a):
    x = share(a)
    y = pickle.loads(pickle.dumps(x, 2))
    assert (y.shape, y.dtype, y.data_ptr) == (a.shape, x.dtype, x.data_ptr)
    np.testing.assert_array_equal(np.from_dlpack(y), a)


def test_read_only_is_mapped_copy_on_write():
    x = share(np.arange(6.0), readonly=True)
    assert x.readonly and kids.mapping_perms(x.data_ptr).startswith("rw-p")
    assert not np.from_dlpack(x).flags.writeable
    w = share(np.arange(6.0))
    v = share(w, readonly=True)                         # a read-only view of the same segment
    assert v.readonly and v.data_ptr == w.data_ptr and not w.readonly
    assert share(asdlpack(b"abc")).readonly             # the source's read-only-ness by default


def test_a_consumer_ignoring_read_only_changes_no_other_process():
    """torch has no read-only tensors: its in-place write lands in this process's private
    copy of the page, not in the segment another process reads (and does not fault)."""
    torch = lib("torch")
    x = share(np.arange(6.0), readonly=True)
    fields = _fields(x)
    later = pickle.loads(pickle.dumps(x))               # a load here: the same mapping
    t = torch.from_dlpack(x)
    t += 1
    assert t.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert np.from_dlpack(later)[0] == 1.0              # this process: torch's write, as ever
    shared = os.pread(fields["fd"], 48, 4096 + fields["offset"])     # what others map
    assert np.frombuffer(shared, np.float64).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_every_protocol_pickles_a_handle(protocol):
    x = share(np.arange(1 << 16, dtype=np.float64))    # 512 KiB
    stream = pickle.dumps(x, protocol)
    assert len(stream) < 1024
    y = pickle.loads(stream)
    assert y.data_ptr == x.data_ptr and y.base is x.base   # one mapping per process
    assert _fields(x, protocol)["pid"] == os.getpid()


def test_views_in_a_segment_pickle_as_handles_others_by_value():
    x = share(np.arange(10, dtype=np.int32))
    part = from_address(x.data_ptr + 8, (3,), "int32", owner=x, strides=(2,))
    f = _fields(part)
    assert f["offset"] == 8 and f["strides"] == (2,)
    assert pickle.loads(pickle.dumps(part)).data_ptr == x.data_ptr + 8
    assert len(pickle.dumps(asdlpack(np.arange(1000)), 2)) > 8000  # not shared: by value


def test_refusals_of_share():
    with pytest.raises(TypeError, match="readonly"):
        share(np.arange(3), readonly=1)
    ro = share(np.arange(3), readonly=True)
    w = share(ro, readonly=False)                       # writable from read-only: a copy
    assert not w.readonly and w.data_ptr != ro.data_ptr


def test_copy_and_deepcopy_copy_the_values():
    """copy.copy and copy.deepcopy are values, as of any view: not another view of the segment
    (a deep copy that writes through to the original would be a wrong value)."""
    import copy

    for ro in (False, True):
        x = share(np.arange(4.0), readonly=ro)
        for c in (copy.copy(x), copy.deepcopy(x), copy.deepcopy([x])[0]):
            assert c.data_ptr != x.data_ptr and c.readonly == ro
            assert np.from_dlpack(c).tolist() == [0.0, 1.0, 2.0, 3.0]
            if not ro:
                np.from_dlpack(c)[0] = 9
                assert np.from_dlpack(x)[0] == 0
    view = share(np.from_dlpack(share(np.arange(6.0)))[1::2])   # a view of a segment
    assert np.from_dlpack(copy.deepcopy(view)).tolist() == [1.0, 3.0, 5.0]


def test_more_than_the_machine_holds_is_a_memory_error():
    """A shared segment is not refused when mapped, as malloc refuses what it cannot hold:
    filling 8 TiB would be the OOM killer's, not an exception."""
    huge = np.broadcast_to(np.zeros(1), (1 << 40,))
    with pytest.raises(MemoryError, match="more than this machine's memory and swap"):
        share(huge)


def test_running_out_of_descriptors_is_named():
    """Each segment holds a descriptor: at the limit, share and a load name the limit and the
    way out, not an old kernel or an exited sender."""
    import resource

    x = share(np.arange(4.0))
    gc.collect()                # what earlier tests left goes now, not inside the share below,
    share(np.zeros(1))          # where the descriptors it frees would let memfd_create succeed
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    filler = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(map(int, os.listdir("/proc/self/fd"))) + 8,
                                                hard))
    try:
        while True:
            try:
                filler.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        with pytest.raises(BufferError, match=r"Too many open files.*RLIMIT_NOFILE"):
            share(np.arange(3.0))
        with pytest.raises(BufferError, match=r"Too many open files.*RLIMIT_NOFILE"):
            _rebuild_shared(*_args(x, inode=(1 << 40)))     # not mapped here: opened
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# -- forged, corrupt and stale handles ---------------------------------------------------------

def _args(x, **change):
    f = _fields(x)
    f.update(change)
    return tuple(f.values())


@pytest.mark.parametrize("field,value,match", [
    ("pid", -1, "field 'pid'"), ("pid", "1", "field 'pid'"), ("fd", -3, "field 'fd'"),
    ("device", 1.5, "field 'device'"), ("inode", None, "field 'inode'"),
    ("token", b"short", "field 'token'"), ("serial", -1, "field 'serial'"),
    ("offset", -1, "field 'offset'"),
    ("shape", (1 << 40,), "'shape' = .* reach outside the 32-byte data of the segment"),
    ("strides", (3,), "'strides' = \\(3,\\) .* reach outside the 32-byte data"),
    ("flags", 8, "field 'flags'"),
])
def test_forged_fields_are_refused(field, value, match):
    x = share(np.arange(4, dtype=np.float64))
    with pytest.raises(BufferError, match=match):
        _rebuild_shared(*_args(x, **{field: value}))


@pytest.mark.parametrize("change", [
    {"shape": (), "strides": (), "offset": 26},                  # a 0-d element past the end
    {"shape": (4,), "strides": (-1,)},                          # backwards from the start
    {"shape": (3,), "strides": (-(1 << 61),), "offset": 32},    # strides past the address space
    {"lanes": 4, "shape": (2,), "strides": (1,)},              # 64 bytes of vectors in 32
    {"code": 0, "bits": 4, "shape": (65,), "strides": (1,)},   # packed int4: 33 bytes
    {"shape": (1 << 62, 4), "strides": (4, 1)},                 # a byte size past 64 bits
])
def test_forged_layouts_are_refused(change):
    """Layouts whose elements reach outside the segment's data, however they get there."""
    x = share(np.arange(4, dtype=np.float64))
    with pytest.raises(BufferError, match=r"reach|overflows|address space"):
        _rebuild_shared(*_args(x, **change))


def test_forged_layouts_inside_the_data_load_in_place():
    """Backwards strides from the last element, and empty arrays with any strides at the end of
    the data: inside it, so loaded where they lie."""
    x = share(np.arange(4, dtype=np.float64))
    back = _rebuild_shared(*_args(x, shape=(4,), strides=(-1,), offset=24))
    assert back.data_ptr == x.data_ptr + 24
    assert np.from_dlpack(back).tolist() == [3.0, 2.0, 1.0, 0.0]
    empty = _rebuild_shared(*_args(x, shape=(0, 5), strides=(1 << 60, 1 << 60), offset=32))
    assert np.from_dlpack(empty).shape == (0, 5)


def test_forged_handles_in_this_process():
    x = share(np.arange(4, dtype=np.float64))
    with pytest.raises(BufferError, match="field 'token'"):        # the mapped segment's
        _rebuild_shared(*_args(x, token=bytes(16)))
    with pytest.raises(BufferError, match="12 fields where this pickle has 13"):
        _rebuild_shared(*_args(x)[:-1])
    with pytest.raises(BufferError, match="offset"):
        _rebuild_shared(*_args(x, offset=8 + 4096))
    import tempfile

    with tempfile.TemporaryFile() as f:                # a real file: not a sealed memfd
        f.write(b"\0" * 8192)
        f.flush()
        st = os.fstat(f.fileno())
        with pytest.raises(BufferError, match=r"field 'fd'.*not a sealed memfd"):
            _rebuild_shared(*_args(x, fd=f.fileno(), device=st.st_dev, inode=st.st_ino))
        with pytest.raises(BufferError, match=r"fields 'device' and 'inode'.*another file"):
            _rebuild_shared(*_args(x, fd=f.fileno(), device=st.st_dev, inode=st.st_ino + 99))
    fd = os.memfd_create("not-pydlpack", os.MFD_ALLOW_SEALING)     # sealed, no magic
    try:
        os.ftruncate(fd, 8192)
        import fcntl

        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
        st = os.fstat(fd)
        with pytest.raises(BufferError, match=r"field 'fd'.*no magic"):
            _rebuild_shared(*_args(x, fd=fd, device=st.st_dev, inode=st.st_ino))
    finally:
        os.close(fd)
    with pytest.raises(BufferError, match=r"'pid' and 'fd'.*cannot be opened"):
        _rebuild_shared(*_args(x, fd=(1 << 30), inode=(1 << 40)))     # not mapped here


# -- real processes --------------------------------------------------------------------------

def test_spawn_process_args_write_back_and_forward(child_path):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    x = share(np.arange(4, dtype=np.float64))
    ro = share(np.arange(3, dtype=np.float64), readonly=True)
    p = ctx.Process(target=kids.look_and_write, args=(x, q))
    p.start()
    values, readonly, writeable, perms = q.get(timeout=60)
    assert values == [0.0, 1.0, 2.0, 3.0] and not readonly and perms.startswith("rw-s")
    back = q.get(timeout=60)                            # the child's handle, loaded here
    p.join(60)
    assert p.exitcode == 0
    assert back.data_ptr == x.data_ptr and np.from_dlpack(x)[0] == 99.0  # the child's write
    # every protocol, through a second spawned process, and read-only mapped read-only
    streams = [pickle.dumps(x, proto) for proto in range(pickle.HIGHEST_PROTOCOL + 1)]
    p = ctx.Process(target=kids.load_stream, args=(pickle.dumps(ro, 0), q))
    p.start()
    values, readonly, writeable, perms = q.get(timeout=60)
    p.join(60)
    assert values == [0.0, 1.0, 2.0] and readonly and not writeable and perms.startswith("rw-p")
    assert p.exitcode == 0
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        for proto, stream in enumerate(streams):
            assert pool.submit(kids.load_stream, stream, None).exception(60) is None  # 7.0
            assert np.from_dlpack(x)[0] == 7.0, proto
            np.from_dlpack(x)[0] = 0.0
        # forwarding: the worker's pickle names the worker, and loads here as the same memory
        _check_forwarded(pool.submit(kids.forward, x).result(60), x)


def _handle_pid(stream):
    """The pid a pickled handle names (read without loading it)."""
    class Peek(pickle.Unpickler):
        def find_class(self, module, name):
            return (lambda *a: a) if name == "_rebuild_shared" else super().find_class(module,
                                                                                          name)
    return Peek(__import__("io").BytesIO(stream)).load()[0]


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_fork_process_pool_and_queue():
    ctx = mp.get_context("fork")
    x = share(np.zeros(4))
    q = ctx.Queue()
    p = ctx.Process(target=kids.look_and_write, args=(x, q))   # inherited, not pickled
    p.start()
    assert q.get(timeout=60)[0] == [0.0] * 4
    q.get(timeout=60)                                   # through a Queue: a handle
    p.join(60)
    assert np.from_dlpack(x)[0] == 99.0
    with ctx.Pool(2) as pool:
        seen = pool.starmap(kids.write_first, [(x, 1.0), (x, 1.0)])
        assert seen[0][0] == 1.0 and np.from_dlpack(x)[0] == 1.0
        _check_forwarded(pool.map(kids.forward, [x])[0], x)
        _check_read_only(pool.apply(kids.look, (share(np.arange(2.0), readonly=True),)))


def _check_forwarded(result, x):
    """A worker's pickle of what it received: its own handle, loading here as x's memory."""
    stream, worker = result
    assert _handle_pid(stream) == worker != os.getpid()
    assert pickle.loads(stream).data_ptr == x.data_ptr


def _check_read_only(seen):
    values, readonly, writeable, perms = seen
    assert values == [0.0, 1.0] and readonly and not writeable and perms.startswith("rw-p")


def test_dask_local_cluster(child_path):
    distributed = lib("distributed")
    x = share(np.zeros(3))
    with distributed.LocalCluster(n_workers=1, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            seen = client.submit(kids.write_first, x, 3.0, pure=False).result(60)
            assert seen == [3.0, 0.0, 0.0] and np.from_dlpack(x)[0] == 3.0
            _check_forwarded(client.submit(kids.forward, x, pure=False).result(60), x)
            _check_read_only(client.submit(kids.look, share(np.arange(2.0), readonly=True),
                                           pure=False).result(60))


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")
def test_ray_one_node(child_path):
    ray = lib("ray")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        x = share(np.zeros(3))
        seen = ray.get(ray.remote(kids.write_first).remote(x, 4.0), timeout=120)
        assert seen == [4.0, 0.0, 0.0] and np.from_dlpack(x)[0] == 4.0
        _check_forwarded(ray.get(ray.remote(kids.forward).remote(x), timeout=120), x)
        ro = share(np.arange(2.0), readonly=True)
        _check_read_only(ray.get(ray.remote(kids.look).remote(ro), timeout=120))
    finally:
        ray.shutdown()


# -- lifetime: nothing outlives its last holder ----------------------------------------------

def test_lifetime_normal_exits_and_sigkill(child_path):
    ctx = mp.get_context("spawn")
    shm_before = _dev_shm_ours()
    import gc

    share(np.zeros(1))                                  # lets go of pickles loaded earlier
    gc.collect()
    base_fds, base_maps = kids.memfds(), kids.mapped()
    q, hold = ctx.Queue(), ctx.Event()
    # the creator SIGKILLed: what the receiver mapped stays valid, and goes with its last view
    p = ctx.Process(target=kids.make_and_send, args=(q, hold))
    p.start()
    x = pickle.loads(q.get(timeout=60))
    os.kill(p.pid, signal.SIGKILL)
    p.join(60)
    assert np.from_dlpack(x).tolist() == list(map(float, range(8)))
    assert kids.memfds() == base_fds + 1
    del x
    gc.collect()
    assert (kids.memfds(), kids.mapped()) == (base_fds, base_maps)
    # a creator that exits before its pickle is loaded: refused, naming the fields
    q = ctx.Queue()                                     # (a SIGKILLed writer may break one)
    p = ctx.Process(target=kids.make_and_exit, args=(q,))
    p.start()
    stream = q.get(timeout=60)
    p.join(60)
    with pytest.raises(BufferError, match=r"'pid' and 'fd'.*exited or dropped"):
        pickle.loads(stream)
    # the receiver SIGKILLed, then the creator (here) lets go: nothing is left
    y = share(np.arange(5.0))
    q = ctx.Queue()
    p = ctx.Process(target=kids.receive_and_wait, args=(pickle.dumps(y), q, hold))
    p.start()
    assert q.get(timeout=60) == (True, 1)               # the receiver holds one descriptor
    os.kill(p.pid, signal.SIGKILL)
    p.join(60)
    del y
    share(np.zeros(1))                                  # lets go of y's loaded pickle
    gc.collect()
    assert (kids.memfds(), kids.mapped()) == (base_fds, base_maps)
    assert _dev_shm_ours() == shm_before == []


def test_each_pickle_keeps_the_segment_until_it_is_loaded():
    """A pickle loaded twice (Ray's put read by two tasks) counts once: a later pickle not yet
    loaded still keeps the segment after the sender drops every view (spec §11)."""
    x = share(np.arange(3.0))
    twice = pickle.dumps(x)
    first, second = pickle.loads(twice), pickle.loads(twice)
    loaded, waiting = pickle.dumps(x), pickle.dumps(x)
    third = pickle.loads(loaded)
    del x, first, second, third
    gc.collect()
    share(np.zeros(1))                                  # lets go of the loaded pickles
    assert np.from_dlpack(pickle.loads(waiting)).tolist() == [0.0, 1.0, 2.0]


# -- reentrancy, long-lived objects, stale handles -------------------------------------------------

_REENTRANT = r'''
import faulthandler, gc, pickle, signal, sys, weakref
import numpy as np
from dlpack import share
faulthandler.dump_traceback_later(60, exit=True)       # a deadlock fails, it does not hang
x = share(np.arange(4.0))
# a finalizer that pickles, run when a share or pickle lets go of a loaded pickle's segment
y = share(np.arange(4.0))
pickle.loads(pickle.dumps(y))
weakref.finalize(y.base, lambda: pickle.dumps(x))
del y
gc.collect()
pickle.dumps(x)
# __del__ of garbage cycles, collected inside share and pickle, sharing and pickling again
class Cycle:
    def __init__(self):
        self.me = self
    def __del__(self):
        pickle.loads(pickle.dumps(share(np.arange(2.0))))
gc.set_threshold(20, 1, 1)
for _ in range(3000):
    Cycle()
    pickle.loads(pickle.dumps(share(np.arange(3.0))))
# a signal handler that pickles, every 0.2 ms, while shares and pickles run
signal.signal(signal.SIGALRM, lambda *_: pickle.loads(pickle.dumps(x)))
signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
for _ in range(3000):
    pickle.loads(pickle.dumps(share(np.arange(3.0))))
signal.setitimer(signal.ITIMER_REAL, 0)
print(np.from_dlpack(pickle.loads(pickle.dumps(x))).tolist())
'''


def test_finalizers_and_signal_handlers_may_share_and_pickle():
    """Code that runs inside a share or pickle on the same thread (a finalizer, a collected
    cycle's __del__, a signal handler) may share and pickle too: no deadlock on the tables'
    lock, no entry lost (spec §11's reentrancy)."""
    import subprocess

    run = subprocess.run([sys.executable, "-c", _REENTRANT], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split("\n")[-2] == "[0.0, 1.0, 2.0, 3.0]"


_LOAD_ALL = r'''
import pickle, sys
import numpy as np
sent = pickle.load(sys.stdin.buffer)
got = [(want, np.from_dlpack(pickle.loads(s)).tolist()) for want, s in sent]
print(sum(values != [float(want)] * 2 for want, values in got), len(got))
'''


def test_threads_sharing_and_pickling_lose_no_pickle():
    """Threads sharing, pickling and loading at once (a switch interval of a microsecond): every
    pickle left unloaded still loads in another process after the sender dropped its views and
    let go of the loaded ones, with its own values (the tables' lock, spec §11)."""
    import subprocess
    import threading

    streams, guard = [], threading.Lock()

    def work(k):
        for i in range(100):
            x = share(np.full(2, float(k * 1000 + i)))
            stream = pickle.dumps(x)
            pickle.loads(pickle.dumps(x))                   # a loaded pickle, let go at a prune
            with guard:
                streams.append((k * 1000 + i, stream))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    gc.collect()
    share(np.zeros(1))                                      # lets go of the loaded pickles
    run = subprocess.run([sys.executable, "-c", _LOAD_ALL], input=pickle.dumps(streams),
                         capture_output=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == [b"0", b"400"], run.stdout


def test_pickles_past_the_serials_keep_the_segment_once():
    """A long-lived object pickled more often than the header has serials (a broadcast sent to
    every task) keeps its segment once, not an entry per pickle that every share and pickle
    would walk again."""
    import tracemalloc

    x = share(np.arange(3.0))
    for _ in range(32448 + 10):                        # the header's serials, and past them
        pickle.loads(pickle.dumps(x))
    tracemalloc.start()
    try:
        for n in (2500, 5000):      # the first fills caches and free lists, the second keeps
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(n):
                stream = pickle.dumps(x)
                assert np.from_dlpack(pickle.loads(stream)).tolist() == [0.0, 1.0, 2.0]
            del stream
            gc.collect()
            kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 100_000, f"{kept} bytes kept by 5000 pickles past the serials"  # ~100 each


def test_another_librarys_view_of_read_only_shared_data_is_copied():
    """torch's write into read-only shared data lands in this process's copy-on-write pages,
    and a view of them may say read-only again (NumPy's of torch's tensor): sharing any such
    view in place would send what the segment holds, not the view's values. A writable
    segment's views are shared in place (test_share_copies_once_and_consumers_read_in_place)."""
    torch = lib("torch")
    x = share(np.zeros(4), readonly=True)
    t = torch.from_dlpack(x)
    t += 7
    a = t.numpy()
    a.flags.writeable = False
    for view in (t, a, np.from_dlpack(x)):
        s = share(view)
        assert s.data_ptr != x.data_ptr and s.readonly == (view is not t)   # the view's flag
        f = _fields(s)
        sent = os.pread(f["fd"], 32, 4096 + f["offset"])   # what another process maps
        assert np.frombuffer(sent, np.float64).tolist() == [7.0] * 4


_RACING_LOADS = r'''
import os, pickle, sys, threading
import numpy as np
from dlpack import share
from dlpack.tests import shm_children as kids
handles = pickle.load(sys.stdin.buffer)
barrier, out = threading.Barrier(len(handles)), []
def load(h):
    barrier.wait()
    out.append(pickle.loads(h))
threads = [threading.Thread(target=load, args=(h,)) for h in handles]
for t in threads: t.start()
for t in threads: t.join()
print(kids.memfds(), kids.mapped(), len({o.data_ptr for o in out}),
      sum(share(np.from_dlpack(o)[1:]).data_ptr == o.data_ptr + 8 for o in out))
'''


def test_loads_racing_in_threads_map_a_segment_once():
    """Threads loading handles of one segment at once share one mapping (the first to enter
    the table wins), so every view of it is found by address and shared in place."""
    import subprocess

    x = share(np.arange(8.0))
    handles = [pickle.dumps(x) for _ in range(8)]
    for _ in range(3):
        run = subprocess.run([sys.executable, "-c", _RACING_LOADS], input=pickle.dumps(handles),
                             capture_output=True, timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.split() == [b"1", b"1", b"1", b"8"], run.stdout


def test_a_handle_is_checked_field_by_field_before_it_is_opened():
    """Every field's type comes before the segment is opened: an offset of the wrong type is
    named even when the descriptor cannot be opened, and a number that is not a segment names
    both an exited sender and another PID namespace."""
    x = share(np.arange(4, dtype=np.float64))
    with pytest.raises(BufferError, match="field 'offset'"):
        _rebuild_shared(*_args(x, offset="8", fd=(1 << 30), inode=(1 << 40)))
    with pytest.raises(BufferError, match=r"'pid' and 'fd'.*cannot be opened.*exited.*PID "
                                          "namespace"):
        _rebuild_shared(*_args(x, fd=(1 << 30), inode=(1 << 40)))


_TERMINAL = r'''
import os, sys
from dlpack._core import _rebuild_shared
os.setsid()                                             # a session leader with no terminal
tty = lambda: open("/proc/self/stat").read().rsplit(")", 1)[1].split()[4]
before = tty()
try:
    _rebuild_shared(*eval(sys.argv[1]))
except BufferError as e:
    print("refused", "'device' and 'inode'" in str(e))
print(before, tty())
'''


def test_a_descriptor_reused_by_a_terminal_is_not_opened():
    """A handle whose descriptor number now names a terminal is refused by device and inode
    before any open a driver sees: the receiver does not take the terminal as its controlling
    one (a path-only open first, spec §11)."""
    import pty
    import subprocess

    x = share(np.arange(4, dtype=np.float64))
    master, slave = pty.openpty()
    try:
        forged = _args(x, fd=slave)
        run = subprocess.run([sys.executable, "-c", _TERMINAL, repr(forged)],
                             capture_output=True, text=True, timeout=120)
    finally:
        os.close(master)
        os.close(slave)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n")[:2] == ["refused True", "0 0"], run.stdout
