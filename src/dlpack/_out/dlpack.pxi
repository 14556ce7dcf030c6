# Consumer side: __dlpack__ (DLPack 1.x versioned and legacy capsules), with the array API's
# dl_device / copy: host copies of host or CUDA data, and CUDA copies of host data
# (docs/spec.md §10).
# The export block, its deleters and the capsule destructors live in _own.pxi.


cdef extern from *:
    """
    /* __dlpack__(*, stream, max_version, dl_device, copy) as a METH_FASTCALL | METH_KEYWORDS
       method: every consumer calls it with keywords, which are matched here by identity with
       the interned names (then by value), with no argument tuple or dict made. */
    static PyObject *dlpk_dlpack_names[4];
    static PyObject *(*dlpk_dlpack_body)(PyObject *, PyObject *, PyObject *, PyObject *,
                                         PyObject *);
    static PyObject *dlpk_dlpack_method(PyObject *self, PyObject *const *args,
                                        Py_ssize_t nargs, PyObject *kwnames) {
        PyObject *given[4] = {NULL, NULL, NULL, NULL};
        Py_ssize_t i, n = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
        int j;
        if (nargs != 0) {
            PyErr_Format(PyExc_TypeError, "__dlpack__() takes no positional arguments "
                         "(%zd given); pass stream=, max_version=, dl_device=, copy=", nargs);
            return NULL;
        }
        for (i = 0; i < n; i++) {
            PyObject *key = PyTuple_GET_ITEM(kwnames, i);
            for (j = 0; j < 4 && key != dlpk_dlpack_names[j]; j++)
                ;
            if (j == 4) {
                for (j = 0; j < 4; j++) {
                    int eq = PyUnicode_Check(key) ? PyUnicode_Compare(key, dlpk_dlpack_names[j])
                                                  : -1;
                    if (eq == -1 && PyErr_Occurred())
                        return NULL;
                    if (eq == 0)
                        break;
                }
            }
            if (j == 4) {
                PyErr_Format(PyExc_TypeError, "__dlpack__() got an unexpected keyword argument "
                             "%R; it takes stream, max_version, dl_device and copy", key);
                return NULL;
            }
            if (given[j] != NULL) {
                PyErr_Format(PyExc_TypeError, "__dlpack__() got multiple values for argument "
                             "%R", key);
                return NULL;
            }
            given[j] = args[i];
        }
        return dlpk_dlpack_body(self, given[0] ? given[0] : Py_None,
                                given[1] ? given[1] : Py_None, given[2] ? given[2] : Py_None,
                                given[3] ? given[3] : Py_None);
    }
    static PyMethodDef dlpk_dlpack_def = {
        "__dlpack__", (PyCFunction)(void (*)(void))dlpk_dlpack_method,
        METH_FASTCALL | METH_KEYWORDS,
        "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)\\n"
        "--\\n\\n"
        "Export as a DLPack capsule (array API signature); each call gives a new capsule."};
    /* Whether an int (exact type, checked by the caller) is >= 1, without a call. */
    static inline int dlpk_at_least_one(PyObject *v) {
        int overflow;
        long x = PyLong_AsLongAndOverflow(v, &overflow);
        return overflow > 0 || (overflow == 0 && x >= 1);
    }
    /* Add a method to an extension type made by this module (a static, non-builtin type:
       its tp_dict is its own on every Python version). */
    static int dlpk_add_method(PyTypeObject *t, PyMethodDef *def) {
        PyObject *method = PyDescr_NewMethod(t, def);
        int rc = method == NULL ? -1 : PyDict_SetItemString(t->tp_dict, def->ml_name, method);
        Py_XDECREF(method);
        PyType_Modified(t);
        return rc;
    }
    """
    PyObject *_dlpack_names "dlpk_dlpack_names"[4]
    object (*_dlpack_body "dlpk_dlpack_body")(object, object, object, object, object)
    ctypedef struct PyMethodDef:
        const char *ml_name
    PyMethodDef _dlpack_def "dlpk_dlpack_def"
    int _add_method "dlpk_add_method"(type, PyMethodDef *) except -1
    bint _at_least_one "dlpk_at_least_one"(object) noexcept


