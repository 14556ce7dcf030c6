"""Deliberately broken DLPack producers, made with ctypes, for the conformance checker's tests.

``Producer(**faults)`` exports six float32 values held in a ``bytes`` object. Each fault breaks
one rule the checker must flag; with no faults the producer is correct. Structs and callbacks
are kept alive for the life of the process (a test helper may leak; it must never crash).

The factories after ``Producer`` (listed in ``EXPECTED`` with the rule each must fail) misbehave
worse: no producer at all, ``__dlpack__`` raising or returning a ``str``, wild pointers, one
capsule or tensor handed out twice, NULL exchange-API entry points. Some crash a consumer that
trusts them; ``python -m dlpack check`` must grade them all without crashing.
"""

from __future__ import annotations

import ctypes
import struct
import time

import dlpack.ctypes as dlc

_New = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))
_GetName = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_GetName", ctypes.pythonapi))
_Destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_Call = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_FREED = 0x10                   # where "freed" fields point: unmapped, so reading them faults
_KEEP: list = []                # structs, shapes and callbacks that C code may still reach
DATA = struct.pack("6f", 0, 1, 2, 3, 4, 5)


class Producer:
    """A CPU float32 producer of shape (6,) with the chosen faults.

    Faults: ``deleter_twice`` (an unconsumed capsule's destructor calls the deleter twice),
    ``ignores_rename`` (the destructor frees even after a consumer renamed the capsule),
    ``already_used`` (capsules are handed out named ``used_…``), ``versioned_as_legacy``
    (a DLManagedTensorVersioned under the name ``dltensor``), ``no_readonly`` (the memory is
    read-only, the flag is missing), ``null_strides`` (NULL strides in a 1.3 capsule),
    ``refuses`` (``__dlpack__`` raises BufferError; pair with ``BrokenExchange``), ``frees``
    (the deleter frees the tensor: a later reader of its fields faults), ``shares_on_copy``
    (``copy=True`` exports the same memory).
    """

    def __init__(self, **faults: bool) -> None:
        self.faults = faults
        self.data = DATA
        self.deleter_calls = 0

    @property
    def address(self) -> int:
        return ctypes.cast(ctypes.c_char_p(self.data), ctypes.c_void_p).value

    @property
    def __array_interface__(self) -> dict:
        """The same memory, read-only: independent evidence for the READ_ONLY rule."""
        return {"version": 3, "shape": (6,), "typestr": "<f4", "data": (self.address, True)}

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if self.faults.get("refuses"):
            raise BufferError("this producer refuses every export")
        if dl_device not in (None, (1, 0)):
            raise BufferError("CPU only")
        if copy and not self.faults.get("shares_on_copy"):
            raise BufferError("no copies")
        versioned = max_version is not None and max_version[0] >= 1
        return self._capsule(versioned)

    def managed(self, versioned: bool) -> int:
        """Address of a new managed tensor whose deleter counts its calls."""
        shape = (ctypes.c_int64 * 1)(6)
        strides = (ctypes.c_int64 * 1)(1)
        struct_type = dlc.DLManagedTensorVersioned if versioned or self.faults.get(
            "versioned_as_legacy") else dlc.DLManagedTensor
        m = struct_type()
        t = m.dl_tensor
        t.data = self.address
        t.device = dlc.DLDevice(1, 0)
        t.ndim = 1
        t.dtype = dlc.DLDataType(2, 32, 1)
        t.shape = shape
        if not (versioned and self.faults.get("null_strides")):
            t.strides = strides
        if struct_type is dlc.DLManagedTensorVersioned:
            m.version = dlc.DLPackVersion(1, 3)
            if not self.faults.get("no_readonly"):
                m.flags = dlc.FLAG_BITMASK_READ_ONLY

        def deleter(address):
            self.deleter_calls += 1
            if self.faults.get("frees"):
                free(address, struct_type)

        callback = _Call(deleter)
        m.deleter = ctypes.cast(callback, type(m.deleter))
        _KEEP.extend([shape, strides, m, callback])
        return ctypes.addressof(m)

    def _capsule(self, versioned: bool):
        name = b"dltensor_versioned" if versioned else b"dltensor"
        twice, ignores = self.faults.get("deleter_twice"), self.faults.get("ignores_rename")

        def destructor(capsule_address):
            if _GetName(capsule_address) == name or ignores:
                call = _Call(ctypes.cast(kind.from_address(address).deleter,
                                         ctypes.c_void_p).value)
                for _ in range(2 if twice else 1):
                    call(address)

        kind = dlc.DLManagedTensorVersioned if versioned or self.faults.get(
            "versioned_as_legacy") else dlc.DLManagedTensor
        address = self.managed(versioned)
        callback = _Destructor(destructor)
        _KEEP.append(callback)
        given = b"used_" + name if self.faults.get("already_used") else name
        _KEEP.append(given)
        return _New(address, given, ctypes.cast(callback, ctypes.c_void_p).value)


