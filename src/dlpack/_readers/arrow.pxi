# Reader: the Arrow PyCapsule interface — __arrow_c_device_array__, __arrow_c_array__,
# __arrow_c_stream__ — read zero-copy into one tensor (docs/spec.md §13). The ArrowSchema is
# read and released at once; the ArrowArray (with the stream it came from) is moved into an
# _ArrowImport that releases it when the last view is gone. Every struct is foreign: the base
# structs are moved (copied) before use, each child is copied once before it is read, and
# every length, offset and pointer is checked before a view is made.


cdef extern from *:
    """
    /* 0 bits among [start, start + count) of an LSB-first validity bitmap */
    static int64_t dlpk_zero_bits(const uint8_t *bits, int64_t start, int64_t count) {
        int64_t zeros = 0, i = start, end = start + count;
        uint64_t word;
        while (i < end && (i & 7)) { zeros += !((bits[i >> 3] >> (i & 7)) & 1); i++; }
        while (end - i >= 64) {
            memcpy(&word, bits + (i >> 3), 8);
            zeros += 64 - __builtin_popcountll(word);
            i += 64;
        }
        while (end - i >= 8) { zeros += 8 - __builtin_popcount(bits[i >> 3]); i += 8; }
        while (i < end) { zeros += !((bits[i >> 3] >> (i & 7)) & 1); i++; }
        return zeros;
    }
    """
    int64_t _zero_bits "dlpk_zero_bits"(const uint8_t *bits, int64_t start,
                                        int64_t count) noexcept nogil


cdef int _arrow_node(ArrowArray *a, int64_t n_buffers, int64_t n_children, str protocol,
                     int depth) except -1:
    """Check one (copied) ArrowArray against the layout its type implies."""
    cdef int64_t end
    if a.release == NULL:
        raise Refusal(f"{protocol}: {_at(depth)} is released (release is NULL)")
    if a.length < 0:
        raise Refusal(f"{protocol}: field 'length' = {a.length} of {_at(depth)} is negative")
    if a.offset < 0:
        raise Refusal(f"{protocol}: field 'offset' = {a.offset} of {_at(depth)} is negative")
    if _add_ovf(a.offset, a.length, &end):
        raise Refusal(f"{protocol}: fields 'offset' = {a.offset} and 'length' = {a.length} "
                      f"of {_at(depth)} overflow 64 bits")
    if a.null_count < -1:
        raise Refusal(f"{protocol}: field 'null_count' = {a.null_count} of {_at(depth)} is "
                      "negative (only -1, 'not computed', is allowed)")
    if a.n_buffers != n_buffers:
        raise Refusal(f"{protocol}: field 'n_buffers' = {a.n_buffers} of {_at(depth)}; its "
                      f"type has {n_buffers}")
    if a.buffers == NULL:
        raise Refusal(f"{protocol}: field 'buffers' of {_at(depth)} is NULL")
    if a.n_children != n_children:
        raise Refusal(f"{protocol}: field 'n_children' = {a.n_children} of {_at(depth)}; "
                      f"its type has {n_children}")
    if n_children and (a.children == NULL or a.children[0] == NULL):
        raise Refusal(f"{protocol}: field 'children' of {_at(depth)} is NULL or holds NULL")
    if a.dictionary != NULL:
        raise Refusal(f"{protocol}: field 'dictionary' of {_at(depth)} is set, but its "
                      "schema is not dictionary-encoded")
    return 0


ctypedef struct _NullScan:
    const uint8_t *bits                 # the level's validity bitmap (buffers[0])
    int64_t nulls                       # its null_count
    int64_t start, count                # the viewed slice, in the level's physical indices
    bint whole                          # the slice is the level's whole array


cdef enum:
    ARROW_SCANS_ON_STACK = 8            # levels whose null scans need no allocation


cdef enum:
    ARROW_BITMAP_CHUNK = 1 << 20        # bytes of a device bitmap copied to the host at once


