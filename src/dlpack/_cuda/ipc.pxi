# CUDA IPC (docs/spec.md §11): device memory shared with other processes by handle, the
# interprocess events that order a receiver after the sender's work, and the memory a host copy
# is restored into there. Used by the pickle writer; the driver itself is _cuda/driver.pxi's.

# Entry points resolved on first use, apart from those above: a driver without them serves
# every exchange in one process. The handles are 64 opaque bytes, passed by value.

ctypedef struct CUipcHandle:            # CUipcMemHandle and CUipcEventHandle
    char reserved[64]

cdef enum:
    CU_EVENT_INTERPROCESS = 4
    CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1
    CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE = 10
    CU_IPC_HANDLE_SIZE = 64
    CU_UUID_SIZE = 16
    CU_MEM_ATTACH_GLOBAL = 1
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_NOT_SUPPORTED = 801

ctypedef struct CuIpcDriver:
    CUresult (*cuMemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr) noexcept nogil
    CUresult (*cuIpcGetMemHandle)(CUipcHandle *, CUdeviceptr) noexcept nogil
    CUresult (*cuIpcOpenMemHandle)(CUdeviceptr *, CUipcHandle, unsigned int) noexcept nogil
    # (blocks, as cuIpcCloseMemHandle does)
    CUresult (*cuIpcCloseMemHandle)(CUdeviceptr) noexcept nogil
    CUresult (*cuIpcGetEventHandle)(CUipcHandle *, CUevent) noexcept nogil
    CUresult (*cuIpcOpenEventHandle)(CUevent *, CUipcHandle) noexcept nogil
    CUresult (*cuDeviceGetUuid)(unsigned char *, int) noexcept nogil
    CUresult (*cuMemHostAlloc)(void **, size_t, unsigned int) noexcept nogil         # blocks
    CUresult (*cuMemFreeHost)(void *) noexcept nogil                                  # blocks
    CUresult (*cuMemAllocManaged)(CUdeviceptr *, size_t, unsigned int) noexcept nogil  # blocks

# Each entry: the names to try, in order (cuDeviceGetUuid_v2 names MIG instances apart; the
# _v2 open has the same signature as the name older drivers export).
cdef tuple _CU_IPC_SYMBOLS = (
    ("cuMemGetAddressRange_v2",), ("cuIpcGetMemHandle",),
    ("cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"),
    ("cuIpcCloseMemHandle",), ("cuIpcGetEventHandle",), ("cuIpcOpenEventHandle",),
    ("cuDeviceGetUuid_v2", "cuDeviceGetUuid"), ("cuMemHostAlloc",), ("cuMemFreeHost",),
    ("cuMemAllocManaged",))
assert sizeof(CuIpcDriver) == len(_CU_IPC_SYMBOLS) * sizeof(void *)

cdef CuIpcDriver _cu_ipc
cdef unsigned int _cu_ipc_generation = 0    # the driver _cu_ipc was resolved from, plus one
cdef dict _cu_uuid_ordinals = {}            # device UUID -> ordinal, for _cu_ipc_generation


cdef int _cu_ipc_load() except -1:
    """Resolve the IPC entry points of the driver in use, once per driver."""
    global _cu_ipc_generation, _cu_uuid_ordinals
    cdef void *lib = NULL
    cdef void *sym
    cdef Py_ssize_t i
    _cu_load()
    if _cu_ipc_generation == _cu_generation + 1:
        return 0
    if _cu_fake_symbols is None:
        lib = dlopen(_cu_path, RTLD_NOW | RTLD_LOCAL)       # loaded already: no I/O
        if lib == NULL:
            raise CudaError(f"CUDA driver: {_cu_path.decode()} cannot be loaded again")
    for i, names in enumerate(_CU_IPC_SYMBOLS):
        sym = NULL
        for name in names:
            if _cu_fake_symbols is not None:
                sym = <void *><uintptr_t>_cu_fake_symbols.get(name, 0)
            else:
                sym = dlsym(lib, (<str>name).encode())
            if sym != NULL:
                break
        if sym == NULL:
            raise CudaError(f"CUDA driver: {_cu_path.decode()} has no {names[0]}, which "
                            "sharing CUDA memory with another process needs (CUDA 11.4 or "
                            "newer)")
        (<void **>&_cu_ipc)[i] = sym
    _cu_uuid_ordinals = {}
    _cu_ipc_generation = _cu_generation + 1
    return 0


cdef bytes _cu_uuid(int32_t device_id):
    """The device's UUID: what names it in every process (ordinals follow
    CUDA_VISIBLE_DEVICES, which another process may set otherwise)."""
    cdef unsigned char uuid[CU_UUID_SIZE]
    cdef int dev
    _cu_ipc_load()
    _cu_check(_cu.cuDeviceGet(&dev, device_id), f"cuDeviceGet({device_id})")
    _cu_check(_cu_ipc.cuDeviceGetUuid(uuid, dev), "cuDeviceGetUuid")
    return (<char *>uuid)[:CU_UUID_SIZE]