cdef object _dlpack_method(object self, object stream, object max_version, object dl_device,
                           object copy):
    """__dlpack__'s body (the method descriptor checked that self is a DLPackObject)."""
    return _dlpack_export(<DLPackObject>self, stream, max_version, dl_device, copy)


cdef int _install_dlpack_method(type cls) except -1:
    """Put __dlpack__ (the fast-call method above) into cls's dict, at import."""
    global _dlpack_body
    cdef int i
    for i, name in enumerate(("stream", "max_version", "dl_device", "copy")):
        Py_INCREF(name)                              # held for good: the method may run
        _dlpack_names[i] = <PyObject *>name          # while the module is torn down
    _dlpack_body = _dlpack_method
    return _add_method(cls, &_dlpack_def)


cdef enum:      # __dlpack__'s copy, as _copy_arg reads it
    COPY_IF_NEEDED = -1
    COPY_NEVER = 0
    COPY_ALWAYS = 1


cdef object _dlpack_export(DLPackObject self, object stream, object max_version,
                           object dl_device, object copy):
    cdef bint versioned = self._plain_versioned
    cdef void *block
    if (type(max_version) is tuple and PyTuple_GET_SIZE(max_version) == 2
            and type((<tuple>max_version)[0]) is int and type((<tuple>max_version)[1]) is int):
        versioned = _at_least_one((<tuple>max_version)[0])  # what every consumer passes
    elif max_version is not None:
        try:
            major, minor = max_version
            versioned = PyNumber_Index(major) >= 1
            PyNumber_Index(minor)
        except (TypeError, ValueError):
            raise TypeError(f"__dlpack__: max_version = {max_version!r} is not a "
                            "(major, minor) tuple of ints") from None
    block = _export_block(self, stream, versioned, dl_device, copy)
    try:
        if versioned:
            return PyCapsule_New(block, b"dltensor_versioned", _versioned_capsule_destructor)
        return PyCapsule_New(block, b"dltensor", _legacy_capsule_destructor)
    except BaseException:
        _delete_managed(block, versioned)
        raise


cdef void *_export_block(DLPackObject self, object stream, bint versioned, object dl_device,
                         object copy) except NULL:
    """The managed tensor a __dlpack__ call (or dlpack.ctypes.to_pointer) hands out: a view, a
    host copy, a copy on the data's GPU or on another; ordered after the producer's work."""
    cdef bint do_copy, moving
    cdef int32_t device_type = self.desc.dl.device.device_type
    cdef DLDevice target = self.desc.dl.device
    cdef void *block
    cdef int want = _copy_arg(copy)
    if dl_device is not None:
        _target(self, dl_device, want, &target)
    if target.device_type == kDLCUDA and device_type != kDLCUDA:
        return _export_to_device(self, versioned, target.device_id, stream)
    if target.device_type == kDLCPU and _in_place_on_host(device_type):
        return _export_host_view(self, versioned, want, stream)
    moving = target.device_type != device_type
    do_copy = _export_copy(self, versioned, want, moving)
    if device_type == kDLCPU and stream is None:
        pass                                            # the common case: nothing to arrange
    elif _cuda_kind(device_type):
        if self.sync.work_api != NULL and self.sync.work_api == _torch_api:
            _torch_current_device(self)
        if do_copy and device_type == kDLCUDA and not moving:
            return _export_device_copy(self, versioned, stream)
        # a host copy is read by the host at once; so may pinned or managed data with no stream
        _sync_for(self, stream, do_copy or (device_type != kDLCUDA and stream is None))
    elif device_type == kDLROCM and stream is not None:
        _rocm_order(self, stream)
    elif stream is not None:
        raise Refusal(f"__dlpack__: stream = {stream!r} must be None for data on "
                      f"{_device_name(self.desc.dl.device)}")
    block = _export(self, versioned, EXPORT_HOST_COPY if do_copy else EXPORT_VIEW)
    if do_copy and not _host_accessible(device_type):
        _fill_from_device(self, block, versioned)
    return block


cdef inline bint _in_place_on_host(int32_t device_type) noexcept:
    """CUDA memory the CPU reads where it is (pinned, managed): dl_device=(kDLCPU, 0) is a view
    of it, not a copy (spec §10)."""
    return device_type == kDLCUDAHost or device_type == kDLCUDAManaged


