# Consumer side: pickle (docs/spec.md §11). Protocol >= 5 hands the elements to the pickler as one
# PickleBuffer (PEP 574: out-of-band when the pickler has a buffer_callback, so Dask, Ray and
# shared-memory carriers move them without a copy into the stream); protocol < 5 copies them
# in-band, as does multiprocessing's own pickler (it takes no buffer_callback).
# _rebuild is the unpickler's side: it trusts nothing in the stream and validates it all with
# the same _validate every reader uses.

# A strided array is sent as the span its elements reach (zero-copy, strides kept) unless the
# gaps in that span are more than half its element bytes; then as a C-contiguous copy. Every
# carrier copies the buffer at least once (into the stream, a socket, a store), and a gather into
# fresh huge pages costs less than copying the gaps: a[:, ::2] of 256 MiB pickles in-band in half
# NumPy's time as a copy, in 0.75x as its span (1.3x at 32 MiB).

cdef uint64_t _PICKLED_FLAGS = FLAG_READ_ONLY | FLAG_SUBBYTE_PADDED


@cython.final
@cython.auto_pickle(False)    # internal: never pickled (DLPackObject has its own reduce)
cdef class _Span:
    """A flat byte buffer over ``len`` bytes at ``ptr`` that keeps their owner alive.

    PickleBuffer needs an object with the buffer protocol; the array's own buffer export has no
    format for bfloat16, float8 or packed int4, and is not contiguous when strided, so the
    pickler gets the raw bytes of the span instead.
    """
    cdef char *ptr
    cdef Py_ssize_t len
    cdef Py_ssize_t one                 # the stride: 1 byte (the view may be copied by value)
    cdef bint readonly
    cdef object owner
    cdef void *copy                     # or the C-contiguous copy it owns (_alloc_copy's)

    def __dealloc__(self):
        free(self.copy)

    def __getbuffer__(self, Py_buffer *view, int flags):
        if flags & PyBUF_WRITABLE and self.readonly:
            raise Refusal("pickle: the data is read-only")
        view.buf = self.ptr
        view.obj = self
        view.len = self.len
        view.itemsize = 1
        view.readonly = self.readonly
        view.ndim = 1
        view.format = <char *>b"B" if flags & PyBUF_FORMAT else NULL
        view.shape = &self.len if flags & PyBUF_ND else NULL
        self.one = 1
        view.strides = &self.one if flags & PyBUF_STRIDES == PyBUF_STRIDES else NULL
        view.suboffsets = NULL
        view.internal = NULL


cdef object _reduce(DLPackObject self, int protocol):
    """``__reduce_ex__``: (_rebuild, (data, code, bits, lanes, shape, strides, offset, flags)).

    ``data`` holds the bytes from the lowest to one past the highest byte an element occupies;
    the first element lies ``offset`` bytes into it (> 0 for negative strides).
    """
    cdef int64_t lo = 0, hi = self.desc.layout.nbytes
    cdef int64_t c_strides[MAX_NDIM]
    cdef int i
    cdef bint readonly = self.desc.flags & FLAG_READ_ONLY
    cdef _Span span
    if not _host_accessible(self.desc.dl.device.device_type):
        raise Refusal(
            f"pickle: the data is on {_device_name(self.desc.dl.device)}, which another process "
            "cannot read; pickle a host copy instead: "
            f"asdlpack(dl.__dlpack__(dl_device=({kDLCPU}, 0), copy=True)), or move it to the "
            "host with its producer (e.g. tensor.cpu())")
    _host_wait(self)
    strides = self.strides
    if self.desc.layout.count and not self.desc.layout.c_contig:
        _span(self, &lo, &hi)              # packed sub-byte arrays are always C-contiguous
    span = _Span.__new__(_Span)
    span.readonly = readonly
    # the span beyond nbytes (both < 2**63; broadcasts: < 0)
    if (hi - lo) - self.desc.layout.nbytes > self.desc.layout.nbytes // 2:
        # a C-contiguous copy (nbytes < 2**62 here), on a 256-byte boundary like every copy
        span.copy = _alloc_copy(<size_t>self.desc.layout.nbytes + DATA_ALIGN - 1)
        if span.copy == NULL:
            raise MemoryError(f"pickle: cannot allocate {self.desc.layout.nbytes} bytes for a copy")
        span.ptr = <char *>span.copy + (-<uintptr_t>span.copy & (DATA_ALIGN - 1))
        _gather(span.ptr, <const char *>self.desc.dl.data, self)
        lo, hi = 0, self.desc.layout.nbytes
        _c_strides(self.desc.dl.ndim, self.desc.dl.shape, c_strides)
        strides = tuple([c_strides[i] for i in range(self.desc.dl.ndim)])
    else:
        span.ptr = <char *>(<uintptr_t>self.desc.dl.data + <uintptr_t>lo)    # NULL when empty
        span.owner = self
    span.len = hi - lo
    data = span
    if protocol >= 5:
        data = _pickle.PickleBuffer(data)
    elif readonly:
        data = bytes(data)
    else:
        data = bytearray(data)              # writable arrives writable, as with protocol 5
    t = self.desc.dl.dtype
    return _rebuild, (data, t.code, t.bits, t.lanes, self.shape, strides, -lo,
                      self.desc.flags & _PICKLED_FLAGS)