cdef int32_t _cu_uuid_ordinal(bytes uuid) except -2:
    """This process's ordinal of the device with this UUID, or -1 where it sees none."""
    cdef int count = 0, i
    _cu_ipc_load()
    found = _cu_uuid_ordinals.get(uuid)
    if found is not None:
        return found
    _cu_check(_cu.cuDeviceGetCount(&count), "cuDeviceGetCount")
    for i in range(min(count, MAX_CUDA_DEVICES)):
        if _cu_uuid(i) == uuid:
            _cu_uuid_ordinals[uuid] = i
            return i
    return -1


cdef int _cu_ipc_export(int32_t device_id, uintptr_t ptr, bytearray handle,
                        uintptr_t *base) except -1:
    """1 with handle (64 bytes) filled with the IPC handle of the allocation holding ptr, and
    base its first byte (cuMemGetAddressRange); 0 where the memory cannot be shared so (pool,
    VMM and managed memory: CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE says; memory opened
    from another process's handle, which a driver may report capable and still refuse)."""
    cdef int capable = 0
    cdef void *value = &capable
    cdef int attribute = CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE
    cdef CUdeviceptr start = 0
    cdef CUipcHandle h
    cdef CUresult rc
    _cu_ipc_load()
    _cu_enter(device_id)
    try:
        _cu_check(_cu.cuPointerGetAttributes(1, &attribute, &value, ptr),
                  "cuPointerGetAttributes(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE)")
        if not capable:
            return 0
        _cu_check(_cu_ipc.cuMemGetAddressRange(&start, NULL, ptr), "cuMemGetAddressRange")
        rc = _cu_ipc.cuIpcGetMemHandle(&h, start)
        if rc == CUDA_ERROR_INVALID_VALUE or rc == CUDA_ERROR_NOT_SUPPORTED:
            return 0
        _cu_check(rc, "cuIpcGetMemHandle")
    finally:
        _cu_leave()
    handle[:] = (<char *>h.reserved)[:CU_IPC_HANDLE_SIZE]
    base[0] = start
    return 1


@cython.final
@cython.auto_pickle(False)    # internal: never pickled (DLPackObject has its own reduce)
cdef class _IpcEvent:
    """An interprocess event (or one opened from another process's handle), destroyed in its
    context with the last object holding it."""
    cdef CUcontext context
    cdef CUevent event
    cdef unsigned int generation
    cdef readonly bytes handle          # what another process opens (exported events)
    cdef object __weakref__

    def __dealloc__(self):
        _cu_event_destroy(self.context, self.event, self.generation)


cdef _IpcEvent _cu_ipc_event(int32_t device_id):
    """A new interprocess event in device_id's primary context, with its handle."""
    cdef _IpcEvent e = _IpcEvent.__new__(_IpcEvent)
    cdef CUipcHandle h
    cdef CUresult rc
    _cu_ipc_load()
    e.context = _cu_primary(device_id)
    e.generation = _cu_generation
    _cu_push(e.context)
    try:
        _cu_check(_cu.cuEventCreate(&e.event, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING),
                  "cuEventCreate(CU_EVENT_INTERPROCESS)")
        rc = _cu_ipc.cuIpcGetEventHandle(&h, e.event)
    finally:
        _cu_leave()
    _cu_check(rc, "cuIpcGetEventHandle")
    e.handle = (<char *>h.reserved)[:CU_IPC_HANDLE_SIZE]
    return e


cdef int _cu_ipc_record(_IpcEvent e) except -1:
    """Record e on the legacy default stream of its (primary) context."""
    _cu_push(e.context)
    try:
        _cu_check(_cu.cuEventRecord(e.event, <CUstream>CU_STREAM_LEGACY), "cuEventRecord")
    finally:
        _cu_leave()
    return 0


cdef _IpcEvent _cu_ipc_open_event(int32_t device_id, bytes handle):
    """Another process's interprocess event, opened in device_id's primary context."""
    cdef _IpcEvent e = _IpcEvent.__new__(_IpcEvent)
    cdef CUipcHandle h
    cdef CUresult rc
    memcpy(h.reserved, <char *>handle, CU_IPC_HANDLE_SIZE)
    _cu_ipc_load()
    e.context = _cu_primary(device_id)
    e.generation = _cu_generation
    _cu_push(e.context)
    rc = _cu_ipc.cuIpcOpenEventHandle(&e.event, h)
    _cu_leave()
    _cu_check(rc, "cuIpcOpenEventHandle")
    return e