cdef void *_export_host_view(DLPackObject self, bint versioned, int want,
                             object stream) except NULL:
    """dl_device=(kDLCPU, 0) of pinned or managed memory: the same memory as a CPU tensor, once
    the producer's work is done (the host may read it at once); a copy only where asked for, or
    for a legacy consumer of read-only data."""
    cdef bint do_copy = _export_copy(self, versioned, want, False)
    _sync_for(self, stream, True)
    cdef void *block = _export(self, versioned, EXPORT_HOST_COPY if do_copy else EXPORT_VIEW)
    cdef DLTensor *t = _block_tensor(block, versioned)
    t.device.device_type = kDLCPU
    t.device.device_id = 0
    return block


cdef int _rocm_order(DLPackObject self, object stream) except -1:
    """ROCm data: only its __dlpack__ provider can order its own streams; -1 asks for nothing."""
    value = _stream_index(stream, "__dlpack__: stream")
    if value == -1:
        return 0
    if self.sync.kind != SYNC_PROVIDER:
        raise Refusal(f"__dlpack__: stream = {stream!r}: pydlpack cannot order ROCm "
                      "streams for this provider; pass stream=None or -1")
    self._sync_provider.__dlpack__(stream=value)      # the provider orders itself; capsule dropped
    return 0


cdef inline int _copy_arg(object copy) except -2:
    """The one parser of __dlpack__'s copy (§4): COPY_IF_NEEDED for None, COPY_NEVER or
    COPY_ALWAYS for a bool, NumPy's bool_ (by identity) or an int 0 or 1 (its value, taken
    with __index__: an int subclass's == cannot lie); anything else is a TypeError naming it."""
    if copy is None:
        return COPY_IF_NEEDED           # what nearly every consumer passes: no call
    return _copy_arg_given(copy)


cdef int _copy_arg_given(object copy) except -2:
    """_copy_arg for a copy other than None."""
    if copy is True:
        return COPY_ALWAYS
    if copy is False:
        return COPY_NEVER
    np = sys.modules.get("numpy")
    if np is not None and type(copy) is getattr(np, "bool_", None):
        return COPY_ALWAYS if copy else COPY_NEVER
    if isinstance(copy, int):
        value = PyNumber_Index(copy)
        if value == 0 or value == 1:
            return COPY_ALWAYS if value else COPY_NEVER
    raise TypeError(f"__dlpack__: copy = {copy!r:.80} is not None, a bool or 0/1")


cdef bint _export_copy(DLPackObject self, bint versioned, int want, bint moving) except -1:
    """Whether an export is a copy: asked for, a move to the host, or read-only data for a
    legacy consumer (which cannot see READ_ONLY: a private copy unless the user opted in)."""
    cdef bint do_copy = moving or want == COPY_ALWAYS
    if (not versioned and not do_copy and self.desc.flags & FLAG_READ_ONLY
            and not self._legacy_readonly):
        if want == COPY_NEVER:
            raise Refusal(
                "__dlpack__: the data is read-only and this consumer asked for a legacy "
                "(unversioned) capsule, which cannot say so, with copy=False. Use a consumer "
                "that passes max_version >= (1, 0), allow a copy, or opt in with "
                "asdlpack(obj, allow_legacy_readonly=True)")
        do_copy = True
    if do_copy and not _host_accessible(self.desc.dl.device.device_type) and (
            self.desc.dl.device.device_type != kDLCUDA):
        raise Refusal(f"__dlpack__: a copy of data on {_device_name(self.desc.dl.device)} "
                      "in place is not supported; ask for a host copy with "
                      f"dl_device=({kDLCPU}, 0)")
    return do_copy


