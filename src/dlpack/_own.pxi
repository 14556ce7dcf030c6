# Ownership: adopting a producer's managed tensor, the export block we hand out, its deleters,
# and the capsule destructors (one per struct kind). The copy routine is _copy.pxi's.


cdef extern from *:
    """
    #include "pythread.h"
    /* The thread state attached to this thread, or NULL: whether this thread holds a GIL,
       asked per thread on every Python pydlpack supports.
       - 3.12 and newer: the current thread state is thread-local;
       - 3.10 and 3.11: it is one value per process, the state of whichever thread holds the
         (one) GIL. It is this thread's when it is this thread's PyGILState state (the usual
         consumer), or another state made for this thread (a subinterpreter's, swapped in by
         this thread; dlpk_decref_in_main's) whose thread_id is this thread's. A state that is
         another thread's can be deleted by it while this reads its thread_id: the read is of
         memory the allocator keeps mapped (a small block, below its trim pad) and gives that
         thread's id or the allocator's bookkeeping, never this thread's, so the answer is
         still "not attached"; ASan, which would report the read, is told it is meant. */
    #if PY_VERSION_HEX >= 0x030D0000
    #define dlpk_attached() PyThreadState_GetUnchecked()
    #elif PY_VERSION_HEX >= 0x030C0000
    #define dlpk_attached() _PyThreadState_UncheckedGet()
    #else
    #if defined(__GNUC__) || defined(__clang__)
    __attribute__((no_sanitize_address))
    #endif
    static PyThreadState *dlpk_attached(void) {
        PyThreadState *t = _PyThreadState_UncheckedGet();
        if (t == NULL || t == PyGILState_GetThisThreadState())
            return t;
        return ((volatile PyThreadState *)t)->thread_id == PyThread_get_thread_ident()
            ? t : NULL;
    }
    #endif
    /* Drop a reference to an object of the main interpreter (where pydlpack lives: its module
       loads in one interpreter) from any thread, attached to any interpreter or to none.
       - attached to the main interpreter (the usual consumer; also the thread finalizing it,
         asked first through its own PyGILState thread state, which is alive while a thread
         state that outlived Py_FinalizeEx is not): its GIL is held, drop at once;
       - attached to a subinterpreter (a consumer there holding that GIL): detach, drop with a
         main-interpreter thread state (dlpk_decref_in_main), re-attach. PyGILState_Ensure
         alone would wait for a GIL this thread holds (3.11's shared one): the deadlock that
         PyGILState_Check and comparisons with PyGILState_GetThisThreadState cannot see;
       - attached to none: the same, as NumPy's deleter does.
       While the runtime finalizes, any other thread leaves the reference (taking the GIL
       then would stop the thread for good); after, none touches Python. Returns whether the
       reference was dropped. */
    static void dlpk_decref_in_main(PyObject *o) {
        PyInterpreterState *main_interp = PyInterpreterState_Main();
        PyThreadState *own = PyGILState_GetThisThreadState(), *tmp;
        PyGILState_STATE state;
        if (own == NULL || PyThreadState_GetInterpreter(own) == main_interp) {
            state = PyGILState_Ensure();
            Py_DECREF(o);
            PyGILState_Release(state);
            return;
        }
        /* this thread's PyGILState thread state is a subinterpreter's: one of the main
           interpreter's, for this call only */
        tmp = PyThreadState_New(main_interp);
        PyEval_RestoreThread(tmp);
        Py_DECREF(o);
        PyThreadState_Clear(tmp);
        PyThreadState_DeleteCurrent();
    }
    static int dlpk_drop_ref(PyObject *o) {
        PyInterpreterState *main_interp = PyInterpreterState_Main();
        PyThreadState *t = dlpk_attached(), *saved = NULL;
        if (t != NULL && t == PyGILState_GetThisThreadState()
                && PyThreadState_GetInterpreter(t) == main_interp) {
            Py_DECREF(o);
            return 1;
        }
        if (!Py_IsInitialized())
            return 0;
        if (t != NULL && PyThreadState_GetInterpreter(t) == main_interp) {
            Py_DECREF(o);
            return 1;
        }
        if (t != NULL)
            saved = PyEval_SaveThread();
        dlpk_decref_in_main(o);
        if (saved != NULL)
            PyEval_RestoreThread(saved);
        return 1;
    }
    /* Set a Python error for the caller of a C entry point that may run without the GIL: in
       the thread state attached to this thread, whichever interpreter's it is (taking the GIL
       with PyGILState_Ensure there would wait for a GIL the thread holds); with
       PyGILState_Ensure when none is attached. */
    static void dlpk_set_error(PyObject *type, const char *message) {
        PyGILState_STATE state;
        if (dlpk_attached() != NULL) {
            PyErr_SetString(type, message);
            return;
        }
        state = PyGILState_Ensure();
        PyErr_SetString(type, message);
        PyGILState_Release(state);
    }
    """
    int _drop_ref "dlpk_drop_ref"(PyObject *) nogil
    void _set_error_any_thread "dlpk_set_error"(PyObject *, const char *) nogil


