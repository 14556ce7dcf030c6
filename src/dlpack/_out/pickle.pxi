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
    cdef int64_t lo = 0, hi = self.lay.nbytes
    cdef int64_t c_strides[MAX_NDIM]
    cdef int i
    cdef bint readonly = self._flags & FLAG_READ_ONLY
    cdef _Span span
    if not _host_accessible(self.dl.device.device_type):
        raise Refusal(
            f"pickle: the data is on {_device_name(self.dl.device)}, which another process "
            "cannot read; pickle a host copy instead: "
            f"asdlpack(dl.__dlpack__(dl_device=({kDLCPU}, 0), copy=True)), or move it to the "
            "host with its producer (e.g. tensor.cpu())")
    _host_wait(self)
    strides = self.strides
    if self.lay.count and not self.lay.c_contig:
        _span(self, &lo, &hi)              # packed sub-byte arrays are always C-contiguous
    span = _Span.__new__(_Span)
    span.readonly = readonly
    if (hi - lo) - self.lay.nbytes > self.lay.nbytes // 2:  # both < 2**63; broadcasts: < 0
        # a C-contiguous copy (nbytes < 2**62 here), on a 256-byte boundary like every copy
        span.copy = _alloc_copy(<size_t>self.lay.nbytes + DATA_ALIGN - 1)
        if span.copy == NULL:
            raise MemoryError(f"pickle: cannot allocate {self.lay.nbytes} bytes for a copy")
        span.ptr = <char *>span.copy + (-<uintptr_t>span.copy & (DATA_ALIGN - 1))
        _gather(span.ptr, <const char *>self.dl.data, self)
        lo, hi = 0, self.lay.nbytes
        _c_strides(self.dl.ndim, self.dl.shape, c_strides)
        strides = tuple([c_strides[i] for i in range(self.dl.ndim)])
    else:
        span.ptr = <char *>(<uintptr_t>self.dl.data + <uintptr_t>lo)    # NULL when empty
        span.owner = self
    span.len = hi - lo
    data = span
    if protocol >= 5:
        data = _pickle.PickleBuffer(data)
    elif readonly:
        data = bytes(data)
    else:
        data = bytearray(data)              # writable arrives writable, as with protocol 5
    t = self.dl.dtype
    return _rebuild, (data, t.code, t.bits, t.lanes, self.shape, strides, -lo,
                      self._flags & _PICKLED_FLAGS)


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
    if type(shape) is not tuple or type(strides) is not tuple or len(shape) != len(strides):
        raise Refusal(f"pickle: fields 'shape' = {shape!r:.80} and 'strides' = "
                      f"{strides!r:.80} are not tuples of one length; the pickle is "
                      "corrupt or forged")
    if _field(flags, "flags", 0, INT64_MAX) & ~_PICKLED_FLAGS:
        raise Refusal(f"pickle: field 'flags' = {flags} has bits other than READ_ONLY and "
                      "IS_SUBBYTE_TYPE_PADDED; the pickle is corrupt or forged")
    r._flags = flags
    r.dl.dtype.code = <uint8_t>_field(code, "dtype code", 0, 255)
    r.dl.dtype.bits = <uint8_t>_field(bits, "dtype bits", 0, 255)
    r.dl.dtype.lanes = <uint16_t>_field(lanes, "dtype lanes", 0, 65535)
    n = len(shape)
    r._alloc_dims(n, "pickle")
    for i in range(n):
        r.dl.shape[i] = _field(shape[i], "shape", 0, INT64_MAX)
        r.dl.strides[i] = _field(strides[i], "strides", -INT64_MAX - 1, INT64_MAX)
    r._hold_buffer(data, PyBUF_SIMPLE, "pickle", "data", "; the pickle is corrupt or forged")
    at = _field(offset, "offset", 0, r._view.len)
    if r._view.readonly:
        r._flags |= FLAG_READ_ONLY
    r.dl.data = <void *>(<uintptr_t>r._view.buf + <uintptr_t>at)  # buf may be NULL
    r.dl.device.device_type = kDLCPU
    r.dl.device.device_id = 0
    r._validate("pickle", STRIDES_ELEMENTS, at, r._view.len)
    r._base = data
    return r
