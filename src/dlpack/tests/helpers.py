"""Test helpers: the real consumers and how each reports a result's data address, and the test
doubles every module shares (interface and struct providers, the CUDA array interface, raw
capsules)."""

from __future__ import annotations

import ctypes
import gc
import os
import resource
import shutil
import subprocess
import sys

import pytest

import dlpack._capsule_api as _capi
from dlpack import asdlpack, todict


def lib(name: str):
    """Import an optional library or skip the test, saying which."""
    return pytest.importorskip(name, reason=f"{name} is not installed")


def collected(ref) -> bool:
    """Whether the object a weak reference names is gone, after a full collection."""
    gc.collect()
    return ref() is None


def rss_kib() -> int:
    """Resident memory now, in KiB (Linux /proc; falls back to the peak)."""
    try:
        with open(f"/proc/{os.getpid()}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def c_library(source: str, out_dir) -> tuple[ctypes.CDLL, str]:
    """Compile one of the suite's C sources (tests/*.c) into a shared library and load it;
    skips without a C compiler."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the test library")
    out = os.path.join(str(out_dir), os.path.splitext(source)[0] + ".so")
    path = os.path.join(os.path.dirname(__file__), source)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", out, path], check=True)
    return ctypes.CDLL(out), out


def run_clean(code: str) -> None:
    """Run code in a fresh interpreter; it must exit 0 and print no traceback at all."""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "Exception ignored" not in run.stderr, run.stderr


def consume(name: str, dl):
    """Hand a DLPackObject to a real consumer; returns (result, data address, writable?)."""
    if name == "numpy":
        np = lib("numpy")
        a = np.from_dlpack(dl)
        return a, a.__array_interface__["data"][0], a.flags.writeable
    if name == "torch":
        torch = lib("torch")
        t = torch.from_dlpack(dl)
        return t, t.data_ptr(), None
    if name == "jax":
        jnp = lib("jax.numpy")
        x = jnp.from_dlpack(dl)
        return x, x.unsafe_buffer_pointer(), None
    if name == "tensorflow":
        tf = lib("tensorflow")
        t = tf.experimental.dlpack.from_dlpack(dl.__dlpack__())
        return t, todict(tf.experimental.dlpack.to_dlpack(t))["data"], None
    if name == "array_api_strict":
        xp = lib("array_api_strict")
        x = xp.from_dlpack(dl)
        return x, x._array.__array_interface__["data"][0], x._array.flags.writeable
    raise ValueError(name)


CONSUMERS = ["numpy", "torch", "jax", "tensorflow", "array_api_strict"]


def values(x):
    """A consumer's result as a NumPy array, for comparing values."""
    np = lib("numpy")
    if hasattr(x, "numpy"):
        return np.asarray(x.numpy())
    if hasattr(x, "_array"):
        return np.asarray(x._array)
    return np.asarray(x)


def check_exchange(name: str, provider, expected, *, readonly: bool | None = None):
    """Exchange provider through asdlpack with a consumer: values, address, read-only-ness."""
    np = lib("numpy")
    dl = asdlpack(provider, allow_legacy_readonly=name in ("jax", "tensorflow"))
    result, address, writable = consume(name, dl)
    np.testing.assert_array_equal(values(result), expected)
    # JAX copies CPU data that is not 64-byte aligned (its own rule, see test_jax_alignment).
    if dl.size and not (name == "jax" and dl.data_ptr % 64):
        assert address == dl.data_ptr, f"{name} copied the data"
    if readonly is not None and writable is not None:
        assert writable is (not readonly)
    return result


# -- shared test doubles ----------------------------------------------------------------------

NOWHERE = 0x7000_0000_0000      # an address the (fake) CUDA driver does not know
_KEEP: list = []                # names and structs that capsules made here point at


def capsule(address: int, name: bytes | None):
    """A raw PyCapsule over address, without destructor (its name lives for good)."""
    if name is not None:
        name = ctypes.create_string_buffer(name)
        _KEEP.append(name)
    return _capi.New(address, name, _capi.Destructor())


class Iface:
    """Speaks only __array_interface__ (and keeps what it points into alive)."""

    def __init__(self, ai, keep=None):
        self.__array_interface__ = ai
        self.keep = keep


class Struct:
    """Speaks only __array_struct__, borrowed from a NumPy array."""

    def __init__(self, a):
        self.a = a

    @property
    def __array_struct__(self):
        return self.a.__array_struct__


class CAI:
    """Speaks only __cuda_array_interface__ (v3 with its stream, or v2) over device memory."""

    def __init__(self, ptr, stream=None, shape=(2, 3), strides=None, typestr="<f4",
                 readonly=False, version=3, **extra):
        self.__cuda_array_interface__ = dict(
            shape=shape, typestr=typestr, data=(ptr, readonly), strides=strides,
            version=version, **({"stream": stream} if version >= 3 else {}), **extra)


def cuda_floats(fake, values=range(6), device=1, stream=7):
    """Device memory on GPU device holding float32 values, and the stream (made if new) its
    producer's work is on."""
    if stream not in (None, 1, 2) and stream not in fake.streams:
        fake.stream(stream, device=device)
    return fake.device_array((ctypes.c_float * len(values))(*values), device=device)


def cuda_array(fake, values, shape, strides=None, stream=7):
    """A CAI object over device memory of GPU 1, whose producer's work is on stream."""
    ptr = cuda_floats(fake, values, stream=stream)
    return CAI(ptr, stream=stream, shape=shape, strides=strides), ptr
