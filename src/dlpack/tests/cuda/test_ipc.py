"""CUDA data across processes (spec §11): a DLPackObject of device memory pickles as a CUDA IPC
handle of its allocation, and a ``spawn`` child reads the same memory, ordered after the
producer's work. On the strict fake driver (its memory is a memfd the child maps from the
handle), each child with the fake installed as the tests' process has it."""

import ctypes
import gc
import multiprocessing
import os
import pickle
import sys
import threading
import time

import pytest

from dlpack import DLDeviceType, _core, asdlpack, todict
from dlpack.tests import fake_cuda
from dlpack.tests.fake_cuda import (
    CU_EVENT_DISABLE_TIMING,
    CU_EVENT_INTERPROCESS,
    CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
    CUDA_ERROR_INVALID_CONTEXT,
    CUDA_ERROR_INVALID_HANDLE,
    CUDA_ERROR_INVALID_VALUE,
    IpcHandle,
)
from dlpack.tests.helpers import CAI

np = pytest.importorskip("numpy", reason="numpy is not installed")

CUDA = DLDeviceType.kDLCUDA
VALUES = np.arange(6, dtype=np.float32)


@pytest.fixture(scope="module")
def pool():
    """One ``spawn`` worker for the module (a fresh fake driver for each task: in_child)."""
    with fake_cuda.spawn_pool() as p:
        yield p


def device_floats(fake, values=VALUES, device=0, pad=0):
    """float32 values in device memory of GPU device, ``pad`` bytes into their allocation."""
    raw = bytes(pad) + np.asarray(values, dtype=np.float32).tobytes()
    return fake.device_array(raw, device=device) + pad


def child(pool, fake, target, *args, gpu=None):
    """target(*args) in the spawn child, on a fresh fake: (its result, the child's calls).
    Meanwhile this process's fake GPU runs its queued work, from when ``gpu()`` is true (at
    once by default)."""
    result = pool.apply_async(fake_cuda.in_child, (target, *args))
    while not result.ready():
        if gpu is None or gpu():
            fake.run()
        result.wait(0.01)
    return result.get()


def names(calls):
    return [c[0] for c in calls]


# -- what the child does (module level: spawn imports them by name) -----------------------------

def read_host(payload):
    """Unpickle, then read on the host: (values, device, how it came, read-only)."""
    dl = pickle.loads(payload)
    values = np.from_dlpack(dl, device="cpu", copy=True)
    return values.tolist(), tuple(dl.device), todict(dl).get("pickled"), dl.readonly


def read_two(payload_a, payload_b):
    """Two views of one allocation: both read, then both dropped."""
    a, b = pickle.loads(payload_a), pickle.loads(payload_b)
    out = (np.from_dlpack(a, device="cpu", copy=True).tolist(),
           np.from_dlpack(b, device="cpu", copy=True).tolist(), a.base.owner is b.base.owner)
    del a, b
    gc.collect()
    return out


def load_error(payload):
    try:
        pickle.loads(payload)
    except BufferError as e:
        return type(e).__name__, str(e)
    return None


def test_device_memory_round_trip_zero_copy(fake, pool):
    ptr = device_floats(fake, pad=256)          # a sub-allocation, as torch's allocator makes
    dl = asdlpack(CAI(ptr, shape=(2, 3), stream=None))
    fake.calls.clear()
    payload = pickle.dumps(dl)
    assert len(payload) < 1024                  # a handle, not the data
    (values, device, how, readonly), calls = child(pool, fake, read_host, payload)
    assert values == VALUES.reshape(2, 3).tolist() and device == (CUDA, 0)
    assert how == "ipc" and readonly is False
    opened = [c for c in calls if c[0] == "cuIpcOpenMemHandle"]
    assert len(opened) == 1 and opened[0][2] == CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
    assert "cuIpcOpenEventHandle" in names(calls) and "cuIpcCloseMemHandle" in names(calls)
    assert ("cuIpcGetMemHandle", ptr - 256) in fake.calls      # of the allocation's base


def write_through(payload, data):
    """Unpickle, then a kernel of this process writes data through the shared memory."""
    dl = pickle.loads(payload)
    driver = fake_cuda.installed()
    driver.kernel(1, dl.data_ptr, data)
    driver.synchronize(1)
    return dl.data_ptr


