# The core type DLPackObject and asdlpack(): every protocol in (_in/), every protocol out (_out/).
cimport cython
from cpython.buffer cimport (
    PyBUF_ANY_CONTIGUOUS, PyBUF_C_CONTIGUOUS, PyBUF_F_CONTIGUOUS, PyBUF_FORMAT, PyBUF_ND,
    PyBUF_RECORDS_RO, PyBUF_SIMPLE, PyBUF_STRIDES, PyBUF_WRITABLE, PyBuffer_Release,
    PyObject_CheckBuffer, PyObject_GetBuffer,
)
from cpython.pycapsule cimport (
    PyCapsule_CheckExact, PyCapsule_GetName, PyCapsule_GetPointer, PyCapsule_IsValid,
    PyCapsule_New, PyCapsule_SetName,
)
from cpython.ref cimport Py_INCREF, Py_XDECREF, PyObject
from libc.stdint cimport INT64_MAX, int32_t, int64_t, uint64_t, uintptr_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy

from dlpack._abi cimport *

import ctypes as _ctypes

from dlpack import _types
from dlpack._types import DLDeviceType

cdef extern from "Python.h":
    int Py_IsInitialized() nogil

cdef enum:
    INLINE_DIMS = 6          # shape + strides of up to 6 dimensions live inside the object

# Devices whose memory the CPU can read and write directly.
cdef inline bint _host_accessible(int32_t device_type) noexcept nogil:
    return (device_type == kDLCPU or device_type == kDLCUDAHost
            or device_type == kDLCUDAManaged or device_type == kDLROCMHost)

cdef inline bint _cuda_kind(int32_t device_type) noexcept nogil:
    return (device_type == kDLCUDA or device_type == kDLCUDAHost
            or device_type == kDLCUDAManaged)

cdef DLPackExchangeAPI _API          # filled in by _out/exchange_api.pxi
cdef dict _DEVICE_TYPES = {int(d): d for d in DLDeviceType}
cdef tuple _CPU0 = (DLDeviceType.kDLCPU, 0)


cdef object _device_tuple(DLDevice dev):
    if dev.device_type == kDLCPU and dev.device_id == 0:
        return _CPU0
    return (_DEVICE_TYPES.get(dev.device_type, dev.device_type), dev.device_id)


cdef str _device_name(DLDevice dev):
    d = _DEVICE_TYPES.get(dev.device_type)
    return f"{d.name if d is not None else dev.device_type}:{dev.device_id}"


