# The CUDA driver, called from C through entry points resolved once from libcuda.so.1, and only
# when CUDA data is first seen: CPU-only processes never load it (docs/spec.md §3.4, §10).
# Tests install a fake driver's entry points (_cuda_driver) and check the exact calls.


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
cdef int64_t _CU_SPAN_CHUNK = 16 << 20  # window of a covering-span device copy (§10)
cdef int64_t _CU_CALL_BYTES = 128 << 10  # bytes a synchronous copy moves in one call's overhead
cdef int _CU_ATTRIBUTES[5]
_CU_ATTRIBUTES[:] = [CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                     CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                     CU_POINTER_ATTRIBUTE_CONTEXT]
cdef int _CU_BUFFER_ID = CU_POINTER_ATTRIBUTE_BUFFER_ID
# torch's rules the readers and writers share (the rest: _readers/torch.pxi). torch.Tensor's
# __dlpack_c_exchange_api__, once _readers/torch.pxi found it usable: the reader's fast path calls
# it, and a CUDA export asks whether an object's work API is torch's.
cdef DLPackExchangeAPI *_torch_api = NULL
cdef object _torch_api_capsule = None       # keeps the API struct alive


cdef int _torch_current_device(DLPackObject self) except -1:
    """torch's own __dlpack__ refuses CUDA tensors off the current device; so do the reader's
    fast path (_readers/torch.pxi) and exports of tensors taken through its C exchange API (§4: a
    fast path refuses what the producer does)."""
    current = sys.modules["torch"].cuda.current_device()
    if current != self.desc.dl.device.device_id:
        raise Refusal(f"__dlpack__: torch refuses to export tensors on a different CUDA "
                      f"device index (tensor on cuda:{self.desc.dl.device.device_id}, current "
                      f"device cuda:{current}); call torch.cuda.set_device("
                      f"{self.desc.dl.device.device_id}) first")
    return 0


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


def _cuda_copy_costs(call_bytes=None, chunk=None):
    """Tests: set what a synchronous driver call costs in bytes moved (0: nothing, so strided
    device-to-host copies never take the covering span) and the span's window (§10); returns
    the previous pair."""
    global _CU_CALL_BYTES, _CU_SPAN_CHUNK
    previous = (_CU_CALL_BYTES, _CU_SPAN_CHUNK)
    if call_bytes is not None:
        if call_bytes < 0:
            raise ValueError(f"_cuda_copy_costs: call_bytes={call_bytes} is negative")
        _CU_CALL_BYTES = call_bytes
    if chunk is not None:
        if chunk < 1:
            raise ValueError(f"_cuda_copy_costs: chunk={chunk} is not positive")
        _CU_SPAN_CHUNK = chunk
    return previous


def _cuda_state():
    """'unloaded' until CUDA data is first seen, then 'loaded' (or 'fake' in tests)."""
    return _cu_state


cdef CUcontext _cu_primary(int32_t device_id) except NULL:
    """device_id's primary context: retained on first use, and again once another library
    reset it (cuDevicePrimaryCtxReset, Numba's cuda.close()), which destroyed its memory."""
    cdef int dev, active = 0
    cdef unsigned int flags
    cdef CUcontext ctx
    cdef CUresult rc
    _cu_load()
    if device_id < 0 or device_id >= MAX_CUDA_DEVICES:
        raise CudaError(f"CUDA driver: device {device_id} is out of range")
    ctx = _cu_contexts[device_id]
    if ctx != NULL:
        _cu_check(_cu.cuDevicePrimaryCtxGetState(_cu_devices[device_id], &flags, &active),
                  "cuDevicePrimaryCtxGetState")
        if active:
            return ctx
    with nogil:
        PyThread_acquire_lock(_cu_lock, WAIT_LOCK)
    try:
        ctx = _cu_contexts[device_id]
        if ctx != NULL:                 # another thread may have retained it meanwhile
            _cu_check(_cu.cuDevicePrimaryCtxGetState(_cu_devices[device_id], &flags, &active),
                      "cuDevicePrimaryCtxGetState")
            if active:
                return ctx
            _cu_epochs[device_id] += 1  # device copies made before the reset are gone
            _cu_contexts[device_id] = NULL
        rc = _cu.cuDeviceGet(&dev, device_id)
        if rc != 0:
            _cu_fail(rc, f"cuDeviceGet({device_id})")
        with nogil:
            rc = _cu.cuDevicePrimaryCtxRetain(&ctx, dev)
        _cu_check(rc, "cuDevicePrimaryCtxRetain")
        _cu_devices[device_id] = dev
        _cu_contexts[device_id] = ctx
        return ctx
    finally:
        PyThread_release_lock(_cu_lock)


