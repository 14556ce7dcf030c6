# Provider fast path: an exact numpy.ndarray, read from its C struct.
# NumPy's C macros (PyArray_DATA, PyArray_DIMS, PyArray_TYPE, …) bake these field offsets into
# every compiled extension, so they are ABI-stable; we still check them once against NumPy's
# Python-level view of the first array seen, and use __array_struct__ if they disagree.

cdef extern from *:
    """
    typedef struct {
        PyObject_HEAD
        char *data; int nd; Py_ssize_t *dimensions; Py_ssize_t *strides;
        PyObject *base; PyObject *descr; int flags;
    } dlpk_ndarray;
    typedef struct {
        PyObject_HEAD
        PyTypeObject *typeobj; char kind; char type; char byteorder; char former_flags;
        int type_num;
    } dlpk_descr;
    """
    ctypedef struct dlpk_ndarray:
        char *data
        int nd
        Py_ssize_t *dimensions
        Py_ssize_t *strides
        PyObject *descr
        int flags
    ctypedef struct dlpk_descr:
        char byteorder
        int type_num

cdef enum:
    NPY_TYPES = 24

cdef DLDataType _npy_types[NPY_TYPES]     # by NumPy type number; bits 0 = not handled here
cdef int _ndarray_layout = 0               # 0 unchecked, 1 checked and right, -1 use the struct


cdef void _npy_type(int num, uint8_t code, uint8_t bits) noexcept:
    _npy_types[num].code = code
    _npy_types[num].bits = bits
    _npy_types[num].lanes = 1


memset(_npy_types, 0, sizeof(_npy_types))          # bits 0: not handled here
_npy_type(0, kDLBool, 8)
_npy_type(1, kDLInt, 8)
_npy_type(2, kDLUInt, 8)
_npy_type(3, kDLInt, 16)
_npy_type(4, kDLUInt, 16)
_npy_type(5, kDLInt, 32)
_npy_type(6, kDLUInt, 32)
_npy_type(7, kDLInt, 8 * sizeof(long))
_npy_type(8, kDLUInt, 8 * sizeof(long))
_npy_type(9, kDLInt, 64)
_npy_type(10, kDLUInt, 64)
_npy_type(11, kDLFloat, 32)
_npy_type(12, kDLFloat, 64)
_npy_type(14, kDLComplex, 64)
_npy_type(15, kDLComplex, 128)
_npy_type(23, kDLFloat, 16)


cdef DLPackObject _from_ndarray(object obj):
    """The common ndarray in C; None for anything unusual (the caller takes another path).

    The object is made first: its allocation may run a finalizer that reshapes or retypes the
    array, and the struct is then read with no Python code in between.
    """
    cdef dlpk_ndarray *a = <dlpk_ndarray *><PyObject *>obj
    cdef DLPackObject r = _new_object()
    cdef dlpk_descr *d = <dlpk_descr *>a.descr
    cdef int i, num = d.type_num
    cdef Py_ssize_t itemsize
    if num < 0 or num >= NPY_TYPES or _npy_types[num].bits == 0 or not a.flags & NPY_ALIGNED:
        return None
    itemsize = _npy_types[num].bits // 8
    if itemsize > 1 and not _native_order(d.byteorder):
        return None
    for i in range(a.nd):
        if a.strides[i] % itemsize:
            return None
    r.dl.dtype = _npy_types[num]
    r._alloc_dims(a.nd, "numpy.ndarray")
    for i in range(a.nd):
        r.dl.shape[i] = a.dimensions[i]
        r.dl.strides[i] = a.strides[i]
    r.dl.data = a.data
    r.dl.device.device_type = kDLCPU
    r._flags = 0 if a.flags & NPY_WRITEABLE else FLAG_READ_ONLY
    r._base = obj
    r._validate("numpy.ndarray", STRIDES_BYTES, 0, -1)
    return r


cdef int _check_ndarray_layout(object obj) except -1:
    """Compare the C view of one array with NumPy's own answers; on any doubt, stop using it."""
    global _ndarray_layout
    cdef dlpk_ndarray *a = <dlpk_ndarray *><PyObject *>obj
    cdef dlpk_descr *d = <dlpk_descr *>a.descr
    right = (
        <uintptr_t>a.data == obj.__array_interface__["data"][0]
        and a.nd == obj.ndim
        and tuple([a.dimensions[i] for i in range(a.nd)]) == obj.shape
        and tuple([a.strides[i] for i in range(a.nd)]) == obj.strides
        and d.type_num == obj.dtype.num
        and bool(a.flags & NPY_WRITEABLE) == obj.flags.writeable
        and bool(a.flags & NPY_ALIGNED) == obj.flags.aligned
    )
    _ndarray_layout = 1 if right else -1
    return 0


def _ndarray_fast_path():
    """True once an ndarray was seen and NumPy's struct layout matched (tests, diagnostics)."""
    return _ndarray_layout == 1
