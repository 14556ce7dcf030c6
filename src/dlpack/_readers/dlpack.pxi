# Reader: DLPack — __dlpack__ objects, raw capsules, ctypes pointers (a type's C exchange API
# is exchange_api.pxi's; torch's rules are torch.pxi's).

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


cdef object _tf_eager = None           # tensorflow's EagerTensor, once tensorflow is imported
cdef object _tf_datatype_enum = None   # its own _datatype_enum (an instance cannot stand in)
# TensorFlow dtypes its __dlpack__ aborts the process on (Check failed: DataTypeCanUseMemcpy).
cdef dict _TF_UNEXPORTABLE = {
    7: "a string tensor (variable-length strings, not fixed-size elements); encode it first, "
       "e.g. tf.io.decode_raw or tf.strings.unicode_decode",
    20: "a resource tensor (a handle, not data); read the variable's value first",
    21: "a variant tensor (a handle, not data)",
}


cdef int _refuse_known(object obj) except -1:
    """Refuse, before calling it, what a known producer's __dlpack__ cannot export and aborts
    the interpreter on (TensorFlow's string, resource and variant tensors), as _from_torch
    refuses what torch's export gets wrong. Types by identity, the dtype by the type's own
    method."""
    global _tf_eager, _tf_datatype_enum
    if _tf_eager is None:
        ops = sys.modules.get("tensorflow.python.framework.ops")
        eager = getattr(ops, "EagerTensor", None) if ops is not None else None
        method = getattr(eager, "_datatype_enum", None) if isinstance(eager, type) else None
        if method is None:
            return 0
        _tf_datatype_enum = method
        _tf_eager = eager
    if isinstance(obj, _tf_eager):
        why = _TF_UNEXPORTABLE.get(_tf_datatype_enum(obj))
        if why is not None:
            raise Refusal(f"__dlpack__: TensorFlow cannot export {why} (its own __dlpack__ "
                          "would abort the process, so pydlpack does not call it)")
    return 0


cdef object _call_dlpack(object obj, object stream):
    """obj.__dlpack__ asking for a versioned capsule; older producers get fewer keywords."""
    _refuse_known(obj)
    meth = obj.__dlpack__
    try:
        if stream is None:
            return meth(max_version=_MAX_VERSION)
        return meth(stream=stream, max_version=_MAX_VERSION)
    except TypeError as e:
        if "max_version" not in str(e) and "keyword" not in str(e):
            raise
    return meth() if stream is None else meth(stream=stream)


cdef object _import_stream(object obj):
    """The stream argument of the import's __dlpack__ call: 1 (the legacy default stream) where
    __dlpack_device__ says CUDA, so that the producer orders its work before that stream instead
    of blocking the host until it is done (JAX does for None), as every export asks again with
    its consumer's stream (spec §10); None elsewhere, or where __dlpack_device__ fails."""
    cdef long kind
    try:
        device = obj.__dlpack_device__()
        if type(device[0]) is bool:
            return None
        kind = PyNumber_Index(device[0])   # an exact int: a lying __eq__ decides nothing
    except Exception:
        return None
    if kind == kDLCUDA or kind == kDLCUDAHost or kind == kDLCUDAManaged:
        return CU_STREAM_LEGACY
    return None


cdef DLPackObject _from_dlpack_method(object obj):
    """A __dlpack__ provider; via torch's C exchange API when it is equivalent."""
    cdef DLPackObject r
    cdef PyObject *capsule
    cdef bint torch = _is_torch_tensor(obj)
    if torch:
        r = _from_torch(obj)
        if r is not None:
            return r
    capsule = _held(_call_dlpack(obj, _import_stream(obj)))   # the only reference now
    r = _from_dlpack_result(obj, capsule)
    if torch:
        _torch_conj_check(r, obj)
    if _cuda_kind(r.desc.dl.device.device_type) or r.desc.dl.device.device_type == kDLROCM:
        _sync_by_provider(r, obj)
    return r


cdef DLPackObject _from_dlpack_result(object obj, PyObject *capsule):
    """Read the capsule __dlpack__ returned (a reference _held took), then drop it through
    _foreign: its destructor may run Python code (a dlpack.Capsule's, a ctypes producer's),
    and must not run while a refusal is set (docs/spec.md §7)."""
    try:
        return _from_capsule(<object>capsule, obj)
    finally:
        _foreign(FOREIGN_REF, capsule)


cdef object _dlpack_result_dict(PyObject *capsule):
    """todict of the capsule __dlpack__ returned (a reference _held took), dropped as
    _from_dlpack_result drops it."""
    try:
        return _capsule_dict(<object>capsule)
    finally:
        _foreign(FOREIGN_REF, capsule)


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
