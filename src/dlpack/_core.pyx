# The core type DLPackObject and asdlpack(): a reader for every protocol in (_readers/), a writer
# for every protocol out (_writers/).
# The files it is made of, in dependency order (declarations, then the shared arithmetic, then
# ownership and the driver, then readers and writers, which use them, then asdlpack's walk over
# the readers); a new reader or writer adds its line to its group (a reader also its row to the
# walk's table), and declares what it cimports in _decl.pxi.
include "_decl.pxi"              # cimports and C declarations, for every file below
include "_base.pxi"              # limits, device kinds, checked size arithmetic
include "_copy.pxi"              # the copy routine: allocating copies, gathering elements
include "_cuda/driver.pxi"       # the CUDA driver: entry points, loading, per-device state
include "_cuda/contexts.pxi"     # primary contexts, borrowing, pointer classification
include "_cuda/streams.pxi"      # streams, events, graph capture, stream arguments
include "_cuda/copies.pxi"       # device copies: rows, covering span, 3-D, device to device
include "_cuda/memory.pxi"       # device memory for copies, stream-ordered allocation
include "_cuda/sync.pxi"         # stream ordering: a consumer after the producer's work
include "_cuda/torch.pxi"        # torch's API and current-device rule (readers and writers)
include "_cuda/ipc.pxi"          # CUDA memory and events shared across processes
include "_own.pxi"               # ownership: adopted tensors, the export block, deleters
include "_shm.pxi"               # shared host memory segments (dlpack.share)
include "_arrow_schema.pxi"      # Arrow schemas, read by the reader and the writer
include "_readers/buffer.pxi"    # readers, one per protocol
include "_readers/ndarray.pxi"
include "_readers/array_interface.pxi"
include "_readers/array_struct.pxi"
include "_readers/exchange_api.pxi"
include "_readers/torch.pxi"
include "_readers/dlpack.pxi"
include "_readers/address.pxi"
include "_readers/arrow.pxi"
include "_writers/dlpack.pxi"    # writers, one per protocol
include "_writers/buffer.pxi"
include "_writers/array_interface.pxi"
include "_writers/exchange_api.pxi"
include "_writers/pickle.pxi"
include "_writers/arrow.pxi"
include "_walk.pxi"              # asdlpack's protocol walk: the table of spec §3's steps
include "_compat021.pxi"         # pydlpack 0.2.1's API (impl_cls, per-protocol functions)
include "_abi_layout.pxi"        # the vendored header's sizes and offsets, for the ABI test


cdef str _UNMADE = "DLPackObject cannot be created directly; use dlpack.asdlpack(obj)"

cdef extern from *:
    """
    /* DLPackObject's tp_new as Python sees it (DLPackObject.__new__, DLPackObject()): always
       a TypeError. Readers make objects through the type's own tp_new, called directly. */
    static PyObject *dlpk_unmade;
    static PyObject *dlpk_refuse_new(PyTypeObject *t, PyObject *a, PyObject *k) {
        PyErr_SetObject(PyExc_TypeError, dlpk_unmade);
        return NULL;
    }
    static void dlpk_seal(PyTypeObject *t, PyObject *message) {
        Py_INCREF(message);
        dlpk_unmade = message;
        t->tp_new = dlpk_refuse_new;
        PyType_Modified(t);
    }
    """
    void _seal "dlpk_seal"(type, object)
    void PyObject_GC_Track(object)
    void PyObject_GC_UnTrack(object)
    bint PyObject_GC_IsTracked(object)


cdef int _refuse_byte_offset(str protocol, uint64_t byte_offset, uintptr_t data) except -1:
    """A DLTensor's byte_offset that moves data outside the address space (out of line: the
    describing routine stays small enough to inline)."""
    raise Refusal(f"{protocol}: field 'byte_offset' = {byte_offset} moves the data "
                  f"pointer {data:#x} outside the address space")


cdef inline DLPackObject _new_object():
    """A blank DLPackObject for a reader to fill, unreachable from Python code until _publish
    (docs/spec.md §7): Python cannot construct one (_seal), and the collector does not list it
    (gc.get_objects, gc.get_referrers) while it is blank or half filled."""
    cdef DLPackObject r = DLPackObject.__new__(DLPackObject)
    PyObject_GC_UnTrack(r)
    return r


