# Consumer side: __dlpack__ (DLPack 1.x versioned and legacy capsules).
# The export block, its deleters and the capsule destructor live in _own.pxi.


cdef object _dlpack_export(DLPackObject self, object stream, object max_version,
                           object dl_device, object copy):
    cdef bint versioned = False, moving, do_copy
    cdef int32_t device_type = self.dl.device.device_type
    if max_version is not None:
        try:
            versioned = max_version[0] >= 1
        except (TypeError, IndexError, KeyError):
            raise TypeError(f"__dlpack__: max_version = {max_version!r} is not a "
                            "(major, minor) tuple") from None
    moving = dl_device is not None and _moving(self, dl_device, copy)
    do_copy = _export_copy(self, versioned, copy, moving)
    if device_type == kDLCPU and stream is None:
        pass                                        # the common case: nothing to arrange
    elif _cuda_kind(device_type):
        _sync_for(self, stream, do_copy)
    elif device_type == kDLROCM and stream is not None and stream != -1:
        if self._resync is None:
            raise BufferError(f"__dlpack__: stream = {stream!r}: pydlpack cannot order ROCm "
                              "streams for this provider; pass stream=None or -1")
        self._resync.__dlpack__(stream=stream)     # the provider orders itself; capsule dropped
    elif stream is not None and not (device_type == kDLROCM and stream == -1):
        raise BufferError(f"__dlpack__: stream = {stream!r} must be None for data on "
                          f"{_device_name(self.dl.device)}")
    block = _export(self, versioned, do_copy)
    return PyCapsule_New(block, b"dltensor_versioned" if versioned else b"dltensor",
                         _capsule_destructor)


cdef bint _export_copy(DLPackObject self, bint versioned, object copy, bint moving) except -1:
    """Whether an export is a copy: asked for, a device move, or read-only data for a legacy
    consumer (which cannot see READ_ONLY: a private copy unless the user opted in)."""
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
    if do_copy and not _host_accessible(self.dl.device.device_type):
        raise BufferError(f"__dlpack__: a copy of data on {_device_name(self.dl.device)} is "
                          "not supported (pydlpack copies host memory only)")
    return do_copy


cdef bint _moving(DLPackObject self, object dl_device, object copy) except -1:
    """Whether dl_device asks for another device than the data's (array API semantics)."""
    try:
        dt, did = dl_device
    except (TypeError, ValueError):
        raise TypeError(f"__dlpack__: dl_device = {dl_device!r} is not a "
                        "(device_type, device_id) tuple") from None
    if dt == self.dl.device.device_type and did == self.dl.device.device_id:
        return False
    if not (dt == kDLCPU and _host_accessible(self.dl.device.device_type)):
        raise BufferError(f"__dlpack__: dl_device = {dl_device!r}: cannot move data from "
                          f"{_device_name(self.dl.device)} there")
    if copy is False:
        raise BufferError(f"__dlpack__: dl_device = {dl_device!r} needs a copy from "
                          f"{_device_name(self.dl.device)}, but copy=False")
    return True


cdef int _sync_for(DLPackObject self, object stream, bint host_copy) except -1:
    from dlpack import _cuda
    if host_copy:       # we read the memory on the host: wait for the producer's stream
        _cuda.sync_for_host(self._stream, self._resync)
    else:
        _cuda.sync_for_consumer(self._stream, stream, self._resync)
    return 0
