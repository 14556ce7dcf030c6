"""The CUDA driver calls pydlpack needs, loaded only when CUDA data is seen.

Everything goes through one ``Driver`` (ctypes on ``libcuda.so.1``); tests replace it with
``set_driver`` to check the exact calls on machines without a GPU.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from typing import Protocol

from dlpack._types import DLDeviceType

# Driver API constants (cuda.h).
CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
CU_MEMORYTYPE_HOST = 1
CU_MEMORYTYPE_DEVICE = 2
CU_MEMORYTYPE_UNIFIED = 4
CU_EVENT_DISABLE_TIMING = 2
LEGACY_DEFAULT_STREAM = 1
PER_THREAD_STREAM = 2


class CudaError(BufferError):
    """A CUDA driver call failed, or there is no driver."""


class DriverAPI(Protocol):
    def pointer_attributes(self, ptr: int) -> tuple[int, int, bool]: ...
    def stream_wait(self, producer: int, consumer: int) -> None: ...
    def stream_synchronize(self, stream: int) -> None: ...
    def copy_to_host(self, device_id: int, dst: int, src: int, nbytes: int) -> None: ...
    def copy_to_device(self, device_id: int, dst: int, src: int, nbytes: int) -> None: ...
    def alloc(self, device_id: int, nbytes: int) -> int: ...
    def free(self, device_id: int, ptr: int) -> None: ...


class Driver:
    """ctypes bindings to the few CUDA driver entry points used here."""

    def __init__(self, path: str = "libcuda.so.1") -> None:
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as e:
            raise CudaError(f"CUDA data needs the CUDA driver, but {path} cannot be loaded "
                            f"({e}); is an NVIDIA driver installed?") from None
        self._check("cuInit", self.lib.cuInit(0))
        self._contexts: dict[int, ctypes.c_void_p] = {}
        self._pointer_attributes = (ctypes.c_int * 3)(
            CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            CU_POINTER_ATTRIBUTE_IS_MANAGED)

    def _check(self, what: str, rc: int) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(name))
            raise CudaError(f"CUDA driver: {what} failed with "
                            f"{(name.value or b'error').decode()} ({rc})")

    def pointer_attributes(self, ptr: int) -> tuple[int, int, bool]:
        """(memory type, device ordinal, is managed) of a device pointer, in one driver call
        (memory type 0 for an address CUDA does not know)."""
        mem, ordinal, managed = ctypes.c_uint(), ctypes.c_int(), ctypes.c_uint()
        values = (ctypes.c_void_p * 3)(*(ctypes.addressof(v) for v in (mem, ordinal, managed)))
        self._check(f"cuPointerGetAttributes({ptr:#x})", self.lib.cuPointerGetAttributes(
            3, self._pointer_attributes, values, ctypes.c_uint64(ptr)))
        return mem.value, ordinal.value, bool(managed.value)

    def stream_wait(self, producer: int, consumer: int) -> None:
        """Make ``consumer`` wait for the work queued so far on ``producer`` (no host block)."""
        event = ctypes.c_void_p()
        self._check("cuEventCreate", self.lib.cuEventCreate(ctypes.byref(event),
                                                            CU_EVENT_DISABLE_TIMING))
        try:
            self._check("cuEventRecord", self.lib.cuEventRecord(event, ctypes.c_void_p(producer)))
            self._check("cuStreamWaitEvent",
                        self.lib.cuStreamWaitEvent(ctypes.c_void_p(consumer), event, 0))
        finally:
            self.lib.cuEventDestroy_v2(event)

    def stream_synchronize(self, stream: int) -> None:
        self._check("cuStreamSynchronize", self.lib.cuStreamSynchronize(ctypes.c_void_p(stream)))

    @contextlib.contextmanager
    def _primary(self, device_id: int) -> Iterator[None]:
        """Run in device_id's primary context (retained once, kept for the process)."""
        ctx = self._contexts.get(device_id)
        if ctx is None:
            dev = ctypes.c_int()
            self._check(f"cuDeviceGet({device_id})", self.lib.cuDeviceGet(ctypes.byref(dev),
                                                                         device_id))
            ctx = ctypes.c_void_p()
            self._check("cuDevicePrimaryCtxRetain",
                        self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
            self._contexts[device_id] = ctx
        self._check("cuCtxPushCurrent", self.lib.cuCtxPushCurrent_v2(ctx))
        try:
            yield
        finally:
            self.lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))

    def copy_to_host(self, device_id: int, dst: int, src: int, nbytes: int) -> None:
        with self._primary(device_id):
            self._check("cuMemcpyDtoH", self.lib.cuMemcpyDtoH_v2(
                ctypes.c_void_p(dst), ctypes.c_uint64(src), ctypes.c_size_t(nbytes)))

    def copy_to_device(self, device_id: int, dst: int, src: int, nbytes: int) -> None:
        with self._primary(device_id):
            self._check("cuMemcpyHtoD", self.lib.cuMemcpyHtoD_v2(
                ctypes.c_uint64(dst), ctypes.c_void_p(src), ctypes.c_size_t(nbytes)))

    def alloc(self, device_id: int, nbytes: int) -> int:
        ptr = ctypes.c_uint64()
        with self._primary(device_id):
            self._check(f"cuMemAlloc({nbytes})", self.lib.cuMemAlloc_v2(
                ctypes.byref(ptr), ctypes.c_size_t(max(nbytes, 1))))
        return ptr.value

    def free(self, device_id: int, ptr: int) -> None:
        with self._primary(device_id):
            self._check("cuMemFree", self.lib.cuMemFree_v2(ctypes.c_uint64(ptr)))