cdef inline void _publish(DLPackObject self) noexcept:
    """The object describes what its reader validated: from here on the collector sees it."""
    if not PyObject_GC_IsTracked(self):
        PyObject_GC_Track(self)


@cython.final
@cython.freelist(32)
@cython.trashcan(True)      # a chain of views freeing each other unwinds without deep recursion
cdef class DLPackObject:
    """A zero-copy view of an array that speaks every exchange protocol; made by ``asdlpack``
    (or ``from_address``).

    Hand it to any consumer: ``numpy.from_dlpack(dl)``, ``torch.from_dlpack(dl)``,
    ``memoryview(dl)``, ``numpy.asarray(dl)``, ``pickle.dumps(dl)``. It keeps its provider
    (``base``) alive, and the provider's buffer held, until it and every tensor it exported are
    gone; read-only data stays read-only for every consumer that can say so.
    """
    # The fields are declared in _core.pxd in four groups and the caches, each written only by
    # its owners (docs/spec.md §1; .ci/include_graph.py checks it):
    #   desc (Description: dl, flags, layout, inline_dims) -- the readers (_readers/) and this
    #     class's methods (_alloc_dims, _validate; _describe_tensor fills it from a foreign
    #     DLTensor, _describe_as from another object, _declare_writable clears READ_ONLY)
    #   ownership (_view, _has_view, _managed, _managed_versioned, _base, _kept_alive) --
    #     _own.pxi (_hold_buffer, _own_base, _keep_alive, _adopt, _release_owned)
    #   sync (ProducerSync: kind + stream/work_api/event) and _sync_provider -- _cuda/sync.pxi
    #     (the _sync_* setters); _producer_ready is the one reading of it
    #   export policy (_legacy_import, _legacy_readonly, _plain_versioned, _pickle_mode) --
    #     _set_policy, _set_plain_kind, _set_legacy_import, _set_pickle_mode
    #   caches: _pydims (_fill_buffer), _shape_t (the shape property)

    def __cinit__(self):
        self.desc.dl.shape = self.desc.inline_dims

    def __init__(self, *args, **kwargs):
        raise TypeError(_UNMADE)

    def __dealloc__(self):
        _release_owned(self)
        if self.desc.dl.shape != self.desc.inline_dims:
            free(self.desc.dl.shape)
        free(self._pydims)

    # -- the description: readers call _alloc_dims, fill shape and strides, then _validate ------

    cdef int _alloc_dims(self, Py_ssize_t ndim, str protocol) except -1:
        _check_dims(protocol, "ndim", ndim, True)
        if ndim > INLINE_DIMS:
            self.desc.dl.shape = <int64_t *>malloc(2 * ndim * sizeof(int64_t))
            if self.desc.dl.shape == NULL:
                self.desc.dl.shape = self.desc.inline_dims
                raise MemoryError()
        self.desc.dl.ndim = <int32_t>ndim
        self.desc.dl.strides = self.desc.dl.shape + ndim
        return 0

    cdef int _validate(self, str protocol, Strides given, int64_t offset,
                       int64_t bound) except -1:
        """The one routine that validates a reader's shape, strides and dtype.

        Checks extents, element count, bytes and the byte range the elements reach with
        overflow checks; turns byte strides into element strides; when ``bound`` >= 0 the
        elements must lie in the ``bound``-byte buffer that data sits ``offset`` bytes into.
        Strides that are never applied are normalised to C-contiguous ones, so no exporter
        multiplies an arbitrary value: those of extent-1 dimensions, and all of an empty array.
        """
        cdef int i, n = self.desc.dl.ndim
        cdef int64_t isz, lo = 0, hi = 0, expect, end
        cdef bint packed, c = True, f = True
        cdef uintptr_t address = <uintptr_t>self.desc.dl.data
        cdef SizeError err = _item_storage(self.desc.dl.dtype,
                                           self.desc.flags & FLAG_SUBBYTE_PADDED, &isz, &packed)
        if err:
            raise Refusal(_size_message(protocol, err, self.desc.dl.dtype))
        if not _known_device(self.desc.dl.device.device_type):
            _unknown_device(protocol, self.desc.dl.device)
        if self.desc.dl.device.device_type == kDLCPU:
            self.desc.dl.device.device_id = 0   # the host is one device, whatever id was set
        err = _element_count(n, self.desc.dl.shape, &self.desc.layout.count)
        if err == SIZE_OK:
            err = _byte_size(self.desc.layout.count, self.desc.dl.dtype, isz, packed,
                             &self.desc.layout.nbytes)
        if err:
            raise Refusal(_size_message(protocol, err, self.desc.dl.dtype, self.shape))
        self.desc.layout.itemsize = isz
        if given == STRIDES_C or self.desc.layout.count == 0:
            _c_strides(n, self.desc.dl.shape, self.desc.dl.strides)
            if self.desc.layout.count == 0:
                self.desc.layout.c_contig = self.desc.layout.f_contig = True
                _publish(self)
                return 0
        elif given == STRIDES_BYTES:
            for i in range(n):
                if self.desc.dl.shape[i] == 1:
                    continue                    # normalised below
                if packed or self.desc.dl.strides[i] % isz:
                    raise Refusal(
                        f"{protocol}: field 'strides' = {self._raw_strides()} bytes: "
                        f"{self.desc.dl.strides[i]} is not a multiple of the item size {isz} "
                        "(a field of a structured array?)")
            for i in range(n):                  # after every check: refusals name raw bytes
                if self.desc.dl.shape[i] != 1:
                    self.desc.dl.strides[i] //= isz
        expect = 1
        for i in range(n - 1, -1, -1):
            if self.desc.dl.shape[i] == 1:
                self.desc.dl.strides[i] = expect
            elif self.desc.dl.strides[i] != expect:
                c = False
            expect *= self.desc.dl.shape[i]
        expect = 1
        for i in range(n):
            if self.desc.dl.shape[i] != 1 and self.desc.dl.strides[i] != expect:
                f = False
            expect *= self.desc.dl.shape[i]
        if packed and not c:
            raise Refusal(f"{protocol}: field 'strides' = {self.strides}: a packed "
                          f"{self.dtype.name} array must be C-contiguous (elements share "
                          "bytes)")
        if self.desc.dl.data == NULL:
            raise Refusal(f"{protocol}: field 'data' is NULL for a non-empty array")
        if packed:
            hi = self.desc.layout.nbytes
        elif _span_of(n, self.desc.dl.shape, self.desc.dl.strides, isz, &lo, &hi):
            raise Refusal(self._span_message(protocol, "the address space"))
        if (lo < 0 and address < <uintptr_t>0 - <uint64_t>lo) or (
                <uintptr_t>-1 - address < <uint64_t>hi):
            raise Refusal(self._span_message(protocol, "the address space"))
        if bound >= 0 and (_add_ovf(offset, lo, &end) or end < 0
                           or _add_ovf(offset, hi, &end) or end > bound):
            raise Refusal(self._span_message(
                protocol, f"the {bound}-byte buffer given in 'data' (offset {offset})"))
        self.desc.layout.c_contig = c
        self.desc.layout.f_contig = f
        _publish(self)
        return 0

    cdef tuple _raw_strides(self):
        return tuple([self.desc.dl.strides[i] for i in range(self.desc.dl.ndim)])

    cdef str _span_message(self, str protocol, str where):
        return (f"{protocol}: the array (shape {self.shape}, strides {self.strides} elements of "
                f"{self.desc.layout.itemsize} bytes) reaches outside {where}")

    cdef inline int _describe_tensor(self, const DLTensor *t, uint64_t flags, str protocol,
                                     int64_t offset, int64_t bound) except -1:
        """Describe a foreign DLTensor header t (copied by the caller, before any Python code
        could change it) with flags, then _validate it; byte_offset is added to data, checked.
        offset and bound as _validate's (bound -1: no buffer to lie in)."""
        cdef uintptr_t data = <uintptr_t>t.data
        _check_dims(protocol, "ndim", t.ndim, t.shape != NULL)
        self._alloc_dims(t.ndim, protocol)
        if t.ndim > 0:                  # memcpy from NULL is undefined even for 0 bytes
            memcpy(self.desc.dl.shape, t.shape, t.ndim * sizeof(int64_t))
            if t.strides != NULL:
                memcpy(self.desc.dl.strides, t.strides, t.ndim * sizeof(int64_t))
        self.desc.flags = flags
        if t.byte_offset > <uint64_t>INT64_MAX or <uintptr_t>-1 - data < t.byte_offset:
            _refuse_byte_offset(protocol, t.byte_offset, data)
        self.desc.dl.data = <void *>(data + t.byte_offset)
        self.desc.dl.device = t.device
        self.desc.dl.dtype = t.dtype
        return self._validate(protocol, STRIDES_C if t.strides == NULL else STRIDES_ELEMENTS,
                              offset, bound)

    cdef int _describe_as(self, DLPackObject src, bint on_host) except -1:
        """The description of src, validated there (one struct copy; shape and strides then
        point into self); on_host: as CPU memory (pinned or managed memory the host reads)."""
        cdef int64_t *dims
        self._alloc_dims(src.desc.dl.ndim, "asdlpack")
        dims = self.desc.dl.shape
        self.desc = src.desc
        self.desc.dl.shape = dims
        self.desc.dl.strides = dims + src.desc.dl.ndim
        memcpy(dims, src.desc.dl.shape, 2 * src.desc.dl.ndim * sizeof(int64_t))
        if on_host:
            self.desc.dl.device.device_type = kDLCPU
            self.desc.dl.device.device_id = 0
        return 0

    cdef void _declare_writable(self) noexcept:
        """The user declared an unversioned capsule's memory writable (legacy_writable)."""
        self.desc.flags &= ~(<uint64_t>FLAG_READ_ONLY)

    # -- attributes ---------------------------------------------------------------------------

    @property
    def shape(self):
        """Extent of each dimension."""
        if self._shape_t is None:
            self._shape_t = tuple([self.desc.dl.shape[i] for i in range(self.desc.dl.ndim)])
        return self._shape_t

    @property
    def strides(self):
        """Step of each dimension, in elements (DLPack's unit)."""
        return tuple([self.desc.dl.strides[i] for i in range(self.desc.dl.ndim)])

    @property
    def dtype(self):
        """The element type (a ``DType``: code, bits, lanes, name)."""
        cdef DLDataType t = self.desc.dl.dtype
        return _types.dtype(t.code, t.bits, t.lanes)

    @property
    def device(self):
        """``(DLDeviceType, device_id)`` of the memory."""
        return _device_tuple(self.desc.dl.device)

    @property
    def ndim(self):
        """Number of dimensions."""
        return self.desc.dl.ndim

    @property
    def size(self):
        """Number of elements."""
        return self.desc.layout.count

    @property
    def nbytes(self):
        """Bytes the elements occupy (``size * itemsize``; packed sub-byte types rounded up)."""
        return self.desc.layout.nbytes

    @property
    def itemsize(self):
        """Bytes per element (1 for packed sub-byte types)."""
        return self.desc.layout.itemsize

    @property
    def readonly(self):
        """True when the provider marked the memory immutable."""
        return bool(self.desc.flags & FLAG_READ_ONLY)

    @property
    def data_ptr(self):
        """Address of the first element."""
        return <uintptr_t>self.desc.dl.data

    @property
    def base(self):
        """The provider object kept alive by this view."""
        return self._base

    @property
    def flags(self):
        """DLPack flag bits describing the data (READ_ONLY, IS_SUBBYTE_TYPE_PADDED)."""
        return self.desc.flags

    @property
    def c_contiguous(self):
        """True when the elements are laid out in C (row-major) order without gaps."""
        return self.desc.layout.c_contig

    def __dlpack_device__(self):
        """``(DLDeviceType, device_id)`` of the memory, as DLPack consumers ask for it."""
        return _device_tuple(self.desc.dl.device)

    def on_host(self):
        """The same pinned or managed CUDA memory as a CPU object, once the producer's work is
        done: for consumers that refuse kDLCUDAHost/kDLCUDAManaged and never pass dl_device
        (``jax.numpy.from_dlpack(dl.on_host())``; spec §10). CPU data is returned as it is."""
        return _on_host(self)

    @property
    def impl(self):
        """pydlpack 0.2.1's internals, gone: reading it raises an AttributeError naming the way
        out and docs/migration.md (a property: no cost to any other attribute's lookup)."""
        raise _missing_attribute(self, "impl")

    def __repr__(self):
        ro = ", readonly" if self.desc.flags & FLAG_READ_ONLY else ""
        how = (f", pickled={(<_Received>self._base).how}" if type(self._base) is _Received
               else "")
        return (f"DLPackObject(shape={self.shape}, dtype={self.dtype.name}, "
                f"device={_device_name(self.desc.dl.device)}{ro}{how})")

    def __iter__(self):
        """Elements of 1-D CPU data (so ``array.array('d', dl)`` works without NumPy)."""
        if self.desc.dl.ndim != 1:
            raise TypeError(f"iterating a DLPackObject needs 1-D data, not {self.desc.dl.ndim}-D; "
                            "use memoryview(dl).tolist()")
        return iter(memoryview(self))

    def __len__(self):
        """Extent of the first axis, as NumPy's ``len(a)`` (pandas asks it before ``__array__``;
        0-d data has none)."""
        if self.desc.dl.ndim == 0:
            raise TypeError("len() of 0-d data")
        return self.desc.dl.shape[0]

    def __bool__(self):
        """Always true, whatever ``len`` is: a view is an object, not a container to test."""
        return True

    def __reduce_ex__(self, protocol):
        """Pickle support: protocol 5 hands the elements to the pickler as one out-of-band buffer
        (no copy where the pickler takes buffers, as Dask and Ray do); older protocols copy.
        CUDA device data goes as a CUDA IPC handle of the memory itself (spec §11)."""
        return _reduce(self, protocol)

    def __copy__(self):
        """``copy.copy``: the values, as a protocol-4 pickle loads them (a shared object's too,
        not another view of its segment: spec §11)."""
        return _copy_value(self)

    def __deepcopy__(self, memo):
        """``copy.deepcopy``: the values, as ``copy.copy``."""
        return _copy_value(self)

    __dlpack_c_exchange_api__ = PyCapsule_New(&_API, b"dlpack_exchange_api", NULL)

    # __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None) is installed
    # below the class: a fast-call method (_writers/dlpack.pxi), as every consumer calls it.

    def __getbuffer__(self, Py_buffer *view, int flags):
        _fill_buffer(self, view, flags)

    @property
    def __array_interface__(self):
        """NumPy's array interface (v3), for data the CPU can address."""
        return _array_interface(self)

    def __array__(self, dtype=None, copy=None):
        """The data as a NumPy array, zero-copy for CPU data and read-only when the source is
        (what pandas and scikit-learn call); ``copy=False`` where a copy is needed raises
        ``ValueError``, as NumPy 2 asks."""
        return _to_ndarray(self, dtype, copy)

    @property
    def __cuda_array_interface__(self):
        """The CUDA array interface (v3), with the stream consumers must wait on."""
        return _cuda_array_interface(self)

    # The Arrow PyCapsule interface (docs/spec.md §13): zero-copy, the structs hold self.

    def __arrow_c_schema__(self):
        """The Arrow type of the data, as an "arrow_schema" capsule."""
        return _arrow_schema_export(self)

    def __arrow_c_array__(self, requested_schema=None):
        """CPU data as ("arrow_schema", "arrow_array") capsules; no casts."""
        return _arrow_array_export(self, requested_schema, None, False, "__arrow_c_array__")

    def __arrow_c_stream__(self, requested_schema=None):
        """CPU data as an "arrow_array_stream" capsule of one chunk."""
        return _arrow_stream_export(self, requested_schema, None, False, "__arrow_c_stream__")

    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        """Data on any device as ("arrow_schema", "arrow_device_array") capsules; CUDA data
        carries an event recorded on the producer's stream as its sync_event."""
        return _arrow_array_export(self, requested_schema, kwargs, True,
                                   "__arrow_c_device_array__")

    def __arrow_c_device_stream__(self, requested_schema=None, **kwargs):
        """Data on any device as an "arrow_device_array_stream" capsule of one chunk."""
        return _arrow_stream_export(self, requested_schema, kwargs, True,
                                    "__arrow_c_device_stream__")


