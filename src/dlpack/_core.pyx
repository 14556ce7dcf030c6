# The core type DLPackObject and asdlpack(): every protocol in (_in/), every protocol out (_out/).
# The files it is made of, in dependency order (declarations, then the shared arithmetic, then
# ownership and the driver, then readers and writers, which use them, then asdlpack's walk over
# the readers); a new reader or writer adds its line to its group (a reader also its row to the
# walk's table), and declares what it cimports in _decl.pxi.
include "_decl.pxi"              # cimports and C declarations, for every file below
include "_base.pxi"              # limits, device kinds, checked size arithmetic
include "_copy.pxi"              # the copy routine: allocating copies, gathering elements
include "_cuda.pxi"              # the CUDA driver and stream ordering
include "_own.pxi"               # ownership: adopted tensors, the export block, deleters
include "_arrow_schema.pxi"      # Arrow schemas, read by the reader and the writer
include "_in/buffer.pxi"         # readers, one per protocol
include "_in/ndarray.pxi"
include "_in/array_interface.pxi"
include "_in/array_struct.pxi"
include "_in/exchange_api.pxi"
include "_in/torch.pxi"
include "_in/dlpack.pxi"
include "_in/address.pxi"
include "_in/arrow.pxi"
include "_out/dlpack.pxi"        # writers, one per protocol
include "_out/buffer.pxi"
include "_out/array_interface.pxi"
include "_out/exchange_api.pxi"
include "_out/pickle.pxi"
include "_out/arrow.pxi"
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
    # The fields in groups, each with the files meant to write it (docs/spec.md §1). Today
    # also written elsewhere, to be moved to the owner (counted by field, file):
    #   description: dl, _flags, lay, _inline -- the readers (_in/) and _validate; also
    #     _own.pxi (adopting a tensor), _out/pickle.pxi (unpickling), _copy.pxi (lay), _share
    #   ownership: _view, _has_view, _managed, _managed_versioned, _base, _keep -- _own.pxi;
    #     also every reader (_base, _keep, _view) and _core.pyx (_share, _release_view)
    #   producer sync: _stream, _work_api, _resync, _event (one set at most; _sync_for and
    #     _export_device_copy each write the precedence) -- the readers that meet a producer's
    #     stream (_in/dlpack, _in/array_interface, _in/arrow); also _share and _own.pxi
    #   export options: _legacy_import, _legacy_readonly, _plain_versioned -- _core.pyx,
    #     _own.pxi; caches: _pydims (_out/buffer.pxi), _shape_t (the shape property)
    cdef DLTensor dl                    # the description; data already includes byte_offset
    cdef uint64_t _flags                # READ_ONLY and IS_SUBBYTE_TYPE_PADDED
    cdef Layout lay                     # what _validate derives from shape, strides and dtype
    cdef int64_t _inline[2 * INLINE_DIMS]
    cdef Py_ssize_t *_pydims            # shape + byte strides for buffer export, built lazily
    cdef HeldBuffer _view               # the provider's buffer, when one was taken
    cdef bint _has_view
    cdef void *_managed                 # the provider's DLPack struct we own, if any
    cdef bint _managed_versioned
    cdef bint _legacy_import            # from an unversioned capsule: read-only unless declared
    cdef bint _legacy_readonly          # the user allows legacy export of read-only data
    # __dlpack__() without max_version gives a versioned capsule (0.2.1's impl_cls;
    # docs/migration.md).
    cdef bint _plain_versioned
    cdef uint8_t _pickle_mode           # how CUDA data pickles (PICKLE_*, docs/spec.md §11)
    cdef object _base
    cdef object _keep                   # a second object to keep alive (__array_struct__ capsule)
    cdef uintptr_t _stream              # CUDA: stream the producer's work is on (0: no sync)
    cdef DLPackExchangeAPI *_work_api   # or the producer's API, asked for its current stream
    cdef object _resync                 # or the device __dlpack__ provider to re-ask
    cdef void *_event                   # or an Arrow producer's sync_event (a CUevent)
    cdef object _shape_t
    cdef object __weakref__

    def __cinit__(self):
        self.dl.shape = self._inline

    def __init__(self, *args, **kwargs):
        raise TypeError(_UNMADE)

    def __dealloc__(self):
        self._release_view()
        if self._managed != NULL:
            _delete_managed(self._managed, self._managed_versioned)
            self._managed = NULL
        if self.dl.shape != self._inline:
            free(self.dl.shape)
        free(self._pydims)

    cdef void _release_view(self) noexcept:
        """Give the provider's buffer back (on death: see _hold_buffer)."""
        if self._has_view:
            self._has_view = False
            PyBuffer_Release(<Py_buffer *>&self._view)

    cdef int _hold_buffer(self, object exporter, int flags, str protocol, str field,
                          str way_out) except -1:
        """Take exporter's buffer into _view, held until the object dies (a bytearray cannot
        resize meanwhile). Every reader that takes one goes through here: nothing else
        references the object until its reader returns it, so a reader that refuses drops
        it and __dealloc__ gives the buffer back at once, before the refusal propagates (the
        exporter may be in a cycle the GC clears later).

        When the exporter gives none, the refusal names protocol, field and way out; the
        exporter's own words are added where the request leaves the reason open (strides and
        format: NumPy's long double in non-native order, say), not to a C-contiguous one."""
        try:
            PyObject_GetBuffer(exporter, <Py_buffer *>&self._view, flags)
        except (BufferError, TypeError, ValueError) as e:
            where = f"field '{field}' = " if field else ""
            what = ("C-contiguous buffer" if flags == PyBUF_SIMPLE else
                    f"buffer with strides and format: {type(e).__name__}: {e}")
            raise Refusal(f"{protocol}: {where}{type(exporter).__name__} object gives no "
                          f"{what}{way_out}") from e
        self._has_view = True
        return 0

    # -- construction: readers call _alloc_dims, fill shape and strides, then _validate --------

    cdef int _alloc_dims(self, Py_ssize_t ndim, str protocol) except -1:
        _check_dims(protocol, "ndim", ndim, True)
        if ndim > INLINE_DIMS:
            self.dl.shape = <int64_t *>malloc(2 * ndim * sizeof(int64_t))
            if self.dl.shape == NULL:
                self.dl.shape = self._inline
                raise MemoryError()
        self.dl.ndim = <int32_t>ndim
        self.dl.strides = self.dl.shape + ndim
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
        cdef int i, n = self.dl.ndim
        cdef int64_t isz, lo = 0, hi = 0, expect, end
        cdef bint packed, c = True, f = True
        cdef uintptr_t address = <uintptr_t>self.dl.data
        cdef SizeError err = _item_storage(self.dl.dtype, self._flags & FLAG_SUBBYTE_PADDED,
                                           &isz, &packed)
        if err:
            raise Refusal(_size_message(protocol, err, self.dl.dtype))
        if not _known_device(self.dl.device.device_type):
            _unknown_device(protocol, self.dl.device)
        if self.dl.device.device_type == kDLCPU:
            self.dl.device.device_id = 0    # the host is one device, whatever id a producer set
        err = _element_count(n, self.dl.shape, &self.lay.count)
        if err == SIZE_OK:
            err = _byte_size(self.lay.count, self.dl.dtype, isz, packed, &self.lay.nbytes)
        if err:
            raise Refusal(_size_message(protocol, err, self.dl.dtype, self.shape))
        self.lay.itemsize = isz
        if given == STRIDES_C or self.lay.count == 0:
            _c_strides(n, self.dl.shape, self.dl.strides)
            if self.lay.count == 0:
                self.lay.c_contig = self.lay.f_contig = True
                _publish(self)
                return 0
        elif given == STRIDES_BYTES:
            for i in range(n):
                if self.dl.shape[i] == 1:
                    continue                    # normalised below
                if packed or self.dl.strides[i] % isz:
                    raise Refusal(
                        f"{protocol}: field 'strides' = {self._raw_strides()} bytes: "
                        f"{self.dl.strides[i]} is not a multiple of the item size {isz} "
                        "(a field of a structured array?)")
            for i in range(n):                  # after every check: refusals name raw bytes
                if self.dl.shape[i] != 1:
                    self.dl.strides[i] //= isz
        expect = 1
        for i in range(n - 1, -1, -1):
            if self.dl.shape[i] == 1:
                self.dl.strides[i] = expect
            elif self.dl.strides[i] != expect:
                c = False
            expect *= self.dl.shape[i]
        expect = 1
        for i in range(n):
            if self.dl.shape[i] != 1 and self.dl.strides[i] != expect:
                f = False
            expect *= self.dl.shape[i]
        if packed and not c:
            raise Refusal(f"{protocol}: field 'strides' = {self.strides}: a packed "
                          f"{self.dtype.name} array must be C-contiguous (elements share "
                          "bytes)")
        if self.dl.data == NULL:
            raise Refusal(f"{protocol}: field 'data' is NULL for a non-empty array")
        if packed:
            hi = self.lay.nbytes
        elif _span_of(n, self.dl.shape, self.dl.strides, isz, &lo, &hi):
            raise Refusal(self._span_message(protocol, "the address space"))
        if (lo < 0 and address < <uintptr_t>0 - <uint64_t>lo) or (
                <uintptr_t>-1 - address < <uint64_t>hi):
            raise Refusal(self._span_message(protocol, "the address space"))
        if bound >= 0 and (_add_ovf(offset, lo, &end) or end < 0
                           or _add_ovf(offset, hi, &end) or end > bound):
            raise Refusal(self._span_message(
                protocol, f"the {bound}-byte buffer given in 'data' (offset {offset})"))
        self.lay.c_contig = c
        self.lay.f_contig = f
        _publish(self)
        return 0

    cdef tuple _raw_strides(self):
        return tuple([self.dl.strides[i] for i in range(self.dl.ndim)])

    cdef str _span_message(self, str protocol, str where):
        return (f"{protocol}: the array (shape {self.shape}, strides {self.strides} elements of "
                f"{self.lay.itemsize} bytes) reaches outside {where}")

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
        """Number of dimensions."""
        return self.dl.ndim

    @property
    def size(self):
        """Number of elements."""
        return self.lay.count

    @property
    def nbytes(self):
        """Bytes the elements occupy (``size * itemsize``; packed sub-byte types rounded up)."""
        return self.lay.nbytes

    @property
    def itemsize(self):
        """Bytes per element (1 for packed sub-byte types)."""
        return self.lay.itemsize

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
        """True when the elements are laid out in C (row-major) order without gaps."""
        return self.lay.c_contig

    def __dlpack_device__(self):
        """``(DLDeviceType, device_id)`` of the memory, as DLPack consumers ask for it."""
        return _device_tuple(self.dl.device)

    def on_host(self):
        """The same pinned or managed CUDA memory as a CPU object, once the producer's work is
        done: for consumers that refuse kDLCUDAHost/kDLCUDAManaged and never pass dl_device
        (``jax.numpy.from_dlpack(dl.on_host())``; spec §10). CPU data is returned as it is."""
        return _on_host(self)

    def __repr__(self):
        ro = ", readonly" if self._flags & FLAG_READ_ONLY else ""
        how = (f", pickled={(<_Received>self._base).how}" if type(self._base) is _Received
               else "")
        return (f"DLPackObject(shape={self.shape}, dtype={self.dtype.name}, "
                f"device={_device_name(self.dl.device)}{ro}{how})")

    def __iter__(self):
        """Elements of 1-D CPU data (so ``array.array('d', dl)`` works without NumPy)."""
        if self.dl.ndim != 1:
            raise TypeError(f"iterating a DLPackObject needs 1-D data, not {self.dl.ndim}-D; "
                            "use memoryview(dl).tolist()")
        return iter(memoryview(self))

    def __len__(self):
        """Extent of the first axis, as NumPy's ``len(a)`` (pandas asks it before ``__array__``;
        0-d data has none)."""
        if self.dl.ndim == 0:
            raise TypeError("len() of 0-d data")
        return self.dl.shape[0]

    def __bool__(self):
        """Always true, whatever ``len`` is: a view is an object, not a container to test."""
        return True

    def __reduce_ex__(self, protocol):
        """Pickle support: protocol 5 hands the elements to the pickler as one out-of-band buffer
        (no copy where the pickler takes buffers, as Dask and Ray do); older protocols copy.
        CUDA device data goes as a CUDA IPC handle of the memory itself (spec §11)."""
        return _reduce(self, protocol)

    __dlpack_c_exchange_api__ = PyCapsule_New(&_API, b"dlpack_exchange_api", NULL)

    # __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None) is installed
    # below the class: a fast-call method (_out/dlpack.pxi), as every consumer calls it.

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


