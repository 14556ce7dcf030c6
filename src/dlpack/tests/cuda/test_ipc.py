"""CUDA data across processes (spec §11): a DLPackObject of device memory pickles as a CUDA IPC
handle of its allocation, and a ``spawn`` child reads the same memory, ordered after the
producer's work. On the strict fake driver (its memory is a memfd the child maps from the
handle), each child with the fake installed as the tests' process has it."""

import gc
import pickle

import numpy as np
import pytest

from dlpack import DLDeviceType, asdlpack, todict
from dlpack.tests import fake_cuda
from dlpack.tests.fake_cuda import (
    CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
)
from dlpack.tests.helpers import CAI

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
