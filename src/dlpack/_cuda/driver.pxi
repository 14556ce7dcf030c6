# The CUDA driver (docs/spec.md §3.4, §10): its types and constants, the entry-point tables (the
# core one, and stream-ordered allocation's, resolved on first use), loaded once from
# libcuda.so.1 and only when CUDA data is first seen (CPU-only processes never load it), the
# per-device state a driver swap forgets, and the error a failed call raises. Tests install a
# fake driver's entry points (_cuda_driver) and check the exact calls.

ctypedef int CUresult
ctypedef unsigned long long CUdeviceptr
ctypedef void *CUstream
ctypedef void *CUevent
ctypedef void *CUcontext

ctypedef struct CUDA_MEMCPY2D:
    size_t srcXInBytes
    size_t srcY
    int srcMemoryType
    const void *srcHost
    CUdeviceptr srcDevice
    void *srcArray
    size_t srcPitch
    size_t dstXInBytes
    size_t dstY
    int dstMemoryType
    void *dstHost
    CUdeviceptr dstDevice
    void *dstArray
    size_t dstPitch
    size_t WidthInBytes
    size_t Height

ctypedef struct CUDA_MEMCPY3D:
    size_t srcXInBytes
    size_t srcY
    size_t srcZ
    size_t srcLOD
    int srcMemoryType
    const void *srcHost
    CUdeviceptr srcDevice
    void *srcArray
    void *reserved0
    size_t srcPitch
    size_t srcHeight
    size_t dstXInBytes
    size_t dstY
    size_t dstZ
    size_t dstLOD
    int dstMemoryType
    void *dstHost
    CUdeviceptr dstDevice
    void *dstArray
    void *reserved1
    size_t dstPitch
    size_t dstHeight
    size_t WidthInBytes
    size_t Height
    size_t Depth

cdef enum:
    CU_POINTER_ATTRIBUTE_CONTEXT = 1
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
    CU_POINTER_ATTRIBUTE_HOST_POINTER = 4
    CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
    CU_POINTER_ATTRIBUTE_BUFFER_ID = 7
    CU_DEVICE_ATTRIBUTE_MAX_PITCH = 11
    CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS = 89
    CU_MEMORYTYPE_HOST = 1
    CU_MEMORYTYPE_DEVICE = 2
    CU_MEMORYTYPE_UNIFIED = 4
    CU_EVENT_DISABLE_TIMING = 2
    CU_STREAM_LEGACY = 1            # stream handles DLPack and the CAI name by number
    CU_STREAM_PER_THREAD = 2
    MAX_CUDA_DEVICES = 1024

# The entry points, in the order of _CU_SYMBOLS (the struct is filled as an array of pointers).
# Those that can block (marked) are called with the GIL released.
ctypedef struct CuDriver:
    CUresult (*cuInit)(unsigned int) noexcept nogil                                   # blocks
    CUresult (*cuGetErrorName)(CUresult, const char **) noexcept nogil
    CUresult (*cuCtxGetCurrent)(CUcontext *) noexcept nogil
    CUresult (*cuPointerGetAttributes)(unsigned int, int *, void **, CUdeviceptr) noexcept nogil
    CUresult (*cuDeviceGet)(int *, int) noexcept nogil
    CUresult (*cuDeviceGetCount)(int *) noexcept nogil
    CUresult (*cuDeviceGetAttribute)(int *, int, int) noexcept nogil
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, int) noexcept nogil               # blocks
    CUresult (*cuDevicePrimaryCtxGetState)(int, unsigned int *, int *) noexcept nogil
    CUresult (*cuCtxPushCurrent)(CUcontext) noexcept nogil
    CUresult (*cuCtxPopCurrent)(CUcontext *) noexcept nogil
    CUresult (*cuStreamGetCtx)(CUstream, CUcontext *) noexcept nogil
    CUresult (*cuEventCreate)(CUevent *, unsigned int) noexcept nogil
    CUresult (*cuEventRecord)(CUevent, CUstream) noexcept nogil
    CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned int) noexcept nogil
    CUresult (*cuEventDestroy)(CUevent) noexcept nogil
    CUresult (*cuStreamSynchronize)(CUstream) noexcept nogil                          # blocks
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) noexcept nogil                      # blocks
    CUresult (*cuMemFree)(CUdeviceptr) noexcept nogil                                 # blocks
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t) noexcept nogil              # blocks
    CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t) noexcept nogil        # blocks
    CUresult (*cuMemcpy2D)(const CUDA_MEMCPY2D *) noexcept nogil                      # blocks
    CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream) noexcept nogil
    CUresult (*cuEventSynchronize)(CUevent) noexcept nogil                            # blocks
    CUresult (*cuCtxSynchronize)() noexcept nogil                                     # blocks
    CUresult (*cuMemcpy3D)(const CUDA_MEMCPY3D *) noexcept nogil                      # blocks
    CUresult (*cuStreamIsCapturing)(CUstream, int *) noexcept nogil

