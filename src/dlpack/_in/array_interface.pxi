# Providers: __array_interface__ (v3) and __cuda_array_interface__ (v2, v3), which share a layout.
from operator import index as _index


cdef tuple _AI_VERSIONS = (3,)
cdef tuple _CAI_VERSIONS = (2, 3)


cdef str _ml_name(object obj, object typestr, object descr):
    """The ml_dtypes name behind a 'V' (or NumPy-less 'f1') typestr: descr's, else obj.dtype's."""
    if not isinstance(typestr, str) or not (typestr[1:2] == "V" or typestr[1:] == "f1"):
        return None
    if isinstance(descr, list) and len(descr) == 1 and isinstance(descr[0], tuple):
        name = descr[0][0]
        if name in _types.ML_DTYPES:
            return name
    dt = getattr(obj, "dtype", None)
    name = getattr(dt, "name", None)
    return name if isinstance(name, str) else None


cdef int _ai_dtype(DLPackObject self, str protocol, object obj, dict ai) except -1:
    typestr = ai.get("typestr")
    code, bits, flags = _types.parse_typestr(
        protocol, typestr, _ml_name(obj, typestr, ai.get("descr")))
    self.dl.dtype.code = code
    self.dl.dtype.bits = bits
    self.dl.dtype.lanes = 1
    self._flags |= flags
    return 0


cdef int _ai_shape(DLPackObject self, str protocol, dict ai) except -1:
    shape = ai.get("shape")
    if not isinstance(shape, (tuple, list)):
        raise BufferError(f"{protocol}: field 'shape' = {shape!r} is not a tuple of ints")
    self._alloc_dims(len(shape))
    for i, n in enumerate(shape):
        try:
            self.dl.shape[i] = _index(n)
        except (TypeError, OverflowError):
            raise BufferError(f"{protocol}: field 'shape' = {shape!r} holds {n!r}, not an int")
    return 0


cdef int _ai_strides(DLPackObject self, str protocol, dict ai) except -1:
    strides = ai.get("strides")
    cdef Py_ssize_t itemsize = self._itemsize()
    cdef int64_t s
    if strides is None:
        self._c_strides(self.dl.strides)
        return 0
    if not isinstance(strides, (tuple, list)) or len(strides) != self.dl.ndim:
        raise BufferError(f"{protocol}: field 'strides' = {strides!r} is not None or a tuple "
                          f"of {self.dl.ndim} ints")
    for i, n in enumerate(strides):
        try:
            s = _index(n)
        except (TypeError, OverflowError):
            raise BufferError(f"{protocol}: field 'strides' = {strides!r} holds {n!r}, not an int")
        if s % itemsize:
            raise BufferError(f"{protocol}: field 'strides' = {strides!r}: {s} is not a multiple "
                              f"of the item size {itemsize} (a field of a structured array?)")
        self.dl.strides[i] = s // itemsize
    return 0


cdef int _ai_mask(str protocol, dict ai) except -1:
    if ai.get("mask") is not None:
        raise BufferError(f"{protocol}: field 'mask' is set; masked arrays cannot be exchanged "
                          "(fill or compress the masked values first)")
    return 0


cdef int _ai_version(str protocol, dict ai, tuple accepted) except -1:
    version = ai.get("version", accepted[-1])
    if version not in accepted:
        raise BufferError(f"{protocol}: field 'version' = {version!r} is not one of {accepted}")
    return 0


cdef int _ai_pointer(DLPackObject self, str protocol, object data) except -1:
    """data = (address, readonly)."""
    if len(data) != 2:
        raise BufferError(f"{protocol}: field 'data' = {data!r} is not (address, readonly)")
    try:
        address = _index(data[0])
    except TypeError:
        raise BufferError(f"{protocol}: field 'data' = {data!r}: the address is not an int")
    if address < 0 or address > <uintptr_t>-1:
        raise BufferError(f"{protocol}: field 'data' = {data!r}: address out of range")
    self.dl.data = <void *><uintptr_t>address
    if data[1]:
        self._flags |= FLAG_READ_ONLY
    return 0


cdef int _ai_buffer(DLPackObject self, str protocol, object source, dict ai) except -1:
    """data is a buffer object (or None: obj's own buffer), shifted by 'offset' bytes."""
    cdef Py_ssize_t offset, lo = 0, hi = 0, step, itemsize = self._itemsize()
    cdef int i
    try:
        offset = _index(ai.get("offset", 0))
    except TypeError:
        raise BufferError(f"{protocol}: field 'offset' = {ai.get('offset')!r} is not an int")
    try:
        PyObject_GetBuffer(source, &self._view, PyBUF_SIMPLE)
    except (BufferError, TypeError) as e:
        raise BufferError(f"{protocol}: field 'data' = {type(source).__name__} object gives no "
                          f"contiguous buffer ({e})")
    self._has_view = True
    if self._size() > 0:
        for i in range(self.dl.ndim):
            step = (self.dl.shape[i] - 1) * self.dl.strides[i] * itemsize
            if step < 0:
                lo += step
            else:
                hi += step
        if offset + lo < 0 or offset + hi + itemsize > self._view.len:
            raise BufferError(f"{protocol}: the array (offset {offset}, shape {ai['shape']}, "
                              f"strides {ai.get('strides')}) reaches outside the "
                              f"{self._view.len}-byte buffer given in 'data'")
    self.dl.data = <char *>self._view.buf + offset
    if self._view.readonly:
        self._flags |= FLAG_READ_ONLY
    return 0


cdef DLPackObject _from_interface_dict(object obj, object ai, str protocol, bint cuda):
    cdef DLPackObject self = DLPackObject.__new__(DLPackObject)
    if not isinstance(ai, dict):
        raise BufferError(f"{protocol} is a {type(ai).__name__}, not a dict")
    _ai_version(protocol, ai, _CAI_VERSIONS if cuda else _AI_VERSIONS)
    _ai_mask(protocol, ai)
    _ai_dtype(self, protocol, obj, ai)
    _ai_shape(self, protocol, ai)
    _ai_strides(self, protocol, ai)
    data = ai.get("data")
    if isinstance(data, tuple):
        _ai_pointer(self, protocol, data)
    elif cuda:
        raise BufferError(f"{protocol}: field 'data' = {data!r} is not (address, readonly)")
    else:
        _ai_buffer(self, protocol, obj if data is None else data, ai)
    self._base = obj
    if cuda:
        _cai_device_and_stream(self, ai)
    else:
        self.dl.device.device_type = kDLCPU
    self._finish(protocol)
    return self


cdef int _cai_device_and_stream(DLPackObject self, dict ai) except -1:
    stream = ai.get("stream")
    if stream is not None:
        if type(stream) is bool or not isinstance(stream, int):
            raise BufferError(f"__cuda_array_interface__: field 'stream' = {stream!r} is not "
                              "None or an int")
        if stream == 0:
            raise BufferError("__cuda_array_interface__: field 'stream' = 0 is disallowed "
                              "(ambiguous); use 1 for the legacy default stream or 2 for "
                              "per-thread")
    self._stream = stream
    from dlpack import _cuda
    device_type, device_id = _cuda.pointer_device(<uintptr_t>self.dl.data)
    self.dl.device.device_type = device_type
    self.dl.device.device_id = device_id
    return 0


def _read_array_interface(obj, ai):
    return _from_interface_dict(obj, ai, "__array_interface__", False)


def _read_cuda_array_interface(obj, ai):
    return _from_interface_dict(obj, ai, "__cuda_array_interface__", True)