cdef int _target(DLPackObject self, object dl_device, int want, DLDevice *out) except -1:
    """The device dl_device asks for (array API): the data's own, the host, or a CUDA GPU.

    dl_device is a tuple or list of two ints, read once from its own storage. The host is one
    device, (kDLCPU, 0) (dlpack.h: CPU data has device_id 0; imports are normalised to it): any
    other kDLCPU id names no device and is refused whatever copy says, as NumPy does.
    """
    cdef DLDevice here = self.desc.dl.device
    dt, did = _device_pair(dl_device, "__dlpack__: dl_device")
    try:
        out.device_type = dt
        out.device_id = did
    except OverflowError:
        raise Refusal(f"__dlpack__: dl_device = {dl_device!r:.80} names no device (a value "
                      "beyond 32 bits)") from None
    if out.device_type == kDLCPU and out.device_id != 0:
        raise Refusal(f"__dlpack__: dl_device = {dl_device!r}: the host is device "
                      f"({kDLCPU}, 0); no other kDLCPU id names a device")
    if out.device_type == here.device_type and out.device_id == here.device_id:
        return 0
    if out.device_type == kDLCPU and (_host_accessible(here.device_type)
                                      or here.device_type == kDLCUDA):
        pass
    elif out.device_type == kDLCUDA and _host_accessible(here.device_type):
        if out.device_id < 0:
            raise Refusal(f"__dlpack__: dl_device = {dl_device!r}: no such CUDA device")
    else:
        raise Refusal(f"__dlpack__: dl_device = {dl_device!r}: cannot move data from "
                      f"{_device_name(here)} there (pydlpack copies between the host and "
                      "a GPU, not between GPUs)")
    if want == COPY_NEVER and not (out.device_type == kDLCPU
                                   and _in_place_on_host(here.device_type)):
        raise Refusal(f"__dlpack__: dl_device = {dl_device!r} needs a copy from "
                      f"{_device_name(here)}, but copy=False")
    return 0


cdef int _torch_current_device(DLPackObject self) except -1:
    """torch's own __dlpack__ refuses CUDA tensors off the current device; so do exports of
    tensors taken through its C exchange API (§4: a fast path refuses what the producer does)."""
    current = sys.modules["torch"].cuda.current_device()
    if current != self.desc.dl.device.device_id:
        raise Refusal(f"__dlpack__: torch refuses to export tensors on a different CUDA "
                      f"device index (tensor on cuda:{self.desc.dl.device.device_id}, current "
                      f"device cuda:{current}); call torch.cuda.set_device("
                      f"{self.desc.dl.device.device_id}) first")
    return 0


cdef int _fill_from_device(DLPackObject self, void *block, bint versioned) except -1:
    """Copy CUDA device memory into a host-copy export block (after _sync_for waited for the
    producer): contiguous data in one copy; strided data element by element, in rows of 2-D
    copies, into a staging buffer in the order the elements lie in memory, then gathered into
    C order on the host (host memory: the block and at most nbytes more, whatever the span)."""
    cdef DLTensor *t = _block_tensor(block, versioned)
    cdef int i, k, n = 0, ndim = self.desc.dl.ndim
    cdef int64_t isz = self.desc.layout.itemsize, lo = 0, step, size, offset = 0, width
    cdef int64_t extent[MAX_NDIM]
    cdef int64_t pitch[MAX_NDIM]
    cdef int64_t gather[MAX_NDIM]
    cdef int dim[MAX_NDIM]
    cdef char *staging = NULL
    try:
        if self.desc.layout.count == 0:
            return 0
        if self.desc.layout.c_contig:
            _cu_copy(self.desc.dl.device.device_id, t.data, self.desc.dl.data,
                     self.desc.layout.nbytes, False)
            return 0
        # the dimensions that move (extent > 1, stride != 0) by byte stride, largest first,
        # each flipped to run upwards from the lowest element
        for i in range(ndim):
            gather[i] = 0
            if self.desc.dl.shape[i] == 1 or self.desc.dl.strides[i] == 0:
                continue
            step = self.desc.dl.strides[i] * isz
            if step < 0:
                lo += (self.desc.dl.shape[i] - 1) * step
                step = -step
            k = n
            while k > 0 and pitch[k - 1] < step:
                extent[k] = extent[k - 1]
                pitch[k] = pitch[k - 1]
                dim[k] = dim[k - 1]
                k -= 1
            extent[k] = self.desc.dl.shape[i]
            pitch[k] = step
            dim[k] = i
            n += 1
        # the staging holds those dimensions compactly, in that order: each original dimension
        # reads it with the matching compact stride (negative where flipped)
        size = isz
        for k in range(n - 1, -1, -1):
            i = dim[k]
            gather[i] = size // isz if self.desc.dl.strides[i] > 0 else -(size // isz)
            if self.desc.dl.strides[i] < 0:
                offset += (extent[k] - 1) * size
            size *= extent[k]
        # rows: the innermost dimensions that are contiguous in memory merge into one row
        width = isz
        while n > 0 and pitch[n - 1] == width:
            width *= extent[n - 1]
            n -= 1
        staging = <char *>_alloc_copy(size)
        if staging == NULL:
            raise MemoryError(f"__dlpack__: cannot allocate {size} bytes")
        _cu_copy_rows(self.desc.dl.device.device_id, staging, <uintptr_t>self.desc.dl.data + lo,
                      width, n, extent, pitch)
        _gather(<char *>t.data, staging + offset, self, gather)
    except BaseException:
        free(block)
        raise
    finally:
        free(staging)
    return 0


