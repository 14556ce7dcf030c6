# Arrow's schemas, read by the Arrow reader (_readers/arrow.pxi) and by the writer's
# requested_schema (_writers/arrow.pxi): format strings, the extension metadata (arrow.bool8,
# arrow.fixed_shape_tensor) and the capsules that carry the structs (docs/spec.md §13). Every
# struct is foreign: each child is copied once before it is read.


cdef enum ArrowExt:
    EXT_NONE
    EXT_BOOL8               # arrow.bool8: int8 storage, DLPack bool
    EXT_TENSOR              # arrow.fixed_shape_tensor: fixed-size list storage

cdef enum:
    ARROW_MAX_PAIRS = 4096          # metadata key/value pairs: more is a corrupt string
    ARROW_MAX_ITEM = 1 << 24        # bytes of one metadata key or value

ctypedef struct _ArrowType:
    DLDataType dtype
    int nlists                      # fixed-size list levels above the values
    bint unwrap                     # the column is the one field of a struct (record batch)
    bint tensor                     # arrow.fixed_shape_tensor (then nlists == 1)
    # the list sizes, outermost first: in small, the heap past STACK_DIMS levels (spec §7). Its
    # holder sets sizes = small before it is read, and runs _arrow_type_free whatever happens
    int64_t *sizes
    int64_t small[STACK_DIMS]


cdef int _arrow_list(_ArrowType *t, int64_t size) except -1:
    """Add a fixed-size list level of size (fewer than MAX_NDIM - 1 before: the caller's
    check)."""
    cdef int64_t *grown
    if t.nlists == STACK_DIMS:
        grown = <int64_t *>malloc((MAX_NDIM - 1) * sizeof(int64_t))
        if grown == NULL:
            raise MemoryError()
        memcpy(grown, t.small, sizeof(t.small))
        t.sizes = grown
    t.sizes[t.nlists] = size
    t.nlists += 1
    return 0


cdef inline void _arrow_type_free(_ArrowType *t) noexcept:
    if t.sizes != t.small:
        free(t.sizes)

# The variable-size types' names as Arrow (and PyArrow's pa.<name>()) call them.
cdef dict _ARROW_NAMES = {
    "u": "string", "U": "large_string", "vu": "string_view", "z": "binary",
    "Z": "large_binary", "vz": "binary_view", "+l": "list", "+L": "large_list",
    "+vl": "list_view", "+vL": "large_list_view"}

# Nulls (§13.1): a NaN in a NumPy-backed column is a value and passes (§3); a missing value is
# filled, or made NaN in a NumPy float dtype.
cdef str _FILL_NULL = (
    "DLPack has no nulls. A NaN is a value, not a null: a NumPy-backed column (pandas dtype "
    "float32/float64) comes through with its NaN (a DataFrame's column: pass df[name], or "
    "df[name].to_numpy() before pandas 3); real missing values (pd.NA, a nullable 'Float32'/"
    "'Int64' or Arrow-backed dtype, an Arrow null) must be filled first (pc.fill_null(arr, "
    "value); Polars: series.fill_null(value); pandas: series.fillna(value)) or become NaN in a "
    "NumPy float dtype (pandas: series.astype('float64'))")


cdef str _c_text(const char *p, size_t limit=64):
    """A foreign C string for a message: at most limit bytes, never an error."""
    if p == NULL:
        return "NULL"
    cdef size_t n = strnlen(p, limit)
    text = p[:n].decode("utf-8", "replace")
    return text + "…" if n == limit else text


cdef str _at(int depth):
    """Where in the column a message points."""
    if depth == 0:
        return "the array"
    return f"the array's child at depth {depth}"


cdef bint _arrow_primitive(const char *f, DLDataType *out) noexcept nogil:
    """The DLPack type of a one-character primitive format (False for anything else)."""
    cdef char c = f[0]
    if c == 0 or f[1] != 0:
        return False
    out.lanes = 1
    if c == b'c' or c == b's' or c == b'i' or c == b'l':
        out.code = kDLInt
    elif c == b'C' or c == b'S' or c == b'I' or c == b'L':
        out.code = kDLUInt
    elif c == b'e' or c == b'f' or c == b'g':
        out.code = kDLFloat
    else:
        return False
    if c == b'c' or c == b'C':
        out.bits = 8
    elif c == b's' or c == b'S' or c == b'e':
        out.bits = 16
    elif c == b'i' or c == b'I' or c == b'f':
        out.bits = 32
    else:
        out.bits = 64
    return True