@cython.final
@cython.freelist(32)
cdef class DLPackObject:
    """A zero-copy view of an array that speaks every exchange protocol; made by ``asdlpack``.

    It keeps its provider (``base``) alive, and its exported buffer held, until it and every
    tensor it exported are gone.
    """
    cdef DLTensor dl                    # the description; data already includes byte_offset
    cdef uint64_t _flags                # READ_ONLY and IS_SUBBYTE_TYPE_PADDED
    cdef int64_t _inline[2 * INLINE_DIMS]
    cdef Py_ssize_t *_pydims            # shape + byte strides for buffer export, built lazily
    cdef Py_buffer _view                # the provider's buffer, when one was taken
    cdef bint _has_view
    cdef void *_managed                 # the provider's DLPack struct we own, if any
    cdef bint _managed_versioned
    cdef bint _legacy_readonly          # the user allows legacy export of read-only data
    cdef bint _c_contig
    cdef bint _f_contig
    cdef object _base
    cdef object _keep                   # a second object to keep alive (__array_struct__ capsule)
    cdef object _stream                 # CUDA: stream the producer's work is on (None: no sync)
    cdef object _resync                 # CUDA __dlpack__ provider to re-ask with the consumer's stream
    cdef object _shape_t
    cdef object __weakref__

    def __cinit__(self):
        self.dl.shape = self._inline

    def __init__(self, *args, **kwargs):
        raise TypeError("DLPackObject cannot be created directly; use dlpack.asdlpack(obj)")

    def __dealloc__(self):
        if self._has_view:
            PyBuffer_Release(&self._view)
            self._has_view = False
        if self._managed != NULL:
            _delete_managed(self._managed, self._managed_versioned)
            self._managed = NULL
        if self.dl.shape != self._inline:
            free(self.dl.shape)
        free(self._pydims)

    # -- construction helpers used by the protocol modules ------------------------------------

    cdef int _alloc_dims(self, Py_ssize_t ndim) except -1:
        if ndim < 0 or ndim > 0x7FFFFFFF:
            raise BufferError(f"ndim = {ndim} is out of range")
        if ndim > INLINE_DIMS:
            self.dl.shape = <int64_t *>malloc(2 * ndim * sizeof(int64_t))
            if self.dl.shape == NULL:
                self.dl.shape = self._inline
                raise MemoryError()
        self.dl.ndim = <int32_t>ndim
        self.dl.strides = self.dl.shape + ndim
        return 0

    cdef int _finish(self, str protocol) except -1:
        """Validate shape/strides/dtype filled in by a provider module and derive contiguity."""
        cdef int i, n = self.dl.ndim
        cdef int64_t expect = 1, size = 1
        cdef bint c = True, f = True
        if self.dl.dtype.bits == 0 or self.dl.dtype.lanes == 0:
            raise BufferError(f"{protocol}: dtype has bits={self.dl.dtype.bits}, "
                              f"lanes={self.dl.dtype.lanes}; both must be positive")
        for i in range(n):
            if self.dl.shape[i] < 0:
                raise BufferError(f"{protocol}: field 'shape' has a negative extent "
                                  f"{self.dl.shape[i]} in dimension {i}")
            if self.dl.shape[i] and size > INT64_MAX // 16 // self.dl.shape[i]:
                raise BufferError(f"{protocol}: field 'shape' = {self.shape} has more "
                                  "elements than memory can hold")
            size *= self.dl.shape[i]
        for i in range(n - 1, -1, -1):
            if self.dl.shape[i] != 1 and self.dl.strides[i] != expect:
                c = False
            expect *= self.dl.shape[i]
        expect = 1
        for i in range(n):
            if self.dl.shape[i] != 1 and self.dl.strides[i] != expect:
                f = False
            expect *= self.dl.shape[i]
        if size == 0:
            c = f = True
        elif self.dl.data == NULL:
            raise BufferError(f"{protocol}: data pointer is NULL for a non-empty array")
        self._c_contig = c
        self._f_contig = f
        return 0

    cdef inline void _c_strides(self, int64_t *out) noexcept:
        """Write the C-contiguous element strides of this shape into out."""
        cdef int i
        cdef int64_t s = 1
        for i in range(self.dl.ndim - 1, -1, -1):
            out[i] = s
            s *= self.dl.shape[i]

    cdef int64_t _size(self) noexcept:
        cdef int i
        cdef int64_t s = 1
        for i in range(self.dl.ndim):
            s *= self.dl.shape[i]
        return s

    cdef int64_t _nbytes(self) noexcept:
        if self._flags & FLAG_SUBBYTE_PADDED:
            return self._size() * self.dl.dtype.lanes
        return (self._size() * self.dl.dtype.bits * self.dl.dtype.lanes + 7) // 8

    cdef inline Py_ssize_t _itemsize(self) noexcept:
        return (self.dl.dtype.bits * self.dl.dtype.lanes + 7) // 8

    # -- attributes ---------------------------------------------------------------------------

    @property
    def shape(self):
        """Extent of each dimension."""
        if self._shape_t is None:
            self._shape_t = tuple([self.dl.shape[i] for i in range(self.dl.ndim)])
        return self._shape_t

    @property
    def strides(self):
        """Step of each dimension, in elements (DLPack's unit)."""
        return tuple([self.dl.strides[i] for i in range(self.dl.ndim)])

    @property
    def dtype(self):
        """The element type (a ``DType``: code, bits, lanes, name)."""
        return _types.dtype(self.dl.dtype.code, self.dl.dtype.bits, self.dl.dtype.lanes)

    @property
    def device(self):
        """``(DLDeviceType, device_id)`` of the memory."""
        return _device_tuple(self.dl.device)

    @property
    def ndim(self):
        return self.dl.ndim

    @property
    def size(self):
        """Number of elements."""
        return self._size()

    @property
    def nbytes(self):
        """Bytes the elements occupy (``size * itemsize``; packed sub-byte types rounded up)."""
        return self._nbytes()

    @property
    def itemsize(self):
        """Bytes per element, rounded up for sub-byte types."""
        return self._itemsize()

    @property
    def readonly(self):
        """True when the provider marked the memory immutable."""
        return bool(self._flags & FLAG_READ_ONLY)

    @property
    def data_ptr(self):
        """Address of the first element."""
        return <uintptr_t>self.dl.data

    @property
    def base(self):
        """The provider object kept alive by this view."""
        return self._base

    @property
    def flags(self):
        """DLPack flag bits describing the data (READ_ONLY, IS_SUBBYTE_TYPE_PADDED)."""
        return self._flags

    @property
    def c_contiguous(self):
        return self._c_contig

    def __dlpack_device__(self):
        return _device_tuple(self.dl.device)

    def __repr__(self):
        ro = ", readonly" if self._flags & FLAG_READ_ONLY else ""
        return (f"DLPackObject(shape={self.shape}, dtype={self.dtype.name}, "
                f"device={_device_name(self.dl.device)}{ro})")

    def __iter__(self):
        """Elements of 1-D CPU data (so ``array.array('d', dl)`` works without NumPy)."""
        if self.dl.ndim != 1:
            raise TypeError(f"iterating a DLPackObject needs 1-D data, not {self.dl.ndim}-D; "
                            "use memoryview(dl).tolist()")
        return iter(memoryview(self))

    def __reduce__(self):
        raise TypeError("DLPackObject is a view of memory and cannot be pickled")

    __dlpack_c_exchange_api__ = PyCapsule_New(&_API, b"dlpack_exchange_api", NULL)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule (array API signature); each call gives a new capsule."""
        return _dlpack_export(self, stream, max_version, dl_device, copy)

    def __getbuffer__(self, Py_buffer *view, int flags):
        _fill_buffer(self, view, flags)

    def __releasebuffer__(self, Py_buffer *view):
        pass

    @property
    def __array_interface__(self):
        """NumPy's array interface (v3), for data the CPU can address."""
        return _array_interface(self)

    @property
    def __cuda_array_interface__(self):
        """The CUDA array interface (v3), with the stream consumers must wait on."""
        return _cuda_array_interface(self)


