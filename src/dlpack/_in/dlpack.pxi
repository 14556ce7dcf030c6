# Provider: DLPack — __dlpack__ objects, raw capsules, producers' C exchange API, ctypes pointers.

cdef tuple _MAX_VERSION = (DLPACK_MAJOR, DLPACK_MINOR)


cdef void _delete_managed(void *m, bint versioned) noexcept:
    """Hand a producer's struct back to it: call its deleter (NULL means nothing to free)."""
    if versioned:
        if (<DLManagedTensorVersioned *>m).deleter != NULL:
            (<DLManagedTensorVersioned *>m).deleter(<DLManagedTensorVersioned *>m)
    elif (<DLManagedTensor *>m).deleter != NULL:
        (<DLManagedTensor *>m).deleter(<DLManagedTensor *>m)


cdef DLPackObject _adopt(void *m, bint versioned, object base, str protocol):
    """Own a producer's managed tensor from here on; its deleter runs when the view dies."""
    cdef DLPackObject self = DLPackObject.__new__(DLPackObject)
    cdef DLTensor *t
    cdef DLManagedTensorVersioned *mv = <DLManagedTensorVersioned *>m
    cdef int i
    self._managed = m
    self._managed_versioned = versioned
    self._base = base
    if versioned:
        t = &mv.dl_tensor
        self._flags = mv.flags & (FLAG_READ_ONLY | FLAG_SUBBYTE_PADDED)
    else:
        t = &(<DLManagedTensor *>m).dl_tensor
    if t.ndim < 0:
        raise BufferError(f"{protocol}: field 'ndim' = {t.ndim} is negative")
    if t.ndim > 0 and t.shape == NULL:
        raise BufferError(f"{protocol}: field 'shape' is NULL for ndim = {t.ndim}")
    self._alloc_dims(t.ndim)
    memcpy(self.dl.shape, t.shape, t.ndim * sizeof(int64_t))
    if t.strides == NULL:
        self._c_strides(self.dl.strides)
    else:
        memcpy(self.dl.strides, t.strides, t.ndim * sizeof(int64_t))
    self.dl.data = <char *>t.data + t.byte_offset
    self.dl.device = t.device
    self.dl.dtype = t.dtype
    if _cuda_kind(t.device.device_type):
        self._stream = 1        # the producer synchronised to the legacy default stream for us
    self._finish(protocol)
    return self


cdef DLPackObject _from_capsule(object capsule, object base):
    """Consume a "dltensor" / "dltensor_versioned" capsule: rename it used, own its struct."""
    cdef const char *name
    cdef void *m
    cdef DLManagedTensorVersioned *mv
    if not PyCapsule_CheckExact(capsule):
        raise BufferError(f"__dlpack__ returned a {type(capsule).__name__}, not a PyCapsule")
    name = PyCapsule_GetName(capsule)
    if name != NULL and PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        mv = <DLManagedTensorVersioned *>PyCapsule_GetPointer(capsule, b"dltensor_versioned")
        PyCapsule_SetName(capsule, b"used_dltensor_versioned")
        if mv.version.major > DLPACK_MAJOR:
            _delete_managed(mv, True)
            raise BufferError(f"DLPack capsule: field 'version' = {mv.version.major}."
                              f"{mv.version.minor} has a newer major version than this "
                              f"pydlpack implements ({DLPACK_MAJOR}.{DLPACK_MINOR})")
        return _adopt(mv, True, base, "DLPack capsule")
    if name != NULL and PyCapsule_IsValid(capsule, b"dltensor"):
        m = PyCapsule_GetPointer(capsule, b"dltensor")
        PyCapsule_SetName(capsule, b"used_dltensor")
        return _adopt(m, False, base, "DLPack capsule")
    shown = "NULL" if name == NULL else repr((<bytes>name).decode("utf-8", "replace"))
    if shown.startswith("'used_dltensor"):
        raise BufferError(f"DLPack capsule: name {shown}: it was consumed already (a capsule "
                          "can be consumed once; ask the producer for a new one)")
    raise BufferError(f"DLPack capsule: name {shown} is not 'dltensor' or 'dltensor_versioned'")


cdef object _call_dlpack(object obj, object stream):
    """obj.__dlpack__ asking for a versioned capsule; older producers get fewer keywords."""
    meth = obj.__dlpack__
    try:
        if stream is None:
            return meth(max_version=_MAX_VERSION)
        return meth(stream=stream, max_version=_MAX_VERSION)
    except TypeError as e:
        if "max_version" not in str(e) and "keyword" not in str(e):
            raise
    return meth() if stream is None else meth(stream=stream)


