"""Real-GPU exchanges among PyTorch CUDA, CuPy and Numba; skipped cleanly without a GPU."""

import gc

import pytest

from dlpack import DLDeviceType, asdlpack

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU on this machine", allow_module_level=True)


def test_torch_cuda_round_trip_same_memory():
    t = torch.arange(1000, device="cuda", dtype=torch.float32)
    dl = asdlpack(t)
    assert dl.device == (DLDeviceType.kDLCUDA, t.device.index or 0)
    back = torch.from_dlpack(dl)
    assert back.data_ptr() == t.data_ptr() and torch.equal(back, t)
    cai = dl.__cuda_array_interface__
    assert cai["data"][0] == t.data_ptr()
    assert not hasattr(dl, "__array_interface__")


def test_side_stream_work_is_waited_for():
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        t = torch.empty(1 << 22, device="cuda")
        torch.cuda._sleep(50_000_000)
        t.fill_(3.0)
        dl = asdlpack(_CAIView(t, side))
    out = torch.from_dlpack(dl)
    assert float(out.sum()) == 3.0 * (1 << 22)


class _CAIView:
    """Speaks only the CUDA array interface, reporting the side stream its data is on."""

    def __init__(self, t, stream):
        self.t = t
        cai = dict(t.__cuda_array_interface__)
        cai["stream"] = stream.cuda_stream
        self.__cuda_array_interface__ = cai


def test_cupy_and_numba_consumers():
    cupy = pytest.importorskip("cupy")
    numba_cuda = pytest.importorskip("numba.cuda")
    t = torch.arange(16, device="cuda", dtype=torch.float32)
    c = cupy.from_dlpack(asdlpack(t))
    assert c.data.ptr == t.data_ptr()
    n = numba_cuda.as_cuda_array(asdlpack(t))
    assert n.copy_to_host().tolist() == list(range(16))
    x = torch.from_dlpack(asdlpack(numba_cuda.to_device(t.cpu().numpy())))
    assert x.is_cuda and x.tolist() == list(range(16))


def test_device_ordinal_of_second_gpu():
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU only")
    t = torch.ones(4, device="cuda:1")
    view = _CAIView(t, torch.cuda.current_stream(1))
    assert asdlpack(view).device == (DLDeviceType.kDLCUDA, 1)


def test_no_leak_on_gpu():
    t = torch.ones(1024, device="cuda")
    before = torch.cuda.memory_allocated()
    for _ in range(10_000):
        torch.from_dlpack(asdlpack(t))
    gc.collect()
    assert torch.cuda.memory_allocated() == before


def test_device_to_host_copies_for_dlpack_and_cai_only_providers():
    np = pytest.importorskip("numpy")
    t = torch.arange(12, device="cuda", dtype=torch.float32).reshape(3, 4)
    for provider in (t, _CAIView(t, torch.cuda.current_stream())):
        host = np.from_dlpack(asdlpack(provider), device="cpu")
        assert host.tolist() == t.cpu().tolist()
    strided = t[:, ::-2]
    host = np.from_dlpack(asdlpack(_CAIView(strided, torch.cuda.current_stream())),
                          device="cpu")
    assert host.tolist() == strided.cpu().tolist()


def test_host_to_device_copy_and_per_thread_stream():
    b = bytes(range(16))
    capsule = asdlpack(b).__dlpack__(max_version=(1, 0), dl_device=(2, 0), stream=1)
    x = torch.from_dlpack(capsule)
    assert x.is_cuda and x.cpu().tolist() == list(b)
    t = torch.ones(8, device="cuda")
    y = torch.utils.dlpack.from_dlpack(asdlpack(t).__dlpack__(stream=2))
    assert y.data_ptr() == t.data_ptr()


def _side_stream_tensor(value, n=1 << 22):
    """A tensor filled on a side stream after a long sleep there: stale unless waited for."""
    t = torch.zeros(n, device="cuda")
    torch.cuda.synchronize()
    torch.cuda._sleep(50_000_000)
    t.fill_(value)
    return t


def test_torch_side_stream_is_ordered_through_its_exchange_api():
    cupy = pytest.importorskip("cupy")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        t = _side_stream_tensor(3.0)
        dl = asdlpack(t)
        assert dl.__cuda_array_interface__["stream"] == side.cuda_stream
        c = cupy.from_dlpack(dl)        # CuPy's stream waits for torch's side stream (an event)
        assert float(c.sum()) == 3.0 * t.numel()
        host = dl.__dlpack__(max_version=(1, 0), dl_device=(1, 0))   # synchronised first
        assert torch.from_dlpack(host).sum().item() == 3.0 * t.numel()
    # on torch's default stream its own CAI names no stream: nor does ours
    assert dl.__cuda_array_interface__["stream"] is None


def test_numba_consumer_waits_for_the_reported_side_stream():
    numba_cuda = pytest.importorskip("numba.cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        t = _side_stream_tensor(2.0, 1 << 20)
        arr = numba_cuda.as_cuda_array(asdlpack(t))
    assert arr.__cuda_array_interface__["data"][0] == t.data_ptr()
    assert float(arr.copy_to_host().sum()) == 2.0 * t.numel()


def test_per_thread_default_stream_consumer_of_a_side_stream_tensor():
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        t = _side_stream_tensor(5.0)
        capsule = asdlpack(t).__dlpack__(max_version=(1, 0), stream=2)
    y = torch.from_dlpack(capsule)
    assert y.data_ptr() == t.data_ptr() and y.sum().item() == 5.0 * t.numel()


def test_cupy_and_jax_host_copies():
    cupy = pytest.importorskip("cupy")
    np = pytest.importorskip("numpy")
    c = cupy.arange(10, dtype=cupy.float32)[::-3]
    back = np.from_dlpack(asdlpack(c), device="cpu")
    assert back.tolist() == c.get().tolist()
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    j = jax.numpy.arange(6, dtype=jax.numpy.float32)
    assert np.from_dlpack(asdlpack(j), device="cpu").tolist() == list(range(6))
    assert torch.from_dlpack(asdlpack(j)).cpu().tolist() == list(range(6))
