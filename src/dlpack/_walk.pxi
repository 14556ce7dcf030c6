# asdlpack's protocol walk (docs/spec.md §3): one table, _STEPS, of the protocols in §3's order,
# each with the test that obj speaks it and its reader, and one loop, _walk_protocols, that asks
# them in turn. A _Refusals, made at a walk's first refusal, keeps each refusal and what the
# refusing protocol said the elements are (a later protocol must agree with it), and words the
# error when none answers.

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
@cython.no_gc                   # no cycle runs through it: only the walk's C frame holds it
cdef class _Refusals:
    """What a walk over obj's protocols learnt from those that refused: each refusal in the
    order they came and what the refusing protocol said the elements are; whether a later
    protocol's reading agrees with that (accept), and the error when every one refused
    (fail)."""
    cdef object obj
    cdef list refusals      # (protocol, exception), in order
    cdef list stated        # (refused protocol, its typestr or None); None until the first

    cdef int refuse(self, str protocol, BaseException e, object value,
                    str replaces) except -1:
        """Record protocol's refusal e, and what value (what its present-test found) said the
        elements are. A refusal of `replaces` is dropped for it and becomes its cause (the
        Arrow reader's for __dlpack__'s: PyArrow's refuses nulls, bool8 and nested types with
        less to say). A MemoryError is no refusal: it goes on."""
        if isinstance(e, MemoryError):
            raise e
        if replaces is not None:
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
            if (r.desc.dl.dtype.code != code or r.desc.dl.dtype.bits != bits
                    or r.desc.dl.dtype.lanes != 1):
                raise Refusal(
                    f"{protocol}: would give the elements as {r.dtype.name}, but {refused} "
                    f"typed them as 'typestr' = {_types._shown(typestr)} and refused; no "
                    "fallback may change the elements. Convert the data to a type DLPack "
                    "carries first"
                    + (", or take the raw bytes explicitly: asdlpack(memoryview(obj))"
                       if protocol == "buffer protocol" else ""))
        return r

    cdef int fail(self) except -1:
        """Raise the walk's error: one protocol's refusal, or every refusal in one."""
        if len(self.refusals) == 1:
            raise _as_refusal(self.refusals[0][0], self.refusals[0][1])
        lines = "\n".join([f"  {name}: {type(e).__name__}: {e}" for name, e in self.refusals])
        raise Refusal(f"asdlpack: every protocol that {type(self.obj).__qualname__} speaks "
                      f"refused:\n{lines}") from self.refusals[-1][1]


cdef _Refusals _refusals(object obj):
    """The record of a walk over obj, at its first refusal."""
    cdef _Refusals r = _Refusals.__new__(_Refusals)
    r.obj = obj
    r.refusals = []
    return r


cdef int _speaks_none(object obj) except -1:
    """The walk's error for an object that speaks no protocol: a TypeError naming its type, the
    protocols the table asked in their order, and, for its kind, the way in §3 names."""
    cdef list names = []
    for name, _ in _STEP_NAMES:
        if name not in names:
            names.append(name)
    raise TypeError(
        f"asdlpack: {_text(type(obj).__module__)}.{_text(type(obj).__qualname__)} object "
        f"speaks no array-exchange protocol (none of {', '.join(names[:-1])} or {names[-1]})"
        + _way_in(obj))


cdef str _text(object value):
    """A class attribute as plain text for a message: a str subclass's methods, which a
    hostile class may make raise, are not called; what is no str is shown as its type."""
    return str.__str__(value) if isinstance(value, str) else f"<{type(value).__name__}>"


cdef str _way_in(object obj):
    """For an object that speaks no protocol: the step that makes an array of its kind
    (spec §3), or "" when there is none to name."""
    cdef type t = type(obj)
    top = _text(t.__module__).partition(".")[0]
    if top == "tensorflow" and "Variable" in _text(t.__name__):
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
    try:
        converts = getattr(obj, "__array__", None) is not None
    except Exception:                   # a lookup that raises names no step
        converts = False
    if converts:
        return "; it converts itself to NumPy (__array__): pass numpy.asarray(x)"
    return ""


# -- the steps: a present-test gives what the reader reads, or _MISSING (one that raises is the
# protocol's refusal, as the reader's is); a reader gives the object or raises ------------------

ctypedef object (*_Present)(object obj, type t, int *arrow, str name)
ctypedef DLPackObject (*_Read)(object, object)