def test_child_writes_and_the_parent_reads_the_write(fake, pool):
    ptr = device_floats(fake)
    dl = asdlpack(CAI(ptr, shape=(6,), stream=None))
    new = np.full(6, 7.5, dtype=np.float32).tobytes()
    child_ptr, _ = child(pool, fake, write_through, pickle.dumps(dl), new)
    assert child_ptr != 0
    assert fake.read(ptr, 24) == new              # the same memory, another address space
    assert np.from_dlpack(dl, device="cpu").tolist() == [7.5] * 6


def read_after(payload, stream):
    """Unpickle and export for a consumer's stream (or read on the host, stream None)."""
    dl = pickle.loads(payload)
    if stream is None:
        return np.from_dlpack(dl, device="cpu", copy=True).tolist()
    driver = fake_cuda.installed()
    driver.stream(stream)
    dl.__dlpack__(stream=stream, max_version=(1, 0))
    read = driver.consume(stream, dl.data_ptr, dl.nbytes)     # a consumer kernel
    driver.drain(stream)
    return np.frombuffer(read.value, dtype=np.float32).tolist()


@pytest.mark.parametrize("consumer", [None, 0x5123])
def test_the_child_reads_after_the_producers_pending_work(fake, pool, consumer):
    ptr = device_floats(fake)
    fake.stream(7)
    fake.kernel(7, ptr, np.full(6, 9.0, dtype=np.float32).tobytes())   # queued, not run
    dl = asdlpack(CAI(ptr, shape=(6,), stream=7))
    payload = pickle.dumps(dl)
    assert fake.pending()                         # the producer's work has not run
    values, calls = child(pool, fake, read_after, payload, consumer,
                          gpu=lambda: fake.waiters() > 0)     # runs once the child waits
    assert values == [9.0] * 6                    # not the values before the kernel
    event = next(c for c in calls if c[0] == "cuIpcOpenEventHandle")[1]
    waited = (("cuStreamWaitEvent", consumer, event, 0) if consumer is not None
              else ("cuEventSynchronize", event))
    if consumer is None:
        assert calls.index(waited) < names(calls).index("cuMemcpyDtoH")
    else:
        assert waited in calls


def test_views_share_one_open_handle_closed_after_the_last(fake, pool):
    ptr = device_floats(fake, np.arange(12))
    whole = asdlpack(CAI(ptr, shape=(12,), stream=None))
    tail = asdlpack(CAI(ptr + 24, shape=(6,), stream=None))
    (a, b, shared), calls = child(pool, fake, read_two, pickle.dumps(whole), pickle.dumps(tail))
    assert a == list(range(12)) and b == list(range(6, 12)) and shared
    assert names(calls).count("cuIpcOpenMemHandle") == 1
    assert names(calls).count("cuIpcCloseMemHandle") == 1
    last_read = len(calls) - 1 - names(calls)[::-1].index("cuMemcpyDtoH")
    assert names(calls).index("cuIpcCloseMemHandle") > last_read     # once both views died


def test_pydlpacks_own_device_copy_and_a_sender_gone(fake, pool):
    capsule = asdlpack(b"\x01\x02\x03\x04").__dlpack__(dl_device=(CUDA, 0), max_version=(1, 0))
    dl = asdlpack(capsule)
    assert dl.device == (CUDA, 0)
    (values, device, how, readonly), _ = child(pool, fake, read_host, pickle.dumps(dl))
    assert values == [1, 2, 3, 4] and device == (CUDA, 0) and how == "ipc"
    assert readonly is dl.readonly
    payload = pickle.dumps(dl)
    del dl, capsule                               # the sender frees its copy (cuMemFree)
    gc.collect()
    error, _ = child(pool, fake, load_error, payload)
    assert error[0] == "DLPackError" and "field 'handle'" in error[1]
    assert "CUDA_ERROR_INVALID_HANDLE" in error[1] and "cuda_pickle='copy'" in error[1]


def load_without_driver(payload):
    """Unpickle where no CUDA driver is installed (none loads on a machine without a GPU)."""
    fake_cuda.uninstall()
    return load_error(payload)


def test_a_receiver_without_the_driver_gets_a_clear_error(fake, pool):
    dl = asdlpack(CAI(device_floats(fake), shape=(6,), stream=None))
    payload = pickle.dumps(dl)
    error, _ = child(pool, fake, load_without_driver, payload)
    # no libcuda here: the handle does not open; a real driver does not see the fake's GPU
    assert error[0] == "DLPackError" and ("field 'handle'" in error[1]
                                          or "field 'device'" in error[1])
    assert "cuda_pickle='copy'" in error[1]


FORWARDED = []      # what the forwarding child sends onward: kept alive, as a sender must


