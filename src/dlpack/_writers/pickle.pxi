# Writer: pickle (docs/spec.md §11). Protocol >= 5 hands the elements to the pickler as one
# PickleBuffer (PEP 574: out-of-band when the pickler has a buffer_callback, so Dask, Ray and
# shared-memory carriers move them without a copy into the stream); protocol < 5 copies them
# in-band, as does multiprocessing's own pickler (it takes no buffer_callback).
# _rebuild is the unpickler's side: it trusts nothing in the stream and validates it all with
# the same _validate every reader uses.

# A strided array is sent as the span its elements reach (zero-copy, strides kept) unless the
# gaps in that span are more than half its element bytes; then as a C-contiguous copy. Every
# carrier copies the buffer at least once (into the stream, a socket, a store), and a gather into
# fresh huge pages costs less than copying the gaps: a[:, ::2] of 256 MiB pickles in-band in half
# NumPy's time as a copy, in 0.75x as its span (1.3x at 32 MiB).

cdef uint64_t _PICKLED_FLAGS = FLAG_READ_ONLY | FLAG_SUBBYTE_PADDED
# The fields of each kind of pickle, in order, as refusals name them.
cdef tuple _HOST_FIELDS = ("data", "code", "bits", "lanes", "shape", "strides", "offset", "flags")
cdef tuple _COPY_FIELDS = ("kind", "device", "args")
cdef tuple _SHARED_FIELDS = ("pid", "fd", "device", "inode", "token", "serial", "offset", "code",
                             "bits", "lanes", "shape", "strides", "flags")
cdef tuple _IPC_FIELDS = ("handle", "offset", "device", "code", "bits", "lanes", "shape",
                          "strides", "flags", "event", "pid", "token")


@cython.final
@cython.auto_pickle(False)    # internal: never pickled (DLPackObject has its own reduce)
cdef class _Span:
    """A flat byte buffer over ``len`` bytes at ``ptr`` that keeps their owner alive.

    PickleBuffer needs an object with the buffer protocol; the array's own buffer export has no
    format for bfloat16, float8 or packed int4, and is not contiguous when strided, so the
    pickler gets the raw bytes of the span instead.
    """
    cdef char *ptr
    cdef Py_ssize_t len
    cdef Py_ssize_t one                 # the stride: 1 byte (the view may be copied by value)
    cdef bint readonly
    cdef object owner
    cdef void *copy                     # or the C-contiguous copy it owns (_alloc_copy's)

    def __dealloc__(self):
        free(self.copy)

    def __getbuffer__(self, Py_buffer *view, int flags):
        if flags & PyBUF_WRITABLE and self.readonly:
            raise Refusal("pickle: the data is read-only")
        view.buf = self.ptr
        view.obj = self
        view.len = self.len
        view.itemsize = 1
        view.readonly = self.readonly
        view.ndim = 1
        view.format = <char *>b"B" if flags & PyBUF_FORMAT else NULL
        view.shape = &self.len if flags & PyBUF_ND else NULL
        self.one = 1
        view.strides = &self.one if flags & PyBUF_STRIDES == PyBUF_STRIDES else NULL
        view.suboffsets = NULL
        view.internal = NULL


cdef object _reduce(DLPackObject self, int protocol):
    """``__reduce_ex__``: CUDA data as _reduce_cuda sends it, data in a shared segment as its
    handle (_reduce_shared), the rest as _reduce_host."""
    cdef int64_t at = 0
    if _cuda_kind(self.desc.dl.device.device_type):
        return _reduce_cuda(self, protocol)
    seg = _shm_origin(self, &at)
    if seg is not None:
        return _reduce_shared(self, seg, at)
    return _reduce_host(self, protocol)


cdef object _copy_value(DLPackObject self):
    """``copy.copy`` and ``copy.deepcopy``: what a protocol-4 pickle loads, but data in a shared
    segment copied as host data is, not sent as its handle: a copy is a value (spec §11)."""
    cdef int64_t at = 0
    fn, args = (_reduce_host(self, 4) if _shm_origin(self, &at) is not None
                else _reduce(self, 4))
    return fn(*args)


