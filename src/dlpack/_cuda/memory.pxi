# Device memory pydlpack allocates for its copies (docs/spec.md §10): _DeviceMemory, freed in
# its primary context when its last view is gone (never after a reset freed it already), and the
# allocation, synchronous (cuMemAlloc) or ordered on a consumer's stream (cuMemAllocAsync, where
# _cu_ordered_on says so).

cdef int _CU_BUFFER_ID = CU_POINTER_ATTRIBUTE_BUFFER_ID


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
