"""A fake CUDA driver for machines without a GPU, installed at the C level.

Its entry points are ctypes callbacks that pydlpack's core calls exactly as it calls libcuda's.
Every call is logged, so tests assert the exact sequence; "device" memory is host memory, so
copies move real bytes. Calls that need a context fail, as libcuda's do, when none is current.
"""

import ctypes
from ctypes import POINTER, c_char_p, c_int, c_size_t, c_uint, c_uint64, c_void_p

from dlpack import _core

DEVICE_PTR = 0x7F00_0000_0000
MANAGED_PTR = 0x7E00_0000_0000
HOST_PTR = 0x7D00_0000_0000

CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE = 1, 2
CUDA_ERROR_INVALID_CONTEXT = 201
EVENT = 0xE0


def ctx(device_id):
    """The primary context the fake hands out for a device."""
    return 0xC000 + device_id


_SIGNATURES = {
    "cuInit": (c_uint,),
    "cuGetErrorName": (c_int, POINTER(c_char_p)),
    "cuPointerGetAttributes": (c_uint, POINTER(c_int), POINTER(c_void_p), c_uint64),
    "cuDeviceGet": (POINTER(c_int), c_int),
    "cuDevicePrimaryCtxRetain": (POINTER(c_void_p), c_int),
    "cuCtxPushCurrent_v2": (c_void_p,),
    "cuCtxPopCurrent_v2": (POINTER(c_void_p),),
    "cuEventCreate": (POINTER(c_void_p), c_uint),
    "cuEventRecord": (c_void_p, c_void_p),
    "cuStreamWaitEvent": (c_void_p, c_void_p, c_uint),
    "cuEventDestroy_v2": (c_void_p,),
    "cuStreamSynchronize": (c_void_p,),
    "cuMemAlloc_v2": (POINTER(c_uint64), c_size_t),
    "cuMemFree_v2": (c_uint64,),
    "cuMemcpyDtoH_v2": (c_void_p, c_uint64, c_size_t),
    "cuMemcpyHtoD_v2": (c_uint64, c_void_p, c_size_t),
    "cuEventSynchronize": (c_void_p,),
}
_NEEDS_CONTEXT = {"cuEventCreate", "cuEventRecord", "cuStreamWaitEvent", "cuEventDestroy",
                  "cuStreamSynchronize", "cuMemAlloc", "cuMemFree", "cuMemcpyDtoH",
                  "cuMemcpyHtoD", "cuEventSynchronize"}
_ERROR_NAMES = {CUDA_ERROR_INVALID_CONTEXT: b"CUDA_ERROR_INVALID_CONTEXT",
                2: b"CUDA_ERROR_OUT_OF_MEMORY", 700: b"CUDA_ERROR_ILLEGAL_ADDRESS"}


class FakeDriver:
    """Pointer attributes from a table, a log of every call (names without ``_v2``), and
    ``fail[name] = rc`` to make one entry point fail (logged as ``(name, "failed")``)."""

    def __init__(self):
        self.calls = []
        self.memory = {}
        self.fail = {}
        self.attributes = {MANAGED_PTR: (CU_MEMORYTYPE_DEVICE, 0, True),
                           HOST_PTR: (CU_MEMORYTYPE_HOST, 0, False)}
        self.default_attributes = (CU_MEMORYTYPE_DEVICE, 1, False)
        self.current = []                       # the thread's context stack
        self._callbacks = {name: ctypes.CFUNCTYPE(c_int, *args)(self._entry(name))
                           for name, args in _SIGNATURES.items()}

    def symbols(self):
        return {name: ctypes.cast(fn, c_void_p).value for name, fn in self._callbacks.items()}

    def _entry(self, name):
        short = name.removesuffix("_v2")
        impl = getattr(self, "_" + short)

        def entry(*args):
            if short in _NEEDS_CONTEXT and not self.current:
                self.calls.append((short, "no context"))
                return CUDA_ERROR_INVALID_CONTEXT
            if short in self.fail and short != "cuGetErrorName":
                self.calls.append((short, "failed"))    # as libcuda's: no effect at all
                return self.fail[short]
            try:
                logged = impl(*args)
            except Exception as e:                 # a bug in the fake or in the caller
                self.calls.append((short, "raised", repr(e)))
                return 999
            if short != "cuGetErrorName":
                self.calls.append((short, *logged))
            return 0
        return entry

    # Each returns the arguments worth logging.
    def _cuInit(self, flags):
        return (flags,)

    def _cuGetErrorName(self, rc, out):
        name = _ERROR_NAMES.get(rc)
        if name is None:
            return ()
        out[0] = name
        return ()

    def _cuPointerGetAttributes(self, n, attrs, values, ptr):
        mem, ordinal, managed = self.attributes.get(ptr, self.default_attributes)
        assert n == 3 and [attrs[i] for i in range(3)] == [2, 9, 8]
        c_uint.from_address(values[0]).value = mem
        c_int.from_address(values[1]).value = ordinal
        c_uint.from_address(values[2]).value = managed
        return (ptr,)

    def _cuDeviceGet(self, out, ordinal):
        out[0] = ordinal
        return (ordinal,)

    def _cuDevicePrimaryCtxRetain(self, out, dev):
        out[0] = ctx(dev)
        return (dev,)

    def _cuCtxPushCurrent(self, context):
        self.current.append(context)
        return (context,)

    def _cuCtxPopCurrent(self, out):
        self.current.pop()
        return ()

    def _cuEventCreate(self, out, flags):
        out[0] = EVENT
        return (flags,)

    def _cuEventRecord(self, event, stream):
        return (event, stream)

    def _cuStreamWaitEvent(self, stream, event, flags):
        return (stream, event, flags)

    def _cuEventDestroy(self, event):
        return (event,)

    def _cuStreamSynchronize(self, stream):
        return (stream,)

    def _cuEventSynchronize(self, event):
        return (event,)

    def _cuMemAlloc(self, out, nbytes):
        buf = ctypes.create_string_buffer(nbytes)
        self.memory[ctypes.addressof(buf)] = buf
        out[0] = ctypes.addressof(buf)
        return (nbytes,)

    def _cuMemFree(self, ptr):
        del self.memory[ptr]
        return (ptr,)

    def _cuMemcpyDtoH(self, dst, src, nbytes):
        ctypes.memmove(dst, src, nbytes)
        return (src, nbytes)

    def _cuMemcpyHtoD(self, dst, src, nbytes):
        ctypes.memmove(dst, src, nbytes)
        return (dst, nbytes)


def install():
    """Install a fresh fake driver in the core; returns it (``uninstall`` undoes it)."""
    driver = FakeDriver()
    _core._cuda_driver(driver.symbols())
    driver.calls.clear()
    return driver


def uninstall():
    _core._cuda_driver(None)


# Expected call sequences.
def enter(device_id, first=False):
    """Making device_id's primary context current (retained on its first use)."""
    retain = [("cuDeviceGet", device_id), ("cuDevicePrimaryCtxRetain", device_id)]
    return (retain if first else []) + [("cuCtxPushCurrent", ctx(device_id))]


LEAVE = [("cuCtxPopCurrent",)]


def wait(device_id, producer, consumer, first=True):
    """One event: consumer waits for producer's queued work."""
    return [*enter(device_id, first), ("cuEventCreate", 2), ("cuEventRecord", EVENT, producer),
            ("cuStreamWaitEvent", consumer, EVENT, 0), ("cuEventDestroy", EVENT), *LEAVE]


def synchronize(device_id, stream, first=True):
    return [*enter(device_id, first), ("cuStreamSynchronize", stream), *LEAVE]