cdef object _reduce_host(DLPackObject self, int protocol):
    """(_rebuild, (data, code, bits, lanes, shape, strides, offset, flags)).

    ``data`` holds the bytes from the lowest to one past the highest byte an element occupies;
    the first element lies ``offset`` bytes into it (> 0 for negative strides).
    """
    cdef int64_t lo = 0, hi = self.desc.layout.nbytes
    cdef int64_t small[STACK_DIMS]
    cdef int64_t *c_strides
    cdef int i
    cdef bint readonly = self.desc.flags & FLAG_READ_ONLY
    cdef _Span span
    if not _host_accessible(self.desc.dl.device.device_type):
        raise Refusal(
            f"pickle: the data is on {_device_name(self.desc.dl.device)}, which another process "
            "cannot read; pickle a host copy instead: "
            f"asdlpack(dl.__dlpack__(dl_device=({kDLCPU}, 0), copy=True)), or move it to the "
            "host with its producer (e.g. tensor.cpu())")
    _host_wait(self)
    strides = self.strides
    if self.desc.layout.count and not self.desc.layout.c_contig:
        _span(self, &lo, &hi)              # packed sub-byte arrays are always C-contiguous
    span = _Span.__new__(_Span)
    span.readonly = readonly
    # the span beyond nbytes (both < 2**63; broadcasts: < 0)
    if (hi - lo) - self.desc.layout.nbytes > self.desc.layout.nbytes // 2:
        # a C-contiguous copy (nbytes < 2**62 here), on a 256-byte boundary like every copy
        span.copy = _alloc_copy(<size_t>self.desc.layout.nbytes + DATA_ALIGN - 1)
        if span.copy == NULL:
            raise MemoryError(f"pickle: cannot allocate {self.desc.layout.nbytes} bytes for a copy")
        span.ptr = <char *>span.copy + (-<uintptr_t>span.copy & (DATA_ALIGN - 1))
        _gather(span.ptr, <const char *>self.desc.dl.data, self)
        lo, hi = 0, self.desc.layout.nbytes
        c_strides = _scratch(small, STACK_DIMS, self.desc.dl.ndim)
        if c_strides == NULL:
            raise MemoryError()
        try:
            _c_strides(self.desc.dl.ndim, self.desc.dl.shape, c_strides)
            strides = tuple([c_strides[i] for i in range(self.desc.dl.ndim)])
        finally:
            _scratch_free(c_strides, small)
    else:
        span.ptr = <char *>(<uintptr_t>self.desc.dl.data + <uintptr_t>lo)    # NULL when empty
        span.owner = self
    span.len = hi - lo
    data = span
    if protocol >= 5:
        data = _pickle.PickleBuffer(data)
    elif readonly:
        data = bytes(data)
    else:
        data = bytearray(data)              # writable arrives writable, as with protocol 5
    t = self.desc.dl.dtype
    return _rebuild, (data, t.code, t.bits, t.lanes, self.shape, strides, -lo,
                      self.desc.flags & _PICKLED_FLAGS)


cdef int64_t _field(object value, str name, int64_t low, int64_t high) except? -1:
    """A metadata integer from the stream: an int within [low, high], else BufferError."""
    if type(value) is not int or not low <= value <= high:
        raise Refusal(f"pickle: field '{name}' = {value!r:.80} is not an int in "
                      f"[{low}, {high}]; the pickle is corrupt or forged")
    return value


cdef tuple _fields(tuple got, tuple names):
    """A pickle's arguments, one per field of names: any other count is a corrupt or forged
    pickle (BufferError naming the count and the fields), not a call's TypeError."""
    if len(got) != len(names):
        raise Refusal(f"pickle: {len(got)} fields where this pickle has {len(names)} "
                      f"({', '.join(names)}); the pickle is corrupt or forged")
    return got


