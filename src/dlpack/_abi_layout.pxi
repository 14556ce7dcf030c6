# The C structs' sizes and field offsets as this module's compiler lays them out from the
# vendored dlpack.h: tests/test_abi.py holds dlpack.ctypes and _types against them.


def _abi_layout():
    """Sizes and field offsets of the vendored dlpack.h structs (the test that dlpack.ctypes
    and _types agree with the header reads them)."""
    cdef DLTensor t
    cdef DLManagedTensor m
    cdef DLManagedTensorVersioned v
    cdef DLPackExchangeAPI api
    cdef char *pt = <char *>&t
    cdef char *pm = <char *>&m
    cdef char *pv = <char *>&v
    cdef char *pa = <char *>&api
    return {
        "version": (DLPACK_MAJOR, DLPACK_MINOR),
        "flags": (FLAG_READ_ONLY, FLAG_IS_COPIED, FLAG_SUBBYTE_PADDED),
        "DLTensor": (sizeof(DLTensor), {
            "data": <char *>&t.data - pt, "device": <char *>&t.device - pt,
            "ndim": <char *>&t.ndim - pt, "dtype": <char *>&t.dtype - pt,
            "shape": <char *>&t.shape - pt, "strides": <char *>&t.strides - pt,
            "byte_offset": <char *>&t.byte_offset - pt}),
        "DLManagedTensor": (sizeof(DLManagedTensor), {
            "dl_tensor": <char *>&m.dl_tensor - pm, "manager_ctx": <char *>&m.manager_ctx - pm,
            "deleter": <char *>&m.deleter - pm}),
        "DLManagedTensorVersioned": (sizeof(DLManagedTensorVersioned), {
            "version": <char *>&v.version - pv, "manager_ctx": <char *>&v.manager_ctx - pv,
            "deleter": <char *>&v.deleter - pv, "flags": <char *>&v.flags - pv,
            "dl_tensor": <char *>&v.dl_tensor - pv}),
        "DLPackExchangeAPI": (sizeof(DLPackExchangeAPI), {
            "header": <char *>&api.header - pa,
            "managed_tensor_allocator": <char *>&api.managed_tensor_allocator - pa,
            "managed_tensor_from_py_object_no_sync":
                <char *>&api.managed_tensor_from_py_object_no_sync - pa,
            "managed_tensor_to_py_object_no_sync":
                <char *>&api.managed_tensor_to_py_object_no_sync - pa,
            "dltensor_from_py_object_no_sync": <char *>&api.dltensor_from_py_object_no_sync - pa,
            "current_work_stream": <char *>&api.current_work_stream - pa}),
    }
