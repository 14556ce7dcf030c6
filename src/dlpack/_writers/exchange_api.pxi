# Writer: DLPack 1.3's C exchange API (__dlpack_c_exchange_api__ on the type).
# Deleters and the export block are in _own.pxi.


cdef inline void _set_error(DLPackSetError set_error, void *ctx, const char *kind,
                            const char *message) noexcept nogil:
    if set_error != NULL:
        set_error(ctx, kind, message)


cdef bytes _ALLOCATES_TEXT = (
    f"pydlpack allocates CPU tensors of 0 to {MAX_NDIM} dimensions only".encode())
cdef const char *_ALLOCATES = _ALLOCATES_TEXT       # for the allocator, which runs without the GIL


cdef int _api_allocator(DLTensor *proto, DLManagedTensorVersioned **out, void *error_ctx,
                        DLPackSetError set_error) noexcept nogil:
    """A new C-contiguous CPU tensor shaped like proto, freed by its deleter; its data starts on
    a DATA_ALIGN boundary. proto's header and shape are read once, into a copy (on the stack
    for a few dimensions, spec §7: foreign threads call this)."""
    cdef int ndim, rc
    cdef int64_t small[STACK_DIMS]
    cdef int64_t *shape
    cdef DLTensor p
    if proto == NULL or out == NULL:
        _set_error(set_error, error_ctx, b"BufferError",
                   b"pydlpack allocator: the prototype or the output pointer is NULL")
        return -1
    p = proto[0]
    ndim = p.ndim
    if p.device.device_type != kDLCPU or not _ndim_in_range(ndim):
        _set_error(set_error, error_ctx, b"BufferError", _ALLOCATES)
        return -1
    if ndim > 0 and p.shape == NULL:
        _set_error(set_error, error_ctx, b"BufferError",
                   b"pydlpack allocator: prototype shape is NULL")
        return -1
    shape = _scratch(small, STACK_DIMS, ndim)
    if shape == NULL:
        _set_error(set_error, error_ctx, b"MemoryError",
                   b"pydlpack: out of memory allocating a tensor")
        return -1
    if ndim > 0:
        memcpy(shape, p.shape, ndim * sizeof(int64_t))
    rc = _api_allocate(&p, shape, out, error_ctx, set_error)
    _scratch_free(shape, small)
    return rc


cdef int _api_allocate(const DLTensor *p, const int64_t *shape, DLManagedTensorVersioned **out,
                       void *error_ctx, DLPackSetError set_error) noexcept nogil:
    """_api_allocator's tensor, for the header p and shape it copied and checked."""
    cdef int ndim = p.ndim
    cdef int64_t count, nbytes, itemsize
    cdef bint packed
    cdef size_t dims_at, data_at
    cdef char *block
    cdef DLManagedTensorVersioned *m
    cdef SizeError err
    err = _item_storage(p.dtype, False, &itemsize, &packed)
    if err == SIZE_OK:
        err = _element_count(ndim, shape, &count)
    if err == SIZE_OK:
        err = _byte_size(count, p.dtype, itemsize, packed, &nbytes)
    _block_layout(sizeof(DLManagedTensorVersioned), ndim, &dims_at, &data_at)
    if err == SIZE_OK and <uint64_t>nbytes > <uint64_t>INT64_MAX - data_at:
        err = SIZE_OVERFLOW
    if err:
        _set_error(set_error, error_ctx, b"BufferError", b"pydlpack allocator: the prototype's "
                   b"dtype or shape is invalid (zero bits, negative extent, or more bytes than "
                   b"memory can hold)")
        return -1
    block = <char *>_alloc_copy(data_at + <size_t>nbytes)
    if block == NULL:
        _set_error(set_error, error_ctx, b"MemoryError",
                   b"pydlpack: out of memory allocating a tensor")
        return -1
    m = <DLManagedTensorVersioned *>block
    m.version.major = DLPACK_MAJOR
    m.version.minor = DLPACK_MINOR
    m.manager_ctx = NULL
    m.deleter = _free_block
    m.flags = 0
    m.dl_tensor = p[0]
    m.dl_tensor.data = _data_start(block, data_at)
    m.dl_tensor.byte_offset = 0
    m.dl_tensor.shape = <int64_t *>(block + dims_at)
    m.dl_tensor.strides = m.dl_tensor.shape + ndim
    if ndim > 0:
        memcpy(m.dl_tensor.shape, shape, ndim * sizeof(int64_t))
    _c_strides(ndim, m.dl_tensor.shape, m.dl_tensor.strides)
    out[0] = m
    return 0


