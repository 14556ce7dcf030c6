# Reader: memory described by its address (dlpack.from_address) — a C library's buffer bound
# with ctypes or cffi, an allocator's block, a memory map. The caller vouches for the address and
# for the owner that keeps it alive; shape, strides and dtype go through _validate like every
# reader's. Sequences are snapshot first (docs/spec.md §7).


cdef uintptr_t _address_arg(object address) except? 0:
    cdef uintptr_t top = <uintptr_t>-1
    if address is None:                 # ctypes spells NULL so: c_void_p(0).value is None
        return 0
    if type(address) is bool:
        raise TypeError("from_address: address = True/False is not an address")
    try:
        a = PyNumber_Index(address)
    except TypeError:
        raise TypeError(f"from_address: address = {address!r:.80} is not an int; for a ctypes "
                        "object pass ctypes.addressof(obj), for a ctypes pointer "
                        "ctypes.cast(p, ctypes.c_void_p).value") from None
    if a < 0 or a > top:
        raise Refusal(f"from_address: address = {a} is outside the address space "
                      f"(0 to {top})")
    return a


cdef DLDevice _device_arg(object device, uintptr_t address) except *:
    """The declared device; for CUDA kinds the driver must agree (a pointer says where it is)."""
    cdef DLDevice dev, found
    dev.device_type = kDLCPU
    dev.device_id = 0
    if device is None:
        return dev
    dt, did = _device_pair(device, "from_address: device")
    if dt not in _DEVICE_TYPES:
        raise Refusal(f"from_address: device = {device!r:.80}: {dt} is not a DLDeviceType")
    if did < 0 or did > INT32_MAX:
        raise Refusal(f"from_address: device = {device!r:.80}: the id {did} is not a device "
                      "ordinal (0 and up)")
    dev.device_type = dt
    dev.device_id = did
    if _cuda_kind(dev.device_type) and address != 0:
        _cu_pointer_device(address, &found)
        if found.device_type != dev.device_type or found.device_id != dev.device_id:
            raise Refusal(f"from_address: device = {_device_name(dev)}, but the CUDA driver "
                          f"says address {address:#x} is on {_device_name(found)}")
    return dev


cdef int _within_owner(DLPackObject r, object owner, bint strided) except -1:
    """Where owner exposes the buffer protocol and the elements described reach into the
    memory it exposes (or the address lies in it: its first byte to one past its last), they
    must fit in it, and that export is held for the view's life: a bytearray cannot resize under
    it, nor an mmap close; read-only memory makes the view read-only (§2). An owner that exposes
    nothing (or other memory) leaves the address the caller's promise, and nothing of it is
    held."""
    cdef int64_t lo = 0, hi = r.desc.layout.nbytes
    cdef Py_ssize_t i
    cdef const Py_buffer *view = <const Py_buffer *>&r._view
    if r.desc.layout.count == 0 or owner is None or not PyObject_CheckBuffer(owner):
        return 0
    try:
        _hold_buffer(r, owner, PyBUF_FULL_RO, "from_address", "owner", "")
    except Exception:
        return 0                        # no buffer to bound the view by, nor to hold
    start = end = <uintptr_t>view.buf
    if view.suboffsets != NULL:
        end = None                      # indirect (PIL-style): no one range of memory
    elif view.len > 0 and view.strides == NULL:
        end = start + view.len
    elif view.len > 0:
        for i in range(view.ndim):
            step = (<object>view.shape[i] - 1) * <object>view.strides[i]   # no C overflow
            if step < 0:
                start += step
            else:
                end += step
        end += view.itemsize
    a = <uintptr_t>r.desc.dl.data
    if end is not None and not r.desc.layout.c_contig:
        _span(r, &lo, &hi)
    if end is None or not (start <= a <= end or (a + lo < end and a + hi > start)):
        _drop_buffer(r)
        return 0
    if a + lo < start or a + hi > end:
        over = (f"{a + hi - end} bytes past the end" if a + hi > end
                else f"{start - a - lo} bytes before the start")
        raise Refusal(f"from_address: the array (shape {r.shape}, strides {r.strides} "
                      f"elements of {r.desc.layout.itemsize} bytes) spans bytes {lo} to {hi} from "
                      f"address {a:#x}: {over} of the memory owner exposes "
                      f"({type(owner).__name__}, {end - start} bytes at {start:#x})"
                      + ("; strides are in elements, not bytes" if strided else ""))
    if view.readonly:
        r.desc.flags |= FLAG_READ_ONLY
    return 0


def from_address(address, shape, dtype, *, owner, strides=None, bint readonly=False,
                 device=None):
    """A ``DLPackObject`` over memory you describe, without copying: a C buffer, say.

    ``address`` is the first element's (an int; ``None`` is NULL, for zero-size arrays),
    ``shape`` a tuple of extents, ``dtype`` a name such as ``"float32"``, a ``DType`` or a NumPy
    dtype. ``owner`` is kept alive as long as the view or any tensor it exported lives: pass the
    object that frees the memory when it dies (``None`` only for memory that is never freed).
    ``strides`` are in elements (C-contiguous when omitted); ``readonly=True`` makes every
    consumer see immutable data; ``device`` is ``(DLDeviceType, id)``, the host by default.
    Shape, strides and dtype are checked as every protocol's are (docs/spec.md §2, §7); when
    ``owner`` exposes the buffer protocol and the address lies in its memory, the elements must
    fit in it, and that buffer is held while the view lives (a bytearray cannot resize, an mmap
    cannot close); otherwise the address is your promise.
    """
    cdef DLPackObject r
    cdef Py_ssize_t i, n
    cdef str protocol = "from_address"
    cdef uintptr_t a = _address_arg(address)
    shape_t = _ai_sequence(protocol, "shape", shape)
    strides_t = None if strides is None else _ai_sequence(protocol, "strides", strides)
    if strides_t is not None and len(strides_t) != len(shape_t):
        raise Refusal(f"from_address: field 'strides' = {strides_t!r:.80} has "
                      f"{len(strides_t)} entries for the {len(shape_t)} of 'shape'")
    code, bits, lanes, flags = _types.dtype_fields(protocol, dtype)
    cdef DLDevice dev = _device_arg(device, a)
    r = _new_object()
    r.desc.dl.dtype.code = code
    r.desc.dl.dtype.bits = bits
    r.desc.dl.dtype.lanes = lanes
    r.desc.dl.data = <void *>a
    r.desc.dl.device = dev
    r.desc.flags = flags | (FLAG_READ_ONLY if readonly else 0)
    n = len(shape_t)
    r._alloc_dims(n, protocol)
    for i in range(n):
        r.desc.dl.shape[i] = _ai_int(protocol, "shape", shape_t, i)
        if strides_t is not None:
            r.desc.dl.strides[i] = _ai_int(protocol, "strides", strides_t, i)
    _own_base(r, owner)
    r._validate(protocol, STRIDES_C if strides_t is None else STRIDES_ELEMENTS, 0, -1)
    _within_owner(r, owner, strides_t is not None)
    return r