cdef int _arrow_nulls(DLPackObject self, const _NullScan *s, str protocol, int depth,
                      bint *waited) except -1:
    """Refuse nulls among the count values from physical index start (validity bits only
    there: padding and bits outside the slice do not count). A bitmap is read only when its
    null_count cannot answer, and only after the producer's sync_event (waited once per
    array): by the CPU where the device is host-readable, else copied by the driver."""
    cdef int64_t nulls = s.nulls
    if nulls == 0 or s.count == 0:
        return 0
    if s.bits == NULL:
        if nulls == -1:
            return 0
        raise Refusal(f"{protocol}: field 'null_count' = {nulls} of {_at(depth)}, but its "
                      "validity bitmap (buffers[0]) is NULL")
    if not (s.whole and nulls > 0):
        if not waited[0]:
            _host_wait(self)
            waited[0] = True
        if _host_accessible(self.desc.dl.device.device_type):
            nulls = _zero_bits(s.bits, s.start, s.count)
        else:
            nulls = _device_zero_bits(self.desc.dl.device.device_id, <uintptr_t>s.bits, s.start,
                                      s.count)
        if nulls == 0:
            return 0
    raise Refusal(f"{protocol}: {_at(depth)} has {nulls} null(s) among its {s.count} "
                  f"values; {_FILL_NULL}")


cdef int64_t _device_zero_bits(int32_t device_id, uintptr_t bits, int64_t start,
                               int64_t count) except -1:
    """_zero_bits of a bitmap in CUDA device memory, whose bytes the driver copies to the
    host a chunk at a time (the CPU never reads device memory: docs/spec.md §13)."""
    cdef int64_t zeros = 0, first = start >> 3, bit = start & 7, take
    cdef size_t nbytes, room = <size_t>min((bit + count + 7) >> 3, ARROW_BITMAP_CHUNK)
    cdef uint8_t *buf = <uint8_t *>malloc(room)
    if buf == NULL:
        raise MemoryError()
    try:
        while count > 0:
            nbytes = <size_t>min((bit + count + 7) >> 3, <int64_t>room)
            _cu_copy(device_id, buf, <const void *>(bits + <uintptr_t>first), nbytes, False)
            take = min(count, <int64_t>nbytes * 8 - bit)
            zeros += _zero_bits(buf, bit, take)
            count -= take
            first += <int64_t>nbytes
            bit = 0
    finally:
        free(buf)
    return zeros


cdef inline void _note_scan(_NullScan *s, const ArrowArray *a, int64_t start, int64_t count,
                            bint whole) noexcept:
    s.bits = <const uint8_t *>a.buffers[0]
    s.nulls = a.null_count
    s.start = start
    s.count = count
    s.whole = whole


cdef int _arrow_read_array(DLPackObject self, ArrowArray *top, _ArrowType *t, object tensor,
                           str protocol) except -1:
    """Walk from the column through its fixed-size lists to the values, applying each level's
    offset and checking each level's lengths; then the values' bounds; then each level's
    nulls (no bitmap is read for a layout that is refused: a length whose values overflow 64
    bits says nothing of its bitmap); then shape and strides."""
    cdef _NullScan on_stack[ARROW_SCANS_ON_STACK]
    cdef _NullScan *scans = on_stack
    cdef int nlevels = t.nlists + (1 if t.unwrap else 0)
    if nlevels + 1 > ARROW_SCANS_ON_STACK:
        scans = <_NullScan *>malloc((nlevels + 1) * sizeof(_NullScan))
        if scans == NULL:
            raise MemoryError()
    try:
        return _arrow_walk(self, top, t, tensor, protocol, scans)
    finally:
        if scans != on_stack:
            free(scans)