cdef int64_t _arrow_list_size(const char *f) noexcept nogil:
    """n of a fixed-size list format "+w:n"; -1 for another format, -2 for a malformed n."""
    cdef int64_t n = 0
    cdef const char *p = f + 3
    if not (f[0] == b'+' and f[1] == b'w' and f[2] == b':'):
        return -1
    if p[0] == 0:
        return -2
    while p[0] != 0:
        if p[0] < 48 or p[0] > 57:       # not a decimal digit
            return -2
        n = n * 10 + (p[0] - 48)
        if n > INT32_MAX:
            return -2
        p += 1
    return n


cdef str _arrow_type_refusal(str protocol, const char *f, int depth):
    """Why a format is refused, and the way out."""
    s = _c_text(f)
    if s == "b":
        what, way = ("a bit-packed bool", "bits cannot be a DLPack view: cast it to uint8 "
                     "(pc.cast(arr, pa.uint8())) or store it as arrow.bool8 (pa.bool8())")
    elif s == "n":
        what, way = "the null type", "it has no values to view"
    elif s in ("u", "U", "vu"):
        what, way = (f"{_ARROW_NAMES[s]}, a string type", "strings have no tensor layout; "
                     "encode them as numbers first")
    elif s in ("z", "Z", "vz"):
        what, way = (f"{_ARROW_NAMES[s]}, a binary type", "variable-length bytes have no "
                     "tensor layout")
    elif s.startswith("w:"):
        what, way = ("a fixed-size binary type", "store the bytes as fixed_size_list<uint8> "
                     "instead (pa.FixedSizeListArray.from_arrays)")
    elif s.startswith("d:"):
        what, way = "a decimal type", "cast it to float64 first: pc.cast(arr, pa.float64())"
    elif s.startswith("ti"):
        what, way = ("an interval type", "an interval is several numbers per value; convert "
                     "it to a duration or to numbers first")
    elif s in ("tdD", "tts", "ttm"):
        what, way = ("a date/time type", "DLPack has no time types: cast it to int32 "
                     "(pc.cast(arr, pa.int32()); Polars: series.to_physical())")
    elif s.startswith("t"):
        what, way = ("a date/time/timestamp/duration type", "DLPack has no time types: cast it "
                     "to int64 (pc.cast(arr, pa.int64()); Polars: series.to_physical())")
    elif s in ("+l", "+L", "+vl", "+vL"):
        what, way = (f"{_ARROW_NAMES[s]}, a variable-size list", "lists of varying length "
                     "have no tensor shape; cast to a fixed-size list (pa.list_(type, n); "
                     "Polars: pl.Array(type, n))")
    elif s == "+s":
        what, way = ("a struct", "select one field first (arr.field(i); Polars: "
                     "series.struct.field(name))")
    elif s == "+m":
        what, way = "a map", "maps have no tensor layout"
    elif s.startswith("+u"):
        what, way = "a union", "unions have no tensor layout"
    elif s == "+r":
        what, way = "run-end encoded", "decode it first: pc.run_end_decode(arr)"
    else:
        what, way = "a format pydlpack does not know", "see the Arrow C data interface"
    return (f"{protocol}: field 'format' = {s!r} of {_at(depth)} is {what}, which DLPack "
            f"cannot carry; {way}")


