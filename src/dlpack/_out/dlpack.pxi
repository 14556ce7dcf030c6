# Consumer side: __dlpack__ (DLPack 1.x versioned and legacy capsules), with the array API's
# dl_device / copy: host copies of host or CUDA data, and CUDA copies of host data (docs/spec.md §10).
# The export block, its deleters and the capsule destructor live in _own.pxi.


cdef object _dlpack_export(DLPackObject self, object stream, object max_version,
                           object dl_device, object copy):
    cdef bint versioned = False, do_copy
    cdef int32_t device_type = self.dl.device.device_type
    cdef DLDevice target = self.dl.device
    if (type(max_version) is tuple and len(<tuple>max_version) == 2
            and type((<tuple>max_version)[0]) is int and type((<tuple>max_version)[1]) is int):
        versioned = (<tuple>max_version)[0] >= 1        # what every consumer passes: no calls
    elif max_version is not None:
        try:
            major, minor = max_version
            versioned = PyNumber_Index(major) >= 1
            PyNumber_Index(minor)
        except (TypeError, ValueError):
            raise TypeError(f"__dlpack__: max_version = {max_version!r} is not a "
                            "(major, minor) tuple of ints") from None
    if dl_device is not None:
        _target(self, dl_device, copy, &target)
    if target.device_type == kDLCUDA and device_type != kDLCUDA:
        block = _export_to_device(self, versioned, target.device_id, stream)
    else:
        do_copy = _export_copy(self, versioned, copy, target.device_type != device_type)
        if device_type == kDLCPU and stream is None:
            pass                                        # the common case: nothing to arrange
        elif _cuda_kind(device_type):
            _sync_for(self, stream, do_copy)
        elif device_type == kDLROCM and stream is not None and stream != -1:
            if self._resync is None:
                raise BufferError(f"__dlpack__: stream = {stream!r}: pydlpack cannot order ROCm "
                                  "streams for this provider; pass stream=None or -1")
            self._resync.__dlpack__(stream=stream)  # the provider orders itself; capsule dropped
        elif stream is not None and not (device_type == kDLROCM and stream == -1):
            raise BufferError(f"__dlpack__: stream = {stream!r} must be None for data on "
                              f"{_device_name(self.dl.device)}")
        block = _export(self, versioned, EXPORT_HOST_COPY if do_copy else EXPORT_VIEW)
        if do_copy and not _host_accessible(device_type):
            _fill_from_device(self, block, versioned)
    try:
        if versioned:
            return PyCapsule_New(block, b"dltensor_versioned", _versioned_capsule_destructor)
        return PyCapsule_New(block, b"dltensor", _legacy_capsule_destructor)
    except BaseException:
        _delete_managed(block, versioned)
        raise


cdef bint _export_copy(DLPackObject self, bint versioned, object copy, bint moving) except -1:
    """Whether an export is a copy: asked for, a move to the host, or read-only data for a
    legacy consumer (which cannot see READ_ONLY: a private copy unless the user opted in)."""
    cdef bint do_copy = moving or (copy is not None and bool(copy))
    if (not versioned and not do_copy and self._flags & FLAG_READ_ONLY
            and not self._legacy_readonly):
        if copy is not None:
            raise BufferError(
                "__dlpack__: the data is read-only and this consumer asked for a legacy "
                "(unversioned) capsule, which cannot say so, with copy=False. Use a consumer "
                "that passes max_version >= (1, 0), allow a copy, or opt in with "
                "asdlpack(obj, allow_legacy_readonly=True)")
        do_copy = True
    if do_copy and not _host_accessible(self.dl.device.device_type) and not (
            moving and self.dl.device.device_type == kDLCUDA):
        raise BufferError(f"__dlpack__: a copy of data on {_device_name(self.dl.device)} "
                          "in place is not supported; ask for a host copy with "
                          f"dl_device=({kDLCPU}, 0)")
    return do_copy


cdef int _target(DLPackObject self, object dl_device, object copy, DLDevice *out) except -1:
    """The device dl_device asks for (array API): the data's own, the host, or a CUDA GPU."""
    cdef DLDevice here = self.dl.device
    try:
        dt, did = dl_device
        if type(dt) is bool or type(did) is bool:
            raise TypeError
        out.device_type = PyNumber_Index(dt)
        out.device_id = PyNumber_Index(did)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(f"__dlpack__: dl_device = {dl_device!r} is not a "
                        "(device_type, device_id) tuple of ints") from None
    if out.device_type == here.device_type and out.device_id == here.device_id:
        return 0
    if out.device_type == kDLCPU and (_host_accessible(here.device_type)
                                      or here.device_type == kDLCUDA):
        out.device_id = 0
    elif out.device_type == kDLCUDA and _host_accessible(here.device_type):
        if out.device_id < 0:
            raise BufferError(f"__dlpack__: dl_device = {dl_device!r}: no such CUDA device")
    else:
        raise BufferError(f"__dlpack__: dl_device = {dl_device!r}: cannot move data from "
                          f"{_device_name(here)} there (pydlpack copies between the host and "
                          "a GPU, not between GPUs)")
    if copy is False:
        raise BufferError(f"__dlpack__: dl_device = {dl_device!r} needs a copy from "
                          f"{_device_name(here)}, but copy=False")
    return 0


