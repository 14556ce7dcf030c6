"""Type stubs for the package: the 1.x API (from its modules), and pydlpack 0.2.1's names with
their real signatures, marked deprecated, so that a type checker shows the deprecation where
0.2.1 code uses them (docs/migration.md) rather than an untyped module attribute."""

import sys
from collections.abc import Callable
from typing import Any, Final

from dlpack import ctypes as ctypes
from dlpack._core import CudaError as CudaError
from dlpack._core import DLPackObject as DLPackObject
from dlpack._core import asdlpack as asdlpack
from dlpack._core import from_address as from_address
from dlpack._core import share as share
from dlpack._core import todict as todict
from dlpack._types import DLPACK_VERSION as DLPACK_VERSION
from dlpack._types import FLAG_BITMASK_IS_COPIED as FLAG_BITMASK_IS_COPIED
from dlpack._types import FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED as FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED
from dlpack._types import FLAG_BITMASK_READ_ONLY as FLAG_BITMASK_READ_ONLY
from dlpack._types import DLDataTypeCode as DLDataTypeCode
from dlpack._types import DLDeviceType as DLDeviceType
from dlpack._types import DLPackError as DLPackError
from dlpack._types import DType as DType

if sys.version_info >= (3, 13):
    from warnings import deprecated
else:
    from typing_extensions import deprecated

#: pydlpack's version (the installed distribution's, pyproject.toml reads it from here).
__version__: str
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

def get_include() -> str: ...

# -- pydlpack 0.2.1's names (dlpack._legacy at run time) ------------------------------------------

@deprecated("pydlpack 0.2.1's per-protocol reader: use dlpack.asdlpack(obj)")
def asdlpack_dlpack(obj: object, impl_cls: type | None = None) -> DLPackObject: ...
@deprecated("pydlpack 0.2.1's per-protocol reader: use dlpack.asdlpack(obj)")
def asdlpack_array_interface_v3(obj: object, impl_cls: type | None = None) -> DLPackObject: ...
@deprecated("pydlpack 0.2.1's per-protocol reader: use dlpack.asdlpack(obj)")
def asdlpack_cuda_array_interface(obj: object, impl_cls: type | None = None) -> DLPackObject: ...
@deprecated("pydlpack 0.2.1's per-protocol reader: use dlpack.asdlpack(obj)")
def asdlpack_buffer(obj: object, impl_cls: type | None = None) -> DLPackObject: ...
@deprecated("pydlpack 0.2.1's placeholder, which always raised: use dlpack.asdlpack(obj)")
def asdlpack_array_interface_v2(obj: object, impl_cls: type | None = None) -> DLPackObject: ...
@deprecated("pydlpack 0.2.1's helper: use asdlpack(obj).strides")
def _get_strides(shape: tuple[int, ...]) -> tuple[int, ...]: ...
@deprecated("pydlpack 0.2.1's: use memoryview(obj), and asdlpack(obj).data_ptr for the address")
class Buffer:
    pointer: int
    def __init__(self, obj: object, flags: int = 0) -> None: ...
    @property
    def ndim(self) -> int: ...
    @property
    def shape(self) -> tuple[int, ...] | None: ...
    @property
    def strides(self) -> tuple[int, ...] | None: ...
    @property
    def suboffsets(self) -> tuple[int, ...] | None: ...
    @property
    def itemsize(self) -> int: ...
    @property
    def format(self) -> str | None: ...

@deprecated("pydlpack 0.2.1's: use ctypes.pythonapi.PyCapsule_* (pydlpack has no wrapper)")
class Capsule:
    capsule: object
    def __init__(self, capsule: object) -> None: ...
    @classmethod
    def new(
        cls, pointer: int, name: str | bytes | None,
        destructor: Callable[[Any], None] | None = None,
    ) -> Capsule: ...
    def is_valid(self, name: str | bytes | None) -> bool: ...
    def get_pointer(self, name: str | bytes | None) -> int: ...
    def set_pointer(self, pointer: int) -> None: ...
    def get_name(self) -> str | None: ...
    def set_name(self, name: str | bytes | None) -> None: ...
    def get_context(self) -> int | None: ...
    def set_context(self, context: int | None) -> None: ...
    def get_destructor(self) -> Any: ...
    def set_destructor(self, destructor: Callable[[Any], None] | None) -> None: ...

# The structures moved to dlpack.ctypes. At run time each name is that class itself; here it is
# a subclass, the one way a type checker lets a class name carry the deprecation.
@deprecated("moved: use dlpack.ctypes.DLTensor")
class DLTensor(ctypes.DLTensor): ...

@deprecated("moved: use dlpack.ctypes.DLManagedTensor")
class DLManagedTensor(ctypes.DLManagedTensor): ...

@deprecated("moved: use dlpack.ctypes.DLManagedTensorVersioned")
class DLManagedTensorVersioned(ctypes.DLManagedTensorVersioned): ...

@deprecated("moved: use dlpack.ctypes.DLDevice")
class DLDevice(ctypes.DLDevice): ...

@deprecated("moved: use dlpack.ctypes.DLDataType")
class DLDataType(ctypes.DLDataType): ...

@deprecated("moved: use dlpack.ctypes.DLPackVersion")
class DLPackVersion(ctypes.DLPackVersion): ...

# Constants cannot carry the mark; they warn at run time.
PyBUF_RECORDS_RO: Final[int]
DLPACK_CAPSULE_VALID_NAME: Final[bytes]
