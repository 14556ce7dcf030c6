# Stream ordering: a consumer after the producer's pending work (docs/spec.md §10). The readers
# record how to wait for the producer with the _sync_* setters (the only writers of
# DLPackObject's sync group); _producer_ready is its one reading, and _sync_for, _host_wait and
# _order_after_producer turn it into a stream's or the host's wait for the writers.

cdef enum ProducerWork:        # what _producer_ready found
    WORK_NONE                   # nothing to wait for
    WORK_STREAM                 # the work is on the stream given back
    WORK_EVENT                  # the work is behind the CUevent given back


cdef inline void _set_sync(DLPackObject r, SyncKind kind, uintptr_t stream,
                           DLPackExchangeAPI *api, void *event, object provider) noexcept:
    r.sync.kind = kind
    r.sync.stream = stream
    r.sync.work_api = api
    r.sync.event = event
    r._sync_provider = provider


cdef inline void _sync_on_stream(DLPackObject r, uintptr_t stream) noexcept:
    """The producer's work is on stream (a CAI's, or the legacy one a capsule's producer
    synchronised to for us)."""
    _set_sync(r, SYNC_STREAM, stream, NULL, NULL, None)


cdef inline void _sync_by_api(DLPackObject r, DLPackExchangeAPI *api) noexcept:
    """The producer's work is on the stream api's current_work_stream names at each export."""
    _set_sync(r, SYNC_API, 0, api, NULL, None)


cdef inline void _sync_by_provider(DLPackObject r, object provider) noexcept:
    """A __dlpack__ provider, asked again at each export, orders its own work."""
    _set_sync(r, SYNC_PROVIDER, 0, NULL, NULL, provider)


cdef inline void _sync_by_event(DLPackObject r, void *event) noexcept:
    """The producer's work is behind event (an Arrow producer's sync_event, spec §13)."""
    _set_sync(r, SYNC_EVENT, 0, NULL, event, None)


cdef inline void _sync_as(DLPackObject r, DLPackObject src) noexcept:
    """r orders after src's producer as src does."""
    r.sync = src.sync
    r._sync_provider = src._sync_provider


cdef int _producer_ready(DLPackObject self, uintptr_t target, uintptr_t *stream,
                         void **event) except -1:
    """Where the producer's pending work can be awaited (the one reading of self.sync, spec
    §10): WORK_NONE, WORK_STREAM with stream set, or WORK_EVENT with event set.

    A __dlpack__ provider is asked again to order its work before target (one that refuses
    the per-thread stream 2, torch, is asked for the legacy one, which 2 waits for), after
    which the work is on target; with target 0 (the caller names a stream to its consumer)
    its CUDA array interface's stream is taken, else it is asked for the legacy one."""
    cdef void *current = NULL
    cdef SyncKind kind = self.sync.kind
    if kind == SYNC_EVENT:
        event[0] = self.sync.event
        return WORK_EVENT
    if kind == SYNC_PROVIDER:
        if target == 0:
            named = _provider_stream(self)
            if named is None:
                return WORK_NONE
            stream[0] = named
            return WORK_STREAM
        self._sync_provider.__dlpack__(
            stream=CU_STREAM_LEGACY if target == CU_STREAM_PER_THREAD else target)
        stream[0] = target
        return WORK_STREAM
    if kind == SYNC_API:
        if self.sync.work_api.current_work_stream(
                <c_DLDeviceType>self.desc.dl.device.device_type,
                self.desc.dl.device.device_id, &current) != 0:
            if PyErr_Occurred():
                return -1
            raise Refusal("__dlpack_c_exchange_api__: the producer's current_work_stream "
                          "failed")
        stream[0] = <uintptr_t>current if current != NULL else CU_STREAM_LEGACY
        return WORK_STREAM
    if kind == SYNC_STREAM:
        stream[0] = self.sync.stream
        return WORK_STREAM
    return WORK_NONE


cdef object _provider_stream(DLPackObject self):
    """The stream a __dlpack__ provider's work is on now, asked at each export: the one its own
    CUDA array interface names (CuPy and Numba name their current stream), else the legacy
    default stream, which the provider is asked again to order its work before."""
    cdef uintptr_t handle
    cdef str what = "__cuda_array_interface__: the provider's field 'stream'"
    try:
        cai = self._sync_provider.__cuda_array_interface__
    except Exception:
        cai = None
    if type(cai) is dict and _cai_names_stream(<dict>cai):
        stream = (<dict>cai).get("stream")
        if stream is None:
            return None
        if _stream_index(stream, what, False) != 0 and _stream_int(stream, what, False,
                                                                   &handle):
            return handle
    self._sync_provider.__dlpack__(stream=CU_STREAM_LEGACY)
    return CU_STREAM_LEGACY


cdef inline int _host_wait(DLPackObject self) except -1:
    """Before the host reads self's memory: pinned or managed CUDA memory is read once the
    producer's pending work is done; other host memory is ready as it is."""
    if _cuda_kind(self.desc.dl.device.device_type):
        _sync_for(self, None, True)
    return 0


cdef int _cu_managed_host_ready(int32_t device_id) except -1:
    """Before the host reads managed memory of device_id: where the device lacks
    CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS (WSL2, Windows, GPUs before Pascal) the CPU
    may not touch managed memory while any kernel runs (SIGSEGV), so the whole context is
    synchronised; elsewhere the producer's stream, already waited for, is enough."""
    cdef int value = 0
    cdef CUresult rc
    _cu_enter(device_id)
    try:
        if _cu_concurrent[device_id] == 0:
            _cu_check(_cu.cuDeviceGetAttribute(
                &value, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, _cu_devices[device_id]),
                "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)")
            _cu_concurrent[device_id] = 2 if value else 1
        if _cu_concurrent[device_id] == 1:
            with nogil:
                rc = _cu.cuCtxSynchronize()
            _cu_check(rc, "cuCtxSynchronize")
    finally:
        _cu_leave()
    return 0


cdef int _sync_for(DLPackObject self, object stream, bint host_reads) except -1:
    """Order a consumer's stream (or, when the host reads, the host) after the producer's work;
    a host read of managed memory also waits as the device requires (_cu_managed_host_ready).
    """
    _order_after_producer(self, stream, host_reads)
    if host_reads and self.desc.dl.device.device_type == kDLCUDAManaged:
        _cu_managed_host_ready(self.desc.dl.device.device_id)
    return 0


cdef int _order_after_producer(DLPackObject self, object stream, bint host_reads) except -1:
    """Order a consumer's stream (or, when the host reads, the host) after the producer's work
    (_producer_ready): one event wait, or for a host reader a synchronize."""
    cdef uintptr_t producer, consumer
    cdef void *event
    cdef int work
    cdef int32_t device_id = self.desc.dl.device.device_id
    if host_reads:
        if stream is not None:
            _consumer_stream(stream, &consumer)     # checked; the host waits whatever it says
        work = _producer_ready(self, CU_STREAM_LEGACY, &producer, &event)
        if work == WORK_EVENT:
            return _cu_event_sync(device_id, event)
        if work == WORK_STREAM:
            return _cu_stream_sync(device_id, producer)
        return 0
    if not _consumer_stream(stream, &consumer):
        return 0
    work = _producer_ready(self, consumer, &producer, &event)
    if work == WORK_EVENT:
        _cu_event_wait(device_id, event, consumer)
    elif work == WORK_STREAM and producer != consumer:
        _cu_stream_wait(device_id, producer, consumer)
    return 0