def forward(payload):
    """Unpickle, then pickle asdlpack's view of the received object onward (its handle is
    forwarded) and load that here too: (how each came, whether both share one mapping, the
    values, both read-only flags, the onward pickle). The view is kept: its event orders the
    onward receivers."""
    dl = pickle.loads(payload)
    view = asdlpack(dl)
    onward = pickle.dumps(view)
    again = pickle.loads(onward)
    FORWARDED.extend((dl, view))
    shared = again.base.owner is dl.base.owner and again.data_ptr == dl.data_ptr
    return (todict(dl)["pickled"], todict(again)["pickled"], shared,
            np.from_dlpack(again, device="cpu", copy=True).tolist(),
            (dl.readonly, again.readonly), onward)


def drop_forwarded():
    FORWARDED.clear()


@pytest.mark.parametrize("readonly", [False, True])
def test_received_memory_is_forwarded_as_the_senders_handle(fake, pool, readonly):
    """A receiver pickling what it received sends the sender's handle on (a host copy before):
    it loads in the receiver on the mapping it has, in the sender as the sender's own memory,
    and in a third process as the sender's memory opened there, ordered after the forwarder's
    event; read-only data stays read-only everywhere."""
    ptr = device_floats(fake)
    dl = asdlpack(CAI(ptr, shape=(6,), stream=None, readonly=readonly))  # the sender lives
    (first, again, shared, values, flags, onward), calls = child(pool, fake, forward,
                                                                 pickle.dumps(dl))
    assert (first, again, shared, values) == ("ipc", "ipc", True, VALUES.tolist())
    assert flags == (readonly, readonly)
    assert "cuIpcGetMemHandle" not in names(calls)
    assert names(calls).count("cuIpcOpenMemHandle") == 1
    fake.calls.clear()
    back = pickle.loads(onward)
    assert todict(back)["pickled"] == "same process" and back.data_ptr == ptr
    assert back.readonly == readonly
    opened = [c for c in fake.calls if c[0] == "cuIpcOpenEventHandle"]    # the forwarder's
    assert len(opened) == 1
    assert np.from_dlpack(back, device="cpu", copy=True).tolist() == VALUES.tolist()
    assert ("cuEventSynchronize", opened[0][1]) in [c[:2] for c in fake.calls]
    with fake_cuda.spawn_pool() as third:
        (values, device, how, third_readonly), calls = child(third, fake, read_host, onward)
    assert (values, device, how, third_readonly) == (VALUES.tolist(), (CUDA, 0), "ipc",
                                                     readonly)
    assert {"cuIpcOpenMemHandle", "cuIpcOpenEventHandle"} <= set(names(calls))
    child(pool, fake, drop_forwarded)


def test_a_handle_forwarded_around_a_ring_comes_back_as_the_senders(fake, pool):
    """A → B → C → A: each forwarder sends the first sender's handle with its own event; back
    in A it is A's own object, ordered after C's event, and B loads C's pickle on the mapping
    it has (spec §11)."""
    ptr = device_floats(fake)
    dl = asdlpack(CAI(ptr, shape=(6,), stream=None))
    (*_, via_b), _ = child(pool, fake, forward, pickle.dumps(dl))
    with fake_cuda.spawn_pool() as third:
        (first, again, shared, values, _, via_c), _ = child(third, fake, forward, via_b)
        assert (first, again, shared, values) == ("ipc", "ipc", True, VALUES.tolist())
        fake.calls.clear()
        back = pickle.loads(via_c)
        assert todict(back)["pickled"] == "same process" and back.data_ptr == ptr
        assert "cuIpcOpenEventHandle" in names(fake.calls)             # C's event
        assert np.from_dlpack(back, device="cpu", copy=True).tolist() == VALUES.tolist()
        (values, device, how, _), _ = child(pool, fake, read_host, via_c)
        assert (values, device, how) == (VALUES.tolist(), (CUDA, 0), "ipc")
        child(third, fake, drop_forwarded)
    child(pool, fake, drop_forwarded)


def forward_derived(payload):
    """Unpickle, then pickle onward two objects over the received memory that describe other
    than it does (from_address with the received object as owner): elements 2 and 3 only, and
    all six read-only. Both are kept, as a forwarder's must be."""
    from dlpack import from_address

    dl = pickle.loads(payload)
    part = from_address(dl.data_ptr + 8, (2,), "float32", owner=dl, device=(CUDA, 0))
    frozen = from_address(dl.data_ptr, (6,), "float32", owner=dl, device=(CUDA, 0),
                          readonly=True)
    FORWARDED.extend((dl, part, frozen))
    onward = pickle.dumps(part), pickle.dumps(frozen)
    fake_cuda.installed().run()             # this child's GPU: events its pickles recorded
    return onward


