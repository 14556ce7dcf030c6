# Writer: __array_interface__ (CPU data) and __cuda_array_interface__ (CUDA data), v3.

cdef dict _interface(DLPackObject self, str protocol):
    cdef int i
    cdef Py_ssize_t itemsize = self.desc.layout.itemsize
    try:
        typestr, descr = _types.array_typestr(
            self.desc.dl.dtype.code, self.desc.dl.dtype.bits, self.desc.dl.dtype.lanes)
    except BufferError as e:
        # An interface that cannot be given is absent (hasattr False), so that consumers
        # such as numpy.asarray go on to their next protocol (docs/spec.md §5).
        raise AttributeError(str(e).replace("__array_interface__", protocol, 1)) from None
    strides = None
    if not self.desc.layout.c_contig:
        strides = tuple([self.desc.dl.strides[i] * itemsize for i in range(self.desc.dl.ndim)])
    return {
        "shape": self.shape,
        "typestr": typestr,
        "descr": list(descr),
        "data": (<uintptr_t>self.desc.dl.data, bool(self.desc.flags & FLAG_READ_ONLY)),
        "strides": strides,
        "version": 3,
    }

cdef dict _array_interface(DLPackObject self):
    if not _host_accessible(self.desc.dl.device.device_type):
        raise AttributeError(f"__array_interface__: the data is on "
                             f"{_device_name(self.desc.dl.device)}; see __cuda_array_interface__")
    _host_wait(self)
    return _interface(self, "__array_interface__")


class _Interface:
    """What ``__array__`` hands ``numpy.asarray``: the array interface alone (NumPy cannot come
    back to ``__array__``) and the view itself, kept alive as the ndarray's base."""

    __slots__ = ("__array_interface__", "view")

    def __init__(self, interface, view):
        self.__array_interface__ = interface
        self.view = view


cdef object _to_ndarray(DLPackObject self, object dtype, object copy):
    """``__array__``: a zero-copy ndarray of CPU data, read-only when the source is, with
    NumPy 2's ``copy`` (spec §5); NumPy is imported here, not before."""
    import numpy
    cdef bint cpu = _host_accessible(self.desc.dl.device.device_type)
    modes = getattr(numpy, "_CopyMode", None)
    if isinstance(copy, str):
        raise ValueError(f"__array__: copy = {copy!r:.80} is a string; pass True, False or None")
    if modes is not None and type(copy) is modes:   # as numpy.array reads them (spec §5)
        copy = None if copy is modes.IF_NEEDED else copy is modes.ALWAYS
    elif copy is not None:
        copy = bool(copy)               # NumPy's reading: np.False_ and 0 never copy
    if copy is False and not cpu:
        raise ValueError("__array__(copy=False): the data is on "
                         f"{_device_name(self.desc.dl.device)} and a NumPy array lives in host "
                         "memory, so it needs a copy; pass "
                         "copy=None or True (or use numpy.from_dlpack(dl, device='cpu'))")
    if cpu:
        try:
            interface = _array_interface(self)
        except AttributeError as e:
            raise BufferError(str(e).replace("__array_interface__", "__array__", 1)) from None
        arr = numpy.asarray(_Interface(interface, self))
    else:
        arr = numpy.from_dlpack(self, device="cpu", copy=True)   # a host copy (spec §10)
    if arr.dtype.kind == "V":
        arr = _ml_typed(arr, self.dtype.name)
    if dtype is not None and numpy.dtype(dtype) != arr.dtype:
        if copy is False:
            raise ValueError(f"__array__(dtype={numpy.dtype(dtype)}, copy=False): the data is "
                             f"{arr.dtype}, so that dtype needs a copy; pass copy=None or True")
        return arr.astype(dtype)
    if copy and cpu:
        return arr.copy()
    return arr


cdef object _ml_typed(object arr, str name):
    """An opaque ('V') array of an ML type (bfloat16, float8_*) as ml_dtypes' dtype of that
    name, where ml_dtypes is importable (what the matrix reads them as); else as it is."""
    if name not in _types.ML_DTYPES:
        return arr
    try:
        import ml_dtypes
    except ImportError:
        return arr
    t = getattr(ml_dtypes, name, None)
    return arr if t is None else arr.view(t)


cdef dict _cuda_array_interface(DLPackObject self):
    if not _cuda_kind(self.desc.dl.device.device_type):
        raise AttributeError(f"__cuda_array_interface__: the data is on "
                             f"{_device_name(self.desc.dl.device)}, not a CUDA device")
    cdef uintptr_t producer
    cdef void *event
    d = _interface(self, "__cuda_array_interface__")
    d["stream"] = None
    work = _producer_ready(self, 0, &producer, &event)
    if work == WORK_EVENT:      # an Arrow sync_event names no stream: the host waits for it
        _cu_event_sync(self.desc.dl.device.device_id, event)
    elif work == WORK_STREAM:
        d["stream"] = producer      # 1 for the legacy default stream: None would say "no sync"
    return d
