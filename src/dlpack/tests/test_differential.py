"""Differential tests: asdlpack describes the same memory as each library's own export."""

import threading

import pytest

import dlpack

RO = dlpack.FLAG_BITMASK_READ_ONLY


def _same(ours, theirs):
    """Assert two todict() results describe the same elements (address, shape, dtype, flags)."""
    assert ours["shape"] == theirs["shape"]
    assert ours["dtype"] == theirs["dtype"]
    assert ours["device"] == theirs["device"]
    n = 1
    for e in ours["shape"]:
        n *= e
    if n:
        assert ours["data"] + ours["byte_offset"] == theirs["data"] + theirs["byte_offset"]
    if n > 1 and ours["strides"] is not None and theirs["strides"] is not None:
        for e, a, b in zip(ours["shape"], ours["strides"], theirs["strides"], strict=True):
            assert e == 1 or a == b
    if "flags" in theirs and theirs.get("version"):
        assert ours["flags"] & RO == theirs["flags"] & RO


def _compare(x, theirs_capsule):
    """Both refuse, or both describe x identically; returns our DLPackObject or None."""
    try:
        theirs = dlpack.todict(theirs_capsule())
    except (BufferError, RuntimeError, TypeError, ValueError):
        with pytest.raises((BufferError, TypeError)):
            dlpack.asdlpack(x)
        return None
    ours = dlpack.asdlpack(x)
    _same(dlpack.todict(ours), theirs)
    return ours


def _numpy_cases(np):
    """NumPy arrays with odd layouts."""
    base = np.arange(24, dtype="f8").reshape(4, 6)
    ro = base.copy()
    ro.flags.writeable = False
    unaligned = np.frombuffer(bytearray(17), dtype="u1")[1:].view("<i4")
    cases = {
        "negative": base[::-1, ::-2],
        "broadcast": np.broadcast_to(np.arange(3.0), (4, 3)),
        "0-d": np.array(3.5),
        "zero-size": np.zeros((0, 3)),
        "readonly": ro,
        "unaligned": unaligned,
        "big-endian": np.arange(4, dtype=">i4"),
        "bool": np.array([True, False]),
        "complex": np.arange(4, dtype="c16"),
        "fortran": np.asfortranarray(base),
        "sliced": base[1:, 2:5],
    }
    try:
        import ml_dtypes

        cases["bfloat16"] = np.arange(4).astype(ml_dtypes.bfloat16)
    except ImportError:
        pass
    return cases


NUMPY_NAMES = ["negative", "broadcast", "0-d", "zero-size", "readonly", "unaligned", "big-endian",
               "bool", "complex", "fortran", "sliced", "bfloat16"]


@pytest.mark.parametrize("name", NUMPY_NAMES)
def test_numpy_layouts(name):
    """Each odd NumPy layout matches NumPy's own versioned export, or both refuse."""
    np = pytest.importorskip("numpy")
    if name == "bfloat16":
        pytest.importorskip("ml_dtypes")
    x = _numpy_cases(np)[name]
    if name == "bfloat16":  # NumPy refuses ml_dtypes; pydlpack describes the same memory
        d = dlpack.todict(dlpack.asdlpack(x))
        assert d["dtype"] == (dlpack.DLDataTypeCode.kDLBfloat, 16, 1)
        assert d["data"] + d["byte_offset"] == x.ctypes.data
        return
    _compare(x, lambda: x.__dlpack__(max_version=(1, 0)))


