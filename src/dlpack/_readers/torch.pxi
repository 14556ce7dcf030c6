# Reader, a fast path: torch.Tensor — torch's rules on the way in (what its __dlpack__ refuses,
# what its export gets wrong), and its C exchange API where it gives the same tensor. The two
# rules the writers share (torch's API, its current CUDA device) are _cuda/torch.pxi's.

cdef object _torch_tensor = None              # torch.Tensor, once torch is imported
cdef object _torch_is_neg = None            # torch.Tensor's own is_neg, is_conj and
cdef object _torch_is_conj = None           # requires_grad, looked up once: asking them costs
cdef object _torch_requires_grad = None     # no attribute lookup or bound method per tensor


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
    if r.desc.dl.device.device_type == kDLCUDA:
        try:
            _torch_current_device(r)
        except Exception:
            return None                 # off the current device, or in doubt: torch decides
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


cdef DLPackObject _torch_fast_path(object t):
    """asdlpack of an exact torch.Tensor: its C exchange API, after the checks its __dlpack__
    makes; None for anything the API leaves (or refuses), which takes the full protocol walk
    for the same result and message."""
    try:
        return _from_torch(t)
    except Exception:
        return None