cdef tuple _CU_SYMBOLS = (
    "cuInit", "cuGetErrorName", "cuCtxGetCurrent", "cuPointerGetAttributes", "cuDeviceGet",
    "cuDeviceGetCount", "cuDeviceGetAttribute", "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxGetState", "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2", "cuStreamGetCtx",
    "cuEventCreate", "cuEventRecord", "cuStreamWaitEvent", "cuEventDestroy_v2",
    "cuStreamSynchronize", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2",
    "cuMemcpy2D_v2", "cuMemcpyDtoDAsync_v2", "cuEventSynchronize", "cuCtxSynchronize",
    "cuMemcpy3D_v2", "cuStreamIsCapturing")
assert sizeof(CuDriver) == len(_CU_SYMBOLS) * sizeof(void *)

cdef CuDriver _cu
cdef bint _cu_ready = False                  # entry points resolved and cuInit done
cdef str _cu_state = "unloaded"              # for tests: unloaded, loaded or fake
cdef bytes _cu_path = b"libcuda.so.1"
cdef object _cu_fake_symbols = None         # a fake driver's entry points (tests)
cdef CUcontext _cu_contexts[MAX_CUDA_DEVICES]   # primary contexts, retained once per process
cdef int _cu_devices[MAX_CUDA_DEVICES]          # their CUdevice handles
cdef unsigned int _cu_epochs[MAX_CUDA_DEVICES]  # bumped when a primary context is found reset
cdef size_t _cu_max_pitch[MAX_CUDA_DEVICES]     # CU_DEVICE_ATTRIBUTE_MAX_PITCH, asked once
cdef int _cu_concurrent[MAX_CUDA_DEVICES]       # CONCURRENT_MANAGED_ACCESS + 1, asked once
cdef unsigned int _cu_generation = 0         # bumped when tests swap drivers
cdef PyThread_type_lock _cu_lock = PyThread_allocate_lock()     # loading and retaining


# Stream-ordered allocation (CUDA 11.2): resolved on first use, as the IPC entry points are; a
# driver without them gets the synchronous path (cuMemAlloc, cuMemcpyHtoD, cuMemFree).
ctypedef struct CuAsyncDriver:
    CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream) noexcept nogil
    CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream) noexcept nogil
    CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream) noexcept nogil

cdef tuple _CU_ASYNC_SYMBOLS = ("cuMemAllocAsync", "cuMemFreeAsync", "cuMemcpyHtoDAsync_v2")
assert sizeof(CuAsyncDriver) == len(_CU_ASYNC_SYMBOLS) * sizeof(void *)
cdef CuAsyncDriver _cu_async
cdef unsigned int _cu_async_generation = 0  # the driver _cu_async was resolved from, plus one
cdef bint _cu_async_ok = False              # it has them all


class CudaError(Refusal):
    """A CUDA driver call failed, or there is no driver."""


