# Reader, a fast path: an exact numpy.ndarray, read from its C struct.
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


cdef int _fill_npy_types() except -1:
    """By NumPy's type number (its C ABI: NPY_BOOL = 0 … NPY_HALF = 23), the PEP 3118 format
    memoryview gives that type's arrays, and from it the dtype the buffer reader would make of
    that format at native size (_base's tables); long double and the rest stay unhandled."""
    cdef int z, c
    memset(_npy_types, 0, sizeof(_npy_types))
    for num, fmt in {0: "?", 1: "b", 2: "B", 3: "h", 4: "H", 5: "i", 6: "I", 7: "l", 8: "L",
                     9: "q", 10: "Q", 11: "f", 12: "d", 14: "Zf", 15: "Zd", 23: "e"}.items():
        z = len(fmt) == 2
        c = ord(fmt[-1])
        _kind_dtype(_FORMAT_KINDS[z][c], _FORMAT_SIZES[z][c][0], &_npy_types[num])
    return 0


_fill_npy_types()


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
    r.desc.dl.dtype = _npy_types[num]
    r._alloc_dims(a.nd, "numpy.ndarray")
    for i in range(a.nd):
        r.desc.dl.shape[i] = a.dimensions[i]
        r.desc.dl.strides[i] = a.strides[i]
    r.desc.dl.data = a.data
    r.desc.dl.device.device_type = kDLCPU
    r.desc.flags = 0 if a.flags & NPY_WRITEABLE else FLAG_READ_ONLY
    _own_base(r, obj)
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


cdef type _ndarray = None      # numpy.ndarray, once one has been seen


cdef bint _is_numpy_ndarray(type t):
    """numpy.ndarray itself, by identity (a look-alike class is not read as NumPy's struct)."""
    np = sys.modules.get("numpy")
    return np is not None and t is getattr(np, "ndarray", None) and not (
        t.__flags__ & Py_TPFLAGS_HEAPTYPE)


cdef inline int _meet_ndarray(type t, object obj) except -1:
    """On the first numpy.ndarray asdlpack walks: check NumPy's struct layout against it, and
    let asdlpack's fast path take the type from then on."""
    global _ndarray
    if _ndarray is None and t.__name__ == "ndarray" and _is_numpy_ndarray(t):
        _check_ndarray_layout(obj)
        _ndarray = t
    return 0


def _ndarray_fast_path():
    """True once an ndarray was seen and NumPy's struct layout matched (tests, diagnostics)."""
    return _ndarray_layout == 1
