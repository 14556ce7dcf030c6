# Consumer side: the buffer protocol (memoryview, array.array, file.write).

cdef const char *_buffer_format(DLPackObject self) except NULL:
    cdef DLDataType t = self.dl.dtype
    if t.lanes == 1:
        if t.code == kDLInt:
            if t.bits == 8:
                return b"b"
            if t.bits == 16:
                return b"h"
            if t.bits == 32:
                return b"i"
            if t.bits == 64:
                return b"q"
        elif t.code == kDLUInt:
            if t.bits == 8:
                return b"B"
            if t.bits == 16:
                return b"H"
            if t.bits == 32:
                return b"I"
            if t.bits == 64:
                return b"Q"
        elif t.code == kDLFloat:
            if t.bits == 16:
                return b"e"
            if t.bits == 32:
                return b"f"
            if t.bits == 64:
                return b"d"
        elif t.code == kDLComplex:
            if t.bits == 64:
                return b"Zf"
            if t.bits == 128:
                return b"Zd"
        elif t.code == kDLBool and t.bits == 8:
            return b"?"
    raise Refusal(f"buffer protocol: dtype {self.dtype.name} has no PEP 3118 format; "
                  "use __dlpack__ or __array_interface__ (NumPy views it as raw bytes)")

cdef int _fill_buffer(DLPackObject self, Py_buffer *view, int flags) except -1:
    cdef int i, n = self.dl.ndim
    cdef Py_ssize_t itemsize = self._itemsize
    if not _host_accessible(self.dl.device.device_type):
        raise Refusal(f"buffer protocol: the data is on {_device_name(self.dl.device)}, "
                      "not in CPU memory; use __dlpack__ or __cuda_array_interface__")
    cdef const char *fmt = _buffer_format(self)
    _host_wait(self)
    if flags & PyBUF_WRITABLE and self._flags & FLAG_READ_ONLY:
        raise Refusal("buffer protocol: a writable buffer was requested, but the data "
                      "is read-only")
    if (flags & PyBUF_STRIDES) != PyBUF_STRIDES and not self._c_contig:
        raise Refusal("buffer protocol: the consumer needs C-contiguous data without "
                      f"strides, but strides are {self.strides} elements")
    if ((flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS and not self._c_contig
            or (flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS and not self._f_contig
            or (flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS
            and not (self._c_contig or self._f_contig)):
        raise Refusal("buffer protocol: the consumer requested contiguous data, but "
                      f"strides are {self.strides} elements")
    if self._pydims == NULL and n > 0:
        self._pydims = <Py_ssize_t *>malloc(2 * n * sizeof(Py_ssize_t))
        if self._pydims == NULL:
            raise MemoryError()
        for i in range(n):
            self._pydims[i] = self.dl.shape[i]
            self._pydims[n + i] = self.dl.strides[i] * itemsize
    view.buf = self.dl.data
    view.obj = self
    view.len = self._nbytes
    view.itemsize = itemsize
    view.readonly = 1 if self._flags & FLAG_READ_ONLY else 0
    view.ndim = n
    view.format = <char *>fmt if flags & PyBUF_FORMAT else NULL
    view.shape = self._pydims if flags & PyBUF_ND else NULL
    view.strides = self._pydims + n if n and flags & PyBUF_STRIDES == PyBUF_STRIDES else NULL
    view.suboffsets = NULL
    view.internal = NULL
    return 0