cdef int _arrow_walk(DLPackObject self, ArrowArray *top, _ArrowType *t, object tensor,
                     str protocol, _NullScan *scans) except -1:
    cdef ArrowArray node = top[0]
    cdef ArrowArray *child
    cdef int64_t start = node.offset, count = node.length, length = node.length
    cdef int64_t n, lstart, lcount, end, isz = t.dtype.bits // 8, offset, bound
    cdef int level, depth = 0, nlevels = t.nlists + (1 if t.unwrap else 0)
    cdef bint whole = True, waited = False
    cdef uintptr_t data
    for level in range(nlevels):
        _arrow_node(&node, 1, 1, protocol, depth)
        _note_scan(&scans[depth], &node, start, count, whole)
        n = 1 if (t.unwrap and level == 0) else t.sizes[level - (1 if t.unwrap else 0)]
        child = node.children[0]
        node = child[0]                 # copied once, before any of it is read
        depth += 1
        if node.release == NULL:
            raise Refusal(f"{protocol}: {_at(depth)} is released (release is NULL)")
        if (_mul_ovf(start, n, &lstart) or _mul_ovf(count, n, &lcount)
                or _add_ovf(lstart, lcount, &end) or end > node.length):
            raise Refusal(f"{protocol}: {_at(depth)} has length {node.length}, fewer than "
                          f"the values its parent's offset and length need ({start} + "
                          f"{count} rows of {n})")
        if _add_ovf(node.offset, lstart, &start):
            raise Refusal(f"{protocol}: field 'offset' = {node.offset} of {_at(depth)} "
                          "overflows 64 bits")
        count = lcount
        whole = lstart == 0 and lcount == node.length
    _arrow_node(&node, 2, 0, protocol, depth)
    _note_scan(&scans[depth], &node, start, count, whole)
    data = <uintptr_t>node.buffers[1]
    if _mul_ovf(start, isz, &offset) or _mul_ovf(node.offset + node.length, isz, &bound):
        raise Refusal(f"{protocol}: the values of {_at(depth)} (offset {node.offset}, "
                      f"length {node.length}) span more bytes than 64 bits can count")
    if count and data == 0:
        raise Refusal(f"{protocol}: buffers[1] (the values) of {_at(depth)} is NULL for "
                      f"{count} values")
    if data % isz:
        raise Refusal(f"{protocol}: buffers[1] (the values) of {_at(depth)} at {data:#x} "
                      f"is not aligned to its {isz}-byte type; DLPack consumers need "
                      "aligned data")
    for level in range(depth + 1):
        _arrow_nulls(self, &scans[level], protocol, level, &waited)
    self.desc.dl.data = <void *>(data + <uintptr_t>offset) if count else <void *>data
    self.desc.dl.dtype = t.dtype
    self.desc.flags = FLAG_READ_ONLY
    if tensor is not None:
        _arrow_tensor_dims(self, tensor, length, t.sizes[0], protocol)
        try:
            self._validate(protocol, STRIDES_ELEMENTS, offset, bound)
        except BufferError as e:
            raise Refusal(f"{e}: the arrow.fixed_shape_tensor's permutation, applied as "
                          "PyArrow applies it (which refuses this one too), overruns "
                          "its rows") from None
    else:
        _arrow_dims(self, length, t, protocol)
        self._validate(protocol, STRIDES_C, offset, bound)
    return 0


cdef int _arrow_dims(DLPackObject self, int64_t length, _ArrowType *t, str protocol) except -1:
    """(length, n1, n2, …): the rows, then each fixed-size list's size."""
    cdef int i
    self._alloc_dims(1 + t.nlists, protocol)
    self.desc.dl.shape[0] = length
    for i in range(t.nlists):
        self.desc.dl.shape[i + 1] = t.sizes[i]
    return 0