cdef int _cu_fail(CUresult rc, str what) except -1:
    cdef const char *name = NULL
    if _cu.cuGetErrorName(rc, &name) != 0 or name == NULL:
        name = b"an unknown error"
    raise CudaError(f"CUDA driver: {what} failed with {name.decode('ascii', 'replace')} ({rc})")


cdef inline int _cu_check(CUresult rc, str what) except -1:
    if rc != 0:
        _cu_fail(rc, what)
    return 0


cdef int _cu_load() except -1:
    """Resolve the driver's entry points from libcuda and initialise it, once."""
    global _cu_ready, _cu_state
    cdef void *lib
    cdef void *sym
    cdef const char *path
    cdef CUresult rc
    cdef Py_ssize_t i
    if _cu_ready:
        return 0
    path = _cu_path
    with nogil:
        PyThread_acquire_lock(_cu_lock, WAIT_LOCK)
    try:
        if _cu_ready:
            return 0
        with nogil:
            lib = dlopen(path, RTLD_NOW | RTLD_LOCAL)
        if lib == NULL:
            raise CudaError(f"CUDA driver: {_cu_path.decode()} cannot be loaded "
                            f"({(<bytes>dlerror()).decode(errors='replace')}), and CUDA data "
                            "needs it; is an NVIDIA driver installed?")
        for i, name in enumerate(_CU_SYMBOLS):
            sym = dlsym(lib, name.encode())
            if sym == NULL:
                raise CudaError(f"CUDA driver: {_cu_path.decode()} has no {name}; the driver "
                                "is too old for pydlpack (CUDA 11 or newer is needed)")
            (<void **>&_cu)[i] = sym
        with nogil:
            rc = _cu.cuInit(0)
        _cu_check(rc, "cuInit")
        _cu_ready = True
        _cu_state = "loaded"
    finally:
        PyThread_release_lock(_cu_lock)
    return 0


cdef bint _cu_async_load() except -1:
    """Resolve the stream-ordered allocation entry points of the driver in use, once per
    driver: whether it has them all."""
    global _cu_async_generation, _cu_async_ok
    cdef void *lib = NULL
    cdef void *sym
    cdef Py_ssize_t i
    _cu_load()
    if _cu_async_generation == _cu_generation + 1:
        return _cu_async_ok
    if _cu_fake_symbols is None:
        lib = dlopen(_cu_path, RTLD_NOW | RTLD_LOCAL)       # loaded already: no I/O
    _cu_async_ok = lib != NULL or _cu_fake_symbols is not None
    for i, name in enumerate(_CU_ASYNC_SYMBOLS):
        if _cu_fake_symbols is not None:
            sym = <void *><uintptr_t>_cu_fake_symbols.get(name, 0)
        elif lib != NULL:
            sym = dlsym(lib, (<str>name).encode())
        else:
            sym = NULL
        _cu_async_ok = _cu_async_ok and sym != NULL
        (<void **>&_cu_async)[i] = sym
    _cu_async_generation = _cu_generation + 1
    return _cu_async_ok


def _cuda_driver(symbols=None, path="libcuda.so.1"):
    """Tests: use a fake driver's entry points (name -> address), or with None forget the
    driver so that the next CUDA exchange loads ``path``. Primary contexts are forgotten."""
    global _cu_ready, _cu_state, _cu_path, _cu_generation, _cu_fake_symbols
    cdef Py_ssize_t i
    _cu_generation += 1
    _cu_fake_symbols = symbols
    _cu_ready = False
    _cu_state = "unloaded"
    _cu_path = path.encode()
    for i in range(MAX_CUDA_DEVICES):
        _cu_contexts[i] = NULL
        _cu_max_pitch[i] = 0
        _cu_concurrent[i] = 0
    if symbols is not None:
        for i, name in enumerate(_CU_SYMBOLS):
            (<void **>&_cu)[i] = <void *><uintptr_t>symbols[name]
        _cu_ready = True
        _cu_state = "fake"
    return _cu_state


def _cuda_state():
    """'unloaded' until CUDA data is first seen, then 'loaded' (or 'fake' in tests)."""
    return _cu_state