@cython.final
@cython.auto_pickle(False)    # internal: never pickled (DLPackObject has its own reduce)
cdef class _IpcMemory:
    """Another process's device memory, opened once in this process (cuIpcOpenMemHandle) and
    shared by every view of it; closed, in its device's primary context, when the last dies."""
    cdef readonly int32_t device_id
    cdef readonly CUdeviceptr ptr
    cdef readonly size_t size
    cdef unsigned int generation
    cdef unsigned int epoch
    cdef object __weakref__

    def __dealloc__(self):
        cdef CUcontext ctx
        cdef CUdeviceptr ptr = self.ptr
        if not (ptr and self.generation == _cu_generation and _cu_ready
                and self.epoch == _cu_epochs[self.device_id]):
            return
        ctx = _cu_contexts[self.device_id]
        with nogil:         # closing waits for the device: never with the GIL held
            if _cu.cuCtxPushCurrent(ctx) == 0:
                _cu_ipc.cuIpcCloseMemHandle(ptr)
                _cu_leave()


cdef object _cu_ipc_mapped = None           # handle -> its _IpcMemory, while one lives


cdef _IpcMemory _cu_ipc_open(int32_t device_id, bytes handle):
    """The memory another process's handle names, mapped once in this process: every view
    shares the one _IpcMemory (the driver refuses, or counts, a second open)."""
    global _cu_ipc_mapped
    cdef _IpcMemory mem
    cdef CUipcHandle h
    cdef CUdeviceptr ptr = 0
    cdef size_t size = 0
    cdef CUresult rc
    cdef const char *what = "cuIpcOpenMemHandle"
    _cu_ipc_load()
    if _cu_ipc_mapped is None:
        import weakref
        _cu_ipc_mapped = weakref.WeakValueDictionary()
    key = (_cu_generation, device_id, handle)
    mem = _cu_ipc_mapped.get(key)
    if mem is not None and mem.epoch == _cu_epochs[device_id]:
        return mem
    memcpy(h.reserved, <char *>handle, CU_IPC_HANDLE_SIZE)
    _cu_enter(device_id)
    with nogil:
        rc = _cu_ipc.cuIpcOpenMemHandle(&ptr, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        if rc == 0:
            rc = _cu_ipc.cuMemGetAddressRange(NULL, &size, ptr)
            if rc != 0:
                what = "cuMemGetAddressRange"
                _cu_ipc.cuIpcCloseMemHandle(ptr)
        _cu_leave()
    _cu_check(rc, (<bytes>what).decode())
    mem = _IpcMemory.__new__(_IpcMemory)
    mem.device_id = device_id
    mem.ptr = ptr
    mem.size = size
    mem.generation = _cu_generation
    mem.epoch = _cu_epochs[device_id]
    _cu_ipc_mapped[key] = mem
    return mem


@cython.final
@cython.auto_pickle(False)    # internal: never pickled (DLPackObject has its own reduce)
cdef class _HostKindMemory:
    """Pinned (cuMemHostAlloc) or managed (cuMemAllocManaged) memory pydlpack allocated to
    restore a pickle of that kind; freed in its device's primary context with its last view."""
    cdef readonly int32_t device_id
    cdef readonly uintptr_t ptr
    cdef bint managed
    cdef unsigned int generation
    cdef unsigned int epoch

    def __dealloc__(self):
        cdef CUcontext ctx
        cdef uintptr_t ptr = self.ptr
        cdef bint managed = self.managed
        if not (ptr and self.generation == _cu_generation and _cu_ready
                and self.epoch == _cu_epochs[self.device_id]):
            return
        ctx = _cu_contexts[self.device_id]
        with nogil:         # both free calls wait for the device: never with the GIL held
            if _cu.cuCtxPushCurrent(ctx) == 0:
                if managed:
                    _cu.cuMemFree(<CUdeviceptr>ptr)
                else:
                    _cu_ipc.cuMemFreeHost(<void *>ptr)
                _cu_leave()


cdef _HostKindMemory _cu_host_kind_alloc(int32_t device_id, size_t nbytes, bint managed):
    """nbytes (at least 1) of pinned or managed memory of device_id, for the host to fill."""
    cdef _HostKindMemory mem = _HostKindMemory.__new__(_HostKindMemory)
    cdef void *host = NULL
    cdef CUdeviceptr dptr = 0
    cdef CUresult rc
    _cu_ipc_load()
    _cu_enter(device_id)
    with nogil:
        if managed:
            rc = _cu_ipc.cuMemAllocManaged(&dptr, nbytes if nbytes else 1, CU_MEM_ATTACH_GLOBAL)
            host = <void *><uintptr_t>dptr
        else:
            rc = _cu_ipc.cuMemHostAlloc(&host, nbytes if nbytes else 1, 0)
        _cu_leave()
    _cu_check(rc, f"{'cuMemAllocManaged' if managed else 'cuMemHostAlloc'}({nbytes})")
    mem.device_id = device_id
    mem.ptr = <uintptr_t>host
    mem.managed = managed
    mem.generation = _cu_generation
    mem.epoch = _cu_epochs[device_id]
    if managed:
        _cu_managed_host_ready(device_id)     # the host writes it next
    return mem
