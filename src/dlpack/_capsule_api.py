"""The PyCapsule C API through ctypes, prototyped once, on pydlpack's own handle.

``ctypes.pythonapi``'s function objects are shared with every other user of ctypes in the
process: setting their ``argtypes`` would change them under that user (and theirs under us).
pydlpack's Python modules, its tools and its tests take the prototypes from here.
"""

from __future__ import annotations

import ctypes
from typing import Any

_py = ctypes.PyDLL(ctypes.pythonapi._name, handle=ctypes.pythonapi._handle)
Destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _proto(name: str, restype: Any, *argtypes: Any) -> Any:
    f = _py[name]                       # a new function object each time (getattr caches)
    f.restype, f.argtypes = restype, list(argtypes)
    return f


_obj, _raw, _name = ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p
New = _proto("PyCapsule_New", _obj, _raw, _name, Destructor)
IsValid = _proto("PyCapsule_IsValid", ctypes.c_int, _obj, _name)
GetPointer = _proto("PyCapsule_GetPointer", _raw, _obj, _name)
SetPointer = _proto("PyCapsule_SetPointer", ctypes.c_int, _obj, _raw)
GetName = _proto("PyCapsule_GetName", _name, _obj)
SetName = _proto("PyCapsule_SetName", ctypes.c_int, _obj, _name)
GetContext = _proto("PyCapsule_GetContext", _raw, _obj)
SetContext = _proto("PyCapsule_SetContext", ctypes.c_int, _obj, _raw)
GetDestructor = _proto("PyCapsule_GetDestructor", Destructor, _obj)
SetDestructor = _proto("PyCapsule_SetDestructor", ctypes.c_int, _obj, Destructor)
# The same calls on a capsule known by its address only (0.2.1's Capsule keeps no reference).
RawIsValid = _proto("PyCapsule_IsValid", ctypes.c_int, _raw, _name)
RawGetPointer = _proto("PyCapsule_GetPointer", _raw, _raw, _name)
RawGetName = _proto("PyCapsule_GetName", _name, _raw)
RawGetContext = _proto("PyCapsule_GetContext", _raw, _raw)