def test_objects_derived_from_received_memory_are_not_forwarded_as_the_sender(fake, pool):
    """Only what describes exactly the received object (it, asdlpack's views of it) forwards
    the sender's handle (spec §11): the sender's process would load that handle as its own
    object, whole and writable. Another description over the memory goes as a host copy."""
    ptr = device_floats(fake)
    dl = asdlpack(CAI(ptr, shape=(6,), stream=None))
    (part, frozen), _ = child(pool, fake, forward_derived, pickle.dumps(dl))
    part, frozen = pickle.loads(part), pickle.loads(frozen)
    assert np.from_dlpack(part, device="cpu", copy=True).tolist() == [2.0, 3.0]
    assert frozen.readonly and frozen.data_ptr != ptr
    assert np.from_dlpack(frozen, device="cpu", copy=True).tolist() == VALUES.tolist()
    child(pool, fake, drop_forwarded)


def test_same_process_gives_the_original_memory_and_needs_the_sender(fake):
    ptr = device_floats(fake)
    dl = asdlpack(CAI(ptr, shape=(6,), stream=None, readonly=True))
    payload = pickle.dumps(dl)
    back = pickle.loads(payload)
    assert back.data_ptr == ptr and back.readonly and todict(back)["pickled"] == "same process"
    assert "pickled=same process" in repr(back)
    assert "cuIpcOpenMemHandle" not in names(fake.calls)
    del dl, back
    gc.collect()
    with pytest.raises(BufferError, match=r"field 'token'.*gone.*keep the sender alive"):
        pickle.loads(payload)


def test_todict_of_an_unpickled_object_says_how_it_came_as_its_repr_does(fake):
    """todict reads a DLPackObject itself, not a view asdlpack makes of it: one made with
    allow_legacy_readonly=True unpickles with that policy, and asdlpack(x) would be a new view
    whose base is x, not how it came (spec §2, §11)."""
    dl = asdlpack(CAI(device_floats(fake), shape=(6,), stream=None), allow_legacy_readonly=True)
    back = pickle.loads(pickle.dumps(dl))
    assert "pickled=same process" in repr(back)
    assert todict(back)["pickled"] == "same process"


def pickled_arguments():
    """This process's first pickle of device memory, as _rebuild_ipc's arguments."""
    dl = asdlpack(CAI(device_floats(fake_cuda.installed(), values=[7] * 6), shape=(6,),
                      stream=None))
    return dl.__reduce_ex__(5)[1]


def test_a_pickle_from_another_pid_namespace_does_not_find_this_processs_object(fake, pool):
    # spec §11: containers sharing an IPC namespace reuse pids; tokens count from a random start
    mine = asdlpack(CAI(device_floats(fake), shape=(6,), stream=None))
    token = mine.__reduce_ex__(5)[1][11]
    theirs, _ = child(pool, fake, pickled_arguments)
    assert theirs[11] != token
    forged = [*theirs[:10], os.getpid(), theirs[11]]      # their pid number is ours
    with pytest.raises(BufferError, match=r"field 'event'.*while the sending object lives"):
        _core._rebuild_ipc(*forged)         # theirs, opened as another process's: it is gone


def load_with_pid(payload, pid):
    """read_host in a process whose pid number is pid (another PID namespace's)."""
    import types

    real = _core._os
    _core._os = types.SimpleNamespace(getpid=lambda: pid, urandom=os.urandom)
    try:
        return read_host(payload)
    finally:
        _core._os = real


def test_a_process_with_the_senders_pid_number_opens_its_handle(fake, pool):
    """Containers sharing an IPC namespace (a Kubernetes pod's) each count pids from 1: a
    receiver whose pid is the sender's number, without the sender's token, is another process
    and opens the handle (spec §11); it was refused as if its own sender were gone."""
    ptr = device_floats(fake)
    dl = asdlpack(CAI(ptr, shape=(6,), stream=None))
    (values, device, how, _), calls = child(pool, fake, load_with_pid, pickle.dumps(dl),
                                            os.getpid())
    assert (values, device, how) == (VALUES.tolist(), (CUDA, 0), "ipc")
    assert "cuIpcOpenMemHandle" in names(calls)


def send_with(dl, start, sent):
    """A thread pickling dl once all threads are ready."""
    start.wait()
    sent.append(dl.__reduce_ex__(5)[1])


