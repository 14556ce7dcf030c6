"""Pickling (spec §11): protocol 5 moves the elements out-of-band, zero-copy; unpickling trusts
nothing in the stream; real engines (multiprocessing, Dask distributed, Ray) move arrays of any
library through it."""

import ctypes
import os
import pickle

import pytest

from dlpack import DLDeviceType, asdlpack, todict
from dlpack._core import _rebuild
from dlpack.tests.helpers import CAI, lib

np = lib("numpy")
ml_dtypes = lib("ml_dtypes")

READ_ONLY = 1


def _roundtrip(dl, protocol, out_of_band):
    """Pickle and unpickle; out_of_band passes the buffers beside the stream (PEP 574)."""
    buffers = []
    if out_of_band:
        stream = pickle.dumps(dl, protocol, buffer_callback=buffers.append)
    else:
        stream = pickle.dumps(dl, protocol)
    return pickle.loads(stream, buffers=buffers), buffers


def _elements(dl):
    """The elements in C order as raw bytes (any dtype: gathered by NumPy as bytes)."""
    if dl.dtype.name == "int4":     # no array-interface typestr: contiguous bytes as they are
        return ctypes.string_at(dl.data_ptr, dl.nbytes)
    a = np.asarray(dl)
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


BASE = np.arange(24, dtype=np.float64).reshape(4, 6)
ARRAYS = {
    "c": BASE,
    "fortran": BASE.T,
    "negative": BASE[::-1, ::-1],
    "negative gaps": BASE[::-1, :-1],
    "broadcast": np.broadcast_to(np.arange(3.0), (1000, 3)),
    "sparse": BASE[:, :1],
    "every other": BASE[::-1, ::-2],
    "empty": np.zeros((0, 5), np.int32),
    "0-d": np.array(7, np.int16),
    "bool": np.array([True, False, True]),
    "complex": np.arange(4, dtype=np.complex64) * 1j,
    "bfloat16": np.arange(6, dtype=ml_dtypes.bfloat16).reshape(2, 3),
    "float8": np.arange(6, dtype=ml_dtypes.float8_e4m3fn)[::-2],
    "int4": np.arange(-3, 3, dtype=ml_dtypes.int4),
}


@pytest.mark.parametrize("name", ARRAYS)
@pytest.mark.parametrize("protocol,out_of_band", [(5, True), (5, False), (4, False),
                                                  (2, False), (0, False)])
def test_roundtrip(name, protocol, out_of_band):
    dl = asdlpack(ARRAYS[name])
    r, buffers = _roundtrip(dl, protocol, out_of_band)
    assert (r.shape, r.dtype, r.flags, r.device) == (dl.shape, dl.dtype, dl.flags, dl.device)
    assert _elements(r) == _elements(dl)
    assert r.readonly == dl.readonly
    assert len(buffers) == (1 if out_of_band else 0)
    gathered = ("sparse", "every other", "float8")     # gaps over half the element bytes
    if name not in gathered:
        assert r.strides == dl.strides      # the span travels with the strides as they are
    if out_of_band and name not in (*gathered, "empty"):
        assert r.data_ptr == dl.data_ptr    # zero-copy: the buffer is the original memory


@pytest.mark.parametrize("index", [np.s_[:, :1], np.s_[:, ::2], np.s_[::-1, 1::2]])
def test_sparse_strided_view_travels_as_contiguous_copy(index):
    """A view whose gaps exceed half its element bytes is gathered, not sent with them (§11)."""
    big = np.arange(1000.0 * 1000).reshape(1000, 1000)
    view = big[index]
    r, buffers = _roundtrip(asdlpack(view), 5, True)
    assert memoryview(buffers[0]).nbytes == view.nbytes
    assert r.c_contiguous and r.strides == (view.shape[1], 1)
    np.testing.assert_array_equal(np.from_dlpack(r), view)


def test_view_with_small_gaps_travels_as_its_span():
    big = np.arange(1000.0 * 1000).reshape(1000, 1000)
    view = big[:, :-1]
    dl = asdlpack(view)
    r, _ = _roundtrip(dl, 5, True)
    assert r.data_ptr == dl.data_ptr and r.strides == (1000, 1)


