# DLPackObject's declaration: its fields in groups, each written only by its owners (a file, a
# directory or functions; .ci/include_graph.py fails on a write elsewhere, docs/spec.md §1),
# and the methods every included file calls. Cython reads this file before _core.pyx.
from cpython.ref cimport PyObject
from libc.stdint cimport int64_t, uint8_t, uint64_t, uintptr_t

from dlpack._abi cimport DLPackExchangeAPI, DLTensor


cdef extern from "Python.h":
    # Py_buffer under a name Cython does not special-case: for a Py_buffer member it generates
    # a tp_traverse that shows the exporter to the GC and a tp_clear that drops view.obj without
    # releasing the buffer, so a garbage cycle through a view freed the exporter (a bytearray)
    # with a live export, or had CPython clear a memoryview that still had one (a crash). Held
    # this way, the exporter looks referenced from outside until the view is released (NumPy's
    # arrays, which the GC does not track, hold their buffers the same way).
    ctypedef struct HeldBuffer "Py_buffer":
        void *buf
        PyObject *obj
        Py_ssize_t len
        Py_ssize_t itemsize
        int readonly
        int ndim
        char *format
        Py_ssize_t *shape
        Py_ssize_t *strides
        Py_ssize_t *suboffsets


cdef enum:
    INLINE_DIMS = 6          # shape + strides of up to 6 dimensions live inside the object


cdef struct Layout:              # what DLPackObject._validate derives, with overflow checks
    int64_t count                   # elements
    int64_t nbytes                  # bytes they occupy (packed sub-byte types rounded up)
    int64_t itemsize                # bytes per element (1 for packed sub-byte types)
    bint c_contig                   # C-contiguous (strides never applied are normalised)
    bint f_contig                   # Fortran-contiguous


cdef enum Strides:           # what a reader left in dl.strides for _validate
    STRIDES_ELEMENTS         # element strides (DLPack's unit)
    STRIDES_BYTES            # byte strides (array interfaces, buffers): divided by the item size
    STRIDES_C                # none given: C-contiguous, filled in once the shape is validated


cdef struct Description:         # what the data is
    DLTensor dl                     # data already includes byte_offset
    uint64_t flags                  # READ_ONLY and IS_SUBBYTE_TYPE_PADDED
    Layout layout                   # what _validate derives from shape, strides and dtype
    int64_t inline_dims[2 * INLINE_DIMS]    # dl.shape + dl.strides, up to INLINE_DIMS


cdef enum SyncKind:          # how a consumer orders after the producer's work (spec §10)
    SYNC_NONE                # nothing to wait for (host data, or waited for already)
    SYNC_STREAM              # the work is on ProducerSync.stream
    SYNC_API                 # ask ProducerSync.work_api's current_work_stream
    SYNC_PROVIDER            # ask DLPackObject._sync_provider's __dlpack__ again
    SYNC_EVENT               # wait for ProducerSync.event (an Arrow producer's sync_event)


cdef struct ProducerSync:        # one kind at most; the members of the others are zero
    SyncKind kind
    uintptr_t stream
    DLPackExchangeAPI *work_api
    void *event                     # a CUevent


cdef class DLPackObject:
    cdef object __weakref__

    # group description, written by: _readers/ DLPackObject
    cdef Description desc

    # group ownership, written by: _own.pxi
    cdef HeldBuffer _view               # the provider's buffer, when one was taken
    cdef bint _has_view
    cdef void *_managed                 # the provider's DLPack struct we own, if any
    cdef bint _managed_versioned
    cdef object _base                   # the provider
    cdef object _kept_alive             # what else the description points into (a capsule,
    #                                     an interface dict, an Arrow import, an API's capsule)

    # group producer_sync, written by: _cuda/sync.pxi
    cdef ProducerSync sync
    cdef object _sync_provider          # the __dlpack__ provider to ask again (SYNC_PROVIDER)

    # group export_policy, written by: _set_policy _set_plain_kind _set_legacy_import
    #   _set_pickle_mode
    cdef bint _legacy_import            # from an unversioned capsule: read-only unless declared
    cdef bint _legacy_readonly          # the user allows legacy export of read-only data
    # __dlpack__() without max_version gives a versioned capsule (0.2.1's impl_cls;
    # docs/migration.md).
    cdef bint _plain_versioned
    cdef uint8_t _pickle_mode           # how CUDA data pickles (PICKLE_*, docs/spec.md §11)

    # group caches, written by: _fill_buffer DLPackObject.shape
    cdef Py_ssize_t *_pydims            # shape + byte strides for buffer export, built lazily
    cdef object _shape_t

    cdef int _alloc_dims(self, Py_ssize_t ndim, str protocol) except -1
    cdef int _validate(self, str protocol, Strides given, int64_t offset,
                       int64_t bound) except -1
    cdef inline int _describe_tensor(self, const DLTensor *t, uint64_t flags, str protocol,
                                     int64_t offset, int64_t bound) except -1
    cdef int _describe_as(self, DLPackObject src, bint on_host) except -1
    cdef void _declare_writable(self) noexcept
    cdef tuple _raw_strides(self)
    cdef str _span_message(self, str protocol, str where)
