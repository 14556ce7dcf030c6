"""Test helpers: the real consumers, and how each reports a result's data address."""

from __future__ import annotations

import ctypes
import os
import resource
import shutil
import subprocess
import sys

import pytest

from dlpack import asdlpack, todict


def lib(name: str):
    """Import an optional library or skip the test, saying which."""
    return pytest.importorskip(name, reason=f"{name} is not installed")


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
