# Limits, device kinds and the checked size arithmetic every reader, writer and allocator
# shares; what several readers ask of a description (byte order, sequence snapshots, ml_dtypes
# names).

cdef enum:
    MAX_NDIM = 1024          # more dimensions than any library makes: a corrupt or hostile struct
    STACK_DIMS = 8           # per-dimension scratch of this many dimensions lives on the C stack


cdef inline int64_t *_scratch(int64_t *small, Py_ssize_t fits,
                              Py_ssize_t count) noexcept nogil:
    """count int64 of per-dimension scratch: small (the caller's, fits long) when they fit,
    else the heap (NULL when out of memory); _scratch_free after. A call's stack use stays
    bounded whatever ndim, so threads with small stacks can copy (spec §7)."""
    if count <= fits:
        return small
    return <int64_t *>malloc(<size_t>count * sizeof(int64_t))


cdef inline void _scratch_free(int64_t *scratch, const int64_t *small) noexcept nogil:
    if scratch != small:
        free(scratch)


cdef inline bint _ndim_in_range(Py_ssize_t ndim) noexcept nogil:
    return 0 <= ndim <= MAX_NDIM


cdef int _check_dims(str protocol, str field, Py_ssize_t ndim, bint has_shape) except -1:
    """The one rank rule of every description: 0 to MAX_NDIM dimensions, and a shape (not
    NULL) unless there are none; ``field`` names the rank as the protocol does."""
    if not _ndim_in_range(ndim):
        raise Refusal(f"{protocol}: field '{field}' = {ndim} is out of range "
                      f"(0 to {MAX_NDIM})")
    if ndim > 0 and not has_shape:
        raise Refusal(f"{protocol}: field 'shape' is NULL for {field} = {ndim}")
    return 0


# The device kinds, one table: DLDeviceType (dlpack.h's members) and the name Arrow's C device
# interface gives the same number (spec §13). _known_device, _arrow_kind, _device_name and
# the Arrow reader's refusals all read it.
cdef dict _DEVICE_TYPES = {int(d): d for d in DLDeviceType}
cdef dict _ARROW_DEVICE_NAMES = {int(d): "ARROW_DEVICE_" + name for d, name in (
    (DLDeviceType.kDLCPU, "CPU"), (DLDeviceType.kDLCUDA, "CUDA"),
    (DLDeviceType.kDLCUDAHost, "CUDA_HOST"), (DLDeviceType.kDLOpenCL, "OPENCL"),
    (DLDeviceType.kDLVulkan, "VULKAN"), (DLDeviceType.kDLMetal, "METAL"),
    (DLDeviceType.kDLVPI, "VPI"), (DLDeviceType.kDLROCM, "ROCM"),
    (DLDeviceType.kDLROCMHost, "ROCM_HOST"), (DLDeviceType.kDLExtDev, "EXT_DEV"),
    (DLDeviceType.kDLCUDAManaged, "CUDA_MANAGED"), (DLDeviceType.kDLOneAPI, "ONEAPI"),
    (DLDeviceType.kDLWebGPU, "WEBGPU"), (DLDeviceType.kDLHexagon, "HEXAGON"))}
cdef enum:
    _KIND_KNOWN = 1
    _KIND_ARROW = 2
    _KIND_LIMIT = 32                # above every DLDeviceType value
cdef unsigned char _KINDS[_KIND_LIMIT]      # the table as bits, for code without the GIL


cdef int _fill_kinds() except -1:
    """_KINDS from the two dicts above."""
    memset(_KINDS, 0, sizeof(_KINDS))
    for kind in _DEVICE_TYPES:
        _KINDS[kind] = _KIND_KNOWN | (_KIND_ARROW if kind in _ARROW_DEVICE_NAMES else 0)
    return 0


_fill_kinds()


# Devices whose memory the CPU can read and write directly.
cdef inline bint _host_accessible(int32_t device_type) noexcept nogil:
    return (device_type == kDLCPU or device_type == kDLCUDAHost
            or device_type == kDLCUDAManaged or device_type == kDLROCMHost)

cdef inline bint _cuda_kind(int32_t device_type) noexcept nogil:
    return (device_type == kDLCUDA or device_type == kDLCUDAHost
            or device_type == kDLCUDAManaged)

cdef inline bint _known_device(int32_t device_type) noexcept nogil:
    """A DLDeviceType member of the vendored dlpack.h (the table above)."""
    return 0 <= device_type < _KIND_LIMIT and _KINDS[device_type] & _KIND_KNOWN != 0

