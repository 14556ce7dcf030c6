"""A small typed user of pydlpack; CI runs `mypy --strict` on it, with NumPy's own stubs, on every
interpreter it tests, to keep the stubs honest (.ci/typed_usage_torch.py adds torch where it is)."""

from __future__ import annotations

import array
import ctypes

import numpy as np
import numpy.typing as npt

import dlpack
import dlpack.ctypes as dlc
from dlpack import DLDeviceType, DLPackObject, DType, asdlpack, from_address, todict


def describe(obj: object) -> str:
    dl: DLPackObject = asdlpack(obj, allow_legacy_readonly=False, legacy_writable=False)
    shape: tuple[int, ...] = dl.shape
    dtype: DType = dl.dtype
    device: tuple[DLDeviceType, int] = dl.device
    fields: dict[str, object] = todict(dl)
    return f"{shape} {dtype.name} {device[0].name} {dl.nbytes} {dl.readonly} {sorted(fields)}"


def to_c(obj: object) -> int:
    ptr = dlc.to_pointer(obj)
    address: int = ctypes.cast(ptr, ctypes.c_void_p).value or 0
    ptr.contents.deleter(ptr)
    return address


def to_numpy(data: bytes) -> npt.NDArray[np.number[npt.NBitBase] | np.bool]:
    return np.from_dlpack(asdlpack(data))


def wrap_c_buffer() -> DLPackObject:
    buf = (ctypes.c_float * 6)()
    return from_address(ctypes.addressof(buf), (2, 3), "float32", owner=buf, readonly=True)


print(describe(array.array("d", [1.0, 2.0])), to_c(b"abc") != 0, dlpack.DLPACK_VERSION)
print(to_numpy(b"abc").tolist(), asdlpack(b"abc").device[0].name, wrap_c_buffer().strides)
with memoryview(asdlpack(bytearray(4))) as view:
    print(view.nbytes)