cdef inline int _cu_push(CUcontext ctx) except -1:
    return _cu_check(_cu.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")


cdef inline int _cu_enter(int32_t device_id) except -1:
    """Make device_id's primary context current on this thread (_cu_leave undoes it)."""
    return _cu_push(_cu_primary(device_id))


cdef inline void _cu_leave() noexcept nogil:
    cdef CUcontext popped
    _cu.cuCtxPopCurrent(&popped)


cdef CUcontext _cu_stream_context(int32_t device_id, uintptr_t stream) except NULL:
    """The context a stream belongs to: its own (cuStreamGetCtx; PyCUDA, cuCtxCreate and green
    contexts make streams outside the primary one), or device_id's primary context for the
    default streams, which belong to whichever context is current."""
    cdef CUcontext ctx = NULL
    cdef CUresult rc
    if stream == CU_STREAM_LEGACY or stream == CU_STREAM_PER_THREAD:
        return _cu_primary(device_id)
    _cu_load()
    rc = _cu.cuStreamGetCtx(<CUstream>stream, &ctx)
    if rc != 0:
        _cu_fail(rc, f"cuStreamGetCtx({stream:#x})")
    if ctx == NULL:
        raise CudaError(f"CUDA driver: cuStreamGetCtx({stream:#x}) named no context")
    return ctx


cdef int _cu_borrow() except -1:
    """For a thread with no current context: make an already active primary context current
    (_cu_leave undoes it), so that a query creates none where another library made one (a
    context costs hundreds of MiB, and is refused on an EXCLUSIVE_PROCESS device); GPU 0's is
    retained only when no device has an active one."""
    cdef int count = 0, dev, i, active = 0
    cdef unsigned int flags
    _cu_load()
    for i in range(MAX_CUDA_DEVICES):           # ours first: no driver call for the others
        if _cu_contexts[i] != NULL:
            _cu_check(_cu.cuDevicePrimaryCtxGetState(_cu_devices[i], &flags, &active),
                      "cuDevicePrimaryCtxGetState")
            if active:
                return _cu_push(_cu_contexts[i])
    _cu_check(_cu.cuDeviceGetCount(&count), "cuDeviceGetCount")
    for i in range(min(count, MAX_CUDA_DEVICES)):
        if _cu_contexts[i] != NULL:
            continue
        _cu_check(_cu.cuDeviceGet(&dev, i), f"cuDeviceGet({i})")
        _cu_check(_cu.cuDevicePrimaryCtxGetState(dev, &flags, &active),
                  "cuDevicePrimaryCtxGetState")
        if active:
            return _cu_enter(i)
    return _cu_enter(0)


cdef int _cu_require_primary(uintptr_t ptr, CUcontext owner, int32_t ordinal) except -1:
    """Refuse device memory of a context other than its device's primary one (cuCtxCreate,
    PyCUDA without autoprimaryctx): torch, CuPy and JAX run in the primary context, where such
    an address is not mapped (spec §3.4). NULL (pool and VMM memory) belongs to no context."""
    cdef int dev, active = 0
    cdef unsigned int flags
    if owner == NULL or owner == _cu_contexts[ordinal]:
        return 0
    _cu_check(_cu.cuDeviceGet(&dev, ordinal), f"cuDeviceGet({ordinal})")
    _cu_check(_cu.cuDevicePrimaryCtxGetState(dev, &flags, &active), "cuDevicePrimaryCtxGetState")
    if active and _cu_primary(ordinal) == owner:
        return 0
    raise CudaError(f"__cuda_array_interface__: field 'data': pointer {ptr:#x} is memory of "
                    f"CUDA context {<uintptr_t>owner:#x}, not of GPU {ordinal}'s primary context "
                    "where torch, CuPy and JAX run; allocate it in the primary context (PyCUDA: "
                    "pycuda.autoprimaryctx) or copy it there first")


cdef int _cu_pointer_device(uintptr_t ptr, DLDevice *out) except -1:
    """The DLPack device owning a CUDA pointer, in one query; NULL (zero-size) is CUDA:0.

    The query needs a current context (any: addresses are unified); a thread without one (a
    worker, a JAX-only process) borrows an active primary context (_cu_borrow). Host memory
    counts as pinned (kDLCUDAHost) only where the CPU reads it at this very address: host-NUMA
    VMM memory is "host" memory without a host mapping, and is device memory as far as readers
    go. Device memory must be its device's primary context's (_cu_require_primary).
    """
    cdef unsigned int mem = 0, managed = 0
    cdef int ordinal = 0
    cdef void *host = NULL
    cdef CUcontext owner = NULL
    cdef void *values[5]
    cdef CUcontext current = NULL
    cdef CUresult rc
    out.device_type = kDLCUDA
    out.device_id = 0
    if ptr == 0:
        return 0
    _cu_load()
    values[0] = &mem
    values[1] = &ordinal
    values[2] = &managed
    values[3] = &host
    values[4] = &owner
    _cu_check(_cu.cuCtxGetCurrent(&current), "cuCtxGetCurrent")
    if current == NULL:
        _cu_borrow()
    rc = _cu.cuPointerGetAttributes(5, _CU_ATTRIBUTES, values, ptr)
    if current == NULL:
        _cu_leave()
    _cu_check(rc, "cuPointerGetAttributes")
    if managed or mem == CU_MEMORYTYPE_UNIFIED:
        out.device_type = kDLCUDAManaged
    elif mem == CU_MEMORYTYPE_HOST and <uintptr_t>host == ptr:
        out.device_type = kDLCUDAHost
        ordinal = max(ordinal, 0)
    elif mem != CU_MEMORYTYPE_DEVICE and mem != CU_MEMORYTYPE_HOST:
        raise CudaError(f"__cuda_array_interface__: field 'data': pointer {ptr:#x} has CUDA "
                        f"memory type {mem}, which DLPack cannot describe")
    if ordinal < 0 or ordinal >= MAX_CUDA_DEVICES:
        raise CudaError(f"__cuda_array_interface__: field 'data': the CUDA driver gives pointer "
                        f"{ptr:#x} device ordinal {ordinal}, which is not a device")
    if out.device_type == kDLCUDA:
        _cu_require_primary(ptr, owner, ordinal)
    out.device_id = ordinal
    return 0


cdef int _cu_stream_wait(int32_t device_id, uintptr_t producer, uintptr_t consumer) except -1:
    """Queue on consumer a wait for the work queued so far on producer (the host goes on).

    The event is created and recorded in the producer's stream's context (libcuda refuses to
    record an event on a stream of another context); the consumer's stream waits on it in its
    own context.
    """
    cdef CUevent event = NULL
    cdef bint capturing
    cdef CUcontext pctx = _cu_stream_context(device_id, producer)
    cdef CUcontext cctx = _cu_stream_context(device_id, consumer)
    _cu_push(pctx)
    try:
        if consumer == CU_STREAM_LEGACY or cctx == pctx:
            capturing = _cu_capturing(consumer)
        else:
            _cu_push(cctx)
            try:
                capturing = _cu_capturing(consumer)
            finally:
                _cu_leave()
        if capturing and (producer == CU_STREAM_LEGACY or not _cu_capturing(producer)):
            _capture_refusal(consumer, f"the producer's work is on stream {producer:#x}, "
                             "outside the capture, and a captured stream may not wait for it")
        _cu_check(_cu.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        _cu_check(_cu.cuEventRecord(event, <CUstream>producer), "cuEventRecord")
        if cctx == pctx:
            _cu_check(_cu.cuStreamWaitEvent(<CUstream>consumer, event, 0), "cuStreamWaitEvent")
        else:
            _cu_push(cctx)
            try:
                _cu_check(_cu.cuStreamWaitEvent(<CUstream>consumer, event, 0),
                          "cuStreamWaitEvent")
            finally:
                _cu_leave()
    finally:
        if event != NULL:
            _cu.cuEventDestroy(event)
        _cu_leave()
    return 0


cdef int _cu_stream_sync(int32_t device_id, uintptr_t stream) except -1:
    """Block the host (not the interpreter) until stream's queued work is done."""
    cdef CUresult rc
    _cu_push(_cu_stream_context(device_id, stream))
    with nogil:
        rc = _cu.cuStreamSynchronize(<CUstream>stream)
        _cu_leave()
    return _cu_check(rc, "cuStreamSynchronize")


cdef int _cu_event_wait(int32_t device_id, CUevent event, uintptr_t consumer) except -1:
    """Queue on consumer a wait for a producer's event (an Arrow sync_event), in the consumer
    stream's own context (a stream may wait on an event of another context)."""
    cdef CUresult rc
    _cu_push(_cu_stream_context(device_id, consumer))
    try:
        if _cu_capturing(consumer):
            _capture_refusal(consumer, "the producer's work is behind its event (an Arrow "
                             "sync_event), recorded outside the capture")
        rc = _cu.cuStreamWaitEvent(<CUstream>consumer, event, 0)
    finally:
        _cu_leave()
    return _cu_check(rc, "cuStreamWaitEvent")


cdef bint _cu_capturing(uintptr_t stream) except -1:
    """Whether stream, of the current context, is capturing a CUDA graph (cuStreamIsCapturing;
    an invalidated capture counts). The legacy stream never is, and is not asked: asking of it
    while a blocking stream captures would itself invalidate that capture."""
    cdef int status = 0
    if stream == CU_STREAM_LEGACY:
        return False
    _cu_check(_cu.cuStreamIsCapturing(<CUstream>stream, &status),
              f"cuStreamIsCapturing({stream:#x})")
    return status != 0


cdef int _capture_refusal(uintptr_t stream, str why) except -1:
    raise Refusal(f"__dlpack__: the consumer's stream {stream:#x} is capturing a CUDA graph and "
                  f"{why}, which would invalidate the capture (spec §10); make the exchange "
                  "before capture begins, or outside the graph")


cdef int _cu_capture_check(int32_t device_id, uintptr_t stream, str what) except -1:
    """Refuse work that needs the host to wait, allocate or copy synchronously (what) for a
    consumer whose stream is capturing a CUDA graph: such a call invalidates the capture."""
    if stream == CU_STREAM_LEGACY:
        return 0
    _cu_push(_cu_stream_context(device_id, stream))
    try:
        if _cu_capturing(stream):
            _capture_refusal(stream, f"{what} needs calls that synchronise or allocate")
    finally:
        _cu_leave()
    return 0


cdef int _cu_event_sync(int32_t device_id, CUevent event) except -1:
    """Block the host (not the interpreter) until a producer's event has happened."""
    cdef CUresult rc
    _cu_enter(device_id)
    with nogil:
        rc = _cu.cuEventSynchronize(event)
        _cu_leave()
    return _cu_check(rc, "cuEventSynchronize")


cdef CUevent _cu_event_record(int32_t device_id, uintptr_t stream,
                              CUcontext *context) except? NULL:
    """A new event recorded on stream, for a consumer to wait on; made in the stream's own
    context (where libcuda lets it be recorded), which is stored in context for
    _cu_event_destroy."""
    cdef CUevent event = NULL
    cdef CUresult rc
    cdef CUcontext ctx = _cu_stream_context(device_id, stream)
    _cu_push(ctx)
    try:
        _cu_check(_cu.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        rc = _cu.cuEventRecord(event, <CUstream>stream)
        if rc != 0:
            _cu.cuEventDestroy(event)
            _cu_fail(rc, "cuEventRecord")
    finally:
        _cu_leave()
    context[0] = ctx
    return event


cdef void _cu_event_destroy(CUcontext context, CUevent event,
                            unsigned int generation) noexcept nogil:
    """Free an event _cu_event_record made, from any thread, in the context it was made in;
    nothing when the driver that made it is gone (tests swap drivers)."""
    if (event != NULL and generation == _cu_generation and _cu_ready
            and _cu.cuCtxPushCurrent(context) == 0):
        _cu.cuEventDestroy(event)
        _cu_leave()


cdef int _cu_copy(int32_t device_id, void *dst, const void *src, size_t nbytes,
                  bint to_device, bint settle=False) except -1:
    """A copy between host memory and device_id's memory. To the device, from pageable memory,
    it returns once the bytes are staged, the DMA queued on the legacy default stream; settle
    waits for it to land."""
    cdef CUresult rc
    cdef const char *what = "cuMemcpyHtoD" if to_device else "cuMemcpyDtoH"
    _cu_enter(device_id)
    with nogil:
        if to_device:
            rc = _cu.cuMemcpyHtoD(<CUdeviceptr><uintptr_t>dst, src, nbytes)
            if rc == 0 and settle:
                what = "cuStreamSynchronize"
                rc = _cu.cuStreamSynchronize(<CUstream>CU_STREAM_LEGACY)
        else:
            rc = _cu.cuMemcpyDtoH(dst, <CUdeviceptr><uintptr_t>src, nbytes)
        _cu_leave()
    return _cu_check(rc, (<bytes>what).decode())


cdef int _cu_copy_to_device_on(int32_t device_id, uintptr_t stream, CUdeviceptr dst,
                               const void *src, size_t nbytes) except -1:
    """Queue a host-to-device copy on stream (cuMemcpyHtoDAsync): from pageable memory the
    driver stages the bytes before it returns, waiting for no stream (spec §10). Page-locked
    memory it would read only when the copy runs, after the source may be gone (torch's
    pinned tensors are kDLCPU): that is first copied into pageable memory here."""
    cdef CUresult rc = 0
    cdef unsigned int mem = 0
    cdef void *value = &mem
    cdef int attribute = CU_POINTER_ATTRIBUTE_MEMORY_TYPE
    cdef void *staged = NULL
    _cu_enter(device_id)
    try:
        _cu_check(_cu.cuPointerGetAttributes(1, &attribute, &value, <uintptr_t>src),
                  "cuPointerGetAttributes")
        if mem == CU_MEMORYTYPE_HOST:
            staged = _alloc_copy(nbytes)        # the copies' one allocator (pageable)
            if staged == NULL:
                raise MemoryError(f"__dlpack__: cannot allocate {nbytes} bytes")
            with nogil:
                memcpy(staged, src, nbytes)
            src = staged
        with nogil:
            rc = _cu_async.cuMemcpyHtoDAsync(dst, src, nbytes, <CUstream>stream)
    finally:
        _cu_leave()
        free(staged)                    # staged by the driver before cuMemcpyHtoDAsync returned
    return _cu_check(rc, "cuMemcpyHtoDAsync")


cdef inline bint _odometer(int n, int64_t *idx, const int64_t *extent, const int64_t *pitch,
                           int64_t *offset) noexcept nogil:
    """The next index of n dimensions (outermost first), offset moved with it by their
    pitches; False after the last."""
    cdef int i = n - 1
    while i >= 0:
        if idx[i] + 1 < extent[i]:
            idx[i] += 1
            offset[0] += pitch[i]
            return True
        offset[0] -= (extent[i] - 1) * pitch[i]
        idx[i] = 0
        i -= 1
    return False


cdef int _cu_copy_rows(int32_t device_id, char *dst, uintptr_t src, size_t width, int n,
                       const int64_t *extent, const int64_t *pitch, int64_t *idx) except -1:
    """Copy device memory to the host as rows of width bytes, one after another in dst: the
    rows are indexed by n dimensions (extent, source pitch in bytes, outermost first; idx: n
    int64 of the caller's scratch, the odometer's, so that the stack use is bounded). The
    innermost dimension makes the rows of one copy, and the next one its slices where its pitch
    is a whole number of rows (a 3-D view of a strided array), so the driver is called once per
    index of the dimensions outside those: cuMemcpy3D, cuMemcpy2D for one slice, cuMemcpyDtoH
    for one row. Rows go one by one where their pitch overlaps a row or exceeds the device's
    CU_DEVICE_ATTRIBUTE_MAX_PITCH (which the driver enforces even for one row; a row may be
    longer than that: a contiguous run over 2 GiB). Where those calls would cost more than
    copying the bytes between the rows (_CU_CALL_BYTES per call) and the rows lie in memory in
    that order, the span covering them is copied instead, in windows of _CU_SPAN_CHUNK bytes,
    and each row taken from its window on the host (_cu_copy_span)."""
    cdef CUDA_MEMCPY3D c
    cdef CUDA_MEMCPY2D c2
    cdef CUresult rc = 0
    cdef int i, dev, max_pitch = 0
    cdef int64_t offset = 0, height, depth, row_pitch, rows
    cdef int64_t copy_shape[4]
    cdef bint done
    cdef const char *what
    _cu_enter(device_id)
    if _cu_max_pitch[device_id] == 0:
        dev = _cu_devices[device_id]
        rc = _cu.cuDeviceGetAttribute(&max_pitch, CU_DEVICE_ATTRIBUTE_MAX_PITCH, dev)
        if rc != 0:
            _cu_leave()
            return _cu_check(rc, "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_MAX_PITCH)")
        _cu_max_pitch[device_id] = max_pitch if max_pitch > 0 else 1
    try:
        done = _cu_copy_span(dst, src, width, n, extent, pitch, _cu_max_pitch[device_id], idx)
    except BaseException:
        _cu_leave()
        raise
    if done:
        _cu_leave()
        return 0
    n = _cu_copy_shape(width, n, extent, pitch, _cu_max_pitch[device_id], copy_shape)
    height, row_pitch, depth, rows = copy_shape[0], copy_shape[1], copy_shape[2], copy_shape[3]
    what = (b"cuMemcpy3D" if depth > 1 else b"cuMemcpy2D" if height > 1 else b"cuMemcpyDtoH")
    memset(&c, 0, sizeof(c))
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE
    c.dstMemoryType = CU_MEMORYTYPE_HOST
    c.srcPitch = row_pitch
    c.srcHeight = rows if depth > 1 else height
    c.dstPitch = width
    c.dstHeight = height
    c.WidthInBytes = width
    c.Height = height
    c.Depth = depth
    memset(&c2, 0, sizeof(c2))
    c2.srcMemoryType = CU_MEMORYTYPE_DEVICE
    c2.dstMemoryType = CU_MEMORYTYPE_HOST
    c2.srcPitch = row_pitch
    c2.dstPitch = width
    c2.WidthInBytes = width
    c2.Height = height
    for i in range(n):
        idx[i] = 0
    with nogil:
        while True:
            if depth > 1:
                c.srcDevice = src + offset
                c.dstHost = dst
                rc = _cu.cuMemcpy3D(&c)
            elif height > 1:
                c2.srcDevice = src + offset
                c2.dstHost = dst
                rc = _cu.cuMemcpy2D(&c2)
            else:
                rc = _cu.cuMemcpyDtoH(dst, src + offset, width)
            if rc != 0:
                break
            dst += width * height * depth
            if not _odometer(n, idx, extent, pitch, &offset):
                break
        _cu_leave()
    return _cu_check(rc, (<bytes>what).decode())


cdef int _cu_copy_shape(size_t width, int n, const int64_t *extent, const int64_t *pitch,
                        size_t max_pitch, int64_t *shape) noexcept nogil:
    """The one copy _cu_copy_rows repeats: shape gets its height (rows of a 2-D copy), their
    pitch, its depth (slices of a 3-D copy) and their pitch in rows; returns how many of the
    outer dimensions index the repeats (the innermost taken in rows, the next in slices)."""
    shape[0], shape[1], shape[2], shape[3] = 1, <int64_t>width, 1, 1
    if n > 0 and pitch[n - 1] >= <int64_t>width and pitch[n - 1] <= <int64_t>max_pitch:
        n -= 1                          # the innermost dimension: the rows of each copy
        shape[0], shape[1] = extent[n], pitch[n]
        if n > 0 and pitch[n - 1] % pitch[n] == 0 and pitch[n - 1] // pitch[n] >= extent[n]:
            n -= 1                      # the next: slices of a whole number of rows
            shape[2], shape[3] = extent[n], pitch[n] // shape[1]
    return n


cdef bint _cu_copy_span(char *dst, uintptr_t src, size_t width, int n, const int64_t *extent,
                        const int64_t *pitch, size_t max_pitch, int64_t *idx) except -1:
    """_cu_copy_rows' other way (spec §10): copy the span covering the rows in windows of at
    most _CU_SPAN_CHUNK bytes (host memory bounded whatever the span), each row then copied
    from its window to dst on the host; in a context made current. False, with nothing copied,
    where the rows are not in memory order (overlapping or interleaved: a window would be
    copied again for each) or where the calls the windows save (_CU_CALL_BYTES each) cost less
    than the bytes between the rows."""
    cdef int64_t span = <int64_t>width, rows = 1, calls, base = 0, end = 0, offset = 0
    cdef int64_t window, length, windows
    cdef int64_t copy_shape[4]
    cdef int i
    cdef char *buf
    cdef CUresult rc = 0
    for i in range(n - 1, -1, -1):      # reach of the rows inside each index of dimension i
        if pitch[i] < span:
            return False                # overlaps or interleaves the dimensions inside it
        span += (extent[i] - 1) * pitch[i]
        rows *= extent[i]
    calls = 1
    for i in range(_cu_copy_shape(width, n, extent, pitch, max_pitch, copy_shape)):
        calls *= extent[i]
    window = span if span < _CU_SPAN_CHUNK else max(_CU_SPAN_CHUNK, <int64_t>width)
    # A window starts at a row and the next at the first row it cuts (straddling rows), more
    # than window - width bytes on: at most this many windows, each re-reading under a row
    # (fewer windows than calls, so those bytes are under calls * width <= span: no overflow).
    windows = (span - <int64_t>width) // (window - <int64_t>width + 1) + 1
    if (calls <= windows or _CU_CALL_BYTES == 0
            or (span - rows * <int64_t>width + (windows - 1) * (<int64_t>width - 1))
            // _CU_CALL_BYTES >= calls - windows):
        return False
    buf = <char *>_alloc_copy(window)
    if buf == NULL:
        raise MemoryError(f"cannot allocate a {window}-byte window for a device copy")
    for i in range(n):
        idx[i] = 0
    with nogil:
        while True:
            if offset + <int64_t>width > end:       # the row's bytes start the next window
                base = offset
                length = min(window, span - offset)
                rc = _cu.cuMemcpyDtoH(buf, src + offset, length)
                if rc != 0:
                    break
                end = base + length
            memcpy(dst, buf + (offset - base), width)
            dst += width
            if not _odometer(n, idx, extent, pitch, &offset):
                break
    free(buf)
    _cu_check(rc, "cuMemcpyDtoH")
    return True


cdef int _cu_copy_on(int32_t device_id, uintptr_t stream, CUdeviceptr dst, CUdeviceptr src,
                     size_t nbytes, bint settle) except -1:
    """Queue a device-to-device copy on stream (in its own context); settle waits for it."""
    cdef CUresult rc
    cdef const char *what = "cuMemcpyDtoDAsync"
    _cu_push(_cu_stream_context(device_id, stream))
    rc = _cu.cuMemcpyDtoDAsync(dst, src, nbytes, <CUstream>stream)
    with nogil:
        if rc == 0 and settle:
            what = "cuStreamSynchronize"
            rc = _cu.cuStreamSynchronize(<CUstream>stream)
        _cu_leave()
    return _cu_check(rc, (<bytes>what).decode())


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


@cython.final
@cython.auto_pickle(False)    # internal: never pickled (DLPackObject has its own reduce)
cdef class _DeviceMemory:
    """Device memory holding a copy pydlpack made; freed, in its device's primary context,
    when the last capsule viewing it is deleted."""
    cdef readonly int32_t device_id
    cdef readonly CUdeviceptr ptr
    cdef unsigned int generation        # the driver that allocated it (tests swap drivers)
    cdef unsigned int epoch             # the primary context it lives in (see _cu_primary)
    cdef unsigned long long buffer_id   # CU_POINTER_ATTRIBUTE_BUFFER_ID of the allocation
    cdef uintptr_t stream               # stream-ordered (cuMemAllocAsync): freed on it; else 0

    def __dealloc__(self):
        cdef CUcontext ctx
        cdef CUdeviceptr ptr = self.ptr
        cdef int dev, active = 0
        cdef unsigned int flags
        cdef unsigned long long now = 0
        cdef void *value = &now
        if not (ptr and self.generation == _cu_generation and _cu_ready
                and self.epoch == _cu_epochs[self.device_id]):
            return
        ctx = _cu_contexts[self.device_id]
        dev = _cu_devices[self.device_id]
        with nogil:         # cuMemFree waits for the device: never with the GIL held
            if ((_cu.cuDevicePrimaryCtxGetState(dev, &flags, &active) != 0 or active)
                    and _cu.cuCtxPushCurrent(ctx) == 0):
                # A reset context (Numba's cuda.close()) freed it already, and the allocator
                # may have handed the address to another library since: free only the
                # allocation this object made.
                if (_cu.cuPointerGetAttributes(1, &_CU_BUFFER_ID, &value, ptr) == 0
                        and now == self.buffer_id):
                    if self.stream:     # after the work queued on it so far; the host goes on
                        _cu_async.cuMemFreeAsync(ptr, <CUstream>self.stream)
                    else:
                        _cu.cuMemFree(ptr)
                _cu_leave()


cdef bint _cu_ordered_on(int32_t device_id, uintptr_t stream) except -1:
    """Whether a copy for a consumer's stream can be allocated, copied and freed in stream order
    on it: the driver has stream-ordered allocation and the stream is of device_id's primary
    context, where pydlpack's copies live (spec §10)."""
    if stream == 0 or not _cu_async_load():
        return False
    return (stream == CU_STREAM_LEGACY or stream == CU_STREAM_PER_THREAD
            or _cu_stream_context(device_id, stream) == _cu_primary(device_id))


cdef _DeviceMemory _cu_alloc(int32_t device_id, size_t nbytes, uintptr_t stream=0):
    """Device memory for a copy in device_id's primary context: with stream (where
    _cu_ordered_on says so) from the device's pool, ordered on it (cuMemAllocAsync), freed on it
    by the deleter (cuMemFreeAsync); else cuMemAlloc, freed by cuMemFree."""
    cdef _DeviceMemory mem = _DeviceMemory.__new__(_DeviceMemory)
    cdef CUdeviceptr ptr = 0
    cdef unsigned long long buffer_id = 0
    cdef void *value = &buffer_id
    cdef CUresult rc
    cdef bint made = False
    _cu_enter(device_id)
    with nogil:
        if stream:
            rc = _cu_async.cuMemAllocAsync(&ptr, nbytes if nbytes else 1, <CUstream>stream)
        else:
            rc = _cu.cuMemAlloc(&ptr, nbytes if nbytes else 1)
        if rc == 0:
            made = True
            rc = _cu.cuPointerGetAttributes(1, &_CU_BUFFER_ID, &value, ptr)
            if rc != 0:
                if stream:
                    _cu_async.cuMemFreeAsync(ptr, <CUstream>stream)
                else:
                    _cu.cuMemFree(ptr)
        _cu_leave()
    if rc != 0:
        _cu_fail(rc, "cuPointerGetAttributes(CU_POINTER_ATTRIBUTE_BUFFER_ID)" if made
                 else f"cuMemAllocAsync({nbytes})" if stream else f"cuMemAlloc({nbytes})")
    # the per-thread default stream is the deleter's thread's own: the legacy stream, which
    # waits for every thread's, frees it instead
    mem.stream = CU_STREAM_LEGACY if stream == CU_STREAM_PER_THREAD else stream
    mem.device_id = device_id
    mem.ptr = ptr
    mem.buffer_id = buffer_id
    mem.generation = _cu_generation
    mem.epoch = _cu_epochs[device_id]
    return mem


cdef object _stream_index(object stream, str what, bint argument):
    """The one rule for a stream argument's type: an int (NumPy's too) taken with __index__
    before any comparison; bool and everything else refused, naming `what`. An __index__
    that raises other than TypeError makes no int either: the caller's argument is then a
    TypeError, a provider's field a refusal, naming `what`, the error chained (spec §4)."""
    if type(stream) is bool:
        raise Refusal(f"{what} = {stream!r} is not None or an int")
    try:
        return PyNumber_Index(stream)
    except TypeError:
        raise Refusal(f"{what} = {stream!r} is not None or an int") from None
    except Exception as e:
        why = (f"{what}: a {type(stream).__name__} object whose __index__ raised "
               f"{type(e).__name__}: {e}; ")
        if argument:
            raise TypeError(why + "pass None or an int") from e
        raise Refusal(why + "it is not None or an int") from e


cdef int _stream_int(object stream, str what, bint argument, uintptr_t *out) except -1:
    """A stream named by an int (NumPy's too): 1 and out set, or 0 for -1; `what` names the
    argument in refusals (argument: the caller's, not a provider's field). The value is taken
    with __index__ before any comparison, so an int subclass whose == lies cannot pass 0
    (ambiguous) as something else."""
    value = _stream_index(stream, what, argument)
    if value == -1:
        return 0
    if value == 0:
        raise Refusal(f"{what} = 0 is disallowed for CUDA (ambiguous); pass 1 for the "
                      "legacy default stream or 2 for per-thread")
    try:
        out[0] = value
    except OverflowError:
        raise Refusal(f"{what} = {stream!r} is not a CUDA stream handle") from None
    return 1


cdef bint _cai_names_stream(dict d):
    """Whether a CAI says which stream its data's work is on: version 3 with a 'stream' key.
    Without one (version 2; torch's CAI has no stream) the producer's stream is unknown, and a
    consumer must order after the legacy default stream, where that work defaults to."""
    version = d.get("version", 3)        # the reader's default
    return "stream" in d and type(version) is int and version >= 3


cdef int _consumer_stream(object stream, uintptr_t *out) except -1:
    """The CUDA stream a DLPack consumer's stream argument names: 1 and out set, or 0 for -1
    (no synchronisation); None is the legacy default stream (array API)."""
    if stream is None:
        out[0] = CU_STREAM_LEGACY
        return 1
    return _stream_int(stream, "__dlpack__: stream", True, out)


# -- stream ordering: a consumer after the producer's pending work (docs/spec.md §10) ----------

cdef enum ProducerWork:        # what _producer_ready found
    WORK_NONE                   # nothing to wait for
    WORK_STREAM                 # the work is on the stream given back
    WORK_EVENT                  # the work is behind the CUevent given back


cdef inline void _set_sync(DLPackObject r, SyncKind kind, uintptr_t stream,
                           DLPackExchangeAPI *api, void *event, object provider) noexcept:
    r.sync.kind = kind
    r.sync.stream = stream
    r.sync.work_api = api
    r.sync.event = event
    r._sync_provider = provider


cdef inline void _sync_on_stream(DLPackObject r, uintptr_t stream) noexcept:
    """The producer's work is on stream (a CAI's, or the legacy one a capsule's producer
    synchronised to for us)."""
    _set_sync(r, SYNC_STREAM, stream, NULL, NULL, None)


cdef inline void _sync_by_api(DLPackObject r, DLPackExchangeAPI *api) noexcept:
    """The producer's work is on the stream api's current_work_stream names at each export."""
    _set_sync(r, SYNC_API, 0, api, NULL, None)


cdef inline void _sync_by_provider(DLPackObject r, object provider) noexcept:
    """A __dlpack__ provider, asked again at each export, orders its own work."""
    _set_sync(r, SYNC_PROVIDER, 0, NULL, NULL, provider)


cdef inline void _sync_by_event(DLPackObject r, void *event) noexcept:
    """The producer's work is behind event (an Arrow producer's sync_event, spec §13)."""
    _set_sync(r, SYNC_EVENT, 0, NULL, event, None)


cdef inline void _sync_as(DLPackObject r, DLPackObject src) noexcept:
    """r orders after src's producer as src does."""
    r.sync = src.sync
    r._sync_provider = src._sync_provider


cdef int _producer_ready(DLPackObject self, uintptr_t target, uintptr_t *stream,
                         void **event) except -1:
    """Where the producer's pending work can be awaited (the one reading of self.sync, spec
    §10): WORK_NONE, WORK_STREAM with stream set, or WORK_EVENT with event set.

    A __dlpack__ provider is asked again to order its work before target (one that refuses
    the per-thread stream 2, torch, is asked for the legacy one, which 2 waits for), after
    which the work is on target; with target 0 (the caller names a stream to its consumer)
    its CUDA array interface's stream is taken, else it is asked for the legacy one."""
    cdef void *current = NULL
    cdef SyncKind kind = self.sync.kind
    if kind == SYNC_EVENT:
        event[0] = self.sync.event
        return WORK_EVENT
    if kind == SYNC_PROVIDER:
        if target == 0:
            named = _provider_stream(self)
            if named is None:
                return WORK_NONE
            stream[0] = named
            return WORK_STREAM
        self._sync_provider.__dlpack__(
            stream=CU_STREAM_LEGACY if target == CU_STREAM_PER_THREAD else target)
        stream[0] = target
        return WORK_STREAM
    if kind == SYNC_API:
        if self.sync.work_api.current_work_stream(
                <c_DLDeviceType>self.desc.dl.device.device_type,
                self.desc.dl.device.device_id, &current) != 0:
            if PyErr_Occurred():
                return -1
            raise Refusal("__dlpack_c_exchange_api__: the producer's current_work_stream "
                          "failed")
        stream[0] = <uintptr_t>current if current != NULL else CU_STREAM_LEGACY
        return WORK_STREAM
    if kind == SYNC_STREAM:
        stream[0] = self.sync.stream
        return WORK_STREAM
    return WORK_NONE


cdef object _provider_stream(DLPackObject self):
    """The stream a __dlpack__ provider's work is on now, asked at each export: the one its own
    CUDA array interface names (CuPy and Numba name their current stream), else the legacy
    default stream, which the provider is asked again to order its work before."""
    cdef uintptr_t handle
    cdef str what = "__cuda_array_interface__: the provider's field 'stream'"
    try:
        cai = self._sync_provider.__cuda_array_interface__
    except Exception:
        cai = None
    if type(cai) is dict and _cai_names_stream(<dict>cai):
        stream = (<dict>cai).get("stream")
        if stream is None:
            return None
        if _stream_index(stream, what, False) != 0 and _stream_int(stream, what, False,
                                                                   &handle):
            return handle
    self._sync_provider.__dlpack__(stream=CU_STREAM_LEGACY)
    return CU_STREAM_LEGACY


cdef inline int _host_wait(DLPackObject self) except -1:
    """Before the host reads self's memory: pinned or managed CUDA memory is read once the
    producer's pending work is done; other host memory is ready as it is."""
    if _cuda_kind(self.desc.dl.device.device_type):
        _sync_for(self, None, True)
    return 0


cdef int _cu_managed_host_ready(int32_t device_id) except -1:
    """Before the host reads managed memory of device_id: where the device lacks
    CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS (WSL2, Windows, GPUs before Pascal) the CPU
    may not touch managed memory while any kernel runs (SIGSEGV), so the whole context is
    synchronised; elsewhere the producer's stream, already waited for, is enough."""
    cdef int value = 0
    cdef CUresult rc
    _cu_enter(device_id)
    try:
        if _cu_concurrent[device_id] == 0:
            _cu_check(_cu.cuDeviceGetAttribute(
                &value, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, _cu_devices[device_id]),
                "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)")
            _cu_concurrent[device_id] = 2 if value else 1
        if _cu_concurrent[device_id] == 1:
            with nogil:
                rc = _cu.cuCtxSynchronize()
            _cu_check(rc, "cuCtxSynchronize")
    finally:
        _cu_leave()
    return 0


cdef int _sync_for(DLPackObject self, object stream, bint host_reads) except -1:
    """Order a consumer's stream (or, when the host reads, the host) after the producer's work;
    a host read of managed memory also waits as the device requires (_cu_managed_host_ready).
    """
    _order_after_producer(self, stream, host_reads)
    if host_reads and self.desc.dl.device.device_type == kDLCUDAManaged:
        _cu_managed_host_ready(self.desc.dl.device.device_id)
    return 0


cdef int _order_after_producer(DLPackObject self, object stream, bint host_reads) except -1:
    """Order a consumer's stream (or, when the host reads, the host) after the producer's work
    (_producer_ready): one event wait, or for a host reader a synchronize."""
    cdef uintptr_t producer, consumer
    cdef void *event
    cdef int work
    cdef int32_t device_id = self.desc.dl.device.device_id
    if host_reads:
        if stream is not None:
            _consumer_stream(stream, &consumer)     # checked; the host waits whatever it says
        work = _producer_ready(self, CU_STREAM_LEGACY, &producer, &event)
        if work == WORK_EVENT:
            return _cu_event_sync(device_id, event)
        if work == WORK_STREAM:
            return _cu_stream_sync(device_id, producer)
        return 0
    if not _consumer_stream(stream, &consumer):
        return 0
    work = _producer_ready(self, consumer, &producer, &event)
    if work == WORK_EVENT:
        _cu_event_wait(device_id, event, consumer)
    elif work == WORK_STREAM and producer != consumer:
        _cu_stream_wait(device_id, producer, consumer)
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
