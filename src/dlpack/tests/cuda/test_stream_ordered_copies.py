"""Copies pydlpack makes onto a GPU for a consumer that names its stream: allocated, copied
and freed in order on that stream (cuMemAllocAsync, cuMemcpyHtoDAsync, cuMemFreeAsync), with
no host wait; the synchronous path where the driver lacks them; and copies of pinned or
managed data, which keep their kind (docs/spec.md §10)."""

import ctypes

import pytest

from dlpack import DLDeviceType, asdlpack, todict
from dlpack.tests.fake_cuda import LEAVE, capture_check, ctx, enter, primary
from dlpack.tests.helpers import CAI


def floats(*values):
    return bytes((ctypes.c_float * len(values))(*values))


def test_a_copy_to_the_gpu_is_ordered_on_the_consumers_stream(fake):
    """No cuMemAlloc (which may synchronise the device), no cuMemcpyHtoD waiting for the legacy
    stream, no event: the copy is queued on the consumer's stream, and freed there."""
    consumer = fake.stream(device=1, nonblocking=True)
    fake.hold(consumer, device=1)               # the consumer's earlier work, still running
    source = asdlpack(b"abcdefgh")
    src = source.data_ptr
    capsule = source.__dlpack__(max_version=(1, 0), dl_device=(2, 1), stream=consumer)
    ptr = todict(capsule)["data"]
    assert fake.calls == [*capture_check(consumer, ctx(1)), ("cuStreamGetCtx", consumer),
                          *primary(1, True), *enter(1), ("cuMemAllocAsync", 8, consumer),
                          ("cuPointerGetAttributes", ptr), *LEAVE, *enter(1),
                          ("cuPointerGetAttributes", src),
                          ("cuMemcpyHtoDAsync", ptr, 8, consumer), *LEAVE]
    seen = fake.consume(consumer, ptr, 8, device=1)
    fake.release(consumer, device=1)
    fake.synchronize(consumer, device=1)
    assert seen.value == b"abcdefgh"
    fake.calls.clear()
    del capsule
    assert fake.calls == [*enter(1), ("cuPointerGetAttributes", ptr),
                          ("cuMemFreeAsync", ptr, consumer), *LEAVE]
    assert fake.pending() == [f"free {ptr:#x}"]     # after the consumer's work on its stream
    fake.run()
    assert ptr not in fake.allocations


def test_a_copy_from_page_locked_host_memory_reads_it_before_returning(fake):
    """Pageable memory the driver stages before cuMemcpyHtoDAsync returns; page-locked memory
    (a pinned torch tensor is kDLCPU) it reads when the copy runs, after its owner may have
    reused it: pydlpack copies it to pageable memory first, so the copy has its values then."""
    buf = (ctypes.c_char * 8)(*b"abcdefgh")
    fake.pinned(buf)
    consumer = fake.stream(device=1, nonblocking=True)
    fake.hold(consumer, device=1)               # the copy cannot run yet
    capsule = asdlpack(memoryview(buf)).__dlpack__(max_version=(1, 0), dl_device=(2, 1),
                                                   stream=consumer)
    ptr = todict(capsule)["data"]
    ctypes.memmove(buf, b"reused!!", 8)         # the source's owner, done with it
    seen = fake.consume(consumer, ptr, 8, device=1)
    fake.release(consumer, device=1)
    fake.synchronize(consumer, device=1)
    assert seen.value == b"abcdefgh"
    del capsule


def test_a_private_device_copy_is_ordered_on_the_consumers_stream(fake):
    ptr = fake.device_array(floats(*range(6)), device=1)
    consumer = fake.stream(device=1)
    dl = asdlpack(CAI(ptr, stream=consumer, shape=(6,)))
    fake.calls.clear()
    capsule = dl.__dlpack__(stream=consumer, copy=True, max_version=(1, 0))
    copy = todict(capsule)["data"]
    names = [c[0] for c in fake.calls]
    assert "cuMemAlloc" not in names and ("cuMemAllocAsync", 24, consumer) in fake.calls
    assert ("cuMemcpyDtoDAsync", copy, ptr, 24, consumer) in fake.calls
    seen = fake.consume(consumer, copy, 24, device=1)
    del capsule
    assert ("cuMemFreeAsync", copy, consumer) in fake.calls
    fake.synchronize(consumer, device=1)
    assert seen.value == floats(*range(6)) and copy not in fake.allocations


def test_the_per_thread_stream_copy_is_freed_on_the_legacy_stream(fake):
    """The deleter may run on another thread, whose per-thread stream is another one: the
    legacy stream, which waits for every thread's, frees it."""
    capsule = asdlpack(b"abcd").__dlpack__(max_version=(1, 0), dl_device=(2, 0), stream=2)
    ptr = todict(capsule)["data"]
    assert ("cuMemAllocAsync", 4, 2) in fake.calls
    del capsule
    assert ("cuMemFreeAsync", ptr, 1) in fake.calls


def test_without_stream_ordered_allocation_the_synchronous_path_serves(fake_sync):
    """A driver before CUDA 11.2: cuMemAlloc, cuMemcpyHtoD, an event for the consumer, and
    cuMemFree (which waits for the device) in the deleter."""
    consumer = fake_sync.stream(device=1, nonblocking=True)
    capsule = asdlpack(b"abcdefgh").__dlpack__(max_version=(1, 0), dl_device=(2, 1),
                                               stream=consumer)
    ptr = todict(capsule)["data"]
    names = [c[0] for c in fake_sync.calls]
    assert "cuMemAllocAsync" not in names and ("cuMemcpyHtoD", ptr, 8) in fake_sync.calls
    seen = fake_sync.consume(consumer, ptr, 8, device=1)
    fake_sync.synchronize(consumer, device=1)
    assert seen.value == b"abcdefgh"
    del capsule
    assert ("cuMemFree", ptr) in fake_sync.calls


@pytest.mark.parametrize("kind, device, alloc, free", [
    ("pinned", DLDeviceType.kDLCUDAHost, "cuMemHostAlloc", "cuMemFreeHost"),
    ("managed", DLDeviceType.kDLCUDAManaged, "cuMemAllocManaged", "cuMemFree")])
def test_a_copy_of_pinned_or_managed_data_keeps_its_kind(fake, kind, device, alloc, free):
    """copy=True without dl_device is a copy on the same device (array API): pinned or managed
    memory the driver allocates, labelled so, not host memory labelled kDLCPU (spec §10)."""
    memory = (ctypes.c_float * 6)(*range(6))
    ptr = getattr(fake, kind)(memory)
    dl = asdlpack(CAI(ptr, shape=(6,)))
    capsule = dl.__dlpack__(copy=True, max_version=(1, 0))
    got = todict(capsule)
    assert got["device"] == (device, 0) and got["data"] != ptr and got["flags"] & 2
    assert ctypes.string_at(got["data"], 24) == floats(*range(6))
    assert [c[0] for c in fake.calls].count(alloc) == 1
    copy = got["data"]
    del capsule
    assert (free, copy) in fake.calls
    host = todict(dl.__dlpack__(copy=True, dl_device=(1, 0), max_version=(1, 0)))
    assert host["device"] == (DLDeviceType.kDLCPU, 0)      # the host, where it is asked for
