"""Exchanges while the consumer's stream captures a CUDA graph (``torch.cuda.graph``), on the
strict fake driver, which invalidates a capture as libcuda does (docs/spec.md §10): a view
only records the wait, where the producer's work is in the capture; everything else is refused
before any call that would invalidate the capture."""

import ctypes

import pytest

from dlpack import asdlpack, todict
from dlpack.tests import arrow_producers as ap
from dlpack.tests.fake_cuda import (
    CU_STREAM_CAPTURE_MODE_RELAXED,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
    CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
    capture_check,
    ctx,
    wait,
)
from dlpack.tests.helpers import CAI


def floats(*values):
    return bytes((ctypes.c_float * len(values))(*values))


def data(fake, stream, kind="device_array"):
    ptr = getattr(fake, kind)(floats(*range(6)) if kind == "device_array"
                              else (ctypes.c_float * 6)(*range(6)))
    return ptr, asdlpack(CAI(ptr, stream=stream, shape=(6,)))


def refused_by_driver(fake):
    return [c for c in fake.calls if c[1:2] == ("error",)]


def test_a_view_on_the_capturing_stream_itself_makes_no_call(fake):
    """torch's current stream is the capture stream: the consumer is the producer's stream."""
    graph = fake.stream()
    _, dl = data(fake, graph)
    fake.begin_capture(graph)
    fake.calls.clear()
    dl.__dlpack__(stream=graph, max_version=(1, 0))
    assert fake.calls == []
    assert fake.end_capture(graph).invalidated is None


def test_a_producer_in_the_capture_is_waited_for_inside_the_graph(fake):
    """The producer's stream captures too (forked from the capture): the event it records is a
    captured one, and the consumer's wait joins the graph."""
    producer, consumer = fake.stream(), fake.stream()
    _, dl = data(fake, producer)
    fake.begin_capture(producer)
    fake.begin_capture(consumer)
    fake.calls.clear()
    dl.__dlpack__(stream=consumer, max_version=(1, 0))
    expected = wait(0, producer, consumer, first=False)
    asked = expected.index(("cuStreamIsCapturing", consumer)) + 1
    expected.insert(asked, ("cuStreamIsCapturing", producer))
    assert fake.calls == expected
    assert [op.label for op in fake.end_capture(consumer).ops] == [f"wait {0xE0:#x}"]
    assert fake.end_capture(producer).invalidated is None


@pytest.mark.parametrize("where", ["legacy", "other stream"])
def test_a_producer_outside_the_capture_is_refused_before_the_capture_breaks(fake, where):
    """A captured stream may not wait for work outside its capture: recording on the legacy
    stream is an implicit synchronisation (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), waiting on an
    event of a stream outside is CUDA_ERROR_STREAM_CAPTURE_ISOLATION; either invalidates
    torch's capture. A BufferError names the capture and the way out instead."""
    producer = 1 if where == "legacy" else fake.stream()
    graph = fake.stream()
    _, dl = data(fake, producer)
    fake.begin_capture(graph)
    with pytest.raises(BufferError, match=f"stream {graph:#x} is capturing a CUDA graph.*"
                       "before capture begins, or outside the graph"):
        dl.__dlpack__(stream=graph, max_version=(1, 0))
    assert refused_by_driver(fake) == []
    assert fake.end_capture(graph).invalidated is None


def test_an_arrow_sync_event_outside_the_capture_is_refused(fake):
    ptr = fake.device_array(floats(0, 0, 0))
    event = fake.record(fake.stream(nonblocking=True))
    col = ap.primitive("f", [0, 0, 0], b"f")
    col.buffers[1] = ap.Address(ptr)
    dl = asdlpack(ap.DeviceProducer(col, 2, 0, event))
    graph = fake.stream()
    fake.begin_capture(graph)
    with pytest.raises(BufferError, match=r"capturing a CUDA graph.*sync_event"):
        dl.__dlpack__(stream=graph, max_version=(1, 0))
    assert refused_by_driver(fake) == []
    assert fake.end_capture(graph).invalidated is None


