# Provider: __array_struct__ (a capsule holding NumPy's PyArrayInterface C struct).

cdef enum:
    ARR_ALIGNED = 0x100
    ARR_NOTSWAPPED = 0x200
    ARR_WRITEABLE = 0x400
    ARR_HAS_DESCR = 0x800


cdef bint _kind_dtype(char kind, int itemsize, DLDataType *out) noexcept nogil:
    """The common numeric typekinds in C; False sends the rest to the Python table."""
    if kind == b'f' and (itemsize == 4 or itemsize == 8 or itemsize == 2):
        out.code = kDLFloat
    elif kind == b'i' and (itemsize == 1 or itemsize == 2 or itemsize == 4 or itemsize == 8):
        out.code = kDLInt
    elif kind == b'u' and (itemsize == 1 or itemsize == 2 or itemsize == 4 or itemsize == 8):
        out.code = kDLUInt
    elif kind == b'c' and (itemsize == 8 or itemsize == 16):
        out.code = kDLComplex
    elif kind == b'b' and itemsize == 1:
        out.code = kDLBool
    else:
        return False
    out.bits = <uint8_t>(itemsize * 8)
    out.lanes = 1
    return True


cdef DLPackObject _from_array_struct(object obj, object capsule):
    cdef DLPackObject self = DLPackObject.__new__(DLPackObject)
    cdef PyArrayInterface *s
    cdef int i
    cdef Py_ssize_t itemsize
    if not PyCapsule_CheckExact(capsule):
        raise BufferError(f"__array_struct__ is a {type(capsule).__name__}, not a PyCapsule")
    s = <PyArrayInterface *>PyCapsule_GetPointer(capsule, PyCapsule_GetName(capsule))
    if s.two != 2:
        raise BufferError(f"__array_struct__: field 'two' = {s.two}, expected 2 "
                          "(not a PyArrayInterface)")
    if s.nd < 0:
        raise BufferError(f"__array_struct__: field 'nd' = {s.nd} is negative")
    itemsize = s.itemsize
    if not _kind_dtype(s.typekind, s.itemsize, &self.dl.dtype):
        typestr = f"|{chr(s.typekind)}{itemsize}"
        descr = <object>s.descr if s.flags & ARR_HAS_DESCR and s.descr != NULL else None
        code, bits, flags = _types.parse_typestr(
            "__array_struct__", typestr, _ml_name(obj, typestr, descr))
        self.dl.dtype.code = code
        self.dl.dtype.bits = bits
        self.dl.dtype.lanes = 1
        self._flags = flags
    if itemsize > 1 and not s.flags & ARR_NOTSWAPPED:
        raise BufferError("__array_struct__: field 'flags' lacks NOTSWAPPED: the data is "
                          "non-native byte order; byte-swap it first")
    if not s.flags & ARR_ALIGNED:
        raise BufferError("__array_struct__: field 'flags' lacks ALIGNED: misaligned data "
                          "cannot be exchanged through DLPack")
    if not s.flags & ARR_WRITEABLE:
        self._flags |= FLAG_READ_ONLY
    self._alloc_dims(s.nd)
    for i in range(s.nd):
        self.dl.shape[i] = s.shape[i]
    if s.strides == NULL:
        self._c_strides(self.dl.strides)
    else:
        for i in range(s.nd):
            if s.strides[i] % itemsize:
                raise BufferError(f"__array_struct__: field 'strides' = {s.strides[i]} in "
                                  f"dimension {i} is not a multiple of the item size {itemsize}")
            self.dl.strides[i] = s.strides[i] // itemsize
    self.dl.data = s.data
    self.dl.device.device_type = kDLCPU
    self._base = obj
    self._keep = capsule
    self._finish("__array_struct__")
    return self


def _read_array_struct(obj, capsule):
    return _from_array_struct(obj, capsule)