cdef int _arrow_tensor_dims(DLPackObject self, object meta, int64_t length, int64_t list_size,
                            str protocol) except -1:
    """Shape and element strides of a fixed_shape_tensor column, as PyArrow's
    FixedShapeTensorArray.to_numpy_ndarray() and __dlpack__ give them: the metadata's shape is
    the physical row-major one, the permutation orders the dimensions (PyArrow's
    FixedShapeTensorArray::ToTensor with its ComputeStrides, counted in elements)."""
    cdef int i, k
    shape, perm = _arrow_tensor_meta(meta, list_size, protocol)
    k = len(shape)
    full = [0] + ([p + 1 for p in perm] if perm is not None else list(range(1, k + 1)))
    physical = [length] + shape
    out = [physical[p] for p in full]
    remaining = 0
    if out[0] > 0:
        remaining = 1
        for p in full[1:]:
            remaining *= out[p]
    if remaining == 0:
        steps = [1] * (k + 1)
    else:
        steps = [remaining]
        for p in full[1:]:
            remaining //= out[p]
            steps.append(remaining)
    self._alloc_dims(k + 1, protocol)
    for i in range(k + 1):
        self.desc.dl.shape[i] = out[i]
        self.desc.dl.strides[i] = steps[full[i]]
    return 0


cdef int _arrow_device(DLPackObject self, ArrowDeviceArray *d, str protocol) except -1:
    """The DLPack device of an ArrowDeviceArray; a CUDA sync_event (a CUevent *) is copied
    once, to be waited on at each export and before host reads (docs/spec.md §13)."""
    cdef int32_t kind = d.device_type
    cdef int64_t did = d.device_id
    if kind == ARROW_DEVICE_CPU:
        if did != -1 and did != 0:
            raise Refusal(f"{protocol}: field 'device_id' = {did} for ARROW_DEVICE_CPU "
                          "(-1 or 0 expected)")
        self.desc.dl.device.device_type = kDLCPU
        self.desc.dl.device.device_id = 0
        return 0
    if kind != ARROW_DEVICE_CUDA and kind != ARROW_DEVICE_CUDA_HOST and (
            kind != ARROW_DEVICE_CUDA_MANAGED):
        name = _ARROW_DEVICE_NAMES.get(kind, f"device type {kind}")
        raise Refusal(f"{protocol}: field 'device_type' = {kind} ({name}): pydlpack "
                      "exchanges CPU and CUDA Arrow data only; copy it to the host or a "
                      "CUDA device first")
    if kind == ARROW_DEVICE_CUDA_HOST and did == -1:
        did = 0                         # pinned host memory belongs to no device
    if did < 0 or did >= MAX_CUDA_DEVICES:
        raise Refusal(f"{protocol}: field 'device_id' = {did} is not a CUDA device "
                      f"ordinal (0 to {MAX_CUDA_DEVICES - 1})")
    self.desc.dl.device.device_type = kind   # ARROW_DEVICE_CUDA* equal kDLCUDA* by design
    self.desc.dl.device.device_id = <int32_t>did
    if d.sync_event != NULL:
        _sync_by_event(self, (<void **>d.sync_event)[0])
    return 0


cdef object _arrow_schema_from(ArrowSchema *s, _ArrowType *t, str protocol):
    """Move a producer's schema out, read it, and release it at once."""
    cdef ArrowSchema local
    if s.release == NULL:
        raise Refusal(f"{protocol}: the ArrowSchema is released (release is NULL)")
    local = s[0]
    s.release = NULL
    try:
        return _arrow_read_schema(&local, t, protocol, True)
    finally:
        _foreign(FOREIGN_SCHEMA, &local)