cdef inline bint _arrow_kind(int32_t device_type) noexcept nogil:
    """A device Arrow's C device interface numbers as DLPack does (spec §13.2)."""
    return 0 <= device_type < _KIND_LIMIT and _KINDS[device_type] & _KIND_ARROW != 0


cdef int _unknown_device(str protocol, DLDevice dev) except -1:
    raise Refusal(f"{protocol}: field 'device' = ({dev.device_type}, {dev.device_id}): "
                  f"{dev.device_type} is not a device type DLPack {DLPACK_MAJOR}."
                  f"{DLPACK_MINOR} names; upgrade pydlpack if the producer speaks a newer "
                  "DLPack")


cdef DLPackExchangeAPI _API          # filled in by _writers/exchange_api.pxi
cdef tuple _CPU0 = (DLDeviceType.kDLCPU, 0)


cdef object _device_tuple(DLDevice dev):
    if dev.device_type == kDLCPU and dev.device_id == 0:
        return _CPU0
    return (_DEVICE_TYPES.get(dev.device_type, dev.device_type), dev.device_id)


cdef str _device_name(DLDevice dev):
    d = _DEVICE_TYPES.get(dev.device_type)
    return f"{d.name if d is not None else dev.device_type}:{dev.device_id}"


# -- sizes: the checked arithmetic every reader, exporter and allocator shares ------------------

cdef enum SizeError:
    SIZE_OK = 0
    SIZE_NO_BITS            # bits or lanes is 0
    SIZE_PADDED_WIDE        # IS_SUBBYTE_TYPE_PADDED on a type of a byte or more
    SIZE_ODD_BITS           # wider than a byte but not a whole number of bytes
    SIZE_NEGATIVE           # a negative extent
    SIZE_OVERFLOW           # element count or byte size beyond int64


cdef SizeError _item_storage(DLDataType dtype, bint padded, int64_t *itemsize,
                             bint *packed) noexcept nogil:
    """Bytes per element (1 for packed sub-byte types, which set packed)."""
    cdef int64_t ebits = <int64_t>dtype.bits * dtype.lanes
    packed[0] = False
    if ebits == 0:
        return SIZE_NO_BITS
    if padded:
        if dtype.bits >= 8:
            return SIZE_PADDED_WIDE
        itemsize[0] = dtype.lanes
    elif ebits % 8 == 0:
        itemsize[0] = ebits // 8
    elif ebits < 8:
        itemsize[0] = 1
        packed[0] = True
    else:
        return SIZE_ODD_BITS
    return SIZE_OK


cdef SizeError _element_count(int ndim, const int64_t *shape, int64_t *count) noexcept nogil:
    """Number of elements; the nonzero extents' product must fit too (it sizes C strides)."""
    cdef int i
    cdef int64_t c = 1
    cdef bint empty = False
    for i in range(ndim):
        if shape[i] < 0:
            return SIZE_NEGATIVE
        if shape[i] == 0:
            empty = True
        elif _mul_ovf(c, shape[i], &c):
            return SIZE_OVERFLOW
    count[0] = 0 if empty else c
    return SIZE_OK


cdef SizeError _byte_size(int64_t count, DLDataType dtype, int64_t itemsize, bint packed,
                          int64_t *nbytes) noexcept nogil:
    """Bytes that count elements occupy (packed sub-byte types rounded up to a byte)."""
    cdef int64_t bits
    if packed:
        if _mul_ovf(count, <int64_t>dtype.bits * dtype.lanes, &bits):
            return SIZE_OVERFLOW
        nbytes[0] = bits // 8 + (bits % 8 != 0)
    elif _mul_ovf(count, itemsize, nbytes):
        return SIZE_OVERFLOW
    return SIZE_OK


cdef inline void _c_strides(int ndim, const int64_t *shape, int64_t *out) noexcept nogil:
    """C-contiguous element strides (zero extents count as 1, as NumPy's do)."""
    cdef int i
    cdef int64_t s = 1
    for i in range(ndim - 1, -1, -1):
        out[i] = s
        if shape[i] > 1:
            s *= shape[i]        # cannot wrap: _element_count bounded the nonzero product