cdef DLPackObject _share(DLPackObject src, bint legacy_readonly, bint legacy_writable):
    """A second view of src's memory with its own export policy; src stays the owner."""
    cdef DLPackObject r = _new_object()
    r._alloc_dims(src.dl.ndim, "asdlpack")
    memcpy(r.dl.shape, src.dl.shape, 2 * src.dl.ndim * sizeof(int64_t))
    r.dl.data = src.dl.data
    r.dl.device = src.dl.device
    r.dl.dtype = src.dl.dtype
    r._flags = src._flags
    r.lay = src.lay
    r._stream = src._stream
    r._work_api = src._work_api
    r._resync = src._resync
    r._event = src._event
    r._base = src
    r._legacy_import = src._legacy_import
    r._plain_versioned = src._plain_versioned
    r._pickle_mode = src._pickle_mode
    _set_policy(r, legacy_readonly, legacy_writable)
    _publish(r)
    return r


cdef DLPackObject _on_host(DLPackObject self):
    """DLPackObject.on_host: a CPU view of memory the host reads in place, after its wait."""
    cdef int32_t kind = self.dl.device.device_type
    if kind == kDLCPU:
        return self
    if not _in_place_on_host(kind):
        raise Refusal(f"on_host: the data is on {_device_name(self.dl.device)}, which the CPU "
                      "cannot read in place; ask for a host copy with "
                      f"__dlpack__(dl_device=({kDLCPU}, 0)) (numpy.from_dlpack(x, "
                      "device='cpu'))")
    _sync_for(self, None, True)
    cdef DLPackObject r = _share(self, self._legacy_readonly, False)
    r.dl.device.device_type = kDLCPU
    r.dl.device.device_id = 0
    r._stream = 0                       # waited for: nothing more to order on the host
    r._work_api = NULL
    r._resync = None
    r._event = NULL
    return r