cdef struct _Step:              # one row: the protocol, the test that obj speaks it, its reader
    PyObject *name          # the protocol, as refusals name it (held by _STEP_NAMES)
    _Present present        # what read reads, or _MISSING (or _NotUsed)
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


cdef object _is_capsule(object obj, type t, int *arrow, str name):
    return True if PyCapsule_CheckExact(obj) else _MISSING


cdef DLPackObject _read_capsule(object obj, object value):
    return _from_capsule(obj, obj)


cdef bint _tensor_type(type t) noexcept:
    """Whether t defines a tensor protocol (DLPack, its C exchange API or an array interface):
    those come before Arrow, which describes columns (a Pillow image means its (H, W, C)
    array, not its pixels)."""
    return (_type_has(t, "__dlpack__") or _type_has(t, "__dlpack_c_exchange_api__")
            or _type_has(t, "__array_interface__")
            or _type_has(t, "__cuda_array_interface__") or _type_has(t, "__array_struct__"))


cdef object _numpy_column(object obj, type t, int *arrow, str name):
    """A column Arrow refused (it offers Arrow's view of its values and NumPy's, __array__, and
    no tensor protocol) whose values are NumPy's own (its dtype a numpy.dtype of a kind DLPack
    carries: bool, integer, float, complex): Arrow's view was a conversion (pandas makes each
    NaN a null, a bool bits), NumPy's is the values. True, or _MISSING."""
    if (not (_type_has(t, "__array__") and _type_has(t, "dtype")) or _tensor_type(t)
            or not _arrow_type(t)):
        return _MISSING
    dtype = obj.dtype
    np = sys.modules.get("numpy")       # after dtype, which may be what imports NumPy
    if np is None or not isinstance(dtype, np.dtype):
        return _MISSING
    return True if dtype.kind in "biufc" else _MISSING


cdef DLPackObject _read_numpy_column(object obj, object value):
    """The column's values as NumPy views them, __array__(copy=False) (NumPy's contract: the
    values themselves, or an error), read as the ndarray they are (base: that ndarray). Only
    a plain ndarray: a subclass may mean more than its memory says (a MaskedArray's mask)."""
    values = obj.__array__(copy=False)
    if type(values) is not sys.modules["numpy"].ndarray:
        raise Refusal(f"__array__(copy=False) of {_text(type(obj).__qualname__)} gave a "
                      f"{_text(type(values).__qualname__)}, not a numpy.ndarray (a subclass, "
                      "such as a MaskedArray, may mean more than its memory): convert it "
                      "with numpy.asarray after handling what the subclass adds")
    return _asdlpack(values, False, False, -1)


cdef object _arrow_first(object obj, type t, int *arrow, str name):
    """A type with Arrow methods and no tensor protocol is read through Arrow before any
    instance lookup of the tensor protocols (§13.1; _type_has): the methods, or _MISSING.
    *arrow: the Arrow methods t has (HAS_*), -1 until looked up, 0 once asked."""
    if _tensor_type(t):
        return _MISSING
    arrow[0] = _arrow_type(t)
    if not arrow[0]:
        return _MISSING
    methods = arrow[0]
    arrow[0] = 0                                # asked here: not again after __array_struct__
    return methods


cdef object _arrow_after(object obj, type t, int *arrow, str name):
    """The Arrow methods of a type the walk has not read through Arrow yet, or _MISSING."""
    if arrow[0] < 0:
        arrow[0] = _arrow_type(t)
    return arrow[0] if arrow[0] else _MISSING


cdef DLPackObject _read_arrow(object obj, object methods):
    return _from_arrow(obj, <int>methods)


@cython.final
cdef class _NotUsed:
    """A present-test's answer: obj speaks the protocol, which cannot be used (why says why);
    listed with the refusals, it says nothing of the elements."""
    cdef object why


cdef object _exchange_api(object obj, type t, int *arrow, str name):
    """The type's usable __dlpack_c_exchange_api__ capsule, or _MISSING; torch's is asked
    through __dlpack__ (_from_torch). One that is not usable is _NotUsed."""
    cdef _NotUsed unusable
    cap = _api_capsule(t)
    if cap is None or _is_torch_tensor(obj):
        return _MISSING
    if _usable_api(cap) == NULL:
        unusable = _NotUsed.__new__(_NotUsed)
        unusable.why = Refusal(f"__dlpack_c_exchange_api__: not used: {_unusable(cap)}")
        return unusable
    return cap


