# Readers: __array_interface__ (v3) and __cuda_array_interface__ (v2, v3), which share a layout.
# Every field is read once into a local (a snapshot), so a provider that changes the dict or a
# sequence while we read it cannot make us size one thing and fill another.

cdef tuple _AI_VERSIONS = (3,)
cdef tuple _CAI_VERSIONS = (2, 3)
cdef dict _TYPESTRS = {}        # typestr -> (code, bits, flags): parses that needed no name


cdef tuple _typestr(str protocol, object obj, str typestr, object descr):
    """(code, bits, flags) of a typestr, remembered for the few valid ones that need no name."""
    name = _ml_name(obj, typestr)
    if name is None:
        parsed = _TYPESTRS.get(typestr)
        if parsed is not None:
            return parsed
    try:
        parsed = _types.parse_typestr(protocol, typestr, name)
    except BufferError as e:
        field = _ml_field(descr)
        if field is None:
            raise
        raise Refusal(f"{e}. A field named {field!r} does not make it {field}: view the "
                      f"array as that type first (numpy: a.view(ml_dtypes.{field}))") from None
    if name is None and len(_TYPESTRS) < 256:      # leading zeros make endless valid spellings
        _TYPESTRS[typestr] = parsed
    return parsed


cdef str _ml_field(object descr):
    """The name of descr's single field when it is an ml_dtypes type's (for the message only)."""
    if (type(descr) is list and len(descr) == 1 and type(descr[0]) is tuple
            and len(descr[0]) >= 1 and type(descr[0][0]) is str
            and descr[0][0] in _types.ML_DTYPES):
        return descr[0][0]
    return None


cdef int64_t _ai_int(str protocol, str field, tuple seq, Py_ssize_t i) except? -1:
    v = seq[i]
    try:
        return PyNumber_Index(v)
    except (TypeError, OverflowError):
        raise Refusal(f"{protocol}: field '{field}' = {seq!r} holds {v!r}, which is not an "
                      "int of at most 64 bits") from None


cdef int _ai_pointer(DLPackObject self, str protocol, object data) except -1:
    """data = (address, readonly): a tuple, or a tuple subclass (a namedtuple), as NumPy reads it.

    The items are read from the tuple's own storage, once (a subclass's methods do not run).
    """
    data = PyTuple_GetSlice(data, 0, PyTuple_GET_SIZE(data))
    if len(data) != 2:
        raise Refusal(f"{protocol}: field 'data' = {data!r} is not (address, readonly)")
    try:
        address = PyNumber_Index(data[0])
    except TypeError:
        raise Refusal(f"{protocol}: field 'data' = {data!r}: the address is not an "
                      "int") from None
    try:
        self.desc.dl.data = <void *><uintptr_t>address
    except OverflowError:
        raise Refusal(f"{protocol}: field 'data' = {data!r}: the address is out of "
                      "range") from None
    flag = data[1]
    try:
        readonly = bool(flag)
    except Exception as e:
        raise Refusal(f"{protocol}: field 'data' = (address, readonly): the read-only flag, "
                      f"a {type(flag).__name__} object, has no truth value "
                      f"({type(e).__name__}: {e}); give True or False") from e
    if readonly:
        self.desc.flags |= FLAG_READ_ONLY
    return 0


cdef int64_t _ai_buffer(DLPackObject self, str protocol, object source,
                        object offset) except -1:
    """data is a buffer object (or None: obj's own buffer), shifted by 'offset' bytes.

    Returns the buffer's length; _validate checks that every element lies inside it.
    """
    try:
        offset = PyNumber_Index(offset)
    except TypeError:
        raise Refusal(f"{protocol}: field 'offset' = {offset!r} is not an int") from None
    _hold_buffer(self, source, PyBUF_SIMPLE, protocol, "data",
                 "; pass a contiguous one or an (address, readonly) tuple")
    if offset < 0 or offset > self._view.len:
        raise Refusal(f"{protocol}: field 'offset' = {offset} lies outside the "
                      f"{self._view.len}-byte buffer given in 'data'")
    self.desc.dl.data = <void *>(<uintptr_t>self._view.buf + <uintptr_t>offset)  # buf may be NULL
    if self._view.readonly:
        self.desc.flags |= FLAG_READ_ONLY
    return offset


cdef dict _dict_storage(dict ai):
    """A dict subclass's own str-keyed entries, as NumPy reads an interface (PyDict_GetItem):
    no overridden __getitem__, __iter__ or get runs."""
    cdef Py_ssize_t pos = 0
    cdef PyObject *key
    cdef PyObject *value
    cdef dict out = {}
    while PyDict_Next(ai, &pos, &key, &value):
        if type(<object>key) is str:
            out[<object>key] = <object>value
    return out


