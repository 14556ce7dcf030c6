# Writer: __dlpack__ (DLPack 1.x versioned and legacy capsules), with the array API's
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


# -- the export plan: what one __dlpack__ call hands out, decided by one pure function
# (_export_plan) from what the call asks and what the data is, and carried out by one switch
# (_export_block); docs/spec.md §4 and §10 are its rules.

cdef enum PlanKind:
    PLAN_VIEW                   # the memory itself, on its own device
    PLAN_HOST_VIEW              # pinned or managed memory, as a kDLCPU tensor
    PLAN_HOST_COPY              # a copy of memory the host reads, in the block
    PLAN_HOST_COPY_OF_DEVICE    # a copy of CUDA device memory, in the block (the driver fills it)
    PLAN_DEVICE_COPY            # a private copy on the data's own GPU
    PLAN_TO_DEVICE              # a copy of host memory on the CUDA GPU the plan's target names
    PLAN_REFUSED                # the plan's refusal says why

cdef enum PlanOrder:            # how the export is ordered after the producer's work
    ORDER_NONE                  # nothing to arrange
    ORDER_STREAM                # the consumer's stream waits for it
    ORDER_HOST                  # the host waits for it (the host reads at once)
    ORDER_ROCM                  # the ROCm provider is asked to order its own streams
    ORDER_BY_COPY               # the copy routine queues the copy after it

cdef enum CopyReason:           # why the export is a copy
    REASON_NONE                 # it is not
    REASON_MOVE                 # dl_device names another device
    REASON_ASKED                # copy=True
    REASON_LEGACY_READ_ONLY     # read-only data for a legacy consumer, which cannot say so

cdef enum PlanRefusal:          # each one message, written by _refuse
    REFUSE_NONE
    REFUSE_HOST_ID              # dl_device=(kDLCPU, n) with n != 0
    REFUSE_NO_CUDA_DEVICE       # dl_device=(kDLCUDA, n) with n < 0
    REFUSE_CANNOT_MOVE          # a move pydlpack does not make (it copies host <-> GPU only)
    REFUSE_NEEDS_COPY           # a move with copy=False
    REFUSE_LEGACY_READ_ONLY     # read-only data for a legacy consumer with copy=False
    REFUSE_COPY_IN_PLACE        # a copy on a device pydlpack cannot copy on
    REFUSE_STREAM               # a stream for data that has none

cdef struct ExportAsk:          # what the plan depends on: the call's arguments, read, and the data
    DLDevice here               # the data's device
    DLDevice target             # dl_device's, where has_target
    bint has_target
    int copy                    # COPY_IF_NEEDED, COPY_NEVER or COPY_ALWAYS
    bint stream                 # a stream was passed (not None)
    bint versioned              # the consumer takes a versioned capsule
    bint read_only              # read-only data the user did not let legacy consumers share
    bint torch                  # taken through torch's C exchange API

cdef struct ExportPlan:
    PlanKind kind
    PlanOrder order
    CopyReason reason
    PlanRefusal refusal         # REFUSE_NONE unless kind is PLAN_REFUSED
    bint torch_device           # torch's current-device rule is checked first
    DLDevice target             # the device the exported tensor is on


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
    """The managed tensor a __dlpack__ call (or dlpack.ctypes.to_pointer) hands out: the
    arguments read (copy first, then dl_device), the plan made, and carried out here."""
    cdef ExportAsk ask
    cdef ExportPlan plan
    cdef void *block
    ask.copy = _copy_arg(copy)
    ask.has_target = dl_device is not None
    if ask.has_target:
        _dl_device_arg(dl_device, &ask.target)
    ask.here = self.desc.dl.device
    ask.stream = stream is not None
    ask.versioned = versioned
    ask.read_only = self.desc.flags & FLAG_READ_ONLY != 0 and not self._legacy_readonly
    ask.torch = self.sync.work_api != NULL and self.sync.work_api == _torch_api
    _export_plan(&ask, &plan)
    if plan.kind == PLAN_REFUSED:
        _refuse(self, plan.refusal, dl_device, stream)
    if plan.torch_device:
        _torch_current_device(self)
    if stream is not None and _needs_host_or_copy(&plan, ask.here.device_type):
        _capture_guard(self, &plan, stream)
    if plan.order == ORDER_STREAM or plan.order == ORDER_HOST:
        _sync_for(self, stream, plan.order == ORDER_HOST)
    elif plan.order == ORDER_ROCM:
        _rocm_order(self, stream)
    if plan.kind == PLAN_DEVICE_COPY:
        block = _export_device_copy(self, versioned, stream)
    elif plan.kind == PLAN_TO_DEVICE:
        block = _export_to_device(self, versioned, plan.target.device_id, stream)
    elif plan.kind == PLAN_HOST_COPY and plan.target.device_type != kDLCPU:
        block = _export_host_kind_copy(self, versioned, plan.target)
    else:
        block = _export(self, versioned,
                        EXPORT_VIEW if plan.reason == REASON_NONE else EXPORT_HOST_COPY)
        if plan.kind == PLAN_HOST_VIEW:
            _block_tensor(block, versioned).device = plan.target
        elif plan.kind == PLAN_HOST_COPY_OF_DEVICE:
            _fill_from_device(self, block, versioned)
    return block