include "_in/buffer.pxi"
include "_in/ndarray.pxi"
include "_in/array_interface.pxi"
include "_in/array_struct.pxi"
include "_in/dlpack.pxi"
include "_out/dlpack.pxi"
include "_out/buffer.pxi"
include "_out/array_interface.pxi"
include "_out/exchange_api.pxi"


cdef DLPackObject _share(DLPackObject src, bint legacy_readonly):
    """A second view of src's memory with its own export policy; src stays the owner."""
    cdef DLPackObject r = DLPackObject.__new__(DLPackObject)
    r._alloc_dims(src.dl.ndim)
    memcpy(r.dl.shape, src.dl.shape, 2 * src.dl.ndim * sizeof(int64_t))
    r.dl.data = src.dl.data
    r.dl.device = src.dl.device
    r.dl.dtype = src.dl.dtype
    r._flags = src._flags
    r._c_contig = src._c_contig
    r._f_contig = src._f_contig
    r._stream = src._stream
    r._resync = src._resync
    r._base = src
    r._legacy_readonly = legacy_readonly
    return r


cdef object _ctypes_pointer = _ctypes._Pointer
cdef tuple _INTERFACES = (
    ("__cuda_array_interface__", _read_cuda_array_interface),
    ("__array_interface__", _read_array_interface),
    ("__array_struct__", _read_array_struct),
)


cdef type _ndarray = None      # numpy.ndarray, once one has been seen