def test_out_of_band_stream_is_metadata_only():
    dl = asdlpack(np.zeros(1 << 20, np.uint8))
    buffers = []
    stream = pickle.dumps(dl, 5, buffer_callback=buffers.append)
    assert len(stream) < 1024
    assert buffers[0].raw().nbytes == 1 << 20


def test_read_only_rules():
    ro = np.arange(4.0)
    ro.flags.writeable = False
    assert _roundtrip(asdlpack(ro), 5, True)[0].readonly
    assert _roundtrip(asdlpack(ro), 4, False)[0].readonly
    rw = asdlpack(np.arange(4.0))
    r, _ = _roundtrip(rw, 5, False)
    assert not r.readonly                   # in-band, writable data arrives as a bytearray
    np.from_dlpack(r)[0] = 9.0              # and it is really writable
    buffers = []
    stream = pickle.dumps(rw, 5, buffer_callback=buffers.append)
    frozen = pickle.loads(stream, buffers=[bytes(b.raw()) for b in buffers])
    assert frozen.readonly                  # the received memory is read-only: so is the object


def test_bytes_and_torch_consumers():
    torch = lib("torch")
    r, _ = _roundtrip(asdlpack(b"hello"), 5, True)
    assert bytes(r) == b"hello" and r.readonly
    t = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    r, _ = _roundtrip(asdlpack(t), 5, True)
    back = torch.from_dlpack(r)
    assert back.dtype == torch.bfloat16 and torch.equal(back, t)
    assert back.data_ptr() == t.data_ptr()


def test_device_data_unpickles_in_its_process_as_the_same_memory(fake):
    memory = fake.device_array((ctypes.c_float * 6)(*range(6)), device=1)
    dl = asdlpack(CAI(memory))
    for protocol in (2, 5):                 # a handle (spec §11), whatever the protocol
        r = pickle.loads(pickle.dumps(dl, protocol))
        assert r.device == (DLDeviceType.kDLCUDA, 1) and r.data_ptr == memory
        assert todict(r)["pickled"] == "same process"
    assert not [c for c in fake.calls if c[0] == "cuIpcOpenMemHandle"]


def test_pinned_host_memory_pickles_as_a_host_copy_restored_pinned(fake):
    data = (ctypes.c_float * 6)(*range(6))
    dl = asdlpack(CAI(fake.pinned(data)))
    assert dl.device == (DLDeviceType.kDLCUDAHost, 0)
    r, buffers = _roundtrip(dl, 5, True)
    assert len(buffers) == 1                    # the elements went out-of-band
    assert r.device == (DLDeviceType.kDLCUDAHost, 0) and todict(r)["pickled"] == "copy"
    assert r.data_ptr != dl.data_ptr and ("cuMemHostAlloc", 24, 0) in fake.calls
    assert list(np.from_dlpack(r.on_host()).ravel()) == list(range(6))


GOOD = (bytearray(48), 2, 64, 1, (2, 3), (3, 1), 0, 0)      # float64 (2, 3) over 48 bytes


def _forged(**changes):
    fields = ["data", "code", "bits", "lanes", "shape", "strides", "offset", "flags"]
    args = dict(zip(fields, GOOD, strict=True))
    args.update(changes)
    return tuple(args[f] for f in fields)


def test_rebuild_accepts_the_good_fields():
    assert _rebuild(*GOOD).shape == (2, 3)


