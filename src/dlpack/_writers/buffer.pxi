# Writer: the buffer protocol (memoryview, array.array, file.write).

cdef extern from "Python.h":
    enum: PyBUF_MAX_NDIM                # 64: the most dimensions a Py_buffer may have

cdef char _BUFFER_FORMATS[kDLBool + 1][17][3]   # [code][item bytes]: the format written


cdef int _fill_buffer_formats() except -1:
    """For each DLPack type, the first of these format characters (native, no prefix: what
    NumPy and memoryview read) whose items are of that type in _base's tables; never l L n N,
    whose sizes vary by platform, nor Ze (complex32), which no consumer reads."""
    cdef int z, code, size
    cdef unsigned char c, kind
    memset(_BUFFER_FORMATS, 0, sizeof(_BUFFER_FORMATS))
    for fmt in [b"?", b"b", b"B", b"h", b"H", b"i", b"I", b"q", b"Q", b"e", b"f", b"d",
                b"Zf", b"Zd"]:
        z = len(fmt) == 2
        c = fmt[-1]
        kind = _FORMAT_KINDS[z][c]
        size = _FORMAT_SIZES[z][c][0]
        code = _KIND_CODES[kind]
        if kind and size <= 16 and code <= kDLBool and _BUFFER_FORMATS[code][size][0] == 0:
            memcpy(_BUFFER_FORMATS[code][size], <char *>fmt, len(fmt))
    return 0


_fill_buffer_formats()


cdef const char *_buffer_format(DLPackObject self) except NULL:
    cdef DLDataType t = self.desc.dl.dtype
    if t.lanes == 1 and t.code <= kDLBool and t.bits % 8 == 0 and t.bits <= 128:
        if _BUFFER_FORMATS[t.code][t.bits // 8][0] != 0:
            return _BUFFER_FORMATS[t.code][t.bits // 8]
    if t.bits % 8 or t.lanes != 1:
        raise Refusal(f"buffer protocol: dtype {self.dtype.name} has no PEP 3118 format (vector "
                      f"or sub-byte type); {_PACKED_WAY_OUT}")
    raise Refusal(f"buffer protocol: dtype {self.dtype.name} has no PEP 3118 format; "
                  "use __dlpack__ or __array_interface__ (NumPy views it as raw bytes)")


cdef int _fill_buffer(DLPackObject self, Py_buffer *view, int flags) except -1:
    cdef int i, n = self.desc.dl.ndim
    cdef Py_ssize_t itemsize = self.desc.layout.itemsize
    cdef int64_t stride
    if not _host_accessible(self.desc.dl.device.device_type):
        raise Refusal(f"buffer protocol: the data is on {_device_name(self.desc.dl.device)}, "
                      "not in CPU memory; use __dlpack__ or __cuda_array_interface__")
    if n > PyBUF_MAX_NDIM:              # exporters must respect it (CPython's Py_buffer docs)
        raise Refusal(f"buffer protocol: {n} dimensions; it carries at most "
                      f"{PyBUF_MAX_NDIM}; use __dlpack__ or __array_interface__")
    cdef const char *fmt = _buffer_format(self)
    _host_wait(self)
    if flags & PyBUF_WRITABLE and self.desc.flags & FLAG_READ_ONLY:
        raise Refusal("buffer protocol: a writable buffer was requested, but the data "
                      "is read-only")
    if (flags & PyBUF_STRIDES) != PyBUF_STRIDES and not self.desc.layout.c_contig:
        raise Refusal("buffer protocol: the consumer needs C-contiguous data without "
                      f"strides, but strides are {self.strides} elements")
    if ((flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS and not self.desc.layout.c_contig
            or (flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS and not self.desc.layout.f_contig
            or (flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS
            and not (self.desc.layout.c_contig or self.desc.layout.f_contig)):
        raise Refusal("buffer protocol: the consumer requested contiguous data, but "
                      f"strides are {self.strides} elements")
    if self._pydims == NULL and n > 0:
        self._pydims = <Py_ssize_t *>malloc(2 * n * sizeof(Py_ssize_t))
        if self._pydims == NULL:
            raise MemoryError()
        for i in range(n):
            self._pydims[i] = self.desc.dl.shape[i]
            # the byte stride; only an empty array's normalised (C) stride can overflow
            # (shape (0, 2**62) of complex128): it is never applied, so 0 stands for it
            if _mul_ovf(self.desc.dl.strides[i], itemsize, &stride):
                stride = 0
            self._pydims[n + i] = <Py_ssize_t>stride
    view.buf = self.desc.dl.data
    view.obj = self
    view.len = self.desc.layout.nbytes
    view.itemsize = itemsize
    view.readonly = 1 if self.desc.flags & FLAG_READ_ONLY else 0
    view.ndim = n
    view.format = <char *>fmt if flags & PyBUF_FORMAT else NULL
    view.shape = self._pydims if flags & PyBUF_ND else NULL
    view.strides = self._pydims + n if n and flags & PyBUF_STRIDES == PyBUF_STRIDES else NULL
    view.suboffsets = NULL
    view.internal = NULL
    return 0