cdef object _arrow_extension(const char *md, str protocol, int depth, ArrowExt *kind):
    """The canonical extension a schema's metadata names in kind: bool8, fixed_shape_tensor
    (whose JSON metadata is returned, copied out) or none; any other extension is refused."""
    cdef int32_t n, klen, vlen, nlen = 0, mlen = 0
    cdef const char *p = md
    cdef const char *key
    cdef const char *name = NULL
    cdef const char *meta = NULL
    cdef int32_t i
    kind[0] = EXT_NONE
    if md == NULL:
        return None
    memcpy(&n, p, 4)
    p += 4
    if n < 0 or n > ARROW_MAX_PAIRS:
        raise Refusal(f"{protocol}: field 'metadata' of {_at(depth)} says {n} key/value "
                      f"pairs (0 to {ARROW_MAX_PAIRS} expected): a corrupt metadata string")
    for i in range(n):
        memcpy(&klen, p, 4)
        if klen < 0 or klen > ARROW_MAX_ITEM:
            raise Refusal(f"{protocol}: field 'metadata' of {_at(depth)}: key {i} has "
                          f"length {klen}: a corrupt metadata string")
        key = p + 4
        p = key + klen
        memcpy(&vlen, p, 4)
        if vlen < 0 or vlen > ARROW_MAX_ITEM:
            raise Refusal(f"{protocol}: field 'metadata' of {_at(depth)}: value {i} has "
                          f"length {vlen}: a corrupt metadata string")
        if klen == 20 and memcmp(key, b"ARROW:extension:name", 20) == 0:
            name, nlen = p + 4, vlen
        elif klen == 24 and memcmp(key, b"ARROW:extension:metadata", 24) == 0:
            meta, mlen = p + 4, vlen
        p += 4 + vlen
    if name == NULL:
        return None
    if nlen == 11 and memcmp(name, b"arrow.bool8", 11) == 0:
        kind[0] = EXT_BOOL8
    elif nlen == 24 and memcmp(name, b"arrow.fixed_shape_tensor", 24) == 0:
        kind[0] = EXT_TENSOR
        return meta[:mlen] if meta != NULL else b""
    else:
        ext = name[:min(nlen, 100)].decode("utf-8", "replace")
        raise Refusal(f"{protocol}: {_at(depth)} has the extension type {ext!r}; pydlpack "
                      "reads arrow.bool8 and arrow.fixed_shape_tensor only (others give "
                      "their stored values a meaning DLPack cannot carry); to view the raw "
                      "storage, pass arr.storage")
    return None


cdef int _arrow_struct_column(ArrowSchema *s, str protocol) except -1:
    """A struct (record batch) stands for its column only when it has exactly one field."""
    cdef int64_t i, n = s.n_children
    if n == 1 and s.children != NULL and s.children[0] != NULL:
        return 0
    if n < 1:
        raise Refusal(f"{protocol}: the data is a struct (record batch) of {n} fields; "
                      "a tensor needs one column")
    if s.children == NULL:
        raise Refusal(f"{protocol}: field 'children' of the schema is NULL for "
                      f"n_children = {n}")
    names = []
    for i in range(min(n, 8)):
        names.append(_c_text(s.children[i].name) if s.children[i] != NULL else "?")
    if n == 1:
        raise Refusal(f"{protocol}: field 'children' of the schema holds a NULL pointer")
    shown = ", ".join(repr(x) for x in names) + (", …" if n > 8 else "")
    raise Refusal(f"{protocol}: the data is a struct (record batch / data frame) of {n} "
                  f"columns ({shown}); a tensor is one column: select it first (df[name], "
                  "df.select(name), batch.column(i), relation.select(name))")


