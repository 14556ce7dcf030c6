# asdlpack's protocol walk (docs/spec.md §3): one table, _STEPS, of the protocols in §3's order,
# each with the test that obj speaks it and its reader, and one loop, _walk_protocols, that asks
# them in turn. A _Walk keeps what one walk learns: each refusal, what the refusing protocol said
# the elements are (a later protocol must agree with it), and the error when none answers.

cdef object _MISSING = object()     # a present-test's answer: obj does not speak the protocol
cdef object _ctypes_pointer = _ctypes._Pointer


cdef object _typestr_stated(object value):
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


@cython.final
@cython.freelist(8)
@cython.no_gc                   # no cycle runs through it: only the walk's C frame holds it
cdef class _Walk:
    """What one walk over obj's protocols has learnt: the refusals in the order they came,
    what each refusing protocol said the elements are, whether a later protocol's reading
    agrees with that (accept), and the error when every protocol refused (fail)."""
    cdef object obj
    cdef type t
    cdef list refusals      # (protocol, exception); None until the first
    cdef list stated        # (refused protocol, its typestr or None); None until the first
    cdef int arrow          # the Arrow methods t has (HAS_*), -1 until looked up, 0 once asked

    cdef int refuse(self, str protocol, BaseException e, object value,
                    str replaces) except -1:
        """Record protocol's refusal e, and what value (what its present-test found) said the
        elements are. A refusal of `replaces` is dropped for it and becomes its cause (the
        Arrow reader's for __dlpack__'s: PyArrow's refuses nulls, bool8 and nested types with
        less to say). A MemoryError is no refusal: it goes on."""
        if isinstance(e, MemoryError):
            raise e
        if self.refusals is None:
            self.refusals = []
        elif replaces is not None:
            replaced = [x for name, x in self.refusals if name == replaces]
            if replaced and e.__cause__ is None:
                e.__cause__ = replaced[0]
            self.refusals = [x for x in self.refusals if x[0] != replaces]
        self.refusals.append((protocol, e))
        if self.stated is None:
            self.stated = []
        self.stated.append((protocol, _typestr_stated(value)))
        return 0

    cdef int not_used(self, str protocol, BaseException why) except -1:
        """Record why a protocol obj speaks was not asked: listed with the refusals, it said
        nothing of the elements."""
        if self.refusals is None:
            self.refusals = []
        self.refusals.append((protocol, why))
        return 0

    cdef DLPackObject accept(self, DLPackObject r, str protocol):
        """r, when no fallback describes the elements a refused protocol typed as other
        elements (§3); none refused: r at once.

        A refused protocol that named a type T (its typestr) admits only a later protocol whose
        dtype is T; one that named none admits any typed protocol, but not the buffer
        protocol's untyped bytes (format 'B', 'c' or none): they would turn e.g. one datetime64
        into eight uint8. An untyped buffer is what memoryview(obj) gives: the way out for the
        raw bytes.
        """
        cdef bytes fmt
        if self.stated is None:
            return r
        for refused, typestr in self.stated:
            if typestr is None:
                if not r._has_view or protocol != "buffer protocol":
                    continue
                fmt = b"B" if r._view.format == NULL else <bytes>r._view.format
                if fmt.lstrip(b"@=<>!") not in (b"B", b"c"):
                    continue
                raise Refusal(
                    f"buffer protocol: format {fmt.decode('latin-1')!r} would give the elements "
                    f"as untyped bytes, but {refused} refused this {type(self.obj).__qualname__} "
                    "as typed elements; no fallback may change the elements. Convert it to a "
                    "type DLPack carries, or take the raw bytes explicitly: "
                    "asdlpack(memoryview(obj))")
            try:
                code, bits, _ = _typestr(refused, self.obj, typestr, None)
            except BufferError:
                code = bits = -1               # a type DLPack cannot carry: nothing agrees
            if r.dl.dtype.code != code or r.dl.dtype.bits != bits or r.dl.dtype.lanes != 1:
                raise Refusal(
                    f"{protocol}: would give the elements as {r.dtype.name}, but {refused} "
                    f"typed them as 'typestr' = {_types._shown(typestr)} and refused; no "
                    "fallback may change the elements. Convert the data to a type DLPack "
                    "carries first"
                    + (", or take the raw bytes explicitly: asdlpack(memoryview(obj))"
                       if protocol == "buffer protocol" else ""))
        return r

    cdef int fail(self) except -1:
        """Raise the walk's error: obj speaks no protocol (TypeError, with the way in §3 names
        for its kind), one protocol's refusal, or every refusal in one."""
        cdef type t = self.t
        if self.refusals is None:
            raise TypeError(
                f"asdlpack: {t.__module__}.{t.__qualname__} object speaks no "
                "array-exchange protocol (none of __dlpack__, __cuda_array_interface__, "
                "__array_interface__, __array_struct__, the Arrow PyCapsule interface, the "
                "buffer protocol, a DLPack capsule or a ctypes pointer to a DLPack struct)"
                + _way_in(self.obj))
        if len(self.refusals) == 1:
            raise _as_refusal(self.refusals[0][0], self.refusals[0][1])
        lines = "\n".join([f"  {name}: {type(e).__name__}: {e}" for name, e in self.refusals])
        raise Refusal(f"asdlpack: every protocol that {t.__qualname__} speaks "
                      f"refused:\n{lines}") from self.refusals[-1][1]


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


