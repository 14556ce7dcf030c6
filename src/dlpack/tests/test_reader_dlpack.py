"""Readers: __dlpack__ objects, raw capsules, TensorFlow, PyArrow, protocol order (spec §3.1)."""

import gc
import importlib.util
import os
import subprocess
import sys

import pytest

from dlpack import DLPackError, DLPackObject, asdlpack, todict
from dlpack.tests.helpers import CONSUMERS, capsule, check_exchange, lib

np = lib("numpy")

TORCH_DTYPES = ["bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32",
                "float64", "complex64", "complex128", "bfloat16", "float8_e4m3fn", "float8_e5m2"]


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_torch_every_consumer(consumer):
    torch = lib("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    check_exchange(consumer, t, np.arange(12, dtype=np.float32).reshape(3, 4))


@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_torch_every_dtype_to_torch_and_numpy(dtype):
    torch = lib("torch")
    t = (torch.arange(6) % 2 if dtype == "bool" else torch.arange(6)).to(getattr(torch, dtype))
    dl = asdlpack(t)
    assert dl.dtype.name == dtype and dl.data_ptr == t.data_ptr()
    back = torch.from_dlpack(dl)
    assert back.dtype == t.dtype and back.data_ptr() == t.data_ptr()
    wide = torch.complex128 if t.is_complex() else torch.float64    # no imaginary part dropped
    assert torch.equal(back.to(wide), t.to(wide))
    if dtype not in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        a = np.from_dlpack(dl)
        assert a.ctypes.data == t.data_ptr()


@pytest.mark.parametrize("make", [
    lambda torch: torch.arange(24.0).reshape(4, 6)[::2, 1::3],
    lambda torch: torch.arange(6.0).reshape(2, 3).T,
    lambda torch: torch.tensor(7.0),
    lambda torch: torch.zeros(0, 4),
])
def test_torch_layouts(make):
    torch = lib("torch")
    t = make(torch)
    dl = asdlpack(t)
    assert dl.shape == tuple(t.shape) and dl.strides == tuple(t.stride())
    a = np.from_dlpack(dl)
    np.testing.assert_array_equal(a, t.numpy())
    if t.numel():
        assert a.ctypes.data == t.data_ptr()


def test_torch_refusals_kept_on_the_fast_path():
    """torch's C API would export these; its __dlpack__ refuses them, and so do we (§4)."""
    torch = lib("torch")
    t = torch.ones(3, requires_grad=True)
    with pytest.raises(BufferError, match="gradient"):
        asdlpack(t)
    assert torch.from_dlpack(asdlpack(t.detach())).data_ptr() == t.data_ptr()
    z = torch.tensor([1 + 2j, 3 - 4j])
    with pytest.raises(BufferError, match="conjugate"):
        asdlpack(z.conj())
    with pytest.raises(BufferError, match="resolve_neg"):
        asdlpack(torch._neg_view(z.real.contiguous()))


def test_torch_checks_ask_torch_not_the_instance():
    """The bits are asked of torch.Tensor's own methods: an instance attribute cannot answer."""
    torch = lib("torch")
    t = torch._neg_view(torch.arange(3.0))
    t.is_neg = lambda: False
    with pytest.raises(BufferError, match="resolve_neg"):
        asdlpack(t)
    z = torch.tensor([1 + 2j]).conj()
    z.is_conj = lambda: False
    with pytest.raises(BufferError, match="conjugate"):
        asdlpack(z)


def test_torch_fast_path_agrees_with_the_protocol_walk():
    """asdlpack's shortcut for exact torch tensors gives what the full walk gives (§3.1)."""
    torch = lib("torch")
    from dlpack._core import _asdlpack_via

    for t in (torch.arange(6.0).reshape(2, 3).t(), torch.ones(0), torch.tensor(3),
              torch.arange(4, dtype=torch.bfloat16)):
        fast, walked = asdlpack(t), _asdlpack_via(t, "__dlpack__")
        assert (fast.shape, fast.strides, fast.dtype, fast.data_ptr, fast.readonly) == (
            walked.shape, walked.strides, walked.dtype, walked.data_ptr, walked.readonly)


def test_torch_raw_legacy_capsule_to_jax():
    torch = lib("torch")
    jnp = lib("jax.numpy")
    t = torch.arange(16, dtype=torch.float32)
    capsule = torch.utils.dlpack.to_dlpack(t)
    dl = asdlpack(capsule)
    assert dl.base is capsule
    assert "used_dltensor" in repr(capsule)
    x = jnp.from_dlpack(dl)
    assert x.tolist() == list(range(16))
    with pytest.raises(BufferError, match="consumed already"):
        asdlpack(capsule)


def test_raw_versioned_capsule():
    a = np.arange(5.0)
    capsule = a.__dlpack__(max_version=(1, 0))
    dl = asdlpack(capsule)
    assert dl.data_ptr == a.ctypes.data
    assert "used_dltensor_versioned" in repr(capsule)


def test_foreign_capsule_rejected():
    foreign = capsule(1, b"not_a_tensor")
    with pytest.raises(BufferError, match="not_a_tensor"):
        asdlpack(foreign)


def test_jax_every_consumer():
    jnp = lib("jax.numpy")
    x = jnp.arange(8, dtype=jnp.float32)
    for consumer in CONSUMERS:
        check_exchange(consumer, x, np.arange(8, dtype=np.float32))


def test_jax_bfloat16_to_torch():
    jnp = lib("jax.numpy")
    torch = lib("torch")
    x = jnp.arange(4, dtype=jnp.bfloat16)
    dl = asdlpack(x)
    assert dl.dtype.name == "bfloat16"
    t = torch.from_dlpack(dl)
    assert t.dtype == torch.bfloat16 and t.data_ptr() == x.unsafe_buffer_pointer()


def test_tensorflow_to_torch_fresh_owner_each_call():
    tf = lib("tensorflow")
    torch = lib("torch")
    t = tf.constant(np.arange(1000, dtype=np.float32))
    address = todict(tf.experimental.dlpack.to_dlpack(t))["data"]
    out = torch.from_dlpack(asdlpack(t))
    del t
    gc.collect()
    junk = [np.ones(1000, dtype=np.float32) * 7 for _ in range(50)]
    assert out.data_ptr() == address
    assert out.tolist() == list(range(1000))     # the old pydlpack reads freed memory here
    del junk


def test_tensorflow_to_dlpack_capsule():
    tf = lib("tensorflow")
    t = tf.constant([[1, 2], [3, 4]], dtype=tf.int32)
    address = todict(tf.experimental.dlpack.to_dlpack(t))["data"]
    dl = asdlpack(tf.experimental.dlpack.to_dlpack(t))
    a = np.from_dlpack(dl)
    assert a.tolist() == [[1, 2], [3, 4]] and a.ctypes.data == address == dl.data_ptr


def test_tensorflow_tensors_its_export_aborts_on_are_refused_before_the_call():
    """§3.1: TensorFlow's __dlpack__ aborts the process on string, resource and variant
    tensors; asdlpack, todict and 0.2.1's asdlpack_dlpack refuse them without calling it (in
    a child: a regression is an abort)."""
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("needs tensorflow")
    code = """if True:
        import warnings
        import tensorflow as tf
        import dlpack
        warnings.simplefilter("ignore", DeprecationWarning)
        tensors = {"string": tf.constant(["a", "b"]), "resource": tf.Variable([1.0]).handle,
                   "variant": tf.data.experimental.to_variant(tf.data.Dataset.range(3))}
        for kind, t in tensors.items():
            for read in (dlpack.asdlpack, dlpack.todict, dlpack.asdlpack_dlpack):
                try:
                    read(t)
                except BufferError as e:
                    assert f"TensorFlow cannot export a {kind} tensor" in str(e), str(e)
                else:
                    raise AssertionError(f"{kind}: {read.__name__} read it")
        assert dlpack.asdlpack(tf.constant([1.5])).dtype.name == "float32"
    """
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert run.returncode == 0, run.stderr[-3000:]


def test_pyarrow_array_and_tensor():
    pa = lib("pyarrow")
    arr = pa.array([1, 2, 3], type=pa.int64())
    dl = asdlpack(arr)
    a = np.from_dlpack(dl)
    assert a.tolist() == [1, 2, 3]
    assert a.ctypes.data == arr.buffers()[1].address
    tensor = pa.Tensor.from_numpy(np.arange(6, dtype=np.float64).reshape(2, 3))
    b = np.from_dlpack(asdlpack(tensor))
    assert b.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert b.ctypes.data == tensor.to_numpy().ctypes.data


def test_numpy_native_dlpack_is_zero_copy():
    torch = lib("torch")
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    dl = asdlpack(a)
    assert dl.base is a
    assert torch.from_dlpack(dl).data_ptr() == a.ctypes.data


class Producer:
    """A Python-level DLPack producer that counts how often its tensor is freed."""

    def __init__(self, a, signature="full"):
        self.a = a
        self.signature = signature
        self.calls = []

    def __dlpack__(self, *args, **kwargs):
        self.calls.append(kwargs)
        if self.signature == "none" and kwargs:
            raise TypeError("__dlpack__() got an unexpected keyword argument")
        if self.signature == "stream" and set(kwargs) - {"stream"}:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        if self.signature == "legacy":
            return self.a.__dlpack__()
        return self.a.__dlpack__(**{k: v for k, v in kwargs.items() if k != "stream"})

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


@pytest.mark.parametrize("signature", ["full", "none", "stream", "legacy"])
def test_version_negotiation_fallback(signature):
    a = np.arange(4.0)
    p = Producer(a, signature)
    dl = asdlpack(p)
    assert p.calls[0] == {"max_version": (1, 3)}
    assert np.from_dlpack(dl).ctypes.data == a.ctypes.data
    # legacy producer → versioned re-export, and the reverse, both work
    assert todict(dl.__dlpack__(max_version=(1, 0)))["version"] == (1, 3)
    assert todict(dl.__dlpack__())["version"] is None


def test_readonly_flag_preserved_through_reexport():
    a = np.arange(3.0)
    a.flags.writeable = False
    dl = asdlpack(a)
    assert dl.readonly
    assert todict(dl.__dlpack__(max_version=(1, 0)))["flags"] & 1
    assert todict(dl.__dlpack__())["data"] != a.ctypes.data     # legacy: a private copy
    with pytest.raises(BufferError, match="read-only"):
        dl.__dlpack__(copy=False)


def test_provider_dropped_before_consumer():
    a = np.arange(100_000, dtype=np.float64)
    ref = sys.getrefcount(a)
    dl = asdlpack(a)
    assert sys.getrefcount(a) > ref
    out = np.from_dlpack(dl)
    del a, dl
    gc.collect()
    assert out[-1] == 99_999.0


def test_order_prefers_dlpack_and_falls_through():
    class Both:
        def __init__(self):
            self.a = np.arange(3, dtype=np.int8)
            self.__array_interface__ = self.a.__array_interface__

        def __dlpack__(self, **kwargs):
            raise BufferError("I refuse")

    dl = asdlpack(Both())
    assert dl.dtype == "int8"


class _OutOfMemory(bytearray):
    """The buffer protocol, after steps that raise MemoryError: looking up the ``step``
    attribute, or calling __dlpack__ when step is "call"."""

    step = ""

    def __getattr__(self, name):
        if name == self.step:
            raise MemoryError(name)
        if name == "__dlpack__" and self.step == "call":
            return self._out_of_memory
        raise AttributeError(name)

    def _out_of_memory(self, **kwargs):
        raise MemoryError("__dlpack__()")


@pytest.mark.parametrize("step", ["__dlpack__", "call", "__cuda_array_interface__",
                                  "__array_interface__", "__array_struct__"])
def test_memory_error_is_no_refusal(step):
    """Out of memory while a protocol is asked is not that protocol refusing: the walk stops
    with the MemoryError instead of falling through to the buffer protocol (spec §3)."""
    obj = _OutOfMemory(b"abcd")
    obj.step = step
    with pytest.raises(MemoryError):
        asdlpack(obj)
    obj.step = ""
    assert asdlpack(obj).shape == (4,)          # the buffer protocol, after every refusal


def test_all_refuse_lists_each_protocol():
    class Bad:
        @property
        def __array_interface__(self):
            return {"shape": (1,), "typestr": "|O8", "data": (1, False), "version": 3}

        def __dlpack__(self, **kwargs):
            raise BufferError("nope")

    with pytest.raises(BufferError) as info:
        asdlpack(Bad())
    text = str(info.value)
    assert "__dlpack__: BufferError: nope" in text and "__array_interface__" in text


def test_producer_error_wrapped_by_type_not_wording():
    """A producer's BufferError is wrapped naming the protocol even when its text starts like
    one of ours; pydlpack's own refusal from a nested asdlpack passes as it is (spec §7)."""
    class Mimic:
        def __dlpack__(self, **kwargs):
            raise BufferError("__array_interface__: looks like pydlpack's")

    class Nested:
        def __dlpack__(self, **kwargs):
            return asdlpack(b"ab").__dlpack__(dl_device=(99, 0))

    with pytest.raises(BufferError) as info:
        asdlpack(Mimic())
    assert str(info.value) == "__dlpack__: BufferError: __array_interface__: looks like pydlpack's"
    assert type(info.value) is DLPackError and type(info.value.__cause__) is BufferError
    with pytest.raises(BufferError) as info:
        asdlpack(Nested())
    assert str(info.value).startswith("__dlpack__: ") and "Error:" not in str(info.value)


def test_cuda_error_exported():
    import dlpack
    from dlpack import _core

    assert dlpack.CudaError is _core.CudaError and issubclass(dlpack.CudaError, BufferError)
    assert "CudaError" in dlpack.__all__


def test_refusal_says_what_it_is():
    """pydlpack's refusal is dlpack.DLPackError, a BufferError under its own name: what its
    traceback prints is its class, BufferError is once in its MRO, and it pickles as itself
    (spec §7)."""
    import pickle

    import dlpack

    with pytest.raises(BufferError) as info:
        asdlpack(b"ab").__dlpack__(dl_device=(99, 0))
    e = info.value
    assert type(e) is dlpack.DLPackError and "DLPackError" in dlpack.__all__
    assert f"{type(e).__module__}.{type(e).__qualname__}" == "dlpack.DLPackError"
    assert [c.__name__ for c in type(e).__mro__].count("BufferError") == 1
    assert issubclass(dlpack.CudaError, dlpack.DLPackError)
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is dlpack.DLPackError and back.args == e.args


@pytest.mark.parametrize("obj", [None, 5, "abc", [1, 2], {"a": 1}, object(), 3.5])
def test_speaks_nothing_type_error(obj):
    with pytest.raises(TypeError, match=type(obj).__qualname__):
        asdlpack(obj)


def test_idempotent_and_direct_construction():
    dl = asdlpack(b"x")
    assert asdlpack(dl) is dl
    opted = asdlpack(dl, allow_legacy_readonly=True)
    assert opted is not dl and opted.base is dl and opted.data_ptr == dl.data_ptr
    with pytest.raises(TypeError, match="asdlpack"):
        DLPackObject()


def test_dlpack_returning_garbage():
    class Liar:
        def __dlpack__(self, **kwargs):
            return 42

    with pytest.raises(BufferError, match="not a PyCapsule"):
        asdlpack(Liar())


def test_legacy_capsule_destructor_runs_when_its_capsule_is_refused():
    """A dlpack.Capsule destructor (Python code, through ctypes) of a capsule __dlpack__
    returned runs when asdlpack or todict refuses it, and the refusal is raised as it is
    (a pending error made the destructor fail: SystemError, and a leak)."""
    import ctypes
    import warnings

    import dlpack

    calls = []
    memory = ctypes.create_string_buffer(64)

    class Producer:
        def __dlpack__(self, **kwargs):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                return dlpack.Capsule.new(ctypes.addressof(memory), "not_dltensor",
                                          lambda c: calls.append(c.get_name())).capsule

    for call in (asdlpack, todict):
        with pytest.raises(BufferError, match="'not_dltensor' is not 'dltensor'"):
            call(Producer())
    assert calls == ["not_dltensor", "not_dltensor"]
