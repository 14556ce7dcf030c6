# The core type DLPackObject and asdlpack(): every protocol in (_in/), every protocol out (_out/).
# The files it is made of, in dependency order (declarations, then the shared arithmetic, then
# ownership and the driver, then readers and writers, which use them); a new reader or writer
# adds its line to its group, and declares what it cimports in _decl.pxi.
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
include "_in/dlpack.pxi"
include "_in/address.pxi"
include "_in/arrow.pxi"
include "_out/dlpack.pxi"        # writers, one per protocol
include "_out/buffer.pxi"
include "_out/array_interface.pxi"
include "_out/exchange_api.pxi"
include "_out/pickle.pxi"
include "_out/arrow.pxi"


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
    #   desc (Description: dl, flags, layout, inline_dims) -- the readers (_in/) and this
    #     class's methods (_alloc_dims, _validate; _describe_tensor fills it from a foreign
    #     DLTensor, _describe_as from another object, _declare_writable clears READ_ONLY)
    #   ownership (_view, _has_view, _managed, _managed_versioned, _base, _kept_alive) --
    #     _own.pxi (_hold_buffer, _own_base, _keep_alive, _adopt, _release_owned)
    #   sync (ProducerSync: kind + stream/work_api/event) and _sync_provider -- _cuda.pxi
    #     (the _sync_* setters); _producer_ready is the one reading of it
    #   export policy (_legacy_import, _legacy_readonly, _plain_versioned) -- _set_policy,
    #     _set_plain_kind, _set_legacy_import; caches: _pydims (_fill_buffer), _shape_t (shape)

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

    def __repr__(self):
        ro = ", readonly" if self.desc.flags & FLAG_READ_ONLY else ""
        return (f"DLPackObject(shape={self.shape}, dtype={self.dtype.name}, "
                f"device={_device_name(self.desc.dl.device)}{ro})")

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
        (no copy where the pickler takes buffers, as Dask and Ray do); older protocols copy."""
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


cdef inline void _set_legacy_import(DLPackObject r, bint legacy) noexcept:
    """Whether the memory came in an unversioned capsule (read-only unless declared)."""
    r._legacy_import = legacy


cdef object _ctypes_pointer = _ctypes._Pointer
cdef tuple _INTERFACES = (
    ("__cuda_array_interface__", _read_cuda_array_interface),
    ("__array_interface__", _read_array_interface),
    ("__array_struct__", _read_array_struct),
)


cdef type _ndarray = None      # numpy.ndarray, once one has been seen


cdef bint _is_numpy_ndarray(type t):
    """numpy.ndarray itself, by identity (a look-alike class is not read as NumPy's struct)."""
    np = sys.modules.get("numpy")
    return np is not None and t is getattr(np, "ndarray", None) and not (
        t.__flags__ & Py_TPFLAGS_HEAPTYPE)


cdef BaseException _as_refusal(str protocol, BaseException e):
    """A protocol's refusal as a Refusal naming the protocol (ours already are one)."""
    if isinstance(e, Refusal):
        return e
    r = Refusal(f"{protocol}: {type(e).__name__}: {e}")
    r.__cause__ = e
    return r


cdef object _MISSING = object()


cdef object _claim(object value):
    """What a refused interface said its elements are: its dict's typestr, else None.

    The dict's own storage is read (a subclass's get() does not run). None means the protocol
    refused without naming a type we can read (a __dlpack__ that raised, an attribute that
    raised, a non-dict mapping, an __array_struct__ capsule).
    """
    cdef PyObject *typestr
    if isinstance(value, dict):
        typestr = PyDict_GetItem(value, "typestr")
        if typestr != NULL and type(<object>typestr) is str:
            return <object>typestr
    return None


cdef list _note(list claims, str protocol, object claim):
    """claims with (protocol, claim) appended; made on the first refusal, not on every call."""
    if claims is None:
        claims = []
    claims.append((protocol, claim))
    return claims


cdef list _refused(list refusals, list claims, str protocol, BaseException e, object claim):
    """Record protocol's refusal e in refusals and what it said the elements are in claims
    (for _agreed), and return claims. A MemoryError is no refusal: it goes on."""
    if isinstance(e, MemoryError):
        raise e
    refusals.append((protocol, e))
    return _note(claims, protocol, claim)


cdef DLPackObject _agreed(DLPackObject r, str protocol, list claims, object obj):
    """r, when no fallback describes the elements a refused protocol typed as other
    elements (§3); none refused: r at once.

    A refused protocol that named a type T (its typestr) admits only a later protocol whose
    dtype is T; one that named none admits any typed protocol, but not the buffer protocol's
    untyped bytes (format 'B', 'c' or none): they would turn e.g. one datetime64 into eight
    uint8. An untyped buffer is what memoryview(obj) gives: the way out for the raw bytes.
    """
    cdef bytes fmt
    if claims is None:
        return r
    for refused, claim in claims:
        if claim is None:
            if not r._has_view or protocol != "buffer protocol":
                continue
            fmt = b"B" if r._view.format == NULL else <bytes>r._view.format
            if fmt.lstrip(b"@=<>!") not in (b"B", b"c"):
                continue
            raise Refusal(
                f"buffer protocol: format {fmt.decode('latin-1')!r} would give the elements "
                f"as untyped bytes, but {refused} refused this {type(obj).__qualname__} as "
                "typed elements; no fallback may change the elements. Convert it to a type "
                "DLPack carries, or take the raw bytes explicitly: asdlpack(memoryview(obj))")
        try:
            code, bits, _ = _typestr(refused, obj, claim, None)
        except BufferError:
            code = bits = -1                   # a type DLPack cannot carry: nothing agrees
        if (r.desc.dl.dtype.code != code or r.desc.dl.dtype.bits != bits
                or r.desc.dl.dtype.lanes != 1):
            raise Refusal(
                f"{protocol}: would give the elements as {r.dtype.name}, but {refused} typed "
                f"them as 'typestr' = {_types._shown(claim)} and refused; no fallback may "
                "change the elements. Convert the data to a type DLPack carries first"
                + (", or take the raw bytes explicitly: asdlpack(memoryview(obj))"
                   if protocol == "buffer protocol" else ""))
    return r


cdef DLPackObject _dispatch(object obj):
    """Try each protocol in the order of docs/spec.md §3; fall through when one refuses.

    A protocol accepted after others refused must agree with what they said (_agreed).
    """
    global _ndarray
    cdef list refusals = []
    cdef list claims = None             # (refused protocol, typestr or None), for _agreed
    cdef DLPackObject r
    cdef type t = type(obj)
    if _ndarray is None and t.__name__ == "ndarray" and _is_numpy_ndarray(t):
        _check_ndarray_layout(obj)
        _ndarray = t
    if PyCapsule_CheckExact(obj):
        return _from_capsule(obj, obj)
    cdef int arrow = -1                   # the Arrow methods the type has, once looked up
    if not _tensor_type(t):
        arrow = _arrow_type(t)
        if arrow:
            r = _arrow_step(obj, arrow, refusals)   # Arrow first: no instance lookups of the
            arrow = 0                               # tensor protocols (see _type_has)
            if r is not None:
                return r
            claims = _note(claims, "Arrow PyCapsule interface", None)
    # Each step: a reader's object, if it agrees with what refused protocols said, ends the
    # search; its refusal (or a failed lookup) is recorded and the next protocol is asked.
    cap = _api_capsule(t)
    if cap is not None and not _is_torch_tensor(obj):   # torch's: in _from_dlpack_method
        try:
            r = _from_exchange_api(obj, cap, refusals)  # None: refused, reason recorded
            if r is not None:
                return _agreed(r, "__dlpack_c_exchange_api__", claims, obj)
        except Exception as e:
            claims = _refused(refusals, claims, "__dlpack_c_exchange_api__", e, None)
    try:
        if getattr(obj, "__dlpack__", None) is not None:
            return _agreed(_from_dlpack_method(obj), "__dlpack__", claims, obj)
    except Exception as e:
        claims = _refused(refusals, claims, "__dlpack__", e, None)
    for name, reader in _INTERFACES:
        try:
            value = getattr(obj, name, _MISSING)    # a miss raises nothing: no exception made
        except Exception as e:
            claims = _refused(refusals, claims, name, e, None)
            continue
        if value is _MISSING or value is None:     # None: "not supported", as for __hash__
            continue
        try:
            return _agreed(reader(obj, value), name, claims, obj)
        except Exception as e:
            claims = _refused(refusals, claims, name, e, _claim(value))
    value = None        # an __array_struct__ capsule's destructor runs now, no refusal set
    if arrow < 0:
        arrow = _arrow_type(t)
    if arrow:
        r = _arrow_step(obj, arrow, refusals)
        if r is not None:
            return _agreed(r, "Arrow PyCapsule interface", claims, obj)
        claims = _note(claims, "Arrow PyCapsule interface", None)
    if PyObject_CheckBuffer(obj):
        try:
            return _agreed(_from_buffer(obj), "buffer protocol", claims, obj)
        except Exception as e:
            claims = _refused(refusals, claims, "buffer protocol", e, None)
    if isinstance(obj, _ctypes_pointer):
        return _from_ctypes_pointer(obj)
    if not refusals:
        raise TypeError(
            f"asdlpack: {type(obj).__module__}.{type(obj).__qualname__} object speaks no "
            "array-exchange protocol (none of __dlpack__, __cuda_array_interface__, "
            "__array_interface__, __array_struct__, the Arrow PyCapsule interface, the buffer "
            "protocol, a DLPack capsule or a ctypes pointer to a DLPack struct)"
            + _way_in(obj))
    if len(refusals) == 1:
        raise _as_refusal(refusals[0][0], refusals[0][1])
    lines = "\n".join([f"  {name}: {type(e).__name__}: {e}" for name, e in refusals])
    raise Refusal(f"asdlpack: every protocol that {type(obj).__qualname__} speaks "
                  f"refused:\n{lines}") from refusals[-1][1]


cdef str _way_in(object obj):
    """For an object that speaks no protocol: the step that makes an array of its kind
    (spec §3), or "" when there is none to name."""
    cdef type t = type(obj)
    top = (t.__module__ or "").partition(".")[0]
    if top == "tensorflow" and "Variable" in t.__name__:
        return "; a tf.Variable: pass tf.convert_to_tensor(v), or v.read_value()"
    if top == "pandas":
        return ("; a pandas object without Arrow memory: pass x.to_numpy(), or an "
                "Arrow-backed one (dtype='float32[pyarrow]')")
    if isinstance(obj, str):
        return "; a str is text, not an array: pass s.encode() for its bytes"
    if isinstance(obj, (bool, int, float, complex)):
        return ("; a Python number is not an array: pass numpy.asarray(x) (0-d), or "
                "array.array('d', [x]) without NumPy")
    if isinstance(obj, (list, tuple, range)):
        return ("; a Python sequence holds objects, not an array: pass numpy.asarray(x), or "
                "array.array('d', x) without NumPy (both copy)")
    if getattr(obj, "__array__", None) is not None:
        return "; it converts itself to NumPy (__array__): pass numpy.asarray(x)"
    return ""


def asdlpack(obj, impl_cls=None, *, bint allow_legacy_readonly=False,
             bint legacy_writable=False):
    """Wrap ``obj`` — anything that speaks an array-exchange protocol — without copying.

    ``allow_legacy_readonly=True`` lets legacy (unversioned) DLPack consumers, which cannot see
    a read-only flag, share read-only memory (by default they get a private copy).
    ``legacy_writable=True`` declares that an unversioned capsule's memory may be written
    (unversioned capsules cannot say so, and import read-only by default).
    ``impl_cls`` is pydlpack 0.2.1's (deprecated; positional as in 0.2.1's
    ``asdlpack(obj, impl_cls=None)``): ``dlpack.ctypes.DLManagedTensorVersioned`` makes a plain
    ``__dlpack__()`` give a versioned capsule; consumers that pass ``max_version`` choose for
    themselves.
    """
    cdef DLPackObject r
    cdef type t = type(obj)
    if impl_cls is not None:
        from dlpack import _legacy
        return _plain_kind(asdlpack(obj, allow_legacy_readonly=allow_legacy_readonly,
                                    legacy_writable=legacy_writable),
                           _legacy.impl_cls_versioned(impl_cls, "asdlpack(obj, impl_cls=...)"))
    if t is DLPackObject:
        r = <DLPackObject>obj
        if r._legacy_readonly == allow_legacy_readonly and not (
                legacy_writable and r._legacy_import and r.desc.flags & FLAG_READ_ONLY):
            return r
        return _share(r, allow_legacy_readonly, legacy_writable, False)
    if t is bytes:
        r = _from_bytes(obj)
    elif t is bytearray or t is memoryview:
        r = _from_buffer(obj)
    elif t is _torch_tensor:
        # torch's C exchange API, after the checks its __dlpack__ makes; anything it leaves
        # (or refuses) takes the full protocol order, for the same result and message.
        try:
            r = _from_torch(obj)
        except Exception:
            r = None
        if r is None:
            r = _dispatch(obj)
    elif t is _ndarray:
        # Same memory, owner and flags as its __dlpack__ at a fraction of the cost; anything
        # unusual (unaligned, structured, ml_dtypes…) takes the full protocol order.
        r = _from_ndarray(obj) if _ndarray_layout == 1 else None
        if r is None:
            r = _dispatch(obj)
    else:
        r = _dispatch(obj)
    _set_policy(r, allow_legacy_readonly, legacy_writable)
    return r


cdef DLPackObject _plain_kind(DLPackObject r, bint versioned):
    """r, or a second view of its memory, whose plain __dlpack__() gives the capsule kind asked."""
    if r._plain_versioned != versioned:
        r = _share(r, r._legacy_readonly, False, False)
        _set_plain_kind(r, versioned)
    return r


def _asdlpack_via(obj, str protocol, bint versioned=False):
    """asdlpack through ``protocol`` alone, with the same reader and checks (pydlpack 0.2.1's
    per-protocol functions, dlpack._legacy); ``versioned`` as 0.2.1's impl_cls asked."""
    cdef DLPackObject r
    value = _MISSING
    if protocol not in ("__dlpack__", "buffer protocol", "__array_interface__",
                        "__cuda_array_interface__"):
        raise ValueError(f"_asdlpack_via: unknown protocol {protocol!r}")
    try:            # a provider's raising property is wrapped as asdlpack wraps it (§7)
        if protocol == "__dlpack__":
            present = getattr(obj, "__dlpack__", None) is not None
        elif protocol == "buffer protocol":
            present = PyObject_CheckBuffer(obj)
        else:
            value = getattr(obj, protocol, _MISSING)
            present = value is not _MISSING and value is not None
    except MemoryError:
        raise
    except Exception as e:
        raise _as_refusal(protocol, e)
    if not present:
        raise TypeError(f"{protocol}: {type(obj).__module__}.{type(obj).__qualname__} object "
                        f"does not speak it; dlpack.asdlpack(obj) tries every protocol")
    try:
        if protocol == "__dlpack__":
            r = _from_dlpack_method(obj)
        elif protocol == "buffer protocol":
            r = _from_buffer(obj)
        else:
            r = _from_interface_dict(obj, value, protocol,
                                     protocol == "__cuda_array_interface__")
    except MemoryError:
        raise
    except Exception as e:
        raise _as_refusal(protocol, e)
    _set_plain_kind(r, versioned)
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
    return _tensor_dict(<const DLTensor *>&d.desc.dl, &version, d.desc.flags, "asdlpack")


def _export_address(DLPackObject obj, bint versioned):
    """Address of a new managed tensor for a C receiver (see dlpack.ctypes.to_pointer): what
    ``__dlpack__()`` would hand out, ordered after the producer's work in the same way."""
    return <uintptr_t>_export_block(obj, None, versioned, None, None)


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
