"""pydlpack 0.2.1's spellings on 1.x's own types, each with a DeprecationWarning naming the new
one (docs/migration.md).

A leaf: it imports nothing of dlpack, so the types (``_types``) take their 0.2.1 spellings from
here and the 0.2.1 API (``_legacy``) its warning, and neither imports the other.
"""

from __future__ import annotations

import warnings
from typing import Any


def deprecated(old: str, new: str, stacklevel: int) -> None:
    """Warn that ``old`` (a pydlpack 0.2.1 spelling) is deprecated in favour of ``new``."""
    warnings.warn(f"{old} is pydlpack 0.2.1's spelling, deprecated since 1.0: use {new} "
                  "(docs/migration.md)", DeprecationWarning, stacklevel=stacklevel)


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