cdef inline bint _needs_host_or_copy(const ExportPlan *p, int32_t here) noexcept nogil:
    """Whether carrying the plan out makes CUDA calls that synchronise or allocate: a copy to,
    from or on a GPU, or a host wait for a CUDA producer (spec §10, stream capture)."""
    return (p.kind == PLAN_DEVICE_COPY or p.kind == PLAN_TO_DEVICE
            or p.kind == PLAN_HOST_COPY_OF_DEVICE
            or (p.order == ORDER_HOST and _cuda_kind(here)))


cdef int _capture_guard(DLPackObject self, const ExportPlan *p, object stream) except -1:
    """Refuse such a plan for a consumer whose stream is capturing a CUDA graph (spec §10)."""
    cdef uintptr_t consumer
    if not _consumer_stream(stream, &consumer):
        return 0
    if p.kind == PLAN_TO_DEVICE:
        return _cu_capture_check(p.target.device_id, consumer, "a copy to the GPU")
    return _cu_capture_check(self.desc.dl.device.device_id, consumer,
                             "a copy on the GPU" if p.kind == PLAN_DEVICE_COPY
                             else "a read by the host")


cdef inline PlanRefusal _move_refusal(const ExportAsk *a) noexcept nogil:
    """Whether dl_device can be served (§4's device ids, §10): the host and the data's own
    device always; the host from CUDA, pinned, managed or ROCm host memory; a CUDA GPU from
    memory the host reads; with copy=False only where no copy is made (pinned or managed
    memory to the host)."""
    cdef int32_t here = a.here.device_type, to = a.target.device_type
    if to == kDLCPU and a.target.device_id != 0:
        return REFUSE_HOST_ID
    if to == here and a.target.device_id == a.here.device_id:
        return REFUSE_NONE
    if to == kDLCPU and (_host_accessible(here) or here == kDLCUDA):
        pass
    elif to == kDLCUDA and _host_accessible(here):
        if a.target.device_id < 0:
            return REFUSE_NO_CUDA_DEVICE
    else:
        return REFUSE_CANNOT_MOVE
    if a.copy == COPY_NEVER and not (to == kDLCPU and _in_place_on_host(here)):
        return REFUSE_NEEDS_COPY
    return REFUSE_NONE


cdef inline void _export_plan(const ExportAsk *a, ExportPlan *p) noexcept nogil:
    """What an export is, from what it asks (pure: no Python, no driver; tested for every
    combination). CPU data as it is, or copied because copy=True asks, the common cases, are
    decided here in a few instructions; everything else by _plan_in_full."""
    if a.here.device_type == kDLCPU and not a.has_target and not a.stream and (
            a.copy == COPY_ALWAYS or a.versioned or not a.read_only):
        p.kind = PLAN_HOST_COPY if a.copy == COPY_ALWAYS else PLAN_VIEW
        p.order = ORDER_NONE
        p.reason = REASON_ASKED if a.copy == COPY_ALWAYS else REASON_NONE
        p.refusal = REFUSE_NONE
        p.torch_device = False
        p.target = a.here
    else:
        _plan_in_full(a, p)


