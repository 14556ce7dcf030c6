# Provider: DLPack — __dlpack__ objects, raw capsules, producers' C exchange API, ctypes pointers.

cdef tuple _MAX_VERSION = (DLPACK_MAJOR, DLPACK_MINOR)


cdef DLPackObject _from_capsule(object capsule, object base):
    """Consume a "dltensor" / "dltensor_versioned" capsule: rename it used, own its struct."""
    cdef const char *name
    cdef void *m
    if not PyCapsule_CheckExact(capsule):
        raise Refusal(_not_a_capsule(capsule))
    name = PyCapsule_GetName(capsule)
    if name != NULL and PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        m = PyCapsule_GetPointer(capsule, b"dltensor_versioned")
        PyCapsule_SetName(capsule, b"used_dltensor_versioned")
        return _adopt(m, True, base, "DLPack capsule")
    if name != NULL and PyCapsule_IsValid(capsule, b"dltensor"):
        m = PyCapsule_GetPointer(capsule, b"dltensor")
        PyCapsule_SetName(capsule, b"used_dltensor")
        return _adopt(m, False, base, "DLPack capsule")
    raise Refusal(_capsule_name_refusal(name))


cdef str _not_a_capsule(object value):
    return f"__dlpack__ returned a {type(value).__name__} object, not a PyCapsule"


cdef str _capsule_name_refusal(const char *name):
    shown = "NULL" if name == NULL else repr((<bytes>name).decode("utf-8", "replace"))
    if shown.startswith("'used_dltensor"):
        return (f"DLPack capsule: name {shown}: it was consumed already (a DLPack tensor may "
                "be consumed at most once; ask the producer for a new one)")
    return f"DLPack capsule: name {shown} is not 'dltensor' or 'dltensor_versioned'"


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


# -- torch.Tensor: its C exchange API is a fast path only where it agrees with __dlpack__ -------

cdef object _torch_tensor = None              # torch.Tensor, once torch is imported
cdef DLPackExchangeAPI *_torch_api = NULL   # its __dlpack_c_exchange_api__, when usable
cdef object _torch_api_capsule = None       # keeps the API struct alive


cdef bint _is_torch_tensor(object obj) except -1:
    """isinstance(obj, torch.Tensor), without importing torch (identity, not names)."""
    global _torch_tensor, _torch_api, _torch_api_capsule
    if _torch_tensor is None:
        torch = sys.modules.get("torch")
        tensor = getattr(torch, "Tensor", None) if torch is not None else None
        if not isinstance(tensor, type) or not isinstance(obj, tensor):
            return False
        _torch_tensor = tensor
        cap = getattr(tensor, "__dlpack_c_exchange_api__", None)
        if cap is not None and PyCapsule_IsValid(cap, b"dlpack_exchange_api"):
            api = <DLPackExchangeAPI *>PyCapsule_GetPointer(cap, b"dlpack_exchange_api")
            if (api.header.version.major == DLPACK_MAJOR
                    and api.managed_tensor_from_py_object_no_sync != NULL):
                _torch_api = api
                _torch_api_capsule = cap
    return isinstance(obj, _torch_tensor)


cdef DLPackObject _from_torch(object t):
    """A torch tensor: refuse what torch's export gets wrong; use its C API where it agrees.

    torch's __dlpack__ refuses conjugate-bit and requires_grad tensors and CUDA tensors off the
    current device, but exports a negative-bit view without negating it: that one is refused
    here, on every path. CUDA data is ordered at each export after the stream torch's
    current_work_stream names then, as torch's __dlpack__ would be.
    """
    cdef DLManagedTensorVersioned *m = NULL
    cdef DLPackObject r
    cdef int32_t device_type
    if t.is_neg():
        raise Refusal("__dlpack__: the torch tensor has its negative bit set, and torch "
                      "exports it without negating the values; call t.resolve_neg() first")
    if _torch_api != NULL and type(t) is _torch_tensor and not t.requires_grad:
        try:
            _torch_api.managed_tensor_from_py_object_no_sync(<void *>t, &m)
        except Exception:
            m = NULL                        # __dlpack__ below gives torch's own message
        if m != NULL:
            try:                            # m is ours: read once, dropping r deletes it
                r = _adopt(m, True, t, "__dlpack_c_exchange_api__")
            except BufferError:
                return None                 # torch's own __dlpack__ below gives its message
            device_type = r.dl.device.device_type
            # The conjugate bit exists for complex tensors only (conj() of a real one is itself).
            if ((device_type == kDLCPU
                 or (device_type == kDLCUDA and _torch_api.current_work_stream != NULL
                     and _torch_current(r.dl.device.device_id)))
                    and not (r.dl.dtype.code == kDLComplex and t.is_conj())):
                if device_type == kDLCUDA:
                    r._stream = 0
                    r._work_api = _torch_api
                return r
    return None                             # other devices or conj: torch's own path below


