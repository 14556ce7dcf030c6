# Writer: the Arrow PyCapsule interface (docs/spec.md §13). A DLPackObject is an Arrow
# array without a copy: 1-D data a primitive array, 0-d data a one-value array, N-D
# C-contiguous data an arrow.fixed_shape_tensor, bool an arrow.bool8. Each exported ArrowArray
# holds the DLPackObject (through an _ArrowAnchor, _own.pxi) until its release callback runs;
# schemas hold nothing. Builders run without the GIL, so a stream serves any thread.


cdef extern from *:
    """
    static _Alignas(64) const char dlpk_arrow_empty[64];
    """
    const char _arrow_empty "dlpk_arrow_empty"[64]

# What an export describes; every field is checked by _arrow_describe (with the GIL).
ctypedef struct _ArrowOut:
    const void *data
    int64_t length                  # rows
    int64_t list_size               # values per row of a fixed_shape_tensor; -1: primitive
    char leaf                       # the values' format character
    bint bool8                      # the values are arrow.bool8
    bint plain_list                 # a tensor as its storage fixed-size list, and bool8
    bint plain_values               # as int8: each level as a requested_schema asked
    int32_t device_type             # ARROW_DEVICE_* (equal to the DLPack device type)
    int64_t device_id
    const char *tensor_meta         # the fixed_shape_tensor's JSON metadata
    int32_t tensor_meta_len

cdef char *_EXT_NAME = b"ARROW:extension:name"
cdef char *_EXT_META = b"ARROW:extension:metadata"


cdef inline size_t _meta_size(int32_t nlen, int32_t vlen) noexcept nogil:
    return 4 + (4 + 20) + (4 + nlen) + (4 + 24) + (4 + vlen)


cdef void _meta_write(char *p, const char *name, int32_t nlen, const char *value,
                      int32_t vlen) noexcept nogil:
    """An extension type's metadata: two key/value pairs, lengths in native byte order."""
    cdef int32_t n = 2, klen = 20
    memcpy(p, &n, 4)
    memcpy(p + 4, &klen, 4)
    memcpy(p + 8, _EXT_NAME, 20)
    memcpy(p + 28, &nlen, 4)
    memcpy(p + 32, name, nlen)
    p += 32 + nlen
    klen = 24
    memcpy(p, &klen, 4)
    memcpy(p + 4, _EXT_META, 24)
    memcpy(p + 28, &vlen, 4)
    if vlen:
        memcpy(p + 32, value, vlen)


cdef void _schema_values(const _ArrowOut *d, _SchemaNode *node, ArrowSchema *s,
                         bint child) noexcept nogil:
    """s describes the values, its strings and metadata in node (allocated with room for the
    bool8 metadata when the values are arrow.bool8)."""
    cdef bint bool8 = d.bool8 and not d.plain_values
    node.n_children = 0
    node.format[0] = d.leaf
    node.format[1] = 0
    s.format = node.format
    s.name = b"item" if child else b""
    s.metadata = NULL
    if bool8:
        _meta_write(<char *>(node + 1), b"arrow.bool8", 11, NULL, 0)
        s.metadata = <const char *>(node + 1)
    s.flags = ARROW_FLAG_NULLABLE
    s.n_children = 0
    s.children = NULL
    s.dictionary = NULL
    s.release = _arrow_schema_release
    s.private_data = node


cdef int _arrow_schema_fill(const _ArrowOut *d, ArrowSchema *out) noexcept nogil:
    """out describes d's type (0), or ENOMEM with out untouched."""
    cdef size_t vmeta = _meta_size(11, 0) if d.bool8 and not d.plain_values else 0
    cdef size_t tmeta = 0
    cdef _SchemaNode *top
    cdef _SchemaNode *values
    if d.list_size < 0:
        top = <_SchemaNode *>malloc(sizeof(_SchemaNode) + vmeta)
        if top == NULL:
            return ENOMEM
        _schema_values(d, top, out, False)
        return 0
    if not d.plain_list:
        tmeta = _meta_size(24, d.tensor_meta_len)
    top = <_SchemaNode *>malloc(sizeof(_SchemaNode) + tmeta)
    values = <_SchemaNode *>malloc(sizeof(_SchemaNode) + vmeta)
    if top == NULL or values == NULL:
        free(top)
        free(values)
        return ENOMEM
    _schema_values(d, values, &top.child, True)
    top.n_children = 1
    top.children[0] = &top.child
    snprintf(top.format, sizeof(top.format), b"+w:%lld", <long long>d.list_size)
    out.format = top.format
    out.name = b""
    out.metadata = NULL
    if tmeta:
        _meta_write(<char *>(top + 1), b"arrow.fixed_shape_tensor", 24, d.tensor_meta,
                    d.tensor_meta_len)
        out.metadata = <const char *>(top + 1)
    out.flags = ARROW_FLAG_NULLABLE
    out.n_children = 1
    out.children = top.children
    out.dictionary = NULL
    out.release = _arrow_schema_release
    out.private_data = top
    return 0