cdef DLPackObject _from_arrow_array(object obj, object pair, bint device, str protocol):
    """An (ArrowSchema, ArrowArray or ArrowDeviceArray) capsule pair."""
    cdef ArrowSchema *s
    cdef void *a
    cdef _ArrowType t
    cdef DLPackObject r
    cdef _ArrowImport held
    if type(pair) is not tuple or len(<tuple>pair) != 2:
        raise Refusal(f"{protocol} returned a {type(pair).__name__}, not a (schema, array) "
                      "pair of capsules")
    s = <ArrowSchema *>_arrow_capsule((<tuple>pair)[0], b"arrow_schema", protocol, "schema")
    a = _arrow_capsule((<tuple>pair)[1], b"arrow_device_array" if device else b"arrow_array",
                       protocol, "array")
    r = _new_object()
    _own_base(r, obj)
    held = _ArrowImport.__new__(_ArrowImport)
    _keep_alive(r, held)
    if device:
        if (<ArrowDeviceArray *>a).array.release == NULL:
            raise Refusal(f"{protocol}: the ArrowDeviceArray is released (release is NULL)")
        held.device = (<ArrowDeviceArray *>a)[0]
        (<ArrowDeviceArray *>a).array.release = NULL
    else:
        if (<ArrowArray *>a).release == NULL:
            raise Refusal(f"{protocol}: the ArrowArray is released (release is NULL)")
        held.device.array = (<ArrowArray *>a)[0]
        (<ArrowArray *>a).release = NULL
        held.device.device_type = ARROW_DEVICE_CPU
        held.device.device_id = -1
    t.sizes = t.small
    try:
        tensor = _arrow_schema_from(s, &t, protocol)
        _arrow_device(r, &held.device, protocol)
        _arrow_read_array(r, &held.device.array, &t, tensor, protocol)
    finally:
        _arrow_type_free(&t)
    return r


cdef str _arrow_stream_error(ArrowArrayStream *st, int rc, str protocol, str call):
    cdef const char *msg = NULL
    if st.get_last_error != NULL:
        msg = st.get_last_error(st)
    detail = _c_text(msg, 1000) if msg != NULL else f"error code {rc}"
    return f"{protocol}: the stream's {call} failed: {detail}"


cdef DLPackObject _from_arrow_stream(object obj, object capsule, str protocol):
    """An ArrowArrayStream of exactly one non-empty chunk (or none: an empty tensor)."""
    cdef ArrowArrayStream *st = <ArrowArrayStream *>_arrow_capsule(
        capsule, b"arrow_array_stream", protocol, "stream")
    cdef ArrowSchema schema
    cdef ArrowArray chunk
    cdef _ArrowType t
    cdef int rc
    cdef DLPackObject r
    cdef _ArrowImport held
    cdef ArrowArrayStream *ours
    if st.release == NULL:
        raise Refusal(f"{protocol}: the ArrowArrayStream is released (release is NULL)")
    r = _new_object()
    _own_base(r, obj)
    held = _ArrowImport.__new__(_ArrowImport)
    _keep_alive(r, held)
    held.stream = st[0]
    st.release = NULL
    ours = &held.stream
    if ours.get_schema == NULL or ours.get_next == NULL:
        raise Refusal(f"{protocol}: the stream's get_schema or get_next is NULL")
    memset(&schema, 0, sizeof(schema))
    rc = ours.get_schema(ours, &schema)
    if rc != 0:
        raise Refusal(_arrow_stream_error(ours, rc, protocol, "get_schema"))
    t.sizes = t.small
    try:
        tensor = _arrow_schema_from(&schema, &t, protocol)
        while True:
            memset(&chunk, 0, sizeof(chunk))
            rc = ours.get_next(ours, &chunk)
            if rc != 0:
                raise Refusal(_arrow_stream_error(ours, rc, protocol, "get_next"))
            if chunk.release == NULL:
                break
            if chunk.length == 0:
                _foreign(FOREIGN_ARRAY, &chunk)
                PyErr_CheckSignals()        # a stream that never ends stays interruptible
                continue
            if held.device.array.release != NULL or chunk.length < 0:
                first = held.device.array.length
                second = chunk.length
                _foreign(FOREIGN_ARRAY, &chunk)
                if second < 0:
                    raise Refusal(f"{protocol}: a chunk has field 'length' = {second}")
                raise Refusal(f"{protocol}: the stream has more than one non-empty chunk (the "
                              f"first two have {first} and {second} rows); a tensor views one "
                              "buffer: combine them first (chunked.combine_chunks(), "
                              "table.combine_chunks(); Polars: series.rechunk())")
            held.device.array = chunk
        r.desc.dl.device.device_type = kDLCPU
        if held.device.array.release != NULL:
            _arrow_read_array(r, &held.device.array, &t, tensor, protocol)
            return r
        r.desc.dl.dtype = t.dtype           # no chunks: an empty tensor of the column's type
        r.desc.flags = FLAG_READ_ONLY
        if tensor is not None:
            _arrow_tensor_dims(r, tensor, 0, t.sizes[0], protocol)
            r._validate(protocol, STRIDES_ELEMENTS, 0, -1)
        else:
            _arrow_dims(r, 0, &t, protocol)
            r._validate(protocol, STRIDES_C, 0, -1)
        return r
    finally:
        _arrow_type_free(&t)