# -- foreign callbacks: one wrapper for every one pydlpack runs ----------------------------------

cdef enum Foreign:
    FOREIGN_MANAGED             # a DLManagedTensor's deleter
    FOREIGN_VERSIONED           # a DLManagedTensorVersioned's deleter
    FOREIGN_SCHEMA              # an ArrowSchema's release
    FOREIGN_ARRAY               # an ArrowArray's release
    FOREIGN_STREAM              # an ArrowArrayStream's release
    FOREIGN_DEVICE_STREAM       # an ArrowDeviceArrayStream's release
    FOREIGN_REF                 # a producer's object's last reference: its destructor runs


cdef void _foreign(Foreign kind, void *p) noexcept:
    """Run the foreign callback of kind on p (a NULL deleter or release: nothing), always, with
    any pending Python error put aside and restored: a callback that runs Python code (ctypes,
    Cython producers, dlpack.Capsule destructors) would fail, or lose the error, with one set
    (docs/spec.md §7). An error the callback leaves set is reported as unraisable, not passed
    on. The GIL is held."""
    cdef PyObject *et
    cdef PyObject *ev
    cdef PyObject *tb
    PyErr_Fetch(&et, &ev, &tb)
    if kind == FOREIGN_MANAGED:
        if (<DLManagedTensor *>p).deleter != NULL:
            (<DLManagedTensor *>p).deleter(<DLManagedTensor *>p)
    elif kind == FOREIGN_VERSIONED:
        if (<DLManagedTensorVersioned *>p).deleter != NULL:
            (<DLManagedTensorVersioned *>p).deleter(<DLManagedTensorVersioned *>p)
    elif kind == FOREIGN_SCHEMA:
        if (<ArrowSchema *>p).release != NULL:
            (<ArrowSchema *>p).release(<ArrowSchema *>p)
    elif kind == FOREIGN_ARRAY:
        if (<ArrowArray *>p).release != NULL:
            (<ArrowArray *>p).release(<ArrowArray *>p)
    elif kind == FOREIGN_STREAM:
        if (<ArrowArrayStream *>p).release != NULL:
            (<ArrowArrayStream *>p).release(<ArrowArrayStream *>p)
    elif kind == FOREIGN_DEVICE_STREAM:
        if (<ArrowDeviceArrayStream *>p).release != NULL:
            (<ArrowDeviceArrayStream *>p).release(<ArrowDeviceArrayStream *>p)
    else:
        _decref_held(<PyObject *>p)
    if PyErr_Occurred() != NULL:
        PyErr_WriteUnraisable(None)
    PyErr_Restore(et, ev, tb)


cdef inline PyObject *_held(object x) noexcept:
    """A reference to x that _foreign(FOREIGN_REF, ...) drops: a producer's result held by a
    reader, so that dropping it never runs a destructor while the reader's refusal is set."""
    Py_INCREF(x)
    return <PyObject *>x


# -- producers' tensors we own ------------------------------------------------------------------

cdef inline void _delete_managed(void *m, bint versioned) noexcept:
    """Hand a producer's struct back to it: call its deleter (NULL means nothing to free)."""
    _foreign(FOREIGN_VERSIONED if versioned else FOREIGN_MANAGED, m)


