"""pydlpack 0.2.1's spellings on 1.x's own types, each with a DeprecationWarning naming the new
one (docs/migration.md).

A leaf: it imports nothing of dlpack, so the types (``_types``) take their 0.2.1 spellings from
here and the 0.2.1 API (``_legacy``) its warning, and neither imports the other.
"""

from __future__ import annotations

import dis
import sys
import warnings
from types import FrameType
from typing import Any


def deprecated(old: str, new: str, stacklevel: int) -> None:
    """Warn that ``old`` (a pydlpack 0.2.1 spelling) is deprecated in favour of ``new``."""
    warnings.warn(f"{old} is pydlpack 0.2.1's spelling, deprecated since 1.0: use {new} "
                  "(docs/migration.md)", DeprecationWarning, stacklevel=stacklevel)


# pydlpack 0.2.1's names with no 1.x counterpart, as owner.name -> the way out. Each one's error
# names docs/migration.md ("What is gone"): a module attribute, a from-import and an attribute
# of a class's instances alike (tests/test_legacy.py enumerates every name 0.2.1 had).
GONE = {
    "dlpack.MemoryManager": "asdlpack(obj), which keeps the memory alive as long as it is used",
    "dlpack.DLManagedTensorImpl": "dlpack.ctypes.to_pointer(obj) for a managed tensor a C "
                                  "function owns, asdlpack(obj).data_ptr for the data address",
    "dlpack.DLStructure": "the structures of dlpack.ctypes (DLTensor, DLManagedTensor, ...), "
                          "and dlpack.todict(x) for the fields",
    "dlpack.buffer.Py_Buffer": "memoryview(obj), and asdlpack(obj).data_ptr for the address",
    "DLPackObject.impl": "dl.data_ptr for the data address (0.2.1's impl.get_dlpack_data()), "
                         "dl.__dlpack_device__() for the device, dlpack.ctypes.to_pointer(dl) "
                         "for a managed tensor a C function owns",
    "Buffer.py_buffer": "the Buffer's own ndim, shape, strides, itemsize, format and pointer, or "
                        "memoryview(obj)",
    "DLStructure.todict": "dlpack.todict(capsule) (or of anything asdlpack takes)",
}

_IMPORT_FROM = dis.opmap["IMPORT_FROM"]
_HEAPTYPE = 1 << 9                          # Py_TPFLAGS_HEAPTYPE: a class made by a class statement


def importing(frame: FrameType | None) -> bool:
    """Whether frame is running ``from module import name``: a module ``__getattr__``'s
    AttributeError would become a bare ImportError there, so the error for a gone name is an
    ImportError of its own."""
    return (frame is not None and frame.f_lasti >= 0
            and frame.f_code.co_code[frame.f_lasti] == _IMPORT_FROM)


def missing(owner: str, name: str, obj: object = None,
            frame: FrameType | None = None) -> AttributeError | ImportError:
    """The error for ``owner.name`` that is not there: for a name pydlpack 0.2.1 had (GONE), one
    naming its way out and docs/migration.md, an ImportError when frame is a from-import of it;
    else Python's own AttributeError (obj: the instance, for Python's suggestions)."""
    way_out = GONE.get(f"{owner}.{name}")
    if way_out is None:
        if obj is None:
            return AttributeError(f"module {owner!r} has no attribute {name!r}", name=name,
                                  obj=sys.modules.get(owner))
        t = type(obj)            # Python's wording: the type's tp_name
        shown = t.__name__ if t.__flags__ & _HEAPTYPE else f"{t.__module__}.{t.__qualname__}"
        return AttributeError(f"{shown!r} object has no attribute {name!r}", name=name, obj=obj)
    text = (f"{owner}.{name} was pydlpack 0.2.1's and is gone in 1.0: use {way_out} "
            "(docs/migration.md, \"What is gone\")")
    if obj is None and importing(frame):
        return ImportError(f"cannot import name {name!r} from {owner!r}: {text}", name=owner)
    return AttributeError(text, name=name, obj=obj)


def missing_attribute(obj: object, name: str) -> AttributeError:
    """``missing`` for an instance attribute (a class's ``__getattr__``): owner is its class."""
    return missing(type(obj).__name__, name, obj)  # type: ignore[return-value]


class Labelled:
    """0.2.1's ``label`` and ``from_label`` for an ``IntEnum`` of dlpack.h's ``kDL...`` names
    (a mixin: ``class DLDeviceType(Labelled, enum.IntEnum)``)."""

    __slots__ = ()
    name: str

    @property
    def label(self) -> str:
        """pydlpack 0.2.1's name for the member (``"DLCPU"``); deprecated, use ``name``."""
        kind = type(self).__name__
        deprecated(f"{kind}.label", f"{kind}.name ('kDL...')", stacklevel=3)
        return self.name[1:]

    @classmethod
    def from_label(cls, label: str) -> Any:
        """pydlpack 0.2.1's lookup by label; deprecated, use ``Enum["kDL..."]``."""
        deprecated(f"{cls.__name__}.from_label(label)", f"{cls.__name__}['kDL...']",
                   stacklevel=3)
        try:
            return cls["k" + label]  # type: ignore[index]
        except KeyError:
            first = next(iter(cls)).name[1:]  # type: ignore[call-overload]
            raise KeyError(f"{label!r} is not a {cls.__name__} label (0.2.1 spelled them "
                           f"{first!r}...)") from None


class NestedFields(dict):  # type: ignore[type-arg]
    """0.2.1's nested ``todict(x)["dl_tensor"]``, read from 1.x's flat fields."""

    __slots__ = ()

    def __missing__(self, key: object) -> object:
        if key != "dl_tensor" or "shape" not in self:   # a newer major version: not read
            raise KeyError(key)
        deprecated('todict(x)["dl_tensor"]', "todict(x)'s own keys ('shape', 'strides', "
                   "'dtype', 'device', 'data', ...)", 3)
        code, bits, lanes = self["dtype"]
        device_type, device_id = self["device"]
        return {
            "data": self["data"] or None,
            "device": {"device_type": _label(device_type), "device_id": device_id},
            "ndim": self["ndim"],
            "dtype": {"code": _label(code), "bits": bits, "lanes": lanes},
            "shape": self["shape"],
            "strides": self["strides"],
            "byte_offset": self["byte_offset"],
        }


def _label(value: Any) -> object:
    """A member's 0.2.1 label (kDLCPU -> DLCPU); a number no member names, as it is."""
    name = getattr(value, "name", None)
    return name[1:] if isinstance(name, str) else value
