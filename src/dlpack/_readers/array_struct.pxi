# Reader: __array_struct__ (a capsule holding NumPy's PyArrayInterface C struct).

cdef DLPackObject _from_array_struct(object obj, object capsule):
    """The struct, its shape and its strides are copied once, before any Python code or
    allocation can run (the dtype lookup may call the provider); only the copy is read."""
    cdef DLPackObject r
    cdef PyArrayInterface s
    cdef int i
    cdef int64_t step = 1
    cdef Strides given = STRIDES_BYTES
    cdef unsigned char kind
    if not PyCapsule_CheckExact(capsule):
        raise Refusal(f"__array_struct__ = {type(capsule).__name__} object is not a PyCapsule")
    r = _new_object()
    _keep_alive(r, capsule)              # and whatever the capsule keeps alive
    s = (<PyArrayInterface *>PyCapsule_GetPointer(capsule, PyCapsule_GetName(capsule)))[0]
    if s.two != 2:
        raise Refusal(f"__array_struct__: field 'two' = {s.two}, expected 2 "
                      "(not a PyArrayInterface)")
    _check_dims("__array_struct__", "nd", s.nd, s.shape != NULL)
    if s.itemsize <= 0 or s.itemsize > 32:
        raise Refusal(f"__array_struct__: field 'itemsize' = {s.itemsize} is not the size "
                      "of a type DLPack can carry (1 to 32 bytes)")
    kind = <unsigned char>s.typekind
    r._alloc_dims(s.nd, "__array_struct__")
    for i in range(s.nd):
        r.desc.dl.shape[i] = s.shape[i]
        if s.strides != NULL:
            r.desc.dl.strides[i] = s.strides[i]
    if not _kind_dtype(kind, s.itemsize, &r.desc.dl.dtype):
        if kind < 0x21 or kind > 0x7E:
            raise Refusal(f"__array_struct__: field 'typekind' = {kind:#04x} is not a "
                          "typekind character")
        typestr = f"|{chr(kind)}{s.itemsize}"
        code, bits, flags = _types.parse_typestr(
            "__array_struct__", typestr, _ml_name(obj, typestr))
        r.desc.dl.dtype.code = code
        r.desc.dl.dtype.bits = bits
        r.desc.dl.dtype.lanes = 1
        r.desc.flags = flags
    if s.itemsize > 1 and not s.flags & NPY_NOTSWAPPED:
        raise Refusal("__array_struct__: field 'flags' lacks NOTSWAPPED: the data is "
                      "non-native byte order; byte-swap it first")
    if not s.flags & NPY_ALIGNED:
        raise Refusal("__array_struct__: field 'flags' lacks ALIGNED: misaligned data "
                      "cannot be exchanged through DLPack")
    if not s.flags & NPY_WRITEABLE:
        r.desc.flags |= FLAG_READ_ONLY
    if s.strides == NULL:
        given = STRIDES_C
        if s.flags & (NPY_C_CONTIGUOUS | NPY_F_CONTIGUOUS) == NPY_F_CONTIGUOUS:
            # Fortran order, as NumPy reads a struct without strides flagged F_CONTIGUOUS only
            given = STRIDES_ELEMENTS
            for i in range(s.nd):
                r.desc.dl.strides[i] = step
                if _mul_ovf(step, r.desc.dl.shape[i], &step):
                    step = 0        # the element count overflows too: _validate refuses it
    r.desc.dl.data = s.data
    r.desc.dl.device.device_type = kDLCPU
    _own_base(r, obj)
    r._validate("__array_struct__", given, 0, -1)
    return r


def _read_array_struct(obj, capsule):
    return _from_array_struct(obj, capsule)