def _rebuild(*fields):
    """Unpickle a DLPackObject over ``data`` (the received buffer; it is not copied) from
    (data, code, bits, lanes, shape, strides, offset, flags).

    Every field is checked before use: a corrupt or forged pickle gives BufferError, and
    the elements must lie inside ``data``.
    """
    data, code, bits, lanes, shape, strides, offset, flags = _fields(fields, _HOST_FIELDS)
    cdef DLPackObject r = _new_object()
    cdef _Pickled p
    cdef int64_t at
    try:
        _pickled_header(&p, code, bits, lanes, shape, strides, flags)
        _hold_buffer(r, data, PyBUF_SIMPLE, "pickle", "data",
                     "; the pickle is corrupt or forged")
        at = _field(offset, "offset", 0, r._view.len)
        if r._view.readonly:
            p.flags |= FLAG_READ_ONLY
        p.t.data = <void *>(<uintptr_t>r._view.buf + <uintptr_t>at)  # buf may be NULL
        p.t.device.device_type = kDLCPU
        p.t.device.device_id = 0
        r._describe_tensor(&p.t, p.flags, "pickle", at, r._view.len)
    finally:
        _pickled_free(&p)
    _own_base(r, data)
    return r


ctypedef struct _Pickled:       # a pickle's description, each field checked, data not yet known
    DLTensor t
    uint64_t flags
    int64_t small[2 * INLINE_DIMS]


cdef int _pickled_header(_Pickled *p, code, bits, lanes, shape, strides, flags) except -1:
    """The dtype, shape, strides and flags of a pickle into p (shape and strides in p.small, or
    allocated beyond INLINE_DIMS: the caller runs _pickled_free whatever happens), each field
    checked; validated as a whole by _describe_tensor once data is known."""
    cdef Py_ssize_t i, n
    p.t.shape = p.small
    p.t.byte_offset = 0
    if type(shape) is not tuple or type(strides) is not tuple or len(shape) != len(strides):
        raise Refusal(f"pickle: fields 'shape' = {shape!r:.80} and 'strides' = "
                      f"{strides!r:.80} are not tuples of one length; the pickle is "
                      "corrupt or forged")
    p.flags = _field(flags, "flags", 0, INT64_MAX)
    if p.flags & ~_PICKLED_FLAGS:
        raise Refusal(f"pickle: field 'flags' = {flags} has bits other than READ_ONLY and "
                      "IS_SUBBYTE_TYPE_PADDED; the pickle is corrupt or forged")
    p.t.dtype.code = <uint8_t>_field(code, "dtype code", 0, 255)
    p.t.dtype.bits = <uint8_t>_field(bits, "dtype bits", 0, 255)
    p.t.dtype.lanes = <uint16_t>_field(lanes, "dtype lanes", 0, 65535)
    n = len(shape)
    _check_dims("pickle", "ndim", n, True)
    p.t.ndim = <int32_t>n
    if n > INLINE_DIMS:
        p.t.shape = <int64_t *>malloc(2 * n * sizeof(int64_t))
        if p.t.shape == NULL:
            p.t.shape = p.small
            raise MemoryError()
    p.t.strides = p.t.shape + n
    for i in range(n):
        p.t.shape[i] = _field(shape[i], "shape", 0, INT64_MAX)
        p.t.strides[i] = _field(strides[i], "strides", -INT64_MAX - 1, INT64_MAX)
    return 0


cdef inline void _pickled_free(_Pickled *p) noexcept:
    if p.t.shape != p.small:
        free(p.t.shape)


# -- CUDA data (docs/spec.md §11): a handle of the memory itself, or a host copy ---------------
# Device memory goes as a CUDA IPC handle of its allocation (the offset into it, the device's
# UUID, and an interprocess event recorded after the producer's work); memory CUDA IPC cannot
# share goes as a host copy, restored to its device kind, unless asdlpack's cuda_pickle says
# otherwise.

cdef enum:
    PICKLE_IPC = 0          # an IPC handle where CUDA shares the memory, else a host copy
    PICKLE_COPY = 1         # a host copy, always
    PICKLE_IPC_ONLY = 2     # an IPC handle, or refused
