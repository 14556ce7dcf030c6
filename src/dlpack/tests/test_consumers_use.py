"""Differential tests with consumers that *use* bridged data, not only read it back (spec §4, §6).

A JAX computation, TensorFlow kernels (on shared data and on a legacy consumer's private
copy), NumPy reading after the provider and every other reference are gone and memory was
reused, and torch in-place ops seen through the provider. Each checks values against NumPy
computing on its own copy, the address (zero-copy where docs/spec.md promises it) and
read-only-ness.
"""

from __future__ import annotations

import array
import ctypes
import gc
import mmap
import sys

import pytest

from dlpack import asdlpack, todict
from dlpack.tests.helpers import lib, run_clean


def _aligned(np, shape, dtype, align=256):
    """A writable array of arange values whose first element sits on an align-byte boundary."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    raw = np.empty(n * dtype.itemsize + align, np.uint8)
    skip = -raw.ctypes.data % align
    a = raw[skip:skip + n * dtype.itemsize].view(dtype).reshape(shape)
    a[...] = np.arange(n).reshape(shape)
    return a


# -- JAX computations -----------------------------------------------------------------------------

def _jax_source(kind, np):
    """(provider, its values as a NumPy copy, zero-copy promised: True, False, None for
    either) for the JAX tests."""
    if kind == "numpy":
        a = _aligned(np, (4, 6), np.float32)
        return a, a.copy(), True
    if kind == "torch":
        torch = lib("torch")
        t = torch.arange(24, dtype=torch.float32).reshape(4, 6) - 7.5
        assert t.data_ptr() % 64 == 0, "torch's CPU allocator aligns to 64 bytes"
        return t, t.numpy().copy(), True
    b = bytes(range(256)) * 3
    # A JAX that asks for a legacy capsule gets read-only bytes as a private copy (spec §4);
    # one that passes max_version gets the memory itself, flagged READ_ONLY: either may happen
    return b, np.frombuffer(b, np.uint8).copy().reshape(3, 256), None


@pytest.mark.parametrize("kind", ["numpy", "torch", "bytes"])
def test_jax_computation_on_bridged_data(kind):
    """A jitted JAX computation on data bridged from NumPy, torch or bytes gives NumPy's
    results, on the provider's memory where zero-copy is promised, and after every other
    reference to the provider is gone."""
    np = lib("numpy")
    jax = lib("jax")
    jnp = lib("jax.numpy")
    provider, expected, zero_copy = _jax_source(kind, np)
    dl = asdlpack(provider)
    address = dl.data_ptr
    x = jnp.from_dlpack(dl)
    if zero_copy is not None:
        assert (x.unsafe_buffer_pointer() == address) is zero_copy
    assert dl.readonly is (kind == "bytes")
    x = x.reshape(expected.shape)

    @jax.jit
    def use(v):
        f = v.astype(jnp.float32)
        return (f @ f.T) * 0.5 + jnp.sin(f).sum(axis=1), jnp.cumsum(f, axis=1)[:, -1]

    def reference(v):
        f = v.astype(np.float32)
        return (f @ f.T) * np.float32(0.5) + np.sin(f).sum(axis=1), np.cumsum(f, axis=1)[:, -1]

    for got, want in zip(use(x), reference(expected), strict=True):
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=1e-3)
    del provider, dl
    gc.collect()
    churn = [np.full(expected.shape, 0xAB, expected.dtype) for _ in range(64)]
    for got, want in zip(use(x), reference(expected), strict=True):
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=1e-3)
    del churn
    if kind == "bytes":
        assert bytes(range(256)) * 3 == bytes(np.asarray(x).ravel())


# -- TensorFlow kernels ----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_tensorflow_kernels_on_shared_data(kind):
    """TensorFlow kernels (matmul, reduce, elementwise) on writable data bridged without a copy
    give NumPy's results; the TensorFlow tensor is the provider's memory."""
    np = lib("numpy")
    tf = lib("tensorflow")
    if kind == "numpy":
        provider = _aligned(np, (3, 4), np.float32)
        address, expected = provider.ctypes.data, provider.copy()
    else:
        torch = lib("torch")
        provider = torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.25
        address, expected = provider.data_ptr(), provider.numpy().copy()
    dl = asdlpack(provider)
    assert not dl.readonly
    t = tf.experimental.dlpack.from_dlpack(dl.__dlpack__())   # legacy: shared, it is writable
    assert todict(tf.experimental.dlpack.to_dlpack(t))["data"] == address
    np.testing.assert_allclose(tf.matmul(t, t, transpose_b=True).numpy(), expected @ expected.T,
                               rtol=1e-6)
    np.testing.assert_allclose(tf.reduce_sum(t, axis=0).numpy(), expected.sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose((tf.exp(t) + 1).numpy(), np.exp(expected) + 1, rtol=1e-6)
    del provider, dl
    gc.collect()
    np.testing.assert_allclose(tf.reduce_max(t).numpy(), expected.max())


# TensorFlow aborts the process (tensor.cc: Check failed: IsAligned()) on a misaligned tensor,
# so the kernel runs in a child: a misaligned copy fails this test instead of the run.
_TF_PRIVATE_COPY = """
import numpy as np, tensorflow as tf
from dlpack import asdlpack, todict
ro = np.arange(4 * 6, dtype=np.float32).reshape(4, 6)
ro.flags.writeable = False
raw = bytes([1, 2, 3, 4]) * 64
for source, expected in [(raw, np.frombuffer(raw, np.uint8).copy()), (ro, ro)]:
    for _ in range(20):
        dl = asdlpack(source)
        assert dl.readonly
        cap = dl.__dlpack__()                    # a legacy consumer: a private copy (spec §4)
        d = todict(cap)
        assert d["version"] is None and d["data"] != dl.data_ptr, "read-only memory was shared"
        assert d["data"] % 256 == 0, f"the copy starts at {d['data']:#x}, not 256-byte aligned"
        t = tf.experimental.dlpack.from_dlpack(cap)
        got = (tf.cast(t, tf.float32) * 2 + 1).numpy()
        np.testing.assert_array_equal(got, np.asarray(expected, np.float32) * 2 + 1)
        np.testing.assert_array_equal(tf.reduce_sum(tf.cast(t, tf.float64)).numpy(),
                                      np.asarray(expected, np.float64).sum())