cdef object _arrow_read_schema(ArrowSchema *top, _ArrowType *t, str protocol, bint unwrap_ok):
    """The column type a schema describes, into t (t.sizes set by its holder); returns the
    fixed_shape_tensor metadata (bytes), or None."""
    cdef ArrowSchema *s = top
    cdef const char *f
    cdef int64_t n
    cdef int depth = 0
    cdef ArrowExt ext
    cdef object tensor = None
    t.nlists = 0
    t.unwrap = False
    t.tensor = False
    if s.format == NULL:
        raise Refusal(f"{protocol}: field 'format' of the schema is NULL")
    if unwrap_ok and s.format[0] == b'+' and s.format[1] == b's' and s.format[2] == 0:
        _arrow_struct_column(s, protocol)
        s = s.children[0]
        t.unwrap = True
    while True:
        f = s.format
        if f == NULL:
            raise Refusal(f"{protocol}: field 'format' of {_at(depth)} is NULL")
        if s.dictionary != NULL:
            raise Refusal(f"{protocol}: {_at(depth)} is dictionary-encoded (indices "
                          f"{_c_text(f)!r}), which DLPack cannot carry; use its indices "
                          "(arr.indices; Polars: series.to_physical()) or decode it "
                          "(arr.dictionary_decode())")
        meta = _arrow_extension(s.metadata, protocol, depth, &ext)
        n = _arrow_list_size(f)
        if ext == EXT_TENSOR:
            if depth != 0:
                raise Refusal(f"{protocol}: {_at(depth)} is an arrow.fixed_shape_tensor "
                              "inside a list; only a column of tensors is read")
            if n < 0:
                raise Refusal(f"{protocol}: an arrow.fixed_shape_tensor stored as "
                              f"{_c_text(f)!r}, not as a fixed-size list ('+w:n')")
            t.tensor = True
            tensor = meta
        elif ext == EXT_BOOL8 and not (f[0] == b'c' and f[1] == 0):
            raise Refusal(f"{protocol}: an arrow.bool8 stored as {_c_text(f)!r}, not as "
                          "int8 ('c')")
        if n >= 0:
            if t.tensor and depth > 0:
                raise Refusal(f"{protocol}: an arrow.fixed_shape_tensor of nested lists; "
                              "its values must be a primitive type")
            if s.n_children != 1 or s.children == NULL or s.children[0] == NULL:
                raise Refusal(f"{protocol}: the fixed-size list at {_at(depth)} has "
                              f"n_children = {s.n_children} (children "
                              f"{'NULL' if s.children == NULL else 'set'}); it needs one "
                              "child")
            if t.nlists >= MAX_NDIM - 1:
                raise Refusal(f"{protocol}: fixed-size lists nested more than "
                              f"{MAX_NDIM - 1} deep")
            _arrow_list(t, n)
            s = s.children[0]
            depth += 1
            continue
        if n == -2:
            raise Refusal(f"{protocol}: field 'format' = {_c_text(f)!r} of {_at(depth)} "
                          "has a list size that is not an int32")
        if not _arrow_primitive(f, &t.dtype):
            raise Refusal(_arrow_type_refusal(protocol, f, depth))
        if ext == EXT_BOOL8:
            t.dtype.code = kDLBool
        return tensor


cdef tuple _arrow_tensor_meta(object meta, int64_t list_size, str protocol):
    """The (shape, permutation or None) of fixed_shape_tensor metadata, checked: JSON, shape
    int64s whose product is the list size, a permutation of 0 … k-1, k dimension names."""
    import json
    cdef int k
    where = f"{protocol}: arrow.fixed_shape_tensor metadata"
    try:
        d = json.loads(meta)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise Refusal(f"{where} {meta[:100]!r} is not JSON") from None
    if type(d) is not dict:
        raise Refusal(f"{where} is a JSON {type(d).__name__}, not an object")
    shape = d.get("shape")
    if type(shape) is not list or len(shape) >= MAX_NDIM or not all(
            type(x) is int and 0 <= x <= INT64_MAX for x in shape):
        raise Refusal(f"{where}: 'shape' = {str(shape)[:100]} is not a list of "
                      f"non-negative int64 (fewer than {MAX_NDIM})")
    k = len(shape)
    perm = d.get("permutation")
    if perm is not None and (type(perm) is not list or len(perm) != k or sorted(
            [p if type(p) is int else -1 for p in perm]) != list(range(k))):
        raise Refusal(f"{where}: 'permutation' = {str(perm)[:100]} is not a permutation "
                      f"of 0 … {k - 1}")
    names = d.get("dim_names")
    if names is not None and (type(names) is not list or len(names) != k
                              or not all(type(x) is str for x in names)):
        raise Refusal(f"{where}: 'dim_names' = {str(names)[:100]} is not {k} strings")
    cells = 1
    for x in shape:
        cells *= x
    if cells != list_size:
        raise Refusal(f"{where}: 'shape' = {shape} has {cells} elements, but the storage "
                      f"is a fixed-size list of {list_size}")
    return shape, perm


cdef void *_arrow_capsule(object capsule, const char *name, str protocol,
                          str what) except NULL:
    """The struct in a producer's capsule, which must have its PyCapsule interface name."""
    cdef const char *got
    if not PyCapsule_CheckExact(capsule):
        raise Refusal(f"{protocol}: the {what} is a {type(capsule).__name__} object, not a "
                      "PyCapsule")
    if not PyCapsule_IsValid(capsule, name):
        got = PyCapsule_GetName(capsule)
        shown = "NULL" if got == NULL else repr(_c_text(got))
        raise Refusal(f"{protocol}: the {what} capsule is named {shown}, not "
                      f"{(<bytes>name).decode()!r}")
    return PyCapsule_GetPointer(capsule, name)