cdef tuple _PICKLE_MODES = ("ipc", "copy", "ipc_only")


cdef int _pickle_mode(object mode) except -1:
    """asdlpack's cuda_pickle argument as a PICKLE_* value."""
    if not isinstance(mode, str):
        raise TypeError(f"asdlpack: cuda_pickle = {mode!r:.80} is not a str; pass one of "
                        f"{', '.join(_PICKLE_MODES)}")
    mode = str.__str__(mode)            # a subclass by its characters: its __eq__ never runs
    for i, name in enumerate(_PICKLE_MODES):
        if mode == name:
            return i
    raise ValueError(f"asdlpack: cuda_pickle = {mode!r:.80} is not one of "
                     f"{', '.join(_PICKLE_MODES)}")


@cython.final
@cython.auto_pickle(False)    # internal: never pickled (DLPackObject has its own reduce)
cdef class _Received:
    """The base of an unpickled DLPackObject of CUDA data: what it keeps alive, and how it
    came (``how``): "ipc" (another process's memory, opened here), "same process" (the
    sender's own memory) or "copy" (a host copy, restored to the device kind). Memory
    opened from a handle keeps where the handle came from, to forward it (spec §11)."""
    cdef readonly str how
    cdef readonly object owner
    cdef object event
    cdef bytes handle                   # "ipc": the sender's handle, its GPU, pid and token
    cdef bytes uuid
    cdef object pid
    cdef object token

    def __repr__(self):
        return f"<pickled CUDA data ({self.how})>"


cdef _Received _received(str how, object owner, object event=None):
    cdef _Received r = _Received.__new__(_Received)
    r.how = how
    r.owner = owner
    r.event = event
    return r


@cython.final
@cython.auto_pickle(False)    # internal: never pickled (DLPackObject has its own reduce)
cdef class _IpcExport:
    """What a DLPackObject pickled as a handle keeps for its receivers while it lives: the
    token a same-process unpickle finds it by, and the interprocess event they wait on."""
    cdef int64_t token
    cdef _IpcEvent event


cdef object _ipc_exports = None     # DLPackObject -> its _IpcExport (weak keys)
cdef object _ipc_senders = None     # token -> the DLPackObject (weak values)
cdef object _ipc_events = None      # handle -> this process's exported _IpcEvent (weak values)
# Tokens count from a random 62-bit start: a pid names a process only within its PID namespace
# (containers sharing one IPC namespace reuse pids), so a pickle from another process with this
# pid must not find one of this process's senders by a token both counted to.
cdef int64_t _ipc_last_token = 0
# One export per object even when threads pickle it at once: the tables' lookups run Python code
# (a thread switch), and an _IpcExport replaced by another thread's would destroy the event its
# pickles name.
cdef object _ipc_lock = _threading.Lock()


cdef _IpcExport _ipc_export_of(DLPackObject self):
    """self's _IpcExport, made at its first pickle as a handle (one event per object)."""
    global _ipc_exports, _ipc_senders, _ipc_events, _ipc_last_token
    cdef _IpcExport e
    with _ipc_lock:
        if _ipc_exports is None:
            import weakref
            _ipc_exports = weakref.WeakKeyDictionary()
            _ipc_senders = weakref.WeakValueDictionary()
            _ipc_events = weakref.WeakValueDictionary()
            _ipc_last_token = int.from_bytes(_os.urandom(8), "little") >> 2
        e = _ipc_exports.get(self)
        if e is None or e.event.generation != _cu_generation:
            e = _IpcExport.__new__(_IpcExport)
            e.event = _cu_ipc_event(self.desc.dl.device.device_id)
            _ipc_last_token += 1
            e.token = _ipc_last_token
            _ipc_exports[self] = e
            _ipc_senders[e.token] = self
            _ipc_events[e.event.handle] = e.event
    return e


