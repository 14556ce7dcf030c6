# Consumer side: __dlpack__ (DLPack 1.x versioned and legacy capsules).

cdef inline void _block_layout(size_t head, int ndim, size_t *dims_at,
                               size_t *data_at) noexcept nogil:
    """One export block: the managed struct, shape + strides at 8 bytes, data at 64 bytes."""
    dims_at[0] = (head + 7) & ~(<size_t>7)
    data_at[0] = (dims_at[0] + 2 * ndim * sizeof(int64_t) + 63) & ~(<size_t>63)


cdef void *_export(DLPackObject self, bint versioned, bint copy) except NULL:
    """One malloc holds the managed struct, shape, strides and (for copies) the data."""
    cdef int ndim = self.dl.ndim
    cdef size_t dims_at, data_at
    _block_layout(sizeof(DLManagedTensorVersioned) if versioned else sizeof(DLManagedTensor),
                  ndim, &dims_at, &data_at)
    cdef size_t nbytes = self._nbytes() if copy else 0
    cdef char *block = <char *>malloc(data_at + nbytes)
    cdef DLTensor *t
    cdef DLManagedTensorVersioned *mv
    cdef DLManagedTensor *ml
    cdef void *ctx
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
        try:
            _copy_contiguous(<char *>t.data, self, t.strides)
        except BaseException:
            free(block)
            raise
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

cdef object _dlpack_export(DLPackObject self, object stream, object max_version,
                           object dl_device, object copy):
    cdef bint versioned = False, do_copy
    if max_version is not None:
        try:
            versioned = max_version[0] >= 1
        except (TypeError, IndexError):
            raise TypeError(f"__dlpack__: max_version = {max_version!r} is not a "
                            "(major, minor) tuple")
    do_copy = (dl_device is not None or copy is not None) and _dlpack_copy_needed(
        self, dl_device, copy)
    if self.dl.device.device_type == kDLCPU and stream is None:
        pass                                        # the common case: nothing to arrange
    elif _cuda_kind(self.dl.device.device_type):
        _sync_for(self, stream, do_copy)
    elif stream is not None and not (_cuda_kind(self.dl.device.device_type) and stream == -1):
        raise BufferError(f"__dlpack__: stream = {stream!r} must be None for data on "
                          f"{_device_name(self.dl.device)}")
    if (not versioned and not do_copy and self._flags & FLAG_READ_ONLY
            and not self._legacy_readonly):
        raise BufferError(
            "__dlpack__: the data is read-only and this consumer asked for a legacy "
            "(unversioned) capsule, which cannot say so. Use a consumer that passes "
            "max_version >= (1, 0), or opt in with asdlpack(obj, allow_legacy_readonly=True)")
    block = _export(self, versioned, do_copy)
    if versioned:
        return PyCapsule_New(block, b"dltensor_versioned", _versioned_capsule_destructor)
    return PyCapsule_New(block, b"dltensor", _legacy_capsule_destructor)

cdef bint _dlpack_copy_needed(DLPackObject self, object dl_device, object copy) except -1:
    """Decide copy from the array API's dl_device and copy arguments."""
    cdef bint host = _host_accessible(self.dl.device.device_type)
    cdef bint moving = False
    if dl_device is not None:
        try:
            dt, did = dl_device
        except (TypeError, ValueError):
            raise TypeError(f"__dlpack__: dl_device = {dl_device!r} is not a "
                            "(device_type, device_id) tuple")
        if dt != self.dl.device.device_type or did != self.dl.device.device_id:
            if not (dt == kDLCPU and host):
                raise BufferError(f"__dlpack__: dl_device = {dl_device!r}: cannot move data "
                                  f"from {_device_name(self.dl.device)} there")
            moving = True
    if moving and copy is False:
        raise BufferError(f"__dlpack__: dl_device = {dl_device!r} needs a copy from "
                          f"{_device_name(self.dl.device)}, but copy=False")
    if (copy or moving) and not host:
        raise BufferError(f"__dlpack__: copy=True of data on {_device_name(self.dl.device)}"
                          " is not supported (pydlpack copies host memory only)")
    if (copy or moving) and self.dl.dtype.bits < 8 and not self._c_contig:
        raise BufferError(f"__dlpack__: copy of a strided {self.dtype.name} array")
    return bool(copy) or moving

cdef int _sync_for(DLPackObject self, object stream, bint host_copy) except -1:
    from dlpack import _cuda
    if host_copy:       # we read the memory on the host: wait for the producer's stream
        _cuda.sync_for_host(self._stream, self._resync)
    else:
        _cuda.sync_for_consumer(self._stream, stream, self._resync)
    return 0
