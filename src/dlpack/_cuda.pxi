# The CUDA driver, called from C through entry points resolved once from libcuda.so.1, and only
# when CUDA data is first seen: CPU-only processes never load it (docs/spec.md §3.4, §10).
# Tests install a fake driver's entry points (_cuda_driver) and check the exact calls.

from posix.dlfcn cimport RTLD_LOCAL, RTLD_NOW, dlerror, dlopen, dlsym

ctypedef int CUresult
ctypedef unsigned long long CUdeviceptr
ctypedef void *CUstream
ctypedef void *CUevent
ctypedef void *CUcontext

cdef enum:
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
    CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
    CU_MEMORYTYPE_HOST = 1
    CU_MEMORYTYPE_DEVICE = 2
    CU_MEMORYTYPE_UNIFIED = 4
    CU_EVENT_DISABLE_TIMING = 2
    CU_STREAM_LEGACY = 1            # stream handles DLPack and the CAI name by number
    CU_STREAM_PER_THREAD = 2
    MAX_CUDA_DEVICES = 1024

# The entry points, in the order of _CU_SYMBOLS (the struct is filled as an array of pointers).
ctypedef struct CuDriver:
    CUresult (*cuInit)(unsigned int) noexcept nogil
    CUresult (*cuGetErrorName)(CUresult, const char **) noexcept nogil
    CUresult (*cuPointerGetAttributes)(unsigned int, int *, void **, CUdeviceptr) noexcept nogil
    CUresult (*cuDeviceGet)(int *, int) noexcept nogil
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, int) noexcept nogil
    CUresult (*cuCtxPushCurrent)(CUcontext) noexcept nogil
    CUresult (*cuCtxPopCurrent)(CUcontext *) noexcept nogil
    CUresult (*cuEventCreate)(CUevent *, unsigned int) noexcept nogil
    CUresult (*cuEventRecord)(CUevent, CUstream) noexcept nogil
    CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned int) noexcept nogil
    CUresult (*cuEventDestroy)(CUevent) noexcept nogil
    CUresult (*cuStreamSynchronize)(CUstream) noexcept nogil
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) noexcept nogil
    CUresult (*cuMemFree)(CUdeviceptr) noexcept nogil
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t) noexcept nogil
    CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t) noexcept nogil
    CUresult (*cuEventSynchronize)(CUevent) noexcept nogil

cdef tuple _CU_SYMBOLS = (
    "cuInit", "cuGetErrorName", "cuPointerGetAttributes", "cuDeviceGet",
    "cuDevicePrimaryCtxRetain", "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2", "cuEventCreate",
    "cuEventRecord", "cuStreamWaitEvent", "cuEventDestroy_v2", "cuStreamSynchronize",
    "cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2", "cuEventSynchronize")
assert sizeof(CuDriver) == len(_CU_SYMBOLS) * sizeof(void *)

cdef CuDriver _cu
cdef bint _cu_ready = False                  # entry points resolved and cuInit done
cdef str _cu_state = "unloaded"              # for tests: unloaded, loaded or fake
cdef bytes _cu_path = b"libcuda.so.1"
cdef CUcontext _cu_contexts[MAX_CUDA_DEVICES]   # primary contexts, retained once per process
cdef unsigned int _cu_generation = 0         # bumped when tests swap drivers
cdef int _CU_ATTRIBUTES[3]
_CU_ATTRIBUTES[:] = [CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                     CU_POINTER_ATTRIBUTE_IS_MANAGED]


class CudaError(BufferError):
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
    cdef Py_ssize_t i
    if _cu_ready:
        return 0
    lib = dlopen(_cu_path, RTLD_NOW | RTLD_LOCAL)
    if lib == NULL:
        raise CudaError(f"CUDA driver: {_cu_path.decode()} cannot be loaded "
                        f"({(<bytes>dlerror()).decode(errors='replace')}), and CUDA data needs "
                        "it; is an NVIDIA driver installed?")
    for i, name in enumerate(_CU_SYMBOLS):
        sym = dlsym(lib, name.encode())
        if sym == NULL:
            raise CudaError(f"CUDA driver: {_cu_path.decode()} has no {name}; the driver is "
                            "too old for pydlpack (CUDA 11 or newer is needed)")
        (<void **>&_cu)[i] = sym
    _cu_check(_cu.cuInit(0), "cuInit")
    _cu_ready = True
    _cu_state = "loaded"
    return 0