cdef inline _Walk _new_walk(object obj):
    cdef _Walk w = _Walk.__new__(_Walk)
    w.obj = obj
    w.t = type(obj)
    w.arrow = -1
    return w


# -- the steps: a present-test gives what the reader reads, or _MISSING; one that raises is
# -- the protocol's refusal, as the reader's is ------------------------------------------------

ctypedef object (*_Present)(_Walk, str)
ctypedef DLPackObject (*_Read)(object, object)


cdef struct _Step:              # one row: the protocol, the test that obj speaks it, its reader
    PyObject *name          # the protocol, as refusals name it (held by _STEP_NAMES)
    _Present present        # given the walk and name: what read reads, or _MISSING
    _Read read              # given obj and what present found
    PyObject *replaces      # NULL, or a protocol whose refusal this one's replaces
    # final: obj is the DLPack struct itself (a capsule, a ctypes pointer): read's answer or
    # error is the walk's, whatever came before, and a present-test's error goes on as it is
    bint final


cdef enum:
    STEPS_MAX = 16
cdef _Step _STEPS[STEPS_MAX]    # the table, a C array: the loop takes no references
cdef int _n_steps = 0
cdef list _STEP_NAMES = []      # the names the table points to, alive with the module


cdef int _step(str name, _Present present, _Read read, str replaces, bint final) except -1:
    """Add the next row of the table."""
    global _n_steps
    if _n_steps == STEPS_MAX:
        raise SystemError("asdlpack's walk: more steps than STEPS_MAX")
    _STEP_NAMES.append((name, replaces))
    _STEPS[_n_steps].name = <PyObject *>name
    _STEPS[_n_steps].present = present
    _STEPS[_n_steps].read = read
    _STEPS[_n_steps].replaces = NULL if replaces is None else <PyObject *>replaces
    _STEPS[_n_steps].final = final
    _n_steps += 1
    return 0


cdef object _is_capsule(_Walk w, str name):
    return True if PyCapsule_CheckExact(w.obj) else _MISSING


cdef DLPackObject _read_capsule(object obj, object value):
    return _from_capsule(obj, obj)


cdef bint _tensor_type(type t) noexcept:
    """Whether t defines a tensor protocol (DLPack, its C exchange API or an array interface):
    those come before Arrow, which describes columns (a Pillow image means its (H, W, C)
    array, not its pixels)."""
    return (_type_has(t, "__dlpack__") or _type_has(t, "__dlpack_c_exchange_api__")
            or _type_has(t, "__array_interface__")
            or _type_has(t, "__cuda_array_interface__") or _type_has(t, "__array_struct__"))


cdef object _arrow_first(_Walk w, str name):
    """A type with Arrow methods and no tensor protocol is read through Arrow before any
    instance lookup of the tensor protocols (§13.1; _type_has): the methods, or _MISSING."""
    if _tensor_type(w.t):
        return _MISSING
    w.arrow = _arrow_type(w.t)
    if not w.arrow:
        return _MISSING
    methods = w.arrow
    w.arrow = 0                                 # asked here: not again after __array_struct__
    return methods


cdef object _arrow_after(_Walk w, str name):
    """The Arrow methods of a type the walk has not read through Arrow yet, or _MISSING."""
    if w.arrow < 0:
        w.arrow = _arrow_type(w.t)
    return w.arrow if w.arrow else _MISSING


cdef DLPackObject _read_arrow(object obj, object methods):
    return _from_arrow(obj, <int>methods)