cdef object _has_dlpack(object obj, type t, int *arrow, str name):
    return True if getattr(obj, "__dlpack__", None) is not None else _MISSING


cdef DLPackObject _read_dlpack(object obj, object value):
    return _from_dlpack_method(obj)


cdef object _attribute(object obj, type t, int *arrow, str name):
    """obj's attribute `name` (an interface's dict or capsule); a miss raises nothing, and None
    is "not supported", as for __hash__."""
    value = getattr(obj, name, _MISSING)
    return _MISSING if value is None else value


cdef DLPackObject _read_cuda_ai(object obj, object value):
    return _from_interface_dict(obj, value, "__cuda_array_interface__", True)


cdef DLPackObject _read_ai(object obj, object value):
    return _from_interface_dict(obj, value, "__array_interface__", False)


cdef object _has_buffer(object obj, type t, int *arrow, str name):
    return True if PyObject_CheckBuffer(obj) else _MISSING


cdef DLPackObject _read_buffer_step(object obj, object value):
    return _from_buffer(obj)


cdef object _is_pointer(object obj, type t, int *arrow, str name):
    return True if isinstance(obj, _ctypes_pointer) else _MISSING


cdef DLPackObject _read_pointer(object obj, object value):
    return _from_ctypes_pointer(obj)


# docs/spec.md §3's order, as the walk asks it (DLPackObject itself is asdlpack's own test).
#     protocol                           present-test   reader              replaces      final
_step("DLPack capsule",                  _is_capsule,   _read_capsule,      None,         True)
_step("Arrow PyCapsule interface",       _arrow_first,  _read_arrow,        "__dlpack__", False)
_step("__array__ (NumPy-backed column)", _numpy_column, _read_numpy_column, None,         False)
_step("__dlpack_c_exchange_api__",       _exchange_api, _from_exchange_api, None,         False)
_step("__dlpack__",                      _has_dlpack,   _read_dlpack,       None,         False)
_step("__cuda_array_interface__",        _attribute,    _read_cuda_ai,      None,         False)
_step("__array_interface__",             _attribute,    _read_ai,           None,         False)
_step("__array_struct__",                _attribute,    _from_array_struct, None,         False)
_step("Arrow PyCapsule interface",       _arrow_after,  _read_arrow,        "__dlpack__", False)
_step("buffer protocol",                 _has_buffer,   _read_buffer_step,  None,         False)
_step("ctypes pointer",                  _is_pointer,   _read_pointer,      None,         True)


cdef DLPackObject _walk_protocols(object obj):
    """obj read by the first step of _STEPS it speaks whose reading agrees with what the
    protocols before it said (_Refusals.accept); a step whose test or reader raises, or whose
    reading disagrees, is refused and hands over to the next. The walk's error when none
    reads it.

    One try block holds the steps until one raises (entering it is what costs, not the
    steps): the handler records the refusal and the walk re-enters at the next step. A test
    that raises follows one that answered _MISSING or was refused, so its refusal says nothing
    of the elements (value is never an interface's dict then). Nothing is allocated for the
    record until a protocol refuses.
    """
    cdef type t = type(obj)
    cdef _Refusals refused = None
    cdef const _Step *s = NULL
    cdef int i = 0, arrow = -1
    _meet_ndarray(t, obj)
    value = _MISSING
    while i < _n_steps:
        try:
            while i < _n_steps:
                s = &_STEPS[i]
                i += 1
                value = s.present(obj, t, &arrow, <str>s.name)
                if value is _MISSING:
                    continue
                if type(value) is _NotUsed:
                    if refused is None:
                        refused = _refusals(obj)
                    refused.not_used(<str>s.name, (<_NotUsed>value).why)
                    continue
                if s.final or refused is None:     # final, or nothing to agree with
                    return s.read(obj, value)
                return refused.accept(s.read(obj, value), <str>s.name)
        except Exception as e:
            if s.final:
                raise
            if refused is None:
                refused = _refusals(obj)
            refused.refuse(<str>s.name, e, value, None if s.replaces == NULL else <str>s.replaces)
        value = None        # an __array_struct__ capsule's destructor runs now, no refusal set
    if refused is None:
        _speaks_none(obj)
    refused.fail()


cdef const _Step *_step_named(str protocol):
    """The walk's step for protocol (its first, for Arrow), or NULL."""
    cdef int i
    for i in range(_n_steps):
        if <str>_STEPS[i].name == protocol:
            return &_STEPS[i]
    return NULL