cdef DLPackObject _from_interface_dict(object obj, object ai, str protocol, bint cuda):
    cdef DLPackObject r
    cdef Py_ssize_t i, n
    cdef int64_t offset = 0, bound = -1
    cdef Strides given = STRIDES_C
    cdef dict d
    if type(ai) is dict:
        d = <dict>ai
    elif isinstance(ai, dict):
        d = _dict_storage(<dict>ai)
    elif isinstance(ai, _Mapping):
        d = dict(ai)
    else:
        raise Refusal(f"{protocol} = {type(ai).__name__} object is not a dict")
    version = d.get("version", (_CAI_VERSIONS if cuda else _AI_VERSIONS)[-1])
    if version not in (_CAI_VERSIONS if cuda else _AI_VERSIONS):
        raise Refusal(f"{protocol}: field 'version' = {version!r} is not one of "
                      f"{_CAI_VERSIONS if cuda else _AI_VERSIONS}")
    if d.get("mask") is not None:
        raise Refusal(f"{protocol}: field 'mask' is set; masked arrays cannot be exchanged "
                      "(fill or compress the masked values first)")
    typestr = d.get("typestr")
    if type(typestr) is not str:
        raise Refusal(f"{protocol}: field 'typestr' = {typestr!r} is not a str such as "
                      "'<f4'")
    code, bits, flags = _typestr(protocol, obj, typestr, d.get("descr"))
    shape = _ai_sequence(protocol, "shape", d.get("shape"))
    strides = d.get("strides")
    if strides is not None:
        strides = _ai_sequence(protocol, "strides", strides)
        if len(strides) != len(shape):
            raise Refusal(f"{protocol}: field 'strides' = {strides!r} has {len(strides)} "
                          f"entries for the {len(shape)} of 'shape' = {shape!r}")
        given = STRIDES_BYTES
    data = d.get("data")
    r = _new_object()
    _keep_alive(r, d if d is ai else (ai, d))  # what the interface keeps alive (NumPy's '__ref')
    r.desc.dl.dtype.code = code
    r.desc.dl.dtype.bits = bits
    r.desc.dl.dtype.lanes = 1
    r.desc.flags = flags
    n = len(shape)
    r._alloc_dims(n, protocol)
    for i in range(n):
        r.desc.dl.shape[i] = _ai_int(protocol, "shape", shape, i)
        if strides is not None:
            r.desc.dl.strides[i] = _ai_int(protocol, "strides", strides, i)
    if isinstance(data, tuple):
        _ai_pointer(r, protocol, data)
    elif cuda:
        raise Refusal(f"{protocol}: field 'data' = {data!r} is not (address, readonly)")
    else:
        offset = _ai_buffer(r, protocol, obj if data is None else data, d.get("offset", 0))
        bound = r._view.len
    _own_base(r, obj)
    if cuda:
        _cai_device_and_stream(r, d)
    else:
        r.desc.dl.device.device_type = kDLCPU
    r._validate(protocol, given, offset, bound)
    return r


cdef int _cai_device_and_stream(DLPackObject self, dict d) except -1:
    """The CAI's stream (NumPy ints too) and the device owning its pointer; a zero-size array
    has no memory to locate (a pool's pointer may be one past an allocation): CUDA:0.

    An unnamed stream (_cai_names_stream) and stream 0 (numba-cuda's default stream; CuPy
    reads it so too) are the legacy default stream (spec §3.4); None is no synchronisation."""
    cdef uintptr_t handle
    cdef int i
    cdef str what = "__cuda_array_interface__: field 'stream'"
    stream = d.get("stream")
    if not _cai_names_stream(d):
        _sync_on_stream(self, CU_STREAM_LEGACY)
    elif stream is not None:
        if _stream_index(stream, what, False) == 0:
            _sync_on_stream(self, CU_STREAM_LEGACY)
        elif _stream_int(stream, what, False, &handle):
            _sync_on_stream(self, handle)
        else:
            raise Refusal("__cuda_array_interface__: field 'stream' = -1 is not a stream; "
                          "use None when no synchronisation is needed")
    for i in range(self.desc.dl.ndim):
        if self.desc.dl.shape[i] == 0:
            self.desc.dl.device.device_type = kDLCUDA
            self.desc.dl.device.device_id = 0
            return 0
    _cu_pointer_device(<uintptr_t>self.desc.dl.data, &self.desc.dl.device)
    return 0


def _read_array_interface(obj, ai):
    return _from_interface_dict(obj, ai, "__array_interface__", False)


def _read_cuda_array_interface(obj, ai):
    return _from_interface_dict(obj, ai, "__cuda_array_interface__", True)