cdef DLPackObject _adopt(void *m, bint versioned, object base, str protocol):
    """Own a producer's managed tensor from here on; its deleter runs when the view dies.

    A struct of a newer major version is not read (its layout may differ): its deleter runs
    and BufferError is raised. An unversioned struct cannot say whether its memory may be
    written, so it is read-only unless the caller declares otherwise (asdlpack's
    ``legacy_writable``).
    """
    cdef DLPackObject r
    cdef DLTensor t
    cdef DLPackVersion version
    cdef uint64_t flags = FLAG_READ_ONLY
    if m == NULL:
        raise Refusal(f"{protocol}: the managed tensor pointer is NULL")
    r = _new_object()
    r._managed = m                   # from here on, dropping r calls the deleter once
    r._managed_versioned = versioned
    r._base = base
    # The struct and its shape and strides are copied once, before any Python code can run;
    # only the copy is read after that (docs/spec.md §7).
    if versioned:
        version = (<DLManagedTensorVersioned *>m).version
        if version.major > DLPACK_MAJOR:
            raise Refusal(f"{protocol}: field 'version' = {version.major}."
                          f"{version.minor} has a newer major version than this pydlpack "
                          f"implements ({DLPACK_MAJOR}.{DLPACK_MINOR}); upgrade pydlpack")
        t = (<DLManagedTensorVersioned *>m).dl_tensor
        flags = (<DLManagedTensorVersioned *>m).flags & (FLAG_READ_ONLY | FLAG_SUBBYTE_PADDED)
    else:
        t = (<DLManagedTensor *>m).dl_tensor
        _set_legacy_import(r, True)
    if _cuda_kind(t.device.device_type):
        _sync_on_stream(r, CU_STREAM_LEGACY)    # the producer synchronised to it for us
    r._describe_tensor(&t, flags, protocol, 0, -1)
    return r