@pytest.mark.parametrize("changes,match", [
    (dict(data=bytearray(47)), "reaches outside the 47-byte buffer"),
    (dict(offset=8), "reaches outside"),
    (dict(offset=49), "'offset'"),
    (dict(offset=-1), "'offset'"),
    (dict(strides=(3, -1)), "reaches outside"),
    (dict(strides=(2**62, 1)), "reaches outside"),
    (dict(shape=(2**40, 2**40)), "overflows"),
    (dict(shape=(2, -3)), "'shape'"),
    (dict(shape=(2, 2**64)), "'shape'"),
    (dict(shape=(2, 3.0)), "'shape'"),
    (dict(shape=(2, True)), "'shape'"),
    (dict(shape=[2, 3], strides=[3, 1]), "not tuples"),
    (dict(shape=(2,)), "not tuples of one length"),
    (dict(shape=(1,) * 2000, strides=(1,) * 2000), "'ndim'"),
    (dict(bits=0), "bits=0"),
    (dict(bits=256), "'dtype bits'"),
    (dict(bits=12), "not a whole number of bytes"),
    (dict(lanes=0), "lanes=0"),
    (dict(code="float"), "'dtype code'"),
    (dict(flags=4), "'flags'"),
    (dict(flags=-1), "'flags'"),
    (dict(flags=2, bits=64), "IS_SUBBYTE_TYPE_PADDED"),
    (dict(data=12345), "gives no C-contiguous buffer"),
    (dict(data=np.zeros((8, 12))[:, ::2]), "gives no C-contiguous buffer"),
])
def test_forged_fields_raise_buffer_error(changes, match):
    with pytest.raises(BufferError, match=match):
        _rebuild(*_forged(**changes))


def test_a_pickle_with_another_field_count_is_refused_naming_it():
    """Every kind of pickle (host, CUDA copy, CUDA IPC) refuses another number of fields as a
    forged pickle (BufferError naming both counts and the fields), not as the call's
    TypeError (spec §11); no driver is asked first."""
    from dlpack import _core

    for fn, n, first in [(_core._rebuild, 8, "data"), (_core._rebuild_copy, 3, "kind"),
                         (_core._rebuild_ipc, 12, "handle")]:
        for count in (0, n - 1, n + 1):
            with pytest.raises(BufferError, match=rf"pickle: {count} fields where this "
                                                  rf"pickle has {n} \({first}, "):
                fn(*[0] * count)


def test_cuda_pickle_takes_a_str_subclass_by_its_characters():
    """cuda_pickle as dtype names are read (spec §11, §2): a str subclass by its characters,
    whatever its __eq__ says; other types stay a TypeError."""
    class Lying(str):
        def __eq__(self, other):
            return False

        __hash__ = str.__hash__

    dl = asdlpack(b"ab", cuda_pickle=Lying("copy"))
    assert asdlpack(dl, cuda_pickle="copy") is dl       # the same mode: no new view
    with pytest.raises(ValueError, match="is not one of"):
        asdlpack(b"ab", cuda_pickle=Lying("nope"))
    with pytest.raises(TypeError, match="is not a str"):
        asdlpack(b"ab", cuda_pickle=b"ipc")


def test_forged_stream_raises_buffer_error():
    class Forged:
        def __reduce__(self):
            return _rebuild, _forged(strides=(1000, 1))

    with pytest.raises(BufferError, match="reaches outside"):
        pickle.loads(pickle.dumps(Forged(), 5))


# -- real engines: each cluster starts once per module; spawned processes import this dlpack --


def _shared_child(copied, meta, name, ready, written, results):
    """Spawned: a pickled copy, then shared memory rebuilt from out-of-band metadata."""
    from multiprocessing import shared_memory

    import numpy
    import torch

    shm = shared_memory.SharedMemory(name=name)
    view = shm.buf[:32]
    shared = pickle.loads(meta, buffers=[view])
    t = torch.from_dlpack(shared)
    ready.set()
    written.wait(30)
    results.put((numpy.from_dlpack(copied).tolist(), t.tolist()))
    t[0] = 99.0                                     # the parent sees this write
    del t, shared
    view.release()
    shm.close()


