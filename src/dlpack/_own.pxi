# Ownership: adopting a producer's managed tensor, the export block we hand out, its deleters,
# the one capsule destructor for both capsule names, and the copy routine.


cdef extern from "Python.h":
    int PyGILState_Check() nogil
    void _decref_held "Py_DecRef"(PyObject *) nogil     # only called with the GIL held
    void PyErr_Fetch(PyObject **, PyObject **, PyObject **)
    void PyErr_Restore(PyObject *, PyObject *, PyObject *)

cdef extern from "string.h":
    int strcmp(const char *, const char *) nogil


# -- producers' tensors we own ------------------------------------------------------------------

cdef void _delete_managed(void *m, bint versioned) noexcept:
    """Hand a producer's struct back to it: call its deleter (NULL means nothing to free)."""
    if versioned:
        if (<DLManagedTensorVersioned *>m).deleter != NULL:
            (<DLManagedTensorVersioned *>m).deleter(<DLManagedTensorVersioned *>m)
    elif (<DLManagedTensor *>m).deleter != NULL:
        (<DLManagedTensor *>m).deleter(<DLManagedTensor *>m)


cdef DLPackObject _adopt(void *m, bint versioned, object base, str protocol):
    """Own a producer's managed tensor from here on; its deleter runs when the view dies.

    A struct of a newer major version is not read (its layout may differ): its deleter runs
    and BufferError is raised. An unversioned struct cannot say whether its memory may be
    written, so it is read-only unless the caller declares otherwise (asdlpack's
    ``legacy_writable``).
    """
    cdef DLPackObject self
    cdef DLTensor *t
    cdef DLManagedTensorVersioned *mv = <DLManagedTensorVersioned *>m
    cdef uintptr_t data
    if m == NULL:
        raise BufferError(f"{protocol}: the managed tensor pointer is NULL")
    self = _new_object()
    self._managed = m                   # from here on, dropping self calls the deleter once
    self._managed_versioned = versioned
    self._base = base
    if versioned:
        if mv.version.major > DLPACK_MAJOR:
            raise BufferError(f"{protocol}: field 'version' = {mv.version.major}."
                              f"{mv.version.minor} has a newer major version than this pydlpack "
                              f"implements ({DLPACK_MAJOR}.{DLPACK_MINOR}); upgrade pydlpack")
        t = &mv.dl_tensor
        self._flags = mv.flags & (FLAG_READ_ONLY | FLAG_SUBBYTE_PADDED)
    else:
        t = &(<DLManagedTensor *>m).dl_tensor
        self._flags = FLAG_READ_ONLY
        self._legacy_import = True
    if t.ndim > 0 and t.shape == NULL:
        raise BufferError(f"{protocol}: field 'shape' is NULL for ndim = {t.ndim}")
    self._alloc_dims(t.ndim, protocol)
    memcpy(self.dl.shape, t.shape, t.ndim * sizeof(int64_t))
    if t.strides != NULL:
        memcpy(self.dl.strides, t.strides, t.ndim * sizeof(int64_t))
    data = <uintptr_t>t.data
    if t.byte_offset > <uint64_t>INT64_MAX or <uintptr_t>-1 - data < t.byte_offset:
        raise BufferError(f"{protocol}: field 'byte_offset' = {t.byte_offset} moves the data "
                          f"pointer {data:#x} outside the address space")
    self.dl.data = <void *>(data + t.byte_offset)
    self.dl.device = t.device
    self.dl.dtype = t.dtype
    if _cuda_kind(t.device.device_type):
        self._stream = 1        # the producer synchronised to the legacy default stream for us
    self._finish(protocol, STRIDES_C if t.strides == NULL else STRIDES_ELEMENTS, 0, -1)
    return self


# -- the export block: one allocation per exported tensor ---------------------------------------

cdef inline void _block_layout(size_t head, int ndim, size_t *dims_at,
                               size_t *data_at) noexcept nogil:
    """The managed struct, then shape + strides at 8 bytes, then (copies) data at 64 bytes."""
    dims_at[0] = (head + 7) & ~(<size_t>7)
    data_at[0] = (dims_at[0] + 2 * <size_t>ndim * sizeof(int64_t) + 63) & ~(<size_t>63)