cdef bint _torch_current(int32_t device_id) noexcept:
    """Whether torch's current CUDA device is device_id: torch's __dlpack__ refuses tensors on
    another, and the fast path leaves them (and any doubt) to it, for torch's own BufferError."""
    try:
        return sys.modules["torch"].cuda.current_device() == device_id
    except Exception:
        return False


cdef DLPackObject _from_dlpack_method(object obj):
    """A __dlpack__ provider; via torch's C exchange API when it is equivalent."""
    cdef DLPackObject r
    if _is_torch_tensor(obj):
        r = _from_torch(obj)
        if r is not None:
            return r
    r = _from_capsule(_call_dlpack(obj, None), obj)
    if _cuda_kind(r.dl.device.device_type) or r.dl.device.device_type == kDLROCM:
        r._resync = obj
    return r


cdef DLPackObject _from_ctypes_pointer(object p):
    """Own the DLPack struct a ctypes pointer points at, and NULL the pointer object."""
    from dlpack import ctypes as dlctypes
    cdef bint versioned
    kind = getattr(type(p), "_type_", None)
    if kind is dlctypes.DLManagedTensorVersioned:
        versioned = True
    elif kind is dlctypes.DLManagedTensor:
        versioned = False
    else:
        raise TypeError(f"asdlpack: a ctypes pointer to {getattr(kind, '__name__', kind)}, not "
                        "to dlpack.ctypes.DLManagedTensor or DLManagedTensorVersioned")
    cdef uintptr_t address = _ctypes.cast(p, _ctypes.c_void_p).value or 0
    if address == 0:
        raise Refusal("ctypes pointer: it is NULL (or its tensor was taken already)")
    _ctypes.c_void_p.from_address(_ctypes.addressof(p)).value = None
    return _adopt(<void *>address, versioned, p, "ctypes pointer")


cdef object _tensor_dict(const DLTensor *src, const DLPackVersion *version, uint64_t flags,
                         str protocol):
    """A DLTensor's fields (version None when NULL), for todict.

    Its header, shape and strides are copied before any Python object is made: a finalizer run
    by that allocation could change or free them (docs/spec.md §7).
    """
    cdef DLTensor t = src[0]
    cdef DLPackVersion v
    cdef int64_t *dims = NULL
    cdef int i
    if version != NULL:
        v = version[0]
    _check_dims(protocol, "ndim", t.ndim, t.shape != NULL)
    if t.ndim > 0:
        dims = <int64_t *>malloc(2 * t.ndim * sizeof(int64_t))
        if dims == NULL:
            raise MemoryError()
        memcpy(dims, t.shape, t.ndim * sizeof(int64_t))
        if t.strides != NULL:
            memcpy(dims + t.ndim, t.strides, t.ndim * sizeof(int64_t))
    try:
        return _types.Fields({
            "version": None if version == NULL else (v.major, v.minor),
            "flags": flags,
            "data": <uintptr_t>t.data,
            "device": _device_tuple(t.device),
            "ndim": t.ndim,
            "dtype": (_types.DLDataTypeCode(t.dtype.code) if t.dtype.code <= 17
                      else t.dtype.code, t.dtype.bits, t.dtype.lanes),
            "shape": tuple([dims[i] for i in range(t.ndim)]),
            "strides": (None if t.strides == NULL
                        else tuple([dims[t.ndim + i] for i in range(t.ndim)])),
            "byte_offset": t.byte_offset,
        })
    finally:
        free(dims)


cdef object _capsule_dict(object capsule):
    """todict of a capsule: its struct read (not consumed) through one snapshot."""
    cdef DLManagedTensorVersioned mv
    if not PyCapsule_CheckExact(capsule):
        raise Refusal(_not_a_capsule(capsule))
    if PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        mv = (<DLManagedTensorVersioned *>PyCapsule_GetPointer(capsule, b"dltensor_versioned"))[0]
        if mv.version.major > DLPACK_MAJOR:
            return _types.Fields({"version": (mv.version.major, mv.version.minor),
                                  "flags": mv.flags})
        return _tensor_dict(&mv.dl_tensor, &mv.version, mv.flags, "DLPack capsule")
    if PyCapsule_IsValid(capsule, b"dltensor"):
        return _tensor_dict(&(<DLManagedTensor *>PyCapsule_GetPointer(capsule, b"dltensor"))
                            .dl_tensor, NULL, 0, "DLPack capsule")
    raise Refusal(_capsule_name_refusal(PyCapsule_GetName(capsule)))