cdef int64_t _field(object value, str name, int64_t low, int64_t high) except? -1:
    """A metadata integer from the stream: an int within [low, high], else BufferError."""
    if type(value) is not int or not low <= value <= high:
        raise Refusal(f"pickle: field '{name}' = {value!r:.80} is not an int in "
                      f"[{low}, {high}]; the pickle is corrupt or forged")
    return value


def _rebuild(data, code, bits, lanes, shape, strides, offset, flags):
    """Unpickle a DLPackObject over ``data`` (the received buffer; it is not copied).

    Every field is checked before use: a corrupt or forged pickle gives BufferError, and
    the elements must lie inside ``data``.
    """
    cdef DLPackObject r = _new_object()
    cdef Py_ssize_t i, n
    cdef int64_t at
    cdef int64_t small[2 * INLINE_DIMS]
    cdef DLTensor t
    cdef uint64_t bits_set
    if type(shape) is not tuple or type(strides) is not tuple or len(shape) != len(strides):
        raise Refusal(f"pickle: fields 'shape' = {shape!r:.80} and 'strides' = "
                      f"{strides!r:.80} are not tuples of one length; the pickle is "
                      "corrupt or forged")
    bits_set = _field(flags, "flags", 0, INT64_MAX)
    if bits_set & ~_PICKLED_FLAGS:
        raise Refusal(f"pickle: field 'flags' = {flags} has bits other than READ_ONLY and "
                      "IS_SUBBYTE_TYPE_PADDED; the pickle is corrupt or forged")
    t.dtype.code = <uint8_t>_field(code, "dtype code", 0, 255)
    t.dtype.bits = <uint8_t>_field(bits, "dtype bits", 0, 255)
    t.dtype.lanes = <uint16_t>_field(lanes, "dtype lanes", 0, 65535)
    n = len(shape)
    _check_dims("pickle", "ndim", n, True)
    t.ndim = <int32_t>n
    t.shape = small
    if n > INLINE_DIMS:
        t.shape = <int64_t *>malloc(2 * n * sizeof(int64_t))
        if t.shape == NULL:
            raise MemoryError()
    t.strides = t.shape + n
    try:
        for i in range(n):
            t.shape[i] = _field(shape[i], "shape", 0, INT64_MAX)
            t.strides[i] = _field(strides[i], "strides", -INT64_MAX - 1, INT64_MAX)
        _hold_buffer(r, data, PyBUF_SIMPLE, "pickle", "data",
                     "; the pickle is corrupt or forged")
        at = _field(offset, "offset", 0, r._view.len)
        if r._view.readonly:
            bits_set |= FLAG_READ_ONLY
        t.data = <void *>(<uintptr_t>r._view.buf + <uintptr_t>at)  # buf may be NULL
        t.byte_offset = 0
        t.device.device_type = kDLCPU
        t.device.device_id = 0
        r._describe_tensor(&t, bits_set, "pickle", at, r._view.len)
    finally:
        if t.shape != small:
            free(t.shape)
    _own_base(r, data)
    return r