cdef void *_export(DLPackObject self, bint versioned, bint copy) except NULL:
    """One malloc holds the managed struct, shape, strides and (for copies) the data."""
    cdef int ndim = self.dl.ndim
    cdef size_t dims_at, data_at
    _block_layout(sizeof(DLManagedTensorVersioned) if versioned else sizeof(DLManagedTensor),
                  ndim, &dims_at, &data_at)
    cdef size_t nbytes = <size_t>self._nbytes if copy else 0
    cdef char *block
    cdef DLTensor *t
    cdef DLManagedTensorVersioned *mv
    cdef DLManagedTensor *ml
    cdef void *ctx
    if nbytes > <size_t>INT64_MAX - data_at:
        raise MemoryError(f"__dlpack__: a copy of {self._nbytes} bytes cannot be allocated")
    block = <char *>malloc(data_at + nbytes)
    if block == NULL:
        raise MemoryError(f"__dlpack__: cannot allocate {data_at + nbytes} bytes")
    if versioned:
        mv = <DLManagedTensorVersioned *>block
        mv.version.major = DLPACK_MAJOR
        mv.version.minor = DLPACK_MINOR
        mv.deleter = _versioned_deleter
        mv.flags = (self._flags & FLAG_SUBBYTE_PADDED) | (
            FLAG_IS_COPIED if copy else self._flags & FLAG_READ_ONLY)
        t = &mv.dl_tensor
    else:
        ml = <DLManagedTensor *>block
        ml.deleter = _legacy_deleter
        t = &ml.dl_tensor
    t[0] = self.dl
    t.byte_offset = 0
    t.shape = <int64_t *>(block + dims_at)
    t.strides = t.shape + ndim
    memcpy(t.shape, self.dl.shape, ndim * sizeof(int64_t))
    if copy:
        t.data = block + data_at
        t.device.device_type = kDLCPU
        t.device.device_id = 0
        _copy_contiguous(<char *>t.data, self, t.strides)
        ctx = NULL
    else:
        memcpy(t.strides, self.dl.strides, ndim * sizeof(int64_t))
        ctx = <void *>self
        Py_INCREF(self)
    if versioned:
        mv.manager_ctx = ctx
    else:
        ml.manager_ctx = ctx
    return block


cdef void _copy_contiguous(char *dst, DLPackObject src, int64_t *out_strides) noexcept:
    """Copy src's elements into dst (src._nbytes bytes) in C order; write C element strides.

    Packed sub-byte arrays are always C-contiguous (_finish refuses others), so the strided
    loop moves whole items of src._isz bytes.
    """
    cdef int ndim = src.dl.ndim, i
    cdef int64_t n
    cdef int64_t idx[MAX_NDIM]
    cdef char *p
    _c_strides(ndim, src.dl.shape, out_strides)
    if src._count == 0:
        return
    if src._c_contig:
        memcpy(dst, src.dl.data, src._nbytes)
        return
    for i in range(ndim):
        idx[i] = 0
    p = <char *>src.dl.data
    for n in range(src._count):
        memcpy(dst, p, src._isz)
        dst += src._isz
        i = ndim - 1
        while i >= 0:       # odometer; p never leaves the range _finish checked for overflow
            if idx[i] + 1 < src.dl.shape[i]:
                idx[i] += 1
                p += src.dl.strides[i] * src._isz
                break
            p -= (src.dl.shape[i] - 1) * src.dl.strides[i] * src._isz
            idx[i] = 0
            i -= 1


# -- deleters and the capsule destructor ---------------------------------------------------------

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


cdef void _free_block(DLManagedTensorVersioned *m) noexcept nogil:
    free(m)


cdef void _capsule_destructor(object capsule) noexcept:
    """Free an export nobody consumed: only while the capsule keeps its unused name."""
    cdef PyObject *et
    cdef PyObject *ev
    cdef PyObject *tb
    cdef const char *name = PyCapsule_GetName(capsule)
    cdef void *m
    if name == NULL:
        return
    PyErr_Fetch(&et, &ev, &tb)
    if strcmp(name, b"dltensor_versioned") == 0:
        m = PyCapsule_GetPointer(capsule, name)
        if m != NULL:
            _delete_managed(m, True)
    elif strcmp(name, b"dltensor") == 0:
        m = PyCapsule_GetPointer(capsule, name)
        if m != NULL:
            _delete_managed(m, False)
    PyErr_Restore(et, ev, tb)
