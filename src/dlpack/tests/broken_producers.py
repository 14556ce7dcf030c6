"""Deliberately broken DLPack producers, made with ctypes, for the conformance checker's tests.

``Producer(**faults)`` exports six float32 values held in a ``bytes`` object. Each fault breaks
one rule the checker must flag; with no faults the producer is correct. Structs and callbacks
are kept alive for the life of the process (a test helper may leak; it must never crash).
"""

from __future__ import annotations

import ctypes
import struct

import dlpack.ctypes as dlc

_New = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))
_GetName = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_GetName", ctypes.pythonapi))
_Destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_Call = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_KEEP: list = []                # structs, shapes and callbacks that C code may still reach
DATA = struct.pack("6f", 0, 1, 2, 3, 4, 5)


class Producer:
    """A CPU float32 producer of shape (6,) with the chosen faults.

    Faults: ``deleter_twice`` (an unconsumed capsule's destructor calls the deleter twice),
    ``ignores_rename`` (the destructor frees even after a consumer renamed the capsule),
    ``already_used`` (capsules are handed out named ``used_…``), ``versioned_as_legacy``
    (a DLManagedTensorVersioned under the name ``dltensor``), ``no_readonly`` (the memory is
    read-only, the flag is missing), ``null_strides`` (NULL strides in a 1.3 capsule),
    ``refuses`` (``__dlpack__`` raises BufferError; pair with ``BrokenExchange``).
    """

    def __init__(self, **faults: bool) -> None:
        self.faults = faults
        self.data = DATA
        self.deleter_calls = 0

    @property
    def __array_interface__(self) -> dict:
        """The same memory, read-only: independent evidence for the READ_ONLY rule."""
        address = ctypes.cast(ctypes.c_char_p(self.data), ctypes.c_void_p).value
        return {"version": 3, "shape": (6,), "typestr": "<f4", "data": (address, True)}

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if self.faults.get("refuses"):
            raise BufferError("this producer refuses every export")
        if dl_device not in (None, (1, 0)):
            raise BufferError("CPU only")
        if copy:
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
        t.data = self.__array_interface__["data"][0]
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

        def deleter(_address):
            self.deleter_calls += 1

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


def _exchange_capsule():
    """A DLPackExchangeAPI whose from-object function exports anything, refusals included."""
    api = dlc.DLPackExchangeAPI()
    api.header.version = dlc.DLPackVersion(1, 3)
    api.managed_tensor_from_py_object_no_sync = type(api.managed_tensor_from_py_object_no_sync)(
        _exchange_from_py_object)
    _KEEP.append(api)
    return _New(ctypes.addressof(api), b"dlpack_exchange_api", None)


class BrokenExchange(Producer):
    """``__dlpack__`` refuses; the exchange API (on the type) exports anyway."""

    __dlpack_c_exchange_api__ = _exchange_capsule()

    def __init__(self) -> None:
        super().__init__(refuses=True)