def _exchange_from_py_object(obj, out) -> int:
    out[0] = ctypes.cast(Producer().managed(True), ctypes.POINTER(dlc.DLManagedTensorVersioned))
    return 0


def _fails(*args) -> int:
    return -1


def _exchange_capsule():
    """A DLPackExchangeAPI whose from-object function exports anything, refusals included
    (the other entry points fail every call)."""
    api = dlc.DLPackExchangeAPI()
    api.header.version = dlc.DLPackVersion(1, 3)
    api.managed_tensor_from_py_object_no_sync = type(api.managed_tensor_from_py_object_no_sync)(
        _exchange_from_py_object)
    for field in ("managed_tensor_allocator", "managed_tensor_to_py_object_no_sync",
                  "current_work_stream"):
        function = type(getattr(api, field))(_fails)
        setattr(api, field, function)
        _KEEP.append(function)
    _KEEP.append(api)
    return _New(ctypes.addressof(api), b"dlpack_exchange_api", None)


class BrokenExchange(Producer):
    """``__dlpack__`` refuses; the exchange API (on the type) exports anyway."""

    __dlpack_c_exchange_api__ = _exchange_capsule()

    def __init__(self) -> None:
        super().__init__(refuses=True)


def free(address: int, struct_type) -> None:
    """What freeing a managed tensor does to a later reader: its pointers lead nowhere."""
    m = struct_type.from_address(address)
    m.dl_tensor.shape = ctypes.cast(_FREED, type(m.dl_tensor.shape))
    m.dl_tensor.strides = ctypes.cast(_FREED, type(m.dl_tensor.strides))
    m.deleter = ctypes.cast(_FREED, type(m.deleter))


def returns_none() -> None:
    """A factory that returns nothing."""


def returns_42() -> int:
    """A factory that returns no producer at all."""
    return 42


class AlwaysRaises(Producer):
    """``__dlpack__`` raises on every request."""

    def __dlpack__(self, **kwargs):
        raise RuntimeError("export is not implemented")


class ReturnsStr(Producer):
    """``__dlpack__`` returns a ``str`` instead of a capsule."""

    def __dlpack__(self, **kwargs):
        return "dltensor"


class BadDevice(Producer):
    """``__dlpack_device__`` names the device as a string."""

    def __dlpack_device__(self):
        return ("cpu", 0)


class ReadOnlyBytes(Producer):
    """Exports read-only ``bytes`` without READ_ONLY; its ``__array_interface__`` hands out the
    ``bytes`` object itself as ``data`` (a buffer object, read-only)."""

    def __init__(self) -> None:
        super().__init__(no_readonly=True)

    @property
    def __array_interface__(self) -> dict:
        return {"version": 3, "shape": (6,), "typestr": "<f4", "data": self.data}


class WildPointer(Producer):
    """Capsules whose pointer leads to unmapped memory."""

    def __dlpack__(self, *, max_version=None, **kwargs):
        name = b"dltensor_versioned" if max_version and max_version[0] >= 1 else b"dltensor"
        _KEEP.append(name)
        return _New(_FREED, name, None)


class SameCapsule(Producer):
    """Hands out one capsule to every caller; the first consumer's deleter call frees it."""

    def __init__(self) -> None:
        super().__init__(frees=True)
        self.capsules: dict[bool, object] = {}

    def _capsule(self, versioned: bool):
        if versioned not in self.capsules:
            self.capsules[versioned] = super()._capsule(versioned)
        return self.capsules[versioned]


class SameStruct(Producer):
    """A new capsule for every request, each holding the one managed tensor: every capsule's
    destructor frees it (the second one through a freed deleter field)."""

    def __init__(self) -> None:
        super().__init__(frees=True)
        self.structs: dict[bool, int] = {}

    def managed(self, versioned: bool) -> int:
        if versioned not in self.structs:
            self.structs[versioned] = super().managed(versioned)
        return self.structs[versioned]


