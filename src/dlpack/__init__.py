"""pydlpack: one zero-copy object that speaks every array-exchange protocol.

``asdlpack(obj)`` accepts DLPack (``__dlpack__`` or capsules), ``__cuda_array_interface__``,
``__array_interface__``, ``__array_struct__``, the Arrow PyCapsule interface, the buffer
protocol and ctypes DLPack pointers, and returns a ``DLPackObject`` that speaks all of them.
"""

from dlpack._core import CudaError, DLPackObject, asdlpack, from_address, share, todict
from dlpack._types import (
    DLPACK_VERSION,
    FLAG_BITMASK_IS_COPIED,
    FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
    FLAG_BITMASK_READ_ONLY,
    DLDataTypeCode,
    DLDeviceType,
    DLPackError,
    DType,
)

__version__ = "1.0.0"     # the one source: pyproject.toml reads it, the matrix header shows it


def get_include() -> str:
    """The directory of the DLPack header pydlpack ships (dlpack.h v1.3, the ABI it speaks),
    for C extensions: ``-I$(python -c "import dlpack; print(dlpack.get_include())")`` and
    ``#include <dlpack/dlpack.h>``, as ``numpy.get_include()``."""
    import os

    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")


__all__ = [
    "DLPACK_VERSION",
    "FLAG_BITMASK_IS_COPIED",
    "FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED",
    "FLAG_BITMASK_READ_ONLY",
    "CudaError",
    "DLDataTypeCode",
    "DLDeviceType",
    "DLPackError",
    "DLPackObject",
    "DType",
    "__version__",
    "asdlpack",
    "from_address",
    "get_include",
    "share",
    "todict",
]


_SUBMODULES = ("ctypes", "tools", "tests", "buffer", "capsule")   # attributes, imported on use


def __getattr__(name: str) -> object:
    """The submodules, imported when first asked for (``dlpack.ctypes`` without an import), and
    pydlpack 0.2.1's names, kept with a DeprecationWarning (docs/migration.md)."""
    import sys

    if name.startswith("__"):  # tools probing for dunders need not load the legacy module
        raise AttributeError(f"module 'dlpack' has no attribute {name!r}")
    import importlib

    if name in _SUBMODULES:
        return importlib.import_module(f"dlpack.{name}")
    legacy = importlib.import_module("dlpack._legacy")  # "from dlpack import" would recurse

    return legacy.attribute(name, sys._getframe(1))     # the frame that asked