print("ok")
"""


def test_tensorflow_kernel_on_legacy_private_copy():
    """Read-only data handed to TensorFlow (a legacy consumer) is a private, aligned copy that
    TensorFlow kernels compute on correctly, never the read-only memory itself."""
    lib("numpy")
    lib("tensorflow")
    run_clean(_TF_PRIVATE_COPY)


# -- NumPy reading after GC pressure ---------------------------------------------------------------

def _provider(kind):
    """(provider, its values as a list, read-only?) with no other reference kept anywhere."""
    values = [(i * 37) % 251 for i in range(4096)]
    if kind == "bytes":
        return bytes(values), values, True
    if kind == "bytearray":
        return bytearray(values), values, False
    if kind == "array":
        return array.array("B", values), values, False
    if kind == "mmap":
        m = mmap.mmap(-1, len(values))
        m.write(bytes(values))
        return m, values, False
    if kind == "ctypes":
        return (ctypes.c_uint8 * len(values))(*values), values, False
    np = lib("numpy")
    if kind == "numpy-strided":
        return np.array(values, np.uint8).repeat(2)[::2], values, False
    if kind == "torch":
        torch = lib("torch")
        return torch.tensor(values, dtype=torch.uint8), values, False
    if kind == "jax":
        jnp = lib("jax.numpy")
        return jnp.asarray(np.array(values, np.uint8)), values, True
    if kind == "tensorflow":
        tf = lib("tensorflow")
        return tf.constant(values, dtype=tf.uint8), values, True
    raise ValueError(kind)


def _pressure(np, nbytes):
    """Free what can be freed, then allocate blocks of the same size (and some) in every
    allocator the providers use, so freed memory is reused with other bytes."""
    gc.collect()
    keep = [np.full(nbytes, 0xEE, np.uint8) for _ in range(32)]
    keep += [bytes([0xDD]) * nbytes for _ in range(32)]
    keep += [bytearray(b"\xcc" * nbytes) for _ in range(32)]
    for name, make in [("torch", lambda m: m.full((nbytes,), 0xBB, dtype=m.uint8)),
                       ("jax.numpy", lambda m: m.full((nbytes,), 0xAA, dtype=m.uint8)),
                       ("tensorflow", lambda m: m.fill([nbytes], m.constant(0x99, m.uint8)))]:
        mod = sys.modules.get(name)             # the allocators of libraries already loaded
        if mod is not None:
            keep += [make(mod) for _ in range(16)]
    gc.collect()
    return keep


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "array", "mmap", "ctypes",
                                  "numpy-strided", "torch", "jax", "tensorflow"])
def test_numpy_reads_after_gc_pressure(kind):
    """NumPy's array of a bridged provider keeps the provider's memory: with the provider and
    the DLPackObject dropped, gc run and the freed sizes reallocated, the values, address and
    read-only flag are the provider's."""
    np = lib("numpy")
    provider, values, readonly = _provider(kind)
    dl = asdlpack(provider)
    address = dl.data_ptr
    a = np.from_dlpack(dl)
    assert a.ctypes.data == address, "copied"
    assert a.flags.writeable is not readonly and dl.readonly is readonly
    del provider, dl
    churn = _pressure(np, len(values))
    assert a.ctypes.data == address and a.flags.writeable is not readonly
    assert a.tolist() == values
    del churn
    total = int(a.astype(np.int64).sum())          # a computation that reads every element
    assert total == sum(values)