_install_dlpack_method(DLPackObject)
_seal(DLPackObject, _UNMADE)


cdef DLPackObject _share(DLPackObject src, bint legacy_readonly, bint legacy_writable,
                         bint on_host):
    """A second view of src's memory with its own export policy; src stays the owner. on_host:
    a CPU view of pinned or managed memory, already waited for (nothing more to order)."""
    cdef DLPackObject r = _new_object()
    r._describe_as(src, on_host)
    if not on_host:
        _sync_as(r, src)
    _own_base(r, src)
    _set_legacy_import(r, src._legacy_import)
    _set_plain_kind(r, src._plain_versioned)
    _set_pickle_mode(r, src._pickle_mode)
    _set_policy(r, legacy_readonly, legacy_writable)
    _publish(r)
    return r


cdef DLPackObject _on_host(DLPackObject self):
    """DLPackObject.on_host: a CPU view of memory the host reads in place, after its wait."""
    cdef int32_t kind = self.desc.dl.device.device_type
    if kind == kDLCPU:
        return self
    if not _in_place_on_host(kind):
        raise Refusal(f"on_host: the data is on {_device_name(self.desc.dl.device)}, which the "
                      "CPU cannot read in place; ask for a host copy with "
                      f"__dlpack__(dl_device=({kDLCPU}, 0)) (numpy.from_dlpack(x, "
                      "device='cpu'))")
    _sync_for(self, None, True)
    return _share(self, self._legacy_readonly, False, True)