cdef inline bint _type_has(type t, str name) noexcept:
    """Whether t's MRO defines name, other than as None ("not supported", as for __hash__):
    Python's own lookup of special methods, which runs no __getattr__ (Polars' instance and
    metaclass __getattr__ cost 5 to 16 µs a miss)."""
    cdef PyObject *found = _PyType_Lookup(t, name)
    return found != NULL and found != <PyObject *>None


cdef enum:
    HAS_DEVICE_ARRAY = 1
    HAS_ARRAY = 2
    HAS_STREAM = 4


cdef int _arrow_type(type t) noexcept:
    """Which methods of the Arrow PyCapsule interface that asdlpack reads t has (HAS_*)."""
    return ((HAS_DEVICE_ARRAY if _type_has(t, "__arrow_c_device_array__") else 0)
            | (HAS_ARRAY if _type_has(t, "__arrow_c_array__") else 0)
            | (HAS_STREAM if _type_has(t, "__arrow_c_stream__") else 0))


cdef DLPackObject _from_arrow(object obj, int methods):
    """obj through the first Arrow method it has, in the order of docs/spec.md §3. A method
    that raises hands over to the next; the reader's own refusal is final."""
    cdef PyObject *result
    first = None
    if methods & HAS_DEVICE_ARRAY:
        try:
            result = _held(obj.__arrow_c_device_array__())
        except MemoryError:
            raise
        except Exception as e:
            first = _as_refusal("__arrow_c_device_array__", e)
        else:
            return _read_arrow_result(obj, result, ARROW_DEVICE_ARRAY)
    if methods & HAS_ARRAY:
        try:
            result = _held(obj.__arrow_c_array__())
        except MemoryError:
            raise
        except Exception as e:
            first = first or _as_refusal("__arrow_c_array__", e)
        else:
            return _read_arrow_result(obj, result, ARROW_ARRAY)
    try:
        result = _held(obj.__arrow_c_stream__())
    except MemoryError:
        raise
    except Exception as e:
        raise first or _as_refusal("__arrow_c_stream__", e)
    return _read_arrow_result(obj, result, ARROW_STREAM)


cdef DLPackObject _read_arrow_result(object obj, PyObject *result, ArrowKind kind):
    """Read what an Arrow method returned (a reference _held took), then drop it through
    _foreign: a producer's capsule destructor may run Python code, and must not run while a
    refusal is set (docs/spec.md §7)."""
    try:
        if kind == ARROW_STREAM:
            return _from_arrow_stream(obj, <object>result, "__arrow_c_stream__")
        if kind == ARROW_DEVICE_ARRAY:
            return _from_arrow_array(obj, <object>result, True, "__arrow_c_device_array__")
        return _from_arrow_array(obj, <object>result, False, "__arrow_c_array__")
    finally:
        _foreign(FOREIGN_REF, result)