_SCALAR_AFTER_GC = """
import gc, numpy as np
from dlpack import asdlpack
for i in range(200):
    a = np.from_dlpack(asdlpack(np.float64(i + 0.5)))
    gc.collect()
    junk = [np.full(64, -1.0) for _ in range(50)]
    assert a.tolist() == i + 0.5, (i, a.tolist())
print("ok")
"""


def test_numpy_scalar_reads_after_gc_pressure():
    """A NumPy scalar's interface points into a temporary only its dict keeps alive: the
    bridged view must keep it (in a child: a dangling view may read anything)."""
    lib("numpy")
    run_clean(_SCALAR_AFTER_GC)


# -- torch in-place ops seen through the provider --------------------------------------------------

def _writable(kind, np):
    """(provider, a NumPy view of its memory that the test reads, element dtype)."""
    if kind == "numpy":
        a = _aligned(np, (4, 5), np.float32)
        return a, a
    if kind == "numpy-transposed":
        a = _aligned(np, (5, 4), np.float64).T
        return a, a
    if kind == "bytearray":
        b = bytearray(range(40))
        return b, np.frombuffer(b, np.uint8)
    if kind == "array":
        a = array.array("f", range(20))
        return a, np.frombuffer(a, np.float32)
    if kind == "mmap":
        m = mmap.mmap(-1, 32)
        m.write(bytes(range(32)))
        return m, np.frombuffer(m, np.uint8)
    c = (ctypes.c_int32 * 3 * 4)()
    view = np.ctypeslib.as_array(c)
    view[...] = np.arange(12).reshape(4, 3)
    return c, view


@pytest.mark.parametrize("kind", ["numpy", "numpy-transposed", "bytearray", "array", "mmap",
                                  "ctypes"])
def test_torch_inplace_ops_visible_through_provider(kind):
    """torch in-place ops on a tensor bridged from a writable provider change the provider's
    own memory (the same address), and the provider's writes are seen by torch."""
    np = lib("numpy")
    torch = lib("torch")
    provider, view = _writable(kind, np)
    expected = view.astype(np.float64)
    dl = asdlpack(provider)
    assert not dl.readonly
    t = torch.from_dlpack(dl)
    assert t.data_ptr() == view.ctypes.data and tuple(t.shape) == view.shape
    t.mul_(3)
    t.add_(2)
    t[::2].zero_()
    t.clamp_(max=40)
    expected = expected * 3 + 2
    expected[::2] = 0
    expected = np.minimum(expected, 40)
    np.testing.assert_array_equal(view, expected.astype(view.dtype))
    torch.maximum(t, torch.ones_like(t), out=t)
    expected = np.maximum(expected, 1)
    np.testing.assert_array_equal(view, expected.astype(view.dtype))
    view.flat[-1] = 7                           # the provider writes, torch reads
    expected.flat[-1] = 7
    assert t.flatten()[-1].item() == 7
    del dl, provider
    gc.collect()
    t.sub_(1)
    np.testing.assert_array_equal(view, (expected - 1).astype(view.dtype))


def test_torch_inplace_ops_visible_to_numpy_consumer():
    """The reverse: NumPy's array of a bridged torch tensor sees torch's in-place ops."""
    np = lib("numpy")
    torch = lib("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    a = np.from_dlpack(asdlpack(t))
    assert a.ctypes.data == t.data_ptr() and a.flags.writeable
    t.mul_(2).add_(1)
    t[:, 1].neg_()
    want = np.arange(12, dtype=np.float32).reshape(3, 4) * 2 + 1
    want[:, 1] *= -1
    np.testing.assert_array_equal(a, want)
