# Providers: __array_interface__ (v3) and __cuda_array_interface__ (v2, v3), which share a layout.
# Every field is read once into a local (a snapshot), so a provider that changes the dict or a
# sequence while we read it cannot make us size one thing and fill another.
from collections.abc import Mapping as _Mapping

from cpython.number cimport PyNumber_Index
from cpython.list cimport PyList_AsTuple
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_GetSlice


cdef tuple _AI_VERSIONS = (3,)
cdef tuple _CAI_VERSIONS = (2, 3)
cdef dict _TYPESTRS = {}        # typestr -> (code, bits, flags): parses that needed no name


cdef object _ml_module = None   # the ml_dtypes module _ml_types was built from
cdef dict _ml_types = {}        # id(ml_dtypes scalar type) -> (that type, its name)


cdef str _ml_name(object obj, str typestr):
    """The ml_dtypes type behind a 'V' typestr (or 'f1', float8_e5m2's, in any spelling), or None.

    Only a real dtype object says it: obj.dtype must be a numpy.dtype whose scalar type *is*
    ml_dtypes' (by identity). A name alone (a structured field called 'bfloat16', a descr, a
    dtype look-alike) is not a type; docs/spec.md §3.7.
    """
    global _ml_module
    cdef Py_ssize_t i, n = len(typestr)
    if n < 3:
        return None
    if typestr[1] == "f":                   # 'f1', 'f01'...: float8_e5m2's; 'f4' is float32
        if typestr[n - 1] != "1":
            return None
        for i in range(2, n - 1):
            if typestr[i] != "0":
                return None
    elif typestr[1] != "V":
        return None
    ml = sys.modules.get("ml_dtypes")
    np = sys.modules.get("numpy")
    if ml is None or np is None:
        return None
    try:
        dt = obj.dtype
        if not isinstance(dt, np.dtype):
            return None
        scalar = dt.type
    except Exception:
        return None           # no dtype to ask: the typestr alone says opaque bytes
    if ml is not _ml_module:
        _ml_types.clear()
        for name in _types.ML_DTYPES:
            t = getattr(ml, name, None)
            if isinstance(t, type):
                _ml_types[id(t)] = (t, name)
        _ml_module = ml
    hit = _ml_types.get(id(scalar))
    return hit[1] if hit is not None and hit[0] is scalar else None


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
        raise BufferError(f"{e}. A field named {field!r} does not make it {field}: view the "
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


cdef tuple _ai_sequence(str protocol, str field, object value):
    """A snapshot of a shape or strides sequence (tuple or list): its own storage, as NumPy
    reads a shape (a subclass's __iter__, __len__ or __getitem__ does not run)."""
    if isinstance(value, tuple):
        return PyTuple_GetSlice(value, 0, PyTuple_GET_SIZE(value))
    if isinstance(value, list):
        return PyList_AsTuple(value)
    raise BufferError(f"{protocol}: field '{field}' = {value!r} is not a tuple of ints")


cdef int64_t _ai_int(str protocol, str field, tuple seq, Py_ssize_t i) except? -1:
    v = seq[i]
    try:
        return PyNumber_Index(v)
    except (TypeError, OverflowError):
        raise BufferError(f"{protocol}: field '{field}' = {seq!r} holds {v!r}, which is not an "
                          "int of at most 64 bits") from None


cdef int _ai_pointer(DLPackObject self, str protocol, object data) except -1:
    """data = (address, readonly): a tuple, or a tuple subclass (a namedtuple), as NumPy reads it.

    The items are read from the tuple's own storage, once (a subclass's methods do not run).
    """
    data = PyTuple_GetSlice(data, 0, PyTuple_GET_SIZE(data))
    if len(data) != 2:
        raise BufferError(f"{protocol}: field 'data' = {data!r} is not (address, readonly)")
    try:
        address = PyNumber_Index(data[0])
    except TypeError:
        raise BufferError(f"{protocol}: field 'data' = {data!r}: the address is not an "
                          "int") from None
    try:
        self.dl.data = <void *><uintptr_t>address
    except OverflowError:
        raise BufferError(f"{protocol}: field 'data' = {data!r}: the address is out of "
                          "range") from None
    flag = data[1]
    try:
        readonly = bool(flag)
    except Exception as e:
        raise BufferError(f"{protocol}: field 'data' = (address, readonly): the read-only flag, "
                          f"a {type(flag).__name__} object, has no truth value "
                          f"({type(e).__name__}: {e}); give True or False") from e
    if readonly:
        self._flags |= FLAG_READ_ONLY
    return 0


cdef int64_t _ai_buffer(DLPackObject self, str protocol, object source,
                        object offset) except -1:
    """data is a buffer object (or None: obj's own buffer), shifted by 'offset' bytes.

    Returns the buffer's length; _finish checks that every element lies inside it.
    """
    try:
        offset = PyNumber_Index(offset)
    except TypeError:
        raise BufferError(f"{protocol}: field 'offset' = {offset!r} is not an int") from None
    try:
        PyObject_GetBuffer(source, &self._view, PyBUF_SIMPLE)
    except (BufferError, TypeError, ValueError) as e:
        raise BufferError(f"{protocol}: field 'data' = {type(source).__name__} object gives no "
                          "C-contiguous buffer; pass a contiguous one or an (address, readonly) "
                          "tuple") from e
    self._has_view = True
    if offset < 0 or offset > self._view.len:
        raise BufferError(f"{protocol}: field 'offset' = {offset} lies outside the "
                          f"{self._view.len}-byte buffer given in 'data'")
    self.dl.data = <void *>(<uintptr_t>self._view.buf + <uintptr_t>offset)  # buf may be NULL
    if self._view.readonly:
        self._flags |= FLAG_READ_ONLY
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
    cdef DLPackObject self
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
        raise BufferError(f"{protocol} = {type(ai).__name__} object is not a dict")
    version = d.get("version", (_CAI_VERSIONS if cuda else _AI_VERSIONS)[-1])
    if version not in (_CAI_VERSIONS if cuda else _AI_VERSIONS):
        raise BufferError(f"{protocol}: field 'version' = {version!r} is not one of "
                          f"{_CAI_VERSIONS if cuda else _AI_VERSIONS}")
    if d.get("mask") is not None:
        raise BufferError(f"{protocol}: field 'mask' is set; masked arrays cannot be exchanged "
                          "(fill or compress the masked values first)")
    typestr = d.get("typestr")
    if type(typestr) is not str:
        raise BufferError(f"{protocol}: field 'typestr' = {typestr!r} is not a str such as "
                          "'<f4'")
    code, bits, flags = _typestr(protocol, obj, typestr, d.get("descr"))
    shape = _ai_sequence(protocol, "shape", d.get("shape"))
    strides = d.get("strides")
    if strides is not None:
        strides = _ai_sequence(protocol, "strides", strides)
        if len(strides) != len(shape):
            raise BufferError(f"{protocol}: field 'strides' = {strides!r} has {len(strides)} "
                              f"entries for the {len(shape)} of 'shape' = {shape!r}")
        given = STRIDES_BYTES
    data = d.get("data")
    self = _new_object()
    self._keep = d if d is ai else (ai, d)  # what the interface keeps alive (NumPy's '__ref')
    self.dl.dtype.code = code
    self.dl.dtype.bits = bits
    self.dl.dtype.lanes = 1
    self._flags = flags
    n = len(shape)
    self._alloc_dims(n, protocol)
    for i in range(n):
        self.dl.shape[i] = _ai_int(protocol, "shape", shape, i)
        if strides is not None:
            self.dl.strides[i] = _ai_int(protocol, "strides", strides, i)
    if isinstance(data, tuple):
        _ai_pointer(self, protocol, data)
    elif cuda:
        raise BufferError(f"{protocol}: field 'data' = {data!r} is not (address, readonly)")
    else:
        try:
            offset = _ai_buffer(self, protocol, obj if data is None else data,
                                d.get("offset", 0))
            bound = self._view.len
            self.dl.device.device_type = kDLCPU
            self._finish(protocol, given, offset, bound)
        except BaseException:
            self._release_view()  # at once: the exporter may be in a cycle GC clears later
            raise
        self._base = obj
        return self
    self._base = obj
    if cuda:
        _cai_device_and_stream(self, d.get("stream"))
    else:
        self.dl.device.device_type = kDLCPU
    self._finish(protocol, given, offset, bound)
    return self


cdef int _cai_device_and_stream(DLPackObject self, object stream) except -1:
    """The CAI's stream (NumPy ints too) and the device owning its pointer; a zero-size array
    has no memory to locate (a pool's pointer may be one past an allocation): CUDA:0."""
    cdef uintptr_t handle
    cdef int i
    if stream is not None:
        if not _stream_int(stream, "__cuda_array_interface__: field 'stream'", &handle):
            raise BufferError("__cuda_array_interface__: field 'stream' = -1 is not a stream; "
                              "use None when no synchronisation is needed")
        self._stream = handle
    for i in range(self.dl.ndim):
        if self.dl.shape[i] == 0:
            self.dl.device.device_type = kDLCUDA
            self.dl.device.device_id = 0
            return 0
    _cu_pointer_device(<uintptr_t>self.dl.data, &self.dl.device)
    return 0


def _read_array_interface(obj, ai):
    return _from_interface_dict(obj, ai, "__array_interface__", False)


def _read_cuda_array_interface(obj, ai):
    return _from_interface_dict(obj, ai, "__cuda_array_interface__", True)