def _null_exchange_capsule():
    """A DLPackExchangeAPI of version 1.3 whose entry points are all NULL."""
    api = dlc.DLPackExchangeAPI()
    api.header.version = dlc.DLPackVersion(1, 3)
    _KEEP.append(api)
    return _New(ctypes.addressof(api), b"dlpack_exchange_api", None)


class NullExchange(Producer):
    """A correct ``__dlpack__``; an exchange API on the type with NULL entry points."""

    __dlpack_c_exchange_api__ = _null_exchange_capsule()


class WildDeleter(Producer):
    """Managed tensors whose deleter field points at unmapped memory: dropping a capsule (its
    destructor calls the deleter) crashes."""

    def managed(self, versioned: bool) -> int:
        address = super().managed(versioned)
        kind = dlc.DLManagedTensorVersioned if versioned else dlc.DLManagedTensor
        m = kind.from_address(address)
        m.deleter = ctypes.cast(_FREED, type(m.deleter))
        return address


def crashing_factory() -> Producer:
    """A factory that crashes the process before it returns."""
    ctypes.string_at(_FREED, 1)
    return Producer()


def scribbling_factory() -> Producer:
    """A factory that writes a line that is not JSON into every pipe the process holds (the
    checker's result channel among them) before it returns."""
    import os
    import stat

    for fd in range(3, 256):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, b"not a checker message\n")
        except OSError:
            pass
    return Producer()


class Hangs(Producer):
    """Correct, except that ``copy=True`` never returns."""

    def __dlpack__(self, *, copy=None, **kwargs):
        if copy:
            time.sleep(3600)
        return super().__dlpack__(**kwargs)


class CrashOnCopy(Producer):
    """Correct, except that ``copy=True`` crashes the process (a read of unmapped memory)."""

    def __dlpack__(self, *, copy=None, **kwargs):
        if copy:
            ctypes.string_at(_FREED, 1)
        return super().__dlpack__(**kwargs)


class ShoutsOnCopy(Producer):
    """Correct, except that ``copy=True`` writes a terminal escape and a 100 000-character line
    to stderr and ends the process (exit status 3)."""

    def __dlpack__(self, *, copy=None, **kwargs):
        if copy:
            import os
            import sys

            sys.stderr.write("\x1b[2J" + "x" * 100_000 + "\n")
            sys.stderr.flush()
            os._exit(3)
        return super().__dlpack__(**kwargs)


def forks_a_daemon() -> Producer:
    """A correct producer whose factory forks without exec (a fork pool, a daemon): the fork
    keeps every pipe of the process open, the checker's result channel among them, and outlives
    the checker's worker by $DLPACK_TEST_DAEMON_SECONDS; its pid goes to the file
    $DLPACK_TEST_DAEMON_PID, and that file's name with ".done" is made when it ends."""
    import os

    path = os.environ.get("DLPACK_TEST_DAEMON_PID")
    pid = os.fork()
    if pid == 0:
        time.sleep(float(os.environ.get("DLPACK_TEST_DAEMON_SECONDS", "30")))
        if path:
            open(path + ".done", "w").close()
        os._exit(0)
    if path:
        with open(path, "w") as f:
            f.write(str(pid))
    return Producer()


class ForksInDlpack(Producer):
    """Correct, except that its first ``__dlpack__`` forks without exec: two processes go on
    from there, each believing it is the checker's worker."""

    forked = False

    def __dlpack__(self, **kwargs):
        import os

        if not ForksInDlpack.forked:
            ForksInDlpack.forked = True
            os.fork()
        return super().__dlpack__(**kwargs)


# factory -> the rule ``python -m dlpack check`` must fail it by (the others pass or are n/a)
EXPECTED = {
    "returns_none": "basic-export",
    "returns_42": "basic-export",
    "AlwaysRaises": "basic-export",
    "ReturnsStr": "basic-export",
    "WildPointer": "basic-export",
    "SameCapsule": "basic-export",
    "SameStruct": "basic-export",
    "NullExchange": "exchange-api",
    "BadDevice": "device-copy",
    "ReadOnlyBytes": "flags",
    "CrashOnCopy": "device-copy",
    "WildDeleter": "basic-export",
    "crashing_factory": "factory",
}