cdef int _api_check(void *obj) except -1:
    if obj == NULL:
        raise TypeError("__dlpack_c_exchange_api__: got NULL, not a DLPackObject")
    if type(<object>obj) is not DLPackObject:
        raise TypeError(f"__dlpack_c_exchange_api__: got a {type(<object>obj).__name__} object, "
                        "not a DLPackObject")
    return 0


cdef int _api_from_py(void *obj, DLManagedTensorVersioned **out) except -1:
    _api_check(obj)
    if out == NULL:
        raise TypeError("__dlpack_c_exchange_api__: the output pointer is NULL")
    _ready_on_work_stream(<DLPackObject>obj)
    out[0] = <DLManagedTensorVersioned *>_export(<DLPackObject>obj, True, EXPORT_VIEW)
    return 0


cdef int _ready_on_work_stream(DLPackObject self) except -1:
    """CUDA data is ready on the stream current_work_stream names (the legacy default one):
    queue the producer's pending work before it (an event wait; the host does not block)."""
    if _cuda_kind(self.desc.dl.device.device_type):
        _sync_for(self, None, False)
    return 0


cdef int _api_to_py(DLManagedTensorVersioned *m, void **out) except -1:
    """Own m (its ownership is stolen, on failure too: then its deleter has run)."""
    if out == NULL:
        if m != NULL:
            _delete_managed(m, True)
        raise TypeError("__dlpack_c_exchange_api__: the output pointer is NULL")
    obj = _adopt(m, True, None, "__dlpack_c_exchange_api__")      # NULL m: BufferError
    Py_INCREF(obj)
    out[0] = <PyObject *>obj
    return 0


cdef int _api_dltensor(void *obj, DLTensor *out) except -1:
    """A non-owning view; a bare DLTensor has no flags, so read-only data needs the opt-in."""
    _api_check(obj)
    if out == NULL:
        raise TypeError("__dlpack_c_exchange_api__: the output pointer is NULL")
    cdef DLPackObject r = <DLPackObject>obj
    if r.desc.flags & FLAG_READ_ONLY and not r._legacy_readonly:
        raise Refusal("__dlpack_c_exchange_api__: the data is read-only and a bare DLTensor "
                      "cannot say so; use managed_tensor_from_py_object_no_sync, or opt in "
                      "with asdlpack(obj, allow_legacy_readonly=True)")
    _ready_on_work_stream(r)
    out[0] = r.desc.dl
    return 0


cdef int _api_stream(c_DLDeviceType device_type, int32_t device_id,
                     void **out) noexcept nogil:
    """The stream our CUDA exports are ready on: the legacy default stream (CU_STREAM_LEGACY);
    CPU needs none. Callable without the GIL, from any interpreter; it takes the GIL only to
    report a NULL output, when the thread holds none."""
    if out == NULL:
        _set_error_any_thread(<PyObject *>TypeError, b"__dlpack_c_exchange_api__: "
                              b"current_work_stream's output pointer is NULL")
        return -1
    out[0] = <void *>1 if _cuda_kind(device_type) else NULL
    return 0


_API.header.version.major = DLPACK_MAJOR
_API.header.version.minor = DLPACK_MINOR
_API.header.prev_api = NULL
_API.managed_tensor_allocator = _api_allocator
_API.managed_tensor_from_py_object_no_sync = _api_from_py
_API.managed_tensor_to_py_object_no_sync = _api_to_py
_API.dltensor_from_py_object_no_sync = _api_dltensor
_API.current_work_stream = _api_stream
