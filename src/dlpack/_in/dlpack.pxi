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


# -- producers' C exchange API (DLPack 1.3 __dlpack_c_exchange_api__): a fast path ----------

cdef extern from *:
    """
    /* The value of a descriptor d (a property, a getset) on obj, as obj.name would give it
       when the type's attribute wins; d itself when it is not a descriptor. */
    static PyObject *dlpk_descr_get(PyObject *d, PyObject *obj) {
        descrgetfunc get = Py_TYPE(d)->tp_descr_get;
        if (get == NULL) {
            Py_INCREF(d);
            return d;
        }
        return get(d, obj, (PyObject *)Py_TYPE(obj));
    }
    /* The value of `api` in the first class of t's MRO whose own dict has `api` or `meth`,
       when that is `api`; None otherwise. It reads tp_mro and each class's dict as
       _PyType_Lookup does: no metaclass __mro__ or __dict__ (Python code) stands in. */
    static PyObject *dlpk_api_before(PyTypeObject *t, PyObject *api, PyObject *meth) {
        PyObject *mro = t->tp_mro, *found = NULL, *dict;
        Py_ssize_t i;
        if (mro == NULL)
            Py_RETURN_NONE;
        Py_INCREF(mro);
        for (i = 0; i < PyTuple_GET_SIZE(mro) && found == NULL; i++) {
            PyObject *c = PyTuple_GET_ITEM(mro, i);
            if (!PyType_Check(c))
                continue;
    #if PY_VERSION_HEX >= 0x030C0000
            dict = PyType_GetDict((PyTypeObject *)c);
    #else
            dict = ((PyTypeObject *)c)->tp_dict;
            Py_XINCREF(dict);
    #endif
            if (dict == NULL)
                continue;
            found = PyDict_GetItemWithError(dict, api);
            if (found != NULL)
                Py_INCREF(found);
            else if (!PyErr_Occurred() && PyDict_GetItemWithError(dict, meth) != NULL)
                found = Py_NewRef(Py_None);
            Py_DECREF(dict);
            if (found == NULL && PyErr_Occurred())
                break;
        }
        Py_DECREF(mro);
        if (found == NULL && !PyErr_Occurred())
            found = Py_NewRef(Py_None);
        return found;
    }
    """
    object _descr_get "dlpk_descr_get"(object, object)
    object _api_before "dlpk_api_before"(type, object, object)


# A producer's entry point as it is: -1 may come without an error set (_api_failed says so).
ctypedef int (*_FromPyObject)(void *, DLManagedTensorVersioned **) noexcept


cdef object _torch_tensor = None              # torch.Tensor, once torch is imported
cdef object _torch_is_neg = None            # torch.Tensor's own is_neg, is_conj and
cdef object _torch_is_conj = None           # requires_grad, looked up once: asking them costs
cdef object _torch_requires_grad = None     # no attribute lookup or bound method per tensor


cdef DLPackExchangeAPI *_usable_api(object cap) noexcept:
    """The DLPack 1.x exchange API a "dlpack_exchange_api" capsule offers, or NULL (_unusable
    says why). A newer major version is not read: its prev_api chain is walked for a 1.x one
    (dlpack.h); an API without managed_tensor_from_py_object_no_sync offers nothing to import.
    """
    cdef DLPackExchangeAPIHeader *h
    cdef int hops
    if not PyCapsule_IsValid(cap, b"dlpack_exchange_api"):
        return NULL
    h = <DLPackExchangeAPIHeader *>PyCapsule_GetPointer(cap, b"dlpack_exchange_api")
    for hops in range(16):                  # a chain longer than DLPack's history is a loop
        if h == NULL or h.version.major < DLPACK_MAJOR:
            return NULL
        if h.version.major == DLPACK_MAJOR:
            if (<DLPackExchangeAPI *>h).managed_tensor_from_py_object_no_sync == NULL:
                return NULL
            return <DLPackExchangeAPI *>h
        h = h.prev_api
    return NULL


