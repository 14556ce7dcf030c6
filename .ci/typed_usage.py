"""A small typed user of pydlpack; CI runs `mypy --strict` on it to keep the stubs honest."""

from __future__ import annotations

import array
import ctypes

import dlpack
import dlpack.ctypes as dlc
from dlpack import DLDeviceType, DLPackObject, DType, asdlpack, todict


def describe(obj: object) -> str:
    dl: DLPackObject = asdlpack(obj, allow_legacy_readonly=False, legacy_writable=False)
    shape: tuple[int, ...] = dl.shape
    dtype: DType = dl.dtype
    device: tuple[DLDeviceType | int, int] = dl.device
    fields: dict[str, object] = todict(dl)
    return f"{shape} {dtype.name} {device} {dl.nbytes} {dl.readonly} {sorted(fields)}"


def to_c(obj: object) -> int:
    ptr = dlc.to_pointer(obj)
    address: int = ctypes.cast(ptr, ctypes.c_void_p).value or 0
    ptr.contents.deleter(ptr)
    return address


def arrow_capsules(obj: object) -> tuple[object, object, object]:
    dl = asdlpack(obj)
    schema, data = dl.__arrow_c_array__()
    return schema, data, dl.__arrow_c_device_stream__(None, stream=None)


print(describe(array.array("d", [1.0, 2.0])), to_c(b"abc") != 0, dlpack.DLPACK_VERSION)
print(len(arrow_capsules(bytearray(4))))
memoryview(asdlpack(bytearray(4))).release()