cdef object _reduce_cuda(DLPackObject self, int protocol):
    """CUDA device memory as a handle (_rebuild_ipc), memory opened from another process's
    handle as that handle (forwarded); pinned, managed, pool and VMM memory, which CUDA IPC
    does not share, and all of it with cuda_pickle="copy", as a host copy (_rebuild_copy);
    cuda_pickle="ipc_only" refuses those."""
    cdef int32_t device_id = self.desc.dl.device.device_id
    cdef uintptr_t base = 0
    if self.desc.layout.count == 0:             # no memory to share
        return _reduce_copy(self, protocol)
    handle = bytearray(CU_IPC_HANDLE_SIZE)
    if self.desc.dl.device.device_type != kDLCUDA:
        why = f"on {_device_name(self.desc.dl.device)}, which CUDA IPC does not share"
    elif self._pickle_mode == PICKLE_COPY:
        return _reduce_copy(self, protocol)
    elif (origin := _ipc_origin(self)) is not None:
        return _reduce_ipc(self, origin.handle, (<_IpcMemory>origin.owner).ptr, origin.uuid,
                           origin.pid, origin.token)
    elif _cu_ipc_export(device_id, <uintptr_t>self.desc.dl.data, handle, &base):
        return _reduce_ipc(self, bytes(handle), base, _cu_uuid(device_id), None, None)
    else:
        why = (f"CUDA memory of {_device_name(self.desc.dl.device)} that CUDA IPC cannot share "
               "(stream-ordered pool or VMM memory)")
    if self._pickle_mode == PICKLE_IPC_ONLY:
        raise Refusal(f"pickle: the data is {why}, and cuda_pickle='ipc_only' refuses a host "
                      "copy; pass cuda_pickle='ipc' or 'copy' to asdlpack to send one")
    return _reduce_copy(self, protocol)


cdef object _reduce_ipc(DLPackObject self, bytes handle, uintptr_t base, bytes uuid, object pid,
                        object token):
    """(_rebuild_ipc, its arguments): self as the offset into the allocation at base that
    handle names, with an interprocess event recorded after self's producer; pid and token
    say who sent the handle first (None: this process, self the sender)."""
    cdef _IpcExport e = _ipc_export_of(self)
    _order_after_producer(self, CU_STREAM_LEGACY, False)
    _cu_ipc_record(e.event)
    t = self.desc.dl.dtype
    return _rebuild_ipc, (handle, <uintptr_t>self.desc.dl.data - base, uuid, t.code, t.bits,
                          t.lanes, self.shape, self.strides, self.desc.flags & _PICKLED_FLAGS,
                          e.event.handle, _os.getpid() if pid is None else pid,
                          e.token if token is None else token)


cdef _Received _ipc_origin(DLPackObject self):
    """Where self's memory came from when it was opened here from another process's handle
    (self unpickled so, or asdlpack's views of such an object, which share its description);
    None otherwise, and where self describes other than the received object (from_address
    with it as owner: the handle's sender would load the pickle as its own object)."""
    cdef DLPackObject received = self
    base = self._base
    while isinstance(base, DLPackObject):
        received = <DLPackObject>base
        base = received._base
    if (isinstance(base, _Received) and (<_Received>base).handle is not None
            and _describes_as(self, received)):
        return base
    return None


cdef bint _describes_as(DLPackObject a, DLPackObject b) noexcept:
    """a and b describe the same elements, as a pickle carries them (data, type, shape,
    strides, flags)."""
    cdef int i
    if (a.desc.dl.data != b.desc.dl.data or a.desc.dl.ndim != b.desc.dl.ndim
            or a.desc.dl.dtype.code != b.desc.dl.dtype.code
            or a.desc.dl.dtype.bits != b.desc.dl.dtype.bits
            or a.desc.dl.dtype.lanes != b.desc.dl.dtype.lanes
            or a.desc.dl.device.device_type != b.desc.dl.device.device_type
            or a.desc.dl.device.device_id != b.desc.dl.device.device_id
            or (a.desc.flags ^ b.desc.flags) & _PICKLED_FLAGS):
        return False
    for i in range(a.desc.dl.ndim):
        if (a.desc.dl.shape[i] != b.desc.dl.shape[i]
                or a.desc.dl.strides[i] != b.desc.dl.strides[i]):
            return False
    return True


