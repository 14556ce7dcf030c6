# CUDA contexts and pointer classification (docs/spec.md §3.4): primary contexts retained once
# per device (and again after another library reset one), made current and left (_cu_enter,
# _cu_leave), a stream's own context, an active one borrowed by a thread without any, and the
# DLPack device owning a pointer (_cu_pointer_device), memory of other contexts refused.

cdef int _CU_ATTRIBUTES[5]
_CU_ATTRIBUTES[:] = [CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                     CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                     CU_POINTER_ATTRIBUTE_CONTEXT]


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