def _cuda_driver(symbols=None, path="libcuda.so.1"):
    """Tests: use a fake driver's entry points (name -> address), or with None forget the
    driver so that the next CUDA exchange loads ``path``. Primary contexts are forgotten."""
    global _cu_ready, _cu_state, _cu_path, _cu_generation
    cdef Py_ssize_t i
    _cu_generation += 1
    _cu_ready = False
    _cu_state = "unloaded"
    _cu_path = path.encode()
    for i in range(MAX_CUDA_DEVICES):
        _cu_contexts[i] = NULL
    if symbols is not None:
        for i, name in enumerate(_CU_SYMBOLS):
            (<void **>&_cu)[i] = <void *><uintptr_t>symbols[name]
        _cu_ready = True
        _cu_state = "fake"
    return _cu_state


def _cuda_state():
    """'unloaded' until CUDA data is first seen, then 'loaded' (or 'fake' in tests)."""
    return _cu_state


cdef int _cu_enter(int32_t device_id) except -1:
    """Make device_id's primary context current on this thread (_cu_leave undoes it)."""
    cdef int dev
    cdef CUcontext ctx
    _cu_load()
    if device_id < 0 or device_id >= MAX_CUDA_DEVICES:
        raise CudaError(f"CUDA driver: device {device_id} is out of range")
    ctx = _cu_contexts[device_id]
    if ctx == NULL:
        _cu_check(_cu.cuDeviceGet(&dev, device_id), f"cuDeviceGet({device_id})")
        _cu_check(_cu.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain")
        _cu_contexts[device_id] = ctx
    _cu_check(_cu.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
    return 0


cdef inline void _cu_leave() noexcept nogil:
    cdef CUcontext popped
    _cu.cuCtxPopCurrent(&popped)


cdef int _cu_pointer_device(uintptr_t ptr, DLDevice *out) except -1:
    """The DLPack device owning a CUDA pointer, in one driver call; NULL (zero-size) is CUDA:0."""
    cdef unsigned int mem = 0, managed = 0
    cdef int ordinal = 0
    cdef void *values[3]
    out.device_type = kDLCUDA
    out.device_id = 0
    if ptr == 0:
        return 0
    _cu_load()
    values[0] = &mem
    values[1] = &ordinal
    values[2] = &managed
    _cu_check(_cu.cuPointerGetAttributes(3, _CU_ATTRIBUTES, values, ptr),
              "cuPointerGetAttributes")
    if managed or mem == CU_MEMORYTYPE_UNIFIED:
        out.device_type = kDLCUDAManaged
    elif mem == CU_MEMORYTYPE_HOST:
        out.device_type = kDLCUDAHost
        ordinal = max(ordinal, 0)
    elif mem != CU_MEMORYTYPE_DEVICE:
        raise CudaError(f"__cuda_array_interface__: field 'data': pointer {ptr:#x} has CUDA "
                        f"memory type {mem}, which DLPack cannot describe")
    if ordinal < 0:
        raise CudaError(f"__cuda_array_interface__: field 'data': the CUDA driver gives pointer "
                        f"{ptr:#x} device ordinal {ordinal}, which is not a device")
    out.device_id = ordinal
    return 0


cdef int _cu_stream_wait(int32_t device_id, uintptr_t producer, uintptr_t consumer) except -1:
    """Queue on consumer a wait for the work queued so far on producer (the host goes on)."""
    cdef CUevent event = NULL
    _cu_enter(device_id)
    try:
        _cu_check(_cu.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        _cu_check(_cu.cuEventRecord(event, <CUstream>producer), "cuEventRecord")
        _cu_check(_cu.cuStreamWaitEvent(<CUstream>consumer, event, 0), "cuStreamWaitEvent")
    finally:
        if event != NULL:
            _cu.cuEventDestroy(event)
        _cu_leave()
    return 0


cdef int _cu_stream_sync(int32_t device_id, uintptr_t stream) except -1:
    """Block the host (not the interpreter) until stream's queued work is done."""
    cdef CUresult rc
    _cu_enter(device_id)
    with nogil:
        rc = _cu.cuStreamSynchronize(<CUstream>stream)
        _cu_leave()
    return _cu_check(rc, "cuStreamSynchronize")


cdef int _cu_event_wait(int32_t device_id, CUevent event, uintptr_t consumer) except -1:
    """Queue on consumer a wait for a producer's event (an Arrow sync_event)."""
    cdef CUresult rc
    _cu_enter(device_id)
    rc = _cu.cuStreamWaitEvent(<CUstream>consumer, event, 0)
    _cu_leave()
    return _cu_check(rc, "cuStreamWaitEvent")


cdef int _cu_event_sync(int32_t device_id, CUevent event) except -1:
    """Block the host (not the interpreter) until a producer's event has happened."""
    cdef CUresult rc
    _cu_enter(device_id)
    with nogil:
        rc = _cu.cuEventSynchronize(event)
        _cu_leave()
    return _cu_check(rc, "cuEventSynchronize")


cdef CUevent _cu_event_record(int32_t device_id, uintptr_t stream) except? NULL:
    """A new event recorded on stream, for a consumer to wait on (_cu_event_destroy frees it)."""
    cdef CUevent event = NULL
    cdef CUresult rc
    _cu_enter(device_id)
    try:
        _cu_check(_cu.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        rc = _cu.cuEventRecord(event, <CUstream>stream)
        if rc != 0:
            _cu.cuEventDestroy(event)
            _cu_fail(rc, "cuEventRecord")
    finally:
        _cu_leave()
    return event


cdef void _cu_event_destroy(int32_t device_id, CUevent event,
                            unsigned int generation) noexcept nogil:
    """Free an event _cu_event_record made, from any thread, in its device's primary context;
    nothing when the driver that made it is gone (tests swap drivers)."""
    if (event != NULL and generation == _cu_generation and _cu_ready
            and 0 <= device_id < MAX_CUDA_DEVICES
            and _cu.cuCtxPushCurrent(_cu_contexts[device_id]) == 0):
        _cu.cuEventDestroy(event)
        _cu_leave()


cdef int _cu_copy(int32_t device_id, void *dst, const void *src, size_t nbytes,
                  bint to_device) except -1:
    """A synchronous copy between host memory and device_id's memory."""
    cdef CUresult rc
    _cu_enter(device_id)
    with nogil:
        if to_device:
            rc = _cu.cuMemcpyHtoD(<CUdeviceptr><uintptr_t>dst, src, nbytes)
        else:
            rc = _cu.cuMemcpyDtoH(dst, <CUdeviceptr><uintptr_t>src, nbytes)
        _cu_leave()
    return _cu_check(rc, "cuMemcpyHtoD" if to_device else "cuMemcpyDtoH")


@cython.final
cdef class _DeviceMemory:
    """Device memory holding a copy pydlpack made; freed, in its device's primary context,
    when the last capsule viewing it is deleted."""
    cdef readonly int32_t device_id
    cdef readonly CUdeviceptr ptr
    cdef unsigned int generation        # the driver that allocated it (tests swap drivers)

    def __dealloc__(self):
        if self.ptr and self.generation == _cu_generation and _cu_ready:
            if _cu.cuCtxPushCurrent(_cu_contexts[self.device_id]) == 0:
                _cu.cuMemFree(self.ptr)
                _cu_leave()


cdef _DeviceMemory _cu_alloc(int32_t device_id, size_t nbytes):
    cdef _DeviceMemory mem = _DeviceMemory.__new__(_DeviceMemory)
    cdef CUdeviceptr ptr = 0
    _cu_enter(device_id)
    try:
        _cu_check(_cu.cuMemAlloc(&ptr, nbytes if nbytes else 1), f"cuMemAlloc({nbytes})")
    finally:
        _cu_leave()
    mem.device_id = device_id
    mem.ptr = ptr
    mem.generation = _cu_generation
    return mem


cdef int _consumer_stream(object stream, uintptr_t *out) except -1:
    """The CUDA stream a DLPack consumer's stream argument names: 1 and out set, or 0 for -1
    (no synchronisation); None is the legacy default stream (array API)."""
    if stream is None:
        out[0] = CU_STREAM_LEGACY
        return 1
    if type(stream) is bool or not isinstance(stream, int):
        raise BufferError(f"__dlpack__: stream = {stream!r} is not None or an int")
    if stream == -1:
        return 0
    if stream == 0:
        raise BufferError("__dlpack__: stream = 0 is disallowed for CUDA (ambiguous); pass 1 "
                          "for the legacy default stream or 2 for per-thread")
    try:
        out[0] = stream
    except OverflowError:
        raise BufferError(f"__dlpack__: stream = {stream!r} is not a CUDA stream handle") from None
    return 1