cdef object _reduce_copy(DLPackObject self, int protocol):
    """(_rebuild_copy, (device kind, device UUID, _reduce_host's arguments)): device
    memory through a host copy ordered after the producer's work; pinned and managed memory
    read in place once that work is done."""
    cdef DLPackObject host = self
    if self.desc.dl.device.device_type == kDLCUDA:
        host = asdlpack(self.__dlpack__(dl_device=_CPU0, copy=True, max_version=(1, 0)))
    uuid = _cu_uuid(self.desc.dl.device.device_id)
    fn, args = _reduce_host(host, protocol)
    return _rebuild_copy, (self.desc.dl.device.device_type, uuid,
                           args[:7] + (self.desc.flags & _PICKLED_FLAGS,))


cdef bytes _bytes_field(object value, str name, Py_ssize_t size):
    if type(value) is not bytes or len(value) != size:
        raise Refusal(f"pickle: field '{name}' = {value!r:.80} is not {size} bytes; the "
                      "pickle is corrupt or forged")
    return value


cdef str _IPC_WAY_OUT = "send a host copy: asdlpack(x, cuda_pickle='copy') before pickling"
# a host copy restores on its device kind: only a CPU copy loads where that GPU is not
cdef str _COPY_WAY_OUT = (f"pickle a CPU copy: asdlpack(x.__dlpack__(dl_device=({kDLCPU}, 0), "
                          "copy=True))")


cdef int32_t _ipc_ordinal(object uuid, str way_out) except -1:
    """This process's ordinal of the GPU a pickle names by UUID (way_out: the sender's
    remedy when it is not here)."""
    cdef int32_t ordinal = _cu_uuid_ordinal(_bytes_field(uuid, "device", CU_UUID_SIZE))
    if ordinal < 0:
        raise Refusal(f"pickle: field 'device' = GPU {uuid.hex()} is not a GPU this process "
                      "sees (CUDA_VISIBLE_DEVICES hides it, or the pickle comes from another "
                      f"machine); load it where that GPU is visible, or {way_out}")
    return ordinal


def _rebuild_copy(*fields):
    """Unpickle a host copy of CUDA data on its device kind, on the GPU with the sender's
    UUID, from (kind, device UUID, _rebuild's fields): device memory as a copy there, pinned
    and managed memory as new memory of that kind holding the received bytes (strides kept)."""
    kind, uuid, args = _fields(fields, _COPY_FIELDS)
    cdef DLPackObject host, r
    cdef _HostKindMemory mem
    cdef int32_t ordinal
    cdef DLTensor t
    cdef int64_t at
    kind = _field(kind, "kind", 0, _KIND_LIMIT)
    if type(args) is not tuple or len(args) != 8:
        raise Refusal(f"pickle: field 'args' = {args!r:.80} is not a tuple of 8; the pickle "
                      "is corrupt or forged")
    if kind != kDLCUDA and kind != kDLCUDAHost and kind != kDLCUDAManaged:
        raise Refusal(f"pickle: field 'kind' = {kind} is not a CUDA device kind; the "
                      "pickle is corrupt or forged")
    host = _rebuild(*args)
    try:
        ordinal = _ipc_ordinal(uuid, _COPY_WAY_OUT)
    except CudaError as e:
        raise Refusal(f"pickle: field 'device': {e}; a host copy of CUDA data loads on a GPU; "
                      f"{_COPY_WAY_OUT} before pickling") from e
    r = _new_object()
    if kind == kDLCUDA:
        owner = asdlpack(host.__dlpack__(dl_device=(kDLCUDA, ordinal), copy=True,
                                         max_version=(1, 0)))
        t = (<DLPackObject>owner).desc.dl        # its shape and strides: copied by r
        r._describe_tensor(&t, _received_flags(owner, host), "pickle", -1, -1)
        _sync_as(r, owner)
    else:
        owner = mem = _cu_host_kind_alloc(ordinal, host._view.len, kind == kDLCUDAManaged)
        if host._view.len:
            memcpy(<void *>mem.ptr, host._view.buf, host._view.len)
        at = <uintptr_t>host.desc.dl.data - <uintptr_t>host._view.buf
        t = host.desc.dl
        t.data = <void *>(mem.ptr + at)
        t.device.device_type = kind
        t.device.device_id = ordinal
        r._describe_tensor(&t, host.desc.flags, "pickle", at, host._view.len)
    _own_base(r, _received("copy", owner))
    return r