cdef int _hold_buffer(DLPackObject self, object exporter, int flags, str protocol, str field,
                      str way_out) except -1:
    """Take exporter's buffer into self._view, held until the object dies (a bytearray cannot
    resize meanwhile). Every reader that takes one goes through here: nothing else references
    the object until its reader returns it, so a reader that refuses drops it and __dealloc__
    gives the buffer back at once, before the refusal propagates (the exporter may be in a
    cycle the GC clears later).

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


cdef inline void _drop_buffer(DLPackObject self) noexcept:
    """Give back at once the buffer _hold_buffer took, for a reader that finds it does not
    need it (from_address over memory its owner does not expose)."""
    if self._has_view:
        self._has_view = False
        PyBuffer_Release(<Py_buffer *>&self._view)


cdef inline void _own_base(DLPackObject self, object base) noexcept:
    """The provider the view keeps alive (DLPackObject.base)."""
    self._base = base


cdef inline void _keep_alive(DLPackObject self, object kept) noexcept:
    """What else the description points into, kept alive with the view: an __array_struct__
    capsule, an interface's dicts, an Arrow import, an exchange API's capsule."""
    self._kept_alive = kept


cdef void _release_owned(DLPackObject self) noexcept:
    """On death: give the provider's buffer back and the producer's struct to its deleter."""
    if self._has_view:
        self._has_view = False
        PyBuffer_Release(<Py_buffer *>&self._view)
    if self._managed != NULL:
        _delete_managed(self._managed, self._managed_versioned)
        self._managed = NULL


# -- the export block: one allocation per exported tensor ---------------------------------------

cdef enum:
    # Data pydlpack allocates starts on this boundary (TensorFlow aborts on data not 64-byte
    # aligned; JAX copies it).
    DATA_ALIGN = 256


cdef inline void _block_layout(size_t head, int ndim, size_t *dims_at,
                               size_t *data_at) noexcept nogil:
    """The managed struct, then shape + strides at 8 bytes, then (copies) room for the data to
    start on a DATA_ALIGN boundary: a block with data is data_at + nbytes long."""
    dims_at[0] = (head + 7) & ~(<size_t>7)
    data_at[0] = dims_at[0] + 2 * <size_t>ndim * sizeof(int64_t) + DATA_ALIGN - 1


cdef inline char *_data_start(char *block, size_t data_at) noexcept nogil:
    """Where a block's data starts: the last DATA_ALIGN boundary at or before block + data_at,
    which is past the strides (data_at has DATA_ALIGN - 1 bytes of slack)."""
    return <char *>((<uintptr_t>block + data_at) & ~(<uintptr_t>(DATA_ALIGN - 1)))


cdef enum Export:
    EXPORT_VIEW             # the tensor views self's memory and holds self
    # The data is a copy inside the block (filled from host memory here; from device memory by
    # the caller, _fill_from_device).
    EXPORT_HOST_COPY
    EXPORT_DEVICE_COPY      # the data is owner's device memory (a _DeviceMemory it holds)
    EXPORT_OWNED_COPY       # a C-order copy in memory owner holds; the caller sets data, device


cdef DLTensor *_block_tensor(void *block, bint versioned) noexcept nogil:
    if versioned:
        return &(<DLManagedTensorVersioned *>block).dl_tensor
    return &(<DLManagedTensor *>block).dl_tensor


cdef void *_export(DLPackObject self, bint versioned, Export kind,
                   object owner=None) except NULL:
    """One malloc holds the managed struct, shape, strides and (host copies) the data."""
    cdef int ndim = self.desc.dl.ndim
    cdef size_t dims_at, data_at
    _block_layout(sizeof(DLManagedTensorVersioned) if versioned else sizeof(DLManagedTensor),
                  ndim, &dims_at, &data_at)
    cdef size_t nbytes = <size_t>self.desc.layout.nbytes if kind == EXPORT_HOST_COPY else 0
    cdef char *block
    cdef DLTensor *t
    cdef DLManagedTensorVersioned *mv
    if nbytes > <size_t>INT64_MAX - data_at:
        raise MemoryError(f"__dlpack__: a copy of {self.desc.layout.nbytes} bytes cannot be "
                          "allocated")
    if kind == EXPORT_HOST_COPY:
        block = <char *>_alloc_copy(data_at + nbytes)
    else:
        block = <char *>malloc(dims_at + 2 * <size_t>ndim * sizeof(int64_t))
    if block == NULL:
        raise MemoryError(f"__dlpack__: cannot allocate {data_at + nbytes} bytes")
    if versioned:
        mv = <DLManagedTensorVersioned *>block
        mv.version.major = DLPACK_MAJOR
        mv.version.minor = DLPACK_MINOR
        mv.deleter = _versioned_deleter
        mv.flags = (self.desc.flags & FLAG_SUBBYTE_PADDED) | (
            self.desc.flags & FLAG_READ_ONLY if kind == EXPORT_VIEW else FLAG_IS_COPIED)
    else:
        (<DLManagedTensor *>block).deleter = _legacy_deleter
    t = _block_tensor(block, versioned)
    t[0] = self.desc.dl
    t.byte_offset = 0
    t.shape = <int64_t *>(block + dims_at)
    t.strides = t.shape + ndim
    memcpy(t.shape, self.desc.dl.shape, ndim * sizeof(int64_t))
    if kind == EXPORT_VIEW:
        memcpy(t.strides, self.desc.dl.strides, ndim * sizeof(int64_t))
        owner = self
    else:
        _c_strides(ndim, self.desc.dl.shape, t.strides)
    if kind == EXPORT_HOST_COPY:
        t.data = _data_start(block, data_at)
        t.device.device_type = kDLCPU
        t.device.device_id = 0
        if _host_accessible(self.desc.dl.device.device_type):
            try:
                _gather(<char *>t.data, <const char *>self.desc.dl.data, self)
            except BaseException:       # interrupted (a signal handler raised): nothing holds it
                free(block)
                raise
    elif kind == EXPORT_DEVICE_COPY:
        t.data = <void *><uintptr_t>(<_DeviceMemory>owner).ptr
        t.device.device_type = kDLCUDA
        t.device.device_id = (<_DeviceMemory>owner).device_id
    if owner is not None:
        Py_INCREF(owner)
    if versioned:
        mv.manager_ctx = <void *>owner if owner is not None else NULL
    else:
        (<DLManagedTensor *>block).manager_ctx = <void *>owner if owner is not None else NULL
    return block


cdef inline void _span(DLPackObject self, int64_t *lo, int64_t *hi) noexcept:
    """_span_of a validated non-empty array (_validate refused those that overflow)."""
    _span_of(self.desc.dl.ndim, self.desc.dl.shape, self.desc.dl.strides,
             self.desc.layout.itemsize, lo, hi)


# -- deleters and the capsule destructors --------------------------------------------------------

cdef void _drop_context(void *ctx) noexcept nogil:
    """Release the DLPackObject an export holds, from any thread of any interpreter, GIL held
    or not, during or after shutdown (spec §4; how: dlpk_drop_ref above)."""
    if ctx != NULL:
        _drop_ref(<PyObject *>ctx)


cdef void _versioned_deleter(DLManagedTensorVersioned *m) noexcept nogil:
    if m != NULL:
        _drop_context(m.manager_ctx)
        free(m)


cdef void _legacy_deleter(DLManagedTensor *m) noexcept nogil:
    if m != NULL:
        _drop_context(m.manager_ctx)
        free(m)


cdef void _free_block(DLManagedTensorVersioned *m) noexcept nogil:
    free(m)


cdef inline void _delete_unconsumed(object capsule, bint versioned) noexcept:
    """Free an export nobody consumed, read as the struct it was made with.

    Unconsumed means the capsule still has a DLPack name a consumer has not taken (every
    consumer renames it ``used_…``); a consumer that renamed one to the other kind's name does
    not change which struct it holds.
    """
    cdef PyObject *et
    cdef PyObject *ev
    cdef PyObject *tb
    cdef const char *name = _capsule_name(capsule)
    if name == NULL or name[0] != b'd':     # "used_…": the common case, decided by one byte
        return
    if strcmp(name, b"dltensor_versioned") != 0 and strcmp(name, b"dltensor") != 0:
        return
    _delete_managed(_capsule_pointer(capsule, name), versioned)


cdef void _versioned_capsule_destructor(object capsule) noexcept:
    _delete_unconsumed(capsule, True)


cdef void _legacy_capsule_destructor(object capsule) noexcept:
    _delete_unconsumed(capsule, False)


# -- Arrow structs (docs/spec.md §13): the ones asdlpack moved in, and the ones we export --------

cdef extern from *:
    """
    static inline int64_t dlpk_ref_add(int64_t *p, int64_t d) {
        return __atomic_add_fetch(p, d, __ATOMIC_ACQ_REL);
    }
    """
    int64_t _ref_add "dlpk_ref_add"(int64_t *p, int64_t d) noexcept nogil


@cython.final
@cython.freelist(8)
@cython.auto_pickle(False)
cdef class _ArrowImport:
    """An Arrow array moved in by asdlpack (and the stream it came from), released once, array
    first, when the DLPackObject holding this dies: after every view of it is gone."""
    cdef ArrowDeviceArray device        # device.array.release NULL: no array held
    cdef ArrowArrayStream stream        # release NULL: no stream held

    def __dealloc__(self):
        _foreign(FOREIGN_ARRAY, &self.device.array)
        self.device.array.release = NULL
        _foreign(FOREIGN_STREAM, &self.stream)
        self.stream.release = NULL


ctypedef struct _ArrowAnchor:
    int64_t refs                # exported structs still holding it (atomic)
    PyObject *owner             # the DLPackObject, one reference for all of them
    void *event                 # the CUevent sync_event points at, or NULL
    bint own_event              # recorded by us: destroyed with the anchor
    void *context               # the CUDA context it was recorded in
    unsigned int generation     # the CUDA driver that recorded it


cdef _ArrowAnchor *_anchor_new(object owner) except NULL:
    """A holder of one reference to owner for the structs of one export (refs = 1: the
    caller's, handed to the first struct or dropped)."""
    cdef _ArrowAnchor *a = <_ArrowAnchor *>calloc(1, sizeof(_ArrowAnchor))
    if a == NULL:
        raise MemoryError()
    Py_INCREF(owner)
    a.owner = <PyObject *>owner
    a.refs = 1
    return a


cdef inline void _anchor_hold(_ArrowAnchor *a) noexcept nogil:
    _ref_add(&a.refs, 1)


cdef void _anchor_drop(_ArrowAnchor *a) noexcept nogil:
    """Drop one hold; the last destroys our event and releases the DLPackObject (any thread,
    with or without the GIL; after shutdown the reference is left, as _drop_context does)."""
    if _ref_add(&a.refs, -1) != 0:
        return
    if a.own_event:
        _cu_event_destroy(a.context, a.event, a.generation)
    _drop_context(a.owner)
    free(a)


# What one exported ArrowArray owns: its buffer and child pointer arrays, and the storage of
# its child struct (a consumer may move the child out and release the parent).
ctypedef struct _ArrowNode:
    _ArrowAnchor *anchor
    int64_t n_children
    const void *buffers[2]
    ArrowArray *children[1]
    ArrowArray child


cdef void _arrow_array_release(ArrowArray *a) noexcept nogil:
    """Release callback of our ArrowArrays: children first, then our hold; idempotent."""
    cdef _ArrowNode *node
    cdef ArrowArray *c
    if a == NULL or a.release == NULL:
        return
    node = <_ArrowNode *>a.private_data
    a.release = NULL
    if node.n_children:
        c = node.children[0]
        if c.release != NULL:
            c.release(c)
    _anchor_drop(node.anchor)
    free(node)


# What one exported ArrowSchema owns: its child pointer array, the child's storage and its
# format; its metadata follows the node in the same allocation.
ctypedef struct _SchemaNode:
    int64_t n_children
    ArrowSchema *children[1]
    ArrowSchema child
    char format[24]


cdef void _arrow_schema_release(ArrowSchema *s) noexcept nogil:
    """Release callback of our ArrowSchemas: children first; idempotent."""
    cdef _SchemaNode *node
    cdef ArrowSchema *c
    if s == NULL or s.release == NULL:
        return
    node = <_SchemaNode *>s.private_data
    s.release = NULL
    if node.n_children:
        c = node.children[0]
        if c.release != NULL:
            c.release(c)
    free(node)


cdef enum ArrowKind:
    ARROW_SCHEMA
    ARROW_ARRAY
    ARROW_DEVICE_ARRAY
    ARROW_STREAM
    ARROW_DEVICE_STREAM


cdef inline void _arrow_unconsumed(object capsule, ArrowKind kind) noexcept:
    """Free the base struct of one of our Arrow capsules, releasing it first if no consumer
    moved it out (the PyCapsule interface's rule); read as the kind it was made as, whatever
    the capsule is called now."""
    cdef PyObject *et
    cdef PyObject *ev
    cdef PyObject *tb
    cdef void *p
    PyErr_Fetch(&et, &ev, &tb)
    p = PyCapsule_GetPointer(capsule, PyCapsule_GetName(capsule))
    PyErr_Restore(et, ev, tb)          # clears what a renamed capsule's lookup set
    if p == NULL:
        return
    if kind == ARROW_SCHEMA:
        _foreign(FOREIGN_SCHEMA, p)
    elif kind == ARROW_ARRAY:
        _foreign(FOREIGN_ARRAY, p)
    elif kind == ARROW_DEVICE_ARRAY:
        _foreign(FOREIGN_ARRAY, &(<ArrowDeviceArray *>p).array)
    elif kind == ARROW_STREAM:
        _foreign(FOREIGN_STREAM, p)
    else:
        _foreign(FOREIGN_DEVICE_STREAM, p)
    free(p)


cdef void _arrow_schema_destructor(object capsule) noexcept:
    _arrow_unconsumed(capsule, ARROW_SCHEMA)


cdef void _arrow_array_destructor(object capsule) noexcept:
    _arrow_unconsumed(capsule, ARROW_ARRAY)


cdef void _arrow_device_array_destructor(object capsule) noexcept:
    _arrow_unconsumed(capsule, ARROW_DEVICE_ARRAY)


cdef void _arrow_stream_destructor(object capsule) noexcept:
    _arrow_unconsumed(capsule, ARROW_STREAM)


cdef void _arrow_device_stream_destructor(object capsule) noexcept:
    _arrow_unconsumed(capsule, ARROW_DEVICE_STREAM)