cdef str _unusable(object cap):
    """Why _usable_api gave NULL for cap."""
    cdef DLPackExchangeAPIHeader *h
    if not PyCapsule_IsValid(cap, b"dlpack_exchange_api"):
        return f"it is a {type(cap).__name__}, not a \"dlpack_exchange_api\" capsule"
    h = <DLPackExchangeAPIHeader *>PyCapsule_GetPointer(cap, b"dlpack_exchange_api")
    if h.version.major == DLPACK_MAJOR:
        return "its managed_tensor_from_py_object_no_sync is NULL"
    return (f"version {h.version.major}.{h.version.minor} with no {DLPACK_MAJOR}.x API in its "
            f"prev_api chain (this pydlpack implements {DLPACK_MAJOR}.{DLPACK_MINOR})")


cdef object _api_capsule(type t):
    """t's __dlpack_c_exchange_api__ when it serves t's instances, else None.

    Found on the type (never the instance), by a cached lookup that costs little when absent;
    not when a class between t and the API's class overrides __dlpack__ (the API would bypass
    that override). The MRO is read as _PyType_Lookup reads it: a metaclass's __mro__ or
    __dict__ property neither runs nor lies here.
    """
    if _PyType_Lookup(t, "__dlpack_c_exchange_api__") == NULL:
        return None
    return _api_before(t, "__dlpack_c_exchange_api__", "__dlpack__")


cdef DLPackObject _via_api(DLPackExchangeAPI *api, object obj, object keep):
    """obj through api's managed_tensor_from_py_object_no_sync.

    Used for data on the host, and for CUDA data when the API names the producer's current
    stream (each export is ordered after it, as __dlpack__ would order it); any other device is
    refused, for __dlpack__ to be asked. A failed call's Python error propagates; so does one
    a call left set while it returned success (its tensor is handed back first).
    """
    cdef DLManagedTensorVersioned *m = NULL
    cdef DLPackObject r
    cdef int32_t device_type
    cdef _FromPyObject call = <_FromPyObject>api.managed_tensor_from_py_object_no_sync
    if call(<void *>obj, &m) != 0:
        _api_failed()
    if PyErr_Occurred() != NULL:
        _api_error_left(m)
    r = _adopt(m, True, obj, "__dlpack_c_exchange_api__")   # m is ours now; NULL refused
    device_type = r.desc.dl.device.device_type
    if device_type == kDLCPU:
        return r
    if device_type == kDLCUDA and api.current_work_stream != NULL:
        _sync_by_api(r, api)
        _keep_alive(r, keep)                # the API struct lives as long as its capsule
        return r
    raise Refusal(f"__dlpack_c_exchange_api__: data on {_device_name(r.desc.dl.device)} "
                  "cannot be ordered through this API; __dlpack__ is asked instead")


cdef int _api_failed() except -1:
    """Raise the error a failed exchange-API call set (-1 passes it on), or say it set none."""
    if PyErr_Occurred():
        return -1
    raise Refusal("__dlpack_c_exchange_api__: managed_tensor_from_py_object_no_sync failed "
                  "without setting an error")


cdef int _api_error_left(DLManagedTensorVersioned *m) except -1:
    """Pass on the error a call left set while it returned success (0): a broken producer.
    The tensor it gave is ours, as the call said success: its deleter runs, with the error put
    aside meanwhile (a deleter may run Python code)."""
    if m != NULL:
        _delete_managed(m, True)
    return -1


cdef DLPackObject _from_exchange_api(object obj, object cap, list refusals):
    """asdlpack's exchange-API step for any producer but torch (whose API is _from_torch's):
    the tensor, or None with the reason in refusals, for __dlpack__ to be asked next."""
    cdef DLPackExchangeAPI *api = _usable_api(cap)
    if api == NULL:
        refusals.append(("__dlpack_c_exchange_api__", Refusal(
            f"__dlpack_c_exchange_api__: not used: {_unusable(cap)}")))
        return None
    return _via_api(api, obj, cap)          # a failed call raises: the caller records it


