# Copies between host and CUDA memory, and within a device (docs/spec.md §10): host to device
# (synchronous, or queued on a stream), device to host as rows (one driver call per row, 2-D or
# 3-D block, or the covering span in windows where fewer calls pay: _CU_CALL_BYTES and
# _CU_SPAN_CHUNK decide), and device to device on a stream.

cdef int64_t _CU_SPAN_CHUNK = 16 << 20  # window of a covering-span device copy (§10)
cdef int64_t _CU_CALL_BYTES = 128 << 10  # bytes a synchronous copy moves in one call's overhead


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