def test_threads_pickling_one_object_share_its_event(fake):
    # spec §11: one event per object; a second made by a racing thread would replace the first,
    # destroying the event the first thread's pickle names
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(50):
            dl = asdlpack(CAI(device_floats(fake), shape=(6,), stream=None))
            start, sent = threading.Barrier(4), []
            threads = [threading.Thread(target=send_with, args=(dl, start, sent))
                       for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len({(args[9], args[11]) for args in sent}) == 1
            fake.run()
    finally:
        sys.setswitchinterval(interval)


def load_on(payload, order):
    """Unpickle where the devices come in another order (or without the sender's GPU)."""
    fake_cuda.installed().uuid_order = order
    try:
        dl = pickle.loads(payload)
    except BufferError as e:
        return str(e)
    return tuple(dl.device), np.from_dlpack(dl, device="cpu", copy=True).tolist()


def test_the_device_is_found_by_uuid(fake, pool):
    dl = asdlpack(CAI(device_floats(fake, device=1), shape=(6,), stream=None))
    payload = pickle.dumps(dl)
    order = [1, 0, *range(2, fake_cuda.DEVICE_COUNT)]
    (device, values), _ = child(pool, fake, load_on, payload, order)
    assert device == (CUDA, 0) and values == VALUES.tolist()
    error, _ = child(pool, fake, load_on, payload, [0] * fake_cuda.DEVICE_COUNT)
    assert "field 'device'" in error and "CUDA_VISIBLE_DEVICES" in error


@pytest.mark.parametrize("kind", ["pool", "pinned", "managed", "copy"])
def test_what_ipc_cannot_share_goes_as_a_host_copy(fake, pool, kind):
    data = (ctypes.c_float * 6)(*VALUES)
    ptr = {"pool": lambda: fake.pool(bytes(data)), "pinned": lambda: fake.pinned(data),
           "managed": lambda: fake.managed(data), "copy": lambda: device_floats(fake)}[kind]()
    dl = asdlpack(CAI(ptr, shape=(6,), stream=None),
                  cuda_pickle="copy" if kind == "copy" else "ipc")
    (values, device, how, _), calls = child(pool, fake, read_host, pickle.dumps(dl))
    assert values == VALUES.tolist() and how == "copy"
    assert device == {"pinned": (DLDeviceType.kDLCUDAHost, 0),
                      "managed": (DLDeviceType.kDLCUDAManaged, 0)}.get(kind, (CUDA, 0))
    assert "cuIpcOpenMemHandle" not in names(calls)
    assert "cuIpcGetMemHandle" not in names(fake.calls)


def test_a_host_copy_that_cannot_load_names_a_cpu_copy_as_the_way_out(fake, pool):
    # spec §11: a host copy restores on its device kind; cuda_pickle='copy' would not help
    dl = asdlpack(CAI(device_floats(fake, device=1), shape=(6,), stream=None), cuda_pickle="copy")
    payload = pickle.dumps(dl)
    error, _ = child(pool, fake, load_on, payload, [0] * fake_cuda.DEVICE_COUNT)
    assert "field 'device'" in error and "dl_device=(1, 0), copy=True" in error
    assert "cuda_pickle" not in error
    error, _ = child(pool, fake, load_without_driver, payload)
    assert error[0] == "DLPackError" and "field 'device'" in error[1]
    assert "dl_device=(1, 0), copy=True" in error[1]


@pytest.mark.parametrize("kind", ["pool", "pinned"])
def test_ipc_only_refuses_what_ipc_cannot_share(fake, kind):
    data = (ctypes.c_float * 6)(*VALUES)
    ptr = fake.pool(bytes(data)) if kind == "pool" else fake.pinned(data)
    dl = asdlpack(CAI(ptr, shape=(6,), stream=None), cuda_pickle="ipc_only")
    with pytest.raises(BufferError, match=r"CUDA IPC.*cuda_pickle='ipc_only' refuses"):
        pickle.dumps(dl)


def test_cuda_pickle_argument_is_checked(fake):
    dl = asdlpack(CAI(device_floats(fake), shape=(6,), stream=None))
    with pytest.raises(ValueError, match="cuda_pickle = 'share' is not one of ipc, copy"):
        asdlpack(dl, cuda_pickle="share")
    with pytest.raises(TypeError, match="cuda_pickle = 1 is not a str"):
        asdlpack(dl, cuda_pickle=1)
    assert asdlpack(dl, cuda_pickle="ipc") is dl
    copy = asdlpack(dl, cuda_pickle="copy")
    assert copy is not dl and copy.data_ptr == dl.data_ptr


def test_the_views_asdlpack_makes_keep_cuda_pickle(fake):
    # spec §11: kept by the object and the views asdlpack makes of it (§2: idempotent)
    dl = asdlpack(CAI(device_floats(fake), shape=(6,), stream=None), cuda_pickle="copy")
    assert asdlpack(dl) is dl
    view = asdlpack(dl, allow_legacy_readonly=True)
    assert view is not dl and view.__reduce_ex__(5)[0] is _core._rebuild_copy
    assert asdlpack(view, cuda_pickle="ipc").__reduce_ex__(5)[0] is _core._rebuild_ipc


def rebuild_error(args):
    """_rebuild_ipc on forged arguments, in another process than the sender's."""
    try:
        _core._rebuild_ipc(*args)
    except BufferError as e:
        return str(e)
    return None


def test_forged_handles_are_refused(fake, pool):
    dl = asdlpack(CAI(device_floats(fake), shape=(6,), stream=None))
    fn, args = dl.__reduce_ex__(5)
    assert fn is _core._rebuild_ipc
    elsewhere = [*args[:10], os.getpid() + 1, *args[11:]]     # as if from another process
    for i, bad, field in [(0, b"x" * 63, "handle"), (2, b"GPU", "device"),
                          (9, b"", "event"), (1, -1, "offset"), (10, "1", "pid")]:
        forged = list(elsewhere)
        forged[i] = bad
        with pytest.raises(BufferError, match=f"field '{field}'"):
            fn(*forged)
    forged = [*args[:1], 1 << 40, *args[2:]]
    error, _ = child(pool, fake, rebuild_error, forged)
    assert "field 'offset'" in error and "past the 24-byte allocation" in error
    forged = [*args[:6], (3, 4), (4, 1), *args[8:]]   # 12 elements where 6 were sent
    error, _ = child(pool, fake, rebuild_error, forged)
    # the pickle's own fields are named (it has no 'data')
    assert "fields 'shape' = (3, 4) and 'strides' = (4, 1)" in error and "'data'" not in error
    assert "field 'offset' = 0 reach outside the 24-byte allocation field 'handle'" in error
    forged = [*elsewhere[:9], bytes(64), *elsewhere[10:]]   # the memory opens, the event not
    error, _ = child(pool, fake, rebuild_error, forged)
    assert "field 'event'" in error and "cuIpcOpenEventHandle" in error


# -- the fake's IPC rules, as strict as libcuda's -------------------------------------------------

def entry(driver, name, *argtypes):
    """A fake driver entry point as C code calls it."""
    return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(driver.symbols()[name])


def mem_handle(driver, ptr):
    handle = IpcHandle()
    rc = entry(driver, "cuIpcGetMemHandle", ctypes.POINTER(IpcHandle), ctypes.c_uint64)(
        ctypes.byref(handle), ptr)
    return rc, bytes(handle.reserved)


def open_rules(raw_handle):
    """In the child: the open and close rules (results as return codes)."""
    driver = fake_cuda.installed()
    handle = IpcHandle.from_buffer_copy(raw_handle)
    opener = entry(driver, "cuIpcOpenMemHandle_v2", ctypes.POINTER(ctypes.c_uint64), IpcHandle,
                   ctypes.c_uint)
    close = entry(driver, "cuIpcCloseMemHandle", ctypes.c_uint64)
    ptr, again = ctypes.c_uint64(), ctypes.c_uint64()
    no_context = opener(ctypes.byref(ptr), handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
    driver.current.append(fake_cuda.ctx(0))
    driver.primary(0, True)
    bad_flags = opener(ctypes.byref(ptr), handle, 0)
    first = opener(ctypes.byref(ptr), handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
    second = opener(ctypes.byref(again), handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
    value = driver.read(ptr.value, 4)
    closes = [close(ptr.value), close(ptr.value), close(ptr.value)]
    driver.current.pop()
    return no_context, bad_flags, first, second, ptr.value == again.value, value, closes


def test_fake_ipc_memory_rules(fake, pool):
    ptr = device_floats(fake, pad=64)
    fake.current.append(fake_cuda.ctx(0))
    try:
        assert mem_handle(fake, ptr)[0] == CUDA_ERROR_INVALID_VALUE     # not the base
        assert mem_handle(fake, fake.pool(b"1234"))[0] == CUDA_ERROR_INVALID_VALUE
        assert mem_handle(fake, fake.managed((ctypes.c_float * 2)()))[0] == \
            CUDA_ERROR_INVALID_VALUE
        rc, raw = mem_handle(fake, ptr - 64)
        assert rc == 0
        opened = ctypes.c_uint64()
        here = entry(fake, "cuIpcOpenMemHandle_v2", ctypes.POINTER(ctypes.c_uint64), IpcHandle,
                     ctypes.c_uint)(ctypes.byref(opened), IpcHandle.from_buffer_copy(raw),
                                    CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        assert here == CUDA_ERROR_INVALID_CONTEXT        # in the process that exported it
    finally:
        fake.current.pop()
    result, _ = child(pool, fake, open_rules, raw)
    no_context, bad_flags, first, second, same, value, closes = result
    assert (no_context, bad_flags, first, second) == (CUDA_ERROR_INVALID_CONTEXT,
                                                      CUDA_ERROR_INVALID_VALUE, 0, 0)
    assert same and value == bytes(64)[:4]               # counted, not mapped twice
    assert closes == [0, 0, CUDA_ERROR_INVALID_VALUE]    # closing past the count fails


def test_fake_ipc_event_rules(fake):
    create = entry(fake, "cuEventCreate", ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint)
    get = entry(fake, "cuIpcGetEventHandle", ctypes.POINTER(IpcHandle), ctypes.c_void_p)
    event, handle = ctypes.c_void_p(), IpcHandle()
    fake.primary(0, True)
    fake.current.append(fake_cuda.ctx(0))
    try:
        assert create(ctypes.byref(event), CU_EVENT_INTERPROCESS) == CUDA_ERROR_INVALID_VALUE
        assert create(ctypes.byref(event), CU_EVENT_DISABLE_TIMING) == 0
        assert get(ctypes.byref(handle), event) == CUDA_ERROR_INVALID_HANDLE
        assert create(ctypes.byref(event),
                      CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING) == 0
        assert get(ctypes.byref(handle), event) == 0
        opened = ctypes.c_void_p()
        assert entry(fake, "cuIpcOpenEventHandle", ctypes.POINTER(ctypes.c_void_p), IpcHandle)(
            ctypes.byref(opened), handle) == CUDA_ERROR_INVALID_CONTEXT
    finally:
        fake.current.pop()


def read_argument(install, dl):
    """A spawned Process's target: dl was unpickled after CHILD installed the fake."""
    return np.from_dlpack(dl, device="cpu", copy=True).tolist(), todict(dl)["pickled"]


def test_spawned_process_arguments_unpickle_on_the_fake(fake):
    dl = asdlpack(CAI(device_floats(fake), shape=(6,), stream=None))
    with fake_cuda.spawn_pool() as p:       # no per-task install: CHILD, first, does it
        result = p.apply_async(read_argument, (fake_cuda.CHILD, dl))
        while not result.ready():
            fake.run()
            result.wait(0.01)
        assert result.get() == (VALUES.tolist(), "ipc")


# -- a real GPU (skipped without one): shared/gpu/check.sh runs these with the packaged tests ---

def _real_torch():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine")
    return torch


@pytest.fixture(scope="module")
def gpu_pool():
    """A ``spawn`` worker on the real driver."""
    _real_torch()
    with multiprocessing.get_context("spawn").Pool(1) as p:
        yield p


def _producer(name, n):
    """A CUDA array of n float32 zeros made by library name, and a reader of it as a list."""
    torch = _real_torch()
    if name == "torch":
        t = torch.zeros(n, device="cuda")
        return t, lambda: t.tolist()
    if name == "cupy":
        cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
        a = cupy.zeros(n, dtype=cupy.float32)
        return a, lambda: a.get().tolist()
    cuda = pytest.importorskip("numba.cuda", reason="Numba is not installed")
    d = cuda.to_device(np.zeros(n, dtype=np.float32))
    return d, lambda: d.copy_to_host().tolist()


def gpu_write(payload, consumer, value):
    """In the real child: unpickle, write value through the consumer, wait for it."""
    dl = pickle.loads(payload)
    if consumer == "torch":
        import torch

        torch.from_dlpack(dl).fill_(value)
        torch.cuda.synchronize()
    else:
        import cupy

        cupy.from_dlpack(dl).fill(value)
        cupy.cuda.runtime.deviceSynchronize()
    return todict(dl)["pickled"]


@pytest.mark.parametrize("consumer", ["torch", "cupy"])
@pytest.mark.parametrize("producer", ["torch", "cupy", "numba"])
def test_gpu_child_writes_and_the_parent_reads(gpu_pool, producer, consumer):
    if consumer == "cupy":
        pytest.importorskip("cupy", reason="CuPy is not installed")
    x, read = _producer(producer, 1 << 20)
    dl = asdlpack(x)
    assert gpu_pool.apply(gpu_write, (pickle.dumps(dl), consumer, 7.0)) == "ipc"
    assert read()[:: 1 << 16] == [7.0] * 16                 # the child's write, seen here


def gpu_read(payload):
    dl = pickle.loads(payload)
    import torch

    return torch.from_dlpack(dl)[-4:].tolist()


def test_gpu_child_reads_after_the_producers_pending_work(gpu_pool):
    torch = _real_torch()
    x = torch.zeros(1 << 20, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(1 << 30)                          # long enough to lose a race
        x.fill_(3.0)
        payload = pickle.dumps(asdlpack(x))                 # the event after the fill
    assert gpu_pool.apply(gpu_read, (payload,)) == [3.0] * 4


def test_gpu_same_process_and_copy_fallback(gpu_pool):
    torch = _real_torch()
    x = torch.arange(8, dtype=torch.float32, device="cuda")
    dl = asdlpack(x)
    back = pickle.loads(pickle.dumps(dl))
    assert back.data_ptr == x.data_ptr() and todict(back)["pickled"] == "same process"
    copy = pickle.dumps(asdlpack(x, cuda_pickle="copy"))
    assert gpu_pool.apply(gpu_read, (copy,)) == [4.0, 5.0, 6.0, 7.0]


GPU_FORWARDED = []


def gpu_forward(payload):
    """In the real child: unpickle, write 5.0 through torch, pickle the received view onward
    (the sender's handle, this child's event) and keep it for the onward receivers."""
    import torch

    dl = pickle.loads(payload)
    torch.from_dlpack(dl).fill_(5.0)
    GPU_FORWARDED.append(dl)
    return pickle.dumps(dl)


def test_gpu_forwarded_handle_returns_to_the_senders_memory(gpu_pool):
    """A child forwards what it received: the sender gets its own memory back, the child's
    write seen (the forwarder's event orders it)."""
    torch = _real_torch()
    x = torch.zeros(1 << 20, device="cuda")
    onward = gpu_pool.apply(gpu_forward, (pickle.dumps(asdlpack(x)),))
    back = pickle.loads(onward)
    assert back.data_ptr == x.data_ptr() and todict(back)["pickled"] == "same process"
    assert torch.from_dlpack(back)[-4:].tolist() == [5.0] * 4


def read_object(dl):
    """A Dask task: its argument arrived pickled, as a handle."""
    values = np.from_dlpack(dl, device="cpu", copy=True).tolist()
    return values, tuple(dl.device), todict(dl).get("pickled"), os.getpid()


def test_dask_worker_processes_read_the_same_memory(fake):
    """Scattered to one worker (a handle), then fetched from it by another worker (the handle
    forwarded, spec §11): both read the client's memory, no bytes moved."""
    distributed = pytest.importorskip("distributed", reason="Dask distributed is not installed")
    ptr = device_floats(fake)
    dl = asdlpack(CAI(ptr, shape=(6,), stream=None))
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        client.run(fake_cuda.child_install)             # the workers' driver: the fake
        first, second = sorted(client.scheduler_info()["workers"])
        held = client.scatter(dl, workers=[first])
        results = []
        for worker in (first, second):                  # the second fetches it from the first
            future = client.submit(read_object, held, workers=[worker], pure=False)
            while not future.done():
                fake.run()                              # this process's GPU runs meanwhile
                time.sleep(0.01)
            results.append(future.result())
    for values, device, how, _ in results:
        assert values == VALUES.tolist() and device == (CUDA, 0) and how == "ipc"
    assert len({pid for *_, pid in results} | {os.getpid()}) == 3


def ray_read(args):
    """A Ray task: unpickling its argument installed the fake first (``CHILD``), then the
    CUDA object after it arrived as a handle."""
    return read_object(args[1])


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")    # Ray starts helpers; JAX warns
def test_ray_worker_process_reads_the_same_memory(fake):
    ray = pytest.importorskip("ray", reason="Ray is not installed")
    ptr = device_floats(fake)
    dl = asdlpack(CAI(ptr, shape=(6,), stream=None))
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        ref = ray.remote(ray_read).remote([fake_cuda.CHILD, dl])
        while not ray.wait([ref], timeout=0.01)[0]:
            fake.run()                                  # this process's GPU runs meanwhile
        values, device, how, pid = ray.get(ref)
    finally:
        ray.shutdown()
    assert values == VALUES.tolist() and device == (CUDA, 0) and how == "ipc"
    assert pid != os.getpid()