cdef int _producer_stream(DLPackObject self, uintptr_t *out) except -1:
    """The stream CUDA data's pending work is on: 1 and out set, or 0 when there is none."""
    cdef void *current = NULL
    if self._work_api != NULL:
        if self._work_api.current_work_stream(<c_DLDeviceType>self.dl.device.device_type,
                                              self.dl.device.device_id, &current) != 0:
            if PyErr_Occurred():
                return -1
            raise BufferError("__dlpack_c_exchange_api__: the producer's current_work_stream "
                              "failed")
        out[0] = <uintptr_t>current if current != NULL else CU_STREAM_LEGACY
        return 1
    out[0] = self._stream
    return self._stream != 0


cdef int _sync_for(DLPackObject self, object stream, bint host_copy) except -1:
    """Order a consumer's stream (or, for a host copy, the host) after the producer's work.

    A __dlpack__ provider is asked again with the consumer's stream and orders itself (its
    capsule is dropped); providers that refuse the per-thread default stream (torch) are asked
    for the legacy default stream, which stream 2 waits for. Otherwise one event, or for a host
    copy a synchronize, on the producer's stream.
    """
    cdef uintptr_t producer, consumer
    if host_copy:
        if stream is not None:
            _consumer_stream(stream, &consumer)     # checked; the host waits whatever it says
        if self._resync is not None:
            self._resync.__dlpack__(stream=CU_STREAM_LEGACY)
            producer = CU_STREAM_LEGACY
        elif not _producer_stream(self, &producer):
            return 0
        return _cu_stream_sync(self.dl.device.device_id, producer)
    if not _consumer_stream(stream, &consumer):
        return 0
    if self._resync is not None:
        self._resync.__dlpack__(
            stream=CU_STREAM_LEGACY if consumer == CU_STREAM_PER_THREAD else consumer)
    elif _producer_stream(self, &producer) and producer != consumer:
        _cu_stream_wait(self.dl.device.device_id, producer, consumer)
    return 0


cdef int _fill_from_device(DLPackObject self, void *block, bint versioned) except -1:
    """Copy CUDA device memory into a host-copy export block (after _sync_for waited for the
    producer): contiguous data in one copy, strided data as its span, gathered on the host."""
    cdef DLTensor *t = _block_tensor(block, versioned)
    cdef int64_t lo, hi
    cdef char *span = NULL
    try:
        if self._count == 0:
            return 0
        if self._c_contig:
            _cu_copy(self.dl.device.device_id, t.data, self.dl.data, self._nbytes, False)
            return 0
        _reach(self, &lo, &hi)
        span = <char *>malloc(hi - lo)
        if span == NULL:
            raise MemoryError(f"__dlpack__: cannot allocate {hi - lo} bytes")
        _cu_copy(self.dl.device.device_id, span, <char *>self.dl.data + lo, hi - lo, False)
        _gather(<char *>t.data, span - lo, self)
    except BaseException:
        free(block)
        raise
    finally:
        free(span)
    return 0


cdef void *_export_to_device(DLPackObject self, bint versioned, int32_t device_id,
                             object stream) except NULL:
    """A copy of host data on CUDA GPU device_id, in its primary context, freed there when
    the capsule's deleter runs; the consumer's stream waits for the copy to land."""
    cdef char *staging = NULL
    cdef const char *src = <const char *>self.dl.data
    cdef uintptr_t consumer
    cdef bint ordered = _consumer_stream(stream, &consumer)
    if _cuda_kind(self.dl.device.device_type):      # pinned or managed: read once it is ready
        _sync_for(self, None, True)
    cdef _DeviceMemory owner = _cu_alloc(device_id, self._nbytes)
    try:
        if self._count and not self._c_contig:
            staging = <char *>malloc(self._nbytes)
            if staging == NULL:
                raise MemoryError(f"__dlpack__: cannot allocate {self._nbytes} bytes")
            _gather(staging, src, self)
            src = staging
        if self._count:
            _cu_copy(device_id, <void *><uintptr_t>owner.ptr, src, self._nbytes, True)
            if ordered and consumer != CU_STREAM_LEGACY:
                # from pageable memory the copy returns once staged, its DMA on the legacy
                # default stream: a non-blocking consumer stream must wait for that
                _cu_stream_wait(device_id, CU_STREAM_LEGACY, consumer)
    finally:
        free(staging)
    return _export(self, versioned, EXPORT_DEVICE_COPY, owner)