cdef void _plan_in_full(const ExportAsk *a, ExportPlan *p) noexcept nogil:
    """_export_plan's rules. A copy where dl_device moves the data, where asked for, or for a
    legacy consumer of read-only data (a private copy unless the user opted in, §4); pinned
    and managed memory go to the host as views (§10). Refusals take precedence in that order:
    dl_device, then copy, then stream."""
    cdef int32_t here = a.here.device_type
    cdef bint to_host_in_place
    p.target = a.target if a.has_target else a.here
    p.refusal = _move_refusal(a) if a.has_target else REFUSE_NONE
    p.reason = REASON_NONE
    p.order = ORDER_NONE
    p.torch_device = False
    to_host_in_place = p.target.device_type == kDLCPU and _in_place_on_host(here)
    if p.target.device_type != here and not to_host_in_place:
        p.reason = REASON_MOVE
    elif a.copy == COPY_ALWAYS:
        p.reason = REASON_ASKED
    elif not a.versioned and a.read_only:
        p.reason = REASON_LEGACY_READ_ONLY
        if a.copy == COPY_NEVER and p.refusal == REFUSE_NONE:
            p.refusal = REFUSE_LEGACY_READ_ONLY
    if p.target.device_type == kDLCUDA and here != kDLCUDA:
        p.kind = PLAN_TO_DEVICE
        p.order = ORDER_BY_COPY
    elif to_host_in_place:
        p.kind = PLAN_HOST_VIEW if p.reason == REASON_NONE else PLAN_HOST_COPY
        p.order = ORDER_HOST
    elif p.reason == REASON_NONE:
        p.kind = PLAN_VIEW
    elif here == kDLCUDA:
        p.kind = PLAN_HOST_COPY_OF_DEVICE if p.reason == REASON_MOVE else PLAN_DEVICE_COPY
    elif _host_accessible(here):
        p.kind = PLAN_HOST_COPY
    else:
        p.kind = PLAN_REFUSED
        if p.refusal == REFUSE_NONE:
            p.refusal = REFUSE_COPY_IN_PLACE
    # a copy of pinned or managed data keeps its kind unless dl_device names the host (spec §10)
    if (p.kind == PLAN_HOST_VIEW or p.kind == PLAN_HOST_COPY_OF_DEVICE
            or (p.kind == PLAN_HOST_COPY and (p.target.device_type == kDLCPU
                                              or not _cuda_kind(here)))):
        p.target.device_type = kDLCPU
        p.target.device_id = 0
    if p.order != ORDER_NONE:
        pass                            # decided with the kind
    elif _cuda_kind(here):
        p.torch_device = a.torch
        if p.kind == PLAN_DEVICE_COPY:
            p.order = ORDER_BY_COPY
        elif p.reason != REASON_NONE or (here != kDLCUDA and not a.stream):
            p.order = ORDER_HOST        # the host reads the data at once
        else:
            p.order = ORDER_STREAM
    elif a.stream and here == kDLROCM:
        p.order = ORDER_ROCM
    elif a.stream and p.refusal == REFUSE_NONE:
        p.refusal = REFUSE_STREAM
    if p.refusal != REFUSE_NONE:       # a refused plan carries its refusal only
        p.kind = PLAN_REFUSED
        p.order = ORDER_NONE
        p.reason = REASON_NONE
        p.torch_device = False


cdef int _refuse(DLPackObject self, PlanRefusal why, object dl_device,
                 object stream) except -1:
    """Raise the refusal an export's plan names."""
    cdef str here = _device_name(self.desc.dl.device)
    if why == REFUSE_HOST_ID:
        raise Refusal(f"__dlpack__: dl_device = {dl_device!r}: the host is device "
                      f"({kDLCPU}, 0); no other kDLCPU id names a device")
    if why == REFUSE_NO_CUDA_DEVICE:
        raise Refusal(f"__dlpack__: dl_device = {dl_device!r}: no such CUDA device")
    if why == REFUSE_CANNOT_MOVE:
        raise Refusal(f"__dlpack__: dl_device = {dl_device!r}: cannot move data from "
                      f"{here} there (pydlpack copies between the host and a GPU, not "
                      "between GPUs)")
    if why == REFUSE_NEEDS_COPY:
        raise Refusal(f"__dlpack__: dl_device = {dl_device!r} needs a copy from {here}, but "
                      "copy=False")
    if why == REFUSE_LEGACY_READ_ONLY:
        raise Refusal(
            "__dlpack__: the data is read-only and this consumer asked for a legacy "
            "(unversioned) capsule, which cannot say so, with copy=False. Use a consumer "
            "that passes max_version >= (1, 0), allow a copy, or opt in with "
            "asdlpack(obj, allow_legacy_readonly=True)")
    if why == REFUSE_COPY_IN_PLACE:
        raise Refusal(f"__dlpack__: a copy of data on {here} in place is not supported; ask "
                      f"for a host copy with dl_device=({kDLCPU}, 0)")
    raise Refusal(f"__dlpack__: stream = {stream!r} must be None for data on {here}")


cdef inline bint _in_place_on_host(int32_t device_type) noexcept nogil:
    """CUDA memory the CPU reads where it is (pinned, managed): dl_device=(kDLCPU, 0) is a view
    of it, not a copy (spec §10)."""
    return device_type == kDLCUDAHost or device_type == kDLCUDAManaged


