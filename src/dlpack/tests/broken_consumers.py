"""Deliberately broken DLPack consumers, made with ctypes, for ``check --consumer``'s tests.

``Consumer(**faults)`` reads a capsule with ctypes structs and returns an ``Array`` viewing the
producer's memory (float32 on the CPU only; it refuses anything else with ``BufferError``).
With no faults it is correct; each fault breaks the one rule ``EXPECTED`` names, and the
checker must grade each without crashing (``null_strides_segfault`` kills its process).
"""

from __future__ import annotations

import ctypes
import math
import weakref
from typing import Any

import dlpack._capsule_api as _capi
import dlpack.ctypes as dlc

_Call = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_USED = {b"dltensor_versioned": b"used_dltensor_versioned", b"dltensor": b"used_dltensor"}
READ_ONLY = 1


class Array:
    """A float32 view of foreign memory; ``release`` runs when it is gone."""

    def __init__(self, first: int, shape: list[int], strides: list[int], readonly: bool,
                 release: Any) -> None:
        self.first, self.strides, self.readonly = first, strides, readonly
        self.__array_interface__ = {"version": 3, "shape": tuple(shape), "typestr": "<f4",
                                    "data": (first, readonly),
                                    "strides": tuple(4 * s for s in strides)}
        if release is not None:
            weakref.finalize(self, release)

    def __setitem__(self, index: tuple[int, ...], value: float) -> None:
        if self.readonly:
            raise ValueError("assignment destination is read-only")
        at = self.first + 4 * sum(i * s for i, s in zip(index, self.strides, strict=True))
        ctypes.c_float.from_address(at).value = value


class _Nameless(type):
    """A metaclass whose classes' ``__name__`` raises."""

    @property
    def __name__(cls):
        raise RuntimeError("no name")


class HostileRefusal(BufferError, metaclass=_Nameless):
    """A refusal whose class has no readable name and whose message is 4 MB."""

    def __str__(self) -> str:
        return "no" * (2 << 20)


def _forge(line: bytes) -> None:
    """Write ``line`` into every pipe this process holds (a checker's result channel among
    them), as code that went looking for it would."""
    import os
    import stat

    for fd in range(3, 256):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, line)
        except OSError:
            pass


FORGED = b'{"result": {"rule": "read-only", "status": "pass", "evidence": "forged"}, ' \
    b'"state": {"zero_copy": true, "imports": true}}\n'


class Consumer:
    """A ctypes DLPack consumer. Faults: ``never_deletes``, ``deletes_early`` (calls the
    deleter before returning its view), ``ignores_readonly``, ``ignores_byte_offset``,
    ``null_strides_segfault`` (reads strides[i] through a NULL pointer), ``forges_a_pass``
    (writes a well-formed "read-only passed" result into its pipes when given READ_ONLY
    data), ``hostile_refusals`` (every refusal a ``HostileRefusal``, a ``byte_offset`` one
    included)."""

    def __init__(self, **faults: bool) -> None:
        self.faults = faults

    def __call__(self, producer: Any) -> Array:
        if not self.faults.get("hostile_refusals"):
            return self._import(producer)
        try:
            return self._import(producer)
        except BufferError:
            raise HostileRefusal() from None

    def _import(self, producer: Any) -> Array:
        try:
            capsule = producer.__dlpack__(max_version=(1, 3))
        except TypeError:
            capsule = producer.__dlpack__()
        name = _capi.GetName(capsule)
        if name not in _USED:
            raise BufferError(f"capsule named {name!r}")
        address = _capi.GetPointer(capsule, name)
        versioned = name == b"dltensor_versioned"
        m = (dlc.DLManagedTensorVersioned if versioned else dlc.DLManagedTensor).from_address(
            address)
        t = m.dl_tensor
        if (t.device.device_type, t.device.device_id) != (1, 0):
            raise BufferError("CPU tensors only")
        if (t.dtype.code, t.dtype.bits, t.dtype.lanes) != (2, 32, 1):
            raise BufferError("float32 only")
        if not 0 <= t.ndim <= 64:
            raise BufferError(f"ndim {t.ndim}")
        shape = [t.shape[i] for i in range(t.ndim)]
        if any(n < 0 for n in shape) or math.prod(shape) * 4 >= 1 << 62:
            raise BufferError(f"shape {shape}")
        if math.prod(shape) and not t.data:
            raise BufferError("NULL data")
        if t.byte_offset and self.faults.get("hostile_refusals"):
            raise BufferError("byte_offset")
        strides = self._strides(t, shape)
        first = (t.data or 0) + (0 if self.faults.get("ignores_byte_offset") else t.byte_offset)
        readonly = versioned and bool(m.flags & READ_ONLY) and not self.faults.get(
            "ignores_readonly")
        if versioned and m.flags & READ_ONLY and self.faults.get("forges_a_pass"):
            _forge(FORGED)
        _capi.SetName(capsule, _USED[name])
        deleter = ctypes.cast(m.deleter, ctypes.c_void_p).value

        def release() -> None:
            _Call(deleter)(address)

        if self.faults.get("deletes_early"):
            release()
        keep = not (self.faults.get("never_deletes") or self.faults.get("deletes_early"))
        return Array(first, shape, strides, readonly, release if keep else None)

    def _strides(self, t: Any, shape: list[int]) -> list[int]:
        where = ctypes.cast(t.strides, ctypes.c_void_p).value or 0
        if where or self.faults.get("null_strides_segfault"):
            return [ctypes.c_int64.from_address(where + 8 * i).value for i in range(t.ndim)]
        strides, step = [0] * t.ndim, 1
        for i in reversed(range(t.ndim)):
            strides[i], step = step, step * shape[i]
        return strides


correct = Consumer()


def forks_on_each_call(producer: Any) -> Array:
    """Correct, but forks without exec on every call and returns in both copies (a consumer
    that starts a worker process lazily): the checker still reports each rule once."""
    import os

    child = os.fork()
    if child:
        os.waitpid(child, 0)
    return correct(producer)


def returns_the_producer(producer: Any) -> Any:
    """Imports nothing: hands back what it was given (which the checker could read itself)."""
    return producer


never_deletes = Consumer(never_deletes=True)
deletes_early = Consumer(deletes_early=True)
ignores_readonly = Consumer(ignores_readonly=True)
ignores_byte_offset = Consumer(ignores_byte_offset=True)
null_strides_segfault = Consumer(null_strides_segfault=True)
forges_a_pass = Consumer(ignores_readonly=True, forges_a_pass=True)
hostile_refusals = Consumer(hostile_refusals=True)

EXPECTED = {
    "never_deletes": "deleter-once",
    "deletes_early": "deleter-once",
    "ignores_readonly": "read-only",
    "ignores_byte_offset": "byte-offset",
    "null_strides_segfault": "strides",
    "forges_a_pass": "read-only",           # the forged line fails the rule that was running
    "hostile_refusals": "byte-offset",      # its other refusals pass, as BufferError's do
    "returns_the_producer": "basic-import",     # and the other rules are n/a
}