def _torch_cases(torch):
    """Torch tensor variants, each built lazily so that one failing constructor skips one case."""
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    return {
        "plain": lambda: t,
        "transposed": lambda: t.T,
        "sliced": lambda: t[1:, 1::2],
        "0-d": lambda: torch.tensor(2.0),
        "zero-size": lambda: torch.zeros(0, 3),
        "channels_last": lambda: torch.zeros(1, 3, 2, 2).to(memory_format=torch.channels_last),
        "bool": lambda: torch.tensor([True, False]),
        "bfloat16": lambda: t.to(torch.bfloat16),
        "complex": lambda: torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64),
        "conj": lambda: torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64).conj(),
        "neg": lambda: torch._neg_view(torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)),
        "requires_grad": lambda: torch.ones(3, requires_grad=True),
        "sparse_coo": lambda: t.to_sparse(),
        "sparse_csr": lambda: t.to_sparse_csr(),
        "quantized": lambda: torch.quantize_per_tensor(t, 0.1, 0, torch.quint8),
        "meta": lambda: torch.empty(3, device="meta"),
        "nested": lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
    }


TORCH_NAMES = ["plain", "transposed", "sliced", "0-d", "zero-size", "channels_last", "bool",
               "bfloat16", "complex", "conj", "neg", "requires_grad", "sparse_coo", "sparse_csr",
               "quantized", "meta", "nested"]


@pytest.mark.parametrize("name", TORCH_NAMES)
def test_torch_variants(name):
    """Each torch variant matches torch's own __dlpack__, or both refuse; neg views are refused."""
    torch = pytest.importorskip("torch")
    x = _torch_cases(torch)[name]()
    if name == "neg":
        with pytest.raises(BufferError, match="resolve_neg"):
            dlpack.asdlpack(x)
        return
    _compare(x, lambda: x.__dlpack__(max_version=(1, 0)))


@pytest.mark.parametrize("name", ["plain", "transposed", "sliced", "0-d", "zero-size", "bool",
                                  "bfloat16", "complex", "channels_last"])
def test_torch_fast_path_agrees_with_slow_path(name):
    """asdlpack(t) (possibly the C exchange API) equals asdlpack of torch's own capsule."""
    torch = pytest.importorskip("torch")
    x = _torch_cases(torch)[name]()
    fast = dlpack.todict(dlpack.asdlpack(x))
    slow = dlpack.todict(dlpack.asdlpack(x.__dlpack__(max_version=(1, 0))))
    _same(fast, slow)
    assert fast["flags"] & RO == slow["flags"] & RO


@pytest.mark.parametrize("name", ["conj", "requires_grad"])
def test_torch_refusals_are_buffer_errors(name):
    """What torch's __dlpack__ refuses, asdlpack refuses with BufferError."""
    torch = pytest.importorskip("torch")
    x = _torch_cases(torch)[name]()
    with pytest.raises((RuntimeError, BufferError)):
        x.__dlpack__(max_version=(1, 0))
    with pytest.raises(BufferError):
        dlpack.asdlpack(x)


def test_jax_cpu():
    """A JAX CPU array matches JAX's own export."""
    jax = pytest.importorskip("jax")
    x = jax.device_put(jax.numpy.arange(6.0).reshape(2, 3), jax.devices("cpu")[0])
    _compare(x, lambda: x.__dlpack__())


def test_jax_legacy_capsule_imports_read_only():
    """JAX's legacy capsule cannot say it is writable: read-only unless legacy_writable=True."""
    jax = pytest.importorskip("jax")
    x = jax.device_put(jax.numpy.arange(6.0), jax.devices("cpu")[0])
    if dlpack.todict(x)["version"] is not None:
        pytest.skip(f"JAX {jax.__version__} exports versioned capsules, which carry READ_ONLY")
    assert dlpack.todict(dlpack.asdlpack(x))["flags"] & RO
    assert not dlpack.todict(dlpack.asdlpack(x, legacy_writable=True))["flags"] & RO


def test_pillow_matches_array_interface():
    """A Pillow image is described as NumPy reads its __array_interface__, read-only."""
    np = pytest.importorskip("numpy")
    image = pytest.importorskip("PIL.Image")
    im = image.new("L", (3, 2), 7)
    d = dlpack.todict(dlpack.asdlpack(im))
    assert d["shape"] == (2, 3) and d["dtype"][:2] == (dlpack.DLDataTypeCode.kDLUInt, 8)
    assert d["flags"] & RO
    assert (np.asarray(dlpack.asdlpack(im)) == np.asarray(im)).all()