def test_multiprocessing_spawn_shared_memory(child_path):
    lib("torch")
    import multiprocessing as mp
    from multiprocessing import shared_memory

    ctx = mp.get_context("spawn")
    shm = shared_memory.SharedMemory(create=True, size=32)
    try:
        a = np.ndarray(4, np.float64, buffer=shm.buf)
        a[:] = range(4)
        dl = asdlpack(a)
        buffers = []
        meta = pickle.dumps(dl, 5, buffer_callback=buffers.append)   # metadata; data in shm
        assert len(buffers) == 1 and len(meta) < 1024
        ready, written, results = ctx.Event(), ctx.Event(), ctx.Queue()
        child = ctx.Process(target=_shared_child,
                            args=(dl, meta, shm.name, ready, written, results))
        child.start()                               # dl itself travels in-band: a copy
        assert ready.wait(60)
        a[:] = [10.0, 11.0, 12.0, 13.0]             # after the child took its tensor
        written.set()
        copied, seen = results.get(timeout=60)
        child.join(60)
        assert child.exitcode == 0
        assert copied == [0.0, 1.0, 2.0, 3.0]       # the copy kept the values it was sent with
        assert seen == [10.0, 11.0, 12.0, 13.0]     # shared, not copied
        assert a[0] == 99.0
        del a, dl
    finally:
        shm.close()
        shm.unlink()


@pytest.fixture(scope="module")
def dask_client(child_path):
    distributed = lib("distributed")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            yield client


def _engine_consume(dl, consumer):
    """Run on a worker: consume with a real library; (dtype, values, readonly, base type)."""
    if consumer == "torch":
        import torch

        x = torch.from_dlpack(dl)
        return str(x.dtype), x.float().tolist(), dl.readonly, type(dl.base).__name__
    if consumer == "jax":
        import jax.numpy as jnp

        x = jnp.from_dlpack(dl)
        return str(x.dtype), x.astype(float).tolist(), dl.readonly, type(dl.base).__name__
    import numpy

    x = numpy.from_dlpack(dl)
    return str(x.dtype), x.tolist(), dl.readonly, type(dl.base).__name__


def _sources():
    """(name, wrapped object, consumer, expected dtype, expected values)."""
    torch = lib("torch")
    jnp = lib("jax.numpy")
    return {
        "torch": (asdlpack(torch.arange(6, dtype=torch.int32).reshape(2, 3)), "torch",
                  "torch.int32", [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]),
        "jax": (asdlpack(jnp.arange(4, dtype=jnp.float32)), "jax", "float32",
                [0.0, 1.0, 2.0, 3.0]),
        "bytes": (asdlpack(b"dask"), "numpy", "uint8", list(b"dask")),
        "bfloat16": (asdlpack(np.arange(4, dtype=ml_dtypes.bfloat16)), "torch",
                     "torch.bfloat16", [0.0, 1.0, 2.0, 3.0]),
    }


@pytest.mark.parametrize("name", ["torch", "jax", "bytes", "bfloat16"])
def test_dask_scatter_between_worker_processes(dask_client, name):
    dl, consumer, dtype, values = _sources()[name]
    first, second = sorted(dask_client.scheduler_info()["workers"])
    future = dask_client.scatter(dl, workers=[first])
    for worker in (first, second):                  # the second fetches it from the first
        got = dask_client.submit(_engine_consume, future, consumer, workers=[worker],
                                 pure=False).result(timeout=60)
        assert got[:2] == (dtype, values)
        # Dask receives out-of-band frames into its own writable buffers and unpickles over
        # them without a copy: read-only data stays read-only, writable stays writable
        assert got[2] == dl.readonly


@pytest.fixture(scope="module")
def ray_session(child_path):
    ray = lib("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _mapping_of(address):
    """The /proc/self/maps path of the mapping holding address ('' when not found)."""
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= address < hi:
                return fields[5] if len(fields) > 5 else ""
    return ""


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")    # Ray starts helpers; JAX warns
def test_ray_put_get_zero_copy_from_object_store(ray_session):
    torch = lib("torch")
    t = torch.arange(100_000, dtype=torch.float32)
    back = ray_session.get(ray_session.put(asdlpack(t)))
    assert back.readonly                            # Ray returns its store's memory read-only
    assert torch.equal(torch.from_dlpack(back), t)
    if os.path.exists("/proc/self/maps"):           # Linux: the store is a shared mapping
        assert "plasma" in _mapping_of(back.data_ptr) or "/dev/shm" in _mapping_of(
            back.data_ptr)
    remote = ray_session.remote(_engine_consume)
    got = ray_session.get(remote.remote(ray_session.put(asdlpack(t)), "torch"))
    assert got[0] == "torch.float32" and got[1] == t.tolist() and got[2]