cdef void *_export_device_copy(DLPackObject self, bint versioned, object stream) except NULL:
    """A private copy of CUDA data on its own GPU (copy=True, or read-only data for a legacy
    consumer, §4): the bytes the original spans, with its layout, queued on the consumer's
    stream once the producer's work is; with stream -1 on the producer's stream, which the host
    then waits for (the consumer promised to order nothing)."""
    cdef uintptr_t queue
    cdef int32_t device_id = self.desc.dl.device.device_id
    cdef int64_t lo = 0, hi = 0
    cdef bint settle = not _consumer_stream(stream, &queue)
    cdef void *block
    cdef void *event
    cdef DLTensor *t
    if not settle:
        _sync_for(self, stream, False)
    else:
        work = _producer_ready(self, CU_STREAM_LEGACY, &queue, &event)
        if work == WORK_EVENT:          # an Arrow sync_event: the copy's queue waits for it
            queue = CU_STREAM_LEGACY
            _cu_event_wait(device_id, event, queue)
        elif work == WORK_NONE:
            queue = CU_STREAM_LEGACY
    if self.desc.layout.count:
        _span(self, &lo, &hi)
    cdef _DeviceMemory owner = _cu_alloc(device_id, hi - lo)
    if hi > lo:
        _cu_copy_on(device_id, queue, owner.ptr, <CUdeviceptr><uintptr_t>self.desc.dl.data + lo,
                    hi - lo, settle)
    block = _export(self, versioned, EXPORT_DEVICE_COPY, owner)
    t = _block_tensor(block, versioned)
    t.data = <void *><uintptr_t>(owner.ptr - lo)
    memcpy(t.strides, self.desc.dl.strides, self.desc.dl.ndim * sizeof(int64_t))
    return block


cdef void *_export_to_device(DLPackObject self, bint versioned, int32_t device_id,
                             object stream) except NULL:
    """A copy of host data on CUDA GPU device_id, in its primary context, freed there when
    the capsule's deleter runs. From pageable memory the copy returns once staged, its DMA on
    the legacy default stream: a consumer's stream 2 or handle waits for it (an event); with
    stream None or -1 the consumer's stream is unknown (torch passes dl_device without one),
    so the host waits for the copy to land."""
    cdef char *staging = NULL
    cdef const char *src = <const char *>self.desc.dl.data
    cdef uintptr_t consumer
    cdef bint ordered = stream is not None and _consumer_stream(stream, &consumer)
    _host_wait(self)
    cdef _DeviceMemory owner = _cu_alloc(device_id, self.desc.layout.nbytes)
    try:
        if self.desc.layout.count and not self.desc.layout.c_contig:
            staging = <char *>_alloc_copy(self.desc.layout.nbytes)
            if staging == NULL:
                raise MemoryError(f"__dlpack__: cannot allocate {self.desc.layout.nbytes} bytes")
            _gather(staging, src, self)
            src = staging
        if self.desc.layout.count:
            _cu_copy(device_id, <void *><uintptr_t>owner.ptr, src, self.desc.layout.nbytes, True,
                     not ordered)
            if ordered and consumer != CU_STREAM_LEGACY:
                _cu_stream_wait(device_id, CU_STREAM_LEGACY, consumer)
    finally:
        free(staging)
    return _export(self, versioned, EXPORT_DEVICE_COPY, owner)