cdef void _array_values(_ArrowNode *node, ArrowArray *a, int64_t length, const void *data,
                        _ArrowAnchor *anchor) noexcept nogil:
    """a is the values: no validity bitmap, no nulls, offset 0; node holds the anchor."""
    node.anchor = anchor
    _anchor_hold(anchor)
    node.n_children = 0
    node.buffers[0] = NULL
    node.buffers[1] = data
    a.length = length
    a.null_count = 0
    a.offset = 0
    a.n_buffers = 2
    a.n_children = 0
    a.buffers = node.buffers
    a.children = NULL
    a.dictionary = NULL
    a.release = _arrow_array_release
    a.private_data = node


cdef int _arrow_array_fill(const _ArrowOut *d, _ArrowAnchor *anchor,
                           ArrowArray *out) noexcept nogil:
    """out views d's memory, each struct holding anchor (0), or ENOMEM with out untouched."""
    cdef const void *data = d.data if d.data != NULL else <const void *>_arrow_empty
    cdef _ArrowNode *top = <_ArrowNode *>calloc(1, sizeof(_ArrowNode))
    cdef _ArrowNode *values
    if top == NULL:
        return ENOMEM
    if d.list_size < 0:
        _array_values(top, out, d.length, data, anchor)
        return 0
    values = <_ArrowNode *>calloc(1, sizeof(_ArrowNode))
    if values == NULL:
        free(top)
        return ENOMEM
    _array_values(values, &top.child, d.length * d.list_size, data, anchor)
    top.anchor = anchor
    _anchor_hold(anchor)
    top.n_children = 1
    top.children[0] = &top.child
    top.buffers[0] = NULL
    out.length = d.length
    out.null_count = 0
    out.offset = 0
    out.n_buffers = 1
    out.n_children = 1
    out.buffers = top.buffers
    out.children = top.children
    out.dictionary = NULL
    out.release = _arrow_array_release
    out.private_data = top
    return 0


cdef int _arrow_device_fill(const _ArrowOut *d, _ArrowAnchor *anchor,
                            ArrowDeviceArray *out) noexcept nogil:
    cdef int rc = _arrow_array_fill(d, anchor, &out.array)
    out.device_id = d.device_id
    out.device_type = d.device_type
    out.sync_event = &anchor.event if anchor.event != NULL else NULL
    out.reserved[0] = out.reserved[1] = out.reserved[2] = 0
    return rc


cdef str _dtype_refusal(DLPackObject self):
    cdef DLDataType t = self.desc.dl.dtype
    name = self.dtype.name
    if t.lanes != 1:
        why = "a vector type (lanes > 1); Arrow has none"
    elif t.bits < 8 or self.desc.flags & FLAG_SUBBYTE_PADDED:
        why = "a sub-byte type; Arrow has none"
    elif t.code == kDLComplex:
        why = ("complex; Arrow has no complex type: export the real and imaginary parts "
               "(torch.view_as_real(t), a.view(a.real.dtype))")
    elif name.startswith(("float", "bfloat")):
        why = f"Arrow has no {name}: cast to float16, float32 or float64 first"
    else:
        why = f"Arrow has no {name} type"
    return f"dtype {name}: {why}"


cdef char _leaf_format(DLDataType t) noexcept nogil:
    """The Arrow format character of a DLPack type (0: none)."""
    if t.lanes != 1:
        return 0
    if t.code == kDLInt or t.code == kDLUInt:
        if t.bits == 8:
            return b'c' if t.code == kDLInt else b'C'
        if t.bits == 16:
            return b's' if t.code == kDLInt else b'S'
        if t.bits == 32:
            return b'i' if t.code == kDLInt else b'I'
        if t.bits == 64:
            return b'l' if t.code == kDLInt else b'L'
    elif t.code == kDLFloat:
        if t.bits == 16:
            return b'e'
        if t.bits == 32:
            return b'f'
        if t.bits == 64:
            return b'g'
    elif t.code == kDLBool and t.bits == 8:
        return b'c'
    return 0