cdef inline void _set_policy(DLPackObject r, bint legacy_readonly,
                             bint legacy_writable) noexcept:
    """The export policy asdlpack's arguments ask for (legacy_writable also clears an
    unversioned capsule's read-only default from the description)."""
    r._legacy_readonly = legacy_readonly
    if legacy_writable and r._legacy_import:
        r._declare_writable()


cdef inline void _set_plain_kind(DLPackObject r, bint versioned) noexcept:
    """Whether a plain __dlpack__() gives a versioned capsule (0.2.1's impl_cls)."""
    r._plain_versioned = versioned


cdef inline void _set_pickle_mode(DLPackObject r, int mode) noexcept:
    """How CUDA data pickles: asdlpack's cuda_pickle, as a PICKLE_* value (spec §11)."""
    r._pickle_mode = <uint8_t>mode


cdef inline void _set_legacy_import(DLPackObject r, bint legacy) noexcept:
    """Whether the memory came in an unversioned capsule (read-only unless declared)."""
    r._legacy_import = legacy


def asdlpack(obj, impl_cls=None, *, bint allow_legacy_readonly=False,
             bint legacy_writable=False, cuda_pickle=None):
    """Wrap ``obj`` — anything that speaks an array-exchange protocol — without copying.

    ``allow_legacy_readonly=True`` lets legacy (unversioned) DLPack consumers, which cannot see
    a read-only flag, share read-only memory (by default they get a private copy).
    ``legacy_writable=True`` declares that an unversioned capsule's memory may be written
    (unversioned capsules cannot say so, and import read-only by default).
    ``cuda_pickle`` says how CUDA data pickles (spec §11): ``"ipc"`` (None: a DLPackObject's
    own, else this) as a CUDA IPC handle of the memory itself where CUDA shares it, else a host
    copy; ``"copy"`` always a host copy; ``"ipc_only"`` a handle or a refusal.
    ``impl_cls`` is pydlpack 0.2.1's (deprecated; positional as in 0.2.1's
    ``asdlpack(obj, impl_cls=None)``): ``dlpack.ctypes.DLManagedTensorVersioned`` makes a plain
    ``__dlpack__()`` give a versioned capsule; consumers that pass ``max_version`` choose for
    themselves.
    """
    cdef int mode = -1 if cuda_pickle is None else _pickle_mode(cuda_pickle)   # -1: not given
    if impl_cls is not None:
        return _asdlpack_impl_cls(obj, impl_cls, allow_legacy_readonly, legacy_writable,
                                  cuda_pickle)
    return _asdlpack(obj, allow_legacy_readonly, legacy_writable, mode)


