"""The DLPack C ABI as ``ctypes`` structures, for C libraries bound with ctypes.

``asdlpack(ptr)`` takes ownership of a ``POINTER(DLManagedTensor[Versioned])``;
``to_pointer(obj)`` gives a C function a managed tensor whose deleter it must call once.
"""

from __future__ import annotations

import ctypes
import warnings
from typing import Any

import dlpack._capsule_api as _capi
from dlpack._core import DLPackObject, _export_address, asdlpack
from dlpack._deprecated import missing
from dlpack._types import (  # re-exported for C bindings (__all__)
    DLPACK_VERSION,
    FLAG_BITMASK_IS_COPIED,
    FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
    FLAG_BITMASK_READ_ONLY,
    DLDataTypeCode,
    DLDeviceType,
)

__all__ = [
    "DLPACK_VERSION",
    "FLAG_BITMASK_IS_COPIED",
    "FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED",
    "FLAG_BITMASK_READ_ONLY",
    "DLDataType",
    "DLDataTypeCode",
    "DLDevice",
    "DLDeviceType",
    "DLManagedTensor",
    "DLManagedTensorDeleter",
    "DLManagedTensorVersioned",
    "DLManagedTensorVersionedDeleter",
    "DLPackExchangeAPI",
    "DLPackExchangeAPIHeader",
    "DLPackSetError",
    "DLPackVersion",
    "DLTensor",
    "exchange_api",
    "from_pointer",
    "to_pointer",
]


class _Structure(ctypes.Structure):
    """A DLPack structure: pydlpack 0.2.1's ``todict()`` method of its ``DLStructure`` base is
    gone and says where to (docs/migration.md)."""

    def __getattr__(self, name: str) -> Any:
        raise missing("DLStructure", name, self)


class DLPackVersion(_Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLDevice(_Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(_Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(_Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(_Structure):
    pass


class DLManagedTensorVersioned(_Structure):
    pass


DLManagedTensorDeleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensorVersionedDeleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))

DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", DLManagedTensorDeleter),
]
DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", DLManagedTensorVersionedDeleter),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor),
]


DLPackSetError = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)
_P_MTV = ctypes.POINTER(DLManagedTensorVersioned)


class DLPackExchangeAPIHeader(ctypes.Structure):
    """The API's version and the previous API in a chain."""

    _fields_ = [("version", DLPackVersion), ("prev_api", ctypes.c_void_p)]


class DLPackExchangeAPI(ctypes.Structure):
    """DLPack 1.3's C exchange API; the functions that take Python objects need the GIL, so
    they are PYFUNCTYPEs here."""

    _fields_ = [
        ("header", DLPackExchangeAPIHeader),
        ("managed_tensor_allocator", ctypes.CFUNCTYPE(
            ctypes.c_int, ctypes.POINTER(DLTensor), ctypes.POINTER(_P_MTV), ctypes.c_void_p,
            DLPackSetError)),
        ("managed_tensor_from_py_object_no_sync", ctypes.PYFUNCTYPE(
            ctypes.c_int, ctypes.py_object, ctypes.POINTER(_P_MTV))),
        ("managed_tensor_to_py_object_no_sync", ctypes.PYFUNCTYPE(
            ctypes.c_int, _P_MTV, ctypes.POINTER(ctypes.py_object))),
        ("dltensor_from_py_object_no_sync", ctypes.PYFUNCTYPE(
            ctypes.c_int, ctypes.py_object, ctypes.POINTER(DLTensor))),
        ("current_work_stream", ctypes.CFUNCTYPE(
            ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))),
    ]


def exchange_api(cls: type) -> DLPackExchangeAPI | None:
    """The ``DLPackExchangeAPI`` a type publishes as ``__dlpack_c_exchange_api__``, or None."""
    capsule = getattr(cls, "__dlpack_c_exchange_api__", None)
    if capsule is None or not _capi.IsValid(capsule, b"dlpack_exchange_api"):
        return None
    api = DLPackExchangeAPI.from_address(_capi.GetPointer(capsule, b"dlpack_exchange_api"))
    api._capsule = capsule          # the struct lives as long as its capsule
    return api

def to_pointer(obj: object, *, versioned: bool = True) -> ctypes._Pointer[Any]:
    """A new managed tensor viewing ``obj``, for a C function that takes ownership of it.

    The receiver must call its ``deleter`` exactly once; until then the data stays alive.
    Read-only data needs ``versioned=True`` (the flag travels) unless ``obj`` opted in.
    """
    kind = DLManagedTensorVersioned if versioned else DLManagedTensor
    return ctypes.cast(_export_address(asdlpack(obj), versioned), ctypes.POINTER(kind))


def from_pointer(ptr: ctypes._Pointer[Any], **kwargs: Any) -> DLPackObject:
    """Deprecated second spelling of ``asdlpack(ptr)`` (takes ownership and NULLs ``ptr``)."""
    warnings.warn("dlpack.ctypes.from_pointer(ptr) is deprecated: use dlpack.asdlpack(ptr), "
                  "which takes the same pointer and keywords", DeprecationWarning, stacklevel=2)
    return asdlpack(ptr, **kwargs)