cdef object _arrow_describe(DLPackObject self, _ArrowOut *d, str protocol, bint any_device):
    """Check that self is an Arrow array as it is and describe it into d; returns the
    fixed_shape_tensor metadata (bytes that d points into) or None."""
    cdef int i
    cdef int32_t dt = self.desc.dl.device.device_type
    cdef int64_t k = 1
    memset(d, 0, sizeof(_ArrowOut))
    d.leaf = _leaf_format(self.desc.dl.dtype)
    if d.leaf == 0 or self.desc.flags & FLAG_SUBBYTE_PADDED:
        raise Refusal(f"{protocol}: {_dtype_refusal(self)}")
    d.bool8 = self.desc.dl.dtype.code == kDLBool
    if not any_device and not _host_accessible(dt):
        raise Refusal(f"{protocol}: the data is on {_device_name(self.desc.dl.device)}; this "
                      "method is for CPU memory: use __arrow_c_device_array__ or "
                      "__arrow_c_device_stream__")
    if not _arrow_kind(dt):
        raise Refusal(f"{protocol}: Arrow has no device type for "
                      f"{_device_name(self.desc.dl.device)}")
    d.device_type = dt
    d.device_id = -1 if dt == kDLCPU else self.desc.dl.device.device_id
    d.data = self.desc.dl.data
    d.list_size = -1
    if self.desc.dl.ndim == 0:
        d.length = 1
        return None
    if not self.desc.layout.c_contig:
        raise Refusal(f"{protocol}: the data (shape {self.shape}, strides {self.strides} "
                      "elements) is strided or Fortran-ordered; Arrow arrays are "
                      "C-contiguous and pydlpack does not copy behind your back: make a "
                      "contiguous copy first (np.ascontiguousarray(a), t.contiguous())")
    d.length = self.desc.dl.shape[0]
    if self.desc.dl.ndim == 1:
        return None
    for i in range(1, self.desc.dl.ndim):
        if _mul_ovf(k, self.desc.dl.shape[i], &k) or k > INT32_MAX:
            raise Refusal(f"{protocol}: rows of shape {self.shape[1:]} hold more values "
                          "than an Arrow fixed-size list can (2**31 - 1)")
    d.list_size = k
    meta = ('{"shape":['
            + ",".join([str(self.desc.dl.shape[i]) for i in range(1, self.desc.dl.ndim)])
            + ']}').encode()
    d.tensor_meta = meta
    d.tensor_meta_len = len(meta)
    return meta


cdef str _arrow_type_text(const _ArrowOut *d, DLPackObject self):
    values = "arrow.bool8" if d.bool8 and not d.plain_values else (
        "int8" if d.bool8 else self.dtype.name)
    if d.list_size < 0:
        return values
    if d.plain_list:
        return f"fixed_size_list<{values}>[{d.list_size}]"
    return f"arrow.fixed_shape_tensor<{values}>, shape {list(self.shape[1:])}"


cdef int _arrow_requested(DLPackObject self, _ArrowOut *d, object requested,
                          str protocol) except -1:
    """A requested_schema must ask for the type exported, or for its storage type (int8 for
    bool8, the fixed-size list of a tensor): pydlpack never casts."""
    cdef ArrowSchema *s
    cdef _ArrowType t
    cdef DLDataType ours = self.desc.dl.dtype
    if requested is None:
        return 0
    s = <ArrowSchema *>_arrow_capsule(requested, b"arrow_schema", protocol, "requested_schema")
    exported = _arrow_type_text(d, self)
    if s.release == NULL:
        raise Refusal(f"{protocol}: requested_schema is released (release is NULL)")
    t.sizes = t.small
    try:
        try:
            tensor = _arrow_read_schema(s, &t, protocol, False)
        except BufferError as e:
            raise Refusal(f"{protocol}: requested_schema asks for a type other than the data's "
                          f"({exported}): {e}; pydlpack does not cast") from None
        same = t.dtype.code == ours.code and t.dtype.bits == ours.bits
        storage = ours.code == kDLBool and t.dtype.code == kDLInt and t.dtype.bits == 8
        if d.list_size < 0:
            ok = t.nlists == 0 and (same or storage)
        elif t.nlists != 1 or t.sizes[0] != d.list_size:
            ok = False
        elif t.tensor:
            try:
                shape, perm = _arrow_tensor_meta(tensor, t.sizes[0], protocol)
            except BufferError as e:
                raise Refusal(f"{protocol}: requested_schema asks for a malformed type: {e}; "
                              f"the data's is {exported}") from None
            ok = same and shape == list(self.shape[1:]) and (
                perm is None or perm == list(range(len(perm))))
        else:
            ok = same or storage
        if not ok:
            raise Refusal(f"{protocol}: requested_schema asks for another type than the data's "
                          f"({exported}); pydlpack does not cast: cast after the exchange")
    finally:
        _arrow_type_free(&t)
    d.plain_list = d.list_size >= 0 and not t.tensor
    d.plain_values = storage and not same
    return 0