cdef object _asdlpack_plain(object obj):
    """asdlpack(obj): what nearly every call is, with no argument to parse."""
    return _asdlpack(obj, False, False, -1)


cdef extern from *:
    """
    /* asdlpack as a METH_FASTCALL | METH_KEYWORDS function: asdlpack(obj), nearly every call,
       goes straight to the reader; any other call to the def with the full signature, which
       parses and checks every argument (and words every error) as it always did. */
    static PyObject *dlpk_asdlpack_full;
    static PyObject *(*dlpk_asdlpack_plain)(PyObject *);
    static PyObject *dlpk_asdlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
        if (nargs == 1 && kwnames == NULL)
            return dlpk_asdlpack_plain(args[0]);
        return PyObject_Vectorcall(dlpk_asdlpack_full, args, nargs, kwnames);
    }
    static PyMethodDef dlpk_asdlpack_def = {"asdlpack", (PyCFunction)(void (*)(void))dlpk_asdlpack,
                                            METH_FASTCALL | METH_KEYWORDS, NULL};
    /* The fast function in place of full (the def) in the module's dict, its docstring full's
       with a text signature (inspect.signature reads it). */
    static PyObject *dlpk_fast_asdlpack(PyObject *full, PyObject *doc, PyObject *module) {
        Py_INCREF(full);
        dlpk_asdlpack_full = full;
        Py_INCREF(doc);                          /* held for good, as the function is */
        dlpk_asdlpack_def.ml_doc = PyBytes_AS_STRING(doc);
        return PyCFunction_NewEx(&dlpk_asdlpack_def, NULL, module);
    }
    """
    object (*_asdlpack_plain_ptr "dlpk_asdlpack_plain")(object)
    object _fast_asdlpack "dlpk_fast_asdlpack"(object, bytes, object)