cdef inline bint _span_of(int ndim, const int64_t *shape, const int64_t *strides,
                          int64_t itemsize, int64_t *lo, int64_t *hi) noexcept nogil:
    """Lowest and one-past-highest byte offset from data that the elements of a non-empty
    array occupy; True when a step, either end or their distance overflows int64."""
    cdef int i
    cdef int64_t step, end
    lo[0] = 0
    hi[0] = 0
    for i in range(ndim):
        if (_mul_ovf(shape[i] - 1, strides[i], &step) or _mul_ovf(step, itemsize, &step)
                or (_add_ovf(lo[0], step, lo) if step < 0 else _add_ovf(hi[0], step, hi))):
            return True
    return _add_ovf(hi[0], itemsize, hi) or _sub_ovf(hi[0], lo[0], &end)


cdef str _size_message(str protocol, SizeError err, DLDataType t, object shape=None):
    name = _types.dtype(t.code, t.bits, t.lanes).name
    if err == SIZE_NO_BITS:
        return (f"{protocol}: field 'dtype' = {name} has bits={t.bits}, lanes={t.lanes}; "
                "both must be positive")
    if err == SIZE_PADDED_WIDE:
        return (f"{protocol}: field 'flags' has IS_SUBBYTE_TYPE_PADDED for the {t.bits}-bit "
                f"type {name}; padding applies only to types narrower than a byte")
    if err == SIZE_ODD_BITS:
        return (f"{protocol}: field 'dtype' = {name} (bits={t.bits}, lanes={t.lanes}) is not a "
                "whole number of bytes; only types narrower than a byte may be packed")
    if err == SIZE_NEGATIVE:
        return f"{protocol}: field 'shape' = {shape} has a negative extent"
    return (f"{protocol}: field 'shape' = {shape} has more elements of {name} than memory can "
            "hold (the byte size overflows 64 bits)")


# -- dtypes: C copies of _types' one table of widths per typekind, made at import ---------------

cdef uint8_t _KIND_CODES[128]       # typekind -> DLPack type code
cdef uint64_t _KIND_SIZES[128]      # bit n set: an n-byte item of that kind is a DLPack type
# PEP 3118 format characters whose items are such a type: [Z][char] (Z: a complex of char) ->
# its typekind (0: none), and [Z][char][standard]: its item size, native (@) or standard (= < >
# !) as struct defines them (l and L differ where a C long is 8 bytes; ctypes writes '<l').
cdef unsigned char _FORMAT_KINDS[2][128]
cdef uint8_t _FORMAT_SIZES[2][128][2]


cdef inline bint _kind_width(unsigned char kind, Py_ssize_t itemsize) noexcept nogil:
    """Whether an itemsize-byte item of typekind kind is a DLPack type (_types._KIND_WIDTHS)."""
    return kind < 128 and 0 < itemsize < 64 and (_KIND_SIZES[kind] >> itemsize) & 1


cdef void _format_entry(bint cplx, unsigned char c, unsigned char kind, Py_ssize_t native,
                        Py_ssize_t standard) noexcept:
    """A format character whose items are a DLPack type at both its sizes."""
    if _kind_width(kind, native) and _kind_width(kind, standard):
        _FORMAT_KINDS[cplx][c] = kind
        _FORMAT_SIZES[cplx][c][0] = <uint8_t>native
        _FORMAT_SIZES[cplx][c][1] = <uint8_t>standard


cdef int _fill_dtype_tables() except -1:
    """The tables above: widths from _types, format characters' sizes from struct."""
    memset(_KIND_CODES, 0, sizeof(_KIND_CODES))
    memset(_KIND_SIZES, 0, sizeof(_KIND_SIZES))
    memset(_FORMAT_KINDS, 0, sizeof(_FORMAT_KINDS))
    memset(_FORMAT_SIZES, 0, sizeof(_FORMAT_SIZES))
    for kind, code in _types._KIND_CODE.items():
        for size in _types._KIND_WIDTHS[kind]:
            if size * 8 <= 255:                 # what DLDataType.bits can hold
                _KIND_SIZES[ord(kind)] |= (<uint64_t>1) << size
        _KIND_CODES[ord(kind)] = code
    for kind, chars in (("b", "?"), ("i", "bhilqn"), ("u", "BHILQNc"), ("f", "efd")):
        for c in chars:
            native = _struct.calcsize("@" + c)
            standard = native if c in "nN" else _struct.calcsize("=" + c)   # n N: native only
            _format_entry(False, ord(c), ord(kind), native, standard)
            if kind == "f":
                _format_entry(True, ord(c), b'c', 2 * native, 2 * standard)    # Ze Zf Zd
    return 0


