# Reader: a type's C exchange API (DLPack 1.3 __dlpack_c_exchange_api__), a fast path
# to what its __dlpack__ gives; torch's is asked through torch.pxi's rules.

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


cdef DLPackObject _from_exchange_api(object obj, object cap):
    """asdlpack's exchange-API step for any producer but torch (whose API is _from_torch's),
    through the API of cap, which _usable_api found usable: the tensor; a failed call raises."""
    return _via_api(_usable_api(cap), obj, cap)