def test_tensorflow():
    """A TensorFlow tensor matches TensorFlow's own export."""
    tf = pytest.importorskip("tensorflow")
    x = tf.reshape(tf.range(6, dtype=tf.float32), (2, 3))
    _compare(x, lambda: tf.experimental.dlpack.to_dlpack(x))


def test_pyarrow():
    """A PyArrow array without nulls matches its own export."""
    pa = pytest.importorskip("pyarrow")
    x = pa.array([1, 2, 3], type=pa.int64())

    def theirs():       # versioned where PyArrow takes max_version (unversioned: deprecated)
        try:
            return x.__dlpack__(max_version=(1, 0))
        except TypeError:               # an older PyArrow (the newest on Python 3.10)
            return x.__dlpack__()

    _compare(x, theirs)


def test_array_api_strict():
    """An array-api-strict array matches its own export."""
    xp = pytest.importorskip("array_api_strict")
    x = xp.reshape(xp.arange(6), (2, 3))
    _compare(x, lambda: x.__dlpack__())


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "array", "ctypes", "mmap"])
def test_stdlib_buffers_match_memoryview(kind):
    """A stdlib buffer is described as its memoryview: address, length and read-only flag."""
    np = pytest.importorskip("numpy")
    import array
    import ctypes
    import mmap

    obj = {
        "bytes": lambda: b"abcdef",
        "bytearray": lambda: bytearray(b"abcdef"),
        "array": lambda: array.array("i", [1, 2, 3]),
        "ctypes": lambda: (ctypes.c_double * 3)(1, 2, 3),
        "mmap": lambda: mmap.mmap(-1, 16),
    }[kind]()
    mv = memoryview(obj)
    d = dlpack.todict(dlpack.asdlpack(obj))
    assert d["data"] + d["byte_offset"] == np.frombuffer(mv.cast("B"), "u1").ctypes.data
    assert d["shape"] == mv.shape
    assert bool(d["flags"] & RO) == mv.readonly
    assert memoryview(dlpack.asdlpack(obj)).tobytes() == mv.tobytes()
    mv.release()


def test_eight_threads_exchange_one_object():
    """8 threads exchanging one array concurrently all see the same memory and values."""
    np = pytest.importorskip("numpy")
    a = np.arange(1000.0)
    errors = []

    def work():
        try:
            for _ in range(300):
                b = np.from_dlpack(dlpack.asdlpack(a))
                assert b.ctypes.data == a.ctypes.data and b[999] == 999.0
        except Exception as e:  # collected and re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_refusals_do_not_leak(no_leak):
    """10**5 refused calls leave resident memory flat."""
    class Bad:
        def __init__(self):
            self.__array_interface__ = {"shape": (2**62, 4), "typestr": "<f8", "version": 3,
                                        "data": bytes(8)}

    bad = Bad()
    for _ in range(10**5):
        with pytest.raises(BufferError):
            dlpack.asdlpack(bad)


def test_legacy_consumer_of_read_only_data_gets_a_copy():
    """A legacy request (no max_version) for read-only data: copy by default, refuse copy=False."""
    np = pytest.importorskip("numpy")
    a = np.arange(6.0)
    a.flags.writeable = False
    d = dlpack.todict(dlpack.asdlpack(a).__dlpack__())
    assert d["version"] is None and d["data"] != a.ctypes.data
    copied = np.asarray(dlpack.asdlpack(dlpack.asdlpack(a).__dlpack__()))
    assert (copied == a).all()
    with pytest.raises(BufferError):
        dlpack.asdlpack(a).__dlpack__(copy=False)
    shared = dlpack.asdlpack(a, allow_legacy_readonly=True).__dlpack__()
    assert dlpack.todict(shared)["data"] == a.ctypes.data