_driver: DriverAPI | None = None


def driver() -> DriverAPI:
    """The driver in use, loading libcuda on first need."""
    global _driver
    if _driver is None:
        _driver = Driver()
    return _driver


def set_driver(d: DriverAPI | None) -> DriverAPI | None:
    """Replace the driver (tests); returns the previous one. ``None`` reloads lazily."""
    global _driver
    previous, _driver = _driver, d
    return previous


def pointer_device(ptr: int) -> tuple[int, int]:
    """(DLDeviceType, ordinal) owning a CUDA pointer; NULL (zero-size) maps to CUDA:0."""
    if ptr == 0:
        return DLDeviceType.kDLCUDA, 0
    mem, ordinal, managed = driver().pointer_attributes(ptr)
    if managed or mem == CU_MEMORYTYPE_UNIFIED:
        return DLDeviceType.kDLCUDAManaged, ordinal
    if mem == CU_MEMORYTYPE_HOST:
        return DLDeviceType.kDLCUDAHost, max(ordinal, 0)
    if mem == CU_MEMORYTYPE_DEVICE:
        return DLDeviceType.kDLCUDA, ordinal
    raise CudaError(f"__cuda_array_interface__: pointer {ptr:#x} has CUDA memory type {mem}, "
                    "which DLPack cannot describe")


def consumer_stream(stream: object) -> int | None:
    """The CUDA stream handle a DLPack consumer's ``stream`` argument names (None: no sync)."""
    if stream is None:
        return LEGACY_DEFAULT_STREAM          # array API: None means the legacy default stream
    if type(stream) is bool or not isinstance(stream, int):
        raise BufferError(f"__dlpack__: stream = {stream!r} is not None or an int")
    if stream == -1:
        return None
    if stream == 0:
        raise BufferError("__dlpack__: stream = 0 is disallowed for CUDA (ambiguous); pass 1 "
                          "for the legacy default stream or 2 for per-thread")
    return stream


def sync_for_consumer(producer: int | None, stream: object, provider: object = None) -> None:
    """Order the consumer's stream after the producer's pending work.

    ``producer`` is the stream the data's work is on (None: nothing to wait for).
    A DLPack ``provider`` is asked again with the consumer's stream, so it syncs itself.
    """
    consumer = consumer_stream(stream)
    if consumer is None:
        return
    if provider is not None:
        # The provider orders its work before the consumer's stream (its capsule is dropped
        # unconsumed). The per-thread default stream waits for the legacy default stream, so
        # providers that refuse 2 themselves (torch) are asked for 1 instead.
        provider.__dlpack__(stream=LEGACY_DEFAULT_STREAM if consumer == PER_THREAD_STREAM
                            else consumer)
        return
    if producer is None or producer == consumer:
        return
    driver().stream_wait(producer, consumer)


def sync_for_host(producer: int | None, provider: object = None) -> None:
    """Block the host until the producer's pending work is done, before a host-side copy."""
    if provider is not None:
        provider.__dlpack__(stream=LEGACY_DEFAULT_STREAM)
        producer = LEGACY_DEFAULT_STREAM
    if producer is not None:
        driver().stream_synchronize(producer)


class DeviceCopy:
    """Device memory holding a copy pydlpack made; freed, in its device's primary context,
    when the last capsule viewing it is deleted."""

    def __init__(self, device_id: int, nbytes: int) -> None:
        self.device_id = device_id
        self.ptr = 0
        self.ptr = driver().alloc(device_id, nbytes)

    def __del__(self) -> None:
        if self.ptr:
            driver().free(self.device_id, self.ptr)
            self.ptr = 0