cdef DLPackObject _asdlpack(object obj, bint allow_legacy_readonly, bint legacy_writable,
                            int mode):
    """asdlpack's body, its arguments parsed (mode -1: cuda_pickle not given)."""
    cdef DLPackObject r
    cdef type t = type(obj)
    if t is DLPackObject:
        r = <DLPackObject>obj
        if mode < 0:                    # kept by the views asdlpack makes (spec §11)
            mode = r._pickle_mode
        if r._legacy_readonly == allow_legacy_readonly and not (
                legacy_writable and r._legacy_import and r.desc.flags & FLAG_READ_ONLY
        ) and r._pickle_mode == mode:
            return r
        r = _share(r, allow_legacy_readonly, legacy_writable, False)
        _set_pickle_mode(r, mode)
        return r
    if t is bytes:
        r = _from_bytes(obj)
    elif t is bytearray or t is memoryview:
        r = _from_buffer(obj)
    elif t is _torch_tensor:
        r = _torch_fast_path(obj)
        if r is None:
            r = _walk_protocols(obj)
    elif t is _ndarray:
        # Same memory, owner and flags as its __dlpack__ at a fraction of the cost; anything
        # unusual (unaligned, structured, ml_dtypes…) takes the full protocol order.
        r = None
        if _ndarray_layout == 1:
            r = _from_ndarray(obj)
        if r is None:
            r = _walk_protocols(obj)
    else:
        r = _walk_protocols(obj)
    _set_policy(r, allow_legacy_readonly, legacy_writable)
    _set_pickle_mode(r, PICKLE_IPC if mode < 0 else mode)
    return r