_fill_dtype_tables()


cdef inline bint _kind_dtype(unsigned char kind, Py_ssize_t itemsize,
                             DLDataType *out) noexcept nogil:
    """The DLPack type of an itemsize-byte item of typekind kind, in C; False when the table has
    none (the callers' Python paths name ml_dtypes types and the refusals)."""
    if not _kind_width(kind, itemsize):
        return False
    out.code = _KIND_CODES[kind]
    out.bits = <uint8_t>(itemsize * 8)
    out.lanes = 1
    return True


# -- what several readers ask of a description ------------------------------------------------

cdef inline bint _native_order(char order) noexcept nogil:
    cdef int one = 1
    cdef bint little = (<char *>&one)[0] == 1
    if order == b'>' or order == b'!':
        return not little
    if order == b'<':
        return little
    return True


cdef tuple _ai_sequence(str protocol, str field, object value):
    """A snapshot of a shape or strides sequence (tuple or list): its own storage, as NumPy
    reads a shape (a subclass's __iter__, __len__ or __getitem__ does not run)."""
    if isinstance(value, tuple):
        return PyTuple_GetSlice(value, 0, PyTuple_GET_SIZE(value))
    if isinstance(value, list):
        return PyList_AsTuple(value)
    raise Refusal(f"{protocol}: field '{field}' = {value!r} is not a tuple of ints")


cdef BaseException _as_refusal(str protocol, BaseException e):
    """A protocol's refusal as a Refusal naming the protocol (ours already are one)."""
    if isinstance(e, Refusal):
        return e
    r = Refusal(f"{protocol}: {type(e).__name__}: {e}")
    r.__cause__ = e
    return r


cdef object _ml_module = None   # the ml_dtypes module _ml_types was built from
cdef dict _ml_types = {}        # id(ml_dtypes scalar type) -> (that type, its name)


cdef str _ml_name(object obj, str typestr):
    """The ml_dtypes type behind a 'V' typestr (or 'f1', float8_e5m2's, in any spelling), or None.

    Only a real dtype object says it: obj.dtype must be a numpy.dtype whose scalar type *is*
    ml_dtypes' (by identity). A name alone (a structured field called 'bfloat16', a descr, a
    dtype look-alike) is not a type; docs/spec.md §3.7.
    """
    global _ml_module
    cdef Py_ssize_t i, n = len(typestr)
    if n < 3:
        return None
    if typestr[1] == "f":                   # 'f1', 'f01'...: float8_e5m2's; 'f4' is float32
        if typestr[n - 1] != "1":
            return None
        for i in range(2, n - 1):
            if typestr[i] != "0":
                return None
    elif typestr[1] != "V":
        return None
    ml = sys.modules.get("ml_dtypes")
    np = sys.modules.get("numpy")
    if ml is None or np is None:
        return None
    try:
        dt = obj.dtype
        if not isinstance(dt, np.dtype):
            return None
        scalar = dt.type
    except Exception:
        return None           # no dtype to ask: the typestr alone says opaque bytes
    if ml is not _ml_module:
        _ml_types.clear()
        for name in _types.ML_DTYPES:
            t = getattr(ml, name, None)
            if isinstance(t, type):
                _ml_types[id(t)] = (t, name)
        _ml_module = ml
    hit = _ml_types.get(id(scalar))
    return hit[1] if hit is not None and hit[0] is scalar else None


cdef tuple _device_pair(object value, str what):
    """The one reader of a (device_type, device_id) pair (__dlpack__'s dl_device, from_address's
    device): a tuple or list (subclasses too) of two ints (NumPy's too, by __index__), read once
    from its own storage (no __iter__ or __len__ runs); anything else, bools and floats
    included, is a TypeError naming `what` and the value."""
    if PyTuple_Check(value):
        pair = PyTuple_GetSlice(value, 0, PyTuple_GET_SIZE(value))
    elif PyList_Check(value):
        pair = PyList_GetSlice(value, 0, PyList_GET_SIZE(value))
    else:
        pair = None
    try:
        if pair is None or len(pair) != 2:
            raise TypeError
        dt, did = pair
        if type(dt) is bool or type(did) is bool:
            raise TypeError
        return PyNumber_Index(dt), PyNumber_Index(did)
    except TypeError:
        raise TypeError(f"{what} = {value!r:.80} is not a (device_type, device_id) tuple or "
                        "list of two ints, e.g. (dlpack.DLDeviceType.kDLCPU, 0)") from None
