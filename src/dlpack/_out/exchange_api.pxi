# Consumer side: DLPack 1.3's C exchange API (__dlpack_c_exchange_api__ on the type).


cdef extern from "Python.h":
    int PyGILState_Check() nogil
    void _decref_held "Py_DecRef"(PyObject *) nogil     # only called with the GIL held


cdef void _drop_context(void *ctx) noexcept nogil:
    """Release the DLPackObject an export holds; after interpreter shutdown, leave it."""
    if ctx == NULL or not Py_IsInitialized():
        return
    if PyGILState_Check():              # the usual case: a Python consumer frees it
        _decref_held(<PyObject *>ctx)
    else:
        with gil:
            Py_XDECREF(<PyObject *>ctx)


cdef void _versioned_deleter(DLManagedTensorVersioned *m) noexcept nogil:
    if m != NULL:
        _drop_context(m.manager_ctx)
        free(m)


cdef void _legacy_deleter(DLManagedTensor *m) noexcept nogil:
    if m != NULL:
        _drop_context(m.manager_ctx)
        free(m)


cdef extern from "Python.h":
    void PyErr_Fetch(PyObject **, PyObject **, PyObject **)
    void PyErr_Restore(PyObject *, PyObject *, PyObject *)


cdef void _versioned_capsule_destructor(object capsule) noexcept:
    cdef PyObject *et, *ev, *tb
    cdef DLManagedTensorVersioned *m
    if PyCapsule_IsValid(capsule, b"dltensor_versioned"):      # still unused: ours to free
        PyErr_Fetch(&et, &ev, &tb)
        m = <DLManagedTensorVersioned *>PyCapsule_GetPointer(capsule, b"dltensor_versioned")
        m.deleter(m)
        PyErr_Restore(et, ev, tb)


cdef void _legacy_capsule_destructor(object capsule) noexcept:
    cdef PyObject *et, *ev, *tb
    cdef DLManagedTensor *m
    if PyCapsule_IsValid(capsule, b"dltensor"):
        PyErr_Fetch(&et, &ev, &tb)
        m = <DLManagedTensor *>PyCapsule_GetPointer(capsule, b"dltensor")
        m.deleter(m)
        PyErr_Restore(et, ev, tb)


cdef int _copy_contiguous(char *dst, DLPackObject src, int64_t *out_strides) except -1:
    """Copy src's elements into dst in C order; write C-contiguous element strides."""
    cdef int ndim = src.dl.ndim, i
    cdef Py_ssize_t itemsize = src._itemsize()
    cdef int64_t size = src._size(), n
    cdef int64_t *idx
    cdef char *p
    src._c_strides(out_strides)
    if size == 0:
        return 0
    if src._c_contig:
        memcpy(dst, src.dl.data, src._nbytes())
        return 0
    idx = <int64_t *>calloc(ndim, sizeof(int64_t))
    if idx == NULL:
        raise MemoryError()
    for n in range(size):
        p = <char *>src.dl.data
        for i in range(ndim):
            p += idx[i] * src.dl.strides[i] * itemsize
        memcpy(dst, p, itemsize)
        dst += itemsize
        i = ndim - 1
        while i >= 0:
            idx[i] += 1
            if idx[i] < src.dl.shape[i]:
                break
            idx[i] = 0
            i -= 1
    free(idx)
    return 0


# -- the five functions of DLPackExchangeAPI -----------------------------------------------------

cdef void _free_block(DLManagedTensorVersioned *m) noexcept nogil:
    free(m)


cdef int _api_allocator(DLTensor *proto, DLManagedTensorVersioned **out, void *error_ctx,
                        DLPackSetError set_error) noexcept nogil:
    """A new C-contiguous CPU tensor shaped like proto, freed by its deleter."""
    cdef int i, ndim = proto.ndim
    cdef int64_t size = 1
    cdef size_t dims_at, data_at
    cdef char *block
    cdef DLManagedTensorVersioned *m
    if proto.device.device_type != kDLCPU or ndim < 0 or ndim > 64:
        set_error(error_ctx, b"BufferError", b"pydlpack allocates CPU tensors of ndim <= 64 only")
        return -1
    _block_layout(sizeof(DLManagedTensorVersioned), ndim, &dims_at, &data_at)
    for i in range(ndim):
        if proto.shape[i] < 0:
            set_error(error_ctx, b"ValueError", b"negative extent in prototype shape")
            return -1
        size *= proto.shape[i]
    block = <char *>malloc(data_at + <size_t>((size * proto.dtype.bits * proto.dtype.lanes + 7) // 8))
    if block == NULL:
        set_error(error_ctx, b"MemoryError", b"pydlpack: out of memory allocating a tensor")
        return -1
    m = <DLManagedTensorVersioned *>block
    m.version.major = DLPACK_MAJOR
    m.version.minor = DLPACK_MINOR
    m.manager_ctx = NULL
    m.deleter = _free_block
    m.flags = 0
    m.dl_tensor = proto[0]
    m.dl_tensor.data = block + data_at
    m.dl_tensor.byte_offset = 0
    m.dl_tensor.shape = <int64_t *>(block + dims_at)
    m.dl_tensor.strides = m.dl_tensor.shape + ndim
    size = 1
    for i in range(ndim - 1, -1, -1):
        m.dl_tensor.shape[i] = proto.shape[i]
        m.dl_tensor.strides[i] = size
        size *= proto.shape[i]
    out[0] = m
    return 0


cdef int _api_check(void *obj) except -1:
    if type(<object>obj) is not DLPackObject:
        raise TypeError(f"__dlpack_c_exchange_api__: got a {type(<object>obj).__name__}, "
                        "not a DLPackObject")
    return 0


cdef int _api_from_py(void *obj, DLManagedTensorVersioned **out) except -1:
    _api_check(obj)
    out[0] = <DLManagedTensorVersioned *>_export(<DLPackObject>obj, True, False)
    return 0


cdef int _api_to_py(DLManagedTensorVersioned *m, void **out) except -1:
    obj = _adopt(m, True, None, "__dlpack_c_exchange_api__")
    Py_INCREF(obj)
    out[0] = <PyObject *>obj
    return 0


cdef int _api_dltensor(void *obj, DLTensor *out) except -1:
    _api_check(obj)
    out[0] = (<DLPackObject>obj).dl
    return 0


cdef int _api_stream(int32_t device_type, int32_t device_id, void **out) noexcept:
    out[0] = NULL           # CPU needs none; on CUDA, the legacy default stream
    return 0


_API.header.version.major = DLPACK_MAJOR
_API.header.version.minor = DLPACK_MINOR
_API.header.prev_api = NULL
_API.managed_tensor_allocator = _api_allocator
_API.managed_tensor_from_py_object_no_sync = _api_from_py
_API.managed_tensor_to_py_object_no_sync = _api_to_py
_API.dltensor_from_py_object_no_sync = _api_dltensor
_API.current_work_stream = _api_stream