cdef int _rocm_order(DLPackObject self, object stream) except -1:
    """ROCm data: only its __dlpack__ provider can order its own streams; -1 asks for nothing."""
    value = _stream_index(stream, "__dlpack__: stream", True)
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
    with __index__: an int subclass's == cannot lie); anything else is a TypeError naming it.
    None and the bools are read inline, the rest by _copy_arg_value."""
    if copy is None:
        return COPY_IF_NEEDED
    if copy is True:
        return COPY_ALWAYS
    if copy is False:
        return COPY_NEVER
    return _copy_arg_value(copy)


cdef int _copy_arg_value(object copy) except -2:
    """_copy_arg of anything but None and the bools."""
    np = sys.modules.get("numpy")
    if np is not None and type(copy) is getattr(np, "bool_", None):
        return COPY_ALWAYS if copy else COPY_NEVER
    if isinstance(copy, int):
        value = PyNumber_Index(copy)
        if value == 0 or value == 1:
            return COPY_ALWAYS if value else COPY_NEVER
    raise TypeError(f"__dlpack__: copy = {copy!r:.80} is not None, a bool or 0/1")


cdef int _dl_device_arg(object dl_device, DLDevice *out) except -1:
    """The device dl_device names (array API), read once: a tuple or list of two ints
    (_device_pair), each within 32 bits. Whether it can be served is the plan's rule (the host
    is one device, (kDLCPU, 0): any other kDLCPU id names no device, as NumPy says)."""
    dt, did = _device_pair(dl_device, "__dlpack__: dl_device")
    try:
        out.device_type = dt
        out.device_id = did
    except OverflowError:
        raise Refusal(f"__dlpack__: dl_device = {dl_device!r:.80} names no device (a value "
                      "beyond 32 bits)") from None
    return 0


cdef enum:
    FILL_ROWS = 5       # _fill_from_device's scratch: extent, pitch, gather, dim, the odometer


cdef int _fill_from_device(DLPackObject self, void *block, bint versioned) except -1:
    """Copy CUDA device memory into a host-copy export block (after _sync_for waited for the
    producer): contiguous data in one copy; strided data element by element, in rows of 2-D
    copies (or windows of their covering span, §10), into a staging buffer in the order the
    elements lie in memory, then gathered into C order on the host (host memory: the block,
    nbytes more and at most one 16 MiB window, whatever the span). Per-dimension state is in
    scratch: FILL_ROWS arrays of ndim int64, on the stack for a few dimensions (spec §7)."""
    cdef DLTensor *t = _block_tensor(block, versioned)
    cdef int i, k, n = 0, ndim = self.desc.dl.ndim
    cdef int64_t isz = self.desc.layout.itemsize, lo = 0, step, size, offset = 0, width
    cdef int64_t small[FILL_ROWS * STACK_DIMS]
    cdef int64_t *scratch = NULL
    cdef int64_t *extent
    cdef int64_t *pitch
    cdef int64_t *gather
    cdef int64_t *dim
    cdef char *staging = NULL
    try:
        if self.desc.layout.count == 0:
            return 0
        if self.desc.layout.c_contig:
            _cu_copy(self.desc.dl.device.device_id, t.data, self.desc.dl.data,
                     self.desc.layout.nbytes, False)
            return 0
        scratch = _scratch(small, FILL_ROWS * STACK_DIMS, FILL_ROWS * ndim)
        if scratch == NULL:
            raise MemoryError(f"__dlpack__: cannot allocate a copy's plan of {ndim} dimensions")
        extent, pitch, gather = scratch, scratch + ndim, scratch + 2 * ndim
        dim = scratch + 3 * ndim
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
                      width, n, extent, pitch, scratch + 4 * ndim)
        _gather(<char *>t.data, staging + offset, self, gather)
    except BaseException:
        free(block)
        raise
    finally:
        free(staging)
        _scratch_free(scratch, small)       # free(NULL) when never allocated
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
    cdef _DeviceMemory owner = _cu_alloc(
        device_id, hi - lo, queue if not settle and _cu_ordered_on(device_id, queue) else 0)
    if hi > lo:
        _cu_copy_on(device_id, queue, owner.ptr, <CUdeviceptr><uintptr_t>self.desc.dl.data + lo,
                    hi - lo, settle)
    block = _export(self, versioned, EXPORT_DEVICE_COPY, owner)
    t = _block_tensor(block, versioned)
    t.data = <void *><uintptr_t>(owner.ptr - lo)
    memcpy(t.strides, self.desc.dl.strides, self.desc.dl.ndim * sizeof(int64_t))
    return block


cdef void *_export_host_kind_copy(DLPackObject self, bint versioned,
                                  DLDevice target) except NULL:
    """A copy of pinned or managed data that stays so (copy=True, or read-only data for a legacy
    consumer, without dl_device=(kDLCPU, 0); spec §10): in new cuMemHostAlloc or
    cuMemAllocManaged memory of the same device, in C order, freed with its last capsule."""
    cdef _HostKindMemory mem = _cu_host_kind_alloc(
        target.device_id, self.desc.layout.nbytes, target.device_type == kDLCUDAManaged)
    _gather(<char *>mem.ptr, <const char *>self.desc.dl.data, self)
    cdef void *block = _export(self, versioned, EXPORT_OWNED_COPY, mem)
    cdef DLTensor *t = _block_tensor(block, versioned)
    t.data = <void *>mem.ptr
    t.device = target
    return block


cdef void *_export_to_device(DLPackObject self, bint versioned, int32_t device_id,
                             object stream) except NULL:
    """A copy of host data on CUDA GPU device_id, in its primary context, freed there when
    the capsule's deleter runs. For a consumer's stream (of that context) it is allocated,
    copied and freed in order on that stream, where the driver can (_cu_ordered_on). Else from
    pageable memory the copy returns once staged, its DMA on the legacy default stream: a
    consumer's stream 2 or handle waits for it (an event); with stream None or -1 the
    consumer's stream is unknown (torch passes dl_device without one), so the host waits for
    the copy to land."""
    cdef char *staging = NULL
    cdef const char *src = <const char *>self.desc.dl.data
    cdef uintptr_t consumer
    cdef bint ordered = stream is not None and _consumer_stream(stream, &consumer)
    cdef bint on_stream = ordered and _cu_ordered_on(device_id, consumer)
    _host_wait(self)
    cdef _DeviceMemory owner = _cu_alloc(device_id, self.desc.layout.nbytes,
                                         consumer if on_stream else 0)
    try:
        if self.desc.layout.count and not self.desc.layout.c_contig:
            staging = <char *>_alloc_copy(self.desc.layout.nbytes)
            if staging == NULL:
                raise MemoryError(f"__dlpack__: cannot allocate {self.desc.layout.nbytes} bytes")
            _gather(staging, src, self)
            src = staging
        if self.desc.layout.count and on_stream:
            _cu_copy_to_device_on(device_id, consumer, owner.ptr, src, self.desc.layout.nbytes)
        elif self.desc.layout.count:
            _cu_copy(device_id, <void *><uintptr_t>owner.ptr, src, self.desc.layout.nbytes, True,
                     not ordered)
            if ordered and not on_stream and consumer != CU_STREAM_LEGACY:
                _cu_stream_wait(device_id, CU_STREAM_LEGACY, consumer)
    finally:
        free(staging)
    return _export(self, versioned, EXPORT_DEVICE_COPY, owner)


def _export_plan_of(tuple here, object target, object copy, bint stream, bint versioned,
                    bint read_only, bint torch, bint full=False):
    """Tests: the plan _export_plan makes (with ``full``, _plan_in_full: the common case not
    taken apart) for data on ``here`` (a (device_type, device_id) pair), dl_device ``target``
    (a pair or None) and __dlpack__'s copy, as names: (kind, order, reason, refusal,
    torch_device, target)."""
    cdef ExportAsk ask
    cdef ExportPlan plan
    ask.here.device_type, ask.here.device_id = here
    ask.has_target = target is not None
    if ask.has_target:
        ask.target.device_type, ask.target.device_id = target
    ask.copy = _copy_arg(copy)
    ask.stream = stream
    ask.versioned = versioned
    ask.read_only = read_only
    ask.torch = torch
    if full:
        _plan_in_full(&ask, &plan)
    else:
        _export_plan(&ask, &plan)
    return (("view", "host_view", "host_copy", "host_copy_of_device", "device_copy",
             "to_device", "refused")[plan.kind],
            ("none", "stream", "host", "rocm", "by_copy")[plan.order],
            ("none", "move", "asked", "legacy_read_only")[plan.reason],
            ("none", "host_id", "no_cuda_device", "cannot_move", "needs_copy",
             "legacy_read_only", "copy_in_place", "stream")[plan.refusal],
            plan.torch_device, (plan.target.device_type, plan.target.device_id))