cdef bint _is_torch_tensor(object obj) except -1:
    """isinstance(obj, torch.Tensor), without importing torch (identity, not names)."""
    global _torch_tensor, _torch_api, _torch_api_capsule
    global _torch_is_neg, _torch_is_conj, _torch_requires_grad
    cdef PyObject *query[3]
    if _torch_tensor is None:
        torch = sys.modules.get("torch")
        tensor = getattr(torch, "Tensor", None) if torch is not None else None
        if not isinstance(tensor, type) or not isinstance(obj, tensor):
            return False
        query[0] = _PyType_Lookup(<type>tensor, "is_neg")
        query[1] = _PyType_Lookup(<type>tensor, "is_conj")
        query[2] = _PyType_Lookup(<type>tensor, "requires_grad")
        if query[0] == NULL or query[1] == NULL or query[2] == NULL:
            return False                    # not the torch this reader knows
        _torch_is_neg = <object>query[0]
        _torch_is_conj = <object>query[1]
        _torch_requires_grad = <object>query[2]
        _torch_tensor = tensor
        cap = tensor.__dict__.get("__dlpack_c_exchange_api__")
        if cap is not None:
            _torch_api = _usable_api(cap)
            _torch_api_capsule = cap
    return isinstance(obj, _torch_tensor)


cdef inline bint _torch_says(object method, object t) except -1:
    """torch.Tensor's own method called on t (an instance attribute cannot stand in for it)."""
    cdef PyObject *arg = <PyObject *>t
    return bool(PyObject_Vectorcall(method, &arg, 1, NULL))


cdef DLPackObject _from_torch(object t):
    """A torch tensor: refuse what torch's export gets wrong; use its C API where it agrees.

    torch's __dlpack__ refuses requires_grad tensors and CUDA tensors off the current device,
    and conjugate-bit ones by asking an instance attribute; it exports a negative-bit view
    without negating it. Neg and conj bits are refused here, on every path; its C API refuses
    none of these, so they are asked here first (docs/spec.md §3.1). CUDA data is ordered at
    each export after the stream torch's current_work_stream names then, as torch's __dlpack__
    would be.
    """
    cdef DLPackObject r
    if _torch_says(_torch_is_neg, t):
        raise Refusal("__dlpack__: the torch tensor has its negative bit set, and torch "
                      "exports it without negating the values; call t.resolve_neg() first")
    if _torch_api == NULL or type(t) is not _torch_tensor or _descr_get(_torch_requires_grad, t):
        return None
    try:
        r = _via_api(_torch_api, t, None)
    except Exception:
        return None                         # torch's own __dlpack__ gives its message
    if r.desc.dl.device.device_type == kDLCUDA and not _torch_current(r.desc.dl.device.device_id):
        return None
    _torch_conj_check(r, t)
    return r


cdef int _torch_conj_check(DLPackObject self, object t) except -1:
    """Refuse a conjugate-bit tensor's export (its values are not the tensor's), on every path:
    torch's own __dlpack__ asks an instance attribute, which can be made to lie. The bit
    exists for complex tensors only (conj() of a real one is itself)."""
    if self.desc.dl.dtype.code == kDLComplex and _torch_says(_torch_is_conj, t):
        raise Refusal("__dlpack__: the torch tensor has its conjugate bit set, and its "
                      "export would give the unconjugated values; call t.resolve_conj() "
                      "first")
    return 0


cdef bint _torch_current(int32_t device_id) noexcept:
    """Whether torch's current CUDA device is device_id: torch's __dlpack__ refuses tensors on
    another, and the fast path leaves them (and any doubt) to it, for torch's own BufferError."""
    try:
        return sys.modules["torch"].cuda.current_device() == device_id
    except Exception:
        return False


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
