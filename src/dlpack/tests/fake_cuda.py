"""A fake CUDA driver for machines without a GPU, as strict as libcuda where pydlpack's
correctness depends on it, installed at the C level where libcuda's entry points go.

Each entry point is a C function (tests/fake_cuda_shim.c) that notes whether its caller held
the GIL and calls the Python implementation here. Every call is logged (names without ``_v2``)
so tests assert exact sequences; a refused call is logged ``(name, "error", rc, why)`` and, as
libcuda's, has no effect. The rules:

- Context stacks are per thread; a thread starts with none. Every call that needs a context
  (cuPointerGetAttributes included) fails with CUDA_ERROR_INVALID_CONTEXT (201) without one, and
  with CUDA_ERROR_CONTEXT_IS_DESTROYED (709) in a primary context reset since it was retained.
- Pointers the driver does not know get memory type 0 (and ordinal -2).
- Streams and events belong to contexts: the default streams (1 legacy, 2 per-thread) to the
  current one, the others to the one they were made in (cuStreamGetCtx). An event belongs to the
  context current at cuEventCreate; recording it on a stream of another context, or queueing
  work on a stream of a context that is not current, fails with CUDA_ERROR_INVALID_HANDLE (400).
- Streams are queues. Work (``kernel`` writes standing for kernels, copies, event records) runs
  later, in order, when drained: by a synchronize, by a call that must wait for it, or by the
  test's ``run()``; a stream can be held shut (``hold``, as cuStreamWaitValue32 on a host flag).
  The legacy stream orders against the blocking streams of its context, non-blocking streams do
  not order against it, so a consumer not ordered after the producer reads the old values.
- cuMemcpyHtoD from pageable memory returns once the bytes are staged: they land on the legacy
  stream later. cuMemFree (and every synchronous call) waits for the device; a wait that needs
  a held stream waits for ``release`` from another Python thread, which cannot come while the
  caller holds the GIL: the fake then hangs for ``hang_timeout`` seconds, logs ``"hung"`` and
  fails with CUDA_ERROR_LAUNCH_TIMEOUT (702). Blocking calls made with the GIL held are listed in
  ``gil_held``.
- Device memory lives in a mapping the fake never writes (its bytes are kept aside): a host read
  of it gives zeros and leaves a resident page that ``touched()`` reports. Host-NUMA VMM memory
  reports CU_MEMORYTYPE_HOST without a host pointer, as real drivers do, and lives there too.
- A context's device memory is unreachable from other contexts: a kernel (``consume``) of a
  stream in another context reading it fails with CUDA_ERROR_ILLEGAL_ADDRESS (primary contexts
  of several devices reach each other, as with peer access). cuPointerGetAttributes reports the
  owning context (CU_POINTER_ATTRIBUTE_CONTEXT) and a buffer ID unique in the process
  (CU_POINTER_ATTRIBUTE_BUFFER_ID).
- cuMemAlloc reuses freed addresses (last freed, same size, first), as the real allocator does;
  a primary-context reset frees its allocations, and ``library_alloc`` is another library's
  cuMemAlloc after it.
- cuMemcpy2D refuses a pitch above MAX_PITCH even for a single row.
- Stream-ordered allocation: cuMemAllocAsync gives pool memory (no context) ordered on its
  stream, cuMemFreeAsync frees it once the work queued on its stream before it has run (work of
  another stream not ordered before the free finds the memory gone: ordering is the caller's
  job), cuMemcpyHtoDAsync is ordered on its stream only (from pageable memory the bytes are
  staged before it returns). ``install(stream_ordered=False)`` is a driver without them.
- IPC across processes (spec §11). cuIpcGetMemHandle takes the base of device memory only
  (pool, managed, pinned and host-NUMA memory, and memory opened from a handle, are refused with
  CUDA_ERROR_INVALID_VALUE; CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE says which): its bytes
  move into a shared mapping (memfd) that another process using the fake maps from the handle.
  cuIpcOpenMemHandle needs a current context and CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS; it fails
  with CUDA_ERROR_INVALID_CONTEXT in the exporting process, and with CUDA_ERROR_INVALID_HANDLE
  once the allocation is freed or its process gone; opened again in the process it returns the
  same pointer with its count raised (as libcuda), and cuIpcCloseMemHandle past the count fails.
  Events made with CU_EVENT_INTERPROCESS (which needs CU_EVENT_DISABLE_TIMING) have a handle;
  an opened one is waited across processes: a stream waiting on it, or cuEventSynchronize, runs
  once the exporter's GPU has run the record the event had when the wait was queued (a shared
  page counts records, completions and waiters). Device UUIDs follow ``uuid_order``
  (CUDA_VISIBLE_DEVICES in another order). A ``spawn`` child installs the fake as the tests'
  process does: ``spawn_pool()``'s initializer, ``in_child`` for a fresh one per task, or
  ``CHILD`` first among a Process's arguments (unpickling it installs the fake before the CUDA
  objects after it unpickle).

Where it differs from libcuda, and how the difference is kept from hiding a defect:
cuStreamGetCtx of an unknown handle (undefined in the driver) is answered with
CUDA_ERROR_INVALID_HANDLE and listed in ``undefined``, which the tests' fixture requires empty:
no test may drive pydlpack to pass one. A real GPU without
CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS faults when the host touches managed memory while
any work runs on its device; here (``concurrent_managed = 0``) the host sees POISON there until
the device is idle (kernels see its bytes), so a read that did not synchronise the context gets
wrong values. Stream capture is modelled only as far as pydlpack meets it (below).

Stream capture (``torch.cuda.graph``; ``begin_capture``/``end_capture`` as the capturing library,
or cuStreamBeginCapture/cuStreamEndCapture): work queued on a capturing stream joins the graph
and never runs here. During a global capture (from any thread) or a thread-local one (from the
capturing thread), a call that may synchronise (cuStreamSynchronize, cuCtxSynchronize,
cuEventSynchronize, cuMemAlloc, cuMemFree, the synchronous cuMemcpy*, cuMemHostAlloc,
cuMemFreeHost, cuMemAllocManaged) fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and
invalidates the capture; so does cuStreamSynchronize of the capturing stream in any mode. Any
use of the legacy stream (work queued, cuStreamIsCapturing) while a blocking stream of its
context captures fails with CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and invalidates it. A capturing
stream may wait on an event recorded in a capture (a join) but not on one recorded outside it
(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, invalidated); a captured event is refused outside capture
(CUDA_ERROR_CAPTURED_EVENT). An invalidated capture's cuStreamEndCapture fails with
CUDA_ERROR_STREAM_CAPTURE_INVALIDATED.
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import mmap
import multiprocessing
import os
import shutil
import struct
import subprocess
import tempfile
import threading
import time
from ctypes import (
    POINTER,
    Structure,
    c_char_p,
    c_int,
    c_size_t,
    c_ubyte,
    c_uint,
    c_uint64,
    c_void_p,
)

from dlpack import _core

CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_UNIFIED = 1, 2, 4
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_INVALID_DEVICE = 101
CUDA_ERROR_INVALID_CONTEXT = 201
CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_ILLEGAL_ADDRESS = 700
CUDA_ERROR_LAUNCH_TIMEOUT = 702
CUDA_ERROR_CONTEXT_IS_DESTROYED = 709
CUDA_ERROR_NOT_FOUND = 500
CUDA_ERROR_ILLEGAL_STATE = 401
CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900
CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901
CUDA_ERROR_STREAM_CAPTURE_ISOLATION = 905
CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906
CUDA_ERROR_CAPTURED_EVENT = 907
CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 0, 1
CU_STREAM_CAPTURE_MODE_RELAXED = 2
CU_STREAM_CAPTURE_STATUS_NONE, CU_STREAM_CAPTURE_STATUS_ACTIVE = 0, 1
CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2
CU_EVENT_DISABLE_TIMING, CU_EVENT_INTERPROCESS = 2, 4
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1
CU_DEVICE_ATTRIBUTE_MAX_PITCH = 11
CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS = 89
EVENT = 0xE0                    # the first event handle (the lowest free one is handed out)
POISON = 0xCD                   # what fresh device memory holds
DEVICE_COUNT = 8


def ctx(device_id):
    """The primary context the fake hands out for a device."""
    return 0xC000 + device_id


class IpcHandle(Structure):
    """CUipcMemHandle and CUipcEventHandle: 64 opaque bytes, passed by value."""
    _fields_ = [("reserved", c_ubyte * 64)]


class CUDA_MEMCPY2D(Structure):
    _fields_ = [("srcXInBytes", c_size_t), ("srcY", c_size_t), ("srcMemoryType", c_int),
                ("srcHost", c_void_p), ("srcDevice", c_uint64), ("srcArray", c_void_p),
                ("srcPitch", c_size_t), ("dstXInBytes", c_size_t), ("dstY", c_size_t),
                ("dstMemoryType", c_int), ("dstHost", c_void_p), ("dstDevice", c_uint64),
                ("dstArray", c_void_p), ("dstPitch", c_size_t), ("WidthInBytes", c_size_t),
                ("Height", c_size_t)]


class CUDA_MEMCPY3D(Structure):
    _fields_ = [("srcXInBytes", c_size_t), ("srcY", c_size_t), ("srcZ", c_size_t),
                ("srcLOD", c_size_t), ("srcMemoryType", c_int), ("srcHost", c_void_p),
                ("srcDevice", c_uint64), ("srcArray", c_void_p), ("reserved0", c_void_p),
                ("srcPitch", c_size_t), ("srcHeight", c_size_t),
                ("dstXInBytes", c_size_t), ("dstY", c_size_t), ("dstZ", c_size_t),
                ("dstLOD", c_size_t), ("dstMemoryType", c_int), ("dstHost", c_void_p),
                ("dstDevice", c_uint64), ("dstArray", c_void_p), ("reserved1", c_void_p),
                ("dstPitch", c_size_t), ("dstHeight", c_size_t),
                ("WidthInBytes", c_size_t), ("Height", c_size_t), ("Depth", c_size_t)]


_SIGNATURES = {
    "cuInit": (c_uint,),
    "cuGetErrorName": (c_int, POINTER(c_char_p)),
    "cuCtxGetCurrent": (POINTER(c_void_p),),
    "cuPointerGetAttributes": (c_uint, POINTER(c_int), POINTER(c_void_p), c_uint64),
    "cuDeviceGet": (POINTER(c_int), c_int),
    "cuDeviceGetCount": (POINTER(c_int),),
    "cuDeviceGetAttribute": (POINTER(c_int), c_int, c_int),
    "cuDevicePrimaryCtxRetain": (POINTER(c_void_p), c_int),
    "cuDevicePrimaryCtxGetState": (c_int, POINTER(c_uint), POINTER(c_int)),
    "cuCtxPushCurrent_v2": (c_void_p,),
    "cuCtxPopCurrent_v2": (POINTER(c_void_p),),
    "cuStreamGetCtx": (c_void_p, POINTER(c_void_p)),
    "cuEventCreate": (POINTER(c_void_p), c_uint),
    "cuEventRecord": (c_void_p, c_void_p),
    "cuStreamWaitEvent": (c_void_p, c_void_p, c_uint),
    "cuEventDestroy_v2": (c_void_p,),
    "cuStreamSynchronize": (c_void_p,),
    "cuMemAlloc_v2": (POINTER(c_uint64), c_size_t),
    "cuMemFree_v2": (c_uint64,),
    "cuMemcpyDtoH_v2": (c_void_p, c_uint64, c_size_t),
    "cuMemcpyHtoD_v2": (c_uint64, c_void_p, c_size_t),
    "cuMemcpy2D_v2": (POINTER(CUDA_MEMCPY2D),),
    "cuMemcpyDtoDAsync_v2": (c_uint64, c_uint64, c_size_t, c_void_p),
    "cuEventSynchronize": (c_void_p,),
    "cuCtxSynchronize": (),
    "cuMemcpy3D_v2": (POINTER(CUDA_MEMCPY3D),),
    "cuMemGetAddressRange_v2": (POINTER(c_uint64), POINTER(c_size_t), c_uint64),
    "cuIpcGetMemHandle": (POINTER(IpcHandle), c_uint64),
    "cuIpcOpenMemHandle_v2": (POINTER(c_uint64), POINTER(IpcHandle), c_uint),
    "cuIpcCloseMemHandle": (c_uint64,),
    "cuIpcGetEventHandle": (POINTER(IpcHandle), c_void_p),
    "cuIpcOpenEventHandle": (POINTER(c_void_p), POINTER(IpcHandle)),
    "cuDeviceGetUuid_v2": (POINTER(c_ubyte * 16), c_int),
    "cuMemHostAlloc": (POINTER(c_void_p), c_size_t, c_uint),
    "cuMemFreeHost": (c_void_p,),
    "cuMemAllocManaged": (POINTER(c_uint64), c_size_t, c_uint),
    "cuStreamBeginCapture_v2": (c_void_p, c_int),
    "cuStreamEndCapture": (c_void_p, POINTER(c_void_p)),
    "cuStreamIsCapturing": (c_void_p, POINTER(c_int)),
    "cuMemAllocAsync": (POINTER(c_uint64), c_size_t, c_void_p),
    "cuMemFreeAsync": (c_uint64, c_void_p),
    "cuMemcpyHtoDAsync_v2": (c_uint64, c_void_p, c_size_t, c_void_p),
}
# Handles go by value: the C shim passes their address on; without it ctypes takes them by value.
_BY_VALUE = {"cuIpcOpenMemHandle_v2": 1, "cuIpcOpenEventHandle": 1}
_NEEDS_CONTEXT = {"cuPointerGetAttributes", "cuEventCreate", "cuEventRecord",
                  "cuStreamWaitEvent", "cuEventDestroy", "cuStreamSynchronize", "cuMemAlloc",
                  "cuMemFree", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpy2D",
                  "cuMemcpyDtoDAsync", "cuEventSynchronize", "cuCtxSynchronize",
                  "cuMemcpy3D", "cuMemGetAddressRange", "cuIpcGetMemHandle",
                  "cuIpcOpenMemHandle", "cuIpcCloseMemHandle", "cuIpcGetEventHandle",
                  "cuIpcOpenEventHandle", "cuMemHostAlloc", "cuMemFreeHost",
                  "cuMemAllocManaged", "cuStreamBeginCapture", "cuStreamEndCapture",
                  "cuStreamIsCapturing", "cuMemAllocAsync", "cuMemFreeAsync",
                  "cuMemcpyHtoDAsync"}
BLOCKING = {"cuInit", "cuDevicePrimaryCtxRetain", "cuStreamSynchronize", "cuMemAlloc",
            "cuMemFree", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpy2D", "cuEventSynchronize",
            "cuCtxSynchronize", "cuMemcpy3D", "cuIpcOpenMemHandle", "cuIpcCloseMemHandle",
            "cuMemHostAlloc", "cuMemFreeHost", "cuMemAllocManaged"}
_ERROR_NAMES = {CUDA_ERROR_INVALID_VALUE: b"CUDA_ERROR_INVALID_VALUE",
                CUDA_ERROR_OUT_OF_MEMORY: b"CUDA_ERROR_OUT_OF_MEMORY",
                CUDA_ERROR_INVALID_DEVICE: b"CUDA_ERROR_INVALID_DEVICE",
                CUDA_ERROR_INVALID_CONTEXT: b"CUDA_ERROR_INVALID_CONTEXT",
                CUDA_ERROR_INVALID_HANDLE: b"CUDA_ERROR_INVALID_HANDLE",
                CUDA_ERROR_ILLEGAL_ADDRESS: b"CUDA_ERROR_ILLEGAL_ADDRESS",
                CUDA_ERROR_LAUNCH_TIMEOUT: b"CUDA_ERROR_LAUNCH_TIMEOUT",
                CUDA_ERROR_CONTEXT_IS_DESTROYED: b"CUDA_ERROR_CONTEXT_IS_DESTROYED",
                CUDA_ERROR_NOT_FOUND: b"CUDA_ERROR_NOT_FOUND",
                CUDA_ERROR_ILLEGAL_STATE: b"CUDA_ERROR_ILLEGAL_STATE",
                CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: b"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
                CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: b"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
                CUDA_ERROR_STREAM_CAPTURE_ISOLATION: b"CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
                CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: b"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
                CUDA_ERROR_CAPTURED_EVENT: b"CUDA_ERROR_CAPTURED_EVENT"}
# Calls that may synchronise: refused (and the capture invalidated) during a global capture from
# any thread, or a thread-local one from the capturing thread.
_UNSAFE_IN_CAPTURE = {"cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
                      "cuMemAlloc", "cuMemFree", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpy2D",
                      "cuMemcpy3D", "cuMemHostAlloc", "cuMemFreeHost", "cuMemAllocManaged"}


# -- the C shim and the device address space (one per process) --------------------------------

_shim = None            # (CDLL, PyDLL) of the compiled shim, or False without a C compiler


def _load_shim():
    global _shim
    if _shim is None:
        _shim = False
        cc = shutil.which("gcc") or shutil.which("cc")
        source = os.path.join(os.path.dirname(__file__), "fake_cuda_shim.c")
        if cc is not None:
            with open(source, "rb") as f:
                tag = hashlib.sha256(f.read()).hexdigest()[:16]
            out = os.path.join(tempfile.gettempdir(), f"pydlpack-fake-cuda-{os.getuid()}-{tag}.so")
            if not os.path.exists(out):
                tmp = f"{out}.{os.getpid()}"
                subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", tmp, source], check=True)
                os.replace(tmp, out)
            lib = ctypes.CDLL(out)
            lib.shim_route.restype = c_void_p
            lib.shim_route.argtypes = [c_char_p, c_void_p]
            lib.shim_init(ctypes.cast(ctypes.pythonapi.PyGILState_Check, c_void_p))
            held = ctypes.PyDLL(out)
            held.shim_wait_holding_gil.argtypes = [POINTER(c_int), c_int, c_int]
            _shim = (lib, held)
    return _shim or None


_SPACE = 1 << 30                # device address space: reserved, readable, never written
_PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = c_void_p
_libc.mmap.argtypes = [c_void_p, c_size_t, c_int, c_int, c_int, ctypes.c_long]
_libc.madvise.argtypes = [c_void_p, c_size_t, c_int]
_libc.mincore.argtypes = [c_void_p, c_size_t, c_void_p]
_space = None
_space_next = 0
_space_high = 0                 # the highest offset ever handed out
_space_freed = []               # (base, rounded size) freed, reused last-freed first


def _space_base():
    global _space
    if _space is None:
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000      # MAP_NORESERVE
        base = _libc.mmap(None, _SPACE, mmap.PROT_READ, flags, -1, 0)
        if base in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "cannot reserve the fake device address space")
        _libc.madvise(base, _SPACE, 14)                             # MADV_NOHUGEPAGE
        _space = base
    return _space


def _space_alloc(nbytes, reuse=False):
    """An address range of the device space (256-aligned). reuse: a freed range of the same
    size is handed out again first, as the real allocator does (cuMemAlloc); otherwise a range
    never handed out twice in a row."""
    global _space_next, _space_high
    size = (max(nbytes, 1) + 255) & ~255
    if size > _SPACE:
        return None
    if reuse:
        for i in range(len(_space_freed) - 1, -1, -1):
            if _space_freed[i][1] == size:
                return _space_freed.pop(i)[0]
    if _space_next + size > _SPACE:
        _space_next = 0
    base = _space_base() + _space_next
    _space_next += size
    _space_high = max(_space_high, _space_next)
    return base


def _space_free(base, nbytes):
    _space_freed.append((base, (max(nbytes, 1) + 255) & ~255))


def _forget_reads():
    """Drop every page a host read brought in, so ``touched()`` starts clean."""
    _libc.madvise(_space_base(), _SPACE, 4)                         # MADV_DONTNEED


# -- the driver's objects ---------------------------------------------------------------------

class DriverError(Exception):
    def __init__(self, rc, why):
        super().__init__(why)
        self.rc = rc


class Context:
    def __init__(self, handle, device, primary):
        self.handle, self.device, self.primary = handle, device, primary
        self.active = not primary          # a primary context is active once retained
        self.retains = 0
        self.legacy = Stream(1, self, kind="legacy")
        self.per_thread = {}


class Stream:
    def __init__(self, handle, context, kind="user", nonblocking=False):
        self.handle, self.ctx, self.kind, self.nonblocking = handle, context, kind, nonblocking
        self.held = False
        self.ops = []                      # queued, not yet run, in order
        self.capture = None                # the Capture under way on this stream


class Capture:
    """A stream capture (cuStreamBeginCapture): work queued on the stream joins the graph
    instead of running; a prohibited call invalidates it, and cuStreamEndCapture then fails."""

    def __init__(self, stream, mode, thread):
        self.stream, self.mode, self.thread = stream, mode, thread
        self.ops = []                      # the graph's nodes, never run by the fake
        self.invalidated = None            # why, once a prohibited call was made


class Op:
    __slots__ = ("capture", "deps", "done", "ext", "fn", "label", "stream")

    def __init__(self, stream, deps, fn, label, ext=None):
        self.stream, self.deps, self.fn, self.label, self.done = stream, deps, fn, label, False
        self.ext = ext                     # a RemoteWait: runs once another process's GPU did
        self.capture = None                # the Capture whose graph holds it (never run here)


class Shared:
    """Bytes in a memfd mapping another process opens through /proc/<pid>/fd/<fd> (a handle
    names pid, fd and inode: a closed fd, a reused number or a gone process fails to open)."""

    def __init__(self, size, data=b""):
        self.fd = os.memfd_create("pydlpack-fake-cuda", 0)
        os.ftruncate(self.fd, max(size, 1))
        self.map = mmap.mmap(self.fd, max(size, 1))
        self.map[:len(data)] = data
        self.ino = os.fstat(self.fd).st_ino

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _open_shared(pid, fd, ino):
    """The mapping a handle names, or DriverError (CUDA_ERROR_INVALID_HANDLE)."""
    try:
        f = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR)
    except OSError as e:
        raise DriverError(CUDA_ERROR_INVALID_HANDLE, f"the handle's memory is gone (process "
                          f"{pid} exited, or freed it): {e}") from None
    try:
        if os.fstat(f).st_ino != ino:
            raise DriverError(CUDA_ERROR_INVALID_HANDLE, "the handle's memory was freed")
        return mmap.mmap(f, os.fstat(f).st_size)
    finally:
        os.close(f)


class RemoteWait:
    """A wait for an imported event: the exporter's record count when the wait was made must
    have completed there. The shared page holds records, completions and waiters (uint64)."""

    def __init__(self, page):
        self.page = page
        self.target = struct.unpack_from("<Q", page, 0)[0]
        self.announced = False

    def ready(self):
        return struct.unpack_from("<Q", self.page, 8)[0] >= self.target

    def announce(self):
        """Tell the exporter (``waiters()``) that this process waits."""
        if not self.announced:
            self.announced = True
            struct.pack_into("<Q", self.page, 16, struct.unpack_from("<Q", self.page, 16)[0] + 1)


class Event:
    def __init__(self, handle, context, flags=0):
        self.handle, self.ctx, self.op, self.flags = handle, context, None, flags
        self.shared = None                 # exported: the page other processes wait on
        self.remote = None                 # imported: the exporter's page


class Allocation:
    """Memory the driver knows: ``device`` and ``vmm_host`` bytes are kept in ``data`` (their
    addresses have no host mapping); ``pinned`` and ``managed`` are host memory at ``base``."""

    ids = 0                         # CU_POINTER_ATTRIBUTE_BUFFER_ID: unique in the process

    def __init__(self, base, size, kind, context, data=None, keep=None, allocated=False):
        self.base, self.size, self.kind, self.ctx = base, size, kind, context
        self.data, self.keep, self.allocated = data, keep, allocated
        self.shared = None                 # exported with cuIpcGetMemHandle: its memfd
        self.opened = None                 # kind "ipc": (exporter's key, times opened)
        self.aside = None                  # managed, fenced from the host: its bytes meanwhile
        Allocation.ids += 1
        self.buffer_id = Allocation.ids


class Result:
    """What a queued read (a consumer kernel) saw, once the GPU ran it; error: the kernel's
    failure (CUDA_ERROR_ILLEGAL_ADDRESS for memory of another context)."""
    value = None
    error = 0


class FakeDriver:
    """See the module docstring. ``attributes[ptr] = (memory type, ordinal, managed[, host
    pointer])`` overrides what cuPointerGetAttributes says of one exact pointer; ``fail[name] =
    rc`` makes an entry point fail (logged ``(name, "failed")``)."""

    hang_timeout = 2.0

    def __init__(self):
        self.calls = []
        self.fail = {}
        self.attributes = {}
        self.gil_held = []                 # blocking calls made with the caller holding the GIL
        self.undefined = []                # calls whose effect libcuda leaves undefined
        self.max_pitch = 2**31 - 1
        self.concurrent_managed = 1        # CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS
        self.waiting = threading.Event()   # set when a call starts waiting for a held stream
        self.contexts = {}
        self.streams = {}
        self.events = {}
        self.allocations = {}              # base -> Allocation
        self._stacks = {}                  # thread ident -> context stack
        self._cond = threading.Condition(threading.Lock())
        self._released = c_int(0)          # bumped by release(); a C spin watches it
        self._next_context = 0xC800
        self._next_stream = 0x5000
        self.uuid_order = list(range(DEVICE_COUNT))    # ordinal -> the physical GPU
        self._ipc_open = {}                # exporter's (pid, fd, inode) -> base opened here
        self._external = None              # the RemoteWait that stopped _advance last
        self.graphs = []                   # every capture ended, in order
        shim = _load_shim()
        self._callbacks = {}
        for name, args in _SIGNATURES.items():
            if not shim and name in _BY_VALUE:
                args = list(args)
                args[_BY_VALUE[name]] = IpcHandle
            self._callbacks[name] = ctypes.CFUNCTYPE(c_int, *args)(self._entry(name))
        self._pydll = shim[1] if shim else None
        self._entries = {}
        for name, fn in self._callbacks.items():
            address = ctypes.cast(fn, c_void_p).value
            if shim:
                address = shim[0].shim_route(name.encode(), address)
            self._entries[name] = address

    def symbols(self):
        return dict(self._entries)

    # -- the calling thread --------------------------------------------------------------------

    @property
    def current(self):
        """The calling thread's context stack (handles)."""
        return self._stacks.setdefault(threading.get_ident(), [])

    def stacks_empty(self):
        return all(not s for s in self._stacks.values())

    def _caller_held_gil(self):
        shim = _load_shim()
        return bool(shim and shim[0].shim_caller_held_gil())

    def _context(self, need=True):
        stack = self.current
        if not stack:
            if need:
                raise DriverError(CUDA_ERROR_INVALID_CONTEXT, "no current context")
            return None
        c = self.contexts[stack[-1]]
        if need and c.primary and not c.active:
            raise DriverError(CUDA_ERROR_CONTEXT_IS_DESTROYED, "the current primary context "
                              "was reset")
        return c

    def _entry(self, name):
        short = name.removesuffix("_v2")
        impl = getattr(self, "_" + short)

        def entry(*args):
            with self._cond:
                if short in BLOCKING and self._caller_held_gil():
                    self.gil_held.append(short)
                if short in _NEEDS_CONTEXT and not self.current:
                    self.calls.append((short, "no context"))
                    return CUDA_ERROR_INVALID_CONTEXT
                if short == "cuGetErrorName":
                    return self._cuGetErrorName(*args)
                if short in self.fail:
                    self.calls.append((short, "failed"))    # as libcuda's: no effect at all
                    return self.fail[short]
                try:
                    if short in _NEEDS_CONTEXT:
                        self._context()
                    if short in _UNSAFE_IN_CAPTURE:
                        self._capture_safe(short)
                    logged = impl(*args)
                except DriverError as e:
                    self.calls.append((short, "error", e.rc, str(e)))
                    return e.rc
                except Exception as e:             # a bug in the fake or in the caller
                    self.calls.append((short, "raised", repr(e)))
                    return 999
                finally:
                    self._fence_managed()
                self.calls.append((short, *logged))
                return 0
        return entry

    # -- memory --------------------------------------------------------------------------------

    def _find(self, ptr, nbytes):
        """(allocation, offset) of [ptr, ptr + nbytes), inside one allocation, or None."""
        for a in self.allocations.values():
            if a.base <= ptr and ptr + nbytes <= a.base + a.size and (nbytes or ptr < a.base
                                                                      + a.size):
                return a, ptr - a.base
        return None

    def _region(self, ptr, nbytes, what):
        found = self._find(ptr, nbytes)
        if found is None:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"{what} {ptr:#x} (+{nbytes}) is not "
                              "memory the driver knows")
        return found

    def _get(self, ptr, nbytes):
        a, off = self._region(ptr, nbytes, "source")
        held = a.data if a.data is not None else a.aside
        if held is not None:
            return bytes(held[off:off + nbytes])
        return ctypes.string_at(ptr, nbytes)

    def _put(self, ptr, data):
        a, off = self._region(ptr, len(data), "destination")
        held = a.data if a.data is not None else a.aside
        if held is not None:
            held[off:off + len(data)] = data
        else:
            ctypes.memmove(ptr, data, len(data))

    def _fence_managed(self):
        """Without CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS the host may not touch managed
        memory while work is queued on its device (libcuda: SIGSEGV): its bytes are kept aside
        and the host sees POISON until the device is idle (after every call and helper)."""
        busy = {}
        for a in self.allocations.values():
            if a.kind != "managed":
                continue
            device = a.ctx.device
            if device not in busy:
                busy[device] = not self.concurrent_managed and any(
                    True for _ in self._all_ops(device))
            if busy[device] and a.aside is None:
                a.aside = bytearray(ctypes.string_at(a.base, a.size))
                ctypes.memset(a.base, POISON, a.size)
            elif not busy[device] and a.aside is not None:
                ctypes.memmove(a.base, bytes(a.aside), a.size)
                a.aside = None

    def _host(self, ptr, nbytes, what):
        """A host buffer argument: never an address of the device space."""
        base = _space_base()
        if base <= ptr < base + _SPACE:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"{what} {ptr:#x} is device memory")
        return ptr

    def _pinned(self, ptr, nbytes):
        found = self._find(ptr, nbytes)
        return found is not None and found[0].kind in ("pinned", "managed")

    # -- queues --------------------------------------------------------------------------------

    def _resolve(self, handle, same_context=True):
        """The Stream a handle names for the calling thread."""
        if handle in (None, 0, 1, 2):
            c = self._context()
            if handle == 2:
                return c.per_thread.setdefault(threading.get_ident(),
                                               Stream(2, c, kind="per_thread"))
            return c.legacy
        s = self.streams.get(handle)
        if s is None:
            raise DriverError(CUDA_ERROR_INVALID_HANDLE, f"stream {handle:#x} does not exist")
        if same_context and s.ctx is not self._context():
            raise DriverError(CUDA_ERROR_INVALID_HANDLE, f"stream {handle:#x} belongs to "
                              f"context {s.ctx.handle:#x}, not the current one")
        return s

    def _blocking(self, context):
        """The streams the legacy stream of a context orders against."""
        found = [s for s in self.streams.values() if s.ctx is context and not s.nonblocking]
        return found + list(context.per_thread.values())

    def _captures(self, context=None):
        """The captures under way (of context's streams only, where given)."""
        for c in self.contexts.values():
            if context is None or c is context:
                for s in [*c.per_thread.values(), *[s for s in self.streams.values()
                                                    if s.ctx is c]]:
                    if s.capture is not None:
                        yield s.capture

    def _capture_safe(self, name):
        """A call that may synchronise, during a global capture (any thread's) or this thread's
        thread-local one: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and those captures invalid."""
        me = threading.get_ident()
        bad = [c for c in self._captures() if c.mode == CU_STREAM_CAPTURE_MODE_GLOBAL
               or (c.mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL and c.thread == me)]
        if bad:
            self._invalidate(bad, f"{name} during capture")
            raise DriverError(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, f"{name} may synchronise: "
                              "not permitted while a stream is capturing")

    def _invalidate(self, captures, why):
        for c in captures:
            if c.invalidated is None:
                c.invalidated = why

    def _legacy_use(self, stream, name):
        """The legacy stream synchronises with the blocking streams of its context: using it
        while one of them captures is CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, and invalidates it."""
        if stream.kind != "legacy":
            return
        bad = [c for c in self._captures(stream.ctx) if not c.stream.nonblocking]
        if bad:
            self._invalidate(bad, f"{name} on the legacy stream during capture")
            raise DriverError(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, f"{name}: the legacy stream "
                              "while a blocking stream of its context is capturing")

    def _enqueue(self, stream, fn, label, deps=(), ext=None):
        self._legacy_use(stream, label)
        if stream.capture is not None:      # a node of the graph: never run by the fake
            op = Op(stream, [], fn, label, ext)
            op.capture = stream.capture
            stream.capture.ops.append(op)
            return op
        d = [o for o in deps if o is not None and not o.done]
        if stream.ops:
            d.append(stream.ops[-1])
        if stream.kind == "legacy":
            d += [s.ops[-1] for s in self._blocking(stream.ctx) if s.ops]
        elif not stream.nonblocking and stream.ctx.legacy.ops:
            d.append(stream.ctx.legacy.ops[-1])
        op = Op(stream, d, fn, label, ext)
        stream.ops.append(op)
        return op

    def _advance(self, target):
        """Run target and what it depends on; False when a held stream stops it."""
        stack = [target]
        while stack:
            op = stack[-1]
            if op.done:
                stack.pop()
                continue
            pending = [d for d in op.deps if not d.done]
            if pending:
                stack.append(pending[0])
                continue
            if op.stream.held:
                return False
            if op.ext is not None and not op.ext.ready():
                self._external = op.ext
                return False
            assert op.stream.ops[0] is op
            op.stream.ops.pop(0)
            op.done = True
            if op.fn is not None:
                op.fn()
            stack.pop()
        return True

    def _complete(self, op, name):
        """Wait (as the host) until op has run: DriverError 702 when that hangs."""
        deadline = time.monotonic() + self.hang_timeout
        self._external = None
        while not self._advance(op):
            if self._external is not None:
                self._poll(self._external, deadline)
                self._external = None
            else:
                self._wait(name)

    def _poll(self, remote, deadline):
        """Wait for another process's GPU (an imported event): 702 past the deadline."""
        remote.announce()
        if time.monotonic() > deadline:
            raise DriverError(CUDA_ERROR_LAUNCH_TIMEOUT, "hung: waits for another process")
        self._cond.release()
        try:
            time.sleep(0.002)
        finally:
            self._cond.acquire()

    def _wait(self, name):
        self.waiting.set()
        seen = self._released.value
        deadline = time.monotonic() + self.hang_timeout
        if self._caller_held_gil() and self._pydll is not None:
            # Only Python (``release``) opens a held stream, and no other Python thread runs
            # while the caller holds the GIL: this is the hang, for hang_timeout seconds (in C:
            # the interpreter's loop would hand the GIL over between Python-level sleeps).
            self._cond.release()
            try:
                changed = self._pydll.shim_wait_holding_gil(ctypes.byref(self._released), seen,
                                                            int(self.hang_timeout * 1000))
            finally:
                self._cond.acquire()
        else:
            while self._released.value == seen and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            changed = self._released.value != seen
        if not changed:
            raise DriverError(CUDA_ERROR_LAUNCH_TIMEOUT, "hung: waits for a held stream")

    def _all_ops(self, device=None):
        for c in self.contexts.values():
            if device is None or c.device == device:
                for s in [c.legacy, *c.per_thread.values(),
                          *[s for s in self.streams.values() if s.ctx is c]]:
                    yield from list(s.ops)

    def _drain(self, device, name):
        """The host waits until every stream of device is idle (cuMemFree does)."""
        while True:
            ops = list(self._all_ops(device))
            if not ops:
                return
            self._complete(ops[-1], name)
            for op in ops:
                self._complete(op, name)

    def _sync(self, stream, name):
        """Synchronous calls: the host waits for the stream's queued work (legacy semantics)."""
        self._complete(self._enqueue(stream, None, "sync"), name)

    # -- the entry points: each returns the arguments worth logging ----------------------------

    def _cuInit(self, flags):
        return (flags,)

    def _cuGetErrorName(self, rc, out):
        """Not logged; an unknown code gives CUDA_ERROR_INVALID_VALUE and NULL."""
        out[0] = _ERROR_NAMES.get(rc)
        return 0 if out[0] else CUDA_ERROR_INVALID_VALUE

    def _cuCtxGetCurrent(self, out):
        stack = self.current
        out[0] = stack[-1] if stack else None
        return ()

    def _cuPointerGetAttributes(self, n, attrs, values, ptr):
        mem, ordinal, managed, host, context = self._pointer(ptr)
        found = self._find(ptr, 0) if ptr not in self.attributes else None
        for i in range(n):
            a, v = attrs[i], values[i]
            if a == 1:
                c_void_p.from_address(v).value = context
            elif a == 7:
                c_uint64.from_address(v).value = found[0].buffer_id if found else 0
            elif a == 2:
                c_uint.from_address(v).value = mem
            elif a == 4:
                c_void_p.from_address(v).value = host
            elif a == 8:
                c_uint.from_address(v).value = managed
            elif a == 9:
                c_int.from_address(v).value = ordinal
            elif a == 10:                   # CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE
                c_int.from_address(v).value = int(found is not None
                                                  and found[0].kind == "device")
            else:
                raise DriverError(CUDA_ERROR_INVALID_VALUE, f"attribute {a}")
        return (ptr,)

    def _pointer(self, ptr):
        if ptr in self.attributes:
            mem, ordinal, managed, *host = self.attributes[ptr]
            return mem, ordinal, int(managed), (host[0] if host else ptr), None
        found = self._find(ptr, 0)
        if found is None:
            return 0, -2, 0, None, None
        a = found[0]
        device = a.ctx.device
        return {"device": (CU_MEMORYTYPE_DEVICE, device, 0, None, a.ctx.handle),
                "pinned": (CU_MEMORYTYPE_HOST, device, 0, ptr, a.ctx.handle),
                "managed": (CU_MEMORYTYPE_DEVICE, device, 1, ptr, a.ctx.handle),
                "vmm_host": (CU_MEMORYTYPE_HOST, device, 0, None, a.ctx.handle),
                "ipc": (CU_MEMORYTYPE_DEVICE, device, 0, None, a.ctx.handle),
                "pool": (CU_MEMORYTYPE_DEVICE, device, 0, None, None)}[a.kind]

    def _cuDeviceGet(self, out, ordinal):
        if not 0 <= ordinal < DEVICE_COUNT:
            raise DriverError(CUDA_ERROR_INVALID_DEVICE, f"no device {ordinal}")
        out[0] = ordinal
        return (ordinal,)

    def _cuDeviceGetCount(self, out):
        out[0] = DEVICE_COUNT
        return ()

    def _cuDeviceGetAttribute(self, out, attribute, dev):
        values = {CU_DEVICE_ATTRIBUTE_MAX_PITCH: self.max_pitch,
                  CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: self.concurrent_managed}
        if attribute not in values or not 0 <= dev < DEVICE_COUNT:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"attribute {attribute} of {dev}")
        out[0] = values[attribute]
        return (attribute, dev)

    def _cuCtxSynchronize(self):
        """The host waits for every stream of the current context's device."""
        self._drain(self._context().device, "cuCtxSynchronize")
        return ()

    def primary(self, device, retain=False):
        """device's primary context; retain: as the library that made a stream or memory in it
        (torch, CuPy) did."""
        c = self.contexts.get(ctx(device))
        if c is None:
            c = self.contexts[ctx(device)] = Context(ctx(device), device, primary=True)
        if retain and not c.active:
            c.active = True
            c.retains += 1
        return c

    def _cuDevicePrimaryCtxRetain(self, out, dev):
        if not 0 <= dev < DEVICE_COUNT:
            raise DriverError(CUDA_ERROR_INVALID_DEVICE, f"no device {dev}")
        c = self.primary(dev)
        c.active = True
        c.retains += 1
        out[0] = c.handle
        return (dev,)

    def _cuDevicePrimaryCtxGetState(self, dev, flags, active):
        flags[0] = 0
        active[0] = int(self.primary(dev).active)
        return (dev,)

    def _cuCtxPushCurrent(self, context):
        if context not in self.contexts:
            raise DriverError(CUDA_ERROR_INVALID_CONTEXT, f"no context {context}")
        self.current.append(context)
        return (context,)

    def _cuCtxPopCurrent(self, out):
        if not self.current:
            raise DriverError(CUDA_ERROR_INVALID_CONTEXT, "nothing to pop")
        out[0] = self.current.pop()
        return ()

    def _cuStreamGetCtx(self, stream, out):
        if stream not in (None, 0, 1, 2) and stream not in self.streams:
            self.undefined.append(("cuStreamGetCtx", stream))
        out[0] = self._resolve(stream, same_context=False).ctx.handle
        return (stream,)

    def _new_event(self, flags):
        handle = EVENT
        while handle in self.events:
            handle += 1
        self.events[handle] = Event(handle, self._context(), flags)
        return handle

    def _cuEventCreate(self, out, flags):
        if flags & CU_EVENT_INTERPROCESS and not flags & CU_EVENT_DISABLE_TIMING:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, "CU_EVENT_INTERPROCESS needs "
                              "CU_EVENT_DISABLE_TIMING")
        out[0] = self._new_event(flags)
        return (flags,)

    def _event(self, handle):
        e = self.events.get(handle)
        if e is None:
            raise DriverError(CUDA_ERROR_INVALID_HANDLE, f"no event {handle}")
        return e

    def _cuEventRecord(self, event, stream):
        e, s = self._event(event), self._resolve(stream)
        if e.ctx is not s.ctx:
            raise DriverError(CUDA_ERROR_INVALID_HANDLE, f"event of context {e.ctx.handle:#x} "
                              f"recorded on a stream of context {s.ctx.handle:#x}")
        done = None
        if e.shared is not None:            # exported: other processes see the completion
            page = e.shared.map
            seq = struct.unpack_from("<Q", page, 0)[0] + 1
            struct.pack_into("<Q", page, 0, seq)

            def done():
                if not page.closed:
                    struct.pack_into("<Q", page, 8, max(seq, struct.unpack_from("<Q", page, 8)[0]))
        e.op = self._enqueue(s, done, f"record {event:#x}")
        return (event, stream)

    def _cuStreamWaitEvent(self, stream, event, flags):
        e, s = self._event(event), self._resolve(stream)
        captured = e.op is not None and e.op.capture is not None
        if s.capture is not None and not captured:
            self._invalidate([s.capture], "a wait for an event recorded outside the capture")
            raise DriverError(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, f"event {event:#x} was not "
                              f"recorded in the capture of stream {stream:#x}")
        if s.capture is None and captured:
            raise DriverError(CUDA_ERROR_CAPTURED_EVENT, f"event {event:#x} was recorded in a "
                              "capture")
        if s.capture is not None:
            self._enqueue(s, None, f"wait {event:#x}")
        elif e.remote is not None:
            self._enqueue(s, None, f"wait {event:#x}", ext=RemoteWait(e.remote))
        else:
            self._enqueue(s, None, f"wait {event:#x}", deps=[e.op])
        return (stream, event, flags)

    def _cuEventDestroy(self, event):
        e = self._event(event)
        del self.events[event]
        if e.shared is not None:
            e.shared.close()
        return (event,)

    def _cuStreamSynchronize(self, stream):
        s = self._resolve(stream)
        if s.capture is not None:
            self._invalidate([s.capture], "cuStreamSynchronize of the capturing stream")
            raise DriverError(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, f"stream {stream:#x} is "
                              "capturing")
        self._sync(s, "cuStreamSynchronize")
        return (stream,)

    def _cuStreamBeginCapture(self, stream, mode):
        s = self._resolve(stream)
        if s.kind == "legacy":
            raise DriverError(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "the legacy stream cannot "
                              "be captured")
        if s.capture is not None:
            raise DriverError(CUDA_ERROR_ILLEGAL_STATE, f"stream {stream:#x} is capturing")
        if mode not in (CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                        CU_STREAM_CAPTURE_MODE_RELAXED):
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"mode {mode}")
        s.capture = Capture(s, mode, threading.get_ident())
        return (stream, mode)

    def _cuStreamEndCapture(self, stream, graph):
        s = self._resolve(stream)
        c = s.capture
        if c is None:
            raise DriverError(CUDA_ERROR_ILLEGAL_STATE, f"stream {stream:#x} is not capturing")
        s.capture = None
        self.graphs.append(c)
        graph[0] = None if c.invalidated else 0x6000 + len(self.graphs)
        if c.invalidated:
            raise DriverError(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, c.invalidated)
        return (stream,)

    def _cuStreamIsCapturing(self, stream, status):
        s = self._resolve(stream)
        self._legacy_use(s, "cuStreamIsCapturing")
        c = s.capture
        status[0] = (CU_STREAM_CAPTURE_STATUS_NONE if c is None else
                     CU_STREAM_CAPTURE_STATUS_INVALIDATED if c.invalidated else
                     CU_STREAM_CAPTURE_STATUS_ACTIVE)
        return (stream,)

    def _cuEventSynchronize(self, event):
        """The host waits for the work before the event's record (none if never recorded)."""
        e = self._event(event)
        if e.op is not None and e.op.capture is not None:
            raise DriverError(CUDA_ERROR_CAPTURED_EVENT, f"event {event:#x} was recorded in a "
                              "capture")
        if e.remote is not None:
            remote, deadline = RemoteWait(e.remote), time.monotonic() + self.hang_timeout
            while not remote.ready():
                self._poll(remote, deadline)
        elif e.op is not None:
            self._complete(e.op, "cuEventSynchronize")
        return (event,)

    def _cuMemAlloc(self, out, nbytes):
        if nbytes == 0:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, "zero bytes")
        base = _space_alloc(nbytes, reuse=True)
        if base is None:
            raise DriverError(CUDA_ERROR_OUT_OF_MEMORY, f"{nbytes} bytes")
        self.allocations[base] = Allocation(base, nbytes, "device", self._context(),
                                            bytearray([POISON]) * nbytes, allocated=True)
        out[0] = base
        return (nbytes,)

    def _cuMemAllocAsync(self, out, nbytes, stream):
        """Pool memory (no context), usable by work queued on stream after this call."""
        s = self._resolve(stream)
        if nbytes == 0:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, "zero bytes")
        base = _space_alloc(nbytes, reuse=True)
        if base is None:
            raise DriverError(CUDA_ERROR_OUT_OF_MEMORY, f"{nbytes} bytes")
        self.allocations[base] = Allocation(base, nbytes, "pool", s.ctx,
                                            bytearray([POISON]) * nbytes, allocated=True)
        self._enqueue(s, None, f"alloc {base:#x}")
        out[0] = base
        return (nbytes, stream)

    def _cuMemFreeAsync(self, ptr, stream):
        """Freed once the work queued on stream before it has run; work of other streams not
        ordered before it (the caller's job: an event) finds the memory gone."""
        a = self.allocations.get(ptr)
        if a is None or not a.allocated or a.kind != "pool":
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"{ptr:#x} was not cuMemAllocAsync's")
        s = self._resolve(stream)

        def free():
            if self.allocations.get(ptr) is a:
                del self.allocations[ptr]
                _space_free(ptr, a.size)
        a.allocated = False                 # a second free is refused
        self._enqueue(s, free, f"free {ptr:#x}")
        return (ptr, stream)

    def _cuMemcpyHtoDAsync(self, dst, src, nbytes, stream):
        """Ordered on stream only; from pageable memory the bytes are staged before it returns,
        from pinned memory they are read when the copy runs."""
        self._host(src, nbytes, "source")
        self._region(dst, nbytes, "destination")
        s = self._resolve(stream)
        if self._pinned(src, nbytes):
            self._enqueue(s, lambda: self._put(dst, ctypes.string_at(src, nbytes)),
                          f"HtoD {dst:#x}")
        else:
            data = ctypes.string_at(src, nbytes)
            self._enqueue(s, lambda: self._put(dst, data), f"HtoD {dst:#x}")
        return (dst, nbytes, stream)

    def _cuMemFree(self, ptr):
        a = self.allocations.get(ptr)
        if a is None or not a.allocated or a.kind not in ("device", "managed"):
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"{ptr:#x} was not allocated")
        self._drain(a.ctx.device, "cuMemFree")
        del self.allocations[ptr]
        if a.shared is not None:
            a.shared.close()                # its handle no longer opens
        if a.kind == "device":
            _space_free(ptr, a.size)
        return (ptr,)

    def _host_memory(self, kind, nbytes):
        """Pinned or managed memory the driver allocates: host memory it keeps."""
        if nbytes == 0:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, "zero bytes")
        buffer = (ctypes.c_ubyte * nbytes)()
        base = ctypes.addressof(buffer)
        self.allocations[base] = Allocation(base, nbytes, kind, self._context(), keep=buffer,
                                            allocated=True)
        return base

    def _cuMemHostAlloc(self, out, nbytes, flags):
        out[0] = self._host_memory("pinned", nbytes)
        return (nbytes, flags)

    def _cuMemFreeHost(self, ptr):
        a = self.allocations.get(ptr)
        if a is None or not a.allocated or a.kind != "pinned":
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"{ptr:#x} was not cuMemHostAlloc's")
        del self.allocations[ptr]
        return (ptr,)

    def _cuMemAllocManaged(self, out, nbytes, flags):
        if flags not in (1, 2):             # CU_MEM_ATTACH_GLOBAL or CU_MEM_ATTACH_HOST
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"flags {flags}")
        out[0] = self._host_memory("managed", nbytes)
        return (nbytes, flags)

    def _cuMemcpyDtoH(self, dst, src, nbytes):
        self._host(dst, nbytes, "destination")
        self._region(src, nbytes, "source")
        self._sync(self._resolve(1), "cuMemcpyDtoH")    # the legacy stream's work comes first
        ctypes.memmove(dst, self._get(src, nbytes), nbytes)
        return (src, nbytes)

    def _cuMemcpyHtoD(self, dst, src, nbytes):
        self._host(src, nbytes, "source")
        self._region(dst, nbytes, "destination")
        legacy = self._resolve(1)
        self._sync(legacy, "cuMemcpyHtoD")      # "a stream sync is performed before the copy"
        data = ctypes.string_at(src, nbytes)
        if self._pinned(src, nbytes):
            self._put(dst, data)                # from pinned memory: synchronous
        else:                                   # from pageable memory: staged, lands later
            self._enqueue(legacy, lambda: self._put(dst, data), f"HtoD {dst:#x}")
        return (dst, nbytes)

    def _cuMemcpy2D(self, p):
        c = p.contents
        if c.srcXInBytes or c.srcY or c.dstXInBytes or c.dstY:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, "offsets are not modelled")
        for side in ("src", "dst"):
            pitch = getattr(c, side + "Pitch")
            if pitch > self.max_pitch or (c.Height > 1 and pitch < c.WidthInBytes):
                raise DriverError(CUDA_ERROR_INVALID_VALUE, f"{side}Pitch {pitch} for rows of "
                                  f"{c.WidthInBytes} bytes (maximum {self.max_pitch})")
        if (c.srcMemoryType, c.dstMemoryType) != (CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST):
            raise DriverError(CUDA_ERROR_INVALID_VALUE, "only device to host is modelled")
        rows = [(c.srcDevice + r * c.srcPitch, c.dstHost + r * c.dstPitch)
                for r in range(c.Height)]
        for src, dst in rows:
            self._host(dst, c.WidthInBytes, "destination")
            self._region(src, c.WidthInBytes, "source")
        self._sync(self._resolve(1), "cuMemcpy2D")
        for src, dst in rows:
            ctypes.memmove(dst, self._get(src, c.WidthInBytes), c.WidthInBytes)
        return (c.srcDevice, c.WidthInBytes, c.Height, c.srcPitch)

    def _cuMemcpy3D(self, p):
        """Device to host only: Depth slices of Height rows; a slice starts Pitch x Height bytes
        after the previous one on each side (each Height at least the rows copied)."""
        c = p.contents
        if (c.srcXInBytes or c.srcY or c.srcZ or c.dstXInBytes or c.dstY or c.dstZ
                or c.srcLOD or c.dstLOD):
            raise DriverError(CUDA_ERROR_INVALID_VALUE, "offsets are not modelled")
        for side in ("src", "dst"):
            pitch, height = getattr(c, side + "Pitch"), getattr(c, side + "Height")
            if pitch > self.max_pitch or pitch < c.WidthInBytes or height < c.Height:
                raise DriverError(CUDA_ERROR_INVALID_VALUE, f"{side}Pitch {pitch} and "
                                  f"{side}Height {height} for {c.Height} rows of "
                                  f"{c.WidthInBytes} bytes (maximum pitch {self.max_pitch})")
        if (c.srcMemoryType, c.dstMemoryType) != (CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST):
            raise DriverError(CUDA_ERROR_INVALID_VALUE, "only device to host is modelled")
        rows = [(c.srcDevice + (z * c.srcHeight + y) * c.srcPitch,
                 c.dstHost + (z * c.dstHeight + y) * c.dstPitch)
                for z in range(c.Depth) for y in range(c.Height)]
        for src, dst in rows:
            self._host(dst, c.WidthInBytes, "destination")
            self._region(src, c.WidthInBytes, "source")
        self._sync(self._resolve(1), "cuMemcpy3D")
        for src, dst in rows:
            ctypes.memmove(dst, self._get(src, c.WidthInBytes), c.WidthInBytes)
        return (c.srcDevice, c.WidthInBytes, c.Height, c.Depth, c.srcPitch, c.srcHeight)

    def _cuMemcpyDtoDAsync(self, dst, src, nbytes, stream):
        self._region(src, nbytes, "source")
        self._region(dst, nbytes, "destination")
        s = self._resolve(stream)
        self._enqueue(s, lambda: self._put(dst, self._get(src, nbytes)), f"DtoD {dst:#x}")
        return (dst, src, nbytes, stream)

    # -- IPC ------------------------------------------------------------------------------------

    def _cuMemGetAddressRange(self, base, size, ptr):
        found = self._find(ptr, 0)
        if found is None:
            raise DriverError(CUDA_ERROR_NOT_FOUND, f"{ptr:#x} is not memory the driver knows")
        if base:
            base[0] = found[0].base
        if size:
            size[0] = found[0].size
        return (ptr,)

    def _cuDeviceGetUuid(self, out, dev):
        if not 0 <= dev < DEVICE_COUNT:
            raise DriverError(CUDA_ERROR_INVALID_DEVICE, f"no device {dev}")
        out[0][:] = uuid(self.uuid_order[dev])
        return (dev,)

    def _cuIpcGetMemHandle(self, out, ptr):
        a = self.allocations.get(ptr)
        if a is None or a.kind != "device":
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"{ptr:#x} is not the base of device "
                              "memory made by cuMemAlloc")
        if a.shared is None:                # its bytes move to a mapping others can open
            a.shared = Shared(a.size, bytes(a.data))
            a.data = a.shared.map
        out[0].reserved[:] = _pack(b"FAKEIPCM", a.shared, a.size)
        return (ptr,)

    def _cuIpcOpenMemHandle(self, out, handle, flags):
        pid, fd, ino, size = _unpack(b"FAKEIPCM", handle)
        if flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"flags {flags}")
        if pid == os.getpid():
            raise DriverError(CUDA_ERROR_INVALID_CONTEXT, "opened in the process that made it")
        key = (pid, fd, ino)
        if key in self._ipc_open:           # as libcuda: the same pointer, counted
            a = self.allocations[self._ipc_open[key]]
            a.opened = (key, a.opened[1] + 1)
        else:
            data = _open_shared(pid, fd, ino)
            base = _space_alloc(size)
            a = self.allocations[base] = Allocation(base, size, "ipc", self._context(), data)
            a.opened = (key, 1)
            self._ipc_open[key] = base
        out[0] = a.base
        return (a.base, flags)

    def _cuIpcCloseMemHandle(self, ptr):
        a = self.allocations.get(ptr)
        if a is None or a.kind != "ipc":
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"{ptr:#x} is not an open IPC handle")
        key, count = a.opened
        a.opened = (key, count - 1)
        if count == 1:
            self._drain(a.ctx.device, "cuIpcCloseMemHandle")
            del self.allocations[ptr], self._ipc_open[key]
            _space_free(ptr, a.size)
        return (ptr,)

    def _cuIpcGetEventHandle(self, out, event):
        e = self._event(event)
        if not e.flags & CU_EVENT_INTERPROCESS or e.remote is not None:
            raise DriverError(CUDA_ERROR_INVALID_HANDLE, f"event {event:#x} was not made with "
                              "CU_EVENT_INTERPROCESS")
        if e.shared is None:
            e.shared = Shared(24)
        out[0].reserved[:] = _pack(b"FAKEIPCE", e.shared, 24)
        return (event,)

    def _cuIpcOpenEventHandle(self, out, handle):
        pid, fd, ino, _ = _unpack(b"FAKEIPCE", handle)
        if pid == os.getpid():
            raise DriverError(CUDA_ERROR_INVALID_CONTEXT, "opened in the process that made it")
        page = _open_shared(pid, fd, ino)
        event = self._new_event(CU_EVENT_DISABLE_TIMING)
        self.events[event].remote = page
        out[0] = event
        return (event,)

    def waiters(self):
        """Processes that waited (or wait) on events this process exported."""
        return sum(struct.unpack_from("<Q", e.shared.map, 16)[0] for e in self.events.values()
                   if e.shared is not None and e.shared.fd is not None)

    def pool(self, data, device=0):
        """Stream-ordered pool memory (cuMemAllocAsync): device memory of no context, which
        cuIpcGetMemHandle refuses."""
        data = bytes(data)
        return self._memory("pool", len(data), device, None, bytearray(data))

    # -- what tests do with the fake GPU -------------------------------------------------------

    def context(self, device=0):
        """A context other than the primary one (cuCtxCreate, PyCUDA, a green context)."""
        handle = self._next_context
        self._next_context += 1
        self.contexts[handle] = Context(handle, device, primary=False)
        return handle

    def stream(self, handle=None, device=0, context=None, nonblocking=False):
        """A stream of context (device's primary one by default); returns its handle."""
        if handle is None:
            handle = self._next_stream
            self._next_stream += 1
        c = self.contexts[context] if context is not None else self.primary(device, True)
        self.streams[handle] = Stream(handle, c, nonblocking=nonblocking)
        return handle

    def _stream(self, handle, device=0):
        if handle in (1, 2):
            c = self.primary(device, True)
            if handle == 1:
                return c.legacy
            return c.per_thread.setdefault(threading.get_ident(), Stream(2, c, "per_thread"))
        return self.streams[handle]

    def begin_capture(self, stream, mode=CU_STREAM_CAPTURE_MODE_GLOBAL, device=0):
        """cuStreamBeginCapture on a stream (torch.cuda.graph's is global) by this thread."""
        with self._cond:
            s = self._stream(stream, device)
            assert s.kind != "legacy" and s.capture is None
            s.capture = Capture(s, mode, threading.get_ident())

    def end_capture(self, stream, device=0):
        """cuStreamEndCapture: the Capture, whose ``invalidated`` says why it would fail."""
        with self._cond:
            s = self._stream(stream, device)
            c, s.capture = s.capture, None
            self.graphs.append(c)
            return c

    def hold(self, stream, device=0):
        """Hold a stream shut (as cuStreamWaitValue32 on a host flag) until ``release``."""
        with self._cond:
            self._stream(stream, device).held = True

    def release(self, stream, device=0):
        with self._cond:
            self._stream(stream, device).held = False
            self._released.value += 1
            self._cond.notify_all()

    def _memory(self, kind, size, device, context, data=None, base=None, keep=None):
        c = self.contexts[context] if context is not None else self.primary(device, True)
        if base is None:
            base = _space_alloc(size)
        self.allocations[base] = Allocation(base, size, kind, c, data, keep)
        return base

    def device_array(self, data, device=0, context=None):
        """Device memory holding data (bytes, or a ctypes array), as if a kernel wrote it."""
        data = bytes(data)
        return self._memory("device", len(data), device, context, bytearray(data))

    def library_alloc(self, nbytes, device=0):
        """Another library's cuMemAlloc in device's primary context (freed addresses reused)."""
        with self._cond:
            c = self.primary(device, True)
            base = _space_alloc(nbytes, reuse=True)
            self.allocations[base] = Allocation(base, nbytes, "device", c,
                                                bytearray(nbytes), allocated=True)
        return base

    def pinned(self, obj, device=0, context=None):
        """Host memory of a ctypes object, registered with the driver (cuMemHostRegister)."""
        return self._memory("pinned", ctypes.sizeof(obj), device, context,
                            base=ctypes.addressof(obj), keep=obj)

    def managed(self, obj, device=0, context=None):
        """Managed memory, host-accessible: a ctypes object's."""
        return self._memory("managed", ctypes.sizeof(obj), device, context,
                            base=ctypes.addressof(obj), keep=obj)

    def vmm_host(self, data, device=0, context=None):
        """Host-NUMA VMM memory (cuMemCreate on a host NUMA node, cuMemMap): CU_MEMORYTYPE_HOST
        without a host mapping."""
        data = bytes(data)
        return self._memory("vmm_host", len(data), device, context, bytearray(data))

    def kernel(self, stream, ptr, data, device=0):
        """Queue a write of data at ptr on stream: a kernel's output, seen once it runs."""
        with self._cond:
            data = bytes(data)
            self._enqueue(self._stream(stream, device), lambda: self._put(ptr, data),
                          f"kernel {ptr:#x}")
            self._fence_managed()

    def record(self, stream, device=0):
        """An event recorded on stream now, in the stream's context (a producer's, such as an
        Arrow sync_event); handles from 0xE100, apart from the ones pydlpack makes."""
        with self._cond:
            s = self._stream(stream, device)
            handle = 0xE100
            while handle in self.events:
                handle += 1
            e = self.events[handle] = Event(handle, s.ctx)
            e.op = self._enqueue(s, None, f"record {handle:#x}")
            self._fence_managed()
        return handle

    def wait_event(self, stream, event, device=0):
        """Queue on stream a wait for an event (a consumer honouring a sync_event)."""
        with self._cond:
            self._enqueue(self._stream(stream, device), None, f"wait {event:#x}",
                          deps=[self.events[event].op])
            self._fence_managed()

    def consume(self, stream, ptr, nbytes, device=0):
        """Queue a read of nbytes at ptr on stream (a consumer's kernel); its Result fills in
        when the GPU runs it."""
        result = Result()

        def read():
            result.value = self._get(ptr, nbytes)

        with self._cond:
            s = self._stream(stream, device)
            found = self._find(ptr, nbytes)
            owner = found[0].ctx if found is not None and found[0].kind == "device" else None
            if owner is not None and owner is not s.ctx and not (owner.primary
                                                                 and s.ctx.primary):
                result.error = CUDA_ERROR_ILLEGAL_ADDRESS   # not mapped in the kernel's context
                return result
            self._enqueue(s, read, f"read {ptr:#x}")
            self._fence_managed()
        return result

    def synchronize(self, stream, device=0):
        """The host waits for a stream's queued work (and what it waits for), nothing else."""
        with self._cond:
            s = self._stream(stream, device)
            ran = not s.ops or self._advance(s.ops[-1])
            self._fence_managed()
            if not ran:
                raise AssertionError(f"stream {stream:#x} waits for a held stream")

    def drain(self, stream, device=0):
        """The host waits for a stream's queued work as cuStreamSynchronize does: for another
        process's GPU too (an imported event), for up to ``hang_timeout`` seconds."""
        with self._cond:
            s = self._stream(stream, device)
            if s.ops:
                self._complete(s.ops[-1], "drain")
            self._fence_managed()

    def run(self):
        """Run the GPU: every queued operation that no held stream stops."""
        with self._cond:
            progress = True
            while progress:
                progress = False
                for op in list(self._all_ops()):
                    if not op.done and self._advance(op):
                        progress = True
            self._fence_managed()

    def read(self, ptr, nbytes):
        """What memory the driver knows holds now (device memory read without a host read)."""
        with self._cond:
            return self._get(ptr, nbytes)

    def pending(self):
        return [op.label for op in self._all_ops()]

    def reset_primary(self, device):
        """cuDevicePrimaryCtxReset by another library: the context's memory, streams and events
        are destroyed, and it is inactive until retained again."""
        with self._cond:
            c = self.primary(device)
            c.active = False
            for s in [c.legacy, *c.per_thread.values(),
                      *[s for s in self.streams.values() if s.ctx is c]]:
                for op in s.ops:
                    op.done = True              # destroyed, never run
                s.ops.clear()
            c.per_thread.clear()
            for base in [b for b, a in self.allocations.items() if a.ctx is c and a.allocated]:
                a = self.allocations.pop(base)
                if a.shared is not None:
                    a.shared.close()
                _space_free(base, a.size)
            for h in [h for h, s in self.streams.items() if s.ctx is c]:
                del self.streams[h]
            for h in [h for h, e in self.events.items() if e.ctx is c]:
                del self.events[h]
            self._fence_managed()

    def allocated(self):
        """Bases of the device memory made by cuMemAlloc and not freed."""
        return [b for b, a in self.allocations.items() if a.allocated]

    def touched(self):
        """Offsets of the device address space pages a host read brought in (none: untouched)."""
        pages = (_space_high + _PAGE - 1) // _PAGE
        vec = (ctypes.c_ubyte * max(pages, 1))()
        if pages and _libc.mincore(_space_base(), pages * _PAGE, vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        return [i * _PAGE for i in range(pages) if vec[i] & 1]


def uuid(physical):
    """The UUID of a fake GPU (by its physical number: ``uuid_order`` maps ordinals to it)."""
    return b"FAKE-GPU" + physical.to_bytes(8, "little")


def _pack(magic, shared, size):
    return struct.pack("<8sqiqq", magic, os.getpid(), shared.fd, shared.ino, size).ljust(64, b"\0")


def _unpack(magic, handle):
    """(pid, fd, inode, size) of a handle: a ctypes pointer to it (the shim's) or the value."""
    raw = bytes((handle.contents if hasattr(handle, "contents") else handle).reserved)
    if raw[:8] != magic:
        raise DriverError(CUDA_ERROR_INVALID_VALUE, "not a handle of this driver")
    return struct.unpack_from("<qiqq", raw, 8)


_installed = None


_STREAM_ORDERED = ("cuMemAllocAsync", "cuMemFreeAsync", "cuMemcpyHtoDAsync_v2")


def install(stream_ordered=True):
    """Install a fresh fake driver in the core; returns it (``uninstall`` undoes it).
    stream_ordered=False: a driver without stream-ordered allocation (before CUDA 11.2)."""
    global _installed
    _forget_reads()
    driver = FakeDriver()
    symbols = driver.symbols()
    if not stream_ordered:
        symbols = {k: v for k, v in symbols.items() if k not in _STREAM_ORDERED}
    _core._cuda_driver(symbols)
    driver.calls.clear()
    _installed = driver
    return driver


def installed():
    """The driver ``install`` made last in this process."""
    return _installed


def child_install(hang_timeout=30.0):
    """A spawned child's first step (a Pool's initializer, or unpickling ``CHILD``): the fake
    installed as the tests' process has it, patient with the parent's GPU."""
    install().hang_timeout = hang_timeout


class _Child:
    """Put first in a spawned child's arguments: unpickling it installs the fake, so the CUDA
    objects after it unpickle on the fake (multiprocessing unpickles arguments in order)."""

    def __reduce__(self):
        return child_install, ()


CHILD = _Child()


def spawn_pool():
    """One worker process started by multiprocessing's ``spawn``, with the fake installed."""
    return multiprocessing.get_context("spawn").Pool(1, initializer=child_install)


def in_child(target, *args):
    """Run in a pool's child: a fresh fake, then target(*args); returns (its result, the
    fake's calls). A blocking call made there with the GIL held fails it, as the ``fake``
    fixture fails a test."""
    driver = install()
    driver.hang_timeout = 30.0
    result = target(*args)
    gc.collect()                            # views the target dropped close their handles
    assert driver.gil_held == [], f"blocking driver calls made with the GIL held: {driver.gil_held}"
    return result, list(driver.calls)


def uninstall():
    _core._cuda_driver(None)
    if _installed is not None:                  # managed memory the host owns is its own again
        _installed.concurrent_managed = 1
        with _installed._cond:
            _installed._fence_managed()


# Expected call sequences.
def primary(device_id, first=False):
    """Looking device_id's primary context up: retained on first use, else its state asked."""
    if first:
        return [("cuDeviceGet", device_id), ("cuDevicePrimaryCtxRetain", device_id)]
    return [("cuDevicePrimaryCtxGetState", device_id)]


def enter(device_id, first=False):
    """Making device_id's primary context current."""
    return [*primary(device_id, first), ("cuCtxPushCurrent", ctx(device_id))]


LEAVE = [("cuCtxPopCurrent",)]


def alloc(nbytes, ptr):
    """cuMemAlloc, and the allocation's buffer ID noted (checked again before it is freed)."""
    return [("cuMemAlloc", nbytes), ("cuPointerGetAttributes", ptr)]


def free(ptr):
    """Freeing pydlpack's allocation: only if ptr is still the allocation it made."""
    return [("cuPointerGetAttributes", ptr), ("cuMemFree", ptr)]


def query(ptr, first=True, borrowed=0):
    """Asking the device of a pointer on a thread with no current context: the first active
    primary context is borrowed (``borrowed``'s; GPU 0's when none is). ``first``: pydlpack has
    retained none yet, so it looks for one; else the one it retained is asked for its state."""
    if not first:
        return [("cuCtxGetCurrent",), ("cuDevicePrimaryCtxGetState", borrowed),
                ("cuCtxPushCurrent", ctx(borrowed)), ("cuPointerGetAttributes", ptr), *LEAVE]
    scan = [call for i in range(borrowed + 1)
            for call in (("cuDeviceGet", i), ("cuDevicePrimaryCtxGetState", i))]
    return [("cuCtxGetCurrent",), ("cuDeviceGetCount",), *scan, *enter(borrowed, True),
            ("cuPointerGetAttributes", ptr), *LEAVE]


def _lookup(device_id, stream, first):
    if stream in (1, 2):
        return primary(device_id, first), False
    return [("cuStreamGetCtx", stream)], first


def wait(device_id, producer, consumer, first=True, context=None):
    """One event in the producer's stream's context: the consumer waits for its queued work,
    once its stream was asked whether it is capturing a graph (not the legacy stream's).
    ``first``: device_id's primary context is not retained yet; ``context``: the one both
    streams belong to (device_id's primary one by default)."""
    p, first = _lookup(device_id, producer, first)
    c, _ = _lookup(device_id, consumer, first)
    here = ctx(device_id) if context is None else context
    asked = [] if consumer == 1 else [("cuStreamIsCapturing", consumer)]
    return [*p, *c, ("cuCtxPushCurrent", here), *asked, ("cuEventCreate", 2),
            ("cuEventRecord", EVENT, producer), ("cuStreamWaitEvent", consumer, EVENT, 0),
            ("cuEventDestroy", EVENT), *LEAVE]


def capture_check(stream, context):
    """Asking whether a consumer's stream handle (of context) is capturing a CUDA graph, before
    work that would invalidate a capture (spec §10)."""
    return [("cuStreamGetCtx", stream), ("cuCtxPushCurrent", context),
            ("cuStreamIsCapturing", stream), *LEAVE]


def synchronize(device_id, stream, first=True, context=None):
    """The host waits for a stream (in its own context)."""
    lookup, _ = _lookup(device_id, stream, first)
    here = ctx(device_id) if context is None else context
    return [*lookup, ("cuCtxPushCurrent", here), ("cuStreamSynchronize", stream), *LEAVE]