cdef dict _exchange_apis = {}      # type -> address of its DLPackExchangeAPI (0: none)


cdef DLPackExchangeAPI *_exchange_api(type t):
    cdef uintptr_t address
    try:
        address = _exchange_apis[t]
    except KeyError:
        address = 0
        cap = getattr(t, "__dlpack_c_exchange_api__", None)
        if cap is not None and PyCapsule_IsValid(cap, b"dlpack_exchange_api"):
            address = <uintptr_t>PyCapsule_GetPointer(cap, b"dlpack_exchange_api")
            if (<DLPackExchangeAPI *>address).header.version.major != DLPACK_MAJOR:
                address = 0
        _exchange_apis[t] = address
    return <DLPackExchangeAPI *>address


cdef DLPackObject _from_dlpack_method(object obj):
    """A __dlpack__ provider; via its type's C exchange API when it has one (CPU data)."""
    cdef DLPackExchangeAPI *api = _exchange_api(type(obj))
    cdef DLManagedTensorVersioned *m = NULL
    cdef DLPackObject self
    if api != NULL:
        try:
            api.managed_tensor_from_py_object_no_sync(<void *>obj, &m)
        except Exception:
            m = NULL                        # __dlpack__ below gives the producer's own message
        if m != NULL:
            if m.dl_tensor.device.device_type == kDLCPU:
                return _adopt(m, True, obj, "__dlpack_c_exchange_api__")
            _delete_managed(m, True)        # device data: take the synchronising path below
    self = _from_capsule(_call_dlpack(obj, None), obj)
    if _cuda_kind(self.dl.device.device_type):
        self._resync = obj
    return self


cdef DLPackObject _from_ctypes_pointer(object p):
    """Own the DLPack struct a ctypes pointer points at, and NULL the pointer object."""
    from dlpack import ctypes as dlctypes
    cdef bint versioned
    if p._type_ is dlctypes.DLManagedTensorVersioned:
        versioned = True
    elif p._type_ is dlctypes.DLManagedTensor:
        versioned = False
    else:
        raise TypeError(f"asdlpack: a ctypes pointer to {p._type_.__name__}, not to "
                        "dlpack.ctypes.DLManagedTensor or DLManagedTensorVersioned")
    cdef uintptr_t address = _ctypes.cast(p, _ctypes.c_void_p).value or 0
    if address == 0:
        raise BufferError("ctypes pointer: it is NULL (or its tensor was taken already)")
    _ctypes.c_void_p.from_address(_ctypes.addressof(p)).value = None
    if versioned and (<DLManagedTensorVersioned *>address).version.major > DLPACK_MAJOR:
        _delete_managed(<void *>address, True)
        raise BufferError("ctypes pointer: DLManagedTensorVersioned has a newer major version "
                          f"than this pydlpack implements ({DLPACK_MAJOR})")
    return _adopt(<void *>address, versioned, p, "ctypes pointer")


cdef dict _tensor_dict(DLTensor *t, object version, uint64_t flags):
    return {
        "version": version,
        "flags": flags,
        "data": <uintptr_t>t.data,
        "device": _device_tuple(t.device),
        "ndim": t.ndim,
        "dtype": (_types.DLDataTypeCode(t.dtype.code) if t.dtype.code <= 17 else t.dtype.code,
                  t.dtype.bits, t.dtype.lanes),
        "shape": tuple([t.shape[i] for i in range(t.ndim)]),
        "strides": None if t.strides == NULL else tuple([t.strides[i] for i in range(t.ndim)]),
        "byte_offset": t.byte_offset,
    }


cdef dict _capsule_dict(object capsule):
    cdef DLManagedTensorVersioned *mv
    if PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        mv = <DLManagedTensorVersioned *>PyCapsule_GetPointer(capsule, b"dltensor_versioned")
        version = (mv.version.major, mv.version.minor)
        if mv.version.major > DLPACK_MAJOR:
            return {"version": version, "flags": mv.flags}
        return _tensor_dict(&mv.dl_tensor, version, mv.flags)
    if PyCapsule_IsValid(capsule, b"dltensor"):
        return _tensor_dict(&(<DLManagedTensor *>PyCapsule_GetPointer(capsule, b"dltensor"))
                            .dl_tensor, None, 0)
    _from_capsule(capsule, None)      # raises the error that names the capsule