cdef int _in_allocation(DLPackObject r, int64_t at, uint64_t size,
                        str memory="allocation field 'handle' names") except -1:
    """A handle pickle's elements, ``at`` bytes into the memory it names (a CUDA allocation,
    a shared segment's data), lie in its ``size`` bytes; the refusal names the pickle's own
    fields."""
    cdef int64_t lo = 0, hi = r.desc.layout.nbytes, end
    if r.desc.layout.count == 0:
        return 0
    if not r.desc.layout.c_contig:
        _span(r, &lo, &hi)
    if at + lo < 0 or _add_ovf(at, hi, &end) or <uint64_t>end > size:
        raise Refusal(f"pickle: fields 'shape' = {r.shape} and 'strides' = {r.strides} "
                      f"(elements of {r.desc.layout.itemsize} bytes) from field 'offset' = "
                      f"{at} reach outside the {size}-byte {memory}; "
                      "the pickle is corrupt or forged")
    return 0


cdef inline uint64_t _received_flags(DLPackObject copy, DLPackObject host) noexcept:
    """A restored copy's flags: the copy's, read-only as the pickled data was."""
    return (copy.desc.flags & ~(<uint64_t>FLAG_READ_ONLY)) | (host.desc.flags & FLAG_READ_ONLY)


def _rebuild_ipc(*fields):
    """Unpickle CUDA device memory sent as a handle (_IPC_FIELDS): in the sending process the
    sender's own memory (found by pid and token); elsewhere, a process of the sender's pid
    number in another PID namespace included, the allocation mapped once per process, the view
    bounded by it, ordered after the event the sender recorded (spec §10)."""
    (handle, offset, uuid, code, bits, lanes, shape, strides, flags, event, pid,
     token) = _fields(fields, _IPC_FIELDS)
    cdef DLPackObject r, sender
    cdef _Received received
    cdef _IpcMemory mem
    cdef _IpcEvent ev
    cdef _Pickled p
    cdef int64_t at
    cdef int32_t ordinal
    cdef bint own_pid
    at = _field(offset, "offset", 0, INT64_MAX)
    _bytes_field(handle, "handle", CU_IPC_HANDLE_SIZE)
    _bytes_field(event, "event", CU_IPC_HANDLE_SIZE)
    _field(pid, "pid", 0, INT64_MAX)
    _field(token, "token", 0, INT64_MAX)
    own_pid = pid == _os.getpid()
    sender = _ipc_senders.get(token) if own_pid and _ipc_senders is not None else None
    if sender is not None:
        r = _share(sender, sender._legacy_readonly, False, False)
        ev = _ipc_events.get(event)
        if ev is None:          # forwarded back by another process: after that one's event
            try:
                ev = _cu_ipc_open_event(r.desc.dl.device.device_id, event)
            except CudaError as e:
                raise Refusal(f"pickle: field 'event': {e}; the process that forwarded this "
                              "handle must keep its object alive until the pickle is "
                              "loaded (spec §11)") from e
            _sync_by_event(r, ev.event)
        _own_base(r, _received("same process", sender, ev))
        return r
    r = _new_object()
    try:
        _pickled_header(&p, code, bits, lanes, shape, strides, flags)
        field = "handle"
        try:
            ordinal = _ipc_ordinal(uuid, _IPC_WAY_OUT)
            mem = _cu_ipc_open(ordinal, handle)
            field = "event"
            ev = _ipc_events.get(event) if _ipc_events is not None else None
            if ev is None:      # the driver opens only another process's event
                ev = _cu_ipc_open_event(ordinal, event)
        except CudaError as e:
            if own_pid and field == "handle":   # not another PID namespace's: this process's
                raise Refusal(f"pickle: field 'token' = {token}: the DLPackObject this process "
                              "pickled is gone, and the CUDA memory it kept alive may be too; "
                              "keep the sender alive until its pickles are loaded "
                              "(spec §11)") from e
            raise Refusal(f"pickle: field '{field}': {e}; a CUDA IPC handle opens in another "
                          "process on the same machine (and IPC namespace) while the sending "
                          "object lives; send a host copy instead: asdlpack(x, "
                          "cuda_pickle='copy') before pickling") from e
        if <uint64_t>at > mem.size:
            raise Refusal(f"pickle: field 'offset' = {at} lies past the {mem.size}-byte "
                          "allocation the handle names; the pickle is corrupt or forged")
        p.t.data = <void *>(mem.ptr + <uint64_t>at)
        p.t.device.device_type = kDLCUDA
        p.t.device.device_id = ordinal
        r._describe_tensor(&p.t, p.flags, "pickle", -1, -1)
    finally:
        _pickled_free(&p)
    _in_allocation(r, at, mem.size)
    _sync_by_event(r, ev.event)
    received = _received("ipc", mem, ev)
    received.handle, received.uuid, received.pid, received.token = handle, uuid, pid, token
    _own_base(r, received)
    return r