@pytest.mark.parametrize("kind, ask, what", [
    ("device_array", {"copy": True}, "a copy on the GPU"),
    ("device_array", {"dl_device": (1, 0)}, "a read by the host"),
    ("pinned", {"dl_device": (1, 0)}, "a read by the host"),
    ("managed", {}, None),
])
def test_copies_and_host_reads_are_refused_during_capture(fake, kind, ask, what):
    """cuMemAlloc, synchronous copies and synchronisations invalidate a global capture
    (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED): refused, naming the capture, before any of them;
    a view of managed memory for a GPU consumer needs none and goes through."""
    graph = fake.stream()
    _, dl = data(fake, graph, kind)
    fake.begin_capture(graph)
    fake.calls.clear()
    if what is None:
        dl.__dlpack__(stream=graph, max_version=(1, 0))
        assert fake.calls == []
    else:
        with pytest.raises(BufferError, match=f"capturing a CUDA graph and {what} needs calls"):
            dl.__dlpack__(stream=graph, max_version=(1, 0), **ask)
        assert fake.calls == capture_check(graph, ctx(0))
    assert fake.end_capture(graph).invalidated is None


def test_a_copy_to_the_gpu_is_refused_during_capture(fake):
    graph = fake.stream(device=1)
    fake.begin_capture(graph, device=1)
    with pytest.raises(BufferError, match="capturing a CUDA graph and a copy to the GPU"):
        asdlpack(b"12345678").__dlpack__(stream=graph, dl_device=(2, 1), max_version=(1, 0))
    assert fake.calls == capture_check(graph, ctx(1))
    assert fake.end_capture(graph, device=1).invalidated is None


def test_stream_minus_1_and_the_legacy_stream_are_not_asked(fake):
    """-1: the consumer ordered the work itself; the legacy stream never captures (asking of it
    during a capture would itself be an implicit synchronisation)."""
    graph = fake.stream()
    _, dl = data(fake, graph)
    fake.begin_capture(graph, mode=CU_STREAM_CAPTURE_MODE_RELAXED)
    fake.calls.clear()
    dl.__dlpack__(stream=-1, max_version=(1, 0))
    assert fake.calls == []
    fake.end_capture(graph)
    fake.calls.clear()
    assert todict(dl.__dlpack__(stream=1, max_version=(1, 0)))["data"]
    assert ("cuStreamIsCapturing", 1) not in fake.calls


# -- the fake's rules (tests/fake_cuda.py), as libcuda's -----------------------------------------


def call(fake, name, *args):
    """An entry point of the fake called as a library would, in GPU 0's primary context."""
    fn = ctypes.CFUNCTYPE(ctypes.c_int, *[type(a) for a in args])(fake.symbols()[name])
    push = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(fake.symbols()["cuCtxPushCurrent_v2"])
    pop = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))(
        fake.symbols()["cuCtxPopCurrent_v2"])
    assert push(ctx(0)) == 0
    try:
        return fn(*args)
    finally:
        pop(ctypes.byref(ctypes.c_void_p()))


def test_the_fake_invalidates_a_capture_on_a_synchronising_call(fake):
    graph = fake.stream()
    fake.begin_capture(graph)
    assert call(fake, "cuCtxSynchronize") == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    assert fake.end_capture(graph).invalidated == "cuCtxSynchronize during capture"


def test_the_fake_invalidates_a_capture_on_a_legacy_stream_use(fake):
    graph = fake.stream()
    fake.begin_capture(graph, mode=CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    status = ctypes.c_int()
    assert call(fake, "cuStreamIsCapturing", ctypes.c_void_p(graph),
                ctypes.pointer(status)) == 0 and status.value == 1
    assert call(fake, "cuStreamIsCapturing", ctypes.c_void_p(1),
                ctypes.pointer(status)) == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
    assert fake.end_capture(graph).invalidated


def test_the_fake_refuses_a_captured_wait_for_outside_work(fake):
    graph, other = fake.stream(), fake.stream()
    event = fake.record(other)
    fake.begin_capture(graph)
    assert call(fake, "cuStreamWaitEvent", ctypes.c_void_p(graph), ctypes.c_void_p(event),
                ctypes.c_uint(0)) == CUDA_ERROR_STREAM_CAPTURE_ISOLATION
    assert fake.end_capture(graph).invalidated