cdef int _arrow_event(DLPackObject self, _ArrowAnchor *anchor) except -1:
    """CUDA data: the event a consumer must wait on before reading (docs/spec.md §13): the
    one an Arrow producer gave, or one recorded now on the producer's stream."""
    cdef uintptr_t producer
    cdef void *event
    if not _cuda_kind(self.desc.dl.device.device_type):
        return 0
    work = _producer_ready(self, 0, &producer, &event)
    if work == WORK_EVENT:
        anchor.event = event            # the importer's: alive while the DLPackObject is
        return 0
    if work == WORK_NONE:
        return 0
    anchor.event = _cu_event_record(self.desc.dl.device.device_id, producer, &anchor.context)
    anchor.own_event = True
    anchor.generation = _cu_generation
    return 0


cdef int _refuse_kwargs(dict kwargs, str protocol) except -1:
    """The device methods take future keywords defaulting to None (the PyCapsule interface):
    None is accepted, anything else is not understood."""
    bad = sorted([k for k, v in kwargs.items() if v is not None])
    if bad:
        raise NotImplementedError(f"{protocol}: unsupported keyword argument(s) {bad}")
    return 0


cdef object _capsule_of(void *p, const char *name, PyCapsule_Destructor destructor):
    """A capsule owning p (a malloc'ed base struct whose release is NULL until filled), freed
    by the destructor of its kind."""
    try:
        return PyCapsule_New(p, name, destructor)
    except BaseException:
        free(p)
        raise


cdef object _arrow_schema_capsule(const _ArrowOut *d):
    cdef ArrowSchema *s = <ArrowSchema *>calloc(1, sizeof(ArrowSchema))
    if s == NULL:
        raise MemoryError()
    cap = _capsule_of(s, b"arrow_schema", _arrow_schema_destructor)
    if _arrow_schema_fill(d, s) != 0:
        raise MemoryError()
    return cap


cdef object _arrow_schema_export(DLPackObject self):
    cdef _ArrowOut d
    meta = _arrow_describe(self, &d, "__arrow_c_schema__", True)
    return _arrow_schema_capsule(&d)


cdef object _arrow_array_export(DLPackObject self, object requested, dict kwargs, bint device,
                                str protocol):
    """(schema, array) capsules: __arrow_c_array__ and __arrow_c_device_array__."""
    cdef _ArrowOut d
    cdef void *base
    cdef _ArrowAnchor *anchor
    cdef int rc
    if device:
        _refuse_kwargs(kwargs, protocol)
    meta = _arrow_describe(self, &d, protocol, device)
    _arrow_requested(self, &d, requested, protocol)
    if not device:
        _host_wait(self)
    schema = _arrow_schema_capsule(&d)
    base = calloc(1, sizeof(ArrowDeviceArray) if device else sizeof(ArrowArray))
    if base == NULL:
        raise MemoryError()
    array = (_capsule_of(base, b"arrow_device_array", _arrow_device_array_destructor)
             if device else _capsule_of(base, b"arrow_array", _arrow_array_destructor))
    anchor = _anchor_new(self)
    try:
        if device:
            _arrow_event(self, anchor)
    except BaseException:
        _anchor_drop(anchor)
        raise
    if device:
        rc = _arrow_device_fill(&d, anchor, <ArrowDeviceArray *>base)
    else:
        rc = _arrow_array_fill(&d, anchor, <ArrowArray *>base)
    _anchor_drop(anchor)                # the structs hold it now
    if rc != 0:
        raise MemoryError()
    return schema, array


# -- streams of one chunk -----------------------------------------------------------------------

ctypedef struct _StreamState:
    _ArrowAnchor *anchor
    _ArrowOut desc                      # desc.tensor_meta points after this struct
    bint done                           # the chunk was handed out
    const char *error


cdef int _stream_schema(_StreamState *state, ArrowSchema *out) noexcept nogil:
    if out == NULL:
        return EINVAL
    if _arrow_schema_fill(&state.desc, out) != 0:
        state.error = b"pydlpack: out of memory"
        return ENOMEM
    return 0


cdef int _stream_get_schema(ArrowArrayStream *st, ArrowSchema *out) noexcept nogil:
    if st == NULL or st.release == NULL:
        return EINVAL
    return _stream_schema(<_StreamState *>st.private_data, out)