cdef object _exchange_api(_Walk w, str name):
    """The type's usable __dlpack_c_exchange_api__ capsule, or _MISSING; torch's is asked
    through __dlpack__ (_from_torch). One that is not usable is listed with the refusals."""
    cap = _api_capsule(w.t)
    if cap is None or _is_torch_tensor(w.obj):
        return _MISSING
    if _usable_api(cap) == NULL:
        w.not_used(name, Refusal(f"__dlpack_c_exchange_api__: not used: {_unusable(cap)}"))
        return _MISSING
    return cap


cdef object _has_dlpack(_Walk w, str name):
    return True if getattr(w.obj, "__dlpack__", None) is not None else _MISSING


cdef DLPackObject _read_dlpack(object obj, object value):
    return _from_dlpack_method(obj)


cdef object _attribute(_Walk w, str name):
    """obj's attribute `name` (an interface's dict or capsule); a miss raises nothing, and None
    is "not supported", as for __hash__."""
    value = getattr(w.obj, name, _MISSING)
    return _MISSING if value is None else value


cdef DLPackObject _read_cuda_ai(object obj, object value):
    return _from_interface_dict(obj, value, "__cuda_array_interface__", True)


cdef DLPackObject _read_ai(object obj, object value):
    return _from_interface_dict(obj, value, "__array_interface__", False)


cdef object _has_buffer(_Walk w, str name):
    return True if PyObject_CheckBuffer(w.obj) else _MISSING


cdef DLPackObject _read_buffer_step(object obj, object value):
    return _from_buffer(obj)


cdef object _is_pointer(_Walk w, str name):
    return True if isinstance(w.obj, _ctypes_pointer) else _MISSING


cdef DLPackObject _read_pointer(object obj, object value):
    return _from_ctypes_pointer(obj)


# docs/spec.md §3's order, as the walk asks it (DLPackObject itself is asdlpack's own test).
#     protocol                     present-test   reader              replaces      final
_step("DLPack capsule",            _is_capsule,   _read_capsule,      None,         True)
_step("Arrow PyCapsule interface", _arrow_first,  _read_arrow,        "__dlpack__", False)
_step("__dlpack_c_exchange_api__", _exchange_api, _from_exchange_api, None,         False)
_step("__dlpack__",                _has_dlpack,   _read_dlpack,       None,         False)
_step("__cuda_array_interface__",  _attribute,    _read_cuda_ai,      None,         False)
_step("__array_interface__",       _attribute,    _read_ai,           None,         False)
_step("__array_struct__",          _attribute,    _from_array_struct, None,         False)
_step("Arrow PyCapsule interface", _arrow_after,  _read_arrow,        "__dlpack__", False)
_step("buffer protocol",           _has_buffer,   _read_buffer_step,  None,         False)
_step("ctypes pointer",            _is_pointer,   _read_pointer,      None,         True)


cdef DLPackObject _walk_protocols(object obj):
    """obj read by the first step of _STEPS it speaks whose reading agrees with what the
    protocols before it said (_Walk.accept); a step whose test or reader raises, or whose
    reading disagrees, is refused and hands over to the next. The walk's error when none
    reads it.

    One try block holds the steps until one raises (entering it is what costs, not the
    steps): the handler records the refusal and the walk re-enters at the next step. A test
    that raises follows one that answered _MISSING or a refusal, so its refusal says nothing
    of the elements (value is never an interface's dict then).
    """
    cdef _Walk w = _new_walk(obj)
    cdef const _Step *s = NULL
    cdef int i = 0
    _meet_ndarray(w.t, obj)
    value = _MISSING
    while i < _n_steps:
        try:
            while i < _n_steps:
                s = &_STEPS[i]
                i += 1
                value = s.present(w, <str>s.name)
                if value is _MISSING:
                    continue
                if s.final:
                    return s.read(obj, value)
                return w.accept(s.read(obj, value), <str>s.name)
        except Exception as e:
            if s.final:
                raise
            w.refuse(<str>s.name, e, value, None if s.replaces == NULL else <str>s.replaces)
        value = None        # an __array_struct__ capsule's destructor runs now, no refusal set
    w.fail()


cdef const _Step *_step_named(str protocol):
    """The walk's step for protocol (its first, for Arrow), or NULL."""
    cdef int i
    for i in range(_n_steps):
        if <str>_STEPS[i].name == protocol:
            return &_STEPS[i]
    return NULL
