# Providers: __array_interface__ (v3) and __cuda_array_interface__ (v2, v3), which share a layout.
# Every field is read once into a local (a snapshot), so a provider that changes the dict or a
# sequence while we read it cannot make us size one thing and fill another.
from collections.abc import Mapping as _Mapping

from cpython.number cimport PyNumber_Index


cdef tuple _AI_VERSIONS = (3,)
cdef tuple _CAI_VERSIONS = (2, 3)
cdef dict _TYPESTRS = {}        # typestr -> (code, bits, flags): parses that needed no name


cdef str _ml_name(object obj, object typestr, object descr):
    """The ml_dtypes name behind a 'V' (or NumPy-less 'f1') typestr: descr's, else obj.dtype's."""
    cdef str t = typestr if isinstance(typestr, str) else None
    if t is None or len(t) < 2 or not (t[1] == "V" or (len(t) == 3 and t[1] == "f"
                                                       and t[2] == "1")):
        return None
    if (type(descr) is list and len(descr) == 1 and type(descr[0]) is tuple
            and len(descr[0]) >= 1 and type(descr[0][0]) is str
            and descr[0][0] in _types.ML_DTYPES):
        return descr[0][0]
    dt = getattr(obj, "dtype", None)
    name = getattr(dt, "name", None)
    return name if type(name) is str else None


cdef tuple _typestr(str protocol, object obj, str typestr, object descr):
    """(code, bits, flags) of a typestr, remembered for the few valid ones that need no name."""
    name = _ml_name(obj, typestr, descr)
    if name is None:
        parsed = _TYPESTRS.get(typestr)
        if parsed is not None:
            return parsed
    parsed = _types.parse_typestr(protocol, typestr, name)
    if name is None and len(_TYPESTRS) < 256:      # leading zeros make endless valid spellings
        _TYPESTRS[typestr] = parsed
    return parsed


cdef tuple _ai_sequence(str protocol, str field, object value):
    """A snapshot of a shape or strides sequence (tuple or list)."""
    if not isinstance(value, (tuple, list)):
        raise BufferError(f"{protocol}: field '{field}' = {value!r} is not a tuple of ints")
    return tuple(value)


cdef int64_t _ai_int(str protocol, str field, tuple seq, Py_ssize_t i) except? -1:
    v = seq[i]
    try:
        return PyNumber_Index(v)
    except (TypeError, OverflowError):
        raise BufferError(f"{protocol}: field '{field}' = {seq!r} holds {v!r}, which is not an "
                          "int of at most 64 bits") from None


cdef int _ai_pointer(DLPackObject self, str protocol, tuple data) except -1:
    """data = (address, readonly)."""
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
    if data[1]:
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


cdef DLPackObject _from_interface_dict(object obj, object ai, str protocol, bint cuda):
    cdef DLPackObject self
    cdef Py_ssize_t i, n
    cdef int64_t offset = 0, bound = -1
    cdef Strides given = STRIDES_C
    cdef dict d
    if type(ai) is dict:
        d = <dict>ai
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
    if type(data) is tuple:
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
    if stream is not None:
        if type(stream) is bool or not isinstance(stream, int):
            raise BufferError(f"__cuda_array_interface__: field 'stream' = {stream!r} is not "
                              "None or an int")
        if stream == 0:
            raise BufferError("__cuda_array_interface__: field 'stream' = 0 is disallowed "
                              "(ambiguous); use 1 for the legacy default stream or 2 for "
                              "per-thread")
        try:
            self._stream = stream
        except OverflowError:
            raise BufferError(f"__cuda_array_interface__: field 'stream' = {stream!r} is not "
                              "a CUDA stream handle") from None
    _cu_pointer_device(<uintptr_t>self.dl.data, &self.dl.device)
    return 0


def _read_array_interface(obj, ai):
    return _from_interface_dict(obj, ai, "__array_interface__", False)


def _read_cuda_array_interface(obj, ai):
    return _from_interface_dict(obj, ai, "__cuda_array_interface__", True)
