# CUDA streams and events (docs/spec.md §10): a stream waiting for another's work or for an
# event, the host waiting for either, events recorded for a consumer and freed from any thread;
# graph capture (a capturing consumer stream refuses what would invalidate it); and the one
# parser of stream values, a consumer's `stream` argument and a provider's field (spec §4).


cdef int _cu_stream_wait(int32_t device_id, uintptr_t producer, uintptr_t consumer) except -1:
    """Queue on consumer a wait for the work queued so far on producer (the host goes on).

    The event is created and recorded in the producer's stream's context (libcuda refuses to
    record an event on a stream of another context); the consumer's stream waits on it in its
    own context.
    """
    cdef CUevent event = NULL
    cdef bint capturing
    cdef CUcontext pctx = _cu_stream_context(device_id, producer)
    cdef CUcontext cctx = _cu_stream_context(device_id, consumer)
    _cu_push(pctx)
    try:
        if consumer == CU_STREAM_LEGACY or cctx == pctx:
            capturing = _cu_capturing(consumer)
        else:
            _cu_push(cctx)
            try:
                capturing = _cu_capturing(consumer)
            finally:
                _cu_leave()
        if capturing and (producer == CU_STREAM_LEGACY or not _cu_capturing(producer)):
            _capture_refusal(consumer, f"the producer's work is on stream {producer:#x}, "
                             "outside the capture, and a captured stream may not wait for it")
        _cu_check(_cu.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        _cu_check(_cu.cuEventRecord(event, <CUstream>producer), "cuEventRecord")
        if cctx == pctx:
            _cu_check(_cu.cuStreamWaitEvent(<CUstream>consumer, event, 0), "cuStreamWaitEvent")
        else:
            _cu_push(cctx)
            try:
                _cu_check(_cu.cuStreamWaitEvent(<CUstream>consumer, event, 0),
                          "cuStreamWaitEvent")
            finally:
                _cu_leave()
    finally:
        if event != NULL:
            _cu.cuEventDestroy(event)
        _cu_leave()
    return 0


cdef int _cu_stream_sync(int32_t device_id, uintptr_t stream) except -1:
    """Block the host (not the interpreter) until stream's queued work is done."""
    cdef CUresult rc
    _cu_push(_cu_stream_context(device_id, stream))
    with nogil:
        rc = _cu.cuStreamSynchronize(<CUstream>stream)
        _cu_leave()
    return _cu_check(rc, "cuStreamSynchronize")


cdef int _cu_event_wait(int32_t device_id, CUevent event, uintptr_t consumer) except -1:
    """Queue on consumer a wait for a producer's event (an Arrow sync_event), in the consumer
    stream's own context (a stream may wait on an event of another context)."""
    cdef CUresult rc
    _cu_push(_cu_stream_context(device_id, consumer))
    try:
        if _cu_capturing(consumer):
            _capture_refusal(consumer, "the producer's work is behind its event (an Arrow "
                             "sync_event), recorded outside the capture")
        rc = _cu.cuStreamWaitEvent(<CUstream>consumer, event, 0)
    finally:
        _cu_leave()
    return _cu_check(rc, "cuStreamWaitEvent")


cdef bint _cu_capturing(uintptr_t stream) except -1:
    """Whether stream, of the current context, is capturing a CUDA graph (cuStreamIsCapturing;
    an invalidated capture counts). The legacy stream never is, and is not asked: asking of it
    while a blocking stream captures would itself invalidate that capture."""
    cdef int status = 0
    if stream == CU_STREAM_LEGACY:
        return False
    _cu_check(_cu.cuStreamIsCapturing(<CUstream>stream, &status),
              f"cuStreamIsCapturing({stream:#x})")
    return status != 0


cdef int _capture_refusal(uintptr_t stream, str why) except -1:
    raise Refusal(f"__dlpack__: the consumer's stream {stream:#x} is capturing a CUDA graph and "
                  f"{why}, which would invalidate the capture (spec §10); make the exchange "
                  "before capture begins, or outside the graph")


cdef int _cu_capture_check(int32_t device_id, uintptr_t stream, str what) except -1:
    """Refuse work that needs the host to wait, allocate or copy synchronously (what) for a
    consumer whose stream is capturing a CUDA graph: such a call invalidates the capture."""
    if stream == CU_STREAM_LEGACY:
        return 0
    _cu_push(_cu_stream_context(device_id, stream))
    try:
        if _cu_capturing(stream):
            _capture_refusal(stream, f"{what} needs calls that synchronise or allocate")
    finally:
        _cu_leave()
    return 0


cdef int _cu_event_sync(int32_t device_id, CUevent event) except -1:
    """Block the host (not the interpreter) until a producer's event has happened."""
    cdef CUresult rc
    _cu_enter(device_id)
    with nogil:
        rc = _cu.cuEventSynchronize(event)
        _cu_leave()
    return _cu_check(rc, "cuEventSynchronize")


cdef CUevent _cu_event_record(int32_t device_id, uintptr_t stream,
                              CUcontext *context) except? NULL:
    """A new event recorded on stream, for a consumer to wait on; made in the stream's own
    context (where libcuda lets it be recorded), which is stored in context for
    _cu_event_destroy."""
    cdef CUevent event = NULL
    cdef CUresult rc
    cdef CUcontext ctx = _cu_stream_context(device_id, stream)
    _cu_push(ctx)
    try:
        _cu_check(_cu.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        rc = _cu.cuEventRecord(event, <CUstream>stream)
        if rc != 0:
            _cu.cuEventDestroy(event)
            _cu_fail(rc, "cuEventRecord")
    finally:
        _cu_leave()
    context[0] = ctx
    return event


cdef void _cu_event_destroy(CUcontext context, CUevent event,
                            unsigned int generation) noexcept nogil:
    """Free an event _cu_event_record made, from any thread, in the context it was made in;
    nothing when the driver that made it is gone (tests swap drivers)."""
    if (event != NULL and generation == _cu_generation and _cu_ready
            and _cu.cuCtxPushCurrent(context) == 0):
        _cu.cuEventDestroy(event)
        _cu_leave()


cdef object _stream_index(object stream, str what, bint argument):
    """The one rule for a stream argument's type: an int (NumPy's too) taken with __index__
    before any comparison; bool and everything else refused, naming `what`. An __index__
    that raises other than TypeError makes no int either: the caller's argument is then a
    TypeError, a provider's field a refusal, naming `what`, the error chained (spec §4)."""
    if type(stream) is bool:
        raise Refusal(f"{what} = {stream!r} is not None or an int")
    try:
        return PyNumber_Index(stream)
    except TypeError:
        raise Refusal(f"{what} = {stream!r} is not None or an int") from None
    except Exception as e:
        why = (f"{what}: a {type(stream).__name__} object whose __index__ raised "
               f"{type(e).__name__}: {e}; ")
        if argument:
            raise TypeError(why + "pass None or an int") from e
        raise Refusal(why + "it is not None or an int") from e


cdef int _stream_int(object stream, str what, bint argument, uintptr_t *out) except -1:
    """A stream named by an int (NumPy's too): 1 and out set, or 0 for -1; `what` names the
    argument in refusals (argument: the caller's, not a provider's field). The value is taken
    with __index__ before any comparison, so an int subclass whose == lies cannot pass 0
    (ambiguous) as something else."""
    value = _stream_index(stream, what, argument)
    if value == -1:
        return 0
    if value == 0:
        raise Refusal(f"{what} = 0 is disallowed for CUDA (ambiguous); pass 1 for the "
                      "legacy default stream or 2 for per-thread")
    try:
        out[0] = value
    except OverflowError:
        raise Refusal(f"{what} = {stream!r} is not a CUDA stream handle") from None
    return 1


cdef bint _cai_names_stream(dict d):
    """Whether a CAI says which stream its data's work is on: version 3 with a 'stream' key.
    Without one (version 2; torch's CAI has no stream) the producer's stream is unknown, and a
    consumer must order after the legacy default stream, where that work defaults to."""
    version = d.get("version", 3)        # the reader's default
    return "stream" in d and type(version) is int and version >= 3


cdef int _consumer_stream(object stream, uintptr_t *out) except -1:
    """The CUDA stream a DLPack consumer's stream argument names: 1 and out set, or 0 for -1
    (no synchronisation); None is the legacy default stream (array API)."""
    if stream is None:
        out[0] = CU_STREAM_LEGACY
        return 1
    return _stream_int(stream, "__dlpack__: stream", True, out)