cdef str _asdlpack_doc = asdlpack.__doc__
if _asdlpack_doc.startswith("asdlpack("):     # Cython's embedded signature: the text one's
    _asdlpack_doc = _asdlpack_doc.partition("\n")[2].lstrip("\n")
_asdlpack_plain_ptr = _asdlpack_plain
asdlpack = _fast_asdlpack(
    asdlpack,
    ("asdlpack(obj, impl_cls=None, *, allow_legacy_readonly=False, legacy_writable=False, "
     "cuda_pickle=None)\n--\n\n" + _asdlpack_doc).encode(),
    __name__)


def todict(obj):
    """Every DLPack field of a capsule, a ``__dlpack__`` object or anything ``asdlpack`` takes.

    Capsules are read, not consumed; ``__dlpack__`` objects are asked for a fresh capsule.
    """
    cdef DLPackObject d
    cdef DLPackVersion version
    cdef PyObject *capsule
    if PyCapsule_CheckExact(obj):
        return _capsule_dict(obj)
    if type(obj) is not DLPackObject and getattr(obj, "__dlpack__", None) is not None:
        capsule = _held(_call_dlpack(obj, None))    # the only reference, once this line ends
        return _dlpack_result_dict(capsule)
    version.major = DLPACK_MAJOR
    version.minor = DLPACK_MINOR
    d = <DLPackObject>obj if type(obj) is DLPackObject else asdlpack(obj)   # its own base
    out = _tensor_dict(<const DLTensor *>&d.desc.dl, &version, d.desc.flags, "asdlpack")
    if type(d._base) is _Received:      # unpickled CUDA data: how it came (spec §11)
        out["pickled"] = (<_Received>d._base).how
    return out


def _export_address(DLPackObject obj, bint versioned):
    """Address of a new managed tensor for a C receiver (see dlpack.ctypes.to_pointer): what
    ``__dlpack__()`` would hand out, ordered after the producer's work in the same way."""
    return <uintptr_t>_export_block(obj, None, versioned, None, None)