# -- shared host memory (docs/spec.md §11): a handle of the segment, in any protocol ------------

cdef object _reduce_shared(DLPackObject self, _Segment seg, int64_t at):
    """(_rebuild_shared, (pid, fd, device, inode, token, serial, offset, dtype, shape, strides,
    flags)): elements ``at`` bytes into the data of the segment this process holds as fd; the
    serial names this pickle, which keeps seg alive here until it was loaded (_shm_pickled)."""
    cdef uint64_t serial = _shm_pickled(seg)
    t = self.desc.dl.dtype
    return _rebuild_shared, (_os.getpid(), seg.fd, seg.dev, seg.ino, seg.token, serial, at,
                             t.code, t.bits, t.lanes, self.shape, self.strides,
                             self.desc.flags & _PICKLED_FLAGS)


def _rebuild_shared(*fields):
    """Unpickle a shared segment's handle (_SHARED_FIELDS): the segment mapped once per
    process after every check of _shm_open, the view bounded by its data, read-only where the
    pickle or the segment says so."""
    (pid, fd, dev, ino, token, serial, offset, code, bits, lanes, shape, strides,
     flags) = _fields(fields, _SHARED_FIELDS)
    cdef DLPackObject r = _new_object()
    cdef _Segment seg
    cdef _Pickled p
    cdef int64_t at, size
    _field(pid, "pid", 1, INT32_MAX)
    _field(fd, "fd", 0, INT32_MAX)
    _field(dev, "device", 0, INT64_MAX)
    _field(ino, "inode", 0, INT64_MAX)
    _bytes_field(token, "token", 16)
    cdef uint64_t c_serial = _field(serial, "serial", 0, INT64_MAX)
    _field(offset, "offset", 0, INT64_MAX)      # its type first; its bound once size is known
    try:
        _pickled_header(&p, code, bits, lanes, shape, strides, flags)
        seg = _shm_open(pid, fd, dev, ino, token)
        size = seg.size - SHM_HEAD
        at = _field(offset, "offset", 0, size)
        if seg.readonly:
            p.flags |= FLAG_READ_ONLY
        p.t.data = seg.data() + at
        p.t.device.device_type = kDLCPU
        p.t.device.device_id = 0
        r._describe_tensor(&p.t, p.flags, "pickle", -1, -1)
    finally:
        _pickled_free(&p)
    _in_allocation(r, at, size, "data of the segment fields 'pid' and 'fd' name")
    _shm_mark(seg.base, c_serial)
    _own_base(r, seg)
    return r
