# Reader: the Python buffer protocol (PEP 3118).


cdef int _format_dtype(const char *fmt, Py_ssize_t itemsize, DLDataType *out) except -1:
    """DLPack dtype of a single-item PEP 3118 format; the view's itemsize is the width.

    The itemsize must be the format's native or standard size: ctypes writes '<l' for an
    8-byte long (the prefix there gives only byte order), so either is accepted; any other
    size is an item that is not this format's: ctypes gives a union, and (before Python 3.12)
    a packed structure, as 'B' items of the whole struct's size."""
    cdef const char *p = fmt
    cdef char order = b'@'
    cdef unsigned char c
    cdef unsigned char kind = 0
    cdef bint cplx = False
    if p == NULL:
        p = fmt = b"B"
    if p[0] == b'@' or p[0] == b'=' or p[0] == b'<' or p[0] == b'>' or p[0] == b'!':
        order = p[0]
        p += 1
    c = p[0]
    if c == b'Z':
        cplx = True
        c = p[1]
        p += 1
    if c != 0 and c < 128 and p[1] == 0:
        kind = _FORMAT_KINDS[cplx][c]
    if kind == 0:
        raise Refusal(_format_refusal(fmt))
    if itemsize != _FORMAT_SIZES[cplx][c][0] and itemsize != _FORMAT_SIZES[cplx][c][1]:
        raise Refusal(f"buffer protocol: field 'itemsize' = {itemsize} does not fit format "
                      f"{(<bytes>fmt).decode('latin-1')!r}, whose items are "
                      f"{_FORMAT_SIZES[cplx][c][order != b'@']} bytes: the items are structs "
                      "(a ctypes union or packed structure), which DLPack cannot carry; "
                      "take the raw bytes with asdlpack(memoryview(obj).cast('B'))")
    if itemsize > 1 and not _native_order(order):
        raise Refusal(f"buffer protocol: format {(<bytes>fmt).decode('latin-1')!r} is "
                      "non-native byte order; byte-swap the data first")
    _kind_dtype(kind, itemsize, out)        # a size in _FORMAT_SIZES is a width of its kind
    return 0


cdef str _format_refusal(const char *fmt):
    f = (<bytes>fmt).decode("latin-1")
    body = f.lstrip("@=<>!")
    if body in ("g", "Zg"):
        why = "long double, which DLPack cannot carry"
    elif body == "P":
        why = "a pointer type"
    elif body.startswith("T{") or ":" in body:
        why = "a struct"
    elif "x" in body:
        why = "padding bytes"
    elif body in ("s", "p", "u", "w", "O"):
        why = "a string or object type"
    elif len(body) > 1 and not body.startswith("Z"):
        why = "a multi-item or unknown format"
    else:
        why = "not a numeric format"
    return (f"buffer protocol: format {f!r} is {why}; supported: ? b B h H i I l L q Q n N "
            "e f d Zf Zd c, optionally after @ = < > !")


cdef DLPackObject _from_bytes(object obj):
    """bytes are immutable and cannot resize: holding the object is enough, no Py_buffer."""
    cdef DLPackObject r = _new_object()
    r.desc.dl.ndim = 1
    r.desc.dl.strides = r.desc.dl.shape + 1
    r.desc.dl.shape[0] = PyBytes_GET_SIZE(obj)
    r.desc.dl.strides[0] = 1
    r.desc.dl.data = PyBytes_AS_STRING(obj)
    r.desc.dl.dtype.code = kDLUInt
    r.desc.dl.dtype.bits = 8
    r.desc.dl.dtype.lanes = 1
    r.desc.dl.device.device_type = kDLCPU
    r.desc.flags = FLAG_READ_ONLY
    # what _validate gives 1-D uint8, every field named
    r.desc.layout = Layout(count=r.desc.dl.shape[0], nbytes=r.desc.dl.shape[0], itemsize=1,
                           c_contig=True, f_contig=True)
    _own_base(r, obj)
    _publish(r)
    return r


cdef DLPackObject _from_buffer(object obj):
    """Hold obj's buffer for the life of the view (a bytearray cannot resize meanwhile)."""
    cdef DLPackObject r = _new_object()
    # suboffsets too, to name them
    _hold_buffer(r, obj, PyBUF_FULL_RO, "buffer protocol", None, "")
    _read_buffer(r, obj)
    return r


cdef int _read_buffer(DLPackObject self, object obj) except -1:
    cdef const Py_buffer *v = <const Py_buffer *>&self._view
    cdef int i
    _format_dtype(v.format, v.itemsize, &self.desc.dl.dtype)
    _check_dims("buffer protocol", "ndim", v.ndim, v.shape != NULL)
    if v.suboffsets != NULL:
        for i in range(v.ndim):
            if v.suboffsets[i] >= 0:
                raise Refusal("buffer protocol: field 'suboffsets' is set; indirect "
                              "(PIL-style) buffers cannot be described by DLPack")
    self._alloc_dims(v.ndim, "buffer protocol")
    for i in range(v.ndim):
        self.desc.dl.shape[i] = v.shape[i]
        if v.strides != NULL:
            self.desc.dl.strides[i] = v.strides[i]
    self.desc.dl.data = v.buf
    self.desc.dl.device.device_type = kDLCPU
    self.desc.dl.device.device_id = 0
    self.desc.flags = FLAG_READ_ONLY if v.readonly else 0
    _own_base(self, obj)
    self._validate("buffer protocol", STRIDES_C if v.strides == NULL else STRIDES_BYTES, 0, -1)
    if v.len != self.desc.layout.nbytes:
        raise Refusal(f"buffer protocol: field 'len' = {v.len} disagrees with 'itemsize' "
                      f"{v.itemsize} × the {self.desc.layout.count} elements of 'shape' = "
                      f"{self.shape}")
    return 0