cdef inline void _set_policy(DLPackObject r, bint legacy_readonly,
                             bint legacy_writable) noexcept:
    r._legacy_readonly = legacy_readonly
    if legacy_writable and r._legacy_import:
        r._flags &= ~(<uint64_t>FLAG_READ_ONLY)


def asdlpack(obj, impl_cls=None, *, bint allow_legacy_readonly=False,
             bint legacy_writable=False, cuda_pickle=_PICKLE_MODES[0]):
    """Wrap ``obj`` — anything that speaks an array-exchange protocol — without copying.

    ``allow_legacy_readonly=True`` lets legacy (unversioned) DLPack consumers, which cannot see
    a read-only flag, share read-only memory (by default they get a private copy).
    ``legacy_writable=True`` declares that an unversioned capsule's memory may be written
    (unversioned capsules cannot say so, and import read-only by default).
    ``cuda_pickle`` says how CUDA data pickles (spec §11): ``"ipc"`` as a CUDA IPC handle of
    the memory itself where CUDA shares it, else a host copy; ``"copy"`` always a host copy;
    ``"ipc_only"`` a handle or a refusal.
    ``impl_cls`` is pydlpack 0.2.1's (deprecated; positional as in 0.2.1's
    ``asdlpack(obj, impl_cls=None)``): ``dlpack.ctypes.DLManagedTensorVersioned`` makes a plain
    ``__dlpack__()`` give a versioned capsule; consumers that pass ``max_version`` choose for
    themselves.
    """
    cdef DLPackObject r
    cdef type t = type(obj)
    cdef int mode = PICKLE_IPC if cuda_pickle is _PICKLE_MODES[0] else _pickle_mode(cuda_pickle)
    if impl_cls is not None:
        return _asdlpack_impl_cls(obj, impl_cls, allow_legacy_readonly, legacy_writable,
                                  cuda_pickle)
    if t is DLPackObject:
        r = <DLPackObject>obj
        if r._legacy_readonly == allow_legacy_readonly and not (
                legacy_writable and r._legacy_import and r._flags & FLAG_READ_ONLY
        ) and r._pickle_mode == mode:
            return r
        r = _share(r, allow_legacy_readonly, legacy_writable)
        r._pickle_mode = mode
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
        r = _from_ndarray(obj) if _ndarray_layout == 1 else None
        if r is None:
            r = _walk_protocols(obj)
    else:
        r = _walk_protocols(obj)
    _set_policy(r, allow_legacy_readonly, legacy_writable)
    r._pickle_mode = mode
    return r


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
    d = asdlpack(obj)
    out = _tensor_dict(&d.dl, &version, d._flags, "asdlpack")
    if type(d._base) is _Received:      # unpickled CUDA data: how it came (spec §11)
        out["pickled"] = (<_Received>d._base).how
    return out


def _export_address(DLPackObject obj, bint versioned):
    """Address of a new managed tensor for a C receiver (see dlpack.ctypes.to_pointer): what
    ``__dlpack__()`` would hand out, ordered after the producer's work in the same way."""
    return <uintptr_t>_export_block(obj, None, versioned, None, None)