cdef int _stream_get_next(ArrowArrayStream *st, ArrowArray *out) noexcept nogil:
    cdef _StreamState *state
    if st == NULL or st.release == NULL or out == NULL:
        return EINVAL
    state = <_StreamState *>st.private_data
    if state.done:
        memset(out, 0, sizeof(ArrowArray))      # released: the end of the stream
        return 0
    if _arrow_array_fill(&state.desc, state.anchor, out) != 0:
        state.error = b"pydlpack: out of memory"
        return ENOMEM
    state.done = True
    return 0


cdef const char *_stream_last_error(ArrowArrayStream *st) noexcept nogil:
    if st == NULL or st.release == NULL:
        return NULL
    return (<_StreamState *>st.private_data).error


cdef void _stream_release(ArrowArrayStream *st) noexcept nogil:
    cdef _StreamState *state
    if st == NULL or st.release == NULL:
        return
    state = <_StreamState *>st.private_data
    st.release = NULL
    _anchor_drop(state.anchor)
    free(state)


cdef int _device_stream_get_schema(ArrowDeviceArrayStream *st,
                                   ArrowSchema *out) noexcept nogil:
    if st == NULL or st.release == NULL:
        return EINVAL
    return _stream_schema(<_StreamState *>st.private_data, out)


cdef int _device_stream_get_next(ArrowDeviceArrayStream *st,
                                 ArrowDeviceArray *out) noexcept nogil:
    cdef _StreamState *state
    if st == NULL or st.release == NULL or out == NULL:
        return EINVAL
    state = <_StreamState *>st.private_data
    memset(out, 0, sizeof(ArrowDeviceArray))
    if state.done:
        out.device_type = state.desc.device_type
        out.device_id = state.desc.device_id
        return 0
    if _arrow_device_fill(&state.desc, state.anchor, out) != 0:
        state.error = b"pydlpack: out of memory"
        return ENOMEM
    state.done = True
    return 0


cdef const char *_device_stream_last_error(ArrowDeviceArrayStream *st) noexcept nogil:
    if st == NULL or st.release == NULL:
        return NULL
    return (<_StreamState *>st.private_data).error


cdef void _device_stream_release(ArrowDeviceArrayStream *st) noexcept nogil:
    cdef _StreamState *state
    if st == NULL or st.release == NULL:
        return
    state = <_StreamState *>st.private_data
    st.release = NULL
    _anchor_drop(state.anchor)
    free(state)


cdef object _arrow_stream_export(DLPackObject self, object requested, dict kwargs, bint device,
                                 str protocol):
    """A stream capsule of one chunk: __arrow_c_stream__ and __arrow_c_device_stream__."""
    cdef _ArrowOut d
    cdef _StreamState *state
    cdef void *base
    cdef ArrowArrayStream *st
    cdef ArrowDeviceArrayStream *dst
    if device:
        _refuse_kwargs(kwargs, protocol)
    meta = _arrow_describe(self, &d, protocol, device)
    _arrow_requested(self, &d, requested, protocol)
    if not device:
        _host_wait(self)
    base = calloc(1, sizeof(ArrowDeviceArrayStream) if device else sizeof(ArrowArrayStream))
    if base == NULL:
        raise MemoryError()
    stream = (_capsule_of(base, b"arrow_device_array_stream", _arrow_device_stream_destructor)
              if device else _capsule_of(base, b"arrow_array_stream", _arrow_stream_destructor))
    state = <_StreamState *>calloc(1, sizeof(_StreamState) + <size_t>d.tensor_meta_len)
    if state == NULL:
        raise MemoryError()
    state.desc = d
    if d.tensor_meta_len:
        memcpy(<char *>(state + 1), d.tensor_meta, d.tensor_meta_len)
        state.desc.tensor_meta = <const char *>(state + 1)
    try:
        state.anchor = _anchor_new(self)
    except BaseException:
        free(state)
        raise
    try:
        if device:
            _arrow_event(self, state.anchor)
    except BaseException:
        _anchor_drop(state.anchor)
        free(state)
        raise
    if device:
        dst = <ArrowDeviceArrayStream *>base
        dst.device_type = d.device_type
        dst.get_schema = _device_stream_get_schema
        dst.get_next = _device_stream_get_next
        dst.get_last_error = _device_stream_last_error
        dst.private_data = state
        dst.release = _device_stream_release
    else:
        st = <ArrowArrayStream *>base
        st.get_schema = _stream_get_schema
        st.get_next = _stream_get_next
        st.get_last_error = _stream_last_error
        st.private_data = state
        st.release = _stream_release
    return stream