cdef DLPackObject _dispatch(object obj):
    """Try each protocol in the order of SPEC §3; fall through when one refuses."""
    global _ndarray
    cdef list refusals = []
    cdef type t = type(obj)
    if _ndarray is None and t.__name__ == "ndarray" and t.__module__ == "numpy":
        _check_ndarray_layout(obj)
        _ndarray = t
    if PyCapsule_CheckExact(obj):
        return _from_capsule(obj, obj)
    if getattr(obj, "__dlpack__", None) is not None:
        try:
            return _from_dlpack_method(obj)
        except Exception as e:
            refusals.append(("__dlpack__", e))
    for name, reader in _INTERFACES:
        try:
            value = getattr(obj, name)
        except AttributeError:
            continue
        except Exception as e:
            refusals.append((name, e))
            continue
        try:
            return reader(obj, value)
        except Exception as e:
            refusals.append((name, e))
    if PyObject_CheckBuffer(obj):
        try:
            return _from_buffer(obj)
        except Exception as e:
            refusals.append(("buffer protocol", e))
    if isinstance(obj, _ctypes_pointer):
        return _from_ctypes_pointer(obj)
    if not refusals:
        raise TypeError(
            f"asdlpack: {type(obj).__module__}.{type(obj).__qualname__} object speaks no "
            "array-exchange protocol (none of __dlpack__, __cuda_array_interface__, "
            "__array_interface__, __array_struct__, the buffer protocol, a DLPack capsule or "
            "a ctypes pointer to a DLPack struct)")
    if len(refusals) == 1:
        raise refusals[0][1]
    lines = "\n".join([f"  {name}: {type(e).__name__}: {e}" for name, e in refusals])
    raise BufferError(f"asdlpack: every protocol that {type(obj).__qualname__} speaks "
                      f"refused:\n{lines}") from refusals[-1][1]


def asdlpack(obj, *, bint allow_legacy_readonly=False):
    """Wrap ``obj`` — anything that speaks an array-exchange protocol — without copying.

    ``allow_legacy_readonly=True`` lets legacy (unversioned) DLPack consumers, which cannot see
    a read-only flag, receive read-only memory; by default that export raises ``BufferError``.
    """
    cdef DLPackObject r
    cdef type t = type(obj)
    if t is DLPackObject:
        r = <DLPackObject>obj
        if r._legacy_readonly == allow_legacy_readonly:
            return r
        return _share(r, allow_legacy_readonly)
    if t is bytes:
        r = _from_bytes(obj)
    elif t is bytearray or t is memoryview:
        r = _from_buffer(obj)
    elif t is _ndarray:
        # Same memory, owner and flags as its __dlpack__ at a fraction of the cost; anything
        # unusual (unaligned, structured, ml_dtypes…) takes the full protocol order.
        r = _from_ndarray(obj) if _ndarray_layout == 1 else None
        if r is None:
            r = _dispatch(obj)
    else:
        r = _dispatch(obj)
    r._legacy_readonly = allow_legacy_readonly
    return r


def todict(obj):
    """Every DLPack field of a capsule, a ``__dlpack__`` object or anything ``asdlpack`` takes.

    Capsules are read, not consumed; ``__dlpack__`` objects are asked for a fresh capsule.
    """
    cdef DLPackObject d
    if PyCapsule_CheckExact(obj):
        return _capsule_dict(obj)
    if type(obj) is not DLPackObject and getattr(obj, "__dlpack__", None) is not None:
        return _capsule_dict(_call_dlpack(obj, None))
    d = asdlpack(obj)
    return _tensor_dict(&d.dl, (DLPACK_MAJOR, DLPACK_MINOR), d._flags)


def _export_address(DLPackObject obj, bint versioned):
    """Address of a new managed tensor for a C receiver (see dlpack.ctypes.to_pointer)."""
    capsule = obj.__dlpack__(max_version=(DLPACK_MAJOR, DLPACK_MINOR) if versioned else None)
    name = b"dltensor_versioned" if versioned else b"dltensor"
    cdef void *m = PyCapsule_GetPointer(capsule, name)
    PyCapsule_SetName(capsule, b"used_" + name)      # the receiver owns it now
    return <uintptr_t>m
